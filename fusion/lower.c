/*
 * lower.c -- turns the planner's working state into the plan: orders the
 * groups topologically [I3], decides views versus copies for layout ops,
 * builds each group's expression DAG (fusion.h's scalar-expression form),
 * its computed / reads / writes lists and kernel name, and lists every edge
 * between groups with its reason [I7].
 *
 * Expressions are built by lowering each written tensor (and each row stage's
 * input) recursively in a space: a member of the group becomes an OP node
 * (or ACC / SCORE for the anchor matmul, or the expansion of a norm or softmax
 * around its row statistics), an inline source becomes CONST / INDEX leaves,
 * and anything else becomes a LOAD with its broadcast strides. Memoized per
 * (tensor, space), so shared subexpressions are one node.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/expr.h"
#include "fusion/pass.h"

typedef struct lowerer {
    kf_planner *p;
    kf_plan *plan;
    kf_group *gr;
    uint32_t gi; /* planning group */
    uint32_t *memo[KF_SPACE_COUNT];
    uint32_t *touched; /* (space << 31) | id, to reset memo */
    uint32_t n_touched;
    bool *computed;  /* per tensor, for the current group */
    uint32_t *clist; /* the tensors marked in computed, in marking order */
    uint32_t n_clist;
    uint32_t *moff, *mem; /* members of planning group g: mem[moff[g] .. moff[g+1]), id order */
    uint32_t *view_base;  /* per tensor: the buffer a view reads, or KF_NONE */
    int64_t (*view_strides)[KF_MAX_RANK];
    int64_t *view_offset; /* per tensor: elements of the base before the view's index 0 */
    bool *view_contig;
    struct xmemo_entry *xmemo; /* nodes lowered in a remapped frame, this group */
    uint32_t n_xmemo, cap_xmemo;
    kf_status st;
} lowerer;

/* Marks t computed by the current group (once). */
static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void set_computed(lowerer *L, uint32_t t) {
    if (!L->computed[t]) {
        L->computed[t] = true;
        L->clist[L->n_clist++] = t;
    }
}

static bool push_id(lowerer *L, uint32_t **arr, uint32_t *n, uint32_t *cap, uint32_t id) {
    for (uint32_t i = 0; i < *n; i++) {
        if ((*arr)[i] == id)
            return true;
    }
    if (!kf_mem_grow(L->p->mem, (void **)arr, cap, *n + 1, sizeof **arr)) {
        L->st = KF_ERR_OUT_OF_MEMORY;
        return false;
    }
    (*arr)[(*n)++] = id;
    return true;
}

/* Appends t to the group's writes with its expression root. */
static bool add_write(lowerer *L, uint32_t t, uint32_t root) {
    kf_group *g = L->gr;
    if (!kf_mem_grow(L->p->mem, (void **)&g->writes, &g->cap_writes, g->n_writes + 1,
                     sizeof *g->writes) ||
        !kf_mem_grow(L->p->mem, (void **)&g->roots, &g->cap_roots, g->n_writes + 1,
                     sizeof *g->roots)) {
        L->st = KF_ERR_OUT_OF_MEMORY;
        return false;
    }
    g->writes[g->n_writes] = t;
    g->roots[g->n_writes++] = root;
    return true;
}

static uint32_t emit(lowerer *L, const kf_expr *e) {
    kf_group *g = L->gr;
    if (!kf_mem_grow(L->p->mem, (void **)&g->expr, &g->cap_expr, g->n_expr + 1, sizeof *g->expr)) {
        L->st = KF_ERR_OUT_OF_MEMORY;
        return KF_NONE;
    }
    g->expr[g->n_expr] = *e;
    return g->n_expr++;
}

static kf_expr proto(kf_expr_kind kind, kf_dtype dtype, kf_space sp) {
    kf_expr e;
    memset(&e, 0, sizeof e);
    e.kind = kind;
    e.dtype = dtype;
    e.space = sp;
    e.src[0] = e.src[1] = e.src[2] = KF_NONE;
    e.tensor = e.base = KF_NONE;
    return e;
}

static uint32_t op2(lowerer *L, kf_op op, kf_dtype dt, kf_space sp, uint32_t a, uint32_t b) {
    kf_expr e = proto(KF_EXPR_OP, dt, sp);
    e.op = op;
    e.src[0] = a;
    e.src[1] = b;
    return emit(L, &e);
}

static uint32_t stat(lowerer *L, kf_stat s, kf_dtype dt, kf_space sp) {
    kf_expr e = proto(KF_EXPR_STAT, dt, sp);
    e.stat = s;
    return emit(L, &e);
}

static void space_of(const kf_group *g, kf_space sp, int *rank, const int64_t **dims) {
    *rank = sp == KF_SPACE_ROW ? g->row_rank : g->rank;
    *dims = sp == KF_SPACE_ROW ? g->row_dims : g->dims;
}

static void contiguous_strides(int rank, const int64_t *dims, int64_t *s) {
    int64_t acc = 1;
    for (int i = rank - 1; i >= 0; i--) {
        s[i] = acc;
        acc *= dims[i];
    }
}

/* Strides for a reshape of a strided tensor (x's dims and strides) into
 * tdims, without a copy: the dims of both shapes fall into runs of equal
 * element count; a run of x must be one block (each dim's stride its inner
 * neighbour's stride times that neighbour's dim; dims of 1 are free), and the
 * run's dims in t then take strides down from the run's innermost stride.
 * False when some run is not one block (a copy is needed). */
static bool reshape_strides(int xrank, const int64_t *xdims, const int64_t *xs, int trank,
                            const int64_t *tdims, int64_t *ts) {
    int i = xrank, j = trank; /* from the innermost dims outwards */
    while (i > 0 || j > 0) {
        /* dims of 1 carry no stride question */
        if (j > 0 && tdims[j - 1] == 1) {
            ts[j - 1] = 1;
            j--;
            continue;
        }
        if (i > 0 && xdims[i - 1] == 1) {
            i--;
            continue;
        }
        if (i == 0 || j == 0)
            return false;
        /* one run: grow whichever side has the smaller count */
        int i0 = i - 1, j0 = j - 1;
        int64_t nx = xdims[i0], nt = tdims[j0];
        int64_t inner = xs[i0]; /* the run's innermost stride */
        while (nx != nt) {
            if (nx < nt) {
                if (i0 == 0)
                    return false;
                i0--;
                if (xdims[i0] == 1)
                    continue;
                int k = i0 + 1;
                while (xdims[k] == 1)
                    k++;
                if (xs[i0] != xs[k] * xdims[k])
                    return false;
                nx *= xdims[i0];
            } else {
                if (j0 == 0)
                    return false;
                j0--;
                nt *= tdims[j0];
            }
        }
        int64_t st = inner;
        for (int k = j - 1; k >= j0; k--) {
            ts[k] = st;
            st *= tdims[k];
        }
        i = i0;
        j = j0;
    }
    return true;
}

/* What a LOAD of t reads: t itself, row-major, or the buffer t is a view of
 * (its base, offset and strides). Sets e's tensor, base and offset and t's
 * element strides in that buffer. */
static void load_source(const lowerer *L, const kf_tensor *t, kf_expr *e,
                        int64_t own[KF_MAX_RANK]) {
    e->tensor = t->id;
    if (L->view_base[t->id] != KF_NONE) {
        e->base = L->view_base[t->id];
        e->offset = L->view_offset[t->id];
        memcpy(own, L->view_strides[t->id], sizeof(int64_t) * KF_MAX_RANK);
    } else {
        e->base = t->id;
        contiguous_strides(t->rank, t->dims, own);
    }
}

/* A LOAD of t in space sp; `along` >= 0 aligns a rank-1 t with that axis of
 * the space (norm weights over a non-last axis) instead of the last one. */
static uint32_t load(lowerer *L, const kf_tensor *t, kf_space sp, int along) {
    int rank;
    const int64_t *dims;
    space_of(L->gr, sp, &rank, &dims);
    kf_expr e = proto(KF_EXPR_LOAD, t->dtype, sp);
    int64_t own[KF_MAX_RANK];
    load_source(L, t, &e, own);
    if (along >= 0 && t->rank == 1) {
        e.strides[along] = t->dims[0] == 1 ? 0 : own[0];
    } else {
        KF_ASSERT(t->rank <= rank);
        for (int i = 0; i < t->rank; i++) {
            int a = rank - t->rank + i;
            if (a >= 0)
                e.strides[a] = t->dims[i] == 1 ? 0 : own[i];
        }
    }
    push_id(L, &L->gr->reads, &L->gr->n_reads, &L->gr->cap_reads, t->id);
    return emit(L, &e);
}

/* Sources this group computes: one-element constants, and an iota that has
 * no group of its own or is its group's member (an iota in memory). */
static bool is_inline_source(const lowerer *L, const kf_tensor *t) {
    if (t->op == KF_OP_IOTA)
        return L->p->gid[t->id] == KF_NONE || L->p->gid[t->id] == L->gi;
    return t->op == KF_OP_CONST && kf_ir_numel(t) == 1;
}

static bool is_member(const lowerer *L, const kf_tensor *t) {
    const kf_pgroup *pg = &L->p->groups[L->gi];
    return L->p->gid[t->id] == L->gi || (pg->prologue == t->id && pg->kind == KF_GROUP_GEMM);
}

static uint32_t lower(lowerer *L, kf_tensor *t, kf_space sp);

/* reduce_min is the max statistic of an order-reversing exact map r of the row,
 * mapped back: r(x) = -x for floats (NaN stays NaN), -1 - x for i32 (a
 * bijection of the i32 range, where -x would saturate at INT_MIN). The map
 * lives in the row stage's input; the result node stands for the tensor. */
static uint32_t lower_min(lowerer *L, const kf_tensor *t, kf_space sp) {
    kf_group *g = L->gr;
    kf_dtype dt = t->dtype;
    bool i32 = dt == KF_DTYPE_I32;
    for (int pass = 0; pass < 2; pass++) {
        kf_space at = pass ? sp : KF_SPACE_ROW;
        uint32_t v = pass ? stat(L, KF_STAT_MAX, dt, sp) : g->row.input;
        uint32_t r;
        if (v == KF_NONE)
            return KF_NONE;
        if (i32) {
            kf_expr c = proto(KF_EXPR_CONST, dt, at);
            c.value = -1.0;
            r = op2(L, KF_OP_SUB, dt, at, emit(L, &c), v);
        } else {
            kf_expr e = proto(KF_EXPR_OP, dt, at);
            e.op = KF_OP_NEG;
            e.src[0] = v;
            r = emit(L, &e);
        }
        if (r == KF_NONE)
            return KF_NONE;
        if (pass) {
            g->expr[r].tensor = t->id;
            return r;
        }
        g->row.input = r;
    }
    return KF_NONE; /* KF_NEVER */
}

/* logsumexp from the softmax's statistics: m + log(sumexp), or m itself where
 * m = +-inf (ir/eval.c's definition: sumexp is then NaN or 0). */
static uint32_t lower_logsumexp(lowerer *L, const kf_tensor *t, kf_space sp) {
    kf_dtype dt = t->dtype;
    L->gr->row.stats = 1u << KF_STAT_MAX | 1u << KF_STAT_SUMEXP;
    uint32_t m = stat(L, KF_STAT_MAX, dt, sp);
    kf_expr e = proto(KF_EXPR_OP, dt, sp);
    e.op = KF_OP_LOG;
    e.src[0] = stat(L, KF_STAT_SUMEXP, dt, sp);
    uint32_t lse = op2(L, KF_OP_ADD, dt, sp, m, emit(L, &e));
    e = proto(KF_EXPR_OP, dt, sp);
    e.op = KF_OP_ABS;
    e.src[0] = m;
    kf_expr inf = proto(KF_EXPR_CONST, dt, sp);
    inf.value = INFINITY;
    uint32_t edge = op2(L, KF_OP_EQ, KF_DTYPE_BOOL, sp, emit(L, &e), emit(L, &inf));
    kf_expr w = proto(KF_EXPR_OP, dt, sp);
    w.op = KF_OP_WHERE;
    w.src[0] = edge;
    w.src[1] = m;
    w.src[2] = lse;
    w.tensor = t->id;
    return emit(L, &w);
}

/* Expands a norm or softmax (or a reduction) around its row statistics and
 * records the group's row stage. */
static uint32_t lower_row(lowerer *L, kf_tensor *t, kf_space sp) {
    kf_group *g = L->gr;
    kf_tensor *x = t->src[0];
    kf_dtype dt = t->dtype;
    int rank;
    const int64_t *dims;
    space_of(g, sp, &rank, &dims);
    int axis = t->attr.axis + (rank - x->rank);
    kf_row_stage *rs = &g->row;
    rs->present = true;
    rs->op = t->op;
    rs->tensor = t->id;
    rs->axis = t->attr.axis;
    rs->length = x->dims[t->attr.axis];
    rs->eps = t->attr.eps;
    uint32_t out;
    if (kf_op_has(t->op, KF_TRAIT_REDUCTION)) {
        /* The input lives in space ROW (the unreduced shape). */
        rs->input = lower(L, x, KF_SPACE_ROW);
        rs->space = KF_SPACE_ROW;
        /* Which statistic is the reduction's own math (I1 allows naming it). */
        kf_stat s = kf_op_has(t->op, KF_TRAIT_INDEX)                         ? KF_STAT_ARGMAX
                    : t->op == KF_OP_REDUCE_MAX || t->op == KF_OP_REDUCE_MIN ? KF_STAT_MAX
                    : t->op == KF_OP_REDUCE_MEAN                             ? KF_STAT_MEAN
                                                                             : KF_STAT_SUM;
        rs->stats = 1u << s;
        if (t->op == KF_OP_REDUCE_MIN)
            return lower_min(L, t, sp);
        if (t->op == KF_OP_LOGSUMEXP)
            return lower_logsumexp(L, t, sp);
        kf_expr e = proto(KF_EXPR_STAT, dt, sp);
        e.stat = s;
        e.tensor = t->id;
        return emit(L, &e);
    }
    uint32_t xs = lower(L, x, sp);
    rs->input = xs;
    rs->space = sp;
    if (kf_op_has(t->op, KF_TRAIT_SOFTMAX) && kf_op_has(t->op, KF_TRAIT_LOGSPACE)) {
        /* log_softmax: (x - max) - log(sumexp), the softmax's statistics. */
        rs->stats = 1u << KF_STAT_MAX | 1u << KF_STAT_SUMEXP;
        uint32_t d = op2(L, KF_OP_SUB, dt, sp, xs, stat(L, KF_STAT_MAX, dt, sp));
        kf_expr e = proto(KF_EXPR_OP, dt, sp);
        e.op = KF_OP_LOG;
        e.src[0] = stat(L, KF_STAT_SUMEXP, dt, sp);
        out = op2(L, KF_OP_SUB, dt, sp, d, emit(L, &e));
    } else if (kf_op_has(t->op, KF_TRAIT_SOFTMAX)) {
        rs->stats = 1u << KF_STAT_MAX | 1u << KF_STAT_SUMEXP;
        uint32_t d = op2(L, KF_OP_SUB, dt, sp, xs, stat(L, KF_STAT_MAX, dt, sp));
        kf_expr e = proto(KF_EXPR_OP, dt, sp);
        e.op = KF_OP_EXP;
        e.src[0] = d;
        uint32_t ex = emit(L, &e);
        out = op2(L, KF_OP_DIV, dt, sp, ex, stat(L, KF_STAT_SUMEXP, dt, sp));
    } else if (t->nsrc == 3) { /* layer_norm: (x - mean) * rstd * w + b */
        rs->stats = 1u << KF_STAT_MEAN | 1u << KF_STAT_RSTD;
        uint32_t c = op2(L, KF_OP_SUB, dt, sp, xs, stat(L, KF_STAT_MEAN, dt, sp));
        uint32_t n = op2(L, KF_OP_MUL, dt, sp, c, stat(L, KF_STAT_RSTD, dt, sp));
        uint32_t w =
            is_member(L, t->src[1]) ? lower(L, t->src[1], sp) : load(L, t->src[1], sp, axis);
        uint32_t b =
            is_member(L, t->src[2]) ? lower(L, t->src[2], sp) : load(L, t->src[2], sp, axis);
        out = op2(L, KF_OP_ADD, dt, sp, op2(L, KF_OP_MUL, dt, sp, n, w), b);
    } else { /* rms_norm: x * rstd * w */
        rs->stats = 1u << KF_STAT_RMS_RSTD;
        uint32_t n = op2(L, KF_OP_MUL, dt, sp, xs, stat(L, KF_STAT_RMS_RSTD, dt, sp));
        uint32_t w =
            is_member(L, t->src[1]) ? lower(L, t->src[1], sp) : load(L, t->src[1], sp, axis);
        out = op2(L, KF_OP_MUL, dt, sp, n, w);
    }
    if (out != KF_NONE)
        g->expr[out].tensor = t->id;
    return out;
}

/* clamp as ir.h defines it: a max with the rounded lower bound, then a min
 * with the rounded upper one (an unbounded side left out); the last node
 * stands for the tensor. Both are ops every backend already lowers. */
static uint32_t lower_clamp(lowerer *L, const kf_tensor *t, uint32_t x, kf_space sp) {
    kf_dtype dt = t->dtype;
    bool has_lo = kf_ir_clamp_has_lo(t->attr.lo), has_hi = kf_ir_clamp_has_hi(t->attr.hi);
    uint32_t v = x;
    for (int side = 0; side < 2 && v != KF_NONE; side++) {
        if (!(side ? has_hi : has_lo))
            continue;
        kf_expr c = proto(KF_EXPR_CONST, dt, sp);
        c.value = kf_ir_round(dt, side ? t->attr.hi : t->attr.lo);
        uint32_t b = emit(L, &c);
        if (b == KF_NONE)
            return KF_NONE;
        v = op2(L, side ? KF_OP_MIN : KF_OP_MAX, dt, sp, v, b);
    }
    if (v != KF_NONE && v != x)
        L->gr->expr[v].tensor = t->id;
    return v;
}

/* ------------------------------------------------------------------------ */
/* Index remapping: slice, concat, gather                                     */
/* ------------------------------------------------------------------------ */

/* A slice, concat or gather has no node of its own: its consumer reads its
 * operand at remapped coordinates. A frame says, per axis of a tensor, which
 * coordinate of it the current element of the space reads: scale * index
 * along a space axis + off (SPACE), a constant (CONST: off), or the value of
 * an i32 node of the expression (NODE: a gather's clamped index, a concat's
 * clamped position), always within the axis. lower() reads a tensor in the
 * identity frame (right-aligned, size-1 dims at 0); lower_x() lowers in any
 * frame: a LOAD gets the frame's strides, offset and coordinate nodes; an
 * elementwise member passes the frame on to its operands (right-aligned); a
 * slice scales and shifts its axis, a gather puts the index's value on its
 * axis, a concat selects per element (or statically, when the axis's range
 * lies in one source). Nodes computed in a frame other than the identity are
 * `remapped`. */
enum { XA_SPACE = 0, XA_CONST, XA_NODE };
typedef struct xaxis {
    int kind;
    int axis;
    int64_t scale, off;
    uint32_t node;
} xaxis;
typedef struct xform {
    int rank;
    xaxis ax[KF_MAX_RANK];
} xform;

static xaxis xa_const(int64_t off) {
    xaxis a = {XA_CONST, 0, 0, off, KF_NONE};
    return a;
}

static void xf_identity(const lowerer *L, const kf_tensor *t, kf_space sp, xform *xf) {
    int rank;
    const int64_t *dims;
    space_of(L->gr, sp, &rank, &dims);
    memset(xf, 0, sizeof *xf);
    xf->rank = t->rank;
    for (int j = 0; j < t->rank; j++) {
        if (t->dims[j] == 1)
            xf->ax[j] = xa_const(0);
        else
            xf->ax[j] = (xaxis){XA_SPACE, rank - t->rank + j, 1, 0, KF_NONE};
    }
}

/* The frame of operand s of a tensor read in frame xf (numpy broadcasting). */
static void xf_operand(const xform *xf, const kf_tensor *s, xform *out) {
    memset(out, 0, sizeof *out);
    out->rank = s->rank;
    for (int k = 0; k < s->rank; k++)
        out->ax[k] = s->dims[k] == 1 ? xa_const(0) : xf->ax[xf->rank - s->rank + k];
}

static uint32_t iconst(lowerer *L, kf_space sp, int64_t v) {
    kf_expr c = proto(KF_EXPR_CONST, KF_DTYPE_I32, sp);
    c.value = (double)v;
    return emit(L, &c);
}

/* The coordinate of frame axis a as an i32 node. */
static uint32_t coord_node(lowerer *L, const xaxis *a, kf_space sp) {
    if (a->kind == XA_NODE)
        return a->node;
    if (a->kind == XA_CONST)
        return iconst(L, sp, a->off);
    kf_expr e = proto(KF_EXPR_INDEX, KF_DTYPE_I32, sp);
    e.axis = a->axis;
    if (L->gr->kind == KF_GROUP_ATTENTION && sp == KF_SPACE_OUT) {
        /* the score space's own leaves, as lower() makes an iota's: the
         * mask classifier reads q and kv off them (fusion/mask.c) */
        int r = L->gr->rank;
        e.kind = a->axis == r - 1   ? KF_EXPR_KV_IDX
                 : a->axis == r - 2 ? KF_EXPR_Q_IDX
                 : a->axis == r - 3 ? KF_EXPR_HEAD
                 : a->axis == r - 4 ? KF_EXPR_BATCH
                                    : KF_EXPR_INDEX;
    }
    uint32_t v = emit(L, &e);
    if (a->scale != 1)
        v = op2(L, KF_OP_MUL, KF_DTYPE_I32, sp, v, iconst(L, sp, a->scale));
    if (a->off)
        v = op2(L, KF_OP_ADD, KF_DTYPE_I32, sp, v, iconst(L, sp, a->off));
    return v;
}

/* A LOAD of t (not computed here) in frame xf. */
static uint32_t load_x(lowerer *L, const kf_tensor *t, kf_space sp, const xform *xf) {
    kf_expr e = proto(KF_EXPR_LOAD, t->dtype, sp);
    int64_t own[KF_MAX_RANK];
    load_source(L, t, &e, own);
    int nd = 0;
    for (int j = 0; j < t->rank; j++) {
        const xaxis *a = &xf->ax[j];
        if (t->dims[j] == 1)
            continue;
        if (a->kind == XA_SPACE) {
            e.strides[a->axis] += a->scale * own[j];
            e.offset += a->off * own[j];
        } else if (a->kind == XA_CONST) {
            e.offset += a->off * own[j];
        } else if (nd < 3) {
            e.src[nd] = a->node;
            e.dyn_strides[nd++] = own[j];
        } else {
            L->st = kf_ir_note(L->p->g, KF_ERR_UNSUPPORTED,
                               "plan: a load of %%%u through more than three gathers and "
                               "concats on different axes; materialize one of them",
                               t->id);
            return KF_NONE;
        }
    }
    push_id(L, &L->gr->reads, &L->gr->n_reads, &L->gr->cap_reads, t->id);
    return emit(L, &e);
}

static uint32_t lower_x(lowerer *L, kf_tensor *t, kf_space sp, const xform *xf);

/* slice, concat or gather t (a member) read in frame xf (t's own). */
static uint32_t lower_remap(lowerer *L, kf_tensor *t, kf_space sp, const xform *xf, bool remapped) {
    int ax = t->attr.axis;
    xform o;
    if (t->op == KF_OP_SLICE) {
        o = *xf;
        xaxis *a = &o.ax[ax];
        int64_t st = t->attr.start, step = t->attr.step;
        if (a->kind == XA_NODE) {
            uint32_t v = a->node;
            if (step != 1)
                v = op2(L, KF_OP_MUL, KF_DTYPE_I32, sp, v, iconst(L, sp, step));
            if (st)
                v = op2(L, KF_OP_ADD, KF_DTYPE_I32, sp, v, iconst(L, sp, st));
            a->node = v;
        } else {
            a->scale *= step;
            a->off = a->off * step + st;
        }
        return lower_x(L, t->src[0], sp, &o);
    }
    if (t->op == KF_OP_REPEAT) {
        /* x's coordinate along the axis is the result's / times: an i32
         * division node (a coordinate is never negative, so truncation is the
         * floor), or a constant */
        o = *xf;
        xaxis *a = &o.ax[ax];
        int64_t n = t->attr.times;
        if (t->src[0]->dims[ax] == 1)
            *a = xa_const(0);
        else if (a->kind == XA_CONST)
            a->off /= n;
        else if (n != 1)
            *a = (xaxis){XA_NODE, 0, 0, 0,
                         op2(L, KF_OP_DIV, KF_DTYPE_I32, sp, coord_node(L, a, sp),
                             iconst(L, sp, n))};
        return lower_x(L, t->src[0], sp, &o);
    }
    if (t->op == KF_OP_GATHER) {
        kf_tensor *tb = t->src[0], *ix = t->src[1];
        int ri = ix->rank;
        memset(&o, 0, sizeof o);
        o.rank = ri;
        for (int k = 0; k < ri; k++)
            o.ax[k] = ix->dims[k] == 1 ? xa_const(0) : xf->ax[ax + k];
        uint32_t v = lower_x(L, ix, sp, &o);
        if (ix->dtype != KF_DTYPE_I32) { /* i64: saturate into i32, then clamp */
            kf_expr c = proto(KF_EXPR_OP, KF_DTYPE_I32, sp);
            c.op = KF_OP_CAST;
            c.src[0] = v;
            v = emit(L, &c);
        }
        /* Clamped into the axis: the CUDA target's contract, and memory
         * safety everywhere (the CPU target checks the indices first). */
        v = op2(L, KF_OP_MAX, KF_DTYPE_I32, sp, v, iconst(L, sp, 0));
        v = op2(L, KF_OP_MIN, KF_DTYPE_I32, sp, v, iconst(L, sp, tb->dims[ax] - 1));
        if (v != KF_NONE)
            L->gr->expr[v].clamp_report = true; /* reported by the CUDA target */
        memset(&o, 0, sizeof o);
        o.rank = tb->rank;
        for (int j = 0; j < tb->rank; j++) {
            if (tb->dims[j] == 1)
                o.ax[j] = xa_const(0);
            else if (j == ax)
                o.ax[j] = (xaxis){XA_NODE, 0, 0, 0, v};
            else
                o.ax[j] = xf->ax[j < ax ? j : j - 1 + ri];
        }
        return lower_x(L, tb, sp, &o);
    }
    /* concat: a's rows, then b's, along ax */
    kf_tensor *a = t->src[0], *b = t->src[1];
    int64_t na = a->dims[ax], nb = b->dims[ax];
    const xaxis *c = &xf->ax[ax];
    int rank;
    const int64_t *dims;
    space_of(L->gr, sp, &rank, &dims);
    if (c->kind != XA_NODE) {
        int64_t lo = c->off,
                hi = c->kind == XA_SPACE ? c->off + c->scale * (dims[c->axis] - 1) : c->off;
        if (hi < na || lo >= na) {
            o = *xf;
            if (lo >= na)
                o.ax[ax].off -= na;
            if ((lo >= na ? nb : na) == 1)
                o.ax[ax] = xa_const(0);
            return lower_x(L, lo >= na ? b : a, sp, &o);
        }
    }
    uint32_t pos = coord_node(L, c, sp);
    uint32_t sel = op2(L, KF_OP_LT, KF_DTYPE_BOOL, sp, pos, iconst(L, sp, na));
    o = *xf;
    o.ax[ax] = na == 1 ? xa_const(0)
                       : (xaxis){XA_NODE, 0, 0, 0,
                                 op2(L, KF_OP_MIN, KF_DTYPE_I32, sp, pos, iconst(L, sp, na - 1))};
    uint32_t va = lower_x(L, a, sp, &o);
    o = *xf;
    o.ax[ax] = nb == 1 ? xa_const(0)
                       : (xaxis){XA_NODE, 0, 0, 0,
                                 op2(L, KF_OP_MAX, KF_DTYPE_I32, sp,
                                     op2(L, KF_OP_SUB, KF_DTYPE_I32, sp, pos, iconst(L, sp, na)),
                                     iconst(L, sp, 0))};
    uint32_t vb = lower_x(L, b, sp, &o);
    kf_expr w = proto(KF_EXPR_OP, t->dtype, sp);
    w.op = KF_OP_WHERE;
    w.src[0] = sel;
    w.src[1] = va;
    w.src[2] = vb;
    w.tensor = t->id;
    w.remapped = remapped;
    return emit(L, &w);
}

typedef struct xmemo_entry {
    uint32_t t;
    kf_space sp;
    xform xf;
    uint32_t node;
} xmemo_entry;

/* The head view of a head-split GEMM group (fuse_head_epilogue.c) read in
 * frame xf: the identity on every axis but D, so the accumulator of this row
 * and head, at the in-head column the frame names. */
static uint32_t head_acc(lowerer *L, const kf_tensor *t, kf_space sp, const xform *xf) {
    xform id;
    xf_identity(L, t, sp, &id);
    int r = t->rank;
    if (sp != KF_SPACE_OUT || memcmp(id.ax, xf->ax, sizeof(xaxis) * (size_t)(r - 1)) != 0) {
        L->st = kf_ir_note(L->p->g, KF_ERR_INTERNAL,
                           "plan: the head view %%%u is read across heads in its GEMM's "
                           "epilogue (a kfuse bug: fuse_head_epilogue admits only slices and "
                           "concats along its last axis)",
                           t->id);
        return KF_NONE;
    }
    kf_expr e = proto(KF_EXPR_ACC, t->dtype, sp);
    e.tensor = t->id;
    e.remapped = true;
    e.src[0] = coord_node(L, &xf->ax[r - 1], sp);
    return emit(L, &e);
}

static uint32_t lower_x(lowerer *L, kf_tensor *t, kf_space sp, const xform *xf) {
    if (L->st != KF_OK)
        return KF_NONE;
    /* The identity frame of a tensor that broadcasts into the space: t's own
     * value at this index, the memoized node of lower(). (The same frame of a
     * tensor longer than the space is a prefix of it: remapped.) */
    xform id;
    xf_identity(L, t, sp, &id);
    int rank;
    const int64_t *dims;
    space_of(L->gr, sp, &rank, &dims);
    bool fits = t->rank <= rank;
    for (int j = 0; j < t->rank && fits; j++)
        fits = t->dims[j] == 1 || t->dims[j] == dims[rank - t->rank + j];
    if (fits && memcmp(&id, xf, sizeof id) == 0)
        return lower(L, t, sp);
    for (uint32_t i = 0; i < L->n_xmemo; i++) {
        const xmemo_entry *m = &L->xmemo[i];
        if (m->t == t->id && m->sp == sp && memcmp(&m->xf, xf, sizeof *xf) == 0)
            return m->node;
    }
    uint32_t r;
    if (is_inline_source(L, t)) {
        set_computed(L, t->id);
        if (t->op == KF_OP_CONST) {
            kf_expr e = proto(KF_EXPR_CONST, t->dtype, sp);
            e.tensor = t->id;
            e.value = t->data ? kf_ir_load(t->data, t->dtype, 0) : 0.0;
            r = emit(L, &e);
        } else { /* iota: its coordinate, converted */
            kf_expr e = proto(KF_EXPR_OP, t->dtype, sp);
            e.op = KF_OP_CAST;
            e.src[0] = coord_node(L, &xf->ax[t->attr.axis], sp);
            e.tensor = t->id;
            e.remapped = true;
            r = emit(L, &e);
        }
    } else if (kf_pl_is_source(t) || !is_member(L, t)) {
        r = load_x(L, t, sp, xf);
    } else {
        set_computed(L, t->id);
        xform o;
        if (t->id == L->p->groups[L->gi].head_view) {
            r = head_acc(L, t, sp, xf);
        } else if (kf_op_has(t->op, KF_TRAIT_REMAP)) {
            r = lower_remap(L, t, sp, xf, true);
        } else if (t->op == KF_OP_EXPAND) {
            xf_operand(xf, t->src[0], &o);
            r = lower_x(L, t->src[0], sp, &o);
        } else if (t->op == KF_OP_CLAMP) {
            xf_operand(xf, t->src[0], &o);
            uint32_t x = lower_x(L, t->src[0], sp, &o);
            r = lower_clamp(L, t, x, sp);
            if (r != KF_NONE && r != x)
                L->gr->expr[r].remapped = true;
        } else if (kf_pl_is_elementwise(t)) {
            kf_expr e = proto(KF_EXPR_OP, t->dtype, sp);
            e.op = t->op;
            e.tensor = t->id;
            e.remapped = true;
            for (int k = 0; k < t->nsrc; k++) {
                xf_operand(xf, t->src[k], &o);
                e.src[k] = lower_x(L, t->src[k], sp, &o);
            }
            r = emit(L, &e);
        } else { /* KF_NEVER: the planner fuses only elementwise work under a remap */
            L->st = kf_ir_note(L->p->g, KF_ERR_INTERNAL,
                               "plan: %s %%%u read through a slice, concat or gather in one "
                               "kernel (a kfuse bug)",
                               kf_op_get(t->op)->name, t->id);
            return KF_NONE;
        }
    }
    if (r != KF_NONE) {
        if (!kf_mem_grow(L->p->mem, (void **)&L->xmemo, &L->cap_xmemo, L->n_xmemo + 1,
                         sizeof *L->xmemo)) {
            L->st = KF_ERR_OUT_OF_MEMORY;
            return KF_NONE;
        }
        L->xmemo[L->n_xmemo++] = (xmemo_entry){t->id, sp, *xf, r};
    }
    return r;
}

static uint32_t lower(lowerer *L, kf_tensor *t, kf_space sp) {
    uint32_t *m = &L->memo[sp][t->id];
    if (*m != KF_NONE)
        return *m;
    kf_group *g = L->gr;
    const kf_pgroup *pg = &L->p->groups[L->gi];
    int rank;
    const int64_t *dims;
    space_of(g, sp, &rank, &dims);
    uint32_t r;
    if (is_inline_source(L, t)) {
        set_computed(L, t->id);
        if (t->op == KF_OP_CONST) {
            kf_expr e = proto(KF_EXPR_CONST, t->dtype, sp);
            e.tensor = t->id;
            e.value = t->data ? kf_ir_load(t->data, t->dtype, 0) : 0.0;
            r = emit(L, &e);
        } else {
            int axis = t->attr.axis + (rank - t->rank);
            kf_expr e = proto(KF_EXPR_INDEX, t->dtype, sp);
            e.tensor = t->id;
            e.axis = axis;
            if (t->dims[t->attr.axis] == 1) {
                e.kind = KF_EXPR_CONST;
                e.value = 0;
            } else if (g->kind == KF_GROUP_ATTENTION && sp == KF_SPACE_OUT) {
                e.kind = axis == rank - 1   ? KF_EXPR_KV_IDX
                         : axis == rank - 2 ? KF_EXPR_Q_IDX
                         : axis == rank - 3 ? KF_EXPR_HEAD
                         : axis == rank - 4 ? KF_EXPR_BATCH
                                            : KF_EXPR_INDEX;
            } else if (g->kind == KF_GROUP_GEMM && sp == KF_SPACE_OUT && !g->gemm.head_dim) {
                e.kind = axis == rank - 1   ? KF_EXPR_COL
                         : axis == rank - 2 ? KF_EXPR_ROW
                                            : KF_EXPR_INDEX;
            }
            r = emit(L, &e);
        }
    } else if (kf_pl_is_source(t) || !is_member(L, t)) {
        r = load(L, t, sp, -1);
    } else {
        set_computed(L, t->id);
        if (t->id == pg->head_view) {
            /* the product at this element of its head view (gemm.head_dim) */
            kf_expr e = proto(KF_EXPR_ACC, t->dtype, sp);
            e.tensor = t->id;
            r = emit(L, &e);
        } else if (kf_op_has(t->op, KF_TRAIT_GEMM)) {
            kf_expr e =
                proto(g->kind == KF_GROUP_ATTENTION ? KF_EXPR_SCORE : KF_EXPR_ACC, t->dtype, sp);
            e.tensor = t->id;
            e.anchor = t->id == pg->anchor2 ? 1 : 0;
            r = emit(L, &e);
        } else if (t->op == KF_OP_EXPAND) {
            /* No node of its own: x's node, read in this (larger) space, is x
             * broadcast; loads of x carry stride 0 along the expanded dims. */
            r = lower(L, t->src[0], sp);
        } else if (t->op == KF_OP_CLAMP) {
            r = lower_clamp(L, t, lower(L, t->src[0], sp), sp);
        } else if (kf_op_has(t->op, KF_TRAIT_REMAP)) {
            xform xf;
            xf_identity(L, t, sp, &xf);
            r = lower_remap(L, t, sp, &xf, false);
        } else if (kf_pl_is_elementwise(t)) {
            kf_expr e = proto(KF_EXPR_OP, t->dtype, sp);
            e.op = t->op;
            e.tensor = t->id;
            for (int k = 0; k < t->nsrc; k++)
                e.src[k] = lower(L, t->src[k], sp);
            r = emit(L, &e);
        } else if (kf_op_has(t->op, KF_TRAIT_ROWWISE)) {
            r = lower_row(L, t, sp);
        } else {
            r = load(L, t, sp, -1); /* KF_NEVER: layout ops are never members */
        }
    }
    if (r != KF_NONE) {
        *m = r;
        L->touched[L->n_touched++] = ((uint32_t)sp << 31) | t->id;
    }
    return r;
}

/* ------------------------------------------------------------------------ */
/* Per-kind setup                                                             */
/* ------------------------------------------------------------------------ */

static void set_space(int *rank, int64_t *dims, const kf_tensor *t) {
    *rank = t->rank;
    memcpy(dims, t->dims, sizeof(int64_t) * KF_MAX_RANK);
}

static bool written(const lowerer *L, const kf_tensor *t) {
    const kf_planner *p = L->p;
    if (p->is_output[t->id])
        return true;
    for (uint32_t u = 0; u < kf_pl_uses(p, t); u++) {
        const kf_tensor *c = kf_pl_consumer(p, t, u);
        uint32_t gc = p->gid[c->id];
        if (gc == L->gi)
            continue;
        if (p->groups[gc].kind == KF_GROUP_GEMM && p->groups[gc].prologue == t->id)
            continue; /* recomputed there */
        return true;
    }
    return false;
}

static void lower_view(lowerer *L, kf_tensor *t) {
    kf_group *g = L->gr;
    kf_tensor *x = t->src[0];
    int64_t xs[KF_MAX_RANK], off = 0;
    uint32_t base;
    bool xcontig;
    if (L->view_base[x->id] != KF_NONE) {
        base = L->view_base[x->id];
        memcpy(xs, L->view_strides[x->id], sizeof xs);
        off = L->view_offset[x->id];
        xcontig = L->view_contig[x->id];
    } else {
        base = x->id;
        contiguous_strides(x->rank, x->dims, xs);
        xcontig = true;
    }
    int64_t ts[KF_MAX_RANK] = {0}, cs[KF_MAX_RANK];
    contiguous_strides(t->rank, t->dims, cs);
    bool expressible = true;
    int64_t toff = off; /* the view's offset in base */
    if (t->op == KF_OP_SLICE) {
        /* view_slices: the operand's strides, the sliced axis's scaled by
         * the step, the start's elements before index 0 */
        memcpy(ts, xs, sizeof ts);
        ts[t->attr.axis] = xs[t->attr.axis] * t->attr.step;
        toff = off + t->attr.start * xs[t->attr.axis];
    } else if (t->op == KF_OP_RESHAPE) {
        /* row-major strides of a contiguous operand; of a strided view
         * (a slice's), the strides its runs of dims allow, or a copy */
        if (xcontig)
            memcpy(ts, cs, sizeof ts);
        else
            expressible = reshape_strides(x->rank, x->dims, xs, t->rank, t->dims, ts);
    } else {
        for (int i = 0; i < t->rank; i++)
            ts[i] = xs[t->attr.perm[i]];
    }
    bool contig = true;
    for (int i = 0; i < t->rank; i++)
        contig = contig && (t->dims[i] == 1 || ts[i] == cs[i]);
    set_space(&g->rank, g->dims, t);
    g->layout_copy_of = x->id;
    set_computed(L, t->id);
    push_id(L, &g->reads, &g->n_reads, &g->cap_reads, x->id);
    /* A graph output that is a contiguous view stays a view: the output
     * aliases the bytes its base already holds. A non-contiguous one needs a
     * copy into the output's row-major layout. */
    /* A view at an offset is never called contiguous: a graph output (or a
     * reshape) of it gets a copy, as nothing aliases a buffer's middle. */
    bool vcontig = contig && xcontig && toff == 0 && t->op != KF_OP_SLICE;
    if (expressible && (!L->p->is_output[t->id] || vcontig)) {
        g->kind = KF_GROUP_VIEW;
        g->is_kernel = false;
        g->view_base = base;
        memcpy(g->view_strides, ts, sizeof ts);
        g->view_offset = toff;
        g->view_contiguous = vcontig;
        L->view_base[t->id] = base;
        memcpy(L->view_strides[t->id], ts, sizeof ts);
        L->view_offset[t->id] = toff;
        L->view_contig[t->id] = g->view_contiguous;
        add_write(L, t->id, KF_NONE);
        return;
    }
    /* A copy kernel. */
    g->kind = KF_GROUP_LAYOUT;
    g->is_kernel = true;
    g->view_base = t->id;
    kf_expr e = proto(KF_EXPR_LOAD, x->dtype, KF_SPACE_OUT);
    e.tensor = x->id;
    e.base = base;
    e.offset = off;
    if ((t->op == KF_OP_PERMUTE || t->op == KF_OP_SLICE ||
         (t->op == KF_OP_RESHAPE && !xcontig)) &&
        expressible) {
        e.offset = toff;
        memcpy(e.strides, ts, sizeof ts);
    } else {
        set_space(&g->row_rank, g->row_dims, x);
        e.space = KF_SPACE_ROW;
        memcpy(e.strides, xs, sizeof xs);
    }
    add_write(L, t->id, emit(L, &e));
}

/* ------------------------------------------------------------------------ */
/* Kernel names                                                               */
/* ------------------------------------------------------------------------ */

static void name_append(char *buf, size_t size, const char *tag) {
    size_t n = strlen(buf);
    /* Skip a tag equal to the last one. */
    const char *last = strrchr(buf, '_');
    if (last && strcmp(last + 1, tag) == 0)
        return;
    if (n + strlen(tag) + 2 < size)
        snprintf(buf + n, size - n, "%s%s", n ? "_" : "", tag);
}

static bool group_computes(const kf_group *g, uint32_t id) {
    for (uint32_t i = 0; i < g->n_computed; i++) {
        if (g->computed[i] == id)
            return true;
    }
    return false;
}

static const char *op_tag(const lowerer *L, const kf_tensor *t) {
    if (kf_op_has(t->op, KF_TRAIT_BINARY) && !kf_op_has(t->op, KF_TRAIT_COMPARE)) {
        for (int k = 0; k < 2; k++) {
            const kf_tensor *o = t->src[k];
            bool outside = kf_pl_is_source(o) || !group_computes(L->gr, o->id);
            if (!outside)
                continue;
            if (kf_ir_numel(o) == 1 && (t->op == KF_OP_MUL || t->op == KF_OP_DIV))
                return "scale";
            if (t->op == KF_OP_ADD && o->rank >= 1 && kf_ir_numel(o) == o->dims[o->rank - 1] &&
                kf_ir_numel(o) < kf_ir_numel(t))
                return "bias";
            if (t->op == KF_OP_ADD && kf_pl_same_shape(o, t))
                return "residual";
        }
    }
    if (kf_op_has(t->op, KF_TRAIT_SELECT))
        return "mask";
    return kf_op_get(t->op)->name;
}

static void make_name(lowerer *L) {
    kf_group *g = L->gr;
    const kf_graph *gr = L->p->g;
    char buf[sizeof g->name] = "";
    const kf_tensor *anchor = gr->nodes[g->anchor];
    switch (g->kind) {
    case KF_GROUP_GEMM:
        name_append(buf, sizeof buf, g->gemm.n_anchors == 2 ? "gated_gemm" : "gemm");
        break;
    case KF_GROUP_ATTENTION:
        name_append(buf, sizeof buf, "attention");
        if (g->attn.mask != KF_MASK_NONE)
            name_append(buf, sizeof buf, kf_mask_kind_name(g->attn.mask));
        break;
    case KF_GROUP_ROWWISE:
        name_append(buf, sizeof buf, "row");
        break;
    case KF_GROUP_COLREDUCE:
        name_append(buf, sizeof buf, "col");
        break;
    case KF_GROUP_VIEW:
        name_append(buf, sizeof buf, "view");
        break;
    case KF_GROUP_LAYOUT:
        name_append(buf, sizeof buf, "copy");
        break;
    default:
        name_append(buf, sizeof buf, "ew");
        break;
    }
    if (g->kind == KF_GROUP_GEMM && g->gemm.a_prologue)
        name_append(buf, sizeof buf, kf_op_get(gr->nodes[g->gemm.a[0]]->op)->name);
    for (uint32_t i = 0; i < g->n_computed && g->kind != KF_GROUP_ATTENTION; i++) {
        const kf_tensor *t = gr->nodes[g->computed[i]];
        if ((kf_pl_is_source(t) && t->id != g->anchor) || kf_op_has(t->op, KF_TRAIT_GEMM) ||
            kf_op_has(t->op, KF_TRAIT_LAYOUT) ||
            (g->kind == KF_GROUP_GEMM && g->gemm.a_prologue && t->id == g->gemm.a[0]))
            continue;
        name_append(buf, sizeof buf, op_tag(L, t));
    }
    if (g->kind == KF_GROUP_LAYOUT || g->kind == KF_GROUP_VIEW)
        name_append(buf, sizeof buf, kf_op_get(anchor->op)->name);
    char shape[64] = "";
    size_t n = 0;
    for (int d = 0; d < g->rank && n < sizeof shape; d++) {
        int w =
            snprintf(shape + n, sizeof shape - n, "%s%lld", d ? "x" : "", (long long)g->dims[d]);
        n += w > 0 ? (size_t)w : 0;
    }
    if (g->rank == 0)
        snprintf(shape, sizeof shape, "1");
    /* Names are capped at the field's size; a long one is cut, never overflowed. */
    int len = snprintf(g->name, sizeof g->name, "%s_%s_%s", buf, kf_dtype_name(g->dtype), shape);
    (void)(len >= (int)sizeof g->name);
}

/* ------------------------------------------------------------------------ */
/* One group                                                                  */
/* ------------------------------------------------------------------------ */

static void lower_group(lowerer *L) {
    kf_planner *p = L->p;
    kf_graph *gr = p->g;
    kf_group *g = L->gr;
    const kf_pgroup *pg = &p->groups[L->gi];
    g->kind = pg->kind;
    g->is_kernel = true;
    g->layout_copy_of = g->view_base = KF_NONE;
    g->gemm.a_root = KF_NONE;
    g->gemm.anchor[0] = g->gemm.anchor[1] = KF_NONE;
    g->attn.score = g->attn.mask_node = g->attn.out = KF_NONE;
    g->row.input = g->row.tensor = KF_NONE;
    g->sibling_of = pg->sib_of;
    g->siblings = pg->sib_of == KF_NONE ? 0 : pg->sib_count;
    g->sibling_part = pg->sib_part;
    g->sibling_parts = pg->sib_parts;
    g->sibling_bound = pg->sib_bound ? pg->sib_bound : "";

    /* The members (in id order), and the sink of an elementwise group. */
    const uint32_t *mem = L->mem + L->moff[L->gi];
    uint32_t n_mem = L->moff[L->gi + 1] - L->moff[L->gi];
    uint32_t last = n_mem ? mem[n_mem - 1] : KF_NONE;
    g->anchor = pg->anchor != KF_NONE ? pg->anchor : last;
    kf_tensor *anchor = gr->nodes[g->anchor];
    g->dtype = anchor->dtype;

    if (pg->kind == KF_GROUP_VIEW) {
        lower_view(L, anchor);
    } else {
        kf_tensor *space = anchor;
        if (pg->kind == KF_GROUP_ATTENTION)
            space = gr->nodes[pg->qk];
        if (pg->kind == KF_GROUP_GEMM && pg->head_view != KF_NONE) {
            /* the epilogue runs over the product's head view */
            space = gr->nodes[pg->head_view];
            g->gemm.head_dim = space->dims[space->rank - 1];
            g->gemm.heads_first = space->op == KF_OP_PERMUTE;
        }
        set_space(&g->rank, g->dims, space);
        if ((pg->kind == KF_GROUP_ROWWISE || pg->kind == KF_GROUP_COLREDUCE) &&
            kf_op_has(anchor->op, KF_TRAIT_REDUCTION))
            set_space(&g->row_rank, g->row_dims, anchor->src[0]);
        if (pg->kind == KF_GROUP_GEMM && pg->prologue != KF_NONE)
            set_space(&g->row_rank, g->row_dims, gr->nodes[pg->prologue]);

        if (pg->kind == KF_GROUP_GEMM) {
            kf_gemm_info *gm = &g->gemm;
            gm->n_anchors = pg->anchor2 != KF_NONE ? 2 : 1;
            gm->anchor[0] = pg->anchor;
            gm->anchor[1] = pg->anchor2;
            gm->a_prologue = pg->prologue != KF_NONE;
            gm->row_epilogue = pg->row_op != KF_NONE;
            gm->row_split = gm->row_epilogue && pg->row_split;
            for (int i = 0; i < gm->n_anchors; i++) {
                kf_tensor *mm = gr->nodes[gm->anchor[i]];
                set_computed(L, mm->id);
                gm->a[i] = mm->src[0]->id;
                gm->b[i] = mm->src[1]->id;
                gm->transpose_a[i] = mm->attr.transpose_a;
                gm->transpose_b[i] = mm->attr.transpose_b;
                if (!gm->a_prologue)
                    push_id(L, &g->reads, &g->n_reads, &g->cap_reads, gm->a[i]);
                push_id(L, &g->reads, &g->n_reads, &g->cap_reads, gm->b[i]);
            }
            kf_tensor *mm = gr->nodes[gm->anchor[0]];
            const kf_tensor *a = mm->src[0];
            gm->m = mm->dims[mm->rank - 2];
            gm->n = mm->dims[mm->rank - 1];
            gm->k = mm->attr.transpose_a ? a->dims[a->rank - 2] : a->dims[a->rank - 1];
            gm->batch = 1;
            for (int d = 0; d < mm->rank - 2; d++)
                gm->batch *= mm->dims[d];
            if (gm->a_prologue) {
                /* The row stage belongs to the prologue: lower it first. */
                gm->a_root = lower(L, gr->nodes[pg->prologue], KF_SPACE_ROW);
            }
        }
        if (pg->kind == KF_GROUP_ATTENTION) {
            kf_attn_info *at = &g->attn;
            kf_tensor *qk = gr->nodes[pg->qk], *pv = gr->nodes[pg->anchor];
            at->qk = qk->id;
            at->softmax = pg->softmax;
            at->lse = pg->lse;
            at->pv = pv->id;
            at->q = qk->src[0]->id;
            at->k = qk->src[1]->id;
            at->v = pv->src[1]->id;
            at->q_transposed = qk->attr.transpose_a;
            at->k_transposed = qk->attr.transpose_b;
            at->v_transposed = pv->attr.transpose_b;
            int r = qk->rank;
            at->sq = qk->dims[r - 2];
            at->skv = qk->dims[r - 1];
            at->heads = r >= 3 ? qk->dims[r - 3] : 1;
            at->batch = 1;
            for (int d = 0; d < r - 3; d++)
                at->batch *= qk->dims[d];
            const kf_tensor *q = qk->src[0];
            at->d = qk->attr.transpose_a ? q->dims[q->rank - 2] : q->dims[q->rank - 1];
            at->dv = pv->dims[pv->rank - 1];
            /* The output: pv, or the permute of pv the group absorbed, which
             * stores pv's axes at that permute's row-major strides. */
            at->out = pv->id;
            contiguous_strides(pv->rank, pv->dims, at->o_strides);
            for (uint32_t t = pv->id + 1; t < p->n; t++) {
                const kf_tensor *x = gr->nodes[t];
                if (p->gid[t] == L->gi && x->op == KF_OP_PERMUTE && x->src[0] == pv) {
                    int64_t cs[KF_MAX_RANK];
                    contiguous_strides(x->rank, x->dims, cs);
                    for (int d = 0; d < x->rank; d++)
                        at->o_strides[x->attr.perm[d]] = cs[d];
                    at->out = t;
                }
            }
            push_id(L, &g->reads, &g->n_reads, &g->cap_reads, at->q);
            push_id(L, &g->reads, &g->n_reads, &g->cap_reads, at->k);
            push_id(L, &g->reads, &g->n_reads, &g->cap_reads, at->v);
            set_computed(L, qk->id);
            set_computed(L, pv->id);
            set_computed(L, pg->softmax);
            at->score = lower(L, gr->nodes[pg->softmax]->src[0], KF_SPACE_OUT);
        }
        /* Writes and their roots. */
        for (uint32_t i = 0; i < n_mem && L->st == KF_OK; i++) {
            uint32_t t = mem[i];
            if (!written(L, gr->nodes[t]))
                continue;
            uint32_t root = KF_NONE;
            if (pg->kind != KF_GROUP_ATTENTION)
                root = lower(L, gr->nodes[t], KF_SPACE_OUT);
            add_write(L, t, root);
        }
        /* Members not reached from a write (a GEMM output consumed only by
         * its row epilogue, say) still count as computed. */
        bool remaps = false;
        for (uint32_t i = 0; i < n_mem; i++) {
            set_computed(L, mem[i]);
            remaps = remaps || kf_op_has(gr->nodes[mem[i]]->op, KF_TRAIT_REMAP);
        }
        /* A slice or concat may read only part of its operands' members (a
         * concat whose consumer's range lies in one source): the others are
         * still computed, from operands the group then reads, as the contract
         * at the top of fusion.h says. */
        for (uint32_t i = 0; remaps && i < n_mem && L->st == KF_OK; i++) {
            const kf_tensor *x = gr->nodes[mem[i]];
            for (int k = 0; k < x->nsrc; k++) {
                const kf_tensor *s = x->src[k];
                if (p->gid[s->id] != L->gi && !is_inline_source(L, s))
                    push_id(L, &g->reads, &g->n_reads, &g->cap_reads, s->id);
                else if (is_inline_source(L, s))
                    set_computed(L, s->id);
            }
        }
        if (pg->kind == KF_GROUP_ATTENTION && L->st == KF_OK)
            L->st = kf_attn_classify_mask(L->plan, g);
    }
    /* computed, in id order; reset the marks. */
    qsort(L->clist, L->n_clist, sizeof *L->clist, cmp_u32);
    for (uint32_t i = 0; i < L->n_clist; i++)
        L->computed[L->clist[i]] = false;
    for (uint32_t i = 0; i < L->n_clist && L->st == KF_OK; i++) {
        uint32_t t = L->clist[i];
        if (!kf_mem_grow(p->mem, (void **)&g->computed, &g->cap_computed, g->n_computed + 1,
                         sizeof *g->computed)) {
            L->st = KF_ERR_OUT_OF_MEMORY;
            break;
        }
        g->computed[g->n_computed++] = t;
    }
}

/* ------------------------------------------------------------------------ */
/* The plan                                                                   */
/* ------------------------------------------------------------------------ */

/* Group dependencies: for every member (and recomputed prologue) of G, every
 * operand computed in another group H gives H -> G. Written to out (distinct;
 * `seen` is all false before and after). */
static uint32_t deps_of(const lowerer *L, uint32_t gi, uint32_t *out, bool *seen) {
    const kf_planner *p = L->p;
    uint32_t n = 0;
    const kf_pgroup *pg = &p->groups[gi];
    bool pro = pg->kind == KF_GROUP_GEMM && pg->prologue != KF_NONE;
    uint32_t n_mem = L->moff[gi + 1] - L->moff[gi];
    for (uint32_t i = 0; i < n_mem + pro; i++) {
        uint32_t t = i < n_mem ? L->mem[L->moff[gi] + i] : pg->prologue;
        const kf_tensor *x = p->g->nodes[t];
        for (int k = 0; k < x->nsrc; k++) {
            uint32_t s = x->src[k]->id;
            uint32_t h = p->gid[s];
            if (h == KF_NONE || h == gi || seen[h])
                continue;
            if (pro && pg->prologue == s)
                continue;
            seen[h] = true;
            out[n++] = h;
        }
    }
    for (uint32_t i = 0; i < n; i++)
        seen[out[i]] = false;
    return n;
}

/* A binary min-heap of ready groups keyed by their first member. */
static void heap_push(uint32_t *h, uint32_t *n, const uint32_t *key, uint32_t g) {
    uint32_t i = (*n)++;
    while (i > 0 && key[h[(i - 1) / 2]] > key[g]) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = g;
}

static uint32_t heap_pop(uint32_t *h, uint32_t *n, const uint32_t *key) {
    uint32_t top = h[0], last = h[--*n], i = 0;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && key[h[c + 1]] < key[h[c]])
            c++;
        if (key[h[c]] >= key[last])
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

kf_status kf_pl_lower(kf_planner *p, kf_plan *plan) {
    kf_graph *gr = p->g;
    const kf_mem *m = p->mem;
    uint32_t ng = p->n_groups, n = p->n;
    lowerer L;
    memset(&L, 0, sizeof L);
    L.p = p;
    L.plan = plan;
    L.memo[0] = kf_mem_alloc(m, n * sizeof(uint32_t));
    L.memo[1] = kf_mem_alloc(m, n * sizeof(uint32_t));
    L.touched = kf_mem_alloc(m, 2 * n * sizeof(uint32_t));
    L.computed = kf_mem_calloc(m, n, sizeof(bool));
    L.view_base = kf_mem_alloc(m, n * sizeof(uint32_t));
    L.view_strides = kf_mem_calloc(m, n, sizeof *L.view_strides);
    L.view_contig = kf_mem_calloc(m, n, sizeof(bool));
    L.view_offset = kf_mem_calloc(m, n, sizeof(int64_t));
    uint32_t *order = kf_mem_alloc(m, (ng + 1) * sizeof(uint32_t));
    uint32_t *plan_id = kf_mem_alloc(m, (ng + 1) * sizeof(uint32_t));
    uint32_t *deps = kf_mem_alloc(m, (n + 1) * sizeof(uint32_t));
    bool *seen = kf_mem_calloc(m, ng + 1, sizeof(bool));
    bool *done = kf_mem_calloc(m, ng + 1, sizeof(bool));
    uint32_t *first = kf_mem_alloc(m, (ng + 1) * sizeof(uint32_t));
    L.clist = kf_mem_alloc(m, (n + 1) * sizeof(uint32_t));
    L.moff = kf_mem_calloc(m, ng + 2, sizeof(uint32_t));
    L.mem = kf_mem_alloc(m, (n + 1) * sizeof(uint32_t));
    /* The group graph for Kahn's algorithm: successors in CSR form. */
    uint32_t *soff = kf_mem_calloc(m, ng + 2, sizeof(uint32_t));
    uint32_t *indeg = kf_mem_calloc(m, ng + 1, sizeof(uint32_t));
    uint32_t *heap = kf_mem_alloc(m, (ng + 1) * sizeof(uint32_t));
    uint32_t *rep = kf_mem_alloc(m, (ng + 1) * sizeof(uint32_t));
    uint32_t *succ = NULL, n_succ = 0;
    plan->group_of = kf_mem_alloc(m, n * sizeof(uint32_t));
    kf_status st = KF_OK;
    if (!L.memo[0] || !L.memo[1] || !L.touched || !L.computed || !L.view_base || !L.view_strides ||
        !L.view_contig || !L.view_offset || !order || !plan_id || !deps || !seen || !done ||
        !first || !plan->group_of || !L.clist || !L.moff || !L.mem || !soff || !indeg || !heap ||
        !rep)
        st = KF_ERR_OUT_OF_MEMORY;
    if (st == KF_OK) {
        /* Members of every group in id order: a counting sort by group. */
        for (uint32_t t = 0; t < n; t++)
            if (p->gid[t] != KF_NONE)
                L.moff[p->gid[t] + 1]++;
        for (uint32_t gi = 0; gi < ng; gi++)
            L.moff[gi + 1] += L.moff[gi];
        for (uint32_t t = 0; t < n; t++)
            if (p->gid[t] != KF_NONE)
                L.mem[L.moff[p->gid[t]]++] = t;
        for (uint32_t gi = ng; gi > 0; gi--)
            L.moff[gi] = L.moff[gi - 1];
        L.moff[0] = 0;
    }

    uint32_t n_order = 0;
    if (st == KF_OK) {
        for (uint32_t i = 0; i < n; i++) {
            L.memo[0][i] = L.memo[1][i] = KF_NONE;
            L.view_base[i] = KF_NONE;
            plan->group_of[i] = KF_NONE;
        }
        for (uint32_t gi = 0; gi < ng; gi++) {
            first[gi] = KF_NONE;
            plan_id[gi] = KF_NONE;
        }
        for (uint32_t t = n; t-- > 0;) {
            if (p->gid[t] != KF_NONE)
                first[p->gid[t]] = t;
        }
        /* A GEMM sibling set (fuse_gemm_siblings) is one node of the order,
         * represented by its founding group and keyed by its members' first
         * tensor: when it is ready, its members follow one another. */
        for (uint32_t gi = 0; gi < ng; gi++)
            rep[gi] = gi;
        for (uint32_t gi = 0; gi < ng; gi++) {
            uint32_t r = p->groups[gi].gsib_set;
            if (r == KF_NONE || !p->groups[gi].alive || first[gi] == KF_NONE)
                continue;
            rep[gi] = r;
            if (first[gi] < first[r])
                first[r] = first[gi];
        }
        /* Kahn's algorithm; among ready groups the one whose first member
         * comes first, so plans are deterministic and read in graph order.
         * Each group's dependencies are found once (a sweep of its members):
         * linear in the graph. */
        uint32_t live = 0;
        for (uint32_t gi = 0; gi < ng; gi++)
            live += p->groups[gi].alive && first[gi] != KF_NONE;
        for (int pass = 0; pass < 2 && st == KF_OK; pass++) {
            /* pass 0 counts each group's successors, pass 1 fills them. */
            for (uint32_t gi = 0; gi < ng; gi++) {
                if (!p->groups[gi].alive || first[gi] == KF_NONE)
                    continue;
                uint32_t nd = deps_of(&L, gi, deps, seen);
                for (uint32_t k = 0; k < nd; k++) {
                    if (!p->groups[deps[k]].alive || first[deps[k]] == KF_NONE ||
                        rep[deps[k]] == rep[gi])
                        continue;
                    if (pass == 0) {
                        soff[rep[deps[k]] + 1]++;
                        indeg[rep[gi]]++;
                    } else {
                        succ[soff[rep[deps[k]]]++] = rep[gi];
                    }
                }
            }
            if (pass == 0) {
                for (uint32_t gi = 0; gi < ng; gi++)
                    soff[gi + 1] += soff[gi];
                n_succ = soff[ng];
                succ = kf_mem_alloc(m, (n_succ + 1) * sizeof(uint32_t));
                if (!succ)
                    st = KF_ERR_OUT_OF_MEMORY;
            } else {
                for (uint32_t gi = ng; gi > 0; gi--)
                    soff[gi] = soff[gi - 1];
                soff[0] = 0;
            }
        }
        uint32_t n_heap = 0;
        for (uint32_t gi = 0; gi < ng && st == KF_OK; gi++)
            if (p->groups[gi].alive && first[gi] != KF_NONE && indeg[gi] == 0 && rep[gi] == gi)
                heap_push(heap, &n_heap, first, gi);
        while (st == KF_OK && n_order < live) {
            if (KF_NEVER(n_heap == 0)) {
                st = KF_ERR_INTERNAL; /* a cycle: [I3] was broken */
                kf_ir_note(gr, st, "plan: the kernel groups form a cycle (a kfuse bug)");
                break;
            }
            uint32_t best = heap_pop(heap, &n_heap, first);
            done[best] = true;
            plan_id[best] = n_order;
            order[n_order++] = best;
            if (p->groups[best].gsib_set == best) /* the other members, in group order */
                for (uint32_t gi = 0; gi < ng && n_order < live; gi++)
                    if (gi != best && rep[gi] == best && p->groups[gi].alive &&
                        first[gi] != KF_NONE) {
                        done[gi] = true;
                        plan_id[gi] = n_order;
                        order[n_order++] = gi;
                    }
            for (uint32_t k = soff[best]; k < soff[best + 1]; k++)
                if (--indeg[succ[k]] == 0)
                    heap_push(heap, &n_heap, first, succ[k]);
        }
    }
    if (st == KF_OK) {
        plan->groups = kf_mem_calloc(m, n_order ? n_order : 1, sizeof *plan->groups);
        if (!plan->groups)
            st = KF_ERR_OUT_OF_MEMORY;
        else
            plan->cap_groups = n_order ? n_order : 1;
    }
    for (uint32_t i = 0; i < n_order && st == KF_OK; i++) {
        kf_group *g = &plan->groups[i];
        plan->n_groups = i + 1;
        g->id = i;
        L.gr = g;
        L.gi = order[i];
        L.st = KF_OK;
        L.n_touched = 0;
        L.n_xmemo = 0;
        L.n_clist = 0;
        lower_group(&L);
        for (uint32_t k = 0; k < L.n_touched; k++)
            L.memo[L.touched[k] >> 31][L.touched[k] & 0x7fffffffu] = KF_NONE;
        st = L.st;
        if (st == KF_OK)
            make_name(&L);
        for (uint32_t k = 0; k < g->n_computed; k++) {
            if (plan->group_of[g->computed[k]] == KF_NONE)
                plan->group_of[g->computed[k]] = i;
        }
    }
    /* GEMM sibling sets: each member names the set's first plan id, its
     * place and the member count; every GEMM group its reason to keep apart. */
    for (uint32_t i = 0; i < n_order && st == KF_OK; i++) {
        kf_gemm_info *gm = &plan->groups[i].gemm;
        const kf_pgroup *pg = &p->groups[order[i]];
        gm->sib_first = KF_NONE;
        snprintf(gm->sib_apart, sizeof gm->sib_apart, "%s", pg->gsib_apart);
        if (pg->gsib_set == KF_NONE || plan->groups[i].kind != KF_GROUP_GEMM)
            continue;
        bool cont = i > 0 && p->groups[order[i - 1]].gsib_set == pg->gsib_set;
        gm->sib_first = cont ? plan->groups[i - 1].gemm.sib_first : i;
        gm->sib_index = i - gm->sib_first;
        for (uint32_t j = gm->sib_first; j <= i; j++)
            plan->groups[j].gemm.sib_count = gm->sib_index + 1;
    }
    /* Edges between groups, each with its reason [I7]. */
    for (uint32_t c = 0; c < n && st == KF_OK; c++) {
        const kf_tensor *ct = gr->nodes[c];
        uint32_t gc = p->gid[c];
        if (!p->need[c] || gc == KF_NONE)
            continue;
        const kf_pgroup *cg = &p->groups[gc];
        for (int k = 0; k < ct->nsrc; k++) {
            const kf_tensor *s = ct->src[k];
            uint32_t gs = p->gid[s->id];
            if (gs == KF_NONE || gs == gc)
                continue;
            if (cg->kind == KF_GROUP_GEMM && cg->prologue == s->id)
                continue;
            /* The other end of a recomputed prologue: the norm's operands. */
            if (!kf_mem_grow(m, (void **)&plan->edges, &plan->cap_edges, plan->n_edges + 1,
                             sizeof *plan->edges)) {
                st = KF_ERR_OUT_OF_MEMORY;
                break;
            }
            kf_plan_edge *e = &plan->edges[plan->n_edges++];
            memset(e, 0, sizeof *e);
            e->producer = s->id;
            e->consumer = c;
            e->slot = k;
            e->from_group = plan_id[gs];
            e->to_group = plan_id[gc];
            kf_reason r = p->reason[c * 3u + (uint32_t)k];
            snprintf(e->detail, sizeof e->detail, "%s", p->detail[c * 3u + (uint32_t)k]);
            if (r == KF_REASON_NONE) {
                if (p->groups[gs].kind == KF_GROUP_VIEW || cg->kind == KF_GROUP_VIEW)
                    r = KF_REASON_LAYOUT_CHANGE;
                else if (p->is_output[s->id])
                    r = KF_REASON_GRAPH_OUTPUT;
                else if (kf_pl_uses(p, s) > 1)
                    r = KF_REASON_MULTIPLE_CONSUMERS;
                else
                    r = KF_REASON_ANCHOR_BOUNDARY;
                /* An anchor's elementwise consumer is left out only when the
                 * pass that takes such consumers is switched off. */
                unsigned off = p->opt->disabled;
                kf_group_kind pk = p->groups[gs].kind;
                if (r == KF_REASON_ANCHOR_BOUNDARY && kf_pl_is_elementwise(ct) &&
                    ((pk == KF_GROUP_GEMM && (off & (1u << KF_PASS_GEMM_EPILOGUE))) ||
                     ((pk == KF_GROUP_ROWWISE || pk == KF_GROUP_COLREDUCE) &&
                      (off & (1u << KF_PASS_ROWWISE))))) {
                    r = KF_REASON_PASS_DISABLED;
                    snprintf(e->detail, sizeof e->detail, "%s is off",
                             kf_pass_name(pk == KF_GROUP_GEMM ? KF_PASS_GEMM_EPILOGUE
                                                              : KF_PASS_ROWWISE));
                }
            }
            if (r == KF_REASON_ANCHOR_BOUNDARY && !e->detail[0] &&
                (kf_op_has(ct->op, KF_TRAIT_GEMM) || kf_op_has(ct->op, KF_TRAIT_SOFTMAX)))
                snprintf(e->detail, sizeof e->detail, "%s loads it tile by tile from memory",
                         cg->kind == KF_GROUP_ATTENTION ? "the attention kernel" : "the GEMM");
            e->reason = r;
        }
    }
    kf_mem_free(m, L.memo[0], n * sizeof(uint32_t));
    kf_mem_free(m, L.memo[1], n * sizeof(uint32_t));
    kf_mem_free(m, L.touched, 2 * n * sizeof(uint32_t));
    kf_mem_free(m, L.computed, n * sizeof(bool));
    kf_mem_free(m, L.view_base, n * sizeof(uint32_t));
    kf_mem_free(m, L.view_strides, n * sizeof *L.view_strides);
    kf_mem_free(m, L.view_contig, n * sizeof(bool));
    kf_mem_free(m, L.view_offset, n * sizeof(int64_t));
    kf_mem_free(m, L.xmemo, L.cap_xmemo * sizeof *L.xmemo);
    kf_mem_free(m, order, (ng + 1) * sizeof(uint32_t));
    kf_mem_free(m, plan_id, (ng + 1) * sizeof(uint32_t));
    kf_mem_free(m, deps, (n + 1) * sizeof(uint32_t));
    kf_mem_free(m, seen, (ng + 1) * sizeof(bool));
    kf_mem_free(m, done, (ng + 1) * sizeof(bool));
    kf_mem_free(m, first, (ng + 1) * sizeof(uint32_t));
    kf_mem_free(m, L.clist, (n + 1) * sizeof(uint32_t));
    kf_mem_free(m, L.moff, (ng + 2) * sizeof(uint32_t));
    kf_mem_free(m, L.mem, (n + 1) * sizeof(uint32_t));
    kf_mem_free(m, soff, (ng + 2) * sizeof(uint32_t));
    kf_mem_free(m, indeg, (ng + 1) * sizeof(uint32_t));
    kf_mem_free(m, heap, (ng + 1) * sizeof(uint32_t));
    kf_mem_free(m, rep, (ng + 1) * sizeof(uint32_t));
    kf_mem_free(m, succ, (n_succ + 1) * sizeof(uint32_t));
    return st;
}
