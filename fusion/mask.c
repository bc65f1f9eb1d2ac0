/*
 * mask.c -- classifies an attention group's mask so backends can skip whole
 * tiles: the score expression's root is where(cond, s, FILL) (or with the
 * branches swapped) with FILL = -inf or a value low enough that exp() of it
 * is 0 in every float dtype; cond depends only on the query and key indices
 * and constants. cond is then evaluated over the whole (q, kv) grid and
 * compared with kv <= q (CAUSAL) and with
 * kv <= q && q - kv < W (SLIDING_WINDOW, W read off the last row). Anything
 * else, or a where below the root (a softcap after the mask would turn -inf
 * into -c), is GENERAL: evaluated per element, no skipping.
 *
 * A grid above 2^26 cells is not evaluated and is GENERAL too: a class must be
 * proven on every row, because a backend that skips tiles on a mask that is
 * causal in all rows but one drops keys that row attends to (an earlier
 * version sampled rows and was wrong exactly so; tests/test_plancheck.c keeps
 * the case).
 *
 * Most masks are built from iota comparisons, and those are proved without
 * the grid: an i32 node that is a*q + b*kv + c with exact integer
 * coefficients (q, kv, constants, +, -, negation, a multiple by a constant,
 * no saturation possible at these sizes) is affine; an affine node with
 * a == -b, a comparison of two affine nodes whose difference has a == -b,
 * and any op of such nodes and constants only depend on d = q - kv. When the
 * condition does, keep(q, kv) = keep(d), and evaluating it once per d in
 * [-(skv - 1), sq - 1] (every cell has one of them, and each is some cell's)
 * proves the same classes as the whole grid, in O(sq + skv): an S = 4096
 * graph planned in 513 ms with the grid (an H100's host, c281d14).
 *
 * BLOCK_SPARSE is read off the expression, not proved by evaluation: cond is
 * a bool LOAD whose only coordinates along the score's q and kv axes are
 * q / bq and kv / bk (what fusion/lower.c makes of a keep map repeated to
 * elements, kf_repeat), so every element of a bq x bk tile reads the same
 * map entry, and a tile whose entry drops it can be skipped whatever the
 * map holds at run time.
 */
#include <math.h>
#include <string.h>

#include "fusion/expr.h"

typedef struct qkv_pos {
    int64_t q, kv;
} qkv_pos;

static double leaf_value(void *user, const kf_expr *e) {
    const qkv_pos *pos = user;
    switch (e->kind) {
    case KF_EXPR_Q_IDX:
        return (double)pos->q;
    case KF_EXPR_KV_IDX:
        return (double)pos->kv;
    default:
        return NAN;
    }
}

/* True when node i depends only on Q_IDX, KV_IDX, constants and ops. */
static bool index_only(const kf_group *g, uint32_t i) {
    const kf_expr *e = &g->expr[i];
    if (e->kind == KF_EXPR_OP) {
        for (int k = 0; k < 3; k++) {
            if (e->src[k] != KF_NONE && !index_only(g, e->src[k]))
                return false;
        }
        return true;
    }
    return e->kind == KF_EXPR_CONST || e->kind == KF_EXPR_Q_IDX || e->kind == KF_EXPR_KV_IDX;
}

/* What node values depend on: the affine form a*q + b*kv + c (i32 only), a
 * function of d = q - kv, or something else. */
typedef enum dep_kind { DEP_OTHER = 0, DEP_AFFINE, DEP_OF_D } dep_kind;
typedef struct dep {
    dep_kind kind;
    int64_t a, b, c;
} dep;

static bool dep_of_d(const dep *x) {
    return x->kind == DEP_OF_D || (x->kind == DEP_AFFINE && x->a == -x->b);
}

/* An affine form whose every value over the grid stays far inside i32, so
 * the reference's saturating i32 arithmetic is exact on it. */
static dep affine(int64_t a, int64_t b, int64_t c, int64_t span) {
    dep r = {DEP_OTHER, 0, 0, 0};
    const int64_t lim = INT64_C(1) << 30;
    if (a > lim || a < -lim || b > lim || b < -lim || c > lim || c < -lim)
        return r;
    int64_t m = (a < 0 ? -a : a) * span + (b < 0 ? -b : b) * span + (c < 0 ? -c : c);
    if (m >= lim)
        return r;
    r.kind = DEP_AFFINE;
    r.a = a;
    r.b = b;
    r.c = c;
    return r;
}

/* The dependence of node i (deps of the nodes before it filled). */
static dep node_dep(const kf_group *g, uint32_t i, const dep *deps, int64_t span) {
    const kf_expr *e = &g->expr[i];
    dep other = {DEP_OTHER, 0, 0, 0}, of_d = {DEP_OF_D, 0, 0, 0};
    bool i32 = e->dtype == KF_DTYPE_I32;
    switch (e->kind) {
    case KF_EXPR_CONST:
        if (i32 && e->value == (double)(int64_t)e->value)
            return affine(0, 0, (int64_t)e->value, span);
        return of_d;
    case KF_EXPR_Q_IDX:
        return i32 ? affine(1, 0, 0, span) : other;
    case KF_EXPR_KV_IDX:
        return i32 ? affine(0, 1, 0, span) : other;
    case KF_EXPR_OP:
        break;
    default:
        return other;
    }
    int arity = kf_form_arity(kf_op_get(e->op)->form);
    const dep *x = arity > 0 ? &deps[e->src[0]] : NULL;
    const dep *y = arity > 1 ? &deps[e->src[1]] : NULL;
    if (i32 && arity == 2 && x->kind == DEP_AFFINE && y->kind == DEP_AFFINE) {
        if (e->op == KF_OP_ADD)
            return affine(x->a + y->a, x->b + y->b, x->c + y->c, span);
        if (e->op == KF_OP_SUB)
            return affine(x->a - y->a, x->b - y->b, x->c - y->c, span);
        if (e->op == KF_OP_MUL && ((x->a == 0 && x->b == 0) || (y->a == 0 && y->b == 0))) {
            const dep *k = x->a == 0 && x->b == 0 ? x : y, *v = k == x ? y : x;
            return affine(k->c * v->a, k->c * v->b, k->c * v->c, span);
        }
    }
    if (i32 && arity == 1 && e->op == KF_OP_NEG && x->kind == DEP_AFFINE)
        return affine(-x->a, -x->b, -x->c, span);
    if (arity == 2 && kf_op_has(e->op, KF_TRAIT_COMPARE) && x->kind == DEP_AFFINE &&
        y->kind == DEP_AFFINE && x->a - y->a == -(x->b - y->b))
        return of_d; /* the sign of an affine form of d */
    for (int k = 0; k < arity && k < 3; k++)
        if (!dep_of_d(&deps[e->src[k]]))
            return other;
    return of_d;
}

/* Whether node `cond` depends only on d = q - kv (deps: scratch, one per
 * node up to cond). */
static bool depends_on_d_only(const kf_group *g, uint32_t cond, dep *deps, int64_t span) {
    for (uint32_t i = 0; i <= cond; i++)
        deps[i] = node_dep(g, i, deps, span);
    return dep_of_d(&deps[cond]);
}

static bool is_fill(const kf_group *g, uint32_t i) {
    const kf_expr *e = &g->expr[i];
    return e->kind == KF_EXPR_CONST && e->value <= -1e4;
}

/* The block size when node i is idx / n with idx a leaf of kind `kind` and n
 * a positive i32 constant; 0 otherwise. */
static int64_t block_of(const kf_group *g, uint32_t i, kf_expr_kind kind) {
    const kf_expr *e = &g->expr[i];
    if (e->kind != KF_EXPR_OP || e->op != KF_OP_DIV || e->dtype != KF_DTYPE_I32)
        return 0;
    const kf_expr *x = &g->expr[e->src[0]], *n = &g->expr[e->src[1]];
    if (x->kind != kind || n->kind != KF_EXPR_CONST || n->value < 1)
        return 0;
    return (int64_t)n->value;
}

/* Whether cond (node c) is a keep map of tiles read at (q / bq, kv / bk);
 * fills the BLOCK_SPARSE fields. */
static bool block_keep_map(const kf_group *g, uint32_t c, kf_attn_info *at) {
    const kf_expr *e = &g->expr[c];
    int R = g->rank;
    if (e->kind != KF_EXPR_LOAD || e->dtype != KF_DTYPE_BOOL || R < 2 || e->strides[R - 2] ||
        e->strides[R - 1] || e->src[2] != KF_NONE)
        return false;
    int sq = -1, sk = -1;
    int64_t bq = 0, bk = 0;
    for (int k = 0; k < 2; k++) {
        if (e->src[k] == KF_NONE)
            return false;
        int64_t b;
        if ((b = block_of(g, e->src[k], KF_EXPR_Q_IDX)) > 0 && sq < 0)
            sq = k, bq = b;
        else if ((b = block_of(g, e->src[k], KF_EXPR_KV_IDX)) > 0 && sk < 0)
            sk = k, bk = b;
        else
            return false;
    }
    at->keep_node = c;
    at->keep_src_q = sq;
    at->keep_src_k = sk;
    at->keep_bq = bq;
    at->keep_bk = bk;
    return true;
}

kf_status kf_attn_classify_mask(const kf_plan *plan, kf_group *g) {
    kf_attn_info *at = &g->attn;
    at->mask = KF_MASK_NONE;
    at->mask_node = KF_NONE;
    at->window = 0;
    at->keep_node = KF_NONE;
    at->keep_bq = at->keep_bk = 0;
    /* Any where() in the score expression. */
    uint32_t where = KF_NONE;
    for (uint32_t i = 0; i <= at->score && i < g->n_expr; i++) {
        if (g->expr[i].kind == KF_EXPR_OP && kf_op_has(g->expr[i].op, KF_TRAIT_SELECT))
            where = i;
    }
    if (where == KF_NONE)
        return KF_OK;
    const kf_expr *w = &g->expr[where];
    bool keep_when_true;
    if (where == at->score && (is_fill(g, w->src[2]) || is_fill(g, w->src[1])) &&
        block_keep_map(g, w->src[0], at)) {
        at->mask = KF_MASK_BLOCK_SPARSE;
        at->mask_node = where;
        at->keep_when_true = is_fill(g, w->src[2]);
        return KF_OK;
    }
    if (where != at->score || !index_only(g, w->src[0])) {
        at->mask = KF_MASK_GENERAL;
        at->mask_node = where;
        return KF_OK;
    }
    if (is_fill(g, w->src[2]))
        keep_when_true = true;
    else if (is_fill(g, w->src[1]))
        keep_when_true = false;
    else {
        at->mask = KF_MASK_GENERAL;
        at->mask_node = where;
        return KF_OK;
    }
    at->mask_node = where;
    double *vals = kf_mem_alloc(&plan->mem, (size_t)g->n_expr * sizeof(double));
    if (!vals)
        return KF_ERR_OUT_OF_MEMORY;
    int64_t sq = at->sq, skv = at->skv;
    bool all = true, causal = true, window_ok = true;
    int64_t win = 0;
    dep *deps = kf_mem_alloc(&plan->mem, (size_t)g->n_expr * sizeof *deps);
    if (!deps) {
        kf_mem_free(&plan->mem, vals, (size_t)g->n_expr * sizeof(double));
        return KF_ERR_OUT_OF_MEMORY;
    }
    bool by_d = depends_on_d_only(g, w->src[0], deps, sq > skv ? sq : skv);
    kf_mem_free(&plan->mem, deps, (size_t)g->n_expr * sizeof *deps);
    if (by_d) {
        /* keep(d) at the cell (max(d, 0), max(d, 0) - d), d = -(skv-1) .. sq-1;
         * the last row's keys are d = sq-1-(skv-1) .. sq-1. */
        for (int pass = 0; pass < 2; pass++) {
            for (int64_t d = -(skv - 1); d <= sq - 1; d++) {
                qkv_pos pos = {d > 0 ? d : 0, (d > 0 ? d : 0) - d};
                kf_expr_eval(g, w->src[0], vals, leaf_value, &pos);
                bool keep = (vals[w->src[0]] != 0) == keep_when_true;
                if (pass == 0) {
                    win += keep && d >= sq - skv;
                    continue;
                }
                all = all && keep;
                causal = causal && keep == (d >= 0);
                window_ok = window_ok && keep == (d >= 0 && d < win);
            }
        }
        kf_mem_free(&plan->mem, vals, (size_t)g->n_expr * sizeof(double));
        goto classify;
    }
    if (sq > (INT64_C(1) << 26) / skv) {
        kf_mem_free(&plan->mem, vals, (size_t)g->n_expr * sizeof(double));
        at->mask = KF_MASK_GENERAL;
        return KF_OK;
    }
    /* The window: keys kept in the last row. */
    {
        qkv_pos pos = {sq - 1, 0};
        for (pos.kv = 0; pos.kv < skv; pos.kv++) {
            kf_expr_eval(g, w->src[0], vals, leaf_value, &pos);
            win += (vals[w->src[0]] != 0) == keep_when_true;
        }
    }
    for (int64_t q = 0; q < sq; q++) {
        qkv_pos pos = {q, 0};
        for (pos.kv = 0; pos.kv < skv; pos.kv++) {
            kf_expr_eval(g, w->src[0], vals, leaf_value, &pos);
            bool keep = (vals[w->src[0]] != 0) == keep_when_true;
            all = all && keep;
            causal = causal && keep == (pos.kv <= q);
            window_ok = window_ok && keep == (pos.kv <= q && q - pos.kv < win);
        }
    }
    kf_mem_free(&plan->mem, vals, (size_t)g->n_expr * sizeof(double));
classify:
    if (all)
        at->mask = KF_MASK_NONE;
    else if (causal)
        at->mask = KF_MASK_CAUSAL;
    else if (window_ok && win > 0) {
        at->mask = KF_MASK_SLIDING_WINDOW;
        at->window = win;
    } else
        at->mask = KF_MASK_GENERAL;
    return KF_OK;
}
