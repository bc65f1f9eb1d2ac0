/*
 * fuse_head_epilogue.c -- rule (asked for: kf_plan_options.gemm_head_epilogue,
 * KF_FLAG_GEMM_HEAD_EPILOGUE): a GEMM absorbs the elementwise consumer of its
 * product's HEAD VIEW, the way attention models write a rotary embedding
 * (RoPE) of the q and k projections:
 *
 *   p = matmul(x, W)                  [batch..., M, N]
 *   v = reshape(p, [.., M, H, D])     N = H * D, only the last axis split
 *   v' = permute(v, [.., H, M, D])    optional: M and H swapped, D stays last
 *   y = q * cos + concat(-q[.., D/2:], q[.., :D/2]) * sin   (q = v or v')
 *
 * Without this rule p is written, v and v' are views of it, and y is its own
 * kernel that reads p back (LAYOUT_CHANGE: a view of a value computed in a
 * kernel). With it the GEMM group's iteration space is the head view itself
 * (gemm.head_dim, gemm.heads_first): each element's accumulator is the
 * product at (.., m, h * D + d), the consumer's loads of the head view become
 * ACC nodes, and a slice or concat along the head axis D becomes an ACC node
 * at an in-head column (ACC with a coordinate node: the partner of the
 * rotate-half, column d +- D/2 of the same row and head). Only y is written,
 * in its own row-major layout, which is the group's space: no strided store.
 *
 * Why in-head only: a tile of the product that holds whole heads of a row
 * holds every partner a slice or concat along D can name, so a backend reads
 * it from the accumulators it already has (the CPU's tile holds whole rows;
 * the CUDA kernels' column tile is a multiple of D, aligned to it). Any other
 * read of the head view -- a slice or gather over M, H or the batch, a repeat,
 * a reshape of the rotated halves back together (interleaved pairs written
 * with stack + flatten), a consumer whose space is not the head view's --
 * leaves the plan as it was, with reason NOT_HEAD_LOCAL on the edge
 * p -> reshape and the cause in its detail. Partial rotary (a slice and concat
 * of the first R < D columns, the rest passed through) is in-head: it fuses.
 *
 * Legality [I1..I7]: p's group is a GEMM with one anchor, no epilogue member
 * and no row stage (a norm prologue on A is fine) [I5]; p, v (and v') each
 * have one use and are not graph outputs, so the product is never needed
 * unrotated [I2] (else MULTIPLE_CONSUMERS / GRAPH_OUTPUT on p -> reshape); the
 * head view's consumers are all in one ELEMENTWISE group whose space is the
 * head view's shape [I4]; the union stays acyclic [I3]. The pass runs after
 * fuse_elementwise, which formed that group.
 */
#include <string.h>

#include "fusion/pass.h"

/* Overrides the reason of every edge producer -> consumer (the rule knows
 * better than the LAYOUT_CHANGE an earlier pass put there). */
static void set_edge(kf_planner *p, const kf_tensor *producer, const kf_tensor *consumer,
                     kf_reason r, const char *detail) {
    for (int k = 0; k < consumer->nsrc; k++) {
        if (consumer->src[k] != producer)
            continue;
        uint32_t e = consumer->id * 3u + (uint32_t)k;
        p->reason[e] = r;
        snprintf(p->detail[e], sizeof p->detail[e], "%s", detail ? detail : "");
    }
}

/* Is the permute a head view's (batch axes in place, D last, M and H swapped)? */
static bool head_permute(const kf_tensor *t) {
    int r = t->rank;
    for (int d = 0; d < r - 3; d++)
        if (t->attr.perm[d] != d)
            return false;
    return t->attr.perm[r - 1] == r - 1 && t->attr.perm[r - 3] == r - 2 &&
           t->attr.perm[r - 2] == r - 3;
}

/* Why group `eg` may not run over head view hv inside the GEMM (NULL: it may). */
static const char *consumer_refusal(kf_planner *p, uint32_t eg, const kf_tensor *hv) {
    const kf_pgroup *e = &p->groups[eg];
    if (e->kind != KF_GROUP_ELEMENTWISE)
        return "the head view's consumer is not an elementwise kernel";
    uint32_t n = kf_pl_members(p, eg, p->list);
    const kf_tensor *sink = n ? p->g->nodes[p->list[n - 1]] : NULL;
    if (!sink || !kf_pl_same_shape(sink, hv))
        return "the consumer's space is not the head view's";
    for (uint32_t i = 0; i < n; i++) {
        const kf_tensor *t = p->g->nodes[p->list[i]];
        if (!kf_op_has(t->op, KF_TRAIT_REMAP))
            continue;
        if ((t->op != KF_OP_SLICE && t->op != KF_OP_CONCAT) || t->attr.axis != t->rank - 1 ||
            t->rank != hv->rank)
            return "the consumer reads across heads (only slices and concats along D fuse)";
    }
    return NULL;
}

kf_status kf_fuse_head_epilogue(kf_planner *p) {
    if (!p->opt->gemm_head_epilogue)
        return KF_OK;
    kf_graph *g = p->g;
    for (uint32_t i = 0; i < p->n; i++) {
        kf_tensor *mm = g->nodes[i];
        if (!p->need[i] || !kf_op_has(mm->op, KF_TRAIT_GEMM) || mm->rank + 1 > KF_MAX_RANK)
            continue;
        uint32_t gi = p->gid[i];
        kf_pgroup *pg = &p->groups[gi];
        if (pg->kind != KF_GROUP_GEMM || pg->anchor != mm->id || pg->anchor2 != KF_NONE ||
            pg->row_op != KF_NONE || pg->head_view != KF_NONE || kf_pl_uses(p, mm) == 0)
            continue;
        /* The head view: reshape(mm) splitting only the last axis. */
        kf_tensor *rs = NULL;
        for (uint32_t u = 0; u < kf_pl_uses(p, mm); u++) {
            kf_tensor *c = kf_pl_consumer(p, mm, u);
            if (c->op == KF_OP_RESHAPE && c->rank == mm->rank + 1 &&
                memcmp(c->dims, mm->dims, sizeof(int64_t) * (size_t)(mm->rank - 1)) == 0 &&
                c->dims[c->rank - 2] * c->dims[c->rank - 1] == mm->dims[mm->rank - 1] &&
                c->dims[c->rank - 1] > 1)
                rs = c;
        }
        if (!rs)
            continue;
        if (p->is_output[mm->id] || !kf_pl_single_use(p, mm)) {
            set_edge(p, mm, rs,
                     p->is_output[mm->id] ? KF_REASON_GRAPH_OUTPUT : KF_REASON_MULTIPLE_CONSUMERS,
                     "the product is also needed unrotated: no head-split epilogue");
            continue;
        }
        /* No epilogue member (members before the product are A's prologue). */
        uint32_t nm = kf_pl_members(p, gi, p->list);
        if (nm == 0 || p->list[nm - 1] != mm->id)
            continue;
        kf_tensor *hv = rs;
        if (kf_pl_single_use(p, rs)) {
            kf_tensor *c = kf_pl_consumer(p, rs, 0);
            if (c->op == KF_OP_PERMUTE && head_permute(c))
                hv = c;
        }
        const char *why = NULL;
        if (kf_pl_uses(p, hv) == 0)
            continue;
        uint32_t c0 = p->gid[kf_pl_consumer(p, hv, 0)->id];
        if (c0 == KF_NONE || p->groups[c0].kind != KF_GROUP_ELEMENTWISE)
            continue; /* nothing to fuse (attention reads the view as it is) */
        if (p->is_output[hv->id] || (hv != rs && p->is_output[rs->id]))
            why = "the head view is a graph output";
        uint32_t eg = KF_NONE;
        for (uint32_t u = 0; !why && u < kf_pl_uses(p, hv); u++) {
            uint32_t cg = p->gid[kf_pl_consumer(p, hv, u)->id];
            if (eg != KF_NONE && cg != eg)
                why = "the head view has consumers in several kernels";
            eg = cg;
        }
        if (!why && eg == KF_NONE)
            why = "the head view has no consumer";
        if (!why)
            why = consumer_refusal(p, eg, hv);
        if (!why) {
            uint32_t ids[3] = {rs->id, hv->id, p->list[0]}; /* list: eg's members */
            if (!kf_pl_try_merge_list(p, gi, ids, 3))
                why = "fusing would make the group depend on itself";
        }
        if (why) {
            set_edge(p, mm, rs, KF_REASON_NOT_HEAD_LOCAL, why);
            continue;
        }
        p->groups[gi].head_view = hv->id;
    }
    return KF_OK;
}
