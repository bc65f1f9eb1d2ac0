/*
 * test_alloc.c -- allocation failure, end to end: the context's allocator fails
 * each allocation in turn while parsing, building, verifying and evaluating
 * examples/block.kfg, and (with the CPU backend) while compiling it from a
 * warm cache and running it. Every run must return KF_ERR_OUT_OF_MEMORY (never
 * crash, never another status; a compile whose cache read failed may still
 * succeed by compiling), a failed compile or run must say so in its message,
 * and every run must give back every byte (the counting allocator checks live
 * blocks and free sizes; ASan/LSan checks the rest).
 */
#define _GNU_SOURCE /* mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kf_test.h"
#include "kfuse.h"

typedef struct text {
    char *data;
    size_t len;
} text;

static text read_example(const char *name) {
    const char *root = getenv("KF_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/examples/%s", root ? root : ".", name);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    text t = {malloc(1 << 20), 0};
    t.len = fread(t.data, 1, 1 << 20, f);
    fclose(f);
    return t;
}

/* Host buffers for every input and output of g, inputs filled at random. */
typedef struct buffers {
    kf_binding in[64], out[16];
    size_t n_in, n_out;
} buffers;

static size_t bytes_of(const kf_tensor *t) {
    return (size_t)kf_tensor_numel(t) * kf_dtype_size(kf_tensor_dtype(t));
}

static void buffers_make(buffers *b, const kf_graph *g, uint64_t seed) {
    memset(b, 0, sizeof *b);
    kf_test_rng rng = kf_test_rng_make(seed);
    b->n_in = kf_graph_input_count(g);
    b->n_out = kf_graph_output_count(g);
    assert_true(b->n_in <= 64 && b->n_out <= 16);
    for (size_t i = 0; i < b->n_in; i++) {
        const kf_tensor *t = kf_graph_input(g, i);
        b->in[i] = (kf_binding){kf_tensor_name(t), malloc(bytes_of(t)), bytes_of(t)};
        kf_test_fill_input(b->in[i].data, t, (size_t)kf_tensor_numel(t), &rng, -1, 1);
    }
    for (size_t i = 0; i < b->n_out; i++) {
        const kf_tensor *t = kf_graph_output(g, i);
        b->out[i] = (kf_binding){kf_graph_output_name(g, i), malloc(bytes_of(t)), bytes_of(t)};
        kf_test_poison(b->out[i].data, kf_tensor_dtype(t), (size_t)kf_tensor_numel(t));
    }
}

static void buffers_free(buffers *b) {
    for (size_t i = 0; i < b->n_in; i++)
        free(b->in[i].data);
    for (size_t i = 0; i < b->n_out; i++)
        free(b->out[i].data);
}

/* One full pass: ctx, parse, verify, eval. Returns the first failing status
 * and leaves the first output's bytes in *result (if not NULL, on success). */
static kf_status run_once(const text *src, kf_allocator al, void *result, size_t result_size) {
    kf_options o;
    kf_options_init(&o);
    o.allocator = al;
    kf_ctx *ctx = NULL;
    kf_status st = kf_ctx_create(&o, &ctx);
    if (st != KF_OK)
        return st;
    kf_graph *g = NULL;
    st = kf_graph_parse(ctx, src->data, src->len, &g);
    if (st == KF_OK)
        st = kf_graph_verify(g);
    if (st == KF_OK) {
        buffers b;
        buffers_make(&b, g, 42);
        st = kf_graph_eval(g, b.in, b.n_in, b.out, b.n_out);
        if (st == KF_OK && result) {
            assert_int_equal(b.out[0].size, result_size);
            memcpy(result, b.out[0].data, result_size);
        }
        buffers_free(&b);
    }
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    return st;
}

static void check_every_allocation_failure(const char *example, bool fail_after) {
    text src = read_example(example);
    kf_test_alloc a;

    /* The reference run with an allocator that never fails. */
    kf_test_alloc_reset(&a, 0);
    size_t out_size = 16 * 64 * sizeof(float) * 64; /* generous: outputs are small */
    void *want = malloc(out_size), *got = malloc(out_size);
    kf_ctx *ctx;
    kf_graph *g;
    assert_int_equal(kf_ctx_create(NULL, &ctx), KF_OK);
    assert_int_equal(kf_graph_parse(ctx, src.data, src.len, &g), KF_OK);
    size_t first_out = bytes_of(kf_graph_output(g, 0));
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    assert_true(first_out <= out_size);
    assert_int_equal(run_once(&src, kf_test_allocator(&a), want, first_out), KF_OK);
    size_t total = a.calls;
    assert_true(total > 10);
    assert_int_equal(a.live_blocks, 0);

    size_t failed_runs = 0;
    print_message("%s: %zu allocations in a full run; failing each in turn\n", example, total);
    for (size_t n = 1; n <= total; n++) {
        kf_test_alloc_reset(&a, n);
        a.fail_after = fail_after;
        kf_status st = run_once(&src, kf_test_allocator(&a), got, first_out);
        if (a.failures == 0) {
            /* the run did not reach allocation n (fewer calls on this path) */
            assert_int_equal(st, KF_OK);
            continue;
        }
        if (st != KF_ERR_OUT_OF_MEMORY)
            fail_msg("%s: failing allocation %zu of %zu gave '%s', not out of memory", example, n,
                     total, kf_status_str(st));
        if (a.live_blocks != 0 || a.bad_frees != 0)
            fail_msg("%s: failing allocation %zu leaked %zu blocks (%zu bad frees)", example, n,
                     a.live_blocks, a.bad_frees);
        failed_runs++;
    }
    assert_int_equal(failed_runs, total);
    /* After all that, a clean run still gives the same bytes. */
    kf_test_alloc_reset(&a, 0);
    assert_int_equal(run_once(&src, kf_test_allocator(&a), got, first_out), KF_OK);
    assert_memory_equal(want, got, first_out);
    free(want);
    free(got);
    free(src.data);
}

static void test_block_fails_cleanly_at_every_single_allocation(void **state) {
    (void)state;
    check_every_allocation_failure("block.kfg", false);
}

static void test_block_fails_cleanly_when_memory_runs_out_for_good(void **state) {
    (void)state;
    check_every_allocation_failure("block.kfg", true);
}

static void test_llama_block_fails_cleanly_at_every_single_allocation(void **state) {
    (void)state;
    check_every_allocation_failure("llama_block.kfg", false);
}

#ifdef KF_HAVE_LLVM
/* ------------------------------------------------------------------------ */
/* Compile and run on the CPU target, from a warm cache                        */
/* ------------------------------------------------------------------------ */

/* One parse, kf_compile and kf_program_run of `src` for the CPU through the
 * cache at `dir`. A failure in compile or run must leave a message: on the
 * graph (kf_graph_error) or the program (kf_program_error); *where says which
 * call failed ("" when none did). */
static kf_status compile_run_once(const text *src, kf_allocator al, const char *dir,
                                  const char **where) {
    kf_options o;
    kf_options_init(&o);
    o.allocator = al;
    o.target = KF_TARGET_CPU;
    o.cache_dir = dir;
    o.num_threads = 2;
    *where = "";
    kf_ctx *ctx = NULL;
    kf_status st = kf_ctx_create(&o, &ctx);
    if (st != KF_OK)
        return st;
    kf_graph *g = NULL;
    kf_program *p = NULL;
    st = kf_graph_parse(ctx, src->data, src->len, &g);
    if (st == KF_OK) {
        st = kf_compile(ctx, g, &p);
        if (st != KF_OK) {
            *where = "kf_compile";
            if (!*kf_graph_error(g))
                fail_msg("kf_compile: %s with no message on the graph", kf_status_str(st));
        }
    }
    if (st == KF_OK) {
        buffers b;
        buffers_make(&b, g, 42);
        st = kf_program_run(p, b.in, b.n_in, b.out, b.n_out, NULL);
        if (st != KF_OK) {
            *where = "kf_program_run";
            if (!*kf_program_error(p))
                fail_msg("kf_program_run: %s with no message", kf_status_str(st));
        }
        buffers_free(&b);
    }
    kf_program_destroy(p);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    return st;
}

static void test_cpu_compile_and_run_fail_cleanly_at_every_single_allocation(void **state) {
    (void)state;
    text src = read_example("block.kfg");
    char dir[] = "/tmp/kf_alloc_cache_XXXXXX";
    assert_non_null(mkdtemp(dir));
    kf_test_alloc a;
    const char *where;
    kf_test_alloc_reset(&a, 0);
    assert_int_equal(compile_run_once(&src, kf_test_allocator(&a), dir, &where), KF_OK); /* cold */
    kf_test_alloc_reset(&a, 0);
    assert_int_equal(compile_run_once(&src, kf_test_allocator(&a), dir, &where), KF_OK); /* warm */
    size_t total = a.calls, in_compile = 0;
    assert_true(total > 10);
    assert_int_equal(a.live_blocks, 0);
    print_message("block.kfg: %zu allocations in a warm CPU compile and run; failing each\n",
                  total);
    for (size_t n = 1; n <= total; n++) {
        kf_test_alloc_reset(&a, n);
        kf_status st = compile_run_once(&src, kf_test_allocator(&a), dir, &where);
        if (a.failures == 0) {
            assert_int_equal(st, KF_OK);
            continue;
        }
        /* a failed cache read falls back to compiling (st OK); else out of memory */
        if (st != KF_OK && st != KF_ERR_OUT_OF_MEMORY)
            fail_msg("failing allocation %zu of %zu gave '%s', not out of memory", n, total,
                     kf_status_str(st));
        if (a.live_blocks != 0 || a.bad_frees != 0)
            fail_msg("failing allocation %zu leaked %zu blocks (%zu bad frees)", n, a.live_blocks,
                     a.bad_frees);
        in_compile += strcmp(where, "kf_compile") == 0;
    }
    assert_true(in_compile > 0);
    assert_int_equal(kf_test_remove_dir(dir), 0);
    free(src.data);
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_fails_cleanly_at_every_single_allocation),
        cmocka_unit_test(test_block_fails_cleanly_when_memory_runs_out_for_good),
        cmocka_unit_test(test_llama_block_fails_cleanly_at_every_single_allocation),
#ifdef KF_HAVE_LLVM
        cmocka_unit_test(test_cpu_compile_and_run_fail_cleanly_at_every_single_allocation),
#endif
    };
    return cmocka_run_group_tests_name("alloc", tests, NULL, NULL);
}
