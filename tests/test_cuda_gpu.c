/*
 * test_cuda_gpu.c -- the Driver API on a real GPU: open the device, compile a
 * kernel with NVRTC for the arch the dispatch picks, load it, launch it, and
 * compare with the host; plus the failures a caller meets (unknown function,
 * a CUBIN for another arch, a bad image) naming the kernel; and on Hopper
 * (compute capability 9.x) the launches the GEMM and attention templates
 * need: a 3-D grid in thread-block clusters, checked block by block through
 * the cluster's special registers and distributed shared memory, and TMA
 * tiles loaded through a tensor map passed by value, with and without the
 * 128-byte swizzle, compared element by element with the source.
 *
 * Without a driver or a device every test is skipped with a visible message
 * ("no CUDA driver: skipped") and the binary exits 77, which ctest reports as
 * skipped, never as passed. Run on a GPU machine with `ctest -R cuda`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_hopper_kernels.h"
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

#define REQUIRE_SM90()                                                                             \
    do {                                                                                           \
        REQUIRE_GPU();                                                                             \
        if (G.dev.cc_major < 9) {                                                                  \
            fprintf(stderr, "%s is compute capability %d.%d, not 9.x: skipped\n", G.dev.name,      \
                    G.dev.cc_major, G.dev.cc_minor);                                               \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* Compiles `src` for the device's arch and loads `kernel`; fails the test on error. */
static kf_cu_function load_kernel(const char *src, const char *kernel, kf_cu_module *mod) {
    kf_nvrtc_result r;
    char err[KF_MSG_MAX] = "";
    kf_nvrtc_options o = {.arch = G.dev.arch, .kernel_name = kernel};
    if (kf_nvrtc_compile(&G.mem, src, strlen(src), &o, &r, err) != KF_OK)
        fail_msg("%s", err);
    kf_status st = kf_cuda_module_load(&G.dev, r.cubin, kernel, mod, err);
    kf_nvrtc_result_release(&G.mem, &r);
    if (st != KF_OK)
        fail_msg("%s", err);
    kf_cu_function fn;
    if (kf_cuda_function(&G.dev, *mod, kernel, &fn, err) != KF_OK)
        fail_msg("%s", err);
    return fn;
}

/* Launches kf_cluster_probe over cfg's grid and checks every block's record
 * against what its blockIdx and cfg's cluster imply. */
static void run_cluster_probe(kf_cu_function fn, kf_cuda_launch_cfg *cfg) {
    char err[KF_MSG_MAX] = "";
    const unsigned *g = cfg->grid;
    unsigned c[3];
    for (int i = 0; i < 3; i++)
        c[i] = cfg->cluster[i] ? cfg->cluster[i] : 1;
    const size_t blocks = (size_t)g[0] * g[1] * g[2];
    const size_t bytes = blocks * KF_PROBE_WORDS * sizeof(unsigned);
    unsigned *h = malloc(bytes);
    memset(h, 0xff, bytes); /* poison: every word must be written */
    kf_cu_deviceptr d;
    assert_int_equal(kf_cuda_mem_alloc(&G.dev, bytes, &d, err), KF_OK);
    assert_int_equal(kf_cuda_copy_to_device(&G.dev, d, h, bytes, err), KF_OK);
    void *params[] = {&d};
    if (kf_cuda_launch(&G.dev, fn, cfg, params, err) != KF_OK)
        fail_msg("%s", err);
    if (kf_cuda_stream_sync(&G.dev, cfg->stream, cfg->kernel, err) != KF_OK)
        fail_msg("%s", err);
    assert_int_equal(kf_cuda_copy_to_host(&G.dev, h, d, bytes, err), KF_OK);
    kf_cuda_mem_free(&G.dev, d);

    size_t bad = 0;
    for (unsigned z = 0; z < g[2]; z++)
        for (unsigned y = 0; y < g[1]; y++)
            for (unsigned x = 0; x < g[0]; x++) {
                size_t b = ((size_t)z * g[1] + y) * g[0] + x;
                const unsigned *o = h + b * KF_PROBE_WORDS;
                unsigned cx = x % c[0], cy = y % c[1], cz = z % c[2];
                unsigned rank = cx + cy * c[0] + cz * c[0] * c[1];
                unsigned n = c[0] * c[1] * c[2];
                /* The peer is rank (rank + 1) % n of the same cluster. */
                unsigned pr = (rank + 1) % n;
                unsigned px = x - cx + pr % c[0], py = y - cy + (pr / c[0]) % c[1],
                         pz = z - cz + pr / (c[0] * c[1]);
                unsigned want[KF_PROBE_WORDS] = {
                    [KF_PROBE_BLOCK_X] = x,
                    [KF_PROBE_BLOCK_Y] = y,
                    [KF_PROBE_BLOCK_Z] = z,
                    [KF_PROBE_RANK] = rank,
                    [KF_PROBE_NRANK] = n,
                    [KF_PROBE_CLUSTER_DIM_X] = c[0],
                    [KF_PROBE_CLUSTER_DIM_Y] = c[1],
                    [KF_PROBE_CLUSTER_DIM_Z] = c[2],
                    [KF_PROBE_CTAID_X] = cx,
                    [KF_PROBE_CTAID_Y] = cy,
                    [KF_PROBE_CTAID_Z] = cz,
                    [KF_PROBE_CLUSTER_X] = x / c[0],
                    [KF_PROBE_CLUSTER_Y] = y / c[1],
                    [KF_PROBE_CLUSTER_Z] = z / c[2],
                    [KF_PROBE_PEER] = (unsigned)(((size_t)pz * g[1] + py) * g[0] + px + 1),
                    [KF_PROBE_TAG] = (unsigned)(b + 1),
                };
                for (int w = 0; w < KF_PROBE_WORDS; w++)
                    if (o[w] != want[w] && bad++ < 8)
                        fprintf(stderr,
                                "block (%u,%u,%u) cluster %ux%ux%u: word %d = %u, want %u\n", x, y,
                                z, c[0], c[1], c[2], w, o[w], want[w]);
            }
    free(h);
    assert_int_equal(bad, 0);
}

static void test_a_3d_grid_runs_in_2x1x1_clusters_block_by_block(void **state) {
    (void)state;
    REQUIRE_SM90();
    char err[KF_MSG_MAX] = "";
    kf_cu_module mod;
    kf_cu_function fn = load_kernel(kf_cluster_probe_src, "kf_cluster_probe", &mod);
    kf_cu_stream s;
    assert_int_equal(kf_cuda_stream_create(&G.dev, &s, err), KF_OK);
    kf_cuda_launch_cfg cfg = {.grid = {6, 3, 2},
                              .block = {32, 2, 2},
                              .stream = s,
                              .kernel = "kf_cluster_probe",
                              .cluster = {2, 1, 1}};
    run_cluster_probe(fn, &cfg);

    /* Clusters along y and z too: 2x1x1 was x only. */
    cfg.grid[0] = 4;
    cfg.grid[1] = 4;
    cfg.grid[2] = 4;
    cfg.cluster[0] = 1;
    cfg.cluster[1] = 2;
    cfg.cluster[2] = 2;
    run_cluster_probe(fn, &cfg);

    /* No cluster: the same kernel through cuLaunchKernel, each block its own
     * cluster of one. */
    memset(cfg.cluster, 0, sizeof cfg.cluster);
    cfg.grid[0] = 5;
    cfg.grid[1] = 3;
    cfg.grid[2] = 2;
    run_cluster_probe(fn, &cfg);

    /* How many 2-block clusters can be resident at once: what a persistent
     * kernel sizes its grid by; never zero for this small block. */
    cfg.cluster[0] = 2;
    cfg.grid[0] = 6;
    int clusters = 0;
    if (kf_cuda_max_active_clusters(&G.dev, fn, &cfg, &clusters, err) != KF_OK)
        fail_msg("%s", err);
    fprintf(stderr, "%s: at most %d active 2x1x1 clusters of kf_cluster_probe\n", G.dev.name,
            clusters);
    assert_true(clusters >= 1);

    /* A grid of partial clusters never reaches the driver. */
    cfg.grid[0] = 5;
    assert_int_equal(kf_cuda_launch(&G.dev, fn, &cfg, NULL, err), KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "not a multiple of the cluster"));

    kf_cuda_stream_destroy(&G.dev, s);
    kf_cuda_module_unload(&G.dev, mod);
}

/* Loads a W x H f32 tensor (rows padded to `ld` elements) tile by tile through
 * a tensor map with `swizzle`, and checks every element of every tile: the
 * source inside the tensor, zero (the map's fill) outside. */
static void run_tma_tiles(kf_cu_function fn, kf_cu_tensor_map_swizzle swizzle) {
    enum { W = 132, H = 100, LD = 136, BW = 32, BH = 64 };
    char err[KF_MSG_MAX] = "";
    const unsigned gx = (W + BW - 1) / BW, gy = (H + BH - 1) / BH;
    const size_t src_bytes = (size_t)LD * H * sizeof(float);
    const size_t tile_elems = (size_t)BW * BH, tiles_bytes = gx * gy * tile_elems * sizeof(float);
    float *src = malloc(src_bytes), *tiles = malloc(tiles_bytes);
    kf_test_rng rng = kf_test_rng_make(90 + (uint64_t)swizzle);
    for (size_t i = 0; i < (size_t)LD * H; i++)
        src[i] = (float)(kf_test_uniform(&rng) * 2 - 1);
    memset(tiles, 0xff, tiles_bytes); /* NaN: every element must be written */
    kf_cu_deviceptr dsrc, dtiles;
    assert_int_equal(kf_cuda_mem_alloc(&G.dev, src_bytes, &dsrc, err), KF_OK);
    assert_int_equal(kf_cuda_mem_alloc(&G.dev, tiles_bytes, &dtiles, err), KF_OK);
    assert_int_equal(kf_cuda_copy_to_device(&G.dev, dsrc, src, src_bytes, err), KF_OK);
    assert_int_equal(kf_cuda_copy_to_device(&G.dev, dtiles, tiles, tiles_bytes, err), KF_OK);

    kf_cuda_tmap_desc desc = {.dtype = KF_CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                              .rank = 2,
                              .dims = {W, H},
                              .strides = {LD * sizeof(float)},
                              .box = {BW, BH},
                              .swizzle = swizzle,
                              .l2_promotion = KF_CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                              .name = "src"};
    kf_cu_tensor_map map;
    if (kf_cuda_tensor_map_encode(&G.dev, &desc, dsrc, &map, err) != KF_OK)
        fail_msg("%s", err);

    kf_cu_stream s;
    assert_int_equal(kf_cuda_stream_create(&G.dev, &s, err), KF_OK);
    int box_w = BW, box_h = BH, swz = swizzle == KF_CU_TENSOR_MAP_SWIZZLE_128B;
    void *params[] = {&map, &dtiles, &box_w, &box_h, &swz};
    kf_cuda_launch_cfg cfg = {.grid = {gx, gy, 1},
                              .block = {128, 1, 1},
                              .shared_bytes = KF_TMA_TILE_SMEM(BW, BH),
                              .stream = s,
                              .kernel = "kf_tma_tile_f32"};
    if (kf_cuda_launch(&G.dev, fn, &cfg, params, err) != KF_OK)
        fail_msg("%s", err);
    if (kf_cuda_stream_sync(&G.dev, s, "kf_tma_tile_f32", err) != KF_OK)
        fail_msg("%s", err);
    assert_int_equal(kf_cuda_copy_to_host(&G.dev, tiles, dtiles, tiles_bytes, err), KF_OK);

    size_t bad = 0;
    for (unsigned by = 0; by < gy; by++)
        for (unsigned bx = 0; bx < gx; bx++)
            for (unsigned r = 0; r < BH; r++)
                for (unsigned c = 0; c < BW; c++) {
                    unsigned x = bx * BW + c, y = by * BH + r;
                    float got = tiles[((size_t)by * gx + bx) * tile_elems + (size_t)r * BW + c];
                    float want = x < W && y < H ? src[(size_t)y * LD + x] : 0.0f;
                    if (memcmp(&got, &want, sizeof got) != 0 && bad++ < 8)
                        fprintf(stderr, "swizzle %d: tile (%u,%u) [%u][%u] = %g, want %g\n",
                                (int)swizzle, bx, by, r, c, (double)got, (double)want);
                }
    kf_cuda_stream_destroy(&G.dev, s);
    kf_cuda_mem_free(&G.dev, dsrc);
    kf_cuda_mem_free(&G.dev, dtiles);
    free(src);
    free(tiles);
    assert_int_equal(bad, 0);
}

static void test_tma_tiles_through_a_tensor_map_by_value_match_the_source(void **state) {
    (void)state;
    REQUIRE_SM90();
    kf_cu_module mod;
    kf_cu_function fn = load_kernel(kf_tma_tile_src, "kf_tma_tile_f32", &mod);
    run_tma_tiles(fn, KF_CU_TENSOR_MAP_SWIZZLE_NONE);
    run_tma_tiles(fn, KF_CU_TENSOR_MAP_SWIZZLE_128B);
    kf_cuda_module_unload(&G.dev, mod);
}

/* A bad description is refused before the driver, naming the field. */
static void test_a_bad_tensor_map_is_refused_before_the_driver(void **state) {
    (void)state;
    REQUIRE_GPU();
    char err[KF_MSG_MAX] = "";
    kf_cuda_tmap_desc desc = {.dtype = KF_CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                              .rank = 2,
                              .dims = {64, 64},
                              .strides = {260}, /* not a multiple of 16 */
                              .box = {32, 32},
                              .name = "x"};
    kf_cu_tensor_map map;
    assert_int_equal(kf_cuda_tensor_map_encode(&G.dev, &desc, 1u << 20, &map, err),
                     KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "strides[0] = 260"));
    /* Before Hopper a valid description is unsupported, saying why. */
    desc.strides[0] = 256;
    if (G.dev.cc_major < 9) {
        assert_int_equal(kf_cuda_tensor_map_encode(&G.dev, &desc, 1u << 20, &map, err),
                         KF_ERR_UNSUPPORTED);
        assert_non_null(strstr(err, "compute capability 9.0"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_device_reports_its_compute_capability_and_dispatch_arch),
        cmocka_unit_test(test_an_nvrtc_kernel_loads_launches_and_matches_the_host),
        cmocka_unit_test(test_a_module_global_is_set_after_loading),
        cmocka_unit_test(test_an_unknown_function_is_not_found_and_named),
        cmocka_unit_test(test_a_cubin_for_another_arch_is_refused_naming_the_kernel),
        cmocka_unit_test(test_a_3d_grid_runs_in_2x1x1_clusters_block_by_block),
        cmocka_unit_test(test_tma_tiles_through_a_tensor_map_by_value_match_the_source),
        cmocka_unit_test(test_a_bad_tensor_map_is_refused_before_the_driver),
    };
    int failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
    if (failed == 0 && !G.drv) {
        fprintf(stderr, "no CUDA driver: skipped (%s)\n", G.why);
        return 77; /* ctest: SKIP_RETURN_CODE */
    }
    return failed;
}
