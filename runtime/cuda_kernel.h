/*
 * cuda_kernel.h -- how a generated kernel (codegen/cuda/cuda_codegen.h) is
 * compiled and cached. One home for the compile options and the cache key, so
 * `kfuse aot` (which fills a cache directory with no GPU) and the execution
 * side (which looks the same kernels up, possibly with fail-on-miss) can never
 * disagree about either.
 */
#ifndef KF_RUNTIME_CUDA_KERNEL_H
#define KF_RUNTIME_CUDA_KERNEL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "codegen/cuda/cuda_codegen.h"
#include "runtime/cache.h"
#include "runtime/nvrtc.h"

/* The NVRTC options every generated kernel is compiled with: the kernel's
 * arch and name, no fast math, no line info; dump_dir NULL ($KF_DUMP_DIR). */
void kf_cuda_kernel_compile_options(const kf_cuda_kernel *k, kf_nvrtc_options *opts);

/* The disk-cache key of the kernel's CUBIN: kf_cache_key_build over the source
 * from k->body on (not the header comment naming the group and its tensors,
 * so groups that generate the same code share a key, and compile once),
 * the canonical options string (kf_nvrtc_options_string of the options above),
 * the arch, `compiler` (kf_nvrtc_compiler_id; NULL: asks NVRTC) and
 * KF_CUDA_CODEGEN_VERSION. `err` (KF_MSG_MAX) on failure: a bad arch,
 * KF_ERR_UNSUPPORTED without NVRTC when `compiler` is NULL. */
kf_status kf_cuda_kernel_cache_key(const kf_cuda_kernel *k, const char *compiler,
                                   kf_cache_key *key, char *err);

/* Compiles the kernel with NVRTC (no cache). The CUBIN is allocated with `mem`;
 * on failure `err` names the kernel and the arch and holds the head of NVRTC's
 * log (the whole log is in out->log). Release `out` with
 * kf_nvrtc_result_release whatever the status. */
kf_status kf_cuda_kernel_compile(const kf_mem *mem, const kf_cuda_kernel *k, kf_nvrtc_result *out,
                                 char *err);

/* The kernel's CUBIN through `cache` (get, else compile once across processes
 * and store): *cubin allocated with the cache's allocator (free with
 * kf_cache_blob_free), *hit true when nothing was compiled. A cache opened
 * with KF_CACHE_FAIL_ON_MISS returns KF_ERR_NOT_FOUND on a miss, naming the
 * kernel. `err` (KF_MSG_MAX) explains a failure; msg carries the cache's notes.
 * A compiled CUBIN that could not be stored (a full disk) is still returned
 * with KF_OK: msg->store == KF_CACHE_STORE_FAILED then says the cache lacks it
 * (msg->store_error says why), which a caller filling a cache must count. */
kf_status kf_cuda_kernel_cubin(kf_cache *cache, const kf_cuda_kernel *k, void **cubin,
                               size_t *size, bool *hit, kf_cache_msg *msg, char *err);

/* One kernel of a batch (kf_cuda_kernels_cubins): `kernel` in, the rest out. */
typedef struct kf_cuda_cubin {
    const kf_cuda_kernel *kernel;
    void *data;        /* the CUBIN: the cache's allocation (from_cache) or `mem`'s */
    size_t size;
    bool from_cache;   /* data came through the cache (free with kf_cache_blob_free) */
    bool hit;          /* nothing was compiled for it */
    kf_cache_store store; /* the cache's store outcome (STORE_FAILED: the cache lacks it) */
    kf_status status;
    char err[KF_MSG_MAX];  /* why status is not KF_OK, or why the store failed */
    char note[KF_MSG_MAX]; /* the cache's note (a corrupt entry replaced), or "" */
} kf_cuda_cubin;

/* The CUBINs of jobs[0..n), as kf_cuda_kernel_cubin (through `cache`) or
 * kf_cuda_kernel_compile (`cache` NULL; allocated with `mem`) would give each,
 * obtained on up to `threads` threads at once (0: one per online CPU, at most
 * 8): NVRTC compiles concurrently, and a cold program's kernels compile in
 * about the time of its slowest one. Kernels with one cache key (two groups
 * that generate the same code: the key skips the header comment) compile
 * once: the first of them runs, the others then read the entry it stored (a
 * hit) or, without a cache, get a copy of its CUBIN (hit true, from_cache
 * false); a failure of the first is theirs too. Every job gets its own
 * status; the call returns the first failed job's (lowest index), its message
 * in `err`. Threads that cannot be started leave their share to the others
 * (the calling thread always works). Release every job with
 * kf_cuda_cubin_release whatever the status. */
kf_status kf_cuda_kernels_cubins(kf_cache *cache, const kf_mem *mem, kf_cuda_cubin *jobs,
                                 uint32_t n, int threads, char *err);
/* kf_cuda_kernels_cubins, stopping early once *cancel is set (a program
 * destroyed while its tiered compile runs in the background): no thread
 * starts another job then; the jobs never started fail with KF_ERR_BUSY.
 * `cancel` NULL: as kf_cuda_kernels_cubins. */
kf_status kf_cuda_kernels_cubins_cancel(kf_cache *cache, const kf_mem *mem, kf_cuda_cubin *jobs,
                                        uint32_t n, int threads, const atomic_bool *cancel,
                                        char *err);
void kf_cuda_cubin_release(kf_cache *cache, const kf_mem *mem, kf_cuda_cubin *job);

/* kf_options.dump_dir: the source of each of the n jobs' kernels written to
 * `dir` as KERNEL.ARCH.cu (kf_nvrtc_dump_source), whether it will compile or
 * the cache will serve it -- what a run and kf_aot do before they fetch the
 * CUBINs. dir NULL: nothing. Returns the first failure's status, its message in err. */
kf_status kf_cuda_cubins_dump(const char *dir, const kf_cuda_cubin *jobs, uint32_t n, char *err);

#endif /* KF_RUNTIME_CUDA_KERNEL_H */
