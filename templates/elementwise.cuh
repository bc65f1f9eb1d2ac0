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
 *   kf_body<VV, H>(i, hv, KF_ARGS)  the expression: computes and stores
 *                      elements i .. i+VV-1 (VV = KF_VEC, or 1); KF_EXPR(i) of
 *                      the design. H: take the hoisted operands from hv
 *   KF_HOIST_P         0, or the period P of the hoisted operands: their
 *                      offsets depend only on the linear index modulo P
 *   kf_hoist, kf_hoist_load(i, hv, KF_ARGS)
 *                      the hoisted operands and their load at linear index i
 *   kf_vec_ok(KF_ARGS) true when the vector operands are aligned
 *   KF_SETUP()         block-wide setup at kernel entry, every thread calls it
 *                      (fills the shared gelu table; may synchronize)
 *
 * Hoisting: when every thread's grid-stride step (threads * KF_VEC elements)
 * is a multiple of P, a thread meets the same hoisted values at every step, so
 * it loads them once (the host rounds the grid to make it so). On an H200,
 * gelu(x * s + b) * g over 65536 x 4096 bf16 with s, b, g per column: three
 * loads and their index arithmetic per vector were a third of the kernel.
 */
extern "C" __global__ void __launch_bounds__(KF_BLOCK, KF_MINB) KF_KERNEL(KF_PARAMS) {
    KF_SETUP(); /* block-wide, before any thread leaves */
    const long long tid = (long long)blockIdx.x * KF_BLOCK + threadIdx.x;
    const long long nthreads = (long long)gridDim.x * KF_BLOCK;
    kf_hoist hv;
#if KF_VEC > 1
    if (kf_vec_ok(KF_ARGS)) {
#if KF_HOIST_P > 0
        if ((nthreads * KF_VEC) % KF_HOIST_P == 0) {
            kf_hoist_load(tid * KF_VEC, hv, KF_ARGS);
            for (long long v = tid; v < KF_NVEC; v += nthreads)
                kf_body<KF_VEC, true>(v * KF_VEC, hv, KF_ARGS);
        } else
#endif
        for (long long v = tid; v < KF_NVEC; v += nthreads)
            kf_body<KF_VEC, false>(v * KF_VEC, hv, KF_ARGS);
        for (long long i = (long long)KF_NVEC * KF_VEC + tid; i < KF_N; i += nthreads)
            kf_body<1, false>(i, hv, KF_ARGS);
        return;
    }
#endif
    for (long long i = tid; i < KF_N; i += nthreads)
        kf_body<1, false>(i, hv, KF_ARGS);
}
