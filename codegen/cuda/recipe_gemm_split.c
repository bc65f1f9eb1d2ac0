/*
 * recipe_gemm_split.c -- a GEMM group in the split row form (fusion.h,
 * gemm.row_split) on the generated side, for either generated kernel
 * (recipe_gemm.c's kf_rb_gemm_generated: sm_90a and sm_80): two kernels, each
 * generated from a rewritten copy of the plan that lives only for the
 * generators' calls:
 *   gemm copy  the group without its row stage, writing every write that no
 *              row statistic reaches and the norm's input X (row.input's
 *              tensor; into a SCRATCH keyed by it where the plan does not
 *              materialize X): the generated GEMM kernel, epilogue in registers;
 *   row copy   X turned into the accumulator (an ACC node of "anchor" X's
 *              tensor, so the row kernel reads it through an ACC param keyed
 *              by X) and only the writes the statistics reach: the row-epilogue
 *              kernel cuBLASLt's side runs too, here reading X once.
 * X is rounded to its dtype where the reference rounds it, so the row pass
 * sees exactly the reference's values.
 */
#include <stdio.h>
#include <string.h>

#include "codegen/cuda/recipe_internal.h"

void kf_rb_split_free(const kf_mem *mem, kf_rb_split *sc) {
    for (int i = 0; i < 2; i++)
        kf_mem_free(mem, sc->groups[i], sc->n_groups * sizeof *sc->groups[i]);
    kf_mem_free(mem, sc->rexpr, sc->n_expr * sizeof *sc->rexpr);
    for (int i = 0; i < 4; i++)
        kf_mem_free(mem, sc->arr[i], sc->cap * sizeof *sc->arr[i]);
    memset(sc, 0, sizeof *sc);
}

const char *kf_rb_split_make(rb *b, kf_rb_split *sc, kf_status *st) {
    const kf_plan *plan = b->plan;
    const kf_group *grp = &plan->groups[b->gi];
    memset(sc, 0, sizeof *sc);
    *st = KF_OK;
    uint32_t x = grp->row.input;
    if (!grp->row.present || x >= grp->n_expr || grp->expr[x].space != KF_SPACE_OUT ||
        grp->expr[x].tensor == KF_NONE)
        return "the norm's input is not a tensor of the output space";
    const kf_tensor *mm = plan->graph->nodes[grp->gemm.anchor[0]];
    uint32_t xt = grp->expr[x].tensor;
    if (plan->graph->nodes[xt]->dtype != mm->dtype)
        return "the norm's input has another dtype than the product";
    /* dep[k]: node k is reached by a row statistic */
    bool *dep = kf_mem_calloc(b->mem, grp->n_expr + 1, sizeof *dep);
    sc->n_groups = plan->n_groups;
    sc->n_expr = grp->n_expr;
    sc->cap = grp->n_writes + 1;
    for (int i = 0; i < 2; i++)
        sc->groups[i] = kf_mem_alloc(b->mem, sc->n_groups * sizeof *sc->groups[i]);
    sc->rexpr = kf_mem_alloc(b->mem, sc->n_expr * sizeof *sc->rexpr);
    for (int i = 0; i < 4; i++)
        sc->arr[i] = kf_mem_alloc(b->mem, sc->cap * sizeof *sc->arr[i]);
    bool ok = dep && sc->groups[0] && sc->groups[1] && sc->rexpr;
    for (int i = 0; i < 4; i++)
        ok = ok && sc->arr[i];
    if (!ok) {
        kf_mem_free(b->mem, dep, (grp->n_expr + 1) * sizeof *dep);
        kf_rb_split_free(b->mem, sc);
        *st = kf_msg_set(b->err, KF_ERR_OUT_OF_MEMORY, "out of memory");
        return "out of memory";
    }
    for (uint32_t k = 0; k < grp->n_expr; k++) {
        const kf_expr *e = &grp->expr[k];
        dep[k] = e->kind == KF_EXPR_STAT;
        for (int j = 0; j < 3 && !dep[k]; j++)
            dep[k] = e->src[j] != KF_NONE && e->src[j] < k && dep[e->src[j]];
    }
    uint32_t ng = 0, nr = 0;
    sc->x = x;
    sc->x_tensor = xt;
    for (uint32_t w = 0; w < grp->n_writes; w++) {
        uint32_t rt = grp->roots ? grp->roots[w] : KF_NONE;
        bool stat = rt != KF_NONE && rt < grp->n_expr && dep[rt];
        if (grp->writes[w] == xt)
            sc->x_written = true;
        if (stat) {
            sc->arr[2][nr] = grp->writes[w];
            sc->arr[3][nr++] = rt;
        } else {
            sc->arr[0][ng] = grp->writes[w];
            sc->arr[1][ng++] = rt;
        }
    }
    kf_mem_free(b->mem, dep, (grp->n_expr + 1) * sizeof *dep);
    if (!sc->x_written) {
        sc->arr[0][ng] = xt;
        sc->arr[1][ng++] = x;
    }
    if (nr == 0) {
        kf_rb_split_free(b->mem, sc);
        return "no write of the group reads the row statistics";
    }
    /* the GEMM's copy: no row stage */
    memcpy(sc->groups[0], plan->groups, sc->n_groups * sizeof *sc->groups[0]);
    kf_group *gg = &sc->groups[0][b->gi];
    gg->row.present = false;
    gg->gemm.row_epilogue = gg->gemm.row_split = false;
    gg->writes = sc->arr[0];
    gg->roots = sc->arr[1];
    gg->n_writes = ng;
    sc->gplan = *plan;
    sc->gplan.groups = sc->groups[0];
    /* the row pass's copy: X is the accumulator */
    memcpy(sc->groups[1], plan->groups, sc->n_groups * sizeof *sc->groups[1]);
    memcpy(sc->rexpr, grp->expr, sc->n_expr * sizeof *sc->rexpr);
    kf_expr *ex = &sc->rexpr[x];
    kf_expr acc;
    memset(&acc, 0, sizeof acc);
    acc.kind = KF_EXPR_ACC;
    acc.dtype = ex->dtype;
    acc.space = KF_SPACE_OUT;
    acc.src[0] = acc.src[1] = acc.src[2] = KF_NONE;
    acc.tensor = xt;
    acc.base = KF_NONE;
    acc.anchor = 0;
    *ex = acc;
    kf_group *rg = &sc->groups[1][b->gi];
    rg->expr = sc->rexpr;
    rg->writes = sc->arr[2];
    rg->roots = sc->arr[3];
    rg->n_writes = nr;
    rg->gemm.n_anchors = 1;
    rg->gemm.anchor[0] = xt;
    sc->rplan = *plan;
    sc->rplan.groups = sc->groups[1];
    return NULL;
}

kf_status kf_rb_split_row_pass(rb *b, const kf_rb_split *sc, char *why, size_t why_size) {
    const kf_group *grp = &b->plan->groups[b->gi];
    char row_name[KF_CUDA_NAME_MAX] = "";
    kf_cuda_buf xb = sc->x_written ? kf_rb_tensor(b, sc->x_tensor)
                                   : kf_rb_find(b, KF_CUDA_PARAM_SCRATCH, sc->x_tensor);
    kf_status st = xb.kind == KF_CUDA_BUF_NONE
                       ? kf_msg_set(b->err, KF_ERR_INTERNAL,
                                    "group %u (%s): the split GEMM wrote no scratch for its rows",
                                    b->gi, grp->name)
                       : kf_rb_set(b, KF_CUDA_PARAM_ACC, sc->x_tensor, xb);
    if (st == KF_OK)
        st =
            kf_rb_add_kernel(b, &sc->rplan, KF_CUDA_ROLE_EPILOGUE, row_name, sizeof row_name, NULL);
    if (st == KF_ERR_NOT_FOUND)
        st = kf_msg_set(b->err, KF_ERR_INTERNAL,
                        "group %u (%s): no row pass for the split row form", b->gi, grp->name);
    if (st != KF_OK)
        return st;
    size_t len = strlen(why);
    snprintf(why + len, why_size - len,
             "; split row form: the epilogue writes the norm's input rows, then the row pass %s",
             row_name);
    return KF_OK;
}
