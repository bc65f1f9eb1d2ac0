/*
 * cg_gemm.h -- internals the generated GEMM kernels share (cg_gemm_epi.c):
 * the epilogue on the accumulators (with a row epilogue, kf_pre: the norm's
 * input for the row statistics the template reduces), prepared before the
 * source's head (it adds the params) and emitted after the template's own
 * helpers.
 */
#ifndef KF_CODEGEN_CUDA_CG_GEMM_H
#define KF_CODEGEN_CUDA_CG_GEMM_H

#include "codegen/cuda/cg.h"

/* One write of a GEMM group's kernel. */
typedef struct gout {
    uint32_t node; /* KF_NONE: the bare product */
    bool bare1;    /* the bare product of anchor 1 (dual) */
    int param;
    kf_dtype dtype;
    uint32_t tensor;
} gout;

/* The epilogue between prepare and emit. */
typedef struct cg_gemm_epi {
    gout outs[MAX_OUTS];
    uint32_t n_outs;
    sbuf vl;             /* the vector loads at the top of kf_epi */
    sbuf pf;             /* kf_epi_pf's L2 prefetches of the row operands (epi_pf) */
    char al_conds[1024]; /* " && kf_aligned(pN, 16)" for each base AL assumes */
    /* The row epilogue in the tile (gemm.row_epilogue, not split): kf_pre
     * computes the norm's input (row.input) for the statistics, kf_epi the
     * writes with the row's statistics (rst). */
    bool row;
    bool row_inplace;  /* kf_epi's acc is x (the template keeps kf_pre's x
                          in place of the accumulators), its writes reading none besides */
    char ov_x[OV_MAX]; /* x's own override (kf_pre's) */
    unsigned stats;    /* 1u << KF_STAT_* the statistics read */
    sbuf vl_pre;       /* kf_pre's vector loads */
    bool *need_pre;    /* the nodes kf_pre computes (c->n of them) */
    bool *need_epi;    /* kf_epi's */
    uint32_t rs_node;  /* shape.epi_rs / row_rs: the residual's LOAD (kf_cuda_gemm_rs_node) */
    sbuf rsrc;         /* shape.row_rs: kf_row_rs_src, where the residual's copies read */
    /* shape.epi_cs: the column operands (a bias) staged in shared memory, a
     * slot of the tile's columns each, which kf_epi reads at csm */
    sbuf cs;        /* kf_epi_cs_fetch's copies, a line a slot */
    uint32_t n_cs;  /* slots */
} cg_gemm_epi;

/* cg_begin for a GEMM kernel generator `fn`: KF_ERR_INVALID_ARGUMENT (in c's
 * error) unless the group is a GEMM group and sh is given. The caller ends
 * c with the status either way (cg_end). */
kf_status cg_gemm_begin(cg *c, const kf_plan *plan, uint32_t group, const char *arch,
                        const kf_cuda_gemm_shape *sh, const kf_mem *mem, kf_cuda_kernel *out,
                        const char *fn);
/* Coordinates in space `sp` (rank dims) of element (`row`, `col` + k) of a
 * contiguous [rows, dims[rank - 1]] matrix: the outer dims from the row
 * variable, the last from the column expression; vrank[sp] = rank. `narrow`:
 * the row variable is a 32-bit unsigned (unsigned constants), else 64-bit. */
void cg_gemm_coords(chunk_ctx *x, kf_space sp, int rank, const int64_t *dims, const char *row,
                    const char *col, bool narrow);

/* The output-space coordinates of element (q, c0 + k), q = b * M + r the row
 * of the contiguous [batch * M, N] output; `narrow` (batch * M < 2^32): from
 * their 32-bit copies qn and cn, in unsigned arithmetic. */
void cg_gemm_epi_coords(chunk_ctx *x, const kf_group *g, bool narrow);

/* Overrides the ACC nodes, collects and checks the writes (each the whole
 * output, every node of theirs an accumulator expression in the output
 * space), adds the load and OUT params, and prepares the loads at x's
 * coordinates (cg_gemm_epi_coords). KF_ERR_UNSUPPORTED (through cg_fail)
 * when the group's epilogue is outside what the kernels take. */
kf_status cg_gemm_epi_prepare(cg *c, const kf_cuda_gemm_shape *sh, chunk_ctx *x, cg_gemm_epi *ep);

/* What both kernels take: bf16 or f16 operands, and a group whose output
 * space is the product's [batch, M, N] (last dim N, as many elements). */
bool cg_gemm_dtype_ok(kf_dtype d);
bool cg_gemm_space_is_product(const kf_group *g, const kf_cuda_gemm_shape *sh);

/* The branch-free sigmoid family (#defined over common.cuh's) and, with a
 * gelu table, kf_gelu_bf16_v; after the head, before any expression. */
void cg_gemm_emit_fast_ops(cg *c);

/* Frees what prepare allocated, for a generator that fails between
 * prepare and emit. */
void cg_gemm_epi_release(cg *c, cg_gemm_epi *ep);

/* kf_epi<VV, AL>, kf_epi_al and templates/gemm_common.cuh (with a row
 * epilogue first KF_ROW_EPI, the statistics' defines, kf_gm_rst and
 * kf_pre<VV, AL>); frees ep's buffers. */
void cg_gemm_epi_emit(cg *c, const kf_cuda_gemm_shape *sh, chunk_ctx *x, cg_gemm_epi *ep);

/* The GEMM kernel's side of a norm prologue folded into B (cg_gemm_fold.c):
 * the params its kf_fold reads (the row statistics, keyed by the norm's
 * input as the pre-pass writes them; a LayerNorm's c, d per anchor). */
typedef struct cg_gemm_fold {
    kf_cuda_gemm_fold f;
    int stats, cd[2];
    unsigned n_stats, i_rstd, i_mean; /* statistics a row, and where rstd / mean sit */
    int gamma; /* shape.a_gscale with a gamma: its param (KF_A_GSCALE, kf_gm_gamma_src), else -1 */
} cg_gemm_fold;

/* Whether node i of a norm prologue's expression is a float load that
 * depends on k alone (every stride over the row dims but the last zero: a
 * gamma or beta), and its stride along k (0 when K is 1). */
bool cg_gemm_column_load(const kf_plan *plan, const kf_group *g, uint32_t i);
int64_t cg_gemm_column_stride(const kf_group *g, uint32_t i);

/* Why the norm's input cannot be the kernel's A as it is (a loaded tensor of
 * the product's dtype, contiguous [M, K], batch 1, K-major: what TMA reads
 * for both the ring's normalization and the fold), or NULL. */
const char *cg_gemm_norm_input_why(const cg *c, const kf_cuda_gemm_shape *sh);

/* Adds the params (before the source's head); KF_ERR_UNSUPPORTED (through
 * cg_fail) when the fold does not take the group or this A. */
kf_status cg_gemm_fold_prepare(cg *c, const kf_cuda_gemm_shape *sh, cg_gemm_fold *fp);

/* KF_A_FOLD, kf_fold_rows (a row's statistics), kf_fold_cols (a column
 * group's terms) and kf_fold (the 8 accumulators), after KF_N is defined. */
void cg_gemm_fold_emit(cg *c, const cg_gemm_fold *fp);

/* cg_gemm_sm90.c, shared with a sibling set's kernel (cg_gemm_sm90_set.c):
 * why the sm_90a kernel cannot take group c->g with shape sh, or NULL; and
 * kf_wgmma, the m64nBNk16 instruction of the shape's tile. */
const char *cg_gemm_sm90_why(const cg *c, const kf_cuda_gemm_shape *sh);
void cg_gemm_sm90_emit_wgmma(cg *c, const kf_cuda_gemm_shape *sh, kf_dtype dt);

#endif /* KF_CODEGEN_CUDA_CG_GEMM_H */
