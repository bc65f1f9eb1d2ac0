/*
 * cuda_exec_internal.h -- the CUDA executor's state, shared by its two
 * files: cuda_exec.c (open, prepare: buffers, kernels, steps, measured
 * choices, the CUDA graph) and cuda_exec_run.c (runs, device-resident runs,
 * the clamp flag, workspace, copies, statistics and the report). Nothing
 * outside runtime/cuda_exec*.c includes it; the contract is cuda_exec.h.
 */
#ifndef KF_RUNTIME_CUDA_EXEC_INTERNAL_H
#define KF_RUNTIME_CUDA_EXEC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "runtime/arena.h"
#include "runtime/cache.h"
#include "runtime/ctx.h"
#include "runtime/cublaslt.h"
#include "runtime/cuda_choice.h"
#include "runtime/cuda_exec.h"
#include "runtime/cuda_kernel.h"

#define ARENA_ALIGN 256u

/* Timing a measured choice (cuda_exec_measure.c). By graph replay: rounds
 * of interleaved samples (median), each sample at least MEASURE_SAMPLE_MS
 * of the fastest variant's runs (MEASURE_MAX_RUNS at most). By direct
 * launches: warm-up runs, then timed runs (median). */
#define MEASURE_WARMUP 2
#define MEASURE_RUNS 5
#define MEASURE_ROUNDS 7
#define MEASURE_SAMPLE_MS 0.3f
#define MEASURE_MAX_RUNS 64u

/* CUstream_flags and CUstreamCaptureMode values of the captures (a capture
 * in relaxed mode on a private non-blocking stream executes nothing and
 * waits for no other stream). */
enum { KF_CU_STREAM_NON_BLOCKING = 1, KF_CU_STREAM_CAPTURE_MODE_RELAXED = 2 };

/* A device buffer: a materialized tensor or a recipe's scratch. */
typedef struct xbuf {
    uint32_t tensor; /* the tensor it holds, or KF_NONE for scratch */
    size_t bytes;
    int first, last; /* live range in group indices; -1 / n_groups for pinned */
    size_t offset;   /* in its region: the constants, or the workspace */
    bool constant;   /* a constant's: in the program's own constant region */
    bool zero;       /* counters (KF_CUDA_PARAM_COUNTERS): in the constant region, zeroed
                        once at prepare; the kernels leave them zero */
} xbuf;

typedef struct xkernel {
    const kf_cuda_kstep *ks; /* the recipe's step */
    uint32_t tier_job; /* KF_NONE: loaded at prepare; else a deferred kernel of a tiered
                          choice, its CUBIN tier.jobs[tier_job], loaded at the swap */
    kf_cu_module mod;
    kf_cu_function fn;
    uint32_t arg_buf[KF_CUDA_MAX_PARAMS]; /* buffer index per argument */
    uint64_t slots[KF_CUDA_MAX_PARAMS];
    void *args[KF_CUDA_MAX_PARAMS];
    /* The tensor maps, encoded once the arena is placed, at the first 128-byte
     * boundary of tmap_raw (xk_tmap): the driver wants them aligned, and the
     * allocator that made this struct promises less than kf_cu_tensor_map's
     * alignas(128). */
    unsigned char tmap_raw[(KF_CUDA_MAX_TMAPS + 1) * sizeof(kf_cu_tensor_map)];
} xkernel;

static inline kf_cu_tensor_map *xk_tmap(xkernel *xk, int64_t i) {
    uintptr_t p = ((uintptr_t)xk->tmap_raw + 127u) & ~(uintptr_t)127u;
    return (kf_cu_tensor_map *)p + i;
}

typedef struct xgemm {
    const kf_cuda_gstep *gs; /* the recipe's step */
    kf_blt_gemm g;
    uint32_t a_buf, b_buf, c_buf, d_buf, bias_buf; /* buffer indices (KF_NONE: none) */
} xgemm;

/* A graph captured from the run's own launches (cuda_exec_capture.c),
 * valid for the buffer addresses `key` (n_bufs of them). */
typedef struct xcapture {
    kf_cu_deviceptr *key;
    kf_cu_graph_exec exec; /* NULL: the slot is free */
    uint64_t used;         /* cap_clock at its last replay */
} xcapture;
#define XCAP_SLOTS 4

typedef struct xstep {
    kf_cuda_step_kind kind;
    uint32_t group, variant;
    xkernel *k; /* KERNEL */
    xgemm gm;   /* GEMM */
} xstep;

/* What a measured choice found: milliseconds per variant and the winner
 * (kf_cuda_choice_pick_recipe with the context's choice_margin and
 * choice_load_bias; by_margin: the margin or the bias decided, the winner is
 * not the fastest measured); cached: read from the
 * disk cache (only the winner's steps exist then); replayed: timed by
 * graph replay (else by direct launches). */
typedef struct xchoice {
    float ms[KF_CUDA_MAX_VARIANTS];
    uint32_t chosen;
    bool by_margin;
    bool cached, keyed; /* keyed: `key` holds the choice's cache key */
    bool replayed;
    /* tiered: not measured yet; `chosen` (the variant that calls cuBLASLt) runs
     * while the other variants' kernels compile in the background
     * (cuda_exec_tier.c); was_tiered: it ran so before its measurement. */
    bool tiered, was_tiered;
    kf_cache_key key;
} xchoice;

/* The tiered first compile (kf_options.tiered_compile, cuda_exec_tier.c):
 * the deferred kernels, compiled by `thread`, then loaded, timed and
 * swapped in by the first run that finds them done. */
typedef struct xtier {
    kf_cuda_cubin *jobs; /* one per deferred KERNEL step (cap_jobs allocated) */
    uint32_t n_jobs, cap_jobs;
    pthread_t thread;
    bool started;       /* `thread` was started and not joined yet */
    atomic_bool done;   /* the batch finished (the thread is about to end) */
    atomic_bool cancel; /* the exec is being destroyed: compile nothing more */
    bool pending;       /* a recipe still runs its tiered (cuBLASLt) side */
    bool failed;        /* the background compile or the swap failed: the cuBLASLt sides
                           stay, `err` says why */
    kf_status status;   /* the batch's */
    char err[KF_MSG_MAX];
    unsigned runs;       /* runs that polled */
    unsigned swapped_at; /* the run (1-based) that swapped the winners in; 0: none */
    double t0_ms, compile_ms, swap_ms; /* start, the batch's wall time, the swap's */
} xtier;

/* Where the host time of the program's first run went (the report's
 * cuda_run.first_run_ms): a process's first run pays what nothing before it
 * loaded -- cuBLASLt's lazy start-up at its first real call, kernels loaded
 * at their first launch, a graph's first upload. Filled once, by the first
 * kf_cuda_exec_run or _run_device call (captured by the caller or not). */
typedef struct xfirst {
    bool done, captured;
    double total, enter, repoint, launch, graph, kernels, kernel_max, gemms, gemm_first, gemm_max,
        after;
    unsigned n_kernels, n_gemms;
} xfirst;

/* Where open and prepare spend their time (the warm-start bench reads them
 * from the report's JSON). */
typedef enum xphase {
    XPH_DRIVER,
    XPH_DEVICE,
    XPH_CACHE,
    XPH_CHOICES,
    XPH_CUBLASLT,
    XPH_KERNELS,
    XPH_MEMORY,
    XPH_MEASURE,
    XPH_CONSTANTS,
    XPH_GRAPH,
    XPH_BIND,      /* part of MEMORY: every step bound (GEMMs: cuBLASLt's heuristic) */
    XPH_LT_THREAD, /* the preload thread's own time opening cuBLASLt (overlapped) */
    XPH_COUNT
} xphase;

static inline double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

struct kf_cuda_exec {
    kf_ctx *ctx;
    kf_mem mem;
    const kf_plan *plan;
    const kf_graph *graph;
    kf_cuda_recipes *recipes; /* owned */
    kf_cuda_target target;
    kf_cuda_device dev;
    bool dev_open;
    bool lt_preloaded; /* cuBLASLt's dlopen thread was started (a recipe in use calls it) */
    kf_cu_stream stream;
    kf_blt *lt;
    kf_blt_preload *lt_pre; /* cuBLASLt being opened on a thread, until prepare takes it */
    kf_cache *cache;
    double phase_ms[XPH_COUNT];

    xbuf *bufs;
    uint32_t n_bufs, cap_bufs;
    uint32_t *buf_of;   /* tensor -> buffer (views: their base's), KF_NONE */
    uint32_t *scratch0; /* per recipe: the buffer index of its scratch s0 */
    xstep *steps;       /* every step of every variant */
    uint32_t n_steps, cap_steps;
    uint32_t *order; /* the steps a run launches, in order */
    uint32_t n_order;
    xchoice *choices; /* per recipe */
    /* Device memory, two regions. The constants (consts, consts_bytes) are
     * the program's for its whole life. Everything else -- input and output
     * staging, intermediates shared by liveness, scratch, cuBLASLt's
     * workspace -- lies in the workspace (arena_bytes): the program's own
     * (own_ws) or, after kf_cuda_exec_set_workspace, the caller's; `ws` is
     * the one in use. */
    kf_cu_deviceptr consts, own_ws, ws;
    size_t consts_bytes, arena_bytes, unshared_bytes;
    uint32_t lt_ws_buf; /* the buffer of cuBLASLt's workspace (KF_NONE: no GEMM) */
    /* The clamp flag word (KF_CUDA_BUF_FLAGS) in the constants region, set by
     * kernels that clamp a gather index; no run resets it (steps, graphs and
     * captures unchanged). Host runs read it after their sync. */
    uint32_t flags_buf; /* KF_NONE: no kernel clamps */
    bool clamp_seen;    /* a host-pointer run found it set (and cleared it) */
    unsigned compiled, hits;

    /* Re-pointing. cur[b] is the address every launched step is bound to
     * for buffer b: its home in a region, or the caller's pointer during
     * device-resident runs. A run computes want[] and rebinds (kernel
     * arguments, tensor maps, graph nodes) only the steps of buffers that
     * moved (moved[b]). */
    kf_cu_deviceptr *cur, *want;
    unsigned char *moved;

    /* All-kernel programs of 2+ steps: one CUDA graph, launched with one
     * cuGraphLaunch (NULL: direct launches); nodes[i] is order[i]'s node. */
    kf_cu_graph_exec graph_exec;
    kf_cu_graph cu_graph;
    kf_cu_graph_node *nodes;

    /* Programs without that graph: graphs captured from their own launches,
     * one per set of buffer addresses that came back among the last
     * XCAP_SLOTS direct runs' (cuda_exec_capture.c). cap_prev: those runs'
     * cur[] (a ring; its allocation also holds the slots' keys). */
    xcapture caps[XCAP_SLOTS];
    kf_cu_deviceptr *cap_prev;
    unsigned cap_hist_n, cap_hist_next;
    bool cap_off;
    kf_cu_stream cap_stream;
    uint64_t cap_clock;
    unsigned cap_made, cap_replays;

    /* The one-stream contract: `done` is recorded after every run that is
     * not captured; a run on another stream than last_stream is refused
     * while it has not completed. */
    kf_cu_event done;
    kf_cu_stream last_stream;
    bool ran;

    xtier tier;
    xfirst first; /* the first run's host time (cuda_run.first_run_ms) */
};

/* Helpers of cuda_exec.c that cuda_exec_run.c calls, and the reverse. */
kf_cu_deviceptr kf_cx_buf_ptr(const kf_cuda_exec *ex, uint32_t b);
kf_status kf_cx_clear_flags(kf_cuda_exec *ex, kf_cu_stream stream, char *err);
kf_status kf_cx_launch_step(kf_cuda_exec *ex, const xstep *s, kf_cu_stream stream, char *err);
kf_status kf_cx_make_current(kf_cuda_exec *ex, char *err);
kf_status kf_cx_repoint(kf_cuda_exec *ex, char *err);
/* cuda_exec_capture.c: the run replayed from a captured graph (*done), or
 * nothing done (the caller launches the steps); drop: every captured graph
 * destroyed (the workspace moved); free: that and the capture's memory. */
kf_status kf_cx_launch_captured(kf_cuda_exec *ex, kf_cu_stream stream, bool *done, char *err);
/* cuda_exec_capture.c, for the runs' graphs and the measured choices' timing:
 * on the private capture stream (made at first use), `runs` times over, the
 * run order's steps (gi KF_NONE) or the steps of variant v of recipe gi, in
 * their order, captured into a graph instantiated as *out. False on any
 * failure, with *out NULL: the capture is always ended, nothing is left. */
bool kf_cx_capture_steps(kf_cuda_exec *ex, uint32_t gi, uint32_t v, unsigned runs,
                         kf_cu_graph_exec *out);
void kf_cx_capture_drop(kf_cuda_exec *ex);
void kf_cx_capture_free(kf_cuda_exec *ex);
const char *kf_cx_step_name(const kf_cuda_exec *ex, const xstep *s);
/* cuda_exec.c, for the tiered compile: one step bound to cur[]; a kernel
 * step's module loaded from its CUBIN (released); every variant of recipe
 * gi timed on `stream` (e0, e1 two events; cuda_exec_measure.c), the fastest
 * kept and stored in the cache; the run order (and the hand-built graph, captured graphs
 * dropped) made again from the choices. */
kf_status kf_cx_bind_step(kf_cuda_exec *ex, xstep *s, char *err);
kf_status kf_cx_load_kernel(kf_cuda_exec *ex, xkernel *xk, kf_cuda_cubin *cb, char *err);
kf_status kf_cx_measure_group(kf_cuda_exec *ex, uint32_t gi, kf_cu_stream stream, kf_cu_event e0,
                              kf_cu_event e1, char *err);
/* cuda_exec_measure.c: whether measured choices are timed by graph replay
 * (the driver can capture, and the context's runs use graphs); the method
 * is part of each choice's cache key. */
bool kf_cx_measure_replays(const kf_cuda_exec *ex);
kf_status kf_cx_remake_order(kf_cuda_exec *ex, char *err);
/* cuda_exec_tier.c: after the choices are read, which unmeasured choices
 * run tiered; after prepare, the background compile started; at a run's
 * start, the swap when the compile is done (`wait`: wait for it); at
 * destroy, the compile cancelled and its memory freed. */
void kf_cx_tier_plan(kf_cuda_exec *ex);
bool kf_cx_tier_deferred(const kf_cuda_exec *ex, uint32_t gi, uint32_t v);
void kf_cx_tier_start(kf_cuda_exec *ex);
kf_status kf_cx_tier_poll(kf_cuda_exec *ex, kf_cu_stream stream, bool wait, char *err);
void kf_cx_tier_free(kf_cuda_exec *ex);
/* The tiered compile's part of kf_cuda_exec_report. */
void kf_cx_tier_report(const kf_cuda_exec *ex, bool json, FILE *out);
size_t kf_cx_tensor_bytes(const kf_tensor *t);
/* qsort's comparison of two floats, ascending (medians of timings). */
int kf_cx_cmp_float(const void *a, const void *b);

#endif /* KF_RUNTIME_CUDA_EXEC_INTERNAL_H */
