/*
 * fusion.h -- the fusion plan: what the planner produces and both backends
 * (codegen/cuda, codegen/llvm), the cost model, the checker and `kfuse report`
 * consume. fusion/ includes only ir/.
 *
 * A plan is DATA: an ordered list of kernel groups plus the edges it chose not
 * to fuse, each with a reason code. Nothing in it points back into planner
 * state, so it can be printed, tested, cached and executed by either backend.
 *
 *   kf_graph --kf_plan_create--> kf_plan
 *                                  groups[]   in execution order (a topological order)
 *                                  edges[]    every graph edge that crosses groups, with a reason
 *                                  group_of[] tensor id -> the group that computes it
 *
 * ---------------------------------------------------------------------------
 * How a group reads, computes and writes (the checker's contract)
 * ---------------------------------------------------------------------------
 *
 * `computed` lists, in creation (= topological) order, every graph tensor the
 * group evaluates; kf_ir_eval_node() on each in turn, once every tensor of
 * `reads` holds its value, reproduces the unfused graph. Every non-source
 * tensor that the outputs need is in the `computed` list of exactly one group.
 * Two kinds of tensor may appear in the `computed` lists of several groups
 * (each group recomputes them; evaluating them again gives the same values):
 * sources a group computes inline (iota, one-element constants), and a norm
 * that several GEMMs recompute as their operand-A prologue (gemm.a_prologue).
 * Graph inputs and multi-element constants are never computed; they are read.
 *
 * `reads` lists the tensors the group loads from memory: graph inputs,
 * constants, and tensors written by an EARLIER group (or a VIEW group's view).
 * `writes` lists the computed tensors the group materializes: graph outputs and
 * every tensor some later group reads. A tensor is written by one group only.
 *
 * ---------------------------------------------------------------------------
 * Group kinds and layout
 * ---------------------------------------------------------------------------
 *
 * ELEMENTWISE  a flat loop over `dims` around one expression DAG.
 * ROWWISE      softmax / layer_norm / rms_norm / reduce_{sum,max,mean} over the
 *              LAST axis: an expression prologue per row element (space ROW),
 *              row statistics, and an epilogue expression per output element
 *              (space OUT) that uses the statistics.
 * COLREDUCE    a row-wise op over a non-last axis: a reduction (e.g. the bias
 *              gradient, reduce_sum over rows, axis 0) with an elementwise
 *              prologue and epilogue, or a softmax/norm that fuses with nothing
 *              (AXIS_NOT_INNERMOST). Its own kind because it walks columns
 *              (row.axis says which), not rows.
 * GEMM         one matmul (or two sharing operand A: SwiGLU) with an epilogue
 *              over the accumulator, optionally a row stage on the output (a
 *              norm whose row fits in one tile row, or a longer norm in the
 *              split row form: gemm.row_split), or a norm prologue on A.
 * ATTENTION    matmul(Q, K^T) -> score expression (scale, softcap, ALiBi,
 *              masks) -> softmax(last axis) -> matmul(P, V).
 * VIEW         a reshape or permute of a value that is in memory and laid out
 *              so the view is a pure re-indexing: no kernel (is_kernel=false),
 *              no bytes; consumers LOAD it through `base`, strides and
 *              view_offset. A slice of a value in memory whose consumers all
 *              read through loads or attention operand maps (fusion/view_slices.c)
 *              is a VIEW too: its start is the offset, its step scales a stride.
 *              A view with an offset is never called contiguous, so a graph
 *              output never aliases it (it gets a LAYOUT copy).
 * LAYOUT       a copy kernel: a permute or reshape whose result must be
 *              contiguous (a non-contiguous view that is a graph output, or a
 *              reshape of a non-contiguous view). Expression: one LOAD of
 *              layout_copy_of: in space OUT with permuted strides for a permute;
 *              for a reshape in space ROW (the operand's shape, its strides),
 *              element i of ROW's row-major order going to element i of OUT.
 *              A contiguous view that is a graph output stays a VIEW: the
 *              output aliases its base's bytes.
 *
 * A reshape or permute of a value computed INSIDE a kernel is never fused: the
 * value is materialized (reason LAYOUT_CHANGE) and the layout op becomes a VIEW.
 */
#ifndef KF_FUSION_H
#define KF_FUSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"

/* "no tensor / no node" in every uint32_t index field of the plan. */
#define KF_NONE UINT32_MAX

/* Planner limits (the defaults of kf_plan_options). */
#define KF_GEMM_ROW_EPILOGUE_MAX_N 256 /* a norm on a GEMM output fuses when N fits one tile row */
#define KF_NORM_PROLOGUE_MAX_K 8192    /* a norm -> matmul prologue needs its row stats pre-pass */
/* A longer norm on a GEMM output fuses split (row_split), when asked for
 * (KF_FLAG_SPLIT_ROW_NORMS sets kf_plan_options.gemm_row_split_max_n to this). */
#define KF_GEMM_ROW_SPLIT_MAX_N 65536
/* Sibling elementwise groups (fusion/fuse_siblings.c) share one kernel up to
 * these bounds (the defaults of kf_plan_options): outputs per kernel, which
 * hold a vector of registers each in the CUDA loop, and kernel arguments
 * (reads + writes), kept well under the CUDA launch's KF_CUDA_MAX_PARAMS (64). */
#define KF_SIBLING_MAX_OUTPUTS 16
#define KF_SIBLING_MAX_ARGS 32
/* GEMM siblings (fusion/fuse_gemm_siblings.c): GEMM groups that read one
 * normalized A form a set of at most this many members (the default of
 * kf_plan_options.gemm_sibling_max): Q, K and V, or a fourth projection of the
 * same input; a bound keeps one set's kernels and scratch within a recipe. */
#define KF_GEMM_SIBLING_MAX 4

/* ------------------------------------------------------------------------ */
/* Group kinds                                                                */
/* ------------------------------------------------------------------------ */

typedef enum kf_group_kind {
    KF_GROUP_ELEMENTWISE = 0,
    KF_GROUP_ROWWISE,
    KF_GROUP_COLREDUCE,
    KF_GROUP_GEMM,
    KF_GROUP_ATTENTION,
    KF_GROUP_VIEW,
    KF_GROUP_LAYOUT,
    KF_GROUP_COUNT
} kf_group_kind;

/* "elementwise", "rowwise", "colreduce", "gemm", "attention", "view", "layout". */
const char *kf_group_kind_name(kf_group_kind kind);

/* ------------------------------------------------------------------------ */
/* Reasons an edge was not fused                                              */
/* ------------------------------------------------------------------------ */

#define KF_REASONS(X)                                                                          \
    X(NONE, "fused")                                                                           \
    X(MULTIPLE_CONSUMERS, "the value has several consumers, so it is materialized once")       \
    X(GRAPH_OUTPUT, "the value is a graph output, so it is materialized")                      \
    X(AXIS_NOT_INNERMOST, "the row-wise op's axis is not the last axis")                       \
    X(NO_BROADCAST_INTO_ANCHOR, "the consumer's shape is larger than the anchor's iteration space") \
    X(DTYPE_UNSUPPORTED, "the anchor does not take this dtype")                                \
    X(ROW_TOO_LONG_FOR_GEMM_EPILOGUE, "the row is longer than one GEMM tile row")              \
    X(ROW_TOO_LONG_FOR_PROLOGUE, "the norm's row is too long for a GEMM prologue")             \
    X(NOT_OPERAND_A, "the norm feeds a GEMM operand other than a row-major A")                 \
    X(ANCHOR_BOUNDARY, "both sides are anchors (GEMM, row-wise, attention): one per kernel")   \
    X(LAYOUT_CHANGE, "a reshape/permute of a value computed in a kernel needs it in memory")   \
    X(WOULD_CREATE_CYCLE, "fusing would make the group depend on itself")                      \
    X(PASS_DISABLED, "the fusion pass that would fuse it is switched off")                     \
    X(GATHER_INDEX, "a gather's indices are read from memory (checked there on the CPU)")      \
    X(REMAP_INTO_ANCHOR, "a slice, concat or gather fuses into elementwise and row-wise kernels only") \
    X(NOT_HEAD_LOCAL, "a GEMM's head-split epilogue reads its head view only within each head") \
    X(SOURCE, "the producer is a graph input or constant (reserved: never emitted)")

typedef enum kf_reason {
#define KF_X(NAME, TEXT) KF_REASON_##NAME,
    KF_REASONS(KF_X)
#undef KF_X
        KF_REASON_COUNT
} kf_reason;

/* The reason's code as text ("MULTIPLE_CONSUMERS") and a sentence explaining it. */
const char *kf_reason_code(kf_reason r);
const char *kf_reason_text(kf_reason r);

/* ------------------------------------------------------------------------ */
/* The scalar-expression form (DESIGN.md): shared by both backends            */
/* ------------------------------------------------------------------------ */

/* Index spaces an expression node is evaluated in. */
typedef enum kf_space {
    KF_SPACE_OUT = 0, /* the group's iteration space: kf_group.rank/dims */
    KF_SPACE_ROW = 1, /* the row stage's input: kf_group.row_rank/row_dims (ROWWISE:
                         the anchor's input; GEMM with a norm prologue: operand A) */
    KF_SPACE_COUNT
} kf_space;

typedef enum kf_expr_kind {
    KF_EXPR_OP = 0, /* `op` (an ELEMENTWISE op of the table) on src[0..arity) */
    KF_EXPR_LOAD,   /* an element of tensor `tensor`, read from `base`'s buffer at
                       offset + sum(index[d] * strides[d]) over the node's space (stride 0 =
                       broadcast) + sum(v(src[k]) * dyn_strides[k]) over the src[k] that are
                       not KF_NONE: i32 coordinate nodes (a gather's index, a concat's
                       clamped position), each already within its axis */
    KF_EXPR_CONST,  /* `value` (already rounded to `dtype`) */
    KF_EXPR_INDEX,  /* the index along `axis` of the node's space, as `dtype` (iota) */
    KF_EXPR_ACC,    /* GEMM: the accumulator of anchor `anchor` (0, or 1 for SwiGLU's
                       second GEMM) at this output element, rounded to its dtype; in a
                       head-split group (gemm.head_dim), src[0] may name an i32 node: the
                       accumulator of the same row and head at in-head column v(src[0])
                       (0 <= v < head_dim: the partner of a rotate-half) */
    KF_EXPR_ROW,    /* GEMM: the output row index (axis rank-2), as `dtype` */
    KF_EXPR_COL,    /* GEMM: the output column index (axis rank-1), as `dtype` */
    KF_EXPR_SCORE,  /* ATTENTION: the Q.K^T dot product at (batch, head, q, kv) */
    KF_EXPR_BATCH,  /* ATTENTION: axis rank-4 of the score space (0 if rank < 4) */
    KF_EXPR_HEAD,   /* ATTENTION: axis rank-3 of the score space (0 if rank < 3) */
    KF_EXPR_Q_IDX,  /* ATTENTION: axis rank-2 */
    KF_EXPR_KV_IDX, /* ATTENTION: axis rank-1 */
    KF_EXPR_STAT,   /* the row statistic `stat` of the group's row stage, for this row */
    KF_EXPR_COUNT
} kf_expr_kind;

/* Row statistics, computed from the row stage's input values x[0..L) in f32
 * (device) / double (reference). */
typedef enum kf_stat {
    KF_STAT_MAX = 0,  /* max x (NaN-propagating) */
    KF_STAT_SUM,      /* sum x */
    KF_STAT_MEAN,     /* sum x / L */
    KF_STAT_RSTD,     /* 1 / sqrt(sum (x - mean)^2 / L + eps)   (layer_norm) */
    KF_STAT_RMS_RSTD, /* 1 / sqrt(sum x^2 / L + eps)             (rms_norm) */
    KF_STAT_SUMEXP,   /* sum exp(x - max)                         (softmax) */
    KF_STAT_ARGMAX,   /* the index of the first NaN, else of the first max (argmax;
                         CUDA: templates/argmax.cuh, a warp per row over the last axis,
                         the column kernel over another) */
    KF_STAT_COUNT
} kf_stat;

const char *kf_expr_kind_name(kf_expr_kind kind);
const char *kf_stat_name(kf_stat stat);

/* One node of a group's expression DAG. Nodes only name nodes before them
 * (src[k] < own index), so the pool is in evaluation order.
 *
 * Rounding: a node with `tensor != KF_NONE` stands for that graph tensor and
 * rounds its result to `dtype`, exactly as the reference evaluator stores it;
 * nodes without a tensor (the expansion of a norm or softmax around its
 * statistics) compute in f32 (device) / double (reference). */
typedef struct kf_expr {
    kf_expr_kind kind;
    kf_op op;        /* OP */
    kf_dtype dtype;  /* the value's dtype (OP: the op's result; CAST: the target) */
    kf_space space;  /* where the node is evaluated */
    uint32_t src[3]; /* OP: operand node indices (arity of op's form), rest KF_NONE */
    uint32_t tensor; /* OP: the tensor it computes (or KF_NONE); LOAD: the tensor it reads */
    uint32_t base;   /* LOAD: the tensor whose buffer holds the data (tensor, or a view's base) */
    int64_t strides[KF_MAX_RANK]; /* LOAD: per axis of the node's space, in elements of base */
    int64_t offset;               /* LOAD: elements of base before index 0 (a slice's start) */
    int64_t dyn_strides[3];       /* LOAD: the stride of coordinate node src[k] */
    bool clamp_report;            /* OP: the min() ending a gather index's clamp into its axis
                                     (min(max(i, 0), dim - 1)): where it changes the index, the CUDA
                                     target sets the program's clamp flag word (kf_program_index_clamps) */
    bool remapped;   /* computes `tensor` (rounded like it) at coordinates remapped by a
                        slice, concat or gather: not tensor's value at this index, so the
                        checker does not compare it with the tensor */
    int axis;        /* INDEX: axis of the node's space */
    kf_stat stat;    /* STAT */
    int anchor;      /* ACC */
    double value;    /* CONST */
} kf_expr;

/* The row stage of a ROWWISE or COLREDUCE group, of a GEMM with a norm on its
 * output (space OUT is then both the row input and the output), or of a GEMM
 * with a norm prologue on operand A (space ROW = A's space). */
typedef struct kf_row_stage {
    bool present;
    kf_op op;          /* the row-wise op (softmax, layer_norm, rms_norm, reduce_*) */
    uint32_t tensor;   /* the row-wise tensor */
    int axis;          /* reduced axis in the input space: the last, except COLREDUCE */
    int64_t length;    /* elements per row */
    double eps;        /* norms */
    unsigned stats;    /* bitmask of 1u << KF_STAT_* the kernel must compute */
    uint32_t input;    /* node: the per-element value x the statistics reduce */
    kf_space space;    /* the space of `input` */
} kf_row_stage;

/* GEMM anchors: C[..., M, N] = A[..., M, K] . B[..., K, N] (after transposes). */
typedef struct kf_gemm_info {
    int n_anchors;        /* 1, or 2 for SwiGLU (same A, two B) */
    uint32_t anchor[2];   /* the matmul tensors */
    uint32_t a[2], b[2];  /* operand tensors (graph ids; views allowed: see their VIEW group);
                             with a_prologue, a[] is the norm tensor computed in the group */
    uint32_t a_root;      /* a_prologue: the node computing A's elements (space ROW), else KF_NONE */
    bool transpose_a[2], transpose_b[2];
    int64_t m, n, k, batch; /* batch = product of the output's batch dims */
    bool a_prologue;      /* operand A is computed by the norm prologue (row stage, space ROW) */
    bool row_epilogue;    /* the row stage normalizes the output rows */
    bool row_split;       /* row_epilogue with rows longer than one tile row (N >
                             gemm_row_epilogue_max_n; a LayerNorm / RMSNorm): the split row
                             form. No output tile holds a whole row, but a norm's statistics
                             merge across tiles (sums of squares; Chan's mean / M2), so the
                             row stage may be reduced apart from the tiles: the GEMM's
                             epilogue computes the norm's input rows (row.input) and a row
                             pass normalizes them (CUDA's generated side today: the pass
                             reduces the whole rows itself; per-tile partial statistics
                             written by the epilogue are the refinement this form allows).
                             The plan's semantics are those of row_epilogue: a backend may
                             compute the statistics its own way (the CPU's tiles hold whole
                             rows) */
    int64_t head_dim;     /* 0, or the head-split epilogue (KF_PASS_HEAD_EPILOGUE): the space
                             is the product's head view, [batch..., M, N/head_dim, head_dim]
                             (heads_first: [batch..., N/head_dim, M, head_dim]), so rank is
                             the product's + 1; ACC at (.., m, h, d) is the product at
                             (.., m, h * head_dim + d). The product itself is not written */
    bool heads_first;
    /* GEMM siblings (fusion/fuse_gemm_siblings.c): GEMM groups that read the
     * same operand A through the same norm prologue (the Q, K and V projections
     * of one normalized input) form a set, its members adjacent in the plan's
     * order, so a backend may run them as one: the row statistics (or the
     * normalized A) computed once, A read once. Each member keeps its own
     * epilogue and writes; the plan's semantics are each member's alone.
     * sib_first: the plan id of the set's first member (KF_NONE when the
     * group is in no set); sib_index: this member's place (0-based);
     * sib_count: the members. sib_apart: why this group was kept out of a set
     * whose A it shares (or split from it by the bound), "" when it was not. */
    uint32_t sib_first, sib_index, sib_count;
    char sib_apart[96];
} kf_gemm_info;

typedef enum kf_mask_kind {
    KF_MASK_NONE = 0,
    KF_MASK_CAUSAL,         /* kv <= q */
    KF_MASK_SLIDING_WINDOW, /* kv <= q && q - kv < window */
    KF_MASK_GENERAL,        /* anything else: evaluated per element, no tile skipping */
    KF_MASK_BLOCK_SPARSE,   /* a bool keep map of bq x bk tiles repeated to elements
                               (kf_repeat): dropped tiles are skipped */
    KF_MASK_COUNT
} kf_mask_kind;

const char *kf_mask_kind_name(kf_mask_kind kind);

typedef struct kf_attn_info {
    uint32_t qk, softmax, pv; /* the three anchor tensors */
    uint32_t q, k, v;         /* operand tensors read (graph ids; views allowed) */
    uint32_t out;             /* the tensor the group writes: pv, or a permute of pv that
                                 keeps its last axis (the group absorbed it: [B,H,S,D]
                                 stored as [B,S,H,D], so a reshape after it is a view) */
    int64_t o_strides[KF_MAX_RANK];                /* element strides of pv's axes in out's buffer
                                                      (row-major pv's own when out == pv) */
    bool q_transposed, k_transposed, v_transposed; /* the matmuls' transpose flags */
    uint32_t lse;             /* the logsumexp of the scores over the last axis (through a
                                 cast to f32 or not) the group writes too: per score row
                                 m + log l, row-major [.., sq] (or [.., sq, 1]); KF_NONE when
                                 the graph asks for none (fusion/fuse_attention.c) */
    uint32_t score;           /* root of the score expression (leaves SCORE, BATCH, HEAD,
                                 Q_IDX, KV_IDX, LOAD, CONST), the softmax's input */
    kf_mask_kind mask;
    int64_t window;           /* SLIDING_WINDOW: keys q-window+1 .. q are kept */
    uint32_t mask_node;       /* the where() node applying the mask, or KF_NONE */
    /* BLOCK_SPARSE: keep(bh, q, kv) = map[q / keep_bq, kv / keep_bk] (== keep_when_true),
     * read by LOAD node keep_node (its base, offset and batch-axis strides) whose
     * coordinate sources keep_src_q / keep_src_k are those two divisions */
    uint32_t keep_node;
    int keep_src_q, keep_src_k;
    int64_t keep_bq, keep_bk;
    bool keep_when_true;
    int64_t batch, heads, sq, skv, d, dv; /* score space [batch, heads, sq, skv] */
} kf_attn_info;

/* ------------------------------------------------------------------------ */
/* Groups and the plan                                                        */
/* ------------------------------------------------------------------------ */

typedef struct kf_group {
    uint32_t id;       /* index in plan->groups: execution order */
    kf_group_kind kind;
    bool is_kernel;    /* false for VIEW */
    char name[128];    /* generated kernel name, e.g. gemm_bias_gelu_f32_8x256 */
    uint32_t anchor;   /* the anchor tensor (ROWWISE/COLREDUCE: the row op; GEMM: the first
                          matmul; ATTENTION: the P.V matmul; ELEMENTWISE: the last tensor) */
    kf_dtype dtype;    /* the anchor's dtype */

    int rank;          /* space OUT */
    int64_t dims[KF_MAX_RANK];
    int row_rank;      /* space ROW (0 when unused) */
    int64_t row_dims[KF_MAX_RANK];

    uint32_t *computed; uint32_t n_computed;
    uint32_t *reads;    uint32_t n_reads;
    uint32_t *writes;   uint32_t n_writes;
    uint32_t *roots;    /* roots[i]: the expression node that computes writes[i] (KF_NONE for
                           anchors that are not expressions: the matmul of a GEMM without
                           epilogue, the attention output) */

    kf_expr *expr; uint32_t n_expr;

    kf_row_stage row;
    kf_gemm_info gemm;
    kf_attn_info attn;
    uint32_t layout_copy_of; /* LAYOUT/VIEW: the operand tensor */
    uint32_t view_base;      /* VIEW: the materialized tensor whose buffer it aliases */
    int64_t view_strides[KF_MAX_RANK]; /* VIEW: strides of the view's dims in base */
    int64_t view_offset; /* VIEW: elements of base before the view's index 0 (a slice's
                            start; 0 for reshape / permute of a contiguous value) */
    bool view_contiguous;
    /* ELEMENTWISE: sibling groups fused into this one (fusion/fuse_siblings.c):
     * they each read sibling_of from memory; 0 siblings when none were. When a
     * bound split the siblings of one tensor and one space into several kernels,
     * sibling_parts > 1, this is part sibling_part (1-based), and sibling_bound
     * says which bound: "outputs" or "arguments" ("" when none split them). */
    uint32_t sibling_of, siblings, sibling_part, sibling_parts;
    const char *sibling_bound;

    /* Cost (filled by kf_plan_estimate; 0 until then). */
    double flops;
    double bytes_read, bytes_written;
    double unfused_bytes; /* bytes the unfused graph would move for the same tensors */
    double est_time_s;

    /* Internal: capacities of the arrays above. */
    uint32_t cap_computed, cap_reads, cap_writes, cap_roots, cap_expr;
} kf_group;

/* An edge producer -> consumer (consumer's operand `slot`) that the plan did
 * not fuse, with the groups on each side. */
typedef struct kf_plan_edge {
    uint32_t producer, consumer;
    int slot;
    uint32_t from_group, to_group;
    kf_reason reason;
    char detail[96]; /* e.g. "N=4096 > 256"; "" if none */
} kf_plan_edge;

/* The passes, in pipeline order (fusion/plan.c holds the table). */
#define KF_PASSES(X)                                                                               \
    X(ATTENTION, "fuse_attention")                                                                 \
    X(SWIGLU, "fuse_swiglu")                                                                       \
    X(GEMM_EPILOGUE, "fuse_gemm_epilogue")                                                         \
    X(NORM_PROLOGUE, "fuse_norm_prologue")                                                         \
    X(ROWWISE, "fuse_rowwise")                                                                     \
    X(ELEMENTWISE, "fuse_elementwise")                                                             \
    X(HEAD_EPILOGUE, "fuse_head_epilogue")                                                         \
    X(SIBLINGS, "fuse_siblings")                                                                   \
    X(VIEW_SLICES, "view_slices")                                                                  \
    X(GEMM_SIBLINGS, "fuse_gemm_siblings")

typedef enum kf_pass_id {
#define KF_X(NAME, TEXT) KF_PASS_##NAME,
    KF_PASSES(KF_X)
#undef KF_X
        KF_PASS_COUNT
} kf_pass_id;

const char *kf_pass_name(kf_pass_id pass);

typedef struct kf_plan_options {
    unsigned disabled;                /* bitmask of 1u << KF_PASS_* */
    int64_t gemm_row_epilogue_max_n;  /* default KF_GEMM_ROW_EPILOGUE_MAX_N */
    int64_t norm_prologue_max_k;      /* default KF_NORM_PROLOGUE_MAX_K */
    int64_t gemm_row_split_max_n;     /* default 0 (never); a norm on a GEMM output with
                                         gemm_row_epilogue_max_n < N <= this fuses in the split
                                         row form. kf_compile, `kfuse report` and `kfuse aot` set
                                         KF_GEMM_ROW_SPLIT_MAX_N under KF_FLAG_SPLIT_ROW_NORMS */
    uint32_t sibling_max_outputs;     /* default KF_SIBLING_MAX_OUTPUTS (0: the default) */
    uint32_t sibling_max_args;        /* default KF_SIBLING_MAX_ARGS (0: the default) */
    uint32_t gemm_sibling_max;        /* default KF_GEMM_SIBLING_MAX (0: the default); 1 forms
                                         no GEMM sibling sets */
    bool gemm_head_epilogue;          /* default false: fuse_head_epilogue may move the elementwise
                                         consumer of a GEMM's head view (reshape [.., N] to
                                         [.., H, D], maybe a permute of M and H: a rotary
                                         embedding) into the GEMM (KF_FLAG_GEMM_HEAD_EPILOGUE) */
    bool debug;                       /* dump after each pass to stderr (also KF_DEBUG=1) */
} kf_plan_options;

typedef struct kf_plan {
    kf_graph *graph;
    kf_mem mem; /* the graph's allocator */
    kf_plan_options options;
    kf_group *groups; uint32_t n_groups, cap_groups;
    kf_plan_edge *edges; uint32_t n_edges, cap_edges;
    uint32_t *group_of; /* graph->n_nodes entries: the group computing each tensor
                           (the first, for inline sources), or KF_NONE */
    char device[32];    /* kf_plan_estimate's device ("" before) */
    double total_bytes, total_unfused_bytes, total_time_s;
    kf_ir_idiom_counts idioms; /* ops recognized in primitives (kf_ir_idioms) */
    char error[KF_MSG_MAX];
} kf_plan;

/* Fills *o with the defaults. */
void kf_plan_options_init(kf_plan_options *o);

/* Plans `g` (which must verify). `options` may be NULL. First folds g's common
 * subexpressions in place (kf_ir_cse: operands and outputs are redirected to
 * the first of equal tensors, every value unchanged), so a plan computes the
 * same op on the same operands once, then rewrites norms and activations
 * written in primitives as their ops (kf_ir_idioms: values change by rounding
 * only), and every caller (kf_compile on its private copy, `kfuse report`,
 * `kfuse aot`) plans the same groups. On
 * failure *out is NULL and the message is on the graph (kf_graph_error); nothing leaks. Every
 * allocation goes through g->mem. Errors: KF_ERR_INVALID_ARGUMENT,
 * KF_ERR_VERIFY (and the verifier's own), KF_ERR_OUT_OF_MEMORY. */
kf_status kf_plan_create(kf_graph *g, const kf_plan_options *options, kf_plan **out);
void kf_plan_destroy(kf_plan *plan);

/* True when GEMM group g is a member of a GEMM sibling set (gemm.sib_*). */
static inline bool kf_group_in_gemm_sib_set(const kf_group *g) {
    return g->kind == KF_GROUP_GEMM && g->gemm.sib_first != KF_NONE && g->gemm.sib_count > 1;
}

/* Number of groups that are kernels (all but VIEW). */
uint32_t kf_plan_kernel_count(const kf_plan *plan);
/* The group that computes tensor `t` (NULL for graph inputs / unused tensors). */
const kf_group *kf_plan_group_of(const kf_plan *plan, const kf_tensor *t);
/* The tensor whose buffer holds tensor id t: t itself, or the base a view of it
 * aliases (followed through views of views). */
uint32_t kf_plan_buffer_of(const kf_plan *plan, uint32_t t);
/* The first edge producer->consumer, or NULL if it is fused / no such edge. */
const kf_plan_edge *kf_plan_find_edge(const kf_plan *plan, const kf_tensor *producer,
                                      const kf_tensor *consumer);

/* Writes a compact human-readable dump of the plan (groups, expressions, edges). */
void kf_plan_dump(const kf_plan *plan, FILE *out);
/* Writes the expression DAG of group g rooted at node `root` as nested calls
 * ("gelu(add(ACC, LOAD b[.,i]))"). */
void kf_expr_print(const kf_plan *plan, const kf_group *g, uint32_t root, FILE *out);

/* Cost model (fusion/cost.c, issue 3 item 4): fills every group's cost fields
 * and the plan totals for `device` ("h100", "h200", "a100", "cpu"; NULL = "h100").
 * KF_ERR_NOT_FOUND for an unknown device. */
kf_status kf_plan_estimate(kf_plan *plan, const char *device);
/* The cost model's device for a GPU named `gpu_name` (the driver's name):
 * "h200" or "a100" when the name says so, else "h100" (the model kfuse knows
 * best; an unknown GPU's roofline is a guess either way). */
const char *kf_plan_device_for_gpu(const char *gpu_name);

/* Checker (fusion/check.c, issue 3 item 5). kf_plan_check_structure checks the
 * contract at the top of this file (rules S1..S8 in check.c); kf_plan_check
 * also executes the plan group by group with the reference evaluator on random
 * inputs drawn from `seed`, interprets every group's expressions and anchor
 * descriptors against the reference values (rules E1..E9), and compares every
 * graph output with kf_ir_eval of the unfused graph, bit for bit (NaN matches
 * NaN). *max_rel_err (may be NULL) receives the largest ||plan - ref|| / ||ref||
 * over the outputs. A violation or mismatch is KF_ERR_INTERNAL (a planner bug)
 * with the message, naming the rule, on the graph (kf_graph_error);
 * KF_ERR_OUT_OF_MEMORY as usual. */
kf_status kf_plan_check_structure(const kf_plan *plan);
/* The structure rule S10 of GEMM sibling sets (fusion/check_gemm_siblings.c),
 * which kf_plan_check_structure applies: KF_OK, or KF_ERR_INTERNAL with the
 * message on the graph. */
kf_status kf_plan_check_gemm_siblings(const kf_plan *plan);
kf_status kf_plan_check(const kf_plan *plan, uint64_t seed, double *max_rel_err);

/* Report (fusion/report.c). */
/* kf_report_format (TEXT, JSON) is public: kfuse.h. */
/* Writes the plan's report. KF_ERR_IO when the stream fails. */
kf_status kf_plan_report(const kf_plan *plan, kf_report_format format, FILE *out);

/* What a backend adds to the report (the CUDA recipes, a run's measurements):
 * `write` is called once, after the plan's text, or in the JSON object after
 * "totals", where it writes its members each as `,\n  "key": value`. Without
 * it the JSON report says `"cuda": null`. (fusion/ cannot include codegen/,
 * so the writer is passed in.) */
typedef struct kf_report_extra {
    void (*write)(void *user, kf_report_format format, FILE *out);
    void *user;
} kf_report_extra;

/* kf_plan_report with a backend's additions (`extra` may be NULL). */
kf_status kf_plan_report_with(const kf_plan *plan, kf_report_format format,
                              const kf_report_extra *extra, FILE *out);

#endif /* KF_FUSION_H */
