/*
 * kfuse.h -- the one public header of libkfuse.
 *
 * kfuse is a JIT kernel compiler and fusion engine. A caller builds a graph of
 * tensor operations through the builder calls below (or parses the .kfg text
 * format), and kfuse fuses, compiles and runs it. This header holds only
 * opaque handle types, enums, option structs and functions.
 *
 * Conventions (every call keeps them):
 *   - Every fallible call returns kf_status; KF_OK is 0. kf_status_str() names
 *     every status.
 *   - Handles are opaque. Destructors accept NULL.
 *   - Builder calls (kf_add, kf_matmul, ...) infer shape and dtype at once. A bad
 *     call returns NULL and records a sticky error on the graph, whose message
 *     names the op, the operand and the shapes; later calls that receive NULL
 *     return NULL without overwriting the first error. kf_graph_status() and
 *     kf_graph_error() read it. No call aborts or prints on its own.
 *   - A kf_ctx may be used from several threads at once; a kf_graph belongs to
 *     one thread while it is built.
 *   - Axes may be negative (counted from the end) wherever an axis is taken.
 */
#ifndef KFUSE_H
#define KFUSE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KF_BUILDING_SHARED) && defined(__GNUC__)
#define KF_API __attribute__((visibility("default")))
#else
#define KF_API
#endif

#define KF_VERSION_MAJOR 0
#define KF_VERSION_MINOR 1
#define KF_VERSION_PATCH 0

/* The largest rank a tensor may have. */
#define KF_MAX_RANK 8

/* ------------------------------------------------------------------------ */
/* Status                                                                     */
/* ------------------------------------------------------------------------ */

typedef enum kf_status {
    KF_OK = 0,
    KF_ERR_INVALID_ARGUMENT, /* NULL handle, bad flag, bad name, ... */
    KF_ERR_SHAPE,            /* shapes that do not agree */
    KF_ERR_DTYPE,            /* a dtype the op cannot take */
    KF_ERR_AXIS,             /* an axis or permutation out of range */
    KF_ERR_OUT_OF_MEMORY,    /* the context's allocator returned NULL */
    KF_ERR_PARSE,            /* .kfg text that does not parse */
    KF_ERR_VERIFY,           /* a graph that breaks an IR invariant */
    KF_ERR_NOT_FOUND,        /* a name (input, output) that does not exist */
    KF_ERR_UNSUPPORTED,      /* valid, but not supported by this build/target */
    KF_ERR_IO,               /* a file or stream error */
    KF_ERR_INTERNAL,         /* a kfuse bug: please report it */
    KF_ERR_BUSY,             /* the program is running (another thread, or another stream) */
    KF_STATUS_COUNT
} kf_status;

/* A short, stable description of a status ("out of memory"). Never NULL. */
KF_API const char *kf_status_str(kf_status status);

/* The library's version as "MAJOR.MINOR.PATCH". */
KF_API const char *kf_version(void);

/* ------------------------------------------------------------------------ */
/* Dtypes                                                                     */
/* ------------------------------------------------------------------------ */

typedef enum kf_dtype {
    KF_DTYPE_F32 = 0,
    KF_DTYPE_F16,
    KF_DTYPE_BF16,
    KF_DTYPE_F64,
    KF_DTYPE_I32,
    KF_DTYPE_BOOL, /* stored as one byte, 0 or 1 */
    KF_DTYPE_I64,  /* indices only: a graph input or constant read by gather */
    KF_DTYPE_COUNT
} kf_dtype;

/* "f32", "f16", "bf16", "f64", "i32", "bool", "i64"; "?" for an out-of-range value. */
KF_API const char *kf_dtype_name(kf_dtype dtype);
/* Bytes per element; 0 for an out-of-range value. */
KF_API size_t kf_dtype_size(kf_dtype dtype);

/* Round-to-nearest-even conversions between float and the 16-bit formats, as
 * the reference evaluator and the backends store them. */
KF_API uint16_t kf_f32_to_f16(float value);
KF_API float kf_f16_to_f32(uint16_t bits);
KF_API uint16_t kf_f32_to_bf16(float value);
KF_API float kf_bf16_to_f32(uint16_t bits);

/* ------------------------------------------------------------------------ */
/* Context                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct kf_ctx kf_ctx;
typedef struct kf_graph kf_graph;
typedef struct kf_tensor kf_tensor;

/* Allocator hooks. All three NULL means the C library's malloc/realloc/free.
 * Either all three are set or none is. `realloc` gets the old size as well, so
 * pool allocators need no header. A hook that fails returns NULL; kfuse then
 * returns KF_ERR_OUT_OF_MEMORY and leaks nothing. */
typedef struct kf_allocator {
    void *(*alloc)(void *user, size_t size);
    void *(*realloc)(void *user, void *ptr, size_t old_size, size_t new_size);
    void (*free)(void *user, void *ptr, size_t size);
    void *user;
} kf_allocator;

typedef enum kf_target {
    KF_TARGET_AUTO = 0, /* CUDA when a device is present, else the CPU */
    KF_TARGET_CUDA,
    KF_TARGET_CPU,
    KF_TARGET_COUNT
} kf_target;

/* Context flags (bitwise or). */
enum {
    KF_FLAG_NO_CACHE = 1u << 0,           /* never read or write the disk cache */
    KF_FLAG_CACHE_READ_ONLY = 1u << 1,    /* read the cache, never write it */
    KF_FLAG_CACHE_FAIL_ON_MISS = 1u << 2, /* a cache miss is an error, not a compile */
    KF_FLAG_NO_CUBLASLT = 1u << 3,        /* no cuBLASLt epilogues: kfuse's kernels apply them
                                             (GEMMs themselves still run in cuBLASLt until
                                             kfuse generates GEMM kernels) */
    KF_FLAG_CHECK_NUMERICS = 1u << 4,     /* each run also runs the reference evaluator and
                                             fails on a mismatch (slow: for debugging) */
    /* Debugging switches (the kfuse CLI sets each from the environment variable
     * named beside it; the library reads no environment variable). */
    KF_FLAG_DEBUG_PASSES = 1u << 5,    /* KF_DEBUG=1: the plan to stderr after each fusion pass */
    KF_FLAG_NO_CUDA_GRAPH = 1u << 6,   /* KF_CUDA_GRAPH=0: launch each kernel, no CUDA graph */
    KF_FLAG_CPU_KEEP_BUFFERS = 1u << 7, /* KF_CPU_NO_REUSE=1: every CPU intermediate keeps its
                                           own buffer (nothing is reused) */
    KF_FLAG_DUMP_LLVM_IR = 1u << 8,    /* KF_DUMP_IR=1: the CPU module's LLVM IR to stderr */
    KF_FLAG_CPU_TIMING = 1u << 9,      /* KF_CPU_TIMING=1: CPU compile phase times to stderr */
    KF_FLAG_UNFUSED_ATTENTION = 1u << 10, /* CUDA: every attention group runs unfused (two
                                             cuBLASLt GEMMs around a softmax kernel), also
                                             those the fused kernel takes (bf16/f16, head dim
                                             64 or 128), which by default run as one fused
                                             kernel (kf_attention_mode) */
    KF_FLAG_SPLIT_ROW_NORMS = 1u << 11,   /* plan a LayerNorm/RMSNorm on a GEMM output whose row is
                                             longer than one tile row (N > 256) into the GEMM's
                                             group, in the split row form (on CUDA: a measured
                                             choice of the generated GEMM + a row pass and cuBLASLt
                                             + the row-epilogue kernel); off, it is a row-wise
                                             kernel of its own. Off by default until its GPU
                                             numerics have all run (kfuse --split-row-norms) */
    KF_FLAG_GEMM_HEAD_EPILOGUE = 1u << 12, /* plan the elementwise consumer of a GEMM's head view
                                             (reshape [.., N] to [.., H, D], maybe a permute of
                                             M and H: a rotary embedding of q or k, slices and
                                             concats along D) into the GEMM's group, over the
                                             head view (on sm_90a the generated GEMM applies
                                             it on the accumulators, measured against
                                             cuBLASLt + an epilogue kernel). Off by default
                                             (kfuse --gemm-head-epilogue) */
    KF_FLAG_ALL_ = (1u << 13) - 1
};

/* How GEMM groups run on a CUDA device. */
typedef enum kf_gemm_mode {
    KF_GEMM_AUTO = 0,   /* the default: KF_GEMM_MEASURED (the generated kernel on sm_90a
                           against cuBLASLt, wherever the kernel takes the group; on sm_80 to
                           sm_89 cuBLASLt until the sm_80 kernel's GPU numerics have passed) */
    KF_GEMM_GENERATED,  /* kfuse's generated GEMM kernel (sm_90a: wgmma, TMA; sm_80 to sm_89:
                           mma.sync, cp.async; the whole epilogue in one kernel) wherever it
                           takes the group; cuBLASLt elsewhere, and the report says why */
    KF_GEMM_CUBLASLT,   /* cuBLASLt always */
    KF_GEMM_MEASURED,   /* both, timed once per device and shape (the winner is kept in the
                           cache, so a later process times nothing); the faster runs */
    KF_GEMM_SM80,       /* kfuse's sm_80 GEMM kernel (mma.sync, cp.async, the whole epilogue
                           in one kernel) wherever it takes the group, on any arch from 8.0
                           (also 9.x, where GENERATED would take the wgmma kernel: to test it);
                           cuBLASLt elsewhere, and the report says why */
    KF_GEMM_COUNT
} kf_gemm_mode;

/* How attention groups run on a CUDA device. */
typedef enum kf_attention_mode {
    KF_ATTENTION_AUTO = 0, /* the default: a query of at most 16 rows (decode) runs the
                              split-KV decode kernels; else on sm_90a the sm_90a kernel (TMA,
                              wgmma, warp-specialized) wherever it takes the group, else the
                              FA2 kernel (the report says why); the FA2 kernel on other archs;
                              unfused where none takes the group */
    KF_ATTENTION_SM90,     /* the same as AUTO (named for those who want to say it) */
    KF_ATTENTION_FA2,      /* the mma.sync kernel (sm_80 and later) wherever it takes the
                              group, also on sm_90a; else unfused */
    KF_ATTENTION_UNFUSED,  /* always unfused (as KF_FLAG_UNFUSED_ATTENTION) */
    KF_ATTENTION_DECODE,   /* the split-KV decode kernels (a kernel of partials over chunks of
                              the keys, spread over every SM, and a combine kernel; sm_80 and
                              later) wherever they take the group, whatever its query length
                              (AUTO takes them for 16 query rows or fewer); else as AUTO */
    KF_ATTENTION_COUNT
} kf_attention_mode;

typedef struct kf_options {
    kf_target target;      /* default KF_TARGET_AUTO */
    int device;            /* CUDA device ordinal, default 0 */
    const char *arch;      /* override, e.g. "sm_90a"; NULL = from the device */
    const char *cache_dir; /* NULL = $XDG_CACHE_HOME/kfuse, else ~/.cache/kfuse (the CLI:
                              $KF_CACHE_DIR first) */
    unsigned flags;        /* KF_FLAG_* */
    kf_allocator allocator;
    kf_gemm_mode gemm;     /* default KF_GEMM_AUTO */
    kf_attention_mode attention; /* default KF_ATTENTION_AUTO */
    /* Switches. The library reads no environment variable of its own: the kfuse
     * CLI maps the one named beside each field onto it. */
    const char *dump_dir;     /* KF_DUMP_DIR: every generated CUDA source is written here as
                                 KERNEL.ARCH.cu (and NVRTC's log, on a failed compile, as
                                 KERNEL.ARCH.log); NULL = nowhere */
    const char *cublaslt_lib; /* KF_CUBLASLT_LIB: the cuBLASLt library to open (that file only);
                                 NULL = libcublasLt.so.13, libcublasLt.so, then the build's
                                 toolkit's */
    int num_threads;          /* KF_NUM_THREADS: threads of the CPU target (at most 64),
                                 and the threads that compile a CUDA program's kernels
                                 at once; 0 = one per online CPU (for compiles, also
                                 at most one per 256 MiB of memory, and 32) */
    int cpu_opt_level;        /* KF_CPU_OPT: LLVM's -O level for the CPU target, 0-3
                                 (kf_options_init: 3; lower compiles faster, same results) */
    int tiered_compile;       /* KF_TIERED_COMPILE: the CUDA target's first compile in tiers.
                                 0 (kf_options_init): kf_compile compiles every side of each
                                 measured choice (a GEMM group's generated kernel and its
                                 cuBLASLt call) and times them before it returns. 1: a group
                                 whose choice is not in the cache yet runs its cuBLASLt side
                                 from the first run while its generated kernels compile on a
                                 background thread; the first run after they are ready times
                                 both sides, stores the choice in the cache and runs the winner
                                 from then on (its results' bits may change once, then; both
                                 sides meet the same tolerance). A warm cache: no difference.
                                 kf_program_destroy waits for the kernels NVRTC is compiling
                                 then: destroy programs before the process exits. */
    double choice_margin;     /* KF_CHOICE_MARGIN (`kfuse run --choice-margin F`): a measured
                                 choice (a GEMM group's generated kernel against its cuBLASLt
                                 call, each timed once per device) runs the cuBLASLt side only
                                 when it is faster than the generated side by more than this
                                 fraction of the generated side's time; within it the
                                 generated kernel runs, so a program none of whose cuBLASLt
                                 sides wins clearly never loads cuBLASLt (its dlopen and first
                                 use: ~160 ms a process on an H100).
                                 0 to below 1; 0: the faster side, however close. The cache
                                 keeps both times, so another margin picks again from them
                                 and times nothing (kf_options_init: 0, the faster side:
                                 the margin applies to each group alone, so where one
                                 group needs cuBLASLt anyway, a margin only slows the
                                 others). */
    double choice_load_bias;  /* KF_CHOICE_LOAD_BIAS (`kfuse run --choice-load-bias F`): a
                                 measured choice counts its generated side's time (1 + this)
                                 times before it picks (the margin above then applies to
                                 the counted times). Why: the choice times both sides at
                                 compile time, mostly on a GPU at rest and boost clocks,
                                 but a model's GEMMs run back to back under the power cap,
                                 where the generated kernels draw more power a cycle than
                                 cuBLASLt's and run 1-7% lower clocks (H100, 700 W, bench
                                 results ...-d8694bb-gm14: generated over cuBLASLt 0.6-7%
                                 worse sustained than at rest on 8 of 9 groups; 0.025 picks
                                 the sustained winner on all 9, 0 on 7; ch16's H100 runs,
                                 ...-ch16-*: the generated side 3.8-7.8% worse sustained
                                 than at rest on 7 of the 8 GEMM groups of the GPT-2 and
                                 LLaMA blocks, 0.025 right on 10 of 12 groups, 0 on 7).
                                 0 to below 1 (kf_options_init: 0.025; 0: the measured
                                 times as they are). The cache keeps the measured times,
                                 so another bias picks again from them and times nothing
                                 (the choice's cache key does not change). */
} kf_options;

/* Fills *options with the defaults above. */
KF_API void kf_options_init(kf_options *options);

/* Creates a context. `options` may be NULL for the defaults; the strings it
 * points to are copied. On failure *out is NULL. Errors: KF_ERR_INVALID_ARGUMENT
 * (NULL out, unknown flag, target, gemm or attention mode, negative device or num_threads, a
 * cpu_opt_level outside 0-3, half-set allocator, an
 * arch that is not sm_ and 2-3 digits with an optional 'a' or 'f', a choice_margin or
 * choice_load_bias outside [0, 1) or NaN),
 * KF_ERR_OUT_OF_MEMORY. */
KF_API kf_status kf_ctx_create(const kf_options *options, kf_ctx **out);
/* Destroys a context. Every graph created in it must be destroyed first. */
KF_API void kf_ctx_destroy(kf_ctx *ctx);

/* ------------------------------------------------------------------------ */
/* Graphs                                                                     */
/* ------------------------------------------------------------------------ */

/* Creates an empty graph in `ctx`. The graph owns every tensor built in it. */
KF_API kf_status kf_graph_create(kf_ctx *ctx, kf_graph **out);
KF_API void kf_graph_destroy(kf_graph *graph);

/* kf_graph_status(): the first builder error recorded on the graph (sticky:
 * KF_OK if none). kf_graph_error(): its message, or, while the graph has no
 * builder error, the message of the last failed kf_graph_verify / kf_graph_eval
 * ("" if none). Messages name the op, the operand and the shapes, and say what
 * to change. A NULL graph reads as KF_ERR_INVALID_ARGUMENT. */
KF_API kf_status kf_graph_status(const kf_graph *graph);
KF_API const char *kf_graph_error(const kf_graph *graph);

/* Checks every IR invariant (shapes, dtypes, operands, names, outputs) and
 * returns the first violation (its message through kf_graph_error(); not sticky).
 * A graph with no outputs fails. */
KF_API kf_status kf_graph_verify(kf_graph *graph);

/* Writes the canonical .kfg text of the graph. Parsing that text and printing
 * it again gives the same bytes. */
KF_API kf_status kf_graph_print(const kf_graph *graph, FILE *out);

/* Parses .kfg text (`len` bytes; the text need not be NUL-terminated) into a new
 * graph. On a parse error *out still holds a graph whose kf_graph_error() reads
 * "LINE:COL: expected ..."; destroy it either way. *out is NULL only when the
 * graph itself could not be allocated. */
KF_API kf_status kf_graph_parse(kf_ctx *ctx, const char *text, size_t len, kf_graph **out);

/* Number of inputs / outputs, and the i-th of each in creation order. */
KF_API size_t kf_graph_input_count(const kf_graph *graph);
KF_API kf_tensor *kf_graph_input(const kf_graph *graph, size_t i);
KF_API size_t kf_graph_output_count(const kf_graph *graph);
KF_API kf_tensor *kf_graph_output(const kf_graph *graph, size_t i);
/* The name of the i-th output (NULL when out of range). */
KF_API const char *kf_graph_output_name(const kf_graph *graph, size_t i);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                    */
/* ------------------------------------------------------------------------ */

KF_API kf_dtype kf_tensor_dtype(const kf_tensor *t);
KF_API int kf_tensor_rank(const kf_tensor *t);
/* The size of dimension `axis` (negative counts from the end); -1 if out of range. */
KF_API int64_t kf_tensor_dim(const kf_tensor *t, int axis);
KF_API int64_t kf_tensor_numel(const kf_tensor *t);
/* The tensor's name: an input's name, a name given by kf_tensor_set_name() or
 * the parser, or NULL. */
KF_API const char *kf_tensor_name(const kf_tensor *t);
/* Names a tensor (used by the printer). Names are identifiers, unique per graph. */
KF_API kf_status kf_tensor_set_name(kf_tensor *t, const char *name);

/* ------------------------------------------------------------------------ */
/* Builder: sources                                                           */
/* ------------------------------------------------------------------------ */

/* A graph input. `name` is an identifier ([A-Za-z_][A-Za-z0-9_]*), unique. */
KF_API kf_tensor *kf_input(kf_graph *g, const char *name, kf_dtype dtype, int rank,
                           const int64_t *dims);
/* A constant. `data` holds numel elements in the dtype's storage format
 * (f16/bf16 as uint16_t bits, bool as one byte); it is copied. */
KF_API kf_tensor *kf_constant(kf_graph *g, kf_dtype dtype, int rank, const int64_t *dims,
                              const void *data);
/* A rank-0 constant holding `value` converted to `dtype`. */
KF_API kf_tensor *kf_scalar(kf_graph *g, kf_dtype dtype, double value);
/* A tensor of the given shape whose elements hold their index along `axis`
 * (i32 or a float dtype). */
KF_API kf_tensor *kf_iota(kf_graph *g, kf_dtype dtype, int rank, const int64_t *dims, int axis);

/* ------------------------------------------------------------------------ */
/* Builder: elementwise                                                       */
/* ------------------------------------------------------------------------ */

/* Unary ops. neg and abs take f32/f16/bf16/f64/i32, the rest float dtypes only.
 * gelu is the erf form; gelu_tanh the tanh approximation; silu is x*sigmoid(x). */
KF_API kf_tensor *kf_neg(kf_graph *g, kf_tensor *x);
KF_API kf_tensor *kf_abs(kf_graph *g, kf_tensor *x);
KF_API kf_tensor *kf_exp(kf_graph *g, kf_tensor *x);
KF_API kf_tensor *kf_log(kf_graph *g, kf_tensor *x);
KF_API kf_tensor *kf_sqrt(kf_graph *g, kf_tensor *x);
KF_API kf_tensor *kf_rsqrt(kf_graph *g, kf_tensor *x);
KF_API kf_tensor *kf_tanh(kf_graph *g, kf_tensor *x);
KF_API kf_tensor *kf_sigmoid(kf_graph *g, kf_tensor *x);
KF_API kf_tensor *kf_relu(kf_graph *g, kf_tensor *x);
KF_API kf_tensor *kf_gelu(kf_graph *g, kf_tensor *x);
KF_API kf_tensor *kf_gelu_tanh(kf_graph *g, kf_tensor *x);
KF_API kf_tensor *kf_silu(kf_graph *g, kf_tensor *x);
/* erf(x); sin(x) and cos(x) in radians, with full range reduction (a rotary
 * embedding's angles reach thousands of radians). Float dtypes. */
KF_API kf_tensor *kf_erf(kf_graph *g, kf_tensor *x);
KF_API kf_tensor *kf_sin(kf_graph *g, kf_tensor *x);
KF_API kf_tensor *kf_cos(kf_graph *g, kf_tensor *x);
/* Converts to `dtype`: floats round to nearest even, float -> i32 truncates
 * toward zero and saturates (NaN -> 0), anything -> bool is (x != 0). */
KF_API kf_tensor *kf_cast(kf_graph *g, kf_tensor *x, kf_dtype dtype);

/* Binary ops with numpy broadcasting. Both operands have the same dtype (insert
 * a kf_cast otherwise). add/sub/mul/max/min take float dtypes and i32; div and
 * pow float dtypes. max/min propagate NaN. */
KF_API kf_tensor *kf_add(kf_graph *g, kf_tensor *a, kf_tensor *b);
KF_API kf_tensor *kf_sub(kf_graph *g, kf_tensor *a, kf_tensor *b);
KF_API kf_tensor *kf_mul(kf_graph *g, kf_tensor *a, kf_tensor *b);
KF_API kf_tensor *kf_div(kf_graph *g, kf_tensor *a, kf_tensor *b);
KF_API kf_tensor *kf_max(kf_graph *g, kf_tensor *a, kf_tensor *b);
KF_API kf_tensor *kf_min(kf_graph *g, kf_tensor *a, kf_tensor *b);
KF_API kf_tensor *kf_pow(kf_graph *g, kf_tensor *a, kf_tensor *b);
/* Comparisons, with broadcasting; the result is bool. eq/ne also take bool. */
KF_API kf_tensor *kf_eq(kf_graph *g, kf_tensor *a, kf_tensor *b);
KF_API kf_tensor *kf_ne(kf_graph *g, kf_tensor *a, kf_tensor *b);
KF_API kf_tensor *kf_lt(kf_graph *g, kf_tensor *a, kf_tensor *b);
KF_API kf_tensor *kf_le(kf_graph *g, kf_tensor *a, kf_tensor *b);
KF_API kf_tensor *kf_gt(kf_graph *g, kf_tensor *a, kf_tensor *b);
KF_API kf_tensor *kf_ge(kf_graph *g, kf_tensor *a, kf_tensor *b);
/* cond ? a : b elementwise, all three broadcast; cond is bool, a and b agree. */
KF_API kf_tensor *kf_where(kf_graph *g, kf_tensor *cond, kf_tensor *a, kf_tensor *b);
/* x broadcast to `dims` (numpy's broadcast_to, torch's expand): x's dims,
 * right-aligned, must each equal the target's or be 1; leading dims may be
 * added. It copies nothing where it fuses: consumers read x with a stride of 0
 * along the expanded dims. Any dtype. KF_ERR_SHAPE naming the dim otherwise. */
KF_API kf_tensor *kf_expand(kf_graph *g, kf_tensor *x, int rank, const int64_t *dims);
/* min(max(x, lo), hi) elementwise (float dtypes and i32), NaN propagating. Each
 * bound is first rounded to x's dtype; lo = -INFINITY or hi = INFINITY leaves
 * that side unbounded. KF_ERR_INVALID_ARGUMENT naming the bound when a bound is
 * NaN, when lo > hi, when both sides are unbounded, or when x is i32 and a
 * finite bound is not a whole number. */
KF_API kf_tensor *kf_clamp(kf_graph *g, kf_tensor *x, double lo, double hi);
/* x[..., start:stop:step, ...] along `axis` (Python's slicing rules): a
 * negative start or stop counts from the end, then both are clamped into
 * [0, dim]; pass stop = INT64_MAX for "to the end". step must be >= 1
 * (KF_ERR_INVALID_ARGUMENT); an empty result is refused (KF_ERR_SHAPE), as is
 * an axis out of range (KF_ERR_AXIS). Any dtype. Fused, it is index arithmetic
 * in its consumer's loads: no copy. */
KF_API kf_tensor *kf_slice(kf_graph *g, kf_tensor *x, int axis, int64_t start, int64_t stop,
                           int64_t step);
/* Every element of x `times` times along `axis` (numpy.repeat,
 * torch.repeat_interleave with a count): the result's dim is times x x's, its
 * element i along the axis is x's element i / times. times must be >= 1
 * (KF_ERR_INVALID_ARGUMENT); an axis out of range is KF_ERR_AXIS. Any dtype.
 * Fused, it is index arithmetic in its consumer's loads: no copy. A bool keep
 * map of tiles repeated along both score axes is a block-sparse attention
 * mask: the fused attention kernels skip the tiles it drops (README). */
KF_API kf_tensor *kf_repeat(kf_graph *g, kf_tensor *x, int axis, int64_t times);
/* The n >= 1 tensors xs[0..n) joined along `axis` (torch.cat): one dtype, one
 * rank, every other dim equal (KF_ERR_SHAPE naming the dim otherwise). n == 1
 * returns xs[0]. Fused, a consumer selects per element which source it reads. */
KF_API kf_tensor *kf_concat(kf_graph *g, int n, kf_tensor *const *xs, int axis);
/* Rows of `table` picked by `idx` along `axis` (index_select; an embedding
 * lookup with axis 0): the result's dims are table's before axis, then idx's,
 * then table's after axis. idx is i32 or i64 (KF_ERR_DTYPE otherwise). An index
 * outside [0, dim) is an error on the CPU target (the run fails naming it) and
 * clamped into range on the CUDA target (see the README). */
KF_API kf_tensor *kf_gather(kf_graph *g, kf_tensor *table, kf_tensor *idx, int axis);

/* ------------------------------------------------------------------------ */
/* Builder: reductions, normalizations, GEMM, layout                          */
/* ------------------------------------------------------------------------ */

/* Reductions over one axis; keepdim is 0 (drop the axis) or 1 (keep it as
 * size 1); any other value is KF_ERR_INVALID_ARGUMENT naming keepdim. sum,
 * max and min take float dtypes and i32, mean float dtypes; max and min
 * propagate NaN. */
KF_API kf_tensor *kf_reduce_sum(kf_graph *g, kf_tensor *x, int axis, int keepdim);
KF_API kf_tensor *kf_reduce_max(kf_graph *g, kf_tensor *x, int axis, int keepdim);
KF_API kf_tensor *kf_reduce_mean(kf_graph *g, kf_tensor *x, int axis, int keepdim);
KF_API kf_tensor *kf_reduce_min(kf_graph *g, kf_tensor *x, int axis, int keepdim);
/* log(sum(exp(x))) along `axis` (torch.logsumexp), float dtypes, keepdim as
 * above; computed as m + log(sum(exp(x - m))) with m the row's maximum, so no
 * exp overflows: a row whose maximum is +inf or -inf (every element -inf)
 * gives that maximum, a NaN anywhere gives NaN. The log-sum-exp of attention
 * scores is what a backward pass keeps beside the output: written over the
 * keys of a softmax's input that feeds an attention (of the scores, or of
 * their cast to f32), it is a second output of the attention kernel (README,
 * "The log-sum-exp of attention"). On CUDA over the last axis only: over
 * another axis compiling it for CUDA is KF_ERR_UNSUPPORTED. */
KF_API kf_tensor *kf_logsumexp(kf_graph *g, kf_tensor *x, int axis, int keepdim);
/* The i32 index along `axis` of the first maximum (of the first NaN, if the
 * row has one), like torch.argmax; float dtypes and i32; keepdim as above.
 * Every target, over any axis. */
KF_API kf_tensor *kf_argmax(kf_graph *g, kf_tensor *x, int axis, int keepdim);

/* Softmax along `axis` (float dtypes). */
KF_API kf_tensor *kf_softmax(kf_graph *g, kf_tensor *x, int axis);
/* log(softmax(x)) along `axis`, computed as (x - max) - log(sum exp(x - max))
 * (float dtypes). Fuses like softmax, but never into an attention kernel. */
KF_API kf_tensor *kf_log_softmax(kf_graph *g, kf_tensor *x, int axis);
/* (x - mean) / sqrt(var + eps) * weight + bias along `axis` (biased variance).
 * eps is finite and >= 0 (else KF_ERR_INVALID_ARGUMENT). weight and bias are
 * rank 1, of length x's size along `axis`, x's dtype. */
KF_API kf_tensor *kf_layer_norm(kf_graph *g, kf_tensor *x, kf_tensor *weight, kf_tensor *bias,
                                int axis, double eps);
/* x / sqrt(mean(x^2) + eps) * weight along `axis`; weight as for layer_norm. */
KF_API kf_tensor *kf_rms_norm(kf_graph *g, kf_tensor *x, kf_tensor *weight, int axis,
                              double eps);

/* Batched matrix product of a [..., M, K] and b [..., K, N] (after the optional
 * transposes of their last two dims); batch dims broadcast; both rank >= 2,
 * same float dtype; the result has that dtype. transpose_a and transpose_b are
 * 0 or 1; any other value is KF_ERR_INVALID_ARGUMENT naming the flag. */
KF_API kf_tensor *kf_matmul(kf_graph *g, kf_tensor *a, kf_tensor *b, int transpose_a,
                            int transpose_b);

/* Reshape to `dims` (one entry may be -1: inferred). The element count must match. */
KF_API kf_tensor *kf_reshape(kf_graph *g, kf_tensor *x, int rank, const int64_t *dims);
/* Reorders the dims: result dim i is x's dim perm[i]. */
KF_API kf_tensor *kf_permute(kf_graph *g, kf_tensor *x, const int *perm);
/* Swaps two axes (a permute). */
KF_API kf_tensor *kf_transpose(kf_graph *g, kf_tensor *x, int axis0, int axis1);

/* Marks `t` as a graph output under `name` (an identifier, unique among outputs). */
KF_API kf_status kf_output(kf_graph *g, const char *name, kf_tensor *t);

/* ------------------------------------------------------------------------ */
/* Reference evaluation                                                       */
/* ------------------------------------------------------------------------ */

/* A named host buffer: `size` bytes at `data`, in the dtype's storage format,
 * row-major and contiguous. */
typedef struct kf_binding {
    const char *name;
    void *data;
    size_t size;
} kf_binding;

/* Evaluates the graph with the reference evaluator: every op in double, each
 * result rounded to its dtype (round to nearest even) as it is stored. Every
 * graph input must be bound exactly once, by name, with the exact size; each
 * binding in `outputs` names a graph output and receives it. Errors:
 * KF_ERR_NOT_FOUND (unknown or missing name), KF_ERR_INVALID_ARGUMENT (wrong
 * size, NULL data), KF_ERR_OUT_OF_MEMORY, or the graph's own error. The message
 * is readable through kf_graph_error(); it does not make the graph's error sticky. */
KF_API kf_status kf_graph_eval(kf_graph *graph, const kf_binding *inputs, size_t n_inputs,
                               const kf_binding *outputs, size_t n_outputs);

/* The verdict on one output (kf_graph_check). Errors are normwise relative,
 * ||v - exact|| / ||exact||, where `exact` is the graph evaluated in f64 with
 * no intermediate rounding. */
typedef struct kf_check_result {
    double err;       /* of the output that was checked */
    double ref_err;   /* of kf_graph_eval's output: the reference's own error */
    double round_err; /* of the exact value rounded once to the output's dtype */
    double bound;     /* 2 * max(ref_err, fused_err, round_err) + floor: 1e-12 for f64
                         graphs, else 1e-5 (f32 arithmetic where the reference
                         uses double), plus u / sqrt(numel), u the unit
                         roundoff of the least precise dtype computed */
    int pass;         /* err <= bound; 0 for any NaN the reference does not have */
    double fused_err; /* of the reference with a GEMM's arithmetic: a matmul's
                         product unrounded into its elementwise epilogue (or,
                         where larger, the same with attention's Q.K^T product
                         rounded, as the unfused attention stores it); the
                         bound is 2 * max(ref_err, fused_err, round_err) + floor */
} kf_check_result;

/* Judges a backend's outputs (`outputs`: bindings as for kf_graph_eval, read,
 * not written; e.g. what kf_program_run produced from the same inputs). Each
 * output passes when its error against the exact value is at most twice the
 * reference evaluator's own error plus a small floor (the rule FlashAttention's
 * tests use): a kernel that keeps f32 between fused ops is as close to the
 * exact value as the reference, which rounds every op's result to its dtype,
 * so deep bf16 graphs give no false failures, while a real error (a wrong op,
 * a dropped term, a systematic ulp) lands beyond the bound. i32 and bool
 * outputs must equal the reference. results[i] receives the verdict on
 * outputs[i]. Returns KF_OK when every output was judged (pass or not);
 * errors as kf_graph_eval's, and KF_ERR_INVALID_ARGUMENT for NULL results. */
KF_API kf_status kf_graph_check(kf_graph *graph, const kf_binding *inputs, size_t n_inputs,
                                const kf_binding *outputs, size_t n_outputs,
                                kf_check_result *results);


/* ------------------------------------------------------------------------ */
/* Compiled programs                                                          */
/* ------------------------------------------------------------------------ */

typedef struct kf_program kf_program;

/* Plans, fuses and compiles `graph` for the context's target (KF_TARGET_AUTO
 * is CUDA when the driver sees the context's device, else the CPU). On CUDA
 * every generated kernel is compiled by NVRTC through the context's disk cache
 * (honouring KF_FLAG_NO_CACHE / CACHE_READ_ONLY / CACHE_FAIL_ON_MISS: a miss is
 * then KF_ERR_NOT_FOUND naming the kernel) and GEMMs run through cuBLASLt,
 * both opened at run time. The graph must verify; it is not modified. The
 * program keeps its own copy of the graph (shapes, names, constant data), so
 * the graph may be destroyed before the program, right after kf_compile.
 * On failure *out is NULL and the message is on the graph (kf_graph_error):
 * the graph's own error, KF_ERR_UNSUPPORTED (target not built into this
 * library -- the CPU target needs LLVM 19 at build time --, no CUDA driver,
 * device or cuBLASLt, or a plan the backend cannot lower), KF_ERR_INTERNAL (a kfuse or LLVM failure),
 * KF_ERR_OUT_OF_MEMORY. Compiling uses the context's allocator for kfuse's
 * own memory; LLVM allocates through its own. */
KF_API kf_status kf_compile(kf_ctx *ctx, kf_graph *graph, kf_program **out);

/* Runs the program once. Bindings follow kf_graph_eval: every graph input
 * bound exactly once by name with its exact size; each output binding names a
 * graph output (at most once) and receives it; outputs left unbound are
 * computed and dropped. Binding data are HOST pointers on every target: the
 * CUDA target copies the inputs to the device, runs, and copies the outputs
 * back before returning (device memory bound here is refused with
 * KF_ERR_INVALID_ARGUMENT naming the binding: see kf_program_run_device).
 * `stream` is a CUstream for the CUDA target (NULL: the program's own) and
 * ignored on the CPU. Input and output buffers must not overlap. One run at a
 * time per program (several programs may run at once): see "One stream at a
 * time" below. On failure the message is readable through
 * kf_program_error(). Errors: KF_ERR_INVALID_ARGUMENT, KF_ERR_NOT_FOUND,
 * KF_ERR_OUT_OF_MEMORY, KF_ERR_BUSY. */
KF_API kf_status kf_program_run(kf_program *program, const kf_binding *inputs, size_t n_inputs,
                                const kf_binding *outputs, size_t n_outputs, void *stream);

/* ---- Device-resident runs and caller-managed memory (CUDA target) ------ */

/* Runs the program on the caller's device memory, in place, on the caller's
 * stream. Each binding's `data` is a device pointer (a CUdeviceptr cast:
 * (void *)(uintptr_t)dptr) and `size` its tensor's exact byte count; the
 * rules of kf_program_run hold otherwise (every input once by name; inputs
 * and outputs must not overlap). The call enqueues the run on `stream` (a
 * CUstream; NULL is the legacy default stream) and returns: inputs are read
 * and outputs written in place, with no host copy, no synchronization and no
 * device allocation, so a run may be captured into the caller's CUDA graph
 * (cuStreamBeginCapture on `stream`, this call, cuStreamEndCapture): the
 * graph holds the program's kernels bound to these pointers; write new
 * values into the same buffers and replay it. The buffers must stay valid
 * until the work completes. An output whose bytes the program cannot write
 * in place (a graph input or constant as an output, a view of another
 * tensor, a second name of a bound output) is copied to its binding on the
 * stream after the kernels; outputs left unbound are computed into the
 * program's workspace and dropped. Host cost: a few microseconds plus one
 * cuPointerGetAttributes per binding; when a bound pointer differs from the
 * last run's, the kernels that use it get new arguments (and TMA
 * descriptors) first. KF_FLAG_CHECK_NUMERICS does not apply to these runs.
 *
 * Checked per binding (KF_ERR_INVALID_ARGUMENT, the message names the
 * binding and says what the pointer is): NULL; not 16-byte aligned (the
 * kernels' vector loads and tensor maps need it); not CUDA memory (a host
 * pointer), or page-locked host memory; memory of another CUDA context (the
 * program uses the device's primary context, the CUDA runtime's) or of
 * another device; an allocation that ends before the tensor does. Managed
 * memory is accepted. A driver without cuPointerGetAttributes leaves all
 * but the alignment unchecked.
 *
 * One stream at a time: the runs of a program share its workspace, so two
 * runs of one program must never be in flight at once. A run (of either
 * kind) on another stream than the program's last run is refused with
 * KF_ERR_BUSY while that run has not completed (synchronize it first, or
 * compile one program per stream); a run entered while another thread is in
 * a run of the same program is KF_ERR_BUSY too. Replays of a captured graph
 * are not tracked: do not replay one while another run of the program (or
 * another replay) is in flight.
 *
 * The CPU target: KF_ERR_UNSUPPORTED (its runs take host pointers). */
KF_API kf_status kf_program_run_device(kf_program *program, const kf_binding *inputs,
                                       size_t n_inputs, const kf_binding *outputs, size_t n_outputs,
                                       void *stream);

/* The device bytes a run needs besides the program's constants: staging
 * for host runs, intermediates (shared by liveness), scratch and cuBLASLt's
 * workspace. The program allocates this much at kf_compile; a caller may
 * hand it its own instead (kf_program_set_workspace). The CPU target:
 * KF_ERR_UNSUPPORTED. */
KF_API kf_status kf_program_workspace_size(const kf_program *program, size_t *bytes);

/* Every later run of the program uses the caller's device memory
 * `workspace` (a device pointer, `bytes` at least kf_program_workspace_size,
 * 256-byte aligned, checked like a device binding) as its workspace, and
 * the program frees its own. NULL goes back to the program's own (allocated
 * again). Waits for the program's last run to complete first. The caller
 * keeps the memory valid and untouched while runs of the program (and
 * replays of graphs that captured them) may use it. Errors:
 * KF_ERR_INVALID_ARGUMENT (naming what is wrong), KF_ERR_OUT_OF_MEMORY,
 * KF_ERR_UNSUPPORTED (the CPU target). */
KF_API kf_status kf_program_set_workspace(kf_program *program, void *workspace, size_t bytes);

/* Whether a gather index outside its axis was met, and clamped, by a run of
 * the program since the last call: *clamped is 1 (and the flag is cleared)
 * or 0. The CUDA target clamps such an index into [0, dim) (the row read is
 * the nearest one) and sets a flag word in device memory; no run waits to
 * read it. A host-pointer run (kf_program_run) reads it after its own
 * synchronization at no extra wait; for device-resident runs this call
 * first waits for `stream` (a CUstream, NULL: the legacy default stream) to
 * finish what it holds, so call it where your code synchronizes anyway (or
 * every N steps). A run replayed from a captured CUDA graph sets the same
 * flag. The CPU target never clamps (the run fails, naming the index):
 * *clamped is 0. Errors: KF_ERR_INVALID_ARGUMENT, KF_ERR_BUSY (a run is in
 * progress on another thread), KF_ERR_INTERNAL (the driver's message, in
 * kf_program_error). */
KF_API kf_status kf_program_index_clamps(kf_program *program, void *stream, int *clamped);

/* ---- end of device-resident runs ---------------------------------------- */

/* The message of the program's last failed call ("" if none). Never NULL. */
KF_API const char *kf_program_error(const kf_program *program);

/* The number of kernels the program launches per run (views are free). */
KF_API size_t kf_program_kernel_count(const kf_program *program);

KF_API void kf_program_destroy(kf_program *program);

typedef enum kf_report_format {
    KF_REPORT_TEXT = 0, /* a readable table */
    KF_REPORT_JSON,     /* schema "kfuse.report/2" (docs/report-schema.md) */
    KF_REPORT_FORMAT_COUNT
} kf_report_format;

/* Writes the fusion report of the program's plan: its kernel groups (kind,
 * kernel name, ops absorbed, inputs and outputs, bytes saved, estimated time)
 * and every edge that was not fused with its reason code, as `kfuse report`
 * prints it. The TEXT form then says, on CUDA, per group what runs where and
 * why (generated kernel and template, cuBLASLt with which native epilogue and
 * which leftover kernel, the attention fallback), the arena size and the
 * cache hits; on the CPU, that every group is LLVM-compiled host code.
 * KF_ERR_INVALID_ARGUMENT for a NULL argument or an unknown format, KF_ERR_IO
 * when the stream fails. */
KF_API kf_status kf_program_report(const kf_program *program, kf_report_format format, FILE *out);

/* ------------------------------------------------------------------------ */
/* Ahead-of-time compilation and the kernel cache                             */
/* ------------------------------------------------------------------------ */

/* What kf_aot did, summed over its archs. */
typedef struct kf_aot_summary {
    size_t kernels;  /* generated kernels the recipes name (the recipes' KERNEL steps) */
    size_t cached;   /* of which were in the cache already */
    size_t compiled; /* compiled by NVRTC and stored now */
    size_t failed;   /* did not generate, compile or store (the cache lacks them) */
    size_t groups;   /* kernel groups of the plan, per arch, summed */
    size_t library_steps; /* cuBLASLt steps, which need no kernel */
} kf_aot_summary;

/* Fills the context's kernel cache ahead of time, as `kfuse aot` does: plans
 * `graph` (a private copy; the graph is not modified) with the context's flags,
 * makes its CUDA recipes for each of the n_archs archs ("sm_80", "sm_90a", ...)
 * with the context's flags, GEMM and attention modes -- the recipes a program
 * compiled with this context on such a GPU runs -- and compiles every generated
 * kernel they name with NVRTC into the cache (options.cache_dir, else the
 * default). No GPU is needed: a program whose context points at that cache
 * (with KF_FLAG_CACHE_FAIL_ON_MISS, to be sure) then compiles nothing. With
 * options.dump_dir, every kernel's source is written there (KERNEL.ARCH.cu),
 * whether compiled now or found in the cache: a machine without a GPU reads
 * the kernels a program will run. `summary` (may be NULL) receives the counts. KF_OK only when every kernel is
 * in the cache; otherwise the first failure's status, its message on the graph
 * (kf_graph_error), and summary->failed counts every kernel the cache lacks.
 * Errors: KF_ERR_INVALID_ARGUMENT (NULL, no arch, an arch NVRTC does not know,
 * KF_FLAG_NO_CACHE or KF_FLAG_CACHE_READ_ONLY: nothing could be stored), the
 * planner's, KF_ERR_UNSUPPORTED (a recipe that cannot be made), KF_ERR_IO
 * (the cache, or a dump_dir that cannot be written), KF_ERR_INTERNAL (NVRTC),
 * KF_ERR_OUT_OF_MEMORY. */
KF_API kf_status kf_aot(kf_ctx *ctx, kf_graph *graph, const char *const *archs, size_t n_archs,
                        kf_aot_summary *summary);

/* A look at the context's kernel cache (options.cache_dir, else the default). */
typedef struct kf_cache_summary {
    size_t entries;     /* entries seen */
    uint64_t bytes;     /* their files' bytes */
    size_t corrupt;     /* kf_cache_verify_entries: corrupt entries (reported and removed) */
    size_t removed;     /* kf_cache_clear_entries: entries removed */
    char dir[512];      /* the directory (cut to fit) */
    char error[512];    /* why the call failed ("" when it did not) */
} kf_cache_summary;

/* Lists the cache as `kfuse cache ls` prints it: to `out` (NULL: nothing
 * printed) a header and one line per entry, least recently used first (key,
 * payload bytes, file bytes, last use in UTC); the counts in *summary. Reads
 * headers only and never creates the directory (one that does not exist is 0
 * entries). Errors (the message in summary->error): KF_ERR_INVALID_ARGUMENT,
 * KF_ERR_IO. */
KF_API kf_status kf_cache_list_entries(kf_ctx *ctx, FILE *out, kf_cache_summary *summary);
/* Reads every entry in full, as `kfuse cache verify` does: a corrupt one
 * (header, length, key or checksum wrong, or not a regular file of this user)
 * is written to `out` as "corrupt  KEY  PROBLEM", counted in summary->corrupt
 * and removed (the entry, never what a link points to). KF_OK even when some
 * were corrupt: read summary->corrupt. */
KF_API kf_status kf_cache_verify_entries(kf_ctx *ctx, FILE *out, kf_cache_summary *summary);
/* Removes every entry (`kfuse cache clear`); summary->removed counts them. */
KF_API kf_status kf_cache_clear_entries(kf_ctx *ctx, kf_cache_summary *summary);

#ifdef __cplusplus
}
#endif

#endif /* KFUSE_H */
