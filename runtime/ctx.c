/*
 * ctx.c -- the runtime's share of a context's life: the mutex that guards what
 * is loaded lazily, and releasing what was loaded (the CUDA driver table).
 */
#include <string.h>

#include "runtime/ctx.h"
#include "runtime/cuda.h"

void kf_ctx_runtime_init(kf_ctx *ctx) {
    /* A statically initialized mutex: nothing to fail. */
    pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER;
    ctx->lock = init;
    ctx->cuda = NULL;
    ctx->cuda_status = KF_OK;
    ctx->cuda_error[0] = 0;
}

void kf_ctx_runtime_release(kf_ctx *ctx) {
    kf_cuda_driver_release(&ctx->mem, ctx->cuda);
    ctx->cuda = NULL;
    pthread_mutex_destroy(&ctx->lock);
}
