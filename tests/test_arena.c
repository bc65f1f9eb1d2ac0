/*
 * test_arena.c -- the arena planner (runtime/arena.h) that both executors use:
 * buffers live at the same time never share bytes, buffers that are not do,
 * every offset is aligned, the layout is deterministic and equals the first
 * fit that the executors computed before they shared this code, no_reuse and
 * a failed temporary allocation both give every buffer its own bytes, and
 * empty inputs are fine. Random instances draw from kf_test.h's seeded PRNG
 * (replay a failure with the KF_TEST_SEED it prints).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kf_test.h"
#include "runtime/arena.h"

static size_t up(size_t v, size_t align) { return (v + align - 1) & ~(align - 1); }

static bool live_together(const kf_arena_item *a, const kf_arena_item *b) {
    return !(a->last < b->first || b->last < a->first);
}

static bool share_bytes(const kf_arena_item *a, const kf_arena_item *b) {
    return a->bytes && b->bytes && a->offset < b->offset + b->bytes &&
           b->offset < a->offset + a->bytes;
}

/* Fails unless no two items live together share a byte, every offset is a
 * multiple of align and every item ends within `total`. */
static void check_layout(const kf_arena_item *items, uint32_t n, size_t align, size_t total) {
    assert_int_equal(total % align, 0);
    for (uint32_t i = 0; i < n; i++) {
        if (items[i].offset % align)
            fail_msg("item %u at offset %zu: not a multiple of %zu", i, items[i].offset, align);
        if (items[i].offset + items[i].bytes > total)
            fail_msg("item %u ends at %zu past the arena's %zu bytes", i,
                     items[i].offset + items[i].bytes, total);
        for (uint32_t j = i + 1; j < n; j++)
            if (live_together(&items[i], &items[j]) && share_bytes(&items[i], &items[j]))
                fail_msg("items %u [%zu, +%zu) and %u [%zu, +%zu) are live together and overlap", i,
                         items[i].offset, items[i].bytes, j, items[j].offset, items[j].bytes);
    }
}

/* n items with sizes of 0..max_bytes (a tenth of them empty, a fifth of them
 * a few repeated sizes, so ties happen) and ranges within [0, n_groups), a
 * few of them pinned to [-1, n_groups] or [first, INT64_MAX]. */
static kf_arena_item *random_items(kf_test_rng *r, uint32_t n, int64_t n_groups, size_t max_bytes) {
    kf_arena_item *items = calloc(n ? n : 1, sizeof *items);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t kind = kf_test_next(r) % 10;
        items[i].bytes = kind == 0   ? 0
                         : kind <= 2 ? (size_t)(1 + kf_test_next(r) % 4) * 1000
                                     : (size_t)(kf_test_next(r) % max_bytes);
        int64_t a = (int64_t)(kf_test_next(r) % (uint64_t)n_groups);
        int64_t len = (int64_t)(kf_test_next(r) % 8);
        items[i].first = a;
        items[i].last = a + len < n_groups ? a + len : n_groups - 1;
        uint64_t pin = kf_test_next(r) % 50;
        if (pin == 0) {
            items[i].first = -1;
            items[i].last = n_groups;
        } else if (pin == 1) {
            items[i].last = INT64_MAX;
        }
        items[i].offset = (size_t)-1;
    }
    return items;
}

/* The first fit both executors had before they shared kf_arena_layout:
 * insertion sort by decreasing size, then for each item rescan the placed
 * ones until it clears every one live at the same time (every one, under the
 * CPU executor's no_reuse). Returns the total. */
static size_t reference_layout(kf_arena_item *items, uint32_t n, size_t align, bool no_reuse) {
    uint32_t *order = malloc(sizeof *order * (n ? n : 1));
    for (uint32_t i = 0; i < n; i++)
        order[i] = i;
    for (uint32_t a = 1; a < n; a++) {
        uint32_t v = order[a], b = a;
        while (b > 0 && items[order[b - 1]].bytes < items[v].bytes) {
            order[b] = order[b - 1];
            b--;
        }
        order[b] = v;
    }
    size_t top = 0;
    for (uint32_t a = 0; a < n; a++) {
        kf_arena_item *it = &items[order[a]];
        size_t size = up(it->bytes, align), off = 0;
        for (bool moved = true; moved;) {
            moved = false;
            for (uint32_t b = 0; b < a; b++) {
                const kf_arena_item *o = &items[order[b]];
                size_t osize = up(o->bytes, align);
                if ((no_reuse || live_together(it, o)) && off < o->offset + osize &&
                    o->offset < off + size) {
                    off = o->offset + osize;
                    moved = true;
                }
            }
        }
        it->offset = off;
        if (off + size > top)
            top = off + size;
    }
    free(order);
    return top;
}

/* The placement kf_arena_layout had before its treap: the same order, then
 * for each item a sweep of every placed item by offset (O(n) per item). */
static size_t former_sweep_layout(kf_arena_item *items, uint32_t n, size_t align) {
    uint32_t *order = malloc(sizeof *order * (n ? n : 1));
    uint32_t *placed = malloc(sizeof *placed * (n ? n : 1));
    for (uint32_t i = 0; i < n; i++)
        order[i] = i;
    for (uint32_t a = 1; a < n; a++) { /* stable: insertion sort, largest first */
        uint32_t v = order[a], b = a;
        while (b > 0 && items[order[b - 1]].bytes < items[v].bytes) {
            order[b] = order[b - 1];
            b--;
        }
        order[b] = v;
    }
    size_t top = 0;
    uint32_t n_placed = 0;
    for (uint32_t a = 0; a < n; a++) {
        kf_arena_item *it = &items[order[a]];
        size_t size = up(it->bytes, align), off = 0;
        for (uint32_t p = 0; p < n_placed; p++) {
            const kf_arena_item *o = &items[placed[p]];
            if (!live_together(it, o))
                continue;
            if (o->offset >= off + size)
                break;
            size_t end = o->offset + up(o->bytes, align);
            if (end > off)
                off = end;
        }
        it->offset = off;
        if (off + size > top)
            top = off + size;
        uint32_t lo = 0;
        while (lo < n_placed && items[placed[lo]].offset <= off)
            lo++;
        memmove(placed + lo + 1, placed + lo, sizeof *placed * (n_placed - lo));
        placed[lo] = order[a];
        n_placed++;
    }
    free(order);
    free(placed);
    return top;
}

/* n items the way programs make them, in proportions drawn per instance:
 * short-lived intermediates, long-lived ones, graph outputs live to the end
 * ([first, INT64_MAX]), inputs pinned for the whole run ([-1, n_groups]);
 * sizes random, repeated (ties), powers of two, or empty. */
static kf_arena_item *program_items(kf_test_rng *r, uint32_t n, int64_t n_groups) {
    kf_arena_item *items = calloc(n ? n : 1, sizeof *items);
    uint64_t w_long = kf_test_next(r) % 30, w_out = kf_test_next(r) % 60,
             w_pin = kf_test_next(r) % 10;
    size_t max_bytes = (size_t)1 << (8 + kf_test_next(r) % 16);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t size_kind = kf_test_next(r) % 8;
        items[i].bytes = size_kind == 0   ? 0
                         : size_kind <= 2 ? (size_t)(1 + kf_test_next(r) % 3) * 4096
                         : size_kind == 3 ? (size_t)1 << (kf_test_next(r) % 20)
                                          : (size_t)(kf_test_next(r) % max_bytes);
        int64_t a = (int64_t)(kf_test_next(r) % (uint64_t)n_groups);
        uint64_t kind = kf_test_next(r) % 100;
        int64_t len = kind < w_long ? (int64_t)(kf_test_next(r) % (uint64_t)n_groups)
                                    : (int64_t)(kf_test_next(r) % 6);
        items[i].first = a;
        items[i].last = a + len < n_groups ? a + len : n_groups - 1;
        if (kind >= 100 - w_pin) {
            items[i].first = -1;
            items[i].last = n_groups;
        } else if (kind >= 100 - w_pin - w_out) {
            items[i].last = INT64_MAX;
        }
        items[i].offset = (size_t)-1;
    }
    return items;
}

static kf_mem libc_mem(void) {
    kf_mem m;
    kf_mem_resolve(&m, NULL);
    return m;
}

static void test_items_live_together_never_share_bytes(void **state) {
    (void)state;
    kf_test_rng r = kf_test_rng_make(1);
    kf_mem mem = libc_mem();
    const uint32_t sizes[] = {1, 2, 17, 300, 3000};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        uint32_t n = sizes[s];
        kf_arena_item *items = random_items(&r, n, 1 + (int64_t)n / 10, 1 << 20);
        kf_arena_stats stats;
        size_t total = kf_arena_layout(&mem, items, n, 64, false, &stats);
        assert_false(stats.fallback);
        assert_true(total <= stats.unshared);
        check_layout(items, n, 64, total);
        free(items);
    }
}

static void test_layout_equals_the_executors_former_first_fit(void **state) {
    (void)state;
    kf_test_rng r = kf_test_rng_make(2);
    kf_mem mem = libc_mem();
    for (int round = 0; round < 40; round++) {
        uint32_t n = 1 + (uint32_t)(kf_test_next(&r) % 400);
        size_t align = round % 2 ? 256 : 64;
        bool no_reuse = round % 5 == 4;
        int64_t n_groups = 1 + (int64_t)(kf_test_next(&r) % (n / 4 + 2));
        kf_arena_item *items = random_items(&r, n, n_groups, 1 << 16);
        kf_arena_item *ref = malloc(sizeof *ref * n);
        memcpy(ref, items, sizeof *ref * n);
        size_t total = kf_arena_layout(&mem, items, n, align, no_reuse, NULL);
        size_t ref_total = reference_layout(ref, n, align, no_reuse);
        assert_int_equal(total, ref_total);
        for (uint32_t i = 0; i < n; i++)
            if (items[i].offset != ref[i].offset)
                fail_msg("round %d, item %u of %u (%zu bytes, [%lld, %lld]): offset %zu, the "
                         "former first fit gave %zu",
                         round, i, n, items[i].bytes, (long long)items[i].first,
                         (long long)items[i].last, items[i].offset, ref[i].offset);
        free(ref);
        free(items);
    }
}

/* Program-like instances of n in [lo, hi] items, five alignments: every
 * layout is correct (no two items live together share a byte, offsets
 * aligned, inside the total); where no walk reached its bound the offsets are
 * the former sweep's, exactly. Returns how many rounds were exact. */
static int place_like_the_former_sweep(uint64_t stream, int rounds, uint32_t lo, uint32_t hi,
                                       double *worst_ratio) {
    kf_test_rng r = kf_test_rng_make(stream);
    kf_mem mem = libc_mem();
    const size_t aligns[] = {1, 8, 64, 256, 4096};
    int exact = 0;
    *worst_ratio = 1;
    for (int round = 0; round < rounds; round++) {
        uint32_t n = lo + (uint32_t)(kf_test_next(&r) % (hi - lo + 1));
        size_t align = aligns[kf_test_next(&r) % 5];
        int64_t n_groups = 1 + (int64_t)(kf_test_next(&r) % (n / 2));
        kf_arena_item *items = program_items(&r, n, n_groups);
        kf_arena_item *ref = malloc(sizeof *ref * n);
        memcpy(ref, items, sizeof *ref * n);
        kf_arena_stats stats;
        size_t total = kf_arena_layout(&mem, items, n, align, false, &stats);
        size_t ref_total = former_sweep_layout(ref, n, align);
        assert_false(stats.fallback);
        check_layout(items, n, align, total);
        assert_true(total <= stats.unshared);
        if (stats.bounded) {
            double ratio = (double)total / (double)(ref_total ? ref_total : 1);
            if (ratio > *worst_ratio)
                *worst_ratio = ratio;
        } else {
            exact++;
            if (total != ref_total)
                fail_msg("round %d (%u items, align %zu): %zu bytes, the former sweep %zu", round,
                         n, align, total, ref_total);
            for (uint32_t i = 0; i < n; i++)
                if (items[i].offset != ref[i].offset)
                    fail_msg("round %d, item %u of %u (%zu bytes, [%lld, %lld]): offset %zu, the "
                             "former sweep gave %zu",
                             round, i, n, items[i].bytes, (long long)items[i].first,
                             (long long)items[i].last, items[i].offset, ref[i].offset);
        }
        free(ref);
        free(items);
    }
    return exact;
}

/* Up to 1,024 items no walk can reach its bound: first fit, exactly. */
static void test_a_thousand_items_get_the_former_sweeps_offsets(void **state) {
    (void)state;
    double worst;
    assert_int_equal(place_like_the_former_sweep(8, 30, 900, 1024, &worst), 30);
}

/* Thousands: correct always; first fit wherever no walk reached its bound
 * (the rest go above what is live with them: the peak ratio is printed). */
static void test_thousands_of_items_are_placed_correctly(void **state) {
    (void)state;
    double worst;
    int exact = place_like_the_former_sweep(10, 16, 1025, 4000, &worst);
    print_message("%d of 16 rounds first fit exactly; the others' peak at most %.4f x the former "
                  "sweep's\n",
                  exact, worst);
}

/* The walk's cost where the former sweep was quadratic: thousands of items
 * live together (the outputs of a graph, all live to the end), a chain of
 * intermediates, and a mix of both with pinned inputs. The bound, 8 n log2 n
 * steps, is far below what the former sweep took (n^2 / 2 on the first). */
static void test_outputs_live_to_the_end_are_placed_in_log_steps(void **state) {
    (void)state;
    kf_mem mem = libc_mem();
    const uint32_t n = 20000;
    const uint64_t bound = 8ull * n * 15; /* 15 > log2(20000) */
    kf_arena_item *items = calloc(n, sizeof *items);
    uint64_t steps[3];
    size_t totals[3];
    for (int shape = 0; shape < 3; shape++) {
        for (uint32_t i = 0; i < n; i++) {
            items[i].bytes = shape == 2 ? 1024 + (i % 3) * 512 : 1024;
            items[i].first = i;
            items[i].last = shape == 0 ? INT64_MAX : i + 1;
            if (shape == 2 && i % 3 == 0)
                items[i].last = INT64_MAX;
            if (shape == 2 && i % 97 == 0)
                items[i].first = -1, items[i].last = n;
        }
        kf_arena_stats stats;
        totals[shape] = kf_arena_layout(&mem, items, n, 64, false, &stats);
        steps[shape] = stats.steps;
        print_message("shape %d: %llu steps for %u items\n", shape,
                      (unsigned long long)stats.steps, n);
    }
    free(items);

    /* Any instance: no walk looks at more than max(1024, 32 log2 n) nodes,
     * and a walk that reaches that still places its item correctly. */
    kf_test_rng r = kf_test_rng_make(11);
    kf_arena_item *mixed = program_items(&r, n, 1 + (int64_t)(kf_test_next(&r) % n));
    kf_arena_stats stats;
    size_t total = kf_arena_layout(&mem, mixed, n, 256, false, &stats);
    print_message("program-like: %llu steps for %u items, %u placed by the bound\n",
                  (unsigned long long)stats.steps, n, stats.bounded);
    check_layout(mixed, n, 256, total);
    free(mixed);
    assert_true(stats.steps <= (uint64_t)n * 1024);

    assert_int_equal(totals[0], (size_t)n * 1024); /* all live together: end to end */
    assert_int_equal(totals[1], 2 * 1024);         /* a chain: two slots */
    for (int shape = 0; shape < 3; shape++)
        if (steps[shape] > bound)
            fail_msg("shape %d: %llu steps to place %u items, over %llu", shape,
                     (unsigned long long)steps[shape], n, (unsigned long long)bound);
}

static void test_items_with_disjoint_ranges_share_one_slot(void **state) {
    (void)state;
    kf_mem mem = libc_mem();
    kf_arena_item items[4] = {
        {.bytes = 1000, .first = 0, .last = 0},
        {.bytes = 1000, .first = 1, .last = 1},
        {.bytes = 1000, .first = 2, .last = 3},
        {.bytes = 10, .first = 4, .last = 4},
    };
    size_t total = kf_arena_layout(&mem, items, 4, 64, false, NULL);
    assert_int_equal(total, 1024);
    for (int i = 0; i < 4; i++)
        assert_int_equal(items[i].offset, 0);
}

static void test_a_chain_reuses_the_slot_two_steps_back(void **state) {
    (void)state;
    kf_mem mem = libc_mem();
    /* t_i is written by group i and read by group i + 1: neighbours overlap,
     * t_i and t_{i+2} do not, so two slots serve the whole chain. */
    kf_arena_item items[6];
    for (int i = 0; i < 6; i++)
        items[i] = (kf_arena_item){.bytes = 4096, .first = i, .last = i + 1};
    size_t total = kf_arena_layout(&mem, items, 6, 256, false, NULL);
    assert_int_equal(total, 2 * 4096);
    for (int i = 0; i < 6; i++)
        assert_int_equal(items[i].offset, (size_t)(i % 2) * 4096);
}

static void test_every_offset_and_the_total_are_aligned(void **state) {
    (void)state;
    kf_test_rng r = kf_test_rng_make(3);
    kf_mem mem = libc_mem();
    const size_t aligns[] = {1, 8, 64, 256, 4096};
    for (size_t a = 0; a < sizeof aligns / sizeof *aligns; a++) {
        kf_arena_item *items = random_items(&r, 500, 60, 10000);
        kf_arena_stats stats;
        size_t total = kf_arena_layout(&mem, items, 500, aligns[a], false, &stats);
        check_layout(items, 500, aligns[a], total);
        size_t unshared = 0;
        for (uint32_t i = 0; i < 500; i++)
            unshared += up(items[i].bytes, aligns[a]);
        assert_int_equal(stats.unshared, unshared);
        free(items);
    }
}

static void test_the_same_items_give_the_same_layout(void **state) {
    (void)state;
    kf_test_rng r = kf_test_rng_make(4);
    kf_mem mem = libc_mem();
    kf_arena_item *a = random_items(&r, 2000, 150, 1 << 18);
    kf_arena_item *b = malloc(sizeof *b * 2000);
    memcpy(b, a, sizeof *b * 2000);
    size_t ta = kf_arena_layout(&mem, a, 2000, 64, false, NULL);
    size_t tb = kf_arena_layout(&mem, b, 2000, 64, false, NULL);
    assert_int_equal(ta, tb);
    assert_memory_equal(a, b, sizeof *b * 2000);
    free(a);
    free(b);
}

static void test_equal_sizes_are_placed_in_index_order(void **state) {
    (void)state;
    kf_mem mem = libc_mem();
    /* All live together, all the same size: the lower index goes lower. */
    kf_arena_item items[5];
    for (int i = 0; i < 5; i++)
        items[i] = (kf_arena_item){.bytes = 100, .first = 0, .last = 9};
    items[3].bytes = 200; /* the largest goes first, whatever its index */
    size_t total = kf_arena_layout(&mem, items, 5, 128, false, NULL);
    assert_int_equal(total, 256 + 4 * 128);
    assert_int_equal(items[3].offset, 0);
    assert_int_equal(items[0].offset, 256);
    assert_int_equal(items[1].offset, 384);
    assert_int_equal(items[2].offset, 512);
    assert_int_equal(items[4].offset, 640);
}

static void test_no_reuse_gives_every_item_its_own_bytes(void **state) {
    (void)state;
    kf_test_rng r = kf_test_rng_make(5);
    kf_mem mem = libc_mem();
    kf_arena_item *items = random_items(&r, 1000, 20, 50000);
    kf_arena_stats stats;
    size_t total = kf_arena_layout(&mem, items, 1000, 64, true, &stats);
    assert_false(stats.fallback);
    assert_int_equal(total, stats.unshared);
    /* Pretend everything is live together: still nothing shares a byte. */
    for (uint32_t i = 0; i < 1000; i++) {
        items[i].first = 0;
        items[i].last = 0;
    }
    check_layout(items, 1000, 64, total);
    free(items);
}

static void test_a_failed_temporary_allocation_still_gives_a_correct_layout(void **state) {
    (void)state;
    kf_test_rng r = kf_test_rng_make(6);
    kf_test_alloc counts;
    kf_test_alloc_reset(&counts, 1);
    kf_allocator hooks = kf_test_allocator(&counts);
    kf_mem mem;
    kf_mem_resolve(&mem, &hooks);
    kf_arena_item *items = random_items(&r, 700, 40, 30000);
    kf_arena_stats stats;
    size_t total = kf_arena_layout(&mem, items, 700, 256, false, &stats);
    assert_int_equal(counts.failures, 1);
    assert_true(stats.fallback);
    assert_int_equal(total, stats.unshared);
    check_layout(items, 700, 256, total);
    size_t off = 0; /* end to end, in index order */
    for (uint32_t i = 0; i < 700; i++) {
        assert_int_equal(items[i].offset, off);
        off += up(items[i].bytes, 256);
    }
    assert_int_equal(counts.live_blocks, 0);

    /* With the allocation granted, the same items reuse and free what they took. */
    kf_test_alloc_reset(&counts, 0);
    size_t reused = kf_arena_layout(&mem, items, 700, 256, false, &stats);
    assert_false(stats.fallback);
    assert_true(reused < total);
    check_layout(items, 700, 256, reused);
    assert_int_equal(counts.calls, 1);
    assert_int_equal(counts.live_blocks, 0);
    assert_int_equal(counts.bad_frees, 0);
    free(items);
}

static void test_no_items_give_an_empty_arena_without_allocating(void **state) {
    (void)state;
    kf_test_alloc counts;
    kf_test_alloc_reset(&counts, 0);
    kf_allocator hooks = kf_test_allocator(&counts);
    kf_mem mem;
    kf_mem_resolve(&mem, &hooks);
    kf_arena_stats stats = {.unshared = 123, .fallback = true};
    assert_int_equal(kf_arena_layout(&mem, NULL, 0, 64, false, &stats), 0);
    assert_int_equal(stats.unshared, 0);
    assert_false(stats.fallback);
    assert_int_equal(counts.calls, 0);
}

static void test_empty_items_take_no_space(void **state) {
    (void)state;
    kf_mem mem = libc_mem();
    kf_arena_item none[3] = {
        {.bytes = 0, .first = 0, .last = 5},
        {.bytes = 0, .first = 0, .last = 5},
        {.bytes = 0, .first = -1, .last = INT64_MAX},
    };
    kf_arena_stats stats;
    assert_int_equal(kf_arena_layout(&mem, none, 3, 64, false, &stats), 0);
    assert_int_equal(stats.unshared, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(none[i].offset, 0);

    kf_arena_item mixed[4] = {
        {.bytes = 0, .first = 0, .last = 5},
        {.bytes = 64, .first = 0, .last = 5},
        {.bytes = 0, .first = 0, .last = 5},
        {.bytes = 1, .first = 0, .last = 5},
    };
    assert_int_equal(kf_arena_layout(&mem, mixed, 4, 64, false, NULL), 128);
    check_layout(mixed, 4, 64, 128);
}

static void test_pinned_items_never_share_with_anything(void **state) {
    (void)state;
    kf_test_rng r = kf_test_rng_make(7);
    kf_mem mem = libc_mem();
    const int64_t n_groups = 30;
    kf_arena_item *items = random_items(&r, 600, n_groups, 20000);
    for (uint32_t i = 0; i < 600; i += 7) { /* the CUDA executor's inputs and outputs */
        items[i].first = -1;
        items[i].last = n_groups;
    }
    size_t total = kf_arena_layout(&mem, items, 600, 256, false, NULL);
    check_layout(items, 600, 256, total);
    for (uint32_t i = 0; i < 600; i += 7)
        for (uint32_t j = 0; j < 600; j++)
            if (j != i && share_bytes(&items[i], &items[j]))
                fail_msg("pinned item %u shares bytes with item %u", i, j);
    free(items);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_items_live_together_never_share_bytes),
        cmocka_unit_test(test_layout_equals_the_executors_former_first_fit),
        cmocka_unit_test(test_a_thousand_items_get_the_former_sweeps_offsets),
        cmocka_unit_test(test_thousands_of_items_are_placed_correctly),
        cmocka_unit_test(test_outputs_live_to_the_end_are_placed_in_log_steps),
        cmocka_unit_test(test_items_with_disjoint_ranges_share_one_slot),
        cmocka_unit_test(test_a_chain_reuses_the_slot_two_steps_back),
        cmocka_unit_test(test_every_offset_and_the_total_are_aligned),
        cmocka_unit_test(test_the_same_items_give_the_same_layout),
        cmocka_unit_test(test_equal_sizes_are_placed_in_index_order),
        cmocka_unit_test(test_no_reuse_gives_every_item_its_own_bytes),
        cmocka_unit_test(test_a_failed_temporary_allocation_still_gives_a_correct_layout),
        cmocka_unit_test(test_no_items_give_an_empty_arena_without_allocating),
        cmocka_unit_test(test_empty_items_take_no_space),
        cmocka_unit_test(test_pinned_items_never_share_with_anything),
    };
    return kf_test_run(tests);
}
