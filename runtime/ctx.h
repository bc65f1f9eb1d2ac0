/*
 * ctx.h -- the context: the options a caller chose, resolved, and the
 * allocator every graph and program of the context uses. Later issues add the
 * kernel cache and library handles here. The option fields are set once by
 * kf_ctx_create and only read afterwards, which is what lets several threads
 * share one context; what is loaded lazily (the CUDA driver table) is guarded
 * by `lock` and never changes once set.
 */
#ifndef KF_RUNTIME_CTX_H
#define KF_RUNTIME_CTX_H

#include <pthread.h>

#include "ir/ir.h"

struct kf_cuda_driver;
struct kf_cache;

struct kf_ctx {
    kf_mem mem;
    kf_target target;
    int device;
    unsigned flags;
    kf_gemm_mode gemm; /* KF_GEMM_*: how GEMM groups run on CUDA */
    kf_attention_mode attention; /* KF_ATTENTION_*: how attention groups run on CUDA */
    char *arch;      /* NULL: from the device */
    char *cache_dir; /* NULL: kf_cache_default_dir */
    /* kf_options' switches (copied strings, NULL when unset) */
    char *dump_dir;     /* generated CUDA sources go here */
    char *cublaslt_lib; /* the cuBLASLt library tried first */
    int num_threads;    /* CPU target threads, 0: one per core */
    int cpu_opt_level;  /* LLVM -O level of the CPU target */
    bool tiered_compile; /* kf_options.tiered_compile: unmeasured GEMM choices run cuBLASLt
                            while the generated side compiles in the background */
    double choice_margin; /* kf_options.choice_margin: a measured choice's cuBLASLt side runs
                             only when faster than the generated side by more than this */
    double choice_load_bias; /* kf_options.choice_load_bias: a measured choice counts its
                                generated side's time (1 + this) times */
    /* Internal (no kf_options field; 0 from kf_ctx_create): KF_CUDA_RECIPE_*
     * flags added to those of the flags and modes above in every recipe a
     * program of this context makes, so the GPU tests and the bench can run
     * a kernel form that is not on by default through kf_compile. */
    uint64_t recipe_flags;

    /* Loaded at first use, under `lock` (runtime/cuda.c). */
    pthread_mutex_t lock;
    struct kf_cuda_driver *cuda; /* NULL until loaded, or when loading failed */
    kf_status cuda_status;       /* KF_OK, or why the driver cannot be used */
    char cuda_error[KF_MSG_MAX]; /* its message */
    bool cache_tried;            /* kf_ctx_cache ran once */
    struct kf_cache *cache;      /* NULL: not opened, KF_FLAG_NO_CACHE, or failed */
    kf_status cache_status;      /* KF_OK, or why the cache cannot be used */
    char cache_error[KF_MSG_MAX];
};

/* The runtime's part of kf_ctx_create (before any failure path) and of
 * kf_ctx_destroy. Init cannot fail. */
void kf_ctx_runtime_init(kf_ctx *ctx);
void kf_ctx_runtime_release(kf_ctx *ctx);

/* The context's disk cache, opened at the first call (thread-safe) from the
 * context's cache_dir (NULL: kf_cache_default_dir) and flags: READ_ONLY and
 * FAIL_ON_MISS carry over; with KF_FLAG_NO_CACHE *out is NULL and the status
 * KF_OK. A failure to open (an unsafe directory, ...) is remembered: every call
 * returns the same status and message (err: KF_MSG_MAX bytes). */
kf_status kf_ctx_cache(kf_ctx *ctx, struct kf_cache **out, char *err);

#endif /* KF_RUNTIME_CTX_H */
