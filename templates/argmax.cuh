/*
 * argmax.cuh -- argmax over the last axis (a ROWWISE group whose row stage
 * needs KF_STAT_ARGMAX): one warp per row, the row's elements spread over the
 * lanes (element j on lane j % 32), each lane keeping its best (value,
 * index), then five shuffle steps. The prologue (the row's input x, from
 * loads and an elementwise expression) and the outputs are the row-wise
 * kernels' hooks, so a fused argmax(logits * t + b) is one kernel.
 *
 * The order is the reference's (kf_ir: "the index of the first NaN, else of
 * the first maximum"): a NaN beats any number, two NaNs or two equal values
 * go to the lower index, else the larger value wins. That is a total order
 * on (value, index) pairs, so the lanes' partial results combine in any
 * order to the same pair: the kernel is deterministic and exact (values are
 * compared, never summed; -0 and +0 are equal, as in the reference).
 *
 * Hooks (defined by codegen/cuda before this file, as for rowwise.cuh with
 * KF_VEC 1, KF_ROW_WARP 1): KF_KERNEL, KF_PARAMS, KF_ARGS, KF_BLOCK, KF_ROWS,
 * KF_L, kf_acc_t, KF_SETUP(), kf_prologue<1>(row, c, x, store, KF_ARGS),
 * KF_HAS_EPILOGUE and kf_epilogue<1>(row, c, x, st, KF_ARGS), and
 * kf_row_out(row, st, KF_ARGS) (lane 0, once per row).
 */
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
