/*
 * argmax.cuh -- argmax along one axis, two kernels (one chosen by
 * KF_ARGMAX_COLS):
 *
 * Over the last axis (a ROWWISE group whose row stage needs KF_STAT_ARGMAX):
 * one warp per row, the row's elements spread over the lanes (element j on
 * lane j % 32), each lane keeping its best (value, index), then five shuffle
 * steps. The prologue (the row's input x, from loads and an elementwise
 * expression) and the outputs are the row-wise kernels' hooks, so a fused
 * argmax(logits * t + b) is one kernel.
 *
 * Over another axis (a COLREDUCE group, KF_ARGMAX_COLS 1): the layout of
 * colreduce.cuh. Threads along x take 32 adjacent columns (a warp reads 32
 * neighbouring elements of a line: coalesced), the KF_YSPLIT warps of a block
 * take every KF_YSPLIT-th element of the axis, each thread keeps its best
 * pair, and the warps' pairs meet in shared memory.
 *
 * The order is the reference's (kf_ir: "the index of the first NaN, else of
 * the first maximum"): a NaN beats any number, two NaNs or two equal values
 * go to the lower index, else the larger value wins. That is a total order
 * on (value, index) pairs, so partial results combine in any order to the
 * same pair: both kernels are deterministic and exact (values are compared,
 * never summed; -0 and +0 are equal, as in the reference).
 *
 * Hooks (defined by codegen/cuda before this file):
 *   rows (as for rowwise.cuh with KF_VEC 1, KF_ROW_WARP 1): KF_KERNEL,
 *     KF_PARAMS, KF_ARGS, KF_BLOCK, KF_ROWS, KF_L, kf_acc_t, KF_SETUP(),
 *     kf_prologue<1>(row, c, x, store, KF_ARGS), KF_HAS_EPILOGUE and
 *     kf_epilogue<1>(row, c, x, st, KF_ARGS), kf_row_out(row, st, KF_ARGS)
 *     (lane 0, once per row);
 *   columns (as for colreduce.cuh): KF_KERNEL, KF_PARAMS, KF_ARGS, KF_BLOCK
 *     (= 32 * KF_YSPLIT), KF_COLS, KF_A, KF_YSPLIT, kf_acc_t, KF_SETUP(),
 *     kf_prologue(col, a, store, KF_ARGS), KF_HAS_EPILOGUE and
 *     kf_epilogue(col, a, x, st, KF_ARGS), kf_row_out(col, st, KF_ARGS).
 */
#ifndef KF_ARGMAX_COLS
#define KF_ARGMAX_COLS 0
#endif
struct kf_stats {
    kf_acc_t max;
    int argmax;
};

/* Whether (v, i) comes before the best pair so far (bi < 0: none yet). */
__device__ __forceinline__ bool kf_amax_before(kf_acc_t v, int i, kf_acc_t bv, int bi) {
    if (i < 0)
        return false;
    if (bi < 0)
        return true;
    const bool vn = v != v, bn = bv != bv;
    if (vn || bn)
        return vn && (!bn || i < bi);
    return v > bv || (v == bv && i < bi);
}

#if !KF_ARGMAX_COLS
extern "C" __global__ void __launch_bounds__(KF_BLOCK) KF_KERNEL(KF_PARAMS) {
    KF_SETUP(); /* block-wide, before any thread leaves */
    const int lane = (int)(threadIdx.x & 31);
    const long long first = (long long)blockIdx.x * (KF_BLOCK / 32) + (threadIdx.x >> 5);
    const long long step = (long long)gridDim.x * (KF_BLOCK / 32);
    for (long long row = first; row < KF_ROWS; row += step) {
        kf_acc_t bv = 0;
        int bi = -1;
        for (int c = lane; c < KF_L; c += 32) {
            kf_acc_t x[1];
            kf_prologue<1>(row, c, x, true, KF_ARGS);
            if (kf_amax_before(x[0], c, bv, bi)) {
                bv = x[0];
                bi = c;
            }
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const kf_acc_t ov = __shfl_xor_sync(0xffffffffu, bv, off);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
            if (kf_amax_before(ov, oi, bv, bi)) {
                bv = ov;
                bi = oi;
            }
        }
        kf_stats st;
        st.max = bv;
        st.argmax = bi;
#if KF_HAS_EPILOGUE
        for (int c = lane; c < KF_L; c += 32) {
            kf_acc_t x[1];
            kf_prologue<1>(row, c, x, false, KF_ARGS);
            kf_epilogue<1>(row, c, x, st, KF_ARGS);
        }
#endif
        if (lane == 0)
            kf_row_out(row, st, KF_ARGS);
    }
}
#else
extern "C" __global__ void __launch_bounds__(KF_BLOCK) KF_KERNEL(KF_PARAMS) {
    KF_SETUP(); /* block-wide, before any thread leaves */
    __shared__ kf_acc_t shv[KF_YSPLIT][32];
    __shared__ int shi[KF_YSPLIT][32];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    /* Uniform trip count per block: the combine synchronizes. */
    for (long long base = (long long)blockIdx.x * 32; base < KF_COLS;
         base += (long long)gridDim.x * 32) {
        const long long col = base + tx;
        const bool live = col < KF_COLS;
        kf_acc_t bv = 0;
        int bi = -1;
        if (live) {
            for (long long a = ty; a < KF_A; a += KF_YSPLIT) {
                const kf_acc_t x = kf_prologue(col, a, true, KF_ARGS);
                if (kf_amax_before(x, (int)a, bv, bi)) {
                    bv = x;
                    bi = (int)a;
                }
            }
        }
        __syncthreads(); /* the previous columns' combine has read shv/shi */
        shv[ty][tx] = bv;
        shi[ty][tx] = bi;
        __syncthreads();
#pragma unroll
        for (int y = 0; y < KF_YSPLIT; y++) {
            if (y != ty && kf_amax_before(shv[y][tx], shi[y][tx], bv, bi)) {
                bv = shv[y][tx];
                bi = shi[y][tx];
            }
        }
        kf_stats st;
        st.max = bv;
        st.argmax = bi;
        if (live) {
#if KF_HAS_EPILOGUE
            for (long long a = ty; a < KF_A; a += KF_YSPLIT) {
                const kf_acc_t x = kf_prologue(col, a, false, KF_ARGS);
                kf_epilogue(col, a, x, st, KF_ARGS);
            }
#endif
            if (ty == 0)
                kf_row_out(col, st, KF_ARGS);
        }
    }
}
#endif
