/*
 * test_attngen.c -- the sm_90a fused attention kernel (codegen/cuda/
 * cg_attention.c, templates/attention_sm90.cuh) and its recipes, with no
 * GPU: every variant (head dim x mask class x bf16/f16, softcap, ALiBi, an
 * additive mask tensor, GQA through a broadcast head axis, permuted
 * [B, S, H, D] views) is made through the default recipes for an H100,
 * compiled by NVRTC for sm_90a, and its SASS read with cuobjdump: HGMMA (the
 * wgmma path) and UTMALDG (TMA loads) are there, ptxas neither serializes a
 * wgmma nor ignores setmaxnreg, and nothing goes to local memory (no
 * spills). The recipes: three tensor maps that agree with the kernel's
 * boxes, the FA2 kernel where the sm_90a one is not asked for or does not
 * take the group, and the report saying which and why. Numerics run on the
 * GPU (test_cuda_exec, forced to the sm_90a kernel).
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

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define KF_SM90_BC_WIDE_T 176
#define KF_STR2(x) #x
#define KF_STR(x) KF_STR2(x)

/* The recipe of the plan's only ATTENTION group. */
static const kf_cuda_recipe *attn_recipe(const kf_plan *plan, const kf_cuda_recipes *rec) {
    for (uint32_t gi = 0; gi < plan->n_groups; gi++)
        if (plan->groups[gi].kind == KF_GROUP_ATTENTION)
            return &rec->recipes[gi];
    fail_msg("no ATTENTION group");
    return NULL;
}

/* The variants: a score expression over [.., Sq, Skv] ('$' is the dtype),
 * its head dim, mask class and batch axes each operand's map keeps. */
static const struct {
    const char *name, *body, *mask;
    int d, map_rank[3];
} cases[] = {
    {"causal, ragged S 200, head dim 128",
     "q = input($[2, 3, 200, 128])\nk = input($[2, 3, 200, 128])\nv = input($[2, 3, 200, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[200, 200], axis=0)\ncol = iota(i32[200, 200], axis=1)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask causal",
     128,
     {4, 4, 4}},
    {"no mask, Sq 77 != Skv 333, head dim 64",
     "q = input($[2, 2, 77, 64])\nk = input($[2, 2, 333, 64])\nv = input($[2, 2, 333, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns1 = mul(qk, sc)\n",
     "mask none",
     64,
     {4, 4, 4}},
    {"sliding window 50, S 300",
     "q = input($[1, 2, 300, 128])\nk = input($[1, 2, 300, 128])\nv = input($[1, 2, 300, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[300, 300], axis=0)\ncol = iota(i32[300, 300], axis=1)\nd = sub(row, col)\n"
     "w = const(i32[], 49)\nzero = const(i32[], 0)\nrest = sub(w, d)\nm = min(d, rest)\n"
     "keep = ge(m, zero)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask sliding_window",
     128,
     {3, 3, 3}},
    {"softcap 30 tanh(s / 30) + causal",
     "q = input($[2, 2, 150, 128])\nk = input($[2, 2, 150, 128])\nv = input($[2, 2, 150, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "cap = const($[], 30)\nt0 = div(s0, cap)\nt1 = tanh(t0)\nt2 = mul(t1, cap)\n"
     "row = iota(i32[150, 150], axis=0)\ncol = iota(i32[150, 150], axis=1)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, t2, ninf)\n",
     "mask causal",
     128,
     {4, 4, 4}},
    {"ALiBi slope[h] (kv - q) + causal, head dim 64",
     "q = input($[2, 4, 190, 64])\nk = input($[2, 4, 190, 64])\nv = input($[2, 4, 190, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "slope = input($[4, 1, 1])\nrow = iota(i32[190, 190], axis=0)\n"
     "col = iota(i32[190, 190], axis=1)\ndi = sub(col, row)\ndf = cast(di, $)\n"
     "bias = mul(slope, df)\nsb = add(s0, bias)\nkeep = ge(row, col)\nninf = const($[], -inf)\n"
     "s1 = where(keep, sb, ninf)\n",
     "mask causal",
     64,
     {4, 4, 4}},
    {"an additive mask tensor [Sq, Skv]",
     "q = input($[2, 2, 120, 128])\nk = input($[2, 2, 140, 128])\nv = input($[2, 2, 140, 128])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
     "am = input($[120, 140])\ns1 = add(s0, am)\n",
     "mask none",
     128,
     {4, 4, 4}},
    {"block-sparse per-head keep maps of 128x128 tiles, Sq 500 != Skv 700",
     "q = input($[2, 3, 500, 64])\nk = input($[2, 3, 700, 64])\nv = input($[2, 3, 700, 64])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "bm = input(bool[3, 4, 6])\nr0 = repeat(bm, axis=1, times=128)\n"
     "r1 = repeat(r0, axis=2, times=128)\nm0 = slice(r1, axis=1, stop=500)\n"
     "mk = slice(m0, axis=2, stop=700)\nninf = const($[], -inf)\ns1 = where(mk, s0, ninf)\n",
     "mask block_sparse",
     64,
     {4, 4, 4}},
    {"GQA 8:1 (K, V broadcast over the head group) + causal",
     "q = input($[1, 2, 8, 150, 128])\nk = input($[1, 2, 1, 150, 128])\n"
     "v = input($[1, 2, 1, 150, 128])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\nrow = iota(i32[150, 150], axis=0)\n"
     "col = iota(i32[150, 150], axis=1)\nkeep = ge(row, col)\nninf = const($[], -inf)\n"
     "s1 = where(keep, s0, ninf)\n",
     "mask causal",
     128,
     {4, 3, 3}},
    {"Q, K, V permuted views of [B, S, H, D] + causal",
     "qi = input($[2, 90, 4, 64])\nki = input($[2, 90, 4, 64])\nvi = input($[2, 90, 4, 64])\n"
     "q = permute(qi, [0, 2, 1, 3])\nk = permute(ki, [0, 2, 1, 3])\nv = permute(vi, [0, 2, 1, 3])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.125)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[90, 90], axis=0)\ncol = iota(i32[90, 90], axis=1)\nkeep = ge(row, col)\n"
     "ninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask causal",
     64,
     {4, 4, 4}},
};

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

/* Every variant in bf16 and f16: one sm_90a step with three tensor maps that
 * agree with the kernel (boxes {64, 128}, head dim first, a broadcast axis
 * left out), compiled to HGMMA and UTMALDG with no spills. */
static void test_every_sm90_attention_variant_compiles_to_hgmma_and_utmaldg(void **state) {
    (void)state;
    static const char *const dts[] = {"bf16", "f16"};
    for (size_t d = 0; d < 2; d++) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            char text[4096];
            graph_text(cases[i].body, dts[d], text, sizeof text);
            planned p;
            plan_text(text, &p);
            kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
            const kf_cuda_recipe *rc = attn_recipe(p.plan, rec);
            const char *how = rc->variants[0].how;
            if (!strstr(how, "fused attention (sm_90a wgmma/TMA kernel)") ||
                !strstr(how, cases[i].mask))
                fail_msg("%s [%s]: expected the sm_90a kernel, %s: %s", cases[i].name, dts[d],
                         cases[i].mask, how);
            assert_int_equal(rc->n_variants, 1);
            assert_int_equal(rc->n_steps, 1);
            const kf_cuda_kstep *ks = rc->steps[0].kernel;
            assert_int_equal(ks->kernel.tmpl, KF_CUDA_TEMPLATE_ATTENTION_SM90);
            assert_int_equal(ks->role, KF_CUDA_ROLE_ATTENTION_SM90);
            assert_int_equal(ks->block[0], 384);
            assert_true(ks->shared_bytes <= 227u * 1024u);
            assert_int_equal(ks->n_tmaps, 3);
            assert_int_equal(ks->n_args, ks->kernel.n_params + 3);
            for (int m = 0; m < 3; m++) {
                const kf_cuda_tmap *t = &ks->tmaps[m];
                assert_int_equal(ks->args[m].kind, KF_CUDA_ARG_TMAP);
                assert_int_equal(ks->args[m].value, m);
                assert_int_equal(t->rank, cases[i].map_rank[m]);
                assert_int_equal(t->dims[0], (uint64_t)cases[i].d);
                assert_int_equal(t->box[0], 64);
                assert_int_equal(t->box[1], 128);
                assert_int_equal(t->swizzle, 128);
                for (int a = 0; a + 1 < t->rank; a++)
                    assert_int_equal(t->strides[a] % 16, 0);
            }
            /* the default's form letters alone: f where the score is a
             * scale of Q.K^T (f32 scores), b where a softcap bounds it (and
             * e at head dim 128: a share of its exp2s on the FMA pipe), t
             * (the softmax's trees) at head dim 128 and only there, u for a
             * softcap at head dim 128 and a sliding window (their edge steps
             * out of the main loop), l where a causal or window mask makes
             * the items unequal at head dim 128 (the tail longest first), and
             * only there */
            const char *nm = ks->kernel.name;
            bool dflt = strncmp(nm, "fa3", 3) == 0;
            const bool capped = memchr(nm, 'b', strcspn(nm, "_")) && cases[i].d == 128;
            const bool window = strstr(nm, "_sliding_window_") != NULL;
            const bool walks =
                (window || strstr(nm, "_causal_") != NULL) && cases[i].d == 128;
            for (const char *c = nm + 3; dflt && *c != '_'; c++)
                dflt = *c && strchr(capped ? "fbteul" : window ? "fbtul" : "fbtl", *c) != NULL;
            if (dflt && (memchr(nm, 'l', strcspn(nm, "_")) != NULL) != walks)
                fail_msg("%s [%s]: %s: the tail longest first is the default for a causal or "
                         "window mask and only there",
                         cases[i].name, dts[d], nm);
            if (capped && !strstr(nm, "beu_"))
                fail_msg("%s [%s]: %s is not the softcap's default (fa3ftlbeu_)", cases[i].name,
                         dts[d], nm);
            const char *us = strchr(nm, '_');
            const bool t = us && memchr(nm + 3, 't', (size_t)(us - nm - 3)) != NULL;
            if (!dflt || t != (cases[i].d == 128))
                fail_msg("%s [%s]: %s is not the default's kernel", cases[i].name, dts[d], nm);
            /* persistent: one block an SM at most, units of two query tiles */
            const kf_attn_info *at = &p.plan->groups[rc - rec->recipes].attn;
            uint64_t bh = 1;
            for (int a = 0; a < p.plan->groups[rc - rec->recipes].rank - 2; a++)
                bh *= (uint64_t)p.plan->groups[rc - rec->recipes].dims[a];
            uint64_t units = bh * (uint64_t)((at->sq + 255) / 256);
            assert_int_equal(ks->kernel.launch.work_items, units);
            assert_int_equal(kf_cuda_kernel_grid(&ks->kernel, 132), units < 132 ? units : 132);
            /* the score's roundings are F2FP (ALU pipe), no F2F (XU, the
             * exp2's pipe): an ALiBi cast of an int is an I2F, not an F2F */
            kf_sass_check_hopper_without(&MEM, &ks->kernel, "F2F.");
            fprintf(stderr, "  %s [%s]: %s ok\n", cases[i].name, dts[d], ks->kernel.name);
            kf_cuda_recipes_destroy(rec);
            plan_release(&p);
        }
    }
}

/* The main loop's exp2s (MUFU.EX2) in SASS text `sass`: before[0] between
 * its first wait (WARPGROUP.DEPBAR.LE gsb0, 0x1: Q.K^T done, P.V may run)
 * and the wait for P.V (0x0), before[1] after that wait up to the next
 * HGMMA; false when the waits are not there. */
static int count_between(const char *from, const char *to, const char *what) {
    int n = 0;
    for (const char *e = strstr(from, what); e && e < to; e = strstr(e + 1, what))
        n++;
    return n;
}

static bool exp2s_around_pv_wait(const char *sass, int before[2]) {
    const char *a = strstr(sass, "WARPGROUP.DEPBAR.LE gsb0, 0x1");
    const char *b = a ? strstr(a, "WARPGROUP.DEPBAR.LE gsb0, 0x0") : NULL;
    const char *c = b ? strstr(b, "HGMMA") : NULL;
    if (!c)
        return false;
    before[0] = count_between(a, b, "MUFU.EX2");
    before[1] = count_between(b, c, "MUFU.EX2");
    return true;
}

/* KF_CUDA_RECIPE_ATTENTION_PIN_SOFTMAX: the report and the source say so,
 * the kernel compiles with no spills, and ptxas leaves a key tile's whole
 * softmax -- every exp2 of the main loop -- between Q.K^T's wait and P.V's
 * (where without the flag it hoists P.V's wait above them all); causal head
 * dim 128 and ALiBi + causal 64, bf16 and f16. */
static void test_the_pinned_softmax_runs_under_pv(void **state) {
    (void)state;
    for (size_t v = 0; v < 4; v++) {
        char text[4096];
        const size_t ci = v < 2 ? 0 : 4; /* causal D128; ALiBi + causal D64 */
        graph_text(cases[ci].body, v % 2 ? "f16" : "bf16", text, sizeof text);
        planned p;
        plan_text(text, &p);
        kf_cuda_recipes *rec =
            kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_ATTENTION_PIN_SOFTMAX);
        const kf_cuda_recipe *rc = attn_recipe(p.plan, rec);
        if (!strstr(rc->variants[0].how, "softmax pinned under P.V"))
            fail_msg("%s: the report does not say the softmax is pinned: %s", cases[ci].name,
                     rc->variants[0].how);
        const kf_cuda_kernel *k = &rc->steps[0].kernel->kernel;
        assert_non_null(strstr(k->source, "#define KF_PIN_SOFTMAX 1"));
        kf_sass_check_hopper(&MEM, k);
        static char sass[1 << 22];
        kf_sass_text(&MEM, k, sass, sizeof sass);
        int n[2];
        if (!exp2s_around_pv_wait(sass, n))
            fail_msg("%s: no Q.K^T / P.V waits in the SASS", cases[ci].name);
        if (n[0] < 1 || n[1] != 0)
            fail_msg("%s: %d exp2s between the waits of Q.K^T and P.V, %d after P.V's (want "
                     "them all before)",
                     cases[ci].name, n[0], n[1]);
        fprintf(stderr, "  %s [%s]: %d exp2s under P.V, none after its wait\n", cases[ci].name,
                v % 2 ? "f16" : "bf16", n[0]);
        kf_cuda_recipes_destroy(rec);
        plan_release(&p);
    }
}

/* KF_CUDA_RECIPE_ATTENTION_TREE_SOFTMAX: the report, the source and the
 * kernel's name (fa3t_) say so, and the kernel compiles with no spills;
 * with the softmax pinned and f32 scores as well (fa3pft_, the form
 * FlashAttention-3's order of operations comes to) every exp2 of the main
 * loop stays between Q.K^T's wait and P.V's. Causal head dim 128 and ALiBi +
 * causal 64, bf16 and f16. (Whole-kernel counts of exp2 and FMNMX are no
 * measure of the trees' work: ptxas lays out ALiBi's f16 kernel with more
 * copies of the softmax with trees than without.) */
static void test_tree_reductions_compile_and_pin_under_pv(void **state) {
    (void)state;
    static char sass[1 << 22];
    const unsigned tree = KF_CUDA_RECIPE_ATTENTION_TREE_SOFTMAX;
    const unsigned all = tree | KF_CUDA_RECIPE_ATTENTION_PIN_SOFTMAX |
                         KF_CUDA_RECIPE_ATTENTION_F32_SCORE;
    for (size_t v = 0; v < 4; v++) {
        char text[4096];
        const size_t ci = v < 2 ? 0 : 4; /* causal D128; ALiBi + causal D64 */
        const char *dn = v % 2 ? "f16" : "bf16";
        graph_text(cases[ci].body, dn, text, sizeof text);
        planned p;
        plan_text(text, &p);
        kf_cuda_recipes *r[3] = {
            kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_ATTENTION_CHAIN_SOFTMAX),
            kf_sass_recipes(&MEM, p.plan, "h100", NULL, tree),
            kf_sass_recipes(&MEM, p.plan, "h100", NULL, all)};
        /* trees are the default at head dim 128, chains at 64 */
        kf_cuda_recipes *r_def = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
        const kf_cuda_recipe *same = attn_recipe(p.plan, r[ci == 0 ? 1 : 0]);
        assert_string_equal(attn_recipe(p.plan, r_def)->steps[0].kernel->kernel.source,
                            same->steps[0].kernel->kernel.source);
        kf_cuda_recipes_destroy(r_def);
        const kf_cuda_recipe *rc[3];
        const kf_cuda_kernel *k[3];
        for (int i = 0; i < 3; i++) {
            rc[i] = attn_recipe(p.plan, r[i]);
            k[i] = &rc[i]->steps[0].kernel->kernel;
        }
        assert_non_null(strstr(k[0]->source, "#define KF_TREE_SOFTMAX 0"));
        assert_null(strstr(rc[0]->variants[0].how, "as trees"));
        for (int i = 1; i < 3; i++) {
            assert_non_null(strstr(k[i]->source, "#define KF_TREE_SOFTMAX 1"));
            if (!strstr(rc[i]->variants[0].how, "row max and sum as trees"))
                fail_msg("%s [%s]: the report does not say so: %s", cases[ci].name, dn,
                         rc[i]->variants[0].how);
        }
        kf_sass_check_hopper(&MEM, k[1]);
        /* f32 scores (the default): the causal scale folded, ALiBi's
         * expression unrounded; l: a causal item's tail longest first at
         * head dim 128 */
        assert_non_null(strstr(k[1]->name, ci == 0 ? "fa3ftl_" : "fa3ft_"));
        assert_non_null(strstr(k[2]->name, ci == 0 ? "fa3pftl_" : "fa3pft_"));
        /* the pinned kernel compiled once: wgmma, no spills, exp2s placed */
        kf_sass_text(&MEM, k[2], sass, sizeof sass);
        if (!strstr(sass, "HGMMA") || strstr(sass, "STL") || strstr(sass, "LDL"))
            fail_msg("%s [%s]: %s: no HGMMA, or local memory", cases[ci].name, dn, k[2]->name);
        int w[2];
        if (!exp2s_around_pv_wait(sass, w))
            fail_msg("%s [%s]: no Q.K^T / P.V waits in the SASS", cases[ci].name, dn);
        if (w[0] < 1 || w[1] != 0)
            fail_msg("%s [%s]: pinned trees: %d exp2s between the waits of Q.K^T and P.V, %d "
                     "after P.V's (want them all before)",
                     cases[ci].name, dn, w[0], w[1]);
        fprintf(stderr, "  %s [%s]: trees compile; pinned, %d exp2s under P.V, none after\n",
                cases[ci].name, dn, w[0]);
        for (int i = 0; i < 3; i++)
            kf_cuda_recipes_destroy(r[i]);
        plan_release(&p);
    }
}

/* The work items: by default an item's last P.V shares the next item's
 * first turn (KF_ITEM_OVERLAP 1 in the source, no kernel letter) at head dim
 * 64, and at 128 where cg_attention.c's KF_SM90_JOIN_D128 says; with
 * KF_CUDA_RECIPE_ATTENTION_ITEMS_APART each variant (bf16) takes them one at
 * a time -- KF_ITEM_OVERLAP 0, letter i where that is not the default, the
 * report says so -- and compiles to HGMMA with no spills and no serialized
 * wgmma; with KF_CUDA_RECIPE_ATTENTION_ITEMS_JOINED every variant joins them
 * (letter j where they are apart by default); the one-Q-buffer 176-key form
 * (no mask, Skv 650) keeps them apart either way, with no letter. The
 * default's kernels compile in
 * test_every_sm90_attention_variant_compiles_to_hgmma_and_utmaldg. */
static void test_the_items_join_by_default_and_come_apart_with_the_flag(void **state) {
    (void)state;
    const uint64_t apart = KF_CUDA_RECIPE_ATTENTION_ITEMS_APART;
    for (size_t i = 0; i < N_OF(cases); i++) {
        char text[4096];
        graph_text(cases[i].body, "bf16", text, sizeof text);
        planned p;
        plan_text(text, &p);
        kf_cuda_recipes *rd = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
        kf_cuda_recipes *ra = kf_sass_recipes(&MEM, p.plan, "h100", NULL, apart);
        const kf_cuda_recipe *cd = attn_recipe(p.plan, rd), *ca = attn_recipe(p.plan, ra);
        const kf_cuda_kernel *kd = &cd->steps[0].kernel->kernel;
        const kf_cuda_kernel *ka = &ca->steps[0].kernel->kernel;
        /* joined by default at head dim 64; at 128 as cg_attention.c's
         * KF_SM90_JOIN_D128 says, either way the flags' letters follow */
        const bool dj = strstr(kd->source, "#define KF_ITEM_OVERLAP 1") != NULL;
        if ((cases[i].d == 64 && !dj) || strstr(cd->variants[0].how, "items one at a time") ||
            strstr(cd->variants[0].how, "items joined"))
            fail_msg("%s: the default's items are not joined: %s", cases[i].name, kd->name);
        const char *us = strchr(ka->name, '_');
        if (!strstr(ka->source, "#define KF_ITEM_OVERLAP 0") || !us ||
            (memchr(ka->name + 3, 'i', (size_t)(us - ka->name - 3)) != NULL) != dj ||
            (strstr(ca->variants[0].how, "; items one at a time") != NULL) != dj)
            fail_msg("%s: ITEMS_APART: %s, %s", cases[i].name, ka->name, ca->variants[0].how);
        kf_sass_check_hopper(&MEM, ka);
        /* KF_CUDA_RECIPE_ATTENTION_ITEMS_JOINED: joined, letter j where
         * the default is apart (else the default's kernel) */
        kf_cuda_recipes *rj = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                                              KF_CUDA_RECIPE_ATTENTION_ITEMS_JOINED);
        const kf_cuda_recipe *cj = attn_recipe(p.plan, rj);
        const kf_cuda_kernel *kj = &cj->steps[0].kernel->kernel;
        const char *uj = strchr(kj->name, '_');
        if (!strstr(kj->source, "#define KF_ITEM_OVERLAP 1") || !uj ||
            (memchr(kj->name + 3, 'j', (size_t)(uj - kj->name - 3)) != NULL) == dj ||
            (strstr(cj->variants[0].how, "; items joined") != NULL) == dj)
            fail_msg("%s: ITEMS_JOINED: %s, %s", cases[i].name, kj->name, cj->variants[0].how);
        fprintf(stderr, "  %s: %s by default, %s apart (compiles), %s joined\n", cases[i].name,
                kd->name, ka->name, kj->name);
        kf_cuda_recipes_destroy(rj);
        kf_cuda_recipes_destroy(rd);
        kf_cuda_recipes_destroy(ra);
        plan_release(&p);
    }
    /* the 176-key form: one Q buffer, its items apart, no letter */
    planned p;
    plan_text("kfg 1\nq = input(bf16[2, 3, 500, 128])\nk = input(bf16[2, 3, 650, 128])\n"
              "v = input(bf16[2, 3, 650, 128])\nqk = matmul(q, k, transpose_b=true)\n"
              "sc = const(bf16[], 0.08838834764)\ns1 = mul(qk, sc)\np = softmax(s1)\n"
              "o = matmul(p, v)\noutput o\n",
              &p);
    kf_cuda_recipes *ra = kf_sass_recipes(&MEM, p.plan, "h100", NULL, apart);
    const kf_cuda_kernel *ka = &attn_recipe(p.plan, ra)->steps[0].kernel->kernel;
    if (!strstr(ka->name, "w_") || strstr(ka->name, "i_") ||
        !strstr(ka->source, "#define KF_ITEM_OVERLAP 0"))
        fail_msg("the 176-key form with ITEMS_APART: %s", ka->name);
    kf_cuda_recipes_destroy(ra);
    plan_release(&p);
}

/* att16's forms. The lazy rescale (KF_LAZY_RESCALE): every variant with a
 * running row max at head dim 128 (causal, GQA, the 176-key form) takes it
 * by default -- its source says so, its SASS holds the warp vote
 * (VOTE.ANY), no spills -- and KF_CUDA_RECIPE_ATTENTION_EAGER_RESCALE gives
 * the per-tile rescale there (letter y, the report says so; no vote); head
 * dim 64 (Sq != Skv, the per-head block-sparse maps) and a bounded score
 * (the softcap: no running max) keep the per-tile rescale whatever the flag.
 * The block-sparse kernels' edge path (a ragged or dropped tile) is a
 * branch by default: the B4 H32 S4096 map of 128 x 128 tiles' kernel (the
 * bench's) holds no more than a few FSEL where
 * KF_CUDA_RECIPE_ATTENTION_BS_EDGE_MERGED's (letter m, the kernel before)
 * selects every score of a kept tile by it (64 a 128-key tile, on each of
 * the two steps' paths). */
static void test_the_lazy_rescale_and_the_keep_map_edge_branch_compile(void **state) {
    (void)state;
    const uint64_t eager = KF_CUDA_RECIPE_ATTENTION_EAGER_RESCALE;
    static char sass[1 << 22];
    static const char *const wide =
        "kfg 1\nq = input(bf16[2, 3, 500, 128])\nk = input(bf16[2, 3, 650, 128])\n"
        "v = input(bf16[2, 3, 650, 128])\nqk = matmul(q, k, transpose_b=true)\n"
        "sc = const(bf16[], 0.08838834764)\ns1 = mul(qk, sc)\np = softmax(s1)\n"
        "o = matmul(p, v)\noutput o\n";
    static const int which[] = {0, 7, -1, 1, 6, 3};
    for (size_t w = 0; w < N_OF(which); w++) {
        char text[4096];
        if (which[w] >= 0)
            graph_text(cases[which[w]].body, "bf16", text, sizeof text);
        else
            snprintf(text, sizeof text, "%s", wide);
        const char *nm = which[w] >= 0 ? cases[which[w]].name : "no mask, 176-key tiles";
        /* head dim 128 with a running max */
        const bool lazy = which[w] == 0 || which[w] == 7 || which[w] < 0;
        planned p;
        plan_text(text, &p);
        kf_cuda_recipes *r0 = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
        kf_cuda_recipes *r1 = kf_sass_recipes(&MEM, p.plan, "h100", NULL, eager);
        const kf_cuda_recipe *rc0 = attn_recipe(p.plan, r0), *rc1 = attn_recipe(p.plan, r1);
        const kf_cuda_kernel *k0 = &rc0->steps[0].kernel->kernel;
        const kf_cuda_kernel *k1 = &rc1->steps[0].kernel->kernel;
        const char *us0 = strchr(k0->name, '_'), *us1 = strchr(k1->name, '_');
        assert_non_null(us0);
        assert_non_null(us1);
        const size_t n0 = (size_t)(us0 - k0->name), n1 = (size_t)(us1 - k1->name);
        if (memchr(k0->name, 'y', n0) || memchr(k0->name, 'z', n0) ||
            memchr(k1->name, 'z', n1) || strstr(rc0->variants[0].how, "rescaled"))
            fail_msg("%s: %s / %s: %s", nm, k0->name, k1->name, rc0->variants[0].how);
        if (!lazy) {
            assert_non_null(strstr(k0->source, "#define KF_LAZY_RESCALE 0"));
            assert_string_equal(k0->source, k1->source);
            fprintf(stderr, "  %s: %s, the per-tile rescale whatever the flag\n", nm, k0->name);
        } else {
            if (!strstr(k0->source, "#define KF_LAZY_RESCALE 1") ||
                !strstr(k1->source, "#define KF_LAZY_RESCALE 0") || !memchr(k1->name, 'y', n1) ||
                !strstr(rc1->variants[0].how, "; O rescaled every key tile"))
                fail_msg("%s: %s (lazy) / %s (eager): %s", nm, k0->name, k1->name,
                         rc1->variants[0].how);
            if (which[w] < 0 && !memchr(k0->name, 'w', n0))
                fail_msg("%s: %s is not the 176-key form", nm, k0->name);
            kf_sass_check_hopper(&MEM, k0);
            kf_sass_text(&MEM, k0, sass, sizeof sass);
            const int v0 = count_between(sass, sass + strlen(sass), "VOTE.ANY");
            kf_sass_text(&MEM, k1, sass, sizeof sass);
            const int v1 = count_between(sass, sass + strlen(sass), "VOTE.ANY");
            if (v0 < 1 || v1 != 0)
                fail_msg("%s: VOTE.ANY %d by default (lazy), %d per tile", nm, v0, v1);
            fprintf(stderr, "  %s: %s compiles lazy, no spills, %d VOTE.ANY; %s per tile\n", nm,
                    k0->name, v0, k1->name);
        }
        kf_cuda_recipes_destroy(r1);
        kf_cuda_recipes_destroy(r0);
        plan_release(&p);
    }
    /* the bench's block-sparse shape, one map for every batch-head */
    planned p;
    plan_text("kfg 1\nq = input(bf16[4, 32, 4096, 128])\nk = input(bf16[4, 32, 4096, 128])\n"
              "v = input(bf16[4, 32, 4096, 128])\nqk = matmul(q, k, transpose_b=true)\n"
              "sc = const(bf16[], 0.08838834764)\ns0 = mul(qk, sc)\n"
              "kin = input(bool[32, 32])\nbi = iota(i32[32, 32], axis=0)\n"
              "bj = iota(i32[32, 32], axis=1)\ndiag = eq(bi, bj)\n"
              "bm = where(diag, diag, kin)\noutput bm\n"
              "r0 = repeat(bm, axis=0, times=128)\nmk = repeat(r0, axis=1, times=128)\n"
              "ninf = const(bf16[], -inf)\ns1 = where(mk, s0, ninf)\np = softmax(s1)\n"
              "o = matmul(p, v)\noutput o\n",
              &p);
    int fsel[2];
    for (int f = 0; f < 2; f++) {
        kf_cuda_recipes *r = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                                             f ? KF_CUDA_RECIPE_ATTENTION_BS_EDGE_MERGED : 0);
        const kf_cuda_recipe *rc = attn_recipe(p.plan, r);
        const kf_cuda_kernel *k = &rc->steps[0].kernel->kernel;
        const bool m = strstr(k->name, "m_") != NULL &&
                       strstr(rc->variants[0].how, "; the keep map's edge path merged");
        if (m != (f == 1) ||
            !strstr(k->source, f ? "#define KF_BS_EDGE_MERGED 1" : "#define KF_BS_EDGE_MERGED 0"))
            fail_msg("block-sparse [%s]: %s: %s", f ? "merged" : "default", k->name,
                     rc->variants[0].how);
        kf_sass_check_hopper(&MEM, k);
        kf_sass_text(&MEM, k, sass, sizeof sass);
        fsel[f] = count_between(sass, sass + strlen(sass), "FSEL");
        kf_cuda_recipes_destroy(r);
    }
    if (fsel[0] > 16 || fsel[1] < fsel[0] + 120)
        fail_msg("block-sparse: %d FSEL by default, %d with the edge path merged", fsel[0],
                 fsel[1]);
    fprintf(stderr, "  block-sparse B4 H32 S4096: FSEL %d merged -> %d by default\n", fsel[1],
            fsel[0]);
    plan_release(&p);
}

/* The tail longest first (KF_TAIL_LPT: by default for a causal or window
 * mask at head dim 128, where KF_CUDA_RECIPE_ATTENTION_TAIL_LPT then keeps the grid-strided
 * walk; elsewhere the flag asks for it): the variants whose item walks
 * differ (causal, Sq != Skv, sliding window, block-sparse, GQA; bf16) take
 * it with every other form -- the kernel's name (fa3pftl_), its source and
 * the report say so -- and compile with no spills; the first (causal head
 * dim 128) also with the tail form alone (fa3ftl_, the default); the causal
 * and window ones at head dim 128 without it under the flag (no letter l,
 * KF_TAIL_LPT 0).
 * The tail's item lookup is 32-bit (64-bit divisions spilled the
 * 40-register producer) and only a flag of it stays live through an item. */
static void test_the_tail_longest_first_compiles_with_every_form(void **state) {
    (void)state;
    const unsigned lpt = KF_CUDA_RECIPE_ATTENTION_TAIL_LPT;
    const unsigned rest = KF_CUDA_RECIPE_ATTENTION_TREE_SOFTMAX |
                          KF_CUDA_RECIPE_ATTENTION_PIN_SOFTMAX | KF_CUDA_RECIPE_ATTENTION_F32_SCORE;
    static const size_t which[] = {0, 1, 2, 6, 7};
    for (size_t w = 0; w < sizeof which / sizeof which[0]; w++) {
        const size_t ci = which[w];
        /* a causal or window mask at head dim 128: the tail by default, the
         * flag keeps the grid-strided walk */
        const bool walks = (strstr(cases[ci].mask, "mask causal") != NULL ||
                            strstr(cases[ci].mask, "mask sliding_window") != NULL) &&
                           cases[ci].d == 128;
        const unsigned ask = walks ? 0 : lpt;
        char text[4096];
        graph_text(cases[ci].body, "bf16", text, sizeof text);
        planned p;
        plan_text(text, &p);
        if (walks) {
            kf_cuda_recipes *r = kf_sass_recipes(&MEM, p.plan, "h100", NULL, lpt);
            const kf_cuda_recipe *rc = attn_recipe(p.plan, r);
            const kf_cuda_kernel *k = &rc->steps[0].kernel->kernel;
            if (strstr(rc->variants[0].how, "the tail's items longest first") ||
                !strstr(k->source, "#define KF_TAIL_LPT 0") ||
                memchr(k->name, 'l', strcspn(k->name, "_")))
                fail_msg("%s, the flag: %s still takes the tail longest first: %s",
                         cases[ci].name, k->name, rc->variants[0].how);
            kf_cuda_recipes_destroy(r);
        }
        for (int f = ci == 0 ? 0 : 1; f < 2; f++) {
            kf_cuda_recipes *r =
                kf_sass_recipes(&MEM, p.plan, "h100", NULL, f ? rest | ask : ask);
            const kf_cuda_recipe *rc = attn_recipe(p.plan, r);
            const kf_cuda_kernel *k = &rc->steps[0].kernel->kernel;
            if (!strstr(rc->variants[0].how, "the tail's items longest first"))
                fail_msg("%s: the report does not say so: %s", cases[ci].name,
                         rc->variants[0].how);
            assert_non_null(strstr(k->source, "#define KF_TAIL_LPT 1"));
            if (!f)
                /* f32 scores and trees at head dim 128: the default */
                assert_non_null(strstr(k->name, "fa3ftl_"));
            else if (!strstr(k->name, "tl_") && !strstr(k->name, "tlu_"))
                fail_msg("%s: %s is not named for every form", cases[ci].name, k->name);
            kf_sass_check_hopper(&MEM, k);
            fprintf(stderr, "  %s: %s compiles, no spills\n", cases[ci].name, k->name);
            kf_cuda_recipes_destroy(r);
        }
        plan_release(&p);
    }
}

/* The bench's attention shape, B4 H32 S4096 head dim 128: Q, K and V and
 * the scaled scores s0 (S4096_SCORES), and causal s1 after it (causal4096),
 * for the tests that read the main loops of its kernels. */
#define S4096_SCORES                                                                               \
    "q = input($[4, 32, 4096, 128])\nk = input($[4, 32, 4096, 128])\n"                             \
    "v = input($[4, 32, 4096, 128])\nqk = matmul(q, k, transpose_b=true)\n"                        \
    "sc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
static const char causal4096[] =
    S4096_SCORES "row = iota(i32[4096, 4096], axis=0)\ncol = iota(i32[4096, 4096], axis=1)\n"
                 "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n";

/* A block-sparse keep map that no batch axis indexes (one map for every
 * batch-head): by default the sm_90a kernel builds the map's walk in shared
 * memory (KF_BS_TABLE; form letter s) and pairs its query tiles by kept
 * count with the tail longest first (KF_QT, KF_TAIL_LPT; letters k and l),
 * and the report says so; KF_CUDA_RECIPE_ATTENTION_BS_L2 keeps both and adds
 * the L2 policies and the walk's prefetch (letter v: evict_last K and V loads,
 * an evict_first Q load and O store, a prefetch of K and V),
 * KF_CUDA_RECIPE_ATTENTION_BS_MAP_WALK takes neither, nor does a per-head map
 * (case 6) by default. Ragged Sq 520 != Skv 700 and the
 * bench's B4 H32 S4096 shape; each compiles with no spills. */
static void test_a_shared_keep_map_walks_from_shared_memory(void **state) {
    (void)state;
    static const char *const bodies[] = {
        "q = input($[1, 2, 520, 128])\nk = input($[1, 2, 700, 128])\n"
        "v = input($[1, 2, 700, 128])\nqk = matmul(q, k, transpose_b=true)\n"
        "sc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
        "kin = input(bool[5, 6])\nri = iota(i32[5, 1], axis=0)\none = const(i32[], 1)\n"
        "rok = ne(ri, one)\nno = const(bool[], 0)\nbm = where(rok, kin, no)\noutput bm\n"
        "r0 = repeat(bm, axis=0, times=128)\nr1 = repeat(r0, axis=1, times=128)\n"
        "m0 = slice(r1, axis=0, stop=520)\nmk = slice(m0, axis=1, stop=700)\n"
        "fill = const($[], -30000)\ns1 = where(mk, s0, fill)\n",
        S4096_SCORES "kin = input(bool[32, 32])\nbi = iota(i32[32, 32], axis=0)\n"
                     "bj = iota(i32[32, 32], axis=1)\ndiag = eq(bi, bj)\n"
                     "bm = where(diag, diag, kin)\noutput bm\n"
                     "r0 = repeat(bm, axis=0, times=128)\nmk = repeat(r0, axis=1, times=128)\n"
                     "ninf = const($[], -inf)\ns1 = where(mk, s0, ninf)\n",
        NULL, /* case 6: per-head maps */
    };
    static const uint64_t flags[] = {0, KF_CUDA_RECIPE_ATTENTION_BS_L2,
                                     KF_CUDA_RECIPE_ATTENTION_BS_MAP_WALK};
    for (size_t b = 0; b < N_OF(bodies); b++) {
        char text[4096];
        graph_text(bodies[b] ? bodies[b] : cases[6].body, "bf16", text, sizeof text);
        planned p;
        plan_text(text, &p);
        for (size_t f = 0; f < (bodies[b] ? N_OF(flags) : 1); f++) {
            kf_cuda_recipes *r = kf_sass_recipes(&MEM, p.plan, "h100", NULL, flags[f]);
            const kf_cuda_recipe *rc = attn_recipe(p.plan, r);
            const kf_cuda_kernel *k = &rc->steps[0].kernel->kernel;
            const char *how = rc->variants[0].how;
            const bool table = bodies[b] && f < 2, order = table, l2 = bodies[b] && f == 1;
            const char *form = strchr(k->name, '_');
            assert_non_null(form);
            const bool s = form[-1] == 's' || (form - k->name > 1 && form[-2] == 's');
            if (table != (strstr(k->source, "#define KF_BS_TABLE 1") != NULL) || table != s ||
                table != (strstr(how, "its walk built in shared memory") != NULL))
                fail_msg("body %zu, flags %zu: %s the walk in shared memory: %s\n%s", b, f,
                         table ? "wants" : "does not want", k->name, how);
            if (order != (strstr(k->source, "#define KF_QT(r_) ((int)kf_bs_ord") != NULL) ||
                order != (form[-1] == 'k') ||
                order != (strstr(how, "query tiles paired by kept key tiles") != NULL) ||
                order != (strstr(k->source, "#define KF_TAIL_LPT 1") != NULL))
                fail_msg("body %zu, flags %zu: %s the pairing by kept count and the tail: %s\n%s",
                         b, f, order ? "wants" : "does not want", k->name, how);
            if (l2 != (strstr(k->source, "#define KF_BS_L2 1") != NULL) ||
                l2 != (strchr(k->name, 'v') != NULL && strchr(k->name, 'v') < form) ||
                l2 != (strstr(k->source, "createpolicy.fractional.L2::evict_last") != NULL) ||
                l2 != (strstr(how, "K and V evict_last in L2") != NULL))
                fail_msg("body %zu, flags %zu: %s the L2 policies: %s\n%s", b, f,
                         l2 ? "wants" : "does not want", k->name, how);
            kf_sass_check_hopper(&MEM, k);
            fprintf(stderr, "  body %zu, flags %zu: %s compiles, no spills\n", b, f, k->name);
            kf_cuda_recipes_destroy(r);
        }
        plan_release(&p);
    }
}

/* The diagonal-first walk (KF_CUDA_RECIPE_ATTENTION_KEYS_DESC, off by
 * default: templates/attention_sm90.cuh, KF_DESC_WALK; kernel letter d): the
 * sm_90a kernel of a causal or window item walks its key tiles descending --
 * causal ragged S 200 head dim 128 and the bench's B4 H32 S4096, the sliding
 * window, ALiBi head dim 64 and at S 900 head dim 128, GQA causal -- each
 * compiling with HGMMA and no spills (SASS instructions printed: causal
 * S4096 8446 -> 7798, its main loop 722 -> 492 with KF_DESC_INNER, where only
 * the first step's tile can be an edge); without the flag every kernel
 * keeps the ascending walk, and the unmasked (176-key tiles, the last
 * narrower) and block-sparse kernels keep it with the flag too. */
static void test_the_diagonal_first_walk_is_causal_and_window_only(void **state) {
    (void)state;
    static const char *const alibi900 =
        "q = input($[1, 4, 900, 128])\nk = input($[1, 4, 900, 128])\n"
        "v = input($[1, 4, 900, 128])\nqk = matmul(q, k, transpose_b=true)\n"
        "sc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\nslope = input($[4, 1, 1])\n"
        "row = iota(i32[900, 900], axis=0)\ncol = iota(i32[900, 900], axis=1)\n"
        "di = sub(col, row)\ndf = cast(di, $)\nbias = mul(slope, df)\nsb = add(s0, bias)\n"
        "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, sb, ninf)\n";
    static const struct {
        int ci; /* cases[ci], or -1: alibi900, -2: causal4096 (the bench's shape) */
        bool desc;
    } vs[] = {{0, true},  {2, true}, {4, true},  {-1, true},
              {-2, true}, {7, true}, {1, false}, {6, false}};
    static char sass[1 << 22];
    for (size_t v = 0; v < N_OF(vs); v++) {
        const char *name = vs[v].ci == -1   ? "ALiBi + causal, S 900, head dim 128"
                           : vs[v].ci == -2 ? "causal, B4 H32 S4096, head dim 128"
                                            : cases[vs[v].ci].name;
        char text[4096];
        graph_text(vs[v].ci == -1   ? alibi900
                   : vs[v].ci == -2 ? causal4096
                                    : cases[vs[v].ci].body,
                   "bf16", text, sizeof text);
        planned p;
        plan_text(text, &p);
        int n[2] = {0, 0};
        for (int f = 0; f < 2; f++) {
            kf_cuda_recipes *r = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                                                 f ? KF_CUDA_RECIPE_ATTENTION_KEYS_DESC : 0);
            const kf_cuda_kernel *k = &attn_recipe(p.plan, r)->steps[0].kernel->kernel;
            const bool want = f && vs[v].desc;
            const char *form = strchr(k->name, '_');
            assert_non_null(form);
            const bool letter = form[-1] == 'd';
            if (!strstr(k->source, want ? "#define KF_DESC_WALK 1" : "#define KF_DESC_WALK 0") ||
                letter != want)
                fail_msg("%s, flag %d: %s the diagonal-first walk: %s", name, f,
                         want ? "wants" : "does not want", k->name);
            kf_sass_check_hopper(&MEM, k);
            kf_sass_text(&MEM, k, sass, sizeof sass);
            n[f] = count_between(sass, sass + strlen(sass), "        /*");
            kf_cuda_recipes_destroy(r);
        }
        fprintf(stderr, "  %s: ascending %d, %s %d SASS instructions, no spills\n", name, n[0],
                vs[v].desc ? "diagonal-first" : "(flag ignored)", n[1]);
        plan_release(&p);
    }
}

/* The main loop of an sm_90a attention kernel's SASS (cuobjdump's lines: the
 * address in a comment, then the instruction): the shortest backward branch
 * over a Q.K^T wait (WARPGROUP.DEPBAR.LE gsb0, 0x1), to its target. Its
 * instruction count, and in *sel the mask's compares and selects in it (FSEL
 * and ISETP; the softmax's own: 4 FSEL, 1 ISETP); -1 where there is none. */
static int sass_main_loop(const char *sass, int *sel) {
    const char *bra = NULL, *tgt = NULL;
    for (const char *x = strstr(sass, " BRA 0x"); x; x = strstr(x + 1, " BRA 0x")) {
        const char *ln = x;
        while (ln > sass && ln[-1] != '\n')
            ln--;
        unsigned at_addr = 0, to = 0;
        if (sscanf(ln, " /*%x*/", &at_addr) != 1 || sscanf(x, " BRA 0x%x", &to) != 1 ||
            to >= at_addr)
            continue;
        char def[32];
        snprintf(def, sizeof def, "/*%04x*/", to);
        const char *at = strstr(sass, def);
        const char *w = at ? strstr(at, "WARPGROUP.DEPBAR.LE gsb0, 0x1") : NULL;
        if (w && w < x && (!bra || x - at < bra - tgt)) {
            bra = x;
            tgt = at;
        }
    }
    if (!bra)
        return -1;
    unsigned a0 = 0, a1 = 0;
    const char *ln = bra;
    while (ln > sass && ln[-1] != '\n')
        ln--;
    sscanf(tgt, "/*%x*/", &a0);
    sscanf(ln, " /*%x*/", &a1);
    *sel = count_between(tgt, bra, " FSEL") + count_between(tgt, bra, " ISETP");
    return (int)((a1 - a0) / 16 + 1);
}

/* The ascending causal walk's last step peeled (templates/attention_sm90.cuh,
 * KF_EDGE_LAST, where KF_CUDA_RECIPE_ATTENTION_EDGE_LAST asks: kernel letter
 * u; by default every step checks for an edge, but for a softcap at head dim
 * 128, peeled by default since att18, where the flag keeps the check): with
 * the flag, causal ragged S 200 and the bench's B4 H32 S4096 (causal, ALiBi)
 * at head dim 128, ALiBi at head dim 64, GQA 8:1 and permuted views define
 * KF_EDGE_LAST 1, without it 0; the softcaps (B4 H32 S4096, S 150) the other
 * way round; the window 1 either way (its edges out of the main loop by
 * default since win18: test_the_window_walk_may_take_its_edges_out_of_the_loop),
 * the unmasked kernel (176-key tiles) and the block-sparse one 0 either
 * way, with no letter. Each compiles with HGMMA and no spills. In the SASS
 * of the S4096 kernels the peeled kernel's main loop -- the shortest
 * backward branch over Q.K^T's wait, to its target -- has no edge path:
 * fewer instructions than the default's, and no more than 12 FSEL and ISETP
 * (the softmax's own; the default's loop has 130 or so: the mask merged into
 * every step). Printed: the kernels' SASS lines, the loops' instructions. */
static void test_the_causal_walk_may_peel_its_last_step(void **state) {
    (void)state;
    static const char *const alibi4096 = S4096_SCORES
        "slope = input($[32, 1, 1])\n"
        "row = iota(i32[4096, 4096], axis=0)\ncol = iota(i32[4096, 4096], axis=1)\n"
        "di = sub(col, row)\ndf = cast(di, $)\nbias = mul(slope, df)\nsb = add(s0, bias)\n"
        "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, sb, ninf)\n";
    static const char *const softcap4096 =
        S4096_SCORES "cap = const($[], 30)\nt0 = div(s0, cap)\nt1 = tanh(t0)\nt2 = mul(t1, cap)\n"
                     "row = iota(i32[4096, 4096], axis=0)\ncol = iota(i32[4096, 4096], axis=1)\n"
                     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, t2, ninf)\n";
    static const char *const big[] = {causal4096, alibi4096, softcap4096};
    static const char *const big_name[] = {"causal, B4 H32 S4096, head dim 128",
                                           "ALiBi + causal, B4 H32 S4096, head dim 128",
                                           "softcap + causal, B4 H32 S4096, head dim 128"};
    static const struct {
        int ci; /* cases[ci], or -1 - i: big[i] (the bench's shapes: main loops) */
        bool peel;
        bool inv;    /* peeled without the flag (a softcap at head dim 128) */
        bool always; /* peeled with or without it (a window) */
    } vs[] = {{-1, true, false, false}, {-2, true, false, false}, {-3, true, true, false},
              {0, true, false, false},  {3, true, true, false},   {4, true, false, false},
              {7, true, false, false},  {8, true, false, false},  {2, false, false, true},
              {1, false, false, false}, {6, false, false, false}};
    static char sass[1 << 22];
    for (size_t v = 0; v < N_OF(vs); v++) {
        const bool loops = vs[v].ci < 0; /* the small cases' loops fold away */
        const char *name = loops ? big_name[-1 - vs[v].ci] : cases[vs[v].ci].name;
        char text[4096];
        graph_text(loops ? big[-1 - vs[v].ci] : cases[vs[v].ci].body, "bf16", text,
                   sizeof text);
        planned p;
        plan_text(text, &p);
        int n[2] = {0, 0}, loop[2] = {0, 0}, sel[2] = {0, 0};
        for (int f = 0; f < 2; f++) {
            kf_cuda_recipes *r = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                                                 f ? KF_CUDA_RECIPE_ATTENTION_EDGE_LAST : 0);
            const kf_cuda_kernel *k = &attn_recipe(p.plan, r)->steps[0].kernel->kernel;
            const bool peel = vs[v].always || ((f != vs[v].inv) && vs[v].peel);
            const char *form = strchr(k->name, '_');
            assert_non_null(form);
            const bool letter = form[-1] == 'u';
            if (!strstr(k->source, peel ? "#define KF_EDGE_LAST 1" : "#define KF_EDGE_LAST 0") ||
                letter != peel)
                fail_msg("%s, flag %d: %s the peeled last step: %s", name, f,
                         peel ? "wants" : "does not want", k->name);
            kf_sass_text(&MEM, k, sass, sizeof sass);
            const char *end = sass + strlen(sass);
            kf_sass_check_hopper(&MEM, k);
            n[f] = count_between(sass, end, "        /*");
            if (loops && (loop[f] = sass_main_loop(sass, &sel[f])) < 0)
                fail_msg("%s, flag %d: no main loop in the SASS", name, f);
            kf_cuda_recipes_destroy(r);
        }
        const int pe = vs[v].inv ? 0 : 1, ck = 1 - pe; /* peeled, checking every step */
        if (loops && (loop[pe] >= loop[ck] || sel[pe] > 12))
            fail_msg("%s: main loop %d instructions (%d FSEL, ISETP) peeled, %d (%d) checking "
                     "every step",
                     name, loop[pe], sel[pe], loop[ck], sel[ck]);
        fprintf(stderr,
                "  %s: every step checks: %d SASS lines, main loop %d instructions (%d FSEL, "
                "ISETP); peeled: %d, loop %d (%d)\n",
                name, n[ck], loop[ck], sel[ck], n[pe], loop[pe], sel[pe]);
        plan_release(&p);
    }
}

/* A sliding window's score body ('$' the dtype) over Q [B, H, Sq, D] and K, V
 * [B, H, Skv, D]: keys q - w + 1 .. q, as the bench writes it; head dim 64 or
 * 128 (the scale 1 / sqrt(D)). */
static void window_body(char *t, size_t size, int b, int h, int sq, int skv, int d, int w) {
    snprintf(t, size,
             "q = input($[%d, %d, %d, %d])\nk = input($[%d, %d, %d, %d])\n"
             "v = input($[%d, %d, %d, %d])\nqk = matmul(q, k, transpose_b=true)\n"
             "sc = const($[], %s)\ns0 = mul(qk, sc)\nrow = iota(i32[%d, %d], axis=0)\n"
             "col = iota(i32[%d, %d], axis=1)\nd = sub(row, col)\nw = const(i32[], %d)\n"
             "zero = const(i32[], 0)\nrest = sub(w, d)\nm = min(d, rest)\nkeep = ge(m, zero)\n"
             "ninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
             b, h, sq, d, b, h, skv, d, b, h, skv, d, d == 64 ? "0.125" : "0.08838834764", sq, skv,
             sq, skv, w - 1);
}

/* Kernel `k`'s registers a thread (cuobjdump -res-usage's REG). */
static int sass_regs(const kf_cuda_kernel *k) {
    static char out[1 << 16];
    kf_sass_dump(&MEM, k, "-res-usage", out, sizeof out);
    const char *r = strstr(out, "REG:");
    int n = -1;
    if (!r || sscanf(r, "REG:%d", &n) != 1)
        fail_msg("%s: no REG in:\n%s", k->name, out);
    return n;
}

/* The sliding window's edge steps out of the main loop (templates/
 * attention_sm90.cuh, KF_EDGE_LAST with KF_MASK_SKIP 2, by default: kernel
 * letter u, the report says "the window's edge steps out of the main
 * loop"): every window kernel below defines KF_EDGE_LAST 1 and compiles
 * with HGMMA, no local memory and no more registers than with the edge
 * check in every step (KF_CUDA_RECIPE_ATTENTION_WINDOW_INLOOP:
 * KF_EDGE_LAST 0, no letter) -- bf16 and f16, head dims 64 and 128, ragged S, Sq < Skv (Sq >
 * Skv plans as a general mask), windows smaller than a tile (50, 100), of a
 * tile multiple plus one (257:
 * one far-edge tile), not a multiple (200, 300, 1000: two, the second in
 * the loop of its own). In the SASS of the S4096
 * kernels (the bench's B4 H32 window 1024 at head dim 128 in bf16 and f16,
 * window 1000 at head dim 64) the main loop -- the shortest backward branch
 * over Q.K^T's wait -- is shorter with the flag and has no more than 12 FSEL
 * and ISETP (the softmax's own), where the default's has the two-sided mask
 * merged into it (att18: 1099 instructions on the bench's). Causal and unmasked kernels
 * take no such step, and a window wider than
 * S (2000 at S 700, which plans as causal). Printed: SASS lines, loops,
 * registers (the launch's; the consumers' budget is setmaxnreg's, and
 * kf_sass_cubin fails on ptxas's serialized-wgmma warnings). */
static void test_the_window_walk_may_take_its_edges_out_of_the_loop(void **state) {
    (void)state;
    static const struct {
        int b, h, sq, skv, d, w;
        const char *dn;
        bool loops; /* S4096: the main loop's count (the small ones' fold away) */
    } vs[] = {{4, 32, 4096, 4096, 128, 1024, "bf16", true},
              {4, 32, 4096, 4096, 128, 1024, "f16", true},
              {2, 16, 4096, 4096, 64, 1000, "bf16", true},
              {1, 2, 300, 300, 128, 50, "bf16", false},
              {1, 2, 1000, 1000, 128, 300, "f16", false},
              {1, 2, 900, 900, 64, 257, "bf16", false},
              {1, 2, 300, 700, 128, 200, "bf16", false},
              {1, 2, 300, 900, 64, 100, "f16", false}};
    static char sass[1 << 22];
    const uint64_t inloop = KF_CUDA_RECIPE_ATTENTION_WINDOW_INLOOP;
    for (size_t v = 0; v < N_OF(vs); v++) {
        char body[2048], text[4096];
        window_body(body, sizeof body, vs[v].b, vs[v].h, vs[v].sq, vs[v].skv, vs[v].d, vs[v].w);
        graph_text(body, vs[v].dn, text, sizeof text);
        planned p;
        plan_text(text, &p);
        int n[2] = {0, 0}, loop[2] = {0, 0}, sel[2] = {0, 0}, regs[2] = {0, 0};
        for (int f = 0; f < 2; f++) {
            kf_cuda_recipes *r = kf_sass_recipes(&MEM, p.plan, "h100", NULL, f ? 0 : inloop);
            const kf_cuda_recipe *rc = attn_recipe(p.plan, r);
            const kf_cuda_kernel *k = &rc->steps[0].kernel->kernel;
            const char *form = strchr(k->name, '_');
            assert_non_null(form);
            if (strncmp(k->name, "fa3", 3) != 0 || !strstr(k->name, "sliding_window") ||
                !strstr(k->source, f ? "#define KF_EDGE_LAST 1" : "#define KF_EDGE_LAST 0") ||
                (form[-1] == 'u') != (f == 1) ||
                (strstr(rc->variants[0].how, "the window's edge steps out of the main loop") !=
                 NULL) != (f == 1))
                fail_msg("window %d, %dx%d D%d [%s], peeled %d: %s: %s", vs[v].w, vs[v].sq,
                         vs[v].skv, vs[v].d, vs[v].dn, f, k->name, rc->variants[0].how);
            kf_sass_check_hopper(&MEM, k);
            kf_sass_text(&MEM, k, sass, sizeof sass);
            n[f] = count_between(sass, sass + strlen(sass), "        /*");
            regs[f] = sass_regs(k);
            if (vs[v].loops && (loop[f] = sass_main_loop(sass, &sel[f])) < 0)
                fail_msg("window %d D%d [%s], peeled %d: no main loop in the SASS", vs[v].w,
                         vs[v].d, vs[v].dn, f);
            kf_cuda_recipes_destroy(r);
        }
        if (regs[1] > regs[0] || (vs[v].loops && (loop[1] >= loop[0] || sel[1] > 12)))
            fail_msg("window %d, %dx%d D%d [%s]: registers %d -> %d, main loop %d (%d FSEL, "
                     "ISETP) -> %d (%d)",
                     vs[v].w, vs[v].sq, vs[v].skv, vs[v].d, vs[v].dn, regs[0], regs[1], loop[0],
                     sel[0], loop[1], sel[1]);
        fprintf(stderr,
                "  window %d, B%d H%d Sq %d Skv %d D%d [%s]: %d SASS lines, %d registers, main "
                "loop %d (%d FSEL, ISETP); edges out of the loop: %d, %d, loop %d (%d)\n",
                vs[v].w, vs[v].b, vs[v].h, vs[v].sq, vs[v].skv, vs[v].d, vs[v].dn, n[0], regs[0],
                loop[0], sel[0], n[1], regs[1], loop[1], sel[1]);
        plan_release(&p);
    }
    /* causal, unmasked and a window wider than S: the in-loop flag changes nothing */
    for (size_t ci = 0; ci < 3; ci++) {
        char body[2048], text[4096];
        window_body(body, sizeof body, 1, 2, 700, 700, 128, 2000);
        graph_text(ci < 2 ? cases[ci].body : body, "bf16", text, sizeof text);
        planned p;
        plan_text(text, &p);
        kf_cuda_recipes *r[2] = {kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0),
                                 kf_sass_recipes(&MEM, p.plan, "h100", NULL, inloop)};
        assert_string_equal(attn_recipe(p.plan, r[0])->steps[0].kernel->kernel.source,
                            attn_recipe(p.plan, r[1])->steps[0].kernel->kernel.source);
        for (int f = 0; f < 2; f++)
            kf_cuda_recipes_destroy(r[f]);
        plan_release(&p);
    }
}

/* A multiply by 1 after the scale (mul(mul(Q.K^T, c), 1): the bench's
 * non-causal text; under a causal mask too, as the where()'s kept branch)
 * folds as the scale alone: in bf16 and f16 the kernel is the f32-score one
 * (fa3ft_, or fa3ftwr_ unmasked: 176-key tiles, the last narrower; the
 * report says so; f16 on the first case) and its SASS is the same, instruction for
 * instruction, as that of the graph without the 1 -- where before it
 * rounded each score twice and multiplied once (160 F2FP and 130 FMUL a
 * warp and key tile against 32 and 66). A multiply by 2 there does not fold
 * with the scale: f32 scores still (att17: the score's last scale folds
 * alone, KF_SCORE_SCALE 2, top_scale; s c stays a multiply). */
static void test_a_multiply_by_one_after_the_scale_folds_as_the_scale_alone(void **state) {
    (void)state;
    static const struct {
        const char *name, *rows, *with, *without;
        bool folds;
    } uc[] = {
        {"no mask", "", "one = const($[], 1)\ns1 = mul(s0, one)\n", "s1 = mul(qk, sc)\n", true},
        {"no mask, 1 * x", "", "one = const($[], 1)\ns1 = mul(one, s0)\n", "s1 = mul(qk, sc)\n",
         true},
        {"no mask, times 1 twice", "",
         "one = const($[], 1)\ns2 = mul(s0, one)\ns1 = mul(s2, one)\n", "s1 = mul(qk, sc)\n", true},
        {"causal",
         "row = iota(i32[300, 540], axis=0)\ncol = iota(i32[300, 540], axis=1)\n"
         "keep = ge(row, col)\nninf = const($[], -inf)\n",
         "one = const($[], 1)\ns2 = mul(s0, one)\ns1 = where(keep, s2, ninf)\n",
         "s1 = where(keep, s0, ninf)\n", true},
        {"no mask, times 2", "", "two = const($[], 2)\ns1 = mul(s0, two)\n", NULL, true},
    };
    for (size_t i = 0; i < N_OF(uc); i++) {
        for (int d = 0; d < (i == 0 ? 2 : 1); d++) { /* f16: the first case */
            const char *dn = d ? "f16" : "bf16";
            char sass[2][1 << 16];
            for (int w = 0; w < (uc[i].without ? 2 : 1); w++) {
                char body[2048], text[4096];
                snprintf(body, sizeof body,
                         "q = input($[2, 2, 300, 128])\nk = input($[2, 2, 540, 128])\n"
                         "v = input($[2, 2, 540, 128])\nqk = matmul(q, k, transpose_b=true)\n"
                         "sc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n%s%s",
                         uc[i].rows, w ? uc[i].without : uc[i].with);
                graph_text(body, dn, text, sizeof text);
                planned p;
                plan_text(text, &p);
                kf_cuda_recipes *rec = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
                const kf_cuda_recipe *rc = attn_recipe(p.plan, rec);
                const kf_cuda_kernel *k = &rc->steps[0].kernel->kernel;
                /* fa3ftwr_ where no mask cuts tiles (176-key tiles, the
                 * default, Skv 540's last 12 keys a 32-key tile; t: the
                 * softmax's trees, head dim 128's default) */
                const bool f =
                    (strncmp(k->name, "fa3ft_", 6) == 0 || strncmp(k->name, "fa3ftl_", 7) == 0 ||
                     strncmp(k->name, "fa3ftwr_", 8) == 0) &&
                    strstr(rc->variants[0].how, "f32 scores") != NULL;
                if (f != uc[i].folds ||
                    (!uc[i].without && !strstr(k->source, "#define KF_SCORE_SCALE 0x1p+1f")))
                    fail_msg("%s [%s]%s: %s: %s", uc[i].name, dn, w ? " (without)" : "", k->name,
                             rc->variants[0].how);
                if (uc[i].without)
                    kf_sass_text(&MEM, k, sass[w], sizeof sass[w]);
                kf_cuda_recipes_destroy(rec);
                plan_release(&p);
            }
            if (uc[i].without && strcmp(sass[0], sass[1]) != 0)
                fail_msg("%s [%s]: the SASS differs from the graph's without the 1", uc[i].name,
                         dn);
            fprintf(stderr, "  %s [%s]: %s\n", uc[i].name, dn,
                    uc[i].without ? "folds, the same SASS as without the 1"
                                  : "its 2 folds alone (top_scale)");
        }
    }
}

/* The non-causal forms: 176-key tiles (the default where they apply;
 * KF_CUDA_RECIPE_ATTENTION_NARROW_KEYS keeps 128) and 2-CTA clusters sharing
 * K and V (KF_CUDA_RECIPE_ATTENTION_CLUSTER2): the default, narrow, clusters
 * of either and clusters with every softmax form too on the first case, the
 * default and clusters on the others (bf16; f16 the first). Where no mask
 * cuts tiles at head dim 128 the kernel takes them -- its name (w, c), its source and
 * the report say so; K's and V's map boxes are the key tile's rows (176),
 * halved in clusters; the launch is whole 2x1x1 clusters; the tiles fit
 * shared memory -- and compiles to HGMMA and UTMALDG, no spills (the
 * wide consumers hold 88 S, 44 P and 64 O registers of their 232). A causal
 * case, a head-dim-64 case and an odd count of query tiles keep the
 * default's shape. Outside clusters the wide form's ragged last key tile is
 * its keys rounded up to 16 where that is 64 or fewer, 32 at least, and
 * the keys make 4 tiles or more (KF_BC_LAST; letter r, the report says so;
 * Skv 570: a 64x48 HGMMA for its last 42 keys, 540: 64x32 for 12; not Skv
 * 650's 122, 600's 72 or 400's 48 in 3 tiles, where the narrower tile
 * spilled), the full 176
 * under KF_CUDA_RECIPE_ATTENTION_FULL_LAST_TILE (the form before). */
static void test_the_noncausal_wide_and_cluster_forms_compile(void **state) {
    (void)state;
    const uint64_t narrow = KF_CUDA_RECIPE_ATTENTION_NARROW_KEYS;
    const uint64_t cl2 = KF_CUDA_RECIPE_ATTENTION_CLUSTER2;
    const uint64_t every = KF_CUDA_RECIPE_ATTENTION_TREE_SOFTMAX |
                           KF_CUDA_RECIPE_ATTENTION_PIN_SOFTMAX | KF_CUDA_RECIPE_ATTENTION_TAIL_LPT;
    static const struct {
        const char *name, *body;
        bool wide, cluster; /* the forms apply */
        int bcl;            /* the last key tile's width where the wide form narrows it */
    } nc[] = {
        {"no mask, Sq 500 != Skv 650 (ragged 176- and 88-key tiles), head dim 128",
         "q = input($[2, 3, 500, 128])\nk = input($[2, 3, 650, 128])\nv = input($[2, 3, 650, "
         "128])\n"
         "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
         true, true, 0},
        {"no mask, Sq 300, Skv 570 (the last key tile 42 keys: 48 wide), head dim 128",
         "q = input($[2, 2, 300, 128])\nk = input($[2, 2, 570, 128])\nv = input($[2, 2, 570, "
         "128])\n"
         "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
         true, false, 48},
        {"an additive mask tensor [Sq, Skv] (a load: not wide), Sq 300, Skv 540, head dim 128",
         "q = input($[2, 2, 300, 128])\nk = input($[2, 2, 540, 128])\nv = input($[2, 2, 540, "
         "128])\n"
         "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
         "am = input($[300, 540])\ns1 = add(s0, am)\n",
         false, false, 0},
        {"softcap 30 tanh(s / 30), no mask, Sq 300 (odd query tiles), Skv 540, head dim 128",
         "q = input($[2, 2, 300, 128])\nk = input($[2, 2, 540, 128])\nv = input($[2, 2, 540, "
         "128])\n"
         "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\n"
         "cap = const($[], 30)\nt0 = div(s0, cap)\nt1 = tanh(t0)\ns1 = mul(t1, cap)\n",
         true, false, 32}, /* 12 keys past 3 x 176: 32 wide */
        {"GQA 4:1 no mask, Skv 600, head dim 128",
         "q = input($[1, 2, 4, 256, 128])\nk = input($[1, 2, 1, 600, 128])\n"
         "v = input($[1, 2, 1, 600, 128])\nqk = matmul(q, k, transpose_b=true)\n"
         "sc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
         true, true, 0},
        {"no mask, Sq 256, Skv 400 (3 key tiles: the last, 48 keys, not narrowed)",
         "q = input($[2, 2, 256, 128])\nk = input($[2, 2, 400, 128])\nv = input($[2, 2, 400, "
         "128])\n"
         "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
         true, true, 0},
        {"no mask, Skv 300 (two key tiles: not wide), head dim 128",
         "q = input($[2, 2, 256, 128])\nk = input($[2, 2, 300, 128])\nv = input($[2, 2, 300, "
         "128])\n"
         "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.08838834764)\ns1 = mul(qk, sc)\n",
         false, true, 0},
        {"causal, head dim 128 (tiles cut by the mask)", NULL, false, false, 0},
        {"no mask, head dim 64", NULL, false, false, 0},
    };
    for (size_t ci = 0; ci < N_OF(nc); ci++) {
        const char *body = nc[ci].body                              ? nc[ci].body
                           : strncmp(nc[ci].name, "causal", 6) == 0 ? cases[0].body
                                                                    : cases[1].body;
        for (int dt = 0; dt < 2; dt++) {
            char text[4096];
            graph_text(body, dt ? "f16" : "bf16", text, sizeof text);
            planned p;
            plan_text(text, &p);
            static const uint64_t forms[] = {0,
                                             KF_CUDA_RECIPE_ATTENTION_NARROW_KEYS,
                                             KF_CUDA_RECIPE_ATTENTION_CLUSTER2,
                                             KF_CUDA_RECIPE_ATTENTION_NARROW_KEYS |
                                                 KF_CUDA_RECIPE_ATTENTION_CLUSTER2,
                                             KF_CUDA_RECIPE_ATTENTION_CLUSTER2 | every,
                                             KF_CUDA_RECIPE_ATTENTION_FULL_LAST_TILE};
            for (size_t f = 0; f < N_OF(forms); f++) {
                /* the first case every way; the others the default and clusters, bf16;
                 * f16 clusters on the first (each compile is seconds of NVRTC) */
                if ((dt || ci) && f != 2 && !(ci == 0 && dt == 0) && !(dt == 0 && f == 0) &&
                    !(dt == 0 && ci == 1 && f == 5)) /* Skv 570 with a full last tile too */
                    continue;
                if (dt && ci)
                    continue;
                kf_cuda_recipes *r = kf_sass_recipes(&MEM, p.plan, "h100", NULL, forms[f]);
                const kf_cuda_recipe *rc = attn_recipe(p.plan, r);
                const kf_cuda_kstep *ks = rc->steps[0].kernel;
                const kf_cuda_kernel *k = &ks->kernel;
                const char *how = rc->variants[0].how;
                const bool w = nc[ci].wide && !(forms[f] & narrow);
                const bool c = nc[ci].cluster && (forms[f] & cl2);
                const char *u = strchr(k->name, '_');
                assert_non_null(u);
                const bool nw = memchr(k->name, 'w', (size_t)(u - k->name)) != NULL;
                const bool ncl = memchr(k->name, 'c', (size_t)(u - k->name)) != NULL;
                if (nw != w || ncl != c || (strstr(how, "176-key tiles") != NULL) != w ||
                    (strstr(how, "2-CTA clusters sharing K and V") != NULL) != c)
                    fail_msg("%s [%llx]: expected%s%s: %s: %s", nc[ci].name, (unsigned long long)forms[f],
                             w ? " wide" : "", c ? " clusters" : "", k->name, how);
                assert_non_null(
                    strstr(k->source, c ? "#define KF_CLUSTER 2" : "#define KF_CLUSTER 1"));
                assert_non_null(strstr(k->source, w ? "#define KF_BC " KF_STR(KF_SM90_BC_WIDE_T)
                                                    : "#define KF_BC 128"));
                assert_int_equal(ks->cluster[0], c ? 2 : 1);
                if (c)
                    assert_int_equal(ks->grid[0] % 2, 0);
                assert_true(ks->shared_bytes <= 227u * 1024u);
                for (int m = 1; m < 3; m++)
                    assert_int_equal(ks->tmaps[m].box[1],
                                     (w ? (unsigned)KF_SM90_BC_WIDE_T : 128u) / (c ? 2u : 1u));
                assert_int_equal(ks->tmaps[0].box[1], 128);
                /* the narrower last tile: outside clusters, unless the flag keeps it full */
                const bool full = (forms[f] & KF_CUDA_RECIPE_ATTENTION_FULL_LAST_TILE) != 0;
                const int bl = w && !c && !full ? nc[ci].bcl : 0;
                char def[40], hg[40];
                snprintf(def, sizeof def, "#define KF_BC_LAST %d\n", bl);
                snprintf(hg, sizeof hg, "HGMMA.64x%dx16", bl ? bl : 128);
                const bool nr = memchr(k->name, 'r', (size_t)(u - k->name)) != NULL;
                if (nr != (bl > 0) || !strstr(k->source, def) ||
                    (strstr(how, "the ragged last key tile narrower") != NULL) != (bl > 0))
                    fail_msg("%s [%llx]: expected the last key tile %d wide (0: full): %s: %s",
                             nc[ci].name, (unsigned long long)forms[f], bl, k->name, how);
                const char *const want[] = {"HGMMA", "UTMALDG", hg, NULL};
                const char *const why[] = {"wgmma fell back?", "no TMA loads",
                                           "the last key tile's Q.K^T"};
                kf_sass_check_ops(&MEM, k, want, why, NULL);
                fprintf(stderr, "  %s [%s, %llx]: %s compiles, no spills\n", nc[ci].name,
                        dt ? "f16" : "bf16", (unsigned long long)forms[f], k->name);
                kf_cuda_recipes_destroy(r);
            }
            plan_release(&p);
        }
    }
}

/* KF_CUDA_RECIPE_ATTENTION_F32_SCORE (the default: no flag gives the same
 * kernel): against the rounded form (KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE,
 * the default before), a causal score that is a scale of
 * Q.K^T by a constant that is not a power of two (1/sqrt(128) in bf16) keeps
 * no rounding (the inner score function returns s), leaves that constant,
 * exactly, to the softmax (KF_SCORE_SCALE), and compiles to fewer F2FP and
 * FMUL than the rounded kernel of the same graph (one of each a score), no
 * spills; the kernel (fa3ft_) and the report say so. A softcap score takes
 * f32 scores too (fa3ftlbeu_: its expression unrounded, its last scale, 30,
 * folded into KF_SCORE_SCALE: top_scale) with fewer F2FP and FMUL than its
 * rounded kernel. bf16 and f16 (causal), bf16 (softcap). */
static void test_f32_scores_leave_any_scale_to_the_softmax(void **state) {
    (void)state;
    static char sass[1 << 22];
    for (size_t v = 0; v < 3; v++) {
        const size_t ci = v < 2 ? 0 : 3; /* causal 1/sqrt(128); softcap */
        const char *dn = v == 1 ? "f16" : "bf16";
        char text[4096];
        graph_text(cases[ci].body, dn, text, sizeof text);
        planned p;
        plan_text(text, &p);
        kf_cuda_recipes *r0 =
            kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE);
        kf_cuda_recipes *r1 =
            kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_ATTENTION_F32_SCORE);
        kf_cuda_recipes *r2 = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
        /* f32 scores are the default: no flag gives the F32_SCORE kernel */
        assert_string_equal(attn_recipe(p.plan, r2)->steps[0].kernel->kernel.source,
                            attn_recipe(p.plan, r1)->steps[0].kernel->kernel.source);
        kf_cuda_recipes_destroy(r2);
        const kf_cuda_recipe *c0 = attn_recipe(p.plan, r0), *c1 = attn_recipe(p.plan, r1);
        const kf_cuda_kernel *k0 = &c0->steps[0].kernel->kernel;
        const kf_cuda_kernel *k1 = &c1->steps[0].kernel->kernel;
        {
            /* fa3ftlbeu_: a softcap's bounded scores take the fixed shift (and
             * a share of the exp2s on the FMA pipe; l: causal, the tail
             * longest first) */
            assert_non_null(strstr(k1->name, ci == 3 ? "fa3ftlbeu_" : "fa3ftl_"));
            assert_non_null(strstr(c1->variants[0].how, "f32 scores"));
            /* 1/sqrt(128) as the graph's constant holds it: 1.4140625 / 16
             * in bf16 and in f16 alike; the softcap's 30 */
            assert_non_null(strstr(k1->source, ci == 3 ? "#define KF_SCORE_SCALE 0x1.ep+4f"
                                                       : "#define KF_SCORE_SCALE 0x1.6ap-4f"));
            const char *inner = strstr(k1->source, "float kf_score_inner(");
            assert_non_null(inner);
            const char *end = strstr(inner, "return");
            assert_non_null(end);
            char body[2048];
            snprintf(body, sizeof body, "%.*s", (int)(end - inner), inner);
            if (strstr(body, "kf_round") || (ci == 0 && strstr(body, "kf_mul")))
                fail_msg("%s [%s]: the inner score still rounds or scales:\n%s", cases[ci].name,
                         dn, body);
            kf_sass_check_hopper(&MEM, k1);
            int n[2][2];
            const kf_cuda_kernel *ks[2] = {k0, k1};
            for (int i = 0; i < 2; i++) {
                kf_sass_text(&MEM, ks[i], sass, sizeof sass);
                n[i][0] = count_between(sass, sass + strlen(sass), "F2FP");
                n[i][1] = count_between(sass, sass + strlen(sass), "FMUL");
            }
            if (n[1][0] >= n[0][0] || n[1][1] >= n[0][1])
                fail_msg("%s [%s]: F2FP %d -> %d, FMUL %d -> %d: not fewer with f32 scores",
                         cases[ci].name, dn, n[0][0], n[1][0], n[0][1], n[1][1]);
            fprintf(stderr, "  %s [%s]: F2FP %d -> %d, FMUL %d -> %d\n", cases[ci].name, dn,
                    n[0][0], n[1][0], n[0][1], n[1][1]);
        }
        kf_cuda_recipes_destroy(r0);
        kf_cuda_recipes_destroy(r1);
        plan_release(&p);
    }
}

/* f32 scores (the default) on score expressions that are more than a scale of
 * Q.K^T (cg_attention.c: c.score_f32): every float node of ALiBi's and the
 * softcap's score functions unrounded (no kf_round_bf16, kf_rnd2_bf16 nor
 * bf16x2 op in them), where the rounded kernel (KF_CUDA_RECIPE_ATTENTION_
 * ROUNDED_SCORE) has all three. ALiBi bf16 (fa3f_, head dim 64): its
 * diagonal as float pairs (KF_DIAG_T float2), affine in kv (KF_DIAG_LIN: stepped along the
 * tile), no table (no KF_DIAG_TAB, no LDS in the main loop), no HADD2 or
 * HMUL2, and fewer instructions from Q.K^T's wait to P.V's than the rounded
 * kernel; in f16 no pair form. The softcap bf16 (fa3ftlbeu_): its 30 as
 * KF_SCORE_SCALE, s c / 30 one multiply by the constants' product, a quarter
 * of its exp2s by polynomial, and fewer instructions in the main loop. No
 * spills. */
static void test_f32_scores_keep_alibi_and_softcap_unrounded(void **state) {
    (void)state;
    static char sass[1 << 22];
    static const struct {
        size_t ci;
        const char *dn, *name;
    } vs[] = {{4, "bf16", "fa3f_"}, {4, "f16", "fa3f_"}, {3, "bf16", "fa3ftlbeu_"}};
    const uint64_t rs = KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE;
    for (size_t v = 0; v < N_OF(vs); v++) {
        const size_t ci = vs[v].ci;
        char text[4096];
        graph_text(cases[ci].body, vs[v].dn, text, sizeof text);
        planned p;
        plan_text(text, &p);
        kf_cuda_recipes *r[2] = {kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0),
                                 kf_sass_recipes(&MEM, p.plan, "h100", NULL, rs)};
        const kf_cuda_recipe *c0 = attn_recipe(p.plan, r[0]);
        const kf_cuda_kernel *k[2];
        for (int f = 0; f < 2; f++)
            k[f] = &attn_recipe(p.plan, r[f])->steps[0].kernel->kernel;
        if (strncmp(k[0]->name, vs[v].name, strlen(vs[v].name)) != 0 ||
            !strstr(c0->variants[0].how, "f32 scores"))
            fail_msg("%s [%s]: %s, expected %s with f32 scores: %s", cases[ci].name, vs[v].dn,
                     k[0]->name, vs[v].name, c0->variants[0].how);
        static const char *const rounds[3] = {"kf_round_bf16(", "kf_rnd2_bf16(", "kf_bop2<"};
        const char *fns = strstr(k[0]->source, "float kf_score_full(");
        const char *fns1 = strstr(k[1]->source, "float kf_score_full(");
        assert_non_null(fns);
        assert_non_null(fns1);
        for (int i = 0; i < 3; i++)
            if (strstr(fns, rounds[i]) || (!strcmp(vs[v].dn, "bf16") && !strstr(fns1, rounds[i])))
                fail_msg("%s [%s]: %s in the f32 score functions, or not in the rounded ones",
                         cases[ci].name, vs[v].dn, rounds[i]);
        if (strcmp(vs[v].dn, "bf16") != 0) {
            assert_null(strstr(k[0]->source, "#define KF_SCORE_PAIR"));
            fprintf(stderr, "  %s [%s]: %s, unrounded, no pair form\n", cases[ci].name, vs[v].dn,
                    k[0]->name);
        } else {
            if (ci == 4) {
                assert_non_null(strstr(k[0]->source, "#define KF_DIAG_T float2"));
                assert_non_null(strstr(k[0]->source, "#define KF_DIAG_LIN 1"));
                assert_null(strstr(k[0]->source, "#define KF_DIAG_TAB"));
                assert_non_null(strstr(k[1]->source, "#define KF_DIAG_TAB"));
            } else {
                assert_non_null(strstr(k[0]->source, "#define KF_SCORE_SCALE 0x1.ep+4f"));
                assert_non_null(strstr(k[0]->source, "#define KF_EXP2_POLY 2\n"));
                /* 0.0883789 (1/sqrt(128) in bf16) / 30 in f32: s c / 30 in one
                 * multiply */
                assert_non_null(strstr(k[0]->source, "__uint_as_float(0x3b411111u)"));
            }
            int n[2];
            for (int f = 0; f < 2; f++) {
                kf_sass_check_hopper(&MEM, k[f]);
                kf_sass_text(&MEM, k[f], sass, sizeof sass);
                const char *a = strstr(sass, "WARPGROUP.DEPBAR.LE gsb0, 0x1");
                const char *b = a ? strstr(a, "WARPGROUP.DEPBAR.LE gsb0, 0x0") : NULL;
                if (!b)
                    fail_msg("%s: no Q.K^T / P.V waits in the SASS", k[f]->name);
                n[f] = count_between(a, b, "        /*");
                if (f == 0 && (count_between(a, b, " LDS") || strstr(sass, "HADD2.BF16") ||
                               strstr(sass, "HMUL2.BF16")))
                    fail_msg("%s [%s]: LDS in the main loop, or bf16x2 arithmetic", cases[ci].name,
                             vs[v].dn);
            }
            if (n[0] >= n[1])
                fail_msg("%s [%s]: %d instructions in the main loop with f32 scores, %d rounded",
                         cases[ci].name, vs[v].dn, n[0], n[1]);
            fprintf(stderr, "  %s [%s]: %s, main loop %d -> %d instructions\n", cases[ci].name,
                    vs[v].dn, k[0]->name, n[1], n[0]);
        }
        for (int f = 0; f < 2; f++)
            kf_cuda_recipes_destroy(r[f]);
        plan_release(&p);
    }
}

/* Which kernel each mode gives, and why: on sm_90a the default is the sm_90a
 * kernel, and it visits fewer, larger causal tiles (the report counts them);
 * ATTENTION_FA2 gives the FA2 kernel there; sm_80 gets the FA2 kernel with
 * no word about sm_90a; a Q with four batch axes gets the FA2 kernel on
 * sm_90a and the report says why; UNFUSED wins over everything. */
static void test_attention_modes_give_the_kernels_they_name(void **state) {
    (void)state;
    char text[4096];
    graph_text(cases[0].body, "bf16", text, sizeof text);
    planned p;
    plan_text(text, &p);
    kf_cuda_recipes *r0 = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
    const char *how = attn_recipe(p.plan, r0)->variants[0].how;
    /* S 200: two query tiles of 128 rows, two key tiles; causal visits 1 + 2 */
    if (!strstr(how, "fused attention (sm_90a wgmma/TMA kernel)") ||
        !strstr(how, "3 of 4 tiles visited"))
        fail_msg("the default on sm_90a: %s", how);
    kf_cuda_recipes *r1 = kf_sass_recipes(&MEM, p.plan, NULL, "sm_80", 0);
    how = attn_recipe(p.plan, r1)->variants[0].how;
    if (!strstr(how, "fused attention (sm_80 mma.sync kernel)") || strstr(how, "sm_90a"))
        fail_msg("sm_80: %s", how);
    kf_cuda_recipes *r2 = kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_ATTENTION_FA2);
    how = attn_recipe(p.plan, r2)->variants[0].how;
    /* 64-row tiles: 4 x 4, causal visits 1 + 2 + 3 + 4 */
    if (!strstr(how, "fused attention (sm_80 mma.sync kernel)") ||
        !strstr(how, "10 of 16 tiles visited"))
        fail_msg("ATTENTION_FA2: %s", how);
    kf_cuda_recipes *r3 = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                                      KF_CUDA_RECIPE_ATTENTION_FA2 |
                                          KF_CUDA_RECIPE_UNFUSED_ATTENTION);
    how = attn_recipe(p.plan, r3)->variants[0].how;
    if (!strstr(how, "unfused fallback"))
        fail_msg("unfused wins: %s", how);
    kf_cuda_recipes_destroy(r0);
    kf_cuda_recipes_destroy(r1);
    kf_cuda_recipes_destroy(r2);
    kf_cuda_recipes_destroy(r3);
    plan_release(&p);

    plan_text("kfg 1\nq = input(bf16[2, 2, 2, 2, 70, 64])\nk = input(bf16[2, 2, 2, 2, 70, 64])\n"
              "v = input(bf16[2, 2, 2, 2, 70, 64])\nqk = matmul(q, k, transpose_b=true)\n"
              "p = softmax(qk)\no = matmul(p, v)\noutput o\n",
              &p);
    kf_cuda_recipes *r4 = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
    how = attn_recipe(p.plan, r4)->variants[0].how;
    if (!strstr(how, "fused attention (sm_80 mma.sync kernel)") ||
        !strstr(how, "not the sm_90a kernel: Q has more than 3 batch axes"))
        fail_msg("four batch axes: %s", how);
    kf_cuda_recipes_destroy(r4);
    plan_release(&p);

    assert_int_equal(kf_cuda_recipe_flags(0, KF_GEMM_CUBLASLT, KF_ATTENTION_AUTO), 0u);
    assert_int_equal(kf_cuda_recipe_flags(0, KF_GEMM_CUBLASLT, KF_ATTENTION_SM90), 0u);
    assert_int_equal(kf_cuda_recipe_flags(0, KF_GEMM_CUBLASLT, KF_ATTENTION_FA2),
                     KF_CUDA_RECIPE_ATTENTION_FA2);
    assert_int_equal(kf_cuda_recipe_flags(0, KF_GEMM_CUBLASLT, KF_ATTENTION_UNFUSED),
                     KF_CUDA_RECIPE_UNFUSED_ATTENTION);
    assert_int_equal(
        kf_cuda_recipe_flags(KF_FLAG_UNFUSED_ATTENTION, KF_GEMM_CUBLASLT, KF_ATTENTION_FA2),
        KF_CUDA_RECIPE_UNFUSED_ATTENTION);
}

/* The log-sum-exp as a second output (item 7 of issue 14): a logsumexp of
 * the scores over the keys, of the scores themselves or of their cast to
 * f32, joins the attention group (its plan writes O and lse, the plan check
 * passes); the sm_90a kernel (HGMMA, UTMALDG, no spills) and the FA2 kernel
 * for sm_80 write it, each with an lse parameter; a short query takes the
 * FA2 kernel rather than the decode kernels, which write O alone; the
 * unfused path, which writes O alone, refuses the group and says why. */
static void test_attention_log_sum_exp_is_a_second_output_of_the_fused_kernels(void **state) {
    (void)state;
    static const struct {
        const char *graph;
        int sq;
    } lse_cases[] = {
        {"kfg 1\nq = input(bf16[1, 3, 200, 64])\nk = input(bf16[1, 3, 200, 64])\n"
         "v = input(bf16[1, 3, 200, 64])\nqk = matmul(q, k, transpose_b=true)\n"
         "sc = const(bf16[], 0.125)\ns0 = mul(qk, sc)\nrow = iota(i32[200, 200], axis=0)\n"
         "col = iota(i32[200, 200], axis=1)\nkeep = ge(row, col)\nninf = const(bf16[], -inf)\n"
         "s1 = where(keep, s0, ninf)\np = softmax(s1)\no = matmul(p, v)\n"
         "s32 = cast(s1, f32)\nlse = logsumexp(s32, axis=-1)\noutput o\noutput lse\n",
         200},
        {"kfg 1\nq = input(f16[2, 2, 4, 128])\nk = input(f16[2, 2, 333, 128])\n"
         "v = input(f16[2, 2, 333, 128])\nqk = matmul(q, k, transpose_b=true)\n"
         "sc = const(f16[], 0.08838834764)\ns1 = mul(qk, sc)\np = softmax(s1)\n"
         "o = matmul(p, v)\nlse = logsumexp(s1, axis=-1, keepdim=true)\noutput lse\n"
         "output o\n",
         4},
    };
    for (size_t i = 0; i < sizeof lse_cases / sizeof lse_cases[0]; i++) {
        planned p;
        plan_text(lse_cases[i].graph, &p);
        const kf_group *g = NULL;
        for (uint32_t gi = 0; gi < p.plan->n_groups; gi++)
            if (p.plan->groups[gi].kind == KF_GROUP_ATTENTION)
                g = &p.plan->groups[gi];
        assert_non_null(g);
        assert_int_equal(p.plan->n_groups, 1);
        assert_int_not_equal(g->attn.lse, KF_NONE);
        assert_int_equal(p.plan->graph->nodes[g->attn.lse]->op, KF_OP_LOGSUMEXP);
        assert_int_equal(g->n_writes, 2);
        assert_int_equal(kf_plan_check(p.plan, 7, NULL), KF_OK);
        /* sm_90a: its own kernel (a decode-length query too), writing lse */
        kf_cuda_recipes *r0 = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
        const kf_cuda_recipe *rc = attn_recipe(p.plan, r0);
        if (!strstr(rc->variants[0].how, "fused attention (sm_90a wgmma/TMA kernel)"))
            fail_msg("case %zu, sm_90a: %s", i, rc->variants[0].how);
        const kf_cuda_kernel *k = &rc->steps[0].kernel->kernel;
        assert_non_null(strstr(k->source, "#define KF_LSE p"));
        assert_int_equal(k->n_params, 5);
        kf_sass_check_hopper(&MEM, k);
        /* sm_80: the FA2 kernel, never the decode kernels */
        kf_cuda_recipes *r1 = kf_sass_recipes(&MEM, p.plan, NULL, "sm_80", 0);
        rc = attn_recipe(p.plan, r1);
        if (!strstr(rc->variants[0].how, "fused attention (sm_80 mma.sync kernel)"))
            fail_msg("case %zu, sm_80: %s", i, rc->variants[0].how);
        k = &rc->steps[0].kernel->kernel;
        assert_non_null(strstr(k->source, "#define KF_LSE p"));
        kf_sass_check_ampere(&MEM, k);
        /* unfused: refused, with the reason */
        kf_cuda_target t;
        assert_int_equal(kf_cuda_target_for_device("h100", &t), KF_OK);
        t.flags = KF_CUDA_RECIPE_UNFUSED_ATTENTION;
        kf_cuda_recipes *r2 = NULL;
        char err[KF_MSG_MAX] = "";
        assert_int_equal(kf_cuda_recipes_create(p.plan, &t, &MEM, &r2, err), KF_ERR_UNSUPPORTED);
        assert_null(r2);
        if (!strstr(err, "log-sum-exp") || !strstr(err, "KF_FLAG_UNFUSED_ATTENTION"))
            fail_msg("case %zu, unfused: %s", i, err);
        fprintf(stderr, "  lse case %zu (sq %d): ok\n", i, lse_cases[i].sq);
        kf_cuda_recipes_destroy(r0);
        kf_cuda_recipes_destroy(r1);
        plan_release(&p);
    }
}

static void test_sm90_attention_source_is_deterministic(void **state) {
    (void)state;
    char text[4096];
    graph_text(cases[3].body, "bf16", text, sizeof text);
    planned p;
    plan_text(text, &p);
    kf_cuda_recipes *r1 = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
    kf_cuda_recipes *r2 = kf_sass_recipes(&MEM, p.plan, "h200", NULL, 0);
    const kf_cuda_kernel *k1 = &attn_recipe(p.plan, r1)->steps[0].kernel->kernel;
    const kf_cuda_kernel *k2 = &attn_recipe(p.plan, r2)->steps[0].kernel->kernel;
    assert_string_equal(k1->source, k2->source);
    assert_non_null(strstr(k1->name, "sm90a"));
    kf_cuda_recipes_destroy(r1);
    kf_cuda_recipes_destroy(r2);
    plan_release(&p);
}

/* The sm_90a kernel's rounded form (KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE;
 * f32 scores, the default, fold any constant) folds a power-of-two scale of
 * Q.K^T into its softmax's exp2 (KF_SCORE_SCALE; the score functions then
 * round s unscaled) only where that is exact: the score is the scale, or the scale under a -inf
 * mask, in bf16 (f32's exponents). Not in f16, not for a scale that is no
 * power of two, not when another node reads the scaled score (softcap's
 * division), not under a finite fill. (The GPU suite runs the folded
 * kernels against the reference: test_cuda_exec.) */
static void test_a_power_of_two_scale_is_left_to_the_softmax_where_exact(void **state) {
    (void)state;
    static const char *const causal =
        "row = iota(i32[200, 200], axis=0)\ncol = iota(i32[200, 200], axis=1)\n"
        "keep = ge(row, col)\n";
    static const struct {
        const char *name, *dt, *scale, *tail, *want;
        int d;
    } fc[] = {
        {"causal, 1/8, bf16", "bf16", "0.125",
         "ninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n", "0x1p-3f", 64},
        /* past a multiply by 1 (past_unit_muls) */
        {"no mask, 1/4, then * 1, bf16", "bf16", "0.25", "one = const($[], 1)\ns1 = mul(s0, one)\n",
         "0x1p-2f", 64},
        {"no mask, 1/4, then * 2, bf16", "bf16", "0.25", "two = const($[], 2)\ns1 = mul(s0, two)\n",
         "0x1p+0f", 64},
        {"no mask, 2, bf16", "bf16", "2", "", "0x1p+1f", 128},
        {"causal, 1/8, f16", "f16", "0.125",
         "ninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n", "0x1p+0f", 64},
        {"causal, 1/sqrt(128), bf16", "bf16", "0.08838834764",
         "ninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n", "0x1p+0f", 128},
        {"finite fill, 1/8, bf16", "bf16", "0.125",
         "fill = const($[], -10000)\ns1 = where(keep, s0, fill)\n", "0x1p+0f", 64},
        {"softcap, 1/8, bf16", "bf16", "0.125",
         "cap = const($[], 30)\nt0 = div(s0, cap)\nt1 = tanh(t0)\ns1 = mul(t1, cap)\n", "0x1p+0f",
         64},
    };
    for (size_t i = 0; i < sizeof fc / sizeof fc[0]; i++) {
        char body[2048];
        /* "no mask, 2": the scale is the score itself (s1) */
        bool bare = fc[i].tail[0] == 0;
        snprintf(body, sizeof body,
                 "q = input($[1, 2, 200, %d])\nk = input($[1, 2, 200, %d])\n"
                 "v = input($[1, 2, 200, %d])\nqk = matmul(q, k, transpose_b=true)\n"
                 "sc = const($[], %s)\n%s = mul(qk, sc)\n%s%s",
                 fc[i].d, fc[i].d, fc[i].d, fc[i].scale, bare ? "s1" : "s0",
                 strstr(fc[i].tail, "keep") ? causal : "", fc[i].tail);
        char text[4096];
        graph_text(body, fc[i].dt, text, sizeof text);
        planned p;
        plan_text(text, &p);
        kf_cuda_recipes *rec =
            kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE);
        const kf_cuda_recipe *rc = attn_recipe(p.plan, rec);
        if (!strstr(rc->variants[0].how, "fused attention (sm_90a wgmma/TMA kernel)"))
            fail_msg("%s: expected the sm_90a kernel: %s", fc[i].name, rc->variants[0].how);
        const char *src = rc->steps[0].kernel->kernel.source;
        char want[64];
        snprintf(want, sizeof want, "#define KF_SCORE_SCALE %s\n", fc[i].want);
        if (!strstr(src, want))
            fail_msg("%s: no '%s' in the source", fc[i].name, want);
        /* folded: the score functions round s itself, no multiply left */
        const char *inner = strstr(src, "kf_score_full(float s");
        assert_non_null(inner);
        const char *end = strstr(inner, "\n}\n");
        assert_non_null(end);
        const char *m = strstr(inner, "kf_mul(");
        const bool mul = m && m < end;
        if (mul != (strcmp(fc[i].want, "0x1p+0f") == 0))
            fail_msg("%s: kf_score_full %s a multiply", fc[i].name, mul ? "keeps" : "lost");
        fprintf(stderr, "  %s: KF_SCORE_SCALE %s ok\n", fc[i].name, fc[i].want);
        kf_cuda_recipes_destroy(rec);
        plan_release(&p);
    }
}

/* A softcap score (30 tanh(s / 30)) is bounded: the default sm_90a kernel
 * (fa3ftlbeu_, f32 scores: its 30 folded into the softmax's scale, top_scale)
 * takes the bound as a fixed softmax shift (KF_SCORE_MAX, 30 grown by 2^-5
 * for the roundings, over the folded 30: 1.03125) in bf16, the report says so, and its SASS has no
 * FMNMX (no row max) and fewer FMUL (no rescale of O) than the running-max
 * kernel of KF_CUDA_RECIPE_ATTENTION_ROW_MAX, which neither defines the shift
 * nor says so; no spills. In f16 (P's narrow exponents: e^-62 is no f16) and
 * for ALiBi's unbounded score the running max stays. */
static void test_a_bounded_score_takes_a_fixed_softmax_shift(void **state) {
    (void)state;
    static char sass[1 << 22];
    for (size_t v = 0; v < 3; v++) {
        const size_t ci = v < 2 ? 3 : 4; /* softcap; ALiBi */
        const char *dn = v == 1 ? "f16" : "bf16";
        char text[4096];
        graph_text(cases[ci].body, dn, text, sizeof text);
        planned p;
        plan_text(text, &p);
        kf_cuda_recipes *r0 = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
        kf_cuda_recipes *r1 =
            kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_ATTENTION_ROW_MAX);
        const kf_cuda_recipe *c0 = attn_recipe(p.plan, r0), *c1 = attn_recipe(p.plan, r1);
        const kf_cuda_kernel *k0 = &c0->steps[0].kernel->kernel;
        const kf_cuda_kernel *k1 = &c1->steps[0].kernel->kernel;
        assert_null(strstr(k1->source, "#define KF_SCORE_MAX"));
        assert_null(strstr(c1->variants[0].how, "fixed softmax shift"));
        if (ci == 4 || v == 1) {
            assert_null(strstr(k0->source, "#define KF_SCORE_MAX"));
            assert_null(strstr(c0->variants[0].how, "fixed softmax shift"));
            assert_string_equal(k0->source, k1->source);
            fprintf(stderr, "  %s [%s]: the running max\n", cases[ci].name, dn);
        } else {
            assert_true(strncmp(k0->name, "fa3ftlbeu_", 10) == 0);
            assert_non_null(strstr(k0->source, "#define KF_SCORE_MAX 0x1.08p+0f"));
            assert_non_null(strstr(k0->source, "#define KF_SCORE_SCALE 0x1.ep+4f"));
            assert_non_null(strstr(c0->variants[0].how, "bounded scores, a fixed softmax shift"));
            kf_sass_check_hopper(&MEM, k0);
            int n[2][2];
            const kf_cuda_kernel *ks[2] = {k0, k1};
            for (int i = 0; i < 2; i++) {
                kf_sass_text(&MEM, ks[i], sass, sizeof sass);
                /* the row max's FMNMX; the exp2 polynomial's clamp is
                 * FMNMX.NAN */
                n[i][0] = count_between(sass, sass + strlen(sass), "FMNMX ");
                n[i][1] = count_between(sass, sass + strlen(sass), "FMUL");
            }
            if (n[0][0] != 0 || n[1][0] < 64 || n[0][1] >= n[1][1])
                fail_msg("%s [%s]: FMNMX %d, FMUL %d fixed shift; FMNMX %d, FMUL %d row max",
                         cases[ci].name, dn, n[0][0], n[0][1], n[1][0], n[1][1]);
            fprintf(stderr, "  %s [%s]: %s, FMNMX %d -> 0, FMUL %d -> %d\n", cases[ci].name, dn,
                    k0->name, n[1][0], n[1][1], n[0][1]);
        }
        kf_cuda_recipes_destroy(r0);
        kf_cuda_recipes_destroy(r1);
        plan_release(&p);
    }
}

/* A softcap (30 tanh(s / 30), bounded: cg_attention.c, score_max) at head
 * dim 128 holds two MUFU ops a score; the rounded sm_90a kernel
 * (KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE with each flag below: the tanh's
 * rational is its pair form's; the f32 default's share is
 * test_f32_scores_...'s) takes a quarter of its exp2s on the FMA pipe
 * (fa3tlbe_: KF_EXP2_POLY 2; the same kernel as
 * KF_CUDA_RECIPE_ATTENTION_SOFTCAP_MUFU | KF_CUDA_RECIPE_ATTENTION_EXP2_POLY),
 * SOFTCAP_MUFU keeps them on MUFU (fa3tlb_, the kernel before). Every form
 * compiles with no spills; the exp2 share has fewer MUFU.EX2 than the
 * kernel before and the same MUFU.TANH. (The tanh share, TANH_POLY, measured
 * slower, was retired by win18 to reuse its bit.) ALiBi (unbounded) and the
 * causal scale (no tanh) take none of it; bf16 causal S 150. */
static void test_a_softcap_takes_shares_of_its_mufu_ops_on_the_fma_pipe(void **state) {
    (void)state;
    static char sass[1 << 22];
    const uint64_t mufu = KF_CUDA_RECIPE_ATTENTION_SOFTCAP_MUFU;
    const uint64_t forms[3] = {mufu, 0, mufu | KF_CUDA_RECIPE_ATTENTION_EXP2_POLY};
    static const char *const names[3] = {"fa3tlb_", "fa3tlbe_", "fa3tlbe_"};
    char text[4096];
    graph_text(cases[3].body, "bf16", text, sizeof text);
    planned p;
    plan_text(text, &p);
    int tanh[3], ex2[3];
    char *dflt = NULL;
    for (int f = 0; f < 3; f++) {
        kf_cuda_recipes *r = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                                             forms[f] | KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE);
        const kf_cuda_recipe *rc = attn_recipe(p.plan, r);
        const kf_cuda_kernel *k = &rc->steps[0].kernel->kernel;
        if (strncmp(k->name, names[f], strlen(names[f])) != 0 ||
            (strstr(k->source, "#define KF_EXP2_POLY 2\n") != NULL) != (f >= 1))
            fail_msg("form %d: %s, expected %s: %s", f, k->name, names[f], rc->variants[0].how);
        if (f == 1)
            dflt = strdup(k->source);
        else if (f == 2 && (!dflt || strcmp(dflt, k->source) != 0))
            fail_msg("the default's source is not SOFTCAP_MUFU | EXP2_POLY's");
        kf_sass_check_hopper(&MEM, k);
        kf_sass_text(&MEM, k, sass, sizeof sass);
        tanh[f] = count_between(sass, sass + strlen(sass), "MUFU.TANH");
        ex2[f] = count_between(sass, sass + strlen(sass), "MUFU.EX2");
        fprintf(stderr, "  softcap [%llx]: %s, MUFU.TANH %d, MUFU.EX2 %d, no spills\n",
                (unsigned long long)forms[f], k->name, tanh[f], ex2[f]);
        kf_cuda_recipes_destroy(r);
    }
    if (!(ex2[1] < ex2[0] && tanh[1] == tanh[0] && ex2[2] == ex2[1] && tanh[2] == tanh[1]))
        fail_msg("MUFU.TANH %d %d %d, MUFU.EX2 %d %d %d", tanh[0], tanh[1], tanh[2], ex2[0],
                 ex2[1], ex2[2]);
    free(dflt);
    plan_release(&p);
    for (size_t ci = 0; ci < 2; ci++) {
        graph_text(cases[ci == 0 ? 0 : 4].body, "bf16", text, sizeof text);
        plan_text(text, &p);
        kf_cuda_recipes *r = kf_sass_recipes(&MEM, p.plan, "h100", NULL, 0);
        const kf_cuda_kernel *k = &attn_recipe(p.plan, r)->steps[0].kernel->kernel;
        if (strstr(k->source, "#define KF_EXP2_POLY 2"))
            fail_msg("%s: %s takes a share it has no use for", cases[ci == 0 ? 0 : 4].name,
                     k->name);
        kf_cuda_recipes_destroy(r);
        plan_release(&p);
    }
}

/* The softmax's exp2s: by default every one is MUFU.EX2 (KF_EXP2_POLY 0);
 * KF_CUDA_RECIPE_ATTENTION_EXP2_POLY moves a quarter of a key tile's column
 * groups at head dim 128 and an eighth at 64 to the FMA-pipe polynomial
 * (KF_EXP2_POLY 2 or 1 of 8: kf_ex2_poly, whose clamp is an FMNMX.NAN;
 * kernel letter e, and the report says so). Causal head dim 128 in bf16: both
 * compile with no spills and the flag's kernel has fewer MUFU.EX2 (106 -> 82
 * when it came: causal S 200); Sq 77 != Skv 333 at head dim 64 in f16 takes
 * its eighth (the source); a score that reads a tensor over two key tiles or
 * fewer (the additive mask [120, 140]: 56 bytes spilled with a quarter) takes
 * none under the flag either. */
static void test_the_exp2_share_by_polynomial(void **state) {
    (void)state;
    static char sass[1 << 22];
    const char *const defs[3] = {"#define KF_EXP2_POLY 2\n", "#define KF_EXP2_POLY 1\n",
                                 "#define KF_EXP2_POLY 0\n"};
    const char *const form = "exp2s partly by polynomial";
    int mufu[2] = {0, 0}, nan[2] = {0, 0};
    for (size_t ci = 0; ci < 3; ci++) {
        /* causal D128; Sq != Skv D64; the additive mask over two tiles */
        const size_t cx = ci == 0 ? 0 : ci == 1 ? 1 : 5;
        char text[4096];
        graph_text(cases[cx].body, ci == 0 ? "bf16" : "f16", text, sizeof text);
        planned p;
        plan_text(text, &p);
        for (int i = 0; i < 2; i++) {
            kf_cuda_recipes *r = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                                                 i ? KF_CUDA_RECIPE_ATTENTION_EXP2_POLY : 0);
            const kf_cuda_recipe *rc = attn_recipe(p.plan, r);
            const kf_cuda_kernel *k = &rc->steps[0].kernel->kernel;
            const char *def = i ? defs[ci] : "#define KF_EXP2_POLY 0\n";
            if (!strstr(k->source, def))
                fail_msg("%s [flag %d]: no '%s' in the source", k->name, i, def);
            const bool took = i && ci < 2;
            const char *us = strchr(k->name, '_');
            const bool e = us && memchr(k->name + 3, 'e', (size_t)(us - k->name - 3)) != NULL;
            if ((strstr(rc->variants[0].how, form) != NULL) != took || e != took)
                fail_msg("%s [flag %d]: %s: %s", cases[cx].name, i, k->name,
                         rc->variants[0].how);
            if (ci == 0) {
                kf_sass_check_hopper(&MEM, k);
                kf_sass_text(&MEM, k, sass, sizeof sass);
                mufu[i] = count_between(sass, sass + strlen(sass), "MUFU.EX2");
                nan[i] = count_between(sass, sass + strlen(sass), "FMNMX.NAN");
            }
            kf_cuda_recipes_destroy(r);
        }
        plan_release(&p);
    }
    if (mufu[1] >= mufu[0] || nan[0] != 0 || nan[1] == 0)
        fail_msg("MUFU.EX2 %d / %d, FMNMX.NAN %d / %d (default / EXP2_POLY)", mufu[0], mufu[1],
                 nan[0], nan[1]);
    fprintf(stderr, "  causal D128 bf16: MUFU.EX2 %d -> %d, FMNMX.NAN %d -> %d\n", mufu[0],
            mufu[1], nan[0], nan[1]);
}

/* The pair form of the inner score (cg_attention_pair.c, kf_score_pair), a
 * form of the rounded scores (KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE: f32
 * scores round nothing to pair up): ALiBi's (bf16) and the softcap's (bf16,
 * its fixed shift too) rounded sm_90a kernels define it and compile to
 * bf16x2 arithmetic (ALiBi: the bias times the slope and the sum, HMUL2
 * and HADD2; the softcap: the cap's product, HMUL2); no spills (ALiBi with
 * its diagonal, the only form since att17b retired DIAG_EACH_ROW; both
 * without the split, which is off by default and adds a second path). f16
 * scores and a folded scale (causal) keep the scalar form. (The scalar form
 * on demand, the retired ATTENTION_SCALAR_SCORE, took more instructions in
 * both pair cases; att16 reused its bit.) */
static void test_the_pair_form_of_the_score_takes_bf16x2_arithmetic(void **state) {
    (void)state;
    static char sass[1 << 22];
    static const struct {
        size_t ci;
        const char *dn;
        bool pair;
        const char *ops[3];
    } v[] = {
        {4, "bf16", true, {"HMUL2.BF16", "HADD2.BF16", NULL}},
        {3, "bf16", true, {"HMUL2.BF16", NULL, NULL}},
        {3, "f16", false, {NULL, NULL, NULL}},
        {0, "bf16", false, {NULL, NULL, NULL}},
    };
    for (size_t i = 0; i < N_OF(v); i++) {
        char text[4096];
        graph_text(cases[v[i].ci].body, v[i].dn, text, sizeof text);
        planned p;
        plan_text(text, &p);
        /* the pair form without its split (its own test); the causal scale
         * folds in f32 (the default) */
        const uint64_t one = v[i].ci == 0 ? 0 : KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE;
        kf_cuda_recipes *r0 = kf_sass_recipes(&MEM, p.plan, "h100", NULL, one);
        const kf_cuda_kernel *k0 = &attn_recipe(p.plan, r0)->steps[0].kernel->kernel;
        if (!v[i].pair) {
            assert_null(strstr(k0->source, "#define KF_SCORE_PAIR"));
            fprintf(stderr, "  %s [%s]: the scalar form\n", cases[v[i].ci].name, v[i].dn);
        } else {
            assert_non_null(strstr(k0->source, "#define KF_SCORE_PAIR"));
            kf_sass_check_hopper(&MEM, k0);
            kf_sass_text(&MEM, k0, sass, sizeof sass);
            for (int o = 0; o < 3 && v[i].ops[o]; o++)
                if (!strstr(sass, v[i].ops[o]))
                    fail_msg("%s [%s]: no %s in the pair form's SASS", cases[v[i].ci].name,
                             v[i].dn, v[i].ops[o]);
            fprintf(stderr, "  %s [%s]: %d instructions, the pair form\n", cases[v[i].ci].name,
                    v[i].dn, count_between(sass, sass + strlen(sass), "        /*"));
        }
        kf_cuda_recipes_destroy(r0);
        plan_release(&p);
    }
}

/* The pair form's split at a tanh (cg_attention_pair.c, pair_split): the
 * softcap's rounded bf16 kernel (KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE)
 * under KF_CUDA_RECIPE_ATTENTION_TANH_SKIP (off by default: it loses on large
 * scores) defines kf_score_pre / kf_score_post /
 * kf_score_post_ident and KF_TANH_IDENT_MAX, the bound below which it takes
 * tanh(x) as x: over every bf16 value, tanh rounded to bf16 as the reference
 * evaluator rounds it (kf_ir_scalar, kf_ir_round) is x itself up to the bound
 * (either sign) and not at the next value, so the bound is the largest
 * right one. Its SASS holds the warp's vote and the |x| maximum (VOTE.ALL,
 * HMNMX2), no spills; the default kernel has no split and no HMNMX2. f16
 * keeps no pair form at all. */
static void test_the_score_splits_where_tanh_rounds_to_its_operand(void **state) {
    (void)state;
    static char sass[1 << 22];
    char text[4096];
    graph_text(cases[3].body, "bf16", text, sizeof text);
    planned p;
    plan_text(text, &p);
    const uint64_t rs = KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE;
    kf_cuda_recipes *r0 =
        kf_sass_recipes(&MEM, p.plan, "h100", NULL, KF_CUDA_RECIPE_ATTENTION_TANH_SKIP | rs);
    kf_cuda_recipes *r1 = kf_sass_recipes(&MEM, p.plan, "h100", NULL, rs);
    const kf_cuda_kernel *k0 = &attn_recipe(p.plan, r0)->steps[0].kernel->kernel;
    const kf_cuda_kernel *k1 = &attn_recipe(p.plan, r1)->steps[0].kernel->kernel;
    assert_non_null(strstr(k0->source, "#define KF_SCORE_SPLIT"));
    assert_non_null(strstr(k0->source, "kf_score_post_ident"));
    assert_null(strstr(k1->source, "#define KF_SCORE_SPLIT"));
    assert_non_null(strstr(k1->source, "#define KF_SCORE_PAIR"));
    const char *b = strstr(k0->source, "#define KF_TANH_IDENT_MAX ");
    assert_non_null(b);
    const unsigned bound = (unsigned)strtoul(b + strlen("#define KF_TANH_IDENT_MAX "), NULL, 0);
    for (unsigned h = 0; h <= bound + 1; h++)
        for (int sg = 0; sg < 2; sg++) {
            const uint32_t bits = (h | (sg ? 0x8000u : 0u)) << 16;
            float x;
            memcpy(&x, &bits, sizeof x);
            const double t =
                kf_ir_round(KF_DTYPE_BF16, kf_ir_scalar(KF_OP_TANH, KF_DTYPE_BF16, x, 0, 0));
            if ((t == (double)x) != (h <= bound))
                fail_msg("bf16 0x%04x (%g): tanh rounds to %.9g, bound 0x%04x", bits >> 16,
                         (double)x, t, bound);
        }
    kf_sass_check_hopper(&MEM, k0);
    kf_sass_text(&MEM, k0, sass, sizeof sass);
    if (!strstr(sass, "VOTE.ALL") || !strstr(sass, "HMNMX2"))
        fail_msg("%s: no VOTE.ALL or HMNMX2 in the split's SASS", k0->name);
    kf_sass_text(&MEM, k1, sass, sizeof sass);
    assert_null(strstr(sass, "HMNMX2"));
    fprintf(stderr, "  softcap [bf16]: split, tanh(x) = x for |x| <= 0x%04x\n", bound);
    kf_cuda_recipes_destroy(r0);
    kf_cuda_recipes_destroy(r1);
    plan_release(&p);
}

/* The pair form's diagonal (cg_attention_pair.c, pair_diag): ALiBi's bias,
 * a function of kv - q, once for a thread's two rows (kf_score_diag at 17 key
 * pairs, kf_score_pair_dg at 32): the rounded bf16 kernel
 * (KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE; f32 scores: test_f32_scores_...
 * below) defines KF_SCORE_DIAG, HGMMA and no spills; the softcap (no
 * diagonal) and the causal score (no pair form) do not define it. (scr13
 * measured it against the diagonal for each row: 371 -> 280 instructions
 * the inner tile's score; att17b retired that form's flag, DIAG_EACH_ROW.) */
static void test_the_score_diagonal_is_computed_once_for_two_rows(void **state) {
    (void)state;
    static const size_t cis[] = {0, 3, 4}; /* causal; softcap; ALiBi */
    for (size_t v = 0; v < N_OF(cis); v++) {
        const size_t ci = cis[v];
        char text[4096];
        graph_text(cases[ci].body, "bf16", text, sizeof text);
        planned p;
        plan_text(text, &p);
        const uint64_t rs = KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE;
        kf_cuda_recipes *r0 = kf_sass_recipes(&MEM, p.plan, "h100", NULL, rs);
        const kf_cuda_kernel *k0 = &attn_recipe(p.plan, r0)->steps[0].kernel->kernel;
        if (ci != 4) {
            assert_null(strstr(k0->source, "#define KF_SCORE_DIAG"));
        } else {
            assert_non_null(strstr(k0->source, "#define KF_SCORE_DIAG"));
            kf_sass_check_hopper(&MEM, k0);
            fprintf(stderr, "  %s [bf16]: the diagonal once for two rows\n", cases[ci].name);
        }
        kf_cuda_recipes_destroy(r0);
        plan_release(&p);
    }
}

/* ALiBi's diagonal with its part free of loads (the bf16(kv - q) pairs) in
 * a table in shared memory (cg_attention_pair.c, pair_dtab), and the causal
 * mask's edge tiles by the pair form (KF_SCORE_DIAG_EDGE): the rounded bf16
 * kernel (KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE) defines KF_DIAG_TAB and
 * KF_SCORE_DIAG_EDGE and reads the table in its main loop (an LDS for each
 * of the tile's 17 key pairs, between Q.K^T's wait and P.V's); HGMMA and no
 * local memory; the causal score (no diagonal) and the f16 ALiBi kernel (no
 * pair form) define neither. (The form computing the pairs on every tile,
 * flag DIAG_COMPUTE, was retired by att18; the edge tiles' scalar score,
 * flag EDGE_SCALAR, by att17c.) */
static void test_the_score_diagonal_reads_its_load_free_part_from_a_table(void **state) {
    (void)state;
    static char sass[1 << 22];
    static const struct {
        size_t ci;
        const char *dn;
    } vs[] = {{0, "bf16"}, {4, "f16"}, {4, "bf16"}}; /* causal; ALiBi */
    for (size_t v = 0; v < N_OF(vs); v++) {
        const size_t ci = vs[v].ci;
        char text[4096];
        graph_text(cases[ci].body, vs[v].dn, text, sizeof text);
        planned p;
        plan_text(text, &p);
        kf_cuda_recipes *r = kf_sass_recipes(&MEM, p.plan, "h100", NULL,
                                             KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE);
        const kf_cuda_kernel *k = &attn_recipe(p.plan, r)->steps[0].kernel->kernel;
        if (v < 2) {
            assert_null(strstr(k->source, "#define KF_DIAG_TAB"));
            assert_null(strstr(k->source, "#define KF_SCORE_DIAG_EDGE"));
        } else {
            assert_non_null(strstr(k->source, "#define KF_DIAG_TAB"));
            assert_non_null(strstr(k->source, "#define KF_SCORE_DIAG_EDGE"));
            assert_null(strstr(k->source, "#define KF_DIAG_ADD"));
            kf_sass_check_hopper(&MEM, k);
            kf_sass_text(&MEM, k, sass, sizeof sass);
            /* the main loop: Q.K^T's wait to P.V's */
            const char *a = strstr(sass, "WARPGROUP.DEPBAR.LE gsb0, 0x1");
            const char *b = a ? strstr(a, "WARPGROUP.DEPBAR.LE gsb0, 0x0") : NULL;
            if (!b)
                fail_msg("%s: no Q.K^T / P.V waits in the SASS", cases[ci].name);
            const int lds = count_between(a, b, " LDS");
            if (lds < 17)
                fail_msg("%s: %d LDS in the main loop, not the table's 17", cases[ci].name,
                         lds);
        }
        kf_cuda_recipes_destroy(r);
        plan_release(&p);
    }
}

/* ALiBi's f32 score (the default: s0 + slope x (kv - q), s0 = qk x a bf16
 * constant) as the tile's affine part (cg_attention_pair.c, diag_add): the
 * kernel defines KF_DIAG_LIN, KF_DIAG_ADD and KF_DIAG_SCALE (the constant as
 * the score function writes it), and with KF_CUDA_RECIPE_ATTENTION_DIAG_
 * STEPPED the stepped diagonal of before (KF_DIAG_LIN, no KF_DIAG_ADD); the
 * causal kernel is the same source either way. In the SASS both take HGMMA
 * with no local memory; the affine form has fewer FFMAs (the stepped
 * diagonal's 34 a tile gone), and at head dim 128 (items apart: the step
 * along the tile is the Q.K^T accumulator's start value, KF_ACC_INIT) no
 * FFMA at all between Q.K^T's wait and the row max's first FMNMX, where the
 * stepped form adds the diagonal to every score there (64). */
static void test_the_alibi_score_tile_keeps_its_affine_part(void **state) {
    (void)state;
    static char sass[1 << 22];
    static const uint64_t flags[2] = {0, KF_CUDA_RECIPE_ATTENTION_DIAG_STEPPED};
    static const char *const alibi128 =
        "q = input($[2, 4, 300, 128])\nk = input($[2, 4, 300, 128])\n"
        "v = input($[2, 4, 300, 128])\nqk = matmul(q, k, transpose_b=true)\n"
        "sc = const($[], 0.08838834764)\ns0 = mul(qk, sc)\nslope = input($[4, 1, 1])\n"
        "row = iota(i32[300, 300], axis=0)\ncol = iota(i32[300, 300], axis=1)\n"
        "di = sub(col, row)\ndf = cast(di, $)\nbias = mul(slope, df)\nsb = add(s0, bias)\n"
        "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, sb, ninf)\n";
    /* causal; ALiBi head dim 64 (items joined); ALiBi head dim 128 */
    const char *const bodies[3] = {cases[0].body, cases[4].body, alibi128};
    static const char *const names[3] = {"causal", "ALiBi, head dim 64", "ALiBi, head dim 128"};
    for (size_t v = 0; v < 3; v++) {
        char text[4096];
        graph_text(bodies[v], "bf16", text, sizeof text);
        planned p;
        plan_text(text, &p);
        kf_cuda_recipes *r[2];
        const kf_cuda_kernel *k[2];
        for (int f = 0; f < 2; f++) {
            r[f] = kf_sass_recipes(&MEM, p.plan, "h100", NULL, flags[f]);
            k[f] = &attn_recipe(p.plan, r[f])->steps[0].kernel->kernel;
        }
        if (v == 0) {
            assert_null(strstr(k[0]->source, "#define KF_DIAG_ADD"));
            assert_string_equal(k[0]->source, k[1]->source);
        } else {
            assert_non_null(strstr(k[0]->source, "#define KF_DIAG_LIN"));
            assert_non_null(strstr(k[0]->source, "#define KF_DIAG_ADD"));
            assert_non_null(strstr(k[0]->source, "#define KF_DIAG_SCALE __uint_as_float("));
            assert_non_null(strstr(k[1]->source, "#define KF_DIAG_LIN"));
            assert_null(strstr(k[1]->source, "#define KF_DIAG_ADD"));
            int n[2], ffma[2], waited[2];
            for (int f = 0; f < 2; f++) {
                kf_sass_check_hopper(&MEM, k[f]);
                kf_sass_text(&MEM, k[f], sass, sizeof sass);
                const char *end = sass + strlen(sass);
                n[f] = count_between(sass, end, "        /*");
                ffma[f] = count_between(sass, end, " FFMA ");
                /* the main loop's Q.K^T wait to its first FMNMX */
                const char *a = strstr(sass, "WARPGROUP.DEPBAR.LE gsb0, 0x1");
                const char *b = a ? strstr(a, " FMNMX ") : NULL;
                if (!b)
                    fail_msg("%s: no Q.K^T wait and row max in the SASS", names[v]);
                waited[f] = count_between(a, b, " FFMA ");
            }
            if (ffma[0] >= ffma[1] || waited[1] < 60 || (v == 2 && waited[0] != 0))
                fail_msg("%s: the affine part %d instructions, %d FFMA (%d after the wait); "
                         "the stepped diagonal %d, %d (%d)",
                         names[v], n[0], ffma[0], waited[0], n[1], ffma[1], waited[1]);
            fprintf(stderr,
                    "  %s [bf16]: affine part %d instructions, %d FFMA (%d after Q.K^T's "
                    "wait); stepped diagonal %d, %d (%d)\n",
                    names[v], n[0], ffma[0], waited[0], n[1], ffma[1], waited[1]);
        }
        for (int f = 0; f < 2; f++)
            kf_cuda_recipes_destroy(r[f]);
        plan_release(&p);
    }
}

int main(void) {
    kf_mem_resolve(&MEM, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_attention_modes_give_the_kernels_they_name),
        cmocka_unit_test(test_sm90_attention_source_is_deterministic),
        cmocka_unit_test(test_the_pinned_softmax_runs_under_pv),
        cmocka_unit_test(test_f32_scores_leave_any_scale_to_the_softmax),
        cmocka_unit_test(test_a_bounded_score_takes_a_fixed_softmax_shift),
        cmocka_unit_test(test_the_pair_form_of_the_score_takes_bf16x2_arithmetic),
        cmocka_unit_test(test_the_score_splits_where_tanh_rounds_to_its_operand),
        cmocka_unit_test(test_the_score_diagonal_is_computed_once_for_two_rows),
        cmocka_unit_test(test_the_score_diagonal_reads_its_load_free_part_from_a_table),
        cmocka_unit_test(test_the_alibi_score_tile_keeps_its_affine_part),
        cmocka_unit_test(test_f32_scores_keep_alibi_and_softcap_unrounded),
        cmocka_unit_test(test_tree_reductions_compile_and_pin_under_pv),
        cmocka_unit_test(test_the_exp2_share_by_polynomial),
        cmocka_unit_test(test_a_softcap_takes_shares_of_its_mufu_ops_on_the_fma_pipe),
        cmocka_unit_test(test_the_tail_longest_first_compiles_with_every_form),
        cmocka_unit_test(test_the_lazy_rescale_and_the_keep_map_edge_branch_compile),
        cmocka_unit_test(test_the_items_join_by_default_and_come_apart_with_the_flag),
        cmocka_unit_test(test_a_shared_keep_map_walks_from_shared_memory),
        cmocka_unit_test(test_the_diagonal_first_walk_is_causal_and_window_only),
        cmocka_unit_test(test_the_causal_walk_may_peel_its_last_step),
        cmocka_unit_test(test_the_window_walk_may_take_its_edges_out_of_the_loop),
        cmocka_unit_test(test_the_noncausal_wide_and_cluster_forms_compile),
        cmocka_unit_test(test_a_multiply_by_one_after_the_scale_folds_as_the_scale_alone),
        cmocka_unit_test(test_a_power_of_two_scale_is_left_to_the_softmax_where_exact),
        cmocka_unit_test(test_every_sm90_attention_variant_compiles_to_hgmma_and_utmaldg),
        cmocka_unit_test(test_attention_log_sum_exp_is_a_second_output_of_the_fused_kernels),
    };
    return kf_test_run(tests);
}
