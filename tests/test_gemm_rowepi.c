/*
 * test_gemm_rowepi.c -- on the GPU: a norm or softmax of a GEMM's rows run in
 * the generated kernel's tile (the row epilogue, cg_gemm_epi.c's kf_pre and
 * kf_epi, the rows' statistics reduced by the templates), on the sm_90a
 * kernel (--gemm generated) and the sm_80 kernel forced (--gemm sm80: it
 * runs on any GPU from sm_80); and the split row form (rows longer than a
 * tile) on the sm_80 kernel. Every case's report must name the form, so a
 * case that fell back to the cuBLASLt side fails rather than passing on it.
 *
 * Inputs are fresh random values (KF_TEST_SEED replays a run); outputs are
 * poisoned (NaN) before each run; each output is judged by kf_graph_check
 * against the exact value within the per-dtype bound; NaN never passes.
 * Without a driver or a device every test is skipped with a visible message
 * and the binary exits 77 (ctest: skipped, never passed).
 */
#define _GNU_SOURCE /* mkdtemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kf_gpu.h"
#include "kf_judged.h"
#include "kf_planned.h"
#include "kf_test.h"
#include "runtime/ctx.h"
#include "runtime/cuda_exec.h"

/* The suite's context and device (kf_gpu.h). */
static kf_test_gpu G;

static int group_setup(void **state) {
    (void)state;
    return kf_test_gpu_setup(&G, "kf_rowepi", NULL);
}

static int group_teardown(void **state) {
    (void)state;
    kf_test_gpu_teardown(&G);
    return 0;
}

#define REQUIRE_GPU() KF_REQUIRE_GPU(&G)

static kf_ctx *ctx_with(unsigned flags, kf_gemm_mode gemm) {
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

/* `fmt` with every %s the dtype's name, compiled in `ctx`, its report holding
 * each of `want` ('|'-separated), run and judged (kf_judged.h). */
static void run_case(kf_ctx *ctx, const char *fmt, kf_dtype d, uint64_t stream, const char *want,
                     const char *what) {
    char text[4096], name[256];
    const char *dn = kf_dtype_name(d);
    snprintf(text, sizeof text, fmt, dn, dn, dn, dn, dn, dn, dn, dn, dn, dn);
    snprintf(name, sizeof name, "%s [%s]", what, dn);
    kf_test_judged_run(ctx, text, want, stream, -1.0, 1.0, false, name);
}

/* The cases: bias + residual + LayerNorm with the pre-norm sum written too,
 * residual + RMSNorm (B transposed), softmax of a batched product, over
 * N = 64, 128, 200 (ragged in its 256-wide tile) and 256, ragged M. */
typedef struct row_case {
    const char *text;
    const char *name;
} row_case;

#define LN(M, K, N)                                                                                \
    "kfg 1\nx = input(%s[" #M ", " #K "])\nw = input(%s[" #K ", " #N "])\nb = input(%s[" #N        \
    "])\nr = input(%s[" #M ", " #N "])\ng = input(%s[" #N "])\nc = input(%s[" #N "])\n"            \
    "h = matmul(x, w)\nhb = add(h, b)\ns = add(hb, r)\ny = layer_norm(s, g, c, eps=1e-5)\n"        \
    "output y\noutput s\n"
#define RMS(M, K, N)                                                                               \
    "kfg 1\nx = input(%s[" #M ", " #K "])\nw = input(%s[" #N ", " #K "])\nr = input(%s[" #M        \
    ", " #N "])\ng = input(%s[" #N "])\nh = matmul(x, w, transpose_b=true)\ns = add(h, r)\n"       \
    "y = rms_norm(s, g, eps=1e-6)\noutput y\n"
#define SOFTMAX(B, M, K, N)                                                                        \
    "kfg 1\nx = input(%s[" #B ", " #M ", " #K "])\nw = input(%s[" #B ", " #K ", " #N "])\n"        \
    "k = const(%s[], 0.125)\nh = matmul(x, w)\nt = mul(h, k)\nz = softmax(t)\noutput z\n"

static const row_case cases[] = {
    {LN(1000, 264, 200), "LayerNorm, N = 200 (ragged tile), ragged M, pre-norm written"},
    {LN(300, 72, 64), "LayerNorm, N = 64"},
    {LN(517, 136, 256), "LayerNorm, N = 256, ragged M"},
    {RMS(700, 128, 128), "RMSNorm, N = 128, K-major B"},
    {RMS(333, 64, 200), "RMSNorm, N = 200"},
    {SOFTMAX(3, 100, 72, 256), "softmax, N = 256, batched"},
    {SOFTMAX(2, 129, 64, 64), "softmax, N = 64, batched, ragged M"},
    {SOFTMAX(2, 77, 40, 128), "softmax, N = 128, batched, K = 40"},
    {"kfg 1\nx = input(%s[2, 200, 64])\nw = input(%s[2, 64, 192])\nh = matmul(x, w)\n"
     "z = softmax(h)\noutput z\n",
     "softmax of the product itself (x: the f32 accumulators), N = 192"},
    {"kfg 1\nx = input(%s[260, 96])\nw = input(%s[96, 128])\nb = input(%s[128])\n"
     "g = input(%s[128])\nc = input(%s[128])\nh = matmul(x, w)\ns = add(h, b)\n"
     "y = layer_norm(s, g, c, eps=1e-5)\noutput y\n",
     "LayerNorm of bias only, N = 128, the pre-norm not written"},
    /* an activation computes x: in bf16 the erf gelu is the table's vector
     * form, which kf_epi must read from the accumulators x replaced (it
     * failed to compile: test_device_run on an H100, e0e5637) */
    {"kfg 1\nx = input(%s[128, 64])\nw = input(%s[64, 96])\nb = input(%s[96])\n"
     "h = matmul(x, w)\nhb = add(h, b)\ny = gelu(hb)\noutput y\nz = softmax(y)\noutput z\n",
     "softmax of gelu(bias), N = 96, gelu written too"},
    {"kfg 1\nx = input(%s[300, 80])\nw = input(%s[80, 200])\nb = input(%s[200])\n"
     "g = input(%s[200])\nc = input(%s[200])\nh = matmul(x, w)\ns = add(h, b)\n"
     "a = gelu_tanh(s)\ny = layer_norm(a, g, c, eps=1e-5)\noutput y\n",
     "LayerNorm of gelu_tanh(bias), N = 200"},
};

static void run_cases(kf_ctx *ctx, kf_dtype d, const char *want, uint64_t seed0) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(ctx, cases[i].text, d, seed0 + i, want, cases[i].name);
}

/* sm_90a (the wgmma kernel; on another arch the recipe names the sm_80
 * kernel, which the tests after cover): every case in the tile, bf16 and
 * f16 (one test each, so a GPU run can take them in parallel). */
static void generated_cases(kf_dtype d, uint64_t seed0) {
    kf_ctx *ctx = ctx_with(0, KF_GEMM_GENERATED);
    run_cases(ctx, d, "row epilogue in the tile", seed0);
    kf_ctx_destroy(ctx);
}

static void test_bf16_row_epilogues_in_the_generated_tile_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    generated_cases(KF_DTYPE_BF16, 4100);
}

static void test_f16_row_epilogues_in_the_generated_tile_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    generated_cases(KF_DTYPE_F16, 4200);
}

/* The sm_80 kernel forced (KF_GEMM_SM80): 128 x 128 tiles on 4 warps or
 * 128 x 256 on 8, the statistics across warps through shared memory. */
static void sm80_cases(kf_dtype d, uint64_t seed0) {
    kf_ctx *ctx = ctx_with(0, KF_GEMM_SM80);
    run_cases(ctx, d, "mma.sync|row epilogue in the tile", seed0);
    kf_ctx_destroy(ctx);
}

static void test_bf16_row_epilogues_in_the_sm80_tile_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    sm80_cases(KF_DTYPE_BF16, 4300);
}

static void test_f16_row_epilogues_in_the_sm80_tile_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    sm80_cases(KF_DTYPE_F16, 4400);
}

/* The split row form (KF_FLAG_SPLIT_ROW_NORMS, rows past 256) on the sm_80
 * kernel: the GEMM writes the norm's input, a row pass follows. */
static void test_split_row_norms_on_the_sm80_kernel_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = ctx_with(KF_FLAG_SPLIT_ROW_NORMS, KF_GEMM_SM80);
    static const kf_dtype dts[] = {KF_DTYPE_BF16, KF_DTYPE_F16};
    for (size_t d = 0; d < 2; d++) {
        run_case(ctx,
                 "kfg 1\nx = input(%s[1000, 264])\nw = input(%s[264, 1096])\n"
                 "b = input(%s[1096])\nr = input(%s[1000, 1096])\ng = input(%s[1096])\n"
                 "c = input(%s[1096])\nh = matmul(x, w)\nhb = add(h, b)\ns = add(hb, r)\n"
                 "y = layer_norm(s, g, c, eps=1e-5)\noutput y\noutput s\n",
                 dts[d], 4500 + d, "mma.sync|the epilogue writes the norm's input rows",
                 "split row, sm80: bias + residual + layer_norm, ragged");
        run_case(ctx,
                 "kfg 1\nx = input(%s[3, 70, 136])\nw = input(%s[136, 4104])\n"
                 "r = input(%s[3, 70, 4104])\ng = input(%s[4104])\nh = matmul(x, w)\n"
                 "s = add(h, r)\ny = rms_norm(s, g, eps=1e-6)\noutput y\n",
                 dts[d], 4510 + d, "mma.sync|the epilogue writes the norm's input rows",
                 "split row, sm80: residual + rms_norm, N = 4104, batch folded");
    }
    kf_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_row_epilogues_in_the_generated_tile_match_the_reference),
        cmocka_unit_test(test_f16_row_epilogues_in_the_generated_tile_match_the_reference),
        cmocka_unit_test(test_bf16_row_epilogues_in_the_sm80_tile_match_the_reference),
        cmocka_unit_test(test_f16_row_epilogues_in_the_sm80_tile_match_the_reference),
        cmocka_unit_test(test_split_row_norms_on_the_sm80_kernel_match_the_reference),
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
