/*
 * test_numerics.c -- the numerics judge (ir/judge.c, kf_graph_check): every
 * check in kfuse measures an output against the graph's exact value (f64, no
 * intermediate rounding) and allows twice the reference evaluator's own error
 * plus a small floor. These tests hold it to both of its promises on a
 * GPT-2-style bf16 block (examples/gpt2_block.kfg):
 *
 *   - no false failures: 200 seeds of the block, compiled for the CPU, pass
 *     on the inputs `kfuse run --seed N` draws (uniform in [-1, 1), on which
 *     attention is ill-conditioned and the reference itself is 1-2% off);
 *   - real errors are caught, on inputs scaled the way a trained model's are:
 *     a one-ulp systematic error in one op's result (injected into the
 *     reference evaluator between two ops), a wrong activation and a dropped
 *     bias (both mutations of the graph, compiled and run for the CPU).
 *
 * Why the bound takes a second reference (matmul products unrounded into
 * their epilogues): the block with cuBLASLt's BIAS arithmetic for q, k, v
 * fails a rule with the per-op reference alone on seeds where that is lucky.
 * On a GPU the sweep runs four ways (default, unfused attention, cuBLASLt
 * GEMMs, both), KF_NUMERICS_VERBOSE=1 printing each seed.
 *
 * And the judge's own rules: exact evaluation keeps values unrounded, NaN
 * never passes unless the meaning is NaN, i32 outputs are exact.
 */
#include "kf_test.h"

#include "ir/ir.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                    */
/* ------------------------------------------------------------------------ */

static kf_ctx *new_ctx(kf_target target) {
    kf_options o;
    kf_options_init(&o);
    o.target = target;
    o.flags = KF_FLAG_NO_CACHE;
    kf_ctx *ctx = NULL;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    return ctx;
}

static kf_graph *parse(kf_ctx *ctx, const char *text) {
    kf_graph *g = NULL;
    kf_status st = kf_graph_parse(ctx, text, strlen(text), &g);
    if (st != KF_OK) {
        print_error("parse failed: %s\n", g ? kf_graph_error(g) : "?");
        kf_graph_destroy(g);
        fail();
    }
    return g;
}

/* examples/gpt2_block.kfg, NUL-terminated (free it). */
static char *block_text(void) {
    const char *src = getenv("KF_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/gpt2_block.kfg", src ? src : ".");
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    assert_true(len > 0);
    rewind(f);
    char *text = malloc((size_t)len + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)len, f), (size_t)len);
    text[len] = '\0';
    fclose(f);
    return text;
}

/* The block's text with the one line that starts with `line` replaced by
 * `with` (which must end in a newline). */
static char *mutate(const char *text, const char *line, const char *with) {
    const char *at = strstr(text, line);
    assert_non_null(at);
    assert_true(at == text || at[-1] == '\n');
    const char *end = strchr(at, '\n');
    assert_non_null(end);
    size_t head = (size_t)(at - text), wl = strlen(with);
    char *out = malloc(strlen(text) + wl + 1);
    assert_non_null(out);
    memcpy(out, text, head);
    memcpy(out + head, with, wl);
    strcpy(out + head + wl, end + 1);
    return out;
}

typedef enum draw { DRAW_CLI, DRAW_MODEL } draw;

/* Inputs for the block. DRAW_CLI: every input uniform in [-1, 1), as `kfuse
 * run --seed N` draws them. DRAW_MODEL: as an initialized model's: x in
 * [-1, 1), weights W[k, n] in [-1, 1) / sqrt(k), norm weights in [0.9, 1.1),
 * biases in [-0.1, 0.1). */
static kf_binding *make_inputs(kf_graph *g, kf_test_rng *r, draw how) {
    size_t n = kf_graph_input_count(g);
    kf_binding *in = calloc(n, sizeof *in);
    assert_non_null(in);
    for (size_t i = 0; i < n; i++) {
        kf_tensor *t = kf_graph_input(g, i);
        kf_dtype d = kf_tensor_dtype(t);
        size_t numel = (size_t)kf_tensor_numel(t);
        const char *name = kf_tensor_name(t);
        in[i].name = name;
        in[i].size = numel * kf_dtype_size(d);
        in[i].data = malloc(in[i].size);
        assert_non_null(in[i].data);
        double lo = -1.0, hi = 1.0;
        if (how == DRAW_MODEL && kf_tensor_rank(t) == 2 && name[0] == 'w') {
            hi = 1.0 / sqrt((double)kf_tensor_dim(t, 0));
            lo = -hi;
        } else if (how == DRAW_MODEL && strstr(name, "_w")) {
            lo = 0.9, hi = 1.1;
        } else if (how == DRAW_MODEL && name[0] != 'x') {
            lo = -0.1, hi = 0.1;
        }
        kf_test_fill_input(in[i].data, t, numel, r, lo, hi);
    }
    return in;
}

static kf_binding *make_outputs(kf_graph *g) {
    size_t n = kf_graph_output_count(g);
    kf_binding *out = calloc(n, sizeof *out);
    assert_non_null(out);
    for (size_t i = 0; i < n; i++) {
        kf_tensor *t = kf_graph_output(g, i);
        out[i].name = kf_graph_output_name(g, i);
        out[i].size = (size_t)kf_tensor_numel(t) * kf_dtype_size(kf_tensor_dtype(t));
        out[i].data = malloc(out[i].size);
        assert_non_null(out[i].data);
    }
    return out;
}

static void poison(kf_graph *g, kf_binding *out) {
    for (size_t i = 0; i < kf_graph_output_count(g); i++) {
        kf_tensor *t = kf_graph_output(g, i);
        kf_test_poison(out[i].data, kf_tensor_dtype(t), (size_t)kf_tensor_numel(t));
    }
}

static void free_bindings(kf_binding *b, size_t n) {
    for (size_t i = 0; b && i < n; i++)
        free(b[i].data);
    free(b);
}

/* Judges the block's single output `out` (from the same inputs) against g. */
static kf_check_result judge(kf_graph *g, const kf_binding *in, const kf_binding *out) {
    kf_check_result res;
    memset(&res, 0, sizeof res);
    kf_status st = kf_graph_check(g, in, kf_graph_input_count(g), out, 1, &res);
    if (st != KF_OK)
        fail_msg("kf_graph_check: %s: %s", kf_status_str(st), kf_graph_error(g));
    return res;
}

/* bf16 value v one ulp further from zero (zero, inf and NaN stay). */
static double bf16_ulp_up(double v) {
    uint16_t b = kf_f32_to_bf16((float)v);
    if ((b & 0x7FFFu) == 0 || (b & 0x7F80u) == 0x7F80u)
        return v;
    return kf_bf16_to_f32((uint16_t)(b + 1u));
}

/* Runs the reference evaluator over g tensor by tensor, moving every element
 * of tensor `bad` one bf16 ulp away from zero as it is computed -- a backend
 * with a systematic one-ulp error in one op -- and stores the output. */
static void eval_with_ulp_error(kf_graph *g, const kf_binding *in, uint32_t bad, kf_binding *out) {
    kf_eval_state st = {g, kf_mem_calloc(&g->mem, g->n_nodes, sizeof(double *)), false, NULL};
    assert_non_null(st.values);
    for (uint32_t k = 0; k < g->n_inputs; k++) {
        const kf_tensor *t = g->inputs[k];
        size_t n = (size_t)kf_ir_numel(t);
        st.values[t->id] = kf_mem_alloc(&g->mem, n * sizeof(double));
        assert_non_null(st.values[t->id]);
        for (size_t i = 0; i < kf_graph_input_count(g); i++)
            if (strcmp(in[i].name, t->name) == 0)
                for (size_t e = 0; e < n; e++)
                    st.values[t->id][e] = kf_ir_load(in[i].data, t->dtype, (int64_t)e);
    }
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const kf_tensor *t = g->nodes[i];
        if (t->op == KF_OP_INPUT)
            continue;
        assert_int_equal(kf_ir_eval_node(&st, t), KF_OK);
        if (i == bad)
            for (int64_t e = 0; e < kf_ir_numel(t); e++)
                st.values[i][e] = bf16_ulp_up(st.values[i][e]);
    }
    const kf_tensor *y = g->outputs[0].tensor;
    for (int64_t e = 0; e < kf_ir_numel(y); e++)
        kf_ir_store(out[0].data, y->dtype, e, st.values[y->id][e]);
    kf_ir_eval_release(&st);
}

/* ------------------------------------------------------------------------ */
/* The judge's rules                                                          */
/* ------------------------------------------------------------------------ */

static void test_exact_evaluation_keeps_every_float_value_unrounded(void **state) {
    (void)state;
    kf_ctx *ctx = new_ctx(KF_TARGET_CPU);
    /* 1 + 2^-9 is not a bf16 (8 significant bits): the reference rounds the
     * sum back to 1 and the cast of it too; the exact evaluation keeps both. */
    kf_graph *g = parse(ctx, "kfg 1\nx = input(bf16[2])\nt = input(bf16[2])\ns = add(x, t)\n"
                             "c = cast(s, f32)\nk = cast(c, bf16)\n"
                             "f = cast(c, i32)\noutput k\noutput f\n");
    uint16_t x[2] = {kf_f32_to_bf16(1.0f), kf_f32_to_bf16(2.5f)};
    uint16_t t[2] = {kf_f32_to_bf16(0x1p-9f), kf_f32_to_bf16(-0.25f)};
    const void *data[2] = {x, t};
    kf_eval_state ref, exact;
    assert_int_equal(kf_ir_eval(g, data, &ref), KF_OK);
    assert_int_equal(kf_ir_eval_exact(g, data, &exact), KF_OK);
    uint32_t s = g->outputs[0].tensor->src[0]->src[0]->id; /* k <- c <- s */
    assert_true(ref.values[s][0] == 1.0);
    assert_true(exact.values[s][0] == 1.0 + 0x1p-9);
    uint32_t k = g->outputs[0].tensor->id, f = g->outputs[1].tensor->id;
    assert_true(ref.values[k][0] == 1.0);
    assert_true(exact.values[k][0] == 1.0 + 0x1p-9); /* a float cast rounds nothing */
    assert_true(exact.values[f][1] == 2.0);          /* an integer cast still truncates */
    kf_ir_eval_release(&ref);
    kf_ir_eval_release(&exact);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
}

static void test_judge_allows_twice_the_references_error_and_no_stray_nan(void **state) {
    (void)state;
    kf_ctx *ctx = new_ctx(KF_TARGET_CPU);
    kf_graph *g = parse(ctx, "kfg 1\nx = input(f32[4])\ny = sqrt(x)\noutput y\n");
    float x[4] = {1.0f, 2.0f, 3.0f, -1.0f};
    float y[4];
    kf_binding in = {"x", x, sizeof x}, out = {"y", y, sizeof y};
    for (int i = 0; i < 4; i++)
        y[i] = (float)sqrt((double)x[i]);
    kf_check_result r = judge(g, &in, &out);
    assert_true(r.pass); /* the correctly rounded result, NaN where sqrt(-1) is */
    assert_true(r.err > 0.0 && r.err <= r.bound);
    assert_true(r.ref_err == r.err); /* it is the reference's result */
    y[3] = 0.0f;                     /* a number where the meaning is NaN */
    assert_false(judge(g, &in, &out).pass);
    y[3] = NAN;
    y[0] = NAN; /* a NaN where the meaning is 1 */
    r = judge(g, &in, &out);
    assert_false(r.pass);
    assert_true(isinf(r.err));
    y[0] = 1.0f;
    y[1] = y[1] * (1.0f + 1e-4f); /* 1e-4 off: beyond the 1e-5 floor */
    assert_false(judge(g, &in, &out).pass);
    kf_graph_destroy(g);

    g = parse(ctx, "kfg 1\nx = input(i32[3])\ny = add(x, x)\noutput y\n");
    int32_t xi[3] = {1, -2, 2147483647}, yi[3] = {2, -4, 2147483647}; /* saturates */
    kf_binding ini = {"x", xi, sizeof xi}, outi = {"y", yi, sizeof yi};
    assert_true(judge(g, &ini, &outi).pass);
    yi[1] = -3;
    assert_false(judge(g, &ini, &outi).pass);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
}

static void test_check_refuses_bad_bindings_like_eval(void **state) {
    (void)state;
    kf_ctx *ctx = new_ctx(KF_TARGET_CPU);
    kf_graph *g = parse(ctx, "kfg 1\nx = input(f32[2])\ny = exp(x)\noutput y\n");
    float x[2] = {0}, y[2] = {1, 1};
    kf_binding in = {"x", x, sizeof x}, out = {"y", y, sizeof y}, bad = {"z", y, sizeof y};
    kf_check_result r;
    assert_int_equal(kf_graph_check(g, &in, 1, &out, 1, NULL), KF_ERR_INVALID_ARGUMENT);
    assert_int_equal(kf_graph_check(g, &in, 1, &bad, 1, &r), KF_ERR_NOT_FOUND);
    assert_non_null(strstr(kf_graph_error(g), "kf_graph_check: output binding 0 names 'z'"));
    assert_int_equal(kf_graph_check(g, NULL, 0, &out, 1, &r), KF_ERR_NOT_FOUND);
    assert_int_equal(kf_graph_check(NULL, &in, 1, &out, 1, &r), KF_ERR_INVALID_ARGUMENT);
    assert_int_equal(kf_graph_check(g, &in, 1, &out, 1, &r), KF_OK);
    assert_true(r.pass);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------ */
/* The GPT-2 block: no false failures                                         */
/* ------------------------------------------------------------------------ */

/* KF_NUMERICS_SEEDS overrides the 200 seeds (a quick local run). */
static int seed_count(void) {
    const char *env = getenv("KF_NUMERICS_SEEDS");
    return env && *env ? atoi(env) : 200;
}

/* KF_NUMERICS_VERBOSE=1 prints every seed's errors (a bisection's table). */
static bool verbose(void) {
    const char *env = getenv("KF_NUMERICS_VERBOSE");
    return env && *env && *env != '0';
}

/* The bound of the rule before the fused reference: 2 * max(ref_err,
 * round_err) + floor (the floor is what the bound adds to the larger). */
static double old_bound(const kf_check_result *r) {
    double now = KF_JUDGE_REF_FACTOR * fmax(fmax(r->ref_err, r->fused_err), r->round_err);
    return r->bound - now + KF_JUDGE_REF_FACTOR * fmax(r->ref_err, r->round_err);
}

/* On CUDA every seed runs twice, and the two outputs must be the same bits:
 * no kernel of the block is nondeterministic (no atomics in a reduction, no
 * split-K whose order changes). KF_NUMERICS_VERBOSE=1 also prints the
 * program's report once (which kernel or cuBLASLt ran each group; a measured
 * choice names its winner) and every seed's errors. The inputs come from the
 * run's KF_TEST_SEED (printed), so each run of the suite draws 200 new sets:
 * replay a run with KF_TEST_SEED=N. */
static void sweep(kf_target target, unsigned flags, kf_gemm_mode gemm, const char *label) {
    kf_options o;
    kf_options_init(&o);
    o.target = target;
    o.flags = KF_FLAG_NO_CACHE | flags;
    o.gemm = gemm;
    kf_ctx *ctx = NULL;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    char *text = block_text();
    kf_graph *g = parse(ctx, text);
    kf_program *p = NULL;
    kf_status st = kf_compile(ctx, g, &p);
    if (st == KF_ERR_UNSUPPORTED) {
        print_message("%s: skipped: %s\n", label, kf_graph_error(g));
        kf_graph_destroy(g);
        free(text);
        kf_ctx_destroy(ctx);
        skip();
    }
    assert_int_equal(st, KF_OK);
    if (verbose() && target == KF_TARGET_CUDA)
        assert_int_equal(kf_program_report(p, KF_REPORT_TEXT, stdout), KF_OK);
    size_t n_in = kf_graph_input_count(g);
    kf_binding *out = make_outputs(g);
    kf_binding *ref = make_outputs(g);
    kf_binding *again = make_outputs(g);
    int seeds = seed_count(), failed = 0, old_failed = 0, judge_failed = 0;
    double worst = 0.0, worst_ref = 0.0, ref_max = 0.0, old_worst = 0.0, worst_both = 0.0;
    for (int s = 0; s < seeds; s++) {
        kf_test_rng r = kf_test_rng_make(1000u + (uint64_t)s);
        kf_binding *in = make_inputs(g, &r, DRAW_CLI);
        poison(g, out);
        assert_int_equal(kf_program_run(p, in, n_in, out, 1, NULL), KF_OK);
        if (target == KF_TARGET_CUDA) { /* the same program, the same inputs: the same bits */
            poison(g, again);
            assert_int_equal(kf_program_run(p, in, n_in, again, 1, NULL), KF_OK);
            if (memcmp(out[0].data, again[0].data, out[0].size) != 0)
                fail_msg("%s: seed %d: two runs of one program on the same inputs differ", label,
                         s);
        }
        kf_check_result res = judge(g, in, out);
        /* On the GPU, the rule this judge replaced, for the record:
         * ||out - ref|| / ||ref|| within the bf16 tolerance (the CPU skips
         * the third evaluation: its suite runs under ASan). */
        if (target == KF_TARGET_CUDA) {
            assert_int_equal(kf_graph_eval(g, in, n_in, ref, 1), KF_OK);
            double old = kf_ir_rel_err(out[0].data, ref[0].data, KF_DTYPE_BF16,
                                       kf_tensor_numel(kf_graph_output(g, 0)));
            old_worst = fmax(old_worst, old);
            old_failed += !(old <= kf_ir_tolerance(KF_DTYPE_BF16));
        }
        double ratio = res.err / res.ref_err;
        double both = res.err / fmax(res.ref_err, res.fused_err);
        if (!(ratio <= worst)) {
            worst = ratio;
            worst_ref = res.ref_err;
        }
        worst_both = fmax(worst_both, both);
        ref_max = fmax(ref_max, res.ref_err);
        judge_failed += !(res.err <= old_bound(&res));
        if (verbose())
            print_message("%s: seed %d: err %.4g ref_err %.4g fused_err %.4g err/ref_err %.3f "
                          "err/max %.3f err/fused_err %.3f %s%s\n",
                          label, s, res.err, res.ref_err, res.fused_err, ratio, both,
                          res.err / res.fused_err, res.pass ? "pass" : "FAIL",
                          res.err <= old_bound(&res) ? "" : " (fails the ref_err-only rule)");
        if (!res.pass) {
            print_error("%s: seed %d: err %g > bound %g (ref_err %g, fused_err %g; "
                        "KF_TEST_SEED=%llu)\n",
                        label, s, res.err, res.bound, res.ref_err, res.fused_err,
                        (unsigned long long)kf_test_seed());
            failed++;
        }
        free_bindings(in, n_in);
    }
    print_message("%s: KF_TEST_SEED=%llu, %d seeds, %d failed; the reference's own error up to "
                  "%.3g; the worst err/ref_err %.3f (at ref_err %.3g), err/max(ref_err, "
                  "fused_err) %.3f; the rule with ref_err alone would have failed %d\n",
                  label, (unsigned long long)kf_test_seed(), seeds, failed, ref_max, worst,
                  worst_ref, worst_both, judge_failed);
    if (target == KF_TARGET_CUDA)
        print_message("%s: the old rule (||out - ref|| / ||ref|| <= %g) would have failed %d "
                      "(worst %.3g); every seed's two runs gave the same bits\n",
                      label, kf_ir_tolerance(KF_DTYPE_BF16), old_failed, old_worst);
    assert_int_equal(failed, 0);
    free_bindings(again, 1);
    free_bindings(ref, 1);
    free_bindings(out, 1);
    kf_program_destroy(p);
    kf_graph_destroy(g);
    free(text);
    kf_ctx_destroy(ctx);
}

static void test_gpt2_block_passes_200_seeds_on_the_cpu(void **state) {
    (void)state;
    sweep(KF_TARGET_CPU, 0, KF_GEMM_AUTO, "gpt2 block, cpu");
}

/* On a GPU (skipped, visibly, without one): the default recipes (the fused
 * attention kernel; each GEMM group measured between the generated kernel
 * and cuBLASLt), and each of the two turned off, and both -- the bisection
 * of a failure, one test each (KF_TEST_FILTER picks one). */
static void test_gpt2_block_passes_200_seeds_on_the_gpu(void **state) {
    (void)state;
    sweep(KF_TARGET_CUDA, 0, KF_GEMM_AUTO, "gpt2 block, cuda");
}

static void test_gpt2_block_passes_200_seeds_on_the_gpu_unfused_attention(void **state) {
    (void)state;
    sweep(KF_TARGET_CUDA, KF_FLAG_UNFUSED_ATTENTION, KF_GEMM_AUTO,
          "gpt2 block, cuda, unfused attention");
}

static void test_gpt2_block_passes_200_seeds_on_the_gpu_cublaslt(void **state) {
    (void)state;
    sweep(KF_TARGET_CUDA, 0, KF_GEMM_CUBLASLT, "gpt2 block, cuda, gemm cublaslt");
}

static void test_gpt2_block_passes_200_seeds_on_the_gpu_unfused_cublaslt(void **state) {
    (void)state;
    sweep(KF_TARGET_CUDA, KF_FLAG_UNFUSED_ATTENTION, KF_GEMM_CUBLASLT,
          "gpt2 block, cuda, unfused attention, gemm cublaslt");
}

/* kfuse's generated GEMM kernels for every GEMM group (wgmma on sm_90a): the
 * third arithmetic a GEMM group may run, besides cuBLASLt's and a measured
 * choice between the two (which, timed, may pick either). */
static void test_gpt2_block_passes_200_seeds_on_the_gpu_generated(void **state) {
    (void)state;
    sweep(KF_TARGET_CUDA, 0, KF_GEMM_GENERATED, "gpt2 block, cuda, gemm generated");
}

static void test_gpt2_block_passes_200_seeds_on_the_gpu_unfused_generated(void **state) {
    (void)state;
    sweep(KF_TARGET_CUDA, KF_FLAG_UNFUSED_ATTENTION, KF_GEMM_GENERATED,
          "gpt2 block, cuda, unfused attention, gemm generated");
}

/* The block evaluated as the reference does, except that the tensors named
 * in `keep` (NULL-terminated) are not rounded to their dtype -- a backend
 * that keeps those values in registers --, and stored into out. */
static void eval_keeping(kf_graph *g, const kf_binding *in, const char *const *names,
                         kf_binding *out) {
    bool *keep = kf_mem_calloc(&g->mem, g->n_nodes, sizeof(bool));
    assert_non_null(keep);
    kf_eval_state st = {g, kf_mem_calloc(&g->mem, g->n_nodes, sizeof(double *)), false, keep};
    assert_non_null(st.values);
    for (uint32_t i = 0; i < g->n_nodes; i++)
        for (int k = 0; names[k]; k++)
            keep[i] |= g->nodes[i]->name && !strcmp(g->nodes[i]->name, names[k]);
    for (uint32_t k = 0; k < g->n_inputs; k++) {
        const kf_tensor *t = g->inputs[k];
        size_t n = (size_t)kf_ir_numel(t);
        st.values[t->id] = kf_mem_alloc(&g->mem, n * sizeof(double));
        assert_non_null(st.values[t->id]);
        for (size_t i = 0; i < kf_graph_input_count(g); i++)
            if (strcmp(in[i].name, t->name) == 0)
                for (size_t e = 0; e < n; e++)
                    st.values[t->id][e] = kf_ir_load(in[i].data, t->dtype, (int64_t)e);
    }
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op != KF_OP_INPUT)
            assert_int_equal(kf_ir_eval_node(&st, g->nodes[i]), KF_OK);
    const kf_tensor *y = g->outputs[0].tensor;
    for (int64_t e = 0; e < kf_ir_numel(y); e++)
        kf_ir_store(out[0].data, y->dtype, e, st.values[y->id][e]);
    kf_ir_eval_release(&st);
    kf_mem_free(&g->mem, keep, g->n_nodes * sizeof(bool));
}

/* q, k and v rounded once after their bias -- the product unrounded into the
 * add, as cuBLASLt's BIAS epilogue computes it; nothing else changed. */
static void eval_with_single_rounded_qkv(kf_graph *g, const kf_binding *in, kf_binding *out) {
    static const char *const qkv[] = {"q0", "k0", "v0", NULL};
    eval_keeping(g, in, qkv, out);
}

/* Why the bound takes the fused reference too: on the CLI's inputs the
 * block's attention is ill-conditioned (scores of a few tens, whose bf16 ulp
 * of 0.25 moves a softmax weight by up to 13%), so one reference realization
 * is one sample of an error that equally good roundings draw independently.
 * The block with q, k, v rounded once after the bias (cuBLASLt's BIAS
 * epilogue; nothing else changed) lands 2.13-2.25x as far from the exact
 * value as the per-op reference on three of 1,600 seeds (a sweep of
 * KF_TEST_SEED=7, replayed here), so the rule with ref_err alone fails it
 * there. The fused reference is the arithmetic kfuse's GPU kernels now
 * compute (every matmul product unrounded into its epilogue, the attention
 * scores' included), and on seed 863 it is itself 2.1x as far as the
 * per-op reference: the old rule failed the exact arithmetic of cuBLASLt's
 * epilogues. This GEMM-only variant stays a third realization
 * (its scores rounded before the scale, the fused reference's not): the new
 * bound is printed for it, not asserted (1568 exceeds it, by 7%). */
static void test_one_reference_realization_is_one_sample_on_ill_conditioned_seeds(void **state) {
    (void)state;
    kf_ctx *ctx = new_ctx(KF_TARGET_CPU);
    char *text = block_text();
    kf_graph *g = parse(ctx, text);
    kf_binding *out = make_outputs(g);
    const int known[3] = {493, 863, 1568};
    int fused_over = 0;
    for (int s = 0; s < 3; s++) {
        kf_test_rng r = {7u ^ ((1000u + (uint64_t)known[s]) * 0x9E3779B97F4A7C15ull)};
        kf_binding *in = make_inputs(g, &r, DRAW_CLI);
        poison(g, out);
        eval_with_single_rounded_qkv(g, in, out);
        kf_check_result res = judge(g, in, out);
        print_message("  seed %d of KF_TEST_SEED=7: err %.4g, ref_err %.4g (x%.2f), "
                      "fused_err %.4g, bound %.4g (%s)\n",
                      known[s], res.err, res.ref_err, res.err / res.ref_err, res.fused_err,
                      res.bound, res.pass ? "pass" : "fail");
        assert_false(res.err <= old_bound(&res)); /* the old rule's false failure */
        /* the fused reference's own output, judged */
        kf_eval_state fz;
        const void *data[32];
        assert_true(kf_graph_input_count(g) <= 32);
        for (size_t i = 0; i < kf_graph_input_count(g); i++)
            data[i] = in[i].data;
        assert_int_equal(kf_ir_eval_fused(g, data, &fz), KF_OK);
        const kf_tensor *y = g->outputs[0].tensor;
        for (int64_t e = 0; e < kf_ir_numel(y); e++)
            kf_ir_store(out[0].data, y->dtype, e, fz.values[y->id][e]);
        kf_ir_eval_release(&fz);
        res = judge(g, in, out);
        print_message("  the fused reference itself: err %.4g = x%.2f ref_err\n", res.err,
                      res.err / res.ref_err);
        assert_true(res.pass);
        fused_over += !(res.err <= old_bound(&res));
        free_bindings(in, kf_graph_input_count(g));
    }
    assert_true(fused_over >= 1); /* the old rule failed cuBLASLt's own arithmetic */
    free_bindings(out, 1);
    kf_graph_destroy(g);
    free(text);
    kf_ctx_destroy(ctx);
}

/* The unfused attention computes a realization of its own: its GEMM stores
 * Q.K^T rounded (no epilogue), the softmax kernel applies the scale and mask
 * to it rounding each step as the reference does, and every other GEMM takes
 * its product unrounded into its epilogue. On an H200 the GPU's error divided
 * by this realization's was 0.84-1.01 over 400 seeds (tests'
 * KF_NUMERICS_VERBOSE tables against this evaluation offline), while against
 * the per-op and the fused references it ranged over 0.39-2.33: the GPU was
 * a third sample of the ill-conditioned attention's rounding error, which
 * once drew 2.097x the per-op reference's. So the judge's fused_err is the
 * larger of the fused realization's and this one's
 * (kf_ir_eval_fused_scores), and it must be this realization exactly. */
static void test_the_unfused_attentions_arithmetic_is_one_of_the_judges_realizations(void **state) {
    (void)state;
    kf_ctx *ctx = new_ctx(KF_TARGET_CPU);
    char *text = block_text();
    kf_graph *g = parse(ctx, text);
    kf_binding *out = make_outputs(g);
    static const char *const unfused[] = {"q0", "k0", "v0", "proj0", "up", "down", NULL};
    static const char *const fused[] = {"q0", "k0", "v0", "proj0", "up", "down", "scores", NULL};
    int farthest = 0;
    for (int s = 0; s < 4; s++) {
        kf_test_rng r = {7u ^ ((1000u + (uint64_t)s) * 0x9E3779B97F4A7C15ull)};
        kf_binding *in = make_inputs(g, &r, DRAW_CLI);
        poison(g, out);
        eval_keeping(g, in, fused, out);
        kf_check_result f = judge(g, in, out);
        poison(g, out);
        eval_keeping(g, in, unfused, out);
        kf_check_result u = judge(g, in, out);
        print_message("  seed %d: ref_err %.4g, the fused realization's %.4g, the unfused "
                      "attention's %.4g; fused_err %.4g\n",
                      s, u.ref_err, f.err, u.err, u.fused_err);
        assert_true(f.pass && u.pass);
        /* fused_err is the larger of the two realizations' errors, exactly */
        assert_true(fabs(u.fused_err - fmax(f.err, u.err)) <= 1e-12 * u.fused_err);
        farthest += u.err > f.err && u.err > u.ref_err;
        free_bindings(in, kf_graph_input_count(g));
    }
    /* on some seeds it is the farthest of the three: the bound grew there */
    assert_true(farthest >= 1);
    free_bindings(out, 1);
    kf_graph_destroy(g);
    free(text);
    kf_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------ */
/* The GPT-2 block: real errors are caught                                    */
/* ------------------------------------------------------------------------ */

/* Seeds per injected error: each must be caught on every one. */
enum { CATCH_SEEDS = 8 };

/* A one-ulp error is visible at the output only where the output's own bf16
 * rounding does not swallow it: the block ends in y = x1 + down_b, and the
 * residual stream x1 is larger than either branch, so one ulp of a branch
 * value is a fraction of an ulp of y. The final op must be caught on every
 * seed; every other op is measured and printed (the table in the report). */
static void test_one_ulp_systematic_error_in_one_op_is_caught(void **state) {
    (void)state;
    kf_ctx *ctx = new_ctx(KF_TARGET_CPU);
    char *text = block_text();
    kf_graph *g = parse(ctx, text);
    size_t n_in = kf_graph_input_count(g);
    kf_binding *out = make_outputs(g);
    for (uint32_t id = 0; id < g->n_nodes; id++) {
        const kf_tensor *t = g->nodes[id];
        if (t->op == KF_OP_INPUT || t->op == KF_OP_CONST || !kf_dtype_is_float(t->dtype))
            continue;
        const char *name = t->name ? t->name : "?";
        bool required = t == g->outputs[0].tensor;
        int caught = 0, seeds = required ? 2 * CATCH_SEEDS : CATCH_SEEDS / 2;
        double ratio = 0.0;
        for (int s = 0; s < seeds; s++) {
            kf_test_rng r = kf_test_rng_make(2000u + (uint64_t)s);
            kf_binding *in = make_inputs(g, &r, DRAW_MODEL);
            poison(g, out);
            eval_with_ulp_error(g, in, id, out);
            kf_check_result res = judge(g, in, out);
            caught += !res.pass;
            ratio += res.err / res.bound / seeds;
            free_bindings(in, n_in);
        }
        print_message("  +1 ulp in %-7s (%-10s): caught %2d/%2d, err/bound %.2f%s\n", name,
                      kf_op_get(t->op)->name, caught, seeds, ratio,
                      required ? "  [the output: required]" : "");
        if (required)
            assert_int_equal(caught, seeds);
    }
    free_bindings(out, 1);
    kf_graph_destroy(g);
    free(text);
    kf_ctx_destroy(ctx);
}

/* Compiles the block with one line replaced, runs it for the CPU on the same
 * inputs as the block, and asserts the judge fails it on every seed while
 * the true block passes on each. */
static void assert_mutation_caught(const char *line, const char *with, bool required) {
    kf_ctx *ctx = new_ctx(KF_TARGET_CPU);
    char *text = block_text(), *bad_text = mutate(text, line, with);
    kf_graph *g = parse(ctx, text), *bad = parse(ctx, bad_text);
    kf_program *p = NULL, *pb = NULL;
    kf_status st = kf_compile(ctx, g, &p);
    if (st == KF_ERR_UNSUPPORTED) {
        print_message("skipped: %s\n", kf_graph_error(g));
        skip();
    }
    assert_int_equal(st, KF_OK);
    assert_int_equal(kf_compile(ctx, bad, &pb), KF_OK);
    size_t n_in = kf_graph_input_count(g);
    kf_binding *out = make_outputs(g);
    for (int s = 0; s < CATCH_SEEDS; s++) {
        kf_test_rng r = kf_test_rng_make(3000u + (uint64_t)s);
        kf_binding *in = make_inputs(g, &r, DRAW_MODEL);
        poison(g, out);
        assert_int_equal(kf_program_run(p, in, n_in, out, 1, NULL), KF_OK);
        kf_check_result good = judge(g, in, out);
        poison(g, out);
        assert_int_equal(kf_program_run(pb, in, n_in, out, 1, NULL), KF_OK);
        kf_check_result res = judge(g, in, out);
        if (s == 0 || (!required && !res.pass))
            print_message("  '%s' -> '%.*s': err %.3g, bound %.3g (the true block: err %.3g)\n",
                          line, (int)strcspn(with, "\n"), with, res.err, res.bound, good.err);
        assert_true(good.pass);
        if (required)
            assert_false(res.pass);
        free_bindings(in, n_in);
    }
    free_bindings(out, 1);
    kf_program_destroy(pb);
    kf_program_destroy(p);
    kf_graph_destroy(bad);
    kf_graph_destroy(g);
    free(bad_text);
    free(text);
    kf_ctx_destroy(ctx);
}

static void test_a_wrong_activation_is_caught(void **state) {
    (void)state;
    assert_mutation_caught("act = gelu_tanh(up_b)", "act = silu(up_b)\n", true);
    assert_mutation_caught("act = gelu_tanh(up_b)", "act = relu(up_b)\n", true);
    /* gelu (erf) for gelu_tanh: at most 5e-4 apart, below one bf16 ulp of
     * most values, so no bf16 check can see it; printed, not required. */
    assert_mutation_caught("act = gelu_tanh(up_b)", "act = gelu(up_b)\n", false);
}

static void test_a_dropped_bias_is_caught(void **state) {
    (void)state;
    /* sub(b, b): the bias input stays bound, its value is gone */
    assert_mutation_caught("down_b = add(down, b2)", "zb = sub(b2, b2)\ndown_b = add(down, zb)\n",
                           true);
    assert_mutation_caught("up_b = add(up, b1)", "zb = sub(b1, b1)\nup_b = add(up, zb)\n", true);
    /* q's bias moves the attention weights, whose effect on y is about as
     * large as the reference's own error: printed, not required. */
    assert_mutation_caught("q = add(q0, bq)", "zb = sub(bq, bq)\nq = add(q0, zb)\n", false);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_evaluation_keeps_every_float_value_unrounded),
        cmocka_unit_test(test_judge_allows_twice_the_references_error_and_no_stray_nan),
        cmocka_unit_test(test_check_refuses_bad_bindings_like_eval),
        cmocka_unit_test(test_gpt2_block_passes_200_seeds_on_the_cpu),
        cmocka_unit_test(test_gpt2_block_passes_200_seeds_on_the_gpu),
        cmocka_unit_test(test_gpt2_block_passes_200_seeds_on_the_gpu_unfused_attention),
        cmocka_unit_test(test_gpt2_block_passes_200_seeds_on_the_gpu_cublaslt),
        cmocka_unit_test(test_gpt2_block_passes_200_seeds_on_the_gpu_unfused_cublaslt),
        cmocka_unit_test(test_gpt2_block_passes_200_seeds_on_the_gpu_generated),
        cmocka_unit_test(test_gpt2_block_passes_200_seeds_on_the_gpu_unfused_generated),
        cmocka_unit_test(test_one_reference_realization_is_one_sample_on_ill_conditioned_seeds),
        cmocka_unit_test(test_the_unfused_attentions_arithmetic_is_one_of_the_judges_realizations),
        cmocka_unit_test(test_one_ulp_systematic_error_in_one_op_is_caught),
        cmocka_unit_test(test_a_wrong_activation_is_caught),
        cmocka_unit_test(test_a_dropped_bias_is_caught),
    };
    return kf_test_run(tests);
}
