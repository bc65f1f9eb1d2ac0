/*
 * ops.c -- the op table built from ops.def, and name lookups for ops and dtypes.
 */
#include <string.h>

#include "ir/ir.h"

const kf_op_info kf_op_table[KF_OP_COUNT] = {
#define KF_OP(NAME, TEXT, FORM, TRAITS, DTYPES) [KF_OP_##NAME] = {TEXT, FORM, TRAITS, DTYPES},
#include "ir/ops.def"
#undef KF_OP
};

/* Every op has an entry: the X-macro and the enum agree by construction; this
 * guards the hand-written tables that are indexed by op or form. */
_Static_assert(KF_OP_COUNT == 52, "ops.def changed: update kf_form_arity users and tests");
_Static_assert(KF_FORM_COUNT == 20, "kf_form changed: update kf_form_arity");
_Static_assert(KF_DTYPE_COUNT == 7, "kf_dtype changed: update the dtype tables");

int kf_form_arity(kf_form form) {
    switch (form) {
    case KF_FORM_INPUT:
    case KF_FORM_CONST:
    case KF_FORM_IOTA:
        return 0;
    case KF_FORM_UNARY:
    case KF_FORM_CAST:
    case KF_FORM_REDUCE:
    case KF_FORM_SOFTMAX:
    case KF_FORM_RESHAPE:
    case KF_FORM_PERMUTE:
    case KF_FORM_CLAMP:
    case KF_FORM_EXPAND:
    case KF_FORM_SLICE:
    case KF_FORM_REPEAT:
        return 1;
    case KF_FORM_BINARY:
    case KF_FORM_CONCAT:
    case KF_FORM_GATHER:
    case KF_FORM_RMS_NORM:
    case KF_FORM_MATMUL:
        return 2;
    case KF_FORM_WHERE:
    case KF_FORM_LAYER_NORM:
        return 3;
    case KF_FORM_COUNT:
        break;
    }
    KF_ASSERT(!"unknown form");
    return 0;
}

kf_op kf_op_from_name(const char *name, size_t len) {
    for (int op = 0; op < KF_OP_COUNT; op++) {
        const char *s = kf_op_table[op].name;
        if (strlen(s) == len && memcmp(s, name, len) == 0)
            return (kf_op)op;
    }
    return KF_OP_COUNT;
}

kf_dtype kf_dtype_from_name(const char *name, size_t len) {
    for (int d = 0; d < KF_DTYPE_COUNT; d++) {
        const char *s = kf_dtype_name((kf_dtype)d);
        if (strlen(s) == len && memcmp(s, name, len) == 0)
            return (kf_dtype)d;
    }
    return KF_DTYPE_COUNT;
}
