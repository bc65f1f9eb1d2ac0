/* ---- gemm_simt.cuh: the f32 / f64 GEMM template (FFMA / DFMA, sm_80 on) -----
 *
 * For the dtypes the tensor-core templates do not take: the reference
 * computes f32 and f64 products exactly in their own precision, so TF32 or
 * any lower-precision tensor path would not meet their tolerance. One block
 * of 256 threads per output tile of KF_BM x KF_BN, every thread a register
 * tile of KF_TM rows by 8 adjacent columns (KF_DUAL: 8 of the gate's and the
 * same 8 of the up projection's), multiplied with fused multiply-adds in the
 * operands' own precision.
 *
 *   Threads: KF_TX = KF_BN / 8 across the columns, KF_TY = 256 / KF_TX down
 *     the rows; thread (ty, tx) owns rows ty * KF_TM .. and columns
 *     tx * 8 .. of the tile. KF_TX is 8 or 16, so the 8 lanes of one phase
 *     of a 16-byte shared load share ty: A's reads are broadcasts.
 *   K steps of KF_BK: a ring of KF_STAGES stages in shared memory filled by
 *     cp.async (.ca: an element-wise copy reads its neighbours from L1), as
 *     in gemm_sm80.cuh: wait for the step's group, one barrier, issue step
 *     kt + STAGES - 1 into the stage freed, then the FMAs of step kt. A copy
 *     past an operand's extent copies nothing and fills zeros (src-size), so
 *     ragged M, N and K need no other test.
 *   A's tile is stored as A is: K-major A as [BM][BK] (each thread reads 16
 *     bytes of K values of each of its rows, then uses them over as many K
 *     steps), M-major A as [BK][BM]. B's tile is [BK][BN] (N-major B copied
 *     as it is, K-major B element by element, lanes along N so the shared
 *     stores meet no conflict). A copy is 16 bytes where the operand's rows
 *     and batch stride allow it (KF_A_VEC, KF_B_VEC), one element otherwise.
 *   B's 8 columns are read as 16-byte groups in a rotated order (slot s
 *     holds group (s + rot) % G): without it, 8 lanes of a phase reading
 *     32 or 64 bytes apart would meet 2- or 4-way bank conflicts. The
 *     epilogue undoes the rotation with selects.
 *   Epilogue from the registers: each of a thread's rows is one call of the
 *     group's kf_epi<8, AL> (cg_gemm_epi.c) on its 8 columns (KF_DUAL: both
 *     products); rows past M store nothing.
 *   A row epilogue (KF_ROW_EPI 1, f32, cg_gemm_epi.c: a norm or softmax of
 *     rows of N <= KF_BN, one column tile a row, so KF_BN may be 256 here:
 *     KF_TX 32, a warp a tile row): a tile row is held by KF_TX consecutive
 *     lanes of one warp, so its statistics need no shared memory: each
 *     thread puts kf_pre's x in place of its accumulators, takes its rows'
 *     partials over its 8 columns, and xor butterflies below KF_TX merge
 *     them (step A; then step B over x the same way); kf_epi then runs on x
 *     with the row's statistics. Every lane takes part (rows past M read
 *     row M - 1 and store nothing).
 *
 * The generator defines before this: KF_KERNEL, KF_PARAMS, KF_ARGS, KF_T
 * (float or double), KF_M, KF_N, KF_K, KF_BM, KF_BN (output columns of a
 * tile), KF_BK, KF_STAGES, KF_MINB (blocks an SM for __launch_bounds__), KF_A_KMAJOR, KF_B_KMAJOR, KF_LDA, KF_LDB
 * (elements between the stored rows), KF_SA, KF_SB (batch strides, 0 when
 * shared), KF_A_VEC, KF_B_VEC, and kf_epi / kf_epi_al; with KF_DUAL also
 * KF_LDB2, KF_SB2 (the second B's).
 */

#ifndef KF_DUAL
#define KF_DUAL 0 /* a SwiGLU pair: two B operands against one A */
#endif
#define KF_THREADS 256
#define KF_V (16 / (int)sizeof(KF_T)) /* elements of a 16-byte copy */
#define KF_TX (KF_BN / 8)
#define KF_TY (KF_THREADS / KF_TX)
#define KF_TM (KF_BM / KF_TY)
#define KF_G (8 / KF_V) /* 16-byte groups of a thread's 8 columns */
#define KF_BT (KF_BN * (KF_DUAL ? 2 : 1)) /* B tile columns (the pair: gate's, then up's) */
#define KF_A_TILE (KF_BM * KF_BK)
#define KF_B_TILE (KF_BT * KF_BK)
#define KF_STAGE (KF_A_TILE + KF_B_TILE) /* elements */
#define KF_TILES_M ((KF_M + KF_BM - 1) / KF_BM)
#define KF_TILES_N ((KF_N + KF_BN - 1) / KF_BN)
#define KF_KT ((KF_K + KF_BK - 1) / KF_BK)
#define KF_RASTER 8

static_assert(KF_TX == 8 || KF_TX == 16 || (KF_ROW_EPI && KF_TX == 32),
              "a phase of 8 lanes shares its tile row (32: a row epilogue's 256 columns)");
#if KF_ROW_EPI
static_assert(sizeof(KF_T) == 4 && !KF_DUAL, "the row epilogue in the tile: f32, no pair");
static_assert(KF_N <= KF_BN, "a row epilogue's rows are whole in one column tile");
#endif
static_assert(KF_TM * KF_TY == KF_BM && KF_TM >= 1, "whole rows a thread");
static_assert(KF_BK % KF_V == 0, "K steps of whole 16-byte groups");
static_assert(KF_A_KMAJOR || KF_TM % KF_V == 0 || (KF_TM == 2 && sizeof(KF_T) == 4),
              "an M-major A's column of a thread is whole loads");

/* Copies `bytes` (4, 8 or 16) from global src to shared dst, the first
 * `fill` of them read and the rest zeros (fill 0: nothing read). */
template <int BYTES>
__device__ __forceinline__ void kf_sm_cp(unsigned dst, const KF_T *src, int fill) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(dst), "l"(src), "n"(BYTES),
                 "r"(fill)
                 : "memory");
}

/* The copies of an R x C tile (rows P elements apart in shared memory, at
 * dst) from an operand whose element (r, c) is base[(r0 + r) * ld + c0 + c]
 * inside rows x cols; VEC: 16-byte copies (ld, base and c0 aligned for
 * them). */
template <int R, int C, int P, bool VEC>
__device__ __forceinline__ void kf_sm_rows(unsigned dst, const KF_T *base, long long ld,
                                           long long r0, long long c0, long long rows,
                                           long long cols, int tid) {
    constexpr int W = VEC ? KF_V : 1, N = R * C / W;
#pragma unroll
    for (int i = 0; i < (N + KF_THREADS - 1) / KF_THREADS; i++) {
        const int q = tid + i * KF_THREADS, r = q / (C / W), c = (q % (C / W)) * W;
        if (N % KF_THREADS == 0 || q < N) {
            const long long gr = r0 + r, gc = c0 + c;
            long long left = gr < rows ? cols - gc : 0;
            left = left < 0 ? 0 : (left > W ? W : left);
            const KF_T *src = left ? base + gr * ld + gc : base;
            kf_sm_cp<W * (int)sizeof(KF_T)>(dst + (unsigned)(r * P + c) * (unsigned)sizeof(KF_T),
                                           src, (int)left * (int)sizeof(KF_T));
        }
    }
}

/* The copies of an R x C tile (rows P elements apart in shared memory) from
 * an operand stored transposed: element (r, c) at base[(c0 + c) * ld + r0 +
 * r], one element a copy, consecutive threads along c. */
template <int R, int C, int P>
__device__ __forceinline__ void kf_sm_cols(unsigned dst, const KF_T *base, long long ld,
                                           long long r0, long long c0, long long rows,
                                           long long cols, int tid) {
    constexpr int N = R * C;
#pragma unroll
    for (int i = 0; i < (N + KF_THREADS - 1) / KF_THREADS; i++) {
        const int q = tid + i * KF_THREADS, r = q / C, c = q % C;
        if (N % KF_THREADS == 0 || q < N) {
            const long long gr = r0 + r, gc = c0 + c;
            const bool in = gr < rows && gc < cols;
            const KF_T *src = in ? base + gc * ld + gr : base;
            kf_sm_cp<(int)sizeof(KF_T)>(dst + (unsigned)(r * P + c) * (unsigned)sizeof(KF_T), src,
                                        in ? (int)sizeof(KF_T) : 0);
        }
    }
}

/* KF_BN columns of B's tile (at shared address sb, rows KF_BT apart) from
 * one B (pb, its stored rows ld apart). */
__device__ __forceinline__ void kf_sm_b(unsigned sb, const KF_T *pb, long long ld, long long n0,
                                        long long k0, int tid) {
    if (KF_B_KMAJOR) /* stored [N][K]: element (k, n) at pb[n * ld + k] */
        kf_sm_cols<KF_BK, KF_BN, KF_BT>(sb, pb, ld, k0, n0, KF_K, KF_N, tid);
    else
        kf_sm_rows<KF_BK, KF_BN, KF_BT, KF_B_VEC>(sb, pb, ld, k0, n0, KF_K, KF_N, tid);
}

/* The copies of K step kt of tile (mb, nb) into the stage at shared address
 * st (pb2: the pair's second B). */
__device__ __forceinline__ void kf_sm_stage(unsigned st, const KF_T *pa, const KF_T *pb,
                                            const KF_T *pb2, int mb, int nb, int kt, int tid) {
    const long long m0 = (long long)mb * KF_BM, n0 = (long long)nb * KF_BN,
                    k0 = (long long)kt * KF_BK;
    if (KF_A_KMAJOR) /* [BM][BK] */
        kf_sm_rows<KF_BM, KF_BK, KF_BK, KF_A_VEC>(st, pa, KF_LDA, m0, k0, KF_M, KF_K, tid);
    else /* [BK][BM] */
        kf_sm_rows<KF_BK, KF_BM, KF_BM, KF_A_VEC>(st, pa, KF_LDA, k0, m0, KF_K, KF_M, tid);
    const unsigned sb = st + KF_A_TILE * (unsigned)sizeof(KF_T);
#if KF_DUAL
    /* the pair: rows of [gate's BN | up's BN] */
    kf_sm_b(sb, pb, KF_LDB, n0, k0, tid);
    kf_sm_b(sb + KF_BN * (unsigned)sizeof(KF_T), pb2, KF_LDB2, n0, k0, tid);
#else
    (void)pb2;
    kf_sm_b(sb, pb, KF_LDB, n0, k0, tid);
#endif
}

/* 16 bytes of shared memory (s aligned) into d[0, 16 / size), one load;
 * kf_sm_ld8: 8 bytes. */
__device__ __forceinline__ void kf_sm_ld16(float *d, const float *s) {
    const float4 v = *reinterpret_cast<const float4 *>(s);
    d[0] = v.x;
    d[1] = v.y;
    d[2] = v.z;
    d[3] = v.w;
}
__device__ __forceinline__ void kf_sm_ld16(double *d, const double *s) {
    const double2 v = *reinterpret_cast<const double2 *>(s);
    d[0] = v.x;
    d[1] = v.y;
}
__device__ __forceinline__ void kf_sm_ld8(float *d, const float *s) {
    const float2 v = *reinterpret_cast<const float2 *>(s);
    d[0] = v.x;
    d[1] = v.y;
}
__device__ __forceinline__ void kf_sm_ld8(double *d, const double *s) { d[0] = *s; }
__device__ __forceinline__ float kf_sm_fma(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double kf_sm_fma(double a, double b, double c) { return fma(a, b, c); }

/* The FMAs of one stage: acc[i][j] += A(row i) . B(column j); the B slots
 * are the rotated groups (bo[s]: the element offset of slot s in a B row). */
__device__ __forceinline__ void kf_sm_math(KF_T (&acc)[KF_TM][8],
#if KF_DUAL
                                           KF_T (&acc1)[KF_TM][8],
#endif
                                           const KF_T *sa, const int (&bo)[KF_G], int ty) {
    const KF_T *sb = sa + KF_A_TILE;
#if KF_A_KMAJOR
#pragma unroll
    for (int kk = 0; kk < KF_BK; kk += KF_V) {
        KF_T a[KF_TM][KF_V];
#pragma unroll
        for (int i = 0; i < KF_TM; i++)
            kf_sm_ld16(a[i], sa + (ty * KF_TM + i) * KF_BK + kk);
#pragma unroll
        for (int v = 0; v < KF_V; v++) {
            const KF_T *brow = sb + (kk + v) * KF_BT;
            KF_T bv[8];
#pragma unroll
            for (int s = 0; s < KF_G; s++)
                kf_sm_ld16(bv + s * KF_V, brow + bo[s]);
#if KF_DUAL
            KF_T bu[8];
#pragma unroll
            for (int s = 0; s < KF_G; s++)
                kf_sm_ld16(bu + s * KF_V, brow + KF_BN + bo[s]);
#endif
#pragma unroll
            for (int i = 0; i < KF_TM; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    acc[i][j] = kf_sm_fma(a[i][v], bv[j], acc[i][j]);
#if KF_DUAL
                    acc1[i][j] = kf_sm_fma(a[i][v], bu[j], acc1[i][j]);
#endif
                }
        }
    }
#else
#pragma unroll
    for (int k = 0; k < KF_BK; k++) {
        KF_T a[KF_TM];
        const KF_T *acol = sa + k * KF_BM + ty * KF_TM;
        if (KF_TM * sizeof(KF_T) >= 16) {
#pragma unroll
            for (int i = 0; i < KF_TM; i += KF_V)
                kf_sm_ld16(a + i, acol + i);
        } else { /* 2 floats */
            kf_sm_ld8(a, acol);
        }
        const KF_T *brow = sb + k * KF_BT;
        KF_T bv[8];
#pragma unroll
        for (int s = 0; s < KF_G; s++)
            kf_sm_ld16(bv + s * KF_V, brow + bo[s]);
#if KF_DUAL
        KF_T bu[8];
#pragma unroll
        for (int s = 0; s < KF_G; s++)
            kf_sm_ld16(bu + s * KF_V, brow + KF_BN + bo[s]);
#endif
#pragma unroll
        for (int i = 0; i < KF_TM; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                acc[i][j] = kf_sm_fma(a[i], bv[j], acc[i][j]);
#if KF_DUAL
                acc1[i][j] = kf_sm_fma(a[i], bu[j], acc1[i][j]);
#endif
            }
    }
#endif
}

/* Row i of a thread's tile in column order: slot s of the registers holds
 * column group (s + rot) % G, so group g is slot (g - rot) % G. */
__device__ __forceinline__ void kf_sm_unrotate(const KF_T (&x)[8], KF_T (&y)[8], int rot) {
#pragma unroll
    for (int g = 0; g < KF_G; g++) {
        const int sl = (g - rot + KF_G) % KF_G;
#pragma unroll
        for (int e = 0; e < KF_V; e++) {
            KF_T v = x[e];
#pragma unroll
            for (int s = 1; s < KF_G; s++)
                v = s == sl ? x[s * KF_V + e] : v;
            y[g * KF_V + e] = v;
        }
    }
}

#if KF_ROW_EPI
/* The row epilogue of a thread's rows (see the file's head): x in column
 * order replaces the accumulators, then the rows' statistics, then kf_epi. */
template <bool AL>
__device__ __forceinline__ void kf_sm_epi(KF_T (&acc)[KF_TM][8], int b, int mb, int nb, int ty,
                                          int tx, int rot, KF_PARAMS) {
    const long long c = (long long)nb * KF_BN + tx * 8;
    const long long left = KF_N - c;
    const int nv = left < 0 ? 0 : left > 8 ? 8 : (int)left; /* columns inside N */
    kf_gm_rs st[KF_TM];
#pragma unroll
    for (int i = 0; i < KF_TM; i++) {
        const long long r = (long long)mb * KF_BM + ty * KF_TM + i;
        KF_T v[8];
        kf_sm_unrotate(acc[i], v, rot);
        kf_pre<8, AL>(v, (long long)b, r < KF_M ? r : KF_M - 1, c, KF_ARGS, acc[i]);
        kf_gm_rs_init(st[i]);
        kf_gm_rs_add_a<8>(st[i], acc[i], nv);
        kf_gm_rs_lanes_a<KF_TX>(st[i]); /* the KF_TX lanes holding the row */
    }
#if KF_RS_B
#pragma unroll
    for (int i = 0; i < KF_TM; i++) {
        kf_gm_rs_add_b<8>(st[i], acc[i], nv);
        kf_gm_rs_lanes_b<KF_TX>(st[i]);
    }
#endif
#pragma unroll
    for (int i = 0; i < KF_TM; i++) {
        const long long r = (long long)mb * KF_BM + ty * KF_TM + i;
        const bool ok = r < KF_M;
        const kf_gm_rst rst = kf_gm_rs_final(st[i]);
        kf_epi<8, AL>(acc[i], (long long)b, ok ? r : KF_M - 1, c, ok, KF_ARGS, nullptr, &rst);
    }
}
#else
template <bool AL>
__device__ __forceinline__ void kf_sm_epi(const KF_T (&acc)[KF_TM][8],
#if KF_DUAL
                                          const KF_T (&acc1)[KF_TM][8],
#endif
                                          int b, int mb, int nb, int ty, int tx, int rot,
                                          KF_PARAMS) {
    const long long c = (long long)nb * KF_BN + tx * 8;
#pragma unroll
    for (int i = 0; i < KF_TM; i++) {
        const long long r = (long long)mb * KF_BM + ty * KF_TM + i;
        const bool ok = r < KF_M;
        KF_T v[8];
        kf_sm_unrotate(acc[i], v, rot);
#if KF_DUAL
        KF_T v1[8];
        kf_sm_unrotate(acc1[i], v1, rot);
        kf_epi<8, AL>(v, v1, (long long)b, ok ? r : KF_M - 1, c, ok, KF_ARGS);
#else
        kf_epi<8, AL>(v, (long long)b, ok ? r : KF_M - 1, c, ok, KF_ARGS);
#endif
    }
}
#endif

extern "C" __global__ void __launch_bounds__(KF_THREADS, KF_MINB)
    KF_KERNEL(const KF_T *__restrict__ kf_pa, const KF_T *__restrict__ kf_pb,
#if KF_DUAL
              const KF_T *__restrict__ kf_pb2,
#endif
              KF_PARAMS) {
    extern __shared__ __align__(128) unsigned char kf_dsmem[];
    KF_SETUP();
    const KF_T *ring = reinterpret_cast<const KF_T *>(kf_dsmem);
    const unsigned ring_s = (unsigned)__cvta_generic_to_shared(kf_dsmem);
    const int tid = threadIdx.x, tx = tid % KF_TX, ty = tid / KF_TX;
    /* the swizzled raster: KF_RASTER tile rows at a time, down then across */
    int mb, nb;
    {
        const int t = blockIdx.x, span = KF_RASTER * KF_TILES_N, g = t / span;
        const int first = g * KF_RASTER;
        const int rows = KF_TILES_M - first < KF_RASTER ? KF_TILES_M - first : KF_RASTER;
        const int r = t - g * span;
        mb = first + r % rows;
        nb = r / rows;
    }
    const int b = blockIdx.z;
    const KF_T *pa = kf_pa + (long long)b * KF_SA;
    const KF_T *pb = kf_pb + (long long)b * KF_SB;
#if KF_DUAL
    const KF_T *pb2 = kf_pb2 + (long long)b * KF_SB2;
#else
    const KF_T *pb2 = pb;
#endif
    /* the rotation: 8 / G threads cover one 128-byte row of banks */
    const int rot = (tx / (8 / KF_G)) % KF_G;
    int bo[KF_G];
#pragma unroll
    for (int s = 0; s < KF_G; s++)
        bo[s] = tx * 8 + ((s + rot) % KF_G) * KF_V;

    KF_T acc[KF_TM][8];
#if KF_DUAL
    KF_T acc1[KF_TM][8];
#endif
#pragma unroll
    for (int i = 0; i < KF_TM; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) {
            acc[i][j] = 0;
#if KF_DUAL
            acc1[i][j] = 0;
#endif
        }

#pragma unroll
    for (int s = 0; s < KF_STAGES - 1; s++) {
        if (s < KF_KT)
            kf_sm_stage(ring_s + s * KF_STAGE * (unsigned)sizeof(KF_T), pa, pb, pb2, mb, nb, s,
                        tid);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
#pragma unroll 1
    for (int kt = 0; kt < KF_KT; kt++) {
        asm volatile("cp.async.wait_group %0;" ::"n"(KF_STAGES - 2) : "memory");
        __syncthreads();
        const int nk = kt + KF_STAGES - 1;
        if (nk < KF_KT)
            kf_sm_stage(ring_s + (nk % KF_STAGES) * KF_STAGE * (unsigned)sizeof(KF_T), pa, pb,
                        pb2, mb, nb, nk, tid);
        asm volatile("cp.async.commit_group;" ::: "memory");
        kf_sm_math(acc,
#if KF_DUAL
                   acc1,
#endif
                   ring + (kt % KF_STAGES) * KF_STAGE, bo, ty);
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");

#if KF_DUAL
    if (kf_epi_al(KF_ARGS))
        kf_sm_epi<true>(acc, acc1, b, mb, nb, ty, tx, rot, KF_ARGS);
    else
        kf_sm_epi<false>(acc, acc1, b, mb, nb, ty, tx, rot, KF_ARGS);
#else
    if (kf_epi_al(KF_ARGS))
        kf_sm_epi<true>(acc, b, mb, nb, ty, tx, rot, KF_ARGS);
    else
        kf_sm_epi<false>(acc, b, mb, nb, ty, tx, rot, KF_ARGS);
#endif
}
