/*
 * test_nvrtc.c -- CUDA C to CUBIN through NVRTC, with no GPU needed: arch
 * strings, canonical options, CUBINs for sm_80 and sm_90a, compile errors that
 * carry the log and the kernel's name, and the dump directory (an option;
 * the KF_DUMP_DIR variable is the CLI's).
 */
#define _GNU_SOURCE 1
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kf_test.h"
#include "runtime/nvrtc.h"

static const char add_relu_src[] =
    "extern \"C\" __global__ void kf_add_relu(const float *a, const float *b, float *c, int n) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) {\n"
    "        float v = a[i] + b[i];\n"
    "        c[i] = v > 0.0f ? v : 0.0f;\n"
    "    }\n"
    "}\n";

static kf_mem mem_libc(void) {
    kf_mem m;
    kf_mem_resolve(&m, NULL);
    return m;
}

/* e_flags of a 64-bit little-endian ELF (where CUDA records the SM). */
static uint32_t elf_flags(const uint8_t *p) {
    return (uint32_t)p[48] | (uint32_t)p[49] << 8 | (uint32_t)p[50] << 16 | (uint32_t)p[51] << 24;
}

static void test_arch_strings_are_checked(void **state) {
    (void)state;
    char err[KF_MSG_MAX];
    const char *good[] = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120f"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        assert_int_equal(kf_nvrtc_arch_check(good[i], err), KF_OK);
    const char *bad[] = {"",           "sm80",    "sm_",     "sm_9",  "sm_0a",  "sm_90b",
                         "compute_90", "sm_90a ", "sm_1000", "SM_90", "sm_90aa"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(kf_nvrtc_arch_check(bad[i], err), KF_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(err, "sm_90a"));
    }
    assert_int_equal(kf_nvrtc_arch_check(NULL, err), KF_ERR_INVALID_ARGUMENT);
}

static void test_options_string_is_canonical_and_follows_the_flags(void **state) {
    (void)state;
    char buf[KF_MSG_MAX], err[KF_MSG_MAX];
    kf_nvrtc_options o = {.arch = "sm_90a"};
    assert_int_equal(kf_nvrtc_options_string(&o, buf, sizeof buf, err), KF_OK);
    assert_string_equal(buf, "--gpu-architecture=sm_90a -std=c++17 -default-device");
    o.fast_math = true;
    o.line_info = true;
    assert_int_equal(kf_nvrtc_options_string(&o, buf, sizeof buf, err), KF_OK);
    assert_string_equal(buf, "--gpu-architecture=sm_90a -std=c++17 -default-device "
                             "--use_fast_math -lineinfo");
    o.arch = "sm90";
    assert_int_equal(kf_nvrtc_options_string(&o, buf, sizeof buf, err), KF_ERR_INVALID_ARGUMENT);
}

/* Extra flags come after kfuse's own, verbatim, in the options string (and
 * so in the cache key) and in the compile; too many, or a count without the
 * array, are refused. */
static void test_extra_flags_reach_the_options_string_and_the_compile(void **state) {
    (void)state;
    kf_mem m = mem_libc();
    char buf[KF_MSG_MAX], err[KF_MSG_MAX] = "";
    const char *extra[] = {"-DKF_TEST_SCALE=3.0f", "-w"};
    kf_nvrtc_options o = {.arch = "sm_90a", .kernel_name = "kf_scaled", .extra = extra,
                          .n_extra = 2};
    assert_int_equal(kf_nvrtc_options_string(&o, buf, sizeof buf, err), KF_OK);
    assert_string_equal(buf, "--gpu-architecture=sm_90a -std=c++17 -default-device "
                             "-DKF_TEST_SCALE=3.0f -w");
    const char *src = "extern \"C\" __global__ void kf_scaled(float *x) {\n"
                      "    x[threadIdx.x] *= KF_TEST_SCALE;\n"
                      "}\n";
    kf_nvrtc_result r;
    kf_status st = kf_nvrtc_compile(&m, src, strlen(src), &o, &r, err);
    if (st != KF_OK)
        fail_msg("%s", err);
    assert_true(r.cubin_size > 64);
    kf_nvrtc_result_release(&m, &r);
    /* without the flag the macro is undefined: the compile fails */
    o.n_extra = 0;
    assert_int_equal(kf_nvrtc_compile(&m, src, strlen(src), &o, &r, err),
                     KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "KF_TEST_SCALE"));
    kf_nvrtc_result_release(&m, &r);
    o.n_extra = 100;
    assert_int_equal(kf_nvrtc_options_string(&o, buf, sizeof buf, err), KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "extra NVRTC flags"));
    o.n_extra = 1;
    o.extra = NULL;
    assert_int_equal(kf_nvrtc_compile(&m, src, strlen(src), &o, &r, err),
                     KF_ERR_INVALID_ARGUMENT);
    kf_nvrtc_result_release(&m, &r);
}

static void test_version_is_reported(void **state) {
    (void)state;
    int major = 0, minor = -1;
    assert_int_equal(kf_nvrtc_version(&major, &minor), KF_OK);
    assert_true(major >= 11);
    assert_true(minor >= 0);
    char id[32];
    assert_int_equal(kf_nvrtc_compiler_id(id, sizeof id), KF_OK);
    assert_true(strncmp(id, "nvrtc ", 6) == 0);
}

static void test_compiles_an_elementwise_kernel_to_cubin_for_sm80_and_sm90a(void **state) {
    (void)state;
    kf_mem m = mem_libc();
    char err[KF_MSG_MAX] = "";
    kf_nvrtc_result r80, r90;
    kf_nvrtc_options o = {.arch = "sm_80", .kernel_name = "kf_add_relu"};
    kf_status st = kf_nvrtc_compile(&m, add_relu_src, strlen(add_relu_src), &o, &r80, err);
    if (st != KF_OK)
        fail_msg("%s", err);
    o.arch = "sm_90a";
    st = kf_nvrtc_compile(&m, add_relu_src, strlen(add_relu_src), &o, &r90, err);
    if (st != KF_OK)
        fail_msg("%s", err);
    const uint8_t *a = r80.cubin, *b = r90.cubin;
    assert_true(r80.cubin_size > 64 && r90.cubin_size > 64);
    assert_memory_equal(a,
                        "\x7f"
                        "ELF",
                        4);
    assert_memory_equal(b,
                        "\x7f"
                        "ELF",
                        4);
    assert_int_equal(a[4], 2);                        /* ELFCLASS64 */
    assert_int_equal(a[18] | a[19] << 8, 190);        /* EM_CUDA */
    assert_int_not_equal(elf_flags(a), elf_flags(b)); /* the SM differs */
    assert_non_null(memmem(a, r80.cubin_size, "kf_add_relu", 11));
    /* deterministic: same source and options, same bytes */
    kf_nvrtc_result again;
    assert_int_equal(kf_nvrtc_compile(&m, add_relu_src, strlen(add_relu_src), &o, &again, err),
                     KF_OK);
    assert_int_equal(again.cubin_size, r90.cubin_size);
    assert_memory_equal(again.cubin, r90.cubin, r90.cubin_size);
    kf_nvrtc_result_release(&m, &again);
    kf_nvrtc_result_release(&m, &r80);
    kf_nvrtc_result_release(&m, &r90);
}

static void test_a_syntax_error_returns_the_log_and_names_the_kernel(void **state) {
    (void)state;
    kf_mem m = mem_libc();
    const char *src = "extern \"C\" __global__ void kf_broken(float *x) {\n"
                      "    x[0] = undeclared_thing + 1.0f;\n"
                      "}\n";
    char err[KF_MSG_MAX] = "";
    kf_nvrtc_result r;
    kf_nvrtc_options o = {.arch = "sm_80", .kernel_name = "kf_broken"};
    assert_int_equal(kf_nvrtc_compile(&m, src, strlen(src), &o, &r, err), KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "kf_broken"));
    assert_non_null(strstr(err, "sm_80"));
    assert_non_null(strstr(err, "undeclared_thing")); /* the log's head is in the message */
    assert_null(r.cubin);
    assert_non_null(r.log);
    assert_non_null(strstr(r.log, "undeclared_thing"));
    kf_nvrtc_result_release(&m, &r);
}

static void test_bad_arch_and_bad_kernel_names_are_refused_before_compiling(void **state) {
    (void)state;
    kf_mem m = mem_libc();
    char err[KF_MSG_MAX] = "";
    kf_nvrtc_result r;
    kf_nvrtc_options o = {.arch = "sm_9O", .kernel_name = "k"};
    assert_int_equal(kf_nvrtc_compile(&m, add_relu_src, strlen(add_relu_src), &o, &r, err),
                     KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "sm_9O"));
    o.arch = "sm_35"; /* well-formed, but long gone from NVRTC */
    assert_int_equal(kf_nvrtc_compile(&m, add_relu_src, strlen(add_relu_src), &o, &r, err),
                     KF_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "sm_35"));
    o.arch = "sm_80";
    o.kernel_name = "../evil";
    assert_int_equal(kf_nvrtc_compile(&m, add_relu_src, strlen(add_relu_src), &o, &r, err),
                     KF_ERR_INVALID_ARGUMENT);
    assert_null(r.cubin);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void test_kf_dump_dir_writes_the_source_and_the_failing_log(void **state) {
    (void)state;
    kf_mem m = mem_libc();
    char base[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(base, sizeof base, "%s/kf_nvrtc_test_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(base));
    char dump[300], env_dump[300];
    snprintf(dump, sizeof dump, "%s/dump", base);
    snprintf(env_dump, sizeof env_dump, "%s/env_dump", base);
    setenv("KF_DUMP_DIR", env_dump, 1); /* the CLI's variable: the library ignores it */
    char err[KF_MSG_MAX] = "";
    kf_nvrtc_result r;
    kf_nvrtc_options o = {.arch = "sm_90a", .kernel_name = "kf_add_relu", .dump_dir = dump};
    kf_status st = kf_nvrtc_compile(&m, add_relu_src, strlen(add_relu_src), &o, &r, err);
    kf_nvrtc_result_release(&m, &r);
    const char *bad = "__global__ void kf_bad() { nope; }\n";
    o.kernel_name = "kf_bad";
    kf_status st_bad = kf_nvrtc_compile(&m, bad, strlen(bad), &o, &r, err);
    kf_nvrtc_result_release(&m, &r);
    unsetenv("KF_DUMP_DIR");
    assert_int_equal(st, KF_OK);
    assert_int_equal(st_bad, KF_ERR_INVALID_ARGUMENT);
    struct stat sb;
    assert_int_not_equal(stat(env_dump, &sb), 0); /* nothing written where the variable says */

    char path[400], text[1024];
    snprintf(path, sizeof path, "%s/kf_add_relu.sm_90a.cu", dump);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    size_t n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = 0;
    assert_string_equal(text, add_relu_src);
    snprintf(path, sizeof path, "%s/kf_bad.sm_90a.log", dump);
    fp = fopen(path, "rb");
    assert_non_null(fp);
    n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = 0;
    assert_non_null(strstr(text, "nope"));

    /* an option says so too, without the variable */
    snprintf(dump, sizeof dump, "%s/by_option", base);
    o.kernel_name = "kf_add_relu";
    o.dump_dir = dump;
    o.arch = "sm_80";
    assert_int_equal(kf_nvrtc_compile(&m, add_relu_src, strlen(add_relu_src), &o, &r, err), KF_OK);
    kf_nvrtc_result_release(&m, &r);
    snprintf(path, sizeof path, "%s/kf_add_relu.sm_80.cu", dump);
    assert_int_equal(access(path, R_OK), 0);
    nftw(base, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

static void test_allocation_failure_returns_out_of_memory_and_leaks_nothing(void **state) {
    (void)state;
    kf_test_alloc ta;
    bool finished = false;
    for (size_t fail_at = 1; !finished && fail_at < 20; fail_at++) {
        kf_test_alloc_reset(&ta, fail_at);
        kf_allocator al = kf_test_allocator(&ta);
        kf_mem m;
        kf_mem_resolve(&m, &al);
        char err[KF_MSG_MAX] = "";
        kf_nvrtc_result r;
        kf_nvrtc_options o = {.arch = "sm_80", .kernel_name = "kf_add_relu", .line_info = true};
        kf_status st = kf_nvrtc_compile(&m, add_relu_src, strlen(add_relu_src), &o, &r, err);
        kf_nvrtc_result_release(&m, &r);
        if (st != KF_OK)
            assert_int_equal(st, KF_ERR_OUT_OF_MEMORY);
        assert_int_equal(ta.live_blocks, 0);
        assert_int_equal(ta.bad_frees, 0);
        finished = st == KF_OK && ta.failures == 0;
    }
    assert_true(finished);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arch_strings_are_checked),
        cmocka_unit_test(test_options_string_is_canonical_and_follows_the_flags),
        cmocka_unit_test(test_extra_flags_reach_the_options_string_and_the_compile),
        cmocka_unit_test(test_version_is_reported),
        cmocka_unit_test(test_compiles_an_elementwise_kernel_to_cubin_for_sm80_and_sm90a),
        cmocka_unit_test(test_a_syntax_error_returns_the_log_and_names_the_kernel),
        cmocka_unit_test(test_bad_arch_and_bad_kernel_names_are_refused_before_compiling),
        cmocka_unit_test(test_kf_dump_dir_writes_the_source_and_the_failing_log),
        cmocka_unit_test(test_allocation_failure_returns_out_of_memory_and_leaks_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
