/*
 * cg_gemm_sm80.c -- a whole GEMM group as one sm_80 kernel
 * (templates/gemm_sm80.cuh): the matmul by mma.sync m16n8k16 from a cp.async
 * ring in shared memory (ldmatrix, XOR-swizzled tiles), and every write of
 * the group computed from the f32 accumulator registers by the group's own
 * scalar expressions -- the same epilogue as the sm_90a kernel's, emitted by
 * cg_gemm_epi.c -- so the epilogue costs no pass over memory.
 *
 *   plan group + kf_cuda_gemm_shape (from the recipe: sizes, operand majors
 *   and strides, batching, tile, ring depth)
 *     --> params: one IN per tensor the epilogue loads, one OUT per write
 *         (A and B are not params: the recipe puts their addresses first)
 *     --> source: the head (common.cuh, KF_PARAMS, the gelu table), the
 *         problem defines (sizes and strides are constants: one kernel per
 *         shape, as the sm_90a kernel), the branch-free sigmoid family,
 *         kf_epi, then the template.
 *
 * Runs on any arch from sm_80 (mma.sync, ldmatrix and cp.async are there
 * from 8.0 on): the recipe takes it on 8.x, measured against cuBLASLt by
 * default (KF_GEMM_AUTO) or alone (KF_GEMM_GENERATED), and on 9.x when
 * forced (KF_GEMM_SM80), which is how its numerics are tested on the H100s
 * at hand.
 *
 * A norm prologue on A comes as on the sm_90a kernel: folded into B (the
 * recipe's pre-passes write the row statistics and diag(gamma) B, and
 * kf_fold applies them to the accumulators before the epilogue) or from the
 * prologue kernel's scratch (A normalized, a plain main loop).
 *
 * A SwiGLU pair (shape.dual, 128 x 128 tiles on 4 warps) reads both B
 * operands into one B tile, interleaved per warp, and its epilogue gets
 * both products of each output (the template's head).
 *
 * A row epilogue (a norm or softmax of the output's rows, N <= 256:
 * gemm.row_epilogue) runs in the tile: 128 x 128 tiles on 4 warps, or 128 x
 * 256 on 8 (warp tiles of 64 x 64 both), cg_gemm_epi.c's kf_pre and kf_epi,
 * the rows' statistics reduced by the template (KF_ROW_EPI).
 *
 * A GEMM sibling set can run as one such kernel over its members'
 * concatenated columns (cg_gemm_sm80_set.c, which asks cg_gemm_sm80_why of
 * each member).
 *
 * What it does not take (KF_ERR_UNSUPPORTED, and the recipe keeps cuBLASLt):
 * the norm in the ring, a row epilogue wider than the tile, a write that is
 * not the whole output, an expression outside the output space.
 *
 * Speed, read from the SASS (sm_80, 128 x 128 on 4 warps): the main loop is
 * ~340 instructions per K step of 32 for its 64 HMMA and 16 LDSM, ~250 of
 * them the 8 cp.async copies' 64-bit addresses and zero-fill bounds, redone
 * every step. Where mma.sync is fast next to the issue rate (Hopper: 313
 * TFLOP/s on an H200 against cuBLASLt's 796), that issue work, one barrier
 * a step and fragments not double-buffered across steps set the pace. The
 * next step: row pointers and row predicates computed once a tile, K's
 * residue only in the last step, and the next step's fragments loaded under
 * this step's MMAs.
 */
#include "codegen/cuda/cg.h"

#include "codegen/cuda/cg_gemm.h"
#include "codegen/cuda/cg_gemm_set.h"
#include "codegen/cuda/templates.h"

uint32_t kf_cuda_gemm_sm80_smem(uint32_t bm, uint32_t bn, uint32_t stages) {
    return stages * (bm + bn) * 32u * 2u;
}

const char *cg_gemm_sm80_why(const cg *c, const kf_cuda_gemm_shape *sh) {
    const kf_group *g = c->g;
    const kf_gemm_info *gm = &g->gemm;
    const kf_tensor *mm = cg_tensor(c, gm->anchor[0]);
    if (gm->n_anchors != (sh->dual ? 2 : 1))
        return sh->dual ? "a dual kernel needs two GEMMs sharing A"
                        : "two GEMMs share A (SwiGLU): the shape must be dual";
    if (sh->dual && (sh->bm != 128 || sh->bn != 128 || sh->warps != 4 || sh->ldb2 < 1 ||
                     sh->sb2 < 0 || (sh->sb2 == 0) != (sh->sb == 0)))
        return "the pair takes 128 x 128 tiles on 4 warps and a second B batched as the first";
    if (sh->a_norm)
        return "a norm applied to A's tiles in the ring: the sm_80 kernel does not take it";
    if (sh->a_scratch && sh->a_fold)
        return "a norm prologue both in scratch and folded into B";
    if (gm->a_prologue != (sh->a_scratch || sh->a_fold))
        return gm->a_prologue ? "a norm prologue on A (shape.a_scratch or a_fold)"
                              : "no norm prologue on A";
    if (gm->row_split || (g->row.present && !gm->a_prologue && !gm->row_epilogue))
        return "a row-wise stage follows the GEMM";
    if (gm->row_epilogue &&
        (sh->n > sh->bn || sh->dual || sh->bm != 128 || sh->warps != sh->bn / 32))
        return "a row epilogue needs whole rows in one column tile (N <= the tile's width) on "
               "warp tiles of 64 x 64";
    if (!cg_gemm_dtype_ok(mm->dtype))
        return "the operands are not bf16 or f16";
    if (!cg_gemm_space_is_product(g, sh))
        return "the output space is not the product's [batch, M, N]";
    return NULL;
}

kf_status kf_cuda_codegen_gemm_sm80(const kf_plan *plan, uint32_t group, const char *arch,
                                    const kf_cuda_gemm_shape *sh, const kf_mem *mem,
                                    kf_cuda_kernel *out) {
    cg c;
    kf_status st = cg_gemm_begin(&c, plan, group, arch, sh, mem, out, "kf_cuda_codegen_gemm_sm80");
    if (st != KF_OK)
        return cg_end(&c, st);
    const kf_group *g = c.g;
    if (kf_cuda_arch_cc(arch) < 80)
        return cg_end(&c, cg_fail(&c, KF_ERR_UNSUPPORTED,
                                  "group %u (%s): the mma.sync GEMM needs sm_80 or later, not %s",
                                  g->id, g->name, arch));
    /* 128 x 256 on 8 warps of 64 x 64: a row epilogue's rows of N <= 256 */
    bool tile_ok = (sh->bm == 128 && sh->bn == 128 && (sh->warps == 4 || sh->warps == 8)) ||
                   (sh->bm == 64 && sh->bn == 64 && sh->warps == 4) ||
                   (sh->bm == 128 && sh->bn == 256 && sh->warps == 8 && !sh->dual);
    if (sh->m < 1 || sh->n < 1 || sh->k < 1 || sh->batch < 1 || !tile_ok || sh->stages < 2 ||
        sh->stages > 8 || sh->m > INT32_MAX || sh->n > INT32_MAX || sh->k > INT32_MAX ||
        sh->batch > 65535 || sh->lda < 1 || sh->ldb < 1 || sh->sa < 0 || sh->sb < 0)
        return cg_end(&c, cg_fail(&c, KF_ERR_INVALID_ARGUMENT,
                                  "group %u (%s): bad GEMM shape %" PRId64 "x%" PRId64 "x%" PRId64
                                  " batch %" PRId64 ", tile %ux%u on %u warps, %u stages",
                                  g->id, g->name, sh->m, sh->n, sh->k, sh->batch, sh->bm, sh->bn,
                                  sh->warps, sh->stages));
    const kf_tensor *mm = cg_tensor(&c, g->gemm.anchor[0]);
    const char *why = cg_gemm_sm80_why(&c, sh);
    if (why)
        return cg_end(&c,
                      cg_fail(&c, KF_ERR_UNSUPPORTED, "group %u (%s): %s", g->id, g->name, why));

    c.k->tmpl = KF_CUDA_TEMPLATE_GEMM_SM80;
    cg_set_name(&c, "mma_");
    chunk_ctx *x = NULL;
    cg_gemm_fold fold;
    cg_gemm_epi epi;
    if ((st = cg_gemm_epi_alloc(&c, sh, &fold, &x, &epi)) != KF_OK)
        return cg_end(&c, st);

    /* Warps 2 x (warps / 2): a 128 x 128 tile on 4 warps of 64 x 64 (128
     * accumulators a thread; per 16 K values a warp reads 4 KiB of shared
     * memory for 32 MMAs) or 8 of 64 x 32 (3 KiB for 16 MMAs: at two
     * blocks an SM, shared-memory reads then take ~3/4 of the MMAs' time
     * on an A100, 128 bytes a clock against 1024 FMAs). Both fit two blocks
     * an SM (ptxas, sm_80: 242 registers and no local memory; 128, capped,
     * and an 8-byte stack frame with a residual epilogue). */
    bool big = sh->bm == 128;
    /* 8 warps of 64 x 64 (the 128 x 256 tile) need their 242 registers: one block an SM */
    uint32_t minb = !big ? 4u : sh->bn == 256 ? 1u : 2u;
    kf_cuda_kernel *k = c.k;
    k->vec = 1;
    k->launch.block = 32u * sh->warps;
    uint32_t on = sh->dual ? sh->bn / 2 : sh->bn; /* output columns of a tile */
    int64_t tiles = ((sh->m + sh->bm - 1) / sh->bm) * ((sh->n + on - 1) / on);
    k->launch.work_items = (uint64_t)tiles;
    k->launch.items_per_block = 1;
    k->launch.blocks_per_sm = minb;
    k->launch.shared_bytes = kf_cuda_gemm_sm80_smem(sh->bm, sh->bn, sh->stages);

    cg_emit_head(&c, "GEMM group (mma.sync, cp.async, epilogue on the accumulators)");
    cg_printf(&c.s,
              "#define KF_M %" PRId64 "LL\n#define KF_N %" PRId64 "LL\n#define KF_K %" PRId64
              "LL\n#define KF_BM %u\n#define KF_BN %u\n#define KF_WM 2\n#define KF_WN %u\n"
              "#define KF_STAGES %u\n#define KF_MINB %u\n#define KF_A_KMAJOR %d\n"
              "#define KF_B_KMAJOR %d\n#define KF_LDA %" PRId64 "LL\n#define KF_LDB %" PRId64
              "LL\n#define KF_SA %" PRId64 "LL\n#define KF_SB %" PRId64
              "LL\n#define KF_AB \"%s\"\n",
              sh->m, sh->n, sh->k, sh->bm, sh->bn, sh->warps / 2u, sh->stages, minb,
              sh->a_kmajor ? 1 : 0, sh->b_kmajor ? 1 : 0, sh->lda, sh->ldb, sh->sa, sh->sb,
              mm->dtype == KF_DTYPE_BF16 ? "bf16" : "f16");
    if (sh->dual)
        cg_printf(&c.s,
                  "#define KF_DUAL 1\n#define KF_LDB2 %" PRId64 "LL\n#define KF_SB2 %" PRId64
                  "LL\n",
                  sh->ldb2, sh->sb2);
    cg_puts(&c.s, "\n");
    cg_gemm_emit_fast_ops(&c);
    if (sh->a_fold)
        cg_gemm_fold_emit(&c, &fold);
    cg_gemm_epi_emit(&c, sh, x, &epi);
    cg_puts(&c.s, kf_cuda_tpl_gemm_sm80);
    kf_mem_free(c.mem, x, sizeof *x);
    return cg_end(&c, c.st);
}
