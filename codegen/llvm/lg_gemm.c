/*
 * lg_gemm.c -- GEMM groups: C[b, m, n] = sum_k A[b, m, k] B[b, k, n] for one
 * or two anchors sharing A (SwiGLU). Two paths: the packed one (below, every
 * f32/f16/bf16 GEMM) and this generic one (f64, an empty dimension; it also
 * reports the unsupported norm prologue plus row epilogue), blocked as
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
    int64_t off;                  /* elements of base before index 0 (a view's offset) */
} opnd;

static void layout(const kf_plan *plan, uint32_t t, bool is_a, bool trans, int out_rank, opnd *o) {
    const kf_tensor *x = plan->graph->nodes[t];
    int64_t s[KF_MAX_RANK] = {0};
    lg_operand_layout(plan, t, &o->base, s, &o->off);
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

static void emit_generic(lg_fn *f) {
    lg_mod *m = f->m;
    const kf_group *g = f->g;
    const kf_gemm_info *gm = &g->gemm;
    LLVMBuilderRef B = m->B;
    int R = g->rank;
    if (R < 2 || gm->n_anchors < 1 || gm->n_anchors > 2) {
        lg_fail(m, KF_ERR_INTERNAL, "codegen/llvm: GEMM group %u: bad shape", g->id);
        return;
    }
    if (gm->head_dim) { /* f32/f16/bf16 only: the planner's GEMM dtypes take the packed path */
        lg_fail(m, KF_ERR_UNSUPPORTED,
                "codegen/llvm: GEMM group %u: a head-split epilogue takes the packed path only",
                g->id);
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
            aoff[a] = LLVMBuildNSWAdd(B, lg_offset(m, R - 2, bidx, A[a].bstride),
                                      lg_i64(m, A[a].off), "");
        boff[a] =
            LLVMBuildNSWAdd(B, lg_offset(m, R - 2, bidx, Bo[a].bstride), lg_i64(m, Bo[a].off), "");
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

/*
 * The packed path (every GEMM whose operands are f32, f16 or bf16 and whose
 * accumulator is f32; f64 keeps the generic path above): GotoBLAS/BLIS
 * blocking with a register-blocked microkernel emitted as explicit
 * <8 x float> operations, so its speed does not hinge on the vectorizer.
 *
 *   outer t = (batch b, MC-row block mi, NC-column block ni)  -- threads
 *     [norm prologue: the tile's rows of A, normalized, into scratch]
 *     Ctile[MCp][NCp] = 0                          (f32, per anchor)
 *     for k0 in steps of KC:
 *       pack A[m0.., k0..] -> Apack: MR-row panels, [panel][k][MR]
 *       pack B[k0.., n0..] -> Bpack: NR-col panels, [panel][k][NR]
 *       for each NR panel jp: for each MR panel ip:        (B panel in L1)
 *         acc[MR][NR/8] = Ctile; k loop: broadcast A[k][r] times 2 B vectors
 *         Ctile = acc
 *     epilogue per (i, j), or per row (then NC = N), from Ctile, and the store
 *
 * Packing reads operands through their view strides and converts f16/bf16
 * to f32, and pads partial panels and the K tail (to a multiple of KU) with
 * zeros, so the microkernel only ever sees full MR x NR tiles; padded rows
 * and columns are never stored. Every buffer is this thread's scratch. The
 * prologue's rows are recomputed by each column tile (N / NC times, against
 * MC x NC x K multiply-adds per tile).
 *
 * Each step is acc + round(a * b), in k order, from +0 -- the generic path's
 * arithmetic -- so both paths give the same bits and the packed path changes
 * no result, only the speed. A fused multiply-add would round differently
 * (not worse), and an ill-conditioned epilogue (rsqrt of a sum that cancels)
 * magnifies any such difference. On Zen 3 the FADD pipes run beside the FMA
 * pipes, so the split costs little; on cores where adds share the FMA ports
 * it halves the peak. The K-tail padding is A = +0, B = -0: the padded
 * product is -0, and acc + -0 == acc for every acc, -0 included.
 */
/* 6 x 16 accumulators = 12 ymm of 16, plus 2 B vectors and a broadcast.
 * An MC x KC block of A (192 KiB) stays in L2 and is reread for each NR
 * panel of B, whose KC x NR (16 KiB) sits in L1 across the MR panels.
 * Swept on znver3 (MC 72..288, NC 256..1024, KC 256/384): a larger MC cuts
 * how often B is repacked and took 2048^3 from about 55 to 70 GFLOP/s;
 * around 192 x 512 the differences were within the machine's noise. */
#define PK_MR 6
#define PK_NR 16
#define PK_VW 8
#define PK_NV (PK_NR / PK_VW)
#define PK_KU 4
#define PK_MC 192
#define PK_KC 256
#define PK_NC 512

static int64_t round_up(int64_t x, int64_t q) { return (x + q - 1) / q * q; }

static bool packable(kf_dtype d) {
    return d == KF_DTYPE_F32 || d == KF_DTYPE_F16 || d == KF_DTYPE_BF16;
}

static bool same_opnd(const opnd *x, const opnd *y) {
    if (x->base != y->base || x->dt != y->dt || x->s0 != y->s0 || x->s1 != y->s1)
        return false;
    for (int d = 0; d < KF_MAX_RANK; d++)
        if (x->bstride[d] != y->bstride[d])
            return false;
    return true;
}

/* Element (r, c) of operand o as f32, or `pad` outside [rows) x [cols): the
 * index is clamped so the load stays in bounds, then the value selected. */
static LLVMValueRef load_or_pad(lg_fn *f, const opnd *o, LLVMValueRef boff, LLVMValueRef r,
                                LLVMValueRef c, int64_t rows, int64_t cols, double pad) {
    lg_mod *m = f->m;
    LLVMBuilderRef B = m->B;
    LLVMValueRef ok = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntSLT, r, lg_i64(m, rows), ""),
                                   LLVMBuildICmp(B, LLVMIntSLT, c, lg_i64(m, cols), ""), "");
    LLVMValueRef rc = lg_min_i64(m, r, lg_i64(m, rows - 1));
    LLVMValueRef cc = lg_min_i64(m, c, lg_i64(m, cols - 1));
    LLVMValueRef off =
        LLVMBuildNSWAdd(B, boff,
                        LLVMBuildNSWAdd(B, LLVMBuildNSWMul(B, rc, lg_i64(m, o->s0), ""),
                                        LLVMBuildNSWMul(B, cc, lg_i64(m, o->s1), ""), ""),
                        "");
    LLVMValueRef v =
        lg_convert(m, lg_load_elem(f, o->dt, lg_buf(f, o->base), off), o->dt, KF_DTYPE_F32);
    return LLVMBuildSelect(B, ok, v, lg_fconst(m->f32, pad), "");
}

static LLVMValueRef fptr(lg_fn *f, LLVMValueRef base, LLVMValueRef idx) {
    return LLVMBuildInBoundsGEP2(f->m->B, f->m->f32, base, &idx, 1, "");
}

/* atile[(row - m0) * K + k] (the prologue's rows), or 0 outside mb x K. */
static LLVMValueRef atile_or_zero(lg_fn *f, LLVMValueRef atile, LLVMValueRef row, LLVMValueRef m0,
                                  LLVMValueRef mb, LLVMValueRef k, int64_t K) {
    lg_mod *m = f->m;
    LLVMBuilderRef B = m->B;
    LLVMValueRef i = LLVMBuildNSWSub(B, row, m0, "");
    LLVMValueRef ok = LLVMBuildAnd(B, LLVMBuildICmp(B, LLVMIntSLT, i, mb, ""),
                                   LLVMBuildICmp(B, LLVMIntSLT, k, lg_i64(m, K), ""), "");
    LLVMValueRef ic = lg_min_i64(m, i, LLVMBuildNSWSub(B, mb, lg_i64(m, 1), ""));
    LLVMValueRef kc = lg_min_i64(m, k, lg_i64(m, K - 1));
    LLVMValueRef off = LLVMBuildNSWAdd(B, LLVMBuildNSWMul(B, ic, lg_i64(m, K), ""), kc, "");
    LLVMValueRef v = LLVMBuildLoad2(B, m->f32, fptr(f, atile, off), "");
    return LLVMBuildSelect(B, ok, v, LLVMConstNull(m->f32), "");
}

/* The norm prologue of the packed path: rows m0 .. m0+mb of A, normalized
 * and rounded to A's dtype, into atile (f32, row stride K). A group that
 * also writes the norm writes it from the first column tile (ni == 0) only,
 * so each element is stored once. */
static void emit_prologue(lg_fn *f, lg_point *pr, LLVMValueRef *bidx, LLVMValueRef m0,
                          LLVMValueRef mb, LLVMValueRef ni, LLVMValueRef atile,
                          LLVMValueRef rowcache) {
    lg_mod *m = f->m;
    const kf_group *g = f->g;
    const kf_gemm_info *gm = &g->gemm;
    LLVMBuilderRef B = m->B;
    int R = g->rank - (gm->head_dim ? 1 : 0), rr = g->row_rank;
    int64_t K = gm->k;
    const kf_row_stage *rs = &g->row;
    for (int d = 0; d < rr - 2; d++) {
        int od = d + (R - rr);
        pr->idx[d] = od >= 0 && g->row_dims[d] != 1 ? bidx[od] : lg_i64(m, 0);
    }
    LLVMValueRef first = LLVMBuildICmp(B, LLVMIntEQ, ni, lg_i64(m, 0), "");
    lg_loop li;
    LLVMValueRef i = lg_loop_begin(f, &li, lg_i64(m, 0), mb, "prow");
    pr->idx[rr - 2] = LLVMBuildNSWAdd(B, m0, i, "");
    kf_dtype xdt = g->expr[rs->input].dtype;
    LLVMTypeRef ct = lg_ctype(m, xdt);
    pro_ctx pc = {pr, rr - 1};
    lg_row_stats(f, rs, xdt, pro_x_at, &pc, rowcache, pr);
    lg_loop lk;
    LLVMValueRef k = lg_loop_begin(f, &lk, lg_i64(m, 0), lg_i64(m, K), "pk");
    pr->idx[rr - 1] = k;
    lg_point_reset(f, pr);
    pr->seed = rs->input;
    pr->seed_val = LLVMBuildLoad2(B, ct, LLVMBuildInBoundsGEP2(B, ct, rowcache, &k, 1, ""), "");
    LLVMValueRef v = lg_expr(f, pr, gm->a_root);
    v = lg_convert(m, v, g->expr[gm->a_root].dtype, KF_DTYPE_F32);
    LLVMValueRef off = LLVMBuildNSWAdd(B, LLVMBuildNSWMul(B, i, lg_i64(m, K), ""), k, "");
    LLVMBuildStore(B, v, fptr(f, atile, off));
    for (uint32_t w = 0; w < g->n_writes; w++) {
        uint32_t root = g->roots[w];
        if (root == KF_NONE || g->expr[root].space != KF_SPACE_ROW)
            continue;
        /* computed before the branch: the point's memo may reuse it later */
        const kf_tensor *wt = m->graph->nodes[g->writes[w]];
        int64_t st[KF_MAX_RANK] = {0};
        kf_ir_broadcast_strides(wt, rr, st);
        LLVMValueRef wv = lg_convert(m, lg_expr(f, pr, root), g->expr[root].dtype, wt->dtype);
        LLVMValueRef wo = lg_offset(m, rr, pr->idx, st);
        LLVMBasicBlockRef after = lg_if_begin(f, first);
        lg_store_elem(f, wt->dtype, lg_buf(f, wt->id), wo, wv);
        lg_if_end(f, after);
    }
    pr->seed = KF_NONE;
    pr->seed_val = NULL;
    lg_loop_end(f, &lk);
    lg_loop_end(f, &li);
}

static void emit_packed(lg_fn *f) {
    lg_mod *m = f->m;
    const kf_group *g = f->g;
    const kf_gemm_info *gm = &g->gemm;
    LLVMBuilderRef B = m->B;
    /* A head-split group (gemm.head_dim) runs over the product's head view,
     * one axis more than the product: the tile holds whole rows, so every
     * head's partner columns, and R below is the product's rank. */
    int R = g->rank - (gm->head_dim ? 1 : 0), na = gm->n_anchors;
    int64_t M = gm->m, N = gm->n, K = gm->k;
    int64_t MCp = PK_MC < round_up(M, PK_MR) ? PK_MC : round_up(M, PK_MR);
    int64_t NCp = PK_NC < round_up(N, PK_NR) && !gm->row_epilogue && !gm->head_dim
                      ? PK_NC
                      : round_up(N, PK_NR);
    int64_t KCp = PK_KC < round_up(K, PK_KU) ? PK_KC : round_up(K, PK_KU);
    int64_t mt = (M + MCp - 1) / MCp, ntl = (N + NCp - 1) / NCp, kt = (K + KCp - 1) / KCp;
    f->k->outer = gm->batch * mt * ntl;
    f->k->cost = (double)MCp * (double)NCp * (double)K * na;
    LLVMTypeRef vt = LLVMVectorType(m->f32, PK_VW);

    opnd A[2], Bo[2];
    bool a_shared = true;
    memset(A, 0, sizeof A);
    for (int a = 0; a < na; a++) {
        if (!gm->a_prologue)
            layout(m->plan, gm->a[a], true, gm->transpose_a[a], R, &A[a]);
        layout(m->plan, gm->b[a], false, gm->transpose_b[a], R, &Bo[a]);
    }
    if (na == 2 && !gm->a_prologue)
        a_shared = same_opnd(&A[0], &A[1]);
    LLVMValueRef apack = lg_scratch(f, (size_t)(MCp * KCp) * 4);
    LLVMValueRef bpack = lg_scratch(f, (size_t)(KCp * NCp) * 4);
    LLVMValueRef tile[2] = {NULL, NULL};
    for (int a = 0; a < na; a++)
        tile[a] = lg_scratch(f, (size_t)(MCp * NCp) * 4);
    LLVMValueRef atile = NULL, rowcache = NULL;
    if (gm->a_prologue) {
        atile = lg_scratch(f, (size_t)(MCp * K) * 4);
        rowcache = lg_scratch(f, (size_t)K * 8);
    }
    if (gm->row_epilogue)
        rowcache = lg_scratch(f, (size_t)N * 8);
    LLVMValueRef acc[PK_MR][PK_NV];
    for (int r = 0; r < PK_MR; r++)
        for (int v = 0; v < PK_NV; v++)
            acc[r][v] = lg_var(f, vt, "acc");

    lg_point po, pr;
    if (!lg_point_init(f, &po, g->rank))
        return;
    if (!lg_point_init(f, &pr, gm->a_prologue ? g->row_rank : 1)) {
        lg_point_done(f, &po);
        return;
    }

    lg_loop lt;
    LLVMValueRef t = lg_loop_begin(f, &lt, f->begin, f->end, "tile");
    LLVMValueRef ni = LLVMBuildSRem(B, t, lg_i64(m, ntl), "");
    LLVMValueRef tm = LLVMBuildSDiv(B, t, lg_i64(m, ntl), "");
    LLVMValueRef b = LLVMBuildSDiv(B, tm, lg_i64(m, mt), "");
    LLVMValueRef m0 =
        LLVMBuildNSWMul(B, LLVMBuildSRem(B, tm, lg_i64(m, mt), ""), lg_i64(m, MCp), "");
    LLVMValueRef n0 = LLVMBuildNSWMul(B, ni, lg_i64(m, NCp), "");
    LLVMValueRef mb = lg_min_i64(m, lg_i64(m, MCp), LLVMBuildNSWSub(B, lg_i64(m, M), m0, ""));
    LLVMValueRef nb = lg_min_i64(m, lg_i64(m, NCp), LLVMBuildNSWSub(B, lg_i64(m, N), n0, ""));
    /* panels: ceil(mb / MR), ceil(nb / NR) */
    LLVMValueRef mpan =
        LLVMBuildSDiv(B, LLVMBuildNSWAdd(B, mb, lg_i64(m, PK_MR - 1), ""), lg_i64(m, PK_MR), "");
    LLVMValueRef npan =
        LLVMBuildSDiv(B, LLVMBuildNSWAdd(B, nb, lg_i64(m, PK_NR - 1), ""), lg_i64(m, PK_NR), "");
    LLVMValueRef bidx[KF_MAX_RANK];
    if (R > 2)
        lg_unflatten(m, b, R - 2, g->dims, bidx);
    LLVMValueRef aoff[2], boff[2];
    for (int a = 0; a < na; a++) {
        aoff[a] =
            LLVMBuildNSWAdd(B, lg_offset(m, R - 2, bidx, A[a].bstride), lg_i64(m, A[a].off), "");
        boff[a] =
            LLVMBuildNSWAdd(B, lg_offset(m, R - 2, bidx, Bo[a].bstride), lg_i64(m, Bo[a].off), "");
    }
    if (gm->a_prologue)
        emit_prologue(f, &pr, bidx, m0, mb, ni, atile, rowcache);
    /* zero the accumulator tiles */
    {
        lg_loop lz;
        LLVMValueRef z = lg_loop_begin(f, &lz, lg_i64(m, 0), lg_i64(m, MCp * NCp), "zero");
        for (int a = 0; a < na; a++)
            LLVMBuildStore(B, LLVMConstNull(m->f32), fptr(f, tile[a], z));
        lg_loop_end(f, &lz);
    }
    lg_loop lkc;
    LLVMValueRef kc = lg_loop_begin(f, &lkc, lg_i64(m, 0), lg_i64(m, kt), "kc");
    LLVMValueRef k0 = LLVMBuildNSWMul(B, kc, lg_i64(m, KCp), "");
    LLVMValueRef kb = lg_min_i64(m, lg_i64(m, KCp), LLVMBuildNSWSub(B, lg_i64(m, K), k0, ""));
    LLVMValueRef kbp = LLVMBuildNSWMul(
        B, LLVMBuildSDiv(B, LLVMBuildNSWAdd(B, kb, lg_i64(m, PK_KU - 1), ""), lg_i64(m, PK_KU), ""),
        lg_i64(m, PK_KU), "");
    for (int a = 0; a < na; a++) {
        if (a == 0 || !a_shared) { /* pack A: Apack[ip][k][r] = A[m0 + ip*MR + r, k0 + k] */
            lg_loop lp, lk;
            LLVMValueRef ip = lg_loop_begin(f, &lp, lg_i64(m, 0), mpan, "pai");
            LLVMValueRef row0 =
                LLVMBuildNSWAdd(B, m0, LLVMBuildNSWMul(B, ip, lg_i64(m, PK_MR), ""), "");
            LLVMValueRef dst0 = LLVMBuildNSWMul(B, ip, lg_i64(m, PK_MR * KCp), "");
            LLVMValueRef k = lg_loop_begin(f, &lk, lg_i64(m, 0), kbp, "pak");
            LLVMValueRef kk = LLVMBuildNSWAdd(B, k0, k, "");
            LLVMValueRef dk =
                LLVMBuildNSWAdd(B, dst0, LLVMBuildNSWMul(B, k, lg_i64(m, PK_MR), ""), "");
            for (int r = 0; r < PK_MR; r++) {
                LLVMValueRef row = LLVMBuildNSWAdd(B, row0, lg_i64(m, r), "");
                LLVMValueRef v = gm->a_prologue
                                     ? atile_or_zero(f, atile, row, m0, mb, kk, K)
                                     : load_or_pad(f, &A[a], aoff[a], row, kk, M, K, 0.0);
                LLVMBuildStore(B, v, fptr(f, apack, LLVMBuildNSWAdd(B, dk, lg_i64(m, r), "")));
            }
            lg_loop_end(f, &lk);
            lg_loop_end(f, &lp);
        }
        { /* pack B: Bpack[jp][k][c] = B[k0 + k, n0 + jp*NR + c] */
            lg_loop lk, lp;
            LLVMValueRef k = lg_loop_begin(f, &lk, lg_i64(m, 0), kbp, "pbk");
            LLVMValueRef kk = LLVMBuildNSWAdd(B, k0, k, "");
            LLVMValueRef jp = lg_loop_begin(f, &lp, lg_i64(m, 0), npan, "pbj");
            LLVMValueRef col0 =
                LLVMBuildNSWAdd(B, n0, LLVMBuildNSWMul(B, jp, lg_i64(m, PK_NR), ""), "");
            LLVMValueRef dk = LLVMBuildNSWAdd(B, LLVMBuildNSWMul(B, jp, lg_i64(m, PK_NR * KCp), ""),
                                              LLVMBuildNSWMul(B, k, lg_i64(m, PK_NR), ""), "");
            for (int c = 0; c < PK_NR; c++) {
                LLVMValueRef v = load_or_pad(
                    f, &Bo[a], boff[a], kk, LLVMBuildNSWAdd(B, col0, lg_i64(m, c), ""), K, N, -0.0);
                LLVMBuildStore(B, v, fptr(f, bpack, LLVMBuildNSWAdd(B, dk, lg_i64(m, c), "")));
            }
            lg_loop_end(f, &lp);
            lg_loop_end(f, &lk);
        }
        /* the macrokernel */
        lg_loop lj, li, lk;
        LLVMValueRef jp = lg_loop_begin(f, &lj, lg_i64(m, 0), npan, "mj");
        LLVMValueRef pb = fptr(f, bpack, LLVMBuildNSWMul(B, jp, lg_i64(m, PK_NR * KCp), ""));
        LLVMValueRef ip = lg_loop_begin(f, &li, lg_i64(m, 0), mpan, "mi");
        LLVMValueRef pa = fptr(f, apack, LLVMBuildNSWMul(B, ip, lg_i64(m, PK_MR * KCp), ""));
        LLVMValueRef coff = LLVMBuildNSWAdd(B, LLVMBuildNSWMul(B, ip, lg_i64(m, PK_MR * NCp), ""),
                                            LLVMBuildNSWMul(B, jp, lg_i64(m, PK_NR), ""), "");
        LLVMValueRef cp[PK_MR][PK_NV];
        for (int r = 0; r < PK_MR; r++)
            for (int v = 0; v < PK_NV; v++) {
                cp[r][v] =
                    fptr(f, tile[a], LLVMBuildNSWAdd(B, coff, lg_i64(m, r * NCp + v * PK_VW), ""));
                LLVMValueRef ld = LLVMBuildLoad2(B, vt, cp[r][v], "");
                LLVMSetAlignment(ld, 4);
                LLVMBuildStore(B, ld, acc[r][v]);
            }
        LLVMValueRef ku =
            lg_loop_begin(f, &lk, lg_i64(m, 0), LLVMBuildSDiv(B, kbp, lg_i64(m, PK_KU), ""), "uk");
        LLVMValueRef kbase = LLVMBuildNSWMul(B, ku, lg_i64(m, PK_KU), "");
        LLVMValueRef cur[PK_MR][PK_NV];
        for (int r = 0; r < PK_MR; r++)
            for (int v = 0; v < PK_NV; v++)
                cur[r][v] = LLVMBuildLoad2(B, vt, acc[r][v], "");
        LLVMValueRef zmask = LLVMConstNull(LLVMVectorType(m->i32, PK_VW));
        for (int u = 0; u < PK_KU; u++) {
            LLVMValueRef k = LLVMBuildNSWAdd(B, kbase, lg_i64(m, u), "");
            LLVMValueRef bv[PK_NV];
            for (int v = 0; v < PK_NV; v++) {
                LLVMValueRef off = LLVMBuildNSWAdd(B, LLVMBuildNSWMul(B, k, lg_i64(m, PK_NR), ""),
                                                   lg_i64(m, v * PK_VW), "");
                bv[v] = LLVMBuildLoad2(B, vt, fptr(f, pb, off), "");
                LLVMSetAlignment(bv[v], 4);
            }
            for (int r = 0; r < PK_MR; r++) {
                LLVMValueRef off = LLVMBuildNSWAdd(B, LLVMBuildNSWMul(B, k, lg_i64(m, PK_MR), ""),
                                                   lg_i64(m, r), "");
                LLVMValueRef s = LLVMBuildLoad2(B, m->f32, fptr(f, pa, off), "");
                LLVMValueRef sv =
                    LLVMBuildInsertElement(B, LLVMGetUndef(vt), s, LLVMConstInt(m->i32, 0, 0), "");
                sv = LLVMBuildShuffleVector(B, sv, LLVMGetUndef(vt), zmask, "");
                for (int v = 0; v < PK_NV; v++) /* rounded product, then the add: see above */
                    cur[r][v] = LLVMBuildFAdd(B, cur[r][v], LLVMBuildFMul(B, sv, bv[v], ""), "");
            }
        }
        for (int r = 0; r < PK_MR; r++)
            for (int v = 0; v < PK_NV; v++)
                LLVMBuildStore(B, cur[r][v], acc[r][v]);
        lg_loop_end(f, &lk);
        for (int r = 0; r < PK_MR; r++)
            for (int v = 0; v < PK_NV; v++) {
                LLVMValueRef st = LLVMBuildStore(B, LLVMBuildLoad2(B, vt, acc[r][v], ""), cp[r][v]);
                LLVMSetAlignment(st, 4);
            }
        lg_loop_end(f, &li);
        lg_loop_end(f, &lj);
    }
    lg_loop_end(f, &lkc);

    /* epilogue: per (i, j) of the valid mb x nb part of the tile */
    for (int d = 0; d < R - 2; d++)
        po.idx[d] = bidx[d];
    epi_ctx ec = {&po, {tile[0], tile[1]}, NULL, (int)NCp, m->f32, na};
    {
        lg_loop li, lj;
        LLVMValueRef i = lg_loop_begin(f, &li, lg_i64(m, 0), mb, "ei");
        ec.i = i;
        po.idx[R - 2] = LLVMBuildNSWAdd(B, m0, i, "");
        if (gm->row_epilogue) { /* the tile holds whole rows (n0 = 0, nb = N) */
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
            po.seed = KF_NONE;
            po.seed_val = NULL;
            lg_loop_end(f, &lj);
        } else {
            LLVMValueRef j = lg_loop_begin(f, &lj, lg_i64(m, 0), nb, "ej");
            LLVMValueRef n = LLVMBuildNSWAdd(B, n0, j, "");
            if (gm->head_dim) { /* (m, n) -> (.., m, h, d) or (.., h, m, d); n0 = 0 */
                int r = g->rank;
                LLVMValueRef hd = lg_i64(m, gm->head_dim);
                LLVMValueRef h = LLVMBuildSDiv(B, n, hd, ""), d = LLVMBuildSRem(B, n, hd, "");
                po.idx[gm->heads_first ? r - 2 : r - 3] = LLVMBuildNSWAdd(B, m0, i, "");
                po.idx[gm->heads_first ? r - 3 : r - 2] = h;
                po.idx[r - 1] = d;
                LLVMValueRef c0 = LLVMBuildNSWAdd(B, LLVMBuildNSWMul(B, i, lg_i64(m, NCp), ""),
                                                  LLVMBuildNSWSub(B, j, d, ""), "");
                po.acc_head = fptr(f, tile[0], c0);
            } else {
                po.idx[R - 1] = n;
            }
            lg_point_reset(f, &po);
            set_acc(f, &ec, j);
            lg_store_writes(f, &po);
            lg_loop_end(f, &lj);
        }
        lg_loop_end(f, &li);
    }
    lg_loop_end(f, &lt);
    lg_point_done(f, &po);
    lg_point_done(f, &pr);
}

void lg_emit_gemm(lg_fn *f) {
    const kf_group *g = f->g;
    const kf_gemm_info *gm = &g->gemm;
    bool packed = g->dtype != KF_DTYPE_F64 && !(gm->a_prologue && gm->row_epilogue) &&
                  g->rank >= 2 && gm->n_anchors >= 1 && gm->n_anchors <= 2 && gm->m >= 1 &&
                  gm->n >= 1 && gm->k >= 1;
    for (int a = 0; packed && a < gm->n_anchors; a++)
        packed = (gm->a_prologue || packable(f->m->graph->nodes[gm->a[a]]->dtype)) &&
                 packable(f->m->graph->nodes[gm->b[a]]->dtype);
    if (packed)
        emit_packed(f);
    else
        emit_generic(f);
}
