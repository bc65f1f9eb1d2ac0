/*
 * test_cuda_exec_decode.c -- the decode GEMM kernel (cg_gemm_decode.c,
 * templates/gemm_decode.cuh; M <= 64) executed on the GPU against the
 * reference evaluator: every case forced to the generated side with the
 * decode kernel asked for (KF_GEMM_GENERATED and the internal recipe flag
 * KF_CUDA_RECIPE_GEMM_DECODE on the context; the report must name the
 * decode kernel), then one in the measured choice against cuBLASLt. Shapes:
 * M = 1, 7, 16, 32, 64 and a batch folded into M; B K-major and N-major;
 * ragged N and K (no multiples of the 64 / 128-column strips or of the
 * 128-wide K steps); a split over several blocks and none; epilogues: bias +
 * gelu_tanh, bias + erf gelu + residual, residual; a norm prologue (A from
 * the prologue kernel's scratch); bf16 and f16.
 *
 * Each program runs twice on the same inputs: the two outputs must be the
 * same bits (the partials are added in a fixed order, and the counters the
 * first run leaves are the zeros the second needs), and each is judged.
 * Inputs are fresh random values (KF_TEST_SEED replays a run); outputs are
 * poisoned (NaN) before each run; kf_graph_check judges every output against
 * the exact value, and NaN never passes. Without a device every test is
 * skipped and the binary exits 77 (ctest: skipped, never passed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda_recipe.h"
#include "ir/ir.h"
#include "kf_gpu.h"
#include "kf_judged.h"
#include "kf_planned.h"
#include "kf_test.h"
#include "runtime/ctx.h"
#include "runtime/cuda_exec.h"

/* The suite's fixture (kf_gpu.h): F.ctx is G.gen, KF_GEMM_GENERATED; G.def is
 * KF_GEMM_AUTO on the same cache; both ask for the decode kernel. */
static kf_test_gpu F;

typedef struct gpu {
    kf_ctx *gen, *def; /* KF_GEMM_GENERATED and KF_GEMM_AUTO, the decode kernel asked for */
} gpu;

static gpu G;

static int group_setup(void **state) {
    (void)state;
    kf_options o;
    kf_options_init(&o);
    o.gemm = KF_GEMM_GENERATED;
    if (kf_test_gpu_setup(&F, "kf_cuda_decode", &o) != 0)
        return -1;
    G.gen = F.ctx;
    G.gen->recipe_flags = KF_CUDA_RECIPE_GEMM_DECODE;
    o.target = KF_TARGET_CUDA;
    o.cache_dir = F.cache_dir[0] ? F.cache_dir : NULL;
    o.gemm = KF_GEMM_AUTO;
    if (kf_ctx_create(&o, &G.def) != KF_OK)
        return -1;
    G.def->recipe_flags = KF_CUDA_RECIPE_GEMM_DECODE;
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    kf_ctx_destroy(G.def);
    kf_test_gpu_teardown(&F);
    return 0;
}

#define REQUIRE_GPU() KF_REQUIRE_GPU(&F)

/* `fmt` with every %s the dtype's name, compiled in `ctx`, its report holding
 * each '|'-separated token of `want` (NULL: nothing asked), run twice on the
 * same random inputs (stream `stream`) with the outputs poisoned before each
 * run: both runs judged against the exact value, and the same bits
 * (kf_test_judged_runs). */
static void run_twice(kf_ctx *ctx, const char *fmt, const char *dt, uint64_t stream,
                      const char *want, const char *what) {
    char text[4096], name[256];
    snprintf(text, sizeof text, fmt, dt, dt, dt, dt, dt, dt, dt, dt, dt, dt);
    snprintf(name, sizeof name, "%s [%s]", what, dt);
    kf_test_judged_runs(ctx, text, want, stream, -1.0, 1.0, 2, true, name);
}

static const char *const DTS[] = {"bf16", "f16"};
#define DEC "decode kernel: split-K over"

/* The internal forms the bench compares, each added to the context's flags
 * for a while: none, the register form (KF_CUDA_RECIPE_GEMM_DEC_REG, M <=
 * 32). */
#define REG_FORM "16-byte loads to registers"
static const uint64_t REG = KF_CUDA_RECIPE_GEMM_DEC_REG;
static const uint64_t FORMS[] = {0, KF_CUDA_RECIPE_GEMM_DEC_REG};
static const char *const FORM_HAS[] = {"stages of 128 K", "strips of 64 columns|" REG_FORM};

/* Forms f0 .. f1 - 1 of FORMS on two ragged cases, each run twice: M = 7,
 * N = 1000 and K = 1000 (no multiples of the strips, K steps or chunks),
 * split over blocks; N-major B with bias + erf gelu + residual, and K-major
 * B. Seeds seed + 10 f and seed + 10 f + 1; `what` prefixes the labels. */
static void ragged_decode_cases(size_t f0, size_t f1, uint64_t seed, const char *what) {
    for (size_t f = f0; f < f1; f++) {
        G.gen->recipe_flags = KF_CUDA_RECIPE_GEMM_DECODE | FORMS[f];
        char w[256], label[128];
        snprintf(w, sizeof w, DEC "|B N-major|last block|%s", FORM_HAS[f]);
        snprintf(label, sizeof label, "%sM 7, ragged, N-major, bias+gelu+res", what);
        run_twice(G.gen,
                  "kfg 1\nx = input(%s[7, 1000])\nw = input(%s[1000, 1000])\nb = input(%s[1000])\n"
                  "r = input(%s[7, 1000])\nh = matmul(x, w)\na = add(h, b)\ng = gelu(a)\n"
                  "y = add(g, r)\noutput y\n",
                  "bf16", seed + 10 * f, w, label);
        snprintf(w, sizeof w, DEC "|B K-major|last block|%s", FORM_HAS[f]);
        snprintf(label, sizeof label, "%sM 7, ragged, K-major", what);
        run_twice(G.gen,
                  "kfg 1\nx = input(%s[7, 1000])\nw = input(%s[1000, 1000])\n"
                  "y = matmul(x, w, transpose_b=true)\noutput y\n",
                  "bf16", seed + 10 * f + 1, w, label);
    }
    G.gen->recipe_flags = KF_CUDA_RECIPE_GEMM_DECODE;
}

/* One ragged case alone (the sanitizers run it), in the ring form. */
static void test_a_ragged_decode_gemm_matches_twice(void **state) {
    (void)state;
    REQUIRE_GPU();
    ragged_decode_cases(0, 1, 9700, "");
}

/* The register form's ragged cases alone (the sanitizers run them): tokens
 * past M read the last one, rows / columns past N, a partial last chunk of
 * 32 in K. */
static void test_a_ragged_decode_reg_gemm_matches_twice(void **state) {
    (void)state;
    REQUIRE_GPU();
    ragged_decode_cases(1, sizeof FORMS / sizeof *FORMS, 9300, "register form: ");
}

/* The TMA form (KF_CUDA_RECIPE_GEMM_DEC_TMA, internal; sm_90a), in each
 * strip width. */
static const uint64_t TMA = KF_CUDA_RECIPE_GEMM_DECODE | KF_CUDA_RECIPE_GEMM_DEC_TMA;
static const uint64_t TMA_FORMS[] = {0};
#define DEC_TMA "K (TMA, a producer warp)"
static const char *const TMA_HAS[] = {"stages of 128 K"};

/* True where the context's device runs the TMA form (sm_90 on), else the
 * test says so and skips. */
static bool tma_device(void) {
    char err[KF_MSG_MAX] = "";
    kf_cuda_exec *ex = NULL;
    kf_cuda_target t;
    assert_int_equal(kf_cuda_exec_open(G.gen, &ex, &t, err), KF_OK);
    bool sm90 = kf_cuda_arch_cc(t.arch) >= 90;
    kf_cuda_exec_destroy(ex);
    return sm90;
}

/* The ragged case of the TMA form alone (the sanitizers run it), in each
 * form: M = 7, N = 1000, K = 1000 (TMA's zeros past every extent), split;
 * N-major B with bias + erf gelu + residual, and K-major B. */
static void test_a_ragged_decode_tma_gemm_matches_twice(void **state) {
    (void)state;
    REQUIRE_GPU();
    if (!tma_device())
        skip();
    for (size_t f = 0; f < sizeof TMA_FORMS / sizeof *TMA_FORMS; f++) {
        G.gen->recipe_flags = TMA | TMA_FORMS[f];
        char w[256];
        snprintf(w, sizeof w, DEC "|" DEC_TMA "|B N-major|last block|%s", TMA_HAS[f]);
        run_twice(G.gen,
                  "kfg 1\nx = input(%s[7, 1000])\nw = input(%s[1000, 1000])\nb = input(%s[1000])\n"
                  "r = input(%s[7, 1000])\nh = matmul(x, w)\na = add(h, b)\ng = gelu(a)\n"
                  "y = add(g, r)\noutput y\n",
                  "bf16", 9600 + 10 * f, w, "TMA: M 7, ragged, N-major, bias+gelu+res");
        snprintf(w, sizeof w, DEC "|" DEC_TMA "|B K-major|last block|%s", TMA_HAS[f]);
        run_twice(G.gen,
                  "kfg 1\nx = input(%s[7, 1000])\nw = input(%s[1000, 1000])\n"
                  "y = matmul(x, w, transpose_b=true)\noutput y\n",
                  "bf16", 9601 + 10 * f, w, "TMA: M 7, ragged, K-major");
    }
    G.gen->recipe_flags = KF_CUDA_RECIPE_GEMM_DECODE;
}

/* The shape classes both forms run (seed offset = index): M = 1, 16, 32, 63,
 * 64, the batch folded into M; both majors; ragged N and K; no split and the
 * split capped at 16; the epilogues (bias + gelu_tanh, bias, residual) and a
 * norm prologue. `want` follows the form's own token in what the report must
 * hold; `dec_also` only the cp.async form's. */
typedef struct shape_case {
    const char *kfg, *want, *dec_also, *what;
} shape_case;

static const shape_case SHAPES[] = {
    {"kfg 1\nx = input(%s[1, 1000])\nw = input(%s[1000, 1000])\n"
     "y = matmul(x, w, transpose_b=true)\noutput y\n",
     "|M padded to 8|B K-major", "", "M 1, K-major, ragged"},
    {"kfg 1\nx = input(%s[1, 4096])\nw = input(%s[4096, 4104])\nb = input(%s[4104])\n"
     "h = matmul(x, w)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
     "|B N-major", "", "M 1, N-major, N 4104, bias + gelu_tanh"},
    {"kfg 1\nx = input(%s[16, 4000])\nw = input(%s[4104, 4000])\nb = input(%s[4104])\n"
     "h = matmul(x, w, transpose_b=true)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
     "|M padded to 16", "", "M 16, K-major, 4104 x 4000, bias + gelu_tanh"},
    {"kfg 1\nx = input(%s[32, 3000])\nw = input(%s[3000, 2056])\nb = input(%s[2056])\n"
     "h = matmul(x, w)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
     "|M padded to 32", "|strips of 64", "M 32, N-major, bias + gelu_tanh"},
    {"kfg 1\nx = input(%s[64, 2000])\nw = input(%s[1000, 2000])\nr = input(%s[64, 1000])\n"
     "h = matmul(x, w, transpose_b=true)\ny = add(h, r)\noutput y\n",
     "|M padded to 64", "", "M 64, K-major, residual"},
    {"kfg 1\nx = input(%s[63, 520])\nw = input(%s[520, 1000])\nb = input(%s[1000])\n"
     "h = matmul(x, w)\ny = add(h, b)\noutput y\n",
     "|M padded to 64", "", "M 63, N-major, bias"},
    {"kfg 1\nx = input(%s[16, 120])\nw = input(%s[120, 2000])\ny = matmul(x, w)\n"
     "output y\n",
     "|M padded to 16", "|split-K over 1 blocks", "M 16, K 120: one K step of 128, no split"},
    {"kfg 1\nx = input(%s[2, 12, 256])\nw = input(%s[256, 520])\ny = matmul(x, w)\n"
     "output y\n",
     "|M padded to 24", "", "x[2, 12, 256] . w: the batch folded into M"},
    {"kfg 1\nx = input(%s[16, 11008])\nw = input(%s[1024, 11008])\n"
     "y = matmul(x, w, transpose_b=true)\noutput y\n",
     "|" DEC " 16 blocks", "", "M 16, K 11008: the split capped at 16"},
    {"kfg 1\nx = input(%s[16, 264])\ng = input(%s[264])\nw = input(%s[1096, 264])\n"
     "n = rms_norm(x, g)\ny = matmul(n, w, transpose_b=true)\noutput y\n",
     "|prologue kernel's scratch", "", "RMSNorm prologue, M 16"},
};

/* SHAPES[i] in `dt` (seed s + i), the report holding `form` and the case's
 * tokens (`dec_also` too where `dec`), named with `prefix`. */
static void run_shape(size_t i, const char *dt, uint64_t s, const char *form, bool dec,
                      const char *prefix) {
    const shape_case *c = &SHAPES[i];
    char w[256], what[160];
    snprintf(w, sizeof w, "%s%s%s", form, c->want, dec ? c->dec_also : "");
    snprintf(what, sizeof what, "%s%s", prefix, c->what);
    run_twice(G.gen, c->kfg, dt, s + i, w, what);
}

/* The TMA form on the shape classes, bf16 and f16 (the other two forms:
 * bf16, and only the cases where their tiles differ most -- M 1, 32, 64 --
 * to keep the suite's NVRTC time down). */
static void test_tma_decode_gemms_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    if (!tma_device())
        skip();
    static const size_t FEW[] = {0, 3, 4};
    for (size_t f = 0; f < sizeof TMA_FORMS / sizeof *TMA_FORMS; f++) {
        G.gen->recipe_flags = TMA | TMA_FORMS[f];
        for (int d = 0; d < (f ? 1 : 2); d++) {
            uint64_t s = 9500 + 20 * (uint64_t)d + 40 * f;
            if (f) {
                for (size_t k = 0; k < sizeof FEW / sizeof *FEW; k++)
                    run_shape(FEW[k], DTS[d], s, DEC_TMA, false, "TMA form: ");
                continue;
            }
            for (size_t i = 0; i < sizeof SHAPES / sizeof *SHAPES; i++)
                run_shape(i, DTS[d], s, DEC_TMA, false, "TMA: ");
        }
    }
    G.gen->recipe_flags = KF_CUDA_RECIPE_GEMM_DECODE;
}

/* The other forms on the shape classes where they differ: M = 1 and 24
 * (an odd n8 tile count), M = 32 against a long ragged K, the split capped. */
static void test_decode_forms_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (size_t f = 1; f < sizeof FORMS / sizeof *FORMS; f++) {
        G.gen->recipe_flags = KF_CUDA_RECIPE_GEMM_DECODE | FORMS[f];
        for (int d = 0; d < 2; d++) {
            const char *t = d ? "f16" : "bf16";
            uint64_t s = 9800 + 20 * f + 10 * (uint64_t)d;
            run_twice(G.gen,
                      "kfg 1\nx = input(%s[1, 1000])\nw = input(%s[1000, 1000])\n"
                      "y = matmul(x, w, transpose_b=true)\noutput y\n",
                      t, s + 0, FORM_HAS[f], "form: M 1, K-major, ragged");
            run_twice(G.gen,
                      "kfg 1\nx = input(%s[32, 3000])\nw = input(%s[3000, 2056])\n"
                      "b = input(%s[2056])\nh = matmul(x, w)\na = add(h, b)\n"
                      "y = gelu_tanh(a)\noutput y\n",
                      t, s + 1, FORM_HAS[f], "form: M 32, N-major, bias + gelu_tanh");
            run_twice(G.gen,
                      "kfg 1\nx = input(%s[2, 12, 256])\nw = input(%s[256, 520])\n"
                      "y = matmul(x, w)\noutput y\n",
                      t, s + 2, FORM_HAS[f], "form: the batch folded into M = 24");
            run_twice(G.gen,
                      "kfg 1\nx = input(%s[16, 11008])\nw = input(%s[1024, 11008])\n"
                      "r = input(%s[16, 1024])\nh = matmul(x, w, transpose_b=true)\n"
                      "y = add(h, r)\noutput y\n",
                      t, s + 3, FORM_HAS[f], "form: M 16, K 11008, residual");
        }
    }
    G.gen->recipe_flags = KF_CUDA_RECIPE_GEMM_DECODE;
}

/* The shape classes in the register form, bf16 and f16: M <= 32 takes it,
 * M = 63 and 64 keep the ring (REG_TAKES). */
static const bool REG_TAKES[] = {true, true, true, true, false, false, true, true, true, true};
static void test_reg_decode_gemms_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    assert_int_equal(sizeof REG_TAKES / sizeof *REG_TAKES, sizeof SHAPES / sizeof *SHAPES);
    G.gen->recipe_flags = KF_CUDA_RECIPE_GEMM_DECODE | REG;
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof SHAPES / sizeof *SHAPES; i++)
            run_shape(i, DTS[d], 9400 + 20 * (uint64_t)d, REG_TAKES[i] ? REG_FORM : "stages of",
                      false, "register form: ");
    G.gen->recipe_flags = KF_CUDA_RECIPE_GEMM_DECODE;
}

/* No internal flag: KF_GEMM_GENERATED gives M <= 32 the decode kernel (on
 * sm_90a), M = 48 the tiled kernel. */
static void test_default_generated_side_is_the_decode_kernel_to_m32(void **state) {
    (void)state;
    REQUIRE_GPU();
    G.gen->recipe_flags = 0;
    char err[KF_MSG_MAX] = "";
    kf_cuda_exec *ex = NULL;
    kf_cuda_target t;
    assert_int_equal(kf_cuda_exec_open(G.gen, &ex, &t, err), KF_OK);
    bool sm90 = kf_cuda_arch_cc(t.arch) >= 90;
    kf_cuda_exec_destroy(ex);
    run_twice(G.gen,
              "kfg 1\nx = input(%s[16, 4096])\nw = input(%s[1024, 4096])\nb = input(%s[1024])\n"
              "h = matmul(x, w, transpose_b=true)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
              "bf16", 9900, sm90 ? DEC : NULL, "default: M 16");
    run_twice(G.gen,
              "kfg 1\nx = input(%s[48, 1000])\nw = input(%s[1000, 1000])\ny = matmul(x, w)\n"
              "output y\n",
              "bf16", 9901, "generated kernel", "default: M 48 (the tiled kernel)");
    G.gen->recipe_flags = KF_CUDA_RECIPE_GEMM_DECODE;
}

/* The shape classes, forced to the decode kernel. */
static void test_decode_gemms_match_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < sizeof SHAPES / sizeof *SHAPES; i++)
            run_shape(i, DTS[d], 9710 + 20 * (uint64_t)d, DEC, true, "");
}

/* The measured choice with the decode kernel as the generated side: either
 * side matches. */
static void test_measured_decode_gemm_matches(void **state) {
    (void)state;
    REQUIRE_GPU();
    run_twice(G.def,
              "kfg 1\nx = input(%s[16, 4096])\nw = input(%s[4096, 4096])\nb = input(%s[4096])\n"
              "h = matmul(x, w, transpose_b=true)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
              "bf16", 9790, "generated |cublaslt |" DEC, "measured, M 16, bias + gelu_tanh");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_ragged_decode_gemm_matches_twice),
        cmocka_unit_test(test_a_ragged_decode_reg_gemm_matches_twice),
        cmocka_unit_test(test_a_ragged_decode_tma_gemm_matches_twice),
        cmocka_unit_test(test_tma_decode_gemms_match_the_reference),
        cmocka_unit_test(test_decode_gemms_match_the_reference),
        cmocka_unit_test(test_decode_forms_match_the_reference),
        cmocka_unit_test(test_reg_decode_gemms_match_the_reference),
        cmocka_unit_test(test_default_generated_side_is_the_decode_kernel_to_m32),
        cmocka_unit_test(test_measured_decode_gemm_matches),
    };
    kf_test_filter();
    int failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
    if (failed == 0 && !F.have) {
        fprintf(stderr, "no CUDA device: skipped\n");
        return 77; /* ctest: SKIP_RETURN_CODE */
    }
    if (failed)
        fprintf(stderr, "replay with KF_TEST_SEED=%llu\n", (unsigned long long)kf_test_seed());
    return failed;
}
