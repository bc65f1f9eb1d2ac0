/*
 * attention_common.cuh -- what both fused attention kernels (attention.cuh,
 * FA2 class; attention_sm90.cuh, wgmma) share, put by the generator after
 * its definitions (KF_BC, KF_SKV, KF_MASK_SKIP, KF_WINDOW, KF_BS_WHOLE, the
 * score and block-sparse functions) and before the kernel's template. Both
 * kernels give a warp 16 query rows and hold the scores in the mma
 * accumulator layout: a quad of lanes shares rows qr and qr + 8.
 */

/* Whether key tile j, for the warp's 16 query rows from qw, needs the
 * element-wise score path (KF_SCORE_EDGE): the keys' ragged end, the causal
 * diagonal (KF_MASK_SKIP 1, 2), the window's far edge (2), or a block-sparse
 * tile (3) that is not kept whole. bs_kept: whether a tile of a whole-tile
 * keep map (KF_BS_WHOLE) is kept (true otherwise). */
__device__ __forceinline__ bool kf_attn_tile_edge(int j, int qw, long long bh, int q0,
                                                  bool bs_dense, bool &bs_kept, KF_PARAMS) {
    const int kv0 = j * KF_BC;
    bool edge = kv0 + KF_BC > KF_SKV;
#if KF_MASK_SKIP == 1 || KF_MASK_SKIP == 2
    edge = edge || kv0 + KF_BC - 1 > qw;
#endif
#if KF_MASK_SKIP == 2
    edge = edge || kv0 <= qw + 15 - KF_WINDOW;
#endif
    bs_kept = true;
#if KF_MASK_SKIP == 3 && KF_BS_WHOLE
    /* whole map tiles: a visited tile is kept, or (a query tile of an
     * all-masked row) dropped whole: its scores the fill */
    bs_kept = !bs_dense || kf_bs_kept(bh, q0, j, KF_ARGS);
    edge = edge || !bs_kept;
#elif KF_MASK_SKIP == 3
    edge = edge || kf_bs_mixed(bh, q0, bs_dense, j, KF_ARGS);
#endif
    (void)bh;
    (void)q0;
    (void)bs_dense;
    return edge;
}

/* The score of an edge tile's element (the kernels' `bh` and `bs_kept` in
 * scope): the fill for a dropped whole-map tile, the unmasked expression for
 * a kept one, else the whole expression with its mask. */
#if KF_MASK_SKIP == 3 && KF_BS_WHOLE
#define KF_SCORE_EDGE(s_, q_, kv_)                                                                 \
    (bs_kept ? kf_score_inner(s_, bh, q_, kv_, KF_ARGS) : kf_score_fill(s_, bh, q_, kv_, KF_ARGS))
#else
#define KF_SCORE_EDGE(s_, q_, kv_) kf_score_full(s_, bh, q_, kv_, KF_ARGS)
#endif

/* The log-sum-exp of a quad's two rows, qr and qr + 8: m + log l, or m
 * itself where m is +-inf (the logsumexp op's definition), into
 * lse[row0 + q] for the rows q < sq, in lse's dtype. One lane of the quad
 * calls it. */
template <typename T>
__device__ __forceinline__ void kf_attn_lse2(T *lse, long long row0, int qr, long long sq,
                                             const float m[2], const float l[2]) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int q = qr + 8 * r;
        if (q < sq)
            kf_pack(lse + (row0 + q), fabsf(m[r]) == KF_INF ? m[r] : m[r] + logf(l[r]));
    }
}
