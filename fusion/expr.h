/*
 * expr.h -- helpers over the scalar-expression form (fusion/expr.c): the
 * scalar evaluator and printer. Internal to fusion/ and its tests; the form
 * itself is declared in fusion/fusion.h.
 */
#ifndef KF_FUSION_EXPR_H
#define KF_FUSION_EXPR_H

#include "fusion/fusion.h"

/* Evaluates nodes 0..upto of g's pool into vals (g->n_expr entries): OP and
 * CONST nodes here (ops through kf_ir_scalar, the reference's own definition),
 * every other leaf through `leaf`. Nodes with a tensor round
 * to their dtype. */
void kf_expr_eval(const kf_group *g, uint32_t upto, double *vals,
                  double (*leaf)(void *user, const kf_expr *e), void *user);
/* Classifies the mask of an attention group's score expression (fills
 * g->attn.mask, window, mask_node). Needs g->n_expr doubles of scratch. */
kf_status kf_attn_classify_mask(const kf_plan *plan, kf_group *g);

#endif /* KF_FUSION_EXPR_H */
