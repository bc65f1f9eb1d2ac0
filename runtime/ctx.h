/*
 * ctx.h -- the context: the options a caller chose, resolved, and the
 * allocator every graph and program of the context uses. Later issues add the
 * kernel cache, the driver and library handles here. The fields are set once
 * by kf_ctx_create and only read afterwards, which is what lets several
 * threads share one context.
 */
#ifndef KF_RUNTIME_CTX_H
#define KF_RUNTIME_CTX_H

#include "ir/ir.h"

struct kf_ctx {
    kf_mem mem;
    kf_target target;
    int device;
    unsigned flags;
    char *arch;      /* NULL: from the device */
    char *cache_dir; /* NULL: $KF_CACHE_DIR, else ~/.cache/kfuse */
};

#endif /* KF_RUNTIME_CTX_H */
