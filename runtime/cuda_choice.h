/*
 * cuda_choice.h -- a MEASURED recipe's choice, kept in the disk cache beside
 * its kernels (DESIGN.md: "the choice is measured once per device and shape
 * and stored in the cache beside the kernel").
 *
 * A warm start must not time anything: a new process that compiles a program
 * whose kernels are all cached reads each measured recipe's winner here, then
 * loads only that variant's kernels, and cuBLASLt only when the winner (or a
 * variant still to be measured) calls it.
 *
 * The key covers everything that can change which variant is faster: every
 * step of every variant (a kernel step by its own CUBIN key -- source,
 * options, arch, compiler, codegen version -- and its launch shape; a library
 * step by its dtype, sizes, strides, beta and epilogue), the device's name,
 * compute capability and SM count, the driver version and the cuBLASLt
 * library the context names, and how the variants are timed (graph replay
 * or direct launches). An entry is 24 bytes: a tag, the variant count,
 * the winner and each variant's milliseconds. The margin that picks the
 * winner from the times (kf_cuda_choice_pick) is not in the key: a reader
 * picks again from the stored times with its own context's margin, so a
 * change of margin never times anything again.
 */
#ifndef KF_RUNTIME_CUDA_CHOICE_H
#define KF_RUNTIME_CUDA_CHOICE_H

#include <stdbool.h>
#include <stdint.h>

#include "codegen/cuda/cuda_recipe.h"
#include "runtime/cache.h"
#include "runtime/cuda.h"

/* The key of recipe rc's choice on `dev` (arch: the target's, "sm_90a";
 * blt_lib: the context's cuBLASLt library, NULL for the default; replayed:
 * timed by graph replay, else by direct launches -- two methods that can
 * pick different winners, so neither reads the other's). Errors (err,
 * KF_MSG_MAX): KF_ERR_OUT_OF_MEMORY, or a kernel step's key failing
 * (kf_cuda_kernel_cache_key). */
kf_status kf_cuda_choice_key(const kf_mem *mem, const kf_cuda_recipe *rc, const kf_cuda_device *dev,
                             const char *arch, const char *blt_lib, bool replayed,
                             kf_cache_key *key, char *err);

/* Reads a stored choice of a recipe of n_variants: true and *chosen, ms[0..n)
 * on a well-formed hit; false on a miss or an entry that does not fit (which
 * the caller then measures again and overwrites). */
bool kf_cuda_choice_load(kf_cache *cache, const kf_cache_key *key, uint32_t n_variants,
                         uint32_t *chosen, float *ms);

/* Stores a measured choice. A cache that cannot store (read-only, a full
 * disk) costs only the next process a new measurement: the result is
 * KF_CACHE_STORE_DONE or the reason it was not stored. */
kf_cache_store kf_cuda_choice_store(kf_cache *cache, const kf_cache_key *key, uint32_t n_variants,
                                    uint32_t chosen, const float *ms);

/* Whether variant v of recipe rc calls a library (a cuBLASLt GEMM step). */
bool kf_cuda_variant_calls_lib(const kf_cuda_recipe *rc, uint32_t v);

/* Which of n variants runs, from their times ms[0..n) (milliseconds a run)
 * and calls_lib[v] (variant v calls cuBLASLt): the fastest, except that a
 * variant that calls the library runs only when it is faster than the
 * fastest variant that calls none by more than `margin` of that one's time
 * (ms[lib] < (1 - margin) ms[gen]); within the margin the generated side
 * runs. Why: a library side that wins by a few percent (a real win: the
 * sides' times vary by under 1% from process to process on an H100) gains
 * that little per run but costs every process that runs the program
 * cuBLASLt's load and first use (~160 ms there; kf_options.choice_margin).
 * An exact tie goes to the generated side; among equals, the lower index.
 * Every library-free variant's time counts (1 + load_bias) times wherever
 * times are compared (kf_options.choice_load_bias: the sides are timed on a
 * GPU at rest, where the generated kernels fare better against cuBLASLt than
 * under a model's power-capped load; 0: as timed). *by_margin (NULL: not
 * asked): the margin or the bias decided, i.e. the variant returned is not
 * the fastest by the measured times. margin and load_bias 0: the fastest,
 * as before either. */
uint32_t kf_cuda_choice_pick(uint32_t n, const float *ms, const bool *calls_lib, double margin,
                             double load_bias, bool *by_margin);

/* kf_cuda_choice_pick over recipe rc's variants (calls_lib from its steps). */
uint32_t kf_cuda_choice_pick_recipe(const kf_cuda_recipe *rc, const float *ms, double margin,
                                    double load_bias, bool *by_margin);

#endif /* KF_RUNTIME_CUDA_CHOICE_H */
