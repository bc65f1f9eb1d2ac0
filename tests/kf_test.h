/*
 * kf_test.h -- helpers every kfuse test suite shares (header-only).
 *
 *   - a seeded PRNG (splitmix64). The seed comes from $KF_TEST_SEED, else the
 *     clock; kf_test_run() prints it when any test failed, and
 *     kf_test_assert_close() prints it in its failure message, so a failing
 *     random run can be replayed with KF_TEST_SEED=N; KF_TEST_FILTER=pattern
 *     runs only the matching tests (kf_test_filter);
 *   - random fills, poison fills (NaN for floats, 0xA5 bytes otherwise) and
 *     loads for host buffers in any dtype's storage format;
 *   - the relative error ||out - ref|| / ||ref|| (any NaN fails) against the
 *     per-dtype tolerance table of ir/eval.c (kf_ir_tolerance), for results
 *     compared with the reference directly; a backend's outputs are judged
 *     with kf_graph_check instead;
 *   - a counting, failing allocator: it fails the Nth allocation, counts live
 *     blocks and bytes, and checks that every free passes the size that was
 *     allocated.
 *
 * Include after <cmocka.h>'s prerequisites; this header includes cmocka.h.
 * It uses the public API (kfuse.h) and, for the tolerance table and the
 * relative error, ir/ir.h.
 */
#ifndef KF_TEST_H
#define KF_TEST_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "ir/ir.h"
#include "kfuse.h"

/* ------------------------------------------------------------------------ */
/* Files                                                                      */
/* ------------------------------------------------------------------------ */

/* Removes the directory tree `dir` (a test's scratch cache); 0 on success. */
static inline int kf_test_remove_dir(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

/* ------------------------------------------------------------------------ */
/* Seed and PRNG                                                              */
/* ------------------------------------------------------------------------ */

/* The run's seed: $KF_TEST_SEED (decimal or 0x hex), else from the clock.
 * Fixed at the first call. */
static inline uint64_t kf_test_seed(void) {
    static uint64_t seed;
    static bool init;
    if (!init) {
        const char *env = getenv("KF_TEST_SEED");
        if (env && *env)
            seed = (uint64_t)strtoull(env, NULL, 0);
        else
            seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
        init = true;
    }
    return seed;
}

typedef struct kf_test_rng {
    uint64_t state;
} kf_test_rng;

/* A generator for one test: the run's seed mixed with a per-test stream id,
 * so tests stay independent of each other's draws. */
static inline kf_test_rng kf_test_rng_make(uint64_t stream) {
    kf_test_rng r = {kf_test_seed() ^ (stream * 0x9E3779B97F4A7C15ull)};
    return r;
}

static inline uint64_t kf_test_next(kf_test_rng *r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double kf_test_uniform(kf_test_rng *r) {
    return (double)(kf_test_next(r) >> 11) * 0x1p-53;
}

/* Uniform in [lo, hi). */
static inline double kf_test_range(kf_test_rng *r, double lo, double hi) {
    return lo + (hi - lo) * kf_test_uniform(r);
}

/* ------------------------------------------------------------------------ */
/* Host buffers in storage format                                             */
/* ------------------------------------------------------------------------ */

/* Element i of a buffer in dtype d, as a double. */
static inline double kf_test_load(const void *buf, kf_dtype d, size_t i) {
    switch (d) {
    case KF_DTYPE_F32:
        return ((const float *)buf)[i];
    case KF_DTYPE_F16:
        return kf_f16_to_f32(((const uint16_t *)buf)[i]);
    case KF_DTYPE_BF16:
        return kf_bf16_to_f32(((const uint16_t *)buf)[i]);
    case KF_DTYPE_F64:
        return ((const double *)buf)[i];
    case KF_DTYPE_I32:
        return ((const int32_t *)buf)[i];
    case KF_DTYPE_BOOL:
        return ((const uint8_t *)buf)[i] != 0;
    default:
        return NAN;
    }
}

/* Stores v (already in range for i32/bool) as element i in dtype d. */
static inline void kf_test_store(void *buf, kf_dtype d, size_t i, double v) {
    switch (d) {
    case KF_DTYPE_F32:
        ((float *)buf)[i] = (float)v;
        break;
    case KF_DTYPE_F16:
        ((uint16_t *)buf)[i] = kf_f32_to_f16((float)v);
        break;
    case KF_DTYPE_BF16:
        ((uint16_t *)buf)[i] = kf_f32_to_bf16((float)v);
        break;
    case KF_DTYPE_F64:
        ((double *)buf)[i] = v;
        break;
    case KF_DTYPE_I32:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case KF_DTYPE_BOOL:
        ((uint8_t *)buf)[i] = v != 0.0;
        break;
    case KF_DTYPE_I64:
        ((int64_t *)buf)[i] = (int64_t)v;
        break;
    default:
        break;
    }
}

/* Fills n elements with uniform values in [lo, hi): floats as is (rounded to
 * the dtype), i32 as integers in [ceil(lo), floor(hi)) (clamped to i32), bool
 * as fair coin flips. */
static inline void kf_test_fill(void *buf, kf_dtype d, size_t n, kf_test_rng *r, double lo,
                                double hi) {
    for (size_t i = 0; i < n; i++) {
        double v = kf_test_range(r, lo, hi);
        if (d == KF_DTYPE_I64) {
            v = floor(v);
        } else if (d == KF_DTYPE_I32) {
            v = floor(v);
            v = v < -2147483648.0 ? -2147483648.0 : v > 2147483647.0 ? 2147483647.0 : v;
        } else if (d == KF_DTYPE_BOOL) {
            v = (double)(kf_test_next(r) & 1u);
        }
        kf_test_store(buf, d, i, v);
    }
}

/* Fills graph input t (n elements): a gather's indices uniformly over the
 * shortest axis they index (kf_ir_index_bound), so the CPU target's range
 * check passes; anything else as kf_test_fill(lo, hi). */
static inline void kf_test_fill_input(void *buf, const kf_tensor *t, size_t n, kf_test_rng *r,
                                      double lo, double hi) {
    int64_t bound = kf_ir_index_bound(t->graph, t);
    if (bound > 0)
        kf_test_fill(buf, t->dtype, n, r, 0, (double)bound);
    else
        kf_test_fill(buf, t->dtype, n, r, lo, hi);
}

/* Poisons n elements: a quiet NaN for float dtypes, 0xA5 bytes otherwise. */
static inline void kf_test_poison(void *buf, kf_dtype d, size_t n) {
    for (size_t i = 0; i < n; i++) {
        switch (d) {
        case KF_DTYPE_F32:
            ((float *)buf)[i] = NAN;
            break;
        case KF_DTYPE_F16:
            ((uint16_t *)buf)[i] = 0x7E00u;
            break;
        case KF_DTYPE_BF16:
            ((uint16_t *)buf)[i] = 0x7FC0u;
            break;
        case KF_DTYPE_F64:
            ((double *)buf)[i] = NAN;
            break;
        default:
            memset((char *)buf + i * kf_dtype_size(d), 0xA5, kf_dtype_size(d));
            break;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Comparing against a reference                                              */
/* ------------------------------------------------------------------------ */

/* ||out - ref||_2 / ||ref||_2 over n elements of dtype d (kf_ir_rel_err).
 * INFINITY when any element of either is NaN, or when they differ where one is
 * infinite; the absolute norm ||out - ref|| when ref is all zeros. */
static inline double kf_test_rel_err(const void *out, const void *ref, kf_dtype d, size_t n) {
    return kf_ir_rel_err(out, ref, d, (int64_t)n);
}

/* Fails the current test (printing the seed) when the relative error of out
 * against ref exceeds the dtype's tolerance. */
#define kf_test_assert_close(out, ref, d, n, what)                                                 \
    kf_test_assert_close_((out), (ref), (d), (n), (what), __FILE__, __LINE__)

static inline void kf_test_assert_close_(const void *out, const void *ref, kf_dtype d, size_t n,
                                         const char *what, const char *file, int line) {
    double err = kf_test_rel_err(out, ref, d, n);
    double tol = kf_ir_tolerance(d); /* the one table, ir/eval.c */
    if (!(err <= tol)) {
        print_error("%s:%d: %s: relative error %g exceeds the %s tolerance %g "
                    "(KF_TEST_SEED=%llu)\n",
                    file, line, what, err, kf_dtype_name(d), tol,
                    (unsigned long long)kf_test_seed());
        fail();
    }
}

/* Runs a cmocka group and prints the seed when anything failed. */
#define kf_test_run(tests)                                                                         \
    (kf_test_filter(),                                                                             \
     kf_test_run_(kf_test_run_shard_(#tests, (tests), sizeof(tests) / sizeof((tests)[0]))))

/* KF_TEST_FILTER=pattern runs only the tests whose names match (cmocka's
 * wildcards), so one case of a long suite can be rerun in seconds (a GPU
 * machine's lease, a failing random case). kf_test_run applies it; a suite
 * with its own group setup calls this before cmocka_run_group_tests. */
static inline void kf_test_filter(void) {
    const char *f = getenv("KF_TEST_FILTER");
    if (f && *f)
        cmocka_set_test_filter(f);
}

/* KF_TEST_SHARD=i/n runs only tests i, i + n, i + 2n, ... of the group
 * (0 <= i < n), so a long suite can be split over several ctest entries,
 * each under its own timeout (cmake/KfuseTests.cmake: test_attngen). A
 * malformed value fails the run rather than running everything. */
static inline int kf_test_run_shard_(const char *name, const struct CMUnitTest *tests, size_t n) {
    const char *s = getenv("KF_TEST_SHARD");
    unsigned i = 0, k = 1;
    char end = 0;
    if (s && *s && (sscanf(s, "%u/%u%c", &i, &k, &end) != 2 || k == 0 || i >= k)) {
        fprintf(stderr, "kf_test: KF_TEST_SHARD='%s' is not i/n with 0 <= i < n\n", s);
        return 1;
    }
    if (k == 1)
        return _cmocka_run_group_tests(name, tests, n, NULL, NULL);
    struct CMUnitTest *part = (struct CMUnitTest *)malloc(n * sizeof *part);
    if (!part) {
        fprintf(stderr, "kf_test: out of memory for shard %u/%u\n", i, k);
        return 1;
    }
    size_t m = 0;
    for (size_t t = i; t < n; t += k)
        part[m++] = tests[t];
    const int failed = _cmocka_run_group_tests(name, part, m, NULL, NULL);
    free(part);
    return failed;
}

static inline int kf_test_run_(int failed) {
    if (failed)
        fprintf(stderr, "kf_test: %d failed; replay with KF_TEST_SEED=%llu\n", failed,
                (unsigned long long)kf_test_seed());
    return failed;
}

/* ------------------------------------------------------------------------ */
/* A counting, failing allocator                                              */
/* ------------------------------------------------------------------------ */

/* Pass &state as kf_allocator.user (kf_test_allocator() fills the hooks).
 * fail_at = N > 0 fails the Nth allocation or reallocation (1-based) and
 * every later one while fail_after is set; 0 never fails. */
typedef struct kf_test_alloc {
    size_t fail_at;     /* 0: never fail */
    bool fail_after;    /* also fail every call after the fail_at-th */
    size_t calls;       /* alloc + realloc calls so far */
    size_t failures;    /* calls that returned NULL on purpose */
    size_t live_blocks; /* allocated and not yet freed */
    size_t live_bytes;
    size_t peak_bytes;
    size_t bad_frees; /* frees whose size differs from the allocated size */
} kf_test_alloc;

/* Each block carries a header with its size, so frees can be checked. */
typedef union kf_test_block {
    struct {
        size_t size;
        size_t magic;
    } h;
    max_align_t align;
} kf_test_block;

#define KF_TEST_MAGIC ((size_t)0x6b66757365u)

static inline bool kf_test_alloc_should_fail(kf_test_alloc *a) {
    a->calls++;
    if (a->fail_at && (a->calls == a->fail_at || (a->fail_after && a->calls > a->fail_at))) {
        a->failures++;
        return true;
    }
    return false;
}

static inline void kf_test_alloc_account(kf_test_alloc *a, size_t size) {
    a->live_blocks++;
    a->live_bytes += size;
    if (a->live_bytes > a->peak_bytes)
        a->peak_bytes = a->live_bytes;
}

static inline void *kf_test_alloc_fn(void *user, size_t size) {
    kf_test_alloc *a = (kf_test_alloc *)user;
    if (kf_test_alloc_should_fail(a) || size > SIZE_MAX - sizeof(kf_test_block))
        return NULL;
    kf_test_block *b = (kf_test_block *)malloc(sizeof *b + size);
    if (!b)
        return NULL;
    b->h.size = size;
    b->h.magic = KF_TEST_MAGIC;
    kf_test_alloc_account(a, size);
    return b + 1;
}

static inline void kf_test_free_fn(void *user, void *ptr, size_t size) {
    kf_test_alloc *a = (kf_test_alloc *)user;
    if (!ptr)
        return;
    kf_test_block *b = (kf_test_block *)ptr - 1;
    if (b->h.magic != KF_TEST_MAGIC || b->h.size != size)
        a->bad_frees++;
    a->live_blocks--;
    a->live_bytes -= b->h.size;
    b->h.magic = 0;
    free(b);
}

static inline void *kf_test_realloc_fn(void *user, void *ptr, size_t old_size, size_t new_size) {
    kf_test_alloc *a = (kf_test_alloc *)user;
    if (!ptr)
        return kf_test_alloc_fn(user, new_size);
    kf_test_block *b = (kf_test_block *)ptr - 1;
    if (b->h.magic != KF_TEST_MAGIC || b->h.size != old_size)
        a->bad_frees++;
    if (kf_test_alloc_should_fail(a) || new_size > SIZE_MAX - sizeof(kf_test_block))
        return NULL; /* the old block stays valid */
    size_t had = b->h.size;
    kf_test_block *nb = (kf_test_block *)realloc(b, sizeof *nb + new_size);
    if (!nb)
        return NULL;
    nb->h.size = new_size;
    a->live_bytes = a->live_bytes - had + new_size;
    if (a->live_bytes > a->peak_bytes)
        a->peak_bytes = a->live_bytes;
    return nb + 1;
}

/* Resets the counters and sets which allocation fails (0: none). */
static inline void kf_test_alloc_reset(kf_test_alloc *a, size_t fail_at) {
    memset(a, 0, sizeof *a);
    a->fail_at = fail_at;
}

/* Allocator hooks that account into *state. */
static inline kf_allocator kf_test_allocator(kf_test_alloc *state) {
    kf_allocator al = {kf_test_alloc_fn, kf_test_realloc_fn, kf_test_free_fn, state};
    return al;
}

#endif /* KF_TEST_H */
