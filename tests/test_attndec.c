/*
 * test_attndec.c -- the split-KV decode attention kernels (codegen/cuda/
 * cg_attention_decode.c, templates/attention_decode.cuh) and their recipes,
 * with no GPU: every variant (Sq 1 / 3 / 4 / 16, Skv no multiple of the
 * tile, GQA and MQA through a broadcast head axis, a [B, S, H, D] KV cache
 * view, each mask class, softcap, ALiBi, head dims 64 and 128, bf16 and f16)
 * is made through the default recipes for an H100 and for sm_80, compiled by
 * NVRTC, and its SASS read with cuobjdump (HMMA, LDGSTS, no local memory);
 * the recipe's steps (two, or one where one split takes every key tile: the
 * split kernel writing O itself), split count, workspace and the mode that
 * chooses them. Numerics run on the GPU (test_cuda_exec). Its own suite: the
 * compiles take minutes with the sanitizers, beside test_attngen's.
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

/* `body` with every '$' replaced by dtype dn, as a whole graph. */
static void graph_text(const char *body, const char *dn, char *text, size_t size) {
    size_t n = (size_t)snprintf(text, size, "kfg 1\n");
    for (const char *c = body; *c && n + 8 < size; c++) {
        if (*c == '$')
            n += (size_t)snprintf(text + n, size - n, "%s", dn);
        else
            text[n++] = *c;
    }
    snprintf(text + n, size - n, "p = softmax(s1)\no = matmul(p, v)\noutput o\n");
}

/* Decode variants: few query rows, a long K/V whose length is no multiple of
 * the 64-key tile, GQA / MQA through a broadcast head axis, each mask class
 * the decode kernel meets, softcap, ALiBi, a [B, S, H, D] KV cache view. */
static const struct {
    const char *name, *body, *mask;
    int d;
} dec_cases[] = {
    {"Sq 1, Skv 1000, no mask, head dim 128",
     "q = input($[2, 4, 1, 128])\nk = input($[2, 4, 1000, 128])\nv = input($[2, 4, 1000, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
     "mask none", 128},
    {"Sq 3, GQA 4:1, softcap, Skv 777",
     "q = input($[2, 2, 4, 3, 128])\nk = input($[2, 2, 1, 777, 128])\n"
     "v = input($[2, 2, 1, 777, 128])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\ncap = const($[], 30)\n"
     "t0 = div(s0, cap)\nt1 = tanh(t0)\ns1 = mul(t1, cap)\n",
     "mask none", 128},
    {"Sq 16, bottom-right causal kv <= q + Skv - Sq, head dim 64",
     "q = input($[1, 4, 16, 64])\nk = input($[1, 4, 650, 64])\nv = input($[1, 4, 650, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[16, 650], axis=0)\ncol = iota(i32[16, 650], axis=1)\n"
     "off = const(i32[], 634)\nrq = add(row, off)\nkeep = ge(rq, col)\n"
     "ninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask general", 64},
    {"Sq 16, causal kv <= q (the planner's), Skv 300",
     "q = input($[2, 2, 16, 128])\nk = input($[2, 2, 300, 128])\nv = input($[2, 2, 300, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[16, 300], axis=0)\ncol = iota(i32[16, 300], axis=1)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask causal", 128},
    {"Sq 16, sliding window 5, Skv 300",
     "q = input($[1, 2, 16, 128])\nk = input($[1, 2, 300, 128])\nv = input($[1, 2, 300, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[16, 300], axis=0)\ncol = iota(i32[16, 300], axis=1)\nd = sub(row, col)\n"
     "w = const(i32[], 4)\nzero = const(i32[], 0)\nrest = sub(w, d)\nm = min(d, rest)\n"
     "keep = ge(m, zero)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask sliding_window", 128},
    {"Sq 1, MQA (one K/V head for 8), ALiBi, head dim 64",
     "q = input($[3, 8, 1, 64])\nk = input($[3, 1, 1500, 64])\nv = input($[3, 1, 1500, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "slope = input($[8, 1, 1])\ncol = iota(i32[1, 1500], axis=1)\ndf = cast(col, $)\n"
     "bias = mul(slope, df)\ns1 = add(s0, bias)\n",
     "mask none", 64},
    {"Sq 4, GQA 32:8 KV cache views of [B, S, Hkv, 1, D]",
     "q = input($[2, 8, 4, 4, 128])\nki = input($[2, 999, 8, 1, 128])\n"
     "vi = input($[2, 999, 8, 1, 128])\nk = permute(ki, [0, 2, 3, 1, 4])\n"
     "v = permute(vi, [0, 2, 3, 1, 4])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
     "mask none", 128},
};

/* Compiles `k` with NVRTC for its arch and checks the SASS: `want` and
 * `want2` there (NULL: nothing asked), no local memory (kf_sass_check_ops). */
static void check_sass(const kf_cuda_kernel *k, const char *want, const char *want2) {
    const char *const w[] = {want, want2, NULL};
    static const char *const why[] = {"asked for", "asked for"};
    kf_sass_check_ops(&MEM, k, want ? w : w + 2, why, NULL);
}

/* The one-split form's recipe: one step, the direct kernel (role
 * attention_decode, fadecd_, over the kv items with the split count 1 as its
 * last argument), no workspace param and no scratch; the report says so. */
static void check_direct(const kf_cuda_recipe *rc, const kf_cuda_decode_shape *sh,
                         const char *what) {
    const char *how = rc->variants[0].how;
    if (!strstr(how, "writing O itself: 1 split of") || !strstr(how, "no workspace, no combine") ||
        strstr(how, "+ combine"))
        fail_msg("%s: expected the one-split form: %s", what, how);
    assert_int_equal(rc->n_steps, 1);
    assert_int_equal(rc->n_scratch, 0);
    const kf_cuda_kstep *ks = rc->steps[0].kernel;
    assert_int_equal(ks->role, KF_CUDA_ROLE_ATTENTION_DECODE);
    assert_int_equal(ks->kernel.tmpl, KF_CUDA_TEMPLATE_ATTENTION_DECODE);
    assert_non_null(strstr(ks->kernel.name, "fadecd_"));
    assert_non_null(strstr(ks->kernel.source, "#define KF_DIRECT 1"));
    assert_null(strstr(ks->kernel.source, "#define KF_W "));
    assert_int_equal(ks->block[0], 128);
    assert_int_equal(ks->n_args, ks->kernel.n_params + 1);
    assert_int_equal(ks->args[ks->n_args - 1].kind, KF_CUDA_ARG_I64);
    assert_int_equal(ks->args[ks->n_args - 1].value, 1);
    assert_int_equal(ks->grid[0], (uint32_t)sh->kv_items);
    for (uint32_t j = 0; j < ks->kernel.n_params; j++)
        assert_int_not_equal(ks->kernel.params[j].kind, KF_CUDA_PARAM_SCRATCH);
}

/* Every decode variant in bf16 and f16 for an H100 (sm_90a), in bf16 for
 * sm_80 (the f16 source differs only in its operand type), as the default
 * for its short query: with n > 1 splits two steps, the split kernel
 * (mma.sync: HMMA, cp.async: LDGSTS, no spills) over kv items x splits with
 * the split count as its last argument, then the combine with the same
 * count, both on one workspace sized for that count; with one split (the
 * causal and window cases: one key tile) the direct kernel alone
 * (check_direct), and with KF_CUDA_RECIPE_ATTENTION_DECODE_COMBINE the
 * two-step form at n = 1 too (the form before). */
static void test_every_decode_attention_variant_compiles(void **state) {
    (void)state;
    static const char *const dts[] = {"bf16", "f16"};
    static const char *const devs[][2] = {{"h100", NULL}, {NULL, "sm_80"}};
    int n_direct = 0, n_two = 0;
    for (size_t a = 0; a < 2; a++) {
        for (size_t d = 0; d < (a == 0 ? 2u : 1u); d++) {
            for (size_t i = 0; i < sizeof dec_cases / sizeof dec_cases[0]; i++) {
                char text[4096];
                graph_text(dec_cases[i].body, dts[d], text, sizeof text);
                planned p;
                plan_text(text, &p);
                kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, devs[a][0], devs[a][1], 0);
                const kf_cuda_recipe *rc = attn_recipe(p.plan, rec);
                const char *how = rc->variants[0].how;
                if (!strstr(how, "decode attention (split-KV mma.sync kernel)") ||
                    !strstr(how, dec_cases[i].mask))
                    fail_msg("%s [%s]: expected the decode kernels, %s: %s", dec_cases[i].name,
                             dts[d], dec_cases[i].mask, how);
                assert_string_equal(rc->variants[0].label, "decode");
                if (rc->n_steps == 1) {
                    kf_cuda_decode_shape sh;
                    const kf_cuda_kstep *kd = rc->steps[0].kernel;
                    assert_int_equal(
                        kf_cuda_attention_decode_shape(p.plan, rc->group, kd->kernel.arch, &sh),
                        KF_OK);
                    assert_int_equal(kf_cuda_attention_decode_splits(&sh, rec->target.sm_count), 1);
                    check_direct(rc, &sh, dec_cases[i].name);
                    check_sass(&kd->kernel, "LDGSTS", "HMMA");
                    fprintf(stderr, "  %s [%s, %s]: %s (1 split, direct) ok\n", dec_cases[i].name,
                            dts[d], kd->kernel.arch, kd->kernel.name);
                    n_direct++;
                    kf_cuda_recipes_destroy(rec);
                    /* the two-step form at n = 1, kept behind the flag */
                    rec = kf_sass_recipes(&MEM, p.plan, devs[a][0], devs[a][1],
                                          KF_CUDA_RECIPE_ATTENTION_DECODE_COMBINE);
                    rc = attn_recipe(p.plan, rec);
                    if (!strstr(rc->variants[0].how, "+ combine fadecc_"))
                        fail_msg("%s: DECODE_COMBINE: %s", dec_cases[i].name, rc->variants[0].how);
                } else {
                    n_two++;
                }
                assert_int_equal(rc->n_steps, 2);
                const kf_cuda_kstep *ks = rc->steps[0].kernel, *kc = rc->steps[1].kernel;
                assert_int_equal(ks->role, KF_CUDA_ROLE_ATTENTION_DECODE);
                assert_int_equal(kc->role, KF_CUDA_ROLE_ATTENTION_COMBINE);
                assert_int_equal(ks->kernel.tmpl, KF_CUDA_TEMPLATE_ATTENTION_DECODE);
                assert_int_equal(ks->block[0], 128);
                assert_int_equal(kc->block[0], 128);
                assert_int_equal(ks->n_args, ks->kernel.n_params + 1);
                assert_int_equal(kc->n_args, kc->kernel.n_params + 1);
                const kf_cuda_arg *na = &ks->args[ks->n_args - 1];
                assert_int_equal(na->kind, KF_CUDA_ARG_I64);
                assert_int_equal(kc->args[kc->n_args - 1].kind, KF_CUDA_ARG_I64);
                assert_int_equal(kc->args[kc->n_args - 1].value, na->value);
                kf_cuda_decode_shape sh;
                assert_int_equal(
                    kf_cuda_attention_decode_shape(p.plan, rc->group, ks->kernel.arch, &sh), KF_OK);
                assert_int_equal(na->value,
                                 kf_cuda_attention_decode_splits(&sh, rec->target.sm_count));
                assert_true(na->value >= 1 && na->value <= sh.tiles);
                assert_int_equal(ks->grid[0], (uint32_t)(sh.kv_items * na->value));
                /* one workspace, both kernels' SCRATCH param, n splits' worth */
                assert_int_equal(rc->n_scratch, 1);
                assert_int_equal(rc->scratch[0].bytes, sh.ws_bytes_per_split * (uint64_t)na->value);
                uint32_t nw = 0;
                for (int s = 0; s < 2; s++) {
                    const kf_cuda_kstep *x = rc->steps[s].kernel;
                    for (uint32_t j = 0; j < x->kernel.n_params; j++) {
                        if (x->kernel.params[j].kind != KF_CUDA_PARAM_SCRATCH)
                            continue;
                        nw++;
                        assert_int_equal(x->args[j].buf.kind, KF_CUDA_BUF_SCRATCH);
                        assert_int_equal(x->args[j].buf.id, 0);
                        assert_true(x->args[j].written);
                    }
                }
                assert_int_equal(nw, 2);
                assert_true(ks->shared_bytes <= (a == 0 ? 227u : 99u) * 1024u);
                check_sass(&ks->kernel, "LDGSTS", "HMMA");
                check_sass(&kc->kernel, NULL, NULL);
                fprintf(stderr, "  %s [%s, %s]: %s (%lld splits) ok\n", dec_cases[i].name, dts[d],
                        ks->kernel.arch, ks->kernel.name, (long long)na->value);
                kf_cuda_recipes_destroy(rec);
                plan_release(&p);
            }
        }
    }
    /* both forms met */
    assert_true(n_direct > 0 && n_two > 0);
}

/* The long batch, B64 H32 Sq 1 against Skv 8192 (D 128, bf16, no
 * mask; 2048 kv items on an H100's 264 block slots): one split, so by default
 * the direct kernel alone; KF_CUDA_RECIPE_ATTENTION_DECODE_COMBINE gives the
 * two steps at n = 1 with a workspace of one split, ATTENTION_DECODE_SPLITS_X2
 * two splits (and the combine) -- the bench's forms. */
static void test_a_long_batch_runs_one_decode_kernel_writing_o(void **state) {
    (void)state;
    const char *text =
        "kfg 1\nq = input(bf16[64, 32, 1, 128])\nk = input(bf16[64, 32, 8192, 128])\n"
        "v = input(bf16[64, 32, 8192, 128])\nqk = matmul(q, k, transpose_b=true)\n"
        "sc = const(bf16[], 0.08838834764)\ns1 = mul(qk, sc)\np = softmax(s1)\n"
        "o = matmul(p, v)\noutput o\n";
    planned p;
    plan_text(text, &p);
    kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
    const kf_cuda_recipe *rc = attn_recipe(p.plan, rec);
    kf_cuda_decode_shape sh;
    assert_int_equal(kf_cuda_attention_decode_shape(p.plan, rc->group, "sm_90a", &sh), KF_OK);
    assert_int_equal(sh.kv_items, 2048);
    assert_int_equal(sh.tiles, 128);
    assert_int_equal(kf_cuda_attention_decode_splits(&sh, 132), 1);
    check_direct(rc, &sh, "B64 H32");
    if (!strstr(rc->variants[0].how, "1 split of 128 key tiles of 64 (128 visited, mask none)"))
        fail_msg("B64 H32: %s", rc->variants[0].how);
    kf_cuda_recipes_destroy(rec);
    static const uint64_t forms[] = {KF_CUDA_RECIPE_ATTENTION_DECODE_COMBINE,
                                     KF_CUDA_RECIPE_ATTENTION_DECODE_SPLITS_X2};
    static const int64_t splits[] = {1, 2};
    for (int f = 0; f < 2; f++) {
        rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, forms[f]);
        rc = attn_recipe(p.plan, rec);
        assert_int_equal(rc->n_steps, 2);
        const kf_cuda_kstep *ks = rc->steps[0].kernel, *kc = rc->steps[1].kernel;
        assert_int_equal(ks->role, KF_CUDA_ROLE_ATTENTION_DECODE);
        assert_int_equal(kc->role, KF_CUDA_ROLE_ATTENTION_COMBINE);
        assert_int_equal(ks->args[ks->n_args - 1].value, splits[f]);
        assert_int_equal(kc->args[kc->n_args - 1].value, splits[f]);
        assert_int_equal(ks->grid[0], (uint32_t)(2048 * splits[f]));
        assert_int_equal(rc->n_scratch, 1);
        assert_int_equal(rc->scratch[0].bytes, sh.ws_bytes_per_split * (uint64_t)splits[f]);
        char want[64];
        snprintf(want, sizeof want, "%lld split%s of <= %lld key tiles", (long long)splits[f],
                 splits[f] == 1 ? "" : "s", (long long)(128 / splits[f]));
        if (!strstr(rc->variants[0].how, want))
            fail_msg("form %d: %s: %s", f, want, rc->variants[0].how);
        kf_cuda_recipes_destroy(rec);
    }
    plan_release(&p);
}

/* The split count fills the device: a long batch needs no split (512 items
 * of 264 slots: 97% over two waves), GQA's fewer kv items take 2, a single
 * sequence takes 8; never more than the key tiles, never an empty split. */
static void test_decode_split_count_fills_the_device(void **state) {
    (void)state;
    kf_cuda_decode_shape s;
    memset(&s, 0, sizeof s);
    s.blocks_per_sm = 2;
    s.tiles = 128;
    s.kv_items = 512;
    assert_int_equal(kf_cuda_attention_decode_splits(&s, 132), 1);
    s.kv_items = 128;
    assert_int_equal(kf_cuda_attention_decode_splits(&s, 132), 2);
    s.kv_items = 32;
    assert_int_equal(kf_cuda_attention_decode_splits(&s, 132), 8);
    s.kv_items = 1;
    s.tiles = 5;
    assert_int_equal(kf_cuda_attention_decode_splits(&s, 132), 5);
    /* 300 tiles on 264 slots: 238 splits would fill 90% but leave 88 of
     * them empty (chunks of 2 tiles need only 150); 150 fill 57% */
    s.tiles = 300;
    uint32_t n = kf_cuda_attention_decode_splits(&s, 132);
    int64_t chunk = (300 + n - 1) / n;
    assert_int_equal((300 + chunk - 1) / chunk, n);
    assert_int_equal(n, 150);
}

/* The decode kernels run by default for short queries: Sq 16 takes them,
 * Sq 17 the sm_90a kernel; KF_CUDA_RECIPE_ATTENTION_DECODE forces them at any
 * length; ATTENTION_FA2 keeps the FA2 kernel; the mode maps to the flag. */
static void test_decode_attention_is_chosen_for_short_queries(void **state) {
    (void)state;
    static const int sqs[] = {16, 17};
    for (int i = 0; i < 2; i++) {
        char body[1024], text[4096];
        snprintf(body, sizeof body,
                 "q = input($[2, 2, %d, 128])\nk = input($[2, 2, 700, 128])\n"
                 "v = input($[2, 2, 700, 128])\nqk = matmul(q, k, transpose_b=true)\n"
                 "sc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
                 sqs[i]);
        graph_text(body, "bf16", text, sizeof text);
        planned p;
        plan_text(text, &p);
        kf_cuda_recipes *r0 = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
        const char *how = attn_recipe(p.plan, r0)->variants[0].how;
        if (!strstr(how, i == 0 ? "decode attention" : "fused attention (sm_90a wgmma/TMA kernel)"))
            fail_msg("Sq %d by default: %s", sqs[i], how);
        kf_cuda_recipes *r1 =
            kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_ATTENTION_DECODE);
        how = attn_recipe(p.plan, r1)->variants[0].how;
        if (!strstr(how, "decode attention"))
            fail_msg("Sq %d, decode forced: %s", sqs[i], how);
        kf_cuda_recipes *r2 =
            kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_ATTENTION_FA2);
        how = attn_recipe(p.plan, r2)->variants[0].how;
        if (!strstr(how, "fused attention (sm_80 mma.sync kernel)"))
            fail_msg("Sq %d, FA2: %s", sqs[i], how);
        kf_cuda_recipes_destroy(r0);
        kf_cuda_recipes_destroy(r1);
        kf_cuda_recipes_destroy(r2);
        plan_release(&p);
    }
    assert_int_equal(kf_cuda_recipe_flags(0, KF_GEMM_CUBLASLT, KF_ATTENTION_DECODE),
                     KF_CUDA_RECIPE_ATTENTION_DECODE);
}

/* Views the other attention kernels take and the decode kernels do not: Q,
 * K, V sliced out of one fused QKV tensor, and O stored through an absorbed
 * permute. A short query then runs the sm_90a kernel, and the decode support
 * check names why (the merge of the views and the decode kernels ran them
 * through the decode kernels, which read from each buffer's start). */
static void test_decode_attention_leaves_sliced_and_permuted_views_to_the_other_kernels(
    void **state) {
    (void)state;
    static const char *const texts[] = {
        /* sliced Q/K/V, output as pv */
        "kfg 1\nqkv = input(bf16[2, 4, 6, 64])\nq = slice(qkv, axis=2, stop=2)\n"
        "k = slice(qkv, axis=2, start=2, stop=4)\nv = slice(qkv, axis=2, start=4)\n"
        "qh = permute(q, [0, 2, 1, 3])\nkh = permute(k, [0, 2, 1, 3])\n"
        "vh = permute(v, [0, 2, 1, 3])\nqk = matmul(qh, kh, transpose_b=true)\n"
        "p = softmax(qk)\no = matmul(p, vh)\noutput o\n",
        /* plain operands, output through a permute */
        "kfg 1\nq = input(bf16[2, 2, 4, 64])\nk = input(bf16[2, 2, 700, 64])\n"
        "v = input(bf16[2, 2, 700, 64])\nqk = matmul(q, k, transpose_b=true)\n"
        "p = softmax(qk)\no = matmul(p, v)\not = permute(o, [0, 2, 1, 3])\n"
        "y = reshape(ot, [2, 4, 128])\noutput y\n",
    };
    static const char *const whys[] = {"is a slice", "through a permute"};
    for (int i = 0; i < 2; i++) {
        planned p;
        plan_text(texts[i], &p);
        kf_cuda_recipes *r = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
        const kf_cuda_recipe *rc = attn_recipe(p.plan, r);
        if (!strstr(rc->variants[0].how, "fused attention (sm_90a wgmma/TMA kernel)"))
            fail_msg("case %d: %s", i, rc->variants[0].how);
        char why[256] = "";
        uint32_t gi = (uint32_t)(rc - r->recipes);
        assert_false(kf_cuda_attention_decode_supported(p.plan, gi, "sm_90a", why, sizeof why));
        if (!strstr(why, whys[i]))
            fail_msg("case %d: %s", i, why);
        kf_cuda_recipes_destroy(r);
        plan_release(&p);
    }
}

int main(void) {
    kf_mem_resolve(&MEM, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_split_count_fills_the_device),
        cmocka_unit_test(test_decode_attention_is_chosen_for_short_queries),
        cmocka_unit_test(test_a_long_batch_runs_one_decode_kernel_writing_o),
        cmocka_unit_test(test_every_decode_attention_variant_compiles),
        cmocka_unit_test(test_decode_attention_leaves_sliced_and_permuted_views_to_the_other_kernels),
    };
    return kf_test_run(tests);
}
