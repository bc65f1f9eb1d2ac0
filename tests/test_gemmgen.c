/*
 * test_gemmgen.c -- the generated sm_90a GEMM kernel (codegen/cuda/
 * cg_gemm_sm90.c, templates/gemm_sm90.cuh) and its recipes, with no GPU:
 * every variant (tile width x epilogue kind x bf16/f16 x operand majors x
 * batching) is generated through the recipes, compiled by NVRTC for sm_90a,
 * and its SASS read with cuobjdump: HGMMA (the wgmma path, not a fallback to
 * HMMA) and UTMALDG (TMA loads) are there, and the resource report shows no
 * local memory (no spills). A missing cuobjdump fails the suite (CI installs
 * it: scripts/install-deps.sh). The recipes: which side each GEMM mode gives,
 * and why a group stays on cuBLASLt. Numerics run on the GPU
 * (test_cuda_exec, forced to the generated side).
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

/* The recipe of the plan's only GEMM group. */
static const kf_cuda_recipe *gemm_recipe(const kf_plan *plan, const kf_cuda_recipes *rec) {
    for (uint32_t gi = 0; gi < plan->n_groups; gi++)
        if (plan->groups[gi].kind == KF_GROUP_GEMM)
            return &rec->recipes[gi];
    fail_msg("no GEMM group");
    return NULL;
}

/* A measured choice between two variants: the generated kernel(s) first,
 * cuBLASLt and the kernels around it second. */
static void expect_measured_pair(const kf_cuda_recipe *rc) {
    assert_int_equal(rc->choice, KF_CUDA_CHOICE_MEASURED);
    assert_int_equal(rc->n_variants, 2);
    assert_string_equal(rc->variants[0].label, "generated");
    assert_string_equal(rc->variants[1].label, "cublaslt");
}

/* The generated kernel of `text`'s GEMM group with GEMM_GENERATED on an
 * H100 target: checked and compiled. `want_tile` is the tile the recipe must
 * name ("128x256", "dual 128x(2x64)": a dual kernel takes three maps). */
static void generated_case_with(const char *text, const char *want_tile, const char *want_sched,
                                unsigned flags) {
    bool dual = strncmp(want_tile, "dual", 4) == 0;
    uint32_t n_bmaps = dual ? 3 : 2; /* A's and B's maps */
    bool norm = strstr(text, "_norm(") != NULL; /* a norm prologue: a step before the GEMM */
    planned p;
    plan_text(text, &p);
    /* where: folded into B while 2 N < M (a statistics step, a pre-pass per
     * B), in the ring when asked (a statistics step), else the prologue
     * kernel's scratch (one step) */
    const kf_group *gg = NULL;
    for (uint32_t gi = 0; gi < p.plan->n_groups; gi++)
        if (p.plan->groups[gi].kind == KF_GROUP_GEMM)
            gg = &p.plan->groups[gi];
    const kf_tensor *mt = p.plan->graph->nodes[gg->gemm.anchor[0]];
    int64_t rows = 1;
    for (int d = 0; d + 1 < mt->rank; d++)
        rows *= mt->dims[d];
    bool ring = norm && !dual && (flags & KF_CUDA_RECIPE_GEMM_NORM_IN_RING);
    bool fold = norm && !ring && !(flags & KF_CUDA_RECIPE_GEMM_NORM_IN_RING) &&
                2 * mt->dims[mt->rank - 1] * (dual ? 2 : 1) < rows;
    bool scratch = norm && !ring && !fold;
    /* a fold's pre-passes: one launch (the default), or apart (PREPASS_APART) */
    bool one = fold && !(flags & KF_CUDA_RECIPE_GEMM_PREPASS_APART);
    uint32_t pre = one ? 1u : fold ? (dual ? 3u : 2u) : norm ? 1u : 0u;
    kf_cuda_recipes *rec =
        kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED | flags);
    const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
    if (rc->n_variants != 1 || strcmp(rc->variants[0].label, "generated") != 0)
        fail_msg("expected the generated kernel alone, got %u variant(s), '%s': %s", rc->n_variants,
                 rc->variants[0].label, rc->variants[0].how);
    assert_int_equal(rc->choice, KF_CUDA_CHOICE_ONLY);
    assert_int_equal(rc->n_steps, pre + 1);
    /* and the output's, with the TMA-store epilogue */
    uint32_t n_maps = n_bmaps + (strstr(rc->variants[0].how, "epilogue stored by TMA") ? 1 : 0);
    for (uint32_t i = 1; i < pre; i++) { /* the fold pre-passes: diag(gamma) B, compiled */
        assert_int_equal(rc->steps[i].kind, KF_CUDA_STEP_KERNEL);
        const kf_cuda_kstep *fs = rc->steps[i].kernel;
        assert_int_equal(fs->role, KF_CUDA_ROLE_GEMM_PROLOGUE);
        assert_int_equal(fs->kernel.tmpl, KF_CUDA_TEMPLATE_GEMM_FOLD);
        assert_non_null(strstr(fs->kernel.name, i == 1 ? "fold_" : "fold2_"));
        kf_nvrtc_result res;
        char err[KF_MSG_MAX] = "";
        if (kf_cuda_kernel_compile(&MEM, &fs->kernel, &res, err) != KF_OK)
            fail_msg("%s: %s\n%s", fs->kernel.name, err, res.log ? res.log : "");
        kf_nvrtc_result_release(&MEM, &res);
    }
    if (norm && !scratch) { /* the row statistics pre-pass: a row kernel, compiled */
        assert_int_equal(rc->steps[0].kind, KF_CUDA_STEP_KERNEL);
        const kf_cuda_kstep *ps = rc->steps[0].kernel;
        assert_int_equal(ps->role, KF_CUDA_ROLE_GEMM_PROLOGUE);
        assert_non_null(strstr(ps->kernel.name, one ? "pre_" : "stats_"));
        assert_non_null(strstr(ps->kernel.source, one ? "kf_pstats" : "kf_row_out"));
        kf_nvrtc_result res;
        char err[KF_MSG_MAX] = "";
        if (kf_cuda_kernel_compile(&MEM, &ps->kernel, &res, err) != KF_OK)
            fail_msg("%s: %s\n%s", ps->kernel.name, err, res.log ? res.log : "");
        kf_nvrtc_result_release(&MEM, &res);
        assert_non_null(strstr(rc->variants[0].how, fold ? "norm prologue folded into B"
                                                         : "norm prologue on A's tiles"));
    }
    if (scratch) { /* the prologue kernel writes A normalized */
        assert_int_equal(rc->steps[0].kind, KF_CUDA_STEP_KERNEL);
        assert_int_equal(rc->steps[0].kernel->role, KF_CUDA_ROLE_GEMM_PROLOGUE);
        assert_non_null(strstr(rc->variants[0].how, "A from the prologue kernel's scratch"));
    }
    const kf_cuda_step *gs = &rc->steps[rc->n_steps - 1];
    assert_int_equal(gs->kind, KF_CUDA_STEP_KERNEL);
    const kf_cuda_kstep *ks = gs->kernel;
    if (norm && !scratch) /* the pre-pass's statistics are the GEMM's: one buffer */
        assert_non_null(
            strstr(ks->kernel.source, fold ? "#define KF_A_FOLD 1" : "#define KF_A_NORM 1"));
    if (scratch)
        assert_int_equal(ks->args[0].buf.kind, KF_CUDA_BUF_SCRATCH);
    if (fold) /* B is the fold's scratch */
        for (uint32_t i = 1; i < n_bmaps; i++)
            assert_int_equal(ks->args[i].buf.kind, KF_CUDA_BUF_SCRATCH);
    assert_int_equal(ks->kernel.tmpl, KF_CUDA_TEMPLATE_GEMM_SM90);
    assert_int_equal(ks->role, KF_CUDA_ROLE_GEMM);
    assert_int_equal(ks->block[0], 384);
    assert_true(ks->grid[0] >= 1 && ks->grid[0] <= 132);
    assert_int_equal(ks->n_tmaps, n_maps);
    for (uint32_t i = 0; i < n_maps; i++) {
        assert_int_equal(ks->args[i].kind, KF_CUDA_ARG_TMAP);
        assert_int_equal(ks->args[i].value, i);
    }
    assert_int_equal(ks->n_args, ks->kernel.n_params + n_maps);
    if (dual) /* the two B maps: one box shape, each over its own tensor */
        assert_memory_equal(ks->tmaps[1].box, ks->tmaps[2].box, sizeof ks->tmaps[1].box);
    /* a pair's cooperative 128 x (2 x 128) tiles run as 2-CTA clusters where
     * they have two tile rows or more (the default there); the rest one CTA */
    bool pair_c2 = dual && strstr(want_tile, "(2x128)") && strcmp(want_sched, "cooperative") == 0 &&
                   rows > 128;
    assert_int_equal(ks->cluster[0], pair_c2 ? 2 : 1);
    assert_true(!dual || ks->args[1].buf.id != ks->args[2].buf.id);
    char tile[48];
    snprintf(tile, sizeof tile, "%s%s", want_tile, strstr(want_tile, " tiles") ? "" : " tiles");
    if (!strstr(rc->variants[0].how, tile) || !strstr(rc->variants[0].how, want_sched))
        fail_msg("expected %s %s: %s", tile, want_sched, rc->variants[0].how);
    assert_true(ks->shared_bytes <= 227u * 1024u);
    kf_sass_check_hopper(&MEM, &ks->kernel);
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

static void generated_case(const char *text, const char *want_tile, const char *want_sched) {
    generated_case_with(text, want_tile, want_sched, 0);
    if (strstr(text, "_norm(") && strncmp(want_tile, "dual", 4) != 0) /* and in the ring */
        generated_case_with(text, want_tile, want_sched, KF_CUDA_RECIPE_GEMM_NORM_IN_RING);
}

static void test_every_gemm_variant_compiles_to_hgmma_and_utmaldg(void **state) {
    (void)state;
    static const char *const dts[] = {"bf16", "f16"};
    for (int d = 0; d < 2; d++) {
        char t[1024];
        /* a bare product, 128 x 256 tiles (64 x 16 tiles fill 132 SMs; K past
         * 1024, where a TMA-store epilogue takes ping-pong 128-wide tiles) */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[8192, 2048])\nw = input(%s[2048, 4096])\n"
                 "y = matmul(x, w)\noutput y\n",
                 dts[d], dts[d]);
        generated_case(t, "128x256", "cooperative");
        /* bias + gelu (erf; the bf16 table), 128 x 128 tiles, ragged M/N/K */
        snprintf(
            t, sizeof t,
            "kfg 1\nx = input(%s[1000, 1000])\nw = input(%s[1000, 1000])\nb = input(%s[1000])\n"
            "h = matmul(x, w)\na = add(h, b)\ny = gelu(a)\noutput y\n",
            dts[d], dts[d], dts[d]);
        generated_case(t, "128x128", "cooperative");
        /* ping-pong: 128 x 128 tiles, 266 of them for 132 SMs */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[17000, 128])\nw = input(%s[128, 200])\nb = input(%s[200])\n"
                 "h = matmul(x, w)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
                 dts[d], dts[d], dts[d]);
        generated_case(t, "128x128", "ping-pong");
        /* bias, relu, residual, scale, then a cast to f32; B transposed (K-major) */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[256, 512])\nw = input(%s[384, 512])\nb = input(%s[384])\n"
                 "r = input(%s[256, 384])\ns = input(%s[])\n"
                 "h = matmul(x, w, transpose_b=true)\na = add(h, b)\nu = relu(a)\nv = add(u, r)\n"
                 "z = mul(v, s)\ny = cast(z, f32)\noutput y\n",
                 dts[d], dts[d], dts[d], dts[d], dts[d]);
        generated_case(t, "128x128", "cooperative");
        /* batched, both operands per batch, A transposed (M-major), M = 1 */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[4, 64, 1])\nw = input(%s[4, 64, 256])\n"
                 "y = matmul(x, w, transpose_a=true)\noutput y\n",
                 dts[d], dts[d]);
        generated_case(t, "128x128", "cooperative");
        /* SwiGLU as one dual kernel: 64 x 32 output tiles of 128 x 128
         * (gate and up 128 columns each) fill 132 SMs */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[8192, 512])\nwg = input(%s[512, 4096])\n"
                 "wu = input(%s[512, 4096])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
                 "a = silu(g)\ny = mul(a, u)\noutput y\n",
                 dts[d], dts[d], dts[d]);
        generated_case(t, "dual 128x(2x128)", "cooperative");
        /* dual ping-pong 128 x (2 x 64), ragged M/N/K, both B transposed
         * (K-major), a cast after the gated product */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[1000, 200])\nwg = input(%s[1096, 200])\n"
                 "wu = input(%s[1096, 200])\ng = matmul(x, wg, transpose_b=true)\n"
                 "u = matmul(x, wu, transpose_b=true)\na = silu(g)\nh = mul(a, u)\n"
                 "y = cast(h, f32)\noutput y\n",
                 dts[d], dts[d], dts[d]);
        generated_case(t, "dual 128x(2x64)", "ping-pong");
        /* dual cooperative 128 x (2 x 64) (few tiles), batched A */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[3, 100, 64])\nwg = input(%s[3, 64, 136])\n"
                 "wu = input(%s[3, 64, 136])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
                 "a = silu(g)\ny = mul(a, u)\noutput y\n",
                 dts[d], dts[d], dts[d]);
        generated_case(t, "dual 128x(2x64)", "cooperative");
        /* norm prologue: RMSNorm of A's rows, ragged M/N/K, cooperative */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[1000, 264])\ng = input(%s[264])\nw = input(%s[264, 1096])\n"
                 "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
                 dts[d], dts[d], dts[d]);
        generated_case(t, "128x128", "cooperative");
        /* LayerNorm prologue (mean and rstd), batch folded into M, a bias */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[2, 300, 200])\ng = input(%s[200])\nc = input(%s[200])\n"
                 "w = input(%s[200, 136])\nb = input(%s[136])\nn = layer_norm(x, g, c)\n"
                 "y = matmul(n, w)\nz = add(y, b)\noutput z\n",
                 dts[d], dts[d], dts[d], dts[d], dts[d]);
        generated_case(t, "128x128", "cooperative");
        /* norm prologue in the ping-pong schedule (each consumer all 128 rows) */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[17000, 128])\ng = input(%s[128])\nw = input(%s[128, 200])\n"
                 "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
                 dts[d], dts[d], dts[d]);
        generated_case(t, "128x128", "ping-pong");
        /* a SwiGLU pair behind an RMSNorm (folded: a pre-pass per B) and a
         * LayerNorm with K-major B (the pre-pass's other layout) */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[3000, 264])\ng = input(%s[264])\n"
                 "wg = input(%s[264, 392])\nwu = input(%s[264, 392])\nn = rms_norm(x, g)\n"
                 "gt = matmul(n, wg)\nu = matmul(n, wu)\na = silu(gt)\ny = mul(a, u)\noutput y\n",
                 dts[d], dts[d], dts[d], dts[d]);
        generated_case(t, "dual 128x(2x64)", "ping-pong");
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[300, 200])\ng = input(%s[200])\nc = input(%s[200])\n"
                 "w = input(%s[136, 200])\nn = layer_norm(x, g, c)\n"
                 "y = matmul(n, w, transpose_b=true)\noutput y\n",
                 dts[d], dts[d], dts[d], dts[d]);
        generated_case(t, "128x128", "cooperative");
        /* and at 128 x 256 (K past 1024, as above) */
        snprintf(
            t, sizeof t,
            "kfg 1\nx = input(%s[8192, 2048])\ng = input(%s[2048])\nw = input(%s[2048, 4096])\n"
            "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
            dts[d], dts[d], dts[d]);
        generated_case(t, "128x256", "cooperative");
    }
}

/* The split row form (gemm.row_split) on the generated side: the GEMM
 * kernel (HGMMA, UTMALDG, no local memory) writing the norm's input rows --
 * to a SCRATCH when the plan does not materialize them -- then the row pass
 * reading them as its accumulator, compiled; the recipe line says so. */
/* `device`: "h100" (the wgmma kernel), "a100" (mma.sync), or "h100-sm80"
 * (mma.sync forced on sm_90a: KF_GEMM_SM80). */
static void split_case_on(const char *text, bool x_written, const char *want_tile,
                          const char *device) {
    planned p;
    kf_plan_options o; /* as KF_FLAG_SPLIT_ROW_NORMS plans */
    kf_plan_options_init(&o);
    o.gemm_row_split_max_n = KF_GEMM_ROW_SPLIT_MAX_N;
    plan_text_with(text, &o, &p);
    bool sm80 = strcmp(device, "h100") != 0;
    unsigned flags = KF_CUDA_RECIPE_GEMM_GENERATED |
                     (strcmp(device, "h100-sm80") == 0 ? KF_CUDA_RECIPE_GEMM_SM80 : 0u);
    kf_cuda_recipes *rec = kf_sass_recipes(
        &MEM, p.plan, sm80 && strcmp(device, "a100") == 0 ? "a100" : "h100", NULL, flags);
    const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
    const kf_group *g = &p.plan->groups[rc->group];
    assert_true(g->gemm.row_split);
    if (rc->n_variants != 1 || strcmp(rc->variants[0].label, "generated") != 0)
        fail_msg("expected the generated side, got '%s': %s", rc->variants[0].label,
                 rc->variants[0].how);
    assert_int_equal(rc->n_steps, 2);
    const kf_cuda_kstep *gk = rc->steps[0].kernel, *rk = rc->steps[1].kernel;
    assert_int_equal(rc->steps[0].kind, KF_CUDA_STEP_KERNEL);
    assert_int_equal(rc->steps[1].kind, KF_CUDA_STEP_KERNEL);
    assert_int_equal(gk->role, KF_CUDA_ROLE_GEMM);
    assert_int_equal(rk->role, KF_CUDA_ROLE_EPILOGUE);
    const char *how = rc->variants[0].how;
    if (!strstr(how, "split row form") || !strstr(how, want_tile))
        fail_msg("expected the split row form on %s tiles: %s", want_tile, how);
    /* the GEMM's last param is X's buffer; the row pass's first is the same one */
    const kf_cuda_arg *gx = &gk->args[gk->n_args - 1], *rx = &rk->args[0];
    assert_true(gx->written);
    assert_false(rx->written);
    assert_int_equal(gx->buf.kind, x_written ? KF_CUDA_BUF_TENSOR : KF_CUDA_BUF_SCRATCH);
    assert_int_equal(gx->buf.kind, rx->buf.kind);
    assert_int_equal(gx->buf.id, rx->buf.id);
    assert_int_equal(gk->kernel.params[gk->kernel.n_params - 1].kind,
                     x_written ? KF_CUDA_PARAM_OUT : KF_CUDA_PARAM_SCRATCH);
    assert_int_equal(rk->kernel.params[0].kind, KF_CUDA_PARAM_ACC);
    /* no statistic in the GEMM's epilogue; the row pass computes them */
    assert_null(strstr(gk->kernel.source, "#define KF_ROW_EPI 1"));
    if (sm80) {
        assert_int_equal(gk->kernel.tmpl, KF_CUDA_TEMPLATE_GEMM_SM80);
        kf_sass_check_ampere(&MEM, &gk->kernel);
    } else {
        assert_non_null(strstr(gk->kernel.source, "#define KF_A_NORM 0"));
        kf_sass_check_hopper(&MEM, &gk->kernel);
    }
    kf_nvrtc_result res;
    char err[KF_MSG_MAX] = "";
    if (kf_cuda_kernel_compile(&MEM, &rk->kernel, &res, err) != KF_OK)
        fail_msg("%s: %s\n%s", rk->kernel.name, err, res.log ? res.log : "");
    kf_nvrtc_result_release(&MEM, &res);
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

/* A folded norm's pre-passes in one launch (the default; internal
 * PREPASS_APART keeps them apart): the recipe's one pre-pass step comes first, a "pre_" kernel
 * with the row statistics and each of the `folds` folds of B (a set's
 * members', a SwiGLU pair's two), then `gemms` GEMM steps; the kernel
 * compiles with no local memory. With PREPASS_APART the pre-passes stay apart. */
static void prepass_case(const char *text, uint64_t flags, uint32_t folds, uint32_t gemms) {
    planned p;
    plan_text(text, &p);
    kf_cuda_recipes *rec =
        kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED | flags);
    const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
    if (rc->n_variants != 1 || !strstr(rc->variants[0].how, "folded into B (one pre-pass"))
        fail_msg("expected the pre-passes in one launch: %s", rc->variants[0].how);
    assert_int_equal(rc->n_steps, 1 + gemms);
    const kf_cuda_kstep *pk = rc->steps[0].kernel;
    assert_int_equal(rc->steps[0].kind, KF_CUDA_STEP_KERNEL);
    assert_int_equal(pk->role, KF_CUDA_ROLE_GEMM_PROLOGUE);
    assert_int_equal(strncmp(pk->kernel.name, "pre_", 4), 0);
    char want[32];
    snprintf(want, sizeof want, "#define KF_PJOBS %u\n", folds);
    assert_non_null(strstr(pk->kernel.source, want));
    assert_non_null(strstr(pk->kernel.source, "#define KF_PSTATS 1\n"));
    for (uint32_t i = 1; i <= gemms; i++)
        assert_int_equal(rc->steps[i].kernel->role, KF_CUDA_ROLE_GEMM);
    static const char *const ops[] = {"SHFL.BFLY", NULL};
    static const char *const why[] = {"the statistics' warp sums"};
    kf_sass_check_ops(&MEM, &pk->kernel, ops, why, NULL);
    kf_cuda_recipes_destroy(rec);
    /* the same graph with PREPASS_APART: a statistics step, a fold step a B */
    rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                          KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_PREPASS_APART | flags);
    rc = gemm_recipe(p.plan, rec);
    assert_int_equal(rc->n_steps, 1 + folds + gemms);
    assert_non_null(strstr(rc->steps[0].kernel->kernel.name, "stats_"));
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

static void test_prepass_in_one_launch_compiles_without_local_memory(void **state) {
    (void)state;
    /* GPT-2's Q, K, V behind their LayerNorm (M 8192): as one GEMM, and apart */
    const char *qkv =
        "kfg 1\nx = input(bf16[8192, 1024])\ng = input(bf16[1024])\nc = input(bf16[1024])\n"
        "wq = input(bf16[1024, 1024])\nbq = input(bf16[1024])\nwk = input(bf16[1024, 1024])\n"
        "bk = input(bf16[1024])\nwv = input(bf16[1024, 1024])\nbv = input(bf16[1024])\n"
        "n = layer_norm(x, g, c, eps=1e-5)\nq0 = matmul(n, wq)\nq = add(q0, bq)\n"
        "k0 = matmul(n, wk)\nk = add(k0, bk)\nv0 = matmul(n, wv)\nv = add(v0, bv)\n"
        "output q\noutput k\noutput v\n";
    prepass_case(qkv, 0, 3, 1);
    prepass_case(qkv, KF_CUDA_RECIPE_GEMM_SIB_APART, 3, 3);
    /* RMSNorm before a K-major B, ragged, f16 */
    prepass_case("kfg 1\nx = input(f16[1000, 264])\ng = input(f16[264])\n"
                 "w = input(f16[392, 264])\nn = rms_norm(x, g)\n"
                 "y = matmul(n, w, transpose_b=true)\noutput y\n",
                 0, 1, 1);
    /* a LayerNorm SwiGLU pair: two folds */
    prepass_case("kfg 1\nx = input(bf16[3000, 200])\ng = input(bf16[200])\nc = input(bf16[200])\n"
                 "wg = input(bf16[200, 392])\nwu = input(bf16[200, 392])\nn = layer_norm(x, g, c)\n"
                 "gt = matmul(n, wg)\nu = matmul(n, wu)\na = silu(gt)\ny = mul(a, u)\noutput y\n",
                 0, 2, 1);
}

/* The IN params of kernel k (the bias is the only one a folded GEMM of
 * these graphs reads through a param: A and B come by TMA). */
static uint32_t in_params(const kf_cuda_kernel *k) {
    uint32_t n = 0;
    for (uint32_t j = 0; j < k->n_params; j++)
        n += k->params[j].kind == KF_CUDA_PARAM_IN;
    return n;
}

/* A LayerNorm folded into B with a bias after the product (GPT-2's FC1 and
 * Q/K/V): by default the pre-pass adds the bias into the fold's column
 * terms d (BIAS = true, the bias one of its params) and the GEMM kernel
 * reads no bias, its load -0 in the epilogue; FOLD_BIAS_EPI keeps the bias
 * in the epilogue. A product read twice, or an RMSNorm (no d), keeps it. */
static void fold_bias_case(const char *text, uint64_t flags, bool want) {
    planned p;
    plan_text(text, &p);
    kf_cuda_recipes *rec =
        kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED | flags);
    const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
    if (!strstr(rc->variants[0].how, "folded into B (one pre-pass"))
        fail_msg("expected the norm folded into B, one pre-pass: %s", rc->variants[0].how);
    assert_int_equal(rc->n_steps, 2);
    const kf_cuda_kernel *pre = &rc->steps[0].kernel->kernel, *gk = &rc->steps[1].kernel->kernel;
    assert_int_equal(strncmp(pre->name, "pre_", 4), 0);
    assert_int_equal(rc->steps[1].kernel->role, KF_CUDA_ROLE_GEMM);
    bool bias_in_d = strstr(pre->source, "BIAS = true;") != NULL;
    if (bias_in_d != want)
        fail_msg("the pre-pass %s the bias (want %s): %s", bias_in_d ? "takes" : "does not take",
                 want ? "taken" : "not", rc->variants[0].how);
    assert_non_null(strstr(pre->source, want ? "BIAS = true;" : "BIAS = false;"));
    /* the bias is the GEMM kernel's IN param, or the pre-pass's (beside
     * the statistics' x and the fold's B, gamma and beta) */
    assert_int_equal(in_params(pre), want ? 5u : 4u);
    if (!strstr(text, "mul("))
        assert_int_equal(in_params(gk), want ? 0u : 1u);
    if (want)
        assert_non_null(strstr(gk->source, "(float)(-0.0f)"));
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

static void test_layer_norm_fold_takes_the_bias_into_its_column_terms(void **state) {
    (void)state;
    static const char *const fc1 =
        "kfg 1\nx = input(bf16[4224, 1000])\ng = input(bf16[1000])\nc = input(bf16[1000])\n"
        "w = input(bf16[1000, 520])\nb = input(bf16[520])\nn = layer_norm(x, g, c)\n"
        "y = matmul(n, w)\nz = add(y, b)\nh = gelu_tanh(z)\noutput h\n";
    fold_bias_case(fc1, 0, true);
    fold_bias_case(fc1, KF_CUDA_RECIPE_GEMM_FOLD_BIAS_EPI, false);
    /* the pre-passes apart (PREPASS_APART): the fold kernel takes the bias
     * (KF_FBIAS 1) and compiles */
    planned p;
    plan_text(fc1, &p);
    kf_cuda_recipes *rec = kf_sass_recipes(
        &MEM, p.plan, "h100", NULL,
        KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_PREPASS_APART);
    const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
    assert_int_equal(rc->n_steps, 3); /* statistics, fold, GEMM */
    const kf_cuda_kernel *fk = &rc->steps[1].kernel->kernel;
    assert_int_equal(strncmp(fk->name, "fold_", 5), 0);
    assert_non_null(strstr(fk->source, "#define KF_FBIAS 1\n"));
    assert_int_equal(in_params(fk), 4u); /* B, gamma, beta, the bias */
    assert_int_equal(in_params(&rc->steps[2].kernel->kernel), 0u);
    kf_nvrtc_result res;
    char err[KF_MSG_MAX] = "";
    if (kf_cuda_kernel_compile(&MEM, fk, &res, err) != KF_OK)
        fail_msg("%s: %s\n%s", fk->name, err, res.log ? res.log : "");
    kf_nvrtc_result_release(&MEM, &res);
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
    /* the bias alone, written (ln_qkv's form), the add's operands swapped */
    fold_bias_case("kfg 1\nx = input(bf16[2100, 200])\ng = input(bf16[200])\n"
                   "c = input(bf16[200])\nw = input(bf16[200, 136])\nb = input(bf16[136])\n"
                   "n = layer_norm(x, g, c)\ny = matmul(n, w)\nz = add(b, y)\noutput z\n",
                   0, true);
    /* the product read again past its bias: the bias stays */
    fold_bias_case("kfg 1\nx = input(bf16[2100, 200])\ng = input(bf16[200])\n"
                   "c = input(bf16[200])\nw = input(bf16[200, 136])\nb = input(bf16[136])\n"
                   "n = layer_norm(x, g, c)\ny = matmul(n, w)\nz = add(y, b)\n"
                   "q = mul(z, y)\noutput q\n",
                   0, false);
}

static void split_case(const char *text, bool x_written, const char *want_tile) {
    split_case_on(text, x_written, want_tile, "h100");
}

static void test_split_row_norms_compile_to_a_gemm_and_a_row_pass(void **state) {
    (void)state;
    /* two cases (each a GEMM kernel and a row kernel through NVRTC): the
     * bench's shape, bf16 bias + residual + LayerNorm 8192 x 4096 x 4096, its
     * pre-norm rows in a scratch; and f16 ragged RMSNorm whose pre-norm rows
     * are written (a residual stream) */
    split_case("kfg 1\nx = input(bf16[8192, 4096])\nw = input(bf16[4096, 4096])\n"
               "b = input(bf16[4096])\nr = input(bf16[8192, 4096])\ng = input(bf16[4096])\n"
               "c = input(bf16[4096])\nh = matmul(x, w)\nhb = add(h, b)\ns = add(hb, r)\n"
               "y = layer_norm(s, g, c, eps=1e-5)\noutput y\n",
               false, "128x256");
    split_case("kfg 1\nx = input(f16[1000, 264])\nw = input(f16[264, 1096])\n"
               "r = input(f16[1000, 1096])\ng = input(f16[1096])\nh = matmul(x, w)\n"
               "s = add(h, r)\ny = rms_norm(s, g, eps=1e-6)\noutput y\noutput s\n",
               true, "128x128");
    /* the sm_80 kernel takes the form too: on an A100, and forced on sm_90a */
    split_case_on("kfg 1\nx = input(bf16[1000, 264])\nw = input(bf16[264, 1096])\n"
                  "b = input(bf16[1096])\nr = input(bf16[1000, 1096])\ng = input(bf16[1096])\n"
                  "c = input(bf16[1096])\nh = matmul(x, w)\nhb = add(h, b)\ns = add(hb, r)\n"
                  "y = layer_norm(s, g, c, eps=1e-5)\noutput y\n",
                  false, "mma.sync 64x64x32", "a100");
    split_case_on("kfg 1\nx = input(f16[1000, 264])\nw = input(f16[264, 1096])\n"
                  "r = input(f16[1000, 1096])\ng = input(f16[1096])\nh = matmul(x, w)\n"
                  "s = add(h, r)\ny = rms_norm(s, g, eps=1e-6)\noutput y\noutput s\n",
                  true, "mma.sync 64x64x32", "h100-sm80");
}

/* The SASS of a row-epilogue kernel: every opcode of `want` (NULL-ended),
 * no HGMMA on sm_80, and a stack frame of at most `max_stack` bytes. The
 * first pass of the row epilogue holds the whole tile's x (or accumulators)
 * while the compiler hoists the next columns' loads above it: ptxas spills
 * a few registers there (measured 36-100 bytes, sm_90a's 168-register
 * kernel and sm_80's 255; 0 for some). A larger frame, or any local memory
 * besides the stack, fails. */
static void row_sass_check(const kf_cuda_kernel *k, const char *const *want, bool sm80,
                           unsigned max_stack) {
    char path[] = "/tmp/kf_sass_XXXXXX";
    kf_sass_cubin(&MEM, k, path);
    static char out[1 << 23];
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s' -sass '%s' 2>&1", KF_CUOBJDUMP, path);
    kf_sass_run(cmd, out, sizeof out);
    for (int i = 0; want[i]; i++)
        if (!strstr(out, want[i]))
            fail_msg("%s: no %s in the SASS", k->name, want[i]);
    if (sm80 && strstr(out, "HGMMA"))
        fail_msg("%s: HGMMA in the sm_80 kernel", k->name);
    snprintf(cmd, sizeof cmd, "'%s' -res-usage '%s' 2>&1", KF_CUOBJDUMP, path);
    kf_sass_run(cmd, out, sizeof out);
    unlink(path);
    const char *st = strstr(out, "STACK:");
    if (!st || !strstr(out, "LOCAL:0"))
        fail_msg("%s: no stack size, or local memory: %.200s", k->name, out);
    unsigned stack = (unsigned)strtoul(st + 6, NULL, 10);
    if (stack > max_stack)
        fail_msg("%s: a stack frame of %u bytes (spills) past %u", k->name, stack, max_stack);
    print_message("%s: stack frame %u bytes\n", k->name, stack);
}

/* A norm or softmax of the GEMM's rows (N <= 256: gemm.row_epilogue) in the
 * generated kernel's tile: one step, the recipe names the form and the tile
 * whose width covers N, the source has KF_ROW_EPI, and the SASS is the
 * kernel's own (HGMMA + UTMALDG, or HMMA + LDGSTS + LDSM; the quad's
 * shuffles) with at most a small stack frame (row_sass_check says why).
 * `device`: "h100", "a100", or "h100-sm80" (mma.sync forced). */
static void row_case(const char *text, const char *device, const char *want_tile) {
    planned p;
    plan_text(text, &p);
    bool sm80 = strcmp(device, "h100") != 0;
    unsigned flags = KF_CUDA_RECIPE_GEMM_GENERATED |
                     (strcmp(device, "h100-sm80") == 0 ? KF_CUDA_RECIPE_GEMM_SM80 : 0u);
    kf_cuda_recipes *rec =
        kf_sass_recipes(&MEM, p.plan, strcmp(device, "a100") == 0 ? "a100" : "h100", NULL, flags);
    const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
    const kf_group *g = &p.plan->groups[rc->group];
    assert_true(g->gemm.row_epilogue);
    assert_false(g->gemm.row_split);
    if (rc->n_variants != 1 || strcmp(rc->variants[0].label, "generated") != 0)
        fail_msg("expected the generated side, got '%s': %s", rc->variants[0].label,
                 rc->variants[0].how);
    assert_int_equal(rc->n_steps, 1);
    const kf_cuda_kstep *ks = rc->steps[0].kernel;
    assert_int_equal(ks->role, KF_CUDA_ROLE_GEMM);
    const char *how = rc->variants[0].how;
    if (!strstr(how, "row epilogue in the tile") || !strstr(how, want_tile))
        fail_msg("expected the row epilogue in %s tiles: %s", want_tile, how);
    assert_non_null(strstr(ks->kernel.source, "#define KF_ROW_EPI 1"));
    assert_non_null(strstr(ks->kernel.source, "kf_pre<"));
    static const char *const hopper[] = {"HGMMA", "UTMALDG", "SHFL.BFLY", NULL};
    static const char *const ampere[] = {"HMMA", "LDGSTS", "LDSM", "SHFL.BFLY", "BAR.SYNC", NULL};
    if (sm80) {
        assert_int_equal(ks->kernel.tmpl, KF_CUDA_TEMPLATE_GEMM_SM80);
        assert_true(ks->shared_bytes <= 99u * 1024u);
        row_sass_check(&ks->kernel, ampere, true, 128);
    } else {
        assert_int_equal(ks->kernel.tmpl, KF_CUDA_TEMPLATE_GEMM_SM90);
        row_sass_check(&ks->kernel, hopper, false, 128);
    }
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

static void test_row_epilogues_compile_in_the_tile_without_local_memory(void **state) {
    (void)state;
    static const char *const ln =
        "kfg 1\nx = input(%s[1000, 264])\nw = input(%s[264, %d])\nb = input(%s[%d])\n"
        "r = input(%s[1000, %d])\ng = input(%s[%d])\nc = input(%s[%d])\nh = matmul(x, w)\n"
        "hb = add(h, b)\ns = add(hb, r)\ny = layer_norm(s, g, c, eps=1e-5)\noutput y\noutput s\n";
    static const char *const rms =
        "kfg 1\nx = input(%s[%d, 128])\nw = input(%s[%d, 128])\nr = input(%s[%d, %d])\n"
        "g = input(%s[%d])\nh = matmul(x, w, transpose_b=true)\ns = add(h, r)\n"
        "y = rms_norm(s, g, eps=1e-6)\noutput y\n";
    static const char *const sm =
        "kfg 1\nx = input(%s[3, 100, 72])\nw = input(%s[3, 72, %d])\nh = matmul(x, w)\n"
        "z = softmax(h)\noutput z\n";
    char t[1024];
    /* LayerNorm, N = 200 (ragged): 128 x 256 on both kernels, bf16 */
    snprintf(t, sizeof t, ln, "bf16", "bf16", 200, "bf16", 200, "bf16", 200, "bf16", 200, "bf16",
             200);
    row_case(t, "h100", "128x256 tiles cooperative");
    row_case(t, "a100", "mma.sync 128x256x32 tiles on 8 warps");
    row_case(t, "h100-sm80", "mma.sync 128x256x32 tiles on 8 warps");
    /* LayerNorm, N = 64, f16: 128-wide tiles */
    snprintf(t, sizeof t, ln, "f16", "f16", 64, "f16", 64, "f16", 64, "f16", 64, "f16", 64);
    row_case(t, "h100", "128x128 tiles cooperative");
    row_case(t, "a100", "mma.sync 128x128x32 tiles on 4 warps");
    /* RMSNorm, N = 128, K-major B, enough rows for ping-pong tiles */
    snprintf(t, sizeof t, rms, "bf16", 20000, "bf16", 128, "bf16", 20000, 128, "bf16", 128);
    row_case(t, "h100", "128x128 tiles ping-pong");
    row_case(t, "a100", "mma.sync 128x128x32 tiles on 4 warps");
    /* softmax, N = 256 and 100, batched: f16 and bf16 */
    snprintf(t, sizeof t, sm, "f16", "f16", 256);
    row_case(t, "h100", "128x256 tiles");
    row_case(t, "h100-sm80", "mma.sync 128x256x32 tiles on 8 warps");
    snprintf(t, sizeof t, sm, "bf16", "bf16", 104);
    row_case(t, "a100", "mma.sync 128x128x32 tiles on 4 warps");
}

/* The generated GEMM's other schedules, reachable by the internal recipe
 * flags (the bench times them): the staged epilogue and forced ping-pong
 * tiles compile to HGMMA + UTMALDG with no local memory, the default is the
 * register epilogue, and the recipe line names what it took. */
static void test_staged_and_pingpong_schedules_compile(void **state) {
    (void)state;
    static const char *const texts[] = {
        /* bias + tanh gelu, 64 x 16 tiles of 128 x 256 (K past 1024: not
         * ping-pong by default) */
        "kfg 1\nx = input(bf16[8192, 1536])\nw = input(bf16[1536, 4096])\nb = input(bf16[4096])\n"
        "h = matmul(x, w)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
        /* SwiGLU dual, ragged, a residual after the gated product */
        "kfg 1\nx = input(f16[4000, 264])\nwg = input(f16[264, 4104])\nwu = input(f16[264, 4104])\n"
        "r = input(f16[4000, 4104])\ng = matmul(x, wg)\nu = matmul(x, wu)\na = silu(g)\n"
        "h = mul(a, u)\ny = add(h, r)\noutput y\n"};
    static const unsigned flags[] = {
        0, KF_CUDA_RECIPE_GEMM_STAGED_EPI, KF_CUDA_RECIPE_GEMM_PINGPONG,
        KF_CUDA_RECIPE_GEMM_PINGPONG | KF_CUDA_RECIPE_GEMM_STAGED_EPI};
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++) {
        planned p;
        plan_text(texts[t], &p);
        for (size_t f = 0; f < sizeof flags / sizeof flags[0]; f++) {
            kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                                                   KF_CUDA_RECIPE_GEMM_GENERATED | flags[f]);
            const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
            assert_string_equal(rc->variants[0].label, "generated");
            const char *how = rc->variants[0].how;
            bool staged = (flags[f] & KF_CUDA_RECIPE_GEMM_STAGED_EPI) != 0;
            bool pp = (flags[f] & KF_CUDA_RECIPE_GEMM_PINGPONG) != 0;
            if ((strstr(how, "staged in shared memory") != NULL) != staged ||
                (strstr(how, "ping-pong") != NULL) != pp)
                fail_msg("flags 0x%x: %s", flags[f], how);
            const kf_cuda_kernel *k = &rc->steps[0].kernel->kernel;
            assert_non_null(strstr(k->source, staged ? "#define KF_EPI_DIRECT 0"
                                                     : "#define KF_EPI_DIRECT 1"));
            /* the sigmoid family is the epilogue's branch-free one */
            assert_non_null(strstr(k->source, "#define kf_silu kf_gm_silu"));
            kf_sass_check_hopper(&MEM, k);
            kf_cuda_recipes_destroy(rec);
        }
        plan_release(&p);
    }
}

/* The sm_90a GEMM `k` with the TMA-store epilogue: HGMMA, TMA loads and
 * stores, no local memory. */
static void check_tma_store_sass(const kf_cuda_kernel *k) {
    static const char *const want[] = {"HGMMA", "UTMALDG", "UTMASTG", NULL};
    static const char *const why[] = {"wgmma fell back?", "no TMA loads", "no TMA stores"};
    kf_sass_check_ops(&MEM, k, want, why, NULL);
}

/* The TMA-store epilogue (the default; KF_CUDA_RECIPE_GEMM_EPI_REGS keeps
 * the register one): a third tensor map
 * over the one output, {N, M, batch} in 64 x 64 boxes; the SASS stores by
 * TMA (UTMASTG) and keeps no local memory; cooperative and ping-pong, with a
 * LayerNorm folded into B, batched with a ragged M. A pair keeps the
 * register epilogue (two outputs' worth of columns a tile). */
static void test_tma_store_epilogue_compiles_to_utmastg(void **state) {
    (void)state;
    static const char *const texts[] = {
        "kfg 1\nx = input(bf16[8192, 512])\nw = input(bf16[512, 4096])\nb = input(bf16[4096])\n"
        "h = matmul(x, w)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
        "kfg 1\nx = input(f16[4096, 256])\ng = input(f16[256])\nc = input(f16[256])\n"
        "w = input(f16[256, 768])\nb = input(f16[768])\nn = layer_norm(x, g, c, eps=1e-5)\n"
        "h = matmul(n, w)\ny = add(h, b)\noutput y\n",
        "kfg 1\nx = input(bf16[2, 1000, 264])\nw = input(bf16[2, 264, 520])\n"
        "r = input(bf16[2, 1000, 520])\nh = matmul(x, w)\ny = add(h, r)\noutput y\n",
        "kfg 1\nx = input(bf16[4096, 256])\nwg = input(bf16[256, 1024])\n"
        "wu = input(bf16[256, 1024])\ng = matmul(x, wg)\nu = matmul(x, wu)\na = silu(g)\n"
        "y = mul(a, u)\noutput y\n"};
    static const unsigned flags[] = {0, KF_CUDA_RECIPE_GEMM_PINGPONG, KF_CUDA_RECIPE_GEMM_EPI_REGS,
                                     KF_CUDA_RECIPE_GEMM_PP_EARLY, KF_CUDA_RECIPE_GEMM_EPI_AHEAD};
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++) {
        bool pair = t == 3;
        planned p;
        plan_text(texts[t], &p);
        for (size_t f = 0; f < sizeof flags / sizeof flags[0]; f++) {
            kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                                                   KF_CUDA_RECIPE_GEMM_GENERATED | flags[f]);
            const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
            assert_string_equal(rc->variants[0].label, "generated");
            const char *how = rc->variants[0].how;
            bool tma = !pair && !(flags[f] & KF_CUDA_RECIPE_GEMM_EPI_REGS);
            if ((strstr(how, "epilogue stored by TMA") != NULL) != tma)
                fail_msg("case %zu flags 0x%x: %s", t, flags[f], how);
            const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
            assert_int_equal(ks->n_tmaps, tma || pair ? 3 : 2);
            assert_int_equal(ks->n_args, ks->kernel.n_params + ks->n_tmaps);
            /* K of 512 and 256 with the TMA-store epilogue and more 128 x 128
             * tiles than SMs: ping-pong 128-wide tiles */
            if (tma && t < 2 && !strstr(how, "128x128 tiles ping-pong"))
                fail_msg("case %zu flags 0x%x: short K, not ping-pong: %s", t, flags[f], how);
            /* the internal schedules: ping-pong's turn passed at issue
             * (PP_EARLY), the TMA-store epilogue two chunks ahead (EPI_AHEAD;
             * not with a norm folded into B) */
            bool early = (flags[f] & KF_CUDA_RECIPE_GEMM_PP_EARLY) && strstr(how, "ping-pong");
            assert_non_null(strstr(ks->kernel.source,
                                   early ? "#define KF_PP_EARLY 1" : "#define KF_PP_EARLY 0"));
            bool ahead = tma && (flags[f] & KF_CUDA_RECIPE_GEMM_EPI_AHEAD) &&
                         !strstr(how, "folded into B");
            assert_non_null(strstr(ks->kernel.source,
                                   ahead ? "#define KF_EPI_AHEAD 1" : "#define KF_EPI_AHEAD 0"));
            if (t == 0) { /* gelu_tanh by its formula in the GEMM, not the bf16 table */
                assert_null(strstr(ks->kernel.source, "kf_gelu_tab_src"));
                assert_non_null(strstr(ks->kernel.source, "ex2.approx.ftz.f32"));
            }
            if (tma) {
                assert_non_null(strstr(ks->kernel.source, "#define KF_EPI_TMA 1"));
                assert_int_equal(ks->args[2].kind, KF_CUDA_ARG_TMAP);
                assert_true(ks->args[2].written);
                assert_int_equal(ks->tmaps[2].rank, 3);
                assert_int_equal(ks->tmaps[2].box[0], 64);
                assert_int_equal(ks->tmaps[2].box[1], 64);
                /* over the output: the buffer the OUT param names */
                bool found = false;
                for (uint32_t j = 0; j < ks->kernel.n_params; j++)
                    if (ks->kernel.params[j].kind == KF_CUDA_PARAM_OUT)
                        found = !memcmp(&ks->args[3 + j].buf, &ks->args[2].buf,
                                        sizeof ks->args[2].buf);
                assert_true(found);
                check_tma_store_sass(&ks->kernel);
            } else {
                assert_non_null(strstr(ks->kernel.source, "#define KF_EPI_TMA 0"));
            }
            kf_cuda_recipes_destroy(rec);
        }
        plan_release(&p);
    }
}

/* Occurrences of `what` in s. */
static size_t count_of(const char *s, const char *what) {
    size_t n = 0;
    for (const char *q = strstr(s, what); q; q = strstr(q + 1, what))
        n++;
    return n;
}

/* The SASS instructions of a GEMM's K loop: the shortest range from a
 * backward branch's target to the branch that holds an HGMMA (0: none). */
static size_t kloop_instructions(const char *sass) {
    size_t best = 0;
    for (const char *q = strstr(sass, "BRA 0x"); q; q = strstr(q + 1, "BRA 0x")) {
        const char *ln = q;
        while (ln > sass && ln[-1] != '\n')
            ln--;
        const char *at = strstr(ln, "/*");
        unsigned long from = strtoul(q + 4, NULL, 16), to;
        if (!at || at > q || sscanf(at, "/*%lx*/", &to) != 1 || from >= to)
            continue;
        char key[32];
        snprintf(key, sizeof key, "/*%04lx*/", from);
        const char *start = strstr(sass, key);
        if (!start || start > q)
            continue;
        size_t n = 0;
        bool hgmma = false;
        for (const char *l = start; l && l <= q; l = strstr(l + 1, "\n        /*")) {
            n++;
            const char *e = strchr(l + 1, '\n');
            const char *h = strstr(l, "HGMMA.");
            hgmma = hgmma || (h && (!e || h < e));
        }
        if (hgmma && (!best || n < best))
            best = n;
    }
    return best;
}

/* The TMA-store epilogue's bf16 pairs (cg_raw_feed, kf_gm_pack2, kf_gm_ldv):
 * GPT-2's out projection + bias + residual rounds h + b and adds the
 * residual as a bf16x2 pair. The sum is packed from its unrounded values by
 * one cvt (kf_gm_bf16x2r) and the bf16x2 result goes to shared memory as it
 * is (kf_gm_pack2 by bit operations), so the SASS holds one F2FP a pair of
 * outputs: 16 a 64 x 64 chunk (a thread's 32 values), where rounding each
 * value, merging the halves and repacking the result was 48. With f16 (no
 * bf16x2 op) and with a bias alone (the sum itself written, rounded by the
 * pack) kf_gm_pack2 keeps its cvt. The register epilogue's kernels
 * (EPI_REGS) keep kf_bf16x2 and kf_ldv, as EPI_UNPACKED (internal) does. */
static void test_tma_store_epilogue_packs_bf16_pairs_once(void **state) {
    (void)state;
    static const char *const texts[] = {
        "kfg 1\nx = input(bf16[8192, 1024])\nw = input(bf16[1024, 1024])\nb = input(bf16[1024])\n"
        "r = input(bf16[8192, 1024])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\noutput y\n",
        "kfg 1\nx = input(f16[8192, 1024])\nw = input(f16[1024, 1024])\nb = input(f16[1024])\n"
        "r = input(f16[8192, 1024])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\noutput y\n",
        "kfg 1\nx = input(bf16[4096, 1024])\nw = input(bf16[1024, 1024])\nb = input(bf16[1024])\n"
        "h = matmul(x, w)\ny = add(h, b)\noutput y\n"};
    /* 0: the default; 1: the register epilogue (EPI_REGS); 2: EPI_UNPACKED
     * (internal: the code before, for the bench) */
    static const uint64_t kinds[] = {0, KF_CUDA_RECIPE_GEMM_EPI_REGS,
                                     KF_CUDA_RECIPE_GEMM_EPI_UNPACKED};
    for (int t = 0; t < 3; t++) {
        planned p;
        plan_text(texts[t], &p);
        for (int kd = 0; kd < 3; kd++) {
            bool regs = kd == 1, forms = kd == 0;
            /* the bias from global memory (EPI_COLS_GLOBAL, internal: the
             * default stages a bias alone in shared memory), whose unpacking
             * the checks below read */
            kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                                                   KF_CUDA_RECIPE_GEMM_GENERATED |
                                                       KF_CUDA_RECIPE_GEMM_EPI_COLS_GLOBAL |
                                                       kinds[kd]);
            const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
            assert_true((strstr(rc->variants[0].how, "epilogue stored by TMA") != NULL) == !regs);
            const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
            const char *src = ks->kernel.source;
            bool pk = t == 0 && forms;
            assert_true((strstr(src, "kf_gm_bf16x2r<0, VV, true, false>(") != NULL) == pk);
            assert_true((strstr(src, "kf_bf16x2<0, VV>(") != NULL) == (t == 0 && !forms));
            assert_true((strstr(src, "return kf_pk_bf16(lo, hi);") != NULL) == pk);
            assert_true((strstr(src, "kf_gm_ldv<VV>(lp, l") != NULL) == forms);
            if (!regs) {
                char *sass = malloc(1 << 22);
                assert_non_null(sass);
                kf_sass_text(&MEM, &ks->kernel, sass, 1 << 22);
                size_t st = count_of(sass, "UTMASTG"), f2fp = count_of(sass, "F2FP");
                assert_true(st > 0);
                /* 16 pairs a chunk: one F2FP each with the bf16x2 add; the
                 * bias alone rounds in its pack, one a pair too; the code
                 * before (EPI_UNPACKED) rounded each value of the sum,
                 * unpacked the bf16x2 result and packed it again */
                if (t != 1 && forms && f2fp > 16 * st)
                    fail_msg("case %d: %zu F2FP for %zu TMA stores (16 a chunk)", t, f2fp, st);
                if (t == 0 && !forms && f2fp < 48 * st)
                    fail_msg("EPI_UNPACKED: %zu F2FP for %zu TMA stores (48 a chunk)", f2fp, st);
                free(sass);
            }
            kf_cuda_recipes_destroy(rec);
        }
        plan_release(&p);
    }
}

/* The consumers' wgmma descriptors stepped by constant adds from the ring's
 * (KF_DESC_STEP, the default) compile to HGMMA and UTMALDG with no local
 * memory, in every schedule (cooperative 128 x 256, ping-pong 128 x 128, B
 * K-major as nn.Linear keeps it, a SwiGLU pair, an RMSNorm prologue, 2-CTA
 * clusters), with as many HGMMA as the form before (internal
 * KF_CUDA_RECIPE_GEMM_DESC_REBUILD: every descriptor rebuilt from its shared
 * address each K step, 82 SASS instructions a K step for the 4 HGMMA of
 * 8192^3) and fewer instructions. */
static void test_stepped_wgmma_descriptors_compile_to_fewer_instructions(void **state) {
    (void)state;
    static const struct {
        const char *text;
        uint64_t flags;
    } cases[] = {
        {"kfg 1\nx = input(bf16[8192, 8192])\nw = input(bf16[8192, 8192])\ny = matmul(x, w)\n"
         "output y\n",
         0},
        {"kfg 1\nx = input(bf16[8192, 16384])\nw = input(bf16[16384, 4096])\n"
         "b = input(bf16[4096])\nh = matmul(x, w)\nhb = add(h, b)\ny = gelu_tanh(hb)\noutput y\n",
         0},
        {"kfg 1\nx = input(bf16[16384, 1024])\nw = input(bf16[4096, 1024])\n"
         "b = input(bf16[4096])\nh = matmul(x, w, transpose_b=true)\nhb = add(h, b)\n"
         "y = gelu_tanh(hb)\noutput y\n",
         0},
        {"kfg 1\nx = input(f16[1000, 200])\nwg = input(f16[1096, 200])\n"
         "wu = input(f16[1096, 200])\ng = matmul(x, wg, transpose_b=true)\n"
         "u = matmul(x, wu, transpose_b=true)\n"
         "a = silu(g)\ny = mul(a, u)\noutput y\n",
         0},
        {"kfg 1\nx = input(bf16[4096, 1024])\ng = input(bf16[1024])\nw = input(bf16[1024, 2048])\n"
         "n = rms_norm(x, g, axis=-1, eps=1e-6)\ny = matmul(n, w)\noutput y\n",
         0},
        {"kfg 1\nx = input(bf16[8192, 8192])\nw = input(bf16[8192, 8192])\ny = matmul(x, w)\n"
         "output y\n",
         KF_CUDA_RECIPE_GEMM_CLUSTER2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        planned p;
        plan_text(cases[i].text, &p);
        size_t n[2] = {0, 0}, hgmma[2] = {0, 0};
        for (int ds = 0; ds < 2; ds++) {
            uint64_t fl = KF_CUDA_RECIPE_GEMM_GENERATED | cases[i].flags |
                          (ds ? 0 : KF_CUDA_RECIPE_GEMM_DESC_REBUILD);
            kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, fl);
            const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
            const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
            assert_true((strstr(ks->kernel.source, "#define KF_DESC_STEP 1") != NULL) == (ds == 1));
            kf_sass_check_hopper(&MEM, &ks->kernel);
            char *sass = malloc(1 << 22);
            assert_non_null(sass);
            kf_sass_text(&MEM, &ks->kernel, sass, 1 << 22);
            n[ds] = count_of(sass, "\n        /*");
            hgmma[ds] = count_of(sass, "HGMMA.");
            free(sass);
            kf_cuda_recipes_destroy(rec);
        }
        fprintf(stderr,
                "case %zu: %zu SASS instructions, %zu with stepped descriptors (%zu HGMMA)\n", i,
                n[0], n[1], hgmma[1]);
        assert_true(hgmma[0] > 0 && hgmma[1] == hgmma[0]);
        if (n[1] >= n[0])
            fail_msg("case %zu: %zu instructions with stepped descriptors, %zu without", i, n[1],
                     n[0]);
        plan_release(&p);
    }
}

/* A ping-pong consumer's first tile through a shuffle (the default): its
 * tile counter, stage index and wgmma descriptors uniform to ptxas, at least
 * 20 SASS instructions a K step fewer than the form before (internal
 * KF_CUDA_RECIPE_GEMM_PP_VARYING: GPT-2's FC1 112 against 58, an R2UR before
 * every HGMMA), as many HGMMA, no local memory (a norm folded into B with
 * bias + gelu_tanh, the Q/K/V GEMM behind its LayerNorm, the out
 * projection's bias + residual by TMA, B K-major, and GPT-2's LN + Q/K/V
 * sibling set as one kernel). Cooperative tiles have no such counter: the
 * flag changes neither their source nor their SASS. */
static void test_pingpong_uniform_tile_counter_shortens_the_k_loop(void **state) {
    (void)state;
    static const struct {
        const char *text;
        bool pingpong;
    } cases[] = {
        {"kfg 1\nx = input(bf16[16384, 1024])\ng = input(bf16[1024])\nc = input(bf16[1024])\n"
         "w = input(bf16[1024, 4096])\nb = input(bf16[4096])\nn = layer_norm(x, g, c, eps=1e-5)\n"
         "h = matmul(n, w)\nhb = add(h, b)\ny = gelu_tanh(hb)\noutput y\n",
         true},
        {"kfg 1\nx = input(bf16[16384, 1024])\ng = input(bf16[1024])\nc = input(bf16[1024])\n"
         "w = input(bf16[1024, 3072])\nb = input(bf16[3072])\nn = layer_norm(x, g, c, eps=1e-5)\n"
         "h = matmul(n, w)\ny = add(h, b)\noutput y\n",
         true},
        {"kfg 1\nx = input(bf16[16384, 1024])\nw = input(bf16[1024, 1024])\nb = input(bf16[1024])\n"
         "r = input(bf16[16384, 1024])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\noutput y\n",
         true},
        {"kfg 1\nx = input(bf16[16384, 1024])\nw = input(bf16[4096, 1024])\n"
         "b = input(bf16[4096])\nh = matmul(x, w, transpose_b=true)\nhb = add(h, b)\n"
         "y = gelu_tanh(hb)\noutput y\n",
         true},
        {"kfg 1\nx = input(bf16[8192, 4096])\nw = input(bf16[4096, 4096])\nb = input(bf16[4096])\n"
         "r = input(bf16[8192, 4096])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\noutput y\n",
         false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        planned p;
        plan_text(cases[i].text, &p);
        size_t n[2] = {0, 0}, hgmma[2] = {0, 0}, r2ur[2] = {0, 0};
        for (int wide = 0; wide < 2; wide++) {
            uint64_t fl = KF_CUDA_RECIPE_GEMM_GENERATED |
                          (wide ? KF_CUDA_RECIPE_GEMM_PP_VARYING : UINT64_C(0));
            kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, fl);
            const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
            const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
            const char *src = ks->kernel.source;
            assert_true((strstr(src, "#define KF_PINGPONG 1") != NULL) == cases[i].pingpong);
            assert_true((strstr(src, "#define KF_PP_VARYING 1") != NULL) ==
                        (wide == 1 && cases[i].pingpong));
            assert_true((strstr(rc->variants[0].how, "the tile counter varying") != NULL) ==
                        (wide == 1 && cases[i].pingpong));
            kf_sass_check_hopper(&MEM, &ks->kernel);
            char *sass = malloc(1 << 22);
            assert_non_null(sass);
            kf_sass_text(&MEM, &ks->kernel, sass, 1 << 22);
            n[wide] = kloop_instructions(sass);
            hgmma[wide] = count_of(sass, "HGMMA.");
            r2ur[wide] = count_of(sass, "R2UR ");
            free(sass);
            kf_cuda_recipes_destroy(rec);
        }
        fprintf(
            stderr,
            "case %zu: %zu SASS instructions a K step (%zu R2UR), %zu with PP_VARYING (%zu R2UR)\n",
            i, n[0], r2ur[0], n[1], r2ur[1]);
        assert_true(hgmma[0] > 0 && hgmma[1] == hgmma[0]);
        if (cases[i].pingpong) {
            if (!n[0] || n[0] + 20 > n[1])
                fail_msg("case %zu: %zu instructions a K step, %zu with PP_VARYING", i, n[0], n[1]);
        } else {
            assert_int_equal(n[0], n[1]);
            assert_int_equal(r2ur[0], r2ur[1]);
        }
        plan_release(&p);
    }
    /* GPT-2's LN + Q/K/V sibling set as one ping-pong kernel (its descriptors
     * rebuilt each K step): the counter uniform there too */
    planned p;
    plan_text("kfg 1\nx = input(bf16[16384, 1024])\ng = input(bf16[1024])\nc = input(bf16[1024])\n"
              "wq = input(bf16[1024, 1024])\nbq = input(bf16[1024])\nwk = input(bf16[1024, 1024])\n"
              "bk = input(bf16[1024])\nwv = input(bf16[1024, 1024])\nbv = input(bf16[1024])\n"
              "n = layer_norm(x, g, c, eps=1e-5)\nq0 = matmul(n, wq)\nq = add(q0, bq)\n"
              "k0 = matmul(n, wk)\nk = add(k0, bk)\nv0 = matmul(n, wv)\nv = add(v0, bv)\n"
              "output q\noutput k\noutput v\n",
              &p);
    size_t n[2] = {0, 0};
    for (int wide = 0; wide < 2; wide++) {
        kf_cuda_recipes *rec =
            kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                            KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_ONE |
                                (wide ? KF_CUDA_RECIPE_GEMM_PP_VARYING : UINT64_C(0)));
        for (uint32_t gi = 0; gi < rec->n; gi++) {
            const kf_cuda_recipe *rc = &rec->recipes[gi];
            if (rc->n_members != 3)
                continue;
            const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
            assert_non_null(strstr(ks->kernel.name, "sib3_"));
            assert_true((strstr(ks->kernel.source, "#define KF_PP_VARYING 1") != NULL) ==
                        (wide == 1));
            kf_sass_check_hopper(&MEM, &ks->kernel);
            char *sass = malloc(1 << 22);
            assert_non_null(sass);
            kf_sass_text(&MEM, &ks->kernel, sass, 1 << 22);
            n[wide] = kloop_instructions(sass);
            free(sass);
        }
        kf_cuda_recipes_destroy(rec);
    }
    fprintf(stderr, "sibling set: %zu SASS instructions a K step, %zu with PP_VARYING\n", n[0],
            n[1]);
    if (!n[0] || n[0] + 20 > n[1])
        fail_msg("sibling set: %zu instructions a K step, %zu with PP_VARYING", n[0], n[1]);
    plan_release(&p);
}

/* The square raster (internal KF_CUDA_RECIPE_GEMM_RASTER_SQ): 16 tile rows at
 * a time on 132 SMs for cooperative 128 x 256 tiles (issue 13's GEMM + bias +
 * GELU), 128 x 128 ping-pong ones (GPT-2's out projection) and 2-CTA
 * clusters; the recipe names it; the kernels compile to HGMMA and UTMALDG
 * with no local memory. Without the flag the kernel keeps the template's 8
 * (the generator defines no KF_RASTER). */
static void test_square_raster_compiles_with_16_tile_rows(void **state) {
    (void)state;
    static const struct {
        const char *text, *sched;
        uint64_t flags;
    } cases[] = {
        {"kfg 1\nx = input(bf16[8192, 16384])\nw = input(bf16[16384, 4096])\n"
         "b = input(bf16[4096])\nh = matmul(x, w)\nhb = add(h, b)\ny = gelu_tanh(hb)\noutput y\n",
         "128x256 tiles cooperative, raster 16 tile rows", 0},
        {"kfg 1\nx = input(bf16[16384, 1024])\nw = input(bf16[1024, 1024])\nb = input(bf16[1024])\n"
         "r = input(bf16[16384, 1024])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\noutput y\n",
         "128x128 tiles ping-pong, raster 16 tile rows", 0},
        {"kfg 1\nx = input(bf16[8192, 8192])\nw = input(bf16[8192, 8192])\ny = matmul(x, w)\n"
         "output y\n",
         "128x256 tiles cooperative in 2-CTA clusters (B multicast), raster 16 tile rows",
         KF_CUDA_RECIPE_GEMM_CLUSTER2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        planned p;
        plan_text(cases[i].text, &p);
        for (int sq = 0; sq < 2; sq++) {
            uint64_t fl = KF_CUDA_RECIPE_GEMM_GENERATED | cases[i].flags |
                          (sq ? KF_CUDA_RECIPE_GEMM_RASTER_SQ : UINT64_C(0));
            kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, fl);
            const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
            const char *how = rc->variants[0].how;
            if ((strstr(how, cases[i].sched) != NULL) != (sq == 1) ||
                (strstr(how, "raster") != NULL) != (sq == 1))
                fail_msg("case %zu%s: %s", i, sq ? " (RASTER_SQ)" : "", how);
            const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
            const char *src = ks->kernel.source;
            /* the template's own default, and the generator's before it */
            assert_int_equal(count_of(src, "#define KF_RASTER "), sq ? 2 : 1);
            assert_true((strstr(src, "#define KF_RASTER 16\n") != NULL) == (sq == 1));
            if (sq)
                kf_sass_check_hopper(&MEM, &ks->kernel);
            kf_cuda_recipes_destroy(rec);
        }
        plan_release(&p);
    }
}

/* gelu_tanh by one MUFU.TANH (internal KF_CUDA_RECIPE_GEMM_GELU_MUFU): issue
 * 13's GEMM + bias + GELU (cooperative 128 x 256, the TMA-store epilogue;
 * alone and with EPI_AHEAD) and a ping-pong one compile to MUFU.TANH and no
 * MUFU.EX2 (the default form's ex2 and rcp) with no local memory, and the
 * recipe says so; a GEMM with no gelu_tanh keeps its source. */
static void test_gelu_tanh_by_mufu_compiles_to_one_mufu_tanh(void **state) {
    (void)state;
    static const struct {
        const char *text;
        uint64_t flags;
        bool gelu;
    } cases[] = {
        {"kfg 1\nx = input(bf16[8192, 16384])\nw = input(bf16[16384, 4096])\n"
         "b = input(bf16[4096])\nh = matmul(x, w)\nhb = add(h, b)\ny = gelu_tanh(hb)\noutput y\n",
         0, true},
        {"kfg 1\nx = input(bf16[8192, 16384])\nw = input(bf16[16384, 4096])\n"
         "b = input(bf16[4096])\nh = matmul(x, w)\nhb = add(h, b)\ny = gelu_tanh(hb)\noutput y\n",
         KF_CUDA_RECIPE_GEMM_EPI_AHEAD, true},
        {"kfg 1\nx = input(bf16[16384, 1024])\nw = input(bf16[4096, 1024])\n"
         "b = input(bf16[4096])\nh = matmul(x, w, transpose_b=true)\nhb = add(h, b)\n"
         "y = gelu_tanh(hb)\noutput y\n",
         0, true},
        {"kfg 1\nx = input(bf16[4096, 1024])\nw = input(bf16[1024, 1024])\nb = input(bf16[1024])\n"
         "h = matmul(x, w)\ny = add(h, b)\noutput y\n",
         0, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        planned p;
        plan_text(cases[i].text, &p);
        char *src[2] = {NULL, NULL};
        for (int mt = 0; mt < 2; mt++) {
            uint64_t fl = KF_CUDA_RECIPE_GEMM_GENERATED | cases[i].flags |
                          (mt ? KF_CUDA_RECIPE_GEMM_GELU_MUFU : UINT64_C(0));
            kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, fl);
            const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
            const char *how = rc->variants[0].how;
            bool want = mt && cases[i].gelu;
            if ((strstr(how, "gelu_tanh by MUFU.TANH") != NULL) != want)
                fail_msg("case %zu%s: %s", i, mt ? " (GELU_MUFU)" : "", how);
            const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
            src[mt] = strdup(ks->kernel.source);
            assert_non_null(src[mt]);
            assert_true((strstr(src[mt], "tanh.approx.f32") != NULL) == want);
            assert_true((strstr(src[mt], "#define KF_EPI_AHEAD 1\n") != NULL) ==
                        (cases[i].flags == KF_CUDA_RECIPE_GEMM_EPI_AHEAD));
            if (cases[i].gelu) {
                kf_sass_check_hopper(&MEM, &ks->kernel);
                char *sass = malloc(1 << 23);
                assert_non_null(sass);
                kf_sass_text(&MEM, &ks->kernel, sass, 1 << 23);
                size_t n_tanh = count_of(sass, "MUFU.TANH"), n_ex2 = count_of(sass, "MUFU.EX2");
                free(sass);
                if (want ? n_tanh == 0 || n_ex2 != 0 : n_tanh != 0 || n_ex2 == 0)
                    fail_msg("case %zu%s: %zu MUFU.TANH, %zu MUFU.EX2", i, mt ? " (GELU_MUFU)" : "",
                             n_tanh, n_ex2);
            }
            kf_cuda_recipes_destroy(rec);
        }
        if (!cases[i].gelu)
            assert_string_equal(src[0], src[1]);
        free(src[0]);
        free(src[1]);
        plan_release(&p);
    }
}

/* The residual by TMA (the default with the TMA-store epilogue on ping-pong
 * 128 x 128 tiles, internal EPI_BUF4 on cooperative 128 x 256 ones; internal
 * EPI_GLOBAL_RS keeps the global loads): a fourth tensor map over the
 * residual's buffer, {N, M, batch} in 64 x 64 boxes as the output's; the
 * residual read from shared memory; 5 stages of 128 x 128 (4 beside an erf
 * gelu's bf16 table, whose static shared memory must fit too), 3 of 128 x
 * 256; the SASS loads and stores by TMA and keeps no local memory. A bias
 * alone (no residual) keeps the form before. */
static void test_residual_by_tma_compiles_with_a_fourth_map(void **state) {
    (void)state;
    static const char *const texts[] = {
        /* GPT-2's out projection: ping-pong 128 x 128, bias + residual */
        "kfg 1\nx = input(bf16[16384, 1024])\nw = input(bf16[1024, 1024])\nb = input(bf16[1024])\n"
        "r = input(bf16[16384, 1024])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\noutput y\n",
        /* K = 2000: cooperative 128 x 256, f16, the residual left of a sub, ragged */
        "kfg 1\nx = input(f16[4100, 2000])\nw = input(f16[2000, 1096])\n"
        "r = input(f16[4100, 1096])\nh = matmul(x, w)\ny = sub(r, h)\noutput y\n",
        /* a bias alone */
        "kfg 1\nx = input(bf16[4096, 1024])\nw = input(bf16[1024, 1024])\nb = input(bf16[1024])\n"
        "h = matmul(x, w)\ny = add(h, b)\noutput y\n",
        /* an erf gelu (bf16: the table in static shared memory), ping-pong */
        "kfg 1\nx = input(bf16[1100, 200])\nw = input(bf16[200, 2056])\nb = input(bf16[2056])\n"
        "r = input(bf16[1100, 2056])\nh = matmul(x, w)\na = add(h, b)\ng = gelu(a)\n"
        "y = add(g, r)\noutput y\n"};
    static const char *const sched[] = {
        "128x128 tiles ping-pong, 5 stages", "128x256 tiles cooperative, 3 stages",
        "128x128 tiles ping-pong, 6 stages", "128x128 tiles ping-pong, 4 stages"};
    static const char *const old_sched[] = {
        "128x128 tiles ping-pong, 6 stages", "128x256 tiles cooperative, 4 stages",
        "128x128 tiles ping-pong, 6 stages", "128x128 tiles ping-pong, 6 stages"};
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++) {
        planned p;
        plan_text(texts[t], &p);
        for (int old = 0; old < 2; old++) {
            /* case 1 (cooperative) by EPI_BUF4; the others by default */
            uint64_t flags = KF_CUDA_RECIPE_GEMM_GENERATED |
                             (old      ? KF_CUDA_RECIPE_GEMM_EPI_GLOBAL_RS
                              : t == 1 ? KF_CUDA_RECIPE_GEMM_EPI_BUF4
                                       : UINT64_C(0));
            kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, flags);
            const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
            const char *how = rc->variants[0].how;
            bool rs = !old && t != 2;
            if (!strstr(how, old ? old_sched[t] : sched[t]) ||
                (strstr(how, "residual loaded by TMA") != NULL) != rs)
                fail_msg("case %zu%s: %s", t, old ? " (EPI_GLOBAL_RS)" : "", how);
            const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
            const char *src = ks->kernel.source;
            assert_true((strstr(src, "#define KF_EPI_RS 1") != NULL) == rs);
            assert_int_equal(ks->n_tmaps, rs ? 4 : 3);
            if (rs) {
                /* the residual's map: the output's shape, over the IN buffer
                 * of the residual (the last input of the text) */
                assert_int_equal(ks->args[3].kind, KF_CUDA_ARG_TMAP);
                assert_false(ks->args[3].written);
                assert_int_equal(ks->tmaps[3].rank, 3);
                assert_int_equal(ks->tmaps[3].box[0], 64);
                assert_int_equal(ks->tmaps[3].box[1], 64);
                assert_memory_equal(ks->tmaps[3].dims, ks->tmaps[2].dims, sizeof ks->tmaps[2].dims);
                bool found = false;
                for (uint32_t j = 0; j < ks->kernel.n_params; j++)
                    if (ks->kernel.params[j].kind == KF_CUDA_PARAM_IN &&
                        !memcmp(&ks->args[4 + j].buf, &ks->args[3].buf, sizeof ks->args[3].buf))
                        found = true;
                assert_true(found);
                assert_non_null(strstr(src, "ld.shared.b32 %0, [%1];"));
                assert_int_equal(ks->kernel.launch.shared_bytes,
                                 kf_cuda_gemm_smem_rs(t == 1 ? 256 : 128,
                                                      t == 1   ? 3
                                                      : t == 3 ? 4
                                                               : 5));
                /* with the gelu table's static shared memory, within 227 KiB */
                if (t == 3)
                    assert_true(ks->kernel.launch.shared_bytes + 11776u /* cg.h GELU_TAB_N x 2 */ <=
                                227u * 1024u);
            }
            check_tma_store_sass(&ks->kernel);
            kf_cuda_recipes_destroy(rec);
        }
        plan_release(&p);
    }
    /* EPI_BUF4 (internal): GPT-2's FC1 (a LayerNorm folded into B, bias,
     * gelu_tanh; no residual) in the 4 chunk buffers, ping-pong and
     * cooperative (SHORT_COOP), its column terms from L2; three maps */
    planned q;
    plan_text("kfg 1\nx = input(bf16[16384, 1024])\ng = input(bf16[1024])\nc = input(bf16[1024])\n"
              "w = input(bf16[1024, 4096])\nb = input(bf16[4096])\n"
              "n = layer_norm(x, g, c, eps=1e-5)\nh = matmul(n, w)\nhb = add(h, b)\n"
              "y = gelu_tanh(hb)\noutput y\n",
              &q);
    for (int coop = 0; coop < 2; coop++) {
        kf_cuda_recipes *rec =
            kf_sass_recipes(&MEM, q.plan, "h100", NULL,
                            KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_EPI_BUF4 |
                                (coop ? KF_CUDA_RECIPE_GEMM_SHORT_COOP : UINT64_C(0)));
        const kf_cuda_recipe *rc = gemm_recipe(q.plan, rec);
        const char *how = rc->variants[0].how;
        if (!strstr(how, coop ? "128x256 tiles cooperative, 3 stages"
                              : "128x128 tiles ping-pong, 5 stages") ||
            !strstr(how, "from 4 chunk buffers") || !strstr(how, "folded into B"))
            fail_msg("EPI_BUF4%s: %s", coop ? " (SHORT_COOP)" : "", how);
        const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
        assert_non_null(strstr(ks->kernel.source, "#define KF_RS_LOAD 0"));
        assert_int_equal(ks->n_tmaps, 3);
        check_tma_store_sass(&ks->kernel);
        kf_cuda_recipes_destroy(rec);
    }
    plan_release(&q);
}

/* A SwiGLU pair's register epilogue on packed pairs (KF_EPI_PK: kf_epi<2> on
 * the fragment, the quad transposes on the packed words, one 16-byte store a
 * lane at kf_epi_out) where the pair runs in 2-CTA clusters (by default on
 * cooperative 128 x (2 x 128) tiles with two tile rows or more; CLUSTER2
 * elsewhere) with one bf16/f16 output and N a multiple of 8; no column test
 * where the tiles cover N (1024: 8 of 128; 1096 against 64-wide tiles keeps
 * it); silu by ex2 and rcp. Not with an f32 output (a cast), N = 1001
 * (K-major B; not a multiple of 8), one CTA (ping-pong by default), nor with
 * internal DUAL_F32T (the form before: the f32 transposes, the column test,
 * the expf sigmoid's silu, one CTA). HGMMA, UTMALDG, no local memory; the
 * packed form stores by STG.E.128 with 4 shuffles per 4 column groups and
 * row (32 a 128 x (2 x 128) tile's consumer thread), the form before 128 in
 * each of its two copies (with and without the alignment tests). */
static void test_swiglu_pair_epilogue_runs_on_packed_pairs(void **state) {
    (void)state;
    static const struct {
        const char *text;
        uint64_t flags;
        bool pk, nin, c2;
    } cases[] = {
        {"kfg 1\nx = input(bf16[4096, 256])\nwg = input(bf16[256, 1024])\n"
         "wu = input(bf16[256, 1024])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
         "a = silu(g)\ny = mul(a, u)\noutput y\n",
         KF_CUDA_RECIPE_GEMM_DUAL_F32T, false, false, false},
        {"kfg 1\nx = input(bf16[4096, 256])\nwg = input(bf16[256, 1024])\n"
         "wu = input(bf16[256, 1024])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
         "a = silu(g)\ny = mul(a, u)\noutput y\n",
         0, true, true, true},
        {"kfg 1\nx = input(f16[1000, 264])\nwg = input(f16[264, 1096])\n"
         "wu = input(f16[264, 1096])\nr = input(f16[1000, 1096])\ng = matmul(x, wg)\n"
         "u = matmul(x, wu)\na = silu(g)\nh = mul(a, u)\ny = add(h, r)\noutput y\n",
         KF_CUDA_RECIPE_GEMM_CLUSTER2, true, false, true},
        {"kfg 1\nx = input(bf16[2200, 136])\nwg = input(bf16[136, 2056])\n"
         "wu = input(bf16[136, 2056])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
         "a = silu(g)\nh = mul(a, u)\ny = cast(h, f32)\noutput y\n",
         0, false, false, true},
        {"kfg 1\nx = input(bf16[200, 64])\nwg = input(bf16[1001, 64])\n"
         "wu = input(bf16[1001, 64])\ng = matmul(x, wg, transpose_b=true)\n"
         "u = matmul(x, wu, transpose_b=true)\na = silu(g)\ny = mul(a, u)\noutput y\n",
         KF_CUDA_RECIPE_GEMM_CLUSTER2, false, false, true},
        /* ping-pong 128 x (2 x 64) by default: one CTA, not packed */
        {"kfg 1\nx = input(f16[1000, 264])\nwg = input(f16[264, 1096])\n"
         "wu = input(f16[264, 1096])\nr = input(f16[1000, 1096])\ng = matmul(x, wg)\n"
         "u = matmul(x, wu)\na = silu(g)\nh = mul(a, u)\ny = add(h, r)\noutput y\n",
         0, false, false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        planned q;
        plan_text(cases[i].text, &q);
        kf_cuda_recipes *nr = kf_sass_recipes(&MEM, q.plan, "h100", NULL,
                                              KF_CUDA_RECIPE_GEMM_GENERATED | cases[i].flags);
        const kf_cuda_recipe *rc = gemm_recipe(q.plan, nr);
        const kf_cuda_kernel *k = &rc->steps[rc->n_steps - 1].kernel->kernel;
        const char *src = k->source;
        assert_non_null(strstr(src, "#define KF_DUAL 1"));
        if ((strstr(src, "#define KF_EPI_PK 1") != NULL) != cases[i].pk ||
            (strstr(src, "#define KF_EPI_NIN 1") != NULL) != cases[i].nin)
            fail_msg("case %zu: packed %d, no column test %d: not what it should be", i,
                     strstr(src, "#define KF_EPI_PK 1") != NULL,
                     strstr(src, "#define KF_EPI_NIN 1") != NULL);
        assert_true((strstr(src, "kf_epi_out(long long b") != NULL) == cases[i].pk);
        assert_true((strstr(src, "#define kf_silu kf_gm_silu_ex2") != NULL) == cases[i].pk);
        if (rc->steps[rc->n_steps - 1].kernel->cluster[0] != (cases[i].c2 ? 2u : 1u))
            fail_msg("case %zu: %s", i, rc->variants[0].how);
        if (i < 3) {
            kf_sass_check_hopper(&MEM, k);
            static char sass[1 << 22];
            kf_sass_text(&MEM, k, sass, sizeof sass);
            size_t shfl = 0, st128 = 0;
            for (const char *c = strstr(sass, "SHFL.BFLY"); c; c = strstr(c + 1, "SHFL.BFLY"))
                shfl++; /* the quad transposes' (not the descriptor's SHFL.IDX) */
            for (const char *c = strstr(sass, "STG.E.128"); c; c = strstr(c + 1, "STG.E.128"))
                st128++;
            if (i == 1 && (shfl != 32 || st128 == 0))
                fail_msg("packed pair epilogue: %zu SHFL (want 32), %zu STG.E.128", shfl, st128);
            if (i == 0 && shfl != 256)
                fail_msg("the form before: %zu SHFL (want 128 a copy, 2 copies)", shfl);
        }
        kf_cuda_recipes_destroy(nr);
        plan_release(&q);
    }
}

/* The row operands prefetched into L2 when a tile starts
 * (KF_CUDA_RECIPE_GEMM_EPI_PF, internal; with the TMA-store epilogue): a
 * residual's rows, one bulk prefetch a row (UBLKPF) on ping-pong and
 * cooperative tiles, no local memory; a bias alone (no row operand) gives
 * kf_epi_pf nothing to fetch; the default prefetches nothing. */
static void test_epilogue_row_operands_prefetch_to_l2(void **state) {
    (void)state;
    static const char *const texts[] = {
        /* K = 1024: ping-pong 128 x 128; bias + residual */
        "kfg 1\nx = input(bf16[8192, 1024])\nw = input(bf16[1024, 1024])\nb = input(bf16[1024])\n"
        "r = input(bf16[8192, 1024])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\noutput y\n",
        /* K = 2048: cooperative 128 x 256; a residual, ragged M */
        "kfg 1\nx = input(f16[4100, 2048])\nw = input(f16[2048, 1024])\n"
        "r = input(f16[4100, 1024])\nh = matmul(x, w)\ny = add(h, r)\noutput y\n",
        /* a bias alone */
        "kfg 1\nx = input(bf16[4096, 1024])\nw = input(bf16[1024, 1024])\nb = input(bf16[1024])\n"
        "h = matmul(x, w)\ny = add(h, b)\noutput y\n"};
    static const char *const want[] = {"HGMMA", "UTMALDG", "UTMASTG", "UBLKPF", NULL};
    static const char *const why[] = {"wgmma fell back?", "no TMA loads", "no TMA stores",
                                      "no bulk L2 prefetch"};
    static const char *const sched[] = {"128x128 tiles ping-pong", "128x256 tiles cooperative",
                                        "128x128 tiles ping-pong"};
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++) {
        planned p;
        plan_text(texts[t], &p);
        for (int on = 0; on < 2; on++) {
            /* the bias from global memory too (EPI_COLS_GLOBAL, internal),
             * whose column form the checks below read */
            uint64_t flags = KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_EPI_COLS_GLOBAL |
                             (on ? KF_CUDA_RECIPE_GEMM_EPI_PF : 0);
            kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, flags);
            const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
            const char *how = rc->variants[0].how;
            if (!strstr(how, sched[t]) || !strstr(how, "epilogue stored by TMA"))
                fail_msg("case %zu: %s", t, how);
            assert_true((strstr(how, "row operands prefetched to L2") != NULL) == (on != 0));
            const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
            const char *src = ks->kernel.source;
            assert_true((strstr(src, "#define KF_EPI_PF 1") != NULL) == (on != 0));
            /* N = 1024, a multiple of the tiles' columns: no column test;
             * the loads' column is c0 (64-bit), not its 32-bit copy cn */
            assert_non_null(strstr(src, "#define KF_EPI_NIN 1"));
            assert_non_null(strstr(src, "(c0) * 1LL"));
            assert_null(strstr(src, "(cn) * 1LL"));
            /* the residual's rows (p1 or p2), not the bias */
            const char *pf = strstr(src, "kf_epi_pf(long long b");
            assert_true((pf != NULL) == (on != 0));
            if (pf) {
                const char *end = strstr(pf, "\n}\n");
                assert_non_null(end);
                size_t n = 0;
                for (const char *q = strstr(pf, "kf_gm_pf(p"); q && q < end;
                     q = strstr(q + 1, "kf_gm_pf(p"))
                    n++;
                assert_int_equal(n, t < 2 ? 1 : 0);
                if (t < 2)
                    kf_sass_check_ops(&MEM, &ks->kernel, want, why, NULL);
            }
            kf_cuda_recipes_destroy(rec);
        }
        plan_release(&p);
    }
    /* KF_EPI_NIN: not where N is ragged (1000 against 128-wide tiles) */
    {
        planned q;
        plan_text("kfg 1\nx = input(bf16[4096, 512])\nw = input(bf16[512, 1000])\n"
                  "b = input(bf16[1000])\nr = input(bf16[4096, 1000])\nh = matmul(x, w)\n"
                  "a = add(h, b)\ny = add(a, r)\noutput y\n",
                  &q);
        kf_cuda_recipes *nr =
            kf_sass_recipes(&MEM, q.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED);
        const kf_cuda_recipe *rc = gemm_recipe(q.plan, nr);
        const char *src = rc->steps[rc->n_steps - 1].kernel->kernel.source;
        assert_null(strstr(src, "#define KF_EPI_NIN 1"));
        assert_non_null(strstr(src, "#define KF_EPI_NIN 0"));
        kf_cuda_recipes_destroy(nr);
        plan_release(&q);
    }
    /* the register epilogue too: the split row form's GEMM (bias + residual,
     * then the LayerNorm's row pass) prefetches its residual's rows (one
     * kf_gm_pf: not the bias) with EPI_PF, and says so */
    {
        kf_plan_options po;
        kf_plan_options_init(&po);
        po.gemm_row_split_max_n = KF_GEMM_ROW_SPLIT_MAX_N;
        planned q;
        plan_text_with("kfg 1\nx = input(bf16[8192, 4096])\nw = input(bf16[4096, 4096])\n"
                       "b = input(bf16[4096])\nr = input(bf16[8192, 4096])\ng = input(bf16[4096])\n"
                       "c = input(bf16[4096])\nh = matmul(x, w)\nhb = add(h, b)\ns = add(hb, r)\n"
                       "y = layer_norm(s, g, c, eps=1e-5)\noutput y\n",
                       &po, &q);
        for (int on = 0; on < 2; on++) {
            kf_cuda_recipes *nr = kf_sass_recipes(
                &MEM, q.plan, "h100", NULL,
                KF_CUDA_RECIPE_GEMM_GENERATED | (on ? KF_CUDA_RECIPE_GEMM_EPI_PF : 0));
            const kf_cuda_recipe *rc = gemm_recipe(q.plan, nr);
            const char *how = rc->variants[0].how;
            if (!strstr(how, "split row form") || strstr(how, "stored by TMA") ||
                (strstr(how, "row operands prefetched to L2") != NULL) != (on != 0))
                fail_msg("split row form%s: %s", on ? " (EPI_PF)" : "", how);
            const kf_cuda_kstep *ks = rc->steps[0].kernel;
            const char *src = ks->kernel.source;
            assert_non_null(strstr(src, "#define KF_EPI_TMA 0"));
            assert_true((strstr(src, "#define KF_EPI_PF 1") != NULL) == (on != 0));
            const char *pf = strstr(src, "kf_epi_pf(long long b");
            assert_true((pf != NULL) == (on != 0));
            if (pf) {
                assert_int_equal(count_of(pf, "kf_gm_pf(p"), 1);
                static const char *const rwant[] = {"HGMMA", "UTMALDG", "UBLKPF", NULL};
                static const char *const rwhy[] = {"wgmma fell back?", "no TMA loads",
                                                   "no bulk L2 prefetch"};
                kf_sass_check_ops(&MEM, &ks->kernel, rwant, rwhy, "UTMASTG");
            }
            kf_cuda_recipes_destroy(nr);
        }
        plan_release(&q);
    }
    /* SHORT_COOP (internal): K = 1024 keeps the cooperative 128 x 256 tiles */
    planned p;
    plan_text(texts[0], &p);
    kf_cuda_recipes *rec = kf_sass_recipes(
        &MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SHORT_COOP);
    const char *how = gemm_recipe(p.plan, rec)->variants[0].how;
    if (!strstr(how, "128x256 tiles cooperative"))
        fail_msg("short K with SHORT_COOP: %s", how);
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

/* The TMA-store epilogue's column operands staged in shared memory (the
 * default, kf_cuda_gemm_shape.epi_cs; internal EPI_COLS_GLOBAL keeps the form
 * before): issue 13's bias + gelu_tanh (cooperative 128 x 256), the same
 * after a LayerNorm's prologue kernel (ping-pong 128 x 128), a bias and a
 * column scale (two slots, f16, ping-pong 128 x 128) and a bias with a
 * residual (cooperative, K = 2048, ragged M) copy the tile's columns by cp.async
 * (LDGSTS) when a tile starts and read them from shared memory: the SASS has
 * no global load left of a bias (issue 13's: 32 LDG a thread before, the
 * residual's 32 stay), HGMMA, UTMALDG and no local memory. The forms that
 * use the room otherwise keep the global loads: the residual by TMA (4 chunk
 * buffers), a LayerNorm folded into B (its column terms), and a column
 * operand whose N is not a multiple of 8 never reaches this epilogue. */
static void test_tma_store_epilogue_stages_its_bias_in_shared_memory(void **state) {
    (void)state;
    static const struct {
        const char *text;
        uint64_t flags;
        const char *sched;
        int slots;    /* KF_EPI_CS of the default */
        int ldg_less; /* global loads the staging saves a thread, at least */
    } cases[] = {
        {"kfg 1\nx = input(bf16[8192, 16384])\nw = input(bf16[16384, 4096])\n"
         "b = input(bf16[4096])\nh = matmul(x, w)\nhb = add(h, b)\ny = gelu_tanh(hb)\noutput y\n",
         0, "128x256 tiles cooperative", 1, 32},
        {"kfg 1\nx = input(f16[4100, 1024])\nw = input(f16[1024, 1000])\nb = input(f16[1000])\n"
         "s = input(f16[1000])\nh = matmul(x, w)\nm = mul(h, s)\na = add(m, b)\ny = silu(a)\n"
         "output y\n",
         0, "128x128 tiles ping-pong", 2, 32},
        {"kfg 1\nx = input(bf16[4100, 2048])\nw = input(bf16[2048, 1024])\nb = input(bf16[1024])\n"
         "r = input(bf16[4100, 1024])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\noutput y\n",
         0, "128x256 tiles cooperative", 1, 32},
        /* the residual by TMA on ping-pong tiles: no room, no staging */
        {"kfg 1\nx = input(bf16[4096, 1024])\nw = input(bf16[1024, 1024])\nb = input(bf16[1024])\n"
         "r = input(bf16[4096, 1024])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\noutput y\n",
         0, "residual loaded by TMA", 0, 0},
        /* a LayerNorm before it, A from its prologue's scratch (2 N >= M) */
        {"kfg 1\nx = input(bf16[8192, 1024])\ng = input(bf16[1024])\nc = input(bf16[1024])\n"
         "w = input(bf16[1024, 4096])\nb = input(bf16[4096])\nn = layer_norm(x, g, c)\n"
         "h = matmul(n, w)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
         0, "A from the prologue kernel's scratch", 1, 16},
        /* a LayerNorm folded into B (2 N < M): its column terms take the room */
        {"kfg 1\nx = input(bf16[16384, 1024])\ng = input(bf16[1024])\nc = input(bf16[1024])\n"
         "w = input(bf16[1024, 4096])\nb = input(bf16[4096])\nn = layer_norm(x, g, c)\n"
         "h = matmul(n, w)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
         0, "norm prologue folded into B", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        planned p;
        plan_text(cases[i].text, &p);
        size_t ldg[2] = {0, 0};
        for (int old = 0; old < 2; old++) {
            uint64_t fl = KF_CUDA_RECIPE_GEMM_GENERATED | cases[i].flags |
                          (old ? KF_CUDA_RECIPE_GEMM_EPI_COLS_GLOBAL : UINT64_C(0));
            kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, fl);
            const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
            const char *how = rc->variants[0].how;
            if (!strstr(how, cases[i].sched) || !strstr(how, "epilogue stored by TMA"))
                fail_msg("case %zu: %s", i, how);
            const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
            const char *src = ks->kernel.source;
            int slots = old ? 0 : cases[i].slots;
            char def[32];
            snprintf(def, sizeof def, "#define KF_EPI_CS %d\n", slots);
            if (slots && !strstr(src, def))
                fail_msg("case %zu: no '%s'", i, def);
            assert_true((strstr(src, "kf_epi_cs_fetch(unsigned dst") != NULL) == (slots != 0));
            assert_true((strstr(src, "unsigned csm = 0u") != NULL) == (slots != 0));
            if (cases[i].slots) {
                kf_sass_check_hopper(&MEM, &ks->kernel);
                char *sass = malloc(1 << 23);
                assert_non_null(sass);
                kf_sass_text(&MEM, &ks->kernel, sass, 1 << 23);
                ldg[old] = count_of(sass, "LDG.E");
                assert_true((count_of(sass, "LDGSTS") != 0) == !old);
                free(sass);
            }
            kf_cuda_recipes_destroy(rec);
        }
        if (cases[i].slots && ldg[0] + (size_t)cases[i].ldg_less > ldg[1])
            fail_msg("case %zu: %zu global loads staged, %zu before", i, ldg[0], ldg[1]);
        plan_release(&p);
    }
}

/* 2-CTA clusters (KF_CUDA_RECIPE_GEMM_CLUSTER2, internal): the kernel's tile
 * pairs share B by TMA multicast, cooperative or ping-pong (K <= 1024 with
 * the TMA-store epilogue). Each variant compiles to HGMMA and multicast TMA
 * loads (UTMALDG...MULTICAST) with no local memory; the step launches
 * 2 x 1 x 1 clusters on an even grid; a K-major B's map has boxes of half
 * the tile's rows (each CTA loads one half); a single tile row takes no
 * cluster; the default takes none, but for a SwiGLU pair's cooperative
 * 128 x (2 x 128) tiles (internal DUAL_F32T: none there either). */
static void cluster_case_flags(const char *text, const char *want_tile, bool want_cluster,
                               unsigned flags) {
    planned p;
    plan_text(text, &p);
    kf_cuda_recipes *rec =
        kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                        KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_CLUSTER2 | flags);
    const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
    assert_string_equal(rc->variants[0].label, "generated");
    const char *how = rc->variants[0].how;
    const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
    char tile[48];
    snprintf(tile, sizeof tile, "%s%s", want_tile, strstr(want_tile, " tiles") ? "" : " tiles");
    if (!strstr(how, tile) || (strstr(how, "2-CTA clusters") != NULL) != want_cluster)
        fail_msg("expected %s, %s: %s", tile, want_cluster ? "clusters" : "no cluster", how);
    assert_non_null(
        strstr(ks->kernel.source, want_cluster ? "#define KF_CLUSTER 2" : "#define KF_CLUSTER 1"));
    assert_int_equal(ks->cluster[0], want_cluster ? 2 : 1);
    assert_int_equal(ks->cluster[1], 1);
    assert_int_equal(ks->cluster[2], 1);
    if (want_cluster) {
        assert_int_equal(ks->grid[0] % 2, 0);
        assert_true(ks->grid[0] <= 132);
        bool dual = strncmp(want_tile, "dual", 4) == 0;
        bool bk = strstr(text, "transpose_b=true") != NULL;
        uint32_t bn = (uint32_t)atoi(strchr(want_tile, 'x') + (dual ? 4 : 1)) * (dual ? 2 : 1);
        /* K-major B: boxes {64, bn / 2}; N-major: {64, 64} */
        assert_int_equal(ks->tmaps[1].box[1], bk ? bn / 2 : 64);
        static const char *const want[] = {"HGMMA", "UTMALDG", "MULTICAST", NULL};
        static const char *const why[] = {"wgmma fell back?", "no TMA loads",
                                          "no multicast TMA load (B's half)"};
        kf_sass_check_ops(&MEM, &ks->kernel, want, why, NULL);
    } else {
        kf_sass_check_hopper_without(&MEM, &ks->kernel, "MULTICAST");
    }
    kf_cuda_recipes_destroy(rec);
    /* without the flag: no cluster, but for the pair's cooperative
     * 128 x (2 x 128) tiles (the default there); with DUAL_F32T none */
    bool pair_c2 =
        want_cluster && strstr(want_tile, "dual 128x(2x128)") && !strstr(want_tile, "ping-pong");
    rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED | flags);
    rc = gemm_recipe(p.plan, rec);
    assert_int_equal(rc->steps[rc->n_steps - 1].kernel->cluster[0], pair_c2 ? 2 : 1);
    assert_true((strstr(rc->variants[0].how, "2-CTA clusters") != NULL) == pair_c2);
    kf_cuda_recipes_destroy(rec);
    if (pair_c2) {
        rec =
            kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                            KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_DUAL_F32T | flags);
        rc = gemm_recipe(p.plan, rec);
        assert_int_equal(rc->steps[rc->n_steps - 1].kernel->cluster[0], 1);
        assert_null(strstr(rc->variants[0].how, "2-CTA clusters"));
        kf_cuda_recipes_destroy(rec);
    }
    plan_release(&p);
}

static void cluster_case_check(const char *text, const char *want_tile, bool want_cluster) {
    cluster_case_flags(text, want_tile, want_cluster, 0);
}

static void test_cluster_pairs_compile_to_multicast_tma_and_hgmma(void **state) {
    (void)state;
    static const char *const dts[] = {"bf16", "f16"};
    for (int d = 0; d < 2; d++) {
        char t[1024];
        /* K = 1024: ping-pong 128 x 128, N-major B, bias + tanh gelu, 65
         * tile rows (odd) */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[8320, 1024])\nw = input(%s[1024, 4096])\n"
                 "b = input(%s[4096])\nh = matmul(x, w)\na = add(h, b)\ny = gelu_tanh(a)\n"
                 "output y\n",
                 dts[d], dts[d], dts[d]);
        cluster_case_check(t, "128x128 tiles ping-pong", true);
        /* K = 2048: cooperative 128 x 256, the TMA-store epilogue */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[8320, 2048])\nw = input(%s[2048, 4096])\n"
                 "b = input(%s[4096])\nh = matmul(x, w)\ny = add(h, b)\noutput y\n",
                 dts[d], dts[d], dts[d]);
        cluster_case_check(t, "128x256 tiles cooperative", true);
        /* K = 512: ping-pong, K-major B, a residual */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[8192, 512])\nw = input(%s[4096, 512])\n"
                 "r = input(%s[8192, 4096])\nh = matmul(x, w, transpose_b=true)\n"
                 "y = add(h, r)\noutput y\n",
                 dts[d], dts[d], dts[d]);
        cluster_case_check(t, "128x128 tiles ping-pong", true);
        /* 128 x 128 cooperative, ragged, batched */
        snprintf(t, sizeof t,
                 "kfg 1\na = input(%s[3, 300, 64])\nb = input(%s[3, 64, 136])\n"
                 "c = matmul(a, b)\noutput c\n",
                 dts[d], dts[d]);
        cluster_case_check(t, "128x128", true);
        /* SwiGLU pairs, both B layouts */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[8192, 512])\nwg = input(%s[512, 4096])\n"
                 "wu = input(%s[512, 4096])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
                 "a = silu(g)\ny = mul(a, u)\noutput y\n",
                 dts[d], dts[d], dts[d]);
        cluster_case_check(t, "dual 128x(2x128)", true);
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[1100, 200])\nwg = input(%s[520, 200])\n"
                 "wu = input(%s[520, 200])\ng = matmul(x, wg, transpose_b=true)\n"
                 "u = matmul(x, wu, transpose_b=true)\na = silu(g)\ny = mul(a, u)\n"
                 "output y\n",
                 dts[d], dts[d], dts[d]);
        cluster_case_check(t, "dual 128x(2x64)", true);
        /* a norm folded into B, K = 1024: ping-pong, and a LayerNorm's */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[8192, 1024])\ng = input(%s[1024])\n"
                 "w = input(%s[1024, 4096])\nn = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
                 dts[d], dts[d], dts[d]);
        cluster_case_check(t, "128x128 tiles ping-pong", true);
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[16384, 1024])\ng = input(%s[1024])\nc = input(%s[1024])\n"
                 "w = input(%s[1024, 3072])\nb = input(%s[3072])\n"
                 "n = layer_norm(x, g, c, eps=1e-5)\nh = matmul(n, w)\ny = add(h, b)\n"
                 "output y\n",
                 dts[d], dts[d], dts[d], dts[d], dts[d]);
        cluster_case_check(t, "128x128 tiles ping-pong", true);
    }
    /* with the other internal schedules: the staged epilogue, the norm in
     * the ring (compiled only: their GPU numerics ran with the clusters'
     * default epilogue and the fold) */
    cluster_case_flags("kfg 1\nx = input(bf16[1100, 200])\nw = input(bf16[200, 1000])\n"
                       "b = input(bf16[1000])\nh = matmul(x, w)\na = add(h, b)\ny = gelu(a)\n"
                       "output y\n",
                       "128x128", true, KF_CUDA_RECIPE_GEMM_STAGED_EPI);
    cluster_case_flags("kfg 1\nx = input(f16[1000, 264])\ng = input(f16[264])\n"
                       "w = input(f16[264, 1096])\nn = rms_norm(x, g)\ny = matmul(n, w)\n"
                       "output y\n",
                       "128x128", true, KF_CUDA_RECIPE_GEMM_NORM_IN_RING);
    /* ping-pong tiles in pairs too; a single tile row stays unclustered */
    cluster_case_check("kfg 1\nx = input(bf16[17000, 128])\nw = input(bf16[128, 200])\n"
                       "y = matmul(x, w)\noutput y\n",
                       "128x128 tiles ping-pong", true);
    cluster_case_check("kfg 1\nx = input(bf16[100, 128])\nw = input(bf16[128, 200])\n"
                       "y = matmul(x, w)\noutput y\n",
                       "128x128", false);
}

/* Stream-K (KF_CUDA_RECIPE_GEMM_STREAMK, internal): where the last wave
 * leaves a quarter of the SMs idle or more (decode shapes: every tile), the
 * recipe says so, the kernel defines KF_SK, launches one block per SM (132
 * on the H100 target) even for fewer tiles, and takes a PARTIALS workspace
 * (two 64 x bn f32 slots per block and consumer) and a COUNTERS buffer the
 * executor keeps (a word per half of every tile that can be cut); each
 * variant compiles to HGMMA and UTMALDG with no local memory. want_sk 1:
 * even ranges (KF_SK 1); 2: fewer than half as many tiles as SMs, each
 * tile's K steps interleaved (KF_SK 2, "interleaved" in the recipe line);
 * 0: none (a full last wave, ping-pong tiles, a short K; without the flag,
 * none). */
static bool sk_defined(const char *src) {
    return strstr(src, "#define KF_SK 1\n") || strstr(src, "#define KF_SK 2\n");
}

static void sk_case_check(const char *text, const char *want_tile, int want_sk) {
    planned p;
    plan_text(text, &p);
    kf_cuda_recipes *rec = kf_sass_recipes(
        &MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_STREAMK);
    const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
    const char *how = rc->variants[0].how;
    if (strcmp(rc->variants[0].label, "generated") != 0)
        fail_msg("expected the generated side: %s", how);
    const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
    char tile[48];
    snprintf(tile, sizeof tile, "%s%s", want_tile, strstr(want_tile, " tiles") ? "" : " tiles");
    if (!strstr(how, tile) || (strstr(how, "stream-K") != NULL) != (want_sk != 0))
        fail_msg("expected %s, %s: %s", tile, want_sk ? "stream-K" : "no stream-K", how);
    int n_part = 0, n_cnt = 0;
    for (uint32_t i = 0; i < ks->kernel.n_params; i++) {
        const kf_cuda_param *pa = &ks->kernel.params[i];
        if (pa->kind == KF_CUDA_PARAM_PARTIALS) {
            uint32_t bn = (uint32_t)atoi(strstr(ks->kernel.source, "#define KF_BN ") + 14);
            assert_int_equal(pa->bytes, 132u * 2u * 2u * 64u * bn * 4u);
            n_part++;
        }
        if (pa->kind == KF_CUDA_PARAM_COUNTERS) {
            assert_true(pa->bytes >= 8 && pa->bytes % 8 == 0 && pa->bytes <= 2u * 132u * 8u);
            n_cnt++;
        }
    }
    assert_int_equal(n_part, want_sk ? 1 : 0);
    assert_int_equal(n_cnt, want_sk ? 1 : 0);
    bool kept = false; /* the counters: a scratch of role COUNTERS */
    for (uint32_t s = 0; s < rc->n_scratch; s++)
        kept |= rc->scratch[s].role == KF_CUDA_PARAM_COUNTERS;
    assert_true(kept == (want_sk != 0));
    if (want_sk) {
        assert_non_null(
            strstr(ks->kernel.source, want_sk == 2 ? "#define KF_SK 2\n" : "#define KF_SK 1\n"));
        assert_true((strstr(how, "interleaved") != NULL) == (want_sk == 2));
        assert_non_null(strstr(ks->kernel.source, "#define KF_SK_GMAX 132"));
        assert_int_equal(ks->grid[0], 132);
        assert_non_null(strstr(ks->kernel.name, "sk_"));
        kf_sass_check_hopper(&MEM, &ks->kernel);
    } else {
        assert_false(sk_defined(ks->kernel.source));
    }
    kf_cuda_recipes_destroy(rec);
    /* without the flag: none */
    rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED);
    rc = gemm_recipe(p.plan, rec);
    assert_null(strstr(rc->variants[0].how, "stream-K"));
    assert_false(sk_defined(rc->steps[rc->n_steps - 1].kernel->kernel.source));
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

static void test_stream_k_compiles_to_hgmma_without_local_memory(void **state) {
    (void)state;
    static const char *const dts[] = {"bf16", "f16"};
    for (int d = 0; d < 2; d++) {
        char t[1024];
        /* decode: M = 1, 16 tiles of 128 x 256, the TMA-store epilogue */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[1, 4096])\nw = input(%s[4096, 4096])\ny = matmul(x, w)\n"
                 "output y\n",
                 dts[d], dts[d]);
        sk_case_check(t, "128x256", 2);
        /* M = 16, K-major B, bias + gelu_tanh + residual, K = 11008 */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[16, 11008])\nw = input(%s[4096, 11008])\n"
                 "b = input(%s[4096])\nr = input(%s[16, 4096])\n"
                 "h = matmul(x, w, transpose_b=true)\na = add(h, b)\nu = gelu_tanh(a)\n"
                 "y = add(u, r)\noutput y\n",
                 dts[d], dts[d], dts[d], dts[d]);
        sk_case_check(t, "128x256", 2);
        /* the register epilogue (a cast to f32), ragged */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[64, 1096])\nw = input(%s[1096, 1000])\nh = matmul(x, w)\n"
                 "y = cast(h, f32)\noutput y\n",
                 dts[d], dts[d]);
        sk_case_check(t, "128x256", 2);
        /* a SwiGLU pair, decode (ping-pong 128 x (2 x 64) without the flag;
         * 86 tiles: even ranges) */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[16, 4096])\nwg = input(%s[4096, 11008])\n"
                 "wu = input(%s[4096, 11008])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
                 "a = silu(g)\ny = mul(a, u)\noutput y\n",
                 dts[d], dts[d], dts[d]);
        sk_case_check(t, "dual 128x(2x128)", 1);
        /* LLaMA's projections: 2048 tiles of 128 x 256, the last wave 68 of
         * 132; an RMSNorm folded into B; the SwiGLU pair (11008 tiles: 52) */
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[16384, 4096])\nw = input(%s[4096, 4096])\n"
                 "y = matmul(x, w)\noutput y\n",
                 dts[d], dts[d]);
        sk_case_check(t, "128x256", 1);
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[16384, 4096])\ng = input(%s[4096])\n"
                 "w = input(%s[4096, 4096])\nn = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
                 dts[d], dts[d], dts[d]);
        sk_case_check(t, "128x256", 1);
        snprintf(t, sizeof t,
                 "kfg 1\nx = input(%s[16384, 4096])\nwg = input(%s[4096, 11008])\n"
                 "wu = input(%s[4096, 11008])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
                 "a = silu(g)\ny = mul(a, u)\noutput y\n",
                 dts[d], dts[d], dts[d]);
        sk_case_check(t, "dual 128x(2x128)", 1);
    }
    /* a full last wave (8448 x 4096: 66 x 16 = 1056 = 8 x 132), ping-pong
     * tiles (K <= 1024 with the TMA store) and a short K: none */
    sk_case_check("kfg 1\nx = input(bf16[8448, 2048])\nw = input(bf16[2048, 4096])\n"
                  "y = matmul(x, w)\noutput y\n",
                  "128x256", 0);
    sk_case_check("kfg 1\nx = input(bf16[16384, 1024])\nw = input(bf16[1024, 4096])\n"
                  "y = matmul(x, w)\noutput y\n",
                  "128x128", 0);
    sk_case_check("kfg 1\nx = input(bf16[16, 192])\nw = input(bf16[192, 4096])\n"
                  "y = matmul(x, w)\noutput y\n",
                  "128x128", 0);
}

static void test_gemm_modes_give_the_sides_they_name(void **state) {
    (void)state;
    planned p;
    plan_text("kfg 1\nx = input(bf16[512, 256])\nw = input(bf16[256, 512])\nb = input(bf16[512])\n"
              "h = matmul(x, w)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
              &p);
    /* the context modes map onto the recipe flags; AUTO measures */
    assert_int_equal(kf_cuda_recipe_flags(0, KF_GEMM_AUTO, KF_ATTENTION_AUTO), KF_CUDA_RECIPE_GEMM_MEASURED);
    assert_int_equal(kf_cuda_recipe_flags(0, KF_GEMM_MEASURED, KF_ATTENTION_AUTO), KF_CUDA_RECIPE_GEMM_MEASURED);
    assert_int_equal(kf_cuda_recipe_flags(0, KF_GEMM_GENERATED, KF_ATTENTION_AUTO), KF_CUDA_RECIPE_GEMM_GENERATED);
    assert_int_equal(kf_cuda_recipe_flags(KF_FLAG_NO_CUBLASLT, KF_GEMM_CUBLASLT, KF_ATTENTION_AUTO),
                     KF_CUDA_RECIPE_NO_LT_EPILOGUE);
    /* no GEMM flag: cuBLASLt alone */
    kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
    const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
    assert_int_equal(rc->n_variants, 1);
    assert_string_equal(rc->variants[0].label, "cublaslt");
    kf_cuda_recipes_destroy(rec);
    /* measured: the kernel first, cuBLASLt second */
    rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_MEASURED);
    rc = gemm_recipe(p.plan, rec);
    expect_measured_pair(rc);
    assert_int_equal(rc->variants[0].first_step, 0);
    assert_int_equal(rc->variants[0].n_steps, 1);
    assert_int_equal(rc->variants[1].first_step, 1);
    assert_true(rc->variants[1].n_steps >= 1);
    assert_int_equal(rc->steps[1].kind, KF_CUDA_STEP_GEMM);
    assert_non_null(strstr(rc->variants[1].how, "cuBLASLt"));
    kf_cuda_recipes_destroy(rec);
    /* the SwiGLU pair and a norm prologue are measured too (variant 0 the
     * generated kernel(s), variant 1 cuBLASLt and the kernels around it) */
    {
        static const char *const both[] = {
            "kfg 1\nx = input(bf16[512, 256])\nwg = input(bf16[256, 512])\n"
            "wu = input(bf16[256, 512])\ng = matmul(x, wg)\nu = matmul(x, wu)\na = silu(g)\n"
            "y = mul(a, u)\noutput y\n",
            "kfg 1\nx = input(bf16[2048, 256])\ng = input(bf16[256])\nw = input(bf16[256, 512])\n"
            "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n"};
        for (int i = 0; i < 2; i++) {
            planned q;
            plan_text(both[i], &q);
            kf_cuda_recipes *r = kf_sass_recipes(&MEM, q.plan, "h100", NULL,
                                                 KF_CUDA_RECIPE_GEMM_MEASURED);
            const kf_cuda_recipe *c = gemm_recipe(q.plan, r);
            expect_measured_pair(c);
            if (i == 0) {
                assert_non_null(strstr(c->variants[0].how, "dual"));
            } else {
                /* generated: the statistics and the fold's diag(gamma) B in
                 * one pre-pass, then the GEMM; cuBLASLt: the prologue kernel
                 * writing A, then the library GEMM */
                assert_int_equal(c->variants[0].n_steps, 2);
                for (uint32_t j = 0; j < 2; j++)
                    assert_int_equal(c->steps[c->variants[0].first_step + j].kind,
                                     KF_CUDA_STEP_KERNEL);
                assert_non_null(strstr(c->variants[0].how, "norm prologue folded into B"));
                assert_int_equal(c->variants[1].n_steps, 2);
                assert_int_equal(c->steps[c->variants[1].first_step].kind, KF_CUDA_STEP_KERNEL);
                assert_int_equal(c->steps[c->variants[1].first_step + 1].kind, KF_CUDA_STEP_GEMM);
                assert_non_null(strstr(c->variants[1].how, "prologue kernel"));
            }
            kf_cuda_recipes_destroy(r);
            plan_release(&q);
        }
    }
    /* a norm prologue on a SwiGLU pair with the fold off (the ring does not
     * take a pair), forced: the prologue kernel writes A to scratch and the
     * dual kernel reads it there; it compiles to HGMMA and UTMALDG */
    {
        planned q;
        plan_text("kfg 1\nx = input(bf16[1000, 264])\ng = input(bf16[264])\n"
                  "wg = input(bf16[264, 1096])\nwu = input(bf16[264, 1096])\n"
                  "n = rms_norm(x, g)\ngt = matmul(n, wg)\nu = matmul(n, wu)\na = silu(gt)\n"
                  "y = mul(a, u)\noutput y\n",
                  &q);
        kf_cuda_recipes *r =
            kf_sass_recipes(&MEM, q.plan, "h100", NULL,
                            KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_NORM_IN_RING);
        const kf_cuda_recipe *c = gemm_recipe(q.plan, r);
        assert_int_equal(c->n_variants, 1);
        assert_string_equal(c->variants[0].label, "generated");
        assert_non_null(strstr(c->variants[0].how, "dual"));
        assert_non_null(strstr(c->variants[0].how, "A from the prologue kernel's scratch"));
        assert_int_equal(c->n_steps, 2);
        assert_int_equal(c->steps[0].kernel->role, KF_CUDA_ROLE_GEMM_PROLOGUE);
        const kf_cuda_kstep *ks = c->steps[1].kernel;
        assert_int_equal(ks->args[0].buf.kind, KF_CUDA_BUF_SCRATCH);
        assert_non_null(strstr(ks->kernel.source, "#define KF_A_NORM 0"));
        kf_sass_check_hopper(&MEM, &ks->kernel);
        kf_cuda_recipes_destroy(r);
        plan_release(&q);
    }
    /* sm_80 (an A100), sm_86, sm_89: the measured default is the pair, as
     * on sm_90a -- variant 0 the mma.sync kernel alone, variant 1 cuBLASLt
     * and the epilogue kernel after it -- timed on the device */
    static const char *const m8x[] = {"sm_80", "sm_86", "sm_89"};
    for (int i = 0; i < 3; i++) {
        rec = kf_sass_recipes(&MEM, p.plan, i == 0 ? "a100" : NULL, i == 0 ? NULL : m8x[i],
                              KF_CUDA_RECIPE_GEMM_MEASURED);
        rc = gemm_recipe(p.plan, rec);
        expect_measured_pair(rc);
        assert_int_equal(rc->variants[0].first_step, 0);
        assert_int_equal(rc->variants[0].n_steps, 1);
        assert_int_equal(rc->steps[0].kernel->kernel.tmpl, KF_CUDA_TEMPLATE_GEMM_SM80);
        assert_string_equal(rc->steps[0].kernel->kernel.arch, m8x[i]);
        assert_non_null(strstr(rc->variants[0].how, "mma.sync"));
        assert_int_equal(rc->variants[1].first_step, 1);
        assert_true(rc->variants[1].n_steps >= 1);
        assert_int_equal(rc->steps[1].kind, KF_CUDA_STEP_GEMM);
        assert_non_null(strstr(rc->variants[1].how, "cuBLASLt"));
        kf_cuda_recipes_destroy(rec);
    }
    rec = kf_sass_recipes(&MEM, p.plan, "a100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED);
    rc = gemm_recipe(p.plan, rec);
    assert_int_equal(rc->n_variants, 1);
    assert_string_equal(rc->variants[0].label, "generated");
    assert_non_null(strstr(rc->variants[0].how, "mma.sync"));
    kf_cuda_recipes_destroy(rec);
    /* sm_86 and sm_89 take it too; sm_75 keeps cuBLASLt and says why */
    static const char *const a8x[] = {"sm_86", "sm_89"};
    for (int i = 0; i < 2; i++) {
        rec = kf_sass_recipes(&MEM, p.plan, NULL, a8x[i], KF_CUDA_RECIPE_GEMM_GENERATED);
        assert_int_equal(gemm_recipe(p.plan, rec)->steps[0].kernel->kernel.tmpl,
                         KF_CUDA_TEMPLATE_GEMM_SM80);
        kf_cuda_recipes_destroy(rec);
    }
    rec = kf_sass_recipes(&MEM, p.plan, NULL, "sm_75", KF_CUDA_RECIPE_GEMM_GENERATED);
    rc = gemm_recipe(p.plan, rec);
    assert_int_equal(rc->n_variants, 1);
    assert_string_equal(rc->variants[0].label, "cublaslt");
    assert_non_null(strstr(rc->variants[0].how, "no generated GEMM: the generated GEMM is for "
                                                "sm_80 to sm_89"));
    kf_cuda_recipes_destroy(rec);
    /* KF_GEMM_SM80 forces the mma.sync kernel on sm_90a, alone */
    assert_int_equal(kf_cuda_recipe_flags(0, KF_GEMM_SM80, KF_ATTENTION_AUTO),
                     KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SM80);
    rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                          kf_cuda_recipe_flags(0, KF_GEMM_SM80, KF_ATTENTION_AUTO));
    rc = gemm_recipe(p.plan, rec);
    assert_int_equal(rc->n_variants, 1);
    assert_string_equal(rc->variants[0].label, "generated");
    assert_int_equal(rc->steps[0].kernel->kernel.tmpl, KF_CUDA_TEMPLATE_GEMM_SM80);
    assert_string_equal(rc->steps[0].kernel->kernel.arch, "sm_90a");
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
    /* A SwiGLU pair on the sm_80 kernel: 128 x (2 x 64) tiles on 4 warps,
     * both B operands' pointers after A's, both products in the epilogue
     * (N-major and K-major B; with an RMSNorm folded into both B: the
     * statistics pre-pass and one fold pre-pass per B); HMMA, LDGSTS, no
     * local memory. */
    {
        static const char *const texts[] = {
            "kfg 1\nx = input(bf16[512, 256])\nwg = input(bf16[256, 512])\n"
            "wu = input(bf16[256, 512])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
            "a = silu(g)\ny = mul(a, u)\noutput y\n",
            "kfg 1\nx = input(f16[2, 300, 200])\nwg = input(f16[136, 200])\n"
            "wu = input(f16[136, 200])\ng = matmul(x, wg, transpose_b=true)\n"
            "u = matmul(x, wu, transpose_b=true)\na = silu(g)\ny = mul(a, u)\noutput y\n",
            "kfg 1\nx = input(bf16[5000, 264])\nn = input(bf16[264])\n"
            "wg = input(bf16[264, 1096])\nwu = input(bf16[264, 1096])\nxn = rms_norm(x, n)\n"
            "g = matmul(xn, wg)\nu = matmul(xn, wu)\na = silu(g)\ny = mul(a, u)\noutput y\n"};
        for (int i = 0; i < 3; i++) {
            planned q;
            plan_text(texts[i], &q);
            kf_cuda_recipes *r =
                kf_sass_recipes(&MEM, q.plan, "a100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED);
            const kf_cuda_recipe *c = gemm_recipe(q.plan, r);
            assert_string_equal(c->variants[0].label, "generated");
            if (!strstr(c->variants[0].how, "mma.sync pair 128x(2x64)x32 tiles on 4 warps"))
                fail_msg("expected the sm_80 pair: %s", c->variants[0].how);
            bool fold = i == 2;
            assert_int_equal(c->n_steps, fold ? 4 : 1);
            const kf_cuda_kstep *ks = c->steps[c->n_steps - 1].kernel;
            assert_int_equal(ks->kernel.tmpl, KF_CUDA_TEMPLATE_GEMM_SM80);
            assert_int_equal(ks->n_args, ks->kernel.n_params + 3);
            for (int j = 0; j < 3; j++)
                assert_int_equal(ks->args[j].kind, KF_CUDA_ARG_PTR);
            assert_int_equal(ks->block[0], 128);
            assert_non_null(strstr(ks->kernel.source, "#define KF_DUAL 1"));
            if (fold) {
                assert_non_null(strstr(c->steps[0].kernel->kernel.name, "stats_"));
                assert_non_null(strstr(c->steps[1].kernel->kernel.name, "fold_"));
                assert_non_null(strstr(c->steps[2].kernel->kernel.name, "fold2_"));
                assert_int_equal(ks->args[1].buf.kind, KF_CUDA_BUF_SCRATCH);
                assert_int_equal(ks->args[2].buf.kind, KF_CUDA_BUF_SCRATCH);
                assert_true(ks->args[1].buf.id != ks->args[2].buf.id);
            } else {
                assert_int_equal(ks->args[1].buf.kind, KF_CUDA_BUF_TENSOR);
                assert_int_equal(ks->args[2].buf.kind, KF_CUDA_BUF_TENSOR);
                assert_true(ks->args[1].buf.id != ks->args[2].buf.id);
            }
            kf_sass_check_ampere(&MEM, &ks->kernel);
            kf_cuda_recipes_destroy(r);
            plan_release(&q);
        }
    }
    /* A norm prologue on the sm_80 kernel: folded into B where 2 N < M (the
     * statistics and fold pre-passes, then the kernel on the norm's input and
     * the pre-pass's diag(gamma) B, kf_fold in its epilogue), else A from the
     * prologue kernel's scratch; HMMA and LDGSTS, no local memory. */
    {
        static const char *const texts[] = {
            "kfg 1\nx = input(bf16[2048, 256])\ng = input(bf16[256])\nw = input(bf16[256, 512])\n"
            "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
            "kfg 1\nx = input(f16[2048, 256])\ng = input(f16[256])\nc = input(f16[256])\n"
            "w = input(f16[256, 512])\nb = input(f16[512])\nn = layer_norm(x, g, c)\n"
            "h = matmul(n, w)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
            "kfg 1\nx = input(bf16[256, 256])\ng = input(bf16[256])\nw = input(bf16[256, 512])\n"
            "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n"};
        static const char *const hows[] = {"folded into B", "folded into B",
                                           "prologue kernel's scratch"};
        for (int i = 0; i < 3; i++) {
            planned q;
            plan_text(texts[i], &q);
            kf_cuda_recipes *r =
                kf_sass_recipes(&MEM, q.plan, "a100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED);
            const kf_cuda_recipe *c = gemm_recipe(q.plan, r);
            assert_string_equal(c->variants[0].label, "generated");
            if (!strstr(c->variants[0].how, "mma.sync") || !strstr(c->variants[0].how, hows[i]))
                fail_msg("expected mma.sync and '%s': %s", hows[i], c->variants[0].how);
            bool fold = i < 2;
            assert_int_equal(c->n_steps, fold ? 3 : 2);
            for (uint32_t s = 0; s + 1 < c->n_steps; s++)
                assert_int_equal(c->steps[s].kernel->role, KF_CUDA_ROLE_GEMM_PROLOGUE);
            const kf_cuda_kstep *ks = c->steps[c->n_steps - 1].kernel;
            assert_int_equal(ks->role, KF_CUDA_ROLE_GEMM);
            assert_int_equal(ks->kernel.tmpl, KF_CUDA_TEMPLATE_GEMM_SM80);
            /* fold: A is the norm's input, B the pre-pass's scratch;
             * scratch: A is the prologue kernel's */
            assert_int_equal(ks->args[0].buf.kind,
                             fold ? KF_CUDA_BUF_TENSOR : KF_CUDA_BUF_SCRATCH);
            assert_int_equal(ks->args[1].buf.kind,
                             fold ? KF_CUDA_BUF_SCRATCH : KF_CUDA_BUF_TENSOR);
            assert_non_null(
                strstr(ks->kernel.source, fold ? "#define KF_A_FOLD 1" : "#define KF_A_FOLD 0"));
            if (i == 1)
                assert_non_null(strstr(ks->kernel.source, "#define KF_FOLD_LN 1"));
            assert_non_null(strstr(c->steps[0].kernel->kernel.name, fold ? "stats_" : "pro_"));
            if (fold)
                assert_non_null(strstr(c->steps[1].kernel->kernel.name, "fold_"));
            kf_sass_check_ampere(&MEM, &ks->kernel);
            kf_cuda_recipes_destroy(r);
            plan_release(&q);
        }
    }
    /* f32 operands below sm_80 stay on cuBLASLt, with the reason (the SIMT
     * kernel, test_gemmgen_simt, needs cp.async) */
    plan_text("kfg 1\nx = input(f32[64, 64])\nw = input(f32[64, 64])\ny = matmul(x, w)\noutput y\n",
              &p);
    rec = kf_sass_recipes(&MEM, p.plan, NULL, "sm_75", KF_CUDA_RECIPE_GEMM_GENERATED);
    rc = gemm_recipe(p.plan, rec);
    assert_string_equal(rc->variants[0].label, "cublaslt");
    if (!strstr(rc->variants[0].how, "needs sm_80"))
        fail_msg("expected cuBLASLt and why: %s", rc->variants[0].how);
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
    /* a row stride TMA cannot take (K = 100: 200 bytes) */
    plan_text("kfg 1\nx = input(bf16[64, 100])\nw = input(bf16[100, 64])\ny = matmul(x, w)\n"
              "output y\n",
              &p);
    rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED);
    rc = gemm_recipe(p.plan, rec);
    assert_string_equal(rc->variants[0].label, "cublaslt");
    assert_non_null(strstr(rc->variants[0].how, "16 bytes"));
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

/* The sm_80 kernel of `text`'s GEMM group for `device` ("a100": sm_80) or
 * forced on an H100 (device "h100": compiled for sm_90a): one KERNEL step,
 * A and B's addresses before the params, one block per tile with the batch
 * in grid z, the tile the recipe names, and SASS with HMMA, LDGSTS and LDSM
 * and no local memory; `extra` recipe flags added (GEMM_SM80_8WARPS). */
static void sm80_case_flags(const char *text, const char *device, const char *want_tile,
                            int64_t batch, unsigned extra) {
    planned p;
    plan_text(text, &p);
    unsigned flags = strcmp(device, "a100") == 0
                         ? KF_CUDA_RECIPE_GEMM_GENERATED
                         : KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SM80;
    flags |= extra;
    kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, device, NULL, flags);
    const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
    if (rc->n_variants != 1 || strcmp(rc->variants[0].label, "generated") != 0)
        fail_msg("expected the mma.sync kernel alone, got %u variant(s), '%s': %s",
                 rc->n_variants, rc->variants[0].label, rc->variants[0].how);
    assert_int_equal(rc->n_steps, 1);
    const kf_cuda_kstep *ks = rc->steps[0].kernel;
    assert_int_equal(ks->kernel.tmpl, KF_CUDA_TEMPLATE_GEMM_SM80);
    assert_int_equal(ks->role, KF_CUDA_ROLE_GEMM);
    assert_int_equal(ks->n_tmaps, 0);
    assert_int_equal(ks->n_args, ks->kernel.n_params + 2);
    assert_int_equal(ks->args[0].kind, KF_CUDA_ARG_PTR);
    assert_int_equal(ks->args[1].kind, KF_CUDA_ARG_PTR);
    assert_false(ks->args[0].written || ks->args[1].written);
    assert_int_equal(ks->grid[2], (uint32_t)batch);
    /* 4 warps, or 8 for a 128 x 128 tile when asked for */
    assert_int_equal(ks->block[0], strstr(want_tile, "on 8 warps") ? 256 : 128);
    assert_true(ks->shared_bytes <= 99u * 1024u); /* fits sm_86/89's 99 KiB too */
    char tile[48];
    snprintf(tile, sizeof tile, "mma.sync %s", want_tile);
    if (!strstr(rc->variants[0].how, tile))
        fail_msg("expected %s: %s", tile, rc->variants[0].how);
    assert_non_null(strstr(ks->kernel.name, "mma_"));
    kf_sass_check_ampere(&MEM, &ks->kernel);
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

static void sm80_case(const char *text, const char *device, const char *want_tile,
                      int64_t batch) {
    sm80_case_flags(text, device, want_tile, batch, 0);
}

/* The head-split epilogue (KF_FLAG_GEMM_HEAD_EPILOGUE): a rotary embedding over
 * the product's head view, generated with the rotate-half partners from the
 * registers (KF_HEAD_D, accp), HGMMA + UTMALDG and no local memory, for heads
 * of 128 (permuted to [B, H, S, D], LLaMA's q/k) and 64; the cuBLASLt side's
 * epilogue kernel compiles too; a column that is not the partner (partial
 * rotary) keeps the group on cuBLASLt and says why. */
static void test_head_split_epilogue_compiles_to_hgmma_without_local_memory(void **state) {
    (void)state;
    static const char *const texts[] = {
        "kfg 1\nx = input(bf16[2, 2048, 4096])\nw = input(bf16[4096, 4096])\n"
        "c = input(bf16[2048, 128])\ns = input(bf16[2048, 128])\np = matmul(x, w)\n"
        "h = reshape(p, [2, 2048, 32, 128])\nq = permute(h, [0, 2, 1, 3])\n"
        "q1 = slice(q, axis=-1, stop=64)\nq2 = slice(q, axis=-1, start=64)\nn2 = neg(q2)\n"
        "r = concat(n2, q1, axis=-1)\nqc = mul(q, c)\nrs = mul(r, s)\ny = add(qc, rs)\noutput y\n",
        "kfg 1\nx = input(f16[3, 1000, 256])\nw = input(f16[256, 1024])\n"
        "c = input(f16[1000, 1, 64])\ns = input(f16[1000, 1, 64])\np = matmul(x, w)\n"
        "q = reshape(p, [3, 1000, 16, 64])\nq1 = slice(q, axis=-1, stop=32)\n"
        "q2 = slice(q, axis=-1, start=32)\nn2 = neg(q2)\nr = concat(n2, q1, axis=-1)\n"
        "qc = mul(q, c)\nrs = mul(r, s)\ny = add(qc, rs)\noutput y\n",
    };
    static const char *const heads[] = {"#define KF_HEAD_D 128", "#define KF_HEAD_D 64"};
    kf_plan_options o;
    kf_plan_options_init(&o);
    o.gemm_head_epilogue = true;
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        planned p;
        plan_text_with(texts[i], &o, &p);
        kf_cuda_recipes *rec =
            kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED);
        const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
        if (rc->n_variants != 1 || strcmp(rc->variants[0].label, "generated") != 0)
            fail_msg("expected the generated kernel, got '%s': %s", rc->variants[0].label,
                     rc->variants[0].how);
        const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
        const kf_cuda_kernel *k = &ks->kernel;
        assert_non_null(strstr(k->source, heads[i]));
        assert_non_null(strstr(k->source, "accp[k]"));
        /* stored by TMA: the head view [B, H, S, D] through a 4-D map, the
         * [B, S, H, D] one as the product's rows */
        if (!strstr(rc->variants[0].how, "epilogue stored by TMA"))
            fail_msg("expected the TMA-store epilogue: %s", rc->variants[0].how);
        assert_int_equal(ks->n_tmaps, 3);
        assert_int_equal(ks->tmaps[2].rank, i == 0 ? 4 : 3);
        assert_true((strstr(k->source, "#define KF_TMA_HEADS 1") != NULL) == (i == 0));
        check_tma_store_sass(k);
        kf_cuda_recipes_destroy(rec);
        /* and from the registers (the quad transposes' partners) */
        rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                              KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_EPI_REGS);
        rc = gemm_recipe(p.plan, rec);
        k = &rc->steps[rc->n_steps - 1].kernel->kernel;
        assert_non_null(strstr(k->source, "#define KF_EPI_TMA 0"));
        kf_sass_check_hopper(&MEM, k);
        kf_cuda_recipes_destroy(rec);
        /* the cuBLASLt side: the product into scratch, then the epilogue kernel */
        rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
        rc = gemm_recipe(p.plan, rec);
        const kf_cuda_kernel *e = &rc->steps[rc->n_steps - 1].kernel->kernel;
        assert_int_equal(rc->steps[rc->n_steps - 1].kind, KF_CUDA_STEP_KERNEL);
        assert_non_null(strstr(e->name, "epi_"));
        kf_nvrtc_result res;
        char err[KF_MSG_MAX] = "";
        if (kf_cuda_kernel_compile(&MEM, e, &res, err) != KF_OK)
            fail_msg("%s: %s\n%s", e->name, err, res.log ? res.log : "");
        kf_nvrtc_result_release(&MEM, &res);
        kf_cuda_recipes_destroy(rec);
        plan_release(&p);
    }
    /* partial rotary: the first 32 of 64 columns rotated: not d ^ 32 */
    planned p;
    plan_text_with("kfg 1\nx = input(bf16[2, 256, 64])\nw = input(bf16[64, 256])\n"
                   "c = input(bf16[256, 1, 64])\np = matmul(x, w)\n"
                   "q = reshape(p, [2, 256, 4, 64])\na = slice(q, axis=-1, stop=16)\n"
                   "b = slice(q, axis=-1, start=16, stop=32)\nt = slice(q, axis=-1, start=32)\n"
                   "nb = neg(b)\nr = concat(nb, a, axis=-1)\nrr = concat(r, t, axis=-1)\n"
                   "qc = mul(q, c)\nrc = mul(rr, c)\ny = add(qc, rc)\noutput y\n",
                   &o, &p);
    kf_cuda_recipes *rec =
        kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED);
    const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
    if (!strstr(rc->variants[0].how, "not proven the rotate-half partner"))
        fail_msg("expected cuBLASLt and why: %s", rc->variants[0].how);
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

static void test_every_sm80_gemm_variant_compiles_to_hmma_and_ldgsts(void **state) {
    (void)state;
    static const char *const dts[] = {"bf16", "f16"};
    for (int d = 0; d < 2; d++) {
        const char *t = dts[d];
        char s[1024];
        /* a bare product, 128 x 128 tiles (256 of them for 108 SMs) */
        snprintf(s, sizeof s,
                 "kfg 1\nx = input(%s[2048, 512])\nw = input(%s[512, 2048])\n"
                 "y = matmul(x, w)\noutput y\n",
                 t, t);
        sm80_case(s, "a100", "128x128x32", 1);
        /* bias + gelu (erf; the bf16 table), ragged M/N/K, 64 x 64 tiles */
        snprintf(s, sizeof s,
                 "kfg 1\nx = input(%s[1000, 1000])\nw = input(%s[1000, 1000])\n"
                 "b = input(%s[1000])\nh = matmul(x, w)\na = add(h, b)\ny = gelu(a)\n"
                 "output y\n",
                 t, t, t);
        sm80_case(s, "a100", "64x64x32 tiles on 4 warps, 4 stages (cp.async), A K-major, B N-major", 1);
        /* bias + tanh gelu, B transposed (K-major), 128 x 128 */
        snprintf(s, sizeof s,
                 "kfg 1\nx = input(%s[2048, 256])\nw = input(%s[2048, 256])\nb = input(%s[2048])\n"
                 "h = matmul(x, w, transpose_b=true)\na = add(h, b)\ny = gelu_tanh(a)\n"
                 "output y\n",
                 t, t, t);
        sm80_case(s, "a100", "128x128x32 tiles on 4 warps, 4 stages (cp.async), A K-major, B K-major", 1);
        /* bias, relu, residual, scale, then a cast to f32; B transposed */
        snprintf(s, sizeof s,
                 "kfg 1\nx = input(%s[256, 512])\nw = input(%s[384, 512])\nb = input(%s[384])\n"
                 "r = input(%s[256, 384])\ns = input(%s[])\n"
                 "h = matmul(x, w, transpose_b=true)\na = add(h, b)\nu = relu(a)\nv = add(u, r)\n"
                 "z = mul(v, s)\ny = cast(z, f32)\noutput y\n",
                 t, t, t, t, t);
        sm80_case(s, "a100", "64x64x32", 1);
        /* silu and sigmoid, the product also written */
        snprintf(s, sizeof s,
                 "kfg 1\nx = input(%s[300, 200])\nw = input(%s[200, 136])\n"
                 "h = matmul(x, w)\na = silu(h)\ny = sigmoid(a)\noutput y\noutput h\n",
                 t, t);
        sm80_case(s, "a100", "64x64x32", 1);
        /* A transposed (M-major), both transposed, 128 x 128 */
        snprintf(s, sizeof s,
                 "kfg 1\nx = input(%s[256, 2048])\nw = input(%s[2048, 256])\n"
                 "y = matmul(x, w, transpose_a=true, transpose_b=true)\noutput y\n",
                 t, t);
        sm80_case(s, "a100", "128x128x32 tiles on 4 warps, 4 stages (cp.async), A M-major, B K-major", 1);
        snprintf(s, sizeof s,
                 "kfg 1\nx = input(%s[200, 1000])\nw = input(%s[200, 264])\n"
                 "y = matmul(x, w, transpose_a=true)\noutput y\n",
                 t, t);
        sm80_case(s, "a100", "64x64x32 tiles on 4 warps, 4 stages (cp.async), A M-major, B N-major", 1);
        /* batched in one launch (grid z), M = 1 */
        snprintf(s, sizeof s,
                 "kfg 1\nx = input(%s[4, 1, 64])\nw = input(%s[4, 64, 256])\n"
                 "y = matmul(x, w)\noutput y\n",
                 t, t);
        sm80_case(s, "a100", "64x64x32", 4);
        /* batched, A broadcast, B per batch and transposed */
        snprintf(s, sizeof s,
                 "kfg 1\nx = input(%s[136, 64])\nw = input(%s[3, 200, 64])\nr = input(%s[3, 136, 200])\n"
                 "h = matmul(x, w, transpose_b=true)\ny = add(h, r)\noutput y\n",
                 t, t, t);
        sm80_case(s, "a100", "64x64x32", 3);
        /* forced on an H100 (compiled for sm_90a): HMMA, not HGMMA */
        snprintf(s, sizeof s,
                 "kfg 1\nx = input(%s[4096, 512])\nw = input(%s[512, 4096])\nb = input(%s[4096])\n"
                 "h = matmul(x, w)\na = add(h, b)\ny = gelu(a)\noutput y\n",
                 t, t, t);
        sm80_case(s, "h100", "128x128x32 tiles on 4 warps", 1);
        /* the 128 x 128 tile on 8 warps of 64 x 32 (GEMM_SM80_8WARPS, which
         * the bench compares; bare: with a residual its 128 registers leave
         * an 8-byte stack frame on sm_80), on sm_80 and forced on sm_90a;
         * the 64 x 64 tile keeps its 4 warps (bf16 only: the layout is
         * the same for f16). The 4-warp 128 x 128 tile takes the residual
         * with no local memory. */
        snprintf(s, sizeof s,
                 "kfg 1\nx = input(%s[2048, 512])\nw = input(%s[512, 2048])\ny = matmul(x, w)\n"
                 "output y\n",
                 t, t);
        if (d == 0) {
            sm80_case_flags(s, "h100", "128x128x32 tiles on 8 warps", 1,
                            KF_CUDA_RECIPE_GEMM_SM80_8WARPS);
            sm80_case_flags(s, "a100", "128x128x32 tiles on 8 warps", 1,
                            KF_CUDA_RECIPE_GEMM_SM80_8WARPS);
        }
        snprintf(s, sizeof s,
                 "kfg 1\nx = input(%s[2048, 512])\nw = input(%s[512, 2048])\nb = input(%s[2048])\n"
                 "r = input(%s[2048, 2048])\nh = matmul(x, w)\na = add(h, b)\ng = gelu(a)\n"
                 "y = add(g, r)\noutput y\n",
                 t, t, t, t);
        sm80_case(s, "a100", "128x128x32 tiles on 4 warps", 1);
        snprintf(s, sizeof s,
                 "kfg 1\nx = input(%s[300, 64])\nw = input(%s[64, 200])\ny = matmul(x, w)\noutput y\n",
                 t, t);
        if (d == 0)
            sm80_case_flags(s, "a100", "64x64x32 tiles on 4 warps", 1,
                            KF_CUDA_RECIPE_GEMM_SM80_8WARPS);
    }
}

/* GEMM siblings (the default; KF_CUDA_RECIPE_GEMM_NO_SIBLINGS runs each member
 * alone): Q, K, V behind one RMSNorm,
 * each with its own epilogue (q + bias, silu(k), v), N 128 / 64 / 64 against
 * M 512 so each folds the norm into its B. `qn` = 384 makes q too wide to
 * fold (2 N >= M): q reads A from the prologue's scratch, k and v fold. */
static void sib_text(char *t, size_t size, int qn) {
    snprintf(t, size,
             "kfg 1\nx = input(bf16[2, 256, 128])\ng = input(bf16[128])\n"
             "wq = input(bf16[128, %d])\nbq = input(bf16[%d])\nwk = input(bf16[128, 64])\n"
             "wv = input(bf16[128, 64])\nn = rms_norm(x, g, eps=1e-6)\n"
             "q0 = matmul(n, wq)\nq = add(q0, bq)\nk0 = matmul(n, wk)\nk = silu(k0)\n"
             "v = matmul(n, wv)\noutput q\noutput k\noutput v\n",
             qn, qn);
}

/* Counts the kernel steps of variant v of rc whose name starts with `prefix`. */
static uint32_t count_steps(const kf_cuda_recipe *rc, uint32_t v, const char *prefix) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < rc->variants[v].n_steps; i++) {
        const kf_cuda_step *st = &rc->steps[rc->variants[v].first_step + i];
        n += st->kind == KF_CUDA_STEP_KERNEL &&
             strncmp(st->kernel->kernel.name, prefix, strlen(prefix)) == 0;
    }
    return n;
}

static void test_gemm_sibling_set_runs_in_one_recipe_with_the_norm_once(void **state) {
    (void)state;
    char text[1024];
    for (int shape = 0; shape < 2; shape++) {
        sib_text(text, sizeof text, shape == 0 ? 128 : 384);
        planned p;
        plan_text(text, &p);
        uint32_t first = KF_NONE;
        for (uint32_t gi = 0; gi < p.plan->n_groups && first == KF_NONE; gi++)
            if (kf_group_in_gemm_sib_set(&p.plan->groups[gi]))
                first = gi;
        assert_int_not_equal(first, KF_NONE);
        assert_int_equal(p.plan->groups[first].gemm.sib_count, 3);
        /* each alone: three recipes, each its own statistics (in its one
         * pre-pass, or the prologue) */
        kf_cuda_recipes *rec = kf_sass_recipes(
            &MEM, p.plan, "h100", NULL,
            KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_NO_SIBLINGS);
        uint32_t pre = 0;
        for (uint32_t j = 0; j < 3; j++) {
            assert_int_equal(rec->recipes[first + j].n_members, 1);
            pre += count_steps(&rec->recipes[first + j], 0, "pre_") +
                   count_steps(&rec->recipes[first + j], 0, "pro_");
        }
        assert_int_equal(pre, 3);
        kf_cuda_recipes_destroy(rec);
        /* generated, the set in its first member's recipe, the pre-passes
         * apart (in one launch, the default: test_prepass_in_one_launch_*) */
        rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                              KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_APART |
                                  KF_CUDA_RECIPE_GEMM_PREPASS_APART);
        const kf_cuda_recipe *rc = &rec->recipes[first];
        assert_int_equal(rc->n_members, 3);
        assert_int_equal(rc->n_variants, 1);
        assert_string_equal(rc->variants[0].label, "generated");
        assert_non_null(strstr(rc->variants[0].how, "GEMM siblings"));
        for (uint32_t j = 1; j < 3; j++) {
            assert_int_equal(rec->recipes[first + j].n_steps, 0);
            assert_int_equal(rec->recipes[first + j].n_members, 0);
            assert_string_equal(rec->recipes[first + j].variants[0].label, "sibling");
        }
        /* statistics once (shape 1: and the prologue once, for q) */
        assert_int_equal(count_steps(rc, 0, "stats_"), 1);
        assert_int_equal(count_steps(rc, 0, "pro_"), shape == 0 ? 0u : 1u);
        assert_int_equal(count_steps(rc, 0, "fold_"), shape == 0 ? 3u : 2u);
        /* every GEMM that applies the statistics binds the pre-pass's buffer */
        const kf_cuda_kstep *stats = NULL;
        uint32_t gemms = 0;
        for (uint32_t i = 0; i < rc->n_steps; i++) {
            const kf_cuda_kstep *ks = rc->steps[i].kernel;
            assert_non_null(ks);
            kf_nvrtc_result res;
            char err[KF_MSG_MAX] = "";
            if (kf_cuda_kernel_compile(&MEM, &ks->kernel, &res, err) != KF_OK)
                fail_msg("%s: %s\n%s", ks->kernel.name, err, res.log ? res.log : "");
            kf_nvrtc_result_release(&MEM, &res);
            if (strncmp(ks->kernel.name, "stats_", 6) == 0)
                stats = ks;
            if (ks->role != KF_CUDA_ROLE_GEMM)
                continue;
            gemms++;
            kf_sass_check_hopper(&MEM, &ks->kernel);
            for (uint32_t j = 0; j < ks->kernel.n_params; j++) {
                const kf_cuda_param *pa = &ks->kernel.params[j];
                if (pa->kind != KF_CUDA_PARAM_SCRATCH || !stats ||
                    pa->tensor != stats->kernel.params[stats->kernel.n_params - 1].tensor)
                    continue;
                assert_int_equal(ks->args[ks->n_tmaps + j].buf.kind, KF_CUDA_BUF_SCRATCH);
                assert_int_equal(ks->args[ks->n_tmaps + j].buf.id,
                                 stats->args[stats->kernel.n_params - 1].buf.id);
            }
        }
        assert_non_null(stats);
        assert_int_equal(gemms, 3);
        kf_cuda_recipes_destroy(rec);
        /* measured: cuBLASLt's side writes A normalized once */
        rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_MEASURED);
        rc = &rec->recipes[first];
        expect_measured_pair(rc);
        assert_int_equal(rc->n_members, 3);
        assert_int_equal(count_steps(rc, 1, "pro_"), 1);
        uint32_t lt = 0;
        for (uint32_t i = 0; i < rc->variants[1].n_steps; i++)
            lt += rc->steps[rc->variants[1].first_step + i].kind == KF_CUDA_STEP_GEMM;
        assert_int_equal(lt, 3);
        assert_non_null(strstr(rc->variants[1].how, "A normalized once"));
        kf_cuda_recipes_destroy(rec);
        /* the sm_80 kernel's side, members apart (SIB_APART; the set as one
         * kernel, the default: test_gemm_sibling_set_runs_as_one_sm80_kernel):
         * the same steps around mma.sync kernels */
        rec = kf_sass_recipes(&MEM, p.plan, "a100", NULL,
                              KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_APART);
        rc = &rec->recipes[first];
        assert_int_equal(rc->n_members, 3);
        assert_string_equal(rc->variants[0].label, "generated");
        assert_int_equal(count_steps(rc, 0, "stats_"), 1);
        assert_int_equal(count_steps(rc, 0, "pro_"), shape == 0 ? 0u : 1u);
        assert_int_equal(count_steps(rc, 0, "fold_"), shape == 0 ? 3u : 2u);
        assert_int_equal(count_steps(rc, 0, "mma_"), 3);
        kf_cuda_recipes_destroy(rec);
        plan_release(&p);
    }
    /* a LayerNorm set of four, batch folded into M, on each side */
    static const unsigned modes[] = {KF_CUDA_RECIPE_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_MEASURED,
                                     0};
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        planned p;
        plan_text("kfg 1\nx = input(bf16[4, 100, 64])\ng = input(bf16[64])\nb = input(bf16[64])\n"
                  "wq = input(bf16[64, 40])\nwk = input(bf16[64, 40])\nwv = input(bf16[64, 40])\n"
                  "wo = input(bf16[64, 24])\nn = layer_norm(x, g, b, eps=1e-5)\n"
                  "q = matmul(n, wq)\nk = matmul(n, wk)\nv = matmul(n, wv)\no0 = matmul(n, wo)\n"
                  "o = relu(o0)\noutput q\noutput k\noutput v\noutput o\n",
                  &p);
        kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, modes[m]);
        uint32_t runs = 0, stats = 0, pro = 0;
        for (uint32_t gi = 0; gi < rec->n; gi++) {
            const kf_cuda_recipe *rc = &rec->recipes[gi];
            if (rc->n_members == 4)
                runs++;
            for (uint32_t v = 0; v < rc->n_variants; v++) {
                stats += count_steps(rc, v, "stats_") + count_steps(rc, v, "pre_");
                pro += count_steps(rc, v, "pro_");
            }
        }
        assert_int_equal(runs, 1);
        assert_int_equal(stats, modes[m] ? 1u : 0u);
        assert_int_equal(pro, modes[m] == KF_CUDA_RECIPE_GEMM_GENERATED ? 0u : 1u);
        kf_cuda_recipes_destroy(rec);
        plan_release(&p);
    }
}

/* The set tests' case: x (1000 x 256) through LayerNorm (layer_norm) or
 * RMSNorm, read by three GEMMs of 256, 64 and 72 columns (q with a bias, k
 * through gelu or silu -- bf16 gelu: a later member's table -- v bare), in
 * dtype t, planned into *p. Returns the sibling set's first group. */
static uint32_t plan_sib_set(planned *p, const char *t, bool layer_norm, bool gelu) {
    char text[1024];
    snprintf(text, sizeof text,
             "kfg 1\nx = input(%s[1000, 256])\ng = input(%s[256])\nbt = input(%s[256])\n"
             "wq = input(%s[256, 256])\nbq = input(%s[256])\nwk = input(%s[256, 64])\n"
             "wv = input(%s[256, 72])\nn = %s\n"
             "q0 = matmul(n, wq)\nq = add(q0, bq)\nk0 = matmul(n, wk)\nk = %s(k0)\n"
             "v = matmul(n, wv)\noutput q\noutput k\noutput v\n",
             t, t, t, t, t, t, t,
             layer_norm ? "layer_norm(x, g, bt, eps=1e-5)" : "rms_norm(x, g, eps=1e-6)",
             gelu ? "gelu" : "silu");
    plan_text(text, p);
    uint32_t first = KF_NONE;
    for (uint32_t gi = 0; gi < p->plan->n_groups && first == KF_NONE; gi++)
        if (kf_group_in_gemm_sib_set(&p->plan->groups[gi]))
            first = gi;
    assert_int_not_equal(first, KF_NONE);
    return first;
}

/* Compiles every kernel step of recipe rc (its one variant's) with NVRTC, a
 * failure failing the test, and returns its one GEMM step, which must come
 * after every pre-pass. */
static const kf_cuda_kstep *compile_steps_one_gemm(const kf_cuda_recipe *rc) {
    const kf_cuda_kstep *gemm = NULL;
    uint32_t gemms = 0;
    for (uint32_t i = 0; i < rc->n_steps; i++) {
        const kf_cuda_kstep *ks = rc->steps[i].kernel;
        kf_nvrtc_result res;
        char err[KF_MSG_MAX] = "";
        if (kf_cuda_kernel_compile(&MEM, &ks->kernel, &res, err) != KF_OK)
            fail_msg("%s: %s\n%s", ks->kernel.name, err, res.log ? res.log : "");
        kf_nvrtc_result_release(&MEM, &res);
        if (ks->role != KF_CUDA_ROLE_GEMM)
            continue;
        gemms++;
        assert_int_equal(i, rc->n_steps - 1); /* after every pre-pass */
        gemm = ks;
    }
    assert_int_equal(gemms, 1);
    return gemm;
}

/* An RMSNorm's gamma on A's fragments (shape.a_gscale, the default for bf16
 * with A K-major, cooperative 128 x 256 tiles and the TMA-store epilogue):
 * the recipe's steps are the statistics pre-pass and the GEMM (no fold of
 * B), whose B map is the input itself; the kernel loads A's fragments by
 * ldmatrix (LDSM), multiplies them by gamma (HMUL2) and runs HGMMA with A
 * from registers, not serialized (kf_sass_cubin fails on ptxas's C751x) and
 * with no local memory. f16, 128 x 128 tiles, ping-pong tiles and the
 * register epilogue keep the fold into B. */
static void test_rms_norm_gamma_on_a_fragments_compiles_to_register_hgmma(void **state) {
    (void)state;
    static const struct {
        const char *text, *dt;
        bool ring;
    } cases[] = {
        {"kfg 1\nx = input(%s[4224, 1096])\ng = input(%s[1096])\nw = input(%s[1096, 1032])\n"
         "b = input(%s[1032])\nn = rms_norm(x, g)\nh = matmul(n, w)\na = add(h, b)\n"
         "y = gelu(a)\noutput y\n",
         "bf16", true},
        {"kfg 1\nx = input(%s[4224, 1096])\ng = input(%s[1096])\nw = input(%s[1024, 1096])\n"
         "n = rms_norm(x, g)\ny = matmul(n, w, transpose_b=true)\noutput y\n",
         "bf16", true},
        {"kfg 1\nx = input(%s[4224, 1096])\ng = input(%s[1096])\nw = input(%s[1096, 1024])\n"
         "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
         "f16", false},
        {"kfg 1\nx = input(%s[1000, 264])\ng = input(%s[264])\nw = input(%s[264, 392])\n"
         "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
         "bf16", false},
        {"kfg 1\nx = input(%s[4000, 264])\ng = input(%s[264])\nw = input(%s[264, 1024])\n"
         "n = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
         "bf16", false},
        {"kfg 1\nx = input(%s[4224, 136])\ng = input(%s[136])\nw = input(%s[136, 1032])\n"
         "n = rms_norm(x, g)\nh = matmul(n, w)\ny = cast(h, f32)\noutput y\n",
         "bf16", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[1024];
        const char *t = cases[i].dt;
        snprintf(text, sizeof text, cases[i].text, t, t, t, t, t);
        planned p;
        plan_text(text, &p);
        kf_cuda_recipes *rec =
            kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED);
        const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
        const char *how = rc->variants[0].how;
        if ((strstr(how, "RMSNorm's gamma on A's fragments") != NULL) != cases[i].ring ||
            (strstr(how, "folded into B") != NULL) == cases[i].ring)
            fail_msg("case %zu: %s", i, how);
        if (cases[i].ring) {
            assert_int_equal(rc->n_steps, 2); /* the statistics, the GEMM */
            assert_int_equal(strncmp(rc->steps[0].kernel->kernel.name, "stats_", 6), 0);
            const kf_cuda_kstep *ks = rc->steps[1].kernel;
            assert_int_equal(ks->role, KF_CUDA_ROLE_GEMM);
            assert_int_equal(ks->args[1].buf.kind, KF_CUDA_BUF_TENSOR); /* B: the input itself */
            assert_non_null(strstr(ks->kernel.source, "#define KF_A_GSCALE 1\n"));
            static const char *const want[] = {"HGMMA", "UTMALDG", "LDSM", "HMUL2.BF16", NULL};
            static const char *const why[] = {"wgmma fell back?", "no TMA loads",
                                              "A's fragments not by ldmatrix",
                                              "gamma not applied in bf16 pairs"};
            kf_sass_check_ops(&MEM, &ks->kernel, want, why, NULL);
        }
        kf_cuda_recipes_destroy(rec);
        plan_release(&p);
    }
}

/* A sibling set as ONE sm_90a kernel over its members' concatenated columns
 * (KF_CUDA_RECIPE_GEMM_SIB_ONE, internal): GQA-like ragged members (q 256 +
 * bias, k 64 silu or gelu, v 72 bare: the set's tile columns 2 + 1 + 1) behind one
 * RMSNorm (and a LayerNorm), bf16 and f16: one GEMM step (HGMMA, TMA, no
 * spills) whose maps are A's and each member's B and output, after the one
 * pre-pass (the statistics, each member's fold); the report names the one GEMM
 * and its N. A set whose members take the norm in different forms keeps
 * their own kernels and says why. */
static void test_gemm_sibling_set_runs_as_one_kernel_over_the_concatenated_columns(void **state) {
    (void)state;
    static const char *const dts[] = {"bf16", "f16"};
    for (int c = 0; c < 3; c++) {
        planned p;
        uint32_t first = plan_sib_set(&p, dts[c == 2], c == 1, c == 0);
        assert_int_equal(p.plan->groups[first].gemm.sib_count, 3);
        kf_cuda_recipes *rec =
            kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                            KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_ONE);
        const kf_cuda_recipe *rc = &rec->recipes[first];
        assert_int_equal(rc->n_members, 3);
        if (!strstr(rc->variants[0].how, "one GEMM over their concatenated columns, N 256 + 64 + "
                                         "72 = 392"))
            fail_msg("how: %s", rc->variants[0].how);
        /* the statistics and the three folds: one pre-pass (the default) */
        assert_int_equal(count_steps(rc, 0, "pre_"), 1);
        assert_int_equal(count_steps(rc, 0, "stats_") + count_steps(rc, 0, "fold_"), 0);
        assert_int_equal(count_steps(rc, 0, "sib3_"), 1);
        const kf_cuda_kstep *ks = compile_steps_one_gemm(rc);
        kf_sass_check_hopper(&MEM, &ks->kernel);
        /* A, then each member's B and output (the TMA-store epilogue) */
        assert_int_equal(ks->n_tmaps, 7);
        for (uint32_t m = 0; m < 7; m++) {
            assert_int_equal(ks->args[m].kind, KF_CUDA_ARG_TMAP);
            assert_int_equal(ks->args[m].value, m);
        }
        assert_int_equal(ks->args[0].buf.kind, KF_CUDA_BUF_TENSOR); /* the norm's input */
        for (uint32_t j = 0; j < 3; j++) {
            assert_int_equal(ks->args[1 + 2 * j].buf.kind, KF_CUDA_BUF_SCRATCH); /* diag(g) B */
            assert_true(ks->args[2 + 2 * j].written);
            assert_int_equal(ks->tmaps[2 + 2 * j].dims[0], j == 0 ? 256u : j == 1 ? 64u : 72u);
        }
        /* every member's tile columns, one raster: (2 + 1 + 1) x 8 tiles */
        assert_int_equal(ks->kernel.launch.work_items, 32u);
        kf_cuda_recipes_destroy(rec);
        /* the default takes the one kernel too; SIB_APART keeps a GEMM each */
        rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED);
        assert_int_equal(count_steps(&rec->recipes[first], 0, "sib3_"), 1);
        kf_cuda_recipes_destroy(rec);
        rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                              KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_APART);
        assert_int_equal(count_steps(&rec->recipes[first], 0, "sib3_"), 0);
        assert_int_equal(count_steps(&rec->recipes[first], 0, "gemm_"), 3);
        kf_cuda_recipes_destroy(rec);
        plan_release(&p);
    }
    /* ping-pong 128-wide tiles (K <= 1024, more tiles than SMs), and
     * LLaMA-7B's GQA projections (16384 x 4096 x (4096 + 1024 + 1024):
     * cooperative 128 x 256 tiles): one kernel each, HGMMA, no spills */
    static const char *const big[][2] = {
        {"kfg 1\nx = input(bf16[4224, 72])\ng = input(bf16[72])\nwq = input(bf16[72, 600])\n"
         "r = input(bf16[4224, 600])\nwk = input(bf16[72, 520])\nwv = input(bf16[72, 552])\n"
         "n = rms_norm(x, g, eps=1e-5)\nq0 = matmul(n, wq)\nq = add(q0, r)\nk = matmul(n, wk)\n"
         "v = matmul(n, wv)\noutput q\noutput k\noutput v\n",
         "128x128 tiles ping-pong"},
        {"kfg 1\nx = input(bf16[16384, 4096])\ng = input(bf16[4096])\n"
         "wq = input(bf16[4096, 4096])\nwk = input(bf16[4096, 1024])\n"
         "wv = input(bf16[4096, 1024])\nn = rms_norm(x, g, eps=1e-6)\nq = matmul(n, wq)\n"
         "k = matmul(n, wk)\nv = matmul(n, wv)\noutput q\noutput k\noutput v\n",
         "128x256 tiles cooperative"},
    };
    for (size_t c = 0; c < sizeof big / sizeof *big; c++) {
        planned p;
        plan_text(big[c][0], &p);
        kf_cuda_recipes *rec =
            kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                            KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_ONE);
        uint32_t ones = 0;
        for (uint32_t gi = 0; gi < rec->n; gi++) {
            const kf_cuda_recipe *rc = &rec->recipes[gi];
            if (rc->n_members != 3)
                continue;
            if (!strstr(rc->variants[0].how, "one GEMM over their concatenated columns") ||
                !strstr(rc->variants[0].how, big[c][1]))
                fail_msg("how: %s", rc->variants[0].how);
            const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
            assert_int_equal(ks->role, KF_CUDA_ROLE_GEMM);
            kf_sass_check_hopper(&MEM, &ks->kernel);
            ones++;
        }
        assert_int_equal(ones, 1);
        kf_cuda_recipes_destroy(rec);
        plan_release(&p);
    }
    /* q too wide to fold reads the prologue's scratch, k and v fold: apart */
    char text[1024];
    sib_text(text, sizeof text, 384);
    planned p;
    plan_text(text, &p);
    kf_cuda_recipes *rec = kf_sass_recipes(
        &MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_ONE);
    bool seen = false;
    for (uint32_t gi = 0; gi < rec->n; gi++) {
        const kf_cuda_recipe *rc = &rec->recipes[gi];
        if (rc->n_members != 3)
            continue;
        seen = true;
        if (!strstr(rc->variants[0].how, "not one GEMM: ") ||
            !strstr(rc->variants[0].how, "the norm in different forms"))
            fail_msg("how: %s", rc->variants[0].how);
        assert_int_equal(count_steps(rc, 0, "sib3_"), 0);
    }
    assert_true(seen);
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

/* A sibling set as one kernel in 2-CTA clusters (KF_CUDA_RECIPE_GEMM_CLUSTER2
 * with SIB_ONE, internal: each member alone would take them), and in the
 * square raster (RASTER_SQ, internal) either way: pairs of tile
 * rows of one member's tile column share its B by multicast. The set test's
 * ragged members (1000 rows: 8 tile rows, 4 tile columns) and LLaMA-7B's Q/K/V
 * behind their RMSNorm (16384 x 4096 x 3 x 4096, B [N, K]): one sib3_ step,
 * 2 x 1 x 1 clusters on an even grid, each member's B map in boxes of half the
 * tile's rows, HGMMA and multicast TMA loads, no local memory. */
static void test_gemm_sibling_set_as_one_kernel_runs_in_clusters(void **state) {
    (void)state;
    planned p;
    uint32_t first = plan_sib_set(&p, "bf16", false, false);
    char llama[1024];
    snprintf(llama, sizeof llama,
             "kfg 1\nx = input(bf16[16384, 4096])\ng = input(bf16[4096])\n"
             "wq = input(bf16[4096, 4096])\nwk = input(bf16[4096, 4096])\n"
             "wv = input(bf16[4096, 4096])\nn = rms_norm(x, g, eps=1e-6)\n"
             "q = matmul(n, wq, transpose_b=true)\nk = matmul(n, wk, transpose_b=true)\n"
             "v = matmul(n, wv, transpose_b=true)\noutput q\noutput k\noutput v\n");
    for (int c = 0; c < 2; c++) {
        if (c == 1) {
            plan_release(&p);
            plan_text(llama, &p);
            first = KF_NONE;
            for (uint32_t gi = 0; gi < p.plan->n_groups && first == KF_NONE; gi++)
                if (kf_group_in_gemm_sib_set(&p.plan->groups[gi]))
                    first = gi;
            assert_int_not_equal(first, KF_NONE);
        }
        kf_cuda_recipes *rec =
            kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                            KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_ONE |
                                KF_CUDA_RECIPE_GEMM_CLUSTER2);
        const kf_cuda_recipe *rc = &rec->recipes[first];
        assert_int_equal(rc->n_members, 3);
        const char *how = rc->variants[0].how;
        if (!strstr(how, "one GEMM over their concatenated columns") ||
            !strstr(how, "2-CTA clusters"))
            fail_msg("how: %s", how);
        assert_int_equal(count_steps(rc, 0, "sib3_"), 1);
        const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
        assert_int_equal(ks->role, KF_CUDA_ROLE_GEMM);
        assert_non_null(strstr(ks->kernel.source, "#define KF_CLUSTER 2"));
        assert_int_equal(ks->cluster[0], 2);
        assert_int_equal(ks->grid[0] % 2, 0);
        assert_true(ks->grid[0] <= 132);
        /* tiles: 8 rows x (2 + 1 + 1) columns; 128 rows x 3 x 16 */
        assert_int_equal(ks->kernel.launch.work_items, c == 0 ? 32u : 6144u);
        for (uint32_t j = 0; j < 3; j++) { /* each member's B: halves of its tile */
            const kf_cuda_tmap *tb = &ks->tmaps[1 + 2 * j];
            assert_int_equal(tb->box[1], c == 0 ? 64u : 128u);
        }
        static const char *const want[] = {"HGMMA", "UTMALDG", "MULTICAST", NULL};
        static const char *const why[] = {"wgmma fell back?", "no TMA loads",
                                          "no multicast TMA load (B's half)"};
        kf_sass_check_ops(&MEM, &ks->kernel, want, why, NULL);
        kf_cuda_recipes_destroy(rec);
        /* the square raster (internal RASTER_SQ) reaches the set's kernel:
         * 16 tile rows at a time on 132 SMs, one CTA or in clusters */
        for (int cl = 0; cl < 2; cl++) {
            rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                                  KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_ONE |
                                      KF_CUDA_RECIPE_GEMM_RASTER_SQ |
                                      (cl ? KF_CUDA_RECIPE_GEMM_CLUSTER2 : UINT64_C(0)));
            rc = &rec->recipes[first];
            if (!strstr(rc->variants[0].how, "raster 16 tile rows"))
                fail_msg("how: %s", rc->variants[0].how);
            ks = rc->steps[rc->n_steps - 1].kernel;
            assert_int_equal(count_steps(rc, 0, "sib3_"), 1);
            assert_non_null(strstr(ks->kernel.source, "#define KF_RASTER 16"));
            assert_int_equal(ks->cluster[0], cl ? 2 : 1);
            if (c == 1)
                kf_sass_check_hopper(&MEM, &ks->kernel);
            kf_cuda_recipes_destroy(rec);
        }
    }
    plan_release(&p);
}

/* A sibling set as ONE sm_80 kernel (mma.sync) over its members'
 * concatenated columns, on an A100 and forced on an H100 (--gemm sm80): the
 * GQA-like ragged members of the sm_90a test (q 256 + bias, k 64 gelu or
 * silu, v 72 bare) behind an RMSNorm or a LayerNorm, bf16 and f16: one GEMM
 * step, "sib3_mma_", after the statistics and each member's fold pre-pass,
 * HMMA / LDGSTS / LDSM and no local memory; its arguments A's pointer (the
 * norm's input) and each member's diag(gamma) B, then the params; one block
 * per tile of the set's raster (64 x 64 tiles: 4 + 1 + 2 columns x 16
 * rows). KF_CUDA_RECIPE_GEMM_SIB_ONE asks for it (the default on sm_80 too:
 * recipe_gemm_siblings.c's SIB_ONE_SM80_DEFAULT), SIB_APART keeps the
 * members' own kernels.
 * LLaMA-7B's GQA projections (16384 x 4096 x (4096 + 1024 + 1024)) take
 * 128 x 128 tiles: 64 + 16 + 16 tile columns. */
static void test_gemm_sibling_set_runs_as_one_sm80_kernel(void **state) {
    (void)state;
    static const char *const dts[] = {"bf16", "f16"};
    for (int c = 0; c < 4; c++) {
        const char *dev = c < 2 ? "a100" : "h100";
        unsigned force = c < 2 ? 0u : KF_CUDA_RECIPE_GEMM_SM80;
        planned p;
        uint32_t first = plan_sib_set(&p, dts[c % 2], c == 1, c == 0);
        kf_cuda_recipes *rec = kf_sass_recipes(
            &MEM, p.plan, dev, NULL,
            KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_ONE | force);
        const kf_cuda_recipe *rc = &rec->recipes[first];
        assert_int_equal(rc->n_members, 3);
        if (!strstr(rc->variants[0].how, "one GEMM over their concatenated columns, N 256 + 64 + "
                                         "72 = 392") ||
            !strstr(rc->variants[0].how, "mma.sync 64x64x32"))
            fail_msg("%s: how: %s", dev, rc->variants[0].how);
        assert_int_equal(count_steps(rc, 0, "stats_"), 1);
        assert_int_equal(count_steps(rc, 0, "fold_"), 3);
        assert_int_equal(count_steps(rc, 0, "sib3_mma_"), 1);
        const kf_cuda_kstep *ks = compile_steps_one_gemm(rc);
        assert_int_equal(ks->kernel.tmpl, KF_CUDA_TEMPLATE_GEMM_SM80);
        kf_sass_check_ampere(&MEM, &ks->kernel);
        assert_int_equal(ks->n_tmaps, 0);
        for (uint32_t m = 0; m < 4; m++)
            assert_int_equal(ks->args[m].kind, KF_CUDA_ARG_PTR);
        assert_int_equal(ks->args[0].buf.kind, KF_CUDA_BUF_TENSOR); /* the norm's input */
        for (uint32_t j = 1; j < 4; j++)
            assert_int_equal(ks->args[j].buf.kind, KF_CUDA_BUF_SCRATCH); /* diag(g) B */
        assert_int_equal(ks->n_args, 4 + ks->kernel.n_params);
        assert_int_equal(ks->kernel.launch.work_items, 7u * 16u);
        assert_int_equal(ks->grid[0], 7u * 16u);
        assert_int_equal(ks->grid[2], 1u);
        kf_cuda_recipes_destroy(rec);
        rec =
            kf_sass_recipes(&MEM, p.plan, dev, NULL,
                            KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_APART | force);
        assert_int_equal(count_steps(&rec->recipes[first], 0, "sib3_"), 0);
        assert_int_equal(count_steps(&rec->recipes[first], 0, "mma_"), 3);
        kf_cuda_recipes_destroy(rec);
        plan_release(&p);
    }
    planned p;
    plan_text("kfg 1\nx = input(bf16[16384, 4096])\ng = input(bf16[4096])\n"
              "wq = input(bf16[4096, 4096])\nwk = input(bf16[4096, 1024])\n"
              "wv = input(bf16[4096, 1024])\nn = rms_norm(x, g, eps=1e-6)\nq = matmul(n, wq)\n"
              "k = matmul(n, wk)\nv = matmul(n, wv)\noutput q\noutput k\noutput v\n",
              &p);
    kf_cuda_recipes *rec = kf_sass_recipes(
        &MEM, p.plan, "a100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_SIB_ONE);
    uint32_t ones = 0;
    for (uint32_t gi = 0; gi < rec->n; gi++) {
        const kf_cuda_recipe *rc = &rec->recipes[gi];
        if (rc->n_members != 3)
            continue;
        if (!strstr(rc->variants[0].how, "N 4096 + 1024 + 1024 = 6144") ||
            !strstr(rc->variants[0].how, "mma.sync 128x128x32"))
            fail_msg("how: %s", rc->variants[0].how);
        const kf_cuda_kstep *ks = rc->steps[rc->n_steps - 1].kernel;
        assert_int_equal(ks->role, KF_CUDA_ROLE_GEMM);
        assert_int_equal(ks->kernel.launch.work_items, 128u * (32u + 8u + 8u));
        kf_sass_check_ampere(&MEM, &ks->kernel);
        ones++;
    }
    assert_int_equal(ones, 1);
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

static void test_generated_source_is_deterministic_and_named(void **state) {
    (void)state;
    planned p;
    plan_text("kfg 1\nx = input(bf16[512, 256])\nw = input(bf16[256, 512])\nb = input(bf16[512])\n"
              "h = matmul(x, w)\na = add(h, b)\ny = gelu(a)\noutput y\n",
              &p);
    kf_cuda_recipes *r1 = kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED);
    kf_cuda_recipes *r2 = kf_sass_recipes(&MEM, p.plan, "h200", NULL, KF_CUDA_RECIPE_GEMM_GENERATED);
    const kf_cuda_kernel *k1 = &gemm_recipe(p.plan, r1)->steps[0].kernel->kernel;
    const kf_cuda_kernel *k2 = &gemm_recipe(p.plan, r2)->steps[0].kernel->kernel;
    assert_string_equal(k1->source, k2->source);
    assert_non_null(strstr(k1->name, "gemm_"));
    assert_non_null(strstr(k1->name, "sm90a"));
    kf_cuda_recipes_destroy(r1);
    kf_cuda_recipes_destroy(r2);
    plan_release(&p);
}

int main(void) {
    kf_mem_resolve(&MEM, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_modes_give_the_sides_they_name),
        cmocka_unit_test(test_epilogue_row_operands_prefetch_to_l2),
        cmocka_unit_test(test_swiglu_pair_epilogue_runs_on_packed_pairs),
        cmocka_unit_test(test_tma_store_epilogue_stages_its_bias_in_shared_memory),
        cmocka_unit_test(test_tma_store_epilogue_packs_bf16_pairs_once),
        cmocka_unit_test(test_stepped_wgmma_descriptors_compile_to_fewer_instructions),
        cmocka_unit_test(test_pingpong_uniform_tile_counter_shortens_the_k_loop),
        cmocka_unit_test(test_square_raster_compiles_with_16_tile_rows),
        cmocka_unit_test(test_gelu_tanh_by_mufu_compiles_to_one_mufu_tanh),
        cmocka_unit_test(test_residual_by_tma_compiles_with_a_fourth_map),
        cmocka_unit_test(test_gemm_sibling_set_runs_in_one_recipe_with_the_norm_once),
        cmocka_unit_test(test_gemm_sibling_set_runs_as_one_kernel_over_the_concatenated_columns),
        cmocka_unit_test(test_rms_norm_gamma_on_a_fragments_compiles_to_register_hgmma),
        cmocka_unit_test(test_gemm_sibling_set_as_one_kernel_runs_in_clusters),
        cmocka_unit_test(test_gemm_sibling_set_runs_as_one_sm80_kernel),
        cmocka_unit_test(test_generated_source_is_deterministic_and_named),
        cmocka_unit_test(test_every_gemm_variant_compiles_to_hgmma_and_utmaldg),
        cmocka_unit_test(test_head_split_epilogue_compiles_to_hgmma_without_local_memory),
        cmocka_unit_test(test_staged_and_pingpong_schedules_compile),
        cmocka_unit_test(test_tma_store_epilogue_compiles_to_utmastg),
        cmocka_unit_test(test_cluster_pairs_compile_to_multicast_tma_and_hgmma),
        cmocka_unit_test(test_stream_k_compiles_to_hgmma_without_local_memory),
        cmocka_unit_test(test_split_row_norms_compile_to_a_gemm_and_a_row_pass),
        cmocka_unit_test(test_prepass_in_one_launch_compiles_without_local_memory),
        cmocka_unit_test(test_layer_norm_fold_takes_the_bias_into_its_column_terms),
        cmocka_unit_test(test_row_epilogues_compile_in_the_tile_without_local_memory),
        cmocka_unit_test(test_every_sm80_gemm_variant_compiles_to_hmma_and_ldgsts),
    };
    return kf_test_run(tests);
}
