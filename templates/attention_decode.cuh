/*
 * attention_decode.cuh -- split-KV attention for short queries (decode): a few
 * query rows against a long K/V, read once at memory bandwidth. The generator
 * (codegen/cuda/cg_attention_decode.c) puts the group's score expression, the
 * sizes and the batch-index helpers in front of this text; it makes two
 * kernels from it, the split kernel and (with KF_COMBINE defined) the combine
 * kernel, run one after the other, both taking the split count as their last
 * argument (kf_nsplit: chosen by the recipe from the SM count, so the source
 * does not depend on the device).
 *
 *   kv item  = the batch axes along which K or V moves: one K/V head, and the
 *              KF_G query heads that read it (GQA / MQA: the axes where both
 *              K and V have stride 0), with their KF_SQ rows each: KF_M =
 *              KF_G x KF_SQ query rows, taken KF_MP at a time (a row block,
 *              KF_RB of them; KF_MP = 16, 32 or 64, rows past KF_M padding);
 *   work     = (kv item, row block, split), grid-strided; split s of n takes
 *              key tiles [t_lo + s c, t_lo + (s + 1) c), c = ceil(tiles / n),
 *              of the tiles the mask lets any row see (CAUSAL / SLIDING_WINDOW
 *              bounds as in attention.cuh, over rows q = 0 .. KF_SQ - 1);
 *   a block  = 4 warps; warp w owns row tile w % KF_RT (16 rows) and key
 *              slice w / KF_RT (KF_KW = KF_BC / KF_KS keys of every tile), so
 *              one query row -- the common decode case -- still has four warps
 *              working and every K/V byte is read once per row block;
 *   K and V  = tiles of KF_BC keys through a ring of KF_STAGES shared-memory
 *              stages by cp.async (16-byte pieces, rows past the end zero, the
 *              swizzle of attention.cuh), KF_STAGES - 1 tiles in flight;
 *   math     = mma.sync m16n8k16 for Q.K^T and P.V, the online softmax in f32
 *              (base 2, as attention.cuh: p = 2^(x log2 e - m log2 e)), P
 *              rounded to the operand type before P.V;
 *   partials = at the end of a split the warps of one row tile merge through
 *              shared memory, and the block writes, per row, O / l (f32) and
 *              lse2 = m log2 e + log2 l into the workspace (KF_W, the recipe's
 *              scratch from the program's arena): O at
 *              ((item n + s) KF_MP + r) KF_D + d, lse2 after all the O's; a
 *              split that saw no key of a row writes lse2 = -inf;
 *   combine  = one warp a row: M = max_s lse2_s, O = sum_s 2^(lse2_s - M) O_s /
 *              sum_s 2^(lse2_s - M), rounded to the output's dtype, written
 *              contiguous [.., KF_SQ, KF_D]. A row no split saw (every key
 *              masked) is 0/0 = NaN, the reference's softmax of a row of
 *              -inf (as attention.cuh);
 *   direct   = with KF_DIRECT (the recipe's one-split form: one chunk holds
 *              every key tile, so there is nothing to combine), the split
 *              kernel writes O / l itself, rounded, where the combine would
 *              (NaN for a row every key of which is masked), and neither the
 *              workspace nor KF_W exists: one launch, no f32 round trip. It
 *              still takes the split count (always 1) as its last argument.
 *
 * Hooks (the generator's): KF_D, KF_BC, KF_STAGES, KF_SQ, KF_SKV, KF_NKV
 * (kv items), KF_G, KF_M, KF_MP, KF_RB, KF_RT, KF_KS, KF_AB, KF_ELEM,
 * KF_TO_ELEM (f32 -> the element's bits), KF_MASK_SKIP, KF_WINDOW, KF_Q,
 * KF_K, KF_V, KF_O, KF_W (params), KF_Q_RS, KF_K_RS, KF_V_RS (row strides),
 * kf_dec_bh(kvi, gi) (the score space's flattened batch x head index of query
 * head gi of kv item kvi), kf_bh_offsets(bh, oq, ok, ov), kf_attn_aligned,
 * kf_score_full / kf_score_inner(s, bh, q, kv, KF_ARGS).
 */
#define KF_LOG2E 1.4426950408889634f
#define KF_KW (KF_BC / KF_KS)

static_assert(KF_BLOCK == 128, "four warps");
static_assert(KF_RT * KF_KS == 4 && KF_MP == 16 * KF_RT, "row tiles x key slices = warps");
static_assert(KF_KW % 16 == 0 && KF_D % 16 == 0, "mma tiles");

#ifndef KF_DIRECT
/* The workspace: O partials, then the lse2 of each. */
__device__ __forceinline__ float *kf_ws_o(float *w, long long item, int s, int ns) {
    return w + ((item * ns + s) * KF_MP) * (long long)KF_D;
}
__device__ __forceinline__ float *kf_ws_lse(float *w, long long item, int s, int ns) {
    return w + (long long)KF_NKV * KF_RB * ns * KF_MP * KF_D + (item * ns + s) * KF_MP;
}
#endif

#ifndef KF_COMBINE
#define KF_CH (KF_D / 8)
#define KF_TILE_BYTES (KF_BC * KF_D * 2)

__device__ __forceinline__ unsigned kf_dec_sa(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
/* Byte offset of 16-byte chunk ch of row r in a tile (swizzled). */
__device__ __forceinline__ unsigned kf_sw(int r, int ch) {
    return (unsigned)(r * (KF_D * 2) + ((ch ^ (r & 7)) << 4));
}
/* One 16-byte piece global -> shared: cp.async when aligned (zero-filled when
 * !in), else plain loads and a store. */
__device__ __forceinline__ void kf_piece(unsigned d, const KF_ELEM *s, bool in, bool al) {
    if (al) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(kf_dec_sa(kf_dyn_smem) + d),
                     "l"(s), "r"(in ? 16 : 0)
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
/* KF_BC rows (keys) from g (row stride rs) into the tile at `off`; rows at or
 * past `valid` are zero. */
__device__ __forceinline__ void kf_kv_load(unsigned off, const KF_ELEM *g, long long rs, int valid,
                                           bool al, int tid) {
#pragma unroll
    for (int it = 0; it < KF_BC * KF_CH / KF_BLOCK; it++) {
        const int i = tid + it * KF_BLOCK, r = i / KF_CH, ch = i % KF_CH;
        const bool in = r < valid;
        kf_piece(off + kf_sw(r, ch), g + (in ? (long long)r * rs : 0LL) + ch * 8, in, al);
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
__device__ __forceinline__ void kf_mma(float *c, const unsigned *a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." KF_AB "." KF_AB
                 ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
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

/* Row r (0 .. KF_M - 1) of a kv item: query head r / KF_SQ, query r % KF_SQ. */
__device__ __forceinline__ void kf_dec_row(long long kvi, int r, long long &bh, int &q) {
    bh = kf_dec_bh(kvi, r / KF_SQ);
    q = r % KF_SQ;
}

extern "C" __global__ void __launch_bounds__(KF_BLOCK) KF_KERNEL(KF_PARAMS, long long kf_nsplit) {
    KF_SETUP();
#ifdef KF_DIRECT
    const int ns = 1; /* the one-split form: kf_nsplit is 1 */
    (void)kf_nsplit;
#else
    const int ns = (int)kf_nsplit;
#endif
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g4 = lane >> 2, t4 = lane & 3;
    const int rt = warp % KF_RT, ksl = warp / KF_RT;
    const bool al = kf_attn_aligned(KF_ARGS);
    const unsigned sb = kf_dec_sa(kf_dyn_smem);
    const unsigned offQ = 0, offKV = KF_MP * KF_D * 2;
    /* merge area (reuses the ring once it is drained): per warp 16 rows of
     * KF_D f32, then the 16 m and 16 l */
    float *mo = reinterpret_cast<float *>(kf_dyn_smem + offKV);
    float *mml = mo + 4 * 16 * KF_D;

    /* The key tiles any row sees: [t_lo, t_hi). */
    int kv_lo = 0, kv_hi = KF_SKV;
#if KF_MASK_SKIP >= 1
    kv_hi = min(KF_SKV, KF_SQ);
#endif
#if KF_MASK_SKIP == 2
    kv_lo = max(0, 1 - KF_WINDOW);
#endif
    const int t_lo = kv_lo / KF_BC, t_hi = (kv_hi + KF_BC - 1) / KF_BC;
    const int chunk = (t_hi - t_lo + ns - 1) / ns;

    for (long long w = blockIdx.x; w < (long long)KF_NKV * KF_RB * ns; w += gridDim.x) {
        const long long item = w / ns;
        const int split = (int)(w % ns);
        const long long kvi = item / KF_RB;
        const int row0 = (int)(item % KF_RB) * KF_MP;
        const int j0 = min(t_hi, t_lo + split * chunk), j1 = min(t_hi, j0 + chunk);
        long long oq, ok, ov;
        kf_bh_offsets(kf_dec_bh(kvi, 0), oq, ok, ov);
        const KF_ELEM *gk = KF_K + ok;
        const KF_ELEM *gv = KF_V + ov;

        /* Q: row r of the block is row row0 + r of the item (zero past KF_M). */
        for (int i = tid; i < KF_MP * KF_CH; i += KF_BLOCK) {
            const int r = i / KF_CH, ch = i % KF_CH;
            const bool in = row0 + r < KF_M;
            long long bh;
            int q;
            kf_dec_row(kvi, in ? row0 + r : 0, bh, q);
            long long oq2, ok2, ov2;
            kf_bh_offsets(bh, oq2, ok2, ov2);
            kf_piece(offQ + kf_sw(r, ch), KF_Q + oq2 + (long long)q * KF_Q_RS + ch * 8, in, al);
        }
        kf_cp_commit();
#pragma unroll
        for (int st = 0; st < KF_STAGES - 1; st++) {
            const int j = j0 + st;
            if (j < j1) {
                const unsigned so = offKV + st * 2 * KF_TILE_BYTES;
                kf_kv_load(so, gk + (long long)j * KF_BC * KF_K_RS, KF_K_RS, KF_SKV - j * KF_BC,
                           al, tid);
                kf_kv_load(so + KF_TILE_BYTES, gv + (long long)j * KF_BC * KF_V_RS, KF_V_RS,
                           KF_SKV - j * KF_BC, al, tid);
            }
            kf_cp_commit();
        }

        float o[KF_D / 8][4];
#pragma unroll
        for (int i = 0; i < KF_D / 8; i++)
            o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
        float m[2] = {-KF_INF, -KF_INF}, l[2] = {0.0f, 0.0f};
        unsigned qf[KF_D / 16][4];
        /* this lane's rows: ra and ra + 8 of the block (clamped for the score
         * expression; padding rows are never stored) */
        const int ra = rt * 16 + g4;
        long long bha, bhb;
        int qa, qb;
        kf_dec_row(kvi, min(row0 + ra, KF_M - 1), bha, qa);
        kf_dec_row(kvi, min(row0 + ra + 8, KF_M - 1), bhb, qb);

        for (int j = j0; j < j1; j++) {
            const int it = j - j0;
            kf_cp_wait<KF_STAGES - 2>();
            __syncthreads();
            if (it == 0) {
#pragma unroll
                for (int kk = 0; kk < KF_D / 16; kk++)
                    kf_ldsm4(sb + offQ +
                                 kf_sw(rt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                       kk * 2 + (lane >> 4)),
                             qf[kk]);
            }
            /* the tile KF_STAGES - 1 ahead into the stage every warp left
             * before this iteration's barrier */
            {
                const int jn = j + KF_STAGES - 1;
                if (jn < j1) {
                    const unsigned so = offKV + ((it + KF_STAGES - 1) % KF_STAGES) * 2 * KF_TILE_BYTES;
                    kf_kv_load(so, gk + (long long)jn * KF_BC * KF_K_RS, KF_K_RS,
                               KF_SKV - jn * KF_BC, al, tid);
                    kf_kv_load(so + KF_TILE_BYTES, gv + (long long)jn * KF_BC * KF_V_RS, KF_V_RS,
                               KF_SKV - jn * KF_BC, al, tid);
                }
                kf_cp_commit();
            }
            const unsigned kb = sb + offKV + (it % KF_STAGES) * 2 * KF_TILE_BYTES;
            const unsigned vb = kb + KF_TILE_BYTES;
            const int kr0 = ksl * KF_KW; /* this warp's keys in the tile */

            /* S = Q . K^T over this warp's KF_KW keys. */
            float s[KF_KW / 8][4];
#pragma unroll
            for (int i = 0; i < KF_KW / 8; i++)
                s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KF_D / 16; kk++) {
#pragma unroll
                for (int nn = 0; nn < KF_KW / 16; nn++) {
                    unsigned b[4];
                    kf_ldsm4(kb + kf_sw(kr0 + nn * 16 + (lane & 7) + (lane >> 4) * 8,
                                        kk * 2 + ((lane >> 3) & 1)),
                             b);
                    kf_mma(s[2 * nn], qf[kk], b[0], b[1]);
                    kf_mma(s[2 * nn + 1], qf[kk], b[2], b[3]);
                }
            }
            /* The score expression: the whole of it (mask included) on tiles
             * the mask may cut or that run past the last key. */
            const int kv0 = j * KF_BC;
            bool edge = kv0 + KF_BC > KF_SKV;
#if KF_MASK_SKIP >= 1
            edge = edge || kv0 + KF_BC - 1 > 0;
#endif
#if KF_MASK_SKIP == 2
            edge = edge || kv0 <= KF_SQ - 1 - KF_WINDOW;
#endif
            if (edge) {
#pragma unroll
                for (int nt = 0; nt < KF_KW / 8; nt++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int kv = kv0 + kr0 + nt * 8 + 2 * t4 + (e & 1);
                        s[nt][e] = kv < KF_SKV ? kf_score_full(s[nt][e], e < 2 ? bha : bhb,
                                                               e < 2 ? qa : qb, kv, KF_ARGS)
                                               : -KF_INF;
                    }
                }
            } else {
#pragma unroll
                for (int nt = 0; nt < KF_KW / 8; nt++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int kv = kv0 + kr0 + nt * 8 + 2 * t4 + (e & 1);
                        s[nt][e] = kf_score_inner(s[nt][e], e < 2 ? bha : bhb, e < 2 ? qa : qb,
                                                  kv, KF_ARGS);
                    }
                }
            }
            /* Online softmax (attention.cuh's). */
            float mx[2] = {m[0], m[1]};
#pragma unroll
            for (int nt = 0; nt < KF_KW / 8; nt++) {
                mx[0] = fmaxf(mx[0], fmaxf(s[nt][0], s[nt][1]));
                mx[1] = fmaxf(mx[1], fmaxf(s[nt][2], s[nt][3]));
            }
            float ms[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
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
            for (int nt = 0; nt < KF_KW / 8; nt++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[nt][e] = kf_ex2(fmaf(s[nt][e], KF_LOG2E, -ms[e >> 1]));
                    l[e >> 1] += s[nt][e];
                }
            }
            /* O += P . V over the same keys. */
#pragma unroll
            for (int kk = 0; kk < KF_KW / 16; kk++) {
                unsigned a[4];
                a[0] = kf_pack2(s[2 * kk][0], s[2 * kk][1]);
                a[1] = kf_pack2(s[2 * kk][2], s[2 * kk][3]);
                a[2] = kf_pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                a[3] = kf_pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
                for (int dd = 0; dd < KF_D / 16; dd++) {
                    unsigned b[4];
                    kf_ldsm4t(vb + kf_sw(kr0 + kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                         dd * 2 + (lane >> 4)),
                              b);
                    kf_mma(o[2 * dd], a, b[0], b[1]);
                    kf_mma(o[2 * dd + 1], a, b[2], b[3]);
                }
            }
        }

        /* Merge the key slices of each row tile through shared memory (the
         * ring, drained), then the block's partial into the workspace. */
        kf_cp_wait<0>();
        __syncthreads();
#pragma unroll
        for (int r = 0; r < 2; r++) {
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
            l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
            float *orow = mo + (warp * 16 + g4 + 8 * r) * KF_D;
#pragma unroll
            for (int i = 0; i < KF_D / 8; i++) {
                orow[i * 8 + 2 * t4] = o[i][2 * r];
                orow[i * 8 + 2 * t4 + 1] = o[i][2 * r + 1];
            }
            if (t4 == 0) {
                mml[warp * 32 + g4 + 8 * r] = m[r];
                mml[warp * 32 + 16 + g4 + 8 * r] = l[r];
            }
        }
        __syncthreads();
#ifdef KF_DIRECT
        /* the block's real rows only: padding rows have no output */
        const int n_out = min(KF_MP, KF_M - row0) * KF_D;
        for (int i = tid; i < n_out; i += KF_BLOCK) {
#else
        float *wo = kf_ws_o(KF_W, item, split, ns);
        float *wl = kf_ws_lse(KF_W, item, split, ns);
        for (int i = tid; i < KF_MP * KF_D; i += KF_BLOCK) {
#endif
            const int r = i / KF_D, d = i % KF_D, t = r / 16, rr = r % 16;
            float mm = -KF_INF;
#pragma unroll
            for (int k = 0; k < KF_KS; k++)
                mm = fmaxf(mm, mml[(k * KF_RT + t) * 32 + rr]);
            float acc = 0.0f, ll = 0.0f;
            if (mm != -KF_INF) {
#pragma unroll
                for (int k = 0; k < KF_KS; k++) {
                    const int wk = k * KF_RT + t;
                    const float f = kf_ex2((mml[wk * 32 + rr] - mm) * KF_LOG2E);
                    acc += f * mo[(wk * 16 + rr) * KF_D + d];
                    ll += f * mml[wk * 32 + 16 + rr];
                }
            }
#ifdef KF_DIRECT
            /* O row row0 + r, contiguous [.., KF_SQ, KF_D], as the combine
             * writes it; no key seen: NaN (the combine's 0/0) */
            const long long bh = kf_dec_bh(kvi, (row0 + r) / KF_SQ);
            KF_ELEM *orow = KF_O + (bh * KF_SQ + (row0 + r) % KF_SQ) * KF_D;
            orow[d].x = KF_TO_ELEM(mm == -KF_INF ? __int_as_float(0x7fc00000) : acc / ll);
#else
            wo[i] = mm == -KF_INF ? 0.0f : acc / ll;
            if (d == 0)
                wl[r] = mm == -KF_INF ? -KF_INF : mm * KF_LOG2E + log2f(ll);
#endif
        }
        /* every thread is done with the merge area before the next item */
        __syncthreads();
    }
}

#else /* KF_COMBINE */

/* One warp a row of the output: the splits' partials merged by their lse2. */
extern "C" __global__ void __launch_bounds__(KF_BLOCK) KF_KERNEL(KF_PARAMS, long long kf_nsplit) {
    const int ns = (int)kf_nsplit;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long rows = (long long)KF_NKV * KF_M;
    for (long long row = (long long)blockIdx.x * (KF_BLOCK / 32) + warp; row < rows;
         row += (long long)gridDim.x * (KF_BLOCK / 32)) {
        const long long kvi = row / KF_M;
        const int rr = (int)(row % KF_M);
        const long long item = kvi * KF_RB + rr / KF_MP;
        const int r = rr % KF_MP;
        float mm = -KF_INF;
        for (int s = lane; s < ns; s += 32)
            mm = fmaxf(mm, kf_ws_lse(KF_W, item, s, ns)[r]);
#pragma unroll
        for (int x = 16; x > 0; x >>= 1)
            mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, x));
        float acc[KF_D / 32], ll = 0.0f;
#pragma unroll
        for (int i = 0; i < KF_D / 32; i++)
            acc[i] = 0.0f;
        if (mm != -KF_INF) {
            for (int s = 0; s < ns; s++) {
                const float ls = kf_ws_lse(KF_W, item, s, ns)[r];
                if (ls == -KF_INF)
                    continue;
                const float f = exp2f(ls - mm);
                const float *po = kf_ws_o(KF_W, item, s, ns) + (long long)r * KF_D;
                ll += f;
#pragma unroll
                for (int i = 0; i < KF_D / 32; i++)
                    acc[i] += f * po[lane + 32 * i];
            }
        }
        const long long bh = kf_dec_bh(kvi, rr / KF_SQ);
        KF_ELEM *orow = KF_O + (bh * KF_SQ + rr % KF_SQ) * KF_D;
#pragma unroll
        for (int i = 0; i < KF_D / 32; i++)
            orow[lane + 32 * i].x = KF_TO_ELEM(acc[i] / ll);
    }
}

#endif /* KF_COMBINE */
