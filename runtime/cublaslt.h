/*
 * cublaslt.h -- GEMMs through cuBLASLt, opened with dlopen at first use.
 *
 * Like the driver (runtime/cuda.h), cuBLASLt is never linked: libkfuse loads,
 * and the CPU target runs, on a machine without it. The library is looked up
 * as the file the context names (kf_options.cublaslt_lib: that file only),
 * else "libcublasLt.so.13" / "libcublasLt.so" on the loader's path, then the
 * file the build found in the toolkit (KF_CUBLASLT_PATH).
 * The few types and constants used are declared here, ABI-compatible with
 * cublasLt.h (tests/test_cublaslt.c checks them against the toolkit's header
 * when it is there), so this layer builds without the toolkit.
 *
 * Conventions. kfuse's matrices are row-major; cuBLASLt is column-major. A
 * row-major C[M,N] = A[M,K] B[K,N] is computed as the column-major
 * C^T[N,M] = B^T A^T, so B is cuBLASLt's "A" and A its "B". An operand is
 * described by the strides of its logical (after-transpose) matrix: a row
 * stride and a column stride, one of which must be 1 (else the caller copies
 * it first); that choice becomes cuBLASLt's transpose flag.
 *
 * Precision: f32 accumulate and f32 scale for f32/f16/bf16 (CUBLAS_COMPUTE_32F:
 * no TF32, so f32 results meet the f32 tolerance), f64 for f64.
 *
 * Epilogues (cuBLASLt's order of operations, per output element):
 *     D = act(alpha * (A.B) + beta * C + bias[n])
 * kfuse uses alpha = 1 and beta in {0, 1} (C is the residual). act is relu or
 * cuBLASLt's GELU, which is the tanh approximation (kfuse's gelu_tanh, NOT the
 * erf gelu). Which graph epilogues map onto this exactly is decided by the
 * executor (runtime/cuda_exec.c), not here.
 *
 * A kf_blt holds a handle, a workspace and a cache of configured matmuls (the
 * descriptors and the heuristic's algorithm per shape): one per program, used
 * by one run at a time.
 */
#ifndef KF_RUNTIME_CUBLASLT_H
#define KF_RUNTIME_CUBLASLT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"
#include "runtime/cache.h"
#include "runtime/cuda.h"

/* The default workspace cuBLASLt may use (the heuristic is told this much). */
#define KF_BLT_WORKSPACE_BYTES ((size_t)32 << 20)

typedef enum kf_blt_epilogue {
    KF_BLT_EPI_NONE = 0, /* D = A.B + beta C */
    KF_BLT_EPI_RELU,     /* D = relu(A.B + beta C) */
    KF_BLT_EPI_GELU,     /* D = gelu_tanh(A.B + beta C) */
    KF_BLT_EPI_BIAS,     /* D = A.B + beta C + bias */
    KF_BLT_EPI_RELU_BIAS,
    KF_BLT_EPI_GELU_BIAS,
    KF_BLT_EPI_COUNT
} kf_blt_epilogue;

/* "none", "relu", "gelu", "bias", "relu_bias", "gelu_bias". */
const char *kf_blt_epilogue_name(kf_blt_epilogue e);
/* The epilogue with a bias added (NONE -> BIAS, RELU -> RELU_BIAS, ...). */
kf_blt_epilogue kf_blt_epilogue_with_bias(kf_blt_epilogue e);

/* A logical row-major matrix [rows, cols] in device memory, batch-strided. */
typedef struct kf_blt_operand {
    kf_cu_deviceptr ptr;
    int64_t row_stride, col_stride; /* in elements; one of them must be 1 */
    int64_t batch_stride;           /* elements between batches; 0 broadcasts */
} kf_blt_operand;

/* One (batched) matmul: D[b] = epi(A[b] . B[b] + beta C[b] + bias). All of A,
 * B, C, D and the bias hold `dtype`. */
typedef struct kf_blt_gemm {
    kf_dtype dtype;
    int64_t m, n, k, batch;
    kf_blt_operand a, b; /* logical [m, k] and [k, n] */
    kf_blt_operand c;    /* logical [m, n]; ptr 0 (or beta 0) when there is none */
    kf_blt_operand d;    /* logical [m, n]; col_stride must be 1 */
    double beta;         /* 0 or 1 */
    kf_blt_epilogue epilogue;
    kf_cu_deviceptr bias; /* n elements, when the epilogue has a bias */
    const char *what;     /* names the GEMM in messages (the group's kernel name) */
} kf_blt_gemm;

typedef struct kf_blt kf_blt;

/* True when `op` can be described to cuBLASLt (one unit stride, the other
 * at least the matrix's extent along it). Used to decide on a copy first. */
bool kf_blt_operand_ok(const kf_blt_operand *op, int64_t rows, int64_t cols);

/* Opens cuBLASLt (dlopen + dlsym of every entry point) without touching a
 * device: works on a machine with no driver. Errors: KF_ERR_UNSUPPORTED (no
 * library, or one lacking an entry point), KF_ERR_OUT_OF_MEMORY. `lib` NULL:
 * the lookup order above. */
kf_status kf_blt_library_check(const char *lib, char *path_out, size_t path_size, char *err);

/* Creates a kf_blt for `dev` (the library `lib` is opened -- NULL: the lookup
 * order above --, a handle created on the device's context, the workspace
 * allocated lazily). */
kf_status kf_blt_create(const kf_mem *mem, const kf_cuda_device *dev, const char *lib, kf_blt **out,
                        char *err);
void kf_blt_destroy(kf_blt *lt);

/* Opening the library (dlopen + dlsym, tens of milliseconds for cuBLASLt's
 * size) needs no device, so it can overlap the driver's and the device's
 * start-up: kf_blt_preload_start begins it on a thread of its own, and
 * kf_blt_create_preloaded takes the result (waiting for it first). The
 * thread touches nothing but the loader; kf_blt_preload_finish waits for it
 * and frees the preload whether or not a kf_blt took the library (which,
 * like every kf_blt's, stays open: reference-counted by the loader). *out
 * is NULL when no thread could be started: kf_blt_create_preloaded then
 * opens the library itself. Errors: KF_ERR_INVALID_ARGUMENT. */
typedef struct kf_blt_preload kf_blt_preload;
kf_status kf_blt_preload_start(const kf_mem *mem, const char *lib, kf_blt_preload **out);
/* Waits for the thread and frees `pre` (NULL: nothing). Returns the
 * milliseconds the thread spent opening the library. */
double kf_blt_preload_finish(kf_blt_preload *pre);
/* kf_blt_create, with the library from `pre` (NULL: opened here, as
 * kf_blt_create does); `pre` is finished and freed either way, and its
 * thread's milliseconds go to *thread_ms (may be NULL; 0 without `pre`). */
kf_status kf_blt_create_preloaded(const kf_mem *mem, const kf_cuda_device *dev, const char *lib,
                                  kf_blt_preload *pre, double *thread_ms, kf_blt **out, char *err);
/* cuBLASLt's version (cublasLtGetVersion), e.g. 130100. */
size_t kf_blt_version(const kf_blt *lt);

/* Runs one matmul on `stream`. The first call for a shape builds the
 * descriptors and asks the heuristic (cached after). Errors:
 * KF_ERR_UNSUPPORTED when cuBLASLt has no algorithm for it (the message says
 * which GEMM and epilogue; the caller may retry with KF_BLT_EPI_NONE),
 * KF_ERR_INVALID_ARGUMENT, KF_ERR_INTERNAL (cuBLASLt's status name and string). */
kf_status kf_blt_matmul(kf_blt *lt, const kf_blt_gemm *g, kf_cu_stream stream, char *err);

/* Gives cuBLASLt the caller's workspace (`bytes` at `ptr`, device memory of
 * the kf_blt's device, at least KF_BLT_WORKSPACE_BYTES) instead of one it
 * allocates lazily: kf_blt_matmul then never allocates, so a matmul can be
 * captured into a CUDA graph. The kf_blt does not own it (destroy does not
 * free it); a workspace it allocated itself before is freed now. ptr 0 goes
 * back to the lazy one. KF_ERR_INVALID_ARGUMENT when bytes is too small. */
kf_status kf_blt_set_workspace(kf_blt *lt, kf_cu_deviceptr ptr, size_t bytes, char *err);

/* Whether cuBLASLt has an algorithm for `g` (asks the heuristic once; cached). */
bool kf_blt_supported(kf_blt *lt, const kf_blt_gemm *g);

/* Keeps the heuristic's algorithms in `cache` (NULL: none), keyed on the
 * GEMM's shape, strides, alignments and epilogue, the workspace limit, the
 * library's version and `device` (a string naming the device and driver),
 * so a later process takes them from there instead of asking the heuristic
 * (cuBLASLt documents its algorithm struct as serializable for reuse with
 * the same library version). A record that does not unpack, or an algorithm
 * the library refuses at its first matmul, is replaced by the heuristic's.
 * `cache` must outlive the kf_blt. */
void kf_blt_set_cache(kf_blt *lt, kf_cache *cache, const char *device);
/* How many plans took their algorithm from the cache, and how many times the
 * heuristic was asked. */
void kf_blt_algo_counts(const kf_blt *lt, uint32_t *cached, uint32_t *heuristics);

/* Where a kf_blt's start-up went, in milliseconds (the report's
 * "cublaslt_ms", bench/warm_start's JSON). */
typedef struct kf_blt_timing {
    double dlopen_ms;       /* dlopen: mapping, relocating and the library's static
                               initializers (on the preload thread when there was one) */
    double dlsym_ms;        /* resolving its entry points */
    double wait_ms;         /* the caller blocked on the preload thread */
    double create_ms;       /* the device's context made current + cublasLtCreate */
    double plans_ms;        /* descriptors and layouts of every plan */
    double algo_load_ms;    /* algorithm records read from the cache */
    double heuristic_ms;    /* cublasLtMatmulAlgoGetHeuristic calls */
    uint32_t refused;       /* cached algorithms the library refused at their first matmul */
} kf_blt_timing;
/* lt's timings (all zero for NULL). */
void kf_blt_timings(const kf_blt *lt, kf_blt_timing *out);

/* The cache entry of one algorithm: "kfltalg1", the workspace it needs
 * (uint64), then cuBLASLt's 64-byte cublasLtMatmulAlgo_t, in host order. */
#define KF_BLT_ALGO_WORDS 8
#define KF_BLT_ALGO_RECORD_BYTES (16 + 8 * KF_BLT_ALGO_WORDS)
/* Writes the record of `algo` into out; returns its length. */
size_t kf_blt_algo_record_pack(const uint64_t algo[KF_BLT_ALGO_WORDS], uint64_t workspace,
                               unsigned char out[KF_BLT_ALGO_RECORD_BYTES]);
/* Reads a record: false (nothing written) unless it has the length and tag
 * and a workspace within KF_BLT_WORKSPACE_BYTES. Whether the algorithm fits
 * a GEMM the library says at its first matmul (kf_blt_matmul). */
bool kf_blt_algo_record_unpack(const void *data, size_t len, uint64_t algo[KF_BLT_ALGO_WORDS],
                               uint64_t *workspace);
/* The cache key of g's algorithm for cuBLASLt `version` on `device` (the
 * string kf_blt_set_cache was given): false only when g's description does
 * not fit the key's text. Another device, driver or library version gives
 * another key, so a foreign record is never found. */
bool kf_blt_algo_key(const kf_blt_gemm *g, size_t version, const char *device, kf_cache_key *key);

#endif /* KF_RUNTIME_CUBLASLT_H */
