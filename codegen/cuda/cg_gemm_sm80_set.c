/*
 * cg_gemm_sm80_set.c -- a GEMM sibling set (the plan's gemm.sib_*: the Q, K
 * and V projections of one normalized input) as ONE sm_80 kernel over its
 * members' concatenated columns (templates/gemm_sm80.cuh with KF_SIB), as
 * cg_gemm_sm90_set.c does on sm_90a.
 *
 * Each member alone is a grid of its own tiles with its own ragged last
 * wave; together their column tiles are one N range: the swizzled raster
 * walks them all (KF_TILES_N, the sum of the members' tile columns; each
 * member's columns start on a tile), so the blocks in flight share A's rows
 * in L2 across the members, and the set has one tail instead of one per
 * member.
 *
 *   members' groups + shapes (as each would run alone, alike but in N and
 *   B's row stride)
 *     --> one param list: every member's loads and outputs, the statistics
 *         scratch shared (cg_param_add keys params by tensor)
 *     --> source: the head, the problem defines (KF_SIB, KF_TILES_N), the
 *         template up to "kf:member begin", then per member j, in namespace
 *         kf_s<j> with KF_N its N: its fold, its kf_epi and the template's
 *         epilogue helpers ("kf:member begin" .. "kf:member end"); then
 *         kf_sib_split, the members' B pointers, N and B row strides
 *         (KF_SIB_BPTRS, KF_SIB_B, KF_SIB_NB, KF_SIB_LDB) and the dispatch
 *         macros; then the rest of the template, the kernel, which copies
 *         B from the tile's member and runs its epilogue (KF_SIB_DO).
 *
 * Its arguments: A's address, member 0's B, kf_sb1 (member 1's B), ...,
 * then the params.
 */
#include "codegen/cuda/cg.h"

#include "codegen/cuda/cg_gemm_set.h"

#include "codegen/cuda/templates.h"

/* Why member j (generator c, shape b) cannot share the set's kernel with
 * member 0's shape a (cg_set_why_fn). */
static const char *member_why(cg *c, const kf_cuda_gemm_shape *a, const kf_cuda_gemm_shape *b) {
    if (b->batch != 1 || b->dual || b->a_norm || b->x_scratch)
        return "a member is batched, a SwiGLU pair, normalized in the ring or split";
    if (a->m != b->m || a->k != b->k || a->a_kmajor != b->a_kmajor || a->lda != b->lda)
        return "the members read A differently";
    if (a->b_kmajor != b->b_kmajor)
        return "the members' B operands are laid out differently";
    if (a->bm != b->bm || a->bn != b->bn || a->warps != b->warps || a->stages != b->stages)
        return "the members' tiles differ";
    if (a->a_fold != b->a_fold || a->a_scratch != b->a_scratch)
        return "the members take the norm in different forms";
    if (b->ldb < 1 || b->sa != 0 || b->sb != 0)
        return "a member's B row stride or batch strides";
    const char *why = cg_gemm_sm80_why(c, b);
    if (!why && c->g->gemm.row_epilogue)
        why = "a row epilogue (the set's kernel runs none)";
    return why;
}

kf_status kf_cuda_codegen_gemm_sm80_set(const kf_plan *plan, const uint32_t *groups, uint32_t n,
                                        const char *arch, const kf_cuda_gemm_shape *shapes,
                                        const kf_mem *mem, kf_cuda_kernel *out) {
    cg_set set; /* (no shapes: as no groups, a NULL argument) */
    kf_status st = cg_set_begin(&set, plan, shapes ? groups : NULL, n, arch, mem, out,
                                "kf_cuda_codegen_gemm_sm80_set");
    if (st != KF_OK)
        return st;
    cg *c0 = &set.mb[0].c;
#define SET_NO(...) return cg_set_end(&set, cg_fail(c0, KF_ERR_UNSUPPORTED, __VA_ARGS__))
    if (kf_cuda_arch_cc(arch) < 80)
        SET_NO("GEMM sibling set: the mma.sync kernel needs sm_80 or later, not %s", arch);
    const kf_cuda_gemm_shape *sh = &shapes[0];
    bool tile_ok = (sh->bm == 128 && sh->bn == 128 && (sh->warps == 4 || sh->warps == 8)) ||
                   (sh->bm == 64 && sh->bn == 64 && sh->warps == 4);
    if (!tile_ok || sh->stages < 2 || sh->stages > 8 || sh->m < 1 || sh->k < 1 ||
        sh->m > INT32_MAX || sh->k > INT32_MAX || sh->lda < 1)
        return cg_set_end(&set, cg_fail(c0, KF_ERR_INVALID_ARGUMENT,
                                        "GEMM sibling set: bad shape %" PRId64 "x..x%" PRId64
                                        ", tile %ux%u on %u warps, %u stages",
                                        sh->m, sh->k, sh->bm, sh->bn, sh->warps, sh->stages));
    const kf_tensor *mm0 = cg_tensor(c0, c0->g->gemm.anchor[0]);
    if ((st = cg_set_members_check(&set, shapes, member_why)) != KF_OK)
        return cg_set_end(&set, st);
    int64_t tiles = set.tiles_n * ((sh->m + sh->bm - 1) / sh->bm);
    if (tiles > INT32_MAX)
        SET_NO("GEMM sibling set: more than 2^31 tiles");

    kf_cuda_kernel *k = out;
    k->tmpl = KF_CUDA_TEMPLATE_GEMM_SM80;
    char prefix[24];
    snprintf(prefix, sizeof prefix, "sib%u_mma_", n);
    cg_set_name(c0, prefix);
    /* blocks an SM as the single kernel's (cg_gemm_sm80.c) */
    uint32_t minb = sh->bm == 128 ? 2u : 4u;
    k->vec = 1;
    k->launch.block = 32u * sh->warps;
    k->launch.work_items = (uint64_t)tiles;
    k->launch.items_per_block = 1;
    k->launch.blocks_per_sm = minb;
    k->launch.shared_bytes = kf_cuda_gemm_sm80_smem(sh->bm, sh->bn, sh->stages);

    char what[200];
    snprintf(what, sizeof what,
             "GEMM sibling set of %u members as one GEMM over their concatenated columns (N "
             "%" PRId64 "; mma.sync, cp.async, epilogue on the accumulators)",
             n, set.n_all);
    cg_set_emit_head(&set, what);
    cg_printf(&c0->s,
              "#define KF_M %" PRId64 "LL\n#define KF_N %" PRId64 "LL\n#define KF_K %" PRId64
              "LL\n#define KF_BM %u\n#define KF_BN %u\n#define KF_WM 2\n#define KF_WN %u\n"
              "#define KF_STAGES %u\n#define KF_MINB %u\n#define KF_A_KMAJOR %d\n"
              "#define KF_B_KMAJOR %d\n#define KF_LDA %" PRId64 "LL\n#define KF_LDB %" PRId64
              "LL\n#define KF_SA 0LL\n#define KF_SB 0LL\n#define KF_AB \"%s\"\n",
              sh->m, sh->n, sh->k, sh->bm, sh->bn, sh->warps / 2u, sh->stages, minb,
              sh->a_kmajor ? 1 : 0, sh->b_kmajor ? 1 : 0, sh->lda, sh->ldb,
              mm0->dtype == KF_DTYPE_BF16 ? "bf16" : "f16");
    cg_printf(&c0->s, "#define KF_SIB %u\n#define KF_TILES_N %" PRId64 "\n", n, set.tiles_n);
    if (sh->a_fold) /* before the template's head, which reads them */
        cg_printf(&c0->s, "#define KF_A_FOLD 1\n#define KF_FOLD_LN %d\n",
                  set.mb[0].fold.f.ln ? 1 : 0);
    cg_puts(&c0->s, "\n");
    cg_gemm_emit_fast_ops(c0);

    static const char *const marks[2] = {"/* ---- kf:member begin", "/* ---- kf:member end"};
    const char *part[3];
    size_t plen[3];
    if (!cg_set_split_template(kf_cuda_tpl_gemm_sm80, 2, marks, part, plen))
        return cg_set_end(&set, cg_fail(c0, KF_ERR_INTERNAL,
                                        "GEMM sibling set: gemm_sm80.cuh lacks its kf:member "
                                        "markers"));
    cg_set_put(&c0->s, part[0], plen[0]);
    cg_set_emit_members(&set, shapes, part[1], plen[1]);
    cg_set_emit_split(&set);
    /* the members' B: pointer, N (the copies' bound) and row stride */
    cg_puts(&c0->s, "#define KF_SIB_BPTRS");
    for (uint32_t j = 1; j < n; j++)
        cg_printf(&c0->s, " const unsigned short *__restrict__ kf_sb%u,", j);
    cg_puts(&c0->s, "\n#define KF_SIB_B(j) (");
    for (uint32_t j = 1; j < n; j++)
        cg_printf(&c0->s, "(j) == %u ? kf_sb%u : ", j, j);
    cg_puts(&c0->s, "kf_pb)\n#define KF_SIB_NB(j) (");
    for (uint32_t j = 1; j < n; j++)
        cg_printf(&c0->s, "(j) == %u ? %" PRId64 "LL : ", j, shapes[j].n);
    cg_printf(&c0->s, "%" PRId64 "LL)\n#define KF_SIB_LDB(j) (", shapes[0].n);
    for (uint32_t j = 1; j < n; j++)
        cg_printf(&c0->s, "(j) == %u ? %" PRId64 "LL : ", j, shapes[j].ldb);
    cg_printf(&c0->s, "%" PRId64 "LL)\n", shapes[0].ldb);
    cg_set_emit_dispatch(&set);
    cg_set_put(&c0->s, part[2], plen[2]);
    return cg_set_end(&set, c0->st);
#undef SET_NO
}
