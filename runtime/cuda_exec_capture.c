/*
 * cuda_exec_capture.c -- runs replayed from CUDA graphs that the executor
 * captured from its own launches.
 *
 * A program whose steps are all plain kernels runs as the graph prepare
 * built by hand (cuda_exec.c, build_graph). One with a cuBLASLt call or a
 * cluster launch cannot be built that way, and launching it step by step
 * costs the host far more than its kernels' launches: cuBLASLt's own host
 * work is most of a GPT-2 block's 66 us per run (measured on an H200, five
 * steps, four of them cuBLASLt). Such a program captures its steps once
 * into a graph and replays it with one cuGraphLaunch.
 *
 * Every captured parameter (kernel arguments, tensor maps, cuBLASLt's
 * operand and bias pointers) follows from the buffers' addresses cur[] and
 * the program's workspace, so a graph is keyed by cur[] and is valid for
 * exactly those addresses. A set of addresses is captured when it comes
 * back among the last XCAP_SLOTS sets launched directly (so two buffers
 * that swap roles on every run are both captured, and a caller whose
 * pointers are new on every run never pays for a capture it cannot reuse);
 * XCAP_SLOTS graphs are kept, the least recently used replaced. A workspace change drops them all. A capture
 * that fails turns capturing off for the program, which then launches step
 * by step as before. KF_FLAG_NO_CUDA_GRAPH turns it off too.
 *
 * The capture runs on a private non-blocking stream in relaxed mode (it
 * executes nothing), so it neither waits for nor disturbs the caller's
 * streams; the replay is launched on the run's stream, in the same order
 * relative to the caller's work as the direct launches would have been.
 */
#include <string.h>

#include "runtime/cuda_exec_internal.h"

/* Whether the program replays captured graphs: no hand-built graph, and a
 * step whose direct launch costs more than a graph launch (a cuBLASLt call
 * or a cluster launch; or several steps). */
static bool capture_wanted(const kf_cuda_exec *ex) {
    const kf_cuda_driver *drv = ex->dev.drv;
    if (ex->cap_off || ex->graph_exec || ex->n_order == 0 ||
        (ex->ctx->flags & KF_FLAG_NO_CUDA_GRAPH) || !drv->cuStreamBeginCapture ||
        !drv->cuStreamEndCapture || !drv->cuGraphInstantiateWithFlags || !drv->cuGraphLaunch ||
        !drv->cuGraphExecDestroy || !drv->cuGraphDestroy || !drv->cuStreamCreate)
        return false;
    return ex->n_order > 1 || ex->steps[ex->order[0]].kind == KF_CUDA_STEP_GEMM;
}

/* The history ring and the slots' keys, in one allocation made at the
 * first run that wants them. */
static size_t capture_words(const kf_cuda_exec *ex) {
    return (size_t)(ex->n_bufs ? ex->n_bufs : 1) * (2 * XCAP_SLOTS);
}
static bool capture_arrays(kf_cuda_exec *ex) {
    if (ex->cap_prev)
        return true;
    size_t n = ex->n_bufs ? ex->n_bufs : 1;
    ex->cap_prev = kf_mem_calloc(&ex->mem, capture_words(ex), sizeof *ex->cap_prev);
    if (!ex->cap_prev)
        return false;
    for (int i = 0; i < XCAP_SLOTS; i++)
        ex->caps[i].key = ex->cap_prev + n * (size_t)(XCAP_SLOTS + i);
    return true;
}

/* Whether cur[] is among the last sets launched directly; then or not, it
 * becomes the newest of them. */
static bool seen_recently(kf_cuda_exec *ex, size_t key_bytes) {
    size_t n = ex->n_bufs ? ex->n_bufs : 1;
    bool seen = false;
    for (unsigned i = 0; i < ex->cap_hist_n && !seen; i++)
        seen = memcmp(ex->cap_prev + n * i, ex->cur, key_bytes) == 0;
    memcpy(ex->cap_prev + n * ex->cap_hist_next, ex->cur, key_bytes);
    ex->cap_hist_next = (ex->cap_hist_next + 1) % XCAP_SLOTS;
    if (ex->cap_hist_n < XCAP_SLOTS)
        ex->cap_hist_n++;
    return seen;
}

bool kf_cx_capture_steps(kf_cuda_exec *ex, uint32_t gi, uint32_t v, unsigned runs,
                         kf_cu_graph_exec *out) {
    const kf_cuda_driver *drv = ex->dev.drv;
    char err[KF_MSG_MAX];
    *out = NULL;
    if (!ex->cap_stream && drv->cuStreamCreate(&ex->cap_stream, KF_CU_STREAM_NON_BLOCKING) != 0) {
        ex->cap_stream = NULL;
        return false;
    }
    if (drv->cuStreamBeginCapture(ex->cap_stream, KF_CU_STREAM_CAPTURE_MODE_RELAXED) != 0)
        return false;
    kf_status st = KF_OK;
    uint32_t n = gi == KF_NONE ? ex->n_order : ex->n_steps;
    for (unsigned run = 0; run < runs && st == KF_OK; run++)
        for (uint32_t i = 0; i < n && st == KF_OK; i++) {
            const xstep *s = gi == KF_NONE ? &ex->steps[ex->order[i]] : &ex->steps[i];
            if (gi == KF_NONE || (s->group == gi && s->variant == v))
                st = kf_cx_launch_step(ex, s, ex->cap_stream, err);
        }
    kf_cu_graph graph = NULL;
    kf_cu_result r = drv->cuStreamEndCapture(ex->cap_stream, &graph); /* always ends it */
    bool ok = st == KF_OK && r == 0 && graph;
    if (ok && (drv->cuGraphInstantiateWithFlags(out, graph, 0) != 0 || !*out)) {
        *out = NULL;
        ok = false;
    }
    if (graph)
        drv->cuGraphDestroy(graph);
    return ok;
}

kf_status kf_cx_launch_captured(kf_cuda_exec *ex, kf_cu_stream stream, bool *done, char *err) {
    *done = false;
    if (!capture_wanted(ex) || !capture_arrays(ex))
        return KF_OK;
    const kf_cuda_driver *drv = ex->dev.drv;
    size_t key_bytes = (size_t)ex->n_bufs * sizeof *ex->cur;
    xcapture *slot = NULL;
    for (int i = 0; i < XCAP_SLOTS && !slot; i++)
        if (ex->caps[i].exec && memcmp(ex->caps[i].key, ex->cur, key_bytes) == 0)
            slot = &ex->caps[i];
    if (!slot) {
        if (!seen_recently(ex, key_bytes))
            return KF_OK; /* new addresses: launched directly */
        slot = &ex->caps[0];
        for (int i = 1; i < XCAP_SLOTS; i++)
            if (!ex->caps[i].exec || (slot->exec && ex->caps[i].used < slot->used))
                slot = &ex->caps[i];
        kf_cu_graph_exec exec = NULL;
        if (!kf_cx_capture_steps(ex, KF_NONE, 0, 1, &exec)) {
            ex->cap_off = true; /* direct launches from now on */
            return KF_OK;
        }
        if (slot->exec)
            drv->cuGraphExecDestroy(slot->exec);
        slot->exec = exec;
        memcpy(slot->key, ex->cur, key_bytes);
        ex->cap_made++;
    }
    slot->used = ++ex->cap_clock;
    ex->cap_replays++;
    *done = true;
    kf_cu_result r = drv->cuGraphLaunch(slot->exec, stream);
    return r ? kf_cuda_check(drv, r, "cuGraphLaunch (a captured run)", NULL, err) : KF_OK;
}

void kf_cx_capture_drop(kf_cuda_exec *ex) {
    for (int i = 0; i < XCAP_SLOTS; i++) {
        if (ex->caps[i].exec)
            ex->dev.drv->cuGraphExecDestroy(ex->caps[i].exec);
        ex->caps[i].exec = NULL;
        ex->caps[i].used = 0;
    }
    ex->cap_hist_n = ex->cap_hist_next = 0;
}

void kf_cx_capture_free(kf_cuda_exec *ex) {
    if (ex->dev_open)
        kf_cx_capture_drop(ex);
    if (ex->cap_prev) {
        kf_mem_free(&ex->mem, ex->cap_prev, capture_words(ex) * sizeof *ex->cap_prev);
        ex->cap_prev = NULL;
    }
    if (ex->dev_open && ex->cap_stream)
        kf_cuda_stream_destroy(&ex->dev, ex->cap_stream);
    ex->cap_stream = NULL;
}
