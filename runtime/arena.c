/*
 * arena.c -- first-fit placement of buffers with live ranges (arena.h).
 *
 *   items --merge sort (bytes desc, index asc)--> order
 *         --for each in order: sweep the placed items by offset through a
 *           treap, skipping whole subtrees--> lowest offset that fits
 *           (a walk past its bound: the highest end live with it)
 *
 * The offset an item gets is the lowest one at which it clears every placed
 * item live at the same time, a value that does not depend on the order in
 * which those items are looked at. Walking the placed items upwards by offset
 * finds it: push the candidate past each one live together with it that it
 * touches, stop at the first that begins past the candidate's end. Done item
 * by item, that walk is O(n) per item, O(n^2) for a program whose thousands
 * of graph outputs all live to the end (each new one walks past all the
 * others to the top).
 *
 * So the placed items sit in a treap ordered by offset, and every subtree
 * knows its span [lo, hi), the bounds of its items' first and last group,
 * and whether its items cover the span without a hole. The walk then takes a
 * subtree in one step when it can: it skips one whose items end at or below
 * the candidate, or of which none is live with the new item; it stops at one
 * that begins past the candidate's end; and it jumps to the end of one that
 * covers its span without a hole and whose items are all live with the new
 * item. Only the rest is opened. The offsets are the item-by-item walk's,
 * exactly (tests/test_arena.c checks them against it): where the placed
 * items live together in runs -- graph outputs live to the end, inputs
 * pinned for the whole run, chains -- each item costs O(log n) expected.
 *
 * An item whose neighbours by offset alternate between live and not live
 * with it still opens them one by one, so a walk is bounded: past
 * max(KF_ARENA_WALK_MIN, 32 log2 n) nodes it stops, and the item goes just
 * above every placed item live with it, the highest end over its range of
 * groups, which a segment tree over the (compressed) group indices answers
 * in O(log n). That keeps the whole layout O(n log n). No program of up to
 * KF_ARENA_WALK_MIN buffers can reach the bound, nor did the examples, the
 * transformer blocks or the 20k-output graphs of bench/plan_scaling; on
 * synthetic mixes of 20k buffers with random sizes and lifetimes it placed
 * 0-47% of them, for a peak 0-13% above first fit's.
 */
#include "runtime/arena.h"

#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX

/* A walk looks at no more nodes than this, or 32 per level of the treap if
 * that is more; past it the item goes above every placed item live with it
 * (exact first fit for programs of up to this many buffers). */
#define KF_ARENA_WALK_MIN 1024

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

/* A placed, non-empty item as a treap node (node i is item i), with what its
 * subtree knows. */
typedef struct node {
    uint32_t left, right, prio;
    bool solid;          /* the subtree's items cover [lo, hi) without a hole */
    size_t start, end;   /* this item's bytes, aligned: [start, end) */
    int64_t first, last; /* this item's live range */
    size_t lo, hi;       /* the subtree's: lowest start, highest end */
    int64_t first_min, first_max, last_min, last_max; /* the subtree's ranges */
} node;

typedef struct tree {
    node *nodes;
    uint32_t root;
    uint64_t steps;  /* nodes looked at, for kf_arena_stats */
    uint64_t budget; /* nodes the current walk may still look at */
    bool over;       /* the current walk ran out of budget */
} tree;

/* A fixed pseudo-random priority per index (deterministic layouts). */
static uint32_t prio_of(uint32_t i) {
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return (uint32_t)x;
}

/* Recomputes node t's subtree fields from its own item and its children. */
static void pull(node *nd, uint32_t t) {
    node *n = &nd[t];
    const node *l = n->left == NIL ? NULL : &nd[n->left];
    const node *r = n->right == NIL ? NULL : &nd[n->right];
    n->lo = l ? l->lo : n->start;
    size_t reach = n->end; /* the end of the covered run from lo through this item */
    n->solid = true;
    if (l) {
        n->solid = l->solid && n->start <= l->hi;
        if (l->hi > reach)
            reach = l->hi;
    }
    n->hi = reach;
    if (r) {
        n->solid = n->solid && r->solid && r->lo <= reach;
        if (r->hi > n->hi)
            n->hi = r->hi;
    }
    n->first_min = n->first_max = n->first;
    n->last_min = n->last_max = n->last;
    const node *kids[2] = {l, r};
    for (int k = 0; k < 2; k++) {
        if (!kids[k])
            continue;
        if (kids[k]->first_min < n->first_min)
            n->first_min = kids[k]->first_min;
        if (kids[k]->first_max > n->first_max)
            n->first_max = kids[k]->first_max;
        if (kids[k]->last_min < n->last_min)
            n->last_min = kids[k]->last_min;
        if (kids[k]->last_max > n->last_max)
            n->last_max = kids[k]->last_max;
    }
}

/* Splits t into the nodes with start <= key (*a) and the rest (*b). */
static void split(node *nd, uint32_t t, size_t key, uint32_t *a, uint32_t *b) {
    if (t == NIL) {
        *a = *b = NIL;
    } else if (nd[t].start <= key) {
        split(nd, nd[t].right, key, &nd[t].right, b);
        *a = t;
        pull(nd, t);
    } else {
        split(nd, nd[t].left, key, a, &nd[t].left);
        *b = t;
        pull(nd, t);
    }
}

/* Joins a and b, every start in a at or below every start in b. */
static uint32_t join(node *nd, uint32_t a, uint32_t b) {
    if (a == NIL)
        return b;
    if (b == NIL)
        return a;
    if (nd[a].prio >= nd[b].prio) {
        nd[a].right = join(nd, nd[a].right, b);
        pull(nd, a);
        return a;
    }
    nd[b].left = join(nd, a, nd[b].left);
    pull(nd, b);
    return b;
}

/* Adds item i, placed at [start, end), after every placed item that starts
 * at or below start. */
static void insert(tree *tr, const kf_arena_item *it, uint32_t i, size_t start, size_t end) {
    node *n = &tr->nodes[i];
    *n = (node){.left = NIL,
                .right = NIL,
                .prio = prio_of(i),
                .start = start,
                .end = end,
                .first = it->first,
                .last = it->last};
    pull(tr->nodes, i);
    uint32_t a, b;
    split(tr->nodes, tr->root, start, &a, &b);
    tr->root = join(tr->nodes, join(tr->nodes, a, i), b);
}

/* The walk over subtree t for an item of `size` bytes live in [first, last]:
 * pushes *off past every placed item in t live with it that [*off, *off +
 * size) touches, in offset order. Returns true when the walk is over (t holds
 * an item beginning at or past *off + size: so does everything after t). */
static bool walk(tree *tr, uint32_t t, int64_t first, int64_t last, size_t size, size_t *off) {
    while (t != NIL) {
        const node *n = &tr->nodes[t];
        if (tr->budget == 0) {
            tr->over = true;
            return true;
        }
        tr->budget--;
        tr->steps++;
        if (n->lo >= *off + size)
            return true;
        if (n->hi <= *off || n->first_min > last || n->last_max < first)
            return false; /* nothing in t pushes */
        if (n->solid && n->first_max <= last && n->last_min >= first) {
            *off = n->hi; /* all live with it, no hole: past the whole run */
            return false;
        }
        if (walk(tr, n->left, first, last, size, off))
            return true;
        if (n->start >= *off + size)
            return true;
        if (n->end > *off && !(n->last < first || n->first > last))
            *off = n->end;
        t = n->right; /* the right subtree, as a loop: the recursion follows left only */
    }
    return false;
}

/* The bound rule's index: a segment tree over the compressed group indices
 * (every first and last), keeping per node the highest end placed over its
 * whole span (all) and over any part of it (sub), so the highest end of the
 * placed items live at any time of a range is one O(log n) query. */
typedef struct span_tree {
    size_t *all, *sub; /* 4 * m slots each */
    const int64_t *coord;
    uint32_t m;
} span_tree;

static size_t zmax(size_t a, size_t b) { return a > b ? a : b; }

static void span_add(span_tree *st, uint32_t node, uint32_t nl, uint32_t nr, uint32_t l, uint32_t r,
                     size_t v) {
    if (r < nl || nr < l)
        return;
    st->sub[node] = zmax(st->sub[node], v);
    if (l <= nl && nr <= r) {
        st->all[node] = zmax(st->all[node], v);
        return;
    }
    uint32_t mid = nl + (nr - nl) / 2;
    span_add(st, 2 * node, nl, mid, l, r, v);
    span_add(st, 2 * node + 1, mid + 1, nr, l, r, v);
}

static size_t span_max(const span_tree *st, uint32_t node, uint32_t nl, uint32_t nr, uint32_t l,
                       uint32_t r) {
    if (r < nl || nr < l)
        return 0;
    if (l <= nl && nr <= r)
        return st->sub[node];
    uint32_t mid = nl + (nr - nl) / 2;
    return zmax(st->all[node], zmax(span_max(st, 2 * node, nl, mid, l, r),
                                    span_max(st, 2 * node + 1, mid + 1, nr, l, r)));
}

/* The index of group index v among the sorted coordinates. */
static uint32_t coord_of(const span_tree *st, int64_t v) {
    uint32_t lo = 0, hi = st->m - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (st->coord[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
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
        stats->steps = 0;
        stats->bounded = 0;
    }
    if (n == 0)
        return 0;

    /* order: the placing order (with tmp, the merge sort's scratch);
     * nodes: the treap of the placed items, node i for item i; coord: the
     * sorted group indices; all, sub: the span tree's 4 m slots each. */
    size_t m_cap = 2 * (size_t)n;
    size_t bytes = (size_t)n * (2 * sizeof(uint32_t) + sizeof(node)) + m_cap * sizeof(int64_t) +
                   2 * 4 * m_cap * sizeof(size_t); /* n < 2^32: fits */
    uint32_t *order = kf_mem_alloc(mem, bytes);
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
    uint32_t *tmp = order + n;
    tree tr = {.nodes = (node *)(void *)(tmp + n), .root = NIL, .steps = 0};
    int64_t *coord = (int64_t *)(void *)(tr.nodes + n);
    span_tree sp = {.all = (size_t *)(void *)(coord + m_cap), .coord = coord};
    sp.sub = sp.all + 4 * m_cap;
    memset(sp.all, 0, 2 * 4 * m_cap * sizeof(size_t));
    for (uint32_t i = 0; i < n; i++) {
        coord[2 * i] = items[i].first;
        coord[2 * i + 1] = items[i].last;
    }
    qsort(coord, m_cap, sizeof *coord, cmp_i64);
    for (size_t i = 1; i < m_cap; i++)
        if (coord[i] != coord[sp.m])
            coord[++sp.m] = coord[i];
    sp.m++;
    /* Each walk may look at this many nodes: every one for up to
     * KF_ARENA_WALK_MIN items (so small programs are always first fit),
     * else 32 per level of the treap. */
    uint64_t budget = 32u * (uint64_t)(64 - __builtin_clzll((uint64_t)n | 1));
    if (budget < KF_ARENA_WALK_MIN)
        budget = KF_ARENA_WALK_MIN;
    for (uint32_t i = 0; i < n; i++)
        order[i] = i;
    sort_by_size(items, order, tmp, n);

    size_t top = 0;
    for (uint32_t a = 0; a < n; a++) {
        kf_arena_item *it = &items[order[a]];
        size_t size = align_up(it->bytes, align), off = 0;
        if (size == 0) {
            it->offset = 0; /* an empty item clears everything anywhere */
            continue;
        }
        uint32_t c0 = 0, c1 = 0;
        if (no_reuse) {
            off = top; /* everything is live together: the placed items tile [0, top) */
        } else {
            tr.budget = budget;
            tr.over = false;
            (void)walk(&tr, tr.root, it->first, it->last, size, &off);
            c0 = coord_of(&sp, it->first);
            c1 = coord_of(&sp, it->last);
            if (tr.over) {
                /* The bound: above every placed item live with it. */
                off = span_max(&sp, 1, 0, sp.m - 1, c0, c1);
                if (stats)
                    stats->bounded++;
            }
        }
        it->offset = off;
        if (off + size > top)
            top = off + size;
        if (!no_reuse) {
            insert(&tr, it, order[a], off, off + size);
            span_add(&sp, 1, 0, sp.m - 1, c0, c1, off + size);
        }
    }
    if (stats)
        stats->steps = tr.steps;
    kf_mem_free(mem, order, bytes);
    return top;
}
