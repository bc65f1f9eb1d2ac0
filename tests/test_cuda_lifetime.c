/*
 * test_cuda_lifetime.c -- what a CUDA program owns, and whose memory it uses
 * (issue 15, items 6 and 8, on the GPU):
 *
 *   - a program outlives its graph: the graph is destroyed right after
 *     kf_compile (as a framework does), then the program runs, reports and
 *     is destroyed; its outputs are judged against a second parse of the same
 *     text, and a second run matches the first bit for bit. Run under ASan (a
 *     KF_SANITIZE build) any read of the freed graph is a use-after-free;
 *   - the CUDA executor's host memory comes from the context's allocator
 *     hooks: a counting, thread-safe hook sees the compile and the run
 *     allocate, every block is freed with the size it was allocated with,
 *     the program gives back all it took, and a failure injected at the
 *     hook's calls of a warm-cache compile and run ends in
 *     KF_ERR_OUT_OF_MEMORY (or success, where the failed call had a
 *     fallback), never a crash or a leak.
 *
 * Inputs are fresh random values (KF_TEST_SEED replays a run); outputs are
 * poisoned (NaN) before each run; NaN never passes. Without a driver or a
 * device every test is skipped with a visible message and the binary exits
 * 77 (ctest: skipped, never passed).
 */
#define _GNU_SOURCE /* open_memstream, mkdtemp */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kf_test.h"
#include "runtime/ctx.h"
#include "runtime/cuda.h"
#include "runtime/cuda_exec.h"

typedef struct gpu {
    bool have;
    char why[KF_MSG_MAX];
    char cache_dir[256]; /* shared by every test: the second compile is warm */
    bool keep_cache;     /* the caller's (KF_TEST_CACHE_DIR): not removed */
    kf_ctx *ctx;         /* holds the driver and device 0's primary context for the */
    kf_cuda_device dev;  /* whole suite, so a context created per case finds them up */
} gpu;

static gpu G;

static kf_ctx *cuda_ctx(kf_gemm_mode gemm, const kf_allocator *al) {
    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CUDA;
    o.cache_dir = G.cache_dir[0] ? G.cache_dir : NULL;
    o.gemm = gemm;
    if (al)
        o.allocator = *al;
    kf_ctx *ctx = NULL;
    assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
    return ctx;
}

static int group_setup(void **state) {
    (void)state;
    /* KF_TEST_CACHE_DIR: a cache kept between runs of the suite (a GPU
     * lease runs it twice: built plain and with ASan); else a private one,
     * removed at the end. */
    const char *keep = getenv("KF_TEST_CACHE_DIR");
    G.keep_cache = keep && *keep;
    snprintf(G.cache_dir, sizeof G.cache_dir, "%s",
             G.keep_cache ? keep : "/tmp/kf_cuda_lifetime_XXXXXX");
    if (!G.keep_cache && !mkdtemp(G.cache_dir))
        G.cache_dir[0] = 0;
    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CUDA;
    if (kf_ctx_create(&o, &G.ctx) != KF_OK)
        return -1;
    G.have = kf_cuda_exec_available(G.ctx);
    const kf_cuda_driver *drv = NULL;
    if (!G.have) {
        if (kf_ctx_cuda_driver(G.ctx, &drv, G.why) == KF_OK)
            snprintf(G.why, sizeof G.why, "the driver sees no CUDA device 0");
        return 0;
    }
    if (kf_ctx_cuda_driver(G.ctx, &drv, G.why) != KF_OK ||
        kf_cuda_device_open(drv, 0, &G.dev, G.why) != KF_OK) {
        fprintf(stderr, "device setup failed: %s\n", G.why);
        return -1;
    }
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    if (G.have)
        kf_cuda_device_close(&G.dev);
    kf_ctx_destroy(G.ctx);
    if (!G.keep_cache && G.cache_dir[0] && kf_test_remove_dir(G.cache_dir) != 0)
        fprintf(stderr, "could not remove %s\n", G.cache_dir);
    return 0;
}

#define REQUIRE_GPU()                                                                              \
    do {                                                                                           \
        if (!G.have) {                                                                             \
            fprintf(stderr, "no CUDA device: skipped (%s)\n", G.why);                              \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Graph text and bindings that do not point into a graph                     */
/* ------------------------------------------------------------------------ */

static char *read_example(const char *name, size_t *len) {
    const char *root = getenv("KF_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/examples/%s", root ? root : ".", name);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    char *buf = malloc(1 << 20);
    assert_non_null(buf);
    *len = fread(buf, 1, (1 << 20) - 1, f);
    buf[*len] = 0;
    fclose(f);
    return buf;
}

/* Bindings whose names and sizes are copies: they stay valid after the graph
 * they were made from is destroyed. */
typedef struct io {
    kf_binding *in, *out;
    size_t n_in, n_out;
    kf_dtype *out_dtype;
    size_t *out_numel;
} io;

static size_t bytes_of(const kf_tensor *t) {
    return (size_t)kf_tensor_numel(t) * kf_dtype_size(kf_tensor_dtype(t));
}

static void io_make(io *b, const kf_graph *g, uint64_t seed) {
    memset(b, 0, sizeof *b);
    b->n_in = kf_graph_input_count(g);
    b->n_out = kf_graph_output_count(g);
    b->in = calloc(b->n_in + 1, sizeof *b->in);
    b->out = calloc(b->n_out + 1, sizeof *b->out);
    b->out_dtype = calloc(b->n_out + 1, sizeof *b->out_dtype);
    b->out_numel = calloc(b->n_out + 1, sizeof *b->out_numel);
    assert_true(b->in && b->out && b->out_dtype && b->out_numel);
    kf_test_rng rng = kf_test_rng_make(seed);
    for (size_t i = 0; i < b->n_in; i++) {
        const kf_tensor *t = kf_graph_input(g, i);
        b->in[i] = (kf_binding){strdup(kf_tensor_name(t)), malloc(bytes_of(t) + 1), bytes_of(t)};
        assert_true(b->in[i].name && b->in[i].data);
        kf_test_fill_input(b->in[i].data, t, (size_t)kf_tensor_numel(t), &rng, -1, 1);
    }
    for (size_t i = 0; i < b->n_out; i++) {
        const kf_tensor *t = kf_graph_output(g, i);
        b->out[i] =
            (kf_binding){strdup(kf_graph_output_name(g, i)), malloc(bytes_of(t) + 1), bytes_of(t)};
        assert_true(b->out[i].name && b->out[i].data);
        b->out_dtype[i] = kf_tensor_dtype(t);
        b->out_numel[i] = (size_t)kf_tensor_numel(t);
    }
}

static void io_poison(io *b) {
    for (size_t i = 0; i < b->n_out; i++)
        kf_test_poison(b->out[i].data, b->out_dtype[i], b->out_numel[i]);
}

static void io_free(io *b) {
    for (size_t i = 0; i < b->n_in; i++) {
        free((void *)b->in[i].name);
        free(b->in[i].data);
    }
    for (size_t i = 0; i < b->n_out; i++) {
        free((void *)b->out[i].name);
        free(b->out[i].data);
    }
    free(b->in);
    free(b->out);
    free(b->out_dtype);
    free(b->out_numel);
}

/* Judges b's outputs with kf_graph_check on `g` (a graph equal to the
 * compiled one: the same text parsed again). */
static void judge(kf_graph *g, const io *b, const char *what) {
    kf_check_result *res = calloc(b->n_out + 1, sizeof *res);
    assert_non_null(res);
    kf_status st = kf_graph_check(g, b->in, b->n_in, b->out, b->n_out, res);
    if (st != KF_OK)
        fail_msg("%s: kf_graph_check: %s", what, kf_graph_error(g));
    for (size_t i = 0; i < b->n_out; i++)
        if (!res[i].pass) {
            print_error("%s: output %s: err %.3g, bound %.3g (ref_err %.3g)\n", what,
                        b->out[i].name, res[i].err, res[i].bound, res[i].ref_err);
            fail();
        }
    free(res);
}

static char *report_of(kf_program *p, kf_report_format f) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    assert_non_null(m);
    assert_int_equal(kf_program_report(p, f, m), KF_OK);
    fclose(m);
    return buf;
}

/* ------------------------------------------------------------------------ */
/* Item 8: a program outlives its graph                                       */
/* ------------------------------------------------------------------------ */

/* The text compiled, the graph destroyed at once; the program then runs
 * twice (the same bits), reports, and is destroyed. `sub` rewrites the text's
 * dtype (f32 -> bf16) so the generated GEMM and attention kernels run too. */
static void outlives_case(const char *example, bool bf16, kf_gemm_mode gemm) {
    size_t len = 0;
    char *text = read_example(example, &len);
    for (char *s = text; bf16 && (s = strstr(s, "f32")) != NULL; s += 4) {
        memmove(s + 4, s + 3, strlen(s + 3) + 1); /* the buffer holds 1 MiB */
        memcpy(s, "bf16", 4);
        len++;
    }
    char what[128];
    snprintf(what, sizeof what, "%s%s, gemm mode %d", example, bf16 ? " (bf16)" : "", (int)gemm);

    kf_ctx *ctx = cuda_ctx(gemm, NULL);
    kf_graph *g = NULL, *ref = NULL;
    assert_int_equal(kf_graph_parse(ctx, text, len, &g), KF_OK);
    assert_int_equal(kf_graph_parse(ctx, text, len, &ref), KF_OK);
    io b;
    io_make(&b, g, kf_test_seed() ^ (uint64_t)len);
    kf_program *p = NULL;
    if (kf_compile(ctx, g, &p) != KF_OK)
        fail_msg("%s: kf_compile: %s", what, kf_graph_error(g));
    kf_graph_destroy(g); /* the framework's pattern: the graph goes first */
    g = NULL;

    io_poison(&b);
    if (kf_program_run(p, b.in, b.n_in, b.out, b.n_out, NULL) != KF_OK)
        fail_msg("%s: run after the graph was destroyed: %s", what, kf_program_error(p));
    judge(ref, &b, what);
    void **first = calloc(b.n_out + 1, sizeof *first);
    assert_non_null(first);
    for (size_t i = 0; i < b.n_out; i++) {
        first[i] = malloc(b.out[i].size + 1);
        assert_non_null(first[i]);
        memcpy(first[i], b.out[i].data, b.out[i].size);
    }
    io_poison(&b);
    if (kf_program_run(p, b.in, b.n_in, b.out, b.n_out, NULL) != KF_OK)
        fail_msg("%s: second run: %s", what, kf_program_error(p));
    for (size_t i = 0; i < b.n_out; i++) {
        if (memcmp(first[i], b.out[i].data, b.out[i].size) != 0)
            fail_msg("%s: output %s differs between two runs", what, b.out[i].name);
        free(first[i]);
    }
    free(first);

    /* The report reads the program's own copy of the graph; its cost
     * columns are filled for the GPU it runs on (issue 15 item 3). */
    char *txt = report_of(p, KF_REPORT_TEXT), *json = report_of(p, KF_REPORT_JSON);
    assert_non_null(strstr(txt, "; device "));
    assert_null(strstr(txt, " -            -"));
    assert_non_null(strstr(json, "\"kfuse.report/2\""));
    assert_non_null(strstr(json, b.out[0].name));
    free(txt);
    free(json);
    assert_true(kf_program_kernel_count(p) >= 1);
    kf_program_destroy(p);

    kf_graph_destroy(ref);
    kf_ctx_destroy(ctx);
    io_free(&b);
    free(text);
}

static void test_a_cuda_program_runs_and_reports_after_its_graph_is_destroyed(void **state) {
    (void)state;
    REQUIRE_GPU();
    /* f32: cuBLASLt GEMMs, the unfused attention; bf16: the generated GEMM
     * (forced, and as measured), fused attention */
    outlives_case("mlp.kfg", false, KF_GEMM_AUTO);
    outlives_case("block.kfg", false, KF_GEMM_AUTO);
    outlives_case("llama_block.kfg", false, KF_GEMM_AUTO);
    outlives_case("gpt2_block.kfg", false, KF_GEMM_GENERATED);
    outlives_case("gpt2_block.kfg", false, KF_GEMM_MEASURED);
    outlives_case("llama_block.kfg", true, KF_GEMM_GENERATED);
}

/* A program compiled, its graph destroyed, and the program destroyed without
 * ever running: nothing it frees may lie in the graph. */
static void test_a_cuda_program_that_never_ran_is_destroyed_after_its_graph(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *files[] = {"mlp.kfg", "block.kfg", "gpt2_block.kfg", "llama_block.kfg"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        size_t len = 0;
        char *text = read_example(files[f], &len);
        kf_ctx *ctx = cuda_ctx(KF_GEMM_AUTO, NULL);
        kf_graph *g = NULL;
        assert_int_equal(kf_graph_parse(ctx, text, len, &g), KF_OK);
        kf_program *p = NULL;
        if (kf_compile(ctx, g, &p) != KF_OK)
            fail_msg("%s: kf_compile: %s", files[f], kf_graph_error(g));
        kf_graph_destroy(g);
        kf_program_destroy(p);
        kf_ctx_destroy(ctx);
        free(text);
    }
}

/* ------------------------------------------------------------------------ */
/* Item 6: the CUDA executor allocates through the context's hooks            */
/* ------------------------------------------------------------------------ */

/* kf_test.h's counting allocator behind a mutex: the CUDA compile fetches
 * CUBINs on worker threads and opens cuBLASLt on a thread of its own, and
 * they allocate through the same hooks. */
typedef struct locked_alloc {
    pthread_mutex_t lock;
    kf_test_alloc a;
} locked_alloc;

static void *locked_alloc_fn(void *user, size_t size) {
    locked_alloc *l = user;
    pthread_mutex_lock(&l->lock);
    void *p = kf_test_alloc_fn(&l->a, size);
    pthread_mutex_unlock(&l->lock);
    return p;
}

static void *locked_realloc_fn(void *user, void *ptr, size_t old_size, size_t new_size) {
    locked_alloc *l = user;
    pthread_mutex_lock(&l->lock);
    void *p = kf_test_realloc_fn(&l->a, ptr, old_size, new_size);
    pthread_mutex_unlock(&l->lock);
    return p;
}

static void locked_free_fn(void *user, void *ptr, size_t size) {
    locked_alloc *l = user;
    pthread_mutex_lock(&l->lock);
    kf_test_free_fn(&l->a, ptr, size);
    pthread_mutex_unlock(&l->lock);
}

/* A snapshot of the counters, under the lock. */
static kf_test_alloc counters(locked_alloc *l) {
    pthread_mutex_lock(&l->lock);
    kf_test_alloc a = l->a;
    pthread_mutex_unlock(&l->lock);
    return a;
}

/* A bf16 GEMM with bias and gelu, a residual and an RMSNorm: generated
 * kernels only (kf_options.gemm GENERATED, sm_80 and later), so a compile
 * loads no cuBLASLt; the f32 GEMM of alloc_graph_lt runs through cuBLASLt,
 * whose handle, plans and cached algorithms are allocated through the hooks
 * too. */
#define ALLOC_GRAPH_GEN                                                                            \
    "kfg 1\n"                                                                                      \
    "x = input(bf16[200, 256])\n"                                                                  \
    "w = input(bf16[256, 384])\n"                                                                  \
    "b = input(bf16[384])\n"                                                                       \
    "r = input(bf16[200, 384])\n"                                                                  \
    "g = input(bf16[384])\n"                                                                       \
    "h = matmul(x, w)\n"                                                                           \
    "hb = add(h, b)\n"                                                                             \
    "a = gelu(hb)\n"                                                                               \
    "y = add(a, r)\n"                                                                              \
    "n = rms_norm(y, g)\n"                                                                         \
    "output n\n"
static const char alloc_graph[] = ALLOC_GRAPH_GEN;
static const char alloc_graph_lt[] = ALLOC_GRAPH_GEN "u = input(f32[64, 96])\n"
                                                     "v = input(f32[96, 80])\n"
                                                     "uv = matmul(u, v)\n"
                                                     "e = exp(uv)\n"
                                                     "output e\n";

typedef struct phase_counts {
    size_t calls, live_bytes, live_blocks;
} phase_counts;

static phase_counts snap(locked_alloc *l) {
    kf_test_alloc a = counters(l);
    return (phase_counts){a.calls, a.live_bytes, a.live_blocks};
}

static void test_cuda_compile_and_run_allocate_through_the_context_hooks(void **state) {
    (void)state;
    REQUIRE_GPU();
    locked_alloc L;
    memset(&L, 0, sizeof L);
    pthread_mutex_init(&L.lock, NULL);
    kf_allocator al = {locked_alloc_fn, locked_realloc_fn, locked_free_fn, &L};
    kf_ctx *ctx = cuda_ctx(KF_GEMM_GENERATED, &al);
    kf_graph *g = NULL, *ref = NULL;
    assert_int_equal(kf_graph_parse(ctx, alloc_graph_lt, strlen(alloc_graph_lt), &g), KF_OK);
    assert_int_equal(kf_graph_parse(ctx, alloc_graph_lt, strlen(alloc_graph_lt), &ref), KF_OK);
    io b;
    io_make(&b, g, kf_test_seed() ^ 0x6a6c);

    /* Two compiles: the first fills the cache, the second reads it. Each
     * allocates through the hooks, and its program gives all of it back. */
    for (int pass = 0; pass < 2; pass++) {
        phase_counts c0 = snap(&L);
        kf_program *p = NULL;
        if (kf_compile(ctx, g, &p) != KF_OK)
            fail_msg("kf_compile: %s", kf_graph_error(g));
        phase_counts c1 = snap(&L);
        io_poison(&b);
        if (kf_program_run(p, b.in, b.n_in, b.out, b.n_out, NULL) != KF_OK)
            fail_msg("run: %s", kf_program_error(p));
        phase_counts c2 = snap(&L);
        judge(ref, &b, "the hooked context's program");
        kf_program_destroy(p);
        phase_counts c3 = snap(&L);
        print_message("%s compile: %zu hook calls, %zu bytes in %zu blocks kept by the program; "
                      "run: %zu calls\n",
                      pass ? "warm" : "cold", c1.calls - c0.calls, c1.live_bytes - c0.live_bytes,
                      c1.live_blocks - c0.live_blocks, c2.calls - c1.calls);
        /* The CUDA program (executor, recipes, kernels, arena layout, the
         * plan's copy of the graph) lives in hook memory ... */
        assert_true(c1.calls - c0.calls >= 20);
        assert_true(c1.live_blocks > c0.live_blocks);
        assert_true(c1.live_bytes > c0.live_bytes);
        /* ... and gives every block back when destroyed (the first compile
         * also leaves the context its cache and driver handles, kept for
         * the next; the second adds nothing to the context) */
        if (pass == 1) {
            assert_int_equal(c3.live_blocks, c0.live_blocks);
            assert_int_equal(c3.live_bytes, c0.live_bytes);
        }
    }
    kf_graph_destroy(g);
    kf_graph_destroy(ref);
    kf_ctx_destroy(ctx);
    kf_test_alloc a = counters(&L);
    assert_int_equal(a.live_blocks, 0);
    assert_int_equal(a.live_bytes, 0);
    assert_int_equal(a.bad_frees, 0);
    io_free(&b);
    pthread_mutex_destroy(&L.lock);
}

/* One hooked compile and run of alloc_graph from a warm cache, the hook's
 * `fail_at`-th call failing (0: none). Returns the status of the first call
 * that failed, or KF_OK; *calls: the hook's calls. Every byte comes back. */
static kf_status hooked_compile_run(size_t fail_at, bool fail_after, size_t *calls, io *b,
                                    kf_graph *ref) {
    locked_alloc L;
    memset(&L, 0, sizeof L);
    pthread_mutex_init(&L.lock, NULL);
    kf_allocator al = {locked_alloc_fn, locked_realloc_fn, locked_free_fn, &L};
    kf_ctx *ctx = cuda_ctx(KF_GEMM_GENERATED, &al);
    kf_graph *g = NULL;
    kf_status st = kf_graph_parse(ctx, alloc_graph, strlen(alloc_graph), &g);
    assert_int_equal(st, KF_OK); /* the failures start after the parse */
    pthread_mutex_lock(&L.lock);
    size_t base = L.a.calls;
    L.a.fail_at = fail_at ? base + fail_at : 0;
    L.a.fail_after = fail_after;
    pthread_mutex_unlock(&L.lock);
    kf_program *p = NULL;
    st = kf_compile(ctx, g, &p);
    if (st == KF_OK) {
        io_poison(b);
        st = kf_program_run(p, b->in, b->n_in, b->out, b->n_out, NULL);
        if (st == KF_OK && !fail_at)
            judge(ref, b, "the hooked run");
    } else {
        assert_null(p);
        if (!*kf_graph_error(g)) /* the status alone does not say what ran out */
            fail_msg("allocation %zu failing%s: %s with no message on the graph", fail_at,
                     fail_after ? " for good" : "", kf_status_str(st));
    }
    kf_program_destroy(p);
    pthread_mutex_lock(&L.lock);
    *calls = L.a.calls - base;
    L.a.fail_at = 0;
    pthread_mutex_unlock(&L.lock);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    kf_test_alloc a = counters(&L);
    if (a.live_blocks || a.live_bytes || a.bad_frees)
        fail_msg("allocation %zu failing%s: %zu blocks (%zu bytes) not freed, %zu bad frees",
                 fail_at, fail_after ? " for good" : "", a.live_blocks, a.live_bytes, a.bad_frees);
    pthread_mutex_destroy(&L.lock);
    return st;
}

static void test_cuda_compile_and_run_fail_cleanly_when_a_hook_allocation_fails(void **state) {
    (void)state;
    REQUIRE_GPU();
    kf_ctx *ctx = cuda_ctx(KF_GEMM_GENERATED, NULL);
    kf_graph *ref = NULL;
    assert_int_equal(kf_graph_parse(ctx, alloc_graph, strlen(alloc_graph), &ref), KF_OK);
    io b;
    io_make(&b, ref, kf_test_seed() ^ 0x6661);
    size_t total = 0;
    assert_int_equal(hooked_compile_run(0, false, &total, &b, ref), KF_OK); /* fills the cache */
    assert_int_equal(hooked_compile_run(0, false, &total, &b, ref), KF_OK); /* warm: counted */
    assert_true(total >= 20);
    /* Every call up to 40, then a stride over the rest: about 80 failure
     * points, each failing once and for good (a warm compile is a few ms;
     * a failure that makes it compile a kernel again costs seconds, so the
     * loop also stops after 30 s, and says so). */
    size_t stride = total > 80 ? (total - 40) / 40 + 1 : 1, n_oom = 0, n_ok = 0, tried = 0;
    size_t last = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t k = 1; k <= total; k += k < 40 ? 1 : stride) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((double)(t1.tv_sec - t0.tv_sec) > 30.0) {
            print_message("stopped after 30 s at call %zu of %zu\n", k, total);
            break;
        }
        last = k;
        for (int after = 0; after < 2; after++) {
            size_t calls = 0;
            kf_status st = hooked_compile_run(k, after != 0, &calls, &b, ref);
            tried++;
            if (st == KF_OK)
                n_ok++;
            else if (st == KF_ERR_OUT_OF_MEMORY)
                n_oom++;
            else
                fail_msg("allocation %zu of %zu failing%s: %s, not out of memory", k, total,
                         after ? " for good" : "", kf_status_str(st));
        }
    }
    print_message("%zu hook calls in a warm compile and run; %zu failures injected (calls 1 to "
                  "%zu): %zu out of memory, %zu recovered\n",
                  total, tried, last, n_oom, n_ok);
    /* The first call's failure cannot be recovered: the program needs it. */
    assert_true(n_oom >= 1);
    kf_graph_destroy(ref);
    kf_ctx_destroy(ctx);
    io_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_cuda_program_runs_and_reports_after_its_graph_is_destroyed),
        cmocka_unit_test(test_a_cuda_program_that_never_ran_is_destroyed_after_its_graph),
        cmocka_unit_test(test_cuda_compile_and_run_allocate_through_the_context_hooks),
        cmocka_unit_test(test_cuda_compile_and_run_fail_cleanly_when_a_hook_allocation_fails),
    };
    kf_test_filter();
    int failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
    if (!G.have) {
        fprintf(stderr, "test_cuda_lifetime: no CUDA device (%s): every test skipped\n", G.why);
        return 77;
    }
    return kf_test_run_(failed);
}
