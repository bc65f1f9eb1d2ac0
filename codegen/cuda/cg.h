/*
 * cg.h -- internals of codegen/cuda shared by its files: the generator's
 * state (cg: one kernel being generated), the growing source text, the
 * chunk context that says where a chunk's coordinates and offsets come from,
 * the outputs and row specs the kernel kinds take, and the helpers every kind
 * calls. cg_core.c has the state, names, params and the head of every source;
 * cg_expr.c the scalar expressions; cg_access.c how operands are read. Each
 * kernel kind has its own file (cg_elementwise.c, cg_rowwise.c,
 * cg_colreduce.c); cuda_codegen.c has the public entry points.
 */
#ifndef KF_CODEGEN_CUDA_CG_H
#define KF_CODEGEN_CUDA_CG_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cuda/cuda_codegen.h"

/* ------------------------------------------------------------------------ */
/* Growing text                                                               */
/* ------------------------------------------------------------------------ */

typedef struct sbuf {
    const kf_mem *mem;
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

/* Appends to b; on failure sets b->oom and appends nothing more (cg_end turns
 * it into KF_ERR_OUT_OF_MEMORY). */
void cg_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cg_puts(sbuf *b, const char *s);

/* ------------------------------------------------------------------------ */
/* The generator's state                                                      */
/* ------------------------------------------------------------------------ */

/* Sizes of the generated-text buffers, chosen so the worst case fits: a
 * coordinate is at most "(row) / N LL % N LL" with 19-digit N (< 96 bytes), an
 * offset at most 8 terms "COORD * N LL + " (< 8 * 123 bytes), an override an
 * offset wrapped in a load. Text cut short would be wrong code, so the sizes
 * are derived, not guessed, and the static asserts below keep them so. */
#define COORD_MAX 96
#define LIN_MAX 160
#define OV_MAX 1152 /* an override's text: a load expression */

_Static_assert(OV_MAX - 64 >= KF_MAX_RANK * (COORD_MAX + 27) + 1, "an offset fits");
_Static_assert(LIN_MAX >= 4 * 24 + 40, "a linear index fits");

typedef struct cg {
    const kf_plan *plan;
    const kf_group *g;
    const kf_mem *mem;
    kf_cuda_kernel *k;
    sbuf s;
    uint32_t n;         /* nodes */
    char (*ov)[OV_MAX]; /* per node: the expression standing for it ("" none) */
    bool *need;         /* per node: scratch for reachability */
    int32_t *param;     /* per node: LOAD/ACC/SCORE: its param; else -1 */
    int64_t *soff;      /* per node: row_warp_staged: byte offset of its row in a stage; else -1 */
    bool staged;        /* emitting a staged prologue: loads with soff >= 0 read the stage */
    int64_t dtab_lo;    /* CG_PAIR_DIAG_TAB: the sm_90a kernel's kv - q range the diagonal's
                           table covers, [dtab_lo, dtab_lo + dtab_n) */
    int64_t dtab_n;
    bool div_by_mul;    /* cg_emit_nodes writes x / c (c a float constant) as x * (1 / c):
                           one multiply instead of a division, within an ulp of it, which the
                           rounding to a 16-bit dtype then almost always hides (the fused
                           attention's score expression) */
    bool score_f32;     /* cg_emit_nodes and the pair form (cg_attention_pair.c) keep every
                           float op node unrounded, in f32: the sm_90a attention kernel's
                           score expression with f32 scores (cg_attention.c: numerics) */
    bool tanh_formula;  /* gelu_tanh by its formula (kf_gelu_tanh), never the bf16 table: the
                           sm_90a GEMM's epilogue, where the formula costs fewer instructions
                           than the lookup and its out-of-range selects */
    bool pk_raw;        /* the sm_90a GEMM's TMA-store epilogue's bf16 pair forms
                           (cg_gemm_epi.c): a bf16x2 op's operands that are bf16 ops
                           rounded here packed from their unrounded values, one
                           cvt.rn.bf16x2 a pair (cg_raw_feed, kf_gm_bf16x2r); an exact
                           bf16 output packed by bit operations (kf_gm_pack2); bf16 pairs
                           loaded by a shift and a mask (kf_gm_ldv) */
    bool *stored;       /* per node: written to an output buffer of its own dtype (cg_raw_of) */
    uint64_t rflags;    /* the recipe flags a kernel kind reads (KF_CUDA_RECIPE_*; 0: none) */
    uint8_t *kvary;     /* per node: a cg_kvary (cg_kvary_fill), or NULL: cg_emit_nodes reads
                           every remapped LOAD element by element */
    kf_status st;
} cg;

/* Records a failure in c->k->error (the first wins) and returns `st`. */
kf_status cg_fail(cg *c, kf_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Starts a kernel of `group` for `arch` into `out` (zeroed first): checks the
 * arguments and allocates the per-node arrays. Whatever it returns, finish
 * with cg_end. */
kf_status cg_begin(cg *c, const kf_plan *plan, uint32_t group, const char *arch, const kf_mem *mem,
                   kf_cuda_kernel *out);
/* Names the kernel: `prefix` + the group's name + the arch, cut to what NVRTC
 * takes with a hash keeping it unique. */
void cg_set_name(cg *c, const char *prefix);
/* Frees the per-node arrays; on success (st and c->st KF_OK, no text lost)
 * hands the source to c->k, else frees it. Returns the first failure. */
kf_status cg_end(cg *c, kf_status st);

/* The storage type of dtype d in a kernel ("kf_bf16", "float", ...), the type
 * a value of d is computed in, and the rounding function of f16/bf16 (NULL
 * for the others). */
const char *cg_storage_type(kf_dtype d);
const char *cg_reg_type(kf_dtype d);
const char *cg_round_fn(kf_dtype d);

/* Graph tensor `id` of the plan, and its bytes. */
const kf_tensor *cg_tensor(const cg *c, uint32_t id);
uint64_t cg_tensor_bytes(const cg *c, uint32_t id);
/* The index of the param of `kind` for tensor t, added if new (fails past
 * KF_CUDA_MAX_PARAMS). */
int cg_param_add(cg *c, kf_cuda_param_kind kind, uint32_t t, kf_dtype dt, uint64_t bytes);
/* Marks in c->need what node `root` needs, stopping at overridden nodes. */
void cg_mark(cg *c, uint32_t root);
/* Whether node `root` reads a row statistic. */
bool cg_depends_on_stat(const cg *c, uint32_t root);

/* The head of every source: the comment listing the params,
 * templates/common.cuh, the KF_KERNEL / KF_BLOCK / KF_VEC / KF_PARAMS /
 * KF_ARGS defines and the gelu table (or KF_SETUP's empty definition). */
void cg_emit_head(cg *c, const char *what);
/* kf_vec_ok: true when the kernel's vector operands meet `conds`. */
void cg_emit_vec_ok(cg *c, const char *conds);

/* Shared memory a block may use and an SM holds for `arch`; false below
 * sm_80 (no cp.async). */
bool cg_stage_smem_limits(const char *arch, uint32_t *per_block, uint32_t *per_sm);

/* The row templates' shapes, which cg_gen_rowwise follows. */

/* A warp per row up to 4096 elements (f32/f16/bf16: at most 128 values per
 * lane in registers, no __syncthreads at all), a block per row beyond. On an
 * H200, 65536 x 4096 bf16: warp per row rmsnorm 0.300 ms (84% of copy),
 * layernorm 0.367 ms (69%), against 0.338 / 0.542 ms with 256-thread blocks
 * (ab05489, the same run). Doubles keep the block template above 1024. */
#define ROW_WARP_MAX 4096
static inline bool row_warp_for(int64_t L, bool dbl) {
    return L <= 1024 || (!dbl && L <= ROW_WARP_MAX);
}

/* Threads per row for the block templates: the smallest block (from 128) that
 * keeps each thread at most 16 values (8 in double) in registers. Several
 * 16-byte loads per thread put a whole row in flight before its reduction,
 * and smaller blocks keep more rows in flight per SM; blocks of one load per
 * thread (the old <= 8 values) left the memory system idle across each row's
 * reductions. Measured on an H200, 65536 x 4096 bf16 (bench, b46d64f): 512
 * threads x 8 values rmsnorm 0.443 ms, layernorm 0.587; 128 x 32: 0.442,
 * 0.507; 256 x 16: 0.340, 0.492. Rows too long take the multipass template. */
static inline uint32_t row_block_for(int64_t L, bool dbl) {
    int64_t per = dbl ? 8 : 16;
    uint32_t block = 128;
    while (block < 1024 && (L + block - 1) / block > per)
        block *= 2;
    return block;
}

/* ------------------------------------------------------------------------ */
/* Scalar expressions (cg_expr.c)                                             */
/* ------------------------------------------------------------------------ */

/* The gelu table of bf16 results (cg_expr.c says how it is laid out): its
 * entries cover bf16 magnitudes GELU_TAB_LO..GELU_TAB_HI, both signs. */
#define GELU_TAB_LO 0x3600u /* |bits| of 2^-19 */
#define GELU_TAB_HI 0x4180u /* 16.0 */
#define GELU_TAB_N (2u * (GELU_TAB_HI - GELU_TAB_LO))

/* The field of the row templates' stats struct that holds statistic s. */
const char *cg_stat_field(kf_stat s);
/* A constant of dtype d as its exact bits (inf and NaN included). */
void cg_emit_const(cg *c, kf_dtype d, double v);
/* Whether the group has a gelu the table serves, and the table with its
 * helpers (or KF_SETUP's empty definition). */
bool cg_has_gelu_table(const cg *c);
void cg_emit_gelu_table(cg *c);
/* Node s holds a bf16 value exactly (a load of a bf16 buffer, or an op result
 * rounded to bf16 here). */
bool cg_exact_bf16(const cg *c, uint32_t s);
/* Node i's value before its rounding is vNu, which a store to a buffer of its
 * own dtype converts once (the `u` suffix of a store's operand). */
bool cg_raw_of(const cg *c, uint32_t i, bool arr);
/* With c->pk_raw: node i is a bf16 op rounded here that a needed bf16x2 op
 * (kf_bf16x2) reads; cg_emit_nodes gives its unrounded value vNu too. */
bool cg_raw_feed(const cg *c, uint32_t i);

/* Whether i32 node i (+, -, x, negation of indices and constants) provably
 * stays inside i32, so cg_emit_nodes writes it as the plain operator. */
bool cg_i32_exact(const kf_group *g, uint32_t i);
/* The range [*lo, *hi] i32 node i provably stays in (false: none known). */
bool cg_i32_range(const kf_group *g, uint32_t i, int64_t *lo, int64_t *hi);
/* The CUDA function (common.cuh) of a unary or binary op, or NULL. */
const char *cg_op_fn(kf_op op);
/* The coordinate of axis `axis` of space sp, as text (cg_emit_nodes). */
typedef const char *(*coord_fn)(void *user, kf_space sp, int axis);
/* One statement per needed node, in node order: `const T vN = ...;` (`arr`: an
 * array of VV values per node, outside the k loop; cg_expr.c says why). */
void cg_emit_nodes(cg *c, coord_fn coord, void *user, const char *ind, bool arr);

/* ------------------------------------------------------------------------ */
/* Accesses and chunks (cg_access.c)                                          */
/* ------------------------------------------------------------------------ */

/* How an access is made in a chunk of VV elements along the last axis. */
typedef enum acc_class { ACC_VECTOR, ACC_BCAST, ACC_GATHER } acc_class;

/* The rank and dims of space sp of g. */
void cg_space_dims(const kf_group *g, kf_space sp, int *rank, const int64_t **dims);
/* Whether strides s lay the space out contiguously (size-1 axes aside). */
bool cg_strides_contig(int rank, const int64_t *dims, const int64_t *s);
int64_t cg_numel_of(int rank, const int64_t *dims);
/* How an operand of strides s is read in a chunk of `vec` elements. */
acc_class cg_classify(int rank, const int64_t *dims, const int64_t *s, uint32_t vec);
/* The strides of a LOAD / ACC / SCORE node in its space. */
void cg_node_strides(const cg *c, uint32_t i, int64_t *s);
/* The element strides of a head-split GEMM group's ACC (gemm.head_dim) over its
 * space: the product's row-major layout read through its head view. */
void cg_head_acc_strides(const kf_group *g, int64_t *s);
/* Registers the params of every load among the needed nodes (c->param). */
void cg_load_params(cg *c);
/* A LOAD, ACC or SCORE leaf that the chunk machinery reads (vectors,
 * broadcasts, staging, hoisting): every one but a remapped LOAD. */
bool cg_is_load(const kf_expr *e);
/* A LOAD with an offset or coordinate nodes (a slice, concat or gather read
 * through): cg_emit_nodes reads it one element at a time, its offset spelled
 * from the space's coordinates and the coordinate nodes' values, or in the
 * elementwise kernel as a vector where its elements run consecutively
 * (cg_emit_remap_vector). */
bool cg_is_remapped_load(const kf_expr *e);
/* The smallest element size, from `start`, among the needed vector loads of
 * space sp; the vector width for it (16 bytes, at most 8 elements), halved
 * until it divides `last_dim` unless a tail is allowed. */
size_t cg_min_vec_size(const cg *c, kf_space sp, size_t start);
uint32_t cg_vec_for(size_t min_size, int64_t last_dim, bool tail_ok);

/* Where the chunk's coordinates come from: coordinate strings per axis for
 * each space, and the linear offset of the chunk's first element in a
 * contiguous layout of each space. */
typedef struct chunk_ctx {
    char coord[KF_SPACE_COUNT][KF_MAX_RANK][COORD_MAX];
    char lin[KF_SPACE_COUNT][LIN_MAX];
    char kcoord[COORD_MAX + 8]; /* scratch for cg_coord_of */
    int vrank[KF_SPACE_COUNT];  /* the vectorized axis is rank-1 of the space; -1: no vectors */
} chunk_ctx;

/* Coordinates of space sp from a linear index (the text `linear`). */
void cg_coords_linear(chunk_ctx *x, kf_space sp, int rank, const int64_t *dims, const char *linear);
/* The same in 32-bit unsigned arithmetic, for a space of at most UINT32_MAX
 * elements: a division by a constant is a multiply-high and a shift, where
 * the 64-bit one is a dozen instructions. */
void cg_coords_linear_u32(chunk_ctx *x, kf_space sp, int rank, const int64_t *dims,
                          const char *linear);

/* How a node's value varies across the VV elements of a vector chunk, which
 * run along the last axis of its space within one row. */
typedef enum cg_kvary {
    KV_FIXED = 0, /* the same in every element (a constant, another axis's index, ...) */
    KV_STEP,      /* i32, and from each element to the next unchanged or one more: the
                     last axis's index, plus / minus a fixed value, min / max of such */
    KV_ANY,
    KV_COUNT
} cg_kvary;
/* Fills kv[n] (one per node of c->g, in node order) for chunks along the last
 * axis of space sp. */
void cg_kvary_fill(const cg *c, kf_space sp, uint8_t *kv);
/* How remapped load e's offset moves along a chunk (kv as cg_kvary_fill
 * gives it; e's space of `rank` axes `dims`): *stat where the last axis's
 * own coordinate at stride 1 moves it, *dyn the operand of the one KV_STEP
 * coordinate node at stride 1 that does (-1: none); neither: every element
 * reads the same one. False where it moves otherwise. */
bool cg_remap_step(const kf_expr *e, const uint8_t *kv, int rank, const int64_t *dims, bool *stat,
                   int *dyn);
/* (cg_emit_nodes, arr, with c->kvary) Emits remapped LOAD node i as a vector
 * when its elements are consecutive and aligned, one load when they are one
 * element, else element by element, and returns true; false (nothing
 * emitted) where node i is no such load. `user` is the chunk_ctx. */
bool cg_emit_remap_vector(cg *c, void *user, uint32_t i, const char *ind);
/* The coordinate of `axis` of space sp in element k of the chunk (a
 * coord_fn; `user` is the chunk_ctx). */
const char *cg_coord_of(void *user, kf_space sp, int axis);
/* The offset of node i's first chunk element, into buf. */
void cg_offset_str(const cg *c, const chunk_ctx *x, uint32_t i, char *buf, size_t size);
/* The loads of the needed nodes: vectors and broadcasts before the k loop,
 * gathers per element; sets their overrides in c->ov. `hoist` / `pre` (may
 * be NULL): per node, the elementwise template's hoisted and streamed
 * operands, read from hv / pv when H / P. */
void cg_emit_loads(cg *c, chunk_ctx *x, uint32_t vec, const char *ind, const bool *hoist,
                   const bool *pre);
/* The alignment conditions of the needed vector loads, appended to *cond. */
void cg_vec_conditions(cg *c, const chunk_ctx *x, uint32_t vec, sbuf *cond);

/* ------------------------------------------------------------------------ */
/* Outputs and the kernel kinds                                               */
/* ------------------------------------------------------------------------ */

typedef struct out_spec {
    uint32_t node; /* root */
    int param;
    kf_dtype dtype; /* the buffer's */
    uint32_t tensor;
    bool synth_softmax; /* attention: exp(x - max) / sumexp of the row input */
    unsigned stat_pack; /* row kernels: 1u << KF_STAT_* of the statistics written once per
                           row, f32, in enum order, popcount values a row (node KF_NONE) */
} out_spec;

#define MAX_OUTS KF_CUDA_MAX_PARAMS

/* Sets c->stored for the outputs stored in their node's own dtype (cg_raw_of). */
void cg_mark_stored(cg *c, const out_spec *outs, uint32_t n_outs);

/* The elementwise kernel over space sp (cg_elementwise.c): every out is
 * computed per element and stored. The outs' params are set; the source is
 * c->s, the template and launch shape c->k's. */
kf_status cg_gen_elementwise(cg *c, out_spec *outs, uint32_t n_outs, kf_space sp, const char *what);

/* What a row kernel reduces: the row input x, reduced along the last axis of
 * its space, and the statistics the group declares. */
typedef struct row_spec {
    kf_space sp;    /* the row input's space (last axis reduced) */
    uint32_t input; /* node x */
    unsigned stats; /* 1u << KF_STAT_* */
    int64_t length;
    double eps;
    kf_dtype in_dtype;
} row_spec;

/* The row statistics the needed nodes read, with `declared`; their
 * KF_NEED_* / KF_EPS defines and the accumulator type (cg_rowwise.c). */
unsigned cg_stats_used(const cg *c, unsigned declared);
void cg_emit_stat_defines(cg *c, unsigned s, double eps, kf_dtype in_dtype, int64_t length);
/* The row kernel of rs (cg_rowwise.c): a warp or a block per row, staged or
 * not; outs in the row's space before or after the statistics, the others
 * once per row. */
kf_status cg_gen_rowwise(cg *c, const row_spec *rs, out_spec *outs, uint32_t n_outs,
                         const char *what);
/* The column reduction of the group's row stage (cg_colreduce.c). */
kf_status cg_gen_colreduce(cg *c, out_spec *outs, uint32_t n_outs);

/* ---- attention (cg_attention.c), shared with the decode generator ---------- */

/* An operand as an attention kernel reads it: its buffer's tensor, the
 * elements before index 0 (a sliced view's start) and the element strides of
 * its rows (query / key index), its columns (head dim) and of each batch axis
 * of the score space (0 where it broadcasts). */
typedef struct cg_attn_op {
    uint32_t base;
    int64_t off;
    int64_t s_row, s_col;
    int64_t bstride[KF_MAX_RANK];
} cg_attn_op;

/* Operand t of an R-axis score space; rows_first_when_plain: its logical
 * layout is [.., rows, cols] without its transpose flag (Q, V), else
 * [.., cols, rows] (K as matmul's B). */
void cg_attn_op_layout(const kf_plan *plan, uint32_t t, bool rows_first_when_plain, bool trans,
                       int R, cg_attn_op *o);
/* One score function: the group's score expression at (bh, q, kv) with `s`
 * the f32 Q.K^T dot product; `inner` 1 replaces the mask's where() by its
 * kept branch (tiles the mask does not cut), 2 by its fill (a block-sparse
 * tile the keep map drops, visited for an all-masked row). */
void cg_attn_emit_score_fn(cg *c, chunk_ctx *x, const char *name, int inner);
/* kf_tanh_approx, then kf_score_full, kf_score_fill (BLOCK_SPARSE masks) and
 * kf_score_inner (a #define of the full one unless `skip`: a mask whose tiles
 * are skipped), over c's group. */
kf_status cg_attn_emit_score_fns(cg *c, bool skip);
/* The same with tanh as common.cuh's tanhf, not tanh.approx.f32 (relative
 * error 2^-11): the SIMT kernel's f32 groups, judged at f32's tolerance. */
kf_status cg_attn_emit_score_fns_exact(cg *c, bool skip);
/* kf_score_pair(s0, s1, bh, q, kv) and KF_SCORE_PAIR (cg_attention_pair.c):
 * the inner score of (q, kv) and (q, kv + 1) at once -- the mask's where()
 * replaced by its branch `kept` (KF_NONE: no mask to replace) -- where every
 * node has a pair form and it takes fewer instructions than two
 * kf_score_inner; else nothing. bf16 scores, no folded scale (`fold`
 * KF_NONE); x: the score functions' coordinates. */
kf_status cg_attn_emit_score_pair(cg *c, chunk_ctx *x, uint32_t kept, uint32_t fold,
                                  unsigned forms);
/* cg_attn_emit_score_pair's `forms`: CG_PAIR_SPLIT, the split at a tanh
 * where the pair form has one (pair_split: kf_score_pre, kf_score_post,
 * kf_score_post_ident and KF_SCORE_SPLIT); */
#define CG_PAIR_SPLIT 1u
/* and CG_PAIR_DIAG, the diagonal computed once for a thread's two rows
 * where the pair form has one and no split (pair_diag: kf_score_diag,
 * kf_score_pair_dg and KF_SCORE_DIAG) */
#define CG_PAIR_DIAG 2u
/* (4u was CG_PAIR_TANH_POLY, kf_score_pair_t with a softcap's tanh as a
 * rational on the FMA pipe: retired with KF_CUDA_RECIPE_ATTENTION_TANH_POLY,
 * measured slower; README's sc14 section has the rational) */
/* and CG_PAIR_DIAG_TAB, with the diagonal its part free of loads (ALiBi's
 * bf16(kv - q) pair) read from a table in shared memory over c->dtab_lo,
 * c->dtab_n, which the block fills once (pair_dtab: kf_dtab, kf_dtab_build,
 * kf_score_diag_t and KF_DIAG_TAB) */
#define CG_PAIR_DIAG_TAB 8u
/* and CG_PAIR_DIAG_EDGE, with the diagonal the causal mask's edge tiles by
 * the pair form too, where the mask is causal and its where() with an -inf
 * fill is the score's last node (KF_SCORE_DIAG_EDGE) */
#define CG_PAIR_DIAG_EDGE 16u
/* and CG_PAIR_DIAG_ADD, with an affine diagonal (KF_DIAG_LIN) that the score
 * adds to the score times a positive constant, the kernel's score tile as
 * that sum's affine part, its row terms applied by the softmax (diag_add:
 * KF_DIAG_ADD, KF_DIAG_SCALE) */
#define CG_PAIR_DIAG_ADD 32u
/* The largest bf16 value T (its bits) such that tanh(x), rounded to bf16 as
 * the reference evaluator rounds it, is x itself for every bf16 |x| <= T. */
unsigned cg_tanh_ident_max(void);
/* Whether the group's mask lets a kernel skip tiles: 1 CAUSAL, 2
 * SLIDING_WINDOW, 3 BLOCK_SPARSE (a keep map), 0 not (KF_MASK_SKIP). */
int cg_attn_mask_skip(const kf_group *g);
/* kf_bs_dense / kf_bs_next / kf_bs_mixed (and kf_bs_kept, KF_BS_WHOLE) for
 * kernel tiles of br x bc: the keep map's functions with skip 3, constants
 * otherwise (templates/attention_common.cuh's callers). */
void cg_attn_emit_block_sparse(cg *c, const kf_group *g, int skip, int64_t br, int64_t bc);
/* kf_bh_offsets(bh, oq, ok, ov): Q's, K's and V's element offsets of the
 * flattened batch x head index bh. */
void cg_attn_emit_bh_offsets(cg *c, const kf_group *g, const cg_attn_op ops[3]);
/* kf_o_offset(bh, q): the element offset of O's row q of batch x head bh;
 * row_len names O's row length where O is the row-major P.V itself. */
void cg_attn_emit_o_offset(cg *c, const kf_group *g, const char *row_len);

#endif /* KF_CODEGEN_CUDA_CG_H */
