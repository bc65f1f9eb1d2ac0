/*
 * ir.h -- kfuse's intermediate representation: the graph, its tensors (values),
 * the op table, shape and dtype inference, the verifier, the printer and the
 * reference evaluator. ir/ includes nothing else of kfuse; every later stage
 * (fusion, codegen, runtime, frontend) reads the graph through this header.
 *
 * A graph is an arena of tensors in creation order. Because a builder call can
 * only name tensors that already exist, creation order is a topological order:
 * every pass walks graph->nodes front to back and never needs a sort.
 */
#ifndef KF_IR_H
#define KF_IR_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kfuse.h"

/* ------------------------------------------------------------------------ */
/* Internal invariants                                                        */
/* ------------------------------------------------------------------------ */

#ifndef NDEBUG
#include <assert.h>
#define KF_ASSERT(x) assert(x)
#else
#define KF_ASSERT(x) ((void)0)
#endif

/* Marks a defensive branch that should never run (coverage shows it). */
#define KF_NEVER(x) (x)

#define KF_MSG_MAX 512

/* ------------------------------------------------------------------------ */
/* The op table                                                               */
/* ------------------------------------------------------------------------ */

/* How an op's operands and attributes are written; fixes the operand count. */
typedef enum kf_form {
    KF_FORM_INPUT,      /* input(TYPE) */
    KF_FORM_CONST,      /* const(TYPE, VALUE | [VALUES]) */
    KF_FORM_IOTA,       /* iota(TYPE, axis=A) */
    KF_FORM_UNARY,      /* op(x) */
    KF_FORM_CAST,       /* cast(x, DTYPE) */
    KF_FORM_BINARY,     /* op(a, b) */
    KF_FORM_WHERE,      /* where(cond, a, b) */
    KF_FORM_REDUCE,     /* op(x, axis=A[, keepdim=true]) */
    KF_FORM_SOFTMAX,    /* softmax(x, axis=A) */
    KF_FORM_LAYER_NORM, /* layer_norm(x, weight, bias, axis=A, eps=E) */
    KF_FORM_RMS_NORM,   /* rms_norm(x, weight, axis=A, eps=E) */
    KF_FORM_MATMUL,     /* matmul(a, b[, transpose_a=true][, transpose_b=true]) */
    KF_FORM_RESHAPE,    /* reshape(x, [DIMS]) */
    KF_FORM_PERMUTE,    /* permute(x, [PERM]) */
    KF_FORM_CLAMP,      /* clamp(x[, min=V][, max=V]) */
    KF_FORM_EXPAND,     /* expand(x, [DIMS]) */
    KF_FORM_SLICE,      /* slice(x, axis=A[, start=S][, stop=E][, step=K]) */
    KF_FORM_CONCAT,     /* concat(a, b, axis=A): binary; concat(a, b, c, ...) nests */
    KF_FORM_GATHER,     /* gather(table, idx, axis=A) */
    KF_FORM_REPEAT,     /* repeat(x, axis=A, times=N) */
    KF_FORM_COUNT
} kf_form;

/* Op traits: what passes may ask. */
enum {
    KF_TRAIT_SOURCE = 1u << 0,          /* no tensor operands */
    KF_TRAIT_ELEMENTWISE = 1u << 1,     /* out[i] depends on operands at i (broadcast) only */
    KF_TRAIT_UNARY = 1u << 2,           /* one tensor operand */
    KF_TRAIT_BINARY = 1u << 3,          /* two tensor operands, broadcast */
    KF_TRAIT_COMPARE = 1u << 4,         /* result is bool */
    KF_TRAIT_SELECT = 1u << 5,          /* where */
    KF_TRAIT_REDUCTION = 1u << 6,       /* reduces one axis */
    KF_TRAIT_ROWWISE = 1u << 7,         /* needs a whole row along its axis */
    KF_TRAIT_SOFTMAX = 1u << 8,         /* softmax (attention-relevant) */
    KF_TRAIT_NORM = 1u << 9,            /* layer/rms normalization */
    KF_TRAIT_GEMM = 1u << 10,           /* a GEMM anchor (also attention-relevant) */
    KF_TRAIT_LAYOUT = 1u << 11,         /* reshape/permute: moves data, no math */
    KF_TRAIT_ACTIVATION = 1u << 12,     /* an activation function */
    KF_TRAIT_TRANSCENDENTAL = 1u << 13, /* costs more than a multiply-add */
    KF_TRAIT_COMMUTATIVE = 1u << 14,
    KF_TRAIT_LOGSPACE = 1u << 15, /* the log of its op's result (log_softmax: the softmax
                                     statistics, but never an attention kernel's P) */
    KF_TRAIT_INDEX = 1u << 16,    /* the result is an i32 index along the axis (argmax) */
    KF_TRAIT_REMAP = 1u << 17     /* slice/concat/gather/repeat: each result element is one operand
                                     element at remapped coordinates, no math */
};

/* Dtype masks for the op table. */
#define KF_DTMASK(d) (1u << (d))
#define KF_DTMASK_FLOAT                                                                        \
    (KF_DTMASK(KF_DTYPE_F32) | KF_DTMASK(KF_DTYPE_F16) | KF_DTMASK(KF_DTYPE_BF16) |           \
     KF_DTMASK(KF_DTYPE_F64))
#define KF_DTMASK_NUM (KF_DTMASK_FLOAT | KF_DTMASK(KF_DTYPE_I32))
#define KF_DTMASK_ANY (KF_DTMASK_NUM | KF_DTMASK(KF_DTYPE_BOOL))

typedef enum kf_op {
#define KF_OP(NAME, TEXT, FORM, TRAITS, DTYPES) KF_OP_##NAME,
#include "ops.def"
#undef KF_OP
    KF_OP_COUNT
} kf_op;

typedef struct kf_op_info {
    const char *name; /* the .kfg text */
    kf_form form;
    unsigned traits;
    unsigned dtypes; /* KF_DTMASK_* */
} kf_op_info;

extern const kf_op_info kf_op_table[KF_OP_COUNT];

static inline const kf_op_info *kf_op_get(kf_op op) { return &kf_op_table[op]; }
static inline bool kf_op_has(kf_op op, unsigned trait) { return (kf_op_table[op].traits & trait) != 0; }
/* The number of tensor operands an op's form takes. */
int kf_form_arity(kf_form form);
/* The op whose .kfg text is `name` (`len` bytes), or KF_OP_COUNT. */
kf_op kf_op_from_name(const char *name, size_t len);
/* The dtype whose name is `name` (`len` bytes), or KF_DTYPE_COUNT. */
kf_dtype kf_dtype_from_name(const char *name, size_t len);
/* gather's index dtypes. */
static inline bool kf_dtype_is_index(kf_dtype d) { return d == KF_DTYPE_I32 || d == KF_DTYPE_I64; }
static inline bool kf_dtype_is_float(kf_dtype d) {
    return d == KF_DTYPE_F32 || d == KF_DTYPE_F16 || d == KF_DTYPE_BF16 || d == KF_DTYPE_F64;
}

/* ------------------------------------------------------------------------ */
/* Memory: the context's allocator hooks, and an arena                        */
/* ------------------------------------------------------------------------ */

/* A resolved allocator: never has NULL hooks (kf_mem_resolve fills libc's). */
typedef kf_allocator kf_mem;

/* Fills any NULL hooks of `a` with libc's (all three must be NULL or set). */
void kf_mem_resolve(kf_mem *out, const kf_allocator *a);
void *kf_mem_alloc(const kf_mem *m, size_t size);
void *kf_mem_calloc(const kf_mem *m, size_t count, size_t size); /* zeroed; checks overflow */
void *kf_mem_realloc(const kf_mem *m, void *ptr, size_t old_size, size_t new_size);
void kf_mem_free(const kf_mem *m, void *ptr, size_t size);
/* Grows *items (each `elem` bytes, *cap of them) to hold at least `need`. */
bool kf_mem_grow(const kf_mem *m, void **items, uint32_t *cap, uint32_t need, size_t elem);

typedef struct kf_arena_block kf_arena_block;
typedef struct kf_arena {
    const kf_mem *mem;
    kf_arena_block *head;
} kf_arena;

void kf_arena_init(kf_arena *a, const kf_mem *mem);
/* 16-byte aligned, zeroed memory that lives until kf_arena_release; NULL on OOM. */
void *kf_arena_alloc(kf_arena *a, size_t size);
char *kf_arena_strndup(kf_arena *a, const char *s, size_t len);
void kf_arena_release(kf_arena *a);

/* ------------------------------------------------------------------------ */
/* Graph and tensors                                                          */
/* ------------------------------------------------------------------------ */

typedef struct kf_attrs {
    int axis;        /* iota, reductions, softmax, norms: normalized, >= 0 */
    bool keepdim;    /* reductions */
    bool transpose_a, transpose_b; /* matmul */
    double eps;      /* norms */
    kf_dtype to;     /* cast: the target dtype (== the tensor's dtype) */
    int perm[KF_MAX_RANK]; /* permute */
    double lo, hi;         /* clamp: min and max as given (-inf / inf: that side unbounded) */
    int64_t start, step;   /* slice: normalized, 0 <= start < dim, step >= 1 (the result's
                              length along axis is the dim; stop is implied) */
    int64_t times;         /* repeat: each element of x along axis, times >= 1 */
} kf_attrs;

struct kf_tensor {
    kf_graph *graph;
    uint32_t id; /* index in graph->nodes: creation order, a topological order */
    kf_op op;
    kf_dtype dtype;
    int rank;
    int64_t dims[KF_MAX_RANK];
    int nsrc;
    kf_tensor *src[3];
    kf_attrs attr;
    const char *name; /* arena-owned; inputs always have one */
    void *data;       /* constants: numel elements in storage format, arena-owned */
    uint32_t n_uses;  /* operand slots of later tensors that name this one */
};

typedef struct kf_graph_output_slot {
    const char *name; /* arena-owned */
    kf_tensor *tensor;
} kf_graph_output_slot;

struct kf_graph {
    kf_ctx *ctx; /* may be NULL for graphs built by ir tests */
    kf_mem mem;
    kf_arena arena;
    kf_tensor **nodes;
    uint32_t n_nodes, cap_nodes;
    kf_tensor **inputs;
    uint32_t n_inputs, cap_inputs;
    kf_graph_output_slot *outputs;
    uint32_t n_outputs, cap_outputs;
    /* kf_ir_add_output's hash set of output indices by name (open
     * addressing, UINT32_MAX empty): outputs [0, n_out_set) are in it */
    uint32_t *out_set;
    uint32_t cap_out_set, n_out_set;
    /* kf_ir_find_name's hash set of named tensors' ids, filled lazily: the
     * names of nodes [0, n_name_set) as they were when indexed, plus every
     * later kf_ir_set_name (a lookup compares the current name, so a renamed
     * tensor's old slot never matches) */
    uint32_t *name_set;
    uint32_t cap_name_set, n_name_set, n_named;
    kf_status status;       /* the first builder error: sticky */
    char error[KF_MSG_MAX]; /* its message */
    char last[KF_MSG_MAX];  /* the last non-sticky failure's message (verify, eval) */
};

/* Creates an empty graph using `mem` (copied). NULL on OOM. */
kf_graph *kf_ir_graph_create(const kf_allocator *alloc, kf_ctx *ctx);
void kf_ir_graph_destroy(kf_graph *g);
/* A deep copy of `g` (tensors, names, constant data, inputs, outputs, the
 * sticky status) in a graph of its own, with the same allocator, context and
 * node ids; NULL on OOM. A compiled program plans and keeps such a copy, so it
 * outlives the caller's graph. */
kf_graph *kf_ir_graph_clone(const kf_graph *g);

/* Records the first (sticky) builder error; returns `status`. */
kf_status kf_ir_fail(kf_graph *g, kf_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Formats a message into `err` (KF_MSG_MAX bytes; nothing when NULL) and
 * returns `status`: the one helper for every module that reports into a
 * caller's buffer. */
kf_status kf_msg_set(char *err, kf_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The graph's message: its sticky builder error, or while it has none the
 * last non-sticky note ("" if none). What kf_graph_error returns. */
const char *kf_ir_error(const kf_graph *g);
/* Records a non-sticky failure message (verify, eval); returns `status`. */
kf_status kf_ir_note(kf_graph *g, kf_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "f32[8, 64]" into buf (always terminated); returns buf. */
char *kf_ir_type_str(const kf_tensor *t, char *buf, size_t size);
int64_t kf_ir_numel(const kf_tensor *t);
/* The shortest gather axis that t indexes (min over the gathers that read t as
 * idx), or 0 when no gather reads it: random inputs for t are drawn in
 * [0, bound), so that the CPU target's range check passes. */
int64_t kf_ir_index_bound(const kf_graph *g, const kf_tensor *t);
/* Row-major element strides of `t`, and of `t` broadcast into a shape of rank
 * `rank` (right-aligned; stride 0 along broadcast dims). */
void kf_ir_strides(const kf_tensor *t, int64_t *strides);
void kf_ir_broadcast_strides(const kf_tensor *t, int rank, int64_t *strides);
/* True when `name` is an identifier ([A-Za-z_][A-Za-z0-9_]*), at most 64 chars. */
bool kf_ir_is_identifier(const char *name, size_t len);
/* The tensor named `name`, or NULL: a hash lookup (the nodes added since the
 * last call are indexed first), so building or parsing N named tensors costs
 * O(N). A name must be given through kf_ir_build or kf_ir_set_name, or be
 * assigned before the next lookup (the parser's). */
kf_tensor *kf_ir_find_name(kf_graph *g, const char *name, size_t len);

/* Everything a builder call says; ir_build reads the fields its op's form uses. */
typedef struct kf_node_args {
    kf_tensor *src[3];
    kf_dtype dtype;                /* input/const/iota: the dtype; cast: the target */
    int rank;                      /* input/const/iota/reshape */
    int64_t dims[KF_MAX_RANK];     /* input/const/iota/reshape (reshape: one -1 allowed) */
    int axis;                      /* may be negative */
    bool keepdim;
    bool transpose_a, transpose_b;
    double eps;
    int perm[KF_MAX_RANK];
    double lo, hi;    /* clamp */
    int64_t start, stop, step; /* slice, as given (Python's rules; stop INT64_MAX: the end) */
    int64_t times;    /* repeat */
    const char *name; /* input */
    const void *data; /* const: numel elements in storage format; NULL for zeros */
} kf_node_args;

/* The result of inference, before a tensor exists. */
typedef struct kf_inferred {
    kf_dtype dtype;
    int rank;
    int64_t dims[KF_MAX_RANK];
    kf_attrs attr;
} kf_inferred;

/* The shape and dtype rules: infers `op` applied to `args` (whose operands
 * must be non-NULL) into *out, or returns an error status with a message in
 * `err` (KF_MSG_MAX bytes) naming the op, the operand and the shapes. Records
 * nothing; kf_ir_build and kf_ir_verify both call it. */
kf_status kf_ir_infer(kf_op op, const kf_node_args *args, kf_inferred *out, char *err);

/* Infers shape and dtype for `op` from `args`, checks them, and appends the
 * tensor. A NULL operand or a graph that already failed returns NULL silently;
 * a bad call records a sticky error naming the op, the operand and the shapes. */
kf_tensor *kf_ir_build(kf_graph *g, kf_op op, const kf_node_args *args);
/* Adds a named output (sticky error on a bad name or duplicate). */
kf_status kf_ir_add_output(kf_graph *g, const char *name, kf_tensor *t);
/* Names a tensor (checks identifier and uniqueness; sticky error otherwise). */
kf_status kf_ir_set_name(kf_graph *g, kf_tensor *t, const char *name, size_t len);

/* ------------------------------------------------------------------------ */
/* Verifier, printer, evaluator                                               */
/* ------------------------------------------------------------------------ */

/* Re-derives every tensor's shape and dtype and checks every invariant. */
kf_status kf_ir_verify(kf_graph *g);

/* Common-subexpression elimination (cse.c), in place and in linear time: a
 * tensor equal to an earlier one (same op, dtype, shape, operands after
 * folding, attributes, constant bytes; never an input) is folded into it --
 * every operand slot and graph output that named it names the earlier one,
 * and it is left with no uses. *folded (may be NULL) receives the count.
 * Errors: KF_ERR_OUT_OF_MEMORY (nothing changed). */
kf_status kf_ir_cse(kf_graph *g, uint32_t *folded);

/* Ops written out in primitives, recognized (idiom.c): the root tensor of each
 * match is rewritten in place as the op (id, name, shape and dtype kept), the
 * primitives left unneeded. *counts (may be NULL) receives what was found.
 * Errors: KF_ERR_OUT_OF_MEMORY (nothing changed). */
typedef struct kf_ir_idiom_counts {
    uint32_t rms_norm;  /* w * cast(x * rsqrt(mean(x^2) + eps)) */
    uint32_t gelu_tanh; /* x/2 * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
} kf_ir_idiom_counts;
kf_status kf_ir_idioms(kf_graph *g, kf_ir_idiom_counts *counts);

/* Canonical .kfg text. Tensors without a name print as %ID. */
kf_status kf_ir_print(const kf_graph *g, FILE *out);
/* Writes s as a JSON string literal: quotes, backslashes and control
 * characters escaped (the reports' JSON writers share it). */
void kf_ir_json_string(FILE *out, const char *s);
/* Writes the shortest decimal that reads back as `v` (for dtype d's precision). */
int kf_ir_format_number(char *buf, size_t size, double v, kf_dtype d);

/* Storage conversions: element i of a buffer in dtype d, as a double, and back
 * (with round to nearest even, i32 saturation, bool as != 0). */
double kf_ir_load(const void *data, kf_dtype d, int64_t i);
void kf_ir_store(void *data, kf_dtype d, int64_t i, double v);
/* Rounds v to what dtype d can hold (as kf_ir_store then kf_ir_load would). */
double kf_ir_round(kf_dtype d, double v);

/* The scalar meaning of an elementwise op with tensor operands (unary, cast,
 * binary, comparison, where) on operand values a, b, c, in double, before the
 * result is rounded to `dtype` (a cast rounds to it). The one definition the
 * reference evaluator and the plan checker's expression evaluator share. */
double kf_ir_scalar(kf_op op, kf_dtype dtype, double a, double b, double c);

/* clamp's meaning, shared by the evaluator and the planner's lowering: each
 * bound is first rounded to x's dtype (as a constant of that dtype would be),
 * then the result is min(max(x, lo), hi) with kf_ir_scalar's NaN-propagating
 * max and min, where a bound of -inf (lo) or inf (hi) is left out. The
 * lowering emits exactly these max and min nodes, so no backend has a clamp. */
static inline bool kf_ir_clamp_has_lo(double lo) { return lo != -INFINITY; }
static inline bool kf_ir_clamp_has_hi(double hi) { return hi != INFINITY; }

/* The exponent e such that scaling a norm's row (n elements `inner` apart)
 * by 2^-e brings its largest magnitude below 1 when it exceeds 2^500 (so its
 * squares and sums cannot overflow), else 0 (always for f32/f16/bf16 rows).
 * layer_norm and rms_norm are defined on the scaled row; the reference
 * evaluator and the plan checker's statistics share this one definition. */
int kf_ir_row_scale_exp(const double *row, int64_t n, int64_t inner);

/* A norm row's statistics as the reference defines them: e of
 * kf_ir_row_scale_exp, the mean of the row scaled by 2^-e (0 unless
 * `centred`: layer_norm), and the denominator sqrt(var + eps 4^-e) in the
 * scaled units (var of the centred or plain squares). The row normalizes to
 * (x 2^-e - mean) / denom, or to 0 where e != 0 and denom == 0 (a constant
 * row whose eps underflowed). The reference evaluator and the plan checker's
 * statistics share it. */
typedef struct kf_ir_norm_row {
    int e;
    double mean, denom;
} kf_ir_norm_row;
kf_ir_norm_row kf_ir_norm_stats(const double *row, int64_t n, int64_t inner, double eps,
                                bool centred);

/* Values of every tensor, in double, each already rounded to its dtype --
 * unless `exact`: then float values are never rounded (casts to a float dtype
 * included), so the values are the graph's meaning in f64 with no
 * intermediate rounding, the yardstick kf_ir_judge measures errors against.
 * i32 and bool values are rounded either way (truncation and saturation are
 * what those ops mean). */
typedef struct kf_eval_state {
    kf_graph *graph;
    double **values; /* graph->n_nodes entries; NULL for tensors not computed */
    bool exact;
    /* kf_ir_eval_fused (and _scores), or a caller's own realization: per
     * node, whether its float value is kept unrounded (NULL: none is). */
    const bool *unrounded;
} kf_eval_state;

/* Evaluates every tensor the outputs need, given host buffers for every input
 * (`input_data[i]` for graph->inputs[i], storage format). On success the caller
 * reads st->values and calls kf_ir_eval_release. */
kf_status kf_ir_eval(kf_graph *g, const void *const *input_data, kf_eval_state *st);
/* The same with st->exact set: every float value kept in double, unrounded. */
kf_status kf_ir_eval_exact(kf_graph *g, const void *const *input_data, kf_eval_state *st);
/* The reference with a GEMM's arithmetic: the same as kf_ir_eval, except that
 * the product of a matmul whose every consumer is elementwise, and which is no
 * graph output, is kept unrounded -- the epilogue (bias, activation, residual)
 * applies to the f32 accumulator and only its result is rounded, as
 * cuBLASLt's epilogues and kfuse's generated GEMM and attention kernels
 * compute it. Another evaluation at the graph's dtypes, as legitimate as the
 * per-op one, which kf_ir_judge also measures. */
kf_status kf_ir_eval_fused(kf_graph *g, const void *const *input_data, kf_eval_state *st);
/* The same as kf_ir_eval_fused, except that a matmul product whose chain of
 * elementwise consumers ends in a softmax is rounded: the unfused attention's
 * arithmetic, whose GEMM stores Q.K^T in its dtype and whose softmax kernel
 * applies the score expression (scale, mask). When the graph has no such
 * product, nothing is evaluated: st->values is NULL and KF_OK returned. */
kf_status kf_ir_eval_fused_scores(kf_graph *g, const void *const *input_data, kf_eval_state *st);
/* Computes one tensor from its operands' values (which must be present in `st`).
 * Used by kf_ir_eval and by the planner's checker. */
kf_status kf_ir_eval_node(kf_eval_state *st, const kf_tensor *t);
void kf_ir_eval_release(kf_eval_state *st);

/* The one per-dtype tolerance table: how far a result computed with other
 * roundings may stray from the reference's, as a relative error
 * ||out - ref|| / ||ref||: f64 1e-12, f32 1e-5, f16 2e-3, bf16 1.6e-2, exact
 * (0) for i32 and bool. The plan checker allows twice it (fusion/check.c);
 * the tests' kf_test_assert_close and diagnostics read it. Backends' outputs
 * are judged by kf_ir_judge instead, relative to the reference's own error. */
double kf_ir_tolerance(kf_dtype d);
/* The tolerance of output `out`: that of the least precise float dtype stored
 * on the way to it (an f32 output computed through bf16 intermediates carries
 * their rounding: another accumulation order flips some bf16 roundings), never
 * tighter than its own. */
double kf_ir_output_tolerance(const kf_graph *g, const kf_tensor *out);
/* The least precise float dtype computed on the way to `out` (inputs and
 * constants aside), `out`'s own when none is less precise: the dtype whose
 * tolerance kf_ir_output_tolerance gives. */
kf_dtype kf_ir_path_dtype(const kf_graph *g, const kf_tensor *out);
/* ||out - ref|| / ||ref|| over n elements of dtype d in storage format (the
 * absolute norm when ref is all zeros); INFINITY when either holds a NaN, or
 * an infinity the other does not match: a NaN never passes. */
double kf_ir_rel_err(const void *out, const void *ref, kf_dtype d, int64_t n);

/* ------------------------------------------------------------------------ */
/* Judging a backend's numerics (judge.c)                                      */
/* ------------------------------------------------------------------------ */

/* How far a float output may stray from the exact value, as a multiple of how
 * far the reference evaluator itself strays (the rule FlashAttention's tests
 * use, with 2 as the multiple there too): a fused kernel that keeps f32 between
 * ops is at least as close to the exact value as the reference, which rounds
 * every op's result to its dtype, so only a real error takes it past twice
 * the reference's own error. */
#define KF_JUDGE_REF_FACTOR 2.0

/* The verdict on one output. Errors are normwise, ||v - exact|| / ||exact||
 * over the elements where the exact value is a finite number (the absolute
 * norm when the exact output is all zeros), with `exact` the graph evaluated
 * in f64 with no intermediate rounding (kf_ir_eval_exact):
 *   err       the backend's output;
 *   ref_err   the reference evaluator at the graph's dtypes (kf_ir_eval);
 *   fused_err the reference with a GEMM's arithmetic (kf_ir_eval_fused):
 *             matmul products unrounded into their elementwise epilogues;
 *             or, where larger, with the attention scores' product rounded
 *             as the unfused attention stores it (kf_ir_eval_fused_scores);
 *   round_err the exact value rounded once to the output's dtype: what no
 *             backend that stores the output can beat;
 *   bound     KF_JUDGE_REF_FACTOR * max(ref_err, fused_err, round_err) +
 *             floor, the floor kf_ir_judge_floor of the output's compute
 *             dtype and size;
 *   pass      err <= bound.
 * NaN never passes: an output NaN is accepted only where the reference (at
 * the graph's dtypes or exactly) is NaN too, an infinity only where one of
 * them has the same infinity, and a number where both are NaN fails. i32 and
 * bool outputs must equal the reference exactly (bound 0, err the relative
 * distance to it). */
typedef struct kf_ir_verdict {
    double err, ref_err, fused_err, round_err, bound;
    bool pass;
} kf_ir_verdict;

/* The floor of the bound for an output of n elements whose least precise
 * computed dtype is d (kf_ir_path_dtype): 1e-12 when that is f64, else 1e-5
 * (f32 arithmetic, which a backend may use where the reference computes in
 * double -- a long f32 sum --, is not an error the reference's rounding to
 * f32 shows), plus d's unit roundoff / sqrt(n) (a normwise error is an
 * average: over a few elements the reference can be luckier than one
 * rounding). */
double kf_ir_judge_floor(kf_dtype d, int64_t n);

/* Judges n elements of `out` (tensor t's dtype, storage format) against the
 * exact values and the references' values of t (double): `ref`, and `fused`
 * and `scores` (kf_ir_eval_fused's and kf_ir_eval_fused_scores'; either may
 * be NULL), whose larger error is fused_err. */
kf_ir_verdict kf_ir_judge(const kf_graph *g, const kf_tensor *t, const void *out,
                          const double *exact, const double *ref, const double *fused,
                          const double *scores);

/* Evaluates g on the same inputs (input_data as for kf_ir_eval): at its
 * dtypes per op, with a GEMM's arithmetic (both kf_ir_eval_fused and, where the
 * graph has attention scores, kf_ir_eval_fused_scores), and exactly; and judges outputs[i]
 * (g->outputs[which[i]]'s storage) into verdicts[i]. Failures as kf_ir_eval's (noted on the graph).
 */
kf_status kf_ir_check(kf_graph *g, const void *const *input_data, size_t n,
                      const uint32_t *which, const void *const *outputs,
                      kf_ir_verdict *verdicts);

#endif /* KF_IR_H */
