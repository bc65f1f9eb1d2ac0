/*
 * rowwise.cuh -- softmax, layer_norm, rms_norm and reductions over the last
 * axis, with an elementwise prologue (the row's input x, computed from loads)
 * and an epilogue (every output, computed from x and the row statistics).
 * Also the norm prologue of a GEMM's operand A, a GEMM's row epilogue and the
 * attention fallback's softmax over the score expression.
 *
 * Shape, by row length L (chosen on the host, see gen_rowwise in
 * codegen/cuda/cuda_codegen.c):
 *   KF_ROW_WARP 1   one warp per row (L <= 4096; 1024 for f64), KF_BLOCK/32
 *                   rows per block, warp shuffles only;
 *   KF_ROW_WARP 0   one block per row, warp shuffles then shared memory.
 * Each lane handles KF_PER_THREAD chunks of KF_VEC contiguous elements
 * (16-byte accesses). With KF_MULTIPASS 0 the row is read from memory once and
 * kept in registers (x[KF_PER_THREAD][KF_VEC]) through the statistics and the
 * epilogue; with KF_MULTIPASS 1 (rows longer than 32 values per thread) the
 * prologue is re-evaluated from memory for each pass (statistics pass 1, pass 2
 * when needed, epilogue), and only the first pass stores prologue outputs.
 *
 * KF_STAGED 1 (template row_warp_staged; warp per row, sm_80+): the row-shaped
 * loads of the prologue go through a ring of KF_STAGES row buffers per warp in
 * dynamic shared memory. The warp issues cp.async for row i + KF_STAGES - 1,
 * waits for row i, and evaluates the prologue once per pass reading row i
 * from shared memory (the multipass structure over shared memory; the
 * compiler may keep what it read in registers between passes, which the
 * ring's shared memory, not registers, limits to 12 warps per SM). The register
 * path is limited by its registers (211-254, 8 warps per SM) with nothing in
 * flight while a row is reduced; staged, the next row's loads are. On an
 * H200, 65536 x 4096 bf16, % of copy bandwidth: rms_norm 84 -> 88, layer_norm
 * 69 -> 85 (4 warps, 2 stages, 3 blocks per SM). The statistics are computed as the register path
 * computes them (per-lane sums over chunks q then elements k, the Chan merge
 * with the lane's own mean), so the results are bit-identical to it.
 *
 * Statistics are kept in kf_acc_t (float, or double for f64 rows); the
 * variance is never E[x^2] - E[x]^2: with the row in registers each thread
 * takes a two-pass M2 about its own mean, and the partials (count, sum, M2)
 * are merged in one reduction with Chan's formula (the merge is symmetric, so
 * every lane gets bit-identical results); the multipass path keeps the
 * two-pass over the row. Block reductions alternate between two shared
 * buffers, so each costs one __syncthreads.
 *
 * Hooks (defined by codegen/cuda before this file):
 *   KF_KERNEL, KF_PARAMS, KF_ARGS, KF_BLOCK   as in elementwise.cuh
 *   KF_ROWS, KF_L      rows, row length; KF_CHUNKS = KF_L / KF_VEC
 *   KF_VEC, KF_PER_THREAD, KF_ROW_WARP, KF_MULTIPASS
 *   KF_STAGED          0/1; when 1 also KF_STAGES (ring depth) and
 *                      KF_STAGE_BYTES (one row of every staged load, a
 *                      multiple of 16); the dynamic shared memory is
 *                      KF_BLOCK / 32 * KF_STAGES * KF_STAGE_BYTES
 *   kf_acc_t           the statistics' type
 *   KF_NEED_MAX, KF_NEED_SUM, KF_NEED_SUMSQ, KF_NEED_M2, KF_NEED_SUMEXP
 *                      which statistics the expressions use (0/1)
 *   KF_EPS             the norm's epsilon (as kf_acc_t)
 *   KF_ROW_RESCUE      1: f32 or bf16 rows (float statistics), whose values
 *                      reach 2^128: a square above 2^64 (or a sum of values
 *                      near 2^128) overflows the f32 statistics. The fast
 *                      path is unchanged; when a statistic it needed came out
 *                      infinite or NaN, the row's are taken again on the row
 *                      scaled by 2^-e (e the exponent of its largest finite
 *                      magnitude, so every scaled square is at most 1: exact
 *                      scaling, no overflow for rows under 2^100 elements)
 *                      and returned in the row's units, as the reference
 *                      (statistics in double) has them. 0 for f16 rows
 *                      (65504^2 x 2^63 elements < 2^128) and f64 ones
 *                      (KF_ROW_SCALE)
 *   KF_ROW_SCALE       1: f64 rows whose norms are computed on the row scaled
 *                      by 2^-e when its largest magnitude exceeds 2^500, as the
 *                      reference defines them (kf_ir_row_scale_exp): the
 *                      squares cannot overflow. 0 for every other row (an f32,
 *                      f16 or bf16 value never exceeds 2^128)
 *   kf_vec_ok(KF_ARGS) the vector operands are aligned (staged: the staged
 *                      operands to 16 bytes)
 *   KF_SETUP()         block-wide setup at kernel entry (as in elementwise.cuh)
 *   kf_prologue<VV>(row, c, x[VV], store, KF_ARGS)   KF_PROLOGUE: x for
 *                      elements c*VV .. c*VV+VV-1 of the row; stores the
 *                      group's outputs that need no statistic when `store`
 *                      (KF_STAGED: kf_prologue<VV, STG>(row, c, x, store, sb,
 *                      KF_ARGS), the staged loads read shared address sb when
 *                      STG, global memory otherwise)
 *   kf_stage_row(row, lane, sb, KF_ARGS)             KF_STAGED only: the
 *                      lane's cp.async pieces of row `row` of every staged
 *                      load into the stage at shared address sb
 *   kf_epilogue<VV>(row, c, x[VV], st, KF_ARGS)      KF_EPILOGUE: per element
 *                      (KF_HAS_EPILOGUE 0: none, the multipass skips its pass)
 *   kf_row_out(row, st, KF_ARGS)                     once per row (lane 0):
 *                      outputs in the reduced space (reductions)
 */
struct kf_stats {
    kf_acc_t max, sum, mean, rstd, rms_rstd, sumexp;
};

#define KF_LANES (KF_ROW_WARP ? 32 : KF_BLOCK)
#define KF_ROWS_PER_BLOCK (KF_ROW_WARP ? KF_BLOCK / 32 : 1)

/* KF_ROW_SCALE: the exponent e of kf_ir_row_scale_exp from the row's largest
 * magnitude (NaN ignored, as the reference's comparisons ignore it): 0 unless
 * it is finite and above 2^500. Scaling by 2^-e is exact; the statistics are
 * taken on the scaled row and returned in the row's units (mean * 2^e, rstd *
 * 2^-e), and a scaled row whose denominator is 0 (constant, eps underflowed)
 * normalizes to 0 as in the reference. */
#if KF_ROW_SCALE
__device__ __forceinline__ int kf_scale_exp(kf_acc_t amax) {
    int e = 0;
    if (amax > (kf_acc_t)0x1p500 && amax <= (kf_acc_t)1.7976931348623157e308)
        (void)frexp((double)amax, &e);
    return e;
}
__device__ __forceinline__ kf_acc_t kf_scaled_rstd(kf_acc_t ss, int e) {
    const kf_acc_t d = kf_sqrt(ss / (kf_acc_t)KF_L + (kf_acc_t)ldexp((double)KF_EPS, -2 * e));
    return e != 0 && d == (kf_acc_t)0 ? (kf_acc_t)0 : (kf_acc_t)ldexp((double)((kf_acc_t)1 / d), -e);
}
/* x on the scaled row; the statistic 1 / sqrt(ss / L + eps) back in its units */
#define KF_XS(v) ((v) * sc)
#define KF_RSTD_OF(ss) kf_scaled_rstd(ss, sx)
#else
#define KF_XS(v) (v)
#define KF_RSTD_OF(ss) ((kf_acc_t)1 / kf_sqrt((ss) / (kf_acc_t)KF_L + (kf_acc_t)KF_EPS))
#endif

/* Block reductions: warp shuffles, then lane 0 of each warp writes to one of
 * two shared buffers (alternating per call), one __syncthreads, every warp
 * reads all partials. A buffer is rewritten two calls later, after the next
 * call's barrier, which every thread reaches only after reading it. */
struct kf_red {
    kf_acc_t *sh; /* 2 x 3 x 32 values */
    int ph;
};
__device__ __forceinline__ kf_acc_t *kf_red_buf(kf_red &r) {
    kf_acc_t *b = r.sh + r.ph * 96;
    r.ph ^= 1;
    return b;
}
template <typename T> __device__ __forceinline__ T kf_row_sum(T v, kf_red &r) {
    v = kf_warp_sum(v);
    if (KF_ROW_WARP || KF_BLOCK <= 32)
        return v;
    kf_acc_t *b = kf_red_buf(r);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0)
        b[w] = v;
    __syncthreads();
    v = l < KF_BLOCK / 32 ? b[l] : (T)0;
    return kf_warp_sum(v);
}
template <typename T> __device__ __forceinline__ T kf_row_max(T v, kf_red &r) {
    v = kf_warp_max(v);
    if (KF_ROW_WARP || KF_BLOCK <= 32)
        return v;
    kf_acc_t *b = kf_red_buf(r);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0)
        b[w] = v;
    __syncthreads();
    v = l < KF_BLOCK / 32 ? b[l] : (T)-KF_INF;
    return kf_warp_max(v);
}
/* Chan's merge of (count, sum, M2) partials; symmetric in a and b. When both
 * counts are the same power of two (every lane of a warp per row holds as
 * many values, and each merge doubles them), x / n is x times the exact
 * reciprocal (its bits: an exponent subtraction) and na * nb / nn is na / 2:
 * the same bits without two IEEE divisions per step on the row's critical
 * path (a layer_norm row takes five steps). kf_pow2_rcp: 1 / v when v is a
 * power of two in [1, 2^100], else 0. */
__device__ __forceinline__ float kf_pow2_rcp(float v) {
    const unsigned u = __float_as_uint(v);
    return (u & 0x007fffffu) == 0u && u >= 0x3f800000u && u <= 0x71800000u
               ? __uint_as_float(0x7f000000u - u)
               : 0.0f;
}
__device__ __forceinline__ double kf_pow2_rcp(double v) {
    const unsigned long long u = (unsigned long long)__double_as_longlong(v);
    return (u & 0x000fffffffffffffull) == 0ull && u >= 0x3ff0000000000000ull &&
                   u <= 0x4630000000000000ull
               ? __longlong_as_double((long long)(0x7fe0000000000000ull - u))
               : 0.0;
}
__device__ __forceinline__ void kf_chan(kf_acc_t &n, kf_acc_t &s, kf_acc_t &q, kf_acc_t nb,
                                        kf_acc_t sb, kf_acc_t qb) {
    const kf_acc_t na = n, sa = s, qa = q, nn = na + nb;
    q = qa + qb;
    const kf_acc_t r = kf_pow2_rcp(na);
    if (na == nb && r != (kf_acc_t)0) {
        const kf_acc_t d = sb * r - sa * r;
        q += d * d * (na * (kf_acc_t)0.5);
    } else if (na > (kf_acc_t)0 && nb > (kf_acc_t)0) {
        const kf_acc_t d = sb / nb - sa / na;
        q += d * d * (na * nb / nn);
    }
    n = nn;
    s = sa + sb;
}
__device__ __forceinline__ void kf_warp_chan(kf_acc_t &n, kf_acc_t &s, kf_acc_t &q) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const kf_acc_t nb = __shfl_xor_sync(0xffffffffu, n, o);
        const kf_acc_t sb = __shfl_xor_sync(0xffffffffu, s, o);
        const kf_acc_t qb = __shfl_xor_sync(0xffffffffu, q, o);
        kf_chan(n, s, q, nb, sb, qb);
    }
}
__device__ __forceinline__ void kf_row_chan(kf_acc_t &n, kf_acc_t &s, kf_acc_t &q, kf_red &r) {
    kf_warp_chan(n, s, q);
    if (KF_ROW_WARP || KF_BLOCK <= 32)
        return;
    kf_acc_t *b = kf_red_buf(r);
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    if (l == 0) {
        b[w] = n;
        b[32 + w] = s;
        b[64 + w] = q;
    }
    __syncthreads();
    const bool in = l < KF_BLOCK / 32;
    n = in ? b[l] : (kf_acc_t)0;
    s = in ? b[32 + l] : (kf_acc_t)0;
    q = in ? b[64 + l] : (kf_acc_t)0;
    kf_warp_chan(n, s, q);
}

#if KF_ROW_RESCUE
/* 1 / sqrt(ss / L + eps) for ss a sum of squares of the row scaled by 2^-e,
 * in the row's units; 0 where the scaled denominator is 0 (a constant row
 * whose eps underflowed), which normalizes the row to 0 as the reference
 * does. */
__device__ __forceinline__ float kf_rescued_rstd(float ss, int e) {
    const float d = sqrtf(ss / (float)KF_L + (float)ldexp((double)KF_EPS, -2 * e));
    return e != 0 && d == 0.0f ? 0.0f : ldexpf(1.0f / d, -e);
}
/* Whether a statistic the kernel uses overflowed (or is NaN: a NaN row
 * takes the slow path and gets its NaN again). */
#define KF_STATS_OVERFLOWED(sum, sumsq, m2)                                                        \
    ((KF_NEED_SUM && !isfinite(sum)) || (KF_NEED_SUMSQ && !isfinite(sumsq)) ||                     \
     (KF_NEED_M2 && !isfinite(m2)))
/* The rescue: EACH(v, stmt) runs stmt for every value v of the lane's share
 * of the row (the path's own way of reading it; its loop variables end in
 * "i*_" so that they never shadow the names below -- a loop counter q_ once
 * took the sum of squares, which also put the register path's row into
 * local memory: rms_norm 0.63 ms instead of 0.38 on an H100). Uniform over
 * the warp (or block): the statistics it tests are reduced values. */
#define KF_RESCUE_STATS(EACH)                                                                      \
    do {                                                                                           \
        float am_ = 0.0f;                                                                          \
        EACH(v_, am_ = fabsf(v_) > am_ ? fabsf(v_) : am_;)                                         \
        am_ = kf_row_max(am_, sh);                                                                 \
        int e_ = 0;                                                                                \
        if (am_ > 0.0f && am_ <= 3.4028234663852886e38f)                                          \
            (void)frexpf(am_, &e_);                                                                \
        const float sc_ = ldexpf(1.0f, -e_);                                                       \
        float s_ = 0.0f, q_ = 0.0f, d_ = 0.0f;                                                     \
        EACH(v_, s_ += v_ * sc_; q_ += (v_ * sc_) * (v_ * sc_);)                                   \
        s_ = kf_row_sum(s_, sh);                                                                   \
        if (KF_NEED_SUMSQ)                                                                         \
            q_ = kf_row_sum(q_, sh);                                                               \
        const float mn_ = s_ / (float)KF_L;                                                        \
        if (KF_NEED_M2) {                                                                          \
            EACH(v_, d_ += (v_ * sc_ - mn_) * (v_ * sc_ - mn_);)                                   \
            d_ = kf_row_sum(d_, sh);                                                               \
        }                                                                                          \
        st.sum = ldexpf(s_, e_);                                                                   \
        st.mean = ldexpf(mn_, e_);                                                                 \
        if (KF_NEED_SUMSQ)                                                                         \
            st.rms_rstd = kf_rescued_rstd(q_, e_);                                                 \
        if (KF_NEED_M2)                                                                            \
            st.rstd = kf_rescued_rstd(d_, e_);                                                     \
    } while (0)
#endif

/* MP: the multipass form: KF_MULTIPASS, and the scalar fallback of a vector
 * kernel (an operand not aligned for it) past 32 chunks a lane. Unrolled,
 * that fallback of a warp's 4096 row was 128 scalar steps a pass: 0.4 s of
 * NVRTC's 0.65 s for a bf16 rms_norm (sm_90a), for a path that kfuse's own
 * buffers (aligned bases) do not take. The vector path is as before. */
template <int VV> __device__ __forceinline__ void kf_row(long long row, int lane, kf_red &sh,
                                                         KF_PARAMS) {
    constexpr int CH = KF_L / VV;
    constexpr int PT = (CH + KF_LANES - 1) / KF_LANES;
    constexpr bool MP = KF_MULTIPASS || (VV == 1 && KF_VEC > 1 && PT > 32);
    kf_stats st;
    kf_acc_t mx = -(kf_acc_t)KF_INF, sum = 0, sumsq = 0;
#if KF_ROW_SCALE
    kf_acc_t amax = 0; /* NaN ignored, as the reference's comparisons ignore it */
    int sx;
    kf_acc_t sc;
#endif
    kf_acc_t x[MP ? 1 : PT][VV];
    if constexpr (!MP) {
#pragma unroll
    for (int q = 0; q < PT; q++) {
        const int c = lane + q * KF_LANES;
        if (c < CH) {
            kf_prologue<VV>(row, c, x[q], true, KF_ARGS);
#pragma unroll
            for (int k = 0; k < VV; k++) {
                if (KF_NEED_MAX) mx = kf_max_nan(mx, x[q][k]);
#if KF_ROW_SCALE
                amax = fabs(x[q][k]) > amax ? fabs(x[q][k]) : amax;
#else
                if (KF_NEED_SUM) sum += x[q][k];
                if (KF_NEED_SUMSQ) sumsq += x[q][k] * x[q][k];
#endif
            }
        }
    }
#if KF_ROW_SCALE
    sx = kf_scale_exp(kf_row_max(amax, sh));
    sc = (kf_acc_t)ldexp(1.0, -sx);
#pragma unroll
    for (int q = 0; q < PT; q++) {
        if (lane + q * KF_LANES < CH) {
#pragma unroll
            for (int k = 0; k < VV; k++) {
                if (KF_NEED_SUM) sum += KF_XS(x[q][k]);
                if (KF_NEED_SUMSQ) sumsq += KF_XS(x[q][k]) * KF_XS(x[q][k]);
            }
        }
    }
#endif
    } else {
#if KF_ROW_SCALE
    for (int c = lane; c < CH; c += KF_LANES) {
        kf_acc_t xv[VV];
        kf_prologue<VV>(row, c, xv, false, KF_ARGS);
#pragma unroll
        for (int k = 0; k < VV; k++)
            amax = fabs(xv[k]) > amax ? fabs(xv[k]) : amax;
    }
    sx = kf_scale_exp(kf_row_max(amax, sh));
    sc = (kf_acc_t)ldexp(1.0, -sx);
#endif
    for (int c = lane; c < CH; c += KF_LANES) {
        kf_acc_t xv[VV];
        kf_prologue<VV>(row, c, xv, true, KF_ARGS);
#pragma unroll
        for (int k = 0; k < VV; k++) {
            if (KF_NEED_MAX) mx = kf_max_nan(mx, xv[k]);
            if (KF_NEED_SUM) sum += KF_XS(xv[k]);
            if (KF_NEED_SUMSQ) sumsq += KF_XS(xv[k]) * KF_XS(xv[k]);
        }
    }
    }
    /* In registers, M2 merges with the sum in one reduction (Chan). */
    constexpr bool CHAN = KF_NEED_M2 && !MP;
    kf_acc_t m2 = 0;
    if constexpr (CHAN) {
        kf_acc_t n = 0;
#pragma unroll
        for (int q = 0; q < PT; q++)
            if (lane + q * KF_LANES < CH)
                n += (kf_acc_t)VV;
        const kf_acc_t lm = n > (kf_acc_t)0 ? sum / n : (kf_acc_t)0;
#pragma unroll
        for (int q = 0; q < PT; q++) {
            if (lane + q * KF_LANES < CH) {
#pragma unroll
                for (int k = 0; k < VV; k++) {
                    const kf_acc_t d = KF_XS(x[q][k]) - lm;
                    m2 += d * d;
                }
            }
        }
        kf_row_chan(n, sum, m2, sh);
    }
    if (KF_NEED_MAX) mx = kf_row_max(mx, sh);
    if (KF_NEED_SUM && !CHAN) sum = kf_row_sum(sum, sh);
    if (KF_NEED_SUMSQ) sumsq = kf_row_sum(sumsq, sh);
    const kf_acc_t mean = sum / (kf_acc_t)KF_L; /* on the scaled row (KF_ROW_SCALE) */
    st.max = mx;
#if KF_ROW_SCALE
    st.sum = (kf_acc_t)ldexp((double)sum, sx);
    st.mean = (kf_acc_t)ldexp((double)mean, sx);
#else
    st.sum = sum;
    st.mean = mean;
#endif
    st.rms_rstd = KF_RSTD_OF(sumsq);
    if (CHAN && !KF_NEED_SUMEXP) {
        st.rstd = KF_RSTD_OF(m2);
        st.sumexp = 0;
    } else if (KF_NEED_M2 || KF_NEED_SUMEXP) {
        kf_acc_t se = 0;
        if constexpr (!MP) {
#pragma unroll
        for (int q = 0; q < PT; q++) {
            const int c = lane + q * KF_LANES;
            if (c < CH) {
#pragma unroll
                for (int k = 0; k < VV; k++) {
                    if (KF_NEED_SUMEXP) se += kf_exp(x[q][k] - st.max);
                }
            }
        }
        } else {
        for (int c = lane; c < CH; c += KF_LANES) {
            kf_acc_t xv[VV];
            kf_prologue<VV>(row, c, xv, false, KF_ARGS);
#pragma unroll
            for (int k = 0; k < VV; k++) {
                if (KF_NEED_M2) { kf_acc_t d = KF_XS(xv[k]) - mean; m2 += d * d; }
                if (KF_NEED_SUMEXP) se += kf_exp(xv[k] - st.max);
            }
        }
        }
        if (KF_NEED_M2 && !CHAN) m2 = kf_row_sum(m2, sh);
        if (KF_NEED_SUMEXP) se = kf_row_sum(se, sh);
        st.rstd = KF_RSTD_OF(m2);
        st.sumexp = se;
    } else {
        st.rstd = 0;
        st.sumexp = 0;
    }
#if KF_ROW_RESCUE
    if (KF_STATS_OVERFLOWED(sum, sumsq, m2)) {
#define KF_EACH_R_(v, stmt)                                                                        \
    _Pragma("unroll") for (int iq_ = 0; iq_ < PT; iq_++) if (lane + iq_ * KF_LANES < CH)              \
        _Pragma("unroll") for (int ik_ = 0; ik_ < VV; ik_++) {                                        \
            const float v = x[iq_][ik_];                                                             \
            stmt                                                                                   \
        }
#define KF_EACH_M_(v, stmt)                                                                        \
    for (int ic_ = lane; ic_ < CH; ic_ += KF_LANES) {                                                 \
        kf_acc_t xr_[VV];                                                                          \
        kf_prologue<VV>(row, ic_, xr_, false, KF_ARGS);                                             \
        _Pragma("unroll") for (int ik_ = 0; ik_ < VV; ik_++) {                                        \
            const float v = xr_[ik_];                                                               \
            stmt                                                                                   \
        }                                                                                          \
    }
        if constexpr (!MP)
            KF_RESCUE_STATS(KF_EACH_R_);
        else
            KF_RESCUE_STATS(KF_EACH_M_);
#undef KF_EACH_R_
#undef KF_EACH_M_
    }
#endif
    if constexpr (!MP) {
#pragma unroll
    for (int q = 0; q < PT; q++) {
        const int c = lane + q * KF_LANES;
        if (c < CH)
            kf_epilogue<VV>(row, c, x[q], st, KF_ARGS);
    }
    } else if constexpr (KF_HAS_EPILOGUE) {
    for (int c = lane; c < CH; c += KF_LANES) {
        kf_acc_t xv[VV];
        kf_prologue<VV>(row, c, xv, false, KF_ARGS);
        kf_epilogue<VV>(row, c, xv, st, KF_ARGS);
    }
    }
    if (lane == 0)
        kf_row_out(row, st, KF_ARGS);
}

#if KF_STAGED && KF_ROW_SCALE
#error "row_warp_staged takes no f64 rows (KF_ROW_SCALE)"
#endif
#if KF_STAGED
/* A warp's row from its stage (STG) or, when the operands are not aligned for
 * staging, from global memory (VV == 1): the register path's arithmetic in the
 * same order, with the prologue re-evaluated for every pass instead of x kept
 * in registers. Passes: 1 statistics (and the prologue's stores), 2 the M2
 * about the lane's mean or the sum of exponentials, 3 the epilogue. */
template <int VV, bool STG> __device__ __forceinline__ void kf_row_staged(long long row, int lane,
                                                                        kf_red &sh, unsigned sb,
                                                                        KF_PARAMS) {
    constexpr int CH = KF_L / VV;
    constexpr int PT = (CH + 31) / 32;
    /* Unrolled over the chunks only when reading the stage. The global
     * fallback (unaligned operands), unrolled, kept the whole row live in
     * registers in every path of the kernel (167 for a bf16 rms_norm of 4096,
     * 52 without). */
    constexpr int UQ = STG ? PT : 1;
    kf_stats st;
    kf_acc_t mx = -(kf_acc_t)KF_INF, sum = 0, sumsq = 0;
#pragma unroll(UQ)
    for (int q = 0; q < PT; q++) {
        const int c = lane + q * 32;
        if (c < CH) {
            kf_acc_t xv[VV];
            kf_prologue<VV, STG>(row, c, xv, true, sb, KF_ARGS);
#pragma unroll
            for (int k = 0; k < VV; k++) {
                if (KF_NEED_MAX) mx = kf_max_nan(mx, xv[k]);
                if (KF_NEED_SUM) sum += xv[k];
                if (KF_NEED_SUMSQ) sumsq += xv[k] * xv[k];
            }
        }
    }
    kf_acc_t m2 = 0;
    if (KF_NEED_M2) {
        kf_acc_t n = 0;
#pragma unroll(UQ)
        for (int q = 0; q < PT; q++)
            if (lane + q * 32 < CH)
                n += (kf_acc_t)VV;
        const kf_acc_t lm = n > (kf_acc_t)0 ? sum / n : (kf_acc_t)0;
#pragma unroll(UQ)
        for (int q = 0; q < PT; q++) {
            const int c = lane + q * 32;
            if (c < CH) {
                kf_acc_t xv[VV];
                kf_prologue<VV, STG>(row, c, xv, false, sb, KF_ARGS);
#pragma unroll
                for (int k = 0; k < VV; k++) {
                    const kf_acc_t d = xv[k] - lm;
                    m2 += d * d;
                }
            }
        }
        kf_row_chan(n, sum, m2, sh);
    }
    if (KF_NEED_MAX) mx = kf_row_max(mx, sh);
    if (KF_NEED_SUM && !KF_NEED_M2) sum = kf_row_sum(sum, sh);
    if (KF_NEED_SUMSQ) sumsq = kf_row_sum(sumsq, sh);
    st.max = mx;
    st.sum = sum;
    st.mean = sum / (kf_acc_t)KF_L;
    st.rms_rstd = KF_RSTD_OF(sumsq);
    st.rstd = KF_RSTD_OF(m2);
    st.sumexp = 0;
    if (!KF_NEED_M2)
        st.rstd = 0;
#if KF_ROW_RESCUE
    if (KF_STATS_OVERFLOWED(sum, sumsq, m2)) {
#define KF_EACH_(v, stmt)                                                                          \
    for (int iq_ = 0; iq_ < PT; iq_++) {                                                              \
        const int ic_ = lane + iq_ * 32;                                                             \
        if (ic_ < CH) {                                                                             \
            kf_acc_t xr_[VV];                                                                      \
            kf_prologue<VV, STG>(row, ic_, xr_, false, sb, KF_ARGS);                                \
            _Pragma("unroll") for (int ik_ = 0; ik_ < VV; ik_++) {                                    \
                const float v = xr_[ik_];                                                           \
                stmt                                                                               \
            }                                                                                      \
        }                                                                                          \
    }
        KF_RESCUE_STATS(KF_EACH_);
#undef KF_EACH_
    }
#endif
    if (KF_NEED_SUMEXP) {
        kf_acc_t se = 0;
#pragma unroll(UQ)
        for (int q = 0; q < PT; q++) {
            const int c = lane + q * 32;
            if (c < CH) {
                kf_acc_t xv[VV];
                kf_prologue<VV, STG>(row, c, xv, false, sb, KF_ARGS);
#pragma unroll
                for (int k = 0; k < VV; k++)
                    se += kf_exp(xv[k] - st.max);
            }
        }
        st.sumexp = kf_row_sum(se, sh);
    }
#if KF_HAS_EPILOGUE
#pragma unroll(UQ)
    for (int q = 0; q < PT; q++) {
        const int c = lane + q * 32;
        if (c < CH) {
            kf_acc_t xv[VV];
            kf_prologue<VV, STG>(row, c, xv, false, sb, KF_ARGS);
            kf_epilogue<VV>(row, c, xv, st, KF_ARGS);
        }
    }
#endif
    if (lane == 0)
        kf_row_out(row, st, KF_ARGS);
}

/* Each warp walks its rows (first, first + step, ...) with a ring of
 * KF_STAGES stages: rows i+1 .. i+KF_STAGES-1 are in flight while row i is
 * computed. One commit group per row, empty past the last row, so
 * "wait until KF_STAGES - 1 groups are pending" always means "row i landed".
 * A lane reads pieces other lanes copied (a chunk of VV elements need not be
 * one 16-byte piece), hence __syncwarp after the wait (the copies become
 * visible to the warp) and before refilling a stage (every lane is done with
 * the row it held). No block-wide barrier: warps are independent. */
extern "C" __global__ void __launch_bounds__(KF_BLOCK) KF_KERNEL(KF_PARAMS) {
    KF_SETUP(); /* block-wide, before any thread leaves */
    __shared__ kf_acc_t sh_[2 * 96];
    kf_red sh = {sh_, 0};
    const int lane = (int)(threadIdx.x & 31), wid = (int)(threadIdx.x >> 5);
    const long long first = (long long)blockIdx.x * KF_ROWS_PER_BLOCK + wid;
    const long long step = (long long)gridDim.x * KF_ROWS_PER_BLOCK;
    if (!kf_vec_ok(KF_ARGS)) {
        for (long long row = first; row < KF_ROWS; row += step)
            kf_row_staged<1, false>(row, lane, sh, 0u, KF_ARGS);
        return;
    }
    const unsigned ring = (unsigned)__cvta_generic_to_shared(kf_dyn_smem) +
                          (unsigned)wid * (unsigned)(KF_STAGES * KF_STAGE_BYTES);
#pragma unroll
    for (int s = 0; s < KF_STAGES - 1; s++) {
        const long long r = first + s * step;
        if (r < KF_ROWS)
            kf_stage_row(r, lane, ring + (unsigned)(s * KF_STAGE_BYTES), KF_ARGS);
        kf_cp_commit();
    }
    int cur = 0, nxt = KF_STAGES - 1; /* the stages of row i and of row i + KF_STAGES - 1 */
    for (long long row = first; row < KF_ROWS; row += step) {
        const long long rn = row + (KF_STAGES - 1) * step;
        __syncwarp();
        if (rn < KF_ROWS)
            kf_stage_row(rn, lane, ring + (unsigned)(nxt * KF_STAGE_BYTES), KF_ARGS);
        kf_cp_commit();
        kf_cp_wait<KF_STAGES - 1>();
        __syncwarp();
        kf_row_staged<KF_VEC, true>(row, lane, sh, ring + (unsigned)(cur * KF_STAGE_BYTES), KF_ARGS);
        cur = cur + 1 == KF_STAGES ? 0 : cur + 1;
        nxt = nxt + 1 == KF_STAGES ? 0 : nxt + 1;
    }
    kf_cp_wait<0>(); /* nothing is left in flight by construction; drain anyway */
}
#else
extern "C" __global__ void __launch_bounds__(KF_BLOCK) KF_KERNEL(KF_PARAMS) {
    KF_SETUP(); /* block-wide, before any thread leaves */
    __shared__ kf_acc_t sh_[2 * 96];
    kf_red sh = {sh_, 0};
    const int lane = KF_ROW_WARP ? (int)(threadIdx.x & 31) : (int)threadIdx.x;
    const long long first = (long long)blockIdx.x * KF_ROWS_PER_BLOCK +
                            (KF_ROW_WARP ? (long long)(threadIdx.x >> 5) : 0);
    const long long step = (long long)gridDim.x * KF_ROWS_PER_BLOCK;
#if KF_VEC > 1
    const bool vec = kf_vec_ok(KF_ARGS);
#endif
    /* Every thread of a block runs the same number of iterations (the block
     * reductions synchronize), so the loop bound is per block, not per row. */
    for (long long row = first; row < KF_ROWS; row += step) {
#if KF_VEC > 1
        if (vec)
            kf_row<KF_VEC>(row, lane, sh, KF_ARGS);
        else
#endif
            kf_row<1>(row, lane, sh, KF_ARGS);
    }
}
#endif /* KF_STAGED */
