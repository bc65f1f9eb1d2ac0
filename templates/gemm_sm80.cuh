/* ---- gemm_sm80.cuh: the sm_80 GEMM template (also 8.6, 8.9, and 9.x forced) -
 *
 * One block per output tile of KF_BM x KF_BN (128 x 128, or 64 x 64 for small
 * problems), KF_WM x KF_WN warps (2 x 2; a 128 x 128 tile also 2 x 4) each
 * computing a warp tile of KF_WTM x KF_WTN by mma.sync m16n8k16 (bf16 or f16
 * in, f32 accumulate).
 *
 *   K steps of KF_BK = 32: a ring of KF_STAGES stages in shared memory, filled
 *     by cp.async (16 bytes a thread and copy, .cg: around L1); a copy that
 *     reaches past the operand's extent copies only what is inside and fills
 *     the rest with zeros (the src-size operand), so ragged M, N and K add
 *     nothing and need no other test; rows past the end copy nothing.
 *     Per step: wait for the step's group (cp.async.wait_group STAGES - 2),
 *     one block barrier (it also frees the stage read in the previous step),
 *     issue the copies of step kt + STAGES - 1 into that freed stage, then
 *     the MMAs of step kt; the copies run under STAGES - 1 steps of math.
 *   Operand tiles are stored as their memory is: a K-major operand as rows
 *     of 32 K values (64 bytes, 4 chunks of 16), an M/N-major one as 32 rows
 *     of BM / BN values. Chunk c of row r sits at chunk c ^ (r & 7) (rows of 8
 *     or more chunks) or c ^ ((r >> 1) & 3) (rows of 4): the 8 row addresses
 *     of one ldmatrix (8 consecutive rows, one chunk) then fall in 8
 *     different 16-byte bank groups, so ldmatrix is conflict free.
 *   Fragments: ldmatrix.x4 (A: one 16 x 16 fragment; B: two n8 fragments),
 *     .trans for an M-major A or an N-major B (then the 8 x 8 matrices are
 *     read K-row by K-row and transposed in flight).
 *   Tiles are walked in a swizzled raster (KF_RASTER tile rows at a time,
 *     so the blocks in flight share A rows and B columns in L2); the batch is
 *     blockIdx.z, each operand at its uniform batch stride (0: shared).
 *   Epilogue from the registers: the m16n8 accumulator fragment holds, per 8
 *     columns, 2 adjacent columns of rows lane / 4 and + 8 -- the layout of
 *     wgmma's -- so kf_gm_quad_t gives each lane 8 adjacent columns of a row
 *     and the group's kf_epi<8> (cg_gemm_epi.c) runs on them: vector loads of
 *     a bias or residual, one 16-byte store, rows past M store nothing.
 *
 * A row epilogue (KF_ROW_EPI 1, cg_gemm_epi.c: a norm or softmax of rows of
 *   N <= KF_BN; 128 x 128 tiles on 4 warps or 128 x 256 on 8, warp tiles of
 *   64 x 64 either way): a tile row spans the KF_WN warps of a warp row, so
 *   the epilogue runs twice: kf_pre's norm input x replaces the
 *   accumulators and gives per-row partial statistics (gemm_common.cuh),
 *   merged in the quad by shuffles and across the warps through shared
 *   memory (the ring's first bytes, after a barrier; a LayerNorm's M2 and
 *   softmax's sum of exponentials in a second step over x), then kf_epi on
 *   x with the row's statistics (kf_s8_row_stats).
 *
 * A SwiGLU pair (KF_DUAL 1: silu(A.Bg) * (A.Bu), 128 x 128 tiles on 4
 *   warps): the B tile holds 64 output columns of each B, interleaved so a
 *   warp's 64 B columns are 32 of the gate's then the same 32 of the up
 *   projection's (kf_s8_load_pair); the main loop is unchanged, and the
 *   epilogue hands kf_epi both accumulators of each output (fragments j and
 *   j + KF_NI / 2). The output tile is 128 x 64.
 *
 * A GEMM sibling set (KF_SIB members, cg_gemm_sm80_set.c): GEMMs of one A
 *   with their own B, N and epilogue, as one kernel whose raster walks every
 *   member's column tiles as one N range (KF_TILES_N, the generator's): a
 *   block's tile column is its member's (kf_sib_split), whose B pointer, N
 *   and B row stride its copies take (KF_SIB_B, KF_SIB_NB, KF_SIB_LDB); the
 *   epilogue helpers ("kf:member begin" .. "end") are emitted once per member
 *   in its namespace kf_s<j> and the tile's member's runs (KF_SIB_DO). Batch
 *   1, no pair, no row epilogue.
 *
 * The generator defines before this: KF_KERNEL, KF_PARAMS, KF_ARGS, KF_M,
 * KF_N, KF_K, KF_BM, KF_BN, KF_WM, KF_WN, KF_STAGES, KF_MINB (blocks per SM
 * for __launch_bounds__), KF_A_KMAJOR, KF_B_KMAJOR, KF_LDA, KF_LDB (elements
 * between the rows of the operand as stored: between M rows of a K-major A,
 * between K rows of an M-major one), KF_SA, KF_SB (batch strides in
 * elements, 0 when shared), KF_AB ("bf16" or "f16"), kf_epi<8, AL>(acc, b,
 * r, c0, ok, ...) (acc, acc1, ... when KF_DUAL, with KF_LDB2 and KF_SB2 the
 * second B's) and kf_epi_al(...); with KF_A_FOLD, cg_gemm_fold.c's kf_fold.
 */

#ifndef KF_A_FOLD
#define KF_A_FOLD 0 /* cg_gemm_fold.c's kf_fold: a norm prologue folded into B */
#endif
#ifndef KF_DUAL
#define KF_DUAL 0 /* a SwiGLU pair: two B operands (kf_pb, kf_pb2) against one A */
#endif
#define KF_BK 32
#define KF_THREADS (KF_WM * KF_WN * 32)
#define KF_WTM (KF_BM / KF_WM)
#define KF_WTN (KF_BN / KF_WN)
#define KF_MI (KF_WTM / 16) /* m16 fragments of a warp tile */
#define KF_NI (KF_WTN / 8)  /* n8 fragments of a warp tile */
#define KF_A_TILE (KF_BM * KF_BK * 2)
#define KF_B_TILE (KF_BN * KF_BK * 2)
#define KF_STAGE (KF_A_TILE + KF_B_TILE)
#define KF_TILES_M ((KF_M + KF_BM - 1) / KF_BM)
#if KF_DUAL
/* The pair (128 x 128 tiles on 4 warps): a warp's 64 B columns are the
 * gate's 32 then the up projection's 32 at the same output columns, so a
 * thread holds both of each output it computes; the output tile is 64 wide. */
#define KF_ON (KF_BN / 2)
static_assert(KF_BM == 128 && KF_BN == 128 && KF_WN == 2, "the pair takes 128 x 128 on 4 warps");
#else
#define KF_ON KF_BN
#endif
#ifndef KF_TILES_N /* a sibling set (KF_SIB) defines its members' tile columns together */
#define KF_TILES_N ((KF_N + KF_ON - 1) / KF_ON)
#endif
#define KF_KT ((KF_K + KF_BK - 1) / KF_BK)
#define KF_RASTER 8
#ifndef KF_SIB
#define KF_SIB 0 /* members of a GEMM sibling set in one kernel (cg_gemm_sm80_set.c) */
#define KF_SIB_BPTRS /* the later members' B pointers, each with its comma */
#endif
#if KF_SIB && (KF_DUAL || KF_SA != 0 || KF_SB != 0)
#error "KF_SIB: one A, plain B tiles, batch 1"
#endif

static_assert(KF_NI % 4 == 0, "the epilogue transposes 4 column groups at a time");
static_assert(KF_WTM % 16 == 0, "a warp tile is whole m16 fragments");

/* Byte offset of 16-byte chunk c of row r in a tile of C chunks a row. */
template <int C> __device__ __forceinline__ unsigned kf_s8_off(int r, int c) {
    const int x = C >= 8 ? (c ^ (r & 7)) : (c ^ ((r >> 1) & 3));
    return (unsigned)(r * C + x) * 16u;
}

/* The copies of one operand tile: R rows of C chunks from the operand as
 * stored (rows `ld` elements apart, the tile's origin at row r0, column c0
 * of an extent rows x cols), into the tile at shared address dst. */
template <int R, int C>
__device__ __forceinline__ void kf_s8_load(unsigned dst, const unsigned short *base, long long ld,
                                           long long r0, long long c0, long long rows,
                                           long long cols, int tid) {
    static_assert((R * C) % KF_THREADS == 0, "whole copies a thread");
#pragma unroll
    for (int i = 0; i < R * C / KF_THREADS; i++) {
        const int q = tid + i * KF_THREADS, r = q / C, c = q % C;
        const long long gr = r0 + r, gc = c0 + c * 8;
        long long left = gr < rows ? cols - gc : 0;
        left = left < 0 ? 0 : (left > 8 ? 8 : left);
        const unsigned short *src = left ? base + gr * ld + gc : base;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst + kf_s8_off<C>(r, c)),
                     "l"(src), "r"((int)left * 2)
                     : "memory");
    }
}

__device__ __forceinline__ void kf_s8_ldsm(unsigned a, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void kf_s8_ldsm_t(unsigned a, unsigned (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void kf_s8_mma(float (&d)[4], const unsigned (&a)[4], unsigned b0,
                                          unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." KF_AB "." KF_AB
                 ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#if KF_DUAL
/* The pair's B tile: tile column t (a K-major B: tile row t) is output
 * column (t / 64) * 32 + t % 32 of the gate (t % 64 < 32) or of the up
 * projection; the rest as kf_s8_load. */
template <int R, int C>
__device__ __forceinline__ void kf_s8_load_pair(unsigned dst, const unsigned short *pg,
                                                const unsigned short *pu, long long n0,
                                                long long k0, int tid) {
    static_assert((R * C) % KF_THREADS == 0, "whole copies a thread");
#pragma unroll
    for (int i = 0; i < R * C / KF_THREADS; i++) {
        const int q = tid + i * KF_THREADS, r = q / C, c = q % C;
        const int t = KF_B_KMAJOR ? r : c * 8;
        const bool up = t % 64 >= 32;
        const long long on = n0 + (t / 64) * 32 + t % 32;
        const unsigned short *base = up ? pu : pg;
        const long long ld = up ? KF_LDB2 : KF_LDB;
        long long gr, gc, left;
        if (KF_B_KMAJOR) { /* rows of N, chunks of K */
            gr = on;
            gc = k0 + c * 8;
            left = gr < KF_N ? KF_K - gc : 0;
        } else { /* rows of K, chunks of N */
            gr = k0 + r;
            gc = on;
            left = gr < KF_K ? KF_N - gc : 0;
        }
        left = left < 0 ? 0 : (left > 8 ? 8 : left);
        const unsigned short *src = left ? base + gr * ld + gc : base;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst + kf_s8_off<C>(r, c)),
                     "l"(src), "r"((int)left * 2)
                     : "memory");
    }
}
#endif

/* The copies of K step kt of tile (mb, nb) into the stage at sa (pb2: the
 * pair's second B; bn, ldb: B's N and row stride, KF_N and KF_LDB but in a
 * sibling set, where they are the tile's member's). */
__device__ __forceinline__ void kf_s8_stage(unsigned sa, const unsigned short *pa,
                                            const unsigned short *pb, const unsigned short *pb2,
                                            long long bn, long long ldb, int mb, int nb, int kt,
                                            int tid) {
    const long long m0 = (long long)mb * KF_BM, n0 = (long long)nb * KF_ON,
                    k0 = (long long)kt * KF_BK;
    const unsigned sb = sa + KF_A_TILE;
    if (KF_A_KMAJOR)
        kf_s8_load<KF_BM, KF_BK / 8>(sa, pa, KF_LDA, m0, k0, KF_M, KF_K, tid);
    else
        kf_s8_load<KF_BK, KF_BM / 8>(sa, pa, KF_LDA, k0, m0, KF_K, KF_M, tid);
#if KF_DUAL
    if (KF_B_KMAJOR)
        kf_s8_load_pair<KF_BN, KF_BK / 8>(sb, pb, pb2, n0, k0, tid);
    else
        kf_s8_load_pair<KF_BK, KF_BN / 8>(sb, pb, pb2, n0, k0, tid);
    (void)bn;
    (void)ldb;
#else
    (void)pb2;
    if (KF_B_KMAJOR)
        kf_s8_load<KF_BN, KF_BK / 8>(sb, pb, ldb, n0, k0, bn, KF_K, tid);
    else
        kf_s8_load<KF_BK, KF_BN / 8>(sb, pb, ldb, k0, n0, KF_K, bn, tid);
#endif
}

/* The MMAs of one stage: acc[mi][ni] += A(rows wm) . B(columns wn). */
__device__ __forceinline__ void kf_s8_math(float (&acc)[KF_MI][KF_NI][4], unsigned sa, int wm,
                                           int wn, int lane) {
    const unsigned sb = sa + KF_A_TILE;
#pragma unroll
    for (int kk = 0; kk < KF_BK / 16; kk++) {
        unsigned a[KF_MI][4], b[KF_NI][2];
#pragma unroll
        for (int mi = 0; mi < KF_MI; mi++) {
            const int m = wm * KF_WTM + mi * 16;
            if (KF_A_KMAJOR)
                kf_s8_ldsm(sa + kf_s8_off<KF_BK / 8>(m + lane % 16, kk * 2 + lane / 16), a[mi]);
            else
                kf_s8_ldsm_t(sa + kf_s8_off<KF_BM / 8>(kk * 16 + lane % 8 + (lane / 16) * 8,
                                                       m / 8 + (lane / 8) % 2),
                             a[mi]);
        }
#pragma unroll
        for (int ni = 0; ni < KF_NI; ni += 2) {
            const int n = wn * KF_WTN + ni * 8;
            unsigned r[4];
            if (KF_B_KMAJOR)
                kf_s8_ldsm(sb + kf_s8_off<KF_BK / 8>(n + lane % 8 + (lane / 16) * 8,
                                                     kk * 2 + (lane / 8) % 2),
                           r);
            else
                kf_s8_ldsm_t(sb + kf_s8_off<KF_BN / 8>(kk * 16 + lane % 8 + ((lane / 8) % 2) * 8,
                                                       n / 8 + lane / 16),
                             r);
            b[ni][0] = r[0];
            b[ni][1] = r[1];
            b[ni + 1][0] = r[2];
            b[ni + 1][1] = r[3];
        }
#pragma unroll
        for (int mi = 0; mi < KF_MI; mi++)
#pragma unroll
            for (int ni = 0; ni < KF_NI; ni++)
                kf_s8_mma(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
    }
}

/* ---- kf:member begin ---- (a sibling set's source holds from here to
 * "kf:member end" once per member, in its namespace, under its KF_N) */
#if KF_ROW_EPI
/* x of fragment (mi, j), row half h: packed (KF_ROW_PACK) or in the
 * accumulators' own registers */
#if KF_ROW_PACK
typedef unsigned kf_s8_xs_t[KF_MI][KF_NI][2];
#define KF_XS_SET(xs, mi, j, h, lo, hi) (xs[mi][j][h] = kf_gm_xpack(lo, hi))
#define KF_XS_LO(xs, mi, j, h) kf_gm_xlo(xs[mi][j][h])
#define KF_XS_HI(xs, mi, j, h) kf_gm_xhi(xs[mi][j][h])
#else
typedef float kf_s8_xs_t[KF_MI][KF_NI][4];
#define KF_XS_SET(xs, mi, j, h, lo, hi) (xs[mi][j][2 * (h)] = (lo), xs[mi][j][2 * (h) + 1] = (hi))
#define KF_XS_LO(xs, mi, j, h) xs[mi][j][2 * (h)]
#define KF_XS_HI(xs, mi, j, h) xs[mi][j][2 * (h) + 1]
#endif

/* The row epilogue's statistics (KF_ROW_EPI, a tile row spans the KF_WN
 * warps of a warp row): each lane puts the norm's input x (kf_pre) in place
 * of its accumulators and takes its rows' step-A partials over its columns,
 * merged in the quad, then through shared memory (rs: the ring, free after
 * the main loop; one slot per tile row and warp column, step B's after step
 * A's) across the warps, in warp-column order; step B runs over x in the
 * registers the same way. rst[mi][h]: the statistics of the lane's row of
 * fragment mi, half h. */
template <bool AL>
__device__ __forceinline__ void kf_s8_row_stats(const float (&acc)[KF_MI][KF_NI][4],
                                                kf_s8_xs_t &xs, int b, int mb, int nb, int wm,
                                                int wn, int lane, kf_gm_rs *rs,
                                                kf_gm_rst (&rst)[KF_MI][2], KF_PARAMS) {
    kf_gm_rs st[KF_MI][2];
#pragma unroll
    for (int mi = 0; mi < KF_MI; mi++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            kf_gm_rs s;
            kf_gm_rs_init(s);
            const int tr = wm * KF_WTM + mi * 16 + lane / 4 + 8 * h; /* the tile row */
            const long long r = (long long)mb * KF_BM + tr;
            /* the fragment as it is: pairs of columns 8j + 2 (lane % 4) */
#pragma unroll
            for (int j = 0; j < KF_NI; j++) {
                float a[2], xv[2];
                a[0] = acc[mi][j][2 * h];
                a[1] = acc[mi][j][2 * h + 1];
                const long long c = (long long)nb * KF_ON + wn * KF_WTN + 8 * j + 2 * (lane % 4);
                kf_pre<2, AL>(a, (long long)b, r < KF_M ? r : KF_M - 1, c, KF_ARGS, xv);
                const long long left = KF_N - c;
                kf_gm_rs_add_a<2>(s, xv, left < 0 ? 0 : left > 2 ? 2 : (int)left);
                KF_XS_SET(xs, mi, j, h, xv[0], xv[1]); /* x in place of the accumulators */
            }
            kf_gm_rs_lanes_a<4>(s);
            if (lane % 4 == 0)
                rs[tr * KF_WN + wn] = s;
        }
    }
    __syncthreads();
#pragma unroll
    for (int mi = 0; mi < KF_MI; mi++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int tr = wm * KF_WTM + mi * 16 + lane / 4 + 8 * h;
            st[mi][h] = rs[tr * KF_WN];
#pragma unroll
            for (int w = 1; w < KF_WN; w++)
                kf_gm_rs_merge_a(st[mi][h], rs[tr * KF_WN + w]);
        }
    }
#if KF_RS_B
    kf_gm_rs *rb = rs + KF_BM * KF_WN; /* step B's slots */
#pragma unroll
    for (int mi = 0; mi < KF_MI; mi++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int tr = wm * KF_WTM + mi * 16 + lane / 4 + 8 * h;
            kf_gm_rs s = st[mi][h];
#pragma unroll
            for (int j = 0; j < KF_NI; j++) {
                const float xv[2] = {KF_XS_LO(xs, mi, j, h), KF_XS_HI(xs, mi, j, h)};
                const long long left =
                    KF_N - ((long long)nb * KF_ON + wn * KF_WTN + 8 * j + 2 * (lane % 4));
                kf_gm_rs_add_b<2>(s, xv, left < 0 ? 0 : left > 2 ? 2 : (int)left);
            }
            kf_gm_rs_lanes_b<4>(s);
            if (lane % 4 == 0)
                rb[tr * KF_WN + wn] = s;
        }
    }
    __syncthreads();
#pragma unroll
    for (int mi = 0; mi < KF_MI; mi++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int tr = wm * KF_WTM + mi * 16 + lane / 4 + 8 * h;
#pragma unroll
            for (int w = 0; w < KF_WN; w++)
                kf_gm_rs_merge_b(st[mi][h], rb[tr * KF_WN + w]);
        }
    }
#endif
#pragma unroll
    for (int mi = 0; mi < KF_MI; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            rst[mi][h] = kf_gm_rs_final(st[mi][h]);
}
#define KF_EPI_RST(mi, h) , nullptr, &rst[mi][h]
#else
#define KF_EPI_RST(mi, h)
#endif

/* The epilogue of a warp tile from the registers (see the file's head);
 * with KF_A_FOLD (cg_gemm_fold.c) the accumulators first become the product
 * of the normalized A (kf_fold: the row's statistics, the columns' terms);
 * with KF_ROW_EPI the rows' statistics (kf_s8_row_stats) go to kf_epi. */
template <bool AL>
__device__ __forceinline__ void kf_s8_epi(float (&acc)[KF_MI][KF_NI][4], int b, int mb,
                                          int nb, int wm, int wn, int lane, KF_PARAMS) {
#if KF_ROW_EPI
    kf_gm_rst rst[KF_MI][2];
#if KF_ROW_PACK
    kf_s8_xs_t xs;
#else
    kf_s8_xs_t &xs = acc;
#endif
    {
        extern __shared__ __align__(128) unsigned char kf_dsmem[];
        kf_s8_row_stats<AL>(acc, xs, b, mb, nb, wm, wn, lane,
                            reinterpret_cast<kf_gm_rs *>(kf_dsmem), rst, KF_ARGS);
    }
#endif
#pragma unroll
    for (int mi = 0; mi < KF_MI; mi++) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
#if KF_A_FOLD
            float frs, fmu;
            {
                const long long r =
                    (long long)mb * KF_BM + wm * KF_WTM + mi * 16 + lane / 4 + 8 * h;
                kf_fold_rows(r < KF_M ? r : KF_M - 1, frs, fmu, KF_ARGS);
            }
#endif
#pragma unroll
            for (int j0 = 0; j0 < (KF_DUAL ? KF_NI / 2 : KF_NI); j0 += 4) {
                float a[8];
#if KF_ROW_EPI && KF_ROW_PACK /* x, packed: the transpose moves pairs */
                {
                    unsigned w[4];
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        w[i] = xs[mi][j0 + i][h];
                    kf_gm_quad_t4(w, lane % 4);
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        a[2 * i] = kf_gm_xlo(w[i]);
                        a[2 * i + 1] = kf_gm_xhi(w[i]);
                    }
                }
#else /* the accumulators, or x in their place (a row epilogue's f32 x) */
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    a[2 * i] = acc[mi][j0 + i][2 * h];
                    a[2 * i + 1] = acc[mi][j0 + i][2 * h + 1];
                }
                kf_gm_quad_t(a, lane % 4);
#endif
#if KF_DUAL
                /* the up projection's fragments of the same columns */
                float a1[8];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    a1[2 * i] = acc[mi][j0 + i + KF_NI / 2][2 * h];
                    a1[2 * i + 1] = acc[mi][j0 + i + KF_NI / 2][2 * h + 1];
                }
                kf_gm_quad_t(a1, lane % 4);
#endif
                const long long r =
                    (long long)mb * KF_BM + wm * KF_WTM + mi * 16 + lane / 4 + 8 * h;
                const long long c = (long long)nb * KF_ON + wn * (KF_WTN / (KF_DUAL ? 2 : 1)) +
                                    8 * (j0 + lane % 4);
                const bool ok = r < KF_M;
#if KF_A_FOLD
                float fc[8], fd[8];
                kf_fold_cols<8>(0, c, fc, fd, KF_ARGS);
                kf_fold<8>(a, frs, fmu, fc, fd);
#if KF_DUAL
                kf_fold_cols<8>(1, c, fc, fd, KF_ARGS);
                kf_fold<8>(a1, frs, fmu, fc, fd);
#endif
#endif
#if KF_DUAL
                kf_epi<8, AL>(a, a1, (long long)b, ok ? r : KF_M - 1, c, ok, KF_ARGS);
#else
                kf_epi<8, AL>(a, (long long)b, ok ? r : KF_M - 1, c, ok, KF_ARGS KF_EPI_RST(mi, h));
#endif
            }
        }
    }
}
#undef KF_EPI_RST
/* ---- kf:member end ---- */

extern "C" __global__ void __launch_bounds__(KF_THREADS, KF_MINB)
    KF_KERNEL(const unsigned short *__restrict__ kf_pa, const unsigned short *__restrict__ kf_pb,
#if KF_DUAL
              const unsigned short *__restrict__ kf_pb2,
#endif
              KF_SIB_BPTRS KF_PARAMS) {
    extern __shared__ __align__(128) unsigned char kf_dsmem[];
    KF_SETUP();
    const unsigned ring = (unsigned)__cvta_generic_to_shared(kf_dsmem);
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = warp / KF_WN, wn = warp % KF_WN;
    /* the swizzled raster: KF_RASTER tile rows at a time, down then across */
    int mb, nb;
    {
        const int t = blockIdx.x, span = KF_RASTER * KF_TILES_N, g = t / span;
        const int first = g * KF_RASTER;
        const int rows = KF_TILES_M - first < KF_RASTER ? KF_TILES_M - first : KF_RASTER;
        const int r = t - g * span;
        /* one tile column (a row epilogue's tiles): nb the constant 0 */
        mb = first + (KF_TILES_N == 1 ? r : r % rows);
        nb = KF_TILES_N == 1 ? 0 : r / rows;
    }
    const int b = blockIdx.z;
    const unsigned short *pa = kf_pa + (long long)b * KF_SA;
#if KF_SIB
    const int sj = kf_sib_split(nb); /* the tile's member; nb its own tile column */
    const unsigned short *pb = KF_SIB_B(sj);
    const long long bn = KF_SIB_NB(sj), ldb = KF_SIB_LDB(sj);
#else
    const unsigned short *pb = kf_pb + (long long)b * KF_SB;
    const long long bn = KF_N, ldb = KF_LDB;
#endif
#if KF_DUAL
    const unsigned short *pb2 = kf_pb2 + (long long)b * KF_SB2;
#else
    const unsigned short *pb2 = pb;
#endif

    float acc[KF_MI][KF_NI][4];
#pragma unroll
    for (int mi = 0; mi < KF_MI; mi++)
#pragma unroll
        for (int ni = 0; ni < KF_NI; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[mi][ni][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < KF_STAGES - 1; s++) {
        if (s < KF_KT)
            kf_s8_stage(ring + s * KF_STAGE, pa, pb, pb2, bn, ldb, mb, nb, s, tid);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
#pragma unroll 1
    for (int kt = 0; kt < KF_KT; kt++) {
        asm volatile("cp.async.wait_group %0;" ::"n"(KF_STAGES - 2) : "memory");
        __syncthreads();
        const int nk = kt + KF_STAGES - 1;
        if (nk < KF_KT)
            kf_s8_stage(ring + (nk % KF_STAGES) * KF_STAGE, pa, pb, pb2, bn, ldb, mb, nb, nk,
                        tid);
        asm volatile("cp.async.commit_group;" ::: "memory");
        kf_s8_math(acc, ring + (kt % KF_STAGES) * KF_STAGE, wm, wn, lane);
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
#if KF_ROW_EPI
    __syncthreads(); /* the ring is the row statistics' exchange from here */
#endif

#if KF_SIB /* the tile's member's epilogue */
    if (KF_SIB_AL)
        KF_SIB_DO(sj, kf_s8_epi<true>(acc, b, mb, nb, wm, wn, lane, KF_ARGS));
    else
        KF_SIB_DO(sj, kf_s8_epi<false>(acc, b, mb, nb, wm, wn, lane, KF_ARGS));
#else
    if (kf_epi_al(KF_ARGS))
        kf_s8_epi<true>(acc, b, mb, nb, wm, wn, lane, KF_ARGS);
    else
        kf_s8_epi<false>(acc, b, mb, nb, wm, wn, lane, KF_ARGS);
#endif
}
