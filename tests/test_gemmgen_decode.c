/*
 * test_gemmgen_decode.c -- the decode GEMM kernel of bf16 / f16 GEMM groups
 * with M <= 64 (codegen/cuda/cg_gemm_decode.c, templates/gemm_decode.cuh)
 * and its recipe (recipe_gemm_decode.c), with no GPU: each shape class
 * (M = 1, 7, 16, 32, 64; B K-major and N-major; ragged N and K; a split and
 * none; an epilogue; a norm prologue from scratch; bf16 and f16) is
 * generated through the recipes for sm_80 (an A100) and sm_90a (an H100)
 * with KF_CUDA_RECIPE_GEMM_DECODE, compiled by NVRTC, and its SASS read with
 * cuobjdump: HMMA (mma.sync), LDGSTS (cp.async), LDSM (ldmatrix), and no
 * local memory (no spills). The groups it does not take keep the tiled
 * kernels and the report says why; without the flag the generated side
 * of M <= 32 is the decode kernel (64 with it), and GEMM_NO_DECODE and
 * stream-K keep the tiled kernels.
 * Numerics run on the GPU (test_cuda_exec_decode).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "codegen/cuda/cuda_codegen.h"
#include "codegen/cuda/cuda_recipe.h"
#include "fusion/fusion.h"
#include "kf_planned.h"
#include "kf_sass.h"
#include "kf_test.h"
#include "runtime/cuda_kernel.h"

static kf_mem MEM;

static const unsigned DEC = KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_DECODE;

/* The recipe of the plan's first GEMM group. */
static const kf_cuda_recipe *gemm_recipe(const kf_plan *plan, const kf_cuda_recipes *rec) {
    for (uint32_t gi = 0; gi < plan->n_groups; gi++)
        if (plan->groups[gi].kind == KF_GROUP_GEMM)
            return &rec->recipes[gi];
    fail_msg("no GEMM group");
    return NULL;
}

/* The decode kernel of `text`'s GEMM group (every %s: `dt`) on `device`:
 * the generated side alone, its `how` holding each of `want` ('|'-separated),
 * n_steps steps (a prologue kernel's before the GEMM's), A and B as pointers
 * before the params, strips x split blocks of 128 threads, the PARTIALS and
 * COUNTERS params exactly when it splits; its SASS has HMMA, LDGSTS and LDSM
 * and no local memory. Returns the split. */
static uint32_t dec_case_flags(const char *fmt, const char *dt, const char *device,
                               const char *want, uint32_t n_steps, uint64_t flags) {
    char text[2048];
    snprintf(text, sizeof text, fmt, dt, dt, dt, dt, dt, dt, dt, dt);
    planned p;
    plan_text(text, &p);
    kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, device, NULL, DEC | flags);
    const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
    if (rc->n_variants != 1 || !strstr(rc->variants[0].how, "decode kernel: split-K over"))
        fail_msg("%s on %s: expected the decode kernel, got %u variant(s): %s\n%s", dt, device,
                 rc->n_variants, rc->variants[0].how, text);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", want);
    for (char *tok = strtok(buf, "|"); tok; tok = strtok(NULL, "|"))
        if (!strstr(rc->variants[0].how, tok))
            fail_msg("%s on %s: expected '%s': %s\n%s", dt, device, tok, rc->variants[0].how, text);
    if (rc->n_steps != n_steps)
        fail_msg("%s on %s: %u steps, expected %u: %s", dt, device, rc->n_steps, n_steps,
                 rc->variants[0].how);
    const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
    assert_non_null(ks);
    assert_int_equal(ks->kernel.tmpl, KF_CUDA_TEMPLATE_GEMM_DECODE);
    assert_int_equal(ks->role, KF_CUDA_ROLE_GEMM);
    /* the TMA form (sm_90a only): tensor maps of A and B in place of the
     * pointers, a producer warp beside the 4 MMA warps */
    bool tma = (flags & KF_CUDA_RECIPE_GEMM_DEC_TMA) && strcmp(device, "h100") == 0;
    assert_int_equal(ks->n_tmaps, tma ? 2 : 0);
    assert_int_equal(ks->n_args, ks->kernel.n_params + 2);
    for (uint32_t i = 0; i < 2; i++) {
        assert_int_equal(ks->args[i].kind, tma ? KF_CUDA_ARG_TMAP : KF_CUDA_ARG_PTR);
        assert_false(ks->args[i].written);
        if (tma) {
            assert_int_equal(ks->args[i].value, (int64_t)i);
            assert_int_equal(ks->tmaps[i].rank, 2);
            assert_int_equal(ks->tmaps[i].box[0], 64);
            assert_int_equal(ks->tmaps[i].swizzle, 128);
        }
    }
    assert_int_equal(ks->block[0], tma ? 160 : 128);
    assert_int_equal(strstr(rc->variants[0].how, "K (TMA, a producer warp)") != NULL, tma);
    assert_int_equal(ks->grid[1], 1);
    assert_int_equal(ks->grid[2], 1);
    assert_non_null(strstr(ks->kernel.name, "dec_"));
    /* the split from the source, the grid strips x split */
    const char *sp = strstr(ks->kernel.source, "#define KF_SPLIT ");
    const char *mt = strstr(ks->kernel.source, "#define KF_MT ");
    const char *nn = strstr(ks->kernel.source, "#define KF_N ");
    assert_non_null(sp);
    assert_non_null(mt);
    assert_non_null(nn);
    const char *rg = strstr(ks->kernel.source, "#define KF_RG ");
    assert_non_null(rg);
    uint32_t split = (uint32_t)strtoul(sp + 17, NULL, 10);
    uint32_t bw = 16u * (uint32_t)strtoul(mt + 14, NULL, 10) * (uint32_t)strtoul(rg + 14, NULL, 10);
    long long n = strtoll(nn + 13, NULL, 10);
    assert_true(split >= 1 && split <= 16);
    assert_int_equal(ks->grid[0], (uint32_t)((n + bw - 1) / bw) * split);
    bool ws = false, cnt = false;
    for (uint32_t i = 0; i < ks->kernel.n_params; i++) {
        ws |= ks->kernel.params[i].kind == KF_CUDA_PARAM_PARTIALS;
        cnt |= ks->kernel.params[i].kind == KF_CUDA_PARAM_COUNTERS;
    }
    assert_int_equal(ws, split > 1);
    assert_int_equal(cnt, split > 1);
    /* two blocks an SM on sm_90a and sm_80 (the ring sized for them; the
     * warps' sums of M = 64 take 68 KiB) */
    assert_true(ks->shared_bytes <= (strcmp(device, "a100") == 0 ? 70u : 100u) * 1024u ||
                (tma && ks->kernel.launch.blocks_per_sm == 1 && ks->shared_bytes <= 200u * 1024u));
    bool reg = strstr(rc->variants[0].how, "16-byte loads to registers") != NULL;
    assert_int_equal(reg, (flags & KF_CUDA_RECIPE_GEMM_DEC_REG) &&
                              strstr(want, "M padded to 64") == NULL &&
                              strstr(want, "M padded to 48") == NULL);
    if (reg) { /* the register form: HMMA fed by 16-byte global loads, no cp.async */
        static const char *const want_ops[] = {"HMMA", "LDG.E.", NULL};
        static const char *const why_ops[] = {"no mma.sync", "no global loads"};
        kf_sass_check_ops(&MEM, &ks->kernel, want_ops, why_ops, "LDGSTS");
        /* as many blocks an SM as the registers allow: 4 to M 8, 2 past */
        uint32_t bps = strstr(rc->variants[0].how, "M padded to 8,") ? 4u : 2u;
        assert_int_equal(ks->kernel.launch.blocks_per_sm, bps);
    } else if (tma) { /* mma.sync fed by TMA: HMMA, UTMALDG, LDSM, no LDGSTS */
        static const char *const want_ops[] = {"HMMA", "UTMALDG", "LDSM", NULL};
        static const char *const why_ops[] = {"no mma.sync", "no TMA loads", "no ldmatrix"};
        kf_sass_check_ops(&MEM, &ks->kernel, want_ops, why_ops, "LDGSTS");
    } else {
        kf_sass_check_ampere(&MEM, &ks->kernel);
    }
    fprintf(stderr, "  %s %s: %s\n", dt, device, rc->variants[0].how);
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
    return split;
}

static uint32_t dec_case(const char *fmt, const char *dt, const char *device, const char *want,
                         uint32_t n_steps) {
    return dec_case_flags(fmt, dt, device, want, n_steps, 0);
}

static const char *const DEVICES[] = {"a100", "h100"};

/* M = 1, 7, 16, 32, 64 against both majors of B, ragged N and K, with and
 * without a split, epilogues (bias + gelu_tanh, residual), bf16 and f16. */
static void test_decode_gemms_compile_to_hmma_ldgsts_ldsm(void **state) {
    (void)state;
    for (int v = 0; v < 2; v++) {
        const char *dev = DEVICES[v];
        /* the bench's target: 32 x 4096 x 16384, B N-major, bias + gelu_tanh */
        uint32_t s =
            dec_case("kfg 1\nx = input(%s[32, 16384])\nw = input(%s[16384, 4096])\n"
                     "b = input(%s[4096])\nh = matmul(x, w)\nhb = add(h, b)\n"
                     "y = gelu_tanh(hb)\noutput y\n",
                     "bf16", dev, "strips of 64 columns|M padded to 32|B N-major|last block", 1);
        assert_true(s > 1);
        /* M = 1, K-major B (nn.Linear), ragged N and K: strips of 128 */
        dec_case("kfg 1\nx = input(%s[1, 1000])\nw = input(%s[1000, 1000])\n"
                 "y = matmul(x, w, transpose_b=true)\noutput y\n",
                 "bf16", dev, "strips of 64 columns|M padded to 8|B K-major", 1);
        /* M = 7, N-major, ragged, bias + erf gelu + residual, f16 */
        dec_case("kfg 1\nx = input(%s[7, 264])\nw = input(%s[264, 1000])\nb = input(%s[1000])\n"
                 "r = input(%s[7, 1000])\nh = matmul(x, w)\na = add(h, b)\ng = gelu(a)\n"
                 "y = add(g, r)\noutput y\n",
                 "f16", dev, "M padded to 8|B N-major", 1);
        /* M = 64 against 4096 x 4096, K-major */
        dec_case("kfg 1\nx = input(%s[64, 4096])\nw = input(%s[4096, 4096])\n"
                 "y = matmul(x, w, transpose_b=true)\noutput y\n",
                 "bf16", dev, "strips of 64 columns|M padded to 64|B K-major", 1);
        /* M = 16 against K = 11008: the split is capped at 16 pieces */
        s = dec_case("kfg 1\nx = input(%s[16, 11008])\nw = input(%s[4096, 11008])\n"
                     "y = matmul(x, w, transpose_b=true)\noutput y\n",
                     "f16", dev, "strips of 64 columns|M padded to 16", 1);
        assert_true(s > 1);
        /* one K step (K = 120): no split (no workspace, no counter) */
        s = dec_case("kfg 1\nx = input(%s[16, 120])\nw = input(%s[120, 16448])\n"
                     "y = matmul(x, w)\noutput y\n",
                     "bf16", dev, "split-K over 1 blocks", 1);
        assert_int_equal(s, 1);
        /* a norm prologue: the prologue kernel writes A to scratch first */
        dec_case("kfg 1\nx = input(%s[16, 264])\ng = input(%s[264])\nw = input(%s[1096, 264])\n"
                 "n = rms_norm(x, g)\ny = matmul(n, w, transpose_b=true)\noutput y\n",
                 "bf16", dev, "A from the prologue kernel's scratch", 2);
        /* x[B, S, D] . w: the batch folds into M = 2 x 24 */
        dec_case("kfg 1\nx = input(%s[2, 24, 256])\nw = input(%s[256, 512])\n"
                 "y = matmul(x, w)\noutput y\n",
                 "bf16", dev, "M padded to 48", 1);
    }
}

/* The internal form the bench compares: the register form (DEC_REG, M <=
 * 32; past it the ring). */
static void test_decode_forms_compile(void **state) {
    (void)state;
    static const uint64_t fls[] = {KF_CUDA_RECIPE_GEMM_DEC_REG};
    static const char *const colss[] = {"strips of 64 columns|16-byte loads to registers"};
    for (int v = 0; v < 2; v++) {
        const char *dev = DEVICES[v];
        for (int f = 0; f < 1; f++) {
            uint64_t fl = fls[f];
            const char *cols = colss[f];
            char want[128];
            snprintf(want, sizeof want, "%s|B N-major", cols);
            dec_case_flags("kfg 1\nx = input(%s[32, 16384])\nw = input(%s[16384, 4096])\n"
                           "b = input(%s[4096])\nh = matmul(x, w)\nhb = add(h, b)\n"
                           "y = gelu_tanh(hb)\noutput y\n",
                           "bf16", dev, want, 1, fl);
            snprintf(want, sizeof want, "%s|B K-major|M padded to 8", cols);
            dec_case_flags("kfg 1\nx = input(%s[7, 1000])\nw = input(%s[1000, 1000])\n"
                           "y = matmul(x, w, transpose_b=true)\noutput y\n",
                           "f16", dev, want, 1, fl);
            snprintf(want, sizeof want, "%s|M padded to 24", cols);
            dec_case_flags("kfg 1\nx = input(%s[2, 12, 256])\nw = input(%s[256, 520])\n"
                           "y = matmul(x, w)\noutput y\n",
                           "bf16", dev, want, 1, fl);
            /* M = 64: the register form's registers would not hold it; the
             * ring, K steps of 128 (as without a flag) */
            dec_case_flags("kfg 1\nx = input(%s[64, 2000])\nw = input(%s[1000, 2000])\n"
                           "y = matmul(x, w, transpose_b=true)\noutput y\n",
                           "bf16", dev, "strips of 64 columns|stages of 128 K|M padded to 64", 1,
                           fl);
        }
    }
}

/* The TMA form (KF_CUDA_RECIPE_GEMM_DEC_TMA, internal): on sm_90a the
 * shape classes above in each K step and strip width, compiled to HMMA fed
 * by UTMALDG (no LDGSTS); sm_80 keeps the cp.async form. */
static void test_decode_tma_form_compiles(void **state) {
    (void)state;
    static const uint64_t T = KF_CUDA_RECIPE_GEMM_DEC_TMA;
    static const uint64_t forms[] = {0};
    static const char *const has[] = {"stages of 128 K"};
    for (int v = 0; v < 2; v++) {
        const char *dev = DEVICES[v];
        for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
            char want[128];
            snprintf(want, sizeof want, "%s|B N-major|M padded to 32", has[f]);
            dec_case_flags("kfg 1\nx = input(%s[32, 16384])\nw = input(%s[16384, 4096])\n"
                           "b = input(%s[4096])\nh = matmul(x, w)\nhb = add(h, b)\n"
                           "y = gelu_tanh(hb)\noutput y\n",
                           "bf16", dev, want, 1, T | forms[f]);
            snprintf(want, sizeof want, "%s|B K-major|M padded to 8", has[f]);
            dec_case_flags("kfg 1\nx = input(%s[7, 1000])\nw = input(%s[1000, 1000])\n"
                           "y = matmul(x, w, transpose_b=true)\noutput y\n",
                           "f16", dev, want, 1, T | forms[f]);
            dec_case_flags("kfg 1\nx = input(%s[16, 264])\ng = input(%s[264])\n"
                           "w = input(%s[1096, 264])\nn = rms_norm(x, g)\n"
                           "y = matmul(n, w, transpose_b=true)\noutput y\n",
                           "bf16", dev, "A from the prologue kernel's scratch", 2, T | forms[f]);
        }
        /* M = 64 (A's tile as large as B's): 3 stages of 128 K at least */
        dec_case_flags("kfg 1\nx = input(%s[64, 4096])\nw = input(%s[4096, 4096])\n"
                       "y = matmul(x, w, transpose_b=true)\noutput y\n",
                       "bf16", dev, "M padded to 64|B K-major", 1, T);
    }
}

/* The recipe of `text` with `flags` on `device`: the generated side's how
 * holds `want` and not "decode kernel: split-K" (NULL want: only that). */
static void not_decode(const char *text, const char *device, unsigned flags, const char *want) {
    planned p;
    plan_text(text, &p);
    kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, device, NULL, flags);
    const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
    if (strstr(rc->variants[0].how, "decode kernel: split-K"))
        fail_msg("%s: the decode kernel took it: %s\n%s", device, rc->variants[0].how, text);
    if (want && (!strstr(rc->variants[0].how, "not the decode kernel: ") ||
                 !strstr(rc->variants[0].how, want)))
        fail_msg("%s: expected '%s': %s\n%s", device, want, rc->variants[0].how, text);
    fprintf(stderr, "  %s: %s\n", device, rc->variants[0].how);
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

/* What the decode kernel refuses keeps the tiled kernels, and the report
 * says why; M past 64 (past 32 without KF_CUDA_RECIPE_GEMM_DECODE) is not
 * asked, nor with GEMM_NO_DECODE. */
static void test_decode_refusals_keep_the_tiled_kernel_and_say_why(void **state) {
    (void)state;
    for (int v = 0; v < 2; v++) {
        const char *dev = DEVICES[v];
        not_decode("kfg 1\na = input(bf16[3, 16, 64])\nb = input(bf16[3, 64, 136])\n"
                   "c = matmul(a, b)\noutput c\n",
                   dev, DEC, "a batched product");
        not_decode("kfg 1\nx = input(bf16[64, 16])\nw = input(bf16[64, 256])\n"
                   "y = matmul(x, w, transpose_a=true)\noutput y\n",
                   dev, DEC, "an M-major A");
        not_decode("kfg 1\nx = input(bf16[16, 264])\nw = input(bf16[256, 264])\n"
                   "r = input(bf16[16, 256])\ng = input(bf16[256])\nc = input(bf16[256])\n"
                   "h = matmul(x, w, transpose_b=true)\ns = add(h, r)\n"
                   "y = layer_norm(s, g, c)\noutput y\n",
                   dev, DEC, "a row-wise stage follows");
        not_decode("kfg 1\nx = input(bf16[65, 256])\nw = input(bf16[256, 256])\n"
                   "y = matmul(x, w)\noutput y\n",
                   dev, DEC, NULL);
        /* M past 32 without the flag; the tiled kernels asked for */
        not_decode("kfg 1\nx = input(bf16[48, 256])\nw = input(bf16[256, 256])\n"
                   "y = matmul(x, w)\noutput y\n",
                   dev, KF_CUDA_RECIPE_GEMM_GENERATED, NULL);
        not_decode("kfg 1\nx = input(bf16[16, 256])\nw = input(bf16[256, 256])\n"
                   "y = matmul(x, w)\noutput y\n",
                   dev, KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_NO_DECODE, NULL);
        not_decode("kfg 1\nx = input(bf16[16, 256])\nw = input(bf16[256, 256])\n"
                   "y = matmul(x, w)\noutput y\n",
                   dev, KF_CUDA_RECIPE_GEMM_MEASURED | KF_CUDA_RECIPE_GEMM_NO_DECODE, NULL);
    }
}

/* By default (no internal flag) the generated side of M <= 32 on sm_90a is
 * the decode kernel, forced and in the measured choice; stream-K asked for
 * keeps the tiled kernel, and so does sm_80 (no A100 has run it). */
static void test_decode_is_the_default_generated_side_to_m32(void **state) {
    (void)state;
    static const char *const text =
        "kfg 1\nx = input(bf16[32, 4096])\nw = input(bf16[1024, 4096])\nb = input(bf16[1024])\n"
        "h = matmul(x, w, transpose_b=true)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n";
    static const unsigned modes[] = {KF_CUDA_RECIPE_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_MEASURED,
                                     KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_STREAMK};
    for (int v = 0; v < 2; v++)
        for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
            planned p;
            plan_text(text, &p);
            kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, DEVICES[v], NULL, modes[i]);
            const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
            bool dec = strstr(rc->variants[0].how, "decode kernel: split-K") != NULL;
            /* (sm_80: only with the flag until an A100 has run it) */
            if (dec != (i < 2 && v == 1))
                fail_msg("%s, mode %zu: %s", DEVICES[v], i, rc->variants[0].how);
            kf_cuda_recipes_destroy(rec);
            plan_release(&p);
        }
}

/* With the measured choice the decode kernel is the generated side, timed
 * against cuBLASLt. */
static void test_measured_decode_is_timed_against_cublaslt(void **state) {
    (void)state;
    planned p;
    plan_text("kfg 1\nx = input(bf16[16, 4096])\nw = input(bf16[4096, 4096])\n"
              "b = input(bf16[4096])\nh = matmul(x, w, transpose_b=true)\na = add(h, b)\n"
              "y = gelu_tanh(a)\noutput y\n",
              &p);
    kf_cuda_recipes *rec = kf_sass_recipes(
        &MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_MEASURED | KF_CUDA_RECIPE_GEMM_DECODE);
    const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
    assert_int_equal(rc->choice, KF_CUDA_CHOICE_MEASURED);
    assert_int_equal(rc->n_variants, 2);
    assert_non_null(strstr(rc->variants[0].how, "decode kernel: split-K"));
    assert_string_equal(rc->variants[1].label, "cublaslt");
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

int main(void) {
    kf_mem_resolve(&MEM, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_gemms_compile_to_hmma_ldgsts_ldsm),
        cmocka_unit_test(test_decode_forms_compile),
        cmocka_unit_test(test_decode_tma_form_compiles),
        cmocka_unit_test(test_decode_refusals_keep_the_tiled_kernel_and_say_why),
        cmocka_unit_test(test_decode_is_the_default_generated_side_to_m32),
        cmocka_unit_test(test_measured_decode_is_timed_against_cublaslt),
    };
    return kf_test_run(tests);
}
