/* ---- gemm_sm90.cuh: the sm_90a GEMM template ------------------------------
 *
 * One persistent block per SM, 384 threads in three warpgroups:
 *
 *   warpgroup 0 (producer, 40 registers): one thread walks the block's tiles
 *     and, per K step of 64, waits for a free stage of the shared-memory ring
 *     (kf_empty), arms its kf_full barrier with the stage's bytes and issues
 *     the TMA copies of the A tile (128 x 64) and the B tile (KF_BN x 64),
 *     128-byte swizzled; the part of a box outside the tensor lands as zeros,
 *     which makes a ragged K (and ragged M, N rows) add nothing;
 *   warpgroups 1 and 2 (consumers, 232 registers), in one of two schedules:
 *     cooperative (KF_PINGPONG 0, 128 x 256 tiles): rows 0-63 and 64-127 of
 *       every tile, one wgmma m64nBNk16 per 16 of K each;
 *     ping-pong (KF_PINGPONG 1, 128 x 128 tiles): alternate tiles of the
 *       block, each consumer the whole tile (two wgmma m64nBNk16 per 16 of
 *       K); their main loops take turns (named barriers 3 and 4), so one
 *       consumer's epilogue runs while the other keeps the tensor cores busy.
 *       The turns also keep the mbarrier parities unambiguous: a consumer
 *       waits on its first stage only once every earlier stage is consumed.
 *     Per stage: wait kf_full, the wgmmas from shared-memory descriptors,
 *     commit; once the previous stage's group is done (wait_group 1) its
 *     stage goes back to the producer. After the last K step the group's
 *     epilogue (kf_epi<8>, generated: the plan's scalar expressions) runs on
 *     8 adjacent columns of a row at a time and stores them as one vector,
 *     the row and column predicated, so M and N need not be tile multiples.
 *     The 8 columns come (KF_EPI_DIRECT 1, the default) from the registers:
 *     per 4 column groups and row, a 4 x 4 transpose of accumulator pairs
 *     across the quad of lanes (kf_gm_quad_t, two shfl.xor exchanges), no
 *     shared memory, barrier or call, and no branch between calls, so the
 *     compiler overlaps the whole tile's loads and math (kf_gm_epi_direct;
 *     AL: every base 16-byte aligned, tested once, and the vector accesses
 *     carry no alignment test). Or (KF_EPI_DIRECT 0, the schedule before)
 *     through a staging area in shared memory, 32 columns at a time (one
 *     per consumer, 64 x 32 floats, rows padded to 40), between warpgroup
 *     barriers, the epilogue emitted once (kf_gm_epi_chunk, not inlined).
 *     The register epilogue is inlined: it stays small because its ops have
 *     no branch per element (cg_gemm_sm90.c's kf_gm_sigmoid family); with
 *     common.cuh's branchy sigmoid an inlined tile ran to 150 KB of SASS.
 *
 * Dual (KF_DUAL 1, the SwiGLU pair silu(A.Bg) * (A.Bu)): two B operands
 * against the one A tile stream. The B tile of a stage is Bg's KF_ON
 * columns then Bu's (KF_ON = KF_BN / 2, from the maps tb and tb2), so one
 * wgmma m64nBNk16 computes both products of an output tile KF_ON wide: the
 * accumulator's column groups j < KF_BN / 16 are the gate's, the rest the
 * up projection's, at the same output columns, so a thread holds both of
 * every output element it computes. kf_epi takes both (acc, acc1); the
 * staged epilogue stages 16 columns of each (KF_EPI_COLS 16).
 *
 * Norm prologue (KF_A_NORM 1): A's rows are LayerNorm'd / RMSNorm'd in the
 * ring. A pre-pass kernel wrote each row's statistics (KF_A_STATS, f32,
 * KF_A_NSTATS a row); a consumer loads those of its rows once per tile and,
 * when a stage lands, rewrites its rows of the A tile in place through
 * kf_apro (the group's expression for A, rounded as the reference rounds the
 * norm), fences the async proxy (the wgmmas read what plain stores wrote)
 * and syncs its warpgroup before its wgmmas. Columns past K stay zero.
 *
 * Norm folded into B (KF_A_FOLD 1, cg_gemm_fold.c; the algebra in
 * gemm_fold.cuh): A is the norm's input and B the pre-pass's diag(gamma) B,
 * so the main loop is the plain one; before the epilogue reads them, kf_fold
 * turns each row's 8 accumulators into the product of the normalized A
 * (rstd times them, a LayerNorm's mean times B's column sums taken out and
 * beta's product added), the rotate-half partners at their own columns.
 * With the TMA-store epilogue a consumer fetches those terms when its tile
 * starts (rows into registers, a LayerNorm's column terms by cp.async into
 * its staging area: KF_FOLD_PRE), so their loads land under the main loop.
 * With KF_A_GSCALE 1 (an RMSNorm's fold, bf16, cooperative tiles) B is the
 * operand itself and gamma goes on A instead: each warp loads its A fragments
 * by ldmatrix, multiplies them by gamma (the K step's 64, copied by the
 * producer with the stage: kf_gm_gamma_src, KF_G_AT) and runs
 * wgmma with A from registers (kf_wgmma_rs); kf_fold's rstd is the same.
 *
 * TMA store (KF_EPI_TMA 1, one bf16/f16 output written whole): the epilogue
 * runs on the accumulator fragment as it is, two adjacent columns a call
 * (kf_epi<2> with a sink: no quad transposes, no global address per
 * vector, no bounds test), packs them into a 64 x 64 chunk of shared memory
 * in the 128-byte swizzle (conflict-free: a warp's 8 rows land in 8
 * different 16-byte columns) and one thread stores the chunk by TMA, which
 * clips rows past M and columns past N. A chunk's values are computed before
 * its buffer is waited for, so the math overlaps the previous chunk's store.
 * The buffer is the consumer's part of the staging area (8 KiB of 10).
 * Where the tiles cover N the generator defines KF_EPI_NIN 1: kf_epi's loads
 * then test no column (the test and the zeros of its predicated load were
 * ~44% of a chunk's instructions, GPT-2's out projection); and they take the
 * column as c0, so a chunk's 8 column groups are immediate offsets of one
 * address. With KF_EPI_PF 1 each consumer prefetches its rows of the
 * epilogue's row operands (a residual) into L2 when a tile starts (internal:
 * it won nothing on an H100).
 *
 * Residual by TMA (KF_EPI_RS 1 and KF_RS_LOAD 1, with the TMA-store
 * epilogue: cooperative or ping-pong, no cluster, stream-K, head view or
 * sibling set; a norm folded into B reads its column terms from L2): the
 * epilogue's residual (the map tr, a bf16/f16 operand laid out as the
 * output) comes into shared memory under the main loop. The producer issues
 * a consumer's part of a tile (its 4 chunks of 64 x 64, 32 KiB, at the place
 * of the store buffers: ring + stages, 32 KiB a consumer) with the tile's
 * middle K step, on kf_rfull[cw]; kf_epi reads its pair of the residual at
 * the very address its output pair goes to (kf_epi's rsm), so each chunk is
 * computed in place: no load of global memory waits between the store
 * barriers, the four chunks are written before one barrier, and their four
 * TMA stores are in flight together. The producer waits on kf_rfree[cw]
 * before it loads over a consumer's previous tile; the consumer's lead
 * thread arrives there once that tile's stores have read the buffers (at its
 * next tile's first K step). KF_EPI_RS 1 without a residual (KF_RS_LOAD 0,
 * internal: KF_CUDA_RECIPE_GEMM_EPI_BUF4) keeps the 4 buffers and the one
 * barrier; its lead thread waits for the previous tile's stores when the
 * epilogue starts.
 *
 * Row epilogue (KF_ROW_EPI 1, cg_gemm_epi.c: a norm or softmax of rows of
 * N <= KF_ON, the register epilogue): a row of the wgmma fragment lies in
 * one quad of lanes, so kf_gm_epi_direct runs the tile twice: kf_pre gives
 * the norm's input x for each lane's 8 columns, which replaces them in the
 * accumulator registers, and the row's partial statistics
 * (gemm_common.cuh's kf_gm_rs), merged across the quad by shuffles (a second
 * step over x in the registers for a LayerNorm's M2 or softmax's sum of
 * exponentials); then kf_epi on x with the row's statistics. No shared
 * memory.
 *
 * Tiles are walked in a swizzled raster (KF_RASTER tile rows at a time, so
 * the blocks in flight share A rows and B columns in L2), batch slowest. A
 * wave of G blocks then reads about KF_RASTER A panels and G / KF_RASTER B
 * panels from DRAM at each K step; the generator may pick KF_RASTER (else 8).
 *
 * A GEMM sibling set (KF_SIB members, cg_gemm_sm90_set.c): GEMMs of one A
 * with their own B, N, epilogue and output, as one GEMM over their
 * concatenated columns. KF_TILES_N is the sum of the members' tile columns
 * (each member's start on a tile), so the raster walks them as one N range;
 * kf_sib_split turns a tile column into its member and the member's own
 * column. The producer loads B through the member's map (KF_SIB_BMAP); the
 * epilogue helpers ("kf:member begin" .. "end") are emitted once per member
 * in its namespace kf_s<j> (its kf_epi, fold, KF_N), and the kernel's
 * epilogue block ("kf:epilogue begin" .. "end") once per member in a switch
 * on the tile's member, `tc` its output map. In 2-CTA clusters a pair's
 * two tiles share one set tile column, so one member's B (its map's boxes
 * are the half each CTA loads, as the member alone would take them).
 *
 * 2-CTA clusters (KF_CLUSTER 2, cooperative only): the two CTAs of a cluster
 * take the tiles of one pair, rows 2p and 2p + 1 of one tile column, which
 * share their B tile. Each producer loads its own A tile and HALF of the B
 * tile (the first or second half of its boxes), multicast into both CTAs'
 * rings at the same offset and counted on both CTAs' kf_full barriers, so
 * each CTA still expects a whole stage's bytes, and L2 serves 32 of its 48
 * KiB a stage (128 x 256 tiles). A stage is free only when BOTH CTAs'
 * consumers have released it (the peer's producer writes into it): each
 * consumer warp arrives on its own kf_empty and, through mapa, on the
 * peer's (the barriers count 2 x 8 arrivals). The raster walks pairs
 * (KF_RASTER / 2 pair rows at a time, the same rows in flight); a pair's
 * missing half (an odd tile-row count) still runs: its A box is the last
 * tile row's, its B half feeds the peer, its consumers arrive on the
 * barriers, and its epilogue stores nothing (every row past M). The CTAs
 * meet at a cluster barrier after the barrier setup (before any remote
 * access) and before they exit (no arrival or multicast may reach a CTA
 * that has gone).
 *
 * Operand layouts (the generator's KF_A_KMAJOR / KF_B_KMAJOR):
 *   K-major (the 64 K values of a row contiguous): one box {64, rows}; in
 *     shared memory row r is 128 bytes at r * 128; a wgmma descriptor walks K
 *     by 32 bytes, the 8-row groups are 1024 bytes apart (SBO).
 *   MN-major (M or N contiguous; wgmma's transpose bit): boxes {64, 64} of
 *     64 M/N values x 64 K rows, each 8 KiB; K walks by 16 rows (2048 bytes),
 *     8-row K groups are 1024 bytes apart (SBO), 64-wide M/N atoms 8 KiB
 *     apart (LBO).
 *
 * The generator defines before this: KF_KERNEL, KF_PARAMS, KF_ARGS, KF_M,
 * KF_N, KF_K, KF_BATCH, KF_BN, KF_HEAD_D (a head-split epilogue: kf_epi also gets the
 * rotate-half partners accp), KF_STAGES, KF_PINGPONG, KF_A_KMAJOR, KF_B_KMAJOR,
 * KF_A_BATCHED, KF_B_BATCHED, KF_DUAL, KF_A_NORM, KF_EPI_DIRECT, kf_wgmma(d, da, db),
 * kf_epi<8, AL>(acc, b, r, c0, ok, ...) (acc, acc1, ... when KF_DUAL) and
 * kf_epi_al(...) and gemm_common.cuh's kf_gm_quad_t; with KF_A_NORM also
 * KF_A_NSTATS, KF_A_NCV, KF_A_STATS, kf_a_to_f32, kf_f32_to_a, kf_apro_cols and
 * kf_apro<VV>(...); with stream-K KF_SK (1 or 2), KF_SK_GMAX, KF_WS (the
 * PARTIALS param) and KF_CNT (the COUNTERS param); with KF_EPI_PF 1 also
 * kf_epi_pf(b, r, c0, n, ...) (the row operands' L2 prefetch); all
 * after templates/hopper.cuh (kf_tmap, the mbarrier, TMA and descriptor
 * helpers).
 */

#ifndef KF_A_FOLD
#define KF_A_FOLD 0 /* cg_gemm_fold.c's kf_fold: the norm folded into B */
#endif
#ifndef KF_A_GSCALE
#define KF_A_GSCALE 0 /* with KF_A_FOLD: gamma on A's fragments, wgmma with A from registers */
#endif
#if KF_A_GSCALE && (!KF_A_FOLD || !KF_A_KMAJOR || KF_FOLD_LN || KF_SK || KF_PINGPONG || \
                    KF_EPI_RS || KF_BN != 256 || !KF_EPI_TMA || KF_K % 8)
#error "KF_A_GSCALE: an RMSNorm's fold, A K-major, cooperative 128 x 256 tiles, TMA store"
#endif
#ifndef KF_EPI_TMA
#define KF_EPI_TMA 0 /* the epilogue's output through shared memory by TMA stores */
#endif
#ifndef KF_TMA_HEADS
#define KF_TMA_HEADS 0 /* with KF_EPI_TMA and KF_HEAD_D: the output is the head view
                          [batch, H, S, D], S = KF_TMA_S (a 4-D output map) */
#endif
#ifndef KF_CLUSTER
#define KF_CLUSTER 1 /* CTAs of a cluster: 1, or 2 (tile pairs sharing B) */
#endif
#ifndef KF_DESC_STEP
#define KF_DESC_STEP 0 /* 1 (the generator's default) steps the consumers' wgmma
                          descriptors by constant adds from the ring's (dda0, ddb0); 0
                          (KF_CUDA_RECIPE_GEMM_DESC_REBUILD) builds each from its shared
                          address every K step */
#endif
#ifndef KF_PP_VARYING
#define KF_PP_VARYING 0 /* ping-pong: 1 (KF_CUDA_RECIPE_GEMM_PP_VARYING) counts a consumer's
                           tiles from its index as it is, the form before the shuffle */
#endif
#ifndef KF_PP_EARLY
#define KF_PP_EARLY 0 /* ping-pong: 1 passes the turn once a consumer's last wgmmas are
                         issued and takes it after the tile's loads; 0 (the default) passes
                         it once they are done and takes it when a tile starts */
#endif
#ifndef KF_EPI_PF
#define KF_EPI_PF 0 /* the TMA-store or register epilogue: 1 prefetches the epilogue's row
                       operands (a residual) of a consumer's rows of a tile into L2 when the
                       tile starts (the generated kf_epi_pf), so its loads hit L2 under the
                       main loop */
#endif
#ifndef KF_EPI_PK
#define KF_EPI_PK 0 /* a SwiGLU pair's register epilogue: 1 on packed pairs (internal) */
#endif
#ifndef KF_EPI_RS
#define KF_EPI_RS 0 /* the TMA-store epilogue: 1 computes its 4 chunks in place in 4 store
                       buffers, the residual (with KF_RS_LOAD 1) loaded into them by TMA
                       under the main loop (see above) */
#endif
#ifndef KF_RS_LOAD
#define KF_RS_LOAD 0 /* with KF_EPI_RS: the epilogue has a residual (the map tr) */
#endif
#if KF_EPI_RS && (!KF_EPI_TMA || KF_CLUSTER != 1 || KF_TMA_HEADS || KF_HEAD_D || KF_DUAL ||      \
                  KF_SIB || KF_EPI_AHEAD || (defined(KF_SK) && KF_SK))
#error "KF_EPI_RS: the TMA-store epilogue, one CTA, no head view, pair, set, ahead or SK"
#endif
#ifndef KF_EPI_CS
#define KF_EPI_CS 0 /* the TMA-store epilogue: its column operands (a bias, this many) copied
                       into the staging area when a tile starts (the generated
                       kf_epi_cs_fetch), read there by kf_epi (its csm) */
#endif
#if KF_EPI_CS && (!KF_EPI_TMA || KF_EPI_RS || KF_HEAD_D || KF_DUAL || KF_SIB || KF_A_FOLD ||      \
                  (defined(KF_SK) && KF_SK))
#error "KF_EPI_CS: the TMA-store epilogue, no chunk buffers, head view, pair, set, fold or SK"
#endif
#ifndef KF_EPI_AHEAD
#define KF_EPI_AHEAD 0 /* the TMA-store epilogue: 1 computes two chunks' values before it
                          stores the first (kf_gm_epi_tma); 0 (the default) chunk by chunk */
#endif
#if KF_CLUSTER != 1 && (KF_CLUSTER != 2 || (KF_EPI_TMA && KF_TMA_HEADS))
#error "KF_CLUSTER: 1, or 2 (not with the head view's TMA-store output)"
#endif
#define KF_BM 128
#define KF_BK 64
#define KF_A_BYTES (KF_BM * KF_BK * 2)
#define KF_B_BYTES (KF_BN * KF_BK * 2)
#define KF_STAGE_BYTES (KF_A_BYTES + KF_B_BYTES)
#define KF_TILES_M ((KF_M + KF_BM - 1) / KF_BM)
#if KF_DUAL
#define KF_ON (KF_BN / 2) /* output columns of a tile: gate and up share the B tile */
#else
#define KF_ON KF_BN
#endif
#ifndef KF_TILES_N /* a sibling set (KF_SIB) defines its members' tile columns together */
#define KF_TILES_N ((KF_N + KF_ON - 1) / KF_ON)
#endif
#ifndef KF_SIB
#define KF_SIB 0    /* members of a GEMM sibling set in one kernel (cg_gemm_sm90_set.c) */
#define KF_SIB_NS0  /* where the shared epilogue helpers live: member 0's namespace */
#endif
#if KF_SIB && (KF_DUAL || KF_A_NORM || KF_BATCH != 1)
#error "KF_SIB: one A, plain B tiles, batch 1"
#endif
#define KF_KT ((KF_K + KF_BK - 1) / KF_BK)
#define KF_TILES (KF_TILES_M * KF_TILES_N * KF_BATCH)
#ifndef KF_RASTER
/* tile rows the raster walks at a time (the generator's: 16 with
 * KF_CUDA_RECIPE_GEMM_RASTER_SQ at 128 x 256 tiles on 132 SMs) */
#define KF_RASTER 8
#endif
#if KF_RASTER < KF_CLUSTER || KF_RASTER % KF_CLUSTER
#error "KF_RASTER: a multiple of KF_CLUSTER"
#endif
/* What a cluster walks: tile pairs (rows 2p, 2p + 1) when KF_CLUSTER 2. */
#define KF_UNITS_M ((KF_TILES_M + KF_CLUSTER - 1) / KF_CLUSTER)
#define KF_UNITS (KF_UNITS_M * KF_TILES_N * KF_BATCH)
#define KF_RASTER_U (KF_RASTER / KF_CLUSTER)
/* Stream-K (KF_SK 1, cooperative, no cluster): the tiles after the whole
 * waves but one (all of them when there are fewer tiles than blocks: the
 * decode shapes) are not dealt out whole; their K steps, tile after tile,
 * are cut into one even range per block (kf_gm_work), so the last wave is
 * as full as the others. A range's piece of a tile short of its whole K
 * (a segment) ends in kf_gm_sk_end: each consumer writes its f32 partial
 * (its 64 rows, rows past M skipped) to the block's slot in the workspace
 * KF_WS (two a block: its first and its last tile) and adds its K steps to
 * its tile half's counter in KF_CNT; the arrival that completes the tile's
 * K adds the partials in block order (the same bits whoever arrives last),
 * sets the counter back to zero (no memset per run) and runs the epilogue.
 * Nothing waits on another block. KF_SK_GMAX: the most blocks the
 * workspace was sized for.
 *
 * KF_SK 2 (fewer tiles than blocks: decode shapes) deals the K steps out
 * interleaved instead: each tile's S = G / KF_TILES blocks (capped at
 * KF_KT) take steps j, j + S, j + 2S, ..., so at any moment the S blocks of
 * a tile read S adjacent 128-byte pieces of each of B's rows together
 * (contiguous runs of DRAM, where even ranges had every block read its own
 * far part of each row: 1.0 TB/s on an H200 for M = 16 x 4096 x 4096). The
 * partials, counters and the finishing block are as above (one segment a
 * block, slot 0; the sum in block order). */
#ifndef KF_SK
#define KF_SK 0
#endif
#if KF_SK && (KF_PINGPONG || KF_CLUSTER != 1)
#error "KF_SK: the cooperative schedule without clusters"
#endif
#if KF_PINGPONG
#define KF_ACC KF_BN     /* accumulators per thread: two m64 halves */
#define KF_HALVES 2
#define KF_EMPTY_ARRIVALS 4 /* the 4 warps of the consumer that read the stage */
#else
#define KF_ACC (KF_BN / 2)
#define KF_HALVES 1
#define KF_EMPTY_ARRIVALS 8 /* the 8 warps of both consumers */
#endif
#if KF_DUAL
#define KF_EPI_COLS 16 /* output columns staged at a time, gate at 0.., up at 16.. */
#else
#define KF_EPI_COLS 32 /* columns staged at a time */
#endif
#define KF_EPI_LD 40   /* floats per staged row */
#if KF_EPI_RS
static_assert(KF_HALVES * KF_ON == 256, "KF_EPI_RS: a consumer's 4 chunks of 64 x 64");
#endif
#define KF_EPI_FLOATS (64 * KF_EPI_LD) /* one consumer's staging area */
#if KF_A_GSCALE
/* A stage's 64 gammas (KF_A_GSCALE): 128 bytes a stage past both consumers'
 * staging areas, copied by the producer with the stage's tiles */
#define KF_G_AT (KF_STAGES * KF_STAGE_BYTES + 2u * KF_EPI_FLOATS * 4u)
#endif

/* A box of an operand: batched maps take the batch as their third coordinate. */
template <int BATCHED>
__device__ __forceinline__ void kf_gm_box(unsigned dst, const kf_tmap *map, int c0, int c1, int b,
                                          unsigned bar) {
    if (BATCHED)
        kf_hp_tma3(dst, map, c0, c1, b, bar);
    else
        kf_hp_tma2(dst, map, c0, c1, bar);
}
/* The same, multicast to both CTAs of the cluster (KF_CLUSTER 2). */
template <int BATCHED>
__device__ __forceinline__ void kf_gm_box_mc(unsigned dst, const kf_tmap *map, int c0, int c1,
                                             int b, unsigned bar) {
    if (BATCHED)
        kf_hp_tma3_mc(dst, map, c0, c1, b, bar, (unsigned short)3);
    else
        kf_hp_tma2_mc(dst, map, c0, c1, bar, (unsigned short)3);
}
/* Box of the B tile: multicast when the cluster shares B, else the CTA's own. */
template <int BATCHED>
__device__ __forceinline__ void kf_gm_box_b(unsigned dst, const kf_tmap *map, int c0, int c1,
                                            int b, unsigned bar) {
    if (KF_CLUSTER == 2)
        kf_gm_box_mc<BATCHED>(dst, map, c0, c1, b, bar);
    else
        kf_gm_box<BATCHED>(dst, map, c0, c1, b, bar);
}
/* The 128 threads of consumer warpgroup cw (named barrier 1 + cw). */
__device__ __forceinline__ void kf_gm_wg_sync(int cw) {
    asm volatile("bar.sync %0, 128;" ::"r"(1 + cw) : "memory");
}
/* The wgmma descriptor of K slice kk of stage s's B tile (at shared address
 * sb): stepped from the ring's (ddb0) by constant adds with KF_DESC_STEP,
 * else built from its address. */
__device__ __forceinline__ unsigned long long kf_gm_desc_b(unsigned sb, int s, int kk,
                                                           unsigned long long ddb0) {
#if KF_DESC_STEP
    (void)sb;
    return ddb0 + (unsigned long long)(((unsigned)s * KF_STAGE_BYTES) >> 4) +
           (unsigned long long)(KF_B_KMAJOR ? kk * 2u : kk * 128u);
#else
    (void)s;
    (void)ddb0;
    return KF_B_KMAJOR ? kf_hp_desc(sb + kk * 32u, 16u, 1024u)
                       : kf_hp_desc(sb + kk * 2048u, 8192u, 1024u);
#endif
}


/* The fold with the TMA-store epilogue (KF_FOLD_PRE): a consumer loads the
 * statistics of its rows of a tile into registers, and a LayerNorm's column
 * terms c, d of the tile's KF_ON columns into the 2 KiB of its staging area
 * past the store buffer (cp.async), when the tile starts, so the loads land
 * under the main loop. Loaded per column group in the epilogue, they left
 * the fold's GEMM 15% behind the bias-only one at K = 1024 (H200, ncu:
 * GPT-2's Q/K/V 171 us against 148 for cuBLASLt after the prologue kernel). */
#if KF_EPI_CS
#define KF_CS_AT 8192u /* the column operands' slots: past the 64 x 64 bf16 store buffer */
static_assert(KF_EPI_CS * KF_ON * 2 <= KF_EPI_FLOATS * 4 - 8192, "the column slots fit");
#endif
#if KF_A_FOLD && KF_EPI_TMA
#define KF_FOLD_PRE 1
#else
#define KF_FOLD_PRE 0
#endif
/* ---- kf:member begin ----
 * From here to "member end" the epilogue's helpers: a GEMM sibling set's
 * source (cg_gemm_sm90_set.c) emits this part once per member, in the
 * member's namespace kf_s<j> after its own kf_epi and fold, with KF_N its N. */
#if KF_FOLD_PRE && KF_FOLD_LN && !KF_EPI_RS
#define KF_FOLD_COLS_AT 8192u /* past the 64 x 64 bf16 store buffer */
static_assert(KF_ON * 8 <= KF_EPI_FLOATS * 4 - 8192, "the column terms fit the staging area");
/* c[col0 + i] to dst + 4 i and d[col0 + i] to dst + 4 (KF_ON + i), zeros past N.
 * The last tile's copies to the same addresses land first: its epilogue waited
 * for them where it read them, but a tile that ran no epilogue (a stream-K
 * segment) did not. */
__device__ __forceinline__ void kf_gm_fold_cols_fetch(unsigned dst, long long col0, int tid,
                                                      KF_PARAMS) {
    asm volatile("cp.async.wait_all;" ::: "memory");
#pragma unroll
    for (int i = tid; i < KF_ON; i += 128) {
        const long long c = col0 + i;
        const unsigned n = c < KF_N ? 4u : 0u;
        const float *src = KF_FOLD_CD + (c < KF_N ? c : 0);
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst + 4u * i),
                     "l"(__cvta_generic_to_global(src)), "r"(n)
                     : "memory");
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(
                         dst + 4u * (KF_ON + i)),
                     "l"(__cvta_generic_to_global(src + KF_N)), "r"(n)
                     : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}
#endif

#if !KF_EPI_DIRECT
/* The epilogue of one staged chunk: rows r0.. (64), columns c0.. (KF_EPI_COLS)
 * of batch b, 8 columns per thread and step. */
__device__ __noinline__ void kf_gm_epi_chunk(const float *stg, int b, long long r0, long long c0,
                                             int tid, KF_PARAMS) {
    /* Unrolled (2 steps, 1 when dual): both steps' loads are in flight
     * together; the epilogue runs while the tensor cores wait, and it was
     * latency-bound (H100, b8a1d69: ~18 us a tile). */
#pragma unroll
    for (int it = 0; it < 64 * (KF_EPI_COLS / 8) / 128; it++) {
        const int i = tid + 128 * it;
        const int row = i / (KF_EPI_COLS / 8), cg = i % (KF_EPI_COLS / 8);
        const long long r = r0 + row, c = c0 + cg * 8;
        if (r >= KF_M || c >= KF_N)
            continue;
        const float4 lo = *reinterpret_cast<const float4 *>(stg + row * KF_EPI_LD + cg * 8);
        const float4 hi = *reinterpret_cast<const float4 *>(stg + row * KF_EPI_LD + cg * 8 + 4);
        const float a[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#if KF_DUAL
        const float4 lo1 = *reinterpret_cast<const float4 *>(stg + row * KF_EPI_LD + 16 + cg * 8);
        const float4 hi1 =
            *reinterpret_cast<const float4 *>(stg + row * KF_EPI_LD + 16 + cg * 8 + 4);
        const float a1[8] = {lo1.x, lo1.y, lo1.z, lo1.w, hi1.x, hi1.y, hi1.z, hi1.w};
        kf_epi<8, false>(a, a1, (long long)b, r, c, true, KF_ARGS);
#else
        kf_epi<8, false>(a, (long long)b, r, c, true, KF_ARGS);
#endif
    }
}
#endif

#ifndef KF_ROW_RS
#define KF_ROW_RS 0
#endif
#if KF_ROW_RS && (!KF_ROW_EPI || KF_EPI_TMA || KF_EPI_RS || !KF_EPI_DIRECT || KF_CLUSTER != 1 ||  \
                  KF_SK || KF_DUAL || KF_HALVES * KF_ON > 256)
#error "KF_ROW_RS: a row epilogue in the tile, the register epilogue, one CTA, no SK or pair"
#endif
#if KF_ROW_RS
/* The row epilogue's residual in shared memory (KF_ROW_RS): a consumer's
 * rows of it (64 KF_HALVES rows of KF_ON columns, at most 32 KiB at rbuf,
 * where the 4 chunk buffers of KF_EPI_RS sit), row rl at rl * 2 KF_ON bytes,
 * its 16-byte group j at (j ^ (rl & 7)) * 16: kf_pre's reads of a pair by
 * the quad's lanes of 8 rows then fall in 32 different banks. Copied by
 * cp.async when a tile starts, so they land under the main loop; each lane
 * copies the groups j = 4 i + lane % 4 of its rows (the quad's rows), read
 * by its quad after cp.async.wait_all and __syncwarp. Rows past M copy row
 * M - 1 (the epilogue stores none of them); groups past N copy nothing. */
__device__ __forceinline__ unsigned kf_gm_row_rs_at(unsigned rbuf, unsigned rl, unsigned j) {
    return rbuf + rl * (2u * KF_ON) + ((j ^ (rl & 7u)) << 4);
}
__device__ __forceinline__ void kf_gm_row_rs_fetch(unsigned rbuf, int b, int mb, int nb, int cw,
                                                   int warp, int lane, KF_PARAMS) {
#pragma unroll
    for (int hf = 0; hf < KF_HALVES; hf++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const unsigned rl = (unsigned)(hf * 64 + warp * 16 + lane / 4 + 8 * h);
            const long long r =
                (long long)mb * KF_BM + (KF_PINGPONG ? hf : cw) * 64 + warp * 16 + lane / 4 + 8 * h;
#pragma unroll
            for (int i = 0; i < KF_ON / 32; i++) {
                const unsigned j = (unsigned)(4 * i + lane % 4);
                const long long c0 = (long long)nb * KF_ON + 8 * j;
                const auto *src =
                    kf_row_rs_src((long long)b, r < KF_M ? r : KF_M - 1, c0 < KF_N ? c0 : 0, KF_ARGS);
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(
                                 kf_gm_row_rs_at(rbuf, rl, j)),
                             "l"(__cvta_generic_to_global(src)), "r"(c0 < KF_N ? 16u : 0u)
                             : "memory");
            }
        }
}
#define KF_ROW_RS_PARAM unsigned rbuf,
#define KF_ROW_RS_BUF (unsigned)__cvta_generic_to_shared(stg),
#else
#define KF_ROW_RS_PARAM
#define KF_ROW_RS_BUF
#endif

#if KF_A_FOLD
/* The fold's row statistics of the lane's two rows (h) of the 64 from
 * `rows`, once for all their column groups (a row past M reads row M - 1). */
__device__ __forceinline__ void kf_gm_fold_rows(long long rows, int warp, int lane, float *frs,
                                                float *fmu, KF_PARAMS) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const long long r = rows + warp * 16 + lane / 4 + 8 * h;
        kf_fold_rows(r < KF_M ? r : KF_M - 1, frs[h], fmu[h], KF_ARGS);
    }
}
#endif

#if KF_EPI_PK
#if !KF_DUAL || KF_A_FOLD || KF_ROW_EPI || !KF_EPI_DIRECT || KF_EPI_TMA || KF_HEAD_D
#error "KF_EPI_PK: the register epilogue of a SwiGLU pair, no fold, row epilogue or head view"
#endif
/* The dual's register epilogue on packed pairs (KF_EPI_PK 1: a SwiGLU pair
 * in 2-CTA clusters, unless internal KF_CUDA_RECIPE_GEMM_DUAL_F32T, with one
 * bf16/f16 output of the product's dtype, N a multiple of 8, no fold):
 * kf_epi<2> runs on the fragment as it is (the gate's pair and the up
 * projection's, at the same two columns), its two values go into one word
 * (kf_gm_pack2), and the quad transpose moves the words (kf_gm_quad_t4), so
 * per 4 column groups and row a lane has its 8 adjacent columns after 4
 * shuffles, where transposing both accumulators' floats before kf_epi<8>
 * (kf_gm_epi_direct, the pair's other epilogue) takes 16 and their selects; then one 16-byte store at kf_epi_out. AL as
 * the TMA-store epilogue takes it: the executor binds every pointer of a
 * GEMM kernel 16-byte aligned, and N is a multiple of 8. Fewer instructions;
 * measured slower on one CTA, faster in clusters (codegen/cuda/recipe_gemm.c
 * says where). */
__device__ __forceinline__ void kf_gm_epi_pk(const float (&d)[KF_ACC], int b, int mb, int nb,
                                             int cw, int warp, int lane, KF_PARAMS) {
#pragma unroll
    for (int hf = 0; hf < KF_HALVES; hf++) {
        const long long rows = (long long)mb * KF_BM + (KF_PINGPONG ? hf : cw) * 64;
#pragma unroll
        for (int j0 = 0; j0 < KF_ON / 8; j0 += 4) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                /* a row past M runs at row M - 1 and stores nothing */
                const long long r = rows + warp * 16 + lane / 4 + 8 * h;
                const bool ok = r < KF_M;
                unsigned w[4];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int g = hf * (KF_BN / 2) + 4 * (j0 + i) + 2 * h;
                    const int u = g + 4 * (KF_ON / 8); /* the up projection's group */
                    const float a[2] = {d[g], d[g + 1]}, a1[2] = {d[u], d[u + 1]};
                    float o[2];
                    kf_epi<2, true, true>(a, a1, (long long)b, ok ? r : KF_M - 1,
                                          (long long)nb * KF_ON + 8 * (j0 + i) + 2 * (lane % 4), ok,
                                          KF_ARGS, o);
                    w[i] = kf_gm_pack2(o[0], o[1]);
                }
                kf_gm_quad_t4(w, lane % 4);
                const long long c = (long long)nb * KF_ON + 8 * (j0 + lane % 4);
                if (ok && (KF_EPI_NIN || c < KF_N))
                    *reinterpret_cast<uint4 *>(kf_epi_out((long long)b, r, c, KF_ARGS)) =
                        make_uint4(w[0], w[1], w[2], w[3]);
            }
        }
    }
}
#endif

#if KF_EPI_DIRECT
/* The epilogue from the registers: per 4 column groups and row, a transpose
 * within the quad gives each lane 8 adjacent columns, which go through
 * kf_epi<8> (vector loads of a bias or residual, one 16-byte store of
 * bf16), no shared memory and no barrier, and no branch between calls, so
 * the compiler overlaps the whole tile's loads and math (H100: the staged
 * epilogue's chunks each waited on their own loads between two barriers).
 * d: the consumer's accumulators of tile (b, mb, nb); cw its index. */
template <bool AL>
__device__ __forceinline__ void kf_gm_epi_direct(float (&d)[KF_ACC], int b, int mb, int nb,
                                                 int cw, int warp, int lane,
                                                 KF_ROW_RS_PARAM KF_PARAMS) {
#if KF_ROW_EPI /* its tile holds whole rows: nb is 0 (kf_gm_tile) */
    static_assert(KF_TILES_N == 1, "a row epilogue: one tile column");
#endif
#if KF_ROW_RS
    /* the tile's residual, copied when it started, is in (the quad's copies) */
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncwarp();
#endif
#if KF_ROW_EPI
    /* x of column pair (j, h) of half hf: packed (KF_ROW_PACK) or in d */
#if KF_ROW_PACK
    unsigned xp[KF_ACC / 2];
#define KF_X_SET(hf, j, h, lo, hi) (xp[(hf) * (KF_BN / 4) + 2 * (j) + (h)] = kf_gm_xpack(lo, hi))
#define KF_X_LO(hf, j, h) kf_gm_xlo(xp[(hf) * (KF_BN / 4) + 2 * (j) + (h)])
#define KF_X_HI(hf, j, h) kf_gm_xhi(xp[(hf) * (KF_BN / 4) + 2 * (j) + (h)])
#else
#define KF_X_SET(hf, j, h, lo, hi)                                                                \
    (d[(hf) * (KF_BN / 2) + 4 * (j) + 2 * (h)] = (lo),                                            \
     d[(hf) * (KF_BN / 2) + 4 * (j) + 2 * (h) + 1] = (hi))
#define KF_X_LO(hf, j, h) d[(hf) * (KF_BN / 2) + 4 * (j) + 2 * (h)]
#define KF_X_HI(hf, j, h) d[(hf) * (KF_BN / 2) + 4 * (j) + 2 * (h) + 1]
#endif
#endif
#pragma unroll
    for (int hf = 0; hf < KF_HALVES; hf++) {
        const long long rows = (long long)mb * KF_BM + (KF_PINGPONG ? hf : cw) * 64;
#if KF_A_FOLD
        float frs[2], fmu[2];
        kf_gm_fold_rows(rows, warp, lane, frs, fmu, KF_ARGS);
#endif
#if KF_ROW_EPI
        /* The row epilogue (the tile holds whole rows, N <= KF_ON): a first
         * pass over the fragment as it is (pairs of columns: kf_pre<2>, no
         * transposes, which the compiler would hoist beside the live
         * accumulators) puts the norm's input x in place of the
         * accumulators and takes its two rows' step-A partials; a row lies
         * in the quad, which merges them; step B runs over x in the
         * registers; then the epilogue with the rows' statistics. */
        kf_gm_rst rst[2];
        {
            /* KF_RS_P partials a row (column groups j % KF_RS_P): the sums'
             * dependency chains a quarter as long, merged in a fixed order */
            kf_gm_rs rs[2][KF_RS_P];
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int p = 0; p < KF_RS_P; p++)
                    kf_gm_rs_init(rs[h][p]);
            /* the fragment as it is: pairs of columns 8j + 2 (lane % 4) */
#pragma unroll
            for (int j = 0; j < KF_ON / 8; j++) {
                const long long c = (long long)nb * KF_ON + 8 * j + 2 * (lane % 4),
                                left = KF_N - c;
                const int nv = left < 0 ? 0 : left > 2 ? 2 : (int)left;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float a[2], xv[2];
                    a[0] = d[hf * (KF_BN / 2) + 4 * j + 2 * h];
                    a[1] = d[hf * (KF_BN / 2) + 4 * j + 2 * h + 1];
                    const long long r = rows + warp * 16 + lane / 4 + 8 * h;
#if KF_ROW_RS
                    /* the residual's pair of columns c, c + 1 in shared memory */
                    const unsigned rsm =
                        kf_gm_row_rs_at(rbuf, (unsigned)(hf * 64 + warp * 16 + lane / 4 + 8 * h),
                                        (unsigned)j) +
                        4u * (unsigned)(lane % 4);
                    kf_pre<2, AL>(a, (long long)b, r < KF_M ? r : KF_M - 1, c, KF_ARGS, xv, rsm);
#else
                    kf_pre<2, AL>(a, (long long)b, r < KF_M ? r : KF_M - 1, c, KF_ARGS, xv);
#endif
                    kf_gm_rs_add_a<2>(rs[h][j % KF_RS_P], xv, nv);
                    KF_X_SET(hf, j, h, xv[0], xv[1]); /* x in place of the accumulators */
                }
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                kf_gm_rs_merge_p<false>(rs[h]);
                kf_gm_rs_lanes_a<4>(rs[h][0]);
#pragma unroll
                for (int p = 1; p < KF_RS_P; p++) /* step B's partials take the row's step A */
                    rs[h][p] = rs[h][0];
            }
#if KF_RS_B
#pragma unroll
            for (int j = 0; j < KF_ON / 8; j++) {
                const long long left = KF_N - ((long long)nb * KF_ON + 8 * j + 2 * (lane % 4));
                const int nv = left < 0 ? 0 : left > 2 ? 2 : (int)left;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float xv[2] = {KF_X_LO(hf, j, h), KF_X_HI(hf, j, h)};
                    kf_gm_rs_add_b<2>(rs[h][j % KF_RS_P], xv, nv);
                }
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                kf_gm_rs_merge_p<true>(rs[h]);
                kf_gm_rs_lanes_b<4>(rs[h][0]);
            }
#endif
#pragma unroll
            for (int h = 0; h < 2; h++)
                rst[h] = kf_gm_rs_final(rs[h][0]);
        }
#define KF_EPI_RST(h) , nullptr, &rst[h]
#else
#define KF_EPI_RST(h)
#endif
#pragma unroll
        for (int j0 = 0; j0 < KF_ON / 8; j0 += 4) {
#if KF_A_FOLD
            /* and its column terms, once for both rows (the partners: their
             * own columns, c ^ D / 2) */
            const long long cf = (long long)nb * KF_ON + 8 * (j0 + lane % 4);
            float fc[8], fd[8];
            kf_fold_cols<8>(0, cf, fc, fd, KF_ARGS);
#if KF_DUAL
            float fc1[8], fd1[8];
            kf_fold_cols<8>(1, cf, fc1, fd1, KF_ARGS);
#endif
#if KF_HEAD_D
            float fcp[8], fdp[8];
            kf_fold_cols<8>(0, cf ^ (KF_HEAD_D / 2), fcp, fdp, KF_ARGS);
#endif
#endif
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float a[8];
#if KF_ROW_EPI && KF_ROW_PACK /* x, packed: the transpose moves pairs */
                {
                    unsigned w[4];
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        w[i] = xp[hf * (KF_BN / 4) + 2 * (j0 + i) + h];
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
                    a[2 * i] = d[hf * (KF_BN / 2) + 4 * (j0 + i) + 2 * h];
                    a[2 * i + 1] = d[hf * (KF_BN / 2) + 4 * (j0 + i) + 2 * h + 1];
                }
                kf_gm_quad_t(a, lane % 4);
#endif
#if KF_DUAL
                float a1[8];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    a1[2 * i] = d[hf * (KF_BN / 2) + 4 * (j0 + i + KF_ON / 8) + 2 * h];
                    a1[2 * i + 1] =
                        d[hf * (KF_BN / 2) + 4 * (j0 + i + KF_ON / 8) + 2 * h + 1];
                }
                kf_gm_quad_t(a1, lane % 4);
#endif
#if KF_HEAD_D
                /* Head-split (KF_HEAD_D): the rotate-half partners of these
                 * columns, c ^ KF_HEAD_D / 2: column groups j0 ^ KF_HEAD_D / 16
                 * (a tile holds whole heads), the same lane after the
                 * transpose. */
                float ap[8];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int jp = (j0 ^ (KF_HEAD_D / 16)) + i;
                    ap[2 * i] = d[hf * (KF_BN / 2) + 4 * jp + 2 * h];
                    ap[2 * i + 1] = d[hf * (KF_BN / 2) + 4 * jp + 2 * h + 1];
                }
                kf_gm_quad_t(ap, lane % 4);
#endif
                /* A row past M runs at row M - 1 and stores nothing:
                 * no branch around the call (a column past N loads
                 * and stores nothing by kf_epi's own tests). */
                const long long r = rows + warp * 16 + lane / 4 + 8 * h;
                const long long c = (long long)nb * KF_ON + 8 * (j0 + lane % 4);
                const bool ok = r < KF_M;
#if KF_A_FOLD
                /* the product of the normalized A from that of A's input */
                kf_fold<8>(a, frs[h], fmu[h], fc, fd);
#if KF_DUAL
                kf_fold<8>(a1, frs[h], fmu[h], fc1, fd1);
#endif
#if KF_HEAD_D
                kf_fold<8>(ap, frs[h], fmu[h], fcp, fdp);
#endif
#endif
#if KF_DUAL
                kf_epi<8, AL>(a, a1, (long long)b, ok ? r : KF_M - 1, c, ok, KF_ARGS);
#elif KF_HEAD_D
                kf_epi<8, AL>(a, ap, (long long)b, ok ? r : KF_M - 1, c, ok, KF_ARGS);
#else
                kf_epi<8, AL>(a, (long long)b, ok ? r : KF_M - 1, c, ok, KF_ARGS KF_EPI_RST(h));
#endif
            }
        }
#undef KF_EPI_RST
    }
#if KF_ROW_RS
    __syncwarp(); /* the quad's reads of the buffer are done: the next tile's copies may land */
#endif
#undef KF_X_SET
#undef KF_X_LO
#undef KF_X_HI
}
#endif

#if KF_FOLD_PRE
/* The column terms of columns t, t + 1 of the tile (from the staging area
 * at buf + KF_FOLD_COLS_AT; zeros for an RMSNorm; KF_EPI_RS reads them
 * from global memory instead, kf_fold_cols). */
__device__ __forceinline__ void kf_gm_fold_cols2(unsigned buf, int t, float *cc, float *dd) {
#if KF_FOLD_LN && !KF_EPI_RS
    const unsigned at = buf + KF_FOLD_COLS_AT + 4u * (unsigned)t;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(cc[0]), "=f"(cc[1]) : "r"(at));
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];"
                 : "=f"(dd[0]), "=f"(dd[1])
                 : "r"(at + 4u * KF_ON));
#else
    (void)buf;
    (void)t;
    cc[0] = cc[1] = dd[0] = dd[1] = 0.0f;
#endif
}
#endif

#if KF_EPI_TMA
/* A 64 x 64 chunk of the output at shared address src (128-byte swizzle) to
 * (c0, r0) of batch b of the output map, by TMA; one thread. */
__device__ __forceinline__ void kf_gm_tma_store(const kf_tmap *map, unsigned src, int c0, int r0,
                                                int b) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];"
                 ::"l"((unsigned long long)map), "r"(c0), "r"(r0), "r"(b), "r"(src)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

__device__ __forceinline__ void kf_gm_tma_store4(const kf_tmap *map, unsigned src, int c0, int c1,
                                                 int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group"
                 " [%0, {%1, %2, %3, %4}], [%5];" ::"l"((unsigned long long)map),
                 "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/* The values of chunk ch (64 x 64) of half hf of the consumer's part of
 * tile (b, mb, nb), packed in pairs: w[jj][h] holds columns 8 (8 ch + jj) +
 * 2 (lane % 4) (+1) of row 16 warp + lane / 4 + 8 h of the half. */
template <bool AL>
__device__ __forceinline__ void kf_gm_epi_tma_vals(const float (&d)[KF_ACC], int b, int mb, int nb,
                                                   int cw, int hf, int ch, int warp, int lane,
                                                   unsigned buf, unsigned (&w)[8][2],
#if KF_FOLD_PRE
                                                   const float (&frs)[KF_HALVES][2],
                                                   const float (&fmu)[KF_HALVES][2],
#endif
                                                   KF_PARAMS) {
    (void)buf;
    const long long rows = (long long)mb * KF_BM + (KF_PINGPONG ? hf : cw) * 64;
#pragma unroll
    for (int jj = 0; jj < 8; jj++) {
        const int j = ch * 8 + jj;
        const long long c = (long long)nb * KF_ON + 8 * j + 2 * (lane % 4);
#if KF_A_FOLD && KF_EPI_RS
        /* the column terms from global memory (L2): no barrier waits on them */
        float fc[2], fd[2];
        kf_fold_cols<2>(0, c, fc, fd, KF_ARGS);
#elif KF_A_FOLD
        float fc[2], fd[2];
        kf_gm_fold_cols2(buf, 8 * j + 2 * (lane % 4), fc, fd);
#if KF_HEAD_D
        float fcp[2], fdp[2];
        kf_gm_fold_cols2(buf, (8 * j + 2 * (lane % 4)) ^ (KF_HEAD_D / 2), fcp, fdp);
#endif
#endif
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float a[2] = {d[hf * (KF_BN / 2) + 4 * j + 2 * h],
                          d[hf * (KF_BN / 2) + 4 * j + 2 * h + 1]};
#if KF_HEAD_D
            /* the rotate-half partners, columns c ^ D / 2: column group
             * j ^ D / 16 of the same lane (a tile holds whole heads) */
            const int jp = j ^ (KF_HEAD_D / 16);
            float ap[2] = {d[hf * (KF_BN / 2) + 4 * jp + 2 * h],
                           d[hf * (KF_BN / 2) + 4 * jp + 2 * h + 1]};
#endif
            const long long r = rows + warp * 16 + lane / 4 + 8 * h;
            const bool ok = r < KF_M;
#if KF_A_FOLD
            kf_fold<2>(a, frs[hf][h], fmu[hf][h], fc, fd);
#if KF_HEAD_D
            kf_fold<2>(ap, frs[hf][h], fmu[hf][h], fcp, fdp);
#endif
#endif
            float o[2];
#if KF_HEAD_D
            kf_epi<2, AL, true>(a, ap, (long long)b, ok ? r : KF_M - 1, c, ok, KF_ARGS, o);
#elif KF_EPI_CS
            /* the column operands' pair in the staging area (its slot 0) */
            kf_epi<2, AL, true>(a, (long long)b, ok ? r : KF_M - 1, c, ok, KF_ARGS, o,
                                buf + KF_CS_AT + 2u * (unsigned)(8 * j + 2 * (lane % 4)));
#elif KF_EPI_RS
            /* the residual pair at the address the output pair goes to:
             * chunk (hf, ch)'s buffer, the 128-byte swizzle */
            const unsigned rl = (unsigned)(warp * 16 + lane / 4 + 8 * h);
            const unsigned rsm = buf + (unsigned)(hf * (KF_ON / 64) + ch) * 8192u + rl * 128u +
                                 (((unsigned)jj ^ (rl & 7u)) << 4) + (lane % 4) * 4u;
            kf_epi<2, AL, true>(a, (long long)b, ok ? r : KF_M - 1, c, ok, KF_ARGS, o, rsm);
#else
            kf_epi<2, AL, true>(a, (long long)b, ok ? r : KF_M - 1, c, ok, KF_ARGS, o);
#endif
            w[jj][h] = kf_gm_pack2(o[0], o[1]);
        }
    }
}

#if KF_FOLD_PRE
#define KF_EPI_FOLD_ARGS frs, fmu,
#else
#define KF_EPI_FOLD_ARGS
#endif

/* A warp's packed pairs of a 64 x 64 chunk, w[jj][h] (row 16 warp + lane / 4
 * + 8 h, 16-byte column group jj), into the 128-byte-swizzled chunk buffer at
 * shared address base: the layout the TMA store reads. MEM: the stores carry
 * a memory clobber (a buffer the previous chunk's store may still be reading,
 * ordered after its wait); without it, the in-place chunks of the residual's
 * form, which no other access of the thread's overlaps. */
template <bool MEM>
__device__ __forceinline__ void kf_gm_st_chunk(unsigned base, int warp, int lane,
                                               const unsigned (&w)[8][2]) {
#pragma unroll
    for (int jj = 0; jj < 8; jj++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const unsigned rl = (unsigned)(warp * 16 + lane / 4 + 8 * h);
            const unsigned addr =
                base + rl * 128u + (((unsigned)jj ^ (rl & 7u)) << 4) + (lane % 4) * 4u;
            if (MEM)
                asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(w[jj][h]) : "memory");
            else
                asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(w[jj][h]));
        }
}

/* The epilogue of the consumer's part of tile (b, mb, nb) through shared
 * memory (buf: its 8 KiB, 1024-byte aligned) and TMA stores, 64 x 64 a chunk.
 * The fragment of wgmma m64nN: warp w holds rows 16w + lane/4 (+8), columns
 * 8j + 2(lane%4) (+1), accumulators 4j + 2h (+1) of row half h.
 * KF_EPI_AHEAD 1 (internal, opt-in): the values of two chunks are computed
 * before the first of them is stored, with no barrier between them, so their
 * loads (a residual's rows) are in flight together, where chunk by chunk (0,
 * the default) each chunk's loads wait between the previous chunk's
 * barriers. Measured slower (H100, bb46f66: GPT-2's out projection, 16384 x
 * 1024 x 1024 + bias + residual, 0.0911 ms against 0.0825 chunk by chunk and
 * cuBLASLt's 0.0640; its FC2 0.2042 against 0.1996). A whole tile's values
 * ahead (64 packed a thread) left the residual kernels a stack frame (ptxas
 * gives a consumer 168 registers, 128 of them accumulators); two chunks
 * ahead still did for the head view (its rotate-half partners keep the
 * accumulators alive), a norm folded into B (its column terms with each
 * chunk), stream-K (its partials) and a sibling set (each member's epilogue
 * in one switch), which the generator keeps at 0. */
template <bool AL>
__device__ __forceinline__ void kf_gm_epi_tma(const float (&d)[KF_ACC], int b, int mb, int nb,
                                              int cw, int warp, int lane, unsigned buf,
                                              const kf_tmap *tc,
#if KF_EPI_RS
                                              unsigned rfull, unsigned rpar,
#endif
#if KF_FOLD_PRE
                                              const float (&frs)[KF_HALVES][2],
                                              const float (&fmu)[KF_HALVES][2],
#endif
                                              KF_PARAMS) {
    const bool lead = threadIdx.x % 128 == 0;
#if KF_EPI_RS
    /* Residual by TMA: buf holds this consumer's 4 chunk buffers, the
     * residual in them once kf_rfull[cw] completes (rpar: this consumer's
     * tile count's parity). Each chunk in place: a thread reads its
     * residual pairs and writes its output pairs at the same addresses, so
     * no barrier stands between the chunks; one barrier, then the 4 stores. */
    (void)tc;
#if KF_RS_LOAD
    kf_hp_wait(rfull, rpar);
#else
    /* no residual (KF_CUDA_RECIPE_GEMM_EPI_BUF4): the buffers are free once
     * the previous tile's stores have read them */
    (void)rfull;
    (void)rpar;
    if (lead)
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    kf_gm_wg_sync(cw);
#endif
#pragma unroll
    for (int hf = 0; hf < KF_HALVES; hf++) {
#pragma unroll
        for (int ch = 0; ch < KF_ON / 64; ch++) {
            unsigned w[8][2];
            kf_gm_epi_tma_vals<AL>(d, b, mb, nb, cw, hf, ch, warp, lane, buf, w,
                                   KF_EPI_FOLD_ARGS KF_ARGS);
            kf_gm_st_chunk<false>(buf + (unsigned)(hf * (KF_ON / 64) + ch) * 8192u, warp, lane,
                                  w);
        }
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    kf_gm_wg_sync(cw);
    if (lead) {
#pragma unroll
        for (int hf = 0; hf < KF_HALVES; hf++)
#pragma unroll
            for (int ch = 0; ch < KF_ON / 64; ch++)
                kf_gm_tma_store(tc, buf + (unsigned)(hf * (KF_ON / 64) + ch) * 8192u,
                                nb * KF_ON + ch * 64,
                                (int)((long long)mb * KF_BM + (KF_PINGPONG ? hf : cw) * 64), b);
    }
#else
#if (KF_FOLD_PRE && KF_FOLD_LN) || KF_EPI_CS
    /* the tile's column terms (operands), fetched when it started, are in */
    asm volatile("cp.async.wait_all;" ::: "memory");
    kf_gm_wg_sync(cw);
#endif
#pragma unroll
    for (int hf = 0; hf < KF_HALVES; hf++) {
        const long long rows = (long long)mb * KF_BM + (KF_PINGPONG ? hf : cw) * 64;
#if KF_EPI_AHEAD
        unsigned wa[2][8][2];
#endif
#pragma unroll
        for (int ch = 0; ch < KF_ON / 64; ch++) {
#if KF_EPI_AHEAD
            /* chunks 2i and 2i + 1 computed together, before 2i is stored */
            if (ch % 2 == 0) {
                kf_gm_epi_tma_vals<AL>(d, b, mb, nb, cw, hf, ch, warp, lane, buf, wa[0],
                                       KF_EPI_FOLD_ARGS KF_ARGS);
                kf_gm_epi_tma_vals<AL>(d, b, mb, nb, cw, hf, ch + 1, warp, lane, buf, wa[1],
                                       KF_EPI_FOLD_ARGS KF_ARGS);
            }
            unsigned(&w)[8][2] = wa[ch % 2];
#else
            unsigned w[8][2];
            kf_gm_epi_tma_vals<AL>(d, b, mb, nb, cw, hf, ch, warp, lane, buf, w,
                                   KF_EPI_FOLD_ARGS KF_ARGS);
#endif
            /* the buffer is free once the previous chunk's store read it */
            if (lead)
                asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            kf_gm_wg_sync(cw);
            kf_gm_st_chunk<true>(buf, warp, lane, w);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            kf_gm_wg_sync(cw);
            if (lead) {
#if KF_TMA_HEADS
                /* the head view [batch, H, S, D] (S = KF_TMA_S, a multiple
                 * of 64: no chunk straddles two batches) */
                const long long q = (long long)b * KF_M + rows;
                const int col = nb * KF_ON + ch * 64;
                kf_gm_tma_store4(tc, buf, col % KF_HEAD_D, (int)(q % KF_TMA_S), col / KF_HEAD_D,
                                 (int)(q / KF_TMA_S));
#else
                kf_gm_tma_store(tc, buf, nb * KF_ON + ch * 64, (int)rows, b);
#endif
            }
        }
    }
#endif
}
#endif

/* ---- kf:member end ---- */

#if KF_A_NORM
/* Rows of the A tile a consumer normalizes: its half (cooperative) or the
 * whole tile (ping-pong); thread t takes 16-byte chunk t % 8 of rows
 * t / 8 + 16 i. */
#define KF_A_ROWS (KF_PINGPONG ? 128 : 64)
#define KF_A_NR (KF_A_ROWS / 16)

/* Rewrites rows row0.. of the A tile at shared address sa (K-major, 128-byte
 * swizzle: chunk j of row r sits at r * 128 + (j ^ r % 8) * 16) with their
 * normalized values, for K step kt. A thread's rows share their 8 columns,
 * so the loads that depend on k alone (gamma, beta) are read once, as
 * vectors (kf_apro_cols); the tile's chunks are all read before any is
 * computed and written after, so nothing waits on a load per row. Measured
 * on an H200 (LLaMA's q projection, 16384 x 4096 x 4096): 1.41 ms, from
 * 1.50 with gamma loaded per element and row, against cuBLASLt's 0.71 after
 * its prologue kernel; without the normalizing arithmetic (its shared loads,
 * stores, fence and barrier kept) 0.70: the arithmetic, every A element
 * normalized again for each of its N / 256 column tiles, is the cost. */
__device__ __forceinline__ void kf_gm_norm_a(unsigned sa, int kt, long long row0, int tid,
                                             const float (*stv)[KF_A_NSTATS], KF_PARAMS) {
    const int j = tid % 8;
    const long long k0 = (long long)kt * KF_BK + j * 8;
    float cv[KF_A_NCV][8];
    kf_apro_cols(k0, cv, KF_ARGS);
    unsigned w[KF_A_NR][4];
#pragma unroll
    for (int i = 0; i < KF_A_NR; i++) {
        const int r = tid / 8 + 16 * i;
        const unsigned addr = sa + (unsigned)r * 128u + ((unsigned)(j ^ (r & 7)) << 4);
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(w[i][0]), "=r"(w[i][1]), "=r"(w[i][2]), "=r"(w[i][3])
                     : "r"(addr)
                     : "memory");
    }
#pragma unroll
    for (int i = 0; i < KF_A_NR; i++) {
        const long long row = row0 + tid / 8 + 16 * i;
        float xa[8], ao[8];
#pragma unroll
        for (int e = 0; e < 8; e++) {
            xa[e] = kf_a_to_f32((unsigned short)(w[i][e / 2] >> (16 * (e % 2))));
            ao[e] = 0.0f;
        }
        if (row < KF_M && k0 + 8 <= KF_K) {
            kf_apro<8>(xa, ao, row, k0, 0, stv[i], cv, KF_ARGS);
        } else if (row < KF_M) { /* columns past K stay zero */
            for (int e = 0; e < 8 && k0 + e < KF_K; e++)
                kf_apro<1>(xa + e, ao + e, row, k0 + e, e, stv[i], cv, KF_ARGS);
        }
#pragma unroll
        for (int e = 0; e < 4; e++)
            w[i][e] =
                (unsigned)kf_f32_to_a(ao[2 * e]) | ((unsigned)kf_f32_to_a(ao[2 * e + 1]) << 16);
    }
#pragma unroll
    for (int i = 0; i < KF_A_NR; i++) {
        const int r = tid / 8 + 16 * i;
        const unsigned addr = sa + (unsigned)r * 128u + ((unsigned)(j ^ (r & 7)) << 4);
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(w[i][0]),
                     "r"(w[i][1]), "r"(w[i][2]), "r"(w[i][3])
                     : "memory");
    }
}
#endif

/* Unit t of the raster (a tile, or a pair of tile rows when KF_CLUSTER 2)
 * for the CTA of cluster rank `rank`: batch b, tile row mb (past the last
 * one for a pair's missing half), tile column nb. */
__device__ __forceinline__ void kf_gm_tile(int t, int rank, int &b, int &mb, int &nb) {
    const int per = KF_UNITS_M * KF_TILES_N;
    b = t / per;
    t -= b * per;
    const int span = KF_RASTER_U * KF_TILES_N;
    const int g = t / span, first = g * KF_RASTER_U;
    const int rows = KF_UNITS_M - first < KF_RASTER_U ? KF_UNITS_M - first : KF_RASTER_U;
    const int r = t - g * span;
    /* one tile column (N <= KF_ON: a row epilogue's tiles always): r < rows,
     * and nb a constant of the epilogue's unrolled loops, whose column
     * tests then fold (with the row sums in 4 partials, a row epilogue's
     * tile, 16384 x 256: 6288 SASS instructions -> 4048) */
    mb = (first + (KF_TILES_N == 1 ? r : r % rows)) * KF_CLUSTER + rank;
    nb = KF_TILES_N == 1 ? 0 : r / rows;
}

#if KF_SK
/* Positions in the stream-K K steps: 32-bit wherever block x steps fits
 * (a 64-bit division by the grid is a called routine, whose register saves
 * gave the register epilogue a stack frame). */
#define KF_SK_STEPS                                                                                \
    ((unsigned long long)(KF_TILES < 2 * KF_SK_GMAX ? KF_TILES : 2 * KF_SK_GMAX) * KF_KT)
template <bool WIDE> struct kf_sk_pick {
    typedef unsigned long long type;
};
template <> struct kf_sk_pick<false> {
    typedef unsigned type;
};
typedef kf_sk_pick<(KF_SK_STEPS * (KF_SK_GMAX + 1) >= 0xffffffffull)>::type kf_sk_t;
/* The first stream-K tile for a grid of G blocks: 0 when there are fewer
 * tiles than blocks; else the start of the last whole wave, when a partial
 * wave follows it; else none (KF_TILES). */
__device__ __forceinline__ int kf_gm_sk_from(int G) {
    if (KF_TILES < G)
        return 0;
    return KF_TILES % G ? (KF_TILES / G - 1) * G : KF_TILES;
}
/* The stream-K K steps (tile after tile) and block c's range [bc, ec). */
__device__ __forceinline__ void kf_gm_sk_range(int c, int G, int from, long long &bc,
                                               long long &ec) {
    const kf_sk_t it = (kf_sk_t)(KF_TILES - from) * KF_KT;
    bc = (long long)((kf_sk_t)c * it / (kf_sk_t)G);
    ec = (long long)((kf_sk_t)(c + 1) * it / (kf_sk_t)G);
}
#endif

#if KF_SK == 2
/* The blocks that share a tile's K steps (KF_SK 2). */
__device__ __forceinline__ int kf_gm_sk_split(int G) {
    const int s = G / (int)KF_TILES;
    return s < 1 ? 1 : s > (int)KF_KT ? (int)KF_KT : s;
}
#endif

/* Work i of block c of G: tile (or cluster pair) t of the raster, K steps
 * kb, kb + ks, ... below ke; part: a stream-K segment short of the whole K
 * (kf_gm_sk_end). False past the block's last. Whole tiles first
 * (t = c + i G), then, with KF_SK, the tiles of the block's stream-K range
 * (KF_SK 2: its one interleaved share of a tile). */
__device__ __forceinline__ bool kf_gm_work(int c, int G, int i, int &t, int &kb, int &ke, int &ks,
                                           bool &part) {
    part = false;
    kb = 0;
    ke = KF_KT;
    ks = 1;
#if KF_SK == 2
    const int S = kf_gm_sk_split(G);
    t = c / S;
    kb = c % S;
    ks = S;
    part = S > 1;
    return i == 0 && t < KF_TILES;
#elif KF_SK
    const int from = kf_gm_sk_from(G);
    const int ndp = from > c ? (from - c + G - 1) / G : 0;
    if (i >= ndp) {
        long long bc, ec;
        kf_gm_sk_range(c, G, from, bc, ec);
        const long long tt = bc / KF_KT + (i - ndp), t0 = tt * KF_KT;
        if (bc >= ec || t0 >= ec)
            return false;
        kb = (int)((bc > t0 ? bc : t0) - t0);
        ke = (int)((ec < t0 + KF_KT ? ec : t0 + KF_KT) - t0);
        t = from + (int)tt;
        part = kb > 0 || ke < KF_KT;
        return true;
    }
#endif
    t = c + i * G;
    return t < KF_UNITS;
}

#if KF_SK
/* The workspace slot of block c's segment of stream-K tile tt (its first
 * tile: 0, its last: 1; the tiles between are whole), consumer cw: 64 x
 * KF_BN floats, thread t's accumulator pair p at float2 p * 128 + t. */
__device__ __forceinline__ float2 *kf_gm_sk_slot(float *ws, int c, long long bc, long long tt,
                                                 int cw) {
    const int slot = bc / KF_KT == tt ? 0 : 1;
    return reinterpret_cast<float2 *>(ws + (((long long)c * 2 + slot) * 2 + cw) * (64LL * KF_BN));
}

/* A segment's end for consumer cw of block c (accumulators d: K steps
 * [kb, ke) of tile t, tile row mb): true for the arrival that completes the
 * tile half's K, with d then the sum of every segment's partial in block
 * order; false for the others (no epilogue). A half whose rows all lie past
 * M takes no part (its epilogue stores nothing). Accumulator pair p (d[2p],
 * d[2p + 1]) is row 16w + lane/4 + 8 (p % 2) of the half. */
__device__ __forceinline__ bool kf_gm_sk_end(float (&d)[KF_ACC], int c, int G, int t, int kb,
                                             int ke, int mb, int cw, int warp, int lane,
                                             volatile int *fin, float *ws, unsigned *cnt) {
    const long long rows = (long long)mb * KF_BM + cw * 64;
    if (rows >= KF_M)
        return false;
    const int tid = threadIdx.x % 128;
#if KF_SK == 2
    const int from = 0;
    const long long tt = t;
    float2 *mine = kf_gm_sk_slot(ws, c, tt * KF_KT, tt, cw);
    const unsigned n = (unsigned)((ke - kb + kf_gm_sk_split(G) - 1) / kf_gm_sk_split(G));
#else
    const int from = kf_gm_sk_from(G);
    const long long tt = t - from;
    long long bc, ec;
    kf_gm_sk_range(c, G, from, bc, ec);
    float2 *mine = kf_gm_sk_slot(ws, c, bc, tt, cw);
    const unsigned n = (unsigned)(ke - kb);
#endif
#pragma unroll
    for (int p = 0; p < KF_ACC / 2; p++)
        if (rows + warp * 16 + lane / 4 + 8 * (p % 2) < KF_M)
            __stcg(mine + p * 128 + tid, make_float2(d[2 * p], d[2 * p + 1]));
    __threadfence();
    kf_gm_wg_sync(cw);
    if (tid == 0) {
        unsigned *ct = cnt + 2 * tt + cw;
        const int last = atomicAdd(ct, n) + n == (unsigned)KF_KT;
        if (last)
            *ct = 0u; /* the whole K has arrived: ready for the next run */
        fin[cw] = last;
    }
    kf_gm_wg_sync(cw);
    if (!fin[cw])
        return false;
    __threadfence();
#if KF_SK == 2
    (void)from;
    const int S = kf_gm_sk_split(G);
#pragma unroll 1
    for (int j = 0; j < S; j++) {
        const float2 *part = kf_gm_sk_slot(ws, (int)tt * S + j, tt * KF_KT, tt, cw);
#pragma unroll
        for (int p = 0; p < KF_ACC / 2; p++)
            if (rows + warp * 16 + lane / 4 + 8 * (p % 2) < KF_M) {
                const float2 v = __ldcg(part + p * 128 + tid);
                d[2 * p] = j ? d[2 * p] + v.x : v.x;
                d[2 * p + 1] = j ? d[2 * p + 1] + v.y : v.y;
            }
    }
    return true;
#else
    /* the tile's blocks: from the one whose range holds its first K step */
    const long long t0 = tt * KF_KT;
    const kf_sk_t it = (kf_sk_t)(KF_TILES - from) * KF_KT;
    int c0 = (int)((kf_sk_t)t0 * (kf_sk_t)G / it);
    while (c0 > 0 && (long long)((kf_sk_t)c0 * it / (kf_sk_t)G) > t0)
        c0--;
    while ((long long)((kf_sk_t)(c0 + 1) * it / (kf_sk_t)G) <= t0)
        c0++;
    bool first = true;
#pragma unroll 1
    for (int cc = c0; cc < G; cc++) {
        long long b0, e0;
        kf_gm_sk_range(cc, G, from, b0, e0);
        if (b0 >= t0 + KF_KT)
            break;
        if (b0 >= e0)
            continue;
        const float2 *part = kf_gm_sk_slot(ws, cc, b0, tt, cw);
#pragma unroll
        for (int p = 0; p < KF_ACC / 2; p++)
            if (rows + warp * 16 + lane / 4 + 8 * (p % 2) < KF_M) {
                const float2 v = __ldcg(part + p * 128 + tid);
                d[2 * p] = first ? v.x : d[2 * p] + v.x;
                d[2 * p + 1] = first ? v.y : d[2 * p + 1] + v.y;
            }
        first = false;
    }
    return true;
#endif
}
#endif

/* A consumer warp gives stage s back: lane 0 to this CTA's producer, and
 * with KF_CLUSTER 2 lane 1 to the peer's (pempty0: its kf_empty through
 * mapa), whose multicast half writes into this CTA's stage too. */
__device__ __forceinline__ void kf_gm_release(unsigned empty0, unsigned pempty0, int s, int lane) {
    if (lane == 0)
        kf_hp_arrive(empty0 + 8 * s);
    else if (KF_CLUSTER == 2 && lane == 1)
        kf_hp_arrive_cluster(pempty0 + 8 * s);
}
#if KF_CLUSTER == 2
#define KF_EMPTY_PEER pempty0
#else
#define KF_EMPTY_PEER 0u
#endif

#if KF_DUAL
#define KF_TMAP_PARAMS                                                                             \
    const __grid_constant__ kf_tmap ta, const __grid_constant__ kf_tmap tb,                        \
        const __grid_constant__ kf_tmap tb2
#elif KF_EPI_TMA && KF_RS_LOAD /* the output's map, then the residual's */
#define KF_TMAP_PARAMS                                                                             \
    const __grid_constant__ kf_tmap ta, const __grid_constant__ kf_tmap tb,                        \
        const __grid_constant__ kf_tmap tc, const __grid_constant__ kf_tmap tr
#elif KF_EPI_TMA /* the output's map last */
#define KF_TMAP_PARAMS                                                                             \
    const __grid_constant__ kf_tmap ta, const __grid_constant__ kf_tmap tb,                        \
        const __grid_constant__ kf_tmap tc
#else
#define KF_TMAP_PARAMS const __grid_constant__ kf_tmap ta, const __grid_constant__ kf_tmap tb
#endif
#if KF_SIB
/* the later members' B (and output) maps: the generator's KF_SIB_TMAPS */
#define KF_ALL_TMAPS KF_TMAP_PARAMS KF_SIB_TMAPS
#else
#define KF_ALL_TMAPS KF_TMAP_PARAMS
#endif

extern "C" __global__ void __launch_bounds__(384, 1) KF_KERNEL(KF_ALL_TMAPS, KF_PARAMS) {
    extern __shared__ __align__(1024) unsigned char kf_dsmem[];
    __shared__ __align__(8) unsigned long long kf_full[KF_STAGES], kf_empty[KF_STAGES];
#if KF_EPI_RS
    /* a consumer's residual landed (the producer's expect), its buffers free
     * again (the consumer's lead thread) */
    __shared__ __align__(8) unsigned long long kf_rfull[2], kf_rfree[2];
    const unsigned rfull0 = (unsigned)__cvta_generic_to_shared(&kf_rfull[0]);
    const unsigned rfree0 = (unsigned)__cvta_generic_to_shared(&kf_rfree[0]);
#endif
#if KF_SK
    __shared__ int kf_fin[2]; /* a consumer's segment: its tile half's last arrival */
    if (gridDim.x > KF_SK_GMAX)
        __trap(); /* more blocks than the workspace has slots for */
#endif
    KF_SETUP();
    /* The ring at the first 1024-byte boundary (where the swizzle pattern
     * starts over); launch.shared_bytes has the 1024 to spare. */
    const unsigned raw = (unsigned)__cvta_generic_to_shared(kf_dsmem);
    const unsigned ring = (raw + 1023u) & ~1023u;
    const unsigned full0 = (unsigned)__cvta_generic_to_shared(&kf_full[0]);
    const unsigned empty0 = (unsigned)__cvta_generic_to_shared(&kf_empty[0]);
    const int wg = threadIdx.x / 128;
#if KF_CLUSTER == 2
    const int rank = (int)kf_hp_cluster_rank();
#else
    const int rank = 0;
#endif
    if (threadIdx.x == 0) {
        for (int s = 0; s < KF_STAGES; s++) {
            kf_hp_init(full0 + 8 * s, 1);
            /* lane 0 of each consumer warp (of both CTAs of a cluster) */
            kf_hp_init(empty0 + 8 * s, KF_EMPTY_ARRIVALS * KF_CLUSTER);
        }
#if KF_EPI_RS
        for (int c = 0; c < 2; c++) {
            kf_hp_init(rfull0 + 8 * c, 1);
            kf_hp_init(rfree0 + 8 * c, 1);
        }
#endif
#if KF_A_GSCALE
        /* the gamma slots start at zero: a last K step's copy stops at K, and
         * zeros past it meet A's zeros (0 x 0, never a stale NaN) */
        for (unsigned i = 0; i < KF_STAGES * 128u; i += 16u)
            asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(ring + KF_G_AT + i),
                         "r"(0u)
                         : "memory");
#endif
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"((unsigned long long)&ta) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"((unsigned long long)&tb) : "memory");
#if KF_DUAL
        asm volatile("prefetch.tensormap [%0];" ::"l"((unsigned long long)&tb2) : "memory");
#elif KF_EPI_TMA
        asm volatile("prefetch.tensormap [%0];" ::"l"((unsigned long long)&tc) : "memory");
#endif
#if KF_RS_LOAD
        asm volatile("prefetch.tensormap [%0];" ::"l"((unsigned long long)&tr) : "memory");
#endif
#if KF_SIB
        KF_SIB_PREFETCH();
#endif
    }
#if KF_CLUSTER == 2
    kf_hp_cluster_sync(); /* both CTAs' barriers are set up before any remote access */
#else
    __syncthreads();
#endif

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (threadIdx.x == 0) {
            int s = 0;
            unsigned ph = 0;
#if KF_SK
            int t, kb, ke, ks;
            bool part;
            for (int i = 0; kf_gm_work(blockIdx.x / KF_CLUSTER, gridDim.x / KF_CLUSTER, i, t, kb,
                                       ke, ks, part);
                 i++) {
#else
            /* the loop as before stream-K (kf_gm_work's form changed ptxas's
             * schedule: C7514 on a cooperative f16 kernel) */
#if KF_RS_LOAD
            int ti = 0; /* the block's tiles so far: tile ti is consumer ti % 2's (ping-pong) */
#endif
            for (int t = blockIdx.x / KF_CLUSTER; t < KF_UNITS; t += gridDim.x / KF_CLUSTER) {
                const int kb = 0, ke = KF_KT, ks = 1;
#endif
                int b, mb, nb;
                kf_gm_tile(t, rank, b, mb, nb);
#if KF_SIB
                /* a sibling set: the member's B, nb its own tile column */
                const int sjp = kf_sib_split(nb);
                const kf_tmap *tbm = KF_SIB_BMAP(sjp);
#else
                const kf_tmap *tbm = &tb;
#endif
                /* a pair's missing half loads the last tile row's A */
                const int ma = KF_CLUSTER == 1 || mb < KF_TILES_M ? mb : KF_TILES_M - 1;
                for (int kt = kb; kt < ke; kt += ks) {
                    kf_hp_wait(empty0 + 8 * s, ph ^ 1u);
                    const unsigned bar = full0 + 8 * s;
#if KF_A_GSCALE
                    /* the K step's gammas (K a multiple of 8: whole 16-byte pieces) */
                    const long long gk_left = KF_K - (long long)kt * KF_BK;
                    const unsigned gbytes = gk_left >= KF_BK ? 128u : (unsigned)gk_left * 2u;
                    kf_hp_expect(bar, KF_STAGE_BYTES + gbytes);
                    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                                 "[%0], [%1], %2, [%3];" ::"r"(ring + KF_G_AT + (unsigned)s * 128u),
                                 "l"(KF_SIB_NS0 kf_gm_gamma_src(KF_ARGS) + (long long)kt * KF_BK),
                                 "r"(gbytes), "r"(bar)
                                 : "memory");
#else
                    kf_hp_expect(bar, KF_STAGE_BYTES);
#endif
                    const unsigned sa = ring + (unsigned)s * KF_STAGE_BYTES, sb = sa + KF_A_BYTES;
                    if (KF_A_KMAJOR) {
                        kf_gm_box<KF_A_BATCHED>(sa, &ta, kt * KF_BK, ma * KF_BM, b, bar);
                    } else {
                        kf_gm_box<KF_A_BATCHED>(sa, &ta, ma * KF_BM, kt * KF_BK, b, bar);
                        kf_gm_box<KF_A_BATCHED>(sa + 8192u, &ta, ma * KF_BM + 64, kt * KF_BK, b,
                                                bar);
                    }
                    /* The B tile's boxes; with KF_CLUSTER 2 this CTA issues the
                     * half of rank `rank`, multicast (kf_gm_box_b). */
#if KF_DUAL
                    /* Bg's KF_ON rows (or 64-column boxes) then Bu's: each
                     * map is one half. */
                    if (KF_B_KMAJOR) {
                        if (KF_CLUSTER == 1 || rank == 0)
                            kf_gm_box_b<KF_B_BATCHED>(sb, &tb, kt * KF_BK, nb * KF_ON, b, bar);
                        if (KF_CLUSTER == 1 || rank == 1)
                            kf_gm_box_b<KF_B_BATCHED>(sb + KF_ON * 128u, &tb2, kt * KF_BK,
                                                      nb * KF_ON, b, bar);
                    } else {
#pragma unroll
                        for (int j = 0; j < KF_ON / 64; j++) {
                            if (KF_CLUSTER == 1 || rank == 0)
                                kf_gm_box_b<KF_B_BATCHED>(sb + 8192u * j, &tb, nb * KF_ON + 64 * j,
                                                          kt * KF_BK, b, bar);
                            if (KF_CLUSTER == 1 || rank == 1)
                                kf_gm_box_b<KF_B_BATCHED>(sb + 8192u * (j + KF_ON / 64), &tb2,
                                                          nb * KF_ON + 64 * j, kt * KF_BK, b, bar);
                        }
                    }
#else
                    if (KF_B_KMAJOR) {
                        /* KF_CLUSTER 2: the map's box is KF_BN / 2 rows */
                        const int hb = KF_BN / KF_CLUSTER;
                        kf_gm_box_b<KF_B_BATCHED>(sb + (unsigned)(rank * hb) * 128u, tbm,
                                                  kt * KF_BK, nb * KF_BN + rank * hb, b, bar);
                    } else {
#pragma unroll
                        for (int i = 0; i < KF_BN / 64 / KF_CLUSTER; i++) {
                            const int j = rank * (KF_BN / 64 / KF_CLUSTER) + i;
                            kf_gm_box_b<KF_B_BATCHED>(sb + 8192u * j, tbm, nb * KF_BN + 64 * j,
                                                      kt * KF_BK, b, bar);
                        }
                    }
#endif
#if KF_RS_LOAD
                    /* The residual of the tile's consumer(s), with its middle
                     * K step (after the step's own loads: a consumer frees its
                     * buffers at its first K step), into the buffers once the
                     * consumer's previous tile's stores have read them. */
                    if (kt == KF_KT / 2) {
#pragma unroll
                        for (int cw = 0; cw < 2; cw++) {
                            if (KF_PINGPONG && cw != ti % 2)
                                continue;
                            const int j = KF_PINGPONG ? ti / 2 : ti; /* the consumer's tiles */
                            kf_hp_wait(rfree0 + 8 * cw, (unsigned)(j & 1) ^ 1u);
                            kf_hp_expect(rfull0 + 8 * cw, KF_HALVES * (KF_ON / 64) * 8192u);
                            const unsigned rb = ring + KF_STAGES * KF_STAGE_BYTES + cw * 32768u;
#pragma unroll
                            for (int hf = 0; hf < KF_HALVES; hf++)
#pragma unroll
                                for (int ch = 0; ch < KF_ON / 64; ch++)
                                    kf_hp_tma3(rb + (unsigned)(hf * (KF_ON / 64) + ch) * 8192u,
                                               &tr, nb * KF_ON + 64 * ch,
                                               mb * KF_BM + (KF_PINGPONG ? hf : cw) * 64, b,
                                               rfull0 + 8 * cw);
                        }
                    }
#endif
                    if (++s == KF_STAGES) {
                        s = 0;
                        ph ^= 1u;
                    }
                }
#if KF_RS_LOAD
                ti++;
#endif
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int cw = wg - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
#if KF_DESC_STEP
        /* The wgmma descriptors of stage 0's A and B tiles: a stage's, a
         * half's and a K slice's are these plus their byte offset / 16 (the
         * address field, bits 0-13, holds the shared address / 16, and every
         * address here is below 256 KiB: an add never carries out of it).
         * The main loop then adds where it rebuilt each descriptor from its
         * address (mask, shift, or) every K step. */
        const unsigned long long ddb0 = KF_B_KMAJOR ? kf_hp_desc(ring + KF_A_BYTES, 16u, 1024u)
                                                    : kf_hp_desc(ring + KF_A_BYTES, 8192u, 1024u);
        /* A's with the consumer's rows (cooperative) in: cw through a
         * shuffle from lane 0, which ptxas takes as uniform across the warp,
         * so the descriptors stay in uniform registers (no R2UR a wgmma) */
        const unsigned dcw = (unsigned)__shfl_sync(0xffffffffu, KF_PINGPONG ? 0 : cw, 0);
        const unsigned long long dda0 =
            (KF_A_KMAJOR ? kf_hp_desc(ring, 16u, 1024u) : kf_hp_desc(ring, 8192u, 1024u)) +
            (unsigned long long)(dcw * (8192u >> 4));
#define KF_DDB0 ddb0
#else
#define KF_DDB0 0ull
#endif
#if KF_SIB
        const bool al = KF_SIB_AL; /* every member's bases */
#else
        const bool al = kf_epi_al(KF_ARGS);
#endif
        (void)al;
#if KF_CLUSTER == 2
        /* the peer's kf_empty, where lane 1 of each warp releases a stage
         * (lane 0 releases this CTA's) */
        const unsigned pempty0 = kf_hp_mapa(empty0, (unsigned)(rank ^ 1));
#endif
#if KF_EPI_RS || KF_ROW_RS
        /* the consumer's 4 chunk buffers (32 KiB) where the staging area was
         * (KF_ROW_RS: its rows of the row epilogue's residual) */
        float *stg = reinterpret_cast<float *>(kf_dsmem + (ring - raw) +
                                               KF_STAGES * KF_STAGE_BYTES + cw * 32768);
#if KF_EPI_RS
        int rj = 0; /* this consumer's tiles so far: kf_rfull's parity */
#endif
#else
        float *stg = reinterpret_cast<float *>(kf_dsmem + (ring - raw) +
                                               KF_STAGES * KF_STAGE_BYTES) +
                     cw * KF_EPI_FLOATS;
#endif
#if KF_PINGPONG
        /* Tile i of the block (t = blockIdx.x + i * gridDim.x) is consumer
         * i % 2's; its first stage is k-step i * KF_KT of the producer's. */
        /* The consumer's first tile through a shuffle from lane 0 (its
         * value in every lane): from cw itself, which ptxas takes as varying
         * within a warp, the tile counter, the stage index and everything
         * derived from them lived in vector registers, and each K step
         * built its wgmma descriptors there and moved them to uniform ones
         * by R2UR before every HGMMA (GPT-2's FC1: 112 SASS instructions a
         * K step against 58; the LN + Q/K/V set's one kernel, its
         * descriptors rebuilt, 127 against 98; the out projection 125
         * against 69). H100, 7f5077c: FC1 0.2391 -> 0.2300 ms at rest,
         * A B B A 0.2775 -> 0.2682; LN + Q/K/V 0.1741 -> 0.1710, A B B A
         * a tie (0.2001 / 0.2006). */
        for (int i = KF_PP_VARYING ? cw : __shfl_sync(0xffffffffu, cw, 0);; i += 2) {
            const int t = blockIdx.x / KF_CLUSTER + i * (gridDim.x / KF_CLUSTER);
            if (t >= KF_UNITS)
                break;
            const long long q0 = (long long)i * KF_KT;
            int s = (int)(q0 % KF_STAGES);
            unsigned ph = (unsigned)((q0 / KF_STAGES) & 1);
            if (!KF_PP_EARLY && i > 0) /* the other consumer's main loop of tile i - 1 is done */
                asm volatile("bar.sync %0, 256;" ::"r"(4 - cw) : "memory");
            const int kb = 0, ke = KF_KT, ks = 1;
            const bool part = false;
#else
        int s = 0;
        unsigned ph = 0;
#if KF_SK
        int t, kb, ke, ks;
        bool part;
        for (int w = 0; kf_gm_work(blockIdx.x / KF_CLUSTER, gridDim.x / KF_CLUSTER, w, t, kb, ke,
                                   ks, part);
             w++) {
#else
        for (int t = blockIdx.x / KF_CLUSTER; t < KF_UNITS; t += gridDim.x / KF_CLUSTER) {
            const int kb = 0, ke = KF_KT, ks = 1;
            const bool part = false;
#endif
#endif
            int b, mb, nb;
            kf_gm_tile(t, rank, b, mb, nb);
#if KF_SIB
            /* a sibling set: member sj, nb its own tile column */
            const int sj = kf_sib_split(nb);
#endif
#if KF_ROW_RS
            /* this consumer's rows of the tile's residual into its buffer (its
             * previous tile's epilogue read them before its last __syncwarp) */
            kf_gm_row_rs_fetch((unsigned)__cvta_generic_to_shared(stg), b, mb, nb, cw, warp, lane,
                               KF_ARGS);
#endif
#if KF_EPI_PF && (KF_EPI_TMA || KF_EPI_DIRECT) && !KF_SIB
            /* The epilogue's row operands of this consumer's rows (all 128
             * of the tile in ping-pong, its half in the cooperative
             * schedule) into L2, a thread a row: one bulk prefetch of the
             * row's KF_ON columns each, landing while the main loop runs. */
            {
                const int pr = KF_PINGPONG ? 128 : 64, i = threadIdx.x % 128;
                const long long r = (long long)mb * KF_BM + (KF_PINGPONG ? 0 : cw * 64) + i,
                                c = (long long)nb * KF_ON;
                if (i < pr && r < KF_M && c < KF_N)
                    kf_epi_pf((long long)b, r, c, KF_N - c < KF_ON ? (int)(KF_N - c) : KF_ON,
                              KF_ARGS);
            }
#endif
#if KF_FOLD_PRE
            float frs[KF_HALVES][2], fmu[KF_HALVES][2];
#pragma unroll
            for (int hf = 0; hf < KF_HALVES; hf++)
                KF_SIB_NS0 kf_gm_fold_rows((long long)mb * KF_BM + (KF_PINGPONG ? hf : cw) * 64,
                                           warp, lane, frs[hf], fmu[hf], KF_ARGS);
#if KF_FOLD_LN && !KF_EPI_RS
            /* (the previous tile's epilogue read them before its last barrier) */
#if KF_SIB
            KF_SIB_DO(sj, kf_gm_fold_cols_fetch((unsigned)__cvta_generic_to_shared(stg) +
                                                    KF_FOLD_COLS_AT,
                                                (long long)nb * KF_ON, threadIdx.x % 128, KF_ARGS));
#else
            kf_gm_fold_cols_fetch((unsigned)__cvta_generic_to_shared(stg) + KF_FOLD_COLS_AT,
                                  (long long)nb * KF_ON, threadIdx.x % 128, KF_ARGS);
#endif
#endif
#endif
#if KF_EPI_CS
            /* The tile's columns of the epilogue's column operands (a bias)
             * into the staging area, landing under the main loop (the
             * previous tile's epilogue read them before its last barrier). */
            kf_epi_cs_fetch((unsigned)__cvta_generic_to_shared(stg) + KF_CS_AT,
                            (long long)nb * KF_ON, threadIdx.x % 128, KF_ARGS);
#endif
#if KF_A_NORM
            /* the statistics of this consumer's rows of the tile */
            const long long arow0 = (long long)mb * KF_BM + (KF_PINGPONG ? 0 : cw * 64);
            float stv[KF_A_NR][KF_A_NSTATS];
#pragma unroll
            for (int i = 0; i < KF_A_NR; i++) {
                const long long row = arow0 + (threadIdx.x % 128) / 8 + 16 * i;
#pragma unroll
                for (int q = 0; q < KF_A_NSTATS; q++)
                    stv[i][q] = row < KF_M ? KF_A_STATS[row * KF_A_NSTATS + q] : 0.0f;
            }
#endif
            float d[KF_ACC];
#pragma unroll
            for (int k = 0; k < KF_ACC; k++)
                d[k] = 0.0f;
            int prev = -1;
#if KF_PINGPONG
            /* KF_PP_EARLY: the turn, once the other consumer has issued the
             * main loop of tile i - 1, taken after the tile's loads above
             * were issued, so they land while this consumer waits. */
            if (KF_PP_EARLY && i > 0)
                asm volatile("bar.sync %0, 256;" ::"r"(4 - cw) : "memory");
#endif
#if KF_A_GSCALE
            /* An RMSNorm's gamma on A through registers: each warp loads its
             * 16 rows of the stage's A tile by ldmatrix (the m16n8k16 A
             * fragment: rows lane / 4 (+8), k pairs 2 (lane % 4) (+8) of
             * each k16 slice), multiplies them by gamma's pairs there
             * (mul.rn.bf16x2: x * gamma rounded once) and issues wgmma with
             * A from registers; B stays the operand itself and rstd scales
             * the accumulators (kf_fold). Nothing is written back to shared
             * memory and no proxy fence is needed, where gamma applied to
             * the tile in place (by the consumers, or by the producer's
             * spare warps) made LLaMA's Q/K/V set 12-19% slower on an H100.
             * Two fragment sets, steps alternating: a set is rewritten two
             * steps after its wgmmas, which wait_group 1 has seen complete. */
            {
                const unsigned aoff = (unsigned)(cw * 64 + warp * 16 + (lane & 15)) * 128u;
                const unsigned asw = (unsigned)(lane & 7), ahi = (unsigned)(lane >> 4);
                const int gk = 2 * (lane & 3);
                unsigned afr0[4][4], afr1[4][4];
                /* A K step's 64 gammas come with the stage (the producer's
                 * bulk copy into its slot, KF_G_AT); each thread reads the
                 * pairs of its fragments' k columns. Loaded from global
                 * memory by the consumers (eight loads a thread, or one and
                 * shuffles), they made LLaMA's Q/K/V set 6-23% slower on an
                 * H100 (2.37-2.61 ms; 2.12 with gamma a constant, 2.30 with
                 * the fold into B). */
                auto step = [&](unsigned(&a)[4][4]) {
                    kf_hp_wait(full0 + 8 * s, ph);
                    const unsigned sa = ring + (unsigned)s * KF_STAGE_BYTES, sb = sa + KF_A_BYTES;
                    unsigned gp[4][2];
                    const unsigned gs = ring + KF_G_AT + (unsigned)s * 128u + (unsigned)gk * 2u;
#pragma unroll
                    for (int kk = 0; kk < 4; kk++) {
                        asm volatile("ld.shared.b32 %0, [%1];"
                                     : "=r"(gp[kk][0])
                                     : "r"(gs + kk * 32u)
                                     : "memory");
                        asm volatile("ld.shared.b32 %0, [%1];"
                                     : "=r"(gp[kk][1])
                                     : "r"(gs + kk * 32u + 16u)
                                     : "memory");
                    }
#pragma unroll
                    for (int kk = 0; kk < 4; kk++) {
                        const unsigned ad = sa + aoff + ((((unsigned)(2 * kk) + ahi) ^ asw) << 4);
                        asm volatile(
                            "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                            : "=r"(a[kk][0]), "=r"(a[kk][1]), "=r"(a[kk][2]), "=r"(a[kk][3])
                            : "r"(ad)
                            : "memory");
#pragma unroll
                        for (int e = 0; e < 4; e++)
                            asm("mul.rn.bf16x2 %0, %1, %2;"
                                : "=r"(a[kk][e])
                                : "r"(a[kk][e]), "r"(gp[kk][e / 2]));
                    }
                    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
                    for (int kk = 0; kk < KF_BK / 16; kk++)
                        kf_wgmma_rs(d, a[kk], kf_gm_desc_b(sb, s, kk, KF_DDB0));
                    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
                    /* every lane's reads of the previous stage's gammas before
                     * lane 0 releases it (racecheck: the producer's next copy
                     * into the slot, WAR) */
                    __syncwarp();
                    if (prev >= 0)
                        kf_gm_release(empty0, KF_EMPTY_PEER, prev, lane);
                    prev = s;
                    if (++s == KF_STAGES) {
                        s = 0;
                        ph ^= 1u;
                    }
                };
#pragma unroll 1
                for (int kt = kb; kt < ke; kt += 2) {
                    step(afr0);
                    if (kt + 1 < ke)
                        step(afr1);
                }
                (void)ks;
                __syncwarp(); /* (the last stage's gamma reads, before its release below) */
            }
#else
            /* Not unrolled: with K a constant of a few steps, ptxas unrolls
             * it whole and then fences the accumulators between the wgmmas
             * (C7517/C7519: serialized). */
#pragma unroll 1
            for (int kt = kb; kt < ke; kt += ks) {
                kf_hp_wait(full0 + 8 * s, ph);
                const unsigned sa = ring + (unsigned)s * KF_STAGE_BYTES, sb = sa + KF_A_BYTES;
#if KF_A_NORM
                kf_gm_norm_a(sa + (KF_PINGPONG ? 0u : (unsigned)cw * 8192u), kt, arow0,
                             threadIdx.x % 128, stv, KF_ARGS);
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                kf_gm_wg_sync(cw);
#endif
                asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#if KF_DESC_STEP
                /* the stage's offset in descriptor units (bytes / 16) */
                const unsigned long long dso =
                    (unsigned long long)(((unsigned)s * KF_STAGE_BYTES) >> 4);
                (void)sb;
#endif
#pragma unroll
                for (int kk = 0; kk < KF_BK / 16; kk++) {
                    const unsigned long long db = kf_gm_desc_b(sb, s, kk, KF_DDB0);
#pragma unroll
                    for (int hf = 0; hf < KF_HALVES; hf++) {
                        const unsigned ha = KF_PINGPONG ? hf * 8192u : cw * 8192u;
#if KF_DESC_STEP
                        /* (the consumer's rows are in dda0) */
                        const unsigned long long da =
                            dda0 + dso +
                            (unsigned long long)(((KF_PINGPONG ? ha : 0u) +
                                                  (KF_A_KMAJOR ? kk * 32u : kk * 2048u)) >>
                                                 4);
#else
                        const unsigned long long da =
                            KF_A_KMAJOR ? kf_hp_desc(sa + ha + kk * 32u, 16u, 1024u)
                                        : kf_hp_desc(sa + ha + kk * 2048u, 8192u, 1024u);
#endif
                        kf_wgmma(d + hf * (KF_BN / 2), da, db);
                    }
                }
                asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#if KF_RS_LOAD
                /* the previous tile's stores have read its buffers: the
                 * producer may load this tile's residual into them */
                if (kt == kb && rj > 0 && threadIdx.x % 128 == 0) {
                    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
                    kf_hp_arrive(rfree0 + 8 * cw);
                }
#endif
                asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
                if (prev >= 0)
                    kf_gm_release(empty0, KF_EMPTY_PEER, prev, lane);
                prev = s;
                if (++s == KF_STAGES) {
                    s = 0;
                    ph ^= 1u;
                }
            }
#endif
#if KF_PINGPONG
            /* KF_PP_EARLY: the other consumer's turn once this one's last
             * wgmmas are issued, so its first ones queue behind them (its
             * stages' kf_full waits are unambiguous still: every earlier
             * stage's wait is done). Measured no faster (H100, bb46f66: GPT-2's
             * Q/K/V 0.1845 ms against 0.1853, FC1 0.2731 / 0.2748, out
             * projection 0.0809 / 0.0805), and it grew the RMSNorm row
             * epilogue's stack frame from 48 to 192 bytes: opt-in. */
            const bool pp_next = blockIdx.x / KF_CLUSTER + (i + 1) * (gridDim.x / KF_CLUSTER) <
                                 KF_UNITS;
            if (KF_PP_EARLY && pp_next)
                asm volatile("bar.arrive %0, 256;" ::"r"(3 + cw) : "memory");
#endif
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            /* The accumulators are read only from here: without the fence
             * the compiler may hoist an epilogue's read of one above the
             * wait (ptxas then serializes the wgmmas, C7514). */
#pragma unroll
            for (int k = 0; k < KF_ACC; k++)
                asm volatile("" : "+f"(d[k])::"memory");
            if (prev >= 0)
                kf_gm_release(empty0, KF_EMPTY_PEER, prev, lane);
#if KF_PINGPONG
            if (!KF_PP_EARLY && pp_next) /* the other consumer's turn */
                asm volatile("bar.arrive %0, 256;" ::"r"(3 + cw) : "memory");
#endif
#if KF_SK
            /* a segment: only the tile half's last arrival goes on, with the sum */
            if (part && !kf_gm_sk_end(d, blockIdx.x, gridDim.x, t, kb, ke, mb, cw, warp, lane,
                                      kf_fin, KF_WS, KF_CNT))
                continue;
#else
            (void)part;
#endif
            /* The accumulator fragment of wgmma m64nN: warp w of the group
             * holds rows 16w + lane/4 (+8), columns 8j + 2(lane%4) (+1).
             * Dual: column group j + KF_ON / 8 is the up projection of the
             * gate's group j (staged: 16 columns to its right). */
            /* ---- kf:epilogue begin ---- (a sibling set's source runs this
             * block once per member, in a switch on sj: cg_gemm_sm90_set.c) */
#if KF_EPI_TMA
            /* Through shared memory by TMA stores (kf_gm_epi_tma). */
            {
                const unsigned buf = (unsigned)__cvta_generic_to_shared(stg);
#if KF_FOLD_PRE
#define KF_FOLD_TERMS frs, fmu,
#else
#define KF_FOLD_TERMS
#endif
                /* AL without asking kf_epi_al: the executor binds every pointer
                 * argument of a GEMM kernel at a 16-byte aligned address and
                 * refuses any other (kf_cx_bind_step), so the unrolled body is
                 * compiled once, not once per alignment case (half of a bias +
                 * gelu GEMM's NVRTC time went to the copy that never ran). */
#if KF_EPI_RS
                kf_gm_epi_tma<true>(d, b, mb, nb, cw, warp, lane, buf, &tc, rfull0 + 8 * cw,
                                    (unsigned)(rj & 1), KF_FOLD_TERMS KF_ARGS);
                rj++;
#else
                kf_gm_epi_tma<true>(d, b, mb, nb, cw, warp, lane, buf, &tc, KF_FOLD_TERMS KF_ARGS);
#endif
            }
#elif KF_EPI_PK
            /* A SwiGLU pair's, from the registers on packed pairs */
            kf_gm_epi_pk(d, b, mb, nb, cw, warp, lane, KF_ARGS);
            (void)stg;
#elif KF_EPI_DIRECT
            /* From the registers (kf_gm_epi_direct), the variant without
             * alignment tests when the bases allow. */
            if (al)
                kf_gm_epi_direct<true>(d, b, mb, nb, cw, warp, lane, KF_ROW_RS_BUF KF_ARGS);
            else
                kf_gm_epi_direct<false>(d, b, mb, nb, cw, warp, lane, KF_ROW_RS_BUF KF_ARGS);
            (void)stg;
#else
#pragma unroll
            for (int hf = 0; hf < KF_HALVES; hf++) {
                const long long rows = (long long)mb * KF_BM + (KF_PINGPONG ? hf : cw) * 64;
#pragma unroll
                for (int ch = 0; ch < KF_ON / KF_EPI_COLS; ch++) {
#pragma unroll
                    for (int jj = 0; jj < KF_EPI_COLS / 8; jj++) {
                        const int j = ch * (KF_EPI_COLS / 8) + jj;
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const int row = warp * 16 + lane / 4 + 8 * h,
                                      col = jj * 8 + (lane % 4) * 2;
                            const float *dv = d + hf * (KF_BN / 2) + 4 * j + 2 * h;
                            *reinterpret_cast<float2 *>(stg + row * KF_EPI_LD + col) =
                                make_float2(dv[0], dv[1]);
#if KF_DUAL
                            const float *du = dv + 4 * (KF_ON / 8);
                            *reinterpret_cast<float2 *>(stg + row * KF_EPI_LD + 16 + col) =
                                make_float2(du[0], du[1]);
#endif
                        }
                    }
                    kf_gm_wg_sync(cw);
                    kf_gm_epi_chunk(stg, b, rows, (long long)nb * KF_ON + ch * KF_EPI_COLS,
                                    threadIdx.x % 128, KF_ARGS);
                    kf_gm_wg_sync(cw);
                }
            }
#endif
            /* ---- kf:epilogue end ---- */
        }
#if KF_EPI_TMA
        /* the shared memory stays until the last store has read it */
        if (threadIdx.x % 128 == 0)
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
    }
#if KF_CLUSTER == 2
    /* No CTA exits while its peer may still arrive on its barriers or
     * multicast into its ring. */
    kf_hp_cluster_sync();
#endif
}
