/*
 * cuda_exec.c -- a plan on a CUDA device (the contract is in cuda_exec.h).
 *
 *   create:  device -> steps per group (plan_group) -> buffers: one per
 *            materialized tensor + per-step scratch, each with a live range
 *            [first group, last group] -> offsets in one arena (first fit by
 *            decreasing size among buffers live at the same time) -> one
 *            cuMemAlloc -> kernels: CUBIN from the cache (or NVRTC), module
 *            load, argument slots bound to arena addresses -> constants up
 *   run:     inputs up -> steps -> stream sync -> outputs down
 *
 * A step is a kernel launch or a cuBLASLt call with everything resolved at
 * create time, so a run does no planning and no allocation: the host cost per
 * step is the launch itself.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda_codegen.h"
#include "runtime/cache.h"
#include "runtime/ctx.h"
#include "runtime/cublaslt.h"
#include "runtime/cuda_exec.h"
#include "runtime/cuda_kernel.h"

#define ARENA_ALIGN 256u

/* A device buffer: a materialized tensor or a step's scratch. */
typedef struct xbuf {
    uint32_t tensor; /* the tensor it holds, or KF_NONE for scratch */
    size_t bytes;
    int first, last; /* live range in group indices; -1 / n_groups for pinned */
    size_t offset;   /* in the arena */
} xbuf;

typedef enum step_kind { STEP_KERNEL = 0, STEP_GEMM } step_kind;

typedef struct xkernel {
    char name[KF_CUDA_NAME_MAX];
    kf_cu_module mod;
    kf_cu_function fn;
    unsigned grid, block, shared;
    uint32_t n_params;
    kf_cuda_param params[KF_CUDA_MAX_PARAMS];
    uint32_t param_buf[KF_CUDA_MAX_PARAMS]; /* buffer index per param */
    uint64_t slots[KF_CUDA_MAX_PARAMS];
    void *args[KF_CUDA_MAX_PARAMS];
} xkernel;

typedef struct xgemm {
    kf_blt_gemm g;
    /* buffer indices + element offsets of the pointers in g (bound later) */
    uint32_t a_buf, b_buf, c_buf, d_buf, bias_buf;
    int64_t a_off, b_off, c_off, d_off;
} xgemm;

typedef struct xstep {
    step_kind kind;
    uint32_t group;
    xkernel *k; /* STEP_KERNEL */
    xgemm gm;   /* STEP_GEMM */
} xstep;

struct kf_cuda_exec {
    kf_ctx *ctx;
    kf_mem mem;
    const kf_plan *plan;
    const kf_graph *graph;
    kf_cuda_device dev;
    bool dev_open;
    char arch[KF_ARCH_MAX];
    kf_cu_stream stream;
    kf_blt *lt;
    kf_cache *cache;

    xbuf *bufs;
    uint32_t n_bufs, cap_bufs;
    uint32_t *buf_of; /* tensor -> buffer (views: their base's), KF_NONE */
    xstep *steps;
    uint32_t n_steps, cap_steps;
    kf_cu_deviceptr arena;
    size_t arena_bytes, unshared_bytes;

    char (*where)[256]; /* per group: what runs where and why */
    unsigned compiled, hits;

    /* All-kernel programs of 2+ steps: one CUDA graph, launched with one
     * cuGraphLaunch (NULL: direct launches). */
    void *graph_exec;
    void *cu_graph;
    kf_cu_result (*graph_launch)(void *exec, kf_cu_stream stream);
    kf_cu_result (*graph_exec_destroy)(void *exec);
    kf_cu_result (*graph_destroy)(void *graph);
};

/* CUDA_KERNEL_NODE_PARAMS_v2; its prefix is the v1 struct. */
typedef struct kgraph_node_params {
    kf_cu_function func;
    unsigned gx, gy, gz, bx, by, bz, shared;
    void **params;
    void **extra;
    void *kern;
    kf_cu_context ctx;
} kgraph_node_params;

static size_t tensor_bytes(const kf_tensor *t) {
    return (size_t)kf_ir_numel(t) * kf_dtype_size(t->dtype);
}

static void set_where(kf_cuda_exec *ex, uint32_t gi, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_where(kf_cuda_exec *ex, uint32_t gi, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ex->where[gi], sizeof ex->where[gi], fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------------ */
/* Buffers                                                                    */
/* ------------------------------------------------------------------------ */

/* The tensor whose buffer holds t: a view's base (followed through views). */
static uint32_t base_of(const kf_cuda_exec *ex, uint32_t t) {
    for (int hops = 0; hops < 64; hops++) {
        uint32_t g = ex->plan->group_of[t];
        if (g == KF_NONE || ex->plan->groups[g].kind != KF_GROUP_VIEW)
            return t;
        t = ex->plan->groups[g].view_base;
    }
    return t;
}

static kf_status add_buf(kf_cuda_exec *ex, uint32_t tensor, size_t bytes, int first, int last,
                         uint32_t *out, char *err) {
    if (!kf_mem_grow(&ex->mem, (void **)&ex->bufs, &ex->cap_bufs, ex->n_bufs + 1, sizeof *ex->bufs))
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory planning device buffers");
    xbuf *b = &ex->bufs[ex->n_bufs];
    b->tensor = tensor;
    b->bytes = bytes ? bytes : 1;
    b->first = first;
    b->last = last;
    b->offset = 0;
    *out = ex->n_bufs++;
    return KF_OK;
}

/* The buffer of tensor t, created on first use with a live range starting at
 * group `gi` (pinned for inputs, constants and graph outputs). */
static kf_status buf_for(kf_cuda_exec *ex, uint32_t t, int gi, uint32_t *out, char *err) {
    t = base_of(ex, t);
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
    kf_status st = add_buf(ex, t, tensor_bytes(x), pinned ? -1 : gi,
                           pinned ? (int)ex->plan->n_groups : gi, out, err);
    if (st == KF_OK)
        ex->buf_of[t] = *out;
    return st;
}

/* Places every buffer: buffers whose live ranges overlap never share bytes. */
static void arena_layout(kf_cuda_exec *ex) {
    uint32_t n = ex->n_bufs;
    uint32_t *order = malloc(n * sizeof *order + 1);
    uint32_t *placed = malloc(n * sizeof *placed + 1);
    ex->unshared_bytes = 0;
    for (uint32_t i = 0; i < n; i++) {
        ex->unshared_bytes += (ex->bufs[i].bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    }
    if (!order || !placed) {
        /* No reuse without scratch memory: lay everything out end to end. */
        size_t off = 0;
        for (uint32_t i = 0; i < n; i++) {
            ex->bufs[i].offset = off;
            off += (ex->bufs[i].bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
        }
        ex->arena_bytes = off;
        free(order);
        free(placed);
        return;
    }
    for (uint32_t i = 0; i < n; i++)
        order[i] = i;
    /* Insertion sort by size, largest first (n is small). */
    for (uint32_t i = 1; i < n; i++) {
        uint32_t v = order[i], j = i;
        while (j > 0 && ex->bufs[order[j - 1]].bytes < ex->bufs[v].bytes) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    size_t top = 0;
    uint32_t n_placed = 0;
    for (uint32_t i = 0; i < n; i++) {
        xbuf *b = &ex->bufs[order[i]];
        size_t size = (b->bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
        size_t off = 0;
        for (bool moved = true; moved;) {
            moved = false;
            for (uint32_t j = 0; j < n_placed; j++) {
                const xbuf *o = &ex->bufs[placed[j]];
                size_t osize = (o->bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
                bool time = !(o->last < b->first || b->last < o->first);
                bool space = off < o->offset + osize && o->offset < off + size;
                if (time && space) {
                    off = o->offset + osize;
                    moved = true;
                }
            }
        }
        b->offset = off;
        placed[n_placed++] = order[i];
        if (off + size > top)
            top = off + size;
    }
    ex->arena_bytes = top;
    free(order);
    free(placed);
}

static kf_cu_deviceptr buf_ptr(const kf_cuda_exec *ex, uint32_t b) {
    return ex->arena + ex->bufs[b].offset;
}

/* ------------------------------------------------------------------------ */
/* Kernels                                                                    */
/* ------------------------------------------------------------------------ */

static kf_status add_step(kf_cuda_exec *ex, xstep **out, char *err) {
    if (!kf_mem_grow(&ex->mem, (void **)&ex->steps, &ex->cap_steps, ex->n_steps + 1,
                     sizeof *ex->steps))
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory planning the steps");
    *out = &ex->steps[ex->n_steps++];
    memset(*out, 0, sizeof **out);
    return KF_OK;
}

/* Scratch buffers a kernel names, keyed by (kind, tensor) within one group. */
typedef struct scratch_map {
    kf_cuda_param_kind kind[8];
    uint32_t tensor[8];
    uint32_t buf[8];
    int n;
} scratch_map;

static uint32_t scratch_find(const scratch_map *m, kf_cuda_param_kind kind, uint32_t tensor) {
    for (int i = 0; i < m->n; i++)
        if (m->kind[i] == kind && m->tensor[i] == tensor)
            return m->buf[i];
    return KF_NONE;
}

static kf_status scratch_set(scratch_map *m, kf_cuda_param_kind kind, uint32_t tensor,
                             uint32_t buf, char *err) {
    if (m->n == 8)
        return kf_msg_set(err, KF_ERR_INTERNAL, "a group needs more than 8 scratch buffers");
    m->kind[m->n] = kind;
    m->tensor[m->n] = tensor;
    m->buf[m->n++] = buf;
    return KF_OK;
}

static kf_status scratch_get(kf_cuda_exec *ex, scratch_map *m, kf_cuda_param_kind kind,
                             uint32_t tensor, size_t bytes, int gi, uint32_t *out, char *err) {
    uint32_t b = scratch_find(m, kind, tensor);
    if (b != KF_NONE) {
        if (ex->bufs[b].bytes < bytes)
            ex->bufs[b].bytes = bytes;
        *out = b;
        return KF_OK;
    }
    if (m->n == 8)
        return kf_msg_set(err, KF_ERR_INTERNAL, "group %d needs more than 8 scratch buffers", gi);
    kf_status st = add_buf(ex, KF_NONE, bytes, gi, gi, &b, err);
    if (st != KF_OK)
        return st;
    m->kind[m->n] = kind;
    m->tensor[m->n] = tensor;
    m->buf[m->n++] = b;
    *out = b;
    return KF_OK;
}

/* Turns a generated kernel into a step: compiles (through the cache) and
 * loads it, and maps its parameters to buffers. */
static kf_status add_kernel(kf_cuda_exec *ex, kf_cuda_kernel *k, uint32_t gi, scratch_map *sm,
                            char *err) {
    xkernel *xk = kf_mem_calloc(&ex->mem, 1, sizeof *xk);
    if (!xk)
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory for kernel '%s'", k->name);
    xstep *s = NULL;
    kf_status st = add_step(ex, &s, err);
    if (st != KF_OK) {
        kf_mem_free(&ex->mem, xk, sizeof *xk);
        return st;
    }
    s->kind = STEP_KERNEL;
    s->group = gi;
    s->k = xk;
    snprintf(xk->name, sizeof xk->name, "%s", k->name);
    xk->block = k->launch.block;
    xk->shared = k->launch.shared_bytes;
    xk->grid = kf_cuda_kernel_grid(k, ex->dev.sm_count);
    xk->n_params = k->n_params;
    memcpy(xk->params, k->params, k->n_params * sizeof *k->params);
    for (uint32_t i = 0; i < k->n_params && st == KF_OK; i++) {
        const kf_cuda_param *p = &k->params[i];
        switch (p->kind) {
        case KF_CUDA_PARAM_IN:
        case KF_CUDA_PARAM_OUT:
            st = buf_for(ex, p->tensor, (int)gi, &xk->param_buf[i], err);
            break;
        case KF_CUDA_PARAM_ACC:
        case KF_CUDA_PARAM_SCORES:
        case KF_CUDA_PARAM_SCRATCH:
            st = scratch_get(ex, sm, p->kind, p->tensor, (size_t)p->bytes, (int)gi,
                             &xk->param_buf[i], err);
            break;
        default:
            xk->param_buf[i] = KF_NONE;
            st = kf_msg_set(err, KF_ERR_UNSUPPORTED, "kernel '%s': parameter %u has kind %d, which "
                      "this executor does not bind", k->name, i, (int)p->kind);
            break;
        }
    }
    if (st != KF_OK)
        return st;

    /* The CUBIN: through the cache, else NVRTC directly. */
    void *cubin = NULL;
    size_t size = 0;
    bool from_cache = ex->cache != NULL;
    if (ex->cache) {
        bool hit = false;
        kf_cache_msg msg;
        memset(&msg, 0, sizeof msg);
        st = kf_cuda_kernel_cubin(ex->cache, k, &cubin, &size, &hit, &msg, err);
        if (st == KF_OK) {
            if (hit)
                ex->hits++;
            else
                ex->compiled++;
        }
    } else {
        kf_nvrtc_result r;
        memset(&r, 0, sizeof r);
        st = kf_cuda_kernel_compile(&ex->mem, k, &r, err);
        if (st == KF_OK) {
            cubin = r.cubin;
            size = r.cubin_size;
            r.cubin = NULL;
            ex->compiled++;
        }
        kf_nvrtc_result_release(&ex->mem, &r);
    }
    if (st != KF_OK)
        return st;
    st = kf_cuda_module_load(&ex->dev, cubin, k->name, &xk->mod, err);
    if (from_cache)
        kf_cache_blob_free(ex->cache, cubin, size);
    else
        kf_mem_free(&ex->mem, cubin, size);
    if (st == KF_OK)
        st = kf_cuda_function(&ex->dev, xk->mod, k->name, &xk->fn, err);
    /* The device's L2 policy for streamed reads (templates/common.cuh). */
    if (st == KF_OK)
        st = kf_cuda_module_set_u32(&ex->dev, xk->mod, "kf_stream_ef",
                                    ex->dev.stream_evict_first ? 1u : 0u, k->name, err);
    /* Dynamic shared memory (row_warp_staged's ring) above the default 48 KiB
     * needs the function's opt-in; set it whenever there is any, so the
     * launch and the CUDA graph node (which pass xk->shared) always fit. */
    if (st == KF_OK && xk->shared > 0)
        st = kf_cuda_function_set_shared(&ex->dev, xk->fn, xk->shared, k->name, err);
    return st;
}

/* Generates (with `gen`), then adds one kernel. KF_ERR_NOT_FOUND from the
 * generator means "no kernel needed" and is passed back untouched. */
typedef kf_status (*gen_fn)(const kf_plan *, uint32_t, const char *, const kf_mem *,
                            kf_cuda_kernel *);

static kf_status gen_kernel(kf_cuda_exec *ex, const kf_plan *plan, gen_fn gen, uint32_t gi,
                            scratch_map *sm, char *name_out, size_t name_size,
                            kf_cuda_template *tmpl_out, char *err) {
    kf_cuda_kernel k;
    memset(&k, 0, sizeof k);
    kf_status st = gen(plan, gi, ex->arch, &ex->mem, &k);
    if (st == KF_OK) {
        if (name_out)
            snprintf(name_out, name_size, "%s", k.name);
        if (tmpl_out)
            *tmpl_out = k.tmpl;
        st = add_kernel(ex, &k, gi, sm, err);
    } else if (st != KF_ERR_NOT_FOUND) {
        kf_msg_set(err, st, "group %u (%s): %s", gi, plan->groups[gi].name,
             k.error[0] ? k.error : kf_status_str(st));
    }
    kf_cuda_kernel_release(&ex->mem, &k);
    return st;
}

/* ------------------------------------------------------------------------ */
/* GEMMs                                                                      */
/* ------------------------------------------------------------------------ */

/* A matrix operand in device memory: a buffer and the element strides of
 * each dim of the tensor it stands for. */
typedef struct mref {
    uint32_t buf;
    int rank;
    int64_t dims[KF_MAX_RANK], strides[KF_MAX_RANK];
} mref;

static void contiguous(int rank, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        strides[d] = s;
        s *= dims[d];
    }
}

/* The operand reference of tensor t as the plan lays it out. */
static kf_status mref_of(kf_cuda_exec *ex, uint32_t t, int gi, mref *out, char *err) {
    const kf_tensor *x = ex->graph->nodes[t];
    out->rank = x->rank;
    memcpy(out->dims, x->dims, sizeof out->dims);
    uint32_t g = ex->plan->group_of[t];
    if (g != KF_NONE && ex->plan->groups[g].kind == KF_GROUP_VIEW)
        memcpy(out->strides, ex->plan->groups[g].view_strides, sizeof out->strides);
    else
        contiguous(x->rank, x->dims, out->strides);
    return buf_for(ex, t, gi, &out->buf, err);
}

/* A uniform stride for the flattened batch of `op` broadcast into the output
 * batch dims (rank nb, dims bd): false when there is none. */
static bool batch_stride(const mref *op, int nb, const int64_t *bd, int64_t *stride) {
    int ob = op->rank - 2; /* operand batch dims, right-aligned */
    int64_t s[KF_MAX_RANK];
    for (int i = 0; i < nb; i++) {
        int j = i - (nb - ob);
        s[i] = (j >= 0 && op->dims[j] != 1) ? op->strides[j] : 0;
    }
    /* Uniform: the flattened index b maps to b * s_inner; a size-1 dim does not count. */
    int64_t inner = 0, span = 1;
    bool have = false;
    for (int i = nb - 1; i >= 0; i--) {
        if (bd[i] == 1)
            continue;
        if (!have) {
            inner = s[i];
            have = true;
        } else if (s[i] != inner * span) {
            return false;
        }
        span *= bd[i];
    }
    *stride = have ? inner : 0;
    return true;
}

/* Element offset of output batch `b` (flattened) in `op`. */
static int64_t batch_offset(const mref *op, int nb, const int64_t *bd, int64_t b) {
    int ob = op->rank - 2;
    int64_t off = 0;
    for (int i = nb - 1; i >= 0; i--) {
        int64_t idx = b % bd[i];
        b /= bd[i];
        int j = i - (nb - ob);
        if (j >= 0 && op->dims[j] != 1)
            off += idx * op->strides[j];
    }
    return off;
}

static void logical(const mref *op, bool transpose, kf_blt_operand *o) {
    int r = op->rank;
    o->row_stride = transpose ? op->strides[r - 1] : op->strides[r - 2];
    o->col_stride = transpose ? op->strides[r - 2] : op->strides[r - 1];
    /* A dim of size 1 has no meaningful stride: make it the unit one. */
    int64_t rows = transpose ? op->dims[r - 1] : op->dims[r - 2];
    int64_t cols = transpose ? op->dims[r - 2] : op->dims[r - 1];
    if (cols == 1 && o->row_stride != 1) {
        o->col_stride = rows;
        o->row_stride = 1;
        if (rows == 1)
            o->col_stride = 1;
    }
    if (rows == 1 && o->col_stride != 1) {
        o->row_stride = cols;
        o->col_stride = 1;
    }
    o->batch_stride = 0;
}

typedef struct gemm_req {
    const kf_tensor *mm; /* the matmul */
    mref a, b;           /* its operands */
    uint32_t d_buf;      /* contiguous output of mm's shape */
    uint32_t c_buf;      /* residual (contiguous, mm's shape) or KF_NONE */
    uint32_t bias_buf;   /* bias (n elements) or KF_NONE */
    kf_blt_epilogue epi;
    const char *what;
} gemm_req;

static kf_status add_gemm(kf_cuda_exec *ex, uint32_t gi, const gemm_req *r, char *err) {
    const kf_tensor *mm = r->mm;
    int rank = mm->rank, nb = rank - 2;
    kf_blt_gemm g;
    memset(&g, 0, sizeof g);
    g.dtype = mm->dtype;
    g.m = mm->dims[rank - 2];
    g.n = mm->dims[rank - 1];
    g.k = mm->attr.transpose_a ? r->a.dims[r->a.rank - 2] : r->a.dims[r->a.rank - 1];
    g.batch = 1;
    for (int i = 0; i < nb; i++)
        g.batch *= mm->dims[i];
    logical(&r->a, mm->attr.transpose_a, &g.a);
    logical(&r->b, mm->attr.transpose_b, &g.b);
    g.d.row_stride = g.n;
    g.d.col_stride = 1;
    g.d.batch_stride = g.m * g.n;
    g.c = g.d;
    g.beta = r->c_buf != KF_NONE ? 1.0 : 0.0;
    g.epilogue = r->epi;
    g.what = r->what;
    if (!kf_blt_operand_ok(&g.a, g.m, g.k) || !kf_blt_operand_ok(&g.b, g.k, g.n))
        return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                    "GEMM '%s': an operand is a view with no unit stride in its last two dims; "
                    "cuBLASLt cannot read it (a copy kernel for this case is not written yet)",
                    r->what);
    int64_t sa, sb;
    bool uniform = batch_stride(&r->a, nb, mm->dims, &sa) && batch_stride(&r->b, nb, mm->dims, &sb);
    int64_t calls = uniform ? 1 : g.batch;
    if (uniform) {
        g.a.batch_stride = sa;
        g.b.batch_stride = sb;
        /* Fold the batch into M when B is shared and A's rows run on through
         * the batch (x[B, S, D] . w[D, N]): one larger GEMM. */
        if (g.batch > 1 && sb == 0 && g.a.col_stride == 1 && sa == g.m * g.a.row_stride) {
            g.m *= g.batch;
            g.batch = 1;
            g.d.batch_stride = g.c.batch_stride = 0;
        }
    } else {
        g.batch = 1;
    }
    for (int64_t b = 0; b < calls; b++) {
        xstep *s = NULL;
        kf_status st = add_step(ex, &s, err);
        if (st != KF_OK)
            return st;
        s->kind = STEP_GEMM;
        s->group = gi;
        s->gm.g = g;
        s->gm.a_buf = r->a.buf;
        s->gm.b_buf = r->b.buf;
        s->gm.d_buf = r->d_buf;
        s->gm.c_buf = r->c_buf;
        s->gm.bias_buf = r->bias_buf;
        if (!uniform) {
            s->gm.a_off = batch_offset(&r->a, nb, mm->dims, b);
            s->gm.b_off = batch_offset(&r->b, nb, mm->dims, b);
            s->gm.d_off = s->gm.c_off = b * g.m * g.n;
        }
    }
    return KF_OK;
}

/* ------------------------------------------------------------------------ */
/* Which GEMM epilogues cuBLASLt applies exactly                              */
/* ------------------------------------------------------------------------ */

typedef struct epi_match {
    uint32_t top;      /* the highest node cuBLASLt computes (the ACC node if none) */
    kf_blt_epilogue epi;
    uint32_t bias;     /* LOAD node of the bias, or KF_NONE */
    uint32_t residual; /* LOAD node of C, or KF_NONE */
    char why[160];     /* why it stops where it does */
} epi_match;

/* Uses of each node among the nodes the writes reach. */
static void count_uses(const kf_group *grp, uint32_t *uses, bool *live) {
    memset(uses, 0, grp->n_expr * sizeof *uses);
    memset(live, 0, grp->n_expr * sizeof *live);
    for (uint32_t i = 0; i < grp->n_writes; i++)
        if (grp->roots && grp->roots[i] != KF_NONE && grp->roots[i] < grp->n_expr)
            live[grp->roots[i]] = true;
    for (uint32_t k = grp->n_expr; k-- > 0;) {
        if (!live[k])
            continue;
        const kf_expr *e = &grp->expr[k];
        if (e->kind != KF_EXPR_OP)
            continue;
        int arity = kf_form_arity(kf_op_get(e->op)->form);
        for (int j = 0; j < arity && j < 3; j++)
            if (e->src[j] != KF_NONE && e->src[j] < k) {
                live[e->src[j]] = true;
                uses[e->src[j]]++;
            }
    }
}

static bool is_root(const kf_group *grp, uint32_t k) {
    for (uint32_t i = 0; i < grp->n_writes; i++)
        if (grp->roots && grp->roots[i] == k)
            return true;
    return false;
}

/* A LOAD in the GEMM's output space that is a row vector: stride 1 on the last
 * axis, 0 elsewhere. */
static bool is_bias_load(const kf_group *grp, const kf_expr *e, const kf_graph *g) {
    if (e->kind != KF_EXPR_LOAD || e->space != KF_SPACE_OUT || e->dtype != grp->dtype)
        return false;
    if (g->nodes[e->base]->dtype != grp->dtype)
        return false;
    for (int d = 0; d < grp->rank - 1; d++)
        if (e->strides[d] != 0 && grp->dims[d] != 1)
            return false;
    return grp->rank >= 1 && (e->strides[grp->rank - 1] == 1 || grp->dims[grp->rank - 1] == 1);
}

/* A LOAD of a whole contiguous matrix of the output's shape. */
static bool is_residual_load(const kf_group *grp, const kf_expr *e, const kf_graph *g) {
    if (e->kind != KF_EXPR_LOAD || e->space != KF_SPACE_OUT || e->dtype != grp->dtype)
        return false;
    if (g->nodes[e->base]->dtype != grp->dtype)
        return false;
    int64_t s[KF_MAX_RANK];
    contiguous(grp->rank, grp->dims, s);
    for (int d = 0; d < grp->rank; d++)
        if (e->strides[d] != s[d] && grp->dims[d] != 1)
            return false;
    return kf_ir_numel(g->nodes[e->base]) == s[0] * grp->dims[0];
}

/* Walks up from the ACC node through single-use nodes while the chain is
 * act?(ACC (+ C)? (+ bias)?) in cuBLASLt's order; the adds may come in any
 * order and association (each rounds in the reference; cuBLASLt adds in f32
 * and rounds once, inside the dtype's tolerance). */
static void match_epilogue(const kf_group *grp, const kf_graph *g, uint32_t acc,
                           const uint32_t *uses, epi_match *m) {
    m->top = acc;
    m->epi = KF_BLT_EPI_NONE;
    m->bias = m->residual = KF_NONE;
    snprintf(m->why, sizeof m->why, "no epilogue");
    uint32_t cur = acc;
    bool act = false;
    if (is_root(grp, acc)) {
        /* The bare product is itself written: nothing may be folded into it. */
        snprintf(m->why, sizeof m->why, "the product itself is written");
        return;
    }
    for (;;) {
        if (is_root(grp, cur) && cur != acc) {
            snprintf(m->why, sizeof m->why, "the epilogue is exactly cuBLASLt's");
            break;
        }
        if (uses[cur] != 1) {
            if (uses[cur] > 1)
                snprintf(m->why, sizeof m->why, "a value of the epilogue has several uses");
            break;
        }
        /* The one user of cur. */
        uint32_t user = KF_NONE;
        for (uint32_t k = cur + 1; k < grp->n_expr && user == KF_NONE; k++) {
            const kf_expr *e = &grp->expr[k];
            if (e->kind != KF_EXPR_OP)
                continue;
            int arity = kf_form_arity(kf_op_get(e->op)->form);
            for (int j = 0; j < arity && j < 3; j++)
                if (e->src[j] == cur)
                    user = k;
        }
        if (user == KF_NONE)
            break;
        const kf_expr *u = &grp->expr[user];
        if (u->dtype != grp->dtype || u->space != KF_SPACE_OUT) {
            snprintf(m->why, sizeof m->why, "the epilogue changes dtype or space");
            break;
        }
        if (act) {
            snprintf(m->why, sizeof m->why, "%s follows the activation (cuBLASLt applies it "
                     "last)", kf_op_get(u->op)->name);
            break;
        }
        if (u->op == KF_OP_RELU || u->op == KF_OP_GELU_TANH) {
            m->epi = u->op == KF_OP_RELU ? KF_BLT_EPI_RELU : KF_BLT_EPI_GELU;
            if (m->bias != KF_NONE)
                m->epi = kf_blt_epilogue_with_bias(m->epi);
            act = true;
            m->top = cur = user;
            continue;
        }
        if (u->op == KF_OP_ADD) {
            uint32_t other = u->src[0] == cur ? u->src[1] : u->src[0];
            const kf_expr *o = &grp->expr[other];
            if (m->bias == KF_NONE && is_bias_load(grp, o, g)) {
                m->bias = other;
                m->epi = kf_blt_epilogue_with_bias(m->epi);
                m->top = cur = user;
                continue;
            }
            if (m->residual == KF_NONE && is_residual_load(grp, o, g)) {
                m->residual = other;
                m->top = cur = user;
                continue;
            }
        }
        snprintf(m->why, sizeof m->why, "%s is not a cuBLASLt epilogue%s",
                 kf_op_get(u->op)->name,
                 u->op == KF_OP_GELU ? " (kfuse's gelu is erf; cuBLASLt's GELU is tanh)" : "");
        break;
    }
    if (m->top == acc) {
        m->epi = KF_BLT_EPI_NONE;
        m->bias = m->residual = KF_NONE;
    }
}

/* The GEMM group's plan with node `top` turned into the ACC node, so the
 * codegen's epilogue kernel starts from what cuBLASLt wrote. */
static kf_status plan_with_acc_at(kf_cuda_exec *ex, uint32_t gi, uint32_t acc, uint32_t top,
                                  kf_plan *copy, kf_group **groups, kf_expr **expr, char *err) {
    const kf_plan *plan = ex->plan;
    *copy = *plan;
    *groups = kf_mem_alloc(&ex->mem, plan->n_groups * sizeof **groups);
    *expr = kf_mem_alloc(&ex->mem, plan->groups[gi].n_expr * sizeof **expr);
    if (!*groups || !*expr)
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(*groups, plan->groups, plan->n_groups * sizeof **groups);
    memcpy(*expr, plan->groups[gi].expr, plan->groups[gi].n_expr * sizeof **expr);
    uint32_t keep_tensor = (*expr)[top].tensor;
    (*expr)[top] = (*expr)[acc];
    (*expr)[top].tensor = keep_tensor;
    (*groups)[gi].expr = *expr;
    copy->groups = *groups;
    return KF_OK;
}

static uint32_t find_acc(const kf_group *grp, int anchor) {
    for (uint32_t k = 0; k < grp->n_expr; k++)
        if (grp->expr[k].kind == KF_EXPR_ACC && grp->expr[k].anchor == anchor)
            return k;
    return KF_NONE;
}

static kf_status plan_gemm(kf_cuda_exec *ex, uint32_t gi, char *err) {
    const kf_plan *plan = ex->plan;
    const kf_group *grp = &plan->groups[gi];
    const kf_graph *g = ex->graph;
    const kf_gemm_info *gm = &grp->gemm;
    scratch_map sm = {.n = 0};
    kf_status st;
    char pro_name[KF_CUDA_NAME_MAX] = "", epi_name[KF_CUDA_NAME_MAX] = "";

    /* 1. A norm prologue on A: a kernel writes A into scratch. */
    if (gm->a_prologue) {
        st = gen_kernel(ex, plan, kf_cuda_codegen_gemm_prologue, gi, &sm, pro_name,
                        sizeof pro_name, NULL, err);
        if (st != KF_OK)
            return st == KF_ERR_NOT_FOUND
                       ? kf_msg_set(err, KF_ERR_INTERNAL, "group %u (%s) has a norm prologue but the "
                              "codegen made no kernel for it", gi, grp->name)
                       : st;
    }

    /* 2. What cuBLASLt can apply itself. */
    uint32_t *uses = kf_mem_calloc(&ex->mem, grp->n_expr + 1, sizeof *uses);
    bool *live = kf_mem_calloc(&ex->mem, grp->n_expr + 1, sizeof *live);
    if (!uses || !live) {
        kf_mem_free(&ex->mem, uses, (grp->n_expr + 1) * sizeof *uses);
        kf_mem_free(&ex->mem, live, (grp->n_expr + 1) * sizeof *live);
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory");
    }
    count_uses(grp, uses, live);
    uint32_t acc = gm->n_anchors == 1 ? find_acc(grp, 0) : KF_NONE;
    epi_match m = {.top = acc, .epi = KF_BLT_EPI_NONE, .bias = KF_NONE, .residual = KF_NONE};
    snprintf(m.why, sizeof m.why, "no epilogue");
    bool no_lt_epi = (ex->ctx->flags & KF_FLAG_NO_CUBLASLT) != 0;
    if (acc != KF_NONE && !gm->row_epilogue && !no_lt_epi)
        match_epilogue(grp, g, acc, uses, &m);
    else if (gm->n_anchors == 2)
        snprintf(m.why, sizeof m.why, "two GEMMs share A (SwiGLU): cuBLASLt runs each bare");
    else if (gm->row_epilogue)
        snprintf(m.why, sizeof m.why, "a row-wise norm follows the GEMM");
    kf_mem_free(&ex->mem, uses, (grp->n_expr + 1) * sizeof *uses);
    kf_mem_free(&ex->mem, live, (grp->n_expr + 1) * sizeof *live);

    /* Every write is m.top, or the bare matmul, and only one of them: cuBLASLt
     * writes the output and no kernel is needed. */
    bool all_native = grp->n_writes == 1 && gm->n_anchors == 1 && !gm->row_epilogue &&
                      (grp->roots[0] == KF_NONE || (acc != KF_NONE && grp->roots[0] == m.top &&
                                                    m.top != acc)) ;
    if (grp->n_writes == 1 && grp->roots[0] != KF_NONE && acc != KF_NONE && grp->roots[0] == acc)
        all_native = true; /* the write is the ACC node itself */

    /* 3. The GEMM(s). */
    for (int i = 0; i < gm->n_anchors; i++) {
        gemm_req r;
        memset(&r, 0, sizeof r);
        r.mm = g->nodes[gm->anchor[i]];
        r.what = grp->name;
        r.c_buf = r.bias_buf = KF_NONE;
        if (gm->a_prologue) {
            uint32_t sb = scratch_find(&sm, KF_CUDA_PARAM_SCRATCH, gm->a[i]);
            if (sb == KF_NONE && sm.n > 0)
                sb = scratch_find(&sm, KF_CUDA_PARAM_SCRATCH, sm.tensor[0]);
            if (sb == KF_NONE)
                return kf_msg_set(err, KF_ERR_INTERNAL, "group %u (%s): the prologue kernel writes "
                            "no scratch A", gi, grp->name);
            const kf_tensor *at = g->nodes[gm->a[i]];
            r.a.buf = sb;
            r.a.rank = at->rank;
            memcpy(r.a.dims, at->dims, sizeof r.a.dims);
            contiguous(at->rank, at->dims, r.a.strides);
        } else {
            st = mref_of(ex, gm->a[i], (int)gi, &r.a, err);
            if (st != KF_OK)
                return st;
        }
        st = mref_of(ex, gm->b[i], (int)gi, &r.b, err);
        if (st != KF_OK)
            return st;
        if (all_native) {
            st = buf_for(ex, grp->writes[0], (int)gi, &r.d_buf, err);
            r.epi = m.epi;
            if (st == KF_OK && m.bias != KF_NONE)
                st = buf_for(ex, grp->expr[m.bias].base, (int)gi, &r.bias_buf, err);
            if (st == KF_OK && m.residual != KF_NONE)
                st = buf_for(ex, grp->expr[m.residual].base, (int)gi, &r.c_buf, err);
        } else {
            /* cuBLASLt writes the prefix (or the bare product) into the ACC
             * buffer the epilogue kernel reads: the matmul's own buffer when
             * the bare product is also a write, else a scratch. */
            bool prefix = i == 0 && gm->n_anchors == 1 && acc != KF_NONE && m.top != acc;
            r.epi = prefix ? m.epi : KF_BLT_EPI_NONE;
            /* A write whose value is exactly what cuBLASLt leaves: the bare
             * product (the codegen leaves ACC-rooted writes to cuBLASLt), or
             * the prefix's top node. cuBLASLt writes straight into it. */
            uint32_t direct = KF_NONE;
            for (uint32_t w = 0; w < grp->n_writes; w++) {
                uint32_t rt = grp->roots[w];
                bool bare = (rt == KF_NONE && grp->writes[w] == gm->anchor[i]) ||
                            (rt != KF_NONE && grp->expr[rt].kind == KF_EXPR_ACC &&
                             grp->expr[rt].anchor == i);
                if (prefix ? rt == m.top : bare)
                    direct = grp->writes[w];
            }
            if (direct != KF_NONE) {
                st = buf_for(ex, direct, (int)gi, &r.d_buf, err);
                if (st == KF_OK)
                    st = scratch_set(&sm, KF_CUDA_PARAM_ACC, gm->anchor[i], r.d_buf, err);
            } else {
                st = scratch_get(ex, &sm, KF_CUDA_PARAM_ACC, gm->anchor[i], tensor_bytes(r.mm),
                                 (int)gi, &r.d_buf, err);
            }
            if (st == KF_OK && prefix && m.bias != KF_NONE)
                st = buf_for(ex, grp->expr[m.bias].base, (int)gi, &r.bias_buf, err);
            if (st == KF_OK && prefix && m.residual != KF_NONE)
                st = buf_for(ex, grp->expr[m.residual].base, (int)gi, &r.c_buf, err);
        }
        if (st != KF_OK)
            return st;
        st = add_gemm(ex, gi, &r, err);
        if (st != KF_OK)
            return st;
    }

    /* 4. The rest of the epilogue: one generated kernel. */
    if (!all_native) {
        if (acc != KF_NONE && m.top != acc) {
            kf_plan copy;
            kf_group *groups = NULL;
            kf_expr *expr = NULL;
            st = plan_with_acc_at(ex, gi, acc, m.top, &copy, &groups, &expr, err);
            if (st == KF_OK)
                st = gen_kernel(ex, &copy, kf_cuda_codegen_epilogue, gi, &sm, epi_name,
                                sizeof epi_name, NULL, err);
            kf_mem_free(&ex->mem, groups, plan->n_groups * sizeof *groups);
            kf_mem_free(&ex->mem, expr, grp->n_expr * sizeof *expr);
        } else {
            st = gen_kernel(ex, plan, kf_cuda_codegen_epilogue, gi, &sm, epi_name,
                            sizeof epi_name, NULL, err);
        }
        if (st == KF_ERR_NOT_FOUND)
            st = KF_OK;
        if (st != KF_OK)
            return st;
        for (uint32_t w = 0; w < grp->n_writes; w++) {
            /* Only when cuBLASLt wrote a prefix, not the bare product. */
            uint32_t rt = grp->roots[w];
            bool bare = rt == KF_NONE || grp->expr[rt].kind == KF_EXPR_ACC;
            if (!bare || acc == KF_NONE || m.top == acc || gm->n_anchors != 1)
                continue;
            /* The bare matmul is a write: copy cuBLASLt's result there by
             * running the GEMM once more into the write's buffer. */
            gemm_req r;
            memset(&r, 0, sizeof r);
            uint32_t wi = grp->writes[w];
            int ai = wi == gm->anchor[0] ? 0 : 1;
            r.mm = g->nodes[wi];
            r.what = grp->name;
            r.c_buf = r.bias_buf = KF_NONE;
            r.epi = KF_BLT_EPI_NONE;
            if (gm->a_prologue) {
                const kf_tensor *at = g->nodes[gm->a[ai]];
                r.a.buf = scratch_find(&sm, KF_CUDA_PARAM_SCRATCH, gm->a[ai]);
                if (r.a.buf == KF_NONE)
                    r.a.buf = sm.buf[0];
                r.a.rank = at->rank;
                memcpy(r.a.dims, at->dims, sizeof r.a.dims);
                contiguous(at->rank, at->dims, r.a.strides);
            } else if ((st = mref_of(ex, gm->a[ai], (int)gi, &r.a, err)) != KF_OK) {
                return st;
            }
            if ((st = mref_of(ex, gm->b[ai], (int)gi, &r.b, err)) != KF_OK)
                return st;
            if ((st = buf_for(ex, wi, (int)gi, &r.d_buf, err)) != KF_OK)
                return st;
            if ((st = add_gemm(ex, gi, &r, err)) != KF_OK)
                return st;
        }
    }
    char epi_desc[96];
    snprintf(epi_desc, sizeof epi_desc, "%s%s", kf_blt_epilogue_name(m.epi),
             m.residual != KF_NONE ? "+beta*C" : "");
    if (all_native)
        set_where(ex, gi, "cuBLASLt%s, epilogue %s (%s)%s%s", gm->n_anchors == 2 ? " x2" : "",
                  epi_desc, m.why, pro_name[0] ? "; prologue kernel " : "", pro_name);
    else
        set_where(ex, gi, "cuBLASLt%s, epilogue %s, then kernel %s (%s)%s%s",
                  gm->n_anchors == 2 ? " x2" : "", epi_desc, epi_name[0] ? epi_name : "-", m.why,
                  pro_name[0] ? "; prologue kernel " : "", pro_name);
    return KF_OK;
}

/* ------------------------------------------------------------------------ */
/* Attention (unfused fallback)                                               */
/* ------------------------------------------------------------------------ */

static kf_status plan_attention(kf_cuda_exec *ex, uint32_t gi, char *err) {
    const kf_plan *plan = ex->plan;
    const kf_group *grp = &plan->groups[gi];
    const kf_graph *g = ex->graph;
    const kf_attn_info *at = &grp->attn;
    scratch_map sm = {.n = 0};
    const kf_tensor *qk = g->nodes[at->qk], *sm_t = g->nodes[at->softmax], *pv = g->nodes[at->pv];

    /* 1. S = Q . K^T into the scores scratch. */
    gemm_req r;
    memset(&r, 0, sizeof r);
    r.mm = qk;
    r.what = grp->name;
    r.c_buf = r.bias_buf = KF_NONE;
    r.epi = KF_BLT_EPI_NONE;
    kf_status st = mref_of(ex, at->q, (int)gi, &r.a, err);
    if (st == KF_OK)
        st = mref_of(ex, at->k, (int)gi, &r.b, err);
    if (st == KF_OK)
        st = scratch_get(ex, &sm, KF_CUDA_PARAM_SCORES, at->qk, tensor_bytes(qk), (int)gi,
                         &r.d_buf, err);
    if (st == KF_OK)
        st = add_gemm(ex, gi, &r, err);
    if (st != KF_OK)
        return st;

    /* 2. P = softmax(score expression) by a generated row-wise kernel. */
    char name[KF_CUDA_NAME_MAX] = "";
    st = gen_kernel(ex, plan, kf_cuda_codegen_attention_softmax, gi, &sm, name, sizeof name, NULL, err);
    if (st != KF_OK)
        return st == KF_ERR_NOT_FOUND ? kf_msg_set(err, KF_ERR_INTERNAL, "group %u: no softmax kernel",
                                             gi)
                                      : st;
    /* The kernel's OUT param for the softmax tensor got a plain buffer through
     * buf_for; P is the second GEMM's A. */
    uint32_t p_buf = ex->buf_of[at->softmax];
    if (p_buf == KF_NONE)
        return kf_msg_set(err, KF_ERR_INTERNAL, "group %u (%s): the softmax kernel writes no P", gi,
                    grp->name);

    /* 3. O = P . V. */
    memset(&r, 0, sizeof r);
    r.mm = pv;
    r.what = grp->name;
    r.c_buf = r.bias_buf = KF_NONE;
    r.epi = KF_BLT_EPI_NONE;
    r.a.buf = p_buf;
    r.a.rank = sm_t->rank;
    memcpy(r.a.dims, sm_t->dims, sizeof r.a.dims);
    contiguous(sm_t->rank, sm_t->dims, r.a.strides);
    st = mref_of(ex, at->v, (int)gi, &r.b, err);
    if (st == KF_OK)
        st = buf_for(ex, at->pv, (int)gi, &r.d_buf, err);
    if (st == KF_OK)
        st = add_gemm(ex, gi, &r, err);
    if (st == KF_OK)
        set_where(ex, gi,
                  "unfused fallback: cuBLASLt Q.K^T, kernel %s (score expression, mask %s), "
                  "cuBLASLt P.V (fused attention kernels come in a later issue)",
                  name, kf_mask_kind_name(at->mask));
    return st;
}

/* ------------------------------------------------------------------------ */
/* Create, run, destroy                                                       */
/* ------------------------------------------------------------------------ */

bool kf_cuda_exec_available(kf_ctx *ctx) {
    const kf_cuda_driver *drv;
    return ctx && kf_ctx_cuda_driver(ctx, &drv, NULL) == KF_OK && drv->device_count > ctx->device;
}

static bool plan_has_gemm(const kf_plan *plan) {
    for (uint32_t i = 0; i < plan->n_groups; i++)
        if (plan->groups[i].kind == KF_GROUP_GEMM || plan->groups[i].kind == KF_GROUP_ATTENTION)
            return true;
    return false;
}

/* The steps as one CUDA graph when every step is a kernel and there are at
 * least two: a run is then one cuGraphLaunch, which costs the host less than
 * a cuLaunchKernel per kernel. Arguments are bound once at create time, so
 * the graph never needs updating. Any failure (an old driver without the
 * entry points included) leaves the direct launches; KF_CUDA_GRAPH=0 turns
 * the graph off. */
static void build_graph(kf_cuda_exec *ex) {
    const kf_cuda_driver *drv = ex->dev.drv;
    const char *env = getenv("KF_CUDA_GRAPH");
    if ((env && env[0] == '0') || ex->n_steps < 2 || !drv || !drv->lib)
        return;
    for (uint32_t i = 0; i < ex->n_steps; i++)
        if (ex->steps[i].kind != STEP_KERNEL)
            return;
    typedef kf_cu_result (*create_fn)(void **, unsigned);
    typedef kf_cu_result (*add_fn)(void **, void *, void *const *, size_t,
                                   const kgraph_node_params *);
    typedef kf_cu_result (*inst_fn)(void **, void *, unsigned long long);
    /* dlsym returns void *; POSIX guarantees it converts to a function pointer. */
    create_fn gcreate = (create_fn)(uintptr_t)dlsym(drv->lib, "cuGraphCreate");
    add_fn gadd = (add_fn)(uintptr_t)dlsym(drv->lib, "cuGraphAddKernelNode_v2");
    if (!gadd)
        gadd = (add_fn)(uintptr_t)dlsym(drv->lib, "cuGraphAddKernelNode");
    inst_fn ginst = (inst_fn)(uintptr_t)dlsym(drv->lib, "cuGraphInstantiateWithFlags");
    ex->graph_launch = (kf_cu_result(*)(void *, kf_cu_stream))(uintptr_t)dlsym(drv->lib,
                                                                              "cuGraphLaunch");
    ex->graph_exec_destroy =
        (kf_cu_result(*)(void *))(uintptr_t)dlsym(drv->lib, "cuGraphExecDestroy");
    ex->graph_destroy = (kf_cu_result(*)(void *))(uintptr_t)dlsym(drv->lib, "cuGraphDestroy");
    if (!gcreate || !gadd || !ginst || !ex->graph_launch || !ex->graph_exec_destroy ||
        !ex->graph_destroy)
        return;
    kf_cu_context cur = NULL;
    if (drv->cuCtxGetCurrent(&cur) != 0 || cur != ex->dev.ctx)
        if (drv->cuCtxSetCurrent(ex->dev.ctx) != 0)
            return;
    void *graph = NULL, *prev = NULL;
    if (gcreate(&graph, 0) != 0 || !graph)
        return;
    for (uint32_t i = 0; i < ex->n_steps; i++) {
        const xkernel *k = ex->steps[i].k;
        kgraph_node_params p = {k->fn, k->grid, 1, 1, k->block, 1, 1, k->shared,
                                (void **)k->args, NULL, NULL, NULL};
        void *node = NULL;
        if (gadd(&node, graph, prev ? &prev : NULL, prev ? 1 : 0, &p) != 0) {
            ex->graph_destroy(graph);
            return;
        }
        prev = node;
    }
    void *exec = NULL;
    if (ginst(&exec, graph, 0) != 0 || !exec) {
        ex->graph_destroy(graph);
        return;
    }
    ex->cu_graph = graph;
    ex->graph_exec = exec;
}

kf_status kf_cuda_exec_create(kf_ctx *ctx, const kf_plan *plan, kf_cuda_exec **out, char *err) {
    if (!ctx || !plan || !out)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_exec_create: NULL argument");
    *out = NULL;
    const kf_cuda_driver *drv;
    kf_status st = kf_ctx_cuda_driver(ctx, &drv, err);
    if (st != KF_OK)
        return st;
    kf_cuda_exec *ex = kf_mem_calloc(&ctx->mem, 1, sizeof *ex);
    if (!ex)
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory");
    ex->ctx = ctx;
    ex->mem = ctx->mem;
    ex->plan = plan;
    ex->graph = plan->graph;
    const kf_graph *g = plan->graph;
    uint32_t nn = g->n_nodes ? g->n_nodes : 1;
    ex->buf_of = kf_mem_alloc(&ex->mem, nn * sizeof *ex->buf_of);
    ex->where = kf_mem_calloc(&ex->mem, plan->n_groups + 1, sizeof *ex->where);
    if (!ex->buf_of || !ex->where) {
        kf_cuda_exec_destroy(ex);
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory");
    }
    for (uint32_t i = 0; i < nn; i++)
        ex->buf_of[i] = KF_NONE;

    st = kf_cuda_device_open(drv, ctx->device, &ex->dev, err);
    if (st == KF_OK) {
        ex->dev_open = true;
        snprintf(ex->arch, sizeof ex->arch, "%s", ctx->arch ? ctx->arch : ex->dev.arch);
        st = kf_cuda_stream_create(&ex->dev, &ex->stream, err);
    }
    if (st == KF_OK)
        st = kf_ctx_cache(ctx, &ex->cache, err);
    if (st == KF_OK && plan_has_gemm(plan)) {
        st = kf_blt_create(&ex->mem, &ex->dev, &ex->lt, err);
        if (st != KF_OK) {
            char why[KF_MSG_MAX];
            snprintf(why, sizeof why, "%s", err);
            kf_msg_set(err, st, "the plan has GEMMs, which run through cuBLASLt on the CUDA target: %s",
                 why);
        }
    }

    /* Steps, group by group. */
    for (uint32_t gi = 0; gi < plan->n_groups && st == KF_OK; gi++) {
        const kf_group *grp = &plan->groups[gi];
        scratch_map sm = {.n = 0};
        switch (grp->kind) {
        case KF_GROUP_VIEW:
            set_where(ex, gi, "no kernel: a view of %%%u's buffer", grp->view_base);
            break;
        case KF_GROUP_ELEMENTWISE:
        case KF_GROUP_ROWWISE:
        case KF_GROUP_COLREDUCE:
        case KF_GROUP_LAYOUT: {
            char name[KF_CUDA_NAME_MAX] = "";
            /* the template the generator chose (row_warp_staged depends on the
             * loads and the arch) */
            kf_cuda_template tmpl = KF_CUDA_TEMPLATE_COUNT;
            st = gen_kernel(ex, plan, kf_cuda_codegen_group, gi, &sm, name, sizeof name, &tmpl, err);
            if (st == KF_OK)
                set_where(ex, gi, "kernel %s (%s %s template)", name, ex->arch,
                          kf_cuda_template_name(tmpl));
            break;
        }
        case KF_GROUP_GEMM:
            st = plan_gemm(ex, gi, err);
            break;
        case KF_GROUP_ATTENTION:
            st = plan_attention(ex, gi, err);
            break;
        default:
            st = kf_msg_set(err, KF_ERR_INTERNAL, "group %u has kind %d", gi, (int)grp->kind);
            break;
        }
    }
    /* Graph outputs that no group writes (an input or constant as an output,
     * an output that is a view) still need their buffer for copy-out. */
    for (uint32_t i = 0; i < g->n_outputs && st == KF_OK; i++) {
        uint32_t b;
        st = buf_for(ex, g->outputs[i].tensor->id, (int)plan->n_groups, &b, err);
    }
    for (uint32_t i = 0; i < g->n_inputs && st == KF_OK; i++) {
        uint32_t b;
        st = buf_for(ex, g->inputs[i]->id, 0, &b, err);
    }

    /* The arena, then every pointer. */
    if (st == KF_OK) {
        arena_layout(ex);
        st = kf_cuda_mem_alloc(&ex->dev, ex->arena_bytes ? ex->arena_bytes : 1, &ex->arena, err);
        if (st != KF_OK) {
            char why[KF_MSG_MAX];
            snprintf(why, sizeof why, "%s", err);
            kf_msg_set(err, st, "the program's device memory (%zu bytes): %s", ex->arena_bytes, why);
        }
    }
    for (uint32_t i = 0; i < ex->n_steps && st == KF_OK; i++) {
        xstep *s = &ex->steps[i];
        if (s->kind == STEP_KERNEL) {
            for (uint32_t p = 0; p < s->k->n_params; p++) {
                s->k->slots[p] = buf_ptr(ex, s->k->param_buf[p]);
                s->k->args[p] = &s->k->slots[p];
            }
        } else {
            xgemm *x = &s->gm;
            size_t es = kf_dtype_size(x->g.dtype);
            x->g.a.ptr = buf_ptr(ex, x->a_buf) + (kf_cu_deviceptr)(x->a_off * (int64_t)es);
            x->g.b.ptr = buf_ptr(ex, x->b_buf) + (kf_cu_deviceptr)(x->b_off * (int64_t)es);
            x->g.d.ptr = buf_ptr(ex, x->d_buf) + (kf_cu_deviceptr)(x->d_off * (int64_t)es);
            x->g.c.ptr = x->c_buf != KF_NONE
                             ? buf_ptr(ex, x->c_buf) + (kf_cu_deviceptr)(x->c_off * (int64_t)es)
                             : 0;
            x->g.bias = x->bias_buf != KF_NONE ? buf_ptr(ex, x->bias_buf) : 0;
            /* Ask the heuristic now, so a run only launches. */
            if (!kf_blt_supported(ex->lt, &x->g) && x->g.epilogue != KF_BLT_EPI_NONE) {
                st = kf_msg_set(err, KF_ERR_UNSUPPORTED,
                          "cuBLASLt has no algorithm for GEMM '%s' with epilogue %s",
                          x->g.what, kf_blt_epilogue_name(x->g.epilogue));
            }
        }
    }
    /* Constants, once. */
    for (uint32_t t = 0; t < g->n_nodes && st == KF_OK; t++) {
        const kf_tensor *x = g->nodes[t];
        if (x->op != KF_OP_CONST || ex->buf_of[t] == KF_NONE || base_of(ex, t) != t)
            continue;
        st = kf_cuda_copy_to_device(&ex->dev, buf_ptr(ex, ex->buf_of[t]), x->data,
                                    tensor_bytes(x), err);
    }
    if (st != KF_OK) {
        kf_cuda_exec_destroy(ex);
        return st;
    }
    build_graph(ex);
    *out = ex;
    return KF_OK;
}

void kf_cuda_exec_destroy(kf_cuda_exec *ex) {
    if (!ex)
        return;
    if (ex->graph_exec)
        ex->graph_exec_destroy(ex->graph_exec);
    if (ex->cu_graph)
        ex->graph_destroy(ex->cu_graph);
    for (uint32_t i = 0; i < ex->n_steps; i++) {
        if (ex->steps[i].kind == STEP_KERNEL && ex->steps[i].k) {
            if (ex->dev_open)
                kf_cuda_module_unload(&ex->dev, ex->steps[i].k->mod);
            kf_mem_free(&ex->mem, ex->steps[i].k, sizeof *ex->steps[i].k);
        }
    }
    kf_mem_free(&ex->mem, ex->steps, ex->cap_steps * sizeof *ex->steps);
    kf_mem_free(&ex->mem, ex->bufs, ex->cap_bufs * sizeof *ex->bufs);
    uint32_t nn = ex->graph->n_nodes ? ex->graph->n_nodes : 1;
    kf_mem_free(&ex->mem, ex->buf_of, nn * sizeof *ex->buf_of);
    kf_mem_free(&ex->mem, ex->where, (ex->plan->n_groups + 1) * sizeof *ex->where);
    kf_blt_destroy(ex->lt);
    if (ex->dev_open) {
        if (ex->arena)
            kf_cuda_mem_free(&ex->dev, ex->arena);
        kf_cuda_stream_destroy(&ex->dev, ex->stream);
        kf_cuda_device_close(&ex->dev);
    }
    kf_mem m = ex->mem;
    kf_mem_free(&m, ex, sizeof *ex);
}

/* Every step on `stream`. The device's context is made current once, then
 * each kernel is one cuLaunchKernel with arguments bound at create time: the
 * host cost per kernel is the driver's launch itself. */
static kf_status launch_all(kf_cuda_exec *ex, kf_cu_stream stream, char *err) {
    const kf_cuda_driver *drv = ex->dev.drv;
    kf_cu_context cur = NULL;
    kf_status st = KF_OK;
    if (drv->cuCtxGetCurrent(&cur) != 0 || cur != ex->dev.ctx)
        st = kf_cuda_check(drv, drv->cuCtxSetCurrent(ex->dev.ctx), "cuCtxSetCurrent", NULL, err);
    if (st == KF_OK && ex->graph_exec) {
        kf_cu_result r = ex->graph_launch(ex->graph_exec, stream);
        if (r != 0)
            st = kf_cuda_check(drv, r, "cuGraphLaunch", ex->steps[0].k->name, err);
        return st;
    }
    for (uint32_t i = 0; i < ex->n_steps && st == KF_OK; i++) {
        xstep *s = &ex->steps[i];
        if (s->kind == STEP_KERNEL) {
            const xkernel *k = s->k;
            kf_cu_result r = drv->cuLaunchKernel(k->fn, k->grid, 1, 1, k->block, 1, 1, k->shared,
                                                 stream, (void **)k->args, NULL);
            if (r != 0)
                st = kf_cuda_check(drv, r, "cuLaunchKernel", k->name, err);
        } else {
            st = kf_blt_matmul(ex->lt, &s->gm.g, stream, err);
        }
    }
    return st;
}

kf_status kf_cuda_exec_launch(kf_cuda_exec *ex, void *stream, char *err) {
    if (!ex)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_exec_launch: NULL exec");
    return launch_all(ex, stream ? (kf_cu_stream)stream : ex->stream, err);
}

kf_status kf_cuda_exec_run(kf_cuda_exec *ex, void *const *bound, void *stream, char *err) {
    if (!ex || !bound)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_exec_run: NULL argument");
    const kf_graph *g = ex->graph;
    kf_cu_stream s = stream ? (kf_cu_stream)stream : ex->stream;
    kf_status st = KF_OK;
    for (uint32_t i = 0; i < g->n_inputs && st == KF_OK; i++) {
        const kf_tensor *t = g->inputs[i];
        if (bound[t->id] && ex->buf_of[t->id] != KF_NONE)
            st = kf_cuda_copy_to_device(&ex->dev, buf_ptr(ex, ex->buf_of[t->id]), bound[t->id],
                                        tensor_bytes(t), err);
    }
    if (st == KF_OK)
        st = launch_all(ex, s, err);
    const char *last = ex->n_steps ? (ex->steps[ex->n_steps - 1].kind == STEP_KERNEL
                                          ? ex->steps[ex->n_steps - 1].k->name
                                          : ex->steps[ex->n_steps - 1].gm.g.what)
                                   : NULL;
    if (st == KF_OK)
        st = kf_cuda_stream_sync(&ex->dev, s, last, err);
    for (uint32_t i = 0; i < g->n_outputs && st == KF_OK; i++) {
        const kf_tensor *t = g->outputs[i].tensor;
        if (!bound[t->id] || t->op == KF_OP_INPUT)
            continue;
        st = kf_cuda_exec_copy_out(ex, t->id, bound[t->id], tensor_bytes(t), err);
    }
    return st;
}

kf_status kf_cuda_exec_copy_out(kf_cuda_exec *ex, uint32_t t, void *dst, size_t bytes, char *err) {
    if (!ex || !dst || t >= ex->graph->n_nodes)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_exec_copy_out: bad argument");
    uint32_t b = ex->buf_of[base_of(ex, t)];
    if (b == KF_NONE)
        return kf_msg_set(err, KF_ERR_NOT_FOUND, "tensor %%%u has no device buffer", t);
    uint32_t vg = ex->plan->group_of[t];
    if (vg != KF_NONE && ex->plan->groups[vg].kind == KF_GROUP_VIEW &&
        !ex->plan->groups[vg].view_contiguous)
        return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                    "output %%%u is a non-contiguous view; the plan should have copied it", t);
    return kf_cuda_copy_to_host(&ex->dev, dst, buf_ptr(ex, b), bytes, err);
}

kf_status kf_cuda_exec_set_input(kf_cuda_exec *ex, uint32_t t, const void *src, size_t bytes,
                                 char *err) {
    if (!ex || !src || t >= ex->graph->n_nodes || ex->buf_of[t] == KF_NONE)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_exec_set_input: bad argument");
    return kf_cuda_copy_to_device(&ex->dev, buf_ptr(ex, ex->buf_of[t]), src, bytes, err);
}

size_t kf_cuda_exec_launch_count(const kf_cuda_exec *ex) { return ex ? ex->n_steps : 0; }
void *kf_cuda_exec_stream(const kf_cuda_exec *ex) { return ex ? (void *)ex->stream : NULL; }
const kf_cuda_device *kf_cuda_exec_device(const kf_cuda_exec *ex) { return ex ? &ex->dev : NULL; }

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

void kf_cuda_exec_report(const kf_cuda_exec *ex, FILE *out) {
    if (!ex || !out)
        return;
    fprintf(out, "cuda: %s (%s, %d SMs), arch %s, streamed reads %s in L2\n", ex->dev.name,
            ex->arch, ex->dev.sm_count, ex->arch,
            ex->dev.stream_evict_first ? "evict-first" : "evict-normal");
    for (uint32_t gi = 0; gi < ex->plan->n_groups; gi++) {
        const kf_group *grp = &ex->plan->groups[gi];
        fprintf(out, "  group %u %-11s %-40s %s\n", gi, kf_group_kind_name(grp->kind), grp->name,
                ex->where[gi]);
    }
    fprintf(out, "  device memory: %zu bytes in one arena (%zu without reuse by liveness); "
                 "%zu launches per run; kernels compiled %u, from the cache %u\n",
            ex->arena_bytes, ex->unshared_bytes, (size_t)ex->n_steps, ex->compiled, ex->hits);
}
