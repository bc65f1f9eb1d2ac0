/*
 * cuda_codegen.c -- CUDA C for a plan's memory-bound kernels.
 *
 *   group ──► choose the template (elementwise | row_warp | row_block |
 *             row_block_multipass | colreduce) and the vector width
 *        ──► params: one per buffer the expressions load (a view's base), one
 *             per write, ACC / SCORES / SCRATCH for the GEMM and attention helpers
 *        ──► source: header comment, #defines for the template's hooks,
 *             templates/common.cuh, the generated device functions (the
 *             expression DAG of each hook, one C statement per node, in the
 *             plan's node order), templates/<kind>.cuh
 *
 * Determinism: every loop walks the plan's arrays in index order, numbers
 * print with fixed formats, constants print as their bit patterns.
 *
 * Offsets: the problem size is compiled in, so the coordinates of an element
 * come from its linear index by division and remainder by constants (multiply
 * and shift, no hardware divide); an operand laid out contiguously over the
 * space uses the linear index itself and needs no coordinates at all.
 */
#include "codegen/cuda/cuda_codegen.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>

#include "codegen/cuda/templates.h"

/* ------------------------------------------------------------------------ */
/* Growing text                                                               */
/* ------------------------------------------------------------------------ */

typedef struct sbuf {
    const kf_mem *mem;
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->p && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t ncap = b->cap ? b->cap : 4096;
        while (ncap < b->len + (size_t)n + 1)
            ncap *= 2;
        char *np = kf_mem_realloc(b->mem, b->p, b->cap, ncap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = ncap;
    }
}

static void sb_puts(sbuf *b, const char *s) { sb_printf(b, "%s", s); }

/* ------------------------------------------------------------------------ */
/* Names                                                                      */
/* ------------------------------------------------------------------------ */

static const char *const template_names[KF_CUDA_TEMPLATE_COUNT] = {
    [KF_CUDA_TEMPLATE_ELEMENTWISE] = "elementwise",
    [KF_CUDA_TEMPLATE_ROW_WARP] = "row_warp",
    [KF_CUDA_TEMPLATE_ROW_WARP_STAGED] = "row_warp_staged",
    [KF_CUDA_TEMPLATE_ROW_BLOCK] = "row_block",
    [KF_CUDA_TEMPLATE_ROW_BLOCK_MULTIPASS] = "row_block_multipass",
    [KF_CUDA_TEMPLATE_COLREDUCE] = "colreduce",
    [KF_CUDA_TEMPLATE_ELEMENTWISE_BULK] = "elementwise_bulk",
};
_Static_assert(sizeof template_names / sizeof template_names[0] == KF_CUDA_TEMPLATE_COUNT,
               "one name per template");

const char *kf_cuda_template_name(kf_cuda_template t) {
    return (unsigned)t < KF_CUDA_TEMPLATE_COUNT ? template_names[t] : "?";
}

static const char *storage_type(kf_dtype d) {
    switch (d) {
    case KF_DTYPE_F32: return "float";
    case KF_DTYPE_F16: return "kf_f16";
    case KF_DTYPE_BF16: return "kf_bf16";
    case KF_DTYPE_F64: return "double";
    case KF_DTYPE_I32: return "int";
    case KF_DTYPE_BOOL: return "unsigned char";
    default: return "void";
    }
}

/* The type a value lives in while computed. */
static const char *reg_type(kf_dtype d) {
    switch (d) {
    case KF_DTYPE_F64: return "double";
    case KF_DTYPE_I32: return "int";
    case KF_DTYPE_BOOL: return "bool";
    default: return "float";
    }
}

static const char *round_fn(kf_dtype d) {
    return d == KF_DTYPE_F16 ? "kf_round_f16" : d == KF_DTYPE_BF16 ? "kf_round_bf16" : NULL;
}

/* ------------------------------------------------------------------------ */
/* The generator's state                                                      */
/* ------------------------------------------------------------------------ */

/* Sizes of the generated-text buffers, chosen so the worst case fits: a
 * coordinate is at most "(row) / N LL % N LL" with 19-digit N (< 96 bytes), an
 * offset at most 8 terms "COORD * N LL + " (< 8 * 123 bytes), an override an
 * offset wrapped in a load. Text cut short would be wrong code, so the sizes
 * are derived, not guessed, and the static asserts below keep them so. */
#define COORD_MAX 96
#define LIN_MAX 160
#define OV_MAX 1152 /* an override's text: a load expression */

_Static_assert(OV_MAX - 64 >= KF_MAX_RANK * (COORD_MAX + 27) + 1, "an offset fits");
_Static_assert(LIN_MAX >= 4 * 24 + 40, "a linear index fits");

typedef struct cg {
    const kf_plan *plan;
    const kf_group *g;
    const kf_mem *mem;
    kf_cuda_kernel *k;
    sbuf s;
    uint32_t n;       /* nodes */
    char (*ov)[OV_MAX]; /* per node: the expression standing for it ("" none) */
    bool *need;       /* per node: scratch for reachability */
    int32_t *param;   /* per node: LOAD/ACC/SCORE: its param; else -1 */
    int64_t *soff;    /* per node: row_warp_staged: byte offset of its row in a stage; else -1 */
    bool staged;      /* emitting a staged prologue: loads with soff >= 0 read the stage */
    bool *stored;     /* per node: written to an output buffer of its own dtype (raw_of) */
    kf_status st;
} cg;

static kf_status cg_fail(cg *c, kf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static kf_status cg_fail(cg *c, kf_status st, const char *fmt, ...) {
    if (c->st == KF_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->k->error, sizeof c->k->error, fmt, ap);
        va_end(ap);
        c->st = st;
    }
    return st;
}

static const kf_tensor *tensor(const cg *c, uint32_t id) { return c->plan->graph->nodes[id]; }

static uint64_t tensor_bytes(const cg *c, uint32_t id) {
    const kf_tensor *t = tensor(c, id);
    return (uint64_t)kf_ir_numel(t) * kf_dtype_size(t->dtype);
}

static int param_add(cg *c, kf_cuda_param_kind kind, uint32_t t, kf_dtype dt, uint64_t bytes) {
    kf_cuda_kernel *k = c->k;
    for (uint32_t i = 0; i < k->n_params; i++) {
        if (k->params[i].kind == kind && k->params[i].tensor == t)
            return (int)i;
    }
    if (k->n_params == KF_CUDA_MAX_PARAMS) {
        cg_fail(c, KF_ERR_UNSUPPORTED, "group %u (%s): more than %d kernel parameters", c->g->id,
                c->g->name, KF_CUDA_MAX_PARAMS);
        return 0;
    }
    kf_cuda_param *p = &k->params[k->n_params];
    p->kind = kind;
    p->tensor = t;
    p->dtype = dt;
    p->bytes = bytes;
    return (int)k->n_params++;
}

/* Marks what `root` needs, stopping at overridden nodes. */
static void mark(cg *c, uint32_t root) {
    if (root == KF_NONE || c->need[root])
        return;
    c->need[root] = true;
    if (c->ov[root][0])
        return;
    const kf_expr *e = &c->g->expr[root];
    if (e->kind == KF_EXPR_OP) {
        for (int i = 0; i < 3; i++)
            mark(c, e->src[i]);
    }
}

static bool depends_on_stat(const cg *c, uint32_t root) {
    const kf_expr *e = &c->g->expr[root];
    if (e->kind == KF_EXPR_STAT)
        return true;
    if (e->kind != KF_EXPR_OP)
        return false;
    for (int i = 0; i < 3; i++) {
        if (e->src[i] != KF_NONE && depends_on_stat(c, e->src[i]))
            return true;
    }
    return false;
}

/* A float or double constant as its exact bits (inf and NaN included). */
static void emit_const(cg *c, kf_dtype d, double v) {
    if (d == KF_DTYPE_F64) {
        uint64_t u;
        memcpy(&u, &v, sizeof u);
        sb_printf(&c->s, "__longlong_as_double(0x%016" PRIx64 "LL) /* %.17g */", u, v);
    } else if (d == KF_DTYPE_I32) {
        sb_printf(&c->s, "(int)%.0f", v);
    } else if (d == KF_DTYPE_BOOL) {
        sb_puts(&c->s, v != 0.0 ? "true" : "false");
    } else {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        sb_printf(&c->s, "__uint_as_float(0x%08" PRIx32 "u) /* %.9g */", u, (double)f);
    }
}

static const char *stat_field(kf_stat s) {
    switch (s) {
    case KF_STAT_MAX: return "max";
    case KF_STAT_SUM: return "sum";
    case KF_STAT_MEAN: return "mean";
    case KF_STAT_RSTD: return "rstd";
    case KF_STAT_RMS_RSTD: return "rms_rstd";
    case KF_STAT_SUMEXP: return "sumexp";
    default: return "sum";
    }
}

static const char *op_fn(kf_op op) {
    switch (op) {
    case KF_OP_NEG: return "kf_neg";
    case KF_OP_ABS: return "kf_abs";
    case KF_OP_EXP: return "kf_exp";
    case KF_OP_LOG: return "kf_log";
    case KF_OP_SQRT: return "kf_sqrt";
    case KF_OP_RSQRT: return "kf_rsqrt";
    case KF_OP_TANH: return "kf_tanh";
    case KF_OP_SIGMOID: return "kf_sigmoid";
    case KF_OP_RELU: return "kf_relu";
    case KF_OP_GELU: return "kf_gelu";
    case KF_OP_GELU_TANH: return "kf_gelu_tanh";
    case KF_OP_SILU: return "kf_silu";
    case KF_OP_ADD: return "kf_add";
    case KF_OP_SUB: return "kf_sub";
    case KF_OP_MUL: return "kf_mul";
    case KF_OP_DIV: return "kf_div";
    case KF_OP_MAX: return "kf_max";
    case KF_OP_MIN: return "kf_min";
    case KF_OP_POW: return "kf_pow";
    case KF_OP_EQ: return "==";
    case KF_OP_NE: return "!=";
    case KF_OP_LT: return "<";
    case KF_OP_LE: return "<=";
    case KF_OP_GT: return ">";
    case KF_OP_GE: return ">=";
    default: return NULL;
    }
}

/* ---- gelu on bf16 through a table ----------------------------------------
 * gelu is the costliest op of an elementwise chain (erfc: ~40 instructions
 * and three special-function ops per element, which made a bf16 chain
 * compute-bound). When its operand is a bf16 value and its result is rounded
 * to bf16 it has only 65536 possible inputs, and outside 2^-9 <= |x| < 16 the
 * rounded result is a formula: 0.5x below (|x*0.8| is under half an ulp), x
 * above for x > 0, -0 for x < 0 (NaN at -inf). The table starts lower, at
 * 2^-19, so that a chunk rarely meets the formula branch (a value under 2^-9
 * is one in ~500 of the inputs the bench draws, so ~40% of the warps' steps
 * took it). The 2 x 2944 results in between are computed here with the reference evaluator's own formula and
 * rounding (ir/eval.c), so the kernel's gelu is the reference's bit for bit;
 * the block copies them to shared memory at entry (KF_SETUP).
 *
 * The table interleaves the signs: entry 2 * (|bits| - 0x3b00) + sign. With
 * the bits rotated left by one (magnitude, then sign), an index is a shift,
 * a three-input logic op and a subtraction, and one unsigned compare tells
 * in-range. In registers the bf16 values are the high halves of
 * floats, so the shifts fold into the bf16x2 results that produced them. */
#define GELU_TAB_LO 0x3600u /* |bits| of 2^-19 */
#define GELU_TAB_HI 0x4180u /* 16.0 */
#define GELU_TAB_N (2u * (GELU_TAB_HI - GELU_TAB_LO))

/* Node i is a gelu whose result is rounded to bf16 and whose operand is a
 * bf16 tensor (`strict`: and is known, in this view, to hold a bf16-rounded
 * value: an op result rounded here, or a load of a bf16 buffer). */
static bool gelu_tab_node(const cg *c, uint32_t i, bool strict) {
    const kf_expr *e = &c->g->expr[i];
    if (e->kind != KF_EXPR_OP || e->op != KF_OP_GELU || e->dtype != KF_DTYPE_BF16 ||
        e->tensor == KF_NONE)
        return false;
    uint32_t s = e->src[0];
    const kf_expr *a = &c->g->expr[s];
    if (a->dtype != KF_DTYPE_BF16 || a->tensor == KF_NONE)
        return false;
    if (!strict)
        return true;
    if (c->param[s] >= 0) {
        const kf_cuda_param *p = &c->k->params[c->param[s]];
        return p->kind == KF_CUDA_PARAM_IN && p->dtype == KF_DTYPE_BF16;
    }
    return !c->ov[s][0] && a->kind == KF_EXPR_OP;
}

static unsigned short bf16_bits(double v) {
    float f = (float)kf_ir_round(KF_DTYPE_BF16, v);
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (unsigned short)(u >> 16);
}

static bool has_gelu_table(const cg *c) {
    bool any = false;
    for (uint32_t i = 0; i < c->n && !any; i++)
        any = gelu_tab_node(c, i, false);
    return any;
}

static void emit_gelu_table(cg *c) {
    if (!has_gelu_table(c)) {
        sb_puts(&c->s, "#define KF_SETUP() ((void)0)\n");
        return;
    }
    sb_printf(&c->s, "__device__ const unsigned short kf_gelu_tab_src[%u] = {", GELU_TAB_N);
    for (uint32_t n = 0; n < GELU_TAB_N; n++) {
        uint32_t w = ((GELU_TAB_LO + n / 2) | (n % 2 ? 0x8000u : 0u)) << 16;
        float xf;
        memcpy(&xf, &w, sizeof xf);
        double x = xf;
        /* ir/eval.c's gelu, rounded as the reference stores it */
        unsigned short y = bf16_bits(0.5 * x * erfc(-x * 0.70710678118654752440));
        sb_printf(&c->s, "%s0x%x,", n % 16 ? "" : "\n", y);
    }
    sb_printf(&c->s,
              "};\n__shared__ unsigned short kf_gelu_tab[%u];\n"
              "#define KF_SETUP() kf_gelu_tab_fill()\n"
              "__device__ __forceinline__ void kf_gelu_tab_fill() {\n"
              "    for (int i = threadIdx.x; i < %u; i += blockDim.x)\n"
              "        kf_gelu_tab[i] = kf_gelu_tab_src[i];\n"
              "    __syncthreads();\n}\n"
              "/* The table index of bf16 bits u (0..0xffff); in range when below %uu. */\n"
              "__device__ __forceinline__ unsigned kf_gelu_idx(unsigned u) {\n"
              "    return (((u << 1) & 0xfffeu) | (u >> 15)) - 0x%xu;\n}\n"
              "/* gelu of a bf16 value, rounded to bf16: the reference's result. */\n"
              "__device__ __forceinline__ float kf_gelu_bf16(float x) {\n"
              "    const unsigned u = __float_as_uint(x) >> 16, d = kf_gelu_idx(u), m = u & 0x7fffu;\n"
              "    if (d < %uu)\n"
              "        return __uint_as_float((unsigned)kf_gelu_tab[d] << 16);\n"
              "    if (m < 0x%xu)\n        return kf_round_bf16(0.5f * x); /* tiny, zero */\n"
              "    if (u < 0x8000u || m > 0x7f80u)\n        return x; /* large, +inf, NaN */\n"
              "    return m == 0x7f80u ? __int_as_float(0x7fc00000) : -0.0f; /* -inf: NaN */\n"
              "}\n"
              "/* VV of them: a table lookup each (the index clamped into the table, so\n"
              " * the load needs no branch), the formulas for a value outside it. */\n"
              "template <int VV> __device__ __forceinline__ void kf_gelu_bf16_v(float *d, const float *a) {\n"
              "#pragma unroll\n"
              "    for (int k = 0; k < VV; k++) {\n"
              "        const unsigned i = kf_gelu_idx(__float_as_uint(a[k]) >> 16);\n"
              "        const float t = __uint_as_float((unsigned)kf_gelu_tab[min(i, %uu)] << 16);\n"
              "        d[k] = __builtin_expect(i < %uu, 1) ? t : kf_gelu_bf16(a[k]);\n"
              "    }\n"
              "}\n",
              GELU_TAB_N, GELU_TAB_N, GELU_TAB_N, 2u * GELU_TAB_LO, GELU_TAB_N, GELU_TAB_LO,
              GELU_TAB_N - 1, GELU_TAB_N);
}

/* Node s holds a bf16 value exactly: a load of a bf16 buffer, or an op result
 * rounded to bf16 here. */
static bool exact_bf16(const cg *c, uint32_t s) {
    const kf_expr *a = &c->g->expr[s];
    if (a->dtype != KF_DTYPE_BF16)
        return false;
    if (c->param[s] >= 0) {
        const kf_cuda_param *p = &c->k->params[c->param[s]];
        return p->kind == KF_CUDA_PARAM_IN && p->dtype == KF_DTYPE_BF16;
    }
    return !c->ov[s][0] && a->kind == KF_EXPR_OP && a->tensor != KF_NONE;
}

/* The bf16x2 form of node i (kf_bf16x2's OP: 0 add, 1 sub, 2 mul), or -1: a
 * bf16 add/sub/mul rounded to bf16 whose operands both hold bf16 values. */
static int packed_op(const cg *c, uint32_t i) {
    const kf_expr *e = &c->g->expr[i];
    if (e->kind != KF_EXPR_OP || e->dtype != KF_DTYPE_BF16 || e->tensor == KF_NONE || c->ov[i][0])
        return -1;
    int op = e->op == KF_OP_ADD ? 0 : e->op == KF_OP_SUB ? 1 : e->op == KF_OP_MUL ? 2 : -1;
    if (op < 0 || !exact_bf16(c, e->src[0]) || !exact_bf16(c, e->src[1]))
        return -1;
    return op;
}

/* Node i is an f16/bf16 op result rounded here (round_fn) and stored to a
 * buffer of its dtype: emit_nodes also gives its value before the rounding,
 * vNu, and the store converts that (one cvt.rn per two values) instead of
 * rounding to vN and converting vN again. Rounding twice to the same format
 * is rounding once, so the stored bits are the same; vN is left to the
 * compiler to drop when nothing else reads it. On an H200, a bf16 rms_norm
 * over 65536 x 4096 took 0.278 ms instead of 0.300. Not for the gelu table's
 * or a packed op's results, which are exact bf16 already. */
static bool raw_of(const cg *c, uint32_t i, bool arr) {
    const kf_expr *e = &c->g->expr[i];
    return c->stored[i] && !c->ov[i][0] && e->kind == KF_EXPR_OP && e->tensor != KF_NONE &&
           round_fn(e->dtype) && !gelu_tab_node(c, i, true) && !(arr && packed_op(c, i) >= 0);
}

/* One statement per needed node, in node order: `const T vN = ...;`. The
 * coordinate nodes and loads come from c->ov; `coord` gives the coordinate of
 * axis d of a space (a string), `ind` the indentation.
 *
 * `arr`: the statements stand outside the chunk's k loop, one array of VV
 * values per node (`T vN[VV];` and a k loop filling it), so that a bf16
 * add/sub/mul (packed_op) computes two elements per instruction through
 * kf_bf16x2. Element k of every node depends only on element k of its
 * operands, so this is the element loop with its two loops swapped; the
 * compiler unrolls both to the same straight-line code, less the packed
 * pairs. */
typedef const char *(*coord_fn)(void *user, kf_space sp, int axis);

static void emit_nodes(cg *c, coord_fn coord, void *user, const char *ind, bool arr) {
    const kf_group *g = c->g;
    const char *ix = arr ? "[k]" : "";
    for (uint32_t i = 0; i < c->n && c->st == KF_OK; i++) {
        if (!c->need[i])
            continue;
        const kf_expr *e = &g->expr[i];
        const char *rt = reg_type(e->dtype);
        const char *rnd = e->tensor != KF_NONE ? round_fn(e->dtype) : NULL;
        if (arr && gelu_tab_node(c, i, true)) {
            sb_printf(&c->s, "%s%s v%u[VV];\n%skf_gelu_bf16_v<VV>(v%u, v%u);\n", ind, rt, i, ind, i,
                      e->src[0]);
            continue;
        }
        int pk = arr ? packed_op(c, i) : -1;
        if (pk >= 0) {
            sb_printf(&c->s, "%s%s v%u[VV];\n%skf_bf16x2<%d, VV>(v%u, v%u, v%u);\n", ind, rt, i, ind,
                      pk, i, e->src[0], e->src[1]);
            continue;
        }
        /* raw_of: the op's value is vNu, and vN its rounding (after the switch) */
        const bool raw = raw_of(c, i, arr);
        const char *sfx = raw ? "u" : "";
        if (raw)
            rnd = NULL;
        if (arr)
            sb_printf(&c->s, "%s%s v%u%s[VV];\n#pragma unroll\n%sfor (int k = 0; k < VV; k++)\n%s    v%u%s[k] = ",
                      ind, rt, i, sfx, ind, ind, i, sfx);
        else
            sb_printf(&c->s, "%sconst %s v%u%s = ", ind, rt, i, sfx);
        /* operand references */
        char a[3][24];
        for (int j = 0; j < 3; j++)
            snprintf(a[j], sizeof a[j], "v%u%s", e->kind == KF_EXPR_OP ? e->src[j] : 0u, ix);
        if (c->ov[i][0]) {
            sb_printf(&c->s, "(%s)(%s);\n", rt, c->ov[i]);
            continue;
        }
        int rank = e->space == KF_SPACE_ROW ? g->row_rank : g->rank;
        switch (e->kind) {
        case KF_EXPR_CONST:
            emit_const(c, e->dtype, e->value);
            break;
        case KF_EXPR_INDEX:
        case KF_EXPR_ROW:
        case KF_EXPR_COL:
        case KF_EXPR_BATCH:
        case KF_EXPR_HEAD:
        case KF_EXPR_Q_IDX:
        case KF_EXPR_KV_IDX: {
            int axis = e->kind == KF_EXPR_INDEX    ? e->axis
                       : e->kind == KF_EXPR_ROW    ? rank - 2
                       : e->kind == KF_EXPR_COL    ? rank - 1
                       : e->kind == KF_EXPR_BATCH  ? rank - 4
                       : e->kind == KF_EXPR_HEAD   ? rank - 3
                       : e->kind == KF_EXPR_Q_IDX  ? rank - 2
                                                   : rank - 1;
            if (axis < 0)
                sb_printf(&c->s, "(%s)0", rt);
            else
                sb_printf(&c->s, "(%s)(%s)", rt, coord(user, e->space, axis));
            break;
        }
        case KF_EXPR_STAT:
            if (rnd)
                sb_printf(&c->s, "%s((float)st.%s)", rnd, stat_field(e->stat));
            else
                sb_printf(&c->s, "(%s)st.%s", rt, stat_field(e->stat));
            break;
        case KF_EXPR_OP: {
            kf_op op = e->op;
            if (gelu_tab_node(c, i, true)) {
                sb_printf(&c->s, "kf_gelu_bf16(%s)", a[0]);
                break;
            }
            if (rnd)
                sb_printf(&c->s, "%s(", rnd);
            if (op == KF_OP_CAST) {
                kf_dtype from = g->expr[e->src[0]].dtype;
                if (e->dtype == KF_DTYPE_BOOL)
                    sb_printf(&c->s, "(%s != 0)", a[0]);
                else if (from == KF_DTYPE_BOOL)
                    sb_printf(&c->s, "(%s)(%s ? 1 : 0)", rt, a[0]);
                else
                    sb_printf(&c->s, "(%s)%s", rt, a[0]);
            } else if (op == KF_OP_WHERE) {
                sb_printf(&c->s, "(%s ? %s : %s)", a[0], a[1], a[2]);
            } else if (kf_op_has(op, KF_TRAIT_COMPARE)) {
                sb_printf(&c->s, "(%s %s %s)", a[0], op_fn(op), a[1]);
            } else if (kf_op_has(op, KF_TRAIT_BINARY) && op_fn(op)) {
                sb_printf(&c->s, "%s(%s, %s)", op_fn(op), a[0], a[1]);
            } else if (kf_op_has(op, KF_TRAIT_UNARY) && op_fn(op)) {
                sb_printf(&c->s, "%s(%s)", op_fn(op), a[0]);
            } else {
                cg_fail(c, KF_ERR_UNSUPPORTED, "group %u (%s): op %s has no CUDA form", g->id,
                        g->name, kf_op_get(op)->name);
            }
            if (rnd)
                sb_puts(&c->s, ")");
            break;
        }
        default:
            cg_fail(c, KF_ERR_UNSUPPORTED, "group %u (%s): a %s node in a %s kernel", g->id,
                    g->name, kf_expr_kind_name(e->kind), kf_cuda_template_name(c->k->tmpl));
            break;
        }
        sb_puts(&c->s, ";\n");
        if (raw && arr)
            sb_printf(&c->s, "%s%s v%u[VV];\n#pragma unroll\n%sfor (int k = 0; k < VV; k++)\n%s    v%u[k] = %s(v%uu[k]);\n",
                      ind, rt, i, ind, ind, i, round_fn(e->dtype), i);
        else if (raw)
            sb_printf(&c->s, "%sconst %s v%u = %s(v%uu);\n", ind, rt, i, round_fn(e->dtype), i);
    }
}

/* ------------------------------------------------------------------------ */
/* Accesses                                                                   */
/* ------------------------------------------------------------------------ */

static void space_dims(const kf_group *g, kf_space sp, int *rank, const int64_t **dims) {
    *rank = sp == KF_SPACE_ROW ? g->row_rank : g->rank;
    *dims = sp == KF_SPACE_ROW ? g->row_dims : g->dims;
}

static void contig_strides(int rank, const int64_t *dims, int64_t *s) {
    int64_t acc = 1;
    for (int i = rank - 1; i >= 0; i--) {
        s[i] = acc;
        acc *= dims[i];
    }
}

static bool strides_contig(int rank, const int64_t *dims, const int64_t *s) {
    int64_t cs[KF_MAX_RANK];
    contig_strides(rank, dims, cs);
    for (int d = 0; d < rank; d++) {
        if (dims[d] != 1 && s[d] != cs[d])
            return false;
    }
    return true;
}

static int64_t numel_of(int rank, const int64_t *dims) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= dims[d];
    return n;
}

/* How an access is made in a chunk of VV elements along the last axis. */
typedef enum acc_class { ACC_VECTOR, ACC_BCAST, ACC_GATHER } acc_class;

static acc_class classify(int rank, const int64_t *dims, const int64_t *s, uint32_t vec) {
    if (rank == 0 || dims[rank - 1] == 1)
        return ACC_BCAST;
    int64_t last = s[rank - 1];
    if (last == 0)
        return ACC_BCAST;
    if (last != 1)
        return ACC_GATHER;
    for (int d = 0; d < rank - 1; d++) {
        if (dims[d] != 1 && s[d] % (int64_t)vec != 0)
            return ACC_GATHER;
    }
    return ACC_VECTOR;
}

/* The strides of a LOAD / ACC / SCORE node in its space. */
static void node_strides(const cg *c, uint32_t i, int64_t *s) {
    const kf_expr *e = &c->g->expr[i];
    int rank;
    const int64_t *dims;
    space_dims(c->g, e->space, &rank, &dims);
    if (e->kind == KF_EXPR_LOAD)
        memcpy(s, e->strides, sizeof(int64_t) * KF_MAX_RANK);
    else
        contig_strides(rank, dims, s);
}

/* Registers the params of every load among the needed nodes. */
static void load_params(cg *c) {
    const kf_group *g = c->g;
    for (uint32_t i = 0; i < c->n; i++) {
        const kf_expr *e = &g->expr[i];
        if (!c->need[i] || c->ov[i][0])
            continue;
        if (e->kind == KF_EXPR_LOAD) {
            c->param[i] = param_add(c, KF_CUDA_PARAM_IN, e->base, tensor(c, e->base)->dtype,
                                    tensor_bytes(c, e->base));
        } else if (e->kind == KF_EXPR_ACC) {
            uint32_t t = g->gemm.anchor[e->anchor == 1 ? 1 : 0];
            c->param[i] = param_add(c, KF_CUDA_PARAM_ACC, t, tensor(c, t)->dtype, tensor_bytes(c, t));
        } else if (e->kind == KF_EXPR_SCORE) {
            uint32_t t = g->attn.qk;
            c->param[i] =
                param_add(c, KF_CUDA_PARAM_SCORES, t, tensor(c, t)->dtype, tensor_bytes(c, t));
        }
    }
}

static bool is_load(const kf_expr *e) {
    return e->kind == KF_EXPR_LOAD || e->kind == KF_EXPR_ACC || e->kind == KF_EXPR_SCORE;
}

/* Smallest element size among the contiguous-along-last loads of space sp. */
static size_t min_vec_size(const cg *c, kf_space sp, size_t start) {
    size_t m = start;
    for (uint32_t i = 0; i < c->n; i++) {
        const kf_expr *e = &c->g->expr[i];
        if (!c->need[i] || c->ov[i][0] || !is_load(e) || e->space != sp)
            continue;
        int rank;
        const int64_t *dims;
        space_dims(c->g, sp, &rank, &dims);
        int64_t s[KF_MAX_RANK];
        node_strides(c, i, s);
        if (classify(rank, dims, s, 1) == ACC_VECTOR) {
            size_t z = kf_dtype_size(c->k->params[c->param[i]].dtype);
            if (z < m)
                m = z;
        }
    }
    return m;
}

static uint32_t vec_for(size_t min_size, int64_t last_dim, bool tail_ok) {
    uint32_t v = (uint32_t)(16 / (min_size ? min_size : 16));
    if (v > 8)
        v = 8;
    if (v < 1)
        v = 1;
    while (v > 1 && !tail_ok && last_dim % v != 0)
        v /= 2;
    return v;
}

/* ------------------------------------------------------------------------ */
/* Chunk bodies: loads, expressions, stores for VV elements along the last   */
/* axis of a space                                                            */
/* ------------------------------------------------------------------------ */

/* Where the chunk's coordinates come from: coordinate strings per axis for
 * each space, and the linear offset of the chunk's first element in a
 * contiguous layout of each space. */
typedef struct chunk_ctx {
    char coord[KF_SPACE_COUNT][KF_MAX_RANK][COORD_MAX];
    char lin[KF_SPACE_COUNT][LIN_MAX];
    char kcoord[COORD_MAX + 8]; /* scratch for coord_of */
    int vrank[KF_SPACE_COUNT]; /* the vectorized axis is rank-1 of the space; -1: no vectors */
} chunk_ctx;

static const char *coord_of(void *user, kf_space sp, int axis) {
    chunk_ctx *x = user;
    int rank = x->vrank[sp];
    if (rank > 0 && axis == rank - 1) {
        snprintf(x->kcoord, sizeof x->kcoord, "%s + k", x->coord[sp][axis]);
        return x->kcoord;
    }
    return x->coord[sp][axis];
}

/* The offset of a node's first chunk element, into buf. */
static void offset_str(const cg *c, const chunk_ctx *x, uint32_t i, char *buf, size_t size) {
    const kf_expr *e = &c->g->expr[i];
    int rank;
    const int64_t *dims;
    space_dims(c->g, e->space, &rank, &dims);
    int64_t s[KF_MAX_RANK];
    node_strides(c, i, s);
    if (strides_contig(rank, dims, s)) {
        snprintf(buf, size, "%s", x->lin[e->space]);
        return;
    }
    size_t n = 0;
    buf[0] = 0;
    for (int d = 0; d < rank && n < size; d++) {
        if (s[d] == 0 || dims[d] == 1)
            continue;
        int w = snprintf(buf + n, size - n, "%s%s * %" PRId64 "LL", n ? " + " : "", x->coord[e->space][d],
                         s[d]);
        n += w > 0 ? (size_t)w : 0;
    }
    if (!buf[0])
        snprintf(buf, size, "0");
}

/* Emits the loads of the needed nodes in space-filter `sp` (all spaces if
 * sp == KF_SPACE_COUNT) before the k loop (vectors, broadcasts) and fills the
 * overrides (arrays, scalars, per-element gathers). Returns the alignment
 * conditions through `ok` (param index -> bytes). */
static void emit_loads(cg *c, chunk_ctx *x, uint32_t vec, const char *ind, const bool *hoist,
                       const bool *pre) {
    const kf_group *g = c->g;
    for (uint32_t i = 0; i < c->n; i++) {
        const kf_expr *e = &g->expr[i];
        if (!c->need[i] || c->ov[i][0] || !is_load(e))
            continue;
        int rank;
        const int64_t *dims;
        space_dims(g, e->space, &rank, &dims);
        int64_t s[KF_MAX_RANK];
        node_strides(c, i, s);
        char off[OV_MAX - 64];
        offset_str(c, x, i, off, sizeof off);
        int p = c->param[i];
        acc_class cl = x->vrank[e->space] > 0 ? classify(rank, dims, s, vec) : ACC_BCAST;
        const char *rt = reg_type(c->k->params[p].dtype);
        bool h = hoist && hoist[i];
        if (cl == ACC_VECTOR && c->staged && c->soff[i] >= 0) {
            /* Staged: the stage holds the row from element 0, so element j0 is
             * j0 * size bytes in. */
            size_t z = kf_dtype_size(c->k->params[p].dtype);
            sb_printf(&c->s,
                      "%s%s l%u[VV];\n%sif (STG)\n%s    kf_lds<VV, %s>(sb + %" PRId64 "u + (unsigned)j0 * %zuu, l%u);\n"
                      "%selse\n%s    kf_ldv<VV>(p%d + (%s), l%u);\n",
                      ind, rt, i, ind, ind, storage_type(c->k->params[p].dtype), c->soff[i], z, i,
                      ind, ind, p, off, i);
            snprintf(c->ov[i], OV_MAX, "l%u[k]", i);
        } else if (cl == ACC_VECTOR) {
            sb_printf(&c->s, "%s%s l%u[VV];\n", ind, rt, i);
            /* a hoisted (H: hv) or streamed (P: pv) operand's raw vector when
             * the caller has it, else the load */
            if (h || (pre && pre[i]))
                sb_printf(&c->s, "%sif (%s) {\n#pragma unroll\n%s    for (int k = 0; k < VV; k++)\n"
                                 "%s        l%u[k] = kf_cvt(reinterpret_cast<const %s *>(%s.l%u.b)[k]);\n"
                                 "%s} else\n    ",
                          ind, h ? "H" : "P", ind, ind, i, storage_type(c->k->params[p].dtype),
                          h ? "hv" : "pv", i, ind);
            sb_printf(&c->s, "%skf_ldv<VV>(p%d + (%s), l%u);\n", ind, p, off, i);
            snprintf(c->ov[i], OV_MAX, "l%u[k]", i);
        } else if (cl == ACC_BCAST) {
            if (h)
                sb_printf(&c->s, "%sconst %s l%u = H ? hv.l%u : kf_ld(p%d + (%s));\n", ind, rt, i, i,
                          p, off);
            else
                sb_printf(&c->s, "%sconst %s l%u = kf_ld(p%d + (%s));\n", ind, rt, i, p, off);
            snprintf(c->ov[i], OV_MAX, "l%u", i);
        } else {
            snprintf(c->ov[i], OV_MAX, "kf_ld(p%d + (%s) + k * %" PRId64 "LL)", p, off,
                     s[rank - 1]);
        }
    }
}

/* kf_vec_ok's conditions for the vector loads among the needed nodes (and the
 * `extra` params, written contiguously), appended to *cond. */
static void vec_conditions(cg *c, const chunk_ctx *x, uint32_t vec, sbuf *cond) {
    for (uint32_t i = 0; i < c->n; i++) {
        const kf_expr *e = &c->g->expr[i];
        if (!c->need[i] || c->ov[i][0] || !is_load(e) || x->vrank[e->space] <= 0)
            continue;
        int rank;
        const int64_t *dims;
        space_dims(c->g, e->space, &rank, &dims);
        int64_t s[KF_MAX_RANK];
        node_strides(c, i, s);
        if (classify(rank, dims, s, vec) != ACC_VECTOR)
            continue;
        int p = c->param[i];
        size_t bytes = vec * kf_dtype_size(c->k->params[p].dtype);
        if (c->soff[i] >= 0)
            bytes = 16; /* staged: cp.async copies 16-byte pieces */
        sb_printf(cond, " && kf_aligned(p%d, %zu)", p, bytes > 16 ? (size_t)16 : bytes);
    }
}

/* ------------------------------------------------------------------------ */
/* Common pieces of every source                                              */
/* ------------------------------------------------------------------------ */

static void emit_params(cg *c, bool args) {
    const kf_cuda_kernel *k = c->k;
    for (uint32_t i = 0; i < k->n_params; i++) {
        const kf_cuda_param *p = &k->params[i];
        if (args) {
            sb_printf(&c->s, "%sp%u", i ? ", " : "", i);
            continue;
        }
        bool in = p->kind == KF_CUDA_PARAM_IN || p->kind == KF_CUDA_PARAM_ACC ||
                  p->kind == KF_CUDA_PARAM_SCORES;
        sb_printf(&c->s, "%s%s%s *__restrict__ p%u", i ? ", " : "", in ? "const " : "",
                  storage_type(p->dtype), i);
    }
}

static void emit_head(cg *c, const char *what) {
    const kf_cuda_kernel *k = c->k;
    sb_printf(&c->s,
              "/* kfuse generated kernel %s\n"
              " * %s of plan group %u (%s), template %s, %s, codegen v%u.\n"
              " * Parameters:\n",
              k->name, what, c->g->id, c->g->name, kf_cuda_template_name(k->tmpl), k->arch,
              KF_CUDA_CODEGEN_VERSION);
    static const char *const kinds[] = {"in", "out", "acc", "scores", "scratch", "i64"};
    for (uint32_t i = 0; i < k->n_params; i++) {
        const kf_cuda_param *p = &k->params[i];
        const kf_tensor *t = tensor(c, p->tensor);
        char ty[96];
        kf_ir_type_str(t, ty, sizeof ty);
        sb_printf(&c->s, " *   p%u %-7s %s %s\n", i, kinds[p->kind], t->name ? t->name : "%", ty);
    }
    sb_puts(&c->s, " */\n");
    sb_puts(&c->s, kf_cuda_tpl_common);
    sb_printf(&c->s, "\n/* ---- generated ---- */\n#define KF_KERNEL %s\n#define KF_BLOCK %u\n#define KF_VEC %u\n",
              k->name, k->launch.block, k->vec);
    sb_puts(&c->s, "#define KF_PARAMS ");
    emit_params(c, false);
    sb_puts(&c->s, "\n#define KF_ARGS ");
    emit_params(c, true);
    sb_puts(&c->s, "\n");
    emit_gelu_table(c);
}

static void emit_vec_ok(cg *c, const char *conds) {
    sb_printf(&c->s, "__device__ __forceinline__ bool kf_vec_ok(KF_PARAMS) {\n    return true%s;\n}\n",
              conds);
}

/* ------------------------------------------------------------------------ */
/* Kernel setup shared by the entry points                                    */
/* ------------------------------------------------------------------------ */

/* Threads per row for the block templates: the smallest block (from 128) that
 * keeps each thread at most 16 values (8 in double) in registers. Several
 * 16-byte loads per thread put a whole row in flight before its reduction,
 * and smaller blocks keep more rows in flight per SM; blocks of one load per
 * thread (the old <= 8 values) left the memory system idle across each row's
 * reductions. Measured on an H200, 65536 x 4096 bf16 (bench, b46d64f): 512
 * threads x 8 values rmsnorm 0.443 ms, layernorm 0.587; 128 x 32: 0.442,
 * 0.507; 256 x 16: 0.340, 0.492. Rows too long take the multipass template. */
/* A warp per row up to 4096 elements (f32/f16/bf16: at most 128 values per
 * lane in registers, no __syncthreads at all), a block per row beyond. On an
 * H200, 65536 x 4096 bf16: warp per row rmsnorm 0.300 ms (84% of copy),
 * layernorm 0.367 ms (69%), against 0.338 / 0.542 ms with 256-thread blocks
 * (ab05489, the same run). Doubles keep the block template above 1024. */
#define ROW_WARP_MAX 4096
static bool row_warp_for(int64_t L, bool dbl) {
    return L <= 1024 || (!dbl && L <= ROW_WARP_MAX);
}

static uint32_t row_block_for(int64_t L, bool dbl) {
    int64_t per = dbl ? 8 : 16;
    uint32_t block = 128;
    while (block < 1024 && (L + block - 1) / block > per)
        block *= 2;
    return block;
}

static kf_status cg_begin(cg *c, const kf_plan *plan, uint32_t group, const char *arch,
                          const kf_mem *mem, kf_cuda_kernel *out) {
    memset(out, 0, sizeof *out);
    memset(c, 0, sizeof *c);
    c->k = out;
    c->mem = mem;
    c->s.mem = mem;
    if (!plan || !mem || !arch) {
        snprintf(out->error, sizeof out->error, "kf_cuda_codegen: NULL plan, allocator or arch");
        return KF_ERR_INVALID_ARGUMENT;
    }
    size_t al = strlen(arch);
    bool arch_ok = al >= 5 && al < KF_CUDA_ARCH_MAX && strncmp(arch, "sm_", 3) == 0;
    for (size_t i = 3; arch_ok && i < al; i++)
        arch_ok = (arch[i] >= '0' && arch[i] <= '9') || (i == al - 1 && (arch[i] == 'a' || arch[i] == 'f'));
    if (!arch_ok) {
        snprintf(out->error, sizeof out->error,
                 "kf_cuda_codegen: bad arch '%s': expected sm_XY or sm_XYa, e.g. sm_80 or sm_90a",
                 arch);
        return KF_ERR_INVALID_ARGUMENT;
    }
    if (group >= plan->n_groups) {
        snprintf(out->error, sizeof out->error, "kf_cuda_codegen: group %u out of range (%u groups)",
                 group, plan->n_groups);
        return KF_ERR_INVALID_ARGUMENT;
    }
    c->plan = plan;
    c->g = &plan->groups[group];
    c->n = c->g->n_expr;
    snprintf(out->arch, sizeof out->arch, "%s", arch);
    out->group = group;
    size_t n = c->n ? c->n : 1;
    c->ov = kf_mem_calloc(mem, n, sizeof *c->ov);
    c->need = kf_mem_calloc(mem, n, sizeof *c->need);
    c->param = kf_mem_calloc(mem, n, sizeof *c->param);
    c->soff = kf_mem_calloc(mem, n, sizeof *c->soff);
    c->stored = kf_mem_calloc(mem, n, sizeof *c->stored);
    if (!c->ov || !c->need || !c->param || !c->soff || !c->stored) {
        snprintf(out->error, sizeof out->error, "kf_cuda_codegen: out of memory");
        return KF_ERR_OUT_OF_MEMORY;
    }
    for (uint32_t i = 0; i < c->n; i++) {
        c->param[i] = -1;
        c->soff[i] = -1;
    }
    return KF_OK;
}

/* NVRTC (runtime/nvrtc.c) takes identifiers of at most 64 characters. */
#define NAME_LIMIT 64
_Static_assert(NAME_LIMIT < KF_CUDA_NAME_MAX, "a short name fits the kernel's name field");

static uint32_t fnv1a(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/* PREFIX + the group's name + "_" + arch without '_': ew_gelu_mul_bf16_65536x4096_sm90a.
 * Too long, the op tags are cut and a hash of the whole name keeps it unique:
 * ew_neg_abs_exp_..._3f9a01c2_f32_8x64_sm80. */
static void cg_set_name(cg *c, const char *prefix) {
    char a[KF_CUDA_ARCH_MAX];
    size_t j = 0;
    for (const char *p = c->k->arch; *p && j + 1 < sizeof a; p++) {
        if (*p != '_')
            a[j++] = *p;
    }
    a[j] = 0;
    char base[sizeof c->g->name];
    size_t n = 0;
    for (const char *p = c->g->name; *p && n + 1 < sizeof base; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        base[n++] = ok ? ch : '_';
    }
    base[n] = 0;
    char full[KF_CUDA_NAME_MAX + sizeof base];
    snprintf(full, sizeof full, "%s%s_%s", prefix, base, a);
    size_t full_len = strlen(full);
    if (full_len <= NAME_LIMIT) {
        memcpy(c->k->name, full, full_len + 1); /* NAME_LIMIT < sizeof c->k->name */
        return;
    }
    /* tail: "_DTYPE_SHAPE_ARCH" (the last two '_' of the group's name) */
    char *u1 = strrchr(base, '_');
    char *u2 = NULL;
    if (u1) {
        *u1 = 0;
        u2 = strrchr(base, '_');
        *u1 = '_';
    }
    char tail[NAME_LIMIT];
    snprintf(tail, sizeof tail, "%s_%s", u2 ? u2 : "", a);
    uint32_t h = fnv1a(full);
    size_t keep_tail = strlen(tail);
    if (keep_tail + 12 > NAME_LIMIT) {
        snprintf(c->k->name, sizeof c->k->name, "k%s_%08x_%s", prefix[0] ? "_" : "", h, a);
        return;
    }
    size_t head = NAME_LIMIT - keep_tail - 9;
    if (u2)
        *u2 = 0;
    char headbuf[NAME_LIMIT];
    snprintf(headbuf, sizeof headbuf, "%.8s%.55s", prefix, base); /* prefixes are <= 8 chars */
    headbuf[head < sizeof headbuf ? head : sizeof headbuf - 1] = 0;
    snprintf(c->k->name, sizeof c->k->name, "%.63s_%08x%.63s", headbuf, h, tail);
}

static kf_status cg_end(cg *c, kf_status st) {
    if (c->st == KF_OK && c->s.oom)
        cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    if (st == KF_OK)
        st = c->st;
    if (c->ov)
        kf_mem_free(c->mem, c->ov, (c->n ? c->n : 1) * sizeof *c->ov);
    if (c->need)
        kf_mem_free(c->mem, c->need, (c->n ? c->n : 1) * sizeof *c->need);
    if (c->param)
        kf_mem_free(c->mem, c->param, (c->n ? c->n : 1) * sizeof *c->param);
    if (c->soff)
        kf_mem_free(c->mem, c->soff, (c->n ? c->n : 1) * sizeof *c->soff);
    if (c->stored)
        kf_mem_free(c->mem, c->stored, (c->n ? c->n : 1) * sizeof *c->stored);
    if (st != KF_OK) {
        if (c->s.p)
            kf_mem_free(c->mem, c->s.p, c->s.cap);
        c->k->source = NULL;
        c->k->source_len = c->k->source_cap = 0;
        return st;
    }
    c->k->source = c->s.p;
    c->k->source_len = c->s.len;
    c->k->source_cap = c->s.cap;
    return KF_OK;
}

/* ------------------------------------------------------------------------ */
/* Outputs                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct out_spec {
    uint32_t node;   /* root */
    int param;
    kf_dtype dtype;  /* the buffer's */
    uint32_t tensor;
    bool synth_softmax; /* attention: exp(x - max) / sumexp of the row input */
} out_spec;

#define MAX_OUTS KF_CUDA_MAX_PARAMS

/* Marks the outputs' nodes that are stored in their own dtype (raw_of). */
static void mark_stored(cg *c, const out_spec *outs, uint32_t n_outs) {
    for (uint32_t o = 0; o < n_outs; o++) {
        if (outs[o].node < c->n && c->g->expr[outs[o].node].dtype == outs[o].dtype)
            c->stored[outs[o].node] = true;
    }
}

/* ------------------------------------------------------------------------ */
/* Elementwise (and layout, and the GEMM epilogue without a row stage)        */
/* ------------------------------------------------------------------------ */

static void coords_linear(chunk_ctx *x, kf_space sp, int rank, const int64_t *dims,
                          const char *linear) {
    int64_t inner = 1;
    for (int d = rank - 1; d >= 0; d--) {
        if (d == 0)
            snprintf(x->coord[sp][d], sizeof x->coord[sp][d], "(%s) / %" PRId64 "LL", linear, inner);
        else if (inner == 1)
            snprintf(x->coord[sp][d], sizeof x->coord[sp][d], "(%s) %% %" PRId64 "LL", linear, dims[d]);
        else
            snprintf(x->coord[sp][d], sizeof x->coord[sp][d], "(%s) / %" PRId64 "LL %% %" PRId64 "LL",
                     linear, inner, dims[d]);
        inner *= dims[d];
    }
    snprintf(x->lin[sp], sizeof x->lin[sp], "%s", linear);
}

/* Shared memory a block may use (dynamic + static) and an SM holds, for the
 * devices a binary of `arch` runs on (runtime/cuda.c: sm_80 serves every 8.x,
 * so its per-block limit is the 99 KiB of 8.6/8.9, not A100's 163 KiB; the
 * per-SM figure only sizes the grid, and is A100's). */
static bool stage_smem_limits(const char *arch, uint32_t *per_block, uint32_t *per_sm) {
    int sm = atoi(arch + 3); /* cg_begin checked "sm_" + digits */
    if (sm < 80)
        return false; /* cp.async is sm_80+ */
    if (sm >= 90 && sm < 120) {
        *per_block = 227 * 1024; /* H100/H200/B200 */
        *per_sm = 228 * 1024;
    } else {
        *per_block = 99 * 1024;
        *per_sm = sm == 80 ? 164 * 1024 : 100 * 1024;
    }
    return true;
}

/* The bulk path of the elementwise template (elementwise.cuh, KF_BULK):
 * blocks of BULK_BLOCK threads, one per SM, move chunks of BULK_BLOCK * vec
 * elements (a vector per thread) through a ring of about BULK_RING_TARGET
 * bytes, at least BULK_MIN_STAGES stages. A stage holds each streamed
 * operand's part of the chunk, then each output's: in the place of a streamed
 * operand of the same element size not already taken, else its own.
 * Measured on the 65536 x 4096 bf16 chain (elementwise.cuh's note), one
 * process per GPU, H100 (evict-first) / H200 (evict-normal), ms:
 *   5 x 16 KiB, 1024 threads   0.390-0.391 / 0.273-0.274  (this rule)
 *   6 x 16 KiB                 0.392-0.393 / 0.277-0.283
 *   4 x 16 KiB                 0.388-0.390 / 0.290-0.292
 *   8 x 16 KiB                 -           / 0.293-0.295
 *   3 x 32 KiB                 0.384-0.386 / 0.287-0.290
 *   3 x 16 KiB, 512 threads, 2 blocks per SM   0.389-0.390 / 0.290
 *   4 x 8 KiB, 256 threads, 2 blocks per SM    0.394-0.395 / 0.313-0.316
 * against 0.398-0.403 / 0.289-0.295 for the grid-stride loops alone. The
 * H200 is that sensitive to the bytes in flight: 5 x 16 KiB also led at a
 * half and a third of the size. */
#define BULK_BLOCK 1024u
#define BULK_RING_TARGET (80u * 1024u)
#define BULK_MIN_STAGES 3u
#define BULK_MAX 4u          /* streamed operands, outputs */
#define BULK_MIN_CHUNKS 128  /* fewer: the grid-stride loops alone */

typedef struct bulk_plan {
    int64_t e;               /* elements per chunk; 0: no bulk path */
    uint32_t stages;
    uint32_t stage_bytes;    /* bytes of one stage */
    uint32_t tx;             /* bytes the streamed operands of a chunk load */
    uint32_t n_in;
    uint32_t in_node[BULK_MAX];
    uint32_t in_off[BULK_MAX];  /* byte offsets in a stage */
    uint32_t out_off[BULK_MAX];
} bulk_plan;

/* Plans the bulk path for an elementwise kernel with `streams` streamed
 * operands (`pre`; 0: none qualifies) and n_outs full outputs of n elements,
 * or leaves bp->e = 0: below sm_90 (cp.async.bulk), scalar kernels, more than
 * BULK_MAX operands or outputs, too few chunks, or a ring the arch's shared
 * memory does not hold. */
static void plan_bulk(const cg *c, const out_spec *outs, uint32_t n_outs, int64_t n, uint32_t vec,
                      uint32_t streams, const bool *pre, bulk_plan *bp) {
    memset(bp, 0, sizeof *bp);
    uint32_t per_block, per_sm;
    if (atoi(c->k->arch + 3) < 90 || vec < 2 || streams == 0 || streams > BULK_MAX ||
        n_outs == 0 || n_outs > BULK_MAX || !stage_smem_limits(c->k->arch, &per_block, &per_sm))
        return;
    uint32_t in_size[BULK_MAX], bpe = 0; /* bytes per element of a stage */
    for (uint32_t i = 0; i < c->n; i++) {
        if (!pre[i])
            continue;
        bp->in_node[bp->n_in] = i;
        in_size[bp->n_in] = (uint32_t)kf_dtype_size(c->k->params[c->param[i]].dtype);
        bp->in_off[bp->n_in++] = bpe;
        bpe += in_size[bp->n_in - 1];
    }
    bool taken[BULK_MAX] = {false};
    for (uint32_t o = 0; o < n_outs; o++) {
        uint32_t z = (uint32_t)kf_dtype_size(outs[o].dtype), k = 0;
        while (k < bp->n_in && (taken[k] || in_size[k] != z))
            k++;
        if (k < bp->n_in) {
            taken[k] = true;
            bp->out_off[o] = bp->in_off[k];
        } else {
            bp->out_off[o] = bpe;
            bpe += z;
        }
    }
    int64_t e = (int64_t)BULK_BLOCK * vec;
    uint64_t stage = (uint64_t)e * bpe, stages = BULK_RING_TARGET / stage;
    if (stages < BULK_MIN_STAGES)
        stages = BULK_MIN_STAGES;
    uint64_t fixed = (has_gelu_table(c) ? GELU_TAB_N * 2u : 0u) + 1024u;
    if (stages * stage + fixed > per_block || n / e < BULK_MIN_CHUNKS) {
        memset(bp, 0, sizeof *bp);
        return;
    }
    bp->e = e;
    bp->stages = (uint32_t)stages;
    bp->stage_bytes = (uint32_t)stage;
    for (uint32_t k = 0; k < bp->n_in; k++) {
        bp->tx += (uint32_t)e * in_size[k];
        bp->in_off[k] *= (uint32_t)e;
    }
    for (uint32_t o = 0; o < n_outs; o++)
        bp->out_off[o] *= (uint32_t)e;
}

/* The bulk path's hooks (elementwise.cuh), or KF_BULK 0. */
static void emit_bulk(cg *c, const bulk_plan *bp, const out_spec *outs, uint32_t n_outs) {
    if (bp->e == 0) {
        sb_puts(&c->s, "#define KF_BULK 0\n\n");
        return;
    }
    sb_printf(&c->s,
              "#define KF_BULK 1\n#define KF_BULK_E %" PRId64 "LL\n#define KF_BULK_STAGES %u\n"
              "#define KF_BULK_STAGE_BYTES %u\n#define KF_BULK_TX %uu\n",
              bp->e, bp->stages, bp->stage_bytes, bp->tx);
    sb_puts(&c->s, "__device__ __forceinline__ void kf_bulk_load(unsigned char *sb, unsigned long long "
                   "*bar, long long c, KF_PARAMS) {\n");
    for (uint32_t k = 0; k < bp->n_in; k++) {
        int p = c->param[bp->in_node[k]];
        sb_printf(&c->s, "    kf_bulk_ld(sb + %u, p%d + c * KF_BULK_E, KF_BULK_E * %zu, bar);\n",
                  bp->in_off[k], p, kf_dtype_size(c->k->params[p].dtype));
    }
    sb_puts(&c->s, "}\n__device__ __forceinline__ void kf_bulk_pre(const unsigned char *sb, int e, "
                   "kf_pre &pv) {\n");
    for (uint32_t k = 0; k < bp->n_in; k++) {
        size_t z = kf_dtype_size(c->k->params[c->param[bp->in_node[k]]].dtype);
        sb_printf(&c->s, "    pv.l%u = *reinterpret_cast<const kf_raw<KF_VEC * %zu> *>(sb + %u + e * %zu);\n",
                  bp->in_node[k], z, bp->in_off[k], z);
    }
    sb_puts(&c->s, "}\n__device__ __forceinline__ void kf_bulk_store(const unsigned char *sb, long long c, "
                   "KF_PARAMS) {\n");
    for (uint32_t o = 0; o < n_outs; o++)
        sb_printf(&c->s, "    kf_bulk_st(p%d + c * KF_BULK_E, sb + %u, KF_BULK_E * %zu);\n",
                  outs[o].param, bp->out_off[o], kf_dtype_size(outs[o].dtype));
    sb_puts(&c->s, "}\n\n");
}

static kf_status gen_elementwise(cg *c, out_spec *outs, uint32_t n_outs, kf_space sp,
                                 const char *what) {
    const kf_group *g = c->g;
    kf_cuda_kernel *k = c->k;
    int rank;
    const int64_t *dims;
    space_dims(g, sp, &rank, &dims);
    int64_t n = numel_of(rank, dims);
    k->tmpl = KF_CUDA_TEMPLATE_ELEMENTWISE;
    for (uint32_t o = 0; o < n_outs; o++)
        mark(c, outs[o].node);
    load_params(c);
    mark_stored(c, outs, n_outs);
    /* Writes: contiguous over the space (a vector store), or broadcast (a
     * guarded scalar store: only the elements at coordinate 0 of the axes the
     * written tensor does not have). */
    bool all_full = true;
    size_t minsz = 16;
    for (uint32_t o = 0; o < n_outs; o++) {
        const kf_tensor *t = tensor(c, outs[o].tensor);
        if (kf_ir_numel(t) != n)
            all_full = false;
        size_t z = kf_dtype_size(outs[o].dtype);
        if (z < minsz)
            minsz = z;
    }
    minsz = min_vec_size(c, sp, minsz);
    uint32_t vec = all_full && rank > 0 ? vec_for(minsz, dims[rank - 1], rank == 1) : 1;
    if (n < (int64_t)vec)
        vec = 1;
    k->vec = vec;
    k->launch.block = 256;
    k->launch.work_items = (uint64_t)((n + vec - 1) / vec);
    k->launch.items_per_block = 256;
    k->launch.blocks_per_sm = 8;
    if (c->st != KF_OK)
        return c->st;

    /* Hoisting: an operand whose offset depends only on the linear index
     * modulo P (it varies along a suffix of the axes only: a bias, a scale,
     * a per-column vector) reads the same values in every grid-stride step
     * when threads * KF_VEC is a multiple of P. The hoisted path loads those
     * once per thread (kf_hoist_load) instead of once per vector; the grid is
     * rounded to make it apply (launch.grid_multiple). The other vector loads
     * are the streamed operands (`pre`, KF_UNROLL below). */
    bool *hoist = kf_mem_calloc(c->mem, c->n ? c->n : 1, sizeof *hoist);
    bool *pre = kf_mem_calloc(c->mem, c->n ? c->n : 1, sizeof *pre);
    if (!hoist || !pre) {
        if (hoist)
            kf_mem_free(c->mem, hoist, (c->n ? c->n : 1) * sizeof *hoist);
        if (pre)
            kf_mem_free(c->mem, pre, (c->n ? c->n : 1) * sizeof *pre);
        return cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    }
    int64_t period = 0;
    uint32_t streams = 0;
    bool streams_dense = true; /* every streamed operand is laid out as the space */
    for (uint32_t i = 0; i < c->n && vec > 1; i++) {
        const kf_expr *e = &g->expr[i];
        if (!c->need[i] || c->ov[i][0] || !is_load(e) || e->space != sp)
            continue;
        int64_t s[KF_MAX_RANK];
        node_strides(c, i, s);
        acc_class cl = classify(rank, dims, s, vec);
        if (cl == ACC_GATHER)
            continue;
        int d0 = rank;
        for (int d = 0; d < rank && d0 == rank; d++) {
            if (s[d] != 0 && dims[d] != 1)
                d0 = d;
        }
        int64_t pi = numel_of(rank - d0, dims + d0);
        if (pi >= n) {
            if (cl == ACC_VECTOR) {
                pre[i] = true;
                streams++;
                streams_dense = streams_dense && strides_contig(rank, dims, s);
            }
            continue;
        }
        hoist[i] = true;
        if (pi > period)
            period = pi; /* >= 1: a hoisted operand has one */
    }
    /* The grid aims at 8 blocks per SM; ptxas must fit them (32 registers):
     * with 33 the chain above ran 0.349 ms instead of 0.294 (H200). Not for
     * f64, i32 (64-bit saturation) or pow, which would spill at 32. */
    bool light = true;
    for (uint32_t i = 0; i < c->n; i++) {
        const kf_expr *e = &g->expr[i];
        if (c->need[i] && (e->dtype == KF_DTYPE_F64 || e->dtype == KF_DTYPE_I32 ||
                           (e->kind == KF_EXPR_OP && e->op == KF_OP_POW)))
            light = false;
    }
    /* Streamed operands (16-byte vector loads, not hoisted) are read once:
     * with KF_UNROLL > 1 each thread loads KF_UNROLL steps of them
     * (kf_pre_load, with the device's L2 policy for streamed reads,
     * common.cuh) before computing the first, at 4 blocks of 256 per SM (64
     * registers): 64 bytes in flight per thread instead of 16. At most 4
     * streamed vectors per step in flight, so 4 / streams steps. For the
     * chain above (one stream, 65536 x 4096 bf16), against one vector per
     * step at 8 blocks: H100 0.400 ms against 0.419 (evict-first), H200
     * 0.290-0.292 against 0.296-0.300. */
    uint32_t unroll = light && streams > 0 && streams <= 2 ? 4 / streams : 1;
    if (unroll > 1)
        k->launch.blocks_per_sm = 4;
    bulk_plan bp;
    plan_bulk(c, outs, n_outs, n, vec, light && streams_dense ? streams : 0, pre, &bp);
    if (bp.e > 0) {
        k->tmpl = KF_CUDA_TEMPLATE_ELEMENTWISE_BULK;
        k->launch.block = BULK_BLOCK;
        k->launch.blocks_per_sm = 1;
        k->launch.shared_bytes = bp.stages * bp.stage_bytes;
        k->launch.work_items = (uint64_t)(n / bp.e);
        k->launch.items_per_block = 1;
    }
    if (period > 0) {
        uint64_t a = (uint64_t)period, b = (uint64_t)k->launch.block * vec;
        while (b) {
            uint64_t t = a % b;
            a = b;
            b = t;
        }
        uint64_t m = (uint64_t)period / a;
        k->launch.grid_multiple = m <= 65536 ? (uint32_t)m : 0;
    }

    emit_head(c, what);
    sb_printf(&c->s, "#define KF_N %" PRId64 "LL\n#define KF_NVEC %" PRId64 "LL\n\n", n,
              n / (int64_t)vec);

    chunk_ctx *x = kf_mem_calloc(c->mem, 1, sizeof *x);
    if (!x) {
        kf_mem_free(c->mem, hoist, (c->n ? c->n : 1) * sizeof *hoist);
        kf_mem_free(c->mem, pre, (c->n ? c->n : 1) * sizeof *pre);
        return cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    }
    coords_linear(x, sp, rank, dims, "i0");
    x->vrank[sp] = rank;
    x->vrank[sp == KF_SPACE_OUT ? KF_SPACE_ROW : KF_SPACE_OUT] = 0;

    sbuf cond = {.mem = c->mem};
    vec_conditions(c, x, vec, &cond);
    for (uint32_t o = 0; o < n_outs && vec > 1; o++) {
        size_t bytes = vec * kf_dtype_size(outs[o].dtype);
        sb_printf(&cond, " && kf_aligned(p%d, %zu)", outs[o].param, bytes > 16 ? (size_t)16 : bytes);
    }
    emit_vec_ok(c, cond.p ? cond.p : "");
    if (cond.p)
        kf_mem_free(c->mem, cond.p, cond.cap);

    sb_printf(&c->s, "#define KF_HOIST_P %" PRId64 "LL\n", period);
    sb_printf(&c->s, "#define KF_MINB %u\n#define KF_UNROLL %u\n",
              bp.e > 0 ? 1u : light ? k->launch.blocks_per_sm : 1u, unroll);
    sb_puts(&c->s, "struct kf_hoist {\n");
    for (uint32_t i = 0; i < c->n; i++) {
        if (!hoist[i])
            continue;
        int64_t s[KF_MAX_RANK];
        node_strides(c, i, s);
        kf_dtype pd = c->k->params[c->param[i]].dtype;
        if (classify(rank, dims, s, vec) == ACC_VECTOR) /* raw: 4 registers for 8 bf16 */
            sb_printf(&c->s, "    kf_raw<KF_VEC * %zu> l%u;\n", kf_dtype_size(pd), i);
        else
            sb_printf(&c->s, "    %s l%u;\n", reg_type(pd), i);
    }
    sb_puts(&c->s, "    char none_;\n};\n"
                   "__device__ __forceinline__ void kf_hoist_load(long long i0, kf_hoist &hv, KF_PARAMS) {\n");
    for (uint32_t i = 0; i < c->n; i++) {
        if (!hoist[i])
            continue;
        int64_t s[KF_MAX_RANK];
        node_strides(c, i, s);
        char off[OV_MAX - 64];
        offset_str(c, x, i, off, sizeof off);
        if (classify(rank, dims, s, vec) == ACC_VECTOR)
            sb_printf(&c->s, "    kf_raw_ld(p%d + (%s), hv.l%u);\n", c->param[i], off, i);
        else
            sb_printf(&c->s, "    hv.l%u = kf_ld(p%d + (%s));\n", i, c->param[i], off);
    }
    sb_puts(&c->s, "    (void)i0; (void)hv;\n}\n\n");

    sb_puts(&c->s, "struct kf_pre {\n");
    for (uint32_t i = 0; i < c->n; i++) {
        if (pre[i])
            sb_printf(&c->s, "    kf_raw<KF_VEC * %zu> l%u;\n",
                      kf_dtype_size(c->k->params[c->param[i]].dtype), i);
    }
    sb_puts(&c->s, "    char none_;\n};\n"
                   "__device__ __forceinline__ void kf_pre_load(long long i0, kf_pre &pv, KF_PARAMS) {\n");
    for (uint32_t i = 0; i < c->n; i++) {
        if (!pre[i])
            continue;
        char off[OV_MAX - 64];
        offset_str(c, x, i, off, sizeof off);
        sb_printf(&c->s, "    kf_raw_ld_stream(p%d + (%s), pv.l%u);\n", c->param[i], off, i);
    }
    sb_puts(&c->s, "    (void)i0; (void)pv;\n}\n\n");
    emit_bulk(c, &bp, outs, n_outs);

    sb_puts(&c->s, "template <int VV, bool H, bool P, bool B>\n__device__ __forceinline__ void "
                   "kf_body(long long i0, const kf_hoist &hv, const kf_pre &pv, unsigned char *sb, "
                   "KF_PARAMS) {\n");
    emit_loads(c, x, vec, "    ", hoist, pre);
    for (uint32_t o = 0; o < n_outs; o++)
        sb_printf(&c->s, "    %s o%u[VV];\n", reg_type(outs[o].dtype), o);
    emit_nodes(c, coord_of, x, "    ", true);
    sb_puts(&c->s, "#pragma unroll\n    for (int k = 0; k < VV; k++) {\n");
    for (uint32_t o = 0; o < n_outs; o++)
        sb_printf(&c->s, "        o%u[k] = (%s)v%u%s[k];\n", o, reg_type(outs[o].dtype), outs[o].node,
                  raw_of(c, outs[o].node, true) ? "u" : "");
    sb_puts(&c->s, "    }\n    (void)hv; (void)pv; (void)sb;\n");
    kf_mem_free(c->mem, hoist, (c->n ? c->n : 1) * sizeof *hoist);
    kf_mem_free(c->mem, pre, (c->n ? c->n : 1) * sizeof *pre);
    for (uint32_t o = 0; o < n_outs; o++) {
        const kf_tensor *t = tensor(c, outs[o].tensor);
        if (kf_ir_numel(t) == n) {
            /* a bf16 result already exact stores without conversions (a
             * rounded op's unrounded value, raw_of, with one cvt per two) */
            bool x16 = outs[o].dtype == KF_DTYPE_BF16 && exact_bf16(c, outs[o].node) &&
                       !raw_of(c, outs[o].node, true);
            if (bp.e > 0) /* B: into the stage, at the element's place in the chunk */
                sb_printf(&c->s,
                          "    kf_stv%s<VV>(B ? reinterpret_cast<%s *>(sb + %u) + (i0 & (KF_BULK_E - 1)) "
                          ": p%d + i0, o%u);\n",
                          x16 ? "_bf16x" : "", storage_type(outs[o].dtype), bp.out_off[o],
                          outs[o].param, o);
            else
                sb_printf(&c->s, "    kf_stv%s<VV>(p%d + i0, o%u);\n", x16 ? "_bf16x" : "",
                          outs[o].param, o);
            continue;
        }
        /* vec == 1 here. */
        int64_t s[KF_MAX_RANK];
        kf_ir_broadcast_strides(t, rank, s);
        sb_puts(&c->s, "    if (true");
        for (int d = 0; d < rank; d++) {
            if (s[d] == 0 && dims[d] != 1)
                sb_printf(&c->s, " && %s == 0", x->coord[sp][d]);
        }
        sb_printf(&c->s, ")\n        kf_st(p%d + (0", outs[o].param);
        for (int d = 0; d < rank; d++) {
            if (s[d] != 0 && dims[d] != 1)
                sb_printf(&c->s, " + %s * %" PRId64 "LL", x->coord[sp][d], s[d]);
        }
        sb_printf(&c->s, "), o%u[0]);\n", o);
    }
    sb_puts(&c->s, "}\n\n");
    kf_mem_free(c->mem, x, sizeof *x);
    sb_puts(&c->s, kf_cuda_tpl_elementwise);
    return c->st;
}

/* ------------------------------------------------------------------------ */
/* Row-wise                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct row_spec {
    kf_space sp;      /* the row input's space (last axis reduced) */
    uint32_t input;   /* node x */
    unsigned stats;   /* 1u << KF_STAT_* */
    int64_t length;
    double eps;
    kf_dtype in_dtype;
} row_spec;

static unsigned stats_used(const cg *c, unsigned declared) {
    unsigned s = declared;
    for (uint32_t i = 0; i < c->n; i++) {
        if (c->need[i] && c->g->expr[i].kind == KF_EXPR_STAT)
            s |= 1u << c->g->expr[i].stat;
    }
    return s;
}

static void emit_stat_defines(cg *c, unsigned s, double eps, kf_dtype in_dtype, int64_t length) {
    bool dbl = in_dtype == KF_DTYPE_F64 || in_dtype == KF_DTYPE_I32;
    sb_printf(&c->s, "typedef %s kf_acc_t;\n", dbl ? "double" : "float");
    sb_printf(&c->s, "#define KF_NEED_MAX %d\n", (s & (1u << KF_STAT_MAX | 1u << KF_STAT_SUMEXP)) != 0);
    sb_printf(&c->s, "#define KF_NEED_SUM %d\n",
              (s & (1u << KF_STAT_SUM | 1u << KF_STAT_MEAN | 1u << KF_STAT_RSTD)) != 0);
    sb_printf(&c->s, "#define KF_NEED_SUMSQ %d\n", (s & (1u << KF_STAT_RMS_RSTD)) != 0);
    sb_printf(&c->s, "#define KF_NEED_M2 %d\n", (s & (1u << KF_STAT_RSTD)) != 0);
    sb_printf(&c->s, "#define KF_NEED_SUMEXP %d\n", (s & (1u << KF_STAT_SUMEXP)) != 0);
    /* the norms of f64 rows on the row scaled below 2^500 (rowwise.cuh) */
    sb_printf(&c->s, "#define KF_ROW_SCALE %d\n",
              in_dtype == KF_DTYPE_F64 &&
                  (s & (1u << KF_STAT_RSTD | 1u << KF_STAT_RMS_RSTD)) != 0);
    sb_puts(&c->s, "#define KF_EPS ");
    emit_const(c, dbl ? KF_DTYPE_F64 : KF_DTYPE_F32, eps);
    sb_puts(&c->s, "\n");
    (void)length;
}

/* ---- row_warp_staged ------------------------------------------------------
 * The register path of a warp per row keeps up to 128 f32 per lane (a 4096-
 * element row): 211-254 registers, 8 warps per SM, and on an H200 (65536 x
 * 4096 bf16) rms_norm reached 84% and layer_norm 69% of copy bandwidth. With
 * the row-shaped loads staged through a per-warp cp.async ring in shared
 * memory, a standalone version of the same kernels reached 88% / 86% (4 warps
 * x 3 stages, 2 blocks per SM) and 90% / 87% (8 warps x 2 stages, 1 block per
 * SM), bit-identical outputs; a plain SM copy kernel reaches ~92% there. The
 * generated kernels (4 warps x 2 stages, 3 blocks per SM): 88% / 85%.
 *
 * Which groups stage (gen_rowwise): those whose statistics take two dependent
 * steps (layer_norm's M2 with the mean, softmax's sum of exponentials after
 * the max). A single-reduction group (rms_norm, sums) keeps the register
 * path, which once its stores lost their double rounding (raw_of) was the
 * faster of the two: H200, bf16 rms_norm 65536 x 4096, 0.278-0.280 ms against
 * 0.279-0.282 staged (8 x 2); H100, before raw_of, 0.380 against 0.384.
 * layer_norm on the register path: 0.348 ms (H200) against 0.287 staged. */


typedef struct stage_cfg {
    uint32_t warps, stages, bytes; /* bytes: one stage (a row of every staged load) */
    uint32_t shared, blocks_per_sm;
} stage_cfg;

/* Decides whether the prologue's loads can be staged and sets c->soff. A load
 * is row-shaped when it varies along the row and across rows (no stride-0
 * outer axis); every row-shaped load of the prologue must be stageable (last
 * stride 1, row bytes and the outer strides in bytes multiples of 16),
 * otherwise a pass would re-read a row from global memory, and the group keeps
 * the register path. Two loads of one buffer with the same strides share a
 * row. Other loads (weights, biases, broadcasts) stay global. Uses c->need. */
static bool stage_plan(cg *c, const row_spec *rs, const out_spec *outs, uint32_t n_outs,
                       const bool *pro, stage_cfg *cfg) {
    const kf_group *g = c->g;
    int rank;
    const int64_t *dims;
    space_dims(g, rs->sp, &rank, &dims);
    int64_t L = rs->length;
    memset(c->need, 0, c->n * sizeof *c->need);
    mark(c, rs->input);
    for (uint32_t o = 0; o < n_outs; o++) {
        if (pro[o])
            mark(c, outs[o].node);
    }
    uint64_t bytes = 0;
    bool ok = true;
    for (uint32_t i = 0; i < c->n && ok; i++) {
        const kf_expr *e = &g->expr[i];
        c->soff[i] = -1;
        if (!c->need[i] || c->ov[i][0] || !is_load(e) || e->space != rs->sp)
            continue;
        int64_t st[KF_MAX_RANK];
        node_strides(c, i, st);
        bool row_shaped = rank > 0 && dims[rank - 1] > 1 && st[rank - 1] != 0;
        for (int d = 0; d < rank - 1 && row_shaped; d++)
            row_shaped = dims[d] == 1 || st[d] != 0;
        if (!row_shaped)
            continue;
        int p = c->param[i];
        int64_t z = (int64_t)kf_dtype_size(c->k->params[p].dtype);
        ok = st[rank - 1] == 1 && (L * z) % 16 == 0;
        for (int d = 0; d < rank - 1 && ok; d++)
            ok = dims[d] == 1 || (st[d] * z) % 16 == 0;
        if (!ok)
            break;
        for (uint32_t j = 0; j < i && c->soff[i] < 0; j++) {
            int64_t sj[KF_MAX_RANK];
            if (c->soff[j] < 0 || c->param[j] != p)
                continue;
            node_strides(c, j, sj);
            if (memcmp(sj, st, sizeof(int64_t) * (size_t)rank) == 0)
                c->soff[i] = c->soff[j];
        }
        if (c->soff[i] < 0) {
            c->soff[i] = (int64_t)bytes;
            bytes += (uint64_t)(L * z);
        }
    }
    uint32_t per_block = 0, per_sm = 0;
    bool on = ok && bytes > 0 && stage_smem_limits(c->k->arch, &per_block, &per_sm);
    /* 8 warps x 2 stages where a block holds them, else 4 x 2: a row in
     * flight while one is computed. 65536 x 4096 bf16 layer_norm, 8 x 2 (one
     * block per SM) against 4 x 2 (three blocks, 12 warps per SM): H200
     * 0.287-0.291 ms against 0.297-0.300, H100 0.402 against 0.411; 4 x 3
     * was no better than 8 x 2 on either, 6 x 2 and 12 x 2 not on the H200
     * (not tried on the H100). */
    /* static shared memory: rowwise.cuh's reduction buffers (2 x 96 f32),
     * the gelu table when there is one */
    uint32_t fixed = 2 * 96 * 4 + (has_gelu_table(c) ? GELU_TAB_N * 2 : 0);
    cfg->warps = 8;
    cfg->stages = 0;
    if (on && 8 * 2 * bytes + fixed > per_block)
        cfg->warps = 4;
    if (on && cfg->warps * 2 * bytes + fixed <= per_block)
        cfg->stages = 2;
    if (cfg->stages == 0) {
        for (uint32_t i = 0; i < c->n; i++)
            c->soff[i] = -1;
        return false;
    }
    cfg->bytes = (uint32_t)bytes;
    cfg->shared = cfg->warps * cfg->stages * cfg->bytes;
    /* Blocks that fit an SM's shared memory (1 KiB per block is the
     * system's), at most the 2048 threads an SM runs. */
    uint32_t bps = per_sm / (cfg->shared + fixed + 1024);
    uint32_t tmax = 2048 / (cfg->warps * 32);
    cfg->blocks_per_sm = bps < 1 ? 1 : bps > tmax ? tmax : bps;
    return true;
}

/* kf_stage_row: every staged row (a distinct soff; stage_plan gave them
 * ascending in node order) copied from its first element. */
static void emit_stage_row(cg *c, const chunk_ctx *x, const row_spec *rs, int rank) {
    chunk_ctx *x0 = kf_mem_calloc(c->mem, 1, sizeof *x0);
    if (!x0) {
        cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
        return;
    }
    memcpy(x0, x, sizeof *x0);
    snprintf(x0->coord[rs->sp][rank - 1], sizeof x0->coord[rs->sp][rank - 1], "0");
    snprintf(x0->lin[rs->sp], sizeof x0->lin[rs->sp], "row * %" PRId64 "LL", rs->length);
    sb_puts(&c->s, "__device__ __forceinline__ void kf_stage_row(long long row, int lane, unsigned sb, "
                   "KF_PARAMS) {\n");
    int64_t next = 0;
    for (uint32_t i = 0; i < c->n; i++) {
        if (c->soff[i] != next)
            continue;
        int p = c->param[i];
        int64_t nb = rs->length * (int64_t)kf_dtype_size(c->k->params[p].dtype);
        char off[OV_MAX - 64];
        offset_str(c, x0, i, off, sizeof off);
        sb_printf(&c->s, "    kf_cp_row<%" PRId64 ">(sb + %" PRId64 "u, p%d + (%s), lane);\n", nb, next, p,
                  off);
        next += nb;
    }
    sb_puts(&c->s, "}\n\n");
    kf_mem_free(c->mem, x0, sizeof *x0);
}

/* The row kernel: outs in the row space (prologue when they need no
 * statistic, epilogue otherwise), and outs in the other space (once per row). */
static kf_status gen_rowwise(cg *c, const row_spec *rs, out_spec *outs, uint32_t n_outs,
                             const char *what) {
    const kf_group *g = c->g;
    kf_cuda_kernel *k = c->k;
    int rank, orank;
    const int64_t *dims, *odims;
    space_dims(g, rs->sp, &rank, &dims);
    kf_space osp = rs->sp == KF_SPACE_ROW ? KF_SPACE_OUT : KF_SPACE_ROW;
    space_dims(g, osp, &orank, &odims);
    int64_t L = rs->length;
    if (rank < 1 || dims[rank - 1] != L)
        return cg_fail(c, KF_ERR_UNSUPPORTED, "group %u (%s): the row axis is not the last one",
                       g->id, g->name);
    int64_t rows = numel_of(rank, dims) / (L ? L : 1);

    /* Which outs go where. */
    bool pro[MAX_OUTS], epi[MAX_OUTS], rowo[MAX_OUTS];
    for (uint32_t o = 0; o < n_outs; o++) {
        const kf_expr *e = &g->expr[outs[o].node];
        bool same = e->space == rs->sp;
        bool st = outs[o].synth_softmax || depends_on_stat(c, outs[o].node);
        pro[o] = same && !st;
        epi[o] = same && st;
        rowo[o] = !same;
        if (same && kf_ir_numel(tensor(c, outs[o].tensor)) != numel_of(rank, dims))
            return cg_fail(c, KF_ERR_UNSUPPORTED,
                           "group %u (%s): a row-space output smaller than the row space", g->id,
                           g->name);
    }
    /* Params: mark everything once (prologue view: x not overridden). */
    for (uint32_t o = 0; o < n_outs; o++)
        mark(c, outs[o].node);
    mark(c, rs->input);
    load_params(c);
    mark_stored(c, outs, n_outs);
    unsigned stats = stats_used(c, rs->stats);
    size_t minsz = 16;
    for (uint32_t o = 0; o < n_outs; o++) {
        if (!rowo[o] && kf_dtype_size(outs[o].dtype) < minsz)
            minsz = kf_dtype_size(outs[o].dtype);
    }
    minsz = min_vec_size(c, rs->sp, minsz);
    uint32_t vec = vec_for(minsz, L, false);
    bool dbl = rs->in_dtype == KF_DTYPE_F64 || rs->in_dtype == KF_DTYPE_I32;
    /* Template: a warp per row up to ROW_WARP_MAX, else a block
     * (row_block_for); registers up to 32 values per thread, else re-read per
     * pass. A warp per row stages its row-shaped loads when it can
     * (stage_plan). */
    uint32_t block;
    bool warp = row_warp_for(L, dbl), multipass = false;
    if (warp) {
        block = 256;
    } else {
        block = row_block_for(L, dbl);
        multipass = (L + block - 1) / block > (dbl ? 16 : 32);
    }
    if (multipass)
        vec = vec > 4 ? 4 : vec; /* no register arrays: keep the chunk small */
    /* Staged only with two dependent statistics steps (see row_warp_staged). */
    stage_cfg scfg = {0};
    bool two_step = (stats & (1u << KF_STAT_RSTD | 1u << KF_STAT_SUMEXP)) != 0;
    bool staged = warp && two_step && !dbl && vec > 1 && c->st == KF_OK &&
                  stage_plan(c, rs, outs, n_outs, pro, &scfg);
    if (staged)
        block = scfg.warps * 32;
    /* stage_plan marked the prologue only; the conditions below need all */
    for (uint32_t o = 0; o < n_outs; o++)
        mark(c, outs[o].node);
    mark(c, rs->input);
    k->tmpl = staged ? KF_CUDA_TEMPLATE_ROW_WARP_STAGED
              : warp ? KF_CUDA_TEMPLATE_ROW_WARP
              : multipass ? KF_CUDA_TEMPLATE_ROW_BLOCK_MULTIPASS : KF_CUDA_TEMPLATE_ROW_BLOCK;
    k->vec = vec;
    k->launch.block = block;
    k->launch.work_items = (uint64_t)rows;
    k->launch.items_per_block = warp ? block / 32 : 1;
    k->launch.blocks_per_sm = staged ? scfg.blocks_per_sm : 2048 / block;
    k->launch.shared_bytes = staged ? scfg.shared : 0;
    if (c->st != KF_OK)
        return c->st;
    uint32_t lanes = warp ? 32 : block;
    uint32_t chunks = (uint32_t)(L / vec);
    emit_head(c, what);
    sb_printf(&c->s,
              "#define KF_ROWS %" PRId64 "LL\n#define KF_L %" PRId64 "\n#define KF_ROW_WARP %d\n"
              "#define KF_MULTIPASS %d\n#define KF_PER_THREAD %u\n",
              rows, L, warp, multipass, (chunks + lanes - 1) / lanes);
    if (staged)
        sb_printf(&c->s,
                  "#define KF_STAGED 1\n#define KF_STAGES %u\n#define KF_STAGE_BYTES %u\n"
                  "/* dynamic shared memory: %u warps x %u stages x %u bytes = %u */\n",
                  scfg.stages, scfg.bytes, scfg.warps, scfg.stages, scfg.bytes, scfg.shared);
    else
        sb_puts(&c->s, "#define KF_STAGED 0\n");
    emit_stat_defines(c, stats, rs->eps, rs->in_dtype, L);
    bool has_epi = false;
    for (uint32_t o = 0; o < n_outs; o++)
        has_epi = has_epi || epi[o];
    sb_printf(&c->s, "#define KF_HAS_EPILOGUE %d\n\n", has_epi);
    sb_puts(&c->s, "struct kf_stats;\n");

    chunk_ctx *x = kf_mem_calloc(c->mem, 1, sizeof *x);
    if (!x)
        return cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    /* Row space: outer coordinates from `row`, the last from j0 = c * VV. */
    {
        int64_t inner = 1;
        for (int d = rank - 2; d >= 0; d--) {
            if (d == 0)
                snprintf(x->coord[rs->sp][d], sizeof x->coord[rs->sp][d], "row / %" PRId64 "LL", inner);
            else
                snprintf(x->coord[rs->sp][d], sizeof x->coord[rs->sp][d], "row / %" PRId64 "LL %% %" PRId64 "LL", inner, dims[d]);
            inner *= dims[d];
        }
        snprintf(x->coord[rs->sp][rank - 1], sizeof x->coord[rs->sp][rank - 1], "j0");
        snprintf(x->lin[rs->sp], sizeof x->lin[rs->sp], "row * %" PRId64 "LL + j0", L);
        x->vrank[rs->sp] = rank;
    }
    coords_linear(x, osp, orank, odims, "row");
    x->vrank[osp] = 0;

    /* kf_vec_ok: the vector loads of prologue and epilogue, the row-space stores. */
    sbuf cond = {.mem = c->mem};
    if (vec > 1) {
        vec_conditions(c, x, vec, &cond);
        for (uint32_t o = 0; o < n_outs; o++) {
            if (rowo[o])
                continue;
            size_t bytes = vec * kf_dtype_size(outs[o].dtype);
            sb_printf(&cond, " && kf_aligned(p%d, %zu)", outs[o].param, bytes > 16 ? (size_t)16 : bytes);
        }
    }
    /* The template's stats struct is defined after the hooks; declare the
     * hooks' bodies as templates on it. */
    emit_vec_ok(c, cond.p ? cond.p : "");
    if (cond.p)
        kf_mem_free(c->mem, cond.p, cond.cap);

    /* Prologue: x, and the outputs that need no statistic. */
    memset(c->need, 0, c->n * sizeof *c->need);
    for (uint32_t i = 0; i < c->n; i++)
        c->ov[i][0] = 0;
    mark(c, rs->input);
    for (uint32_t o = 0; o < n_outs; o++) {
        if (pro[o])
            mark(c, outs[o].node);
    }
    if (staged)
        sb_puts(&c->s, "template <int VV, bool STG> __device__ __forceinline__ void kf_prologue("
                       "long long row, int c, kf_acc_t *x, bool store, unsigned sb, KF_PARAMS) {\n"
                       "    const long long j0 = (long long)c * VV;\n");
    else
        sb_puts(&c->s,
                "template <int VV> __device__ __forceinline__ void kf_prologue(long long row, int c, "
                "kf_acc_t *x, bool store, KF_PARAMS) {\n    const long long j0 = (long long)c * VV;\n");
    c->staged = staged;
    emit_loads(c, x, vec, "    ", NULL, NULL);
    c->staged = false;
    for (uint32_t o = 0; o < n_outs; o++) {
        if (pro[o])
            sb_printf(&c->s, "    %s o%u[VV];\n", reg_type(outs[o].dtype), o);
    }
    sb_puts(&c->s, "#pragma unroll\n    for (int k = 0; k < VV; k++) {\n");
    emit_nodes(c, coord_of, x, "        ", false);
    sb_printf(&c->s, "        x[k] = (kf_acc_t)v%u;\n", rs->input);
    for (uint32_t o = 0; o < n_outs; o++) {
        if (pro[o])
            sb_printf(&c->s, "        o%u[k] = (%s)v%u%s;\n", o, reg_type(outs[o].dtype), outs[o].node,
                      raw_of(c, outs[o].node, false) ? "u" : "");
    }
    sb_puts(&c->s, "    }\n");
    for (uint32_t o = 0; o < n_outs; o++) {
        if (pro[o])
            sb_printf(&c->s, "    if (store)\n        kf_stv<VV>(p%d + row * %" PRId64 "LL + j0, o%u);\n",
                      outs[o].param, L, o);
    }
    sb_puts(&c->s, staged ? "    (void)store; (void)sb;\n}\n\n" : "    (void)store;\n}\n\n");
    if (staged)
        emit_stage_row(c, x, rs, rank);

    /* Epilogue: per element, x from the prologue. */
    memset(c->need, 0, c->n * sizeof *c->need);
    for (uint32_t i = 0; i < c->n; i++)
        c->ov[i][0] = 0;
    snprintf(c->ov[rs->input], OV_MAX, "x[k]");
    for (uint32_t o = 0; o < n_outs; o++) {
        if (epi[o] && !outs[o].synth_softmax)
            mark(c, outs[o].node);
    }
    sb_puts(&c->s,
            "template <int VV, typename S> __device__ __forceinline__ void kf_epilogue(long long row, "
            "int c, const kf_acc_t *x, const S &st, KF_PARAMS) {\n    const long long j0 = (long long)c * VV;\n");
    emit_loads(c, x, vec, "    ", NULL, NULL);
    for (uint32_t o = 0; o < n_outs; o++) {
        if (epi[o])
            sb_printf(&c->s, "    %s o%u[VV];\n", reg_type(outs[o].dtype), o);
    }
    sb_puts(&c->s, "#pragma unroll\n    for (int k = 0; k < VV; k++) {\n");
    emit_nodes(c, coord_of, x, "        ", false);
    for (uint32_t o = 0; o < n_outs; o++) {
        if (!epi[o])
            continue;
        if (outs[o].synth_softmax) {
            const char *rnd = round_fn(outs[o].dtype);
            sb_printf(&c->s, "        o%u[k] = (%s)%s%s(kf_exp(x[k] - st.max) / st.sumexp)%s;\n", o,
                      reg_type(outs[o].dtype), rnd ? rnd : "", rnd ? "((float)" : "",
                      rnd ? ")" : "");
        } else {
            sb_printf(&c->s, "        o%u[k] = (%s)v%u%s;\n", o, reg_type(outs[o].dtype), outs[o].node,
                      raw_of(c, outs[o].node, false) ? "u" : "");
        }
    }
    sb_puts(&c->s, "    }\n");
    for (uint32_t o = 0; o < n_outs; o++) {
        if (epi[o])
            sb_printf(&c->s, "    kf_stv<VV>(p%d + row * %" PRId64 "LL + j0, o%u);\n", outs[o].param,
                      L, o);
    }
    sb_puts(&c->s, "    (void)x; (void)st;\n}\n\n");

    /* Once per row: outputs in the other space (the reduced one). */
    memset(c->need, 0, c->n * sizeof *c->need);
    for (uint32_t i = 0; i < c->n; i++)
        c->ov[i][0] = 0;
    for (uint32_t o = 0; o < n_outs; o++) {
        if (rowo[o])
            mark(c, outs[o].node);
    }
    sb_puts(&c->s, "template <typename S> __device__ __forceinline__ void kf_row_out(long long row, "
                   "const S &st, KF_PARAMS) {\n");
    emit_loads(c, x, 1, "    ", NULL, NULL);
    sb_puts(&c->s, "    const int k = 0;\n    (void)k;\n");
    emit_nodes(c, coord_of, x, "    ", false);
    for (uint32_t o = 0; o < n_outs; o++) {
        if (rowo[o])
            sb_printf(&c->s, "    kf_st(p%d + row, (%s)v%u);\n", outs[o].param, reg_type(outs[o].dtype),
                      outs[o].node);
    }
    sb_puts(&c->s, "    (void)row; (void)st;\n}\n\n");
    kf_mem_free(c->mem, x, sizeof *x);
    sb_puts(&c->s, kf_cuda_tpl_rowwise);
    return c->st;
}

/* ------------------------------------------------------------------------ */
/* Column reductions                                                          */
/* ------------------------------------------------------------------------ */

static kf_status gen_colreduce(cg *c, out_spec *outs, uint32_t n_outs) {
    const kf_group *g = c->g;
    const kf_row_stage *r = &g->row;
    kf_cuda_kernel *k = c->k;
    kf_space sp = r->space;
    kf_space osp = sp == KF_SPACE_ROW ? KF_SPACE_OUT : KF_SPACE_ROW;
    int rank, orank;
    const int64_t *dims, *odims;
    space_dims(g, sp, &rank, &dims);
    space_dims(g, osp, &orank, &odims);
    int ax = r->axis;
    if (ax < 0 || ax >= rank)
        return cg_fail(c, KF_ERR_UNSUPPORTED, "group %u (%s): column axis %d out of range", g->id,
                       g->name, ax);
    int64_t A = dims[ax], I = 1, O = 1;
    for (int d = ax + 1; d < rank; d++)
        I *= dims[d];
    for (int d = 0; d < ax; d++)
        O *= dims[d];
    bool epi[MAX_OUTS], rowo[MAX_OUTS];
    bool has_epi = false;
    for (uint32_t o = 0; o < n_outs; o++) {
        const kf_expr *e = &g->expr[outs[o].node];
        bool same = e->space == sp;
        if (same && !depends_on_stat(c, outs[o].node))
            return cg_fail(c, KF_ERR_UNSUPPORTED,
                           "group %u (%s): a column prologue output (not generated)", g->id, g->name);
        epi[o] = same;
        rowo[o] = !same;
        has_epi = has_epi || same;
    }
    for (uint32_t o = 0; o < n_outs; o++)
        mark(c, outs[o].node);
    mark(c, r->input);
    load_params(c);
    unsigned stats = stats_used(c, r->stats);
    k->tmpl = KF_CUDA_TEMPLATE_COLREDUCE;
    k->vec = 1;
    k->launch.block = 256;
    k->launch.work_items = (uint64_t)(O * I);
    k->launch.items_per_block = 32;
    k->launch.blocks_per_sm = 8;
    if (c->st != KF_OK)
        return c->st;
    emit_head(c, "column reduction");
    sb_printf(&c->s, "#define KF_COLS %" PRId64 "LL\n#define KF_A %" PRId64 "LL\n#define KF_YSPLIT 8\n",
              O * I, A);
    emit_stat_defines(c, stats, r->eps, g->expr[r->input].dtype, A);
    sb_printf(&c->s, "#define KF_HAS_EPILOGUE %d\n\n", has_epi);

    chunk_ctx *x = kf_mem_calloc(c->mem, 1, sizeof *x);
    if (!x)
        return cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    {
        int64_t inner = 1;
        for (int d = rank - 1; d > ax; d--) {
            snprintf(x->coord[sp][d], sizeof x->coord[sp][d], "col %% %" PRId64 "LL / %" PRId64 "LL %% %" PRId64 "LL", I,
                     inner, dims[d]);
            inner *= dims[d];
        }
        snprintf(x->coord[sp][ax], sizeof x->coord[sp][ax], "a");
        inner = 1;
        for (int d = ax - 1; d >= 0; d--) {
            snprintf(x->coord[sp][d], sizeof x->coord[sp][d], "col / %" PRId64 "LL / %" PRId64 "LL %% %" PRId64 "LL", I,
                     inner, dims[d]);
            inner *= dims[d];
        }
        snprintf(x->lin[sp], sizeof x->lin[sp], "col / %" PRId64 "LL * %" PRId64 "LL + a * %" PRId64 "LL + col %% %" PRId64 "LL",
                 I, A * I, I, I);
        x->vrank[sp] = 0;
    }
    coords_linear(x, osp, orank, odims, "col");
    x->vrank[osp] = 0;
    emit_vec_ok(c, "");

    memset(c->need, 0, c->n * sizeof *c->need);
    mark(c, r->input);
    sb_puts(&c->s, "__device__ __forceinline__ kf_acc_t kf_prologue(long long col, long long a, bool "
                   "store, KF_PARAMS) {\n    const int k = 0;\n    (void)k; (void)store;\n");
    emit_loads(c, x, 1, "    ", NULL, NULL);
    emit_nodes(c, coord_of, x, "    ", false);
    sb_printf(&c->s, "    return (kf_acc_t)v%u;\n}\n\n", r->input);

    memset(c->need, 0, c->n * sizeof *c->need);
    for (uint32_t i = 0; i < c->n; i++)
        c->ov[i][0] = 0;
    snprintf(c->ov[r->input], OV_MAX, "x");
    for (uint32_t o = 0; o < n_outs; o++) {
        if (epi[o])
            mark(c, outs[o].node);
    }
    sb_puts(&c->s, "template <typename S> __device__ __forceinline__ void kf_epilogue(long long col, "
                   "long long a, kf_acc_t x, const S &st, KF_PARAMS) {\n    const int k = 0;\n    (void)k;\n");
    emit_loads(c, x, 1, "    ", NULL, NULL);
    emit_nodes(c, coord_of, x, "    ", false);
    for (uint32_t o = 0; o < n_outs; o++) {
        if (epi[o])
            sb_printf(&c->s, "    kf_st(p%d + (%s), (%s)v%u);\n", outs[o].param, x->lin[sp],
                      reg_type(outs[o].dtype), outs[o].node);
    }
    sb_puts(&c->s, "    (void)x; (void)st;\n}\n\n");

    memset(c->need, 0, c->n * sizeof *c->need);
    for (uint32_t i = 0; i < c->n; i++)
        c->ov[i][0] = 0;
    for (uint32_t o = 0; o < n_outs; o++) {
        if (rowo[o])
            mark(c, outs[o].node);
    }
    sb_puts(&c->s, "template <typename S> __device__ __forceinline__ void kf_row_out(long long col, "
                   "const S &st, KF_PARAMS) {\n    const int k = 0;\n    (void)k;\n");
    emit_loads(c, x, 1, "    ", NULL, NULL);
    emit_nodes(c, coord_of, x, "    ", false);
    for (uint32_t o = 0; o < n_outs; o++) {
        if (rowo[o])
            sb_printf(&c->s, "    kf_st(p%d + col, (%s)v%u);\n", outs[o].param, reg_type(outs[o].dtype),
                      outs[o].node);
    }
    sb_puts(&c->s, "    (void)st;\n}\n\n");
    kf_mem_free(c->mem, x, sizeof *x);
    sb_puts(&c->s, kf_cuda_tpl_colreduce);
    return c->st;
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                               */
/* ------------------------------------------------------------------------ */

/* The group's writes as outputs (skipping roots that are `skip_kind` leaves:
 * the bare GEMM result, which cuBLASLt writes itself). */
static uint32_t collect_outs(cg *c, out_spec *outs, kf_expr_kind skip_kind) {
    const kf_group *g = c->g;
    uint32_t n = 0;
    for (uint32_t w = 0; w < g->n_writes && n < MAX_OUTS; w++) {
        uint32_t root = g->roots ? g->roots[w] : KF_NONE;
        if (root == KF_NONE)
            continue;
        if (g->expr[root].kind == skip_kind)
            continue;
        uint32_t t = g->writes[w];
        outs[n].node = root;
        outs[n].tensor = t;
        outs[n].dtype = tensor(c, t)->dtype;
        outs[n].synth_softmax = false;
        n++;
    }
    return n;
}

static void out_params(cg *c, out_spec *outs, uint32_t n) {
    for (uint32_t o = 0; o < n; o++) {
        outs[o].param = param_add(c, KF_CUDA_PARAM_OUT, outs[o].tensor, outs[o].dtype,
                                  tensor_bytes(c, outs[o].tensor));
    }
}

static row_spec row_of_group(const cg *c) {
    const kf_row_stage *r = &c->g->row;
    row_spec rs = {.sp = r->space, .input = r->input, .stats = r->stats, .length = r->length,
                   .eps = r->eps, .in_dtype = c->g->expr[r->input].dtype};
    return rs;
}

kf_status kf_cuda_codegen_group(const kf_plan *plan, uint32_t group, const char *arch,
                                const kf_mem *mem, kf_cuda_kernel *out) {
    cg c;
    kf_status st = cg_begin(&c, plan, group, arch, mem, out);
    if (st != KF_OK)
        return cg_end(&c, st);
    const kf_group *g = c.g;
    out_spec outs[MAX_OUTS];
    uint32_t n = collect_outs(&c, outs, KF_EXPR_COUNT);
    switch (g->kind) {
    case KF_GROUP_ELEMENTWISE:
    case KF_GROUP_LAYOUT: {
        cg_set_name(&c, "");
        if (n == 0)
            return cg_end(&c, cg_fail(&c, KF_ERR_UNSUPPORTED, "group %u (%s): no outputs", g->id, g->name));
        /* Params: inputs first (in node order), then outputs. */
        kf_space sp = g->expr[outs[0].node].space;
        for (uint32_t o = 0; o < n; o++)
            mark(&c, outs[o].node);
        load_params(&c);
        memset(c.need, 0, c.n * sizeof *c.need);
        out_params(&c, outs, n);
        st = gen_elementwise(&c, outs, n, sp,
                             g->kind == KF_GROUP_LAYOUT ? "layout copy" : "elementwise group");
        break;
    }
    case KF_GROUP_ROWWISE: {
        cg_set_name(&c, "");
        row_spec rs = row_of_group(&c);
        for (uint32_t o = 0; o < n; o++)
            mark(&c, outs[o].node);
        mark(&c, rs.input);
        load_params(&c);
        memset(c.need, 0, c.n * sizeof *c.need);
        out_params(&c, outs, n);
        st = gen_rowwise(&c, &rs, outs, n, "row-wise group");
        break;
    }
    case KF_GROUP_COLREDUCE:
        cg_set_name(&c, "");
        for (uint32_t o = 0; o < n; o++)
            mark(&c, outs[o].node);
        mark(&c, g->row.input);
        load_params(&c);
        memset(c.need, 0, c.n * sizeof *c.need);
        out_params(&c, outs, n);
        st = gen_colreduce(&c, outs, n);
        break;
    default:
        st = cg_fail(&c, KF_ERR_INVALID_ARGUMENT,
                     "group %u (%s) is a %s group: kf_cuda_codegen_group generates elementwise, "
                     "rowwise, colreduce and layout groups (GEMM: kf_cuda_codegen_epilogue; "
                     "attention: kf_cuda_codegen_attention_softmax)",
                     g->id, g->name, kf_group_kind_name(g->kind));
        break;
    }
    return cg_end(&c, st);
}

kf_status kf_cuda_codegen_epilogue(const kf_plan *plan, uint32_t group, const char *arch,
                                   const kf_mem *mem, kf_cuda_kernel *out) {
    cg c;
    kf_status st = cg_begin(&c, plan, group, arch, mem, out);
    if (st != KF_OK)
        return cg_end(&c, st);
    const kf_group *g = c.g;
    if (g->kind != KF_GROUP_GEMM)
        return cg_end(&c, cg_fail(&c, KF_ERR_INVALID_ARGUMENT,
                                  "group %u (%s) is a %s group, not a GEMM", g->id, g->name,
                                  kf_group_kind_name(g->kind)));
    cg_set_name(&c, "epi_");
    out_spec outs[MAX_OUTS];
    uint32_t n = 0;
    out_spec all[MAX_OUTS];
    uint32_t na = collect_outs(&c, all, KF_EXPR_ACC);
    for (uint32_t o = 0; o < na; o++) {
        if (g->expr[all[o].node].space == KF_SPACE_OUT)
            outs[n++] = all[o];
    }
    if (n == 0)
        return cg_end(&c, cg_fail(&c, KF_ERR_NOT_FOUND,
                                  "group %u (%s): no epilogue (cuBLASLt writes the result)", g->id,
                                  g->name));
    for (uint32_t o = 0; o < n; o++)
        mark(&c, outs[o].node);
    bool rowep = g->gemm.row_epilogue && g->row.present && g->row.space == KF_SPACE_OUT;
    if (rowep)
        mark(&c, g->row.input);
    load_params(&c);
    memset(c.need, 0, c.n * sizeof *c.need);
    out_params(&c, outs, n);
    if (rowep) {
        row_spec rs = row_of_group(&c);
        st = gen_rowwise(&c, &rs, outs, n, "GEMM row epilogue");
    } else {
        st = gen_elementwise(&c, outs, n, KF_SPACE_OUT, "GEMM epilogue");
    }
    return cg_end(&c, st);
}

kf_status kf_cuda_codegen_gemm_prologue(const kf_plan *plan, uint32_t group, const char *arch,
                                        const kf_mem *mem, kf_cuda_kernel *out) {
    cg c;
    kf_status st = cg_begin(&c, plan, group, arch, mem, out);
    if (st != KF_OK)
        return cg_end(&c, st);
    const kf_group *g = c.g;
    if (g->kind != KF_GROUP_GEMM || !g->gemm.a_prologue || g->gemm.a_root == KF_NONE ||
        !g->row.present)
        return cg_end(&c, cg_fail(&c, KF_ERR_NOT_FOUND, "group %u (%s) has no norm prologue on A",
                                  g->id, g->name));
    cg_set_name(&c, "pro_");
    out_spec outs[MAX_OUTS];
    uint32_t n = 0;
    outs[n].node = g->gemm.a_root;
    outs[n].tensor = g->gemm.a[0];
    outs[n].dtype = g->expr[g->gemm.a_root].dtype;
    outs[n].synth_softmax = false;
    n++;
    out_spec all[MAX_OUTS];
    uint32_t na = collect_outs(&c, all, KF_EXPR_COUNT);
    for (uint32_t o = 0; o < na && n < MAX_OUTS; o++) {
        if (g->expr[all[o].node].space == KF_SPACE_ROW)
            outs[n++] = all[o];
    }
    for (uint32_t o = 0; o < n; o++)
        mark(&c, outs[o].node);
    mark(&c, g->row.input);
    load_params(&c);
    memset(c.need, 0, c.n * sizeof *c.need);
    outs[0].param = param_add(&c, KF_CUDA_PARAM_SCRATCH, outs[0].tensor, outs[0].dtype,
                              tensor_bytes(&c, outs[0].tensor));
    out_params(&c, outs + 1, n - 1);
    row_spec rs = row_of_group(&c);
    st = gen_rowwise(&c, &rs, outs, n, "GEMM norm prologue on A");
    return cg_end(&c, st);
}

kf_status kf_cuda_codegen_attention_softmax(const kf_plan *plan, uint32_t group, const char *arch,
                                            const kf_mem *mem, kf_cuda_kernel *out) {
    cg c;
    kf_status st = cg_begin(&c, plan, group, arch, mem, out);
    if (st != KF_OK)
        return cg_end(&c, st);
    const kf_group *g = c.g;
    if (g->kind != KF_GROUP_ATTENTION || g->attn.score == KF_NONE)
        return cg_end(&c, cg_fail(&c, KF_ERR_INVALID_ARGUMENT,
                                  "group %u (%s) is not an attention group", g->id, g->name));
    cg_set_name(&c, "softmax_");
    uint32_t sm = g->attn.softmax;
    out_spec outs[1] = {{.node = g->attn.score, .tensor = sm, .dtype = tensor(&c, sm)->dtype,
                         .synth_softmax = true}};
    mark(&c, g->attn.score);
    load_params(&c);
    memset(c.need, 0, c.n * sizeof *c.need);
    out_params(&c, outs, 1);
    row_spec rs = {.sp = KF_SPACE_OUT, .input = g->attn.score,
                   .stats = 1u << KF_STAT_MAX | 1u << KF_STAT_SUMEXP,
                   .length = g->rank ? g->dims[g->rank - 1] : 1, .eps = 0,
                   .in_dtype = g->expr[g->attn.score].dtype};
    st = gen_rowwise(&c, &rs, outs, 1, "attention fallback softmax (score expression + mask)");
    return cg_end(&c, st);
}

void kf_cuda_kernel_release(const kf_mem *mem, kf_cuda_kernel *k) {
    if (!k)
        return;
    if (k->source && mem)
        kf_mem_free(mem, k->source, k->source_cap);
    k->source = NULL;
    k->source_len = k->source_cap = 0;
}

uint32_t kf_cuda_kernel_grid(const kf_cuda_kernel *k, int sm_count) {
    const kf_cuda_launch_rule *r = &k->launch;
    uint64_t per = r->items_per_block ? r->items_per_block : 1;
    uint64_t need = (r->work_items + per - 1) / per;
    uint64_t cap = (uint64_t)(sm_count > 0 ? sm_count : 1) * (r->blocks_per_sm ? r->blocks_per_sm : 1);
    uint64_t gsz = need < cap ? need : cap;
    if (r->grid_multiple > 1 && gsz >= r->grid_multiple)
        gsz -= gsz % r->grid_multiple;
    if (gsz < 1)
        gsz = 1;
    if (gsz > 0x7fffffffu)
        gsz = 0x7fffffffu;
    return (uint32_t)gsz;
}

/* ------------------------------------------------------------------------ */
/* Dispatch and the report                                                    */
/* ------------------------------------------------------------------------ */

static kf_cuda_template row_template_for(int64_t L, kf_dtype in) {
    bool dbl = in == KF_DTYPE_F64 || in == KF_DTYPE_I32;
    if (row_warp_for(L, dbl))
        return KF_CUDA_TEMPLATE_ROW_WARP;
    int64_t block = row_block_for(L, dbl);
    return (L + block - 1) / block > (dbl ? 16 : 32) ? KF_CUDA_TEMPLATE_ROW_BLOCK_MULTIPASS
                                                     : KF_CUDA_TEMPLATE_ROW_BLOCK;
}

/* Whether a warp-per-row kernel is staged, and whether an elementwise one
 * takes the bulk path, depends on its loads, its size and the arch, which
 * only generating it settles: generate it and look (`guess` when there is no
 * arch or it is neither, or the generator fails). */
static kf_cuda_template generated_template(const kf_plan *plan, uint32_t group, kf_cuda_role role,
                                           const char *arch, kf_cuda_template guess) {
    if (!arch || (guess != KF_CUDA_TEMPLATE_ROW_WARP && guess != KF_CUDA_TEMPLATE_ELEMENTWISE))
        return guess;
    kf_mem mem;
    kf_mem_resolve(&mem, NULL);
    kf_cuda_kernel *k = kf_mem_calloc(&mem, 1, sizeof *k);
    if (!k)
        return guess;
    kf_cuda_template t = guess;
    if (kf_cuda_codegen(plan, group, role, arch, &mem, k) == KF_OK)
        t = k->tmpl;
    kf_cuda_kernel_release(&mem, k);
    kf_mem_free(&mem, k, sizeof *k);
    return t;
}

kf_status kf_cuda_group_template(const kf_plan *plan, uint32_t group, const char *arch,
                                 kf_cuda_template *tmpl, bool *has_kernel) {
    if (!plan || group >= plan->n_groups || !tmpl || !has_kernel)
        return KF_ERR_INVALID_ARGUMENT;
    const kf_group *g = &plan->groups[group];
    *has_kernel = true;
    *tmpl = KF_CUDA_TEMPLATE_ELEMENTWISE;
    switch (g->kind) {
    case KF_GROUP_ELEMENTWISE:
    case KF_GROUP_LAYOUT:
        *tmpl = generated_template(plan, group, KF_CUDA_ROLE_GROUP, arch, *tmpl);
        break;
    case KF_GROUP_ROWWISE:
        *tmpl = generated_template(plan, group, KF_CUDA_ROLE_GROUP, arch,
                                   row_template_for(g->row.length, g->expr[g->row.input].dtype));
        break;
    case KF_GROUP_COLREDUCE:
        *tmpl = KF_CUDA_TEMPLATE_COLREDUCE;
        break;
    case KF_GROUP_GEMM: {
        bool epi = false;
        for (uint32_t w = 0; w < g->n_writes; w++) {
            uint32_t r = g->roots ? g->roots[w] : KF_NONE;
            if (r != KF_NONE && g->expr[r].kind != KF_EXPR_ACC && g->expr[r].space == KF_SPACE_OUT)
                epi = true;
        }
        *has_kernel = epi;
        if (g->gemm.row_epilogue && g->row.present)
            *tmpl = generated_template(plan, group, KF_CUDA_ROLE_EPILOGUE, arch,
                                       row_template_for(g->row.length, g->expr[g->row.input].dtype));
        else if (epi)
            *tmpl = generated_template(plan, group, KF_CUDA_ROLE_EPILOGUE, arch, *tmpl);
        break;
    }
    case KF_GROUP_ATTENTION:
        *tmpl = generated_template(
            plan, group, KF_CUDA_ROLE_ATTENTION_SOFTMAX, arch,
            row_template_for(g->rank ? g->dims[g->rank - 1] : 1,
                             g->attn.score != KF_NONE ? g->expr[g->attn.score].dtype : g->dtype));
        break;
    default:
        *has_kernel = false;
        break;
    }
    return KF_OK;
}

void kf_cuda_describe_group(const kf_plan *plan, uint32_t group, const char *arch, char *buf,
                            size_t size) {
    if (!buf || size == 0)
        return;
    kf_cuda_template t;
    bool has;
    if (kf_cuda_group_template(plan, group, arch, &t, &has) != KF_OK) {
        snprintf(buf, size, "?");
        return;
    }
    const kf_group *g = &plan->groups[group];
    const char *a = arch ? arch : "?";
    switch (g->kind) {
    case KF_GROUP_VIEW:
        snprintf(buf, size, "%s: no kernel (a view)", a);
        break;
    case KF_GROUP_GEMM: {
        char pro[96] = "";
        if (g->gemm.a_prologue && g->row.present)
            snprintf(pro, sizeof pro, "%s prologue (norm of A) + ",
                     kf_cuda_template_name(generated_template(
                         plan, group, KF_CUDA_ROLE_GEMM_PROLOGUE, arch,
                         row_template_for(g->row.length, g->expr[g->row.input].dtype))));
        snprintf(buf, size, "%s: %scuBLASLt GEMM%s%s%s", a, pro, has ? " + " : "",
                 has ? kf_cuda_template_name(t) : "", has ? " epilogue" : "");
        break;
    }
    case KF_GROUP_ATTENTION:
        snprintf(buf, size, "%s: cuBLASLt Q.K^T + %s softmax (score expression, %s mask) + cuBLASLt P.V",
                 a, kf_cuda_template_name(t), kf_mask_kind_name(g->attn.mask));
        break;
    case KF_GROUP_ROWWISE:
        snprintf(buf, size, "%s: %s (row length %" PRId64 ")", a, kf_cuda_template_name(t),
                 g->row.length);
        break;
    default:
        snprintf(buf, size, "%s: %s", a, kf_cuda_template_name(t));
        break;
    }
}

/* ------------------------------------------------------------------------ */
/* Roles                                                                      */
/* ------------------------------------------------------------------------ */

const char *kf_cuda_role_name(kf_cuda_role role) {
    static const char *const names[KF_CUDA_ROLE_COUNT] = {"group", "gemm_prologue", "epilogue",
                                                          "attention_softmax"};
    return (unsigned)role < KF_CUDA_ROLE_COUNT ? names[role] : "?";
}

uint32_t kf_cuda_group_roles(const kf_plan *plan, uint32_t group, kf_cuda_role roles[2]) {
    if (!plan || group >= plan->n_groups)
        return 0;
    const kf_group *g = &plan->groups[group];
    uint32_t n = 0;
    switch (g->kind) {
    case KF_GROUP_ELEMENTWISE:
    case KF_GROUP_ROWWISE:
    case KF_GROUP_COLREDUCE:
    case KF_GROUP_LAYOUT:
        roles[n++] = KF_CUDA_ROLE_GROUP;
        break;
    case KF_GROUP_GEMM: {
        if (g->gemm.a_prologue && g->gemm.a_root != KF_NONE && g->row.present)
            roles[n++] = KF_CUDA_ROLE_GEMM_PROLOGUE;
        kf_cuda_template t;
        bool has = false;
        if (kf_cuda_group_template(plan, group, NULL, &t, &has) == KF_OK && has)
            roles[n++] = KF_CUDA_ROLE_EPILOGUE;
        break;
    }
    case KF_GROUP_ATTENTION:
        roles[n++] = KF_CUDA_ROLE_ATTENTION_SOFTMAX;
        break;
    default:
        break;
    }
    return n;
}

kf_status kf_cuda_codegen(const kf_plan *plan, uint32_t group, kf_cuda_role role, const char *arch,
                          const kf_mem *mem, kf_cuda_kernel *out) {
    switch (role) {
    case KF_CUDA_ROLE_GROUP: return kf_cuda_codegen_group(plan, group, arch, mem, out);
    case KF_CUDA_ROLE_GEMM_PROLOGUE: return kf_cuda_codegen_gemm_prologue(plan, group, arch, mem, out);
    case KF_CUDA_ROLE_EPILOGUE: return kf_cuda_codegen_epilogue(plan, group, arch, mem, out);
    case KF_CUDA_ROLE_ATTENTION_SOFTMAX:
        return kf_cuda_codegen_attention_softmax(plan, group, arch, mem, out);
    default:
        memset(out, 0, sizeof *out);
        snprintf(out->error, sizeof out->error, "kf_cuda_codegen: bad role %d", (int)role);
        return KF_ERR_INVALID_ARGUMENT;
    }
}
