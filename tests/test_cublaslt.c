/*
 * test_cublaslt.c -- the cuBLASLt layer without a GPU: the library opens
 * through dlopen and every entry point resolves with no driver present (so
 * the no-driver CI exercises the loading path), a missing library is a clear
 * KF_ERR_UNSUPPORTED, and the operand rules that decide the transpose flags.
 * GEMMs themselves run in test_cuda_exec on a GPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_test.h"
#include "runtime/cublaslt.h"

static void test_the_library_opens_and_resolves_without_a_driver(void **state) {
    (void)state;
    char path[512] = "", err[KF_MSG_MAX] = "";
    kf_status st = kf_blt_library_check(NULL, path, sizeof path, err);
    if (st == KF_ERR_UNSUPPORTED && strstr(err, "not found")) {
        fprintf(stderr, "no libcublasLt on this machine: skipped (%s)\n", err);
        skip();
    }
    if (st != KF_OK)
        fail_msg("%s", err);
    fprintf(stderr, "cuBLASLt: %s\n", path);
    assert_true(path[0] != 0);
}

static void test_a_missing_library_is_unsupported_and_says_what_to_do(void **state) {
    (void)state;
    char err[KF_MSG_MAX] = "";
    kf_status st = kf_blt_library_check("libkf_no_such_cublaslt.so.99", NULL, 0, err);
    assert_int_equal(st, KF_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "cuBLASLt not found"));
    assert_non_null(strstr(err, "KF_CUBLASLT_LIB"));
}

/* The library opened on a preload thread (kf_compile starts one before the
 * driver, so cuBLASLt's dlopen overlaps the device's start-up): the thread
 * runs and is waited for, whether or not a kf_blt takes its result; a
 * library it could not open is the same KF_ERR_UNSUPPORTED, message and
 * all, from kf_blt_create_preloaded (which never reaches the device then).
 * Under ASan: nothing leaks either way. */
static void test_a_preloaded_library_is_waited_for_and_its_failure_reported(void **state) {
    (void)state;
    kf_mem mem;
    kf_mem_resolve(&mem, NULL);
    char err[KF_MSG_MAX] = "";
    if (kf_blt_library_check(NULL, NULL, 0, err) != KF_OK) {
        fprintf(stderr, "no libcublasLt on this machine: skipped (%s)\n", err);
        skip();
    }
    kf_blt_preload *pre = NULL;
    assert_int_equal(kf_blt_preload_start(&mem, NULL, &pre), KF_OK);
    assert_non_null(pre);
    double ms = kf_blt_preload_finish(pre);
    assert_true(ms >= 0 && ms < 60e3);
    assert_true(kf_blt_preload_finish(NULL) == 0);
    assert_int_equal(kf_blt_preload_start(NULL, NULL, &pre), KF_ERR_INVALID_ARGUMENT);

    pre = NULL;
    assert_int_equal(kf_blt_preload_start(&mem, "libkf_no_such_cublaslt.so.99", &pre), KF_OK);
    assert_non_null(pre);
    kf_cuda_device dev; /* never used: the library fails first */
    memset(&dev, 0, sizeof dev);
    kf_blt *lt = (kf_blt *)&dev;
    double tms = -1;
    err[0] = 0;
    assert_int_equal(kf_blt_create_preloaded(&mem, &dev, NULL, pre, &tms, &lt, err),
                     KF_ERR_UNSUPPORTED);
    assert_null(lt);
    assert_true(tms >= 0);
    assert_non_null(strstr(err, "cuBLASLt not found"));
    assert_non_null(strstr(err, "libkf_no_such_cublaslt.so.99"));
}

static void test_an_operand_needs_one_unit_stride_spanning_the_other(void **state) {
    (void)state;
    kf_blt_operand rm = {.row_stride = 64, .col_stride = 1};   /* row-major [*, 64] */
    kf_blt_operand cm = {.row_stride = 1, .col_stride = 40};   /* column-major [40, *] */
    kf_blt_operand pad = {.row_stride = 96, .col_stride = 1};  /* padded rows */
    kf_blt_operand none = {.row_stride = 64, .col_stride = 2}; /* no unit stride */
    kf_blt_operand short_ld = {.row_stride = 32, .col_stride = 1};
    assert_true(kf_blt_operand_ok(&rm, 40, 64));
    assert_true(kf_blt_operand_ok(&cm, 40, 64));
    assert_true(kf_blt_operand_ok(&pad, 40, 64));
    assert_false(kf_blt_operand_ok(&none, 40, 64));
    assert_false(kf_blt_operand_ok(&short_ld, 40, 64));
    /* A single row needs no row stride. */
    kf_blt_operand row = {.row_stride = 0, .col_stride = 1};
    assert_true(kf_blt_operand_ok(&row, 1, 64));
}

static void test_epilogue_names_and_bias_variants(void **state) {
    (void)state;
    assert_string_equal(kf_blt_epilogue_name(KF_BLT_EPI_GELU_BIAS), "gelu_bias");
    assert_string_equal(kf_blt_epilogue_name(KF_BLT_EPI_COUNT), "?");
    assert_int_equal(kf_blt_epilogue_with_bias(KF_BLT_EPI_NONE), KF_BLT_EPI_BIAS);
    assert_int_equal(kf_blt_epilogue_with_bias(KF_BLT_EPI_RELU), KF_BLT_EPI_RELU_BIAS);
    assert_int_equal(kf_blt_epilogue_with_bias(KF_BLT_EPI_GELU), KF_BLT_EPI_GELU_BIAS);
    assert_int_equal(kf_blt_epilogue_with_bias(KF_BLT_EPI_BIAS), KF_BLT_EPI_BIAS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_library_opens_and_resolves_without_a_driver),
        cmocka_unit_test(test_a_missing_library_is_unsupported_and_says_what_to_do),
        cmocka_unit_test(test_a_preloaded_library_is_waited_for_and_its_failure_reported),
        cmocka_unit_test(test_an_operand_needs_one_unit_stride_spanning_the_other),
        cmocka_unit_test(test_epilogue_names_and_bias_variants),
    };
    return kf_test_run(tests);
}
