/*
 * recipe_attention_decode.c -- the recipe of an ATTENTION group that runs the
 * split-KV decode kernels (cg_attention_decode.c). With n > 1 splits, two
 * KERNEL steps,
 *
 *   1. the partials: grid = (kv items x row blocks) x n splits, each block one
 *      chunk of the keys, written to the group's workspace;
 *   2. the combine: one warp an output row, merging the n partials;
 *
 * both with n as their last (int64) argument, and the workspace a SCRATCH
 * buffer of the recipe (sized for n splits), so a run takes it from the
 * program's arena and allocates nothing. With n = 1 (one chunk holds every
 * key tile: a long batch) there is nothing to merge: ONE step, the direct
 * kernel (the split kernel writing O itself; last argument 1), and no
 * workspace -- unless KF_CUDA_RECIPE_ATTENTION_DECODE_COMBINE keeps the
 * two-step form (to measure and test it). On an H200 (35215ea, A B B A
 * blocks) the direct kernel takes B64 H32 Skv 8192 in 1.8691 ms against the
 * two steps' 1.9008 (B16: 0.4718 against 0.4873), 4.56 TB/s of K and V, 95%
 * of the part's 4.8; and one split stays the rule's choice for B64 even
 * though its 2048 blocks leave a last wave of 200 on 264 slots: two splits
 * (KF_CUDA_RECIPE_ATTENTION_DECODE_SPLITS_X2, blocks half as long) took
 * 1.9018 ms.
 *
 * n comes from the target's SM count: the smallest n whose blocks fill the
 * device's block slots (SMs x the blocks an SM holds) to 90% or more over
 * whole waves, so a small batch of single-token queries still has every SM
 * streaming K and V; never more splits than key tiles, and no split without
 * one (n splits of ceil(tiles / n) tiles each leave none empty).
 */
#include <stdio.h>
#include <string.h>

#include "codegen/cuda/recipe_internal.h"

/* Query rows up to which the decode kernels run by default. On an H100
 * (c6b7049, bf16, Skv 8192, D 128), B16 H32: 0.715 ms against the sm_90a
 * kernel's 0.707 (both at 90% of 3.35 TB/s); GQA 32:8: 0.192 against 0.524
 * (the sm_90a kernel reads each K/V head once per query head); the fewer the
 * kv items, the more the splits win (a single sequence leaves the sm_90a
 * kernel 32 blocks). */
#define DECODE_MAX_SQ 16

/* The splits that get a tile when n0 are asked for: n0 splits of
 * ceil(tiles / n0) tiles leave the last ones empty where the chunks cover
 * the tiles sooner. */
static int64_t splits_with_tiles(int64_t tiles, int64_t n0) {
    int64_t chunk = (tiles + n0 - 1) / n0;
    return (tiles + chunk - 1) / chunk;
}

uint32_t kf_cuda_attention_decode_splits(const kf_cuda_decode_shape *s, int sm_count) {
    uint64_t slots =
        (uint64_t)(sm_count > 0 ? sm_count : 1) * (s->blocks_per_sm ? s->blocks_per_sm : 1);
    int64_t max = s->tiles < 256 ? s->tiles : 256;
    uint64_t items = s->kv_items > 0 ? (uint64_t)s->kv_items : 1;
    uint32_t best = 1;
    double best_eff = -1.0;
    for (int64_t n0 = 1; n0 <= max; n0++) {
        int64_t n = splits_with_tiles(s->tiles, n0);
        if (n < n0)
            continue;
        uint64_t total = items * (uint64_t)n, waves = (total + slots - 1) / slots;
        double eff = (double)total / (double)(waves * slots);
        if (eff >= 0.9)
            return (uint32_t)n;
        if (eff > best_eff) {
            best_eff = eff;
            best = (uint32_t)n;
        }
    }
    return best;
}

bool kf_rb_attention_wants_decode(const rb *b) {
    const kf_group *grp = &b->plan->groups[b->gi];
    if (b->target->flags & KF_CUDA_RECIPE_ATTENTION_DECODE)
        return true;
    if (b->target->flags & KF_CUDA_RECIPE_ATTENTION_FA2)
        return false;
    return grp->attn.sq <= DECODE_MAX_SQ;
}

/* Appends generated kernel k of `role` with the split count as its last
 * argument; its grid is `grid` when nonzero. */
static kf_status add_step(rb *b, kf_cuda_kernel *k, kf_cuda_role role, uint32_t n, uint64_t grid,
                          uint64_t ws_bytes) {
    kf_cuda_kstep *ks = NULL;
    if (k->n_params + 1 > KF_CUDA_MAX_PARAMS) {
        kf_cuda_kernel_release(b->mem, k);
        return kf_msg_set(b->err, KF_ERR_UNSUPPORTED, "group %u: more than %d kernel arguments",
                          b->gi, KF_CUDA_MAX_PARAMS - 1);
    }
    for (uint32_t i = 0; i < k->n_params; i++)
        if (k->params[i].kind == KF_CUDA_PARAM_SCRATCH)
            k->params[i].bytes = ws_bytes;
    kf_status st = kf_rb_add_made_kernel(b, k, role, &ks);
    if (st != KF_OK)
        return st;
    if (grid)
        ks->grid[0] = grid > 0x7fffffffu ? 0x7fffffffu : (uint32_t)grid;
    kf_cuda_arg *a = &ks->args[ks->n_args++];
    memset(a, 0, sizeof *a);
    a->kind = KF_CUDA_ARG_I64;
    a->value = n;
    return KF_OK;
}

kf_status kf_rb_attention_decode(rb *b) {
    const kf_group *grp = &b->plan->groups[b->gi];
    const kf_attn_info *at = &grp->attn;
    kf_cuda_decode_shape sh;
    kf_status st = kf_cuda_attention_decode_shape(b->plan, b->gi, b->target->arch, &sh);
    if (st != KF_OK)
        return kf_msg_set(b->err, KF_ERR_INTERNAL, "group %u: no decode shape", b->gi);
    uint32_t n = kf_cuda_attention_decode_splits(&sh, b->target->sm_count);
    if (b->target->flags & KF_CUDA_RECIPE_ATTENTION_DECODE_SPLITS_X2) {
        /* twice the rule's count, in whole chunks (no empty split) */
        n = (uint32_t)splits_with_tiles(sh.tiles, 2 * (int64_t)n);
    }
    const bool direct = n == 1 && !(b->target->flags & KF_CUDA_RECIPE_ATTENTION_DECODE_COMBINE);
    uint64_t ws = direct ? 0 : sh.ws_bytes_per_split * n;
    snprintf(b->rc->variants[0].label, sizeof b->rc->variants[0].label, "decode");
    kf_cuda_kernel k;
    char names[2][KF_CUDA_NAME_MAX];
    for (int i = 0; i < (direct ? 1 : 2); i++) {
        memset(&k, 0, sizeof k);
        st = direct ? kf_cuda_codegen_attention_decode_direct(b->plan, b->gi, b->target->arch,
                                                              b->mem, &k)
             : i == 0
                 ? kf_cuda_codegen_attention_decode(b->plan, b->gi, b->target->arch, b->mem, &k)
                 : kf_cuda_codegen_attention_combine(b->plan, b->gi, b->target->arch, b->mem, &k);
        if (st != KF_OK) {
            kf_msg_set(b->err, st, "group %u (%s): %s", b->gi, grp->name,
                       k.error[0] ? k.error : kf_status_str(st));
            kf_cuda_kernel_release(b->mem, &k);
            return st;
        }
        snprintf(names[i], sizeof names[i], "%s", k.name);
        st =
            add_step(b, &k, i == 0 ? KF_CUDA_ROLE_ATTENTION_DECODE : KF_CUDA_ROLE_ATTENTION_COMBINE,
                     n, i == 0 ? (uint64_t)sh.kv_items * n : 0, ws);
        if (st != KF_OK)
            return st;
    }
    int64_t chunk = (sh.tiles + n - 1) / n, rows = sh.group_heads * at->sq;
    char keys[160]; /* what both forms say of the keys and the rows */
    snprintf(keys, sizeof keys,
             "%lld key tiles of 64 (%lld visited, mask %s), %lld query row%s a K/V read, head dim "
             "%lld",
             (long long)chunk, (long long)sh.tiles, kf_mask_kind_name(at->mask), (long long)rows,
             rows == 1 ? "" : "s", (long long)at->d);
    if (direct) {
        kf_rb_how(b, 0,
                  "decode attention (split-KV mma.sync kernel) %s, writing O itself: 1 split of "
                  "%s, no workspace, no combine",
                  names[0], keys);
        return KF_OK;
    }
    kf_cuda_buf wbuf;
    if ((st = kf_rb_get(b, KF_CUDA_PARAM_SCRATCH, at->pv, ws, &wbuf)) != KF_OK)
        return st;
    kf_rb_how(b, 0,
              "decode attention (split-KV mma.sync kernel) %s + combine %s: %u split%s of <= %s, "
              "%llu workspace bytes",
              names[0], names[1], n, n == 1 ? "" : "s", keys, (unsigned long long)ws);
    return KF_OK;
}
