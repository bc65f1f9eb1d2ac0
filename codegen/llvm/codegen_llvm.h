/*
 * codegen_llvm.h -- lowers a fusion plan to LLVM IR through the LLVM-C API:
 * one function per kernel group, all in one module. runtime/cpu compiles the
 * module (ORC LLJIT) and calls the functions; nothing here runs code.
 *
 * Every kernel function has the same signature,
 *
 *     void KERNEL(void **bufs, int64_t begin, int64_t end, void *scratch)
 *
 * bufs[t] is the buffer of graph tensor t (inputs, constants, materialized
 * intermediates and outputs, in storage format, row-major), [begin, end) a
 * slice of the kernel's parallel outer loop (kf_cpu_kernel.outer iterations
 * in all) and scratch a private area of kf_cpu_kernel.scratch bytes (64-byte
 * aligned) for the calling thread. Slices are independent: any split of
 * [0, outer) across threads computes the same bytes.
 */
#ifndef KF_CODEGEN_LLVM_H
#define KF_CODEGEN_LLVM_H

#include <llvm-c/Core.h>

#include "fusion/fusion.h"

/* Bumped whenever the generated code changes for the same plan (cache key). */
#define KF_LLVM_CODEGEN_VERSION 5

typedef struct kf_cpu_kernel {
    bool present;     /* false for VIEW groups: no code */
    char symbol[160]; /* the function's name in the module: "<group name>_g<id>" */
    int64_t outer;    /* iterations of the parallel outer loop */
    size_t scratch;   /* bytes of per-thread scratch */
    double cost;      /* rough element-operations per outer iteration (threading grain) */
} kf_cpu_kernel;

/* Emits every kernel group of `plan` into `mod` (whose context is used) and
 * fills kernels[0 .. plan->n_groups). Deterministic: the same plan gives the
 * same IR text. On failure returns KF_ERR_UNSUPPORTED (a group shape the
 * backend does not handle) or KF_ERR_INTERNAL with a message in `err`
 * (KF_MSG_MAX bytes); the module is then unusable. */
kf_status kf_llvm_emit_plan(const kf_plan *plan, LLVMModuleRef mod, kf_cpu_kernel *kernels,
                            char *err);

#endif /* KF_CODEGEN_LLVM_H */
