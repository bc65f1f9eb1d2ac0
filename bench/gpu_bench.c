/*
 * gpu_bench.c -- the GPU bench harness (issue 5, item 9). Speed is measured
 * here, never asserted by a test.
 *
 *   ceilings      device-to-device copy bandwidth (cuMemcpyDtoDAsync, bytes
 *                 read + written) and a large bf16 GEMM through cuBLASLt,
 *                 both measured in this run
 *   cases         kfuse programs on random bf16 data (a device-side hash fill):
 *                 gelu(x*s + b)*g, RMSNorm, LayerNorm over 65536x4096;
 *                 GEMM + bias + GELU 8192x4096x16384 (gelu_tanh: cuBLASLt's
 *                 GELU_BIAS epilogue, as torch._addmm_activation; and the erf
 *                 gelu, which needs the leftover kernel; _generated_sq: the
 *                 generated kernel in the square raster; _generated_mt:
 *                 gelu_tanh by one MUFU.TANH; _ahead: the epilogue two chunks
 *                 ahead; _mta: both; _csg: the bias loaded from global
 *                 memory in each chunk, the form before it was staged in
 *                 shared memory (EPI_COLS_GLOBAL; also k1024_gelu and
 *                 k1024_bias), _csg_mt: that and one MUFU.TANH; gemm_kshape_*: the
 *                 same GEMM with no epilogue); SwiGLU
 *                 silu(x.Wg) * (x.Wu) 8192x4096 -> 2x11008 (the default path:
 *                 two cuBLASLt GEMMs and an epilogue kernel; and the dual
 *                 generated kernel); GEMM + bias + residual + LayerNorm
 *                 8192x4096x4096 (gemm_res_ln: the default plan, a GEMM group
 *                 and a row-wise LayerNorm; gemm_res_ln_split*: with
 *                 KF_FLAG_SPLIT_ROW_NORMS, the split row form, N = 4096 past
 *                 one tile row, measured and each side forced; _sm80: the
 *                 mma.sync kernel forced); the same with rows of N <= 256,
 *                 the norm in the generated kernel's tile (ln_row256:
 *                 16384x256x1024, ln_row128: 16384x128x4096; measured,
 *                 _generated, _sm80, _cublaslt); LLaMA-7B's
 *                 rotary embedding of q alone, B8 H32 S2048 D128 (rotary: one
 *                 elementwise kernel reading q's head view and rotate_half's
 *                 concat; peers: eager and Inductor; rotary_bpos: cos and sin
 *                 per batch, [B, 1, S, D]; _after_sleep: each after 1 ms of
 *                 one thread asleep, the device time alone, as a block's
 *                 profile counts it; _apart: rotate_half's two halves read
 *                 apart, the form before pairs; rotary_hd: q already
 *                 [B, H, S, D], read and written in one order); the
 *                 transformer blocks'
 *                 GEMMs (bf16, weights [N, K] as nn.Linear keeps them), each
 *                 through cuBLASLt (_cublaslt), the generated kernel
 *                 (_generated) and the generated kernel in 2-CTA clusters
 *                 sharing B by TMA multicast (_generated_c2), and with its wgmma
 *                 descriptors rebuilt each K step (_generated_rb, internal
 *                 DESC_REBUILD, the form before stepped ones), and in the
 *                 square raster (_generated_sq, internal RASTER_SQ: 16 tile
 *                 rows at a time where the default walks 8): LLaMA-7B B8 S2048
 *                 q projection 16384x4096x4096 behind its RMSNorm (l_q_fold)
 *                 and bare (l_q; l_q_nmajor: B as [K, N]), o projection + residual (l_o_res), down
 *                 projection 16384x4096x11008 + residual (l_down_res), SwiGLU
 *                 16384x4096 -> 2x11008 (l_swiglu); GPT-2-medium B16 S1024
 *                 16384x3072x1024 + bias (g_qkv), 16384x4096x1024 + bias +
 *                 gelu_tanh (g_fc1), 16384x1024x4096 + bias + residual
 *                 (g_fc2); and the LLaMA layer's GEMMs back to back in one
 *                 program (l_seq: RMSNorm, q/k/v, o + residual, RMSNorm,
 *                 SwiGLU, down + residual; no attention), where the clocks
 *                 run hot as in the block; g_qkv, g_fc1 and l_swiglu also in
 *                 ping-pong 128x128 tiles (_generated_pingpong); decode shapes
 *                 (dec_m1, dec_m8, dec_m16, dec_m32, dec_m64: M x 4096 x
 *                 4096; dec_m16_n11008,
 *                 dec_m16_k11008) through cuBLASLt, the generated kernel and
 *                 the generated kernel in stream-K (_generated_sk: the tail's
 *                 K steps cut over the SMs; _generated_sk128: with 128-wide
 *                 tiles where it takes 128 x 256) and the decode kernel
 *                 (_decode: M <= 64, B streamed once, split-K reduced in the
 *                 kernel; KF_CUDA_RECIPE_GEMM_DECODE; _generated is the tiled
 *                 kernel, GEMM_NO_DECODE), and GEMM + bias +
 *                 GELU at M = 32 (gemm_bias_gelu_m32: 32x4096x16384, the
 *                 default: the decode kernel timed against cuBLASLt;
 *                 _cublaslt: its GELU_BIAS epilogue, the peer; _generated:
 *                 the tiled kernel (GEMM_NO_DECODE); _generated_sk; _decode;
 *                 and for each _decode row its forms _decode_reg: the
 *                 register form (KF_CUDA_RECIPE_GEMM_DEC_REG, M <= 32),
 *                 _decode_tma: the ring in the TMA form,
 *                 KF_CUDA_RECIPE_GEMM_DEC_TMA), and l_q, l_q_fold,
 *                 l_down_res, l_swiglu in stream-K; f32 4096^3 bare and + bias
 *                 + GELU (f32_gemm*: the SIMT kernel, _generated, against
 *                 cuBLASLt with f32 compute, _cublaslt, and the default's
 *                 measured choice; inputs are the bf16 fill widened)
 *   compile       cold compile per kernel (an empty kfuse cache and the
 *                 driver's compute cache off: NVRTC does the whole compile),
 *                 warm cached program load (kf_compile hitting the cache)
 *   launch        host time per launch of a small program
 *   peers         bench/peers.py (PyTorch eager, torch.compile,
 *                 torch._addmm_activation) run in the same run when torch imports
 *
 * Timing: CUDA events around each run, warm-up first, the median of many runs.
 * Each case reports the roofline floor (bytes over the measured copy
 * bandwidth, or FLOPs over the measured GEMM rate) and the fraction of it
 * reached. JSON goes to bench/results/<gpu>-<commit>.json (and --out FILE).
 *
 *   gpu_bench [--commit SHA] [--out FILE] [--reps N] [--no-peers] [--quick]
 *             [--attention | --block] [--cases NAME,NAME...] [--no-torch-compile]
 *             [--print-blocks] [--sustain SEC] [--abba A:B,C:D] [--abba-block SEC]
 *             [--compute-cache]
 *
 * --compute-cache: leave the driver's compute cache on (CUDA_CACHE_DISABLE is
 * set to 1 otherwise, before CUDA starts, so that the cold compile rows time
 * a whole NVRTC compile; peers.py runs without it).
 * --sustain SEC: each case also runs back to back for SEC seconds after 1 s
 * idle (sustain_case): short_ms (runs 3-12: the GPU at rest, as a measured
 * choice at compile time finds it) against sustained_ms (the last half:
 * power-capped), with that half's wall-clock window for nvidia-smi's samples
 * (bench/sustain_join.py). --abba: each pair of cases (both in --cases) runs
 * in blocks A B B A of --abba-block seconds (1.2) back to back once every
 * case ran (abba_run): each at the clocks its own power draw leaves, the
 * drift of temperature cancelled.
 *
 * --cases runs only the named cases (and passes the list to peers.py), then
 * the compile and launch rows as always: a short run on a lent GPU.
 * --no-torch-compile leaves torch.compile out of the peers (its compiles
 * take most of a short run). --print-blocks prints the --block graphs (.kfg)
 * and exits.
 *
 * --block runs whole transformer blocks instead (the headline numbers), in
 * bf16 with random weights, each against PyTorch eager and torch.compile
 * (default mode) in the same run (peers.py --block): a GPT-2-medium block
 * (B16 S1024, d 1024, 16 heads of 64, pre-LN, biased projections, causal
 * attention, gelu_tanh MLP of 4096) and a LLaMA-7B layer (B8 S2048, d 4096,
 * 32 heads of 128, RMSNorm, causal attention, SwiGLU MLP of 11008; no
 * rotary embedding: kfuse has no slice op to write rotate_half with, so
 * neither side applies one). kfuse's run is timed as the other cases (events
 * around kf_cuda_exec_launch, no host copy inside), then group by group
 * (kf_cuda_exec_time_groups), so the JSON says which groups cost most.
 *
 * --attention runs the attention cases instead (bf16, B4 H32 S4096 D128:
 * causal fused and unfused, non-causal, GQA 32:8, softcap, ALiBi, sliding
 * window 1024; unfused through KF_FLAG_UNFUSED_ATTENTION; causal with the
 * scores' log-sum-exp as a second output; the blocks' causal attention, B16
 * H16 S1024 D64 and B8 H32 S2048 D128, contiguous and with the blocks'
 * layouts: attn_block_llama, attn_block_gpt2; each of attn_causal and those
 * two also with the sm_90a kernel's softmax pinned under P.V (_pin, the
 * recipe flag KF_CUDA_RECIPE_ATTENTION_PIN_SOFTMAX) or with f32 scores
 * (_f32s, KF_CUDA_RECIPE_ATTENTION_F32_SCORE: the default since 4784014's
 * run, so the same kernel as the plain case), or rounded scores (_rs,
 * KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE: the default before), or pinned
 * with f32 scores (_pf),
 * or f32 scores with the softmax's row max and sum as trees (_ft,
 * KF_CUDA_RECIPE_ATTENTION_TREE_SOFTMAX), or all three (_pft), or the tail's
 * items grid-strided to the end (_grid, KF_CUDA_RECIPE_ATTENTION_TAIL_LPT:
 * the tail longest first is the causal default at head dim 128; _pft_grid:
 * every form; GPT-2's head dim 64, _l and _pftl: the tail), or the softmax's row max and sum as chains (_chain,
 * KF_CUDA_RECIPE_ATTENTION_CHAIN_SOFTMAX: the form before trees were the
 * default at head dim 128; also non-causal and GQA), or a share of its exp2s
 * by the FMA-pipe polynomial (_e, KF_CUDA_RECIPE_ATTENTION_EXP2_POLY; also
 * the GPT-2 shape, which takes trees with _t, and softcap), or its work
 * items one at a time (_old, KF_CUDA_RECIPE_ATTENTION_ITEMS_APART: the GPT-2
 * shape, causal, GQA, window, block-sparse) or joined where they are apart by
 * default (_j, KF_CUDA_RECIPE_ATTENTION_ITEMS_JOINED: the same D128 shapes);
 * non-causal
 * (176-key tiles, the default there) also with 128-key tiles (_narrow,
 * KF_CUDA_RECIPE_ATTENTION_NARROW_KEYS), with the ragged last 176-key tile
 * at the full width (_full, KF_CUDA_RECIPE_ATTENTION_FULL_LAST_TILE: the
 * form before its narrower one), in 2-CTA clusters sharing K and V
 * (_c, KF_CUDA_RECIPE_ATTENTION_CLUSTER2) or both (_narrow_c); and timed
 * after an untimed
 * bf16 8192^3 cuBLASLt GEMM (_after_gemm: the kernel's device time alone,
 * behind a block's worth of GEMM, as a profiler sees it in a block) or
 * after 1 ms of one thread asleep (_after_sleep: the device time alone on an
 * idle GPU); peers.py times cuDNN both ways), the SIMT kernel's f32 causal
 * B4 H16 S1024 D64 and bf16 causal B4 H32 S2048 D32 (attn_simt_*, each
 * also _unfused; peers: SDPA's f32 math and memory-efficient backends, cuDNN
 * and flash), decode (B16 H32,
 * one query token, Skv 8192: the split-KV kernels and the default's kernel;
 * GQA 32:8; B64; the one-split rows B16 and B64 also in the two-step form,
 * _combine, and with twice the splits, _x2), the cold compile of one fused kernel, and peers.py
 * --attention (cuDNN SDPA, FlexAttention, SDPA's decode); and att19's
 * per-item cost fit (attn_fit_*, each after 1 ms asleep, no peers: 4096
 * items with the key tiles each walks varied -- non-causal against Skv keys,
 * causal from B16 S1024 to B2 S8192, windows 512 to 2048 -- and 1024 to 8192
 * items of 8 key tiles; README, att19). --cases selects
 * among them too (the cold compile and planning run with attn_causal).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fusion/fusion.h"
#include "ir/ir.h"
#include "kfuse.h"
#include "runtime/ctx.h"
#include "runtime/cublaslt.h"
#include "runtime/cuda.h"
#include "frontend/compile.h"
#include "runtime/cuda_exec.h"
#include "runtime/nvrtc.h"

#ifndef KF_BENCH_COMMIT
#define KF_BENCH_COMMIT "unknown"
#endif

static int g_reps = 30, g_warmup = 5;
static double g_sustain_s = 0; /* --sustain SEC: each case also run back to back (sustain_case) */
static const char *g_abba = NULL; /* --abba A:B,C:D: pairs of cases timed in A B B A blocks */
static double g_abba_s = 1.2;     /* --abba-block SEC: each block's length */
static bool g_quick = false, g_attention = false, g_block = false;
static const char *g_cases = NULL;      /* --cases: a comma list, NULL: every case */
static bool g_no_torch_compile = false; /* --no-torch-compile: peers.py --no-compile */
/* --compute-cache: keep the driver's compute cache on (its compiles "cold"
 * only where nothing compiled them before on the machine) */
static bool g_compute_cache = false;

/* Whether case `name` runs under --cases. */
static bool case_on(const char *name) {
    if (!g_cases)
        return true;
    size_t n = strlen(name);
    for (const char *p = g_cases; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        if (!e)
            break;
        p = e + 1;
    }
    return false;
}

/* Runs bench/peers.py with `args` (when `peers` and torch with CUDA imports)
 * and reads the JSON object it writes into json[size]; json keeps "null"
 * when the peers did not run. */
static void run_peers(bool peers, const char *args, char *json, size_t size) {
    if (!peers || system("python3 -c 'import torch; assert torch.cuda.is_available()' "
                         ">/dev/null 2>&1") != 0) {
        fprintf(stderr, "peers: skipped (no torch with CUDA, or --no-peers)\n");
        return;
    }
    char pf[] = "/tmp/kf_bench_peers_XXXXXX";
    int fd = mkstemp(pf);
    if (fd < 0)
        return;
    close(fd);
    char cmd[4096];
    const char *src = getenv("KF_SOURCE_DIR");
    snprintf(cmd, sizeof cmd, "%spython3 %s/bench/peers.py --out %s %s",
             g_compute_cache ? "" : "env -u CUDA_CACHE_DISABLE ", src ? src : ".", pf, args);
    fprintf(stderr, "peers: %s\n", cmd);
    if (system(cmd) == 0) {
        FILE *f = fopen(pf, "r");
        if (f) {
            size_t n = fread(json, 1, size - 1, f);
            json[n] = 0;
            fclose(f);
        }
    }
    unlink(pf);
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        kf_status st_ = (call);                                                                    \
        if (st_ != KF_OK) {                                                                        \
            fprintf(stderr, "gpu_bench: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, err);       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ------------------------------------------------------------------------ */
/* Device, fill kernel, timing                                                */
/* ------------------------------------------------------------------------ */

static char err[KF_MSG_MAX];
static const kf_cuda_driver *D;
static kf_cuda_device DEV;
static kf_cu_stream S;
static kf_cu_event E0, E1;
static kf_cu_function FILL, COPYK, COPYK8, SPIN;

static const char fill_src[] =
    "extern \"C\" __global__ void kf_bench_fill(unsigned short *p, unsigned long long n,\n"
    "                                           unsigned long long seed) {\n"
    "    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
    "         i < n; i += (unsigned long long)gridDim.x * blockDim.x) {\n"
    "        unsigned long long z = (i + seed) * 0x9E3779B97F4A7C15ull;\n"
    "        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; z ^= z >> 31;\n"
    "        float f = (float)(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;\n"
    "        unsigned int u = __float_as_uint(f);\n"
    "        p[i] = (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);\n"
    "    }\n"
    "}\n";

/* SM copy kernels (16-byte vectors, grid-stride over tiles of U vectors per
 * thread, all U loaded before the first store): what a kernel that only moves
 * the bytes reaches, next to the cuMemcpyDtoD ceiling the floors use. Which
 * shape is fastest differs between GPUs (an H200 liked U = 1 at 4 blocks of
 * 256 per SM, an H100 U = 8 at 4), so three are timed and the best is the
 * reference. */
static const char copyk_src[] =
    "template <int U> __device__ void kf_copy(const uint4 *__restrict__ a, uint4 *__restrict__ b,\n"
    "                                        unsigned long long n) {\n"
    "    const unsigned long long step = (unsigned long long)gridDim.x * 256 * U;\n"
    "    for (unsigned long long t = blockIdx.x * 256ull * U + threadIdx.x; t + (U - 1) * 256 < n;\n"
    "         t += step) {\n"
    "        uint4 v[U];\n"
    "#pragma unroll\n"
    "        for (int u = 0; u < U; u++) v[u] = a[t + u * 256];\n"
    "#pragma unroll\n"
    "        for (int u = 0; u < U; u++) b[t + u * 256] = v[u];\n"
    "    }\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(256) kf_bench_copy(const uint4 *__restrict__ a,\n"
    "                                   uint4 *__restrict__ b, unsigned long long n) {\n"
    "    kf_copy<1>(a, b, n);\n"
    "}\n"
    "extern \"C\" __global__ void __launch_bounds__(256) kf_bench_copy8(const uint4 *__restrict__ a,\n"
    "                                   uint4 *__restrict__ b, unsigned long long n) {\n"
    "    kf_copy<8>(a, b, n);\n"
    "}\n"
    /* one thread asleep for ns nanoseconds (the globaltimer): the GPU busy,
     * so what is queued behind it waits, at next to no power */
    "extern \"C\" __global__ void kf_bench_spin(unsigned long long ns) {\n"
    "    unsigned long long t0, t;\n"
    "    asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t0));\n"
    "    do {\n"
    "        __nanosleep(10000);\n"
    "        asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t));\n"
    "    } while (t - t0 < ns);\n"
    "}\n";

typedef struct copyk_args {
    kf_cu_deviceptr a, b;
    unsigned long long n; /* 16-byte vectors, a multiple of 8 * 256 */
    kf_cu_function fn;
    unsigned blocks_per_sm;
} copyk_args;

static kf_status run_copyk(void *u) {
    copyk_args *c = u;
    void *args[] = {&c->a, &c->b, &c->n};
    kf_cuda_launch_cfg cfg = {.grid = {(unsigned)DEV.sm_count * c->blocks_per_sm, 1, 1},
                              .block = {256, 1, 1},
                              .stream = S,
                              .kernel = "kf_bench_copy"};
    return kf_cuda_launch(&DEV, c->fn, &cfg, args, err);
}

/* Fills n bf16 values at ptr with uniform [-1, 1) values from `seed`. */
static void fill_bf16(kf_cu_deviceptr ptr, unsigned long long n, unsigned long long seed) {
    void *args[] = {&ptr, &n, &seed};
    kf_cuda_launch_cfg cfg = {.grid = {(unsigned)DEV.sm_count * 8, 1, 1},
                              .block = {256, 1, 1},
                              .stream = S,
                              .kernel = "kf_bench_fill"};
    CHECK(kf_cuda_launch(&DEV, FILL, &cfg, args, err));
}

/* ALiBi's slopes 2^(-8 (h + 1) / n) into bf16 input t of n values (_geo
 * cases): positive, so each head's bias grows toward the diagonal. */
static void set_alibi_slopes(kf_cuda_exec *ex, const kf_tensor *t) {
    const size_t n = (size_t)kf_ir_numel(t);
    unsigned short host[64];
    if (n > 64)
        exit(1);
    for (size_t h = 0; h < n; h++) {
        const float v = exp2f(-8.0f * (float)(h + 1) / (float)n);
        unsigned u;
        memcpy(&u, &v, 4);
        host[h] = (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    CHECK(kf_cuda_exec_set_input(ex, t->id, host, n * 2, err));
}

/* Input t of `ex` from the hash fill: bf16 values in [-1, 1) for the 16-bit
 * dtypes; for a bool input (a block-sparse keep map) the values' signs, a
 * fair coin each. (Passing the bf16 bytes as bools, as the first version did,
 * kept nearly every tile: the 151d057 block-sparse row on an H100 timed a
 * ~100% map, 2.000 ms against 1.870 dense.) */
static void set_random_input(kf_cuda_exec *ex, const kf_tensor *t, unsigned long long seed) {
    size_t n = (size_t)kf_ir_numel(t);
    kf_cu_deviceptr tmp;
    CHECK(kf_cuda_mem_alloc(&DEV, n * 2, &tmp, err));
    fill_bf16(tmp, n, seed);
    CHECK(kf_cuda_stream_sync(&DEV, S, "fill", err));
    unsigned short *host = malloc(n * 2);
    if (!host)
        exit(1);
    CHECK(kf_cuda_copy_to_host(&DEV, host, tmp, n * 2, err));
    if (t->dtype == KF_DTYPE_BOOL) {
        unsigned char *b = (unsigned char *)host; /* in place: byte i <= element i */
        for (size_t k = 0; k < n; k++)
            b[k] = (unsigned char)(host[k] >> 15);
        CHECK(kf_cuda_exec_set_input(ex, t->id, host, n, err));
    } else if (t->dtype == KF_DTYPE_F32 || t->dtype == KF_DTYPE_F64) {
        size_t es = kf_dtype_size(t->dtype); /* the bf16 values widened: exact */
        unsigned char *w = malloc(n * es);
        if (!w)
            exit(1);
        for (size_t k = 0; k < n; k++) {
            uint32_t u = (uint32_t)host[k] << 16;
            float f;
            memcpy(&f, &u, 4);
            double d = f;
            memcpy(w + k * es, es == 4 ? (const void *)&f : (const void *)&d, es);
        }
        CHECK(kf_cuda_exec_set_input(ex, t->id, w, n * es, err));
        free(w);
    } else {
        CHECK(kf_cuda_exec_set_input(ex, t->id, host, n * 2, err));
    }
    free(host);
    kf_cuda_mem_free(&DEV, tmp);
}

typedef kf_status (*run_fn)(void *user);

/* Median milliseconds of `fn` over g_reps runs timed with events; with
 * `pre` (NULL: none), pre(pre_user) runs, untimed, before each run (and
 * before each warm-up run): the events around `fn` then queue behind its
 * work, so the time is `fn`'s on the device alone, as a profiler sees a
 * kernel in a block. */
static double time_ms_after(run_fn pre, void *pre_user, run_fn fn, void *user) {
    for (int i = 0; i < g_warmup; i++) {
        if (pre)
            CHECK(pre(pre_user));
        CHECK(fn(user));
    }
    CHECK(kf_cuda_stream_sync(&DEV, S, NULL, err));
    double v[256];
    int n = g_reps > 256 ? 256 : g_reps;
    for (int i = 0; i < n; i++) {
        if (pre)
            CHECK(pre(pre_user));
        CHECK(kf_cuda_event_record(&DEV, E0, S, err));
        CHECK(fn(user));
        CHECK(kf_cuda_event_record(&DEV, E1, S, err));
        float ms = 0;
        CHECK(kf_cuda_event_elapsed(&DEV, E0, E1, &ms, err));
        v[i] = ms;
    }
    return median(v, n);
}

static double time_ms(run_fn fn, void *user) { return time_ms_after(NULL, NULL, fn, user); }

/* ------------------------------------------------------------------------ */
/* Ceilings                                                                   */
/* ------------------------------------------------------------------------ */

typedef kf_cu_result (*dtod_fn)(kf_cu_deviceptr, kf_cu_deviceptr, size_t, kf_cu_stream);
typedef struct copy_args {
    dtod_fn fn;
    kf_cu_deviceptr a, b;
    size_t bytes;
} copy_args;

static kf_status run_copy(void *u) {
    copy_args *c = u;
    return kf_cuda_check(D, c->fn(c->b, c->a, c->bytes, S), "cuMemcpyDtoDAsync", NULL, err);
}

typedef struct gemm_args {
    kf_blt *lt;
    kf_blt_gemm g;
} gemm_args;

static kf_status run_gemm(void *u) {
    gemm_args *a = u;
    return kf_blt_matmul(a->lt, &a->g, S, err);
}

static kf_status run_exec(void *u) { return kf_cuda_exec_launch(u, S, err); }

/* ------------------------------------------------------------------------ */
/* Cases                                                                      */
/* ------------------------------------------------------------------------ */

typedef struct bcase {
    const char *name;
    const char *text; /* .kfg */
    double bytes;     /* fewest bytes the case must move */
    double flops;
    double ms;        /* measured */
    double floor_ms;  /* roofline floor from the measured ceilings */
    size_t launches;
    char report[2048];
    kf_gemm_mode gemm; /* how its GEMM groups run (KF_GEMM_AUTO: the default) */
    uint64_t rflags;   /* recipe flags added to the context's (KF_CUDA_RECIPE_GEMM_PINGPONG,
                          ..._STAGED_EPI: the generated GEMM's other schedules), or 0 */
} bcase;

/* --sustain's figures for a case (sustain_case): the median of runs 3-12
 * after 1 s idle (short_ms: as an idle GPU runs it) and of the last half of
 * g_sustain_s seconds back to back (sustained_ms), that half's wall-clock
 * window (epoch seconds). */
typedef struct sustain_res {
    const bcase *c;
    double short_ms, sustained_ms, t0, t1;
} sustain_res;
#define SUSTAIN_MAX_CASES 64
static sustain_res g_sus[SUSTAIN_MAX_CASES];
static int g_n_sus;

static const sustain_res *sustain_of(const bcase *c) {
    for (int i = 0; i < g_n_sus; i++)
        if (g_sus[i].c == c)
            return &g_sus[i];
    return NULL;
}

/* The GEMM a case named *_after_gemm runs, untimed, before each timed run
 * (after_gemm): bf16 8192^3 through cuBLASLt (1.4 ms on an H200, 384 MiB of
 * operands, more than L2), as a transformer block's projections run before
 * its attention: the GPU busy (no launch gap in the time), L2 holding the
 * GEMM's data, the clocks where a block's GEMMs leave them. */
static gemm_args *g_pre;

static bool after_gemm(const bcase *c) { return strstr(c->name, "_after_gemm") != NULL; }

/* What a case named *_after_sleep runs, untimed, before each timed run: one
 * thread asleep for 1 ms (kf_bench_spin), so the events queue behind it as
 * behind the pre-GEMM, with the clocks and L2 as an idle GPU leaves them:
 * the kernel's device time alone, no launch gap in it. */
static unsigned long long g_spin_ns = 1000000ull;

static kf_status run_spin(void *u) {
    void *args[] = {u};
    kf_cuda_launch_cfg cfg = {
        .grid = {1, 1, 1}, .block = {32, 1, 1}, .stream = S, .kernel = "kf_bench_spin"};
    return kf_cuda_launch(&DEV, SPIN, &cfg, args, err);
}

static bool after_sleep(const bcase *c) { return strstr(c->name, "_after_sleep") != NULL; }

static kf_ctx *make_ctx_mode(const char *cache_dir, unsigned flags, kf_gemm_mode gemm,
                             kf_attention_mode attention) {
    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CUDA;
    o.cache_dir = cache_dir;
    o.flags = flags;
    o.gemm = gemm;
    o.attention = attention;
    kf_ctx *c = NULL;
    if (kf_ctx_create(&o, &c) != KF_OK) {
        fprintf(stderr, "gpu_bench: kf_ctx_create failed\n");
        exit(1);
    }
    return c;
}

static kf_ctx *make_ctx_gemm(const char *cache_dir, unsigned flags, kf_gemm_mode gemm) {
    return make_ctx_mode(cache_dir, flags, gemm, KF_ATTENTION_AUTO);
}

static kf_ctx *make_ctx(const char *cache_dir, unsigned flags) {
    return make_ctx_gemm(cache_dir, flags, KF_GEMM_AUTO);
}

static kf_graph *parse(kf_ctx *ctx, const char *text) {
    kf_graph *g = NULL;
    if (kf_graph_parse(ctx, text, strlen(text), &g) != KF_OK || kf_graph_verify(g) != KF_OK) {
        fprintf(stderr, "gpu_bench: %s\n%s\n", g ? kf_graph_error(g) : "parse", text);
        exit(1);
    }
    return g;
}

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --sustain: `ex` after 1 s with the GPU idle, then run back to back (one
 * event between runs, no host wait) for about g_sustain_s seconds. The
 * median of runs 3-12 is how the case runs on a GPU at rest (as a measured
 * choice at compile time times it); the median of the last half, how it
 * runs once power and clocks have settled under the load. The last half's
 * wall-clock window goes to the JSON, to be joined with nvidia-smi's power
 * and SM-clock samples (bench/sustain_join.py). */
#define SUSTAIN_MAX_RUNS 8192
static void sustain_case(bcase *c, kf_cuda_exec *ex) {
    CHECK(kf_cuda_stream_sync(&DEV, S, NULL, err));
    struct timespec idle = {1, 0};
    nanosleep(&idle, NULL);
    int n = (int)(g_sustain_s * 1e3 / (c->ms > 0.001 ? c->ms : 0.001));
    n = n < 24 ? 24 : n > SUSTAIN_MAX_RUNS ? SUSTAIN_MAX_RUNS : n;
    kf_cu_event *ev = calloc((size_t)n + 1, sizeof *ev);
    double *t = calloc((size_t)n, sizeof *t);
    if (!ev || !t) {
        fprintf(stderr, "gpu_bench: out of memory (sustain)\n");
        exit(1);
    }
    for (int i = 0; i <= n; i++)
        CHECK(kf_cuda_event_create(&DEV, &ev[i], err));
    double w0 = wall_s();
    CHECK(kf_cuda_event_record(&DEV, ev[0], S, err));
    for (int i = 0; i < n; i++) {
        CHECK(kf_cuda_exec_launch(ex, S, err));
        CHECK(kf_cuda_event_record(&DEV, ev[i + 1], S, err));
    }
    CHECK(kf_cuda_stream_sync(&DEV, S, NULL, err));
    double w1 = wall_s();
    double total = 0, half = 0;
    for (int i = 0; i < n; i++) {
        float ms = 0;
        CHECK(kf_cuda_event_elapsed(&DEV, ev[i], ev[i + 1], &ms, err));
        t[i] = ms;
        total += ms;
        if (i >= n / 2)
            half += ms;
    }
    sustain_res r = {.c = c, .t1 = w1};
    /* the window of the last half: the end of the runs back from the sync */
    r.t0 = w1 - (w1 - w0) * (total > 0 ? half / total : 0.5);
    double first[10];
    memcpy(first, t + 2, sizeof first);
    r.short_ms = median(first, 10);
    /* how the runs went: the median of each tenth of the runs, in order
     * (median() sorts in place: each tenth, then the last half, keep their
     * members) */
    fprintf(stderr, "sustain %-28s tenths:", c->name);
    for (int b = 0; b < 10; b++) {
        int lo = n * b / 10, hi = n * (b + 1) / 10;
        fprintf(stderr, " %.4f", median(t + lo, hi - lo));
    }
    fprintf(stderr, "\n");
    r.sustained_ms = median(t + n / 2, n - n / 2);
    if (g_n_sus < SUSTAIN_MAX_CASES)
        g_sus[g_n_sus++] = r;
    fprintf(stderr, "sustain %-28s short %8.4f ms  sustained %8.4f ms  (%d runs, %.2f s)\n",
            c->name, r.short_ms, r.sustained_ms, n, w1 - w0);
    for (int i = 0; i <= n; i++)
        kf_cuda_event_destroy(&DEV, ev[i]);
    free(ev);
    free(t);
}

/* --abba: the cases named in a pair keep their program after run_case
 * (kept_of), and each pair A:B then runs in four blocks back to back, A B B
 * A, each g_abba_s seconds of one case's runs and no gap between blocks: the
 * GPU hot and power-capped as under a model's sustained load, each case at
 * the clocks its own power draw leaves (the controller follows within
 * ~0.1-0.3 s, so a block's last half runs at them), and A B B A cancels the
 * drift of temperature across the four. A block's time is the median of its
 * last half's chunks (one event per ~5 ms of runs); a case's, the mean of
 * its two blocks. Interleaving short samples instead (as the measured
 * choice does) compares the cases at one shared clock, which hides a
 * difference in energy per run: under the power cap that difference is the
 * difference in speed. */
typedef struct kept {
    const bcase *c;
    kf_cuda_exec *ex;
    kf_plan *plan;
    kf_graph *g;
} kept;
#define ABBA_MAX_KEPT 64
static kept g_kept[ABBA_MAX_KEPT];
static int g_n_kept;

/* Whether case `name` is one side of a --abba pair. */
static bool abba_on(const char *name) {
    if (!g_abba)
        return false;
    size_t n = strlen(name);
    for (const char *p = g_abba; *p;) {
        size_t len = strcspn(p, ":,");
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p += len;
        if (*p)
            p++;
    }
    return false;
}

static const kept *kept_of(const char *name, size_t len) {
    for (int i = 0; i < g_n_kept; i++)
        if (strlen(g_kept[i].c->name) == len && strncmp(g_kept[i].c->name, name, len) == 0)
            return &g_kept[i];
    return NULL;
}

typedef struct abba_res {
    const bcase *a, *b;
    double ms[4];       /* the blocks' times, A B B A */
    double t0[4], t1[4]; /* each block's last half, wall clock (epoch s) */
} abba_res;
static abba_res g_abba_res[ABBA_MAX_KEPT / 2];
static int g_n_abba;

/* One block: `k` run back to back for about g_abba_s seconds; its last
 * half's median chunk time (ms a run) and that half's wall-clock window. */
static double abba_block(const kept *k, double *t0, double *t1) {
    double ms1 = k->c->ms > 0.001 ? k->c->ms : 0.001;
    int per = (int)(5.0 / ms1); /* runs a chunk: ~5 ms */
    per = per < 1 ? 1 : per;
    int chunks = (int)(g_abba_s * 1e3 / (ms1 * per));
    chunks = chunks < 8 ? 8 : chunks > 4096 ? 4096 : chunks;
    kf_cu_event *ev = calloc((size_t)chunks + 1, sizeof *ev);
    double *t = calloc((size_t)chunks, sizeof *t);
    if (!ev || !t) {
        fprintf(stderr, "gpu_bench: out of memory (abba)\n");
        exit(1);
    }
    for (int i = 0; i <= chunks; i++)
        CHECK(kf_cuda_event_create(&DEV, &ev[i], err));
    double w0 = wall_s();
    CHECK(kf_cuda_event_record(&DEV, ev[0], S, err));
    for (int i = 0; i < chunks; i++) {
        for (int r = 0; r < per; r++)
            CHECK(kf_cuda_exec_launch(k->ex, S, err));
        CHECK(kf_cuda_event_record(&DEV, ev[i + 1], S, err));
    }
    /* (the wait leaves the GPU idle for the host's turnaround, tens of
     * microseconds in a block of a second) */
    CHECK(kf_cuda_stream_sync(&DEV, S, NULL, err));
    double w1 = wall_s(), total = 0, half = 0;
    for (int i = 0; i < chunks; i++) {
        float ms = 0;
        CHECK(kf_cuda_event_elapsed(&DEV, ev[i], ev[i + 1], &ms, err));
        t[i] = ms / per;
        total += ms;
        if (i >= chunks / 2)
            half += ms;
    }
    *t1 = w1;
    *t0 = w1 - (w1 - w0) * (total > 0 ? half / total : 0.5);
    double v = median(t + chunks / 2, chunks - chunks / 2);
    for (int i = 0; i <= chunks; i++)
        kf_cuda_event_destroy(&DEV, ev[i]);
    free(ev);
    free(t);
    return v;
}

static void abba_run(void) {
    for (const char *p = g_abba; p && *p;) {
        size_t la = strcspn(p, ":,");
        const char *q = p[la] == ':' ? p + la + 1 : NULL;
        size_t lb = q ? strcspn(q, ",") : 0;
        const kept *ka = kept_of(p, la), *kb = q ? kept_of(q, lb) : NULL;
        if (!ka || !kb || g_n_abba >= ABBA_MAX_KEPT / 2) {
            fprintf(stderr, "gpu_bench: --abba: a pair's case did not run (name it in --cases)\n");
            exit(1);
        }
        abba_res *r = &g_abba_res[g_n_abba++];
        r->a = ka->c;
        r->b = kb->c;
        const kept *order[4] = {ka, kb, kb, ka};
        for (int i = 0; i < 4; i++)
            r->ms[i] = abba_block(order[i], &r->t0[i], &r->t1[i]);
        double a = 0.5 * (r->ms[0] + r->ms[3]), b = 0.5 * (r->ms[1] + r->ms[2]);
        fprintf(stderr,
                "abba %-28s %8.4f ms  %-28s %8.4f ms  B/A %.4f  (blocks %.4f %.4f %.4f %.4f)\n",
                ka->c->name, a, kb->c->name, b, b / a, r->ms[0], r->ms[1], r->ms[2], r->ms[3]);
        p = q ? q + lb : p + la;
        if (*p)
            p++;
    }
}

/* --abba's pairs into the results file: each block's time and last-half
 * window (nothing without pairs). */
static void abba_json(FILE *f) {
    if (!g_n_abba)
        return;
    fprintf(f, "  \"abba_block_s\": %.3f,\n  \"abba\": [\n", g_abba_s);
    for (int i = 0; i < g_n_abba; i++) {
        const abba_res *r = &g_abba_res[i];
        double a = 0.5 * (r->ms[0] + r->ms[3]), b = 0.5 * (r->ms[1] + r->ms[2]);
        fprintf(f,
                "    {\"a\": \"%s\", \"b\": \"%s\", \"a_ms\": %.4f, \"b_ms\": %.4f, "
                "\"b_over_a\": %.4f, \"blocks_ms\": [%.4f, %.4f, %.4f, %.4f], "
                "\"windows\": [[%.3f, %.3f], [%.3f, %.3f], [%.3f, %.3f], [%.3f, %.3f]]}%s\n",
                r->a->name, r->b->name, a, b, b / a, r->ms[0], r->ms[1], r->ms[2], r->ms[3],
                r->t0[0], r->t1[0], r->t0[1], r->t1[1], r->t0[2], r->t1[2], r->t0[3], r->t1[3],
                i + 1 < g_n_abba ? "," : "");
    }
    fprintf(f, "  ],\n");
}

/* Runs --abba's pairs (every case named in one ran and kept its program),
 * then frees the kept programs. */
static void abba_finish(void) {
    if (!g_abba)
        return;
    abba_run();
    for (int i = 0; i < g_n_kept; i++) {
        kf_cuda_exec_destroy(g_kept[i].ex);
        kf_plan_destroy(g_kept[i].plan);
        kf_graph_destroy(g_kept[i].g);
    }
    g_n_kept = 0;
}

/* Plans and prepares `c` in `ctx`, fills its inputs, times it. */
static void run_case(kf_ctx *ctx, bcase *c, double copy_gbs, double gemm_tflops) {
    kf_graph *g = parse(ctx, c->text);
    kf_plan *plan = NULL;
    kf_plan_options po; /* as the context's flags ask (kf_compile's rule) */
    kf_plan_options_for_flags(ctx->flags, &po);
    if (kf_plan_create(g, &po, &plan) != KF_OK) {
        fprintf(stderr, "gpu_bench: plan: %s\n", kf_graph_error(g));
        exit(1);
    }
    kf_cuda_exec *ex = NULL;
    if (c->rflags) { /* kf_cuda_exec_build with the target's flags amended */
        kf_cuda_target tg;
        CHECK(kf_cuda_exec_open(ctx, &ex, &tg, err));
        tg.flags |= c->rflags;
        kf_cuda_recipes *rec = NULL;
        CHECK(kf_cuda_recipes_create(plan, &tg, &ctx->mem, &rec, err));
        CHECK(kf_cuda_exec_prepare(ex, plan, rec, err));
    } else {
        CHECK(kf_cuda_exec_build(ctx, plan, &ex, err));
    }
    /* Random inputs, on the device. */
    for (uint32_t i = 0; i < g->n_inputs; i++)
        set_random_input(ex, g->inputs[i], 1000 + i * 7919ull);
    /* _geo cases (att17b): ALiBi's slopes as the ALiBi paper sets them,
     * 2^(-8 (h + 1) / H) for H heads, where the random fill gives uniform
     * [-1, 1): half the heads' bias then grows away from the diagonal */
    if (strstr(c->name, "_geo"))
        for (uint32_t i = 0; i < g->n_inputs; i++)
            if (g->inputs[i]->dtype == KF_DTYPE_BF16 && kf_ir_numel(g->inputs[i]) == 32)
                set_alibi_slopes(ex, g->inputs[i]);
    c->ms = after_gemm(c) && g_pre ? time_ms_after(run_gemm, g_pre, run_exec, ex)
            : after_sleep(c)       ? time_ms_after(run_spin, &g_spin_ns, run_exec, ex)
                                   : time_ms(run_exec, ex);
    if (g_sustain_s > 0)
        sustain_case(c, ex);
    c->launches = kf_cuda_exec_launch_count(ex);
    double fb = c->bytes / (copy_gbs * 1e9) * 1e3, ff = c->flops / (gemm_tflops * 1e12) * 1e3;
    c->floor_ms = fb > ff ? fb : ff;
    FILE *f = fmemopen(c->report, sizeof c->report - 1, "w");
    if (f) {
        kf_cuda_exec_report(ex, false, f);
        fclose(f);
    }
    fprintf(stderr,
            "%-26s %9.4f ms  floor %8.4f ms  %5.1f%% of roofline  %6.0f GB/s  (%zu launches)\n",
            c->name, c->ms, c->floor_ms, 100.0 * c->floor_ms / c->ms,
            c->bytes / (c->ms * 1e-3) / 1e9, c->launches);
    if (abba_on(c->name) && g_n_kept < ABBA_MAX_KEPT) {
        g_kept[g_n_kept++] = (kept){c, ex, plan, g};
        return;
    }
    kf_cuda_exec_destroy(ex);
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
}

/* ------------------------------------------------------------------------ */
/* JSON                                                                       */
/* ------------------------------------------------------------------------ */

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if (*s == '\n')
            fputs("\\n", f);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

/* Opens the results file bench/results/<gpu>-<commit><suffix>.json (its path
 * into path[size]; under $KF_SOURCE_DIR when set) and, when out_path is set,
 * that file too: outs[0] and outs[1], NULL where fopen failed. */
static void open_results(const char *commit, const char *suffix, const char *out_path, char *path,
                         size_t size, FILE *outs[2]) {
    char name[160];
    snprintf(name, sizeof name, "%s", DEV.name);
    for (char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')))
            *p = '-';
    const char *src = getenv("KF_SOURCE_DIR");
    snprintf(path, size, "%s/bench/results", src ? src : ".");
    mkdir(path, 0755);
    snprintf(path + strlen(path), size - strlen(path), "/%s-%s%s.json", name, commit, suffix);
    outs[0] = fopen(path, "w");
    outs[1] = out_path ? fopen(out_path, "w") : NULL;
}

/* The fields every suite's JSON object opens with, through "warmup"; `suite`
 * NULL for the default suite, which names none. */
static void json_head(FILE *f, const char *suite, const char *commit) {
    fprintf(f, "{\n  \"schema\": \"kfuse.bench/1\",\n  ");
    if (suite)
        fprintf(f, "\"suite\": \"%s\",\n  ", suite);
    fprintf(f, "\"gpu\": ");
    json_str(f, DEV.name);
    fprintf(f, ",\n  \"arch\": \"%s\",\n  \"sm_count\": %d,\n  \"driver\": %d,\n", DEV.arch,
            DEV.sm_count, D->driver_version);
    fprintf(f, "  \"commit\": ");
    json_str(f, commit);
    fprintf(f, ",\n  \"quick\": %s,\n  \"reps\": %d,\n  \"warmup\": %d,\n",
            g_quick ? "true" : "false", g_reps, g_warmup);
}

/* ------------------------------------------------------------------------ */
/* Attention (--attention)                                                    */
/* ------------------------------------------------------------------------ */

/* B x H x S x D bf16 attention with score body `body` (defines s1 from s0
 * = Q.K^T / sqrt(D)); kv heads `hkv` (< H: GQA, K and V broadcast over a
 * head-group axis); `tail`: more lines before the output (an lse output). */
static void attn_text_shape(char *t, size_t size, int B, int H, int S, int D, int hkv,
                            const char *body, const char *tail) {
    if (hkv < H)
        snprintf(t, size,
                 "kfg 1\nq = input(bf16[%d, %d, %d, %d, %d])\nk = input(bf16[%d, %d, 1, %d, %d])\n"
                 "v = input(bf16[%d, %d, 1, %d, %d])\n",
                 B, hkv, H / hkv, S, D, B, hkv, S, D, B, hkv, S, D);
    else
        snprintf(t, size,
                 "kfg 1\nq = input(bf16[%d, %d, %d, %d])\nk = input(bf16[%d, %d, %d, %d])\n"
                 "v = input(bf16[%d, %d, %d, %d])\n",
                 B, H, S, D, B, H, S, D, B, H, S, D);
    size_t n = strlen(t);
    snprintf(t + n, size - n,
             "qk = matmul(q, k, transpose_b=true)\nsc = const(bf16[], %.11g)\n"
             "s0 = mul(qk, sc)\nrow = iota(i32[%d, %d], axis=0)\ncol = iota(i32[%d, %d], axis=1)\n"
             "%sp = softmax(s1)\no = matmul(p, v)\noutput o\n%s",
             1.0 / sqrt((double)D), S, S, S, S, body, tail);
}

/* The causal attention of a transformer block with the block's layouts:
 * `layout` 'l' (LLaMA: Q and K [B, H, S, D] as the rotary kernel writes
 * them, V the projection's [B, S, H*D] read as [B, H, S, D] through a
 * permute, so its rows are H*D apart), 'g' (GPT-2: Q, K and V slices of one
 * [B, S, 3*H*D] projection, each permuted the same way), 'v' (V permuted
 * alone) or 'o' (Q, K, V contiguous); every layout but 'v' writes O as the
 * block does, [B, S, H, D] (the permute back and the reshape that merges the
 * heads), 'v' as [B, H, S, D]. */
static void attn_block_text(char *t, size_t size, int B, int H, int S, int D, char layout) {
    const int HD = H * D;
    size_t n = 0;
    n += (size_t)snprintf(t + n, size - n, "kfg 1\n");
    if (layout == 'g') {
        n += (size_t)snprintf(t + n, size - n, "x = input(bf16[%d, %d, %d])\n", B, S, 3 * HD);
        static const char *const nm[3] = {"q", "k", "v"};
        for (int i = 0; i < 3; i++)
            n += (size_t)snprintf(t + n, size - n,
                                  "%s2 = slice(x, axis=2, start=%d, stop=%d)\n"
                                  "%s4 = reshape(%s2, [%d, %d, %d, %d])\n"
                                  "%s = permute(%s4, [0, 2, 1, 3])\n",
                                  nm[i], i * HD, (i + 1) * HD, nm[i], nm[i], B, S, H, D, nm[i],
                                  nm[i]);
    } else {
        n += (size_t)snprintf(t + n, size - n,
                              "q = input(bf16[%d, %d, %d, %d])\nk = input(bf16[%d, %d, %d, %d])\n",
                              B, H, S, D, B, H, S, D);
        if (layout == 'o')
            n += (size_t)snprintf(t + n, size - n, "v = input(bf16[%d, %d, %d, %d])\n", B, H,
                                  S, D);
        else
            n += (size_t)snprintf(t + n, size - n,
                                  "v2 = input(bf16[%d, %d, %d])\nv4 = reshape(v2, [%d, %d, %d, "
                                  "%d])\nv = permute(v4, [0, 2, 1, 3])\n",
                                  B, S, HD, B, S, H, D);
    }
    n += (size_t)snprintf(
        t + n, size - n,
        "qk = matmul(q, k, transpose_b=true)\nsc = const(bf16[], %.11g)\ns0 = mul(qk, sc)\n"
        "row = iota(i32[%d, %d], axis=0)\ncol = iota(i32[%d, %d], axis=1)\n"
        "keep = ge(row, col)\nninf = const(bf16[], -inf)\ns1 = where(keep, s0, ninf)\n"
        "p = softmax(s1)\no = matmul(p, v)\n",
        1.0 / sqrt((double)D), S, S, S, S);
    if (layout == 'v')
        snprintf(t + n, size - n, "output o\n");
    else
        snprintf(t + n, size - n,
                 "ot = permute(o, [0, 2, 1, 3])\nom = reshape(ot, [%d, %d, %d])\noutput om\n", B,
                 S, HD);
}

/* B4 H32 S x D128, the issue's shape. */
static void attn_text(char *t, size_t size, int S, int hkv, const char *body) {
    attn_text_shape(t, size, 4, 32, S, 128, hkv, body, "");
}

/* att19's per-item cost fit (the attn_fit_* rows): B4 H32 Sq x D128 bf16,
 * no mask, against Skv keys: at Sq 4096 the work items (4096 query tiles)
 * stay the same and only the key tiles each walks change; at Skv 1024 the
 * items change and each walks the same 8 key tiles. */
static void attn_cross_text(char *t, size_t size, int sq, int skv) {
    snprintf(t, size,
             "kfg 1\nq = input(bf16[4, 32, %d, 128])\nk = input(bf16[4, 32, %d, 128])\n"
             "v = input(bf16[4, 32, %d, 128])\nqk = matmul(q, k, transpose_b=true)\n"
             "sc = const(bf16[], %.11g)\ns0 = mul(qk, sc)\none = const(bf16[], 1)\n"
             "s1 = mul(s0, one)\np = softmax(s1)\no = matmul(p, v)\noutput o\n",
             sq, skv, skv, 1.0 / sqrt(128.0));
}

/* Decode: B x 32 query heads of one token against Skv 8192 keys, D 128,
 * bf16, no mask; kv heads `hkv` (< 32: GQA, K and V broadcast over the head
 * group). */
static void decode_text(char *t, size_t size, int B, int hkv) {
    int H = 32, S = 8192, D = 128;
    if (hkv < H)
        snprintf(t, size,
                 "kfg 1\nq = input(bf16[%d, %d, %d, 1, %d])\nk = input(bf16[%d, %d, 1, %d, %d])\n"
                 "v = input(bf16[%d, %d, 1, %d, %d])\n",
                 B, hkv, H / hkv, D, B, hkv, S, D, B, hkv, S, D);
    else
        snprintf(t, size,
                 "kfg 1\nq = input(bf16[%d, %d, 1, %d])\nk = input(bf16[%d, %d, %d, %d])\n"
                 "v = input(bf16[%d, %d, %d, %d])\n",
                 B, H, D, B, H, S, D, B, H, S, D);
    size_t n = strlen(t);
    snprintf(t + n, size - n,
             "qk = matmul(q, k, transpose_b=true)\nsc = const(bf16[], 0.08838834764)\n"
             "s1 = mul(qk, sc)\np = softmax(s1)\no = matmul(p, v)\noutput o\n");
}

static int attention_main(const char *commit, const char *out_path, bool peers, double copy_gbs,
                          double gemm_tflops, int64_t GM) {
    int S = g_quick ? 2048 : 4096;
    const char *causal = "keep = ge(row, col)\nninf = const(bf16[], -inf)\n"
                         "s1 = where(keep, s0, ninf)\n";
    const char *none = "one = const(bf16[], 1)\ns1 = mul(s0, one)\n";
    const char *softcap = "cap = const(bf16[], 30)\nt0 = div(s0, cap)\nt1 = tanh(t0)\n"
                          "t2 = mul(t1, cap)\nkeep = ge(row, col)\nninf = const(bf16[], -inf)\n"
                          "s1 = where(keep, t2, ninf)\n";
    const char *alibi = "slope = input(bf16[32, 1, 1])\ndi = sub(col, row)\ndf = cast(di, bf16)\n"
                        "bias = mul(slope, df)\nsb = add(s0, bias)\nkeep = ge(row, col)\n"
                        "ninf = const(bf16[], -inf)\ns1 = where(keep, sb, ninf)\n";
    const char *window = "d = sub(row, col)\nw = const(i32[], 1023)\nzero = const(i32[], 0)\n"
                         "rest = sub(w, d)\nm = min(d, rest)\nkeep = ge(m, zero)\n"
                         "ninf = const(bf16[], -inf)\ns1 = where(keep, s0, ninf)\n";
    /* block-sparse: a 32 x 32 keep map of 128 x 128 tiles, random (the
     * harness's bool inputs are fair coins) with the diagonal kept, so
     * 1/2 + 1/64 of the tiles (51.6%); an output too, so the map is a
     * loaded tensor (a 32 x 32 kernel beside the attention) */
    const char *block_sparse = "kin = input(bool[32, 32])\nbi = iota(i32[32, 32], axis=0)\n"
                               "bj = iota(i32[32, 32], axis=1)\ndiag = eq(bi, bj)\n"
                               "bm = where(diag, diag, kin)\noutput bm\n"
                               "r0 = repeat(bm, axis=0, times=128)\n"
                               "mk = repeat(r0, axis=1, times=128)\n"
                               "ninf = const(bf16[], -inf)\ns1 = where(mk, s0, ninf)\n";
    /* the softcap on scores 8 times the bench's (s0 x 8, exact: about 2.7
     * where the inputs' fill gives 0.33), so nearly every warp's key tile
     * holds an |s / 30| past tanh's identity range (the pair form's split
     * takes the tanh there: cg_attention_pair.c, pair_split) */
    const char *softcap_wide = "cap = const(bf16[], 30)\nwide = const(bf16[], 8)\n"
                               "sw = mul(s0, wide)\nt0 = div(sw, cap)\nt1 = tanh(t0)\n"
                               "t2 = mul(t1, cap)\nkeep = ge(row, col)\n"
                               "ninf = const(bf16[], -inf)\ns1 = where(keep, t2, ninf)\n";
    static char texts[21][2048];
    attn_text(texts[0], sizeof texts[0], S, 32, causal);
    attn_text(texts[1], sizeof texts[1], S, 32, causal);
    attn_text(texts[2], sizeof texts[2], S, 32, none);
    attn_text(texts[3], sizeof texts[3], S, 8, causal);
    attn_text(texts[4], sizeof texts[4], S, 32, softcap);
    attn_text(texts[5], sizeof texts[5], S, 32, alibi);
    attn_text(texts[6], sizeof texts[6], S, 32, window);
    decode_text(texts[7], sizeof texts[7], 16, 32);
    decode_text(texts[8], sizeof texts[8], 16, 8);
    decode_text(texts[9], sizeof texts[9], 64, 32);
    attn_text(texts[10], sizeof texts[10], S, 32, block_sparse);
    attn_text(texts[20], sizeof texts[20], S, 32, softcap_wide);
    /* the attention of the transformer blocks (--block): GPT-2-medium's B16
     * H16 S1024 D64 and LLaMA-7B's B8 H32 S2048 D128, causal; and the issue's
     * causal shape writing the scores' log-sum-exp (f32) too */
    attn_text_shape(texts[11], sizeof texts[11], 16, 16, 1024, 64, 16, causal, "");
    attn_text_shape(texts[12], sizeof texts[12], 8, 32, 2048, 128, 32, causal, "");
    attn_text_shape(texts[13], sizeof texts[13], 4, 32, S, 128, 32, causal,
                    "s32 = cast(s1, f32)\nlse = logsumexp(s32, axis=-1)\noutput lse\n");
    /* the same two shapes with the blocks' layouts (attn_block_text), and
     * LLaMA's with V's permute alone and with O's alone */
    attn_block_text(texts[14], sizeof texts[14], 8, 32, 2048, 128, 'l');
    attn_block_text(texts[15], sizeof texts[15], 16, 16, 1024, 64, 'g');
    attn_block_text(texts[16], sizeof texts[16], 8, 32, 2048, 128, 'v');
    attn_block_text(texts[17], sizeof texts[17], 8, 32, 2048, 128, 'o');
    /* the SIMT kernel's cases: f32 causal B4 H16 S1024 D64 (every bf16 of
     * the text made f32) and bf16 causal B4 H32 S2048 D32 */
    attn_text_shape(texts[18], sizeof texts[18], 4, 16, 1024, 64, 16, causal, "");
    {
        char f32t[2048];
        size_t o = 0;
        for (const char *c = texts[18]; *c && o + 4 < sizeof f32t;) {
            if (!strncmp(c, "bf16", 4)) {
                memcpy(f32t + o, "f32", 3);
                o += 3;
                c += 4;
            } else {
                f32t[o++] = *c++;
            }
        }
        f32t[o] = 0;
        snprintf(texts[18], sizeof texts[18], "%s", f32t);
    }
    attn_text_shape(texts[19], sizeof texts[19], 4, 32, 2048, 32, 32, causal, "");
    /* att19's per-item cost fit (attn_fit_*, each after 1 ms asleep: the
     * device time alone): 4096 work items of 128 queries in every row, the
     * key tiles an item walks varied. Non-causal B4 H32 Sq 4096 against Skv
     * keys in 128-key tiles (ncn: NARROW_KEYS, the items apart as the masked
     * kinds' at head dim 128; ncj: joined, ITEMS_JOINED) at Skv 512 .. 16384
     * and in the default's 176-key tiles (ncw) at Skv 6, 12, 24, 48 x 176;
     * causal at B16 S1024, B8 S2048, B4 S4096, B2 S8192 (H32: 4.5 .. 32.5
     * tiles an item), apart (the default) and joined (causalj); the window
     * 512, 1024, 2048 at S4096 peeled (the default since win18). time = units a block x
     * (tiles x t + c) gives each form's t and c. */
    /* Then (ncn_q*: NARROW_KEYS) Sq 1024, 2048, 8192 against Skv 1024: 1024
     * .. 8192 items of 8 key tiles each, the launch's fixed cost apart from
     * an item's; and the 176-key form with a 48-key last tile (ncwl: the
     * default's narrower last tile, KF_BC_LAST) and the same keys with the
     * last tile at the full width (ncwf: FULL_LAST_TILE) at Skv 6, 12, 24,
     * 48 x 176 + 48: how much of c the last tile's width holds. */
    static const int fit_skv[17] = {512,  1024, 2048, 4096, 8192, 16384, 1056, 2112, 4224,
                                    8448, 1024, 1024, 1024, 1104, 2160, 4272, 8496};
    static const int fit_sq[17] = {4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096,
                                   4096, 1024, 2048, 8192, 4096, 4096, 4096, 4096};
    static char fit_nc[17][1024], fit_c[4][2048], fit_w[3][2048];
    double fit_nc_fl[17], fit_c_fl[4], fit_w_fl[3], fit_nc_io[17], fit_c_io[4];
    for (int i = 0; i < 17; i++) {
        attn_cross_text(fit_nc[i], sizeof fit_nc[i], fit_sq[i], fit_skv[i]);
        fit_nc_fl[i] = 4.0 * 128 * fit_sq[i] * (double)fit_skv[i] * 128;
        fit_nc_io[i] = 2.0 * 128 * ((double)fit_sq[i] + fit_skv[i]) * 128 * 2;
    }
    for (int i = 0; i < 4; i++) {
        int sc = 1024 << i, bc = 16 >> i;
        attn_text_shape(fit_c[i], sizeof fit_c[i], bc, 32, sc, 128, 32, causal, "");
        fit_c_fl[i] = 4.0 * bc * 32 * (double)sc * sc * 128 / 2;
        fit_c_io[i] = 4.0 * bc * 32 * (double)sc * 128 * 2;
    }
    for (int i = 0; i < 3; i++) {
        int w = 512 << i;
        char body[512];
        snprintf(body, sizeof body,
                 "d = sub(row, col)\nw = const(i32[], %d)\nzero = const(i32[], 0)\n"
                 "rest = sub(w, d)\nm = min(d, rest)\nkeep = ge(m, zero)\n"
                 "ninf = const(bf16[], -inf)\ns1 = where(keep, s0, ninf)\n",
                 w - 1);
        attn_text(fit_w[i], sizeof fit_w[i], S, 32, body);
        double keys = 0;
        for (int q = 0; q < S; q++)
            keys += q + 1 < w ? q + 1 : w;
        fit_w_fl[i] = 4.0 * 128 * keys * 128;
    }
    double io_sf = 4.0 * 4 * 16 * 1024 * 64 * 4, fl_sf = 4.0 * 4 * 16 * 1024.0 * 1024 * 64 / 2;
    double io_sb = 4.0 * 4 * 32 * 2048 * 32 * 2, fl_sb = 4.0 * 4 * 32 * 2048.0 * 2048 * 32 / 2;
    /* decode moves K and V once (Q and O are 1/8192 of them) */
    double kv16 = 2.0 * 16 * 32 * 8192 * 128 * 2, kv16g = kv16 / 4, kv64 = kv16 * 4;
    double qo16 = 2.0 * 16 * 32 * 128 * 2;
    double fl16 = 4.0 * 16 * 32 * 8192 * 128;
    double bh = 4.0 * 32, ss = (double)S * S, d = 128;
    double io = 4.0 * bh * S * d * 2;            /* Q, K, V, O once */
    double io_gqa = 2.0 * bh * S * d * 2 + 2.0 * 4 * 8 * S * d * 2;
    double full = 4.0 * bh * ss * d;             /* two GEMMs */
    double win_keys = 0;                          /* keys per row under the window */
    for (int q = 0; q < S; q++)
        win_keys += q + 1 < 1024 ? q + 1 : 1024;
    /* the blocks' shapes: Q, K, V, O once; causal: half of the two GEMMs */
    double io_g2 = 4.0 * 16 * 16 * 1024 * 64 * 2, fl_g2 = 4.0 * 16 * 16 * 1024.0 * 1024 * 64 / 2;
    double io_ll = 4.0 * 8 * 32 * 2048 * 128 * 2, fl_ll = 4.0 * 8 * 32 * 2048.0 * 2048 * 128 / 2;
    const uint64_t PIN = KF_CUDA_RECIPE_ATTENTION_PIN_SOFTMAX;
    const uint64_t DCOMB = KF_CUDA_RECIPE_ATTENTION_DECODE_COMBINE;
    const uint64_t DX2 = KF_CUDA_RECIPE_ATTENTION_DECODE_SPLITS_X2;
    const uint64_t F32S = KF_CUDA_RECIPE_ATTENTION_F32_SCORE;
    const uint64_t TREE = KF_CUDA_RECIPE_ATTENTION_TREE_SOFTMAX;
    const uint64_t LPT = KF_CUDA_RECIPE_ATTENTION_TAIL_LPT;
    const uint64_t RS = KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE;
    const uint64_t NARROW = KF_CUDA_RECIPE_ATTENTION_NARROW_KEYS;
    const uint64_t CL2 = KF_CUDA_RECIPE_ATTENTION_CLUSTER2;
    const uint64_t RMAX = KF_CUDA_RECIPE_ATTENTION_ROW_MAX;
    const uint64_t EAGER = KF_CUDA_RECIPE_ATTENTION_EAGER_RESCALE;
    const uint64_t BSM = KF_CUDA_RECIPE_ATTENTION_BS_EDGE_MERGED;
    const uint64_t SKIP = KF_CUDA_RECIPE_ATTENTION_TANH_SKIP;
    const uint64_t DESC = KF_CUDA_RECIPE_ATTENTION_KEYS_DESC;
    const uint64_t ELAST = KF_CUDA_RECIPE_ATTENTION_EDGE_LAST;
    const uint64_t CHAIN = KF_CUDA_RECIPE_ATTENTION_CHAIN_SOFTMAX;
    const uint64_t POLY = KF_CUDA_RECIPE_ATTENTION_EXP2_POLY;
    const uint64_t CAPM = KF_CUDA_RECIPE_ATTENTION_SOFTCAP_MUFU;
    const uint64_t APART = KF_CUDA_RECIPE_ATTENTION_ITEMS_APART;
    const uint64_t JOIN = KF_CUDA_RECIPE_ATTENTION_ITEMS_JOINED;
    bcase cases[] = {
        {"attn_causal", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        /* the softmax's row max and sum as chains (_chain: KF_CUDA_RECIPE_
         * ATTENTION_CHAIN_SOFTMAX, the kernel before trees were the default
         * at head dim 128), a share of its exp2s by the FMA-pipe polynomial
         * (_e: KF_CUDA_RECIPE_ATTENTION_EXP2_POLY); the same for the other
         * shapes (attn_noncausal_chain, attn_gqa_chain, the GPT-2 shape's _e
         * and _t -- trees, not its default --; the softcap's own rows below) */
        {"attn_causal_chain", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, CHAIN},
        {"attn_causal_e", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, POLY},
        /* the same with the softmax pinned under P.V (_pin: the recipe flag
         * KF_CUDA_RECIPE_ATTENTION_PIN_SOFTMAX) or with f32 scores (_f32s:
         * KF_CUDA_RECIPE_ATTENTION_F32_SCORE), and timed after the pre-GEMM
         * (_after_gemm: the device time alone, behind a block's worth of GEMM,
         * as the profiler sees the kernel inside a block) or after 1 ms
         * asleep (_after_sleep: the device time alone on an idle GPU) */
        {"attn_causal_pin", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, PIN},
        {"attn_causal_after_gemm", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_causal_pin_after_gemm", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, PIN},
        {"attn_causal_after_sleep", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_causal_f32s", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, F32S},
        /* the rounded form, the default before f32 scores (_rs:
         * KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE) */
        {"attn_causal_rs", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, RS},
        {"attn_causal_rs_after_gemm", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, RS},
        {"attn_causal_f32s_after_gemm", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, F32S},
        /* the forms together: pinned with f32 scores (_pf), f32 scores with
         * the softmax's reductions as trees (_ft: KF_CUDA_RECIPE_ATTENTION_
         * TREE_SOFTMAX), all three (_pft) */
        {"attn_causal_pf", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, PIN | F32S},
        {"attn_causal_ft", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, F32S | TREE},
        {"attn_causal_pft", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, PIN | F32S | TREE},
        {"attn_causal_pft_after_gemm", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO,
         PIN | F32S | TREE},
        /* the tail's items grid-strided like the rest (_grid: KF_CUDA_RECIPE_
         * ATTENTION_TAIL_LPT, which on a causal or window mask at head dim
         * 128 keeps the walk
         * before the tail longest first became their default; these rows were
         * _l and _pftl, the tail's form, while it was opt-in), alone and with
         * every other form (_pft_grid) */
        {"attn_causal_grid", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, LPT},
        {"attn_causal_pft_grid", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO,
         PIN | F32S | TREE | LPT},
        {"attn_causal_pft_grid_after_gemm", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO,
         PIN | F32S | TREE | LPT},
        {"attn_causal_b16h16s1024d64", texts[11], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_causal_b16h16s1024d64_t", texts[11], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO, TREE},
        {"attn_causal_b16h16s1024d64_e", texts[11], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO, POLY},
        /* the work items one at a time (_old: KF_CUDA_RECIPE_ATTENTION_
         * ITEMS_APART, the kernel before an item's last P.V shared the next
         * item's first turn), and joined where they are apart by default
         * (_j: KF_CUDA_RECIPE_ATTENTION_ITEMS_JOINED; head dim 128 where
         * cg_attention.c's KF_SM90_JOIN_D128 is 0, else the default's
         * kernel): causal, GQA, window and block-sparse */
        {"attn_causal_b16h16s1024d64_old", texts[11], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO,
         APART},
        {"attn_causal_old", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, APART},
        {"attn_gqa_old", texts[3], io_gqa, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, APART},
        {"attn_window_old", texts[6], io, 4.0 * bh * win_keys * d, 0, 0, 0, "", KF_GEMM_AUTO,
         APART},
        {"attn_block_sparse_old", texts[10], io, full * (0.5 + 1.0 / 64), 0, 0, 0, "",
         KF_GEMM_AUTO, APART},
        {"attn_causal_j", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, JOIN},
        {"attn_gqa_j", texts[3], io_gqa, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, JOIN},
        {"attn_window_j", texts[6], io, 4.0 * bh * win_keys * d, 0, 0, 0, "", KF_GEMM_AUTO, JOIN},
        {"attn_block_sparse_j", texts[10], io, full * (0.5 + 1.0 / 64), 0, 0, 0, "",
         KF_GEMM_AUTO, JOIN},
        {"attn_causal_b8h32s2048d128", texts[12], io_ll, fl_ll, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_block_llama", texts[14], io_ll, fl_ll, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_block_llama_pin", texts[14], io_ll, fl_ll, 0, 0, 0, "", KF_GEMM_AUTO, PIN},
        {"attn_block_llama_after_gemm", texts[14], io_ll, fl_ll, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_block_llama_pin_after_gemm", texts[14], io_ll, fl_ll, 0, 0, 0, "", KF_GEMM_AUTO,
         PIN},
        {"attn_block_llama_after_sleep", texts[14], io_ll, fl_ll, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_block_llama_f32s", texts[14], io_ll, fl_ll, 0, 0, 0, "", KF_GEMM_AUTO, F32S},
        {"attn_block_llama_rs", texts[14], io_ll, fl_ll, 0, 0, 0, "", KF_GEMM_AUTO, RS},
        {"attn_block_llama_rs_after_gemm", texts[14], io_ll, fl_ll, 0, 0, 0, "", KF_GEMM_AUTO,
         RS},
        {"attn_block_llama_f32s_after_gemm", texts[14], io_ll, fl_ll, 0, 0, 0, "",
         KF_GEMM_AUTO, F32S},
        {"attn_block_llama_pf", texts[14], io_ll, fl_ll, 0, 0, 0, "", KF_GEMM_AUTO, PIN | F32S},
        {"attn_block_llama_ft", texts[14], io_ll, fl_ll, 0, 0, 0, "", KF_GEMM_AUTO, F32S | TREE},
        {"attn_block_llama_pft", texts[14], io_ll, fl_ll, 0, 0, 0, "", KF_GEMM_AUTO,
         PIN | F32S | TREE},
        {"attn_block_llama_grid", texts[14], io_ll, fl_ll, 0, 0, 0, "", KF_GEMM_AUTO, LPT},
        {"attn_block_llama_pft_grid", texts[14], io_ll, fl_ll, 0, 0, 0, "", KF_GEMM_AUTO,
         PIN | F32S | TREE | LPT},
        {"attn_block_gpt2", texts[15], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_block_gpt2_pin", texts[15], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO, PIN},
        {"attn_block_gpt2_after_gemm", texts[15], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_block_gpt2_pin_after_gemm", texts[15], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO,
         PIN},
        {"attn_block_gpt2_after_sleep", texts[15], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_block_gpt2_f32s", texts[15], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO, F32S},
        {"attn_block_gpt2_rs", texts[15], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO, RS},
        {"attn_block_gpt2_rs_after_gemm", texts[15], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO,
         RS},
        {"attn_block_gpt2_f32s_after_gemm", texts[15], io_g2, fl_g2, 0, 0, 0, "",
         KF_GEMM_AUTO, F32S},
        {"attn_block_gpt2_pf", texts[15], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO, PIN | F32S},
        {"attn_block_gpt2_ft", texts[15], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO, F32S | TREE},
        {"attn_block_gpt2_pft", texts[15], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO,
         PIN | F32S | TREE},
        {"attn_block_gpt2_pftl", texts[15], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO,
         PIN | F32S | TREE | LPT},
        {"attn_block_llama_v", texts[16], io_ll, fl_ll, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_block_llama_o", texts[17], io_ll, fl_ll, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_causal_lse", texts[13], io + bh * S * 4, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_causal_unfused", texts[1], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        /* the SIMT kernel (the default for f32 and head dims the tensor-core
         * kernels refuse) and the unfused steps it replaced; its roofline is
         * the bf16 GEMM rate's, which no FFMA kernel reaches */
        {"attn_simt_f32_causal", texts[18], io_sf, fl_sf, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_simt_f32_causal_unfused", texts[18], io_sf, fl_sf, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_simt_bf16_d32_causal", texts[19], io_sb, fl_sb, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_simt_bf16_d32_causal_unfused", texts[19], io_sb, fl_sb, 0, 0, 0, "",
         KF_GEMM_AUTO, 0},
        {"attn_noncausal", texts[2], io, full, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        /* the 176-key form's ragged last tile (4096 = 23 x 176 + 48) at the
         * full width (_full: KF_CUDA_RECIPE_ATTENTION_FULL_LAST_TILE, the
         * form before the narrower one, nc14) */
        {"attn_noncausal_full", texts[2], io, full, 0, 0, 0, "", KF_GEMM_AUTO,
         KF_CUDA_RECIPE_ATTENTION_FULL_LAST_TILE},
        /* att16: head dim 128 rescales O, l and m only where a row max grew
         * past 2^8 by default; _y: at every key tile (KF_CUDA_RECIPE_
         * ATTENTION_EAGER_RESCALE, the kernel before). At e5fbc65 the rows
         * _z were the lazy form by an opt-in flag (the same bit) and the
         * plain rows the per-tile one */
        {"attn_noncausal_y", texts[2], io, full, 0, 0, 0, "", KF_GEMM_AUTO, EAGER},
        {"attn_causal_y", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, EAGER},
        {"attn_gqa_y", texts[3], io_gqa, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, EAGER},
        {"attn_block_sparse_y", texts[10], io, full * (0.5 + 1.0 / 64), 0, 0, 0, "",
         KF_GEMM_AUTO, EAGER},
        {"attn_noncausal_chain", texts[2], io, full, 0, 0, 0, "", KF_GEMM_AUTO, CHAIN},
        /* non-causal (the default: 176-key tiles) with 128-key tiles (_narrow:
         * KF_CUDA_RECIPE_ATTENTION_NARROW_KEYS, the default before), in 2-CTA
         * clusters sharing K and V (_c: KF_CUDA_RECIPE_ATTENTION_CLUSTER2),
         * both (_narrow_c), each also after 1 ms asleep */
        {"attn_noncausal_narrow", texts[2], io, full, 0, 0, 0, "", KF_GEMM_AUTO, NARROW},
        {"attn_noncausal_c", texts[2], io, full, 0, 0, 0, "", KF_GEMM_AUTO, CL2},
        {"attn_noncausal_narrow_c", texts[2], io, full, 0, 0, 0, "", KF_GEMM_AUTO, NARROW | CL2},
        {"attn_noncausal_after_sleep", texts[2], io, full, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_noncausal_narrow_after_sleep", texts[2], io, full, 0, 0, 0, "", KF_GEMM_AUTO,
         NARROW},
        {"attn_noncausal_c_after_sleep", texts[2], io, full, 0, 0, 0, "", KF_GEMM_AUTO, CL2},
        {"attn_noncausal_narrow_c_after_sleep", texts[2], io, full, 0, 0, 0, "", KF_GEMM_AUTO,
         NARROW | CL2},
        {"attn_gqa", texts[3], io_gqa, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_gqa_chain", texts[3], io_gqa, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, CHAIN},
        {"attn_softcap", texts[4], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        /* att17: the score expression in f32 (the default: every float node
         * unrounded, a softcap's 30 folded into the softmax's scale, ALiBi's
         * diagonal stepped along the tile); _rs: rounded as the reference
         * stores it (KF_CUDA_RECIPE_ATTENTION_ROUNDED_SCORE, the kernel
         * before: the pair form, ALiBi's table); also on the wide scores */
        {"attn_softcap_rs", texts[4], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, RS},
        {"attn_alibi_rs", texts[5], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, RS},
        /* a softcap's MUFU ops: by default a quarter of its exp2s on the FMA
         * pipe (sc14; the _e kernel before); _mufu: every one on MUFU (KF_CUDA_
         * RECIPE_ATTENTION_SOFTCAP_MUFU, the kernel before); the same on the
         * wide scores. (_h and _t, a quarter of the tanhs by a rational with
         * and without the exp2 share, went with their flag TANH_POLY: win18.) */
        {"attn_softcap_mufu", texts[4], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, CAPM},
        {"attn_alibi", texts[5], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        /* att17b: a causal or window item's key tiles diagonal-first (_desc:
         * KF_CUDA_RECIPE_ATTENTION_KEYS_DESC), where by default ascending,
         * the diagonal last: ALiBi's row max then settles on the first tile
         * and the lazy rescale stays idle */
        {"attn_alibi_desc", texts[5], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, DESC},
        /* _geo: the ALiBi paper's slopes (positive), not the random fill's */
        {"attn_alibi_geo", texts[5], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_alibi_geo_desc", texts[5], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, DESC},
        {"attn_causal_desc", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, DESC},
        {"attn_softcap_desc", texts[4], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, DESC},
        {"attn_gqa_desc", texts[3], io_gqa, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, DESC},
        {"attn_window_desc", texts[6], io, 4.0 * bh * win_keys * d, 0, 0, 0, "", KF_GEMM_AUTO,
         DESC},
        {"attn_causal_b16h16s1024d64_desc", texts[11], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO,
         DESC},
        /* att17c: the ascending causal walk's last step peeled, the loop's
         * steps with no edge path (_elast: KF_CUDA_RECIPE_ATTENTION_EDGE_
         * LAST), where by default every step checks for an edge. (att17c's
         * run at cb011fc had the two the other way round: its _eloop rows
         * are this default, its plain rows this _elast.) The softcap's
         * default is the peeled step since att18, so attn_softcap_elast
         * is the form checking every step there. */
        {"attn_causal_elast", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, ELAST},
        {"attn_gqa_elast", texts[3], io_gqa, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, ELAST},
        {"attn_alibi_elast", texts[5], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, ELAST},
        {"attn_alibi_geo_elast", texts[5], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, ELAST},
        {"attn_softcap_elast", texts[4], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, ELAST},
        {"attn_causal_b16h16s1024d64_elast", texts[11], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO,
         ELAST},
        /* the sliding window's edge check in every step of the main loop
         * (_inloop: KF_CUDA_RECIPE_ATTENTION_WINDOW_INLOOP, the form before
         * win18, where ptxas merges the two-sided mask into every step), where
         * by default the far edge's step(s) run first, the diagonal's peeled
         * after the loop, and the loop between them has no edge path; its
         * _after_sleep twin beside attn_window_after_sleep */
        {"attn_window_inloop", texts[6], io, 4.0 * bh * win_keys * d, 0, 0, 0, "", KF_GEMM_AUTO,
         KF_CUDA_RECIPE_ATTENTION_WINDOW_INLOOP},
        {"attn_window_inloop_after_sleep", texts[6], io, 4.0 * bh * win_keys * d, 0, 0, 0, "",
         KF_GEMM_AUTO, KF_CUDA_RECIPE_ATTENTION_WINDOW_INLOOP},
        /* the score's form before score12's fixed shift: the running row max
         * kept (_rowmax: KF_CUDA_RECIPE_ATTENTION_ROW_MAX; score12's scalar
         * inner score, _scalar, was retired with its flag by att16) */
        {"attn_softcap_rowmax", texts[4], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, RMAX},
        /* scr13's forms: the softcap split at its tanh (_skip: the opt-in
         * KF_CUDA_RECIPE_ATTENTION_TANH_SKIP takes tanh(x) as x where a
         * warp's every |x| rounds so); and the softcap on scores 8 times
         * larger (_wide: the split takes the tanh almost everywhere); each in
         * the rounded form (RS, att17: the pair form's). (_diag_each, ALiBi's
         * bias for each of a thread's two rows, went with its flag: att17b.) */
        {"attn_softcap_skip", texts[4], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, RS | SKIP},
        /* att18: ALiBi's f32 diagonal stepped along the tile and added to
         * each scaled score (_step: KF_CUDA_RECIPE_ATTENTION_DIAG_STEPPED,
         * the form before), where by default the tile keeps the score's
         * affine part and the softmax its row terms; with the random and
         * the paper's slopes (_geo). (_dcomp, ali15's rounded-form pairs
         * computed on every tile, went with its flag DIAG_COMPUTE: att18;
         * _edge_scalar and _before with theirs: att17c.) */
        {"attn_alibi_step", texts[5], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO,
         KF_CUDA_RECIPE_ATTENTION_DIAG_STEPPED},
        {"attn_alibi_geo_step", texts[5], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO,
         KF_CUDA_RECIPE_ATTENTION_DIAG_STEPPED},
        {"attn_softcap_wide", texts[20], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_softcap_wide_rs", texts[20], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, RS},
        {"attn_softcap_wide_skip", texts[20], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, RS | SKIP},
        {"attn_softcap_wide_mufu", texts[20], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, CAPM},
        {"attn_window", texts[6], io, 4.0 * bh * win_keys * d, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_block_sparse", texts[10], io, full * (0.5 + 1.0 / 64), 0, 0, 0, "", KF_GEMM_AUTO,
         0},
        /* the target rows' device time alone, after 1 ms asleep, peers timed
         * the same way (the plain rows count each peer's host work before its
         * launch: SDPA's dispatch, the compiled Flex call's guards) */
        {"attn_gqa_after_sleep", texts[3], io_gqa, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_softcap_after_sleep", texts[4], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_alibi_after_sleep", texts[5], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_alibi_geo_after_sleep", texts[5], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_window_after_sleep", texts[6], io, 4.0 * bh * win_keys * d, 0, 0, 0, "",
         KF_GEMM_AUTO, 0},
        {"attn_block_sparse_after_sleep", texts[10], io, full * (0.5 + 1.0 / 64), 0, 0, 0, "",
         KF_GEMM_AUTO, 0},
        /* the block-sparse kernel before bsp13 (_walk: the map read per key
         * tile, query tiles in their order; KF_CUDA_RECIPE_ATTENTION_BS_MAP_
         * WALK) */
        {"attn_block_sparse_walk", texts[10], io, full * (0.5 + 1.0 / 64), 0, 0, 0, "",
         KF_GEMM_AUTO, KF_CUDA_RECIPE_ATTENTION_BS_MAP_WALK},
        /* the keep map's edge path merged into the inner tiles' (_m:
         * KF_CUDA_RECIPE_ATTENTION_BS_EDGE_MERGED, the kernel before att16:
         * 64 FSEL on every kept 128-key tile) */
        {"attn_block_sparse_m", texts[10], io, full * (0.5 + 1.0 / 64), 0, 0, 0, "",
         KF_GEMM_AUTO, BSM},
        /* the L2 policies (K and V evict_last, Q and O evict_first) and the
         * walk's next kept tile prefetched into L2 (_l2:
         * KF_CUDA_RECIPE_ATTENTION_BS_L2) */
        {"attn_block_sparse_l2", texts[10], io, full * (0.5 + 1.0 / 64), 0, 0, 0, "",
         KF_GEMM_AUTO, KF_CUDA_RECIPE_ATTENTION_BS_L2},
        {"attn_block_sparse_fa2", texts[10], io, full * (0.5 + 1.0 / 64), 0, 0, 0, "",
         KF_GEMM_AUTO, 0},
        /* the same cases with the FA2 (mma.sync) kernel, --attention fa2
         * (the default above: the sm_90a kernel on sm_90a) */
        {"attn_causal_fa2", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_noncausal_fa2", texts[2], io, full, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_gqa_fa2", texts[3], io_gqa, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_softcap_fa2", texts[4], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_alibi_fa2", texts[5], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_window_fa2", texts[6], io, 4.0 * bh * win_keys * d, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        /* decode, B16 H32 Sq1 Skv8192 D128: the split-KV kernels (--attention
         * decode), and the default's kernel (_sm90) for comparison; GQA 32:8;
         * B64 (the issue's target row) */
        {"attn_decode", texts[7], kv16 + qo16, fl16, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_decode_sm90", texts[7], kv16 + qo16, fl16, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_decode_gqa", texts[8], kv16g + qo16, fl16, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_decode_gqa_sm90", texts[8], kv16g + qo16, fl16, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"attn_decode_b64", texts[9], kv64 + 4 * qo16, 4 * fl16, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        /* the one-split rows' other forms: the split kernel's partials and
         * the combine at one split (_combine: KF_CUDA_RECIPE_ATTENTION_
         * DECODE_COMBINE, the form before the direct kernel), and twice the
         * rule's splits (_x2: ATTENTION_DECODE_SPLITS_X2, 2 for B16 / B64) */
        {"attn_decode_combine", texts[7], kv16 + qo16, fl16, 0, 0, 0, "", KF_GEMM_AUTO, DCOMB},
        {"attn_decode_x2", texts[7], kv16 + qo16, fl16, 0, 0, 0, "", KF_GEMM_AUTO, DX2},
        {"attn_decode_b64_combine", texts[9], kv64 + 4 * qo16, 4 * fl16, 0, 0, 0, "", KF_GEMM_AUTO,
         DCOMB},
        {"attn_decode_b64_x2", texts[9], kv64 + 4 * qo16, 4 * fl16, 0, 0, 0, "", KF_GEMM_AUTO, DX2},
        /* att19's per-item cost fit (above, fit_skv) */
        {"attn_fit_ncn_kv512_after_sleep", fit_nc[0], fit_nc_io[0], fit_nc_fl[0], 0, 0, 0, "",
         KF_GEMM_AUTO, NARROW},
        {"attn_fit_ncn_kv1024_after_sleep", fit_nc[1], fit_nc_io[1], fit_nc_fl[1], 0, 0, 0, "",
         KF_GEMM_AUTO, NARROW},
        {"attn_fit_ncn_kv2048_after_sleep", fit_nc[2], fit_nc_io[2], fit_nc_fl[2], 0, 0, 0, "",
         KF_GEMM_AUTO, NARROW},
        {"attn_fit_ncn_kv4096_after_sleep", fit_nc[3], fit_nc_io[3], fit_nc_fl[3], 0, 0, 0, "",
         KF_GEMM_AUTO, NARROW},
        {"attn_fit_ncn_kv8192_after_sleep", fit_nc[4], fit_nc_io[4], fit_nc_fl[4], 0, 0, 0, "",
         KF_GEMM_AUTO, NARROW},
        {"attn_fit_ncn_kv16384_after_sleep", fit_nc[5], fit_nc_io[5], fit_nc_fl[5], 0, 0, 0, "",
         KF_GEMM_AUTO, NARROW},
        {"attn_fit_ncj_kv512_after_sleep", fit_nc[0], fit_nc_io[0], fit_nc_fl[0], 0, 0, 0, "",
         KF_GEMM_AUTO, NARROW | JOIN},
        {"attn_fit_ncj_kv1024_after_sleep", fit_nc[1], fit_nc_io[1], fit_nc_fl[1], 0, 0, 0, "",
         KF_GEMM_AUTO, NARROW | JOIN},
        {"attn_fit_ncj_kv2048_after_sleep", fit_nc[2], fit_nc_io[2], fit_nc_fl[2], 0, 0, 0, "",
         KF_GEMM_AUTO, NARROW | JOIN},
        {"attn_fit_ncj_kv4096_after_sleep", fit_nc[3], fit_nc_io[3], fit_nc_fl[3], 0, 0, 0, "",
         KF_GEMM_AUTO, NARROW | JOIN},
        {"attn_fit_ncj_kv8192_after_sleep", fit_nc[4], fit_nc_io[4], fit_nc_fl[4], 0, 0, 0, "",
         KF_GEMM_AUTO, NARROW | JOIN},
        {"attn_fit_ncj_kv16384_after_sleep", fit_nc[5], fit_nc_io[5], fit_nc_fl[5], 0, 0, 0, "",
         KF_GEMM_AUTO, NARROW | JOIN},
        {"attn_fit_ncw_kv1056_after_sleep", fit_nc[6], fit_nc_io[6], fit_nc_fl[6], 0, 0, 0,
         "", KF_GEMM_AUTO, 0},
        {"attn_fit_ncw_kv2112_after_sleep", fit_nc[7], fit_nc_io[7], fit_nc_fl[7], 0, 0, 0,
         "", KF_GEMM_AUTO, 0},
        {"attn_fit_ncw_kv4224_after_sleep", fit_nc[8], fit_nc_io[8], fit_nc_fl[8], 0, 0, 0,
         "", KF_GEMM_AUTO, 0},
        {"attn_fit_ncw_kv8448_after_sleep", fit_nc[9], fit_nc_io[9], fit_nc_fl[9], 0, 0, 0,
         "", KF_GEMM_AUTO, 0},
        {"attn_fit_causal_s1024_after_sleep", fit_c[0], fit_c_io[0], fit_c_fl[0], 0, 0, 0, "",
         KF_GEMM_AUTO, 0},
        {"attn_fit_causal_s2048_after_sleep", fit_c[1], fit_c_io[1], fit_c_fl[1], 0, 0, 0, "",
         KF_GEMM_AUTO, 0},
        {"attn_fit_causal_s4096_after_sleep", fit_c[2], fit_c_io[2], fit_c_fl[2], 0, 0, 0, "",
         KF_GEMM_AUTO, 0},
        {"attn_fit_causal_s8192_after_sleep", fit_c[3], fit_c_io[3], fit_c_fl[3], 0, 0, 0, "",
         KF_GEMM_AUTO, 0},
        {"attn_fit_causalj_s1024_after_sleep", fit_c[0], fit_c_io[0], fit_c_fl[0], 0, 0, 0, "",
         KF_GEMM_AUTO, JOIN},
        {"attn_fit_causalj_s2048_after_sleep", fit_c[1], fit_c_io[1], fit_c_fl[1], 0, 0, 0, "",
         KF_GEMM_AUTO, JOIN},
        {"attn_fit_causalj_s4096_after_sleep", fit_c[2], fit_c_io[2], fit_c_fl[2], 0, 0, 0, "",
         KF_GEMM_AUTO, JOIN},
        {"attn_fit_causalj_s8192_after_sleep", fit_c[3], fit_c_io[3], fit_c_fl[3], 0, 0, 0, "",
         KF_GEMM_AUTO, JOIN},
        {"attn_fit_window_w512_after_sleep", fit_w[0], io, fit_w_fl[0], 0, 0, 0, "",
         KF_GEMM_AUTO, 0},
        {"attn_fit_window_w1024_after_sleep", fit_w[1], io, fit_w_fl[1], 0, 0, 0, "",
         KF_GEMM_AUTO, 0},
        {"attn_fit_window_w2048_after_sleep", fit_w[2], io, fit_w_fl[2], 0, 0, 0, "",
         KF_GEMM_AUTO, 0},
        /* att19: the schedule's share (bench/attn_schedule.py: the slowest
         * block's 16 units against the mean's 15.52 at causal S4096, 3.1%;
         * the tail longest first 0.6% in the model; the window's units
         * unequal, 8.0%, with the tail 5.6%). The tail is the default for
         * causal and window masks at head dim 128 since session 19 (H100,
         * de9d9a2; H200, 59e2145); these
         * rows, then _l with the tail, are the grid-strided walk now
         * (_grid: TAIL_LPT), after 1 ms asleep, and the softcap plain for an
         * A B B A beside attn_softcap */
        {"attn_causal_grid_after_sleep", texts[0], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, LPT},
        {"attn_softcap_grid", texts[4], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, LPT},
        {"attn_softcap_grid_after_sleep", texts[4], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, LPT},
        {"attn_window_grid_after_sleep", texts[6], io, 4.0 * bh * win_keys * d, 0, 0, 0, "",
         KF_GEMM_AUTO, LPT},
        /* the other causal target rows' grid-strided walk (session 19's
         * check that the tail's default does not cost ALiBi or GQA), and
         * GPT-2's head dim 64 with the tail (_l: there the flag asks for it;
         * it ran 7% slower, H200, 59e2145, so head dim 64 keeps the walk) */
        {"attn_alibi_geo_grid", texts[5], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, LPT},
        {"attn_alibi_geo_grid_after_sleep", texts[5], io, full / 2, 0, 0, 0, "", KF_GEMM_AUTO,
         LPT},
        {"attn_gqa_grid", texts[3], io_gqa, full / 2, 0, 0, 0, "", KF_GEMM_AUTO, LPT},
        {"attn_gqa_grid_after_sleep", texts[3], io_gqa, full / 2, 0, 0, 0, "", KF_GEMM_AUTO,
         LPT},
        {"attn_block_gpt2_l", texts[15], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO, LPT},
        {"attn_block_gpt2_l_after_sleep", texts[15], io_g2, fl_g2, 0, 0, 0, "", KF_GEMM_AUTO,
         LPT},
        /* the items varied (ncn_q*), the causal last step peeled (causale:
         * EDGE_LAST), the 176-key form's last tile narrow (ncwl) and full (ncwf) */
        {"attn_fit_ncn_q1024_kv1024_after_sleep", fit_nc[10], fit_nc_io[10], fit_nc_fl[10], 0,
         0, 0, "", KF_GEMM_AUTO, NARROW},
        {"attn_fit_ncn_q2048_kv1024_after_sleep", fit_nc[11], fit_nc_io[11], fit_nc_fl[11], 0,
         0, 0, "", KF_GEMM_AUTO, NARROW},
        {"attn_fit_ncn_q8192_kv1024_after_sleep", fit_nc[12], fit_nc_io[12], fit_nc_fl[12], 0,
         0, 0, "", KF_GEMM_AUTO, NARROW},
        {"attn_fit_causale_s1024_after_sleep", fit_c[0], fit_c_io[0], fit_c_fl[0], 0, 0, 0, "",
         KF_GEMM_AUTO, ELAST},
        {"attn_fit_causale_s2048_after_sleep", fit_c[1], fit_c_io[1], fit_c_fl[1], 0, 0, 0, "",
         KF_GEMM_AUTO, ELAST},
        {"attn_fit_causale_s4096_after_sleep", fit_c[2], fit_c_io[2], fit_c_fl[2], 0, 0, 0, "",
         KF_GEMM_AUTO, ELAST},
        {"attn_fit_causale_s8192_after_sleep", fit_c[3], fit_c_io[3], fit_c_fl[3], 0, 0, 0, "",
         KF_GEMM_AUTO, ELAST},
        {"attn_fit_ncwl_kv1104_after_sleep", fit_nc[13], fit_nc_io[13], fit_nc_fl[13], 0, 0,
         0, "", KF_GEMM_AUTO, 0},
        {"attn_fit_ncwl_kv2160_after_sleep", fit_nc[14], fit_nc_io[14], fit_nc_fl[14], 0, 0,
         0, "", KF_GEMM_AUTO, 0},
        {"attn_fit_ncwl_kv4272_after_sleep", fit_nc[15], fit_nc_io[15], fit_nc_fl[15], 0, 0,
         0, "", KF_GEMM_AUTO, 0},
        {"attn_fit_ncwl_kv8496_after_sleep", fit_nc[16], fit_nc_io[16], fit_nc_fl[16], 0, 0,
         0, "", KF_GEMM_AUTO, 0},
        {"attn_fit_ncwf_kv1104_after_sleep", fit_nc[13], fit_nc_io[13], fit_nc_fl[13], 0, 0,
         0, "", KF_GEMM_AUTO, KF_CUDA_RECIPE_ATTENTION_FULL_LAST_TILE},
        {"attn_fit_ncwf_kv2160_after_sleep", fit_nc[14], fit_nc_io[14], fit_nc_fl[14], 0, 0,
         0, "", KF_GEMM_AUTO, KF_CUDA_RECIPE_ATTENTION_FULL_LAST_TILE},
        {"attn_fit_ncwf_kv4272_after_sleep", fit_nc[15], fit_nc_io[15], fit_nc_fl[15], 0, 0,
         0, "", KF_GEMM_AUTO, KF_CUDA_RECIPE_ATTENTION_FULL_LAST_TILE},
        {"attn_fit_ncwf_kv8496_after_sleep", fit_nc[16], fit_nc_io[16], fit_nc_fl[16], 0, 0,
         0, "", KF_GEMM_AUTO, KF_CUDA_RECIPE_ATTENTION_FULL_LAST_TILE},
    };
    int n_cases = (int)(sizeof cases / sizeof cases[0]);
    kf_ctx *fa = make_ctx(NULL, KF_FLAG_NO_CACHE);
    kf_ctx *unf = make_ctx(NULL, KF_FLAG_NO_CACHE | KF_FLAG_UNFUSED_ATTENTION);
    kf_ctx *fa2 = make_ctx_mode(NULL, KF_FLAG_NO_CACHE, KF_GEMM_AUTO, KF_ATTENTION_FA2);
    kf_ctx *dec = make_ctx_mode(NULL, KF_FLAG_NO_CACHE, KF_GEMM_AUTO, KF_ATTENTION_DECODE);
    /* The pre-GEMM of the after_gemm cases (g_pre), when one runs. */
    gemm_args pre;
    kf_cu_deviceptr pre_buf[3] = {0, 0, 0};
    bool any_after = false;
    for (int i = 0; i < n_cases; i++)
        any_after |= after_gemm(&cases[i]) && case_on(cases[i].name);
    if (any_after) {
        kf_mem mem;
        kf_mem_resolve(&mem, NULL);
        CHECK(kf_blt_create(&mem, &DEV, NULL, &pre.lt, err));
        memset(&pre.g, 0, sizeof pre.g);
        const int64_t n = 8192;
        pre.g.dtype = KF_DTYPE_BF16;
        pre.g.m = pre.g.n = pre.g.k = n;
        pre.g.batch = 1;
        pre.g.what = "pre-GEMM";
        for (int b = 0; b < 3; b++) {
            CHECK(kf_cuda_mem_alloc(&DEV, (size_t)(n * n * 2), &pre_buf[b], err));
            fill_bf16(pre_buf[b], (unsigned long long)(n * n), 40 + (unsigned long long)b);
        }
        pre.g.a = (kf_blt_operand){pre_buf[0], n, 1, 0};
        pre.g.b = (kf_blt_operand){pre_buf[1], n, 1, 0};
        pre.g.d = (kf_blt_operand){pre_buf[2], n, 1, 0};
        pre.g.c = pre.g.d;
        g_pre = &pre;
    }
    for (int i = 0; i < n_cases; i++) {
        if (!case_on(cases[i].name))
            continue;
        bool decode = !strncmp(cases[i].name, "attn_decode", 11) && !strstr(cases[i].name, "_sm90");
        run_case(strstr(cases[i].name, "_unfused") ? unf
                 : strstr(cases[i].name, "_fa2") ? fa2
                 : decode                         ? dec
                                                  : fa,
                 &cases[i], copy_gbs, gemm_tflops);
    }
    abba_finish();

    /* Cold compile of one fused kernel: a private empty cache (planning and
     * codegen included, as kf_compile does them). */
    double cold_ms = 0;
    if (case_on("attn_causal")) {
        char dir[] = "/tmp/kf_bench_cache_XXXXXX";
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            return 1;
        }
        kf_ctx *cc = make_ctx(dir, 0);
        kf_graph *g = parse(cc, texts[0]);
        kf_program *p = NULL;
        double t0 = now_s();
        if (kf_compile(cc, g, &p) != KF_OK) {
            fprintf(stderr, "gpu_bench: %s\n", kf_graph_error(g));
            return 1;
        }
        cold_ms = (now_s() - t0) * 1e3;
        fprintf(stderr, "compile attn_causal cold %.1f ms (%zu kernels)\n", cold_ms,
                kf_program_kernel_count(p));
        kf_program_destroy(p);
        kf_graph_destroy(g);
        kf_ctx_destroy(cc);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "gpu_bench: could not remove %s\n", dir);
    }
    /* Planning alone (the mask proved cell by cell today). */
    double plan_ms = 0;
    if (case_on("attn_causal")) {
        kf_graph *g = parse(fa, texts[0]);
        double t0 = now_s();
        kf_plan *plan = NULL;
        if (kf_plan_create(g, NULL, &plan) != KF_OK)
            return 1;
        plan_ms = (now_s() - t0) * 1e3;
        kf_plan_destroy(plan);
        kf_graph_destroy(g);
        fprintf(stderr, "plan attn_causal %.1f ms\n", plan_ms);
    }

    char peers_json[8192] = "null";
    char peer_args[2048]; /* the --cases list whole: cut, it drops peers' rows */
    snprintf(peer_args, sizeof peer_args, "--attention%s%s%.1900s",
             g_no_torch_compile ? " --no-compile" : "", g_cases ? " --cases " : "",
             g_cases ? g_cases : "");
    run_peers(peers, peer_args, peers_json, sizeof peers_json);

    char path[512];
    FILE *outs[2];
    open_results(commit, "-attention", out_path, path, sizeof path, outs);
    for (int o = 0; o < 2; o++) {
        FILE *f = outs[o];
        if (!f)
            continue;
        json_head(f, "attention", commit);
        fprintf(f, "  \"ceilings\": {\"copy_GBps\": %.1f, \"bf16_gemm_TFLOPs\": %.1f, "
                   "\"gemm_shape\": [%lld, %lld, %lld]},\n",
                copy_gbs, gemm_tflops, (long long)GM, (long long)GM, (long long)GM);
        fprintf(f, "  \"shape\": {\"batch\": 4, \"heads\": 32, \"seq\": %d, \"head_dim\": 128},\n",
                S);
        fprintf(f, "  \"cases\": {\n");
        bool first = true;
        for (int i = 0; i < n_cases; i++) {
            bcase *c = &cases[i];
            if (!case_on(c->name))
                continue;
            fprintf(f,
                    "%s    \"%s\": {\"ms\": %.4f, \"floor_ms\": %.4f, \"fraction_of_roofline\": "
                    "%.4f, \"GBps\": %.1f, \"TFLOPs\": %.1f, \"launches\": %zu, "
                    "\"after\": \"%s\", \"where\": ",
                    first ? "" : ",\n", c->name, c->ms, c->floor_ms, c->floor_ms / c->ms,
                    c->bytes / (c->ms * 1e-3) / 1e9, c->flops / (c->ms * 1e-3) / 1e12,
                    c->launches,
                    after_gemm(c) ? "gemm" : after_sleep(c) ? "sleep" : "none");
            json_str(f, c->report);
            fputs("}", f);
            first = false;
        }
        fputs("\n", f);
        fprintf(f,
                "  },\n  \"compile\": {\"attn_causal\": {\"cold_ms\": %.1f}, "
                "\"driver_compute_cache\": %s},\n",
                cold_ms, g_compute_cache ? "true" : "false");
        fprintf(f, "  \"plan_ms\": {\"attn_causal\": %.1f},\n", plan_ms);
        abba_json(f);
        fprintf(f, "  \"peers\": %s\n}\n", peers_json);
        fclose(f);
    }
    fprintf(stderr, "gpu_bench: wrote %s\n", path);
    kf_ctx_destroy(fa);
    kf_ctx_destroy(unf);
    kf_ctx_destroy(fa2);
    kf_ctx_destroy(dec);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Transformer blocks (--block)                                               */
/* ------------------------------------------------------------------------ */

/* A GPT-2 block: pre-LN, biased q/k/v/o projections, causal attention over H
 * heads of D / H, a gelu_tanh MLP of F; bf16 throughout. */
static void gpt2_text(char *t, size_t size, int B, int S, int D, int H, int F) {
    int hd = D / H;
    snprintf(
        t, size,
        "kfg 1\nx = input(bf16[%d, %d, %d])\nln1_w = input(bf16[%d])\nln1_b = input(bf16[%d])\n"
        "wq = input(bf16[%d, %d])\nbq = input(bf16[%d])\nwk = input(bf16[%d, %d])\n"
        "bk = input(bf16[%d])\nwv = input(bf16[%d, %d])\nbv = input(bf16[%d])\n"
        "wo = input(bf16[%d, %d])\nbo = input(bf16[%d])\nln2_w = input(bf16[%d])\n"
        "ln2_b = input(bf16[%d])\nw1 = input(bf16[%d, %d])\nb1 = input(bf16[%d])\n"
        "w2 = input(bf16[%d, %d])\nb2 = input(bf16[%d])\n"
        "h = layer_norm(x, ln1_w, ln1_b, eps=1e-5)\n"
        "q0 = matmul(h, wq)\nq = add(q0, bq)\nk0 = matmul(h, wk)\nk = add(k0, bk)\n"
        "v0 = matmul(h, wv)\nv = add(v0, bv)\n"
        "qs = reshape(q, [%d, %d, %d, %d])\nks = reshape(k, [%d, %d, %d, %d])\n"
        "vs = reshape(v, [%d, %d, %d, %d])\nqh = permute(qs, [0, 2, 1, 3])\n"
        "kh = permute(ks, [0, 2, 1, 3])\nvh = permute(vs, [0, 2, 1, 3])\n"
        "scores = matmul(qh, kh, transpose_b=true)\nscale = const(bf16[], %.17g)\n"
        "scaled = mul(scores, scale)\nrow = iota(i32[%d, %d], axis=0)\n"
        "col = iota(i32[%d, %d], axis=1)\ncausal = ge(row, col)\n"
        "neg_inf = const(bf16[], -inf)\nmasked = where(causal, scaled, neg_inf)\n"
        "probs = softmax(masked, axis=-1)\nctx = matmul(probs, vh)\n"
        "ctx_t = permute(ctx, [0, 2, 1, 3])\nmerged = reshape(ctx_t, [%d, %d, %d])\n"
        "proj0 = matmul(merged, wo)\nproj = add(proj0, bo)\nx1 = add(x, proj)\n"
        "h2 = layer_norm(x1, ln2_w, ln2_b, eps=1e-5)\nup = matmul(h2, w1)\n"
        "up_b = add(up, b1)\nact = gelu_tanh(up_b)\ndown = matmul(act, w2)\n"
        "down_b = add(down, b2)\ny = add(x1, down_b)\noutput y\n",
        B, S, D, D, D, D, D, D, D, D, D, D, D, D, D, D, D, D, D, D, F, F, F, D, D, B, S, H, hd, B,
        S, H, hd, B, S, H, hd, 1.0 / sqrt((double)hd), S, S, S, S, B, S, D);
}

/* A LLaMA layer: RMSNorm, q/k/v/o projections without bias, causal attention
 * over H heads of D / H, a SwiGLU MLP of F (silu(h W_gate) * (h W_up)) W_down);
 * no rotary embedding (see the top of this file). */
static void llama_text(char *t, size_t size, int B, int S, int D, int H, int F) {
    int hd = D / H;
    snprintf(t, size,
             "kfg 1\nx = input(bf16[%d, %d, %d])\nattn_norm = input(bf16[%d])\n"
             "wq = input(bf16[%d, %d])\nwk = input(bf16[%d, %d])\nwv = input(bf16[%d, %d])\n"
             "wo = input(bf16[%d, %d])\nffn_norm = input(bf16[%d])\n"
             "w_gate = input(bf16[%d, %d])\nw_up = input(bf16[%d, %d])\n"
             "w_down = input(bf16[%d, %d])\n"
             "h = rms_norm(x, attn_norm, eps=1e-5)\nq = matmul(h, wq)\nk = matmul(h, wk)\n"
             "v = matmul(h, wv)\n"
             "qs = reshape(q, [%d, %d, %d, %d])\nks = reshape(k, [%d, %d, %d, %d])\n"
             "vs = reshape(v, [%d, %d, %d, %d])\nqh = permute(qs, [0, 2, 1, 3])\n"
             "kh = permute(ks, [0, 2, 1, 3])\nvh = permute(vs, [0, 2, 1, 3])\n"
             "scores = matmul(qh, kh, transpose_b=true)\nscale = const(bf16[], %.17g)\n"
             "scaled = mul(scores, scale)\nrow = iota(i32[%d, %d], axis=0)\n"
             "col = iota(i32[%d, %d], axis=1)\ncausal = ge(row, col)\n"
             "neg_inf = const(bf16[], -inf)\nmasked = where(causal, scaled, neg_inf)\n"
             "probs = softmax(masked, axis=-1)\nctx = matmul(probs, vh)\n"
             "ctx_t = permute(ctx, [0, 2, 1, 3])\nmerged = reshape(ctx_t, [%d, %d, %d])\n"
             "attn = matmul(merged, wo)\nx1 = add(x, attn)\n"
             "h2 = rms_norm(x1, ffn_norm, eps=1e-5)\ngate = matmul(h2, w_gate)\n"
             "up = matmul(h2, w_up)\ngate_act = silu(gate)\ngated = mul(gate_act, up)\n"
             "down = matmul(gated, w_down)\ny = add(x1, down)\noutput y\n",
             B, S, D, D, D, D, D, D, D, D, D, D, D, D, F, D, F, F, D, B, S, H, hd, B, S, H, hd, B,
             S, H, hd, 1.0 / sqrt((double)hd), S, S, S, S, B, S, D);
}

typedef struct block_case {
    const char *name;
    int B, S, D, H, F;
    bool llama;
    double flops; /* the GEMMs and attention's two products (causal: half) */
    double ms;
    size_t launches;
    uint32_t n_groups;
    char groups[8192]; /* JSON array: each group's name, kind, how, median ms */
    char report[4096];
} block_case;

static void run_block(kf_ctx *ctx, block_case *c, char *text, size_t size) {
    if (c->llama)
        llama_text(text, size, c->B, c->S, c->D, c->H, c->F);
    else
        gpt2_text(text, size, c->B, c->S, c->D, c->H, c->F);
    double T = (double)c->B * c->S, Dm = c->D, F = c->F, Sq = c->S;
    double proj = 2.0 * T * Dm * Dm * 4;                       /* q, k, v, o */
    double mlp = 2.0 * T * Dm * F * (c->llama ? 3 : 2);        /* up (gate), down */
    double attn = 2.0 * 2.0 * (double)c->B * Sq * Sq * Dm / 2; /* causal: half of QK^T, PV */
    c->flops = proj + mlp + attn;
    kf_graph *g = parse(ctx, text);
    kf_plan *plan = NULL;
    if (kf_plan_create(g, NULL, &plan) != KF_OK) {
        fprintf(stderr, "gpu_bench: plan: %s\n", kf_graph_error(g));
        exit(1);
    }
    kf_cuda_exec *ex = NULL;
    CHECK(kf_cuda_exec_build(ctx, plan, &ex, err));
    for (uint32_t i = 0; i < g->n_inputs; i++)
        set_random_input(ex, g->inputs[i], 5000 + i * 7919ull);
    c->ms = time_ms(run_exec, ex);
    c->launches = kf_cuda_exec_launch_count(ex);
    c->n_groups = plan->n_groups;
    double *gm = calloc(plan->n_groups, sizeof *gm);
    if (!gm)
        exit(1);
    CHECK(kf_cuda_exec_time_groups(ex, g_reps < 11 ? g_reps : 11, gm, err));
    const kf_cuda_recipes *rs = kf_cuda_exec_recipes(ex);
    size_t at = 0;
    at += (size_t)snprintf(c->groups + at, sizeof c->groups - at, "[");
    double sum = 0;
    fprintf(stderr, "%s: %.3f ms (%.0f TFLOP/s), %zu launches; by group:\n", c->name, c->ms,
            c->flops / (c->ms * 1e-3) / 1e12, c->launches);
    for (uint32_t gi = 0; gi < plan->n_groups; gi++) {
        const kf_group *grp = &plan->groups[gi];
        const kf_cuda_recipe *rc = &rs->recipes[gi];
        uint32_t chosen = 0;
        float vm[KF_CUDA_MAX_VARIANTS];
        kf_cuda_exec_choice(ex, gi, &chosen, vm);
        const char *how = rc->n_variants ? rc->variants[chosen].how : "no steps";
        sum += gm[gi];
        if (gm[gi] > 0)
            fprintf(stderr, "  %7.3f ms %5.1f%%  group %u %s %s: %s\n", gm[gi],
                    100.0 * gm[gi] / c->ms, gi, kf_group_kind_name(grp->kind), grp->name, how);
        char hb[512];
        FILE *hf = fmemopen(hb, sizeof hb - 1, "w");
        if (hf) {
            json_str(hf, how);
            fclose(hf);
            hb[sizeof hb - 1] = 0;
        }
        char nb[256];
        FILE *nf = fmemopen(nb, sizeof nb - 1, "w");
        if (nf) {
            json_str(nf, grp->name);
            fclose(nf);
            nb[sizeof nb - 1] = 0;
        }
        if (at < sizeof c->groups - 1)
            at +=
                (size_t)snprintf(c->groups + at, sizeof c->groups - at,
                                 "%s{\"group\": %u, \"kind\": \"%s\", \"name\": %s, \"how\": %s, "
                                 "\"ms\": %.4f}",
                                 gi ? ", " : "", gi, kf_group_kind_name(grp->kind), nb, hb, gm[gi]);
    }
    if (at < sizeof c->groups - 1)
        snprintf(c->groups + at, sizeof c->groups - at, "]");
    else
        snprintf(c->groups, sizeof c->groups, "[\"too many groups for the buffer\"]");
    fprintf(stderr, "  sum of groups %.3f ms (with an event between steps)\n", sum);
    FILE *f = fmemopen(c->report, sizeof c->report - 1, "w");
    if (f) {
        kf_cuda_exec_report(ex, false, f);
        fclose(f);
    }
    free(gm);
    kf_cuda_exec_destroy(ex);
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
}

static int block_main(const char *commit, const char *out_path, bool peers, double copy_gbs,
                      double gemm_tflops) {
    static block_case cases[2] = {
        {"gpt2_medium_b16_s1024", 16, 1024, 1024, 16, 4096, false, 0, 0, 0, 0, "", ""},
        {"llama7b_b8_s2048", 8, 2048, 4096, 32, 11008, true, 0, 0, 0, 0, "", ""},
    };
    if (g_quick) {
        cases[0].B = 4;
        cases[1].B = 1;
    }
    static char text[8192];
    kf_ctx *ctx = make_ctx(NULL, KF_FLAG_NO_CACHE);
    for (int i = 0; i < 2; i++)
        run_block(ctx, &cases[i], text, sizeof text);

    char peers_json[8192] = "null";
    run_peers(peers, g_quick ? "--block --quick" : "--block", peers_json, sizeof peers_json);

    char path[512];
    FILE *outs[2];
    open_results(commit, "-block", out_path, path, sizeof path, outs);
    for (int o = 0; o < 2; o++) {
        FILE *f = outs[o];
        if (!f)
            continue;
        json_head(f, "block", commit);
        fprintf(f, "  \"ceilings\": {\"copy_GBps\": %.1f, \"bf16_gemm_TFLOPs\": %.1f},\n", copy_gbs,
                gemm_tflops);
        fprintf(f, "  \"cases\": {\n");
        for (int i = 0; i < 2; i++) {
            block_case *c = &cases[i];
            fprintf(f,
                    "    \"%s\": {\"batch\": %d, \"seq\": %d, \"d_model\": %d, \"heads\": %d, "
                    "\"mlp\": %d, \"ms\": %.4f, \"flops\": %.4g, \"TFLOPs\": %.1f, "
                    "\"floor_ms\": %.4f, \"launches\": %zu, \"groups\": %s, \"where\": ",
                    c->name, c->B, c->S, c->D, c->H, c->F, c->ms, c->flops,
                    c->flops / (c->ms * 1e-3) / 1e12, c->flops / (gemm_tflops * 1e12) * 1e3,
                    c->launches, c->groups);
            json_str(f, c->report);
            fprintf(f, "}%s\n", i + 1 < 2 ? "," : "");
        }
        fprintf(f, "  },\n  \"peers\": %s\n}\n", peers_json);
        fclose(f);
    }
    fprintf(stderr, "gpu_bench: wrote %s\n", path);
    for (int i = 0; i < 2; i++)
        fprintf(stderr, "block %-24s kfuse %.3f ms\n", cases[i].name, cases[i].ms);
    kf_ctx_destroy(ctx);
    return 0;
}

int main(int argc, char **argv) {
    const char *commit = KF_BENCH_COMMIT, *out_path = NULL;
    bool peers = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--commit") && i + 1 < argc)
            commit = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out_path = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            g_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-peers"))
            peers = false;
        else if (!strcmp(argv[i], "--sustain") && i + 1 < argc)
            g_sustain_s = atof(argv[++i]);
        else if (!strcmp(argv[i], "--abba") && i + 1 < argc)
            g_abba = argv[++i];
        else if (!strcmp(argv[i], "--abba-block") && i + 1 < argc)
            g_abba_s = atof(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            g_quick = true;
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc)
            g_cases = argv[++i];
        else if (!strcmp(argv[i], "--no-torch-compile"))
            g_no_torch_compile = true;
        else if (!strcmp(argv[i], "--compute-cache"))
            g_compute_cache = true;
        else if (!strcmp(argv[i], "--attention"))
            g_attention = true;
        else if (!strcmp(argv[i], "--block"))
            g_block = true;
        else if (!strcmp(argv[i], "--print-blocks")) {
            /* the --block graphs as .kfg text, for kfuse report / run */
            static char t[8192];
            gpt2_text(t, sizeof t, 16, 1024, 1024, 16, 4096);
            printf("# gpt2_medium_b16_s1024\n%s", t);
            llama_text(t, sizeof t, 8, 2048, 4096, 32, 11008);
            printf("# llama7b_b8_s2048\n%s", t);
            return 0;
        } else if (!strcmp(argv[i], "--cases") && i + 1 < argc)
            g_cases = argv[++i];
        else {
            fprintf(stderr, "usage: gpu_bench [--commit SHA] [--out FILE] [--reps N] "
                            "[--no-peers] [--quick] [--attention | --block] [--cases A,B] "
                            "[--no-torch-compile] [--print-blocks] [--sustain SEC] "
                            "[--abba A:B,C:D] [--abba-block SEC] [--compute-cache]\n");
            return 2;
        }
    }
    if (g_reps < 3)
        g_reps = 3;
    /* The cold compiles are cold only with the driver's compute cache off:
     * NVRTC's output for a source compiled before on the machine (this run's
     * own cases compile the very kernels the cold rows time) comes back from
     * ~/.nv/ComputeCache. On an H200 at e3e4571 the attention kernel's "cold"
     * compile took 52 ms with the cache on and 1302 ms with it off, the
     * RMSNorm kernel's 35 and 1588 ms. The driver reads the variable when it
     * starts, so before anything here touches CUDA; peers.py gets the
     * environment it had (its own compiles are not timed). */
    if (!g_compute_cache && setenv("CUDA_CACHE_DISABLE", "1", 1) != 0) {
        perror("setenv CUDA_CACHE_DISABLE");
        return 1;
    }

    /* The device, a stream, events, the fill kernel. */
    kf_ctx *ctx0 = make_ctx(NULL, KF_FLAG_NO_CACHE);
    if (kf_ctx_cuda_driver(ctx0, &D, err) != KF_OK) {
        fprintf(stderr, "gpu_bench: no GPU: %s\n", err);
        return 77;
    }
    CHECK(kf_cuda_device_open(D, 0, &DEV, err));
    CHECK(kf_cuda_stream_create(&DEV, &S, err));
    CHECK(kf_cuda_event_create(&DEV, &E0, err));
    CHECK(kf_cuda_event_create(&DEV, &E1, err));
    {
        kf_mem mem;
        kf_mem_resolve(&mem, NULL);
        kf_nvrtc_options o = {.arch = DEV.arch, .kernel_name = "kf_bench_fill"};
        kf_nvrtc_result r;
        CHECK(kf_nvrtc_compile(&mem, fill_src, strlen(fill_src), &o, &r, err));
        kf_cu_module mod;
        CHECK(kf_cuda_module_load(&DEV, r.cubin, "kf_bench_fill", &mod, err));
        CHECK(kf_cuda_function(&DEV, mod, "kf_bench_fill", &FILL, err));
        kf_nvrtc_result_release(&mem, &r);
        o.kernel_name = "kf_bench_copy";
        CHECK(kf_nvrtc_compile(&mem, copyk_src, strlen(copyk_src), &o, &r, err));
        CHECK(kf_cuda_module_load(&DEV, r.cubin, "kf_bench_copy", &mod, err));
        CHECK(kf_cuda_function(&DEV, mod, "kf_bench_copy", &COPYK, err));
        CHECK(kf_cuda_function(&DEV, mod, "kf_bench_copy8", &COPYK8, err));
        CHECK(kf_cuda_function(&DEV, mod, "kf_bench_spin", &SPIN, err));
        kf_nvrtc_result_release(&mem, &r);
    }
    fprintf(stderr, "gpu_bench: %s (%s, %d SMs), driver %d, commit %s\n", DEV.name, DEV.arch,
            DEV.sm_count, D->driver_version, commit);

    /* Ceiling 1: device-to-device copy. */
    double copy_gbs = 0, copyk_gbs = 0, copyk_each[3] = {0, 0, 0};
    const char *copyk_name[3] = {"", "", ""};
    {
        copy_args c;
        void *sym = dlsym(D->lib, "cuMemcpyDtoDAsync_v2");
        memcpy(&c.fn, &sym, sizeof sym);
        c.bytes = (size_t)(g_quick ? 256 : 1024) << 20;
        CHECK(kf_cuda_mem_alloc(&DEV, c.bytes, &c.a, err));
        CHECK(kf_cuda_mem_alloc(&DEV, c.bytes, &c.b, err));
        fill_bf16(c.a, c.bytes / 2, 1);
        double ms = time_ms(run_copy, &c);
        copy_gbs = 2.0 * (double)c.bytes / (ms * 1e-3) / 1e9;
        fprintf(stderr, "ceiling: copy %.0f GB/s (read + write, %zu MiB)\n", copy_gbs,
                c.bytes >> 20);
        /* SM copy kernels over the cases' 512 MiB (full runs); the best one is
         * the reference. */
        const struct {
            const char *name;
            kf_cu_function fn;
            unsigned bps;
        } kv[3] = {{"u1_b8", COPYK, 8}, {"u1_b4", COPYK, 4}, {"u8_b4", COPYK8, 4}};
        for (int v = 0; v < 3; v++) {
            copyk_args k = {c.a, c.b, (unsigned long long)((g_quick ? 64 : 512) << 20) / 16,
                            kv[v].fn, kv[v].bps};
            double kms = time_ms(run_copyk, &k);
            copyk_each[v] = 2.0 * (double)k.n * 16 / (kms * 1e-3) / 1e9;
            copyk_name[v] = kv[v].name;
            fprintf(stderr, "reference: SM copy kernel %s %.0f GB/s (%.1f%% of the copy ceiling)\n",
                    kv[v].name, copyk_each[v], 100.0 * copyk_each[v] / copy_gbs);
            if (copyk_each[v] > copyk_gbs)
                copyk_gbs = copyk_each[v];
        }
        kf_cuda_mem_free(&DEV, c.a);
        kf_cuda_mem_free(&DEV, c.b);
    }
    /* Ceiling 2: a large bf16 GEMM through cuBLASLt. */
    double gemm_tflops = 0;
    int64_t GM = g_quick ? 4096 : 8192;
    {
        kf_mem mem;
        kf_mem_resolve(&mem, NULL);
        gemm_args a;
        CHECK(kf_blt_create(&mem, &DEV, NULL, &a.lt, err));
        memset(&a.g, 0, sizeof a.g);
        a.g.dtype = KF_DTYPE_BF16;
        a.g.m = a.g.n = a.g.k = GM;
        a.g.batch = 1;
        a.g.what = "ceiling";
        kf_cu_deviceptr pa, pb, pd;
        size_t bytes = (size_t)(GM * GM * 2);
        CHECK(kf_cuda_mem_alloc(&DEV, bytes, &pa, err));
        CHECK(kf_cuda_mem_alloc(&DEV, bytes, &pb, err));
        CHECK(kf_cuda_mem_alloc(&DEV, bytes, &pd, err));
        fill_bf16(pa, (unsigned long long)(GM * GM), 2);
        fill_bf16(pb, (unsigned long long)(GM * GM), 3);
        a.g.a = (kf_blt_operand){pa, GM, 1, 0};
        a.g.b = (kf_blt_operand){pb, GM, 1, 0};
        a.g.d = (kf_blt_operand){pd, GM, 1, 0};
        a.g.c = a.g.d;
        double ms = time_ms(run_gemm, &a);
        gemm_tflops = 2.0 * (double)GM * GM * GM / (ms * 1e-3) / 1e12;
        fprintf(stderr, "ceiling: bf16 GEMM %lldx%lldx%lld %.0f TFLOP/s (cuBLASLt %zu)\n",
                (long long)GM, (long long)GM, (long long)GM, gemm_tflops, kf_blt_version(a.lt));
        kf_cuda_mem_free(&DEV, pa);
        kf_cuda_mem_free(&DEV, pb);
        kf_cuda_mem_free(&DEV, pd);
        kf_blt_destroy(a.lt);
    }

    if (g_attention)
        return attention_main(commit, out_path, peers, copy_gbs, gemm_tflops, GM);
    if (g_block)
        return block_main(commit, out_path, peers, copy_gbs, gemm_tflops);

    /* The cases. */
    int R = g_quick ? 8192 : 65536, C = 4096;
    int M = g_quick ? 2048 : 8192, N = 4096, K = g_quick ? 4096 : 16384;
    char t_ew[512], t_rms[512], t_ln[512], t_gemm[512], t_gemm_erf[512], t_plain[512],
        t_swiglu[512];
    snprintf(t_ew, sizeof t_ew,
             "kfg 1\nx = input(bf16[%d, %d])\ns = input(bf16[%d])\nb = input(bf16[%d])\n"
             "g = input(bf16[%d])\nxs = mul(x, s)\nh = add(xs, b)\nge = gelu(h)\ny = mul(ge, g)\n"
             "output y\n",
             R, C, C, C, C);
    snprintf(t_rms, sizeof t_rms,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d])\n"
             "y = rms_norm(x, w, axis=-1, eps=1e-6)\noutput y\n",
             R, C, C);
    snprintf(t_ln, sizeof t_ln,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d])\nb = input(bf16[%d])\n"
             "y = layer_norm(x, w, b, axis=-1, eps=1e-5)\noutput y\n",
             R, C, C, C);
    snprintf(t_gemm, sizeof t_gemm,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\nb = input(bf16[%d])\n"
             "h = matmul(x, w)\nhb = add(h, b)\ny = gelu_tanh(hb)\noutput y\n",
             M, K, K, N, N);
    /* The same GEMM with no epilogue: what issue 13's bias + GELU costs
     * beside it (gemm_kshape_*) */
    char t_kshape[512];
    snprintf(t_kshape, sizeof t_kshape,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\nh = matmul(x, w)\n"
             "output h\n",
             M, K, K, N);
    /* The same at M = 32 (decode: the weight's 128 MiB dominate) */
    char t_gemm32[512];
    snprintf(t_gemm32, sizeof t_gemm32,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\nb = input(bf16[%d])\n"
             "h = matmul(x, w)\nhb = add(h, b)\ny = gelu_tanh(hb)\noutput y\n",
             32, K, K, N, N);
    snprintf(t_gemm_erf, sizeof t_gemm_erf,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\nb = input(bf16[%d])\n"
             "h = matmul(x, w)\nhb = add(h, b)\ny = gelu(hb)\noutput y\n",
             M, K, K, N, N);
    int P = g_quick ? 4096 : 8192;
    snprintf(t_plain, sizeof t_plain,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\ny = matmul(x, w)\n"
             "output y\n",
             P, P, P, P);
    /* f32 4096^3, bare and + bias + GELU (erf): the SIMT kernel (FFMA in f32,
     * cg_gemm_simt.c) against cuBLASLt with f32 compute (no TF32: the
     * reference is exact f32), and the default's measured choice */
    int F = g_quick ? 2048 : 4096;
    char t_f32[512], t_f32g[512];
    snprintf(t_f32, sizeof t_f32,
             "kfg 1\nx = input(f32[%d, %d])\nw = input(f32[%d, %d])\ny = matmul(x, w)\n"
             "output y\n",
             F, F, F, F);
    snprintf(t_f32g, sizeof t_f32g,
             "kfg 1\nx = input(f32[%d, %d])\nw = input(f32[%d, %d])\nb = input(f32[%d])\n"
             "h = matmul(x, w)\nhb = add(h, b)\ny = gelu(hb)\noutput y\n",
             F, F, F, F, F);
    double fbytes = 4.0 * 3.0 * (double)F * F, fflops = 2.0 * (double)F * F * F;
    /* SwiGLU, the LLaMA MLP's up projections: 8192 x 4096 -> 2 x 11008 */
    int SM = g_quick ? 2048 : 8192, SD = 4096, SF = 11008;
    snprintf(t_swiglu, sizeof t_swiglu,
             "kfg 1\nx = input(bf16[%d, %d])\nwg = input(bf16[%d, %d])\nwu = input(bf16[%d, %d])\n"
             "g = matmul(x, wg)\nu = matmul(x, wu)\na = silu(g)\ny = mul(a, u)\noutput y\n",
             SM, SD, SD, SF, SD, SF);
    /* GEMM + bias + residual + LayerNorm, N = 4096 > one tile row: the split
     * row form (gemm.row_split), 8192 x 4096 x 4096 */
    int LM = g_quick ? 2048 : 8192, LN = 4096, LK = 4096;
    char t_res_ln[640];
    snprintf(t_res_ln, sizeof t_res_ln,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\nb = input(bf16[%d])\n"
             "r = input(bf16[%d, %d])\ng = input(bf16[%d])\nc = input(bf16[%d])\n"
             "h = matmul(x, w)\nhb = add(h, b)\ns = add(hb, r)\n"
             "y = layer_norm(s, g, c, eps=1e-5)\noutput y\n",
             LM, LK, LK, LN, LN, LM, LN, LN, LN);
    /* LLaMA-7B's q projection with its rotary embedding (rotate_half, heads
     * of 128 permuted to [B, H, S, D]) behind the RMSNorm prologue, B8 S2048:
     * by default the GEMM writes q and the rotation is its own kernel; with
     * KF_FLAG_GEMM_HEAD_EPILOGUE (the rope_q_head* names) one kernel */
    int QB = g_quick ? 2 : 8, QS = 2048, QD = 4096;
    char t_rope[1024];
    snprintf(t_rope, sizeof t_rope,
             "kfg 1\nx = input(bf16[%d, %d, %d])\ng = input(bf16[%d])\nw = input(bf16[%d, %d])\n"
             "c = input(bf16[%d, 128])\ns = input(bf16[%d, 128])\n"
             "n = rms_norm(x, g, eps=1e-6)\np = matmul(n, w)\n"
             "h = reshape(p, [%d, %d, 32, 128])\nq = permute(h, [0, 2, 1, 3])\n"
             "q1 = slice(q, axis=-1, stop=64)\nq2 = slice(q, axis=-1, start=64)\n"
             "n2 = neg(q2)\nr = concat(n2, q1, axis=-1)\nqc = mul(q, c)\nrs = mul(r, s)\n"
             "y = add(qc, rs)\noutput y\n",
             QB, QS, QD, QD, QD, QD, QS, QS, QB, QS);
    /* The LLaMA MLP's SwiGLU behind its RMSNorm (the norm in the dual
     * kernel's A tiles), and GPT-2-medium's Q/K/V projection behind its
     * LayerNorm, 16384 x 1024 -> 3 x 1024 with a bias (issue 13's Q/K/V row) */
    char t_swiglu_rms[640], t_ln_qkv[640];
    snprintf(t_swiglu_rms, sizeof t_swiglu_rms,
             "kfg 1\nx = input(bf16[%d, %d])\nng = input(bf16[%d])\nwg = input(bf16[%d, %d])\n"
             "wu = input(bf16[%d, %d])\nn = rms_norm(x, ng, eps=1e-5)\ng = matmul(n, wg)\n"
             "u = matmul(n, wu)\na = silu(g)\ny = mul(a, u)\noutput y\n",
             SM, SD, SD, SD, SF, SD, SF);
    int VM = g_quick ? 4096 : 16384, VD = 1024;
    snprintf(t_ln_qkv, sizeof t_ln_qkv,
             "kfg 1\nx = input(bf16[%d, %d])\ng = input(bf16[%d])\nc = input(bf16[%d])\n"
             "w = input(bf16[%d, %d])\nb = input(bf16[%d])\nn = layer_norm(x, g, c, eps=1e-5)\n"
             "h = matmul(n, w)\ny = add(h, b)\noutput y\n",
             VM, VD, VD, VD, VD, 3 * VD, 3 * VD);
    /* LLaMA-7B's Q, K and V projections behind their one RMSNorm, B8 S2048
     * (16384 x 4096 -> 3 x 4096), each its own output: three GEMM groups
     * that form a GEMM sibling set; the *_siblings rows run the set in one
     * recipe (the default: the norm's statistics, or A normalized, once),
     * the others each group alone (KF_CUDA_RECIPE_GEMM_NO_SIBLINGS), same run */
    char t_llama_qkv[640];
    snprintf(t_llama_qkv, sizeof t_llama_qkv,
             "kfg 1\nx = input(bf16[%d, %d, %d])\ng = input(bf16[%d])\n"
             "wq = input(bf16[%d, %d])\nwk = input(bf16[%d, %d])\nwv = input(bf16[%d, %d])\n"
             "n = rms_norm(x, g, eps=1e-6)\nq = matmul(n, wq)\nk = matmul(n, wk)\n"
             "v = matmul(n, wv)\noutput q\noutput k\noutput v\n",
             QB, QS, QD, QD, QD, QD, QD, QD, QD, QD);
    /* the same with the weights as nn.Linear keeps them ([N, K], B K-major),
     * as the LLaMA block's Q/K/V reach kfuse (llama_qkv_t*) */
    char t_llama_qkv_t[640];
    snprintf(t_llama_qkv_t, sizeof t_llama_qkv_t,
             "kfg 1\nx = input(bf16[%d, %d])\ng = input(bf16[%d])\n"
             "wq = input(bf16[%d, %d])\nwk = input(bf16[%d, %d])\nwv = input(bf16[%d, %d])\n"
             "n = rms_norm(x, g, eps=1e-6)\nq = matmul(n, wq, transpose_b=true)\n"
             "k = matmul(n, wk, transpose_b=true)\nv = matmul(n, wv, transpose_b=true)\n"
             "output q\noutput k\noutput v\n",
             QB * QS, QD, QD, QD, QD, QD, QD, QD, QD);
    double lqbytes = 2.0 * ((double)QB * QS * QD * 4.0 + 3.0 * (double)QD * QD + QD);
    double lqflops = 2.0 * (double)QB * QS * QD * 3.0 * QD;
    /* A sibling set as ONE GEMM over its members' concatenated columns
     * (KF_CUDA_RECIPE_GEMM_SIB_ONE, the *_one rows) against its members
     * apart (*_siblings_*: the norm once, a GEMM each) and cuBLASLt's side:
     * GPT-2-medium's Q, K, V behind their LayerNorm (16384 x 1024 -> 3 x
     * 1024, each + bias; ln_qkv is the same with one concatenated weight),
     * and LLaMA-7B's with GQA (16384 x 4096 -> 4096 + 1024 + 1024) */
    char t_gpt2_qkv[800], t_gqa_qkv[640];
    snprintf(t_gpt2_qkv, sizeof t_gpt2_qkv,
             "kfg 1\nx = input(bf16[%d, %d])\ng = input(bf16[%d])\nc = input(bf16[%d])\n"
             "wq = input(bf16[%d, %d])\nbq = input(bf16[%d])\nwk = input(bf16[%d, %d])\n"
             "bk = input(bf16[%d])\nwv = input(bf16[%d, %d])\nbv = input(bf16[%d])\n"
             "n = layer_norm(x, g, c, eps=1e-5)\nq0 = matmul(n, wq)\nq = add(q0, bq)\n"
             "k0 = matmul(n, wk)\nk = add(k0, bk)\nv0 = matmul(n, wv)\nv = add(v0, bv)\n"
             "output q\noutput k\noutput v\n",
             g_quick ? 4096 : 16384, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024,
             1024, 1024);
    snprintf(t_gqa_qkv, sizeof t_gqa_qkv,
             "kfg 1\nx = input(bf16[%d, %d])\ng = input(bf16[%d])\n"
             "wq = input(bf16[%d, %d])\nwk = input(bf16[%d, %d])\nwv = input(bf16[%d, %d])\n"
             "n = rms_norm(x, g, eps=1e-6)\nq = matmul(n, wq)\nk = matmul(n, wk)\n"
             "v = matmul(n, wv)\noutput q\noutput k\noutput v\n",
             QB * QS, QD, QD, QD, QD, QD, QD / 4, QD, QD / 4);
    double gpbytes = 2.0 * ((double)(g_quick ? 4096 : 16384) * 1024 * 4.0 + 3.0 * 1024 * 1024);
    double gpflops = 2.0 * (double)(g_quick ? 4096 : 16384) * 1024 * 3.0 * 1024;
    double gqbytes = 2.0 * ((double)QB * QS * (QD + 1.5 * QD) + 1.5 * (double)QD * QD);
    double gqflops = 2.0 * (double)QB * QS * QD * 1.5 * QD;
    /* GPT-2-medium's MLP up projection behind its LayerNorm: 16384 x 1024 ->
     * 4096, bias, gelu_tanh (K = 1024: the epilogue is a large part of a
     * tile's time) */
    char t_ln_up[640];
    snprintf(t_ln_up, sizeof t_ln_up,
             "kfg 1\nx = input(bf16[%d, %d])\ng = input(bf16[%d])\nc = input(bf16[%d])\n"
             "w = input(bf16[%d, %d])\nb = input(bf16[%d])\nn = layer_norm(x, g, c, eps=1e-5)\n"
             "h = matmul(n, w)\nhb = add(h, b)\ny = gelu_tanh(hb)\noutput y\n",
             VM, VD, VD, VD, VD, 4 * VD, 4 * VD);
    /* The same GEMM without the norm (K = 1024): B N-major ([K, N], as
     * GPT-2's Conv1D weights) or K-major ([N, K], transpose_b), with the
     * bias and gelu_tanh, the bias alone, or no epilogue */
    char t_k1[4][640];
    const char *k1_tail[4] = {"hb = add(h, b)\ny = gelu_tanh(hb)\n", "y = add(h, b)\n",
                              "y = add(h, b)\n", "y = gelu_tanh(h)\n"};
    for (int v = 0; v < 4; v++)
        snprintf(t_k1[v], sizeof t_k1[v],
                 "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\nb = input(bf16[%d])\n"
                 "h = matmul(x, w%s)\n%soutput y\n",
                 VM, VD, v == 2 ? 4 * VD : VD, v == 2 ? VD : 4 * VD, 4 * VD,
                 v == 2 ? ", transpose_b=true" : "", k1_tail[v]);
    /* GPT-2-medium's out projection and second MLP GEMM as its block has
     * them (B N-major: Conv1D's [K, N]), each + bias + the residual:
     * 16384 x 1024 x 1024 and 16384 x 1024 x 4096 (the gpt2_* rows; its
     * Q/K/V and first MLP GEMM behind their LayerNorms are ln_qkv and
     * gpt2_fc1, ln_up_gelu's text) */
    char t_g2o[640], t_g2f2[640];
    snprintf(t_g2o, sizeof t_g2o,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\nb = input(bf16[%d])\n"
             "r = input(bf16[%d, %d])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\n"
             "output y\n",
             VM, VD, VD, VD, VD, VM, VD);
    snprintf(t_g2f2, sizeof t_g2f2,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\nb = input(bf16[%d])\n"
             "r = input(bf16[%d, %d])\nh = matmul(x, w)\na = add(h, b)\ny = add(a, r)\n"
             "output y\n",
             VM, 4 * VD, 4 * VD, VD, VD, VM, VD);
    double g2obytes = 2.0 * ((double)VM * VD * 3.0 + (double)VD * VD + VD);
    double g2f2bytes = 2.0 * ((double)VM * VD * 6.0 + 4.0 * VD * VD + VD);
    double g2oflops = 2.0 * (double)VM * VD * VD, g2f2flops = 2.0 * (double)VM * VD * 4 * VD;
    double ubytes = 2.0 * ((double)VM * VD + 4.0 * VD * VD + 4.0 * VM * VD);
    double uflops = 2.0 * (double)VM * VD * 4 * VD;
    double vbytes = 2.0 * ((double)VM * VD + 3.0 * VD * VD + 3.0 * VM * VD);
    double vflops = 2.0 * (double)VM * VD * 3 * VD;
    double qbytes = 2.0 * (2.0 * QB * QS * QD + (double)QD * QD + QD + 2.0 * QS * 128);
    double qflops = 2.0 * (double)QB * QS * QD * QD;
    double lbytes = 2.0 * ((double)LM * LK + (double)LK * LN + 2.0 * (double)LM * LN + 3.0 * LN);
    double lflops = 2.0 * (double)LM * LN * LK;
    /* GEMM + bias + residual + LayerNorm with rows of N <= 256 (the row
     * epilogue: gemm.row_epilogue): 16384 x 256 x 1024 (row256) and
     * 16384 x 128 x 4096 (row128), by default (measured), the generated
     * kernel with the norm in its tile (_generated; _sm80: the mma.sync
     * kernel forced) and cuBLASLt + the row-epilogue kernel (_cublaslt) */
    int RM = g_quick ? 4096 : 16384;
    char t_row256[640], t_row128[640];
    snprintf(t_row256, sizeof t_row256,
             "kfg 1\nx = input(bf16[%d, 1024])\nw = input(bf16[1024, 256])\nb = input(bf16[256])\n"
             "r = input(bf16[%d, 256])\ng = input(bf16[256])\nc = input(bf16[256])\n"
             "h = matmul(x, w)\nhb = add(h, b)\ns = add(hb, r)\n"
             "y = layer_norm(s, g, c, eps=1e-5)\noutput y\n",
             RM, RM);
    snprintf(t_row128, sizeof t_row128,
             "kfg 1\nx = input(bf16[%d, 4096])\nw = input(bf16[4096, 128])\nb = input(bf16[128])\n"
             "r = input(bf16[%d, 128])\ng = input(bf16[128])\nc = input(bf16[128])\n"
             "h = matmul(x, w)\nhb = add(h, b)\ns = add(hb, r)\n"
             "y = layer_norm(s, g, c, eps=1e-5)\noutput y\n",
             RM, RM);
    /* the same in f32 (the SIMT kernel: the row epilogue in its 64 x 256
     * tiles against the split form, GEMM then row pass) */
    char t_row256_f32[640];
    snprintf(t_row256_f32, sizeof t_row256_f32,
             "kfg 1\nx = input(f32[%d, 1024])\nw = input(f32[1024, 256])\nb = input(f32[256])\n"
             "r = input(f32[%d, 256])\ng = input(f32[256])\nc = input(f32[256])\n"
             "h = matmul(x, w)\nhb = add(h, b)\ns = add(hb, r)\n"
             "y = layer_norm(s, g, c, eps=1e-5)\noutput y\n",
             RM, RM);
    double r256_bytes = 2.0 * ((double)RM * 1024 + 1024.0 * 256 + 2.0 * RM * 256 + 3.0 * 256);
    double r256_flops = 2.0 * RM * 256.0 * 1024;
    double r128_bytes = 2.0 * ((double)RM * 4096 + 4096.0 * 128 + 2.0 * RM * 128 + 3.0 * 128);
    double r128_flops = 2.0 * RM * 128.0 * 4096;
    double sbytes = 2.0 * ((double)SM * SD + 2.0 * SD * SF + (double)SM * SF);
    double sflops = 4.0 * (double)SM * SD * SF;
    double rc = (double)R * C * 2;
    double gbytes = 2.0 * ((double)M * K + (double)K * N + N + (double)M * N);
    double gbytes32 = 2.0 * (32.0 * K + (double)K * N + N + 32.0 * N);
    double gflops32 = 2.0 * 32.0 * N * K;
    double pbytes = 2.0 * 3.0 * (double)P * P;
    /* LLaMA-7B's rotation of q alone, as the LLaMA block runs it (one
     * elementwise kernel): q as its GEMM writes it, [B, S, H * D], read
     * through the head view [B, H, S, D], rotate_half's two halves through a
     * concat, cos and sin [1, 1, S, D] broadcast over B and H; B8 H32 S2048
     * D128. The floor: q read once, y written once, the tables once. */
    int RB = g_quick ? 2 : 8, RS = 2048, RH = 32, RD = 128;
    char t_rot[1024];
    snprintf(t_rot, sizeof t_rot,
             "kfg 1\nq0 = input(bf16[%d, %d, %d])\ncs = input(bf16[1, %d, %d])\n"
             "sn = input(bf16[1, %d, %d])\nc = reshape(cs, [1, 1, %d, %d])\n"
             "s = reshape(sn, [1, 1, %d, %d])\nh = reshape(q0, [%d, %d, %d, %d])\n"
             "q = permute(h, [0, 2, 1, 3])\nq1 = slice(q, axis=3, stop=%d)\n"
             "q2 = slice(q, axis=3, start=%d)\nn2 = neg(q2)\nr = concat(n2, q1, axis=3)\n"
             "qc = mul(q, c)\nrs = mul(r, s)\ny = add(qc, rs)\noutput y\n",
             RB, RS, RH * RD, RS, RD, RS, RD, RS, RD, RS, RD, RB, RS, RH, RD, RD / 2, RD / 2);
    double rbytes = 2.0 * (2.0 * RB * RS * RH * RD + 2.0 * RS * RD);
    /* The same with cos and sin per batch, [B, 1, S, D] (position ids per
     * sequence, as transformers computes them for a padded batch): three
     * streamed operands, so the kernel is not unrolled (cg_elementwise.c) */
    char t_rotb[1024];
    snprintf(t_rotb, sizeof t_rotb,
             "kfg 1\nq0 = input(bf16[%d, %d, %d])\nc = input(bf16[%d, 1, %d, %d])\n"
             "s = input(bf16[%d, 1, %d, %d])\nh = reshape(q0, [%d, %d, %d, %d])\n"
             "q = permute(h, [0, 2, 1, 3])\nq1 = slice(q, axis=3, stop=%d)\n"
             "q2 = slice(q, axis=3, start=%d)\nn2 = neg(q2)\nr = concat(n2, q1, axis=3)\n"
             "qc = mul(q, c)\nrs = mul(r, s)\ny = add(qc, rs)\noutput y\n",
             RB, RS, RH * RD, RB, RS, RD, RB, RS, RD, RB, RS, RH, RD, RD / 2, RD / 2);
    double rbbytes = 2.0 * (2.0 * RB * RS * RH * RD + 2.0 * RB * RS * RD);
    /* The same rotation with q already in the head layout [B, H, S, D]
     * (contiguous): read and written in one order, as Inductor's kernel
     * reads and writes q's [B, S, H, D] order in the block (its result keeps
     * q's strides); the layout's share of rotary's gap to it */
    char t_roth[1024];
    snprintf(t_roth, sizeof t_roth,
             "kfg 1\nq = input(bf16[%d, %d, %d, %d])\ncs = input(bf16[1, %d, %d])\n"
             "sn = input(bf16[1, %d, %d])\nc = reshape(cs, [1, 1, %d, %d])\n"
             "s = reshape(sn, [1, 1, %d, %d])\nq1 = slice(q, axis=3, stop=%d)\n"
             "q2 = slice(q, axis=3, start=%d)\nn2 = neg(q2)\nr = concat(n2, q1, axis=3)\n"
             "qc = mul(q, c)\nrs = mul(r, s)\ny = add(qc, rs)\noutput y\n",
             RB, RH, RS, RD, RS, RD, RS, RD, RS, RD, RS, RD, RD / 2, RD / 2);
    /* The transformer blocks' GEMMs (B transposed: nn.Linear's [N, K]). */
    int TM = g_quick ? 4096 : 16384, LD = 4096, LF = 11008, GD = 1024;
    char t_lqf[512], t_lq[512], t_lo[512], t_ldn[512], t_lsw[512], t_gqkv[512], t_gfc1[512],
        t_gfc2[512], t_lseq[2048];
    snprintf(t_lqf, sizeof t_lqf,
             "kfg 1\nx = input(bf16[%d, %d])\ng = input(bf16[%d])\nw = input(bf16[%d, %d])\n"
             "n = rms_norm(x, g, eps=1e-6)\ny = matmul(n, w, transpose_b=true)\noutput y\n",
             TM, LD, LD, LD, LD);
    snprintf(t_lq, sizeof t_lq,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\n"
             "y = matmul(x, w, transpose_b=true)\noutput y\n",
             TM, LD, LD, LD);
    char t_lqn[512]; /* the same with B N-major ([K, N]), as the older rows keep it */
    snprintf(t_lqn, sizeof t_lqn,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\ny = matmul(x, w)\n"
             "output y\n",
             TM, LD, LD, LD);
    snprintf(t_lo, sizeof t_lo,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\nr = input(bf16[%d, %d])\n"
             "h = matmul(x, w, transpose_b=true)\ny = add(h, r)\noutput y\n",
             TM, LD, LD, LD, TM, LD);
    snprintf(t_ldn, sizeof t_ldn,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\nr = input(bf16[%d, %d])\n"
             "h = matmul(x, w, transpose_b=true)\ny = add(h, r)\noutput y\n",
             TM, LF, LD, LF, TM, LD);
    snprintf(t_lsw, sizeof t_lsw,
             "kfg 1\nx = input(bf16[%d, %d])\nwg = input(bf16[%d, %d])\nwu = input(bf16[%d, %d])\n"
             "g = matmul(x, wg, transpose_b=true)\nu = matmul(x, wu, transpose_b=true)\n"
             "a = silu(g)\ny = mul(a, u)\noutput y\n",
             TM, LD, LF, LD, LF, LD);
    snprintf(t_gqkv, sizeof t_gqkv,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\nb = input(bf16[%d])\n"
             "h = matmul(x, w, transpose_b=true)\ny = add(h, b)\noutput y\n",
             TM, GD, 3 * GD, GD, 3 * GD);
    snprintf(t_gfc1, sizeof t_gfc1,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\nb = input(bf16[%d])\n"
             "h = matmul(x, w, transpose_b=true)\na = add(h, b)\ny = gelu_tanh(a)\noutput y\n",
             TM, GD, 4 * GD, GD, 4 * GD);
    snprintf(t_gfc2, sizeof t_gfc2,
             "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\nb = input(bf16[%d])\n"
             "r = input(bf16[%d, %d])\nh = matmul(x, w, transpose_b=true)\na = add(h, b)\n"
             "y = add(a, r)\noutput y\n",
             TM, 4 * GD, GD, 4 * GD, GD, TM, GD);
    snprintf(t_lseq, sizeof t_lseq,
             "kfg 1\nx = input(bf16[%d, %d])\ng1 = input(bf16[%d])\nwq = input(bf16[%d, %d])\n"
             "wk = input(bf16[%d, %d])\nwv = input(bf16[%d, %d])\nwo = input(bf16[%d, %d])\n"
             "g2 = input(bf16[%d])\nwg = input(bf16[%d, %d])\nwu = input(bf16[%d, %d])\n"
             "wd = input(bf16[%d, %d])\nn1 = rms_norm(x, g1, eps=1e-6)\n"
             "q = matmul(n1, wq, transpose_b=true)\nk = matmul(n1, wk, transpose_b=true)\n"
             "v = matmul(n1, wv, transpose_b=true)\no = matmul(v, wo, transpose_b=true)\n"
             "h = add(o, x)\nn2 = rms_norm(h, g2, eps=1e-6)\n"
             "gt = matmul(n2, wg, transpose_b=true)\nup = matmul(n2, wu, transpose_b=true)\n"
             "sg = silu(gt)\nm = mul(sg, up)\nd = matmul(m, wd, transpose_b=true)\n"
             "y = add(d, h)\noutput q\noutput k\noutput y\n",
             TM, LD, LD, LD, LD, LD, LD, LD, LD, LD, LD, LD, LF, LD, LF, LD, LD, LF);
    /* Decode shapes (weights [N, K]): M = 1, 16, 64 against 4096 x 4096,
     * M = 16 against the MLP's 11008 x 4096 and 4096 x 11008, M = 8 and 32
     * against 4096 x 4096; the floor is the weight's bytes (B) at the copy
     * bandwidth. */
    static const int dec_m[7] = {1, 16, 64, 16, 16, 8, 32},
                     dec_n[7] = {4096, 4096, 4096, 11008, 4096, 4096, 4096},
                     dec_k[7] = {4096, 4096, 4096, 4096, 11008, 4096, 4096};
    char t_dec[7][512];
    double b_dec[7], f_dec[7];
    for (int i = 0; i < 7; i++) {
        snprintf(t_dec[i], sizeof t_dec[i],
                 "kfg 1\nx = input(bf16[%d, %d])\nw = input(bf16[%d, %d])\n"
                 "y = matmul(x, w, transpose_b=true)\noutput y\n",
                 dec_m[i], dec_k[i], dec_n[i], dec_k[i]);
        b_dec[i] = 2.0 * ((double)dec_m[i] * dec_k[i] + (double)dec_n[i] * dec_k[i] +
                          (double)dec_m[i] * dec_n[i]);
        f_dec[i] = 2.0 * (double)dec_m[i] * dec_n[i] * dec_k[i];
    }
    double tmd = TM;
#define GB2(m, n, k, extra)                                                                        \
    (2.0 * ((double)(m) * (k) + (double)(k) * (n) + (double)(m) * (n) + (extra)))
    double b_lq = GB2(tmd, LD, LD, 0), f_lq = 2.0 * tmd * LD * LD;
    double b_lqf = GB2(tmd, LD, LD, LD), b_lo = GB2(tmd, LD, LD, tmd * LD);
    double b_ldn = GB2(tmd, LD, LF, tmd * LD), f_ldn = 2.0 * tmd * LD * LF;
    double b_lsw = GB2(tmd, LF, LD, (double)LD * LF), f_lsw = 4.0 * tmd * LF * LD;
    double b_gqkv = GB2(tmd, 3 * GD, GD, 3 * GD), f_gqkv = 2.0 * tmd * 3 * GD * GD;
    double b_gfc1 = GB2(tmd, 4 * GD, GD, 4 * GD), f_gfc1 = 2.0 * tmd * 4 * GD * GD;
    double b_gfc2 = GB2(tmd, GD, 4 * GD, GD + tmd * GD), f_gfc2 = f_gfc1;
    double f_lseq = 4.0 * f_lq + 3.0 * f_ldn;
    double b_lseq = 2.0 * (4.0 * LD * LD + 3.0 * (double)LD * LF + 6.0 * tmd * LD);
#undef GB2
    bcase cases[] = {
        {"ew_chain", t_ew, 2 * rc + 3.0 * C * 2, 0, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"rmsnorm", t_rms, 2 * rc + C * 2.0, 0, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"layernorm", t_ln, 2 * rc + C * 4.0, 0, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"gemm_bias_gelu", t_gemm, gbytes, 2.0 * M * N * K, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        /* the target rows' device time alone, after 1 ms asleep, peers timed
         * the same way (the plain rows count each peer's host work before its
         * first launch: eager's dispatch, a compiled call's guards) */
        {"gemm_bias_gelu_after_sleep", t_gemm, gbytes, 2.0 * M * N * K, 0, 0, 0, "", KF_GEMM_AUTO,
         0},
        {"gemm_bias_gelu_m32_after_sleep", t_gemm32, gbytes32, gflops32, 0, 0, 0, "", KF_GEMM_AUTO,
         0},
        {"gemm_bias_gelu_erf", t_gemm_erf, gbytes, 2.0 * M * N * K, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        /* M = 32 (decode): the default (measured), cuBLASLt's GELU_BIAS
         * epilogue (the peer), the tiled generated kernel, it in stream-K,
         * the decode kernel (KF_CUDA_RECIPE_GEMM_DECODE, internal) forced
         * and in the measured choice */
        {"gemm_bias_gelu_m32", t_gemm32, gbytes32, gflops32, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"gemm_bias_gelu_m32_cublaslt", t_gemm32, gbytes32, gflops32, 0, 0, 0, "", KF_GEMM_CUBLASLT,
         0},
        {"gemm_bias_gelu_m32_generated", t_gemm32, gbytes32, gflops32, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_NO_DECODE},
        {"gemm_bias_gelu_m32_generated_sk", t_gemm32, gbytes32, gflops32, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_STREAMK},
        {"gemm_bias_gelu_m32_decode", t_gemm32, gbytes32, gflops32, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_DECODE},
        /* the register form (KF_CUDA_RECIPE_GEMM_DEC_REG, internal) */
        {"gemm_bias_gelu_m32_decode_reg", t_gemm32, gbytes32, gflops32, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_DECODE | KF_CUDA_RECIPE_GEMM_DEC_REG},
        /* the decode kernel's TMA form (KF_CUDA_RECIPE_GEMM_DEC_TMA, internal,
         * sm_90a) in each of its forms */
        {"gemm_bias_gelu_m32_decode_tma", t_gemm32, gbytes32, gflops32, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_DECODE | KF_CUDA_RECIPE_GEMM_DEC_TMA},
        /* kfuse's generated sm_90a GEMM (one kernel, the epilogue on the
         * accumulators) against the cuBLASLt rows above, in the same run */
        {"gemm_bias_gelu_generated", t_gemm, gbytes, 2.0 * M * N * K, 0, 0, 0, "",
         KF_GEMM_GENERATED, 0},
        {"gemm_bias_gelu_erf_generated", t_gemm_erf, gbytes, 2.0 * M * N * K, 0, 0, 0, "",
         KF_GEMM_GENERATED, 0},
        {"gemm_plain", t_plain, pbytes, 2.0 * (double)P * P * P, 0, 0, 0, "", KF_GEMM_CUBLASLT, 0},
        {"gemm_plain_generated", t_plain, pbytes, 2.0 * (double)P * P * P, 0, 0, 0, "",
         KF_GEMM_GENERATED, 0},
        /* cuBLASLt's GELU_BIAS epilogue forced (the peer of the measured
         * choice's other side), and the generated kernel in 2-CTA clusters
         * sharing B by TMA multicast (KF_CUDA_RECIPE_GEMM_CLUSTER2): the
         * --sustain rows of issue 13's power question */
        {"gemm_bias_gelu_cublaslt", t_gemm, gbytes, 2.0 * M * N * K, 0, 0, 0, "", KF_GEMM_CUBLASLT,
         0},
        {"gemm_bias_gelu_generated_c2", t_gemm, gbytes, 2.0 * M * N * K, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_CLUSTER2},
        {"gemm_plain_generated_c2", t_plain, pbytes, 2.0 * (double)P * P * P, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_CLUSTER2},
        /* the square raster (internal RASTER_SQ: 16 tile rows at a time on
         * 132 SMs where the default walks 8, fewer DRAM panels a wave), and
         * issue 13's GEMM with no epilogue (the bias + GELU's cost) */
        {"gemm_bias_gelu_generated_sq", t_gemm, gbytes, 2.0 * M * N * K, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_RASTER_SQ},
        {"gemm_plain_generated_sq", t_plain, pbytes, 2.0 * (double)P * P * P, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_RASTER_SQ},
        /* gelu_tanh by one MUFU.TANH (internal GELU_MUFU), the TMA-store
         * epilogue two chunks ahead (internal EPI_AHEAD: the bias loads of
         * two chunks in flight together), and both */
        {"gemm_bias_gelu_generated_mt", t_gemm, gbytes, 2.0 * M * N * K, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_GELU_MUFU},
        {"gemm_bias_gelu_generated_ahead", t_gemm, gbytes, 2.0 * M * N * K, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_EPI_AHEAD},
        {"gemm_bias_gelu_generated_mta", t_gemm, gbytes, 2.0 * M * N * K, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_GELU_MUFU | KF_CUDA_RECIPE_GEMM_EPI_AHEAD},
        /* the TMA-store epilogue's bias loaded from global memory in each
         * chunk (internal EPI_COLS_GLOBAL: the form before the default
         * copies the tile's bias into shared memory when the tile starts),
         * and that with gelu_tanh by one MUFU.TANH */
        {"gemm_bias_gelu_generated_csg", t_gemm, gbytes, 2.0 * M * N * K, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_EPI_COLS_GLOBAL},
        {"gemm_bias_gelu_generated_csg_mt", t_gemm, gbytes, 2.0 * M * N * K, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_EPI_COLS_GLOBAL | KF_CUDA_RECIPE_GEMM_GELU_MUFU},
        {"gemm_kshape_generated", t_kshape, gbytes - 2.0 * N, 2.0 * M * N * K, 0, 0, 0, "",
         KF_GEMM_GENERATED, 0},
        {"gemm_kshape_generated_sq", t_kshape, gbytes - 2.0 * N, 2.0 * M * N * K, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_RASTER_SQ},
        {"gemm_kshape_cublaslt", t_kshape, gbytes - 2.0 * N, 2.0 * M * N * K, 0, 0, 0, "",
         KF_GEMM_CUBLASLT, 0},
        /* the wgmma descriptors rebuilt each K step (internal DESC_REBUILD:
         * the main loop 82 SASS instructions a K step, stepped ones 43) */
        {"gemm_bias_gelu_generated_rb", t_gemm, gbytes, 2.0 * M * N * K, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_DESC_REBUILD},
        {"gemm_plain_generated_rb", t_plain, pbytes, 2.0 * (double)P * P * P, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_DESC_REBUILD},
        /* the default path (cuBLASLt x2 + the epilogue kernel: the measured
         * choice does not offer the dual kernel yet) and the dual kernel */
        {"swiglu", t_swiglu, sbytes, sflops, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"swiglu_after_sleep", t_swiglu, sbytes, sflops, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        /* the default plan (the GEMM group, then a row-wise LayerNorm), and
         * with KF_FLAG_SPLIT_ROW_NORMS the split row form: measured
         * (generated GEMM + row pass against cuBLASLt + the row-epilogue
         * kernel), and each side forced (the gemm_res_ln_* names) */
        {"gemm_res_ln", t_res_ln, lbytes, lflops, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"gemm_res_ln_after_sleep", t_res_ln, lbytes, lflops, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"gemm_res_ln_split", t_res_ln, lbytes, lflops, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"gemm_res_ln_split_generated", t_res_ln, lbytes, lflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         0},
        {"gemm_res_ln_split_cublaslt", t_res_ln, lbytes, lflops, 0, 0, 0, "", KF_GEMM_CUBLASLT, 0},
        {"gemm_res_ln_split_sm80", t_res_ln, lbytes, lflops, 0, 0, 0, "", KF_GEMM_SM80, 0},
        /* the row epilogue in the tile against cuBLASLt + the row kernel */
        {"ln_row256", t_row256, r256_bytes, r256_flops, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"ln_row256_generated", t_row256, r256_bytes, r256_flops, 0, 0, 0, "", KF_GEMM_GENERATED,
         0},
        {"ln_row256_sm80", t_row256, r256_bytes, r256_flops, 0, 0, 0, "", KF_GEMM_SM80, 0},
        {"ln_row256_cublaslt", t_row256, r256_bytes, r256_flops, 0, 0, 0, "", KF_GEMM_CUBLASLT, 0},
        {"ln_row256_f32_generated", t_row256_f32, 2.0 * r256_bytes, r256_flops, 0, 0, 0, "",
         KF_GEMM_GENERATED, 0},
        {"ln_row256_f32_split_generated", t_row256_f32, 2.0 * r256_bytes, r256_flops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_SIMT_ROW_SPLIT},
        {"ln_row256_f32_cublaslt", t_row256_f32, 2.0 * r256_bytes, r256_flops, 0, 0, 0, "",
         KF_GEMM_CUBLASLT, 0},
        {"ln_row128", t_row128, r128_bytes, r128_flops, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"ln_row128_generated", t_row128, r128_bytes, r128_flops, 0, 0, 0, "", KF_GEMM_GENERATED,
         0},
        {"ln_row128_sm80", t_row128, r128_bytes, r128_flops, 0, 0, 0, "", KF_GEMM_SM80, 0},
        {"ln_row128_cublaslt", t_row128, r128_bytes, r128_flops, 0, 0, 0, "", KF_GEMM_CUBLASLT, 0},
        /* the pair's default: 2-CTA clusters (tile-row pairs share the B
         * tile by TMA multicast), the register epilogue on packed pairs, silu
         * by ex2 and rcp; against the form before (internal DUAL_F32T: one
         * CTA, the f32 transposes, the expf sigmoid's silu; _f32t) and that
         * form in clusters (with CLUSTER2: _c2f32t) */
        {"swiglu_generated", t_swiglu, sbytes, sflops, 0, 0, 0, "", KF_GEMM_GENERATED, 0},
        {"swiglu_generated_f32t", t_swiglu, sbytes, sflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_DUAL_F32T},
        {"swiglu_generated_c2f32t", t_swiglu, sbytes, sflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_CLUSTER2 | KF_CUDA_RECIPE_GEMM_DUAL_F32T},
        /* the split row form's GEMM with its residual's rows prefetched
         * into L2 when a tile starts (internal EPI_PF: the register
         * epilogue's loads then hit L2 after the main loop) */
        {"gemm_res_ln_split_generated_pf", t_res_ln, lbytes, lflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_EPI_PF},
        /* q projection + rotary: the default plan (measured GEMM, then the
         * rotation kernel), forced generated; the head-split epilogue
         * measured and forced generated (one kernel) */
        {"rope_q", t_rope, qbytes, qflops, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"rope_q_generated", t_rope, qbytes, qflops, 0, 0, 0, "", KF_GEMM_GENERATED, 0},
        {"rope_q_head", t_rope, qbytes, qflops, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"rope_q_head_generated", t_rope, qbytes, qflops, 0, 0, 0, "", KF_GEMM_GENERATED, 0},
        /* norm prologues in the generated kernel's A tiles against the
         * cuBLASLt side (the prologue kernel writes A normalized first) */
        {"llama_qkv", t_llama_qkv, lqbytes, lqflops, 0, 0, 0, "", KF_GEMM_AUTO,
         KF_CUDA_RECIPE_GEMM_NO_SIBLINGS},
        {"llama_qkv_siblings", t_llama_qkv, lqbytes, lqflops, 0, 0, 0, "", KF_GEMM_AUTO,
         KF_CUDA_RECIPE_GEMM_SIB_APART},
        {"llama_qkv_generated", t_llama_qkv, lqbytes, lqflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_NO_SIBLINGS},
        {"llama_qkv_siblings_generated", t_llama_qkv, lqbytes, lqflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_SIB_APART},
        {"llama_qkv_cublaslt", t_llama_qkv, lqbytes, lqflops, 0, 0, 0, "", KF_GEMM_CUBLASLT,
         KF_CUDA_RECIPE_GEMM_NO_SIBLINGS},
        {"llama_qkv_siblings_cublaslt", t_llama_qkv, lqbytes, lqflops, 0, 0, 0, "",
         KF_GEMM_CUBLASLT, KF_CUDA_RECIPE_GEMM_SIB_APART},
        {"llama_qkv_one", t_llama_qkv, lqbytes, lqflops, 0, 0, 0, "", KF_GEMM_AUTO,
         KF_CUDA_RECIPE_GEMM_SIB_ONE},
        {"llama_qkv_one_generated", t_llama_qkv, lqbytes, lqflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_SIB_ONE},
        /* the block's layout: the measured choice, the one kernel (and in
         * 2-CTA clusters, B multicast: CLUSTER2), cuBLASLt's three GEMMs
         * behind the norm once (--abba llama_qkv_t_one_generated:..._c2) */
        {"llama_qkv_t", t_llama_qkv_t, lqbytes, lqflops, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"llama_qkv_t_one_generated", t_llama_qkv_t, lqbytes, lqflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_SIB_ONE},
        {"llama_qkv_t_one_generated_c2", t_llama_qkv_t, lqbytes, lqflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_SIB_ONE | KF_CUDA_RECIPE_GEMM_CLUSTER2},
        {"llama_qkv_t_cublaslt", t_llama_qkv_t, lqbytes, lqflops, 0, 0, 0, "", KF_GEMM_CUBLASLT, 0},
        {"llama_qkv_t_one_generated_sq", t_llama_qkv_t, lqbytes, lqflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_SIB_ONE | KF_CUDA_RECIPE_GEMM_RASTER_SQ},
        {"llama_qkv_t_one_generated_c2sq", t_llama_qkv_t, lqbytes, lqflops, 0, 0, 0, "",
         KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_SIB_ONE | KF_CUDA_RECIPE_GEMM_CLUSTER2 |
             KF_CUDA_RECIPE_GEMM_RASTER_SQ},
        {"gqa_qkv_siblings", t_gqa_qkv, gqbytes, gqflops, 0, 0, 0, "", KF_GEMM_AUTO,
         KF_CUDA_RECIPE_GEMM_SIB_APART},
        {"gqa_qkv_siblings_generated", t_gqa_qkv, gqbytes, gqflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_SIB_APART},
        {"gqa_qkv_siblings_cublaslt", t_gqa_qkv, gqbytes, gqflops, 0, 0, 0, "", KF_GEMM_CUBLASLT,
         KF_CUDA_RECIPE_GEMM_SIB_APART},
        {"gqa_qkv_one", t_gqa_qkv, gqbytes, gqflops, 0, 0, 0, "", KF_GEMM_AUTO,
         KF_CUDA_RECIPE_GEMM_SIB_ONE},
        {"gqa_qkv_one_generated", t_gqa_qkv, gqbytes, gqflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_SIB_ONE},
        {"gpt2_qkv_siblings", t_gpt2_qkv, gpbytes, gpflops, 0, 0, 0, "", KF_GEMM_AUTO,
         KF_CUDA_RECIPE_GEMM_SIB_APART},
        {"gpt2_qkv_siblings_generated", t_gpt2_qkv, gpbytes, gpflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_SIB_APART},
        {"gpt2_qkv_siblings_cublaslt", t_gpt2_qkv, gpbytes, gpflops, 0, 0, 0, "", KF_GEMM_CUBLASLT,
         KF_CUDA_RECIPE_GEMM_SIB_APART},
        {"gpt2_qkv_one", t_gpt2_qkv, gpbytes, gpflops, 0, 0, 0, "", KF_GEMM_AUTO,
         KF_CUDA_RECIPE_GEMM_SIB_ONE},
        {"gpt2_qkv_one_generated", t_gpt2_qkv, gpbytes, gpflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_SIB_ONE},
        /* the same sets on the sm_80 kernel (mma.sync): one GEMM over the
         * concatenated columns against the members apart */
        {"gpt2_qkv_one_sm80", t_gpt2_qkv, gpbytes, gpflops, 0, 0, 0, "", KF_GEMM_SM80,
         KF_CUDA_RECIPE_GEMM_SIB_ONE},
        {"gpt2_qkv_siblings_sm80", t_gpt2_qkv, gpbytes, gpflops, 0, 0, 0, "", KF_GEMM_SM80,
         KF_CUDA_RECIPE_GEMM_SIB_APART},
        {"gqa_qkv_one_sm80", t_gqa_qkv, gqbytes, gqflops, 0, 0, 0, "", KF_GEMM_SM80,
         KF_CUDA_RECIPE_GEMM_SIB_ONE},
        {"gqa_qkv_siblings_sm80", t_gqa_qkv, gqbytes, gqflops, 0, 0, 0, "", KF_GEMM_SM80,
         KF_CUDA_RECIPE_GEMM_SIB_APART},
        {"swiglu_rms", t_swiglu_rms, sbytes, sflops, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"swiglu_rms_generated", t_swiglu_rms, sbytes, sflops, 0, 0, 0, "", KF_GEMM_GENERATED, 0},
        {"ln_qkv", t_ln_qkv, vbytes, vflops, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        /* its peers: gpt2_qkv's (and gpt2_qkv_after_sleep's) in peers.py */
        {"ln_qkv_after_sleep", t_ln_qkv, vbytes, vflops, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"ln_qkv_generated", t_ln_qkv, vbytes, vflops, 0, 0, 0, "", KF_GEMM_GENERATED, 0},
        {"ln_qkv_cublaslt", t_ln_qkv, vbytes, vflops, 0, 0, 0, "", KF_GEMM_CUBLASLT, 0},
    /* GPT-2-medium's four block GEMMs (B16 S1024, K = 1024 but FC2's 4096):
     * the measured choice, each side forced, and the generated kernel in
     * 2-CTA clusters (B multicast), with ping-pong's turn passed once a
     * main loop is issued (_early), and with the TMA-store epilogue two
     * chunks ahead (_ahead): internal schedules, same run */
#define GPT2_ROWS(nm, t, by, fl)                                                                   \
    {nm, t, by, fl, 0, 0, 0, "", KF_GEMM_AUTO, 0},                                                 \
        {nm "_generated", t, by, fl, 0, 0, 0, "", KF_GEMM_GENERATED, 0},                           \
        {nm "_cublaslt", t, by, fl, 0, 0, 0, "", KF_GEMM_CUBLASLT, 0},                             \
        {nm "_generated_c2", t, by, fl, 0, 0, 0, "", KF_GEMM_GENERATED,                            \
         KF_CUDA_RECIPE_GEMM_CLUSTER2},                                                            \
        {nm "_generated_early", t, by, fl, 0, 0, 0, "", KF_GEMM_GENERATED,                         \
         KF_CUDA_RECIPE_GEMM_PP_EARLY},                                                            \
        {nm "_generated_ahead", t, by, fl, 0, 0, 0, "", KF_GEMM_GENERATED,                         \
         KF_CUDA_RECIPE_GEMM_EPI_AHEAD}
        GPT2_ROWS("gpt2_outproj", t_g2o, g2obytes, g2oflops),
        GPT2_ROWS("gpt2_fc1", t_ln_up, ubytes, uflops),
        GPT2_ROWS("gpt2_fc2", t_g2f2, g2f2bytes, g2f2flops),
#undef GPT2_ROWS
    /* ... and with the residual prefetched into L2 when a tile starts (_pf),
     * cooperative 128 x 256 tiles at K = 1024 (_coop), ping-pong 128 x 128
     * at FC2's K = 4096 (_pp): internal schedules, same run */
#define G2_PF KF_CUDA_RECIPE_GEMM_EPI_PF
#define G2_COOP KF_CUDA_RECIPE_GEMM_SHORT_COOP
        {"gpt2_outproj_generated_pf", t_g2o, g2obytes, g2oflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         G2_PF},
        {"gpt2_outproj_generated_coop", t_g2o, g2obytes, g2oflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         G2_COOP},
        {"gpt2_outproj_generated_coop_pf", t_g2o, g2obytes, g2oflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, G2_COOP | G2_PF},
        {"gpt2_fc1_generated_coop", t_ln_up, ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         G2_COOP},
        /* the LayerNorm-folded Q/K/V GEMMs on cooperative 128 x 256 tiles
         * (SHORT_COOP), against the recipe's ping-pong 128 x 128 */
        {"ln_qkv_generated_coop", t_ln_qkv, vbytes, vflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         G2_COOP},
        {"gpt2_qkv_one_generated_coop", t_gpt2_qkv, gpbytes, gpflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_SIB_ONE | G2_COOP},
        {"gpt2_fc2_generated_pf", t_g2f2, g2f2bytes, g2f2flops, 0, 0, 0, "", KF_GEMM_GENERATED,
         G2_PF},
        {"gpt2_fc2_generated_pp", t_g2f2, g2f2bytes, g2f2flops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_PINGPONG},
        {"gpt2_fc2_generated_pp_pf", t_g2f2, g2f2bytes, g2f2flops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_PINGPONG | G2_PF},
        {"gpt2_outproj_generated_nin_pf", t_g2o, g2obytes, g2oflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         G2_PF},
        /* the residual by global loads between the store barriers (the
         * form before the residual by TMA: EPI_GLOBAL_RS), and by TMA where
         * the default does not take it (EPI_BUF4): cooperative 128 x 256 */
        {"gpt2_outproj_generated_grs", t_g2o, g2obytes, g2oflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_EPI_GLOBAL_RS},
        {"gpt2_outproj_generated_coop_rs", t_g2o, g2obytes, g2oflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, G2_COOP | KF_CUDA_RECIPE_GEMM_EPI_BUF4},
        {"gpt2_fc2_generated_rs", t_g2f2, g2f2bytes, g2f2flops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_EPI_BUF4},
        /* FC1 (bias + GELU, no residual) with the 4 in-place chunk buffers
         * (EPI_BUF4), ping-pong and cooperative */
        {"gpt2_fc1_generated_buf4", t_ln_up, ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_EPI_BUF4},
        {"gpt2_fc1_generated_coop_buf4", t_ln_up, ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         G2_COOP | KF_CUDA_RECIPE_GEMM_EPI_BUF4},
        /* the TMA-store epilogue without its bf16 pair forms (the code
         * before cg_raw_feed, kf_gm_pack2's bit packing and kf_gm_ldv) */
        {"gpt2_outproj_generated_unpacked", t_g2o, g2obytes, g2oflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_EPI_UNPACKED},
        {"gpt2_fc1_generated_unpacked", t_ln_up, ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_EPI_UNPACKED},
        {"gpt2_fc2_generated_unpacked", t_g2f2, g2f2bytes, g2f2flops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_EPI_UNPACKED},
#undef G2_PF
#undef G2_COOP
    /* a folded norm's pre-passes (the row statistics, each B's fold) apart
     * as before (_apart: PREPASS_APART), where by default (since 214feea's
     * run) they take one launch: the generated side */
#define G2_APART KF_CUDA_RECIPE_GEMM_PREPASS_APART
        /* ping-pong's tile counter from the consumer's index as it is
         * (_ppvar: KF_CUDA_RECIPE_GEMM_PP_VARYING, internal, the form before
         * the shuffle) */
        {"gpt2_fc1_generated_ppvar", t_ln_up, ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_PP_VARYING},
        {"ln_qkv_generated_ppvar", t_ln_qkv, vbytes, vflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_PP_VARYING},
        {"gpt2_outproj_generated_ppvar", t_g2o, g2obytes, g2oflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_PP_VARYING},
        {"gpt2_qkv_siblings_generated_ppvar", t_gpt2_qkv, gpbytes, gpflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_SIB_APART | KF_CUDA_RECIPE_GEMM_PP_VARYING},
        {"gpt2_qkv_one_generated_ppvar", t_gpt2_qkv, gpbytes, gpflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_SIB_ONE | KF_CUDA_RECIPE_GEMM_PP_VARYING},
        {"ln_qkv_generated_apart", t_ln_qkv, vbytes, vflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         G2_APART},
        {"gpt2_fc1_generated_apart", t_ln_up, ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         G2_APART},
        {"gpt2_qkv_siblings_generated_apart", t_gpt2_qkv, gpbytes, gpflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_SIB_APART | G2_APART},
        {"gpt2_qkv_one_generated_apart", t_gpt2_qkv, gpbytes, gpflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_SIB_ONE | G2_APART},
        {"llama_qkv_one_generated_apart", t_llama_qkv, lqbytes, lqflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_SIB_ONE | G2_APART},
#undef G2_APART
    /* a LayerNorm fold's bias in the epilogue, a load and an add an element
     * (_biasepi: KF_CUDA_RECIPE_GEMM_FOLD_BIAS_EPI, internal, the form
     * before), where by default the pre-pass adds it into the fold's column
     * terms d: GPT-2's FC1 and Q/K/V behind their LayerNorms. (The _pre1 rows,
     * the pre-passes in one launch asked for by PREPASS_ONE, are retired with
     * that flag: the default since 214feea's run, the same kernels as the
     * plain rows.) */
#define G2_BEPI KF_CUDA_RECIPE_GEMM_FOLD_BIAS_EPI
        {"ln_qkv_biasepi", t_ln_qkv, vbytes, vflops, 0, 0, 0, "", KF_GEMM_AUTO, G2_BEPI},
        {"ln_qkv_generated_biasepi", t_ln_qkv, vbytes, vflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         G2_BEPI},
        {"gpt2_fc1_biasepi", t_ln_up, ubytes, uflops, 0, 0, 0, "", KF_GEMM_AUTO, G2_BEPI},
        {"gpt2_fc1_generated_biasepi", t_ln_up, ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         G2_BEPI},
        {"gpt2_qkv_siblings_generated_biasepi", t_gpt2_qkv, gpbytes, gpflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_SIB_APART | G2_BEPI},
        {"gpt2_qkv_one_generated_biasepi", t_gpt2_qkv, gpbytes, gpflops, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_SIB_ONE | G2_BEPI},
#undef G2_BEPI
        {"ln_qkv_generated_c2", t_ln_qkv, vbytes, vflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_CLUSTER2},
        {"ln_qkv_generated_early", t_ln_qkv, vbytes, vflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_PP_EARLY},
        {"ln_up_gelu", t_ln_up, ubytes, uflops, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"ln_up_gelu_generated", t_ln_up, ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED, 0},
        {"ln_up_gelu_cublaslt", t_ln_up, ubytes, uflops, 0, 0, 0, "", KF_GEMM_CUBLASLT, 0},
        /* K = 1024 with ping-pong tiles: one consumer's epilogue under the
         * other's main loop */
        {"ln_up_gelu_generated_pingpong", t_ln_up, ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_PINGPONG},
        {"k1024_gelu_generated", t_k1[0], ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED, 0},
        {"k1024_gelu_cublaslt", t_k1[0], ubytes, uflops, 0, 0, 0, "", KF_GEMM_CUBLASLT, 0},
        {"k1024_bias_generated", t_k1[1], ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED, 0},
        {"k1024_bias_cublaslt", t_k1[1], ubytes, uflops, 0, 0, 0, "", KF_GEMM_CUBLASLT, 0},
        {"k1024_bias_kmajor_generated", t_k1[2], ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED, 0},
        {"k1024_bias_kmajor_cublaslt", t_k1[2], ubytes, uflops, 0, 0, 0, "", KF_GEMM_CUBLASLT, 0},
        {"k1024_gelu_only_generated", t_k1[3], ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED, 0},
        /* the same with the bias from global memory in each chunk (EPI_COLS_GLOBAL) */
        {"k1024_gelu_generated_csg", t_k1[0], ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_EPI_COLS_GLOBAL},
        {"k1024_bias_generated_csg", t_k1[1], ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_EPI_COLS_GLOBAL},
        {"k1024_bias_generated_pingpong", t_k1[1], ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_PINGPONG},
        {"k1024_gelu_generated_pingpong", t_k1[0], ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_PINGPONG},
        /* the register epilogue (global stores from the quad transposes),
         * where the default stores through shared memory by TMA */
        {"k1024_bias_generated_regs", t_k1[1], ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_EPI_REGS},
        {"k1024_gelu_generated_regs", t_k1[0], ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_EPI_REGS},
        {"ln_up_gelu_generated_regs", t_ln_up, ubytes, uflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_EPI_REGS},
        {"ln_qkv_generated_regs", t_ln_qkv, vbytes, vflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_EPI_REGS},
        {"rope_q_generated_regs", t_rope, qbytes, qflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_EPI_REGS},
        {"rope_q_head_generated_regs", t_rope, qbytes, qflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_EPI_REGS},
        {"gemm_bias_gelu_generated_regs", t_gemm, gbytes, 2.0 * M * N * K, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_EPI_REGS},
        {"gemm_plain_generated_regs", t_plain, pbytes, 2.0 * (double)P * P * P, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_EPI_REGS},
        {"ln_qkv_generated_pingpong", t_ln_qkv, vbytes, vflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_PINGPONG},
        /* the norm applied to A's tiles in the ring (the schedule before the
         * fold into B), same run */
        {"rope_q_generated_ring", t_rope, qbytes, qflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_NORM_IN_RING},
        {"ln_qkv_generated_ring", t_ln_qkv, vbytes, vflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_NORM_IN_RING},
        /* the generated kernel's other schedules, same run: ping-pong 128-wide
         * tiles, and the epilogue staged through shared memory */
        {"gemm_bias_gelu_generated_pingpong", t_gemm, gbytes, 2.0 * M * N * K, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_PINGPONG},
        {"gemm_bias_gelu_generated_staged", t_gemm, gbytes, 2.0 * M * N * K, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_STAGED_EPI},
        {"swiglu_generated_pingpong", t_swiglu, sbytes, sflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_PINGPONG},
        {"swiglu_generated_staged", t_swiglu, sbytes, sflops, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_STAGED_EPI | KF_CUDA_RECIPE_GEMM_DUAL_F32T}, /* one CTA */
        {"gemm_plain_generated_pingpong", t_plain, pbytes, 2.0 * (double)P * P * P, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_PINGPONG},
        /* the sm_80 kernel (mma.sync, cp.async; KF_GEMM_SM80) on this GPU:
         * on an H100 for information (the wgmma kernel is the one that runs
         * there), on an A100 against cuBLASLt's rows above */
        {"gemm_bias_gelu_sm80", t_gemm, gbytes, 2.0 * M * N * K, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_SM80},
        {"gemm_plain_sm80", t_plain, pbytes, 2.0 * (double)P * P * P, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_SM80},
        /* its 128 x 128 tile on 8 warps of 64 x 32 (the layout before the
         * 4 warps of 64 x 64), same run */
        {"gemm_plain_sm80_8warps", t_plain, pbytes, 2.0 * (double)P * P * P, 0, 0, 0, "",
         KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_SM80 | KF_CUDA_RECIPE_GEMM_SM80_8WARPS},
        /* the rotation alone (one elementwise kernel; peers: eager, Inductor) */
        {"rotary", t_rot, rbytes, 0, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"rotary_bpos", t_rotb, rbbytes, 0, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        /* the same after 1 ms of one thread asleep: the device time alone,
         * as the block's profile counts its kernels (peers.py's rows of these
         * names time Inductor so, where its plain rows count its host work) */
        {"rotary_after_sleep", t_rot, rbytes, 0, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"rotary_bpos_after_sleep", t_rotb, rbbytes, 0, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"rotary_hd", t_roth, rbytes, 0, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"rotary_hd_after_sleep", t_roth, rbytes, 0, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        /* rotate_half's halves read apart, the form before pairs
         * (EW_PAIRS_APART; --abba rotary_apart:rotary) */
        {"rotary_apart", t_rot, rbytes, 0, 0, 0, 0, "", KF_GEMM_AUTO,
         KF_CUDA_RECIPE_EW_PAIRS_APART},
        {"rotary_bpos_apart", t_rotb, rbbytes, 0, 0, 0, 0, "", KF_GEMM_AUTO,
         KF_CUDA_RECIPE_EW_PAIRS_APART},
        /* f32 (the SIMT kernel; its floor is bf16's: compare TFLOP/s with
         * the FFMA peak instead) */
        {"f32_gemm_cublaslt", t_f32, fbytes, fflops, 0, 0, 0, "", KF_GEMM_CUBLASLT, 0},
        {"f32_gemm_generated", t_f32, fbytes, fflops, 0, 0, 0, "", KF_GEMM_GENERATED, 0},
        {"f32_gemm", t_f32, fbytes, fflops, 0, 0, 0, "", KF_GEMM_AUTO, 0},
        {"f32_gemm_bias_gelu_cublaslt", t_f32g, fbytes, fflops, 0, 0, 0, "", KF_GEMM_CUBLASLT, 0},
        {"f32_gemm_bias_gelu_generated", t_f32g, fbytes, fflops, 0, 0, 0, "", KF_GEMM_GENERATED, 0},
        {"f32_gemm_bias_gelu", t_f32g, fbytes, fflops, 0, 0, 0, "", KF_GEMM_AUTO, 0},
    /* The blocks' GEMMs: cuBLASLt, the generated kernel, and the generated
     * kernel in 2-CTA clusters (B multicast), same run. */
#define GEMM_ROWS(nm, t, by, fl)                                                                   \
    {nm, t, by, fl, 0, 0, 0, "", KF_GEMM_AUTO, 0},                                                 \
        {nm "_cublaslt", t, by, fl, 0, 0, 0, "", KF_GEMM_CUBLASLT, 0},                             \
        {nm "_generated", t, by, fl, 0, 0, 0, "", KF_GEMM_GENERATED, 0},                           \
        {nm "_generated_c2", t, by, fl, 0, 0, 0, "", KF_GEMM_GENERATED,                            \
         KF_CUDA_RECIPE_GEMM_CLUSTER2},                                                            \
        {nm "_generated_rb", t, by, fl, 0, 0, 0, "", KF_GEMM_GENERATED,                            \
         KF_CUDA_RECIPE_GEMM_DESC_REBUILD},                                                        \
        {nm "_generated_sq", t, by, fl, 0, 0, 0, "", KF_GEMM_GENERATED,                            \
         KF_CUDA_RECIPE_GEMM_RASTER_SQ}
        GEMM_ROWS("l_q_fold", t_lqf, b_lqf, f_lq),
        GEMM_ROWS("l_q", t_lq, b_lq, f_lq),
        GEMM_ROWS("l_q_nmajor", t_lqn, b_lq, f_lq),
        GEMM_ROWS("l_o_res", t_lo, b_lo, f_lq),
        GEMM_ROWS("l_down_res", t_ldn, b_ldn, f_ldn),
        GEMM_ROWS("l_swiglu", t_lsw, b_lsw, f_lsw),
        GEMM_ROWS("g_qkv", t_gqkv, b_gqkv, f_gqkv),
        GEMM_ROWS("g_fc1", t_gfc1, b_gfc1, f_gfc1),
        GEMM_ROWS("g_fc2", t_gfc2, b_gfc2, f_gfc2),
        GEMM_ROWS("l_seq", t_lseq, b_lseq, f_lseq),
#undef GEMM_ROWS
        /* LLaMA's down and o projections + residual in clusters and the
         * square raster together (--abba l_down_res_generated_c2:..._c2sq;
         * H100, ad6a709: down 0.9759 of _c2's time A B B A, 1.9013 ms idle
         * against _generated's 1.9438; H200, 582099c, two rounds A B B A:
         * down 0.977 / 0.983 of _generated's time but 1.019 / 1.016 of
         * _cublaslt's, o 0.982 / 0.986 and 1.010 / 1.011: not the default) */
        {"l_down_res_generated_c2sq", t_ldn, b_ldn, f_ldn, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_CLUSTER2 | KF_CUDA_RECIPE_GEMM_RASTER_SQ},
        {"l_o_res_generated_c2sq", t_lo, b_lo, f_lq, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_CLUSTER2 | KF_CUDA_RECIPE_GEMM_RASTER_SQ},
    /* Stream-K (KF_CUDA_RECIPE_GEMM_STREAMK, internal): the decode shapes
     * through cuBLASLt, the generated kernel and the generated kernel with
     * its tiles cut by K over every SM; and the LLaMA projections whose
     * last wave is half empty (2048 tiles: 15.5 waves on 132 SMs), same run. */
#define SK_ROWS(nm, t, by, fl)                                                                     \
    {nm "_cublaslt", t, by, fl, 0, 0, 0, "", KF_GEMM_CUBLASLT, 0},                                 \
        {nm "_generated", t, by, fl, 0, 0, 0, "", KF_GEMM_GENERATED,                               \
         KF_CUDA_RECIPE_GEMM_NO_DECODE},                                                           \
        {nm "_generated_sk", t, by, fl, 0, 0, 0, "", KF_GEMM_GENERATED,                            \
         KF_CUDA_RECIPE_GEMM_STREAMK},                                                             \
        {nm "_generated_sk128", t, by, fl, 0, 0, 0, "", KF_GEMM_GENERATED,                         \
         KF_CUDA_RECIPE_GEMM_STREAMK | KF_CUDA_RECIPE_GEMM_SK_NARROW},                             \
        {nm "_decode", t, by, fl, 0, 0, 0, "", KF_GEMM_GENERATED, KF_CUDA_RECIPE_GEMM_DECODE},     \
        {nm "_decode_reg", t, by, fl, 0, 0, 0, "", KF_GEMM_GENERATED,                              \
         KF_CUDA_RECIPE_GEMM_DECODE | KF_CUDA_RECIPE_GEMM_DEC_REG},                                \
        {nm "_decode_tma", t, by, fl, 0, 0, 0, "", KF_GEMM_GENERATED,                              \
         KF_CUDA_RECIPE_GEMM_DECODE | KF_CUDA_RECIPE_GEMM_DEC_TMA}
        SK_ROWS("dec_m1", t_dec[0], b_dec[0], f_dec[0]),
        SK_ROWS("dec_m16", t_dec[1], b_dec[1], f_dec[1]),
        SK_ROWS("dec_m64", t_dec[2], b_dec[2], f_dec[2]),
        SK_ROWS("dec_m16_n11008", t_dec[3], b_dec[3], f_dec[3]),
        SK_ROWS("dec_m16_k11008", t_dec[4], b_dec[4], f_dec[4]),
        SK_ROWS("dec_m8", t_dec[5], b_dec[5], f_dec[5]),
        SK_ROWS("dec_m32", t_dec[6], b_dec[6], f_dec[6]),
#undef SK_ROWS
        {"l_q_generated_sk", t_lq, b_lq, f_lq, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_STREAMK},
        {"l_q_fold_generated_sk", t_lqf, b_lqf, f_lq, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_STREAMK},
        {"l_down_res_generated_sk", t_ldn, b_ldn, f_ldn, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_STREAMK},
        {"l_swiglu_generated_sk", t_lsw, b_lsw, f_lsw, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_STREAMK},
        /* K = 1024 leaves the cooperative kernel's epilogue exposed (H200,
         * 0209d02: g_fc1 0.311 ms against the 0.181 of its 16 rounds of
         * tiles at the MMA rate): ping-pong 128 x 128 tiles run one
         * consumer's epilogue under the other's main loop */
        {"g_qkv_generated_pingpong", t_gqkv, b_gqkv, f_gqkv, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_PINGPONG},
        {"g_fc1_generated_pingpong", t_gfc1, b_gfc1, f_gfc1, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_PINGPONG},
        {"l_swiglu_generated_pingpong", t_lsw, b_lsw, f_lsw, 0, 0, 0, "", KF_GEMM_GENERATED,
         KF_CUDA_RECIPE_GEMM_PINGPONG},
    };
    int n_cases = (int)(sizeof cases / sizeof cases[0]);
    kf_ctx *ctx = make_ctx(NULL, KF_FLAG_NO_CACHE);
    kf_ctx *ctx_gen = make_ctx_gemm(NULL, KF_FLAG_NO_CACHE, KF_GEMM_GENERATED);
    /* gemm_plain is cuBLASLt's row: a KF_GEMM_CUBLASLT context (the default
     * one measured it against the generated kernel and could run either) */
    kf_ctx *ctx_lt = make_ctx_gemm(NULL, KF_FLAG_NO_CACHE, KF_GEMM_CUBLASLT);
    kf_ctx *ctx_80 = make_ctx_gemm(NULL, KF_FLAG_NO_CACHE, KF_GEMM_SM80); /* the *_sm80 cases */
    /* the gemm_res_ln_split* cases: the split row form's contexts */
    unsigned sf = KF_FLAG_NO_CACHE | KF_FLAG_SPLIT_ROW_NORMS;
    kf_ctx *sctx = make_ctx_gemm(NULL, sf, KF_GEMM_AUTO);
    kf_ctx *sctx_gen = make_ctx_gemm(NULL, sf, KF_GEMM_GENERATED);
    kf_ctx *sctx_lt = make_ctx_gemm(NULL, sf, KF_GEMM_CUBLASLT);
    kf_ctx *sctx_80 = make_ctx_gemm(NULL, sf, KF_GEMM_SM80);
    /* the rope_q_head* cases: the head-split epilogue's contexts */
    unsigned hf = KF_FLAG_NO_CACHE | KF_FLAG_GEMM_HEAD_EPILOGUE;
    kf_ctx *hctx = make_ctx_gemm(NULL, hf, KF_GEMM_AUTO);
    kf_ctx *hctx_gen = make_ctx_gemm(NULL, hf, KF_GEMM_GENERATED);
    for (int i = 0; i < n_cases; i++) {
        if (!case_on(cases[i].name))
            continue;
        bool split = strncmp(cases[i].name, "gemm_res_ln_split", 17) == 0;
        if (strncmp(cases[i].name, "rope_q_head", 11) == 0) {
            run_case(cases[i].gemm == KF_GEMM_GENERATED ? hctx_gen : hctx, &cases[i], copy_gbs,
                     gemm_tflops);
            continue;
        }
        run_case(cases[i].gemm == KF_GEMM_GENERATED  ? (split ? sctx_gen : ctx_gen)
                 : cases[i].gemm == KF_GEMM_CUBLASLT ? (split ? sctx_lt : ctx_lt)
                 : cases[i].gemm == KF_GEMM_SM80     ? (split ? sctx_80 : ctx_80)
                 : split                             ? sctx
                                                     : ctx,
                 &cases[i], copy_gbs, gemm_tflops);
    }
    abba_finish();
    kf_ctx_destroy(ctx_80);
    kf_ctx_destroy(sctx_80);
    kf_ctx_destroy(sctx);
    kf_ctx_destroy(sctx_gen);
    kf_ctx_destroy(sctx_lt);
    kf_ctx_destroy(hctx);
    kf_ctx_destroy(hctx_gen);

    /* Compile times: a private empty cache, cold then warm. */
    char dir[] = "/tmp/kf_bench_cache_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    const char *ctexts[4] = {t_ew, t_rms, t_ln, t_gemm_erf};
    const char *cnames[4] = {"ew_chain", "rmsnorm", "layernorm", "gemm_generated"};
    double cold_ms[4], warm_ms[4];
    for (int i = 0; i < 4; i++) {
        kf_ctx *cc = make_ctx_gemm(dir, 0, i == 3 ? KF_GEMM_GENERATED : KF_GEMM_AUTO);
        kf_graph *g = parse(cc, ctexts[i]);
        kf_program *p = NULL;
        double t0 = now_s();
        if (kf_compile(cc, g, &p) != KF_OK) {
            fprintf(stderr, "gpu_bench: %s\n", kf_graph_error(g));
            return 1;
        }
        cold_ms[i] = (now_s() - t0) * 1e3 / (double)kf_program_kernel_count(p);
        /* Warm: the cache is filled, the device context is up. */
        double w[16];
        int nw = 7;
        for (int r = 0; r < nw; r++) {
            kf_program *q = NULL;
            t0 = now_s();
            if (kf_compile(cc, g, &q) != KF_OK)
                return 1;
            w[r] = (now_s() - t0) * 1e3;
            kf_program_destroy(q);
        }
        warm_ms[i] = median(w, nw);
        kf_program_destroy(p);
        kf_graph_destroy(g);
        kf_ctx_destroy(cc);
        fprintf(stderr, "compile %-14s cold %.1f ms/kernel, warm cached load %.2f ms\n",
                cnames[i], cold_ms[i], warm_ms[i]);
    }
    {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "gpu_bench: could not remove %s\n", dir);
    }

    /* Host launch overhead: a small 3-kernel program, enqueued many times. */
    double launch_us = 0;
    size_t small_launches = 0;
    {
        const char *t = "kfg 1\nx = input(f32[64, 256])\na = exp(x)\ns = softmax(a)\n"
                        "m = reduce_max(s, axis=1)\noutput m\noutput s\n";
        kf_graph *g = parse(ctx, t);
        kf_plan *plan = NULL;
        if (kf_plan_create(g, NULL, &plan) != KF_OK)
            return 1;
        kf_cuda_exec *ex = NULL;
        CHECK(kf_cuda_exec_build(ctx, plan, &ex, err));
        small_launches = kf_cuda_exec_launch_count(ex);
        for (int i = 0; i < 20; i++)
            CHECK(kf_cuda_exec_launch(ex, S, err));
        CHECK(kf_cuda_stream_sync(&DEV, S, NULL, err));
        double v[9];
        for (int r = 0; r < 9; r++) {
            int iters = 100;
            double t0 = now_s();
            for (int i = 0; i < iters; i++)
                CHECK(kf_cuda_exec_launch(ex, S, err));
            double dt = now_s() - t0;
            CHECK(kf_cuda_stream_sync(&DEV, S, NULL, err));
            v[r] = dt * 1e6 / (iters * (double)small_launches);
        }
        launch_us = median(v, 9);
        fprintf(stderr, "host launch overhead %.2f us per kernel (%zu kernels per run)\n",
                launch_us, small_launches);
        kf_cuda_exec_destroy(ex);
        kf_plan_destroy(plan);
        kf_graph_destroy(g);
    }

    /* Peers, in the same run. */
    char peers_json[8192] = "null";
    /* The whole --cases list: cut at 200 characters, a long list lost its
     * last cases' peers (swiglu, in a run of 13 GEMM cases). */
    char peer_args[1400];
    snprintf(peer_args, sizeof peer_args, "%s%s%s%.1200s", g_quick ? " --rows 8192" : "",
             g_no_torch_compile ? " --no-compile" : "", g_cases ? " --cases " : "",
             g_cases ? g_cases : "");
    run_peers(peers, peer_args, peers_json, sizeof peers_json);

    /* JSON. */
    char path[512];
    FILE *outs[2];
    open_results(commit, "", out_path, path, sizeof path, outs);
    for (int o = 0; o < 2; o++) {
        FILE *f = outs[o];
        if (!f)
            continue;
        json_head(f, NULL, commit);
        fprintf(f, "  \"ceilings\": {\"copy_GBps\": %.1f, \"bf16_gemm_TFLOPs\": %.1f, "
                   "\"gemm_shape\": [%lld, %lld, %lld]},\n",
                copy_gbs, gemm_tflops, (long long)GM, (long long)GM, (long long)GM);
        fprintf(f, "  \"reference\": {\"sm_copy_kernel_GBps\": %.1f, "
                   "\"sm_copy_kernel_fraction_of_copy\": %.4f, \"sm_copy_kernels_GBps\": "
                   "{\"%s\": %.1f, \"%s\": %.1f, \"%s\": %.1f}},\n",
                copyk_gbs, copy_gbs > 0 ? copyk_gbs / copy_gbs : 0.0, copyk_name[0],
                copyk_each[0], copyk_name[1], copyk_each[1], copyk_name[2], copyk_each[2]);
        fprintf(f, "  \"cases\": {\n");
        int n_run = 0, k_run = 0;
        for (int i = 0; i < n_cases; i++)
            n_run += case_on(cases[i].name);
        for (int i = 0; i < n_cases; i++) {
            bcase *c = &cases[i];
            if (!case_on(c->name))
                continue; /* not run (--cases) */
            k_run++;
            fprintf(f,
                    "    \"%s\": {\"ms\": %.4f, \"floor_ms\": %.4f, \"fraction_of_roofline\": "
                    "%.4f, \"GBps\": %.1f, \"TFLOPs\": %.1f, \"launches\": %zu, ",
                    c->name, c->ms, c->floor_ms, c->floor_ms / c->ms,
                    c->bytes / (c->ms * 1e-3) / 1e9, c->flops / (c->ms * 1e-3) / 1e12,
                    c->launches);
            const sustain_res *sr = sustain_of(c);
            if (sr)
                fprintf(f,
                        "\"short_ms\": %.4f, \"sustained_ms\": %.4f, \"sustain_window\": "
                        "[%.3f, %.3f], ",
                        sr->short_ms, sr->sustained_ms, sr->t0, sr->t1);
            fprintf(f, "\"where\": ");
            json_str(f, c->report);
            fprintf(f, "}%s\n", k_run < n_run ? "," : "");
        }
        fprintf(f, "  },\n  \"compile\": {");
        for (int i = 0; i < 4; i++)
            fprintf(f, "\"%s\": {\"cold_ms_per_kernel\": %.2f, \"warm_cached_load_ms\": %.3f}%s",
                    cnames[i], cold_ms[i], warm_ms[i], i < 3 ? ", " : "");
        fprintf(f, ", \"driver_compute_cache\": %s},\n", g_compute_cache ? "true" : "false");
        fprintf(f, "  \"host_launch_overhead_us_per_kernel\": %.3f,\n", launch_us);
        abba_json(f);
        fprintf(f, "  \"peers\": %s\n}\n", peers_json);
        fclose(f);
    }
    fprintf(stderr, "gpu_bench: wrote %s\n", path);
    kf_ctx_destroy(ctx);
    kf_ctx_destroy(ctx_gen);
    kf_ctx_destroy(ctx_lt);
    kf_cuda_event_destroy(&DEV, E0);
    kf_cuda_event_destroy(&DEV, E1);
    kf_cuda_stream_destroy(&DEV, S);
    kf_cuda_device_close(&DEV);
    kf_ctx_destroy(ctx0);
    return 0;
}
