/*
 * recipe_internal.h -- what the recipe builders share (codegen/cuda/recipe*.c).
 *
 *   recipe.c       targets, the recipe set, steps, the generic groups
 *                  (elementwise, row-wise, column reduction, layout, view)
 *   recipe_gemm.c  GEMM groups (what cuBLASLt applies natively, the kernels
 *                  around it) and the unfused attention fallback
 *   recipe_gemm_siblings.c  a GEMM sibling set in its first member's recipe
 *   recipe_gemm_simt.c      the SIMT kernel of an f32 / f64 GEMM group
 *   recipe_gemm_decode.c    the decode kernel of a GEMM group with M <= 64
 *   recipe_gemm_split.c     the split row form's plan copies and row pass
 *   recipe_attention_decode.c  the split-KV decode steps of an attention group
 *   recipe_print.c text and JSON
 *
 * A builder works on one group: `rb` maps the buffers its kernels name by
 * (role, tensor) -- a GEMM's ACC, the attention's SCORES, a prologue's
 * SCRATCH -- onto the recipe's scratch buffers or onto a tensor's buffer when
 * cuBLASLt writes the value straight into a graph tensor.
 */
#ifndef KF_CODEGEN_CUDA_RECIPE_INTERNAL_H
#define KF_CODEGEN_CUDA_RECIPE_INTERNAL_H

#include "codegen/cuda/cuda_recipe.h"

typedef struct rb_entry {
    kf_cuda_param_kind role;
    uint32_t tensor;
    kf_cuda_buf buf;
} rb_entry;

typedef struct rb {
    const kf_plan *plan;
    const kf_cuda_target *target;
    const kf_mem *mem;
    kf_cuda_recipe *rc;
    uint32_t gi;
    kf_cuda_recipe *all; /* every group's recipe (those before gi are made) */
    bool sib_shared;     /* building a GEMM sibling set's later member: the norm's statistics
                            or normalized A an earlier member's step made are reused */
    kf_cuda_gemm_shape *sib_shape; /* set: kf_rb_gemm_generated leaves its sm_90a or sm_80
                                      kernel's shape here (a sibling set's one kernel takes
                                      them) */
    rb_entry map[KF_CUDA_MAX_SCRATCH];
    int n_map;
    char *err;
    char dec_why[200]; /* why the decode kernel did not take the group ("": asked for
                          and taken, or not asked for), for the generated side's `how` */
    /* The folds of the pre-pass in one launch (the default; PREPASS_APART keeps them apart): each
       job's B tensor and the view the GEMM reads it through, the step that runs them
       (index + 1; 0 none yet), whether it computes the row statistics too, and
       pre_off once the one kernel refused (the pre-passes then stay apart). */
    kf_cuda_fold_job pre_jobs[KF_CUDA_PREPASS_JOBS];
    uint32_t pre_b[KF_CUDA_PREPASS_JOBS];
    kf_cuda_buf pre_view[KF_CUDA_PREPASS_JOBS];
    uint32_t n_pre_jobs;
    uint32_t pre_step;
    bool pre_stats, pre_off;
} rb;

/* The buffer of tensor t (its base's), at byte offset 0. */
kf_cuda_buf kf_rb_tensor(const rb *b, uint32_t t);
/* The buffer mapped to (role, tensor), or kind NONE. */
kf_cuda_buf kf_rb_find(const rb *b, kf_cuda_param_kind role, uint32_t tensor);
/* Maps (role, tensor) onto `buf`. */
kf_status kf_rb_set(rb *b, kf_cuda_param_kind role, uint32_t tensor, kf_cuda_buf buf);
/* The buffer of (role, tensor): found, or a new scratch of `bytes` (a found
 * scratch grows to `bytes`). */
kf_status kf_rb_get(rb *b, kf_cuda_param_kind role, uint32_t tensor, uint64_t bytes,
                    kf_cuda_buf *out);

/* Generates the kernel of `role` for group b->gi from `plan` (the plan itself,
 * or a rewritten copy of it) and appends it as a KERNEL step. The kernel's
 * name and template go to name_out / tmpl_out (may be NULL). KF_ERR_NOT_FOUND
 * from the generator ("no kernel needed") is returned untouched with no step
 * and no message. */
kf_status kf_rb_add_kernel(rb *b, const kf_plan *plan, kf_cuda_role role, char *name_out,
                           size_t name_size, kf_cuda_template *tmpl_out);

/* Appends a kernel already generated (moved into the step: `k` is left
 * zeroed, or released on failure) as a KERNEL step of the current variant,
 * its params resolved as kf_rb_add_kernel does; the step's kstep goes to *out. */
kf_status kf_rb_add_made_kernel(rb *b, kf_cuda_kernel *k, kf_cuda_role role, kf_cuda_kstep **out);

/* Sets variant v's `how` line. */
void kf_rb_how(rb *b, uint32_t v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* recipe_gemm.c: the steps of a GEMM / ATTENTION group (variant 0). */
kf_status kf_rb_gemm(rb *b);
/* recipe_gemm.c, the two sides of a GEMM group (b->gi), for kf_rb_gemm and a
 * sibling set's recipe: the generated kernel's steps into variant 0
 * (KF_ERR_UNSUPPORTED, with why[] and no step, where it does not take the
 * group), and cuBLASLt's steps into variant vi (gen_why: "" or why no
 * generated kernel, for the variant's `how`). With b->sib_shared, the norm's
 * statistics or normalized A that an earlier step of the recipe wrote are not
 * computed again. */
kf_status kf_rb_gemm_generated(rb *b, char *why, size_t why_size, char *name, size_t name_size);
kf_status kf_rb_gemm_lt(rb *b, uint32_t vi, const char *gen_why);
/* Variant 0 (the generated side, its steps all in) becomes the first of a
 * measured pair: variant 1, cuBLASLt's, opens after its steps. Returns 1. */
uint32_t kf_rb_open_lt_variant(rb *b);
/* recipe_gemm_split.c: the split row form's two rewritten copies of the
 * plan (the GEMM's without the row stage, the row pass's with X as its
 * accumulator), and the row pass after the generated GEMM. */
typedef struct kf_rb_split {
    kf_plan gplan, rplan;
    kf_group *groups[2];
    kf_expr *rexpr;
    uint32_t *arr[4]; /* gemm writes, roots; row writes, roots */
    uint32_t n_groups, n_expr, cap;
    uint32_t x, x_tensor; /* X's node and tensor */
    bool x_written;       /* the plan materializes X */
} kf_rb_split;
/* Builds both copies of group b->gi's plan; NULL, or why the form cannot
 * take the group (then nothing is allocated). KF_ERR_OUT_OF_MEMORY goes to
 * *st. */
const char *kf_rb_split_make(rb *b, kf_rb_split *sc, kf_status *st);
/* Frees the copies (a zeroed sc too). */
void kf_rb_split_free(const kf_mem *mem, kf_rb_split *sc);
/* The row pass, a step after the GEMM's: X (the GEMM's write, or its
 * scratch) is the row kernel's accumulator, keyed by X's tensor; its name
 * goes at the end of `why`. */
kf_status kf_rb_split_row_pass(rb *b, const kf_rb_split *sc, char *why, size_t why_size);
/* recipe_gemm_siblings.c: the steps of the GEMM sibling set whose first
 * member is b->gi (every member's), or KF_ERR_UNSUPPORTED with the recipe
 * untouched where the set cannot run so. */
kf_status kf_rb_gemm_siblings(rb *b);
kf_status kf_rb_attention(rb *b);

/* recipe_gemm.c: */
/* The prologue kernel writing A normalized to scratch, a step before the
 * GEMM's `gemm` (released on failure); *abuf: that scratch. */
kf_status kf_rb_scratch_a_step(rb *b, kf_cuda_kernel *gemm, kf_cuda_buf *abuf);
/* recipe_gemm_simt.c: the SIMT kernel's steps of an f32 / f64 GEMM group
 * (kf_rb_gemm_generated's sizes, majors, strides and batching in sh; the
 * operands' buffers at their offsets; b1: the pair's second B), or
 * KF_ERR_UNSUPPORTED with why[] and no step. */
kf_status kf_rb_gemm_simt(rb *b, kf_cuda_gemm_shape *sh, kf_cuda_buf a, kf_cuda_buf bm,
                          kf_cuda_buf b1, char *why, size_t why_size, char *name, size_t name_size);
/* recipe_gemm_decode.c: whether the decode kernel is asked for a GEMM group
 * of shape sh (KF_CUDA_RECIPE_GEMM_DECODE, M <= 64, sm_80 or later), and its
 * steps (kf_rb_gemm_generated's sizes, majors and strides in sh, a_scratch
 * when the prologue kernel writes A; the operands' buffers at their
 * offsets), or KF_ERR_UNSUPPORTED with why[] and no step. */
bool kf_rb_gemm_wants_decode(const rb *b, const kf_cuda_gemm_shape *sh);
kf_status kf_rb_gemm_decode(rb *b, kf_cuda_gemm_shape *sh, kf_cuda_buf a, kf_cuda_buf bm, char *why,
                            size_t why_size, char *name, size_t name_size);
/* recipe_attention.c: the fused attention kernels' step of group b->gi where
 * one takes it (*fused true, or a status), else *fused false and `why` says
 * why none does (recipe_gemm.c then makes the unfused steps). */
kf_status kf_rb_attention_fused(rb *b, char *why, size_t why_size, bool *fused);

/* recipe_attention_decode.c: whether group b->gi (one the fused kernels take)
 * runs the split-KV decode kernels (KF_CUDA_RECIPE_ATTENTION_DECODE, or a
 * short query where ATTENTION_FA2 is not asked for), and their two steps. */
bool kf_rb_attention_wants_decode(const rb *b);
kf_status kf_rb_attention_decode(rb *b);

#endif /* KF_CODEGEN_CUDA_RECIPE_INTERNAL_H */
