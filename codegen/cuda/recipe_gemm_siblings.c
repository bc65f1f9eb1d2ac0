/*
 * recipe_gemm_siblings.c -- the recipe of a GEMM sibling set (the plan's
 * gemm.sib_*, fusion/fuse_gemm_siblings.c: GEMMs that read one A through one
 * norm prologue, adjacent in the plan), unless KF_CUDA_RECIPE_GEMM_NO_SIBLINGS:
 * the set's first member's recipe runs every member, the norm computed once.
 *
 *   generated  stats pre-pass (once) -> per member: fold pre-pass -> ONE GEMM
 *              kernel over the members' concatenated columns (sm_90a,
 *              kf_cuda_codegen_gemm_sm90_set; sm_80 with
 *              KF_CUDA_RECIPE_GEMM_SIB_ONE, kf_cuda_codegen_gemm_sm80_set),
 *              or per member a GEMM kernel where the one kernel does not
 *              take the set (the how says why; the SIMT kernels;
 *              KF_CUDA_RECIPE_GEMM_SIB_APART)
 *   cuBLASLt   prologue kernel, A normalized (once) -> per member: cuBLASLt,
 *              epilogue kernel
 *
 * The one kernel: each member's GEMM is made as it would run alone (its
 * shape and tensor maps), then the set's kernel replaces them, its maps the
 * members' (A, each B, each output). Its GPU numerics passed on an H100
 * (68b2dad: test_cuda_exec's *sibling* suites, the examples with --gemm
 * generated, compute-sanitizer memcheck and racecheck); there it won the
 * measured choice on LLaMA-7B's Q/K/V (1.959 ms against cuBLASLt's 1.982,
 * the members apart 2.010) and their GQA form (1.037 against 1.045), and
 * lost GPT-2-medium's (0.213 against 0.177;
 * bench/results/NVIDIA-H100-68b2dad-gemm-siblings-one.json).
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
#include <inttypes.h>
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
    b->n_pre_jobs = b->pre_step = 0;
    b->pre_stats = b->pre_off = false;
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

/* Whether a set's generated side is its one kernel over the concatenated
 * columns without KF_CUDA_RECIPE_GEMM_SIB_ONE (SIB_APART keeps the members'
 * own kernels). On since its GPU numerics passed on an H100 (68b2dad with
 * this on: test_cuda_exec's sibling suites, 44/44 examples --check with
 * --gemm generated, compute-sanitizer memcheck and racecheck). */
#define SIB_ONE_DEFAULT 1
/* The same for the sm_80 (mma.sync) members' one kernel
 * (kf_cuda_codegen_gemm_sm80_set). On since its GPU numerics passed on an
 * H100 (forced sm_80): at c1ffad3 (with it on) its small set case, also
 * under compute-sanitizer memcheck and racecheck, and every example with
 * --gemm sm80 --check (35/35, two of them sets); at 7ea15a9
 * test_gemm_sibling_sets_as_one_sm80_kernel_match_the_reference (the
 * 128 x 128 tiles, ragged 4096 / 1024 / 1024 members). */
#define SIB_ONE_SM80_DEFAULT 1

/* The index of the recipe's last step made by the GEMM kernel's generator
 * (the member's GEMM, after its pre-passes), or n_steps. */
static uint32_t last_gemm_step(const kf_cuda_recipe *rc) {
    for (uint32_t s = rc->n_steps; s-- > 0;)
        if (rc->steps[s].kind == KF_CUDA_STEP_KERNEL && rc->steps[s].kernel &&
            rc->steps[s].kernel->role == KF_CUDA_ROLE_GEMM)
            return s;
    return rc->n_steps;
}

/* The sm_80 set's tile: the members' own where one of them took 128 x 128
 * (with its warps), else 128 x 128 where the set's tiles of that size give
 * every SM one (the rule a member alone follows, add_generated_sm80), else
 * 64 x 64 as they took. True when that is not member 0's. */
static bool sib_tile_sm80(const rb *b, uint32_t n, kf_cuda_gemm_shape *shapes) {
    uint32_t bm = 64, warps = 4;
    int64_t cols = 0;
    for (uint32_t j = 0; j < n; j++) {
        cols += (shapes[j].n + 127) / 128;
        if (shapes[j].bm == 128 && bm != 128) {
            bm = 128;
            warps = shapes[j].warps;
        }
    }
    if (bm == 64 && ((shapes[0].m + 127) / 128) * cols >= b->target->sm_count) {
        bm = 128;
        warps = (b->target->flags & KF_CUDA_RECIPE_GEMM_SM80_8WARPS) ? 8 : 4;
    }
    bool changed = shapes[0].bm != bm || shapes[0].warps != warps;
    for (uint32_t j = 0; j < n; j++) {
        shapes[j].bm = shapes[j].bn = bm;
        shapes[j].warps = warps;
    }
    return changed;
}

/* The set's members' generated GEMM kernels (steps idx[0..n), each member's
 * as kf_rb_gemm_generated made it, shapes[j] its shape) become ONE kernel
 * over their concatenated columns (kf_cuda_codegen_gemm_sm90_set, or
 * kf_cuda_codegen_gemm_sm80_set for the mma.sync kernels): its tensor maps
 * (sm_90a) or operand pointers (sm_80) are the members' own (A, each B, and
 * each output's map), its params bound as theirs were; the members'
 * pre-passes stay where they are. With KF_ERR_UNSUPPORTED (why[] says why)
 * the recipe is as it was; with KF_OK, why[] names the set's tile where it
 * is not member 0's (sm_80), else is empty. */
static kf_status sib_one_kernel(rb *b, uint32_t lead, uint32_t n, const uint32_t *idx,
                                kf_cuda_gemm_shape *shapes, char *why, size_t why_size, char *name,
                                size_t name_size) {
    kf_cuda_recipe *rc = b->rc;
    uint32_t groups[KF_CUDA_SIB_MAX];
    if (n == 0 || n > KF_CUDA_SIB_MAX) {
        snprintf(why, why_size, "a set of %u members (1 to %d)", n, KF_CUDA_SIB_MAX);
        return KF_ERR_UNSUPPORTED;
    }
    for (uint32_t j = 0; j < n; j++) {
        groups[j] = lead + j;
        if (idx[j] >= rc->n_steps || shapes[j].bn == 0) {
            why[0] = 0; /* the SIMT kernels (no one kernel there): nothing to say */
            return KF_ERR_UNSUPPORTED;
        }
    }
    kf_cuda_template tmpl = rc->steps[idx[0]].kernel->kernel.tmpl;
    bool sm80 = tmpl == KF_CUDA_TEMPLATE_GEMM_SM80;
    for (uint32_t j = 1; j < n; j++)
        if (rc->steps[idx[j]].kernel->kernel.tmpl != tmpl) {
            snprintf(why, why_size, "the members' GEMM kernels are of different kinds");
            return KF_ERR_UNSUPPORTED;
        }
    bool retiled = sm80 && sib_tile_sm80(b, n, shapes);
    kf_cuda_kernel k;
    kf_status st = sm80 ? kf_cuda_codegen_gemm_sm80_set(b->plan, groups, n, b->target->arch, shapes,
                                                        b->mem, &k)
                        : kf_cuda_codegen_gemm_sm90_set(b->plan, groups, n, b->target->arch, shapes,
                                                        b->mem, &k);
    if (st != KF_OK) {
        if (st == KF_ERR_UNSUPPORTED)
            snprintf(why, why_size, "%.200s", k.error);
        else
            kf_msg_set(b->err, st, "group %u: %s", lead, k.error[0] ? k.error : kf_status_str(st));
        kf_cuda_kernel_release(b->mem, &k);
        return st;
    }
    /* the leading arguments, as the members' steps hold them: A, then each
     * B (and output map); sm_80: pointers, sm_90a: tensor maps */
    bool tma = !sm80 && shapes[0].epi_tma;
    uint32_t n_front = 1 + n * (tma ? 2u : 1u);
    kf_cuda_tmap maps[KF_CUDA_MAX_TMAPS];
    kf_cuda_arg margs[KF_CUDA_MAX_PARAMS];
    for (uint32_t j = 0; j < n; j++) {
        const kf_cuda_kstep *mk = rc->steps[idx[j]].kernel;
        uint32_t at = 1 + j * (tma ? 2u : 1u);
        if (j == 0) {
            if (!sm80)
                maps[0] = mk->tmaps[0];
            margs[0] = mk->args[0];
        }
        if (!sm80)
            maps[at] = mk->tmaps[1];
        margs[at] = mk->args[1];
        if (tma) {
            maps[at + 1] = mk->tmaps[2];
            margs[at + 1] = mk->args[2];
        }
    }
    if (k.n_params + n_front > KF_CUDA_MAX_PARAMS) {
        kf_cuda_kernel_release(b->mem, &k);
        snprintf(why, why_size, "more than %d kernel arguments", KF_CUDA_MAX_PARAMS);
        return KF_ERR_UNSUPPORTED;
    }
    /* the members' GEMM steps go (the last first: the indices stay valid) */
    for (uint32_t j = n; j-- > 0;) {
        kf_cuda_step *s = &rc->steps[idx[j]];
        kf_cuda_kernel_release(b->mem, &s->kernel->kernel);
        kf_mem_free(b->mem, s->kernel, sizeof *s->kernel);
        memmove(s, s + 1, (rc->n_steps - idx[j] - 1) * sizeof *s);
        rc->n_steps--;
        rc->variants[rc->n_variants - 1].n_steps--;
    }
    snprintf(name, name_size, "%s", k.name);
    kf_cuda_kstep *ks = NULL;
    if ((st = kf_rb_add_made_kernel(b, &k, KF_CUDA_ROLE_GEMM, &ks)) != KF_OK)
        return st;
    memmove(&ks->args[n_front], &ks->args[0], ks->n_args * sizeof ks->args[0]);
    memcpy(&ks->args[0], margs, n_front * sizeof margs[0]);
    ks->n_args += n_front;
    if (sm80) { /* one block per tile of the set's raster */
        for (uint32_t i = 0; i < n_front; i++)
            ks->args[i].kind = KF_CUDA_ARG_PTR;
        ks->grid[0] = (uint32_t)ks->kernel.launch.work_items;
        ks->grid[1] = ks->grid[2] = 1;
        why[0] = 0;
        if (retiled)
            snprintf(why, why_size, "the set's tiles %ux%ux32 on %u warps", shapes[0].bm,
                     shapes[0].bn, shapes[0].warps);
        return KF_OK;
    }
    if (shapes[0].cluster == 2) /* the members' B maps are halves, as each alone took them */
        ks->cluster[0] = 2;
    for (uint32_t i = 0; i < n_front; i++) {
        ks->args[i].kind = KF_CUDA_ARG_TMAP;
        ks->args[i].value = i;
        ks->tmaps[i] = maps[i];
    }
    ks->n_tmaps = n_front;
    why[0] = 0;
    return KF_OK;
}

/* A GEMM sibling set (fusion/fuse_gemm_siblings.c) in its first member's
 * recipe, b->gi: the generated variant computes the norm's row statistics
 * once (the first fold member's pre-pass; a later member that reads A from
 * the prologue's scratch finds it written), then each member's fold pre-pass
 * and GEMM; the cuBLASLt variant writes A normalized once (the first member's
 * prologue kernel), then each member's cuBLASLt GEMM and epilogue kernel.
 * Measured against each other as one group's variants are. The members'
 * GEMM kernels become one over their concatenated columns where
 * sib_one_kernel takes them (one tail of tiles instead of one per member).
 * KF_ERR_UNSUPPORTED,
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
        kf_cuda_gemm_shape shapes[KF_CUDA_SIB_MAX];
        uint32_t idx[KF_CUDA_SIB_MAX]; /* KF_NONE: no step (sib_one_kernel refuses it) */
        memset(shapes, 0, sizeof shapes);
        for (uint32_t j = 0; j < KF_CUDA_SIB_MAX; j++)
            idx[j] = KF_NONE;
        for (uint32_t j = 0; j < n && st == KF_OK; j++) {
            b->gi = lead + j;
            b->sib_shared = j > 0;
            b->sib_shape = j < KF_CUDA_SIB_MAX ? &shapes[j] : NULL;
            st = kf_rb_gemm_generated(b, why, sizeof why, name, sizeof name);
            b->sib_shape = NULL;
            if (st == KF_OK && j < KF_CUDA_SIB_MAX)
                idx[j] = last_gemm_step(rc);
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
            /* one kernel over the concatenated columns (the default on sm_90a) */
            uint64_t fl = b->target->flags;
            bool sm80 = n > 0 && idx[0] < rc->n_steps &&
                        rc->steps[idx[0]].kernel->kernel.tmpl == KF_CUDA_TEMPLATE_GEMM_SM80;
            bool one_default = sm80 ? SIB_ONE_SM80_DEFAULT : SIB_ONE_DEFAULT;
            bool one_wanted = (fl & KF_CUDA_RECIPE_GEMM_SIB_ONE) ||
                              (one_default && !(fl & KF_CUDA_RECIPE_GEMM_SIB_APART));
            char one_why[300] = "";
            kf_status one = KF_ERR_UNSUPPORTED;
            if (one_wanted && n <= KF_CUDA_SIB_MAX)
                one = sib_one_kernel(b, lead, n, idx, shapes, one_why, sizeof one_why, name,
                                     sizeof name);
            else if (one_wanted)
                snprintf(one_why, sizeof one_why, "more than %d members", KF_CUDA_SIB_MAX);
            if (one != KF_OK && one != KF_ERR_UNSUPPORTED)
                return one;
            if (one == KF_OK) {
                char ns[96] = "";
                int64_t n_all = 0;
                for (uint32_t j = 0; j < n; j++) {
                    char t[24];
                    snprintf(t, sizeof t, "%" PRId64, shapes[j].n);
                    append(ns, sizeof ns, " + ", t);
                    n_all += shapes[j].n;
                }
                kf_rb_how(b, 0,
                          "GEMM siblings %s as one GEMM over their concatenated columns, N %s = "
                          "%" PRId64
                          " (one raster over every member's tiles): generated kernel %s (%s%s%s)",
                          names, ns, n_all, name, first_why, one_why[0] ? "; " : "", one_why);
            } else {
                kf_rb_how(b, 0,
                          "GEMM siblings %s, the norm's row statistics once%s%.160s%s: generated "
                          "kernels %s (first: %s)",
                          names, one_why[0] ? " (not one GEMM: " : "", one_why,
                          one_why[0] ? ")" : "", kernels, first_why);
            }
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
