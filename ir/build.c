/*
 * build.c -- kf_ir_build: the one place where an op's shape and dtype are
 * inferred and its operands checked. The public builder calls and the .kfg
 * parser both come through here, and the verifier re-runs the same inference,
 * so the rules live once.
 *
 * A bad call records a sticky error on the graph that names the op, the
 * operand and the shapes, and returns NULL; a NULL operand after an earlier
 * failure returns NULL without a new message.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"

/* Largest element count and constant payload kfuse accepts: far above any
 * real tensor, far below where int64 index arithmetic could overflow. */
#define KF_MAX_NUMEL (INT64_C(1) << 48)
#define KF_MAX_CONST_BYTES (INT64_C(1) << 30)

static const char *operand_name(kf_form form, int i) {
    static const char *const xwb[] = {"x", "weight", "bias"};
    static const char *const ab[] = {"a", "b"};
    static const char *const cab[] = {"cond", "a", "b"};
    static const char *const ti[] = {"table", "idx"};
    switch (form) {
    case KF_FORM_GATHER:
        return ti[i];
    case KF_FORM_BINARY:
    case KF_FORM_MATMUL:
    case KF_FORM_CONCAT:
        return ab[i];
    case KF_FORM_WHERE:
        return cab[i];
    case KF_FORM_LAYER_NORM:
    case KF_FORM_RMS_NORM:
        return xwb[i];
    default:
        return "x";
    }
}

static void dtmask_str(unsigned mask, char *buf, size_t size) {
    size_t n = 0;
    buf[0] = '\0';
    for (int d = 0; d < KF_DTYPE_COUNT && n < size; d++) {
        if (!(mask & KF_DTMASK(d)))
            continue;
        int w = snprintf(buf + n, size - n, "%s%s", n ? ", " : "", kf_dtype_name((kf_dtype)d));
        n += w > 0 ? (size_t)w : 0;
    }
}

/* Normalizes a possibly negative axis for a tensor of rank `rank`; -1 if out of range. */
static int norm_axis(int axis, int rank) {
    if (axis < -rank || axis >= rank)
        return -1;
    return axis < 0 ? axis + rank : axis;
}

/* Checks a shape given by a caller: rank in range, every dim positive, the
 * element count bounded. Returns false after recording the error. */
static bool check_shape(char *err, const char *op, int rank, const int64_t *dims) {
    if (rank < 0 || rank > KF_MAX_RANK) {
        kf_msg_set(err, KF_ERR_SHAPE, "%s: rank %d is out of range; kfuse takes 0 to %d dims", op,
                   rank, KF_MAX_RANK);
        return false;
    }
    if (rank > 0 && !dims) {
        kf_msg_set(err, KF_ERR_SHAPE, "%s: dims is NULL for rank %d", op, rank);
        return false;
    }
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 1) {
            kf_msg_set(err, KF_ERR_SHAPE, "%s: dim %d is %lld; every dim must be positive", op, i,
                       (long long)dims[i]);
            return false;
        }
        if (dims[i] > KF_MAX_NUMEL / n) {
            kf_msg_set(err, KF_ERR_SHAPE, "%s: the shape has more than 2^48 elements", op);
            return false;
        }
        n *= dims[i];
    }
    return true;
}

/* Numpy broadcasting of `t` into (rank, dims); dims grows as needed. */
static bool broadcast_into(int *rank, int64_t *dims, const kf_tensor *t) {
    int r = *rank > t->rank ? *rank : t->rank;
    int64_t out[KF_MAX_RANK];
    for (int i = 0; i < r; i++) {
        int ia = i - (r - *rank), ib = i - (r - t->rank);
        int64_t a = ia >= 0 ? dims[ia] : 1, b = ib >= 0 ? t->dims[ib] : 1;
        if (a != b && a != 1 && b != 1)
            return false;
        out[i] = a == 1 ? b : a;
    }
    *rank = r;
    memcpy(dims, out, sizeof(int64_t) * (size_t)r);
    return true;
}


/* Shape/dtype rules per form. Returns KF_OK, or an error status with its
 * message in err (KF_MSG_MAX bytes). */
/* clamp's bounds: not NaN, at least one bounded side, min <= max, and whole
 * numbers for an i32 operand (a fractional bound has no i32 meaning). */
static kf_status infer_clamp(const char *on, const kf_tensor *x, const kf_node_args *a,
                             kf_inferred *r, char *err) {
    char t0[160];
    if (isnan(a->lo) || isnan(a->hi))
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "%s: %s is NaN; give a number or leave it out", on,
                          isnan(a->lo) ? "min" : "max");
    if (!kf_ir_clamp_has_lo(a->lo) && !kf_ir_clamp_has_hi(a->hi))
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "%s: min is -inf and max is inf; give at least one bound", on);
    if (a->lo > a->hi)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "%s: min %.17g is greater than max %.17g",
                          on, a->lo, a->hi);
    if (x->dtype == KF_DTYPE_I32)
        for (int k = 0; k < 2; k++) {
            double v = k ? a->hi : a->lo;
            if (isfinite(v) && floor(v) != v)
                return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                                  "%s: %s %.17g is not a whole number, and operand x %s is i32", on,
                                  k ? "max" : "min", v, kf_ir_type_str(x, t0, sizeof t0));
        }
    r->attr.lo = a->lo;
    r->attr.hi = a->hi;
    return KF_OK;
}

/* expand (numpy's broadcast_to): x's dims, right-aligned against `dims`, each
 * equal to the target's or 1; the target may add leading dims. */
static kf_status infer_expand(const kf_tensor *x, const kf_node_args *a, kf_inferred *r,
                              char *err) {
    char t0[160];
    if (!check_shape(err, "expand", a->rank, a->dims))
        return KF_ERR_SHAPE;
    if (a->rank < x->rank)
        return kf_msg_set(err, KF_ERR_SHAPE,
                          "expand: the target has %d dims, fewer than operand x %s; expand adds "
                          "or widens dims, use reshape to drop them",
                          a->rank, kf_ir_type_str(x, t0, sizeof t0));
    for (int i = 0; i < x->rank; i++) {
        int64_t want = a->dims[a->rank - x->rank + i];
        if (x->dims[i] != want && x->dims[i] != 1)
            return kf_msg_set(err, KF_ERR_SHAPE,
                              "expand: dim %d of operand x %s is %lld, which cannot become %lld "
                              "(only a dim of 1 expands)",
                              i, kf_ir_type_str(x, t0, sizeof t0), (long long)x->dims[i],
                              (long long)want);
    }
    r->rank = a->rank;
    memset(r->dims, 0, sizeof r->dims);
    memcpy(r->dims, a->dims, sizeof(int64_t) * (size_t)a->rank);
    return KF_OK;
}

/* slice: Python's rules on one axis. A negative start or stop counts from the
 * end (dim + v), then both are clamped into [0, dim]; step is >= 1 (no
 * negative steps); an empty result is refused, since kfuse has no empty
 * tensors. The attrs keep the normalized start and step; the length is the
 * result's dim, so stop is implied. */
static kf_status infer_slice(const kf_tensor *x, const kf_node_args *a, kf_inferred *r,
                             char *err) {
    char t0[160];
    int ax = norm_axis(a->axis, x->rank);
    if (ax < 0)
        return kf_msg_set(err, KF_ERR_AXIS, "slice: axis %d is out of range for operand x %s",
                          a->axis, kf_ir_type_str(x, t0, sizeof t0));
    if (a->step < 1)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "slice: step %lld is not positive; kfuse slices forward only (step >= 1)",
                          (long long)a->step);
    int64_t dim = x->dims[ax], b[2] = {a->start, a->stop};
    for (int k = 0; k < 2; k++) {
        if (b[k] < 0)
            b[k] = b[k] < -dim ? 0 : b[k] + dim;
        if (b[k] > dim)
            b[k] = dim;
    }
    if (b[1] <= b[0])
        return kf_msg_set(err, KF_ERR_SHAPE,
                          "slice: start %lld, stop %lld select nothing along axis %d of operand x "
                          "%s (normalized: %lld..%lld); kfuse has no empty tensors",
                          (long long)a->start, (long long)a->stop, ax,
                          kf_ir_type_str(x, t0, sizeof t0), (long long)b[0], (long long)b[1]);
    r->dims[ax] = (b[1] - b[0] + a->step - 1) / a->step;
    r->attr.axis = ax;
    r->attr.start = b[0];
    r->attr.step = a->step;
    return KF_OK;
}

/* repeat: every element of x `times` times along one axis (numpy.repeat,
 * torch.repeat_interleave with a count): the result's element i along the
 * axis is x's element i / times. A block-sparse attention mask is a keep map
 * of tiles repeated to elements (README: block-sparse masks). */
static kf_status infer_repeat(const kf_tensor *x, const kf_node_args *a, kf_inferred *r,
                              char *err) {
    char t0[160];
    int ax = norm_axis(a->axis, x->rank);
    if (ax < 0)
        return kf_msg_set(err, KF_ERR_AXIS, "repeat: axis %d is out of range for operand x %s",
                          a->axis, kf_ir_type_str(x, t0, sizeof t0));
    if (a->times < 1 || a->times > (INT64_C(1) << 31) ||
        x->dims[ax] > KF_MAX_NUMEL / a->times)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "repeat: times %lld for operand x %s; it must be at least 1 and keep "
                          "the axis under 2^48 elements",
                          (long long)a->times, kf_ir_type_str(x, t0, sizeof t0));
    r->dims[ax] = x->dims[ax] * a->times;
    r->attr.axis = ax;
    r->attr.times = a->times;
    return KF_OK;
}

/* concat of two operands along an axis: same rank, every other dim equal. */
static kf_status infer_concat(kf_tensor *const *s, const kf_node_args *a, kf_inferred *r,
                              char *err) {
    char t0[160], t1[160];
    const kf_tensor *x = s[0], *y = s[1];
    int ax = norm_axis(a->axis, x->rank);
    if (ax < 0)
        return kf_msg_set(err, KF_ERR_AXIS, "concat: axis %d is out of range for operand a %s",
                          a->axis, kf_ir_type_str(x, t0, sizeof t0));
    if (y->rank != x->rank)
        return kf_msg_set(err, KF_ERR_SHAPE,
                          "concat: operand b %s has rank %d, operand a %s rank %d; operands "
                          "need the same rank",
                          kf_ir_type_str(y, t1, sizeof t1), y->rank,
                          kf_ir_type_str(x, t0, sizeof t0), x->rank);
    for (int i = 0; i < x->rank; i++) {
        if (i != ax && x->dims[i] != y->dims[i])
            return kf_msg_set(err, KF_ERR_SHAPE,
                              "concat: dim %d of operand b %s is %lld, of operand a %s %lld; "
                              "every dim but axis %d must agree",
                              i, kf_ir_type_str(y, t1, sizeof t1), (long long)y->dims[i],
                              kf_ir_type_str(x, t0, sizeof t0), (long long)x->dims[i], ax);
    }
    if (x->dims[ax] + y->dims[ax] > INT32_MAX)
        return kf_msg_set(err, KF_ERR_SHAPE,
                          "concat: the result's axis %d would be longer than 2^31 - 1", ax);
    r->dims[ax] = x->dims[ax] + y->dims[ax];
    if (kf_ir_numel(x) + kf_ir_numel(y) > KF_MAX_NUMEL)
        return kf_msg_set(err, KF_ERR_SHAPE, "concat: the result has more than 2^48 elements");
    r->attr.axis = ax;
    return KF_OK;
}

/* gather (index_select, an embedding lookup): the result's dims are the
 * table's before axis, then idx's, then the table's after axis. */
static kf_status infer_gather(kf_tensor *const *s, const kf_node_args *a, kf_inferred *r,
                              char *err) {
    char t0[160], t1[160];
    const kf_tensor *tb = s[0], *ix = s[1];
    int ax = norm_axis(a->axis, tb->rank);
    if (ax < 0)
        return kf_msg_set(err, KF_ERR_AXIS, "gather: axis %d is out of range for operand table %s",
                          a->axis, kf_ir_type_str(tb, t0, sizeof t0));
    if (tb->rank - 1 + ix->rank > KF_MAX_RANK)
        return kf_msg_set(err, KF_ERR_SHAPE,
                          "gather: the result of table %s and idx %s would have rank %d, more "
                          "than %d",
                          kf_ir_type_str(tb, t0, sizeof t0), kf_ir_type_str(ix, t1, sizeof t1),
                          tb->rank - 1 + ix->rank, KF_MAX_RANK);
    if (tb->dims[ax] > INT32_MAX)
        return kf_msg_set(err, KF_ERR_SHAPE,
                          "gather: axis %d of operand table %s is longer than 2^31 - 1", ax,
                          kf_ir_type_str(tb, t0, sizeof t0));
    int n = 0;
    double numel = 1;
    for (int i = 0; i < ax; i++)
        r->dims[n++] = tb->dims[i];
    for (int i = 0; i < ix->rank; i++)
        r->dims[n++] = ix->dims[i];
    for (int i = ax + 1; i < tb->rank; i++)
        r->dims[n++] = tb->dims[i];
    for (int i = n; i < KF_MAX_RANK; i++)
        r->dims[i] = 0;
    for (int i = 0; i < n; i++)
        numel *= (double)r->dims[i];
    if (numel > (double)KF_MAX_NUMEL)
        return kf_msg_set(err, KF_ERR_SHAPE, "gather: the result has more than 2^48 elements");
    r->rank = n;
    r->attr.axis = ax;
    return KF_OK;
}

kf_status kf_ir_infer(kf_op op, const kf_node_args *a, kf_inferred *r, char *err) {
    const kf_op_info *info = kf_op_get(op);
    const char *on = info->name;
    kf_tensor *const *s = a->src;
    char t0[160], t1[160], t2[160], dts[64];
    memset(r, 0, sizeof *r);

    switch (info->form) {
    case KF_FORM_INPUT:
    case KF_FORM_CONST:
    case KF_FORM_IOTA:
        if ((unsigned)a->dtype >= KF_DTYPE_COUNT)
            return kf_msg_set(err, KF_ERR_DTYPE, "%s: dtype %d is not a kf_dtype", on, (int)a->dtype);
        if (!(info->dtypes & KF_DTMASK(a->dtype))) {
            dtmask_str(info->dtypes, dts, sizeof dts);
            return kf_msg_set(err, KF_ERR_DTYPE, "%s: dtype %s is not allowed; %s takes %s", on,
                              kf_dtype_name(a->dtype), on, dts);
        }
        if (!check_shape(err, on, a->rank, a->dims))
            return KF_ERR_SHAPE;
        r->dtype = a->dtype;
        r->rank = a->rank;
        if (a->rank)
            memcpy(r->dims, a->dims, sizeof(int64_t) * (size_t)a->rank);
        if (info->form == KF_FORM_IOTA) {
            r->attr.axis = norm_axis(a->axis, a->rank);
            if (r->attr.axis < 0) {
                kf_tensor shape = {.dtype = r->dtype, .rank = r->rank};
                memcpy(shape.dims, r->dims, sizeof shape.dims);
                return kf_msg_set(err, KF_ERR_AXIS, "iota: axis %d is out of range for %s", a->axis,
                                  kf_ir_type_str(&shape, t0, sizeof t0));
            }
        }
        return KF_OK;
    default:
        break;
    }

    /* Every other form has tensor operands; check their dtypes first. */
    int n = kf_form_arity(info->form);
    for (int i = 0; i < n; i++) {
        unsigned allowed = info->dtypes;
        if (info->form == KF_FORM_WHERE && i == 0)
            allowed = KF_DTMASK(KF_DTYPE_BOOL);
        if (info->form == KF_FORM_GATHER && i == 1)
            allowed = KF_DTMASK(KF_DTYPE_I32) | KF_DTMASK(KF_DTYPE_I64);
        if (!(allowed & KF_DTMASK(s[i]->dtype))) {
            dtmask_str(allowed, dts, sizeof dts);
            return kf_msg_set(err, KF_ERR_DTYPE, "%s: operand %s %s has dtype %s; %s takes %s%s", on,
                              operand_name(info->form, i), kf_ir_type_str(s[i], t0, sizeof t0),
                              kf_dtype_name(s[i]->dtype), on, dts,
                              kf_dtype_is_float(s[i]->dtype) || s[i]->dtype == KF_DTYPE_BOOL
                                  ? ""
                                  : " (insert a cast)");
        }
    }
    /* Operands that must share the first operand's dtype. */
    int first_same = info->form == KF_FORM_WHERE ? 1 : 0;
    for (int i = first_same + 1;
         i < n && info->form != KF_FORM_CAST && info->form != KF_FORM_GATHER; i++) {
        if (s[i]->dtype != s[first_same]->dtype)
            return kf_msg_set(err, KF_ERR_DTYPE,
                              "%s: operand %s %s and operand %s %s have different dtypes; insert "
                              "a cast so they agree",
                              on, operand_name(info->form, first_same),
                              kf_ir_type_str(s[first_same], t0, sizeof t0),
                              operand_name(info->form, i), kf_ir_type_str(s[i], t1, sizeof t1));
    }

    const kf_tensor *x = s[0];
    r->dtype = x->dtype;
    r->rank = x->rank;
    memcpy(r->dims, x->dims, sizeof r->dims);

    switch (info->form) {
    case KF_FORM_UNARY:
        return KF_OK;
    case KF_FORM_CLAMP:
        return infer_clamp(on, x, a, r, err);
    case KF_FORM_EXPAND:
        return infer_expand(x, a, r, err);
    case KF_FORM_SLICE:
        return infer_slice(x, a, r, err);
    case KF_FORM_REPEAT:
        return infer_repeat(x, a, r, err);
    case KF_FORM_CONCAT:
        return infer_concat(s, a, r, err);
    case KF_FORM_GATHER:
        return infer_gather(s, a, r, err);
    case KF_FORM_CAST:
        if ((unsigned)a->dtype >= KF_DTYPE_COUNT)
            return kf_msg_set(err, KF_ERR_DTYPE, "cast: target dtype %d is not a kf_dtype",
                              (int)a->dtype);
        /* i64 holds gather indices only (graph inputs and constants): no op
         * computes it, and the backends would store a cast's value as another
         * width. */
        if (a->dtype == KF_DTYPE_I64) {
            char t0[160];
            return kf_msg_set(err, KF_ERR_DTYPE,
                              "cast: operand x %s: a cast to i64 (i64 is only a gather's index "
                              "dtype, for graph inputs and constants; cast to i32 instead)",
                              kf_ir_type_str(x, t0, sizeof t0));
        }
        r->dtype = a->dtype;
        r->attr.to = a->dtype;
        return KF_OK;
    case KF_FORM_BINARY:
    case KF_FORM_WHERE:
        for (int i = 1; i < n; i++) {
            if (!broadcast_into(&r->rank, r->dims, s[i])) {
                kf_tensor acc = {.dtype = r->dtype, .rank = r->rank};
                memcpy(acc.dims, r->dims, sizeof acc.dims);
                return kf_msg_set(err, KF_ERR_SHAPE,
                                  "%s: operand %s %s does not broadcast against %s %s (numpy "
                                  "rules: trailing dims must be equal or 1)",
                                  on, operand_name(info->form, i),
                                  kf_ir_type_str(s[i], t0, sizeof t0),
                                  i == 1 ? "operand" : "the broadcast shape",
                                  i == 1 ? (snprintf(t2, sizeof t2, "%s %s",
                                                     operand_name(info->form, 0),
                                                     kf_ir_type_str(s[0], t1, sizeof t1)),
                                            t2)
                                         : strchr(kf_ir_type_str(&acc, t1, sizeof t1), '['));
            }
        }
        if (info->form == KF_FORM_WHERE)
            r->dtype = s[1]->dtype;
        if (info->traits & KF_TRAIT_COMPARE)
            r->dtype = KF_DTYPE_BOOL;
        return KF_OK;
    case KF_FORM_REDUCE:
    case KF_FORM_SOFTMAX:
    case KF_FORM_LAYER_NORM:
    case KF_FORM_RMS_NORM: {
        int ax = norm_axis(a->axis, x->rank);
        if (ax < 0)
            return kf_msg_set(err, KF_ERR_AXIS, "%s: axis %d is out of range for operand x %s", on,
                              a->axis, kf_ir_type_str(x, t0, sizeof t0));
        r->attr.axis = ax;
        if (info->form == KF_FORM_REDUCE) {
            if (info->traits & KF_TRAIT_INDEX)
                r->dtype = KF_DTYPE_I32;
            r->attr.keepdim = a->keepdim;
            if (a->keepdim) {
                r->dims[ax] = 1;
            } else {
                for (int i = ax; i + 1 < r->rank; i++)
                    r->dims[i] = r->dims[i + 1];
                r->rank--;
                r->dims[r->rank] = 0;
            }
        }
        if (info->form == KF_FORM_LAYER_NORM || info->form == KF_FORM_RMS_NORM) {
            if (!isfinite(a->eps) || a->eps < 0)
                return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                                  "%s: eps %g must be finite and >= 0", on, a->eps);
            r->attr.eps = a->eps;
            for (int i = 1; i < n; i++) {
                if (s[i]->rank != 1 || s[i]->dims[0] != x->dims[ax])
                    return kf_msg_set(err, KF_ERR_SHAPE,
                                      "%s: operand %s %s must be rank 1 of length %lld (operand "
                                      "x %s along axis %d)",
                                      on, operand_name(info->form, i),
                                      kf_ir_type_str(s[i], t0, sizeof t0),
                                      (long long)x->dims[ax], kf_ir_type_str(x, t1, sizeof t1), ax);
            }
        }
        return KF_OK;
    }
    case KF_FORM_MATMUL: {
        const kf_tensor *b = s[1];
        if (x->rank < 2 || b->rank < 2)
            return kf_msg_set(err, KF_ERR_SHAPE,
                              "matmul: operands need rank >= 2 (a %s, b %s); reshape a vector to "
                              "[1, K] or [K, 1]",
                              kf_ir_type_str(x, t0, sizeof t0), kf_ir_type_str(b, t1, sizeof t1));
        int64_t m = a->transpose_a ? x->dims[x->rank - 1] : x->dims[x->rank - 2];
        int64_t ka = a->transpose_a ? x->dims[x->rank - 2] : x->dims[x->rank - 1];
        int64_t kb = a->transpose_b ? b->dims[b->rank - 1] : b->dims[b->rank - 2];
        int64_t nn = a->transpose_b ? b->dims[b->rank - 2] : b->dims[b->rank - 1];
        if (ka != kb)
            return kf_msg_set(err, KF_ERR_SHAPE,
                              "matmul: inner dims differ: operand a %s gives K=%lld, operand b %s "
                              "gives K=%lld (transpose_a=%s, transpose_b=%s)",
                              kf_ir_type_str(x, t0, sizeof t0), (long long)ka,
                              kf_ir_type_str(b, t1, sizeof t1), (long long)kb,
                              a->transpose_a ? "true" : "false", a->transpose_b ? "true" : "false");
        kf_tensor ba = {.rank = x->rank - 2}, bb = {.rank = b->rank - 2};
        memcpy(ba.dims, x->dims, sizeof(int64_t) * (size_t)ba.rank);
        memcpy(bb.dims, b->dims, sizeof(int64_t) * (size_t)bb.rank);
        int br = ba.rank;
        int64_t bd[KF_MAX_RANK];
        memcpy(bd, ba.dims, sizeof bd);
        if (!broadcast_into(&br, bd, &bb))
            return kf_msg_set(err, KF_ERR_SHAPE,
                              "matmul: batch dims of operand a %s and operand b %s do not "
                              "broadcast",
                              kf_ir_type_str(x, t0, sizeof t0), kf_ir_type_str(b, t1, sizeof t1));
        r->rank = br + 2;
        memcpy(r->dims, bd, sizeof(int64_t) * (size_t)br);
        r->dims[br] = m;
        r->dims[br + 1] = nn;
        r->attr.transpose_a = a->transpose_a;
        r->attr.transpose_b = a->transpose_b;
        return KF_OK;
    }
    case KF_FORM_RESHAPE: {
        if (a->rank < 0 || a->rank > KF_MAX_RANK)
            return kf_msg_set(err, KF_ERR_SHAPE, "reshape: rank %d is out of range; 0 to %d", a->rank,
                              KF_MAX_RANK);
        int64_t known = 1, total = kf_ir_numel(x);
        int infer_at = -1;
        for (int i = 0; i < a->rank; i++) {
            if (a->dims[i] == -1 && infer_at < 0) {
                infer_at = i;
            } else if (a->dims[i] < 1) {
                return kf_msg_set(err, KF_ERR_SHAPE,
                                  "reshape: dim %d is %lld; dims are positive, with at most one -1",
                                  i, (long long)a->dims[i]);
            } else {
                /* Saturate at total + 1: enough to say "no match", no overflow. */
                known = known > total / a->dims[i] ? total + 1 : known * a->dims[i];
            }
        }
        r->rank = a->rank;
        memcpy(r->dims, a->dims, sizeof(int64_t) * (size_t)a->rank);
        if (infer_at >= 0) {
            if (known > total || total % known != 0)
                return kf_msg_set(err, KF_ERR_SHAPE,
                                  "reshape: operand x %s has %lld elements, which the target "
                                  "shape's known dims (product %lld) do not divide",
                                  kf_ir_type_str(x, t0, sizeof t0), (long long)total,
                                  (long long)known);
            r->dims[infer_at] = total / known;
        } else if (known != total) {
            kf_tensor want = {.dtype = x->dtype, .rank = a->rank};
            memcpy(want.dims, a->dims, sizeof(int64_t) * (size_t)a->rank);
            return kf_msg_set(err, KF_ERR_SHAPE,
                              "reshape: operand x %s has %lld elements but the target %s has %s%lld",
                              kf_ir_type_str(x, t0, sizeof t0), (long long)total,
                              kf_ir_type_str(&want, t1, sizeof t1),
                              known > total ? "more than " : "", (long long)(known > total ? total : known));
        }
        return KF_OK;
    }
    case KF_FORM_PERMUTE: {
        bool seen[KF_MAX_RANK] = {false};
        for (int i = 0; i < x->rank; i++) {
            int p = norm_axis(a->perm[i], x->rank);
            if (p < 0 || seen[p])
                return kf_msg_set(err, KF_ERR_AXIS,
                                  "permute: perm[%d] = %d is %s for operand x %s; perm must list "
                                  "each of 0..%d once",
                                  i, a->perm[i], p < 0 ? "out of range" : "repeated",
                                  kf_ir_type_str(x, t0, sizeof t0), x->rank - 1);
            seen[p] = true;
            r->attr.perm[i] = p;
            r->dims[i] = x->dims[p];
        }
        return KF_OK;
    }
    default:
        break;
    }
    return kf_msg_set(err, KF_ERR_INTERNAL, "%s: no shape rule for this op (a kfuse bug)", on);
}

kf_tensor *kf_ir_build(kf_graph *g, kf_op op, const kf_node_args *a) {
    if (!g || g->status != KF_OK)
        return NULL;
    if (KF_NEVER((unsigned)op >= KF_OP_COUNT)) {
        kf_ir_fail(g, KF_ERR_INTERNAL, "build: op %d is not a kf_op", (int)op);
        return NULL;
    }
    const kf_op_info *info = kf_op_get(op);
    int n = kf_form_arity(info->form);
    for (int i = 0; i < n; i++) {
        if (!a->src[i]) {
            kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT, "%s: operand %s is NULL", info->name,
                       operand_name(info->form, i));
            return NULL;
        }
        if (a->src[i]->graph != g) {
            kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT, "%s: operand %s belongs to another graph",
                       info->name, operand_name(info->form, i));
            return NULL;
        }
    }
    size_t name_len = 0;
    if (op == KF_OP_INPUT) {
        name_len = a->name ? strlen(a->name) : 0;
        if (!kf_ir_is_identifier(a->name, name_len)) {
            kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT,
                       "input: name '%.64s' is not an identifier ([A-Za-z_][A-Za-z0-9_]*, at most "
                       "64 characters)",
                       a->name ? a->name : "(null)");
            return NULL;
        }
        if (kf_ir_find_name(g, a->name, name_len) || g->status != KF_OK) {
            kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT, /* not the first error after an OOM */
                       "input: name '%s' is already used in this graph; names are unique",
                       a->name);
            return NULL;
        }
    }

    kf_inferred r;
    char err[KF_MSG_MAX];
    kf_status st = kf_ir_infer(op, a, &r, err);
    if (st != KF_OK) {
        kf_ir_fail(g, st, "%s", err);
        return NULL;
    }

    size_t const_bytes = 0;
    if (op == KF_OP_CONST) {
        int64_t numel = 1;
        for (int i = 0; i < r.rank; i++)
            numel *= r.dims[i];
        if (numel > KF_MAX_CONST_BYTES / (int64_t)kf_dtype_size(r.dtype)) {
            kf_ir_fail(g, KF_ERR_SHAPE,
                       "const: %lld elements of %s exceed the 1 GiB limit on constant data; "
                       "make it a graph input",
                       (long long)numel, kf_dtype_name(r.dtype));
            return NULL;
        }
        const_bytes = (size_t)numel * kf_dtype_size(r.dtype);
    }

    /* Reserve everything before committing, so a failure leaves the graph as it was. */
    if (!kf_mem_grow(&g->mem, (void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1,
                     sizeof *g->nodes) ||
        (op == KF_OP_INPUT && !kf_mem_grow(&g->mem, (void **)&g->inputs, &g->cap_inputs,
                                           g->n_inputs + 1, sizeof *g->inputs))) {
        kf_ir_fail(g, KF_ERR_OUT_OF_MEMORY, "%s: out of memory", info->name);
        return NULL;
    }
    kf_tensor *t = kf_arena_alloc(&g->arena, sizeof *t);
    char *name = NULL;
    void *data = NULL;
    if (t && op == KF_OP_INPUT)
        name = kf_arena_strndup(&g->arena, a->name, name_len);
    if (t && op == KF_OP_CONST)
        data = kf_arena_alloc(&g->arena, const_bytes);
    if (!t || (op == KF_OP_INPUT && !name) || (op == KF_OP_CONST && !data)) {
        kf_ir_fail(g, KF_ERR_OUT_OF_MEMORY, "%s: out of memory", info->name);
        return NULL;
    }
    if (data && a->data)
        memcpy(data, a->data, const_bytes);

    t->graph = g;
    t->id = g->n_nodes;
    t->op = op;
    t->dtype = r.dtype;
    t->rank = r.rank;
    memcpy(t->dims, r.dims, sizeof t->dims);
    t->attr = r.attr;
    t->nsrc = n;
    for (int i = 0; i < n; i++) {
        t->src[i] = a->src[i];
        a->src[i]->n_uses++;
    }
    t->name = name;
    t->data = data;
    g->nodes[g->n_nodes++] = t;
    if (op == KF_OP_INPUT)
        g->inputs[g->n_inputs++] = t;
    return t;
}
