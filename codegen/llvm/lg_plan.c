/*
 * lg_plan.c -- kf_llvm_emit_plan: one LLVM function per kernel group of a
 * plan, named after the group ("<group name>_g<id>"), each with an entry
 * block that holds the allocas and the buffer loads and a body emitted by the
 * group kind's file.
 */
#include <ctype.h>
#include <stdio.h>

#include "codegen/llvm/lg.h"

static void add_attr(lg_mod *m, LLVMValueRef fn, const char *name) {
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(m->C, kind, 0));
}

static void emit_group(lg_mod *m, const kf_group *g, kf_cpu_kernel *k, LLVMValueRef *bufptr,
                       uint32_t *bufptr_set) {
    memset(k, 0, sizeof *k);
    if (!g->is_kernel || g->kind == KF_GROUP_VIEW)
        return;
    k->present = true;
    size_t n = 0;
    for (const char *c = g->name; *c && n < sizeof k->symbol - 16; c++)
        k->symbol[n++] = isalnum((unsigned char)*c) ? *c : '_';
    snprintf(k->symbol + n, sizeof k->symbol - n, "_g%u", g->id);

    lg_fn f;
    memset(&f, 0, sizeof f);
    f.m = m;
    f.g = g;
    f.k = k;
    f.bufptr = bufptr; /* all NULL: each group clears what it set */
    f.bufptr_set = bufptr_set;
    f.fn = LLVMAddFunction(m->M, k->symbol, m->kernel_t);
    add_attr(m, f.fn, "nounwind");
    /* The scratch area is the calling thread's alone: nothing else points into it. */
    unsigned na = LLVMGetEnumAttributeKindForName("noalias", 7);
    LLVMAddAttributeAtIndex(f.fn, 4, LLVMCreateEnumAttribute(m->C, na, 0));
    f.bufs = LLVMGetParam(f.fn, 0);
    f.begin = LLVMGetParam(f.fn, 1);
    f.end = LLVMGetParam(f.fn, 2);
    f.scratch = LLVMGetParam(f.fn, 3);
    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(m->C, f.fn, "entry");
    LLVMBasicBlockRef start = LLVMAppendBasicBlockInContext(m->C, f.fn, "start");
    f.alloca_b = LLVMCreateBuilderInContext(m->C);
    LLVMPositionBuilderAtEnd(f.alloca_b, entry);
    LLVMPositionBuilderAtEnd(m->B, start);
    switch (g->kind) {
    case KF_GROUP_ELEMENTWISE:
    case KF_GROUP_LAYOUT:
        lg_emit_elementwise(&f);
        break;
    case KF_GROUP_ROWWISE:
    case KF_GROUP_COLREDUCE:
        lg_emit_row(&f);
        break;
    case KF_GROUP_GEMM:
        lg_emit_gemm(&f);
        break;
    case KF_GROUP_ATTENTION:
        lg_emit_attention(&f);
        break;
    default:
        lg_fail(m, KF_ERR_UNSUPPORTED, "codegen/llvm: group kind %s", kf_group_kind_name(g->kind));
        break;
    }
    LLVMBuildRetVoid(m->B);
    LLVMBuildBr(f.alloca_b, start);
    LLVMDisposeBuilder(f.alloca_b);
    for (uint32_t i = 0; i < f.n_bufptr_set; i++)
        bufptr[f.bufptr_set[i]] = NULL;
}

kf_status kf_llvm_emit_plan(const kf_plan *plan, LLVMModuleRef mod, kf_cpu_kernel *kernels,
                            char *err) {
    lg_mod m;
    memset(&m, 0, sizeof m);
    m.C = LLVMGetModuleContext(mod);
    m.M = mod;
    m.plan = plan;
    m.graph = plan->graph;
    m.err = err;
    err[0] = '\0';
    m.i1 = LLVMInt1TypeInContext(m.C);
    m.i8 = LLVMInt8TypeInContext(m.C);
    m.i16 = LLVMInt16TypeInContext(m.C);
    m.i32 = LLVMInt32TypeInContext(m.C);
    m.i64 = LLVMInt64TypeInContext(m.C);
    m.f16 = LLVMHalfTypeInContext(m.C);
    m.f32 = LLVMFloatTypeInContext(m.C);
    m.f64 = LLVMDoubleTypeInContext(m.C);
    m.ptr = LLVMPointerTypeInContext(m.C, 0);
    m.void_t = LLVMVoidTypeInContext(m.C);
    LLVMTypeRef params[4] = {m.ptr, m.i64, m.i64, m.ptr};
    m.kernel_t = LLVMFunctionType(m.void_t, params, 4, 0);
    m.B = LLVMCreateBuilderInContext(m.C);
    size_t nb = plan->graph->n_nodes ? plan->graph->n_nodes : 1;
    LLVMValueRef *bufptr = kf_mem_calloc(&plan->graph->mem, nb, sizeof *bufptr); /* ctx hooks */
    uint32_t *bufptr_set = kf_mem_alloc(&plan->graph->mem, nb * sizeof *bufptr_set);
    if (!bufptr || !bufptr_set) {
        kf_mem_free(&plan->graph->mem, bufptr, nb * sizeof *bufptr);
        kf_mem_free(&plan->graph->mem, bufptr_set, nb * sizeof *bufptr_set);
        LLVMDisposeBuilder(m.B);
        snprintf(err, KF_MSG_MAX, "codegen/llvm: out of memory");
        return KF_ERR_OUT_OF_MEMORY;
    }
    for (uint32_t i = 0; i < plan->n_groups && m.st == KF_OK; i++)
        emit_group(&m, &plan->groups[i], &kernels[i], bufptr, bufptr_set);
    kf_mem_free(&plan->graph->mem, bufptr, nb * sizeof *bufptr);
    kf_mem_free(&plan->graph->mem, bufptr_set, nb * sizeof *bufptr_set);
    LLVMDisposeBuilder(m.B);
    return m.st;
}
