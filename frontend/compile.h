/*
 * compile.h -- the frontend's internal compile helpers (frontend/compile.c),
 * for the bench and the tests that drive an executor without a kf_program.
 */
#ifndef KF_FRONTEND_COMPILE_H
#define KF_FRONTEND_COMPILE_H

#include "fusion/fusion.h"
#include "runtime/cuda_exec.h"

/* A plan on the context's CUDA device: the device opened (its target), the
 * recipes made for that target (codegen/cuda), the executor prepared to run
 * them. This is the one place where the recipes meet the executor. Errors
 * as kf_cuda_exec_open / kf_cuda_recipes_create / kf_cuda_exec_prepare. */
kf_status kf_cuda_exec_build(kf_ctx *ctx, const kf_plan *plan, kf_cuda_exec **out, char *err);

/* The plan options a context's flags ask for (KF_FLAG_DEBUG_PASSES,
 * KF_FLAG_SPLIT_ROW_NORMS, KF_FLAG_GEMM_HEAD_EPILOGUE), the rest at their
 * defaults: the one rule kf_compile, kf_aot, the CLI's aot and report and
 * the bench plan by, so a cache filled ahead of time holds the kernels a
 * program asks for. */
void kf_plan_options_for_flags(unsigned flags, kf_plan_options *popt);

#endif /* KF_FRONTEND_COMPILE_H */
