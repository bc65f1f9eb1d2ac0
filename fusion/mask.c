/*
 * mask.c -- classifies an attention group's mask so backends can skip whole
 * tiles: the score expression's root is where(cond, s, FILL) (or with the
 * branches swapped) with FILL = -inf or a value low enough that exp() of it
 * is 0 in every float dtype; cond depends only on the query and key indices
 * and constants. cond is then evaluated over the (q, kv) grid (every row when
 * the grid has at most 2^22 cells, else the first, last and 256 evenly spaced
 * rows, every column) and compared with kv <= q (CAUSAL) and with
 * kv <= q && q - kv < W (SLIDING_WINDOW, W read off the last row). Anything
 * else, or a where below the root (a softcap after the mask would turn -inf
 * into -c), is GENERAL: evaluated per element, no skipping.
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

static bool is_fill(const kf_group *g, uint32_t i) {
    const kf_expr *e = &g->expr[i];
    return e->kind == KF_EXPR_CONST && e->value <= -1e4;
}

kf_status kf_attn_classify_mask(const kf_plan *plan, kf_group *g) {
    kf_attn_info *at = &g->attn;
    at->mask = KF_MASK_NONE;
    at->mask_node = KF_NONE;
    at->window = 0;
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
    bool full = sq * skv <= (INT64_C(1) << 22);
    bool all = true, causal = true, window_ok = true;
    int64_t win = 0;
    /* The window: keys kept in the last row. */
    {
        qkv_pos pos = {sq - 1, 0};
        for (pos.kv = 0; pos.kv < skv; pos.kv++) {
            kf_expr_eval(g, w->src[0], vals, leaf_value, &pos);
            win += (vals[w->src[0]] != 0) == keep_when_true;
        }
    }
    int64_t step = full || sq <= 768 ? 1 : (sq - 512) / 256 + 1;
    for (int64_t q = 0; q < sq; q += (q < 256 || q >= sq - 256) ? 1 : step) {
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
