/* ---- gemm_decode.cuh: the decode GEMM template (M <= 64; sm_80 on) ---------
 *
 * For products whose M (the tokens) is 64 or fewer: the weight B (K x N) is
 * the only large operand, so the kernel is a stream of B's bytes and its
 * speed is the HBM bandwidth. A 128-row tile of the general kernels wastes
 * most of its tensor work and keeps too few bytes in flight; instead:
 *
 *   Swap AB: the MMA computes Y^T = B^T . A^T. A block owns a strip of KF_BW
 *     = 64 KF_RG output columns (B's columns, the "weight rows"), which are
 *     the MMA's M side (KF_MT = 4 m16 tiles a warp), and every token at once
 *     as its N side (KF_NT n8 tiles, M padded to KF_MP = 8 KF_NT). mma.sync
 *     m16n8k16, bf16 or f16 in, f32 accumulate: sm_80 and sm_90a alike.
 *   Split-K: the strip's K range (KF_KB steps of KF_BK = 64 or 128) is cut into
 *     KF_SPLIT even pieces, one block each, so KF_STRIPS x KF_SPLIT blocks
 *     fill every SM (the recipe picks KF_SPLIT from the SM count) and each
 *     block streams a disjoint piece of B exactly once.
 *   The ring: KF_STAGES stages of (B tile, A tile) in shared memory filled by
 *     cp.async (16 bytes a copy, .cg: around L1); a copy past an operand's
 *     extent reads what is inside and fills zeros (src-size), so ragged N and
 *     K and the padded tokens need no other test. Per K step: wait for the
 *     step's group, one barrier (which also frees the stage read one step
 *     before), issue step kt + STAGES - 1 into it, then the MMAs of step kt;
 *     STAGES - 1 steps of B (16 KiB each, 8 with K steps of 64 on 64
 *     columns) are in flight per block.
 *   Tiles: a K-major B as KF_BW rows of KF_BK K values (KF_KC chunks of 16
 *     bytes), an N-major B as KF_BK K rows of KF_BW columns, A (K-major) as
 *     KF_MP rows of KF_BK K values. Chunk c of row r sits at c ^ (r & 7)
 *     (within its group of 8): the 8 row addresses of one ldmatrix fall in
 *     8 different bank groups.
 *   The 4 warps: KF_RG row groups of 64 columns, each K step's k16 slices
 *     split over the KF_KG = 4 / KF_RG warps of a row group (warp w: row
 *     group w % RG, slices w / RG, + KG, ...), so every B value in shared
 *     memory is read by one warp once (A's by one warp a row group). At the
 *     end the K groups' accumulators are added through shared memory.
 *   The reduction over the split, in the kernel: every block writes its f32
 *     partial strip (KF_MP x KF_BW) to the PARTIALS workspace KF_WS, then
 *     counts itself in on its strip's counter KF_CNT (atomicAdd after a
 *     fence); the block that arrives last adds the KF_SPLIT partials in
 *     split order (the same bits whichever block is last), puts the counter
 *     back to zero (so the next launch finds it so: no memset) and runs the
 *     epilogue. KF_SPLIT 1: no workspace, no counter.
 *   Epilogue: the strip's sums as [token][column] in shared memory; each
 *     thread takes 8 adjacent columns of one token, the group's
 *     kf_epi<8, AL> (cg_gemm_epi.c: bias, activations, residual, every
 *     expression the planner put there); tokens past M store nothing.
 *
 *   The TMA form (KF_TMA 1, sm_90a; recipe flag GEMM_DEC_TMA): the same
 *     tiles, filled by cp.async.bulk.tensor boxes from two tensor maps (A
 *     and B, __grid_constant__ params in place of the pointers) into a ring
 *     of KF_STAGES stages on mbarriers: a fifth warp (one lane) is the
 *     producer, the 4 MMA warps each arrive on a stage's empty barrier when
 *     their slices of it are done, so every stage of the ring is in flight
 *     (not STAGES - 1), no thread spends issue slots on 16-byte copies and
 *     no block-wide barrier sits in the K loop. TMA fills what lies past an
 *     operand's extent with zeros (and counts those bytes). A box row is 128
 *     bytes (64 values) under the 128-byte swizzle, so a tile is KF_BK / 64
 *     (K-major) or KF_BW / 64 (N-major B) boxes one after another, each
 *     [rows][128 bytes] with chunk c of row r at (c ^ r) & 7: the same bank
 *     spread for ldmatrix as the cp.async layout's (KF_DC_OFF); every tile
 *     sits on a 1024-byte boundary (the swizzle's period).
 *
 *   The register form (KF_REG 1; recipe flag GEMM_DEC_REG, M <= 32): no
 *     ring and no block-wide barrier in the K loop. Each warp streams its
 *     share of B straight into registers by 16-byte loads (.nc, no L1
 *     allocation) in chunks of 32 K values, two chunks a warp in flight
 *     (the next pair is issued as each chunk's MMAs finish), and A's tokens
 *     likewise (16 bytes a lane a token tile, L1-cached: small, re-read).
 *     A block's K piece is cut into KF_KG contiguous runs, one a warp of a
 *     row group. The MMA's K order inside a chunk is permuted so that a
 *     lane's 16 bytes are its fragments as they stand: lane (g, t) holds
 *     physical K 8t .. 8t + 7, of which 8t + 4j .. + 3 are logical K 2t,
 *     2t + 1, 2t + 8, 2t + 9 of the chunk's MMA j (the same map on both
 *     operands: a dot product does not care about its order). K-major B: a
 *     lane loads rows g and g + 8 of each m16 tile (the fragments are the
 *     16 bytes' words); N-major B: a lane loads 8 columns 8g .. 8g + 7 of
 *     its 8 K rows, columns 8g + 2mt and + 1 being rows g and g + 8 of m
 *     tile mt, and pairs the K rows' halves by byte permutes (the
 *     accumulators' columns follow: KF_DC_COL). Rows past N and tokens past
 *     M read the last valid one (their sums are never stored); the last,
 *     partial chunk of K and a partial 8-column chunk of N read element by
 *     element with zeros. (Prefetching each warp's B into L2 4 chunks
 *     ahead, prefetch.global.L2, ran 10-25% slower on an H100 at c76f3eb.)
 *
 * The generator defines before this: KF_KERNEL, KF_PARAMS, KF_ARGS, KF_M,
 * KF_N, KF_K, KF_LDA (elements between A's rows), KF_LDB (between B's stored
 * rows: N rows when K-major, K rows when N-major), KF_B_KMAJOR, KF_AB ("bf16"
 * or "f16"), KF_MT, KF_RG, KF_BK, KF_NT, KF_STAGES, KF_SPLIT, KF_MINB, KF_TMA
 * (with 1, hopper.cuh before this), and with KF_SPLIT > 1 KF_WS and KF_CNT
 * (the PARTIALS and COUNTERS params); kf_epi / kf_epi_al.
 */

#ifndef KF_TMA
#define KF_TMA 0
#endif
#ifndef KF_REG
#define KF_REG 0
#endif
#define KF_THREADS 128 /* the MMA warps' (the TMA form adds a producer warp) */
#define KF_KG (4 / KF_RG)        /* warps splitting a K step (each row group's) */
#define KF_BW (16 * KF_MT * KF_RG) /* output columns a block */
#define KF_MP (8 * KF_NT)          /* tokens, padded */
#define KF_KC (KF_BK / 8)          /* 16-byte chunks of a K row */
#define KF_BWP (KF_BW + 4) /* row pitch (floats) of the reduction's tiles */
#define KF_KB ((KF_K + KF_BK - 1) / KF_BK)
#define KF_STRIPS ((KF_N + KF_BW - 1) / KF_BW)
#define KF_B_STAGE (KF_BW * KF_BK) /* elements */
#define KF_A_STAGE (KF_MP * KF_BK)
#define KF_STAGE (KF_B_STAGE + KF_A_STAGE)

static_assert(KF_MT == 4 && (KF_RG == 1 || KF_RG == 2), "strips of 64 or 128 columns");
static_assert(KF_NT >= 1 && KF_NT <= 8 && KF_MP >= KF_M, "the tokens in 8 n8 tiles at most");
#if KF_REG
#define KF_CH ((KF_K + 31) / 32) /* chunks of 32 K values */
#define KF_CHF (KF_K / 32)       /* the whole ones */
static_assert(!KF_TMA, "the register form has no ring to fill by TMA");
static_assert(KF_NT <= 4, "the register form: 32 tokens at most (its registers)");
static_assert(KF_SPLIT >= 1 && KF_SPLIT <= KF_CH, "a chunk at least for each piece");
#else
static_assert(KF_BK == 64 || KF_BK == 128, "K steps of 64 or 128 (rows of 8 or 16 chunks)");
static_assert((KF_BK / 16) % KF_KG == 0, "whole k16 slices for each warp");
static_assert(KF_SPLIT >= 1 && KF_SPLIT <= KF_KB, "a K step at least for each piece");
#endif
static_assert(KF_LDA % 8 == 0 && KF_LDB % 8 == 0, "16-byte copies: rows of 16-byte multiples");

/* The byte offset of 16-byte chunk c of row r in a tile of `rows` rows of
 * `rc` chunks: cp.async, rows of rc chunks, c at (c & ~7) | ((c ^ r) & 7);
 * TMA, boxes of `rows` rows of 8 chunks one after another, c in box c / 8
 * at (c ^ r) & 7 (the 128-byte swizzle of a 1024-byte aligned box). */
#if KF_TMA
#define KF_DC_OFF(r, c, rc, rows)                                                                  \
    (unsigned)(((((c) >> 3) * (rows) + (r)) * 128) + ((((c) ^ (r)) & 7) << 4))
#else
#define KF_DC_OFF(r, c, rc, rows)                                                                  \
    (unsigned)(((r) * (rc) + (((c) & ~7) | (((c) ^ (r)) & 7))) * 16)
#endif

#if !KF_TMA

/* Copies 16 bytes from global src to shared dst, the first `fill` of them
 * read and the rest zeros (fill 0: nothing read). */
__device__ __forceinline__ void kf_dc_cp(unsigned dst, const unsigned short *src, int fill) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "r"(fill)
                 : "memory");
}

/* Bytes of a 16-byte chunk of `left` elements (clamped to 0..8). */
__device__ __forceinline__ int kf_dc_fill(long long left) {
    return left <= 0 ? 0 : left >= 8 ? 16 : (int)left * 2;
}

/* The copies of K step `kb` (global K values kb * KF_BK ..) of strip n0 into
 * the stage at shared address st. */
__device__ __forceinline__ void kf_dc_stage(unsigned st, const unsigned short *__restrict__ pa,
                                            const unsigned short *__restrict__ pb, long long n0,
                                            int kb, int tid) {
    const long long k0 = (long long)kb * KF_BK;
#if KF_B_KMAJOR
    /* B's rows n0 .. n0 + BW, KC chunks a row */
#pragma unroll
    for (int i = 0; i < KF_B_STAGE / 8 / KF_THREADS; i++) {
        const int q = tid + i * KF_THREADS, r = q / KF_KC, c = q % KF_KC;
        const long long n = n0 + r, k = k0 + c * 8;
        const int fill = n < KF_N ? kf_dc_fill(KF_K - k) : 0;
        kf_dc_cp(st + (unsigned)(r * KF_BK + ((c & ~7) | ((c ^ r) & 7)) * 8) * 2u,
                 fill ? pb + n * KF_LDB + k : pb, fill);
    }
#else
    /* B's K rows k0 .. k0 + BK, BW / 8 chunks a row */
#pragma unroll
    for (int i = 0; i < KF_B_STAGE / 8 / KF_THREADS; i++) {
        const int q = tid + i * KF_THREADS, r = q / (KF_BW / 8), c = q % (KF_BW / 8);
        const long long k = k0 + r, n = n0 + c * 8;
        const int fill = k < KF_K ? kf_dc_fill(KF_N - n) : 0;
        kf_dc_cp(st + (unsigned)(r * KF_BW + ((c & ~7) | ((c ^ r) & 7)) * 8) * 2u,
                 fill ? pb + k * KF_LDB + n : pb, fill);
    }
#endif
    /* A's tokens, KC chunks a row; the padded tokens are zeros */
    const unsigned sa = st + KF_B_STAGE * 2u;
#pragma unroll
    for (int i = 0; i < (KF_A_STAGE / 8 + KF_THREADS - 1) / KF_THREADS; i++) {
        const int q = tid + i * KF_THREADS, r = q / KF_KC, c = q % KF_KC;
        if ((KF_A_STAGE / 8) % KF_THREADS == 0 || q < KF_A_STAGE / 8) {
            const long long k = k0 + c * 8;
            const int fill = r < KF_M ? kf_dc_fill(KF_K - k) : 0;
            kf_dc_cp(sa + (unsigned)(r * KF_BK + ((c & ~7) | ((c ^ r) & 7)) * 8) * 2u,
                     fill ? pa + (long long)r * KF_LDA + k : pa, fill);
        }
    }
}

#endif /* !KF_TMA */

__device__ __forceinline__ void kf_dc_ldsm4(unsigned addr, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void kf_dc_ldsm4t(unsigned addr, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void kf_dc_ldsm2(unsigned addr, unsigned &r0, unsigned &r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r0), "=r"(r1)
                 : "r"(addr));
}
__device__ __forceinline__ void kf_dc_mma(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                          unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." KF_AB "." KF_AB
                 ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The MMAs of one k16 slice (K values ks * 16 .. of the stage at st) for
 * the 64 columns of row group rg. */
__device__ __forceinline__ void kf_dc_slice(float (&acc)[KF_MT][KF_NT][4], unsigned st, int ks,
                                            int rg, int lane) {
    unsigned a[KF_MT][4], b[KF_NT][2];
#pragma unroll
    for (int mt = 0; mt < KF_MT; mt++) {
#if KF_B_KMAJOR
        /* rows mt*16 + (lane & 15), chunk 2 ks + (lane >> 4) */
        const int r = rg * 64 + mt * 16 + (lane & 15), c = ks * 2 + (lane >> 4);
        kf_dc_ldsm4(st + KF_DC_OFF(r, c, KF_KC, KF_BW), a[mt]);
#else
        /* K rows ks*16 + (lane & 7) + 8 (lane >> 4), column chunk 2 mt + ((lane >> 3) & 1):
         * transposed, each lane gets its weight row's pairs of K values */
        const int r = ks * 16 + (lane & 7) + ((lane >> 4) << 3),
                  c = rg * 8 + mt * 2 + ((lane >> 3) & 1);
        kf_dc_ldsm4t(st + KF_DC_OFF(r, c, KF_BW / 8, KF_BK), a[mt]);
#endif
    }
    const unsigned sa = st + KF_B_STAGE * 2u;
#pragma unroll
    for (int nt = 0; nt + 1 < KF_NT; nt += 2) {
        const int r = nt * 8 + (lane & 7) + ((lane >> 4) << 3), c = ks * 2 + ((lane >> 3) & 1);
        unsigned t[4];
        kf_dc_ldsm4(sa + KF_DC_OFF(r, c, KF_KC, KF_MP), t);
        b[nt][0] = t[0];
        b[nt][1] = t[1];
        b[nt + 1][0] = t[2];
        b[nt + 1][1] = t[3];
    }
    if (KF_NT % 2) {
        const int nt = KF_NT - 1;
        const int r = nt * 8 + (lane & 7), c = ks * 2 + ((lane >> 3) & 1);
        kf_dc_ldsm2(sa + KF_DC_OFF(r, c, KF_KC, KF_MP), b[nt][0], b[nt][1]);
    }
#pragma unroll
    for (int mt = 0; mt < KF_MT; mt++)
#pragma unroll
        for (int nt = 0; nt < KF_NT; nt++)
            kf_dc_mma(acc[mt][nt], a[mt], b[nt][0], b[nt][1]);
}

#if KF_REG
/* 16 bytes of B, read once: around L1. */
__device__ __forceinline__ uint4 kf_dr_ldb(const unsigned short *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
/* 16 bytes of A (every strip reads them again: L1 may keep them). */
__device__ __forceinline__ uint4 kf_dr_lda(const unsigned short *p) {
    return __ldg(reinterpret_cast<const uint4 *>(p));
}
/* 8 elements from p of which the first `cnt` are read, the rest zeros. */
__device__ __forceinline__ uint4 kf_dr_part(const unsigned short *p, long long cnt) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const unsigned lo = 2 * i < cnt ? (unsigned)p[2 * i] : 0u;
        const unsigned hi = 2 * i + 1 < cnt ? (unsigned)p[2 * i + 1] : 0u;
        w[i] = lo | (hi << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ unsigned kf_dr_w(const uint4 &u, int i) {
    return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}

/* A lane's reads: B at pb (its rows' or columns' first chunk), the 8 loads
 * of a chunk at pb + kf_dr_boff(i) + chunk * kf_dr_bstep; A's token tiles at
 * pa + kf_dr_aoff(nt) + chunk * 32. nb: the lane's first row (K-major) or
 * column (N-major) of B. */
#if KF_B_KMAJOR
#define KF_DR_BSTEP 32LL
/* row nb + 16 (i / 2) + 8 (i % 2): row g or g + 8 of m tile i / 2 */
__device__ __forceinline__ long long kf_dr_boff(int i, long long nb) {
    long long r = nb + 16 * (i >> 1) + 8 * (i & 1);
    if (KF_N % KF_BW != 0)
        r = r < KF_N ? r : KF_N - 1; /* past N: the last row (never stored) */
    return (r - nb) * KF_LDB;
}
#else
#define KF_DR_BSTEP (32LL * KF_LDB)
/* K row i of the lane's 8 */
__device__ __forceinline__ long long kf_dr_boff(int i, long long) { return (long long)i * KF_LDB; }
#endif
__device__ __forceinline__ long long kf_dr_aoff(int nt, int g) {
    int r = nt * 8 + g;
    if (KF_M != KF_MP)
        r = r < KF_M ? r : (int)KF_M - 1; /* past M: the last token (never stored) */
    return (long long)r * KF_LDA;
}

/* The loads of chunk c (whole: every K value inside K). `bpart` (N-major B,
 * N no multiple of 8): the lane's 8 columns cross N, and only the first
 * `bcnt` are read. */
__device__ __forceinline__ void kf_dr_load(uint4 (&bv)[8], uint4 (&xv)[KF_NT],
                                           const unsigned short *__restrict__ pb,
                                           const unsigned short *__restrict__ pa, long long nb,
                                           int g, int c, bool bpart, long long bcnt) {
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const unsigned short *p = pb + kf_dr_boff(i, nb) + (long long)c * KF_DR_BSTEP;
        if (!KF_B_KMAJOR && KF_N % 8 != 0 && bpart)
            bv[i] = kf_dr_part(p, bcnt);
        else
            bv[i] = kf_dr_ldb(p);
    }
#pragma unroll
    for (int nt = 0; nt < KF_NT; nt++)
        xv[nt] = kf_dr_lda(pa + kf_dr_aoff(nt, g) + (long long)c * 32);
}

/* The loads of the last chunk, c = KF_CHF, K values past K as zeros: the
 * lane's K values start at k = c * 32 + 8t. */
__device__ __forceinline__ void kf_dr_load_tail(uint4 (&bv)[8], uint4 (&xv)[KF_NT],
                                                const unsigned short *__restrict__ pb,
                                                const unsigned short *__restrict__ pa,
                                                long long nb, int g, int t, bool bpart,
                                                long long bcnt) {
    const int c = KF_CHF;
    const long long k = (long long)c * 32 + 8 * t;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const unsigned short *p = pb + kf_dr_boff(i, nb) + (long long)c * KF_DR_BSTEP;
#if KF_B_KMAJOR
        bv[i] = kf_dr_part(p, KF_K - k);
#else
        /* K row k + i: whole, partial (N) or none */
        bv[i] = k + i >= KF_K ? make_uint4(0u, 0u, 0u, 0u)
                : (KF_N % 8 != 0 && bpart) ? kf_dr_part(p, bcnt)
                                           : kf_dr_ldb(p);
#endif
    }
#pragma unroll
    for (int nt = 0; nt < KF_NT; nt++)
        xv[nt] = kf_dr_part(pa + kf_dr_aoff(nt, g) + (long long)c * 32, KF_K - k);
}

/* The MMAs of one chunk: two k16 steps (j) of the permuted K order. */
__device__ __forceinline__ void kf_dr_mma(float (&acc)[KF_MT][KF_NT][4], const uint4 (&bv)[8],
                                          const uint4 (&xv)[KF_NT]) {
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int mt = 0; mt < KF_MT; mt++) {
            unsigned a[4];
#if KF_B_KMAJOR
            /* rows g (bv[2 mt]) and g + 8 (bv[2 mt + 1]): words 2j (logical
             * K 2t, 2t + 1) and 2j + 1 (2t + 8, 2t + 9) */
            a[0] = kf_dr_w(bv[2 * mt], 2 * j);
            a[1] = kf_dr_w(bv[2 * mt + 1], 2 * j);
            a[2] = kf_dr_w(bv[2 * mt], 2 * j + 1);
            a[3] = kf_dr_w(bv[2 * mt + 1], 2 * j + 1);
#else
            /* K rows 4j .. 4j + 3 of the lane's 8, word mt: low halves row g,
             * high halves row g + 8 */
            a[0] = __byte_perm(kf_dr_w(bv[4 * j], mt), kf_dr_w(bv[4 * j + 1], mt), 0x5410);
            a[1] = __byte_perm(kf_dr_w(bv[4 * j], mt), kf_dr_w(bv[4 * j + 1], mt), 0x7632);
            a[2] = __byte_perm(kf_dr_w(bv[4 * j + 2], mt), kf_dr_w(bv[4 * j + 3], mt), 0x5410);
            a[3] = __byte_perm(kf_dr_w(bv[4 * j + 2], mt), kf_dr_w(bv[4 * j + 3], mt), 0x7632);
#endif
#pragma unroll
            for (int nt = 0; nt < KF_NT; nt++)
                kf_dc_mma(acc[mt][nt], a, kf_dr_w(xv[nt], 2 * j), kf_dr_w(xv[nt], 2 * j + 1));
        }
}
#endif /* KF_REG */

/* The column (within the strip's row group) of accumulator e of m tile mt
 * in the lane of group g: its MMA row, g or g + 8 of the tile; the register
 * form's N-major B puts rows g and g + 8 at columns 8g + 2mt and + 1. */
#if KF_REG && !KF_B_KMAJOR
#define KF_DC_COL(mt, g, e) (8 * (g) + 2 * (mt) + ((e) >> 1))
#else
#define KF_DC_COL(mt, g, e) ((mt) * 16 + (g) + ((e) >> 1) * 8)
#endif

#if KF_TMA
#define KF_BLOCK (KF_THREADS + 32)
#define KF_BOXES_B (KF_B_KMAJOR ? KF_BK / 64 : KF_BW / 64)
static_assert(KF_STAGE * 2 % 1024 == 0 && KF_B_STAGE * 2 % 1024 == 0,
              "every tile on a 1024-byte boundary (the swizzle's period)");

/* The producer: K step kb's boxes (A's and B's) into the stage at st, counted
 * on its full barrier. */
__device__ __forceinline__ void kf_dc_tma_stage(unsigned st, unsigned bar, const kf_tmap *ta,
                                                const kf_tmap *tb, int n0, int kb) {
    const int k0 = kb * KF_BK;
    kf_hp_expect(bar, KF_STAGE * 2u);
#if KF_B_KMAJOR
#pragma unroll
    for (int h = 0; h < KF_BK / 64; h++) /* {64 K, BW rows} */
        kf_hp_tma2(st + h * (KF_BW * 128u), tb, k0 + h * 64, n0, bar);
#else
#pragma unroll
    for (int h = 0; h < KF_BW / 64; h++) /* {64 columns, BK K rows} */
        kf_hp_tma2(st + h * (KF_BK * 128u), tb, n0 + h * 64, k0, bar);
#endif
#pragma unroll
    for (int h = 0; h < KF_BK / 64; h++) /* {64 K, MP tokens} */
        kf_hp_tma2(st + KF_B_STAGE * 2u + h * (KF_MP * 128u), ta, k0 + h * 64, 0, bar);
}
#else
#define KF_BLOCK KF_THREADS
#endif

extern "C" __global__ void __launch_bounds__(KF_BLOCK, KF_MINB)
#if KF_TMA
    KF_KERNEL(const __grid_constant__ kf_tmap kf_ta, const __grid_constant__ kf_tmap kf_tb,
              KF_PARAMS) {
    extern __shared__ __align__(1024) unsigned char kf_dsmem[];
    __shared__ __align__(8) unsigned long long kf_full[KF_STAGES], kf_empty[KF_STAGES];
    KF_SETUP();
    /* the ring on a 1024-byte boundary (the smem size has the slack) */
    const unsigned ring = ((unsigned)__cvta_generic_to_shared(kf_dsmem) + 1023u) & ~1023u;
#else
    KF_KERNEL(const unsigned short *__restrict__ kf_pa, const unsigned short *__restrict__ kf_pb,
              KF_PARAMS) {
    extern __shared__ __align__(128) unsigned char kf_dsmem[];
    KF_SETUP();
#if !KF_REG
    const unsigned ring = (unsigned)__cvta_generic_to_shared(kf_dsmem);
#endif
#endif
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int rg = warp % KF_RG, kg = warp / KF_RG; /* the warp's row group, K group */
    const int strip = (int)(blockIdx.x % KF_STRIPS), piece = (int)(blockIdx.x / KF_STRIPS);
    const long long n0 = (long long)strip * KF_BW;
    const int kb0 = (int)((long long)piece * KF_KB / KF_SPLIT);
    const int nkb = (int)((long long)(piece + 1) * KF_KB / KF_SPLIT) - kb0;

    float acc[KF_MT][KF_NT][4];
#pragma unroll
    for (int mt = 0; mt < KF_MT; mt++)
#pragma unroll
        for (int nt = 0; nt < KF_NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[mt][nt][e] = 0.f;

#if KF_TMA
    const unsigned full0 = (unsigned)__cvta_generic_to_shared(kf_full),
                   empty0 = (unsigned)__cvta_generic_to_shared(kf_empty);
    if (tid == 0) {
#pragma unroll 1
        for (int s = 0; s < KF_STAGES; s++) {
            kf_hp_init(full0 + 8 * s, 1);
            kf_hp_init(empty0 + 8 * s, KF_THREADS / 32); /* each MMA warp */
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (warp == KF_THREADS / 32) {
        /* the producer: every stage in flight, a stage refilled as soon as
         * the 4 MMA warps are done with it */
        if (lane == 0) {
            asm volatile("prefetch.tensormap [%0];" ::"l"((unsigned long long)&kf_ta) : "memory");
            asm volatile("prefetch.tensormap [%0];" ::"l"((unsigned long long)&kf_tb) : "memory");
#pragma unroll 1
            for (int kt = 0; kt < nkb; kt++) {
                const int s = kt % KF_STAGES;
                kf_hp_wait(empty0 + 8 * s, ((kt / KF_STAGES) & 1) ^ 1);
                kf_dc_tma_stage(ring + s * KF_STAGE * 2u, full0 + 8 * s, &kf_ta, &kf_tb, (int)n0,
                                kb0 + kt);
            }
        }
    } else {
#pragma unroll 1
        for (int kt = 0; kt < nkb; kt++) {
            const int s = kt % KF_STAGES;
            kf_hp_wait(full0 + 8 * s, (kt / KF_STAGES) & 1);
            const unsigned st = ring + s * KF_STAGE * 2u;
#pragma unroll
            for (int ks = kg; ks < KF_BK / 16; ks += KF_KG)
                kf_dc_slice(acc, st, ks, rg, lane);
            __syncwarp();
            if (lane == 0)
                kf_hp_arrive(empty0 + 8 * s);
        }
    }
    /* every box has landed (each full barrier was waited on) and been read:
     * the ring is free, the warps' sums go where it was */
    __syncthreads();
#elif KF_REG
    {
        /* the block's chunks, then the warp's contiguous run of them */
        const int g = lane >> 2, t = lane & 3;
        const int c0 = (int)((long long)piece * KF_CH / KF_SPLIT);
        const int c1 = (int)((long long)(piece + 1) * KF_CH / KF_SPLIT);
        const int wc0 = c0 + (c1 - c0) * kg / KF_KG, wc1 = c0 + (c1 - c0) * (kg + 1) / KF_KG;
        const int cf = wc1 < KF_CHF ? wc1 : KF_CHF; /* past it: the partial chunk */
#if KF_B_KMAJOR
        const long long nb = n0 + rg * 64 + g; /* rows nb + 16 mt (+ 8) */
        const bool bpart = false;
        const long long bcnt = 8;
        const unsigned short *pb = kf_pb + nb * KF_LDB + 8 * t;
#else
        long long nb = n0 + rg * 64 + 8 * g; /* columns nb .. nb + 7 */
        if (KF_N % KF_BW != 0 && nb >= KF_N)
            nb = 0; /* wholly past N: column 0's (never stored) */
        const long long bcnt = KF_N - nb;
        const bool bpart = bcnt < 8;
        const unsigned short *pb = kf_pb + (long long)(8 * t) * KF_LDB + nb;
#endif
        const unsigned short *pa = kf_pa + 8 * t;
        uint4 b0[8], b1[8], x0[KF_NT], x1[KF_NT];
        int c = wc0;
        if (c < cf)
            kf_dr_load(b0, x0, pb, pa, nb, g, c, bpart, bcnt);
        if (c + 1 < cf)
            kf_dr_load(b1, x1, pb, pa, nb, g, c + 1, bpart, bcnt);
        /* two chunks in flight: each one's buffer refilled as its MMAs end */
#pragma unroll 1
        for (; c + 1 < cf; c += 2) {
            kf_dr_mma(acc, b0, x0);
            if (c + 2 < cf)
                kf_dr_load(b0, x0, pb, pa, nb, g, c + 2, bpart, bcnt);
            kf_dr_mma(acc, b1, x1);
            if (c + 3 < cf)
                kf_dr_load(b1, x1, pb, pa, nb, g, c + 3, bpart, bcnt);
        }
        if (c < cf)
            kf_dr_mma(acc, b0, x0);
#if KF_K % 32 != 0
        if (wc1 > KF_CHF) { /* the warp's run ends with the partial chunk */
            kf_dr_load_tail(b0, x0, pb, pa, nb, g, t, bpart, bcnt);
            kf_dr_mma(acc, b0, x0);
        }
#endif
    }
#else
#pragma unroll
    for (int s = 0; s < KF_STAGES - 1; s++) {
        if (s < nkb)
            kf_dc_stage(ring + s * KF_STAGE * 2u, kf_pa, kf_pb, n0, kb0 + s, tid);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
#pragma unroll 1
    for (int kt = 0; kt < nkb; kt++) {
        asm volatile("cp.async.wait_group %0;" ::"n"(KF_STAGES - 2) : "memory");
        __syncthreads();
        const int nk = kt + KF_STAGES - 1;
        if (nk < nkb)
            kf_dc_stage(ring + (nk % KF_STAGES) * KF_STAGE * 2u, kf_pa, kf_pb, n0, kb0 + nk, tid);
        asm volatile("cp.async.commit_group;" ::: "memory");
        const unsigned st = ring + (kt % KF_STAGES) * KF_STAGE * 2u;
#pragma unroll
        for (int ks = kg; ks < KF_BK / 16; ks += KF_KG)
            kf_dc_slice(acc, st, ks, rg, lane);
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads(); /* the ring is free: the warps' sums go where it was */
#endif

    /* Each warp's accumulators as [token][column] (pitch KF_BWP: the lanes of
     * one store fall in 32 different banks), then their sum in warp 0's. */
    float *red = reinterpret_cast<float *>(kf_dsmem);
    if (tid < KF_THREADS) { /* the MMA warps (not the TMA form's producer) */
        float *mine = red + warp * (KF_MP * KF_BWP);
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int mt = 0; mt < KF_MT; mt++)
#pragma unroll
            for (int nt = 0; nt < KF_NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    mine[(nt * 8 + 2 * t + (e & 1)) * KF_BWP + rg * 64 + KF_DC_COL(mt, g, e)] =
                        acc[mt][nt][e];
    }
    __syncthreads();
    constexpr int Q = KF_MP * KF_BW / 4; /* float4s of the strip */
#pragma unroll 1
    for (int i = tid; i < Q && tid < KF_THREADS; i += KF_THREADS) {
        const int m = i / (KF_BW / 4), c = (i % (KF_BW / 4)) * 4, cg = c / 64;
        /* the K group's warps of the columns' row group, in order; the sum
         * goes to warp 0's tile (whose other row group's columns are free) */
        float4 s = *reinterpret_cast<const float4 *>(red + cg * (KF_MP * KF_BWP) + m * KF_BWP + c);
#pragma unroll
        for (int j = 1; j < KF_KG; j++) {
            const float4 v = *reinterpret_cast<const float4 *>(
                red + (cg + j * KF_RG) * (KF_MP * KF_BWP) + m * KF_BWP + c);
            s.x += v.x;
            s.y += v.y;
            s.z += v.z;
            s.w += v.w;
        }
        *reinterpret_cast<float4 *>(red + m * KF_BWP + c) = s;
#if KF_SPLIT > 1
        reinterpret_cast<float4 *>(KF_WS)[((long long)strip * KF_SPLIT + piece) * Q + i] = s;
#endif
    }
#if KF_SPLIT > 1
    /* Count in; the last block of the strip adds every piece in order. */
    __shared__ int kf_last;
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        unsigned *cnt = reinterpret_cast<unsigned *>(KF_CNT) + strip;
        const unsigned prev = atomicAdd(cnt, 1u);
        kf_last = prev == KF_SPLIT - 1;
        if (kf_last)
            *cnt = 0u; /* every piece has counted: the next launch starts from zero */
    }
    __syncthreads();
    if (!kf_last)
        return;
    __threadfence();
    {
        const float4 *ws = reinterpret_cast<const float4 *>(KF_WS) + (long long)strip * KF_SPLIT * Q;
#pragma unroll 1
        for (int i = tid; i < Q && tid < KF_THREADS; i += KF_THREADS) {
            const int m = i / (KF_BW / 4), c = (i % (KF_BW / 4)) * 4;
            float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 1
            for (int p = 0; p < KF_SPLIT; p++) {
                const float4 v = p == piece ? *reinterpret_cast<const float4 *>(red + m * KF_BWP + c)
                                            : __ldcg(ws + (long long)p * Q + i);
                s.x += v.x;
                s.y += v.y;
                s.z += v.z;
                s.w += v.w;
            }
            *reinterpret_cast<float4 *>(red + m * KF_BWP + c) = s;
        }
    }
#endif
    __syncthreads();

    /* The epilogue: 8 adjacent columns of one token a call. */
    constexpr int C8 = KF_BW / 8;
    const bool al = kf_epi_al(KF_ARGS);
#pragma unroll 1
    for (int i = tid; i < KF_M * C8 && tid < KF_THREADS; i += KF_THREADS) {
        const int m = i / C8, c = (i % C8) * 8;
        const long long col = n0 + c;
        if (col >= KF_N)
            continue;
        float v[8];
        const float4 lo = *reinterpret_cast<const float4 *>(red + m * KF_BWP + c);
        const float4 hi = *reinterpret_cast<const float4 *>(red + m * KF_BWP + c + 4);
        v[0] = lo.x;
        v[1] = lo.y;
        v[2] = lo.z;
        v[3] = lo.w;
        v[4] = hi.x;
        v[5] = hi.y;
        v[6] = hi.z;
        v[7] = hi.w;
        if (al)
            kf_epi<8, true>(v, 0LL, (long long)m, col, true, KF_ARGS);
        else
            kf_epi<8, false>(v, 0LL, (long long)m, col, true, KF_ARGS);
    }
}
