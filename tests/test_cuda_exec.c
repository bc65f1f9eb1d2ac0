/*
 * test_cuda_exec.c -- plans executed on the GPU (kf_compile with
 * KF_TARGET_CUDA, kf_program_run) against the reference evaluator: every
 * elementwise and row-wise op and their fusions in every float dtype, GEMMs
 * through cuBLASLt with each native epilogue and the order of operations that
 * decides which epilogues map onto cuBLASLt's act(A.B + C + bias), the
 * unfused attention fallback (causal, sliding window, softcap, ALiBi), every
 * example graph, and the cache flags.
 *
 * Inputs are fresh random values (KF_TEST_SEED replays a run); outputs are
 * poisoned (NaN) before each run; errors are ||out - ref|| / ||ref|| within
 * the per-dtype tolerances of kf_test.h, and NaN never passes.
 *
 * Without a driver or a device every test is skipped with a visible message
 * and the binary exits 77 (ctest: skipped, never passed).
 */
#define _GNU_SOURCE /* open_memstream, mkdtemp */
#include <dirent.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codegen/cuda/cuda_codegen.h"
#include "codegen/cuda/cuda_recipe.h"
#include "frontend/compile.h"
#include "fusion/fusion.h"
#include "ir/ir.h"
#include "kf_gpu.h"
#include "kf_planned.h"
#include "kf_test.h"
#include "runtime/ctx.h"
#include "runtime/cuda.h"
#include "runtime/cuda_choice.h"
#include "runtime/cuda_exec.h"

/* The suite's context and device (kf_gpu.h). */
static kf_test_gpu G;

static int group_setup(void **state) {
    (void)state;
    return kf_test_gpu_setup(&G, "kf_cuda_exec", NULL);
}

static int group_teardown(void **state) {
    (void)state;
    kf_test_gpu_teardown(&G);
    return 0;
}

#define REQUIRE_GPU() KF_REQUIRE_GPU(&G)

/* ------------------------------------------------------------------------ */
/* Running one graph against the reference                                    */
/* ------------------------------------------------------------------------ */

typedef struct run_opts {
    double lo, hi;          /* input range (floats) */
    const char *report_has; /* substrings the program report must hold, '|'-separated */
    const char *report_lacks;
    const char *report_has_sm90; /* what it must hold when the kernels are for sm_90 or later */
    kf_ctx *ctx;                 /* NULL: G.ctx */
    const char *probe;           /* with `probed`: *probed says whether the report holds it */
    bool *probed;
} run_opts;

/* The arch the report names for its kernels ("(sm_90a ..." -> 90), or 0. */
static int report_sm(const char *report) {
    const char *a = strstr(report, "(sm_");
    return a ? atoi(a + 4) : 0;
}

static void check_report(const char *report, const char *list, bool want, const char *what) {
    if (!list)
        return;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *tok = strtok(buf, "|"); tok; tok = strtok(NULL, "|")) {
        bool has = strstr(report, tok) != NULL;
        if (has != want) {
            print_error("%s: the report %s '%s':\n%s\n", what, want ? "lacks" : "holds", tok,
                        report);
            fail();
        }
    }
}

/* Compiles `g` for CUDA, runs it on random inputs, judges every output with
 * kf_graph_check. */
static void run_and_compare(kf_graph *g, uint64_t stream, const run_opts *o, const char *what) {
    kf_ctx *ctx = o->ctx ? o->ctx : G.ctx;
    if (kf_graph_verify(g) != KF_OK)
        fail_msg("%s: %s", what, kf_graph_error(g));
    size_t n_in = kf_graph_input_count(g), n_out = kf_graph_output_count(g);
    kf_binding *in = calloc(n_in + 1, sizeof *in);
    kf_binding *out = calloc(n_out + 1, sizeof *out);
    kf_test_rng rng = kf_test_rng_make(stream);
    for (size_t i = 0; i < n_in; i++) {
        const kf_tensor *t = kf_graph_input(g, i);
        kf_dtype d = kf_tensor_dtype(t);
        size_t n = (size_t)kf_tensor_numel(t);
        in[i].name = kf_tensor_name(t);
        in[i].size = n * kf_dtype_size(d);
        in[i].data = malloc(in[i].size + 1);
        bool ints = d == KF_DTYPE_I32 || d == KF_DTYPE_I64;
        kf_test_fill_input(in[i].data, t, n, &rng, ints ? -8 : o->lo, ints ? 9 : o->hi);
    }
    for (size_t i = 0; i < n_out; i++) {
        const kf_tensor *t = kf_graph_output(g, i);
        size_t n = (size_t)kf_tensor_numel(t);
        out[i].name = kf_graph_output_name(g, i);
        out[i].size = n * kf_dtype_size(kf_tensor_dtype(t));
        out[i].data = malloc(out[i].size + 1);
        kf_test_poison(out[i].data, kf_tensor_dtype(t), n);
    }
    kf_program *p = NULL;
    kf_status st = kf_compile(ctx, g, &p);
    if (st != KF_OK)
        fail_msg("%s: kf_compile: %s: %s", what, kf_status_str(st), kf_graph_error(g));
    char *report = kf_test_report(p, KF_REPORT_TEXT);
    check_report(report, o->report_has, true, what);
    check_report(report, o->report_lacks, false, what);
    if (report_sm(report) >= 90)
        check_report(report, o->report_has_sm90, true, what);
    if (o->probe && o->probed)
        *o->probed = strstr(report, o->probe) != NULL;
    st = kf_program_run(p, in, n_in, out, n_out, NULL);
    if (st != KF_OK)
        fail_msg("%s: kf_program_run: %s\n%s", what, kf_program_error(p), report);
    kf_check_result *res = calloc(n_out, sizeof *res);
    assert_non_null(res);
    st = kf_graph_check(g, in, n_in, out, n_out, res);
    if (st != KF_OK)
        fail_msg("%s: reference: %s", what, kf_graph_error(g));
    for (size_t i = 0; i < n_out; i++) {
        const kf_tensor *t = kf_graph_output(g, i);
        /* Judged against the exact value: within twice the reference
         * evaluator's own error (which, for an f32 output computed through
         * bf16 intermediates, carries their rounding), plus the floor. */
        if (!res[i].pass) {
            fprintf(stderr, "%s\n", report);
            fail_msg("%s, output %s (%s): error %g against the exact value exceeds the bound %g "
                     "(the reference's own error %g; KF_TEST_SEED=%llu)",
                     what, out[i].name, kf_dtype_name(kf_tensor_dtype(t)), res[i].err, res[i].bound,
                     res[i].ref_err, (unsigned long long)kf_test_seed());
        }
    }
    free(res);
    free(report);
    kf_program_destroy(p);
    for (size_t i = 0; i < n_in; i++)
        free(in[i].data);
    for (size_t i = 0; i < n_out; i++)
        free(out[i].data);
    free(in);
    free(out);
}

/* Parses `text` (printf format with every %s the dtype name) and runs it. */
static void run_text(const char *fmt, kf_dtype d, uint64_t stream, const run_opts *o,
                     const char *what) {
    char text[4096];
    const char *dn = kf_dtype_name(d);
    snprintf(text, sizeof text, fmt, dn, dn, dn, dn, dn, dn, dn, dn, dn, dn);
    kf_graph *g = NULL;
    if (kf_graph_parse(G.ctx, text, strlen(text), &g) != KF_OK)
        fail_msg("%s: parse: %s\n%s", what, g ? kf_graph_error(g) : "no graph", text);
    char label[256];
    snprintf(label, sizeof label, "%s [%s]", what, dn);
    run_and_compare(g, stream, o, label);
    kf_graph_destroy(g);
}

static const kf_dtype float_dtypes[] = {KF_DTYPE_F32, KF_DTYPE_F16, KF_DTYPE_BF16, KF_DTYPE_F64};
static const kf_dtype gemm_dtypes[] = {KF_DTYPE_F32, KF_DTYPE_F16, KF_DTYPE_BF16};
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------------ */
/* Elementwise                                                                */
/* ------------------------------------------------------------------------ */

static void test_every_unary_op_in_every_float_dtype_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *ops[] = {"neg",  "abs",     "exp",  "log",  "sqrt",      "rsqrt",
                                "tanh", "sigmoid", "relu", "gelu", "gelu_tanh", "silu"};
    for (size_t d = 0; d < N_OF(float_dtypes); d++) {
        for (size_t i = 0; i < N_OF(ops); i++) {
            bool positive =
                !strcmp(ops[i], "log") || !strcmp(ops[i], "sqrt") || !strcmp(ops[i], "rsqrt");
            char fmt[256];
            /* 131 columns: a ragged tail for the vectorized path. */
            snprintf(fmt, sizeof fmt, "kfg 1\nx = input(%%s[37, 131])\ny = %s(x)\noutput y\n",
                     ops[i]);
            run_opts o = {.lo = positive ? 0.05 : -3, .hi = 3};
            run_text(fmt, float_dtypes[d], 100 + i, &o, ops[i]);
        }
    }
}

static void test_every_binary_op_broadcasts_in_every_float_dtype(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *ops[] = {"add", "sub", "mul", "div", "max", "min", "pow"};
    for (size_t d = 0; d < N_OF(float_dtypes); d++) {
        for (size_t i = 0; i < N_OF(ops); i++) {
            char fmt[512];
            snprintf(fmt, sizeof fmt,
                     "kfg 1\na = input(%%s[5, 33, 64])\nb = input(%%s[33, 1])\n"
                     "c = input(%%s[64])\ny = %s(a, b)\nz = %s(c, y)\noutput y\noutput z\n",
                     ops[i], ops[i]);
            bool pos = !strcmp(ops[i], "pow") || !strcmp(ops[i], "div");
            run_opts o = {.lo = pos ? 0.5 : -2, .hi = 2};
            run_text(fmt, float_dtypes[d], 200 + i, &o, ops[i]);
        }
    }
}

static void test_comparisons_where_cast_and_i32_match_exactly(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *cmps[] = {"eq", "ne", "lt", "le", "gt", "ge"};
    for (size_t d = 0; d < N_OF(float_dtypes); d++) {
        for (size_t i = 0; i < N_OF(cmps); i++) {
            char fmt[512];
            snprintf(fmt, sizeof fmt,
                     "kfg 1\na = input(%%s[40, 77])\nb = input(%%s[77])\nc = %s(a, b)\n"
                     "w = where(c, a, b)\nn = cast(c, i32)\nf = cast(a, i32)\n"
                     "output c\noutput w\noutput n\noutput f\n",
                     cmps[i]);
            run_opts o = {.lo = -4, .hi = 4};
            run_text(fmt, float_dtypes[d], 300 + i, &o, cmps[i]);
        }
    }
    run_opts o = {.lo = -8, .hi = 8};
    run_text("kfg 1\na = input(i32[64, 65])\nb = input(i32[65])\ns = add(a, b)\nm = mul(s, a)\n"
             "x = max(m, b)\nn = neg(x)\nab = abs(n)\nf = cast(ab, f32)\noutput ab\noutput f\n",
             KF_DTYPE_I32, 399, &o, "i32 chain");
    static const char *casts[] = {"f32", "f16", "bf16", "f64"};
    for (size_t d = 0; d < N_OF(float_dtypes); d++)
        for (size_t c = 0; c < N_OF(casts); c++) {
            char fmt[256];
            snprintf(fmt, sizeof fmt, "kfg 1\nx = input(%%s[31, 97])\ny = cast(x, %s)\noutput y\n",
                     casts[c]);
            run_opts oc = {.lo = -100, .hi = 100};
            run_text(fmt, float_dtypes[d], 350 + c, &oc, "cast");
        }
}

static void test_an_elementwise_chain_fuses_into_one_kernel_and_matches(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (size_t d = 0; d < N_OF(float_dtypes); d++) {
        run_opts o = {.lo = -2, .hi = 2, .report_has = "kernel ew_"};
        run_text("kfg 1\nx = input(%s[64, 1000])\ns = input(%s[1000])\nb = input(%s[1000])\n"
                 "g = input(%s[1000])\nxs = mul(x, s)\nh = add(xs, b)\nge = gelu(h)\n"
                 "y = mul(ge, g)\noutput y\n",
                 float_dtypes[d], 400, &o, "gelu(x*s+b)*g");
        run_text("kfg 1\nx = input(%s[8, 16, 33])\ni = iota(%s[8, 16, 33], axis=2)\n"
                 "t = add(x, i)\nc = const(%s[], 0.5)\nm = mul(t, c)\ns = silu(m)\noutput s\n",
                 float_dtypes[d], 401, &o, "iota chain");
    }
}

/* Sibling elementwise groups (fuse_siblings) as one multi-output kernel:
 * outputs poisoned, each judged against the exact value; a sibling reading
 * another's output, a broadcast operand, a cast; the bulk path with two
 * outputs (sm_90), and 40 siblings split at the output bound (3 kernels). */
static void test_sibling_groups_run_as_one_multi_output_kernel_and_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (size_t d = 0; d < N_OF(float_dtypes); d++) {
        run_opts o = {.lo = -2, .hi = 2,
                      .report_has = "siblings: 5 elementwise groups reading x, one kernel writing 5"};
        run_text("kfg 1\nx = input(%s[37, 1031])\nb = input(%s[1031])\nc2 = const(%s[], 2)\n"
                 "a = mul(x, c2)\ny = add(x, a)\nxb = add(x, b)\nz = tanh(xb)\nw = relu(x)\n"
                 "h = cast(x, f32)\noutput a\noutput y\noutput z\noutput w\noutput h\n",
                 float_dtypes[d], 470, &o, "siblings of x");
    }
    run_opts ob = {.lo = -2, .hi = 2, .report_has = "siblings: 2 elementwise groups",
                   .report_has_sm90 = "elementwise_bulk"};
    run_text("kfg 1\nx = input(%s[1024, 4096])\nb = input(%s[4096])\nc2 = const(%s[], 2)\n"
             "a = mul(x, c2)\nxb = add(x, b)\nz = gelu(xb)\noutput a\noutput z\n",
             KF_DTYPE_BF16, 471, &ob, "two siblings on the bulk path");
    run_opts os = {.lo = -2, .hi = 2, .report_has = "part 3 of 3: the siblings were split at 16"};
    char body[8192];
    int n = snprintf(body, sizeof body, "kfg 1\nx = input(f32[61, 333])\n");
    for (int i = 0; i < 40; i++)
        n += snprintf(body + n, sizeof body - (size_t)n,
                      "s%d = const(f32[], %d)\ny%d = mul(x, s%d)\noutput y%d\n", i, i + 1, i, i, i);
    kf_graph *g = NULL;
    if (kf_graph_parse(G.ctx, body, strlen(body), &g) != KF_OK)
        fail_msg("40 siblings: parse: %s", g ? kf_graph_error(g) : "no graph");
    run_and_compare(g, 472, &os, "40 siblings of x");
    kf_graph_destroy(g);
}

/* slice, concat and gather read through in elementwise (rotary), row-wise
 * (an embedding lookup into rms_norm, a gather into softmax) and column-
 * reduction kernels, every float dtype, i32 and i64 indices. */
static void test_slices_concats_and_gathers_match_in_their_consumers(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (size_t d = 0; d < N_OF(float_dtypes); d++) {
        run_opts o = {.lo = -2, .hi = 2};
        run_text("kfg 1\nx = input(%s[128, 8, 64])\ncs = input(%s[128, 1, 64])\n"
                 "sn = input(%s[128, 1, 64])\nx1 = slice(x, axis=-1, stop=32)\n"
                 "x2 = slice(x, axis=-1, start=32)\nn = neg(x2)\nr = concat(n, x1, axis=-1)\n"
                 "a = mul(x, cs)\nb = mul(r, sn)\ny = add(a, b)\noutput y\n",
                 float_dtypes[d], 420, &o, "rotary");
        run_text("kfg 1\nx = input(%s[64, 300])\nt = input(%s[64, 7])\n"
                 "s = slice(x, axis=1, start=-250, stop=299, step=3)\n"
                 "c = concat(t, s, t, axis=1)\ne = exp(c)\nr = reduce_sum(e, axis=0)\n"
                 "m = softmax(c)\noutput r\noutput m\n",
                 float_dtypes[d], 421, &o, "stepped slice, concat, column sum, softmax");
        run_text("kfg 1\nw = input(%s[1000, 256])\nids = input(i64[4, 32])\n"
                 "nw = input(%s[256])\ne = gather(w, ids, axis=0)\nh = rms_norm(e, nw)\n"
                 "t = input(%s[3, 50, 40])\nj = input(i32[6])\ng = gather(t, j, axis=1)\n"
                 "p = softmax(g)\noutput h\noutput p\n",
                 float_dtypes[d], 422, &o, "embedding into rms_norm, gather into softmax");
        /* elementwise kernels whose index loads are vectors (contiguous over
         * the space), i64 and i32, and a gather of a slice of a concat */
        run_text("kfg 1\nw = input(%s[5000])\nids = input(i64[65536])\ne = gather(w, ids, axis=0)\n"
                 "y = mul(e, e)\nv = input(%s[300, 5])\nj = input(i32[4096, 2])\n"
                 "u = input(%s[300, 3])\nc = concat(u, v, axis=1)\nsl = slice(c, axis=1, start=2)\n"
                 "g = gather(sl, j, axis=0)\nz = exp(g)\noutput y\noutput z\n",
                 float_dtypes[d], 423, &o, "vector index loads; gather of a slice of a concat");
    }
}

/* Remapped loads read as vectors (cg_emit_remap_vector): a chunk whose
 * elements run consecutively and aligned takes one vector load, one whose
 * index is held (the other half of a concat) one load, the rest element by
 * element. rotate_half on q's head view ([B, S, H * D] permuted, the LLaMA
 * block's form) at D 128 and 64, and at a size whose grid-stride loops
 * unroll with the tables hoisted; concats split on a vector boundary and off
 * it (chunks straddling the seam, halves that start misaligned), a rank-1
 * concat with a scalar tail, slices at an aligned and a misaligned offset,
 * a gather of rows with the in-row axis as vectors, and one along the last
 * axis (loaded indices: element by element). */
static void test_remapped_loads_read_as_vectors_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (size_t d = 0; d < N_OF(float_dtypes); d++) {
        run_opts o = {.lo = -2, .hi = 2};
        for (int dh = 64; dh <= 128; dh += 64) {
            char fmt[1024];
            snprintf(fmt, sizeof fmt,
                     "kfg 1\nq0 = input(%%s[2, 40, %d])\ncs = input(%%s[1, 40, %d])\n"
                     "sn = input(%%s[1, 40, %d])\nc = reshape(cs, [1, 1, 40, %d])\n"
                     "s = reshape(sn, [1, 1, 40, %d])\nh = reshape(q0, [2, 40, 3, %d])\n"
                     "q = permute(h, [0, 2, 1, 3])\nq1 = slice(q, axis=3, stop=%d)\n"
                     "q2 = slice(q, axis=3, start=%d)\nn2 = neg(q2)\n"
                     "r = concat(n2, q1, axis=3)\nqc = mul(q, c)\nrs = mul(r, s)\n"
                     "y = add(qc, rs)\noutput y\n",
                     3 * dh, dh, dh, dh, dh, dh, dh / 2, dh / 2);
            run_text(fmt, float_dtypes[d], 480 + (uint64_t)dh, &o, "rotary on q's head view");
        }
        run_text("kfg 1\na = input(%s[6, 24])\nb = input(%s[6, 40])\nw = input(%s[6, 64])\n"
                 "c = concat(a, b, axis=1)\ny = mul(c, w)\noutput y\n",
                 float_dtypes[d], 482, &o, "concat split on a vector boundary");
        run_text("kfg 1\na = input(%s[6, 20])\nb = input(%s[6, 44])\nw = input(%s[6, 64])\n"
                 "c = concat(a, b, axis=1)\ny = mul(c, w)\noutput y\n",
                 float_dtypes[d], 483, &o, "concat split off a vector boundary");
        run_text("kfg 1\na = input(%s[13])\nb = input(%s[22])\nw = input(%s[35])\n"
                 "c = concat(a, b, axis=0)\ny = mul(c, w)\noutput y\n",
                 float_dtypes[d], 484, &o, "rank-1 concat with a tail");
        run_text("kfg 1\nx = input(%s[12, 64])\nz = input(%s[12, 32])\n"
                 "s = slice(x, axis=1, start=8, stop=40)\ny = add(s, z)\n"
                 "t = slice(x, axis=1, start=3, stop=35)\nu = add(t, z)\noutput y\noutput u\n",
                 float_dtypes[d], 485, &o, "slices at an aligned and a misaligned offset");
        run_text("kfg 1\nt = input(%s[40, 64])\ni = input(i32[4, 6])\nw = input(%s[64])\n"
                 "e = gather(t, i, axis=0)\ny = mul(e, w)\nu = input(%s[5, 9])\n"
                 "j = input(i32[5, 16])\nf = gather(u, j, axis=1)\nz = exp(f)\n"
                 "output y\noutput z\n",
                 float_dtypes[d], 486, &o, "gathers of rows and along the last axis");
    }
    /* big enough that the grid-stride loops unroll (4 vectors a thread) with
     * the tables hoisted */
    run_opts o = {.lo = -2, .hi = 2};
    run_text("kfg 1\nq0 = input(%s[4, 2048, 1024])\ncs = input(%s[1, 2048, 128])\n"
             "sn = input(%s[1, 2048, 128])\nc = reshape(cs, [1, 1, 2048, 128])\n"
             "s = reshape(sn, [1, 1, 2048, 128])\nh = reshape(q0, [4, 2048, 8, 128])\n"
             "q = permute(h, [0, 2, 1, 3])\nq1 = slice(q, axis=3, stop=64)\n"
             "q2 = slice(q, axis=3, start=64)\nn2 = neg(q2)\nr = concat(n2, q1, axis=3)\n"
             "qc = mul(q, c)\nrs = mul(r, s)\ny = add(qc, rs)\noutput y\n",
             KF_DTYPE_BF16, 487, &o, "rotary on q's head view, B4 H8 S2048 D128");
}

/* rotate_half's two halves read as one load where the concat takes them (a
 * pair, cg_elementwise.c: kf_pair0): loaded ahead with the streamed
 * operands (unrolled) or in the body (three streamed operands, or none), a
 * vector where a chunk's elements run consecutively on one side, else
 * element by element: heads of 20 and 36 (chunks across the seam), a
 * misaligned slice (no vector path), cos and sin per batch, two concats of
 * the same halves, a last axis of 10 (2-element chunks, a seam inside one),
 * and D 96 over enough rows that the unrolled loop and its remainder run. */
static void test_rotate_half_pairs_match_on_ragged_and_unaligned_shapes(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (size_t d = 0; d < N_OF(float_dtypes); d++) {
        run_opts o = {.lo = -2, .hi = 2};
        for (int dh = 20; dh <= 36; dh += 16) {
            char fmt[1024];
            snprintf(fmt, sizeof fmt,
                     "kfg 1\nq0 = input(%%s[2, 7, %d])\ncs = input(%%s[1, 7, %d])\n"
                     "sn = input(%%s[1, 7, %d])\nc = reshape(cs, [1, 1, 7, %d])\n"
                     "s = reshape(sn, [1, 1, 7, %d])\nh = reshape(q0, [2, 7, 3, %d])\n"
                     "q = permute(h, [0, 2, 1, 3])\nq1 = slice(q, axis=3, stop=%d)\n"
                     "q2 = slice(q, axis=3, start=%d)\nn2 = neg(q2)\n"
                     "r = concat(n2, q1, axis=3)\nqc = mul(q, c)\nrs = mul(r, s)\n"
                     "y = add(qc, rs)\noutput y\n",
                     3 * dh, dh, dh, dh, dh, dh, dh / 2, dh / 2);
            run_text(fmt, float_dtypes[d], 490 + (uint64_t)dh, &o, "rotary, ragged head");
        }
        run_text("kfg 1\nx = input(%s[6, 66])\nc = input(%s[6, 64])\ns = input(%s[6, 64])\n"
                 "xs = slice(x, axis=1, start=1, stop=65)\nx1 = slice(xs, axis=1, stop=32)\n"
                 "x2 = slice(xs, axis=1, start=32)\nn = neg(x2)\nr = concat(n, x1, axis=1)\n"
                 "a = mul(xs, c)\nb = mul(r, s)\ny = add(a, b)\noutput y\n",
                 float_dtypes[d], 493, &o, "rotary on a misaligned slice");
        run_text("kfg 1\nq0 = input(%s[2, 7, 60])\nc = input(%s[2, 1, 7, 20])\n"
                 "s = input(%s[2, 1, 7, 20])\nh = reshape(q0, [2, 7, 3, 20])\n"
                 "q = permute(h, [0, 2, 1, 3])\nq1 = slice(q, axis=3, stop=10)\n"
                 "q2 = slice(q, axis=3, start=10)\nn2 = neg(q2)\nr = concat(n2, q1, axis=3)\n"
                 "qc = mul(q, c)\nrs = mul(r, s)\ny = add(qc, rs)\noutput y\n",
                 float_dtypes[d], 494, &o, "rotary, cos and sin per batch, ragged head");
        run_text("kfg 1\nx = input(%s[6, 64])\nx1 = slice(x, axis=1, stop=32)\n"
                 "x2 = slice(x, axis=1, start=32)\nn = neg(x2)\nr = concat(n, x1, axis=1)\n"
                 "t = concat(x2, x1, axis=1)\ny = mul(r, t)\noutput y\n",
                 float_dtypes[d], 495, &o, "two concats of the same halves");
        run_text("kfg 1\nx = input(%s[9, 10])\nx1 = slice(x, axis=1, stop=5)\n"
                 "x2 = slice(x, axis=1, start=5)\nn = neg(x2)\nr = concat(n, x1, axis=1)\n"
                 "w = input(%s[9, 10])\ny = mul(r, w)\noutput y\n",
                 float_dtypes[d], 496, &o, "rotate_half of 10");
    }
    run_opts o = {.lo = -2, .hi = 2};
    run_text("kfg 1\nq0 = input(%s[3, 1001, 384])\ncs = input(%s[1, 1001, 96])\n"
             "sn = input(%s[1, 1001, 96])\nc = reshape(cs, [1, 1, 1001, 96])\n"
             "s = reshape(sn, [1, 1, 1001, 96])\nh = reshape(q0, [3, 1001, 4, 96])\n"
             "q = permute(h, [0, 2, 1, 3])\nq1 = slice(q, axis=3, stop=48)\n"
             "q2 = slice(q, axis=3, start=48)\nn2 = neg(q2)\nr = concat(n2, q1, axis=3)\n"
             "qc = mul(q, c)\nrs = mul(r, s)\ny = add(qc, rs)\noutput y\n",
             KF_DTYPE_BF16, 497, &o, "rotary on q's head view, B3 H4 S1001 D96");
}

/* The CUDA target's gather contract: an index outside the axis is clamped
 * into it (the CPU target fails the run instead; the reference refuses it). */
static void test_gather_clamps_an_index_outside_the_axis_on_the_gpu(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_graph *g = NULL;
    const char *text = "kfg 1\nw = input(f32[10, 4])\ni = input(i64[4])\n"
                       "e = gather(w, i, axis=0)\noutput e\n";
    assert_int_equal(kf_graph_parse(G.ctx, text, strlen(text), &g), KF_OK);
    kf_program *p = NULL;
    assert_int_equal(kf_compile(G.ctx, g, &p), KF_OK);
    float w[40], e[16];
    for (int k = 0; k < 40; k++)
        w[k] = (float)k;
    const int64_t idx[4] = {-5, 3, 99, INT64_MAX};
    kf_binding in[2] = {{"w", w, sizeof w}, {"i", (void *)idx, sizeof idx}};
    kf_binding out = {"e", e, sizeof e};
    kf_test_poison(e, KF_DTYPE_F32, 16);
    assert_int_equal(kf_program_run(p, in, 2, &out, 1, NULL), KF_OK);
    const int rows[4] = {0, 3, 9, 9};
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++)
            assert_true(e[r * 4 + c] == (float)(rows[r] * 4 + c));
    kf_program_destroy(p);
    kf_graph_destroy(g);
}

/* Groups of 128 chunks or more take the bulk path on sm_90 and later
 * (elementwise_bulk): whole chunks through shared memory by bulk copies, then
 * the partial last chunk by the grid-stride loops. Per-column operands whose
 * period divides a block's step (4096) or does not (4100); an output in a
 * streamed operand's place or in its own region (f32 in, bf16 out); a ragged
 * scalar tail (1031 x 1030 % 8 = 2); and 1601 chunks, a dozen per block on
 * a 132-SM GPU, so that every stage of the ring is refilled, several times. */
static void test_large_elementwise_groups_take_the_bulk_path_and_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16, KF_DTYPE_F32};
    for (size_t d = 0; d < N_OF(dts); d++) {
        run_opts o = {.lo = -3, .hi = 3, .report_has_sm90 = "elementwise_bulk"};
        run_text("kfg 1\nx = input(%s[521, 4096])\ns = input(%s[4096])\nb = input(%s[4096])\n"
                 "g = input(%s[4096])\nxs = mul(x, s)\nh = add(xs, b)\nge = gelu(h)\n"
                 "y = mul(ge, g)\noutput y\n",
                 dts[d], 460, &o, "bulk gelu(x*s+b)*g, 4096 columns");
        run_text("kfg 1\nx = input(%s[520, 4100])\nb = input(%s[4100])\nh = add(x, b)\n"
                 "y = silu(h)\noutput y\n",
                 dts[d], 461, &o, "bulk silu(x+b), 4100 columns");
    }
    run_opts o = {.lo = -3, .hi = 3, .report_has_sm90 = "elementwise_bulk"};
    run_text("kfg 1\nx = input(%s[3202, 4096])\nb = input(%s[4096])\nh = add(x, b)\n"
             "y = gelu(h)\noutput y\n",
             KF_DTYPE_BF16, 463, &o, "bulk gelu(x+b), 1601 chunks");
    run_text("kfg 1\na = input(f32[1031, 1030])\nb = input(bf16[1031, 1030])\n"
             "c = cast(b, f32)\ny = mul(a, c)\nz = cast(y, bf16)\noutput z\n",
             KF_DTYPE_F32, 462, &o, "bulk f32 * bf16 -> bf16");
}

/* bf16 add/sub/mul run two elements per bf16x2 instruction, and the
 * per-column operands load once per thread (the hoisted path: 264 columns,
 * a grid rounded to a multiple of 33 blocks). Both are exact: the reference's
 * single rounding from double is the correctly rounded result, so the outputs
 * must match it bit for bit, not merely within the tolerance. */
static void test_bf16_packed_arithmetic_matches_the_reference_bit_for_bit(void **state) {
    (void)state;
    REQUIRE_GPU();
    const char *text = "kfg 1\na = input(bf16[300, 264])\nb = input(bf16[264])\n"
                       "c = input(bf16[264])\ny = mul(a, b)\nz = add(y, c)\nw = sub(z, a)\n"
                       "output y\noutput w\n";
    kf_graph *g = NULL;
    assert_int_equal(kf_graph_parse(G.ctx, text, strlen(text), &g), KF_OK);
    kf_binding in[3], out[2], ref[2];
    const char *names[3] = {"a", "b", "c"};
    size_t counts[3] = {300 * 264, 264, 264};
    kf_test_rng rng = kf_test_rng_make(450);
    for (int i = 0; i < 3; i++) {
        in[i] =
            (kf_binding){.name = names[i], .size = counts[i] * 2, .data = malloc(counts[i] * 2)};
        kf_test_fill(in[i].data, KF_DTYPE_BF16, counts[i], &rng, -4, 4);
    }
    for (int i = 0; i < 2; i++) {
        out[i] = (kf_binding){
            .name = i ? "w" : "y", .size = 300 * 264 * 2, .data = malloc(300 * 264 * 2)};
        ref[i] =
            (kf_binding){.name = out[i].name, .size = out[i].size, .data = malloc(out[i].size)};
        kf_test_poison(out[i].data, KF_DTYPE_BF16, 300 * 264);
    }
    kf_program *p = NULL;
    assert_int_equal(kf_compile(G.ctx, g, &p), KF_OK);
    if (kf_program_run(p, in, 3, out, 2, NULL) != KF_OK)
        fail_msg("bf16 packed: %s", kf_program_error(p));
    assert_int_equal(kf_graph_eval(g, in, 3, ref, 2), KF_OK);
    for (int i = 0; i < 2; i++) {
        const unsigned short *o = out[i].data, *r = ref[i].data;
        size_t bad = 0, first = 0;
        for (size_t j = 0; j < 300 * 264; j++) {
            if (o[j] != r[j] && !bad++)
                first = j;
        }
        if (bad)
            fail_msg(
                "bf16 packed, output %s: %zu of %d elements differ from the reference; first at "
                "%zu: 0x%04x, reference 0x%04x (KF_TEST_SEED=%llu)",
                out[i].name, bad, 300 * 264, first, o[first], r[first],
                (unsigned long long)kf_test_seed());
    }
    kf_program_destroy(p);
    kf_graph_destroy(g);
    for (int i = 0; i < 3; i++)
        free(in[i].data);
    for (int i = 0; i < 2; i++) {
        free(out[i].data);
        free(ref[i].data);
    }
}

/* ------------------------------------------------------------------------ */
/* Row-wise and column reductions                                             */
/* ------------------------------------------------------------------------ */

static void test_every_rowwise_op_in_every_float_dtype_matches(void **state) {
    (void)state;
    REQUIRE_GPU();
    /* Row lengths for the warp, block and multipass templates. */
    static const int lens[] = {7, 256, 1000, 5000};
    for (size_t d = 0; d < N_OF(float_dtypes); d++) {
        for (size_t l = 0; l < N_OF(lens); l++) {
            char fmt[1024];
            snprintf(fmt, sizeof fmt,
                     "kfg 1\nx = input(%%s[19, %d])\nw = input(%%s[%d])\nb = input(%%s[%d])\n"
                     "sm = softmax(x)\nln = layer_norm(x, w, b, axis=-1, eps=1e-5)\n"
                     "rn = rms_norm(x, w, axis=-1, eps=1e-6)\nrs = reduce_sum(x, axis=1)\n"
                     "rx = reduce_max(x, axis=1, keepdim=true)\nrm = reduce_mean(x, axis=-1)\n"
                     "output sm\noutput ln\noutput rn\noutput rs\noutput rx\noutput rm\n",
                     lens[l], lens[l], lens[l]);
            run_opts o = {.lo = -3, .hi = 3};
            run_text(fmt, float_dtypes[d], 500 + l, &o, "row-wise ops");
        }
    }
}

/* f64 norms of rows whose squares overflow: the reference takes them on the
 * row scaled below 2^500 (kf_ir_row_scale_exp), and so must the kernels
 * (KF_ROW_SCALE), for the warp, block and multipass templates; unscaled, the
 * sum of squares is inf and the row comes out 0 or NaN. */
static void test_f64_norms_of_rows_whose_squares_overflow_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const int lens[] = {7, 1000, 5000};
    static const char *const scales[] = {"1e184", "1e305"};
    for (size_t l = 0; l < N_OF(lens); l++) {
        for (size_t c = 0; c < N_OF(scales); c++) {
            char fmt[1024];
            snprintf(fmt, sizeof fmt,
                     "kfg 1\nx = input(%%s[9, %d])\nv = input(%%s[9, %d])\nw = input(%%s[%d])\n"
                     "b = input(%%s[%d])\nc = const(%%s[], %s)\nxs = mul(x, c)\nvs = mul(v, c)\n"
                     "rn = rms_norm(xs, w)\nln = layer_norm(vs, w, b)\nrt = relu(ln)\n"
                     "output rn\noutput rt\n",
                     lens[l], lens[l], lens[l], lens[l], scales[c]);
            run_opts o = {.lo = -3, .hi = 3};
            run_text(fmt, KF_DTYPE_F64, 700 + l * 2 + c, &o, "f64 norms of huge rows");
        }
    }
}

/* f32 and bf16 rows hold values up to 2^128: a square above 2^64 (or a sum
 * of values near 2^128) overflows the f32 statistics, and a norm of rows near
 * 1e21 came out 0 or NaN (the CPU did the same before b954a91). Every row
 * kernel path: a warp per row in registers (39), staged through shared
 * memory (layer_norm of 1000), a block per row (5000), re-read per pass
 * (40000), and a GEMM's norm prologue; sums that overflow (3e37 x 5000) as
 * well as squares. */
static void test_f32_and_bf16_norms_of_rows_whose_squares_overflow_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const int lens[] = {39, 1000, 5000, 40000};
    static const char *const scales[] = {"1e21", "-3e30", "3e37"};
    static const kf_dtype dts[] = {KF_DTYPE_F32, KF_DTYPE_BF16};
    for (size_t d = 0; d < N_OF(dts); d++) {
        for (size_t l = 0; l < N_OF(lens); l++) {
            for (size_t c = 0; c < N_OF(scales); c++) {
                char fmt[1024];
                snprintf(fmt, sizeof fmt,
                         "kfg 1\nx = input(%%s[9, %d])\nv = input(%%s[9, %d])\n"
                         "w = input(%%s[%d])\nb = input(%%s[%d])\nc = const(%%s[], %s)\n"
                         "xs = mul(x, c)\nvs = mul(v, c)\nrn = rms_norm(xs, w, eps=1e-6)\n"
                         "ln = layer_norm(vs, w, b, eps=1e-5)\nrt = relu(ln)\n"
                         "output rn\noutput rt\n",
                         lens[l], lens[l], lens[l], lens[l], scales[c]);
                run_opts o = {.lo = -3, .hi = 3};
                run_text(fmt, dts[d], 740 + d * 20 + l * 4 + c, &o, "norms of huge rows");
            }
        }
        for (size_t c = 0; c < N_OF(scales); c++) {
            char fmt[1024];
            snprintf(fmt, sizeof fmt,
                     "kfg 1\nx = input(%%s[6, 64])\nw = input(%%s[64])\nm = input(%%s[64, 72])\n"
                     "c = const(%%s[], %s)\nh = mul(x, c)\nn = rms_norm(h, w, eps=1e-6)\n"
                     "y = matmul(n, m)\noutput y\n",
                     scales[c]);
            run_opts o = {.lo = -3, .hi = 3};
            run_text(fmt, dts[d], 790 + d * 4 + c, &o, "a GEMM's norm prologue of huge rows");
        }
    }
}

/* gelu(x) rounds to x in f32 once its correction is below half an ulp of x
 * (x above about 5.3): sqrt(gelu(x) - x) is then 0 in the reference, and NaN
 * when gelu lands an ulp below x. */
static void test_f32_gelu_of_large_x_rounds_to_x_as_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    run_opts o = {.lo = 5.4, .hi = 9};
    run_text("kfg 1\nx = input(%s[256, 1024])\ng = gelu(x)\nd = sub(g, x)\ny = sqrt(d)\noutput y\n",
             KF_DTYPE_F32, 900, &o, "sqrt(gelu(x) - x)");
}

static void test_column_reductions_and_norm_prologue_epilogue_fusions_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (size_t d = 0; d < N_OF(float_dtypes); d++) {
        run_opts o = {.lo = -2, .hi = 2};
        run_text("kfg 1\nx = input(%s[300, 70])\nt = tanh(x)\ns = reduce_sum(t, axis=0)\n"
                 "m = reduce_max(x, axis=0, keepdim=true)\nmu = reduce_mean(x, axis=0)\n"
                 "output s\noutput m\noutput mu\n",
                 float_dtypes[d], 600, &o, "column reductions");
        run_text("kfg 1\nx = input(%s[33, 512])\nr = input(%s[33, 512])\nw = input(%s[512])\n"
                 "b = input(%s[512])\nh = add(x, r)\nln = layer_norm(h, w, b, axis=-1, eps=1e-5)\n"
                 "y = gelu(ln)\nc = const(%s[], 2)\nz = mul(y, c)\noutput z\n",
                 float_dtypes[d], 601, &o, "prologue + layer_norm + epilogue");
        run_text("kfg 1\nx = input(%s[4, 9, 128])\nsc = const(%s[], 0.125)\nxs = mul(x, sc)\n"
                 "p = softmax(xs)\nl = log(p)\noutput l\n",
                 float_dtypes[d], 602, &o, "scaled softmax + log");
    }
}

/* argmax along every axis (the last: a warp per row; another: the column
 * kernel), ragged sizes, keepdim both ways, against the reference: ties
 * (i32 inputs from 17 values; f16/bf16 near the top of [-2, 2]) go to the
 * first index, a NaN (sqrt of the rare negative input) to the first NaN, and
 * an i32 index that is off by one fails (outputs are exact). */
static void test_argmax_over_every_axis_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    typedef struct {
        const char *shape;
        int axis, keepdim;
    } amax_case;
    static const amax_case cases[] = {
        {"[37, 70]", 0, 1},      {"[37, 70]", 1, 0},      {"[300, 33]", 0, 0},
        {"[5, 301, 9]", 1, 1},   {"[5, 301, 9]", -1, 0},  {"[3, 5000, 2]", 1, 0},
        {"[2, 33, 7, 5]", 2, 0}, {"[2, 33, 7, 5]", 0, 1}, {"[1, 13]", 0, 0},
        {"[4097, 3]", 0, 1},
    };
    static const kf_dtype dts[] = {KF_DTYPE_F32, KF_DTYPE_BF16, KF_DTYPE_F16};
    for (size_t c = 0; c < N_OF(cases); c++) {
        const amax_case *k = &cases[c];
        for (size_t d = 0; d < N_OF(dts); d++) {
            char fmt[1024];
            snprintf(fmt, sizeof fmt,
                     "kfg 1\nx = input(%%s%s)\ny = argmax(x, axis=%d, keepdim=%s)\n"
                     "r = sqrt(x)\nn = argmax(r, axis=%d, keepdim=%s)\nf = cast(n, f32)\n"
                     "output y\noutput n\noutput f\n",
                     k->shape, k->axis, k->keepdim ? "true" : "false", k->axis,
                     k->keepdim ? "true" : "false");
            /* about 1 input in 1500 negative: some lines hold a NaN, most not */
            run_opts o = {.lo = -0.002, .hi = 3};
            run_text(fmt, dts[d], 950 + c * 8 + d, &o, "argmax (NaN, ties)");
        }
        char fmt[1024];
        snprintf(fmt, sizeof fmt,
                 "kfg 1\nx = input(%%s%s)\nb = const(%%s[], 3)\nm = mul(x, b)\n"
                 "y = argmax(m, axis=%d, keepdim=%s)\noutput y\n",
                 k->shape, k->axis, k->keepdim ? "true" : "false");
        run_opts o = {.lo = -8, .hi = 9};
        run_text(fmt, KF_DTYPE_I32, 950 + c * 8 + 5, &o, "argmax of i32 (ties)");
    }
}

/* ------------------------------------------------------------------------ */
/* GEMMs through cuBLASLt                                                     */
/* ------------------------------------------------------------------------ */

/* Each case: the epilogue, the report's claim about it, and what must not be
 * claimed. The numerics decide whether the claim was right: applying, say, a
 * residual before a relu that the graph applies after it gives a large error
 * in f32. */
typedef struct epi_case {
    const char *name;
    const char *body; /* lines after h = matmul(x, w) defining y */
    const char *has, *lacks;
} epi_case;

static const epi_case epi_cases[] = {
    {"bare", "y = h\n", "epilogue none", "then kernel"},
    {"bias", "y = add(h, b)\n", "epilogue bias (", "then kernel"},
    {"bias first operand", "y = add(b, h)\n", "epilogue bias (", "then kernel"},
    {"relu", "y = relu(h)\n", "epilogue relu (", "then kernel"},
    {"gelu_tanh", "y = gelu_tanh(h)\n", "epilogue gelu (", "then kernel"},
    {"bias+relu", "hb = add(h, b)\ny = relu(hb)\n", "epilogue relu_bias (", "then kernel"},
    {"bias+gelu_tanh", "hb = add(h, b)\ny = gelu_tanh(hb)\n", "epilogue gelu_bias (",
     "then kernel"},
    {"residual", "y = add(h, r)\n", "epilogue none+beta*C (", "then kernel"},
    {"residual+bias+relu", "hr = add(h, r)\nhb = add(hr, b)\ny = relu(hb)\n",
     "epilogue relu_bias+beta*C (", "then kernel"},
    /* Not cuBLASLt's order: the residual comes after the activation. */
    {"relu then residual", "hb = add(h, b)\nrl = relu(hb)\ny = add(rl, r)\n",
     "epilogue relu_bias, then kernel", NULL},
    /* kfuse's gelu is erf: cuBLASLt's tanh GELU is not it. */
    {"bias+gelu(erf)", "hb = add(h, b)\ny = gelu(hb)\n", "epilogue bias, then kernel|erf",
     "gelu_bias"},
    /* A bias before a scale: cuBLASLt has no scale after its bias. */
    {"bias then scale", "hb = add(h, b)\nc = const(%s[], 0.5)\ny = mul(hb, c)\n",
     "epilogue bias, then kernel", NULL},
    /* A scale first: nothing maps. */
    {"scale then bias", "c = const(%s[], 0.5)\nhs = mul(h, c)\ny = add(hs, b)\n",
     "epilogue none, then kernel", NULL},
    /* h is also an output: cuBLASLt writes it, the kernel computes the rest. */
    {"h and relu(h+b)", "hb = add(h, b)\ny = relu(hb)\noutput h\n", "then kernel", NULL},
};

/* Case c's graph: x[96, 72] . w[72, 80] with its epilogue (its %s the
 * dtypes of the 4 inputs, then of its constant), or the bare product as the
 * output (`y = h` is not .kfg). */
static void epi_case_text(const epi_case *c, char *fmt, size_t size) {
    if (strcmp(c->name, "bare") == 0)
        snprintf(fmt, size,
                 "kfg 1\nx = input(%%s[96, 72])\nw = input(%%s[72, 80])\n"
                 "y = matmul(x, w)\noutput y\n");
    else
        snprintf(fmt, size,
                 "kfg 1\nx = input(%%s[96, 72])\nw = input(%%s[72, 80])\nb = input(%%s[80])\n"
                 "r = input(%%s[96, 80])\nh = matmul(x, w)\n%soutput y\n",
                 c->body);
}

static kf_ctx *ctx_gemm(kf_gemm_mode mode);

static void test_gemm_epilogues_map_to_cublaslt_only_in_its_order_of_operations(void **state) {
    (void)state;
    REQUIRE_GPU();
    /* cuBLASLt forced: the default measures the generated kernel against it,
     * and the report names the side that won. */
    kf_ctx *lt = ctx_gemm(KF_GEMM_CUBLASLT);
    for (size_t d = 0; d < N_OF(gemm_dtypes); d++) {
        for (size_t i = 0; i < N_OF(epi_cases); i++) {
            const epi_case *c = &epi_cases[i];
            char fmt[1024];
            epi_case_text(c, fmt, sizeof fmt);
            run_opts o = {
                .lo = -1, .hi = 1, .report_has = c->has, .report_lacks = c->lacks, .ctx = lt};
            /* The constant's dtype: the body's %s comes after the 4 inputs. */
            run_text(fmt, gemm_dtypes[d], 700 + i, &o, c->name);
        }
    }
    kf_ctx_destroy(lt);
}

static void test_batched_and_transposed_gemms_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (size_t d = 0; d < N_OF(gemm_dtypes); d++) {
        run_opts o = {.lo = -1, .hi = 1};
        run_text("kfg 1\na = input(%s[3, 40, 24])\nb = input(%s[3, 24, 56])\n"
                 "c = matmul(a, b)\noutput c\n",
                 gemm_dtypes[d], 800, &o, "batched");
        run_text("kfg 1\na = input(%s[2, 3, 40, 24])\nb = input(%s[24, 56])\n"
                 "c = matmul(a, b)\noutput c\n",
                 gemm_dtypes[d], 801, &o, "broadcast B (batch folded into M)");
        run_text("kfg 1\na = input(%s[24, 40])\nb = input(%s[4, 56, 24])\n"
                 "c = matmul(a, b, transpose_a=true, transpose_b=true)\noutput c\n",
                 gemm_dtypes[d], 802, &o, "transposes, broadcast A");
        run_text("kfg 1\na = input(%s[2, 40, 3, 16])\nb = input(%s[2, 40, 3, 16])\n"
                 "ap = permute(a, [0, 2, 1, 3])\nbp = permute(b, [0, 2, 3, 1])\n"
                 "c = matmul(ap, bp)\noutput c\n",
                 gemm_dtypes[d], 803, &o, "permuted views as operands");
        run_text("kfg 1\nx = input(%s[64, 48])\nw = input(%s[48, 1])\nv = input(%s[1, 64])\n"
                 "c = matmul(x, w)\ne = matmul(v, x)\noutput c\noutput e\n",
                 gemm_dtypes[d], 804, &o, "vector shapes");
    }
    run_opts o = {.lo = -1, .hi = 1};
    run_text("kfg 1\nx = input(%s[33, 65])\nw = input(%s[65, 17])\nb = input(%s[17])\n"
             "h = matmul(x, w)\nhb = add(h, b)\ny = relu(hb)\noutput y\n",
             KF_DTYPE_F64, 805, &o, "f64 GEMM");
}

/* ------------------------------------------------------------------------ */
/* Attention (unfused fallback)                                               */
/* ------------------------------------------------------------------------ */

static const char attn_fmt[] =
    "kfg 1\n"
    "q = input(%s[2, 4, 40, 32])\nk = input(%s[2, 4, 40, 32])\nv = input(%s[2, 4, 40, 24])\n"
    "qk = matmul(q, k, transpose_b=true)\nsc = const(%s[], 0.17677669529)\n"
    "s0 = mul(qk, sc)\n"
    "%s" /* variant: defines s1 from s0 */
    "p = softmax(s1)\no = matmul(p, v)\noutput o\n";

typedef struct attn_case {
    const char *name;
    const char *body;
    const char *mask;
} attn_case;

static const attn_case attn_cases[] = {
    {"plain", "s1 = neg(s0)\n", "mask none"},
    {"causal",
     "row = iota(i32[40, 40], axis=0)\ncol = iota(i32[40, 40], axis=1)\nkeep = ge(row, col)\n"
     "ninf = const(%s[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask causal"},
    {"sliding window 8",
     /* keep q - 7 <= kv <= q: min(q - kv, 7 - (q - kv)) >= 0 */
     "row = iota(i32[40, 40], axis=0)\ncol = iota(i32[40, 40], axis=1)\nd = sub(row, col)\n"
     "seven = const(i32[], 7)\nzero = const(i32[], 0)\nrest = sub(seven, d)\nm = min(d, rest)\n"
     "keep = ge(m, zero)\nninf = const(%s[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask sliding_window"},
    {"softcap 30 + causal",
     "cap = const(%s[], 30)\nt0 = div(s0, cap)\nt1 = tanh(t0)\nt2 = mul(t1, cap)\n"
     "row = iota(i32[40, 40], axis=0)\ncol = iota(i32[40, 40], axis=1)\nkeep = ge(row, col)\n"
     "ninf = const(%s[], -inf)\ns1 = where(keep, t2, ninf)\n",
     "mask causal"},
    {"ALiBi + causal",
     "slope = input(%s[4, 1, 1])\nrow = iota(i32[40, 40], axis=0)\n"
     "col = iota(i32[40, 40], axis=1)\ndi = sub(col, row)\ndf = cast(di, %s)\n"
     "bias = mul(slope, df)\nsb = add(s0, bias)\nkeep = ge(row, col)\n"
     "ninf = const(%s[], -inf)\ns1 = where(keep, sb, ninf)\n",
     "mask causal"},
};

static kf_ctx *flags_ctx(unsigned flags);

/* The unfused steps (cuBLASLt Q.K^T, the softmax kernel, cuBLASLt P.V),
 * forced with KF_FLAG_UNFUSED_ATTENTION: these groups (head dims 32 / 24)
 * run the SIMT kernel by default (test_cuda_attnsimt). */
static void test_attention_runs_unfused_with_its_score_expression_and_mask(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = flags_ctx(KF_FLAG_UNFUSED_ATTENTION);
    for (size_t d = 0; d < N_OF(gemm_dtypes); d++) {
        for (size_t i = 0; i < N_OF(attn_cases); i++) {
            const char *dn = kf_dtype_name(gemm_dtypes[d]);
            char body[1024], text[4096];
            snprintf(body, sizeof body, attn_cases[i].body, dn, dn, dn, dn);
            snprintf(text, sizeof text, attn_fmt, dn, dn, dn, dn, body);
            kf_graph *g = NULL;
            if (kf_graph_parse(ctx, text, strlen(text), &g) != KF_OK)
                fail_msg("%s: parse: %s\n%s", attn_cases[i].name, kf_graph_error(g), text);
            char label[128], has[160];
            snprintf(label, sizeof label, "attention %s [%s]", attn_cases[i].name, dn);
            snprintf(has, sizeof has, "unfused fallback|%s", attn_cases[i].mask);
            run_opts o = {.lo = -2, .hi = 2, .report_has = has, .ctx = ctx};
            run_and_compare(g, 900 + i, &o, label);
            kf_graph_destroy(g);
        }
    }
    kf_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------ */
/* Attention (the fused kernel, the default where it takes the group)        */
/* ------------------------------------------------------------------------ */

/* Each body defines q, k, v and the score s1 ('$' is the dtype); the softmax,
 * P.V and the output follow. Sizes are not tile multiples (64 x 64 tiles). */
static const attn_case fused_cases[] = {
    {"causal, S 200 (not a tile multiple), head dim 128",
     "q = input($[2, 3, 200, 128])\n"
     "k = input($[2, 3, 200, 128])\n"
     "v = input($[2, 3, 200, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\n"
     "s0 = mul(qk, sc)\n"
     "row = iota(i32[200, 200], axis=0)\n"
     "col = iota(i32[200, 200], axis=1)\n"
     "keep = ge(row, col)\n"
     "ninf = const($[], -inf)\n"
     "s1 = where(keep, s0, ninf)\n",
     "mask causal"},
    {"no mask, Sq 77 != Skv 333, head dim 64",
     "q = input($[2, 2, 77, 64])\n"
     "k = input($[2, 2, 333, 64])\n"
     "v = input($[2, 2, 333, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.125)\n"
     "s1 = mul(qk, sc)\n",
     "mask none"},
    {"causal kv <= q with Sq 100 < Skv 260",
     "q = input($[1, 2, 100, 128])\n"
     "k = input($[1, 2, 260, 128])\n"
     "v = input($[1, 2, 260, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\n"
     "s0 = mul(qk, sc)\n"
     "row = iota(i32[100, 260], axis=0)\n"
     "col = iota(i32[100, 260], axis=1)\n"
     "keep = ge(row, col)\n"
     "ninf = const($[], -inf)\n"
     "s1 = where(keep, s0, ninf)\n",
     "mask causal"},
    {"queries at the end of a longer key sequence (kv <= q + 160): general",
     "q = input($[1, 2, 100, 64])\n"
     "k = input($[1, 2, 260, 64])\n"
     "v = input($[1, 2, 260, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.125)\n"
     "s0 = mul(qk, sc)\n"
     "row = iota(i32[100, 260], axis=0)\n"
     "col = iota(i32[100, 260], axis=1)\n"
     "off = const(i32[], 160)\n"
     "qa = add(row, off)\n"
     "keep = ge(qa, col)\n"
     "ninf = const($[], -inf)\n"
     "s1 = where(keep, s0, ninf)\n",
     "mask general"},
    {"batch 1, 40 heads, causal",
     "q = input($[1, 40, 130, 64])\n"
     "k = input($[1, 40, 130, 64])\n"
     "v = input($[1, 40, 130, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.125)\n"
     "s0 = mul(qk, sc)\n"
     "row = iota(i32[130, 130], axis=0)\n"
     "col = iota(i32[130, 130], axis=1)\n"
     "keep = ge(row, col)\n"
     "ninf = const($[], -inf)\n"
     "s1 = where(keep, s0, ninf)\n",
     "mask causal"},
    {"sliding window 50, S 300",
     "q = input($[1, 2, 300, 128])\n"
     "k = input($[1, 2, 300, 128])\n"
     "v = input($[1, 2, 300, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\n"
     "s0 = mul(qk, sc)\n"
     "row = iota(i32[300, 300], axis=0)\n"
     "col = iota(i32[300, 300], axis=1)\n"
     "d = sub(row, col)\n"
     "w = const(i32[], 49)\n"
     "zero = const(i32[], 0)\n"
     "rest = sub(w, d)\n"
     "m = min(d, rest)\n"
     "keep = ge(m, zero)\n"
     "ninf = const($[], -inf)\n"
     "s1 = where(keep, s0, ninf)\n",
     "mask sliding_window"},
    {"softcap 30 tanh(s / 30) + causal",
     "q = input($[2, 2, 150, 128])\n"
     "k = input($[2, 2, 150, 128])\n"
     "v = input($[2, 2, 150, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\n"
     "s0 = mul(qk, sc)\n"
     "cap = const($[], 30)\n"
     "t0 = div(s0, cap)\n"
     "t1 = tanh(t0)\n"
     "t2 = mul(t1, cap)\n"
     "row = iota(i32[150, 150], axis=0)\n"
     "col = iota(i32[150, 150], axis=1)\n"
     "keep = ge(row, col)\n"
     "ninf = const($[], -inf)\n"
     "s1 = where(keep, t2, ninf)\n",
     "mask causal"},
    {"ALiBi slope[h] (kv - q) + causal",
     "q = input($[2, 4, 190, 64])\n"
     "k = input($[2, 4, 190, 64])\n"
     "v = input($[2, 4, 190, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.125)\n"
     "s0 = mul(qk, sc)\n"
     "slope = input($[4, 1, 1])\n"
     "row = iota(i32[190, 190], axis=0)\n"
     "col = iota(i32[190, 190], axis=1)\n"
     "di = sub(col, row)\n"
     "df = cast(di, $)\n"
     "bias = mul(slope, df)\n"
     "sb = add(s0, bias)\n"
     "keep = ge(row, col)\n"
     "ninf = const($[], -inf)\n"
     "s1 = where(keep, sb, ninf)\n",
     "mask causal"},
    {"an additive mask tensor [Sq, Skv]",
     "q = input($[2, 2, 120, 128])\n"
     "k = input($[2, 2, 140, 128])\n"
     "v = input($[2, 2, 140, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\n"
     "s0 = mul(qk, sc)\n"
     "am = input($[120, 140])\n"
     "s1 = add(s0, am)\n",
     "mask none"},
    {"a bool mask tensor with a finite fill",
     "q = input($[2, 2, 96, 64])\n"
     "k = input($[2, 2, 96, 64])\n"
     "v = input($[2, 2, 96, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.125)\n"
     "s0 = mul(qk, sc)\n"
     "m = input(bool[96, 96])\n"
     "fill = const($[], -30000)\n"
     "s1 = where(m, s0, fill)\n",
     "mask general"},
    {"GQA 8:1 (K, V broadcast over the head group) + causal",
     "q = input($[1, 2, 8, 150, 128])\n"
     "k = input($[1, 2, 1, 150, 128])\n"
     "v = input($[1, 2, 1, 150, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\n"
     "s0 = mul(qk, sc)\n"
     "row = iota(i32[150, 150], axis=0)\n"
     "col = iota(i32[150, 150], axis=1)\n"
     "keep = ge(row, col)\n"
     "ninf = const($[], -inf)\n"
     "s1 = where(keep, s0, ninf)\n",
     "mask causal"},
    /* Block-sparse keep maps (README: block-sparse masks). Map row 1 is
     * dropped whole (the map is an output too, so a loaded tensor): its query
     * rows are the reference's all-masked rows, which every kernel tile
     * holding them visits in full. */
    {"block-sparse 128x128 keep map, S 520 (ragged), map row 1 empty, finite fill",
     "q = input($[1, 2, 520, 128])\nk = input($[1, 2, 520, 128])\n"
     "v = input($[1, 2, 520, 128])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "kin = input(bool[5, 5])\nri = iota(i32[5, 1], axis=0)\none = const(i32[], 1)\n"
     "rok = ne(ri, one)\nno = const(bool[], 0)\nbm = where(rok, kin, no)\noutput bm\n"
     "r0 = repeat(bm, axis=0, times=128)\nr1 = repeat(r0, axis=1, times=128)\n"
     "m0 = slice(r1, axis=0, stop=520)\nmk = slice(m0, axis=1, stop=520)\n"
     "fill = const($[], -30000)\ns1 = where(mk, s0, fill)\n",
     "mask block_sparse"},
    {"block-sparse per-head keep maps [H, 4, 6] of 128x128, dropping where true",
     "q = input($[2, 3, 500, 64])\nk = input($[2, 3, 700, 64])\n"
     "v = input($[2, 3, 700, 64])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "bm = input(bool[3, 4, 6])\n"
     "r0 = repeat(bm, axis=1, times=128)\nr1 = repeat(r0, axis=2, times=128)\n"
     "m0 = slice(r1, axis=1, stop=500)\nmk = slice(m0, axis=2, stop=700)\n"
     "ninf = const($[], -inf)\ns1 = where(mk, ninf, s0)\n",
     "mask block_sparse"},
    {"Q, K, V permuted views of [B, S, H, D] + causal",
     "qi = input($[2, 90, 4, 64])\n"
     "ki = input($[2, 90, 4, 64])\n"
     "vi = input($[2, 90, 4, 64])\n"
     "q = permute(qi, [0, 2, 1, 3])\n"
     "k = permute(ki, [0, 2, 1, 3])\n"
     "v = permute(vi, [0, 2, 1, 3])\n"
     "qk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.125)\n"
     "s0 = mul(qk, sc)\n"
     "row = iota(i32[90, 90], axis=0)\n"
     "col = iota(i32[90, 90], axis=1)\n"
     "keep = ge(row, col)\n"
     "ninf = const($[], -inf)\n"
     "s1 = where(keep, s0, ninf)\n",
     "mask causal"},
};

/* Block-sparse keep maps whose tiles are not whole 128x128 kernel tiles: the
 * mma.sync kernel tests the tiles that mix kept and dropped keys per element
 * (the sm_90a kernel declines them, and the recipe says why). */
static const attn_case fa2_only_cases[] = {
    {"block-sparse 64x32 keep map (tiles inside the kernel's, mixed), Sq 300 != Skv 440, -inf",
     "q = input($[2, 1, 300, 64])\nk = input($[2, 1, 440, 64])\n"
     "v = input($[2, 1, 440, 64])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "kin = input(bool[5, 14])\nri = iota(i32[5, 1], axis=0)\nthree = const(i32[], 3)\n"
     "rok = ne(ri, three)\nno = const(bool[], 0)\nbm = where(rok, kin, no)\noutput bm\n"
     "r0 = repeat(bm, axis=0, times=64)\nr1 = repeat(r0, axis=1, times=32)\n"
     "m0 = slice(r1, axis=0, stop=300)\nmk = slice(m0, axis=1, stop=440)\n"
     "ninf = const($[], -inf)\ns1 = where(mk, s0, ninf)\n",
     "mask block_sparse"},
};

/* `body` with every '$' replaced by the dtype's name, as a whole graph. */
static void fused_text(const char *body, const char *dn, char *text, size_t size) {
    size_t n = (size_t)snprintf(text, size, "kfg 1\n");
    for (const char *c = body; *c && n + 8 < size; c++) {
        if (*c == '$')
            n += (size_t)snprintf(text + n, size - n, "%s", dn);
        else
            text[n++] = *c;
    }
    snprintf(text + n, size - n, "p = softmax(s1)\no = matmul(p, v)\noutput o\n");
}

/* fused_text(body, dn) parsed in `ctx`; a parse error fails case `name`. */
static kf_graph *fused_graph(kf_ctx *ctx, const char *body, const char *dn, const char *name) {
    char text[4096];
    fused_text(body, dn, text, sizeof text);
    kf_graph *g = NULL;
    if (kf_graph_parse(ctx, text, strlen(text), &g) != KF_OK)
        fail_msg("%s: parse: %s\n%s", name, kf_graph_error(g), text);
    return g;
}

/* A CUDA context with `flags` and GEMM mode `gemm` beside G.ctx's (same
 * cache directory). */
static kf_ctx *cuda_ctx(unsigned flags, kf_gemm_mode gemm) {
    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CUDA;
    o.cache_dir = G.cache_dir[0] ? G.cache_dir : NULL;
    o.flags = flags;
    o.gemm = gemm;
    kf_ctx *ctx = NULL;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    return ctx;
}

static kf_ctx *flags_ctx(unsigned flags) { return cuda_ctx(flags, KF_GEMM_AUTO); }

/* A CUDA context with attention mode `mode` beside G.ctx's. */
static kf_ctx *attn_ctx(kf_attention_mode mode) {
    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CUDA;
    o.cache_dir = G.cache_dir[0] ? G.cache_dir : NULL;
    o.attention = mode;
    kf_ctx *ctx = NULL;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    return ctx;
}

/* Every case in bf16 and f16 runs as the one FA2 (mma.sync) kernel, forced
 * with KF_ATTENTION_FA2 (the report says so), and matches the reference: ragged Sq and Skv, Sq != Skv, each mask
 * class, softcap, ALiBi, an additive and a bool mask tensor, GQA 8:1 read
 * through a broadcast, permuted views. */
static void test_fused_attention_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = attn_ctx(KF_ATTENTION_FA2);
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16};
    for (size_t d = 0; d < N_OF(dts); d++) {
        size_t n_fused = N_OF(fused_cases);
        for (size_t i = 0; i < n_fused + N_OF(fa2_only_cases); i++) {
            const attn_case *fc = i < n_fused ? &fused_cases[i] : &fa2_only_cases[i - n_fused];
            const char *dn = kf_dtype_name(dts[d]);
            kf_graph *g = fused_graph(ctx, fc->body, dn, fc->name);
            char label[160], has[160];
            snprintf(label, sizeof label, "fused attention: %s [%s]", fc->name, dn);
            snprintf(has, sizeof has, "fused attention (sm_80 mma.sync kernel)|%s", fc->mask);
            run_opts o = {.lo = -2, .hi = 2, .report_has = has, .ctx = ctx};
            run_and_compare(g, 1100 + 20 * d + i, &o, label);
            fprintf(stderr, "  %s: ok\n", label);
            kf_graph_destroy(g);
        }
    }
    kf_ctx_destroy(ctx);
}

/* Cases longer than the sm_90a kernel's K/V ring (128-key tiles, 2 stages
 * for head dim 128, 3 for 64), so its stages and their parities wrap, and
 * more queries than keys under a causal mask. */
static const struct {
    const char *name, *body, *mask;
} sm90_cases[] = {
    {"no mask, S 1000 (8 key tiles), head dim 128",
     "q = input($[1, 2, 1000, 128])\nk = input($[1, 2, 1000, 128])\n"
     "v = input($[1, 2, 1000, 128])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
     "mask none"},
    {"causal, S 900, head dim 64",
     "q = input($[2, 1, 900, 64])\nk = input($[2, 1, 900, 64])\nv = input($[2, 1, 900, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[900, 900], axis=0)\ncol = iota(i32[900, 900], axis=1)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask causal"},
    {"causal kv <= q with Sq 300 > Skv 130",
     "q = input($[1, 2, 300, 128])\nk = input($[1, 2, 130, 128])\nv = input($[1, 2, 130, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[300, 130], axis=0)\ncol = iota(i32[300, 130], axis=1)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask causal"},
    /* 80 batch-heads x 2 units (query tiles 2 + 0, then 1 alone): 160 units,
     * more than an H100's or H200's 132 SMs, so some blocks of the
     * persistent grid take two units, five items */
    {"causal, S 300, 80 heads: more units than SMs",
     "q = input($[2, 40, 300, 64])\nk = input($[2, 40, 300, 64])\nv = input($[2, 40, 300, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[300, 300], axis=0)\ncol = iota(i32[300, 300], axis=1)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask causal"},
    {"no mask, Sq 520 Skv 260, 72 heads: more units than SMs",
     "q = input($[1, 72, 520, 128])\nk = input($[1, 72, 260, 128])\n"
     "v = input($[1, 72, 260, 128])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
     "mask none"},
    /* scores that grow along the keys, so the row max grows by more than
     * 2^8 (exp2's units) from one 128-key tile to the next (0.06 a key:
     * 11 a tile), or by less, so the lazy rescale keeps a tile or two on an
     * older max before it rescales (0.02 a key: 3.7 a tile) */
    {"scores growing 0.06 a key: a rescale every tile, head dim 64",
     "q = input($[1, 2, 1000, 64])\nk = input($[1, 2, 1000, 64])\nv = input($[1, 2, 1000, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "col = iota(i32[1000, 1000], axis=1)\ncf = cast(col, $)\ngr = const($[], 0.06)\n"
     "b = mul(cf, gr)\ns1 = add(s0, b)\n",
     "mask none"},
    /* a softcap on scores of about 0.7 (3/64 Q.K^T): most warps' key tiles
     * hold only |s / 30| <= 0.0898, where tanh rounds to its operand (the
     * pair form's split takes it), some a larger one (the tanh) */
    {"softcap 30 tanh(s / 30), scores about tanh's identity range, causal S 900",
     "q = input($[1, 2, 900, 128])\nk = input($[1, 2, 900, 128])\nv = input($[1, 2, 900, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.046875)\ns0 = mul(qk, sc)\n"
     "cap = const($[], 30)\nt0 = div(s0, cap)\nt1 = tanh(t0)\nt2 = mul(t1, cap)\n"
     "row = iota(i32[900, 900], axis=0)\ncol = iota(i32[900, 900], axis=1)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, t2, ninf)\n",
     "mask causal"},
    /* ALiBi over 8 key tiles (the pair form's diagonal: row q + 8's bias
     * from row q's) */
    {"ALiBi slope[h] (kv - q) + causal, S 900, head dim 128",
     "q = input($[1, 3, 900, 128])\nk = input($[1, 3, 900, 128])\nv = input($[1, 3, 900, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "slope = input($[3, 1, 1])\nrow = iota(i32[900, 900], axis=0)\n"
     "col = iota(i32[900, 900], axis=1)\ndi = sub(col, row)\ndf = cast(di, $)\n"
     "bias = mul(slope, df)\nsb = add(s0, bias)\nkeep = ge(row, col)\nninf = const($[], -inf)\n"
     "s1 = where(keep, sb, ninf)\n",
     "mask causal"},
    /* ALiBi without a mask, Sq != Skv, both ragged: kv - q of both signs on
     * the inner tiles (the diagonal's table over its widest range) */
    {"ALiBi slope[h] (kv - q), no mask, Sq 300 != Skv 700, head dim 64",
     "q = input($[1, 3, 300, 64])\nk = input($[1, 3, 700, 64])\nv = input($[1, 3, 700, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "slope = input($[3, 1, 1])\nrow = iota(i32[300, 700], axis=0)\n"
     "col = iota(i32[300, 700], axis=1)\ndi = sub(col, row)\ndf = cast(di, $)\n"
     "bias = mul(slope, df)\ns1 = add(s0, bias)\n",
     "mask none"},
    /* ALiBi + causal, Sq != Skv, both ragged: the diagonal tiles (the edge
     * form: the pair form, then the mask) at the queries' end */
    {"ALiBi slope[h] (kv - q) + causal, Sq 300 != Skv 500, head dim 128",
     "q = input($[1, 2, 300, 128])\nk = input($[1, 2, 500, 128])\nv = input($[1, 2, 500, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "slope = input($[2, 1, 1])\nrow = iota(i32[300, 500], axis=0)\n"
     "col = iota(i32[300, 500], axis=1)\ndi = sub(col, row)\ndf = cast(di, $)\n"
     "bias = mul(slope, df)\nsb = add(s0, bias)\nkeep = ge(row, col)\nninf = const($[], -inf)\n"
     "s1 = where(keep, sb, ninf)\n",
     "mask causal"},
    {"scores growing 0.02 a key, causal: rescales a tile or two apart, head dim 128",
     "q = input($[1, 2, 900, 128])\nk = input($[1, 2, 900, 128])\nv = input($[1, 2, 900, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[900, 900], axis=0)\ncol = iota(i32[900, 900], axis=1)\n"
     "cf = cast(col, $)\ngr = const($[], 0.02)\nb = mul(cf, gr)\nsb = add(s0, b)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, sb, ninf)\n",
     "mask causal"},
    /* the softcap on scores 8 times the fused case's (about 11: |s / 30|
     * up to about 1.5, where tanh is far from its operand) and 64 times
     * (about 85: most of tanh's arguments past 3.6, where it rounds to 1,
     * no mask), so the kernel's tanh by MUFU sees its whole range */
    {"softcap 30 tanh(s / 30), scores 8x wide, causal S 300",
     "q = input($[1, 2, 300, 128])\nk = input($[1, 2, 300, 128])\nv = input($[1, 2, 300, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.70710678)\ns0 = mul(qk, sc)\n"
     "cap = const($[], 30)\nt0 = div(s0, cap)\nt1 = tanh(t0)\nt2 = mul(t1, cap)\n"
     "row = iota(i32[300, 300], axis=0)\ncol = iota(i32[300, 300], axis=1)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, t2, ninf)\n",
     "mask causal"},
    {"softcap 30 tanh(s / 30), scores 64x wide (tanh saturates), no mask, Sq 200 Skv 400",
     "q = input($[1, 2, 200, 128])\nk = input($[1, 2, 400, 128])\nv = input($[1, 2, 400, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 5.65685425)\ns0 = mul(qk, sc)\n"
     "cap = const($[], 30)\nt0 = div(s0, cap)\nt1 = tanh(t0)\ns1 = mul(t1, cap)\n",
     "mask none"},
};

/* Cases only a test that names them runs (run_sm90_cases_only's `only`), after
 * the two lists above in its case order (their streams follow sm90_cases'):
 * ALiBi and the softcap through GQA's broadcast head axis, ragged (f32
 * scores: the slope per query head, the bias's diagonal stepped along the
 * tile); sliding windows over more key tiles and other shapes. */
static const struct {
    const char *name, *body, *mask;
} sm90_named_cases[] = {
    {"ALiBi slope[h] (kv - q) + causal, GQA 4:1, S 300, head dim 128",
     "q = input($[1, 2, 4, 300, 128])\nk = input($[1, 2, 1, 300, 128])\n"
     "v = input($[1, 2, 1, 300, 128])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\nslope = input($[2, 4, 1, 1])\n"
     "row = iota(i32[300, 300], axis=0)\ncol = iota(i32[300, 300], axis=1)\n"
     "di = sub(col, row)\ndf = cast(di, $)\nbias = mul(slope, df)\nsb = add(s0, bias)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, sb, ninf)\n",
     "mask causal"},
    {"softcap 30 tanh(s / 30) + causal, GQA 4:1, S 300, head dim 64",
     "q = input($[1, 2, 4, 300, 64])\nk = input($[1, 2, 1, 300, 64])\n"
     "v = input($[1, 2, 1, 300, 64])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.125)\ns0 = mul(qk, sc)\ncap = const($[], 30)\nt0 = div(s0, cap)\n"
     "t1 = tanh(t0)\nt2 = mul(t1, cap)\nrow = iota(i32[300, 300], axis=0)\n"
     "col = iota(i32[300, 300], axis=1)\nkeep = ge(row, col)\nninf = const($[], -inf)\n"
     "s1 = where(keep, t2, ninf)\n",
     "mask causal"},
    /* sliding windows (keys q - w + 1 .. q; every row sees its own key) whose
     * far edge cuts two key tiles (300, 200: not a multiple of 128), one (257,
     * 100, 5), ragged S and Sq < Skv (Sq > Skv plans as a general mask), and
     * one wider than S, which plans as causal: the window's edge steps out of
     * the main loop (win18) */
    {"sliding window 300, S 1000 (ragged), head dim 128",
     "q = input($[1, 2, 1000, 128])\nk = input($[1, 2, 1000, 128])\nv = input($[1, 2, 1000, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[1000, 1000], axis=0)\ncol = iota(i32[1000, 1000], axis=1)\nd = sub(row, col)\n"
     "w = const(i32[], 299)\nzero = const(i32[], 0)\nrest = sub(w, d)\nm = min(d, rest)\n"
     "keep = ge(m, zero)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask sliding_window"},
    {"sliding window 257, S 900, head dim 64",
     "q = input($[1, 2, 900, 64])\nk = input($[1, 2, 900, 64])\nv = input($[1, 2, 900, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[900, 900], axis=0)\ncol = iota(i32[900, 900], axis=1)\nd = sub(row, col)\n"
     "w = const(i32[], 256)\nzero = const(i32[], 0)\nrest = sub(w, d)\nm = min(d, rest)\n"
     "keep = ge(m, zero)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask sliding_window"},
    {"sliding window 200, Sq 300 < Skv 700, head dim 128",
     "q = input($[1, 2, 300, 128])\nk = input($[1, 2, 700, 128])\nv = input($[1, 2, 700, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[300, 700], axis=0)\ncol = iota(i32[300, 700], axis=1)\nd = sub(row, col)\n"
     "w = const(i32[], 199)\nzero = const(i32[], 0)\nrest = sub(w, d)\nm = min(d, rest)\n"
     "keep = ge(m, zero)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask sliding_window"},
    {"sliding window 100, Sq 300 < Skv 900, head dim 64",
     "q = input($[1, 2, 300, 64])\nk = input($[1, 2, 900, 64])\nv = input($[1, 2, 900, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[300, 900], axis=0)\ncol = iota(i32[300, 900], axis=1)\nd = sub(row, col)\n"
     "w = const(i32[], 99)\nzero = const(i32[], 0)\nrest = sub(w, d)\nm = min(d, rest)\n"
     "keep = ge(m, zero)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask sliding_window"},
    {"a window 2000 wider than S 700 (planned causal), head dim 128",
     "q = input($[1, 2, 700, 128])\nk = input($[1, 2, 700, 128])\nv = input($[1, 2, 700, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[700, 700], axis=0)\ncol = iota(i32[700, 700], axis=1)\nd = sub(row, col)\n"
     "w = const(i32[], 1999)\nzero = const(i32[], 0)\nrest = sub(w, d)\nm = min(d, rest)\n"
     "keep = ge(m, zero)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask causal"},
    {"sliding window 5 (narrower than a tile), S 260, head dim 64",
     "q = input($[1, 2, 260, 64])\nk = input($[1, 2, 260, 64])\nv = input($[1, 2, 260, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[260, 260], axis=0)\ncol = iota(i32[260, 260], axis=1)\nd = sub(row, col)\n"
     "w = const(i32[], 4)\nzero = const(i32[], 0)\nrest = sub(w, d)\nm = min(d, rest)\n"
     "keep = ge(m, zero)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask sliding_window"},
};

/* Runs graph `g` of context `ctx` against the reference (seed `seed`,
 * label `label`), its report holding `mask` and, on sm_90, the sm_90a kernel
 * and `form` (NULL: none); returns whether the report says `probe` (NULL:
 * false). */
static bool run_sm90_graph(kf_ctx *ctx, kf_graph *g, const char *mask, const char *form,
                           const char *probe, uint64_t seed, const char *label) {
    char has[200];
    snprintf(has, sizeof has, "fused attention (sm_90a wgmma/TMA kernel)|%s%s%s", mask,
             form ? "|" : "", form ? form : "");
    bool hit = false;
    run_opts o = {.lo = -2,
                  .hi = 2,
                  .report_has = mask,
                  .report_has_sm90 = has,
                  .ctx = ctx,
                  .probe = probe,
                  .probed = &hit};
    run_and_compare(g, seed, &o, label);
    return hit;
}

/* The fused cases in dtype `dn_fused` and the longer ones above (ring wrap,
 * more units than SMs, rescales) in `dn_long` (NULL: left out), through
 * KF_ATTENTION_SM90 with the internal recipe flags `rflags` set on the
 * context (kf_ctx.recipe_flags), each against the reference: on sm_90 the
 * report names the sm_90a kernel and holds `form` (NULL: nothing more),
 * elsewhere the FA2 kernel runs; *took (when `probe`) counts the programs
 * whose report holds `probe`. `what` (NULL: none) goes into the labels;
 * `only` (NULL: every case of the first two lists) names the one case to
 * run, sm90_named_cases' too, and fails the test when no case has that name
 * (a misspelt or moved case would otherwise run nothing and pass). */
static void run_sm90_cases_only(uint64_t rflags, const char *dn_fused, const char *dn_long,
                                uint64_t stream0, const char *form, const char *probe, int *took,
                                const char *what, const char *only) {
    kf_ctx *ctx = attn_ctx(KF_ATTENTION_SM90);
    ctx->recipe_flags = rflags;
    const size_t n_fused = N_OF(fused_cases), n_long = N_OF(sm90_cases);
    /* the named-only cases where a case is named */
    const size_t n_all = n_fused + n_long + (only ? N_OF(sm90_named_cases) : 0);
    bool found = false;
    for (size_t i = n_fused; i < n_all; i++) {
        const char *name = i < n_fused + n_long ? sm90_cases[i - n_fused].name
                                                : sm90_named_cases[i - n_fused - n_long].name;
        found |= only && strcmp(name, only) == 0;
    }
    for (size_t i = 0; i < n_fused; i++)
        found |= only && strcmp(fused_cases[i].name, only) == 0;
    if (only && !found)
        fail_msg("no fused or sm_90a case is named '%s'", only);
    for (size_t i = 0; i < n_all; i++) {
        const bool fc = i < n_fused, lc = !fc && i < n_fused + n_long;
        const char *dn = fc ? dn_fused : dn_long;
        if (!dn)
            continue;
        const size_t j = fc ? i : lc ? i - n_fused : i - n_fused - n_long;
        const char *name = fc ? fused_cases[j].name
                           : lc ? sm90_cases[j].name
                                : sm90_named_cases[j].name;
        const char *body = fc ? fused_cases[j].body
                           : lc ? sm90_cases[j].body
                                : sm90_named_cases[j].body;
        const char *mask = fc ? fused_cases[j].mask
                           : lc ? sm90_cases[j].mask
                                : sm90_named_cases[j].mask;
        if (only && strcmp(name, only) != 0)
            continue;
        kf_graph *g = fused_graph(ctx, body, dn, name);
        char label[200];
        snprintf(label, sizeof label, "sm_90a attention%s%s: %s [%s]", what ? ", " : "",
                 what ? what : "", name, dn);
        const bool hit = run_sm90_graph(ctx, g, mask, form, probe, stream0 + i, label);
        if (took)
            *took += hit;
        fprintf(stderr, "  %s: ok%s\n", label, hit ? " (the form's kernel)" : "");
        kf_graph_destroy(g);
    }
    kf_ctx_destroy(ctx);
}

/* run_sm90_cases_only with every case (`only` NULL). */
static void run_sm90_cases(uint64_t rflags, const char *dn_fused, const char *dn_long,
                           uint64_t stream0, const char *form, const char *probe, int *took,
                           const char *what) {
    run_sm90_cases_only(rflags, dn_fused, dn_long, stream0, form, probe, took, what, NULL);
}

/* Every fused case, and the longer ones above, in bf16 and f16 with
 * KF_ATTENTION_SM90 (the default's kernel): on sm_90 the report names the
 * sm_90a kernel, elsewhere the FA2 kernel runs; both match the reference. */
static void test_sm90_attention_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *const dts[] = {"bf16", "f16"};
    for (size_t d = 0; d < N_OF(dts); d++)
        run_sm90_cases(0, dts[d], dts[d], 1300 + 20 * d, NULL, NULL, NULL, NULL);
}

/* The sm_90a kernel with its softmax pinned under P.V (the internal recipe
 * flag KF_CUDA_RECIPE_ATTENTION_PIN_SOFTMAX): every fused case in bf16 and
 * the longer ones in f16 match the reference, and every report says the
 * pinned form ran. */
static void test_sm90_attention_with_the_softmax_pinned_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    run_sm90_cases(KF_CUDA_RECIPE_ATTENTION_PIN_SOFTMAX, "bf16", "f16", 3100,
                   "softmax pinned under P.V", NULL, NULL, "softmax pinned");
}

/* The sm_90a kernel's rounded form (KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE,
 * the default before f32 scores): every fused case in bf16 and the longer
 * ones in f16 match the reference, and no report says f32 scores. */
static void test_sm90_attention_with_rounded_scores_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    int took = 0;
    run_sm90_cases(KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE, "bf16", "f16", 3250, NULL,
                   "f32 scores", &took, "rounded scores");
    if (took != 0)
        fail_msg("%d programs took f32 scores with ROUNDED_SCORE set", took);
}

/* The sm_90a kernel with f32 scores (KF_CUDA_RECIPE_ATTENTION_F32_SCORE, the
 * default since 4784014's measurements; the flag names it explicitly):
 * every fused case in bf16 and the longer ones in f16 match the reference
 * (judged against the exact value, which the unrounded scores are closer
 * to), and the cases whose score is a scale of Q.K^T, masked or not, took
 * the form (fa3f_): at least four. */
static void test_sm90_attention_with_f32_scores_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    int took = 0;
    run_sm90_cases(KF_CUDA_RECIPE_ATTENTION_F32_SCORE, "bf16", "f16", 3200, NULL, "f32 scores",
                   &took, "f32 scores");
    if (took < 4)
        fail_msg("only %d programs took the f32-score kernel", took);
}

/* The sm_90a kernel with its softmax's row max and sum as trees
 * (KF_CUDA_RECIPE_ATTENTION_TREE_SOFTMAX) and f32 scores: every fused case
 * in bf16, the longer ones in f16, each matches the reference and its report
 * says the form ran; the f32 form took at least four programs. */
static void test_sm90_attention_with_trees_and_f32_scores_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    int took = 0;
    run_sm90_cases(KF_CUDA_RECIPE_ATTENTION_TREE_SOFTMAX | KF_CUDA_RECIPE_ATTENTION_F32_SCORE,
                   "bf16", "f16", 3300, "row max and sum as trees", "f32 scores", &took,
                   "trees, f32 scores");
    if (took < 4)
        fail_msg("only %d programs took the f32-score kernel with trees", took);
}

/* The sm_90a kernel with a share of its softmax's exp2s by the FMA-pipe
 * polynomial (KF_CUDA_RECIPE_ATTENTION_EXP2_POLY: a quarter at head dim 128,
 * an eighth at 64) and with its row max and sum as chains
 * (KF_CUDA_RECIPE_ATTENTION_CHAIN_SOFTMAX, the form before trees were the
 * default at head dim 128): every fused case in bf16, the longer ones in f16
 * (their rescales, scores 2^8 and more below a row's max), each against the
 * reference. With EXP2_POLY the 16 cases whose score reads no tensor took the
 * polynomial (one that reads a tensor over two key tiles or fewer keeps
 * MUFU); with CHAIN_SOFTMAX no report says trees. */
static void test_sm90_attention_exp2_forms_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    int took = 0;
    run_sm90_cases(KF_CUDA_RECIPE_ATTENTION_EXP2_POLY, "bf16", "f16", 5100, NULL,
                   "exp2s partly by polynomial", &took, "exp2s partly by polynomial");
    if (took < 16)
        fail_msg("only %d programs took the exp2s partly by polynomial", took);
    took = 0;
    run_sm90_cases(KF_CUDA_RECIPE_ATTENTION_CHAIN_SOFTMAX, "bf16", "f16", 5200, NULL,
                   "row max and sum as trees", &took, "row max and sum as chains");
    if (took != 0)
        fail_msg("%d programs took trees with CHAIN_SOFTMAX set", took);
}

/* The sm_90a kernel with its work items one at a time
 * (KF_CUDA_RECIPE_ATTENTION_ITEMS_APART, the form before an item's last P.V
 * shared the next item's first turn): every fused case in bf16, the longer
 * ones in f16, each against the reference; the cases whose default joins
 * the items (two Q buffers: head dim 64, and 128 where cg_attention.c's
 * KF_SM90_JOIN_D128 says) took the form (kernel letter i): at least 4. The
 * default's form runs in test_sm90_attention_matches_the_reference. */
static void test_sm90_attention_with_items_apart_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    int took = 0;
    run_sm90_cases(KF_CUDA_RECIPE_ATTENTION_ITEMS_APART, "bf16", "f16", 5400, NULL,
                   "items one at a time", &took, "items one at a time");
    if (took < 4)
        fail_msg("only %d programs took the items one at a time", took);
}

/* The same with the softmax pinned under P.V as well (fa3pft_: the order of
 * operations of FlashAttention-3's consumer), every case in bf16. */
static void test_sm90_attention_pinned_with_trees_and_f32_scores_matches_the_reference(
    void **state) {
    (void)state;
    REQUIRE_GPU();
    int took = 0;
    run_sm90_cases(KF_CUDA_RECIPE_ATTENTION_TREE_SOFTMAX | KF_CUDA_RECIPE_ATTENTION_F32_SCORE |
                       KF_CUDA_RECIPE_ATTENTION_PIN_SOFTMAX,
                   "bf16", "bf16", 3400, "row max and sum as trees", "f32 scores", &took,
                   "trees, f32 scores, softmax pinned");
    if (took < 4)
        fail_msg("only %d programs took the pinned f32-score kernel with trees", took);
}

/* 400 units (2 x 200 heads of two query tiles, the second ragged; head dim
 * 64) on at most 132 SMs: with the tail longest first (the flag here; the
 * default for causal masks at head dim 128) a block takes a whole round of
 * units grid-strided, then single items of the tail, longest first, in a
 * snake; the cases above have fewer than three rounds, all tail. */
static const char *const lpt_rounds_case =
    "q = input($[2, 200, 130, 64])\nk = input($[2, 200, 130, 64])\nv = input($[2, 200, 130, 64])\n"
    "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
    "row = iota(i32[130, 130], axis=0)\ncol = iota(i32[130, 130], axis=1)\n"
    "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n";

/* Runs graph `body` (bf16, named `name`) in a context with recipe flags
 * `flags` against the reference (seed `seed`), its report holding `mask` and,
 * on sm_90, the sm_90a kernel; returns whether the report says `probe`. */
static bool run_sm90_probed(uint64_t flags, const char *body, const char *name, const char *mask,
                            uint64_t seed, const char *label, const char *probe) {
    kf_ctx *ctx = attn_ctx(KF_ATTENTION_SM90);
    ctx->recipe_flags = flags;
    kf_graph *g = fused_graph(ctx, body, "bf16", name);
    const bool hit = run_sm90_graph(ctx, g, mask, NULL, probe, seed, label);
    fprintf(stderr, "  %s: ok\n", label);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    return hit;
}

/* 600 units of a window mask (2 x 300 heads, S 260: three query tiles, two
 * units a head; window 100, head dim 128) for the window's rounds in a
 * snake. */
static const char *const lpt_window_rounds_case =
    "q = input($[2, 300, 260, 128])\nk = input($[2, 300, 260, 128])\n"
    "v = input($[2, 300, 260, 128])\nqk = matmul(q, k, transpose_b=true)\n"
    "sc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
    "row = iota(i32[260, 260], axis=0)\ncol = iota(i32[260, 260], axis=1)\nd = sub(row, col)\n"
    "w = const(i32[], 99)\nzero = const(i32[], 0)\nrest = sub(w, d)\nm = min(d, rest)\n"
    "keep = ge(m, zero)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n";

/* The sm_90a kernel's tail longest first (templates/attention_sm90.cuh,
 * KF_TAIL_LPT: by default for a causal or window mask at head dim 128 and a
 * keep map's paired units; KF_CUDA_RECIPE_ATTENTION_TAIL_LPT asks for it
 * elsewhere and keeps those masks' grid-strided walk there): the longer cases
 * (blocks of several units, odd tile counts, more units than SMs) in bf16
 * by default and with the flag, every case in bf16 with every other form
 * too (pinned, f32 scores, trees), and the 400-unit case by default, with
 * every form, and with the flag: each matches the reference (every query
 * tile computed once: a tile left out stays poisoned, one computed twice
 * races on its rows); the reports say the tail ran on the causal and window
 * programs by default (at least four) and on the 400-unit case (head dim
 * 64) with the flag only; and 600 window units by default, whose rounds
 * before the tail go in a snake. */
static void test_sm90_attention_with_the_tail_longest_first_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    const unsigned lpt = KF_CUDA_RECIPE_ATTENTION_TAIL_LPT;
    const unsigned rest = KF_CUDA_RECIPE_ATTENTION_TREE_SOFTMAX |
                          KF_CUDA_RECIPE_ATTENTION_F32_SCORE | KF_CUDA_RECIPE_ATTENTION_PIN_SOFTMAX;
    const char *form = "the tail's items longest first";
    int took[4] = {0, 0, 0, 0};
    run_sm90_cases(0, NULL, "bf16", 3700, NULL, form, &took[0], "the default");
    run_sm90_cases(lpt, NULL, "bf16", 3750, NULL, form, &took[1], "the tail flag");
    run_sm90_cases(rest, "bf16", NULL, 3800, NULL, form, &took[2], "every form");
    run_sm90_cases(rest | lpt, "bf16", NULL, 3850, NULL, form, &took[3], "every form, the flag");
    fprintf(stderr,
            "  the tail longest first: %d programs by default, %d with the flag, %d with every "
            "form, %d with every form and the flag\n",
            took[0], took[1], took[2], took[3]);
    if (took[0] < 4 || took[2] < 4)
        fail_msg("the tail longest first ran on %d / %d programs by default / with every form",
                 took[0], took[2]);
    static const char *const labels[3] = {"the default", "every form", "the flag"};
    const unsigned flags[3] = {0, rest, lpt};
    for (int i = 0; i < 3; i++) {
        char label[120];
        snprintf(label, sizeof label, "sm_90a attention, %s: 400 units, rounds then the tail",
                 labels[i]);
        const bool tail = run_sm90_probed(flags[i], lpt_rounds_case, "400 units", "mask causal",
                                          3900 + (uint64_t)i, label, form);
        if (tail != (i == 2))
            fail_msg("%s: the report %s '%s'", label, tail ? "says" : "does not say", form);
    }
    /* a window's rounds in a snake (kf_lpt_scan: odd rounds in reverse
     * block order), by default: 600 units (2 x 300 heads of a window 100
     * over S 260 at head dim 128: NQT 3, two units a head) on at most 132
     * SMs, so two rounds (the second reversed) come before the tail */
    if (!run_sm90_probed(0, lpt_window_rounds_case, "600 window units", "mask sliding_window",
                         3950, "sm_90a attention, the default: 600 window units in rounds, a snake",
                         form))
        fail_msg("600 window units: the report does not say '%s'", form);
}

/* Block-sparse keep maps that every batch-head shares, the edges of the
 * sm_90a kernel's walk in shared memory (KF_BS_TABLE): a map that drops
 * every tile (every row the fill's: each query tile visits every key tile),
 * one that keeps every tile, and a random one with its ragged last row
 * dropped over 200 batch-heads of 3 query tiles (the middle one alone in its
 * unit): 400 units, a round then the tail, the units paired by kept count
 * (the default form alone: the reference of 200 heads takes seconds). */
static const struct {
    const char *name, *body;
} bs_cases[] = {
    {"block-sparse keep map dropping every tile, Sq 300 != Skv 700, finite fill",
     "q = input($[1, 2, 300, 128])\nk = input($[1, 2, 700, 128])\n"
     "v = input($[1, 2, 700, 128])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "kin = input(bool[3, 6])\nno = const(bool[], 0)\nbm = where(kin, no, no)\noutput bm\n"
     "r0 = repeat(bm, axis=0, times=128)\nr1 = repeat(r0, axis=1, times=128)\n"
     "m0 = slice(r1, axis=0, stop=300)\nmk = slice(m0, axis=1, stop=700)\n"
     "fill = const($[], -30000)\ns1 = where(mk, s0, fill)\n"},
    {"block-sparse keep map keeping every tile, Sq 300 != Skv 700, -inf",
     "q = input($[1, 2, 300, 128])\nk = input($[1, 2, 700, 128])\n"
     "v = input($[1, 2, 700, 128])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "kin = input(bool[3, 6])\nyes = const(bool[], 1)\nbm = where(kin, yes, yes)\noutput bm\n"
     "r0 = repeat(bm, axis=0, times=128)\nr1 = repeat(r0, axis=1, times=128)\n"
     "m0 = slice(r1, axis=0, stop=300)\nmk = slice(m0, axis=1, stop=700)\n"
     "ninf = const($[], -inf)\ns1 = where(mk, s0, ninf)\n"},
    {"block-sparse random keep map, row 2 dropped, 200 heads, Sq 300 Skv 260, head dim 64",
     "q = input($[2, 100, 300, 64])\nk = input($[2, 100, 260, 64])\n"
     "v = input($[2, 100, 260, 64])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "kin = input(bool[3, 3])\nri = iota(i32[3, 1], axis=0)\ntwo = const(i32[], 2)\n"
     "rok = ne(ri, two)\nno = const(bool[], 0)\nbm = where(rok, kin, no)\noutput bm\n"
     "r0 = repeat(bm, axis=0, times=128)\nr1 = repeat(r0, axis=1, times=128)\n"
     "m0 = slice(r1, axis=0, stop=300)\nmk = slice(m0, axis=1, stop=260)\n"
     "fill = const($[], -30000)\ns1 = where(mk, s0, fill)\n"},
};

/* The sm_90a kernel's block-sparse forms -- the default (the walk in shared
 * memory, query tiles paired by kept count, the tail longest first),
 * KF_CUDA_RECIPE_ATTENTION_BS_L2 (the same with L2 policies on Q, K, V and O
 * and the walk's next tile prefetched into L2; on the 200 heads too, head
 * dim 64: O's predicated stores of the joined items) and
 * KF_CUDA_RECIPE_ATTENTION_BS_MAP_WALK (the map read per tile, the kernel
 * before) -- on the cases above and the fused cases' shared map (S 520, an
 * empty row) in bf16: each matches the reference (outputs poisoned: a query
 * tile the pairing left out stays poisoned, one taken twice races) and its
 * report says which form ran. */
static void test_sm90_attention_block_sparse_forms_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const uint64_t forms[] = {0, KF_CUDA_RECIPE_ATTENTION_BS_L2,
                                     KF_CUDA_RECIPE_ATTENTION_BS_MAP_WALK};
    static const char *const has[] = {
        "its walk built in shared memory|query tiles paired by kept key tiles|the tail's items "
        "longest first",
        "its walk built in shared memory|query tiles paired by kept key tiles|the tail's items "
        "longest first|K and V evict_last in L2",
        NULL};
    static const char *const lacks[] = {"evict_last", NULL,
                                        "its walk built in shared memory|evict_last"};
    const char *shared =
        "block-sparse 128x128 keep map, S 520 (ragged), map row 1 empty, finite fill";
    const char *shared_body = NULL;
    for (size_t i = 0; i < N_OF(fused_cases); i++)
        if (!strcmp(fused_cases[i].name, shared))
            shared_body = fused_cases[i].body;
    if (!shared_body)
        fail_msg("no fused case is named '%s'", shared);
    for (size_t f = 0; f < N_OF(forms); f++) {
        kf_ctx *ctx = attn_ctx(KF_ATTENTION_SM90);
        ctx->recipe_flags = forms[f];
        for (size_t i = 0; i <= N_OF(bs_cases); i++) {
            if (i == 2 && f == 2) /* the 200 heads: not the kernel before */
                continue;
            const char *name = i < N_OF(bs_cases) ? bs_cases[i].name : shared;
            kf_graph *g =
                fused_graph(ctx, i < N_OF(bs_cases) ? bs_cases[i].body : shared_body, "bf16", name);
            char label[240], want[320];
            snprintf(label, sizeof label, "sm_90a attention, block-sparse form %zu: %s [bf16]", f,
                     name);
            snprintf(want, sizeof want,
                     "fused attention (sm_90a wgmma/TMA kernel)|mask block_sparse%s%s",
                     has[f] ? "|" : "", has[f] ? has[f] : "");
            run_opts o = {.lo = -2,
                          .hi = 2,
                          .report_has = "mask block_sparse",
                          .report_lacks = lacks[f],
                          .report_has_sm90 = want,
                          .ctx = ctx};
            run_and_compare(g, 4100 + 10 * f + i, &o, label);
            fprintf(stderr, "  %s: ok\n", label);
            kf_graph_destroy(g);
        }
        kf_ctx_destroy(ctx);
    }
}

/* Non-causal cases for the wide and cluster forms, each saying which it
 * takes: 176-key tiles (the default) where there are 3 or more and the score
 * reads no tensor, 2-CTA clusters where the query tiles are even in number;
 * outside clusters the wide form's ragged last key tile narrower (last: its
 * keys rounded up to 16 where that is 64 or fewer, 32 at least, and the
 * keys make 4 tiles or more: Skv 570's 42 as 48 with 6 past the end, 540's
 * 12 as 32; not 650's 122, 600's 72 or 400's 48 in 3 tiles). */
static const struct {
    const char *name, *body;
    bool wide, cluster, last;
} noncausal_cases[] = {
    {"no mask, Sq 500 != Skv 650: ragged key tiles, halves past the keys' end",
     "q = input($[2, 3, 500, 128])\nk = input($[2, 3, 650, 128])\nv = input($[2, 3, 650, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
     true, true, false},
    /* 70 batch-heads of 2 query tiles: 70 cluster units, more than the 66
     * clusters of 132 SMs; scores growing 0.06 a key: a rescale every tile */
    {"no mask, 70 heads, Sq 256 Skv 400, scores growing 0.06 a key: more clusters than SMs",
     "q = input($[2, 35, 256, 128])\nk = input($[2, 35, 400, 128])\n"
     "v = input($[2, 35, 400, 128])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "col = iota(i32[256, 400], axis=1)\ncf = cast(col, $)\ngr = const($[], 0.06)\n"
     "b = mul(cf, gr)\ns1 = add(s0, b)\n",
     true, true, false},
    {"GQA 4:1 (K, V broadcast over the head group), no mask, Skv 600",
     "q = input($[1, 2, 4, 256, 128])\nk = input($[1, 2, 1, 600, 128])\n"
     "v = input($[1, 2, 1, 600, 128])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
     true, true, false},
    {"softcap 30 tanh(s / 30), no mask, Sq 300 (odd query tiles), Skv 540",
     "q = input($[2, 2, 300, 128])\nk = input($[2, 2, 540, 128])\nv = input($[2, 2, 540, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "cap = const($[], 30)\nt0 = div(s0, cap)\nt1 = tanh(t0)\ns1 = mul(t1, cap)\n",
     true, false, true},
    {"an additive mask tensor, Sq 256 Skv 540 (a load: 128-key tiles)",
     "q = input($[2, 2, 256, 128])\nk = input($[2, 2, 540, 128])\nv = input($[2, 2, 540, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "am = input($[256, 540])\ns1 = add(s0, am)\n",
     false, true, false},
    {"no mask, Sq 300 Skv 570: the last key tile 42 keys, 6 past the end of its 48",
     "q = input($[2, 2, 300, 128])\nk = input($[2, 2, 570, 128])\nv = input($[2, 2, 570, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
     true, false, true},
};

/* The sm_90a kernel's non-causal forms -- the default (176-key tiles where
 * they apply), 128-key tiles (KF_CUDA_RECIPE_ATTENTION_NARROW_KEYS), the
 * default in 2-CTA clusters sharing K and V by multicast
 * (KF_CUDA_RECIPE_ATTENTION_CLUSTER2), the default with a full-width last
 * key tile (KF_CUDA_RECIPE_ATTENTION_FULL_LAST_TILE, the form before the
 * narrower one) -- on the cases above in bf16 (the
 * default also in f16 on the first): each matches the reference (outputs
 * poisoned: a query tile left out, or a half tile that never landed, fails)
 * and its report names the forms it took. (Narrow tiles in clusters, the
 * CLUSTER2 form before the wide default, passed at 7ea15a9; the kernel is
 * unchanged.) */
static void test_sm90_attention_wide_and_cluster_forms_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const uint64_t forms[] = {0, KF_CUDA_RECIPE_ATTENTION_NARROW_KEYS,
                                     KF_CUDA_RECIPE_ATTENTION_CLUSTER2,
                                     KF_CUDA_RECIPE_ATTENTION_FULL_LAST_TILE};
    for (size_t f = 0; f < N_OF(forms); f++) {
        for (int d = 0; d < (f == 0 ? 2 : 1); d++) {
            const char *dn = d ? "f16" : "bf16";
            kf_ctx *ctx = attn_ctx(KF_ATTENTION_SM90);
            ctx->recipe_flags = forms[f];
            for (size_t i = 0; i < N_OF(noncausal_cases); i++) {
                if (d && i != 0 && i != N_OF(noncausal_cases) - 1)
                    continue; /* f16: the ragged cases (each case is seconds of reference) */
                const bool w =
                    noncausal_cases[i].wide && !(forms[f] & KF_CUDA_RECIPE_ATTENTION_NARROW_KEYS);
                const bool c =
                    noncausal_cases[i].cluster && (forms[f] & KF_CUDA_RECIPE_ATTENTION_CLUSTER2);
                const bool nl = w && !c && noncausal_cases[i].last &&
                                !(forms[f] & KF_CUDA_RECIPE_ATTENTION_FULL_LAST_TILE);
                kf_graph *g =
                    fused_graph(ctx, noncausal_cases[i].body, dn, noncausal_cases[i].name);
                char label[240], has[240], lacks[160];
                snprintf(label, sizeof label, "sm_90a attention%s%s%s: %s [%s]",
                         w ? ", 176-key tiles" : "", nl ? ", the last narrower" : "",
                         c ? ", 2-CTA clusters" : "", noncausal_cases[i].name, dn);
                snprintf(has, sizeof has,
                         "fused attention (sm_90a wgmma/TMA kernel)|mask none%s%s%s",
                         w ? "|176-key tiles" : "", nl ? "|the ragged last key tile narrower" : "",
                         c ? "|2-CTA clusters sharing K and V" : "");
                const char *const lk[3] = {!w ? "176-key tiles" : NULL,
                                           !c ? "2-CTA clusters" : NULL,
                                           !nl ? "the ragged last key tile narrower" : NULL};
                size_t ln = 0;
                lacks[0] = 0;
                for (int x = 0; x < 3; x++)
                    if (lk[x])
                        ln += (size_t)snprintf(lacks + ln, sizeof lacks - ln, "%s%s", ln ? "|" : "",
                                               lk[x]);
                run_opts o = {.lo = -2,
                              .hi = 2,
                              .report_has = "mask none",
                              .report_has_sm90 = has,
                              .report_lacks = lacks[0] ? lacks : NULL,
                              .ctx = ctx};
                run_and_compare(g, 4100 + 10 * f + 5 * (uint64_t)d + i, &o, label);
                fprintf(stderr, "  %s: ok\n", label);
                kf_graph_destroy(g);
            }
            kf_ctx_destroy(ctx);
        }
    }
}

/* A multiply by 1 after the scale -- mul(mul(Q.K^T, c), 1), the bench's
 * non-causal text, and the same as a causal mask's kept branch -- folds as
 * the scale alone (cg_attention.c, past_unit_muls): the default's kernel
 * takes f32 scores (the report says so; test_attngen: the same SASS as the
 * graph without the 1) and matches the reference, bf16 and f16. */
static void test_sm90_attention_multiply_by_one_folds_and_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const attn_case one_cases[] = {
        {"no mask, scale then * 1, Sq 300 Skv 540",
         "q = input($[2, 2, 300, 128])\nk = input($[2, 2, 540, 128])\nv = input($[2, 2, 540, "
         "128])\n"
         "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
         "one = const($[], 1)\ns1 = mul(s0, one)\n",
         "mask none"},
        {"causal, scale then * 1 in the kept branch, S 333, head dim 64",
         "q = input($[2, 3, 333, 64])\nk = input($[2, 3, 333, 64])\nv = input($[2, 3, 333, 64])\n"
         "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
         "one = const($[], 1)\ns2 = mul(s0, one)\nrow = iota(i32[333, 333], axis=0)\n"
         "col = iota(i32[333, 333], axis=1)\nkeep = ge(row, col)\nninf = const($[], -inf)\n"
         "s1 = where(keep, s2, ninf)\n",
         "mask causal"},
    };
    static const char *const dts[] = {"bf16", "f16"};
    for (size_t d = 0; d < N_OF(dts); d++) {
        for (size_t i = 0; i < N_OF(one_cases); i++) {
            kf_graph *g = fused_graph(G.ctx, one_cases[i].body, dts[d], one_cases[i].name);
            char label[200], has[200];
            snprintf(label, sizeof label, "sm_90a attention, * 1 folded: %s [%s]",
                     one_cases[i].name, dts[d]);
            snprintf(has, sizeof has, "fused attention (sm_90a wgmma/TMA kernel)|%s|f32 scores",
                     one_cases[i].mask);
            run_opts o = {
                .lo = -2, .hi = 2, .report_has = one_cases[i].mask, .report_has_sm90 = has};
            run_and_compare(g, 4300 + 10 * d + i, &o, label);
            fprintf(stderr, "  %s: ok\n", label);
            kf_graph_destroy(g);
        }
    }
}

/* The first of the cases above -- ragged Sq 500 and Skv 650: the last
 * 176-key tile runs past the keys' end -- through the default (176-key
 * tiles, no flag) and then in 2-CTA clusters too (the rank-1 CTA's half of
 * the last tile past the end), and the last case -- Skv 570: the last tile
 * narrower, 48 keys wide, 6 of them past the end -- through the default,
 * bf16: the cases the GPU check runs under compute-sanitizer (memcheck,
 * racecheck). */
static void test_sm90_attention_wide_form_on_one_ragged_case(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (int c = 0; c < 3; c++) {
        const size_t ci = c == 2 ? N_OF(noncausal_cases) - 1 : 0;
        kf_ctx *ctx = attn_ctx(KF_ATTENTION_SM90);
        ctx->recipe_flags = c == 1 ? KF_CUDA_RECIPE_ATTENTION_CLUSTER2 : 0;
        kf_graph *g = fused_graph(ctx, noncausal_cases[ci].body, "bf16", noncausal_cases[ci].name);
        run_opts o = {.lo = -2,
                      .hi = 2,
                      .report_has = "mask none",
                      .report_has_sm90 =
                          c == 1   ? "fused attention (sm_90a wgmma/TMA kernel)|176-key tiles|"
                                     "2-CTA clusters sharing K and V"
                          : c == 2 ? "fused attention (sm_90a wgmma/TMA kernel)|176-key tiles|"
                                     "the ragged last key tile narrower"
                                   : "fused attention (sm_90a wgmma/TMA kernel)|176-key tiles",
                      .report_lacks = c == 1   ? "the ragged last key tile narrower"
                                      : c == 2 ? "2-CTA clusters"
                                               : "2-CTA clusters|the ragged last key tile narrower",
                      .ctx = ctx};
        run_and_compare(g, 4200 + (uint64_t)c, &o,
                        c == 1   ? "sm_90a attention, 176-key tiles in 2-CTA clusters, ragged"
                        : c == 2 ? "sm_90a attention, 176-key tiles, the last narrower, ragged"
                                 : "sm_90a attention, the default's 176-key tiles, ragged");
        fprintf(stderr, "  %s%s: ok\n", noncausal_cases[ci].name, c == 1 ? " (clusters)" : "");
        kf_graph_destroy(g);
        kf_ctx_destroy(ctx);
    }
}

/* One long case (more units than SMs: blocks take several items, the ring
 * and the Q buffers wrap) through every form of the sm_90a kernel at once --
 * softmax pinned, f32 scores, trees, and KF_CUDA_RECIPE_ATTENTION_TAIL_LPT (on a causal item:
 * the grid-strided walk to the end, the form before) -- and the default (the tail longest
 * first): the case the GPU check runs under compute-sanitizer (memcheck, racecheck). */
static void test_sm90_attention_forms_on_one_long_case(void **state) {
    (void)state;
    REQUIRE_GPU();
    const char *one = "causal, S 300, 80 heads: more units than SMs";
    run_sm90_cases_only(0, NULL, "bf16", 3500, NULL, NULL, NULL, NULL, one);
    run_sm90_cases_only(KF_CUDA_RECIPE_ATTENTION_TREE_SOFTMAX | KF_CUDA_RECIPE_ATTENTION_F32_SCORE |
                            KF_CUDA_RECIPE_ATTENTION_PIN_SOFTMAX |
                            KF_CUDA_RECIPE_ATTENTION_TAIL_LPT,
                        NULL, "bf16", 3600, "row max and sum as trees", NULL, NULL,
                        "every form", one);
}

/* A softcap's bounded scores (30 tanh(s / 30)): the sm_90a kernel's default
 * takes the bound as a fixed softmax shift (no row max, no rescale of O) in
 * bf16, and KF_CUDA_RECIPE_ATTENTION_ROW_MAX keeps the running max; both
 * match the reference on the causal case (ragged, 150 rows) in bf16 and f16,
 * and the reports say which form ran: the fixed shift on the bf16 program
 * (f16's P cannot hold e^-62: the running max), on none with the flag. */
static void test_sm90_attention_bounded_scores_take_a_fixed_shift(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *const dts[] = {"bf16", "f16"};
    const char *form = "bounded scores, a fixed softmax shift";
    for (int f = 0; f < 2; f++) {
        const uint64_t rf = f ? KF_CUDA_RECIPE_ATTENTION_ROW_MAX : 0;
        int took = 0;
        for (size_t d = 0; d < N_OF(dts); d++)
            run_sm90_cases_only(
                rf, dts[d], dts[d], 4300 + 10 * (uint64_t)f + d, f || d == 1 ? NULL : form, form,
                &took, f ? "row max kept" : "fixed shift", "softcap 30 tanh(s / 30) + causal");
        if (took != (f ? 0 : 1))
            fail_msg("%d of 2 programs took the fixed shift %s (the bf16 one by default)", took,
                     f ? "with ROW_MAX set" : "by default");
    }
}

/* The pair form of the inner score (kf_score_pair, where it is shorter in
 * the rounded form, KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE): the ALiBi and
 * softcap cases (ragged, causal: edge tiles keep the scalar form), bf16,
 * against the reference. (The scalar form on demand,
 * ATTENTION_SCALAR_SCORE, is retired: att16 reused its bit.) */
static void test_sm90_attention_pair_score_form_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *const names[] = {"ALiBi slope[h] (kv - q) + causal",
                                        "softcap 30 tanh(s / 30) + causal"};
    for (size_t i = 0; i < N_OF(names); i++)
        run_sm90_cases_only(KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE, "bf16", "bf16", 4400 + i, NULL,
                            NULL, NULL, "pair score", names[i]);
}

/* att16's forms against the reference, bf16: O, l and m rescaled lazily
 * (the default at head dim 128) on the wide non-causal form (8 key tiles),
 * causal with a ragged S 200, GQA, Sq 520 != Skv 260 with more units than
 * SMs, the block-sparse map with an empty row (the dropped tiles' fill) and
 * scores that grow along the keys (rescales a tile or two apart), each also
 * with the per-tile rescale (KF_CUDA_RECIPE_ATTENTION_EAGER_RESCALE, kernel
 * letter y); the block-sparse cases also in the default form (the edge path
 * a branch) and the merged one before it (KF_CUDA_RECIPE_ATTENTION_BS_EDGE_
 * MERGED, letter m). (At e5fbc65 the lazy form was an opt-in flag on the
 * same bit and passed these cases and four at head dim 64 on an H100.) */
static void test_sm90_attention_lazy_rescale_and_keep_map_edges_match_the_reference(
    void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *const d128[] = {
        "no mask, S 1000 (8 key tiles), head dim 128",
        "causal, S 200 (not a tile multiple), head dim 128",
        "GQA 8:1 (K, V broadcast over the head group) + causal",
        "no mask, Sq 520 Skv 260, 72 heads: more units than SMs",
        "block-sparse 128x128 keep map, S 520 (ragged), map row 1 empty, finite fill",
        "scores growing 0.02 a key, causal: rescales a tile or two apart, head dim 128",
    };
    for (int f = 0; f < 2; f++)
        for (size_t i = 0; i < N_OF(d128); i++)
            run_sm90_cases_only(f ? KF_CUDA_RECIPE_ATTENTION_EAGER_RESCALE : 0, "bf16", "bf16",
                                4460 + 10 * (uint64_t)f + i,
                                f ? "O rescaled every key tile" : NULL, NULL, NULL,
                                f ? "per-tile rescale" : "lazy rescale", d128[i]);
    static const char *const bs[] = {
        "block-sparse 128x128 keep map, S 520 (ragged), map row 1 empty, finite fill",
        "block-sparse per-head keep maps [H, 4, 6] of 128x128, dropping where true",
    };
    for (int f = 0; f < 2; f++)
        for (size_t i = 0; i < N_OF(bs); i++)
            run_sm90_cases_only(f ? KF_CUDA_RECIPE_ATTENTION_BS_EDGE_MERGED : 0, "bf16", "bf16",
                                4480 + 10 * (uint64_t)f + i,
                                f ? "the keep map's edge path merged" : NULL, NULL, NULL,
                                f ? "keep map edges merged" : "keep map edges", bs[i]);
}

/* The defaults on two ragged cases alone, the lazy rescale with the keep
 * map's edge branch (the 176-key form at S 1000, 8 key tiles with a
 * ragged last one and ragged query tiles; the block-sparse S 520 map with
 * an empty row): the cases compute-sanitizer's memcheck and racecheck run
 * (KF_TEST_FILTER picks this test). */
static void test_sm90_attention_lazy_rescale_on_ragged_cases_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *const names[] = {
        "no mask, S 1000 (8 key tiles), head dim 128",
        "block-sparse 128x128 keep map, S 520 (ragged), map row 1 empty, finite fill",
    };
    for (size_t i = 0; i < N_OF(names); i++)
        run_sm90_cases_only(0, "bf16", "bf16", 4500 + i, NULL, NULL, NULL, "lazy rescale, ragged",
                            names[i]);
}

/* The pair form's split at a softcap's tanh (kf_score_pre, then tanh(x) as
 * x where a warp's every |x| is at most KF_TANH_IDENT_MAX, else the tanh)
 * (KF_CUDA_RECIPE_ATTENTION_TANH_SKIP, off by default) and ALiBi's diagonal
 * once for a thread's two rows (kf_score_diag; each row's own, the flag
 * DIAG_EACH_ROW, was retired by att17b), each in the rounded form
 * (KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE, alone too), and the f32 default
 * (its diagonal as floats, stepped along the tile): the softcap on scores where most
 * warps take the operand and some the tanh (their items' later tiles then
 * the pair form whole: all three paths), the softcap and ALiBi cases
 * (ragged: rows past Sq), ALiBi over 8 key tiles; bf16, each against the
 * reference. */
static void test_sm90_attention_score_split_and_diagonal_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *const names[] = {
        "softcap 30 tanh(s / 30), scores about tanh's identity range, causal S 900",
        "softcap 30 tanh(s / 30) + causal", "ALiBi slope[h] (kv - q) + causal",
        "ALiBi slope[h] (kv - q) + causal, S 900, head dim 128"};
    const uint64_t rs = KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE;
    const uint64_t forms[] = {0, rs, rs | KF_CUDA_RECIPE_ATTENTION_TANH_SKIP};
    static const char *const labels[] = {"f32 diagonal (the default)", "rounded diagonal",
                                         "split, diagonal"};
    for (size_t f = 0; f < N_OF(forms); f++)
        for (size_t i = 0; i < N_OF(names); i++)
            run_sm90_cases_only(forms[f], "bf16", "bf16", 4520 + 10 * (uint64_t)f + i, NULL, NULL,
                                NULL, labels[f], names[i]);
}

/* The four ALiBi cases the diagonal's forms are run on (run_sm90_cases_only
 * names; bit i of a run's case mask: entry i). */
static const char *const alibi_case_names[] = {
    "ALiBi slope[h] (kv - q) + causal", "ALiBi slope[h] (kv - q) + causal, S 900, head dim 128",
    "ALiBi slope[h] (kv - q) + causal, Sq 300 != Skv 500, head dim 128",
    "ALiBi slope[h] (kv - q), no mask, Sq 300 != Skv 700, head dim 64"};

/* ALiBi's diagonal with its part free of loads (bf16(kv - q) pairs) read
 * from a table in shared memory and the causal mask's edge tiles by the pair
 * form (the rounded form's, KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE, with
 * every run below: KF_DIAG_TAB, KF_SCORE_DIAG_EDGE; test_attngen checks the
 * sources) against the reference: bf16 on the ALiBi cases -- causal
 * ragged S 190 head dim 64, causal S 900 head dim 128 (8 key tiles), causal
 * Sq 300 != Skv 500 head dim 128, no mask Sq 300 != Skv 700 head dim 64 --
 * and f16 (no pair form there) on the first and third. (The form computing
 * the diagonal on every key tile, flag DIAG_COMPUTE, was retired by att18;
 * the edge tiles' scalar score, flag EDGE_SCALAR, by att17c.) */
static void test_sm90_attention_alibi_diagonal_table_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    const struct {
        uint64_t flags;
        const char *dn, *label;
        unsigned cases; /* bit i: alibi_case_names[i] */
    } runs[] = {{0, "bf16", "diagonal table, edge pair form", 0xfu},
                {0, "f16", "diagonal table, edge pair form", 0x5u}};
    for (size_t f = 0; f < N_OF(runs); f++)
        for (size_t i = 0; i < N_OF(alibi_case_names); i++)
            if (runs[f].cases >> i & 1u)
                run_sm90_cases_only(runs[f].flags | KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE,
                                    runs[f].dn, runs[f].dn, 4800 + 10 * (uint64_t)f + i, NULL, NULL,
                                    NULL, runs[f].label, alibi_case_names[i]);
}

/* The ALiBi + causal case with Sq 300 != Skv 500 (ragged) in bf16 by
 * default (f32 scores: the diagonal as floats stepped along the tile, the
 * edge tiles' pair form) and in the rounded form (the diagonal's table in
 * shared memory): the case the GPU check runs under compute-sanitizer
 * (memcheck, racecheck). */
static void test_sm90_attention_alibi_table_on_one_ragged_case(void **state) {
    (void)state;
    REQUIRE_GPU();
    run_sm90_cases_only(0, NULL, "bf16", 4900, "f32 scores", NULL, NULL,
                        "f32 diagonal, edge pair form",
                        "ALiBi slope[h] (kv - q) + causal, Sq 300 != Skv 500, head dim 128");
    run_sm90_cases_only(KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE, NULL, "bf16", 4901, NULL, NULL,
                        NULL, "diagonal table, edge pair form",
                        "ALiBi slope[h] (kv - q) + causal, Sq 300 != Skv 500, head dim 128");
    run_sm90_cases_only(KF_CUDA_RECIPE_ATTENTION_DIAG_STEPPED, NULL, "bf16", 4902, NULL, NULL,
                        NULL, "f32 diagonal stepped, edge pair form",
                        "ALiBi slope[h] (kv - q) + causal, Sq 300 != Skv 500, head dim 128");
}

/* ALiBi's f32 score as the tile's affine part (the default: KF_DIAG_ADD,
 * the step along the tile the Q.K^T accumulator's start value at head dim
 * 128, KF_ACC_INIT) and the stepped diagonal before it (KF_CUDA_RECIPE_
 * ATTENTION_DIAG_STEPPED) against the reference, bf16, on the ALiBi cases:
 * causal ragged S 190 head dim 64 (items joined: the FFMA form), causal S 900
 * head dim 128 (8 key tiles), causal Sq 300 != Skv 500 head dim 128, no mask
 * Sq 300 != Skv 700 head dim 64 (no causal edge form: KF_DIAG_ADD alone). */
static void test_sm90_attention_alibi_affine_tile_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    const uint64_t flags[2] = {0, KF_CUDA_RECIPE_ATTENTION_DIAG_STEPPED};
    const char *const labels[2] = {"affine tile", "diagonal stepped"};
    for (size_t f = 0; f < 2; f++)
        for (size_t i = 0; i < N_OF(alibi_case_names); i++)
            run_sm90_cases_only(flags[f], NULL, "bf16", 4950 + 10 * (uint64_t)f + i, NULL, NULL,
                                NULL, labels[f], alibi_case_names[i]);
}

/* The diagonal-first walk (KF_CUDA_RECIPE_ATTENTION_KEYS_DESC: a causal or
 * window item's key tiles descending, the diagonal tile first; the report
 * says "key tiles diagonal-first") against the reference, bf16: causal
 * ragged S 200 head dim 128, Sq 100 < Skv 260, S 900 head dim 64, 80 heads
 * at S 300 (more units than SMs: items joined across units), the sliding
 * window, GQA 8:1, ALiBi at head dim 128 (S 900; Sq 300 != Skv 500). No
 * causal or window row has all its keys masked (each sees key 0 or its
 * own), so the all-masked rows stay with the block-sparse kernel's tests,
 * whose walk stays ascending. */
static void test_sm90_attention_keys_desc_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *const names[] = {
        "causal, S 200 (not a tile multiple), head dim 128",
        "causal kv <= q with Sq 100 < Skv 260",
        "causal, S 900, head dim 64",
        "causal, S 300, 80 heads: more units than SMs",
        "sliding window 50, S 300",
        "GQA 8:1 (K, V broadcast over the head group) + causal",
        "ALiBi slope[h] (kv - q) + causal, S 900, head dim 128",
        "ALiBi slope[h] (kv - q) + causal, Sq 300 != Skv 500, head dim 128"};
    int took = 0;
    for (size_t i = 0; i < N_OF(names); i++)
        run_sm90_cases_only(KF_CUDA_RECIPE_ATTENTION_KEYS_DESC, "bf16", "bf16",
                            5700 + 10 * (uint64_t)i, "key tiles diagonal-first",
                            "key tiles diagonal-first", &took, "key tiles diagonal-first",
                            names[i]);
    fprintf(stderr, "  %d of %zu cases in the diagonal-first kernel\n", took, N_OF(names));
    assert_int_equal(took, (int)N_OF(names));
}

/* The ascending causal walk's last step peeled (KF_CUDA_RECIPE_ATTENTION_
 * EDGE_LAST: templates/attention_sm90.cuh, KF_EDGE_LAST, where the mask is
 * causal and the key tiles 128 wide; the report says "the last key tile's
 * step peeled") against the reference, bf16: causal ragged S 200 and S 900
 * at head dims 128 and 64, Sq 100 < Skv 260 and Sq 300 > Skv 130 (the last
 * key tile below every row), 80 heads at S 300 (items joined across units),
 * GQA 8:1, ALiBi (S 900; Sq 300 != Skv 500); each case in that form's
 * kernel; the softcap (S 900) in it without the flag (its default since
 * att18) and not with it. The window and the general offset mask (kv <= q +
 * 160), with the flag too, keep the edge check in every step. */
static void test_sm90_attention_edge_last_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *const names[] = {
        "causal, S 200 (not a tile multiple), head dim 128",
        "causal kv <= q with Sq 100 < Skv 260",
        "causal kv <= q with Sq 300 > Skv 130",
        "causal, S 900, head dim 64",
        "causal, S 300, 80 heads: more units than SMs",
        "GQA 8:1 (K, V broadcast over the head group) + causal",
        "ALiBi slope[h] (kv - q) + causal, S 900, head dim 128",
        "ALiBi slope[h] (kv - q) + causal, Sq 300 != Skv 500, head dim 128"};
    const uint64_t el = KF_CUDA_RECIPE_ATTENTION_EDGE_LAST;
    const char *const form = "the last key tile's step peeled";
    int took = 0;
    for (size_t i = 0; i < N_OF(names); i++)
        run_sm90_cases_only(el, "bf16", "bf16", 6100 + 10 * (uint64_t)i, form, form, &took, form,
                            names[i]);
    fprintf(stderr, "  %d of %zu cases in the kernel with %s\n", took, N_OF(names), form);
    assert_int_equal(took, (int)N_OF(names));
    /* the softcap (head dim 128): peeled by default since att18, the flag
     * keeps every step's edge check */
    const char *const cap =
        "softcap 30 tanh(s / 30), scores about tanh's identity range, causal S 900";
    int cap_took = 0, cap_flag_took = 0;
    run_sm90_cases_only(0, "bf16", "bf16", 6190, form, form, &cap_took, form, cap);
    run_sm90_cases_only(el, "bf16", "bf16", 6195, NULL, form, &cap_flag_took,
                        "the flag, every step checks", cap);
    assert_int_equal(cap_took, 1);
    assert_int_equal(cap_flag_took, 0);
    static const char *const others[] = {
        "sliding window 50, S 300",
        "queries at the end of a longer key sequence (kv <= q + 160): general"};
    int others_took = 0;
    for (size_t i = 0; i < N_OF(others); i++)
        run_sm90_cases_only(el, "bf16", "bf16", 6300 + 10 * (uint64_t)i, NULL, form,
                            &others_took, "the flag, no peeled step", others[i]);
    assert_int_equal(others_took, 0);
}

/* The peeled last step on one ragged causal case (S 200, head dim 128): the
 * case the device run takes under compute-sanitizer memcheck. */
static void test_sm90_attention_edge_last_on_one_ragged_case(void **state) {
    (void)state;
    REQUIRE_GPU();
    run_sm90_cases_only(KF_CUDA_RECIPE_ATTENTION_EDGE_LAST, "bf16", NULL, 6400,
                        "the last key tile's step peeled", NULL, NULL,
                        "the last key tile's step peeled",
                        "causal, S 200 (not a tile multiple), head dim 128");
}

/* The sliding window's edge steps out of the main loop (by default since
 * win18: templates/attention_sm90.cuh, KF_EDGE_LAST with a window mask --
 * the first step, the far edge's second tile in a loop of its own with the
 * edge check, the diagonal's step peeled after the main loop, which has no
 * edge path; the report says "the window's edge steps out of the main
 * loop") against the reference, bf16 and f16: the window 50 at S 300
 * (narrower than a tile) and sm90_named_cases' windows (far edges over two
 * tiles and one; ragged S 1000; Sq 300 < Skv 700, Sq 300 < Skv 900; head
 * dims 64 and 128), each in that form's kernel; with KF_CUDA_RECIPE_
 * ATTENTION_WINDOW_INLOOP (the edge check in every step, the form before)
 * the same cases in that form; the causal kernel and a window wider than S
 * (planned causal) take no such step. */
static void test_sm90_attention_window_peel_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *const names[] = {
        "sliding window 50, S 300",
        "sliding window 300, S 1000 (ragged), head dim 128",
        "sliding window 257, S 900, head dim 64",
        "sliding window 200, Sq 300 < Skv 700, head dim 128",
        "sliding window 100, Sq 300 < Skv 900, head dim 64",
        "sliding window 5 (narrower than a tile), S 260, head dim 64"};
    static const char *const dts[] = {"bf16", "f16"};
    const uint64_t inloop = KF_CUDA_RECIPE_ATTENTION_WINDOW_INLOOP;
    const char *const form = "the window's edge steps out of the main loop";
    int took = 0, inloop_took = 0;
    for (size_t d = 0; d < N_OF(dts); d++)
        for (size_t i = 0; i < N_OF(names); i++) {
            const uint64_t seed = 6500 + 100 * (uint64_t)d + 10 * (uint64_t)i;
            run_sm90_cases_only(0, dts[d], dts[d], seed, form, form, &took, form, names[i]);
            run_sm90_cases_only(inloop, dts[d], dts[d], seed + 5, NULL, form, &inloop_took,
                                "the edge check in every step", names[i]);
        }
    fprintf(stderr, "  %d of %zu cases in the kernel with %s, %d with the flag\n", took,
            2 * N_OF(names), form, inloop_took);
    assert_int_equal(took, (int)(2 * N_OF(names)));
    assert_int_equal(inloop_took, 0);
    static const char *const others[] = {
        "causal, S 200 (not a tile multiple), head dim 128",
        "a window 2000 wider than S 700 (planned causal), head dim 128"};
    int others_took = 0;
    for (size_t i = 0; i < N_OF(others); i++)
        run_sm90_cases_only(0, "bf16", "bf16", 6700 + 10 * (uint64_t)i, NULL, form,
                            &others_took, "no window to peel", others[i]);
    assert_int_equal(others_took, 0);
}

/* The window's edge steps out of the main loop on one ragged case (window
 * 300, S 1000, head dim 128: a far edge over two key tiles, the main loop
 * run): the case the device run takes under compute-sanitizer memcheck. */
static void test_sm90_attention_window_peel_on_one_ragged_case(void **state) {
    (void)state;
    REQUIRE_GPU();
    run_sm90_cases_only(0, NULL, "bf16", 6800, "the window's edge steps out of the main loop",
                        NULL, NULL, "the window's edge steps out of the main loop",
                        "sliding window 300, S 1000 (ragged), head dim 128");
}

/* The diagonal-first walk on one ragged causal case (S 200, head dim 128):
 * the case the device run takes under compute-sanitizer memcheck. */
static void test_sm90_attention_keys_desc_on_one_ragged_case(void **state) {
    (void)state;
    REQUIRE_GPU();
    run_sm90_cases_only(KF_CUDA_RECIPE_ATTENTION_KEYS_DESC, "bf16", NULL, 5900,
                        "key tiles diagonal-first", NULL, NULL, "key tiles diagonal-first",
                        "causal, S 200 (not a tile multiple), head dim 128");
}

/* f32 scores (the default) on ALiBi's and the softcap's expressions
 * (cg_attention.c: every float node of the score unrounded; ALiBi's
 * diagonal affine in kv, stepped along the tile; the softcap's 30 folded
 * into the softmax's scale), each case against the reference (the exact
 * value, which the unrounded scores are closer to), the report saying f32
 * scores: bf16 on every case of names[], f16 on those with bit 0 of f16. */
static void run_f32_score_cases(const char *const *names, size_t n, unsigned f16,
                                uint64_t stream0) {
    static const char *const dts[] = {"bf16", "f16"};
    for (size_t d = 0; d < N_OF(dts); d++)
        for (size_t i = 0; i < n; i++)
            if (d == 0 || (f16 >> i & 1u))
                run_sm90_cases_only(0, dts[d], dts[d], stream0 + 20 * (uint64_t)d + i, "f32 scores",
                                    NULL, NULL, "f32 score expression", names[i]);
}

/* run_f32_score_cases on ALiBi: causal ragged S 190 head dim 64, S 900 head
 * dim 128, Sq 300 != Skv 500 (the diagonal tiles at the queries' end), no
 * mask Sq 300 != Skv 700 (kv - q of both signs), GQA 4:1 S 300 (the slope
 * per query head); f16 on the first and the fourth (no pair form there). */
static void test_sm90_attention_f32_alibi_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *const names[] = {
        "ALiBi slope[h] (kv - q) + causal",
        "ALiBi slope[h] (kv - q) + causal, S 900, head dim 128",
        "ALiBi slope[h] (kv - q) + causal, Sq 300 != Skv 500, head dim 128",
        "ALiBi slope[h] (kv - q), no mask, Sq 300 != Skv 700, head dim 64",
        "ALiBi slope[h] (kv - q) + causal, GQA 4:1, S 300, head dim 128"};
    run_f32_score_cases(names, N_OF(names), 0x9u, 5300);
}

/* run_f32_score_cases on the softcap: causal S 150 head dim 128, scores
 * about tanh's identity range (S 900), 8x wide (S 300) and 64x wide (tanh
 * saturating; no mask, Sq 200 Skv 400), GQA 4:1 S 300 head dim 64; f16 on
 * the first and the last (the running max there: P's exponents). */
static void test_sm90_attention_f32_softcap_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *const names[] = {
        "softcap 30 tanh(s / 30) + causal",
        "softcap 30 tanh(s / 30), scores about tanh's identity range, causal S 900",
        "softcap 30 tanh(s / 30), scores 8x wide, causal S 300",
        "softcap 30 tanh(s / 30), scores 64x wide (tanh saturates), no mask, Sq 200 Skv 400",
        "softcap 30 tanh(s / 30) + causal, GQA 4:1, S 300, head dim 64"};
    run_f32_score_cases(names, N_OF(names), 0x11u, 5350);
}

/* run_f32_score_cases on the other score expressions that no scale folds,
 * which f32 scores now keep unrounded too (no diagonal, no bound): an
 * additive mask tensor, a bool mask with a finite fill, the block-sparse
 * keep map with a finite fill (S 520, ragged, a map row empty), scores
 * growing along the keys (a rescale every tile at head dim 64; a tile or two
 * apart, causal, head dim 128); f16 on the first two. */
static void test_sm90_attention_f32_other_scores_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *const names[] = {
        "an additive mask tensor [Sq, Skv]", "a bool mask tensor with a finite fill",
        "block-sparse 128x128 keep map, S 520 (ragged), map row 1 empty, finite fill",
        "scores growing 0.06 a key: a rescale every tile, head dim 64",
        "scores growing 0.02 a key, causal: rescales a tile or two apart, head dim 128"};
    run_f32_score_cases(names, N_OF(names), 0x3u, 5400);
}

/* A softcap's MUFU ops on the FMA pipe in part: the default at head dim 128
 * (f32 scores, a quarter of the exp2s by kf_ex2_poly), and in the rounded
 * form (KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE) all on MUFU (SOFTCAP_MUFU,
 * the kernel before; the tanh share by a rational, TANH_POLY, was retired by
 * win18 with its two forms here): the softcap on the fused case's scores
 * (about 1.3), on scores about tanh's identity range, 8 and 64 times as wide
 * (tanh saturating; the last unmasked, 176-key tiles); bf16 (f16 keeps the
 * running max, none of the forms), each against the reference, the report
 * saying which form ran. */
static void test_sm90_attention_softcap_fma_shares_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *const names[] = {
        "softcap 30 tanh(s / 30) + causal",
        "softcap 30 tanh(s / 30), scores about tanh's identity range, causal S 900",
        "softcap 30 tanh(s / 30), scores 8x wide, causal S 300",
        "softcap 30 tanh(s / 30), scores 64x wide (tanh saturates), no mask, Sq 200 Skv 400"};
    const uint64_t rs = KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE;
    const uint64_t forms[] = {0, rs | KF_CUDA_RECIPE_ATTENTION_SOFTCAP_MUFU};
    static const char *const labels[] = {"exp2 share (the default)", "all on MUFU"};
    static const char *const probe[] = {"exp2s partly by polynomial", NULL};
    static const uint64_t seeds[] = {4700, 4730}; /* the seeds the forms had beside the tanh's */
    for (size_t f = 0; f < N_OF(forms); f++)
        for (size_t i = 0; i < N_OF(names); i++)
            run_sm90_cases_only(forms[f], "bf16", "bf16", seeds[f] + i, probe[f], NULL, NULL,
                                labels[f], names[i]);
}

/* The scores' log-sum-exp as a second output of the fused kernels (the
 * planner puts the logsumexp into the attention group): every fused case,
 * in bf16 with the log-sum-exp of the scores cast to f32 (what a backward
 * pass keeps) and in f16 with it in f16 (keepdim), through the sm_90a kernel
 * (the default on sm_90) and, for a third of them, the FA2 kernel; both
 * outputs against the reference, poisoned first. A decode-length query (4
 * rows) takes the fused kernel, not the decode kernels, which write O alone. */
static void test_fused_attention_writes_the_scores_log_sum_exp(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const kf_attention_mode modes[] = {KF_ATTENTION_SM90, KF_ATTENTION_FA2};
    static const char *const kernel[] = {"fused attention (sm_90a wgmma/TMA kernel)",
                                         "fused attention (sm_80 mma.sync kernel)"};
    for (size_t m = 0; m < N_OF(modes); m++) {
        kf_ctx *ctx = attn_ctx(modes[m]);
        for (size_t i = 0; i < N_OF(fused_cases) + 1; i++) {
            const bool dec = i == N_OF(fused_cases);
            if (m == 1 && !dec && i % 3 != 0)
                continue; /* FA2: a third of the cases (the lse store is the same code) */
            const char *name = dec ? "decode length: 4 queries, 300 keys, head dim 128"
                                   : fused_cases[i].name;
            const char *body =
                dec ? "q = input($[2, 4, 4, 128])\nk = input($[2, 4, 300, 128])\n"
                      "v = input($[2, 4, 300, 128])\nqk = matmul(q, k, transpose_b=true)\n"
                      "sc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n"
                    : fused_cases[i].body;
            const bool f16 = i % 2 == 1;
            char text[4096];
            fused_text(body, f16 ? "f16" : "bf16", text, sizeof text);
            strncat(text,
                    f16 ? "lse = logsumexp(s1, axis=-1, keepdim=true)\noutput lse\n"
                        : "s32 = cast(s1, f32)\nlse = logsumexp(s32, axis=-1)\noutput lse\n",
                    sizeof text - strlen(text) - 1);
            kf_graph *g = NULL;
            if (kf_graph_parse(ctx, text, strlen(text), &g) != KF_OK)
                fail_msg("%s: parse: %s\n%s", name, kf_graph_error(g), text);
            char label[200], has[200];
            snprintf(label, sizeof label, "attention + lse (%s): %s [%s]",
                     m == 0 ? "sm90" : "fa2", name, f16 ? "f16" : "bf16");
            snprintf(has, sizeof has, "%s|log-sum-exp of the scores written too", kernel[m]);
            run_opts o = {.lo = -2,
                          .hi = 2,
                          .report_has = m == 1 ? has : "log-sum-exp of the scores written too",
                          .report_has_sm90 = has,
                          .ctx = ctx};
            run_and_compare(g, 1700 + 40 * m + i, &o, label);
            fprintf(stderr, "  %s: ok\n", label);
            kf_graph_destroy(g);
        }
        kf_ctx_destroy(ctx);
    }
}

/* logsumexp over the last axis as a row kernel of its own (the softmax's
 * statistics), with a prologue and an epilogue, in every float dtype, ragged
 * rows; a row of -inf gives -inf and a row holding +inf gives +inf (the
 * op's definition: the maximum itself where it is +-inf). */
static void test_logsumexp_rows_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (size_t d = 0; d < N_OF(float_dtypes); d++) {
        run_opts o = {.lo = -3, .hi = 3, .report_has = "logsumexp"};
        run_text("kfg 1\nx = input(%s[37, 300])\nsc = const(%s[], 3)\nxs = mul(x, sc)\n"
                 "ri = iota(i32[37, 300], axis=0)\nci = iota(i32[37, 300], axis=1)\n"
                 "c1000 = const(i32[], 1000)\nkk = mul(ri, c1000)\nkey = add(kk, ci)\n"
                 "r3 = const(i32[], 3)\nisr3 = eq(ri, r3)\nninf = const(%s[], -inf)\n"
                 "x1 = where(isr3, ninf, xs)\nk5 = const(i32[], 5007)\nis5 = eq(key, k5)\n"
                 "pinf = const(%s[], inf)\nx2 = where(is5, pinf, x1)\n"
                 "lse = logsumexp(x2, axis=-1, keepdim=true)\ny = mul(lse, sc)\noutput y\n"
                 "z = input(%s[3, 5, 2049])\nlz = logsumexp(z, axis=2)\noutput lz\n",
                 float_dtypes[d], 1790, &o, "logsumexp rows (-inf, +inf rows)");
    }
}

/* Decode shapes: few query rows (1, 3, 4, 16) against a K/V whose length is
 * no multiple of the 64-key tile, split over many chunks (a small batch:
 * up to 65 splits), GQA 4:1 and 32:8 through a broadcast head axis (one a
 * [B, S, Hkv, 1, D] KV cache view), MQA, the planner's causal and sliding
 * window, a bottom-right causal (a general mask), softcap, ALiBi. */
static const struct {
    const char *name, *body, *mask;
} decode_cases[] = {
    {"Sq 1, Skv 4100 (65 splits), head dim 128",
     "q = input($[1, 2, 1, 128])\nk = input($[1, 2, 4100, 128])\nv = input($[1, 2, 4100, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
     "mask none"},
    {"Sq 3, GQA 4:1, softcap, Skv 777",
     "q = input($[2, 2, 4, 3, 128])\nk = input($[2, 2, 1, 777, 128])\n"
     "v = input($[2, 2, 1, 777, 128])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\ncap = const($[], 30)\n"
     "t0 = div(s0, cap)\nt1 = tanh(t0)\ns1 = mul(t1, cap)\n",
     "mask none"},
    {"Sq 16, bottom-right causal kv <= q + Skv - Sq, head dim 64",
     "q = input($[1, 4, 16, 64])\nk = input($[1, 4, 650, 64])\nv = input($[1, 4, 650, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[16, 650], axis=0)\ncol = iota(i32[16, 650], axis=1)\n"
     "off = const(i32[], 634)\nrq = add(row, off)\nkeep = ge(rq, col)\n"
     "ninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask general"},
    {"Sq 16, causal kv <= q, Skv 300",
     "q = input($[2, 2, 16, 128])\nk = input($[2, 2, 300, 128])\nv = input($[2, 2, 300, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[16, 300], axis=0)\ncol = iota(i32[16, 300], axis=1)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask causal"},
    {"Sq 16, sliding window 5, Skv 300",
     "q = input($[1, 2, 16, 128])\nk = input($[1, 2, 300, 128])\nv = input($[1, 2, 300, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[16, 300], axis=0)\ncol = iota(i32[16, 300], axis=1)\nd = sub(row, col)\n"
     "w = const(i32[], 4)\nzero = const(i32[], 0)\nrest = sub(w, d)\nm = min(d, rest)\n"
     "keep = ge(m, zero)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask sliding_window"},
    {"Sq 1, MQA (one K/V head for 8), ALiBi, head dim 64",
     "q = input($[3, 8, 1, 64])\nk = input($[3, 1, 1500, 64])\nv = input($[3, 1, 1500, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "slope = input($[8, 1, 1])\ncol = iota(i32[1, 1500], axis=1)\ndf = cast(col, $)\n"
     "bias = mul(slope, df)\ns1 = add(s0, bias)\n",
     "mask none"},
    {"Sq 4, GQA 32:8 KV cache views of [B, S, Hkv, 1, D]",
     "q = input($[2, 8, 4, 4, 128])\nki = input($[2, 999, 8, 1, 128])\n"
     "vi = input($[2, 999, 8, 1, 128])\nk = permute(ki, [0, 2, 3, 1, 4])\n"
     "v = permute(vi, [0, 2, 3, 1, 4])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
     "mask none"},
    {"Sq 16, GQA 8:1 (128 rows: two row blocks), Skv 200",
     "q = input($[1, 1, 8, 16, 64])\nk = input($[1, 1, 1, 200, 64])\n"
     "v = input($[1, 1, 1, 200, 64])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.125)\ns1 = mul(qk, sc)\n",
     "mask none"},
};

/* Decode cases (i < n_dec) and fused cases (long queries: many row blocks
 * of 64, each re-reading the chunk) with KF_ATTENTION_DECODE in dtypes
 * dts[0 .. n_dts): the report names the split-KV kernels and the mask, and
 * O matches the reference. */
static void decode_runs(size_t first, size_t n_dec, size_t n_fused, size_t n_dts) {
    kf_ctx *ctx = attn_ctx(KF_ATTENTION_DECODE);
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16};
    for (size_t d = 0; d < n_dts; d++) {
        for (size_t i = first; i < n_dec + n_fused; i++) {
            const char *name = i < n_dec ? decode_cases[i].name : fused_cases[i - n_dec].name;
            const char *body = i < n_dec ? decode_cases[i].body : fused_cases[i - n_dec].body;
            const char *mask = i < n_dec ? decode_cases[i].mask : fused_cases[i - n_dec].mask;
            const char *dn = kf_dtype_name(dts[d]);
            kf_graph *g = fused_graph(ctx, body, dn, name);
            char label[160], has[160];
            snprintf(label, sizeof label, "decode attention: %s [%s]", name, dn);
            snprintf(has, sizeof has, "decode attention (split-KV mma.sync kernel)|%s", mask);
            run_opts o = {.lo = -2, .hi = 2, .report_has = has, .ctx = ctx};
            run_and_compare(g, 1500 + 40 * d + i, &o, label);
            fprintf(stderr, "  %s: ok\n", label);
            kf_graph_destroy(g);
        }
    }
    kf_ctx_destroy(ctx);
}

/* Every decode case in bf16 and f16. */
static void test_decode_attention_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    decode_runs(0, N_OF(decode_cases), 0, 2);
}

/* The default context runs a short query through the decode kernels (the
 * report says so) and matches the reference: GQA 4:1, Sq 3, softcap, bf16. */
static void test_decode_attention_is_the_default_for_short_queries(void **state) {
    (void)state;
    REQUIRE_GPU();
    char text[4096];
    fused_text(decode_cases[1].body, "bf16", text, sizeof text);
    kf_graph *g = NULL;
    assert_int_equal(kf_graph_parse(G.ctx, text, strlen(text), &g), KF_OK);
    run_opts o = {.lo = -2, .hi = 2, .report_has = "decode attention (split-KV mma.sync kernel)"};
    run_and_compare(g, 1590, &o, "decode attention by default");
    kf_graph_destroy(g);
}

/* Every fused case (Sq up to 300, GQA 8:1 of 150 rows: many row blocks) in
 * bf16 through the decode kernels, which take any query length. */
static void test_decode_attention_takes_long_queries_too(void **state) {
    (void)state;
    REQUIRE_GPU();
    decode_runs(N_OF(decode_cases), N_OF(decode_cases), N_OF(fused_cases), 1);
}

/* The one-split form of the decode kernels (recipe_attention_decode.c): where
 * the split count is 1 the split kernel writes O itself (one step, no
 * workspace). Cases whose count is 1: one key tile (Skv <= 64: on any device)
 * or a long batch (264 kv items: the 264 block slots of a 132-SM H100 / H200
 * at head dim 128); Sq 1 and 16, GQA 4:1, ragged Skv, a mask that leaves row
 * 0 no key (the reference's NaN row). `big` marks the long batches. */
static const struct {
    const char *name, *body, *mask;
    bool big;
} direct_cases[] = {
    {"Sq 1, B33 H8 (264 kv items), Skv 520 (ragged, 9 tiles)",
     "q = input($[33, 8, 1, 128])\nk = input($[33, 8, 520, 128])\nv = input($[33, 8, 520, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
     "mask none", true},
    {"Sq 1, GQA 4:1, B33 Hkv 8 (264 kv items), Skv 450 (ragged)",
     "q = input($[33, 8, 4, 1, 128])\nk = input($[33, 8, 1, 450, 128])\n"
     "v = input($[33, 8, 1, 450, 128])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
     "mask none", true},
    {"Sq 16, GQA 4:1 (64 rows a kv item), Skv 50: one ragged key tile",
     "q = input($[2, 2, 4, 16, 128])\nk = input($[2, 2, 1, 50, 128])\n"
     "v = input($[2, 2, 1, 50, 128])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
     "mask none", false},
    {"Sq 16, GQA 4:1, kv <= q - 1 (row 0 sees no key: NaN), Skv 60, head dim 64",
     "q = input($[2, 2, 4, 16, 64])\nk = input($[2, 2, 1, 60, 64])\n"
     "v = input($[2, 2, 1, 60, 64])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.125)\ns0 = mul(qk, sc)\nrow = iota(i32[16, 60], axis=0)\n"
     "col = iota(i32[16, 60], axis=1)\noff = const(i32[], -1)\nrq = add(row, off)\n"
     "keep = ge(rq, col)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask general", false},
    {"Sq 16, causal kv <= q, Skv 300 (one key tile visited)",
     "q = input($[2, 2, 16, 128])\nk = input($[2, 2, 300, 128])\nv = input($[2, 2, 300, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[16, 300], axis=0)\ncol = iota(i32[16, 300], axis=1)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask causal", false},
};

/* The split count the decode recipe gives group `g`'s attention on ctx's
 * device (kf_cuda_attention_decode_splits), 0 when the decode kernels do
 * not take it. */
static uint32_t decode_splits_here(kf_ctx *ctx, kf_graph *g) {
    kf_plan *plan = NULL;
    assert_int_equal(kf_plan_create(g, NULL, &plan), KF_OK);
    char err[KF_MSG_MAX] = "";
    kf_cuda_exec *ex = NULL;
    kf_cuda_target t;
    assert_int_equal(kf_cuda_exec_open(ctx, &ex, &t, err), KF_OK);
    uint32_t n = 0;
    for (uint32_t gi = 0; gi < plan->n_groups; gi++) {
        kf_cuda_decode_shape sh;
        if (plan->groups[gi].kind == KF_GROUP_ATTENTION &&
            kf_cuda_attention_decode_shape(plan, gi, t.arch, &sh) == KF_OK)
            n = kf_cuda_attention_decode_splits(&sh, t.sm_count);
    }
    kf_cuda_exec_destroy(ex);
    kf_plan_destroy(plan);
    return n;
}

/* direct_cases[i] (which: 0 all, 1 the small ones, 2 the long batches) with
 * KF_ATTENTION_DECODE and recipe flags `flags`, in dtypes dts[0 .. n_dts): the
 * report names the form the flags and the device's split count give -- the
 * direct kernel (one split, no flag), else the split kernel + combine -- and O
 * matches the reference (outputs poisoned first). Returns how many runs took
 * the direct kernel. */
static int direct_runs(uint64_t flags, size_t n_dts, int which, uint64_t seed) {
    kf_ctx *ctx = attn_ctx(KF_ATTENTION_DECODE);
    ctx->recipe_flags |= flags;
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16};
    int n_direct = 0;
    for (size_t d = 0; d < n_dts; d++) {
        for (size_t i = 0; i < N_OF(direct_cases); i++) {
            if ((which == 1 && direct_cases[i].big) || (which == 2 && !direct_cases[i].big))
                continue;
            const char *dn = kf_dtype_name(dts[d]);
            kf_graph *g = fused_graph(ctx, direct_cases[i].body, dn, direct_cases[i].name);
            uint32_t n = decode_splits_here(ctx, g);
            assert_true(n >= 1);
            /* twice the splits: more than 1 wherever there are 2+ tiles */
            if (flags & KF_CUDA_RECIPE_ATTENTION_DECODE_SPLITS_X2)
                n = direct_cases[i].big ? 2 * n : n;
            const bool direct = n == 1 && !(flags & KF_CUDA_RECIPE_ATTENTION_DECODE_COMBINE);
            char label[200], has[200];
            snprintf(label, sizeof label, "decode attention, %s: %s [%s]",
                     direct ? "one split writing O" : "split + combine", direct_cases[i].name, dn);
            snprintf(has, sizeof has, "decode attention (split-KV mma.sync kernel)|%s|%s",
                     direct_cases[i].mask,
                     direct ? "writing O itself: 1 split of|no workspace, no combine"
                            : "+ combine fadecc_");
            run_opts o = {.lo = -2,
                          .hi = 2,
                          .report_has = has,
                          .report_lacks = direct ? "+ combine" : "writing O itself",
                          .ctx = ctx};
            run_and_compare(g, 1800 + seed + 40 * d + i, &o, label);
            fprintf(stderr, "  %s: ok\n", label);
            n_direct += direct;
            kf_graph_destroy(g);
        }
    }
    kf_ctx_destroy(ctx);
    return n_direct;
}

/* The one-split form on every direct case, bf16 and f16: the small ones
 * take it on any device, the long batches where the device has 264 block
 * slots (H100 / H200). */
static void test_decode_attention_one_split_writes_o(void **state) {
    (void)state;
    REQUIRE_GPU();
    assert_true(direct_runs(0, 2, 0, 0) >= 6);
}

/* The ragged one-tile cases alone in the one-split form, bf16 (the
 * sanitizers run it). */
static void test_decode_attention_one_split_ragged(void **state) {
    (void)state;
    REQUIRE_GPU();
    assert_int_equal(direct_runs(0, 1, 1, 100), 3);
}

/* The forms kept to measure, bf16: the two-step form at one split
 * (KF_CUDA_RECIPE_ATTENTION_DECODE_COMBINE, the form before) on every direct
 * case, and twice the splits (ATTENTION_DECODE_SPLITS_X2) on the long
 * batches -- split + combine. */
static void test_decode_attention_two_step_forms_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    assert_int_equal(direct_runs(KF_CUDA_RECIPE_ATTENTION_DECODE_COMBINE, 1, 0, 200), 0);
    assert_int_equal(direct_runs(KF_CUDA_RECIPE_ATTENTION_DECODE_SPLITS_X2, 1, 2, 300), 0);
}

/* A group no fused kernel takes runs unfused and the report says why for
 * the tensor-core kernels and for the SIMT one: f32 and bf16 with head dims
 * past 256; and
 * with KF_FLAG_UNFUSED_ATTENTION, one they take (bf16, head dim 128, causal)
 * runs unfused too. (f32 and other head dims up to 256 run the SIMT kernel:
 * test_cuda_attnsimt.) */
static void test_fused_attention_falls_back_and_says_why(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = G.ctx;
    static const struct {
        const char *text, *why;
    } cases[] = {
        {"kfg 1\nq = input(f32[2, 2, 70, 264])\nk = input(f32[2, 2, 70, 264])\n"
         "v = input(f32[2, 2, 70, 264])\nqk = matmul(q, k, transpose_b=true)\n"
         "p = softmax(qk)\no = matmul(p, v)\noutput o\n",
         "unfused fallback|dtype f32|nor the SIMT kernel: head dim 264"},
        {"kfg 1\nq = input(bf16[2, 2, 70, 320])\nk = input(bf16[2, 2, 70, 320])\n"
         "v = input(bf16[2, 2, 70, 320])\nqk = matmul(q, k, transpose_b=true)\n"
         "p = softmax(qk)\no = matmul(p, v)\noutput o\n",
         "unfused fallback|head dim 320|nor the SIMT kernel: head dim 320"},
    };
    for (size_t i = 0; i < N_OF(cases); i++) {
        kf_graph *g = NULL;
        assert_int_equal(kf_graph_parse(ctx, cases[i].text, strlen(cases[i].text), &g), KF_OK);
        run_opts o = {.lo = -2, .hi = 2, .report_has = cases[i].why, .ctx = ctx};
        run_and_compare(g, 1200 + i, &o, cases[i].why);
        kf_graph_destroy(g);
    }
    kf_ctx *off = flags_ctx(KF_FLAG_UNFUSED_ATTENTION);
    char text[4096];
    fused_text(fused_cases[0].body, "bf16", text, sizeof text);
    kf_graph *g = NULL;
    assert_int_equal(kf_graph_parse(off, text, strlen(text), &g), KF_OK);
    run_opts o = {
        .lo = -2, .hi = 2, .report_has = "unfused fallback|KF_FLAG_UNFUSED_ATTENTION", .ctx = off};
    run_and_compare(g, 1210, &o, "KF_FLAG_UNFUSED_ATTENTION");
    kf_graph_destroy(g);
    kf_ctx_destroy(off);
}

/* ------------------------------------------------------------------------ */
/* Every example                                                              */
/* ------------------------------------------------------------------------ */

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf)
        buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

static int run_examples_in(const char *dir, uint64_t stream, kf_ctx *ctx) {
    DIR *dp = opendir(dir);
    if (!dp)
        return 0;
    int count = 0;
    struct dirent *de;
    char *names[128];
    int n = 0;
    while ((de = readdir(dp)) && n < 128) {
        size_t l = strlen(de->d_name);
        if (l > 4 && strcmp(de->d_name + l - 4, ".kfg") == 0)
            names[n++] = strdup(de->d_name);
    }
    closedir(dp);
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        size_t len = 0;
        char *text = read_file(path, &len);
        assert_non_null(text);
        kf_graph *g = NULL;
        if (kf_graph_parse(G.ctx, text, len, &g) != KF_OK)
            fail_msg("%s: %s", path, kf_graph_error(g));
        run_opts o = {.lo = -1, .hi = 1, .ctx = ctx};
        run_and_compare(g, stream + (uint64_t)i, &o, path);
        fprintf(stderr, "  %s: ok on the GPU\n", path);
        kf_graph_destroy(g);
        free(text);
        free(names[i]);
        count++;
    }
    return count;
}

static void test_every_example_runs_on_the_gpu_and_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    const char *src = getenv("KF_SOURCE_DIR");
    char dir[900];
    snprintf(dir, sizeof dir, "%s/examples", src ? src : ".");
    int n = run_examples_in(dir, 1000, NULL);
    snprintf(dir, sizeof dir, "%s/examples/patterns", src ? src : ".");
    n += run_examples_in(dir, 1100, NULL);
    assert_true(n >= 3);
}

/* ------------------------------------------------------------------------ */
/* The generated GEMM kernel (sm_90a), forced                                 */
/* ------------------------------------------------------------------------ */

static kf_ctx *ctx_gemm(kf_gemm_mode mode) { return cuda_ctx(0, mode); }

/* Every GEMM case forced to the generated kernel: on sm_90 the report must
 * name it (report_has_sm90), elsewhere the recipe keeps cuBLASLt. */
/* The generated GEMM's cases in dtype dts[d] (one test per dtype, so a GPU
 * machine runs them side by side). */
static void generated_gemms_case(size_t d) {
    kf_ctx *ctx = ctx_gemm(KF_GEMM_GENERATED);
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16};
    const char *gen = "generated kernel";
    for (size_t i = 0; i < N_OF(epi_cases); i++) {
        const epi_case *c = &epi_cases[i];
        char fmt[1024];
        epi_case_text(c, fmt, sizeof fmt);
        run_opts o = {.lo = -1, .hi = 1, .report_has_sm90 = gen, .ctx = ctx};
        run_text(fmt, dts[d], 1700 + i, &o, c->name);
    }
    run_opts o = {.lo = -1, .hi = 1, .report_has_sm90 = gen, .ctx = ctx};
    /* ragged M, N, K (not tile multiples), bias + erf gelu */
    run_text(
        "kfg 1\nx = input(%s[1000, 1000])\nw = input(%s[1000, 1000])\nb = input(%s[1000])\n"
        "h = matmul(x, w)\na = add(h, b)\ny = gelu(a)\noutput y\n",
        dts[d], 1800, &o, "ragged 1000^3, bias+gelu");
    /* cooperative 128 x 256 tiles with an epilogue, ragged N and K (K past
     * 1024: a shorter one takes ping-pong tiles with the TMA-store epilogue) */
    run_text("kfg 1\nx = input(%s[2200, 1096])\nw = input(%s[1096, 2056])\nb = input(%s[2056])\n"
             "h = matmul(x, w)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
             dts[d], 1801,
             &(run_opts){.lo = -1, .hi = 1, .report_has_sm90 = "128x256 tiles", .ctx = ctx},
             "cooperative 128x256 tiles, epilogue, ragged");
    /* ping-pong 128 x 128 tiles (153 for 132 SMs), ragged M, N and K */
    run_text("kfg 1\nx = input(%s[1100, 200])\nw = input(%s[200, 2056])\nb = input(%s[2056])\n"
             "r = input(%s[1100, 2056])\nh = matmul(x, w)\na = add(h, b)\ng = gelu(a)\n"
             "y = add(g, r)\noutput y\n",
             dts[d], 1810,
             &(run_opts){.lo = -1, .hi = 1, .report_has_sm90 = "ping-pong", .ctx = ctx},
             "ping-pong tiles, ragged");
    /* a bare product: cooperative 128 x 256 tiles (162 for 132 SMs), and
     * with a short K ping-pong 128 x 128 ones (306) */
    run_text("kfg 1\nx = input(%s[2200, 1096])\nw = input(%s[1096, 2056])\ny = matmul(x, w)\n"
             "output y\n",
             dts[d], 1830,
             &(run_opts){.lo = -1, .hi = 1, .report_has_sm90 = "cooperative", .ctx = ctx},
             "cooperative 128x256 tiles, ragged");
    run_text("kfg 1\nx = input(%s[2200, 136])\nw = input(%s[136, 2056])\ny = matmul(x, w)\n"
             "output y\n",
             dts[d], 1809,
             &(run_opts){.lo = -1,
                         .hi = 1,
                         .report_has_sm90 = "128x128 tiles ping-pong",
                         .ctx = ctx},
             "short K: ping-pong 128x128 tiles, TMA-store epilogue, ragged");
    /* M = 1; K below one K step */
    run_text(
        "kfg 1\nx = input(%s[1, 512])\nw = input(%s[512, 384])\ny = matmul(x, w)\noutput y\n",
        dts[d], 1802, &o, "M = 1");
    run_text("kfg 1\nx = input(%s[130, 24])\nw = input(%s[24, 136])\nr = input(%s[130, 136])\n"
             "h = matmul(x, w)\ny = add(h, r)\noutput y\n",
             dts[d], 1803, &o, "K = 24, residual");
    /* batched in one launch; B transposed (K-major); A transposed (M-major) */
    run_text("kfg 1\na = input(%s[3, 40, 24])\nb = input(%s[3, 24, 56])\n"
             "c = matmul(a, b)\noutput c\n",
             dts[d], 1804, &o, "batched");
    run_text("kfg 1\na = input(%s[2, 3, 40, 24])\nb = input(%s[24, 56])\n"
             "c = matmul(a, b)\noutput c\n",
             dts[d], 1805, &o, "broadcast B (batch folded into M)");
    run_text("kfg 1\na = input(%s[4, 200, 64])\nb = input(%s[4, 136, 64])\n"
             "c = matmul(a, b, transpose_b=true)\nd = relu(c)\noutput d\n",
             dts[d], 1806, &o, "batched, B transposed");
    run_text("kfg 1\na = input(%s[136, 200])\nb = input(%s[4, 136, 72])\n"
             "c = matmul(a, b, transpose_a=true)\noutput c\n",
             dts[d], 1807, &o, "A transposed, broadcast A");
    run_text("kfg 1\nx = input(%s[64, 48])\nw = input(%s[48, 1])\nv = input(%s[1, 64])\n"
             "c = matmul(x, w)\ne = matmul(v, x)\noutput c\noutput e\n",
             dts[d], 1808, &(run_opts){.lo = -1, .hi = 1, .ctx = ctx}, "vector shapes");
    /* SwiGLU as one dual kernel: ping-pong 128 x (2 x 64), ragged M, N, K */
    run_text("kfg 1\nx = input(%s[1000, 264])\nwg = input(%s[264, 1096])\n"
             "wu = input(%s[264, 1096])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
             "a = silu(g)\ny = mul(a, u)\noutput y\n",
             dts[d], 1811,
             &(run_opts){.lo = -1,
                         .hi = 1,
                         .report_has_sm90 = "dual 128x(2x64) tiles ping-pong",
                         .ctx = ctx},
             "SwiGLU dual, ping-pong, ragged");
    /* dual cooperative 128 x (2 x 128), ragged; the gated product cast to f32 */
    run_text("kfg 1\nx = input(%s[2200, 136])\nwg = input(%s[136, 2056])\n"
             "wu = input(%s[136, 2056])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
             "a = silu(g)\nh = mul(a, u)\ny = cast(h, f32)\noutput y\n",
             dts[d], 1812,
             &(run_opts){.lo = -1,
                         .hi = 1,
                         .report_has_sm90 = "dual 128x(2x128) tiles cooperative",
                         .ctx = ctx},
             "SwiGLU dual, cooperative, ragged, cast");
    /* dual with both B transposed (K-major), few tiles, M = 1 */
    run_text("kfg 1\nx = input(%s[1, 200])\nwg = input(%s[136, 200])\n"
             "wu = input(%s[136, 200])\ng = matmul(x, wg, transpose_b=true)\n"
             "u = matmul(x, wu, transpose_b=true)\na = silu(g)\ny = mul(a, u)\noutput y\n",
             dts[d], 1813,
             &(run_opts){.lo = -1, .hi = 1, .report_has_sm90 = "dual 128x(2x64)", .ctx = ctx},
             "SwiGLU dual, K-major B, M = 1");
    /* N = 1001 (K-major B takes any N): the last chunk of a row is
     * partial, and the epilogue's bias and residual reads stop at N */
    run_text("kfg 1\nx = input(%s[300, 64])\nw = input(%s[1001, 64])\nb = input(%s[1001])\n"
             "r = input(%s[300, 1001])\nh = matmul(x, w, transpose_b=true)\na = add(h, b)\n"
             "y = add(a, r)\noutput y\n",
             dts[d], 1815, &o, "N = 1001, K-major B, bias + residual");
    run_text("kfg 1\nx = input(%s[200, 64])\nwg = input(%s[1001, 64])\n"
             "wu = input(%s[1001, 64])\nb = input(%s[1001])\n"
             "g = matmul(x, wg, transpose_b=true)\nu = matmul(x, wu, transpose_b=true)\n"
             "a = silu(g)\nh = mul(a, u)\ny = add(h, b)\noutput y\n",
             dts[d], 1816,
             &(run_opts){.lo = -1, .hi = 1, .report_has_sm90 = "dual 128x(2x64)", .ctx = ctx},
             "SwiGLU dual, N = 1001, bias");
    /* a norm prologue folded into B after a statistics pre-pass (a
     * pre-pass writes diag(gamma) B, the accumulators get the row
     * statistics): RMSNorm, ragged M, N, K */
    const char *npro = "norm prologue folded into B";
    run_text("kfg 1\nx = input(%s[1000, 264])\ng = input(%s[264])\nw = input(%s[264, 392])\n"
             "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
             dts[d], 1817, &(run_opts){.lo = -1, .hi = 1, .report_has_sm90 = npro, .ctx = ctx},
             "norm prologue: rms_norm, ragged");
    /* where B is not the smaller operand (2 N >= M), the prologue
     * kernel's scratch instead */
    run_text("kfg 1\nx = input(%s[1000, 264])\ng = input(%s[264])\nw = input(%s[264, 1096])\n"
             "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
             dts[d], 1823,
             &(run_opts){.lo = -1,
                         .hi = 1,
                         .report_has_sm90 = "A from the prologue kernel's scratch",
                         .ctx = ctx},
             "norm prologue: rms_norm from the scratch, ragged");
    /* LayerNorm (mean, rstd), rows off zero, batch folded into M, a bias */
    run_text("kfg 1\nx = input(%s[2, 300, 200])\ng = input(%s[200])\nc = input(%s[200])\n"
             "w = input(%s[200, 136])\nb = input(%s[136])\nn = layer_norm(x, g, c)\n"
             "y = matmul(n, w)\nz = add(y, b)\noutput z\n",
             dts[d], 1818, &(run_opts){.lo = 0.5, .hi = 3, .report_has_sm90 = npro, .ctx = ctx},
             "norm prologue: layer_norm, batch folded, bias");
    /* the ping-pong schedule (136 tiles for 132 SMs): a consumer
     * normalizes all 128 rows of its tile */
    run_text("kfg 1\nx = input(%s[8600, 128])\ng = input(%s[128])\nw = input(%s[128, 200])\n"
             "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
             dts[d], 1819,
             &(run_opts){.lo = -1, .hi = 1, .report_has_sm90 = "ping-pong", .ctx = ctx},
             "norm prologue: ping-pong");
    /* a SwiGLU pair behind a norm: RMSNorm ragged in the ping-pong
     * schedule from the scratch (2 N >= M), LayerNorm folded (a pre-pass
     * per B), LayerNorm in 128 x (2 x 128) cooperative from the scratch */
    run_text("kfg 1\nx = input(%s[1000, 264])\ng = input(%s[264])\n"
             "wg = input(%s[264, 1096])\nwu = input(%s[264, 1096])\nn = rms_norm(x, g)\n"
             "gt = matmul(n, wg)\nu = matmul(n, wu)\na = silu(gt)\ny = mul(a, u)\noutput y\n",
             dts[d], 1820,
             &(run_opts){.lo = -1,
                         .hi = 1,
                         .report_has_sm90 = "A from the prologue kernel's scratch",
                         .ctx = ctx},
             "norm prologue: rms_norm, SwiGLU dual, ragged");
    run_text("kfg 1\nx = input(%s[3000, 200])\ng = input(%s[200])\nc = input(%s[200])\n"
             "wg = input(%s[200, 392])\nwu = input(%s[200, 392])\nn = layer_norm(x, g, c)\n"
             "gt = matmul(n, wg)\nu = matmul(n, wu)\na = silu(gt)\ny = mul(a, u)\noutput y\n",
             dts[d], 1824, &(run_opts){.lo = -1, .hi = 1, .report_has_sm90 = npro, .ctx = ctx},
             "norm prologue: layer_norm folded, SwiGLU dual");
    /* the pair with inputs off zero (large positive products), no norm */
    run_text("kfg 1\nx = input(%s[2200, 136])\nwg = input(%s[136, 2056])\n"
             "wu = input(%s[136, 2056])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
             "a = silu(g)\ny = mul(a, u)\noutput y\n",
             dts[d], 1825,
             &(run_opts){.lo = 0.5, .hi = 3, .report_has_sm90 = "dual", .ctx = ctx},
             "SwiGLU dual, inputs 0.5..3");
    run_text("kfg 1\nx = input(%s[2200, 136])\ng = input(%s[136])\nc = input(%s[136])\n"
             "wg = input(%s[136, 2056])\nwu = input(%s[136, 2056])\nn = layer_norm(x, g, c)\n"
             "gt = matmul(n, wg)\nu = matmul(n, wu)\na = silu(gt)\ny = mul(a, u)\noutput y\n",
             dts[d], 1821,
             &(run_opts){.lo = 0.5,
                         .hi = 3,
                         .report_has_sm90 = "dual 128x(2x128) tiles cooperative",
                         .ctx = ctx},
             "norm prologue: layer_norm, SwiGLU dual, cooperative");
    /* LayerNorm before a K-major B (the fold pre-pass's other layout), N
     * not a multiple of 8 (the column sums read one by one) */
    run_text("kfg 1\nx = input(%s[2100, 200])\ng = input(%s[200])\nc = input(%s[200])\n"
             "w = input(%s[1001, 200])\nn = layer_norm(x, g, c)\n"
             "y = matmul(n, w, transpose_b=true)\noutput y\n",
             dts[d], 1822, &(run_opts){.lo = 0.5, .hi = 3, .report_has_sm90 = npro, .ctx = ctx},
             "norm prologue: layer_norm, K-major B, N = 1001");
    /* dual batched (both B per batch), with a residual in the epilogue */
    run_text("kfg 1\nx = input(%s[3, 100, 64])\nwg = input(%s[3, 64, 136])\n"
             "wu = input(%s[3, 64, 136])\nr = input(%s[3, 100, 136])\n"
             "g = matmul(x, wg)\nu = matmul(x, wu)\na = silu(g)\nh = mul(a, u)\n"
             "y = add(h, r)\noutput y\n",
             dts[d], 1814,
             &(run_opts){.lo = -1, .hi = 1, .report_has_sm90 = "dual 128x(2x64)", .ctx = ctx},
             "SwiGLU dual, batched, residual");
    kf_ctx_destroy(ctx);
}

static void test_generated_bf16_gemms_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    generated_gemms_case(0);
}

static void test_generated_f16_gemms_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    generated_gemms_case(1);
}

static void test_generated_gemms_of_every_example_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = ctx_gemm(KF_GEMM_GENERATED);
    /* every example and pattern, forced */
    const char *src = getenv("KF_SOURCE_DIR");
    char dir[900];
    snprintf(dir, sizeof dir, "%s/examples", src ? src : ".");
    int n = run_examples_in(dir, 2000, ctx);
    snprintf(dir, sizeof dir, "%s/examples/patterns", src ? src : ".");
    n += run_examples_in(dir, 2100, ctx);
    assert_true(n >= 3);
    kf_ctx_destroy(ctx);
}

/* The generated GEMM in 2-CTA clusters (KF_CUDA_RECIPE_GEMM_CLUSTER2, an
 * internal recipe flag, so the recipes are made here): tile pairs sharing
 * their B tile by TMA multicast, each CTA's consumers releasing stages on
 * both CTAs' barriers. The recipe must say it took the clusters and launch
 * 2 x 1 x 1; every output is judged against the reference. The cases: an odd
 * tile-row count (a pair's missing half), K-major and N-major B (the map's
 * half boxes, the boxes split by rank), 128 x 256 tiles with two pairs per
 * cluster, a SwiGLU pair in both B layouts (each B one half), batched
 * operands, a norm folded into B, ragged M, N and K.
 *
 * flag_case is the same run for any internal schedule flag: the recipe of
 * every GEMM group must name `want` (its line in the report), and with
 * `twice` the graph runs a second time on outputs poisoned again, which must
 * come back the same bits (stream-K's partials are added in a fixed order,
 * whichever block arrives last; its counters reset themselves).
 *
 * flags_case takes a check of the recipes instead (recipes_check) and the
 * GEMM side bits themselves (0: cuBLASLt, measured, generated). */
typedef void (*recipes_check)(const kf_plan *plan, const kf_cuda_recipes *r, const char *what,
                              const char *dn);

/* The kernel step of recipe rc's first variant that runs its GEMM: the
 * variant's last step (pre-passes and prologues come before it). */
static const kf_cuda_kstep *gemm_kstep(const kf_cuda_recipe *rc) {
    return rc->steps[rc->variants[0].first_step + rc->variants[0].n_steps - 1].kernel;
}

/* As flags_case_full, the recipes made for `sms` SMs where it is not 0 (the
 * kernels still run on every SM the device has: a persistent grid of `sms`
 * blocks), so a small case takes the tiles a large one takes. */
static void sms_case_full(kf_ctx *ctx, const char *fmt, kf_dtype d, uint64_t stream,
                          const char *what, uint64_t flags, recipes_check check, const char *want,
                          bool twice, int sms) {
    char text[2048];
    const char *dn = kf_dtype_name(d);
    snprintf(text, sizeof text, fmt, dn, dn, dn, dn, dn, dn, dn, dn);
    kf_graph *g = NULL;
    if (kf_graph_parse(ctx, text, strlen(text), &g) != KF_OK)
        fail_msg("%s: parse: %s", what, g ? kf_graph_error(g) : "no graph");
    kf_plan *plan = NULL;
    assert_int_equal(kf_plan_create(g, NULL, &plan), KF_OK);
    char err[KF_MSG_MAX] = "";
    kf_cuda_exec *ex = NULL;
    kf_cuda_target t;
    assert_int_equal(kf_cuda_exec_open(ctx, &ex, &t, err), KF_OK);
    t.flags =
        (t.flags & ~(uint64_t)(KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_MEASURED)) |
        flags;
    if (sms > 0)
        t.sm_count = sms;
    kf_cuda_recipes *r = NULL;
    if (kf_cuda_recipes_create(plan, &t, &g->mem, &r, err) != KF_OK)
        fail_msg("%s [%s]: recipes: %s", what, dn, err);
    if (check)
        check(plan, r, what, dn);
    bool taken = false;
    for (uint32_t gi = 0; want && gi < r->n; gi++) {
        const kf_cuda_recipe *rc = &r->recipes[gi];
        if (plan->groups[gi].kind != KF_GROUP_GEMM || rc->n_variants == 0)
            continue;
        if (!strstr(rc->variants[0].how, want))
            fail_msg("%s [%s]: not '%s': %s", what, dn, want, rc->variants[0].how);
        const kf_cuda_kstep *ks = gemm_kstep(rc);
        if (flags & KF_CUDA_RECIPE_GEMM_CLUSTER2) {
            assert_int_equal(ks->cluster[0], 2);
            assert_int_equal(ks->grid[0] % 2, 0);
        }
        taken = true;
    }
    assert_true(taken || !want);
    if (kf_cuda_exec_prepare(ex, plan, r, err) != KF_OK)
        fail_msg("%s [%s]: prepare: %s", what, dn, err);
    size_t n_in = kf_graph_input_count(g), n_out = kf_graph_output_count(g);
    kf_binding *in = calloc(n_in + 1, sizeof *in), *out = calloc(n_out + 1, sizeof *out);
    void **bound = calloc(g->n_nodes, sizeof *bound);
    void **first = calloc(n_out + 1, sizeof *first);
    kf_test_rng rng = kf_test_rng_make(stream);
    for (size_t i = 0; i < n_in; i++) {
        const kf_tensor *ti = kf_graph_input(g, i);
        size_t n = (size_t)kf_tensor_numel(ti), bytes = n * kf_dtype_size(ti->dtype);
        in[i] = (kf_binding){kf_tensor_name(ti), malloc(bytes), bytes};
        kf_test_fill_input(in[i].data, ti, n, &rng, -1, 1);
        bound[ti->id] = in[i].data;
    }
    for (int run = 0; run < (twice ? 2 : 1); run++) {
        for (size_t i = 0; i < n_out; i++) {
            const kf_tensor *to = kf_graph_output(g, i);
            size_t n = (size_t)kf_tensor_numel(to), bytes = n * kf_dtype_size(to->dtype);
            if (run == 0)
                out[i] = (kf_binding){kf_graph_output_name(g, i), malloc(bytes), bytes};
            kf_test_poison(out[i].data, to->dtype, n);
            bound[to->id] = out[i].data;
        }
        if (kf_cuda_exec_run(ex, bound, NULL, err) != KF_OK)
            fail_msg("%s [%s]: run %d: %s", what, dn, run, err);
        for (size_t i = 0; i < n_out && twice; i++) {
            if (run == 0) {
                first[i] = malloc(out[i].size);
                memcpy(first[i], out[i].data, out[i].size);
            } else if (memcmp(first[i], out[i].data, out[i].size) != 0) {
                fail_msg("%s [%s], output %s: the second run differs from the first", what, dn,
                         out[i].name);
            }
        }
    }
    kf_check_result *res = calloc(n_out, sizeof *res);
    assert_int_equal(kf_graph_check(g, in, n_in, out, n_out, res), KF_OK);
    for (size_t i = 0; i < n_out; i++)
        if (!res[i].pass)
            fail_msg("%s [%s], output %s: error %g exceeds the bound %g (the reference's own "
                     "%g; KF_TEST_SEED=%llu)",
                     what, dn, out[i].name, res[i].err, res[i].bound, res[i].ref_err,
                     (unsigned long long)kf_test_seed());
    free(res);
    for (size_t i = 0; i < n_in; i++)
        free(in[i].data);
    for (size_t i = 0; i < n_out; i++) {
        free(out[i].data);
        free(first[i]);
    }
    free(first);
    free(in);
    free(out);
    free(bound);
    kf_cuda_exec_destroy(ex);
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
}

static void flags_case_full(kf_ctx *ctx, const char *fmt, kf_dtype d, uint64_t stream,
                            const char *what, uint64_t flags, recipes_check check, const char *want,
                            bool twice) {
    sms_case_full(ctx, fmt, d, stream, what, flags, check, want, twice, 0);
}

static void flag_case(kf_ctx *ctx, const char *fmt, kf_dtype d, uint64_t stream, const char *what,
                      uint64_t flags, const char *want, bool twice) {
    flags_case_full(ctx, fmt, d, stream, what, KF_CUDA_RECIPE_GEMM_GENERATED | flags, NULL, want,
                    twice);
}

static void flags_case(kf_ctx *ctx, const char *fmt, kf_dtype d, uint64_t stream,
                       const char *what, unsigned flags, recipes_check check) {
    flags_case_full(ctx, fmt, d, stream, what, flags, check, NULL, false);
}

static void cluster_case(kf_ctx *ctx, const char *fmt, kf_dtype d, uint64_t stream,
                         const char *what) {
    flag_case(ctx, fmt, d, stream, what, KF_CUDA_RECIPE_GEMM_CLUSTER2, "2-CTA clusters", false);
}

/* GEMM sibling sets (the default; KF_CUDA_RECIPE_GEMM_NO_SIBLINGS, internal,
 * runs each member alone): the set's first member's recipe runs every
 * member, the others have no step. */
static void sib_check(const kf_plan *plan, const kf_cuda_recipes *r, const char *what,
                      const char *dn) {
    uint32_t sets = 0;
    for (uint32_t gi = 0; gi < r->n; gi++) {
        const kf_group *g = &plan->groups[gi];
        if (!kf_group_in_gemm_sib_set(g))
            continue;
        const kf_cuda_recipe *rc = &r->recipes[gi];
        if (g->gemm.sib_index == 0) {
            if (rc->n_members != g->gemm.sib_count || !strstr(rc->variants[0].how, "GEMM siblings"))
                fail_msg("%s [%s]: group %u does not run its set: %s", what, dn, gi,
                         rc->variants[0].how);
            sets++;
        } else if (rc->n_steps != 0) {
            fail_msg("%s [%s]: group %u, a later member, has steps of its own", what, dn, gi);
        }
    }
    assert_true(sets >= 1);
}

/* Q, K and V behind one RMSNorm (or LayerNorm), each with its own epilogue:
 * on the generated side (the statistics once, each member's fold pre-pass and
 * GEMM, or A from the prologue's scratch where 2 N >= M) and on cuBLASLt's (A
 * normalized once). Ragged M, N and K against the tiles: each member runs its
 * own GEMM, so no member needs N a multiple of the tile. */
static void test_gemm_sibling_sets_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    char err[KF_MSG_MAX] = "";
    kf_cuda_exec *ex0 = NULL;
    kf_cuda_target t0;
    assert_int_equal(kf_cuda_exec_open(G.ctx, &ex0, &t0, err), KF_OK);
    bool sm90 = strcmp(t0.arch, "sm_90a") == 0;
    kf_cuda_exec_destroy(ex0);
    static const char *const cases[][2] = {
        {"kfg 1\nx = input(%s[2, 256, 128])\ng = input(%s[128])\nwq = input(%s[128, 128])\n"
         "bq = input(%s[128])\nwk = input(%s[128, 64])\nwv = input(%s[128, 64])\n"
         "n = rms_norm(x, g, eps=1e-6)\nq0 = matmul(n, wq)\nq = add(q0, bq)\n"
         "k0 = matmul(n, wk)\nk = silu(k0)\nv = matmul(n, wv)\noutput q\noutput k\noutput v\n",
         "q+bias, silu(k), v: every member folds"},
        {"kfg 1\nx = input(%s[300, 136])\ng = input(%s[136])\nwq = input(%s[136, 392])\n"
         "r = input(%s[300, 392])\nwk = input(%s[136, 72])\nwv = input(%s[136, 120])\n"
         "n = rms_norm(x, g, eps=1e-5)\nq0 = matmul(n, wq)\nq = add(q0, r)\n"
         "k0 = matmul(n, wk)\nk = gelu_tanh(k0)\nv = matmul(n, wv)\n"
         "output q\noutput k\noutput v\n",
         "ragged: q from the prologue's scratch + residual, k and v fold"},
        {"kfg 1\nx = input(%s[4, 100, 64])\ng = input(%s[64])\nb = input(%s[64])\n"
         "wq = input(%s[64, 40])\nwk = input(%s[64, 40])\nwv = input(%s[64, 40])\n"
         "wo = input(%s[64, 24])\nn = layer_norm(x, g, b, eps=1e-5)\nq = matmul(n, wq)\n"
         "k = matmul(n, wk)\nv = matmul(n, wv)\no0 = matmul(n, wo)\no = relu(o0)\n"
         "output q\noutput k\noutput v\noutput o\n",
         "LayerNorm, four members, batch folded into M"},
    };
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16};
    for (size_t d = 0; d < N_OF(dts); d++) {
        for (size_t c = 0; c < N_OF(cases); c++) {
            if (sm90)
                flags_case(G.ctx, cases[c][0], dts[d], 2700 + c, cases[c][1],
                           KF_CUDA_RECIPE_GEMM_GENERATED, sib_check);
            flags_case(G.ctx, cases[c][0], dts[d], 2710 + c, cases[c][1], 0, sib_check);
            flags_case(G.ctx, cases[c][0], dts[d], 2720 + c, cases[c][1],
                       KF_CUDA_RECIPE_GEMM_MEASURED, sib_check);
        }
    }
    if (!sm90)
        fprintf(stderr, "GEMM siblings: %s is not sm_90a: the generated side was not run\n",
                t0.arch);
}

/* A sibling set as ONE sm_90a kernel over its members' concatenated columns
 * (KF_CUDA_RECIPE_GEMM_SIB_ONE, internal): the set's recipe has one GEMM
 * step, a "sib<n>_" kernel, and says so. */
static void sib_one_check(const kf_plan *plan, const kf_cuda_recipes *r, const char *what,
                          const char *dn) {
    sib_check(plan, r, what, dn);
    uint32_t ones = 0;
    for (uint32_t gi = 0; gi < r->n; gi++) {
        const kf_cuda_recipe *rc = &r->recipes[gi];
        if (rc->n_members < 2)
            continue;
        if (!strstr(rc->variants[0].how, "one GEMM over their concatenated columns"))
            fail_msg("%s [%s]: group %u's set is not one GEMM: %s", what, dn, gi,
                     rc->variants[0].how);
        uint32_t gemms = 0;
        for (uint32_t i = 0; i < rc->variants[0].n_steps; i++) {
            const kf_cuda_step *st = &rc->steps[rc->variants[0].first_step + i];
            if (st->kind == KF_CUDA_STEP_KERNEL && st->kernel->role == KF_CUDA_ROLE_GEMM) {
                gemms++;
                assert_int_equal(strncmp(st->kernel->kernel.name, "sib", 3), 0);
            }
        }
        assert_int_equal(gemms, 1);
        ones++;
    }
    assert_true(ones >= 1);
}

static const char *const sib_one_cases[][2] = {
    {"kfg 1\nx = input(%s[700, 200])\ng = input(%s[200])\nwq = input(%s[200, 264])\n"
     "bq = input(%s[264])\nwk = input(%s[200, 72])\nwv = input(%s[200, 136])\n"
     "n = rms_norm(x, g, eps=1e-6)\nq0 = matmul(n, wq)\nq = add(q0, bq)\nk = matmul(n, wk)\n"
     "v0 = matmul(n, wv)\nv = gelu(v0)\noutput q\noutput k\noutput v\n",
     "GQA-like ragged q+bias 264 / k 72 / gelu(v) 136 (bf16: a later member's gelu table), "
     "RMSNorm, cooperative 128"},
    {"kfg 1\nx = input(%s[2, 300, 136])\ng = input(%s[136])\nb = input(%s[136])\n"
     "wq = input(%s[136, 128])\nbq = input(%s[128])\nwk = input(%s[136, 64])\n"
     "wv = input(%s[136, 64])\nn = layer_norm(x, g, b, eps=1e-5)\nq0 = matmul(n, wq)\n"
     "q = add(q0, bq)\nk0 = matmul(n, wk)\nk = gelu_tanh(k0)\nv = matmul(n, wv)\n"
     "output q\noutput k\noutput v\n",
     "LayerNorm (column terms per member), batch folded into M"},
    {"kfg 1\nx = input(%s[4224, 72])\ng = input(%s[72])\nwq = input(%s[72, 600])\n"
     "r = input(%s[4224, 600])\nwk = input(%s[72, 520])\nwv = input(%s[72, 552])\n"
     "n = rms_norm(x, g, eps=1e-5)\nq0 = matmul(n, wq)\nq = add(q0, r)\nk = matmul(n, wk)\n"
     "v = matmul(n, wv)\noutput q\noutput k\noutput v\n",
     "ping-pong 128 tiles, q + residual, ragged K"},
    {"kfg 1\nx = input(%s[4, 100, 64])\ng = input(%s[64])\nb = input(%s[64])\n"
     "wq = input(%s[64, 40])\nwk = input(%s[64, 40])\nwv = input(%s[64, 40])\n"
     "wo = input(%s[64, 24])\nn = layer_norm(x, g, b, eps=1e-5)\nq = matmul(n, wq)\n"
     "k = matmul(n, wk)\nv = matmul(n, wv)\no0 = matmul(n, wo)\no = relu(o0)\n"
     "output q\noutput k\noutput v\noutput o\n",
     "LayerNorm, four members (nine tensor maps)"},
};

/* Whether the device is sm_90a (else the one kernel has nothing to run on). */
static bool sib_one_device(void) {
    char err[KF_MSG_MAX] = "";
    kf_cuda_exec *ex = NULL;
    kf_cuda_target t;
    assert_int_equal(kf_cuda_exec_open(G.ctx, &ex, &t, err), KF_OK);
    bool sm90 = strcmp(t.arch, "sm_90a") == 0;
    kf_cuda_exec_destroy(ex);
    if (!sm90)
        fprintf(stderr, "GEMM sibling set as one kernel: %s is not sm_90a: skipped\n", t.arch);
    return sm90;
}

/* One small set alone (the sanitizers run it). */
static void test_a_gemm_sibling_set_as_one_kernel_matches(void **state) {
    (void)state;
    REQUIRE_GPU();
    if (!sib_one_device())
        skip();
    flags_case(G.ctx, sib_one_cases[0][0], KF_DTYPE_BF16, 2750, sib_one_cases[0][1],
               KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_ONE, sib_one_check);
}

/* Ragged members with their own epilogues, RMSNorm and LayerNorm, cooperative
 * and ping-pong tiles, four members; bf16 and f16; generated and measured
 * (the one kernel against cuBLASLt's members). A set the one kernel does not
 * take (q from the prologue's scratch, k and v folded) runs its members
 * apart and still matches. */
static void test_gemm_sibling_sets_as_one_kernel_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    if (!sib_one_device())
        skip();
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16};
    for (size_t d = 0; d < N_OF(dts); d++) {
        for (size_t c = 0; c < N_OF(sib_one_cases); c++)
            flags_case(G.ctx, sib_one_cases[c][0], dts[d], 2760 + c, sib_one_cases[c][1],
                       KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_ONE, sib_one_check);
        flags_case(G.ctx, sib_one_cases[0][0], dts[d], 2770, sib_one_cases[0][1],
                   KF_CUDA_RECIPE_GEMM_MEASURED | KF_CUDA_RECIPE_GEMM_SIB_ONE, sib_one_check);
        flags_case(G.ctx,
                   "kfg 1\nx = input(%s[300, 136])\ng = input(%s[136])\nwq = input(%s[136, 392])\n"
                   "r = input(%s[300, 392])\nwk = input(%s[136, 72])\nwv = input(%s[136, 120])\n"
                   "n = rms_norm(x, g, eps=1e-5)\nq0 = matmul(n, wq)\nq = add(q0, r)\n"
                   "k0 = matmul(n, wk)\nk = gelu_tanh(k0)\nv = matmul(n, wv)\n"
                   "output q\noutput k\noutput v\n",
                   dts[d], 2780, "the norm in two forms: members apart",
                   KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_ONE, sib_check);
    }
}

/* The same in 2-CTA clusters (KF_CUDA_RECIPE_GEMM_CLUSTER2, internal): the
 * set's one GEMM step launches 2 x 1 x 1 clusters on an even grid, pairs of
 * tile rows of one member's column sharing its B by multicast. */
static void sib_one_cluster_check(const kf_plan *plan, const kf_cuda_recipes *r, const char *what,
                                  const char *dn) {
    sib_one_check(plan, r, what, dn);
    for (uint32_t gi = 0; gi < r->n; gi++) {
        const kf_cuda_recipe *rc = &r->recipes[gi];
        if (rc->n_members < 2)
            continue;
        if (!strstr(rc->variants[0].how, "2-CTA clusters"))
            fail_msg("%s [%s]: group %u's set is not in clusters: %s", what, dn, gi,
                     rc->variants[0].how);
        const kf_cuda_kstep *ks = gemm_kstep(rc);
        assert_int_equal(ks->cluster[0], 2);
        assert_int_equal(ks->grid[0] % 2, 0);
    }
}

/* One small set in clusters alone (the sanitizers run it): 600 rows, five
 * tile rows, so the last pair's missing half. */
static void test_a_gemm_sibling_set_as_one_kernel_in_clusters_matches(void **state) {
    (void)state;
    REQUIRE_GPU();
    if (!sib_one_device())
        skip();
    flags_case_full(G.ctx, sib_one_cases[1][0], KF_DTYPE_BF16, 2795, sib_one_cases[1][1],
                    KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_ONE |
                        KF_CUDA_RECIPE_GEMM_CLUSTER2,
                    sib_one_cluster_check, NULL, false);
}

/* The set's one kernel in the square raster (RASTER_SQ, internal: 16 tile
 * rows at a time on 132 SMs). */
static void sib_one_sq_check(const kf_plan *plan, const kf_cuda_recipes *r, const char *what,
                             const char *dn) {
    sib_one_check(plan, r, what, dn);
    for (uint32_t gi = 0; gi < r->n; gi++) {
        const kf_cuda_recipe *rc = &r->recipes[gi];
        if (rc->n_members >= 2 && !strstr(rc->variants[0].how, "raster 16 tile rows"))
            fail_msg("%s [%s]: group %u's set is not in the square raster: %s", what, dn, gi,
                     rc->variants[0].how);
    }
}

/* Every one-kernel set case in clusters (cooperative and ping-pong tiles,
 * odd and even tile rows, four members), bf16 and f16; two of them in the
 * square raster, with one CTA and in clusters (bf16). */
static void test_gemm_sibling_sets_as_one_kernel_in_clusters_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    if (!sib_one_device())
        skip();
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16};
    for (size_t d = 0; d < N_OF(dts); d++)
        for (size_t c = 0; c < N_OF(sib_one_cases); c++)
            flags_case_full(G.ctx, sib_one_cases[c][0], dts[d], 2810 + c, sib_one_cases[c][1],
                            KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_ONE |
                                KF_CUDA_RECIPE_GEMM_CLUSTER2,
                            sib_one_cluster_check, NULL, false);
    for (size_t c = 0; c < 3; c += 2)
        for (int cl = 0; cl < 2; cl++)
            flags_case_full(G.ctx, sib_one_cases[c][0], KF_DTYPE_BF16, 2820 + c + (size_t)cl,
                            sib_one_cases[c][1],
                            KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_ONE |
                                KF_CUDA_RECIPE_GEMM_RASTER_SQ |
                                (cl ? KF_CUDA_RECIPE_GEMM_CLUSTER2 : UINT64_C(0)),
                            cl ? sib_one_cluster_check : sib_one_sq_check, NULL, false);
}

/* A folded norm's pre-passes in ONE launch (the default; internal
 * PREPASS_APART keeps them apart): every GEMM recipe that folds its norm
 * into B has one pre-pass step, a "pre_" kernel (the row statistics and each
 * B's fold) before its GEMM steps, and says so. */
static void prepass_one_check(const kf_plan *plan, const kf_cuda_recipes *r, const char *what,
                              const char *dn) {
    uint32_t folded = 0;
    for (uint32_t gi = 0; gi < r->n; gi++) {
        const kf_cuda_recipe *rc = &r->recipes[gi];
        if (plan->groups[gi].kind != KF_GROUP_GEMM || rc->n_variants == 0 ||
            !strstr(rc->variants[0].how, "norm prologue folded into B"))
            continue;
        if (!strstr(rc->variants[0].how, "folded into B (one pre-pass"))
            fail_msg("%s [%s]: group %u's pre-passes are apart: %s", what, dn, gi,
                     rc->variants[0].how);
        uint32_t pre = 0, gemm = 0;
        for (uint32_t i = 0; i < rc->variants[0].n_steps; i++) {
            const kf_cuda_step *st = &rc->steps[rc->variants[0].first_step + i];
            if (st->kind != KF_CUDA_STEP_KERNEL)
                continue;
            if (st->kernel->role == KF_CUDA_ROLE_GEMM_PROLOGUE) {
                assert_int_equal(gemm, 0); /* before every GEMM */
                assert_int_equal(strncmp(st->kernel->kernel.name, "pre_", 4), 0);
                pre++;
            } else if (st->kernel->role == KF_CUDA_ROLE_GEMM) {
                gemm++;
            }
        }
        assert_int_equal(pre, 1);
        assert_true(gemm >= 1);
        folded++;
    }
    assert_true(folded >= 1);
}

/* prepass_one_check, and the recipe says where the fold's bias goes: in the
 * fold's column terms (the default where a LayerNorm's product is read by
 * its bias add alone), or in the epilogue (FOLD_BIAS_EPI). */
static void fold_bias_in(const kf_plan *plan, const kf_cuda_recipes *r, const char *what,
                         const char *dn, bool want) {
    prepass_one_check(plan, r, what, dn);
    bool any = false;
    for (uint32_t gi = 0; gi < r->n; gi++)
        if (r->recipes[gi].n_variants > 0 &&
            strstr(r->recipes[gi].variants[0].how, "the bias in the fold's column terms"))
            any = true;
    if (any != want)
        fail_msg("%s [%s]: the bias %s the fold's column terms", what, dn, any ? "in" : "not in");
}
static void fold_bias_check(const kf_plan *plan, const kf_cuda_recipes *r, const char *what,
                            const char *dn) {
    fold_bias_in(plan, r, what, dn, true);
}
static void fold_bias_epi_check(const kf_plan *plan, const kf_cuda_recipes *r, const char *what,
                                const char *dn) {
    fold_bias_in(plan, r, what, dn, false);
}

static const char *const prepass_cases[][2] = {
    {"kfg 1\nx = input(%s[1000, 264])\ng = input(%s[264])\nw = input(%s[264, 392])\n"
     "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
     "RMSNorm, ragged M, N, K"},
    {"kfg 1\nx = input(%s[2, 300, 200])\ng = input(%s[200])\nc = input(%s[200])\n"
     "w = input(%s[200, 136])\nb = input(%s[136])\nn = layer_norm(x, g, c)\n"
     "y = matmul(n, w)\nz = add(y, b)\noutput z\n",
     "LayerNorm, batch folded into M, bias"},
    {"kfg 1\nx = input(%s[2100, 200])\ng = input(%s[200])\nc = input(%s[200])\n"
     "w = input(%s[1001, 200])\nn = layer_norm(x, g, c)\n"
     "y = matmul(n, w, transpose_b=true)\noutput y\n",
     "LayerNorm, K-major B, N = 1001"},
    {"kfg 1\nx = input(%s[3000, 200])\ng = input(%s[200])\nc = input(%s[200])\n"
     "wg = input(%s[200, 392])\nwu = input(%s[200, 392])\nn = layer_norm(x, g, c)\n"
     "gt = matmul(n, wg)\nu = matmul(n, wu)\na = silu(gt)\ny = mul(a, u)\noutput y\n",
     "LayerNorm, SwiGLU dual (two folds)"},
    {"kfg 1\nx = input(%s[4224, 1000])\ng = input(%s[1000])\nc = input(%s[1000])\n"
     "w = input(%s[1000, 520])\nb = input(%s[520])\nn = layer_norm(x, g, c)\n"
     "y = matmul(n, w)\nz = add(y, b)\nh = gelu_tanh(z)\noutput h\n",
     "LayerNorm + bias + gelu_tanh, ping-pong, K = 1000"},
    {"kfg 1\nx = input(%s[3000, 1304])\ng = input(%s[1304])\nc = input(%s[1304])\n"
     "w = input(%s[1304, 264])\nb = input(%s[264])\nn = layer_norm(x, g, c)\n"
     "y = matmul(n, w)\nz = add(y, b)\noutput z\n",
     "LayerNorm, K = 1304 (the statistics' loads in two batches, the second partial)"},
    {"kfg 1\nx = input(%s[1000, 264])\ng = input(%s[264])\nw = input(%s[392, 264])\n"
     "n = rms_norm(x, g)\ny = matmul(n, w, transpose_b=true)\noutput y\n",
     "RMSNorm, K-major B (the fold's flat items, 8 k a load)"},
};

/* One small case alone (the sanitizers run it). */
static void test_a_gemm_prepass_in_one_launch_matches(void **state) {
    (void)state;
    REQUIRE_GPU();
    if (!sib_one_device())
        skip();
    flags_case_full(G.ctx, prepass_cases[1][0], KF_DTYPE_BF16, 2790, prepass_cases[1][1],
                    KF_CUDA_RECIPE_GEMM_GENERATED, prepass_one_check, NULL, false);
    flags_case_full(G.ctx, sib_one_cases[1][0], KF_DTYPE_BF16, 2791, sib_one_cases[1][1],
                    KF_CUDA_RECIPE_GEMM_GENERATED, prepass_one_check, NULL, false);
    flags_case_full(G.ctx, prepass_cases[5][0], KF_DTYPE_BF16, 2789, prepass_cases[5][1],
                    KF_CUDA_RECIPE_GEMM_GENERATED, prepass_one_check, NULL, true);
    /* FC1's form (LayerNorm, bias, gelu_tanh, ping-pong): the bias in the
     * fold's column terms (the default), and in the epilogue (FOLD_BIAS_EPI) */
    flags_case_full(G.ctx, prepass_cases[4][0], KF_DTYPE_BF16, 2788, prepass_cases[4][1],
                    KF_CUDA_RECIPE_GEMM_GENERATED, fold_bias_check, NULL, false);
    flags_case_full(G.ctx, prepass_cases[4][0], KF_DTYPE_BF16, 2787,
                    "LayerNorm + bias + gelu_tanh, the bias in the epilogue (FOLD_BIAS_EPI)",
                    KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_FOLD_BIAS_EPI,
                    fold_bias_epi_check, NULL, false);
}

/* RMSNorm and LayerNorm folds, ragged M, N and K, N- and K-major B, a
 * SwiGLU pair, ping-pong at K = 1000 (bf16 and f16, each run twice: the
 * second run reads the first's scratch); sibling sets as one GEMM and apart,
 * four members (bf16); the measured choice against cuBLASLt. */
static void test_gemm_prepass_in_one_launch_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    if (!sib_one_device())
        skip();
    const uint64_t one = 0; /* the default: the pre-passes in one launch */
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16};
    for (size_t d = 0; d < N_OF(dts); d++)
        for (size_t c = 0; c < N_OF(prepass_cases); c++)
            flags_case_full(G.ctx, prepass_cases[c][0], dts[d], 2792 + 10 * d + c,
                            prepass_cases[c][1], KF_CUDA_RECIPE_GEMM_GENERATED | one,
                            prepass_one_check, NULL, true);
    for (size_t c = 0; c < N_OF(sib_one_cases); c++) {
        flags_case_full(G.ctx, sib_one_cases[c][0], KF_DTYPE_BF16, 2812 + c, sib_one_cases[c][1],
                        KF_CUDA_RECIPE_GEMM_GENERATED | one, prepass_one_check, NULL, false);
        flags_case_full(G.ctx, sib_one_cases[c][0], KF_DTYPE_BF16, 2816 + c, sib_one_cases[c][1],
                        KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_APART | one,
                        prepass_one_check, NULL, false);
    }
    flags_case_full(G.ctx, prepass_cases[4][0], KF_DTYPE_BF16, 2820, prepass_cases[4][1],
                    KF_CUDA_RECIPE_GEMM_MEASURED | one, NULL, NULL, false);
}

/* A sibling set as ONE sm_80 kernel (mma.sync; on an H100 forced with
 * KF_CUDA_RECIPE_GEMM_SM80, as --gemm sm80; KF_CUDA_RECIPE_GEMM_SIB_ONE while
 * it is not sm_80's default): the set's one GEMM step is a "sib<n>_mma_"
 * kernel. */
static void sib80_check(const kf_plan *plan, const kf_cuda_recipes *r, const char *what,
                        const char *dn) {
    sib_one_check(plan, r, what, dn);
    for (uint32_t gi = 0; gi < r->n; gi++) {
        const kf_cuda_recipe *rc = &r->recipes[gi];
        if (rc->n_members < 2)
            continue;
        const kf_cuda_kstep *ks = gemm_kstep(rc);
        if (ks->kernel.tmpl != KF_CUDA_TEMPLATE_GEMM_SM80 || !strstr(ks->kernel.name, "_mma_"))
            fail_msg("%s [%s]: group %u's set is not the mma.sync kernel: %s", what, dn, gi,
                     ks->kernel.name);
    }
}

/* Q/K/V with ragged, different N (4096 / 1024 / 1024: 32 + 8 + 8 tile
 * columns of 128; 2000 rows, 16 tile rows, so 128 x 128 tiles) and
 * different epilogues behind an RMSNorm or a LayerNorm (A from the
 * prologue's scratch: 2 N >= M), ragged M and K (small: the reference
 * evaluates them on the CPU). */
static const char *const sib80_cases[][2] = {
    {"kfg 1\nx = input(%s[2000, 40])\ng = input(%s[40])\nwq = input(%s[40, 4096])\n"
     "bq = input(%s[4096])\nwk = input(%s[40, 1024])\nwv = input(%s[40, 1024])\n"
     "n = rms_norm(x, g, eps=1e-6)\nq0 = matmul(n, wq)\nq = add(q0, bq)\nk0 = matmul(n, wk)\n"
     "k = silu(k0)\nv = matmul(n, wv)\noutput q\noutput k\noutput v\n",
     "sm80 set: RMSNorm, q+bias 4096 / silu(k) 1024 / v 1024, 128 x 128 tiles"},
    /* 64 x 64 tiles (the set's 2 x 48 tiles of 128 leave SMs idle) */
    {"kfg 1\nx = input(%s[130, 24])\ng = input(%s[24])\nb = input(%s[24])\n"
     "wq = input(%s[24, 4096])\nwk = input(%s[24, 1024])\nwv = input(%s[24, 1024])\n"
     "r = input(%s[130, 1024])\nn = layer_norm(x, g, b, eps=1e-5)\nq0 = matmul(n, wq)\n"
     "q = gelu_tanh(q0)\nk = matmul(n, wk)\nv0 = matmul(n, wv)\nv = add(v0, r)\n"
     "output q\noutput k\noutput v\n",
     "sm80 set: LayerNorm, gelu_tanh(q) 4096 / k 1024 / v+residual 1024"},
};

/* One small set alone (the sanitizers run it): sm_80's one kernel. */
static void test_a_gemm_sibling_set_as_one_sm80_kernel_matches(void **state) {
    (void)state;
    REQUIRE_GPU();
    flags_case(G.ctx, sib_one_cases[0][0], KF_DTYPE_BF16, 2790, sib_one_cases[0][1],
               KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SM80 |
                   KF_CUDA_RECIPE_GEMM_SIB_ONE,
               sib80_check);
}

/* The sm_80 set (asked for: KF_CUDA_RECIPE_GEMM_SIB_ONE): the sm_90a set's cases (ragged
 * members, their own epilogues, folded RMSNorm and LayerNorm, four members)
 * and the 4096 / 1024 / 1024 ones; bf16 and f16; generated and measured. */
static void test_gemm_sibling_sets_as_one_sm80_kernel_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16};
    for (size_t d = 0; d < N_OF(dts); d++) {
        for (size_t c = 0; c < N_OF(sib_one_cases); c++)
            flags_case(G.ctx, sib_one_cases[c][0], dts[d], 2791 + c, sib_one_cases[c][1],
                       KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SM80 |
                           KF_CUDA_RECIPE_GEMM_SIB_ONE,
                       sib80_check);
        for (size_t c = 0; c < N_OF(sib80_cases); c++)
            flags_case(G.ctx, sib80_cases[c][0], dts[d], 2796 + c, sib80_cases[c][1],
                       KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SM80 |
                           KF_CUDA_RECIPE_GEMM_SIB_ONE,
                       sib80_check);
        flags_case(G.ctx, sib80_cases[0][0], dts[d], 2798, sib80_cases[0][1],
                   KF_CUDA_RECIPE_GEMM_MEASURED | KF_CUDA_RECIPE_GEMM_SM80 |
                       KF_CUDA_RECIPE_GEMM_SIB_ONE,
                   sib_check);
    }
}

/* A context forcing the generated GEMM on an sm_90 device; skips elsewhere. */
static kf_ctx *cluster_ctx(void) {
    kf_ctx *ctx = ctx_gemm(KF_GEMM_GENERATED);
    char err[KF_MSG_MAX] = "";
    kf_cuda_exec *ex = NULL;
    kf_cuda_target t;
    assert_int_equal(kf_cuda_exec_open(ctx, &ex, &t, err), KF_OK);
    int sm = atoi(t.arch + 3);
    kf_cuda_exec_destroy(ex);
    if (sm < 90) {
        kf_ctx_destroy(ctx);
        fprintf(stderr, "2-CTA cluster GEMMs: sm_%d is not sm_90a: skipped\n", sm);
        skip();
    }
    return ctx;
}

/* One small case alone (the sanitizers run it): 3 tile rows, a pair's
 * missing half, a residual. */
static void test_a_2cta_cluster_gemm_with_a_missing_half_matches(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    cluster_case(ctx,
                 "kfg 1\nx = input(%s[300, 136])\nw = input(%s[264, 136])\n"
                 "r = input(%s[300, 264])\nh = matmul(x, w, transpose_b=true)\n"
                 "y = add(h, r)\noutput y\n",
                 KF_DTYPE_BF16, 2610, "3 tile rows, K-major B, residual");
    /* ping-pong tiles in clusters (153 tiles of 128 x 128, K <= 1024 with
     * the TMA-store epilogue): 17 tile rows, a pair's missing half */
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 72])\nw = input(%s[72, 1096])\nb = input(%s[1096])\n"
              "h = matmul(x, w)\ny = add(h, b)\noutput y\n",
              KF_DTYPE_BF16, 2611, "ping-pong pairs, 17 tile rows, bias",
              KF_CUDA_RECIPE_GEMM_CLUSTER2, "ping-pong in 2-CTA clusters", false);
    kf_ctx_destroy(ctx);
}

/* The internal schedules the bench compares: ping-pong's turn passed once a
 * consumer's main loop is issued (PP_EARLY; ragged, a LayerNorm folded into
 * B, 153 tiles of 128 x 128), and the TMA-store epilogue two chunks ahead
 * (EPI_AHEAD) with a residual, on ping-pong and on cooperative tiles. */
static void test_the_internal_gemm_schedules_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 264])\ng = input(%s[264])\nc = input(%s[264])\n"
              "w = input(%s[264, 1096])\nb = input(%s[1096])\n"
              "n = layer_norm(x, g, c, eps=1e-5)\nh = matmul(n, w)\na = add(h, b)\n"
              "y = gelu_tanh(a)\noutput y\n",
              KF_DTYPE_BF16, 2612, "early turn, LayerNorm folded, ragged",
              KF_CUDA_RECIPE_GEMM_PP_EARLY, "ping-pong", false);
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 264])\nw = input(%s[264, 1096])\nb = input(%s[1096])\n"
              "r = input(%s[2100, 1096])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\n"
              "output y\n",
              KF_DTYPE_F16, 2613, "epilogue ahead, ping-pong, bias + residual, ragged",
              KF_CUDA_RECIPE_GEMM_EPI_AHEAD, "ping-pong", false);
    flag_case(ctx,
              "kfg 1\nx = input(%s[1100, 1104])\nw = input(%s[1104, 1000])\n"
              "r = input(%s[1100, 1000])\nh = matmul(x, w)\ny = add(h, r)\noutput y\n",
              KF_DTYPE_BF16, 2614, "epilogue ahead, residual, cooperative",
              KF_CUDA_RECIPE_GEMM_EPI_AHEAD, "epilogue stored by TMA", false);
    kf_ctx_destroy(ctx);
}

/* Whether every GEMM group's kernel stores a SwiGLU pair's outputs from
 * packed pairs (gemm_sm90.cuh KF_EPI_PK), as the case expects. */
static void pk_check(const kf_plan *plan, const kf_cuda_recipes *r, const char *what,
                     const char *dn, bool want) {
    uint32_t n = 0;
    for (uint32_t gi = 0; gi < r->n; gi++) {
        const kf_cuda_recipe *rc = &r->recipes[gi];
        if (plan->groups[gi].kind != KF_GROUP_GEMM || rc->n_steps == 0)
            continue;
        const char *src = rc->steps[rc->n_steps - 1].kernel->kernel.source;
        if ((strstr(src, "#define KF_EPI_PK 1") != NULL) != want)
            fail_msg("%s [%s]: group %u %s the packed pair epilogue", what, dn, gi,
                     want ? "lacks" : "has");
        n++;
    }
    assert_true(n >= 1);
}
static void pk_on(const kf_plan *plan, const kf_cuda_recipes *r, const char *what, const char *dn) {
    pk_check(plan, r, what, dn, true);
}
static void pk_off(const kf_plan *plan, const kf_cuda_recipes *r, const char *what,
                   const char *dn) {
    pk_check(plan, r, what, dn, false);
}

/* A SwiGLU pair's register epilogue on packed pairs (kf_epi on the fragment,
 * the transposes on the packed words, no column test where the tiles cover
 * N, silu by ex2 and rcp), which a pair takes in 2-CTA clusters: by default
 * on cooperative 128 x (2 x 128) tiles (tiles that cover N; N ragged with
 * K-major B), by CLUSTER2 on ping-pong tiles and batched with a residual;
 * the form before (internal DUAL_F32T: the f32 transposes) on one CTA and in
 * clusters; M = 1 (one CTA) keeps the f32 transposes. */
static void test_swiglu_pairs_on_packed_pairs_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    const char *pair = "g = matmul(x, wg)\nu = matmul(x, wu)\na = silu(g)\ny = mul(a, u)\n"
                       "output y\n";
    const uint64_t gen = KF_CUDA_RECIPE_GEMM_GENERATED;
    const uint64_t c2 = gen | KF_CUDA_RECIPE_GEMM_CLUSTER2;
    const uint64_t f32t = gen | KF_CUDA_RECIPE_GEMM_DUAL_F32T;
    const char *coop_c2 = "dual 128x(2x128) tiles cooperative in 2-CTA clusters";
    char t[1024];
    snprintf(t, sizeof t,
             "kfg 1\nx = input(%%s[2200, 200])\nwg = input(%%s[200, 2048])\n"
             "wu = input(%%s[200, 2048])\n%s",
             pair);
    flags_case_full(ctx, t, KF_DTYPE_BF16, 2620, "pair by default, tiles cover N", gen, pk_on,
                    coop_c2, false);
    flags_case_full(ctx, t, KF_DTYPE_BF16, 2621, "pair as before, one CTA", f32t, pk_off,
                    "dual 128x(2x128) tiles cooperative, ", false);
    flags_case_full(ctx, t, KF_DTYPE_BF16, 2622, "pair as before, 2-CTA clusters",
                    f32t | KF_CUDA_RECIPE_GEMM_CLUSTER2, pk_off, coop_c2, false);
    snprintf(t, sizeof t,
             "kfg 1\nx = input(%%s[1000, 264])\nwg = input(%%s[264, 1088])\n"
             "wu = input(%%s[264, 1088])\n%s",
             pair);
    flags_case_full(ctx, t, KF_DTYPE_F16, 2623, "pair packed, ping-pong clusters, tiles cover N",
                    c2, pk_on, "dual 128x(2x64) tiles ping-pong in 2-CTA clusters", false);
    flags_case_full(ctx,
                    "kfg 1\nx = input(%s[2200, 136])\nwg = input(%s[2056, 136])\n"
                    "wu = input(%s[2056, 136])\ng = matmul(x, wg, transpose_b=true)\n"
                    "u = matmul(x, wu, transpose_b=true)\na = silu(g)\ny = mul(a, u)\n"
                    "output y\n",
                    KF_DTYPE_BF16, 2624, "pair by default, K-major B, N ragged", gen, pk_on,
                    coop_c2, false);
    flags_case_full(ctx,
                    "kfg 1\nx = input(%s[3, 300, 64])\nwg = input(%s[3, 64, 136])\n"
                    "wu = input(%s[3, 64, 136])\nr = input(%s[3, 300, 136])\n"
                    "g = matmul(x, wg)\nu = matmul(x, wu)\na = silu(g)\nh = mul(a, u)\n"
                    "y = add(h, r)\noutput y\n",
                    KF_DTYPE_F16, 2625, "pair packed in clusters, batched, residual", c2, pk_on,
                    "dual 128x(2x64) tiles cooperative in 2-CTA clusters", false);
    flags_case_full(ctx,
                    "kfg 1\nx = input(%s[1, 200])\nwg = input(%s[200, 136])\n"
                    "wu = input(%s[200, 136])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
                    "a = silu(g)\ny = mul(a, u)\noutput y\n",
                    KF_DTYPE_BF16, 2626, "pair by default, M = 1", gen, pk_off, "dual 128x(2x64)",
                    false);
    kf_ctx_destroy(ctx);
}

/* SwiGLU pairs in 2-CTA clusters, small enough for the sanitizers
 * (KF_TEST_FILTER picks this test): the bench's form, cooperative 128 x
 * (2 x 128) with 17 tile rows (a pair's missing half) and N ragged against
 * the tiles, as before (internal DUAL_F32T + CLUSTER2: the f32 transposes)
 * and by default (the packed epilogue, its column test); ping-pong 128 x
 * (2 x 64) pairs as before, f16. */
static void test_2cta_cluster_swiglu_pairs_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    const char *pair = "g = matmul(x, wg)\nu = matmul(x, wu)\na = silu(g)\ny = mul(a, u)\n"
                       "output y\n";
    const uint64_t c2f32t = KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_CLUSTER2 |
                            KF_CUDA_RECIPE_GEMM_DUAL_F32T;
    char t[1024];
    snprintf(t, sizeof t,
             "kfg 1\nx = input(%%s[2100, 200])\nwg = input(%%s[200, 2056])\n"
             "wu = input(%%s[200, 2056])\n%s",
             pair);
    flags_case_full(ctx, t, KF_DTYPE_BF16, 2627, "pair as before in clusters, cooperative, ragged",
                    c2f32t, pk_off, "dual 128x(2x128) tiles cooperative in 2-CTA clusters", false);
    flags_case_full(ctx, t, KF_DTYPE_BF16, 2628, "pair by default, cooperative, ragged",
                    KF_CUDA_RECIPE_GEMM_GENERATED, pk_on,
                    "dual 128x(2x128) tiles cooperative in 2-CTA clusters", false);
    snprintf(t, sizeof t,
             "kfg 1\nx = input(%%s[1000, 264])\nwg = input(%%s[264, 1088])\n"
             "wu = input(%%s[264, 1088])\n%s",
             pair);
    flags_case_full(ctx, t, KF_DTYPE_F16, 2629, "pair as before in clusters, ping-pong", c2f32t,
                    pk_off, "dual 128x(2x64) tiles ping-pong in 2-CTA clusters", false);
    kf_ctx_destroy(ctx);
}

/* The wgmma descriptors rebuilt each K step (DESC_REBUILD, internal: the
 * form before stepped descriptors were the default): cooperative with a
 * residual, ragged; ping-pong behind a folded LayerNorm, ragged; a SwiGLU
 * pair with both B K-major, ragged; cooperative in 2-CTA clusters. */
static void test_gemms_with_rebuilt_descriptors_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    const char *want = "wgmma descriptors rebuilt each K step";
    flag_case(ctx,
              "kfg 1\nx = input(%s[1100, 1104])\nw = input(%s[1104, 1000])\n"
              "r = input(%s[1100, 1000])\nh = matmul(x, w)\ny = add(h, r)\noutput y\n",
              KF_DTYPE_BF16, 2680, "rebuilt descriptors, residual, cooperative, ragged",
              KF_CUDA_RECIPE_GEMM_DESC_REBUILD, want, false);
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 264])\ng = input(%s[264])\nc = input(%s[264])\n"
              "w = input(%s[264, 1096])\nb = input(%s[1096])\n"
              "n = layer_norm(x, g, c, eps=1e-5)\nh = matmul(n, w)\na = add(h, b)\n"
              "y = gelu_tanh(a)\noutput y\n",
              KF_DTYPE_BF16, 2681, "rebuilt descriptors, LayerNorm folded, ping-pong, ragged",
              KF_CUDA_RECIPE_GEMM_DESC_REBUILD, want, false);
    flag_case(ctx,
              "kfg 1\nx = input(%s[1000, 200])\nwg = input(%s[1096, 200])\n"
              "wu = input(%s[1096, 200])\ng = matmul(x, wg, transpose_b=true)\n"
              "u = matmul(x, wu, transpose_b=true)\na = silu(g)\ny = mul(a, u)\noutput y\n",
              KF_DTYPE_F16, 2682, "rebuilt descriptors, SwiGLU pair, B K-major, ragged",
              KF_CUDA_RECIPE_GEMM_DESC_REBUILD, want, false);
    flag_case(ctx,
              "kfg 1\nx = input(%s[1100, 1104])\nw = input(%s[1104, 1000])\n"
              "r = input(%s[1100, 1000])\nh = matmul(x, w)\ny = add(h, r)\noutput y\n",
              KF_DTYPE_BF16, 2683, "rebuilt descriptors in 2-CTA clusters",
              KF_CUDA_RECIPE_GEMM_DESC_REBUILD | KF_CUDA_RECIPE_GEMM_CLUSTER2, want, false);
    kf_ctx_destroy(ctx);
}

/* A ping-pong consumer's first tile through a shuffle (the default), and from
 * its index as it is (PP_VARYING, internal: the form before), each run twice:
 * a LayerNorm folded into B with bias + gelu_tanh, 4200 rows (33 tile rows of
 * 9 columns: up to 3 tiles a block, a consumer's next tile starting
 * mid-ring), M, N, K ragged; an RMSNorm folded, f16; the residual by TMA,
 * ragged; B K-major, f16, ragged; a SwiGLU pair (the dual path shares the
 * counter), B K-major, f16, ragged. */
static void test_pingpong_gemms_with_a_uniform_tile_counter_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    static const struct {
        const char *fmt;
        kf_dtype d;
        const char *what;
    } cases[] = {
        {"kfg 1\nx = input(%s[4200, 1000])\ng = input(%s[1000])\nc = input(%s[1000])\n"
         "w = input(%s[1000, 1096])\nb = input(%s[1096])\nn = layer_norm(x, g, c, eps=1e-5)\n"
         "h = matmul(n, w)\nhb = add(h, b)\ny = gelu_tanh(hb)\noutput y\n",
         KF_DTYPE_BF16, "LayerNorm folded, bias + gelu_tanh, 3 tiles a block, ragged"},
        {"kfg 1\nx = input(%s[2100, 264])\ng = input(%s[264])\nw = input(%s[264, 1096])\n"
         "n = rms_norm(x, g, eps=1e-6)\ny = matmul(n, w)\noutput y\n",
         KF_DTYPE_F16, "RMSNorm folded, ragged"},
        {"kfg 1\nx = input(%s[2100, 1000])\nw = input(%s[1000, 1096])\nb = input(%s[1096])\n"
         "r = input(%s[2100, 1096])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\n"
         "output y\n",
         KF_DTYPE_BF16, "bias + residual by TMA, ragged"},
        {"kfg 1\nx = input(%s[2100, 1000])\nw = input(%s[1096, 1000])\nb = input(%s[1096])\n"
         "h = matmul(x, w, transpose_b=true)\nhb = add(h, b)\ny = gelu_tanh(hb)\noutput y\n",
         KF_DTYPE_F16, "B K-major, bias + gelu_tanh, ragged"},
        {"kfg 1\nx = input(%s[1000, 200])\nwg = input(%s[1096, 200])\n"
         "wu = input(%s[1096, 200])\ng = matmul(x, wg, transpose_b=true)\n"
         "u = matmul(x, wu, transpose_b=true)\na = silu(g)\ny = mul(a, u)\noutput y\n",
         KF_DTYPE_F16, "SwiGLU pair, B K-major, ragged"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int wide = 0; wide < 2; wide++) {
            char what[160];
            snprintf(what, sizeof what, "tile counter %s, %s", wide ? "varying" : "uniform",
                     cases[i].what);
            flag_case(ctx, cases[i].fmt, cases[i].d, 2860 + 2 * i + (uint64_t)wide, what,
                      wide ? KF_CUDA_RECIPE_GEMM_PP_VARYING : UINT64_C(0),
                      wide ? "the tile counter varying" : "ping-pong", true);
        }
    kf_ctx_destroy(ctx);
}

/* The square raster (RASTER_SQ, internal: 16 tile rows at a time on 132 SMs
 * where the default walks 8), whose groups of tile rows end short of 16:
 * cooperative 128 x 256 tiles with the TMA-store epilogue, bias + gelu_tanh +
 * residual, 17 tile rows, M, N and K ragged; ping-pong 128 x 128, bias +
 * residual, ragged; 2-CTA clusters with a pair's missing half, on ping-pong
 * tiles and on cooperative 128 x 256 tiles + residual (LLaMA's down and o
 * projections' form in clusters and the square raster, 17 tile rows: a
 * group of 16, then one of a pair's missing half). */
static void test_gemms_with_the_square_raster_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 1032])\nw = input(%s[1032, 1800])\nb = input(%s[1800])\n"
              "r = input(%s[2100, 1800])\nh = matmul(x, w)\na = add(h, b)\ng = gelu_tanh(a)\n"
              "y = add(g, r)\noutput y\n",
              KF_DTYPE_BF16, 2690,
              "square raster, cooperative, bias + gelu_tanh + residual, ragged",
              KF_CUDA_RECIPE_GEMM_RASTER_SQ, "cooperative, raster 16 tile rows", false);
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 264])\nw = input(%s[264, 1096])\nb = input(%s[1096])\n"
              "r = input(%s[2100, 1096])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\n"
              "output y\n",
              KF_DTYPE_F16, 2691, "square raster, ping-pong, bias + residual, ragged",
              KF_CUDA_RECIPE_GEMM_RASTER_SQ, "ping-pong, raster 16 tile rows", false);
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 264])\nw = input(%s[264, 1096])\nb = input(%s[1096])\n"
              "h = matmul(x, w)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
              KF_DTYPE_BF16, 2692, "square raster, 2-CTA clusters, a missing half, ragged",
              KF_CUDA_RECIPE_GEMM_RASTER_SQ | KF_CUDA_RECIPE_GEMM_CLUSTER2,
              "(B multicast), raster 16 tile rows", false);
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 1032])\nw = input(%s[1032, 1800])\n"
              "r = input(%s[2100, 1800])\nh = matmul(x, w)\ny = add(h, r)\noutput y\n",
              KF_DTYPE_BF16, 2698,
              "square raster, cooperative in 2-CTA clusters, residual, a missing half, ragged",
              KF_CUDA_RECIPE_GEMM_RASTER_SQ | KF_CUDA_RECIPE_GEMM_CLUSTER2,
              "128x256 tiles cooperative in 2-CTA clusters (B multicast), raster 16 tile rows",
              false);
    kf_ctx_destroy(ctx);
}

/* One small case alone (the sanitizers run it): the square raster on
 * cooperative 128 x 256 tiles (28 tile rows: a group of 16, then one of
 * 12), the register epilogue (N not a multiple of 8), B K-major, bias +
 * gelu_tanh, M, N and K ragged. */
static void test_a_square_raster_gemm_with_a_short_group_matches(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    flag_case(ctx,
              "kfg 1\nx = input(%s[3500, 200])\nw = input(%s[1100, 200])\nb = input(%s[1100])\n"
              "h = matmul(x, w, transpose_b=true)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
              KF_DTYPE_BF16, 2693, "square raster, a short group, register epilogue, ragged",
              KF_CUDA_RECIPE_GEMM_RASTER_SQ, "128x256 tiles cooperative, raster 16 tile rows",
              false);
    kf_ctx_destroy(ctx);
}

/* gelu_tanh by one MUFU.TANH (GELU_MUFU, internal), one small case alone (the
 * sanitizers run it): cooperative 128 x 256 tiles (SHORT_COOP keeps them at
 * K 264) with the TMA-store epilogue two chunks ahead (EPI_AHEAD), bias +
 * gelu_tanh + residual, M, N and K ragged. */
static void test_a_gelu_tanh_by_mufu_gemm_matches(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 264])\nw = input(%s[264, 1800])\nb = input(%s[1800])\n"
              "r = input(%s[2100, 1800])\nh = matmul(x, w)\na = add(h, b)\ng = gelu_tanh(a)\n"
              "y = add(g, r)\noutput y\n",
              KF_DTYPE_BF16, 2694, "gelu_tanh by MUFU.TANH, cooperative, ahead, ragged",
              KF_CUDA_RECIPE_GEMM_GELU_MUFU | KF_CUDA_RECIPE_GEMM_SHORT_COOP |
                  KF_CUDA_RECIPE_GEMM_EPI_AHEAD,
              "gelu_tanh by MUFU.TANH", false);
    kf_ctx_destroy(ctx);
}

/* gelu_tanh by one MUFU.TANH in the other epilogues: cooperative chunk by
 * chunk (bias + gelu_tanh, f16); ping-pong (bias + gelu_tanh, bf16, ragged);
 * the register epilogue (N not a multiple of 8, B K-major). */
static void test_gemms_with_gelu_tanh_by_mufu_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    const char *want = "gelu_tanh by MUFU.TANH";
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 264])\nw = input(%s[264, 1800])\nb = input(%s[1800])\n"
              "h = matmul(x, w)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
              KF_DTYPE_F16, 2695, "gelu_tanh by MUFU.TANH, cooperative, f16, ragged",
              KF_CUDA_RECIPE_GEMM_GELU_MUFU | KF_CUDA_RECIPE_GEMM_SHORT_COOP, want, false);
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 264])\nw = input(%s[264, 1096])\nb = input(%s[1096])\n"
              "h = matmul(x, w)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
              KF_DTYPE_BF16, 2696, "gelu_tanh by MUFU.TANH, ping-pong, ragged",
              KF_CUDA_RECIPE_GEMM_GELU_MUFU, want, false);
    flag_case(ctx,
              "kfg 1\nx = input(%s[3500, 200])\nw = input(%s[1100, 200])\nb = input(%s[1100])\n"
              "h = matmul(x, w, transpose_b=true)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
              KF_DTYPE_BF16, 2697, "gelu_tanh by MUFU.TANH, register epilogue, ragged",
              KF_CUDA_RECIPE_GEMM_GELU_MUFU, want, false);
    kf_ctx_destroy(ctx);
}

/* The GEMM kernel's source in recipes r: whether it stages column operands
 * (KF_EPI_CS, the TMA-store epilogue's default) as `want` says. */
static void cs_expect(const kf_plan *plan, const kf_cuda_recipes *r, const char *what,
                      const char *dn, bool want) {
    bool seen = false;
    for (uint32_t gi = 0; gi < r->n; gi++) {
        const kf_cuda_recipe *rc = &r->recipes[gi];
        if (plan->groups[gi].kind != KF_GROUP_GEMM || rc->n_variants == 0)
            continue;
        const kf_cuda_kstep *ks = gemm_kstep(rc);
        bool cs = strstr(ks->kernel.source, "kf_epi_cs_fetch(unsigned dst") != NULL;
        if (cs != want)
            fail_msg("%s [%s]: column operands %sstaged: %s", what, dn, cs ? "" : "not ",
                     rc->variants[0].how);
        seen = true;
    }
    assert_true(seen);
}
static void cs_on(const kf_plan *plan, const kf_cuda_recipes *r, const char *what,
                  const char *dn) {
    cs_expect(plan, r, what, dn, true);
}
static void cs_off(const kf_plan *plan, const kf_cuda_recipes *r, const char *what,
                   const char *dn) {
    cs_expect(plan, r, what, dn, false);
}

/* The TMA-store epilogue's column operands staged in shared memory by
 * cp.async when a tile starts (the default; internal EPI_COLS_GLOBAL: the
 * global loads of the form before), M, N and K ragged (the last column tile
 * half past N: zeros copied there, nothing stored): bias + gelu_tanh on
 * cooperative 128 x 256 tiles (SHORT_COOP; bf16, run twice: the slots are
 * refilled each tile), on 128 x 128 ones, in 2-CTA clusters and two chunks
 * ahead (EPI_AHEAD);
 * ping-pong 128 x 128 with two column operands (f16, a scale and a bias);
 * a bias with a residual (cooperative: the residual's global loads beside
 * the staged bias); and the old form on the first shape. */
static void test_gemms_with_the_bias_staged_in_shared_memory_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    /* cooperative at a short K: SHORT_COOP (internal; 700 rows: 128 x 128
     * tiles, 48 of 128 x 256 would leave most SMs idle) */
    const uint64_t gen = KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SHORT_COOP;
    const char *gelu = "kfg 1\nx = input(%s[700, 264])\nw = input(%s[264, 1800])\n"
                       "b = input(%s[1800])\nh = matmul(x, w)\na = add(h, b)\ny = gelu_tanh(a)\n"
                       "output y\n";
    /* 136 tiles of 128 x 256 (issue 13's form) */
    const char *gelu256 = "kfg 1\nx = input(%s[2100, 264])\nw = input(%s[264, 1800])\n"
                          "b = input(%s[1800])\nh = matmul(x, w)\na = add(h, b)\n"
                          "y = gelu_tanh(a)\noutput y\n";
    flags_case_full(ctx, gelu256, KF_DTYPE_BF16, 2701, "bias staged, cooperative, ragged", gen,
                    cs_on, "128x256 tiles cooperative", true);
    flags_case_full(ctx, gelu, KF_DTYPE_BF16, 2707, "bias staged, cooperative 128 x 128, ragged",
                    gen, cs_on, "128x128 tiles cooperative", false);
    flags_case_full(ctx, gelu, KF_DTYPE_F16, 2702, "bias staged, 2-CTA clusters, ragged",
                    gen | KF_CUDA_RECIPE_GEMM_CLUSTER2, cs_on, "2-CTA clusters", false);
    flags_case_full(ctx, gelu, KF_DTYPE_BF16, 2703, "bias staged, two chunks ahead, ragged",
                    gen | KF_CUDA_RECIPE_GEMM_EPI_AHEAD, cs_on, "tiles cooperative", false);
    flags_case_full(ctx,
                    "kfg 1\nx = input(%s[2100, 264])\nw = input(%s[264, 1096])\n"
                    "s = input(%s[1096])\nb = input(%s[1096])\nh = matmul(x, w)\n"
                    "m = mul(h, s)\na = add(m, b)\ny = silu(a)\noutput y\n",
                    KF_DTYPE_F16, 2704, "scale and bias staged, ping-pong, ragged",
                    KF_CUDA_RECIPE_GEMM_GENERATED, cs_on, "128x128 tiles ping-pong", true);
    flags_case_full(ctx,
                    "kfg 1\nx = input(%s[700, 264])\nw = input(%s[264, 1800])\n"
                    "b = input(%s[1800])\nr = input(%s[700, 1800])\nh = matmul(x, w)\n"
                    "a = add(h, b)\ny = add(a, r)\noutput y\n",
                    KF_DTYPE_BF16, 2705, "bias staged beside a residual, cooperative, ragged", gen,
                    cs_on, "tiles cooperative", false);
    flags_case_full(ctx, gelu256, KF_DTYPE_BF16, 2706, "bias from global memory (EPI_COLS_GLOBAL)",
                    gen | KF_CUDA_RECIPE_GEMM_EPI_COLS_GLOBAL, cs_off, "128x256 tiles cooperative",
                    false);
    kf_ctx_destroy(ctx);
}

/* The row operands prefetched into L2 when a tile starts (EPI_PF, internal):
 * a residual, ragged, on ping-pong (run twice: the same bits) and on
 * cooperative tiles (the sanitizers run it), and with the register
 * epilogue (run twice). */
static void test_gemms_with_the_residual_prefetched_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 264])\nw = input(%s[264, 1096])\nb = input(%s[1096])\n"
              "r = input(%s[2100, 1096])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\n"
              "output y\n",
              KF_DTYPE_BF16, 2615, "residual prefetched to L2, ping-pong, bias + residual, ragged",
              KF_CUDA_RECIPE_GEMM_EPI_PF, "ping-pong", true);
    flag_case(ctx,
              "kfg 1\nx = input(%s[1100, 1104])\nw = input(%s[1104, 1000])\n"
              "r = input(%s[1100, 1000])\nh = matmul(x, w)\ny = add(h, r)\noutput y\n",
              KF_DTYPE_F16, 2616, "residual prefetched to L2, cooperative",
              KF_CUDA_RECIPE_GEMM_EPI_PF, "row operands prefetched to L2", false);
    /* N a multiple of the tiles' columns (KF_EPI_NIN: no column test), M ragged */
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 264])\nw = input(%s[264, 1024])\nb = input(%s[1024])\n"
              "r = input(%s[2100, 1024])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\n"
              "output y\n",
              KF_DTYPE_BF16, 2617, "residual prefetched to L2, N covered by the tiles",
              KF_CUDA_RECIPE_GEMM_EPI_PF, "ping-pong", false);
    /* the register epilogue (EPI_REGS, internal: the split row form's
     * GEMM takes it), bias + residual, ragged */
    flag_case(ctx,
              "kfg 1\nx = input(%s[700, 1096])\nw = input(%s[1096, 1800])\nb = input(%s[1800])\n"
              "r = input(%s[700, 1800])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\n"
              "output y\n",
              KF_DTYPE_BF16, 2618, "residual prefetched to L2, register epilogue, ragged",
              KF_CUDA_RECIPE_GEMM_EPI_PF | KF_CUDA_RECIPE_GEMM_EPI_REGS,
              "row operands prefetched to L2", true);
    kf_ctx_destroy(ctx);
}

/* The residual by TMA (the default with the TMA-store epilogue on ping-pong
 * tiles; internal EPI_GLOBAL_RS keeps its global loads): the producer loads
 * a consumer's residual chunks into its store buffers under the main loop
 * and each chunk is computed in place. Ping-pong 128 x 128 with M, N and K
 * ragged (rows past M land as zeros and are not stored), a batched product
 * (the map's third coordinate), an erf gelu's bf16 table beside it (4 ring
 * stages: the table's static shared memory), cooperative 128 x 256 (internal
 * EPI_BUF4; f16, the residual on the left of a sub), each run twice (the
 * buffers' barriers go round again), and the old form on the first shape.
 * EPI_BUF4 also takes the 4 chunk buffers without a residual: a LayerNorm
 * folded into B (its column terms from L2), bias + gelu_tanh, ping-pong and
 * cooperative 128 x 256 (SHORT_COOP). */
static void test_gemms_with_the_residual_by_tma_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 1000])\nw = input(%s[1000, 1096])\nb = input(%s[1096])\n"
              "r = input(%s[2100, 1096])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\n"
              "output y\n",
              KF_DTYPE_BF16, 2640, "residual by TMA, ping-pong, ragged M, N, K", 0,
              "residual loaded by TMA", true);
    flag_case(ctx,
              "kfg 1\nx = input(%s[4, 600, 264])\nw = input(%s[4, 264, 1024])\n"
              "b = input(%s[1024])\nr = input(%s[4, 600, 1024])\nh = matmul(x, w)\n"
              "a = add(h, b)\ny = add(a, r)\noutput y\n",
              KF_DTYPE_BF16, 2641, "residual by TMA, batched", 0, "residual loaded by TMA", true);
    flag_case(ctx,
              "kfg 1\nx = input(%s[1100, 200])\nw = input(%s[200, 2056])\nb = input(%s[2056])\n"
              "r = input(%s[1100, 2056])\nh = matmul(x, w)\na = add(h, b)\ng = gelu(a)\n"
              "y = add(g, r)\noutput y\n",
              KF_DTYPE_BF16, 2646, "residual by TMA beside the gelu table", 0,
              "128x128 tiles ping-pong, 4 stages", true);
    flag_case(ctx,
              "kfg 1\nx = input(%s[4100, 2000])\nw = input(%s[2000, 1096])\n"
              "r = input(%s[4100, 1096])\nh = matmul(x, w)\ny = sub(r, h)\noutput y\n",
              KF_DTYPE_F16, 2642, "residual by TMA, cooperative 128 x 256, ragged",
              KF_CUDA_RECIPE_GEMM_EPI_BUF4, "128x256 tiles cooperative, 3 stages", true);
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 1000])\nw = input(%s[1000, 1096])\nb = input(%s[1096])\n"
              "r = input(%s[2100, 1096])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\n"
              "output y\n",
              KF_DTYPE_BF16, 2643, "residual by global loads (EPI_GLOBAL_RS)",
              KF_CUDA_RECIPE_GEMM_EPI_GLOBAL_RS,
              "6 stages, A K-major, B N-major, epilogue stored by TMA", false);
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 1000])\ng = input(%s[1000])\nc = input(%s[1000])\n"
              "w = input(%s[1000, 1096])\nb = input(%s[1096])\nn = layer_norm(x, g, c, eps=1e-5)\n"
              "h = matmul(n, w)\nhb = add(h, b)\ny = gelu_tanh(hb)\noutput y\n",
              KF_DTYPE_BF16, 2644, "4 chunk buffers (EPI_BUF4), fold, ping-pong",
              KF_CUDA_RECIPE_GEMM_EPI_BUF4, "from 4 chunk buffers", true);
    flag_case(ctx,
              "kfg 1\nx = input(%s[4100, 1000])\ng = input(%s[1000])\nc = input(%s[1000])\n"
              "w = input(%s[1000, 1096])\nb = input(%s[1096])\nn = layer_norm(x, g, c, eps=1e-5)\n"
              "h = matmul(n, w)\nhb = add(h, b)\ny = gelu_tanh(hb)\noutput y\n",
              KF_DTYPE_BF16, 2645, "4 chunk buffers (EPI_BUF4), fold, cooperative",
              KF_CUDA_RECIPE_GEMM_EPI_BUF4 | KF_CUDA_RECIPE_GEMM_SHORT_COOP,
              "128x256 tiles cooperative, 3 stages", true);
    kf_ctx_destroy(ctx);
}

/* The TMA-store epilogue's bf16 pairs (cg_raw_feed, kf_gm_pack2's bit
 * packing, kf_gm_ldv): a bf16x2 op whose operand is a rounded bf16 sum packed
 * from its unrounded values, on the left (RA), on the right (RB) and on both
 * sides, and its exact result stored as it is; N covered by the tiles (no
 * column test) and ragged, M ragged. The bias sum must still round before
 * the residual's add: the reference decides. */
static void test_tma_store_epilogue_bf16_pairs_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 264])\nw = input(%s[264, 1024])\nb = input(%s[1024])\n"
              "r = input(%s[2100, 1024])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\n"
              "output y\n",
              KF_DTYPE_BF16, 2630, "bf16 pairs: (h + b) + r, N covered", 0,
              "epilogue stored by TMA", true);
    flag_case(ctx,
              "kfg 1\nx = input(%s[2100, 264])\nw = input(%s[264, 1096])\nb = input(%s[1096])\n"
              "r = input(%s[2100, 1096])\nh = matmul(x, w)\na = add(h, b)\ny = sub(r, a)\n"
              "output y\n",
              KF_DTYPE_BF16, 2631, "bf16 pairs: r - (h + b), ragged", 0, "epilogue stored by TMA",
              false);
    flag_case(ctx,
              "kfg 1\nx = input(%s[1100, 1104])\nw = input(%s[1104, 1024])\nb = input(%s[1024])\n"
              "r = input(%s[1100, 1024])\nh = matmul(x, w)\na = add(h, b)\nc = add(h, r)\n"
              "y = mul(a, c)\noutput y\n",
              KF_DTYPE_BF16, 2632, "bf16 pairs: (h + b) (h + r), cooperative", 0,
              "epilogue stored by TMA", false);
    kf_ctx_destroy(ctx);
}

static void test_generated_gemms_in_2cta_clusters_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16};
    for (size_t d = 0; d < N_OF(dts); d++) {
        /* 9 tile rows (a missing half), N-major B, bias + tanh gelu, ragged */
        cluster_case(ctx,
                     "kfg 1\nx = input(%s[1100, 200])\nw = input(%s[200, 1000])\n"
                     "b = input(%s[1000])\nh = matmul(x, w)\na = add(h, b)\ny = gelu_tanh(a)\n"
                     "output y\n",
                     dts[d], 2600, "odd tile rows, N-major B, bias+gelu_tanh");
        /* K-major B (half boxes), a residual, 8 tile rows */
        cluster_case(ctx,
                     "kfg 1\nx = input(%s[1000, 264])\nw = input(%s[1096, 264])\n"
                     "r = input(%s[1000, 1096])\nh = matmul(x, w, transpose_b=true)\n"
                     "y = add(h, r)\noutput y\n",
                     dts[d], 2601, "K-major B, residual");
        /* 128 x 256 tiles: 65 tile rows, 132 pairs for 66 clusters */
        cluster_case(ctx,
                     "kfg 1\nx = input(%s[8320, 64])\nw = input(%s[64, 1024])\ny = matmul(x, w)\n"
                     "output y\n",
                     dts[d], 2602, "128x256 tiles, two pairs a cluster");
        cluster_case(ctx,
                     "kfg 1\nx = input(%s[8320, 72])\nw = input(%s[1024, 72])\n"
                     "y = matmul(x, w, transpose_b=true)\noutput y\n",
                     dts[d], 2603, "128x256 tiles, K-major B");
        /* SwiGLU pairs: each B one half, N-major and K-major */
        cluster_case(ctx,
                     "kfg 1\nx = input(%s[1000, 200])\nwg = input(%s[200, 520])\n"
                     "wu = input(%s[200, 520])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
                     "a = silu(g)\ny = mul(a, u)\noutput y\n",
                     dts[d], 2604, "dual, N-major B");
        cluster_case(ctx,
                     "kfg 1\nx = input(%s[1100, 200])\nwg = input(%s[520, 200])\n"
                     "wu = input(%s[520, 200])\ng = matmul(x, wg, transpose_b=true)\n"
                     "u = matmul(x, wu, transpose_b=true)\na = silu(g)\ny = mul(a, u)\n"
                     "output y\n",
                     dts[d], 2605, "dual, K-major B, odd tile rows");
        /* batched operands (3 tile rows a batch), and a norm folded into B */
        cluster_case(ctx,
                     "kfg 1\na = input(%s[3, 300, 64])\nb = input(%s[3, 64, 136])\n"
                     "c = matmul(a, b)\noutput c\n",
                     dts[d], 2606, "batched");
        cluster_case(ctx,
                     "kfg 1\nx = input(%s[3000, 264])\ng = input(%s[264])\n"
                     "w = input(%s[264, 392])\nn = rms_norm(x, g)\ny = matmul(n, w)\n"
                     "output y\n",
                     dts[d], 2607, "RMSNorm folded into B");
        /* ping-pong pairs with a LayerNorm folded into B (GPT-2's Q/K/V and
         * first MLP GEMM at K <= 1024): 17 tile rows, ragged K and N */
        flag_case(ctx,
                  "kfg 1\nx = input(%s[2100, 264])\ng = input(%s[264])\nc = input(%s[264])\n"
                  "w = input(%s[264, 1096])\nb = input(%s[1096])\n"
                  "n = layer_norm(x, g, c, eps=1e-5)\nh = matmul(n, w)\na = add(h, b)\n"
                  "y = gelu_tanh(a)\noutput y\n",
                  dts[d], 2608, "ping-pong pairs, LayerNorm folded into B",
                  KF_CUDA_RECIPE_GEMM_CLUSTER2, "ping-pong in 2-CTA clusters", false);
    }
    kf_ctx_destroy(ctx);
}

/* Stream-K (KF_CUDA_RECIPE_GEMM_STREAMK, internal): the tail's K steps cut
 * evenly over every SM, partial tiles added by the block that completes a
 * tile. Each case runs twice (the same bits: a fixed order of the partials,
 * counters that reset themselves) and is judged against the reference. The
 * cases: decode shapes (M = 1 and 16 against a long K: every tile's K
 * interleaved over many blocks, KF_SK 2; K not a multiple of their count;
 * N ragged; 79 tiles: even ranges, KF_SK 1), bias + residual +
 * gelu_tanh, the TMA-store epilogue (one bf16/f16 output) and the register
 * one (a cast to f32, a pair), batched operands, a norm folded into B, and
 * a shape with whole waves before the cut one (272 tiles of 128 x 256 on
 * 132 SMs: 132 whole, 140 cut; its output f32, so that K = 256 keeps the
 * cooperative tiles, which a TMA-stored output would trade for ping-pong). */
static void sk_case(kf_ctx *ctx, const char *fmt, kf_dtype d, uint64_t stream, const char *what) {
    flag_case(ctx, fmt, d, stream, what, KF_CUDA_RECIPE_GEMM_STREAMK, "stream-K", true);
}

/* One small case alone (the sanitizers run it): M = 16, a bias, K cut into
 * pieces that are not multiples of each other. */
static void test_a_stream_k_gemm_matches_twice(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    sk_case(ctx,
            "kfg 1\nx = input(%s[16, 1000])\nw = input(%s[1000, 1000])\nb = input(%s[1000])\n"
            "h = matmul(x, w)\ny = add(h, b)\noutput y\n",
            KF_DTYPE_BF16, 2710, "M 16, bias");
    kf_ctx_destroy(ctx);
}

static void test_stream_k_gemms_match_the_reference_twice(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cluster_ctx();
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16};
    for (size_t d = 0; d < N_OF(dts); d++) {
        sk_case(ctx,
                "kfg 1\nx = input(%s[1, 4096])\nw = input(%s[4096, 4096])\ny = matmul(x, w)\n"
                "output y\n",
                dts[d], 2700, "decode M 1");
        sk_case(ctx,
                "kfg 1\nx = input(%s[16, 4000])\nw = input(%s[1000, 4000])\nb = input(%s[1000])\n"
                "r = input(%s[16, 1000])\nh = matmul(x, w, transpose_b=true)\na = add(h, b)\n"
                "u = gelu_tanh(a)\ny = add(u, r)\noutput y\n",
                dts[d], 2701, "decode M 16, K-major B, bias+gelu_tanh+residual");
        sk_case(ctx,
                "kfg 1\nx = input(%s[64, 1096])\nw = input(%s[1096, 1000])\nh = matmul(x, w)\n"
                "y = cast(h, f32)\noutput y\n",
                dts[d], 2702, "M 64, ragged, cast to f32 (register epilogue)");
        sk_case(ctx,
                "kfg 1\nx = input(%s[16, 2048])\nwg = input(%s[2048, 1000])\n"
                "wu = input(%s[2048, 1000])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
                "a = silu(g)\ny = mul(a, u)\noutput y\n",
                dts[d], 2703, "decode SwiGLU pair");
        sk_case(ctx,
                "kfg 1\na = input(%s[3, 100, 1024])\nb = input(%s[3, 1024, 200])\n"
                "c = matmul(a, b)\noutput c\n",
                dts[d], 2704, "batched");
        sk_case(ctx,
                "kfg 1\nx = input(%s[300, 1024])\ng = input(%s[1024])\n"
                "w = input(%s[1024, 136])\nn = rms_norm(x, g)\ny = matmul(n, w)\n"
                "output y\n",
                dts[d], 2705, "RMSNorm folded into B");
        /* a LayerNorm folded: its column terms are copied at each tile's
         * start, also for the segments that run no epilogue */
        sk_case(ctx,
                "kfg 1\nx = input(%s[300, 1024])\ng = input(%s[1024])\nc = input(%s[1024])\n"
                "w = input(%s[1024, 136])\nb = input(%s[136])\nn = layer_norm(x, g, c)\n"
                "h = matmul(n, w)\ny = add(h, b)\noutput y\n",
                dts[d], 2708, "LayerNorm folded into B, bias");
    }
    /* fewer tiles than SMs but more than half (79 of 128 x 256): even
     * ranges, not the interleaved split */
    sk_case(ctx,
            "kfg 1\nx = input(%s[16, 512])\nw = input(%s[512, 20200])\nh = matmul(x, w)\n"
            "y = cast(h, f32)\noutput y\n",
            KF_DTYPE_BF16, 2707, "M 16, 79 tiles: even ranges");
    /* whole waves, then the cut one: 34 tile rows x 8 of 128 x 256 */
    sk_case(ctx,
            "kfg 1\nx = input(%s[4300, 256])\nw = input(%s[256, 2048])\nb = input(%s[2048])\n"
            "h = matmul(x, w)\na = add(h, b)\ny = cast(a, f32)\noutput y\n",
            KF_DTYPE_BF16, 2706, "whole waves then stream-K");
    kf_ctx_destroy(ctx);
}

/* Every GEMM case forced to the sm_80 kernel (KF_GEMM_SM80: mma.sync and
 * cp.async, on any GPU from sm_80, so the H100 runs it too): the report names
 * it, and each matches the reference, norm prologues (folded or from
 * scratch) included (a group it does not take, a SwiGLU pair, stays on
 * cuBLASLt and the report says why). The shapes keep M, N
 * and K ragged but K modest: kf_graph_check evaluates each product three
 * times in f64 on the host (the reference, the exact value, the fused one),
 * which, not the GPU, is this test's time; with K up to 1000 it ran past a
 * 90 s limit on an H100 (2026-11-25, 8b97d95). */
static void test_sm80_gemms_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = ctx_gemm(KF_GEMM_SM80);
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16};
    const char *mma = "mma.sync";
    for (size_t d = 0; d < N_OF(dts); d++) {
        for (size_t i = 0; i < N_OF(epi_cases); i++) {
            const epi_case *c = &epi_cases[i];
            char fmt[1024];
            epi_case_text(c, fmt, sizeof fmt);
            run_opts o = {.lo = -1, .hi = 1, .report_has = mma, .ctx = ctx};
            run_text(fmt, dts[d], 2700 + i, &o, c->name);
        }
        run_opts o = {.lo = -1, .hi = 1, .report_has = mma, .ctx = ctx};
        /* ragged M, N, K (not tile multiples), bias + erf gelu: 64 x 64 tiles */
        run_text(
            "kfg 1\nx = input(%s[1000, 200])\nw = input(%s[200, 1000])\nb = input(%s[1000])\n"
            "h = matmul(x, w)\na = add(h, b)\ny = gelu(a)\noutput y\n",
            dts[d], 2800, &(run_opts){.lo = -1, .hi = 1, .report_has = "mma.sync 64x64x32", .ctx = ctx},
            "sm80: ragged 1000x1000x200, bias+gelu");
        /* 128 x 128 tiles (153 for 132 SMs), ragged M, N, K, a residual */
        run_text("kfg 1\nx = input(%s[1100, 72])\nw = input(%s[72, 2056])\nb = input(%s[2056])\n"
                 "r = input(%s[1100, 2056])\nh = matmul(x, w)\na = add(h, b)\ng = gelu(a)\n"
                 "y = add(g, r)\noutput y\n",
                 dts[d], 2801,
                 &(run_opts){.lo = -1, .hi = 1, .report_has = "mma.sync 128x128x32", .ctx = ctx},
                 "sm80: 1100x2056x72, 128x128 tiles, ragged");
        /* 128 x 128, bare, ragged N and K, B transposed (K-major) */
        run_text("kfg 1\nx = input(%s[2200, 40])\nw = input(%s[2056, 40])\n"
                 "y = matmul(x, w, transpose_b=true)\noutput y\n",
                 dts[d], 2802,
                 &(run_opts){.lo = -1, .hi = 1, .report_has = "mma.sync 128x128x32", .ctx = ctx},
                 "sm80: 128x128 tiles, K-major B");
        /* 128 x 128, A transposed (M-major), tanh gelu */
        run_text("kfg 1\nx = input(%s[40, 2200])\nw = input(%s[40, 2056])\nb = input(%s[2056])\n"
                 "h = matmul(x, w, transpose_a=true)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
                 dts[d], 2803,
                 &(run_opts){.lo = -1, .hi = 1, .report_has = "A M-major", .ctx = ctx},
                 "sm80: 128x128 tiles, M-major A");
        /* M = 1; K below one K step */
        run_text(
            "kfg 1\nx = input(%s[1, 512])\nw = input(%s[512, 384])\ny = matmul(x, w)\noutput y\n",
            dts[d], 2804, &o, "sm80: M = 1");
        run_text("kfg 1\nx = input(%s[130, 24])\nw = input(%s[24, 136])\nr = input(%s[130, 136])\n"
                 "h = matmul(x, w)\ny = add(h, r)\noutput y\n",
                 dts[d], 2805, &o, "sm80: K = 24, residual");
        /* batched in one launch (grid z); B transposed; A transposed */
        run_text("kfg 1\na = input(%s[3, 40, 24])\nb = input(%s[3, 24, 56])\n"
                 "c = matmul(a, b)\noutput c\n",
                 dts[d], 2806,
                 &(run_opts){.lo = -1, .hi = 1, .report_has = "batched in one launch", .ctx = ctx},
                 "sm80: batched");
        run_text("kfg 1\na = input(%s[2, 3, 40, 24])\nb = input(%s[24, 56])\n"
                 "c = matmul(a, b)\noutput c\n",
                 dts[d], 2807, &o, "sm80: broadcast B (batch folded into M)");
        run_text("kfg 1\na = input(%s[4, 200, 64])\nb = input(%s[4, 136, 64])\n"
                 "c = matmul(a, b, transpose_b=true)\nd = relu(c)\noutput d\n",
                 dts[d], 2808, &o, "sm80: batched, B transposed");
        run_text("kfg 1\na = input(%s[136, 200])\nb = input(%s[4, 136, 72])\n"
                 "c = matmul(a, b, transpose_a=true)\noutput c\n",
                 dts[d], 2809, &o, "sm80: A transposed, broadcast A");
        run_text("kfg 1\nx = input(%s[64, 48])\nw = input(%s[48, 1])\nv = input(%s[1, 64])\n"
                 "c = matmul(x, w)\ne = matmul(v, x)\noutput c\noutput e\n",
                 dts[d], 2810, &(run_opts){.lo = -1, .hi = 1, .ctx = ctx}, "sm80: vector shapes");
        /* N = 1001 (K-major B takes any N): partial chunks, bias + residual */
        run_text("kfg 1\nx = input(%s[300, 64])\nw = input(%s[1001, 64])\nb = input(%s[1001])\n"
                 "r = input(%s[300, 1001])\nh = matmul(x, w, transpose_b=true)\na = add(h, b)\n"
                 "y = add(a, r)\noutput y\n",
                 dts[d], 2811, &o, "sm80: N = 1001, K-major B, bias + residual");
        /* K = 1000 (not a multiple of the K step), K-major A and B */
        run_text("kfg 1\nx = input(%s[200, 1000])\nw = input(%s[136, 1000])\n"
                 "y = matmul(x, w, transpose_b=true)\noutput y\n",
                 dts[d], 2812, &o, "sm80: K = 1000, K-major A and B");
        /* M = 1, K = 100: A's one row ends inside a 16-byte copy (zero-filled) */
        run_text("kfg 1\nx = input(%s[1, 100])\nw = input(%s[100, 64])\nb = input(%s[64])\n"
                 "h = matmul(x, w)\ny = add(h, b)\noutput y\n",
                 dts[d], 2814, &o, "sm80: M = 1, K = 100, partial copy");
        /* a norm prologue: folded into B where 2 N < M (pre-passes for the row
         * statistics and diag(gamma) B; ragged M, N, K), else A from the
         * prologue kernel's scratch */
        run_text("kfg 1\nx = input(%s[1000, 264])\ng = input(%s[264])\nc = input(%s[264])\n"
                 "w = input(%s[264, 136])\nb = input(%s[136])\nn = layer_norm(x, g, c)\n"
                 "h = matmul(n, w)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
                 dts[d], 2815,
                 &(run_opts){.lo = -1, .hi = 1, .report_has = "folded into B", .ctx = ctx},
                 "sm80: LayerNorm folded, bias + gelu_tanh, ragged");
        run_text("kfg 1\nx = input(%s[2, 300, 200])\ng = input(%s[200])\nw = input(%s[136, 200])\n"
                 "r = input(%s[2, 300, 136])\nn = rms_norm(x, g)\n"
                 "h = matmul(n, w, transpose_b=true)\ny = add(h, r)\noutput y\n",
                 dts[d], 2816,
                 &(run_opts){.lo = -1, .hi = 1, .report_has = "folded into B", .ctx = ctx},
                 "sm80: RMSNorm folded, K-major B, residual");
        run_text("kfg 1\nx = input(%s[100, 64])\ng = input(%s[64])\nc = input(%s[64])\n"
                 "w = input(%s[64, 136])\nn = layer_norm(x, g, c)\ny = matmul(n, w)\noutput y\n",
                 dts[d], 2817,
                 &(run_opts){.lo = -1, .hi = 1, .report_has = "prologue kernel's scratch", .ctx = ctx},
                 "sm80: LayerNorm from scratch (2 N >= M)");
        /* a GEMM sibling set (q, k, v behind one norm): the statistics once,
         * each member's fold and GEMM; A from the prologue kernel's scratch,
         * written once, where 2 N >= M */
        run_text("kfg 1\nx = input(%s[2, 256, 128])\ng = input(%s[128])\nwq = input(%s[128, 128])\n"
                 "bq = input(%s[128])\nwk = input(%s[128, 64])\nwv = input(%s[128, 64])\n"
                 "n = rms_norm(x, g, eps=1e-6)\nq0 = matmul(n, wq)\nq = add(q0, bq)\n"
                 "k0 = matmul(n, wk)\nk = silu(k0)\nv = matmul(n, wv)\noutput q\noutput k\n"
                 "output v\n",
                 dts[d], 2820,
                 &(run_opts){.lo = -1, .hi = 1, .report_has = "folded into B", .ctx = ctx},
                 "sm80: GEMM siblings, folded");
        run_text("kfg 1\nx = input(%s[100, 64])\ng = input(%s[64])\nc = input(%s[64])\n"
                 "wq = input(%s[64, 136])\nwk = input(%s[64, 72])\nn = layer_norm(x, g, c)\n"
                 "q = matmul(n, wq)\nk = matmul(n, wk)\noutput q\noutput k\n",
                 dts[d], 2821,
                 &(run_opts){.lo = -1, .hi = 1, .report_has = "prologue kernel's scratch", .ctx = ctx},
                 "sm80: GEMM siblings, A from scratch");
        /* a SwiGLU pair: 128 x (2 x 64) tiles, ragged N (136) and M; K-major B
         * batched; an RMSNorm folded into both B (2 x 2 x 520 < 2400) */
        run_text("kfg 1\nx = input(%s[200, 64])\nwg = input(%s[64, 136])\n"
                 "wu = input(%s[64, 136])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
                 "a = silu(g)\ny = mul(a, u)\noutput y\n",
                 dts[d], 2813,
                 &(run_opts){.lo = -1, .hi = 1, .report_has = "mma.sync pair", .ctx = ctx},
                 "sm80: SwiGLU pair");
        run_text("kfg 1\nx = input(%s[2, 300, 200])\nwg = input(%s[2, 136, 200])\n"
                 "wu = input(%s[2, 136, 200])\ng = matmul(x, wg, transpose_b=true)\n"
                 "u = matmul(x, wu, transpose_b=true)\na = silu(g)\ny = mul(a, u)\noutput y\n",
                 dts[d], 2818,
                 &(run_opts){.lo = -1, .hi = 1, .report_has = "mma.sync pair", .ctx = ctx},
                 "sm80: SwiGLU pair, batched K-major B");
        run_text("kfg 1\nx = input(%s[2400, 264])\nn = input(%s[264])\nwg = input(%s[264, 520])\n"
                 "wu = input(%s[264, 520])\nxn = rms_norm(x, n)\ng = matmul(xn, wg)\n"
                 "u = matmul(xn, wu)\na = silu(g)\ny = mul(a, u)\noutput y\n",
                 dts[d], 2819,
                 &(run_opts){.lo = -1, .hi = 1, .report_has = "folded into B", .ctx = ctx},
                 "sm80: SwiGLU pair, RMSNorm folded");
    }
    /* the examples forced to it: scripts/gpu_check.sh (kfuse run --gemm sm80
     * --check), not here, where this suite's time is already the longest */
    kf_ctx_destroy(ctx);
}

/* An RMSNorm's gamma on A's fragments (shape.a_gscale, sm_90a's default for
 * bf16 with A K-major, cooperative 128 x 256 tiles and the TMA-store
 * epilogue): B is read as it is, the producer copies each K step's gammas
 * with the stage, each warp loads its rows of A by ldmatrix, multiplies them
 * by gamma and runs wgmma with A from registers, and a statistics pre-pass's
 * rstd scales the accumulators. The recipes are made for 16 SMs, so cases of
 * a few tiles take the 128 x 256 tiles: ragged M, N and K (K = 1096, past 17
 * K steps: at K <= 1024 the TMA-store epilogue takes ping-pong tiles), N- and
 * K-major B, the batch folded into M, a bias and gelu, a sibling set, 2-CTA
 * clusters (odd tile rows). f16, 128 x 128 and ping-pong tiles and the
 * register epilogue keep the fold into B. */
static void gs_set_check(const kf_plan *plan, const kf_cuda_recipes *r, const char *what,
                         const char *dn) {
    sib_one_check(plan, r, what, dn);
    for (uint32_t gi = 0; gi < r->n; gi++) {
        const kf_cuda_recipe *rc = &r->recipes[gi];
        if (rc->n_members >= 2 && !strstr(rc->variants[0].how, "RMSNorm's gamma on A's fragments"))
            fail_msg("%s [%s]: group %u's set does not take gamma on A's fragments: %s", what, dn,
                     gi, rc->variants[0].how);
    }
}

static void test_rms_norm_gamma_on_a_fragments_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    if (!sib_one_device())
        skip();
    kf_ctx *ctx = ctx_gemm(KF_GEMM_GENERATED);
    const kf_dtype bf = KF_DTYPE_BF16;
    const uint64_t gen = KF_CUDA_RECIPE_GEMM_GENERATED;
    const char *gs = "RMSNorm's gamma on A's fragments", *fo = "folded into B";
    static const struct {
        const char *text, *what;
        uint64_t flags;
        bool f16, ring;
    } cases[] = {
        {"kfg 1\nx = input(%s[1100, 1096])\ng = input(%s[1096])\nw = input(%s[1096, 520])\n"
         "b = input(%s[520])\nn = rms_norm(x, g)\nh = matmul(n, w)\na = add(h, b)\n"
         "y = gelu(a)\noutput y\n",
         "N-major B, ragged M, N and K, bias + gelu", 0, false, true},
        {"kfg 1\nx = input(%s[2, 550, 1096])\ng = input(%s[1096])\nw = input(%s[520, 1096])\n"
         "n = rms_norm(x, g, eps=1e-6)\ny = matmul(n, w, transpose_b=true)\noutput y\n",
         "K-major B, batch folded", 0, false, true},
        {"kfg 1\nx = input(%s[1100, 1096])\ng = input(%s[1096])\nwq = input(%s[264, 1096])\n"
         "bq = input(%s[264])\nwk = input(%s[264, 1096])\nwv = input(%s[264, 1096])\n"
         "n = rms_norm(x, g, eps=1e-6)\nq0 = matmul(n, wq, transpose_b=true)\n"
         "q = add(q0, bq)\nk0 = matmul(n, wk, transpose_b=true)\nk = silu(k0)\n"
         "v = matmul(n, wv, transpose_b=true)\noutput q\noutput k\noutput v\n",
         "a sibling set as one kernel", KF_CUDA_RECIPE_GEMM_SIB_ONE, false, true},
        {"kfg 1\nx = input(%s[1100, 1096])\ng = input(%s[1096])\nw = input(%s[1096, 520])\n"
         "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
         "2-CTA clusters, odd tile rows", KF_CUDA_RECIPE_GEMM_CLUSTER2, false, true},
        {"kfg 1\nx = input(%s[1100, 1096])\ng = input(%s[1096])\nw = input(%s[1096, 520])\n"
         "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
         "f16 keeps the fold", 0, true, false},
        {"kfg 1\nx = input(%s[1000, 264])\ng = input(%s[264])\nw = input(%s[264, 392])\n"
         "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
         "128 x 128 tiles keep the fold", 0, false, false},
        {"kfg 1\nx = input(%s[1100, 264])\ng = input(%s[264])\nw = input(%s[264, 520])\n"
         "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
         "ping-pong tiles (K <= 1024) keep the fold", 0, false, false},
        {"kfg 1\nx = input(%s[1100, 1096])\ng = input(%s[1096])\nw = input(%s[1096, 520])\n"
         "n = rms_norm(x, g)\nh = matmul(n, w)\ny = cast(h, f32)\noutput y\n",
         "the register epilogue keeps the fold", 0, false, false},
    };
    for (size_t i = 0; i < N_OF(cases); i++) {
        bool set = cases[i].flags & KF_CUDA_RECIPE_GEMM_SIB_ONE; /* (its members: no step) */
        sms_case_full(ctx, cases[i].text, cases[i].f16 ? KF_DTYPE_F16 : bf, 2901 + i,
                      cases[i].what, gen | cases[i].flags, set ? gs_set_check : NULL,
                      set ? NULL : cases[i].ring ? gs : fo, false, 16);
    }
    kf_ctx_destroy(ctx);
}

/* The measured mode times the generated kernel against cuBLASLt and names
 * both in the report. */
static void test_measured_gemm_names_both_sides(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = ctx_gemm(KF_GEMM_MEASURED);
    run_opts o = {.lo = -1, .hi = 1, .report_has_sm90 = "generated |cublaslt ", .ctx = ctx};
    run_text("kfg 1\nx = input(%s[512, 256])\nw = input(%s[256, 384])\nb = input(%s[384])\n"
             "h = matmul(x, w)\na = add(h, b)\ny = gelu(a)\noutput y\n",
             KF_DTYPE_BF16, 1900, &o, "measured");
    kf_ctx_destroy(ctx);
    /* the default is the measured choice */
    run_opts d = {.lo = -1, .hi = 1, .report_has_sm90 = "generated |cublaslt "};
    run_text("kfg 1\nx = input(%s[256, 128])\nw = input(%s[128, 256])\ny = matmul(x, w)\n"
             "output y\n",
             KF_DTYPE_F16, 1901, &d, "default mode");
    /* a norm prologue, measured: the statistics pre-pass + the generated GEMM
     * against the prologue kernel + cuBLASLt, whichever wins computing the
     * reference's values; ragged M, N, K, bf16 and f16; default and measured */
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16};
    kf_ctx *mc = ctx_gemm(KF_GEMM_MEASURED);
    for (size_t i = 0; i < N_OF(dts); i++) {
        run_opts m = {.lo = -1, .hi = 1, .report_has_sm90 = "generated |cublaslt ", .ctx = mc};
        run_text("kfg 1\nx = input(%s[1000, 264])\ng = input(%s[264])\nw = input(%s[264, 1096])\n"
                 "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
                 dts[i], 1902 + i, &m, "measured norm prologue: rms_norm, ragged");
        run_opts dd = {.lo = 0.5, .hi = 3, .report_has_sm90 = "generated |cublaslt "};
        run_text("kfg 1\nx = input(%s[2, 300, 200])\ng = input(%s[200])\nc = input(%s[200])\n"
                 "w = input(%s[200, 136])\nb = input(%s[136])\nn = layer_norm(x, g, c)\n"
                 "y = matmul(n, w)\nz = add(y, b)\noutput z\n",
                 dts[i], 1904 + i, &dd, "default norm prologue: layer_norm, batch folded, bias");
        /* one norm, the prologue of two GEMMs (Q and K projections) */
        run_text("kfg 1\nx = input(%s[520, 136])\ng = input(%s[136])\nwq = input(%s[136, 264])\n"
                 "wk = input(%s[136, 200])\nn = rms_norm(x, g)\nq = matmul(n, wq)\n"
                 "k = matmul(n, wk)\noutput q\noutput k\n",
                 dts[i], 1906 + i, &dd, "default norm prologue shared by two GEMMs");
    }
    kf_ctx_destroy(mc);
}

/* The split row form (gemm.row_split): a norm on a GEMM output whose rows
 * are longer than one tile row, fused into the GEMM's group; ragged M, N, K;
 * the pre-norm residual stream written too (the generated GEMM writes it
 * once, into the output) or not (into a scratch the row pass reads). In the
 * default mode (bf16/f16 on sm_90a: measured, generated GEMM + row pass
 * against cuBLASLt + the row-epilogue kernel) and forced to the generated
 * side (f32: cuBLASLt, and the recipe says why). */
static void test_split_row_norms_after_a_gemm_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *gen = cuda_ctx(KF_FLAG_SPLIT_ROW_NORMS, KF_GEMM_GENERATED);
    kf_ctx *def = cuda_ctx(KF_FLAG_SPLIT_ROW_NORMS, KF_GEMM_AUTO);
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16, KF_DTYPE_F32};
    for (size_t i = 0; i < N_OF(dts); i++) {
        for (int forced = 0; forced < 2; forced++) {
            bool f32 = dts[i] == KF_DTYPE_F32;
            run_opts o = {.lo = -1,
                          .hi = 1,
                          .report_has = "split row form",
                          .report_has_sm90 = f32      ? NULL
                                             : forced ? "the epilogue writes the norm's input rows"
                                                      : "generated |cublaslt ",
                          .ctx = forced ? gen : def};
            run_text("kfg 1\nx = input(%s[1000, 264])\nw = input(%s[264, 1096])\n"
                     "b = input(%s[1096])\nr = input(%s[1000, 1096])\ng = input(%s[1096])\n"
                     "c = input(%s[1096])\nh = matmul(x, w)\nhb = add(h, b)\ns = add(hb, r)\n"
                     "y = layer_norm(s, g, c, eps=1e-5)\noutput y\noutput s\n",
                     dts[i], 1950 + i * 4 + (uint64_t)forced * 2, &o,
                     "split row: bias + residual + layer_norm, ragged");
            run_text("kfg 1\nx = input(%s[3, 70, 136])\nw = input(%s[136, 4104])\n"
                     "r = input(%s[3, 70, 4104])\ng = input(%s[4104])\nh = matmul(x, w)\n"
                     "s = add(h, r)\ny = rms_norm(s, g, eps=1e-6)\nz = mul(y, g)\noutput z\n",
                     dts[i], 1951 + i * 4 + (uint64_t)forced * 2, &o,
                     "split row: residual + rms_norm, N = 4104, batch folded");
            /* N = 4100: a row of 8200 bytes, which TMA cannot stride: cuBLASLt
             * on either mode, and the recipe says why */
            run_opts t = {.lo = -1,
                          .hi = 1,
                          .report_has = "split row form",
                          .report_has_sm90 = f32 ? NULL : "16 bytes",
                          .ctx = forced ? gen : def};
            run_text("kfg 1\nx = input(%s[200, 136])\nw = input(%s[136, 4100])\n"
                     "r = input(%s[200, 4100])\ng = input(%s[4100])\nh = matmul(x, w)\n"
                     "s = add(h, r)\ny = rms_norm(s, g, eps=1e-6)\noutput y\n",
                     dts[i], 1962 + i * 4 + (uint64_t)forced, &t, "split row: N = 4100, cuBLASLt");
        }
    }
    kf_ctx_destroy(def);
    kf_ctx_destroy(gen);
}

/* The head-split epilogue (KF_FLAG_GEMM_HEAD_EPILOGUE): a rotary embedding of
 * the product's head view in the GEMM's group, forced to the generated kernel
 * (the partners from the registers), to cuBLASLt (its epilogue kernel reads
 * the partner column from the product), and the measured default; heads
 * first (permuted) and last, head dims 128 and 64, ragged M, batch > 1. */
static void test_head_split_rotary_epilogues_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const kf_gemm_mode modes[] = {KF_GEMM_GENERATED, KF_GEMM_CUBLASLT, KF_GEMM_AUTO};
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16, KF_DTYPE_F32};
    for (size_t mi = 0; mi < N_OF(modes); mi++) {
        kf_ctx *ctx = cuda_ctx(KF_FLAG_GEMM_HEAD_EPILOGUE, modes[mi]);
        for (size_t i = 0; i < N_OF(dts); i++) {
            bool gen = modes[mi] == KF_GEMM_GENERATED && dts[i] != KF_DTYPE_F32;
            run_opts o = {.lo = -1,
                          .hi = 1,
                          .report_has = "head-split epilogue",
                          .report_has_sm90 = gen ? "generated kernel" : NULL,
                          .ctx = ctx};
            run_text("kfg 1\nx = input(%s[2, 1000, 136])\nw = input(%s[136, 512])\n"
                     "c = input(%s[1000, 128])\ns = input(%s[1000, 128])\n"
                     "p = matmul(x, w)\nh = reshape(p, [2, 1000, 4, 128])\n"
                     "q = permute(h, [0, 2, 1, 3])\nq1 = slice(q, axis=-1, stop=64)\n"
                     "q2 = slice(q, axis=-1, start=64)\nn2 = neg(q2)\n"
                     "r = concat(n2, q1, axis=-1)\nqc = mul(q, c)\nrs = mul(r, s)\n"
                     "y = add(qc, rs)\noutput y\n",
                     dts[i], 2300 + mi * 8 + i * 2, &o,
                     "head-split rotary: [B, H, S, 128], ragged M, batch 2");
            run_text("kfg 1\nx = input(%s[3, 77, 64])\nw = input(%s[64, 512])\n"
                     "c = input(%s[77, 1, 64])\ns = input(%s[77, 1, 64])\n"
                     "p = matmul(x, w)\nq = reshape(p, [3, 77, 8, 64])\n"
                     "q1 = slice(q, axis=-1, stop=32)\nq2 = slice(q, axis=-1, start=32)\n"
                     "n2 = neg(q2)\nr = concat(n2, q1, axis=-1)\nqc = mul(q, c)\n"
                     "rs = mul(r, s)\ny = add(qc, rs)\noutput y\n",
                     dts[i], 2301 + mi * 8 + i * 2, &o,
                     "head-split rotary: [B, S, H, 64], ragged M, batch 3");
        }
        kf_ctx_destroy(ctx);
    }
}

/* ------------------------------------------------------------------------ */
/* Cache flags, arena                                                         */
/* ------------------------------------------------------------------------ */

/* A CUDA context on cache `dir` with `flags` and a measured choice's
 * `margin` (kf_options.choice_margin); ctx_with: kf_options_init's margin. */
static kf_ctx *ctx_with_rule(const char *dir, unsigned flags, double margin, double load_bias) {
    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CUDA;
    o.cache_dir = dir;
    o.flags = flags;
    o.choice_margin = margin;
    o.choice_load_bias = load_bias;
    kf_ctx *c = NULL;
    assert_int_equal(kf_ctx_create(&o, &c), KF_OK);
    return c;
}

/* A context whose measured choices follow the margin's rule alone (load
 * bias 0: the times as measured), so "margin 0" means the faster side. */
static kf_ctx *ctx_with_margin(const char *dir, unsigned flags, double margin) {
    return ctx_with_rule(dir, flags, margin, 0.0);
}

static kf_ctx *ctx_with(const char *dir, unsigned flags) {
    kf_options o;
    kf_options_init(&o);
    return ctx_with_rule(dir, flags, o.choice_margin, o.choice_load_bias);
}

static const char cache_graph[] =
    "kfg 1\nx = input(f32[64, 300])\nw = input(f32[300])\nn = rms_norm(x, w, axis=-1, eps=1e-6)\n"
    "y = silu(n)\nz = exp(x)\noutput y\noutput z\n";

static void test_fail_on_miss_names_the_kernel_then_a_filled_cache_compiles_nothing(void **s) {
    (void)s;
    REQUIRE_GPU();
    char dir[300];
    snprintf(dir, sizeof dir, "%s/fom", G.cache_dir);
    assert_int_equal(mkdir(dir, 0700), 0); /* read-only refuses a missing directory */
    /* An empty cache with fail-on-miss: the compile fails naming a kernel. */
    kf_ctx *c = ctx_with(dir, 0);
    kf_ctx *fom = ctx_with(dir, KF_FLAG_CACHE_FAIL_ON_MISS | KF_FLAG_CACHE_READ_ONLY);
    kf_graph *g = NULL;
    assert_int_equal(kf_graph_parse(fom, cache_graph, strlen(cache_graph), &g), KF_OK);
    kf_program *p = NULL;
    kf_status st = kf_compile(fom, g, &p);
    assert_int_not_equal(st, KF_OK);
    assert_null(p);
    fprintf(stderr, "fail-on-miss: %s\n", kf_graph_error(g));
    assert_non_null(strstr(kf_graph_error(g), "row_"));
    kf_graph_destroy(g);
    kf_ctx_destroy(fom);
    /* Fill it, then the fail-on-miss context runs with no compile. */
    assert_int_equal(kf_graph_parse(c, cache_graph, strlen(cache_graph), &g), KF_OK);
    run_opts o = {
        .lo = -1, .hi = 1, .ctx = c, .report_has = "kernels compiled 2, from the cache 0"};
    run_and_compare(g, 1200, &o, "fill the cache");
    kf_graph_destroy(g);
    kf_ctx_destroy(c);
    fom = ctx_with(dir, KF_FLAG_CACHE_FAIL_ON_MISS);
    assert_int_equal(kf_graph_parse(fom, cache_graph, strlen(cache_graph), &g), KF_OK);
    run_opts o2 = {
        .lo = -1, .hi = 1, .ctx = fom, .report_has = "kernels compiled 0, from the cache 2"};
    run_and_compare(g, 1201, &o2, "fail-on-miss with a full cache");
    kf_graph_destroy(g);
    kf_ctx_destroy(fom);
    /* No cache at all: compiles, touches no directory. */
    kf_ctx *nc = ctx_with(NULL, KF_FLAG_NO_CACHE);
    assert_int_equal(kf_graph_parse(nc, cache_graph, strlen(cache_graph), &g), KF_OK);
    run_opts o3 = {
        .lo = -1, .hi = 1, .ctx = nc, .report_has = "kernels compiled 2, from the cache 0"};
    run_and_compare(g, 1202, &o3, "no cache");
    kf_graph_destroy(g);
    kf_ctx_destroy(nc);
}

/* ------------------------------------------------------------------------ */
/* Recipes: the report, aot and the executor agree                           */
/* ------------------------------------------------------------------------ */

/* The value of the JSON report's "cuda" member (up to the next member). */
static char *cuda_member(const char *json, const char *what) {
    const char *key = "\n  \"cuda\": ";
    const char *a = strstr(json, key);
    if (!a)
        fail_msg("%s: no \"cuda\" member in the report", what);
    a += strlen(key);
    const char *b = strstr(a, ",\n  \"cuda_run\"");
    if (!b)
        b = strstr(a, "\n}");
    assert_non_null(b);
    return strndup(a, (size_t)(b - a));
}

/* Warm start (issue 15 item 5): cuBLASLt is opened (its dlopen thread
 * started) only when a recipe in use calls it -- not for a GEMM that the
 * generated kernel runs -- and still when one does. Failed before: the thread
 * started for every plan with a GEMM group. */
static void test_cublaslt_is_loaded_only_when_a_recipe_in_use_calls_it(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char text[] = "kfg 1\nx = input(bf16[256, 512])\nw = input(bf16[512, 256])\n"
                               "b = input(bf16[256])\nm = matmul(x, w)\ny = add(m, b)\n"
                               "output y\n";
    static const kf_gemm_mode modes[] = {KF_GEMM_GENERATED, KF_GEMM_CUBLASLT};
    for (size_t i = 0; i < N_OF(modes); i++) {
        kf_ctx *c = cuda_ctx(KF_FLAG_NO_CACHE, modes[i]);
        kf_graph *g = NULL;
        assert_int_equal(kf_graph_parse(c, text, strlen(text), &g), KF_OK);
        kf_program *p = NULL;
        assert_int_equal(kf_compile(c, g, &p), KF_OK);
        char *txt = kf_test_report(p, KF_REPORT_TEXT);
        char *js = kf_test_report(p, KF_REPORT_JSON);
        bool generated = modes[i] == KF_GEMM_GENERATED && report_sm(txt) >= 80;
        const char *want = generated ? "\"cublaslt_loaded\": false" : "\"cublaslt_loaded\": true";
        if (!strstr(js, want))
            fail_msg("gemm mode %d: the report lacks %s:\n%s", (int)modes[i], want, js);
        free(txt);
        free(js);
        kf_program_destroy(p);
        kf_graph_destroy(g);
        kf_ctx_destroy(c);
    }
}

/* Everything `cmd` writes to stdout; its exit status must be 0. */
static char *command_output(const char *cmd) {
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (int c; (c = fgetc(f)) != EOF;) {
        if (len + 2 > cap) {
            cap = cap ? cap * 2 : 65536;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        buf[len++] = (char)c;
    }
    int rc = pclose(f);
    if (rc != 0)
        fail_msg("'%s' exited with %d", cmd, rc);
    if (buf)
        buf[len] = 0;
    return buf;
}

/* For every example and pattern: `kfuse report --json` for this device's arch
 * and SM count (computed by the CLI, which opens no device) prints exactly the
 * recipes a program compiled on the device runs; and a cache filled by `kfuse
 * aot` for the arch serves every kernel of every program under fail-on-miss,
 * whose outputs match the reference. */
static void test_recipes_of_the_report_are_the_executors_and_aot_serves_them(void **state) {
    (void)state;
    REQUIRE_GPU();
    const char *cli = getenv("KF_CLI"), *src = getenv("KF_SOURCE_DIR");
    if (!cli)
        fail_msg("KF_CLI (the kfuse binary) is not set; run through ctest");
    src = src ? src : ".";
    const kf_cuda_driver *drv = NULL;
    char err[KF_MSG_MAX];
    assert_int_equal(kf_ctx_cuda_driver(G.ctx, &drv, err), KF_OK);
    kf_cuda_device dev;
    assert_int_equal(kf_cuda_device_open(drv, 0, &dev, err), KF_OK);
    char arch[KF_ARCH_MAX];
    snprintf(arch, sizeof arch, "%s", dev.arch);
    int sms = dev.sm_count;
    kf_cuda_device_close(&dev);

    char dir[300], cmd[2048];
    snprintf(dir, sizeof dir, "%s/aot", G.cache_dir);
    snprintf(cmd, sizeof cmd,
             "'%s' aot --arch %s '%s'/examples/*.kfg '%s'/examples/patterns/*.kfg "
             "-o '%s' >&2",
             cli, arch, src, src, dir);
    assert_int_equal(system(cmd), 0);
    kf_ctx *fom = ctx_with(dir, KF_FLAG_CACHE_FAIL_ON_MISS | KF_FLAG_CACHE_READ_ONLY);

    const char *sub[] = {"examples", "examples/patterns"};
    int files = 0;
    for (int d = 0; d < 2; d++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", src, sub[d]);
        DIR *dp = opendir(path);
        assert_non_null(dp);
        for (struct dirent *de; (de = readdir(dp));) {
            size_t l = strlen(de->d_name);
            if (l < 5 || strcmp(de->d_name + l - 4, ".kfg") != 0)
                continue;
            char file[1400];
            snprintf(file, sizeof file, "%s/%s", path, de->d_name);
            snprintf(cmd, sizeof cmd, "'%s' report --json --arch %s --sm-count %d '%s'", cli, arch,
                     sms, file);
            char *cli_json = command_output(cmd);
            char *want = cuda_member(cli_json, file);

            size_t len = 0;
            char *text = read_file(file, &len);
            kf_graph *g = NULL;
            assert_int_equal(kf_graph_parse(fom, text, len, &g), KF_OK);
            /* Runs from the aot cache alone, and matches the reference. */
            run_opts o = {.lo = -1, .hi = 1, .ctx = fom, .report_has = "kernels compiled 0,"};
            run_and_compare(g, 1300 + (uint64_t)files, &o, file);
            kf_program *p = NULL;
            if (kf_compile(fom, g, &p) != KF_OK)
                fail_msg("%s: %s", file, kf_graph_error(g));
            char *json = kf_test_report(p, KF_REPORT_JSON);
            char *got = cuda_member(json, file);
            if (strcmp(got, want) != 0) {
                size_t i = 0;
                while (got[i] && got[i] == want[i])
                    i++;
                fail_msg("%s: the executor's recipes differ from `kfuse report`'s at byte %zu:\n"
                         "executor: ...%.300s\nreport:   ...%.300s",
                         file, i, got + (i > 60 ? i - 60 : 0), want + (i > 60 ? i - 60 : 0));
            }
            fprintf(stderr, "  %s: recipes agree (%zu bytes), ran from the aot cache\n", file,
                    strlen(got));
            free(got);
            free(json);
            kf_program_destroy(p);
            kf_graph_destroy(g);
            free(text);
            free(want);
            free(cli_json);
            files++;
        }
        closedir(dp);
    }
    assert_true(files >= 10);
    kf_ctx_destroy(fom);
}

/* A recipe with two variants and a MEASURED choice: the GEMM group of
 * gelu(x.w + b) (cuBLASLt's bias epilogue, then an erf-gelu kernel) against
 * its no-cuBLASLt-epilogue recipe (bare GEMM, then one kernel for bias and
 * gelu). The executor times both once, keeps the faster, reports both times,
 * and the program's outputs match the reference whichever won. */
static void test_a_measured_choice_times_both_variants_and_runs_the_faster(void **state) {
    (void)state;
    REQUIRE_GPU();
    const char *text = "kfg 1\nx = input(f32[512, 256])\nw = input(f32[256, 384])\n"
                       "b = input(f32[384])\nh = matmul(x, w)\nhb = add(h, b)\ny = gelu(hb)\n"
                       "output y\n";
    kf_graph *g = NULL;
    assert_int_equal(kf_graph_parse(G.ctx, text, strlen(text), &g), KF_OK);
    kf_plan *plan = NULL;
    assert_int_equal(kf_plan_create(g, NULL, &plan), KF_OK);
    assert_int_equal(plan->n_groups, 1);
    char err[KF_MSG_MAX] = "";
    kf_cuda_exec *ex = NULL;
    kf_cuda_target t;
    assert_int_equal(kf_cuda_exec_open(G.ctx, &ex, &t, err), KF_OK);
    /* both recipes cuBLASLt's (the default also measures the SIMT kernel) */
    t.flags &= ~(unsigned)(KF_CUDA_RECIPE_GEMM_MEASURED | KF_CUDA_RECIPE_GEMM_GENERATED);
    kf_cuda_recipes *a = NULL, *b = NULL;
    assert_int_equal(kf_cuda_recipes_create(plan, &t, &g->mem, &a, err), KF_OK);
    t.flags |= KF_CUDA_RECIPE_NO_LT_EPILOGUE;
    assert_int_equal(kf_cuda_recipes_create(plan, &t, &g->mem, &b, err), KF_OK);
    /* Splice b's recipe in as variant 1 of a's: its steps appended (moved),
     * its scratch renumbered after a's. */
    kf_cuda_recipe *ra = &a->recipes[0], *rb = &b->recipes[0];
    assert_int_equal(ra->n_variants, 1);
    assert_true(ra->n_scratch + rb->n_scratch <= KF_CUDA_MAX_SCRATCH);
    uint32_t off = ra->n_scratch;
    for (uint32_t i = 0; i < rb->n_scratch; i++)
        ra->scratch[ra->n_scratch++] = rb->scratch[i];
    ra->variants[1] = rb->variants[0];
    ra->variants[1].first_step = ra->n_steps;
    ra->variants[1].n_steps = 0;
    snprintf(ra->variants[1].label, sizeof ra->variants[1].label, "bare+kernel");
    ra->n_variants = 2;
    ra->choice = KF_CUDA_CHOICE_MEASURED;
    for (uint32_t i = 0; i < rb->n_steps; i++) {
        kf_cuda_step *s = NULL;
        assert_int_equal(kf_cuda_recipe_add_step(ra, &g->mem, rb->steps[i].kind, &s), KF_OK);
        if (s->kind == KF_CUDA_STEP_KERNEL) {
            kf_cuda_kstep *ks = s->kernel;
            *ks = *rb->steps[i].kernel;
            memset(&rb->steps[i].kernel->kernel, 0, sizeof rb->steps[i].kernel->kernel);
            for (uint32_t j = 0; j < ks->n_args; j++)
                if (ks->args[j].buf.kind == KF_CUDA_BUF_SCRATCH)
                    ks->args[j].buf.id += off;
        } else {
            s->gemm = rb->steps[i].gemm;
            kf_cuda_buf *bufs[] = {&s->gemm.a.buf, &s->gemm.b.buf, &s->gemm.c.buf, &s->gemm.d.buf,
                                   &s->gemm.bias};
            for (size_t j = 0; j < sizeof bufs / sizeof bufs[0]; j++)
                if (bufs[j]->kind == KF_CUDA_BUF_SCRATCH)
                    bufs[j]->id += off;
        }
    }
    kf_cuda_recipes_destroy(b);
    if (kf_cuda_exec_prepare(ex, plan, a, err) != KF_OK)
        fail_msg("prepare: %s", err);
    uint32_t chosen = 9;
    float ms[KF_CUDA_MAX_VARIANTS] = {0};
    assert_true(kf_cuda_exec_choice(ex, 0, &chosen, ms));
    assert_true(chosen < 2);
    assert_true(ms[0] > 0 && ms[1] > 0);
    assert_true(ms[chosen] <= ms[1 - chosen]);
    fprintf(stderr, "measured: cublaslt %.4f ms, bare+kernel %.4f ms, chose %u\n", (double)ms[0],
            (double)ms[1], chosen);
    char *rep = NULL;
    size_t rlen = 0;
    FILE *f = open_memstream(&rep, &rlen);
    kf_cuda_exec_report(ex, false, f);
    fclose(f);
    assert_non_null(strstr(rep, "[measured: cublaslt "));
    assert_non_null(strstr(rep, "(chosen)"));
    free(rep);
    /* Run the chosen variant and compare with the reference. */
    kf_test_rng rng = kf_test_rng_make(1400);
    void **bound = calloc(g->n_nodes, sizeof *bound);
    kf_binding in[3], out[1], ref[1];
    for (size_t i = 0; i < 3; i++) {
        const kf_tensor *ti = kf_graph_input(g, i);
        size_t n = (size_t)kf_tensor_numel(ti);
        in[i] = (kf_binding){kf_tensor_name(ti), malloc(n * 4), n * 4};
        kf_test_fill(in[i].data, KF_DTYPE_F32, n, &rng, -1, 1);
        bound[ti->id] = in[i].data;
    }
    const kf_tensor *to = kf_graph_output(g, 0);
    size_t no = (size_t)kf_tensor_numel(to);
    out[0] = (kf_binding){"y", malloc(no * 4), no * 4};
    ref[0] = (kf_binding){"y", malloc(no * 4), no * 4};
    kf_test_poison(out[0].data, KF_DTYPE_F32, no);
    bound[to->id] = out[0].data;
    if (kf_cuda_exec_run(ex, bound, NULL, err) != KF_OK)
        fail_msg("run: %s", err);
    assert_int_equal(kf_graph_eval(g, in, 3, ref, 1), KF_OK);
    double e = kf_test_rel_err(out[0].data, ref[0].data, KF_DTYPE_F32, no);
    if (!(e <= 1e-5))
        fail_msg("relative error %g with variant %u", e, chosen);
    for (size_t i = 0; i < 3; i++)
        free(in[i].data);
    free(out[0].data);
    free(ref[0].data);
    free(bound);
    kf_cuda_exec_destroy(ex);
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
}

/* Issue 15 item 5: a measured choice is timed once per device and shape and
 * kept in the cache; a new process (here: a new context and exec on the same
 * directory) reads it, times nothing, loads only the winner's steps, and
 * loads cuBLASLt only when the winner calls it. Before the fix every compile
 * timed both variants again and always loaded cuBLASLt. */
static void prepare_gemm(kf_ctx *ctx, const kf_plan *plan, kf_cuda_exec **ex) {
    char err[KF_MSG_MAX] = "";
    kf_cuda_target t;
    kf_cuda_recipes *r = NULL;
    if (kf_cuda_exec_open(ctx, ex, &t, err) != KF_OK ||
        kf_cuda_recipes_create(plan, &t, &plan->graph->mem, &r, err) != KF_OK ||
        kf_cuda_exec_prepare(*ex, plan, r, err) != KF_OK)
        fail_msg("prepare: %s", err);
}

/* The measured-choice tests' graph: on sm_90a its GEMM group is a measured
 * choice of the generated GEMM kernel against cuBLASLt. */
static const char measured_graph[] = "kfg 1\nx = input(bf16[512, 256])\nw = input(bf16[256, 512])\n"
                                     "b = input(bf16[512])\nh = matmul(x, w)\na = add(h, b)\n"
                                     "y = gelu_tanh(a)\noutput y\n";

/* measured_graph parsed in ctx (*g) and planned. */
static kf_plan *measured_plan(kf_ctx *ctx, kf_graph **g) {
    kf_plan *plan = NULL;
    assert_int_equal(kf_graph_parse(ctx, measured_graph, strlen(measured_graph), g), KF_OK);
    assert_int_equal(kf_plan_create(*g, NULL, &plan), KF_OK);
    return plan;
}

/* Whether `chosen` is what the choice rule picks from ms (kf_cuda_choice_pick)
 * under the margin and load bias of kf_options_init, which the tests'
 * contexts keep. */
static bool rule_picked(const kf_cuda_exec *ex, uint32_t gi, uint32_t chosen, const float *ms) {
    kf_options o;
    kf_options_init(&o);
    const kf_cuda_recipe *rc = &kf_cuda_exec_recipes(ex)->recipes[gi];
    return chosen == kf_cuda_choice_pick_recipe(rc, ms, o.choice_margin, o.choice_load_bias, NULL);
}

static void test_a_measured_choice_is_cached_and_a_warm_compile_times_nothing(void **state) {
    (void)state;
    REQUIRE_GPU();
    char dir[] = "/tmp/kf_choice_XXXXXX";
    assert_non_null(mkdtemp(dir));
    kf_ctx *ctx[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        kf_options o;
        kf_options_init(&o);
        o.target = KF_TARGET_CUDA;
        o.cache_dir = dir;
        assert_int_equal(kf_ctx_create(&o, &ctx[i]), KF_OK);
    }
    kf_graph *g = NULL;
    kf_plan *plan = measured_plan(ctx[0], &g);
    kf_cuda_exec *cold = NULL, *warm = NULL;
    prepare_gemm(ctx[0], plan, &cold);
    uint32_t gi = KF_NONE;
    for (uint32_t i = 0; i < plan->n_groups; i++)
        if (kf_cuda_exec_choice(cold, i, NULL, NULL))
            gi = i;
    if (gi == KF_NONE)
        fail_msg("the bf16 GEMM group has no measured choice on this device (%s): the test "
                 "needs the generated GEMM kernel (sm_90a)",
                 kf_cuda_exec_device_name(cold));
    uint32_t c0 = 9, c1 = 9;
    float ms0[KF_CUDA_MAX_VARIANTS] = {0}, ms1[KF_CUDA_MAX_VARIANTS] = {0};
    assert_true(kf_cuda_exec_choice(cold, gi, &c0, ms0));
    assert_false(kf_cuda_exec_choice_cached(cold, gi));
    assert_true(kf_cuda_exec_uses_cublaslt(cold)); /* one side of the measurement */
    assert_true(ms0[0] > 0 && ms0[1] > 0);
    kf_cuda_exec_destroy(cold);

    prepare_gemm(ctx[1], plan, &warm);
    assert_true(kf_cuda_exec_choice(warm, gi, &c1, ms1));
    assert_true(kf_cuda_exec_choice_cached(warm, gi));
    assert_int_equal(c1, c0);
    assert_memory_equal(ms1, ms0, sizeof ms0);
    const kf_cuda_recipe *rc = &kf_cuda_exec_recipes(warm)->recipes[gi];
    bool winner_calls_lt = false;
    for (uint32_t s = 0; s < rc->variants[c1].n_steps; s++)
        winner_calls_lt |= rc->steps[rc->variants[c1].first_step + s].kind == KF_CUDA_STEP_GEMM;
    assert_int_equal(kf_cuda_exec_uses_cublaslt(warm), winner_calls_lt);
    char *rep = NULL;
    size_t rlen = 0;
    FILE *f = open_memstream(&rep, &rlen);
    kf_cuda_exec_report(warm, true, f);
    fclose(f);
    assert_non_null(strstr(rep, "\"cached\": true"));
    assert_non_null(strstr(rep, "\"measure\": "));
    fprintf(stderr, "  choice %s (%.4f / %.4f ms) from the cache; cuBLASLt %s\n  %s\n",
            rc->variants[c1].label, (double)ms1[0], (double)ms1[1],
            winner_calls_lt ? "loaded" : "not loaded", rep);
    free(rep);
    kf_cuda_exec_destroy(warm);
    kf_plan_destroy(plan);

    /* The warm program through the public API computes the right values. */
    run_opts o = {.lo = -1, .hi = 1, .ctx = ctx[2], .report_has = "from the cache]"};
    run_and_compare(g, 1500, &o, "warm measured choice");
    kf_graph_destroy(g);
    for (int i = 0; i < 3; i++)
        kf_ctx_destroy(ctx[i]);
    assert_int_equal(kf_test_remove_dir(dir), 0);
}

/* One run of `ex` on fresh random inputs (seed `stream`), its output
 * poisoned first and judged by kf_graph_check (bf16 GEMM graphs). */
static void run_exec_checked(kf_cuda_exec *ex, kf_graph *g, uint64_t stream, const char *what) {
    char err[KF_MSG_MAX] = "";
    kf_test_rng rng = kf_test_rng_make(stream);
    size_t n_in = kf_graph_input_count(g);
    void **bound = calloc(g->n_nodes, sizeof *bound);
    kf_binding *in = calloc(n_in, sizeof *in);
    for (size_t i = 0; i < n_in; i++) {
        const kf_tensor *t = kf_graph_input(g, i);
        size_t n = (size_t)kf_tensor_numel(t), bytes = n * kf_dtype_size(kf_tensor_dtype(t));
        in[i] = (kf_binding){kf_tensor_name(t), malloc(bytes), bytes};
        kf_test_fill_input(in[i].data, t, n, &rng, -1, 1);
        bound[t->id] = in[i].data;
    }
    const kf_tensor *to = kf_graph_output(g, 0);
    size_t no = (size_t)kf_tensor_numel(to), ob = no * kf_dtype_size(kf_tensor_dtype(to));
    kf_binding out = {kf_graph_output_name(g, 0), malloc(ob), ob};
    kf_test_poison(out.data, kf_tensor_dtype(to), no);
    bound[to->id] = out.data;
    if (kf_cuda_exec_run(ex, bound, NULL, err) != KF_OK)
        fail_msg("%s: run: %s", what, err);
    kf_check_result res;
    assert_int_equal(kf_graph_check(g, in, n_in, &out, 1, &res), KF_OK);
    if (!res.pass)
        fail_msg("%s: error %g beyond %g (KF_TEST_SEED=%llu)", what, res.err, res.bound,
                 (unsigned long long)kf_test_seed());
    for (size_t i = 0; i < n_in; i++)
        free(in[i].data);
    free(in);
    free(out.data);
    free(bound);
}

/* A measured choice is timed the way runs happen: each side captured into a
 * CUDA graph and replayed, the sides interleaved. Where the capture fails
 * (here: the context's driver table refuses cuStreamBeginCapture, as a
 * driver without stream capture would) it is timed by direct launches
 * instead, the report says which, and the program still runs and matches;
 * the same program with the real driver says it was replayed. A context
 * whose runs launch directly (KF_FLAG_NO_CUDA_GRAPH) times directly too and
 * does not read the replayed choice from the cache. */
static atomic_int capture_refusals;
static kf_cu_result refuse_capture(kf_cu_stream stream, int mode) {
    (void)stream;
    (void)mode;
    atomic_fetch_add(&capture_refusals, 1);
    return 801; /* CUDA_ERROR_NOT_SUPPORTED */
}

static char *exec_report(const kf_cuda_exec *ex, bool json) {
    char *rep = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&rep, &len);
    kf_cuda_exec_report(ex, json, f);
    fclose(f);
    return rep;
}

/* The group of `ex` with a measured choice, or a failure naming the device. */
static uint32_t measured_group(const kf_cuda_exec *ex, const kf_plan *plan) {
    for (uint32_t i = 0; i < plan->n_groups; i++)
        if (kf_cuda_exec_choice(ex, i, NULL, NULL))
            return i;
    fail_msg("the bf16 GEMM group has no measured choice on this device (%s): the test needs "
             "the generated GEMM kernel (sm_90a)",
             kf_cuda_exec_device_name(ex));
    return KF_NONE;
}

static void test_a_measured_choice_is_replayed_and_timed_directly_when_capture_fails(void **state) {
    (void)state;
    REQUIRE_GPU();
    char dir[] = "/tmp/kf_replay_XXXXXX";
    assert_non_null(mkdtemp(dir));
    kf_ctx *refusing = ctx_with(dir, 0), *plain = ctx_with(dir, 0),
           *direct = ctx_with(dir, KF_FLAG_NO_CUDA_GRAPH);
    char err[KF_MSG_MAX] = "";
    const kf_cuda_driver *drv = NULL;
    assert_int_equal(kf_ctx_cuda_driver(refusing, &drv, err), KF_OK);
    kf_cuda_driver *table = (kf_cuda_driver *)drv; /* this context's own table */
    if (!table->cuStreamBeginCapture)
        fail_msg("the driver has no cuStreamBeginCapture: the replayed side cannot be tested");
    kf_graph *g = NULL;
    kf_plan *plan = measured_plan(refusing, &g);

    /* Capture refused: timed by direct launches, not stored under the
     * replay's key, and the program runs (its runs launch directly too). */
    kf_cu_result (*saved)(kf_cu_stream, int) = table->cuStreamBeginCapture;
    table->cuStreamBeginCapture = refuse_capture;
    atomic_store(&capture_refusals, 0);
    kf_cuda_exec *ex = NULL;
    prepare_gemm(refusing, plan, &ex);
    uint32_t gi = measured_group(ex, plan), chosen = 9;
    float ms[KF_CUDA_MAX_VARIANTS] = {0};
    assert_true(kf_cuda_exec_choice(ex, gi, &chosen, ms));
    assert_false(kf_cuda_exec_choice_cached(ex, gi));
    assert_true(chosen < 2 && ms[0] > 0 && ms[1] > 0 && rule_picked(ex, gi, chosen, ms));
    assert_true(atomic_load(&capture_refusals) > 0);
    char *rep = exec_report(ex, false), *json = exec_report(ex, true);
    if (!strstr(rep, ", timed by direct launches]") || !strstr(json, "\"replayed\": false"))
        fail_msg("capture refused, but the report does not say the choice was timed by direct "
                 "launches:\n%s\n%s",
                 rep, json);
    fprintf(stderr, "  capture refused: %.4f / %.4f ms by direct launches\n", (double)ms[0],
            (double)ms[1]);
    free(rep);
    free(json);
    run_exec_checked(ex, g, 1600, "measured choice timed by direct launches");
    kf_cuda_exec_destroy(ex);
    table->cuStreamBeginCapture = saved;

    /* The real driver: replayed, stored, and read back by a new exec. */
    prepare_gemm(plain, plan, &ex);
    assert_true(kf_cuda_exec_choice(ex, gi, &chosen, ms));
    assert_false(kf_cuda_exec_choice_cached(ex, gi)); /* the refused one was not stored */
    assert_true(chosen < 2 && ms[0] > 0 && ms[1] > 0 && rule_picked(ex, gi, chosen, ms));
    rep = exec_report(ex, false);
    json = exec_report(ex, true);
    if (!strstr(rep, ", timed by graph replay]") || !strstr(json, "\"replayed\": true"))
        fail_msg("the report does not say the choice was timed by graph replay:\n%s\n%s", rep,
                 json);
    fprintf(stderr, "  replayed: %.4f / %.4f ms\n", (double)ms[0], (double)ms[1]);
    free(rep);
    free(json);
    run_exec_checked(ex, g, 1601, "measured choice timed by graph replay");
    kf_cuda_exec_destroy(ex);
    prepare_gemm(plain, plan, &ex);
    assert_true(kf_cuda_exec_choice_cached(ex, gi));
    json = exec_report(ex, true);
    assert_non_null(strstr(json, "\"replayed\": true"));
    free(json);
    kf_cuda_exec_destroy(ex);

    /* Runs without graphs: timed by direct launches, not from the replay's
     * entry; then stored under its own key. */
    prepare_gemm(direct, plan, &ex);
    assert_false(kf_cuda_exec_choice_cached(ex, gi));
    rep = exec_report(ex, false);
    assert_non_null(strstr(rep, ", timed by direct launches]"));
    free(rep);
    run_exec_checked(ex, g, 1602, "measured choice of a context without graphs");
    kf_cuda_exec_destroy(ex);
    prepare_gemm(direct, plan, &ex);
    assert_true(kf_cuda_exec_choice_cached(ex, gi));
    kf_cuda_exec_destroy(ex);

    kf_plan_destroy(plan);
    kf_graph_destroy(g);
    kf_ctx_destroy(refusing);
    kf_ctx_destroy(plain);
    kf_ctx_destroy(direct);
    assert_int_equal(kf_test_remove_dir(dir), 0);
}

/* kf_options.choice_margin on a device (the warm-start regression: a
 * cuBLASLt side that won by a hair made every warm start load cuBLASLt). A
 * cold compile with margin 0 times both sides and stores both times; warm
 * compiles pick again from the stored times under their own margin and
 * time nothing: margin 0 the faster side, margin 0.99 (no cuBLASLt call
 * is 100 times faster) the generated side -- by the margin where cuBLASLt
 * was faster, as the report says -- and cuBLASLt is then not loaded at
 * all. A cold compile with that margin and no cache picks so too. The
 * programs' values match the reference. */
static bool report_has(const kf_cuda_exec *ex, bool json, const char *what) {
    char *rep = exec_report(ex, json);
    bool has = rep && strstr(rep, what);
    if (!has)
        fprintf(stderr, "  (the report lacks '%s':)\n%s\n", what, rep ? rep : "");
    free(rep);
    return has;
}

static void test_a_measured_choice_within_the_margin_keeps_cublaslt_unloaded(void **state) {
    (void)state;
    REQUIRE_GPU();
    char dir[] = "/tmp/kf_margin_XXXXXX";
    assert_non_null(mkdtemp(dir));
    kf_ctx *ctx[4] = {ctx_with_margin(dir, 0, 0.0), ctx_with_margin(dir, 0, 0.0),
                      ctx_with_margin(dir, 0, 0.99), ctx_with_margin(dir, KF_FLAG_NO_CACHE, 0.99)};
    kf_graph *g = NULL;
    kf_plan *plan = measured_plan(ctx[0], &g);
    kf_cuda_exec *ex = NULL;
    prepare_gemm(ctx[0], plan, &ex);
    uint32_t gi = measured_group(ex, plan), c0 = 9, c = 9;
    float ms0[KF_CUDA_MAX_VARIANTS] = {0}, ms[KF_CUDA_MAX_VARIANTS] = {0};
    assert_true(kf_cuda_exec_choice(ex, gi, &c0, ms0));
    assert_false(kf_cuda_exec_choice_cached(ex, gi));
    assert_true(ms0[0] > 0 && ms0[1] > 0);
    const kf_cuda_recipe *rc = &kf_cuda_exec_recipes(ex)->recipes[gi];
    assert_int_equal(rc->n_variants, 2);
    uint32_t lib = kf_cuda_variant_calls_lib(rc, 0) ? 0 : 1, gen = 1 - lib;
    assert_true(kf_cuda_variant_calls_lib(rc, lib));
    assert_false(kf_cuda_variant_calls_lib(rc, gen));
    assert_true(ms0[c0] <= ms0[1 - c0]); /* margin 0: the faster */
    bool lt_faster = ms0[lib] < ms0[gen];
    fprintf(stderr, "  %s: generated %.4f ms, cublaslt %.4f ms (%+.1f%%)\n",
            kf_cuda_exec_device_name(ex), (double)ms0[gen], (double)ms0[lib],
            100.0 * ((double)ms0[lib] / (double)ms0[gen] - 1.0));
    kf_cuda_exec_destroy(ex);

    /* warm, margin 0: the stored winner, nothing timed */
    prepare_gemm(ctx[1], plan, &ex);
    assert_true(kf_cuda_exec_choice(ex, gi, &c, ms));
    assert_true(kf_cuda_exec_choice_cached(ex, gi));
    assert_memory_equal(ms, ms0, sizeof ms);
    assert_int_equal(c, c0);
    assert_true(report_has(ex, true, "\"by_margin\": false"));
    kf_cuda_exec_destroy(ex);

    /* warm, margin 0.99: the generated side from the same times, no cuBLASLt */
    prepare_gemm(ctx[2], plan, &ex);
    assert_true(kf_cuda_exec_choice(ex, gi, &c, ms));
    assert_true(kf_cuda_exec_choice_cached(ex, gi));
    assert_memory_equal(ms, ms0, sizeof ms);
    assert_int_equal(c, gen);
    assert_false(kf_cuda_exec_uses_cublaslt(ex));
    assert_true(report_has(ex, true, lt_faster ? "\"by_margin\": true" : "\"by_margin\": false"));
    assert_true(report_has(ex, true, "\"cublaslt_loaded\": false"));
    if (lt_faster)
        assert_true(report_has(ex, false, "faster, within the 99.0% margin"));
    run_exec_checked(ex, g, 1710, "warm, margin 0.99: the generated side");
    kf_cuda_exec_destroy(ex);

    /* cold, margin 0.99, no cache: both timed, the generated side picked */
    prepare_gemm(ctx[3], plan, &ex);
    assert_true(kf_cuda_exec_choice(ex, gi, &c, ms));
    assert_false(kf_cuda_exec_choice_cached(ex, gi));
    assert_true(ms[0] > 0 && ms[1] > 0);
    assert_int_equal(c, gen);
    assert_true(
        report_has(ex, true, ms[lib] < ms[gen] ? "\"by_margin\": true" : "\"by_margin\": false"));
    run_exec_checked(ex, g, 1711, "cold, margin 0.99: the generated side");
    kf_cuda_exec_destroy(ex);

    kf_plan_destroy(plan);
    kf_graph_destroy(g);
    for (int i = 0; i < 4; i++)
        kf_ctx_destroy(ctx[i]);
    assert_int_equal(kf_test_remove_dir(dir), 0);
}

/* kf_options.tiered_compile (issue 17, the cold first call): on an empty
 * cache the GEMM group's measured choice is not known, so the exec runs
 * its cuBLASLt side from the first run and compiles the generated kernel
 * on a thread; once that is done, the next run times both sides, keeps the
 * faster, stores the choice in the cache and runs it. The outputs are right
 * before and after the swap; a new context on the same cache reads the
 * winner (no tier, nothing timed); a context without tiers on an empty
 * cache measures at prepare as before. */
static void test_a_tiered_compile_runs_cublaslt_first_then_the_measured_winner(void **state) {
    (void)state;
    REQUIRE_GPU();
    char dir[] = "/tmp/kf_tier_XXXXXX";
    assert_non_null(mkdtemp(dir));
    kf_ctx *ctx[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        kf_options o;
        kf_options_init(&o);
        assert_int_equal(o.tiered_compile, 0); /* off unless asked */
        o.target = KF_TARGET_CUDA;
        o.cache_dir = dir;
        o.tiered_compile = i < 2;
        assert_int_equal(kf_ctx_create(&o, &ctx[i]), KF_OK);
    }
    kf_graph *g = NULL;
    kf_plan *plan = measured_plan(ctx[0], &g);
    kf_cuda_exec *ex = NULL;
    prepare_gemm(ctx[0], plan, &ex);
    uint32_t gi = KF_NONE;
    for (uint32_t i = 0; i < plan->n_groups; i++)
        if (kf_cuda_exec_choice(ex, i, NULL, NULL))
            gi = i;
    if (gi == KF_NONE)
        fail_msg("the bf16 GEMM group has no measured choice on this device (%s): the test "
                 "needs the generated GEMM kernel (sm_90a)",
                 kf_cuda_exec_device_name(ex));
    const kf_cuda_recipe *rc = &kf_cuda_exec_recipes(ex)->recipes[gi];
    uint32_t c0 = 9;
    float ms[KF_CUDA_MAX_VARIANTS] = {0};
    assert_true(kf_cuda_exec_choice(ex, gi, &c0, ms));
    assert_true(kf_cuda_exec_choice_tiered(ex, gi));
    assert_false(kf_cuda_exec_choice_cached(ex, gi));
    bool lt_side = false;
    for (uint32_t s = 0; s < rc->variants[c0].n_steps; s++)
        lt_side |= rc->steps[rc->variants[c0].first_step + s].kind == KF_CUDA_STEP_GEMM;
    assert_true(lt_side);             /* the side that runs first calls cuBLASLt */
    assert_true(ms[0] == 0 && ms[1] == 0); /* nothing timed at prepare */
    /* Before the swap (at most the first run can find the compile done). */
    if (kf_cuda_exec_tier_pending(ex))
        run_exec_checked(ex, g, 1700, "tiered, before the swap");
    char err[KF_MSG_MAX] = "";
    if (kf_cuda_exec_tier_wait(ex, err) != KF_OK)
        fail_msg("the background compile: %s", err);
    run_exec_checked(ex, g, 1701, "tiered, the run that swaps");
    assert_false(kf_cuda_exec_tier_pending(ex));
    uint32_t c1 = 9;
    assert_true(kf_cuda_exec_choice(ex, gi, &c1, ms));
    assert_true(ms[0] > 0 && ms[1] > 0);
    assert_true(rule_picked(ex, gi, c1, ms));
    run_exec_checked(ex, g, 1702, "tiered, after the swap");
    char *rep = NULL;
    size_t rlen = 0;
    FILE *f = open_memstream(&rep, &rlen);
    kf_cuda_exec_report(ex, true, f);
    fclose(f);
    assert_non_null(strstr(rep, "\"tiered\": true"));
    assert_non_null(strstr(rep, "\"pending\": false"));
    assert_non_null(strstr(rep, "\"failed\": false"));
    fprintf(stderr, "  tiered: %s first, then %s (%.4f / %.4f ms)\n  %s\n",
            rc->variants[c0].label, rc->variants[c1].label, (double)ms[0], (double)ms[1], rep);
    free(rep);
    kf_cuda_exec_destroy(ex);

    /* The winner is in the cache: a tiered context reads it, times nothing. */
    kf_cuda_exec *warm = NULL;
    prepare_gemm(ctx[1], plan, &warm);
    uint32_t c2 = 9;
    float ms2[KF_CUDA_MAX_VARIANTS] = {0};
    assert_true(kf_cuda_exec_choice(warm, gi, &c2, ms2));
    assert_true(kf_cuda_exec_choice_cached(warm, gi));
    assert_false(kf_cuda_exec_choice_tiered(warm, gi));
    assert_false(kf_cuda_exec_tier_pending(warm));
    assert_int_equal(c2, c1);
    assert_memory_equal(ms2, ms, sizeof ms);
    run_exec_checked(warm, g, 1703, "warm after a tiered compile");
    kf_cuda_exec_destroy(warm);

    /* Without tiers, on an empty cache: measured at prepare, as before. */
    char dir2[] = "/tmp/kf_tier_XXXXXX";
    assert_non_null(mkdtemp(dir2));
    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CUDA;
    o.cache_dir = dir2;
    kf_ctx *plain = NULL;
    assert_int_equal(kf_ctx_create(&o, &plain), KF_OK);
    kf_cuda_exec *cold = NULL;
    prepare_gemm(plain, plan, &cold);
    assert_false(kf_cuda_exec_choice_tiered(cold, gi));
    assert_false(kf_cuda_exec_tier_pending(cold));
    assert_true(kf_cuda_exec_choice(cold, gi, NULL, ms));
    assert_true(ms[0] > 0 && ms[1] > 0);
    kf_cuda_exec_destroy(cold);
    kf_ctx_destroy(plain);
    assert_int_equal(kf_test_remove_dir(dir2), 0);

    /* Destroyed while the compile runs: cancelled, nothing leaks (ASan). */
    char dir3[] = "/tmp/kf_tier_XXXXXX";
    assert_non_null(mkdtemp(dir3));
    kf_options_init(&o);
    o.target = KF_TARGET_CUDA;
    o.cache_dir = dir3;
    o.tiered_compile = 1;
    kf_ctx *quick = NULL;
    assert_int_equal(kf_ctx_create(&o, &quick), KF_OK);
    kf_cuda_exec *gone = NULL;
    prepare_gemm(quick, plan, &gone);
    assert_true(kf_cuda_exec_choice_tiered(gone, gi));
    kf_cuda_exec_destroy(gone);
    kf_ctx_destroy(quick);
    assert_int_equal(kf_test_remove_dir(dir3), 0);

    kf_plan_destroy(plan);
    kf_graph_destroy(g);
    for (int i = 0; i < 3; i++)
        kf_ctx_destroy(ctx[i]);
    assert_int_equal(kf_test_remove_dir(dir), 0);
}

/* The member `name`'s unsigned value in a report's JSON (-1: absent). */
static long json_count(const char *json, const char *name) {
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\": ", name);
    const char *s = strstr(json, pat);
    return s ? strtol(s + strlen(pat), NULL, 10) : -1;
}

static void exec_lt_counts(kf_cuda_exec *ex, long *cached, long *heuristics) {
    char *rep = NULL;
    size_t rlen = 0;
    FILE *f = open_memstream(&rep, &rlen);
    kf_cuda_exec_report(ex, true, f);
    fclose(f);
    *cached = json_count(rep, "cublaslt_algos_cached");
    *heuristics = json_count(rep, "cublaslt_heuristics");
    free(rep);
}

/* cuBLASLt's heuristic is asked once per GEMM shape and device: a process
 * that finds the algorithms in the cache (the same directory, a new
 * context, so nothing in memory) asks it nothing, on the prepare path
 * (kf_cuda_exec_prepare binds the steps) and through kf_compile, and the
 * program computes the right values with them (f32 GEMMs, cuBLASLt's only:
 * a bias epilogue, a batched product with a residual). A cache-less context
 * asks the heuristic every time. */
static void test_cublaslt_algorithms_come_from_the_cache_in_a_warm_start(void **state) {
    (void)state;
    REQUIRE_GPU();
    const char *text = "kfg 1\nx = input(f32[96, 80])\nw = input(f32[80, 136])\n"
                       "b = input(f32[136])\nh = matmul(x, w)\ny = add(h, b)\noutput y\n"
                       "p = input(f32[3, 40, 24])\nq = input(f32[3, 24, 56])\n"
                       "r = input(f32[3, 40, 56])\npq = matmul(p, q)\nz = add(pq, r)\n"
                       "output z\n";
    char dir[] = "/tmp/kf_ltalgo_XXXXXX";
    assert_non_null(mkdtemp(dir));
    kf_ctx *ctx[4] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < 4; i++) {
        kf_options o;
        kf_options_init(&o);
        o.target = KF_TARGET_CUDA;
        o.cache_dir = dir;
        o.flags = i == 3 ? KF_FLAG_NO_CACHE : 0;
        o.gemm = KF_GEMM_CUBLASLT; /* (else f32 GEMMs measure the SIMT kernel too) */
        assert_int_equal(kf_ctx_create(&o, &ctx[i]), KF_OK);
    }
    kf_graph *g = NULL;
    assert_int_equal(kf_graph_parse(ctx[0], text, strlen(text), &g), KF_OK);
    kf_plan *plan = NULL;
    assert_int_equal(kf_plan_create(g, NULL, &plan), KF_OK);
    kf_cuda_exec *ex = NULL;
    long cached = -1, asked = -1;
    prepare_gemm(ctx[0], plan, &ex);
    assert_true(kf_cuda_exec_uses_cublaslt(ex));
    exec_lt_counts(ex, &cached, &asked);
    fprintf(stderr, "  cold: %ld algorithms from the cache, %ld heuristic calls\n", cached, asked);
    assert_int_equal(cached, 0);
    assert_true(asked >= 2);
    long cold_asked = asked;
    kf_cuda_exec_destroy(ex);

    prepare_gemm(ctx[1], plan, &ex);
    exec_lt_counts(ex, &cached, &asked);
    fprintf(stderr, "  warm: %ld algorithms from the cache, %ld heuristic calls\n", cached, asked);
    assert_int_equal(asked, 0);
    assert_int_equal(cached, cold_asked);
    kf_cuda_exec_destroy(ex);

    prepare_gemm(ctx[3], plan, &ex); /* no cache: the heuristic decides */
    exec_lt_counts(ex, &cached, &asked);
    assert_int_equal(cached, 0);
    assert_int_equal(asked, cold_asked);
    kf_cuda_exec_destroy(ex);
    kf_plan_destroy(plan);

    run_opts o = {.lo = -1, .hi = 1, .ctx = ctx[2]};
    run_and_compare(g, 1550, &o, "cuBLASLt algorithms from the cache");
    kf_program *p = NULL;
    assert_int_equal(kf_compile(ctx[2], g, &p), KF_OK);
    char *json = kf_test_report(p, KF_REPORT_JSON);
    assert_int_equal(json_count(json, "cublaslt_heuristics"), 0);
    assert_int_equal(json_count(json, "cublaslt_algos_cached"), cold_asked);
    free(json);
    kf_program_destroy(p);
    kf_graph_destroy(g);
    for (int i = 0; i < 4; i++)
        kf_ctx_destroy(ctx[i]);
    assert_int_equal(kf_test_remove_dir(dir), 0);
}

static void test_intermediates_share_device_memory_by_liveness(void **state) {
    (void)state;
    REQUIRE_GPU();
    /* Four row-wise kernels in a chain: each intermediate dies after its
     * consumer, so the arena holds fewer bytes than all buffers together. */
    const char *text = "kfg 1\nx = input(f32[64, 2048])\na = softmax(x)\nb = reduce_max(a, axis=1, "
                       "keepdim=true)\nc = sub(a, b)\nd = softmax(c)\ne = reduce_sum(d, axis=1, "
                       "keepdim=true)\nf = div(d, e)\ng = softmax(f)\noutput g\n";
    kf_graph *g = NULL;
    assert_int_equal(kf_graph_parse(G.ctx, text, strlen(text), &g), KF_OK);
    assert_int_equal(kf_graph_verify(g), KF_OK);
    kf_program *p = NULL;
    assert_int_equal(kf_compile(G.ctx, g, &p), KF_OK);
    char *r = kf_test_report(p, KF_REPORT_TEXT);
    const char *m = strstr(r, "device memory: ");
    assert_non_null(m);
    unsigned long long arena = 0, unshared = 0;
    assert_int_equal(sscanf(m, "device memory: %llu bytes in one arena (%llu", &arena, &unshared),
                     2);
    fprintf(stderr, "arena %llu bytes, %llu without reuse\n", arena, unshared);
    assert_true(arena < unshared);
    free(r);
    kf_program_destroy(p);
    run_opts o = {.lo = -2, .hi = 2};
    run_and_compare(g, 1300, &o, "softmax chain");
    kf_graph_destroy(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_unary_op_in_every_float_dtype_matches_the_reference),
        cmocka_unit_test(test_every_binary_op_broadcasts_in_every_float_dtype),
        cmocka_unit_test(test_comparisons_where_cast_and_i32_match_exactly),
        cmocka_unit_test(test_an_elementwise_chain_fuses_into_one_kernel_and_matches),
        cmocka_unit_test(test_sibling_groups_run_as_one_multi_output_kernel_and_match),
        cmocka_unit_test(test_slices_concats_and_gathers_match_in_their_consumers),
        cmocka_unit_test(test_remapped_loads_read_as_vectors_match_the_reference),
        cmocka_unit_test(test_rotate_half_pairs_match_on_ragged_and_unaligned_shapes),
        cmocka_unit_test(test_gather_clamps_an_index_outside_the_axis_on_the_gpu),
        cmocka_unit_test(test_large_elementwise_groups_take_the_bulk_path_and_match),
        cmocka_unit_test(test_bf16_packed_arithmetic_matches_the_reference_bit_for_bit),
        cmocka_unit_test(test_every_rowwise_op_in_every_float_dtype_matches),
        cmocka_unit_test(test_f64_norms_of_rows_whose_squares_overflow_match),
        cmocka_unit_test(test_f32_and_bf16_norms_of_rows_whose_squares_overflow_match),
        cmocka_unit_test(test_f32_gelu_of_large_x_rounds_to_x_as_the_reference),
        cmocka_unit_test(test_column_reductions_and_norm_prologue_epilogue_fusions_match),
        cmocka_unit_test(test_argmax_over_every_axis_matches_the_reference),
        cmocka_unit_test(test_gemm_epilogues_map_to_cublaslt_only_in_its_order_of_operations),
        cmocka_unit_test(test_batched_and_transposed_gemms_match),
        cmocka_unit_test(test_attention_runs_unfused_with_its_score_expression_and_mask),
        cmocka_unit_test(test_fused_attention_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_with_the_softmax_pinned_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_with_f32_scores_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_with_rounded_scores_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_with_trees_and_f32_scores_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_exp2_forms_match_the_reference),
        cmocka_unit_test(test_sm90_attention_with_items_apart_matches_the_reference),
        cmocka_unit_test(
            test_sm90_attention_pinned_with_trees_and_f32_scores_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_with_the_tail_longest_first_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_block_sparse_forms_match_the_reference),
        cmocka_unit_test(test_sm90_attention_forms_on_one_long_case),
        cmocka_unit_test(test_sm90_attention_bounded_scores_take_a_fixed_shift),
        cmocka_unit_test(test_sm90_attention_pair_score_form_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_lazy_rescale_and_keep_map_edges_match_the_reference),
        cmocka_unit_test(test_sm90_attention_lazy_rescale_on_ragged_cases_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_score_split_and_diagonal_match_the_reference),
        cmocka_unit_test(test_sm90_attention_alibi_diagonal_table_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_alibi_table_on_one_ragged_case),
        cmocka_unit_test(test_sm90_attention_alibi_affine_tile_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_keys_desc_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_keys_desc_on_one_ragged_case),
        cmocka_unit_test(test_sm90_attention_edge_last_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_edge_last_on_one_ragged_case),
        cmocka_unit_test(test_sm90_attention_window_peel_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_window_peel_on_one_ragged_case),
        cmocka_unit_test(test_sm90_attention_f32_alibi_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_f32_softcap_matches_the_reference),
        cmocka_unit_test(test_sm90_attention_f32_other_scores_match_the_reference),
        cmocka_unit_test(test_sm90_attention_softcap_fma_shares_match_the_reference),
        cmocka_unit_test(test_sm90_attention_wide_and_cluster_forms_match_the_reference),
        cmocka_unit_test(test_sm90_attention_wide_form_on_one_ragged_case),
        cmocka_unit_test(test_sm90_attention_multiply_by_one_folds_and_matches_the_reference),
        cmocka_unit_test(test_decode_attention_matches_the_reference),
        cmocka_unit_test(test_fused_attention_writes_the_scores_log_sum_exp),
        cmocka_unit_test(test_logsumexp_rows_match_the_reference),
        cmocka_unit_test(test_decode_attention_takes_long_queries_too),
        cmocka_unit_test(test_decode_attention_is_the_default_for_short_queries),
        cmocka_unit_test(test_decode_attention_one_split_writes_o),
        cmocka_unit_test(test_decode_attention_one_split_ragged),
        cmocka_unit_test(test_decode_attention_two_step_forms_match),
        cmocka_unit_test(test_fused_attention_falls_back_and_says_why),
        cmocka_unit_test(test_every_example_runs_on_the_gpu_and_matches_the_reference),
        cmocka_unit_test(test_fail_on_miss_names_the_kernel_then_a_filled_cache_compiles_nothing),
        cmocka_unit_test(test_cublaslt_algorithms_come_from_the_cache_in_a_warm_start),
        cmocka_unit_test(test_cublaslt_is_loaded_only_when_a_recipe_in_use_calls_it),
        cmocka_unit_test(test_intermediates_share_device_memory_by_liveness),
        cmocka_unit_test(test_recipes_of_the_report_are_the_executors_and_aot_serves_them),
        cmocka_unit_test(test_a_measured_choice_times_both_variants_and_runs_the_faster),
        cmocka_unit_test(test_a_measured_choice_is_cached_and_a_warm_compile_times_nothing),
        cmocka_unit_test(test_a_tiered_compile_runs_cublaslt_first_then_the_measured_winner),
        cmocka_unit_test(test_a_measured_choice_is_replayed_and_timed_directly_when_capture_fails),
        cmocka_unit_test(test_a_measured_choice_within_the_margin_keeps_cublaslt_unloaded),
        cmocka_unit_test(test_generated_bf16_gemms_match_the_reference),
        cmocka_unit_test(test_generated_f16_gemms_match_the_reference),
        cmocka_unit_test(test_generated_gemms_of_every_example_match),
        cmocka_unit_test(test_gemm_sibling_sets_match_the_reference),
        cmocka_unit_test(test_a_gemm_sibling_set_as_one_kernel_matches),
        cmocka_unit_test(test_gemm_sibling_sets_as_one_kernel_match_the_reference),
        cmocka_unit_test(test_a_gemm_sibling_set_as_one_kernel_in_clusters_matches),
        cmocka_unit_test(test_gemm_sibling_sets_as_one_kernel_in_clusters_match_the_reference),
        cmocka_unit_test(test_rms_norm_gamma_on_a_fragments_matches_the_reference),
        cmocka_unit_test(test_a_gemm_prepass_in_one_launch_matches),
        cmocka_unit_test(test_gemm_prepass_in_one_launch_matches_the_reference),
        cmocka_unit_test(test_a_gemm_sibling_set_as_one_sm80_kernel_matches),
        cmocka_unit_test(test_gemm_sibling_sets_as_one_sm80_kernel_match_the_reference),
        cmocka_unit_test(test_a_2cta_cluster_gemm_with_a_missing_half_matches),
        cmocka_unit_test(test_the_internal_gemm_schedules_match),
        cmocka_unit_test(test_swiglu_pairs_on_packed_pairs_match_the_reference),
        cmocka_unit_test(test_2cta_cluster_swiglu_pairs_match_the_reference),
        cmocka_unit_test(test_gemms_with_rebuilt_descriptors_match),
        cmocka_unit_test(test_pingpong_gemms_with_a_uniform_tile_counter_match),
        cmocka_unit_test(test_gemms_with_the_square_raster_match),
        cmocka_unit_test(test_a_square_raster_gemm_with_a_short_group_matches),
        cmocka_unit_test(test_a_gelu_tanh_by_mufu_gemm_matches),
        cmocka_unit_test(test_gemms_with_gelu_tanh_by_mufu_match),
        cmocka_unit_test(test_gemms_with_the_bias_staged_in_shared_memory_match),
        cmocka_unit_test(test_generated_gemms_in_2cta_clusters_match_the_reference),
        cmocka_unit_test(test_a_stream_k_gemm_matches_twice),
        cmocka_unit_test(test_stream_k_gemms_match_the_reference_twice),
        cmocka_unit_test(test_gemms_with_the_residual_prefetched_match),
        cmocka_unit_test(test_gemms_with_the_residual_by_tma_match),
        cmocka_unit_test(test_tma_store_epilogue_bf16_pairs_match),
        cmocka_unit_test(test_sm80_gemms_match_the_reference),
        cmocka_unit_test(test_measured_gemm_names_both_sides),
        cmocka_unit_test(test_split_row_norms_after_a_gemm_match_the_reference),
        cmocka_unit_test(test_head_split_rotary_epilogues_match_the_reference),
    };
    kf_test_filter();
    int failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
    if (failed == 0 && !G.have) {
        fprintf(stderr, "no CUDA device: skipped (%s)\n", G.why);
        return 77; /* ctest: SKIP_RETURN_CODE */
    }
    if (failed)
        fprintf(stderr, "replay with KF_TEST_SEED=%llu\n", (unsigned long long)kf_test_seed());
    return failed;
}
