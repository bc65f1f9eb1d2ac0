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

#endif /* KF_FRONTEND_COMPILE_H */
