/*
 * kf_gpu.c -- the GPU suites' shared fixture (kf_gpu.h).
 */
#define _GNU_SOURCE /* mkdtemp */
#include "kf_gpu.h"

#include <stdlib.h>
#include <string.h>

#include "kf_test.h"
#include "runtime/ctx.h"
#include "runtime/cuda.h"
#include "runtime/cuda_exec.h"

int kf_test_gpu_setup(kf_test_gpu *g, const char *prefix, const kf_options *o) {
    memset(g, 0, sizeof *g);
    snprintf(g->cache_dir, sizeof g->cache_dir, "/tmp/%s_XXXXXX", prefix);
    if (!mkdtemp(g->cache_dir))
        g->cache_dir[0] = 0;
    kf_options opt;
    if (o)
        opt = *o;
    else
        kf_options_init(&opt);
    opt.target = KF_TARGET_CUDA;
    opt.cache_dir = g->cache_dir[0] ? g->cache_dir : NULL;
    if (kf_ctx_create(&opt, &g->ctx) != KF_OK)
        return -1;
    g->have = kf_cuda_exec_available(g->ctx);
    if (!g->have) {
        const kf_cuda_driver *drv = NULL;
        if (kf_ctx_cuda_driver(g->ctx, &drv, g->why) == KF_OK)
            snprintf(g->why, sizeof g->why, "the driver sees no CUDA device 0");
    }
    return 0;
}

void kf_test_gpu_teardown(kf_test_gpu *g) {
    kf_ctx_destroy(g->ctx);
    g->ctx = NULL;
    if (g->cache_dir[0] && kf_test_remove_dir(g->cache_dir) != 0)
        fprintf(stderr, "could not remove %s\n", g->cache_dir);
}
