/*
 * attention.cuh -- the fused attention kernel for sm_80 and later
 * (FlashAttention-2 class): O = softmax(score(Q.K^T)) . V without the score
 * matrix ever reaching memory. The generator (codegen/cuda/cg_attention.c)
 * puts the group's score expression, its operands' strides and the problem
 * size in front of this text.
 *
 *   work item = (query tile of KF_BR rows, one batch x head), head-major:
 *     the blocks in flight share a few heads, whose K and V then stay in L2
 *     (query-tile-major, the first version, had every head in flight and
 *     re-read K and V from memory for each query tile: 5.28 ms for a
 *     non-causal B4 H32 S4096 D128 on an H100); within a head the last query
 *     tiles first (under a causal mask they see the most keys); grid-stride,
 *     so any grid computes the whole output;
 *   a block = KF_BR / 16 warps, each owning 16 query rows; Q sits in
 *     registers (mma A fragments, ldmatrix from shared memory once);
 *   K and V tiles of KF_BC keys stream through two shared-memory buffers
 *     each by cp.async (16-byte pieces, rows past the end zero-filled), the
 *     next tile's copy in flight while this one is used;
 *   S = Q.K^T and O += P.V by mma.sync m16n8k16 (bf16 or f16 in, f32
 *     accumulators); P goes from the S accumulators to A fragments in
 *     registers, never through shared memory;
 *   online softmax per row in f32 registers: the score expression gives x,
 *     m = running max of x, p = 2^(x log2(e) - m log2(e)) (one FFMA and one
 *     ex2), l = sum p, the accumulators rescaled by 2^((m_old - m_new)
 *     log2(e)) when the max moves; l is summed over the quad of lanes sharing
 *     a row only at the end;
 *   tiles: with a CAUSAL or SLIDING_WINDOW mask (KF_MASK_SKIP 1 / 2) the
 *     tiles wholly outside the mask are never visited, tiles wholly inside
 *     evaluate the score expression without its mask (kf_score_inner), and
 *     only the tiles on the boundary (or past the last key) test elements
 *     (kf_score_full). A BLOCK_SPARSE keep map (3) drops the tiles it drops
 *     for the whole query tile and tests elements where a kernel tile spans
 *     kept and dropped map tiles (kf_bs_*), except in a query tile holding a
 *     row the map drops entirely, which visits every tile (that row is the
 *     reference's all-masked row). Any other mask is part of the score
 *     expression and is evaluated per element.
 *
 * Shared memory rows are KF_D elements; 16-byte chunk c of row r is stored
 * at chunk c ^ (r & 7), so the 8 row addresses of an ldmatrix (and the
 * copies of a warp) fall in 8 different bank groups.
 *
 * All-masked rows: m stays -inf, every p is 0 and l is 0, so the row is
 * 0/0 = NaN, which is what the reference computes for softmax over a row of
 * -inf. (A finite fill gives the reference's uniform row by itself.)
 *
 * Hooks (defined by the generator before this text):
 *   KF_D, KF_BR, KF_BC, KF_SQ, KF_SKV, KF_BH  sizes (KF_BH: batch x heads)
 *   KF_AB                 "bf16" or "f16": the mma operand type
 *   KF_MINB               blocks an SM holds (__launch_bounds__)
 *   KF_ELEM               kf_bf16 or kf_f16
 *   KF_MASK_SKIP, KF_WINDOW
 *   KF_Q, KF_K, KF_V, KF_O the params; KF_Q_RS, KF_K_RS, KF_V_RS row strides
 *   kf_bh_offsets(bh, oq, ok, ov)  element offsets of batch x head bh
 *   kf_o_offset(bh, q)    element offset of O's row q of batch x head bh
 *   kf_attn_aligned(KF_ARGS)      Q, K, V bases 16-byte aligned
 *   kf_score_full / kf_score_inner(s, bh, q, kv, KF_ARGS)
 */
#define KF_NW (KF_BR / 16)
#define KF_THREADS (KF_NW * 32)
#define KF_CH (KF_D / 8)
#define KF_NQT ((KF_SQ + KF_BR - 1) / KF_BR)
#define KF_KV_TILE_BYTES (KF_BC * KF_D * 2)
#define KF_LOG2E 1.4426950408889634f

static_assert(KF_THREADS == KF_BLOCK, "the block is the kernel's warps");
static_assert(KF_D % 16 == 0 && KF_BC % 16 == 0 && KF_BR % 16 == 0, "mma tiles");

__device__ __forceinline__ unsigned kf_attn_sa(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

/* Byte offset of 16-byte chunk ch of row r in a tile (swizzled). */
__device__ __forceinline__ unsigned kf_sw(int r, int ch) {
    return (unsigned)(r * (KF_D * 2) + ((ch ^ (r & 7)) << 4));
}

/* ROWS rows of KF_D elements from g (row stride rs elements) into the tile at
 * shared offset `off`; rows at or past `valid` are zero. cp.async when the
 * operand is 16-byte aligned, else plain loads and stores. */
template <int ROWS>
__device__ __forceinline__ void kf_tile_load(unsigned off, const KF_ELEM *g, long long rs, int valid,
                                             bool al, int tid) {
    const unsigned sb = kf_attn_sa(kf_dyn_smem);
    static_assert(ROWS * KF_CH % KF_THREADS == 0, "whole copies per thread");
#pragma unroll
    for (int it = 0; it < ROWS * KF_CH / KF_THREADS; it++) {
        const int i = tid + it * KF_THREADS, r = i / KF_CH, ch = i % KF_CH;
        const unsigned d = off + kf_sw(r, ch);
        const bool in = r < valid;
        const KF_ELEM *s = g + (in ? (long long)r * rs : 0LL) + ch * 8;
        if (al) {
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(sb + d), "l"(s),
                         "r"(in ? 16 : 0)
                         : "memory");
        } else {
            unsigned short v[8];
#pragma unroll
            for (int e = 0; e < 8; e++)
                v[e] = in ? s[e].x : (unsigned short)0;
            uint4 w;
            w.x = v[0] | (unsigned)v[1] << 16;
            w.y = v[2] | (unsigned)v[3] << 16;
            w.z = v[4] | (unsigned)v[5] << 16;
            w.w = v[6] | (unsigned)v[7] << 16;
            *reinterpret_cast<uint4 *>(kf_dyn_smem + d) = w;
        }
    }
}

__device__ __forceinline__ void kf_ldsm4(unsigned a, unsigned *r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void kf_ldsm4t(unsigned a, unsigned *r) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
/* c += a . b, one m16n8k16 tile. */
__device__ __forceinline__ void kf_mma(float *c, const unsigned *a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." KF_AB "." KF_AB
                 ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* Two floats as a packed pair (lo in the low half), rounded to nearest even. */
__device__ __forceinline__ unsigned kf_pack2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn." KF_AB "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ float kf_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* KF_MINB blocks an SM (2 of 4 warps, 1 of 8): ptxas then keeps every variant
 * in registers (one f16 variant spilled when left to choose). */
extern "C" __global__ void __launch_bounds__(KF_THREADS, KF_MINB) KF_KERNEL(KF_PARAMS) {
    KF_SETUP();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g4 = lane >> 2, t4 = lane & 3;
    const bool al = kf_attn_aligned(KF_ARGS);
    const bool al_o = kf_aligned(KF_O, 4);
    const unsigned sb = kf_attn_sa(kf_dyn_smem);
    const unsigned offQ = 0, offK = KF_BR * KF_D * 2, offV = offK + 2 * KF_KV_TILE_BYTES;

    for (long long item = blockIdx.x; item < (long long)KF_BH * KF_NQT; item += gridDim.x) {
        const long long bh = item / KF_NQT;
        const int qt = KF_NQT - 1 - (int)(item % KF_NQT);
        const int q0 = qt * KF_BR;
        long long oq, ok, ov;
        kf_bh_offsets(bh, oq, ok, ov);
        const KF_ELEM *gq = KF_Q + oq + (long long)q0 * KF_Q_RS;
        const KF_ELEM *gk = KF_K + ok;
        const KF_ELEM *gv = KF_V + ov;

        /* The key tiles this query tile sees: [t_lo, t_hi). */
        int kv_lo = 0, kv_hi = KF_SKV;
#if KF_MASK_SKIP == 1 || KF_MASK_SKIP == 2
        kv_hi = min(KF_SKV, q0 + KF_BR);
#endif
#if KF_MASK_SKIP == 2
        kv_lo = max(0, q0 - KF_WINDOW + 1);
#endif
        const int t_lo = kv_lo / KF_BC, t_hi = (kv_hi + KF_BC - 1) / KF_BC;
        /* Block-sparse (KF_MASK_SKIP 3): only the key tiles the keep map
         * keeps, from t_first on (kf_bs_*: the generator's; constants
         * otherwise, so t_first = t_lo and every tile is visited). */
        const bool bs_dense = kf_bs_dense(bh, q0, KF_ARGS);
        const int t_first = kf_bs_next(bh, q0, bs_dense, t_lo, t_hi, KF_ARGS);

        kf_tile_load<KF_BR>(offQ, gq, KF_Q_RS, KF_SQ - q0, al, tid);
        kf_tile_load<KF_BC>(offK, gk + (long long)t_first * KF_BC * KF_K_RS, KF_K_RS,
                            KF_SKV - t_first * KF_BC, al, tid);
        kf_cp_commit();
        kf_tile_load<KF_BC>(offV, gv + (long long)t_first * KF_BC * KF_V_RS, KF_V_RS,
                            KF_SKV - t_first * KF_BC, al, tid);
        kf_cp_commit();

        float o[KF_D / 8][4];
#pragma unroll
        for (int i = 0; i < KF_D / 8; i++)
            o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
        float m[2] = {-KF_INF, -KF_INF}, l[2] = {0.0f, 0.0f};
        unsigned qf[KF_D / 16][4];
        /* The warp's rows: qw .. qw + 15; this lane's: qr and qr + 8. */
        const int qw = q0 + warp * 16, qr = qw + g4;

        int buf = 0;
        for (int j = t_first, jn; j < t_hi; j = jn, buf ^= 1) {
            jn = kf_bs_next(bh, q0, bs_dense, j + 1, t_hi, KF_ARGS); /* the next tile visited */
            kf_cp_wait<1>();
            __syncthreads();
            if (j == t_first) {
#pragma unroll
                for (int kk = 0; kk < KF_D / 16; kk++)
                    kf_ldsm4(sb + offQ +
                                 kf_sw(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                       kk * 2 + (lane >> 4)),
                             qf[kk]);
            }
            /* S = Q . K^T for this tile's KF_BC keys. */
            float s[KF_BC / 8][4];
#pragma unroll
            for (int i = 0; i < KF_BC / 8; i++)
                s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
            const unsigned kb = sb + offK + buf * KF_KV_TILE_BYTES;
#pragma unroll
            for (int kk = 0; kk < KF_D / 16; kk++) {
#pragma unroll
                for (int nn = 0; nn < KF_BC / 16; nn++) {
                    unsigned b[4];
                    kf_ldsm4(kb + kf_sw(nn * 16 + (lane & 7) + (lane >> 4) * 8,
                                        kk * 2 + ((lane >> 3) & 1)),
                             b);
                    kf_mma(s[2 * nn], qf[kk], b[0], b[1]);
                    kf_mma(s[2 * nn + 1], qf[kk], b[2], b[3]);
                }
            }
            /* The next K tile into the other buffer (its last readers passed
             * this iteration's barrier). */
            if (jn < t_hi)
                kf_tile_load<KF_BC>(offK + (buf ^ 1) * KF_KV_TILE_BYTES,
                                    gk + (long long)jn * KF_BC * KF_K_RS, KF_K_RS,
                                    KF_SKV - jn * KF_BC, al, tid);
            kf_cp_commit();

            /* The score expression. */
            const int kv0 = j * KF_BC;
            bool bs_kept;
            const bool edge = kf_attn_tile_edge(j, qw, bh, q0, bs_dense, bs_kept, KF_ARGS);
            const int qa = min(qr, KF_SQ - 1), qb = min(qr + 8, KF_SQ - 1);
            if (edge) {
#pragma unroll
                for (int nt = 0; nt < KF_BC / 8; nt++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int kv = kv0 + nt * 8 + 2 * t4 + (e & 1);
                        s[nt][e] = kv < KF_SKV ? KF_SCORE_EDGE(s[nt][e], e < 2 ? qa : qb, kv)
                                               : -KF_INF;
                    }
                }
            } else {
#pragma unroll
                for (int nt = 0; nt < KF_BC / 8; nt++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int kv = kv0 + nt * 8 + 2 * t4 + (e & 1);
                        s[nt][e] = kf_score_inner(s[nt][e], bh, e < 2 ? qa : qb, kv, KF_ARGS);
                    }
                }
            }
            /* Online softmax. */
            float mx[2] = {m[0], m[1]};
#pragma unroll
            for (int nt = 0; nt < KF_BC / 8; nt++) {
                mx[0] = fmaxf(mx[0], fmaxf(s[nt][0], s[nt][1]));
                mx[1] = fmaxf(mx[1], fmaxf(s[nt][2], s[nt][3]));
            }
            float ms[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                /* m log2(e), 0 while the row has seen only -inf */
                ms[r] = mx[r] == -KF_INF ? 0.0f : mx[r] * KF_LOG2E;
                const float alpha = kf_ex2(fmaf(m[r], KF_LOG2E, -ms[r]));
                m[r] = mx[r];
                l[r] *= alpha;
#pragma unroll
                for (int i = 0; i < KF_D / 8; i++) {
                    o[i][2 * r] *= alpha;
                    o[i][2 * r + 1] *= alpha;
                }
            }
#pragma unroll
            for (int nt = 0; nt < KF_BC / 8; nt++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[nt][e] = kf_ex2(fmaf(s[nt][e], KF_LOG2E, -ms[e >> 1]));
                    l[e >> 1] += s[nt][e];
                }
            }

            /* O += P . V. */
            kf_cp_wait<1>();
            __syncthreads();
            const unsigned vb = sb + offV + buf * KF_KV_TILE_BYTES;
#pragma unroll
            for (int kk = 0; kk < KF_BC / 16; kk++) {
                unsigned a[4];
                a[0] = kf_pack2(s[2 * kk][0], s[2 * kk][1]);
                a[1] = kf_pack2(s[2 * kk][2], s[2 * kk][3]);
                a[2] = kf_pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                a[3] = kf_pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                for (int dd = 0; dd < KF_D / 16; dd++) {
                    unsigned b[4];
                    kf_ldsm4t(vb + kf_sw(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                         dd * 2 + (lane >> 4)),
                              b);
                    kf_mma(o[2 * dd], a, b[0], b[1]);
                    kf_mma(o[2 * dd + 1], a, b[2], b[3]);
                }
            }
            if (jn < t_hi)
                kf_tile_load<KF_BC>(offV + (buf ^ 1) * KF_KV_TILE_BYTES,
                                    gv + (long long)jn * KF_BC * KF_V_RS, KF_V_RS,
                                    KF_SKV - jn * KF_BC, al, tid);
            kf_cp_commit();
        }

        /* O / l, rounded to the output's dtype: [.., sq, KF_D] contiguous. */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        }
        const float inv[2] = {1.0f / l[0], 1.0f / l[1]};

#ifdef KF_LSE
        if (t4 == 0) /* the rows' log-sum-exp: one lane of the quad */
            kf_attn_lse2(KF_LSE, bh * KF_SQ, qr, KF_SQ, m, l);
#endif
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int q = qr + 8 * r;
            if (q >= KF_SQ)
                continue;
            KF_ELEM *orow = KF_O + kf_o_offset(bh, q);
#pragma unroll
            for (int i = 0; i < KF_D / 8; i++) {
                const unsigned w = kf_pack2(o[i][2 * r] * inv[r], o[i][2 * r + 1] * inv[r]);
                KF_ELEM *p = orow + i * 8 + 2 * t4;
                if (al_o) {
                    *reinterpret_cast<unsigned *>(p) = w;
                } else {
                    p[0].x = (unsigned short)(w & 0xffffu);
                    p[1].x = (unsigned short)(w >> 16);
                }
            }
        }
        /* Every warp is done with the buffers before the next item loads. */
        kf_cp_wait<0>();
        __syncthreads();
    }
}
