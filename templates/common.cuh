/*
 * common.cuh -- what every generated kernel shares: storage types, the
 * f16/bf16 <-> float conversions, loads and stores (scalar and 16-byte
 * vectors), the scalar functions of every elementwise op (the reference
 * evaluator's formulas, in float and double), and warp/block reductions.
 *
 * Self-contained on purpose: no #include, so NVRTC needs no --include-path
 * into a toolkit (cuda_fp16.h / cuda_bf16.h live in a different place on
 * every install, and a header that changes under a toolkit update would
 * change the binary without changing the source the cache key hashes).
 * bf16 converts with the cvt.rn PTX instruction on sm_80+ (bit operations
 * before), f16 with cvt.rn (sm_53+); both round to nearest even, as the
 * reference's stores do.
 *
 * Hooks: none; the other templates and the generated code use these names:
 *   kf_f16, kf_bf16        storage types (16 bits, distinct for overloading)
 *   kf_ld(p) / kf_st(p, v) one element: storage -> register type and back
 *                          (float for f32/f16/bf16, double, int, bool)
 *   kf_ldv<N>(p, out[N]) / kf_stv<N>(p, in[N])
 *                          N consecutive elements through 16/8/4/2-byte
 *                          accesses; p must be aligned to min(16, N*size)
 *   kf_round_f16/bf16(x)   round a float to the dtype and back
 *   kf_cp_row<NB>(sa, p, lane), kf_cp_commit(), kf_cp_wait<N>(), kf_lds<N, T>(sa, out[N])
 *                          sm_80+: a row into shared memory with cp.async, and
 *                          N elements back from shared address sa
 *   kf_mb_*, kf_bulk_*     sm_90+: bulk copies (cp.async.bulk) between global
 *                          and shared memory, completed on an mbarrier
 *   kf_note_clamp(flag)    a gather index was clamped into its axis: set the
 *                          program's flag word (read first, so a warp of
 *                          clamped lookups costs one atomic at most per lane)
 *   kf_op_<name>(...)      the ops (kf_gelu, kf_add_i32, ...)
 *   kf_bf16x2<OP, VV>(d, a, b)
 *                          VV results of a bf16 add/sub/mul (OP 0/1/2), two per
 *                          bf16x2 instruction
 *   kf_max_nan, kf_warp_sum/max, kf_block_sum/max
 */
#define KF_INF __int_as_float(0x7f800000)

struct kf_f16 { unsigned short x; };
struct kf_bf16 { unsigned short x; };

/* ---- conversions ---------------------------------------------------- */

__device__ __forceinline__ float kf_bf16_to_f32(unsigned short h) {
    return __uint_as_float((unsigned)h << 16);
}
__device__ __forceinline__ unsigned short kf_f32_to_bf16(float f) {
#if __CUDA_ARCH__ >= 800
    /* One instruction (F2FP): round to nearest even; a NaN becomes the
     * canonical quiet NaN. */
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (unsigned short)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);               /* round to nearest even */
    return (unsigned short)(u >> 16);
#endif
}
__device__ __forceinline__ float kf_f16_to_f32(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short kf_f32_to_f16(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
__device__ __forceinline__ float kf_round_bf16(float x) {
#if __CUDA_ARCH__ >= 800
    /* One F2FP (the packed form, on the ALU pipe; the scalar cvt is an F2F
     * on the slower conversion pipe): x rounded in the high half, 0 in the
     * low half, which is the float itself. */
    unsigned u;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(x), "f"(0.0f));
    return __uint_as_float(u);
#else
    return kf_bf16_to_f32(kf_f32_to_bf16(x));
#endif
}
__device__ __forceinline__ float kf_round_f16(float x) { return kf_f16_to_f32(kf_f32_to_f16(x)); }

/* ---- scalar loads and stores ---------------------------------------- */

__device__ __forceinline__ float kf_cvt(float v) { return v; }
__device__ __forceinline__ double kf_cvt(double v) { return v; }
__device__ __forceinline__ int kf_cvt(int v) { return v; }
__device__ __forceinline__ long long kf_cvt(long long v) { return v; }
__device__ __forceinline__ bool kf_cvt(unsigned char v) { return v != 0; }
__device__ __forceinline__ float kf_cvt(kf_f16 v) { return kf_f16_to_f32(v.x); }
__device__ __forceinline__ float kf_cvt(kf_bf16 v) { return kf_bf16_to_f32(v.x); }

__device__ __forceinline__ void kf_pack(float *p, float v) { *p = v; }
__device__ __forceinline__ void kf_pack(double *p, double v) { *p = v; }
__device__ __forceinline__ void kf_pack(int *p, int v) { *p = v; }
__device__ __forceinline__ void kf_pack(unsigned char *p, bool v) { *p = v ? 1 : 0; }
__device__ __forceinline__ void kf_pack(kf_f16 *p, float v) { p->x = kf_f32_to_f16(v); }
__device__ __forceinline__ void kf_pack(kf_bf16 *p, float v) { p->x = kf_f32_to_bf16(v); }

template <typename T> __device__ __forceinline__ auto kf_ld(const T *p) -> decltype(kf_cvt(*p)) {
    return kf_cvt(*p);
}
template <typename T, typename R> __device__ __forceinline__ void kf_st(T *p, R v) { kf_pack(p, v); }
__device__ __forceinline__ void kf_note_clamp(unsigned *flag) {
    if (*(volatile unsigned *)flag == 0u)
        atomicOr(flag, 1u);
}

/* ---- vector loads and stores ---------------------------------------- */

template <int BYTES> struct alignas(BYTES >= 16 ? 16 : BYTES) kf_raw {
    unsigned char b[BYTES];
};

template <int BYTES> __device__ __forceinline__ void kf_raw_ld(const void *p, kf_raw<BYTES> &r) {
    if (BYTES >= 16) {
#pragma unroll
        for (int c = 0; c < BYTES / 16; c++)
            reinterpret_cast<uint4 *>(r.b)[c] = reinterpret_cast<const uint4 *>(p)[c];
    } else if (BYTES == 8) {
        *reinterpret_cast<uint2 *>(r.b) = *reinterpret_cast<const uint2 *>(p);
    } else if (BYTES == 4) {
        *reinterpret_cast<unsigned *>(r.b) = *reinterpret_cast<const unsigned *>(p);
    } else if (BYTES == 2) {
        *reinterpret_cast<unsigned short *>(r.b) = *reinterpret_cast<const unsigned short *>(p);
    } else {
        r.b[0] = *reinterpret_cast<const unsigned char *>(p);
    }
}
/* ---- streamed reads and the L2 ------------------------------------------
 * kf_stream_ef is set by the runtime after it loads the module (runtime/
 * cuda_exec.c, from the device: kf_cuda_device.stream_evict_first): 1 where
 * operands read once (kf_raw_ld_stream, kf_cp_row) should leave L2 first, 0
 * elsewhere (the constant starts at 0). Measured, 65536 x 4096 bf16:
 * evict-first made an H100 faster (layer_norm 0.391 against 0.400 ms, the
 * elementwise chain 0.400 against 0.414) and an H200 slower (0.298 against
 * 0.293, 0.297 against 0.290). One binary serves both: the choice is a
 * value, not code. */
extern "C" {
__constant__ int kf_stream_ef;
}
#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ unsigned long long kf_stream_policy() {
    unsigned long long p;
    if (kf_stream_ef)
        asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    else
        asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(p));
    return p;
}
#endif
/* kf_raw_ld for an operand read once: 16-byte pieces with the L2 policy above
 * (sm_80+). */
template <int BYTES> __device__ __forceinline__ void kf_raw_ld_stream(const void *p, kf_raw<BYTES> &r) {
#if __CUDA_ARCH__ >= 800
    if (BYTES >= 16) {
        const unsigned long long pol = kf_stream_policy();
#pragma unroll
        for (int c = 0; c < BYTES / 16; c++) {
            unsigned *w = reinterpret_cast<unsigned *>(r.b) + 4 * c;
            asm("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                : "l"(reinterpret_cast<const uint4 *>(p) + c), "l"(pol));
        }
        return;
    }
#endif
    kf_raw_ld(p, r);
}
template <int BYTES> __device__ __forceinline__ void kf_raw_st(void *p, const kf_raw<BYTES> &r) {
    if (BYTES >= 16) {
#pragma unroll
        for (int c = 0; c < BYTES / 16; c++)
            reinterpret_cast<uint4 *>(p)[c] = reinterpret_cast<const uint4 *>(r.b)[c];
    } else if (BYTES == 8) {
        *reinterpret_cast<uint2 *>(p) = *reinterpret_cast<const uint2 *>(r.b);
    } else if (BYTES == 4) {
        *reinterpret_cast<unsigned *>(p) = *reinterpret_cast<const unsigned *>(r.b);
    } else if (BYTES == 2) {
        *reinterpret_cast<unsigned short *>(p) = *reinterpret_cast<const unsigned short *>(r.b);
    } else {
        *reinterpret_cast<unsigned char *>(p) = r.b[0];
    }
}

template <int N, typename T, typename R> __device__ __forceinline__ void kf_ldv(const T *p, R *out) {
    kf_raw<N * (int)sizeof(T)> r;
    kf_raw_ld(p, r);
    const T *e = reinterpret_cast<const T *>(r.b);
#pragma unroll
    for (int k = 0; k < N; k++)
        out[k] = kf_cvt(e[k]);
}
template <int N, typename T, typename R> __device__ __forceinline__ void kf_stv(T *p, const R *in) {
    kf_raw<N * (int)sizeof(T)> r;
    T *e = reinterpret_cast<T *>(r.b);
#pragma unroll
    for (int k = 0; k < N; k++)
        kf_pack(&e[k], in[k]);
    kf_raw_st(p, r);
}

#if __CUDA_ARCH__ >= 800
/* bf16 stores round two floats per instruction (cvt.rn.bf16x2.f32, the same
 * rounding as kf_f32_to_bf16 twice). */
template <int N> __device__ __forceinline__ void kf_stv(kf_bf16 *p, const float *in) {
    kf_raw<N * 2> r;
    if (N % 2 == 0) {
        unsigned *w = reinterpret_cast<unsigned *>(r.b);
#pragma unroll
        for (int k = 0; k < N / 2; k++)
            asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w[k]) : "f"(in[2 * k + 1]), "f"(in[2 * k]));
    } else {
        kf_bf16 *e = reinterpret_cast<kf_bf16 *>(r.b);
#pragma unroll
        for (int k = 0; k < N; k++)
            kf_pack(&e[k], in[k]);
    }
    kf_raw_st(p, r);
}
#endif

__device__ __forceinline__ bool kf_aligned(const void *p, unsigned bytes) {
    return ((unsigned long long)p & (unsigned long long)(bytes - 1)) == 0;
}

/* ---- staging through shared memory (sm_80+: cp.async) ------------------
 * The row_warp_staged template (rowwise.cuh) copies rows global -> shared with
 * cp.async and reads them back with kf_lds. Addresses are 32-bit shared-window
 * addresses (__cvta_generic_to_shared). Only that template, chosen only for
 * sm_80 and later, uses these, and cp.async does not assemble below sm_80. */
#if __CUDA_ARCH__ >= 800
/* Bytes NB of a row (NB % 16 == 0, src and dst 16-byte aligned) in 16-byte
 * pieces: lane l copies pieces l, l + 32, ... (.cg: through L2 only, the row
 * is read once from memory). */
template <int NB> __device__ __forceinline__ void kf_cp_row(unsigned dst, const void *src, int lane) {
    static_assert(NB % 16 == 0, "rows are staged in 16-byte pieces");
    constexpr int N = NB / 16, PT = (N + 31) / 32;
    const unsigned long long pol = kf_stream_policy(); /* a staged row is read once */
#pragma unroll
    for (int q = 0; q < PT; q++) {
        const int t = lane + q * 32;
        if (t < N)
            asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(
                             dst + (unsigned)t * 16u),
                         "l"(static_cast<const char *>(src) + (long long)t * 16), "l"(pol)
                         : "memory");
    }
}
__device__ __forceinline__ void kf_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
/* Waits until at most N of this thread's committed groups are in flight. */
template <int N> __device__ __forceinline__ void kf_cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
/* The dynamic shared memory (every extern __shared__ array starts there). */
extern __shared__ __align__(16) unsigned char kf_dyn_smem[];
/* N consecutive elements of type T from shared address a (aligned to
 * min(16, N * sizeof(T))), converted as kf_ldv does. Ordinary loads through a
 * pointer into the dynamic shared memory: ordered after kf_cp_wait's memory
 * clobber, and free to be merged between a row's passes (nothing writes the
 * stage in between). The compiler then keeps the row in registers (167 for a
 * bf16 layer_norm of 4096); the ring already limits a block to 4 warps and an
 * SM to 2 blocks, which leaves 256 registers a thread. Reading the stage again
 * in every pass instead (volatile loads, 52 registers) ran 0.343 ms against
 * 0.312 on an H200 (65536 x 4096 bf16 layer_norm). */
template <int N, typename T, typename R> __device__ __forceinline__ void kf_lds(unsigned a, R *out) {
    constexpr int B = N * (int)sizeof(T);
    static_assert(B % 16 == 0 || B == 8 || B == 4 || B == 2 || B == 1, "a vector access");
    const unsigned char *p = kf_dyn_smem + (a - (unsigned)__cvta_generic_to_shared(kf_dyn_smem));
    kf_raw<B> r;
    kf_raw_ld(p, r);
    const T *e = reinterpret_cast<const T *>(r.b);
#pragma unroll
    for (int k = 0; k < N; k++)
        out[k] = kf_cvt(e[k]);
}
#endif

/* ---- bulk copies (sm_90+: cp.async.bulk) -------------------------------
 * The elementwise template's bulk path (elementwise.cuh, KF_BULK) moves whole
 * chunks between global and shared memory with the copy engine: one thread
 * issues a load of many kilobytes that completes on an mbarrier (the
 * transaction count is the bytes), and a store from shared memory that the
 * thread waits on by bulk group. Global and shared addresses and sizes are
 * multiples of 16 bytes. Only that path, chosen only for sm_90 and later,
 * uses these. */
#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned kf_sa(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
/* An mbarrier expecting one arrival per phase, visible to the copy engine. */
__device__ __forceinline__ void kf_mb_init(unsigned long long *m) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(kf_sa(m)) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
/* The one arrival of this phase, which then completes when `bytes` more have
 * landed. */
__device__ __forceinline__ void kf_mb_expect(unsigned long long *m, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(kf_sa(m)), "r"(bytes)
                 : "memory");
}
/* Waits for the phase of parity `parity` to complete. */
__device__ __forceinline__ void kf_mb_wait(unsigned long long *m, unsigned parity) {
    asm volatile("{\n.reg .pred p;\nkf_mb_wait_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra kf_mb_wait_%=;\n}\n" ::"r"(kf_sa(m)),
                 "r"(parity)
                 : "memory");
}
/* Global -> shared, `bytes` counted on mbarrier m, with the L2 policy for
 * streamed reads (the operand is read once). */
__device__ __forceinline__ void kf_bulk_ld(void *dst, const void *src, unsigned bytes,
                                           unsigned long long *m) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
                 "[%0], [%1], %2, [%3], %4;" ::"r"(kf_sa(dst)),
                 "l"(src), "r"(bytes), "r"(kf_sa(m)), "l"(kf_stream_policy())
                 : "memory");
}
/* Shared -> global, in this thread's current bulk group. Ordinary stores to
 * src must be ordered before it: kf_bulk_fence in each writing thread, then a
 * barrier. */
__device__ __forceinline__ void kf_bulk_st(void *dst, const void *src, unsigned bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst),
                 "r"(kf_sa(src)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void kf_bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
/* Waits until at most N of this thread's bulk groups still read shared memory. */
template <int N> __device__ __forceinline__ void kf_bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
/* Waits until all of this thread's bulk groups are complete. */
__device__ __forceinline__ void kf_bulk_wait_all() {
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
/* Orders this thread's ordinary shared-memory stores before a bulk store. */
__device__ __forceinline__ void kf_bulk_fence() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
#endif

/* ---- the ops: the reference evaluator's formulas ---------------------- */

__device__ __forceinline__ float kf_sigmoid(float x) {
    if (x >= 0.0f)
        return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}
__device__ __forceinline__ double kf_sigmoid(double x) {
    if (x >= 0.0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}
__device__ __forceinline__ float kf_neg(float x) { return -x; }
__device__ __forceinline__ double kf_neg(double x) { return -x; }
__device__ __forceinline__ float kf_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double kf_abs(double x) { return fabs(x); }
__device__ __forceinline__ float kf_exp(float x) { return expf(x); }
__device__ __forceinline__ double kf_exp(double x) { return exp(x); }
__device__ __forceinline__ float kf_log(float x) { return logf(x); }
__device__ __forceinline__ double kf_log(double x) { return log(x); }
__device__ __forceinline__ float kf_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double kf_sqrt(double x) { return sqrt(x); }
/* 1/sqrt, correctly rounded steps (rsqrtf is an approximation). */
__device__ __forceinline__ float kf_rsqrt(float x) { return 1.0f / sqrtf(x); }
__device__ __forceinline__ double kf_rsqrt(double x) { return 1.0 / sqrt(x); }
__device__ __forceinline__ float kf_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double kf_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float kf_erf(float x) { return erff(x); }
__device__ __forceinline__ double kf_erf(double x) { return erf(x); }
/* sinf/cosf, not the __sinf intrinsics: full range reduction, so a rotary
 * angle of thousands of radians keeps its accuracy. */
__device__ __forceinline__ float kf_sin(float x) { return sinf(x); }
__device__ __forceinline__ double kf_sin(double x) { return sin(x); }
__device__ __forceinline__ float kf_cos(float x) { return cosf(x); }
__device__ __forceinline__ double kf_cos(double x) { return cos(x); }
__device__ __forceinline__ float kf_relu(float x) { return x != x ? x : (x > 0.0f ? x : 0.0f); }
__device__ __forceinline__ double kf_relu(double x) { return x != x ? x : (x > 0.0 ? x : 0.0); }
/* float gelu: for x > 0 as x minus its small correction 0.5 x erfc(x / sqrt 2),
 * so that erfcf's few-ulp error near 2 (the 0.5 x erfc(-x / sqrt 2) form for
 * large x) cannot put the result an ulp below x where the reference's double
 * result rounds to x: sqrt(gelu(x) - x) was NaN against 0 (the CPU backend's
 * random graphs met it; it computes in double). Where erfc underflows, x. */
__device__ __forceinline__ float kf_gelu(float x) {
    const float t = erfcf(fabsf(x) * 0.70710678118654752440f);
    return x > 0.0f ? (t == 0.0f ? x : x - 0.5f * x * t) : 0.5f * x * t;
}
__device__ __forceinline__ double kf_gelu(double x) { return 0.5 * x * erfc(-x * 0.70710678118654752440); }
__device__ __forceinline__ float kf_gelu_tanh(float x) {
    float u = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
    return x * kf_sigmoid(2.0f * u);
}
__device__ __forceinline__ double kf_gelu_tanh(double x) {
    double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
    return x * kf_sigmoid(2.0 * u);
}
__device__ __forceinline__ float kf_silu(float x) { return x * kf_sigmoid(x); }
__device__ __forceinline__ double kf_silu(double x) { return x * kf_sigmoid(x); }
__device__ __forceinline__ float kf_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double kf_pow(double a, double b) { return pow(a, b); }
/* max/min: NaN in, NaN out (the reference returns a + b then). */
__device__ __forceinline__ float kf_max(float a, float b) { return a != a || b != b ? a + b : (a > b ? a : b); }
__device__ __forceinline__ double kf_max(double a, double b) { return a != a || b != b ? a + b : (a > b ? a : b); }
__device__ __forceinline__ float kf_min(float a, float b) { return a != a || b != b ? a + b : (a < b ? a : b); }
__device__ __forceinline__ double kf_min(double a, double b) { return a != a || b != b ? a + b : (a < b ? a : b); }
/* i32 arithmetic saturates, as the reference's stores do. */
__device__ __forceinline__ int kf_sat(long long v) {
    return v > 2147483647LL ? 2147483647 : v < -2147483647LL - 1 ? (int)(-2147483647 - 1) : (int)v;
}
__device__ __forceinline__ int kf_neg(int x) { return kf_sat(-(long long)x); }
__device__ __forceinline__ int kf_abs(int x) { return kf_sat(x < 0 ? -(long long)x : (long long)x); }
__device__ __forceinline__ int kf_add(int a, int b) { return kf_sat((long long)a + b); }
__device__ __forceinline__ int kf_sub(int a, int b) { return kf_sat((long long)a - b); }
__device__ __forceinline__ int kf_mul(int a, int b) { return kf_sat((long long)a * b); }
__device__ __forceinline__ int kf_max(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ int kf_min(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ float kf_add(float a, float b) { return a + b; }
__device__ __forceinline__ double kf_add(double a, double b) { return a + b; }
__device__ __forceinline__ float kf_sub(float a, float b) { return a - b; }
__device__ __forceinline__ double kf_sub(double a, double b) { return a - b; }
__device__ __forceinline__ float kf_mul(float a, float b) { return a * b; }
__device__ __forceinline__ double kf_mul(double a, double b) { return a * b; }
__device__ __forceinline__ float kf_div(float a, float b) { return a / b; }
/* i32: a repeat's coordinate divided by its count (a positive constant) */
__device__ __forceinline__ int kf_div(int a, int b) { return b ? a / b : 0; }
__device__ __forceinline__ double kf_div(double a, double b) { return a / b; }

/* ---- packed bf16 pairs --------------------------------------------------
 * add, sub and mul of two bf16 values, rounded to bf16, two elements per
 * instruction. The result is the float path's bit for bit: a bf16 product is
 * exact in float and a float sum rounds once more harmlessly (24 >= 2 * 8 + 2
 * bits), so kf_round_bf16(a op b) is the correctly rounded result, which is
 * what the bf16x2 instructions compute. The operands must hold bf16 values:
 * packing drops the low 16 bits, and unpacking is a shift, so a pack of an
 * unpack folds away and a chain of packed ops stays packed. sm_90 has
 * add/sub/mul.rn.bf16x2; sm_80 writes them as fma.rn.bf16x2 (a * b + -0,
 * a * 1 + b, b * -1 + a: one rounding each). */
__device__ __forceinline__ unsigned kf_pk_bf16(float lo, float hi) {
    return (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);
}
__device__ __forceinline__ float kf_lo_bf16(unsigned p) { return __uint_as_float(p << 16); }
__device__ __forceinline__ float kf_hi_bf16(unsigned p) { return __uint_as_float(p & 0xffff0000u); }
template <int OP> __device__ __forceinline__ unsigned kf_bop2(unsigned a, unsigned b) {
    unsigned d;
#if __CUDA_ARCH__ >= 900
    if (OP == 0)
        asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    else if (OP == 1)
        asm("sub.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    else
        asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
    if (OP == 0)
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(0x3f803f80u), "r"(b));
    else if (OP == 1)
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(b), "r"(0xbf80bf80u), "r"(a));
    else
        asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
#endif
    return d;
}
template <int OP> __device__ __forceinline__ float kf_bop1(float a, float b) {
    return kf_round_bf16(OP == 0 ? a + b : OP == 1 ? a - b : a * b);
}
template <int OP, int VV> __device__ __forceinline__ void kf_bf16x2(float *d, const float *a, const float *b) {
#pragma unroll
    for (int k = 0; k + 1 < VV; k += 2) {
        const unsigned r = kf_bop2<OP>(kf_pk_bf16(a[k], a[k + 1]), kf_pk_bf16(b[k], b[k + 1]));
        d[k] = kf_lo_bf16(r);
        d[k + 1] = kf_hi_bf16(r);
    }
    if (VV & 1)
        d[VV - 1] = kf_bop1<OP>(a[VV - 1], b[VV - 1]);
}

/* N bf16 values already exact in float (results of bf16 ops, loads), stored
 * without a conversion: the packing above, which folds into the bf16x2
 * results that produced them. */
template <int N> __device__ __forceinline__ void kf_stv_bf16x(kf_bf16 *p, const float *in) {
    if (N % 2 == 0) {
        kf_raw<N * 2> r;
        unsigned *w = reinterpret_cast<unsigned *>(r.b);
#pragma unroll
        for (int k = 0; k < N / 2; k++)
            w[k] = kf_pk_bf16(in[2 * k], in[2 * k + 1]);
        kf_raw_st(p, r);
    } else {
        kf_stv<N>(p, in);
    }
}

/* ---- reductions --------------------------------------------------------- */

/* NaN-propagating max (a row statistic: one NaN makes the row's max NaN). */
__device__ __forceinline__ float kf_max_nan(float a, float b) { return (a > b || a != a) ? a : b; }
__device__ __forceinline__ double kf_max_nan(double a, double b) { return (a > b || a != a) ? a : b; }

template <typename T> __device__ __forceinline__ T kf_warp_sum(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <typename T> __device__ __forceinline__ T kf_warp_max(T v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = kf_max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Block-wide sum/max over NWARPS warps; every thread gets the result.
 * `sh` holds 32 values; the call synchronizes twice. */
template <int NWARPS, typename T> __device__ __forceinline__ T kf_block_sum(T v, T *sh) {
    v = kf_warp_sum(v);
    if (NWARPS == 1)
        return v;
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0)
        sh[w] = v;
    __syncthreads();
    v = l < NWARPS ? sh[l] : (T)0;
    return kf_warp_sum(v);
}
template <int NWARPS, typename T> __device__ __forceinline__ T kf_block_max(T v, T *sh) {
    v = kf_warp_max(v);
    if (NWARPS == 1)
        return v;
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    __syncthreads();
    if (l == 0)
        sh[w] = v;
    __syncthreads();
    v = l < NWARPS ? sh[l] : (T)-KF_INF;
    return kf_warp_max(v);
}
