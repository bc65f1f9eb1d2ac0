/* ---- gemm_common.cuh: what the generated GEMM templates share ---------------
 *
 * Emitted after the group's kf_epi (cg_gemm_epi.c) in the sources of both
 * GEMM templates (gemm_sm90.cuh: wgmma; gemm_sm80.cuh: mma.sync): their
 * accumulator fragments place columns alike (per 8 columns, 2 adjacent ones
 * of rows lane / 4 and lane / 4 + 8 in each lane of a quad), so one quad
 * transpose gives every lane 8 adjacent columns of a row for kf_epi<8>.
 */

/* Column groups j0 .. j0 + 3 of one accumulator row (x[2i + e]: group
 * j0 + i, columns 2 (lane % 4) + e) become, in lane t of the quad, the 8
 * columns of group j0 + t: a 4 x 4 transpose of pairs across the quad's
 * lanes in two exchanges (lane ^ 2 swaps the off-diagonal 2 x 2 blocks,
 * lane ^ 1 the off-diagonal pairs within them). Every index is a constant:
 * the choices are selects, the array stays in registers. */
__device__ __forceinline__ void kf_gm_quad_t(float (&x)[8], int t) {
    const bool hi = (t & 2) != 0, odd = (t & 1) != 0;
#pragma unroll
    for (int k = 0; k < 2; k++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const float snd = hi ? x[2 * k + e] : x[2 * (k + 2) + e];
            const float rcv = __shfl_xor_sync(0xffffffffu, snd, 2);
            if (hi)
                x[2 * k + e] = rcv;
            else
                x[2 * (k + 2) + e] = rcv;
        }
    }
#pragma unroll
    for (int m = 0; m < 2; m++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const float snd = odd ? x[4 * m + e] : x[4 * m + 2 + e];
            const float rcv = __shfl_xor_sync(0xffffffffu, snd, 1);
            if (odd)
                x[4 * m + e] = rcv;
            else
                x[4 * m + 2 + e] = rcv;
        }
    }
}

/* kf_gm_quad_t on packed pairs: lane t holds in w[i] columns 2t, 2t + 1 of
 * column group j0 + i; after it, the 4 pairs of group j0 + t in column
 * order. Half the shuffles of the float form. */
__device__ __forceinline__ void kf_gm_quad_t4(unsigned (&w)[4], int t) {
    const bool hi = (t & 2) != 0, odd = (t & 1) != 0;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const unsigned snd = hi ? w[k] : w[k + 2];
        const unsigned rcv = __shfl_xor_sync(0xffffffffu, snd, 2);
        if (hi)
            w[k] = rcv;
        else
            w[k + 2] = rcv;
    }
#pragma unroll
    for (int m = 0; m < 2; m++) {
        const unsigned snd = odd ? w[2 * m] : w[2 * m + 1];
        const unsigned rcv = __shfl_xor_sync(0xffffffffu, snd, 1);
        if (odd)
            w[2 * m] = rcv;
        else
            w[2 * m + 1] = rcv;
    }
}

#ifndef KF_ROW_EPI
#define KF_ROW_EPI 0 /* cg_gemm_epi.c's row epilogue in the tile (kf_pre, kf_gm_rst) */
#endif
#if KF_ROW_EPI
/* A row's statistics as the row kernels take them (rowwise.cuh), in two
 * steps over the norm's input x, which the templates keep in registers in
 * place of the accumulators: step A the sum (KF_RS_SUM: a mean), the sum of
 * squares (KF_RS_SQ: an RMSNorm) and the max (KF_RS_MAX: softmax); step B,
 * once A is reduced over the row, the sum of squared deviations from the
 * mean (KF_RS_M2: a LayerNorm's rstd) and of exp(x - max) (KF_RS_EXP).
 * f32. Partials are merged by sums and a NaN-keeping max, which commute, so
 * every lane of a row ends with the same bits. */
#define KF_RS_B (KF_RS_M2 || KF_RS_EXP)
struct kf_gm_rs {
    float sum, sq, mx, m2, se;
};

__device__ __forceinline__ void kf_gm_rs_init(kf_gm_rs &s) {
    s.sum = s.sq = s.m2 = s.se = 0.0f;
    s.mx = -__int_as_float(0x7f800000);
}

/* max that keeps a NaN of either side (the reference's max propagates it) */
__device__ __forceinline__ float kf_gm_maxnan(float a, float b) {
    return (a > b || a != a) ? a : b;
}

/* Step A over the first nv of x[0, VV) (the rest lie past N). */
template <int VV>
__device__ __forceinline__ void kf_gm_rs_add_a(kf_gm_rs &s, const float *x, int nv) {
#pragma unroll
    for (int k = 0; k < VV; k++) {
        const bool in = k < nv;
        const float v = in ? x[k] : 0.0f;
        if (KF_RS_SUM)
            s.sum += v;
        if (KF_RS_SQ)
            s.sq = fmaf(v, v, s.sq);
        if (KF_RS_MAX)
            s.mx = in ? kf_gm_maxnan(s.mx, v) : s.mx;
    }
}

__device__ __forceinline__ float kf_gm_rs_mean(const kf_gm_rs &s) {
    return __fdividef(s.sum, (float)KF_N);
}

/* Step B, with s's step A reduced over the whole row. */
template <int VV>
__device__ __forceinline__ void kf_gm_rs_add_b(kf_gm_rs &s, const float *x, int nv) {
    float mean = kf_gm_rs_mean(s);
    /* opaque: else the compiler shares x - mean with the epilogue's own
     * (the same value), holding a second tile of them live until it runs */
    asm volatile("" : "+f"(mean));
#pragma unroll
    for (int k = 0; k < VV; k++) {
        const bool in = k < nv;
        if (KF_RS_M2) {
            const float d = in ? x[k] - mean : 0.0f;
            s.m2 = fmaf(d, d, s.m2);
        }
        if (KF_RS_EXP)
            s.se += in ? expf(x[k] - s.mx) : 0.0f;
    }
}

__device__ __forceinline__ void kf_gm_rs_merge_a(kf_gm_rs &a, const kf_gm_rs &b) {
    a.sum += b.sum;
    a.sq += b.sq;
    a.mx = kf_gm_maxnan(a.mx, b.mx);
}

__device__ __forceinline__ void kf_gm_rs_merge_b(kf_gm_rs &a, const kf_gm_rs &b) {
    a.m2 += b.m2;
    a.se += b.se;
}

/* KF_RS_P partials of one row (P a power of two) merged into p[0] as a
 * tree, ((0 + 1) + (2 + 3)), the same order in every lane: step A's, or
 * step B's (STEP_B; its partials started from the row's step A, zero in
 * m2 and se). */
#ifndef KF_RS_P
#define KF_RS_P 4
#endif
template <bool STEP_B> __device__ __forceinline__ void kf_gm_rs_merge_p(kf_gm_rs (&p)[KF_RS_P]) {
#pragma unroll
    for (int w = 1; w < KF_RS_P; w <<= 1)
#pragma unroll
        for (int i = 0; i < KF_RS_P; i += 2 * w) {
            if (STEP_B)
                kf_gm_rs_merge_b(p[i], p[i + w]);
            else
                kf_gm_rs_merge_a(p[i], p[i + w]);
        }
}

/* The W consecutive lanes that hold a row (a quad in the mma fragments, W 4)
 * merge their partials: xor butterflies, so every one of them ends with the
 * same bits (step A, then step B). */
template <int W> __device__ __forceinline__ void kf_gm_rs_lanes_a(kf_gm_rs &s) {
#pragma unroll
    for (int m = 1; m < W; m <<= 1) {
        if (KF_RS_SUM)
            s.sum += __shfl_xor_sync(0xffffffffu, s.sum, m);
        if (KF_RS_SQ)
            s.sq += __shfl_xor_sync(0xffffffffu, s.sq, m);
        if (KF_RS_MAX)
            s.mx = kf_gm_maxnan(s.mx, __shfl_xor_sync(0xffffffffu, s.mx, m));
    }
}

template <int W> __device__ __forceinline__ void kf_gm_rs_lanes_b(kf_gm_rs &s) {
#pragma unroll
    for (int m = 1; m < W; m <<= 1) {
        if (KF_RS_M2)
            s.m2 += __shfl_xor_sync(0xffffffffu, s.m2, m);
        if (KF_RS_EXP)
            s.se += __shfl_xor_sync(0xffffffffu, s.se, m);
    }
}

/* KF_ROW_PACK (1: bf16, 2: f16): x is a value of that dtype (the reference
 * rounds it there), so the templates keep it two to a register, exactly,
 * and the accumulators' registers die as x is computed; 0: x stays in the
 * accumulators' own registers, f32. */
#ifndef KF_ROW_PACK
#define KF_ROW_PACK 0
#endif
__device__ __forceinline__ unsigned kf_gm_xpack(float lo, float hi) {
    unsigned v;
#if KF_ROW_PACK == 2
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(v) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(v) : "f"(hi), "f"(lo));
#endif
    return v;
}
__device__ __forceinline__ float kf_gm_xlo(unsigned v) {
    return KF_ROW_PACK == 2 ? kf_f16_to_f32((unsigned short)(v & 0xffffu))
                            : __uint_as_float(v << 16);
}
__device__ __forceinline__ float kf_gm_xhi(unsigned v) {
    return KF_ROW_PACK == 2 ? kf_f16_to_f32((unsigned short)(v >> 16))
                            : __uint_as_float(v & 0xffff0000u);
}

/* The row's statistics from its whole-row sums (KF_N columns). */
__device__ __forceinline__ kf_gm_rst kf_gm_rs_final(const kf_gm_rs &s) {
    kf_gm_rst r;
    r.sum = s.sum;
    r.mean = kf_gm_rs_mean(s);
    r.rstd = rsqrtf(__fdividef(s.m2, (float)KF_N) + KF_RS_EPS);
    r.rms_rstd = rsqrtf(__fdividef(s.sq, (float)KF_N) + KF_RS_EPS);
    r.max = s.mx;
    r.sumexp = s.se;
    return r;
}
#endif
