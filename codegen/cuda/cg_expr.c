/*
 * cg_expr.c -- the scalar expressions of a kernel: one C statement per needed
 * node of the group's expression DAG, in the plan's node order (cg_emit_nodes),
 * with constants printed as their bit patterns, the CUDA form of each op
 * (templates/common.cuh), the bf16 gelu through a table of the reference's
 * results, and bf16 add/sub/mul two at a time (kf_bf16x2).
 */
#include <math.h>

#include "codegen/cuda/cg.h"

/* A float or double constant as its exact bits (inf and NaN included). */
void cg_emit_const(cg *c, kf_dtype d, double v) {
    if (d == KF_DTYPE_F64) {
        uint64_t u;
        memcpy(&u, &v, sizeof u);
        cg_printf(&c->s, "__longlong_as_double(0x%016" PRIx64 "LL) /* %.17g */", u, v);
    } else if (d == KF_DTYPE_I32) {
        cg_printf(&c->s, "(int)%.0f", v);
    } else if (d == KF_DTYPE_BOOL) {
        cg_puts(&c->s, v != 0.0 ? "true" : "false");
    } else {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        cg_printf(&c->s, "__uint_as_float(0x%08" PRIx32 "u) /* %.9g */", u, (double)f);
    }
}

const char *cg_stat_field(kf_stat s) {
    switch (s) {
    case KF_STAT_MAX:
        return "max";
    case KF_STAT_SUM:
        return "sum";
    case KF_STAT_MEAN:
        return "mean";
    case KF_STAT_RSTD:
        return "rstd";
    case KF_STAT_RMS_RSTD:
        return "rms_rstd";
    case KF_STAT_SUMEXP:
        return "sumexp";
    case KF_STAT_ARGMAX:
        return "argmax";
    default:
        return "sum";
    }
}

static const char *op_fn(kf_op op) {
    switch (op) {
    case KF_OP_NEG:
        return "kf_neg";
    case KF_OP_ABS:
        return "kf_abs";
    case KF_OP_EXP:
        return "kf_exp";
    case KF_OP_LOG:
        return "kf_log";
    case KF_OP_SQRT:
        return "kf_sqrt";
    case KF_OP_RSQRT:
        return "kf_rsqrt";
    case KF_OP_TANH:
        return "kf_tanh";
    case KF_OP_SIGMOID:
        return "kf_sigmoid";
    case KF_OP_RELU:
        return "kf_relu";
    case KF_OP_GELU:
        return "kf_gelu";
    case KF_OP_GELU_TANH:
        return "kf_gelu_tanh";
    case KF_OP_SILU:
        return "kf_silu";
    case KF_OP_ERF:
        return "kf_erf";
    case KF_OP_SIN:
        return "kf_sin";
    case KF_OP_COS:
        return "kf_cos";
    case KF_OP_ADD:
        return "kf_add";
    case KF_OP_SUB:
        return "kf_sub";
    case KF_OP_MUL:
        return "kf_mul";
    case KF_OP_DIV:
        return "kf_div";
    case KF_OP_MAX:
        return "kf_max";
    case KF_OP_MIN:
        return "kf_min";
    case KF_OP_POW:
        return "kf_pow";
    case KF_OP_EQ:
        return "==";
    case KF_OP_NE:
        return "!=";
    case KF_OP_LT:
        return "<";
    case KF_OP_LE:
        return "<=";
    case KF_OP_GT:
        return ">";
    case KF_OP_GE:
        return ">=";
    default:
        return NULL;
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
 * took it). The 2 x 2944 results in between are computed here with the reference evaluator's own
 * formula and rounding (ir/eval.c), so the kernel's gelu is the reference's bit for bit; the block
 * copies them to shared memory at entry (KF_SETUP).
 *
 * The table interleaves the signs: entry 2 * (|bits| - 0x3b00) + sign. With
 * the bits rotated left by one (magnitude, then sign), an index is a shift,
 * a three-input logic op and a subtraction, and one unsigned compare tells
 * in-range. In registers the bf16 values are the high halves of
 * floats, so the shifts fold into the bf16x2 results that produced them.
 *
 * gelu_tanh (x * sigmoid(2u)) has the same limits -- 0.5x(1 + 0.8x) below
 * 2^-19, x above 16, a product below bf16's smallest subnormal (-0) under
 * -16 -- so the same table serves it, filled with its results: a kernel
 * tabulates the first of the two it meets (one table per kernel; a kernel
 * holding both computes the other by its formula). The tanh-GELU GEMM
 * epilogue spent 1.755 ms where the erf one, through the table, took 1.506
 * (H100, 8192 x 4096 x 16384, 265a84d); through the table: 1.563 (b8a1d69). */

/* Node i is a gelu (or gelu_tanh) whose result is rounded to bf16 and whose
 * operand is a bf16 tensor, of the op the table holds (`strict`: and is
 * known, in this view, to hold a bf16-rounded value: an op result rounded
 * here, or a load of a bf16 buffer). */
static bool gelu_like(const kf_group *g, uint32_t i) {
    const kf_expr *e = &g->expr[i];
    if (e->kind != KF_EXPR_OP || (e->op != KF_OP_GELU && e->op != KF_OP_GELU_TANH) ||
        e->dtype != KF_DTYPE_BF16 || e->tensor == KF_NONE)
        return false;
    const kf_expr *a = &g->expr[e->src[0]];
    return a->dtype == KF_DTYPE_BF16 && a->tensor != KF_NONE;
}

/* The op the kernel's table holds: that of its first gelu-like node (the
 * nodes are those of the group, so every kernel of the group agrees). */
static kf_op gelu_tab_op(const cg *c) {
    for (uint32_t i = 0; i < c->n; i++)
        if (gelu_like(c->g, i) && !(c->tanh_formula && c->g->expr[i].op == KF_OP_GELU_TANH))
            return c->g->expr[i].op;
    return KF_OP_GELU;
}

static bool gelu_tab_node(const cg *c, uint32_t i, bool strict) {
    const kf_expr *e = &c->g->expr[i];
    if (!gelu_like(c->g, i) || e->op != gelu_tab_op(c) ||
        (c->tanh_formula && e->op == KF_OP_GELU_TANH))
        return false;
    uint32_t s = e->src[0];
    const kf_expr *a = &c->g->expr[s];
    if (!strict)
        return true;
    if (c->ov[i][0]) /* its value comes from elsewhere (a row epilogue's x) */
        return false;
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

bool cg_has_gelu_table(const cg *c) {
    bool any = false;
    for (uint32_t i = 0; i < c->n && !any; i++)
        any = gelu_tab_node(c, i, false);
    return any;
}

void cg_emit_gelu_table(cg *c) {
    if (!cg_has_gelu_table(c)) {
        cg_puts(&c->s, "#define KF_SETUP() ((void)0)\n");
        return;
    }
    kf_op op = gelu_tab_op(c);
    cg_printf(&c->s, "/* %s of bf16 values, as the reference rounds it */\n", kf_op_get(op)->name);
    cg_printf(&c->s, "__device__ const unsigned short kf_gelu_tab_src[%u] = {", GELU_TAB_N);
    for (uint32_t n = 0; n < GELU_TAB_N; n++) {
        uint32_t w = ((GELU_TAB_LO + n / 2) | (n % 2 ? 0x8000u : 0u)) << 16;
        float xf;
        memcpy(&xf, &w, sizeof xf);
        double x = xf;
        /* ir/eval.c's gelu or gelu_tanh, rounded as the reference stores it */
        unsigned short y = bf16_bits(kf_ir_scalar(op, KF_DTYPE_F64, x, 0.0, 0.0));
        cg_printf(&c->s, "%s0x%x,", n % 16 ? "" : "\n", y);
    }
    cg_printf(
        &c->s,
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
        "template <int VV> __device__ __forceinline__ void kf_gelu_bf16_v(float *d, const float "
        "*a) {\n"
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
bool cg_exact_bf16(const cg *c, uint32_t s) {
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
    if (op < 0 || !cg_exact_bf16(c, e->src[0]) || !cg_exact_bf16(c, e->src[1]))
        return -1;
    return op;
}

/* Node i is an f16/bf16 op result rounded here (cg_round_fn) and stored to a
 * buffer of its dtype: cg_emit_nodes also gives its value before the rounding,
 * vNu, and the store converts that (one cvt.rn per two values) instead of
 * rounding to vN and converting vN again. Rounding twice to the same format
 * is rounding once, so the stored bits are the same; vN is left to the
 * compiler to drop when nothing else reads it. On an H200, a bf16 rms_norm
 * over 65536 x 4096 took 0.278 ms instead of 0.300. Not for the gelu table's
 * or a packed op's results, which are exact bf16 already. */
bool cg_raw_of(const cg *c, uint32_t i, bool arr) {
    const kf_expr *e = &c->g->expr[i];
    return c->stored[i] && !c->ov[i][0] && e->kind == KF_EXPR_OP && e->tensor != KF_NONE &&
           cg_round_fn(e->dtype) && !gelu_tab_node(c, i, true) && !(arr && packed_op(c, i) >= 0);
}

/* c->pk_raw (the sm_90a GEMM's TMA-store epilogue): node i, a bf16 add/sub/mul
 * or other bf16 op rounded here, is an operand of a needed bf16x2 op. The
 * pair kf_bf16x2 packs from two rounded values was two F2FP (one a rounding)
 * and two bit ops to merge their halves; from the unrounded values it is one
 * cvt.rn.bf16x2.f32, the same bits (each half rounded to nearest even by the
 * same conversion kf_round_bf16 makes). GPT-2's out projection + bias +
 * residual: the bias sum h + b feeds the residual's bf16x2 add. */
bool cg_raw_feed(const cg *c, uint32_t i) {
    const kf_expr *e = &c->g->expr[i];
    if (!c->pk_raw || e->kind != KF_EXPR_OP || e->dtype != KF_DTYPE_BF16 || e->tensor == KF_NONE ||
        c->ov[i][0] || gelu_tab_node(c, i, true) || packed_op(c, i) >= 0)
        return false;
    for (uint32_t j = i + 1; j < c->n; j++)
        if (c->need[j] && packed_op(c, j) >= 0 &&
            (c->g->expr[j].src[0] == i || c->g->expr[j].src[1] == i))
            return true;
    return false;
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

/* The values an i32 node can take, [*lo, *hi], when its operands' are known:
 * indices of the node's space, constants, and +, -, x, negation, min, max
 * and division of such nodes; false otherwise (a load, a deep or wide
 * expression). A sum or difference of two indices (an ALiBi distance kv - q)
 * then never saturates, and is written as the plain operator: kf_sub's
 * 64-bit compare-and-select was 9 of the ~30 instructions an element of the
 * sm_90a kernel's ALiBi score took (the SASS of 2fbdbfe's B4 H32 S4096 ALiBi
 * kernel). */
static bool i32_range(const kf_group *g, uint32_t i, int depth, int64_t *lo, int64_t *hi) {
    const kf_expr *e = &g->expr[i];
    const int64_t lim = INT64_C(1) << 40;
    if (depth > 8 || e->dtype != KF_DTYPE_I32)
        return false;
    int rank = e->space == KF_SPACE_ROW ? g->row_rank : g->rank;
    const int64_t *dims = e->space == KF_SPACE_ROW ? g->row_dims : g->dims;
    int axis = -1;
    switch (e->kind) {
    case KF_EXPR_CONST:
        *lo = *hi = (int64_t)e->value;
        return true;
    case KF_EXPR_INDEX:
        axis = e->axis;
        break;
    case KF_EXPR_KV_IDX:
    case KF_EXPR_COL:
        axis = rank - 1;
        break;
    case KF_EXPR_Q_IDX:
    case KF_EXPR_ROW:
        axis = rank - 2;
        break;
    case KF_EXPR_HEAD:
        axis = rank - 3;
        break;
    case KF_EXPR_BATCH:
        axis = rank - 4;
        break;
    case KF_EXPR_OP:
        break;
    default:
        return false;
    }
    if (e->kind != KF_EXPR_OP) {
        if (axis < 0 || axis >= rank || dims[axis] < 1 || dims[axis] > lim)
            return false;
        *lo = 0;
        *hi = dims[axis] - 1;
        return true;
    }
    int64_t a0, a1, b0 = 0, b1 = 0;
    int arity = kf_form_arity(kf_op_get(e->op)->form);
    if (arity < 1 || arity > 2 || !i32_range(g, e->src[0], depth + 1, &a0, &a1) ||
        (arity == 2 && !i32_range(g, e->src[1], depth + 1, &b0, &b1)))
        return false;
    if (a0 < -lim || a1 > lim || b0 < -lim || b1 > lim)
        return false;
    switch (e->op) {
    case KF_OP_NEG:
        *lo = -a1, *hi = -a0;
        return true;
    case KF_OP_ADD:
        *lo = a0 + b0, *hi = a1 + b1;
        return true;
    case KF_OP_SUB:
        *lo = a0 - b1, *hi = a1 - b0;
        return true;
    case KF_OP_MUL: {
        int64_t p[4] = {a0 * b0, a0 * b1, a1 * b0, a1 * b1};
        if (a0 < -(INT64_C(1) << 20) || a1 > (INT64_C(1) << 20) || b0 < -(INT64_C(1) << 20) ||
            b1 > (INT64_C(1) << 20))
            return false;
        *lo = *hi = p[0];
        for (int k = 1; k < 4; k++) {
            *lo = p[k] < *lo ? p[k] : *lo;
            *hi = p[k] > *hi ? p[k] : *hi;
        }
        return true;
    }
    case KF_OP_MAX:
        *lo = a0 > b0 ? a0 : b0, *hi = a1 > b1 ? a1 : b1;
        return true;
    case KF_OP_MIN:
        *lo = a0 < b0 ? a0 : b0, *hi = a1 < b1 ? a1 : b1;
        return true;
    default:
        return false;
    }
}

/* Whether i32 node i (+, -, x, negation) provably stays inside i32, so its
 * saturating form is the plain operator. */
static bool i32_exact(const kf_group *g, uint32_t i) {
    int64_t lo, hi;
    return i32_range(g, i, 0, &lo, &hi) && lo >= INT32_MIN && hi <= INT32_MAX;
}

bool cg_i32_exact(const kf_group *g, uint32_t i) { return i32_exact(g, i); }

bool cg_i32_range(const kf_group *g, uint32_t i, int64_t *lo, int64_t *hi) {
    return i32_range(g, i, 0, lo, hi);
}

const char *cg_op_fn(kf_op op) { return op_fn(op); }

/* With c->score_f32: node i is a float x * k, k * x or (div_by_mul) x / k
 * for a constant k whose f32 value (and reciprocal) is normal; *x and *k
 * (1 / k for the division) set. */
static bool f32_const_scale(const cg *c, uint32_t i, uint32_t *x, double *k) {
    const kf_group *g = c->g;
    const kf_expr *e = &g->expr[i];
    if (!c->score_f32 || c->ov[i][0] || e->kind != KF_EXPR_OP || !kf_dtype_is_float(e->dtype) ||
        (e->op != KF_OP_MUL && !(e->op == KF_OP_DIV && c->div_by_mul)))
        return false;
    for (int j = e->op == KF_OP_MUL ? 0 : 1; j < 2; j++) {
        const kf_expr *ke = &g->expr[e->src[j]];
        const double v = ke->kind == KF_EXPR_CONST ? ke->value : 0.0;
        const double r = e->op == KF_OP_DIV ? 1.0 / v : v;
        if (ke->kind != KF_EXPR_CONST || c->ov[e->src[j]][0] || !isnormal((float)v) ||
            !isnormal((float)r) || e->src[0] == e->src[1])
            continue;
        *x = e->src[1 - j];
        *k = r;
        return true;
    }
    return false;
}

void cg_emit_nodes(cg *c, coord_fn coord, void *user, const char *ind, bool arr) {
    const kf_group *g = c->g;
    const char *ix = arr ? "[k]" : "";
    for (uint32_t i = 0; i < c->n && c->st == KF_OK; i++) {
        if (!c->need[i])
            continue;
        if (arr && c->kvary && cg_emit_remap_vector(c, user, i, ind))
            continue; /* a slice / concat / gather read as vectors where it can be */
        const kf_expr *e = &g->expr[i];
        const char *rt = cg_reg_type(e->dtype);
        const char *rnd = e->tensor != KF_NONE ? cg_round_fn(e->dtype) : NULL;
        if (arr && gelu_tab_node(c, i, true)) {
            cg_printf(&c->s, "%s%s v%u[VV];\n%skf_gelu_bf16_v<VV>(v%u, v%u);\n", ind, rt, i, ind, i,
                      e->src[0]);
            continue;
        }
        int pk = arr ? packed_op(c, i) : -1;
        if (pk >= 0) {
            bool ra = cg_raw_feed(c, e->src[0]), rb = cg_raw_feed(c, e->src[1]);
            if (ra || rb) /* an operand packed from its unrounded value (cg_raw_feed) */
                cg_printf(&c->s,
                          "%s%s v%u[VV];\n%skf_gm_bf16x2r<%d, VV, %s, %s>(v%u, v%u%s, v%u%s);\n",
                          ind, rt, i, ind, pk, ra ? "true" : "false", rb ? "true" : "false", i,
                          e->src[0], ra ? "u" : "", e->src[1], rb ? "u" : "");
            else
                cg_printf(&c->s, "%s%s v%u[VV];\n%skf_bf16x2<%d, VV>(v%u, v%u, v%u);\n", ind, rt, i,
                          ind, pk, i, e->src[0], e->src[1]);
            continue;
        }
        /* cg_raw_of: the op's value is vNu, and vN its rounding (after the
         * switch); cg_raw_feed: the same, for a bf16x2 op's operand */
        const bool raw = cg_raw_of(c, i, arr) || (arr && cg_raw_feed(c, i));
        const char *sfx = raw ? "u" : "";
        if (raw || (c->score_f32 && e->kind == KF_EXPR_OP))
            rnd = NULL; /* c->score_f32: every float op node in f32 */
        if (arr)
            cg_printf(&c->s,
                      "%s%s v%u%s[VV];\n#pragma unroll\n%sfor (int k = 0; k < VV; k++)\n%s    "
                      "v%u%s[k] = ",
                      ind, rt, i, sfx, ind, ind, i, sfx);
        else
            cg_printf(&c->s, "%sconst %s v%u%s = ", ind, rt, i, sfx);
        /* operand references */
        char a[3][24];
        for (int j = 0; j < 3; j++)
            snprintf(a[j], sizeof a[j], "v%u%s", e->kind == KF_EXPR_OP ? e->src[j] : 0u, ix);
        if (c->ov[i][0]) {
            cg_printf(&c->s, "(%s)(%s);\n", rt, c->ov[i]);
            continue;
        }
        int rank = e->space == KF_SPACE_ROW ? g->row_rank : g->rank;
        switch (e->kind) {
        case KF_EXPR_CONST:
            cg_emit_const(c, e->dtype, e->value);
            break;
        case KF_EXPR_INDEX:
        case KF_EXPR_ROW:
        case KF_EXPR_COL:
        case KF_EXPR_BATCH:
        case KF_EXPR_HEAD:
        case KF_EXPR_Q_IDX:
        case KF_EXPR_KV_IDX: {
            int axis = e->kind == KF_EXPR_INDEX   ? e->axis
                       : e->kind == KF_EXPR_ROW   ? rank - 2
                       : e->kind == KF_EXPR_COL   ? rank - 1
                       : e->kind == KF_EXPR_BATCH ? rank - 4
                       : e->kind == KF_EXPR_HEAD  ? rank - 3
                       : e->kind == KF_EXPR_Q_IDX ? rank - 2
                                                  : rank - 1;
            if (axis < 0)
                cg_printf(&c->s, "(%s)0", rt);
            else
                cg_printf(&c->s, "(%s)(%s)", rt, coord(user, e->space, axis));
            break;
        }
        case KF_EXPR_LOAD: {
            if (!cg_is_remapped_load(e)) {
                cg_fail(c, KF_ERR_INTERNAL, "group %u (%s): load node %u was not emitted", g->id,
                        g->name, i);
                break;
            }
            /* element by element: offset + coordinates x strides + coordinate
             * nodes x their strides (each node already within its axis) */
            cg_printf(&c->s, "kf_ld(p%d + (%" PRId64 "LL", c->param[i], e->offset);
            for (int d = 0; d < rank; d++)
                if (e->strides[d] != 0)
                    cg_printf(&c->s, " + (long long)(%s) * %" PRId64 "LL", coord(user, e->space, d),
                              e->strides[d]);
            for (int j = 0; j < 3 && e->src[j] != KF_NONE; j++)
                cg_printf(&c->s, " + (long long)v%u%s * %" PRId64 "LL", e->src[j], ix,
                          e->dyn_strides[j]);
            cg_puts(&c->s, "))");
            break;
        }
        case KF_EXPR_ACC: {
            if (e->src[0] == KF_NONE || !g->gemm.head_dim) {
                cg_fail(c, KF_ERR_INTERNAL, "group %u (%s): accumulator node %u was not emitted",
                        g->id, g->name, i);
                break;
            }
            /* a head-split group's in-head column (epilogue kernel after
             * cuBLASLt): the product at this row and head, column v(src) */
            int64_t s[KF_MAX_RANK];
            cg_head_acc_strides(g, s);
            cg_printf(&c->s, "%s(kf_ld(p%d + (0LL", rnd ? rnd : "", c->param[i]);
            for (int d = 0; d < rank - 1; d++)
                if (s[d] != 0)
                    cg_printf(&c->s, " + (long long)(%s) * %" PRId64 "LL", coord(user, e->space, d),
                              s[d]);
            cg_printf(&c->s, " + (long long)v%u%s)))", e->src[0], ix);
            break;
        }
        case KF_EXPR_STAT:
            if (rnd)
                cg_printf(&c->s, "%s((float)st.%s)", rnd, cg_stat_field(e->stat));
            else
                cg_printf(&c->s, "(%s)st.%s", rt, cg_stat_field(e->stat));
            break;
        case KF_EXPR_OP: {
            kf_op op = e->op;
            if (gelu_tab_node(c, i, true)) {
                cg_printf(&c->s, "kf_gelu_bf16(%s)", a[0]);
                break;
            }
            if (rnd)
                cg_printf(&c->s, "%s(", rnd);
            uint32_t fx = KF_NONE, fy = KF_NONE;
            double fk = 1.0, fk2 = 1.0;
            if (!arr && f32_const_scale(c, i, &fx, &fk) && f32_const_scale(c, fx, &fy, &fk2) &&
                isnormal((float)(fk * fk2))) {
                /* (y k2) k as y (k2 k) in f32 (c->score_f32): one multiply */
                cg_printf(&c->s, "kf_mul(v%u, ", fy);
                cg_emit_const(c, e->dtype, fk * fk2);
                cg_puts(&c->s, ")");
            } else if (op == KF_OP_CAST) {
                kf_dtype from = g->expr[e->src[0]].dtype;
                if (e->dtype == KF_DTYPE_BOOL)
                    cg_printf(&c->s, "(%s != 0)", a[0]);
                else if (from == KF_DTYPE_BOOL)
                    cg_printf(&c->s, "(%s)(%s ? 1 : 0)", rt, a[0]);
                else if (from == KF_DTYPE_I64 && e->dtype == KF_DTYPE_I32) /* saturating */
                    cg_printf(&c->s, "(int)max(min(%s, 2147483647LL), -2147483648LL)", a[0]);
                else
                    cg_printf(&c->s, "(%s)%s", rt, a[0]);
            } else if (op == KF_OP_WHERE) {
                cg_printf(&c->s, "(%s ? %s : %s)", a[0], a[1], a[2]);
            } else if (c->div_by_mul && op == KF_OP_DIV &&
                       (e->dtype == KF_DTYPE_F32 || cg_round_fn(e->dtype)) &&
                       g->expr[e->src[1]].kind == KF_EXPR_CONST && !c->ov[e->src[1]][0] &&
                       isnormal((float)(1.0 / g->expr[e->src[1]].value))) {
                /* x / c as x * (1 / c) (cg.h: div_by_mul) */
                cg_printf(&c->s, "kf_mul(%s, ", a[0]);
                cg_emit_const(c, e->dtype, 1.0 / g->expr[e->src[1]].value);
                cg_puts(&c->s, ")");
            } else if (e->dtype == KF_DTYPE_I32 &&
                       (op == KF_OP_ADD || op == KF_OP_SUB || op == KF_OP_MUL) &&
                       i32_exact(g, i)) {
                cg_printf(&c->s, "(%s %c %s)", a[0],
                          op == KF_OP_ADD ? '+' : op == KF_OP_SUB ? '-' : '*', a[1]);
            } else if (e->dtype == KF_DTYPE_I32 && op == KF_OP_NEG && i32_exact(g, i)) {
                cg_printf(&c->s, "(-%s)", a[0]);
            } else if (kf_op_has(op, KF_TRAIT_COMPARE)) {
                cg_printf(&c->s, "(%s %s %s)", a[0], op_fn(op), a[1]);
            } else if (kf_op_has(op, KF_TRAIT_BINARY) && op_fn(op)) {
                cg_printf(&c->s, "%s(%s, %s)", op_fn(op), a[0], a[1]);
            } else if (kf_op_has(op, KF_TRAIT_UNARY) && op_fn(op)) {
                cg_printf(&c->s, "%s(%s)", op_fn(op), a[0]);
            } else {
                cg_fail(c, KF_ERR_UNSUPPORTED, "group %u (%s): op %s has no CUDA form", g->id,
                        g->name, kf_op_get(op)->name);
            }
            if (rnd)
                cg_puts(&c->s, ")");
            break;
        }
        default:
            cg_fail(c, KF_ERR_UNSUPPORTED, "group %u (%s): a %s node in a %s kernel", g->id,
                    g->name, kf_expr_kind_name(e->kind), kf_cuda_template_name(c->k->tmpl));
            break;
        }
        cg_puts(&c->s, ";\n");
        if (e->kind == KF_EXPR_OP && e->clamp_report && c->param[i] >= 0 && !raw) {
            /* a gather index clamped into its axis: note it in the flag word
             * (min(max(x, 0), n - 1) differs from x only when x was outside) */
            uint32_t x = g->expr[e->src[0]].src[0];
            if (arr)
                cg_printf(&c->s,
                          "#pragma unroll\n%sfor (int k = 0; k < VV; k++)\n%s    if (v%u[k] != "
                          "v%u[k]) kf_note_clamp(p%d);\n",
                          ind, ind, i, x, c->param[i]);
            else
                cg_printf(&c->s, "%sif (v%u != v%u) kf_note_clamp(p%d);\n", ind, i, x, c->param[i]);
        }
        if (raw && arr)
            cg_printf(&c->s,
                      "%s%s v%u[VV];\n#pragma unroll\n%sfor (int k = 0; k < VV; k++)\n%s    v%u[k] "
                      "= %s(v%uu[k]);\n",
                      ind, rt, i, ind, ind, i, cg_round_fn(e->dtype), i);
        else if (raw)
            cg_printf(&c->s, "%sconst %s v%u = %s(v%uu);\n", ind, rt, i, cg_round_fn(e->dtype), i);
    }
}
