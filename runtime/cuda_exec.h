/*
 * cuda_exec.h -- a plan executed on a CUDA device (the CUDA target of
 * kf_compile / kf_program_run).
 *
 *   kf_cuda_exec_create:  open the device -> per group, the steps that run it
 *     (generated kernels from codegen/cuda, cuBLASLt GEMMs, the attention
 *     fallback) -> device buffers laid out by liveness in one arena -> every
 *     kernel's CUBIN through the disk cache (NVRTC on a miss) and loaded ->
 *     constants uploaded, launch arguments bound once.
 *   kf_cuda_exec_run:     host inputs -> device, every step on the stream,
 *     outputs -> host.
 *
 * What runs where (kf_cuda_exec_report says it per group, with the reason):
 *   ELEMENTWISE, ROWWISE, COLREDUCE, LAYOUT  one generated kernel each.
 *   VIEW       nothing: consumers read the base's buffer through strides.
 *   GEMM       cuBLASLt. When the group's epilogue is exactly cuBLASLt's
 *              act(A.B + C + bias) with act in {none, relu, gelu_tanh}, C a
 *              contiguous residual and bias a row vector (in any order of the
 *              adds), cuBLASLt applies it and writes the output; otherwise
 *              cuBLASLt writes the longest such prefix into a scratch buffer
 *              and one generated kernel computes the rest (and a norm
 *              prologue on A runs as a generated kernel before). kfuse's
 *              gelu is the erf form, which cuBLASLt's GELU is not: it goes to
 *              the kernel.
 *   ATTENTION  unfused: Q.K^T by cuBLASLt into a scores buffer, a generated
 *              row-wise softmax whose prologue is the score expression and
 *              mask, P.V by cuBLASLt.
 *
 * Bindings are HOST pointers (kf_program_run's contract): every run copies
 * the inputs to the device and the outputs back, synchronously. Device-pointer
 * bindings are left to a later issue; the bench times the device work alone
 * through kf_cuda_exec_launch.
 */
#ifndef KF_RUNTIME_CUDA_EXEC_H
#define KF_RUNTIME_CUDA_EXEC_H

#include <stdbool.h>
#include <stdio.h>

#include "fusion/fusion.h"
#include "runtime/cuda.h"

typedef struct kf_cuda_exec kf_cuda_exec;

/* Whether the context can reach a CUDA device (loads the driver once). */
bool kf_cuda_exec_available(kf_ctx *ctx);

/* Prepares `plan` (which must outlive the exec) on the context's device.
 * Errors (message in err, KF_MSG_MAX): KF_ERR_UNSUPPORTED (no driver or
 * device, a construct the codegen or cuBLASLt cannot run: the message names
 * the group), KF_ERR_NOT_FOUND (a cache miss under KF_FLAG_CACHE_FAIL_ON_MISS,
 * naming the kernel), KF_ERR_INVALID_ARGUMENT (an NVRTC compile failure,
 * naming the kernel), KF_ERR_OUT_OF_MEMORY (host or device), KF_ERR_INTERNAL
 * (the driver's message and the kernel's name). */
kf_status kf_cuda_exec_create(kf_ctx *ctx, const kf_plan *plan, kf_cuda_exec **out, char *err);
void kf_cuda_exec_destroy(kf_cuda_exec *ex);

/* Runs the plan once. bound[t] (graph->n_nodes entries) is a host pointer for
 * every graph input t (read) and may be one for a graph output t (written);
 * sizes were checked by the caller. `stream` is a CUstream or NULL (the
 * exec's own). Returns when the outputs are on the host. */
kf_status kf_cuda_exec_run(kf_cuda_exec *ex, void *const *bound, void *stream, char *err);

/* Copies tensor t's device buffer (an output, input or anything materialized)
 * to `dst` (`bytes`). KF_ERR_NOT_FOUND when t has no buffer. */
kf_status kf_cuda_exec_copy_out(kf_cuda_exec *ex, uint32_t t, void *dst, size_t bytes, char *err);

/* For the bench: uploads host data into input t's device buffer once. */
kf_status kf_cuda_exec_set_input(kf_cuda_exec *ex, uint32_t t, const void *src, size_t bytes,
                                 char *err);
/* For the bench: enqueues every step on `stream` (NULL: the exec's) without
 * any copy or synchronization. */
kf_status kf_cuda_exec_launch(kf_cuda_exec *ex, void *stream, char *err);
/* The number of device launches one kf_cuda_exec_launch makes (kernels and
 * cuBLASLt calls), the exec's stream and its device. */
size_t kf_cuda_exec_launch_count(const kf_cuda_exec *ex);
void *kf_cuda_exec_stream(const kf_cuda_exec *ex);
const kf_cuda_device *kf_cuda_exec_device(const kf_cuda_exec *ex);
/* Kernels compiled by this exec (cache misses) and loaded from the cache. */
void kf_cuda_exec_cache_stats(const kf_cuda_exec *ex, unsigned *compiled, unsigned *hits);
/* Device bytes in the arena (intermediates reused by liveness) and what they
 * would take without reuse. */
void kf_cuda_exec_arena_stats(const kf_cuda_exec *ex, size_t *arena, size_t *unshared);

/* One line per group: what runs where and why; then the arena. */
void kf_cuda_exec_report(const kf_cuda_exec *ex, FILE *out);

#endif /* KF_RUNTIME_CUDA_EXEC_H */
