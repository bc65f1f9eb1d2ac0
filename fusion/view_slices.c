/*
 * view_slices.c -- rule: a slice that no consumer took in as index arithmetic
 * (it feeds an attention operand, a layout op, or several groups) and whose
 * operand is in memory becomes a VIEW: no kernel, its consumers read the
 * operand's buffer at the slice's offset with the operand's strides (the step
 * scales the sliced axis's stride). A fused QKV projection's V, sliced out of
 * [B, S, 3H, D] and permuted to [B, H, S, D], is then read by the attention
 * kernel straight from the projection's output.
 *
 * Legal when [I1..I7]:
 *   - t is a slice alone in an elementwise group (no rule placed it) and not a
 *     graph output (an output never aliases a view with an offset) [I2];
 *   - its operand is in memory: a graph input, a multi-element constant or a
 *     tensor some group computes (and therefore writes, as t reads it) [I2];
 *   - every consumer reads it through expression loads (elementwise, row-wise
 *     and column kernels, an attention group's operands or score loads), or is
 *     a layout op whose own consumers do (it stays a view of the same buffer,
 *     or becomes a copy that loads it). A GEMM group reads operands as
 *     matrices with one batch stride and no offset of the generated kernels'
 *     own: it keeps the slice's copy kernel [I4].
 * The view keeps no group acyclicity question open: it only leaves a group
 * and computes nothing [I3]. Edges into and out of it are LAYOUT_CHANGE [I7].
 */
#include "fusion/pass.h"

static bool group_alone(const kf_planner *p, uint32_t gi, uint32_t t) {
    for (uint32_t i = 0; i < p->n; i++)
        if (p->gid[i] == gi && i != t)
            return false;
    return true;
}

/* Whether every consumer of t reads it through loads (see the top). */
static bool read_by_loads(const kf_planner *p, const kf_tensor *t, int depth) {
    if (depth > 8)
        return false;
    for (uint32_t u = 0; u < kf_pl_uses(p, t); u++) {
        const kf_tensor *c = kf_pl_consumer(p, t, u);
        uint32_t gc = p->gid[c->id];
        if (gc == KF_NONE)
            return false;
        switch (p->groups[gc].kind) {
        case KF_GROUP_ELEMENTWISE:
        case KF_GROUP_ROWWISE:
        case KF_GROUP_COLREDUCE:
        case KF_GROUP_ATTENTION:
            break;
        case KF_GROUP_VIEW:
            if (!kf_op_has(c->op, KF_TRAIT_LAYOUT) || !read_by_loads(p, c, depth + 1))
                return false;
            break;
        default:
            return false;
        }
    }
    return true;
}

static bool in_memory(const kf_planner *p, const kf_tensor *s) {
    if (p->gid[s->id] != KF_NONE)
        return true;
    return s->op == KF_OP_INPUT || (s->op == KF_OP_CONST && kf_ir_numel(s) > 1);
}

kf_status kf_view_slices(kf_planner *p) {
    kf_graph *g = p->g;
    for (uint32_t i = 0; i < p->n; i++) {
        kf_tensor *t = g->nodes[i];
        uint32_t gi = p->gid[i];
        if (!p->need[i] || t->op != KF_OP_SLICE || p->is_output[i] || gi == KF_NONE ||
            p->groups[gi].kind != KF_GROUP_ELEMENTWISE || !group_alone(p, gi, i) ||
            !in_memory(p, t->src[0]) || !read_by_loads(p, t, 0))
            continue;
        p->groups[gi].kind = KF_GROUP_VIEW;
        p->groups[gi].anchor = i;
    }
    return KF_OK;
}
