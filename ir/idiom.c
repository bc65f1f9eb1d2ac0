/*
 * idiom.c -- ops a framework writes out in primitives, recognized and
 * rewritten in place as the one op kfuse has, so the planner fuses them as
 * that op (a norm becomes a GEMM's prologue, an activation a GEMM's
 * epilogue) instead of materializing the primitives' intermediates.
 *
 * PyTorch's AOTAutograd hands over what the model's Python wrote:
 *
 *   RMSNorm (transformers' LlamaRMSNorm):
 *     x32 = cast<f32>(x); ms = reduce_mean(x32 * x32, last, keepdim)
 *     y = w * cast<T>(x32 * rsqrt(ms + eps))          ==  rms_norm(x, w, eps)
 *   GELU, tanh form (transformers' NewGELUActivation, GPT-2):
 *     y = (x * 0.5) * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
 *                                                      ==  gelu_tanh(x)
 *
 * Each pattern is matched with its products and sums in either operand order,
 * the cube as pow(x, 3) or x * x * x, the square as pow(x, 2) or x * x, and
 * the cast pair optional (an f32 graph has none). Constants match when they
 * are the pattern's value as their dtype holds it. Every intermediate must be
 * used only inside the pattern and must not be a graph output, so the rewrite
 * removes all of their work; x and w must have the result's dtype, w rank 1
 * along the last axis (what rms_norm takes).
 *
 * The rewrite turns the pattern's root tensor (its id, name, shape and dtype
 * kept) into the op and leaves the intermediates with no uses; the planner,
 * which plans only what the outputs need, never sees them. Values change only
 * by rounding: the primitives round each intermediate to the graph's dtype,
 * the op keeps f32 inside and rounds once (fusion.h's rule for fused
 * kernels), so it is the more accurate of the two. kf_plan_create runs this
 * on the graph it plans (kf_compile plans a private copy: the caller's graph
 * is never changed); the report counts what was recognized.
 */
#include <math.h>
#include <string.h>

#include "ir/ir.h"

/* A one-element constant's value in *v. */
static bool const_value(const kf_tensor *t, double *v) {
    if (t->op != KF_OP_CONST || !t->data || kf_ir_numel(t) != 1)
        return false;
    *v = kf_ir_load(t->data, t->dtype, 0);
    return true;
}

/* Whether t is a one-element constant whose value is `want` as t's dtype
 * rounds it (a bf16 graph holds 0.044715 as 0.044677734375). */
static bool const_is(const kf_tensor *t, double want) {
    double v;
    return const_value(t, &v) &&
           (v == kf_ir_round(t->dtype, want) || fabs(v - want) <= 1e-6 * fabs(want));
}

/* An intermediate the rewrite may drop: used once (by the pattern) and not
 * a graph output. n_uses also counts uses by tensors nothing needs (CSE's
 * folded ones), so this errs on the side of no rewrite. */
static bool inner(const kf_tensor *t, const bool *is_output) {
    return t->n_uses == 1 && !is_output[t->id];
}

/* t = op(*p, *q): the operands of a binary op (the callers try both orders). */
static bool binary(const kf_tensor *t, kf_op op, const kf_tensor **p, const kf_tensor **q) {
    if (t->op != op || t->nsrc != 2)
        return false;
    *p = t->src[0];
    *q = t->src[1];
    return true;
}

static void swap(const kf_tensor **a, const kf_tensor **b) {
    const kf_tensor *t = *a;
    *a = *b;
    *b = t;
}

/* t == x * c (either order) with c the constant `want`. */
static bool scaled_by(const kf_tensor *t, double want, const kf_tensor **x) {
    const kf_tensor *a, *b;
    if (!binary(t, KF_OP_MUL, &a, &b))
        return false;
    if (const_is(a, want))
        swap(&a, &b);
    if (!const_is(b, want))
        return false;
    *x = a;
    return true;
}

/* t == x^n as pow(x, n) or (n = 2) x * x or (n = 3) x * x * x in any order;
 * the inner products must be single-use intermediates. */
static bool power_of(const kf_tensor *t, int n, const kf_tensor *x, const bool *is_output) {
    const kf_tensor *a, *b;
    if (t->op == KF_OP_POW)
        return t->src[0] == x && const_is(t->src[1], n);
    if (!binary(t, KF_OP_MUL, &a, &b))
        return false;
    if (n == 2)
        return a == x && b == x;
    if (b != x)
        swap(&a, &b);
    return b == x && inner(a, is_output) && power_of(a, n - 1, x, is_output);
}

/* Rewrites t (its operands' use counts kept true) as op(srcs[0..n)). */
static void rewrite(kf_tensor *t, kf_op op, kf_tensor *const *srcs, int n, const kf_attrs *a) {
    for (int k = 0; k < t->nsrc; k++)
        t->src[k]->n_uses--;
    t->op = op;
    t->nsrc = n;
    for (int k = 0; k < 3; k++)
        t->src[k] = k < n ? srcs[k] : NULL;
    for (int k = 0; k < n; k++)
        srcs[k]->n_uses++;
    t->attr = *a;
}

/* y = w * cast<T>(x32 * rsqrt(mean(x32^2) + eps)), x32 = cast<f32>(x) or x. */
static bool match_rms_norm(kf_tensor *y, const bool *is_output) {
    const kf_tensor *w, *c;
    if (!binary(y, KF_OP_MUL, &w, &c) || y->rank < 1)
        return false;
    for (int side = 0; side < 2; side++, swap(&w, &c)) {
        if (w->rank != 1 || w->dims[0] != y->dims[y->rank - 1] || w->dtype != y->dtype ||
            !inner(c, is_output))
            continue;
        const kf_tensor *n = c;
        if (c->op == KF_OP_CAST) {
            n = c->src[0];
            if (!inner(n, is_output))
                continue;
        }
        const kf_tensor *x32, *rs;
        if (!binary(n, KF_OP_MUL, &x32, &rs))
            continue;
        if (rs->op != KF_OP_RSQRT)
            swap(&x32, &rs);
        if (rs->op != KF_OP_RSQRT || !inner(rs, is_output))
            continue;
        const kf_tensor *ms, *e;
        if (!binary(rs->src[0], KF_OP_ADD, &ms, &e) || !inner(rs->src[0], is_output))
            continue;
        if (ms->op != KF_OP_REDUCE_MEAN)
            swap(&ms, &e);
        double eps;
        if (ms->op != KF_OP_REDUCE_MEAN || !inner(ms, is_output) || !const_value(e, &eps) ||
            !isfinite(eps) || eps < 0 || !ms->attr.keepdim || ms->attr.axis != y->rank - 1)
            continue;
        const kf_tensor *sq = ms->src[0];
        if (!inner(sq, is_output) || !power_of(sq, 2, x32, is_output))
            continue;
        const kf_tensor *x =
            x32->op == KF_OP_CAST && x32->dtype == KF_DTYPE_F32 ? x32->src[0] : x32;
        if (x->dtype != y->dtype || x->rank != y->rank ||
            memcmp(x->dims, y->dims, sizeof(int64_t) * (size_t)y->rank) != 0)
            continue;
        if (x32->dtype != KF_DTYPE_F32 && x32->dtype != y->dtype)
            continue;
        kf_attrs a;
        memset(&a, 0, sizeof a);
        a.axis = y->rank - 1;
        a.eps = eps;
        kf_tensor *srcs[2] = {(kf_tensor *)x, (kf_tensor *)w};
        rewrite(y, KF_OP_RMS_NORM, srcs, 2, &a);
        return true;
    }
    return false;
}

/* t == 1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)) with its x in *x. */
static bool one_plus_tanh(const kf_tensor *t, const kf_tensor **x, const bool *is_output) {
    const kf_tensor *th, *one;
    if (!binary(t, KF_OP_ADD, &th, &one))
        return false;
    if (th->op != KF_OP_TANH)
        swap(&th, &one);
    if (th->op != KF_OP_TANH || !const_is(one, 1.0) || !inner(th, is_output))
        return false;
    const kf_tensor *u;
    if (!inner(th->src[0], is_output) || !scaled_by(th->src[0], 0.7978845608028654, &u) ||
        !inner(u, is_output))
        return false;
    const kf_tensor *a, *b;
    if (!binary(u, KF_OP_ADD, &a, &b))
        return false;
    for (int side = 0; side < 2; side++, swap(&a, &b)) {
        const kf_tensor *cube;
        if (inner(b, is_output) && scaled_by(b, 0.044715, &cube) && inner(cube, is_output) &&
            power_of(cube, 3, a, is_output)) {
            *x = a;
            return true;
        }
    }
    return false;
}

/* y = (x * 0.5) * (1 + tanh(...)) or 0.5 * (x * (1 + tanh(...))), any order. */
static bool match_gelu_tanh(kf_tensor *y, const bool *is_output) {
    const kf_tensor *a, *b;
    if (!binary(y, KF_OP_MUL, &a, &b))
        return false;
    for (int side = 0; side < 2; side++, swap(&a, &b)) {
        const kf_tensor *x = NULL, *half_x, *p, *q;
        if (!inner(b, is_output))
            continue;
        if (scaled_by(a, 0.5, &half_x) && inner(a, is_output)) {
            /* (x * 0.5) * (1 + tanh(...)) */
            if (!one_plus_tanh(b, &x, is_output) || x != half_x)
                continue;
        } else if (const_is(a, 0.5) && binary(b, KF_OP_MUL, &p, &q)) {
            /* 0.5 * (x * (1 + tanh(...))) */
            if (!one_plus_tanh(q, &x, is_output))
                swap(&p, &q);
            if (!inner(q, is_output) || !one_plus_tanh(q, &x, is_output) || x != p)
                continue;
        } else {
            continue;
        }
        if (x->dtype != y->dtype || x->rank != y->rank ||
            memcmp(x->dims, y->dims, sizeof(int64_t) * (size_t)y->rank) != 0)
            continue;
        kf_attrs attr;
        memset(&attr, 0, sizeof attr);
        kf_tensor *srcs[1] = {(kf_tensor *)x};
        rewrite(y, KF_OP_GELU_TANH, srcs, 1, &attr);
        return true;
    }
    return false;
}

kf_status kf_ir_idioms(kf_graph *g, kf_ir_idiom_counts *counts) {
    kf_ir_idiom_counts n = {0, 0};
    bool *is_output = kf_mem_alloc(&g->mem, g->n_nodes ? g->n_nodes : 1);
    if (!is_output)
        return KF_ERR_OUT_OF_MEMORY;
    memset(is_output, 0, g->n_nodes ? g->n_nodes : 1);
    for (uint32_t i = 0; i < g->n_outputs; i++)
        is_output[g->outputs[i].tensor->id] = true;
    /* Later tensors first, only those the outputs need (live: marked by
     * their users, which come later): a pattern's root is matched before
     * the tensors inside it, which it then no longer needs. */
    bool *live = kf_mem_alloc(&g->mem, g->n_nodes ? g->n_nodes : 1);
    if (!live) {
        kf_mem_free(&g->mem, is_output, g->n_nodes ? g->n_nodes : 1);
        return KF_ERR_OUT_OF_MEMORY;
    }
    memcpy(live, is_output, g->n_nodes ? g->n_nodes : 1);
    for (uint32_t i = g->n_nodes; i-- > 0;) {
        kf_tensor *t = g->nodes[i];
        if (!live[i])
            continue;
        if (t->op == KF_OP_MUL && match_rms_norm(t, is_output))
            n.rms_norm++;
        else if (t->op == KF_OP_MUL && match_gelu_tanh(t, is_output))
            n.gelu_tanh++;
        for (int k = 0; k < t->nsrc; k++)
            live[t->src[k]->id] = true;
    }
    kf_mem_free(&g->mem, live, g->n_nodes ? g->n_nodes : 1);
    kf_mem_free(&g->mem, is_output, g->n_nodes ? g->n_nodes : 1);
    if (counts)
        *counts = n;
    return KF_OK;
}
