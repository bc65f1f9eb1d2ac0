/*
 * aot_api.c -- kf_aot and the kernel cache's listing, verification and
 * clearing through the public API (kfuse.h), so an embedding program (the
 * Python package) fills and inspects a cache without the CLI, and `kfuse aot`
 * through kf_aot_with (frontend/aot.h), the same loop with hooks. kf_aot makes
 * the recipes a context would run (codegen/cuda/cuda_recipe.h) for each arch
 * and compiles their KERNEL steps into the context's cache with
 * kf_cuda_kernels_cubins, under the keys a program computes.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "codegen/cuda/cuda_recipe.h"
#include "frontend/aot.h"
#include "frontend/compile.h"
#include "fusion/fusion.h"
#include "ir/ir.h"
#include "kfuse.h"
#include "runtime/cache.h"
#include "runtime/ctx.h"
#include "runtime/cuda_kernel.h"
#include "runtime/nvrtc.h"

/* One arch's recipes: every KERNEL step compiled into `cache`, each told to
 * the hooks; the arch's counts added to *sum. */
static kf_status aot_arch(kf_ctx *ctx, kf_graph *graph, kf_cache *cache, const kf_plan *plan,
                          const char *arch, const kf_aot_hooks *hooks, kf_aot_summary *sum) {
    kf_aot_arch_event ev = {.arch = arch, .error = ""};
    kf_aot_summary *as = &ev.summary;
    kf_cuda_target target;
    kf_cuda_target_for_arch(arch, &target);
    target.flags = kf_cuda_recipe_flags(ctx->flags, ctx->gemm, ctx->attention);
    kf_cuda_recipes *r = NULL;
    kf_cuda_cubin *jobs = NULL;
    char err[KF_MSG_MAX] = "";
    uint32_t n = 0;
    kf_status st = kf_cuda_recipes_create(plan, &target, &ctx->mem, &r, err);
    if (st != KF_OK) {
        ev.no_recipes = true;
        ev.error = err;
        kf_ir_note(graph, st, "kf_aot: recipes for %s: %s", arch, err);
        goto done;
    }
    for (uint32_t gi = 0; gi < r->n; gi++) {
        const kf_cuda_recipe *rc = &r->recipes[gi];
        /* a GEMM sibling set's recipe runs its later members' groups too
         * (theirs have no steps): the report's count either way */
        as->groups += rc->n_steps > 0 ? (rc->n_members > 1 ? rc->n_members : 1u) : 0u;
        for (uint32_t s = 0; s < rc->n_steps; s++) {
            n += rc->steps[s].kind == KF_CUDA_STEP_KERNEL;
            as->library_steps += rc->steps[s].kind != KF_CUDA_STEP_KERNEL;
        }
    }
    jobs = n ? kf_mem_calloc(&ctx->mem, n, sizeof *jobs) : NULL;
    if (n && !jobs) {
        as->failed += n;
        ev.error = "out of memory";
        st = kf_ir_note(graph, KF_ERR_OUT_OF_MEMORY, "kf_aot: out of memory");
        goto done;
    }
    uint32_t j = 0;
    for (uint32_t gi = 0; gi < r->n; gi++)
        for (uint32_t s = 0; s < r->recipes[gi].n_steps; s++)
            if (r->recipes[gi].steps[s].kind == KF_CUDA_STEP_KERNEL)
                jobs[j++].kernel = &r->recipes[gi].steps[s].kernel->kernel;
    if (hooks && hooks->arch_begin)
        hooks->arch_begin(hooks->user, arch, n);
    /* options.dump_dir: every kernel's source, compiled now or served by the
     * cache, as a run writes them (a machine with no GPU reads them here) */
    kf_status ds = kf_cuda_cubins_dump(ctx->dump_dir, jobs, n, err);
    if (ds != KF_OK) {
        ev.error = err;
        st = kf_ir_note(graph, ds, "kf_aot: %s: %s", arch, err);
        goto done;
    }
    if (n) /* concurrently (NVRTC compiles in parallel); each job's outcome below */
        (void)kf_cuda_kernels_cubins(cache, &ctx->mem, jobs, n, 0, err);
    for (uint32_t i = 0; i < n; i++) {
        const kf_cuda_cubin *c = &jobs[i];
        kf_aot_kernel_event ke = {.arch = arch, .name = c->kernel->name, .status = c->status,
                                  .hit = c->hit, .error = "", .note = c->note};
        as->kernels++;
        if (c->status == KF_OK && c->store == KF_CACHE_STORE_FAILED) {
            ke.status = KF_ERR_IO; /* compiled, but the cache lacks it: the product is incomplete */
            ke.not_stored = true;
            ev.not_stored++;
        }
        if (ke.status != KF_OK) {
            ke.error = c->err;
            as->failed++;
            if (st == KF_OK) {
                st = ke.status;
                kf_ir_note(graph, st, "kf_aot: %s: kernel '%s' %s: %s", arch, c->kernel->name,
                           ke.not_stored ? "was not stored" : "failed", c->err);
            }
        } else if (c->hit) {
            as->cached++;
        } else {
            as->compiled++;
        }
        if (hooks && hooks->kernel)
            hooks->kernel(hooks->user, &ke);
        kf_cuda_cubin_release(cache, &ctx->mem, &jobs[i]);
    }
done:
    if (jobs)
        kf_mem_free(&ctx->mem, jobs, n * sizeof *jobs);
    kf_cuda_recipes_destroy(r);
    ev.status = st;
    if (hooks && hooks->arch_end)
        hooks->arch_end(hooks->user, &ev);
    sum->kernels += as->kernels;
    sum->cached += as->cached;
    sum->compiled += as->compiled;
    sum->failed += as->failed;
    sum->groups += as->groups;
    sum->library_steps += as->library_steps;
    return st;
}

kf_status kf_aot(kf_ctx *ctx, kf_graph *graph, const char *const *archs, size_t n_archs,
                 kf_aot_summary *summary) {
    return kf_aot_with(ctx, graph, archs, n_archs, NULL, summary);
}

kf_status kf_aot_with(kf_ctx *ctx, kf_graph *graph, const char *const *archs, size_t n_archs,
                      const kf_aot_hooks *hooks, kf_aot_summary *summary) {
    kf_aot_summary sum;
    memset(&sum, 0, sizeof sum);
    if (summary)
        *summary = sum;
    if (!graph)
        return KF_ERR_INVALID_ARGUMENT;
    if (!ctx || !archs || n_archs == 0)
        return kf_ir_note(graph, KF_ERR_INVALID_ARGUMENT,
                          "kf_aot: NULL context or no arch (pass e.g. \"sm_80\", \"sm_90a\")");
    if (ctx->flags & (KF_FLAG_NO_CACHE | KF_FLAG_CACHE_READ_ONLY))
        return kf_ir_note(graph, KF_ERR_INVALID_ARGUMENT,
                          "kf_aot: the context's flags (KF_FLAG_NO_CACHE or "
                          "KF_FLAG_CACHE_READ_ONLY) leave nowhere to store the kernels");
    char err[KF_MSG_MAX];
    for (size_t i = 0; i < n_archs; i++)
        if (!archs[i] || kf_nvrtc_arch_check(archs[i], err) != KF_OK)
            return kf_ir_note(graph, KF_ERR_INVALID_ARGUMENT, "kf_aot: %s",
                              archs[i] ? err : "a NULL arch");
    kf_cache *cache = NULL;
    kf_status st = kf_ctx_cache(ctx, &cache, err);
    if (st == KF_OK && !cache)
        st = kf_ir_note(graph, KF_ERR_IO, "kf_aot: the context has no cache to fill");
    if (st != KF_OK)
        return cache ? st : kf_ir_note(graph, st, "kf_aot: the cache: %s", err);
    kf_graph *copy = kf_ir_graph_clone(graph); /* the planner rewrites its graph */
    if (!copy)
        return kf_ir_note(graph, KF_ERR_OUT_OF_MEMORY, "kf_aot: out of memory");
    kf_plan_options popt;
    kf_plan_options_for_flags(ctx->flags, &popt); /* kf_compile's, head epilogue included */
    kf_plan *plan = NULL;
    st = kf_plan_create(copy, &popt, &plan);
    if (st != KF_OK) {
        kf_ir_note(graph, st, "%s", kf_graph_error(copy));
    } else {
        for (size_t i = 0; i < n_archs; i++) {
            kf_status s = aot_arch(ctx, graph, cache, plan, archs[i], hooks, &sum);
            if (st == KF_OK)
                st = s;
        }
    }
    kf_plan_destroy(plan);
    kf_ir_graph_destroy(copy);
    if (summary)
        *summary = sum;
    return st;
}

/* ------------------------------------------------------------------------ */
/* The cache                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct lister {
    kf_cache_summary *sum;
    FILE *out;
    bool print_ok; /* list prints every entry; verify only the corrupt ones */
} lister;

static void on_entry(void *user, const kf_cache_entry_info *e) {
    lister *l = user;
    l->sum->entries++;
    l->sum->bytes += e->file_bytes;
    if (e->state == KF_CACHE_ENTRY_CORRUPT) {
        l->sum->corrupt++;
        if (l->out)
            fprintf(l->out, "corrupt  %s  %s\n", e->key_hex, e->problem);
        return;
    }
    if (!l->print_ok || !l->out)
        return;
    time_t secs = (time_t)(e->mtime_ns / 1000000000);
    struct tm tm;
    char when[32] = "?";
    if (gmtime_r(&secs, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(l->out, "%s  %10llu  %10llu  %s\n", e->key_hex, (unsigned long long)e->payload_bytes,
            (unsigned long long)e->file_bytes, when);
}

typedef enum cache_action { ACT_LIST, ACT_VERIFY, ACT_CLEAR } cache_action;

static kf_status cache_do(kf_ctx *ctx, cache_action act, FILE *out, kf_cache_summary *sum) {
    if (!sum)
        return KF_ERR_INVALID_ARGUMENT;
    memset(sum, 0, sizeof *sum);
    if (!ctx) {
        snprintf(sum->error, sizeof sum->error, "NULL context");
        return KF_ERR_INVALID_ARGUMENT;
    }
    /* Only looking never creates the directory (a handle of its own: the
     * context's may be read-write, or absent under KF_FLAG_NO_CACHE). */
    kf_cache_options o = {.dir = ctx->cache_dir, .flags = act == ACT_LIST ? KF_CACHE_READ_ONLY : 0};
    kf_cache *cache = NULL;
    kf_cache_msg msg;
    memset(&msg, 0, sizeof msg);
    kf_status st = kf_cache_open(&ctx->mem, &o, &cache, &msg);
    if (st == KF_ERR_NOT_FOUND && act == ACT_LIST) {
        snprintf(sum->dir, sizeof sum->dir, "%s", ctx->cache_dir ? ctx->cache_dir : "");
        if (out)
            fprintf(out, "0 entries, 0 bytes (%s)\n", msg.error);
        return KF_OK;
    }
    if (st != KF_OK) {
        snprintf(sum->error, sizeof sum->error, "%s", msg.error);
        return st;
    }
    snprintf(sum->dir, sizeof sum->dir, "%s", kf_cache_dir(cache));
    lister l = {.sum = sum, .out = out, .print_ok = act == ACT_LIST};
    if (act == ACT_LIST) {
        if (out)
            fprintf(out, "%-*s  %10s  %10s  %s\n", KF_CACHE_KEY_HEX - 1, "key", "payload",
                    "bytes", "modified (UTC)");
        st = kf_cache_list(cache, on_entry, &l, &msg);
        if (st == KF_OK && out)
            fprintf(out, "%zu entries, %llu bytes in %s\n", sum->entries,
                    (unsigned long long)sum->bytes, kf_cache_dir(cache));
    } else if (act == ACT_VERIFY) {
        size_t bad = 0;
        st = kf_cache_verify(cache, on_entry, &l, &bad, &msg);
        sum->corrupt = bad;
        if (st == KF_OK && out)
            fprintf(out, "%zu entries verified in %s: %zu corrupt%s\n", sum->entries,
                    kf_cache_dir(cache), bad, bad ? " (removed)" : "");
    } else {
        st = kf_cache_clear(cache, &sum->removed, &msg);
    }
    if (st != KF_OK)
        snprintf(sum->error, sizeof sum->error, "%s", msg.error);
    kf_cache_close(cache);
    if (st == KF_OK && out && ferror(out)) {
        snprintf(sum->error, sizeof sum->error, "the output stream failed");
        st = KF_ERR_IO;
    }
    return st;
}

kf_status kf_cache_list_entries(kf_ctx *ctx, FILE *out, kf_cache_summary *summary) {
    return cache_do(ctx, ACT_LIST, out, summary);
}

kf_status kf_cache_verify_entries(kf_ctx *ctx, FILE *out, kf_cache_summary *summary) {
    return cache_do(ctx, ACT_VERIFY, out, summary);
}

kf_status kf_cache_clear_entries(kf_ctx *ctx, kf_cache_summary *summary) {
    return cache_do(ctx, ACT_CLEAR, NULL, summary);
}
