/*
 * recipe_gemm_simt.c -- the generated side of an f32 / f64 GEMM group: the
 * SIMT kernel (cg_gemm_simt.c), with the steps around it a group needs:
 *
 *   norm prologue  the prologue kernel writes A normalized to scratch, a step
 *                  before (as on the cuBLASLt side); the kernel reads that;
 *   row epilogue   in the tile where it is f32 and its rows are whole in one
 *                  column tile (N <= 256), the rows' statistics reduced by
 *                  shuffles; else the split row form (recipe_gemm_split.c):
 *                  the kernel writes the norm's input, a row pass follows;
 *   SwiGLU pair    one kernel, both B operands (128 x (2 x 64) tiles).
 *
 * kf_rb_gemm_generated dispatches here after it has checked the group and
 * read the operands' majors, strides and batching; the measured choice
 * against cuBLASLt (kf_rb_gemm) is unchanged. The kernel's GPU numerics
 * passed on an H100 (51ed6f7) forced and in that measured choice:
 * test_cuda_exec_simt (every shape class and group kind above, f32 and
 * f64), every example with --check in the generated, sm80 and default
 * modes, compute-sanitizer memcheck and racecheck on a ragged f32 GEMM.
 * There cuBLASLt wins f32 4096^3 (2.66 ms against 3.59) and the SIMT kernel
 * 21 of the examples' 28 f32 / f64 groups (bench/results, 51ed6f7b5be4).
 */
#include <stdio.h>
#include <string.h>

#include "codegen/cuda/recipe_internal.h"

/* Whether an operand can take 16-byte copies: its stored rows and batch
 * stride whole 16-byte multiples, its address 16-byte aligned. */
static bool vec_ok(int64_t ld, int64_t batch_stride, int64_t offset, size_t es) {
    return (ld * (int64_t)es) % 16 == 0 && (batch_stride * (int64_t)es) % 16 == 0 &&
           offset % 16 == 0;
}

kf_status kf_rb_gemm_simt(rb *b, kf_cuda_gemm_shape *sh, kf_cuda_buf a, kf_cuda_buf bm,
                          kf_cuda_buf b1, char *why, size_t why_size, char *name,
                          size_t name_size) {
    const kf_plan *plan = b->plan;
    const kf_group *grp = &plan->groups[b->gi];
    const kf_gemm_info *gm = &grp->gemm;
    size_t es = kf_dtype_size(plan->graph->nodes[gm->anchor[0]]->dtype);
    if (sh->batch > 65535) {
        snprintf(why, why_size, "a batch past 65535 (grid z)");
        return KF_ERR_UNSUPPORTED;
    }
    if (sh->m > INT32_MAX || sh->n > INT32_MAX || sh->k > INT32_MAX) {
        snprintf(why, why_size, "a dim past 2^31");
        return KF_ERR_UNSUPPORTED;
    }
    /* Tiles: 128 x 128 (f32; f64 128 x 64, twice the registers an element)
     * where they give every SM one, else 64 x 64; a pair 128 x (2 x 64). A
     * row epilogue in the tile: the row's columns in one tile, 64, 128 or
     * 256 wide (then 64 rows, 32 where 64 would leave SMs idle: the
     * accumulators of 64 x 256 take as many registers as 128 x 128's). */
    uint32_t big_n = es == 8 ? 64u : 128u;
    int64_t tiles_big = ((sh->m + 127) / 128) * ((sh->n + big_n - 1) / big_n) * sh->batch;
    bool row_tile = gm->row_epilogue && !gm->row_split && es == 4 && !sh->dual && sh->n <= 256 &&
                    !(b->target->flags & KF_CUDA_RECIPE_GEMM_SIMT_ROW_SPLIT);
    if (row_tile) {
        sh->bn = sh->n <= 64 ? 64u : sh->n <= 128 ? 128u : 256u;
        uint32_t tall = sh->bn == 256 ? 64u : 128u;
        sh->bm = ((sh->m + tall - 1) / tall) * sh->batch >= b->target->sm_count ? tall : tall / 2;
    } else if (sh->dual) {
        sh->bm = 128;
        sh->bn = 64;
    } else if (tiles_big >= b->target->sm_count) {
        sh->bm = 128;
        sh->bn = big_n;
    } else {
        sh->bm = sh->bn = 64;
    }
    sh->stages = 3;
    /* the prologue's scratch is contiguous and 256-byte aligned */
    sh->a_vec = vec_ok(sh->lda, sh->sa, sh->a_scratch ? 0 : a.offset, es);
    sh->b_vec = !sh->b_kmajor && vec_ok(sh->ldb, sh->sb, bm.offset, es) &&
                (!sh->dual || vec_ok(sh->ldb2, sh->sb2, b1.offset, es));

    /* The split row form (a row epilogue): the kernel computes the copy
     * without the row stage, a row pass follows. */
    kf_rb_split sc;
    memset(&sc, 0, sizeof sc);
    const kf_plan *gplan = plan;
    bool split = gm->row_split || (gm->row_epilogue && !row_tile);
    if (split) {
        kf_status sst = KF_OK;
        const char *sw = kf_rb_split_make(b, &sc, &sst);
        if (sst != KF_OK)
            return sst;
        if (sw) {
            snprintf(why, why_size, "the split row form: %s", sw);
            return KF_ERR_UNSUPPORTED;
        }
        gplan = &sc.gplan;
        sh->x_scratch = !sc.x_written;
        sh->x_tensor = sc.x_tensor;
    }
    kf_cuda_kernel k;
    memset(&k, 0, sizeof k);
    kf_status st = kf_cuda_codegen_gemm_simt(gplan, b->gi, b->target->arch, sh, b->mem, &k);
    if (st != KF_OK) {
        if (st == KF_ERR_UNSUPPORTED)
            snprintf(why, why_size, "%.190s", k.error);
        else
            kf_msg_set(b->err, st, "group %u (%s): %s", b->gi, grp->name,
                       k.error[0] ? k.error : kf_status_str(st));
        kf_cuda_kernel_release(b->mem, &k);
        kf_rb_split_free(b->mem, &sc);
        return st;
    }
    uint32_t n_ptrs = sh->dual ? 3u : 2u; /* A, B (and the pair's second B) */
    if (k.n_params + n_ptrs > KF_CUDA_MAX_PARAMS) {
        kf_cuda_kernel_release(b->mem, &k);
        kf_rb_split_free(b->mem, &sc);
        snprintf(why, why_size, "more than %d kernel arguments", KF_CUDA_MAX_PARAMS);
        return KF_ERR_UNSUPPORTED;
    }
    snprintf(name, name_size, "%s", k.name);
    if (sh->a_scratch && (st = kf_rb_scratch_a_step(b, &k, &a)) != KF_OK) {
        kf_rb_split_free(b->mem, &sc);
        return st;
    }
    kf_cuda_kstep *ks = NULL;
    if ((st = kf_rb_add_made_kernel(b, &k, KF_CUDA_ROLE_GEMM, &ks)) != KF_OK) {
        kf_rb_split_free(b->mem, &sc);
        return st;
    }
    /* one block per tile, the batch in z */
    ks->grid[0] = (uint32_t)ks->kernel.launch.work_items; /* (k was moved into the step) */
    ks->grid[1] = 1;
    ks->grid[2] = (uint32_t)sh->batch;
    memmove(&ks->args[n_ptrs], &ks->args[0], ks->n_args * sizeof ks->args[0]);
    ks->n_args += n_ptrs;
    memset(&ks->args[0], 0, n_ptrs * sizeof ks->args[0]);
    for (uint32_t i = 0; i < n_ptrs; i++)
        ks->args[i].kind = KF_CUDA_ARG_PTR;
    ks->args[0].buf = a;
    ks->args[1].buf = bm;
    if (sh->dual)
        ks->args[2].buf = b1;
    char tile[48];
    if (sh->dual)
        snprintf(tile, sizeof tile, "pair %ux(2x%u)", sh->bm, sh->bn);
    else
        snprintf(tile, sizeof tile, "%ux%u", sh->bm, sh->bn);
    snprintf(
        why, why_size,
        "simt (%s) %sx%u tiles on 256 threads, %u stages (cp.async), A %s-major, B %s-major%s%s",
        es == 8 ? "DFMA" : "FFMA", tile, kf_cuda_gemm_simt_bk(sh->bm, sh->bn, es), sh->stages,
        sh->a_kmajor ? "K" : "M", sh->b_kmajor ? "K" : "N",
        sh->batch > 1 ? ", batched in one launch (grid z)" : "",
        sh->a_scratch ? ", A from the prologue kernel's scratch"
        : row_tile    ? ", row epilogue in the tile (the rows' statistics reduced by shuffles)"
                      : "");
    if (split) { /* the row pass's name goes at the end of why */
        st = kf_rb_split_row_pass(b, &sc, why, why_size);
        kf_rb_split_free(b->mem, &sc);
        return st;
    }
    return KF_OK;
}
