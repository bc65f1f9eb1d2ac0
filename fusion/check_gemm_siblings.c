/*
 * check_gemm_siblings.c -- the checker's rule S10 (fusion/check.c): the GEMM
 * sibling sets fuse_gemm_siblings formed keep the form a backend relies on
 * when it runs a set as one (the row statistics or the normalized A computed
 * once, every member's GEMM at the set's first group):
 *   - a set is a run of adjacent groups [first, first + count), 2 <= count <=
 *     gemm_sibling_max, each naming the set's first group, the count and its
 *     own place (gemm.sib_index);
 *   - each member is a single GEMM (not a SwiGLU pair) with no row stage on
 *     its output, whose A is computed by a norm prologue: the same norm
 *     tensor in every member, with the same K, batch, M and product and B
 *     dtypes;
 *   - no member reads a tensor another member writes, so every member's
 *     reads are in memory before the set's first group runs (S4 then puts
 *     them before the first member).
 */
#include <stdarg.h>
#include <string.h>

#include "fusion/fusion.h"

static kf_status sib_fail(const kf_plan *plan, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static kf_status sib_fail(const kf_plan *plan, const char *fmt, ...) {
    char msg[KF_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kf_ir_note(plan->graph, KF_ERR_INTERNAL, "plan check: S10: %s", msg);
}

static bool writes_tensor(const kf_group *g, uint32_t t) {
    for (uint32_t i = 0; i < g->n_writes; i++)
        if (g->writes[i] == t)
            return true;
    return false;
}

kf_status kf_plan_check_gemm_siblings(const kf_plan *plan) {
    if (!plan || !plan->graph)
        return KF_ERR_INVALID_ARGUMENT;
    const kf_graph *g = plan->graph;
    uint32_t max =
        plan->options.gemm_sibling_max ? plan->options.gemm_sibling_max : KF_GEMM_SIBLING_MAX;
    for (uint32_t gi = 0; gi < plan->n_groups; gi++) {
        const kf_group *grp = &plan->groups[gi];
        if (!kf_group_in_gemm_sib_set(grp) || grp->gemm.sib_index != 0)
            continue;
        const kf_gemm_info *g0 = &grp->gemm;
        if (g0->sib_first != gi)
            return sib_fail(plan, "group %u is a set's first member but names group %u as first",
                            gi, g0->sib_first);
        if (g0->sib_count > max || g0->sib_count > plan->n_groups - gi)
            return sib_fail(plan,
                            "the set at group %u has %u members (the bound is %u, %u groups "
                            "follow)",
                            gi, g0->sib_count, max, plan->n_groups - gi);
        const kf_tensor *m0 = g->nodes[g0->anchor[0]];
        for (uint32_t j = 0; j < g0->sib_count; j++) {
            const kf_group *mj = &plan->groups[gi + j];
            const kf_gemm_info *gm = &mj->gemm;
            if (!kf_group_in_gemm_sib_set(mj) || gm->sib_first != gi || gm->sib_index != j ||
                gm->sib_count != g0->sib_count)
                return sib_fail(plan,
                                "group %u, member %u of the set at group %u, names another set "
                                "(first %u, index %u, count %u)",
                                gi + j, j, gi, gm->sib_first, gm->sib_index, gm->sib_count);
            const kf_tensor *mm = g->nodes[gm->anchor[0]];
            if (gm->n_anchors != 1 || gm->row_epilogue || !gm->a_prologue || gm->a[0] != g0->a[0])
                return sib_fail(plan,
                                "group %u in the set at group %u is not a single GEMM reading "
                                "the set's norm prologue %%%u",
                                gi + j, gi, g0->a[0]);
            if (gm->k != g0->k || gm->m != g0->m || gm->batch != g0->batch ||
                mm->dtype != m0->dtype || mm->src[1]->dtype != m0->src[1]->dtype)
                return sib_fail(plan,
                                "group %u in the set at group %u differs in K, M, batch or "
                                "dtype",
                                gi + j, gi);
            /* no member reads what another writes */
            for (uint32_t r = 0; r < mj->n_reads; r++)
                for (uint32_t o = 0; o < g0->sib_count; o++)
                    if (o != j && writes_tensor(&plan->groups[gi + o], mj->reads[r]))
                        return sib_fail(plan,
                                        "group %u reads %%%u, which group %u of its set writes",
                                        gi + j, mj->reads[r], gi + o);
        }
    }
    /* a member whose set's first member does not claim it */
    for (uint32_t gi = 0; gi < plan->n_groups; gi++) {
        const kf_group *grp = &plan->groups[gi];
        if (!kf_group_in_gemm_sib_set(grp))
            continue;
        uint32_t f = grp->gemm.sib_first;
        if (f > gi || f + grp->gemm.sib_index != gi ||
            !kf_group_in_gemm_sib_set(&plan->groups[f]) || plan->groups[f].gemm.sib_index != 0)
            return sib_fail(plan, "group %u names group %u as its set's first member at place %u",
                            gi, f, grp->gemm.sib_index);
    }
    return KF_OK;
}
