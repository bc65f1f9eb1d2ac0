/*
 * recipe_attention.c -- the fused attention kernels as an attention group's
 * one step: the sm_90a wgmma/TMA kernel where it takes the group (its three
 * tensor maps in front of the params), else the mma.sync one, or the split-KV
 * decode kernels for short queries (recipe_attention_decode.c); where those
 * tensor-core kernels refuse the group (f32, other head dims), the SIMT one
 * (cg_attention_simt.c). Where none takes the group, recipe_gemm.c's
 * kf_rb_attention makes the unfused steps.
 */
#include <stdio.h>
#include <string.h>

#include "codegen/cuda/recipe_internal.h"

/* Whether the sm_90a attention kernel `name` (fa3[p][f][t][l][w][r][c][b][v][s][k][e]_...: the
 * forms cg_attention.c names it by) has form letter `form`. */
static bool sm90_form(const char *name, char form) {
    if (strncmp(name, "fa3", 3) != 0)
        return false;
    for (const char *p = name + 3; *p && *p != '_'; p++)
        if (*p == form)
            return true;
    return false;
}

/* The sm_90a kernel as the group's one step (variant 0): its three tensor
 * maps (Q, K, V) go in front of the params. */
static kf_status sm90_attention(rb *b, char *name, size_t name_size) {
    const kf_group *grp = &b->plan->groups[b->gi];
    kf_cuda_tmap maps[3];
    uint32_t bases[3];
    int64_t offsets[3];
    kf_status st =
        kf_cuda_attention_sm90_maps(b->plan, b->gi, b->target->flags, maps, bases, offsets);
    if (st != KF_OK)
        return kf_msg_set(b->err, KF_ERR_INTERNAL, "group %u: no tensor maps for the sm_90a kernel",
                          b->gi);
    kf_cuda_kernel k;
    memset(&k, 0, sizeof k);
    st = kf_cuda_codegen_attention_sm90_flags(b->plan, b->gi, b->target->arch, b->target->flags,
                                              b->mem, &k);
    if (st == KF_OK && k.n_params + 3 > KF_CUDA_MAX_PARAMS)
        st = kf_msg_set(k.error, KF_ERR_UNSUPPORTED, "more than %d kernel arguments",
                        KF_CUDA_MAX_PARAMS - 3);
    if (st != KF_OK) {
        kf_msg_set(b->err, st, "group %u (%s): %s", b->gi, grp->name,
                   k.error[0] ? k.error : kf_status_str(st));
        kf_cuda_kernel_release(b->mem, &k);
        return st;
    }
    snprintf(name, name_size, "%s", k.name);
    kf_cuda_kstep *ks = NULL;
    if ((st = kf_rb_add_made_kernel(b, &k, KF_CUDA_ROLE_ATTENTION_SM90, &ks)) != KF_OK)
        return st;
    memmove(&ks->args[3], &ks->args[0], ks->n_args * sizeof ks->args[0]);
    ks->n_args += 3;
    memset(&ks->args[0], 0, 3 * sizeof ks->args[0]);
    for (int i = 0; i < 3; i++) {
        ks->args[i].kind = KF_CUDA_ARG_TMAP;
        ks->args[i].buf = kf_rb_tensor(b, bases[i]);
        if (ks->args[i].buf.kind != KF_CUDA_BUF_NONE)
            ks->args[i].buf.offset += offsets[i] * 2; /* bf16/f16 elements */
        ks->args[i].value = i;
        ks->tmaps[i] = maps[i];
    }
    ks->n_tmaps = 3;
    if (sm90_form(name, 'c')) /* 2-CTA clusters (the grid is whole clusters) */
        ks->cluster[0] = 2;
    return KF_OK;
}

/* The fused kernel as the group's one step (variant 0): the sm_90a kernel
 * when asked for and it takes the group (else `sm90_why` says why not), else
 * the mma.sync one. */
static kf_status fused_attention(rb *b, bool sm90, const char *sm90_why) {
    const kf_group *grp = &b->plan->groups[b->gi];
    char name[KF_CUDA_NAME_MAX] = "";
    snprintf(b->rc->variants[0].label, sizeof b->rc->variants[0].label, "fused");
    kf_status st =
        sm90 ? sm90_attention(b, name, sizeof name)
             : kf_rb_add_kernel(b, b->plan, KF_CUDA_ROLE_ATTENTION, name, sizeof name, NULL);
    if (st == KF_ERR_NOT_FOUND)
        return kf_msg_set(b->err, KF_ERR_INTERNAL, "group %u: no fused attention kernel", b->gi);
    if (st != KF_OK)
        return st;
    uint64_t visited, total;
    kf_cuda_attention_tiles(b->plan, b->gi, sm90, &visited, &total);
    char tiles[128];
    if (grp->attn.mask == KF_MASK_BLOCK_SPARSE)
        snprintf(tiles, sizeof tiles,
                 "the key tiles the %lldx%lld keep map drops skipped (read at run time%s)",
                 (long long)grp->attn.keep_bq, (long long)grp->attn.keep_bk,
                 sm90 && sm90_form(name, 's') ? ", its walk built in shared memory" : "");
    else if (visited < total)
        snprintf(tiles, sizeof tiles,
                 "%llu of %llu tiles visited (%.0f%% outside the mask skipped)",
                 (unsigned long long)visited, (unsigned long long)total,
                 100.0 * (double)(total - visited) / (double)total);
    else
        snprintf(tiles, sizeof tiles, "every tile visited%s",
                 grp->attn.mask != KF_MASK_NONE ? ", mask per element" : "");
    if (sm90)
        kf_rb_how(b, 0,
                  "fused attention (sm_90a wgmma/TMA kernel) %s: mask %s, head dim %lld, "
                  "%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s%s",
                  name, kf_mask_kind_name(grp->attn.mask), (long long)grp->attn.d, tiles,
                  sm90_form(name, 'p') ? "; softmax pinned under P.V" : "",
                  sm90_form(name, 'f') ? "; f32 scores, unrounded (a scale folded into the softmax)"
                                       : "",
                  sm90_form(name, 't') ? "; row max and sum as trees" : "",
                  sm90_form(name, 'k') ? "; query tiles paired by kept key tiles" : "",
                  sm90_form(name, 'l') ? "; the tail's items longest first" : "",
                  sm90_form(name, 'w') ? "; 176-key tiles" : "",
                  sm90_form(name, 'r') ? "; the ragged last key tile narrower" : "",
                  sm90_form(name, 'c') ? "; 2-CTA clusters sharing K and V" : "",
                  sm90_form(name, 'b') ? "; bounded scores, a fixed softmax shift" : "",
                  sm90_form(name, 'e') ? "; exp2s partly by polynomial" : "",
                  sm90_form(name, 'i') ? "; items one at a time"
                  : sm90_form(name, 'j') ? "; items joined"
                                         : "",
                  sm90_form(name, 'z')   ? "; O rescaled lazily (past 2^8)"
                  : sm90_form(name, 'y') ? "; O rescaled every key tile"
                                         : "",
                  sm90_form(name, 'm') ? "; the keep map's edge path merged" : "",
                  sm90_form(name, 'v') ? "; K and V evict_last in L2, Q and O evict_first, the "
                                         "walk's next kept tile prefetched"
                                       : "",
                  sm90_form(name, 'd') ? "; key tiles diagonal-first" : "",
                  !sm90_form(name, 'u')                       ? ""
                  : grp->attn.mask == KF_MASK_SLIDING_WINDOW ? "; the window's edge steps out of "
                                                               "the main loop"
                                                             : "; the last key tile's step peeled");
    else
        kf_rb_how(b, 0,
                  "fused attention (sm_80 mma.sync kernel) %s: mask %s, head dim %lld, %s%s%s",
                  name, kf_mask_kind_name(grp->attn.mask), (long long)grp->attn.d, tiles,
                  sm90_why ? "; not the sm_90a kernel: " : "", sm90_why ? sm90_why : "");
    return KF_OK;
}

/* The SIMT kernel (cg_attention_simt.c) as the group's one step, where the
 * tensor-core kernels refuse it (`tc_why` says why). */
static kf_status simt_attention(rb *b, const char *tc_why) {
    const kf_group *grp = &b->plan->groups[b->gi];
    char name[KF_CUDA_NAME_MAX] = "";
    snprintf(b->rc->variants[0].label, sizeof b->rc->variants[0].label, "fused");
    kf_status st =
        kf_rb_add_kernel(b, b->plan, KF_CUDA_ROLE_ATTENTION_SIMT, name, sizeof name, NULL);
    if (st == KF_ERR_NOT_FOUND)
        return kf_msg_set(b->err, KF_ERR_INTERNAL, "group %u: no SIMT attention kernel", b->gi);
    if (st != KF_OK)
        return st;
    int br = 0, bc = 0;
    kf_cuda_attention_simt_tiles(b->plan, b->gi, b->target->arch, &br, &bc);
    uint64_t visited, total;
    kf_cuda_attention_tiles_of(b->plan, b->gi, br, bc, &visited, &total);
    char tiles[128];
    if (grp->attn.mask == KF_MASK_BLOCK_SPARSE)
        snprintf(tiles, sizeof tiles,
                 "the key tiles the %lldx%lld keep map drops skipped (read at run time)",
                 (long long)grp->attn.keep_bq, (long long)grp->attn.keep_bk);
    else if (visited < total)
        snprintf(tiles, sizeof tiles, "%llu of %llu tiles visited (%.0f%% outside the mask skipped)",
                 (unsigned long long)visited, (unsigned long long)total,
                 100.0 * (double)(total - visited) / (double)total);
    else
        snprintf(tiles, sizeof tiles, "every tile visited%s",
                 grp->attn.mask != KF_MASK_NONE ? ", mask per element" : "");
    kf_rb_how(b, 0,
              "fused attention (simt FFMA kernel, f32 arithmetic) %s: mask %s, head dim %lld / "
              "%lld, %dx%d tiles, %s; not the tensor-core kernels: %s",
              name, kf_mask_kind_name(grp->attn.mask), (long long)grp->attn.d,
              (long long)grp->attn.dv, br, bc, tiles, tc_why);
    return KF_OK;
}

kf_status kf_rb_attention_fused(rb *b, char *why, size_t why_size, bool *fused) {
    const kf_plan *plan = b->plan;
    *fused = false;
    if (b->target->flags & KF_CUDA_RECIPE_UNFUSED_ATTENTION) {
        snprintf(why, why_size, "the fused kernel is off: KF_FLAG_UNFUSED_ATTENTION");
        return KF_OK;
    }
    if (!kf_cuda_attention_supported(plan, b->gi, b->target->arch, why, why_size)) {
        /* the SIMT kernel where the tensor-core kernels refuse; where it
         * refuses too, the unfused steps, and `why` holds both reasons */
        char simt_why[192];
        if (kf_cuda_attention_simt_supported(plan, b->gi, b->target->arch, simt_why,
                                             sizeof simt_why)) {
            *fused = true;
            return simt_attention(b, why);
        }
        size_t n = strlen(why);
        if (n < why_size)
            snprintf(why + n, why_size - n, "; nor the SIMT kernel: %s", simt_why);
        return KF_OK;
    }
    *fused = true;
    /* short queries: the split-KV decode kernels (recipe_attention_decode.c) */
    if (kf_rb_attention_wants_decode(b) &&
        kf_cuda_attention_decode_supported(plan, b->gi, b->target->arch, why, why_size))
        return kf_rb_attention_decode(b);
    /* the sm_90a kernel where it takes the group; the report says why not
     * where the arch is sm_90a and it does not */
    if ((b->target->flags & KF_CUDA_RECIPE_ATTENTION_FA2) || strcmp(b->target->arch, "sm_90a") != 0)
        return fused_attention(b, false, NULL);
    char why90[160];
    bool sm90 = kf_cuda_attention_sm90_supported(plan, b->gi, b->target->arch, why90, sizeof why90);
    return fused_attention(b, sm90, sm90 ? NULL : why90);
}
