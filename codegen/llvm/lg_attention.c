/*
 * lg_attention.c -- ATTENTION groups: softmax(score(Q.K^T)) . V without the
 * score matrix, as a tiled online softmax. One outer iteration per query row
 * (batch, head, q); keys walk in tiles of ATTN_T:
 *
 *   for each tile: s[t] = score expression at (q, kv) for the tile's keys
 *                  m' = max(m, max s); rescale l and acc by exp(m - m')
 *                  p[t] = exp(s[t] - m'); l += sum p; acc += p[t] * V[kv, :]
 *   out[q, :] = acc / l                            (f32; f64 for f64)
 *   lse[q] = m + log l, or m where m = +-inf       (when the group writes the
 *                                                   scores' log-sum-exp too)
 *
 * A causal mask bounds the keys at q, a sliding window also below at
 * q - window + 1: those tiles are never visited. The score expression still
 * applies the mask inside the bounds, so any other mask stays exact. A
 * BLOCK_SPARSE keep map (fusion/mask.c) skips each key tile whose map tiles
 * all drop it for this row, unless the row's map row drops every tile: that
 * row is the reference's all-masked row, so it visits every key.
 */
#include <math.h>

#include "codegen/llvm/lg.h"

#define ATTN_T 32

typedef struct aop {
    uint32_t base;
    kf_dtype dt;
    int64_t bstride[KF_MAX_RANK];
    int64_t s_row, s_col; /* Q: (q, d); K: (kv, d); V: (kv, dv) */
    int64_t off;          /* elements of base before index 0 (a sliced view's offset) */
} aop;

/* The keep map's entry (an i1: kept) at map row offset `roff` plus map
 * column kb. */
static LLVMValueRef keep_at(lg_fn *f, const kf_expr *e, const kf_attn_info *at, LLVMValueRef roff,
                            LLVMValueRef kb) {
    lg_mod *m = f->m;
    LLVMBuilderRef B = m->B;
    LLVMValueRef o =
        LLVMBuildNSWAdd(B, roff, LLVMBuildNSWMul(B, kb, lg_i64(m, e->dyn_strides[at->keep_src_k]), ""), "");
    LLVMValueRef v = lg_load_elem(f, KF_DTYPE_BOOL, lg_buf(f, e->base), o);
    return at->keep_when_true ? v : LLVMBuildNot(B, v, "");
}

/* Whether any of map columns [kb0, kb1) keeps (an i1), through var (i8). */
static LLVMValueRef keep_any(lg_fn *f, const kf_expr *e, const kf_attn_info *at, LLVMValueRef roff,
                             LLVMValueRef kb0, LLVMValueRef kb1, LLVMValueRef var) {
    lg_mod *m = f->m;
    LLVMBuilderRef B = m->B;
    LLVMBuildStore(B, LLVMConstInt(m->i8, 0, 0), var);
    lg_loop l;
    LLVMValueRef kb = lg_loop_begin(f, &l, kb0, kb1, "keep");
    LLVMValueRef k = LLVMBuildZExt(B, keep_at(f, e, at, roff, kb), m->i8, "");
    LLVMBuildStore(B, LLVMBuildOr(B, LLVMBuildLoad2(B, m->i8, var, ""), k, ""), var);
    lg_loop_end(f, &l);
    return LLVMBuildICmp(B, LLVMIntNE, LLVMBuildLoad2(B, m->i8, var, ""), LLVMConstInt(m->i8, 0, 0),
                         "");
}

static void layout(const kf_plan *plan, uint32_t t, bool rows_first_when_plain, bool trans, int R,
                   aop *o) {
    const kf_tensor *x = plan->graph->nodes[t];
    int64_t s[KF_MAX_RANK] = {0};
    lg_operand_layout(plan, t, &o->base, s, &o->off);
    o->dt = x->dtype;
    int r = x->rank;
    /* plain layout [.., rows, cols] when rows_first_when_plain, else [.., cols, rows] */
    bool rows_first = rows_first_when_plain != trans;
    o->s_row = rows_first ? s[r - 2] : s[r - 1];
    o->s_col = rows_first ? s[r - 1] : s[r - 2];
    memset(o->bstride, 0, sizeof o->bstride);
    for (int d = 0; d < R - 2; d++) {
        int ax = d - (R - r);
        if (ax >= 0 && x->dims[ax] != 1)
            o->bstride[d] = s[ax];
    }
}

void lg_emit_attention(lg_fn *f) {
    lg_mod *m = f->m;
    const kf_group *g = f->g;
    const kf_attn_info *at = &g->attn;
    const kf_graph *gr = m->graph;
    LLVMBuilderRef B = m->B;
    int R = g->rank;
    const kf_tensor *pv = gr->nodes[at->pv];
    if (R < 2 || pv->rank != R ||
        memcmp(pv->dims, g->dims, sizeof(int64_t) * (size_t)(R - 2)) != 0) {
        lg_fail(m, KF_ERR_UNSUPPORTED,
                "codegen/llvm: attention group %u: output batch dims differ from the scores'",
                g->id);
        return;
    }
    for (uint32_t w = 0; w < g->n_writes; w++) {
        if (g->writes[w] != at->out && g->writes[w] != at->lse) {
            lg_fail(m, KF_ERR_UNSUPPORTED,
                    "codegen/llvm: attention group %u writes tensor %u besides its output", g->id,
                    g->writes[w]);
            return;
        }
    }
    int64_t sq = g->dims[R - 2], skv = g->dims[R - 1], D = at->d, DV = at->dv;
    kf_dtype adt = g->dtype == KF_DTYPE_F64 ? KF_DTYPE_F64 : KF_DTYPE_F32;
    LLVMTypeRef ft = lg_acc_type(m, g->dtype);
    aop Q, Kk, V;
    layout(m->plan, at->q, true, at->q_transposed, R, &Q); /* Q [.., sq, d] */
    layout(m->plan, at->k, false, at->k_transposed, R,
           &Kk); /* K as B: [.., d, skv]; row = kv, col = d */
    layout(m->plan, at->v, true, at->v_transposed, R, &V); /* V [.., skv, dv] */
    int64_t rows = 1;
    for (int d = 0; d < R - 1; d++)
        rows *= g->dims[d];
    f->k->outer = rows;
    f->k->cost = (double)skv * (double)(D + DV + g->n_expr);
    LLVMValueRef acc = lg_scratch(f, (size_t)DV * 8);
    LLVMValueRef sbuf = lg_scratch(f, ATTN_T * 8);
    LLVMValueRef vm = lg_var(f, ft, "m"), vl = lg_var(f, ft, "l"), vbm = lg_var(f, ft, "bm"),
                 vdot = lg_var(f, ft, "dot");
    LLVMValueRef ninf = lg_fconst(ft, -INFINITY), zero = LLVMConstNull(ft);

    lg_point pt;
    if (!lg_point_init(f, &pt, R))
        return;
    lg_loop lr;
    LLVMValueRef t = lg_loop_begin(f, &lr, f->begin, f->end, "qrow");
    LLVMValueRef idx[KF_MAX_RANK];
    lg_unflatten(m, t, R - 1, g->dims, idx);
    LLVMValueRef q = idx[R - 2];
    LLVMValueRef qoff = LLVMBuildNSWAdd(
        B, LLVMBuildNSWAdd(B, lg_offset(m, R - 2, idx, Q.bstride), lg_i64(m, Q.off), ""),
        LLVMBuildNSWMul(B, q, lg_i64(m, Q.s_row), ""), "");
    LLVMValueRef koff =
        LLVMBuildNSWAdd(B, lg_offset(m, R - 2, idx, Kk.bstride), lg_i64(m, Kk.off), "");
    LLVMValueRef voff =
        LLVMBuildNSWAdd(B, lg_offset(m, R - 2, idx, V.bstride), lg_i64(m, V.off), "");
    LLVMValueRef lo = lg_i64(m, 0), hi = lg_i64(m, skv);
    if (at->mask == KF_MASK_CAUSAL || at->mask == KF_MASK_SLIDING_WINDOW)
        hi = lg_min_i64(m, hi, LLVMBuildNSWAdd(B, q, lg_i64(m, 1), ""));
    if (at->mask == KF_MASK_SLIDING_WINDOW)
        lo = lg_max_i64(m, lo, LLVMBuildNSWSub(B, q, lg_i64(m, at->window - 1), ""));
    (void)sq;
    /* block-sparse: this row's map row, and whether it keeps any tile */
    const bool bs = at->mask == KF_MASK_BLOCK_SPARSE && at->mask_node == at->score &&
                    at->keep_node != KF_NONE;
    const kf_expr *ke = bs ? &g->expr[at->keep_node] : NULL;
    LLVMValueRef bs_roff = NULL, bs_dense = NULL, bs_var = bs ? lg_var(f, m->i8, "kany") : NULL;
    if (bs) {
        LLVMValueRef qb = LLVMBuildSDiv(B, q, lg_i64(m, at->keep_bq), "");
        bs_roff = LLVMBuildNSWAdd(
            B, LLVMBuildNSWAdd(B, lg_i64(m, ke->offset), lg_offset(m, R - 2, idx, ke->strides), ""),
            LLVMBuildNSWMul(B, qb, lg_i64(m, ke->dyn_strides[at->keep_src_q]), ""), "");
        LLVMValueRef any = keep_any(f, ke, at, bs_roff, lg_i64(m, 0),
                                    lg_i64(m, (skv + at->keep_bk - 1) / at->keep_bk), bs_var);
        bs_dense = LLVMBuildNot(B, any, "");
    }
    LLVMBuildStore(B, ninf, vm);
    LLVMBuildStore(B, zero, vl);
    {
        lg_loop lz;
        LLVMValueRef c = lg_loop_begin(f, &lz, lg_i64(m, 0), lg_i64(m, DV), "az");
        LLVMBuildStore(B, zero, LLVMBuildInBoundsGEP2(B, ft, acc, &c, 1, ""));
        lg_loop_end(f, &lz);
    }
    LLVMValueRef ntiles = LLVMBuildSDiv(
        B, LLVMBuildNSWAdd(B, LLVMBuildNSWSub(B, hi, lo, ""), lg_i64(m, ATTN_T - 1), ""),
        lg_i64(m, ATTN_T), "");
    lg_loop lt;
    LLVMValueRef ti = lg_loop_begin(f, &lt, lg_i64(m, 0), ntiles, "kvtile");
    LLVMValueRef kv0 = LLVMBuildNSWAdd(B, lo, LLVMBuildNSWMul(B, ti, lg_i64(m, ATTN_T), ""), "");
    LLVMValueRef tn = lg_min_i64(m, lg_i64(m, ATTN_T), LLVMBuildNSWSub(B, hi, kv0, ""));
    LLVMBasicBlockRef bs_after = NULL;
    if (bs) { /* the tile's map columns kv0 / bk .. (kv0 + tn - 1) / bk */
        LLVMValueRef kb0 = LLVMBuildSDiv(B, kv0, lg_i64(m, at->keep_bk), "");
        LLVMValueRef kb1 = LLVMBuildNSWAdd(
            B,
            LLVMBuildSDiv(B, LLVMBuildNSWSub(B, LLVMBuildNSWAdd(B, kv0, tn, ""), lg_i64(m, 1), ""),
                          lg_i64(m, at->keep_bk), ""),
            lg_i64(m, 1), "");
        bs_after =
            lg_if_begin(f, LLVMBuildOr(B, bs_dense, keep_any(f, ke, at, bs_roff, kb0, kb1, bs_var), ""));
    }
    LLVMBuildStore(B, ninf, vbm);
    {
        lg_loop ls, ld;
        LLVMValueRef s = lg_loop_begin(f, &ls, lg_i64(m, 0), tn, "score");
        LLVMValueRef kv = LLVMBuildNSWAdd(B, kv0, s, "");
        LLVMValueRef krow =
            LLVMBuildNSWAdd(B, koff, LLVMBuildNSWMul(B, kv, lg_i64(m, Kk.s_row), ""), "");
        LLVMBuildStore(B, zero, vdot);
        LLVMValueRef c = lg_loop_begin(f, &ld, lg_i64(m, 0), lg_i64(m, D), "dot");
        LLVMValueRef qa =
            LLVMBuildNSWAdd(B, qoff, LLVMBuildNSWMul(B, c, lg_i64(m, Q.s_col), ""), "");
        LLVMValueRef ka =
            LLVMBuildNSWAdd(B, krow, LLVMBuildNSWMul(B, c, lg_i64(m, Kk.s_col), ""), "");
        LLVMValueRef qv = lg_convert(m, lg_load_elem(f, Q.dt, lg_buf(f, Q.base), qa), Q.dt, adt);
        LLVMValueRef kval =
            lg_convert(m, lg_load_elem(f, Kk.dt, lg_buf(f, Kk.base), ka), Kk.dt, adt);
        LLVMValueRef cur = LLVMBuildLoad2(B, ft, vdot, "");
        LLVMBuildStore(
            B, lg_reassoc(LLVMBuildFAdd(B, cur, lg_reassoc(LLVMBuildFMul(B, qv, kval, "")), "")),
            vdot);
        lg_loop_end(f, &ld);
        for (int d = 0; d < R - 2; d++)
            pt.idx[d] = idx[d];
        pt.idx[R - 2] = q;
        pt.idx[R - 1] = kv;
        lg_point_reset(f, &pt);
        pt.score = LLVMBuildLoad2(B, ft, vdot, "");
        LLVMValueRef x = lg_convert(m, lg_expr(f, &pt, at->score), g->expr[at->score].dtype, adt);
        LLVMBuildStore(B, x, LLVMBuildInBoundsGEP2(B, ft, sbuf, &s, 1, ""));
        LLVMBuildStore(B, lg_fmax_nan(m, LLVMBuildLoad2(B, ft, vbm, ""), x), vbm);
        lg_loop_end(f, &ls);
    }
    LLVMValueRef mold = LLVMBuildLoad2(B, ft, vm, "");
    LLVMValueRef mnew = lg_fmax_nan(m, mold, LLVMBuildLoad2(B, ft, vbm, ""));
    LLVMValueRef alpha = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOEQ, mold, ninf, ""), zero,
                                         lg_exp(m, LLVMBuildFSub(B, mold, mnew, "")), "");
    LLVMBuildStore(B, mnew, vm);
    LLVMBuildStore(B, LLVMBuildFMul(B, LLVMBuildLoad2(B, ft, vl, ""), alpha, ""), vl);
    {
        lg_loop la;
        LLVMValueRef c = lg_loop_begin(f, &la, lg_i64(m, 0), lg_i64(m, DV), "rescale");
        LLVMValueRef p = LLVMBuildInBoundsGEP2(B, ft, acc, &c, 1, "");
        LLVMBuildStore(B, LLVMBuildFMul(B, LLVMBuildLoad2(B, ft, p, ""), alpha, ""), p);
        lg_loop_end(f, &la);
    }
    {
        lg_loop ls, lc;
        LLVMValueRef s = lg_loop_begin(f, &ls, lg_i64(m, 0), tn, "pv");
        LLVMValueRef x = LLVMBuildLoad2(B, ft, LLVMBuildInBoundsGEP2(B, ft, sbuf, &s, 1, ""), "");
        LLVMValueRef p = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOEQ, x, ninf, ""), zero,
                                         lg_exp(m, LLVMBuildFSub(B, x, mnew, "")), "");
        LLVMBuildStore(B, LLVMBuildFAdd(B, LLVMBuildLoad2(B, ft, vl, ""), p, ""), vl);
        LLVMValueRef kv = LLVMBuildNSWAdd(B, kv0, s, "");
        LLVMValueRef vrow =
            LLVMBuildNSWAdd(B, voff, LLVMBuildNSWMul(B, kv, lg_i64(m, V.s_row), ""), "");
        LLVMValueRef c = lg_loop_begin(f, &lc, lg_i64(m, 0), lg_i64(m, DV), "pvc");
        LLVMValueRef va =
            LLVMBuildNSWAdd(B, vrow, LLVMBuildNSWMul(B, c, lg_i64(m, V.s_col), ""), "");
        LLVMValueRef vv = lg_convert(m, lg_load_elem(f, V.dt, lg_buf(f, V.base), va), V.dt, adt);
        LLVMValueRef ap = LLVMBuildInBoundsGEP2(B, ft, acc, &c, 1, "");
        LLVMValueRef nv = lg_reassoc(LLVMBuildFAdd(B, LLVMBuildLoad2(B, ft, ap, ""),
                                                   lg_reassoc(LLVMBuildFMul(B, p, vv, "")), ""));
        LLVMBuildStore(B, nv, ap);
        lg_loop_end(f, &lc);
        lg_loop_end(f, &ls);
    }
    if (bs)
        lg_if_end(f, bs_after);
    lg_loop_end(f, &lt);
    {
        /* out[.., q, c] = acc[c] / l, at the output's strides (row-major
         * [.., sq, dv], or an absorbed permute's: kf_attn_info.o_strides) */
        LLVMValueRef obase = lg_offset(m, R - 1, idx, at->o_strides);
        LLVMValueRef l = LLVMBuildLoad2(B, ft, vl, "");
        lg_loop lc;
        LLVMValueRef c = lg_loop_begin(f, &lc, lg_i64(m, 0), lg_i64(m, DV), "out");
        LLVMValueRef v = LLVMBuildFDiv(
            B, LLVMBuildLoad2(B, ft, LLVMBuildInBoundsGEP2(B, ft, acc, &c, 1, ""), ""), l, "");
        v = lg_convert(m, v, adt, pv->dtype);
        lg_store_elem(f, pv->dtype, lg_buf(f, at->out), LLVMBuildNSWAdd(B, obase, c, ""), v);
        lg_loop_end(f, &lc);
    }
    if (at->lse != KF_NONE) {
        /* lse[row] = m + log l: the logsumexp's definition (ir/eval.c), m
         * itself where m = +-inf (l is then 0 or NaN); row-major, so the
         * row's flat index t */
        const kf_tensor *lt = gr->nodes[at->lse];
        LLVMValueRef mv = LLVMBuildLoad2(B, ft, vm, "");
        LLVMValueRef v = LLVMBuildFAdd(B, mv, lg_log(m, LLVMBuildLoad2(B, ft, vl, "")), "");
        LLVMValueRef inf = lg_call_intrinsic(m, "llvm.fabs", ft, &mv, 1);
        v = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOEQ, inf, lg_fconst(ft, INFINITY), ""),
                            mv, v, "");
        lg_store_elem(f, lt->dtype, lg_buf(f, at->lse), t, lg_convert(m, v, adt, lt->dtype));
    }
    lg_loop_end(f, &lr);
    lg_point_done(f, &pt);
}
