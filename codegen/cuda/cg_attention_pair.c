/*
 * cg_attention_pair.c -- the pair form of an attention group's inner score
 * (kf_score_pair), which the sm_90a kernel's main loop calls for each two
 * neighbouring keys of a row where the generator emits it (KF_SCORE_PAIR,
 * templates/attention_sm90.cuh). See emit_score_pair below; cg_attention.c
 * owns the scalar score functions it stands beside.
 */
#include "codegen/cuda/cg.h"

#include <limits.h>
#include <math.h>

/* The pair form of the inner score (kf_score_pair: the elements (q, kv) and
 * (q, kv + 1), which the sm_90a kernel's accumulator gives one thread side
 * by side), where it takes fewer instructions than two calls of
 * kf_score_inner: a bf16 add, sub or mul of two bf16 values, rounded to bf16,
 * is one bf16x2 instruction for both (the product of two bf16 values is exact
 * in f32, and the sum of two rounds to bf16 as their f32 sum does: the same
 * bits as the scalar form's f32 op and rounding); a rounding whose value
 * feeds such ops packs both elements in one cvt.rn.bf16x2.f32; and the cast
 * of an index that grows by one from kv to kv + 1 (kv - q) converts once and
 * adds 1 (exact below 2^24). Each node's form follows from its users (pair_*
 * below): floats where a scalar op or the softmax reads it, packed where a
 * bf16x2 op does. Nodes that vary with neither the score nor kv are computed
 * once. Only what ALiBi- and softcap-like scores hold: the score, indices,
 * integer add/sub/mul/neg, casts, float unary and binary ops, loads that do
 * not vary along the keys, constants, the mask's where() replaced by its kept
 * branch; anything else keeps the scalar form. */
enum { PR_F = 0, PR_P, PR_I };
typedef struct pair_rep {
    uint8_t kind; /* PR_F floats pN_0 / pN_1; PR_P bf16x2 pN_p; PR_I ints pN_0 / pN_1 */
    bool dep;     /* varies with the score or kv (else one value, pN_0 alone) */
    bool exact;   /* the values are bf16 values exactly */
    bool has_f;   /* PR_P: unpacked into pN_0 / pN_1 too */
    bool has_p;   /* PR_F: packed into pN_p too */
    bool want_f;  /* a user reads the floats */
    bool want_p;  /* a user reads the bf16x2 pair */
    bool packed;  /* the node is a bf16x2 op */
    int kvc;      /* PR_I: pN_1 is pN_0 + kvc (1, -1), the same (0), or any (2) */
} pair_rep;

typedef struct pair_ctx {
    cg *c;
    pair_rep *r;
    uint32_t *name; /* the node whose names hold node i's value (the mask's where: its branch) */
    int cost;       /* instructions a pair, roughly: the pair form's */
    int scalar;     /* and two scalar calls' */
    void *user;     /* the coordinates (a chunk_ctx) */
    const bool *on; /* emit only the nodes i with on[i] (NULL: every needed node) */
    uint32_t in;    /* the node whose pair comes in as in_src's bits (KF_NONE: none) */
    const char *in_src;
    uint32_t ident; /* a tanh node that takes its operand's pair (KF_NONE: none) */
} pair_ctx;

static void pair_op(pair_ctx *p, uint32_t i, int k);

/* The output axis an index node reads (an iota's axis, or the batch, head,
 * query or key axis of the score's R dims), or INT_MIN where e is no index. */
static int index_axis(const kf_expr *e, int R) {
    switch (e->kind) {
    case KF_EXPR_INDEX:
        return e->axis;
    case KF_EXPR_BATCH:
        return R - 4;
    case KF_EXPR_HEAD:
        return R - 3;
    case KF_EXPR_Q_IDX:
        return R - 2;
    case KF_EXPR_KV_IDX:
        return R - 1;
    default:
        return INT_MIN;
    }
}

static const char *pair_rnd(const pair_ctx *p, uint32_t i) {
    const kf_expr *e = &p->c->g->expr[i];
    return e->kind == KF_EXPR_OP && e->tensor != KF_NONE && !p->c->score_f32 ? cg_round_fn(e->dtype)
                                                                             : NULL;
}

/* Node i's floats (unpacking its pair the first time). */
static void pair_get_f(pair_ctx *p, uint32_t i) {
    uint32_t n = p->name[i];
    pair_rep *r = &p->r[n];
    if (r->kind != PR_P || r->has_f)
        return;
    cg_printf(&p->c->s, "    const float p%u_0 = kf_lo_bf16(p%u_p), p%u_1 = kf_hi_bf16(p%u_p);\n",
              n, n, n, n);
    r->has_f = true;
    p->cost += r->dep ? 2 : 0;
}

/* Node i's bf16x2 pair (packing its exact floats the first time). */
static void pair_get_p(pair_ctx *p, uint32_t i) {
    uint32_t n = p->name[i];
    pair_rep *r = &p->r[n];
    if (r->kind == PR_P || r->has_p)
        return;
    cg_printf(&p->c->s, "    const unsigned p%u_p = kf_pk_bf16(p%u_0, p%u_%d);\n", n, n, n,
              r->dep ? 1 : 0);
    r->has_p = true;
    p->cost += r->dep ? 1 : 0;
}

/* Whether node s holds bf16 values exactly in the pair form (an op node only
 * where it is rounded: not with c->score_f32). */
static bool pair_exact(const pair_ctx *p, uint32_t s) {
    const cg *c = p->c;
    const kf_expr *e = &c->g->expr[s];
    if (p->name[s] != s)
        return pair_exact(p, p->name[s]);
    if (e->dtype != KF_DTYPE_BF16)
        return false;
    if (e->kind == KF_EXPR_CONST)
        return true;
    if (e->kind == KF_EXPR_LOAD)
        return cg_exact_bf16(c, s);
    return e->kind == KF_EXPR_OP && e->tensor != KF_NONE && !c->score_f32;
}

/* Pass 1: each needed node's kind, dependence and bf16x2 form, and its
 * operands' wants; false where a node has no pair form. */
static bool pair_plan(pair_ctx *p) {
    cg *c = p->c;
    const kf_group *g = c->g;
    const int R = g->rank;
    for (uint32_t i = 0; i < c->n; i++) {
        if (!c->need[i] || p->name[i] != i)
            continue;
        const kf_expr *e = &g->expr[i];
        pair_rep *r = &p->r[i];
        r->kind = PR_F;
        if (e->kind == KF_EXPR_SCORE) {
            r->dep = true;
            continue;
        }
        if (e->kind == KF_EXPR_CONST) {
            if (e->dtype == KF_DTYPE_I32)
                r->kind = PR_I;
            else if (e->dtype != KF_DTYPE_BF16 && e->dtype != KF_DTYPE_F32)
                return false;
            continue;
        }
        if (e->kind == KF_EXPR_LOAD) {
            if (e->strides[R - 1] != 0 || e->src[0] != KF_NONE || e->space != KF_SPACE_OUT ||
                (e->dtype != KF_DTYPE_BF16 && e->dtype != KF_DTYPE_F32))
                return false;
            continue;
        }
        int axis = index_axis(e, R);
        if (axis != INT_MIN) {
            if (e->dtype != KF_DTYPE_I32 || e->space != KF_SPACE_OUT)
                return false;
            r->kind = PR_I;
            r->dep = axis == R - 1;
            r->kvc = r->dep ? 1 : 0;
            continue;
        }
        if (e->kind != KF_EXPR_OP)
            return false;
        int ar = kf_op_has(e->op, KF_TRAIT_BINARY) ? 2 : 1;
        for (int k = 0; k < ar; k++)
            r->dep |= p->r[p->name[e->src[k]]].dep;
        const pair_rep *a = &p->r[p->name[e->src[0]]];
        const pair_rep *b = ar == 2 ? &p->r[p->name[e->src[1]]] : NULL;
        if (e->dtype == KF_DTYPE_I32) {
            if (!cg_i32_exact(g, i) || a->kind != PR_I || (b && b->kind != PR_I))
                return false;
            r->kind = PR_I;
            if (e->op == KF_OP_ADD && b)
                r->kvc = a->kvc + b->kvc;
            else if (e->op == KF_OP_SUB && b)
                r->kvc = a->kvc - b->kvc;
            else if (e->op == KF_OP_NEG && !b)
                r->kvc = -a->kvc;
            else if (e->op == KF_OP_MUL && b)
                r->kvc = a->kvc == 0 && b->kvc == 0 ? 0 : 2;
            else
                return false;
            if (a->kvc == 2 || (b && b->kvc == 2) || r->kvc < -1 || r->kvc > 1)
                r->kvc = r->dep ? 2 : 0;
            continue;
        }
        if (e->dtype != KF_DTYPE_BF16 && e->dtype != KF_DTYPE_F32)
            return false;
        if (e->op == KF_OP_CAST) {
            kf_dtype from = g->expr[e->src[0]].dtype;
            if (from != KF_DTYPE_I32 && from != KF_DTYPE_BF16 && from != KF_DTYPE_F32)
                return false;
        } else if (!((ar == 2 && kf_op_has(e->op, KF_TRAIT_BINARY)) ||
                     (ar == 1 && kf_op_has(e->op, KF_TRAIT_UNARY))) ||
                   !cg_op_fn(e->op) || kf_op_has(e->op, KF_TRAIT_COMPARE)) {
            return false;
        }
        if ((a->kind == PR_I) !=
                (e->op == KF_OP_CAST && g->expr[e->src[0]].dtype == KF_DTYPE_I32) ||
            (b && b->kind == PR_I))
            return false;
        r->packed = r->dep && !c->score_f32 && e->dtype == KF_DTYPE_BF16 && e->tensor != KF_NONE &&
                    b && (e->op == KF_OP_ADD || e->op == KF_OP_SUB || e->op == KF_OP_MUL) &&
                    pair_exact(p, e->src[0]) && pair_exact(p, e->src[1]);
        for (int k = 0; k < ar; k++) {
            pair_rep *s = &p->r[p->name[e->src[k]]];
            if (r->packed)
                s->want_p = true;
            else
                s->want_f = true;
        }
    }
    p->r[p->name[g->attn.score]].want_f = true;
    return p->r[p->name[g->attn.score]].dep;
}

/* Pass 2: the statements of every needed node, in node order. */
static void pair_emit(pair_ctx *p) {
    cg *c = p->c;
    const kf_group *g = c->g;
    const int R = g->rank;
    for (uint32_t i = 0; i < c->n && c->st == KF_OK; i++) {
        if (!c->need[i] || p->name[i] != i)
            continue;
        const kf_expr *e = &g->expr[i];
        pair_rep *r = &p->r[i];
        const char *rnd = pair_rnd(p, i);
        if (i == p->in && c->score_f32) {
            /* the diagonal's floats as kf_score_diag gave them (a float2) */
            cg_printf(&c->s, "    const float p%u_0 = %s.x, p%u_1 = %s.y;\n", i, p->in_src, i,
                      p->in_src);
            continue;
        }
        if (i == p->in) {
            /* the split's node as kf_score_pre left it (pair_split), or
             * the diagonal's as kf_score_diag gave it (pair_diag) */
            cg_printf(&c->s, "    const unsigned p%u_p = %s;\n", i, p->in_src);
            r->kind = PR_P;
            r->exact = true;
            continue;
        }
        if (p->on && !p->on[i])
            continue;
        if (i == p->ident) {
            /* tanh(x) rounds to x itself: where every |x| is at most
             * KF_TANH_IDENT_MAX (pair_split) */
            pair_get_p(p, e->src[0]);
            cg_printf(&c->s, "    const unsigned p%u_p = p%u_p;\n", i, p->name[e->src[0]]);
            r->kind = PR_P;
            r->exact = true;
            if (r->want_f)
                pair_get_f(p, i);
            continue;
        }
        if (e->kind == KF_EXPR_SCORE) {
            cg_printf(&c->s, "    const float p%u_0 = s0, p%u_1 = s1;\n", i, i);
            continue;
        }
        if (!r->dep || e->kind != KF_EXPR_OP) {
            /* one value for both: a constant, an index, a load, an op on them */
            const bool in = r->kind == PR_I;
            const int axis = index_axis(e, R);
            if (axis != INT_MIN) {
                if (axis == R - 1)
                    cg_printf(&c->s,
                              "    const int p%u_0 = kv, p%u_1 = kv + 1;\n    (void)p%u_1;\n", i, i,
                              i);
                else
                    cg_printf(&c->s, "    const int p%u_0 = (int)(%s);\n", i,
                              axis < 0 ? "0" : cg_coord_of(p->user, KF_SPACE_OUT, axis));
                continue;
            }
            cg_printf(&c->s, "    const %s p%u_0 = ", in ? "int" : "float", i);
            if (e->kind == KF_EXPR_CONST) {
                cg_emit_const(c, e->dtype, e->value);
            } else if (e->kind == KF_EXPR_LOAD) {
                cg_printf(&c->s, "(float)(%s)", c->ov[i]);
            } else {
                if (rnd)
                    cg_printf(&c->s, "%s(", rnd);
                pair_op(p, i, 0);
                if (rnd)
                    cg_puts(&c->s, ")");
            }
            cg_puts(&c->s, ";\n");
            continue;
        }
        p->scalar += 2 * (1 + (rnd ? 1 : 0));
        if (r->kind == PR_I) {
            cg_printf(&c->s, "    const int p%u_0 = ", i);
            pair_op(p, i, 0);
            cg_printf(&c->s, ";\n    const int p%u_1 = ", i);
            if (r->kvc == 0 || r->kvc == 1 || r->kvc == -1)
                cg_printf(&c->s, "p%u_0 + %d", i, r->kvc);
            else
                pair_op(p, i, 1);
            cg_printf(&c->s, ";\n    (void)p%u_1;\n", i);
            p->cost += r->kvc == 0 ? 1 : 2;
            continue;
        }
        if (r->packed) {
            pair_get_p(p, e->src[0]);
            pair_get_p(p, e->src[1]);
            cg_printf(&c->s, "    const unsigned p%u_p = kf_bop2<%d>(p%u_p, p%u_p);\n", i,
                      e->op == KF_OP_ADD   ? 0
                      : e->op == KF_OP_SUB ? 1
                                           : 2,
                      p->name[e->src[0]], p->name[e->src[1]]);
            r->kind = PR_P;
            r->exact = true;
            p->cost += 1;
            if (r->want_f)
                pair_get_f(p, i);
            continue;
        }
        /* two scalar ops; a cast of an index growing by one converts once */
        const kf_expr *se = &g->expr[e->src[0]];
        const pair_rep *a = &p->r[p->name[e->src[0]]];
        int64_t lo = 0, hi = 0;
        const bool step = e->op == KF_OP_CAST && se->dtype == KF_DTYPE_I32 &&
                          (a->kvc == 1 || a->kvc == -1) && cg_i32_range(g, e->src[0], &lo, &hi) &&
                          lo > -(INT64_C(1) << 23) && hi < (INT64_C(1) << 23);
        int ar = kf_op_has(e->op, KF_TRAIT_BINARY) ? 2 : 1;
        for (int k = 0; k < ar; k++)
            pair_get_f(p, e->src[k]);
        const char *raw = rnd ? "r" : "";
        cg_printf(&c->s, "    const float p%u_%s0 = ", i, raw);
        pair_op(p, i, 0);
        cg_printf(&c->s, ";\n    const float p%u_%s1 = ", i, raw);
        if (step)
            cg_printf(&c->s, "p%u_%s0 + %s", i, raw, a->kvc == 1 ? "1.0f" : "-1.0f");
        else
            pair_op(p, i, 1);
        cg_puts(&c->s, ";\n");
        p->cost += 2;
        if (!rnd)
            continue;
        if (r->want_f || e->dtype != KF_DTYPE_BF16) {
            cg_printf(&c->s, "    const float p%u_0 = %s(p%u_r0), p%u_1 = %s(p%u_r1);\n", i, rnd, i,
                      i, rnd, i);
            r->exact = e->dtype == KF_DTYPE_BF16;
            p->cost += 2;
        } else {
            /* both roundings in one conversion, packed for the bf16x2 user */
            cg_printf(&c->s, "    const unsigned p%u_p = kf_rnd2_bf16(p%u_r0, p%u_r1);\n", i, i, i);
            r->kind = PR_P;
            r->exact = true;
            p->cost += 1;
        }
    }
}

/* Node i's op for element k (0: (q, kv), 1: (q, kv + 1)) on its operands'
 * floats or ints. */
static void pair_op(pair_ctx *p, uint32_t i, int k) {
    cg *c = p->c;
    const kf_group *g = c->g;
    const kf_expr *e = &g->expr[i];
    const uint32_t a = p->name[e->src[0]];
    const uint32_t b = kf_op_has(e->op, KF_TRAIT_BINARY) ? p->name[e->src[1]] : a;
    /* a uniform operand has one value, pN_0 */
    const int ka = p->r[a].dep ? k : 0, kb = p->r[b].dep ? k : 0;
    if (e->op == KF_OP_CAST) {
        cg_printf(&c->s, "(%s)p%u_%d", e->dtype == KF_DTYPE_I32 ? "int" : "float", a, ka);
        return;
    }
    if (e->op == KF_OP_NEG && e->dtype == KF_DTYPE_I32) {
        cg_printf(&c->s, "(-p%u_%d)", a, ka);
        return;
    }
    if (!kf_op_has(e->op, KF_TRAIT_BINARY)) {
        cg_printf(&c->s, "%s(p%u_%d)", cg_op_fn(e->op), a, ka);
        return;
    }
    if (e->dtype == KF_DTYPE_I32) {
        cg_printf(&c->s, "(p%u_%d %c p%u_%d)", a, ka,
                  e->op == KF_OP_ADD   ? '+'
                  : e->op == KF_OP_SUB ? '-'
                                       : '*',
                  b, kb);
    } else if (c->div_by_mul && e->op == KF_OP_DIV && g->expr[e->src[1]].kind == KF_EXPR_CONST &&
               isnormal((float)(1.0 / g->expr[e->src[1]].value))) {
        /* x / c as x * (1 / c), as cg_emit_nodes writes it */
        cg_printf(&c->s, "kf_mul(p%u_%d, ", a, ka);
        cg_emit_const(c, e->dtype, 1.0 / g->expr[e->src[1]].value);
        cg_puts(&c->s, ")");
    } else {
        cg_printf(&c->s, "%s(p%u_%d, p%u_%d)", cg_op_fn(e->op), a, ka, b, kb);
    }
}

unsigned cg_tanh_ident_max(void) {
    /* below 2^-5 tanh(x) = x (1 - e) with e < x^2 / 3 < 2^-11.5, under half
     * of x's ulp (2^-9 of x at least, where x is a power of two): x itself */
    uint32_t h = 0x3d00u;
    for (; h < 0x7f80u; h++) {
        const uint32_t b = (h + 1) << 16;
        float x;
        memcpy(&x, &b, sizeof x);
        if (kf_ir_round(KF_DTYPE_BF16, kf_ir_scalar(KF_OP_TANH, KF_DTYPE_BF16, x, 0, 0)) != x)
            break;
    }
    return h;
}

/* Marks on[root] and on[] of every node root is made of, through the pair
 * names and the op nodes, not past node stop (whose value comes in; KF_NONE:
 * none); what on[] held stays marked. */
static void pair_marks(const pair_ctx *p, bool *on, uint32_t root, uint32_t stop) {
    const kf_group *g = p->c->g;
    on[root] = true;
    for (uint32_t j = root + 1; j-- > 0;) {
        const kf_expr *e = &g->expr[j];
        if (!on[j] || j == stop || e->kind != KF_EXPR_OP)
            continue;
        const int ar = kf_op_has(e->op, KF_TRAIT_BINARY) ? 2 : 1;
        for (int k = 0; k < ar; k++)
            on[p->name[e->src[k]]] = true;
    }
}

/* The split of the pair form at a tanh: node t = tanh(u), both bf16 nodes
 * rounded as the reference stores them and varying with the score, where
 * every node after u that varies with the score reads the nodes before it
 * only through u (or through an index, which the second half computes
 * again). The kernel then computes u's pair for all of a tile's scores
 * first (kf_score_pre), with the largest |u|, and where the warp's is at
 * most cg_tanh_ident_max() -- tanh(u) rounds to u itself there -- takes t as
 * u (kf_score_post_ident: no MUFU.TANH, its rounding nor u's unpacking), else
 * the tanh (kf_score_post), and from then on the item's tiles take the pair
 * form whole (kf_score_pair: its MUFU.TANHs beside the other work, where the
 * split's wait for every operand). Inner key tile of the bench's softcap
 * (SASS, a consumer thread, 64 scores): 449 instructions, 64 MUFU, in the
 * pair form; split 265 + 99, no MUFU, where tanh(u) is u, 265 + 258 with 64
 * where not. Returns t, or KF_NONE; anc[i]: node i is u or one u is made
 * of. */
static uint32_t pair_split(const pair_ctx *p, bool *anc) {
    const cg *c = p->c;
    const kf_group *g = c->g;
    const int R = g->rank;
    uint32_t t = KF_NONE;
    for (uint32_t i = 0; i < c->n && t == KF_NONE; i++) {
        const kf_expr *e = &g->expr[i];
        if (!c->need[i] || p->name[i] != i || e->kind != KF_EXPR_OP || e->op != KF_OP_TANH ||
            e->dtype != KF_DTYPE_BF16 || e->tensor == KF_NONE || !p->r[i].dep)
            continue;
        const uint32_t u = p->name[e->src[0]];
        const kf_expr *ue = &g->expr[u];
        if (ue->kind == KF_EXPR_OP && ue->dtype == KF_DTYPE_BF16 && ue->tensor != KF_NONE &&
            p->r[u].dep)
            t = i;
    }
    if (t == KF_NONE)
        return KF_NONE;
    const uint32_t u = p->name[g->expr[t].src[0]];
    memset(anc, 0, c->n * sizeof *anc);
    pair_marks(p, anc, u, KF_NONE);
    for (uint32_t j = 0; j < c->n; j++) {
        const kf_expr *e = &g->expr[j];
        if (!c->need[j] || p->name[j] != j || anc[j] || !p->r[j].dep || e->kind != KF_EXPR_OP)
            continue;
        const int ar = kf_op_has(e->op, KF_TRAIT_BINARY) ? 2 : 1;
        for (int k = 0; k < ar; k++) {
            const uint32_t a = p->name[e->src[k]];
            if (anc[a] && a != u && p->r[a].dep && index_axis(&g->expr[a], R) == INT_MIN)
                return KF_NONE;
        }
    }
    return t;
}

/* The needed loads of the function begun, read again (cg_emit_loads reads
 * only the loads without an override; the score's is "s"). */
static void pair_loads(pair_ctx *p, chunk_ctx *x) {
    cg *c = p->c;
    for (uint32_t i = 0; i < c->n; i++)
        if (c->g->expr[i].kind == KF_EXPR_LOAD)
            c->ov[i][0] = 0;
    cg_emit_loads(c, x, 1, "    ", NULL, NULL);
}

/* Clears on[i] for every node `out` does not read (through the nodes on,
 * not past p->in, whose pair comes in), so the function emits no value it
 * leaves unused. */
static void pair_prune(const pair_ctx *p, bool *on, uint32_t out) {
    const cg *c = p->c;
    bool *live = kf_mem_calloc(c->mem, c->n, sizeof *live);
    if (!live)
        return; /* unpruned: the same code, with unused values */
    pair_marks(p, live, out, p->in);
    for (uint32_t i = 0; i < c->n; i++)
        on[i] = on[i] && live[i];
    kf_mem_free(c->mem, live, c->n * sizeof *live);
}

/* kf_score_pre, kf_score_post and kf_score_post_ident of pair_split's
 * split at tanh node t (anc: pair_split's), from the planned reps r0. */
static void emit_split(pair_ctx *p, chunk_ctx *x, uint32_t t, const bool *anc, const pair_rep *r0) {
    cg *c = p->c;
    const kf_group *g = c->g;
    const int R = g->rank;
    const uint32_t u = p->name[g->expr[t].src[0]];
    const uint32_t top = p->name[g->attn.score];
    bool *post = kf_mem_calloc(c->mem, c->n, sizeof *post);
    if (!post) {
        cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
        return;
    }
    /* the second half: the nodes after u, and again the indices and the
     * nodes that do not vary with the score */
    for (uint32_t i = 0; i < c->n; i++)
        post[i] = !anc[i] || !p->r[i].dep || index_axis(&g->expr[i], R) != INT_MIN;
    p->in = u;
    pair_prune(p, post, top);
    cg_puts(&c->s,
            "/* the pair form split at a tanh (cg_attention_pair.c, pair_split): its operand "
            "first, the largest |x| in mx */\n__device__ __forceinline__ unsigned "
            "kf_amax2_bf16(unsigned a, unsigned b) {\n    unsigned d;\n    asm(\"max.xorsign.abs."
            "bf16x2 %0, %1, %2;\" : \"=r\"(d) : \"r\"(a), \"r\"(b));\n    return d;\n}\n"
            "__device__ __forceinline__ void kf_score_pre(float &s0, float &s1, unsigned &mx, "
            "long long bh, int q, int kv, KF_PARAMS) {\n");
    memcpy(p->r, r0, c->n * sizeof *p->r);
    p->r[u].want_f = false; /* packed at once: kf_score_post takes its bits */
    p->in_src = "__float_as_uint(s0)";
    p->on = anc;
    p->in = KF_NONE;
    p->ident = KF_NONE;
    pair_loads(p, x);
    pair_emit(p);
    pair_get_p(p, u);
    cg_printf(&c->s,
              "    mx = kf_amax2_bf16(mx, p%u_p);\n    s0 = __uint_as_float(p%u_p);\n"
              "    (void)s1; (void)bh; (void)q; (void)kv;\n}\n",
              u, u);
    for (int f = 0; f < 2; f++) {
        cg_printf(&c->s,
                  "__device__ __forceinline__ void kf_score_post%s(float &s0, float &s1, long long "
                  "bh, int q, int kv, KF_PARAMS) {\n",
                  f ? "_ident" : "");
        memcpy(p->r, r0, c->n * sizeof *p->r);
        p->on = post;
        p->in = u;
        p->ident = f ? t : KF_NONE;
        pair_loads(p, x);
        pair_emit(p);
        pair_get_f(p, top);
        cg_printf(&c->s, "    s0 = p%u_0;\n    s1 = p%u_1;\n    (void)bh; (void)q; (void)kv;\n}\n",
                  top, top);
    }
    cg_printf(&c->s,
              "#define KF_SCORE_SPLIT 1\n#define KF_TANH_IDENT_MAX 0x%04xu /* tanh(x) rounds to x "
              "for bf16 |x| <= this */\n\n",
              cg_tanh_ident_max());
    p->on = NULL;
    p->in = KF_NONE;
    p->ident = KF_NONE;
    kf_mem_free(c->mem, post, c->n * sizeof *post);
}

/* The diagonal of the pair form: the nodes that vary with kv but are
 * functions of kv - q and of values uniform over the tile alone (ALiBi's
 * slope x bf16(kv - q)), whose one node read by the rest, f, is a bf16 value
 * rounded as stored (its pair packs exactly). A thread's two rows are q and
 * q + 8 and its keys step by 8 from one pair to the next, so row q + 8's
 * value at a pair is row q's at the pair before: the kernel computes f's
 * pair for row q at the tile's 17 key offsets, once (kf_score_diag), and
 * each of its 32 pairs takes it (kf_score_pair_dg) -- 17 evaluations of the
 * diagonal where the pair form made 32. Returns f, or KF_NONE; dg[i]: node i
 * is on the diagonal. */
static uint32_t pair_diag(const pair_ctx *p, bool *dg) {
    const cg *c = p->c;
    const kf_group *g = c->g;
    const int R = g->rank;
    int8_t *ck = kf_mem_calloc(c->mem, c->n, 2);
    if (!ck)
        return KF_NONE;
    int8_t *cq = ck + c->n; /* an int node's coefficients on kv and q (lin) */
    bool *lin = dg;         /* reused below: first the ints' linearity */
    bool *fn = kf_mem_calloc(c->mem, c->n, sizeof *fn);
    if (!fn) {
        kf_mem_free(c->mem, ck, c->n * 2);
        return KF_NONE;
    }
    memset(lin, 0, c->n * sizeof *lin);
    for (uint32_t i = 0; i < c->n; i++) {
        const kf_expr *e = &g->expr[i];
        if (!c->need[i] || p->name[i] != i)
            continue;
        const int axis = index_axis(e, R);
        if (e->kind == KF_EXPR_CONST) {
            fn[i] = true;
        } else if (e->kind == KF_EXPR_LOAD) {
            fn[i] = e->strides[R - 2] == 0 && e->strides[R - 1] == 0;
        } else if (axis != INT_MIN) {
            lin[i] = true;
            ck[i] = axis == R - 1;
            cq[i] = axis == R - 2;
            fn[i] = ck[i] == -cq[i];
        } else if (e->kind == KF_EXPR_OP) {
            const int ar = kf_op_has(e->op, KF_TRAIT_BINARY) ? 2 : 1;
            const uint32_t a = p->name[e->src[0]], b = ar == 2 ? p->name[e->src[1]] : a;
            fn[i] = fn[a] && fn[b];
            if (e->dtype == KF_DTYPE_I32 && lin[a] && lin[b]) {
                int k = 0, q = 0;
                if (e->op == KF_OP_ADD && ar == 2)
                    k = ck[a] + ck[b], q = cq[a] + cq[b], lin[i] = true;
                else if (e->op == KF_OP_SUB && ar == 2)
                    k = ck[a] - ck[b], q = cq[a] - cq[b], lin[i] = true;
                else if (e->op == KF_OP_NEG && ar == 1)
                    k = -ck[a], q = -cq[a], lin[i] = true;
                lin[i] = lin[i] && k >= -1 && k <= 1 && q >= -1 && q <= 1;
                ck[i] = (int8_t)k;
                cq[i] = (int8_t)q;
                fn[i] = fn[i] || (lin[i] && k == -q);
            }
        }
    }
    /* the diagonal: functions of kv - q that vary with kv */
    for (uint32_t i = 0; i < c->n; i++)
        dg[i] = c->need[i] && p->name[i] == i && fn[i] && p->r[i].dep;
    kf_mem_free(c->mem, fn, c->n * sizeof *fn);
    kf_mem_free(c->mem, ck, c->n * 2);
    /* its one node read by the rest */
    uint32_t f = KF_NONE;
    const uint32_t top = p->name[g->attn.score];
    if (dg[top])
        return KF_NONE;
    for (uint32_t j = 0; j < c->n; j++) {
        const kf_expr *e = &g->expr[j];
        if (!c->need[j] || p->name[j] != j || dg[j] || e->kind != KF_EXPR_OP)
            continue;
        const int ar = kf_op_has(e->op, KF_TRAIT_BINARY) ? 2 : 1;
        for (int k = 0; k < ar; k++) {
            const uint32_t a = p->name[e->src[k]];
            if (!dg[a])
                continue;
            if (f != KF_NONE && f != a)
                return KF_NONE;
            f = a;
        }
    }
    if (f == KF_NONE || g->expr[f].kind != KF_EXPR_OP || (!c->score_f32 && !pair_exact(p, f)))
        return KF_NONE;
    return f;
}

/* The diagonal's part free of loads: the node t of pair_diag's diagonal
 * (dg, its node f) that f reads the diagonal's other nodes through, where t
 * and every node it is made of read no load -- a function of kv - q alone,
 * the same for every head (ALiBi's bf16(kv - q), whose slope x t is f) --
 * and t is a bf16 value rounded as stored (its pair packs exactly); or f
 * itself where no node of f reads a load. The kernel then reads t's pair
 * from a table over kv - q (kf_dtab, filled once by the block: kf_dtab_build)
 * and computes f from it (kf_score_diag_t): ALiBi's inner key tile (SASS, a
 * consumer thread, 64 scores) 280 score instructions with the diagonal
 * computed (VIADD, I2FP, FADD, F2FP and HMUL2 for each of 17 pairs), 238
 * with the table (an LDS and the HMUL2). Returns t, or KF_NONE; on: scratch
 * of c->n. */
static uint32_t pair_dtab(const pair_ctx *p, const bool *dg, uint32_t f, bool *on) {
    const cg *c = p->c;
    const kf_group *g = c->g;
    memset(on, 0, c->n * sizeof *on);
    pair_marks(p, on, f, KF_NONE);
    bool *lf = kf_mem_calloc(c->mem, c->n, sizeof *lf); /* made of no load */
    if (!lf)
        return KF_NONE;
    for (uint32_t i = 0; i < c->n; i++) {
        const kf_expr *e = &g->expr[i];
        if (!on[i] || p->name[i] != i)
            continue;
        lf[i] = e->kind != KF_EXPR_LOAD;
        if (e->kind == KF_EXPR_OP) {
            const int ar = kf_op_has(e->op, KF_TRAIT_BINARY) ? 2 : 1;
            for (int k = 0; k < ar; k++)
                lf[i] = lf[i] && lf[p->name[e->src[k]]];
        }
    }
    uint32_t t = lf[f] ? f : KF_NONE;
    for (uint32_t j = 0; j < c->n && !lf[f]; j++) {
        const kf_expr *e = &g->expr[j];
        if (!on[j] || p->name[j] != j || lf[j] || e->kind != KF_EXPR_OP)
            continue;
        const int ar = kf_op_has(e->op, KF_TRAIT_BINARY) ? 2 : 1;
        for (int k = 0; k < ar; k++) {
            const uint32_t a = p->name[e->src[k]];
            if (!dg[a] || !lf[a])
                continue; /* a uniform value, or one made of a load */
            if (t != KF_NONE && t != a) {
                t = KF_NONE;
                j = c->n;
                break;
            }
            t = a;
        }
    }
    kf_mem_free(c->mem, lf, c->n * sizeof *lf);
    if (t == KF_NONE || g->expr[t].kind != KF_EXPR_OP || !pair_exact(p, t))
        return KF_NONE;
    return t;
}

/* The body of one of the diagonal's functions: the planned reps r0 again,
 * `in` (KF_NONE: none) the node whose pair comes in as the argument `in_src`,
 * then the loads and the nodes p->on marks. */
static void diag_body(pair_ctx *p, chunk_ctx *x, const pair_rep *r0, uint32_t in,
                      const char *in_src) {
    memcpy(p->r, r0, p->c->n * sizeof *p->r);
    p->in = in;
    if (in_src)
        p->in_src = in_src;
    pair_loads(p, x);
    pair_emit(p);
}

/* kf_dtab, kf_score_dtab, kf_dtab_build and kf_score_diag_t of pair_dtab's
 * node t of the diagonal (its node f), from the planned reps r0; on:
 * scratch of c->n. */
static void emit_dtab(pair_ctx *p, chunk_ctx *x, uint32_t t, uint32_t f, bool *on,
                      const pair_rep *r0) {
    cg *c = p->c;
    /* t's pair at (q, kv) = (0, d): every node of t is a function of kv - q */
    memset(on, 0, c->n * sizeof *on);
    pair_marks(p, on, t, KF_NONE);
    cg_printf(&c->s,
              "/* the diagonal's part free of loads (cg_attention_pair.c, pair_dtab): t's pair at "
              "kv - q = KF_DIAG_TAB_LO + i in kf_dtab[i] */\n#define KF_DIAG_TAB_LO %lld\n"
              "#define KF_DIAG_TAB_N %lld\n__shared__ unsigned kf_dtab[KF_DIAG_TAB_N];\n"
              "__device__ __forceinline__ unsigned kf_score_dtab(long long bh, int q, int kv, "
              "KF_PARAMS) {\n",
              (long long)c->dtab_lo, (long long)c->dtab_n);
    p->on = on;
    p->ident = KF_NONE;
    diag_body(p, x, r0, KF_NONE, NULL);
    pair_get_p(p, t);
    cg_printf(&c->s,
              "    (void)bh; (void)q; (void)kv;\n    return p%u_p;\n}\n"
              "__device__ void kf_dtab_build(KF_PARAMS) {\n"
              "    for (int i = (int)threadIdx.x; i < KF_DIAG_TAB_N; i += (int)blockDim.x)\n"
              "        kf_dtab[i] = kf_score_dtab(0, 0, KF_DIAG_TAB_LO + i, KF_ARGS);\n}\n",
              t);
    /* f from t's pair */
    memset(on, 0, c->n * sizeof *on);
    pair_marks(p, on, f, t);
    cg_puts(&c->s, "__device__ __forceinline__ unsigned kf_score_diag_t(unsigned tp, long long bh, "
                   "int q, int kv, KF_PARAMS) {\n");
    diag_body(p, x, r0, t, "tp");
    pair_get_p(p, f);
    cg_printf(&c->s,
              "    (void)tp; (void)bh; (void)q; (void)kv;\n    return p%u_p;\n}\n"
              "#define KF_DIAG_TAB 1\n\n",
              f);
    p->on = NULL;
    p->in = KF_NONE;
}

/* Whether the group's score on a causal mask's edge tiles is its pair form
 * (the where() replaced by its kept branch) where kv <= q and -inf
 * elsewhere: the mask is causal (kv <= q, proven cell by cell by the
 * planner), its where() keeps src[1] and fills with a constant -inf, and is
 * the score's last node (nothing applies to the -inf after it). */
static bool diag_edge_ok(const kf_group *g) {
    const kf_attn_info *at = &g->attn;
    if (at->mask != KF_MASK_CAUSAL || at->mask_node == KF_NONE || at->mask_node != at->score)
        return false;
    const kf_expr *w = &g->expr[at->mask_node];
    const kf_expr *f = &g->expr[w->src[2]];
    return w->kind == KF_EXPR_OP && w->op == KF_OP_WHERE && f->kind == KF_EXPR_CONST &&
           isinf(f->value) && f->value < 0;
}

/* Whether pair_diag's node f (dg: its diagonal) is, with c->score_f32, an
 * affine function of kv along a row: f = a + u kv with a and u uniform over
 * the tile (ALiBi's slope x (kv - q)). Each of its nodes that varies with kv
 * is an int index sum stepping by +-1 from kv to kv + 1 (pair_plan's kvc)
 * cast to a float exactly (below 2^24 in magnitude), or a float add, sub,
 * neg, mul or div whose operands vary with kv linearly and, for mul and div,
 * where the other operand (the divisor) is uniform. In f32 the kernel then
 * takes f at a tile's first key pair and steps it along the tile
 * (templates/attention_sm90.cuh, KF_DIAG_LIN): f(kv + d) as fma(u, d, f(kv)),
 * u = (f(kv + KF_BC) - f(kv)) / KF_BC, within a few f32 roundings of the
 * exact value, where a key pair's f cost a conversion, an add and two
 * multiplies (ALiBi's main loop: 17 I2FP, 17 FADD and 64 FMUL more). */
static bool diag_linear(const pair_ctx *p, const bool *dg, uint32_t f) {
    const cg *c = p->c;
    const kf_group *g = c->g;
    const int R = g->rank;
    bool *on = kf_mem_calloc(c->mem, c->n, sizeof *on);
    if (!on)
        return false;
    pair_marks(p, on, f, KF_NONE);
    bool ok = true;
    for (uint32_t i = 0; i < c->n && ok; i++) {
        const kf_expr *e = &g->expr[i];
        if (!on[i] || p->name[i] != i || !dg[i] || !p->r[i].dep)
            continue; /* uniform over the tile, or not f's */
        if (index_axis(e, R) != INT_MIN)
            continue; /* kv itself */
        ok = e->kind == KF_EXPR_OP;
        if (!ok)
            break;
        const int ar = kf_op_has(e->op, KF_TRAIT_BINARY) ? 2 : 1;
        const uint32_t a = p->name[e->src[0]], b = ar == 2 ? p->name[e->src[1]] : a;
        const bool da = p->r[a].dep, db = ar == 2 && p->r[b].dep;
        if (p->r[i].kind == PR_I) {
            ok = p->r[i].kvc == 1 || p->r[i].kvc == -1;
        } else if (e->op == KF_OP_CAST) {
            int64_t lo = 0, hi = 0;
            ok = p->r[a].kind == PR_I && (p->r[a].kvc == 1 || p->r[a].kvc == -1) &&
                 cg_i32_range(g, e->src[0], &lo, &hi) && lo > -(INT64_C(1) << 23) &&
                 hi < (INT64_C(1) << 23);
        } else if (e->op == KF_OP_ADD || e->op == KF_OP_SUB) {
            ok = ar == 2;
        } else if (e->op == KF_OP_NEG) {
            ok = ar == 1;
        } else if (e->op == KF_OP_MUL) {
            ok = ar == 2 && !(da && db);
        } else if (e->op == KF_OP_DIV) {
            ok = ar == 2 && !db;
        } else {
            ok = false;
        }
    }
    kf_mem_free(c->mem, on, c->n * sizeof *on);
    return ok;
}

/* Whether the score's top node (the mask's kept branch) is, with an affine
 * diagonal f (diag_linear) and c->score_f32, x + f or f + x where x is the
 * score itself or the score times a positive constant (ALiBi's s0 + slope x
 * (kv - q), s0 = qk x 1 / sqrt(d)); *scale: that constant as the kernel
 * takes it (1 for the score itself). The kernel then keeps x / *scale plus
 * f's step along the tile in its score tile, one FFMA of an immediate a
 * score, and applies the scale and f's row terms once a row in the softmax
 * (templates/attention_sm90.cuh, KF_DIAG_ADD, KF_TILE_AFFINE), where the
 * stepped diagonal cost 34 FFMAs a 128-key tile and 34 registers. */
static bool diag_add(const pair_ctx *p, uint32_t f, uint32_t top, float *scale) {
    const kf_group *g = p->c->g;
    const kf_expr *e = &g->expr[top];
    if (e->kind != KF_EXPR_OP || e->op != KF_OP_ADD || e->dtype != KF_DTYPE_BF16)
        return false;
    const uint32_t a = p->name[e->src[0]], b = p->name[e->src[1]];
    if ((a == f) == (b == f))
        return false;
    const kf_expr *x = &g->expr[a == f ? b : a];
    if (x->kind == KF_EXPR_SCORE) {
        *scale = 1.0f;
        return true;
    }
    if (x->kind != KF_EXPR_OP || x->op != KF_OP_MUL || x->dtype != KF_DTYPE_BF16)
        return false;
    const kf_expr *x0 = &g->expr[p->name[x->src[0]]], *x1 = &g->expr[p->name[x->src[1]]];
    const kf_expr *k = x0->kind == KF_EXPR_SCORE ? x1 : x1->kind == KF_EXPR_SCORE ? x0 : NULL;
    if (!k || k->kind != KF_EXPR_CONST)
        return false;
    *scale = (float)k->value; /* as cg_emit_const writes it */
    return isnormal(*scale) && *scale > 0.0f;
}

/* kf_score_diag and kf_score_pair_dg of pair_diag's diagonal, its node f
 * (dg: pair_diag's), from the planned reps r0; with CG_PAIR_DIAG_TAB in
 * `forms` its table too (emit_dtab) where pair_dtab finds its node. */
static void emit_diag(pair_ctx *p, chunk_ctx *x, uint32_t f, const bool *dg, const pair_rep *r0,
                      unsigned forms) {
    cg *c = p->c;
    const kf_group *g = c->g;
    const uint32_t top = p->name[g->attn.score];
    bool *on = kf_mem_calloc(c->mem, c->n, sizeof *on);
    if (!on) {
        cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
        return;
    }
    /* kf_score_diag: f and the nodes it is made of; its pair bf16x2 (KF_DIAG_T
     * unsigned), or with c->score_f32 two floats (float2) */
    const bool fl = c->score_f32;
    pair_marks(p, on, f, KF_NONE);
    cg_printf(&c->s,
              "/* the diagonal of the pair form (cg_attention_pair.c, pair_diag): a function "
              "of kv - q, row q + 8's at kv its row q's at kv - 8 */\n#define KF_DIAG_T %s\n"
              "__device__ __forceinline__ KF_DIAG_T kf_score_diag(long long bh, int q, int kv, "
              "KF_PARAMS) {\n",
              fl ? "float2" : "unsigned");
    p->on = on;
    p->ident = KF_NONE;
    diag_body(p, x, r0, KF_NONE, NULL);
    if (fl) {
        cg_printf(&c->s,
                  "    (void)bh; (void)q; (void)kv;\n    return make_float2(p%u_0, p%u_1);\n}\n", f,
                  f);
    } else {
        pair_get_p(p, f);
        cg_printf(&c->s, "    (void)bh; (void)q; (void)kv;\n    return p%u_p;\n}\n", f);
    }
    /* kf_score_pair_dg: the rest, f's pair given */
    for (uint32_t i = 0; i < c->n; i++)
        on[i] = !dg[i];
    p->in = f;
    pair_prune(p, on, top);
    cg_puts(&c->s, "__device__ __forceinline__ void kf_score_pair_dg(float &s0, float &s1, "
                   "KF_DIAG_T dg, long long bh, int q, int kv, KF_PARAMS) {\n");
    diag_body(p, x, r0, f, "dg");
    pair_get_f(p, top);
    cg_printf(&c->s,
              "    s0 = p%u_0;\n    s1 = p%u_1;\n    (void)dg; (void)bh; (void)q; (void)kv;\n}\n"
              "#define KF_SCORE_DIAG 1\n\n",
              top, top);
    float scale = 1.0f;
    if (fl && diag_linear(p, dg, f)) {
        cg_puts(&c->s, "/* the diagonal affine in kv (diag_linear): stepped along the tile */\n"
                       "#define KF_DIAG_LIN 1\n\n");
        if ((forms & CG_PAIR_DIAG_ADD) && diag_add(p, f, top, &scale)) {
            cg_puts(&c->s, "/* the score KF_DIAG_SCALE s + the diagonal (diag_add): the tile "
                           "keeps its affine part, the softmax its row terms */\n"
                           "#define KF_DIAG_ADD 1\n#define KF_DIAG_SCALE ");
            cg_emit_const(c, KF_DTYPE_F32, scale);
            cg_puts(&c->s, "\n\n");
        }
    }
    if ((forms & CG_PAIR_DIAG_EDGE) && diag_edge_ok(g))
        cg_puts(&c->s, "/* the causal mask's edge tiles by the pair form too, then the mask "
                       "(pair_diag): -inf where kv > q or kv >= Skv */\n"
                       "#define KF_SCORE_DIAG_EDGE 1\n\n");
    p->on = NULL;
    p->in = KF_NONE;
    const uint32_t t = forms & CG_PAIR_DIAG_TAB ? pair_dtab(p, dg, f, on) : KF_NONE;
    if (t != KF_NONE)
        emit_dtab(p, x, t, f, on, r0);
    kf_mem_free(c->mem, on, c->n * sizeof *on);
}

kf_status cg_attn_emit_score_pair(cg *c, chunk_ctx *x, uint32_t kept, uint32_t fold,
                                  unsigned forms) {
    const kf_group *g = c->g;
    const kf_attn_info *at = &g->attn;
    if (fold != KF_NONE || g->expr[at->score].dtype != KF_DTYPE_BF16)
        return KF_OK;
    memset(c->need, 0, c->n * sizeof *c->need);
    for (uint32_t i = 0; i < c->n; i++) {
        c->ov[i][0] = 0;
        if (g->expr[i].kind == KF_EXPR_SCORE)
            snprintf(c->ov[i], OV_MAX, "s");
    }
    pair_ctx p = {c, NULL, NULL, 0, 0, x, NULL, KF_NONE, NULL, KF_NONE};
    p.r = kf_mem_calloc(c->mem, c->n, sizeof *p.r);
    p.name = kf_mem_calloc(c->mem, c->n, sizeof *p.name);
    pair_rep *r0 = kf_mem_calloc(c->mem, c->n, sizeof *r0);
    bool *anc = kf_mem_calloc(c->mem, c->n, sizeof *anc);
    if (!p.r || !p.name || !r0 || !anc) {
        kf_mem_free(c->mem, p.r, c->n * sizeof *p.r);
        kf_mem_free(c->mem, p.name, c->n * sizeof *p.name);
        kf_mem_free(c->mem, r0, c->n * sizeof *r0);
        kf_mem_free(c->mem, anc, c->n * sizeof *anc);
        return cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    }
    for (uint32_t i = 0; i < c->n; i++)
        p.name[i] = i;
    if (kept != KF_NONE) {
        uint32_t k = kept;
        snprintf(c->ov[at->mask_node], OV_MAX, "v%u", k);
        p.name[at->mask_node] = k;
        c->need[at->mask_node] = true;
        cg_mark(c, k);
    }
    cg_mark(c, at->score);
    if (pair_plan(&p)) {
        memcpy(r0, p.r, c->n * sizeof *r0);
        const size_t mark = c->s.len;
        cg_puts(&c->s, "/* the inner score of (q, kv) and (q, kv + 1) at once (cg_attention.c, "
                       "emit_score_pair) */\n__device__ __forceinline__ void kf_score_pair(float "
                       "&s0, float &s1, long long bh, int q, int kv, KF_PARAMS) {\n");
        cg_emit_loads(c, x, 1, "    ", NULL, NULL);
        pair_emit(&p);
        const uint32_t top = p.name[at->score];
        pair_get_f(&p, top);
        cg_printf(&c->s,
                  "    s0 = p%u_0;\n    s1 = p%u_1;\n    (void)bh; (void)q; (void)kv;\n}\n"
                  "#define KF_SCORE_PAIR 1 /* about %d instructions a pair against %d */\n\n",
                  top, top, p.cost, p.scalar);
        /* with c->score_f32 every op is two f32 ops in either form: the
         * pair form only for its diagonal (pair_diag), once for two rows */
        const bool fl = c->score_f32;
        const uint32_t fd = fl && (forms & CG_PAIR_DIAG) ? pair_diag(&p, anc) : KF_NONE;
        if ((fl ? fd == KF_NONE : p.cost >= p.scalar) && !c->s.oom) {
            c->s.len = mark;
            c->s.p[mark] = 0;
        } else {
            const uint32_t t = (forms & CG_PAIR_SPLIT) && !fl ? pair_split(&p, anc) : KF_NONE;
            const uint32_t f = fl                                       ? fd
                               : t == KF_NONE && (forms & CG_PAIR_DIAG) ? pair_diag(&p, anc)
                                                                        : KF_NONE;
            if (t != KF_NONE)
                emit_split(&p, x, t, anc, r0);
            else if (f != KF_NONE)
                emit_diag(&p, x, f, anc, r0, forms);
        }
    }
    kf_mem_free(c->mem, p.r, c->n * sizeof *p.r);
    kf_mem_free(c->mem, p.name, c->n * sizeof *p.name);
    kf_mem_free(c->mem, r0, c->n * sizeof *r0);
    kf_mem_free(c->mem, anc, c->n * sizeof *anc);
    return KF_OK;
}
