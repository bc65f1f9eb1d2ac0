/*
 * test_gemmgen_simt.c -- the SIMT GEMM kernel of f32 and f64 GEMM groups
 * (codegen/cuda/cg_gemm_simt.c, templates/gemm_simt.cuh) and its recipes
 * (recipe_gemm_simt.c), with no GPU: every variant (tile x operand majors x
 * 16-byte or element copies x batching x epilogue x the group kinds: norm
 * prologue, SwiGLU pair, row epilogue) is generated through the recipes for
 * sm_80 (an A100) and sm_90a (an H100), compiled by NVRTC, and its SASS read
 * with cuobjdump: FFMA (f32) or DFMA (f64) and LDGSTS (cp.async) are there,
 * no HMMA (no tensor core: the reference is exact f32 / f64), and no local
 * memory (no spills). Numerics run on the GPU (test_cuda_exec_simt).
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

/* The recipe of the plan's first GEMM group. */
static const kf_cuda_recipe *gemm_recipe(const kf_plan *plan, const kf_cuda_recipes *rec) {
    for (uint32_t gi = 0; gi < plan->n_groups; gi++)
        if (plan->groups[gi].kind == KF_GROUP_GEMM)
            return &rec->recipes[gi];
    fail_msg("no GEMM group");
    return NULL;
}

/* The SIMT kernel of `text`'s GEMM group (every %s: `dt`) on `device` with
 * GEMM_GENERATED: the generated side alone, its `how` holding `want` (a
 * '|'-separated list), n_steps steps (the GEMM's role, then the row pass's
 * where a row epilogue is split off; a prologue step before), A and B (and
 * the pair's second B) as pointers before the params, one block per tile
 * with the batch in grid z, 256 threads; its SASS has the FMA of its dtype
 * and LDGSTS, no HMMA, no local memory. */
static void simt_case(const char *fmt, const char *dt, const char *device, const char *want,
                      uint32_t n_steps, int64_t batch) {
    char text[2048];
    snprintf(text, sizeof text, fmt, dt, dt, dt, dt, dt, dt, dt, dt);
    planned p;
    plan_text(text, &p);
    kf_cuda_recipes *rec =
        kf_sass_recipes(&MEM, p.plan, device, NULL, KF_CUDA_RECIPE_GEMM_GENERATED);
    const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
    if (rc->n_variants != 1 || strcmp(rc->variants[0].label, "generated") != 0)
        fail_msg("%s on %s: expected the SIMT kernel alone, got %u variant(s), '%s': %s\n%s", dt,
                 device, rc->n_variants, rc->variants[0].label, rc->variants[0].how, text);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", want);
    for (char *tok = strtok(buf, "|"); tok; tok = strtok(NULL, "|"))
        if (!strstr(rc->variants[0].how, tok))
            fail_msg("%s on %s: expected '%s': %s\n%s", dt, device, tok, rc->variants[0].how, text);
    if (rc->n_steps != n_steps)
        fail_msg("%s on %s: %u steps, expected %u: %s", dt, device, rc->n_steps, n_steps,
                 rc->variants[0].how);
    const kf_cuda_kstep *ks = NULL;
    for (uint32_t s = 0; s < rc->n_steps; s++)
        if (rc->steps[s].kind == KF_CUDA_STEP_KERNEL &&
            rc->steps[s].kernel->kernel.tmpl == KF_CUDA_TEMPLATE_GEMM_SIMT)
            ks = rc->steps[s].kernel;
    assert_non_null(ks);
    assert_int_equal(ks->role, KF_CUDA_ROLE_GEMM);
    assert_int_equal(ks->n_tmaps, 0);
    uint32_t n_ptrs = strstr(want, "pair") ? 3 : 2;
    assert_int_equal(ks->n_args, ks->kernel.n_params + n_ptrs);
    for (uint32_t i = 0; i < n_ptrs; i++) {
        assert_int_equal(ks->args[i].kind, KF_CUDA_ARG_PTR);
        assert_false(ks->args[i].written);
    }
    assert_int_equal(ks->grid[2], (uint32_t)batch);
    assert_true(ks->grid[0] >= 1);
    assert_int_equal(ks->grid[0], ks->kernel.launch.work_items); /* a block per tile */
    assert_int_equal(ks->block[0], 256);
    assert_true(ks->shared_bytes <= 99u * 1024u); /* fits sm_86/89's 99 KiB too */
    assert_non_null(strstr(ks->kernel.name, "simt_"));
    bool f64 = strcmp(dt, "f64") == 0;
    assert_non_null(strstr(ks->kernel.source, f64 ? "#define KF_T double" : "#define KF_T float"));
    static const char *const want_f32[] = {"FFMA", "LDGSTS", NULL};
    static const char *const want_f64[] = {"DFMA", "LDGSTS", NULL};
    static const char *const why[] = {"no fused multiply-add of the dtype", "no cp.async loads"};
    kf_sass_check_ops(&MEM, &ks->kernel, f64 ? want_f64 : want_f32, why, "HMMA");
    /* the row pass and a prologue compile too */
    for (uint32_t s = 0; s < rc->n_steps; s++) {
        const kf_cuda_kernel *k = &rc->steps[s].kernel->kernel;
        if (rc->steps[s].kind != KF_CUDA_STEP_KERNEL || k->tmpl == KF_CUDA_TEMPLATE_GEMM_SIMT)
            continue;
        kf_nvrtc_result res;
        char err[KF_MSG_MAX] = "";
        if (kf_cuda_kernel_compile(&MEM, k, &res, err) != KF_OK)
            fail_msg("%s: %s\n%s", k->name, err, res.log ? res.log : "");
        kf_nvrtc_result_release(&MEM, &res);
    }
    fprintf(stderr, "  %s %s: %s\n", dt, device, rc->variants[0].how);
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

static const char *const DEVICES[] = {"a100", "h100"};

/* The plain products: the tiles (128 x 128 / f64's 128 x 64 where they give
 * every SM one, else 64 x 64), every operand major, 16-byte and element
 * copies, batching, ragged and degenerate shapes, an epilogue. */
static void test_f32_and_f64_gemms_compile_to_fma_and_ldgsts(void **state) {
    (void)state;
    static const char *const dts[] = {"f32", "f64"};
    for (int d = 0; d < 2; d++) {
        const char *t = dts[d];
        bool f64 = d == 1;
        for (int v = 0; v < 2; v++) {
            const char *dev = DEVICES[v];
            /* big tiles, bias + gelu + residual */
            simt_case("kfg 1\nx = input(%s[2048, 512])\nw = input(%s[512, 2048])\n"
                      "b = input(%s[2048])\nr = input(%s[2048, 2048])\nh = matmul(x, w)\n"
                      "a = add(h, b)\ng = gelu(a)\ny = add(g, r)\noutput y\n",
                      t, dev,
                      f64 ? "simt (DFMA) 128x64x8|A K-major, B N-major"
                          : "simt (FFMA) 128x128x16|A K-major, B N-major",
                      1, 1);
            /* small tiles, ragged M, N, K: K = 7 and N = 37 take element copies */
            simt_case("kfg 1\nx = input(%s[100, 7])\nw = input(%s[7, 37])\ny = matmul(x, w)\n"
                      "output y\n",
                      t, dev, "64x64x|A K-major, B N-major", 1, 1);
            /* M-major A, K-major B */
            simt_case("kfg 1\nx = input(%s[72, 300])\nw = input(%s[136, 72])\n"
                      "y = matmul(x, w, transpose_a=true, transpose_b=true)\noutput y\n",
                      t, dev, "A M-major, B K-major", 1, 1);
            /* batched in one launch; B broadcast folds the batch into M */
            simt_case("kfg 1\na = input(%s[3, 40, 24])\nb = input(%s[3, 24, 56])\n"
                      "c = matmul(a, b)\nd = relu(c)\noutput d\n",
                      t, dev, "batched in one launch (grid z)", 1, 3);
            simt_case("kfg 1\na = input(%s[136, 200])\nb = input(%s[4, 136, 72])\n"
                      "c = matmul(a, b, transpose_a=true)\noutput c\n",
                      t, dev, "A M-major|batched in one launch", 1, 4);
            /* M = 1 */
            simt_case("kfg 1\nx = input(%s[1, 512])\nw = input(%s[512, 384])\ny = matmul(x, w)\n"
                      "output y\n",
                      t, dev, "64x64", 1, 1);
        }
    }
}

/* The group kinds: a norm prologue (the prologue kernel's scratch, a step
 * before), a SwiGLU pair (one kernel, both B), a row epilogue (in the
 * tile), a sibling
 * set's members. The planner forms none of these in f64 (its norms and the
 * pair's two GEMMs stay groups of their own): the f64 graphs check that. */
static void test_simt_gemm_group_kinds_compile(void **state) {
    (void)state;
    static const char *const dts[] = {"f32", "f64"};
    for (int d = 0; d < 2; d++) {
        const char *t = dts[d];
        for (int v = 0; v < 2; v++) {
            const char *dev = DEVICES[v];
            /* (the planner fuses no f64 norm prologue: its group is a plain GEMM) */
            bool f64 = d == 1;
            simt_case("kfg 1\nx = input(%s[1000, 264])\ng = input(%s[264])\nc = input(%s[264])\n"
                      "w = input(%s[264, 136])\nb = input(%s[136])\nn = layer_norm(x, g, c)\n"
                      "h = matmul(n, w)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
                      t, dev, f64 ? "simt (DFMA)" : "A from the prologue kernel's scratch",
                      f64 ? 1 : 2, 1);
            if (!f64) { /* (nor an f64 pair: two GEMM groups, each the plain kernel) */
                simt_case("kfg 1\nx = input(%s[200, 64])\nwg = input(%s[64, 136])\n"
                          "wu = input(%s[64, 136])\ng = matmul(x, wg)\nu = matmul(x, wu)\n"
                          "a = silu(g)\ny = mul(a, u)\noutput y\n",
                          t, dev, "pair 128x(2x64)", 1, 1);
                simt_case("kfg 1\nx = input(%s[2, 300, 200])\nwg = input(%s[2, 136, 200])\n"
                          "wu = input(%s[2, 136, 200])\ng = matmul(x, wg, transpose_b=true)\n"
                          "u = matmul(x, wu, transpose_b=true)\na = silu(g)\ny = mul(a, u)\n"
                          "output y\n",
                          t, dev, "pair 128x(2x64)|B K-major|batched", 1, 2);
            }
            /* (nor an f64 row epilogue: the norm is a row group of its own;
             * f32: in the tile, test_simt_row_epilogue_in_the_tile_compiles) */
            simt_case("kfg 1\nx = input(%s[300, 96])\nw = input(%s[96, 200])\n"
                      "r = input(%s[300, 200])\ng = input(%s[200])\nc = input(%s[200])\n"
                      "h = matmul(x, w)\ns = add(h, r)\ny = layer_norm(s, g, c)\noutput y\n",
                      t, dev, f64 ? "simt (DFMA)" : "row epilogue in the tile", 1, 1);
        }
    }
}

/* A row epilogue in the tile (f32, N <= 256): one kernel, no row pass, the
 * tile as wide as the rows (64, 128 or 256 columns, the last on 32 column
 * threads: a warp a tile row), FFMA and the rows' shuffles (SHFL.BFLY), no
 * local memory: LayerNorm, RMSNorm with the sum written too, softmax;
 * ragged M and N; batched. */
static void test_simt_row_epilogue_in_the_tile_compiles(void **state) {
    (void)state;
    for (int v = 0; v < 2; v++) {
        const char *dev = DEVICES[v];
        simt_case("kfg 1\nx = input(%s[300, 96])\nw = input(%s[96, 200])\n"
                  "r = input(%s[300, 200])\ng = input(%s[200])\nc = input(%s[200])\n"
                  "h = matmul(x, w)\ns = add(h, r)\ny = layer_norm(s, g, c)\noutput y\n",
                  "f32", dev, "32x256x8 tiles|row epilogue in the tile", 1, 1);
        simt_case("kfg 1\nx = input(%s[16384, 1024])\nw = input(%s[1024, 256])\n"
                  "b = input(%s[256])\nr = input(%s[16384, 256])\ng = input(%s[256])\n"
                  "c = input(%s[256])\nh = matmul(x, w)\na = add(h, b)\ns = add(a, r)\n"
                  "y = layer_norm(s, g, c)\noutput y\n",
                  "f32", dev, "64x256x8 tiles|row epilogue in the tile", 1, 1);
        simt_case("kfg 1\nx = input(%s[260, 72])\nw = input(%s[72, 120])\n"
                  "r = input(%s[260, 120])\ng = input(%s[120])\nh = matmul(x, w)\n"
                  "s = add(h, r)\ny = rms_norm(s, g)\noutput s\noutput y\n",
                  "f32", dev, "x128x8 tiles|row epilogue in the tile", 1, 1);
        simt_case("kfg 1\nx = input(%s[3, 100, 40])\nw = input(%s[40, 50])\n"
                  "h = matmul(x, w)\ny = softmax(h, axis=-1)\noutput y\n",
                  "f32", dev, "x64x8 tiles|row epilogue in the tile", 1, 1);
    }
    planned p;
    plan_text("kfg 1\nx = input(f32[300, 96])\nw = input(f32[96, 200])\nr = input(f32[300, 200])\n"
              "g = input(f32[200])\nh = matmul(x, w)\ns = add(h, r)\ny = rms_norm(s, g)\n"
              "output y\n",
              &p);
    kf_cuda_recipes *rec =
        kf_sass_recipes(&MEM, p.plan, "a100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED);
    const kf_cuda_kernel *k = &gemm_recipe(p.plan, rec)->steps[0].kernel->kernel;
    static const char *const want[] = {"FFMA", "SHFL.BFLY", NULL};
    static const char *const why[] = {"no FFMA", "no shuffles (the rows' statistics)"};
    kf_sass_check_ops(&MEM, k, want, why, NULL);
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
    /* rows past 256 columns (KF_FLAG_SPLIT_ROW_NORMS' plan): the split form */
    kf_plan_options o;
    kf_plan_options_init(&o);
    o.gemm_row_split_max_n = KF_GEMM_ROW_SPLIT_MAX_N;
    plan_text_with("kfg 1\nx = input(f32[300, 96])\nw = input(f32[96, 300])\n"
                   "r = input(f32[300, 300])\ng = input(f32[300])\nc = input(f32[300])\n"
                   "h = matmul(x, w)\ns = add(h, r)\ny = layer_norm(s, g, c)\noutput y\n",
                   &o, &p);
    rec = kf_sass_recipes(&MEM, p.plan, "a100", NULL, KF_CUDA_RECIPE_GEMM_GENERATED);
    const kf_cuda_recipe *rc = gemm_recipe(p.plan, rec);
    if (!strstr(rc->variants[0].how, "split row form") || rc->n_steps != 2)
        fail_msg("N = 300: %u steps: %s", rc->n_steps, rc->variants[0].how);
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

/* Every f32 / f64 GEMM group of every example gets the SIMT kernel on the
 * generated side (none is refused), on sm_80 and sm_90a. */
static void test_every_example_gemm_group_gets_a_generated_kernel(void **state) {
    (void)state;
    static const char *const files[] = {
        "examples/block.kfg",
        "examples/llama_block.kfg",
        "examples/mlp.kfg",
        "examples/patterns/backward_dgelu_bias_grad.kfg",
        "examples/patterns/gemm_bias_activation.kfg",
        "examples/patterns/gemm_bias_residual_scale.kfg",
        "examples/patterns/gemm_residual_layer_norm.kfg",
        "examples/patterns/gemm_residual_rms_norm_long_row.kfg",
        "examples/patterns/gemm_rotary_f32.kfg",
        "examples/patterns/gemm_siblings_qkv.kfg",
        "examples/patterns/norm_prologue.kfg",
        "examples/patterns/not_fused.kfg",
        "examples/patterns/qkv_split.kfg",
        "examples/patterns/swiglu.kfg",
    };
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        static char text[1 << 16];
        FILE *fp = fopen(files[f], "rb");
        if (!fp)
            fail_msg("cannot open %s (run from the repository root)", files[f]);
        size_t len = fread(text, 1, sizeof text - 1, fp);
        fclose(fp);
        text[len] = 0;
        planned p;
        plan_text(text, &p);
        for (int v = 0; v < 2; v++) {
            kf_cuda_recipes *rec =
                kf_sass_recipes(&MEM, p.plan, DEVICES[v], NULL, KF_CUDA_RECIPE_GEMM_GENERATED);
            uint32_t n = 0;
            for (uint32_t gi = 0; gi < p.plan->n_groups; gi++) {
                if (p.plan->groups[gi].kind != KF_GROUP_GEMM)
                    continue;
                const kf_cuda_recipe *rc = &rec->recipes[gi];
                if (strstr(rc->variants[0].how, "recipe runs this GEMM"))
                    continue; /* a sibling set's later member: in the first's recipe */
                if (strcmp(rc->variants[0].label, "generated") != 0)
                    fail_msg("%s on %s, group %u: %s", files[f], DEVICES[v], gi,
                             rc->variants[0].how);
                n++;
            }
            assert_true(n > 0);
            kf_cuda_recipes_destroy(rec);
        }
        plan_release(&p);
    }
}

int main(void) {
    kf_mem_resolve(&MEM, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_and_f64_gemms_compile_to_fma_and_ldgsts),
        cmocka_unit_test(test_simt_gemm_group_kinds_compile),
        cmocka_unit_test(test_simt_row_epilogue_in_the_tile_compiles),
        cmocka_unit_test(test_every_example_gemm_group_gets_a_generated_kernel),
    };
    return kf_test_run(tests);
}
