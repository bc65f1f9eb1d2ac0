/*
 * lg_row.c -- ROWWISE and COLREDUCE groups: one outer iteration per row (all
 * indices of the row stage's space but the reduced axis). Per row: the
 * prologue expression is evaluated once per element into a scratch row, the
 * statistics are reduced from it in f32 (f64 for f64 rows; i64 sums for i32)
 * in at most two passes, then the epilogue runs per output element: along the
 * row for softmax and norms, once per row for reductions. Reductions over the
 * last axis are unit-stride and marked reassociable, so they vectorize; a
 * COLREDUCE row is a strided walk (correct, not fast).
 */
#include "codegen/llvm/lg.h"

typedef struct row_ctx {
    lg_point *pt;
    int axis;
} row_ctx;

static LLVMValueRef x_at(lg_fn *f, void *user, LLVMValueRef j) {
    row_ctx *rc = user;
    rc->pt->idx[rc->axis] = j;
    lg_point_reset(f, rc->pt);
    return lg_expr(f, rc->pt, f->g->row.input);
}

void lg_emit_row(lg_fn *f) {
    lg_mod *m = f->m;
    const kf_group *g = f->g;
    const kf_row_stage *rs = &g->row;
    LLVMBuilderRef B = m->B;
    if (!rs->present || rs->input == KF_NONE) {
        lg_fail(m, KF_ERR_INTERNAL, "codegen/llvm: row group %u has no row stage", g->id);
        return;
    }
    const kf_tensor *x = m->graph->nodes[m->graph->nodes[rs->tensor]->src[0]->id];
    int rank = rs->space == KF_SPACE_ROW ? g->row_rank : g->rank;
    const int64_t *dims = rs->space == KF_SPACE_ROW ? g->row_dims : g->dims;
    int axis = rs->axis + (rank - x->rank);
    if (axis < 0 || axis >= rank || dims[axis] != rs->length) {
        lg_fail(m, KF_ERR_INTERNAL, "codegen/llvm: row group %u: axis %d does not fit its space",
                g->id, rs->axis);
        return;
    }
    bool along = rs->space == KF_SPACE_OUT; /* epilogue along the row */
    if (!along && g->rank != rank && g->rank != rank - 1) {
        lg_fail(m, KF_ERR_UNSUPPORTED,
                "codegen/llvm: row group %u: output rank %d from rows of rank %d", g->id, g->rank,
                rank);
        return;
    }
    int64_t odims[KF_MAX_RANK];
    int on = 0;
    int64_t rows = 1;
    for (int d = 0; d < rank; d++) {
        if (d != axis) {
            odims[on++] = dims[d];
            rows *= dims[d];
        }
    }
    f->k->outer = rows;
    f->k->cost = (double)rs->length * (3.0 + g->n_expr);
    kf_dtype xdt = g->expr[rs->input].dtype;
    LLVMTypeRef ct = lg_ctype(m, xdt);
    if (ct == m->i1) {
        lg_fail(m, KF_ERR_UNSUPPORTED, "codegen/llvm: row group %u reduces bool values", g->id);
        return;
    }
    LLVMValueRef cache = lg_scratch(f, (size_t)rs->length * 8);

    lg_point px, po;
    if (!lg_point_init(f, &px, rank))
        return;
    if (!lg_point_init(f, &po, along ? rank : g->rank)) {
        lg_point_done(f, &px);
        return;
    }
    lg_loop lr;
    LLVMValueRef t = lg_loop_begin(f, &lr, f->begin, f->end, "row");
    LLVMValueRef oidx[KF_MAX_RANK];
    lg_unflatten(m, t, on, odims, oidx);
    for (int d = 0, k = 0; d < rank; d++)
        px.idx[d] = d == axis ? lg_i64(m, 0) : oidx[k++];
    row_ctx rc = {&px, axis};
    lg_row_stats(f, rs, xdt, x_at, &rc, cache, &px);
    memcpy(po.stat, px.stat, sizeof po.stat);
    if (along) {
        lg_loop lj;
        LLVMValueRef j = lg_loop_begin(f, &lj, lg_i64(m, 0), lg_i64(m, rs->length), "epi");
        for (int d = 0; d < rank; d++)
            po.idx[d] = d == axis ? j : px.idx[d];
        lg_point_reset(f, &po);
        po.seed = rs->input;
        po.seed_val = LLVMBuildLoad2(B, ct, LLVMBuildInBoundsGEP2(B, ct, cache, &j, 1, ""), "");
        lg_store_writes(f, &po);
        lg_loop_end(f, &lj);
    } else {
        int k = 0;
        for (int d = 0; d < rank; d++) {
            if (d == axis) {
                if (g->rank == rank)
                    po.idx[k++] = lg_i64(m, 0);
            } else {
                po.idx[k++] = px.idx[d];
            }
        }
        lg_point_reset(f, &po);
        lg_store_writes(f, &po);
    }
    lg_loop_end(f, &lr);
    lg_point_done(f, &px);
    lg_point_done(f, &po);
}
