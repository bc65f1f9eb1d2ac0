/*
 * cublaslt.c -- cuBLASLt through dlopen (the contract is in cublaslt.h).
 *
 *   kf_blt_create: dlopen (env, soname, toolkit path) -> dlsym every entry
 *     point -> cublasLtCreate on the device's context (the dlopen and dlsym
 *     possibly done already on a thread of kf_blt_preload_start's)
 *   kf_blt_matmul: find or build the plan for this shape (matmul descriptor,
 *     four layouts, the heuristic's best algorithm) -> set the bias pointer ->
 *     cublasLtMatmul on the caller's stream with the kf_blt's workspace
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/cublaslt.h"

#include <inttypes.h>

/* ------------------------------------------------------------------------ */
/* The ABI subset (values from cublasLt.h / cublas_api.h / library_types.h)  */
/* ------------------------------------------------------------------------ */

typedef int kf_blt_status; /* cublasStatus_t: 0 is CUBLAS_STATUS_SUCCESS */
typedef struct kf_blt_handle_st *kf_blt_handle;
typedef struct kf_blt_desc_st *kf_blt_desc;
typedef struct kf_blt_layout_st *kf_blt_layout;
typedef struct kf_blt_pref_st *kf_blt_pref;
typedef struct {
    uint64_t data[8];
} kf_blt_algo;
typedef struct {
    kf_blt_algo algo;
    size_t workspace_size;
    kf_blt_status state;
    float waves_count;
    int reserved[4];
} kf_blt_heuristic;

enum {
    LT_SUCCESS = 0,
    LT_NOT_SUPPORTED = 15,
    /* cudaDataType_t */
    LT_R_32F = 0,
    LT_R_64F = 1,
    LT_R_16F = 2,
    LT_R_16BF = 14,
    /* cublasComputeType_t */
    LT_COMPUTE_32F = 68,
    LT_COMPUTE_64F = 70,
    /* cublasOperation_t */
    LT_OP_N = 0,
    LT_OP_T = 1,
    /* cublasLtMatmulDescAttributes_t */
    LT_DESC_TRANSA = 3,
    LT_DESC_TRANSB = 4,
    LT_DESC_EPILOGUE = 7,
    LT_DESC_BIAS_POINTER = 8,
    /* cublasLtMatrixLayoutAttribute_t */
    LT_LAYOUT_BATCH_COUNT = 5,
    LT_LAYOUT_STRIDED_BATCH_OFFSET = 6,
    /* cublasLtMatmulPreferenceAttributes_t */
    LT_PREF_MAX_WORKSPACE_BYTES = 1,
    LT_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    LT_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    LT_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    LT_PREF_MIN_ALIGNMENT_D_BYTES = 8,
    /* cublasLtEpilogue_t */
    LT_EPI_DEFAULT = 1,
    LT_EPI_RELU = 2,
    LT_EPI_BIAS = 4,
    LT_EPI_RELU_BIAS = 6,
    LT_EPI_GELU = 32,
    LT_EPI_GELU_BIAS = 36,
};

#define KF_BLT_FUNCS(X)                                                                             \
    X(size_t, GetVersion, "cublasLtGetVersion", (void))                                            \
    X(const char *, GetStatusName, "cublasLtGetStatusName", (kf_blt_status s))                      \
    X(const char *, GetStatusString, "cublasLtGetStatusString", (kf_blt_status s))                  \
    X(kf_blt_status, Create, "cublasLtCreate", (kf_blt_handle * h))                                  \
    X(kf_blt_status, Destroy, "cublasLtDestroy", (kf_blt_handle h))                                  \
    X(kf_blt_status, DescCreate, "cublasLtMatmulDescCreate",                                        \
      (kf_blt_desc * d, int compute, int scale_type))                                               \
    X(kf_blt_status, DescDestroy, "cublasLtMatmulDescDestroy", (kf_blt_desc d))                      \
    X(kf_blt_status, DescSet, "cublasLtMatmulDescSetAttribute",                                     \
      (kf_blt_desc d, int attr, const void *buf, size_t size))                                      \
    X(kf_blt_status, LayoutCreate, "cublasLtMatrixLayoutCreate",                                    \
      (kf_blt_layout * l, int type, uint64_t rows, uint64_t cols, int64_t ld))                      \
    X(kf_blt_status, LayoutDestroy, "cublasLtMatrixLayoutDestroy", (kf_blt_layout l))                \
    X(kf_blt_status, LayoutSet, "cublasLtMatrixLayoutSetAttribute",                                 \
      (kf_blt_layout l, int attr, const void *buf, size_t size))                                    \
    X(kf_blt_status, PrefCreate, "cublasLtMatmulPreferenceCreate", (kf_blt_pref * p))                \
    X(kf_blt_status, PrefDestroy, "cublasLtMatmulPreferenceDestroy", (kf_blt_pref p))                \
    X(kf_blt_status, PrefSet, "cublasLtMatmulPreferenceSetAttribute",                               \
      (kf_blt_pref p, int attr, const void *buf, size_t size))                                      \
    X(kf_blt_status, Heuristic, "cublasLtMatmulAlgoGetHeuristic",                                   \
      (kf_blt_handle h, kf_blt_desc d, kf_blt_layout a, kf_blt_layout b, kf_blt_layout c,              \
       kf_blt_layout dd, kf_blt_pref p, int requested, kf_blt_heuristic *results, int *returned))    \
    X(kf_blt_status, Matmul, "cublasLtMatmul",                                                      \
      (kf_blt_handle h, kf_blt_desc d, const void *alpha, const void *a, kf_blt_layout al,            \
       const void *b, kf_blt_layout bl, const void *beta, const void *c, kf_blt_layout cl, void *dd, \
       kf_blt_layout dl, const kf_blt_algo *algo, void *ws, size_t ws_size, void *stream))

typedef struct kf_blt_lib {
    void *dl;
    double dlopen_ms, dlsym_ms; /* what opening it took */
#define KF_BLT_FIELD(ret, field, sym, params) ret(*field) params;
    KF_BLT_FUNCS(KF_BLT_FIELD)
#undef KF_BLT_FIELD
} kf_blt_lib;

/* One configured matmul: everything that depends on the shape. */
typedef struct kf_blt_plan {
    /* the key */
    kf_dtype dtype;
    int64_t m, n, k, batch;
    int64_t a_rs, a_cs, a_bs, b_rs, b_cs, b_bs, c_rs, c_bs, d_rs, d_bs;
    bool has_c;
    kf_blt_epilogue epilogue;
    unsigned align[4];
    /* the value */
    kf_status status; /* KF_OK, or KF_ERR_UNSUPPORTED (no algorithm) */
    kf_blt_desc desc;
    kf_blt_layout la, lb, lc, ld;
    kf_blt_algo algo;
    size_t workspace;
    bool algo_cached; /* algo came from the disk cache, not this process's heuristic */
} kf_blt_plan;

struct kf_blt {
    kf_mem mem;
    const kf_cuda_device *dev;
    kf_blt_lib lib;
    kf_blt_handle handle;
    kf_cu_deviceptr workspace;
    size_t workspace_bytes;
    bool workspace_borrowed; /* kf_blt_set_workspace: the caller's, not freed here */
    kf_blt_plan *plans;
    uint32_t n_plans, cap_plans;
    kf_cache *cache;          /* kf_blt_set_cache: the heuristic's algorithms kept there */
    char cache_device[256];   /* the device part of their keys */
    uint32_t algos_cached;    /* plans whose algorithm came from the cache */
    uint32_t heuristics;      /* heuristic calls */
    kf_blt_timing timing;     /* where its milliseconds went (kf_blt_timings) */
};

static double lt_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

const char *kf_blt_epilogue_name(kf_blt_epilogue e) {
    static const char *const names[KF_BLT_EPI_COUNT] = {"none", "relu",      "gelu",
                                                       "bias", "relu_bias", "gelu_bias"};
    return (unsigned)e < KF_BLT_EPI_COUNT ? names[e] : "?";
}

kf_blt_epilogue kf_blt_epilogue_with_bias(kf_blt_epilogue e) {
    switch (e) {
    case KF_BLT_EPI_NONE:
        return KF_BLT_EPI_BIAS;
    case KF_BLT_EPI_RELU:
        return KF_BLT_EPI_RELU_BIAS;
    case KF_BLT_EPI_GELU:
        return KF_BLT_EPI_GELU_BIAS;
    default:
        return e;
    }
}

static int lt_epilogue(kf_blt_epilogue e) {
    static const int map[KF_BLT_EPI_COUNT] = {LT_EPI_DEFAULT, LT_EPI_RELU,      LT_EPI_GELU,
                                             LT_EPI_BIAS,    LT_EPI_RELU_BIAS, LT_EPI_GELU_BIAS};
    return map[e];
}

static bool lt_has_bias(kf_blt_epilogue e) {
    return e == KF_BLT_EPI_BIAS || e == KF_BLT_EPI_RELU_BIAS || e == KF_BLT_EPI_GELU_BIAS;
}

/* ------------------------------------------------------------------------ */
/* Loading                                                                    */
/* ------------------------------------------------------------------------ */

#ifndef KF_CUBLASLT_PATH
#define KF_CUBLASLT_PATH ""
#endif

/* Opens the library in the documented order; the path that worked goes to
 * `path` (may be NULL). */
static void *lt_dlopen(const char *lib, char *path, size_t path_size, char *why, size_t why_size) {
    const char *tries[4] = {NULL, NULL, NULL, NULL};
    int n = 0;
    if (lib) {
        tries[n++] = lib;
    } else {
        tries[n++] = "libcublasLt.so.13";
        tries[n++] = "libcublasLt.so";
        if (KF_CUBLASLT_PATH[0])
            tries[n++] = KF_CUBLASLT_PATH;
    }
    why[0] = 0;
    for (int i = 0; i < n; i++) {
        void *h = dlopen(tries[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            if (path)
                snprintf(path, path_size, "%s", tries[i]);
            return h;
        }
        if (!why[0]) {
            const char *e = dlerror();
            snprintf(why, why_size, "%s", e ? e : "dlopen failed");
        }
    }
    return NULL;
}

static kf_status lt_lib_open(kf_blt_lib *L, const char *lib, char *path, size_t path_size,
                             char *err) {
    memset(L, 0, sizeof *L);
    char why[256];
    double t0 = lt_now_ms();
    L->dl = lt_dlopen(lib, path, path_size, why, sizeof why);
    double t1 = lt_now_ms();
    L->dlopen_ms = t1 - t0;
    if (!L->dl)
        return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                    "cuBLASLt not found (%s); install the CUDA toolkit's libcublasLt, put its "
                    "directory on LD_LIBRARY_PATH, or name the file in kf_options.cublaslt_lib "
                    "(KF_CUBLASLT_LIB for the kfuse CLI)",
                    why);
    const char *missing = NULL;
#define KF_BLT_RESOLVE(ret, field, sym, params)                                                     \
    do {                                                                                           \
        void *p = dlsym(L->dl, sym);                                                               \
        if (!p && !missing && strcmp(sym, "cublasLtGetStatusName") != 0 &&                         \
            strcmp(sym, "cublasLtGetStatusString") != 0)                                           \
            missing = sym;                                                                         \
        memcpy(&L->field, &p, sizeof p);                                                           \
    } while (0);
    KF_BLT_FUNCS(KF_BLT_RESOLVE)
#undef KF_BLT_RESOLVE
    L->dlsym_ms = lt_now_ms() - t1;
    if (missing) {
        dlclose(L->dl);
        L->dl = NULL;
        return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                    "the cuBLASLt library has no %s: it is too old for kfuse (needs CUDA 11.4 "
                    "or later)",
                    missing);
    }
    return KF_OK;
}

kf_status kf_blt_library_check(const char *lib, char *path_out, size_t path_size, char *err) {
    kf_blt_lib L;
    /* The handle stays open (reference-counted, as every kf_blt's is): the
     * library's static initializers allocate, and unloading it would orphan
     * that memory. */
    return lt_lib_open(&L, lib, path_out, path_size, err);
}

static kf_status lt_check(const kf_blt *lt, kf_blt_status s, const char *call, const char *what,
                          char *err) {
    if (s == LT_SUCCESS)
        return KF_OK;
    const char *name = lt->lib.GetStatusName ? lt->lib.GetStatusName(s) : NULL;
    const char *str = lt->lib.GetStatusString ? lt->lib.GetStatusString(s) : NULL;
    return kf_msg_set(err, s == LT_NOT_SUPPORTED ? KF_ERR_UNSUPPORTED : KF_ERR_INTERNAL,
                "%s (GEMM '%s'): %s%s%s (cuBLASLt status %d)", call, what ? what : "?",
                name ? name : "", str ? ": " : "", str ? str : "", s);
}

/* ------------------------------------------------------------------------ */
/* Preloading: the library opened on a thread of its own                     */
/* ------------------------------------------------------------------------ */

struct kf_blt_preload {
    kf_mem mem;
    pthread_t thread;
    bool running; /* the thread is not joined yet */
    char *lib;    /* the caller's name, copied (NULL: the lookup order) */
    kf_blt_lib L; /* the thread's result: valid when st is KF_OK */
    kf_status st;
    char err[KF_MSG_MAX];
    double ms; /* the thread's time */
};

static void *lt_preload_main(void *arg) {
    kf_blt_preload *p = arg;
    double t0 = lt_now_ms();
    p->st = lt_lib_open(&p->L, p->lib, NULL, 0, p->err);
    p->ms = lt_now_ms() - t0;
    return NULL;
}

kf_status kf_blt_preload_start(const kf_mem *mem, const char *lib, kf_blt_preload **out) {
    if (!mem || !out)
        return KF_ERR_INVALID_ARGUMENT;
    *out = NULL;
    kf_blt_preload *p = kf_mem_calloc(mem, 1, sizeof *p);
    if (!p)
        return KF_OK; /* no preload: kf_blt_create_preloaded opens it itself */
    p->mem = *mem;
    if (lib) {
        size_t n = strlen(lib) + 1;
        p->lib = kf_mem_alloc(mem, n);
        if (!p->lib) {
            kf_mem_free(mem, p, sizeof *p);
            return KF_OK;
        }
        memcpy(p->lib, lib, n);
    }
    if (pthread_create(&p->thread, NULL, lt_preload_main, p) != 0) {
        if (p->lib)
            kf_mem_free(mem, p->lib, strlen(p->lib) + 1);
        kf_mem_free(mem, p, sizeof *p);
        return KF_OK;
    }
    p->running = true;
    *out = p;
    return KF_OK;
}

/* Waits for the thread; the preload stays allocated. */
static void lt_preload_join(kf_blt_preload *p) {
    if (p->running) {
        pthread_join(p->thread, NULL);
        p->running = false;
    }
}

double kf_blt_preload_finish(kf_blt_preload *pre) {
    if (!pre)
        return 0;
    lt_preload_join(pre);
    double ms = pre->ms;
    kf_mem m = pre->mem;
    if (pre->lib)
        kf_mem_free(&m, pre->lib, strlen(pre->lib) + 1);
    kf_mem_free(&m, pre, sizeof *pre);
    return ms;
}

kf_status kf_blt_create(const kf_mem *mem, const kf_cuda_device *dev, const char *lib, kf_blt **out,
                        char *err) {
    return kf_blt_create_preloaded(mem, dev, lib, NULL, NULL, out, err);
}

kf_status kf_blt_create_preloaded(const kf_mem *mem, const kf_cuda_device *dev, const char *lib,
                                  kf_blt_preload *pre, double *thread_ms, kf_blt **out, char *err) {
    if (thread_ms)
        *thread_ms = 0;
    if (!mem || !dev || !out) {
        kf_blt_preload_finish(pre);
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_blt_create: NULL argument");
    }
    *out = NULL;
    kf_blt *lt = kf_mem_calloc(mem, 1, sizeof *lt);
    if (!lt) {
        kf_blt_preload_finish(pre);
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory creating the cuBLASLt state");
    }
    lt->mem = *mem;
    lt->dev = dev;
    kf_status st;
    if (pre) {
        double tw = lt_now_ms();
        lt_preload_join(pre);
        lt->timing.wait_ms = lt_now_ms() - tw;
        st = pre->st;
        if (st == KF_OK)
            lt->lib = pre->L;
        else
            kf_msg_set(err, st, "%s", pre->err);
        double ms = kf_blt_preload_finish(pre);
        if (thread_ms)
            *thread_ms = ms;
    } else {
        st = lt_lib_open(&lt->lib, lib, NULL, 0, err);
    }
    lt->timing.dlopen_ms = lt->lib.dlopen_ms;
    lt->timing.dlsym_ms = lt->lib.dlsym_ms;
    double tc = lt_now_ms();
    if (st == KF_OK) {
        /* cuBLASLt works on the current context: make the device's current
         * through a harmless driver call. */
        kf_cu_deviceptr probe = 0;
        st = kf_cuda_mem_alloc(dev, 256, &probe, err);
        if (st == KF_OK) {
            kf_cuda_mem_free(dev, probe);
            st = lt_check(lt, lt->lib.Create(&lt->handle), "cublasLtCreate", "-", err);
        }
    }
    lt->timing.create_ms = lt_now_ms() - tc;
    if (st != KF_OK) {
        kf_blt_destroy(lt);
        return st;
    }
    *out = lt;
    return KF_OK;
}

static void plan_release(kf_blt *lt, kf_blt_plan *p) {
    if (p->desc)
        lt->lib.DescDestroy(p->desc);
    if (p->la)
        lt->lib.LayoutDestroy(p->la);
    if (p->lb)
        lt->lib.LayoutDestroy(p->lb);
    if (p->lc)
        lt->lib.LayoutDestroy(p->lc);
    if (p->ld)
        lt->lib.LayoutDestroy(p->ld);
    p->desc = NULL;
    p->la = p->lb = p->lc = p->ld = NULL;
}

void kf_blt_destroy(kf_blt *lt) {
    if (!lt)
        return;
    for (uint32_t i = 0; i < lt->n_plans; i++)
        plan_release(lt, &lt->plans[i]);
    kf_mem_free(&lt->mem, lt->plans, lt->cap_plans * sizeof *lt->plans);
    if (lt->workspace && !lt->workspace_borrowed)
        kf_cuda_mem_free(lt->dev, lt->workspace);
    if (lt->handle)
        lt->lib.Destroy(lt->handle);
    /* No dlclose: cuBLASLt keeps state tied to the CUDA context; the
     * reference-counted handle simply stays open, as libcuda's does. */
    kf_mem m = lt->mem;
    kf_mem_free(&m, lt, sizeof *lt);
}

size_t kf_blt_version(const kf_blt *lt) { return lt ? lt->lib.GetVersion() : 0; }

/* ------------------------------------------------------------------------ */
/* Plans                                                                      */
/* ------------------------------------------------------------------------ */

bool kf_blt_operand_ok(const kf_blt_operand *op, int64_t rows, int64_t cols) {
    if (op->col_stride == 1 && (rows == 1 || op->row_stride >= cols))
        return true;
    if (op->row_stride == 1 && (cols == 1 || op->col_stride >= rows))
        return true;
    return false;
}

/* The column-major description of a logical row-major [rows, cols] operand
 * as cuBLASLt sees its TRANSPOSE (see cublaslt.h): the op flag, the stored
 * layout's rows, cols and ld. */
static void colmajor_of(const kf_blt_operand *op, int64_t rows, int64_t cols, int *trans,
                        int64_t *lrows, int64_t *lcols, int64_t *ld) {
    if (op->col_stride == 1 && (rows == 1 || op->row_stride >= cols)) {
        /* Row-major storage: column-major it is X^T [cols, rows], which is what
         * the transposed product needs. */
        *trans = LT_OP_N;
        *lrows = cols;
        *lcols = rows;
        *ld = rows == 1 ? (cols > 0 ? cols : 1) : op->row_stride;
    } else {
        /* Column-major storage: X [rows, cols] with ld col_stride; transpose it. */
        *trans = LT_OP_T;
        *lrows = rows;
        *lcols = cols;
        *ld = cols == 1 ? (rows > 0 ? rows : 1) : op->col_stride;
    }
}

static unsigned align_of(kf_cu_deviceptr p) {
    unsigned a = 256;
    while (a > 1 && (p % a) != 0)
        a >>= 1;
    return a;
}

static int lt_type(kf_dtype d) {
    switch (d) {
    case KF_DTYPE_F16:
        return LT_R_16F;
    case KF_DTYPE_BF16:
        return LT_R_16BF;
    case KF_DTYPE_F64:
        return LT_R_64F;
    default:
        return LT_R_32F;
    }
}

static bool plan_matches(const kf_blt_plan *p, const kf_blt_plan *k) {
    return p->dtype == k->dtype && p->m == k->m && p->n == k->n && p->k == k->k &&
           p->batch == k->batch && p->a_rs == k->a_rs && p->a_cs == k->a_cs &&
           p->a_bs == k->a_bs && p->b_rs == k->b_rs && p->b_cs == k->b_cs && p->b_bs == k->b_bs &&
           p->c_rs == k->c_rs && p->c_bs == k->c_bs && p->d_rs == k->d_rs && p->d_bs == k->d_bs &&
           p->has_c == k->has_c && p->epilogue == k->epilogue &&
           memcmp(p->align, k->align, sizeof p->align) == 0;
}

static void plan_key(const kf_blt_gemm *g, kf_blt_plan *k) {
    memset(k, 0, sizeof *k);
    k->dtype = g->dtype;
    k->m = g->m;
    k->n = g->n;
    k->k = g->k;
    k->batch = g->batch;
    k->a_rs = g->a.row_stride;
    k->a_cs = g->a.col_stride;
    k->a_bs = g->a.batch_stride;
    k->b_rs = g->b.row_stride;
    k->b_cs = g->b.col_stride;
    k->b_bs = g->b.batch_stride;
    k->has_c = g->c.ptr != 0 && g->beta != 0.0;
    k->c_rs = k->has_c ? g->c.row_stride : 0;
    k->c_bs = k->has_c ? g->c.batch_stride : 0;
    k->d_rs = g->d.row_stride;
    k->d_bs = g->d.batch_stride;
    k->epilogue = g->epilogue;
    k->align[0] = align_of(g->a.ptr);
    k->align[1] = align_of(g->b.ptr);
    k->align[2] = k->has_c ? align_of(g->c.ptr) : 256;
    k->align[3] = align_of(g->d.ptr);
}

static kf_status layout(kf_blt *lt, kf_blt_layout *out, int type, int64_t rows, int64_t cols,
                        int64_t ld, int64_t batch, int64_t batch_stride, const char *what,
                        char *err) {
    kf_status st = lt_check(lt, lt->lib.LayoutCreate(out, type, (uint64_t)rows, (uint64_t)cols, ld),
                            "cublasLtMatrixLayoutCreate", what, err);
    if (st == KF_OK && batch > 1) {
        int32_t count = (int32_t)batch;
        st = lt_check(lt,
                      lt->lib.LayoutSet(*out, LT_LAYOUT_BATCH_COUNT, &count, sizeof count),
                      "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)", what, err);
        if (st == KF_OK)
            st = lt_check(lt,
                          lt->lib.LayoutSet(*out, LT_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
                                            sizeof batch_stride),
                          "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)", what, err);
    }
    return st;
}

/* ---- The heuristic's algorithms in the disk cache ---------------------------
 * cuBLASLt documents its cublasLtMatmulAlgo_t as trivially serializable for
 * reuse with the same library version. Asking the heuristic is part of what a
 * new process pays before its first GEMM, so an algorithm it chose is kept in
 * the kfuse cache (kf_blt_set_cache) under a key of the plan's key, the
 * workspace limit, the library's version and the device (name, cc, SMs,
 * driver); a later process takes it from there. A record whose bytes do not
 * check out (kf_blt_algo_record_unpack: tag, length, workspace) is not used:
 * the heuristic decides and its answer replaces it. A cached algorithm the
 * library refuses at its first matmul is replaced the same way, once.
 *
 * Why not cublasLtMatmulAlgoCheck on load: measured on an H200 (warm starts of
 * llama_block.kfg), it is cuBLASLt's first real call and pays the library's
 * lazy start-up, 58-77 ms, which otherwise falls in the first GEMM: it moved
 * that time from the first run into kf_compile and saved none of it. */

#define ALGO_TAG "kfltalg1"

size_t kf_blt_algo_record_pack(const uint64_t algo[KF_BLT_ALGO_WORDS], uint64_t workspace,
                               unsigned char out[KF_BLT_ALGO_RECORD_BYTES]) {
    memcpy(out, ALGO_TAG, 8);
    memcpy(out + 8, &workspace, sizeof workspace);
    memcpy(out + 16, algo, KF_BLT_ALGO_WORDS * sizeof *algo);
    return KF_BLT_ALGO_RECORD_BYTES;
}

bool kf_blt_algo_record_unpack(const void *data, size_t len, uint64_t algo[KF_BLT_ALGO_WORDS],
                               uint64_t *workspace) {
    const unsigned char *b = data;
    if (!b || len != KF_BLT_ALGO_RECORD_BYTES || memcmp(b, ALGO_TAG, 8) != 0)
        return false;
    uint64_t ws;
    memcpy(&ws, b + 8, sizeof ws);
    if (ws > KF_BLT_WORKSPACE_BYTES)
        return false;
    memcpy(algo, b + 16, KF_BLT_ALGO_WORDS * sizeof *algo);
    *workspace = ws;
    return true;
}

static bool algo_key_of(const kf_blt_plan *p, size_t version, const char *device,
                        kf_cache_key *key) {
    char text[640], compiler[64];
    int n = snprintf(text, sizeof text,
                     "cublaslt algo\ndtype %d m %" PRId64 " n %" PRId64 " k %" PRId64
                     " batch %" PRId64 "\na %" PRId64 " %" PRId64 " %" PRId64 " b %" PRId64
                     " %" PRId64 " %" PRId64 "\nc %d %" PRId64 " %" PRId64 " d %" PRId64
                     " %" PRId64 "\nepi %d align %u %u %u %u workspace %zu\n",
                     (int)p->dtype, p->m, p->n, p->k, p->batch, p->a_rs, p->a_cs, p->a_bs,
                     p->b_rs, p->b_cs, p->b_bs, (int)p->has_c, p->c_rs, p->c_bs, p->d_rs, p->d_bs,
                     (int)p->epilogue, p->align[0], p->align[1], p->align[2], p->align[3],
                     (size_t)KF_BLT_WORKSPACE_BYTES);
    if (n < 0 || (size_t)n >= sizeof text)
        return false;
    snprintf(compiler, sizeof compiler, "cublaslt %zu", version);
    kf_cache_key_parts parts = {
        .source = text,
        .source_len = (size_t)n,
        .options = device ? device : "",
        .arch = NULL,
        .compiler = compiler,
        .codegen_version = 1,
    };
    kf_cache_key_build(&parts, key);
    return true;
}

static void plan_key(const kf_blt_gemm *g, kf_blt_plan *k);

bool kf_blt_algo_key(const kf_blt_gemm *g, size_t version, const char *device, kf_cache_key *key) {
    kf_blt_plan k;
    plan_key(g, &k);
    return algo_key_of(&k, version, device, key);
}

static bool algo_key(const kf_blt *lt, const kf_blt_plan *p, kf_cache_key *key) {
    return algo_key_of(p, lt->lib.GetVersion(), lt->cache_device, key);
}

/* p's algorithm from the cache; false on a miss or a record that does not
 * check out (then the heuristic decides). */
static bool algo_load(kf_blt *lt, kf_blt_plan *p) {
    kf_cache_key key;
    if (!lt->cache || !algo_key(lt, p, &key))
        return false;
    double t0 = lt_now_ms();
    void *data = NULL;
    size_t len = 0;
    kf_cache_msg msg;
    memset(&msg, 0, sizeof msg);
    bool ok = kf_cache_get(lt->cache, &key, &data, &len, &msg) == KF_OK;
    uint64_t ws = 0;
    if (ok) {
        ok = kf_blt_algo_record_unpack(data, len, p->algo.data, &ws);
        kf_cache_blob_free(lt->cache, data, len);
    }
    lt->timing.algo_load_ms += lt_now_ms() - t0;
    if (!ok) {
        memset(&p->algo, 0, sizeof p->algo);
        return false;
    }
    p->workspace = (size_t)ws;
    p->algo_cached = true;
    lt->algos_cached++;
    return true;
}

static void algo_store(kf_blt *lt, const kf_blt_plan *p) {
    kf_cache_key key;
    if (!lt->cache || !algo_key(lt, p, &key))
        return;
    unsigned char rec[KF_BLT_ALGO_RECORD_BYTES];
    size_t n = kf_blt_algo_record_pack(p->algo.data, p->workspace, rec);
    kf_cache_msg msg;
    memset(&msg, 0, sizeof msg);
    (void)kf_cache_put(lt->cache, &key, rec, n, &msg); /* a failed store costs a heuristic */
}

static kf_status plan_heuristic(kf_blt *lt, kf_blt_plan *p, const kf_blt_gemm *g, char *err);

/* Builds descriptors and finds the algorithm for `p` (its key filled): from
 * the cache, else the heuristic's. */
static kf_status plan_build(kf_blt *lt, kf_blt_plan *p, const kf_blt_gemm *g, char *err) {
    const char *what = g->what;
    double t0 = lt_now_ms();
    int type = lt_type(g->dtype);
    bool f64 = g->dtype == KF_DTYPE_F64;
    kf_status st = lt_check(
        lt, lt->lib.DescCreate(&p->desc, f64 ? LT_COMPUTE_64F : LT_COMPUTE_32F, f64 ? LT_R_64F : LT_R_32F),
        "cublasLtMatmulDescCreate", what, err);
    /* cuBLASLt's A is our B, its B our A (cublaslt.h). */
    int ta, tb;
    int64_t ar, ac, ald, br, bc, bld;
    colmajor_of(&g->b, g->k, g->n, &ta, &ar, &ac, &ald);
    colmajor_of(&g->a, g->m, g->k, &tb, &br, &bc, &bld);
    int epi = lt_epilogue(g->epilogue);
    if (st == KF_OK)
        st = lt_check(lt, lt->lib.DescSet(p->desc, LT_DESC_TRANSA, &ta, sizeof ta),
                      "cublasLtMatmulDescSetAttribute(TRANSA)", what, err);
    if (st == KF_OK)
        st = lt_check(lt, lt->lib.DescSet(p->desc, LT_DESC_TRANSB, &tb, sizeof tb),
                      "cublasLtMatmulDescSetAttribute(TRANSB)", what, err);
    if (st == KF_OK)
        st = lt_check(lt, lt->lib.DescSet(p->desc, LT_DESC_EPILOGUE, &epi, sizeof epi),
                      "cublasLtMatmulDescSetAttribute(EPILOGUE)", what, err);
    if (st == KF_OK && lt_has_bias(g->epilogue)) {
        void *bias = (void *)(uintptr_t)g->bias;
        st = lt_check(lt, lt->lib.DescSet(p->desc, LT_DESC_BIAS_POINTER, &bias, sizeof bias),
                      "cublasLtMatmulDescSetAttribute(BIAS_POINTER)", what, err);
    }
    if (st == KF_OK)
        st = layout(lt, &p->la, type, ar, ac, ald, g->batch, g->b.batch_stride, what, err);
    if (st == KF_OK)
        st = layout(lt, &p->lb, type, br, bc, bld, g->batch, g->a.batch_stride, what, err);
    if (st == KF_OK)
        st = layout(lt, &p->ld, type, g->n, g->m, g->m == 1 ? g->n : g->d.row_stride, g->batch,
                    g->d.batch_stride, what, err);
    if (st == KF_OK)
        st = p->has_c ? layout(lt, &p->lc, type, g->n, g->m, g->m == 1 ? g->n : g->c.row_stride,
                               g->batch, g->c.batch_stride, what, err)
                      : layout(lt, &p->lc, type, g->n, g->m, g->m == 1 ? g->n : g->d.row_stride,
                               g->batch, g->d.batch_stride, what, err);
    lt->timing.plans_ms += lt_now_ms() - t0;
    if (st != KF_OK)
        return st;
    if (algo_load(lt, p))
        return KF_OK;
    st = plan_heuristic(lt, p, g, err);
    if (st == KF_OK)
        algo_store(lt, p);
    return st;
}

/* Asks cuBLASLt's heuristic for p's algorithm (its descriptors built). */
static kf_status plan_heuristic(kf_blt *lt, kf_blt_plan *p, const kf_blt_gemm *g, char *err) {
    const char *what = g->what;
    kf_status st = KF_OK;
    double t0 = lt_now_ms();
    lt->heuristics++;
    kf_blt_pref pref = NULL;
    if (st == KF_OK)
        st = lt_check(lt, lt->lib.PrefCreate(&pref), "cublasLtMatmulPreferenceCreate", what, err);
    uint64_t ws = KF_BLT_WORKSPACE_BYTES;
    static const int align_attr[4] = {LT_PREF_MIN_ALIGNMENT_B_BYTES, LT_PREF_MIN_ALIGNMENT_A_BYTES,
                                      LT_PREF_MIN_ALIGNMENT_C_BYTES, LT_PREF_MIN_ALIGNMENT_D_BYTES};
    if (st == KF_OK)
        st = lt_check(lt, lt->lib.PrefSet(pref, LT_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
                      "cublasLtMatmulPreferenceSetAttribute", what, err);
    /* Our A is cuBLASLt's B and vice versa: align[0] (ours A) goes to MIN_ALIGNMENT_B. */
    for (int i = 0; i < 4 && st == KF_OK; i++) {
        uint32_t a = p->align[i];
        st = lt_check(lt, lt->lib.PrefSet(pref, align_attr[i], &a, sizeof a),
                      "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)", what, err);
    }
    kf_blt_heuristic res;
    int returned = 0;
    if (st == KF_OK) {
        memset(&res, 0, sizeof res);
        kf_blt_status s = lt->lib.Heuristic(lt->handle, p->desc, p->la, p->lb, p->lc, p->ld, pref,
                                           1, &res, &returned);
        if (s == LT_NOT_SUPPORTED || (s == LT_SUCCESS && returned == 0))
            st = kf_msg_set(err, KF_ERR_UNSUPPORTED,
                      "cuBLASLt has no algorithm for GEMM '%s' (%s, M=%lld N=%lld K=%lld "
                      "batch=%lld, epilogue %s)",
                      what ? what : "?", kf_dtype_name(g->dtype), (long long)g->m,
                      (long long)g->n, (long long)g->k, (long long)g->batch,
                      kf_blt_epilogue_name(g->epilogue));
        else
            st = lt_check(lt, s, "cublasLtMatmulAlgoGetHeuristic", what, err);
    }
    if (pref)
        lt->lib.PrefDestroy(pref);
    lt->timing.heuristic_ms += lt_now_ms() - t0;
    if (st == KF_OK) {
        p->algo = res.algo;
        p->workspace = res.workspace_size;
        p->algo_cached = false;
    }
    return st;
}

/* The cached plan for g, building it on the first call. A plan that found no
 * algorithm is cached too (status UNSUPPORTED), so asking again is free. */
static kf_status plan_get(kf_blt *lt, const kf_blt_gemm *g, kf_blt_plan **out, char *err) {
    kf_blt_plan key;
    plan_key(g, &key);
    for (uint32_t i = 0; i < lt->n_plans; i++) {
        if (plan_matches(&lt->plans[i], &key)) {
            *out = &lt->plans[i];
            if (lt->plans[i].status != KF_OK)
                return kf_msg_set(err, lt->plans[i].status,
                            "cuBLASLt has no algorithm for GEMM '%s' (epilogue %s)",
                            g->what ? g->what : "?", kf_blt_epilogue_name(g->epilogue));
            return KF_OK;
        }
    }
    if (!kf_mem_grow(&lt->mem, (void **)&lt->plans, &lt->cap_plans, lt->n_plans + 1,
                     sizeof *lt->plans))
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory planning a cuBLASLt GEMM");
    kf_blt_plan *p = &lt->plans[lt->n_plans];
    *p = key;
    kf_status st = plan_build(lt, p, g, err);
    if (st != KF_OK) {
        plan_release(lt, p);
        if (st != KF_ERR_UNSUPPORTED)
            return st; /* not cached: a real failure */
        p->status = st;
    }
    lt->n_plans++;
    *out = p;
    return st;
}

static kf_status check_gemm(const kf_blt_gemm *g, char *err) {
    const char *what = g->what ? g->what : "?";
    if (!kf_dtype_is_float(g->dtype))
        return kf_msg_set(err, KF_ERR_UNSUPPORTED, "GEMM '%s': cuBLASLt takes float dtypes, not %s",
                    what, kf_dtype_name(g->dtype));
    if (g->m <= 0 || g->n <= 0 || g->k <= 0 || g->batch <= 0 || g->m > INT32_MAX ||
        g->n > INT32_MAX || g->k > INT32_MAX || g->batch > INT32_MAX)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                    "GEMM '%s': sizes M=%lld N=%lld K=%lld batch=%lld are out of cuBLASLt's range",
                    what, (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->batch);
    if (!kf_blt_operand_ok(&g->a, g->m, g->k) || !kf_blt_operand_ok(&g->b, g->k, g->n))
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                    "GEMM '%s': an operand has no unit stride (copy it to contiguous memory "
                    "first)",
                    what);
    if (g->d.col_stride != 1 || (g->m > 1 && g->d.row_stride < g->n))
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "GEMM '%s': D must be row-major", what);
    if (g->c.ptr && g->beta != 0.0 && (g->c.col_stride != 1 || (g->m > 1 && g->c.row_stride < g->n)))
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "GEMM '%s': C must be row-major", what);
    if (lt_has_bias(g->epilogue) && !g->bias)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "GEMM '%s': epilogue %s needs a bias", what,
                    kf_blt_epilogue_name(g->epilogue));
    return KF_OK;
}

bool kf_blt_supported(kf_blt *lt, const kf_blt_gemm *g) {
    char err[KF_MSG_MAX];
    kf_blt_plan *p;
    return lt && check_gemm(g, err) == KF_OK && plan_get(lt, g, &p, err) == KF_OK;
}

kf_status kf_blt_set_workspace(kf_blt *lt, kf_cu_deviceptr ptr, size_t bytes, char *err) {
    if (!lt || (ptr && bytes < KF_BLT_WORKSPACE_BYTES))
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "kf_blt_set_workspace: NULL kf_blt, or a workspace of %zu bytes "
                          "(cuBLASLt is promised %zu)",
                          bytes, KF_BLT_WORKSPACE_BYTES);
    if (lt->workspace && !lt->workspace_borrowed)
        kf_cuda_mem_free(lt->dev, lt->workspace);
    lt->workspace = ptr;
    lt->workspace_bytes = ptr ? bytes : 0;
    lt->workspace_borrowed = ptr != 0;
    return KF_OK;
}

kf_status kf_blt_matmul(kf_blt *lt, const kf_blt_gemm *g, kf_cu_stream stream, char *err) {
    if (!lt || !g)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_blt_matmul: NULL argument");
    kf_status st = check_gemm(g, err);
    kf_blt_plan *p = NULL;
    if (st == KF_OK)
        st = plan_get(lt, g, &p, err);
    if (st != KF_OK)
        return st;
    if (p->workspace && !lt->workspace) {
        st = kf_cuda_mem_alloc(lt->dev, KF_BLT_WORKSPACE_BYTES, &lt->workspace, err);
        if (st != KF_OK)
            return st;
        lt->workspace_bytes = KF_BLT_WORKSPACE_BYTES;
    }
    if (lt_has_bias(g->epilogue)) {
        void *bias = (void *)(uintptr_t)g->bias;
        st = lt_check(lt, lt->lib.DescSet(p->desc, LT_DESC_BIAS_POINTER, &bias, sizeof bias),
                      "cublasLtMatmulDescSetAttribute(BIAS_POINTER)", g->what, err);
        if (st != KF_OK)
            return st;
    }
    double one64 = 1.0, beta64 = p->has_c ? g->beta : 0.0;
    float one32 = 1.0f, beta32 = (float)beta64;
    bool f64 = g->dtype == KF_DTYPE_F64;
    const void *alpha = f64 ? (const void *)&one64 : (const void *)&one32;
    const void *beta = f64 ? (const void *)&beta64 : (const void *)&beta32;
    void *A = (void *)(uintptr_t)g->b.ptr, *B = (void *)(uintptr_t)g->a.ptr;
    void *D = (void *)(uintptr_t)g->d.ptr;
    void *C = p->has_c ? (void *)(uintptr_t)g->c.ptr : D;
    kf_blt_status s = lt->lib.Matmul(lt->handle, p->desc, alpha, A, p->la, B, p->lb, beta, C,
                                     p->lc, D, p->ld, &p->algo, (void *)(uintptr_t)lt->workspace,
                                     p->workspace ? lt->workspace_bytes : 0, (void *)stream);
    if (s != LT_SUCCESS && p->algo_cached) {
        /* The cached algorithm refused: the heuristic's, once, and that one
         * replaces the entry. (A refused call launched nothing.) */
        lt->timing.refused++;
        st = plan_heuristic(lt, p, g, err);
        if (st != KF_OK)
            return st;
        algo_store(lt, p);
        if (p->workspace && !lt->workspace) {
            st = kf_cuda_mem_alloc(lt->dev, KF_BLT_WORKSPACE_BYTES, &lt->workspace, err);
            if (st != KF_OK)
                return st;
            lt->workspace_bytes = KF_BLT_WORKSPACE_BYTES;
        }
        s = lt->lib.Matmul(lt->handle, p->desc, alpha, A, p->la, B, p->lb, beta, C, p->lc, D,
                           p->ld, &p->algo, (void *)(uintptr_t)lt->workspace,
                           p->workspace ? lt->workspace_bytes : 0, (void *)stream);
    }
    return lt_check(lt, s, "cublasLtMatmul", g->what, err);
}

void kf_blt_set_cache(kf_blt *lt, kf_cache *cache, const char *device) {
    if (!lt)
        return;
    lt->cache = cache;
    snprintf(lt->cache_device, sizeof lt->cache_device, "%s", device ? device : "");
}

void kf_blt_timings(const kf_blt *lt, kf_blt_timing *out) {
    if (lt)
        *out = lt->timing;
    else
        memset(out, 0, sizeof *out);
}

void kf_blt_algo_counts(const kf_blt *lt, uint32_t *cached, uint32_t *heuristics) {
    *cached = lt ? lt->algos_cached : 0;
    *heuristics = lt ? lt->heuristics : 0;
}
