/*
 * api.c -- the public C API: contexts, graphs, tensor accessors and every
 * builder call (status strings live in ir/graph.c, below the planner and
 * the runtime, which print them too). Each builder call is a thin wrapper that
 * packs its arguments into kf_node_args and hands them to kf_ir_build, where
 * the shape and dtype rules live once (the parser uses the same path).
 */
#include <string.h>

#include "ir/ir.h"
#include "runtime/ctx.h"
#include "runtime/nvrtc.h"

const char *kf_version(void) {
#define KF_STR2(x) #x
#define KF_STR(x) KF_STR2(x)
    return KF_STR(KF_VERSION_MAJOR) "." KF_STR(KF_VERSION_MINOR) "." KF_STR(KF_VERSION_PATCH);
}

/* ------------------------------------------------------------------------ */
/* Context                                                                    */
/* ------------------------------------------------------------------------ */

void kf_options_init(kf_options *options) {
    if (!options)
        return;
    memset(options, 0, sizeof *options);
    options->target = KF_TARGET_AUTO;
    options->cpu_opt_level = 3;
    options->choice_margin = 0.0;
    options->choice_load_bias = 0.025;
}

static char *ctx_strdup(const kf_mem *m, const char *s) {
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *p = kf_mem_alloc(m, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

kf_status kf_ctx_create(const kf_options *options, kf_ctx **out) {
    if (!out)
        return KF_ERR_INVALID_ARGUMENT;
    *out = NULL;
    kf_options defaults;
    kf_options_init(&defaults);
    const kf_options *o = options ? options : &defaults;
    const kf_allocator *al = &o->allocator;
    int hooks = (al->alloc != NULL) + (al->realloc != NULL) + (al->free != NULL);
    if (hooks != 0 && hooks != 3)
        return KF_ERR_INVALID_ARGUMENT; /* a half-set allocator */
    if ((unsigned)o->target >= KF_TARGET_COUNT || (o->flags & ~(unsigned)KF_FLAG_ALL_) ||
        o->device < 0 || (unsigned)o->gemm >= KF_GEMM_COUNT ||
        (unsigned)o->attention >= KF_ATTENTION_COUNT || o->num_threads < 0 ||
        o->cpu_opt_level < 0 || o->cpu_opt_level > 3 || o->tiered_compile < 0 ||
        o->tiered_compile > 1 || !(o->choice_margin >= 0.0 && o->choice_margin < 1.0) ||
        !(o->choice_load_bias >= 0.0 && o->choice_load_bias < 1.0))
        return KF_ERR_INVALID_ARGUMENT;
    /* An arch override is checked now, not truncated or guessed at compile time. */
    char arch_err[KF_MSG_MAX];
    if (o->arch && kf_nvrtc_arch_check(o->arch, arch_err) != KF_OK)
        return KF_ERR_INVALID_ARGUMENT;
    kf_mem mem;
    kf_mem_resolve(&mem, al);
    kf_ctx *ctx = kf_mem_alloc(&mem, sizeof *ctx);
    if (!ctx)
        return KF_ERR_OUT_OF_MEMORY;
    memset(ctx, 0, sizeof *ctx);
    ctx->mem = mem;
    kf_ctx_runtime_init(ctx);
    ctx->target = o->target;
    ctx->device = o->device;
    ctx->flags = o->flags;
    ctx->gemm = o->gemm;
    ctx->attention = o->attention;
    ctx->arch = ctx_strdup(&mem, o->arch);
    ctx->cache_dir = ctx_strdup(&mem, o->cache_dir);
    ctx->dump_dir = ctx_strdup(&mem, o->dump_dir);
    ctx->cublaslt_lib = ctx_strdup(&mem, o->cublaslt_lib);
    ctx->num_threads = o->num_threads;
    ctx->cpu_opt_level = o->cpu_opt_level;
    ctx->tiered_compile = o->tiered_compile != 0;
    ctx->choice_margin = o->choice_margin;
    ctx->choice_load_bias = o->choice_load_bias;
    if ((o->arch && !ctx->arch) || (o->cache_dir && !ctx->cache_dir) ||
        (o->dump_dir && !ctx->dump_dir) || (o->cublaslt_lib && !ctx->cublaslt_lib)) {
        kf_ctx_destroy(ctx);
        return KF_ERR_OUT_OF_MEMORY;
    }
    *out = ctx;
    return KF_OK;
}

void kf_ctx_destroy(kf_ctx *ctx) {
    if (!ctx)
        return;
    kf_mem mem = ctx->mem;
    kf_ctx_runtime_release(ctx);
    char *strs[] = {ctx->arch, ctx->cache_dir, ctx->dump_dir, ctx->cublaslt_lib};
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++)
        if (strs[i])
            kf_mem_free(&mem, strs[i], strlen(strs[i]) + 1);
    kf_mem_free(&mem, ctx, sizeof *ctx);
}

/* ------------------------------------------------------------------------ */
/* Graphs                                                                     */
/* ------------------------------------------------------------------------ */

kf_status kf_graph_create(kf_ctx *ctx, kf_graph **out) {
    if (!out)
        return KF_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!ctx)
        return KF_ERR_INVALID_ARGUMENT;
    kf_graph *g = kf_ir_graph_create(&ctx->mem, ctx);
    if (!g)
        return KF_ERR_OUT_OF_MEMORY;
    *out = g;
    return KF_OK;
}

void kf_graph_destroy(kf_graph *graph) { kf_ir_graph_destroy(graph); }

kf_status kf_graph_status(const kf_graph *graph) {
    return graph ? graph->status : KF_ERR_INVALID_ARGUMENT;
}

const char *kf_graph_error(const kf_graph *graph) {
    if (!graph)
        return "graph is NULL";
    return kf_ir_error(graph);
}

kf_status kf_graph_verify(kf_graph *graph) {
    if (!graph)
        return KF_ERR_INVALID_ARGUMENT;
    return kf_ir_verify(graph);
}

size_t kf_graph_input_count(const kf_graph *graph) { return graph ? graph->n_inputs : 0; }

kf_tensor *kf_graph_input(const kf_graph *graph, size_t i) {
    return graph && i < graph->n_inputs ? graph->inputs[i] : NULL;
}

size_t kf_graph_output_count(const kf_graph *graph) { return graph ? graph->n_outputs : 0; }

kf_tensor *kf_graph_output(const kf_graph *graph, size_t i) {
    return graph && i < graph->n_outputs ? graph->outputs[i].tensor : NULL;
}

const char *kf_graph_output_name(const kf_graph *graph, size_t i) {
    return graph && i < graph->n_outputs ? graph->outputs[i].name : NULL;
}

kf_status kf_output(kf_graph *g, const char *name, kf_tensor *t) {
    if (!g)
        return KF_ERR_INVALID_ARGUMENT;
    return kf_ir_add_output(g, name, t);
}

/* ------------------------------------------------------------------------ */
/* Tensors                                                                    */
/* ------------------------------------------------------------------------ */

kf_dtype kf_tensor_dtype(const kf_tensor *t) { return t ? t->dtype : KF_DTYPE_COUNT; }
int kf_tensor_rank(const kf_tensor *t) { return t ? t->rank : -1; }

int64_t kf_tensor_dim(const kf_tensor *t, int axis) {
    if (!t || axis < -t->rank || axis >= t->rank)
        return -1;
    return t->dims[axis < 0 ? axis + t->rank : axis];
}

int64_t kf_tensor_numel(const kf_tensor *t) { return t ? kf_ir_numel(t) : -1; }
const char *kf_tensor_name(const kf_tensor *t) { return t ? t->name : NULL; }

kf_status kf_tensor_set_name(kf_tensor *t, const char *name) {
    if (!t)
        return KF_ERR_INVALID_ARGUMENT;
    if (t->graph->status != KF_OK)
        return t->graph->status;
    return kf_ir_set_name(t->graph, t, name, name ? strlen(name) : 0);
}

/* ------------------------------------------------------------------------ */
/* Builders                                                                   */
/* ------------------------------------------------------------------------ */

/* Copies a caller's shape into args; records an error for a bad rank or NULL dims. */
static bool take_shape(kf_graph *g, const char *op, kf_node_args *a, int rank,
                       const int64_t *dims) {
    if (rank < 0 || rank > KF_MAX_RANK) {
        kf_ir_fail(g, KF_ERR_SHAPE, "%s: rank %d is out of range; kfuse takes 0 to %d dims", op,
                   rank, KF_MAX_RANK);
        return false;
    }
    if (rank > 0 && !dims) {
        kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT, "%s: dims is NULL for rank %d", op, rank);
        return false;
    }
    a->rank = rank;
    for (int i = 0; i < rank; i++)
        a->dims[i] = dims[i];
    return true;
}

kf_tensor *kf_input(kf_graph *g, const char *name, kf_dtype dtype, int rank, const int64_t *dims) {
    if (!g || g->status != KF_OK)
        return NULL;
    kf_node_args a = {.dtype = dtype, .name = name};
    if (!take_shape(g, "input", &a, rank, dims))
        return NULL;
    return kf_ir_build(g, KF_OP_INPUT, &a);
}

kf_tensor *kf_constant(kf_graph *g, kf_dtype dtype, int rank, const int64_t *dims,
                       const void *data) {
    if (!g || g->status != KF_OK)
        return NULL;
    if (!data) {
        kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT, "const: data is NULL");
        return NULL;
    }
    kf_node_args a = {.dtype = dtype, .data = data};
    if (!take_shape(g, "const", &a, rank, dims))
        return NULL;
    return kf_ir_build(g, KF_OP_CONST, &a);
}

kf_tensor *kf_scalar(kf_graph *g, kf_dtype dtype, double value) {
    if (!g || g->status != KF_OK)
        return NULL;
    if ((unsigned)dtype >= KF_DTYPE_COUNT) {
        kf_ir_fail(g, KF_ERR_DTYPE, "const: dtype %d is not a kf_dtype", (int)dtype);
        return NULL;
    }
    unsigned char storage[8];
    kf_ir_store(storage, dtype, 0, value);
    kf_node_args a = {.dtype = dtype, .rank = 0, .data = storage};
    return kf_ir_build(g, KF_OP_CONST, &a);
}

kf_tensor *kf_iota(kf_graph *g, kf_dtype dtype, int rank, const int64_t *dims, int axis) {
    if (!g || g->status != KF_OK)
        return NULL;
    kf_node_args a = {.dtype = dtype, .axis = axis};
    if (!take_shape(g, "iota", &a, rank, dims))
        return NULL;
    return kf_ir_build(g, KF_OP_IOTA, &a);
}

/* A boolean parameter takes 0 or 1: any other value is a caller's mistake
 * (a count, a pointer, an uninitialized int), refused rather than read as true. */
static bool take_flag(kf_graph *g, const char *op, const char *param, int value) {
    if (!g || g->status != KF_OK)
        return false;
    if (value == 0 || value == 1)
        return true;
    kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT, "%s: %s is %d; it takes 0 (false) or 1 (true)", op,
               param, value);
    return false;
}

static kf_tensor *build1(kf_graph *g, kf_op op, kf_tensor *x) {
    kf_node_args a = {.src = {x}};
    return kf_ir_build(g, op, &a);
}

static kf_tensor *build2(kf_graph *g, kf_op op, kf_tensor *x, kf_tensor *y) {
    kf_node_args a = {.src = {x, y}};
    return kf_ir_build(g, op, &a);
}

#define KF_UNARY(fn, OP)                                                                           \
    kf_tensor *fn(kf_graph *g, kf_tensor *x) { return build1(g, KF_OP_##OP, x); }
#define KF_BINARY(fn, OP)                                                                          \
    kf_tensor *fn(kf_graph *g, kf_tensor *a, kf_tensor *b) { return build2(g, KF_OP_##OP, a, b); }

KF_UNARY(kf_neg, NEG)
KF_UNARY(kf_abs, ABS)
KF_UNARY(kf_exp, EXP)
KF_UNARY(kf_log, LOG)
KF_UNARY(kf_sqrt, SQRT)
KF_UNARY(kf_rsqrt, RSQRT)
KF_UNARY(kf_tanh, TANH)
KF_UNARY(kf_sigmoid, SIGMOID)
KF_UNARY(kf_relu, RELU)
KF_UNARY(kf_gelu, GELU)
KF_UNARY(kf_gelu_tanh, GELU_TANH)
KF_UNARY(kf_silu, SILU)
KF_UNARY(kf_erf, ERF)
KF_UNARY(kf_sin, SIN)
KF_UNARY(kf_cos, COS)
KF_BINARY(kf_add, ADD)
KF_BINARY(kf_sub, SUB)
KF_BINARY(kf_mul, MUL)
KF_BINARY(kf_div, DIV)
KF_BINARY(kf_max, MAX)
KF_BINARY(kf_min, MIN)
KF_BINARY(kf_pow, POW)
KF_BINARY(kf_eq, EQ)
KF_BINARY(kf_ne, NE)
KF_BINARY(kf_lt, LT)
KF_BINARY(kf_le, LE)
KF_BINARY(kf_gt, GT)
KF_BINARY(kf_ge, GE)

kf_tensor *kf_cast(kf_graph *g, kf_tensor *x, kf_dtype dtype) {
    kf_node_args a = {.src = {x}, .dtype = dtype};
    return kf_ir_build(g, KF_OP_CAST, &a);
}

kf_tensor *kf_where(kf_graph *g, kf_tensor *cond, kf_tensor *x, kf_tensor *y) {
    kf_node_args a = {.src = {cond, x, y}};
    return kf_ir_build(g, KF_OP_WHERE, &a);
}

static kf_tensor *reduce(kf_graph *g, kf_op op, kf_tensor *x, int axis, int keepdim) {
    if (!take_flag(g, kf_op_get(op)->name, "keepdim", keepdim))
        return NULL;
    kf_node_args a = {.src = {x}, .axis = axis, .keepdim = keepdim == 1};
    return kf_ir_build(g, op, &a);
}

kf_tensor *kf_reduce_sum(kf_graph *g, kf_tensor *x, int axis, int keepdim) {
    return reduce(g, KF_OP_REDUCE_SUM, x, axis, keepdim);
}
kf_tensor *kf_reduce_max(kf_graph *g, kf_tensor *x, int axis, int keepdim) {
    return reduce(g, KF_OP_REDUCE_MAX, x, axis, keepdim);
}
kf_tensor *kf_reduce_mean(kf_graph *g, kf_tensor *x, int axis, int keepdim) {
    return reduce(g, KF_OP_REDUCE_MEAN, x, axis, keepdim);
}
kf_tensor *kf_reduce_min(kf_graph *g, kf_tensor *x, int axis, int keepdim) {
    return reduce(g, KF_OP_REDUCE_MIN, x, axis, keepdim);
}
kf_tensor *kf_logsumexp(kf_graph *g, kf_tensor *x, int axis, int keepdim) {
    return reduce(g, KF_OP_LOGSUMEXP, x, axis, keepdim);
}
kf_tensor *kf_argmax(kf_graph *g, kf_tensor *x, int axis, int keepdim) {
    return reduce(g, KF_OP_ARGMAX, x, axis, keepdim);
}

kf_tensor *kf_clamp(kf_graph *g, kf_tensor *x, double lo, double hi) {
    kf_node_args a = {.src = {x}, .lo = lo, .hi = hi};
    return kf_ir_build(g, KF_OP_CLAMP, &a);
}

kf_tensor *kf_slice(kf_graph *g, kf_tensor *x, int axis, int64_t start, int64_t stop,
                    int64_t step) {
    kf_node_args a = {.src = {x}, .axis = axis, .start = start, .stop = stop, .step = step};
    return kf_ir_build(g, KF_OP_SLICE, &a);
}

kf_tensor *kf_repeat(kf_graph *g, kf_tensor *x, int axis, int64_t times) {
    kf_node_args a = {.src = {x}, .axis = axis, .times = times};
    return kf_ir_build(g, KF_OP_REPEAT, &a);
}

kf_tensor *kf_concat(kf_graph *g, int n, kf_tensor *const *xs, int axis) {
    if (!g || g->status != KF_OK)
        return NULL;
    if (n < 1 || !xs) {
        kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT, "concat: %s; give n >= 1 tensors",
                   xs ? "n is less than 1" : "xs is NULL");
        return NULL;
    }
    if (n == 1) {
        if (!xs[0] || xs[0]->graph != g)
            kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT, "concat: operand a is %s",
                       xs[0] ? "of another graph" : "NULL");
        return g->status == KF_OK ? xs[0] : NULL;
    }
    kf_tensor *acc = xs[0];
    for (int i = 1; i < n && acc; i++) {
        kf_node_args a = {.src = {acc, xs[i]}, .axis = axis};
        acc = kf_ir_build(g, KF_OP_CONCAT, &a);
    }
    return acc;
}

kf_tensor *kf_gather(kf_graph *g, kf_tensor *table, kf_tensor *idx, int axis) {
    kf_node_args a = {.src = {table, idx}, .axis = axis};
    return kf_ir_build(g, KF_OP_GATHER, &a);
}

kf_tensor *kf_softmax(kf_graph *g, kf_tensor *x, int axis) {
    kf_node_args a = {.src = {x}, .axis = axis};
    return kf_ir_build(g, KF_OP_SOFTMAX, &a);
}

kf_tensor *kf_log_softmax(kf_graph *g, kf_tensor *x, int axis) {
    kf_node_args a = {.src = {x}, .axis = axis};
    return kf_ir_build(g, KF_OP_LOG_SOFTMAX, &a);
}

kf_tensor *kf_layer_norm(kf_graph *g, kf_tensor *x, kf_tensor *weight, kf_tensor *bias, int axis,
                         double eps) {
    kf_node_args a = {.src = {x, weight, bias}, .axis = axis, .eps = eps};
    return kf_ir_build(g, KF_OP_LAYER_NORM, &a);
}

kf_tensor *kf_rms_norm(kf_graph *g, kf_tensor *x, kf_tensor *weight, int axis, double eps) {
    kf_node_args a = {.src = {x, weight}, .axis = axis, .eps = eps};
    return kf_ir_build(g, KF_OP_RMS_NORM, &a);
}

kf_tensor *kf_matmul(kf_graph *g, kf_tensor *a, kf_tensor *b, int transpose_a, int transpose_b) {
    if (!take_flag(g, "matmul", "transpose_a", transpose_a) ||
        !take_flag(g, "matmul", "transpose_b", transpose_b))
        return NULL;
    kf_node_args args = {
        .src = {a, b}, .transpose_a = transpose_a == 1, .transpose_b = transpose_b == 1};
    return kf_ir_build(g, KF_OP_MATMUL, &args);
}

kf_tensor *kf_reshape(kf_graph *g, kf_tensor *x, int rank, const int64_t *dims) {
    if (!g || g->status != KF_OK)
        return NULL;
    kf_node_args a = {.src = {x}};
    if (!take_shape(g, "reshape", &a, rank, dims))
        return NULL;
    return kf_ir_build(g, KF_OP_RESHAPE, &a);
}

kf_tensor *kf_expand(kf_graph *g, kf_tensor *x, int rank, const int64_t *dims) {
    if (!g || g->status != KF_OK)
        return NULL;
    kf_node_args a = {.src = {x}};
    if (!take_shape(g, "expand", &a, rank, dims))
        return NULL;
    return kf_ir_build(g, KF_OP_EXPAND, &a);
}

kf_tensor *kf_permute(kf_graph *g, kf_tensor *x, const int *perm) {
    if (!g || g->status != KF_OK)
        return NULL;
    if (!x)
        return kf_ir_build(g, KF_OP_PERMUTE, &(kf_node_args){.src = {NULL}});
    if (x->rank > 0 && !perm) {
        kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT, "permute: perm is NULL");
        return NULL;
    }
    kf_node_args a = {.src = {x}};
    for (int i = 0; i < x->rank; i++)
        a.perm[i] = perm[i];
    return kf_ir_build(g, KF_OP_PERMUTE, &a);
}

kf_tensor *kf_transpose(kf_graph *g, kf_tensor *x, int axis0, int axis1) {
    if (!g || g->status != KF_OK)
        return NULL;
    if (!x)
        return kf_ir_build(g, KF_OP_PERMUTE, &(kf_node_args){.src = {NULL}});
    int r = x->rank;
    int a0 = axis0 < 0 ? axis0 + r : axis0, a1 = axis1 < 0 ? axis1 + r : axis1;
    if (a0 < 0 || a0 >= r || a1 < 0 || a1 >= r) {
        char tb[160];
        kf_ir_fail(g, KF_ERR_AXIS,
                   "transpose: axes %d and %d are not both in range for operand x %s", axis0, axis1,
                   kf_ir_type_str(x, tb, sizeof tb));
        return NULL;
    }
    int perm[KF_MAX_RANK];
    for (int i = 0; i < r; i++)
        perm[i] = i;
    perm[a0] = a1;
    perm[a1] = a0;
    return kf_permute(g, x, perm);
}
