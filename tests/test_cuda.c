/*
 * test_cuda.c -- the Driver API layer on any machine, GPU or not: the loader's
 * answer when there is no driver (or only the toolkit's stub), the context's
 * lazy, once-only, thread-safe load, architecture dispatch, and the library
 * working for everything else without a driver. The GPU part (module load,
 * launch, compare) is test_cuda_gpu.c.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kf_test.h"
#include "runtime/ctx.h"
#include "runtime/cuda.h"

static void test_a_missing_driver_is_unsupported_with_a_clear_message(void **state) {
    (void)state;
    kf_mem m;
    kf_mem_resolve(&m, NULL);
    kf_cuda_driver *d = (kf_cuda_driver *)1;
    char err[KF_MSG_MAX] = "";
    assert_int_equal(kf_cuda_driver_load(&m, "libcuda-kfuse-absent.so.1", &d, err),
                     KF_ERR_UNSUPPORTED);
    assert_null(d);
    assert_non_null(strstr(err, "no CUDA driver (libcuda-kfuse-absent.so.1 not found"));
    assert_non_null(strstr(err, "CPU target"));
}

static void test_the_toolkit_stub_is_never_taken_for_a_driver(void **state) {
    (void)state;
    const char *stubs[] = {"/usr/local/cuda/lib64/stubs/libcuda.so",
                           "/usr/local/cuda/lib/stubs/libcuda.so"};
    const char *stub = NULL;
    for (size_t i = 0; i < 2 && !stub; i++)
        if (access(stubs[i], R_OK) == 0)
            stub = stubs[i];
    if (!stub) {
        fprintf(stderr, "no CUDA toolkit stub at /usr/local/cuda: skipped\n");
        skip();
    }
    kf_mem m;
    kf_mem_resolve(&m, NULL);
    kf_cuda_driver *d = NULL;
    char err[KF_MSG_MAX] = "";
    assert_int_equal(kf_cuda_driver_load(&m, stub, &d, err), KF_ERR_UNSUPPORTED);
    assert_null(d);
    assert_non_null(strstr(err, "stub"));
}

static void test_arch_dispatch_follows_the_compute_capability(void **state) {
    (void)state;
    char buf[KF_ARCH_MAX];
    assert_string_equal(kf_cuda_arch_for(9, 0, buf), "sm_90a");
    assert_string_equal(kf_cuda_arch_for(8, 0, buf), "sm_80");
    assert_string_equal(kf_cuda_arch_for(8, 6, buf), "sm_80");
    assert_string_equal(kf_cuda_arch_for(8, 9, buf), "sm_80");
    assert_string_equal(kf_cuda_arch_for(7, 5, buf), "sm_75");
    assert_string_equal(kf_cuda_arch_for(10, 0, buf), "sm_100");
    assert_string_equal(kf_cuda_arch_for(12, 0, buf), "sm_120");
}

/* The L2 policy for streamed reads is chosen by device: evict-first on
 * H100s, where it measured faster; the neutral default elsewhere. */
static void test_streamed_reads_evict_first_on_h100s_only(void **state) {
    (void)state;
    assert_true(kf_cuda_stream_evict_first("NVIDIA H100 80GB HBM3"));
    assert_true(kf_cuda_stream_evict_first("NVIDIA H100 PCIe"));
    assert_false(kf_cuda_stream_evict_first("NVIDIA H200"));
    assert_false(kf_cuda_stream_evict_first("NVIDIA A100-SXM4-80GB"));
    assert_false(kf_cuda_stream_evict_first(""));
    assert_false(kf_cuda_stream_evict_first(NULL));
}

static void test_driver_errors_name_the_call_and_the_kernel(void **state) {
    (void)state;
    char err[KF_MSG_MAX];
    /* With no table the code is still reported. */
    assert_int_equal(kf_cuda_check(NULL, 0, "cuInit", NULL, err), KF_OK);
    assert_int_equal(kf_cuda_check(NULL, 2, "cuMemAlloc", NULL, err), KF_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(err, "cuMemAlloc"));
    assert_int_equal(kf_cuda_check(NULL, 500, "cuModuleGetFunction", "kf_add_relu", err),
                     KF_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "kernel 'kf_add_relu'"));
    assert_int_equal(kf_cuda_check(NULL, 719, "cuStreamSynchronize", "k", err), KF_ERR_INTERNAL);
    assert_non_null(strstr(err, "719"));
}

typedef struct probe {
    kf_ctx *ctx;
    kf_status st;
    const kf_cuda_driver *drv;
    char err[KF_MSG_MAX];
} probe;

static void *probe_thread(void *arg) {
    probe *p = arg;
    p->st = kf_ctx_cuda_driver(p->ctx, &p->drv, p->err);
    return NULL;
}

static void test_the_context_loads_the_driver_once_and_the_library_works_without_it(void **state) {
    (void)state;
    kf_ctx *ctx;
    assert_int_equal(kf_ctx_create(NULL, &ctx), KF_OK);
    enum { N = 8 };
    probe p[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        memset(&p[i], 0, sizeof p[i]);
        p[i].ctx = ctx;
        assert_int_equal(pthread_create(&th[i], NULL, probe_thread, &p[i]), 0);
    }
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    /* Every thread got the same answer and the same table. */
    for (int i = 1; i < N; i++) {
        assert_int_equal(p[i].st, p[0].st);
        assert_ptr_equal(p[i].drv, p[0].drv);
        assert_string_equal(p[i].err, p[0].err);
    }
    if (p[0].st == KF_OK) {
        fprintf(stderr, "CUDA driver present (version %d, %d devices)\n", p[0].drv->driver_version,
                p[0].drv->device_count);
    } else {
        assert_int_equal(p[0].st, KF_ERR_UNSUPPORTED);
        assert_non_null(strstr(p[0].err, "no CUDA")); /* driver or device */
        fprintf(stderr, "as expected without a GPU: %s\n", p[0].err);
    }

    /* Everything else works regardless: build, verify, evaluate. */
    kf_graph *g;
    assert_int_equal(kf_graph_create(ctx, &g), KF_OK);
    int64_t dims[1] = {4};
    kf_tensor *a = kf_input(g, "a", KF_DTYPE_F32, 1, dims);
    kf_tensor *b = kf_input(g, "b", KF_DTYPE_F32, 1, dims);
    assert_int_equal(kf_output(g, "y", kf_relu(g, kf_add(g, a, b))), KF_OK);
    assert_int_equal(kf_graph_verify(g), KF_OK);
    float av[4] = {1, -2, 3, -4}, bv[4] = {0.5f, 1, -5, 2}, y[4];
    kf_binding in[2] = {{"a", av, sizeof av}, {"b", bv, sizeof bv}};
    kf_binding out[1] = {{"y", y, sizeof y}};
    assert_int_equal(kf_graph_eval(g, in, 2, out, 1), KF_OK);
    assert_true(y[0] == 1.5f && y[1] == 0.0f && y[2] == 0.0f && y[3] == 0.0f);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
}

static void test_a_context_with_a_failing_allocator_still_answers(void **state) {
    (void)state;
    kf_test_alloc ta;
    kf_test_alloc_reset(&ta, 0);
    kf_options o;
    kf_options_init(&o);
    o.allocator = kf_test_allocator(&ta);
    kf_ctx *ctx;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    ta.fail_at = ta.calls + 1; /* the driver table's allocation fails */
    ta.fail_after = true;
    const kf_cuda_driver *drv;
    char err[KF_MSG_MAX] = "";
    kf_status st = kf_ctx_cuda_driver(ctx, &drv, err);
    /* OOM on a machine with a driver; no driver means no allocation at all. */
    assert_true(st == KF_ERR_OUT_OF_MEMORY || st == KF_ERR_UNSUPPORTED);
    ta.fail_at = 0;
    ta.fail_after = false;
    kf_status again = kf_ctx_cuda_driver(ctx, &drv, err);
    assert_true(again == KF_OK || again == KF_ERR_UNSUPPORTED); /* OOM was not remembered */
    kf_ctx_destroy(ctx);
    assert_int_equal(ta.live_blocks, 0);
    assert_int_equal(ta.bad_frees, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_missing_driver_is_unsupported_with_a_clear_message),
        cmocka_unit_test(test_the_toolkit_stub_is_never_taken_for_a_driver),
        cmocka_unit_test(test_arch_dispatch_follows_the_compute_capability),
        cmocka_unit_test(test_streamed_reads_evict_first_on_h100s_only),
        cmocka_unit_test(test_driver_errors_name_the_call_and_the_kernel),
        cmocka_unit_test(test_the_context_loads_the_driver_once_and_the_library_works_without_it),
        cmocka_unit_test(test_a_context_with_a_failing_allocator_still_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
