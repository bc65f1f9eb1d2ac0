/*
 * cuda_exec_tier.c -- the tiered first compile (kf_options.tiered_compile).
 *
 *   prepare: choices read -> tier_plan: each measured choice that the cache
 *            does not hold, and whose generated side is not compiled yet,
 *            runs its cuBLASLt variant ("tiered"); the other variants get
 *            their steps (buffers, bindings) but no module -> the kernels
 *            every run needs compile now, the deferred ones are set aside
 *            -> tier_start: a thread compiles them (through the cache)
 *   run:     tier_poll at the start of each run: nothing, until the thread
 *            is done; then, once: the modules loaded, every buffer at home,
 *            the workspace zeroed, every variant of each tiered choice timed
 *            on the run's stream (as kf_compile times them without tiers),
 *            the winner stored in the cache, the run order made again, and
 *            the run goes on with it
 *
 * Why: a cold compile lasts as long as its slowest kernel, and that is a
 * generated GEMM (1-3 s in NVRTC) whose measured choice may well pick
 * cuBLASLt anyway. With tiers a cold program's first run needs only the
 * kernels no library replaces (norm prologues, attention, elementwise), and
 * the GEMMs' measurement happens once their generated side exists. The
 * numerics contract is the measured choice's: either side may run, and
 * which one runs changes at most once, at the swap.
 *
 * The swap zeroes the program's workspace: it runs at a run's start, before
 * that run's inputs are placed, and every value a run reads there is
 * written by the run first (the constants lie in their own region). A
 * failed background compile keeps the cuBLASLt sides for good; the report
 * says why. Destroying the exec cancels the compile (kernels in NVRTC
 * finish first).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime/cuda_exec_internal.h"

/* Whether a kernel of a variant other than `quick` is missing from the
 * cache (no cache: all are). A kernel cache filled by `kfuse aot` holds the
 * generated side without its timing: then the choice is measured at
 * prepare, as without tiers. */
static bool others_need_compile(kf_cuda_exec *ex, const kf_cuda_recipe *rc, uint32_t quick) {
    if (!ex->cache)
        return true;
    for (uint32_t v = 0; v < rc->n_variants; v++) {
        const kf_cuda_variant *va = &rc->variants[v];
        for (uint32_t s = 0; v != quick && s < va->n_steps && va->first_step + s < rc->n_steps;
             s++) {
            const kf_cuda_step *step = &rc->steps[va->first_step + s];
            if (step->kind != KF_CUDA_STEP_KERNEL)
                continue;
            char err[KF_MSG_MAX];
            kf_cache_key key;
            if (kf_cuda_kernel_cache_key(&step->kernel->kernel, NULL, &key, err) != KF_OK)
                return true;
            void *data = NULL;
            size_t len = 0;
            kf_cache_msg msg;
            memset(&msg, 0, sizeof msg);
            if (kf_cache_get(ex->cache, &key, &data, &len, &msg) != KF_OK || !data)
                return true;
            kf_cache_blob_free(ex->cache, data, len);
        }
    }
    return false;
}

void kf_cx_tier_plan(kf_cuda_exec *ex) {
    /* CACHE_FAIL_ON_MISS promises that nothing compiles: a miss stays an
     * error of kf_compile, not of a background thread. */
    if (!ex->ctx->tiered_compile || (ex->ctx->flags & KF_FLAG_CACHE_FAIL_ON_MISS))
        return;
    for (uint32_t gi = 0; gi < ex->recipes->n; gi++) {
        const kf_cuda_recipe *rc = &ex->recipes->recipes[gi];
        xchoice *c = &ex->choices[gi];
        if (rc->choice != KF_CUDA_CHOICE_MEASURED || rc->n_variants < 2 || c->cached)
            continue;
        uint32_t quick = KF_NONE;
        for (uint32_t v = 0; v < rc->n_variants && quick == KF_NONE; v++)
            if (kf_cuda_variant_calls_lib(rc, v))
                quick = v;
        if (quick == KF_NONE || !others_need_compile(ex, rc, quick))
            continue;
        c->tiered = c->was_tiered = true;
        c->chosen = quick;
        ex->tier.pending = true;
    }
}

bool kf_cx_tier_deferred(const kf_cuda_exec *ex, uint32_t gi, uint32_t v) {
    return ex->choices && ex->choices[gi].tiered && v != ex->choices[gi].chosen;
}

static void *tier_main(void *arg) {
    kf_cuda_exec *ex = arg;
    xtier *t = &ex->tier;
    /* One CPU fewer than a foreground compile takes: the caller's thread
     * keeps running the program meanwhile. */
    int threads = ex->ctx->num_threads;
    if (threads <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cpus > 2 ? (int)(cpus > 33 ? 32 : cpus - 1) : 1;
    }
    t->status = kf_cuda_kernels_cubins_cancel(ex->cache, &ex->mem, t->jobs, t->n_jobs, threads,
                                              &t->cancel, t->err);
    t->compile_ms = now_ms() - t->t0_ms;
    atomic_store(&t->done, true);
    return NULL;
}

void kf_cx_tier_start(kf_cuda_exec *ex) {
    xtier *t = &ex->tier;
    atomic_init(&t->done, false);
    atomic_init(&t->cancel, false);
    if (!t->pending)
        return;
    t->t0_ms = now_ms();
    if (pthread_create(&t->thread, NULL, tier_main, ex) == 0)
        t->started = true;
    else
        tier_main(ex); /* no thread: compiled now, swapped in by the first run */
}

/* Loads the deferred kernels; any failure leaves the tiered sides running. */
static kf_status load_deferred(kf_cuda_exec *ex) {
    xtier *t = &ex->tier;
    if (t->status != KF_OK)
        return t->status;
    kf_status st = KF_OK;
    for (uint32_t i = 0; i < ex->n_steps && st == KF_OK; i++) {
        xstep *s = &ex->steps[i];
        if (s->kind != KF_CUDA_STEP_KERNEL || s->k->tier_job == KF_NONE || s->k->mod)
            continue;
        if (s->k->tier_job >= t->n_jobs)
            return kf_msg_set(t->err, KF_ERR_INTERNAL, "a deferred kernel with no CUBIN");
        st = kf_cx_load_kernel(ex, s->k, &t->jobs[s->k->tier_job], t->err);
    }
    return st;
}

static void give_up(kf_cuda_exec *ex, kf_status st) {
    xtier *t = &ex->tier;
    t->failed = true;
    if (!t->err[0])
        snprintf(t->err, sizeof t->err, "%s", kf_status_str(st));
    for (uint32_t gi = 0; gi < ex->recipes->n; gi++)
        ex->choices[gi].tiered = false; /* the cuBLASLt side stays chosen, not stored */
}

kf_status kf_cx_tier_poll(kf_cuda_exec *ex, kf_cu_stream stream, bool wait, char *err) {
    xtier *t = &ex->tier;
    if (!t->pending)
        return KF_OK;
    t->runs++;
    if (!wait && !atomic_load(&t->done))
        return KF_OK; /* still compiling: this run takes the cuBLASLt sides */
    if (t->started) {
        pthread_join(t->thread, NULL);
        t->started = false;
    }
    t->pending = false;
    double t0 = now_ms();
    kf_status st = load_deferred(ex);
    if (st != KF_OK) {
        give_up(ex, st);
        return KF_OK; /* the run goes on as before; the report says why */
    }
    /* The timing runs on the buffers' homes, never on the caller's memory:
     * every buffer back home, every step of a tiered recipe bound there (the
     * deferred ones were bound at prepare, before any workspace change). */
    for (uint32_t b = 0; b < ex->n_bufs; b++)
        ex->want[b] = kf_cx_buf_ptr(ex, b);
    st = kf_cx_repoint(ex, err);
    for (uint32_t i = 0; i < ex->n_steps && st == KF_OK; i++)
        if (ex->choices[ex->steps[i].group].tiered)
            st = kf_cx_bind_step(ex, &ex->steps[i], err);
    const kf_cuda_driver *drv = ex->dev.drv;
    if (st == KF_OK && drv->cuMemsetD8Async)
        st = kf_cuda_check(drv, drv->cuMemsetD8Async(ex->ws, 0, ex->arena_bytes, stream),
                           "cuMemsetD8Async", NULL, err);
    kf_cu_event e0 = NULL, e1 = NULL;
    if (st == KF_OK)
        st = kf_cuda_event_create(&ex->dev, &e0, err);
    if (st == KF_OK)
        st = kf_cuda_event_create(&ex->dev, &e1, err);
    for (uint32_t gi = 0; gi < ex->recipes->n && st == KF_OK; gi++) {
        if (!ex->choices[gi].tiered)
            continue;
        st = kf_cx_measure_group(ex, gi, stream, e0, e1, err);
        ex->choices[gi].tiered = false;
    }
    if (e0)
        kf_cuda_event_destroy(&ex->dev, e0);
    if (e1)
        kf_cuda_event_destroy(&ex->dev, e1);
    if (st == KF_OK)
        st = kf_cx_remake_order(ex, err);
    t->swapped_at = t->runs;
    t->swap_ms = now_ms() - t0;
    return st;
}

void kf_cx_tier_free(kf_cuda_exec *ex) {
    xtier *t = &ex->tier;
    if (t->started) {
        atomic_store(&t->cancel, true);
        pthread_join(t->thread, NULL);
        t->started = false;
    }
    if (!t->jobs)
        return;
    for (uint32_t i = 0; i < t->n_jobs; i++)
        kf_cuda_cubin_release(ex->cache, &ex->mem, &t->jobs[i]);
    kf_mem_free(&ex->mem, t->jobs, t->cap_jobs * sizeof *t->jobs);
    t->jobs = NULL;
}

bool kf_cuda_exec_tier_pending(const kf_cuda_exec *ex) { return ex && ex->tier.pending; }

bool kf_cuda_exec_choice_tiered(const kf_cuda_exec *ex, uint32_t group) {
    return ex && ex->choices && ex->recipes && group < ex->recipes->n &&
           ex->choices[group].was_tiered;
}

kf_status kf_cuda_exec_tier_wait(kf_cuda_exec *ex, char *err) {
    if (!ex)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_exec_tier_wait: NULL exec");
    xtier *t = &ex->tier;
    if (t->started) {
        pthread_join(t->thread, NULL);
        t->started = false;
    }
    if (t->status != KF_OK)
        return kf_msg_set(err, t->status, "%s", t->err);
    return KF_OK;
}

void kf_cx_tier_report(const kf_cuda_exec *ex, bool json, FILE *out) {
    const xtier *t = &ex->tier;
    bool any = false;
    for (uint32_t gi = 0; gi < ex->recipes->n && !any; gi++)
        any = ex->choices[gi].was_tiered;
    if (json) {
        fprintf(out,
                ", \"tiered_compile\": {\"on\": %s, \"groups\": %s, \"pending\": %s, "
                "\"kernels\": %u, \"compile_ms\": %.3f, \"swapped_at_run\": %u, "
                "\"swap_ms\": %.3f, \"failed\": %s, \"error\": \"",
                ex->ctx->tiered_compile ? "true" : "false", any ? "true" : "false",
                t->pending ? "true" : "false", t->n_jobs, t->compile_ms, t->swapped_at, t->swap_ms,
                t->failed ? "true" : "false");
        for (const char *c = t->failed ? t->err : ""; *c; c++)
            if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20)
                fputc(*c, out);
        fputs("\"}", out);
        return;
    }
    if (!any)
        return;
    if (t->pending)
        fprintf(out,
                "  tiered compile: %u generated kernel%s compiling in the background; the "
                "groups marked tiered run cuBLASLt until a run finds them ready, times both "
                "sides and keeps the faster\n",
                t->n_jobs, t->n_jobs == 1 ? "" : "s");
    else if (t->failed)
        fprintf(out,
                "  tiered compile: the background compile failed, so the tiered groups "
                "keep cuBLASLt (not stored in the cache): %s\n",
                t->err);
    else
        fprintf(out,
                "  tiered compile: %u generated kernel%s compiled in the background in "
                "%.0f ms; run %u timed both sides (%.1f ms) and runs the winners since\n",
                t->n_jobs, t->n_jobs == 1 ? "" : "s", t->compile_ms, t->swapped_at, t->swap_ms);
}
