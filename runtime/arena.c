/*
 * arena.c -- first-fit placement of buffers with live ranges (arena.h).
 *
 *   items --merge sort (bytes desc, index asc)--> order
 *         --for each in order: sweep the placed items by offset, skipping
 *           those not live at the same time--> lowest offset that fits
 *
 * The offset an item gets is the lowest one at which it clears every placed
 * item live at the same time, a value that does not depend on the order in
 * which those items are looked at. Keeping the placed items sorted by offset
 * lets one sweep find it: walk them upwards, push the candidate past each one
 * that it touches, stop at the first that begins past the candidate's end.
 * That is O(n) per item where a scan that restarts after every move is
 * O(n^2), and it gives the same offsets.
 */
#include "runtime/arena.h"

#include <string.h>

static size_t align_up(size_t v, size_t align) { return (v + align - 1) & ~(align - 1); }

/* Sorts idx[0, n) by decreasing items[].bytes, keeping the given order among
 * equal sizes (a bottom-up merge sort; tmp has n slots). */
static void sort_by_size(const kf_arena_item *items, uint32_t *idx, uint32_t *tmp, uint32_t n) {
    uint32_t *src = idx, *dst = tmp;
    for (uint64_t w = 1; w < n; w *= 2) {
        for (uint64_t lo = 0; lo < n; lo += 2 * w) {
            uint64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            uint64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) /* the right run wins only when strictly larger */
                dst[k++] = items[src[j]].bytes > items[src[i]].bytes ? src[j++] : src[i++];
            while (i < mid)
                dst[k++] = src[i++];
            while (j < hi)
                dst[k++] = src[j++];
        }
        uint32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != idx)
        memcpy(idx, src, sizeof *idx * n);
}

static bool live_together(const kf_arena_item *a, const kf_arena_item *b) {
    return !(a->last < b->first || b->last < a->first);
}

size_t kf_arena_layout(const kf_mem *mem, kf_arena_item *items, uint32_t n, size_t align,
                       bool no_reuse, kf_arena_stats *stats) {
    KF_ASSERT(align > 0 && (align & (align - 1)) == 0);
    size_t unshared = 0;
    for (uint32_t i = 0; i < n; i++) {
        KF_ASSERT(items[i].first <= items[i].last);
        KF_ASSERT(items[i].bytes <= SIZE_MAX - align);
        unshared += align_up(items[i].bytes, align);
    }
    if (stats) {
        stats->unshared = unshared;
        stats->fallback = false;
    }
    if (n == 0)
        return 0;

    /* order: the placing order; placed: the items placed so far, by offset.
     * placed doubles as the merge sort's scratch before placing starts. */
    uint32_t *order = kf_mem_calloc(mem, n, 2 * sizeof(uint32_t));
    if (!order) {
        /* No index, no reuse: every item after the one before it. */
        size_t off = 0;
        for (uint32_t i = 0; i < n; i++) {
            items[i].offset = off;
            off += align_up(items[i].bytes, align);
        }
        if (stats)
            stats->fallback = true;
        return off;
    }
    uint32_t *placed = order + n;
    for (uint32_t i = 0; i < n; i++)
        order[i] = i;
    sort_by_size(items, order, placed, n);

    size_t top = 0;
    uint32_t n_placed = 0;
    for (uint32_t a = 0; a < n; a++) {
        kf_arena_item *it = &items[order[a]];
        size_t size = align_up(it->bytes, align), off = 0;
        if (no_reuse) {
            /* Everything is live together: the placed items tile [0, top). */
            off = size ? top : 0;
        } else {
            for (uint32_t p = 0; p < n_placed; p++) {
                const kf_arena_item *o = &items[placed[p]];
                if (!live_together(it, o))
                    continue;
                if (o->offset >= off + size)
                    break; /* it fits below o, and below every later one */
                size_t end = o->offset + align_up(o->bytes, align);
                if (end > off)
                    off = end;
            }
        }
        it->offset = off;
        if (off + size > top)
            top = off + size;
        /* Keep placed sorted by offset: insert after the last one at or below off. */
        uint32_t lo = 0, hi = n_placed;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (items[placed[mid]].offset <= off)
                lo = mid + 1;
            else
                hi = mid;
        }
        memmove(placed + lo + 1, placed + lo, sizeof *placed * (n_placed - lo));
        placed[lo] = order[a];
        n_placed++;
    }
    kf_mem_free(mem, order, (size_t)n * 2 * sizeof(uint32_t));
    return top;
}
