/*
 * test_ir.c -- the graph builder and its shape/dtype inference, the sticky
 * error contract, the verifier, contexts and status strings.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ir/ir.h"
#include "kfuse.h"

typedef struct fixture {
    kf_ctx *ctx;
    kf_graph *g;
} fixture;

static int setup(void **state) {
    static fixture f;
    memset(&f, 0, sizeof f);
    if (kf_ctx_create(NULL, &f.ctx) != KF_OK || kf_graph_create(f.ctx, &f.g) != KF_OK)
        return -1;
    *state = &f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    kf_graph_destroy(f->g);
    kf_ctx_destroy(f->ctx);
    return 0;
}

#define G (((fixture *)*state)->g)
#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

static kf_tensor *in(kf_graph *g, const char *name, kf_dtype d, int rank, ...) {
    int64_t dims[KF_MAX_RANK];
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++)
        dims[i] = va_arg(ap, int);
    va_end(ap);
    return kf_input(g, name, d, rank, dims);
}

/* Asserts t has dtype d and the given dims. */
static void assert_type(const kf_tensor *t, kf_dtype d, int rank, ...) {
    assert_non_null(t);
    assert_int_equal(kf_tensor_dtype(t), d);
    assert_int_equal(kf_tensor_rank(t), rank);
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++)
        assert_int_equal(kf_tensor_dim(t, i), va_arg(ap, int));
    va_end(ap);
}

/* Asserts the graph failed with `status` and a message containing each fragment. */
static void assert_error(const kf_graph *g, kf_status status, const char *frag1, const char *frag2) {
    assert_int_equal(kf_graph_status(g), status);
    const char *msg = kf_graph_error(g);
    if (frag1 && !strstr(msg, frag1))
        fail_msg("message '%s' lacks '%s'", msg, frag1);
    if (frag2 && !strstr(msg, frag2))
        fail_msg("message '%s' lacks '%s'", msg, frag2);
}

/* ---------------------------------------------------------------- inference */

static void test_unary_ops_keep_shape_and_dtype(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_BF16, 2, 3, 5);
    kf_tensor *(*fns[])(kf_graph *, kf_tensor *) = {
        kf_neg,  kf_abs,  kf_exp,       kf_log,  kf_sqrt, kf_rsqrt, kf_tanh, kf_sigmoid,
        kf_relu, kf_gelu, kf_gelu_tanh, kf_silu, kf_erf,  kf_sin,   kf_cos};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        assert_type(fns[i](G, x), KF_DTYPE_BF16, 2, 3, 5);
    assert_int_equal(kf_graph_status(G), KF_OK);
}

static void test_binary_ops_broadcast_numpy_style(void **state) {
    kf_tensor *a = in(G, "a", KF_DTYPE_F32, 3, 2, 1, 4);
    kf_tensor *b = in(G, "b", KF_DTYPE_F32, 2, 3, 1);
    kf_tensor *s = kf_scalar(G, KF_DTYPE_F32, 2.0);
    kf_tensor *(*fns[])(kf_graph *, kf_tensor *, kf_tensor *) = {kf_add, kf_sub, kf_mul, kf_div,
                                                                  kf_max, kf_min, kf_pow};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        assert_type(fns[i](G, a, b), KF_DTYPE_F32, 3, 2, 3, 4);
        assert_type(fns[i](G, s, a), KF_DTYPE_F32, 3, 2, 1, 4);
    }
    assert_type(kf_add(G, s, s), KF_DTYPE_F32, 0);
}

static void test_comparisons_return_bool(void **state) {
    kf_tensor *a = in(G, "a", KF_DTYPE_I32, 2, 4, 1);
    kf_tensor *b = in(G, "b", KF_DTYPE_I32, 1, 6);
    kf_tensor *(*fns[])(kf_graph *, kf_tensor *, kf_tensor *) = {kf_eq, kf_ne, kf_lt,
                                                                  kf_le, kf_gt, kf_ge};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        assert_type(fns[i](G, a, b), KF_DTYPE_BOOL, 2, 4, 6);
    kf_tensor *c = kf_eq(G, a, b);
    assert_type(kf_eq(G, c, c), KF_DTYPE_BOOL, 2, 4, 6);
}

static void test_where_broadcasts_all_three_operands(void **state) {
    kf_tensor *q = kf_iota(G, KF_DTYPE_I32, 2, (int64_t[]){8, 8}, 0);
    kf_tensor *k = kf_iota(G, KF_DTYPE_I32, 2, (int64_t[]){8, 8}, -1);
    kf_tensor *mask = kf_ge(G, q, k);
    kf_tensor *s = in(G, "s", KF_DTYPE_F16, 3, 2, 8, 8);
    kf_tensor *ninf = kf_scalar(G, KF_DTYPE_F16, -1.0 / 0.0);
    assert_type(kf_where(G, mask, s, ninf), KF_DTYPE_F16, 3, 2, 8, 8);
    assert_int_equal(k->attr.axis, 1);
}

static void test_cast_changes_only_dtype(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 1, 7);
    for (int d = 0; d < KF_DTYPE_COUNT; d++)
        if (d != KF_DTYPE_I64) /* not a cast's target: test_cast_to_i64_is_refused */
            assert_type(kf_cast(G, x, (kf_dtype)d), (kf_dtype)d, 1, 7);
}

static void test_reductions_drop_or_keep_the_axis(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 3, 2, 3, 4);
    assert_type(kf_reduce_sum(G, x, 0, 0), KF_DTYPE_F32, 2, 3, 4);
    assert_type(kf_reduce_max(G, x, 1, 1), KF_DTYPE_F32, 3, 2, 1, 4);
    assert_type(kf_reduce_mean(G, x, -1, 0), KF_DTYPE_F32, 2, 2, 3);
    kf_tensor *v = in(G, "v", KF_DTYPE_I32, 1, 5);
    assert_type(kf_reduce_sum(G, v, 0, 0), KF_DTYPE_I32, 0);
}

static void test_softmax_and_norms_keep_shape_and_normalize_axis(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 3, 2, 3, 4);
    kf_tensor *w = in(G, "w", KF_DTYPE_F32, 1, 4);
    kf_tensor *b = in(G, "b", KF_DTYPE_F32, 1, 4);
    kf_tensor *w3 = in(G, "w3", KF_DTYPE_F32, 1, 3);
    kf_tensor *sm = kf_softmax(G, x, -1);
    assert_type(sm, KF_DTYPE_F32, 3, 2, 3, 4);
    assert_int_equal(sm->attr.axis, 2);
    kf_tensor *ln = kf_layer_norm(G, x, w, b, -1, 1e-5);
    assert_type(ln, KF_DTYPE_F32, 3, 2, 3, 4);
    assert_int_equal(ln->attr.axis, 2);
    assert_true(ln->attr.eps == 1e-5);
    assert_type(kf_rms_norm(G, x, w3, 1, 1e-6), KF_DTYPE_F32, 3, 2, 3, 4);
}

static void test_matmul_transposes_and_broadcasts_batch(void **state) {
    kf_tensor *a = in(G, "a", KF_DTYPE_BF16, 4, 2, 1, 8, 16);
    kf_tensor *b = in(G, "b", KF_DTYPE_BF16, 3, 3, 16, 32);
    assert_type(kf_matmul(G, a, b, 0, 0), KF_DTYPE_BF16, 4, 2, 3, 8, 32);
    kf_tensor *at = in(G, "at", KF_DTYPE_BF16, 2, 16, 8);
    kf_tensor *bt = in(G, "bt", KF_DTYPE_BF16, 2, 32, 16);
    assert_type(kf_matmul(G, at, bt, 1, 1), KF_DTYPE_BF16, 2, 8, 32);
    kf_tensor *m = kf_matmul(G, at, b, 1, 0);
    assert_type(m, KF_DTYPE_BF16, 3, 3, 8, 32);
    assert_true(m->attr.transpose_a);
    assert_false(m->attr.transpose_b);
}

static void test_reshape_infers_one_dim_and_permute_reorders(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 2, 6, 8);
    assert_type(kf_reshape(G, x, 3, (int64_t[]){2, -1, 4}), KF_DTYPE_F32, 3, 2, 6, 4);
    assert_type(kf_reshape(G, x, 1, (int64_t[]){48}), KF_DTYPE_F32, 1, 48);
    kf_tensor *s = kf_scalar(G, KF_DTYPE_F32, 1);
    assert_type(kf_reshape(G, s, 2, (int64_t[]){1, 1}), KF_DTYPE_F32, 2, 1, 1);
    kf_tensor *y = in(G, "y", KF_DTYPE_F32, 3, 2, 3, 4);
    kf_tensor *p = kf_permute(G, y, (int[]){2, 0, 1});
    assert_type(p, KF_DTYPE_F32, 3, 4, 2, 3);
    assert_type(kf_transpose(G, y, -1, -2), KF_DTYPE_F32, 3, 2, 4, 3);
}

static void test_sources_carry_shape_dtype_and_data(void **state) {
    float data[6] = {1, 2, 3, 4, 5, 6};
    kf_tensor *c = kf_constant(G, KF_DTYPE_F32, 2, (int64_t[]){2, 3}, data);
    assert_type(c, KF_DTYPE_F32, 2, 2, 3);
    data[0] = 99; /* copied, not referenced */
    assert_true(((float *)c->data)[0] == 1.0f);
    kf_tensor *s = kf_scalar(G, KF_DTYPE_BF16, 0.125);
    assert_type(s, KF_DTYPE_BF16, 0);
    assert_int_equal(*(uint16_t *)s->data, kf_f32_to_bf16(0.125f));
    kf_tensor *i = kf_iota(G, KF_DTYPE_F32, 3, (int64_t[]){2, 3, 4}, 1);
    assert_type(i, KF_DTYPE_F32, 3, 2, 3, 4);
    kf_tensor *x = in(G, "x", KF_DTYPE_BOOL, 0);
    assert_type(x, KF_DTYPE_BOOL, 0);
    assert_string_equal(kf_tensor_name(x), "x");
    assert_int_equal(kf_graph_input_count(G), 1);
    assert_ptr_equal(kf_graph_input(G, 0), x);
    assert_null(kf_graph_input(G, 1));
    assert_int_equal(kf_tensor_numel(i), 24);
    assert_int_equal(kf_tensor_dim(i, -1), 4);
    assert_int_equal(kf_tensor_dim(i, 3), -1);
}

/* ---------------------------------------------------------------- errors */

static void test_binary_rejects_shapes_that_do_not_broadcast(void **state) {
    kf_tensor *a = in(G, "a", KF_DTYPE_F32, 2, 8, 256);
    kf_tensor *b = in(G, "b", KF_DTYPE_F32, 1, 3);
    assert_null(kf_add(G, a, b));
    assert_error(G, KF_ERR_SHAPE, "add: operand b f32[3] does not broadcast",
                 "operand a f32[8, 256]");
}

static void test_binary_rejects_mixed_dtypes_and_says_to_cast(void **state) {
    kf_tensor *a = in(G, "a", KF_DTYPE_F32, 1, 4);
    kf_tensor *b = in(G, "b", KF_DTYPE_F16, 1, 4);
    assert_null(kf_mul(G, a, b));
    assert_error(G, KF_ERR_DTYPE, "mul: operand a f32[4] and operand b f16[4]", "insert a cast");
}

static void test_float_ops_reject_integer_operands(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_I32, 1, 4);
    assert_null(kf_gelu(G, x));
    assert_error(G, KF_ERR_DTYPE, "gelu: operand x i32[4] has dtype i32", "f32, f16, bf16, f64");
}

static void test_where_rejects_a_non_bool_condition(void **state) {
    kf_tensor *c = in(G, "c", KF_DTYPE_F32, 1, 4);
    assert_null(kf_where(G, c, c, c));
    assert_error(G, KF_ERR_DTYPE, "where: operand cond f32[4] has dtype f32", "bool");
}

static void test_where_rejects_a_third_operand_that_does_not_broadcast(void **state) {
    kf_tensor *c = in(G, "c", KF_DTYPE_BOOL, 2, 4, 4);
    kf_tensor *a = in(G, "a", KF_DTYPE_F32, 1, 4);
    kf_tensor *b = in(G, "b", KF_DTYPE_F32, 1, 3);
    assert_null(kf_where(G, c, a, b));
    assert_error(G, KF_ERR_SHAPE, "where: operand b f32[3]", "the broadcast shape [4, 4]");
}

static void test_reduction_rejects_axis_out_of_range(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 2, 2, 3);
    assert_null(kf_reduce_sum(G, x, 2, 0));
    assert_error(G, KF_ERR_AXIS, "reduce_sum: axis 2 is out of range", "f32[2, 3]");
}

static void test_softmax_rejects_axis_of_a_scalar(void **state) {
    kf_tensor *s = kf_scalar(G, KF_DTYPE_F32, 1);
    assert_null(kf_softmax(G, s, -1));
    assert_error(G, KF_ERR_AXIS, "softmax: axis -1 is out of range", "f32[]");
}

static void test_norm_rejects_weight_of_wrong_length(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 2, 4, 64);
    kf_tensor *w = in(G, "w", KF_DTYPE_F32, 1, 32);
    assert_null(kf_rms_norm(G, x, w, -1, 1e-6));
    assert_error(G, KF_ERR_SHAPE, "rms_norm: operand weight f32[32] must be rank 1 of length 64",
                 "f32[4, 64]");
}

static void test_clamp_keeps_shape_and_dtype_and_rejects_bad_bounds_by_name(void **state) {
    kf_ctx *ctx = ((fixture *)*state)->ctx;
    assert_type(kf_clamp(G, in(G, "x", KF_DTYPE_BF16, 2, 3, 5), -1, 1), KF_DTYPE_BF16, 2, 3, 5);
    assert_type(kf_clamp(G, in(G, "i", KF_DTYPE_I32, 1, 4), -INFINITY, 7), KF_DTYPE_I32, 1, 4);
    assert_int_equal(kf_graph_status(G), KF_OK);
    static const struct {
        kf_dtype d;
        double lo, hi;
        kf_status st;
        const char *frag1, *frag2;
    } bad[] = {
        {KF_DTYPE_F32, NAN, 1, KF_ERR_INVALID_ARGUMENT, "clamp: min is NaN", NULL},
        {KF_DTYPE_F32, 0, NAN, KF_ERR_INVALID_ARGUMENT, "clamp: max is NaN", NULL},
        {KF_DTYPE_F32, 2, 1, KF_ERR_INVALID_ARGUMENT, "clamp: min 2 is greater than max 1", NULL},
        {KF_DTYPE_F32, -INFINITY, INFINITY, KF_ERR_INVALID_ARGUMENT, "min is -inf and max is inf",
         "at least one bound"},
        {KF_DTYPE_I32, 0.5, 4, KF_ERR_INVALID_ARGUMENT, "clamp: min 0.5 is not a whole number",
         "operand x i32[4, 8] is i32"},
        {KF_DTYPE_I32, 0, 2.25, KF_ERR_INVALID_ARGUMENT, "clamp: max 2.25", NULL},
        {KF_DTYPE_BOOL, 0, 1, KF_ERR_DTYPE, "clamp: operand x bool[4, 8] has dtype bool", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kf_graph *g;
        assert_int_equal(kf_graph_create(ctx, &g), KF_OK);
        assert_null(kf_clamp(g, in(g, "x", bad[i].d, 2, 4, 8), bad[i].lo, bad[i].hi));
        assert_error(g, bad[i].st, bad[i].frag1, bad[i].frag2);
        kf_graph_destroy(g);
    }
}

static void test_expand_broadcasts_to_the_target_and_names_the_dim_it_cannot_widen(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_BF16, 2, 3, 1);
    assert_type(kf_expand(G, x, 2, DIMS(3, 5)), KF_DTYPE_BF16, 2, 3, 5);
    assert_type(kf_expand(G, x, 4, DIMS(2, 4, 3, 7)), KF_DTYPE_BF16, 4, 2, 4, 3, 7);
    assert_type(kf_expand(G, kf_scalar(G, KF_DTYPE_I32, 1), 1, DIMS(6)), KF_DTYPE_I32, 1, 6);
    assert_int_equal(kf_graph_status(G), KF_OK);
    assert_null(kf_expand(G, x, 2, DIMS(4, 5)));
    assert_error(G, KF_ERR_SHAPE,
                 "expand: dim 0 of operand x bf16[3, 1] is 3, which cannot become 4",
                 "only a dim of 1 expands");
}

static void test_expand_rejects_fewer_dims_and_bad_dims(void **state) {
    kf_ctx *ctx = ((fixture *)*state)->ctx;
    static const struct {
        int rank;
        int64_t dims[3];
        const char *frag;
    } bad[] = {
        {1, {5}, "expand: the target has 1 dims, fewer than operand x f32[3, 1]"},
        {2, {3, 0}, "expand: dim 1 is 0; every dim must be positive"},
        {9, {3, 1, 1}, "expand: rank 9 is out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kf_graph *g;
        assert_int_equal(kf_graph_create(ctx, &g), KF_OK);
        assert_null(kf_expand(g, in(g, "x", KF_DTYPE_F32, 2, 3, 1), bad[i].rank, bad[i].dims));
        assert_error(g, KF_ERR_SHAPE, bad[i].frag, NULL);
        kf_graph_destroy(g);
    }
}

/* slice follows Python's rules: negative bounds count from the end, both
 * clamp into the dim, the length rounds up by the step. */
static void test_slice_normalizes_bounds_the_python_way_and_refuses_empty_and_bad_steps(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_BF16, 3, 4, 10, 6);
    assert_type(kf_slice(G, x, 1, 2, 7, 1), KF_DTYPE_BF16, 3, 4, 5, 6);
    assert_type(kf_slice(G, x, -2, -4, INT64_MAX, 1), KF_DTYPE_BF16, 3, 4, 4, 6);
    assert_type(kf_slice(G, x, 1, 1, 100, 3), KF_DTYPE_BF16, 3, 4, 3, 6); /* 1, 4, 7 */
    assert_type(kf_slice(G, x, 0, -100, 2, 1), KF_DTYPE_BF16, 3, 2, 10, 6);
    kf_tensor *s = kf_slice(G, x, 1, -9, -1, 4); /* 1, 5 */
    assert_type(s, KF_DTYPE_BF16, 3, 4, 2, 6);
    assert_int_equal(s->attr.start, 1);
    assert_int_equal(s->attr.step, 4);
    assert_int_equal(kf_graph_status(G), KF_OK);
    static const struct {
        int axis;
        int64_t start, stop, step;
        kf_status st;
        const char *frag;
    } bad[] = {
        {3, 0, 1, 1, KF_ERR_AXIS, "slice: axis 3 is out of range for operand x f32[4, 10, 6]"},
        {1, 5, 5, 1, KF_ERR_SHAPE, "start 5, stop 5 select nothing along axis 1"},
        {1, -2, 3, 1, KF_ERR_SHAPE, "(normalized: 8..3); kfuse has no empty tensors"},
        {1, 0, 4, 0, KF_ERR_INVALID_ARGUMENT, "slice: step 0 is not positive"},
        {1, 4, 0, -1, KF_ERR_INVALID_ARGUMENT, "slice: step -1 is not positive"},
    };
    kf_ctx *ctx = ((fixture *)*state)->ctx;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kf_graph *g;
        assert_int_equal(kf_graph_create(ctx, &g), KF_OK);
        kf_tensor *y = in(g, "x", KF_DTYPE_F32, 3, 4, 10, 6);
        assert_null(kf_slice(g, y, bad[i].axis, bad[i].start, bad[i].stop, bad[i].step));
        assert_error(g, bad[i].st, bad[i].frag, NULL);
        kf_graph_destroy(g);
    }
}

static void test_concat_adds_the_axis_and_names_the_dim_that_differs(void **state) {
    kf_tensor *a = in(G, "a", KF_DTYPE_I32, 2, 3, 4), *b = in(G, "b", KF_DTYPE_I32, 2, 3, 5);
    kf_tensor *c = in(G, "c", KF_DTYPE_I32, 2, 3, 1);
    kf_tensor *parts[3] = {a, b, c};
    assert_type(kf_concat(G, 3, parts, -1), KF_DTYPE_I32, 2, 3, 10);
    assert_true(kf_concat(G, 1, parts, 0) == a);
    kf_tensor *d = in(G, "d", KF_DTYPE_I32, 2, 2, 4);
    kf_tensor *ad[2] = {a, d};
    assert_type(kf_concat(G, 2, ad, 0), KF_DTYPE_I32, 2, 5, 4);
    assert_int_equal(kf_graph_status(G), KF_OK);
    assert_null(kf_concat(G, 2, ad, 1));
    assert_error(G, KF_ERR_SHAPE,
                 "concat: dim 0 of operand b i32[2, 4] is 2, of operand a i32[3, 4] 3; every dim "
                 "but axis 1 must agree",
                 NULL);
    kf_ctx *ctx = ((fixture *)*state)->ctx;
    kf_graph *g;
    assert_int_equal(kf_graph_create(ctx, &g), KF_OK);
    kf_tensor *x = in(g, "x", KF_DTYPE_F32, 2, 3, 4), *y = in(g, "y", KF_DTYPE_F16, 2, 3, 4);
    kf_tensor *xy[2] = {x, y};
    assert_null(kf_concat(g, 2, xy, 0));
    assert_error(g, KF_ERR_DTYPE, "concat: operand a f32[3, 4] and operand b f16[3, 4]", NULL);
    kf_graph_destroy(g);
    assert_int_equal(kf_graph_create(ctx, &g), KF_OK);
    x = in(g, "x", KF_DTYPE_F32, 2, 3, 4);
    kf_tensor *z = in(g, "z", KF_DTYPE_F32, 1, 4), *xz[2] = {x, z};
    assert_null(kf_concat(g, 2, xz, 2));
    assert_error(g, KF_ERR_AXIS, "concat: axis 2 is out of range for operand a f32[3, 4]", NULL);
    kf_graph_destroy(g);
    assert_int_equal(kf_graph_create(ctx, &g), KF_OK);
    x = in(g, "x", KF_DTYPE_F32, 2, 3, 4);
    z = in(g, "z", KF_DTYPE_F32, 1, 4);
    xz[0] = x;
    xz[1] = z;
    assert_null(kf_concat(g, 2, xz, 0));
    assert_error(g, KF_ERR_SHAPE, "concat: operand b f32[4] has rank 1, operand a f32[3, 4] rank 2",
                 NULL);
    kf_graph_destroy(g);
}

/* No op computes i64 (an index dtype for inputs and constants): a cast to it
 * is refused by name, or the backends would store it in another width (the
 * CPU target wrote 4-byte values into the 8-byte output before). */
static void test_cast_to_i64_is_refused(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 1, 4);
    assert_null(kf_cast(G, x, KF_DTYPE_I64));
    assert_error(G, KF_ERR_DTYPE, "cast: operand x f32[4]: a cast to i64", NULL);
}

static void test_gather_puts_the_index_dims_in_place_of_the_axis(void **state) {
    kf_tensor *t = in(G, "t", KF_DTYPE_F16, 3, 5, 7, 9);
    kf_tensor *i32 = in(G, "i", KF_DTYPE_I32, 2, 2, 3), *i64 = in(G, "j", KF_DTYPE_I64, 1, 4);
    assert_type(kf_gather(G, t, i32, 0), KF_DTYPE_F16, 4, 2, 3, 7, 9);
    assert_type(kf_gather(G, t, i32, 1), KF_DTYPE_F16, 4, 5, 2, 3, 9);
    assert_type(kf_gather(G, t, i64, -1), KF_DTYPE_F16, 3, 5, 7, 4);
    assert_type(kf_gather(G, t, kf_scalar(G, KF_DTYPE_I32, 2), 1), KF_DTYPE_F16, 2, 5, 9);
    assert_int_equal(kf_graph_status(G), KF_OK);
    /* i64 is for indices: an elementwise op refuses it */
    assert_null(kf_add(G, i64, i64));
    assert_error(G, KF_ERR_DTYPE, "add: operand a i64[4] has dtype i64", NULL);
    kf_ctx *ctx = ((fixture *)*state)->ctx;
    static const struct {
        kf_dtype idx;
        int axis;
        kf_status st;
        const char *frag;
    } bad[] = {
        {KF_DTYPE_F32, 0, KF_ERR_DTYPE, "gather: operand idx f32[2] has dtype f32; gather takes i32, i64"},
        {KF_DTYPE_BOOL, 0, KF_ERR_DTYPE, "operand idx bool[2] has dtype bool"},
        {KF_DTYPE_I32, 3, KF_ERR_AXIS, "gather: axis 3 is out of range for operand table f32[5, 7, 9]"},
        {KF_DTYPE_I64, -4, KF_ERR_AXIS, "gather: axis -4 is out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kf_graph *g;
        assert_int_equal(kf_graph_create(ctx, &g), KF_OK);
        kf_tensor *tb = in(g, "t", KF_DTYPE_F32, 3, 5, 7, 9);
        assert_null(kf_gather(g, tb, in(g, "i", bad[i].idx, 1, 2), bad[i].axis));
        assert_error(g, bad[i].st, bad[i].frag, NULL);
        kf_graph_destroy(g);
    }
    kf_graph *g;
    assert_int_equal(kf_graph_create(ctx, &g), KF_OK);
    kf_tensor *tb = in(g, "t", KF_DTYPE_F32, 4, 2, 2, 2, 2);
    assert_null(kf_gather(g, tb, in(g, "i", KF_DTYPE_I32, 6, 1, 1, 1, 1, 1, 2), 0));
    assert_error(g, KF_ERR_SHAPE, "would have rank 9, more than 8", NULL);
    kf_graph_destroy(g);
}

static void test_norm_rejects_negative_or_nan_eps(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 2, 4, 8);
    kf_tensor *w = in(G, "w", KF_DTYPE_F32, 1, 8);
    assert_null(kf_layer_norm(G, x, w, w, -1, -1.0));
    assert_error(G, KF_ERR_INVALID_ARGUMENT, "layer_norm: eps", "finite and >= 0");
}

static void test_norm_rejects_infinite_or_nan_eps_of_either_norm(void **state) {
    kf_ctx *ctx = ((fixture *)*state)->ctx;
    const double bad[] = {NAN, INFINITY, -INFINITY, -1e-300};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int rms = 0; rms < 2; rms++) {
            kf_graph *g;
            assert_int_equal(kf_graph_create(ctx, &g), KF_OK);
            kf_tensor *x = in(g, "x", KF_DTYPE_F32, 2, 4, 8);
            kf_tensor *w = in(g, "w", KF_DTYPE_F32, 1, 8);
            assert_null(rms ? kf_rms_norm(g, x, w, -1, bad[i])
                            : kf_layer_norm(g, x, w, w, -1, bad[i]));
            assert_error(g, KF_ERR_INVALID_ARGUMENT, rms ? "rms_norm: eps" : "layer_norm: eps",
                         "finite and >= 0");
            kf_graph_destroy(g);
        }
    }
}

/* A boolean parameter is 0 or 1: 7 (or -1, or a pointer's low bits) is a
 * caller's mistake, refused with a message that names the parameter. */
static void test_boolean_flags_take_only_0_or_1_and_the_error_names_the_flag(void **state) {
    kf_ctx *ctx = ((fixture *)*state)->ctx;
    struct {
        int which, value;
        const char *msg;
    } cases[] = {
        {0, 7, "reduce_sum: keepdim is 7; it takes 0 (false) or 1 (true)"},
        {1, -1, "reduce_max: keepdim is -1"},
        {2, 2, "reduce_mean: keepdim is 2"},
        {3, 7, "matmul: transpose_a is 7; it takes 0 (false) or 1 (true)"},
        {4, 7, "matmul: transpose_b is 7"},
        {4, INT32_MIN, "matmul: transpose_b is -2147483648"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kf_graph *g;
        assert_int_equal(kf_graph_create(ctx, &g), KF_OK);
        kf_tensor *x = in(g, "x", KF_DTYPE_F32, 2, 8, 8);
        int v = cases[i].value;
        kf_tensor *t = NULL;
        switch (cases[i].which) {
        case 0:
            t = kf_reduce_sum(g, x, 0, v);
            break;
        case 1:
            t = kf_reduce_max(g, x, 0, v);
            break;
        case 2:
            t = kf_reduce_mean(g, x, 0, v);
            break;
        case 3:
            t = kf_matmul(g, x, x, v, 0);
            break;
        default:
            t = kf_matmul(g, x, x, 0, v);
            break;
        }
        assert_null(t);
        assert_error(g, KF_ERR_INVALID_ARGUMENT, cases[i].msg, NULL);
        kf_graph_destroy(g);
    }
    /* 0 and 1 still work, and 1 means what true did. */
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 2, 8, 4);
    assert_type(kf_reduce_sum(G, x, 1, 1), KF_DTYPE_F32, 2, 8, 1);
    assert_type(kf_matmul(G, x, x, 1, 0), KF_DTYPE_F32, 2, 4, 4);
    assert_type(kf_matmul(G, x, x, 0, 1), KF_DTYPE_F32, 2, 8, 8);
}

static void test_norm_rejects_weight_of_another_dtype(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_BF16, 2, 4, 8);
    kf_tensor *w = in(G, "w", KF_DTYPE_F32, 1, 8);
    assert_null(kf_rms_norm(G, x, w, -1, 1e-6));
    assert_error(G, KF_ERR_DTYPE, "rms_norm: operand x bf16[4, 8] and operand weight f32[8]",
                 NULL);
}

static void test_matmul_rejects_mismatched_inner_dims(void **state) {
    kf_tensor *a = in(G, "a", KF_DTYPE_F32, 2, 8, 64);
    kf_tensor *b = in(G, "b", KF_DTYPE_F32, 2, 32, 256);
    assert_null(kf_matmul(G, a, b, 0, 0));
    assert_error(G, KF_ERR_SHAPE, "matmul: inner dims differ: operand a f32[8, 64] gives K=64",
                 "operand b f32[32, 256] gives K=32");
}

static void test_matmul_rejects_vectors_and_integer_dtypes(void **state) {
    kf_tensor *v = in(G, "v", KF_DTYPE_F32, 1, 8);
    assert_null(kf_matmul(G, v, v, 0, 0));
    assert_error(G, KF_ERR_SHAPE, "matmul: operands need rank >= 2", "reshape a vector");
}

static void test_matmul_rejects_integer_dtype(void **state) {
    kf_tensor *m = in(G, "m", KF_DTYPE_I32, 2, 8, 8);
    assert_null(kf_matmul(G, m, m, 0, 0));
    assert_error(G, KF_ERR_DTYPE, "matmul: operand a i32[8, 8] has dtype i32", "insert a cast");
}

static void test_matmul_rejects_batch_dims_that_do_not_broadcast(void **state) {
    kf_tensor *a = in(G, "a", KF_DTYPE_F32, 3, 2, 4, 4);
    kf_tensor *b = in(G, "b", KF_DTYPE_F32, 3, 3, 4, 4);
    assert_null(kf_matmul(G, a, b, 0, 0));
    assert_error(G, KF_ERR_SHAPE, "matmul: batch dims", "do not broadcast");
}

static void test_reshape_rejects_a_wrong_element_count(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 2, 6, 8);
    assert_null(kf_reshape(G, x, 2, (int64_t[]){5, 10}));
    assert_error(G, KF_ERR_SHAPE, "reshape: operand x f32[6, 8] has 48 elements",
                 "target f32[5, 10] has more than 48");
}

static void test_reshape_rejects_two_inferred_dims(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 2, 6, 8);
    assert_null(kf_reshape(G, x, 2, (int64_t[]){-1, -1}));
    assert_error(G, KF_ERR_SHAPE, "reshape: dim 1 is -1", "at most one -1");
}

static void test_reshape_rejects_an_indivisible_inferred_dim(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 2, 6, 8);
    assert_null(kf_reshape(G, x, 2, (int64_t[]){5, -1}));
    assert_error(G, KF_ERR_SHAPE, "has 48 elements", "do not divide");
}

static void test_permute_rejects_a_repeated_axis(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 3, 2, 3, 4);
    assert_null(kf_permute(G, x, (int[]){0, 1, 1}));
    assert_error(G, KF_ERR_AXIS, "permute: perm[2] = 1 is repeated", "each of 0..2 once");
}

static void test_transpose_rejects_axis_out_of_range(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 2, 2, 3);
    assert_null(kf_transpose(G, x, 0, 2));
    assert_error(G, KF_ERR_AXIS, "transpose: axes 0 and 2", "f32[2, 3]");
}

static void test_sources_reject_bad_shapes_dtypes_and_names(void **state) {
    (void)state;
    struct {
        kf_status status;
        const char *frag;
    } cases[] = {
        {KF_ERR_SHAPE, "input: dim 1 is 0; every dim must be positive"},
        {KF_ERR_SHAPE, "input: rank 9 is out of range"},
        {KF_ERR_INVALID_ARGUMENT, "input: dims is NULL for rank 2"},
        {KF_ERR_INVALID_ARGUMENT, "input: name '9x' is not an identifier"},
        {KF_ERR_INVALID_ARGUMENT, "input: name 'x' is already used"},
        {KF_ERR_DTYPE, "input: dtype 17 is not a kf_dtype"},
        {KF_ERR_DTYPE, "iota: dtype bool is not allowed; iota takes f32, f16, bf16, f64, i32"},
        {KF_ERR_AXIS, "iota: axis 2 is out of range for i32[4, 4]"},
        {KF_ERR_INVALID_ARGUMENT, "const: data is NULL"},
        {KF_ERR_SHAPE, "input: the shape has more than 2^48 elements"},
        {KF_ERR_SHAPE, "const: 4294967296 elements of f32 exceed the 1 GiB limit"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kf_ctx *ctx;
        kf_graph *g;
        assert_int_equal(kf_ctx_create(NULL, &ctx), KF_OK);
        assert_int_equal(kf_graph_create(ctx, &g), KF_OK);
        kf_tensor *t = NULL;
        int64_t d2[] = {4, 0}, d9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, d44[] = {4, 4};
        int64_t huge[] = {INT64_C(1) << 30, INT64_C(1) << 30};
        int64_t big[] = {INT64_C(1) << 16, INT64_C(1) << 16};
        static float one = 1;
        switch (i) {
        case 0: t = kf_input(g, "x", KF_DTYPE_F32, 2, d2); break;
        case 1: t = kf_input(g, "x", KF_DTYPE_F32, 9, d9); break;
        case 2: t = kf_input(g, "x", KF_DTYPE_F32, 2, NULL); break;
        case 3: t = kf_input(g, "9x", KF_DTYPE_F32, 0, NULL); break;
        case 4:
            kf_input(g, "x", KF_DTYPE_F32, 0, NULL);
            t = kf_input(g, "x", KF_DTYPE_F32, 0, NULL);
            break;
        case 5: t = kf_input(g, "x", (kf_dtype)17, 0, NULL); break;
        case 6: t = kf_iota(g, KF_DTYPE_BOOL, 2, d44, 0); break;
        case 7: t = kf_iota(g, KF_DTYPE_I32, 2, d44, 2); break;
        case 8: t = kf_constant(g, KF_DTYPE_F32, 2, d44, NULL); break;
        case 9: t = kf_input(g, "x", KF_DTYPE_F32, 2, huge); break;
        case 10: t = kf_constant(g, KF_DTYPE_F32, 2, big, &one); break;
        }
        assert_null(t);
        assert_error(g, cases[i].status, cases[i].frag, NULL);
        kf_graph_destroy(g);
        kf_ctx_destroy(ctx);
    }
}

static void test_null_operand_is_an_error_naming_the_operand(void **state) {
    kf_tensor *a = in(G, "a", KF_DTYPE_F32, 1, 4);
    assert_null(kf_add(G, a, NULL));
    assert_error(G, KF_ERR_INVALID_ARGUMENT, "add: operand b is NULL", NULL);
}

static void test_first_error_is_sticky_and_later_calls_return_null(void **state) {
    kf_tensor *a = in(G, "a", KF_DTYPE_F32, 1, 4);
    kf_tensor *b = in(G, "b", KF_DTYPE_F32, 1, 5);
    kf_tensor *bad = kf_add(G, a, b);
    assert_null(bad);
    /* a chain that consumes the failure, and an unrelated bad call */
    assert_null(kf_relu(G, bad));
    assert_null(kf_softmax(G, a, 7));
    assert_null(kf_input(G, "c", KF_DTYPE_F32, 0, NULL));
    assert_int_not_equal(kf_output(G, "y", a), KF_OK);
    assert_error(G, KF_ERR_SHAPE, "add: operand b f32[5]", NULL);
}

static void test_operand_from_another_graph_is_rejected(void **state) {
    kf_ctx *ctx = ((fixture *)*state)->ctx;
    kf_graph *other;
    assert_int_equal(kf_graph_create(ctx, &other), KF_OK);
    kf_tensor *x = in(other, "x", KF_DTYPE_F32, 1, 4);
    assert_null(kf_neg(G, x));
    assert_error(G, KF_ERR_INVALID_ARGUMENT, "neg: operand x belongs to another graph", NULL);
    kf_graph_destroy(other);
}

static void test_null_graph_and_null_handles_are_safe(void **state) {
    (void)state;
    assert_null(kf_input(NULL, "x", KF_DTYPE_F32, 0, NULL));
    assert_null(kf_add(NULL, NULL, NULL));
    assert_null(kf_scalar(NULL, KF_DTYPE_F32, 1));
    assert_null(kf_permute(NULL, NULL, NULL));
    assert_int_equal(kf_graph_status(NULL), KF_ERR_INVALID_ARGUMENT);
    assert_non_null(kf_graph_error(NULL));
    assert_int_equal(kf_output(NULL, "y", NULL), KF_ERR_INVALID_ARGUMENT);
    assert_int_equal(kf_graph_verify(NULL), KF_ERR_INVALID_ARGUMENT);
    assert_int_equal(kf_tensor_rank(NULL), -1);
    assert_null(kf_tensor_name(NULL));
    assert_int_equal(kf_graph_create(NULL, NULL), KF_ERR_INVALID_ARGUMENT);
    kf_graph *g = (kf_graph *)1;
    assert_int_equal(kf_graph_create(NULL, &g), KF_ERR_INVALID_ARGUMENT);
    assert_null(g);
    kf_graph_destroy(NULL);
    kf_ctx_destroy(NULL);
}

/* ---------------------------------------------------------------- outputs, names */

static void test_outputs_are_named_and_unique(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 1, 4);
    kf_tensor *y = kf_exp(G, x);
    assert_int_equal(kf_output(G, "y", y), KF_OK);
    assert_int_equal(kf_output(G, "x_again", x), KF_OK);
    assert_int_equal(kf_graph_output_count(G), 2);
    assert_string_equal(kf_graph_output_name(G, 0), "y");
    assert_ptr_equal(kf_graph_output(G, 1), x);
    assert_null(kf_graph_output_name(G, 2));
    assert_int_equal(kf_output(G, "y", x), KF_ERR_INVALID_ARGUMENT);
    assert_error(G, KF_ERR_INVALID_ARGUMENT, "output: 'y' is already an output", NULL);
}

/* Output names are checked through a hash set that grows with the outputs
 * (kf_output was a scan per call: 20,000 outputs took 1.2 s to add), and
 * that also indexes outputs a clone copied in without it. */
static void test_output_names_stay_unique_past_many_outputs_and_in_a_clone(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 1, 4);
    char name[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "o%d", i);
        assert_int_equal(kf_output(G, name, i % 2 ? x : kf_exp(G, x)), KF_OK);
    }
    assert_int_equal(kf_graph_output_count(G), 3000);
    kf_graph *c = kf_ir_graph_clone(G);
    assert_non_null(c);
    kf_tensor *cx = c->nodes[x->id];
    assert_int_equal(kf_output(c, "o3000", cx), KF_OK);
    assert_int_equal(kf_output(c, "o17", cx), KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kf_graph_error(c), "output: 'o17' is already an output"));
    kf_graph_destroy(c);
    assert_int_equal(kf_output(G, "o2999", x), KF_ERR_INVALID_ARGUMENT);
    assert_error(G, KF_ERR_INVALID_ARGUMENT, "output: 'o2999' is already an output", NULL);
}

static void test_output_rejects_a_bad_name(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 1, 4);
    assert_int_equal(kf_output(G, "not a name", x), KF_ERR_INVALID_ARGUMENT);
    assert_error(G, KF_ERR_INVALID_ARGUMENT, "output: 'not a name' is not an identifier", NULL);
}

static void test_set_name_rejects_a_taken_name(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 1, 4);
    kf_tensor *y = kf_exp(G, x);
    assert_int_equal(kf_tensor_set_name(y, "h"), KF_OK);
    assert_string_equal(kf_tensor_name(y), "h");
    kf_tensor *z = kf_exp(G, y);
    assert_int_equal(kf_tensor_set_name(z, "x"), KF_ERR_INVALID_ARGUMENT);
    assert_error(G, KF_ERR_INVALID_ARGUMENT, "name: 'x' already names tensor %0 (input)", NULL);
}

/* ---------------------------------------------------------------- verifier */

static void test_verify_requires_an_output_and_is_not_sticky(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 2, 2, 3);
    kf_tensor *y = kf_softmax(G, kf_relu(G, x), -1);
    assert_int_equal(kf_graph_verify(G), KF_ERR_VERIFY);
    assert_non_null(strstr(kf_graph_error(G), "no outputs"));
    assert_int_equal(kf_graph_status(G), KF_OK);
    assert_int_equal(kf_output(G, "y", y), KF_OK);
    assert_int_equal(kf_graph_verify(G), KF_OK);
}

static void test_verify_catches_a_tensor_whose_shape_disagrees_with_its_operands(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 2, 2, 3);
    kf_tensor *y = kf_exp(G, x);
    assert_int_equal(kf_output(G, "y", y), KF_OK);
    y->dims[1] = 4; /* what a buggy pass might do */
    assert_int_equal(kf_graph_verify(G), KF_ERR_VERIFY);
    assert_non_null(strstr(kf_graph_error(G), "tensor %1 (exp) is f32[2, 4] but its operands give f32[2, 3]"));
    y->dims[1] = 3;
    y->n_uses = 5;
    assert_int_equal(kf_graph_verify(G), KF_ERR_VERIFY);
    assert_non_null(strstr(kf_graph_error(G), "uses"));
}

/* Names are checked in linear time (a hash set), and still caught: a name on
 * two tensors, an output name twice (both what a buggy pass might do). */
static void test_verify_catches_a_name_on_two_tensors_and_an_output_name_twice(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 1, 4);
    kf_tensor *y = kf_exp(G, x), *z = kf_neg(G, x);
    assert_int_equal(kf_tensor_set_name(y, "y"), KF_OK);
    assert_int_equal(kf_tensor_set_name(z, "z"), KF_OK);
    assert_int_equal(kf_output(G, "a", y), KF_OK);
    assert_int_equal(kf_output(G, "b", z), KF_OK);
    assert_int_equal(kf_graph_verify(G), KF_OK);
    const char *zname = z->name;
    z->name = y->name;
    assert_int_equal(kf_graph_verify(G), KF_ERR_VERIFY);
    assert_non_null(strstr(kf_graph_error(G), "the name 'y' names two tensors"));
    z->name = zname;
    const char *bname = G->outputs[1].name;
    G->outputs[1].name = G->outputs[0].name;
    assert_int_equal(kf_graph_verify(G), KF_ERR_VERIFY);
    assert_non_null(strstr(kf_graph_error(G), "output name 'a' appears twice"));
    G->outputs[1].name = bname;
    assert_int_equal(kf_graph_verify(G), KF_OK);
}

static void test_n_uses_counts_operand_slots(void **state) {
    kf_tensor *x = in(G, "x", KF_DTYPE_F32, 1, 4);
    kf_tensor *y = kf_mul(G, x, x);
    kf_exp(G, y);
    assert_int_equal(x->n_uses, 2);
    assert_int_equal(y->n_uses, 1);
}

/* ---------------------------------------------------------------- context, status */

static void test_ctx_rejects_half_set_allocator_and_bad_options(void **state) {
    (void)state;
    kf_options o;
    kf_options_init(&o);
    kf_ctx *ctx = (kf_ctx *)1;
    o.allocator.alloc = (void *(*)(void *, size_t))1;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_ERR_INVALID_ARGUMENT);
    assert_null(ctx);
    kf_options_init(&o);
    o.flags = 1u << 30;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_ERR_INVALID_ARGUMENT);
    kf_options_init(&o);
    o.target = KF_TARGET_COUNT;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_ERR_INVALID_ARGUMENT);
    assert_int_equal(kf_ctx_create(&o, NULL), KF_ERR_INVALID_ARGUMENT);
    /* An arch override is checked when the context is made, not truncated or
     * guessed when a kernel is compiled. */
    const char *bad_arch[] = {"", "sm90", "sm_9O", "gfx90a", "sm_90aaaaaaaaaaaaaaaaaaaaaaaa"};
    for (size_t i = 0; i < sizeof bad_arch / sizeof bad_arch[0]; i++) {
        kf_options_init(&o);
        o.arch = bad_arch[i];
        ctx = (kf_ctx *)1;
        assert_int_equal(kf_ctx_create(&o, &ctx), KF_ERR_INVALID_ARGUMENT);
        assert_null(ctx);
    }
    kf_options_init(&o);
    o.device = -1;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_ERR_INVALID_ARGUMENT);
    /* tiered_compile is off by default, and 0 or 1 */
    const int bad_tier[] = {-1, 2};
    for (size_t i = 0; i < 2; i++) {
        kf_options_init(&o);
        assert_int_equal(o.tiered_compile, 0);
        o.tiered_compile = bad_tier[i];
        assert_int_equal(kf_ctx_create(&o, &ctx), KF_ERR_INVALID_ARGUMENT);
    }
    kf_options_init(&o);
    o.tiered_compile = 1;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    kf_ctx_destroy(ctx);
    kf_options_init(&o);
    o.arch = "sm_90a";
    o.cache_dir = "/tmp/kf";
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    kf_ctx_destroy(ctx);
}

static void test_every_status_has_a_distinct_string(void **state) {
    (void)state;
    for (int i = 0; i < KF_STATUS_COUNT; i++) {
        assert_non_null(kf_status_str((kf_status)i));
        for (int j = 0; j < i; j++)
            assert_string_not_equal(kf_status_str((kf_status)i), kf_status_str((kf_status)j));
    }
    assert_string_equal(kf_status_str(KF_STATUS_COUNT), "unknown status");
    assert_string_equal(kf_version(), "0.1.0");
}

static void test_op_table_names_round_trip_and_traits_are_consistent(void **state) {
    (void)state;
    for (int op = 0; op < KF_OP_COUNT; op++) {
        const kf_op_info *info = kf_op_get((kf_op)op);
        assert_int_equal(kf_op_from_name(info->name, strlen(info->name)), op);
        bool src = kf_op_has((kf_op)op, KF_TRAIT_SOURCE);
        assert_int_equal(src, kf_form_arity(info->form) == 0);
        if (kf_op_has((kf_op)op, KF_TRAIT_BINARY))
            assert_int_equal(kf_form_arity(info->form), 2);
        if (kf_op_has((kf_op)op, KF_TRAIT_NORM))
            assert_true(kf_op_has((kf_op)op, KF_TRAIT_ROWWISE));
    }
    assert_int_equal(kf_op_from_name("nope", 4), KF_OP_COUNT);
    for (int d = 0; d < KF_DTYPE_COUNT; d++) {
        const char *n = kf_dtype_name((kf_dtype)d);
        assert_int_equal(kf_dtype_from_name(n, strlen(n)), d);
    }
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

/* Issue 15 item 12: names are looked up through a hash index (building N
 * named tensors was O(N^2) through a scan per name), and the index keeps the
 * uniqueness rules: a taken name is refused however many names came before,
 * a renamed tensor frees its old name, and a clone answers the same. */
static void test_names_stay_unique_through_thousands_of_tensors_and_renames(void **state) {
    (void)state;
    kf_ctx *ctx = NULL;
    kf_graph *g = NULL;
    assert_int_equal(kf_ctx_create(NULL, &ctx), KF_OK);
    assert_int_equal(kf_graph_create(ctx, &g), KF_OK);
    int64_t d[1] = {4};
    char name[32];
    kf_tensor *last = NULL;
    for (int i = 0; i < 3000; i++) {
        snprintf(name, sizeof name, "x%d", i);
        kf_tensor *x = kf_input(g, name, KF_DTYPE_F32, 1, d);
        assert_non_null(x);
        kf_tensor *y = kf_relu(g, x);
        snprintf(name, sizeof name, "r%d", i);
        assert_int_equal(kf_tensor_set_name(y, name), KF_OK);
        last = y;
    }
    assert_ptr_equal(kf_ir_find_name(g, "x1234", 5), g->nodes[2 * 1234]);
    assert_ptr_equal(kf_ir_find_name(g, "r2999", 5), last);
    assert_null(kf_ir_find_name(g, "x3000", 5));
    assert_null(kf_ir_find_name(g, "x1234", 1)); /* "x": a prefix is another name */
    /* A taken name: refused for an op's rename and for an input. */
    assert_int_equal(kf_tensor_set_name(last, "x17"), KF_ERR_INVALID_ARGUMENT);
    kf_graph *g2 = NULL;
    assert_int_equal(kf_graph_create(ctx, &g2), KF_OK);
    /* A rename frees the old name (in a fresh graph: the error is sticky). */
    kf_tensor *a = kf_input(g2, "a", KF_DTYPE_F32, 1, d);
    kf_tensor *b = kf_neg(g2, a);
    assert_int_equal(kf_tensor_set_name(b, "old"), KF_OK);
    for (int i = 0; i < 200; i++) { /* grow the index past its first rebuilds */
        snprintf(name, sizeof name, "in%d", i);
        assert_non_null(kf_input(g2, name, KF_DTYPE_F32, 1, d));
    }
    assert_int_equal(kf_tensor_set_name(b, "new"), KF_OK);
    assert_ptr_equal(kf_ir_find_name(g2, "new", 3), b);
    assert_null(kf_ir_find_name(g2, "old", 3));
    assert_non_null(kf_input(g2, "old", KF_DTYPE_F32, 1, d));
    assert_null(kf_input(g2, "new", KF_DTYPE_F32, 1, d));
    assert_int_equal(kf_graph_status(g2), KF_ERR_INVALID_ARGUMENT);
    kf_graph *c = kf_ir_graph_clone(g);
    assert_non_null(c);
    assert_ptr_equal(kf_ir_find_name(c, "r2999", 5), c->nodes[last->id]);
    kf_ir_graph_destroy(c);
    kf_graph_destroy(g2);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_unary_ops_keep_shape_and_dtype),
        T(test_verify_catches_a_name_on_two_tensors_and_an_output_name_twice),
        T(test_clamp_keeps_shape_and_dtype_and_rejects_bad_bounds_by_name),
        T(test_expand_broadcasts_to_the_target_and_names_the_dim_it_cannot_widen),
        T(test_expand_rejects_fewer_dims_and_bad_dims),
        T(test_slice_normalizes_bounds_the_python_way_and_refuses_empty_and_bad_steps),
        T(test_concat_adds_the_axis_and_names_the_dim_that_differs),
        T(test_gather_puts_the_index_dims_in_place_of_the_axis),
        T(test_cast_to_i64_is_refused),
        T(test_binary_ops_broadcast_numpy_style),
        T(test_comparisons_return_bool),
        T(test_where_broadcasts_all_three_operands),
        T(test_cast_changes_only_dtype),
        T(test_reductions_drop_or_keep_the_axis),
        T(test_softmax_and_norms_keep_shape_and_normalize_axis),
        T(test_matmul_transposes_and_broadcasts_batch),
        T(test_reshape_infers_one_dim_and_permute_reorders),
        T(test_sources_carry_shape_dtype_and_data),
        T(test_binary_rejects_shapes_that_do_not_broadcast),
        T(test_binary_rejects_mixed_dtypes_and_says_to_cast),
        T(test_float_ops_reject_integer_operands),
        T(test_where_rejects_a_non_bool_condition),
        T(test_where_rejects_a_third_operand_that_does_not_broadcast),
        T(test_reduction_rejects_axis_out_of_range),
        T(test_softmax_rejects_axis_of_a_scalar),
        T(test_norm_rejects_weight_of_wrong_length),
        T(test_norm_rejects_negative_or_nan_eps),
        T(test_norm_rejects_infinite_or_nan_eps_of_either_norm),
        T(test_boolean_flags_take_only_0_or_1_and_the_error_names_the_flag),
        T(test_norm_rejects_weight_of_another_dtype),
        T(test_matmul_rejects_mismatched_inner_dims),
        T(test_matmul_rejects_vectors_and_integer_dtypes),
        T(test_matmul_rejects_integer_dtype),
        T(test_matmul_rejects_batch_dims_that_do_not_broadcast),
        T(test_reshape_rejects_a_wrong_element_count),
        T(test_reshape_rejects_two_inferred_dims),
        T(test_reshape_rejects_an_indivisible_inferred_dim),
        T(test_permute_rejects_a_repeated_axis),
        T(test_transpose_rejects_axis_out_of_range),
        cmocka_unit_test(test_sources_reject_bad_shapes_dtypes_and_names),
        T(test_null_operand_is_an_error_naming_the_operand),
        T(test_first_error_is_sticky_and_later_calls_return_null),
        T(test_operand_from_another_graph_is_rejected),
        cmocka_unit_test(test_null_graph_and_null_handles_are_safe),
        T(test_outputs_are_named_and_unique),
        T(test_output_names_stay_unique_past_many_outputs_and_in_a_clone),
        T(test_output_rejects_a_bad_name),
        T(test_set_name_rejects_a_taken_name),
        T(test_verify_requires_an_output_and_is_not_sticky),
        T(test_verify_catches_a_tensor_whose_shape_disagrees_with_its_operands),
        T(test_n_uses_counts_operand_slots),
        cmocka_unit_test(test_ctx_rejects_half_set_allocator_and_bad_options),
        cmocka_unit_test(test_every_status_has_a_distinct_string),
        cmocka_unit_test(test_op_table_names_round_trip_and_traits_are_consistent),
        cmocka_unit_test(test_names_stay_unique_through_thousands_of_tensors_and_renames),
    };
    return cmocka_run_group_tests_name("ir", tests, NULL, NULL);
}
