/*
 * arena.h -- where each buffer of a program lies in its one arena, for the
 * CPU and the CUDA executors alike.
 *
 * An executor gives one item per buffer: its size and its live range, the
 * inclusive span [first, last] of group indices during which its bytes must
 * hold. kf_arena_layout gives every item an offset such that two items whose
 * ranges overlap never share a byte, and returns the arena's size. Items are
 * placed largest first (ties in index order), each at the lowest aligned
 * offset that clears every item already placed whose range overlaps its own
 * (first fit), found by a walk over the placed items with a bound on its
 * length; an item whose walk reaches the bound goes instead just above every
 * placed item live with it (never met by a program of up to 1,024 buffers,
 * nor by the examples and the transformer blocks; stats->bounded counts
 * them). The executors choose what the ranges mean: a buffer pinned for
 * the whole run (an input, a graph output) gets a range that covers every
 * group, e.g. [-1, n_groups] or [first, INT64_MAX].
 *
 * (Not to be confused with kf_arena in ir/ir.h, the bump allocator that owns
 * a graph's nodes: this file plans offsets, it allocates nothing that lasts.)
 */
#ifndef KF_RUNTIME_ARENA_H
#define KF_RUNTIME_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

typedef struct kf_arena_item {
    size_t bytes;        /* in: the buffer's size; 0 is allowed */
    int64_t first, last; /* in: inclusive live range in group indices, first <= last */
    size_t offset;       /* out: from the arena's base, a multiple of the alignment */
} kf_arena_item;

typedef struct kf_arena_stats {
    size_t unshared; /* the sum of the items' aligned sizes: the arena without reuse */
    bool fallback;   /* the temporary index could not be allocated: the items lie
                        end to end in index order (correct, nothing shared) */
    uint64_t steps;   /* placed items looked at while placing (the walk's cost: a
                         test bounds it, where a clock would be noise) */
    uint32_t bounded; /* items whose walk hit its bound and went above every
                         placed item live with them instead of first fit */
} kf_arena_stats;

/* Sets items[i].offset for every i < n and returns the arena's size in bytes
 * (a multiple of `align`, 0 when n is 0 or every item is empty). Items whose
 * ranges overlap never share bytes; each item's size is rounded up to `align`
 * (a power of two) before placing, so every offset is aligned. no_reuse gives
 * every item its own bytes (the size is then `unshared`). Deterministic: the
 * same items give the same offsets on every machine.
 *
 * Uses about 250 bytes per item of temporary memory from `mem` (one
 * allocation); when that allocation fails the layout falls back to no reuse
 * in index order and says so in stats->fallback. `stats` may be NULL. Cost:
 * O(n log n) to order the items; placing walks a treap of the placed items
 * by offset, taking whole runs of items live together at a step (O(log n)
 * expected per item when the items live together in runs: graph outputs,
 * pinned inputs, chains), and each walk looks at no more than
 * max(1024, 32 log2 n) nodes, the bound rule costing O(log n): O(n log n)
 * in all. */
size_t kf_arena_layout(const kf_mem *mem, kf_arena_item *items, uint32_t n, size_t align,
                       bool no_reuse, kf_arena_stats *stats);

#endif /* KF_RUNTIME_ARENA_H */
