/*
 * cg_gemm_simt.c -- a whole f32 or f64 GEMM group as one kernel
 * (templates/gemm_simt.cuh): the matmul by fused multiply-adds (FFMA, DFMA)
 * in the operands' own precision from a cp.async ring in shared memory, and
 * every write of the group computed from the accumulator registers by the
 * group's own scalar expressions -- the epilogue cg_gemm_epi.c emits for the
 * tensor-core kernels, here on f32 or f64 accumulators.
 *
 *   plan group + kf_cuda_gemm_shape (from the recipe: sizes, operand majors
 *   and strides, batching, tile, ring depth, which operands take 16-byte
 *   copies)
 *     --> params: one IN per tensor the epilogue loads, one OUT per write
 *         (A and B are not params: the recipe puts their addresses first)
 *     --> source: the head, the problem defines (sizes and strides are
 *         constants, one kernel per shape), the branch-free sigmoid family,
 *         kf_epi, then the template.
 *
 * Why a SIMT kernel: the reference evaluates f32 and f64 products exactly in
 * their precision, so no tensor-core path (TF32 rounds the operands to 10
 * bits of mantissa) meets their tolerance; without this kernel every f32 /
 * f64 GEMM group ran as cuBLASLt plus a separate epilogue kernel.
 *
 * Runs on any arch from sm_80 (cp.async). A norm prologue comes from the
 * prologue kernel's scratch (A normalized, a plain main loop); a SwiGLU pair
 * reads both B operands into one B tile (gate's columns, then the up
 * projection's) and each thread holds both products of its outputs. A row
 * epilogue (a norm or softmax of the output's rows) runs in the tile for
 * f32 where the rows are whole in one column tile (N <= 256: 64 x 256 or
 * 32 x 256 tiles for the widest, their 32 column threads one warp), the
 * rows' statistics reduced by shuffles (cg_gemm_epi.c's kf_pre and kf_epi);
 * beyond that it is the recipe's split form (this kernel writes the norm's
 * input, a row pass follows).
 *
 * What it does not take (KF_ERR_UNSUPPORTED, and the recipe keeps cuBLASLt):
 * a norm in the kernel (ring or fold), a row-wise stage, a head-split
 * epilogue, a write that is not the whole output, an expression outside
 * the output space.
 */
#include "codegen/cuda/cg.h"

#include "codegen/cuda/cg_gemm.h"
#include "codegen/cuda/cg_gemm_set.h"
#include "codegen/cuda/templates.h"

/* K step of a tile: 16 for f32's 128 x 128 tile, else 8. ptxas hoists the
 * shared loads of a whole step ahead of its FMAs (8 B values a K value):
 * with 16 K values a smaller tile's thread held ~180 registers, most of them
 * B values loaded early, and spilled under a cap of 128 (sm_80, ptxas 13.0). */
uint32_t kf_cuda_gemm_simt_bk(uint32_t bm, uint32_t bn, size_t es) {
    return es == 4 && bm == 128 && bn == 128 ? 16u : 8u;
}

uint32_t kf_cuda_gemm_simt_smem(uint32_t bm, uint32_t bn, bool dual, uint32_t stages, size_t es) {
    return stages * (bm + bn * (dual ? 2u : 1u)) * kf_cuda_gemm_simt_bk(bm, bn, es) * (uint32_t)es;
}

/* Whether the tile shape is one the template takes for elements of es
 * bytes: 8 or 16 column threads (32 for a row epilogue's 256 columns),
 * whole rows a thread, an M-major A's column of a thread read in whole
 * loads. */
static bool simt_tile_ok(uint32_t bm, uint32_t bn, size_t es, bool a_kmajor, bool row) {
    if (bn != 64 && bn != 128 && !(row && bn == 256))
        return false;
    uint32_t tx = bn / 8, ty = 256 / tx;
    if (bm % ty != 0 || bm > 128)
        return false;
    uint32_t tm = bm / ty, v = (uint32_t)(16 / es);
    return tm >= 1 && (a_kmajor || tm % v == 0 || (tm == 2 && es == 4));
}

kf_status kf_cuda_codegen_gemm_simt(const kf_plan *plan, uint32_t group, const char *arch,
                                    const kf_cuda_gemm_shape *sh, const kf_mem *mem,
                                    kf_cuda_kernel *out) {
    cg c;
    kf_status st = cg_gemm_begin(&c, plan, group, arch, sh, mem, out, "kf_cuda_codegen_gemm_simt");
    if (st != KF_OK)
        return cg_end(&c, st);
    const kf_group *g = c.g;
    if (kf_cuda_arch_cc(arch) < 80)
        return cg_end(&c, cg_fail(&c, KF_ERR_UNSUPPORTED,
                                  "group %u (%s): the SIMT GEMM needs sm_80 or later (cp.async), "
                                  "not %s",
                                  g->id, g->name, arch));
    const kf_gemm_info *gm = &g->gemm;
    const kf_tensor *mm = cg_tensor(&c, gm->anchor[0]);
    bool f64 = mm->dtype == KF_DTYPE_F64;
    size_t es = f64 ? 8 : 4;
    if (sh->m < 1 || sh->n < 1 || sh->k < 1 || sh->batch < 1 ||
        !simt_tile_ok(sh->bm, sh->bn, es, sh->a_kmajor, gm->row_epilogue && !gm->row_split) ||
        (sh->dual && sh->bn != 64) || sh->stages < 2 || sh->stages > 8 || sh->m > INT32_MAX ||
        sh->n > INT32_MAX || sh->k > INT32_MAX || sh->batch > 65535 || sh->lda < 1 || sh->ldb < 1 ||
        sh->sa < 0 || sh->sb < 0 ||
        (sh->dual && (sh->ldb2 < 1 || sh->sb2 < 0 || (sh->sb2 == 0) != (sh->sb == 0))))
        return cg_end(&c, cg_fail(&c, KF_ERR_INVALID_ARGUMENT,
                                  "group %u (%s): bad SIMT GEMM shape %" PRId64 "x%" PRId64
                                  "x%" PRId64 " batch %" PRId64 ", tile %ux%u%s, %u stages",
                                  g->id, g->name, sh->m, sh->n, sh->k, sh->batch, sh->bm, sh->bn,
                                  sh->dual ? " (pair)" : "", sh->stages));
    const char *why = NULL;
    if (gm->n_anchors != (sh->dual ? 2 : 1))
        why = sh->dual ? "a dual kernel needs two GEMMs sharing A"
                       : "two GEMMs share A (SwiGLU): the shape must be dual";
    else if (sh->a_norm || sh->a_fold)
        why = "a norm in the kernel (ring or fold): the SIMT kernel reads A from scratch";
    else if (gm->a_prologue != sh->a_scratch)
        why = gm->a_prologue ? "a norm prologue on A (shape.a_scratch)" : "no norm prologue on A";
    else if (gm->row_split || (g->row.present && !gm->a_prologue && !gm->row_epilogue))
        why = "a row-wise stage follows the GEMM";
    else if (gm->row_epilogue && (f64 || sh->dual || sh->n > sh->bn))
        why = "a row epilogue in the tile needs f32 and whole rows in one column tile (N <= the "
              "tile's width)";
    else if (mm->dtype != KF_DTYPE_F32 && mm->dtype != KF_DTYPE_F64)
        why = "the operands are not f32 or f64";
    else if (gm->head_dim)
        why = "a head-split epilogue (the rotate-half partners are another thread's)";
    else if (!cg_gemm_space_is_product(g, sh))
        why = "the output space is not the product's [batch, M, N]";
    if (why)
        return cg_end(&c,
                      cg_fail(&c, KF_ERR_UNSUPPORTED, "group %u (%s): %s", g->id, g->name, why));

    c.k->tmpl = KF_CUDA_TEMPLATE_GEMM_SIMT;
    cg_set_name(&c, "simt_");
    chunk_ctx *x = NULL;
    cg_gemm_epi epi;
    if ((st = cg_gemm_epi_alloc(&c, sh, NULL, &x, &epi)) != KF_OK)
        return cg_end(&c, st);

    kf_cuda_kernel *k = c.k;
    k->vec = 1;
    k->launch.block = 256;
    int64_t tiles = ((sh->m + sh->bm - 1) / sh->bm) * ((sh->n + sh->bn - 1) / sh->bn);
    k->launch.work_items = (uint64_t)tiles;
    k->launch.items_per_block = 1;
    /* Two blocks an SM (128 registers a thread) where the accumulators take
     * 32 registers or fewer (the 64 x 64 tiles); with 64 (f32's 128 x 128
     * and pair, f64's 128 x 64) ptxas spilled under that cap (sm_80, ptxas
     * 13.0) and takes ~150 registers without it. */
    uint32_t bk = kf_cuda_gemm_simt_bk(sh->bm, sh->bn, es);
    uint32_t acc_regs = (sh->bm * sh->bn * (sh->dual ? 2u : 1u) / 256u) * (uint32_t)(es / 4);
    uint32_t minb = acc_regs <= 32 ? 2u : 1u;
    k->launch.blocks_per_sm = minb;
    k->launch.shared_bytes = kf_cuda_gemm_simt_smem(sh->bm, sh->bn, sh->dual, sh->stages, es);

    cg_emit_head(&c, "GEMM group (FFMA / DFMA, cp.async, epilogue on the accumulators)");
    cg_printf(&c.s,
              "#define KF_T %s\n#define KF_M %" PRId64 "LL\n#define KF_N %" PRId64
              "LL\n#define KF_K %" PRId64 "LL\n#define KF_BM %u\n#define KF_BN %u\n"
              "#define KF_BK %u\n#define KF_STAGES %u\n#define KF_MINB %u\n"
              "#define KF_A_KMAJOR %d\n#define KF_B_KMAJOR %d\n#define KF_A_VEC %d\n"
              "#define KF_B_VEC %d\n#define KF_LDA %" PRId64 "LL\n#define KF_LDB %" PRId64
              "LL\n#define KF_SA %" PRId64 "LL\n#define KF_SB %" PRId64 "LL\n",
              f64 ? "double" : "float", sh->m, sh->n, sh->k, sh->bm, sh->bn, bk, sh->stages, minb,
              sh->a_kmajor ? 1 : 0, sh->b_kmajor ? 1 : 0, sh->a_vec ? 1 : 0,
              sh->b_vec && !sh->b_kmajor ? 1 : 0, sh->lda, sh->ldb, sh->sa, sh->sb);
    if (sh->dual)
        cg_printf(&c.s,
                  "#define KF_DUAL 1\n#define KF_LDB2 %" PRId64 "LL\n#define KF_SB2 %" PRId64
                  "LL\n",
                  sh->ldb2, sh->sb2);
    cg_puts(&c.s, "\n");
    cg_gemm_emit_fast_ops(&c);
    cg_gemm_epi_emit(&c, sh, x, &epi);
    cg_puts(&c.s, kf_cuda_tpl_gemm_simt);
    kf_mem_free(c.mem, x, sizeof *x);
    return cg_end(&c, c.st);
}
