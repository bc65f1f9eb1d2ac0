/*
 * fuse_rowwise.c -- rule: a softmax, norm or reduction over the last axis is a
 * ROWWISE kernel: one row read once, statistics in f32, an elementwise epilogue
 * over its output (this pass, through kf_pl_grow_epilogue) and an elementwise
 * prologue on its input (fuse_elementwise pulls single-use producers in).
 * Over another axis it is a COLREDUCE group: a reduction there still takes an
 * elementwise prologue and epilogue (the bias gradient), a norm or softmax
 * fuses with nothing (AXIS_NOT_INNERMOST) [I6].
 * Keeps [I2] (multi-output epilogue on the output shape), [I3], [I4], [I5]
 * (a second row-wise op is ANCHOR_BOUNDARY).
 */
#include "fusion/pass.h"

kf_status kf_fuse_rowwise(kf_planner *p) {
    kf_graph *g = p->g;
    for (uint32_t i = 0; i < p->n; i++) {
        kf_tensor *r = g->nodes[i];
        if (!p->need[i] || !kf_op_has(r->op, KF_TRAIT_ROWWISE))
            continue;
        uint32_t gi = p->gid[i];
        kf_pgroup *pg = &p->groups[gi];
        if ((pg->kind != KF_GROUP_ROWWISE && pg->kind != KF_GROUP_COLREDUCE) || pg->anchor != r->id)
            continue; /* fused into a GEMM or attention already */
        if (pg->kind == KF_GROUP_COLREDUCE && !kf_op_has(r->op, KF_TRAIT_REDUCTION)) {
            for (uint32_t u = 0; u < kf_pl_uses(p, r); u++)
                kf_pl_reject_edge(p, r, kf_pl_consumer(p, r, u), KF_REASON_AXIS_NOT_INNERMOST,
                                  NULL);
            for (int k = 0; k < r->nsrc; k++)
                kf_pl_reject(p, r, k, KF_REASON_AXIS_NOT_INNERMOST, NULL);
            continue;
        }
        kf_pl_grow_epilogue(p, gi, r->rank, r->dims);
    }
    return KF_OK;
}
