/*
 * test_cuda_attnsimt.c -- the fused SIMT attention kernel (codegen/cuda/
 * cg_attention_simt.c, templates/attention_simt.cuh) on the GPU, against
 * the reference evaluator: each case is compiled for the CUDA target with
 * the default options (the SIMT kernel is the default wherever the tensor-
 * core kernels refuse a group), the report must name the SIMT kernel and
 * the mask class, inputs are fresh random values, outputs poisoned (NaN)
 * first, and every output is judged by kf_graph_check (NaN never passes).
 *
 * Cases: each mask class (none, causal, sliding window, a general bool mask,
 * an additive mask tensor, block-sparse keep maps with an all-dropped map
 * row, so all-masked rows are NaN as the reference's), softcap, ALiBi, GQA
 * 4:1 read through a broadcast head axis, Sq != Skv both ways, ragged sizes,
 * head dims 16, 32, 80 and D != Dv, permuted [B, S, H, D] views and a
 * transposed K (plain loads, no cp.async), in f32 and bf16 (a few in f16),
 * and the log-sum-exp as a second output.
 *
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
    return kf_test_gpu_setup(&G, "kf_attnsimt", NULL);
}

static int group_teardown(void **state) {
    (void)state;
    kf_test_gpu_teardown(&G);
    return 0;
}

#define REQUIRE_GPU() KF_REQUIRE_GPU(&G)

/* `body` with every '$' replaced by dtype dn, then the softmax, P.V, the
 * output O and `tail` (NULL: nothing), as a whole graph. */
static void case_text(const char *body, const char *dn, const char *tail, char *text, size_t size) {
    size_t n = (size_t)snprintf(text, size, "kfg 1\n");
    for (const char *c = body; *c && n + 8 < size; c++) {
        if (*c == '$')
            n += (size_t)snprintf(text + n, size - n, "%s", dn);
        else
            text[n++] = *c;
    }
    n += (size_t)snprintf(text + n, size - n, "p = softmax(s1)\no = matmul(p, v)\noutput o\n");
    if (tail)
        snprintf(text + n, size - n, "%s", tail);
}

/* `text` compiled for CUDA, its report holding each of the '|'-separated
 * `has`, run on inputs in [-2, 2) and judged, each error printed
 * (kf_judged.h). */
static void run_case(const char *text, const char *has, uint64_t stream, const char *what) {
    kf_test_judged_run(G.ctx, text, has, stream, -2.0, 2.0, true, what);
}

/* Each body defines q, k, v and the score s1 ('$' is the dtype). */
static const struct {
    const char *name, *body, *mask;
} cases[] = {
    {"causal, S 200 ragged, head dim 32",
     "q = input($[2, 3, 200, 32])\nk = input($[2, 3, 200, 32])\nv = input($[2, 3, 200, 32])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.17677669529)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[200, 200], axis=0)\ncol = iota(i32[200, 200], axis=1)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask causal"},
    {"no mask, Sq 77 != Skv 333, head dim 16",
     "q = input($[2, 2, 77, 16])\nk = input($[2, 2, 333, 16])\nv = input($[2, 2, 333, 16])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.25)\ns1 = mul(qk, sc)\n",
     "mask none"},
    {"causal kv <= q with Sq 300 > Skv 130, head dim 80",
     "q = input($[1, 2, 300, 80])\nk = input($[1, 2, 130, 80])\nv = input($[1, 2, 130, 80])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.1118)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[300, 130], axis=0)\ncol = iota(i32[300, 130], axis=1)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask causal"},
    {"sliding window 50, S 300, head dim 32",
     "q = input($[1, 2, 300, 32])\nk = input($[1, 2, 300, 32])\nv = input($[1, 2, 300, 32])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.17677669529)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[300, 300], axis=0)\ncol = iota(i32[300, 300], axis=1)\nd = sub(row, col)\n"
     "w = const(i32[], 49)\nzero = const(i32[], 0)\nrest = sub(w, d)\nm = min(d, rest)\n"
     "keep = ge(m, zero)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask sliding_window"},
    {"softcap 30 tanh(s / 30) + causal, head dim 16",
     "q = input($[2, 2, 150, 16])\nk = input($[2, 2, 150, 16])\nv = input($[2, 2, 150, 16])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.25)\ns0 = mul(qk, sc)\n"
     "cap = const($[], 30)\nt0 = div(s0, cap)\nt1 = tanh(t0)\nt2 = mul(t1, cap)\n"
     "row = iota(i32[150, 150], axis=0)\ncol = iota(i32[150, 150], axis=1)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, t2, ninf)\n",
     "mask causal"},
    {"ALiBi slope[h] (kv - q) + causal, head dim 32",
     "q = input($[2, 4, 190, 32])\nk = input($[2, 4, 190, 32])\nv = input($[2, 4, 190, 32])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.17677669529)\ns0 = mul(qk, sc)\n"
     "slope = input($[4, 1, 1])\nrow = iota(i32[190, 190], axis=0)\n"
     "col = iota(i32[190, 190], axis=1)\ndi = sub(col, row)\ndf = cast(di, $)\n"
     "bias = mul(slope, df)\nsb = add(s0, bias)\nkeep = ge(row, col)\n"
     "ninf = const($[], -inf)\ns1 = where(keep, sb, ninf)\n",
     "mask causal"},
    {"an additive mask tensor [Sq, Skv], head dim 80",
     "q = input($[2, 2, 120, 80])\nk = input($[2, 2, 140, 80])\nv = input($[2, 2, 140, 80])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.1118)\ns0 = mul(qk, sc)\n"
     "am = input($[120, 140])\ns1 = add(s0, am)\n",
     "mask none"},
    {"a bool mask tensor with a finite fill, head dim 16",
     "q = input($[2, 2, 96, 16])\nk = input($[2, 2, 96, 16])\nv = input($[2, 2, 96, 16])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.25)\ns0 = mul(qk, sc)\n"
     "m = input(bool[96, 96])\nfill = const($[], -30000)\ns1 = where(m, s0, fill)\n",
     "mask general"},
    {"GQA 4:1 (K, V broadcast over the head group) + causal, head dim 32",
     "q = input($[1, 2, 4, 150, 32])\nk = input($[1, 2, 1, 150, 32])\n"
     "v = input($[1, 2, 1, 150, 32])\nqk = matmul(q, k, transpose_b=true)\n"
     "sc = const($[], 0.17677669529)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[150, 150], axis=0)\ncol = iota(i32[150, 150], axis=1)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask causal"},
    {"block-sparse 64x64 keep map, map row 1 empty (all-masked rows: NaN), head dim 32",
     "q = input($[1, 2, 300, 32])\nk = input($[1, 2, 300, 32])\nv = input($[1, 2, 300, 32])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.17677669529)\ns0 = mul(qk, sc)\n"
     "kin = input(bool[5, 5])\nri = iota(i32[5, 1], axis=0)\none = const(i32[], 1)\n"
     "rok = ne(ri, one)\nno = const(bool[], 0)\nbm = where(rok, kin, no)\noutput bm\n"
     "r0 = repeat(bm, axis=0, times=64)\nr1 = repeat(r0, axis=1, times=64)\n"
     "m0 = slice(r1, axis=0, stop=300)\nmk = slice(m0, axis=1, stop=300)\n"
     "ninf = const($[], -inf)\ns1 = where(mk, s0, ninf)\n",
     "mask block_sparse"},
    {"block-sparse 32x16 keep map (mixed tiles), Sq 200 != Skv 250, finite fill, head dim 16",
     "q = input($[2, 1, 200, 16])\nk = input($[2, 1, 250, 16])\nv = input($[2, 1, 250, 16])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.25)\ns0 = mul(qk, sc)\n"
     "kin = input(bool[7, 16])\nri = iota(i32[7, 1], axis=0)\nthree = const(i32[], 3)\n"
     "rok = ne(ri, three)\nno = const(bool[], 0)\nbm = where(rok, kin, no)\noutput bm\n"
     "r0 = repeat(bm, axis=0, times=32)\nr1 = repeat(r0, axis=1, times=16)\n"
     "m0 = slice(r1, axis=0, stop=200)\nmk = slice(m0, axis=1, stop=250)\n"
     "fill = const($[], -30000)\ns1 = where(mk, s0, fill)\n",
     "mask block_sparse"},
    {"D 40 != Dv 24, ragged, no mask",
     "q = input($[2, 2, 70, 40])\nk = input($[2, 2, 90, 40])\nv = input($[2, 2, 90, 24])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.15811388)\ns1 = mul(qk, sc)\n",
     "mask none"},
    {"Q, K, V permuted views of [B, S, H, D] + causal, head dim 16",
     "qi = input($[2, 90, 4, 16])\nki = input($[2, 90, 4, 16])\nvi = input($[2, 90, 4, 16])\n"
     "q = permute(qi, [0, 2, 1, 3])\nk = permute(ki, [0, 2, 1, 3])\nv = permute(vi, [0, 2, 1, 3])\n"
     "qk = matmul(q, k, transpose_b=true)\nsc = const($[], 0.25)\ns0 = mul(qk, sc)\n"
     "row = iota(i32[90, 90], axis=0)\ncol = iota(i32[90, 90], axis=1)\n"
     "keep = ge(row, col)\nninf = const($[], -inf)\ns1 = where(keep, s0, ninf)\n",
     "mask causal"},
    {"K given as [D, S] (keys contiguous: plain loads), head dim 24",
     "q = input($[2, 2, 100, 24])\nk = input($[2, 2, 24, 110])\nv = input($[2, 2, 110, 24])\n"
     "qk = matmul(q, k)\nsc = const($[], 0.2)\ns1 = mul(qk, sc)\n",
     "mask none"},
    {"odd head dim 3, Dv 5, S 33",
     "q = input($[1, 3, 33, 3])\nk = input($[1, 3, 33, 3])\nv = input($[1, 3, 33, 5])\n"
     "qk = matmul(q, k, transpose_b=true)\ns1 = neg(qk)\n",
     "mask none"},
};

/* Every case in f32 (f32 arithmetic throughout, judged at f32's tolerance)
 * and bf16, runs as the one SIMT kernel by default, and matches. */
static void test_simt_attention_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *const dts[] = {"f32", "bf16"};
    for (size_t d = 0; d < 2; d++) {
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            char text[4096], has[160], label[200];
            case_text(cases[i].body, dts[d], NULL, text, sizeof text);
            snprintf(has, sizeof has, "fused attention (simt FFMA kernel|%s", cases[i].mask);
            snprintf(label, sizeof label, "simt attention: %s [%s]", cases[i].name, dts[d]);
            run_case(text, has, 4000 + 50 * d + i, label);
        }
    }
}

/* A third of the cases in f16 (the conversions on load are the only
 * difference from bf16). */
static void test_simt_attention_in_f16_matches_the_reference(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i += 3) {
        char text[4096], has[160], label[200];
        case_text(cases[i].body, "f16", NULL, text, sizeof text);
        snprintf(has, sizeof has, "fused attention (simt FFMA kernel|%s", cases[i].mask);
        snprintf(label, sizeof label, "simt attention: %s [f16]", cases[i].name);
        run_case(text, has, 4200 + i, label);
    }
}

/* The scores' log-sum-exp as a second output: f32 groups with it in f32,
 * bf16 groups with the scores cast to f32 first. */
static void test_simt_attention_writes_the_log_sum_exp(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i += 2) {
        const bool bf = (i / 2) % 2 == 1;
        char text[4096], label[200];
        case_text(cases[i].body, bf ? "bf16" : "f32",
                  bf ? "s32 = cast(s1, f32)\nlse = logsumexp(s32, axis=-1)\noutput lse\n"
                     : "lse = logsumexp(s1, axis=-1)\noutput lse\n",
                  text, sizeof text);
        snprintf(label, sizeof label, "simt attention + lse: %s [%s]", cases[i].name,
                 bf ? "bf16" : "f32");
        run_case(text, "fused attention (simt FFMA kernel|log-sum-exp of the scores written too",
                 4300 + i, label);
    }
}

/* A long f32 causal case (many key tiles, K/V stages wrapping, the last query
 * tiles first) and a head dim of 256 (the largest; one stage on sm_80). */
static void test_simt_attention_long_and_wide_cases_match(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *const bodies[] = {
        "q = input($[1, 4, 1000, 64])\nk = input($[1, 4, 1000, 64])\n"
        "v = input($[1, 4, 1000, 64])\nqk = matmul(q, k, transpose_b=true)\n"
        "sc = const($[], 0.125)\ns0 = mul(qk, sc)\nrow = iota(i32[1000, 1000], axis=0)\n"
        "col = iota(i32[1000, 1000], axis=1)\nkeep = ge(row, col)\nninf = const($[], -inf)\n"
        "s1 = where(keep, s0, ninf)\n",
        "q = input($[1, 2, 130, 256])\nk = input($[1, 2, 170, 256])\n"
        "v = input($[1, 2, 170, 256])\nqk = matmul(q, k, transpose_b=true)\n"
        "sc = const($[], 0.0625)\ns1 = mul(qk, sc)\n",
    };
    for (size_t i = 0; i < 2; i++) {
        for (int d = 0; d < 2; d++) {
            const char *dn = d ? "bf16" : "f32";
            if (i == 0 && d == 1)
                continue; /* bf16 head dim 64: the tensor-core kernels' */
            char text[4096], label[128];
            case_text(bodies[i], dn, NULL, text, sizeof text);
            snprintf(label, sizeof label, "simt attention: %s [%s]",
                     i == 0 ? "causal S 1000 D 64" : "no mask D 256", dn);
            run_case(text, "fused attention (simt FFMA kernel", 4400 + 2 * i + (uint64_t)d, label);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simt_attention_matches_the_reference),
        cmocka_unit_test(test_simt_attention_in_f16_matches_the_reference),
        cmocka_unit_test(test_simt_attention_writes_the_log_sum_exp),
        cmocka_unit_test(test_simt_attention_long_and_wide_cases_match),
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
