/*
 * fuse_elementwise.c -- rule: elementwise chains fuse with each other across
 * broadcasts, and into the group of their consumer: the prologue of a row-wise
 * kernel, a side input of a GEMM epilogue or of an attention score expression.
 *
 * Walks tensors from last to first, so a consumer's group is final when its
 * producers are visited. A producer p joins its consumer c's group when [I1..I6]
 *   - p is elementwise (not a source) and its only use is c and it is not a
 *     graph output [I2] (else MULTIPLE_CONSUMERS / GRAPH_OUTPUT);
 *   - p is still alone in its group (anchored groups keep their members);
 *   - c is not a GEMM or attention operand slot (tiles are loaded from memory:
 *     ANCHOR_BOUNDARY) and c is not a norm or softmax over a non-last axis
 *     (AXIS_NOT_INNERMOST) [I6];
 *   - p broadcasts into c's shape, and c is not a layout op (LAYOUT_CHANGE) [I4];
 *   - the merge keeps the groups acyclic [I3] (else WOULD_CREATE_CYCLE).
 * Recomputing a broadcast producer per element is accepted: it is elementwise.
 */
#include "fusion/pass.h"

static uint32_t group_size(const kf_planner *p, uint32_t gi) {
    uint32_t n = 0;
    for (uint32_t t = 0; t < p->n; t++)
        n += p->gid[t] == gi;
    return n;
}

kf_status kf_fuse_elementwise(kf_planner *p) {
    kf_graph *g = p->g;
    for (uint32_t i = p->n; i-- > 0;) {
        kf_tensor *t = g->nodes[i];
        if (!p->need[i] || !kf_pl_is_elementwise(t))
            continue;
        uint32_t uses = kf_pl_uses(p, t);
        if (uses == 0)
            continue;
        if (p->is_output[i] || uses > 1) {
            for (uint32_t u = 0; u < uses; u++) {
                kf_tensor *c = kf_pl_consumer(p, t, u);
                if (p->gid[c->id] != p->gid[i])
                    kf_pl_reject_edge(p, t, c,
                                      p->is_output[i] ? KF_REASON_GRAPH_OUTPUT
                                                      : KF_REASON_MULTIPLE_CONSUMERS,
                                      NULL);
            }
            continue;
        }
        kf_tensor *c = kf_pl_consumer(p, t, 0);
        uint32_t gc = p->gid[c->id], gt = p->gid[i];
        if (gc == gt)
            continue;
        kf_pgroup *cg = &p->groups[gc];
        if (p->groups[gt].kind != KF_GROUP_ELEMENTWISE || group_size(p, gt) != 1) {
            /* Already placed by an anchored rule; that rule gave the reason. */
            continue;
        }
        if (kf_op_has(c->op, KF_TRAIT_LAYOUT)) {
            kf_pl_reject_edge(p, t, c, KF_REASON_LAYOUT_CHANGE, NULL);
            continue;
        }
        if (kf_op_has(c->op, KF_TRAIT_GEMM)) {
            kf_pl_reject_edge(p, t, c, KF_REASON_ANCHOR_BOUNDARY,
                              "GEMM operands are loaded tile by tile from memory");
            continue;
        }
        if (cg->kind == KF_GROUP_ATTENTION && (c->id == cg->anchor)) {
            kf_pl_reject_edge(p, t, c, KF_REASON_ANCHOR_BOUNDARY,
                              "attention operands are loaded tile by tile from memory");
            continue;
        }
        if (kf_op_has(c->op, KF_TRAIT_ROWWISE) && !kf_pl_axis_is_last(c) &&
            !kf_op_has(c->op, KF_TRAIT_REDUCTION)) {
            kf_pl_reject_edge(p, t, c, KF_REASON_AXIS_NOT_INNERMOST, NULL);
            continue;
        }
        if (cg->kind == KF_GROUP_VIEW || cg->kind == KF_GROUP_LAYOUT) {
            kf_pl_reject_edge(p, t, c, KF_REASON_LAYOUT_CHANGE, NULL);
            continue;
        }
        if (cg->kind == KF_GROUP_GEMM && cg->prologue != KF_NONE && c->id == cg->prologue) {
            kf_pl_reject_edge(p, t, c, KF_REASON_ANCHOR_BOUNDARY,
                              "a GEMM's norm prologue loads its input from memory");
            continue;
        }
        /* A row-wise op's input space is its operand's shape; others' their own. */
        const kf_tensor *space = kf_op_has(c->op, KF_TRAIT_REDUCTION) ? c->src[0] : c;
        if (!kf_pl_broadcasts_into(t, space->rank, space->dims)) {
            kf_pl_reject_edge(p, t, c, KF_REASON_NO_BROADCAST_INTO_ANCHOR, NULL);
            continue;
        }
        if (!kf_pl_can_merge(p, gc, gt)) {
            kf_pl_reject_edge(p, t, c, KF_REASON_WOULD_CREATE_CYCLE, NULL);
            continue;
        }
        kf_pl_merge(p, gc, gt);
    }
    return KF_OK;
}
