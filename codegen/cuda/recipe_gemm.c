/*
 * recipe_gemm.c -- the recipes of GEMM groups and of the unfused attention
 * fallback (the fused attention kernels' step: recipe_attention.c): which
 * part of a GEMM group cuBLASLt applies itself, and which generated kernels
 * run around it.
 *
 *   GEMM       [prologue kernel: A's norm into a scratch]
 *              cuBLASLt: act(A.B (+ C) (+ bias)) when the group's epilogue
 *                starts with exactly that (match_epilogue), into the write
 *                or into an ACC scratch
 *              [epilogue kernel: the rest, from ACC]
 *   ATTENTION  a group the fused kernel takes (kf_cuda_attention_supported):
 *              that one kernel, unless KF_CUDA_RECIPE_UNFUSED_ATTENTION;
 *              else cuBLASLt Q.K^T into a SCORES scratch, a row-wise softmax
 *              kernel carrying the score expression and mask, cuBLASLt P.V,
 *              and the report says why
 *
 * A batched GEMM whose operands have a uniform batch stride is one cuBLASLt
 * call (folded into M when B is shared and A's rows run on through the
 * batch); otherwise one call per batch, each at its operands' offsets.
 */
#include <stdio.h>
#include <string.h>

#include "codegen/cuda/recipe_internal.h"

/* ------------------------------------------------------------------------ */
/* Operands                                                                   */
/* ------------------------------------------------------------------------ */

/* A matrix operand: a buffer and the element strides of each dim of the
 * tensor it stands for. */
typedef struct mref {
    kf_cuda_buf buf;
    int rank;
    int64_t dims[KF_MAX_RANK], strides[KF_MAX_RANK];
} mref;

static void contiguous(int rank, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        strides[d] = s;
        s *= dims[d];
    }
}

/* The operand reference of tensor t as the plan lays it out. */
static mref mref_of(const rb *b, uint32_t t) {
    const kf_tensor *x = b->plan->graph->nodes[t];
    mref r;
    memset(&r, 0, sizeof r);
    r.rank = x->rank;
    memcpy(r.dims, x->dims, sizeof r.dims);
    uint32_t g = b->plan->group_of[t];
    int64_t off = 0;
    if (g != KF_NONE && b->plan->groups[g].kind == KF_GROUP_VIEW) {
        memcpy(r.strides, b->plan->groups[g].view_strides, sizeof r.strides);
        off = b->plan->groups[g].view_offset; /* a sliced view's start */
    } else {
        contiguous(x->rank, x->dims, r.strides);
    }
    r.buf = kf_rb_tensor(b, t);
    r.buf.offset += off * (int64_t)kf_dtype_size(x->dtype);
    return r;
}

/* A contiguous operand of tensor t's shape in buffer `buf`. */
static mref mref_contiguous(const rb *b, uint32_t t, kf_cuda_buf buf) {
    const kf_tensor *x = b->plan->graph->nodes[t];
    mref r;
    memset(&r, 0, sizeof r);
    r.buf = buf;
    r.rank = x->rank;
    memcpy(r.dims, x->dims, sizeof r.dims);
    contiguous(x->rank, x->dims, r.strides);
    return r;
}

/* A uniform stride for the flattened batch of `op` broadcast into the output
 * batch dims (rank nb, dims bd): false when there is none. */
static bool batch_stride(const mref *op, int nb, const int64_t *bd, int64_t *stride) {
    int ob = op->rank - 2; /* operand batch dims, right-aligned */
    int64_t s[KF_MAX_RANK];
    for (int i = 0; i < nb; i++) {
        int j = i - (nb - ob);
        s[i] = (j >= 0 && op->dims[j] != 1) ? op->strides[j] : 0;
    }
    /* Uniform: the flattened index b maps to b * s_inner; a size-1 dim does not count. */
    int64_t inner = 0, span = 1;
    bool have = false;
    for (int i = nb - 1; i >= 0; i--) {
        if (bd[i] == 1)
            continue;
        if (!have) {
            inner = s[i];
            have = true;
        } else if (s[i] != inner * span) {
            return false;
        }
        span *= bd[i];
    }
    *stride = have ? inner : 0;
    return true;
}

/* Element offset of output batch `b` (flattened) in `op`. */
static int64_t batch_offset(const mref *op, int nb, const int64_t *bd, int64_t b) {
    int ob = op->rank - 2;
    int64_t off = 0;
    for (int i = nb - 1; i >= 0; i--) {
        int64_t idx = b % bd[i];
        b /= bd[i];
        int j = i - (nb - ob);
        if (j >= 0 && op->dims[j] != 1)
            off += idx * op->strides[j];
    }
    return off;
}

static void logical(const mref *op, bool transpose, kf_cuda_operand *o) {
    int r = op->rank;
    o->buf = op->buf;
    o->row_stride = transpose ? op->strides[r - 1] : op->strides[r - 2];
    o->col_stride = transpose ? op->strides[r - 2] : op->strides[r - 1];
    /* A dim of size 1 has no meaningful stride: make it the unit one. */
    int64_t rows = transpose ? op->dims[r - 1] : op->dims[r - 2];
    int64_t cols = transpose ? op->dims[r - 2] : op->dims[r - 1];
    if (cols == 1 && o->row_stride != 1) {
        o->col_stride = rows;
        o->row_stride = 1;
        if (rows == 1)
            o->col_stride = 1;
    }
    if (rows == 1 && o->col_stride != 1) {
        o->row_stride = cols;
        o->col_stride = 1;
    }
    o->batch_stride = 0;
}

/* Whether the library can read `op` as a [rows, cols] matrix: one unit
 * stride, the other at least the extent along it. */
static bool operand_ok(const kf_cuda_operand *op, int64_t rows, int64_t cols) {
    if (op->col_stride == 1 && (rows == 1 || op->row_stride >= cols))
        return true;
    return op->row_stride == 1 && (cols == 1 || op->col_stride >= rows);
}

typedef struct gemm_req {
    const kf_tensor *mm;      /* the matmul */
    mref a, b;                /* its operands */
    kf_cuda_buf d;            /* output of mm's shape: contiguous, or at d_strides */
    const int64_t *d_strides; /* NULL, or D's element strides per axis of mm (last 1):
                                 an attention output stored permuted */
    kf_cuda_buf c;            /* residual (contiguous, mm's shape) or NONE */
    kf_cuda_buf bias;         /* bias (n elements) or NONE */
    kf_cuda_lt_epilogue epi;
} gemm_req;

static kf_cuda_buf at_offset(kf_cuda_buf b, int64_t elems, size_t es) {
    if (b.kind != KF_CUDA_BUF_NONE)
        b.offset += elems * (int64_t)es;
    return b;
}

/* Appends the library call(s) of one matmul. */
static kf_status add_gemm(rb *b, const gemm_req *r) {
    const kf_tensor *mm = r->mm;
    const kf_group *grp = &b->plan->groups[b->gi];
    int rank = mm->rank, nb = rank - 2;
    kf_cuda_gstep g;
    memset(&g, 0, sizeof g);
    g.dtype = mm->dtype;
    g.m = mm->dims[rank - 2];
    g.n = mm->dims[rank - 1];
    g.k = mm->attr.transpose_a ? r->a.dims[r->a.rank - 2] : r->a.dims[r->a.rank - 1];
    g.batch = 1;
    for (int i = 0; i < nb; i++)
        g.batch *= mm->dims[i];
    logical(&r->a, mm->attr.transpose_a, &g.a);
    logical(&r->b, mm->attr.transpose_b, &g.b);
    g.d.buf = r->d;
    g.d.row_stride = g.n;
    g.d.col_stride = 1;
    g.d.batch_stride = g.m * g.n;
    g.c = g.d;
    g.c.buf = r->c;
    g.beta = r->c.kind != KF_CUDA_BUF_NONE ? 1.0 : 0.0;
    g.epilogue = r->epi;
    g.bias = r->bias;
    mref dm; /* D as an operand-like reference, for its batch strides */
    memset(&dm, 0, sizeof dm);
    dm.rank = rank;
    memcpy(dm.dims, mm->dims, sizeof dm.dims);
    if (r->d_strides) {
        memcpy(dm.strides, r->d_strides, sizeof(int64_t) * (size_t)rank);
        g.d.row_stride = g.c.row_stride = g.m == 1 ? g.n : r->d_strides[rank - 2];
    } else {
        contiguous(rank, mm->dims, dm.strides);
    }
    if (!operand_ok(&g.a, g.m, g.k) || !operand_ok(&g.b, g.k, g.n) ||
        (r->d_strides && (r->d_strides[rank - 1] != 1 || g.d.row_stride < g.n)))
        return kf_msg_set(b->err, KF_ERR_UNSUPPORTED,
                          "GEMM '%s': an operand is a view with no unit stride in its last two "
                          "dims; cuBLASLt cannot read it (a copy kernel for this case is not "
                          "written yet)",
                          grp->name);
    int64_t sa, sb, sd = g.m * g.n;
    bool uniform = batch_stride(&r->a, nb, mm->dims, &sa) && batch_stride(&r->b, nb, mm->dims, &sb);
    /* A strided D takes one call for the batch only where its matrices do
     * not interleave (a permuted attention output's heads do: one call each). */
    if (r->d_strides && uniform && g.batch > 1)
        uniform = batch_stride(&dm, nb, mm->dims, &sd) && sd >= g.m * g.d.row_stride;
    int64_t calls = uniform ? 1 : g.batch;
    if (uniform) {
        g.a.batch_stride = sa;
        g.b.batch_stride = sb;
        g.d.batch_stride = g.c.batch_stride = sd;
        /* Fold the batch into M when B is shared and A's rows run on through
         * the batch (x[B, S, D] . w[D, N]): one larger GEMM. */
        if (g.batch > 1 && sb == 0 && g.a.col_stride == 1 && sa == g.m * g.a.row_stride &&
            !r->d_strides) {
            g.m *= g.batch;
            g.batch = 1;
            g.d.batch_stride = g.c.batch_stride = 0;
        }
    } else {
        g.batch = 1;
    }
    size_t es = kf_dtype_size(g.dtype);
    for (int64_t i = 0; i < calls; i++) {
        kf_cuda_step *s = NULL;
        if (kf_cuda_recipe_add_step(b->rc, b->mem, KF_CUDA_STEP_GEMM, &s) != KF_OK)
            return kf_msg_set(b->err, KF_ERR_OUT_OF_MEMORY,
                              "out of memory for the steps of "
                              "group %u",
                              b->gi);
        s->gemm = g;
        if (!uniform) {
            s->gemm.a.buf = at_offset(g.a.buf, batch_offset(&r->a, nb, mm->dims, i), es);
            s->gemm.b.buf = at_offset(g.b.buf, batch_offset(&r->b, nb, mm->dims, i), es);
            s->gemm.d.buf = at_offset(g.d.buf, batch_offset(&dm, nb, mm->dims, i), es);
            s->gemm.c.buf = at_offset(g.c.buf, i * g.m * g.n, es);
        }
    }
    return KF_OK;
}

/* ------------------------------------------------------------------------ */
/* Which GEMM epilogues cuBLASLt applies exactly                              */
/* ------------------------------------------------------------------------ */

typedef struct epi_match {
    uint32_t top; /* the highest node cuBLASLt computes (the ACC node if none) */
    kf_cuda_lt_epilogue epi;
    uint32_t bias;     /* LOAD node of the bias, or KF_NONE */
    uint32_t residual; /* LOAD node of C, or KF_NONE */
    char why[160];     /* why it stops where it does */
} epi_match;

static kf_cuda_lt_epilogue with_bias(kf_cuda_lt_epilogue e) {
    switch (e) {
    case KF_CUDA_LT_EPI_NONE:
        return KF_CUDA_LT_EPI_BIAS;
    case KF_CUDA_LT_EPI_RELU:
        return KF_CUDA_LT_EPI_RELU_BIAS;
    case KF_CUDA_LT_EPI_GELU:
        return KF_CUDA_LT_EPI_GELU_BIAS;
    default:
        return e;
    }
}

/* Uses of each node among the nodes the writes reach. */
static void count_uses(const kf_group *grp, uint32_t *uses, bool *live) {
    memset(uses, 0, grp->n_expr * sizeof *uses);
    memset(live, 0, grp->n_expr * sizeof *live);
    for (uint32_t i = 0; i < grp->n_writes; i++)
        if (grp->roots && grp->roots[i] != KF_NONE && grp->roots[i] < grp->n_expr)
            live[grp->roots[i]] = true;
    for (uint32_t k = grp->n_expr; k-- > 0;) {
        if (!live[k])
            continue;
        const kf_expr *e = &grp->expr[k];
        if (e->kind != KF_EXPR_OP)
            continue;
        int arity = kf_form_arity(kf_op_get(e->op)->form);
        for (int j = 0; j < arity && j < 3; j++)
            if (e->src[j] != KF_NONE && e->src[j] < k) {
                live[e->src[j]] = true;
                uses[e->src[j]]++;
            }
    }
}

static bool is_root(const kf_group *grp, uint32_t k) {
    for (uint32_t i = 0; i < grp->n_writes; i++)
        if (grp->roots && grp->roots[i] == k)
            return true;
    return false;
}

/* A LOAD in the GEMM's output space that is a row vector: stride 1 on the last
 * axis, 0 elsewhere. */
static bool is_bias_load(const kf_group *grp, const kf_expr *e, const kf_graph *g) {
    if (e->kind != KF_EXPR_LOAD || e->space != KF_SPACE_OUT || e->dtype != grp->dtype)
        return false;
    if (g->nodes[e->base]->dtype != grp->dtype)
        return false;
    for (int d = 0; d < grp->rank - 1; d++)
        if (e->strides[d] != 0 && grp->dims[d] != 1)
            return false;
    return grp->rank >= 1 && (e->strides[grp->rank - 1] == 1 || grp->dims[grp->rank - 1] == 1);
}

/* A LOAD of a whole contiguous matrix of the output's shape. */
static bool is_residual_load(const kf_group *grp, const kf_expr *e, const kf_graph *g) {
    if (e->kind != KF_EXPR_LOAD || e->space != KF_SPACE_OUT || e->dtype != grp->dtype)
        return false;
    if (g->nodes[e->base]->dtype != grp->dtype)
        return false;
    int64_t s[KF_MAX_RANK];
    contiguous(grp->rank, grp->dims, s);
    for (int d = 0; d < grp->rank; d++)
        if (e->strides[d] != s[d] && grp->dims[d] != 1)
            return false;
    return kf_ir_numel(g->nodes[e->base]) == s[0] * grp->dims[0];
}

/* Walks up from the ACC node through single-use nodes while the chain is
 * act?(ACC (+ C)? (+ bias)?) in cuBLASLt's order; the adds may come in any
 * order and association (each rounds in the reference; cuBLASLt adds in f32
 * and rounds once, inside the dtype's tolerance). */
static void match_epilogue(const kf_group *grp, const kf_graph *g, uint32_t acc,
                           const uint32_t *uses, epi_match *m) {
    m->top = acc;
    m->epi = KF_CUDA_LT_EPI_NONE;
    m->bias = m->residual = KF_NONE;
    snprintf(m->why, sizeof m->why, "no epilogue");
    uint32_t cur = acc;
    bool act = false;
    if (is_root(grp, acc)) {
        /* The bare product is itself written: nothing may be folded into it. */
        snprintf(m->why, sizeof m->why, "the product itself is written");
        return;
    }
    for (;;) {
        if (is_root(grp, cur) && cur != acc) {
            snprintf(m->why, sizeof m->why, "the epilogue is exactly cuBLASLt's");
            break;
        }
        if (uses[cur] != 1) {
            if (uses[cur] > 1)
                snprintf(m->why, sizeof m->why, "a value of the epilogue has several uses");
            break;
        }
        /* The one user of cur. */
        uint32_t user = KF_NONE;
        for (uint32_t k = cur + 1; k < grp->n_expr && user == KF_NONE; k++) {
            const kf_expr *e = &grp->expr[k];
            if (e->kind != KF_EXPR_OP)
                continue;
            int arity = kf_form_arity(kf_op_get(e->op)->form);
            for (int j = 0; j < arity && j < 3; j++)
                if (e->src[j] == cur)
                    user = k;
        }
        if (user == KF_NONE)
            break;
        const kf_expr *u = &grp->expr[user];
        if (u->dtype != grp->dtype || u->space != KF_SPACE_OUT) {
            snprintf(m->why, sizeof m->why, "the epilogue changes dtype or space");
            break;
        }
        if (act) {
            snprintf(m->why, sizeof m->why, "%s follows the activation (cuBLASLt applies it last)",
                     kf_op_get(u->op)->name);
            break;
        }
        if (u->op == KF_OP_RELU || u->op == KF_OP_GELU_TANH) {
            m->epi = u->op == KF_OP_RELU ? KF_CUDA_LT_EPI_RELU : KF_CUDA_LT_EPI_GELU;
            if (m->bias != KF_NONE)
                m->epi = with_bias(m->epi);
            act = true;
            m->top = cur = user;
            continue;
        }
        if (u->op == KF_OP_ADD) {
            uint32_t other = u->src[0] == cur ? u->src[1] : u->src[0];
            const kf_expr *o = &grp->expr[other];
            if (m->bias == KF_NONE && is_bias_load(grp, o, g)) {
                m->bias = other;
                m->epi = with_bias(m->epi);
                m->top = cur = user;
                continue;
            }
            if (m->residual == KF_NONE && is_residual_load(grp, o, g)) {
                m->residual = other;
                m->top = cur = user;
                continue;
            }
        }
        snprintf(m->why, sizeof m->why, "%s is not a cuBLASLt epilogue%s", kf_op_get(u->op)->name,
                 u->op == KF_OP_GELU ? ": kfuse's gelu is erf, cuBLASLt's GELU is tanh" : "");
        break;
    }
    if (m->top == acc) {
        m->epi = KF_CUDA_LT_EPI_NONE;
        m->bias = m->residual = KF_NONE;
    }
}

static uint32_t find_acc(const kf_group *grp, int anchor) {
    for (uint32_t k = 0; k < grp->n_expr; k++)
        if (grp->expr[k].kind == KF_EXPR_ACC && grp->expr[k].anchor == anchor &&
            grp->expr[k].src[0] == KF_NONE) /* not a head-split group's in-head column */
            return k;
    return KF_NONE;
}

/* The epilogue kernel when cuBLASLt computed node `top` already: generated
 * from a copy of the plan whose group `gi` has `top` turned into the ACC node
 * (the copy lives only for the generator's call). */
static kf_status add_epilogue_after(rb *b, uint32_t acc, uint32_t top, char *name,
                                    size_t name_size) {
    const kf_plan *plan = b->plan;
    const kf_group *grp = &plan->groups[b->gi];
    kf_plan copy = *plan;
    kf_group *groups = kf_mem_alloc(b->mem, plan->n_groups * sizeof *groups);
    kf_expr *expr = kf_mem_alloc(b->mem, grp->n_expr * sizeof *expr);
    kf_status st = KF_OK;
    if (!groups || !expr) {
        st = kf_msg_set(b->err, KF_ERR_OUT_OF_MEMORY, "out of memory");
    } else {
        memcpy(groups, plan->groups, plan->n_groups * sizeof *groups);
        memcpy(expr, grp->expr, grp->n_expr * sizeof *expr);
        uint32_t keep_tensor = expr[top].tensor;
        expr[top] = expr[acc];
        expr[top].tensor = keep_tensor;
        groups[b->gi].expr = expr;
        copy.groups = groups;
        st = kf_rb_add_kernel(b, &copy, KF_CUDA_ROLE_EPILOGUE, name, name_size, NULL);
    }
    kf_mem_free(b->mem, groups, plan->n_groups * sizeof *groups);
    kf_mem_free(b->mem, expr, grp->n_expr * sizeof *expr);
    return st;
}

/* A's operand for anchor i: the prologue's scratch, or A as the plan lays it out. */
static kf_status a_operand(rb *b, int i, mref *out) {
    const kf_gemm_info *gm = &b->plan->groups[b->gi].gemm;
    if (!gm->a_prologue) {
        *out = mref_of(b, gm->a[i]);
        return KF_OK;
    }
    kf_cuda_buf sb = kf_rb_find(b, KF_CUDA_PARAM_SCRATCH, gm->a[i]);
    if (sb.kind == KF_CUDA_BUF_NONE && b->n_map > 0)
        sb = kf_rb_find(b, KF_CUDA_PARAM_SCRATCH, b->map[0].tensor);
    if (sb.kind == KF_CUDA_BUF_NONE)
        return kf_msg_set(b->err, KF_ERR_INTERNAL,
                          "group %u (%s): the prologue kernel writes no scratch A", b->gi,
                          b->plan->groups[b->gi].name);
    *out = mref_contiguous(b, gm->a[i], sb);
    return KF_OK;
}

/* ------------------------------------------------------------------------ */
/* The generated GEMM kernel (sm_90a)                                         */
/* ------------------------------------------------------------------------ */

/* Shared memory a block may use on sm_90 (227 KiB), less what the kernel
 * keeps statically (barriers, the gelu table: 2 x 2944 shorts). */
#define GEN_SMEM_BLOCK (227u * 1024u)
#define GEN_SMEM_STATIC (12u * 1024u)
#define GEN_MAX_STAGES 8u
/* the static shared memory of the sm_90a kernel with the residual by TMA
 * (its mbarriers: under 256 bytes), which then takes 5 stages of 128 x 128
 * (ping-pong) or 3 of 128 x 256 */
#define GEN_SMEM_RS_STATIC 1024u

static bool tma_stride_ok(int64_t elems, size_t es) {
    int64_t bytes = elems * (int64_t)es;
    return bytes > 0 && bytes % 16 == 0 && bytes < ((int64_t)1 << 40);
}

static void set_tmap(kf_cuda_tmap *t, kf_dtype dt, bool batched, uint64_t d0, uint64_t d1,
                     uint64_t batch, int64_t s1, int64_t sb, uint32_t b0, uint32_t b1, size_t es) {
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->rank = batched ? 3 : 2;
    t->dims[0] = d0;
    t->dims[1] = d1;
    t->dims[2] = batched ? batch : 1;
    t->strides[0] = (uint64_t)(s1 * (int64_t)es);
    t->strides[1] = batched ? (uint64_t)(sb * (int64_t)es) : 0;
    t->box[0] = b0;
    t->box[1] = b1;
    t->box[2] = 1;
    t->swizzle = 128;
}

/* A kernel made for a step before the GEMM's (the row statistics, a fold
 * pre-pass; st is how making it went): added as a GEMM_PROLOGUE step. The
 * GEMM kernel already took the group, so a refusal here is the recipe's
 * internal error; on any failure `gemm` is released too. */
static kf_status add_pre_step(rb *b, const kf_group *grp, kf_status st, kf_cuda_kernel *pk,
                              kf_cuda_kernel *gemm, kf_cuda_kstep **out) {
    if (st != KF_OK) {
        kf_msg_set(b->err, st, "group %u (%s): %s", b->gi, grp->name,
                   pk->error[0] ? pk->error : kf_status_str(st));
        kf_cuda_kernel_release(b->mem, pk);
        kf_cuda_kernel_release(b->mem, gemm);
        return st == KF_ERR_UNSUPPORTED || st == KF_ERR_NOT_FOUND ? KF_ERR_INTERNAL : st;
    }
    if ((st = kf_rb_add_made_kernel(b, pk, KF_CUDA_ROLE_GEMM_PROLOGUE, out)) != KF_OK)
        kf_cuda_kernel_release(b->mem, gemm);
    return st;
}

/* Whether a folded norm's pre-passes take one launch (kf_cuda_codegen_gemm_prepass):
 * the default (KF_CUDA_RECIPE_GEMM_PREPASS_APART keeps them apart). Measured on
 * an H100 at 214feea, A B B A: GPT-2's Q/K/V set 0.2235 -> 0.2123 ms with its
 * members apart, 0.2194 -> 0.2088 as one GEMM; ln_qkv 0.2032 -> 0.2040 and FC1
 * 0.2867 -> 0.2860 (even); the measured choices at compile time: ln_qkv 0.1644
 * -> 0.1618, FC1 0.2285 -> 0.2260, the set apart 0.1908 -> 0.1743
 * (bench/results/NVIDIA-H100-214feea-prepass.json). ncu: the statistics' 16.6
 * us and three folds of 8.6 us (32 blocks each) became one kernel of 21.2 us.
 * As the default (856c4d1, A B B A against PREPASS_APART): ln_qkv 0.9975, the
 * set as one GEMM 0.950, FC1 0.967. */
#define PREPASS_ONE_DEFAULT 1
static bool prepass_one(const rb *b) {
    return PREPASS_ONE_DEFAULT && !(b->target->flags & KF_CUDA_RECIPE_GEMM_PREPASS_APART);
}

static void drop_step(rb *b, kf_cuda_step *s) {
    if (s->kernel) {
        kf_cuda_kernel_release(b->mem, &s->kernel->kernel);
        kf_mem_free(b->mem, s->kernel, sizeof *s->kernel);
        s->kernel = NULL;
    }
}

/* The pre-pass steps this GEMM just added (steps first.. of the recipe: its
 * statistics pre-pass where stats_new, then its folds, whose jobs are the
 * last of b->pre_jobs) and the set's earlier one-launch pre-pass
 * (b->pre_step) become ONE step, in the place of the earlier one, else of
 * this GEMM's first: every fold and statistic before every GEMM of the set
 * (its GEMM steps' indices, which come before `first`, stay valid). Where
 * the one kernel refuses, the steps stay apart (b->pre_off). On an error
 * `gemm` is released. */
static kf_status merge_prepass(rb *b, uint32_t first, bool stats_new, kf_cuda_kernel *gemm) {
    kf_cuda_recipe *rc = b->rc;
    const kf_group *grp = &b->plan->groups[b->gi];
    if (b->pre_off || b->n_pre_jobs == 0)
        return KF_OK;
    bool stats = b->pre_stats || stats_new;
    kf_cuda_kernel pk;
    kf_status st = kf_cuda_codegen_gemm_prepass(b->plan, b->pre_jobs, b->n_pre_jobs, stats,
                                                b->target->arch, b->mem, &pk);
    if (st == KF_ERR_UNSUPPORTED) {
        kf_cuda_kernel_release(b->mem, &pk);
        b->pre_off = true;
        return KF_OK;
    }
    uint32_t end = rc->n_steps;
    kf_cuda_kstep *ks = NULL;
    if ((st = add_pre_step(b, grp, st, &pk, gemm, &ks)) != KF_OK)
        return st;
    for (uint32_t j = 0; j < ks->kernel.n_params; j++) /* each B as the GEMM's view */
        for (uint32_t i = 0; i < b->n_pre_jobs; i++)
            if (ks->kernel.params[j].kind == KF_CUDA_PARAM_IN &&
                ks->kernel.params[j].tensor == b->pre_b[i])
                ks->args[j].buf = b->pre_view[i];
    uint32_t at = b->pre_step ? b->pre_step - 1 : first;
    kf_cuda_step one = rc->steps[end];
    drop_step(b, &rc->steps[at]);
    rc->steps[at] = one;
    uint32_t w = first;
    for (uint32_t r = first; r < end; r++) {
        if (r == at)
            rc->steps[w++] = rc->steps[r];
        else
            drop_step(b, &rc->steps[r]);
    }
    rc->variants[rc->n_variants - 1].n_steps -= end + 1 - w;
    rc->n_steps = w;
    b->pre_step = at + 1;
    b->pre_stats = stats;
    return KF_OK;
}

/* The prologue kernel writing A normalized to scratch, a step before the
 * GEMM's (`gemm`, released on failure), unless a GEMM sibling set's earlier
 * member wrote it (the same scratch); *abuf: that scratch. */
static kf_status scratch_a_step(rb *b, kf_cuda_kernel *gemm, kf_cuda_buf *abuf) {
    const kf_gemm_info *gm = &b->plan->groups[b->gi].gemm;
    char pro[KF_CUDA_NAME_MAX];
    mref sa;
    bool shared_a =
        b->sib_shared && kf_rb_find(b, KF_CUDA_PARAM_SCRATCH, gm->a[0]).kind != KF_CUDA_BUF_NONE;
    kf_status st =
        shared_a ? KF_OK
                 : kf_rb_add_kernel(b, b->plan, KF_CUDA_ROLE_GEMM_PROLOGUE, pro, sizeof pro, NULL);
    if (st == KF_OK)
        st = a_operand(b, 0, &sa);
    if (st != KF_OK) {
        kf_cuda_kernel_release(b->mem, gemm);
        return st == KF_ERR_NOT_FOUND ? KF_ERR_INTERNAL : st;
    }
    *abuf = sa.buf;
    return KF_OK;
}

kf_status kf_rb_scratch_a_step(rb *b, kf_cuda_kernel *gemm, kf_cuda_buf *abuf) {
    return scratch_a_step(b, gemm, abuf);
}

/* The row statistics pre-pass of the norm the GEMM applies (`gemm`, released
 * on failure), unless a GEMM sibling set's earlier member computed them (the
 * same scratch, keyed by the norm's input). */
static kf_status stats_step(rb *b, kf_cuda_kernel *gemm) {
    const kf_group *grp = &b->plan->groups[b->gi];
    if (b->sib_shared &&
        kf_rb_find(b, KF_CUDA_PARAM_SCRATCH, grp->expr[grp->row.input].base).kind !=
            KF_CUDA_BUF_NONE)
        return KF_OK;
    kf_cuda_kernel sk;
    memset(&sk, 0, sizeof sk);
    kf_status st = kf_cuda_codegen_gemm_stats(b->plan, b->gi, b->target->arch, b->mem,
                                              kf_cuda_gemm_norm_stats(b->plan, b->gi), &sk);
    kf_cuda_kstep *sks = NULL;
    return add_pre_step(b, grp, st, &sk, gemm, &sks);
}

/* The sm_80 kernel of the group (its majors, batching and sizes in sh; the
 * operands' leading and batch strides checked 16-byte multiples): one block
 * per 128 x 128 tile where they give every SM one, else per 64 x 64 tile,
 * the batch in grid z. Its arguments: A, B (at their offsets), the params. */
/* The output tiles of a generated sm_90a GEMM of shape sh (128 rows; bn
 * columns, half of them an output's for a pair). */
/* KF_CUDA_RECIPE_GEMM_RASTER_SQ's raster rows: a wave of `sms` tiles of 128
 * x bn in R rows and sms / R columns reads R panels of A (128 rows each) and
 * sms / R of B (bn columns) at each K step, fewest where R x 128 = (sms / R)
 * x bn, R^2 = sms x bn / 128. The power of two nearest it in ratio (2p
 * beats p where 2 p^2 < t), from the cluster's CTAs to 64. */
static uint32_t square_raster(uint32_t sms, uint32_t bn, uint32_t cl) {
    uint64_t t = (uint64_t)sms * bn / 128u;
    uint32_t p = cl;
    while (p < 64u && 2u * (uint64_t)p * p < t)
        p *= 2u;
    return p;
}

static int64_t tiles_of(const kf_cuda_gemm_shape *sh, bool dual) {
    int64_t on = dual ? sh->bn / 2 : sh->bn;
    return ((sh->m + 127) / 128) * ((sh->n + on - 1) / on) * sh->batch;
}

static kf_status add_generated_sm80(rb *b, const kf_plan *gplan, kf_cuda_gemm_shape *sh,
                                    const mref *a, const mref *bm, const mref *bm1,
                                    const kf_cuda_operand *lb, const kf_cuda_operand *lb1,
                                    int64_t a_lead, int64_t b_lead, int64_t sa, int64_t sb,
                                    char *why, size_t why_size, char *name, size_t name_size) {
    const kf_group *grp = &b->plan->groups[b->gi];
    const kf_gemm_info *gm = &grp->gemm;
    if (sh->batch > 65535) {
        snprintf(why, why_size, "a batch past 65535 (grid z)");
        return KF_ERR_UNSUPPORTED;
    }
    int64_t tiles128 = ((sh->m + 127) / 128) * ((sh->n + 127) / 128) * sh->batch;
    sh->bm = sh->bn = tiles128 >= b->target->sm_count || sh->dual ? 128 : 64;
    sh->warps =
        sh->bm == 128 && !sh->dual && (b->target->flags & KF_CUDA_RECIPE_GEMM_SM80_8WARPS) ? 8 : 4;
    if (gm->row_epilogue && !gm->row_split) { /* whole rows a tile: 128 x 128 or 128 x 256 */
        sh->bm = 128;
        sh->bn = sh->n <= 128 ? 128 : 256;
        sh->warps = sh->bn / 32;
    }
    sh->stages = 4;
    sh->lda = a_lead;
    sh->ldb = b_lead;
    sh->sa = sh->a_batched ? sa : 0;
    sh->sb = sh->b_batched ? sb : 0;
    kf_cuda_kernel k;
    memset(&k, 0, sizeof k);
    kf_status st = kf_cuda_codegen_gemm_sm80(gplan, b->gi, b->target->arch, sh, b->mem, &k);
    if (st == KF_ERR_UNSUPPORTED) {
        snprintf(why, why_size, "%.190s", k.error);
        kf_cuda_kernel_release(b->mem, &k);
        return st;
    }
    if (st != KF_OK) {
        kf_msg_set(b->err, st, "group %u (%s): %s", b->gi, grp->name,
                   k.error[0] ? k.error : kf_status_str(st));
        kf_cuda_kernel_release(b->mem, &k);
        return st;
    }
    uint32_t n_ptrs = sh->dual ? 3u : 2u; /* A, B (and the pair's second B) */
    if (k.n_params + n_ptrs > KF_CUDA_MAX_PARAMS) {
        kf_cuda_kernel_release(b->mem, &k);
        snprintf(why, why_size, "more than %d kernel arguments", KF_CUDA_MAX_PARAMS);
        return KF_ERR_UNSUPPORTED;
    }
    snprintf(name, name_size, "%s", k.name);
    int64_t tiles = (int64_t)k.launch.work_items;
    /* A norm prologue: steps before the GEMM's, as for the sm_90a kernel:
     * the prologue kernel writing A normalized to scratch, or the statistics
     * and the fold pre-pass (B becomes its diag(gamma) B, contiguous, which
     * sh->ldb and sh->sb already describe). */
    kf_cuda_buf abuf = a->buf, bbuf = bm->buf, bbuf1 = sh->dual ? bm1->buf : bm->buf;
    if (sh->a_scratch && (st = scratch_a_step(b, &k, &abuf)) != KF_OK)
        return st;
    if (sh->a_fold) {
        kf_cuda_kernel fk;
        kf_cuda_kstep *pre = NULL;
        if ((st = stats_step(b, &k)) != KF_OK)
            return st;
        for (int i = 0; i < (sh->dual ? 2 : 1); i++) { /* the fold pre-pass of each B */
            const kf_cuda_operand *lbi = i ? lb1 : lb;
            kf_cuda_fold_shape fs = {
                .anchor = i, .k = sh->k, .n = sh->n, .sk = lbi->row_stride, .sn = lbi->col_stride};
            memset(&fk, 0, sizeof fk);
            st = kf_cuda_codegen_gemm_fold(b->plan, b->gi, b->target->arch, b->mem, &fs, &fk);
            if ((st = add_pre_step(b, grp, st, &fk, &k, &pre)) != KF_OK)
                return st;
            for (uint32_t j = 0; j < pre->kernel.n_params; j++) /* B as the GEMM's view */
                if (pre->kernel.params[j].kind == KF_CUDA_PARAM_IN &&
                    pre->kernel.params[j].tensor == gm->b[i])
                    pre->args[j].buf = (i ? bm1 : bm)->buf;
        }
        bbuf = kf_rb_find(b, KF_CUDA_PARAM_SCRATCH, gm->b[0]);
        if (sh->dual)
            bbuf1 = kf_rb_find(b, KF_CUDA_PARAM_SCRATCH, gm->b[1]);
    }
    kf_cuda_kstep *ks = NULL;
    if ((st = kf_rb_add_made_kernel(b, &k, KF_CUDA_ROLE_GEMM, &ks)) != KF_OK)
        return st;
    /* one block per tile (not a persistent grid), the batch in z */
    ks->grid[0] = (uint32_t)tiles;
    ks->grid[1] = 1;
    ks->grid[2] = (uint32_t)sh->batch;
    memmove(&ks->args[n_ptrs], &ks->args[0], ks->n_args * sizeof ks->args[0]);
    ks->n_args += n_ptrs;
    memset(&ks->args[0], 0, n_ptrs * sizeof ks->args[0]);
    for (uint32_t i = 0; i < n_ptrs; i++)
        ks->args[i].kind = KF_CUDA_ARG_PTR;
    ks->args[0].buf = abuf;
    ks->args[1].buf = bbuf;
    if (sh->dual)
        ks->args[2].buf = bbuf1;
    if (b->sib_shape) /* a sibling set's member: its shape for the set's one kernel */
        *b->sib_shape = *sh;
    char tile[48];
    if (sh->dual)
        snprintf(tile, sizeof tile, "pair %ux(2x%u)x32", sh->bm, sh->bn / 2);
    else
        snprintf(tile, sizeof tile, "%ux%ux32", sh->bm, sh->bn);
    snprintf(why, why_size,
             "mma.sync %s tiles on %u warps, %u stages (cp.async), A %s-major, B %s-major%s%s",
             tile, sh->warps, sh->stages, sh->a_kmajor ? "K" : "M", sh->b_kmajor ? "K" : "N",
             sh->batch > 1 ? ", batched in one launch (grid z)" : "",
             sh->a_fold      ? ", norm prologue folded into B (pre-passes: row statistics, "
                               "diag(gamma) B)"
             : sh->a_scratch ? ", A from the prologue kernel's scratch"
             : gm->row_epilogue && !gm->row_split
                 ? ", row epilogue in the tile (the rows' statistics reduced in registers and "
                   "shared memory)"
                 : "");
    return KF_OK;
}

/* The generated kernel of the group as one KERNEL step of the current
 * variant; KF_ERR_UNSUPPORTED with the reason in `why` (and no step) when the
 * group or its operands are outside what the kernel takes. A norm prologue
 * runs in the kernel (a statistics pre-pass, then A normalized in shared
 * memory) where the kernel takes it; else the
 * prologue kernel writes A, normalized, to scratch (a step before the GEMM,
 * as on the cuBLASLt side) and the kernel reads that. */
kf_status kf_rb_gemm_generated(rb *b, char *why, size_t why_size, char *name, size_t name_size) {
    const kf_plan *plan = b->plan;
    const kf_group *grp = &plan->groups[b->gi];
    const kf_gemm_info *gm = &grp->gemm;
    const kf_graph *g = plan->graph;
#define GEN_NO(...)                                                                                \
    do {                                                                                           \
        snprintf(why, why_size, __VA_ARGS__);                                                      \
        return KF_ERR_UNSUPPORTED;                                                                 \
    } while (0)
    /* The mma.sync kernel (sm_80) on 8.x, or anywhere from 8.0 when asked
     * for (KF_GEMM_SM80); the wgmma/TMA kernel on sm_90a. */
    int cc = kf_cuda_arch_cc(b->target->arch);
    bool sm80 = (b->target->flags & KF_CUDA_RECIPE_GEMM_SM80) ? cc >= 80 : (cc >= 80 && cc < 90);
    b->dec_why[0] = 0;
    const kf_tensor *mm = g->nodes[gm->anchor[0]];
    /* f32 and f64: the SIMT kernel on every arch from sm_80 (recipe_gemm_simt.c) */
    bool simt = mm->dtype == KF_DTYPE_F32 || mm->dtype == KF_DTYPE_F64;
    if (simt && cc < 80)
        GEN_NO("the SIMT GEMM (%s) needs sm_80 or later (cp.async), not %s",
               kf_dtype_name(mm->dtype), b->target->arch);
    if (!simt && !sm80 && strcmp(b->target->arch, "sm_90a") != 0)
        GEN_NO("the generated GEMM is for sm_80 to sm_89 (mma.sync) and sm_90a (wgmma), not %s",
               b->target->arch);
    bool dual = gm->n_anchors == 2;
    /* Where the norm has the form kf_cuda_gemm_fold_of takes (LayerNorm,
     * RMSNorm, gamma and beta vectors) and B is the smaller operand, it is
     * folded into B: a pre-pass writes diag(gamma) B, the main loop is the
     * plain one on the norm's input, the epilogue applies the row statistics
     * (a SwiGLU pair too: a pre-pass per B). Else the prologue kernel writes A
     * normalized to scratch: the fold moves K x N x 2 elements where it moves
     * M x K x 2, less the statistics' read of A, so it wins while 2 N < M.
     * Measured on an H200: LLaMA's q projection (16384 x 4096 x 4096) 0.711
     * ms folded against cuBLASLt's 0.709 after its prologue kernel; its MLP
     * pair (8192 x 4096 x 2 x 11008) 1.856 folded against 1.733 from the
     * scratch. Normalizing A's tiles in the ring (KF_CUDA_RECIPE_GEMM_NORM_IN_RING,
     * the schedule before) redoes M x K arithmetic for each column tile: 1.41
     * ms on the q projection, 0.70 without that arithmetic. */
    const kf_expr *pin = gm->a_prologue && grp->row.present ? &grp->expr[grp->row.input] : NULL;
    int64_t a_rows = 1, n_all = mm->dims[mm->rank - 1] * (dual ? 2 : 1);
    for (int d = 0; d + 1 < mm->rank; d++)
        a_rows *= mm->dims[d];
    /* the kernel reads the norm's loaded input itself (fold or ring) */
    bool own_a = pin && pin->kind == KF_EXPR_LOAD && gm->a_root != KF_NONE && !mm->attr.transpose_a;
    bool ring = (b->target->flags & KF_CUDA_RECIPE_GEMM_NORM_IN_RING) != 0;
    kf_cuda_gemm_fold fold_of;
    bool fold = own_a && !ring && !simt && !(b->target->flags & KF_CUDA_RECIPE_GEMM_STAGED_EPI) &&
                2 * n_all < a_rows && kf_cuda_gemm_fold_of(plan, b->gi, &fold_of);
    bool norm = own_a && ring && !dual && !sm80 && !simt; /* (only the sm_90a kernel's ring) */
    bool scratch = gm->a_prologue && !norm && !fold;
    uint32_t norm_in = norm || fold ? pin->base : KF_NONE;
    /* A row epilogue runs in the tile (cg_gemm_epi.c): whole rows in one
     * column tile, 256 columns at most, and not beside a pair, a norm
     * prologue or a head view. Measured against cuBLASLt + the row kernel
     * like every generated kernel. Its GPU numerics, on an H100 (branch
     * row10, 61c0417): test_gemm_rowepi (LayerNorm, RMSNorm, softmax; N 64,
     * 128, 192, 200, 256; ragged M, batched; bf16 and f16; sm_90a and the
     * sm_80 kernel forced, and the sm_80 split row form), every example
     * with --gemm generated and --gemm sm80 --check (68/68), and
     * compute-sanitizer memcheck and racecheck on a ragged LayerNorm per
     * kernel (clean). */
    bool row_tile = gm->row_epilogue && !gm->row_split && !simt; /* (SIMT: the split form) */
    if (row_tile && (dual || gm->a_prologue || gm->head_dim))
        GEN_NO("a row epilogue on a SwiGLU pair, after a norm prologue or on a head view");
    if (row_tile && mm->dims[mm->rank - 1] > 256)
        GEN_NO("a row epilogue over rows of N=%lld (one column tile holds 256)",
               (long long)mm->dims[mm->rank - 1]);
    if ((gm->row_split || (simt && gm->row_epilogue)) && (dual || gm->a_prologue))
        GEN_NO("the split row form on a SwiGLU pair or a norm prologue");
    if (!simt && mm->dtype != KF_DTYPE_BF16 && mm->dtype != KF_DTYPE_F16)
        GEN_NO("%s operands (the kernel takes bf16 and f16)", kf_dtype_name(mm->dtype));
    /* the scratch is contiguous, 256-byte aligned; its buffer is known once
     * the prologue kernel's step exists (added below, when nothing refused) */
    kf_cuda_buf none;
    memset(&none, 0, sizeof none);
    mref a = norm || fold ? mref_contiguous(b, gm->a[0], kf_rb_tensor(b, norm_in))
             : scratch    ? mref_contiguous(b, gm->a[0], none)
                          : mref_of(b, gm->a[0]);
    mref bm = mref_of(b, gm->b[0]);
    if (g->nodes[gm->a[0]]->dtype != mm->dtype || g->nodes[gm->b[0]]->dtype != mm->dtype)
        GEN_NO("the operands' dtypes differ from the product's");
    /* Dual (SwiGLU): the second product reads the same A the same way, and a
     * B of the first's shape and dtype (its strides may differ: its own map). */
    const kf_tensor *mm1 = dual ? g->nodes[gm->anchor[1]] : NULL;
    mref bm1;
    memset(&bm1, 0, sizeof bm1);
    if (dual) {
        if (gm->a[1] != gm->a[0] || mm1->attr.transpose_a != mm->attr.transpose_a)
            GEN_NO("the two GEMMs of the pair read A differently");
        if (mm1->dtype != mm->dtype || g->nodes[gm->b[1]]->dtype != mm->dtype ||
            mm1->rank != mm->rank || memcmp(mm1->dims, mm->dims, sizeof mm->dims) != 0)
            GEN_NO("the two GEMMs of the pair differ in shape or dtype");
        bm1 = mref_of(b, gm->b[1]);
    }
    int rank = mm->rank, nb = rank - 2;
    kf_cuda_gemm_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.m = mm->dims[rank - 2];
    sh.n = mm->dims[rank - 1];
    sh.k = mm->attr.transpose_a ? a.dims[a.rank - 2] : a.dims[a.rank - 1];
    sh.batch = 1;
    for (int i = 0; i < nb; i++)
        sh.batch *= mm->dims[i];
    kf_cuda_operand la, lb, lb1;
    logical(&a, mm->attr.transpose_a, &la);
    logical(&bm, mm->attr.transpose_b, &lb);
    memset(&lb1, 0, sizeof lb1);
    if (dual) {
        logical(&bm1, mm1->attr.transpose_b, &lb1);
        /* both B tiles land in one wgmma operand: one layout */
        if ((lb1.col_stride == 1) != (lb.col_stride == 1) ||
            (lb1.col_stride != 1 && lb1.row_stride != 1))
            GEN_NO("the two B operands of the pair are laid out differently");
    }
    if (la.col_stride == 1)
        sh.a_kmajor = true;
    else if (la.row_stride != 1)
        GEN_NO("A has no unit stride in its last two dims");
    if (lb.col_stride != 1) {
        if (lb.row_stride != 1)
            GEN_NO("B has no unit stride in its last two dims");
        sh.b_kmajor = true;
    }
    int64_t sa = 0, sb = 0, sb1 = 0;
    if (!batch_stride(&a, nb, mm->dims, &sa) || !batch_stride(&bm, nb, mm->dims, &sb) ||
        (dual && !batch_stride(&bm1, nb, mm->dims, &sb1)))
        GEN_NO("an operand's batch dims have no uniform stride (one TMA map cannot walk them)");
    if (dual && (sb1 == 0) != (sb == 0))
        GEN_NO("one B of the pair is batched, the other shared");
    if (sh.batch > 1 && sb == 0 && sh.a_kmajor && sa == sh.m * la.row_stride) {
        sh.m *= sh.batch; /* x[B, S, D] . w[D, N]: one GEMM of B * S rows */
        sh.batch = 1;
        sa = 0;
    }
    sh.a_batched = sh.batch > 1 && sa != 0;
    sh.b_batched = sh.batch > 1 && sb != 0;
    size_t es = kf_dtype_size(mm->dtype);
    int64_t a_lead = sh.a_kmajor ? la.row_stride : la.col_stride;
    int64_t b_lead = sh.b_kmajor ? lb.col_stride : lb.row_stride;
    int64_t b1_lead = dual ? (sh.b_kmajor ? lb1.col_stride : lb1.row_stride) : b_lead;
    /* A stride over an extent of 1 is never taken: any valid one will do. */
    int64_t pad = (int64_t)(16 / es);
    if ((sh.a_kmajor ? sh.m : sh.k) == 1)
        a_lead = ((sh.a_kmajor ? sh.k : sh.m) + pad - 1) / pad * pad;
    if ((sh.b_kmajor ? sh.n : sh.k) == 1)
        b_lead = b1_lead = ((sh.b_kmajor ? sh.k : sh.n) + pad - 1) / pad * pad;
    if (simt) { /* any element stride; 16-byte copies where they are aligned */
        sh.lda = a_lead;
        sh.ldb = b_lead;
        sh.ldb2 = b1_lead;
        sh.sa = sh.a_batched ? sa : 0;
        sh.sb = sh.b_batched ? sb : 0;
        sh.sb2 = dual && sh.b_batched ? sb1 : 0;
        sh.dual = dual;
        sh.a_scratch = scratch;
        return kf_rb_gemm_simt(b, &sh, a.buf, bm.buf, dual ? bm1.buf : bm.buf, why, why_size, name,
                               name_size);
    }
    /* Decode shapes (M <= 32; KF_CUDA_RECIPE_GEMM_DECODE: 64): the decode
     * kernel (recipe_gemm_decode.c) where it takes the group; else the tiled
     * kernels below, and the report says why not. */
    if (!dual && kf_rb_gemm_wants_decode(b, &sh)) {
        kf_cuda_gemm_shape dsh = sh;
        dsh.lda = a_lead;
        dsh.ldb = b_lead;
        dsh.a_scratch = scratch;
        kf_status dst = kf_rb_gemm_decode(b, &dsh, a.buf, bm.buf, why, why_size, name, name_size);
        if (dst != KF_ERR_UNSUPPORTED)
            return dst;
        snprintf(b->dec_why, sizeof b->dec_why, "%.190s", why);
        why[0] = 0;
    }
    if (!tma_stride_ok(a_lead, es) || !tma_stride_ok(b_lead, es) || !tma_stride_ok(b1_lead, es) ||
        (sh.a_batched && !tma_stride_ok(sa, es)) ||
        (sh.b_batched && (!tma_stride_ok(sb, es) || (dual && !tma_stride_ok(sb1, es)))))
        GEN_NO("an operand's row stride is not a multiple of 16 bytes (%s)",
               sm80 ? "cp.async" : "TMA");
    if (a.buf.offset % 16 != 0 || bm.buf.offset % 16 != 0 || (dual && bm1.buf.offset % 16 != 0))
        GEN_NO("an operand starts off a 16-byte boundary (%s)", sm80 ? "cp.async" : "TMA");
    if (sh.m > INT32_MAX || sh.n > INT32_MAX || sh.k > INT32_MAX || sh.batch > INT32_MAX)
        GEN_NO("a dim past 2^31 (TMA coordinates)");
    /* An RMSNorm's gamma on A's fragments, B the operand itself
     * (shape.a_gscale; sm_90a, A bf16 and K-major, gamma a contiguous bf16
     * vector, cooperative tiles: below), where the fold into B has a
     * pre-pass read B and write diag(gamma) B every run: LLaMA-7B's Q/K/V
     * set moves 2 x 96 MB for it beside the statistics' 128 MB read of A. */
    bool gscale = fold && !sm80 && sh.a_kmajor && mm->dtype == KF_DTYPE_BF16 &&
                  kf_cuda_gemm_gscale_takes(plan, b->gi) &&
                  (fold_of.gamma == KF_NONE || /* (its view's start, for the bulk copies) */
                   kf_rb_tensor(b, grp->expr[fold_of.gamma].base).offset % 16 == 0);
    /* diag(gamma) B: contiguous in B's major, one for the whole batch */
    if (fold && (sh.b_batched || (sh.b_kmajor ? sh.k : sh.n) % (int64_t)(16 / es) != 0))
        GEN_NO("a norm folded into a batched B, or one whose rows are not a multiple of 16 "
               "bytes (%s)",
               sm80 ? "cp.async" : "TMA");
    /* The split row form: the GEMM computes the copy without the row stage
     * (kf_rb_split_make), and a row pass follows (kf_rb_split_row_pass), on either
     * kernel. From here every way out frees sc. */
    kf_rb_split sc;
    memset(&sc, 0, sizeof sc);
    const kf_plan *gplan = plan;
    if (gm->row_split) {
        kf_status sst = KF_OK;
        const char *sw = kf_rb_split_make(b, &sc, &sst);
        if (sst != KF_OK)
            return sst;
        if (sw)
            GEN_NO("the split row form: %s", sw);
        gplan = &sc.gplan;
        sh.x_scratch = !sc.x_written;
        sh.x_tensor = sc.x_tensor;
    }
    if (sm80) {
        sh.a_fold = fold;
        sh.a_scratch = scratch;
        sh.dual = dual;
        sh.ldb2 = b1_lead;
        sh.sb2 = dual && sh.b_batched ? sb1 : 0;
        if (fold) { /* the kernel reads the pre-pass's diag(gamma) B (of each B) */
            b_lead = sh.ldb2 = sh.b_kmajor ? sh.k : sh.n;
            sb = sh.sb2 = 0;
        }
        kf_status st8 = add_generated_sm80(b, gplan, &sh, &a, &bm, &bm1, &lb, &lb1, a_lead, b_lead,
                                           sa, sb, why, why_size, name, name_size);
        if (st8 == KF_OK && gm->row_split)
            st8 = kf_rb_split_row_pass(b, &sc, why, why_size);
        kf_rb_split_free(b->mem, &sc);
        return st8;
    }
    /* Cooperative 128 x 256 tiles when they still give every SM one; else
     * 128 x 128, ping-pong when some block gets two tiles (one consumer's
     * epilogue then runs under the other's main loop), cooperative when none
     * does (both consumers on the one tile). Measured on an H100, GEMM +
     * bias + GELU 8192 x 4096 x 16384 (1024 tiles of 128 x 256): cooperative
     * 128 x 256 1.47 ms (erf, table) / 1.78 (tanh), ping-pong 128 x 128 for
     * the same 1.72 / 1.92 (bench/results, efe1fc8 and fcb897b). */
    /* Dual: the same rule on output tiles half as wide (the B tile holds
     * bn / 2 columns of each B), so 128 x (2 x 128) and 128 x (2 x 64). */
    int64_t w = dual ? 2 : 1;
    int64_t tiles256 = ((sh.m + 127) / 128) * ((sh.n * w + 255) / 256) * sh.batch;
    int64_t tiles128 = ((sh.m + 127) / 128) * ((sh.n * w + 127) / 128) * sh.batch;
    sh.bn = sh.n * w >= 256 && tiles256 >= b->target->sm_count ? 256 : 128;
    sh.pingpong = sh.bn == 128 && tiles128 > b->target->sm_count;
    if ((b->target->flags & KF_CUDA_RECIPE_GEMM_PINGPONG) && tiles128 > b->target->sm_count) {
        sh.bn = 128;
        sh.pingpong = true;
    }
    sh.epi_staged = (b->target->flags & KF_CUDA_RECIPE_GEMM_STAGED_EPI) != 0;
    /* 2-CTA clusters (internal, KF_CUDA_RECIPE_GEMM_CLUSTER2): pairs of tile
     * rows share their B tile by TMA multicast; two tile rows at least; not
     * the head view's TMA-store output (checked below). A SwiGLU pair's
     * cooperative 128 x (2 x 128) tiles take them by default (internal
     * DUAL_F32T: the form before): on an H100 (fe74e00, 8192 x 4096 x (2 x
     * 11008), one run) 0.978x of one CTA's time A B B A, 0.933x idle, with the
     * packed epilogue below 0.983x of that again (idle 1.8208 ms against
     * 2.0522). Its other tiles (ping-pong, 128 x (2 x 64)) were not measured
     * in clusters and keep one CTA, as does a pair where stream-K is asked
     * for (internal STREAMK: the two exclude each other). */
    bool pair_c2 =
        dual && sh.bn == 256 && !sh.pingpong &&
        !(b->target->flags & (KF_CUDA_RECIPE_GEMM_DUAL_F32T | KF_CUDA_RECIPE_GEMM_STREAMK));
    bool want_c2 = ((b->target->flags & KF_CUDA_RECIPE_GEMM_CLUSTER2) || pair_c2) && sh.m > 128;
    /* The TMA-store epilogue: one output of the product's dtype, written
     * whole (the plan's one write), N a multiple of 8 (its rows 16 bytes).
     * Not with the norm in the ring (internal): beside its arithmetic in the
     * main loop, ptxas serializes the wgmmas (C7514). */
    sh.epi_tma = !(b->target->flags & KF_CUDA_RECIPE_GEMM_EPI_REGS) && !dual && !sh.epi_staged &&
                 !norm && !gm->row_split && grp->n_writes == 1 &&
                 (!gm->head_dim || !gm->heads_first || gm->m % 64 == 0) &&
                 plan->graph->nodes[grp->writes[0]]->dtype == mm->dtype && sh.n % 8 == 0;
    if (want_c2 && !(sh.epi_tma && gm->head_dim && gm->heads_first))
        sh.cluster = 2;
    /* A short main loop (K of 16 steps or fewer) with that epilogue: ping-pong
     * 128-wide tiles wherever some block gets two, one consumer's epilogue
     * under the other's main loop. Measured on an H200, 16384 x 4096 x 1024
     * (bench k1024_*): bias 0.190 ms against cooperative 128 x 256's 0.208,
     * bias + gelu_tanh 0.214 against 0.237 (cuBLASLt 0.187 / 0.207); a long
     * one keeps the cooperative tiles (8192 x 4096 x 16384 + gelu_tanh:
     * 1.455 against 1.393). */
    if (sh.epi_tma && sh.k <= 1024 && tiles128 > b->target->sm_count &&
        !(b->target->flags & KF_CUDA_RECIPE_GEMM_SHORT_COOP) &&
        (!gm->head_dim || 128 % gm->head_dim == 0)) {
        sh.bn = 128;
        sh.pingpong = true;
    }
    /* Stream-K (internal, KF_CUDA_RECIPE_GEMM_STREAMK): where the last wave
     * of tiles leaves a quarter of the SMs or more idle (fewer tiles than
     * SMs included: decode shapes, M <= 64 against N 4096 gives 16 tiles of
     * 128 x 256 on 132 SMs), the tiles after the whole waves but one are cut
     * by K steps into one even range per SM. Not ping-pong (its consumers
     * take alternate whole tiles) nor clusters (pairs of whole tiles); a
     * main loop of 4 K steps at least. One tile row (decode) takes the
     * cooperative 128 x 256 tiles whatever their count: the cut fills the
     * SMs, and the wider B tile keeps more of the weight's bytes in flight. */
    if ((b->target->flags & KF_CUDA_RECIPE_GEMM_STREAMK) && sh.m <= 128 && sh.batch == 1 &&
        sh.k >= 4 * 64 && sh.cluster != 2 && !gm->head_dim && sh.n * w >= 256) {
        sh.bn = (b->target->flags & KF_CUDA_RECIPE_GEMM_SK_NARROW) ? 128 : 256;
        sh.pingpong = false;
    }
    {
        int64_t sms = b->target->sm_count, tiles = tiles_of(&sh, dual);
        if ((b->target->flags & KF_CUDA_RECIPE_GEMM_STREAMK) && !sh.pingpong && sh.cluster != 2 &&
            sms > 1 && sh.k >= 4 * 64 && tiles % sms != 0 && (tiles % sms) * 4 <= 3 * sms)
            sh.sk_grid = (uint32_t)sms;
    }
    /* A row epilogue in the tile: one column tile a row (128 or 256 wide;
     * ping-pong 128-wide tiles where some block gets two), the register
     * epilogue, no cluster or stream-K. */
    if (row_tile) {
        sh.bn = sh.n <= 128 ? 128 : 256;
        sh.pingpong = sh.bn == 128 && tiles128 > b->target->sm_count;
        sh.cluster = 0;
        sh.epi_tma = sh.epi_staged = false;
        sh.sk_grid = 0;
    }
    /* ping-pong's turn passed once the main loop is issued (internal; not
     * with a row epilogue: its RMSNorm kernel's stack frame grew past 128
     * bytes) */
    sh.pp_early = sh.pingpong && (b->target->flags & KF_CUDA_RECIPE_GEMM_PP_EARLY) && !row_tile;
    /* the TMA-store epilogue two chunks ahead (internal); not for the head
     * view (its rotate-half partners keep the accumulators alive), a norm
     * folded into B (its column terms come with each chunk) or stream-K (its
     * partials): ahead, those kernels got a stack frame (ptxas gives a
     * consumer 168 registers) */
    sh.epi_ahead = sh.epi_tma && (b->target->flags & KF_CUDA_RECIPE_GEMM_EPI_AHEAD) &&
                   !gm->head_dim && !fold && !sh.sk_grid;
    /* the epilogue's row operands prefetched into L2 when a tile starts
     * (internal); not with stream-K (a segment's tile starts more than once) */
    /* The residual by TMA into the store buffers under the main loop: one
     * CTA, no stream-K, pair, head view or sibling set, not with the L2
     * prefetch of the residual (internal EPI_PF: the form before). The
     * default on ping-pong 128 x 128 tiles (6 ring stages -> 5), where it
     * won; internal EPI_GLOBAL_RS keeps the global loads. Measured on an
     * H100 (c4e282c, ms): GPT-2's out projection 16384 x 1024 x 1024 + bias
     * + residual, ping-pong 0.0672 against 0.0689 with the global loads
     * (cuBLASLt 0.0638); its FC2 (K = 4096, cooperative 128 x 256) 0.1910
     * with 3 stages against 0.1891 with 4: not there. Internal EPI_BUF4
     * takes the 4 in-place chunk buffers wherever the template does (128 x
     * 256 cooperative too, a residual loaded if there is one, else none; a
     * norm folded into B then reads its column terms from L2): GPT-2's FC1
     * (LayerNorm + bias + gelu_tanh) 0.2726 ping-pong, 0.2723 cooperative,
     * against 0.2504 without. */
    const uint32_t rs_node = kf_cuda_gemm_rs_node(gplan, b->gi);
    sh.epi_rs = sh.epi_tma && !(b->target->flags & KF_CUDA_RECIPE_GEMM_EPI_GLOBAL_RS) &&
                sh.cluster != 2 && !sh.sk_grid && !dual && !sh.epi_ahead && !gm->head_dim &&
                !b->sib_shape && sh.bn == (sh.pingpong ? 128u : 256u) &&
                !(b->target->flags & KF_CUDA_RECIPE_GEMM_EPI_PF) &&
                ((rs_node != KF_NONE && sh.pingpong) ||
                 (b->target->flags & KF_CUDA_RECIPE_GEMM_EPI_BUF4));
    /* (the register epilogue too: the split row form's residual, whose
     * loads the whole tile issues at once when its main loop ends) */
    sh.epi_pf = (sh.epi_tma || (!sh.epi_staged && !row_tile)) &&
                (b->target->flags & KF_CUDA_RECIPE_GEMM_EPI_PF) && !sh.sk_grid;
    /* The column operands (a bias) copied into the staging area when a tile
     * starts, read from there by the chunks (gemm_sm90.cuh KF_EPI_CS), where
     * each chunk's global loads waited between its store barriers (internal
     * EPI_COLS_GLOBAL: the form before). Not with the 4 chunk buffers (no
     * room), a fold (its column terms take the room), a head view, a pair, a
     * sibling set or stream-K (a segment's tile starts more than once).
     * Measured on an H100 (32085d9): 16384 x 4096 x 1024 + bias + gelu_tanh
     * 0.2015 ms against 0.2174 (cuBLASLt 0.2105), A B B A 0.934x; issue 13's
     * 8192 x 4096 x 16384 + bias + gelu_tanh a tie idle, A B B A 0.984x and
     * 0.996x. */
    sh.epi_cs = sh.epi_tma && !sh.epi_rs && !fold && !gm->head_dim && !dual && !sh.sk_grid &&
                !b->sib_shape && !(b->target->flags & KF_CUDA_RECIPE_GEMM_EPI_COLS_GLOBAL);
    /* A SwiGLU pair's register epilogue on packed pairs (gemm_sm90.cuh
     * KF_EPI_PK) and silu by ex2 and rcp, where the pair runs in 2-CTA
     * clusters (by default or by CLUSTER2), unless internal
     * KF_CUDA_RECIPE_GEMM_DUAL_F32T asks for the form before. That form's
     * transposes of both accumulators' floats (16 shuffles and their selects
     * per 4 column groups and row) and silu (~12 instructions an element)
     * issue ~1800 instructions a consumer thread a 128 x (2 x 128) tile, the
     * packed form ~720. On one CTA the packed form measured slower (H100,
     * 7d2b7d8, the bench's 8192 x 4096 x (2 x 11008): A B B A 2.2523 ms
     * against 2.1959; ncu: the main loop at 91% of the wgmma peak, L2 78%
     * busy; ptxas puts its 8 stores a thread at the end of the tile's
     * epilogue, every SM at about the same time, the f32 form's one every
     * ~220 instructions), so it is not taken there; in clusters, where B
     * comes by multicast, it measured faster (H100, fe74e00: A B B A 2.1360
     * against 2.1725, idle 1.8208 against 1.9140). One output of the
     * product's dtype (the packed words), N a multiple of 8 (whole 16-byte
     * stores), no fold (its column terms come per 8 columns), not staged. */
    sh.epi_pk = dual && sh.cluster == 2 && !sh.epi_staged && !fold && !row_tile &&
                grp->n_writes == 1 && plan->graph->nodes[grp->writes[0]]->dtype == mm->dtype &&
                sh.n % 8 == 0 && !(b->target->flags & KF_CUDA_RECIPE_GEMM_DUAL_F32T);
    sh.silu_ex2 = sh.epi_pk;
    sh.epi_unpacked = (b->target->flags & KF_CUDA_RECIPE_GEMM_EPI_UNPACKED) != 0;
    sh.desc_step = !(b->target->flags & KF_CUDA_RECIPE_GEMM_DESC_REBUILD);
    /* The ping-pong tile counter through a shuffle (uniform to ptxas) but
     * with the row epilogue in the tile, whose row statistics take the
     * registers the uniform counter frees for the K loop: there ptxas spilled
     * more (RMSNorm 20000 x 128 ping-pong: a 192-byte stack frame against 48,
     * 214 bytes of spill stores against 42), so that form keeps the counter
     * from cw (not timed either way). */
    sh.pp_varying = (b->target->flags & KF_CUDA_RECIPE_GEMM_PP_VARYING) || row_tile;
    if (b->target->flags & KF_CUDA_RECIPE_GEMM_RASTER_SQ)
        sh.raster = square_raster(b->target->sm_count, sh.bn, sh.cluster == 2 ? 2u : 1u);
    if (b->target->flags & KF_CUDA_RECIPE_GEMM_GELU_MUFU)
        for (uint32_t i = 0; i < grp->n_expr; i++)
            if (grp->expr[i].kind == KF_EXPR_OP && grp->expr[i].op == KF_OP_GELU_TANH)
                sh.gelu_mufu = true;
    sh.dual = dual;
    sh.a_norm = norm;
    sh.a_scratch = scratch;
    sh.a_fold = fold;
    /* (gamma on A's fragments: the cooperative 128 x 256 tiles' main loop
     * with the TMA-store epilogue. At 128 x 128, or with the register
     * epilogue, ptxas serialized the wgmmas, C7513: A's fragments defined
     * inside a wgmma stage; those keep the fold into B.) */
    gscale = gscale && !sh.sk_grid && !sh.pingpong && !sh.epi_rs && sh.bn == 256 && sh.epi_tma &&
             sh.k % 8 == 0;
    sh.a_gscale = gscale;
    /* A LayerNorm fold's bias (h + b, the product's one reader) in the
     * fold's column terms d: the pre-pass adds it once per column, where
     * the epilogue loaded and added it for every element (GPT-2's FC1 and
     * Q/K/V at K = 1024, where the epilogue is a large part of a tile).
     * KF_CUDA_RECIPE_GEMM_FOLD_BIAS_EPI keeps it in the epilogue. */
    sh.fold_bias = fold && !dual && !gm->row_split &&
                   !(b->target->flags & KF_CUDA_RECIPE_GEMM_FOLD_BIAS_EPI) &&
                   kf_cuda_gemm_fold_bias(plan, b->gi) != KF_NONE;
    /* A row epilogue's residual staged in shared memory by each consumer's
     * cp.async copies when its tile starts (gemm_sm90.cuh KF_ROW_RS), where
     * kf_pre loaded its pairs from global memory after the main loop: ncu
     * (H200, 7336e10) had GEMM + bias + residual + LayerNorm 16384 x 256 x
     * 1024 at 42.4 us in the tile, 32.6 without the residual, against
     * cuBLASLt's GEMM 21.7 + its row kernel 16.6; 2.1 warps a scheduler,
     * 8.8 cycles an instruction. */
    sh.row_rs = row_tile && rs_node != KF_NONE && sh.n % 8 == 0 && sh.batch == 1 && !dual;
    uint32_t stage = (128u + sh.bn) * 64u * (uint32_t)es;
    sh.stages = sh.epi_rs || sh.row_rs
                    ? (GEN_SMEM_BLOCK - GEN_SMEM_RS_STATIC - kf_cuda_gemm_smem_rs(sh.bn, 0)) / stage
                    : (GEN_SMEM_BLOCK - GEN_SMEM_STATIC - kf_cuda_gemm_smem(sh.bn, 0)) / stage;
    if (sh.stages > GEN_MAX_STAGES)
        sh.stages = GEN_MAX_STAGES;

    kf_cuda_kernel k;
    memset(&k, 0, sizeof k);
    kf_status st = kf_cuda_codegen_gemm_sm90(gplan, b->gi, b->target->arch, &sh, b->mem, &k);
    /* The 4 chunk buffers' stages count on GEN_SMEM_RS_STATIC; a kernel with
     * the bf16 gelu table (11.5 KiB of static shared memory: an erf gelu)
     * takes the stages the usual reserve leaves (its launch failed on an
     * H100 with 5 stages of 128 x 128: 242 KB of shared memory). */
    if (st == KF_OK && sh.epi_rs && k.source && strstr(k.source, "kf_gelu_tab[")) {
        kf_cuda_kernel_release(b->mem, &k);
        memset(&k, 0, sizeof k);
        sh.stages = (GEN_SMEM_BLOCK - GEN_SMEM_STATIC - kf_cuda_gemm_smem_rs(sh.bn, 0)) / stage;
        st = kf_cuda_codegen_gemm_sm90(gplan, b->gi, b->target->arch, &sh, b->mem, &k);
    }
    if (st == KF_ERR_UNSUPPORTED) {
        snprintf(why, why_size, "%.190s", k.error);
        kf_cuda_kernel_release(b->mem, &k);
        kf_rb_split_free(b->mem, &sc);
        return st;
    }
    if (st != KF_OK) {
        kf_msg_set(b->err, st, "group %u (%s): %s", b->gi, grp->name,
                   k.error[0] ? k.error : kf_status_str(st));
        kf_cuda_kernel_release(b->mem, &k);
        kf_rb_split_free(b->mem, &sc);
        return st;
    }
    bool rs_load = sh.epi_rs && rs_node != KF_NONE; /* the residual's map */
    uint32_t n_maps = (dual || sh.epi_tma ? 3 : 2) + (rs_load ? 1 : 0);
    if (k.n_params + n_maps > KF_CUDA_MAX_PARAMS) {
        kf_cuda_kernel_release(b->mem, &k);
        kf_rb_split_free(b->mem, &sc);
        GEN_NO("more than %d kernel arguments", KF_CUDA_MAX_PARAMS);
    }
    snprintf(name, name_size, "%s", k.name);
    /* the prologue kernel, a step before the GEMM; A is its scratch */
    if (scratch && (st = scratch_a_step(b, &k, &a.buf)) != KF_OK)
        return st;
    /* the statistics pre-pass, a step before the GEMM */
    uint32_t pre_first = b->rc->n_steps;
    if ((norm || fold) && (st = stats_step(b, &k)) != KF_OK)
        return st;
    bool stats_new = b->rc->n_steps > pre_first;
    bool one_pre = fold && !gscale && prepass_one(b) && !b->pre_off &&
                   b->n_pre_jobs + (dual ? 2u : 1u) <= KF_CUDA_PREPASS_JOBS;
    /* the fold pre-pass of each B (none with gamma on A's fragments) */
    for (int i = 0; fold && !gscale && i < (dual ? 2 : 1); i++) {
        const kf_cuda_operand *lbi = i ? &lb1 : &lb;
        kf_cuda_fold_shape fs = {.anchor = i,
                                 .k = sh.k,
                                 .n = sh.n,
                                 .sk = lbi->row_stride,
                                 .sn = lbi->col_stride,
                                 .bias = sh.fold_bias};
        kf_cuda_kernel fk;
        memset(&fk, 0, sizeof fk);
        st = kf_cuda_codegen_gemm_fold(plan, b->gi, b->target->arch, b->mem, &fs, &fk);
        kf_cuda_kstep *fks = NULL;
        if ((st = add_pre_step(b, grp, st, &fk, &k, &fks)) != KF_OK)
            return st;
        /* B as the GEMM would read it: the operand's view */
        for (uint32_t j = 0; j < fks->kernel.n_params; j++)
            if (fks->kernel.params[j].kind == KF_CUDA_PARAM_IN &&
                fks->kernel.params[j].tensor == gm->b[i])
                fks->args[j].buf = (i ? bm1 : bm).buf;
        if (one_pre) {
            b->pre_jobs[b->n_pre_jobs].group = b->gi;
            b->pre_jobs[b->n_pre_jobs].fs = fs;
            b->pre_b[b->n_pre_jobs] = gm->b[i];
            b->pre_view[b->n_pre_jobs++] = (i ? bm1 : bm).buf;
        }
    }
    /* ... or all of them (the set's too) in one launch */
    if (one_pre && (st = merge_prepass(b, pre_first, stats_new, &k)) != KF_OK)
        return st;
    bool pre_one = fold && b->pre_step != 0;
    kf_cuda_kstep *ks = NULL;
    if ((st = kf_rb_add_made_kernel(b, &k, KF_CUDA_ROLE_GEMM, &ks)) != KF_OK) {
        kf_rb_split_free(b->mem, &sc);
        return st;
    }
    if (sh.cluster == 2)
        ks->cluster[0] = 2;
    if (fold && !gscale) { /* B is the pre-pass's diag(gamma) B: contiguous, B's major */
        bm.buf = kf_rb_find(b, KF_CUDA_PARAM_SCRATCH, gm->b[0]);
        if (dual)
            bm1.buf = kf_rb_find(b, KF_CUDA_PARAM_SCRATCH, gm->b[1]);
        b_lead = b1_lead = sh.b_kmajor ? sh.k : sh.n;
        sb = sb1 = 0;
    }
    /* Arguments: the tensor maps (A, B, and the second B of a pair), then
     * the params. */
    memmove(&ks->args[n_maps], &ks->args[0], ks->n_args * sizeof ks->args[0]);
    ks->n_args += n_maps;
    memset(&ks->args[0], 0, n_maps * sizeof ks->args[0]);
    for (uint32_t i = 0; i < n_maps; i++) {
        ks->args[i].kind = KF_CUDA_ARG_TMAP;
        ks->args[i].value = i;
    }
    ks->args[0].buf = a.buf;
    ks->args[1].buf = bm.buf;
    if (dual)
        ks->args[2].buf = bm1.buf;
    if (sh.epi_tma) { /* the output's map: {N, M, batch}, boxes of 64 x 64 */
        for (uint32_t j = 0; j < ks->kernel.n_params; j++)
            if (ks->kernel.params[j].kind == KF_CUDA_PARAM_OUT)
                ks->args[2].buf = ks->args[n_maps + j].buf;
        ks->args[2].written = true;
        set_tmap(&ks->tmaps[2], mm->dtype, true, (uint64_t)sh.n, (uint64_t)sh.m, (uint64_t)sh.batch,
                 sh.n, sh.m * sh.n, 64, 64, es);
        if (gm->head_dim && gm->heads_first) { /* the head view: {D, S, H, batch} */
            kf_cuda_tmap *t = &ks->tmaps[2];
            int64_t D = gm->head_dim, S = gm->m, H = sh.n / D;
            t->rank = 4;
            t->dims[0] = (uint64_t)D;
            t->dims[1] = (uint64_t)S;
            t->dims[2] = (uint64_t)H;
            t->dims[3] = (uint64_t)(sh.m * sh.batch / S);
            t->strides[0] = (uint64_t)(D * (int64_t)es);
            t->strides[1] = (uint64_t)(S * D * (int64_t)es);
            t->strides[2] = (uint64_t)(H * S * D * (int64_t)es);
            t->box[2] = t->box[3] = 1;
        }
    }
    if (rs_load) { /* the residual's map: as the output's, on its buffer */
        const kf_expr *re = &gplan->groups[b->gi].expr[rs_node];
        for (uint32_t j = 0; j < ks->kernel.n_params; j++)
            if (ks->kernel.params[j].kind == KF_CUDA_PARAM_IN &&
                ks->kernel.params[j].tensor == re->base)
                ks->args[3].buf = ks->args[n_maps + j].buf;
        set_tmap(&ks->tmaps[3], re->dtype, true, (uint64_t)sh.n, (uint64_t)sh.m, (uint64_t)sh.batch,
                 sh.n, sh.m * sh.n, 64, 64, es);
    }
    ks->n_tmaps = n_maps;
    /* a K-major B box's rows: half the tile's for a pair or a cluster's half */
    uint32_t b_box = dual || sh.cluster == 2 ? sh.bn / 2 : sh.bn;
    if (sh.a_kmajor)
        set_tmap(&ks->tmaps[0], mm->dtype, sh.a_batched, (uint64_t)sh.k, (uint64_t)sh.m,
                 (uint64_t)sh.batch, a_lead, sa, 64, 128, es);
    else
        set_tmap(&ks->tmaps[0], mm->dtype, sh.a_batched, (uint64_t)sh.m, (uint64_t)sh.k,
                 (uint64_t)sh.batch, a_lead, sa, 64, 64, es);
    for (uint32_t i = 1; i < (dual ? 3u : 2u); i++) {
        int64_t lead = i == 1 ? b_lead : b1_lead, bs = i == 1 ? sb : sb1;
        if (sh.b_kmajor)
            set_tmap(&ks->tmaps[i], mm->dtype, sh.b_batched, (uint64_t)sh.k, (uint64_t)sh.n,
                     (uint64_t)sh.batch, lead, bs, 64, b_box, es);
        else
            set_tmap(&ks->tmaps[i], mm->dtype, sh.b_batched, (uint64_t)sh.n, (uint64_t)sh.k,
                     (uint64_t)sh.batch, lead, bs, 64, 64, es);
    }
    if (b->sib_shape)
        *b->sib_shape = sh;
    char tile[48];
    if (dual)
        snprintf(tile, sizeof tile, "dual 128x(2x%u)", sh.bn / 2);
    else
        snprintf(tile, sizeof tile, "128x%u", sh.bn);
    char raster[96] = ""; /* the internal raster, gelu_tanh and tile counter forms */
    if (sh.raster)
        snprintf(raster, sizeof raster, ", raster %u tile rows", sh.raster);
    if (sh.gelu_mufu)
        snprintf(raster + strlen(raster), sizeof raster - strlen(raster),
                 ", gelu_tanh by MUFU.TANH");
    if (sh.pingpong && sh.pp_varying)
        snprintf(raster + strlen(raster), sizeof raster - strlen(raster),
                 ", the tile counter varying");
    snprintf(why, why_size, "%s tiles %s%s%s%s%s, %u stages, A %s-major, B %s-major%s%s%s", tile,
             sh.pingpong ? "ping-pong" : "cooperative",
             sh.cluster == 2 ? " in 2-CTA clusters (B multicast)" : "",
             !sh.desc_step ? ", wgmma descriptors rebuilt each K step" : "", raster,
             !sh.sk_grid ? ""
             : tiles_of(&sh, dual) * 2 <= sh.sk_grid
                 ? ", each tile's K steps interleaved over SMs (split-K, stream-K's decode form)"
                 : ", the tail's K steps split evenly over the SMs (stream-K)",
             sh.stages, sh.a_kmajor ? "K" : "M", sh.b_kmajor ? "K" : "N",
             sh.epi_staged ? ", epilogue staged in shared memory"
             : sh.epi_pf && sh.epi_tma
                 ? ", epilogue stored by TMA, its row operands prefetched to L2"
             : sh.epi_pf   ? ", its row operands prefetched to L2"
             : rs_load     ? ", epilogue stored by TMA, its residual loaded by TMA under the "
                             "main loop"
             : sh.epi_rs   ? ", epilogue stored by TMA from 4 chunk buffers"
             : sh.epi_tma  ? ", epilogue stored by TMA"
             : sh.epi_pk   ? ", epilogue on packed pairs"
                           : "",
             sh.batch > 1 ? ", batched in one launch" : "",
             norm ? ", norm prologue on A's tiles in shared memory after a statistics pre-pass"
             : gscale
                 ? ", RMSNorm's gamma on A's fragments (wgmma with A from registers, B as it "
                   "is), the row statistics of a pre-pass scale the accumulators"
             : fold && pre_one
                 ? ", norm prologue folded into B (one pre-pass: the row statistics and "
                   "diag(gamma) B; the statistics scale the accumulators)"
             : fold     ? ", norm prologue folded into B (a pre-pass writes diag(gamma) B; the row "
                          "statistics scale the accumulators) after a statistics pre-pass"
             : scratch  ? ", A from the prologue kernel's scratch"
             : row_tile ? ", row epilogue in the tile (the rows' statistics reduced in registers)"
                        : "");
    if (sh.fold_bias && why_size > 0) {
        size_t n = strlen(why);
        snprintf(why + n, why_size - n, ", the bias in the fold's column terms");
    }
    if (gm->row_split) {
        st = kf_rb_split_row_pass(b, &sc, why, why_size);
        kf_rb_split_free(b->mem, &sc);
        return st;
    }
    return KF_OK;
#undef GEN_NO
}

uint32_t kf_rb_open_lt_variant(rb *b) {
    kf_cuda_recipe *rc = b->rc;
    rc->choice = KF_CUDA_CHOICE_MEASURED;
    rc->n_variants = 2;
    rc->variants[1].first_step = rc->n_steps;
    rc->variants[1].n_steps = 0;
    snprintf(rc->variants[1].label, sizeof rc->variants[1].label, "cublaslt");
    return 1;
}

kf_status kf_rb_gemm(rb *b) {
    const kf_group *grp = &b->plan->groups[b->gi];
    kf_status st;
    /* A GEMM sibling set's first member runs the whole set unless asked not
     * to (recipe_gemm_siblings.c); a set it cannot run so leaves each member
     * to itself. */
    if (!(b->target->flags & KF_CUDA_RECIPE_GEMM_NO_SIBLINGS) && kf_group_in_gemm_sib_set(grp) &&
        grp->gemm.sib_index == 0) {
        st = kf_rb_gemm_siblings(b);
        if (st != KF_ERR_UNSUPPORTED)
            return st;
    }

    /* 0. The generated kernel, alone or measured against cuBLASLt (below). */
    unsigned want =
        b->target->flags & (KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_MEASURED);
    uint32_t vi = 0; /* the variant the cuBLASLt steps go to */
    char gen_why[300] = "", gen_name[KF_CUDA_NAME_MAX] = "";
    /* Every generated kernel is measured against cuBLASLt unless a side is
     * forced. The dual (SwiGLU) kernel: its GPU numerics passed forced (H100,
     * b112146, and 3564041 with the register epilogue), and the measured
     * choice with it ran there (bench swiglu: generated 1.83 ms against
     * cuBLASLt x2 + the epilogue kernel's 1.93, chosen). The norm-prologue
     * kernel's measured choice is a two-step variant (the statistics
     * pre-pass, then the GEMM) against the prologue kernel + cuBLASLt; it
     * ran on an H100 (branch rowgemm, b09758b + this change) with the chosen
     * side's numerics checked against the reference: test_cuda_exec's
     * test_measured_gemm_names_both_sides, RMSNorm ragged 1000x264x1096 and
     * LayerNorm batch-folded with a bias, measured and default, and one norm
     * shared by two GEMMs, bf16 and f16; the kernel itself passed forced
     * before (test_generated_gemms_match_the_reference). A prologue the
     * kernel cannot apply itself (a SwiGLU pair, a transposed A) runs as
     * the prologue kernel into scratch, then the generated GEMM on it. */
    /* On 8.x the generated side is the sm_80 (mma.sync) kernel, measured
     * against cuBLASLt the same way. Its GPU numerics, forced on an H200
     * (branch sm80, ff30c91): test_cuda_exec's
     * test_sm80_gemms_match_the_reference (every epilogue case, ragged
     * M/N/K, M = 1, K = 24, batched, broadcast, transposed; bf16 and f16),
     * every example with --gemm sm80 --check (30/30), compute-sanitizer
     * memcheck and racecheck on a ragged 1100x2056x200 GEMM + bias + GELU +
     * residual (clean). No A100 has timed the pair yet: which side wins
     * there is the device's own measurement, stored beside the kernel. */
    if (want) {
        st = kf_rb_gemm_generated(b, gen_why, sizeof gen_why, gen_name, sizeof gen_name);
        if (st == KF_OK) {
            kf_cuda_recipe *rc = b->rc;
            snprintf(rc->variants[0].label, sizeof rc->variants[0].label, "generated");
            if (b->dec_why[0])
                kf_rb_how(b, 0, "generated kernel %s (%s; not the decode kernel: %s)", gen_name,
                          gen_why, b->dec_why);
            else
                kf_rb_how(b, 0, "generated kernel %s (%s)", gen_name, gen_why);
            if (want & KF_CUDA_RECIPE_GEMM_GENERATED)
                return KF_OK;
            vi = kf_rb_open_lt_variant(b);
            gen_why[0] = 0;
        } else if (st != KF_ERR_UNSUPPORTED) {
            return st;
        }
    }
    return kf_rb_gemm_lt(b, vi, gen_why);
}

kf_status kf_rb_gemm_lt(rb *b, uint32_t vi, const char *gen_why) {
    const kf_plan *plan = b->plan;
    const kf_group *grp = &plan->groups[b->gi];
    const kf_graph *g = plan->graph;
    const kf_gemm_info *gm = &grp->gemm;
    kf_status st;
    char pro_name[KF_CUDA_NAME_MAX] = "", epi_name[KF_CUDA_NAME_MAX] = "";

    /* 1. A norm prologue on A: a kernel writes A into scratch. */
    bool shared_a = b->sib_shared && gm->a_prologue &&
                    kf_rb_find(b, KF_CUDA_PARAM_SCRATCH, gm->a[0]).kind != KF_CUDA_BUF_NONE;
    if (shared_a)
        snprintf(pro_name, sizeof pro_name, "(the set's first member's)");
    if (gm->a_prologue && !shared_a) {
        st = kf_rb_add_kernel(b, plan, KF_CUDA_ROLE_GEMM_PROLOGUE, pro_name, sizeof pro_name, NULL);
        if (st == KF_ERR_NOT_FOUND)
            return kf_msg_set(b->err, KF_ERR_INTERNAL,
                              "group %u (%s) has a norm prologue but the codegen made no "
                              "kernel for it",
                              b->gi, grp->name);
        if (st != KF_OK)
            return st;
    }

    /* 2. What cuBLASLt can apply itself. */
    uint32_t *uses = kf_mem_calloc(b->mem, grp->n_expr + 1, sizeof *uses);
    bool *live = kf_mem_calloc(b->mem, grp->n_expr + 1, sizeof *live);
    if (!uses || !live) {
        kf_mem_free(b->mem, uses, (grp->n_expr + 1) * sizeof *uses);
        kf_mem_free(b->mem, live, (grp->n_expr + 1) * sizeof *live);
        return kf_msg_set(b->err, KF_ERR_OUT_OF_MEMORY, "out of memory");
    }
    count_uses(grp, uses, live);
    uint32_t acc = gm->n_anchors == 1 ? find_acc(grp, 0) : KF_NONE;
    epi_match m = {.top = acc, .epi = KF_CUDA_LT_EPI_NONE, .bias = KF_NONE, .residual = KF_NONE};
    snprintf(m.why, sizeof m.why, "no epilogue");
    bool no_lt_epi = (b->target->flags & KF_CUDA_RECIPE_NO_LT_EPILOGUE) != 0;
    if (acc != KF_NONE && !gm->row_epilogue && !no_lt_epi)
        match_epilogue(grp, g, acc, uses, &m);
    else if (gm->n_anchors == 2)
        snprintf(m.why, sizeof m.why, "two GEMMs share A (SwiGLU): cuBLASLt runs each bare");
    else if (gm->row_split)
        snprintf(m.why, sizeof m.why,
                 "a norm over rows of N=%lld follows the GEMM (split row form: the row pass "
                 "computes its statistics)",
                 (long long)gm->n);
    else if (gm->row_epilogue)
        snprintf(m.why, sizeof m.why, "a row-wise norm follows the GEMM");
    else if (no_lt_epi)
        snprintf(m.why, sizeof m.why, "cuBLASLt epilogues are off");
    kf_mem_free(b->mem, uses, (grp->n_expr + 1) * sizeof *uses);
    kf_mem_free(b->mem, live, (grp->n_expr + 1) * sizeof *live);

    /* Every write is m.top, or the bare matmul, and only one of them: cuBLASLt
     * writes the output and no kernel is needed. */
    bool all_native =
        grp->n_writes == 1 && gm->n_anchors == 1 && !gm->row_epilogue &&
        (grp->roots[0] == KF_NONE || (acc != KF_NONE && grp->roots[0] == m.top && m.top != acc));
    if (grp->n_writes == 1 && grp->roots[0] != KF_NONE && acc != KF_NONE && grp->roots[0] == acc)
        all_native = true; /* the write is the ACC node itself */

    /* 3. The GEMM(s). */
    for (int i = 0; i < gm->n_anchors; i++) {
        gemm_req r;
        memset(&r, 0, sizeof r);
        r.mm = g->nodes[gm->anchor[i]];
        if ((st = a_operand(b, i, &r.a)) != KF_OK)
            return st;
        r.b = mref_of(b, gm->b[i]);
        if (all_native) {
            r.d = kf_rb_tensor(b, grp->writes[0]);
            r.epi = m.epi;
            if (m.bias != KF_NONE)
                r.bias = kf_rb_tensor(b, grp->expr[m.bias].base);
            if (m.residual != KF_NONE)
                r.c = kf_rb_tensor(b, grp->expr[m.residual].base);
        } else {
            /* cuBLASLt writes the prefix (or the bare product) into the ACC
             * buffer the epilogue kernel reads: the matmul's own buffer when
             * the bare product is also a write, else a scratch. */
            bool prefix = i == 0 && gm->n_anchors == 1 && acc != KF_NONE && m.top != acc;
            r.epi = prefix ? m.epi : KF_CUDA_LT_EPI_NONE;
            /* A write whose value is exactly what cuBLASLt leaves: the bare
             * product (the codegen leaves ACC-rooted writes to cuBLASLt), or
             * the prefix's top node. cuBLASLt writes straight into it. */
            uint32_t direct = KF_NONE;
            for (uint32_t w = 0; w < grp->n_writes; w++) {
                uint32_t rt = grp->roots[w];
                bool bare = (rt == KF_NONE && grp->writes[w] == gm->anchor[i]) ||
                            (rt != KF_NONE && grp->expr[rt].kind == KF_EXPR_ACC &&
                             grp->expr[rt].anchor == i);
                if (prefix ? rt == m.top : bare)
                    direct = grp->writes[w];
            }
            if (direct != KF_NONE) {
                r.d = kf_rb_tensor(b, direct);
                st = kf_rb_set(b, KF_CUDA_PARAM_ACC, gm->anchor[i], r.d);
            } else {
                st = kf_rb_get(b, KF_CUDA_PARAM_ACC, gm->anchor[i],
                               (uint64_t)kf_ir_numel(r.mm) * kf_dtype_size(r.mm->dtype), &r.d);
            }
            if (st != KF_OK)
                return st;
            if (prefix && m.bias != KF_NONE)
                r.bias = kf_rb_tensor(b, grp->expr[m.bias].base);
            if (prefix && m.residual != KF_NONE)
                r.c = kf_rb_tensor(b, grp->expr[m.residual].base);
        }
        if ((st = add_gemm(b, &r)) != KF_OK)
            return st;
    }

    /* 4. The rest of the epilogue: one generated kernel. */
    if (!all_native) {
        if (acc != KF_NONE && m.top != acc)
            st = add_epilogue_after(b, acc, m.top, epi_name, sizeof epi_name);
        else
            st = kf_rb_add_kernel(b, plan, KF_CUDA_ROLE_EPILOGUE, epi_name, sizeof epi_name, NULL);
        if (st == KF_ERR_NOT_FOUND)
            st = KF_OK;
        if (st != KF_OK)
            return st;
        for (uint32_t w = 0; w < grp->n_writes; w++) {
            /* Only when cuBLASLt wrote a prefix, not the bare product. */
            uint32_t rt = grp->roots[w];
            bool bare = rt == KF_NONE || grp->expr[rt].kind == KF_EXPR_ACC;
            if (!bare || acc == KF_NONE || m.top == acc || gm->n_anchors != 1)
                continue;
            /* The bare matmul is a write: copy cuBLASLt's result there by
             * running the GEMM once more into the write's buffer. */
            gemm_req r;
            memset(&r, 0, sizeof r);
            uint32_t wi = grp->writes[w];
            int ai = wi == gm->anchor[0] ? 0 : 1;
            r.mm = g->nodes[wi];
            r.epi = KF_CUDA_LT_EPI_NONE;
            if ((st = a_operand(b, ai, &r.a)) != KF_OK)
                return st;
            r.b = mref_of(b, gm->b[ai]);
            r.d = kf_rb_tensor(b, wi);
            if ((st = add_gemm(b, &r)) != KF_OK)
                return st;
        }
    }
    char epi_desc[96];
    snprintf(epi_desc, sizeof epi_desc, "%s%s", kf_cuda_lt_epilogue_name(m.epi),
             m.residual != KF_NONE ? "+beta*C" : "");
    char gen_note[340] = "";
    if (gen_why[0])
        snprintf(gen_note, sizeof gen_note, "; no generated GEMM: %s", gen_why);
    if (all_native)
        kf_rb_how(b, vi, "cuBLASLt%s, epilogue %s (%s)%s%s%s", gm->n_anchors == 2 ? " x2" : "",
                  epi_desc, m.why, pro_name[0] ? "; prologue kernel " : "", pro_name, gen_note);
    else
        kf_rb_how(b, vi, "cuBLASLt%s, epilogue %s, then kernel %s (%s)%s%s%s",
                  gm->n_anchors == 2 ? " x2" : "", epi_desc, epi_name[0] ? epi_name : "-", m.why,
                  pro_name[0] ? "; prologue kernel " : "", pro_name, gen_note);
    return KF_OK;
}

/* ------------------------------------------------------------------------ */
/* Attention (unfused fallback)                                               */
/* ------------------------------------------------------------------------ */

kf_status kf_rb_attention(rb *b) {
    const kf_plan *plan = b->plan;
    const kf_group *grp = &plan->groups[b->gi];
    const kf_graph *g = plan->graph;
    const kf_attn_info *at = &grp->attn;
    const kf_tensor *qk = g->nodes[at->qk], *pv = g->nodes[at->pv];

    /* The fused kernel when it takes the group and is not switched off
     * (recipe_attention.c); else the unfused steps below, and the report
     * says why. */
    char why[320];
    bool fused = false;
    kf_status fst = kf_rb_attention_fused(b, why, sizeof why, &fused);
    if (fused || fst != KF_OK)
        return fst;

    /* The unfused steps write O alone. */
    if (at->lse != KF_NONE)
        return kf_msg_set(b->err, KF_ERR_UNSUPPORTED,
                          "group %u (%s): the attention group also writes the log-sum-exp of its "
                          "scores (%%%u), which only the fused kernels write, and they do not "
                          "take it: %s",
                          b->gi, grp->name, at->lse, why);

    /* 1. S = Q . K^T into the scores scratch. */
    gemm_req r;
    memset(&r, 0, sizeof r);
    r.mm = qk;
    r.a = mref_of(b, at->q);
    r.b = mref_of(b, at->k);
    kf_status st = kf_rb_get(b, KF_CUDA_PARAM_SCORES, at->qk,
                             (uint64_t)kf_ir_numel(qk) * kf_dtype_size(qk->dtype), &r.d);
    if (st == KF_OK)
        st = add_gemm(b, &r);
    if (st != KF_OK)
        return st;

    /* 2. P = softmax(score expression) by a generated row-wise kernel, which
     * writes the softmax tensor's buffer: P, the second GEMM's A. */
    char name[KF_CUDA_NAME_MAX] = "";
    st = kf_rb_add_kernel(b, plan, KF_CUDA_ROLE_ATTENTION_SOFTMAX, name, sizeof name, NULL);
    if (st == KF_ERR_NOT_FOUND)
        return kf_msg_set(b->err, KF_ERR_INTERNAL, "group %u: no softmax kernel", b->gi);
    if (st != KF_OK)
        return st;

    /* 3. O = P . V. */
    memset(&r, 0, sizeof r);
    r.mm = pv;
    r.a = mref_contiguous(b, at->softmax, kf_rb_tensor(b, at->softmax));
    r.b = mref_of(b, at->v);
    r.d = kf_rb_tensor(b, at->out); /* pv, or the permute of it the group absorbed */
    r.d_strides = at->o_strides;
    if ((st = add_gemm(b, &r)) != KF_OK)
        return st;
    kf_rb_how(b, 0,
              "unfused fallback: cuBLASLt Q.K^T, kernel %s (score expression, mask %s), "
              "cuBLASLt P.V (%s)",
              name, kf_mask_kind_name(at->mask), why);
    return KF_OK;
}
