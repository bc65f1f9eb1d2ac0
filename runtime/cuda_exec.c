/*
 * cuda_exec.c -- a plan's recipes on a CUDA device (the contract is in
 * cuda_exec.h; what runs where is decided in codegen/cuda/recipe*.c).
 *
 *   open:     device -> stream -> cache -> the target the recipes are made for
 *   prepare:  recipes -> buffers: one per materialized tensor + each recipe's
 *             scratch, each with a live range [first group, last group] ->
 *             offsets in one arena -> one cuMemAlloc -> every KERNEL step's
 *             CUBIN from the cache (or NVRTC), loaded, arguments bound to
 *             arena addresses; every GEMM step's pointers bound -> constants
 *             up -> measured choices timed once -> the run order
 *   run:      inputs up -> steps -> stream sync -> outputs down
 *   run_device: the caller's buffers bound in place (re-pointing only the
 *             steps whose buffers moved) -> steps on the caller's stream
 *             -> copies of outputs that cannot be written in place
 *
 * A step is a kernel launch or a cuBLASLt call with everything resolved at
 * prepare time, so a run does no planning and no allocation: the host cost
 * per step is the launch itself, plus, when a bound pointer changed, the
 * rebinding of the steps that use it. Device memory is two regions: the
 * constants, and the workspace (everything else, cuBLASLt's workspace too),
 * which a caller may supply. Nothing here decides how a group runs.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/arena.h"
#include "runtime/cache.h"
#include "runtime/ctx.h"
#include "runtime/cublaslt.h"
#include "runtime/cuda_choice.h"
#include "runtime/cuda_exec.h"
#include "runtime/cuda_exec_internal.h"
#include "runtime/cuda_kernel.h"

size_t kf_cx_tensor_bytes(const kf_tensor *t) {
    return (size_t)kf_ir_numel(t) * kf_dtype_size(t->dtype);
}

/* ------------------------------------------------------------------------ */
/* Buffers                                                                    */
/* ------------------------------------------------------------------------ */

/* A new buffer of `bytes` live over groups [first, last] (-1 and n_groups:
 * pinned), *out its index; KF_NONE on failure (out of memory), so no path
 * leaves *out unset. */
static kf_status add_buf(kf_cuda_exec *ex, uint32_t tensor, size_t bytes, int first, int last,
                         uint32_t *out, char *err) {
    *out = KF_NONE;
    if (!kf_mem_grow(&ex->mem, (void **)&ex->bufs, &ex->cap_bufs, ex->n_bufs + 1, sizeof *ex->bufs))
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory planning device buffers");
    xbuf *b = &ex->bufs[ex->n_bufs];
    b->tensor = tensor;
    b->bytes = bytes ? bytes : 1;
    b->first = first;
    b->last = last;
    b->offset = 0;
    b->constant = false;
    b->zero = false;
    *out = ex->n_bufs++;
    return KF_OK;
}

/* The buffer of tensor t (which the recipes name by its base), created on
 * first use with a live range starting at group `gi` (pinned for inputs,
 * constants and graph outputs). */
static kf_status buf_for(kf_cuda_exec *ex, uint32_t t, int gi, uint32_t *out, char *err) {
    if (t >= ex->graph->n_nodes)
        return kf_msg_set(err, KF_ERR_INTERNAL,
                          "a recipe names tensor %%%u, which the graph "
                          "does not have",
                          t);
    if (ex->buf_of[t] != KF_NONE) {
        xbuf *b = &ex->bufs[ex->buf_of[t]];
        if (gi > b->last)
            b->last = gi;
        if (gi < b->first)
            b->first = gi;
        *out = ex->buf_of[t];
        return KF_OK;
    }
    const kf_graph *g = ex->graph;
    const kf_tensor *x = g->nodes[t];
    bool pinned = x->op == KF_OP_INPUT || x->op == KF_OP_CONST;
    for (uint32_t i = 0; i < g->n_outputs && !pinned; i++)
        pinned = g->outputs[i].tensor->id == t;
    kf_status st = add_buf(ex, t, kf_cx_tensor_bytes(x), pinned ? -1 : gi,
                           pinned ? (int)ex->plan->n_groups : gi, out, err);
    if (st == KF_OK) {
        ex->buf_of[t] = *out;
        ex->bufs[*out].constant = x->op == KF_OP_CONST;
    }
    return st;
}

/* The buffer a recipe's reference names (KF_NONE for BUF_NONE). */
static kf_status buf_of_ref(kf_cuda_exec *ex, uint32_t gi, kf_cuda_buf ref, uint32_t *out,
                            char *err) {
    switch (ref.kind) {
    case KF_CUDA_BUF_NONE:
        *out = KF_NONE;
        return KF_OK;
    case KF_CUDA_BUF_TENSOR:
        return buf_for(ex, ref.id, (int)gi, out, err);
    case KF_CUDA_BUF_FLAGS:
        if (ex->flags_buf == KF_NONE) {
            kf_status st =
                add_buf(ex, KF_NONE, 4, -1, (int)ex->plan->n_groups, &ex->flags_buf, err);
            if (st != KF_OK)
                return st;
            ex->bufs[ex->flags_buf].constant = true;
        }
        *out = ex->flags_buf;
        return KF_OK;
    case KF_CUDA_BUF_SCRATCH:
        if (ref.id >= ex->recipes->recipes[gi].n_scratch)
            return kf_msg_set(err, KF_ERR_INTERNAL, "group %u: a step names scratch s%u of %u", gi,
                              ref.id, ex->recipes->recipes[gi].n_scratch);
        *out = ex->scratch0[gi] + ref.id;
        return KF_OK;
    default:
        return kf_msg_set(err, KF_ERR_INTERNAL, "group %u: a buffer of kind %d", gi, (int)ref.kind);
    }
}

/* Places every buffer (runtime/arena.c) in its region, the constants' or
 * the workspace: buffers whose live ranges overlap never share bytes;
 * pinned ones (first -1, last n_groups) share with none. */
static kf_status arena_layout(kf_cuda_exec *ex, char *err) {
    uint32_t n = ex->n_bufs;
    kf_arena_item *items = n ? kf_mem_alloc(&ex->mem, sizeof *items * n) : NULL;
    uint32_t *idx = n ? kf_mem_alloc(&ex->mem, sizeof *idx * n) : NULL;
    if (n && (!items || !idx)) {
        kf_mem_free(&ex->mem, items, sizeof *items * n);
        kf_mem_free(&ex->mem, idx, sizeof *idx * n);
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory planning device buffers");
    }
    for (int region = 0; region < 2; region++) { /* 0: the workspace, 1: the constants */
        uint32_t m = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (ex->bufs[i].constant != (region == 1))
                continue;
            idx[m] = i;
            items[m++] = (kf_arena_item){
                .bytes = ex->bufs[i].bytes, .first = ex->bufs[i].first, .last = ex->bufs[i].last};
        }
        kf_arena_stats stats;
        size_t bytes = kf_arena_layout(&ex->mem, items, m, ARENA_ALIGN, false, &stats);
        if (region == 0) {
            ex->arena_bytes = bytes;
            ex->unshared_bytes = stats.unshared;
        } else {
            ex->consts_bytes = bytes;
        }
        for (uint32_t j = 0; j < m; j++)
            ex->bufs[idx[j]].offset = items[j].offset;
    }
    kf_mem_free(&ex->mem, items, sizeof *items * n);
    kf_mem_free(&ex->mem, idx, sizeof *idx * n);
    return KF_OK;
}

/* Every counters buffer (xbuf.zero) to zero, once, before the first run. */
static kf_status zero_counters(kf_cuda_exec *ex, char *err) {
    const kf_cuda_driver *drv = ex->dev.drv;
    bool any = false;
    for (uint32_t i = 0; i < ex->n_bufs; i++) {
        if (!ex->bufs[i].zero)
            continue;
        if (!drv->cuMemsetD8Async)
            return kf_msg_set(err, KF_ERR_UNSUPPORTED, "the driver has no cuMemsetD8Async");
        kf_status st = kf_cuda_check(
            drv, drv->cuMemsetD8Async(kf_cx_buf_ptr(ex, i), 0, ex->bufs[i].bytes, ex->stream),
            "cuMemsetD8Async", NULL, err);
        if (st != KF_OK)
            return st;
        any = true;
    }
    return any ? kf_cuda_stream_sync(&ex->dev, ex->stream, "the counters", err) : KF_OK;
}

/* Buffer b's home: its place in the constant region or the workspace. */
kf_cu_deviceptr kf_cx_buf_ptr(const kf_cuda_exec *ex, uint32_t b) {
    return (ex->bufs[b].constant ? ex->consts : ex->ws) + ex->bufs[b].offset;
}

/* ------------------------------------------------------------------------ */
/* Steps                                                                      */
/* ------------------------------------------------------------------------ */

static kf_status add_step(kf_cuda_exec *ex, xstep **out, char *err) {
    if (!kf_mem_grow(&ex->mem, (void **)&ex->steps, &ex->cap_steps, ex->n_steps + 1,
                     sizeof *ex->steps))
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory planning the steps");
    *out = &ex->steps[ex->n_steps++];
    memset(*out, 0, sizeof **out);
    return KF_OK;
}

/* Whether variant v of recipe gi gets steps: every variant, except where a
 * cached choice already named the winner. */
static bool variant_in_use(const kf_cuda_exec *ex, uint32_t gi, uint32_t v) {
    return !ex->choices[gi].cached || ex->choices[gi].chosen == v;
}

/* The CUBINs of a program's kernel steps: jobs[0 .. n) of an allocation of
 * cap (every KERNEL step of the recipes; n counts the variants in use). */
typedef struct cubin_batch {
    kf_cuda_cubin *jobs;
    uint32_t n, cap;
} cubin_batch;

/* The CUBIN of every KERNEL step of every variant in use, in the order prepare adds
 * them, obtained on several threads at once (kf_cuda_kernels_cubins: a cold
 * program compiles its kernels concurrently rather than one after another).
 * With kf_options.dump_dir, each source is written first, whether or not it
 * compiles. Release `b` with release_cubins whatever the status. */
static kf_status fetch_cubins(kf_cuda_exec *ex, const kf_cuda_recipes *r, cubin_batch *b,
                              char *err) {
    memset(b, 0, sizeof *b);
    uint32_t count = 0;
    for (uint32_t gi = 0; gi < r->n; gi++)
        for (uint32_t s = 0; s < r->recipes[gi].n_steps; s++)
            count += r->recipes[gi].steps[s].kind == KF_CUDA_STEP_KERNEL;
    if (count == 0)
        return KF_OK;
    kf_cuda_cubin *jobs = kf_mem_calloc(&ex->mem, count, sizeof *jobs);
    kf_cuda_cubin *later = ex->tier.pending ? kf_mem_calloc(&ex->mem, count, sizeof *later) : NULL;
    if (!jobs || (ex->tier.pending && !later)) {
        if (jobs)
            kf_mem_free(&ex->mem, jobs, count * sizeof *jobs);
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory for %u kernels", count);
    }
    b->jobs = jobs;
    b->cap = count;
    ex->tier.jobs = later; /* a tiered choice's deferred kernels: compiled in the background */
    ex->tier.cap_jobs = later ? count : 0;
    uint32_t j = 0, n_later = 0;
    for (uint32_t gi = 0; gi < r->n; gi++) {
        const kf_cuda_recipe *rc = &r->recipes[gi];
        for (uint32_t v = 0; v < rc->n_variants; v++) {
            const kf_cuda_variant *va = &rc->variants[v];
            if (!variant_in_use(ex, gi, v))
                continue; /* a cached choice's loser: prepare adds no step for it */
            bool deferred = kf_cx_tier_deferred(ex, gi, v);
            for (uint32_t s = 0; s < va->n_steps && va->first_step + s < rc->n_steps; s++) {
                const kf_cuda_step *step = &rc->steps[va->first_step + s];
                if (step->kind != KF_CUDA_STEP_KERNEL)
                    continue;
                if (deferred && n_later < count)
                    later[n_later++].kernel = &step->kernel->kernel;
                else if (!deferred && j < count)
                    jobs[j++].kernel = &step->kernel->kernel;
            }
        }
    }
    b->n = j;
    ex->tier.n_jobs = n_later;
    kf_status st = kf_cuda_cubins_dump(ex->ctx->dump_dir, jobs, j, err);
    if (st == KF_OK)
        st = kf_cuda_cubins_dump(ex->ctx->dump_dir, later, n_later, err);
    if (st == KF_OK)
        st = kf_cuda_kernels_cubins(ex->cache, &ex->mem, jobs, j, ex->ctx->num_threads, err);
    return st;
}

static void release_cubins(kf_cuda_exec *ex, cubin_batch *b) {
    if (!b->jobs)
        return;
    for (uint32_t i = 0; i < b->n; i++)
        kf_cuda_cubin_release(ex->cache, &ex->mem, &b->jobs[i]);
    kf_mem_free(&ex->mem, b->jobs, b->cap * sizeof *b->jobs);
    b->jobs = NULL;
}

/* Loads a KERNEL step's kernel from its CUBIN (`cb`, from fetch_cubins) and
 * maps its arguments to buffers; `cb` NULL: a deferred kernel of a tiered
 * choice (its CUBIN is tier.jobs[tier_job], loaded at the swap). */
static kf_status add_kernel(kf_cuda_exec *ex, uint32_t gi, uint32_t v, const kf_cuda_kstep *ks,
                            kf_cuda_cubin *cb, uint32_t tier_job, char *err) {
    const kf_cuda_kernel *k = &ks->kernel;
    xkernel *xk = kf_mem_calloc(&ex->mem, 1, sizeof *xk);
    if (!xk)
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory for kernel '%s'", k->name);
    xstep *s = NULL;
    kf_status st = add_step(ex, &s, err);
    if (st != KF_OK) {
        kf_mem_free(&ex->mem, xk, sizeof *xk);
        return st;
    }
    s->kind = KF_CUDA_STEP_KERNEL;
    s->group = gi;
    s->variant = v;
    s->k = xk;
    xk->ks = ks;
    xk->tier_job = cb ? KF_NONE : tier_job;
    if (ks->n_args > KF_CUDA_MAX_PARAMS || ks->n_tmaps > KF_CUDA_MAX_TMAPS)
        return kf_msg_set(err, KF_ERR_INTERNAL, "kernel '%s': %u arguments, %u tensor maps",
                          k->name, ks->n_args, ks->n_tmaps);
    kf_cuda_launch_cfg cfg = {.grid = {ks->grid[0], ks->grid[1], ks->grid[2]},
                              .block = {ks->block[0], ks->block[1], ks->block[2]},
                              .shared_bytes = ks->shared_bytes,
                              .kernel = k->name,
                              .cluster = {ks->cluster[0], ks->cluster[1], ks->cluster[2]}};
    st = kf_cuda_launch_check(&cfg, err);
    for (uint32_t i = 0; i < ks->n_args && st == KF_OK; i++) {
        const kf_cuda_arg *a = &ks->args[i];
        xk->arg_buf[i] = KF_NONE;
        if (a->kind == KF_CUDA_ARG_PTR || a->kind == KF_CUDA_ARG_TMAP)
            st = buf_of_ref(ex, gi, a->buf, &xk->arg_buf[i], err);
        else if (a->kind != KF_CUDA_ARG_I64)
            st = kf_msg_set(err, KF_ERR_INTERNAL, "kernel '%s': argument %u has kind %d", k->name,
                            i, (int)a->kind);
        if (st == KF_OK && a->kind == KF_CUDA_ARG_TMAP &&
            (a->value < 0 || a->value >= (int64_t)ks->n_tmaps))
            st = kf_msg_set(err, KF_ERR_INTERNAL,
                            "kernel '%s': argument %u names tensor map "
                            "%" PRId64 " of %u",
                            k->name, i, a->value, ks->n_tmaps);
    }
    if (st != KF_OK || !cb)
        return st;
    return kf_cx_load_kernel(ex, xk, cb, err);
}

kf_status kf_cx_load_kernel(kf_cuda_exec *ex, xkernel *xk, kf_cuda_cubin *cb, char *err) {
    const kf_cuda_kstep *ks = xk->ks;
    const kf_cuda_kernel *k = &ks->kernel;
    /* The CUBIN fetch_cubins obtained (through the cache, else NVRTC). */
    if (cb->status != KF_OK)
        return kf_msg_set(err, cb->status, "%s", cb->err);
    if (cb->hit)
        ex->hits++;
    else
        ex->compiled++;
    kf_status st = kf_cuda_module_load(&ex->dev, cb->data, k->name, &xk->mod, err);
    kf_cuda_cubin_release(ex->cache, &ex->mem, cb);
    if (st == KF_OK)
        st = kf_cuda_function(&ex->dev, xk->mod, k->name, &xk->fn, err);
    /* The device's L2 policy for streamed reads (templates/common.cuh). */
    if (st == KF_OK)
        st = kf_cuda_module_set_u32(&ex->dev, xk->mod, "kf_stream_ef",
                                    ex->dev.stream_evict_first ? 1u : 0u, k->name, err);
    /* Dynamic shared memory above the default 48 KiB needs the function's
     * opt-in; set it whenever there is any, so the launch and the CUDA graph
     * node always fit. */
    if (st == KF_OK && ks->shared_bytes > 0)
        st = kf_cuda_function_set_shared(&ex->dev, xk->fn, ks->shared_bytes, k->name, err);
    return st;
}

static const kf_blt_epilogue lt_epilogue_of[KF_CUDA_LT_EPI_COUNT] = {
    [KF_CUDA_LT_EPI_NONE] = KF_BLT_EPI_NONE,
    [KF_CUDA_LT_EPI_RELU] = KF_BLT_EPI_RELU,
    [KF_CUDA_LT_EPI_GELU] = KF_BLT_EPI_GELU,
    [KF_CUDA_LT_EPI_BIAS] = KF_BLT_EPI_BIAS,
    [KF_CUDA_LT_EPI_RELU_BIAS] = KF_BLT_EPI_RELU_BIAS,
    [KF_CUDA_LT_EPI_GELU_BIAS] = KF_BLT_EPI_GELU_BIAS,
};

static void operand_of(const kf_cuda_operand *o, kf_blt_operand *out) {
    out->ptr = 0;
    out->row_stride = o->row_stride;
    out->col_stride = o->col_stride;
    out->batch_stride = o->batch_stride;
}

/* A GEMM step: the library call with its buffers (pointers bound later). */
static kf_status add_gemm(kf_cuda_exec *ex, uint32_t gi, uint32_t v, const kf_cuda_gstep *gs,
                          char *err) {
    if ((unsigned)gs->epilogue >= KF_CUDA_LT_EPI_COUNT)
        return kf_msg_set(err, KF_ERR_INTERNAL, "group %u: a GEMM step with epilogue %d", gi,
                          (int)gs->epilogue);
    xstep *s = NULL;
    kf_status st = add_step(ex, &s, err);
    if (st != KF_OK)
        return st;
    s->kind = KF_CUDA_STEP_GEMM;
    s->group = gi;
    s->variant = v;
    s->gm.gs = gs;
    kf_blt_gemm *g = &s->gm.g;
    g->dtype = gs->dtype;
    g->m = gs->m;
    g->n = gs->n;
    g->k = gs->k;
    g->batch = gs->batch;
    operand_of(&gs->a, &g->a);
    operand_of(&gs->b, &g->b);
    operand_of(&gs->c, &g->c);
    operand_of(&gs->d, &g->d);
    g->beta = gs->beta;
    g->epilogue = lt_epilogue_of[gs->epilogue];
    g->what = ex->plan->groups[gi].name;
    st = buf_of_ref(ex, gi, gs->a.buf, &s->gm.a_buf, err);
    if (st == KF_OK)
        st = buf_of_ref(ex, gi, gs->b.buf, &s->gm.b_buf, err);
    if (st == KF_OK)
        st = buf_of_ref(ex, gi, gs->c.buf, &s->gm.c_buf, err);
    if (st == KF_OK)
        st = buf_of_ref(ex, gi, gs->d.buf, &s->gm.d_buf, err);
    if (st == KF_OK)
        st = buf_of_ref(ex, gi, gs->bias, &s->gm.bias_buf, err);
    return st;
}

/* A recipe's tensor map over the buffer at `ptr`, encoded by the driver. */
static kf_status encode_tmap(kf_cuda_exec *ex, const kf_cuda_kstep *ks, const kf_cuda_tmap *t,
                             kf_cu_deviceptr ptr, kf_cu_tensor_map *out, char *err) {
    kf_cuda_tmap_desc d;
    memset(&d, 0, sizeof d);
    switch (t->dtype) {
    case KF_DTYPE_F32:
        d.dtype = KF_CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
        break;
    case KF_DTYPE_F16:
        d.dtype = KF_CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
        break;
    case KF_DTYPE_BF16:
        d.dtype = KF_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
        break;
    case KF_DTYPE_F64:
        d.dtype = KF_CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
        break;
    case KF_DTYPE_I32:
        d.dtype = KF_CU_TENSOR_MAP_DATA_TYPE_INT32;
        break;
    case KF_DTYPE_BOOL:
        d.dtype = KF_CU_TENSOR_MAP_DATA_TYPE_UINT8;
        break;
    default:
        return kf_msg_set(err, KF_ERR_INTERNAL, "kernel '%s': a tensor map of dtype %d",
                          ks->kernel.name, (int)t->dtype);
    }
    if (t->rank < 1 || t->rank > KF_CUDA_TMAP_MAX_RANK)
        return kf_msg_set(err, KF_ERR_INTERNAL, "kernel '%s': a tensor map of rank %d",
                          ks->kernel.name, t->rank);
    d.rank = (unsigned)t->rank;
    for (int i = 0; i < t->rank; i++) {
        d.dims[i] = t->dims[i];
        d.box[i] = t->box[i];
        if (i > 0)
            d.strides[i - 1] = t->strides[i - 1];
    }
    switch (t->swizzle) {
    case 0:
        d.swizzle = KF_CU_TENSOR_MAP_SWIZZLE_NONE;
        break;
    case 32:
        d.swizzle = KF_CU_TENSOR_MAP_SWIZZLE_32B;
        break;
    case 64:
        d.swizzle = KF_CU_TENSOR_MAP_SWIZZLE_64B;
        break;
    case 128:
        d.swizzle = KF_CU_TENSOR_MAP_SWIZZLE_128B;
        break;
    default:
        return kf_msg_set(err, KF_ERR_INTERNAL, "kernel '%s': a %u-byte swizzle", ks->kernel.name,
                          t->swizzle);
    }
    d.name = ks->kernel.name;
    return kf_cuda_tensor_map_encode(&ex->dev, &d, ptr, out, err);
}

/* Binds one step's pointers to the buffers' current addresses (cur[]):
 * kernel argument slots and tensor maps, or the GEMM's operands. */
kf_status kf_cx_bind_step(kf_cuda_exec *ex, xstep *s, char *err) {
    if (s->kind == KF_CUDA_STEP_KERNEL) {
        const kf_cuda_kstep *ks = s->k->ks;
        for (uint32_t p = 0; p < ks->n_args; p++) {
            const kf_cuda_arg *a = &ks->args[p];
            s->k->args[p] = &s->k->slots[p];
            if (a->kind == KF_CUDA_ARG_I64) {
                s->k->slots[p] = (uint64_t)a->value;
                continue;
            }
            kf_cu_deviceptr ptr = ex->cur[s->k->arg_buf[p]] + (kf_cu_deviceptr)a->buf.offset;
            /* A GEMM kernel's vector accesses assume 16-byte aligned bases
             * (gemm_sm90.cuh's TMA-store epilogue does not test them). Its
             * arguments are buffer bases, placed so (arenas: 256 bytes; a
             * device-resident run's bindings are checked for 16), so this
             * never fires; if it did, an error beats a misaligned access,
             * which ends the CUDA context. */
            if (KF_NEVER(a->kind == KF_CUDA_ARG_PTR && ks->role == KF_CUDA_ROLE_GEMM && ptr % 16))
                return kf_msg_set(err, KF_ERR_INTERNAL,
                                  "kernel '%s': pointer argument %u at 0x%llx is not 16-byte "
                                  "aligned, which a GEMM kernel's arguments must be",
                                  ks->kernel.name, p, (unsigned long long)ptr);
            s->k->slots[p] = ptr;
            if (a->kind == KF_CUDA_ARG_TMAP) {
                kf_status st =
                    encode_tmap(ex, ks, &ks->tmaps[a->value], ptr, xk_tmap(s->k, a->value), err);
                if (st != KF_OK)
                    return st;
                s->k->args[p] = xk_tmap(s->k, a->value);
            }
        }
        return KF_OK;
    }
    xgemm *x = &s->gm;
    const kf_cuda_gstep *gs = x->gs;
    x->g.a.ptr = ex->cur[x->a_buf] + (kf_cu_deviceptr)gs->a.buf.offset;
    x->g.b.ptr = ex->cur[x->b_buf] + (kf_cu_deviceptr)gs->b.buf.offset;
    x->g.d.ptr = ex->cur[x->d_buf] + (kf_cu_deviceptr)gs->d.buf.offset;
    x->g.c.ptr = x->c_buf != KF_NONE ? ex->cur[x->c_buf] + (kf_cu_deviceptr)gs->c.buf.offset : 0;
    x->g.bias =
        x->bias_buf != KF_NONE ? ex->cur[x->bias_buf] + (kf_cu_deviceptr)gs->bias.offset : 0;
    return KF_OK;
}

/* Pointers of every step, once the regions are placed; every GEMM's
 * heuristic asked now, so a run only launches. */
static kf_status bind_steps(kf_cuda_exec *ex, char *err) {
    for (uint32_t b = 0; b < ex->n_bufs; b++)
        ex->cur[b] = kf_cx_buf_ptr(ex, b);
    for (uint32_t i = 0; i < ex->n_steps; i++) {
        xstep *s = &ex->steps[i];
        kf_status st = kf_cx_bind_step(ex, s, err);
        if (st != KF_OK)
            return st;
        if (s->kind == KF_CUDA_STEP_GEMM && !kf_blt_supported(ex->lt, &s->gm.g) &&
            s->gm.g.epilogue != KF_BLT_EPI_NONE)
            return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                              "cuBLASLt has no algorithm for GEMM '%s' with epilogue %s",
                              s->gm.g.what, kf_blt_epilogue_name(s->gm.g.epilogue));
    }
    return KF_OK;
}

/* Whether step s reads or writes a buffer that moved. */
static bool step_moved(const kf_cuda_exec *ex, const xstep *s) {
    if (s->kind == KF_CUDA_STEP_KERNEL) {
        for (uint32_t p = 0; p < s->k->ks->n_args; p++)
            if (s->k->ks->args[p].kind != KF_CUDA_ARG_I64 && s->k->arg_buf[p] != KF_NONE &&
                ex->moved[s->k->arg_buf[p]])
                return true;
        return false;
    }
    const uint32_t b[5] = {s->gm.a_buf, s->gm.b_buf, s->gm.c_buf, s->gm.d_buf, s->gm.bias_buf};
    for (int i = 0; i < 5; i++)
        if (b[i] != KF_NONE && ex->moved[b[i]])
            return true;
    return false;
}

static void drop_graph(kf_cuda_exec *ex);

/* Makes want[] current: every launched step that touches a buffer whose
 * address changed is bound again (argument slots rebuilt, its tensor maps
 * re-encoded) and its CUDA graph node updated. Nothing moved: nothing done,
 * the cost is one compare per buffer. */
kf_status kf_cx_repoint(kf_cuda_exec *ex, char *err) {
    bool any = false;
    for (uint32_t b = 0; b < ex->n_bufs; b++) {
        ex->moved[b] = ex->want[b] != ex->cur[b];
        any |= ex->moved[b];
        ex->cur[b] = ex->want[b];
    }
    if (!any)
        return KF_OK;
    const kf_cuda_driver *drv = ex->dev.drv;
    for (uint32_t i = 0; i < ex->n_order; i++) {
        xstep *s = &ex->steps[ex->order[i]];
        if (!step_moved(ex, s))
            continue;
        kf_status st = kf_cx_bind_step(ex, s, err);
        if (st != KF_OK)
            return st;
        if (!ex->graph_exec)
            continue;
        const kf_cuda_kstep *ks = s->k->ks;
        kf_cu_kernel_node_params np = {
            s->k->fn,     ks->grid[0],  ks->grid[1],      ks->grid[2],         ks->block[0],
            ks->block[1], ks->block[2], ks->shared_bytes, (void **)s->k->args, NULL,
            NULL,         NULL};
        /* A driver that cannot update a node: launch directly from now on. */
        if (!drv->cuGraphExecKernelNodeSetParams ||
            drv->cuGraphExecKernelNodeSetParams(ex->graph_exec, ex->nodes[i], &np) != 0)
            drop_graph(ex);
    }
    return KF_OK;
}

/* ------------------------------------------------------------------------ */
/* Launching                                                                  */
/* ------------------------------------------------------------------------ */

kf_status kf_cx_make_current(kf_cuda_exec *ex, char *err) {
    const kf_cuda_driver *drv = ex->dev.drv;
    kf_cu_context cur = NULL;
    if (drv->cuCtxGetCurrent(&cur) != 0 || cur != ex->dev.ctx)
        return kf_cuda_check(drv, drv->cuCtxSetCurrent(ex->dev.ctx), "cuCtxSetCurrent", NULL, err);
    return KF_OK;
}

kf_status kf_cx_launch_step(kf_cuda_exec *ex, const xstep *s, kf_cu_stream stream, char *err) {
    const kf_cuda_driver *drv = ex->dev.drv;
    if (s->kind == KF_CUDA_STEP_GEMM)
        return kf_blt_matmul(ex->lt, &s->gm.g, stream, err);
    const xkernel *k = s->k;
    const kf_cuda_kstep *ks = k->ks;
    if (ks->cluster[0] * ks->cluster[1] * ks->cluster[2] > 1) {
        kf_cuda_launch_cfg cfg = {.grid = {ks->grid[0], ks->grid[1], ks->grid[2]},
                                  .block = {ks->block[0], ks->block[1], ks->block[2]},
                                  .shared_bytes = ks->shared_bytes,
                                  .stream = stream,
                                  .kernel = ks->kernel.name,
                                  .cluster = {ks->cluster[0], ks->cluster[1], ks->cluster[2]}};
        return kf_cuda_launch(&ex->dev, k->fn, &cfg, (void **)k->args, err);
    }
    kf_cu_result r = drv->cuLaunchKernel(k->fn, ks->grid[0], ks->grid[1], ks->grid[2], ks->block[0],
                                         ks->block[1], ks->block[2], ks->shared_bytes, stream,
                                         (void **)k->args, NULL);
    return r ? kf_cuda_check(drv, r, "cuLaunchKernel", ks->kernel.name, err) : KF_OK;
}

const char *kf_cx_step_name(const kf_cuda_exec *ex, const xstep *s) {
    return s->kind == KF_CUDA_STEP_KERNEL ? s->k->ks->kernel.name : ex->plan->groups[s->group].name;
}

/* ------------------------------------------------------------------------ */
/* Measured choices                                                           */
/* ------------------------------------------------------------------------ */

int kf_cx_cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Whether recipe gi is timed at prepare: measured, not from the cache, not
 * tiered (timed by the swap). */
static bool measured_now(const kf_cuda_exec *ex, uint32_t gi) {
    return ex->recipes->recipes[gi].choice == KF_CUDA_CHOICE_MEASURED &&
           ex->recipes->recipes[gi].n_variants > 1 && !ex->choices[gi].cached &&
           !ex->choices[gi].tiered;
}

/* Times every variant of every measured recipe once and keeps the fastest.
 * Runs on whatever the arena holds: the timings, not the values, count. */
static kf_status measure_choices(kf_cuda_exec *ex, char *err) {
    bool any = false;
    for (uint32_t gi = 0; gi < ex->recipes->n; gi++)
        any |= measured_now(ex, gi);
    if (!any)
        return KF_OK;
    kf_cu_event e0 = NULL, e1 = NULL;
    kf_status st = kf_cx_make_current(ex, err);
    /* Defined inputs for the timing runs: zeros (a driver without the memset
     * times whatever the arena holds). */
    const kf_cuda_driver *drv = ex->dev.drv;
    if (st == KF_OK && drv->cuMemsetD8Async)
        st = kf_cuda_check(drv, drv->cuMemsetD8Async(ex->ws, 0, ex->arena_bytes, ex->stream),
                           "cuMemsetD8Async", NULL, err);
    if (st == KF_OK && drv->cuMemsetD8Async && ex->consts_bytes)
        st = kf_cuda_check(drv, drv->cuMemsetD8Async(ex->consts, 0, ex->consts_bytes, ex->stream),
                           "cuMemsetD8Async", NULL, err);
    if (st == KF_OK)
        st = kf_cuda_event_create(&ex->dev, &e0, err);
    if (st == KF_OK)
        st = kf_cuda_event_create(&ex->dev, &e1, err);
    for (uint32_t gi = 0; gi < ex->recipes->n && st == KF_OK; gi++)
        if (measured_now(ex, gi))
            st = kf_cx_measure_group(ex, gi, ex->stream, e0, e1, err);
    if (e0)
        kf_cuda_event_destroy(&ex->dev, e0);
    if (e1)
        kf_cuda_event_destroy(&ex->dev, e1);
    return st;
}

/* The run order: each recipe's chosen variant, in group order. */
static kf_status make_order(kf_cuda_exec *ex, char *err) {
    ex->order = kf_mem_calloc(&ex->mem, ex->n_steps + 1, sizeof *ex->order);
    if (!ex->order)
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory");
    for (uint32_t i = 0; i < ex->n_steps; i++)
        if (ex->steps[i].variant == ex->choices[ex->steps[i].group].chosen)
            ex->order[ex->n_order++] = i;
    return KF_OK;
}

/* The run as one CUDA graph when every step it launches is a plain kernel
 * (no cluster) and there are at least two: a run is then one cuGraphLaunch,
 * which costs the host less than a cuLaunchKernel per kernel. Arguments are
 * bound once at prepare time, so the graph never needs updating. Any failure
 * (a driver without the graph entry points included) leaves the direct
 * launches; KF_FLAG_NO_CUDA_GRAPH turns the graph off. */
static void build_graph(kf_cuda_exec *ex) {
    const kf_cuda_driver *drv = ex->dev.drv;
    if ((ex->ctx->flags & KF_FLAG_NO_CUDA_GRAPH) || ex->n_order < 2 || !drv ||
        !drv->cuGraphCreate || !drv->cuGraphAddKernelNode || !drv->cuGraphInstantiateWithFlags ||
        !drv->cuGraphLaunch || !drv->cuGraphExecDestroy || !drv->cuGraphDestroy)
        return;
    for (uint32_t i = 0; i < ex->n_order; i++) {
        const xstep *s = &ex->steps[ex->order[i]];
        if (s->kind != KF_CUDA_STEP_KERNEL ||
            s->k->ks->cluster[0] * s->k->ks->cluster[1] * s->k->ks->cluster[2] > 1)
            return;
    }
    if (kf_cx_make_current(ex, NULL) != KF_OK)
        return;
    kf_cu_graph graph = NULL;
    kf_cu_graph_node prev = NULL;
    ex->nodes = kf_mem_calloc(&ex->mem, ex->n_order, sizeof *ex->nodes);
    if (!ex->nodes)
        return;
    if (drv->cuGraphCreate(&graph, 0) != 0 || !graph)
        return;
    for (uint32_t i = 0; i < ex->n_order; i++) {
        const xkernel *k = ex->steps[ex->order[i]].k;
        const kf_cuda_kstep *ks = k->ks;
        kf_cu_kernel_node_params p = {
            k->fn,        ks->grid[0],  ks->grid[1],      ks->grid[2],      ks->block[0],
            ks->block[1], ks->block[2], ks->shared_bytes, (void **)k->args, NULL,
            NULL,         NULL};
        kf_cu_graph_node node = NULL;
        if (drv->cuGraphAddKernelNode(&node, graph, prev ? &prev : NULL, prev ? 1 : 0, &p) != 0) {
            drv->cuGraphDestroy(graph);
            return;
        }
        ex->nodes[i] = node;
        prev = node;
    }
    kf_cu_graph_exec exec = NULL;
    if (drv->cuGraphInstantiateWithFlags(&exec, graph, 0) != 0 || !exec) {
        drv->cuGraphDestroy(graph);
        return;
    }
    ex->cu_graph = graph;
    ex->graph_exec = exec;
}

static void drop_graph(kf_cuda_exec *ex) {
    if (ex->graph_exec)
        ex->dev.drv->cuGraphExecDestroy(ex->graph_exec);
    if (ex->cu_graph)
        ex->dev.drv->cuGraphDestroy(ex->cu_graph);
    ex->graph_exec = NULL;
    ex->cu_graph = NULL;
}

kf_status kf_cx_remake_order(kf_cuda_exec *ex, char *err) {
    drop_graph(ex);
    kf_cx_capture_drop(ex);
    if (ex->nodes)
        kf_mem_free(&ex->mem, ex->nodes, ex->n_order * sizeof *ex->nodes);
    ex->nodes = NULL;
    if (ex->order)
        kf_mem_free(&ex->mem, ex->order, (ex->n_steps + 1) * sizeof *ex->order);
    ex->order = NULL;
    ex->n_order = 0;
    kf_status st = make_order(ex, err);
    if (st == KF_OK)
        build_graph(ex);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Open, prepare, run, destroy                                                */
/* ------------------------------------------------------------------------ */

bool kf_cuda_exec_available(kf_ctx *ctx) {
    const kf_cuda_driver *drv;
    return ctx && kf_ctx_cuda_driver(ctx, &drv, NULL) == KF_OK && drv->device_count > ctx->device;
}

kf_status kf_cuda_exec_open(kf_ctx *ctx, kf_cuda_exec **out, kf_cuda_target *target, char *err) {
    return kf_cuda_exec_open_for(ctx, NULL, out, target, err);
}

kf_status kf_cuda_exec_open_for(kf_ctx *ctx, const kf_plan *plan, kf_cuda_exec **out,
                                kf_cuda_target *target, char *err) {
    if (!ctx || !out || !target)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_exec_open: NULL argument");
    *out = NULL;
    const kf_cuda_driver *drv;
    double t0 = now_ms();
    kf_status st = kf_ctx_cuda_driver(ctx, &drv, err);
    if (st != KF_OK)
        return st;
    /* With a plan (kf_compile's path), the device is only queried here: its
     * primary context is attached by kf_cuda_exec_prepare once the cached
     * choices say whether cuBLASLt is needed at all, so its dlopen (begun on a
     * thread just before the context, to overlap it) happens only then. */
    kf_cuda_exec *ex = kf_mem_calloc(&ctx->mem, 1, sizeof *ex);
    if (!ex)
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory");
    ex->ctx = ctx;
    ex->mem = ctx->mem;
    double t1 = now_ms();
    st = plan ? kf_cuda_device_query(drv, ctx->device, &ex->dev, err)
              : kf_cuda_device_open(drv, ctx->device, &ex->dev, err);
    if (st == KF_OK && !plan) {
        ex->dev_open = true;
        st = kf_cuda_stream_create(&ex->dev, &ex->stream, err);
    }
    double t2 = now_ms();
    if (st == KF_OK)
        st = kf_ctx_cache(ctx, &ex->cache, err);
    ex->phase_ms[XPH_DRIVER] = t1 - t0;
    ex->phase_ms[XPH_DEVICE] = t2 - t1;
    ex->phase_ms[XPH_CACHE] = now_ms() - t2;
    if (st != KF_OK) {
        kf_cuda_exec_destroy(ex);
        return st;
    }
    memset(&ex->target, 0, sizeof ex->target);
    snprintf(ex->target.arch, sizeof ex->target.arch, "%s", ctx->arch ? ctx->arch : ex->dev.arch);
    ex->target.sm_count = ex->dev.sm_count > 0 ? ex->dev.sm_count : 1;
    ex->target.flags =
        kf_cuda_recipe_flags(ctx->flags, ctx->gemm, ctx->attention) | ctx->recipe_flags;
    *target = ex->target;
    *out = ex;
    return KF_OK;
}

/* Whether a variant in use of recipe gi has a library GEMM step. */
static bool recipe_uses_lt(const kf_cuda_exec *ex, uint32_t gi) {
    const kf_cuda_recipe *rc = &ex->recipes->recipes[gi];
    for (uint32_t v = 0; v < rc->n_variants; v++)
        for (uint32_t s = 0; variant_in_use(ex, gi, v) && s < rc->variants[v].n_steps; s++) {
            uint32_t i = rc->variants[v].first_step + s;
            if (i < rc->n_steps && rc->steps[i].kind == KF_CUDA_STEP_GEMM)
                return true;
        }
    return false;
}

/* Each MEASURED recipe's choice from the disk cache, where an earlier
 * process on this device stored it; a miss keeps the key for the store
 * after measuring. A key that cannot be built only costs a measurement. */
static void read_choices(kf_cuda_exec *ex) {
    for (uint32_t gi = 0; ex->cache && gi < ex->recipes->n; gi++) {
        const kf_cuda_recipe *rc = &ex->recipes->recipes[gi];
        xchoice *c = &ex->choices[gi];
        char err[KF_MSG_MAX];
        if (rc->choice != KF_CUDA_CHOICE_MEASURED || rc->n_variants < 2 ||
            kf_cuda_choice_key(&ex->mem, rc, &ex->dev, ex->target.arch, ex->ctx->cublaslt_lib,
                               kf_cx_measure_replays(ex), &c->key, err) != KF_OK)
            continue;
        c->keyed = true;
        c->cached = kf_cuda_choice_load(ex->cache, &c->key, rc->n_variants, &c->chosen, c->ms);
        /* the winner picked again from the stored times under this
         * context's margin and load bias (neither is in the key) */
        if (c->cached)
            c->chosen = kf_cuda_choice_pick_recipe(rc, c->ms, ex->ctx->choice_margin,
                                                   ex->ctx->choice_load_bias, &c->by_margin);
        c->replayed = c->cached && kf_cx_measure_replays(ex);
    }
}

kf_status kf_cuda_exec_prepare(kf_cuda_exec *ex, const kf_plan *plan, kf_cuda_recipes *recipes,
                               char *err) {
    if (!ex || !plan || !recipes || ex->recipes) {
        kf_cuda_recipes_destroy(recipes);
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "kf_cuda_exec_prepare: NULL argument, or an exec prepared already");
    }
    ex->recipes = recipes;
    ex->plan = plan;
    ex->graph = plan->graph;
    if (recipes->plan != plan || recipes->n != plan->n_groups)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "kf_cuda_exec_prepare: the recipes are not this plan's");
    if (strcmp(recipes->target.arch, ex->target.arch) != 0)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "kf_cuda_exec_prepare: recipes made for %s, but the device runs %s",
                          recipes->target.arch, ex->target.arch);
    const kf_graph *g = plan->graph;
    uint32_t nn = g->n_nodes ? g->n_nodes : 1;
    ex->buf_of = kf_mem_alloc(&ex->mem, nn * sizeof *ex->buf_of);
    ex->scratch0 = kf_mem_calloc(&ex->mem, recipes->n + 1, sizeof *ex->scratch0);
    ex->choices = kf_mem_calloc(&ex->mem, recipes->n + 1, sizeof *ex->choices);
    if (!ex->buf_of || !ex->scratch0 || !ex->choices)
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory");
    for (uint32_t i = 0; i < nn; i++)
        ex->buf_of[i] = KF_NONE;
    ex->flags_buf = KF_NONE;

    kf_status st = KF_OK;
    double t0 = now_ms();
    read_choices(ex);
    kf_cx_tier_plan(ex);
    bool need_lt = false;
    for (uint32_t gi = 0; gi < recipes->n && !need_lt; gi++)
        need_lt = recipe_uses_lt(ex, gi);
    double t1 = now_ms();
    ex->phase_ms[XPH_CHOICES] = t1 - t0;
    if (!ex->dev_open) {
        /* Opened for a plan: cuBLASLt's dlopen (a thread) overlaps the
         * primary context only when a recipe in use calls it. */
        if (need_lt) {
            (void)kf_blt_preload_start(&ex->mem, ex->ctx->cublaslt_lib, &ex->lt_pre);
            ex->lt_preloaded = true;
        }
        double ta = now_ms();
        st = kf_cuda_device_attach(&ex->dev, err);
        if (st == KF_OK) {
            ex->dev_open = true;
            st = kf_cuda_stream_create(&ex->dev, &ex->stream, err);
        }
        double tb = now_ms();
        ex->phase_ms[XPH_DEVICE] += tb - ta;
        t1 = tb;
        if (st != KF_OK)
            return st;
    }
    if (need_lt) {
        kf_blt_preload *pre = ex->lt_pre;
        ex->lt_pre = NULL; /* finished by the create, whatever it returns */
        st = kf_blt_create_preloaded(&ex->mem, &ex->dev, ex->ctx->cublaslt_lib, pre,
                                     &ex->phase_ms[XPH_LT_THREAD], &ex->lt, err);
        if (st != KF_OK) {
            char why[KF_MSG_MAX];
            snprintf(why, sizeof why, "%s", err);
            return kf_msg_set(err, st,
                              "the plan has GEMMs, which run through cuBLASLt on the CUDA "
                              "target: %s",
                              why);
        }
        /* the heuristic's algorithms kept beside the kernels: a warm start
         * asks it nothing */
        char device[256];
        snprintf(device, sizeof device, "%s cc %d.%d sms %d driver %d", ex->dev.name,
                 ex->dev.cc_major, ex->dev.cc_minor, ex->dev.sm_count,
                 ex->dev.drv ? ex->dev.drv->driver_version : 0);
        kf_blt_set_cache(ex->lt, ex->cache, device);
    }
    double t2 = now_ms();
    ex->phase_ms[XPH_CUBLASLT] = t2 - t1;

    /* Every kernel's CUBIN first, concurrently; then the steps, recipe by
     * recipe, every variant in use; scratch buffers live in their group. */
    cubin_batch cubins = {0};
    uint32_t next_cubin = 0, next_later = 0;
    if (st == KF_OK)
        st = fetch_cubins(ex, recipes, &cubins, err);
    for (uint32_t gi = 0; gi < recipes->n && st == KF_OK; gi++) {
        const kf_cuda_recipe *rc = &recipes->recipes[gi];
        ex->scratch0[gi] = ex->n_bufs;
        for (uint32_t s = 0; s < rc->n_scratch && st == KF_OK; s++) {
            uint32_t b;
            /* counters outlive the run (kept zero by their kernel): pinned,
             * beside the constants, where no caller's workspace replaces them */
            bool keep = rc->scratch[s].role == KF_CUDA_PARAM_COUNTERS;
            st = add_buf(ex, KF_NONE, (size_t)rc->scratch[s].bytes, keep ? -1 : (int)gi,
                         keep ? (int)plan->n_groups : (int)gi, &b, err);
            if (st == KF_OK && keep)
                ex->bufs[b].constant = ex->bufs[b].zero = true;
        }
        for (uint32_t v = 0; v < rc->n_variants && st == KF_OK; v++) {
            const kf_cuda_variant *va = &rc->variants[v];
            if (!variant_in_use(ex, gi, v))
                continue;
            if (va->first_step + va->n_steps > rc->n_steps)
                st = kf_msg_set(err, KF_ERR_INTERNAL,
                                "group %u: variant %u names steps past "
                                "the recipe's end",
                                gi, v);
            for (uint32_t s = 0; s < va->n_steps && st == KF_OK; s++) {
                const kf_cuda_step *step = &rc->steps[va->first_step + s];
                bool later = kf_cx_tier_deferred(ex, gi, v);
                if (step->kind == KF_CUDA_STEP_KERNEL &&
                    (later ? next_later >= ex->tier.n_jobs : next_cubin >= cubins.n))
                    st = kf_msg_set(err, KF_ERR_INTERNAL, "group %u: a kernel step with no CUBIN",
                                    gi);
                else if (step->kind == KF_CUDA_STEP_KERNEL && later)
                    st = add_kernel(ex, gi, v, step->kernel, NULL, next_later++, err);
                else if (step->kind == KF_CUDA_STEP_KERNEL)
                    st = add_kernel(ex, gi, v, step->kernel, &cubins.jobs[next_cubin++], KF_NONE,
                                    err);
                else
                    st = add_gemm(ex, gi, v, &step->gemm, err);
            }
        }
    }
    release_cubins(ex, &cubins);
    /* Graph outputs that no group writes (an input or constant as an output,
     * an output that is a view) still need their buffer for copy-out. */
    for (uint32_t i = 0; i < g->n_outputs && st == KF_OK; i++) {
        uint32_t b;
        st = buf_for(ex, kf_plan_buffer_of(plan, g->outputs[i].tensor->id), (int)plan->n_groups, &b,
                     err);
    }
    for (uint32_t i = 0; i < g->n_inputs && st == KF_OK; i++) {
        uint32_t b;
        st = buf_for(ex, g->inputs[i]->id, 0, &b, err);
    }
    /* cuBLASLt's workspace lies in the workspace region too, live over the
     * groups with GEMMs, so a run allocates nothing (and a caller's
     * workspace covers it). */
    ex->lt_ws_buf = KF_NONE;
    double t3 = now_ms();
    ex->phase_ms[XPH_KERNELS] = t3 - t2;
    if (st == KF_OK && ex->lt) {
        int first = -1, last = -1;
        for (uint32_t gi = 0; gi < recipes->n; gi++)
            if (recipe_uses_lt(ex, gi)) {
                if (first < 0)
                    first = (int)gi;
                last = (int)gi;
            }
        st = add_buf(ex, KF_NONE, KF_BLT_WORKSPACE_BYTES, first, last, &ex->lt_ws_buf, err);
    }

    /* The regions, then every pointer. */
    if (st == KF_OK)
        st = arena_layout(ex, err);
    uint32_t nb = ex->n_bufs ? ex->n_bufs : 1;
    if (st == KF_OK) {
        ex->cur = kf_mem_calloc(&ex->mem, nb, sizeof *ex->cur);
        ex->want = kf_mem_calloc(&ex->mem, nb, sizeof *ex->want);
        ex->moved = kf_mem_calloc(&ex->mem, nb, sizeof *ex->moved);
        if (!ex->cur || !ex->want || !ex->moved)
            st = kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (st == KF_OK) {
        st = kf_cuda_mem_alloc(&ex->dev, ex->arena_bytes ? ex->arena_bytes : 1, &ex->own_ws, err);
        if (st == KF_OK && ex->consts_bytes)
            st = kf_cuda_mem_alloc(&ex->dev, ex->consts_bytes, &ex->consts, err);
        if (st != KF_OK) {
            char why[KF_MSG_MAX];
            snprintf(why, sizeof why, "%s", err);
            kf_msg_set(err, st, "the program's device memory (%zu + %zu bytes): %s",
                       ex->arena_bytes, ex->consts_bytes, why);
        }
        ex->ws = ex->own_ws;
    }
    if (st == KF_OK && ex->lt)
        st = kf_blt_set_workspace(ex->lt, kf_cx_buf_ptr(ex, ex->lt_ws_buf), KF_BLT_WORKSPACE_BYTES,
                                  err);
    if (st == KF_OK)
        st = kf_cuda_event_create(&ex->dev, &ex->done, err);
    double tb = now_ms();
    if (st == KF_OK)
        st = bind_steps(ex, err);
    double t4 = now_ms();
    ex->phase_ms[XPH_MEMORY] = t4 - t3;
    ex->phase_ms[XPH_BIND] = t4 - tb;
    /* Measured choices run on a zeroed arena, so before the constants; the
     * clamp flag starts clear after them. Counters are zero before any
     * kernel runs. */
    if (st == KF_OK)
        st = zero_counters(ex, err);
    if (st == KF_OK)
        st = measure_choices(ex, err);
    if (st == KF_OK)
        st = kf_cx_clear_flags(ex, ex->stream, err);
    double t5 = now_ms();
    ex->phase_ms[XPH_MEASURE] = t5 - t4;
    /* Constants, once. */
    for (uint32_t t = 0; t < g->n_nodes && st == KF_OK; t++) {
        const kf_tensor *x = g->nodes[t];
        if (x->op != KF_OP_CONST || ex->buf_of[t] == KF_NONE)
            continue;
        st = kf_cuda_copy_to_device(&ex->dev, kf_cx_buf_ptr(ex, ex->buf_of[t]), x->data,
                                    kf_cx_tensor_bytes(x), err);
    }
    if (st == KF_OK)
        st = make_order(ex, err);
    double t6 = now_ms();
    ex->phase_ms[XPH_CONSTANTS] = t6 - t5;
    if (st == KF_OK)
        build_graph(ex);
    ex->phase_ms[XPH_GRAPH] = now_ms() - t6;
    if (st == KF_OK)
        kf_cx_tier_start(ex); /* the deferred kernels compile from here on */
    /* Defensive: the preload starts only when a recipe in use calls cuBLASLt,
     * which then takes it; a thread left over only ends here. */
    if (ex->lt_pre) {
        ex->phase_ms[XPH_LT_THREAD] = kf_blt_preload_finish(ex->lt_pre);
        ex->lt_pre = NULL;
    }
    return st;
}

void kf_cuda_exec_destroy(kf_cuda_exec *ex) {
    if (!ex)
        return;
    kf_cx_tier_free(ex); /* the background compile stopped before anything it reads goes */
    drop_graph(ex);
    kf_cx_capture_free(ex); /* before the modules its graphs launch are unloaded */
    if (ex->nodes)
        kf_mem_free(&ex->mem, ex->nodes, ex->n_order * sizeof *ex->nodes);
    {
        /* each on its own: prepare allocates all three, and one may have
         * failed where the others did not */
        uint32_t nb = ex->n_bufs ? ex->n_bufs : 1;
        kf_mem_free(&ex->mem, ex->cur, nb * sizeof *ex->cur);
        kf_mem_free(&ex->mem, ex->want, nb * sizeof *ex->want);
        kf_mem_free(&ex->mem, ex->moved, nb * sizeof *ex->moved);
    }
    for (uint32_t i = 0; i < ex->n_steps; i++) {
        if (ex->steps[i].kind == KF_CUDA_STEP_KERNEL && ex->steps[i].k) {
            if (ex->dev_open && ex->steps[i].k->mod)
                kf_cuda_module_unload(&ex->dev, ex->steps[i].k->mod);
            kf_mem_free(&ex->mem, ex->steps[i].k, sizeof *ex->steps[i].k);
        }
    }
    kf_mem_free(&ex->mem, ex->steps, ex->cap_steps * sizeof *ex->steps);
    kf_mem_free(&ex->mem, ex->bufs, ex->cap_bufs * sizeof *ex->bufs);
    if (ex->order)
        kf_mem_free(&ex->mem, ex->order, (ex->n_steps + 1) * sizeof *ex->order);
    if (ex->graph) {
        uint32_t nn = ex->graph->n_nodes ? ex->graph->n_nodes : 1;
        kf_mem_free(&ex->mem, ex->buf_of, nn * sizeof *ex->buf_of);
    }
    if (ex->recipes) {
        kf_mem_free(&ex->mem, ex->scratch0, (ex->recipes->n + 1) * sizeof *ex->scratch0);
        kf_mem_free(&ex->mem, ex->choices, (ex->recipes->n + 1) * sizeof *ex->choices);
    }
    kf_cuda_recipes_destroy(ex->recipes);
    kf_blt_preload_finish(ex->lt_pre);
    kf_blt_destroy(ex->lt);
    if (ex->dev_open) {
        if (ex->own_ws)
            kf_cuda_mem_free(&ex->dev, ex->own_ws);
        if (ex->consts)
            kf_cuda_mem_free(&ex->dev, ex->consts);
        if (ex->done)
            kf_cuda_event_destroy(&ex->dev, ex->done);
        kf_cuda_stream_destroy(&ex->dev, ex->stream);
        kf_cuda_device_close(&ex->dev);
    }
    kf_mem m = ex->mem;
    kf_mem_free(&m, ex, sizeof *ex);
}
