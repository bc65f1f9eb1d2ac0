/* ---- gemm_fold.cuh: a GEMM's norm prologue folded into its B -------------
 *
 * A LayerNorm / RMSNorm of A's rows before a GEMM is, per element of the
 * product, n[m, k] = (x[m, k] - mu[m]) * r[m] * g[k] + beta[k] (RMSNorm: no
 * mu, no beta), so
 *
 *   sum_k n[m, k] B[k, n] = r[m] * (sum_k x[m, k] W[k, n] - mu[m] * c[n]) + d[n]
 *
 * with W = diag(g) B, c[n] = sum_k W[k, n] and d[n] = sum_k beta[k] B[k, n].
 * This kernel writes W (rounded to B's dtype: the MMA's operand) and, for a
 * LayerNorm, c (from the rounded W, so the subtraction matches the product
 * the MMA forms) and d, both f32. The GEMM then runs on x itself, a plain
 * main loop, and its epilogue applies r, mu, c and d to the accumulators
 * (kf_fold, cg_gemm_fold.c): the normalization costs one pass over B, K x N,
 * where normalizing A's tiles in the ring cost M x K arithmetic once per
 * column tile, and writing A normalized cost a pass over M x K both ways.
 *
 * One block of KF_BLOCK threads (KF_FWARPS warps) per item of a grid-stride loop; an item
 * is a chunk of columns and a slice of K (the slices split K only where no
 * column sums are taken: a LayerNorm's item is all of K, so its sums are a
 * block's, in a fixed order, and the same bits every run):
 *   N-major B (n contiguous, KF_FKMAJOR 0): lane = column (32 a chunk), the
 *     warps take every KF_FWARPS-th k of the slice; their sums meet in shared
 *     memory (a LayerNorm's block is 32 warps: all of K is one item);
 *   K-major B (k contiguous, KF_FKMAJOR 1): warp = column (KF_FWARPS a chunk), the
 *     lanes take every 32nd k; their sums meet by shuffles.
 * W keeps B's major: [K, N] or [N, K], contiguous.
 *
 * The generator defines before this: KF_KERNEL, KF_PARAMS, KF_ARGS, KF_FK,
 * KF_FN, KF_FKS (k of a slice), KF_FKMAJOR, KF_FLN, kf_fb(k, n), kf_fg(k),
 * kf_fbeta(k) (floats), KF_FW (W's pointer), kf_fround (rounding to W's
 * dtype), KF_FCD (float *: c[0, N) then d[0, N); with KF_FLN), KF_FBIAS (1:
 * d[n] takes kf_fbias(n) too, the bias the GEMM's epilogue then skips).
 */
#ifndef KF_FBIAS
#define KF_FBIAS 0
#endif
#if KF_FBIAS
#define KF_FD(d, n) ((d) + kf_fbias(n, KF_ARGS))
#else
#define KF_FD(d, n) (d)
#endif

#define KF_FSLICES ((KF_FK + KF_FKS - 1) / KF_FKS)
#define KF_FWARPS (KF_BLOCK / 32)
#if KF_FKMAJOR
#define KF_FCOLS KF_FWARPS
#else
#define KF_FCOLS 32
#endif
#define KF_FCHUNKS ((KF_FN + KF_FCOLS - 1) / KF_FCOLS)

/* g and beta of a chunk of KF_FKC k's in shared memory (each loaded once a
 * block), and KF_FU elements of B loaded before any W is stored: one or two
 * ahead (the compiler's schedule, g and beta loaded beside each) the loop ran
 * at about a memory latency an element (gemm_prepass.cuh's items, the same
 * loop, measured so). The sums keep their order (k ascending a thread; KF_FKC
 * is a multiple of both strides): the same bits. */
#define KF_FKC KF_BLOCK
#define KF_FU 16

extern "C" __global__ void __launch_bounds__(KF_BLOCK) KF_KERNEL(KF_PARAMS) {
    KF_SETUP();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __shared__ float gs[KF_FKC];
#if KF_FLN
    __shared__ float bs[KF_FKC];
#if !KF_FKMAJOR
    __shared__ float cs[KF_FWARPS][32], ds[KF_FWARPS][32];
#endif
#endif
    /* K-major B: warp = column, the lanes take every 32nd k; N-major: lane =
     * column, the warps take every KF_FWARPS-th k */
#if KF_FKMAJOR
    constexpr long long STRIDE = 32;
    const long long j0 = lane;
#else
    constexpr long long STRIDE = KF_FWARPS;
    const long long j0 = warp;
#endif
    for (long long it = blockIdx.x; it < (long long)KF_FCHUNKS * KF_FSLICES; it += gridDim.x) {
        const long long chunk = it / KF_FSLICES, k0 = (it % KF_FSLICES) * KF_FKS;
        const long long k1 = k0 + KF_FKS < KF_FK ? k0 + KF_FKS : KF_FK;
#if KF_FKMAJOR
        const long long n = chunk * KF_FCOLS + warp;
#else
        const long long n = chunk * KF_FCOLS + lane;
#endif
        float c = 0.0f, d = 0.0f;
        (void)d;
        for (long long kc = k0; kc < k1; kc += KF_FKC) {
            const long long kn = k1 - kc < KF_FKC ? k1 - kc : KF_FKC;
            __syncthreads(); /* the chunk before is read */
            if ((long long)threadIdx.x < kn) {
                gs[threadIdx.x] = kf_fg(kc + threadIdx.x, KF_ARGS);
#if KF_FLN
                bs[threadIdx.x] = kf_fbeta(kc + threadIdx.x, KF_ARGS);
#endif
            }
            __syncthreads();
            if (n < KF_FN) {
                for (long long i0 = 0; j0 + STRIDE * i0 < kn; i0 += KF_FU) {
                    float b[KF_FU];
#pragma unroll
                    for (int u = 0; u < KF_FU; u++) {
                        const long long j = j0 + STRIDE * (i0 + u);
                        b[u] = j < kn ? kf_fb(kc + j, n, KF_ARGS) : 0.0f;
                    }
#pragma unroll
                    for (int u = 0; u < KF_FU; u++) {
                        const long long j = j0 + STRIDE * (i0 + u);
                        if (j < kn) {
                            const long long k = kc + j;
                            const float w = kf_fround(gs[j] * b[u]);
#if KF_FKMAJOR
                            kf_st(KF_FW + n * KF_FK + k, w);
#else
                            kf_st(KF_FW + k * KF_FN + n, w);
#endif
                            c += w;
#if KF_FLN
                            d += bs[j] * b[u];
#endif
                        }
                    }
                }
            }
        }
#if KF_FLN
#if KF_FKMAJOR
#pragma unroll
        for (int o = 16; o > 0; o /= 2) {
            c += __shfl_xor_sync(0xffffffffu, c, o);
            d += __shfl_xor_sync(0xffffffffu, d, o);
        }
        if (lane == 0 && n < KF_FN) {
            KF_FCD[n] = c;
            KF_FCD[KF_FN + n] = KF_FD(d, n);
        }
#else
        cs[warp][lane] = c;
        ds[warp][lane] = d;
        __syncthreads();
        if (warp == 0 && n < KF_FN) {
            float cc = 0.0f, dd = 0.0f;
#pragma unroll
            for (int w = 0; w < KF_FWARPS; w++) {
                cc += cs[w][lane];
                dd += ds[w][lane];
            }
            KF_FCD[n] = cc;
            KF_FCD[KF_FN + n] = KF_FD(dd, n);
        }
        __syncthreads();
#endif
#endif
        (void)c;
    }
}
