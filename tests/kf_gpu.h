/*
 * kf_gpu.h -- the fixture the GPU suites that compile through a context
 * share (test_cuda_exec, test_cuda_exec_simt, test_gemm_rowepi,
 * test_cuda_attnsimt, test_device_run): a CUDA context with a kernel cache
 * in a private temporary directory, whether device 0 answers, and if not
 * why; and the skip every GPU test starts with. Without a device the tests
 * skip with that message (ctest: skipped, never passed).
 */
#ifndef KF_TESTS_GPU_H
#define KF_TESTS_GPU_H

#include <stdbool.h>
#include <stdio.h>

#include "ir/ir.h" /* KF_MSG_MAX */
#include "kfuse.h"

typedef struct kf_test_gpu {
    kf_ctx *ctx; /* target CUDA, cache in cache_dir */
    bool have;   /* device 0 answers */
    char why[KF_MSG_MAX];
    char cache_dir[256]; /* empty when no directory could be made */
} kf_test_gpu;

/* Makes the private cache directory /tmp/<prefix>_XXXXXX, then the context
 * from `o` (NULL: the defaults) with the CUDA target and that cache, and
 * asks whether device 0 answers (g->why says why not). 0, or -1 when the
 * context cannot be made (a group setup's failure). */
int kf_test_gpu_setup(kf_test_gpu *g, const char *prefix, const kf_options *o);

/* Destroys the context and removes the cache directory. */
void kf_test_gpu_teardown(kf_test_gpu *g);

/* Skips the running test, saying why, unless `g` has a device. */
#define KF_REQUIRE_GPU(g)                                                                          \
    do {                                                                                           \
        if (!(g)->have) {                                                                          \
            fprintf(stderr, "no CUDA device: skipped (%s)\n", (g)->why);                           \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

#endif /* KF_TESTS_GPU_H */
