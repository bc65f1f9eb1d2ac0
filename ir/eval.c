/*
 * eval.c -- the reference evaluator: the oracle every backend is checked
 * against, so it is written for obviousness and accuracy, never for speed.
 *
 *   outputs --(walk back through operands)--> the set of needed tensors
 *   needed inputs   <- caller's host buffers (kf_ir_load: storage -> double)
 *   needed others   <- kf_ir_eval_node, in creation (= topological) order
 *
 * Every tensor's value is an array of numel doubles, row-major, allocated
 * through the graph's allocator. Each op computes in double from its
 * operands' values and rounds every result element to the tensor's dtype with
 * kf_ir_round as it stores it; nothing is rounded in between, so a fused
 * backend that keeps intermediates in registers differs from the reference
 * only by the roundings of the values it chose not to materialize.
 *
 * Definitions the backends must match (beyond the formulas in kfuse.h):
 *   - i32 arithmetic is computed in double and then rounded to i32, which
 *     truncates toward zero and SATURATES: add(INT32_MAX, 1) is INT32_MAX,
 *     neg(INT32_MIN) is INT32_MAX. (Backends that wrap must special-case it.)
 *   - max/min and reduce_max propagate NaN; comparisons with NaN are false,
 *     except ne, which is true. relu(NaN) is NaN.
 *   - sigmoid is evaluated in its stable form (never exp of a large positive
 *     argument); gelu uses erfc(-x/sqrt 2) (== 1 + erf(x/sqrt 2), without the
 *     cancellation for negative x); gelu_tanh uses the identity
 *     0.5x(1 + tanh u) == x * sigmoid(2u).
 *   - softmax subtracts the row max first. layer_norm and rms_norm are two-pass
 *     in double (mean, then the centred sum of squares). Rows whose magnitude
 *     exceeds 2^500 (reachable only in f64) are scaled by a power of two first,
 *     which is exact, so their squares cannot overflow.
 *   - matmul accumulates each output element over k in ascending order in
 *     double.
 */
#include <math.h>
#include <string.h>

#include "ir/ir.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                    */
/* ------------------------------------------------------------------------ */

static size_t value_bytes(const kf_tensor *t) {
    int64_t n = kf_ir_numel(t);
    if (n < 0 || (uint64_t)n > SIZE_MAX / sizeof(double))
        return 0; /* too large to allocate: reported as out of memory */
    return (size_t)n * sizeof(double);
}

/* Walks every index of a shape in row-major order, keeping the flat offset of
 * up to three operands whose strides (0 along broadcast dims) are given. */
typedef struct walker {
    int rank;
    const int64_t *dims;
    int64_t idx[KF_MAX_RANK];
    int n;
    int64_t off[3];
    int64_t strides[3][KF_MAX_RANK];
} walker;

static void walker_init(walker *w, int rank, const int64_t *dims, int n) {
    memset(w, 0, sizeof *w);
    w->rank = rank;
    w->dims = dims;
    w->n = n;
}

static void walker_next(walker *w) {
    for (int d = w->rank - 1; d >= 0; d--) {
        w->idx[d]++;
        for (int k = 0; k < w->n; k++)
            w->off[k] += w->strides[k][d];
        if (w->idx[d] < w->dims[d])
            return;
        for (int k = 0; k < w->n; k++)
            w->off[k] -= w->strides[k][d] * w->dims[d];
        w->idx[d] = 0;
    }
}

/* Splits a shape around `axis` into outer x n x inner, so that element j of
 * row (o, i) is at (o * n + j) * inner + i. */
static void split_axis(const kf_tensor *x, int axis, int64_t *outer, int64_t *n, int64_t *inner) {
    *outer = 1;
    *inner = 1;
    for (int i = 0; i < axis; i++)
        *outer *= x->dims[i];
    for (int i = axis + 1; i < x->rank; i++)
        *inner *= x->dims[i];
    *n = x->dims[axis];
}

/* ------------------------------------------------------------------------ */
/* Scalar formulas                                                            */
/* ------------------------------------------------------------------------ */

static double sigmoid(double x) {
    if (x >= 0.0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x); /* x < 0: e in (0, 1), no overflow */
    return e / (1.0 + e);
}

double kf_ir_scalar(kf_op op, kf_dtype dtype, double a, double b, double c) {
    switch (op) {
    case KF_OP_NEG:
        return -a;
    case KF_OP_ABS:
        return fabs(a);
    case KF_OP_EXP:
        return exp(a);
    case KF_OP_LOG:
        return log(a);
    case KF_OP_SQRT:
        return sqrt(a);
    case KF_OP_RSQRT:
        return 1.0 / sqrt(a);
    case KF_OP_TANH:
        return tanh(a);
    case KF_OP_SIGMOID:
        return sigmoid(a);
    case KF_OP_RELU:
        return isnan(a) ? a : (a > 0.0 ? a : 0.0);
    case KF_OP_GELU:
        return 0.5 * a * erfc(-a * 0.70710678118654752440);
    case KF_OP_GELU_TANH: {
        double u = 0.79788456080286535588 * (a + 0.044715 * a * a * a);
        return a * sigmoid(2.0 * u);
    }
    case KF_OP_SILU:
        return a * sigmoid(a);
    case KF_OP_ERF:
        return erf(a);
    case KF_OP_SIN:
        return sin(a);
    case KF_OP_COS:
        return cos(a);
    case KF_OP_CAST:
        return kf_ir_round(dtype, a);
    case KF_OP_EXPAND: /* the operand, broadcast by the caller's strides */
        return a;
    case KF_OP_ADD:
        return a + b;
    case KF_OP_SUB:
        return a - b;
    case KF_OP_MUL:
        return a * b;
    case KF_OP_DIV:
        /* i32: only the planner's index division (a repeat's coordinate,
         * fusion/lower.c), truncating as C does; the graph's div is float */
        if (dtype == KF_DTYPE_I32)
            return b == 0.0 ? 0.0 : trunc(a / b);
        return a / b;
    case KF_OP_MAX:
        return isnan(a) || isnan(b) ? a + b : (a > b ? a : b);
    case KF_OP_MIN:
        return isnan(a) || isnan(b) ? a + b : (a < b ? a : b);
    case KF_OP_POW:
        return pow(a, b);
    case KF_OP_EQ:
        return a == b;
    case KF_OP_NE:
        return a != b;
    case KF_OP_LT:
        return a < b;
    case KF_OP_LE:
        return a <= b;
    case KF_OP_GT:
        return a > b;
    case KF_OP_GE:
        return a >= b;
    case KF_OP_WHERE:
        return a != 0.0 ? b : c;
    default:
        KF_ASSERT(!"kf_ir_scalar: not an elementwise op with operands");
        return NAN;
    }
}

/* ------------------------------------------------------------------------ */
/* Per-form kernels. Each writes numel(t) rounded values into `out`.          */
/* ------------------------------------------------------------------------ */

/* What the evaluator stores for a result v of tensor t: v rounded to t's
 * dtype, except in an exact evaluation, which keeps every float value
 * unrounded (i32 and bool keep their rounding: truncation and saturation are
 * their meaning), and for a float tensor st->unrounded marks (kf_ir_eval_fused's
 * products, a test's realization). */
static double store_round(const kf_eval_state *st, const kf_tensor *t, double v) {
    if (kf_dtype_is_float(t->dtype) && (st->exact || (st->unrounded && st->unrounded[t->id])))
        return v;
    return kf_ir_round(t->dtype, v);
}

static void eval_elementwise(const kf_eval_state *st, const kf_tensor *t, double *out) {
    walker w;
    walker_init(&w, t->rank, t->dims, t->nsrc);
    const double *in[3] = {NULL, NULL, NULL};
    for (int k = 0; k < t->nsrc; k++) {
        kf_ir_broadcast_strides(t->src[k], t->rank, w.strides[k]);
        in[k] = st->values[t->src[k]->id];
    }
    int64_t n = kf_ir_numel(t);
    for (int64_t i = 0; i < n; i++, walker_next(&w)) {
        double a = in[0][w.off[0]];
        double b = t->nsrc > 1 ? in[1][w.off[1]] : 0.0, c = t->nsrc > 2 ? in[2][w.off[2]] : 0.0;
        /* An exact cast to a float dtype changes nothing: kf_ir_scalar's
         * rounding is the cast's meaning only at the graph's dtypes. */
        double v = st->exact && t->op == KF_OP_CAST && kf_dtype_is_float(t->dtype)
                       ? a
                       : kf_ir_scalar(t->op, t->dtype, a, b, c);
        out[i] = store_round(st, t, v);
    }
}

/* clamp as ir.h defines it: bounds rounded to the dtype, then max, then min. */
static void eval_clamp(const kf_eval_state *st, const kf_tensor *t, double *out) {
    const double *in = st->values[t->src[0]->id];
    kf_dtype d = t->dtype;
    double lo = kf_ir_round(d, t->attr.lo), hi = kf_ir_round(d, t->attr.hi);
    bool has_lo = kf_ir_clamp_has_lo(t->attr.lo), has_hi = kf_ir_clamp_has_hi(t->attr.hi);
    int64_t n = kf_ir_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double v = in[i];
        if (has_lo)
            v = kf_ir_scalar(KF_OP_MAX, d, v, lo, 0.0);
        if (has_hi)
            v = kf_ir_scalar(KF_OP_MIN, d, v, hi, 0.0);
        out[i] = store_round(st, t, v);
    }
}

static void eval_iota(const kf_tensor *t, double *out) {
    int64_t outer, n, inner;
    split_axis(t, t->attr.axis, &outer, &n, &inner);
    int64_t total = outer * n * inner;
    for (int64_t i = 0; i < total; i++)
        out[i] = kf_ir_round(t->dtype, (double)((i / inner) % n));
}

static void eval_reduce(const kf_eval_state *st, const kf_tensor *t, double *out) {
    const kf_tensor *x = t->src[0];
    const double *in = st->values[x->id];
    int64_t outer, n, inner;
    split_axis(x, t->attr.axis, &outer, &n, &inner);
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            const double *row = in + o * n * inner + i;
            double acc;
            if (t->op == KF_OP_ARGMAX) { /* the first NaN, else the first maximum */
                double best = row[0];
                acc = 0.0;
                for (int64_t j = 1; j < n && !isnan(best); j++) {
                    double v = row[j * inner];
                    if (isnan(v) || v > best) {
                        best = v;
                        acc = (double)j;
                    }
                }
            } else if (t->op == KF_OP_LOGSUMEXP) { /* m + log(sum exp(x - m)); m if +-inf */
                double m = -INFINITY;
                for (int64_t j = 0; j < n && !isnan(m); j++) {
                    double v = row[j * inner];
                    if (isnan(v) || v > m)
                        m = v;
                }
                acc = m;
                if (!isnan(m) && !isinf(m)) {
                    double sum = 0.0;
                    for (int64_t j = 0; j < n; j++)
                        sum += exp(row[j * inner] - m);
                    acc = m + log(sum);
                }
            } else if (t->op == KF_OP_REDUCE_MAX || t->op == KF_OP_REDUCE_MIN) {
                bool mx = t->op == KF_OP_REDUCE_MAX; /* the first of equal values wins */
                acc = mx ? -INFINITY : INFINITY;
                for (int64_t j = 0; j < n; j++) {
                    double v = row[j * inner];
                    if (isnan(v)) {
                        acc = v;
                        break;
                    }
                    if (mx ? v > acc : v < acc)
                        acc = v;
                }
            } else {
                acc = 0.0;
                for (int64_t j = 0; j < n; j++)
                    acc += row[j * inner];
                if (t->op == KF_OP_REDUCE_MEAN)
                    acc /= (double)n;
            }
            out[o * inner + i] = store_round(st, t, acc);
        }
    }
}

static void eval_softmax(const kf_eval_state *st, const kf_tensor *t, double *out) {
    const double *in = st->values[t->src[0]->id];
    int64_t outer, n, inner;
    split_axis(t, t->attr.axis, &outer, &n, &inner);
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * n * inner + i;
            double m = -INFINITY; /* a NaN anywhere makes the row NaN */
            for (int64_t j = 0; j < n && !isnan(m); j++) {
                double v = in[base + j * inner];
                if (isnan(v) || v > m)
                    m = v;
            }
            double sum = 0.0;
            for (int64_t j = 0; j < n; j++) {
                double e = exp(in[base + j * inner] - m);
                out[base + j * inner] = e; /* unrounded until divided */
                sum += e;
            }
            if (kf_op_has(t->op, KF_TRAIT_LOGSPACE)) { /* (x - max) - log(sum) */
                double ls = log(sum);
                for (int64_t j = 0; j < n; j++)
                    out[base + j * inner] = store_round(st, t, (in[base + j * inner] - m) - ls);
                continue;
            }
            for (int64_t j = 0; j < n; j++)
                out[base + j * inner] = store_round(st, t, out[base + j * inner] / sum);
        }
    }
}

/* Scaling by a power of two is exact, so the scaled row's norm is the row's. */
int kf_ir_row_scale_exp(const double *row, int64_t n, int64_t inner) {
    double amax = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double a = fabs(row[j * inner]);
        if (a > amax)
            amax = a;
    }
    if (!(amax > 0x1p500) || !isfinite(amax))
        return 0;
    int e;
    (void)frexp(amax, &e);
    return e;
}

kf_ir_norm_row kf_ir_norm_stats(const double *row, int64_t n, int64_t inner, double eps,
                                bool centred) {
    kf_ir_norm_row r = {kf_ir_row_scale_exp(row, n, inner), 0.0, 0.0}; /* e: 0 below f64 */
    if (centred) {
        for (int64_t j = 0; j < n; j++)
            r.mean += ldexp(row[j * inner], -r.e);
        r.mean /= (double)n;
    }
    double ss = 0.0; /* centred (layer_norm) or plain (rms_norm) squares */
    for (int64_t j = 0; j < n; j++) {
        double d = ldexp(row[j * inner], -r.e) - r.mean;
        ss += d * d;
    }
    /* sqrt(var + eps) in the scaled units: sqrt((var + eps) / 4^e). */
    r.denom = sqrt(ss / (double)n + ldexp(eps, -2 * r.e));
    return r;
}

static void eval_norm(const kf_eval_state *st, const kf_tensor *t, double *out) {
    const double *in = st->values[t->src[0]->id];
    const double *w = st->values[t->src[1]->id];
    const double *b = t->op == KF_OP_LAYER_NORM ? st->values[t->src[2]->id] : NULL;
    int64_t outer, n, inner;
    split_axis(t, t->attr.axis, &outer, &n, &inner);
    double eps = t->attr.eps;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            const double *row = in + o * n * inner + i;
            kf_ir_norm_row r = kf_ir_norm_stats(row, n, inner, eps, b != NULL);
            for (int64_t j = 0; j < n; j++) {
                double d = ldexp(row[j * inner], -r.e) - r.mean;
                /* A scaled row gives denom == 0 only when it is constant
                 * and eps underflowed: its normalized value is then 0. */
                double y = (r.e != 0 && r.denom == 0.0) ? 0.0 : d / r.denom;
                y *= w[j];
                if (b)
                    y += b[j];
                out[o * n * inner + i + j * inner] = store_round(st, t, y);
            }
        }
    }
}

/* Element strides of x's batch dims, right-aligned into the output's `br`
 * batch dims (0 along broadcast dims), in units of elements. */
static void batch_strides(const kf_tensor *x, int br, int64_t *bs) {
    int xr = x->rank - 2;
    int64_t s = x->dims[xr] * x->dims[xr + 1];
    for (int i = br - 1; i >= 0; i--) {
        int j = i - (br - xr);
        if (j < 0) {
            bs[i] = 0;
            continue;
        }
        bs[i] = x->dims[j] == 1 ? 0 : s;
        s *= x->dims[j];
    }
}

static void eval_matmul(const kf_eval_state *st, const kf_tensor *t, double *out) {
    const kf_tensor *a = t->src[0], *b = t->src[1];
    const double *av = st->values[a->id], *bv = st->values[b->id];
    int br = t->rank - 2;
    int64_t M = t->dims[br], N = t->dims[br + 1];
    int64_t ar = a->dims[a->rank - 2], ac = a->dims[a->rank - 1];
    int64_t bc = b->dims[b->rank - 1];
    int64_t K = t->attr.transpose_a ? ar : ac;
    /* a[m, k] and b[k, n] in a matrix, for each transpose. */
    int64_t a_m = t->attr.transpose_a ? 1 : ac, a_k = t->attr.transpose_a ? ac : 1;
    int64_t b_k = t->attr.transpose_b ? 1 : bc, b_n = t->attr.transpose_b ? bc : 1;

    walker w;
    walker_init(&w, br, t->dims, 2);
    batch_strides(a, br, w.strides[0]);
    batch_strides(b, br, w.strides[1]);
    int64_t nb = 1;
    for (int i = 0; i < br; i++)
        nb *= t->dims[i];
    double *o = out;
    for (int64_t bi = 0; bi < nb; bi++, walker_next(&w)) {
        const double *am = av + w.off[0], *bm = bv + w.off[1];
        for (int64_t m = 0; m < M; m++) {
            for (int64_t n = 0; n < N; n++) {
                double acc = 0.0;
                for (int64_t k = 0; k < K; k++)
                    acc += am[m * a_m + k * a_k] * bm[k * b_k + n * b_n];
                *o++ = store_round(st, t, acc);
            }
        }
    }
}

static void eval_permute(const kf_eval_state *st, const kf_tensor *t, double *out) {
    const kf_tensor *x = t->src[0];
    const double *in = st->values[x->id];
    int64_t xs[KF_MAX_RANK];
    kf_ir_strides(x, xs);
    walker w;
    walker_init(&w, t->rank, t->dims, 1);
    for (int i = 0; i < t->rank; i++)
        w.strides[0][i] = xs[t->attr.perm[i]];
    int64_t n = kf_ir_numel(t);
    for (int64_t i = 0; i < n; i++, walker_next(&w))
        out[i] = in[w.off[0]];
}

/* slice: the result's element at i reads x at i, except start + step * i
 * along the axis. Values are copied: already rounded to the dtype. */
static void eval_slice(const kf_eval_state *st, const kf_tensor *t, double *out) {
    const kf_tensor *x = t->src[0];
    const double *in = st->values[x->id];
    int64_t xs[KF_MAX_RANK];
    kf_ir_strides(x, xs);
    walker w;
    walker_init(&w, t->rank, t->dims, 1);
    memcpy(w.strides[0], xs, sizeof xs);
    w.strides[0][t->attr.axis] = xs[t->attr.axis] * t->attr.step;
    int64_t base = t->attr.start * xs[t->attr.axis], n = kf_ir_numel(t);
    for (int64_t i = 0; i < n; i++, walker_next(&w))
        out[i] = in[base + w.off[0]];
}

/* repeat: the result's element i along the axis reads x at i / times. */
static void eval_repeat(const kf_eval_state *st, const kf_tensor *t, double *out) {
    int64_t outer, n, inner;
    split_axis(t, t->attr.axis, &outer, &n, &inner);
    const double *in = st->values[t->src[0]->id];
    int64_t nx = n / t->attr.times;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < n; i++)
            memcpy(out + (o * n + i) * inner, in + (o * nx + i / t->attr.times) * inner,
                   sizeof(double) * (size_t)inner);
}

/* concat: along the axis, a's rows then b's. */
static void eval_concat(const kf_eval_state *st, const kf_tensor *t, double *out) {
    int64_t outer, n, inner;
    split_axis(t, t->attr.axis, &outer, &n, &inner);
    int64_t na = t->src[0]->dims[t->attr.axis];
    const double *a = st->values[t->src[0]->id], *b = st->values[t->src[1]->id];
    for (int64_t o = 0; o < outer; o++) {
        memcpy(out + o * n * inner, a + o * na * inner, sizeof(double) * (size_t)(na * inner));
        memcpy(out + (o * n + na) * inner, b + o * (n - na) * inner,
               sizeof(double) * (size_t)((n - na) * inner));
    }
}

/* gather: out[pre, j, post] = table[pre, idx[j], post]. An index outside
 * [0, dim) is an error naming it (the CPU target's contract; the CUDA target
 * clamps instead, which the reference never does). */
static kf_status eval_gather(const kf_eval_state *st, const kf_tensor *t, double *out) {
    const kf_tensor *tb = t->src[0], *ix = t->src[1];
    int ax = t->attr.axis;
    int64_t outer, len, inner;
    split_axis(tb, ax, &outer, &len, &inner);
    int64_t ni = kf_ir_numel(ix);
    const double *tv = st->values[tb->id], *iv = st->values[ix->id];
    for (int64_t j = 0; j < ni; j++) {
        if (!(iv[j] >= 0 && iv[j] < (double)len)) {
            char ts[160];
            return kf_ir_note(st->graph, KF_ERR_INVALID_ARGUMENT,
                              "gather: index %.0f at element %lld of idx is out of range for "
                              "axis %d of table %s (0 to %lld)",
                              iv[j], (long long)j, ax, kf_ir_type_str(tb, ts, sizeof ts),
                              (long long)len - 1);
        }
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < ni; j++) {
            const double *row = tv + (o * len + (int64_t)iv[j]) * inner;
            memcpy(out + (o * ni + j) * inner, row, sizeof(double) * (size_t)inner);
        }
    return KF_OK;
}

/* ------------------------------------------------------------------------ */
/* Public entry points                                                        */
/* ------------------------------------------------------------------------ */

/* Computes t from its operands' values in st (each must be present:
 * KF_ERR_INVALID_ARGUMENT, noted, otherwise). A tensor that already has a
 * value is recomputed in place; an input is never computed (it is OK when it
 * already has a value, an error otherwise). A new value is numel(t) doubles
 * from the graph's allocator, which kf_ir_eval_release frees with that size:
 * a caller that fills st->values itself must allocate the same way. */
kf_status kf_ir_eval_node(kf_eval_state *st, const kf_tensor *t) {
    if (KF_NEVER(!st || !st->graph || !st->values || !t || t->graph != st->graph))
        return KF_ERR_INVALID_ARGUMENT;
    kf_graph *g = st->graph;
    const kf_op_info *info = kf_op_get(t->op);
    char ts[160];
    for (int k = 0; k < t->nsrc; k++) {
        if (!st->values[t->src[k]->id])
            return kf_ir_note(g, KF_ERR_INVALID_ARGUMENT,
                              "eval: operand %d (%%%u) of %s %%%u is not computed; evaluate "
                              "operands first",
                              k, t->src[k]->id, info->name, t->id);
    }
    if (t->op == KF_OP_INPUT) {
        /* Input values come from the caller's buffers (kf_ir_eval). */
        if (st->values[t->id])
            return KF_OK;
        return kf_ir_note(g, KF_ERR_INVALID_ARGUMENT,
                          "eval: input '%s' has no value; bind it through kf_ir_eval",
                          t->name ? t->name : "?");
    }

    double *out = st->values[t->id];
    bool fresh = out == NULL;
    if (fresh) {
        size_t bytes = value_bytes(t);
        out = bytes ? kf_mem_alloc(&g->mem, bytes) : NULL;
        if (!out)
            return kf_ir_note(g, KF_ERR_OUT_OF_MEMORY,
                              "eval: out of memory for the value of %s %%%u %s (%lld elements "
                              "in double)",
                              info->name, t->id, kf_ir_type_str(t, ts, sizeof ts),
                              (long long)kf_ir_numel(t));
    }

    switch (info->form) {
    case KF_FORM_CONST: {
        int64_t n = kf_ir_numel(t);
        for (int64_t i = 0; i < n; i++)
            out[i] = t->data ? kf_ir_load(t->data, t->dtype, i) : 0.0;
        break;
    }
    case KF_FORM_IOTA:
        eval_iota(t, out);
        break;
    case KF_FORM_UNARY:
    case KF_FORM_CAST:
    case KF_FORM_BINARY:
    case KF_FORM_WHERE:
        eval_elementwise(st, t, out);
        break;
    case KF_FORM_CLAMP:
        eval_clamp(st, t, out);
        break;
    case KF_FORM_EXPAND:
        eval_elementwise(st, t, out);
        break;
    case KF_FORM_REDUCE:
        eval_reduce(st, t, out);
        break;
    case KF_FORM_SOFTMAX:
        eval_softmax(st, t, out);
        break;
    case KF_FORM_LAYER_NORM:
    case KF_FORM_RMS_NORM:
        eval_norm(st, t, out);
        break;
    case KF_FORM_MATMUL:
        eval_matmul(st, t, out);
        break;
    case KF_FORM_RESHAPE:
        /* Same dtype, same row-major data: the values are already rounded. */
        memcpy(out, st->values[t->src[0]->id], value_bytes(t));
        break;
    case KF_FORM_PERMUTE:
        eval_permute(st, t, out);
        break;
    case KF_FORM_SLICE:
        eval_slice(st, t, out);
        break;
    case KF_FORM_REPEAT:
        eval_repeat(st, t, out);
        break;
    case KF_FORM_CONCAT:
        eval_concat(st, t, out);
        break;
    case KF_FORM_GATHER: {
        kf_status gs = eval_gather(st, t, out);
        if (gs != KF_OK) {
            if (fresh)
                kf_mem_free(&g->mem, out, value_bytes(t));
            return gs;
        }
        break;
    }
    default:
        if (fresh)
            kf_mem_free(&g->mem, out, value_bytes(t));
        return kf_ir_note(g, KF_ERR_INTERNAL, "eval: no evaluator for op %s", info->name);
    }
    st->values[t->id] = out;
    return KF_OK;
}

/* Frees every value and the table (sized by graph->n_nodes, so the graph
 * must not grow between kf_ir_eval and this call). Safe to call twice. */
void kf_ir_eval_release(kf_eval_state *st) {
    if (!st || !st->graph || !st->values)
        return;
    kf_graph *g = st->graph;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        if (st->values[i])
            kf_mem_free(&g->mem, st->values[i], value_bytes(g->nodes[i]));
    }
    kf_mem_free(&g->mem, st->values, sizeof(double *) * g->n_nodes);
    st->values = NULL;
}

typedef enum eval_mode { EVAL_REF, EVAL_EXACT, EVAL_FUSED, EVAL_FUSED_SCORES } eval_mode;

/* For kf_ir_eval_fused: a matmul's product stays unrounded when it is no
 * output and every consumer is elementwise (a GEMM's epilogue). */
static void mark_unrounded(const kf_graph *g, bool *keep) {
    for (uint32_t i = 0; i < g->n_nodes; i++)
        keep[i] = g->nodes[i]->op == KF_OP_MATMUL && kf_dtype_is_float(g->nodes[i]->dtype);
    for (uint32_t i = 0; i < g->n_outputs; i++)
        keep[g->outputs[i].tensor->id] = false;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const kf_tensor *t = g->nodes[i];
        if (!(kf_op_get(t->op)->traits & KF_TRAIT_ELEMENTWISE))
            for (int k = 0; k < t->nsrc; k++)
                keep[t->src[k]->id] = false;
    }
}

/* For kf_ir_eval_fused_scores: of the products mark_unrounded keeps, those
 * whose chain of elementwise consumers (each the one use of its operand, no
 * output) ends in a softmax are rounded: the unfused attention stores Q.K^T
 * from its GEMM and applies the score expression in the softmax kernel.
 * `next` (n entries) is scratch. Returns whether any product was rounded. */
static bool round_score_products(const kf_graph *g, bool *keep, uint32_t *next) {
    uint32_t n = g->n_nodes;
    const uint32_t none = UINT32_MAX, many = UINT32_MAX - 1;
    for (uint32_t i = 0; i < n; i++)
        next[i] = none; /* the one consumer; `none`, or `many` for several */
    for (uint32_t i = 0; i < g->n_outputs; i++)
        next[g->outputs[i].tensor->id] = many;
    for (uint32_t c = 0; c < n; c++)
        for (int k = 0; k < g->nodes[c]->nsrc; k++) {
            uint32_t s = g->nodes[c]->src[k]->id;
            next[s] = next[s] == none || next[s] == c ? c : many;
        }
    bool any = false;
    for (uint32_t i = 0; i < n; i++) {
        if (!keep[i])
            continue;
        uint32_t at = i;
        while (next[at] != none && next[at] != many &&
               kf_op_has(g->nodes[next[at]]->op, KF_TRAIT_ELEMENTWISE))
            at = next[at];
        if (next[at] != none && next[at] != many &&
            kf_op_has(g->nodes[next[at]]->op, KF_TRAIT_SOFTMAX)) {
            keep[i] = false;
            any = true;
        }
    }
    return any;
}

/* Computes what the outputs need. On failure everything is released and
 * st->values is NULL; the message is noted on the graph (not sticky). Inputs
 * the outputs do not need may have NULL data. */
static kf_status eval_graph(kf_graph *g, const void *const *input_data, eval_mode mode,
                            kf_eval_state *st) {
    if (KF_NEVER(!g || !st))
        return KF_ERR_INVALID_ARGUMENT;
    st->graph = g;
    st->values = NULL;
    st->exact = mode == EVAL_EXACT;
    st->unrounded = NULL;
    uint32_t n = g->n_nodes;
    if (n == 0)
        return kf_ir_note(g, KF_ERR_INVALID_ARGUMENT, "eval: the graph is empty");
    st->values = kf_mem_calloc(&g->mem, n, sizeof(double *));
    bool *need = kf_mem_calloc(&g->mem, n, sizeof(bool));
    bool fused = mode == EVAL_FUSED || mode == EVAL_FUSED_SCORES;
    bool *keep = fused ? kf_mem_calloc(&g->mem, n, sizeof(bool)) : NULL;
    if (!st->values || !need || (fused && !keep)) {
        kf_mem_free(&g->mem, keep, n * sizeof(bool));
        kf_mem_free(&g->mem, need, n * sizeof(bool));
        kf_mem_free(&g->mem, st->values, n * sizeof(double *));
        st->values = NULL;
        return kf_ir_note(g, KF_ERR_OUT_OF_MEMORY,
                          "eval: out of memory for the value table of %u tensors", n);
    }

    /* Only what the outputs need: creation order is topological, so one
     * backward sweep marks every operand of a needed tensor. */
    for (uint32_t i = 0; i < g->n_outputs; i++)
        need[g->outputs[i].tensor->id] = true;
    for (uint32_t i = n; i-- > 0;) {
        if (!need[i])
            continue;
        const kf_tensor *t = g->nodes[i];
        for (int k = 0; k < t->nsrc; k++)
            need[t->src[k]->id] = true;
    }

    if (keep) {
        mark_unrounded(g, keep);
        st->unrounded = keep;
    }
    if (mode == EVAL_FUSED_SCORES) {
        uint32_t *next = kf_mem_alloc(&g->mem, n * sizeof(uint32_t));
        bool differs = next && round_score_products(g, keep, next);
        kf_mem_free(&g->mem, next, n * sizeof(uint32_t));
        if (!differs) { /* out of memory, or the same realization as EVAL_FUSED */
            kf_mem_free(&g->mem, keep, n * sizeof(bool));
            kf_mem_free(&g->mem, need, n * sizeof(bool));
            kf_mem_free(&g->mem, st->values, n * sizeof(double *));
            st->values = NULL;
            st->unrounded = NULL;
            return next ? KF_OK
                        : kf_ir_note(g, KF_ERR_OUT_OF_MEMORY,
                                     "eval: out of memory for the consumers of %u tensors", n);
        }
    }
    kf_status s = KF_OK;
    for (uint32_t k = 0; k < g->n_inputs && s == KF_OK; k++) {
        const kf_tensor *t = g->inputs[k];
        if (!need[t->id])
            continue;
        if (!input_data || !input_data[k]) {
            s = kf_ir_note(g, KF_ERR_INVALID_ARGUMENT, "eval: input '%s' has no data",
                           t->name ? t->name : "?");
            break;
        }
        size_t bytes = value_bytes(t);
        double *v = bytes ? kf_mem_alloc(&g->mem, bytes) : NULL;
        if (!v) {
            char ts[160];
            s = kf_ir_note(g, KF_ERR_OUT_OF_MEMORY, "eval: out of memory for input '%s' %s",
                           t->name ? t->name : "?", kf_ir_type_str(t, ts, sizeof ts));
            break;
        }
        int64_t ne = kf_ir_numel(t);
        for (int64_t i = 0; i < ne; i++)
            v[i] = kf_ir_load(input_data[k], t->dtype, i);
        st->values[t->id] = v;
    }
    for (uint32_t i = 0; i < n && s == KF_OK; i++) {
        if (need[i] && g->nodes[i]->op != KF_OP_INPUT)
            s = kf_ir_eval_node(st, g->nodes[i]);
    }
    kf_mem_free(&g->mem, need, n * sizeof(bool));
    kf_mem_free(&g->mem, keep, n * sizeof(bool));
    st->unrounded = NULL;
    if (s != KF_OK)
        kf_ir_eval_release(st);
    return s;
}

kf_status kf_ir_eval(kf_graph *g, const void *const *input_data, kf_eval_state *st) {
    return eval_graph(g, input_data, EVAL_REF, st);
}

kf_status kf_ir_eval_exact(kf_graph *g, const void *const *input_data, kf_eval_state *st) {
    return eval_graph(g, input_data, EVAL_EXACT, st);
}

kf_status kf_ir_eval_fused(kf_graph *g, const void *const *input_data, kf_eval_state *st) {
    return eval_graph(g, input_data, EVAL_FUSED, st);
}

kf_status kf_ir_eval_fused_scores(kf_graph *g, const void *const *input_data, kf_eval_state *st) {
    return eval_graph(g, input_data, EVAL_FUSED_SCORES, st);
}

double kf_ir_tolerance(kf_dtype d) {
    switch (d) {
    case KF_DTYPE_F64:
        return 1e-12;
    case KF_DTYPE_F32:
        return 1e-5;
    case KF_DTYPE_F16:
        return 2e-3;
    case KF_DTYPE_BF16:
        return 1.6e-2;
    default:
        return 0.0;
    }
}

kf_dtype kf_ir_path_dtype(const kf_graph *g, const kf_tensor *out) {
    kf_dtype least = out->dtype;
    uint32_t n = g->n_nodes ? g->n_nodes : 1;
    bool *seen = kf_mem_calloc(&g->mem, n, sizeof *seen);
    uint32_t *stack = kf_mem_alloc(&g->mem, (size_t)n * sizeof *stack);
    if (!seen || !stack) {
        /* Without scratch, the least precise float: never a false mismatch. */
        kf_mem_free(&g->mem, seen, (size_t)n * sizeof *seen);
        kf_mem_free(&g->mem, stack, (size_t)n * sizeof *stack);
        return kf_dtype_is_float(out->dtype) ? KF_DTYPE_BF16 : least;
    }
    uint32_t sp = 0;
    stack[sp++] = out->id;
    seen[out->id] = true;
    while (sp) {
        const kf_tensor *t = g->nodes[stack[--sp]];
        if (kf_dtype_is_float(t->dtype) && t->op != KF_OP_INPUT && t->op != KF_OP_CONST &&
            kf_ir_tolerance(t->dtype) > kf_ir_tolerance(least))
            least = t->dtype;
        for (int k = 0; k < t->nsrc; k++) {
            if (!seen[t->src[k]->id]) {
                seen[t->src[k]->id] = true;
                stack[sp++] = t->src[k]->id;
            }
        }
    }
    kf_mem_free(&g->mem, seen, (size_t)n * sizeof *seen);
    kf_mem_free(&g->mem, stack, (size_t)n * sizeof *stack);
    return least;
}

double kf_ir_output_tolerance(const kf_graph *g, const kf_tensor *out) {
    return kf_ir_tolerance(kf_ir_path_dtype(g, out));
}

double kf_ir_rel_err(const void *out, const void *ref, kf_dtype d, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double o = kf_ir_load(out, d, i), r = kf_ir_load(ref, d, i);
        if (isnan(o) || isnan(r))
            return INFINITY;
        if (o == r) {
            if (isfinite(r))
                den += r * r;
            continue;
        }
        if (!isfinite(o) || !isfinite(r))
            return INFINITY;
        num += (o - r) * (o - r);
        den += r * r;
    }
    return den == 0.0 ? sqrt(num) : sqrt(num) / sqrt(den);
}
