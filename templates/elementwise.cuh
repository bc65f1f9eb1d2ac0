/*
 * elementwise.cuh -- a flat loop over an iteration space around one
 * expression DAG: ELEMENTWISE groups, LAYOUT copies (a strided load, a
 * contiguous store), and the epilogue of a GEMM that cuBLASLt cannot apply
 * (the accumulator read back as one more loaded tensor).
 *
 * Shape: a grid-stride loop over vectors of KF_VEC consecutive elements
 * (16-byte loads and stores for contiguous operands, one load per vector for
 * operands broadcast along the innermost axis, per-element loads for strided
 * ones), then a scalar tail. The vector loop runs only when every vector
 * operand's pointer is aligned (kf_vec_ok); otherwise the whole space takes
 * the scalar loop. The grid is sized by the host from the SM count; any grid
 * is correct.
 *
 * Hooks (defined by codegen/cuda before this file):
 *   KF_KERNEL          the kernel's name (extern "C")
 *   KF_PARAMS          its parameter list; KF_ARGS the same names as arguments
 *   KF_BLOCK           threads per block (the launch must use it)
 *   KF_MINB            blocks per SM the registers must allow (__launch_bounds__)
 *   KF_N               elements in the iteration space
 *   KF_VEC             elements per vector (1: scalar only)
 *   KF_NVEC            vectors in the vector loop (KF_N / KF_VEC, rounded down;
 *                      the rest is the tail)
 *   kf_body<VV, H, P>(i, hv, pv, KF_ARGS)  the expression: computes and
 *                      stores elements i .. i+VV-1 (VV = KF_VEC, or 1);
 *                      KF_EXPR(i) of the design. H: take the hoisted operands
 *                      from hv; P: take the streamed operands from pv
 *   KF_HOIST_P         0, or the period P of the hoisted operands: their
 *                      offsets depend only on the linear index modulo P
 *   kf_hoist, kf_hoist_load(i, hv, KF_ARGS)
 *                      the hoisted operands and their load at linear index i
 *   KF_UNROLL          vector steps per loop trip whose streamed operands are
 *                      loaded before the first is computed (1: none)
 *   kf_pre, kf_pre_load(i, pv, KF_ARGS)
 *                      the streamed operands (16-byte vector loads, not
 *                      hoisted) of one vector step, and their load at linear
 *                      index i (kf_raw_ld_stream: each is read once)
 *   kf_vec_ok(KF_ARGS) true when the vector operands are aligned
 *   KF_SETUP()         block-wide setup at kernel entry, every thread calls it
 *                      (fills the shared gelu table; may synchronize)
 *
 * Hoisting: when every thread's grid-stride step (threads * KF_VEC elements)
 * is a multiple of P, a thread meets the same hoisted values at every step, so
 * it loads them once (the host rounds the grid to make it so). On an H200,
 * gelu(x * s + b) * g over 65536 x 4096 bf16 with s, b, g per column: three
 * loads and their index arithmetic per vector were a third of the kernel.
 *
 * Unrolling: a thread's steps v, v + T, ..., v + (KF_UNROLL - 1) T (T threads
 * in the grid) load their streamed operands first, then compute and store
 * each; the hoisting condition holds for every one of them. Without it each
 * thread had one 16-byte load in flight, and ptxas does not move the next
 * step's loads above this step's stores by itself.
 */
template <bool H> __device__ __forceinline__ void kf_vloop(long long tid, long long nthreads,
                                                           const kf_hoist &hv, KF_PARAMS) {
    long long v = tid;
#if KF_UNROLL > 1
    for (; v + (KF_UNROLL - 1) * nthreads < KF_NVEC; v += KF_UNROLL * nthreads) {
        kf_pre pv[KF_UNROLL];
#pragma unroll
        for (int u = 0; u < KF_UNROLL; u++)
            kf_pre_load((v + u * nthreads) * KF_VEC, pv[u], KF_ARGS);
#pragma unroll
        for (int u = 0; u < KF_UNROLL; u++)
            kf_body<KF_VEC, H, true>((v + u * nthreads) * KF_VEC, hv, pv[u], KF_ARGS);
    }
#endif
    const kf_pre none = {};
    for (; v < KF_NVEC; v += nthreads)
        kf_body<KF_VEC, H, false>(v * KF_VEC, hv, none, KF_ARGS);
}

extern "C" __global__ void __launch_bounds__(KF_BLOCK, KF_MINB) KF_KERNEL(KF_PARAMS) {
    KF_SETUP(); /* block-wide, before any thread leaves */
    const long long tid = (long long)blockIdx.x * KF_BLOCK + threadIdx.x;
    const long long nthreads = (long long)gridDim.x * KF_BLOCK;
    kf_hoist hv;
    const kf_pre none = {};
#if KF_VEC > 1
    if (kf_vec_ok(KF_ARGS)) {
#if KF_HOIST_P > 0
        if ((nthreads * KF_VEC) % KF_HOIST_P == 0) {
            kf_hoist_load(tid * KF_VEC, hv, KF_ARGS);
            kf_vloop<true>(tid, nthreads, hv, KF_ARGS);
        } else
#endif
            kf_vloop<false>(tid, nthreads, hv, KF_ARGS);
        for (long long i = (long long)KF_NVEC * KF_VEC + tid; i < KF_N; i += nthreads)
            kf_body<1, false, false>(i, hv, none, KF_ARGS);
        return;
    }
#endif
    for (long long i = tid; i < KF_N; i += nthreads)
        kf_body<1, false, false>(i, hv, none, KF_ARGS);
}
