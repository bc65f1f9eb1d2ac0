/*
 * elementwise.cuh -- a flat loop over an iteration space around one
 * expression DAG: ELEMENTWISE groups, LAYOUT copies (a strided load, a
 * contiguous store), and the epilogue of a GEMM that cuBLASLt cannot apply
 * (the accumulator read back as one more loaded tensor).
 *
 * Shape: a grid-stride loop over vectors of KF_VEC consecutive elements
 * (16-byte loads and stores for contiguous operands, one load per vector for
 * operands broadcast along the innermost axis, per-element loads for strided
 * ones; a slice, concat or gather read through takes a vector, one load or
 * per-element loads, chosen per vector by its index: codegen's
 * cg_emit_remap_vector), then a scalar tail. The vector loop runs only when every vector
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
 *   kf_body<VV, H, P, B>(i, hv, pv, sb, KF_ARGS)  the expression: computes and
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
 *   KF_BULK            1: the bulk path below runs first (sm_90+), 0: none.
 *                      With 1 also:
 *   KF_BULK_E          elements per chunk (a multiple of KF_BLOCK * KF_VEC)
 *   KF_BULK_STAGES, KF_BULK_STAGE_BYTES  the ring in dynamic shared memory
 *   KF_BULK_TX         bytes the streamed operands of one chunk load
 *   kf_bulk_load(sb, bar, c, KF_ARGS)   (one thread) chunk c's streamed
 *                      operands into stage sb, counted on bar
 *   kf_bulk_pre(sb, e, pv)   the streamed operands of the vector at element
 *                      e of the stage
 *   kf_bulk_store(sb, c, KF_ARGS)       (one thread) the stage's outputs to
 *                      chunk c, one bulk group
 *   kf_body<VV, H, P, B>(i, hv, pv, sb, KF_ARGS): B stores the outputs into
 *                      stage sb (at i modulo KF_BULK_E) instead of memory
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
 *
 * Bulk path (KF_BULK): the whole chunks of KF_BULK_E elements go first, block
 * b taking chunks b, b + grid, ... through a ring of KF_BULK_STAGES stages in
 * shared memory. Thread 0 loads a chunk's streamed operands with the copy
 * engine (one instruction per operand); every thread reads its vectors of the
 * stage, computes, and writes its results into the stage (an output of the
 * same element size as a streamed operand takes that operand's place: each
 * thread overwrites only what it read); then thread 0 stores the stage's
 * outputs with the copy engine, and once the previous chunk's store has read
 * its stage, refills that stage. The grid-stride loops then take what is left
 * (the last partial chunk). The chain of the hoisting note took 0.390 ms
 * this way on an H100 against 0.398-0.403 in the loops above (evict-first),
 * and 0.273-0.274 on an H200 against 0.289-0.295 (evict-normal), where the
 * fastest copy kernels took 0.278: the ring keeps a steady number of bytes in
 * flight (codegen/cuda sizes it), where thousands of 16-byte requests did not.
 */
template <bool H> __device__ __forceinline__ void kf_vloop(long long v, long long nthreads,
                                                           const kf_hoist &hv, KF_PARAMS) {
#if KF_UNROLL > 1
    for (; v + (KF_UNROLL - 1) * nthreads < KF_NVEC; v += KF_UNROLL * nthreads) {
        kf_pre pv[KF_UNROLL];
#pragma unroll
        for (int u = 0; u < KF_UNROLL; u++)
            kf_pre_load((v + u * nthreads) * KF_VEC, pv[u], KF_ARGS);
#pragma unroll
        for (int u = 0; u < KF_UNROLL; u++)
            kf_body<KF_VEC, H, true, false>((v + u * nthreads) * KF_VEC, hv, pv[u], nullptr, KF_ARGS);
    }
#endif
    const kf_pre none = {};
    for (; v < KF_NVEC; v += nthreads)
        kf_body<KF_VEC, H, false, false>(v * KF_VEC, hv, none, nullptr, KF_ARGS);
}

#if KF_BULK
/* (One thread) chunk c's streamed operands into stage s, counted on bar[s]. */
__device__ __forceinline__ void kf_bulk_fill(unsigned char *ring, unsigned long long *bar, int s,
                                             long long c, KF_PARAMS) {
    kf_mb_expect(&bar[s], KF_BULK_TX);
    kf_bulk_load(ring + s * KF_BULK_STAGE_BYTES, &bar[s], c, KF_ARGS);
}

/* The whole chunks; returns the vectors they cover. Every thread of the block
 * calls it (barriers). */
__device__ __forceinline__ long long kf_bulk(KF_PARAMS) {
    constexpr int NV = (int)(KF_BULK_E / (KF_BLOCK * KF_VEC)); /* vectors per thread per chunk */
    /* the hoisted operands are the same in every chunk when a block's vectors
     * step by a multiple of their period */
    constexpr bool H = KF_HOIST_P > 0 && (KF_BLOCK * KF_VEC) % KF_HOIST_P == 0;
    extern __shared__ __align__(128) unsigned char kf_bulk_ring[];
    __shared__ unsigned long long bar[KF_BULK_STAGES];
    const long long nch = KF_N / KF_BULK_E;
    const long long my = nch > (long long)blockIdx.x ? (nch - 1 - blockIdx.x) / gridDim.x + 1 : 0;
    const int t = threadIdx.x;
    if (t == 0) {
        for (int s = 0; s < KF_BULK_STAGES; s++)
            kf_mb_init(&bar[s]);
        for (int s = 0; s < KF_BULK_STAGES && s < my; s++)
            kf_bulk_fill(kf_bulk_ring, bar, s, blockIdx.x + (long long)s * gridDim.x, KF_ARGS);
    }
    __syncthreads(); /* the barriers are initialized */
    kf_hoist hv;
    if (H)
        kf_hoist_load((long long)t * KF_VEC, hv, KF_ARGS);
    for (long long i = 0; i < my; i++) {
        const int s = (int)(i % KF_BULK_STAGES);
        const long long c = blockIdx.x + i * gridDim.x;
        unsigned char *sb = kf_bulk_ring + s * KF_BULK_STAGE_BYTES;
        kf_mb_wait(&bar[s], (unsigned)((i / KF_BULK_STAGES) & 1));
        kf_pre pv[NV];
#pragma unroll
        for (int u = 0; u < NV; u++)
            kf_bulk_pre(sb, (t + KF_BLOCK * u) * KF_VEC, pv[u]);
#pragma unroll
        for (int u = 0; u < NV; u++)
            kf_body<KF_VEC, H, true, true>(c * KF_BULK_E + (long long)(t + KF_BLOCK * u) * KF_VEC, hv,
                                           pv[u], sb, KF_ARGS);
        kf_bulk_fence();
        __syncthreads(); /* the stage holds the chunk's outputs */
        if (t == 0) {
            kf_bulk_store(sb, c, KF_ARGS);
            kf_bulk_commit();
            /* refill the previous chunk's stage once its store has read it */
            if (i >= 1 && i - 1 + KF_BULK_STAGES < my) {
                kf_bulk_wait_read<1>();
                kf_bulk_fill(kf_bulk_ring, bar, (int)((i - 1) % KF_BULK_STAGES),
                             c + (long long)(KF_BULK_STAGES - 1) * gridDim.x, KF_ARGS);
            }
        }
    }
    if (t == 0)
        kf_bulk_wait_all(); /* the ring is read before the block leaves */
    return nch * (KF_BULK_E / KF_VEC);
}
#endif

extern "C" __global__ void __launch_bounds__(KF_BLOCK, KF_MINB) KF_KERNEL(KF_PARAMS) {
    KF_SETUP(); /* block-wide, before any thread leaves */
    const long long tid = (long long)blockIdx.x * KF_BLOCK + threadIdx.x;
    const long long nthreads = (long long)gridDim.x * KF_BLOCK;
    kf_hoist hv;
    const kf_pre none = {};
#if KF_VEC > 1
    if (kf_vec_ok(KF_ARGS)) {
        long long v0 = 0; /* vectors done */
#if KF_BULK
        v0 = kf_bulk(KF_ARGS);
#endif
#if KF_HOIST_P > 0
        if ((nthreads * KF_VEC) % KF_HOIST_P == 0) {
            kf_hoist_load((v0 + tid) * KF_VEC, hv, KF_ARGS);
            kf_vloop<true>(v0 + tid, nthreads, hv, KF_ARGS);
        } else
#endif
            kf_vloop<false>(v0 + tid, nthreads, hv, KF_ARGS);
        for (long long i = (long long)KF_NVEC * KF_VEC + tid; i < KF_N; i += nthreads)
            kf_body<1, false, false, false>(i, hv, none, nullptr, KF_ARGS);
        return;
    }
#endif
    for (long long i = tid; i < KF_N; i += nthreads)
        kf_body<1, false, false, false>(i, hv, none, nullptr, KF_ARGS);
}
