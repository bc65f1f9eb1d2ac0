/*
 * recipe_gemm_decode.c -- the generated side of a bf16 / f16 GEMM group with
 * M <= 64 (decode): the decode kernel (cg_gemm_decode.c), sized here for the
 * target (strip width, ring depth, the split that fills its SMs), with the
 * prologue kernel a step before where the group has a norm prologue (A
 * normalized to scratch, as on the cuBLASLt side).
 *
 * kf_rb_gemm_generated asks kf_rb_gemm_wants_decode first, then dispatches
 * here after it has read the operands' majors, strides and batching; where
 * the kernel refuses the group the tiled kernels take it and the report
 * says why the decode kernel did not (rb.dec_why). The measured choice
 * against cuBLASLt (kf_rb_gemm) is unchanged: the decode kernel is then the
 * generated side.
 *
 * The generated side of a group with M <= 32 on sm_90a by default
 * (GEMM_GENERATED and GEMM_MEASURED, not GEMM_SM80; DEC_DEFAULT_M below says
 * why 32; no A100 has run it); KF_CUDA_RECIPE_GEMM_DECODE (internal) takes
 * it to M <= 64 and any arch from sm_80, KF_CUDA_RECIPE_GEMM_NO_DECODE and
 * KF_CUDA_RECIPE_GEMM_STREAMK (internal) keep the tiled kernels.
 *
 * KF_CUDA_RECIPE_GEMM_DEC_TMA (internal, sm_90 on): the kernel's TMA form
 * (two tensor maps in place of A's and B's pointers, a producer warp, a
 * 96 KiB ring; past M = 32 one block an SM and 192 KiB). ncu on an H100
 * (020d5bb, M 32 x 4096 x 16384, 1.48 GHz under the profiler): DRAM at
 * 56.6% of peak with the cp.async form, 58.8% with the TMA form, though each
 * SM then asks for 2 blocks x 4 stages x 16 KiB of B at once (Little's law
 * wants ~25-40 KB): bytes in flight are not what holds it back; the SMs are
 * active 86% of the elapsed cycles (one wave: the ramp and the last block's
 * reduction), and A's tile (8 KiB a stage at M 32, half of B's) goes through
 * L2 again for every strip.
 *
 * KF_CUDA_RECIPE_GEMM_DEC_REG (internal, M <= 32): the register form (no
 * ring; cuda_recipe.h has its numbers). ncu on an H100 (bd56b63, the same
 * M 32 row, 1.44-1.53 GHz under the profiler): cuBLASLt runs
 * nvjet_sm90_tst_64x32_64x16_2x1_v_bz_splitK_gelubias_NNT, grid 2 x 64
 * (K split in two, 64 strips of 64 columns) of 384 threads, one block an
 * SM (213 KiB of shared memory: its TMA ring, some 128 KiB of B in flight
 * an SM; 0.97 waves), DRAM at 83%, L2 hit 15.5%, 49.5 us, then
 * splitKreduce_kernel (128 x 2 blocks, 5.3 us); the ring form (256 blocks,
 * two an SM, 98 KiB each, 198 registers) DRAM 56%, 73.6 us, issue slots 28%
 * busy; the register form (256 blocks, two an SM by its 206 registers, 35
 * KiB) DRAM 56%, 73.4 us, 76% of its warps' cycles waiting on loads, issue
 * slots 8% busy: 8 warps an SM with two chunks (8 KiB of B) each in flight
 * are 64 KiB an SM, short of the ring's. L2 hit rates 17-22% (A's re-reads),
 * occupancy 12% in both.
 */
#include <stdio.h>
#include <string.h>

#include "codegen/cuda/recipe_internal.h"

/* The tokens up to which the generated side is the decode kernel by default.
 * Measured on an H100 (780c341, bench/results): the tiled sm_90a kernel
 * against the decode kernel, M x N x K, bf16, in ms: 1 x 4096 x 4096 0.0313
 * / 0.0141; 16 x 4096 x 4096 0.0301 / 0.0164; 32 x 4096 x 16384 + bias +
 * gelu_tanh 0.0962 / 0.0729; 16 x 11008 x 4096 0.0520 / 0.0410; 16 x 4096 x
 * 11008 0.0688 / 0.0409; but 64 x 4096 x 4096 0.0264 / 0.0300 (there the A
 * tile is as large as B's); again at fce0fb6 (NO_DECODE against the
 * default): 0.0254 / 0.0167, 0.0254 / 0.0183, 0.0841 / 0.0735, 0.0469 /
 * 0.0442, 0.0571 / 0.0429; 64: 0.0262 / 0.0313. cuBLASLt is faster than
 * both everywhere there (the measured choice keeps it). Its GPU numerics passed there first
 * (test_cuda_exec_decode: M 1 to 64, both majors of B, ragged N and K, the
 * epilogues, a norm prologue, bf16 and f16, each run twice to the same
 * bits; compute-sanitizer memcheck and racecheck on the ragged case). */
#define DEC_DEFAULT_M 32

/* A 2D tensor map of the TMA form: dims {d0, d1} (d0 contiguous), rows of
 * `ld` elements, boxes {64, rows}, 128-byte swizzle. */
static void dec_tmap(kf_cuda_tmap *t, kf_dtype dt, uint64_t d0, uint64_t d1, int64_t ld,
                     uint32_t rows) {
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->rank = 2;
    t->dims[0] = d0;
    t->dims[1] = d1;
    t->strides[0] = (uint64_t)ld * kf_dtype_size(dt);
    t->box[0] = 64;
    t->box[1] = rows;
    t->swizzle = 128;
}

bool kf_rb_gemm_wants_decode(const rb *b, const kf_cuda_gemm_shape *sh) {
    uint64_t fl = b->target->flags;
    int cc = kf_cuda_arch_cc(b->target->arch);
    if ((fl & (KF_CUDA_RECIPE_GEMM_NO_DECODE | KF_CUDA_RECIPE_GEMM_STREAMK)) || cc < 80)
        return false;
    if (fl & KF_CUDA_RECIPE_GEMM_DECODE)
        return sh->m <= 64;
    /* By default only where it ran (sm_90a), and not when the sm_80 tiled
     * kernel is asked for (KF_GEMM_SM80) */
    return sh->m <= DEC_DEFAULT_M && cc >= 90 && !(fl & KF_CUDA_RECIPE_GEMM_SM80);
}

kf_status kf_rb_gemm_decode(rb *b, kf_cuda_gemm_shape *sh, kf_cuda_buf a, kf_cuda_buf bm, char *why,
                            size_t why_size, char *name, size_t name_size) {
    const kf_plan *plan = b->plan;
    const kf_group *grp = &plan->groups[b->gi];
    int cc = kf_cuda_arch_cc(b->target->arch);
    uint64_t fl = b->target->flags;
    uint32_t mp = (uint32_t)((sh->m + 7) / 8) * 8u;
    sh->dec_reg = (fl & KF_CUDA_RECIPE_GEMM_DEC_REG) && mp <= 32;
    sh->dec_tma = (fl & KF_CUDA_RECIPE_GEMM_DEC_TMA) && cc >= 90 && !sh->dec_reg;
    if (a.offset % 16 != 0 || bm.offset % 16 != 0) {
        snprintf(why, why_size, "an operand starts off a 16-byte boundary (%s)",
                 sh->dec_tma ? "TMA" : "cp.async");
        return KF_ERR_UNSUPPORTED;
    }
    /* Strips of 64 columns (B tiles of 16 KiB a K step of 128; the
     * accumulators 16 a token tile). The ring: as many K steps as two
     * blocks an SM leave room for beside a static gelu table (sm_90: 227
     * KiB a SM; sm_80: 164; sm_86 / 89: 100), 2 to 8. The register form: no
     * ring (chunks of 32 K values, the split's unit). */
    sh->bn = 64u;
    sh->dec_bk = 128u;
    /* (the TMA form: 96 KiB beside the 1 KiB that aligns the ring; past
     * M = 32 one block an SM (cg_gemm_decode.c), so 192 KiB) */
    uint32_t budget = sh->dec_tma ? (mp > 32 ? 192u : 96u) * 1024u
                      : cc >= 90  ? 100u * 1024u
                      : cc == 80  ? 64u * 1024u
                                  : 32u * 1024u;
    uint32_t stage = (sh->bn + mp) * sh->dec_bk * 2u;
    sh->stages = budget / stage;
    if (sh->stages < 2)
        sh->stages = 2;
    if (sh->stages > 8)
        sh->stages = 8;
    /* The split: enough blocks for two an SM (the TMA form past M = 32:
     * one), each a piece of a strip's K
     * steps (one at least; 16 pieces at most, which bounds the partials). */
    int64_t unit = sh->dec_reg ? 32 : sh->dec_bk;
    int64_t kb = (sh->k + unit - 1) / unit, strips = (sh->n + sh->bn - 1) / sh->bn;
    int64_t slots = (int64_t)b->target->sm_count * kf_cuda_gemm_decode_blocks_per_sm(sh);
    int64_t split = slots / strips;
    if (split > kb)
        split = kb;
    if (split > 16)
        split = 16;
    if (split < 1)
        split = 1;
    sh->dec_split = (uint32_t)split;

    kf_cuda_kernel k;
    memset(&k, 0, sizeof k);
    kf_status st = kf_cuda_codegen_gemm_decode(plan, b->gi, b->target->arch, sh, b->mem, &k);
    if (st != KF_OK) {
        if (st == KF_ERR_UNSUPPORTED)
            snprintf(why, why_size, "%.190s", k.error);
        else
            kf_msg_set(b->err, st, "group %u (%s): %s", b->gi, grp->name,
                       k.error[0] ? k.error : kf_status_str(st));
        kf_cuda_kernel_release(b->mem, &k);
        return st;
    }
    const uint32_t n_ptrs = 2; /* A, B (pointers, or the TMA form's tensor maps) */
    if (k.n_params + n_ptrs > KF_CUDA_MAX_PARAMS) {
        kf_cuda_kernel_release(b->mem, &k);
        snprintf(why, why_size, "more than %d kernel arguments", KF_CUDA_MAX_PARAMS);
        return KF_ERR_UNSUPPORTED;
    }
    snprintf(name, name_size, "%s", k.name);
    if (sh->a_scratch && (st = kf_rb_scratch_a_step(b, &k, &a)) != KF_OK)
        return st;
    kf_cuda_kstep *ks = NULL;
    if ((st = kf_rb_add_made_kernel(b, &k, KF_CUDA_ROLE_GEMM, &ks)) != KF_OK)
        return st;
    ks->grid[0] = kf_cuda_gemm_decode_grid(sh); /* every block at once: no SM cap */
    ks->grid[1] = ks->grid[2] = 1;
    memmove(&ks->args[n_ptrs], &ks->args[0], ks->n_args * sizeof ks->args[0]);
    ks->n_args += n_ptrs;
    memset(&ks->args[0], 0, n_ptrs * sizeof ks->args[0]);
    for (uint32_t i = 0; i < n_ptrs; i++)
        ks->args[i].kind = KF_CUDA_ARG_PTR;
    ks->args[0].buf = a;
    ks->args[1].buf = bm;
    if (sh->dec_tma) {
        /* A {K, M} in boxes {64, MP}; B K-major {K, N} in boxes {64, the
         * strip}, N-major {N, K} in boxes {64, the K step}; 128-byte swizzle */
        kf_dtype dt = plan->graph->nodes[grp->gemm.anchor[0]]->dtype;
        dec_tmap(&ks->tmaps[0], dt, (uint64_t)sh->k, (uint64_t)sh->m, sh->lda, mp);
        if (sh->b_kmajor)
            dec_tmap(&ks->tmaps[1], dt, (uint64_t)sh->k, (uint64_t)sh->n, sh->ldb, sh->bn);
        else
            dec_tmap(&ks->tmaps[1], dt, (uint64_t)sh->n, (uint64_t)sh->k, sh->ldb, sh->dec_bk);
        for (uint32_t i = 0; i < n_ptrs; i++) {
            ks->args[i].kind = KF_CUDA_ARG_TMAP;
            ks->args[i].value = i;
        }
        ks->n_tmaps = n_ptrs;
    }
    char ring[96];
    if (sh->dec_reg)
        snprintf(ring, sizeof ring, "16-byte loads to registers (no ring)");
    else
        snprintf(ring, sizeof ring, "%u stages of %u K (%s)", sh->stages, sh->dec_bk,
                 sh->dec_tma ? "TMA, a producer warp" : "cp.async");
    snprintf(
        why, why_size,
        "decode kernel: split-K over %u blocks a strip (%lld strips of %u columns, %u "
        "blocks), M padded to %u, %s, mma.sync with A and B "
        "swapped, B %s-major%s%s",
        sh->dec_split, (long long)strips, sh->bn, ks->grid[0], mp, ring, sh->b_kmajor ? "K" : "N",
        sh->dec_split > 1 ? ", the partials added in the kernel by each strip's last block" : "",
        sh->a_scratch ? ", A from the prologue kernel's scratch" : "");
    return KF_OK;
}
