/*
 * cg_gemm_decode.c -- a bf16 / f16 GEMM group whose M (the tokens) is 64 or
 * fewer as one kernel (templates/gemm_decode.cuh): the weight B streamed
 * once from HBM by a deep cp.async ring, mma.sync with A and B swapped (B's
 * columns the MMA's M side, the tokens its N side), each strip of output
 * columns cut by K over several blocks whose f32 partials the last block to
 * arrive adds in the kernel, then the group's epilogue on the sums -- the
 * kf_epi that every generated GEMM shares (cg_gemm_epi.c).
 *
 *   plan group + kf_cuda_gemm_shape (from the recipe, recipe_gemm_decode.c:
 *   sizes, B's major, lda / ldb, the strip width bn, the ring depth, the
 *   split)
 *     --> params: one IN per tensor the epilogue loads, one OUT per write,
 *         and with a split the PARTIALS workspace (one f32 strip a block)
 *         and a COUNTERS word a strip (A and B are not params: the recipe
 *         puts their addresses first)
 *     --> source: the head, the problem defines, the branch-free sigmoid
 *         family, kf_epi, then the template.
 *
 * The TMA form (shape.dec_tma, sm_90a): A and B through two tensor maps
 * (the recipe's first two arguments; boxes of 64 values by the tile's other
 * side, 128-byte swizzle), a producer warp beside the 4 MMA warps (160
 * threads), the ring on mbarriers.
 *
 * Why a kernel of its own: at M <= 64 a GEMM is a read of B (K x N) and
 * little else. The tiled kernels' 128-row tiles waste most of their tensor
 * work there, keep too few of B's bytes in flight per SM, and their
 * stream-K split pays a fixed cost that dominates a 10-40 us kernel.
 */
#include "codegen/cuda/cg.h"

#include "codegen/cuda/cg_gemm.h"
#include "codegen/cuda/templates.h"

static uint32_t dec_mp(const kf_cuda_gemm_shape *sh) { return (uint32_t)((sh->m + 7) / 8) * 8u; }

static uint64_t dec_strips(const kf_cuda_gemm_shape *sh) {
    return (uint64_t)((sh->n + sh->bn - 1) / sh->bn);
}

uint32_t kf_cuda_gemm_decode_grid(const kf_cuda_gemm_shape *sh) {
    uint64_t g = dec_strips(sh) * (sh->dec_split ? sh->dec_split : 1u);
    return g > 0x7fffffffu ? 0x7fffffffu : (uint32_t)g;
}

uint32_t kf_cuda_gemm_decode_smem(const kf_cuda_gemm_shape *sh) {
    uint32_t mp = dec_mp(sh);
    uint32_t red = 4u * mp * (sh->bn + 4u) * 4u; /* the 4 warps' sums, pitch bn + 4 */
    if (sh->dec_reg)
        return red; /* no ring */
    uint32_t ring = sh->stages * (sh->bn + mp) * sh->dec_bk * 2u;
    if (sh->dec_tma)
        ring += 1024u; /* the slack that puts the ring on a 1024-byte boundary */
    return ring > red ? ring : red;
}

uint32_t kf_cuda_gemm_decode_blocks_per_sm(const kf_cuda_gemm_shape *sh) {
    uint32_t mp = dec_mp(sh);
    /* the register form: what its registers allow, blocks of 128 threads
     * (the accumulators, two chunks of B and of A a lane; sm_90a, no
     * spill: 118 at M 8 capped at 128, 202 at M 32; M 24 capped at 128
     * and M 32 at 168 took a stack frame) */
    if (sh->dec_reg)
        return mp <= 8 ? 4u : 2u;
    /* the ring: two blocks where it leaves room (the recipe sizes it so);
     * the TMA form at M > 32: one (two would cap its 160 threads' registers
     * below the 128 accumulators' need: a spill) */
    if (sh->dec_tma && mp > 32)
        return 1u;
    return kf_cuda_gemm_decode_smem(sh) <= 100u * 1024u ? 2u : 1u;
}

kf_status kf_cuda_codegen_gemm_decode(const kf_plan *plan, uint32_t group, const char *arch,
                                      const kf_cuda_gemm_shape *sh, const kf_mem *mem,
                                      kf_cuda_kernel *out) {
    cg c;
    kf_status st =
        cg_gemm_begin(&c, plan, group, arch, sh, mem, out, "kf_cuda_codegen_gemm_decode");
    if (st != KF_OK)
        return cg_end(&c, st);
    const kf_group *g = c.g;
    if (kf_cuda_arch_cc(arch) < 80)
        return cg_end(&c, cg_fail(&c, KF_ERR_UNSUPPORTED,
                                  "group %u (%s): the decode GEMM needs sm_80 or later "
                                  "(cp.async, mma.sync), not %s",
                                  g->id, g->name, arch));
    const kf_gemm_info *gm = &g->gemm;
    const kf_tensor *mm = cg_tensor(&c, gm->anchor[0]);
    /* the split's unit: a K step of the ring, a chunk of 32 of the register form */
    int64_t unit = sh->dec_reg ? 32 : sh->dec_bk;
    if (sh->m < 1 || sh->n < 1 || sh->k < 1 || sh->batch < 1 || (sh->bn != 64 && sh->bn != 128) ||
        (!sh->dec_reg &&
         ((sh->dec_bk != 64 && sh->dec_bk != 128) || sh->stages < 2 || sh->stages > 8)) ||
        unit < 1 || sh->dec_split < 1 || sh->dec_split > (uint64_t)((sh->k + unit - 1) / unit) ||
        sh->n > INT32_MAX || sh->k > INT32_MAX || sh->lda < 1 || sh->ldb < 1 ||
        dec_strips(sh) * sh->dec_split > 0x7fffffffu)
        return cg_end(&c, cg_fail(&c, KF_ERR_INVALID_ARGUMENT,
                                  "group %u (%s): bad decode GEMM shape %" PRId64 "x%" PRId64
                                  "x%" PRId64 " batch %" PRId64 ", strips of %u, K steps of %u, "
                                  "%u stages, split %u",
                                  g->id, g->name, sh->m, sh->n, sh->k, sh->batch, sh->bn,
                                  sh->dec_bk, sh->stages, sh->dec_split));
    const char *why = NULL;
    if (sh->m > 64)
        why = "M past 64 (the tokens are the MMA's N side: 8 n8 tiles at most)";
    else if (sh->dec_tma && kf_cuda_arch_cc(arch) < 90)
        why = "the TMA form needs sm_90 or later";
    else if (sh->dec_reg && (sh->m > 32 || sh->dec_tma))
        why = sh->dec_tma ? "the register form has no TMA form"
                          : "M past 32 in the register form (its registers)";
    else if (sh->batch != 1 || sh->a_batched || sh->b_batched)
        why = "a batched product (one weight a launch; the tiled kernels take batches)";
    else if (gm->n_anchors != 1 || sh->dual)
        why = "a SwiGLU pair (two weights)";
    else if (sh->a_norm || sh->a_fold)
        why = "a norm in the kernel (ring or fold): the decode kernel reads A as it is";
    else if (gm->a_prologue != sh->a_scratch)
        why = gm->a_prologue ? "a norm prologue on A (shape.a_scratch)" : "no norm prologue on A";
    else if (gm->row_epilogue || gm->row_split || (g->row.present && !gm->a_prologue))
        why = "a row-wise stage follows the GEMM";
    else if (mm->dtype != KF_DTYPE_BF16 && mm->dtype != KF_DTYPE_F16)
        why = "the operands are not bf16 or f16";
    else if (!sh->a_kmajor)
        why = "an M-major A (its tokens' K values must be contiguous)";
    else if (sh->lda % 8 != 0 || sh->ldb % 8 != 0)
        why = "an operand's rows are not 16-byte multiples (16-byte cp.async copies)";
    else if (gm->head_dim)
        why = "a head-split epilogue (the rotate-half partners are another thread's)";
    else if (!cg_gemm_space_is_product(g, sh))
        why = "the output space is not the product's [M, N]";
    if (why)
        return cg_end(&c,
                      cg_fail(&c, KF_ERR_UNSUPPORTED, "group %u (%s): %s", g->id, g->name, why));

    c.k->tmpl = KF_CUDA_TEMPLATE_GEMM_DECODE;
    cg_set_name(&c, "dec_");
    chunk_ctx *x = kf_mem_calloc(c.mem, 1, sizeof *x);
    if (!x)
        return cg_end(&c, cg_fail(&c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory"));
    cg_gemm_epi epi;
    st = cg_gemm_epi_prepare(&c, sh, x, &epi);
    if (st != KF_OK) {
        kf_mem_free(c.mem, x, sizeof *x);
        return cg_end(&c, st);
    }
    uint32_t mp = dec_mp(sh);
    uint64_t strips = dec_strips(sh);
    int p_ws = -1, p_cnt = -1;
    if (sh->dec_split > 1) {
        p_ws = cg_param_add(&c, KF_CUDA_PARAM_PARTIALS, gm->anchor[0], KF_DTYPE_F32,
                            strips * sh->dec_split * mp * sh->bn * 4u);
        p_cnt = cg_param_add(&c, KF_CUDA_PARAM_COUNTERS, gm->anchor[0], KF_DTYPE_I32, strips * 4u);
        if (c.st != KF_OK) {
            cg_gemm_epi_release(&c, &epi);
            kf_mem_free(c.mem, x, sizeof *x);
            return cg_end(&c, c.st);
        }
    }

    kf_cuda_kernel *k = c.k;
    k->vec = 1;
    k->launch.block = sh->dec_tma ? 160 : 128; /* the TMA form: + its producer warp */
    k->launch.work_items = kf_cuda_gemm_decode_grid(sh);
    k->launch.items_per_block = 1;
    /* Two blocks an SM where the ring leaves room, STAGES - 1 steps of B in
     * flight in each; the register form 3 or 4, two chunks a warp */
    uint32_t smem = kf_cuda_gemm_decode_smem(sh);
    uint32_t minb = kf_cuda_gemm_decode_blocks_per_sm(sh);
    k->launch.blocks_per_sm = minb;
    k->launch.shared_bytes = smem;

    cg_emit_head(&c, "GEMM group, M <= 64 (B streamed once, split-K, epilogue on the sums)");
    cg_printf(&c.s,
              "#define KF_M %" PRId64 "LL\n#define KF_N %" PRId64 "LL\n#define KF_K %" PRId64
              "LL\n#define KF_LDA %" PRId64 "LL\n#define KF_LDB %" PRId64
              "LL\n#define KF_B_KMAJOR %d\n#define KF_AB \"%s\"\n#define KF_MT 4\n"
              "#define KF_RG %u\n#define KF_BK %u\n#define KF_NT %u\n#define KF_STAGES %u\n"
              "#define KF_SPLIT %u\n#define KF_MINB %u\n#define KF_TMA %d\n",
              sh->m, sh->n, sh->k, sh->lda, sh->ldb, sh->b_kmajor ? 1 : 0,
              mm->dtype == KF_DTYPE_BF16 ? "bf16" : "f16", sh->bn / 64u, sh->dec_bk, mp / 8u,
              sh->stages, sh->dec_split, minb, sh->dec_tma ? 1 : 0);
    if (sh->dec_reg)
        cg_puts(&c.s, "#define KF_REG 1\n");
    if (sh->dec_split > 1)
        cg_printf(&c.s, "#define KF_WS p%d\n#define KF_CNT p%d\n", p_ws, p_cnt);
    cg_puts(&c.s, "\n");
    cg_gemm_emit_fast_ops(&c);
    cg_gemm_epi_emit(&c, sh, x, &epi);
    if (sh->dec_tma)
        cg_puts(&c.s, kf_cuda_tpl_hopper);
    cg_puts(&c.s, kf_cuda_tpl_gemm_decode);
    kf_mem_free(c.mem, x, sizeof *x);
    return cg_end(&c, c.st);
}
