/*
 * fuse_gemm_epilogue.c -- rule: a GEMM absorbs the elementwise work on its
 * output (bias, activation, residual, scale, cast) as an epilogue over the
 * accumulator, and a norm or softmax of that output when the row fits one
 * tile row (N <= options.gemm_row_epilogue_max_n): the CTA that owns a BM x N
 * tile owns whole rows, so it can compute the row statistics before storing.
 *
 * kf_pl_grow_epilogue is shared with the row-wise rule: it walks forward from
 * the group's members and absorbs each consumer that
 *   - is elementwise with exactly the anchor's output shape [I4]
 *     (else NO_BROADCAST_INTO_ANCHOR);
 *   - keeps the group acyclic [I3] (else WOULD_CREATE_CYCLE);
 *   - or, for a GEMM without a row stage [I5], is a last-axis [I6] norm or
 *     softmax of a member with the anchor's shape and N within the limit;
 *   - or, past that limit, is such a NORM (LayerNorm / RMSNorm, not softmax)
 *     with N <= options.gemm_row_split_max_n (0 by default: asked for with
 *     KF_FLAG_SPLIT_ROW_NORMS) that no GEMM took as its
 *     prologue: the split row form (gemm.row_split). No CTA owns a whole row
 *     any more, but a norm's statistics merge (a sum of squares, or a mean
 *     and M2 that Chan's formula combines), so the row stage can be reduced
 *     apart from the tiles, after the GEMM's epilogue computed its input
 *     rows (else ROW_TOO_LONG_FOR_GEMM_EPILOGUE, with the limit that refused).
 * Members with other uses or that are graph outputs are written by the group
 * and fusion goes on past them (multi-output epilogue, [I2]).
 * A GEMM whose dtype is not f32/f16/bf16 runs unfused (DTYPE_UNSUPPORTED) [I1].
 */
#include <string.h>

#include "fusion/pass.h"

static void reject_other(kf_planner *p, const kf_tensor *t, const kf_tensor *c, bool gemm) {
    if (kf_op_has(c->op, KF_TRAIT_LAYOUT))
        kf_pl_reject_edge(p, t, c, KF_REASON_LAYOUT_CHANGE, NULL);
    else if (kf_op_has(c->op, KF_TRAIT_REMAP)) /* read from memory by its own group */
        kf_pl_reject_edge(p, t, c, KF_REASON_REMAP_INTO_ANCHOR,
                          gemm ? "a GEMM epilogue writes its tile in place"
                               : "a row kernel's epilogue writes its row in place");
    else if (kf_op_has(c->op, KF_TRAIT_ROWWISE) && !kf_pl_axis_is_last(c))
        kf_pl_reject_edge(p, t, c, KF_REASON_AXIS_NOT_INNERMOST, NULL);
    else if (gemm && kf_op_has(c->op, KF_TRAIT_ROWWISE) && !kf_op_has(c->op, KF_TRAIT_NORM) &&
             !kf_op_has(c->op, KF_TRAIT_SOFTMAX))
        kf_pl_reject_edge(p, t, c, KF_REASON_ANCHOR_BOUNDARY,
                          "a reduction of a GEMM output runs as its own row-wise kernel");
    else
        kf_pl_reject_edge(p, t, c, KF_REASON_ANCHOR_BOUNDARY, NULL);
}

void kf_pl_grow_epilogue(kf_planner *p, uint32_t gi, int rank, const int64_t *dims) {
    kf_graph *g = p->g;
    kf_pgroup *pg = &p->groups[gi];
    bool gemm = pg->kind == KF_GROUP_GEMM;
    /* Work list: members in id order; new members are appended. */
    uint32_t *work = p->list;
    uint32_t top = kf_pl_members(p, gi, work);
    for (uint32_t w = 0; w < top; w++) {
        kf_tensor *t = g->nodes[work[w]];
        /* Only members on the anchor's output shape continue the epilogue. */
        bool on_space =
            t->rank == rank && memcmp(t->dims, dims, sizeof(int64_t) * (size_t)rank) == 0;
        if (!on_space || p->gid[t->id] != gi || (t->id == pg->prologue))
            continue;
        for (uint32_t u = 0; u < kf_pl_uses(p, t); u++) {
            kf_tensor *c = kf_pl_consumer(p, t, u);
            if (p->gid[c->id] == gi)
                continue;
            if (kf_pl_is_elementwise(c)) {
                if (c->rank != rank || memcmp(c->dims, dims, sizeof(int64_t) * (size_t)rank)) {
                    char a[160], b[160], d[96];
                    kf_tensor sp = {.dtype = t->dtype, .rank = rank};
                    memcpy(sp.dims, dims, sizeof(int64_t) * (size_t)rank);
                    snprintf(d, sizeof d, "%s is larger than the anchor's %s",
                             kf_ir_type_str(c, a, sizeof a), kf_ir_type_str(&sp, b, sizeof b));
                    kf_pl_reject_edge(p, t, c, KF_REASON_NO_BROADCAST_INTO_ANCHOR, d);
                    continue;
                }
                if (p->groups[p->gid[c->id]].kind != KF_GROUP_ELEMENTWISE) {
                    reject_other(p, t, c, gemm);
                    continue;
                }
                if (!kf_pl_can_merge(p, gi, p->gid[c->id])) {
                    kf_pl_reject_edge(p, t, c, KF_REASON_WOULD_CREATE_CYCLE,
                                      "its other operand depends on this kernel's output");
                    continue;
                }
                kf_pl_merge(p, gi, p->gid[c->id]);
                work[top++] = c->id;
                continue;
            }
            if (gemm && kf_op_has(c->op, KF_TRAIT_ROWWISE) &&
                (kf_op_has(c->op, KF_TRAIT_NORM) || kf_op_has(c->op, KF_TRAIT_SOFTMAX)) &&
                kf_pl_axis_is_last(c) && c->src[0] == t) {
                int64_t nn = dims[rank - 1];
                if (pg->row_op != KF_NONE || pg->prologue != KF_NONE) {
                    kf_pl_reject_edge(p, t, c, KF_REASON_ANCHOR_BOUNDARY,
                                      "the GEMM already has a row stage");
                    continue;
                }
                bool split = false;
                if (nn > p->opt->gemm_row_epilogue_max_n) {
                    /* The split form: a norm whose statistics merge across
                     * tiles, not already the prologue of the GEMM it feeds. */
                    split = kf_op_has(c->op, KF_TRAIT_NORM) && nn <= p->opt->gemm_row_split_max_n &&
                            p->groups[p->gid[c->id]].kind == KF_GROUP_ROWWISE;
                    if (!split) {
                        char d[96];
                        if (kf_op_has(c->op, KF_TRAIT_NORM) && p->opt->gemm_row_split_max_n > 0 &&
                            nn > p->opt->gemm_row_split_max_n)
                            snprintf(d, sizeof d, "N=%lld > %lld (split row statistics)",
                                     (long long)nn, (long long)p->opt->gemm_row_split_max_n);
                        else
                            snprintf(d, sizeof d, "N=%lld > %lld", (long long)nn,
                                     (long long)p->opt->gemm_row_epilogue_max_n);
                        kf_pl_reject_edge(p, t, c, KF_REASON_ROW_TOO_LONG_FOR_GEMM_EPILOGUE, d);
                        continue;
                    }
                }
                if (p->groups[p->gid[c->id]].kind != KF_GROUP_ROWWISE) {
                    kf_pl_reject_edge(p, t, c, KF_REASON_ANCHOR_BOUNDARY,
                                      "the norm is already the prologue of the GEMM it feeds");
                    continue;
                }
                if (!kf_pl_can_merge(p, gi, p->gid[c->id])) {
                    kf_pl_reject_edge(p, t, c, KF_REASON_WOULD_CREATE_CYCLE, NULL);
                    continue;
                }
                kf_pl_merge(p, gi, p->gid[c->id]);
                pg = &p->groups[gi];
                pg->row_op = c->id;
                pg->row_split = split;
                work[top++] = c->id;
                continue;
            }
            reject_other(p, t, c, gemm);
        }
    }
}

kf_status kf_fuse_gemm_epilogue(kf_planner *p) {
    kf_graph *g = p->g;
    for (uint32_t i = 0; i < p->n; i++) {
        kf_tensor *mm = g->nodes[i];
        if (!p->need[i] || !kf_op_has(mm->op, KF_TRAIT_GEMM))
            continue;
        uint32_t gi = p->gid[i];
        kf_pgroup *pg = &p->groups[gi];
        if (pg->kind != KF_GROUP_GEMM || pg->anchor != mm->id)
            continue; /* inside an attention group, or SwiGLU's second GEMM */
        if (!kf_pl_gemm_dtype_ok(mm->dtype)) {
            for (uint32_t u = 0; u < kf_pl_uses(p, mm); u++)
                kf_pl_reject_edge(p, mm, kf_pl_consumer(p, mm, u), KF_REASON_DTYPE_UNSUPPORTED,
                                  "GEMM anchors take f32, f16, bf16");
            continue;
        }
        kf_pl_grow_epilogue(p, gi, mm->rank, mm->dims);
    }
    return KF_OK;
}
