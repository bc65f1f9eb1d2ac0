/*
 * fuse_elementwise.c -- rule: elementwise chains fuse with each other across
 * broadcasts, and into the group of their consumer: the prologue of a row-wise
 * kernel, a side input of a GEMM epilogue or of an attention score expression.
 *
 * Walks tensors from last to first, so a consumer's group is final when its
 * producers are visited. A producer p joins its consumer c's group when [I1..I6]
 *   - p is elementwise (not a source), is not a graph output, and every use
 *     of p is in c's group (one use, or several that then share one expression
 *     node) [I2] (else MULTIPLE_CONSUMERS / GRAPH_OUTPUT);
 *   - p is still alone in its group (anchored groups keep their members);
 *   - no use is a GEMM or attention operand slot (tiles are loaded from memory:
 *     ANCHOR_BOUNDARY), a GEMM's norm prologue, or a norm or softmax over a
 *     non-last axis (AXIS_NOT_INNERMOST) [I6];
 *   - p broadcasts into each use's space, and no use is a layout op
 *     (LAYOUT_CHANGE) [I4];
 *   - the merge keeps the groups acyclic [I3] (else WOULD_CREATE_CYCLE).
 * Recomputing a broadcast producer per element is accepted: it is elementwise.
 *
 * A slice, concat or gather (KF_TRAIT_REMAP) joins its consumer's group the
 * same way, when that group is elementwise or row-wise (its loads then take
 * the remapped coordinates; a GEMM or attention kernel reads tiles, reason
 * REMAP_INTO_ANCHOR). An elementwise producer (or another slice, concat or
 * gather) joins a remap consumer's group whatever its shape, as it is read at
 * the remapped coordinates -- except a gather's indices, which stay in memory
 * (GATHER_INDEX), where the CPU target checks them before the kernel runs.
 * A repeat or slice does join an attention group's score expression: its
 * elements are read one by one there, not as tiles, and a keep map of tiles
 * repeated to elements (sliced to a ragged length) is how a block-sparse
 * mask is written (fusion/mask.c).
 */
#include "fusion/pass.h"

/* Why producer t may not be computed inside consumer c's group (NONE: it may). */
static kf_reason check_use(const kf_planner *p, const kf_tensor *t, const kf_tensor *c,
                           const char **detail) {
    const kf_pgroup *cg = &p->groups[p->gid[c->id]];
    *detail = NULL;
    if (kf_op_has(c->op, KF_TRAIT_LAYOUT) || cg->kind == KF_GROUP_VIEW ||
        cg->kind == KF_GROUP_LAYOUT)
        return KF_REASON_LAYOUT_CHANGE;
    if (kf_op_has(c->op, KF_TRAIT_GEMM)) {
        *detail = "GEMM and attention operands are loaded tile by tile from memory";
        return KF_REASON_ANCHOR_BOUNDARY;
    }
    if (kf_op_has(c->op, KF_TRAIT_ROWWISE) && !kf_pl_axis_is_last(c) &&
        !kf_op_has(c->op, KF_TRAIT_REDUCTION))
        return KF_REASON_AXIS_NOT_INNERMOST;
    if (cg->kind == KF_GROUP_GEMM && cg->prologue == c->id) {
        *detail = "a GEMM's norm prologue loads its input from memory";
        return KF_REASON_ANCHOR_BOUNDARY;
    }
    if (c->op == KF_OP_GATHER && c->src[1] == t)
        return KF_REASON_GATHER_INDEX;
    if (kf_op_has(t->op, KF_TRAIT_REMAP) &&
        (cg->kind == KF_GROUP_GEMM ||
         (cg->kind == KF_GROUP_ATTENTION && t->op != KF_OP_REPEAT && t->op != KF_OP_SLICE))) {
        *detail = cg->kind == KF_GROUP_GEMM ? "into a GEMM epilogue" : "into an attention kernel";
        return KF_REASON_REMAP_INTO_ANCHOR;
    }
    if (kf_op_has(c->op, KF_TRAIT_REMAP))
        return KF_REASON_NONE; /* read at the remapped coordinates, any shape */
    /* A reduction's input space is its operand's shape; others' their own. */
    const kf_tensor *space = kf_op_has(c->op, KF_TRAIT_REDUCTION) ? c->src[0] : c;
    if (!kf_pl_broadcasts_into(t, space->rank, space->dims))
        return KF_REASON_NO_BROADCAST_INTO_ANCHOR;
    return KF_REASON_NONE;
}

kf_status kf_fuse_elementwise(kf_planner *p) {
    kf_graph *g = p->g;
    for (uint32_t i = p->n; i-- > 0;) {
        kf_tensor *t = g->nodes[i];
        if (!p->need[i] || (!kf_pl_is_elementwise(t) && !kf_op_has(t->op, KF_TRAIT_REMAP)))
            continue;
        uint32_t uses = kf_pl_uses(p, t);
        if (uses == 0)
            continue;
        uint32_t gc = p->gid[kf_pl_consumer(p, t, 0)->id], gt = p->gid[i];
        /* Several uses all inside one group share one expression node. */
        bool one_group = !p->is_output[i];
        for (uint32_t u = 1; u < uses && one_group; u++)
            one_group = p->gid[kf_pl_consumer(p, t, u)->id] == gc;
        if (!one_group) {
            for (uint32_t u = 0; u < uses; u++) {
                kf_tensor *c = kf_pl_consumer(p, t, u);
                if (p->gid[c->id] != gt)
                    kf_pl_reject_edge(p, t, c,
                                      p->is_output[i] ? KF_REASON_GRAPH_OUTPUT
                                                      : KF_REASON_MULTIPLE_CONSUMERS,
                                      NULL);
            }
            continue;
        }
        if (gc == gt)
            continue;
        if (p->groups[gt].kind != KF_GROUP_ELEMENTWISE || p->groups[gt].size != 1)
            continue; /* already placed by an anchored rule; that rule gave the reason */
        kf_reason r = KF_REASON_NONE;
        for (uint32_t u = 0; u < uses && r == KF_REASON_NONE; u++) {
            kf_tensor *c = kf_pl_consumer(p, t, u);
            const char *detail;
            r = check_use(p, t, c, &detail);
            if (r != KF_REASON_NONE)
                kf_pl_reject_edge(p, t, c, r, detail);
        }
        if (r != KF_REASON_NONE)
            continue;
        if (!kf_pl_can_merge(p, gc, gt)) {
            for (uint32_t u = 0; u < uses; u++)
                kf_pl_reject_edge(p, t, kf_pl_consumer(p, t, u), KF_REASON_WOULD_CREATE_CYCLE,
                                  NULL);
            continue;
        }
        kf_pl_merge(p, gc, gt);
    }
    return KF_OK;
}
