/*
 * cpu.h -- the CPU runtime: compiles a plan's LLVM module with ORC LLJIT and
 * runs its kernels, the outer loop of each split across a small thread pool,
 * intermediates in one buffer arena whose slots are reused by liveness.
 */
#ifndef KF_RUNTIME_CPU_H
#define KF_RUNTIME_CPU_H

#include "fusion/fusion.h"

typedef struct kf_cpu_exec kf_cpu_exec;

struct kf_cache;

/* What a context chose for the CPU target (kf_options' switches). */
typedef struct kf_cpu_options {
    int opt_level; /* LLVM's -O level, 0-3 (kf_options.cpu_opt_level) */
    int threads;   /* worker threads, 0: one per core (kf_options.num_threads) */
    bool no_reuse; /* every tensor its own arena slot: intermediates stay
                      readable after a run (KF_FLAG_CPU_KEEP_INTERMEDIATES) */
    bool dump_ir;  /* the module before and after optimization to stderr
                      (KF_FLAG_DUMP_LLVM_IR) */
    bool timing;   /* compile-phase times to stderr (KF_FLAG_CPU_TIMING) */
} kf_cpu_options;

/* The defaults: O3, one thread per core, slots reused, nothing printed. */
void kf_cpu_options_init(kf_cpu_options *o);

/* Compiles `plan` (which, with its graph, must outlive the result) for the
 * host CPU, as `opts` says (NULL: the defaults). With a cache (may be NULL), the optimized object file is looked
 * up under a key over the module's IR text, the pipeline, the host CPU name
 * and features, LLVM's version and KF_LLVM_CODEGEN_VERSION, and stored on a
 * miss; a hit skips optimization and code generation. On failure *out is NULL
 * and `err` (KF_MSG_MAX bytes) says why:
 * KF_ERR_UNSUPPORTED (a group the backend cannot lower), KF_ERR_INTERNAL (the
 * module failed verification or the JIT failed), KF_ERR_OUT_OF_MEMORY. */
kf_status kf_cpu_exec_create(const kf_mem *mem, const kf_plan *plan, const kf_cpu_options *opts,
                             struct kf_cache *cache, kf_cpu_exec **out, char *err);

/* Whether the last create loaded its code from the disk cache. */
bool kf_cpu_exec_cache_hit(const kf_cpu_exec *x);

/* Runs every kernel once. `bound` has graph->n_nodes entries: the caller's
 * buffer for each graph input and for each output tensor it binds (NULL
 * elsewhere); every other materialized tensor goes to the arena. One run at a
 * time per exec. Errors: KF_ERR_OUT_OF_MEMORY (arena or thread scratch). */
kf_status kf_cpu_exec_run(kf_cpu_exec *x, void *const *bound, char *err);

/* The arena buffer of tensor t after a run, or NULL if t has no arena slot. */
void *kf_cpu_exec_buffer(kf_cpu_exec *x, uint32_t t);

void kf_cpu_exec_destroy(kf_cpu_exec *x);

/* "<cpu name> <features>" of the host, as the target machine gets them. */
const char *kf_cpu_host_name(void);

#endif /* KF_RUNTIME_CPU_H */
