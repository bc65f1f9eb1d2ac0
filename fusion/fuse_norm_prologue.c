/*
 * fuse_norm_prologue.c -- rule: a norm whose every use is operand A of a GEMM
 * becomes the prologue of each of those GEMMs: the GEMM computes the row's
 * statistics in a pre-pass over its A rows (BM x K, from L2) and normalizes A
 * as it loads each K tile, so the normalized tensor never reaches memory. A
 * norm read by several GEMMs (the Q, K, V projections) is recomputed by each
 * (fusion.h allows exactly this duplication): reading x three times costs less
 * than writing and reading the normalized copy, and saves a kernel.
 *
 * Legal when [I1..I6]:
 *   - the op has KF_TRAIT_NORM, its axis is the last one [I6], it is not a
 *     graph output [I2], and its dtype is a GEMM dtype [I1];
 *   - every use is slot 0 of a matmul without transpose_a (else NOT_OPERAND_A);
 *   - K (the row length) <= options.norm_prologue_max_k (else
 *     ROW_TOO_LONG_FOR_PROLOGUE): the pre-pass re-reads BM x K of A;
 *   - each GEMM group has no row stage yet [I5] and stays acyclic [I3].
 */
#include "fusion/pass.h"

kf_status kf_fuse_norm_prologue(kf_planner *p) {
    kf_graph *g = p->g;
    for (uint32_t i = 0; i < p->n; i++) {
        kf_tensor *nm = g->nodes[i];
        if (!p->need[i] || !kf_op_has(nm->op, KF_TRAIT_NORM) || !kf_pl_axis_is_last(nm))
            continue;
        uint32_t uses = kf_pl_uses(p, nm);
        if (uses == 0 || p->is_output[i])
            continue;
        bool all_a = true;
        for (uint32_t u = 0; u < uses && all_a; u++) {
            kf_tensor *c = kf_pl_consumer(p, nm, u);
            all_a = kf_op_has(c->op, KF_TRAIT_GEMM) && c->src[0] == nm && c->src[1] != nm &&
                    !c->attr.transpose_a && p->groups[p->gid[c->id]].kind == KF_GROUP_GEMM;
        }
        if (!all_a) {
            for (uint32_t u = 0; u < uses; u++) {
                kf_tensor *c = kf_pl_consumer(p, nm, u);
                if (kf_op_has(c->op, KF_TRAIT_GEMM))
                    kf_pl_reject_edge(p, nm, c,
                                      c->src[0] == nm && !c->attr.transpose_a
                                          ? KF_REASON_MULTIPLE_CONSUMERS
                                          : KF_REASON_NOT_OPERAND_A,
                                      c->src[0] == nm && !c->attr.transpose_a
                                          ? "the norm also has non-GEMM consumers"
                                          : NULL);
            }
            continue;
        }
        int64_t kdim = nm->dims[nm->rank - 1];
        if (kdim > p->opt->norm_prologue_max_k || !kf_pl_gemm_dtype_ok(nm->dtype)) {
            char d[96];
            snprintf(d, sizeof d, "K=%lld > %lld", (long long)kdim,
                     (long long)p->opt->norm_prologue_max_k);
            for (uint32_t u = 0; u < uses; u++)
                kf_pl_reject_edge(p, nm, kf_pl_consumer(p, nm, u),
                                  kf_pl_gemm_dtype_ok(nm->dtype)
                                      ? KF_REASON_ROW_TOO_LONG_FOR_PROLOGUE
                                      : KF_REASON_DTYPE_UNSUPPORTED,
                                  kf_pl_gemm_dtype_ok(nm->dtype) ? d : NULL);
            continue;
        }
        /* Every consumer group must be free to take it. */
        bool free_all = true;
        for (uint32_t u = 0; u < uses && free_all; u++) {
            kf_pgroup *pg = &p->groups[p->gid[kf_pl_consumer(p, nm, u)->id]];
            free_all = pg->prologue == KF_NONE && pg->row_op == KF_NONE;
        }
        if (!free_all)
            continue;
        uint32_t first = p->gid[kf_pl_consumer(p, nm, 0)->id];
        uint32_t ids[1] = {nm->id};
        if (!kf_pl_try_merge_list(p, first, ids, 1))
            continue;
        for (uint32_t u = 0; u < uses; u++) {
            kf_pgroup *pg = &p->groups[p->gid[kf_pl_consumer(p, nm, u)->id]];
            pg->prologue = nm->id;
        }
        if (uses > 1)
            p->shared_prologue[nm->id] = 1;
    }
    return KF_OK;
}
