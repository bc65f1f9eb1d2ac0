/*
 * lg_gemm.c -- GEMM groups: C[b, m, n] = sum_k A[b, m, k] B[b, k, n] for one
 * or two anchors sharing A (SwiGLU), blocked as
 *
 *   outer t = (batch b, tile of MB rows)           -- split across threads
 *     [norm prologue: the MB rows of A, computed into scratch, rounded]
 *     for n0 in steps of NB:                        (NB = N with a row epilogue)
 *       acc[MB][NB] = 0                             -- f32 (f64 for f64)
 *       for k: for i < MB: a = A[i, k]; for j < NB: acc[i][j] += a * B[k, n0 + j]
 *       epilogue per (i, j), or per row: statistics over the row, then per (i, j)
 *
 * The j loop is unit-stride in B and in the tile for row-major B, so it
 * vectorizes; the tile lives in the stack frame, which no operand can alias.
 * Operands are read through their view strides (transposes, broadcast batch
 * dims) as constants, so one kernel serves every layout.
 */
#include "codegen/llvm/lg.h"

#define GEMM_MB 16
#define GEMM_NB 128

typedef struct opnd {
    uint32_t base;
    kf_dtype dt;
    int64_t bstride[KF_MAX_RANK]; /* per OUT batch axis */
    int64_t s0, s1;               /* A: (m, k); B: (k, n) */
} opnd;

static void layout(const kf_plan *plan, uint32_t t, bool is_a, bool trans, int out_rank, opnd *o) {
    const kf_tensor *x = plan->graph->nodes[t];
    int64_t s[KF_MAX_RANK] = {0};
    lg_operand_layout(plan, t, &o->base, s);
    o->dt = x->dtype;
    int r = x->rank;
    int64_t outer_s = s[r - 2], inner_s = s[r - 1];
    if (is_a) { /* logical [M, K] */
        o->s0 = trans ? inner_s : outer_s;
        o->s1 = trans ? outer_s : inner_s;
    } else { /* logical [K, N] */
        o->s0 = trans ? inner_s : outer_s;
        o->s1 = trans ? outer_s : inner_s;
    }
    memset(o->bstride, 0, sizeof o->bstride);
    for (int d = 0; d < out_rank - 2; d++) {
        int ax = d - (out_rank - r);
        if (ax >= 0 && x->dims[ax] != 1)
            o->bstride[d] = s[ax];
    }
}

typedef struct pro_ctx {
    lg_point *pt;
    int axis;
} pro_ctx;

static LLVMValueRef pro_x_at(lg_fn *f, void *user, LLVMValueRef j) {
    pro_ctx *pc = user;
    pc->pt->idx[pc->axis] = j;
    lg_point_reset(f, pc->pt);
    return lg_expr(f, pc->pt, f->g->row.input);
}

typedef struct epi_ctx {
    lg_point *pt;
    LLVMValueRef tile[2];
    LLVMValueRef i;
    int nb;
    LLVMTypeRef at;
    int n_anchors;
} epi_ctx;

static void set_acc(lg_fn *f, epi_ctx *ec, LLVMValueRef j) {
    LLVMBuilderRef B = f->m->B;
    LLVMValueRef off =
        LLVMBuildNSWAdd(B, LLVMBuildNSWMul(B, ec->i, lg_i64(f->m, ec->nb), ""), j, "");
    for (int a = 0; a < ec->n_anchors; a++)
        ec->pt->acc[a] = LLVMBuildLoad2(
            B, ec->at, LLVMBuildInBoundsGEP2(B, ec->at, ec->tile[a], &off, 1, ""), "");
}

static LLVMValueRef epi_x_at(lg_fn *f, void *user, LLVMValueRef j) {
    epi_ctx *ec = user;
    int r = ec->pt->rank;
    ec->pt->idx[r - 1] = LLVMBuildNSWAdd(f->m->B, j, lg_i64(f->m, 0), "");
    lg_point_reset(f, ec->pt);
    set_acc(f, ec, j);
    return lg_expr(f, ec->pt, f->g->row.input);
}

void lg_emit_gemm(lg_fn *f) {
    lg_mod *m = f->m;
    const kf_group *g = f->g;
    const kf_gemm_info *gm = &g->gemm;
    LLVMBuilderRef B = m->B;
    int R = g->rank;
    if (R < 2 || gm->n_anchors < 1 || gm->n_anchors > 2) {
        lg_fail(m, KF_ERR_INTERNAL, "codegen/llvm: GEMM group %u: bad shape", g->id);
        return;
    }
    if (gm->a_prologue && gm->row_epilogue) {
        lg_fail(m, KF_ERR_UNSUPPORTED,
                "codegen/llvm: GEMM group %u has both a norm prologue and a row epilogue", g->id);
        return;
    }
    int64_t M = gm->m, N = gm->n, K = gm->k;
    int64_t MB = GEMM_MB, NB = gm->row_epilogue ? N : (N < GEMM_NB ? N : GEMM_NB);
    if (NB < 1)
        NB = 1;
    int64_t mt = (M + MB - 1) / MB;
    f->k->outer = gm->batch * mt;
    f->k->cost = (double)MB * (double)N * (double)K * gm->n_anchors;
    kf_dtype adt = g->dtype == KF_DTYPE_F64 ? KF_DTYPE_F64 : KF_DTYPE_F32;
    LLVMTypeRef at = lg_acc_type(m, g->dtype);

    opnd A[2], Bo[2];
    for (int a = 0; a < gm->n_anchors; a++) {
        if (!gm->a_prologue)
            layout(m->plan, gm->a[a], true, gm->transpose_a[a], R, &A[a]);
        layout(m->plan, gm->b[a], false, gm->transpose_b[a], R, &Bo[a]);
    }
    LLVMValueRef tile[2] = {NULL, NULL};
    for (int a = 0; a < gm->n_anchors; a++)
        tile[a] = lg_scratch(f, (size_t)(MB * NB) * 8);
    LLVMValueRef atile = NULL, rowcache = NULL;
    if (gm->a_prologue) {
        atile = lg_scratch(f, (size_t)(MB * K) * 8);
        rowcache = lg_scratch(f, (size_t)K * 8);
    }
    if (gm->row_epilogue)
        rowcache = lg_scratch(f, (size_t)N * 8);

    lg_point po, pr;
    if (!lg_point_init(f, &po, R))
        return;
    if (!lg_point_init(f, &pr, gm->a_prologue ? g->row_rank : 1)) {
        lg_point_done(f, &po);
        return;
    }

    lg_loop lt;
    LLVMValueRef t = lg_loop_begin(f, &lt, f->begin, f->end, "tile");
    LLVMValueRef b = LLVMBuildSDiv(B, t, lg_i64(m, mt), "");
    LLVMValueRef m0 = LLVMBuildNSWMul(B, LLVMBuildSRem(B, t, lg_i64(m, mt), ""), lg_i64(m, MB), "");
    LLVMValueRef mb = lg_min_i64(m, lg_i64(m, MB), LLVMBuildNSWSub(B, lg_i64(m, M), m0, ""));
    LLVMValueRef bidx[KF_MAX_RANK];
    if (R > 2)
        lg_unflatten(m, b, R - 2, g->dims, bidx);
    LLVMValueRef aoff[2], boff[2];
    for (int a = 0; a < gm->n_anchors; a++) {
        if (!gm->a_prologue)
            aoff[a] = lg_offset(m, R - 2, bidx, A[a].bstride);
        boff[a] = lg_offset(m, R - 2, bidx, Bo[a].bstride);
    }

    /* Norm prologue: rows m0 .. m0+mb of A into atile (acc type, rounded to A's dtype). */
    if (gm->a_prologue) {
        int rr = g->row_rank;
        const kf_row_stage *rs = &g->row;
        for (int d = 0; d < rr - 2; d++) {
            int od = d + (R - rr);
            pr.idx[d] = od >= 0 && g->row_dims[d] != 1 ? bidx[od] : lg_i64(m, 0);
        }
        lg_loop li;
        LLVMValueRef i = lg_loop_begin(f, &li, lg_i64(m, 0), mb, "prow");
        pr.idx[rr - 2] = LLVMBuildNSWAdd(B, m0, i, "");
        kf_dtype xdt = g->expr[rs->input].dtype;
        LLVMTypeRef ct = lg_ctype(m, xdt);
        pro_ctx pc = {&pr, rr - 1};
        lg_row_stats(f, rs, xdt, pro_x_at, &pc, rowcache, &pr);
        lg_loop lk;
        LLVMValueRef k = lg_loop_begin(f, &lk, lg_i64(m, 0), lg_i64(m, K), "pk");
        pr.idx[rr - 1] = k;
        lg_point_reset(f, &pr);
        pr.seed = rs->input;
        pr.seed_val = LLVMBuildLoad2(B, ct, LLVMBuildInBoundsGEP2(B, ct, rowcache, &k, 1, ""), "");
        LLVMValueRef v = lg_expr(f, &pr, gm->a_root);
        v = lg_convert(m, v, g->expr[gm->a_root].dtype, adt);
        LLVMValueRef off = LLVMBuildNSWAdd(B, LLVMBuildNSWMul(B, i, lg_i64(m, K), ""), k, "");
        LLVMBuildStore(B, v, LLVMBuildInBoundsGEP2(B, at, atile, &off, 1, ""));
        /* The norm itself, when this group writes it. */
        for (uint32_t w = 0; w < g->n_writes; w++) {
            uint32_t root = g->roots[w];
            if (root == KF_NONE || g->expr[root].space != KF_SPACE_ROW)
                continue;
            const kf_tensor *wt = m->graph->nodes[g->writes[w]];
            int64_t st[KF_MAX_RANK] = {0};
            kf_ir_broadcast_strides(wt, rr, st);
            LLVMValueRef wv = lg_convert(m, lg_expr(f, &pr, root), g->expr[root].dtype, wt->dtype);
            lg_store_elem(f, wt->dtype, lg_buf(f, wt->id), lg_offset(m, rr, pr.idx, st), wv);
        }
        pr.seed = KF_NONE;
        pr.seed_val = NULL;
        lg_loop_end(f, &lk);
        lg_loop_end(f, &li);
    }

    lg_loop ln;
    LLVMValueRef nt = lg_loop_begin(f, &ln, lg_i64(m, 0), lg_i64(m, (N + NB - 1) / NB), "ntile");
    LLVMValueRef n0 = LLVMBuildNSWMul(B, nt, lg_i64(m, NB), "");
    LLVMValueRef nb = lg_min_i64(m, lg_i64(m, NB), LLVMBuildNSWSub(B, lg_i64(m, N), n0, ""));
    /* zero */
    {
        lg_loop lz;
        LLVMValueRef z = lg_loop_begin(f, &lz, lg_i64(m, 0), lg_i64(m, MB * NB), "zero");
        for (int a = 0; a < gm->n_anchors; a++)
            LLVMBuildStore(B, LLVMConstNull(at), LLVMBuildInBoundsGEP2(B, at, tile[a], &z, 1, ""));
        lg_loop_end(f, &lz);
    }
    /* k, i, j */
    {
        lg_loop lk, li, lj;
        LLVMValueRef k = lg_loop_begin(f, &lk, lg_i64(m, 0), lg_i64(m, K), "k");
        LLVMValueRef i = lg_loop_begin(f, &li, lg_i64(m, 0), mb, "i");
        LLVMValueRef av[2];
        for (int a = 0; a < gm->n_anchors; a++) {
            if (gm->a_prologue) {
                if (a == 0) {
                    LLVMValueRef off =
                        LLVMBuildNSWAdd(B, LLVMBuildNSWMul(B, i, lg_i64(m, K), ""), k, "");
                    av[0] =
                        LLVMBuildLoad2(B, at, LLVMBuildInBoundsGEP2(B, at, atile, &off, 1, ""), "");
                }
                av[a] = av[0];
            } else {
                LLVMValueRef mi = LLVMBuildNSWAdd(B, m0, i, "");
                LLVMValueRef off = LLVMBuildNSWAdd(
                    B, aoff[a],
                    LLVMBuildNSWAdd(B, LLVMBuildNSWMul(B, mi, lg_i64(m, A[a].s0), ""),
                                    LLVMBuildNSWMul(B, k, lg_i64(m, A[a].s1), ""), ""),
                    "");
                av[a] = lg_convert(m, lg_load_elem(f, A[a].dt, lg_buf(f, A[a].base), off), A[a].dt,
                                   adt);
            }
        }
        LLVMValueRef bk[2];
        for (int a = 0; a < gm->n_anchors; a++)
            bk[a] = LLVMBuildNSWAdd(B, boff[a], LLVMBuildNSWMul(B, k, lg_i64(m, Bo[a].s0), ""), "");
        LLVMValueRef rowoff = LLVMBuildNSWMul(B, i, lg_i64(m, NB), "");
        LLVMValueRef j = lg_loop_begin(f, &lj, lg_i64(m, 0), nb, "j");
        LLVMValueRef toff = LLVMBuildNSWAdd(B, rowoff, j, "");
        LLVMValueRef nj = LLVMBuildNSWAdd(B, n0, j, "");
        for (int a = 0; a < gm->n_anchors; a++) {
            LLVMValueRef off =
                LLVMBuildNSWAdd(B, bk[a], LLVMBuildNSWMul(B, nj, lg_i64(m, Bo[a].s1), ""), "");
            LLVMValueRef bv =
                lg_convert(m, lg_load_elem(f, Bo[a].dt, lg_buf(f, Bo[a].base), off), Bo[a].dt, adt);
            LLVMValueRef p = LLVMBuildInBoundsGEP2(B, at, tile[a], &toff, 1, "");
            LLVMValueRef c = LLVMBuildLoad2(B, at, p, "");
            LLVMValueRef prod = lg_reassoc(LLVMBuildFMul(B, av[a], bv, ""));
            LLVMBuildStore(B, lg_reassoc(LLVMBuildFAdd(B, c, prod, "")), p);
        }
        lg_loop_end(f, &lj);
        lg_loop_end(f, &li);
        lg_loop_end(f, &lk);
    }
    /* epilogue */
    for (int d = 0; d < R - 2; d++)
        po.idx[d] = bidx[d];
    epi_ctx ec = {&po, {tile[0], tile[1]}, NULL, (int)NB, at, gm->n_anchors};
    {
        lg_loop li, lj;
        LLVMValueRef i = lg_loop_begin(f, &li, lg_i64(m, 0), mb, "ei");
        ec.i = i;
        po.idx[R - 2] = LLVMBuildNSWAdd(B, m0, i, "");
        if (gm->row_epilogue) {
            const kf_row_stage *rs = &g->row;
            kf_dtype xdt = g->expr[rs->input].dtype;
            LLVMTypeRef ct = lg_ctype(m, xdt);
            lg_row_stats(f, rs, xdt, epi_x_at, &ec, rowcache, &po);
            LLVMValueRef j = lg_loop_begin(f, &lj, lg_i64(m, 0), nb, "ej");
            po.idx[R - 1] = j;
            lg_point_reset(f, &po);
            set_acc(f, &ec, j);
            po.seed = rs->input;
            po.seed_val =
                LLVMBuildLoad2(B, ct, LLVMBuildInBoundsGEP2(B, ct, rowcache, &j, 1, ""), "");
            lg_store_writes(f, &po);
            lg_loop_end(f, &lj);
        } else {
            LLVMValueRef j = lg_loop_begin(f, &lj, lg_i64(m, 0), nb, "ej");
            po.idx[R - 1] = LLVMBuildNSWAdd(B, n0, j, "");
            lg_point_reset(f, &po);
            set_acc(f, &ec, j);
            lg_store_writes(f, &po);
            lg_loop_end(f, &lj);
        }
        lg_loop_end(f, &li);
    }
    lg_loop_end(f, &ln);
    lg_loop_end(f, &lt);
    lg_point_done(f, &po);
    lg_point_done(f, &pr);
}
