/*
 * fuse_attention.c -- rule: matmul(Q, K^T) -> score chain -> softmax -> matmul(P, V)
 * becomes one ATTENTION group (flash-style: the score matrix never reaches
 * memory). The score chain is every elementwise tensor between the first
 * matmul and the softmax (scale, softcap, ALiBi, masks); fusion/lower.c turns
 * it into the score expression and classifies the mask (fusion/mask.c).
 *
 * Legal when [I1..I6]:
 *   - the softmax's axis is the last one [I6] and its only use is operand A
 *     (not transposed) of a matmul PV [I2, I5];
 *   - walking back from the softmax's input through elementwise tensors meets
 *     exactly one matmul QK whose shape equals the softmax's [I4]; every tensor
 *     on the way is used once and is not a graph output [I2];
 *   - QK and PV take the GEMM dtypes (f32, f16, bf16) [I1];
 *   - the merge keeps the groups acyclic [I3].
 * Score-chain tensors that do not depend on QK (ALiBi slopes times a distance,
 * a mask) join too when they are used once; the rest are loaded.
 *
 * The log-sum-exp as a second output: when the softmax's input X (the score)
 * has one more use, a logsumexp over the last axis -- of X itself, or of a
 * cast of X to f32 that is used once -- which the outputs need, that
 * logsumexp (and the cast) join the group, which then writes the per-row
 * log-sum-exp the kernels have anyway (m + log l: what a backward pass keeps
 * beside O). Legal under the chain's own conditions, X used exactly twice
 * [I2]; the logsumexp's row is the softmax's [I6]; the merge keeps the
 * groups acyclic [I3].
 *
 * The output's permute: when PV's one use is a permute that keeps the last
 * (head-dim) axis -- [B, H, S, D] back to [B, S, H, D] before the heads are
 * merged -- the group absorbs it and stores O at the permute's row-major
 * strides (kf_attn_info.out, o_strides). The reshape to [B, S, H*D] that
 * follows is then a view of a contiguous tensor, not a copy kernel. Legal when
 * PV is used once and is not an output [I2]; the kernels write rows of D
 * contiguous elements, hence the last axis [I4]; the merge keeps the groups
 * acyclic [I3].
 */
#include "fusion/pass.h"

/* Collects into p->list[0, *n) the tensors of the score chain feeding `x`
 * (x included): elementwise tensors used once, and the matmul they meet.
 * Returns that matmul when it is the only one and has the softmax's shape. */
static kf_tensor *collect_chain(kf_planner *p, kf_tensor *x, const kf_tensor *sm, bool x_lse,
                                uint32_t *n) {
    kf_tensor *qk = NULL;
    bool ok = true;
    uint32_t top = 0, head = 0, epoch = ++p->epoch;
    p->list[top++] = x->id;
    p->mark[x->id] = epoch;
    while (head < top) {
        kf_tensor *t = p->g->nodes[p->list[head]];
        /* x's second use, when x_lse, is the log-sum-exp the group takes too */
        bool one_use = t == x && x_lse ? !p->is_output[t->id] : kf_pl_single_use(p, t);
        if (kf_op_has(t->op, KF_TRAIT_GEMM)) {
            if (qk || !kf_pl_same_shape(t, sm) || !one_use)
                ok = false;
            qk = t;
            head++;
            continue;
        }
        if (!kf_pl_is_elementwise(t) || !one_use) {
            /* A boundary: the group loads it. Drop it from the list. */
            if (t == x)
                ok = false;
            p->list[head] = p->list[--top];
            continue;
        }
        head++;
        for (int k = 0; k < t->nsrc; k++) {
            kf_tensor *s = t->src[k];
            if (kf_pl_is_source(s) || p->mark[s->id] == epoch)
                continue;
            p->mark[s->id] = epoch;
            p->list[top++] = s->id;
        }
    }
    *n = top;
    return ok ? qk : NULL;
}

/* The logsumexp over the last axis of the score x (through a cast to f32
 * used once, then *cast is that cast) that is x's one use besides the softmax
 * sm and that the outputs need; NULL if x has no such second use. */
static kf_tensor *lse_of(kf_planner *p, kf_tensor *x, const kf_tensor *sm, kf_tensor **cast) {
    *cast = NULL;
    if (kf_pl_uses(p, x) != 2 || p->is_output[x->id])
        return NULL;
    kf_tensor *c = kf_pl_consumer(p, x, 0);
    if (c == sm)
        c = kf_pl_consumer(p, x, 1);
    if (c == sm || c->src[0] != x)
        return NULL;
    if (c->op == KF_OP_CAST && c->dtype == KF_DTYPE_F32 && kf_pl_single_use(p, c) &&
        !p->is_output[c->id]) {
        *cast = c;
        c = kf_pl_consumer(p, c, 0);
    }
    if (c->op != KF_OP_LOGSUMEXP || !kf_pl_axis_is_last(c) || !p->need[c->id] ||
        p->gid[c->id] == KF_NONE)
        return NULL;
    return c;
}

kf_status kf_fuse_attention(kf_planner *p) {
    kf_graph *g = p->g;
    for (uint32_t i = 0; i < p->n; i++) {
        kf_tensor *sm = g->nodes[i];
        if (!p->need[i] || !kf_op_has(sm->op, KF_TRAIT_SOFTMAX) || !kf_pl_axis_is_last(sm) ||
            kf_op_has(sm->op, KF_TRAIT_LOGSPACE)) /* log_softmax is no attention's P */
            continue;
        if (!kf_pl_single_use(p, sm))
            continue;
        kf_tensor *pv = kf_pl_consumer(p, sm, 0);
        if (!kf_op_has(pv->op, KF_TRAIT_GEMM) || pv->src[0] != sm || pv->attr.transpose_a ||
            !kf_pl_gemm_dtype_ok(pv->dtype))
            continue;
        uint32_t n;
        kf_tensor *cast, *lse = lse_of(p, sm->src[0], sm, &cast);
        kf_tensor *qk = collect_chain(p, sm->src[0], sm, lse != NULL, &n);
        if (!qk || !kf_pl_gemm_dtype_ok(qk->dtype) ||
            p->groups[p->gid[qk->id]].kind != KF_GROUP_GEMM)
            continue;
        uint32_t gi = p->gid[pv->id];
        p->list[n++] = sm->id;
        if (lse) {
            if (cast)
                p->list[n++] = cast->id;
            p->list[n++] = lse->id;
        }
        if (!kf_pl_try_merge_list(p, gi, p->list, n))
            continue;
        kf_pgroup *pg = &p->groups[gi];
        pg->kind = KF_GROUP_ATTENTION;
        pg->anchor = pv->id;
        pg->softmax = sm->id;
        pg->qk = qk->id;
        pg->lse = lse ? lse->id : KF_NONE;
        if (kf_pl_single_use(p, pv)) {
            kf_tensor *pm = kf_pl_consumer(p, pv, 0);
            if (pm->op == KF_OP_PERMUTE && pm->attr.perm[pm->rank - 1] == pm->rank - 1 &&
                p->gid[pm->id] != KF_NONE)
                (void)kf_pl_try_merge_list(p, gi, &pm->id, 1);
        }
    }
    return KF_OK;
}
