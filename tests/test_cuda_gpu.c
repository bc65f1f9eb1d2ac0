/*
 * test_cuda_gpu.c -- the Driver API on a real GPU: open the device, compile a
 * kernel with NVRTC for the arch the dispatch picks, load it, launch it, and
 * compare with the host; plus the failures a caller meets (unknown function,
 * a CUBIN for another arch, a bad image) naming the kernel.
 *
 * Without a driver or a device every test is skipped with a visible message
 * ("no CUDA driver: skipped") and the binary exits 77, which ctest reports as
 * skipped, never as passed. Run on a GPU machine with `ctest -R cuda`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_test.h"
#include "runtime/cuda.h"
#include "runtime/nvrtc.h"

static const char add_relu_src[] =
    "extern \"C\" __global__ void kf_add_relu(const float *a, const float *b, float *c, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) {\n"
    "        float v = a[i] + b[i];\n"
    "        c[i] = v > 0.0f ? v : 0.0f;\n"
    "    }\n"
    "}\n";

typedef struct gpu {
    kf_mem mem;
    kf_cuda_driver *drv;
    kf_cuda_device dev;
    char why[KF_MSG_MAX]; /* why there is no GPU */
} gpu;

static gpu G;

static int group_setup(void **state) {
    (void)state;
    kf_mem_resolve(&G.mem, NULL);
    if (kf_cuda_driver_load(&G.mem, NULL, &G.drv, G.why) != KF_OK)
        return 0;
    if (kf_cuda_device_open(G.drv, 0, &G.dev, G.why) != KF_OK) {
        kf_cuda_driver_release(&G.mem, G.drv);
        G.drv = NULL;
    }
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    if (G.drv) {
        kf_cuda_device_close(&G.dev);
        kf_cuda_driver_release(&G.mem, G.drv);
    }
    return 0;
}

#define REQUIRE_GPU()                                                                              \
    do {                                                                                           \
        if (!G.drv) {                                                                              \
            fprintf(stderr, "no CUDA driver: skipped (%s)\n", G.why);                              \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* Compiles add_relu for `arch`; fails the test on error. */
static kf_nvrtc_result compile_for(const char *arch) {
    kf_nvrtc_result r;
    char err[KF_MSG_MAX] = "";
    kf_nvrtc_options o = {.arch = arch, .kernel_name = "kf_add_relu"};
    if (kf_nvrtc_compile(&G.mem, add_relu_src, strlen(add_relu_src), &o, &r, err) != KF_OK)
        fail_msg("%s", err);
    return r;
}

static void test_the_device_reports_its_compute_capability_and_dispatch_arch(void **state) {
    (void)state;
    REQUIRE_GPU();
    char want[KF_ARCH_MAX];
    assert_true(G.dev.cc_major >= 5);
    assert_true(G.dev.sm_count > 0);
    assert_true(G.dev.name[0] != 0);
    assert_string_equal(G.dev.arch, kf_cuda_arch_for(G.dev.cc_major, G.dev.cc_minor, want));
    fprintf(stderr, "device 0: %s, compute capability %d.%d, %d SMs, arch %s, driver %d\n",
            G.dev.name, G.dev.cc_major, G.dev.cc_minor, G.dev.sm_count, G.dev.arch,
            G.drv->driver_version);
}

static void test_an_nvrtc_kernel_loads_launches_and_matches_the_host(void **state) {
    (void)state;
    REQUIRE_GPU();
    char err[KF_MSG_MAX] = "";
    kf_nvrtc_result cubin = compile_for(G.dev.arch);
    kf_cu_module mod;
    if (kf_cuda_module_load(&G.dev, cubin.cubin, "kf_add_relu", &mod, err) != KF_OK)
        fail_msg("%s", err);
    kf_nvrtc_result_release(&G.mem, &cubin);
    kf_cu_function fn;
    if (kf_cuda_function(&G.dev, mod, "kf_add_relu", &fn, err) != KF_OK)
        fail_msg("%s", err);

    const int n = (1 << 20) + 3; /* a ragged tail */
    size_t bytes = (size_t)n * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    kf_test_rng rng = kf_test_rng_make(1);
    for (int i = 0; i < n; i++) {
        a[i] = (float)(kf_test_uniform(&rng) * 2 - 1);
        b[i] = (float)(kf_test_uniform(&rng) * 2 - 1);
        c[i] = 12345.0f; /* poison */
    }
    kf_cu_deviceptr da, db, dc;
    kf_cu_stream s;
    kf_cu_event e0, e1;
    assert_int_equal(kf_cuda_mem_alloc(&G.dev, bytes, &da, err), KF_OK);
    assert_int_equal(kf_cuda_mem_alloc(&G.dev, bytes, &db, err), KF_OK);
    assert_int_equal(kf_cuda_mem_alloc(&G.dev, bytes, &dc, err), KF_OK);
    assert_int_equal(kf_cuda_copy_to_device(&G.dev, da, a, bytes, err), KF_OK);
    assert_int_equal(kf_cuda_copy_to_device(&G.dev, db, b, bytes, err), KF_OK);
    assert_int_equal(kf_cuda_copy_to_device(&G.dev, dc, c, bytes, err), KF_OK);
    assert_int_equal(kf_cuda_stream_create(&G.dev, &s, err), KF_OK);
    assert_int_equal(kf_cuda_event_create(&G.dev, &e0, err), KF_OK);
    assert_int_equal(kf_cuda_event_create(&G.dev, &e1, err), KF_OK);
    void *params[] = {&da, &db, &dc, (void *)&n};
    kf_cuda_launch_cfg cfg = {.grid = {(unsigned)((n + 255) / 256), 1, 1},
                              .block = {256, 1, 1},
                              .stream = s,
                              .kernel = "kf_add_relu"};
    assert_int_equal(kf_cuda_event_record(&G.dev, e0, s, err), KF_OK);
    if (kf_cuda_launch(&G.dev, fn, &cfg, params, err) != KF_OK)
        fail_msg("%s", err);
    assert_int_equal(kf_cuda_event_record(&G.dev, e1, s, err), KF_OK);
    if (kf_cuda_stream_sync(&G.dev, s, "kf_add_relu", err) != KF_OK)
        fail_msg("%s", err);
    float ms = -1;
    assert_int_equal(kf_cuda_event_elapsed(&G.dev, e0, e1, &ms, err), KF_OK);
    assert_true(ms >= 0);
    assert_int_equal(kf_cuda_copy_to_host(&G.dev, c, dc, bytes, err), KF_OK);
    size_t bad = 0;
    for (int i = 0; i < n; i++) {
        float v = a[i] + b[i];
        float want = v > 0.0f ? v : 0.0f;
        if (c[i] != want && bad++ < 5)
            fprintf(stderr, "c[%d] = %g, want %g\n", i, (double)c[i], (double)want);
    }
    assert_int_equal(bad, 0);

    /* A block too large is the driver's error, naming the kernel. */
    cfg.block[0] = 4096;
    kf_status st = kf_cuda_launch(&G.dev, fn, &cfg, params, err);
    assert_int_not_equal(st, KF_OK);
    assert_non_null(strstr(err, "kernel 'kf_add_relu'"));
    assert_non_null(strstr(err, "cuLaunchKernel"));

    kf_cuda_event_destroy(&G.dev, e0);
    kf_cuda_event_destroy(&G.dev, e1);
    kf_cuda_stream_destroy(&G.dev, s);
    kf_cuda_mem_free(&G.dev, da);
    kf_cuda_mem_free(&G.dev, db);
    kf_cuda_mem_free(&G.dev, dc);
    kf_cuda_module_unload(&G.dev, mod);
    free(a);
    free(b);
    free(c);
}

/* kf_cuda_module_set_u32 writes a module's global (the runtime sets the
 * templates' kf_stream_ef this way after loading each module); a module
 * without the symbol is left alone. */
static void test_a_module_global_is_set_after_loading(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char src[] = "extern \"C\" {\n__constant__ int kf_stream_ef;\n}\n"
                              "extern \"C\" __global__ void kf_read_flag(int *out) {\n"
                              "    *out = kf_stream_ef;\n}\n";
    char err[KF_MSG_MAX] = "";
    kf_nvrtc_result r;
    kf_nvrtc_options o = {.arch = G.dev.arch, .kernel_name = "kf_read_flag"};
    if (kf_nvrtc_compile(&G.mem, src, strlen(src), &o, &r, err) != KF_OK)
        fail_msg("%s", err);
    kf_cu_module mod;
    if (kf_cuda_module_load(&G.dev, r.cubin, "kf_read_flag", &mod, err) != KF_OK)
        fail_msg("%s", err);
    kf_nvrtc_result_release(&G.mem, &r);
    kf_cu_function fn;
    assert_int_equal(kf_cuda_function(&G.dev, mod, "kf_read_flag", &fn, err), KF_OK);
    kf_cu_deviceptr d;
    assert_int_equal(kf_cuda_mem_alloc(&G.dev, sizeof(int), &d, err), KF_OK);
    kf_cu_stream s;
    assert_int_equal(kf_cuda_stream_create(&G.dev, &s, err), KF_OK);
    const unsigned values[] = {1u, 0u, 7u};
    for (int i = 0; i < 3; i++) {
        if (kf_cuda_module_set_u32(&G.dev, mod, "kf_stream_ef", values[i], "kf_read_flag", err) !=
            KF_OK)
            fail_msg("%s", err);
        int got = -1;
        assert_int_equal(kf_cuda_copy_to_device(&G.dev, d, &got, sizeof got, err), KF_OK);
        void *params[] = {&d};
        kf_cuda_launch_cfg cfg = {
            .grid = {1, 1, 1}, .block = {1, 1, 1}, .stream = s, .kernel = "kf_read_flag"};
        assert_int_equal(kf_cuda_launch(&G.dev, fn, &cfg, params, err), KF_OK);
        assert_int_equal(kf_cuda_stream_sync(&G.dev, s, "kf_read_flag", err), KF_OK);
        assert_int_equal(kf_cuda_copy_to_host(&G.dev, &got, d, sizeof got, err), KF_OK);
        assert_int_equal(got, (int)values[i]);
    }
    /* no such symbol: nothing to set */
    assert_int_equal(
        kf_cuda_module_set_u32(&G.dev, mod, "kf_no_such_global", 1u, "kf_read_flag", err), KF_OK);
    /* the device's own choice follows its name */
    assert_int_equal(G.dev.stream_evict_first, kf_cuda_stream_evict_first(G.dev.name));
    fprintf(stderr, "%s: streamed reads %s\n", G.dev.name,
            G.dev.stream_evict_first ? "evict-first" : "evict-normal");
    kf_cuda_stream_destroy(&G.dev, s);
    kf_cuda_mem_free(&G.dev, d);
    kf_cuda_module_unload(&G.dev, mod);
}

static void test_an_unknown_function_is_not_found_and_named(void **state) {
    (void)state;
    REQUIRE_GPU();
    char err[KF_MSG_MAX] = "";
    kf_nvrtc_result cubin = compile_for(G.dev.arch);
    kf_cu_module mod;
    assert_int_equal(kf_cuda_module_load(&G.dev, cubin.cubin, "kf_add_relu", &mod, err), KF_OK);
    kf_nvrtc_result_release(&G.mem, &cubin);
    kf_cu_function fn;
    assert_int_equal(kf_cuda_function(&G.dev, mod, "kf_no_such_kernel", &fn, err),
                     KF_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "kf_no_such_kernel"));
    kf_cuda_module_unload(&G.dev, mod);
}

static void test_a_cubin_for_another_arch_is_refused_naming_the_kernel(void **state) {
    (void)state;
    REQUIRE_GPU();
    char err[KF_MSG_MAX] = "";
    kf_nvrtc_result cubin = compile_for(G.dev.cc_major == 9 ? "sm_80" : "sm_90a");
    kf_cu_module mod;
    kf_status st = kf_cuda_module_load(&G.dev, cubin.cubin, "kf_add_relu", &mod, err);
    kf_nvrtc_result_release(&G.mem, &cubin);
    assert_int_not_equal(st, KF_OK);
    assert_non_null(strstr(err, "kernel 'kf_add_relu'"));
    assert_non_null(strstr(err, "cuModuleLoadData"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_device_reports_its_compute_capability_and_dispatch_arch),
        cmocka_unit_test(test_an_nvrtc_kernel_loads_launches_and_matches_the_host),
        cmocka_unit_test(test_a_module_global_is_set_after_loading),
        cmocka_unit_test(test_an_unknown_function_is_not_found_and_named),
        cmocka_unit_test(test_a_cubin_for_another_arch_is_refused_naming_the_kernel),
    };
    int failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
    if (failed == 0 && !G.drv) {
        fprintf(stderr, "no CUDA driver: skipped (%s)\n", G.why);
        return 77; /* ctest: SKIP_RETURN_CODE */
    }
    return failed;
}
