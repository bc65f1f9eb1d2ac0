/*
 * ctx.c -- the runtime's share of a context's life: the mutex that guards what
 * is opened lazily (the CUDA driver table, the disk cache), opening the cache,
 * and releasing both.
 */
#include <stdio.h>
#include <string.h>

#include "runtime/cache.h"
#include "runtime/ctx.h"
#include "runtime/cuda.h"

void kf_ctx_runtime_init(kf_ctx *ctx) {
    /* A statically initialized mutex: nothing to fail. */
    pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER;
    ctx->lock = init;
    ctx->cuda = NULL;
    ctx->cuda_status = KF_OK;
    ctx->cuda_error[0] = 0;
    ctx->cache_tried = false;
    ctx->cache = NULL;
    ctx->cache_status = KF_OK;
    ctx->cache_error[0] = 0;
}

void kf_ctx_runtime_release(kf_ctx *ctx) {
    kf_cuda_driver_release(&ctx->mem, ctx->cuda);
    ctx->cuda = NULL;
    kf_cache_close(ctx->cache);
    ctx->cache = NULL;
    pthread_mutex_destroy(&ctx->lock);
}

kf_status kf_ctx_cache(kf_ctx *ctx, kf_cache **out, char *err) {
    if (!ctx || !out) {
        if (err)
            snprintf(err, KF_MSG_MAX, "kf_ctx_cache: NULL argument");
        return KF_ERR_INVALID_ARGUMENT;
    }
    *out = NULL;
    if (ctx->flags & KF_FLAG_NO_CACHE)
        return KF_OK;
    pthread_mutex_lock(&ctx->lock);
    if (!ctx->cache_tried) {
        kf_cache_options o = {.dir = ctx->cache_dir};
        if (ctx->flags & KF_FLAG_CACHE_READ_ONLY)
            o.flags |= KF_CACHE_READ_ONLY;
        if (ctx->flags & KF_FLAG_CACHE_FAIL_ON_MISS)
            o.flags |= KF_CACHE_FAIL_ON_MISS;
        kf_cache_msg msg;
        kf_status st = kf_cache_open(&ctx->mem, &o, &ctx->cache, &msg);
        /* Out of memory is worth retrying; an unusable directory is not. */
        if (st != KF_ERR_OUT_OF_MEMORY) {
            ctx->cache_tried = true;
            ctx->cache_status = st;
        }
        if (st != KF_OK)
            snprintf(ctx->cache_error, sizeof ctx->cache_error, "%s", msg.error);
        if (st == KF_ERR_OUT_OF_MEMORY) {
            pthread_mutex_unlock(&ctx->lock);
            if (err)
                snprintf(err, KF_MSG_MAX, "%s", msg.error);
            return st;
        }
    }
    kf_status st = ctx->cache_status;
    if (st == KF_OK)
        *out = ctx->cache;
    else if (err)
        snprintf(err, KF_MSG_MAX, "%s", ctx->cache_error);
    pthread_mutex_unlock(&ctx->lock);
    return st;
}
