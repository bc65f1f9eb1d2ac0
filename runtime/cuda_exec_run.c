/*
 * cuda_exec_run.c -- running a prepared CUDA executor (cuda_exec.h): host
 * and device-resident runs, capture, the one-run-at-a-time contract, the
 * gather clamp flag, the caller's workspace, copies, statistics and the
 * report. Its state and prepare are in cuda_exec.c (cuda_exec_internal.h).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cuda_exec_internal.h"

static const char *const xphase_names[XPH_COUNT] = {
    "driver", "device",  "cache_open", "choices_read", "cublaslt", "kernels",
    "memory", "measure", "constants",  "cuda_graph",   "bind",     "cublaslt_thread"};

/* Whether `stream` is capturing into a CUDA graph (a driver that cannot
 * say: no). */
static bool capturing(const kf_cuda_exec *ex, kf_cu_stream stream) {
    int status = KF_CU_STREAM_CAPTURE_STATUS_NONE;
    return ex->dev.drv->cuStreamIsCapturing &&
           ex->dev.drv->cuStreamIsCapturing(stream, &status) == 0 &&
           status != KF_CU_STREAM_CAPTURE_STATUS_NONE;
}

/* One step's host time in the first run's record. */
static void first_step(xfirst *f, bool gemm, double ms) {
    if (gemm) {
        f->gemm_first = f->n_gemms++ ? f->gemm_first : ms;
        f->gemms += ms;
        f->gemm_max = ms > f->gemm_max ? ms : f->gemm_max;
    } else {
        f->n_kernels++;
        f->kernels += ms;
        f->kernel_max = ms > f->kernel_max ? ms : f->kernel_max;
    }
}

/* Every step of the run on `stream`. The device's context is made current
 * once, then each kernel is one cuLaunchKernel with arguments bound at
 * prepare time: the host cost per kernel is the driver's launch itself.
 * While the stream captures, the steps are launched one by one, so the
 * caller's graph gets plain kernel nodes. Otherwise a program without the
 * hand-built graph may replay one captured from its own launches. `rec`:
 * the first run's record (NULL on later runs), where each launch's host
 * time goes. */
static kf_status launch_all(kf_cuda_exec *ex, kf_cu_stream stream, xfirst *rec, char *err) {
    kf_status st = kf_cx_make_current(ex, err);
    double t0 = rec ? now_ms() : 0;
    if (st == KF_OK && ex->graph_exec && !capturing(ex, stream)) {
        kf_cu_result r = ex->dev.drv->cuGraphLaunch(ex->graph_exec, stream);
        if (r != 0)
            st = kf_cuda_check(ex->dev.drv, r, "cuGraphLaunch",
                               kf_cx_step_name(ex, &ex->steps[ex->order[0]]), err);
        if (rec)
            rec->graph = now_ms() - t0;
        return st;
    }
    if (st == KF_OK && !capturing(ex, stream)) {
        bool done = false;
        st = kf_cx_launch_captured(ex, stream, &done, err);
        if (rec)
            rec->graph = now_ms() - t0;
        if (st != KF_OK || done)
            return st;
    }
    for (uint32_t i = 0; i < ex->n_order && st == KF_OK; i++) {
        const xstep *s = &ex->steps[ex->order[i]];
        double ts = rec ? now_ms() : 0;
        st = kf_cx_launch_step(ex, s, stream, err);
        if (rec)
            first_step(rec, s->kind == KF_CUDA_STEP_GEMM, now_ms() - ts);
    }
    return st;
}

static bool prepared(const kf_cuda_exec *ex) { return ex && ex->order; }

/* The clamp flag word: zeroed on `stream`, waited for (at prepare, and after
 * a clamp was seen); read once the caller synchronized what may set it. */
kf_status kf_cx_clear_flags(kf_cuda_exec *ex, kf_cu_stream stream, char *err) {
    const kf_cuda_driver *drv = ex->dev.drv;
    if (ex->flags_buf == KF_NONE)
        return KF_OK;
    kf_status st =
        !drv->cuMemsetD8Async
            ? kf_msg_set(err, KF_ERR_UNSUPPORTED, "the driver has no cuMemsetD8Async")
            : kf_cuda_check(drv,
                            drv->cuMemsetD8Async(kf_cx_buf_ptr(ex, ex->flags_buf), 0, 4, stream),
                            "cuMemsetD8Async", NULL, err);
    return st == KF_OK ? kf_cuda_stream_sync(&ex->dev, stream, "the clamp flag", err) : st;
}
static kf_status take_flags(kf_cuda_exec *ex, kf_cu_stream stream, char *err) {
    unsigned v = 0;
    kf_status st =
        ex->flags_buf == KF_NONE
            ? KF_OK
            : kf_cuda_copy_to_host(&ex->dev, &v, kf_cx_buf_ptr(ex, ex->flags_buf), sizeof v, err);
    if (st != KF_OK || v == 0)
        return st;
    ex->clamp_seen = true;
    return kf_cx_clear_flags(ex, stream, err);
}

kf_status kf_cuda_exec_index_clamps(kf_cuda_exec *ex, void *stream, bool *clamped, char *err) {
    if (!prepared(ex) || !clamped)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_exec_index_clamps: bad argument");
    kf_cu_stream s = stream ? (kf_cu_stream)stream : ex->stream;
    kf_status st = ex->flags_buf == KF_NONE ? KF_OK : kf_cx_make_current(ex, err);
    if (st == KF_OK && ex->flags_buf != KF_NONE)
        st = kf_cuda_stream_sync(&ex->dev, s, "the runs before the clamp flag", err);
    if (st == KF_OK)
        st = take_flags(ex, s, err);
    *clamped = st == KF_OK && ex->clamp_seen;
    ex->clamp_seen = ex->clamp_seen && st != KF_OK;
    return st;
}

kf_status kf_cuda_exec_launch(kf_cuda_exec *ex, void *stream, char *err) {
    if (!prepared(ex))
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_exec_launch: no prepared exec");
    return launch_all(ex, stream ? (kf_cu_stream)stream : ex->stream, NULL, err);
}

/* The one-stream contract: a run on another stream than the last run's is
 * refused while that run has not completed (a captured run is not
 * executed, so it neither waits nor counts). */
static kf_status check_idle(kf_cuda_exec *ex, kf_cu_stream stream, bool captured, char *err) {
    const kf_cuda_driver *drv = ex->dev.drv;
    if (!ex->ran || captured || stream == ex->last_stream || !drv->cuEventQuery)
        return KF_OK;
    kf_cu_result r = drv->cuEventQuery(ex->done);
    if (r == KF_CU_ERROR_NOT_READY)
        return kf_msg_set(err, KF_ERR_BUSY,
                          "the program's last run, on another stream, has not completed; a "
                          "program runs on one stream at a time (synchronize that stream first, "
                          "or compile a second program for the second stream)");
    return r ? kf_cuda_check(drv, r, "cuEventQuery", NULL, err) : KF_OK;
}

/* After the steps: the event the next run on another stream checks. */
static kf_status mark_done(kf_cuda_exec *ex, kf_cu_stream stream, bool captured, char *err) {
    if (captured)
        return KF_OK;
    ex->ran = true;
    ex->last_stream = stream;
    return kf_cuda_event_record(&ex->dev, ex->done, stream, err);
}

kf_status kf_cuda_exec_time_groups(kf_cuda_exec *ex, int reps, double *ms, char *err) {
    if (!prepared(ex) || !ms || reps < 1)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_exec_time_groups: bad argument");
    uint32_t ng = ex->plan->n_groups, n = ex->n_order;
    kf_cu_event *ev = kf_mem_calloc(&ex->mem, n + 1, sizeof *ev);
    float *t = kf_mem_calloc(&ex->mem, (size_t)ng * (size_t)reps, sizeof *t);
    kf_status st = ev && t ? KF_OK : kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory");
    uint32_t made = 0;
    while (made <= n && st == KF_OK) {
        st = kf_cuda_event_create(&ex->dev, &ev[made], err);
        made += st == KF_OK;
    }
    for (int r = 0; r < reps && st == KF_OK; r++) {
        for (uint32_t i = 0; i < n && st == KF_OK; i++) {
            st = kf_cuda_event_record(&ex->dev, ev[i], ex->stream, err);
            if (st == KF_OK)
                st = kf_cx_launch_step(ex, &ex->steps[ex->order[i]], ex->stream, err);
        }
        if (st == KF_OK)
            st = kf_cuda_event_record(&ex->dev, ev[n], ex->stream, err);
        if (st == KF_OK)
            st = kf_cuda_stream_sync(&ex->dev, ex->stream, "timed steps", err);
        for (uint32_t i = 0; i < n && st == KF_OK; i++) {
            float e = 0;
            st = kf_cuda_event_elapsed(&ex->dev, ev[i], ev[i + 1], &e, err);
            t[(size_t)ex->steps[ex->order[i]].group * (size_t)reps + (size_t)r] += e;
        }
    }
    for (uint32_t g = 0; g < ng && st == KF_OK; g++) {
        float *v = t + (size_t)g * (size_t)reps;
        qsort(v, (size_t)reps, sizeof *v, kf_cx_cmp_float);
        ms[g] = reps % 2 ? v[reps / 2] : 0.5 * ((double)v[reps / 2 - 1] + v[reps / 2]);
    }
    for (uint32_t i = 0; i < made && ev; i++)
        kf_cuda_event_destroy(&ex->dev, ev[i]);
    kf_mem_free(&ex->mem, t, (size_t)ng * (size_t)reps * sizeof *t);
    kf_mem_free(&ex->mem, ev, (n + 1) * sizeof *ev);
    return st;
}

kf_status kf_cuda_exec_run(kf_cuda_exec *ex, void *const *bound, void *stream, char *err) {
    if (!prepared(ex) || !bound)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_exec_run: NULL argument");
    const kf_graph *g = ex->graph;
    kf_cu_stream s = stream ? (kf_cu_stream)stream : ex->stream;
    xfirst *rec = ex->first.done ? NULL : &ex->first;
    double t0 = rec ? now_ms() : 0, tl = 0;
    kf_status st = kf_cx_make_current(ex, err);
    if (st == KF_OK)
        st = check_idle(ex, s, false, err);
    /* A tiered compile's winners swapped in, once they are compiled. */
    if (st == KF_OK)
        st = kf_cx_tier_poll(ex, s, false, err);
    /* Every buffer at home (a device-resident run may have moved some). */
    for (uint32_t b = 0; b < ex->n_bufs; b++)
        ex->want[b] = kf_cx_buf_ptr(ex, b);
    if (st == KF_OK)
        st = kf_cx_repoint(ex, err);
    for (uint32_t i = 0; i < g->n_inputs && st == KF_OK; i++) {
        const kf_tensor *t = g->inputs[i];
        if (bound[t->id] && ex->buf_of[t->id] != KF_NONE)
            st = kf_cuda_copy_to_device(&ex->dev, kf_cx_buf_ptr(ex, ex->buf_of[t->id]),
                                        bound[t->id], kf_cx_tensor_bytes(t), err);
    }
    if (rec) {
        tl = now_ms();
        rec->enter = tl - t0; /* with the inputs' copies */
    }
    if (st == KF_OK)
        st = launch_all(ex, s, rec, err);
    if (rec)
        rec->launch = now_ms() - tl;
    if (st == KF_OK)
        st = mark_done(ex, s, false, err);
    const char *last =
        ex->n_order ? kf_cx_step_name(ex, &ex->steps[ex->order[ex->n_order - 1]]) : NULL;
    if (st == KF_OK)
        st = kf_cuda_stream_sync(&ex->dev, s, last, err);
    if (st == KF_OK)
        st = take_flags(ex, s, err); /* synchronized already: one 4-byte read */
    for (uint32_t i = 0; i < g->n_outputs && st == KF_OK; i++) {
        const kf_tensor *t = g->outputs[i].tensor;
        if (!bound[t->id] || t->op == KF_OP_INPUT)
            continue;
        st = kf_cuda_exec_copy_out(ex, t->id, bound[t->id], kf_cx_tensor_bytes(t), err);
    }
    if (rec && st == KF_OK) {
        rec->total = now_ms() - t0;
        rec->after = rec->total - rec->enter - rec->launch; /* the sync, the copies out */
        rec->done = true;
    }
    return st;
}

/* The buffer that holds tensor t's bytes (a view's: its base's), KF_NONE. */
static uint32_t buf_of_tensor(const kf_cuda_exec *ex, uint32_t t) {
    return ex->buf_of[kf_plan_buffer_of(ex->plan, t)];
}

/* Whether output t may be written straight into the caller's buffer: its
 * buffer holds t itself (not a view's base, an input or a constant). */
static bool output_in_place(const kf_cuda_exec *ex, uint32_t t) {
    uint32_t b = buf_of_tensor(ex, t);
    return b != KF_NONE && ex->bufs[b].tensor == t && !ex->bufs[b].constant &&
           ex->graph->nodes[t]->op != KF_OP_INPUT;
}

kf_status kf_cuda_exec_run_device(kf_cuda_exec *ex, void *const *bound, void *stream, char *err) {
    if (!prepared(ex) || !bound)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_exec_run_device: NULL argument");
    const kf_graph *g = ex->graph;
    kf_cu_stream s = (kf_cu_stream)stream;
    xfirst *rec = ex->first.done ? NULL : &ex->first;
    double t0 = rec ? now_ms() : 0, tp = 0, tl = 0;
    bool cap = capturing(ex, s);
    kf_status st = kf_cx_make_current(ex, err);
    if (st == KF_OK)
        st = check_idle(ex, s, cap, err);
    /* A tiered compile's winners swapped in, once they are compiled (never
     * while the caller captures: the swap times the sides). */
    if (st == KF_OK && !cap)
        st = kf_cx_tier_poll(ex, s, false, err);
    if (st != KF_OK)
        return st;
    for (uint32_t b = 0; b < ex->n_bufs; b++)
        ex->want[b] = kf_cx_buf_ptr(ex, b);
    for (uint32_t i = 0; i < g->n_inputs; i++) {
        uint32_t t = g->inputs[i]->id;
        if (bound[t] && ex->buf_of[t] != KF_NONE)
            ex->want[ex->buf_of[t]] = (kf_cu_deviceptr)(uintptr_t)bound[t];
    }
    /* Outputs in place where their buffer is their own; the rest are copied
     * after the steps, on the stream. */
    for (uint32_t i = 0; i < g->n_outputs; i++) {
        uint32_t t = g->outputs[i].tensor->id;
        if (bound[t] && output_in_place(ex, t))
            ex->want[buf_of_tensor(ex, t)] = (kf_cu_deviceptr)(uintptr_t)bound[t];
    }
    if (rec) {
        tp = now_ms();
        rec->enter = tp - t0;
    }
    st = kf_cx_repoint(ex, err);
    if (rec) {
        tl = now_ms();
        rec->repoint = tl - tp;
    }
    if (st == KF_OK)
        st = launch_all(ex, s, rec, err);
    if (rec)
        rec->launch = now_ms() - tl;
    for (uint32_t i = 0; i < g->n_outputs && st == KF_OK; i++) {
        const kf_tensor *t = g->outputs[i].tensor;
        if (!bound[t->id] || output_in_place(ex, t->id))
            continue;
        uint32_t b = buf_of_tensor(ex, t->id);
        if (b == KF_NONE || ex->cur[b] != (kf_cu_deviceptr)(uintptr_t)bound[t->id])
            st = kf_cuda_exec_copy_device(ex, t->id, (kf_cu_deviceptr)(uintptr_t)bound[t->id],
                                          kf_cx_tensor_bytes(t), stream, err);
    }
    if (st == KF_OK)
        st = mark_done(ex, s, cap, err);
    if (rec && st == KF_OK) {
        rec->total = now_ms() - t0;
        rec->after = rec->total - rec->enter - rec->repoint - rec->launch; /* copies, event */
        rec->captured = cap;
        rec->done = true;
    }
    return st;
}

kf_status kf_cuda_exec_copy_device(kf_cuda_exec *ex, uint32_t t, kf_cu_deviceptr dst, size_t bytes,
                                   void *stream, char *err) {
    if (!prepared(ex) || !dst || t >= ex->graph->n_nodes)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_exec_copy_device: bad argument");
    uint32_t b = buf_of_tensor(ex, t);
    if (b == KF_NONE)
        return kf_msg_set(err, KF_ERR_NOT_FOUND, "tensor %%%u has no device buffer", t);
    uint32_t vg = ex->plan->group_of[t];
    if (vg != KF_NONE && ex->plan->groups[vg].kind == KF_GROUP_VIEW &&
        !ex->plan->groups[vg].view_contiguous)
        return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                          "output %%%u is a non-contiguous view; the plan should have copied it",
                          t);
    const kf_cuda_driver *drv = ex->dev.drv;
    if (!drv->cuMemcpyDtoDAsync)
        return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                          "the CUDA driver has no cuMemcpyDtoDAsync (needed to copy output %%%u)",
                          t);
    kf_status st = kf_cx_make_current(ex, err);
    if (st != KF_OK)
        return st;
    return kf_cuda_check(drv, drv->cuMemcpyDtoDAsync(dst, ex->cur[b], bytes, (kf_cu_stream)stream),
                         "cuMemcpyDtoDAsync", NULL, err);
}

kf_status kf_cuda_exec_check_pointer(kf_cuda_exec *ex, const void *ptr, size_t bytes, bool device,
                                     size_t align, char *err) {
    return kf_cuda_check_pointer(&ex->dev, ptr, bytes, device, align, err);
}

size_t kf_cuda_exec_workspace_size(const kf_cuda_exec *ex) { return ex ? ex->arena_bytes : 0; }

kf_status kf_cuda_exec_set_workspace(kf_cuda_exec *ex, kf_cu_deviceptr ws, size_t bytes,
                                     char *err) {
    if (!prepared(ex))
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "no prepared exec");
    if (ws && bytes < ex->arena_bytes)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "a workspace of %zu bytes, but the program needs %zu "
                          "(kf_program_workspace_size)",
                          bytes, ex->arena_bytes);
    if (ws && (ws & (ARENA_ALIGN - 1)) != 0)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "the workspace 0x%llx is not %u-byte aligned", ws, ARENA_ALIGN);
    kf_status st = ws ? kf_cuda_exec_check_pointer(ex, (const void *)(uintptr_t)ws, ex->arena_bytes,
                                                   true, ARENA_ALIGN, err)
                      : kf_cx_make_current(ex, err);
    /* The last run may still use the workspace being replaced. */
    if (st == KF_OK && ex->ran)
        st = kf_cuda_check(ex->dev.drv, ex->dev.drv->cuEventSynchronize(ex->done),
                           "cuEventSynchronize", NULL, err);
    if (st != KF_OK)
        return st;
    if (ws) {
        if (ex->own_ws)
            kf_cuda_mem_free(&ex->dev, ex->own_ws);
        ex->own_ws = 0;
        ex->ws = ws;
    } else {
        if (!ex->own_ws)
            st = kf_cuda_mem_alloc(&ex->dev, ex->arena_bytes ? ex->arena_bytes : 1, &ex->own_ws,
                                   err);
        if (st != KF_OK)
            return st;
        ex->ws = ex->own_ws;
    }
    /* The next run rebinds every step of a buffer that moved; graphs
     * captured with the old workspace are dropped. */
    kf_cx_capture_drop(ex);
    if (ex->lt)
        st = kf_blt_set_workspace(ex->lt, kf_cx_buf_ptr(ex, ex->lt_ws_buf), KF_BLT_WORKSPACE_BYTES,
                                  err);
    return st;
}

kf_status kf_cuda_exec_copy_out(kf_cuda_exec *ex, uint32_t t, void *dst, size_t bytes, char *err) {
    if (!prepared(ex) || !dst || t >= ex->graph->n_nodes)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_exec_copy_out: bad argument");
    uint32_t b = ex->buf_of[kf_plan_buffer_of(ex->plan, t)];
    if (b == KF_NONE)
        return kf_msg_set(err, KF_ERR_NOT_FOUND, "tensor %%%u has no device buffer", t);
    uint32_t vg = ex->plan->group_of[t];
    if (vg != KF_NONE && ex->plan->groups[vg].kind == KF_GROUP_VIEW &&
        !ex->plan->groups[vg].view_contiguous)
        return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                          "output %%%u is a non-contiguous view; the plan should have copied it",
                          t);
    return kf_cuda_copy_to_host(&ex->dev, dst, ex->cur[b], bytes, err);
}

kf_status kf_cuda_exec_set_input(kf_cuda_exec *ex, uint32_t t, const void *src, size_t bytes,
                                 char *err) {
    if (!prepared(ex) || !src || t >= ex->graph->n_nodes || ex->buf_of[t] == KF_NONE)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_exec_set_input: bad argument");
    return kf_cuda_copy_to_device(&ex->dev, kf_cx_buf_ptr(ex, ex->buf_of[t]), src, bytes, err);
}

size_t kf_cuda_exec_launch_count(const kf_cuda_exec *ex) { return ex ? ex->n_order : 0; }
void *kf_cuda_exec_stream(const kf_cuda_exec *ex) { return ex ? (void *)ex->stream : NULL; }
const kf_cuda_device *kf_cuda_exec_device(const kf_cuda_exec *ex) { return ex ? &ex->dev : NULL; }
const kf_cuda_recipes *kf_cuda_exec_recipes(const kf_cuda_exec *ex) {
    return ex ? ex->recipes : NULL;
}

void kf_cuda_exec_cache_stats(const kf_cuda_exec *ex, unsigned *compiled, unsigned *hits) {
    if (compiled)
        *compiled = ex ? ex->compiled : 0;
    if (hits)
        *hits = ex ? ex->hits : 0;
}

void kf_cuda_exec_arena_stats(const kf_cuda_exec *ex, size_t *arena, size_t *unshared) {
    if (arena)
        *arena = ex ? ex->arena_bytes : 0;
    if (unshared)
        *unshared = ex ? ex->unshared_bytes : 0;
}

bool kf_cuda_exec_choice_cached(const kf_cuda_exec *ex, uint32_t group) {
    return prepared(ex) && group < ex->recipes->n && ex->choices[group].cached;
}
bool kf_cuda_exec_uses_cublaslt(const kf_cuda_exec *ex) { return ex && ex->lt; }

bool kf_cuda_exec_choice(const kf_cuda_exec *ex, uint32_t group, uint32_t *chosen, float *ms) {
    if (!prepared(ex) || group >= ex->recipes->n ||
        ex->recipes->recipes[group].choice != KF_CUDA_CHOICE_MEASURED)
        return false;
    if (chosen)
        *chosen = ex->choices[group].chosen;
    for (uint32_t v = 0; ms && v < KF_CUDA_MAX_VARIANTS; v++)
        ms[v] = ex->choices[group].ms[v];
    return true;
}

void kf_cuda_exec_report(const kf_cuda_exec *ex, bool json, FILE *out) {
    if (!prepared(ex) || !out)
        return;
    if (json) {
        fprintf(out, "{\"device\": ");
        fputc('"', out);
        for (const char *c = ex->dev.name; *c; c++)
            if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20)
                fputc(*c, out);
        fprintf(out, "\", \"measured\": [");
        bool first = true;
        for (uint32_t gi = 0; gi < ex->recipes->n; gi++) {
            const kf_cuda_recipe *rc = &ex->recipes->recipes[gi];
            if (rc->choice != KF_CUDA_CHOICE_MEASURED)
                continue;
            fprintf(out,
                    "%s{\"group\": %u, \"chosen\": \"%s\", \"cached\": %s, \"tiered\": %s, "
                    "\"replayed\": %s, \"by_margin\": %s, \"ms\": [",
                    first ? "" : ", ", gi, rc->variants[ex->choices[gi].chosen].label,
                    ex->choices[gi].cached ? "true" : "false",
                    ex->choices[gi].was_tiered ? "true" : "false",
                    ex->choices[gi].replayed ? "true" : "false",
                    ex->choices[gi].by_margin ? "true" : "false");
            for (uint32_t v = 0; v < rc->n_variants; v++)
                fprintf(out, "%s%.6f", v ? ", " : "", (double)ex->choices[gi].ms[v]);
            fputs("]}", out);
            first = false;
        }
        uint32_t algos_cached = 0, heuristics = 0;
        kf_blt_algo_counts(ex->lt, &algos_cached, &heuristics);
        fprintf(out,
                "], \"choice_margin\": %g, \"choice_load_bias\": %g, \"launches_per_run\": %u, "
                "\"arena_bytes\": %zu, \"constant_bytes\": %zu, "
                "\"kernels_compiled\": %u, \"kernels_cached\": %u, \"cublaslt\": %s, "
                "\"cublaslt_loaded\": %s, \"cublaslt_algos_cached\": %u, "
                "\"cublaslt_heuristics\": %u, \"captured_graphs\": %u, "
                "\"captured_replays\": %u, \"prepare_ms\": {",
                ex->ctx->choice_margin, ex->ctx->choice_load_bias, ex->n_order, ex->arena_bytes,
                ex->consts_bytes, ex->compiled, ex->hits, ex->lt ? "true" : "false",
                ex->lt_preloaded || ex->lt ? "true" : "false", algos_cached, heuristics,
                ex->cap_made, ex->cap_replays);
        for (int i = 0; i < XPH_COUNT; i++)
            fprintf(out, "%s\"%s\": %.3f", i ? ", " : "", xphase_names[i], ex->phase_ms[i]);
        kf_blt_timing lt_ms;
        kf_blt_timings(ex->lt, &lt_ms);
        fprintf(out,
                "}, \"cublaslt_ms\": {\"dlopen\": %.3f, \"dlsym\": %.3f, \"wait\": %.3f, "
                "\"create\": %.3f, \"plans\": %.3f, \"algo_load\": %.3f, \"heuristic\": %.3f, "
                "\"refused\": %u}",
                lt_ms.dlopen_ms, lt_ms.dlsym_ms, lt_ms.wait_ms, lt_ms.create_ms, lt_ms.plans_ms,
                lt_ms.algo_load_ms, lt_ms.heuristic_ms, lt_ms.refused);
        const xfirst *f = &ex->first;
        if (f->done)
            fprintf(out,
                    ", \"first_run_ms\": {\"captured\": %s, \"total\": %.3f, \"enter\": %.3f, "
                    "\"repoint\": %.3f, \"launch\": %.3f, \"graph\": %.3f, \"kernels\": %.3f, "
                    "\"kernel_max\": %.3f, \"n_kernels\": %u, \"cublaslt\": %.3f, "
                    "\"cublaslt_first\": %.3f, \"cublaslt_max\": %.3f, \"n_cublaslt\": %u, "
                    "\"after\": %.3f}",
                    f->captured ? "true" : "false", f->total, f->enter, f->repoint, f->launch,
                    f->graph, f->kernels, f->kernel_max, f->n_kernels, f->gemms, f->gemm_first,
                    f->gemm_max, f->n_gemms, f->after);
        else
            fputs(", \"first_run_ms\": null", out);
        kf_cx_tier_report(ex, true, out);
        fputc('}', out);
        return;
    }
    fprintf(out, "cuda: %s (%s, %d SMs), arch %s, streamed reads %s in L2\n", ex->dev.name,
            ex->dev.arch, ex->dev.sm_count, ex->target.arch,
            ex->dev.stream_evict_first ? "evict-first" : "evict-normal");
    for (uint32_t gi = 0; gi < ex->plan->n_groups; gi++) {
        const kf_group *grp = &ex->plan->groups[gi];
        const kf_cuda_recipe *rc = &ex->recipes->recipes[gi];
        const xchoice *c = &ex->choices[gi];
        const char *how = rc->n_variants ? rc->variants[c->chosen].how : "no steps";
        fprintf(out, "  group %u %-11s %-40s %s", gi, kf_group_kind_name(grp->kind), grp->name,
                how);
        if (rc->choice == KF_CUDA_CHOICE_MEASURED) {
            fprintf(out, " [measured:");
            for (uint32_t v = 0; v < rc->n_variants; v++)
                fprintf(out, " %s %.4f ms%s", rc->variants[v].label, (double)c->ms[v],
                        v == c->chosen ? " (chosen)" : "");
            for (uint32_t v = 0; c->by_margin && v < rc->n_variants; v++)
                if (c->ms[v] < c->ms[c->chosen]) { /* the faster side passed over */
                    double f = 100.0 * (1.0 - (double)c->ms[v] / (double)c->ms[c->chosen]);
                    if (kf_cuda_variant_calls_lib(rc, v)) /* by the margin */
                        fprintf(out, ", %s %.1f%% faster, within the %.1f%% margin",
                                rc->variants[v].label, f, 100.0 * ex->ctx->choice_margin);
                    else /* by the load bias (kf_options.choice_load_bias) */
                        fprintf(out,
                                ", %s %.1f%% faster as timed, counted %.1f%% slower (load bias)",
                                rc->variants[v].label, f, 100.0 * ex->ctx->choice_load_bias);
                }
            if (c->tiered)
                fputs(", tiered: cuBLASLt until the generated side is compiled and timed]", out);
            else if (c->was_tiered && ex->tier.swapped_at)
                fprintf(out, ", timed at run %u after a tiered compile]", ex->tier.swapped_at);
            else
                fputs(c->cached     ? ", from the cache]"
                      : c->replayed ? ", timed by graph replay]"
                                    : ", timed by direct launches]",
                      out);
        }
        fputc('\n', out);
    }
    fprintf(out,
            "  device memory: %zu bytes in one arena (%zu without reuse by liveness) -- the "
            "workspace (%s) --, plus %zu bytes of constants; "
            "%zu launches per run; kernels compiled %u, from the cache %u\n",
            ex->arena_bytes, ex->unshared_bytes, ex->own_ws ? "the program's own" : "the caller's",
            ex->consts_bytes, (size_t)ex->n_order, ex->compiled, ex->hits);
    if (ex->phase_ms[XPH_MEASURE] > 0)
        fprintf(out, "  measured choices timed in %.1f ms of the compile\n",
                ex->phase_ms[XPH_MEASURE]);
    kf_cx_tier_report(ex, false, out);
    if (ex->cap_made)
        fprintf(out, "  runs so far: %u replayed from %u CUDA graph%s captured from the run's own "
                "launches\n", ex->cap_replays, ex->cap_made, ex->cap_made == 1 ? "" : "s");
}

const char *kf_cuda_exec_device_name(const kf_cuda_exec *ex) {
    return ex && ex->dev_open ? ex->dev.name : "";
}
