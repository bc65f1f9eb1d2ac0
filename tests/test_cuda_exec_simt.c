/*
 * test_cuda_exec_simt.c -- the SIMT GEMM kernel of f32 and f64 GEMM groups
 * (cg_gemm_simt.c, templates/gemm_simt.cuh) executed on the GPU against the
 * reference evaluator: every case forced to the generated side
 * (KF_GEMM_GENERATED; the report must name the SIMT kernel), then a few in
 * the default mode (the measured choice against cuBLASLt, either side must
 * match). Shapes: ragged M, N and K (no tile multiples; element copies where
 * a row is no 16-byte multiple), M = 1, vector shapes, batched in one launch
 * with broadcast operands, transposed and permuted (strided) operands, both
 * tile sizes; group kinds: bias + gelu + residual epilogues, the norm
 * prologue (A from the prologue kernel's scratch), the SwiGLU pair, a row
 * epilogue in the split form, a GEMM sibling set; f32 and f64.
 *
 * Inputs are fresh random values (KF_TEST_SEED replays a run); outputs are
 * poisoned (NaN) before each run; kf_graph_check judges every output against
 * the exact value, and NaN never passes. Without a device every test is
 * skipped and the binary exits 77 (ctest: skipped, never passed).
 */
#define _GNU_SOURCE /* mkdtemp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fusion/fusion.h"
#include "ir/ir.h"
#include "kf_gpu.h"
#include "kf_judged.h"
#include "kf_planned.h"
#include "kf_test.h"
#include "runtime/ctx.h"
#include "runtime/cuda.h"
#include "runtime/cuda_exec.h"

/* The suite's contexts and device (kf_gpu.h): g.ctx forces the generated
 * GEMM (KF_GEMM_GENERATED), def measures (KF_GEMM_AUTO); one private cache. */
static struct {
    kf_test_gpu g;
    kf_ctx *def;
} G;

static int group_setup(void **state) {
    (void)state;
    kf_options o;
    kf_options_init(&o);
    o.gemm = KF_GEMM_GENERATED;
    if (kf_test_gpu_setup(&G.g, "kf_cuda_simt", &o) != 0)
        return -1;
    o.target = KF_TARGET_CUDA;
    o.cache_dir = G.g.cache_dir[0] ? G.g.cache_dir : NULL;
    o.gemm = KF_GEMM_AUTO;
    return kf_ctx_create(&o, &G.def) == KF_OK ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    kf_ctx_destroy(G.def);
    kf_test_gpu_teardown(&G.g);
    return 0;
}

#define REQUIRE_GPU() KF_REQUIRE_GPU(&G.g)

/* `fmt` with every %s the dtype's name, compiled in `ctx`, its report holding
 * each of `want` ('|'-separated; NULL: nothing asked), run and judged
 * (kf_judged.h). */
static void run_text(kf_ctx *ctx, const char *fmt, const char *dt, uint64_t stream,
                     const char *want, const char *what) {
    char text[4096], name[256];
    snprintf(text, sizeof text, fmt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt);
    snprintf(name, sizeof name, "%s [%s]", what, dt);
    kf_test_judged_run(ctx, text, want, stream, -1.0, 1.0, false, name);
    fprintf(stderr, "  ok: %s\n", name);
}

static const char *const DTS[] = {"f32", "f64"};

/* Plain products and epilogues, forced to the SIMT kernel. */
static void test_simt_gemms_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (int d = 0; d < 2; d++) {
        const char *t = DTS[d];
        const char *simt = d ? "simt (DFMA)" : "simt (FFMA)";
        char w[128];
        uint64_t s = 9100 + 100 * (uint64_t)d;
        /* small tiles, ragged M, N, K, bias + erf gelu + residual */
        snprintf(w, sizeof w, "%s|64x64x8", simt);
        run_text(G.g.ctx,
                 "kfg 1\nx = input(%s[1000, 200])\nw = input(%s[200, 1000])\nb = input(%s[1000])\n"
                 "r = input(%s[1000, 1000])\nh = matmul(x, w)\na = add(h, b)\ng = gelu(a)\n"
                 "y = add(g, r)\noutput y\n",
                 t, s + 0, w, "ragged 1000x1000x200, bias + gelu + residual");
        /* big tiles (153 / 297 of them for 132 SMs), ragged, bias + gelu_tanh */
        snprintf(w, sizeof w, "%s|%s", simt, d ? "128x64x8" : "128x128x16");
        run_text(G.g.ctx,
                 "kfg 1\nx = input(%s[1100, 72])\nw = input(%s[72, 2056])\nb = input(%s[2056])\n"
                 "r = input(%s[1100, 2056])\nh = matmul(x, w)\na = add(h, b)\ng = gelu_tanh(a)\n"
                 "y = add(g, r)\noutput y\n",
                 t, s + 1, w, "big tiles 1100x2056x72, ragged");
        /* element copies: K = 7, N = 37 (rows of 28 / 148 bytes) */
        run_text(G.g.ctx,
                 "kfg 1\nx = input(%s[100, 7])\nw = input(%s[7, 37])\nb = input(%s[37])\n"
                 "h = matmul(x, w)\ny = add(h, b)\noutput y\n",
                 t, s + 2, simt, "K = 7, N = 37: element copies");
        /* K-major B, N = 1001, bias + residual */
        snprintf(w, sizeof w, "%s|B K-major", simt);
        run_text(G.g.ctx,
                 "kfg 1\nx = input(%s[300, 64])\nw = input(%s[1001, 64])\nb = input(%s[1001])\n"
                 "r = input(%s[300, 1001])\nh = matmul(x, w, transpose_b=true)\na = add(h, b)\n"
                 "y = add(a, r)\noutput y\n",
                 t, s + 3, w, "N = 1001, K-major B");
        /* M-major A on big tiles; K = 1000 with K-major A and B */
        snprintf(w, sizeof w, "%s|A M-major", simt);
        run_text(G.g.ctx,
                 "kfg 1\nx = input(%s[40, 2200])\nw = input(%s[40, 2056])\n"
                 "y = matmul(x, w, transpose_a=true)\noutput y\n",
                 t, s + 4, w, "M-major A, 2200x2056x40");
        run_text(G.g.ctx,
                 "kfg 1\nx = input(%s[200, 1000])\nw = input(%s[136, 1000])\n"
                 "y = matmul(x, w, transpose_b=true)\noutput y\n",
                 t, s + 5, simt, "K = 1000, K-major A and B");
        /* M = 1; M = 1 with K = 100; vector shapes */
        run_text(G.g.ctx,
                 "kfg 1\nx = input(%s[1, 512])\nw = input(%s[512, 384])\ny = matmul(x, w)\n"
                 "output y\n",
                 t, s + 6, simt, "M = 1");
        run_text(G.g.ctx,
                 "kfg 1\nx = input(%s[1, 100])\nw = input(%s[100, 64])\nb = input(%s[64])\n"
                 "h = matmul(x, w)\ny = add(h, b)\noutput y\n",
                 t, s + 7, simt, "M = 1, K = 100");
        run_text(G.g.ctx,
                 "kfg 1\nx = input(%s[64, 48])\nw = input(%s[48, 1])\nv = input(%s[1, 64])\n"
                 "c = matmul(x, w)\ne = matmul(v, x)\noutput c\noutput e\n",
                 t, s + 8, simt, "vector shapes");
        /* batched in one launch; broadcast B (batch folded into M); batched
         * K-major B; broadcast A, M-major; permuted (head-split) views */
        snprintf(w, sizeof w, "%s|batched in one launch", simt);
        run_text(G.g.ctx,
                 "kfg 1\na = input(%s[3, 40, 24])\nb = input(%s[3, 24, 56])\n"
                 "c = matmul(a, b)\nd = relu(c)\noutput d\n",
                 t, s + 9, w, "batched");
        run_text(G.g.ctx,
                 "kfg 1\na = input(%s[2, 3, 40, 24])\nb = input(%s[24, 56])\n"
                 "c = matmul(a, b)\noutput c\n",
                 t, s + 10, simt, "broadcast B (batch folded into M)");
        run_text(G.g.ctx,
                 "kfg 1\na = input(%s[4, 200, 64])\nb = input(%s[4, 136, 64])\n"
                 "c = matmul(a, b, transpose_b=true)\noutput c\n",
                 t, s + 11, w, "batched, K-major B");
        run_text(G.g.ctx,
                 "kfg 1\na = input(%s[136, 200])\nb = input(%s[4, 136, 72])\n"
                 "c = matmul(a, b, transpose_a=true)\noutput c\n",
                 t, s + 12, w, "broadcast A, M-major");
        /* head-split views [1, S, H, D] -> [1, H, S, D]: the heads one
         * uniform batch stride (D), rows H * D apart */
        run_text(G.g.ctx,
                 "kfg 1\na = input(%s[1, 40, 3, 16])\nb = input(%s[1, 40, 3, 16])\n"
                 "ap = permute(a, [0, 2, 1, 3])\nbp = permute(b, [0, 2, 3, 1])\n"
                 "c = matmul(ap, bp)\noutput c\n",
                 t, s + 13, w, "head-split (permuted) views as operands");
        run_text(G.g.ctx,
                 "kfg 1\na = input(%s[24, 40])\nb = input(%s[4, 56, 24])\n"
                 "c = matmul(a, b, transpose_a=true, transpose_b=true)\noutput c\n",
                 t, s + 14, simt, "both transposed, broadcast A");
    }
}

/* The group kinds on the SIMT kernel, forced (f32: the planner forms none of
 * them in f64). */
static void test_simt_gemm_group_kinds_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    /* the norm prologue: A from the prologue kernel's scratch */
    run_text(G.g.ctx,
             "kfg 1\nx = input(%s[1000, 264])\ng = input(%s[264])\nc = input(%s[264])\n"
             "w = input(%s[264, 136])\nb = input(%s[136])\nn = layer_norm(x, g, c)\n"
             "h = matmul(n, w)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
             "f32", 9300, "simt (FFMA)|prologue kernel's scratch", "LayerNorm prologue, ragged");
    run_text(G.g.ctx,
             "kfg 1\nx = input(%s[2, 300, 200])\ng = input(%s[200])\nw = input(%s[136, 200])\n"
             "r = input(%s[2, 300, 136])\nn = rms_norm(x, g)\n"
             "h = matmul(n, w, transpose_b=true)\ny = add(h, r)\noutput y\n",
             "f32", 9301, "simt (FFMA)|prologue kernel's scratch",
             "RMSNorm prologue, K-major B, residual");
    /* the SwiGLU pair: one kernel, both B */
    run_text(G.g.ctx,
             "kfg 1\nx = input(%s[200, 64])\nwg = input(%s[64, 136])\nwu = input(%s[64, 136])\n"
             "g = matmul(x, wg)\nu = matmul(x, wu)\na = silu(g)\ny = mul(a, u)\noutput y\n",
             "f32", 9302, "simt (FFMA) pair 128x(2x64)", "SwiGLU pair, ragged N");
    run_text(G.g.ctx,
             "kfg 1\nx = input(%s[2, 300, 200])\nwg = input(%s[2, 136, 200])\n"
             "wu = input(%s[2, 136, 200])\ng = matmul(x, wg, transpose_b=true)\n"
             "u = matmul(x, wu, transpose_b=true)\na = silu(g)\ny = mul(a, u)\noutput y\n",
             "f32", 9303, "simt (FFMA) pair 128x(2x64)|batched", "SwiGLU pair, batched K-major B");
    /* a row epilogue: in the tile (N <= 256; test_simt_row_epilogue_*);
     * the pre-norm sum also an output */
    run_text(G.g.ctx,
             "kfg 1\nx = input(%s[300, 96])\nw = input(%s[96, 200])\nr = input(%s[300, 200])\n"
             "g = input(%s[200])\nc = input(%s[200])\nh = matmul(x, w)\ns = add(h, r)\n"
             "y = layer_norm(s, g, c)\noutput y\n",
             "f32", 9304, "simt (FFMA)|row epilogue in the tile",
             "GEMM + residual + LayerNorm (in the tile)");
    run_text(G.g.ctx,
             "kfg 1\nx = input(%s[260, 72])\nw = input(%s[72, 136])\nr = input(%s[260, 136])\n"
             "g = input(%s[136])\nh = matmul(x, w)\ns = add(h, r)\ny = rms_norm(s, g)\n"
             "output s\noutput y\n",
             "f32", 9305, "simt (FFMA)|row epilogue in the tile",
             "GEMM + residual + RMSNorm, the sum written too");
    /* a GEMM sibling set behind one norm */
    run_text(G.g.ctx,
             "kfg 1\nx = input(%s[100, 64])\ng = input(%s[64])\nc = input(%s[64])\n"
             "wq = input(%s[64, 136])\nwk = input(%s[64, 72])\nn = layer_norm(x, g, c)\n"
             "q = matmul(n, wq)\nk = matmul(n, wk)\noutput q\noutput k\n",
             "f32", 9306, "GEMM siblings|simt_", "GEMM siblings, A from scratch once");
}

/* The row epilogue in the SIMT kernel's tile (f32, N <= 256: 64-, 128- or
 * 256-wide tiles, the rows' statistics reduced by shuffles): LayerNorm,
 * RMSNorm and softmax rows, ragged M and N, batched, every tile width, M
 * past one tile row and M = 1; and past 256 columns (KF_FLAG_SPLIT_ROW_NORMS)
 * the split form. f64 forms no row epilogue (the norm stays a row group):
 * its case runs as the planner leaves it. */
static void test_simt_row_epilogue_in_the_tile_matches(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *const cases[][3] = {
        {"kfg 1\nx = input(%s[300, 96])\nw = input(%s[96, 200])\nb = input(%s[200])\n"
         "r = input(%s[300, 200])\ng = input(%s[200])\nc = input(%s[200])\nh = matmul(x, w)\n"
         "a = add(h, b)\ns = add(a, r)\ny = layer_norm(s, g, c, eps=1e-5)\noutput y\n",
         "32x256x8 tiles|row epilogue in the tile", "LayerNorm N 200, bias + residual"},
        {"kfg 1\nx = input(%s[2, 333, 130])\nw = input(%s[130, 256])\ng = input(%s[256])\n"
         "c = input(%s[256])\nh = matmul(x, w)\ny = layer_norm(h, g, c)\noutput y\n",
         "x256x8 tiles|row epilogue in the tile", "LayerNorm N 256, batch folded, ragged K"},
        {"kfg 1\nx = input(%s[517, 72])\nw = input(%s[120, 72])\nr = input(%s[517, 120])\n"
         "g = input(%s[120])\nh = matmul(x, w, transpose_b=true)\ns = add(h, r)\n"
         "y = rms_norm(s, g)\noutput s\noutput y\n",
         "x128x8 tiles|row epilogue in the tile", "RMSNorm N 120, K-major B, the sum written"},
        {"kfg 1\nx = input(%s[3, 100, 40])\nw = input(%s[40, 50])\nh = matmul(x, w)\n"
         "y = softmax(h, axis=-1)\noutput y\n",
         "x64x8 tiles|row epilogue in the tile", "softmax N 50, batched"},
        {"kfg 1\nx = input(%s[1, 64])\nw = input(%s[64, 232])\nh = matmul(x, w)\n"
         "t = tanh(h)\ny = softmax(t, axis=-1)\noutput y\n",
         "x256x8 tiles|row epilogue in the tile", "tanh then softmax N 232, M = 1"},
        {"kfg 1\nx = input(%s[150, 200])\nw = input(%s[64, 200])\ng = input(%s[64])\n"
         "h = matmul(x, w, transpose_b=true)\ny = rms_norm(h, g)\noutput y\n",
         "x64x8 tiles|row epilogue in the tile", "RMSNorm N 64, K-major B"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
        run_text(G.g.ctx, cases[c][0], "f32", 9320 + c, cases[c][1], cases[c][2]);
    /* the default (measured) mode takes either side and matches */
    run_text(G.def, cases[0][0], "f32", 9330, NULL, "LayerNorm N 200, measured");
    /* f64: no row epilogue is formed; the groups as planned */
    run_text(G.g.ctx, cases[2][0], "f64", 9331, "simt (DFMA)", "f64 RMSNorm after a GEMM");
    /* past 256 columns: the split form (the kernel writes x, a row pass) */
    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CUDA;
    o.cache_dir = G.g.cache_dir[0] ? G.g.cache_dir : NULL;
    o.gemm = KF_GEMM_GENERATED;
    o.flags |= KF_FLAG_SPLIT_ROW_NORMS;
    kf_ctx *sc = NULL;
    assert_int_equal(kf_ctx_create(&o, &sc), KF_OK);
    run_text(sc,
             "kfg 1\nx = input(%s[300, 96])\nw = input(%s[96, 300])\nr = input(%s[300, 300])\n"
             "g = input(%s[300])\nc = input(%s[300])\nh = matmul(x, w)\ns = add(h, r)\n"
             "y = layer_norm(s, g, c)\noutput y\n",
             "f32", 9332, "simt (FFMA)|split row form", "LayerNorm N 300 (split)");
    kf_ctx_destroy(sc);
}

/* The default mode measures the SIMT kernel against cuBLASLt; whichever
 * side it picks matches. */
static void test_measured_f32_and_f64_gemms_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (int d = 0; d < 2; d++) {
        run_text(G.def,
                 "kfg 1\nx = input(%s[1100, 72])\nw = input(%s[72, 2056])\nb = input(%s[2056])\n"
                 "h = matmul(x, w)\na = add(h, b)\ny = gelu(a)\noutput y\n",
                 DTS[d], 9400 + (uint64_t)d, "generated |cublaslt ", "measured, bias + gelu");
        run_text(G.def,
                 "kfg 1\na = input(%s[3, 40, 24])\nb = input(%s[3, 24, 56])\n"
                 "c = matmul(a, b)\noutput c\n",
                 DTS[d], 9410 + (uint64_t)d, NULL, "measured, batched");
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simt_gemms_match_the_reference),
        cmocka_unit_test(test_simt_gemm_group_kinds_match_the_reference),
        cmocka_unit_test(test_simt_row_epilogue_in_the_tile_matches),
        cmocka_unit_test(test_measured_f32_and_f64_gemms_match),
    };
    kf_test_filter();
    int failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
    if (failed == 0 && !G.g.have) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return 77; /* ctest: SKIP_RETURN_CODE */
    }
    if (failed)
        fprintf(stderr, "replay with KF_TEST_SEED=%llu\n", (unsigned long long)kf_test_seed());
    return failed;
}
