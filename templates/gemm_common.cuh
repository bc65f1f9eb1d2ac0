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

#ifndef KF_ROW_EPI
#define KF_ROW_EPI 0 /* cg_gemm_epi.c's row epilogue in the tile (kf_pre, kf_gm_rst) */
#endif
#if KF_ROW_EPI
/* A row's partial statistics over the columns a lane (then a quad, then a
 * tile row) has seen, f32: the count n; Chan's mean and M2 (KF_RS_M2: a
 * LayerNorm's rstd, its mean too), else the plain sum (KF_RS_SUM); the sum
 * of squares (KF_RS_SQ: an RMSNorm); the running max and the sum of
 * exponentials relative to it (KF_RS_MAX, KF_RS_EXP: softmax). Both
 * templates fold 8 columns at a time (kf_gm_rs_add) and merge partials with
 * kf_gm_rs_merge, lower columns first, so every lane of a row ends with the
 * same bits. */
struct kf_gm_rs {
    float n, mean, m2, sum, sq, mx, se;
};

__device__ __forceinline__ void kf_gm_rs_init(kf_gm_rs &s) {
    s.n = s.mean = s.m2 = s.sum = s.sq = s.se = 0.0f;
    s.mx = -__int_as_float(0x7f800000);
}

/* max that keeps a NaN of either side (the reference's max propagates it) */
__device__ __forceinline__ float kf_gm_maxnan(float a, float b) {
    return (a > b || a != a) ? a : b;
}

/* exp(a - m) for a <= m, 1 where a == m (both -inf included: an empty side) */
__device__ __forceinline__ float kf_gm_rel_exp(float a, float m) {
    return a == m ? 1.0f : expf(a - m);
}

/* s += the first nv of x[0, VV) (the rest lie past N). */
template <int VV>
__device__ __forceinline__ void kf_gm_rs_add(kf_gm_rs &s, const float *x, int nv) {
    float cn = 0.0f, sum = 0.0f, sq = 0.0f, cm = -__int_as_float(0x7f800000);
#pragma unroll
    for (int k = 0; k < VV; k++) {
        const bool in = k < nv;
        const float v = in ? x[k] : 0.0f;
        cn += in ? 1.0f : 0.0f;
        sum += v;
        sq = fmaf(v, v, sq);
        cm = in ? kf_gm_maxnan(cm, x[k]) : cm;
    }
    if (KF_RS_M2) { /* the chunk's mean and M2, merged by Chan's formula */
        const float mc = cn > 0.0f ? sum / cn : 0.0f;
        float m2 = 0.0f;
#pragma unroll
        for (int k = 0; k < VV; k++) {
            const float d = k < nv ? x[k] - mc : 0.0f;
            m2 = fmaf(d, d, m2);
        }
        const float n = s.n + cn, d = mc - s.mean, f = n > 0.0f ? cn / n : 0.0f;
        s.mean = fmaf(d, f, s.mean);
        s.m2 += m2 + d * d * s.n * f;
    }
    if (KF_RS_SUM)
        s.sum += sum;
    if (KF_RS_SQ)
        s.sq += sq;
    if (KF_RS_MAX) {
        const float m = kf_gm_maxnan(s.mx, cm);
        if (KF_RS_EXP) {
            float se = s.se * kf_gm_rel_exp(s.mx, m);
#pragma unroll
            for (int k = 0; k < VV; k++)
                se += k < nv ? kf_gm_rel_exp(x[k], m) : 0.0f;
            s.se = se;
        }
        s.mx = m;
    }
    s.n += cn;
}

/* a = a then b (b's columns after a's). */
__device__ __forceinline__ void kf_gm_rs_merge(kf_gm_rs &a, const kf_gm_rs &b) {
    const float n = a.n + b.n;
    if (KF_RS_M2) {
        const float d = b.mean - a.mean, f = n > 0.0f ? b.n / n : 0.0f;
        a.mean = fmaf(d, f, a.mean);
        a.m2 += b.m2 + d * d * a.n * f;
    }
    if (KF_RS_SUM)
        a.sum += b.sum;
    if (KF_RS_SQ)
        a.sq += b.sq;
    if (KF_RS_MAX) {
        const float m = kf_gm_maxnan(a.mx, b.mx);
        if (KF_RS_EXP)
            a.se = a.se * kf_gm_rel_exp(a.mx, m) + b.se * kf_gm_rel_exp(b.mx, m);
        a.mx = m;
    }
    a.n = n;
}

__device__ __forceinline__ kf_gm_rs kf_gm_rs_shfl(const kf_gm_rs &s, int m) {
    kf_gm_rs o;
    o.n = __shfl_xor_sync(0xffffffffu, s.n, m);
    o.mean = KF_RS_M2 ? __shfl_xor_sync(0xffffffffu, s.mean, m) : 0.0f;
    o.m2 = KF_RS_M2 ? __shfl_xor_sync(0xffffffffu, s.m2, m) : 0.0f;
    o.sum = KF_RS_SUM ? __shfl_xor_sync(0xffffffffu, s.sum, m) : 0.0f;
    o.sq = KF_RS_SQ ? __shfl_xor_sync(0xffffffffu, s.sq, m) : 0.0f;
    o.mx = KF_RS_MAX ? __shfl_xor_sync(0xffffffffu, s.mx, m) : -__int_as_float(0x7f800000);
    o.se = KF_RS_EXP ? __shfl_xor_sync(0xffffffffu, s.se, m) : 0.0f;
    return o;
}

/* The quad of lanes that holds a row (lane % 4 = 0..3: its column groups in
 * order after kf_gm_quad_t) merges its partials; each pair is merged lower
 * lane first, so the four lanes compute the same values. */
__device__ __forceinline__ void kf_gm_rs_quad(kf_gm_rs &s, int lane) {
#pragma unroll
    for (int m = 1; m <= 2; m <<= 1) {
        const kf_gm_rs o = kf_gm_rs_shfl(s, m);
        const bool hi = (lane & m) != 0;
        kf_gm_rs lo = hi ? o : s;
        kf_gm_rs_merge(lo, hi ? s : o);
        s = lo;
    }
}

/* The row's statistics from its whole-row partial (KF_N columns). */
__device__ __forceinline__ kf_gm_rst kf_gm_rs_final(const kf_gm_rs &s) {
    kf_gm_rst r;
    const float L = (float)KF_N;
    r.sum = KF_RS_M2 ? s.mean * s.n : s.sum;
    r.mean = KF_RS_M2 ? s.mean : s.sum / L;
    r.rstd = 1.0f / sqrtf(s.m2 / L + KF_RS_EPS);
    r.rms_rstd = 1.0f / sqrtf(s.sq / L + KF_RS_EPS);
    r.max = s.mx;
    r.sumexp = s.se;
    return r;
}
#endif
