/* ---- attention_sm90.cuh: the fused attention kernel for sm_90a -----------
 *
 * FlashAttention-3 class: O = softmax(score(Q.K^T)) . V with Q, K and V
 * moved by TMA and multiplied by wgmma, the score matrix never leaving
 * registers. The generator (codegen/cuda/cg_attention.c) puts the group's
 * score expression, the sizes and the TMA coordinate helpers in front of this
 * text, after common.cuh and hopper.cuh.
 *
 * A block is 384 threads, three warpgroups, one block an SM:
 *
 *   warpgroup 0, the producer (40 registers): one thread walks the block's
 *     work items (query tile of KF_BR = 128 rows x one batch-head) and for
 *     each loads the Q tile into the next of KF_QBUF (2) Q buffers (after
 *     both consumers said they are done with that buffer's last item:
 *     kf_qempty; with one buffer the next item's Q could only be asked for
 *     once the slower consumer's last Q.K^T was done, and its TMA latency
 *     then fell between the items, where the faster consumer waited for it
 *     and the other consumer for the faster one's turn: at S = 1024 an item
 *     sees 4.5 key tiles on average), then for each key tile the item sees,
 *     waits for a free stage of the K/V ring (kf_empty), and loads K into it
 *     (kf_fullk) and V (kf_fullv) -- separate barriers, so Q.K^T starts
 *     before V has landed. Boxes are {64 head-dim values, rows} with the
 *     128-byte swizzle; the map's extents are the real Sq / Skv, so rows past
 *     the end land as zeros, never as the next head's rows; the batch-head
 *     coordinates come from kf_coords_{q,k,v} (generated: one per map,
 *     broadcast axes -- GQA -- have no coordinate at all);
 *   warpgroups 1 and 2, the consumers (232 registers): consumer c owns query
 *     rows 64c .. 64c + 63 of the tile. Step j of an item issues, as two
 *     wgmma groups,
 *       S = Q.K^T(j)    wgmma m64n{KF_BC}k16, Q and K both from shared
 *                       memory (K-major), KF_D / 16 steps, and
 *       O += P.V(j-1)   wgmma m64n{KF_D}k16 with P of the previous tile from
 *                       registers (the S accumulator layout is the A-fragment
 *                       layout, rounded to bf16/f16 pairs) and V from shared
 *                       memory (MN-major: the transpose bit), KF_BC / 16 steps,
 *     waits for the first, gives K(j) back to the producer (kf_emptyk; its
 *     V slot, kf_emptyv, frees a step later), then runs the score
 *     expression on S (kf_score_full on tiles the mask cuts or that run past
 *     Skv, kf_score_inner elsewhere: the same rule as attention.cuh) and the
 *     online softmax in f32 registers (exp2 with log2(e), and a
 *     power-of-two scale the generator folded out of the score, in one
 *     FFMA; KF_EXP2_POLY of every 8 column groups take the exp2 as an
 *     FMA-pipe polynomial, kf_ex2_poly, the rest MUFU.EX2: 0 but where
 *     KF_CUDA_RECIPE_ATTENTION_EXP2_POLY asks, measured slower, and for a
 *     softcap at head dim 128, whose tanh takes MUFU too: 2) while
 *     P.V(j-1) may still run; then waits for the second, gives
 *     V(j-1) back, rescales O (which now holds P.V(j-1); with
 *     KF_LAZY_RESCALE -- the generator's default at head dim 128 --
 *     only when a row max of the warp grew past 2^8) and
 *     packs P(j).
 *     The score's bf16/f16 roundings are packed conversions (F2FP, the ALU
 *     pipe; cg_attention.c's kf_round_*_alu): the scalar ones are F2F on
 *     the XU pipe, which the exp2s already fill. After the last step
 *     P.V(last) runs alone and
 *     O / l leaves from registers, rows past Sq not stored -- but where
 *     KF_ITEM_OVERLAP (the generator's default with two Q buffers, at head
 *     dim 128 as its KF_SM90_JOIN_D128 says; the recipe flag
 *     KF_CUDA_RECIPE_ATTENTION_ITEMS_APART keeps the form above)
 *     joins the items: the next item's first step issues its S = Q.K^T(j0)
 *     and this item's P.V(last) in one turn, as the steps inside an item
 *     do, then runs the new item's first softmax under that P.V, and O / l of
 *     the item before leaves after the wait_group 0 where a step rescales O
 *     (o then starts over from 0). So an item boundary no longer costs an
 *     un-overlapped P.V and a Q.K^T waited for alone (at S = 1024 an item
 *     sees 4.5 key tiles on average). The item whose P.V(last) is pending
 *     keeps its batch-head and rows (set after its last step: dead in the
 *     main loop) and its l and m in place (the next item's first softmax
 *     starts its own from -inf / 0), and stays pending over an empty item (a block-sparse row with no kept tile,
 *     whose rows leave at once as 0 / 0 without touching o); the block's
 *     last item issues P.V(last) alone, outside the turns, as without the
 *     overlap. ptxas wants one P.V of a pending item in the item loop: a
 *     second one there (draining before an empty item) serialized every
 *     wgmma (C7511, not enough registers for the pipeline).
 *     Ping-pong: the two consumers take turns issuing their wgmma groups
 *     (named barriers 1 and 2, 256 threads: the one whose turn it is syncs,
 *     the other arrives once its own group is issued), so one consumer's
 *     softmax runs while the other's GEMMs keep the tensor cores busy.
 *     Consumer 1 opens with one arrival for consumer 0's first turn and
 *     leaves out its arrival after its last issue, so every named-barrier
 *     phase completes and none is left pending at exit.
 *
 * Persistent: the grid is one block an SM (at most), and block b takes the
 * units b, b + grid, ... A unit is a batch-head's pair of query tiles
 * NQT - 1 - p and p (p < NQT / 2; the middle tile alone when NQT is odd),
 * the longer first: under a causal mask the pair sees NQT + 1 key tiles
 * whatever p is, so equal shares of units are equal shares of work and no
 * block is left with the long tiles at the end (a grid of one block an item
 * left that to the block scheduler, and paid every item's start -- barrier
 * setup, the Q load, the ring's fill -- in full, where here the producer
 * loads the next item's Q and first K/V tiles while the consumers finish the
 * last one). Units are head-major, so the blocks in flight share a few
 * heads' K and V in L2. The stage index and its parity run on across items
 * on both sides; item n takes Q buffer n % KF_QBUF, whose barriers' parity
 * is (n / KF_QBUF) & 1.
 *
 * Non-causal forms (the generator's, cg_attention.c sm90_shape_of): where
 * no mask cuts tiles at head dim 128, key tiles of KF_BC = 176 (the
 * default; one Q buffer: two 88 KiB stages fill the rest), and 2-CTA clusters
 * (KF_CLUSTER 2, an even count of query tiles): cluster c takes units c,
 * c + clusters, ..., a unit being query tiles 2p (rank 0) and 2p + 1 (rank
 * 1) of one batch-head, and both CTAs walk the same key tiles, so each
 * producer loads half of every K and V tile (rows rank x KF_BC / 2 on, maps
 * of half-tile boxes) multicast into both CTAs' stage at the same offset,
 * each CTA's full barrier expecting the whole tile's bytes, and its empty
 * barriers count the consumer warps of both CTAs (lane 0 arrives here, lane
 * 1 on the peer's through mapa): no producer overwrites a stage either CTA
 * still reads. A cluster barrier after the barriers' setup and before exit
 * keeps every remote arrival and multicast inside both CTAs' lifetimes.
 *
 * Block-sparse keep maps (KF_MASK_SKIP 3): producer and consumers walk the
 * same kept key tiles (kf_bs_next, generated, reading the map), so the ring's
 * stage order agrees; the first and last tiles are j0 and the last jn < t_hi
 * rather than t_lo and t_hi - 1 (attention.cuh says which tiles are kept).
 * Where one map serves every batch-head (KF_BS_TABLE, the generator's
 * default there), the block first builds the walk in shared memory --
 * kf_bs_next one load, not a walk of global loads each waiting on the last --
 * and the units pair query tiles by rank of kept count (KF_QT: the most with
 * the fewest), the tail longest first (KF_TAIL_LPT), so blocks get like work.
 *
 * All-masked rows: m stays -inf (or the fixed KF_SCORE_MAX), p = 0, l = 0,
 * the row is 0/0 = NaN: the reference's softmax of a row of -inf.
 *
 * Hooks (the generator's): KF_D, KF_BR (128), KF_BC, KF_STAGES, KF_QBUF, KF_SQ,
 * KF_SKV, KF_BH, KF_AB ("bf16"/"f16"), KF_ELEM, KF_MASK_SKIP, KF_WINDOW,
 * KF_DESC_ADD, KF_SCORE_SCALE (the scale folded out of the score functions,
 * a power of two, or any positive constant with f32 scores; 1: none),
 * KF_LAZY_RESCALE, KF_DESC_WALK, KF_BS_EDGE_MERGED, KF_BS_L2 (with kf_o_pol), KF_L2_PREFETCH, KF_PIN_SOFTMAX,
 * KF_TREE_SOFTMAX, KF_TAIL_LPT,
 * KF_CLUSTER, KF_PRODUCER_REGS / KF_CONSUMER_REGS (setmaxnreg), KF_EXP2_POLY,
 * KF_O (param), kf_o_offset(bh, q) (O's row q of batch x head bh, in elements),
 * kf_tma_q/k/v(dst, map, c0, row, bh, bar), kf_tmapf_k/v(map, c0, row, bh),
 * kf_wgmma_qk0 / qk(s, da, db), kf_wgmma_pv(o, a, db), kf_score_full /
 * kf_score_inner; optional: KF_SCORE_MAX (a bound on every score: the
 * softmax's fixed shift, no running max), KF_SCORE_PAIR with
 * kf_score_pair(s0, s1, bh, q, kv) (the inner score of two neighbouring keys
 * at once: the inner tiles call it), and with it KF_SCORE_SPLIT: the pair
 * form in two halves around a tanh, kf_score_pre(s0, s1, mx, bh, q, kv) (the
 * tanh's operand x as s0's bits, the largest |x| into mx), then
 * kf_score_post_ident (tanh(x) as x) where the warp's every |x| is at most
 * KF_TANH_IDENT_MAX, else kf_score_post; or KF_SCORE_DIAG: the part that
 * is a function of kv - q as kf_score_diag(bh, q, kv) (a bf16x2 pair), once
 * for a thread's two rows, and the rest as kf_score_pair_dg(s0, s1, dg, bh,
 * q, kv); with it KF_DIAG_TAB: the diagonal's part free of loads in
 * kf_dtab[kv - q - KF_DIAG_TAB_LO] (KF_DIAG_TAB_N entries, filled by
 * kf_dtab_build(KF_ARGS) before the block's first barrier) and the
 * diagonal from it as kf_score_diag_t(t, bh, q, kv); and KF_SCORE_DIAG_EDGE:
 * a causal mask's full-width edge tiles by the same pair form, then -inf
 * where kv > q or kv >= KF_SKV.
 */
/* KF_ACC_INIT: with KF_DIAG_ADD where every full-width tile's score is the
 * diagonal's (a causal edge's too: KF_SCORE_DIAG_EDGE) and items run apart,
 * the affine part's step along the tile, (u / KF_DIAG_SCALE) k for a score's
 * key offset k, is the Q.K^T accumulator's start value (KF_SC_INIT, written
 * before the step's wait for K, under the other consumer's wgmmas), so the
 * wgmma adds Q.K^T to it and no instruction of the score lies between Q.K^T's
 * wait and the row max; else kf_diag_tile adds it (an FFMA a score). Not
 * with KF_EDGE_LAST: its peeled step's copy of the score took the kernel
 * past the registers' line (ptxas C7512, wgmmas serialized: B4 H32 S4096) */
#if defined(KF_SCORE_PAIR) && defined(KF_SCORE_DIAG) && defined(KF_DIAG_LIN) &&                   \
    defined(KF_DIAG_ADD) && defined(KF_SCORE_DIAG_EDGE) && !KF_ITEM_OVERLAP && !KF_EDGE_LAST &&  \
    (!defined(KF_BC_LAST) || KF_BC_LAST == 0)
#define KF_ACC_INIT 1
#else
#define KF_ACC_INIT 0
#endif
#if defined(KF_SCORE_PAIR) && defined(KF_SCORE_DIAG)
/* The pair form with its diagonal (KF_SCORE_DIAG, a function of kv - q) on
 * the key tile at kv0, a thread's scores sc[] (rows qa, qb: qr and qr + 8
 * clamped below KF_SQ; t4 its lane in the quad): the diagonal once for both
 * rows, row qr's at the tile's key pairs -8, 0, ..., KF_BC - 8 (dg[nt + 1]
 * at pair nt), and row qr + 8's at pair nt is dg[nt]. Rows past KF_SQ are
 * computed, not stored. */
__device__ __forceinline__ void kf_diag_tile(float (&sc)[KF_BC / 2], float (&tb)[2], long long bh,
                                             int qr, int qa, int qb, int kv0, int t4, KF_PARAMS) {
#if defined(KF_DIAG_LIN) && defined(KF_DIAG_ADD)
    /* KF_DIAG_ADD (cg_attention_pair.c, diag_add): the score is KF_DIAG_SCALE
     * s + f with f affine in kv, f = a + u kv along a row. A thread's score
     * at key pair nt of row qa is then KF_DIAG_SCALE (s + (u / KF_DIAG_SCALE)
     * k) + tb[0], k = 8 nt + e a compile-time offset, tb[0] = f(qr, kv0 +
     * 2 t4) (row qb's at the same key: tb[1] = tb[0] - 8 u); sc[] keeps the
     * part in parentheses (one FFMA of an immediate a score) and the softmax
     * applies the scale and tb (once a row: its max, its exp2's shift), where
     * the stepped diagonal below cost 34 FFMAs a tile more and held 34
     * registers across the wait. */
    (void)qa;
    (void)qb;
    const float2 d0 = kf_score_diag(bh, qr, kv0 - 8 + 2 * t4, KF_ARGS);
    const float2 d1 = kf_score_diag(bh, qr, kv0 - 8 + KF_BC + 2 * t4, KF_ARGS);
    const float u = (d1.x - d0.x) * (1.0f / KF_BC);
    const float us = u * (1.0f / KF_DIAG_SCALE);
    tb[0] = fmaf(u, 8.0f, d0.x);
    tb[1] = d0.x;
#if KF_ACC_INIT
    (void)us;
#else
#pragma unroll
    for (int nt = 0; nt < KF_BC / 8; nt++) {
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (nt > 0 || (e & 1))
                sc[4 * nt + e] = fmaf(us, (float)(8 * nt + (e & 1)), sc[4 * nt + e]);
    }
#endif
#else
    tb[0] = 0.0f;
    tb[1] = 0.0f;
    KF_DIAG_T dg[KF_BC / 8 + 1]; /* bf16x2 pairs, or float2 with f32 scores */
#ifdef KF_DIAG_TAB
    /* its part free of loads from the table (KF_DIAG_TAB: kf_dtab[kv - q -
     * KF_DIAG_TAB_LO], an LDS a pair where kf_score_diag computes it), the
     * rest by kf_score_diag_t */
    const unsigned *dtp = kf_dtab + (kv0 - 8 + 2 * t4 - qr - KF_DIAG_TAB_LO);
#pragma unroll
    for (int i = 0; i <= KF_BC / 8; i++)
        dg[i] = kf_score_diag_t(dtp[8 * i], bh, qr, kv0 + (i - 1) * 8 + 2 * t4, KF_ARGS);
#elif defined(KF_DIAG_LIN)
    /* an affine diagonal (KF_DIAG_LIN, f32 scores: cg_attention_pair.c,
     * diag_linear) at the first key pair and KF_BC keys on, then stepped:
     * f(kv + d) = f(kv) + u d, u = (f(kv + KF_BC) - f(kv)) / KF_BC -- an FFMA
     * a key where the diagonal cost a conversion, an add and two multiplies
     * a pair; the slope over the whole span, so its error (f's roundings over
     * KF_BC) grows to about two of f's ulps at the span's end */
    const float2 d0 = kf_score_diag(bh, qr, kv0 - 8 + 2 * t4, KF_ARGS);
    const float2 d1 = kf_score_diag(bh, qr, kv0 - 8 + KF_BC + 2 * t4, KF_ARGS);
    const float u = (d1.x - d0.x) * (1.0f / KF_BC);
#pragma unroll
    for (int i = 0; i <= KF_BC / 8; i++)
        dg[i] = make_float2(fmaf(u, (float)(8 * i), d0.x), fmaf(u, (float)(8 * i + 1), d0.x));
#else
#pragma unroll
    for (int i = 0; i <= KF_BC / 8; i++)
        dg[i] = kf_score_diag(bh, qr, kv0 + (i - 1) * 8 + 2 * t4, KF_ARGS);
#endif
#pragma unroll
    for (int nt = 0; nt < KF_BC / 8; nt++) {
        kf_score_pair_dg(sc[4 * nt], sc[4 * nt + 1], dg[nt + 1], bh, qa, kv0 + nt * 8 + 2 * t4,
                         KF_ARGS);
        kf_score_pair_dg(sc[4 * nt + 2], sc[4 * nt + 3], dg[nt], bh, qb, kv0 + nt * 8 + 2 * t4,
                         KF_ARGS);
    }
#endif
}
#endif
/* KF_TILE_AFFINE: kf_diag_tile leaves sc[] as the score's affine part
 * (KF_DIAG_ADD): the score is ts sc + tb[r] for a thread's row r (ts, tb: the
 * step's; 1 and 0 on a tile scored whole), which the online softmax applies
 * once a row -- to the tile's row max and in its exp2's shift */
#if defined(KF_SCORE_PAIR) && defined(KF_SCORE_DIAG) && defined(KF_DIAG_LIN) && defined(KF_DIAG_ADD)
#define KF_TILE_AFFINE 1
#else
#define KF_TILE_AFFINE 0
#endif
#if KF_TILE_AFFINE
#define KF_TILE_SCORE(x_, r_) fmaf(x_, ts, tb[r_])
#else
#define KF_TILE_SCORE(x_, r_) (x_)
#endif
/* Every key pair of a thread's share of the key tile -- rows qa and qb, keys
 * kv0 + 8 nt + 2 t4 and the one after, in sc[4 nt + 2 h] and the next -- as
 * F(s0, s1, [X,] bh, q, kv, KF_ARGS): the pair form's loop, whichever score
 * function it calls (X: mx for kf_score_pre; else the argument is empty) */
#define KF_EACH_PAIR(F, ...)                                                                  \
    _Pragma("unroll") for (int nt_ = 0; nt_ < KF_BC / 8; nt_++)                               \
        _Pragma("unroll") for (int h_ = 0; h_ < 2; h_++)                                      \
            F(sc[4 * nt_ + 2 * h_], sc[4 * nt_ + 2 * h_ + 1], __VA_ARGS__ bh, h_ ? qb : qa,    \
              kv0 + nt_ * 8 + 2 * t4, KF_ARGS)
#ifndef KF_DESC_WALK
#define KF_DESC_WALK 0 /* a causal or window item's key tiles diagonal-first (below) */
#endif
/* KF_DESC_WALK: producer and consumers count an item's steps j = t_lo ..
 * t_hi - 1 as before (j0, jn, the ring's stages, the join) but step j loads
 * and scores key tile t_lo + t_hi - 1 - j, so the diagonal (masked) tile is
 * the first and the row max is nearly settled by it: with a bias that grows
 * toward the diagonal (ALiBi) the ascending walk's row max grew on nearly
 * every tile, and with KF_LAZY_RESCALE O was rescaled on nearly every one.
 * Only where a mask bounds the walk to a dense range (KF_MASK_SKIP 1, 2):
 * a keep map's walk (3) and the narrower last tile (KF_BC_LAST, no mask)
 * keep the ascending order. */
#if KF_DESC_WALK
static_assert((KF_MASK_SKIP == 1 || KF_MASK_SKIP == 2) && KF_BC_LAST == 0,
              "the diagonal-first walk: causal or window items, full-width tiles");
#define KF_TILE(j_) (t_lo + t_hi - 1 - (j_))
#else
#define KF_TILE(j_) (j_)
#endif
/* KF_DESC_INNER: under a causal mask (KF_MASK_SKIP 1) with KF_BC == KF_BR,
 * a diagonal-first item's only edge tile is its first, the highest: q0 is a
 * multiple of KF_BR, so the tiles below t_hi - 1 end at or before q0 (no
 * key past a row of the item) and before kv_hi <= KF_SKV (not ragged); the
 * steps after the first then take the inner score alone, no edge path in
 * the main loop (where the diagonal-first walk with one had ptxas turn the
 * mask's selects into predicated moves on every tile: the B4 H32 S4096
 * causal main loop 722 -> 937 SASS instructions, 1-2.5% slower on an H200).
 * The window's far edge tiles come last, so it keeps the edge path. */
#if KF_DESC_WALK && KF_MASK_SKIP == 1 && KF_BC == KF_BR
#define KF_DESC_INNER 1
#else
#define KF_DESC_INNER 0
#endif
#ifndef KF_EDGE_LAST
#define KF_EDGE_LAST 0 /* an ascending causal item's last step peeled, the only edge (below) */
#endif
/* KF_EDGE_LAST: the same for the ascending walk -- under a causal mask
 * (KF_MASK_SKIP 1) with KF_BC == KF_BR only an item's last tile, t_hi - 1
 * (the diagonal, or the ragged last key tile), can be an edge: the tiles
 * below it end before q0 and before KF_SKV. The loop's steps then take the
 * inner score alone (no mask for ptxas to see there), and the last step,
 * peeled after the loop (or the first, where it is also the last), takes
 * the edge path (KF_CUDA_RECIPE_ATTENTION_EDGE_LAST; B4 H32 S4096 causal:
 * the main loop 764 -> 517 SASS instructions). Measured on an H200 it tied
 * on causal and GQA and lost 1-3.5% on ALiBi and head dim 64 (won 3% on
 * the softcap), so by default every step checks for an edge. */
/* With a sliding window (KF_MASK_SKIP 2; KF_CUDA_RECIPE_ATTENTION_WINDOW_
 * PEEL) an item has two edges: the diagonal, its last tile as above, and the
 * window's far edge, the tiles holding a key below some row's window, kv0 <=
 * q0 + KF_BR - 1 - KF_WINDOW: the first (j0, t_lo) and, where KF_WINDOW %
 * KF_BC is neither 0 nor 1, the one after it. The steps after the first up
 * to the far edge's last tile run in a loop of their own with the edge check
 * (kf_width<3>), the loop between them and the last step without one. */
#if KF_EDGE_LAST
static_assert(!KF_DESC_WALK && (KF_MASK_SKIP == 1 || KF_MASK_SKIP == 2) && KF_BC == KF_BR &&
                  KF_BC_LAST == 0,
              "the peeled last step: an ascending causal or window walk, full-width tiles");
#endif
#ifndef KF_EXP2_POLY
#define KF_EXP2_POLY 0 /* of every 8 column groups, the exp2s by polynomial (kf_ex2_mix) */
#endif
static_assert(KF_EXP2_POLY >= 0 && KF_EXP2_POLY <= 8, "exp2s by polynomial: 0 to 8 of 8");
#ifndef KF_BC_LAST
#define KF_BC_LAST 0 /* the ragged last key tile's wgmma width (0: KF_BC, as every tile) */
#endif
#ifndef KF_CLUSTER
#define KF_CLUSTER 1 /* CTAs a cluster: 1, or 2 (query tiles 2p, 2p + 1 sharing K and V) */
#endif
#ifndef KF_ITEM_OVERLAP
#define KF_ITEM_OVERLAP 0 /* the generator's: 1 joins an item's last P.V to the next's Q.K^T */
#endif
#ifndef KF_BS_EDGE_MERGED
#define KF_BS_EDGE_MERGED 0 /* the generator's: 1 lets a keep map's edge path merge (below) */
#endif
/* KF_BS_L2 (the generator's, KF_CUDA_RECIPE_ATTENTION_BS_L2; a keep map's
 * kernel only): the generated kf_tma_* loads carry L2 policies (K and V
 * evict_last, Q evict_first), O's stores kf_o_pol's (evict_first), and the
 * producer prefetches the walk's next kept tile's K and V into L2 as it loads
 * this one's, so the head's K and V that its query tiles reach at different
 * steps stay in L2 before the streams of Q and O */
#ifndef KF_BS_L2
#define KF_BS_L2 0
#endif
static_assert(!KF_BS_L2 || KF_MASK_SKIP == 3, "KF_BS_L2: a keep map's kernel");
/* the next item's Q must be loaded while this item's last P.V is not yet
 * issued: a second Q buffer */
static_assert(!KF_ITEM_OVERLAP || (KF_QBUF == 2 && KF_CLUSTER == 1), "item overlap: 2 Q buffers");
#define KF_NQT ((KF_SQ + KF_BR - 1) / KF_BR)
#define KF_HALF ((KF_NQT + 1) / 2)            /* units a batch-head */
#define KF_UNITS ((long long)KF_BH * KF_HALF)
#define KF_CHUNKS (KF_D / 64)                 /* 64-wide head-dim boxes per tile */
#define KF_Q_BYTES (KF_BR * KF_D * 2)
#define KF_KV_BYTES (KF_BC * KF_D * 2)         /* one K (or V) tile */
#define KF_STAGE_BYTES (2 * KF_KV_BYTES)
#define KF_LOG2E 1.4426950408889634f
/* the folded scale (see the softmax below) times log2(e) */
#define KF_SL2E (KF_LOG2E * KF_SCORE_SCALE)
/* the lazy rescale's threshold: a row max may grow by 2^8 before O, l and m
 * follow it */
#define KF_RESCALE_LOG2 8.0f
#define KF_EMPTY_ARRIVALS 8 /* lane 0 of each of the 8 consumer warps */

static_assert(KF_BR == 128, "two consumers of 64 rows");
static_assert(KF_D == 64 || KF_D == 128, "head dim");
/* a key tile of whole 16-key wgmma steps; K's rows in whole 8-row swizzle
 * atoms (1024 bytes), so each 64-wide chunk (and, with 2-CTA clusters, each
 * half of one) starts on the pattern's boundary */
static_assert(KF_BC % 16 == 0 && KF_BC <= 256, "key tile");
static_assert(KF_BLOCK == 384, "producer + two consumers");
/* KF_BC_LAST (the generator's, sm90_shape_of): where every item walks every
 * key tile (no mask cuts tiles, no keep map, no cluster) and the last tile is
 * ragged, its Q.K^T is m64n{KF_BC_LAST}k16 -- the tile's real keys rounded up
 * to 16 -- its softmax takes those columns alone and P.V(last) that many
 * keys: non-causal Skv 4096 in 176-key tiles is 23 whole tiles and 48 keys,
 * where the full-width last tile had the tensor cores and the softmax work
 * 24 x 176 = 4224 keys a row for 4096 (3.1% more; ncu, H100, c6b8cf2: the
 * tensor pipe busy as many cycles more than cuDNN's, at the same share of
 * its active cycles). 32 to 64 keys (the generator's rule: wider ones
 * spilled; 32 for 16 or fewer, for the tree softmax's 4 partial maxima).
 * Not with KF_ITEM_OVERLAP (two Q buffers; the 176-key form has one), whose
 * joined turn issues the pending item's P.V(last) at full width. */
static_assert(KF_BC_LAST == 0 || (KF_BC_LAST % 16 == 0 && KF_BC_LAST >= 32 &&
                                  KF_BC_LAST < KF_BC && KF_MASK_SKIP == 0 && KF_CLUSTER == 1 &&
                                  !KF_ITEM_OVERLAP && (KF_SKV + KF_BC - 1) / KF_BC >= 4 &&
                                  KF_SKV - (KF_SKV - 1) / KF_BC * KF_BC <= KF_BC_LAST),
              "a narrower last key tile: every item's, the fourth or later");
static_assert(KF_CLUSTER == 1 || (KF_CLUSTER == 2 && KF_MASK_SKIP == 0 && KF_NQT % 2 == 0 &&
                                  (KF_BC / 2) % 8 == 0 && !KF_TAIL_LPT),
              "2-CTA clusters: every key tile, pairs of query tiles");
/* setmaxnreg moves registers only among the block's own warps: ptxas gives
 * __launch_bounds__(384, 1) 168 a thread, so the producer's and consumers'
 * counts must add up to exactly 168 x 384 (32 / 240, at 453a891, asks for
 * 1024 more than the producer gives back, so the consumers' setmaxnreg.inc
 * can wait forever: its first H100 run did not finish in 60 s). */
#ifndef KF_PRODUCER_REGS /* the generator's (40 / 232 for every form today) */
#define KF_PRODUCER_REGS 40
#define KF_CONSUMER_REGS 232
#endif
static_assert(KF_PRODUCER_REGS * 128 + KF_CONSUMER_REGS * 256 == 168 * 384, "register budget");

__device__ __forceinline__ float kf_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
/* 2^x on the FMA and integer pipes, none of it on MUFU (the XU pipe, 16
 * lanes a clock an SM, which the softmax's exp2s fill while the FMA pipe
 * idles): x clamped to -127 (max.NaN: a NaN stays NaN), t = x + 1.5 x 2^23
 * rounds it to the integer j in t's low bits, f = x - j in [-1/2, 1/2], p(f)
 * = 1 + f(c1 + f(c2 + f c3)) -- the minimax cubic for 2^f's relative error
 * with p(0) exactly 1, 4.4e-4 at most, under bf16's half ulp (2^-9) and P's
 * rounding to it -- and j added to p's exponent field: t's bits shifted
 * left 23 are j << 23 (mod 2^32; 1.5 x 2^23's bits have none below bit
 * 22). x <= -127 (-inf: a masked score) gives exactly 0 (p(0) = 1 =
 * 2^127 x 2^-127: the bits 127 << 23 less 127 << 23); x in (-127, -125.5]
 * gives a value in f32's denormals or its least normals where ex2.approx.ftz
 * gives 0 or 2^x: against a row sum of at least 1, neither counts. 8
 * instructions (FMNMX, 3 FADD, 3 FFMA, one shift-add) for one MUFU.EX2. */
__device__ __forceinline__ float kf_ex2_poly(float x) {
    float xc;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(xc) : "f"(x), "f"(-127.0f));
    const float t = xc + 12582912.0f;
    const float f = xc - (t - 12582912.0f);
    const float p = fmaf(fmaf(fmaf(0x1.55989ep-5f, f, 0x1.efadb2p-3f), f, 0x1.643b8cp-1f), f, 1.0f);
    return __int_as_float(__float_as_int(p) + (__float_as_int(t) << 23));
}
/* The softmax's exp2 of a score of 8-column group nt (of KF_BC / 8): by the
 * polynomial (kf_ex2_poly) in KF_EXP2_POLY of every 8 groups, spread evenly
 * (the generator's constant: 0 keeps every exp2 on MUFU), else MUFU.EX2. nt
 * is a constant once the loops are unrolled, so the choice folds away. */
__device__ __forceinline__ float kf_ex2_mix(float x, int nt) {
    return (nt * KF_EXP2_POLY) % 8 + KF_EXP2_POLY >= 8 ? kf_ex2_poly(x) : kf_ex2(x);
}
/* A key tile's width as a type: the consumers' step (finish, below) takes
 * the full KF_BC or the narrower last tile's KF_BC_LAST, a constant in each
 * of its two bodies. */
template <int W_> struct kf_width {
    static constexpr int value = W_;
};

/* Two floats as a packed pair (lo in the low half), rounded to nearest even. */
__device__ __forceinline__ unsigned kf_pack2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn." KF_AB "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* The wgmma descriptor of base + off (off a multiple of 16 bytes, base + off
 * inside shared memory): with KF_DESC_ADD (a generator switch, for
 * measuring) the tile's descriptor d0 = kf_hp_desc(base) plus off / 16 --
 * the same bits, since the address field is the byte address / 16 in the
 * low 14 bits and base + off < 256 KiB never carries out of it -- one add
 * where kf_hp_desc masks, shifts and ORs again: the loop's uniform-datapath
 * work (about 90 instructions a thread and key tile beside 12 HGMMA at head
 * dim 64) takes issue slots the consumers' softmax needs. */
__device__ __forceinline__ unsigned long long kf_desc_at(unsigned long long d0, unsigned base,
                                                         unsigned off, unsigned lbo) {
#if KF_DESC_ADD
    (void)base;
    (void)lbo;
    return d0 + (off >> 4);
#else
    (void)d0;
    return kf_hp_desc(base + off, lbo, 1024u);
#endif
}

/* S = Q . K^T of the key tile at kb (K-major descriptor dk0), Q from qbase
 * (dq0): the KF_D / 16 wgmmas of one group, the first (W0) writing S, the
 * rest (W) adding to it; the caller fences before and commits after. W0, W:
 * kf_wgmma_qk0, kf_wgmma_qk (m64n{KF_BC}), or kf_wgmma_qkl0, kf_wgmma_qkl for
 * the narrow last tile (m64n{KF_BC_LAST}). */
typedef void (*kf_wgmma_fn)(float *, unsigned long long, unsigned long long);
template <kf_wgmma_fn W0, kf_wgmma_fn W>
__device__ __forceinline__ void kf_issue_qk(float *sc, unsigned long long dq0, unsigned qbase,
                                            unsigned long long dk0, unsigned kb) {
#pragma unroll
    for (int kk = 0; kk < KF_D / 16; kk++) {
        const unsigned off = (kk / 4) * (KF_BR * 128) + (kk % 4) * 32;
        const unsigned offk = (kk / 4) * (KF_BC * 128) + (kk % 4) * 32;
        if (kk == 0)
            W0(sc, kf_desc_at(dq0, qbase, off, 16u), kf_desc_at(dk0, kb, offk, 16u));
        else
            W(sc, kf_desc_at(dq0, qbase, off, 16u), kf_desc_at(dk0, kb, offk, 16u));
    }
}
/* O += P . V of the V tile at vbp (MN-major descriptor dv0): N / 16 wgmmas of
 * one group, P's packed pairs from registers (pa); the caller fences before
 * and commits after. */
template <int N>
__device__ __forceinline__ void kf_issue_pv(float *o, const unsigned (*pa)[4],
                                            unsigned long long dv0, unsigned vbp) {
#pragma unroll
    for (int kk = 0; kk < N / 16; kk++)
        kf_wgmma_pv(o, pa[kk], kf_desc_at(dv0, vbp, kk * 2048u, KF_BC * 128u));
}

/* KF_QT(r): the query tile of rank r, r itself (a causal mask's tiles rank
 * by index) but where the generator's block-sparse walk (KF_BS_TABLE) ranks
 * the query tiles by the key tiles they visit (kf_bs_ord, built by
 * kf_bs_build before the roles split). */
#ifndef KF_QT
#define KF_QT(r_) (r_)
#endif

/* Item h (0: the longer, 1: the shorter) of unit u: its batch-head and query
 * tile; false when the unit has no item h (the middle tile of an odd NQT). */
__device__ __forceinline__ bool kf_unit_item(long long u, int h, long long &bh, int &qt) {
    const int p = (int)(u % KF_HALF);
    bh = u / KF_HALF;
    qt = KF_QT(h ? p : KF_NQT - 1 - p);
    return h == 0 || 2 * p + 1 != KF_NQT;
}

#if KF_TAIL_LPT
/* KF_TAIL_LPT (a recipe flag, KF_CUDA_RECIPE_ATTENTION_TAIL_LPT): the units
 * of all but the last two rounds and the leftover (u < u0 = q x grid, q =
 * units / grid - 2) go grid-strided as above, q to every block; the rest
 * (the tail, 2 to 3 rounds' worth) as single items, longest first, dealt
 * out in a snake -- round r gives tail item r x grid + b to block b on even
 * rounds, r x grid + grid - 1 - b on odd ones -- so the blocks end within
 * about one short item of each other, where whole units leave the last
 * round to (units mod grid) of the blocks (causal B4 H32 S4096: 2048 units
 * on 132 SMs, 68 blocks take one unit more than the others: 3% of the
 * kernel). The tail's items in order: every tail unit's longer item by p
 * ascending (query tile NQT - 1 - p: NQT - p key tiles under a causal mask),
 * then the shorter ones by p descending (tile p: p + 1 key tiles), units of
 * one p by u ascending. 32-bit arithmetic (the generator takes the flag only
 * where the units fit), one division by the grid a block. */
static_assert(KF_UNITS < (1LL << 30), "the tail's 32-bit item arithmetic");
struct kf_lpt {
    unsigned q, u0; /* rounds of whole units, and the first tail unit */
};

__device__ __forceinline__ kf_lpt kf_lpt_init() {
    const unsigned r = (unsigned)KF_UNITS / gridDim.x;
    kf_lpt l;
    l.q = r > 2u ? r - 2u : 0u;
    l.u0 = l.q * gridDim.x;
    return l;
}

/* Item k of the tail, counted down through p's groups (longer items: p
 * ascending; shorter: p descending, the middle tile having none): false
 * past the last. */
__device__ __forceinline__ bool kf_lpt_tail(const kf_lpt &l, unsigned k, long long &bh, int &qt) {
    const unsigned nu = (unsigned)KF_UNITS - l.u0, r0 = l.u0 % KF_HALF;
    const bool longer = k < nu;
    if (!longer)
        k -= nu;
    for (int i = 0; i < KF_HALF; i++) {
        const int p = longer ? i : KF_HALF - 1 - i;
        if (!longer && 2 * p + 1 == KF_NQT)
            continue;
        /* the first tail unit whose p is p, and how many there are */
        const unsigned f = l.u0 + ((unsigned)p + KF_HALF - r0) % KF_HALF;
        const unsigned c =
            f < (unsigned)KF_UNITS ? ((unsigned)KF_UNITS - f + KF_HALF - 1) / KF_HALF : 0u;
        if (k < c) {
            bh = (long long)(f / KF_HALF + k);
            qt = KF_QT(longer ? KF_NQT - 1 - p : p);
            return true;
        }
        k -= c;
    }
    return false;
}

/* The block's first item at t or after it (t = 0, 1, ...: both sides walk
 * the same items), its batch-head and query tile; -1 past the last. A
 * window's rounds go in a snake too (round r gives unit r x grid + b to
 * block b on even rounds, r x grid + grid - 1 - b on odd ones): grid-strided,
 * block b keeps the units whose p is b mod (grid mod KF_HALF)'s class (B4
 * H32 S4096: 132 mod 16 = 4), and a window's units are unequal where p is
 * below window / 128 (its shorter item is cut by the start), so a quarter of
 * the blocks kept the longest; the snake pairs class c with 3 - c
 * (bench/attn_schedule.py: window 1024 4.5% over the mean, 1.5% in the
 * snake). Measured (H200, 376ec31 against the snake, three processes each
 * in the order A B B A A B, after 1 ms asleep): window 1024 0.5122 ->
 * 0.5014 ms, window 2048 0.7620 -> 0.7325, but window 512 0.3527 -> 0.3573
 * (1.3% slower; the model sees no imbalance there to mend). A causal unit's
 * two items visit NQT + 1 key tiles whatever p: its rounds stay
 * grid-strided. */
__device__ __forceinline__ int kf_lpt_scan(const kf_lpt &l, int t, long long &bh, int &qt) {
    for (;; t++) {
        if ((unsigned)t < 2u * l.q) {
#if KF_MASK_SKIP == 2
            const unsigned r = (unsigned)t >> 1;
            const unsigned b = (r & 1u) ? gridDim.x - 1u - blockIdx.x : blockIdx.x;
            if (kf_unit_item((long long)r * gridDim.x + b, t & 1, bh, qt))
                return t;
#else
            if (kf_unit_item(blockIdx.x + (long long)(t >> 1) * gridDim.x, t & 1, bh, qt))
                return t;
#endif
            continue;
        }
        const unsigned r = (unsigned)t - 2u * l.q;
        const unsigned k = r * gridDim.x + ((r & 1u) ? gridDim.x - 1u - blockIdx.x : blockIdx.x);
        return kf_lpt_tail(l, k, bh, qt) ? t : -1;
    }
}
#endif

extern "C" __global__ void __launch_bounds__(384, 1)
    KF_KERNEL(const __grid_constant__ kf_tmap tq, const __grid_constant__ kf_tmap tk,
              const __grid_constant__ kf_tmap tv, KF_PARAMS) {
    extern __shared__ __align__(1024) unsigned char kf_dsmem[];
    __shared__ __align__(8) unsigned long long kf_fullk[KF_STAGES], kf_fullv[KF_STAGES],
        kf_emptyk[KF_STAGES], kf_emptyv[KF_STAGES], kf_qfull[KF_QBUF], kf_qempty[KF_QBUF];
#if KF_PIN_SOFTMAX
    /* one word a consumer thread, written once a key tile and never read:
     * the store that pins P.V's wait after the softmax (finish, below) */
    __shared__ float kf_sink[256];
#endif
    KF_SETUP();
    /* Q, then the ring, from the first 1024-byte boundary (where the
     * swizzle pattern starts over); launch.shared_bytes has the 1024. */
    const unsigned raw = (unsigned)__cvta_generic_to_shared(kf_dsmem);
    const unsigned sq = (raw + 1023u) & ~1023u;
    const unsigned ring = sq + KF_QBUF * KF_Q_BYTES;
    const unsigned fk0 = (unsigned)__cvta_generic_to_shared(&kf_fullk[0]);
    const unsigned fv0 = (unsigned)__cvta_generic_to_shared(&kf_fullv[0]);
    const unsigned ek0 = (unsigned)__cvta_generic_to_shared(&kf_emptyk[0]);
    const unsigned ev0 = (unsigned)__cvta_generic_to_shared(&kf_emptyv[0]);
    const unsigned qf0 = (unsigned)__cvta_generic_to_shared(&kf_qfull[0]);
    const unsigned qe0 = (unsigned)__cvta_generic_to_shared(&kf_qempty[0]);
    const int wg = threadIdx.x / 128;
    if (threadIdx.x == 0) {
        for (int s = 0; s < KF_STAGES; s++) {
            kf_hp_init(fk0 + 8 * s, 1);
            kf_hp_init(fv0 + 8 * s, 1);
            /* lane 0 of each consumer warp, of both CTAs of a cluster */
            kf_hp_init(ek0 + 8 * s, KF_EMPTY_ARRIVALS * KF_CLUSTER);
            kf_hp_init(ev0 + 8 * s, KF_EMPTY_ARRIVALS * KF_CLUSTER);
        }
        for (int b = 0; b < KF_QBUF; b++) {
            kf_hp_init(qf0 + 8 * b, 1);
            kf_hp_init(qe0 + 8 * b, KF_EMPTY_ARRIVALS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"((unsigned long long)&tq) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"((unsigned long long)&tk) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"((unsigned long long)&tv) : "memory");
    }
#if defined(KF_SCORE_PAIR) && defined(KF_SCORE_DIAG) && defined(KF_DIAG_TAB)
    /* the diagonal's part free of loads over kv - q into shared memory (the
     * generator's kf_dtab_build): the consumers read it from the first item on */
    kf_dtab_build(KF_ARGS);
#endif
#ifdef KF_BS_TABLE
    /* the block-sparse walk and the query tiles' ranks into shared memory
     * (the generator's): every role reads them from the first item on */
    static_assert(KF_CLUSTER == 1, "no cluster form takes a keep map");
    kf_bs_build(KF_ARGS);
#endif
#if KF_CLUSTER == 2
    /* both CTAs' barriers set up before any multicast or remote arrival */
    kf_hp_cluster_sync();
    const unsigned rank = kf_hp_cluster_rank();
    /* a consumer warp's lane 1 gives K and V stages back to the peer too,
     * whose multicast half lands in this CTA's ring */
    const unsigned pek0 = kf_hp_mapa(ek0, rank ^ 1u), pev0 = kf_hp_mapa(ev0, rank ^ 1u);
#else
    __syncthreads();
#endif

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(KF_PRODUCER_REGS) : "memory");
        if (threadIdx.x == 0) {
            int s = 0;
            unsigned ph = 0, nq = 0;
#if KF_TAIL_LPT
            const kf_lpt lp = kf_lpt_init();
            long long bh;
            int qt;
            for (int t = kf_lpt_scan(lp, 0, bh, qt); t >= 0; t = kf_lpt_scan(lp, t + 1, bh, qt)) {
#elif KF_CLUSTER == 2
            /* cluster c takes units c, c + clusters, ...: query tile
             * 2p + rank of the unit's batch-head */
            for (long long u = blockIdx.x / 2; u < (long long)KF_BH * (KF_NQT / 2);
                 u += gridDim.x / 2) {
                const long long bh = u / (KF_NQT / 2);
                const int qt = 2 * (int)(u % (KF_NQT / 2)) + (int)rank;
#else
            for (int t = 0;; t++) {
                long long bh;
                int qt;
                const long long u = blockIdx.x + (long long)(t >> 1) * gridDim.x;
                if (u >= KF_UNITS)
                    break;
                if (!kf_unit_item(u, t & 1, bh, qt))
                    continue;
#endif
                const int q0 = qt * KF_BR;
                int kv_lo = 0, kv_hi = KF_SKV;
#if KF_MASK_SKIP == 1 || KF_MASK_SKIP == 2
                kv_hi = min(KF_SKV, q0 + KF_BR);
#endif
#if KF_MASK_SKIP == 2
                kv_lo = max(0, q0 - KF_WINDOW + 1);
#endif
                const int t_lo = kv_lo / KF_BC, t_hi = (kv_hi + KF_BC - 1) / KF_BC;
                /* Q buffer nq % KF_QBUF, its (nq / KF_QBUF)-th use */
                const unsigned qbuf = nq % KF_QBUF, qph = (nq / KF_QBUF) & 1u;
                const unsigned qf = qf0 + 8 * qbuf;
                kf_hp_wait(qe0 + 8 * qbuf, qph ^ 1u);
                kf_hp_expect(qf, KF_Q_BYTES);
#pragma unroll
                for (int c = 0; c < KF_CHUNKS; c++)
                    kf_tma_q(sq + qbuf * KF_Q_BYTES + c * (KF_BR * 128), &tq, 64 * c, q0, bh, qf);
                nq++;
                const bool bs_dense = kf_bs_dense(bh, q0, KF_ARGS);
                for (int j = kf_bs_next(bh, q0, bs_dense, t_lo, t_hi, KF_ARGS); j < t_hi;
                     j = kf_bs_next(bh, q0, bs_dense, j + 1, t_hi, KF_ARGS)) {
                    const unsigned kb = ring + (unsigned)s * KF_STAGE_BYTES, vb = kb + KF_KV_BYTES;
                    /* step j's key tile (KF_DESC_WALK: the diagonal first) */
                    const int jt = KF_TILE(j);
#if KF_CLUSTER == 2
                    /* this CTA's half of the tile's rows, into both CTAs
                     * (each barrier expects the whole tile: both halves) */
                    const unsigned hoff = rank * (KF_BC / 2) * 128u;
                    const int hrow = jt * KF_BC + (int)rank * (KF_BC / 2);
#else
                    const unsigned hoff = 0;
                    const int hrow = jt * KF_BC;
#endif
                    kf_hp_wait(ek0 + 8 * s, ph ^ 1u);
                    kf_hp_expect(fk0 + 8 * s, KF_KV_BYTES);
#pragma unroll
                    for (int c = 0; c < KF_CHUNKS; c++)
                        kf_tma_k(kb + c * (KF_BC * 128) + hoff, &tk, 64 * c, hrow, bh, fk0 + 8 * s);
                    kf_hp_wait(ev0 + 8 * s, ph ^ 1u);
                    kf_hp_expect(fv0 + 8 * s, KF_KV_BYTES);
#pragma unroll
                    for (int c = 0; c < KF_CHUNKS; c++)
                        kf_tma_v(vb + c * (KF_BC * 128) + hoff, &tv, 64 * c, hrow, bh, fv0 + 8 * s);
#if KF_BS_L2
                    {
                        /* the walk's next kept tile into L2 (KF_BS_L2) */
                        const int jn = kf_bs_next(bh, q0, bs_dense, j + 1, t_hi, KF_ARGS);
                        if (jn < t_hi) {
#pragma unroll
                            for (int c = 0; c < KF_CHUNKS; c++) {
                                kf_tmapf_k(&tk, 64 * c, jn * KF_BC, bh);
                                kf_tmapf_v(&tv, 64 * c, jn * KF_BC, bh);
                            }
                        }
                    }
#endif
#if KF_L2_PREFETCH
                    /* K and V of the tile KF_L2_PREFETCH further on, into L2
                     * alone (a generator switch, for measuring) */
                    if (j + KF_L2_PREFETCH < t_hi) {
#pragma unroll
                        for (int c = 0; c < KF_CHUNKS; c++) {
                            kf_tmapf_k(&tk, 64 * c, KF_TILE(j + KF_L2_PREFETCH) * KF_BC, bh);
                            kf_tmapf_v(&tv, 64 * c, KF_TILE(j + KF_L2_PREFETCH) * KF_BC, bh);
                        }
                    }
#endif
                    if (++s == KF_STAGES) {
                        s = 0;
                        ph ^= 1u;
                    }
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(KF_CONSUMER_REGS) : "memory");
        const int cw = wg - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
        const int g4 = lane >> 2, t4 = lane & 3;
#if KF_PIN_SOFTMAX
        const unsigned sink = (unsigned)__cvta_generic_to_shared(&kf_sink[threadIdx.x - 128]);
#endif
        const bool al_o = kf_aligned(KF_O, 4);
        int s = 0;
        unsigned ph = 0, nq = 0;
        /* O, P (as wgmma A fragments) and the stage of the tile P.V reads
         * (its V) and its parity: an item's own, but with KF_ITEM_OVERLAP
         * those of the item before until its last P.V is issued */
        float o[KF_D / 2];
        unsigned pa[KF_BC / 16][4];
        int sp = 0;
        unsigned php = 0;
        /* O / l of an item -- batch-head bh_, this lane's rows qr_ and
         * qr_ + 8, row sums l0, l1 (this lane's share) and maxima m0, m1 --
         * rounded to the output's dtype: [.., sq, KF_D] contiguous; with
         * `empty` (an item that saw no key tile) O is 0, whatever o holds */
        auto store_o = [&](long long bh_, int qr_, float l0, float l1, float m0, float m1,
                           bool empty) {
            float l_[2] = {l0, l1};
#pragma unroll
            for (int r = 0; r < 2; r++) {
                l_[r] += __shfl_xor_sync(0xffffffffu, l_[r], 1);
                l_[r] += __shfl_xor_sync(0xffffffffu, l_[r], 2);
            }
            const float inv[2] = {1.0f / l_[0], 1.0f / l_[1]};
#if KF_BS_L2
            const unsigned long long opol = kf_o_pol(); /* evict_first */
#endif
#ifdef KF_LSE
            if (t4 == 0) { /* the rows' log-sum-exp: one lane of the quad */
                const float mt[2] = {m0 * KF_SCORE_SCALE, m1 * KF_SCORE_SCALE};
                kf_attn_lse2(KF_LSE, bh_ * KF_SQ, qr_, KF_SQ, mt, l_);
            }
#else
            (void)m0;
            (void)m1;
#endif
            /* rows past KF_SQ are not stored: with KF_ITEM_OVERLAP by
             * predicated stores, not a branch, since this then runs inside
             * the item loop, where a lane-divergent branch took ptxas's
             * descriptor arithmetic off the uniform datapath for the whole
             * loop (a step's issue at head dim 128: 149 instructions where
             * 78); without it the branch, as before (the same instruction
             * count as the kernel before the overlap) */
#if KF_ITEM_OVERLAP
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int q = qr_ + 8 * r;
                const unsigned in = q < KF_SQ;
                KF_ELEM *orow = KF_O + kf_o_offset(bh_, min(q, KF_SQ - 1));
#pragma unroll
                for (int i = 0; i < KF_D / 8; i++) {
                    const float v0 = empty ? 0.0f : o[4 * i + 2 * r];
                    const float v1 = empty ? 0.0f : o[4 * i + 2 * r + 1];
                    const unsigned w = kf_pack2(v0 * inv[r], v1 * inv[r]);
                    KF_ELEM *p = orow + i * 8 + 2 * t4;
                    if (al_o)
#if KF_BS_L2
                        asm volatile("{\n.reg .pred p;\nsetp.ne.u32 p, %2, 0;\n"
                                     "@p st.global.L2::cache_hint.b32 [%0], %1, %3;\n}" ::"l"(p),
                                     "r"(w), "r"(in), "l"(opol)
                                     : "memory");
#else
                        asm volatile("{\n.reg .pred p;\nsetp.ne.u32 p, %2, 0;\n"
                                     "@p st.global.b32 [%0], %1;\n}" ::"l"(p),
                                     "r"(w), "r"(in)
                                     : "memory");
#endif
                    else
                        asm volatile("{\n.reg .pred p;\nsetp.ne.u32 p, %3, 0;\n"
                                     "@p st.global.b16 [%0], %1;\n"
                                     "@p st.global.b16 [%0+2], %2;\n}" ::"l"(p),
                                     "h"((unsigned short)(w & 0xffffu)),
                                     "h"((unsigned short)(w >> 16)), "r"(in)
                                     : "memory");
                }
            }
#else
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int q = qr_ + 8 * r;
                if (q >= KF_SQ)
                    continue;
                KF_ELEM *orow = KF_O + kf_o_offset(bh_, q);
#pragma unroll
                for (int i = 0; i < KF_D / 8; i++) {
                    const unsigned w =
                        kf_pack2(o[4 * i + 2 * r] * inv[r], o[4 * i + 2 * r + 1] * inv[r]);
                    KF_ELEM *p = orow + i * 8 + 2 * t4;
                    if (al_o) {
#if KF_BS_L2
                        asm volatile("st.global.L2::cache_hint.b32 [%0], %1, %2;" ::"l"(p), "r"(w),
                                     "l"(opol));
#else
                        *reinterpret_cast<unsigned *>(p) = w;
#endif
                    } else {
                        p[0].x = (unsigned short)(w & 0xffffu);
                        p[1].x = (unsigned short)(w >> 16);
                    }
                }
            }
            (void)empty;
#endif
        };
        /* O += P . V(sp), alone and outside the turns, waited for, and its
         * V slot given back: an item's last step without the overlap */
        auto pv_last = [&]() {
            const unsigned vbp = ring + (unsigned)sp * KF_STAGE_BYTES + KF_KV_BYTES;
            const unsigned long long dv0 = kf_hp_desc(vbp, KF_BC * 128u, 1024u);
            kf_hp_wait(fv0 + 8 * sp, php);
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
            kf_issue_pv<KF_BC_LAST ? KF_BC_LAST : KF_BC>(o, pa, dv0, vbp);
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            if (lane == 0)
                kf_hp_arrive(ev0 + 8 * sp);
#if KF_CLUSTER == 2
            else if (lane == 1)
                kf_hp_arrive_cluster(pev0 + 8 * sp);
#endif
        };
#if KF_ITEM_OVERLAP
        /* the item whose last P.V is not yet issued (pend): its batch-head
         * and rows, for store_o once that P.V is done; its row maxima and
         * sums stay in m and l until the next item's first softmax (finish,
         * joined), so that nothing of it but these is live in the loop */
        bool pend = false;
        long long bh_p = 0;
        int qr_p = 0;
#ifdef KF_SCORE_MAX
        const float m[2] = {KF_SCORE_MAX, KF_SCORE_MAX};
        float l[2] = {0.0f, 0.0f};
#else
        float m[2] = {-KF_INF, -KF_INF}, l[2] = {0.0f, 0.0f};
#endif
#pragma unroll
        for (int i = 0; i < KF_D / 2; i++)
            o[i] = 0.0f;
#endif
        if (cw == 1) /* consumer 0's first turn */
            asm volatile("bar.arrive 1, 256;" ::: "memory");
#if KF_TAIL_LPT
        const kf_lpt lp = kf_lpt_init();
        long long bh;
        int qt;
        for (int t = kf_lpt_scan(lp, 0, bh, qt); t >= 0; t = kf_lpt_scan(lp, t + 1, bh, qt)) {
            /* no item after this one (the next looked up and dropped: only
             * the flag stays live through the item) */
            long long bh_n;
            int qt_n;
            const bool last_turn = kf_lpt_scan(lp, t + 1, bh_n, qt_n) < 0;
#elif KF_CLUSTER == 2
        for (long long u = blockIdx.x / 2; u < (long long)KF_BH * (KF_NQT / 2);
             u += gridDim.x / 2) {
            const long long bh = u / (KF_NQT / 2);
            const int qt = 2 * (int)(u % (KF_NQT / 2)) + (int)rank;
            const bool last_turn = u + gridDim.x / 2 >= (long long)KF_BH * (KF_NQT / 2);
#else
        for (int t = 0;; t++) {
            long long bh;
            int qt;
            const long long u = blockIdx.x + (long long)(t >> 1) * gridDim.x;
            if (u >= KF_UNITS)
                break;
            if (!kf_unit_item(u, t & 1, bh, qt))
                continue;
            /* no item after this one: the last unit's second item, or its
             * first where it has no second */
            const bool last_turn =
                u + gridDim.x >= KF_UNITS && ((t & 1) || 2 * (int)(u % KF_HALF) + 1 == KF_NQT);
#endif
            const int q0 = qt * KF_BR;
            int kv_lo = 0, kv_hi = KF_SKV;
#if KF_MASK_SKIP == 1 || KF_MASK_SKIP == 2
            kv_hi = min(KF_SKV, q0 + KF_BR);
#endif
#if KF_MASK_SKIP == 2
            kv_lo = max(0, q0 - KF_WINDOW + 1);
#endif
            const int t_lo = kv_lo / KF_BC, t_hi = (kv_hi + KF_BC - 1) / KF_BC;
            /* The tiles visited: j0, j1, ... (every one in [t_lo, t_hi) but
             * where a block-sparse keep map drops it: kf_bs_*, the producer's
             * same walk) */
            const bool bs_dense = kf_bs_dense(bh, q0, KF_ARGS);
            const int j0 = kf_bs_next(bh, q0, bs_dense, t_lo, t_hi, KF_ARGS);
            const int j1 = j0 < t_hi ? kf_bs_next(bh, q0, bs_dense, j0 + 1, t_hi, KF_ARGS) : t_hi;
            /* This warp's 16 rows start at qw; this lane's are qr, qr + 8. */
            const int qw = q0 + cw * 64 + warp * 16, qr = qw + g4;
            const int qa = min(qr, KF_SQ - 1), qb = min(qr + 8, KF_SQ - 1);
#if KF_ACC_INIT
            /* the affine part's step a key (KF_ACC_INIT), the item's */
            const float us_item = (kf_score_diag(bh, qr, KF_BC, KF_ARGS).x -
                                   kf_score_diag(bh, qr, 0, KF_ARGS).x) *
                                  (1.0f / KF_BC) * (1.0f / KF_DIAG_SCALE);
/* (the empty asm statements keep the writes before the wait for K, where
 * ptxas had sunk them past the consumers' turn barrier, in front of the
 * wgmmas) */
#define KF_SC_INIT()                                                                              \
    _Pragma("unroll") for (int nt_ = 0; nt_ < KF_BC / 8; nt_++)                                   \
        _Pragma("unroll") for (int e_ = 0; e_ < 4; e_++) {                                        \
            sc[4 * nt_ + e_] = us_item * (float)(8 * nt_ + (e_ & 1));                             \
            asm volatile("" : "+f"(sc[4 * nt_ + e_]));                                            \
        }
#define KF_QK0 kf_wgmma_qk
#else
#define KF_SC_INIT() ((void)0)
#define KF_QK0 kf_wgmma_qk0
#endif
#if !KF_ITEM_OVERLAP
#pragma unroll
            for (int i = 0; i < KF_D / 2; i++)
                o[i] = 0.0f;
            sp = 0;
            php = 0;
#ifdef KF_SCORE_MAX
            /* a bounded score (KF_SCORE_MAX, below): m is the bound, fixed */
            const float m[2] = {KF_SCORE_MAX, KF_SCORE_MAX};
            float l[2] = {0.0f, 0.0f};
            (void)m;
#else
            float m[2] = {-KF_INF, -KF_INF}, l[2] = {0.0f, 0.0f};
#endif
#endif
#if defined(KF_SCORE_PAIR) && defined(KF_SCORE_SPLIT)
            /* the split (below) on this item's inner tiles until a warp's
             * tile needs the tanh, the pair form whole after it */
            bool split_try = true;
#endif
            const unsigned qbuf = nq % KF_QBUF;
            const unsigned qe = qe0 + 8 * qbuf;
            kf_hp_wait(qf0 + 8 * qbuf, (nq / KF_QBUF) & 1u);
            nq++;
            const unsigned qbase = sq + qbuf * KF_Q_BYTES + cw * 8192u;
            const unsigned long long dq0 = kf_hp_desc(qbase, 16u, 1024u);
            if (j0 >= t_hi && lane == 0)
                kf_hp_arrive(qe);
            float sc[KF_BC / 2];
            /* After step j's Q.K^T is done (wait_group 1: P.V(j - 1), the
             * step's second group, may still run): K(j) back to the
             * producer, the score expression and the online softmax of S(j)
             * -- under P.V(j - 1), which reads pa and accumulates into o, so
             * neither is touched -- then wait_group 0, V(j - 1) back, O
             * rescaled and P(j) packed into pa. With `joined` (KF_ITEM_OVERLAP:
             * step j0 issued with the item before's P.V(last) in flight) that
             * item's O leaves after the wait instead, and o starts over. */
            auto finish = [&](int j, int jn, bool joined, auto wt, auto ft) {
                constexpr int W = decltype(wt)::value; /* the tile's width */
                /* the item's first step (j0): kf_width<1>; KF_EDGE_LAST's
                 * peeled last step: kf_width<2>, a window's far-edge steps
                 * after the first: kf_width<3>; else kf_width<0> */
                constexpr int STEP = decltype(ft)::value;
                constexpr bool FIRST = STEP == 1;
                (void)FIRST;
#if KF_ITEM_OVERLAP
                /* joined: m and l still hold the pending item's; this item's
                 * start over (the pending item's leave with its O below) */
                float m_o[2] = {m[0], m[1]}, l_o[2] = {l[0], l[1]};
                if (joined) {
#pragma unroll
                    for (int r = 0; r < 2; r++) {
#ifndef KF_SCORE_MAX
                        m[r] = -KF_INF;
#endif
                        l[r] = 0.0f;
                    }
                }
#endif
                if (lane == 0) {
                    kf_hp_arrive(ek0 + 8 * s);
                    if (jn >= t_hi)
                        kf_hp_arrive(qe); /* this warp is done with Q */
                }
#if KF_CLUSTER == 2
                else if (lane == 1)
                    kf_hp_arrive_cluster(pek0 + 8 * s);
#endif

                /* The score expression. The accumulator of wgmma m64nN: warp
                 * w holds rows 16w + lane/4 (+8), columns 8n + 2(lane%4)
                 * (+1) in sc[4n .. 4n + 3] (rows g4: e 0, 1; g4 + 8: e 2, 3). */
                /* step j's key tile: j, or with KF_DESC_WALK t_lo + t_hi - 1 - j
                 * (the steps' j0, jn and t_hi checks count steps) */
                const int jt = KF_TILE(j);
                const int kv0 = jt * KF_BC;
                bool bs_kept = true;
#if defined(KF_SCORE_PAIR) && defined(KF_SCORE_DIAG)
                /* kf_diag_tile's row terms (KF_TILE_AFFINE: the score is ts
                 * sc + tb[r]); a tile scored whole keeps 1 and 0 */
                float tb[2] = {0.0f, 0.0f};
#endif
#if KF_TILE_AFFINE
                float ts = 1.0f;
#endif
                /* the narrower last tile (W < KF_BC) is ragged: always an edge */
#if KF_DESC_INNER
                /* KF_DESC_INNER: only the first step's tile, the highest, can
                 * be an edge, so the later steps have no edge path at all */
                const bool edge =
                    FIRST && kf_attn_tile_edge(jt, qw, bh, q0, bs_dense, bs_kept, KF_ARGS);
#elif KF_EDGE_LAST
                /* KF_EDGE_LAST: only the last tile can be an edge -- the
                 * first step's where the item has one tile; the peeled
                 * step's takes the edge path whatever it is (the mask's
                 * values where none is cut: one copy of the score fewer) */
                const bool edge =
                    STEP == 2 || ((STEP == 1 || STEP == 3) &&
                                  kf_attn_tile_edge(jt, qw, bh, q0, bs_dense, bs_kept, KF_ARGS));
#else
                const bool edge =
                    kf_attn_tile_edge(jt, qw, bh, q0, bs_dense, bs_kept, KF_ARGS) || W != KF_BC;
#endif
                if (edge) {
#if KF_MASK_SKIP == 3 && KF_BS_WHOLE && !KF_BS_EDGE_MERGED
                    /* a whole-tile keep map's edge path (a ragged tile, or a
                     * dropped one of an all-masked row) stays a branch:
                     * its score is the inner one or the fill, so the
                     * compiler merged the two paths into a select of every
                     * score by bs_kept (64 FSEL a 128-key tile, on every
                     * kept tile; the SASS of the B4 H32 S4096 map, att16),
                     * which it may not across this statement */
                    asm volatile("");
#endif
#if defined(KF_SCORE_PAIR) && defined(KF_SCORE_DIAG) && defined(KF_SCORE_DIAG_EDGE)
                    /* a causal mask's full-width edge tile (KF_SCORE_DIAG_
                     * EDGE): the pair form with its diagonal on every
                     * element, then -inf where kv > q or kv >= KF_SKV -- the
                     * scalar score's values (the mask's where() is its last
                     * node, with an -inf fill), a third of its instructions */
                    if (W == KF_BC) {
                        kf_diag_tile(sc, tb, bh, qr, qa, qb, kv0, t4, KF_ARGS);
#if KF_TILE_AFFINE
                        ts = KF_DIAG_SCALE;
#endif
#pragma unroll
                        for (int nt = 0; nt < KF_BC / 8; nt++) {
#pragma unroll
                            for (int e = 0; e < 4; e++) {
                                const int kv = kv0 + nt * 8 + 2 * t4 + (e & 1);
                                if (kv > (e < 2 ? qa : qb) || kv >= KF_SKV)
                                    sc[4 * nt + e] = -KF_INF;
                            }
                        }
                    } else {
#endif
#pragma unroll
                    for (int nt = 0; nt < W / 8; nt++) {
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int kv = kv0 + nt * 8 + 2 * t4 + (e & 1);
                            sc[4 * nt + e] =
                                kv < KF_SKV ? KF_SCORE_EDGE(sc[4 * nt + e], e < 2 ? qa : qb, kv)
                                            : -KF_INF;
                        }
                    }
#if defined(KF_SCORE_PAIR) && defined(KF_SCORE_DIAG) && defined(KF_SCORE_DIAG_EDGE)
                    }
#endif
                } else {
#if defined(KF_SCORE_PAIR) && defined(KF_SCORE_SPLIT)
                    /* the pair form split at a tanh (KF_SCORE_SPLIT): its
                     * operand x for every pair first, the largest |x| in mx;
                     * where the warp's every |x| is at most KF_TANH_IDENT_MAX
                     * the tanh rounds to x itself (kf_score_post_ident), else
                     * the tanh (kf_score_post) -- every MUFU.TANH then after
                     * the whole tile's operands, not beside them as in the
                     * pair form, so the item's later tiles take the pair form
                     * whole (softcap on scores 8x the bench's, H100: 1.368
                     * ms split on every tile, 1.220 the pair form) */
                    if (split_try) {
                        unsigned mx = 0u;
                        KF_EACH_PAIR(kf_score_pre, mx, );
                        split_try =
                            __all_sync(0xffffffffu, (mx & 0x7fffu) <= KF_TANH_IDENT_MAX &&
                                                        (mx >> 16 & 0x7fffu) <= KF_TANH_IDENT_MAX);
                        if (split_try)
                            KF_EACH_PAIR(kf_score_post_ident, );
                        else
                            KF_EACH_PAIR(kf_score_post, );
                    } else {
                        KF_EACH_PAIR(kf_score_pair, );
                    }
#elif defined(KF_SCORE_PAIR) && defined(KF_SCORE_DIAG)
                    kf_diag_tile(sc, tb, bh, qr, qa, qb, kv0, t4, KF_ARGS);
#if KF_TILE_AFFINE
                    ts = KF_DIAG_SCALE;
#endif
#elif defined(KF_SCORE_PAIR)
                    /* the pair form: a row's two neighbouring keys at once */
                    KF_EACH_PAIR(kf_score_pair, );
#else
#pragma unroll
                    for (int nt = 0; nt < KF_BC / 8; nt++) {
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const int kv = kv0 + nt * 8 + 2 * t4 + (e & 1);
                            sc[4 * nt + e] =
                                kf_score_inner(sc[4 * nt + e], bh, e < 2 ? qa : qb, kv, KF_ARGS);
                        }
                    }
#endif
                }
                /* Online softmax: the 4 lanes of a quad share a row. The
                 * scores are the expression's divided by KF_SCORE_SCALE
                 * (its folded scale, 1 but where the generator folds one),
                 * and so are m and the row max; KF_SL2E puts it back with
                 * log2(e). */
#ifdef KF_SCORE_MAX
                /* KF_SCORE_MAX (cg_attention.c, score_bound): every score is
                 * -inf or within [-KF_SCORE_MAX, KF_SCORE_MAX], so exp(s - m)
                 * with m the bound itself neither overflows nor leaves f32's
                 * normal range: no row max, no shuffles, no rescale of O and
                 * l -- the same softmax (a common factor of numerator and
                 * denominator), P rounded to bf16 / f16 as relatively as ever */
                const bool rescale = false;
                float alpha[2] = {1.0f, 1.0f};
                const float ms[2] = {KF_SCORE_MAX * KF_SL2E, KF_SCORE_MAX * KF_SL2E};
                (void)alpha;
#else
                float mx[2] = {m[0], m[1]};
#if KF_TREE_SOFTMAX
                /* KF_TREE_SOFTMAX (the generator's default at head dim 128;
                 * KF_CUDA_RECIPE_ATTENTION_TREE_SOFTMAX / _CHAIN_SOFTMAX):
                 * each row's max over the tile in 4 interleaved partial
                 * maxima (8-column groups nt, nt + 4, ...: chains of 2 FMNMX
                 * a group, KF_BC / 32 groups), joined by a pairwise tree --
                 * 10 FMNMX deep at 128 keys where the running max below is a
                 * chain of 33, the same count, and 8 registers where a whole
                 * tree's first level held 32 (it spilled 80-1312 bytes at
                 * Skv 200-520 with 128- and 176-key tiles); the same value
                 * (max is exact in any order) */
                static_assert(W / 8 >= 4, "4 partial maxima a row");
                float t[2][4];
#pragma unroll
                for (int nt = 0; nt < W / 8; nt++) {
                    const float a = fmaxf(sc[4 * nt], sc[4 * nt + 1]);
                    const float b = fmaxf(sc[4 * nt + 2], sc[4 * nt + 3]);
                    t[0][nt & 3] = nt < 4 ? a : fmaxf(t[0][nt & 3], a);
                    t[1][nt & 3] = nt < 4 ? b : fmaxf(t[1][nt & 3], b);
                }
#pragma unroll
                for (int r = 0; r < 2; r++)
                    mx[r] = fmaxf(mx[r], KF_TILE_SCORE(fmaxf(fmaxf(t[r][0], t[r][1]),
                                                             fmaxf(t[r][2], t[r][3])),
                                                       r));
#elif KF_TILE_AFFINE
                /* the chain over the affine part, then its row terms */
                float cm[2] = {-KF_INF, -KF_INF};
#pragma unroll
                for (int nt = 0; nt < W / 8; nt++) {
                    cm[0] = fmaxf(cm[0], fmaxf(sc[4 * nt], sc[4 * nt + 1]));
                    cm[1] = fmaxf(cm[1], fmaxf(sc[4 * nt + 2], sc[4 * nt + 3]));
                }
#pragma unroll
                for (int r = 0; r < 2; r++)
                    mx[r] = fmaxf(mx[r], KF_TILE_SCORE(cm[r], r));
#else
#pragma unroll
                for (int nt = 0; nt < W / 8; nt++) {
                    mx[0] = fmaxf(mx[0], fmaxf(sc[4 * nt], sc[4 * nt + 1]));
                    mx[1] = fmaxf(mx[1], fmaxf(sc[4 * nt + 2], sc[4 * nt + 3]));
                }
#endif
                float ms[2], alpha[2] = {1.0f, 1.0f};
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                }
#if KF_LAZY_RESCALE
                /* Rescale (O, l and m to the new max) only where a row's max
                 * grew by more than 2^KF_RESCALE_LOG2 (in exp2's units) --
                 * decided for the whole warp, so the skip is a branch, not
                 * predicated multiplies; else every exponent stays measured
                 * from the row's older max, each p at most 2^8, which f32's
                 * l and O and bf16's P hold with their usual relative error
                 * (O / l and the log-sum-exp m + log l are the same either
                 * way). A row's first finite max always rescales (from -inf:
                 * the difference is +inf); -inf against -inf (NaN) does not
                 * need to. */
                const bool grow = (mx[0] - m[0]) * KF_SL2E > KF_RESCALE_LOG2 ||
                                  (mx[1] - m[1]) * KF_SL2E > KF_RESCALE_LOG2;
                const bool rescale = __any_sync(0xffffffffu, grow);
#else
                const bool rescale = true;
#endif
                if (rescale) {
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        /* m log2(e), 0 while the row has seen only -inf */
                        const float mn = mx[r] == -KF_INF ? 0.0f : mx[r] * KF_SL2E;
                        alpha[r] = kf_ex2(fmaf(m[r], KF_SL2E, -mn));
                        m[r] = mx[r];
                        l[r] *= alpha[r];
                    }
                }
#pragma unroll
                for (int r = 0; r < 2; r++)
                    ms[r] = m[r] == -KF_INF ? 0.0f : m[r] * KF_SL2E;
#endif /* KF_SCORE_MAX */
#if KF_TILE_AFFINE
                /* the exp2's argument of an affine part x: (ts x + tb[r]) KF_SL2E
                 * - ms[r], as one FFMA with the row's shift cb[r] */
                const float tsl = ts * KF_SL2E;
                float cb[2];
#pragma unroll
                for (int r = 0; r < 2; r++)
                    cb[r] = fmaf(tb[r], KF_SL2E, -ms[r]);
#define KF_EX2_ARG(x_, r_) fmaf(x_, tsl, cb[r_])
#else
#define KF_EX2_ARG(x_, r_) fmaf(x_, KF_SL2E, -ms[r_])
#endif
#if KF_TREE_SOFTMAX
                /* the tile's sum in 4 partial sums a row (chains of 8 FADDs,
                 * not 32), added to l last */
                float ls[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
                for (int nt = 0; nt < W / 8; nt++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        sc[4 * nt + e] = kf_ex2_mix(KF_EX2_ARG(sc[4 * nt + e], e >> 1), nt);
                        ls[e >> 1][(2 * nt + (e & 1)) & 3] += sc[4 * nt + e];
                    }
                }
#pragma unroll
                for (int r = 0; r < 2; r++)
                    l[r] += (ls[r][0] + ls[r][1]) + (ls[r][2] + ls[r][3]);
#else
#pragma unroll
                for (int nt = 0; nt < W / 8; nt++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        sc[4 * nt + e] = kf_ex2_mix(KF_EX2_ARG(sc[4 * nt + e], e >> 1), nt);
                        l[e >> 1] += sc[4 * nt + e];
                    }
                }
#endif
#undef KF_EX2_ARG
                /* P.V(j - 1) done: its V back, O rescaled, pa free for P(j).
                 * The empty asm statements keep the compiler from moving O's
                 * rescale above the wait (O is P.V's accumulator). ptxas
                 * still places the wait where it likes: in the SASS of
                 * a5b035c's successor it sits after the score expression and
                 * the row max's first half, so that much of the softmax runs
                 * under P.V, the rest after it (an FFMA tying alpha to l's
                 * sum, so to every exp2, did not move it).
                 * KF_PIN_SOFTMAX (a recipe flag, KF_CUDA_RECIPE_ATTENTION_
                 * PIN_SOFTMAX) moves it: ptxas's scheduler hoists the wait
                 * (it may always wait sooner: the instruction has no
                 * operands), but not above a shared-memory store, so l's
                 * sum -- which every exp2 feeds -- stored to this thread's
                 * sink word keeps the whole softmax, row max and exp2s
                 * included, in front of the wait, under P.V(j - 1), and
                 * leaves only O's rescale and P's packing after it (SASS of
                 * the B8 H32 S2048 D128 causal kernel: 66 of the 66 MUFU.EX2
                 * of a key tile between the two waits, against 0 without;
                 * test_attngen checks it). Measured slower (H200, 9f046fe:
                 * 11 of 12 pairs, 2-12%, and 4% more cycles under ncu at
                 * fixed clocks), so it is off. A guess at why: the store
                 * waits for l's serial sum of 64 FADDs, which then lies on
                 * the way to the wait. */
#if KF_PIN_SOFTMAX
                asm volatile("st.shared.f32 [%0], %1;" ::"r"(sink), "f"(l[0] + l[1]) : "memory");
#endif
                asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
                for (int i = 0; i < KF_D / 2; i++)
                    asm volatile("" : "+f"(o[i])::"memory");
                if ((j != j0 || joined) && lane == 0)
                    kf_hp_arrive(ev0 + 8 * sp);
#if KF_CLUSTER == 2
                else if (j != j0 && lane == 1)
                    kf_hp_arrive_cluster(pev0 + 8 * sp);
#endif
#if KF_ITEM_OVERLAP
                if (joined) {
                    store_o(bh_p, qr_p, l_o[0], l_o[1], m_o[0], m_o[1], false);
#pragma unroll
                    for (int i = 0; i < KF_D / 2; i++)
                        o[i] = 0.0f;
                    pend = false;
                } else
#endif
                if (rescale) {
#pragma unroll
                    for (int r = 0; r < 2; r++) {
#pragma unroll
                        for (int i = 0; i < KF_D / 8; i++) {
                            o[4 * i + 2 * r] *= alpha[r];
                            o[4 * i + 2 * r + 1] *= alpha[r];
                        }
                    }
                }
                /* P(j) as wgmma A fragments: 16 keys (two 8-column groups)
                 * per k step, rows g4 / g4 + 8 -- the m16n8k16 A layout. */
#pragma unroll
                for (int kk = 0; kk < W / 16; kk++) {
                    pa[kk][0] = kf_pack2(sc[8 * kk + 0], sc[8 * kk + 1]);
                    pa[kk][1] = kf_pack2(sc[8 * kk + 2], sc[8 * kk + 3]);
                    pa[kk][2] = kf_pack2(sc[8 * kk + 4], sc[8 * kk + 5]);
                    pa[kk][3] = kf_pack2(sc[8 * kk + 6], sc[8 * kk + 7]);
                }
                sp = s;
                php = ph;
                if (++s == KF_STAGES) {
                    s = 0;
                    ph ^= 1u;
                }
            };
/* One step after an item's first: wait for K(j) and V(j - 1), take the
 * warpgroup's turn, issue S = Q . K^T(j) (QK0, QK: the wgmmas of its first
 * k-step and of the rest) and O += P . V(j - 1) as a second group, hand the
 * turn on (but consumer 1's last: MORE, a later step of this item follows),
 * wait for S, and finish(j, jn) with the key tile's width W and the edge
 * path EDGE. SC_INIT starts S (KF_SC_INIT(), or nothing where the first
 * k-step's wgmma sets it). j, jn and the ring's state are the caller's. The
 * main loop, the window's far-edge loop and the peeled last steps
 * (KF_BC_LAST, KF_EDGE_LAST) take it. */
#define KF_STEP_QK_PV(QK0, QK, SC_INIT, MORE, W, EDGE)                                          \
    do {                                                                                          \
        const unsigned kb = ring + (unsigned)s * KF_STAGE_BYTES;                                  \
        const unsigned long long dk0 = kf_hp_desc(kb, 16u, 1024u);                                \
        const unsigned vbp = ring + (unsigned)sp * KF_STAGE_BYTES + KF_KV_BYTES;                  \
        const unsigned long long dv0 = kf_hp_desc(vbp, KF_BC * 128u, 1024u);                      \
        SC_INIT;                                                                                  \
        kf_hp_wait(fk0 + 8 * s, ph);                                                              \
        kf_hp_wait(fv0 + 8 * sp, php);                                                            \
        asm volatile("bar.sync %0, 256;" ::"r"(1 + cw) : "memory");                               \
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");                                   \
        kf_issue_qk<QK0, QK>(sc, dq0, qbase, dk0, kb);                                            \
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");                            \
        kf_issue_pv<KF_BC>(o, pa, dv0, vbp);                                                      \
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");                            \
        if (cw == 0 || (MORE) || !last_turn)                                                      \
            asm volatile("bar.arrive %0, 256;" ::"r"(2 - cw) : "memory");                         \
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");                            \
        finish(j, jn, false, kf_width<W>{}, kf_width<EDGE>{});                                    \
    } while (0)
            /* Step t_lo: S = Q . K^T(t_lo) alone. Steps after it issue Q.K^T(j)
             * and P.V(j - 1) as one group; two loops, so that no wgmma sits
             * under a branch (ptxas then fences around it: C7519). */
            if (j0 < t_hi) {
                const int j = j0, jn = j1;
                const unsigned kb = ring + (unsigned)s * KF_STAGE_BYTES;
                const unsigned long long dk0 = kf_hp_desc(kb, 16u, 1024u);
                KF_SC_INIT();
                kf_hp_wait(fk0 + 8 * s, ph);
#if KF_ITEM_OVERLAP
                if (pend) {
                    /* the item before's P.V(last) in the same turn, a second
                     * group, as inside an item */
                    const unsigned vbp = ring + (unsigned)sp * KF_STAGE_BYTES + KF_KV_BYTES;
                    const unsigned long long dv0 = kf_hp_desc(vbp, KF_BC * 128u, 1024u);
                    kf_hp_wait(fv0 + 8 * sp, php);
                    asm volatile("bar.sync %0, 256;" ::"r"(1 + cw) : "memory");
                    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
                    kf_issue_qk<kf_wgmma_qk0, kf_wgmma_qk>(sc, dq0, qbase, dk0, kb);
                    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                    kf_issue_pv<KF_BC>(o, pa, dv0, vbp);
                    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                    if (cw == 0 || jn < t_hi || !last_turn)
                        asm volatile("bar.arrive %0, 256;" ::"r"(2 - cw) : "memory");
                    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
                    finish(j, jn, true, kf_width<KF_BC>{}, kf_width<1>{});
                } else
#endif
                {
                    asm volatile("bar.sync %0, 256;" ::"r"(1 + cw) : "memory");
                    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
                    kf_issue_qk<KF_QK0, kf_wgmma_qk>(sc, dq0, qbase, dk0, kb);
                    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                    /* the other consumer's turn (consumer 1 leaves out its last) */
                    if (cw == 0 || jn < t_hi || !last_turn)
                        asm volatile("bar.arrive %0, 256;" ::"r"(2 - cw) : "memory");
                    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
                    finish(j, jn, false, kf_width<KF_BC>{}, kf_width<1>{});
                }
#if !KF_ITEM_OVERLAP
            }
#endif
            /* (with the overlap the steps after the first run inside the
             * block above, which then sets the pending item's batch-head and
             * rows: so those are dead in the loop) */
#if KF_EDGE_LAST && KF_MASK_SKIP == 2
            /* A window's far-edge steps after the first (KF_EDGE_LAST above),
             * at most one with KF_BC == KF_BR, with the edge check; the loop
             * below starts after them. Both bounds depend on q0 alone: the
             * warpgroup's warps take the same wgmmas. */
            const int kv_far = q0 + KF_BR - 1 - KF_WINDOW;
            const int j_in = min(t_hi - 1, kv_far < 0 ? j1 : max(j1, kv_far / KF_BC + 1));
            for (int j = j1, jn; j < j_in; j = jn) {
                jn = j + 1;
                KF_STEP_QK_PV(KF_QK0, kf_wgmma_qk, KF_SC_INIT(), jn < t_hi, KF_BC, 3);
            }
#define KF_J_MAIN max(j1, j_in)
#else
#define KF_J_MAIN j1
#endif
            /* (with KF_BC_LAST or KF_EDGE_LAST, the last tile is the step
             * after the loop) */
            for (int j = KF_J_MAIN, jn; j < t_hi - (KF_BC_LAST > 0 || KF_EDGE_LAST); j = jn) {
                jn = kf_bs_next(bh, q0, bs_dense, j + 1, t_hi, KF_ARGS);
                KF_STEP_QK_PV(KF_QK0, kf_wgmma_qk, KF_SC_INIT(), jn < t_hi, KF_BC, 0);
            }
#if KF_BC_LAST
            /* The last tile, t_hi - 1 (the fourth or later: every item walks
             * every tile), narrower: S = Q . K^T(last) as m64n{KF_BC_LAST},
             * and O += P . V(last - 1) at full width, as in the loop */
            {
                const int j = t_hi - 1, jn = t_hi;
                KF_STEP_QK_PV(kf_wgmma_qkl0, kf_wgmma_qkl, (void)0, false, KF_BC_LAST, 0);
            }
#endif
#if KF_EDGE_LAST
            /* The last tile, t_hi - 1, where the item has more than one: the
             * loop's step with the edge path (the loop's have none) */
            if (j1 < t_hi) {
                const int j = t_hi - 1, jn = t_hi;
                KF_STEP_QK_PV(KF_QK0, kf_wgmma_qk, KF_SC_INIT(), false, KF_BC, 2);
            }
#endif
#if KF_ITEM_OVERLAP
                /* P.V(last) waits for the next item's first turn (or the
                 * end); m and l keep this item's */
                pend = true;
                bh_p = bh;
                qr_p = qr;
            } else {
                /* an empty item's rows -- 0 / 0 -- leave at once, a pending
                 * item staying pending */
#ifdef KF_SCORE_MAX
                store_o(bh, qr, 0.0f, 0.0f, KF_SCORE_MAX, KF_SCORE_MAX, true);
#else
                store_o(bh, qr, 0.0f, 0.0f, -KF_INF, -KF_INF, true);
#endif
            }
#else
            /* O += P . V(last), outside the turns */
            if (j0 < t_hi)
                pv_last();
            store_o(bh, qr, l[0], l[1], m[0], m[1], false);
#endif
        }
#if KF_ITEM_OVERLAP
        /* the block's last item: its P.V(last) alone, outside the turns */
        if (pend) {
            pv_last();
            store_o(bh_p, qr_p, l[0], l[1], m[0], m[1], false);
        }
#endif
    }
#if KF_CLUSTER == 2
    /* No CTA exits while its peer may still multicast into its ring or
     * arrive on its barriers. */
    kf_hp_cluster_sync();
#endif
}
