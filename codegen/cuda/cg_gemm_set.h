/*
 * cg_gemm_set.h -- what the two generators of a GEMM sibling set's ONE
 * kernel share (cg_gemm_set.c; used by cg_gemm_sm90_set.c and
 * cg_gemm_sm80_set.c): the members' generators side by side, each member's
 * epilogue (and fold) emitted into the set's source in its own namespace
 * kf_s<j>, the set's tile columns as one N range with kf_sib_split mapping
 * a set tile column to its member, and the dispatch macros (KF_SIB_AL,
 * KF_SIB_DO) the templates call. Each arch's file keeps what is its own:
 * the shape checks, the problem defines, the template's parts and the
 * operands' maps or pointers. Also what the single sm_80 and SIMT kernels'
 * generators prepare alike (cg_gemm_epi_alloc).
 */
#ifndef KF_CODEGEN_CUDA_CG_GEMM_SET_H
#define KF_CODEGEN_CUDA_CG_GEMM_SET_H

#include "codegen/cuda/cg_gemm.h"

/* What the set's generator holds per member. */
typedef struct cg_set_member {
    cg c;
    kf_cuda_kernel tmp; /* cg_begin's own kernel (the set's is members[0]'s) */
    bool begun;
    chunk_ctx x;
    cg_gemm_epi epi;
    cg_gemm_fold fold;
    bool epi_ready;
} cg_set_member;

/* A set's generator: n members, mb[0]'s the set's kernel and text. */
typedef struct cg_set {
    cg_set_member *mb;
    uint32_t n;
    const kf_mem *mem;
    int tab;                     /* the member whose gelu table the kernel holds, or -1 */
    int64_t t0[KF_CUDA_SIB_MAX]; /* each member's first set tile column */
    int64_t tiles_n, n_all;      /* the set's tile columns and columns */
} cg_set;

/* Checks the arguments (`fn` names the caller in the message) and begins a
 * generator per member, each member's params and first error going to
 * `out`. On failure the set is already ended (s->mb NULL) and the status
 * returned; else the caller ends it with cg_set_end. */
kf_status cg_set_begin(cg_set *s, const kf_plan *plan, const uint32_t *groups, uint32_t n,
                       const char *arch, const kf_mem *mem, kf_cuda_kernel *out, const char *fn);

/* Ends every member's generator (their text is in the set's) and member
 * 0's with st; frees the set; returns the set's status. */
kf_status cg_set_end(cg_set *s, kf_status st);

/* The checks every arch's set makes of member j after its own: a head view
 * unlike member 0's, another dtype, a second gelu table (the kernel holds
 * one: s->tab names the member whose), N out of range. NULL when it fits. */
const char *cg_set_member_why(cg_set *s, uint32_t j, const kf_cuda_gemm_shape *sj);

/* An arch's own checks of member j (its generator c, its shape sj) against
 * member 0's shape s0: why it cannot share the set's kernel, or NULL. */
typedef const char *(*cg_set_why_fn)(cg *c, const kf_cuda_gemm_shape *s0,
                                     const kf_cuda_gemm_shape *sj);

/* Every member in order, the preamble both arch's set generators share:
 * that it is a GEMM group, then `why` (the arch's checks), then
 * cg_set_member_why, then cg_set_member_prepare with tile width
 * shapes[0].bn. A member that fails a check makes the set's error
 * (KF_ERR_UNSUPPORTED on member 0's generator, naming the member and why)
 * and its status is returned, as is a prepare's; KF_OK when all fit. */
kf_status cg_set_members_check(cg_set *s, const kf_cuda_gemm_shape *shapes, cg_set_why_fn why);

/* Member j's set tile columns (tile width `tw`) after the earlier members',
 * its fold's and epilogue's params (cg_gemm_fold_prepare,
 * cg_gemm_epi_prepare). */
kf_status cg_set_member_prepare(cg_set *s, uint32_t j, const kf_cuda_gemm_shape *sj, uint32_t tw);

/* The source's head (cg_emit_head with `what`), with a later member's gelu
 * table in place of member 0's none. */
void cg_set_emit_head(cg_set *s, const char *what);

/* Each member in its namespace kf_s<j> with KF_N its own N: its fold, its
 * kf_epi and the template's member part (`part`, `len` bytes). */
void cg_set_emit_members(cg_set *s, const kf_cuda_gemm_shape *shapes, const char *part, size_t len);

/* KF_N the members' columns, and kf_sib_split (a set tile column: its
 * member, and the member's own column). */
void cg_set_emit_split(cg_set *s);

/* KF_SIB_AL (every member's kf_epi_al) and KF_SIB_DO(j, call) (call in
 * member j's namespace). */
void cg_set_emit_dispatch(cg_set *s);

/* Template t split at its n_marks markers (in order): part[0] up to the
 * first, part[i] from marker i - 1 up to marker i, part[n_marks] the rest;
 * len[] their lengths. False when a marker is missing. */
bool cg_set_split_template(const char *t, uint32_t n_marks, const char *const *marks,
                           const char **part, size_t *len);

/* Appends n bytes of p (not NUL-terminated) to s. */
void cg_set_put(sbuf *s, const char *p, size_t n);

/* What a single GEMM kernel's generator (cg_gemm_sm80.c, cg_gemm_simt.c)
 * prepares before its source: the chunk context *x (allocated in c->mem;
 * the caller frees it after the source), with sh->a_fold and a `fold` the
 * fold's params (cg_gemm_fold_prepare), then the epilogue's
 * (cg_gemm_epi_prepare). On failure *x is NULL, nothing is left allocated,
 * and the status (c's first error) is returned. */
kf_status cg_gemm_epi_alloc(cg *c, const kf_cuda_gemm_shape *sh, cg_gemm_fold *fold, chunk_ctx **x,
                            cg_gemm_epi *epi);

/* cg_gemm_sm80.c, shared with a sibling set's sm_80 kernel
 * (cg_gemm_sm80_set.c): why the mma.sync kernel cannot take group c->g
 * with shape sh (its operands, norm form, row stage, dtype, output space),
 * or NULL. The tile and size checks are each generator's own. */
const char *cg_gemm_sm80_why(const cg *c, const kf_cuda_gemm_shape *sh);

#endif /* KF_CODEGEN_CUDA_CG_GEMM_SET_H */
