/*
 * print.c -- the canonical .kfg text of a graph (docs/kfg.md, "The canonical
 * form"), and the shortest-decimal number formatting it uses.
 *
 * The printer is the half of the round trip that decides every byte: the
 * parser (frontend/parse.c) accepts more spellings, and print -> parse -> print
 * must give the same bytes. So every choice here is a function of the graph's
 * values alone:
 *   - one statement per tensor in creation order, then one output line each;
 *   - names are the tensor's name, else %ID;
 *   - attributes equal to their default are left out, the rest are written in
 *     a fixed order (axis, keepdim, eps, transpose_a, transpose_b);
 *   - a constant is a splat when every element prints the same (so NaNs with
 *     different payloads, which all print as `nan`, still make a splat), else a
 *     list; numbers are the shortest decimal that reads back to the same value.
 *
 * The printer allocates nothing: it writes straight to the FILE*, and reports a
 * stream failure as KF_ERR_IO.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

/* The defaults the printer leaves out (docs/kfg.md, "Ops"). The parser uses the
 * same values; keep them in step. */
#define KF_LAYER_NORM_EPS 1e-05
#define KF_RMS_NORM_EPS 1e-06

/* True when `s` (from snprintf) reads back as `v` in dtype `d`, sign of zero
 * included. NaN never reaches here. */
static bool reads_back(const char *s, double v, kf_dtype d) {
    double r = kf_ir_round(d, strtod(s, NULL));
    return r == v && signbit(r) == signbit(v);
}

int kf_ir_format_number(char *buf, size_t size, double v, kf_dtype d) {
    char tmp[40];
    const char *s = tmp;
    if (d == KF_DTYPE_BOOL) {
        s = v != 0 ? "1" : "0";
    } else if (isnan(v)) {
        s = "nan";
    } else if (isinf(v)) {
        s = v < 0 ? "-inf" : "inf";
    } else if (d == KF_DTYPE_I32) {
        /* i32 values are integers in range; clamp defensively so the cast is defined. */
        double c = v < -2147483648.0 ? -2147483648.0 : v > 2147483647.0 ? 2147483647.0 : v;
        snprintf(tmp, sizeof tmp, "%ld", (long)c);
    } else if (d == KF_DTYPE_I64) {
        snprintf(tmp, sizeof tmp, "%lld", (long long)kf_ir_round(d, v));
    } else {
        /* v is a value of dtype d (the caller passes a stored element or an
         * attribute); %.17g always reads back exactly, so the loop ends. Values
         * that are not exact in d still get a string that reads back to
         * kf_ir_round(d, v). */
        double want = kf_ir_round(d, v);
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(tmp, sizeof tmp, "%.*g", prec, v);
            if (reads_back(tmp, want, d))
                break;
        }
    }
    return snprintf(buf, size, "%s", s);
}

/* ------------------------------------------------------------------------ */
/* Writing                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct printer {
    FILE *out;
    bool failed;
} printer;

static void put(printer *p, const char *s) {
    if (fputs(s, p->out) == EOF)
        p->failed = true;
}

static void putf(printer *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(printer *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (vfprintf(p->out, fmt, ap) < 0)
        p->failed = true;
    va_end(ap);
}

static void put_ref(printer *p, const kf_tensor *t) {
    if (t->name)
        put(p, t->name);
    else
        putf(p, "%%%u", t->id);
}

/* DTYPE[D, D, ...] with explicit dims (a tensor's type, or reshape's list). */
static void put_dims(printer *p, const int64_t *dims, int rank) {
    put(p, "[");
    for (int i = 0; i < rank; i++)
        putf(p, "%s%lld", i ? ", " : "", (long long)dims[i]);
    put(p, "]");
}

static void put_type(printer *p, const kf_tensor *t) {
    put(p, kf_dtype_name(t->dtype));
    put_dims(p, t->dims, t->rank);
}

/* True when two elements print the same (what "every element is equal" means
 * for the splat form: -0 and 0 differ, every NaN is alike). */
static bool same_text(double a, double b, kf_dtype d) {
    if (d == KF_DTYPE_BOOL)
        return (a != 0) == (b != 0);
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

static void put_number(printer *p, double v, kf_dtype d) {
    char buf[48];
    kf_ir_format_number(buf, sizeof buf, v, d);
    put(p, buf);
}

static void put_const_values(printer *p, const kf_tensor *t) {
    int64_t n = kf_ir_numel(t);
    if (KF_NEVER(!t->data)) {
        put(p, "0");
        return;
    }
    double first = kf_ir_load(t->data, t->dtype, 0);
    int64_t i = 1;
    while (i < n && same_text(first, kf_ir_load(t->data, t->dtype, i), t->dtype))
        i++;
    if (i == n) {
        put_number(p, first, t->dtype);
        return;
    }
    put(p, "[");
    for (i = 0; i < n && !p->failed; i++) {
        if (i)
            put(p, ", ");
        put_number(p, kf_ir_load(t->data, t->dtype, i), t->dtype);
    }
    put(p, "]");
}

static void put_eps(printer *p, double eps, double dflt) {
    if (eps == dflt)
        return;
    char buf[48];
    kf_ir_format_number(buf, sizeof buf, eps, KF_DTYPE_F64);
    putf(p, ", eps=%s", buf);
}

/* Writes the argument list of `t` (between the parentheses). */
static void put_args(printer *p, const kf_tensor *t) {
    const kf_op_info *info = kf_op_get(t->op);
    for (int i = 0; i < t->nsrc; i++) {
        if (i)
            put(p, ", ");
        put_ref(p, t->src[i]);
    }
    /* The last axis is the default for softmax and the norms. */
    bool axis_default = t->nsrc > 0 && t->attr.axis == t->src[0]->rank - 1;
    switch (info->form) {
    case KF_FORM_INPUT:
        put_type(p, t);
        break;
    case KF_FORM_CONST:
        put_type(p, t);
        put(p, ", ");
        put_const_values(p, t);
        break;
    case KF_FORM_IOTA:
        put_type(p, t);
        putf(p, ", axis=%d", t->attr.axis);
        break;
    case KF_FORM_UNARY:
    case KF_FORM_BINARY:
    case KF_FORM_WHERE:
        break;
    case KF_FORM_CAST:
        putf(p, ", %s", kf_dtype_name(t->dtype));
        break;
    case KF_FORM_REDUCE:
        putf(p, ", axis=%d", t->attr.axis);
        if (t->attr.keepdim)
            put(p, ", keepdim=true");
        break;
    case KF_FORM_SOFTMAX:
        if (!axis_default)
            putf(p, ", axis=%d", t->attr.axis);
        break;
    case KF_FORM_LAYER_NORM:
    case KF_FORM_RMS_NORM:
        if (!axis_default)
            putf(p, ", axis=%d", t->attr.axis);
        put_eps(p, t->attr.eps,
                info->form == KF_FORM_LAYER_NORM ? KF_LAYER_NORM_EPS : KF_RMS_NORM_EPS);
        break;
    case KF_FORM_MATMUL:
        if (t->attr.transpose_a)
            put(p, ", transpose_a=true");
        if (t->attr.transpose_b)
            put(p, ", transpose_b=true");
        break;
    case KF_FORM_RESHAPE:
        put(p, ", ");
        put_dims(p, t->dims, t->rank);
        break;
    case KF_FORM_PERMUTE:
        put(p, ", [");
        for (int i = 0; i < t->rank; i++)
            putf(p, "%s%d", i ? ", " : "", t->attr.perm[i]);
        put(p, "]");
        break;
    case KF_FORM_EXPAND:
        put(p, ", ");
        put_dims(p, t->dims, t->rank);
        break;
    case KF_FORM_SLICE: {
        /* normalized: start (left out when 0), the smallest stop that gives
         * the same elements, step (left out when 1) */
        const kf_attrs *at = &t->attr;
        putf(p, ", axis=%d", at->axis);
        if (at->start)
            putf(p, ", start=%lld", (long long)at->start);
        putf(p, ", stop=%lld", (long long)(at->start + at->step * (t->dims[at->axis] - 1) + 1));
        if (at->step != 1)
            putf(p, ", step=%lld", (long long)at->step);
        break;
    }
    case KF_FORM_CONCAT:
    case KF_FORM_GATHER:
        putf(p, ", axis=%d", t->attr.axis);
        break;
    case KF_FORM_REPEAT:
        putf(p, ", axis=%d, times=%lld", t->attr.axis, (long long)t->attr.times);
        break;
    case KF_FORM_CLAMP: {
        char buf[48];
        if (kf_ir_clamp_has_lo(t->attr.lo)) {
            kf_ir_format_number(buf, sizeof buf, t->attr.lo, KF_DTYPE_F64);
            putf(p, ", min=%s", buf);
        }
        if (kf_ir_clamp_has_hi(t->attr.hi)) {
            kf_ir_format_number(buf, sizeof buf, t->attr.hi, KF_DTYPE_F64);
            putf(p, ", max=%s", buf);
        }
        break;
    }
    case KF_FORM_COUNT:
        KF_ASSERT(!"bad form");
        break;
    }
}

kf_status kf_ir_print(const kf_graph *g, FILE *out) {
    printer p = {out, false};
    put(&p, "kfg 1\n");
    for (uint32_t i = 0; i < g->n_nodes && !p.failed; i++) {
        const kf_tensor *t = g->nodes[i];
        put_ref(&p, t);
        putf(&p, " = %s(", kf_op_get(t->op)->name);
        put_args(&p, t);
        put(&p, ")\n");
    }
    for (uint32_t i = 0; i < g->n_outputs && !p.failed; i++) {
        const kf_graph_output_slot *o = &g->outputs[i];
        put(&p, "output ");
        put(&p, o->name);
        if (!o->tensor->name || strcmp(o->tensor->name, o->name) != 0) {
            put(&p, " = ");
            put_ref(&p, o->tensor);
        }
        put(&p, "\n");
    }
    if (p.failed || ferror(out))
        return KF_ERR_IO;
    return KF_OK;
}

void kf_ir_json_string(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}
