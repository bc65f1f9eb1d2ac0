/*
 * test_cublaslt.c -- the cuBLASLt layer without a GPU: the library opens
 * through dlopen and every entry point resolves with no driver present (so
 * the no-driver CI exercises the loading path), a missing library is a clear
 * KF_ERR_UNSUPPORTED, the operand rules that decide the transpose flags, and
 * the disk cache's algorithm records (their bytes and their keys). On a GPU
 * (skipped without one): a cached algorithm is taken without asking the
 * heuristic, and a damaged record or another device's key falls back to it. The programs'
 * GEMMs run in test_cuda_exec.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* The record: the algorithm's 64 bytes and its workspace come back as
 * written; a record of another length, tag or an oversized workspace is
 * refused and writes nothing. */
static void test_an_algorithm_record_round_trips_and_a_damaged_one_is_refused(void **state) {
    (void)state;
    kf_test_rng r = kf_test_rng_make(1);
    uint64_t algo[KF_BLT_ALGO_WORDS], back[KF_BLT_ALGO_WORDS], ws = 0;
    for (int i = 0; i < KF_BLT_ALGO_WORDS; i++)
        algo[i] = kf_test_next(&r);
    unsigned char rec[KF_BLT_ALGO_RECORD_BYTES + 1];
    assert_int_equal(kf_blt_algo_record_pack(algo, 4096, rec), KF_BLT_ALGO_RECORD_BYTES);
    assert_memory_equal(rec, "kfltalg1", 8);
    assert_true(kf_blt_algo_record_unpack(rec, KF_BLT_ALGO_RECORD_BYTES, back, &ws));
    assert_memory_equal(back, algo, sizeof algo);
    assert_int_equal(ws, 4096);

    memset(back, 0xAB, sizeof back);
    ws = 7;
    uint64_t poison[KF_BLT_ALGO_WORDS];
    memset(poison, 0xAB, sizeof poison);
    assert_false(kf_blt_algo_record_unpack(rec, KF_BLT_ALGO_RECORD_BYTES - 1, back, &ws));
    assert_false(kf_blt_algo_record_unpack(rec, KF_BLT_ALGO_RECORD_BYTES + 1, back, &ws));
    assert_false(kf_blt_algo_record_unpack(NULL, KF_BLT_ALGO_RECORD_BYTES, back, &ws));
    for (int byte = 0; byte < 8; byte++) { /* every byte of the tag matters */
        rec[byte] ^= 0x20;
        assert_false(kf_blt_algo_record_unpack(rec, KF_BLT_ALGO_RECORD_BYTES, back, &ws));
        rec[byte] ^= 0x20;
    }
    kf_blt_algo_record_pack(algo, (uint64_t)KF_BLT_WORKSPACE_BYTES + 1, rec);
    assert_false(kf_blt_algo_record_unpack(rec, KF_BLT_ALGO_RECORD_BYTES, back, &ws));
    assert_memory_equal(back, poison, sizeof poison); /* nothing written */
    assert_int_equal(ws, 7);
    kf_blt_algo_record_pack(algo, KF_BLT_WORKSPACE_BYTES, rec); /* the limit itself is fine */
    assert_true(kf_blt_algo_record_unpack(rec, KF_BLT_ALGO_RECORD_BYTES, back, &ws));
}

static kf_blt_gemm gemm_f32(int64_t m, int64_t n, int64_t k, kf_cu_deviceptr base) {
    kf_blt_gemm g;
    memset(&g, 0, sizeof g);
    g.dtype = KF_DTYPE_F32;
    g.m = m, g.n = n, g.k = k, g.batch = 1;
    g.a = (kf_blt_operand){base, k, 1, 0};
    g.b = (kf_blt_operand){base + (kf_cu_deviceptr)(4 * m * k), n, 1, 0};
    g.d = (kf_blt_operand){base + (kf_cu_deviceptr)(4 * (m * k + k * n)), n, 1, 0};
    g.epilogue = KF_BLT_EPI_NONE;
    g.what = "test";
    return g;
}

/* The key names what makes an algorithm valid: another device string (GPU,
 * driver), another library version, shape, epilogue or operand alignment
 * gives another key, so a record made elsewhere is never found; the same
 * GEMM gives the same key. */
static void test_the_algorithm_key_names_device_library_shape_and_alignment(void **state) {
    (void)state;
    const char *dev = "NVIDIA H200 cc 9.0 sms 132 driver 13000";
    kf_blt_gemm g = gemm_f32(64, 96, 80, 0x10000);
    kf_cache_key k0, k;
    assert_true(kf_blt_algo_key(&g, 130100, dev, &k0));
    assert_true(kf_blt_algo_key(&g, 130100, dev, &k));
    assert_memory_equal(&k, &k0, sizeof k);
    assert_true(kf_blt_algo_key(&g, 130100, "NVIDIA H100 cc 9.0 sms 132 driver 13000", &k));
    assert_memory_not_equal(&k, &k0, sizeof k);
    assert_true(kf_blt_algo_key(&g, 130100, "NVIDIA H200 cc 9.0 sms 132 driver 12080", &k));
    assert_memory_not_equal(&k, &k0, sizeof k);
    assert_true(kf_blt_algo_key(&g, 130200, dev, &k));
    assert_memory_not_equal(&k, &k0, sizeof k);
    kf_blt_gemm h = gemm_f32(64, 96, 81, 0x10000);
    assert_true(kf_blt_algo_key(&h, 130100, dev, &k));
    assert_memory_not_equal(&k, &k0, sizeof k);
    h = g;
    h.epilogue = KF_BLT_EPI_RELU;
    assert_true(kf_blt_algo_key(&h, 130100, dev, &k));
    assert_memory_not_equal(&k, &k0, sizeof k);
    h = g;
    h.a.ptr += 4; /* 4-byte aligned instead of 256 */
    assert_true(kf_blt_algo_key(&h, 130100, dev, &k));
    assert_memory_not_equal(&k, &k0, sizeof k);
}

/* ---- On a GPU ------------------------------------------------------------ */

typedef struct gpu {
    kf_mem mem;
    kf_cuda_driver *drv;
    kf_cuda_device dev;
    kf_cache *cache;
    char dir[64];
    kf_cu_deviceptr buf;
} gpu;

/* One f32 GEMM d = a.b of [m, k] x [k, n] (random a and b, d poisoned with
 * NaN first) on a new kf_blt keeping its algorithms in the cache under
 * `device`; checks d against a double-precision reference and returns the
 * kf_blt's counts and timings. */
static void gemm_once(gpu *G, int64_t m, int64_t n, int64_t k, const char *device,
                      uint32_t *cached, uint32_t *heuristics, kf_blt_timing *t) {
    char err[KF_MSG_MAX] = "";
    kf_test_rng r = kf_test_rng_make(9);
    size_t na = (size_t)(m * k), nb = (size_t)(k * n), nd = (size_t)(m * n);
    float *h = malloc(sizeof *h * (na + nb + nd));
    for (size_t i = 0; i < na + nb; i++)
        h[i] = (float)kf_test_range(&r, -1, 1);
    memset(h + na + nb, 0xFF, sizeof *h * nd); /* NaN */
    assert_int_equal(kf_cuda_copy_to_device(&G->dev, G->buf, h, sizeof *h * (na + nb + nd), err),
                     KF_OK);
    kf_blt *lt = NULL;
    if (kf_blt_create(&G->mem, &G->dev, NULL, &lt, err) != KF_OK)
        fail_msg("%s", err);
    kf_blt_set_cache(lt, G->cache, device);
    kf_blt_gemm g = gemm_f32(m, n, k, G->buf);
    if (kf_blt_matmul(lt, &g, NULL, err) != KF_OK ||
        kf_cuda_stream_sync(&G->dev, NULL, "test", err) != KF_OK)
        fail_msg("%s", err);
    float *d = malloc(sizeof *d * nd);
    assert_int_equal(kf_cuda_copy_to_host(&G->dev, d, g.d.ptr, sizeof *d * nd, err), KF_OK);
    double e2 = 0, r2 = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double ref = 0;
            for (int64_t q = 0; q < k; q++)
                ref += (double)h[i * k + q] * h[na + q * n + j];
            double v = d[i * n + j];
            if (isnan(v))
                fail_msg("d[%lld, %lld] is NaN", (long long)i, (long long)j);
            e2 += (v - ref) * (v - ref);
            r2 += ref * ref;
        }
    if (!(sqrt(e2 / r2) < 1e-5))
        fail_msg("relative error %g", sqrt(e2 / r2));
    kf_blt_algo_counts(lt, cached, heuristics);
    kf_blt_timings(lt, t);
    kf_blt_destroy(lt);
    free(d);
    free(h);
}

static void test_a_cached_algorithm_is_taken_and_a_damaged_one_falls_back(void **state) {
    (void)state;
    gpu G;
    memset(&G, 0, sizeof G);
    kf_mem_resolve(&G.mem, NULL);
    char err[KF_MSG_MAX] = "";
    if (kf_cuda_driver_load(&G.mem, NULL, &G.drv, err) != KF_OK ||
        kf_cuda_device_open(G.drv, 0, &G.dev, err) != KF_OK) {
        kf_cuda_driver_release(&G.mem, G.drv);
        fprintf(stderr, "no GPU: skipped (%s)\n", err);
        skip();
    }
    if (kf_blt_library_check(NULL, NULL, 0, err) != KF_OK)
        fail_msg("a GPU but no cuBLASLt: %s", err);
    snprintf(G.dir, sizeof G.dir, "/tmp/kf_ltalgo_XXXXXX");
    assert_non_null(mkdtemp(G.dir));
    kf_cache_options co = {.dir = G.dir};
    kf_cache_msg msg;
    assert_int_equal(kf_cache_open(&G.mem, &co, &G.cache, &msg), KF_OK);
    assert_int_equal(kf_cuda_mem_alloc(&G.dev, (size_t)4 << 20, &G.buf, err), KF_OK);
    const char *dev = "this GPU";
    uint32_t cached, heur;
    kf_blt_timing t;

    /* cold: the heuristic, stored */
    gemm_once(&G, 64, 96, 80, dev, &cached, &heur, &t);
    assert_int_equal(cached, 0);
    assert_int_equal(heur, 1);
    assert_true(t.dlopen_ms >= 0 && t.create_ms > 0 && t.heuristic_ms > 0);
    /* warm: from the cache, checked, no heuristic */
    gemm_once(&G, 64, 96, 80, dev, &cached, &heur, &t);
    assert_int_equal(cached, 1);
    assert_int_equal(heur, 0);
    assert_int_equal(t.refused, 0);
    assert_true(t.algo_load_ms > 0);
    fprintf(stderr, "  warm: algo_load %.3f ms, plans %.3f ms, create %.3f ms\n", t.algo_load_ms,
            t.plans_ms, t.create_ms);

    /* a damaged record (its tag): refused unread, the heuristic's replaces it */
    kf_blt *lt = NULL;
    assert_int_equal(kf_blt_create(&G.mem, &G.dev, NULL, &lt, err), KF_OK);
    size_t version = kf_blt_version(lt);
    kf_blt_destroy(lt);
    kf_blt_gemm g = gemm_f32(64, 96, 80, G.buf);
    kf_cache_key key;
    assert_true(kf_blt_algo_key(&g, version, dev, &key));
    void *data = NULL;
    size_t len = 0;
    assert_int_equal(kf_cache_get(G.cache, &key, &data, &len, &msg), KF_OK);
    unsigned char rec[KF_BLT_ALGO_RECORD_BYTES];
    assert_int_equal(len, sizeof rec);
    memcpy(rec, data, sizeof rec);
    kf_cache_blob_free(G.cache, data, len);
    rec[3] ^= 1;
    assert_int_equal(kf_cache_put(G.cache, &key, rec, sizeof rec, &msg), KF_OK);
    gemm_once(&G, 64, 96, 80, dev, &cached, &heur, &t);
    assert_int_equal(cached, 0);
    assert_int_equal(heur, 1);
    gemm_once(&G, 64, 96, 80, dev, &cached, &heur, &t);
    assert_int_equal(cached, 1);

    /* another device string: its own key, nothing found */
    gemm_once(&G, 64, 96, 80, "another GPU", &cached, &heur, &t);
    assert_int_equal(cached, 0);
    assert_int_equal(heur, 1);

    kf_cuda_mem_free(&G.dev, G.buf);
    kf_cache_close(G.cache);
    kf_cuda_device_close(&G.dev);
    kf_cuda_driver_release(&G.mem, G.drv);
    assert_int_equal(kf_test_remove_dir(G.dir), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_library_opens_and_resolves_without_a_driver),
        cmocka_unit_test(test_a_missing_library_is_unsupported_and_says_what_to_do),
        cmocka_unit_test(test_a_preloaded_library_is_waited_for_and_its_failure_reported),
        cmocka_unit_test(test_an_operand_needs_one_unit_stride_spanning_the_other),
        cmocka_unit_test(test_epilogue_names_and_bias_variants),
        cmocka_unit_test(test_an_algorithm_record_round_trips_and_a_damaged_one_is_refused),
        cmocka_unit_test(test_the_algorithm_key_names_device_library_shape_and_alignment),
        cmocka_unit_test(test_a_cached_algorithm_is_taken_and_a_damaged_one_falls_back),
    };
    return kf_test_run(tests);
}
