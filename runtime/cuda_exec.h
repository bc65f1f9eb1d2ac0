/*
 * cuda_exec.h -- a plan's recipes executed on a CUDA device (the CUDA target
 * of kf_compile / kf_program_run).
 *
 *   kf_cuda_exec_open:     open the device, a stream and the cache; say the
 *     target (arch, SM count, flags) the recipes must be made for.
 *   (the caller: kf_cuda_recipes_create, codegen/cuda/cuda_recipe.h)
 *   kf_cuda_exec_prepare:  the recipes' buffers laid out by liveness in one
 *     arena -> every KERNEL step's CUBIN through the disk cache (NVRTC on a
 *     miss) and loaded -> GEMM steps bound -> constants uploaded, launch
 *     arguments bound once -> each measured choice timed once, the fastest
 *     variant kept.
 *   kf_cuda_exec_run:      host inputs -> device, every step on the stream,
 *     outputs -> host.
 *   kf_cuda_exec_run_device: the caller's device buffers bound in place
 *     (re-pointing only the steps whose buffers moved), every step on the
 *     caller's stream; no copy of the bound buffers, no synchronization, no
 *     allocation, so the caller may capture it into a CUDA graph.
 *
 * What runs where is the recipes' business (codegen/cuda/recipe*.c): this
 * layer makes no lowering decision, rewrites no plan and generates no code.
 *
 * Device memory lies in two regions: the constants (the program's own for
 * its life) and the workspace (staging for host runs, intermediates by
 * liveness, scratch, cuBLASLt's workspace), which the caller may supply
 * (kf_cuda_exec_set_workspace). A program runs on one stream at a time: a
 * run on another stream while the last one is in flight is KF_ERR_BUSY.
 */
#ifndef KF_RUNTIME_CUDA_EXEC_H
#define KF_RUNTIME_CUDA_EXEC_H

#include <stdbool.h>
#include <stdio.h>

#include "codegen/cuda/cuda_recipe.h"
#include "fusion/fusion.h"
#include "runtime/cuda.h"

typedef struct kf_cuda_exec kf_cuda_exec;

/* Whether the context can reach a CUDA device (loads the driver once). */
bool kf_cuda_exec_available(kf_ctx *ctx);

/* Opens the context's device, a stream and the cache, and writes the target
 * the recipes must be made for: the device's arch (or the context's
 * override), its SM count, KF_CUDA_RECIPE_NO_LT_EPILOGUE under
 * KF_FLAG_NO_CUBLASLT. Errors (message in err, KF_MSG_MAX):
 * KF_ERR_UNSUPPORTED (no driver or device), KF_ERR_INVALID_ARGUMENT,
 * KF_ERR_OUT_OF_MEMORY, KF_ERR_INTERNAL (the driver's message). */
kf_status kf_cuda_exec_open(kf_ctx *ctx, kf_cuda_exec **out, kf_cuda_target *target, char *err);

/* kf_cuda_exec_open for `plan` (NULL: as kf_cuda_exec_open): the device is
 * only queried (kf_cuda_device_query: the target needs its arch and SMs, not
 * its context); kf_cuda_exec_prepare, once the cached choices say which
 * recipes run, starts cuBLASLt's dlopen on a thread of its own only when a
 * recipe in use calls it, then attaches the primary context while that runs
 * (the overlap), and takes the library (no thread outlives prepare; destroy
 * waits too). A plan whose recipes in use call no cuBLASLt never opens it. */
kf_status kf_cuda_exec_open_for(kf_ctx *ctx, const kf_plan *plan, kf_cuda_exec **out,
                                kf_cuda_target *target, char *err);

/* Prepares an opened exec to run `plan` (which must outlive it) by `recipes`
 * (made for the target kf_cuda_exec_open gave; the exec owns them from here,
 * also on failure). Called once. On failure destroy the exec. Errors:
 * KF_ERR_UNSUPPORTED (a step the device or cuBLASLt cannot run, naming the
 * group or kernel), KF_ERR_NOT_FOUND (a cache miss under
 * KF_FLAG_CACHE_FAIL_ON_MISS, naming the kernel), KF_ERR_INVALID_ARGUMENT (an
 * NVRTC compile failure, naming the kernel; recipes of another plan or arch),
 * KF_ERR_OUT_OF_MEMORY (host or device), KF_ERR_INTERNAL (the driver's
 * message and the kernel's name). */
kf_status kf_cuda_exec_prepare(kf_cuda_exec *ex, const kf_plan *plan, kf_cuda_recipes *recipes,
                               char *err);
void kf_cuda_exec_destroy(kf_cuda_exec *ex);

/* The recipes the exec runs (NULL before prepare). */
const kf_cuda_recipes *kf_cuda_exec_recipes(const kf_cuda_exec *ex);
/* The driver's name of the device the exec runs on ("" before it opened one). */
const char *kf_cuda_exec_device_name(const kf_cuda_exec *ex);

/* For a MEASURED recipe of `group`: the variant chosen and each variant's
 * milliseconds (KF_CUDA_MAX_VARIANTS entries); false for other groups. */
bool kf_cuda_exec_choice(const kf_cuda_exec *ex, uint32_t group, uint32_t *chosen, float *ms);
/* Whether group's choice was read from the disk cache (an earlier process
 * measured it on this device; only the winner's steps were loaded). */
bool kf_cuda_exec_choice_cached(const kf_cuda_exec *ex, uint32_t group);
/* Whether the exec loaded cuBLASLt: only when a step it may launch, or a
 * variant it still measures, calls the library. */
bool kf_cuda_exec_uses_cublaslt(const kf_cuda_exec *ex);
/* The tiered first compile (kf_options.tiered_compile, cuda_exec_tier.c):
 * _pending: a group still runs its cuBLASLt side while its generated
 * kernels compile in the background; _choice_tiered: group's choice was
 * (or is) tiered rather than measured at prepare; _tier_wait: waits for the
 * background compile to end (its status; the next run swaps). */
bool kf_cuda_exec_tier_pending(const kf_cuda_exec *ex);
bool kf_cuda_exec_choice_tiered(const kf_cuda_exec *ex, uint32_t group);
kf_status kf_cuda_exec_tier_wait(kf_cuda_exec *ex, char *err);

/* Runs the plan once. bound[t] (graph->n_nodes entries) is a host pointer for
 * every graph input t (read) and may be one for a graph output t (written);
 * sizes were checked by the caller. `stream` is a CUstream or NULL (the
 * exec's own). Returns when the outputs are on the host. */
kf_status kf_cuda_exec_run(kf_cuda_exec *ex, void *const *bound, void *stream, char *err);

/* Runs the plan once on the caller's device buffers: bound[t] is a device
 * address for every graph input t (read in place) and may be one for a
 * graph output t (written in place where its buffer is its own, else copied
 * there on the stream after the steps). `stream` is a CUstream (NULL: the
 * legacy default stream). Returns once everything is enqueued. Pointers
 * were checked by the caller (kf_cuda_exec_check_pointer). Errors:
 * KF_ERR_BUSY (the last run, on another stream, is still in flight),
 * KF_ERR_INTERNAL (the driver's message). */
kf_status kf_cuda_exec_run_device(kf_cuda_exec *ex, void *const *bound, void *stream, char *err);

/* Enqueues a copy of tensor t's current device bytes (in the program's
 * memory, or the caller's buffer it was bound to) to the device address
 * `dst` on `stream`. */
kf_status kf_cuda_exec_copy_device(kf_cuda_exec *ex, uint32_t t, kf_cu_deviceptr dst, size_t bytes,
                                   void *stream, char *err);

/* Checks one binding's pointer with one cuPointerGetAttributes call.
 * device: `ptr` must be `align`-byte aligned device (or managed) memory of
 * the exec's context and device with at least `bytes` from ptr to the end
 * of its allocation (where the driver knows the range). !device: `ptr` must
 * not be device memory (a host binding). KF_ERR_INVALID_ARGUMENT with a
 * message that says what the pointer is and what to do; the caller
 * prefixes the binding's name. A driver without cuPointerGetAttributes
 * checks the alignment only. */
kf_status kf_cuda_exec_check_pointer(kf_cuda_exec *ex, const void *ptr, size_t bytes, bool device,
                                     size_t align, char *err);

/* The bytes of the workspace region (what kf_cuda_exec_set_workspace needs). */
size_t kf_cuda_exec_workspace_size(const kf_cuda_exec *ex);
/* Moves the workspace region to the caller's device memory `ws` (`bytes`,
 * at least the workspace size, 256-byte aligned, checked like a device
 * binding) and frees the program's own; ws 0 allocates the program's own
 * again. Waits for the last run first. The next run rebinds. */
kf_status kf_cuda_exec_set_workspace(kf_cuda_exec *ex, kf_cu_deviceptr ws, size_t bytes, char *err);

/* Whether a kernel clamped a gather index into its axis since the last call
 * (the CUDA target's contract: an out-of-range index reads the nearest
 * row, and is reported here). Waits for `stream` (NULL: the exec's own)
 * first, so the device-resident runs enqueued on it are counted; a
 * host-pointer run has read the flag word already, after its own
 * synchronization. Clears what it reports. *clamped is false for a plan
 * with no gather. */
kf_status kf_cuda_exec_index_clamps(kf_cuda_exec *ex, void *stream, bool *clamped, char *err);

/* Copies tensor t's device buffer (an output, input or anything materialized)
 * to `dst` (`bytes`). KF_ERR_NOT_FOUND when t has no buffer. */
kf_status kf_cuda_exec_copy_out(kf_cuda_exec *ex, uint32_t t, void *dst, size_t bytes, char *err);

/* For the bench: uploads host data into input t's device buffer once. */
kf_status kf_cuda_exec_set_input(kf_cuda_exec *ex, uint32_t t, const void *src, size_t bytes,
                                 char *err);
/* For the bench: enqueues every step on `stream` (NULL: the exec's) without
 * any copy or synchronization. */
kf_status kf_cuda_exec_launch(kf_cuda_exec *ex, void *stream, char *err);
/* For the bench: where a run's time goes. Runs the steps `reps` times on the
 * exec's stream with an event recorded before each step and after the last,
 * and writes each group's median milliseconds (the sum of its chosen
 * variant's steps; plan->n_groups entries, 0 for groups with no step) into
 * ms. The events sit between the launches, so the sum over groups is the
 * run's device time plus a few microseconds per step; a CUDA graph is not
 * used here. */
kf_status kf_cuda_exec_time_groups(kf_cuda_exec *ex, int reps, double *ms, char *err);
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

/* Text: one line per group (what runs where and why, the measured times);
 * then the arena. JSON: the value of the report's "cuda_run" member: the
 * device, each measured choice with its times (and whether the cache gave
 * it), launches, arena, cache, whether cuBLASLt was loaded, and where open
 * and prepare spent their milliseconds ("prepare_ms"). */
void kf_cuda_exec_report(const kf_cuda_exec *ex, bool json, FILE *out);

#endif /* KF_RUNTIME_CUDA_EXEC_H */
