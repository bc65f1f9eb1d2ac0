/*
 * recipe_gemm_siblings.c -- the recipe of a GEMM sibling set (the plan's
 * gemm.sib_*, fusion/fuse_gemm_siblings.c: GEMMs that read one A through one
 * norm prologue, adjacent in the plan), unless KF_CUDA_RECIPE_GEMM_NO_SIBLINGS:
 * the set's first member's recipe runs every member, the norm computed once.
 *
 *   generated  stats pre-pass (once) -> per member: fold pre-pass, GEMM kernel
 *   cuBLASLt   prologue kernel, A normalized (once) -> per member: cuBLASLt,
 *              epilogue kernel
 *
 * Each member's steps are the ones its own recipe would have
 * (kf_rb_gemm_generated, kf_rb_gemm_lt), less the pre-pass an earlier member
 * made: the statistics scratch is keyed by the norm's input and the
 * normalized A by the norm, so a later member's kernels bind the same buffers.
 *
 * Its GPU numerics passed on an H200 (42c4969, test_cuda_exec's
 * test_gemm_sibling_sets_match_the_reference: q/k/v with three epilogues,
 * ragged, a member from the prologue's scratch beside folded ones, a
 * LayerNorm set of four; bf16 and f16; generated, cuBLASLt and measured), and
 * it ran LLaMA-7B's Q/K/V (B8 S2048) in 2.220 ms against 2.340 for the three
 * groups alone, measured (bench llama_qkv*,
 * bench/results/NVIDIA-H200-42c4969-gemm-siblings.json). A set's scratch
 * (both sides') lives in its first member's group, so the arena grows (906
 * against 839 MB there). The measured choice is the set's: all members
 * generated, or all on cuBLASLt.
 */
#include <stdio.h>
#include <string.h>

#include "codegen/cuda/recipe_internal.h"

/* ------------------------------------------------------------------------ */
/* GEMM sibling sets                                                          */
/* ------------------------------------------------------------------------ */

/* Drops every step, scratch and buffer mapping of the recipe and leaves it
 * as build_group began it (a sibling set one member refused). */
static void rb_reset(rb *b) {
    kf_cuda_recipe *rc = b->rc;
    for (uint32_t s = 0; s < rc->n_steps; s++) {
        if (rc->steps[s].kernel) {
            kf_cuda_kernel_release(b->mem, &rc->steps[s].kernel->kernel);
            kf_mem_free(b->mem, rc->steps[s].kernel, sizeof *rc->steps[s].kernel);
            rc->steps[s].kernel = NULL;
        }
    }
    rc->n_steps = 0;
    rc->n_scratch = 0;
    rc->choice = KF_CUDA_CHOICE_ONLY;
    rc->n_variants = 1;
    rc->n_members = 1;
    memset(rc->variants, 0, sizeof rc->variants);
    snprintf(rc->variants[0].label, sizeof rc->variants[0].label, "cublaslt");
    b->n_map = 0;
}

/* The set's members' matmuls, "%23, %29, %35". */
static void sib_names(const rb *b, uint32_t lead, uint32_t n, char *buf, size_t size) {
    size_t len = 0;
    buf[0] = 0;
    for (uint32_t j = 0; j < n && len < size; j++) {
        const kf_tensor *mm = b->plan->graph->nodes[b->plan->groups[lead + j].gemm.anchor[0]];
        int w = mm->name ? snprintf(buf + len, size - len, "%s%s", j ? ", " : "", mm->name)
                         : snprintf(buf + len, size - len, "%s%%%u", j ? ", " : "", mm->id);
        len += w > 0 ? (size_t)w : 0;
    }
}

/* Appends ", " (when buf is not empty) and `text` to buf, within size. */
static void append(char *buf, size_t size, const char *sep, const char *text) {
    size_t len = strlen(buf);
    if (len + 1 < size)
        snprintf(buf + len, size - len, "%s%s", len ? sep : "", text);
}

/* A GEMM sibling set (fusion/fuse_gemm_siblings.c) in its first member's
 * recipe, b->gi: the generated variant computes the norm's row statistics
 * once (the first fold member's pre-pass; a later member that reads A from
 * the prologue's scratch finds it written), then each member's fold pre-pass
 * and GEMM; the cuBLASLt variant writes A normalized once (the first member's
 * prologue kernel), then each member's cuBLASLt GEMM and epilogue kernel.
 * Measured against each other as one group's variants are. The members keep
 * their own kernels: the one GEMM over the concatenated columns (one tail of
 * tiles instead of one per member) is not built yet. KF_ERR_UNSUPPORTED,
 * with the recipe as it was, where a member cannot be run so: then every
 * member runs its own recipe. */
kf_status kf_rb_gemm_siblings(rb *b) {
    const kf_plan *plan = b->plan;
    uint32_t lead = b->gi, n = plan->groups[lead].gemm.sib_count;
    kf_cuda_recipe *rc = b->rc;
    /* A later member skips the prologue: it must write nothing of the rows. */
    for (uint32_t j = 1; j < n; j++) {
        const kf_group *m = &plan->groups[lead + j];
        for (uint32_t w = 0; w < m->n_writes; w++)
            if (m->roots[w] != KF_NONE && m->expr[m->roots[w]].space == KF_SPACE_ROW)
                return KF_ERR_UNSUPPORTED;
    }
    char names[96];
    sib_names(b, lead, n, names, sizeof names);
    unsigned want =
        b->target->flags & (KF_CUDA_RECIPE_GEMM_GENERATED | KF_CUDA_RECIPE_GEMM_MEASURED);
    uint32_t vi = 0;
    kf_status st = KF_OK;
    char gen_why[300] = "";
    if (want) {
        char why[300], name[KF_CUDA_NAME_MAX], kernels[200] = "", first_why[300] = "";
        for (uint32_t j = 0; j < n && st == KF_OK; j++) {
            b->gi = lead + j;
            b->sib_shared = j > 0;
            st = kf_rb_gemm_generated(b, why, sizeof why, name, sizeof name);
            if (st == KF_OK) {
                append(kernels, sizeof kernels, ", ", name);
                if (j == 0)
                    snprintf(first_why, sizeof first_why, "%s", why);
            } else if (st == KF_ERR_UNSUPPORTED) {
                snprintf(gen_why, sizeof gen_why, "member %u: %.240s", j + 1, why);
            }
        }
        b->gi = lead;
        b->sib_shared = false;
        if (st != KF_OK) {
            rb_reset(b);
            if (st != KF_ERR_UNSUPPORTED)
                return st;
            st = KF_OK;
        } else {
            snprintf(rc->variants[0].label, sizeof rc->variants[0].label, "generated");
            kf_rb_how(b, 0,
                      "GEMM siblings %s, the norm's row statistics once: generated kernels %s "
                      "(first: %s)",
                      names, kernels, first_why);
            if (want & KF_CUDA_RECIPE_GEMM_GENERATED) {
                rc->n_members = n;
                return KF_OK;
            }
            vi = kf_rb_open_lt_variant(b);
            gen_why[0] = 0;
        }
    }
    char hows[sizeof rc->variants[0].how];
    snprintf(hows, sizeof hows, "GEMM siblings %s, A normalized once: ", names);
    size_t head = strlen(hows);
    for (uint32_t j = 0; j < n && st == KF_OK; j++) {
        b->gi = lead + j;
        b->sib_shared = j > 0;
        st = kf_rb_gemm_lt(b, vi, j == 0 ? gen_why : "");
        if (st == KF_OK) {
            size_t len = strlen(hows);
            snprintf(hows + len, sizeof hows - len, "%s%s", len > head ? "; " : "",
                     rc->variants[vi].how);
        }
    }
    b->gi = lead;
    b->sib_shared = false;
    if (st == KF_ERR_UNSUPPORTED)
        rb_reset(b);
    if (st != KF_OK)
        return st;
    kf_rb_how(b, vi, "%s", hows);
    rc->n_members = n;
    return KF_OK;
}
