/*
 * cuda_exec_measure.c -- timing the variants of a MEASURED recipe (its
 * generated kernel against its cuBLASLt call and leftover kernel), the way
 * the program's runs will launch them.
 *
 *   capture each variant's steps once into a CUDA graph (one run)
 *     -> replay each twice (warm-up), then once timed: the replays a sample
 *        needs to last MEASURE_SAMPLE_MS (the same for every variant)
 *     -> capture again with that many runs in one graph
 *     -> MEASURE_ROUNDS rounds, the variants interleaved (A B, B A, A B ...)
 *        and launched back to back, one event between samples, one wait
 *     -> per variant the median sample over its runs
 *
 * Why so. A run replays the program from a CUDA graph (cuda_exec.c builds
 * one by hand, cuda_exec_capture.c captures the others), so its steps
 * follow each other with no host in between. Timing a variant by direct
 * launches instead adds the host's launch work wherever the GPU outruns it:
 * a cuBLASLt call costs the host microseconds, which a 35 us GEMM cannot
 * hide, so the side with a cuBLASLt call and a second kernel looked slower
 * than it runs (row10, 16384x256x1024 + bias + residual + LayerNorm on an
 * H100: 0.0427 ms measured against 0.0337 replayed, so the measurement
 * picked the generated kernel's 0.0364). Samples of a few hundred
 * microseconds keep the GPU at its sustained clock, and interleaving the
 * variants lets clock and power drift hit both alike.
 *
 * Where the driver cannot capture (no graph entry points, a capture or an
 * instantiation that fails) the variants are timed as before, by direct
 * launches one variant after the other; so are they when the context's
 * runs launch directly too (KF_FLAG_NO_CUDA_GRAPH). The method is part of
 * the choice's cache key (kf_cuda_choice_key), so a choice timed one way
 * is never read back for the other.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_exec_internal.h"

/* Milliseconds one run of variant v of recipe gi takes by direct launches
 * (median of MEASURE_RUNS after MEASURE_WARMUP). */
static kf_status time_direct(kf_cuda_exec *ex, uint32_t gi, uint32_t v, kf_cu_stream stream,
                             kf_cu_event e0, kf_cu_event e1, float *ms, char *err) {
    float t[MEASURE_RUNS];
    kf_status st = KF_OK;
    for (int run = 0; run < MEASURE_WARMUP + MEASURE_RUNS && st == KF_OK; run++) {
        if (run >= MEASURE_WARMUP)
            st = kf_cuda_event_record(&ex->dev, e0, stream, err);
        for (uint32_t i = 0; i < ex->n_steps && st == KF_OK; i++)
            if (ex->steps[i].group == gi && ex->steps[i].variant == v)
                st = kf_cx_launch_step(ex, &ex->steps[i], stream, err);
        if (st == KF_OK && run >= MEASURE_WARMUP) {
            st = kf_cuda_event_record(&ex->dev, e1, stream, err);
            if (st == KF_OK)
                st = kf_cuda_event_elapsed(&ex->dev, e0, e1, &t[run - MEASURE_WARMUP], err);
        }
    }
    if (st != KF_OK)
        return st;
    qsort(t, MEASURE_RUNS, sizeof t[0], kf_cx_cmp_float);
    *ms = t[MEASURE_RUNS / 2];
    return KF_OK;
}

bool kf_cx_measure_replays(const kf_cuda_exec *ex) {
    const kf_cuda_driver *drv = ex->dev.drv;
    return !(ex->ctx->flags & KF_FLAG_NO_CUDA_GRAPH) && drv && drv->cuStreamCreate &&
           drv->cuStreamBeginCapture && drv->cuStreamEndCapture &&
           drv->cuGraphInstantiateWithFlags && drv->cuGraphLaunch && drv->cuGraphExecDestroy &&
           drv->cuGraphDestroy;
}

static void drop_execs(kf_cuda_exec *ex, kf_cu_graph_exec *exec, uint32_t n) {
    for (uint32_t v = 0; v < n; v++)
        if (exec[v])
            ex->dev.drv->cuGraphExecDestroy(exec[v]);
    memset(exec, 0, n * sizeof *exec);
}

/* Every variant of recipe gi timed by graph replay (the file's comment):
 * ms[v] milliseconds a run, *done; or *done false when a capture failed
 * (then nothing was timed, and the caller launches directly). A launch or
 * an event that fails is an error. */
static kf_status time_replayed(kf_cuda_exec *ex, uint32_t gi, kf_cu_stream stream, float *ms,
                               bool *done, char *err) {
    const uint32_t n = ex->recipes->recipes[gi].n_variants;
    const kf_cuda_driver *drv = ex->dev.drv;
    kf_cu_graph_exec exec[KF_CUDA_MAX_VARIANTS] = {0};
    kf_cu_event ev[MEASURE_ROUNDS * KF_CUDA_MAX_VARIANTS + 1] = {0};
    const uint32_t n_ev = MEASURE_ROUNDS * n + 1;
    float t[KF_CUDA_MAX_VARIANTS][MEASURE_ROUNDS];
    *done = false;
    kf_status st = KF_OK;
    for (uint32_t i = 0; i < n_ev && st == KF_OK; i++)
        st = kf_cuda_event_create(&ex->dev, &ev[i], err);
    /* One run each: warm-up, then how long a run takes. */
    bool captured = st == KF_OK;
    for (uint32_t v = 0; v < n && captured; v++)
        captured = kf_cx_capture_steps(ex, gi, v, 1, &exec[v]);
    float fastest = 0;
    for (uint32_t v = 0; v < n && captured && st == KF_OK; v++) {
        for (int w = 0; w < MEASURE_WARMUP && st == KF_OK; w++)
            st = kf_cuda_check(drv, drv->cuGraphLaunch(exec[v], stream),
                               "cuGraphLaunch (a measured choice)", NULL, err);
        float one = 0;
        if (st == KF_OK)
            st = kf_cuda_event_record(&ex->dev, ev[0], stream, err);
        if (st == KF_OK)
            st = kf_cuda_check(drv, drv->cuGraphLaunch(exec[v], stream),
                               "cuGraphLaunch (a measured choice)", NULL, err);
        if (st == KF_OK)
            st = kf_cuda_event_record(&ex->dev, ev[1], stream, err);
        if (st == KF_OK)
            st = kf_cuda_event_elapsed(&ex->dev, ev[0], ev[1], &one, err);
        if (st == KF_OK && (v == 0 || one < fastest))
            fastest = one;
    }
    /* Enough runs in a sample for MEASURE_SAMPLE_MS of the fastest variant. */
    unsigned runs = 1;
    if (fastest > 0 && fastest < MEASURE_SAMPLE_MS) {
        float want = MEASURE_SAMPLE_MS / fastest + 1.0f;
        runs = want >= (float)MEASURE_MAX_RUNS ? MEASURE_MAX_RUNS : (unsigned)want;
    }
    if (captured && st == KF_OK && runs > 1) {
        drop_execs(ex, exec, n);
        for (uint32_t v = 0; v < n && captured; v++)
            captured = kf_cx_capture_steps(ex, gi, v, runs, &exec[v]);
        for (uint32_t v = 0; v < n && captured && st == KF_OK; v++) /* uploads the graph */
            st = kf_cuda_check(drv, drv->cuGraphLaunch(exec[v], stream),
                               "cuGraphLaunch (a measured choice)", NULL, err);
    }
    /* The rounds: A B, B A, A B, ... back to back, then one wait. */
    uint32_t slot_of[MEASURE_ROUNDS * KF_CUDA_MAX_VARIANTS] = {0};
    if (captured && st == KF_OK)
        st = kf_cuda_event_record(&ex->dev, ev[0], stream, err);
    for (uint32_t k = 0; captured && k + 1 < n_ev && st == KF_OK; k++) {
        uint32_t round = k / n, i = k % n;
        uint32_t v = round % 2 ? n - 1 - i : i;
        slot_of[k] = v;
        st = kf_cuda_check(drv, drv->cuGraphLaunch(exec[v], stream),
                           "cuGraphLaunch (a measured choice)", NULL, err);
        if (st == KF_OK)
            st = kf_cuda_event_record(&ex->dev, ev[k + 1], stream, err);
    }
    uint32_t got[KF_CUDA_MAX_VARIANTS] = {0};
    for (uint32_t k = 0; captured && k + 1 < n_ev && st == KF_OK; k++) {
        float s = 0;
        st = kf_cuda_event_elapsed(&ex->dev, ev[k], ev[k + 1], &s, err);
        uint32_t v = slot_of[k];
        t[v][got[v]++] = s / (float)runs;
    }
    if (captured && st == KF_OK) {
        for (uint32_t v = 0; v < n; v++) {
            qsort(t[v], got[v], sizeof t[v][0], kf_cx_cmp_float);
            ms[v] = t[v][got[v] / 2];
        }
        *done = true;
    }
    /* Nothing of ours in flight before the graphs go (a failed launch, or
     * warm-up replays before a capture that failed); err keeps the first
     * error. */
    if (!*done)
        (void)kf_cuda_stream_sync(&ex->dev, stream, NULL, NULL);
    drop_execs(ex, exec, n);
    for (uint32_t i = 0; i < n_ev; i++)
        if (ev[i])
            kf_cuda_event_destroy(&ex->dev, ev[i]);
    return st;
}

kf_status kf_cx_measure_group(kf_cuda_exec *ex, uint32_t gi, kf_cu_stream stream, kf_cu_event e0,
                              kf_cu_event e1, char *err) {
    const kf_cuda_recipe *rc = &ex->recipes->recipes[gi];
    xchoice *c = &ex->choices[gi];
    kf_status st = KF_OK;
    bool done = false;
    c->replayed = false;
    if (kf_cx_measure_replays(ex)) {
        st = time_replayed(ex, gi, stream, c->ms, &done, err);
        c->replayed = done;
    }
    for (uint32_t v = 0; v < rc->n_variants && st == KF_OK && !done; v++)
        st = time_direct(ex, gi, v, stream, e0, e1, &c->ms[v], err);
    c->chosen = 0;
    c->by_margin = false;
    if (st == KF_OK)
        c->chosen = kf_cuda_choice_pick_recipe(rc, c->ms, ex->ctx->choice_margin,
                                               ex->ctx->choice_load_bias, &c->by_margin);
    /* Kept for the next process on this device (a store that fails costs
     * that process a measurement, nothing else). A choice timed directly
     * because the capture failed is not kept under the replay's key. */
    if (st == KF_OK && c->keyed && (done || !kf_cx_measure_replays(ex)))
        (void)kf_cuda_choice_store(ex->cache, &c->key, rc->n_variants, c->chosen, c->ms);
    return st;
}
