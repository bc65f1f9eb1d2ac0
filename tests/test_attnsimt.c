/*
 * test_attnsimt.c -- the fused SIMT attention kernel (codegen/cuda/
 * cg_attention_simt.c, templates/attention_simt.cuh) and its recipes, with
 * no GPU: the variants (mask class x dtype x head dim, D != Dv) are made
 * through the default recipes for an H100 (sm_90a) and for sm_80, compiled by
 * NVRTC and their SASS read with cuobjdump: FFMA (the SIMT arithmetic), no
 * HMMA / HGMMA (no tensor cores: f32 stays f32), LDGSTS (cp.async) where the
 * operands' rows allow it, and nothing in local memory (no spills). The
 * recipes: the SIMT kernel where the tensor-core kernels refuse (the report
 * says so and why), the tensor-core kernels where they take the group, the
 * unfused fallback only where neither takes it. Numerics run on the GPU
 * (test_cuda_attnsimt).
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

/* The recipe of the plan's only ATTENTION group. */
static const kf_cuda_recipe *attn_recipe(const kf_plan *plan, const kf_cuda_recipes *rec) {
    for (uint32_t gi = 0; gi < plan->n_groups; gi++)
        if (plan->groups[gi].kind == KF_GROUP_ATTENTION)
            return &rec->recipes[gi];
    fail_msg("no ATTENTION group");
    return NULL;
}

/* The score bodies over [B, H, 100, 130] ('$' the dtype): q, k, v are
 * defined before them, s1 is the score. */
static const struct {
    const char *body, *mask;
} masks[] = {
    {"sc = const($[], 0.125)\ns1 = mul(qk, sc)\n", "mask none"},
    {"sc = const($[], 0.125)\ns0 = mul(qk, sc)\nrow = iota(i32[100, 130], axis=0)\n"
     "col = iota(i32[100, 130], axis=1)\nkeep = ge(row, col)\nninf = const($[], -inf)\n"
     "s1 = where(keep, s0, ninf)\n",
     "mask causal"},
    {"sc = const($[], 0.125)\ns0 = mul(qk, sc)\nrow = iota(i32[100, 130], axis=0)\n"
     "col = iota(i32[100, 130], axis=1)\nd = sub(row, col)\nw = const(i32[], 15)\n"
     "zero = const(i32[], 0)\nrest = sub(w, d)\nm = min(d, rest)\nkeep = ge(m, zero)\n"
     "ninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask sliding_window"},
    {"sc = const($[], 0.125)\ns0 = mul(qk, sc)\ncap = const($[], 30)\nt0 = div(s0, cap)\n"
     "t1 = tanh(t0)\nt2 = mul(t1, cap)\nm = input(bool[100, 130])\nninf = const($[], -inf)\n"
     "s1 = where(m, t2, ninf)\n",
     "mask general"},
    {"sc = const($[], 0.125)\ns0 = mul(qk, sc)\nbm = input(bool[2, 3])\n"
     "r0 = repeat(bm, axis=0, times=64)\nr1 = repeat(r0, axis=1, times=64)\n"
     "m0 = slice(r1, axis=0, stop=100)\nmk = slice(m0, axis=1, stop=130)\n"
     "ninf = const($[], -inf)\ns1 = where(mk, s0, ninf)\n",
     "mask block_sparse"},
};

static const char *const DTS[] = {"f32", "bf16", "f16"};
/* head dims (D, Dv): none 64 or 128 in bf16/f16 (the tensor-core kernels') */
static const int HDS[][2] = {{16, 16}, {32, 32}, {80, 80}, {40, 24}, {256, 256}};

static void variant_text(size_t mi, const char *dn, int d, int dv, char *text, size_t size) {
    size_t n =
        (size_t)snprintf(text, size,
                         "kfg 1\nq = input(%s[2, 3, 100, %d])\nk = input(%s[2, 3, 130, %d])\n"
                         "v = input(%s[2, 3, 130, %d])\nqk = matmul(q, k, transpose_b=true)\n",
                         dn, d, dn, d, dn, dv);
    for (const char *c = masks[mi].body; *c && n + 8 < size; c++) {
        if (*c == '$')
            n += (size_t)snprintf(text + n, size - n, "%s", dn);
        else
            text[n++] = *c;
    }
    snprintf(text + n, size - n, "p = softmax(s1)\no = matmul(p, v)\noutput o\n");
}

/* For each arch, each dtype (sm_80: f32 and bf16) and each head dim, with
 * the mask classes rotating so that every (mask class, dtype) pair and every
 * (dtype, head dim) pair is compiled on each arch: one SIMT step (role, template, the
 * report's line, the block of KF_BR / 16 warps), then NVRTC and the SASS:
 * FFMA, no tensor-core instruction, LDGSTS (these rows are whole 4-byte
 * chunks), no local memory. */
static void test_every_simt_attention_variant_compiles_without_spills(void **state) {
    (void)state;
    static const char *const devs[][2] = {{"h100", NULL}, {NULL, "sm_80"}};
    static const char *const want[] = {"FFMA", "LDGSTS", NULL};
    static const char *const why[] = {"the SIMT arithmetic", "cp.async copies"};
    unsigned compiled = 0;
    for (size_t a = 0; a < 2; a++) {
        /* sm_80: f32 and bf16 (the f16 source differs from bf16's only in its
         * types and conversions, compiled for sm_90a) */
        for (size_t t = 0; t < (a == 0 ? 3u : 2u); t++) {
            for (size_t h = 0; h < sizeof HDS / sizeof HDS[0]; h++) {
                size_t mi = (t + h) % (sizeof masks / sizeof masks[0]);
                char text[4096];
                variant_text(mi, DTS[t], HDS[h][0], HDS[h][1], text, sizeof text);
                planned p;
                plan_text(text, &p);
                kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, devs[a][0], devs[a][1], 0);
                const kf_cuda_recipe *rc = attn_recipe(p.plan, rec);
                const char *how = rc->variants[0].how;
                if (!strstr(how, "fused attention (simt FFMA kernel, f32 arithmetic)") ||
                    !strstr(how, masks[mi].mask) || !strstr(how, "not the tensor-core kernels: "))
                    fail_msg("%s D %d/%d %s: expected the SIMT kernel, %s: %s", DTS[t], HDS[h][0],
                             HDS[h][1], devs[a][0] ? "sm_90a" : "sm_80", masks[mi].mask, how);
                assert_string_equal(rc->variants[0].label, "fused");
                assert_int_equal(rc->n_steps, 1);
                assert_int_equal(rc->steps[0].kind, KF_CUDA_STEP_KERNEL);
                const kf_cuda_kstep *ks = rc->steps[0].kernel;
                assert_int_equal(ks->role, KF_CUDA_ROLE_ATTENTION_SIMT);
                assert_int_equal(ks->kernel.tmpl, KF_CUDA_TEMPLATE_ATTENTION_SIMT);
                assert_true(ks->block[0] == 32 || ks->block[0] == 64 || ks->block[0] == 128);
                assert_true(ks->shared_bytes <= (a == 0 ? 227u : 99u) * 1024u);
                kf_sass_check_ops(&MEM, &ks->kernel, want, why, "HMMA");
                fprintf(stderr, "  %s [%s, D %d/%d, %s]: %s, block %u, %u bytes ok\n",
                        masks[mi].mask, DTS[t], HDS[h][0], HDS[h][1], ks->kernel.arch,
                        ks->kernel.name, ks->block[0], ks->shared_bytes);
                compiled++;
                kf_cuda_recipes_destroy(rec);
                plan_release(&p);
            }
        }
    }
    assert_int_equal(compiled, (3 + 2) * 5);
}

/* Operands whose rows are not whole 4-byte chunks (an odd bf16 head dim) or
 * whose head dim is not contiguous (K given as [D, S]) are copied by plain
 * loads: the kernel compiles without cp.async and without spills. */
static void test_simt_attention_reads_any_strides(void **state) {
    (void)state;
    static const char *const texts[] = {
        "kfg 1\nq = input(bf16[2, 2, 70, 3])\nk = input(bf16[2, 2, 90, 3])\n"
        "v = input(bf16[2, 2, 90, 5])\nqk = matmul(q, k, transpose_b=true)\np = softmax(qk)\n"
        "o = matmul(p, v)\noutput o\n",
        "kfg 1\nq = input(f32[2, 2, 100, 24])\nk = input(f32[2, 2, 24, 110])\n"
        "v = input(f32[2, 2, 110, 24])\nqk = matmul(q, k)\np = softmax(qk)\n"
        "o = matmul(p, v)\noutput o\n",
    };
    static const char *const want[] = {"FFMA", NULL};
    static const char *const why[] = {"the SIMT arithmetic"};
    for (size_t i = 0; i < 2; i++) {
        planned p;
        plan_text(texts[i], &p);
        kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
        const kf_cuda_recipe *rc = attn_recipe(p.plan, rec);
        if (!strstr(rc->variants[0].how, "fused attention (simt FFMA kernel"))
            fail_msg("case %zu: %s", i, rc->variants[0].how);
        const kf_cuda_kstep *ks = rc->steps[0].kernel;
        /* K's copies (the operand with the odd head dim, or the transposed
         * one) are plain */
        assert_non_null(strstr(ks->kernel.source, "#define KF_CPK 0\n"));
        kf_sass_check_ops(&MEM, &ks->kernel, want, why, "HMMA");
        kf_cuda_recipes_destroy(rec);
        plan_release(&p);
    }
}

/* Where the tensor-core kernels take the group they stay its kernel (bf16
 * head dim 64: the sm_90a kernel on an H100, the mma.sync one on sm_80); the
 * SIMT kernel takes f32 and the other head dims; the unfused steps remain
 * only for what neither takes (a head dim past 256, an arch before sm_80;
 * f64 attention is no ATTENTION group), and their line names both reasons. */
static void test_simt_attention_is_chosen_only_where_the_tensor_core_kernels_refuse(void **state) {
    (void)state;
    static const struct {
        const char *dt;
        int d;
        const char *dev, *arch, *has, *has2;
    } cases[] = {
        {"bf16", 64, "h100", NULL, "fused attention (sm_90a wgmma/TMA kernel)", NULL},
        {"bf16", 64, NULL, "sm_80", "fused attention (sm_80 mma.sync kernel)", NULL},
        {"f32", 64, "h100", NULL, "fused attention (simt FFMA kernel",
         "not the tensor-core kernels: dtype f32"},
        {"f16", 96, NULL, "sm_80", "fused attention (simt FFMA kernel",
         "not the tensor-core kernels: head dim 96 / 96"},
        {"bf16", 320, "h100", NULL, "unfused fallback",
         "nor the SIMT kernel: head dim 320 / 320 (the SIMT kernel takes 1 to 256)"},
        {"f32", 272, NULL, "sm_80", "unfused fallback",
         "dtype f32 (the tensor-core kernels take bf16 and f16); nor the SIMT kernel: head dim "
         "272"},
        {"f32", 32, NULL, "sm_75", "unfused fallback",
         "nor the SIMT kernel: sm_75 has no cp.async"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text,
                 "kfg 1\nq = input(%s[2, 2, 100, %d])\nk = input(%s[2, 2, 100, %d])\n"
                 "v = input(%s[2, 2, 100, %d])\nqk = matmul(q, k, transpose_b=true)\n"
                 "p = softmax(qk)\no = matmul(p, v)\noutput o\n",
                 cases[i].dt, cases[i].d, cases[i].dt, cases[i].d, cases[i].dt, cases[i].d);
        planned p;
        plan_text(text, &p);
        kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, cases[i].dev, cases[i].arch, 0);
        const char *how = attn_recipe(p.plan, rec)->variants[0].how;
        if (!strstr(how, cases[i].has) || (cases[i].has2 && !strstr(how, cases[i].has2)))
            fail_msg("case %zu (%s D %d): expected '%s' and '%s': %s", i, cases[i].dt, cases[i].d,
                     cases[i].has, cases[i].has2 ? cases[i].has2 : "", how);
        kf_cuda_recipes_destroy(rec);
        plan_release(&p);
    }
    /* KF_FLAG_UNFUSED_ATTENTION wins over the SIMT kernel too */
    planned p;
    plan_text("kfg 1\nq = input(f32[2, 64, 16])\nk = input(f32[2, 64, 16])\n"
              "v = input(f32[2, 64, 16])\nqk = matmul(q, k, transpose_b=true)\np = softmax(qk)\n"
              "o = matmul(p, v)\noutput o\n",
              &p);
    kf_cuda_recipes *rec =
        kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_UNFUSED_ATTENTION);
    const char *how = attn_recipe(p.plan, rec)->variants[0].how;
    if (!strstr(how, "unfused fallback") || !strstr(how, "KF_FLAG_UNFUSED_ATTENTION"))
        fail_msg("unfused wins: %s", how);
    kf_cuda_recipes_destroy(rec);
    plan_release(&p);
}

/* Every attention group of every example and pattern is fused on sm_90a
 * (an H100's recipes): no unfused fallback is left in the examples. */
static void test_every_example_attention_group_is_fused_on_sm90a(void **state) {
    (void)state;
    static const char *const files[] = {
        "examples/block.kfg",
        "examples/gpt2_block.kfg",
        "examples/llama_block.kfg",
        "examples/patterns/attention_alibi.kfg",
        "examples/patterns/attention_block_sparse.kfg",
        "examples/patterns/attention_block_sparse_bf16.kfg",
        "examples/patterns/attention_causal.kfg",
        "examples/patterns/attention_gqa_bf16.kfg",
        "examples/patterns/attention_lse_bf16.kfg",
        "examples/patterns/attention_qkv_split_heads_bf16.kfg",
        "examples/patterns/attention_qkv_views_bf16.kfg",
        "examples/patterns/attention_sliding_window.kfg",
        "examples/patterns/attention_softcap.kfg",
    };
    const char *src = getenv("KF_SOURCE_DIR");
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", src ? src : ".", files[i]);
        FILE *f = fopen(path, "rb");
        if (!f)
            fail_msg("cannot open %s", path);
        static char text[1 << 16];
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = 0;
        planned p;
        plan_text(text, &p);
        kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
        unsigned n_attn = 0;
        for (uint32_t gi = 0; gi < p.plan->n_groups; gi++) {
            if (p.plan->groups[gi].kind != KF_GROUP_ATTENTION)
                continue;
            n_attn++;
            const char *how = rec->recipes[gi].variants[0].how;
            if (strncmp(how, "fused attention (", 17) != 0)
                fail_msg("%s, group %u: %s", files[i], gi, how);
        }
        if (n_attn == 0)
            fail_msg("%s: no attention group", files[i]);
        kf_cuda_recipes_destroy(rec);
        plan_release(&p);
    }
}

int main(void) {
    kf_mem_resolve(&MEM, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simt_attention_is_chosen_only_where_the_tensor_core_kernels_refuse),
        cmocka_unit_test(test_every_example_attention_group_is_fused_on_sm90a),
        cmocka_unit_test(test_simt_attention_reads_any_strides),
        cmocka_unit_test(test_every_simt_attention_variant_compiles_without_spills),
    };
    return kf_test_run(tests);
}
