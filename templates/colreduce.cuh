/*
 * colreduce.cuh -- a reduction (or a softmax / norm that fused with nothing)
 * over a NON-last axis: the row stage's "row" is a column of KF_A elements
 * KF_INNER apart. Threads along x take adjacent columns (coalesced: one warp
 * reads 32 neighbouring elements of a line), the KF_YSPLIT warps of a block
 * split the axis, and their partial statistics meet in shared memory. Every
 * pass re-evaluates the prologue from memory (a column is not contiguous, and
 * the rows in flight would not fit in registers); only the first pass stores
 * prologue outputs.
 *
 * Hooks (defined by codegen/cuda before this file):
 *   KF_KERNEL, KF_PARAMS, KF_ARGS, KF_BLOCK (= 32 * KF_YSPLIT)
 *   KF_COLS            columns: product of the dims other than the axis
 *   KF_A               elements per column (the reduced axis' length)
 *   KF_YSPLIT          warps splitting the axis
 *   kf_acc_t, KF_NEED_*, KF_EPS   as in rowwise.cuh (KF_L is KF_A)
 *   kf_prologue(col, a, store, KF_ARGS)  x at element a of column col
 *   kf_epilogue(col, a, x, st, KF_ARGS)  per element (softmax / norms), run
 *                      only with KF_HAS_EPILOGUE 1
 *   kf_row_out(col, st, KF_ARGS)         once per column (reductions)
 *   KF_SETUP()         block-wide setup at kernel entry (as in elementwise.cuh)
 */
struct kf_stats {
    kf_acc_t max, sum, mean, rstd, rms_rstd, sumexp;
};

template <bool IS_MAX> __device__ __forceinline__ kf_acc_t kf_col_combine(kf_acc_t v,
                                                                          kf_acc_t (*sh)[32]) {
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    __syncthreads();
    sh[ty][tx] = v;
    __syncthreads();
    kf_acc_t r = sh[0][tx];
#pragma unroll
    for (int y = 1; y < KF_YSPLIT; y++)
        r = IS_MAX ? kf_max_nan(r, sh[y][tx]) : r + sh[y][tx];
    return r;
}

extern "C" __global__ void __launch_bounds__(KF_BLOCK) KF_KERNEL(KF_PARAMS) {
    KF_SETUP(); /* block-wide, before any thread leaves */
    __shared__ kf_acc_t sh[KF_YSPLIT][32];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    /* Uniform trip count per block: the combines synchronize. */
    for (long long base = (long long)blockIdx.x * 32; base < KF_COLS; base += (long long)gridDim.x * 32) {
        const long long col = base + tx;
        const bool live = col < KF_COLS;
        kf_stats st;
        kf_acc_t mx = -(kf_acc_t)KF_INF, sum = 0, sumsq = 0;
        if (live) {
            for (long long a = ty; a < KF_A; a += KF_YSPLIT) {
                kf_acc_t x = kf_prologue(col, a, true, KF_ARGS);
                if (KF_NEED_MAX) mx = kf_max_nan(mx, x);
                if (KF_NEED_SUM) sum += x;
                if (KF_NEED_SUMSQ) sumsq += x * x;
            }
        }
        if (KF_NEED_MAX) mx = kf_col_combine<true>(mx, sh);
        if (KF_NEED_SUM) sum = kf_col_combine<false>(sum, sh);
        if (KF_NEED_SUMSQ) sumsq = kf_col_combine<false>(sumsq, sh);
        st.max = mx;
        st.sum = sum;
        st.mean = sum / (kf_acc_t)KF_A;
        st.rms_rstd = (kf_acc_t)1 / kf_sqrt(sumsq / (kf_acc_t)KF_A + (kf_acc_t)KF_EPS);
        st.rstd = 0;
        st.sumexp = 0;
        if (KF_NEED_M2 || KF_NEED_SUMEXP) {
            kf_acc_t m2 = 0, se = 0;
            if (live) {
                for (long long a = ty; a < KF_A; a += KF_YSPLIT) {
                    kf_acc_t x = kf_prologue(col, a, false, KF_ARGS);
                    if (KF_NEED_M2) { kf_acc_t d = x - st.mean; m2 += d * d; }
                    if (KF_NEED_SUMEXP) se += kf_exp(x - st.max);
                }
            }
            if (KF_NEED_M2) m2 = kf_col_combine<false>(m2, sh);
            if (KF_NEED_SUMEXP) se = kf_col_combine<false>(se, sh);
            st.rstd = (kf_acc_t)1 / kf_sqrt(m2 / (kf_acc_t)KF_A + (kf_acc_t)KF_EPS);
            st.sumexp = se;
        }
        if (live) {
#if KF_HAS_EPILOGUE
            for (long long a = ty; a < KF_A; a += KF_YSPLIT) {
                kf_acc_t x = kf_prologue(col, a, false, KF_ARGS);
                kf_epilogue(col, a, x, st, KF_ARGS);
            }
#endif
            if (ty == 0)
                kf_row_out(col, st, KF_ARGS);
        }
    }
}
