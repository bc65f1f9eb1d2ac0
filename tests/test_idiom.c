/*
 * test_idiom.c -- norms and activations written out in primitives
 * (ir/idiom.c): transformers' LlamaRMSNorm and GPT-2's NewGELUActivation as
 * PyTorch hands them over, each recognized in its operand orders and spellings
 * and planned as the op (the rms_norm a GEMM's prologue, the gelu_tanh a
 * GEMM's epilogue); near misses (another constant, another axis, an
 * intermediate used elsewhere) left as they are. Every plan is checked group
 * by group against the reference evaluator (kf_plan_check), and a compiled
 * program (which plans a copy, leaving the caller's graph in primitives) is
 * judged against the primitives' own reference.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_planned.h"
#include "kf_test.h"

#include "fusion/fusion.h"
#include "ir/ir.h"

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

/* The builder suites' fixture (kf_planned.h): a context, the graph the test
 * builds and its plan, checked group by group against the reference. */
typedef planned fixture;

static kf_plan *plan(fixture *f) { return planned_plan(f, NULL); }

/* "prefix" followed by i: the builder wants every input and output named. */
static const char *nm(char *buf, const char *prefix, int i) {
    snprintf(buf, 32, "%s%d", prefix, i);
    return buf;
}

/* How the RMSNorm is spelled. */
typedef struct rms_spelling {
    kf_dtype dtype;  /* x, g and the result (f32: no casts) */
    bool pow_square; /* pow(x, 2) instead of x * x */
    bool eps_first;  /* eps + mean instead of mean + eps */
    bool rs_first;   /* rsqrt(.) * x instead of x * rsqrt(.) */
    bool w_last;     /* cast(.) * w instead of w * cast(.) */
    int mean_axis;   /* -1: the last (the idiom) */
    double eps;
} rms_spelling;

/* w * cast<T>(x32 * rsqrt(mean(x32^2, -1) + eps)) of x [rows, k]; *rs gets
 * the rsqrt (for the near misses that use it elsewhere). */
static kf_tensor *rms_in_primitives(kf_graph *g, kf_tensor *x, kf_tensor *w, rms_spelling s,
                                    kf_tensor **rs_out) {
    bool cast = s.dtype != KF_DTYPE_F32;
    kf_tensor *x32 = cast ? kf_cast(g, x, KF_DTYPE_F32) : x;
    kf_tensor *sq =
        s.pow_square ? kf_pow(g, x32, kf_scalar(g, KF_DTYPE_F32, 2.0)) : kf_mul(g, x32, x32);
    kf_tensor *ms = kf_reduce_mean(g, sq, s.mean_axis, 1);
    kf_tensor *e = kf_scalar(g, KF_DTYPE_F32, s.eps);
    kf_tensor *var = s.eps_first ? kf_add(g, e, ms) : kf_add(g, ms, e);
    kf_tensor *rs = kf_rsqrt(g, var);
    kf_tensor *xn = s.rs_first ? kf_mul(g, rs, x32) : kf_mul(g, x32, rs);
    kf_tensor *c = cast ? kf_cast(g, xn, s.dtype) : xn;
    if (rs_out)
        *rs_out = rs;
    return s.w_last ? kf_mul(g, c, w) : kf_mul(g, w, c);
}

static const rms_spelling llama = {KF_DTYPE_BF16, false, false, false, false, -1, 1e-6};

/* The RMSNorm of transformers' LLaMA in bf16, in front of a projection: one
 * rms_norm (eps kept), one GEMM kernel with the norm as its prologue. */
static void test_llama_rms_norm_is_one_rms_norm_in_the_gemms_prologue(void **state) {
    fixture *f = *state;
    kf_graph *g = f->g;
    kf_tensor *x = kf_input(g, "x", KF_DTYPE_BF16, 2, DIMS(16, 64));
    kf_tensor *w = kf_input(g, "g", KF_DTYPE_BF16, 1, DIMS(64));
    kf_tensor *b = kf_input(g, "w", KF_DTYPE_BF16, 2, DIMS(64, 32));
    kf_tensor *n = rms_in_primitives(g, x, w, llama, NULL);
    kf_output(g, "y", kf_matmul(g, n, b, false, false));
    kf_plan *p = plan(f);
    assert_int_equal(p->idioms.rms_norm, 1);
    assert_int_equal(p->idioms.gelu_tanh, 0);
    assert_int_equal(n->op, KF_OP_RMS_NORM);
    assert_ptr_equal(n->src[0], x);
    assert_ptr_equal(n->src[1], w);
    assert_true(fabs(n->attr.eps - 1e-6) < 1e-12);
    assert_int_equal(kf_plan_kernel_count(p), 1);
    assert_non_null(strstr(kf_plan_group_of(p, n)->name, "rms_norm"));
}

/* Every operand order, pow for the square, an f32 graph with no casts. */
static void test_rms_norm_is_found_in_every_operand_order_and_spelling(void **state) {
    fixture *f = *state;
    kf_graph *g = f->g;
    for (int m = 0; m < 32; m++) {
        rms_spelling s = {
            m & 16 ? KF_DTYPE_F32 : KF_DTYPE_BF16, m & 1, m & 2, m & 4, m & 8, -1, 1e-5};
        char b[32];
        kf_tensor *x = kf_input(g, nm(b, "x", m), s.dtype, 3, DIMS(2, 8, 48));
        kf_tensor *w = kf_input(g, nm(b, "w", m), s.dtype, 1, DIMS(48));
        kf_output(g, nm(b, "y", m), rms_in_primitives(g, x, w, s, NULL));
    }
    kf_plan *p = plan(f);
    assert_int_equal(p->idioms.rms_norm, 32);
    assert_int_equal(kf_plan_kernel_count(p), 32); /* one row kernel each */
}

/* Near misses stay primitives and still plan and check: the mean over another
 * axis, the rsqrt also a graph output, a weight along another axis. */
static void test_rms_norm_near_misses_stay_primitives(void **state) {
    fixture *f = *state;
    kf_graph *g = f->g;
    rms_spelling axis0 = llama;
    axis0.mean_axis = 0;
    kf_tensor *x = kf_input(g, "x", KF_DTYPE_BF16, 2, DIMS(48, 48));
    kf_tensor *w = kf_input(g, "g", KF_DTYPE_BF16, 1, DIMS(48));
    kf_tensor *rs = NULL;
    kf_tensor *a = rms_in_primitives(g, x, w, axis0, NULL);
    kf_tensor *b = rms_in_primitives(g, x, w, llama, &rs);
    kf_output(g, "a", a);
    kf_output(g, "b", b);
    kf_output(g, "rs", rs);
    /* the weight broadcast along rows: [48, 1] */
    kf_tensor *wc = kf_input(g, "gc", KF_DTYPE_BF16, 2, DIMS(48, 1));
    kf_tensor *c = rms_in_primitives(g, x, wc, llama, NULL);
    kf_output(g, "c", c);
    kf_plan *p = plan(f);
    assert_int_equal(p->idioms.rms_norm, 0);
    assert_int_equal(a->op, KF_OP_MUL);
    assert_int_equal(b->op, KF_OP_MUL);
    assert_int_equal(c->op, KF_OP_MUL);
}

/* GPT-2's NewGELUActivation: (x * 0.5) * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
static kf_tensor *gelu_in_primitives(kf_graph *g, kf_tensor *x, int spelling, double k) {
    kf_dtype d = kf_tensor_dtype(x);
    kf_tensor *cube =
        spelling & 1 ? kf_mul(g, kf_mul(g, x, x), x) : kf_pow(g, x, kf_scalar(g, d, 3.0));
    kf_tensor *kc =
        spelling & 2 ? kf_mul(g, kf_scalar(g, d, k), cube) : kf_mul(g, cube, kf_scalar(g, d, k));
    kf_tensor *in = spelling & 4 ? kf_add(g, kc, x) : kf_add(g, x, kc);
    kf_tensor *t = kf_tanh(g, kf_mul(g, in, kf_scalar(g, d, 0.7978845608028654)));
    kf_tensor *tp = kf_add(g, t, kf_scalar(g, d, 1.0));
    if (spelling & 8) /* 0.5 * (x * (1 + tanh)) */
        return kf_mul(g, kf_scalar(g, d, 0.5), kf_mul(g, x, tp));
    return kf_mul(g, kf_mul(g, x, kf_scalar(g, d, 0.5)), tp);
}

/* After a GEMM and its bias: one GEMM kernel with gelu_tanh in its epilogue,
 * for each of 16 spellings. */
static void test_gelu_tanh_in_primitives_joins_the_gemms_epilogue(void **state) {
    fixture *f = *state;
    kf_graph *g = f->g;
    kf_tensor *x = kf_input(g, "x", KF_DTYPE_BF16, 2, DIMS(32, 64));
    kf_tensor *bias = kf_input(g, "b", KF_DTYPE_BF16, 1, DIMS(96));
    kf_tensor *act[16];
    for (int s = 0; s < 16; s++) {
        char b[32];
        kf_tensor *w = kf_input(g, nm(b, "w", s), KF_DTYPE_BF16, 2, DIMS(64, 96));
        kf_tensor *h = kf_add(g, kf_matmul(g, x, w, false, false), bias);
        act[s] = gelu_in_primitives(g, h, s, 0.044715);
        kf_output(g, nm(b, "y", s), act[s]);
    }
    kf_plan *p = plan(f);
    assert_int_equal(p->idioms.gelu_tanh, 16);
    assert_int_equal(kf_plan_kernel_count(p), 16);
    for (int s = 0; s < 16; s++) {
        assert_int_equal(act[s]->op, KF_OP_GELU_TANH);
        assert_int_equal(kf_plan_group_of(p, act[s])->kind, KF_GROUP_GEMM);
    }
}

/* Another constant, or the cube also used elsewhere: primitives stay. */
static void test_gelu_near_misses_stay_primitives(void **state) {
    fixture *f = *state;
    kf_graph *g = f->g;
    kf_tensor *x = kf_input(g, "x", KF_DTYPE_F32, 2, DIMS(8, 40));
    kf_tensor *a = gelu_in_primitives(g, x, 0, 0.04);
    kf_output(g, "a", a);
    kf_tensor *y = kf_exp(g, x);
    kf_tensor *cube = kf_pow(g, y, kf_scalar(g, KF_DTYPE_F32, 3.0));
    kf_tensor *kc = kf_mul(g, cube, kf_scalar(g, KF_DTYPE_F32, 0.044715));
    kf_tensor *t =
        kf_tanh(g, kf_mul(g, kf_add(g, y, kc), kf_scalar(g, KF_DTYPE_F32, 0.7978845608)));
    kf_tensor *b = kf_mul(g, kf_mul(g, y, kf_scalar(g, KF_DTYPE_F32, 0.5)),
                          kf_add(g, t, kf_scalar(g, KF_DTYPE_F32, 1.0)));
    kf_output(g, "b", b);
    kf_output(g, "cube", cube);
    kf_plan *p = plan(f);
    assert_int_equal(p->idioms.gelu_tanh, 0);
    assert_int_equal(a->op, KF_OP_MUL);
    assert_int_equal(b->op, KF_OP_MUL);
}

/* kf_compile plans a private copy: the caller's graph keeps its primitives,
 * and the program's outputs, judged against the primitives' reference on
 * fresh inputs (outputs poisoned first), pass. */
static void test_a_compiled_program_matches_the_primitives_reference(void **state) {
    fixture *f = *state;
    kf_graph *g = f->g;
    kf_tensor *x = kf_input(g, "x", KF_DTYPE_BF16, 2, DIMS(24, 80));
    kf_tensor *w = kf_input(g, "g", KF_DTYPE_BF16, 1, DIMS(80));
    kf_tensor *b = kf_input(g, "w", KF_DTYPE_BF16, 2, DIMS(80, 40));
    kf_tensor *n = rms_in_primitives(g, x, w, llama, NULL);
    kf_tensor *h = kf_matmul(g, n, b, false, false);
    kf_tensor *y = gelu_in_primitives(g, h, 0, 0.044715);
    kf_output(g, "y", y);
    assert_int_equal(kf_graph_status(g), KF_OK);
    kf_program *prog = NULL;
    kf_status st = kf_compile(f->ctx, g, &prog);
    if (st == KF_ERR_UNSUPPORTED) { /* a build without LLVM has no CPU backend */
        skip();
    }
    assert_int_equal(st, KF_OK);
    assert_int_equal(n->op, KF_OP_MUL); /* the caller's graph is unchanged */
    assert_int_equal(y->op, KF_OP_MUL);
    kf_test_rng r = kf_test_rng_make(7);
    size_t nx = 24 * 80, nw = 80, nb = 80 * 40, ny = 24 * 40;
    uint16_t *bx = malloc(2 * nx), *bw = malloc(2 * nw), *bb = malloc(2 * nb), *by = malloc(2 * ny);
    assert_true(bx && bw && bb && by);
    for (int rep = 0; rep < 3; rep++) {
        kf_test_fill(bx, KF_DTYPE_BF16, nx, &r, -2.0, 2.0);
        kf_test_fill(bw, KF_DTYPE_BF16, nw, &r, 0.5, 1.5);
        kf_test_fill(bb, KF_DTYPE_BF16, nb, &r, -0.3, 0.3);
        kf_test_poison(by, KF_DTYPE_BF16, ny);
        kf_binding in[] = {{"x", bx, 2 * nx}, {"g", bw, 2 * nw}, {"w", bb, 2 * nb}};
        kf_binding out[] = {{"y", by, 2 * ny}};
        assert_int_equal(kf_program_run(prog, in, 3, out, 1, NULL), KF_OK);
        kf_check_result res;
        assert_int_equal(kf_graph_check(g, in, 3, out, 1, &res), KF_OK);
        if (!res.pass)
            fail_msg("y: error %g against the exact value > bound %g (reference's own %g)", res.err,
                     res.bound, res.ref_err);
    }
    kf_program_destroy(prog);
    free(bx);
    free(bw);
    free(bb);
    free(by);
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, planned_setup, planned_teardown)
        T(test_llama_rms_norm_is_one_rms_norm_in_the_gemms_prologue),
        T(test_rms_norm_is_found_in_every_operand_order_and_spelling),
        T(test_rms_norm_near_misses_stay_primitives),
        T(test_gelu_tanh_in_primitives_joins_the_gemms_epilogue),
        T(test_gelu_near_misses_stay_primitives),
        T(test_a_compiled_program_matches_the_primitives_reference),
#undef T
    };
    return kf_test_run(tests);
}
