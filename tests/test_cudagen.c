/*
 * test_cudagen.c -- codegen/cuda, runtime/cuda_kernel and `kfuse aot`, with no
 * GPU: every template is instantiated and compiled by NVRTC to an ELF CUBIN
 * for sm_80 and sm_90a; every elementwise op, every row-wise op with prologue
 * and epilogue, every dtype; every example's kernels (through `kfuse aot`,
 * whose cache then serves a fail-on-miss lookup of every kernel); source
 * determinism; kernel names and template choice; a broken kernel's status.
 * The numerics run on the GPU suites (the execution side).
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "codegen/cuda/cuda_codegen.h"
#include "codegen/cuda/cuda_recipe.h"
#include "frontend/cmd_aot.h"
#include "fusion/fusion.h"
#include "kf_planned.h"
#include "kf_test.h"
#include "runtime/cuda_kernel.h"

static const char *const ARCHS[] = {"sm_80", "sm_90a"};
static kf_mem MEM;

static bool have_nvrtc(void) {
    int ma, mi;
    return kf_nvrtc_version(&ma, &mi) == KF_OK;
}

/* Makes the recipes of the plan for both archs, with and without cuBLASLt
 * epilogues, and NVRTC-compiles every KERNEL step (the kernels an executor
 * or `kfuse aot` compiles); returns how many the default recipes have, and
 * counts their templates in seen[]. */
static unsigned compile_flags(const kf_plan *plan, unsigned *seen, const unsigned *flag_list,
                              size_t n_flags);
static unsigned compile_all(const kf_plan *plan, unsigned *seen) {
    static const unsigned sets[] = {0, KF_CUDA_RECIPE_NO_LT_EPILOGUE, KF_CUDA_RECIPE_GEMM_MEASURED};
    return compile_flags(plan, seen, sets, 3);
}

/* compile_all over the recipe flags of flag_list (the first counted). */
static unsigned compile_flags(const kf_plan *plan, unsigned *seen, const unsigned *flag_list,
                              size_t n_flags) {
    unsigned n = 0;
    for (size_t a = 0; a < sizeof ARCHS / sizeof ARCHS[0]; a++) {
        for (size_t fi = 0; fi < n_flags; fi++) {
            unsigned flags = flag_list[fi];
            kf_cuda_target t;
            kf_cuda_target_for_arch(ARCHS[a], &t);
            t.flags = flags;
            kf_cuda_recipes *rec = NULL;
            char err[KF_MSG_MAX] = "";
            if (kf_cuda_recipes_create(plan, &t, &MEM, &rec, err) != KF_OK)
                fail_msg("recipes for %s: %s", ARCHS[a], err);
            for (uint32_t gi = 0; gi < rec->n; gi++) {
                const kf_cuda_recipe *rc = &rec->recipes[gi];
                for (uint32_t si = 0; si < rc->n_steps; si++) {
                    if (rc->steps[si].kind != KF_CUDA_STEP_KERNEL)
                        continue;
                    const kf_cuda_kernel *k = &rc->steps[si].kernel->kernel;
                    bool gen = k->tmpl == KF_CUDA_TEMPLATE_GEMM_SM90 ||
                               k->tmpl == KF_CUDA_TEMPLATE_GEMM_SM80 ||
                               k->tmpl == KF_CUDA_TEMPLATE_GEMM_SIMT ||
                               k->tmpl == KF_CUDA_TEMPLATE_GEMM_DECODE;
                    if (seen && (fi == 0 || gen))
                        seen[k->tmpl]++;
                    if (fi > 0 && !gen && flags == KF_CUDA_RECIPE_GEMM_MEASURED)
                        continue; /* compiled already, with the first flags */
                    n += fi == 0; /* counted once per arch */
                    if (have_nvrtc()) {
                        kf_nvrtc_result res;
                        kf_status st = kf_cuda_kernel_compile(&MEM, k, &res, err);
                        if (st != KF_OK)
                            fail_msg("%s: %s\n%s", k->name, err, res.log ? res.log : "");
                        assert_true(res.cubin_size > 4);
                        assert_memory_equal(res.cubin,
                                            "\x7f"
                                            "ELF",
                                            4);
                        kf_nvrtc_result_release(&MEM, &res);
                    }
                }
            }
            kf_cuda_recipes_destroy(rec);
        }
    }
    return n;
}

static unsigned compile_text(const char *text, unsigned *seen) {
    planned p;
    plan_text(text, &p);
    unsigned n = compile_all(p.plan, seen);
    plan_release(&p);
    return n;
}

/* The recipe line (variant 0's "how") of group `gi` for `arch`. */
static void recipe_how(const kf_plan *plan, uint32_t gi, const char *arch, char *how, size_t size) {
    kf_cuda_target t;
    kf_cuda_target_for_arch(arch, &t);
    kf_cuda_recipes *rec = NULL;
    char err[KF_MSG_MAX] = "";
    if (kf_cuda_recipes_create(plan, &t, &MEM, &rec, err) != KF_OK)
        fail_msg("recipes for %s: %s", arch, err);
    snprintf(how, size, "%s", rec->recipes[gi].variants[0].how);
    kf_cuda_recipes_destroy(rec);
}

/* The first KERNEL step of the plan's recipes for `arch` (moved out of them:
 * release it with kf_cuda_kernel_release). */
static void first_kernel(const kf_plan *plan, const char *arch, kf_cuda_kernel *k) {
    kf_cuda_target t;
    kf_cuda_target_for_arch(arch, &t);
    kf_cuda_recipes *rec = NULL;
    char err[KF_MSG_MAX] = "";
    if (kf_cuda_recipes_create(plan, &t, &MEM, &rec, err) != KF_OK)
        fail_msg("recipes for %s: %s", arch, err);
    for (uint32_t gi = 0; gi < rec->n; gi++) {
        const kf_cuda_recipe *rc = &rec->recipes[gi];
        for (uint32_t s = 0; s < rc->n_steps; s++) {
            if (rc->steps[s].kind != KF_CUDA_STEP_KERNEL)
                continue;
            *k = rc->steps[s].kernel->kernel;
            memset(&rc->steps[s].kernel->kernel, 0, sizeof *k);
            kf_cuda_recipes_destroy(rec);
            return;
        }
    }
    kf_cuda_recipes_destroy(rec);
    fail_msg("no kernel in the plan");
}

/* ------------------------------------------------------------------------ */

static void test_every_template_compiles_for_sm80_and_sm90a(void **state) {
    (void)state;
    unsigned seen[KF_CUDA_TEMPLATE_COUNT] = {0};
    /* elementwise: vectors + bias broadcast; a rank-1 tail; a column broadcast */
    compile_text("kfg 1\nx = input(bf16[64, 4096])\nb = input(bf16[4096])\ns = input(bf16[])\n"
                 "m = mul(x, s)\na = add(m, b)\ny = gelu(a)\noutput y\n",
                 seen);
    compile_text("kfg 1\nx = input(f32[1001])\nn = neg(x)\ny = exp(n)\noutput y\n", seen);
    compile_text("kfg 1\nx = input(f16[8, 24])\nc = input(f16[8, 1])\ny = mul(x, c)\noutput y\n",
                 seen);
    /* elementwise_bulk (sm_90a; sm_80 takes the plain template): per-column
     * operands whose period (4100) does not divide a block's step, a partial
     * last chunk */
    compile_text("kfg 1\nx = input(bf16[1024, 4100])\nb = input(bf16[4100])\na = add(x, b)\n"
                 "y = gelu(a)\noutput y\n",
                 seen);
    /* row-wise: a warp per row (f64: not staged), a warp per row staged, a
     * block per row, a block re-reading the row */
    compile_text("kfg 1\nx = input(f64[32, 256])\ny = softmax(x)\noutput y\n", seen);
    compile_text("kfg 1\nx = input(f32[32, 256])\ny = softmax(x)\noutput y\n", seen);
    compile_text("kfg 1\nx = input(bf16[16, 8192])\nw = input(bf16[8192])\ny = rms_norm(x, w)\n"
                 "output y\n",
                 seen);
    compile_text("kfg 1\nx = input(f32[4, 65536])\nw = input(f32[65536])\nb = input(f32[65536])\n"
                 "y = layer_norm(x, w, b)\noutput y\n",
                 seen);
    /* the generated GEMM (sm_90a; test_gemmgen reads its SASS) */
    compile_text(
        "kfg 1\nx = input(bf16[256, 128])\nw = input(bf16[128, 256])\nb = input(bf16[256])\n"
        "h = matmul(x, w)\na = add(h, b)\ny = relu(a)\noutput y\n",
        seen);
    /* the SIMT GEMM of an f32 group (test_gemmgen_simt reads its SASS) */
    compile_text("kfg 1\nx = input(f32[200, 72])\nw = input(f32[72, 136])\nb = input(f32[136])\n"
                 "h = matmul(x, w)\na = add(h, b)\ny = relu(a)\noutput y\n",
                 seen);
    /* the generated GEMM forced, so sm_80 gets its mma.sync form alone
     * (the measured default makes it variant 0 of a pair there) */
    {
        static const unsigned gen[] = {KF_CUDA_RECIPE_GEMM_GENERATED};
        planned p;
        plan_text("kfg 1\nx = input(f16[200, 136])\nw = input(f16[136, 264])\n"
                  "b = input(f16[264])\nh = matmul(x, w)\na = add(h, b)\ny = gelu(a)\n"
                  "output y\n",
                  &p);
        compile_flags(p.plan, seen, gen, 1);
        plan_release(&p);
    }
    /* the decode GEMM (M <= 32: the generated side on sm_90a; test_gemmgen_decode
     * reads its SASS) */
    {
        static const unsigned gen[] = {KF_CUDA_RECIPE_GEMM_GENERATED};
        planned p;
        plan_text("kfg 1\nx = input(bf16[16, 256])\nw = input(bf16[256, 264])\n"
                  "b = input(bf16[264])\nh = matmul(x, w)\na = add(h, b)\ny = gelu(a)\n"
                  "output y\n",
                  &p);
        compile_flags(p.plan, seen, gen, 1);
        plan_release(&p);
    }
    /* a norm prologue folded into B (2 N < M): the fold pre-pass, sm_90a */
    {
        static const unsigned gen[] = {KF_CUDA_RECIPE_GEMM_GENERATED};
        planned p;
        plan_text("kfg 1\nx = input(bf16[512, 128])\ng = input(bf16[128])\n"
                  "w = input(bf16[128, 64])\nn = rms_norm(x, g)\ny = matmul(n, w)\noutput y\n",
                  &p);
        compile_flags(p.plan, seen, gen, 1);
        plan_release(&p);
    }
    /* column reduction; a softmax over a non-last axis; a layout copy */
    compile_text("kfg 1\nx = input(f32[64, 32])\ny = reduce_sum(x, axis=0)\noutput y\n", seen);
    compile_text("kfg 1\nx = input(f32[16, 8])\ny = softmax(x, axis=0)\noutput y\n", seen);
    compile_text(
        "kfg 1\nx = input(f32[4, 8, 16])\ne = exp(x)\ny = permute(e, [0, 2, 1])\noutput y\n", seen);
    /* argmax over the last axis, and over another */
    compile_text("kfg 1\nx = input(f32[16, 300])\ny = argmax(x, axis=-1)\noutput y\n", seen);
    compile_text("kfg 1\nx = input(f32[300, 16])\ny = argmax(x, axis=0)\noutput y\n", seen);
    /* the fused attention kernel; unfused, the row-wise softmax between GEMMs */
    compile_text("kfg 1\nq = input(bf16[1, 2, 70, 64])\nk = input(bf16[1, 2, 70, 64])\n"
                 "v = input(bf16[1, 2, 70, 64])\nqk = matmul(q, k, transpose_b=true)\n"
                 "p = softmax(qk)\no = matmul(p, v)\noutput o\n",
                 seen);
    /* the SIMT attention kernel: f32 (test_attnsimt compiles its variants) */
    compile_text("kfg 1\nq = input(f32[1, 2, 70, 16])\nk = input(f32[1, 2, 70, 16])\n"
                 "v = input(f32[1, 2, 70, 16])\nqk = matmul(q, k, transpose_b=true)\n"
                 "p = softmax(qk)\no = matmul(p, v)\noutput o\n",
                 seen);
    /* decode: one query row against 300 keys, the split-KV kernels (test_attndec
     * compiles every variant) */
    compile_text("kfg 1\nq = input(bf16[1, 2, 1, 64])\nk = input(bf16[1, 2, 300, 64])\n"
                 "v = input(bf16[1, 2, 300, 64])\nqk = matmul(q, k, transpose_b=true)\n"
                 "p = softmax(qk)\no = matmul(p, v)\noutput o\n",
                 seen);
    for (int t = 0; t < KF_CUDA_TEMPLATE_COUNT; t++) {
        if (!seen[t])
            fail_msg("template %s never instantiated", kf_cuda_template_name((kf_cuda_template)t));
    }
}

/* The fused attention kernel: every variant (head dim x mask class x dtype x
 * arch) is the group's one recipe step, compiles with NVRTC, and ptxas keeps
 * it in registers (no stack frame, no spills). */
static void test_fused_attention_compiles_every_variant_without_spills(void **state) {
    (void)state;
    static const int dims[] = {64, 128};
    static const struct {
        const char *name, *body, *mask;
    } masks[] = {
        {"none", "s1 = mul(qk, sc)\n", "none"},
        {"causal",
         "s0 = mul(qk, sc)\nrow = iota(i32[100, 100], axis=0)\ncol = iota(i32[100, 100], axis=1)\n"
         "keep = ge(row, col)\nninf = const(%s[], -inf)\ns1 = where(keep, s0, ninf)\n",
         "causal"},
        {"sliding window",
         "s0 = mul(qk, sc)\nrow = iota(i32[100, 100], axis=0)\ncol = iota(i32[100, 100], axis=1)\n"
         "d = sub(row, col)\nw = const(i32[], 15)\nzero = const(i32[], 0)\nrest = sub(w, d)\n"
         "m = min(d, rest)\nkeep = ge(m, zero)\nninf = const(%s[], -inf)\n"
         "s1 = where(keep, s0, ninf)\n",
         "sliding_window"},
        {"general (a bool tensor)",
         "s0 = mul(qk, sc)\nm = input(bool[100, 100])\nninf = const(%s[], -inf)\n"
         "s1 = where(m, s0, ninf)\n",
         "general"},
    };
    static const char *const dts[] = {"bf16", "f16"};
    unsigned compiled = 0;
    for (size_t di = 0; di < 2; di++) {
        for (size_t mi = 0; mi < sizeof masks / sizeof masks[0]; mi++) {
            for (size_t ti = 0; ti < 2; ti++) {
                const char *dn = dts[ti];
                int D = dims[di];
                char body[1024], text[2048];
                snprintf(body, sizeof body, masks[mi].body, dn);
                snprintf(text, sizeof text,
                         "kfg 1\nq = input(%s[2, 3, 100, %d])\nk = input(%s[2, 3, 100, %d])\n"
                         "v = input(%s[2, 3, 100, %d])\nqk = matmul(q, k, transpose_b=true)\n"
                         "sc = const(%s[], 0.125)\n%sp = softmax(s1)\no = matmul(p, v)\noutput o\n",
                         dn, D, dn, D, dn, D, dn, body);
                planned p;
                plan_text(text, &p);
                assert_int_equal(p.plan->groups[0].kind, KF_GROUP_ATTENTION);
                assert_string_equal(kf_mask_kind_name(p.plan->groups[0].attn.mask), masks[mi].mask);
                for (size_t a = 0; a < sizeof ARCHS / sizeof ARCHS[0]; a++) {
                    kf_cuda_target t;
                    kf_cuda_target_for_arch(ARCHS[a], &t);
                    /* the FA2 kernel on both archs (the default on
                     * sm_90a is the sm_90a kernel: test_attngen) */
                    t.flags = KF_CUDA_RECIPE_ATTENTION_FA2;
                    kf_cuda_recipes *rec = NULL;
                    char err[KF_MSG_MAX] = "";
                    if (kf_cuda_recipes_create(p.plan, &t, &MEM, &rec, err) != KF_OK)
                        fail_msg("%s D%d %s %s: %s", masks[mi].name, D, dn, ARCHS[a], err);
                    const kf_cuda_recipe *rc = &rec->recipes[0];
                    assert_int_equal(rc->n_steps, 1);
                    assert_int_equal(rc->steps[0].kind, KF_CUDA_STEP_KERNEL);
                    const kf_cuda_kstep *ks = rc->steps[0].kernel;
                    assert_int_equal(ks->role, KF_CUDA_ROLE_ATTENTION);
                    assert_int_equal(ks->kernel.tmpl, KF_CUDA_TEMPLATE_ATTENTION_MMA);
                    assert_non_null(
                        strstr(rc->variants[0].how, "fused attention (sm_80 mma.sync kernel)"));
                    /* 100 x 100: 2 x 2 tiles of 64; causal skips the one above
                     * the diagonal, the window of 16 the one too */
                    const char *tiles = mi == 1 || mi == 2 ? "3 of 4 tiles visited (25% outside"
                                                           : "every tile visited";
                    if (!strstr(rc->variants[0].how, tiles))
                        fail_msg("%s: expected '%s' in: %s", masks[mi].name, tiles,
                                 rc->variants[0].how);
                    if (have_nvrtc()) {
                        kf_nvrtc_options o = {.arch = ARCHS[a],
                                              .kernel_name = ks->kernel.name,
                                              .ptxas_verbose = true};
                        kf_nvrtc_result res;
                        kf_status st = kf_nvrtc_compile(&MEM, ks->kernel.source,
                                                        ks->kernel.source_len, &o, &res, err);
                        if (st != KF_OK)
                            fail_msg("%s: %s\n%s", ks->kernel.name, err, res.log ? res.log : "");
                        assert_memory_equal(res.cubin,
                                            "\x7f"
                                            "ELF",
                                            4);
                        if (!res.log || !strstr(res.log, "0 bytes stack frame, 0 bytes spill "
                                                         "stores, 0 bytes spill loads"))
                            fail_msg("%s (%s) spills:\n%s", ks->kernel.name, ARCHS[a],
                                     res.log ? res.log : "(no log)");
                        kf_nvrtc_result_release(&MEM, &res);
                        compiled++;
                    }
                    kf_cuda_recipes_destroy(rec);
                }
                plan_release(&p);
            }
        }
    }
    if (have_nvrtc())
        assert_int_equal(compiled, 2 * 4 * 2 * 2);
}

/* With the switch off (KF_FLAG_UNFUSED_ATTENTION), or for a group no fused
 * kernel takes (a head dim past the SIMT kernel's 256), attention is
 * the unfused recipe and the report line says why. (f32, other head dims and
 * K read across its rows run the SIMT kernel: test_attnsimt.) */
static void test_unfused_attention_says_why(void **state) {
    (void)state;
    static const struct {
        const char *text;
        unsigned flags;
        const char *why;
    } cases[] = {
        {"kfg 1\nq = input(bf16[2, 64, 64])\nk = input(bf16[2, 64, 64])\nv = input(bf16[2, 64, "
         "64])\n"
         "qk = matmul(q, k, transpose_b=true)\np = softmax(qk)\no = matmul(p, v)\noutput o\n",
         KF_CUDA_RECIPE_UNFUSED_ATTENTION, "the fused kernel is off: KF_FLAG_UNFUSED_ATTENTION"},
        {"kfg 1\nq = input(f32[2, 64, 264])\nk = input(f32[2, 64, 264])\nv = input(f32[2, 64, "
         "264])\n"
         "qk = matmul(q, k, transpose_b=true)\np = softmax(qk)\no = matmul(p, v)\noutput o\n",
         0, "dtype f32"},
        {"kfg 1\nq = input(bf16[2, 64, 288])\nk = input(bf16[2, 64, 288])\nv = input(bf16[2, 64, "
         "288])\n"
         "qk = matmul(q, k, transpose_b=true)\np = softmax(qk)\no = matmul(p, v)\noutput o\n",
         0, "head dim 288"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        planned p;
        plan_text(cases[i].text, &p);
        kf_cuda_target t;
        kf_cuda_target_for_arch("sm_90a", &t);
        t.flags = cases[i].flags;
        kf_cuda_recipes *rec = NULL;
        char err[KF_MSG_MAX] = "";
        if (kf_cuda_recipes_create(p.plan, &t, &MEM, &rec, err) != KF_OK)
            fail_msg("case %zu: %s", i, err);
        const char *how = rec->recipes[0].variants[0].how;
        if (!strstr(how, "unfused fallback") || !strstr(how, cases[i].why))
            fail_msg("case %zu: expected an unfused recipe saying '%s', got: %s", i, cases[i].why,
                     how);
        kf_cuda_recipes_destroy(rec);
        plan_release(&p);
    }
}

/* Each text plans to one argmax kernel that NVRTC compiles for both
 * architectures, made from template `tmpl` (the column form defines
 * KF_ARGMAX_COLS, the row form does not). */
static void argmax_kernels(const char *const *texts, size_t n, kf_cuda_template tmpl) {
    for (size_t i = 0; i < n; i++) {
        planned p;
        plan_text(texts[i], &p);
        assert_int_equal(kf_plan_kernel_count(p.plan), 1);
        assert_int_equal(compile_all(p.plan, NULL), 2);
        kf_cuda_kernel k;
        first_kernel(p.plan, "sm_90a", &k);
        assert_int_equal(k.tmpl, tmpl);
        assert_non_null(strstr(k.source, "kf_amax_before"));
        if (tmpl == KF_CUDA_TEMPLATE_COL_ARGMAX)
            assert_non_null(strstr(k.source, "#define KF_ARGMAX_COLS 1"));
        else
            assert_null(strstr(k.source, "#define KF_ARGMAX_COLS 1"));
        kf_cuda_kernel_release(&MEM, &k);
        plan_release(&p);
    }
}

/* argmax over a non-last axis (a COLREDUCE group): one kernel, the column
 * kernel of templates/argmax.cuh, its prologue fused, NVRTC-compiled for both
 * architectures: axis 0 and a middle axis, keepdim both ways, f32, bf16, f16
 * and i32, an axis longer and shorter than the warps that split it. */
static void test_argmax_over_another_axis_compiles_to_the_column_kernel(void **state) {
    (void)state;
    static const char *const texts[] = {
        "kfg 1\nx = input(bf16[64, 256])\ne = exp(x)\ny = argmax(e, axis=0, keepdim=true)\n"
        "output y\n",
        "kfg 1\nx = input(i32[8, 4096])\nb = input(i32[8, 1])\na = add(x, b)\n"
        "y = argmax(a, axis=0)\noutput y\n",
        "kfg 1\nx = input(f16[3, 5, 7])\ny = argmax(x, axis=1)\noutput y\n",
        "kfg 1\nx = input(f32[2, 1000, 3, 9])\ny = argmax(x, axis=-3, keepdim=true)\noutput y\n",
    };
    argmax_kernels(texts, sizeof texts / sizeof texts[0], KF_CUDA_TEMPLATE_COL_ARGMAX);
}

/* argmax over the last axis: one kernel (templates/argmax.cuh) with its
 * prologue fused, NVRTC-compiled for both architectures, on rows shorter
 * and longer than a warp and in f32, bf16 and i32. */
static void test_argmax_over_the_last_axis_compiles(void **state) {
    (void)state;
    static const char *const texts[] = {
        "kfg 1\nx = input(f32[64, 256])\ny = argmax(x, axis=1)\noutput y\n",
        "kfg 1\nx = input(bf16[3, 5, 7])\ne = exp(x)\ny = argmax(e, axis=-1, keepdim=true)\n"
        "output y\n",
        "kfg 1\nx = input(i32[8, 4096])\nb = input(i32[4096])\na = add(x, b)\n"
        "y = argmax(a, axis=-1)\noutput y\n",
    };
    argmax_kernels(texts, sizeof texts / sizeof texts[0], KF_CUDA_TEMPLATE_ROW_ARGMAX);
}

/* One chain through every elementwise op the dtype takes. */
static void test_every_elementwise_op_in_one_kernel_per_dtype(void **state) {
    (void)state;
    static const char *const floats[] = {"f32", "f16", "bf16", "f64"};
    char text[4096];
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
        const char *d = floats[i];
        snprintf(
            text, sizeof text,
            "kfg 1\nx = input(%s[8, 64])\ny = input(%s[64])\nz = input(%s[8, 1])\n"
            "a0 = neg(x)\na = abs(a0)\nb0 = exp(a)\nb1 = add(b0, y)\nb = log(b1)\n"
            "c0 = sqrt(b)\nc1 = add(c0, z)\nc = rsqrt(c1)\ne0 = relu(c)\ne1 = sigmoid(e0)\n"
            "e = tanh(e1)\nf0 = gelu(e)\nf1 = gelu_tanh(f0)\nf2 = silu(f1)\n"
            "f3 = erf(f2)\nf4 = sin(f3)\nf5 = cos(f4)\nf6 = clamp(f5, min=-0.5, max=2)\n"
            "zx = expand(z, [8, 64])\nf = add(f6, zx)\n"
            "g0 = min(f, y)\ng1 = max(g0, z)\ng2 = sub(x, y)\ng3 = mul(x, z)\n"
            "g4 = div(g2, g3)\ng = pow(g1, g4)\n"
            "k0 = lt(g, x)\nk1 = le(g, y)\nk2 = gt(g, z)\nk3 = ge(g, x)\nk4 = eq(g, y)\n"
            "k5 = ne(g, z)\nm5 = where(k5, g, y)\nm4 = where(k4, x, m5)\nm3 = where(k3, z, m4)\n"
            "m2 = where(k2, y, m3)\nm1 = where(k1, x, m2)\nm = where(k0, g, m1)\n"
            "n0 = cast(m, f32)\nn1 = cast(n0, f16)\nn2 = cast(n1, bf16)\nn = cast(n2, %s)\n"
            "i = iota(i32[8, 64], axis=1)\nk = cast(i, %s)\no = add(n, k)\noutput o\n",
            d, d, d, d, d);
        planned p;
        plan_text(text, &p);
        unsigned kernels = 0;
        for (uint32_t g = 0; g < p.plan->n_groups; g++)
            kernels += p.plan->groups[g].is_kernel;
        assert_int_equal(kernels, 1); /* one elementwise kernel */
        assert_int_equal(compile_all(p.plan, NULL), 2);
        plan_release(&p);
    }
    /* i32 and bool: the ops they take (saturating i32 arithmetic) */
    compile_text("kfg 1\nx = input(i32[8, 64])\ny = input(i32[64])\n"
                 "a0 = neg(x)\na1 = abs(a0)\na2 = add(a1, y)\na3 = sub(a2, x)\na = mul(a3, y)\n"
                 "b0 = min(a, x)\nb1 = max(b0, y)\nb = clamp(b1, min=-3, max=100)\nc0 = ge(b, "
                 "x)\nc1 = lt(x, y)\nc2 = cast(c1, i32)\n"
                 "c = where(c0, b, c2)\nd0 = cast(c, f32)\nd = cast(d0, i32)\noutput d\n",
                 NULL);
    compile_text("kfg 1\nx = input(bool[8, 64])\ny = input(bool[64])\n"
                 "e = eq(x, y)\nn = ne(x, y)\na = where(e, x, n)\nb0 = cast(a, f32)\n"
                 "b = cast(b0, bool)\noutput b\n",
                 NULL);
}

/* slice, concat and gather read through in elementwise, row-wise and
 * column-reduction kernels (offsets, per-element coordinate nodes, the
 * saturating i64 -> i32 index), NVRTC-compiled for both archs; the remapped
 * loads are spelled element by element with the offset and each coordinate. */
static void test_slices_concats_and_gathers_compile_into_their_consumers(void **state) {
    (void)state;
    static const char *const texts[] = {
        /* rotary embedding: x*cos + rotate_half(x)*sin, one kernel */
        "kfg 1\nx = input(bf16[4, 2, 64])\ncos = input(bf16[4, 1, 64])\nsin = input(bf16[4, 1, "
        "64])\nx1 = slice(x, axis=2, stop=32)\nx2 = slice(x, axis=2, start=32)\nn = neg(x2)\n"
        "r = concat(n, x1, axis=2)\na = mul(x, cos)\nb = mul(r, sin)\ny = add(a, b)\noutput y\n",
        /* embedding lookup with i64 indices, scaled */
        "kfg 1\nw = input(f16[100, 64])\ni = input(i64[4, 8])\ne = gather(w, i, axis=0)\n"
        "s = const(f16[], 8)\ny = mul(e, s)\noutput y\n",
        /* a gather on a middle axis with i32 indices, into a softmax (row-wise prologue) */
        "kfg 1\nt = input(f32[3, 10, 64])\ni = input(i32[5])\ng = gather(t, i, axis=1)\n"
        "y = softmax(g, axis=-1)\noutput y\n",
        /* slices with a step, and a concat into a column reduction */
        "kfg 1\nx = input(f32[16, 48])\na = slice(x, axis=1, start=1, stop=48, step=3)\n"
        "b = slice(x, axis=1, stop=16)\nc = concat(a, b, axis=0)\ns = reduce_sum(c, axis=0)\n"
        "output s\n",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        planned p;
        plan_text(texts[i], &p);
        assert_int_equal(kf_plan_kernel_count(p.plan), 1);
        assert_int_equal(compile_all(p.plan, NULL), 2);
        kf_cuda_kernel k;
        first_kernel(p.plan, "sm_90a", &k);
        if (getenv("KF_TEST_SHOW_SOURCE"))
            fprintf(stderr, "%s\n", k.source);
        assert_non_null(strstr(k.source, "kf_ld(p"));
        if (i == 1)
            assert_non_null(strstr(k.source, "2147483647LL")); /* the saturating index */
        /* a gather's clamped index sets the program's flag word (issue 16 item 4) */
        bool gathers = strstr(texts[i], "gather(") != NULL;
        assert_true(gathers == (strstr(k.source, "kf_note_clamp(p") != NULL));
        assert_true(gathers == (strstr(k.source, "unsigned *__restrict__ p") != NULL));
        kf_cuda_kernel_release(&MEM, &k);
        plan_release(&p);
    }
}

/* A remapped load whose index can run consecutively along a chunk (the last
 * axis's coordinate at stride 1, or an i32 node that steps by 0 or 1 per
 * element: cg_kvary_fill) is read as a vector where, at run time, its
 * elements do and are aligned (cg_emit_remap_vector): both halves of
 * rotate_half's concat on q's head view, a slice at an offset, the rows of a
 * gather. One whose index is loaded (a gather along the last axis) stays
 * element by element. rotate_half's two halves are read as one load where
 * the concat takes them (a pair: kf_pair0, test_rotate_half_halves_read_as_
 * one_load below), not as two. The head view's coordinates are 32-bit (no
 * 64-bit division of the linear index), and the concat's i32 index arithmetic
 * leaves the kernel light: 2 steps of its streamed operand and its pair's
 * load a trip (KF_UNROLL); with three streamed operands it is not unrolled,
 * and its grid is what its register bound keeps resident. */
static void test_remapped_loads_read_vectors_where_their_elements_run_consecutively(void **state) {
    (void)state;
    static const struct {
        const char *text;
        int vectors;   /* remapped loads with the vector path */
        bool elements; /* a remapped load element by element stays */
        int unroll;    /* KF_UNROLL, or 0: not checked */
        bool pair;     /* rotate_half's halves as one load (kf_pair0) */
    } cases[] = {
        {"kfg 1\nq0 = input(bf16[2, 16, 512])\ncs = input(bf16[1, 16, 128])\n"
         "sn = input(bf16[1, 16, 128])\nc = reshape(cs, [1, 1, 16, 128])\n"
         "s = reshape(sn, [1, 1, 16, 128])\nh = reshape(q0, [2, 16, 4, 128])\n"
         "q = permute(h, [0, 2, 1, 3])\nq1 = slice(q, axis=3, stop=64)\n"
         "q2 = slice(q, axis=3, start=64)\nn2 = neg(q2)\nr = concat(n2, q1, axis=3)\n"
         "qc = mul(q, c)\nrs = mul(r, s)\ny = add(qc, rs)\noutput y\n",
         0, false, 2, true},
        /* cos and sin per batch: three streamed operands, not unrolled */
        {"kfg 1\nq0 = input(bf16[2, 16, 512])\nc = input(bf16[2, 1, 16, 128])\n"
         "s = input(bf16[2, 1, 16, 128])\nh = reshape(q0, [2, 16, 4, 128])\n"
         "q = permute(h, [0, 2, 1, 3])\nq1 = slice(q, axis=3, stop=64)\n"
         "q2 = slice(q, axis=3, start=64)\nn2 = neg(q2)\nr = concat(n2, q1, axis=3)\n"
         "qc = mul(q, c)\nrs = mul(r, s)\ny = add(qc, rs)\noutput y\n",
         0, false, 1, true},
        {"kfg 1\nx = input(bf16[12, 64])\nz = input(bf16[12, 32])\n"
         "s = slice(x, axis=1, start=8, stop=40)\ny = add(s, z)\noutput y\n",
         1, false, 4, false},
        {"kfg 1\nt = input(f32[40, 64])\ni = input(i32[4, 6])\nw = input(f32[64])\n"
         "e = gather(t, i, axis=0)\ny = mul(e, w)\noutput y\n",
         1, false, 0, false},
        {"kfg 1\nu = input(bf16[5, 9])\nj = input(i32[5, 16])\nf = gather(u, j, axis=1)\n"
         "z = exp(f)\noutput z\n",
         0, true, 0, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        planned p;
        plan_text(cases[i].text, &p);
        assert_int_equal(kf_plan_kernel_count(p.plan), 1);
        assert_int_equal(compile_all(p.plan, NULL), 2);
        kf_cuda_kernel k;
        first_kernel(p.plan, "sm_90a", &k);
        if (getenv("KF_TEST_SHOW_SOURCE"))
            fprintf(stderr, "%s\n", k.source);
        const char *body = strstr(k.source, "#define KF_N ");
        assert_non_null(body);
        int vectors = 0;
        for (const char *q = body; (q = strstr(q, "kf_ldv<VV>(q")) != NULL; q++)
            vectors++;
        if (vectors != cases[i].vectors)
            fail_msg("case %zu (%s): %d remapped loads as vectors, expected %d", i, k.name, vectors,
                     cases[i].vectors);
        /* element by element: a coordinate node's element k in the offset
         * (in kf_body: a pair's kf_pair0 spells its fallback's offsets so) */
        const char *kbody = strstr(body, "kf_body(");
        assert_non_null(kbody);
        bool elements = false;
        for (const char *q = kbody; (q = strstr(q, "(long long)v")) != NULL && !elements; q++) {
            const char *e = q + strlen("(long long)v");
            while (*e >= '0' && *e <= '9')
                e++;
            elements = strncmp(e, "[k]", 3) == 0;
        }
        assert_true(cases[i].elements == elements);
        assert_null(strstr(body, "LL %")); /* 32-bit coordinates */
        char unroll[32];
        snprintf(unroll, sizeof unroll, "#define KF_UNROLL %d\n", cases[i].unroll);
        assert_true(cases[i].unroll == 0 || strstr(body, unroll) != NULL);
        assert_true(cases[i].pair == (strstr(body, "kf_pair0<VV>(i0, m)") != NULL));
        /* the grid's blocks an SM are resident at once: the register bound
         * (KF_MINB) allows as many (a concat's index arithmetic, not
         * unrolled: 4, where the unbounded kernel took 5 and the grid 8) */
        char minb[32];
        snprintf(minb, sizeof minb, "#define KF_MINB %u\n", k.launch.blocks_per_sm);
        assert_non_null(strstr(body, minb));
        assert_true(k.launch.blocks_per_sm <= 4);
        kf_cuda_kernel_release(&MEM, &k);
        plan_release(&p);
    }
}

/* rotate_half's concat reads its tensor twice per element, where(j < n,
 * -x[j + n], x[j - n]), each index clamped into its half; the two loads are
 * read as one at the index the where keeps (a pair, cg_elementwise.c:
 * kf_pair0), loaded ahead with the streamed operands where the loop unrolls
 * (pv.m0), else in kf_body, with a vector path when the chunk's elements run
 * consecutively on one side and an element-by-element one (m[k]) otherwise.
 * The LLaMA shape (B8 H32 S2048 D128, q's head view) unrolls 2 steps of q
 * and its pair's load a trip without spilling (with 4 ptxas spilled); a
 * ragged head (D 20: 4-element chunks across the seam), a misaligned slice
 * and two concats of the same halves (each load feeding both wheres: no pair
 * where the loads are one node) compile for both archs; a kernel without vectors (an odd last axis)
 * keeps the loads element by element. The recipe flag EW_PAIRS_APART (measure-only) gives the form
 * before: each half its own load behind its branches, 4 steps. */
static void test_rotate_half_halves_read_as_one_load(void **state) {
    (void)state;
    static const struct {
        const char *text;
        int pairs;        /* kf_pairN functions */
        int unroll;       /* KF_UNROLL */
        const char *same; /* the uniform-side test, or NULL: not checked */
        int vectors;      /* other remapped loads with a vector path (xs's own) */
    } cases[] = {
        {"kfg 1\nq0 = input(bf16[8, 2048, 4096])\ncs = input(bf16[1, 2048, 128])\n"
         "sn = input(bf16[1, 2048, 128])\nc = reshape(cs, [1, 1, 2048, 128])\n"
         "s = reshape(sn, [1, 1, 2048, 128])\nh = reshape(q0, [8, 2048, 32, 128])\n"
         "q = permute(h, [0, 2, 1, 3])\nq1 = slice(q, axis=3, stop=64)\n"
         "q2 = slice(q, axis=3, start=64)\nn2 = neg(q2)\nr = concat(n2, q1, axis=3)\n"
         "qc = mul(q, c)\nrs = mul(r, s)\ny = add(qc, rs)\noutput y\n",
         1, 2, "[0] == v", 0},
        {"kfg 1\nq0 = input(f32[2, 7, 60])\ncs = input(f32[1, 7, 20])\n"
         "sn = input(f32[1, 7, 20])\nc = reshape(cs, [1, 1, 7, 20])\n"
         "s = reshape(sn, [1, 1, 7, 20])\nh = reshape(q0, [2, 7, 3, 20])\n"
         "q = permute(h, [0, 2, 1, 3])\nq1 = slice(q, axis=3, stop=10)\n"
         "q2 = slice(q, axis=3, start=10)\nn2 = neg(q2)\nr = concat(n2, q1, axis=3)\n"
         "qc = mul(q, c)\nrs = mul(r, s)\ny = add(qc, rs)\noutput y\n",
         1, 2, "[0] == v", 0},
        {"kfg 1\nx = input(f32[6, 66])\nc = input(f32[6, 64])\ns = input(f32[6, 64])\n"
         "xs = slice(x, axis=1, start=1, stop=65)\nx1 = slice(xs, axis=1, stop=32)\n"
         "x2 = slice(xs, axis=1, start=32)\nn = neg(x2)\nr = concat(n, x1, axis=1)\n"
         "a = mul(xs, c)\nb = mul(r, s)\ny = add(a, b)\noutput y\n",
         1, 1, NULL, 1},
        {"kfg 1\nx = input(bf16[6, 64])\nx1 = slice(x, axis=1, stop=32)\n"
         "x2 = slice(x, axis=1, start=32)\nn = neg(x2)\nr = concat(n, x1, axis=1)\n"
         "t = concat(x2, x1, axis=1)\ny = mul(r, t)\noutput y\n",
         -1, 1, NULL, 0},
        {"kfg 1\nx = input(f32[6, 7])\nx1 = slice(x, axis=1, stop=3)\n"
         "x2 = slice(x, axis=1, start=3)\nn = neg(x2)\nr = concat(n, x1, axis=1)\n"
         "w = input(f32[6, 7])\ny = mul(r, w)\noutput y\n",
         0, 0, NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        planned p;
        plan_text(cases[i].text, &p);
        assert_int_equal(kf_plan_kernel_count(p.plan), 1);
        assert_int_equal(compile_all(p.plan, NULL), 2);
        kf_cuda_kernel k;
        first_kernel(p.plan, "sm_90a", &k);
        if (getenv("KF_TEST_SHOW_SOURCE"))
            fprintf(stderr, "%s\n", k.source);
        const char *body = strstr(k.source, "#define KF_N ");
        assert_non_null(body);
        int pairs = 0;
        for (const char *q = body; (q = strstr(q, "__forceinline__ bool kf_pair")) != NULL; q++)
            pairs++;
        if (cases[i].pairs >= 0 && pairs != cases[i].pairs)
            fail_msg("case %zu (%s): %d pairs, expected %d", i, k.name, pairs, cases[i].pairs);
        if (pairs > 0) {
            /* in kf_body, and no remapped load of its own left there */
            assert_non_null(strstr(body, "kf_pair0<VV>(i0, m)"));
            int vectors = 0;
            for (const char *q = body; (q = strstr(q, "kf_ldv<VV>(q")) != NULL; q++)
                vectors++;
            assert_int_equal(vectors, cases[i].vectors);
            /* ahead with the streamed operands exactly when unrolled */
            assert_true((cases[i].unroll > 1) == (strstr(body, "pv.m0") != NULL));
            char unroll[32];
            snprintf(unroll, sizeof unroll, "#define KF_UNROLL %d\n", cases[i].unroll);
            assert_non_null(strstr(body, unroll));
            assert_true(cases[i].same == NULL || strstr(body, cases[i].same) != NULL);
        }
        if (i == 0) { /* EW_PAIRS_APART: the form before, each half behind its branches */
            kf_cuda_target t;
            kf_cuda_target_for_arch("sm_90a", &t);
            t.flags = KF_CUDA_RECIPE_EW_PAIRS_APART;
            kf_cuda_recipes *rec = NULL;
            char err[KF_MSG_MAX] = "";
            if (kf_cuda_recipes_create(p.plan, &t, &MEM, &rec, err) != KF_OK)
                fail_msg("recipes: %s", err);
            const char *src = NULL;
            for (uint32_t gi = 0; gi < rec->n && !src; gi++) {
                for (uint32_t st = 0; st < rec->recipes[gi].n_steps && !src; st++) {
                    if (rec->recipes[gi].steps[st].kind == KF_CUDA_STEP_KERNEL)
                        src = rec->recipes[gi].steps[st].kernel->kernel.source;
                }
            }
            assert_non_null(src);
            assert_null(strstr(src, "kf_pair"));
            const char *a = strstr(src, "kf_ldv<VV>(q");
            assert_non_null(a);
            assert_non_null(strstr(a + 1, "kf_ldv<VV>(q"));
            assert_non_null(strstr(src, "#define KF_UNROLL 4\n"));
            kf_cuda_recipes_destroy(rec);
        }
        if (i == 0 && have_nvrtc()) { /* no spills at its 4 blocks of 256 an SM */
            kf_nvrtc_options o = {.arch = "sm_90a", .kernel_name = k.name, .ptxas_verbose = true};
            kf_nvrtc_result res;
            char err[KF_MSG_MAX] = "";
            if (kf_nvrtc_compile(&MEM, k.source, k.source_len, &o, &res, err) != KF_OK)
                fail_msg("%s: %s\n%s", k.name, err, res.log ? res.log : "");
            if (!res.log || !strstr(res.log, "0 bytes stack frame, 0 bytes spill stores, 0 bytes "
                                             "spill loads"))
                fail_msg("%s spills:\n%s", k.name, res.log ? res.log : "(no log)");
            kf_nvrtc_result_release(&MEM, &res);
        }
        kf_cuda_kernel_release(&MEM, &k);
        plan_release(&p);
    }
}

/* Every row-wise op with a prologue and an epilogue, in every float dtype. */
static void test_every_rowwise_op_with_prologue_and_epilogue_every_dtype(void **state) {
    (void)state;
    static const char *const dts[] = {"f32", "f16", "bf16", "f64"};
    char text[4096];
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        const char *d = dts[i];
        size_t n = (size_t)snprintf(text, sizeof text,
                                    "kfg 1\nx = input(%s[6, 128])\ng = input(%s[128])\n"
                                    "beta = input(%s[128])\ns = input(%s[])\n",
                                    d, d, d, d);
        static const char *const rows[] = {"rms_norm(q%d, g)",
                                           "layer_norm(q%d, g, beta)",
                                           "softmax(q%d)",
                                           "reduce_sum(q%d, axis=1, keepdim=true)",
                                           "reduce_max(q%d, axis=1)",
                                           "reduce_mean(q%d, axis=1)",
                                           "reduce_min(q%d, axis=1, keepdim=true)",
                                           "log_softmax(q%d)"};
        for (int r = 0; r < 8; r++) {
            char op[64];
            snprintf(op, sizeof op, rows[r], r);
            n +=
                (size_t)snprintf(text + n, sizeof text - n,
                                 "p%d = mul(x, s)\nq%d = add(p%d, g)\nr%d = %s\nt%d = mul(r%d, s)\n"
                                 "y%d = relu(t%d)\noutput y%d\n",
                                 r, r, r, r, op, r, r, r, r, r);
        }
        unsigned seen[KF_CUDA_TEMPLATE_COUNT] = {0};
        assert_int_equal(compile_text(text, seen), 16);
        /* x is contiguous with 16-byte rows: layer_norm and softmax (two
         * dependent statistics steps) stage, except in f64, on both archs;
         * rms_norm and the reductions keep the register path */
        bool f64 = strcmp(d, "f64") == 0;
        assert_int_equal(seen[KF_CUDA_TEMPLATE_ROW_WARP_STAGED], f64 ? 0 : 6);
        assert_int_equal(seen[KF_CUDA_TEMPLATE_ROW_WARP], f64 ? 16 : 10);
    }
    /* i32 reductions accumulate in double */
    compile_text(
        "kfg 1\nx = input(i32[6, 128])\ny = reduce_sum(x, axis=1)\nz = reduce_max(x, axis=1)\n"
        "w = reduce_min(x, axis=1)\noutput y\noutput z\noutput w\n",
        NULL);
}

static void test_same_plan_gives_the_same_source_bytes(void **state) {
    (void)state;
    const char *text = "kfg 1\nx = input(bf16[64, 4096])\nb = input(bf16[4096])\n"
                       "w = input(bf16[4096])\na = add(x, b)\ne = gelu(a)\ny = rms_norm(e, w)\n"
                       "output y\n";
    planned p1, p2;
    plan_text(text, &p1);
    plan_text(text, &p2);
    for (size_t a = 0; a < 2; a++) {
        kf_cuda_kernel k1, k2;
        first_kernel(p1.plan, ARCHS[a], &k1);
        first_kernel(p2.plan, ARCHS[a], &k2);
        assert_string_equal(k1.name, k2.name);
        assert_int_equal(k1.source_len, k2.source_len);
        assert_memory_equal(k1.source, k2.source, k1.source_len);
        assert_int_equal(strlen(k1.source), k1.source_len);
        kf_cache_key c1, c2;
        char err[KF_MSG_MAX];
        assert_int_equal(kf_cuda_kernel_cache_key(&k1, "nvrtc 12.0", &c1, err), KF_OK);
        assert_int_equal(kf_cuda_kernel_cache_key(&k2, "nvrtc 12.0", &c2, err), KF_OK);
        assert_memory_equal(&c1, &c2, sizeof c1);
        kf_cuda_kernel_release(&MEM, &k1);
        kf_cuda_kernel_release(&MEM, &k2);
    }
    /* the arch changes the name, the source and the key */
    kf_cuda_kernel a, b;
    first_kernel(p1.plan, "sm_80", &a);
    first_kernel(p1.plan, "sm_90a", &b);
    assert_string_not_equal(a.name, b.name);
    kf_cache_key ka, kb;
    char err[KF_MSG_MAX];
    assert_int_equal(kf_cuda_kernel_cache_key(&a, "nvrtc 12.0", &ka, err), KF_OK);
    assert_int_equal(kf_cuda_kernel_cache_key(&b, "nvrtc 12.0", &kb, err), KF_OK);
    assert_memory_not_equal(&ka, &kb, sizeof ka);
    kf_cuda_kernel_release(&MEM, &a);
    kf_cuda_kernel_release(&MEM, &b);
    plan_release(&p1);
    plan_release(&p2);
}

/* Two groups that compute the same thing on different tensors (here: the
 * same chain on two inputs, and a third on another shape) generate the same
 * code under different header comments (which name the group and its
 * tensors): the cache key covers the code from k.body on, so the first two
 * share one key -- and so one compile, the cache's lock making the second
 * wait and hit -- and the third has its own. The digest the recipes print
 * follows the key. */
static void test_groups_with_the_same_code_share_a_cache_key(void **state) {
    (void)state;
    planned p;
    plan_text("kfg 1\na = input(f32[64, 300])\nb = input(f32[64, 300])\nc = input(f32[64, 301])\n"
              "ea = exp(a)\nya = relu(ea)\neb = exp(b)\nyb = relu(eb)\nec = exp(c)\nyc = relu(ec)\n"
              "output ya\noutput yb\noutput yc\n",
              &p);
    assert_int_equal(kf_plan_kernel_count(p.plan), 3);
    for (size_t a = 0; a < 2; a++) {
        kf_cuda_kernel k[3];
        kf_cache_key key[3];
        char err[KF_MSG_MAX];
        for (uint32_t g = 0; g < 3; g++) {
            assert_int_equal(kf_cuda_codegen_group(p.plan, g, ARCHS[a], &MEM, &k[g]), KF_OK);
            assert_true(k[g].body > 0 && k[g].body < k[g].source_len);
            assert_non_null(strstr(k[g].source, "kfuse generated kernel"));
            assert_null(strstr(k[g].source + k[g].body, "of plan group"));
            assert_int_equal(kf_cuda_kernel_cache_key(&k[g], "nvrtc 12.0", &key[g], err), KF_OK);
        }
        /* the sources differ (the comment), the keyed code does not */
        assert_int_not_equal(memcmp(k[0].source, k[1].source, k[0].body), 0);
        assert_int_equal(k[0].source_len - k[0].body, k[1].source_len - k[1].body);
        assert_memory_equal(k[0].source + k[0].body, k[1].source + k[1].body,
                            k[0].source_len - k[0].body);
        assert_memory_equal(&key[0], &key[1], sizeof key[0]);
        assert_memory_not_equal(&key[0], &key[2], sizeof key[0]);
        for (uint32_t g = 0; g < 3; g++)
            kf_cuda_kernel_release(&MEM, &k[g]);
    }
    /* the recipes: one digest for the first two */
    kf_cuda_target t;
    kf_cuda_target_for_arch("sm_90a", &t);
    kf_cuda_recipes *rec = NULL;
    char err[KF_MSG_MAX] = "";
    assert_int_equal(kf_cuda_recipes_create(p.plan, &t, &MEM, &rec, err), KF_OK);
    uint64_t d[3] = {0, 0, 0};
    for (uint32_t g = 0; g < 3; g++) {
        assert_int_equal(rec->recipes[g].n_steps, 1);
        assert_int_equal(rec->recipes[g].steps[0].kind, KF_CUDA_STEP_KERNEL);
        d[g] = rec->recipes[g].steps[0].kernel->digest;
    }
    assert_true(d[0] == d[1] && d[0] != d[2]);
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

/* Sibling elementwise groups (fuse_siblings) are one kernel with an output
 * param per write and the shared input once; it compiles for sm_80 and
 * sm_90a (bulk path with two outputs, plain loops past BULK_MAX outputs). */
static void test_sibling_groups_compile_to_one_multi_output_kernel(void **state) {
    (void)state;
    planned p;
    kf_cuda_kernel k;
    plan_text("kfg 1\nx = input(bf16[4096, 4096])\nb = input(bf16[4096])\n"
              "c2 = const(bf16[], 2)\na = mul(x, c2)\nxb = add(x, b)\nz = gelu(xb)\n"
              "output a\noutput z\n",
              &p);
    assert_int_equal(kf_plan_kernel_count(p.plan), 1);
    first_kernel(p.plan, "sm_80", &k);
    assert_int_equal(k.tmpl, KF_CUDA_TEMPLATE_ELEMENTWISE);
    assert_int_equal(k.n_params, 4); /* x, b, a, z */
    assert_int_equal(k.params[0].kind, KF_CUDA_PARAM_IN);
    assert_int_equal(k.params[1].kind, KF_CUDA_PARAM_IN);
    assert_int_equal(k.params[2].kind, KF_CUDA_PARAM_OUT);
    assert_int_equal(k.params[3].kind, KF_CUDA_PARAM_OUT);
    kf_cuda_kernel_release(&MEM, &k);
    first_kernel(p.plan, "sm_90a", &k);
    assert_int_equal(k.tmpl, KF_CUDA_TEMPLATE_ELEMENTWISE_BULK);
    assert_non_null(strstr(k.source, "kf_bulk_st(p2 + c * KF_BULK_E"));
    assert_non_null(strstr(k.source, "kf_bulk_st(p3 + c * KF_BULK_E"));
    kf_cuda_kernel_release(&MEM, &k);
    assert_int_equal(compile_all(p.plan, NULL), 2); /* one kernel, two arches */
    plan_release(&p);

    char text[4096];
    int n = snprintf(text, sizeof text, "kfg 1\nx = input(f16[1024, 1000])\n");
    for (int i = 0; i < 6; i++)
        n += snprintf(text + n, sizeof text - (size_t)n,
                      "s%d = const(f16[], %d)\ny%d = mul(x, s%d)\nt%d = tanh(y%d)\noutput t%d\n", i,
                      i + 2, i, i, i, i, i);
    plan_text(text, &p);
    assert_int_equal(kf_plan_kernel_count(p.plan), 1);
    first_kernel(p.plan, "sm_90a", &k);
    assert_int_equal(k.n_params, 7);
    assert_int_equal(k.tmpl, KF_CUDA_TEMPLATE_ELEMENTWISE); /* 6 outputs > the bulk path's 4 */
    kf_cuda_kernel_release(&MEM, &k);
    assert_int_equal(compile_all(p.plan, NULL), 2);
    plan_release(&p);
}

static void test_kernel_names_templates_vectors_and_params(void **state) {
    (void)state;
    planned p;
    kf_cuda_kernel k;
    /* elementwise bf16: 8 per 16-byte vector, bias by strides, one param each */
    plan_text("kfg 1\nx = input(bf16[65536, 4096])\ng = input(bf16[65536, 4096])\n"
              "e = gelu(x)\ny = mul(e, g)\noutput y\n",
              &p);
    first_kernel(p.plan, "sm_80", &k);
    assert_string_equal(k.name, "ew_gelu_mul_bf16_65536x4096_sm80");
    assert_int_equal(k.tmpl, KF_CUDA_TEMPLATE_ELEMENTWISE);
    assert_int_equal(k.vec, 8);
    assert_int_equal(k.n_params, 3);
    assert_int_equal(k.params[0].kind, KF_CUDA_PARAM_IN);
    assert_int_equal(k.params[2].kind, KF_CUDA_PARAM_OUT);
    assert_int_equal(k.params[2].bytes, (uint64_t)65536 * 4096 * 2);
    assert_int_equal(k.launch.block, 256);
    assert_int_equal(k.launch.shared_bytes, 0);
    /* two streamed operands: two steps' loads in flight (evict-first), 4
     * blocks per SM; no bulk copies below sm_90 */
    assert_non_null(strstr(k.source, "#define KF_UNROLL 2\n"));
    assert_non_null(strstr(k.source, "#define KF_MINB 4\n"));
    assert_non_null(strstr(k.source, "#define KF_BULK 0\n"));
    assert_non_null(strstr(k.source, "kf_raw_ld_stream(p0 + "));
    assert_non_null(strstr(k.source, "kf_raw_ld_stream(p1 + "));
    assert_int_equal(kf_cuda_kernel_grid(&k, 132), 132 * 4);
    assert_int_equal(kf_cuda_kernel_grid(&k, 0), 4);
    assert_non_null(strstr(k.source, "extern \"C\" __global__"));
    assert_null(strstr(k.source, "\n#include"));
    kf_cuda_kernel_release(&MEM, &k);
    /* sm_90a: the bulk path, one block of 1024 per SM; a stage holds 8192
     * elements of x and g, y in x's place (same size): 32 KiB, three of them */
    first_kernel(p.plan, "sm_90a", &k);
    assert_string_equal(k.name, "ew_gelu_mul_bf16_65536x4096_sm90a");
    assert_int_equal(k.tmpl, KF_CUDA_TEMPLATE_ELEMENTWISE_BULK);
    assert_int_equal(k.launch.block, 1024);
    assert_int_equal(k.launch.shared_bytes, 3 * 32768);
    assert_int_equal(kf_cuda_kernel_grid(&k, 132), 132);
    assert_non_null(strstr(k.source, "#define KF_BULK 1\n#define KF_BULK_E 8192LL\n"));
    assert_non_null(
        strstr(k.source, "#define KF_BULK_STAGE_BYTES 32768\n#define KF_BULK_TX 32768u\n"));
    assert_non_null(
        strstr(k.source, "kf_bulk_ld(sb + 0, p0 + c * KF_BULK_E, KF_BULK_E * 2, bar);"));
    assert_non_null(
        strstr(k.source, "kf_bulk_ld(sb + 16384, p1 + c * KF_BULK_E, KF_BULK_E * 2, bar);"));
    assert_non_null(strstr(k.source, "kf_bulk_st(p2 + c * KF_BULK_E, sb + 0, KF_BULK_E * 2);"));
    kf_cuda_kernel_release(&MEM, &k);
    plan_release(&p);

    /* f32 in, bf16 out: the output has a region of its own (4 + 2 bytes an
     * element, 8192 elements: 48 KiB a stage) */
    plan_text("kfg 1\nx = input(f32[4096, 4096])\nh = cast(x, bf16)\noutput h\n", &p);
    first_kernel(p.plan, "sm_90a", &k);
    assert_int_equal(k.tmpl, KF_CUDA_TEMPLATE_ELEMENTWISE_BULK);
    assert_int_equal(k.launch.shared_bytes, 3 * 49152);
    assert_non_null(strstr(k.source, "#define KF_BULK_E 8192LL\n"));
    assert_non_null(
        strstr(k.source, "#define KF_BULK_STAGE_BYTES 49152\n#define KF_BULK_TX 32768u\n"));
    assert_non_null(strstr(k.source, "kf_bulk_st(p1 + c * KF_BULK_E, sb + 32768, KF_BULK_E * 2);"));
    kf_cuda_kernel_release(&MEM, &k);
    plan_release(&p);
    /* one bf16 stream, in place: 16 KiB stages, five of them */
    plan_text("kfg 1\nx = input(bf16[65536, 4096])\ne = gelu(x)\noutput e\n", &p);
    first_kernel(p.plan, "sm_90a", &k);
    assert_int_equal(k.tmpl, KF_CUDA_TEMPLATE_ELEMENTWISE_BULK);
    assert_int_equal(k.launch.shared_bytes, 5 * 16384);
    assert_non_null(strstr(k.source, "#define KF_BULK_E 8192LL\n#define KF_BULK_STAGES 5\n"));
    kf_cuda_kernel_release(&MEM, &k);
    plan_release(&p);
    /* too small for 128 chunks: the grid-stride loops alone */
    plan_text("kfg 1\nx = input(bf16[128, 4096])\ne = gelu(x)\noutput e\n", &p);
    first_kernel(p.plan, "sm_90a", &k);
    assert_int_equal(k.tmpl, KF_CUDA_TEMPLATE_ELEMENTWISE);
    assert_non_null(strstr(k.source, "#define KF_BULK 0\n"));
    kf_cuda_kernel_release(&MEM, &k);
    plan_release(&p);

    /* per-column operands hoisted out of the grid-stride loop, bf16 mul/add
     * two per bf16x2 instruction, the exact result stored without converting */
    plan_text("kfg 1\nx = input(bf16[300, 264])\ns = input(bf16[264])\nb = input(bf16[264])\n"
              "xs = mul(x, s)\ny = add(xs, b)\noutput y\n",
              &p);
    first_kernel(p.plan, "sm_90a", &k);
    assert_non_null(strstr(k.source, "#define KF_HOIST_P 264LL"));
    assert_non_null(strstr(k.source, "kf_bf16x2<2, VV>"));
    assert_non_null(strstr(k.source, "kf_bf16x2<0, VV>"));
    assert_non_null(strstr(k.source, "kf_stv_bf16x<VV>"));
    /* every kernel carries the streamed-read policy the runtime sets */
    assert_non_null(strstr(k.source, "__constant__ int kf_stream_ef;"));
    /* x is the one streamed operand: four steps in flight */
    assert_non_null(strstr(k.source, "#define KF_UNROLL 4\n"));
    assert_null(strstr(k.source, "kf_raw_ld_stream(p1"));
    /* threads * 8 a multiple of 264: grids of 33 blocks (39 needed -> 33) */
    assert_int_equal(k.launch.grid_multiple, 33);
    assert_int_equal(kf_cuda_kernel_grid(&k, 132), 33);
    kf_cuda_kernel_release(&MEM, &k);
    plan_release(&p);
    /* f32: no packed form; an operand varying over the whole space: no hoist */
    plan_text(
        "kfg 1\nx = input(f32[300, 264])\ns = input(f32[300, 264])\ny = mul(x, s)\noutput y\n", &p);
    first_kernel(p.plan, "sm_80", &k);
    assert_non_null(strstr(k.source, "#define KF_HOIST_P 0LL"));
    assert_null(strstr(k.source, "kf_bf16x2<2, VV>("));
    assert_int_equal(k.launch.grid_multiple, 0);
    kf_cuda_kernel_release(&MEM, &k);
    plan_release(&p);

    /* f32 tail: 4 per vector */
    plan_text("kfg 1\nx = input(f32[1001])\ny = exp(x)\noutput y\n", &p);
    first_kernel(p.plan, "sm_80", &k);
    assert_int_equal(k.vec, 4);
    assert_non_null(strstr(k.source, "#define KF_NVEC 250LL"));
    assert_string_equal(k.name, "ew_exp_f32_1001_sm80");
    kf_cuda_kernel_release(&MEM, &k);
    plan_release(&p);

    /* row length picks the template (layer_norm: the staged kind) */
    static const struct {
        int64_t len;
        kf_cuda_template t;
    } rows[] = {{100, KF_CUDA_TEMPLATE_ROW_WARP}, /* 200-byte rows: no 16-byte pieces */
                {1024, KF_CUDA_TEMPLATE_ROW_WARP_STAGED},
                {4096, KF_CUDA_TEMPLATE_ROW_WARP_STAGED},
                {4097, KF_CUDA_TEMPLATE_ROW_BLOCK},
                {32768, KF_CUDA_TEMPLATE_ROW_BLOCK},
                {65536, KF_CUDA_TEMPLATE_ROW_BLOCK_MULTIPASS}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char text[256];
        snprintf(text, sizeof text,
                 "kfg 1\nx = input(bf16[8, %lld])\nw = input(bf16[%lld])\nb = input(bf16[%lld])\n"
                 "y = layer_norm(x, w, b)\noutput y\n",
                 (long long)rows[i].len, (long long)rows[i].len, (long long)rows[i].len);
        plan_text(text, &p);
        first_kernel(p.plan, "sm_90a", &k);
        assert_int_equal(k.tmpl, rows[i].t);
        char expect[96];
        snprintf(expect, sizeof expect, "row_layer_norm_bf16_8x%lld_sm90a", (long long)rows[i].len);
        assert_string_equal(k.name, expect);
        char line[256];
        recipe_how(p.plan, k.group, "sm_90a", line, sizeof line);
        char want[96];
        snprintf(want, sizeof want, "(sm_90a %s template)", kf_cuda_template_name(rows[i].t));
        assert_non_null(strstr(line, want));
        kf_cuda_kernel_release(&MEM, &k);
        plan_release(&p);
    }

    /* GEMM: an epilogue kernel reading the accumulator; a bare GEMM has none */
    plan_text("kfg 1\nx = input(f32[8, 64])\nw = input(f32[64, 256])\nb = input(f32[256])\n"
              "h = matmul(x, w)\na = add(h, b)\ny = gelu(a)\noutput y\n",
              &p);
    assert_int_equal(kf_cuda_codegen_epilogue(p.plan, 0, "sm_90a", &MEM, &k), KF_OK);
    assert_string_equal(k.name, "epi_gemm_bias_gelu_f32_8x256_sm90a");
    bool acc = false;
    for (uint32_t i = 0; i < k.n_params; i++)
        acc = acc || k.params[i].kind == KF_CUDA_PARAM_ACC;
    assert_true(acc);
    kf_cuda_kernel_release(&MEM, &k);
    assert_int_equal(kf_cuda_codegen_group(p.plan, 0, "sm_90a", &MEM, &k), KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(k.error, "gemm"));
    kf_cuda_kernel_release(&MEM, &k);
    char line[256];
    recipe_how(p.plan, 0, "sm_80", line, sizeof line);
    assert_non_null(
        strstr(line, "cuBLASLt, epilogue bias, then kernel epi_gemm_bias_gelu_f32_8x256_sm80"));
    plan_release(&p);
    plan_text("kfg 1\nx = input(f32[8, 64])\nw = input(f32[64, 256])\ny = matmul(x, w)\noutput y\n",
              &p);
    assert_int_equal(kf_cuda_codegen_epilogue(p.plan, 0, "sm_90a", &MEM, &k), KF_ERR_NOT_FOUND);
    kf_cuda_kernel_release(&MEM, &k);
    {
        /* the bare GEMM's recipe: one cuBLASLt call writing the output, no kernel */
        kf_cuda_target t;
        kf_cuda_target_for_arch("sm_90a", &t);
        kf_cuda_recipes *rec = NULL;
        char err[KF_MSG_MAX] = "";
        assert_int_equal(kf_cuda_recipes_create(p.plan, &t, &MEM, &rec, err), KF_OK);
        assert_int_equal(rec->recipes[0].n_steps, 1);
        assert_int_equal(rec->recipes[0].steps[0].kind, KF_CUDA_STEP_GEMM);
        assert_int_equal(rec->recipes[0].steps[0].gemm.d.buf.kind, KF_CUDA_BUF_TENSOR);
        assert_int_equal(kf_cuda_recipes_kernel_count(rec), 0);
        kf_cuda_recipes_destroy(rec);
    }
    /* bad arguments */
    assert_int_equal(kf_cuda_codegen_epilogue(p.plan, 7, "sm_90a", &MEM, &k),
                     KF_ERR_INVALID_ARGUMENT);
    kf_cuda_kernel_release(&MEM, &k);
    assert_int_equal(kf_cuda_codegen_epilogue(p.plan, 0, "gfx90a", &MEM, &k),
                     KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(k.error, "sm_90a"));
    kf_cuda_kernel_release(&MEM, &k);
    plan_release(&p);
}

/* row_warp_staged: which groups stage, the launch it asks for, and that the
 * kernels compile for both archs. */
static void staged_case(const char *text, const char *arch, kf_cuda_template want, uint32_t warps,
                        uint32_t shared, uint32_t blocks_per_sm) {
    planned p;
    plan_text(text, &p);
    kf_cuda_kernel k;
    first_kernel(p.plan, arch, &k);
    if (k.tmpl != want)
        fail_msg("%s on %s: template %s, expected %s", k.name, arch, kf_cuda_template_name(k.tmpl),
                 kf_cuda_template_name(want));
    char line[256];
    recipe_how(p.plan, k.group, arch, line, sizeof line);
    assert_non_null(strstr(line, kf_cuda_template_name(want)));
    assert_int_equal(k.launch.shared_bytes, shared);
    if (want == KF_CUDA_TEMPLATE_ROW_WARP_STAGED) {
        assert_int_equal(k.launch.block, warps * 32);
        assert_int_equal(k.launch.items_per_block, warps);
        assert_int_equal(k.launch.blocks_per_sm, blocks_per_sm);
        assert_non_null(strstr(k.source, "#define KF_STAGED 1\n"));
        assert_non_null(strstr(k.source, "void kf_stage_row("));
        assert_non_null(strstr(k.source, "template row_warp_staged"));
        /* the grid is capped by what fits an SM */
        uint64_t need = (k.launch.work_items + warps - 1) / warps;
        assert_int_equal(kf_cuda_kernel_grid(&k, 132),
                         need < 132 * blocks_per_sm ? need : 132 * blocks_per_sm);
    } else {
        assert_null(strstr(k.source, "void kf_stage_row("));
    }
    if (have_nvrtc()) {
        kf_nvrtc_result res;
        char err[KF_MSG_MAX] = "";
        kf_status st = kf_cuda_kernel_compile(&MEM, &k, &res, err);
        if (st != KF_OK)
            fail_msg("%s: %s\n%s", k.name, err, res.log ? res.log : "");
        assert_memory_equal(res.cubin,
                            "\x7f"
                            "ELF",
                            4);
        kf_nvrtc_result_release(&MEM, &res);
    }
    kf_cuda_kernel_release(&MEM, &k);
    plan_release(&p);
}

static void test_row_warp_staged_is_chosen_where_it_fits(void **state) {
    (void)state;
    const char *rms = "kfg 1\nx = input(bf16[65536, 4096])\nw = input(bf16[4096])\n"
                      "y = rms_norm(x, w)\noutput y\n";
    const char *ln = "kfg 1\nx = input(bf16[65536, 4096])\nw = input(bf16[4096])\n"
                     "b = input(bf16[4096])\ny = layer_norm(x, w, b)\noutput y\n";
    const char *res = "kfg 1\nx = input(bf16[65536, 4096])\nr = input(bf16[65536, 4096])\n"
                      "w = input(bf16[4096])\nb = input(bf16[4096])\nh = add(x, r)\n"
                      "y = layer_norm(h, w, b)\noutput y\n";
    const char *sm = "kfg 1\nx = input(bf16[1024, 4096])\ny = softmax(x)\noutput y\n";
    /* one bf16 row of 4096 per stage: 8 warps x 2 stages x 8 KiB, 1 block per
     * SM on sm_90a (227 KiB a block); sm_80's blocks take 99 KiB (8.6/8.9):
     * 4 warps x 2 stages, 2 blocks per SM (A100's 164 KiB) */
    staged_case(ln, "sm_90a", KF_CUDA_TEMPLATE_ROW_WARP_STAGED, 8, 8 * 2 * 8192, 1);
    staged_case(sm, "sm_90a", KF_CUDA_TEMPLATE_ROW_WARP_STAGED, 8, 8 * 2 * 8192, 1);
    staged_case(ln, "sm_80", KF_CUDA_TEMPLATE_ROW_WARP_STAGED, 4, 4 * 2 * 8192, 2);
    staged_case(sm, "sm_80", KF_CUDA_TEMPLATE_ROW_WARP_STAGED, 4, 4 * 2 * 8192, 2);
    /* a residual add in the prologue: two rows per stage (16 KiB), 2 stages,
     * 4 warps (8 would be 256 KiB), 1 block per SM; 128 KiB is over sm_80's
     * 99 KiB: the register path */
    staged_case(res, "sm_90a", KF_CUDA_TEMPLATE_ROW_WARP_STAGED, 4, 4 * 2 * 16384, 1);
    staged_case(res, "sm_80", KF_CUDA_TEMPLATE_ROW_WARP, 0, 0, 0);
    /* not staged: one reduction step (rms_norm), f64 rows, rows past a warp,
     * cp.async-less archs, a row read across its last axis (a transposed
     * view: a gather) */
    staged_case(rms, "sm_90a", KF_CUDA_TEMPLATE_ROW_WARP, 0, 0, 0);
    staged_case(rms, "sm_80", KF_CUDA_TEMPLATE_ROW_WARP, 0, 0, 0);
    staged_case("kfg 1\nx = input(f64[64, 1024])\nw = input(f64[1024])\nb = input(f64[1024])\n"
                "y = layer_norm(x, w, b)\noutput y\n",
                "sm_90a", KF_CUDA_TEMPLATE_ROW_WARP, 0, 0, 0);
    staged_case("kfg 1\nx = input(bf16[64, 8192])\ny = softmax(x)\noutput y\n", "sm_90a",
                KF_CUDA_TEMPLATE_ROW_BLOCK, 0, 0, 0);
    staged_case(ln, "sm_75", KF_CUDA_TEMPLATE_ROW_WARP, 0, 0, 0);
    staged_case("kfg 1\nx = input(f32[256, 64])\nt = permute(x, [1, 0])\ne = exp(t)\n"
                "y = softmax(e)\noutput y\n",
                "sm_90a", KF_CUDA_TEMPLATE_ROW_WARP, 0, 0, 0);
}

/* f64 norms are taken on the row scaled below 2^500 (KF_ROW_SCALE), as the
 * reference defines them; no other row needs it. */
static void test_only_f64_norm_rows_are_scaled(void **state) {
    (void)state;
    static const struct {
        const char *text;
        const char *want;
    } cases[] = {
        {"kfg 1\nx = input(f64[8, 64])\nw = input(f64[64])\ny = rms_norm(x, w)\noutput y\n",
         "#define KF_ROW_SCALE 1\n"},
        {"kfg 1\nx = input(f64[8, 5000])\nw = input(f64[5000])\nb = input(f64[5000])\n"
         "y = layer_norm(x, w, b)\noutput y\n",
         "#define KF_ROW_SCALE 1\n"},
        {"kfg 1\nx = input(f32[8, 64])\nw = input(f32[64])\ny = rms_norm(x, w)\noutput y\n",
         "#define KF_ROW_SCALE 0\n"},
        {"kfg 1\nx = input(f64[8, 64])\ny = softmax(x)\noutput y\n", "#define KF_ROW_SCALE 0\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        planned p;
        plan_text(cases[i].text, &p);
        kf_cuda_kernel k;
        first_kernel(p.plan, "sm_90a", &k);
        if (!strstr(k.source, cases[i].want))
            fail_msg("%s: no '%s'", k.name, cases[i].want);
        kf_cuda_kernel_release(&MEM, &k);
        plan_release(&p);
        assert_int_equal(compile_text(cases[i].text, NULL), 2); /* sm_80 and sm_90a */
    }
}

/* A rounded f16/bf16 result that is stored keeps its unrounded value for the
 * store (one conversion, raw_of); an exact one (a packed op) does not. */
static bool stores_raw(const char *src, const char *out) {
    char pat[32];
    snprintf(pat, sizeof pat, "%s[k] = (float)v", out);
    const char *p = strstr(src, pat);
    if (!p)
        return false;
    p += strlen(pat);
    while (*p >= '0' && *p <= '9')
        p++;
    return *p == 'u';
}

static void test_rounded_results_store_their_unrounded_value(void **state) {
    (void)state;
    /* raw: f16/bf16 op results stored from their unrounded value; f32 results
     * have nothing to round, and a packed bf16 op is exact */
    static const struct {
        const char *text;
        bool raw;
    } cases[] = {
        {"kfg 1\nx = input(bf16[64, 4096])\nw = input(bf16[4096])\ny = rms_norm(x, w)\noutput y\n",
         true},
        {"kfg 1\nx = input(f16[64, 4096])\nw = input(f16[4096])\nb = input(f16[4096])\n"
         "y = layer_norm(x, w, b)\noutput y\n",
         true},
        {"kfg 1\nx = input(bf16[64, 256])\ny = exp(x)\noutput y\n", true},
        {"kfg 1\nx = input(f32[64, 256])\ny = exp(x)\noutput y\n", false},
        {"kfg 1\nx = input(bf16[64, 256])\ns = input(bf16[256])\ny = mul(x, s)\noutput y\n", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        planned p;
        plan_text(cases[i].text, &p);
        kf_cuda_kernel k;
        first_kernel(p.plan, "sm_90a", &k);
        if (stores_raw(k.source, "o0") != cases[i].raw)
            fail_msg("%s: stored from its %s value", k.name,
                     cases[i].raw ? "rounded" : "unrounded");
        if (cases[i].raw) /* stored with a rounding conversion, not bit-packed */
            assert_null(strstr(k.source, "kf_stv_bf16x<VV>(p"));
        kf_cuda_kernel_release(&MEM, &k);
        plan_release(&p);
    }
}

/* The bf16 table of the reference's results serves gelu_tanh as it serves
 * gelu: entry kf_gelu_idx(u) of the emitted table is the reference's
 * gelu_tanh of the bf16 value u, rounded to bf16, for values across the
 * table (both signs, its ends); a kernel holding both ops tabulates the
 * first and computes the other by its formula. */
static unsigned short ref_bf16_bits(kf_op op, unsigned short u) {
    uint32_t w = (uint32_t)u << 16;
    float x;
    memcpy(&x, &w, sizeof x);
    float y = (float)kf_ir_round(KF_DTYPE_BF16, kf_ir_scalar(op, KF_DTYPE_F64, x, 0, 0));
    memcpy(&w, &y, sizeof w);
    return (unsigned short)(w >> 16);
}

static void test_bf16_gelu_tanh_reads_a_table_of_the_reference(void **state) {
    (void)state;
    planned p;
    plan_text("kfg 1\nx = input(bf16[300, 264])\nb = input(bf16[264])\nh = add(x, b)\n"
              "y = gelu_tanh(h)\noutput y\n",
              &p);
    kf_cuda_kernel k;
    first_kernel(p.plan, "sm_90a", &k);
    assert_non_null(strstr(k.source, "/* gelu_tanh of bf16 values"));
    assert_non_null(strstr(k.source, "kf_gelu_bf16_v<VV>"));
    /* the table's entries, in order */
    const char *t = strstr(k.source, "kf_gelu_tab_src[");
    assert_non_null(t);
    t = strchr(t, '{');
    assert_non_null(t);
    static unsigned short tab[1u << 16];
    unsigned n = 0;
    while (*t && *t != '}') {
        t++;
        char *end;
        unsigned long v = strtoul(t, &end, 16);
        if (end == t)
            break;
        tab[n++] = (unsigned short)v;
        t = end;
        while (*t == ' ' || *t == '\n')
            t++;
    }
    assert_true(n > 5000 && n < 6000);
    /* kf_gelu_idx as the kernel computes it; in range: the table's entry */
    unsigned lo = 0, checked = 0;
    /* lo: the index of the smallest magnitude; find it from the layout
     * (entry 0 is the positive end of the smallest magnitude) */
    for (unsigned u = 1; u < 0x7f80u; u++) {
        unsigned rot = ((u << 1) & 0xfffeu) | (u >> 15);
        if (ref_bf16_bits(KF_OP_GELU_TANH, (unsigned short)u) == tab[0] &&
            ref_bf16_bits(KF_OP_GELU_TANH, (unsigned short)(u | 0x8000u)) == tab[1]) {
            lo = rot;
            break;
        }
    }
    assert_true(lo != 0);
    for (unsigned u = 0; u < 0x10000u; u++) {
        unsigned i = (((u << 1) & 0xfffeu) | (u >> 15)) - lo;
        if (i >= n)
            continue;
        if (tab[i] != ref_bf16_bits(KF_OP_GELU_TANH, (unsigned short)u))
            fail_msg("bf16 0x%04x: table 0x%04x, reference 0x%04x", u, tab[i],
                     ref_bf16_bits(KF_OP_GELU_TANH, (unsigned short)u));
        checked++;
    }
    assert_int_equal(checked, n);
    kf_cuda_kernel_release(&MEM, &k);
    plan_release(&p);
    /* both: gelu (first) from the table, gelu_tanh by its formula */
    plan_text("kfg 1\nx = input(bf16[300, 264])\na = gelu(x)\ny = gelu_tanh(a)\noutput y\n", &p);
    first_kernel(p.plan, "sm_90a", &k);
    assert_non_null(strstr(k.source, "/* gelu of bf16 values"));
    assert_null(strstr(k.source, "/* gelu_tanh of bf16 values"));
    assert_non_null(strstr(k.source, "kf_gelu_tanh(v"));
    kf_cuda_kernel_release(&MEM, &k);
    plan_release(&p);
}

static void test_broken_kernel_status_carries_the_log_and_the_name(void **state) {
    (void)state;
    if (!have_nvrtc())
        skip();
    planned p;
    plan_text("kfg 1\nx = input(f32[64, 64])\ny = gelu(x)\noutput y\n", &p);
    kf_cuda_kernel k;
    first_kernel(p.plan, "sm_90a", &k);
    /* Simulate a codegen bug: an expression calling a function that is not there. */
    char *at = strstr(k.source, "kf_gelu(v");
    assert_non_null(at);
    memcpy(at, "kf_gelx", 7);
    kf_nvrtc_result res;
    char err[KF_MSG_MAX] = "";
    assert_int_equal(kf_cuda_kernel_compile(&MEM, &k, &res, err), KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, k.name));
    assert_non_null(strstr(err, "sm_90a"));
    assert_non_null(res.log);
    assert_non_null(strstr(res.log, "kf_gelx"));
    kf_nvrtc_result_release(&MEM, &res);
    kf_cuda_kernel_release(&MEM, &k);
    plan_release(&p);
}

/* kf_cuda_kernels_cubins on several threads: every job gets its own outcome
 * (a broken kernel fails alone, named, and its status is the call's); with a
 * cache, a kernel twice in the batch compiles once (the other waits on the
 * cache's lock and hits) and a second batch compiles nothing; with none, each
 * job gets its own CUBIN. */
static void test_a_batch_compiles_concurrently_each_job_its_own_outcome(void **state) {
    (void)state;
    if (!have_nvrtc())
        skip();
    const char *texts[] = {
        "kfg 1\nx = input(f32[64, 64])\ny = gelu(x)\noutput y\n",
        "kfg 1\nx = input(f32[64, 64])\ny = sqrt(x)\noutput y\n",
        "kfg 1\nx = input(f16[33, 7])\ny = relu(x)\noutput y\n",
    };
    planned p[3];
    kf_cuda_kernel k[3];
    for (int i = 0; i < 3; i++) {
        plan_text(texts[i], &p[i]);
        first_kernel(p[i].plan, "sm_80", &k[i]);
    }
    char *at = strstr(k[0].source, "kf_gelu(v");
    assert_non_null(at);
    memcpy(at, "kf_gelx", 7); /* a codegen bug in job 1 */
    char dir[] = "/tmp/kf_batch_XXXXXX";
    assert_non_null(mkdtemp(dir));
    kf_cache_options co = {.dir = dir};
    kf_cache_msg msg;
    kf_cache *cache = NULL;
    assert_int_equal(kf_cache_open(&MEM, &co, &cache, &msg), KF_OK);
    for (int pass = 0; pass < 3; pass++) {
        kf_cache *c = pass < 2 ? cache : NULL; /* the last pass: no cache */
        kf_cuda_cubin jobs[5] = {
            {.kernel = &k[1]}, {.kernel = &k[0]}, {.kernel = &k[2]}, {.kernel = &k[1]},
            {.kernel = &k[2]},
        };
        char err[KF_MSG_MAX] = "";
        assert_int_equal(kf_cuda_kernels_cubins(c, &MEM, jobs, 5, 3, err),
                         KF_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(err, k[0].name));
        assert_int_equal(jobs[1].status, KF_ERR_INVALID_ARGUMENT);
        assert_null(jobs[1].data);
        int computed = 0;
        for (int j = 0; j < 5; j++) {
            if (j == 1)
                continue;
            if (jobs[j].status != KF_OK)
                fail_msg("job %d: %s", j, jobs[j].err);
            assert_true(jobs[j].size > 4);
            assert_memory_equal(jobs[j].data, "\x7f" "ELF", 4);
            assert_int_equal(jobs[j].from_cache, c != NULL);
            computed += !jobs[j].hit;
        }
        /* with a cache: two distinct kernels, once each; then none; without: the
         * two again (a key that repeats in a batch compiles once, the others
         * copy its CUBIN) */
        assert_int_equal(computed, pass == 0 ? 2 : pass == 1 ? 0 : 2);
        if (!c)
            assert_memory_equal(jobs[3].data, jobs[0].data, jobs[0].size);
        for (int j = 0; j < 5; j++)
            kf_cuda_cubin_release(c, &MEM, &jobs[j]);
    }
    kf_cache_close(cache);
    for (int i = 0; i < 3; i++) {
        kf_cuda_kernel_release(&MEM, &k[i]);
        plan_release(&p[i]);
    }
    assert_int_equal(kf_test_remove_dir(dir), 0);
}

/* kf_cuda_kernels_cubins_cancel (the tiered compile's background batch): a
 * batch cancelled before it starts compiles nothing, every job failing with
 * KF_ERR_BUSY and saying so; one never cancelled is kf_cuda_kernels_cubins. */
static void test_a_cancelled_batch_compiles_nothing(void **state) {
    (void)state;
    if (!have_nvrtc())
        skip();
    planned p;
    kf_cuda_kernel k;
    plan_text("kfg 1\nx = input(f32[64, 64])\ny = gelu(x)\noutput y\n", &p);
    first_kernel(p.plan, "sm_80", &k);
    for (int cancelled = 1; cancelled >= 0; cancelled--) {
        atomic_bool cancel;
        atomic_init(&cancel, cancelled != 0);
        kf_cuda_cubin jobs[3] = {{.kernel = &k}, {.kernel = &k}, {.kernel = &k}};
        char err[KF_MSG_MAX] = "";
        kf_status st = kf_cuda_kernels_cubins_cancel(NULL, &MEM, jobs, 3, 2, &cancel, err);
        for (int j = 0; j < 3; j++) {
            if (cancelled) {
                assert_int_equal(jobs[j].status, KF_ERR_BUSY);
                assert_null(jobs[j].data);
                assert_non_null(strstr(jobs[j].err, "cancelled"));
            } else if (jobs[j].status != KF_OK) {
                fail_msg("job %d: %s", j, jobs[j].err);
            } else {
                assert_memory_equal(jobs[j].data, "\x7f" "ELF", 4);
            }
            kf_cuda_cubin_release(NULL, &MEM, &jobs[j]);
        }
        assert_int_equal(st, cancelled ? KF_ERR_BUSY : KF_OK);
    }
    kf_cuda_kernel_release(&MEM, &k);
    plan_release(&p);
}

/* `kfuse aot` over every example, twice; then every kernel of every example
 * is found with a fail-on-miss cache (what the execution side does). */
/* ------------------------------------------------------------------------ */
/* Recipes                                                                    */
/* ------------------------------------------------------------------------ */

static char *recipes_json(const kf_plan *plan, const kf_cuda_target *t, kf_cuda_recipes **keep) {
    kf_cuda_recipes *rec = NULL;
    char err[KF_MSG_MAX] = "";
    if (kf_cuda_recipes_create(plan, t, &MEM, &rec, err) != KF_OK)
        fail_msg("recipes for %s: %s", t->arch, err);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(kf_cuda_recipes_print(rec, true, f), KF_OK);
    fclose(f);
    if (keep)
        *keep = rec;
    else
        kf_cuda_recipes_destroy(rec);
    return buf;
}

/* Every buffer a step names exists: a tensor of the graph that no VIEW group
 * computes (views are read through their base), or a scratch of the recipe;
 * offsets are non-negative and inside the buffer. */
static void check_buf(const kf_plan *plan, const kf_cuda_recipe *rc, kf_cuda_buf b, bool may_none,
                      const char *what) {
    if (b.kind == KF_CUDA_BUF_NONE) {
        if (!may_none)
            fail_msg("%s: group %u names no buffer", what, rc->group);
        return;
    }
    assert_true(b.offset >= 0);
    if (b.kind == KF_CUDA_BUF_SCRATCH) {
        if (b.id >= rc->n_scratch)
            fail_msg("%s: group %u names scratch s%u of %u", what, rc->group, b.id, rc->n_scratch);
        assert_true((uint64_t)b.offset < rc->scratch[b.id].bytes);
        return;
    }
    if (b.kind == KF_CUDA_BUF_FLAGS) { /* the program's clamp flag word: one, 4 bytes */
        assert_true(b.id == 0 && b.offset == 0);
        return;
    }
    assert_int_equal(b.kind, KF_CUDA_BUF_TENSOR);
    assert_true(b.id < plan->graph->n_nodes);
    uint32_t g = plan->group_of[b.id];
    if (g != KF_NONE && plan->groups[g].kind == KF_GROUP_VIEW)
        fail_msg("%s: group %u names the view %%%u instead of its base", what, rc->group, b.id);
    const kf_tensor *t = plan->graph->nodes[b.id];
    assert_true((uint64_t)b.offset < (uint64_t)kf_ir_numel(t) * kf_dtype_size(t->dtype));
}

static void check_recipes(const kf_plan *plan, const kf_cuda_recipes *rec, const char *what) {
    assert_int_equal(rec->n, plan->n_groups);
    for (uint32_t gi = 0; gi < rec->n; gi++) {
        const kf_cuda_recipe *rc = &rec->recipes[gi];
        assert_int_equal(rc->group, gi);
        assert_true(rc->n_variants >= 1 && rc->n_variants <= KF_CUDA_MAX_VARIANTS);
        assert_true(rc->choice == KF_CUDA_CHOICE_ONLY || rc->n_variants > 1);
        uint32_t steps = 0;
        for (uint32_t v = 0; v < rc->n_variants; v++) {
            assert_int_equal(rc->variants[v].first_step, steps);
            steps += rc->variants[v].n_steps;
            assert_true(rc->variants[v].how[0] != 0);
        }
        assert_int_equal(steps, rc->n_steps);
        bool view = plan->groups[gi].kind == KF_GROUP_VIEW;
        /* a GEMM sibling set's later member: its set's first member's recipe runs it */
        bool sibling = rc->n_members == 0;
        if (sibling) {
            const kf_group *sg = &plan->groups[gi];
            assert_true(kf_group_in_gemm_sib_set(sg) && sg->gemm.sib_index > 0);
            assert_true(rec->recipes[sg->gemm.sib_first].n_members > sg->gemm.sib_index);
        }
        assert_true(view || sibling ? rc->n_steps == 0 : rc->n_steps > 0);
        for (uint32_t s = 0; s < rc->n_steps; s++) {
            const kf_cuda_step *st = &rc->steps[s];
            if (st->kind == KF_CUDA_STEP_KERNEL) {
                const kf_cuda_kstep *k = st->kernel;
                assert_string_equal(k->kernel.arch, rec->target.arch);
                assert_true(k->grid[0] >= 1 && k->block[0] >= 32 && k->cluster[0] == 1);
                /* the decode kernel's grid is its kv items x splits, a block each */
                assert_true(k->role == KF_CUDA_ROLE_ATTENTION_DECODE ||
                            k->grid[0] <= (uint32_t)rec->target.sm_count * 64);
                /* TMAP args first, one per param, by-value scalars (the decode
                 * kernels' split count) last */
                uint32_t n_i64 = 0;
                for (uint32_t a = 0; a < k->n_args; a++) {
                    if (k->args[a].kind == KF_CUDA_ARG_I64) {
                        assert_true(a >= k->n_tmaps + k->kernel.n_params);
                        n_i64++;
                        continue;
                    }
                    check_buf(plan, rc, k->args[a].buf, false, what);
                }
                assert_int_equal(k->n_args, k->kernel.n_params + k->n_tmaps + n_i64);
            } else {
                const kf_cuda_gstep *g = &st->gemm;
                assert_true(g->m >= 1 && g->n >= 1 && g->k >= 1 && g->batch >= 1);
                check_buf(plan, rc, g->a.buf, false, what);
                check_buf(plan, rc, g->b.buf, false, what);
                check_buf(plan, rc, g->d.buf, false, what);
                check_buf(plan, rc, g->c.buf, true, what);
                check_buf(plan, rc, g->bias, true, what);
                assert_true((g->c.buf.kind != KF_CUDA_BUF_NONE) == (g->beta == 1.0));
            }
        }
    }
}

/* Recipes are a function of (plan, target): the same graph planned twice in
 * two contexts prints the same bytes; the SM count changes grids only, never
 * a kernel's source; every buffer a step names exists. */
static void test_recipes_are_a_pure_function_of_plan_and_target(void **state) {
    (void)state;
    const char *src = getenv("KF_SOURCE_DIR");
    const char *dirs[] = {"examples", "examples/patterns"};
    int files = 0;
    for (int d = 0; d < 2; d++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", src ? src : ".", dirs[d]);
        DIR *dp = opendir(path);
        assert_non_null(dp);
        for (struct dirent *de; (de = readdir(dp));) {
            size_t l = strlen(de->d_name);
            if (l < 5 || strcmp(de->d_name + l - 4, ".kfg") != 0)
                continue;
            char file[1400];
            snprintf(file, sizeof file, "%s/%s", path, de->d_name);
            FILE *f = fopen(file, "rb");
            assert_non_null(f);
            static char text[1 << 16];
            size_t len = fread(text, 1, sizeof text - 1, f);
            fclose(f);
            text[len] = 0;
            planned p1, p2;
            plan_text(text, &p1);
            plan_text(text, &p2);
            for (size_t a = 0; a < 2; a++) {
                for (unsigned flags = 0; flags <= KF_CUDA_RECIPE_NO_LT_EPILOGUE;
                     flags += KF_CUDA_RECIPE_NO_LT_EPILOGUE) {
                    kf_cuda_target t;
                    kf_cuda_target_for_arch(ARCHS[a], &t);
                    t.flags = flags;
                    kf_cuda_recipes *r1 = NULL, *r3 = NULL;
                    char *j1 = recipes_json(p1.plan, &t, &r1);
                    char *j2 = recipes_json(p2.plan, &t, NULL);
                    if (strcmp(j1, j2) != 0)
                        fail_msg("%s (%s): two plans of one graph give different recipes", file,
                                 ARCHS[a]);
                    check_recipes(p1.plan, r1, file);
                    kf_cuda_target t3 = t;
                    t3.sm_count = 7;
                    free(recipes_json(p1.plan, &t3, &r3));
                    assert_int_equal(kf_cuda_recipes_kernel_count(r1),
                                     kf_cuda_recipes_kernel_count(r3));
                    for (uint32_t gi = 0; gi < r1->n; gi++)
                        for (uint32_t s = 0; s < r1->recipes[gi].n_steps; s++)
                            if (r1->recipes[gi].steps[s].kind == KF_CUDA_STEP_KERNEL)
                                assert_true(r1->recipes[gi].steps[s].kernel->digest ==
                                            r3->recipes[gi].steps[s].kernel->digest);
                    kf_cuda_recipes_destroy(r1);
                    kf_cuda_recipes_destroy(r3);
                    free(j1);
                    free(j2);
                }
            }
            plan_release(&p1);
            plan_release(&p2);
            files++;
        }
        closedir(dp);
    }
    assert_true(files >= 10);
}

/* A GEMM whose epilogue cuBLASLt applies in part: its bias in the library
 * call into an ACC scratch, then one kernel for the erf gelu reading it; with
 * cuBLASLt epilogues off, a bare call and one kernel for bias and gelu. A
 * bad target is refused. */
static void test_gemm_recipes_split_the_epilogue_at_what_cublaslt_applies(void **state) {
    (void)state;
    planned p;
    plan_text("kfg 1\nx = input(f32[8, 64])\nw = input(f32[64, 256])\nb = input(f32[256])\n"
              "h = matmul(x, w)\na = add(h, b)\ny = gelu(a)\noutput y\n",
              &p);
    kf_cuda_target t;
    assert_int_equal(kf_cuda_target_for_device("a100", &t), KF_OK);
    assert_string_equal(t.arch, "sm_80");
    assert_int_equal(t.sm_count, 108);
    for (int off = 0; off < 2; off++) {
        t.flags = off ? KF_CUDA_RECIPE_NO_LT_EPILOGUE : 0;
        kf_cuda_recipes *rec = NULL;
        char err[KF_MSG_MAX] = "";
        assert_int_equal(kf_cuda_recipes_create(p.plan, &t, &MEM, &rec, err), KF_OK);
        const kf_cuda_recipe *rc = &rec->recipes[0];
        assert_int_equal(rc->n_steps, 2);
        assert_int_equal(rc->n_scratch, 1);
        assert_int_equal(rc->scratch[0].role, KF_CUDA_PARAM_ACC);
        assert_int_equal(rc->scratch[0].bytes, 8 * 256 * 4);
        const kf_cuda_gstep *g = &rc->steps[0].gemm;
        assert_int_equal(rc->steps[0].kind, KF_CUDA_STEP_GEMM);
        assert_int_equal(g->epilogue, off ? KF_CUDA_LT_EPI_NONE : KF_CUDA_LT_EPI_BIAS);
        assert_int_equal(g->bias.kind, off ? KF_CUDA_BUF_NONE : KF_CUDA_BUF_TENSOR);
        assert_int_equal(g->d.buf.kind, KF_CUDA_BUF_SCRATCH);
        assert_true(g->m == 8 && g->n == 256 && g->k == 64 && g->batch == 1);
        const kf_cuda_kstep *k = rc->steps[1].kernel;
        assert_int_equal(rc->steps[1].kind, KF_CUDA_STEP_KERNEL);
        assert_int_equal(k->role, KF_CUDA_ROLE_EPILOGUE);
        /* the kernel reads the scratch; it reads the bias only when cuBLASLt did not add it */
        bool reads_acc = false, reads_bias = false;
        for (uint32_t a = 0; a < k->n_args; a++) {
            reads_acc |= k->args[a].buf.kind == KF_CUDA_BUF_SCRATCH && !k->args[a].written;
            reads_bias |= k->args[a].buf.kind == KF_CUDA_BUF_TENSOR && k->args[a].buf.id == 2;
        }
        assert_true(reads_acc);
        assert_true(reads_bias == (off != 0));
        assert_non_null(strstr(rc->variants[0].how,
                               off ? "cuBLASLt epilogues are off" : "kfuse's gelu is erf"));
        kf_cuda_recipes_destroy(rec);
    }
    kf_cuda_recipes *rec = NULL;
    char err[KF_MSG_MAX] = "";
    t.sm_count = 0;
    assert_int_equal(kf_cuda_recipes_create(p.plan, &t, &MEM, &rec, err), KF_ERR_INVALID_ARGUMENT);
    assert_null(rec);
    assert_non_null(strstr(err, "SM count"));
    kf_cuda_target_for_arch("sm_90a", &t);
    snprintf(t.arch, sizeof t.arch, "gfx90a");
    assert_int_not_equal(kf_cuda_recipes_create(p.plan, &t, &MEM, &rec, err), KF_OK);
    assert_null(rec);
    assert_int_equal(kf_cuda_target_for_device("v100", &t), KF_ERR_NOT_FOUND);
    plan_release(&p);
}

/* Garbles the middle of the first regular entry file under `dir` (any depth). */
static bool garble_one_entry(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool done = false;
    struct dirent *e;
    while (!done && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(path, &sb) != 0)
            continue;
        if (S_ISDIR(sb.st_mode)) {
            done = garble_one_entry(path);
        } else if (S_ISREG(sb.st_mode) && sb.st_size > 64 && !strstr(e->d_name, ".lock")) {
            FILE *f = fopen(path, "r+b");
            if (f) {
                fseek(f, sb.st_size / 2, SEEK_SET);
                fputs("kfuse-test-garbage", f);
                fclose(f);
                done = true;
            }
        }
    }
    closedir(d);
    return done;
}

/* kf_aot and the cache calls of the public API (what the Python package uses
 * instead of the CLI): fill, a second fill compiles nothing, list, verify
 * finds and removes a garbled entry, a refill compiles it alone, clear. */
static void test_kf_aot_and_the_cache_calls_of_the_public_api(void **state) {
    (void)state;
    if (!have_nvrtc())
        skip();
    char dir[] = "/tmp/kf_aotapi_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cdir[64];
    snprintf(cdir, sizeof cdir, "%s/cache", dir);
    kf_options o;
    kf_options_init(&o);
    o.cache_dir = cdir;
    kf_ctx *ctx = NULL;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    /* nothing there yet: 0 entries, and looking creates nothing */
    kf_cache_summary cs;
    assert_int_equal(kf_cache_list_entries(ctx, NULL, &cs), KF_OK);
    assert_int_equal(cs.entries, 0);
    assert_int_not_equal(access(cdir, F_OK), 0);

    static const char text[] = "kfg 1\nx = input(bf16[64, 256])\nw = input(bf16[256, 128])\n"
                               "b = input(bf16[128])\nm = matmul(x, w)\ny = add(m, b)\n"
                               "g = gelu(y)\nz = exp(x)\nt = tanh(x)\noutput g\noutput z\n"
                               "output t\n";
    kf_graph *g = NULL;
    assert_int_equal(kf_graph_parse(ctx, text, strlen(text), &g), KF_OK);
    const char *archs[] = {"sm_80", "sm_90a"};
    kf_aot_summary a;
    assert_int_equal(kf_aot(ctx, g, archs, 2, &a), KF_OK);
    assert_true(a.kernels >= 2);
    assert_int_equal(a.compiled + a.cached, a.kernels);
    assert_int_equal(a.failed, 0);
    assert_true(a.groups >= 4); /* the GEMM and the siblings' kernel, per arch */
    size_t kernels = a.kernels;
    assert_int_equal(kf_aot(ctx, g, archs, 2, &a), KF_OK);
    assert_int_equal(a.kernels, kernels);
    assert_int_equal(a.cached, kernels);
    assert_int_equal(a.compiled, 0);

    FILE *out = tmpfile();
    assert_non_null(out);
    assert_int_equal(kf_cache_list_entries(ctx, out, &cs), KF_OK);
    size_t entries = cs.entries;
    assert_true(entries >= 1 && entries <= kernels);
    assert_true(cs.bytes > 0);
    assert_string_equal(cs.error, "");
    char buf[4096] = "";
    rewind(out);
    size_t nr = fread(buf, 1, sizeof buf - 1, out);
    buf[nr] = 0;
    fclose(out);
    assert_non_null(strstr(buf, "modified (UTC)"));
    char want[96];
    snprintf(want, sizeof want, "%zu entries, ", entries);
    assert_non_null(strstr(buf, want));

    assert_true(garble_one_entry(cdir));
    out = tmpfile();
    assert_int_equal(kf_cache_verify_entries(ctx, out, &cs), KF_OK);
    assert_int_equal(cs.corrupt, 1);
    rewind(out);
    nr = fread(buf, 1, sizeof buf - 1, out);
    buf[nr] = 0;
    fclose(out);
    assert_non_null(strstr(buf, "corrupt  "));
    assert_int_equal(kf_cache_list_entries(ctx, NULL, &cs), KF_OK);
    assert_int_equal(cs.entries, entries - 1);
    assert_int_equal(kf_aot(ctx, g, archs, 2, &a), KF_OK);
    assert_true(a.compiled >= 1);
    assert_int_equal(kf_cache_verify_entries(ctx, NULL, &cs), KF_OK);
    assert_int_equal(cs.corrupt, 0);
    assert_int_equal(cs.entries, entries);

    assert_int_equal(kf_cache_clear_entries(ctx, &cs), KF_OK);
    assert_int_equal(cs.removed, entries);
    assert_int_equal(kf_cache_list_entries(ctx, NULL, &cs), KF_OK);
    assert_int_equal(cs.entries, 0);

    /* refused: no arch, an unknown arch, a context that cannot store */
    assert_int_equal(kf_aot(ctx, g, archs, 0, &a), KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kf_graph_error(g), "no arch"));
    const char *bad[] = {"sm80"};
    assert_int_equal(kf_aot(ctx, g, bad, 1, &a), KF_ERR_INVALID_ARGUMENT);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    o.flags = KF_FLAG_NO_CACHE;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    assert_int_equal(kf_graph_parse(ctx, text, strlen(text), &g), KF_OK);
    assert_int_equal(kf_aot(ctx, g, archs, 2, &a), KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kf_graph_error(g), "KF_FLAG_NO_CACHE"));
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    assert_int_equal(kf_cache_list_entries(NULL, NULL, &cs), KF_ERR_INVALID_ARGUMENT);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* The files in dir named KERNEL.ARCH.cu whose text names KERNEL, counted. */
static size_t count_dumped(const char *dir, const char *arch) {
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    char tail[32];
    snprintf(tail, sizeof tail, ".%s.cu", arch);
    size_t n = 0, lt = strlen(tail);
    for (struct dirent *e; (e = readdir(d));) {
        size_t ln = strlen(e->d_name);
        if (ln <= lt || strcmp(e->d_name + ln - lt, tail) != 0)
            continue;
        char path[512], name[256], line[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(name, sizeof name, "%.*s", (int)(ln - lt), e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        bool named = false; /* the kernel's name appears in its source */
        while (!named && fgets(line, sizeof line, f))
            named = strstr(line, name) != NULL;
        fclose(f);
        n += named;
    }
    closedir(d);
    return n;
}

/* kf_options.dump_dir under kf_aot: every kernel's source is written as
 * KERNEL.ARCH.cu, compiled now or served by the cache, as a run writes them
 * (a machine without a GPU reads its kernels that way); a dump directory that
 * cannot be made fails the call with the path in the message. */
static void test_kf_aot_writes_every_kernel_source_to_the_dump_dir(void **state) {
    (void)state;
    if (!have_nvrtc())
        skip();
    char dir[] = "/tmp/kf_aotdump_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cdir[64], ddir[64], cmd[128];
    snprintf(cdir, sizeof cdir, "%s/cache", dir);
    snprintf(ddir, sizeof ddir, "%s/dump", dir);
    kf_options o;
    kf_options_init(&o);
    o.cache_dir = cdir;
    o.dump_dir = ddir;
    kf_ctx *ctx = NULL;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    static const char text[] = "kfg 1\nx = input(bf16[64, 256])\nw = input(bf16[256, 128])\n"
                               "m = matmul(x, w)\ny = gelu(m)\nz = exp(x)\noutput y\n"
                               "output z\n";
    kf_graph *g = NULL;
    assert_int_equal(kf_graph_parse(ctx, text, strlen(text), &g), KF_OK);
    const char *archs[] = {"sm_80", "sm_90a"};
    kf_aot_summary a;
    assert_int_equal(kf_aot(ctx, g, archs, 2, &a), KF_OK);
    assert_true(a.kernels >= 2);
    assert_int_equal(a.compiled, a.kernels);
    size_t n80 = count_dumped(ddir, "sm_80"), n90 = count_dumped(ddir, "sm_90a");
    assert_true(n80 >= 1 && n90 >= 1);
    assert_int_equal(n80 + n90, a.kernels);
    /* served by the cache: the sources are written all the same */
    snprintf(cmd, sizeof cmd, "rm -rf %s", ddir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(kf_aot(ctx, g, archs, 2, &a), KF_OK);
    assert_int_equal(a.cached, a.kernels);
    assert_int_equal(count_dumped(ddir, "sm_80"), n80);
    assert_int_equal(count_dumped(ddir, "sm_90a"), n90);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    /* a dump directory below a regular file cannot be made */
    char fdir[96];
    snprintf(fdir, sizeof fdir, "%s/file", dir);
    FILE *f = fopen(fdir, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(ddir, sizeof ddir, "%s/file/dump", dir);
    o.dump_dir = ddir;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    assert_int_equal(kf_graph_parse(ctx, text, strlen(text), &g), KF_OK);
    assert_int_not_equal(kf_aot(ctx, g, archs, 2, &a), KF_OK);
    assert_non_null(strstr(kf_graph_error(g), "/file/dump"));
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_aot_fills_a_cache_that_serves_every_example_kernel(void **state) {
    (void)state;
    if (!have_nvrtc())
        skip();
    const char *src = getenv("KF_SOURCE_DIR");
    char dir[] = "/tmp/kf_aot_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cdir[64];
    snprintf(cdir, sizeof cdir, "%s/cache", dir);
    char files[2][64][512];
    int nf = 0;
    static const char *const names[] = {"block",
                                        "llama_block",
                                        "mlp",
                                        "patterns/attention_alibi",
                                        "patterns/attention_causal",
                                        "patterns/attention_sliding_window",
                                        "patterns/attention_softcap",
                                        "patterns/backward_dgelu_bias_grad",
                                        "patterns/elementwise_broadcast_cast",
                                        "patterns/gemm_bias_activation",
                                        "patterns/gemm_bias_residual_scale",
                                        "patterns/gemm_residual_layer_norm",
                                        "patterns/gemm_residual_rms_norm_long_row",
                                        "patterns/norm_prologue",
                                        "patterns/not_fused",
                                        "patterns/rowwise_prologue_epilogue",
                                        "patterns/swiglu"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(files[0][nf], sizeof files[0][nf], "%s/examples/%s.kfg", src ? src : ".",
                 names[i]);
        if (access(files[0][nf], R_OK) == 0)
            nf++;
    }
    assert_true(nf >= 3);
    char *argv[80];
    int argc = 0;
    argv[argc++] = "aot";
    argv[argc++] = "--arch";
    char archs[] = "sm_80,sm_90a";
    argv[argc++] = archs;
    for (int i = 0; i < nf; i++)
        argv[argc++] = files[0][i];
    argv[argc++] = "-o";
    argv[argc++] = cdir;
    argv[argc] = NULL;
    /* Quiet the coverage table: it goes to stdout. */
    fflush(stdout);
    FILE *saved = stdout;
    char outpath[96];
    snprintf(outpath, sizeof outpath, "%s/out1.txt", dir);
    stdout = fopen(outpath, "w");
    assert_non_null(stdout);
    int rc1 = kf_cmd_aot(argc, argv);
    fclose(stdout);
    snprintf(outpath, sizeof outpath, "%s/out2.txt", dir);
    stdout = fopen(outpath, "w");
    int rc2 = kf_cmd_aot(argc, argv);
    fclose(stdout);
    stdout = saved;
    assert_int_equal(rc1, 0);
    assert_int_equal(rc2, 0);
    /* The second run's coverage: nothing compiled. */
    FILE *f = fopen(outpath, "r");
    assert_non_null(f);
    char line[1024];
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, " cached ")) {
            rows++;
            if (!strstr(line, " 0 compiled"))
                fail_msg("second aot run compiled: %s", line);
        }
    }
    fclose(f);
    assert_int_equal(rows, 2 * nf);

    /* Every kernel of every example is a hit with fail-on-miss. */
    kf_cache *cache = NULL;
    kf_cache_options co = {.dir = cdir, .flags = KF_CACHE_FAIL_ON_MISS | KF_CACHE_READ_ONLY};
    kf_cache_msg msg;
    assert_int_equal(kf_cache_open(&MEM, &co, &cache, &msg), KF_OK);
    unsigned hits = 0;
    for (int i = 0; i < nf; i++) {
        FILE *kf = fopen(files[0][i], "rb");
        assert_non_null(kf);
        static char text[1 << 16];
        size_t len = fread(text, 1, sizeof text - 1, kf);
        fclose(kf);
        text[len] = 0;
        planned p;
        plan_text(text, &p);
        /* The kernels an executor on a GPU of each arch compiles: its
         * recipes' KERNEL steps (what kf_cuda_exec_prepare hands the cache),
         * for any SM count. */
        for (size_t a = 0; a < 2; a++) {
            kf_cuda_target t;
            kf_cuda_target_for_arch(ARCHS[a], &t);
            t.sm_count = 114 + (int)a; /* not the arch's default: grids do not change sources */
            kf_cuda_recipes *rec = NULL;
            char err[KF_MSG_MAX] = "";
            if (kf_cuda_recipes_create(p.plan, &t, &MEM, &rec, err) != KF_OK)
                fail_msg("%s: %s", files[0][i], err);
            for (uint32_t gi = 0; gi < rec->n; gi++) {
                const kf_cuda_recipe *rc = &rec->recipes[gi];
                for (uint32_t s = 0; s < rc->n_steps; s++) {
                    if (rc->steps[s].kind != KF_CUDA_STEP_KERNEL)
                        continue;
                    void *cubin = NULL;
                    size_t size = 0;
                    bool hit = false;
                    kf_status st = kf_cuda_kernel_cubin(cache, &rc->steps[s].kernel->kernel, &cubin,
                                                        &size, &hit, &msg, err);
                    if (st != KF_OK)
                        fail_msg("%s", err);
                    assert_true(hit);
                    assert_memory_equal(cubin,
                                        "\x7f"
                                        "ELF",
                                        4);
                    kf_cache_blob_free(cache, cubin, size);
                    hits++;
                }
            }
            kf_cuda_recipes_destroy(rec);
        }
        plan_release(&p);
    }
    assert_true(hits > 0);
    kf_cache_close(cache);
    /* A kernel the cache never saw is a miss naming the kernel. */
    planned p;
    plan_text("kfg 1\nx = input(f32[3, 5])\ny = sqrt(x)\noutput y\n", &p);
    kf_cuda_kernel k;
    first_kernel(p.plan, "sm_80", &k);
    co.flags = KF_CACHE_FAIL_ON_MISS;
    assert_int_equal(kf_cache_open(&MEM, &co, &cache, &msg), KF_OK);
    void *cubin = NULL;
    size_t size = 0;
    bool hit = true;
    char err[KF_MSG_MAX] = "";
    assert_int_equal(kf_cuda_kernel_cubin(cache, &k, &cubin, &size, &hit, &msg, err),
                     KF_ERR_NOT_FOUND);
    assert_non_null(strstr(err, k.name));
    kf_cache_close(cache);
    kf_cuda_kernel_release(&MEM, &k);
    plan_release(&p);
    /* clean up */
    assert_int_equal(kf_test_remove_dir(dir), 0);
}

/* The *.kfc names in dir, sorted and joined by spaces, into out. */
static void kfc_names(const char *dir, char *out, size_t cap) {
    char names[64][264];
    int n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL && n < 64;)
        if (strstr(e->d_name, ".kfc"))
            snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    out[0] = 0;
    for (int i = 0; i < n; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s ", names[i]);
}

/* `kfuse aot` is kf_aot with hooks that print: for the same graph, options and
 * arch, the command's coverage line counts what kf_aot's summary counts, and
 * both leave the same entries. The command's options reach kf_aot as
 * kf_options (here --gemm generated and --no-cublaslt, which change the
 * kernels). */
static void test_the_aot_command_stores_what_kf_aot_stores(void **state) {
    (void)state;
    if (!have_nvrtc())
        skip();
    char dir[] = "/tmp/kf_aotcli_XXXXXX";
    assert_non_null(mkdtemp(dir));
    static const char text[] = "kfg 1\nx = input(bf16[64, 256])\nw = input(bf16[256, 128])\n"
                               "b = input(bf16[128])\nm = matmul(x, w)\ny = add(m, b)\n"
                               "g = gelu(y)\nz = exp(x)\noutput g\noutput z\n";
    char file[96], cli_dir[96], api_dir[96], out[96];
    snprintf(file, sizeof file, "%s/g.kfg", dir);
    snprintf(cli_dir, sizeof cli_dir, "%s/cli", dir);
    snprintf(api_dir, sizeof api_dir, "%s/api", dir);
    snprintf(out, sizeof out, "%s/out.txt", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    char *argv[] = {"aot", "--arch", "sm_80", "--gemm", "generated", "--no-cublaslt",
                    file,  "-o",     cli_dir, NULL};
    fflush(stdout);
    FILE *saved = stdout;
    stdout = fopen(out, "w");
    assert_non_null(stdout);
    int rc = kf_cmd_aot(9, argv);
    fclose(stdout);
    stdout = saved;
    assert_int_equal(rc, 0);
    unsigned long kernels = 0, cached = 99, compiled = 0;
    f = fopen(out, "r");
    assert_non_null(f);
    char line[512];
    while (fgets(line, sizeof line, f)) {
        const char *k = strstr(line, " sm_80 ");
        if (k)
            assert_int_equal(sscanf(k, " sm_80 %lu kernels %lu cached %lu compiled", &kernels,
                                    &cached, &compiled),
                             3);
    }
    fclose(f);

    kf_options o;
    kf_options_init(&o);
    o.cache_dir = api_dir;
    o.gemm = KF_GEMM_GENERATED;
    o.flags = KF_FLAG_NO_CUBLASLT;
    kf_ctx *ctx = NULL;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    kf_graph *g = NULL;
    assert_int_equal(kf_graph_parse(ctx, text, strlen(text), &g), KF_OK);
    const char *archs[] = {"sm_80"};
    kf_aot_summary a;
    assert_int_equal(kf_aot(ctx, g, archs, 1, &a), KF_OK);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    assert_true(a.kernels >= 2); /* the generated GEMM and the exp */
    assert_int_equal(kernels, a.kernels);
    assert_int_equal(cached, 0);
    assert_int_equal(compiled, a.compiled);
    char cli_names[64 * 264], api_names[64 * 264];
    kfc_names(cli_dir, cli_names, sizeof cli_names);
    kfc_names(api_dir, api_names, sizeof api_names);
    assert_true(cli_names[0] != 0);
    assert_string_equal(cli_names, api_names);
    assert_int_equal(kf_test_remove_dir(dir), 0);
}

static void test_aot_rejects_bad_usage(void **state) {
    (void)state;
    char *a1[] = {"aot", "x.kfg", NULL};
    assert_int_equal(kf_cmd_aot(2, a1), 2); /* no -o */
    char *a2[] = {"aot", "--arch", "sm_35x", "x.kfg", "-o", "/tmp/none", NULL};
    assert_int_equal(kf_cmd_aot(6, a2), 2);
}

int main(void) {
    kf_mem_resolve(&MEM, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_template_compiles_for_sm80_and_sm90a),
        cmocka_unit_test(test_fused_attention_compiles_every_variant_without_spills),
        cmocka_unit_test(test_unfused_attention_says_why),
        cmocka_unit_test(test_argmax_over_another_axis_compiles_to_the_column_kernel),
        cmocka_unit_test(test_argmax_over_the_last_axis_compiles),
        cmocka_unit_test(test_every_elementwise_op_in_one_kernel_per_dtype),
        cmocka_unit_test(test_sibling_groups_compile_to_one_multi_output_kernel),
        cmocka_unit_test(test_slices_concats_and_gathers_compile_into_their_consumers),
        cmocka_unit_test(test_remapped_loads_read_vectors_where_their_elements_run_consecutively),
        cmocka_unit_test(test_rotate_half_halves_read_as_one_load),
        cmocka_unit_test(test_every_rowwise_op_with_prologue_and_epilogue_every_dtype),
        cmocka_unit_test(test_same_plan_gives_the_same_source_bytes),
        cmocka_unit_test(test_groups_with_the_same_code_share_a_cache_key),
        cmocka_unit_test(test_kernel_names_templates_vectors_and_params),
        cmocka_unit_test(test_row_warp_staged_is_chosen_where_it_fits),
        cmocka_unit_test(test_rounded_results_store_their_unrounded_value),
        cmocka_unit_test(test_only_f64_norm_rows_are_scaled),
        cmocka_unit_test(test_bf16_gelu_tanh_reads_a_table_of_the_reference),
        cmocka_unit_test(test_broken_kernel_status_carries_the_log_and_the_name),
        cmocka_unit_test(test_a_batch_compiles_concurrently_each_job_its_own_outcome),
        cmocka_unit_test(test_a_cancelled_batch_compiles_nothing),
        cmocka_unit_test(test_recipes_are_a_pure_function_of_plan_and_target),
        cmocka_unit_test(test_gemm_recipes_split_the_epilogue_at_what_cublaslt_applies),
        cmocka_unit_test(test_aot_fills_a_cache_that_serves_every_example_kernel),
        cmocka_unit_test(test_kf_aot_and_the_cache_calls_of_the_public_api),
        cmocka_unit_test(test_kf_aot_writes_every_kernel_source_to_the_dump_dir),
        cmocka_unit_test(test_the_aot_command_stores_what_kf_aot_stores),
        cmocka_unit_test(test_aot_rejects_bad_usage),
    };
    return kf_test_run(tests);
}
