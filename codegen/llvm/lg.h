/*
 * lg.h -- internals of codegen/llvm shared by its files: the module and
 * function state, loops, element loads and stores, and the lowering of one
 * scalar expression at one evaluation point (lg_expr.c). Each kernel kind has
 * its own file (lg_elementwise.c, lg_row.c, lg_gemm.c, lg_attention.c).
 */
#ifndef KF_CODEGEN_LG_H
#define KF_CODEGEN_LG_H

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/llvm/codegen_llvm.h"

typedef struct lg_mod {
    LLVMContextRef C;
    LLVMModuleRef M;
    LLVMBuilderRef B;
    LLVMTypeRef i1, i8, i16, i32, i64, f16, f32, f64, ptr, void_t, kernel_t;
    const kf_plan *plan;
    const kf_graph *graph;
    char *err;
    kf_status st;
} lg_mod;

/* One kernel function being emitted. */
typedef struct lg_fn {
    lg_mod *m;
    const kf_group *g;
    kf_cpu_kernel *k;
    LLVMValueRef fn, bufs, begin, end, scratch;
    LLVMBuilderRef alloca_b; /* positioned in the entry block, before its terminator */
    LLVMValueRef *bufptr;    /* per tensor id: the loaded bufs[t], or NULL */
    uint32_t *bufptr_set;    /* the ids set in bufptr, to clear them after the group: */
    uint32_t n_bufptr_set;   /* clearing all n per group made codegen quadratic */
    size_t scratch_used;
} lg_fn;

/* An evaluation point: the index in the node's space and the per-row /
 * per-element values the leaves read. */
typedef struct lg_point {
    int rank;
    LLVMValueRef idx[KF_MAX_RANK]; /* i64 */
    LLVMValueRef stat[KF_STAT_COUNT];
    LLVMValueRef acc[2];   /* GEMM: the accumulators (f32 / f64), unrounded */
    LLVMValueRef acc_head; /* head-split GEMM (gemm.head_dim): f32 pointer to the tile's
                              accumulator of column 0 of this row's current head */
    LLVMValueRef score;    /* ATTENTION: Q.K^T (f32 / f64), unrounded */
    int attn_rank;         /* ATTENTION: the score space's rank (for BATCH/HEAD) */
    uint32_t seed;         /* a node whose value is given (row input from scratch) */
    LLVMValueRef seed_val;
    LLVMValueRef *memo; /* g->n_expr entries, NULL = not yet emitted here */
} lg_point;

typedef struct lg_loop {
    LLVMBasicBlockRef header, exit;
    LLVMValueRef iv, phi;
    LLVMValueRef step;
} lg_loop;

/* Records a failure (first wins) and returns the status. */
kf_status lg_fail(lg_mod *m, kf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Types and constants. */
LLVMTypeRef lg_ctype(lg_mod *m,
                     kf_dtype d); /* compute type: f64 double, i32, bool i1, else float */
LLVMTypeRef lg_acc_type(lg_mod *m, kf_dtype d); /* f64 for f64, else f32 */
LLVMValueRef lg_i64(lg_mod *m, int64_t v);
LLVMValueRef lg_fconst(LLVMTypeRef t, double v);

/* A mutable variable (alloca in the entry block) and a scratch area. */
LLVMValueRef lg_var(lg_fn *f, LLVMTypeRef t, const char *name);
LLVMValueRef lg_scratch(lg_fn *f, size_t bytes); /* pointer into this thread's scratch */

/* for (iv = lo; iv < hi; iv += 1) { ... }: lg_loop_begin returns iv and leaves
 * the builder in the body; lg_loop_end closes it and leaves it after. */
LLVMValueRef lg_loop_begin(lg_fn *f, lg_loop *l, LLVMValueRef lo, LLVMValueRef hi,
                           const char *name);
void lg_loop_end(lg_fn *f, lg_loop *l);
/* if (cond) { ... }: returns the block to continue in after lg_if_end. */
LLVMBasicBlockRef lg_if_begin(lg_fn *f, LLVMValueRef cond);
void lg_if_end(lg_fn *f, LLVMBasicBlockRef after);

/* The buffer of tensor t (loaded from bufs once, in the entry block). */
LLVMValueRef lg_buf(lg_fn *f, uint32_t t);
/* Element `off` (i64) of a buffer in dtype d, as its compute type; and back. */
LLVMValueRef lg_load_elem(lg_fn *f, kf_dtype d, LLVMValueRef base, LLVMValueRef off);
void lg_store_elem(lg_fn *f, kf_dtype d, LLVMValueRef base, LLVMValueRef off, LLVMValueRef v);
/* Converts a compute value of dtype `from` to the compute type of `to`
 * (casts: round to nearest even, float -> i32 truncates and saturates, NaN -> 0). */
LLVMValueRef lg_convert(lg_mod *m, LLVMValueRef v, kf_dtype from, kf_dtype to);
/* Rounds a compute value to what dtype d stores (f16/bf16: round to nearest even). */
LLVMValueRef lg_round(lg_mod *m, LLVMValueRef v, kf_dtype d);
/* sum(idx[d] * strides[d]) over `rank` axes. */
LLVMValueRef lg_offset(lg_mod *m, int rank, LLVMValueRef const *idx, const int64_t *strides);
/* Splits flat index `flat` over dims[0..n) (row-major) into idx[0..n). */
void lg_unflatten(lg_mod *m, LLVMValueRef flat, int n, const int64_t *dims, LLVMValueRef *idx);

/* Math helpers on compute values. */
LLVMValueRef lg_call_intrinsic(lg_mod *m, const char *name, LLVMTypeRef t, LLVMValueRef *args,
                               unsigned n);
LLVMValueRef lg_fmax_nan(lg_mod *m, LLVMValueRef a, LLVMValueRef b); /* NaN-propagating */
LLVMValueRef lg_exp(lg_mod *m, LLVMValueRef x);
LLVMValueRef lg_log(lg_mod *m, LLVMValueRef x);
LLVMValueRef lg_min_i64(lg_mod *m, LLVMValueRef a, LLVMValueRef b);
LLVMValueRef lg_max_i64(lg_mod *m, LLVMValueRef a, LLVMValueRef b);
/* Marks an fadd/fmul as reassociable, so reduction loops vectorize. */
LLVMValueRef lg_reassoc(LLVMValueRef inst);

/* Emits expression node `n` of f->g at point `pt` (memoized per point). */
LLVMValueRef lg_expr(lg_fn *f, lg_point *pt, uint32_t n);
/* A fresh point of `rank` axes with an empty memo (freed by lg_point_done). */
bool lg_point_init(lg_fn *f, lg_point *pt, int rank);
void lg_point_reset(lg_fn *f, lg_point *pt); /* clears the memo only */
void lg_point_done(lg_fn *f, lg_point *pt);

/* Stores the values of every write of f->g whose root is an expression, at
 * `pt` (OUT space: pt->idx over g->rank axes). */
void lg_store_writes(lg_fn *f, lg_point *pt);

/* Row statistics: computes the stats of f->g's row stage over one row. `x_at`
 * emits the row input at position j (i64) along the reduced axis; stats are
 * written into pt->stat. If `cache` is non-NULL it points to `length` compute
 * values the first pass stores x into, which later passes reread. */
typedef LLVMValueRef (*lg_row_fn)(lg_fn *f, void *user, LLVMValueRef j);
void lg_row_stats(lg_fn *f, const kf_row_stage *rs, kf_dtype xdt, lg_row_fn x_at, void *user,
                  LLVMValueRef cache, lg_point *pt);

/* Where operand tensor t lives: its buffer's tensor, its strides there and
 * the elements before its index 0 (a sliced view's offset). */
void lg_operand_layout(const kf_plan *plan, uint32_t t, uint32_t *base, int64_t *strides,
                       int64_t *offset);

/* The kernel kinds. Each sets f->k->outer/scratch/cost and emits the body
 * between the entry block and the return. */
void lg_emit_elementwise(lg_fn *f);
void lg_emit_row(lg_fn *f);
void lg_emit_gemm(lg_fn *f);
void lg_emit_attention(lg_fn *f);

#endif /* KF_CODEGEN_LG_H */
