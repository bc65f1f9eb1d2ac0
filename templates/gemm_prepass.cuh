/* ---- gemm_prepass.cuh: a GEMM's norm pre-passes in one launch -----------
 *
 * A norm prologue folded into B (gemm_fold.cuh has the algebra) needs, before
 * the GEMM, the row statistics of A (mean and rstd, or the RMS rstd) and W =
 * diag(g) B with a LayerNorm's column sums c, d of each B (one B a GEMM; a
 * sibling set's every member, a SwiGLU pair's two). Apart they took a launch
 * each, every one too small to fill the GPU: GPT-2-medium's Q/K/V set ran the
 * statistics' row kernel and then three fold kernels of 32 blocks each (1024
 * columns of 32), one after the other. Here they are the work items of one
 * grid-stride loop: each job's fold items (cut as gemm_fold.cuh cuts them,
 * with the same sums in the same order: the same bits), then the statistics'
 * (a warp a row, KF_PWARPS rows an item). No item waits for another.
 *
 * The statistics: a warp per row of KF_SL contiguous values, read twice (the
 * sum; then the squares about the mean, the second read from L1/L2), in f32,
 * KF_SVEC values a 16-byte load where the row's pointer allows; rstd = 1 /
 * sqrt(M2 / L + eps) (LayerNorm), 1 / sqrt(sum x^2 / L + eps) (RMSNorm), as
 * the row kernel defines them (rowwise.cuh), but by rsqrtf and a product with
 * 1 / L (a few ulp of f32, far inside a bf16 product's error): the exact
 * division and square root call slow paths whose calling convention spilled
 * the fold loop's registers (a stack frame). A statistic that overflows f32
 * (bf16 and f32 rows reach 2^128) is taken again on the row scaled by 2^-e,
 * e the exponent of its largest finite magnitude, as rowwise.cuh's rescue.
 *
 * The generator defines before this: KF_KERNEL, KF_PARAMS, KF_ARGS, KF_BLOCK,
 * KF_PJOBS, KF_PSTATS, KF_PITEMS (every item), KF_PFOLD_ITEMS (the folds'),
 * kf_pj<J> for J < KF_PJOBS (K, N, KS, ITEMS, KMAJOR, LN, BIAS; b(k, n), g(k),
 * beta(k), bias(n): the GEMM's bias d carries, rnd(v), w(), cd()),
 * KF_PRE_ITEM(it, sm) (the dispatch), and
 * with KF_PSTATS: KF_SL, KF_SROWS, KF_SNS (statistics a row), KF_SVEC,
 * KF_SI_MEAN / KF_SI_RSTD / KF_SI_RMS (the index of each in a row's packed
 * statistics, -1 where not written), KF_SEPS, kf_srow(r) (row r's first
 * value), kf_sout() (the packed statistics, f32).
 */

#define KF_PWARPS (KF_BLOCK / 32)
#if KF_PSTATS
#define KF_SINV (1.0f / (float)KF_SL)
#endif

/* A fold item's shared memory: g and beta of a chunk of K (KF_PKC values,
 * each loaded once a block), and the N-major form's per-warp column sums. */
#define KF_PKC KF_BLOCK
struct kf_psmem {
    float g[KF_PKC], beta[KF_PKC];
    float cs[KF_PWARPS][32], ds[KF_PWARPS][32];
};

/* B's elements in flight a thread: KF_PU loaded before any W is stored
 * (the compiler's own schedule kept one or two ahead, with g and beta loaded
 * beside each element); g and beta come from shared memory, once a block, so
 * the batch holds only B's values (no spill at 64 registers a thread; 16
 * with g and beta in registers spilled). H200, processes old new new old old
 * new against 1bb5474: ln_qkv's generated side 0.1662 -> 0.1644 ms, GPT-2's
 * Q/K/V set 0.1728 -> 0.1713; the pre-pass kernel alone under ncu (base
 * clocks, one launch) did not change past its noise (18.0-18.8 us): what
 * bounds it is the statistics' rows, a DRAM round trip a row a warp, and the
 * SMs idle 30% of its time (ncu: 19.6k active of 28k cycles), the blocks
 * that take a fold item taking a statistics item less. An L2 prefetch of a
 * warp's next rows (a bulk prefetch an item or two ahead) made it slower
 * (18.6 -> 21.2 us). */
#define KF_PU 16

/* A flat fold item (kf_pj<J>::FLAT: an RMSNorm's fold, no column sums, of a
 * contiguous 2-byte B whose major dimension is a multiple of 8): elements
 * [it * KF_PFLAT, ..) of B in memory order, KF_PFLAT_U runs of 8 (16 bytes)
 * a thread, all loaded before any is stored; the 8 of a run share their k
 * (N-major) or are k..k + 7 (K-major). W = g[k] B, rounded as the chunked
 * items round it: the same bits. With B's base off 16 bytes, element by
 * element. Cut into chunks of 32 columns and slices of 256 k, LLaMA-7B's
 * Q/K/V folds (4096 x 4096, N-major, 2-byte loads a lane) ran at 55% of
 * DRAM bandwidth (H100, ncu, the folds apart: 26 us each). */
#define KF_PFLAT_U 4
#define KF_PFLAT (KF_BLOCK * 8 * KF_PFLAT_U)
__device__ __forceinline__ float kf_pflat_in(unsigned short h, bool bf16) {
    return bf16 ? kf_bf16_to_f32(h) : kf_f16_to_f32(h);
}
__device__ __forceinline__ unsigned short kf_pflat_out(float v, bool bf16) {
    return bf16 ? kf_f32_to_bf16(v) : kf_f32_to_f16(v);
}
template <int J> __device__ __forceinline__ void kf_pfold_flat(long long it, KF_PARAMS) {
    typedef kf_pj<J> F;
    constexpr long long ALL = F::K * F::N;
    static_assert(F::ITEMS == (ALL + KF_PFLAT - 1) / KF_PFLAT, "the generator's flat items");
    const long long e0 = it * KF_PFLAT + 8 * (long long)threadIdx.x;
    const auto *bp = F::bp(KF_ARGS);
    auto *wp = F::w(KF_ARGS);
    const bool al =
        ((reinterpret_cast<unsigned long long>(bp) | reinterpret_cast<unsigned long long>(wp)) &
         15ull) == 0;
    if (al) {
        uint4 v[KF_PFLAT_U];
#pragma unroll
        for (int u = 0; u < KF_PFLAT_U; u++) {
            const long long e = e0 + (long long)u * KF_BLOCK * 8;
            if (e < ALL) /* (ALL is a multiple of 8: a run is whole) */
                v[u] = *reinterpret_cast<const uint4 *>(bp + e);
        }
#pragma unroll
        for (int u = 0; u < KF_PFLAT_U; u++) {
            const long long e = e0 + (long long)u * KF_BLOCK * 8;
            if (e >= ALL)
                continue;
            unsigned x[4] = {v[u].x, v[u].y, v[u].z, v[u].w}, y[4];
            const long long k0 = F::KMAJOR ? e % F::K : e / F::N;
            /* the run's gammas: one (N-major), or 8 (K-major: one load where
             * gamma is contiguous, of B's dtype, 16-byte aligned) */
            float gs[8];
            if (F::GVEC && (reinterpret_cast<unsigned long long>(F::gp(KF_ARGS) + k0) & 15ull) == 0) {
                const uint4 gw = *reinterpret_cast<const uint4 *>(F::gp(KF_ARGS) + k0);
                const unsigned gx[4] = {gw.x, gw.y, gw.z, gw.w};
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    gs[2 * q] = kf_pflat_in((unsigned short)(gx[q] & 0xffffu), F::BF16);
                    gs[2 * q + 1] = kf_pflat_in((unsigned short)(gx[q] >> 16), F::BF16);
                }
            } else {
#pragma unroll
                for (int i = 0; i < 8; i++)
                    gs[i] = F::KMAJOR || i == 0 ? F::g(k0 + (F::KMAJOR ? i : 0), KF_ARGS) : gs[0];
            }
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float glo = gs[2 * q], ghi = gs[2 * q + 1];
                const float lo = kf_pflat_in((unsigned short)(x[q] & 0xffffu), F::BF16);
                const float hi = kf_pflat_in((unsigned short)(x[q] >> 16), F::BF16);
                y[q] = (unsigned)kf_pflat_out(F::rnd(glo * lo), F::BF16) |
                       ((unsigned)kf_pflat_out(F::rnd(ghi * hi), F::BF16) << 16);
            }
            *reinterpret_cast<uint4 *>(wp + e) = make_uint4(y[0], y[1], y[2], y[3]);
        }
    } else {
        for (int u = 0; u < KF_PFLAT_U; u++)
            for (int i = 0; i < 8; i++) {
                const long long e = e0 + (long long)u * KF_BLOCK * 8 + i;
                if (e < ALL) {
                    const long long k = F::KMAJOR ? e % F::K : e / F::N;
                    kf_st(wp + e, F::rnd(F::g(k, KF_ARGS) * (float)kf_ld(bp + e)));
                }
            }
    }
}

/* Fold item `it` of job J: a chunk of columns and a slice of K, cut as
 * gemm_fold.cuh cuts them, the sums in the same order (k ascending a
 * thread: KF_PKC is a multiple of both strides), so the same bits. k and
 * W's index in 32 bits (the generator takes K x N < 2^31: 64-bit indices
 * spilled a register at 64 a thread). Every thread of the block calls it
 * (it synchronizes the block). */
template <int J> __device__ __forceinline__ void kf_pfold(long long it, kf_psmem &sm, KF_PARAMS) {
    typedef kf_pj<J> F;
    if constexpr (F::FLAT) {
        (void)sm;
        kf_pfold_flat<J>(it, KF_ARGS);
        return;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    constexpr long long SLICES = (F::K + F::KS - 1) / F::KS;
    const long long chunk = it / SLICES;
    const int k0 = (int)((it % SLICES) * F::KS);
    const int k1 = k0 + (int)F::KS < (int)F::K ? k0 + (int)F::KS : (int)F::K;
    /* K-major B: warp = column, the lanes take every 32nd k; N-major: lane =
     * column, the warps take every KF_PWARPS-th k */
    constexpr int STRIDE = F::KMAJOR ? 32 : KF_PWARPS;
    const int j0 = F::KMAJOR ? lane : warp;
    const long long n = F::KMAJOR ? chunk * KF_PWARPS + warp : chunk * 32 + lane;
    float c = 0.0f, d = 0.0f;
    for (int kc = k0; kc < k1; kc += KF_PKC) {
        const int kn = k1 - kc < KF_PKC ? k1 - kc : KF_PKC;
        __syncthreads(); /* the chunk before is read */
        if ((int)threadIdx.x < kn) {
            sm.g[threadIdx.x] = F::g(kc + (int)threadIdx.x, KF_ARGS);
            if constexpr (F::LN)
                sm.beta[threadIdx.x] = F::beta(kc + (int)threadIdx.x, KF_ARGS);
        }
        __syncthreads();
        if (n < F::N) {
            for (int i0 = 0; j0 + STRIDE * i0 < kn; i0 += KF_PU) {
                float b[KF_PU];
#pragma unroll
                for (int u = 0; u < KF_PU; u++) {
                    const int j = j0 + STRIDE * (i0 + u);
                    b[u] = j < kn ? F::b(kc + j, n, KF_ARGS) : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < KF_PU; u++) {
                    const int j = j0 + STRIDE * (i0 + u);
                    if (j < kn) {
                        const int k = kc + j;
                        const float w = F::rnd(sm.g[j] * b[u]);
                        kf_st(F::w(KF_ARGS) +
                                  (F::KMAJOR ? (int)n * (int)F::K + k : k * (int)F::N + (int)n),
                              w);
                        c += w;
                        if constexpr (F::LN)
                            d += sm.beta[j] * b[u];
                    }
                }
            }
        }
    }
    if constexpr (F::LN) {
        if constexpr (F::KMAJOR) {
#pragma unroll
            for (int o = 16; o > 0; o /= 2) {
                c += __shfl_xor_sync(0xffffffffu, c, o);
                d += __shfl_xor_sync(0xffffffffu, d, o);
            }
            if (lane == 0 && n < F::N) {
                F::cd(KF_ARGS)[n] = c;
                F::cd(KF_ARGS)[F::N + n] = F::BIAS ? d + F::bias(n, KF_ARGS) : d;
            }
        } else {
            sm.cs[warp][lane] = c;
            sm.ds[warp][lane] = d;
            __syncthreads();
            if (warp == 0 && n < F::N) {
                float cc = 0.0f, dd = 0.0f;
#pragma unroll
                for (int w = 0; w < KF_PWARPS; w++) {
                    cc += sm.cs[w][lane];
                    dd += sm.ds[w][lane];
                }
                F::cd(KF_ARGS)[n] = cc;
                F::cd(KF_ARGS)[F::N + n] = F::BIAS ? dd + F::bias(n, KF_ARGS) : dd;
            }
        }
    }
    (void)c;
    (void)d;
}

#if KF_PSTATS
/* 1 / sqrt(ss / L + eps) for ss a sum of squares of the row scaled by 2^-e,
 * in the row's units; 0 where the scaled denominator is 0 (rowwise.cuh). */
__device__ __forceinline__ float kf_prstd(float ss, int e) {
    const float t = ss * KF_SINV + KF_SEPS * exp2f((float)(-2 * e));
    return e != 0 && t == 0.0f ? 0.0f : rsqrtf(t) * exp2f((float)-e);
}

/* The statistics of row r, by lane `lane` of its warp: V values a load, the
 * loads of KF_SU steps issued before their sums. Written so because the
 * kernel read A at 61% of DRAM bandwidth (ncu, H100) with one load and its
 * sums a step; it changed nothing (21.15 -> 21.06 us for GPT-2's Q/K/V,
 * 856c4d1): what bounds the kernel is likelier its fold items (a 32-column
 * chunk over all of K, 8.6 us each, on 96 of 132 SMs there). */
#define KF_SU 4
template <int V> __device__ __forceinline__ void kf_prow(long long r, int lane, KF_PARAMS) {
    const auto *x = kf_srow(r, KF_ARGS);
    constexpr int IT = (int)((KF_SL + 32 * V - 1) / (32 * V)); /* steps of 32 x V values */
    float s = 0.0f, q = 0.0f, m2 = 0.0f;
    for (int t0 = 0; t0 < IT; t0 += KF_SU) {
        float v[KF_SU][V];
#pragma unroll
        for (int u = 0; u < KF_SU; u++) {
            const long long i = (long long)lane * V + (long long)(t0 + u) * 32 * V;
            if (t0 + u < IT && i < KF_SL) {
                kf_ldv<V>(x + i, v[u]);
            } else {
#pragma unroll
                for (int k = 0; k < V; k++)
                    v[u][k] = 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < KF_SU; u++)
#pragma unroll
            for (int k = 0; k < V; k++) {
                s += v[u][k];
                q += v[u][k] * v[u][k];
            }
    }
    s = kf_warp_sum(s);
    const float mean = s * KF_SINV;
    if (KF_SI_RSTD >= 0) { /* the squares about the mean, the row again (L1) */
        for (int t0 = 0; t0 < IT; t0 += KF_SU) {
            float v[KF_SU][V];
            bool in[KF_SU];
#pragma unroll
            for (int u = 0; u < KF_SU; u++) {
                const long long i = (long long)lane * V + (long long)(t0 + u) * 32 * V;
                in[u] = t0 + u < IT && i < KF_SL;
                if (in[u])
                    kf_ldv<V>(x + i, v[u]);
            }
#pragma unroll
            for (int u = 0; u < KF_SU; u++)
#pragma unroll
                for (int k = 0; k < V; k++)
                    if (in[u])
                        m2 += (v[u][k] - mean) * (v[u][k] - mean);
        }
        m2 = kf_warp_sum(m2);
    }
    if (KF_SI_RMS >= 0)
        q = kf_warp_sum(q);
    float o_mean = mean, o_rstd = rsqrtf(m2 * KF_SINV + KF_SEPS),
          o_rms = rsqrtf(q * KF_SINV + KF_SEPS);
    const bool over = ((KF_SI_MEAN >= 0 || KF_SI_RSTD >= 0) && !isfinite(s)) ||
                      (KF_SI_RSTD >= 0 && !isfinite(m2)) || (KF_SI_RMS >= 0 && !isfinite(q));
    if (over) { /* uniform over the warp: the tested values are reduced */
        float am = 0.0f;
        for (long long i = lane; i < KF_SL; i += 32) {
            const float v = kf_ld(x + i);
            am = fabsf(v) > am ? fabsf(v) : am; /* NaN ignored */
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2) {
            const float t = __shfl_xor_sync(0xffffffffu, am, o);
            am = t > am ? t : am;
        }
        /* frexpf's exponent of a normal am (a subnormal am never overflows;
         * a NaN row comes out NaN however it is scaled); by its bits, as
         * frexpf's out-parameter took a stack frame */
        int e = 0;
        if (am > 0.0f && am <= 3.4028234663852886e38f)
            e = (int)((__float_as_uint(am) >> 23) & 0xffu) - 126;
        const float sc = exp2f((float)-e);
        float s2 = 0.0f, q2 = 0.0f, d2 = 0.0f;
        for (long long i = lane; i < KF_SL; i += 32) {
            const float v = kf_ld(x + i) * sc;
            s2 += v;
            q2 += v * v;
        }
        s2 = kf_warp_sum(s2);
        q2 = kf_warp_sum(q2);
        const float mn = s2 * KF_SINV;
        for (long long i = lane; i < KF_SL; i += 32) {
            const float v = kf_ld(x + i) * sc;
            d2 += (v - mn) * (v - mn);
        }
        d2 = kf_warp_sum(d2);
        o_mean = mn * exp2f((float)e);
        o_rstd = kf_prstd(d2, e);
        o_rms = kf_prstd(q2, e);
    }
    if (lane == 0) {
        float *o = kf_sout(KF_ARGS) + r * KF_SNS;
        if (KF_SI_MEAN >= 0)
            o[KF_SI_MEAN] = o_mean;
        if (KF_SI_RSTD >= 0)
            o[KF_SI_RSTD] = o_rstd;
        if (KF_SI_RMS >= 0)
            o[KF_SI_RMS] = o_rms;
    }
}

/* Statistics item `it`: rows it * KF_PWARPS .., a warp each. */
__device__ __forceinline__ void kf_pstats(long long it, KF_PARAMS) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long long r = it * KF_PWARPS + warp;
    if (r >= KF_SROWS)
        return;
    if (KF_SVEC > 1 && (reinterpret_cast<unsigned long long>(kf_srow(r, KF_ARGS)) & 15ull) == 0)
        kf_prow<KF_SVEC>(r, lane, KF_ARGS);
    else
        kf_prow<1>(r, lane, KF_ARGS);
}
#endif

/* one block an SM (the recipe's launch rule): 64 registers a thread */
extern "C" __global__ void __launch_bounds__(KF_BLOCK, 1) KF_KERNEL(KF_PARAMS) {
    KF_SETUP();
    __shared__ kf_psmem sm;
    for (long long it = blockIdx.x; it < KF_PITEMS; it += gridDim.x) {
        KF_PRE_ITEM(it, sm)
    }
}
