/*
 * aot.h -- kf_aot's loop with its progress told as it goes (frontend/aot_api.c).
 * kf_aot (kfuse.h) is this with no hooks; `kfuse aot` (frontend/cmd_aot.c)
 * passes hooks that print its progress line, a message per kernel the cache
 * lacks, the cache's notes and a coverage line per arch. One loop serves both,
 * so the CLI and the C API cannot drift apart.
 */
#ifndef KF_FRONTEND_AOT_H
#define KF_FRONTEND_AOT_H

#include <stdbool.h>
#include <stddef.h>

#include "kfuse.h"

/* One generated kernel, after its compile or lookup. */
typedef struct kf_aot_kernel_event {
    const char *arch, *name;
    kf_status status;  /* KF_OK: in the cache; else it did not generate or compile,
                          or (not_stored) compiled but could not be written */
    bool not_stored;   /* compiled, but the cache lacks it (a full disk, ...) */
    bool hit;          /* it was in the cache already */
    const char *error; /* why, when status != KF_OK ("" else) */
    const char *note;  /* a note of the cache's ("" when none) */
} kf_aot_kernel_event;

/* One arch of one graph, done. */
typedef struct kf_aot_arch_event {
    const char *arch;
    kf_status status;       /* its first failure (KF_OK: every kernel is in the cache) */
    bool no_recipes;        /* its recipes could not be made (error says why) */
    const char *error;      /* the recipes' failure, or out of memory ("" else) */
    kf_aot_summary summary; /* this arch's counts */
    size_t not_stored;      /* of summary.failed: compiled but not stored */
} kf_aot_arch_event;

/* What kf_aot_with tells its caller (every member may be NULL). */
typedef struct kf_aot_hooks {
    void *user;
    void (*arch_begin)(void *user, const char *arch, size_t n_kernels); /* before compiling */
    void (*kernel)(void *user, const kf_aot_kernel_event *e);           /* each kernel, in order */
    void (*arch_end)(void *user, const kf_aot_arch_event *e);           /* after each arch */
} kf_aot_hooks;

/* kf_aot (kfuse.h), same contract and result, calling `hooks` (may be NULL)
 * as it goes. No arch hook runs when the call fails before its recipes (a bad
 * argument, the cache, the planner): the status and kf_graph_error say why. */
kf_status kf_aot_with(kf_ctx *ctx, kf_graph *graph, const char *const *archs, size_t n_archs,
                      const kf_aot_hooks *hooks, kf_aot_summary *summary);

#endif /* KF_FRONTEND_AOT_H */
