/*
 * lg_core.c -- the parts of codegen/llvm every kernel kind shares: types,
 * loops, element loads and stores with the 16-bit conversions, the lowering
 * of one scalar-expression node (the one expression form of DESIGN.md), row
 * statistics, and kf_llvm_emit_plan, which walks the plan's groups.
 *
 * Numerics follow fusion.h: a node that stands for a graph tensor rounds its
 * result to the tensor's dtype (as the reference evaluator stores it); other
 * nodes compute in f32 (f64 for f64). f16 rounds through LLVM's fptrunc to
 * half (round to nearest even; F16C on x86); bf16 rounds with integer bit
 * manipulation (round to nearest even, NaN kept quiet), which needs no
 * runtime library. Transcendentals call libm (expf, tanhf, erfcf, ...),
 * resolved from the process by the JIT.
 */
#include <math.h>
#include <stdio.h>

#include "codegen/llvm/lg.h"

kf_status lg_fail(lg_mod *m, kf_status st, const char *fmt, ...) {
    if (m->st == KF_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m->err, KF_MSG_MAX, fmt, ap);
        va_end(ap);
        m->st = st;
    }
    return st;
}

LLVMTypeRef lg_ctype(lg_mod *m, kf_dtype d) {
    switch (d) {
    case KF_DTYPE_F64:
        return m->f64;
    case KF_DTYPE_I32:
        return m->i32;
    case KF_DTYPE_I64:
        return m->i64;
    case KF_DTYPE_BOOL:
        return m->i1;
    default:
        return m->f32;
    }
}

LLVMTypeRef lg_acc_type(lg_mod *m, kf_dtype d) { return d == KF_DTYPE_F64 ? m->f64 : m->f32; }

LLVMValueRef lg_i64(lg_mod *m, int64_t v) { return LLVMConstInt(m->i64, (unsigned long long)v, 1); }

LLVMValueRef lg_fconst(LLVMTypeRef t, double v) { return LLVMConstReal(t, v); }

LLVMValueRef lg_var(lg_fn *f, LLVMTypeRef t, const char *name) {
    return LLVMBuildAlloca(f->alloca_b, t, name);
}

LLVMValueRef lg_scratch(lg_fn *f, size_t bytes) {
    size_t off = f->scratch_used;
    f->scratch_used += (bytes + 63) & ~(size_t)63;
    f->k->scratch = f->scratch_used;
    return LLVMBuildGEP2(f->alloca_b, f->m->i8, f->scratch,
                         (LLVMValueRef[]){lg_i64(f->m, (int64_t)off)}, 1, "scr");
}

LLVMValueRef lg_loop_begin(lg_fn *f, lg_loop *l, LLVMValueRef lo, LLVMValueRef hi,
                           const char *name) {
    LLVMBuilderRef B = f->m->B;
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(B);
    l->header = LLVMAppendBasicBlockInContext(f->m->C, f->fn, name);
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(f->m->C, f->fn, "body");
    l->exit = LLVMAppendBasicBlockInContext(f->m->C, f->fn, "exit");
    LLVMBuildBr(B, l->header);
    LLVMPositionBuilderAtEnd(B, l->header);
    l->phi = LLVMBuildPhi(B, f->m->i64, name);
    LLVMAddIncoming(l->phi, &lo, &pre, 1);
    LLVMValueRef c = LLVMBuildICmp(B, LLVMIntSLT, l->phi, hi, "");
    LLVMBuildCondBr(B, c, body, l->exit);
    LLVMPositionBuilderAtEnd(B, body);
    l->iv = l->phi;
    return l->iv;
}

void lg_loop_end(lg_fn *f, lg_loop *l) {
    LLVMBuilderRef B = f->m->B;
    LLVMValueRef next = LLVMBuildNSWAdd(B, l->phi, lg_i64(f->m, 1), "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(B);
    LLVMBuildBr(B, l->header);
    LLVMAddIncoming(l->phi, &next, &latch, 1);
    LLVMPositionBuilderAtEnd(B, l->exit);
}

LLVMBasicBlockRef lg_if_begin(lg_fn *f, LLVMValueRef cond) {
    LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(f->m->C, f->fn, "then");
    LLVMBasicBlockRef after = LLVMAppendBasicBlockInContext(f->m->C, f->fn, "endif");
    LLVMBuildCondBr(f->m->B, cond, then, after);
    LLVMPositionBuilderAtEnd(f->m->B, then);
    return after;
}

void lg_if_end(lg_fn *f, LLVMBasicBlockRef after) {
    LLVMBuildBr(f->m->B, after);
    LLVMPositionBuilderAtEnd(f->m->B, after);
}

LLVMValueRef lg_buf(lg_fn *f, uint32_t t) {
    if (!f->bufptr[t]) {
        lg_mod *m = f->m;
        LLVMValueRef slot =
            LLVMBuildGEP2(f->alloca_b, m->ptr, f->bufs, (LLVMValueRef[]){lg_i64(m, t)}, 1, "");
        char name[32];
        snprintf(name, sizeof name, "t%u", t);
        f->bufptr[t] = LLVMBuildLoad2(f->alloca_b, m->ptr, slot, name);
        f->bufptr_set[f->n_bufptr_set++] = t;
    }
    return f->bufptr[t];
}

static LLVMTypeRef storage_type(lg_mod *m, kf_dtype d) {
    switch (d) {
    case KF_DTYPE_F32:
        return m->f32;
    case KF_DTYPE_F64:
        return m->f64;
    case KF_DTYPE_I32:
        return m->i32;
    case KF_DTYPE_I64:
        return m->i64;
    case KF_DTYPE_BOOL:
        return m->i8;
    default:
        return m->i16;
    }
}

LLVMValueRef lg_load_elem(lg_fn *f, kf_dtype d, LLVMValueRef base, LLVMValueRef off) {
    lg_mod *m = f->m;
    LLVMBuilderRef B = m->B;
    LLVMTypeRef st = storage_type(m, d);
    LLVMValueRef p = LLVMBuildInBoundsGEP2(B, st, base, &off, 1, "");
    LLVMValueRef v = LLVMBuildLoad2(B, st, p, "");
    switch (d) {
    case KF_DTYPE_F16:
        return LLVMBuildFPExt(B, LLVMBuildBitCast(B, v, m->f16, ""), m->f32, "");
    case KF_DTYPE_BF16: {
        LLVMValueRef w =
            LLVMBuildShl(B, LLVMBuildZExt(B, v, m->i32, ""), LLVMConstInt(m->i32, 16, 0), "");
        return LLVMBuildBitCast(B, w, m->f32, "");
    }
    case KF_DTYPE_BOOL:
        return LLVMBuildICmp(B, LLVMIntNE, v, LLVMConstInt(m->i8, 0, 0), "");
    default:
        return v;
    }
}

/* f32 -> bf16 bits in the high half of an i32, round to nearest even. */
static LLVMValueRef bf16_bits(lg_mod *m, LLVMValueRef v) {
    LLVMBuilderRef B = m->B;
    LLVMValueRef bits = LLVMBuildBitCast(B, v, m->i32, "");
    LLVMValueRef lsb = LLVMBuildAnd(B, LLVMBuildLShr(B, bits, LLVMConstInt(m->i32, 16, 0), ""),
                                    LLVMConstInt(m->i32, 1, 0), "");
    LLVMValueRef r =
        LLVMBuildAdd(B, bits, LLVMBuildAdd(B, lsb, LLVMConstInt(m->i32, 0x7fff, 0), ""), "");
    LLVMValueRef nan = LLVMBuildOr(B, bits, LLVMConstInt(m->i32, 0x00400000, 0), "");
    LLVMValueRef isnan = LLVMBuildFCmp(B, LLVMRealUNO, v, v, "");
    r = LLVMBuildSelect(B, isnan, nan, r, "");
    return LLVMBuildAnd(B, r, LLVMConstInt(m->i32, 0xffff0000u, 0), "");
}

void lg_store_elem(lg_fn *f, kf_dtype d, LLVMValueRef base, LLVMValueRef off, LLVMValueRef v) {
    lg_mod *m = f->m;
    LLVMBuilderRef B = m->B;
    LLVMTypeRef st = storage_type(m, d);
    LLVMValueRef s;
    switch (d) {
    case KF_DTYPE_F16:
        s = LLVMBuildBitCast(B, LLVMBuildFPTrunc(B, v, m->f16, ""), m->i16, "");
        break;
    case KF_DTYPE_BF16:
        s = LLVMBuildTrunc(B, LLVMBuildLShr(B, bf16_bits(m, v), LLVMConstInt(m->i32, 16, 0), ""),
                           m->i16, "");
        break;
    case KF_DTYPE_BOOL:
        s = LLVMBuildZExt(B, v, m->i8, "");
        break;
    default:
        s = v;
        break;
    }
    LLVMValueRef p = LLVMBuildInBoundsGEP2(B, st, base, &off, 1, "");
    LLVMBuildStore(B, s, p);
}

LLVMValueRef lg_round(lg_mod *m, LLVMValueRef v, kf_dtype d) {
    LLVMBuilderRef B = m->B;
    if (d == KF_DTYPE_F16)
        return LLVMBuildFPExt(B, LLVMBuildFPTrunc(B, v, m->f16, ""), m->f32, "");
    if (d == KF_DTYPE_BF16)
        return LLVMBuildBitCast(B, bf16_bits(m, v), m->f32, "");
    return v;
}

LLVMValueRef lg_call_intrinsic(lg_mod *m, const char *name, LLVMTypeRef t, LLVMValueRef *args,
                               unsigned n) {
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMTypeRef ov[1] = {t};
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(m->M, id, ov, 1);
    LLVMTypeRef ft = LLVMIntrinsicGetType(m->C, id, ov, 1);
    return LLVMBuildCall2(m->B, ft, fn, args, n, "");
}

/* A call of libm function `name` (float version `name`f) on compute values. */
static LLVMValueRef libm(lg_mod *m, const char *name, LLVMValueRef *args, unsigned n) {
    LLVMTypeRef t = LLVMTypeOf(args[0]);
    char sym[32];
    snprintf(sym, sizeof sym, "%s%s", name, t == m->f32 ? "f" : "");
    LLVMTypeRef params[2] = {t, t};
    LLVMTypeRef ft = LLVMFunctionType(t, params, n, 0);
    LLVMValueRef fn = LLVMGetNamedFunction(m->M, sym);
    if (!fn) {
        fn = LLVMAddFunction(m->M, sym, ft);
        LLVMSetLinkage(fn, LLVMExternalLinkage);
    }
    return LLVMBuildCall2(m->B, ft, fn, args, n, "");
}

LLVMValueRef lg_exp(lg_mod *m, LLVMValueRef x) { return libm(m, "exp", &x, 1); }
LLVMValueRef lg_log(lg_mod *m, LLVMValueRef x) { return libm(m, "log", &x, 1); }

LLVMValueRef lg_fmax_nan(lg_mod *m, LLVMValueRef a, LLVMValueRef b) {
    LLVMBuilderRef B = m->B;
    LLVMValueRef uno = LLVMBuildFCmp(B, LLVMRealUNO, a, b, "");
    LLVMValueRef gt = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGT, a, b, ""), a, b, "");
    return LLVMBuildSelect(B, uno, LLVMBuildFAdd(B, a, b, ""), gt, "");
}

static LLVMValueRef fmin_nan(lg_mod *m, LLVMValueRef a, LLVMValueRef b) {
    LLVMBuilderRef B = m->B;
    LLVMValueRef uno = LLVMBuildFCmp(B, LLVMRealUNO, a, b, "");
    LLVMValueRef lt = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOLT, a, b, ""), a, b, "");
    return LLVMBuildSelect(B, uno, LLVMBuildFAdd(B, a, b, ""), lt, "");
}

LLVMValueRef lg_min_i64(lg_mod *m, LLVMValueRef a, LLVMValueRef b) {
    return LLVMBuildSelect(m->B, LLVMBuildICmp(m->B, LLVMIntSLT, a, b, ""), a, b, "");
}

LLVMValueRef lg_max_i64(lg_mod *m, LLVMValueRef a, LLVMValueRef b) {
    return LLVMBuildSelect(m->B, LLVMBuildICmp(m->B, LLVMIntSGT, a, b, ""), a, b, "");
}

LLVMValueRef lg_reassoc(LLVMValueRef inst) {
    if (LLVMCanValueUseFastMathFlags(inst))
        LLVMSetFastMathFlags(inst, LLVMFastMathAllowReassoc | LLVMFastMathAllowContract);
    return inst;
}

LLVMValueRef lg_offset(lg_mod *m, int rank, LLVMValueRef const *idx, const int64_t *strides) {
    LLVMValueRef off = lg_i64(m, 0);
    for (int d = 0; d < rank; d++) {
        if (strides[d] == 0)
            continue;
        LLVMValueRef t =
            strides[d] == 1 ? idx[d] : LLVMBuildNSWMul(m->B, idx[d], lg_i64(m, strides[d]), "");
        off = LLVMBuildNSWAdd(m->B, off, t, "");
    }
    return off;
}

void lg_unflatten(lg_mod *m, LLVMValueRef flat, int n, const int64_t *dims, LLVMValueRef *idx) {
    LLVMValueRef rest = flat;
    for (int d = n - 1; d >= 0; d--) {
        if (d == 0) {
            idx[d] = rest;
        } else if (dims[d] == 1) {
            idx[d] = lg_i64(m, 0);
        } else {
            idx[d] = LLVMBuildSRem(m->B, rest, lg_i64(m, dims[d]), "");
            rest = LLVMBuildSDiv(m->B, rest, lg_i64(m, dims[d]), "");
        }
    }
}

/* i64 value clamped into i32. */
static LLVMValueRef sat_i32(lg_mod *m, LLVMValueRef v64) {
    v64 = lg_max_i64(m, v64, lg_i64(m, INT32_MIN));
    v64 = lg_min_i64(m, v64, lg_i64(m, INT32_MAX));
    return LLVMBuildTrunc(m->B, v64, m->i32, "");
}

static bool is_floatish(kf_dtype d) { return kf_dtype_is_float(d); }

LLVMValueRef lg_convert(lg_mod *m, LLVMValueRef v, kf_dtype from, kf_dtype to) {
    LLVMBuilderRef B = m->B;
    LLVMTypeRef ft = LLVMTypeOf(v), tt = lg_ctype(m, to);
    if (is_floatish(to)) {
        if (is_floatish(from) || ft == m->f32 || ft == m->f64) {
            if (ft == tt)
                return v;
            return ft == m->f64 ? LLVMBuildFPTrunc(B, v, tt, "") : LLVMBuildFPExt(B, v, tt, "");
        }
        if (ft == m->i1)
            return LLVMBuildUIToFP(B, v, tt, "");
        return LLVMBuildSIToFP(B, v, tt, "");
    }
    if (to == KF_DTYPE_I32) {
        if (ft == m->i32)
            return v;
        if (ft == m->i1)
            return LLVMBuildZExt(B, v, m->i32, "");
        if (ft == m->i64)
            return sat_i32(m, v);
        LLVMValueRef args[1] = {v};
        unsigned id = LLVMLookupIntrinsicID("llvm.fptosi.sat", 15);
        LLVMTypeRef ov[2] = {m->i32, ft};
        LLVMValueRef fn = LLVMGetIntrinsicDeclaration(m->M, id, ov, 2);
        return LLVMBuildCall2(B, LLVMIntrinsicGetType(m->C, id, ov, 2), fn, args, 1, "");
    }
    /* bool */
    if (ft == m->i1)
        return v;
    if (ft == m->f32 || ft == m->f64)
        return LLVMBuildFCmp(B, LLVMRealUNE, v, LLVMConstNull(ft), "");
    return LLVMBuildICmp(B, LLVMIntNE, v, LLVMConstNull(ft), "");
}

/* ------------------------------------------------------------------------ */
/* One expression node                                                        */
/* ------------------------------------------------------------------------ */

static LLVMValueRef sigmoid(lg_mod *m, LLVMValueRef x) {
    LLVMBuilderRef B = m->B;
    LLVMTypeRef t = LLVMTypeOf(x);
    LLVMValueRef one = lg_fconst(t, 1.0);
    LLVMValueRef ax = lg_call_intrinsic(m, "llvm.fabs", t, &x, 1);
    LLVMValueRef e = lg_exp(m, LLVMBuildFNeg(B, ax, ""));
    LLVMValueRef den = LLVMBuildFAdd(B, one, e, "");
    LLVMValueRef pos = LLVMBuildFDiv(B, one, den, "");
    LLVMValueRef neg = LLVMBuildFDiv(B, e, den, "");
    return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOGE, x, LLVMConstNull(t), ""), pos, neg, "");
}

static LLVMValueRef emit_unary(lg_mod *m, kf_op op, kf_dtype dt, LLVMValueRef x) {
    LLVMBuilderRef B = m->B;
    LLVMTypeRef t = LLVMTypeOf(x);
    if (dt == KF_DTYPE_I32) {
        LLVMValueRef w = LLVMBuildSExt(B, x, m->i64, "");
        LLVMValueRef n = LLVMBuildNeg(B, w, "");
        if (op == KF_OP_NEG)
            return sat_i32(m, n);
        return sat_i32(m, lg_max_i64(m, w, n)); /* abs */
    }
    switch (op) {
    case KF_OP_NEG:
        return LLVMBuildFNeg(B, x, "");
    case KF_OP_ABS:
        return lg_call_intrinsic(m, "llvm.fabs", t, &x, 1);
    case KF_OP_EXP:
        return lg_exp(m, x);
    case KF_OP_LOG:
        return libm(m, "log", &x, 1);
    case KF_OP_SQRT:
        return lg_call_intrinsic(m, "llvm.sqrt", t, &x, 1);
    case KF_OP_RSQRT:
        return LLVMBuildFDiv(B, lg_fconst(t, 1.0), lg_call_intrinsic(m, "llvm.sqrt", t, &x, 1), "");
    case KF_OP_TANH:
        return libm(m, "tanh", &x, 1);
    case KF_OP_ERF:
        return libm(m, "erf", &x, 1);
    case KF_OP_SIN:
        return libm(m, "sin", &x, 1);
    case KF_OP_COS:
        return libm(m, "cos", &x, 1);
    case KF_OP_SIGMOID:
        return sigmoid(m, x);
    case KF_OP_RELU:
        return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUGT, x, LLVMConstNull(t), ""), x,
                               LLVMConstNull(t), "");
    case KF_OP_GELU: {
        /* In double, rounded once: the reference's formula and value. In
         * float, erfcf's last-bit error near 2 put gelu(x) one ulp off x
         * where the reference rounds to x itself (x around 5.5), and a random
         * graph's sqrt(gelu(x) - x) turned that into NaN against 0. */
        LLVMValueRef xd = t == m->f64 ? x : LLVMBuildFPExt(B, x, m->f64, "");
        LLVMValueRef a = LLVMBuildFMul(B, xd, lg_fconst(m->f64, -0.70710678118654752440), "");
        LLVMValueRef e = libm(m, "erfc", &a, 1);
        LLVMValueRef r = LLVMBuildFMul(B, LLVMBuildFMul(B, lg_fconst(m->f64, 0.5), xd, ""), e, "");
        return t == m->f64 ? r : LLVMBuildFPTrunc(B, r, t, "");
    }
    case KF_OP_GELU_TANH: {
        LLVMValueRef x3 = LLVMBuildFMul(B, LLVMBuildFMul(B, x, x, ""), x, "");
        LLVMValueRef u = LLVMBuildFAdd(B, x, LLVMBuildFMul(B, lg_fconst(t, 0.044715), x3, ""), "");
        u = LLVMBuildFMul(B, u, lg_fconst(t, 2.0 * 0.79788456080286535588), "");
        return LLVMBuildFMul(B, x, sigmoid(m, u), "");
    }
    case KF_OP_SILU:
        return LLVMBuildFMul(B, x, sigmoid(m, x), "");
    default:
        lg_fail(m, KF_ERR_INTERNAL, "codegen/llvm: %s is not a unary op", kf_op_get(op)->name);
        return LLVMGetUndef(t);
    }
}

static LLVMValueRef emit_binary(lg_mod *m, kf_op op, kf_dtype sdt, LLVMValueRef a, LLVMValueRef b) {
    LLVMBuilderRef B = m->B;
    if (kf_op_has(op, KF_TRAIT_COMPARE)) {
        if (is_floatish(sdt)) {
            LLVMRealPredicate p = op == KF_OP_EQ   ? LLVMRealOEQ
                                  : op == KF_OP_NE ? LLVMRealUNE
                                  : op == KF_OP_LT ? LLVMRealOLT
                                  : op == KF_OP_LE ? LLVMRealOLE
                                  : op == KF_OP_GT ? LLVMRealOGT
                                                   : LLVMRealOGE;
            return LLVMBuildFCmp(B, p, a, b, "");
        }
        LLVMIntPredicate p = op == KF_OP_EQ   ? LLVMIntEQ
                             : op == KF_OP_NE ? LLVMIntNE
                             : op == KF_OP_LT ? LLVMIntSLT
                             : op == KF_OP_LE ? LLVMIntSLE
                             : op == KF_OP_GT ? LLVMIntSGT
                                              : LLVMIntSGE;
        return LLVMBuildICmp(B, p, a, b, "");
    }
    if (sdt == KF_DTYPE_I32) {
        if (op == KF_OP_DIV) { /* a repeat's coordinate (kf_ir_scalar: truncating, x / 0 = 0) */
            LLVMValueRef zero = LLVMConstInt(m->i32, 0, 0);
            LLVMValueRef bz = LLVMBuildICmp(B, LLVMIntEQ, b, zero, "");
            LLVMValueRef d = LLVMBuildSelect(B, bz, LLVMConstInt(m->i32, 1, 0), b, "");
            return LLVMBuildSelect(B, bz, zero, LLVMBuildSDiv(B, a, d, ""), "");
        }
        if (op == KF_OP_MAX || op == KF_OP_MIN)
            return LLVMBuildSelect(
                B, LLVMBuildICmp(B, op == KF_OP_MAX ? LLVMIntSGT : LLVMIntSLT, a, b, ""), a, b, "");
        LLVMValueRef wa = LLVMBuildSExt(B, a, m->i64, ""), wb = LLVMBuildSExt(B, b, m->i64, "");
        LLVMValueRef r = op == KF_OP_ADD   ? LLVMBuildAdd(B, wa, wb, "")
                         : op == KF_OP_SUB ? LLVMBuildSub(B, wa, wb, "")
                                           : LLVMBuildMul(B, wa, wb, "");
        return sat_i32(m, r);
    }
    switch (op) {
    case KF_OP_ADD:
        return LLVMBuildFAdd(B, a, b, "");
    case KF_OP_SUB:
        return LLVMBuildFSub(B, a, b, "");
    case KF_OP_MUL:
        return LLVMBuildFMul(B, a, b, "");
    case KF_OP_DIV:
        return LLVMBuildFDiv(B, a, b, "");
    case KF_OP_MAX:
        return lg_fmax_nan(m, a, b);
    case KF_OP_MIN:
        return fmin_nan(m, a, b);
    case KF_OP_POW: {
        LLVMValueRef args[2] = {a, b};
        return libm(m, "pow", args, 2);
    }
    default:
        lg_fail(m, KF_ERR_INTERNAL, "codegen/llvm: %s is not a binary op", kf_op_get(op)->name);
        return a;
    }
}

static LLVMValueRef index_value(lg_mod *m, LLVMValueRef i64v, kf_dtype dt) {
    if (dt == KF_DTYPE_I32)
        return LLVMBuildTrunc(m->B, i64v, m->i32, "");
    return LLVMBuildSIToFP(m->B, i64v, lg_ctype(m, dt), "");
}

LLVMValueRef lg_expr(lg_fn *f, lg_point *pt, uint32_t n) {
    lg_mod *m = f->m;
    const kf_group *g = f->g;
    if (n == KF_NONE || n >= g->n_expr) {
        lg_fail(m, KF_ERR_INTERNAL, "codegen/llvm: group %u: bad expression node %u", g->id, n);
        return LLVMConstNull(m->f32);
    }
    if (pt->memo[n])
        return pt->memo[n];
    if (n == pt->seed && pt->seed_val)
        return pt->memo[n] = pt->seed_val;
    const kf_expr *e = &g->expr[n];
    LLVMBuilderRef B = m->B;
    LLVMValueRef v = NULL;
    bool round = e->tensor != KF_NONE;
    switch (e->kind) {
    case KF_EXPR_OP: {
        LLVMValueRef s[3] = {NULL, NULL, NULL};
        int ar = kf_form_arity(kf_op_get(e->op)->form);
        for (int k = 0; k < ar; k++)
            s[k] = lg_expr(f, pt, e->src[k]);
        kf_dtype sdt = ar > 0 ? g->expr[e->src[0]].dtype : e->dtype;
        if (e->op == KF_OP_CAST) {
            v = lg_convert(m, s[0], sdt, e->dtype);
        } else if (e->op == KF_OP_WHERE) {
            v = LLVMBuildSelect(B, s[0], s[1], s[2], "");
        } else if (ar == 1) {
            v = emit_unary(m, e->op, e->dtype, s[0]);
        } else if (ar == 2) {
            /* Operands may differ in compute type only when one is a
             * statistic in f32 and the node is f64 (never) -- unify anyway. */
            kf_dtype bdt = g->expr[e->src[1]].dtype;
            if (LLVMTypeOf(s[0]) != LLVMTypeOf(s[1]))
                s[1] = lg_convert(m, s[1], bdt, sdt);
            v = emit_binary(m, e->op, sdt, s[0], s[1]);
        } else {
            lg_fail(m, KF_ERR_UNSUPPORTED, "codegen/llvm: op %s in an expression",
                    kf_op_get(e->op)->name);
            v = LLVMConstNull(lg_ctype(m, e->dtype));
        }
        break;
    }
    case KF_EXPR_LOAD: {
        LLVMValueRef off = lg_offset(m, pt->rank, pt->idx, e->strides);
        if (e->offset)
            off = LLVMBuildNSWAdd(B, off, lg_i64(m, e->offset), "");
        for (int k = 0; k < 3 && e->src[k] != KF_NONE; k++) {
            /* a coordinate node (i32, within its axis) times its stride */
            LLVMValueRef c = LLVMBuildSExt(B, lg_expr(f, pt, e->src[k]), m->i64, "");
            off = LLVMBuildNSWAdd(B, off, LLVMBuildNSWMul(B, c, lg_i64(m, e->dyn_strides[k]), ""),
                                  "");
        }
        v = lg_load_elem(f, e->dtype, lg_buf(f, e->base), off);
        round = false;
        break;
    }
    case KF_EXPR_CONST:
        if (e->dtype == KF_DTYPE_I32)
            v = LLVMConstInt(m->i32, (unsigned long long)(long long)e->value, 1);
        else if (e->dtype == KF_DTYPE_BOOL)
            v = LLVMConstInt(m->i1, e->value != 0.0, 0);
        else
            v = lg_fconst(lg_ctype(m, e->dtype), e->value);
        round = false;
        break;
    case KF_EXPR_INDEX:
        v = index_value(m, e->axis < pt->rank ? pt->idx[e->axis] : lg_i64(m, 0), e->dtype);
        break;
    case KF_EXPR_ROW:
    case KF_EXPR_COL: {
        int a = pt->rank - (e->kind == KF_EXPR_ROW ? 2 : 1);
        v = index_value(m, a >= 0 ? pt->idx[a] : lg_i64(m, 0), e->dtype);
        break;
    }
    case KF_EXPR_BATCH:
    case KF_EXPR_HEAD:
    case KF_EXPR_Q_IDX:
    case KF_EXPR_KV_IDX: {
        int back = e->kind == KF_EXPR_BATCH   ? 4
                   : e->kind == KF_EXPR_HEAD  ? 3
                   : e->kind == KF_EXPR_Q_IDX ? 2
                                              : 1;
        int a = pt->rank - back;
        v = index_value(m, a >= 0 ? pt->idx[a] : lg_i64(m, 0), e->dtype);
        break;
    }
    case KF_EXPR_ACC:
        if (!pt->acc[e->anchor & 1]) {
            lg_fail(m, KF_ERR_INTERNAL, "codegen/llvm: group %u: ACC outside a GEMM tile", g->id);
            return LLVMConstNull(m->f32);
        }
        if (e->src[0] != KF_NONE) { /* the same head's column v(src[0]) */
            if (!pt->acc_head) {
                lg_fail(m, KF_ERR_INTERNAL,
                        "codegen/llvm: group %u: an in-head ACC outside a "
                        "head-split GEMM tile",
                        g->id);
                return LLVMConstNull(m->f32);
            }
            LLVMValueRef c = LLVMBuildSExt(B, lg_expr(f, pt, e->src[0]), m->i64, "");
            LLVMValueRef a = LLVMBuildLoad2(
                B, m->f32, LLVMBuildInBoundsGEP2(B, m->f32, pt->acc_head, &c, 1, ""), "");
            v = lg_convert(m, a, KF_DTYPE_F32, e->dtype);
            break;
        }
        v = lg_convert(m, pt->acc[e->anchor & 1], KF_DTYPE_F32, e->dtype);
        break;
    case KF_EXPR_SCORE:
        if (!pt->score) {
            lg_fail(m, KF_ERR_INTERNAL, "codegen/llvm: group %u: SCORE outside attention", g->id);
            return LLVMConstNull(m->f32);
        }
        v = lg_convert(m, pt->score, KF_DTYPE_F32, e->dtype);
        break;
    case KF_EXPR_STAT: {
        LLVMValueRef s = pt->stat[e->stat];
        if (!s) {
            lg_fail(m, KF_ERR_INTERNAL, "codegen/llvm: group %u: statistic %s not computed", g->id,
                    kf_stat_name(e->stat));
            return LLVMConstNull(m->f32);
        }
        v = lg_convert(m, s, KF_DTYPE_F32, e->dtype);
        break;
    }
    default:
        lg_fail(m, KF_ERR_UNSUPPORTED, "codegen/llvm: expression kind %s",
                kf_expr_kind_name(e->kind));
        return LLVMConstNull(m->f32);
    }
    if (round && kf_dtype_is_float(e->dtype))
        v = lg_round(m, v, e->dtype);
    return pt->memo[n] = v;
}

bool lg_point_init(lg_fn *f, lg_point *pt, int rank) {
    memset(pt, 0, sizeof *pt);
    pt->rank = rank;
    pt->seed = KF_NONE;
    size_t n = f->g->n_expr ? f->g->n_expr : 1;
    pt->memo = kf_mem_calloc(&f->m->graph->mem, n, sizeof *pt->memo); /* the context's hooks */
    if (!pt->memo) {
        lg_fail(f->m, KF_ERR_OUT_OF_MEMORY, "codegen/llvm: out of memory");
        return false;
    }
    return true;
}

void lg_point_reset(lg_fn *f, lg_point *pt) {
    memset(pt->memo, 0, (f->g->n_expr ? f->g->n_expr : 1) * sizeof *pt->memo);
}

void lg_point_done(lg_fn *f, lg_point *pt) {
    if (pt->memo)
        kf_mem_free(&f->m->graph->mem, pt->memo, (f->g->n_expr ? f->g->n_expr : 1) * sizeof *pt->memo);
    pt->memo = NULL;
}

void lg_store_writes(lg_fn *f, lg_point *pt) {
    const kf_group *g = f->g;
    const kf_graph *gr = f->m->graph;
    for (uint32_t i = 0; i < g->n_writes; i++) {
        uint32_t root = g->roots[i];
        if (root == KF_NONE || g->expr[root].space != KF_SPACE_OUT)
            continue;
        const kf_tensor *t = gr->nodes[g->writes[i]];
        int64_t st[KF_MAX_RANK] = {0};
        if (t->rank > pt->rank) {
            lg_fail(f->m, KF_ERR_UNSUPPORTED,
                    "codegen/llvm: group %u writes tensor %u of rank %d from a rank-%d space",
                    g->id, t->id, t->rank, pt->rank);
            return;
        }
        kf_ir_broadcast_strides(t, pt->rank, st);
        LLVMValueRef v = lg_expr(f, pt, root);
        v = lg_convert(f->m, v, g->expr[root].dtype, t->dtype);
        lg_store_elem(f, t->dtype, lg_buf(f, t->id), lg_offset(f->m, pt->rank, pt->idx, st), v);
    }
}

void lg_operand_layout(const kf_plan *plan, uint32_t t, uint32_t *base, int64_t *strides,
                       int64_t *offset) {
    const kf_tensor *x = plan->graph->nodes[t];
    uint32_t gi = plan->group_of ? plan->group_of[t] : KF_NONE;
    if (gi != KF_NONE && plan->groups[gi].kind == KF_GROUP_VIEW) {
        *base = plan->groups[gi].view_base;
        memcpy(strides, plan->groups[gi].view_strides, sizeof(int64_t) * KF_MAX_RANK);
        *offset = plan->groups[gi].view_offset;
        return;
    }
    *base = t;
    *offset = 0;
    int64_t acc = 1;
    for (int d = x->rank - 1; d >= 0; d--) {
        strides[d] = acc;
        acc *= x->dims[d];
    }
}

/* ------------------------------------------------------------------------ */
/* Row statistics                                                             */
/* ------------------------------------------------------------------------ */

/* The row's value at j: from the cache the first pass filled, else x_at. */
static LLVMValueRef row_x(lg_fn *f, LLVMTypeRef ct, lg_row_fn x_at, void *user, LLVMValueRef cache,
                          LLVMValueRef j) {
    LLVMBuilderRef B = f->m->B;
    return cache ? LLVMBuildLoad2(B, ct, LLVMBuildInBoundsGEP2(B, ct, cache, &j, 1, ""), "")
                 : x_at(f, user, j);
}

/* kf_ir_row_scale_exp of an f64 row, as an i64: the e by which the reference
 * scales a norm's row (2^-e) when its largest magnitude exceeds 2^500, else
 * 0. LLVM 14 has no frexp, so it is computed on the bits: the magnitudes'
 * bit patterns order as their values, NaNs are skipped (the reference's
 * `a > amax` skips them), an infinite maximum gives 0, and frexp's exponent
 * of a normal amax is its biased exponent minus 1022. */
static LLVMValueRef row_scale_exp(lg_fn *f, const kf_row_stage *rs, lg_row_fn x_at, void *user,
                                  LLVMValueRef cache) {
    lg_mod *m = f->m;
    LLVMBuilderRef B = m->B;
    LLVMValueRef inf = LLVMConstInt(m->i64, 0x7ff0000000000000ull, 0);
    LLVMValueRef vmax = lg_var(f, m->i64, "ramax");
    LLVMBuildStore(B, lg_i64(m, 0), vmax);
    lg_loop lp;
    LLVMValueRef j = lg_loop_begin(f, &lp, lg_i64(m, 0), lg_i64(m, rs->length), "scale");
    LLVMValueRef a = LLVMBuildBitCast(B, row_x(f, m->f64, x_at, user, cache, j), m->i64, "");
    a = LLVMBuildAnd(B, a, LLVMConstInt(m->i64, 0x7fffffffffffffffull, 0), "");
    a = LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntUGT, a, inf, ""), lg_i64(m, 0), a, "");
    LLVMValueRef cur = LLVMBuildLoad2(B, m->i64, vmax, "");
    LLVMBuildStore(B, LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntUGT, a, cur, ""), a, cur, ""),
                   vmax);
    lg_loop_end(f, &lp);
    LLVMValueRef amax = LLVMBuildLoad2(B, m->i64, vmax, "amax");
    LLVMValueRef big = LLVMBuildAnd(
        B, LLVMBuildICmp(B, LLVMIntUGT, amax, LLVMConstInt(m->i64, (500ull + 1023) << 52, 0), ""),
        LLVMBuildICmp(B, LLVMIntULT, amax, inf, ""), "");
    LLVMValueRef e =
        LLVMBuildSub(B, LLVMBuildLShr(B, amax, lg_i64(m, 52), ""), lg_i64(m, 1022), "");
    return LLVMBuildSelect(B, big, e, lg_i64(m, 0), "rexp");
}

/* 2^k for an i64 k the caller keeps within the normal exponents. */
static LLVMValueRef pow2(lg_mod *m, LLVMValueRef k) {
    LLVMValueRef bits =
        LLVMBuildShl(m->B, LLVMBuildAdd(m->B, k, lg_i64(m, 1023), ""), lg_i64(m, 52), "");
    return LLVMBuildBitCast(m->B, bits, m->f64, "");
}

/* 1 / denom scaled back by `down` (2^-e); 0 where the scaled row's denom is
 * 0 (a constant row whose eps underflowed), which the reference normalizes
 * to 0. (1 / denom) * 2^-e rounds once, as ldexp(1 / denom, -e) does. */
static LLVMValueRef scaled_rstd(lg_mod *m, LLVMValueRef var, LLVMValueRef down, const char *name) {
    LLVMBuilderRef B = m->B;
    LLVMValueRef denom = lg_call_intrinsic(m, "llvm.sqrt", m->f64, &var, 1);
    LLVMValueRef r =
        LLVMBuildFMul(B, LLVMBuildFDiv(B, lg_fconst(m->f64, 1.0), denom, ""), down, "");
    LLVMValueRef zero = lg_fconst(m->f64, 0.0);
    return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOEQ, denom, zero, ""), zero, r, name);
}

/* The centred pass's term for x: (x - mean)^2, with x - mean added to `vc`
 * (the sum that corrected_var takes out). */
static LLVMValueRef centred_term(lg_mod *m, LLVMTypeRef at, LLVMValueRef x, LLVMValueRef mean,
                                 LLVMValueRef vc) {
    LLVMBuilderRef B = m->B;
    LLVMValueRef c = LLVMBuildFSub(B, x, mean, "");
    LLVMValueRef term = LLVMBuildFMul(B, c, c, "");
    LLVMValueRef cc = LLVMBuildLoad2(B, at, vc, "");
    LLVMBuildStore(B, lg_reassoc(LLVMBuildFAdd(B, cc, c, "")), vc);
    return term;
}

/* The corrected two-pass form (Chan, Golub, LeVeque): sc = sum(x - mean) is
 * the rounding error of the first pass's mean; removing it makes a constant
 * row's centred values exactly 0, as in the reference. From r = sum((x -
 * mean)^2) and sc: corrects *mean and returns the variance r / L, before
 * eps. */
static LLVMValueRef corrected_var(lg_mod *m, LLVMValueRef r, LLVMValueRef sc, LLVMValueRef fL,
                                  LLVMValueRef *mean) {
    LLVMBuilderRef B = m->B;
    *mean = LLVMBuildFAdd(B, *mean, LLVMBuildFDiv(B, sc, fL, ""), "mean2");
    r = LLVMBuildFSub(B, r, LLVMBuildFDiv(B, LLVMBuildFMul(B, sc, sc, ""), fL, ""), "");
    r = lg_fmax_nan(m, r, LLVMConstNull(LLVMTypeOf(r)));
    return LLVMBuildFDiv(B, r, fL, "");
}

/* RSTD (with the MEAN it centres on) and RMS_RSTD of an f64 row that
 * row_scale_exp scales by 2^-e (e != 0), as ir/eval.c defines the norms: the
 * same sums as lg_row_stats over x * 2^-e, eps * 2^-2e, and the statistics
 * back in the row's units (rstd * 2^-e, mean * 2^e) for the epilogue's
 * (x - mean) * rstd. Every scaling is by a power of two, so exact but for
 * the underflow the reference's ldexp has too. Sets stat[RSTD], stat[MEAN]
 * (when centred) and stat[RMS_RSTD] as rs->stats asks. */
static void scaled_norm_stats(lg_fn *f, const kf_row_stage *rs, lg_row_fn x_at, void *user,
                              LLVMValueRef cache, LLVMValueRef e, LLVMValueRef *stat) {
    lg_mod *m = f->m;
    LLVMBuilderRef B = m->B;
    LLVMTypeRef at = m->f64;
    bool centred = rs->stats & (1u << KF_STAT_RSTD);
    bool plain = rs->stats & (1u << KF_STAT_RMS_RSTD);
    /* e is in (500, 1024]: 2^-e may be subnormal and 2^e overflow, so each is
     * a product of two normal powers of two, 2^(512-e) and 2^(e-512). */
    LLVMValueRef down = LLVMBuildFMul(B, pow2(m, LLVMBuildSub(B, lg_i64(m, 512), e, "")),
                                      lg_fconst(at, 0x1p-512), "down");
    /* eps * 2^-2e rounded once, as ldexp(eps, -2e): eps * 2^-e is exact
     * unless below 2^-1022, and then both forms round to 0 (e > 500). */
    LLVMValueRef eps =
        LLVMBuildFMul(B, LLVMBuildFMul(B, lg_fconst(at, rs->eps), down, ""), down, "eps");
    LLVMValueRef L = lg_i64(m, rs->length), fL = lg_fconst(at, (double)rs->length);
    LLVMValueRef vsum = lg_var(f, at, "ssum"), vsq = lg_var(f, at, "ssq");
    LLVMBuildStore(B, LLVMConstNull(at), vsum);
    LLVMBuildStore(B, LLVMConstNull(at), vsq);
    lg_loop lp;
    LLVMValueRef j = lg_loop_begin(f, &lp, lg_i64(m, 0), L, "sstat1");
    LLVMValueRef xs = LLVMBuildFMul(B, row_x(f, at, x_at, user, cache, j), down, "");
    if (centred) {
        LLVMValueRef cur = LLVMBuildLoad2(B, at, vsum, "");
        LLVMBuildStore(B, lg_reassoc(LLVMBuildFAdd(B, cur, xs, "")), vsum);
    }
    if (plain) {
        LLVMValueRef cur = LLVMBuildLoad2(B, at, vsq, "");
        LLVMValueRef sq = LLVMBuildFMul(B, xs, xs, "");
        LLVMBuildStore(B, lg_reassoc(LLVMBuildFAdd(B, cur, sq, "")), vsq);
    }
    lg_loop_end(f, &lp);
    if (plain) {
        LLVMValueRef ms = LLVMBuildFDiv(B, LLVMBuildLoad2(B, at, vsq, ""), fL, "");
        stat[KF_STAT_RMS_RSTD] = scaled_rstd(m, LLVMBuildFAdd(B, ms, eps, ""), down, "srrstd");
    }
    if (!centred)
        return;
    /* The corrected two-pass form of lg_row_stats, in the scaled units. */
    LLVMValueRef mean = LLVMBuildFDiv(B, LLVMBuildLoad2(B, at, vsum, ""), fL, "smean");
    LLVMValueRef v2 = lg_var(f, at, "ssum2"), vc = lg_var(f, at, "ssumc");
    LLVMBuildStore(B, LLVMConstNull(at), v2);
    LLVMBuildStore(B, LLVMConstNull(at), vc);
    lg_loop lp2;
    LLVMValueRef j2 = lg_loop_begin(f, &lp2, lg_i64(m, 0), L, "sstat2");
    LLVMValueRef xs2 = LLVMBuildFMul(B, row_x(f, at, x_at, user, cache, j2), down, "");
    LLVMValueRef term = centred_term(m, at, xs2, mean, vc);
    LLVMValueRef cur = LLVMBuildLoad2(B, at, v2, "");
    LLVMBuildStore(B, lg_reassoc(LLVMBuildFAdd(B, cur, term, "")), v2);
    lg_loop_end(f, &lp2);
    LLVMValueRef r = LLVMBuildLoad2(B, at, v2, "");
    LLVMValueRef var = corrected_var(m, r, LLVMBuildLoad2(B, at, vc, ""), fL, &mean);
    LLVMValueRef up = pow2(m, LLVMBuildSub(B, e, lg_i64(m, 512), ""));
    stat[KF_STAT_MEAN] =
        LLVMBuildFMul(B, LLVMBuildFMul(B, mean, up, ""), lg_fconst(at, 0x1p512), "smean2");
    stat[KF_STAT_RSTD] = scaled_rstd(m, LLVMBuildFAdd(B, var, eps, ""), down, "srstd");
}

static void row_stats(lg_fn *f, const kf_row_stage *rs, kf_dtype xdt, LLVMTypeRef at,
                      lg_row_fn x_at, void *user, LLVMValueRef cache, lg_point *pt) {
    lg_mod *m = f->m;
    LLVMBuilderRef B = m->B;
    bool is_int = xdt == KF_DTYPE_I32;
    LLVMTypeRef ct = lg_ctype(m, xdt);
    unsigned s = rs->stats;
    bool need_max = s & (1u << KF_STAT_MAX | 1u << KF_STAT_SUMEXP);
    bool need_sum = s & (1u << KF_STAT_SUM | 1u << KF_STAT_MEAN | 1u << KF_STAT_RSTD);
    bool need_sq = s & (1u << KF_STAT_RMS_RSTD);
    bool need_arg = s & (1u << KF_STAT_ARGMAX);
    bool pass2 = s & (1u << KF_STAT_SUMEXP | 1u << KF_STAT_RSTD);
    LLVMValueRef L = lg_i64(m, rs->length);
    LLVMTypeRef mt = is_int ? m->i32 : at;
    LLVMValueRef vmax = lg_var(f, mt, "rmax"), vsum = lg_var(f, at, "rsum"),
                 vsq = lg_var(f, at, "rsq");
    LLVMBuildStore(B,
                   is_int ? LLVMConstInt(m->i32, (unsigned long long)INT32_MIN, 1)
                          : lg_fconst(at, -INFINITY),
                   vmax);
    LLVMBuildStore(B, LLVMConstNull(at), vsum);
    LLVMBuildStore(B, LLVMConstNull(at), vsq);
    /* argmax: the best value so far (from -inf, or INT32_MIN) and its index */
    LLVMValueRef vbest = NULL, varg = NULL;
    if (need_arg) {
        vbest = lg_var(f, mt, "rbest");
        varg = lg_var(f, m->i64, "rarg");
        LLVMBuildStore(B,
                       is_int ? LLVMConstInt(m->i32, (unsigned long long)INT32_MIN, 1)
                              : lg_fconst(at, -INFINITY),
                       vbest);
        LLVMBuildStore(B, lg_i64(m, 0), varg);
    }
    lg_loop lp;
    LLVMValueRef j = lg_loop_begin(f, &lp, lg_i64(m, 0), L, "stat1");
    LLVMValueRef x = x_at(f, user, j);
    if (cache)
        LLVMBuildStore(B, x, LLVMBuildInBoundsGEP2(B, ct, cache, &j, 1, ""));
    LLVMValueRef xa = is_int ? LLVMBuildSExt(B, x, m->i64, "")
                             : lg_convert(m, x, xdt, at == m->f64 ? KF_DTYPE_F64 : KF_DTYPE_F32);
    if (need_max) {
        LLVMValueRef cur = LLVMBuildLoad2(B, mt, vmax, "");
        LLVMValueRef nx =
            is_int ? LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSGT, x, cur, ""), x, cur, "")
                   : lg_fmax_nan(m, cur, xa);
        LLVMBuildStore(B, nx, vmax);
    }
    if (need_arg) {
        /* Moves on a greater value, or the first NaN; never past a NaN: the
         * reference's first NaN, else its first maximum. */
        LLVMValueRef best = LLVMBuildLoad2(B, mt, vbest, "");
        LLVMValueRef up;
        if (is_int) {
            up = LLVMBuildICmp(B, LLVMIntSGT, x, best, "");
        } else {
            LLVMValueRef gt = LLVMBuildFCmp(B, LLVMRealOGT, xa, best, "");
            LLVMValueRef xnan = LLVMBuildFCmp(B, LLVMRealUNO, xa, xa, "");
            LLVMValueRef bok = LLVMBuildFCmp(B, LLVMRealORD, best, best, "");
            up = LLVMBuildAnd(B, bok, LLVMBuildOr(B, gt, xnan, ""), "");
        }
        LLVMBuildStore(B, LLVMBuildSelect(B, up, is_int ? x : xa, best, ""), vbest);
        LLVMBuildStore(B, LLVMBuildSelect(B, up, j, LLVMBuildLoad2(B, m->i64, varg, ""), ""), varg);
    }
    if (need_sum) {
        LLVMValueRef cur = LLVMBuildLoad2(B, at, vsum, "");
        LLVMBuildStore(
            B, is_int ? LLVMBuildAdd(B, cur, xa, "") : lg_reassoc(LLVMBuildFAdd(B, cur, xa, "")),
            vsum);
    }
    if (need_sq && !is_int) {
        LLVMValueRef cur = LLVMBuildLoad2(B, at, vsq, "");
        LLVMValueRef sq = lg_reassoc(LLVMBuildFMul(B, xa, xa, ""));
        LLVMBuildStore(B, lg_reassoc(LLVMBuildFAdd(B, cur, sq, "")), vsq);
    }
    lg_loop_end(f, &lp);
    /* f64 norms: a row beyond 2^500 takes the scaled form the reference
     * defines (scaled_norm_stats), whose squares cannot overflow; every other
     * row the code below, unchanged. f32/f16/bf16 rows never exceed 2^128. */
    bool scalable = xdt == KF_DTYPE_F64 && (s & (1u << KF_STAT_RSTD | 1u << KF_STAT_RMS_RSTD));
    LLVMValueRef e = NULL;
    LLVMBasicBlockRef scaled = NULL, join = NULL;
    if (scalable) {
        KF_ASSERT(!(s & (1u << KF_STAT_SUMEXP))); /* pass 2 is one or the other */
        e = row_scale_exp(f, rs, x_at, user, cache);
        scaled = LLVMAppendBasicBlockInContext(m->C, f->fn, "scaled");
        LLVMBasicBlockRef plain = LLVMAppendBasicBlockInContext(m->C, f->fn, "unscaled");
        join = LLVMAppendBasicBlockInContext(m->C, f->fn, "stats");
        LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntNE, e, lg_i64(m, 0), ""), scaled, plain);
        LLVMPositionBuilderAtEnd(B, plain);
    }
    LLVMValueRef fL = is_int ? NULL : lg_fconst(at, (double)rs->length);
    if (need_max)
        pt->stat[KF_STAT_MAX] = LLVMBuildLoad2(B, mt, vmax, "max");
    if (need_arg)
        pt->stat[KF_STAT_ARGMAX] = LLVMBuildLoad2(B, m->i64, varg, "argmax"); /* i64: saturates */
    if (need_sum) {
        LLVMValueRef sum = LLVMBuildLoad2(B, at, vsum, "sum");
        pt->stat[KF_STAT_SUM] = sum;
        if (!is_int)
            pt->stat[KF_STAT_MEAN] = LLVMBuildFDiv(B, sum, fL, "mean");
    }
    if (need_sq && !is_int) {
        LLVMValueRef ms = LLVMBuildFDiv(B, LLVMBuildLoad2(B, at, vsq, ""), fL, "");
        ms = LLVMBuildFAdd(B, ms, lg_fconst(at, rs->eps), "");
        pt->stat[KF_STAT_RMS_RSTD] = LLVMBuildFDiv(
            B, lg_fconst(at, 1.0), lg_call_intrinsic(m, "llvm.sqrt", at, &ms, 1), "rrstd");
    }
    if (pass2 && !is_int) {
        LLVMValueRef v2 = lg_var(f, at, "rsum2"), vc = lg_var(f, at, "rsumc");
        LLVMBuildStore(B, LLVMConstNull(at), v2);
        LLVMBuildStore(B, LLVMConstNull(at), vc);
        lg_loop lp2;
        LLVMValueRef j2 = lg_loop_begin(f, &lp2, lg_i64(m, 0), L, "stat2");
        LLVMValueRef x2 =
            cache ? LLVMBuildLoad2(B, ct, LLVMBuildInBoundsGEP2(B, ct, cache, &j2, 1, ""), "")
                  : x_at(f, user, j2);
        x2 = lg_convert(m, x2, xdt, at == m->f64 ? KF_DTYPE_F64 : KF_DTYPE_F32);
        LLVMValueRef term;
        if (s & (1u << KF_STAT_SUMEXP)) {
            term = lg_exp(m, LLVMBuildFSub(B, x2, pt->stat[KF_STAT_MAX], ""));
        } else {
            term = centred_term(m, at, x2, pt->stat[KF_STAT_MEAN], vc);
        }
        LLVMValueRef cur = LLVMBuildLoad2(B, at, v2, "");
        LLVMBuildStore(B, lg_reassoc(LLVMBuildFAdd(B, cur, term, "")), v2);
        lg_loop_end(f, &lp2);
        LLVMValueRef r = LLVMBuildLoad2(B, at, v2, "");
        if (s & (1u << KF_STAT_SUMEXP)) {
            pt->stat[KF_STAT_SUMEXP] = r;
        } else {
            LLVMValueRef var = corrected_var(m, r, LLVMBuildLoad2(B, at, vc, ""), fL,
                                             &pt->stat[KF_STAT_MEAN]);
            var = LLVMBuildFAdd(B, var, lg_fconst(at, rs->eps), "");
            pt->stat[KF_STAT_RSTD] = LLVMBuildFDiv(
                B, lg_fconst(at, 1.0), lg_call_intrinsic(m, "llvm.sqrt", at, &var, 1), "rstd");
        }
    }
    if (!scalable)
        return;
    LLVMBasicBlockRef plain_end = LLVMGetInsertBlock(B);
    LLVMBuildBr(B, join);
    LLVMPositionBuilderAtEnd(B, scaled);
    LLVMValueRef sst[KF_STAT_COUNT] = {NULL};
    scaled_norm_stats(f, rs, x_at, user, cache, e, sst);
    if (need_max)
        sst[KF_STAT_MAX] = LLVMBuildLoad2(B, mt, vmax, "");
    if (need_sum) {
        sst[KF_STAT_SUM] = LLVMBuildLoad2(B, at, vsum, "");
        if (!sst[KF_STAT_MEAN])
            sst[KF_STAT_MEAN] = LLVMBuildFDiv(B, sst[KF_STAT_SUM], fL, "");
    }
    LLVMBasicBlockRef scaled_end = LLVMGetInsertBlock(B);
    LLVMBuildBr(B, join);
    LLVMPositionBuilderAtEnd(B, join);
    for (int k = 0; k < KF_STAT_COUNT; k++) {
        if (!sst[k])
            continue;
        KF_ASSERT(pt->stat[k]);
        LLVMValueRef phi = LLVMBuildPhi(B, LLVMTypeOf(pt->stat[k]), "");
        LLVMAddIncoming(phi, &pt->stat[k], &plain_end, 1);
        LLVMAddIncoming(phi, &sst[k], &scaled_end, 1);
        pt->stat[k] = phi;
    }
}

/* The row statistics in the accumulator type of xdt. An f32 or bf16 norm's
 * statistics are accumulated in f64 and rounded to f32 once: such a row may
 * hold values up to 2^128 (bf16 has f32's exponent range), whose squares
 * overflow f32 (a row near 1e21, an exp() upstream, normalized to inf/NaN or
 * garbage where the reference, in double, gives the right answer; bf16 rows
 * did so until the GPU's test of them found it). f16 rows cannot (65504^2
 * over any row that fits in memory stays below 2^128). Other f32 statistics
 * (max, sums, softmax) stay in f32. */
void lg_row_stats(lg_fn *f, const kf_row_stage *rs, kf_dtype xdt, lg_row_fn x_at, void *user,
                  LLVMValueRef cache, lg_point *pt) {
    lg_mod *m = f->m;
    bool norm = rs->stats & (1u << KF_STAT_RSTD | 1u << KF_STAT_RMS_RSTD);
    bool widen = (xdt == KF_DTYPE_F32 || xdt == KF_DTYPE_BF16) && norm;
    LLVMTypeRef at = xdt == KF_DTYPE_I32 ? m->i64 : widen ? m->f64 : lg_acc_type(m, xdt);
    row_stats(f, rs, xdt, at, x_at, user, cache, pt);
    if (!widen)
        return;
    for (int k = 0; k < KF_STAT_COUNT; k++) {
        if (pt->stat[k] && LLVMTypeOf(pt->stat[k]) == m->f64)
            pt->stat[k] = LLVMBuildFPTrunc(m->B, pt->stat[k], m->f32, "");
    }
}
