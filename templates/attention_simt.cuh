/*
 * attention_simt.cuh -- the fused attention kernel without tensor cores
 * (FlashAttention-2 structure, FFMA): O = softmax(score(Q.K^T)) . V for the
 * groups the mma.sync and wgmma kernels refuse -- f32 Q/K/V (f32 arithmetic
 * throughout, no TF32), and bf16/f16 ones whose head dims are not 64 or 128
 * (any of 1..256, the Q.K^T head dim and V's apart). Inputs are converted to
 * f32 as they leave shared memory; every product and sum is f32. The
 * generator (codegen/cuda/cg_attention_simt.c) puts the group's score
 * expression, its operands' strides and the problem size in front of this
 * text, with the same score, mask and block-sparse functions the mma.sync
 * kernel gets (cg_attention.c).
 *
 *   work item = (query tile of KF_BR rows, one batch x head), head-major,
 *     the last query tiles of a head first, grid-stride (templates/
 *     attention.cuh's order);
 *   a block = KF_BR / 16 warps; a warp owns 16 query rows, a thread 4 of
 *     them (ty = tid / 8) and the keys tx, tx + 8, ... of each key tile
 *     (tx = tid % 8): the 8 lanes of a row group share its rows, so a row's
 *     max and sum are three shuffles;
 *   Q (one tile), K and V (KF_STAGES buffers of KF_BC keys each) sit in
 *     shared memory in their own dtype, copied by cp.async in chunks of
 *     KF_CP* bytes where the operand's strides and base allow (rows past the
 *     end zero-filled), by plain loads otherwise; with two stages the next
 *     tile's K and V copies are in flight while this one is used;
 *   S = Q.K^T: per 4 head-dim elements a thread reads 4 Q rows and each of
 *     its keys as 16 (f32) or 8 (bf16/f16) bytes and does 16 FFMAs a key;
 *     row strides of (a multiple of 8) + 4 elements keep the 8 keys of a
 *     quarter warp in different banks;
 *   the score expression, the tile skipping and the edge tests are the
 *     mma.sync kernel's (kf_attn_tile_edge: causal / sliding-window tiles
 *     outside the mask never visited, element tests only on the diagonal
 *     tiles and the keys' ragged end, block-sparse keep maps);
 *   online softmax in f32 registers (m, the row max; l, this lane's part of
 *     the row sum, summed over the 8 lanes at the end); P goes through a
 *     per-warp region of shared memory (the warp's own rows) to
 *     O += P.V, O in f32 registers (4 rows x KF_NDV columns tx + 8c a
 *     thread), divided by l and rounded once as it is stored.
 *
 * All-masked rows: m stays -inf, every p is 0 and l is 0, so the row is
 * 0/0 = NaN, the reference's softmax over a row of -inf.
 *
 * Hooks (defined by the generator before this text):
 *   KF_DK, KF_DKP          Q.K^T head dim, rounded up to 4 (columns past KF_DK are 0)
 *   KF_DV, KF_NDV          V's head dim (O's row), columns a thread: ceil(KF_DV / 8)
 *   KF_QS, KF_KS, KF_VS    shared-memory row strides (elements)
 *   KF_BR, KF_BC, KF_STAGES, KF_MINB, KF_SQ, KF_SKV, KF_BH
 *   KF_QT, KF_KT, KF_VT, KF_OT  storage types
 *   KF_Q, KF_K, KF_V, KF_O the params (with a view's offset); KF_Q_RS, KF_Q_CS,
 *                          KF_K_RS, KF_K_CS, KF_V_RS, KF_V_CS row / column strides
 *   KF_CPQ, KF_CPK, KF_CPV cp.async chunk bytes (16, 8, 4; 0: plain loads)
 *   KF_MASK_SKIP, KF_WINDOW, kf_bh_offsets, kf_o_offset, kf_score_full /
 *   kf_score_inner / kf_score_fill, kf_bs_*, KF_LSE (optional)
 */
#define KF_NW (KF_BR / 16)
#define KF_THREADS (KF_NW * 32)
#define KF_NQT ((KF_SQ + KF_BR - 1) / KF_BR)
#define KF_NJ (KF_BC / 8)
#define KF_PS (KF_BC + 4)
#define KF_LOG2E 1.4426950408889634f

static_assert(KF_THREADS == KF_BLOCK, "the block is the kernel's warps");
static_assert(KF_BR % 16 == 0 && KF_BC % 8 == 0 && KF_DKP % 4 == 0, "tile shapes");
static_assert(KF_QS % 4 == 0 && KF_KS % 4 == 0 && KF_DKP <= KF_QS && KF_DKP <= KF_KS,
              "rows of whole 4-element groups");

/* Shared memory: Q [KF_BR][KF_QS], K [KF_STAGES][KF_BC][KF_KS],
 * V [KF_STAGES][KF_BC][KF_VS], P [KF_BR][KF_PS] f32, each 16-byte aligned. */
#define KF_AL16(x) (((x) + 15) / 16 * 16)
#define KF_OFF_K KF_AL16(KF_BR * KF_QS * (int)sizeof(KF_QT))
#define KF_K_BYTES KF_AL16(KF_BC * KF_KS * (int)sizeof(KF_KT))
#define KF_V_BYTES KF_AL16(KF_BC * KF_VS * (int)sizeof(KF_VT))
#define KF_OFF_V (KF_OFF_K + KF_STAGES * KF_K_BYTES)
#define KF_OFF_P (KF_OFF_V + KF_STAGES * KF_V_BYTES)
#define KF_SMEM_BYTES (KF_OFF_P + KF_BR * KF_PS * 4)

__device__ __forceinline__ float4 kf_s4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
__device__ __forceinline__ float4 kf_s4(const kf_bf16 *p) {
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                       __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
}
__device__ __forceinline__ float4 kf_s4(const kf_f16 *p) {
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    return make_float4(kf_f16_to_f32((unsigned short)(u.x & 0xffffu)),
                       kf_f16_to_f32((unsigned short)(u.x >> 16)),
                       kf_f16_to_f32((unsigned short)(u.y & 0xffffu)),
                       kf_f16_to_f32((unsigned short)(u.y >> 16)));
}

/* One element into shared memory, or a zero (`in` false). */
__device__ __forceinline__ void kf_put(float *d, const float *s, bool in) { *d = in ? *s : 0.0f; }
__device__ __forceinline__ void kf_put(kf_bf16 *d, const kf_bf16 *s, bool in) {
    d->x = in ? s->x : (unsigned short)0;
}
__device__ __forceinline__ void kf_put(kf_f16 *d, const kf_f16 *s, bool in) {
    d->x = in ? s->x : (unsigned short)0;
}

/* ROWS rows of DLEN elements from g (row stride rs, column stride cs) into
 * sm (row stride SS); rows at or past `valid` are zero. With CB > 0 and `al`
 * (the strides allow CB-byte chunks and the base is aligned) by cp.async,
 * else plain loads and stores. Columns past DLEN are never written. */
template <typename T, int ROWS, int DLEN, int SS, int CB>
__device__ __forceinline__ void kf_simt_tile(T *sm, const T *g, long long rs, long long cs, int valid,
                                             bool al, int tid) {
    if (CB > 0 && al) {
        constexpr int CE = CB > 0 ? CB / (int)sizeof(T) : 1, NCH = DLEN / CE;
        static_assert(CB == 0 || DLEN % CE == 0, "whole chunks a row");
        const unsigned sb = (unsigned)__cvta_generic_to_shared(sm);
        for (int i = tid; i < ROWS * NCH; i += KF_THREADS) {
            const int r = i / NCH, ch = i % NCH;
            const bool in = r < valid;
            const T *s = g + (in ? (long long)r * rs : 0LL) + ch * CE;
            const unsigned d = sb + (unsigned)((r * SS + ch * CE) * (int)sizeof(T));
            asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(d), "l"(s), "n"(CB),
                         "r"(in ? CB : 0)
                         : "memory");
        }
    } else {
        for (int i = tid; i < ROWS * DLEN; i += KF_THREADS) {
            const int r = i / DLEN, c = i % DLEN;
            const bool in = r < valid;
            kf_put(sm + r * SS + c, g + (in ? (long long)r * rs + c * cs : 0LL), in);
        }
    }
    (void)cs;
}

__device__ __forceinline__ float kf_ex2s(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

extern "C" __global__ void __launch_bounds__(KF_THREADS, KF_MINB) KF_KERNEL(KF_PARAMS) {
    KF_SETUP();
    const int tid = threadIdx.x, warp = tid >> 5, ty = tid >> 3, tx = tid & 7;
    KF_QT *const sQ = reinterpret_cast<KF_QT *>(kf_dyn_smem);
    float *const sP = reinterpret_cast<float *>(kf_dyn_smem + KF_OFF_P);
    const bool alq = KF_CPQ > 0 && kf_aligned(KF_Q, KF_CPQ > 0 ? KF_CPQ : 1);
    const bool alk = KF_CPK > 0 && kf_aligned(KF_K, KF_CPK > 0 ? KF_CPK : 1);
    const bool alv = KF_CPV > 0 && kf_aligned(KF_V, KF_CPV > 0 ? KF_CPV : 1);

    /* Zero the whole tile area once: the columns past each head dim are
     * never copied and must read as 0 (Q.K^T sums over KF_DKP columns). */
    for (int i = tid; i < KF_SMEM_BYTES / 16; i += KF_THREADS)
        reinterpret_cast<uint4 *>(kf_dyn_smem)[i] = make_uint4(0u, 0u, 0u, 0u);
    __syncthreads();

    for (long long item = blockIdx.x; item < (long long)KF_BH * KF_NQT; item += gridDim.x) {
        const long long bh = item / KF_NQT;
        const int qt = KF_NQT - 1 - (int)(item % KF_NQT);
        const int q0 = qt * KF_BR;
        long long oq, ok, ov;
        kf_bh_offsets(bh, oq, ok, ov);
        const KF_QT *gq = KF_Q + oq + (long long)q0 * KF_Q_RS;
        const KF_KT *gk = KF_K + ok;
        const KF_VT *gv = KF_V + ov;

        int kv_lo = 0, kv_hi = KF_SKV;
#if KF_MASK_SKIP == 1 || KF_MASK_SKIP == 2
        kv_hi = min(KF_SKV, q0 + KF_BR);
#endif
#if KF_MASK_SKIP == 2
        kv_lo = max(0, q0 - KF_WINDOW + 1);
#endif
        const int t_lo = kv_lo / KF_BC, t_hi = (kv_hi + KF_BC - 1) / KF_BC;
        const bool bs_dense = kf_bs_dense(bh, q0, KF_ARGS);
        const int t_first = kf_bs_next(bh, q0, bs_dense, t_lo, t_hi, KF_ARGS);

        KF_KT *const sK0 = reinterpret_cast<KF_KT *>(kf_dyn_smem + KF_OFF_K);
        KF_VT *const sV0 = reinterpret_cast<KF_VT *>(kf_dyn_smem + KF_OFF_V);
        kf_simt_tile<KF_QT, KF_BR, KF_DK, KF_QS, KF_CPQ>(sQ, gq, KF_Q_RS, KF_Q_CS, KF_SQ - q0, alq,
                                                        tid);
        if (t_first < t_hi)
            kf_simt_tile<KF_KT, KF_BC, KF_DK, KF_KS, KF_CPK>(
                sK0, gk + (long long)t_first * KF_BC * KF_K_RS, KF_K_RS, KF_K_CS,
                KF_SKV - t_first * KF_BC, alk, tid);
        kf_cp_commit();
        if (t_first < t_hi)
            kf_simt_tile<KF_VT, KF_BC, KF_DV, KF_VS, KF_CPV>(
                sV0, gv + (long long)t_first * KF_BC * KF_V_RS, KF_V_RS, KF_V_CS,
                KF_SKV - t_first * KF_BC, alv, tid);
        kf_cp_commit();

        float o[4][KF_NDV];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int c = 0; c < KF_NDV; c++)
                o[i][c] = 0.0f;
        float m[4] = {-KF_INF, -KF_INF, -KF_INF, -KF_INF}, l[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        /* m log2(e) as rounded and used by the exps so far (0 while m is -inf) */
        float msc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        /* the warp's rows qw .. qw + 15; this thread's qr .. qr + 3 */
        const int qw = q0 + warp * 16, qr = q0 + ty * 4;
        const KF_QT *const myq = sQ + ty * 4 * KF_QS;
        float *const myp = sP + ty * 4 * KF_PS;

        int buf = 0;
        for (int j = t_first, jn; j < t_hi; j = jn) {
            jn = kf_bs_next(bh, q0, bs_dense, j + 1, t_hi, KF_ARGS);
            kf_cp_wait<1>();
            __syncthreads();
            const KF_KT *const sK = sK0 + buf * (KF_K_BYTES / (int)sizeof(KF_KT));
            const KF_VT *const sV = sV0 + buf * (KF_V_BYTES / (int)sizeof(KF_VT));

            /* S = Q . K^T over this tile's keys tx + 8 jj. */
            float s[4][KF_NJ];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int jj = 0; jj < KF_NJ; jj++)
                    s[i][jj] = 0.0f;
#pragma unroll 2
            for (int d = 0; d < KF_DKP; d += 4) {
                float4 qv[4];
#pragma unroll
                for (int i = 0; i < 4; i++)
                    qv[i] = kf_s4(myq + i * KF_QS + d);
#pragma unroll
                for (int jj = 0; jj < KF_NJ; jj++) {
                    const float4 kv = kf_s4(sK + (tx + 8 * jj) * KF_KS + d);
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        float a = s[i][jj];
                        a = fmaf(qv[i].x, kv.x, a);
                        a = fmaf(qv[i].y, kv.y, a);
                        a = fmaf(qv[i].z, kv.z, a);
                        a = fmaf(qv[i].w, kv.w, a);
                        s[i][jj] = a;
                    }
                }
            }
#if KF_STAGES == 2
            /* The next K tile into the other buffer (its last readers passed
             * this iteration's barrier). */
            if (jn < t_hi)
                kf_simt_tile<KF_KT, KF_BC, KF_DK, KF_KS, KF_CPK>(
                    sK0 + (buf ^ 1) * (KF_K_BYTES / (int)sizeof(KF_KT)),
                    gk + (long long)jn * KF_BC * KF_K_RS, KF_K_RS, KF_K_CS, KF_SKV - jn * KF_BC,
                    alk, tid);
            kf_cp_commit();
#endif

            /* The score expression: element tests only on edge tiles. */
            const int kv0 = j * KF_BC;
            bool bs_kept;
            const bool edge = kf_attn_tile_edge(j, qw, bh, q0, bs_dense, bs_kept, KF_ARGS);
            if (edge) {
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int q = min(qr + i, KF_SQ - 1);
#pragma unroll
                    for (int jj = 0; jj < KF_NJ; jj++) {
                        const int kv = kv0 + tx + 8 * jj;
                        s[i][jj] = kv < KF_SKV ? KF_SCORE_EDGE(s[i][jj], q, kv) : -KF_INF;
                    }
                }
            } else {
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int q = min(qr + i, KF_SQ - 1);
#pragma unroll
                    for (int jj = 0; jj < KF_NJ; jj++)
                        s[i][jj] = kf_score_inner(s[i][jj], bh, q, kv0 + tx + 8 * jj, KF_ARGS);
                }
            }

            /* Online softmax; P into the warp's rows of shared memory. */
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float mx = m[i];
#pragma unroll
                for (int jj = 0; jj < KF_NJ; jj++)
                    mx = fmaxf(mx, s[i][jj]);
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
                /* m log2(e), 0 while the row has seen only -inf. The earlier
                 * p were 2^(s log2(e) - msc), so they are rescaled by
                 * 2^(msc - ms): exactly 1 where the max did not move. (From
                 * m log2(e) unrounded, the rescale was 2^(the rounding of
                 * msc) a tile, up to 2^0.002 where m is -30000 -- a finite
                 * fill over a row the mask drops whole --, so the key tiles
                 * of such a row weighed differently: f32 error 9.8e-5 against
                 * a bound of 1.0e-5, H100, 6e7e956.) */
                const float ms = mx == -KF_INF ? 0.0f : mx * KF_LOG2E;
                const float alpha = m[i] == -KF_INF ? 1.0f : kf_ex2s(msc[i] - ms);
                m[i] = mx;
                msc[i] = ms;
                float ls = 0.0f;
#pragma unroll
                for (int jj = 0; jj < KF_NJ; jj++) {
                    const float p = kf_ex2s(fmaf(s[i][jj], KF_LOG2E, -ms));
                    ls += p;
                    myp[i * KF_PS + tx + 8 * jj] = p;
                }
                l[i] = fmaf(l[i], alpha, ls);
#pragma unroll
                for (int c = 0; c < KF_NDV; c++)
                    o[i][c] *= alpha;
            }
            __syncwarp();

            /* O += P . V. */
#if KF_STAGES == 2
            kf_cp_wait<1>();
#else
            kf_cp_wait<0>();
#endif
            __syncthreads();
#pragma unroll 2
            for (int k = 0; k < KF_BC; k += 4) {
                float4 pv[4];
#pragma unroll
                for (int i = 0; i < 4; i++)
                    pv[i] = *reinterpret_cast<const float4 *>(myp + i * KF_PS + k);
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    const KF_VT *vrow = sV + (k + kk) * KF_VS + tx;
#pragma unroll
                    for (int c = 0; c < KF_NDV; c++) {
                        const float v = kf_cvt(vrow[8 * c]);
#pragma unroll
                        for (int i = 0; i < 4; i++) {
                            const float p = kk == 0 ? pv[i].x : kk == 1 ? pv[i].y : kk == 2 ? pv[i].z : pv[i].w;
                            o[i][c] = fmaf(p, v, o[i][c]);
                        }
                    }
                }
            }
            __syncwarp();
#if KF_STAGES == 2
            if (jn < t_hi)
                kf_simt_tile<KF_VT, KF_BC, KF_DV, KF_VS, KF_CPV>(
                    sV0 + (buf ^ 1) * (KF_V_BYTES / (int)sizeof(KF_VT)),
                    gv + (long long)jn * KF_BC * KF_V_RS, KF_V_RS, KF_V_CS, KF_SKV - jn * KF_BC,
                    alv, tid);
            kf_cp_commit();
            buf ^= 1;
#else
            /* one buffer: every warp is done with it before the next tile */
            __syncthreads();
            if (jn < t_hi) {
                kf_simt_tile<KF_KT, KF_BC, KF_DK, KF_KS, KF_CPK>(
                    sK0, gk + (long long)jn * KF_BC * KF_K_RS, KF_K_RS, KF_K_CS,
                    KF_SKV - jn * KF_BC, alk, tid);
                kf_cp_commit();
                kf_simt_tile<KF_VT, KF_BC, KF_DV, KF_VS, KF_CPV>(
                    sV0, gv + (long long)jn * KF_BC * KF_V_RS, KF_V_RS, KF_V_CS,
                    KF_SKV - jn * KF_BC, alv, tid);
                kf_cp_commit();
            }
#endif
        }

        /* O / l, rounded to O's dtype; the log-sum-exp from one lane a row group. */
#pragma unroll
        for (int i = 0; i < 4; i++) {
            l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
            l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
            l[i] += __shfl_xor_sync(0xffffffffu, l[i], 4);
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int q = qr + i;
            if (q >= KF_SQ)
                continue;
#ifdef KF_LSE
            if (tx == 0)
                kf_pack(KF_LSE + (bh * KF_SQ + q), fabsf(m[i]) == KF_INF ? m[i] : m[i] + logf(l[i]));
#endif
            const float inv = 1.0f / l[i];
            KF_OT *orow = KF_O + kf_o_offset(bh, q);
#pragma unroll
            for (int c = 0; c < KF_NDV; c++) {
                const int col = tx + 8 * c;
                if (col < KF_DV)
                    kf_pack(orow + col, o[i][c] * inv);
            }
        }
        /* Every warp is done with the buffers before the next item loads. */
        kf_cp_wait<0>();
        __syncthreads();
    }
}
