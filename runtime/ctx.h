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

struct kf_ctx {
    kf_mem mem;
    kf_target target;
    int device;
    unsigned flags;
    char *arch;      /* NULL: from the device */
    char *cache_dir; /* NULL: $KF_CACHE_DIR, else ~/.cache/kfuse */

    /* Loaded at first use, under `lock` (runtime/cuda.c). */
    pthread_mutex_t lock;
    struct kf_cuda_driver *cuda; /* NULL until loaded, or when loading failed */
    kf_status cuda_status;       /* KF_OK, or why the driver cannot be used */
    char cuda_error[KF_MSG_MAX]; /* its message */
};

/* The runtime's part of kf_ctx_create (before any failure path) and of
 * kf_ctx_destroy. Init cannot fail. */
void kf_ctx_runtime_init(kf_ctx *ctx);
void kf_ctx_runtime_release(kf_ctx *ctx);

#endif /* KF_RUNTIME_CTX_H */
