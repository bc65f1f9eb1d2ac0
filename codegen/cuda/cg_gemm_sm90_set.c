/*
 * cg_gemm_sm90_set.c -- a GEMM sibling set (the plan's gemm.sib_*: the Q, K
 * and V projections of one normalized input) as ONE sm_90a kernel over its
 * members' concatenated columns (templates/gemm_sm90.cuh with KF_SIB).
 *
 * Each member alone is a persistent GEMM with its own ragged last wave;
 * together their column tiles are one N range: the scheduler's swizzled
 * raster walks them all (KF_TILES_N, the sum of the members' tile columns;
 * each member's columns start on a tile), so A's tiles are read once per
 * tile row of the set and the set has one tail instead of one per member.
 *
 *   members' groups + shapes (as each would run alone, alike but in N)
 *     --> one param list: every member's loads and outputs, the statistics
 *         scratch shared (cg_param_add keys params by tensor)
 *     --> source: the head, the problem defines (KF_SIB, KF_TILES_N), the
 *         template up to "kf:member begin", then per member j, in namespace
 *         kf_s<j> with KF_N its N: its fold, its kf_epi and the template's
 *         epilogue helpers ("kf:member begin" .. "kf:member end"); then
 *         kf_sib_split (a set tile column -> member, the member's own column)
 *         and the dispatch macros; then the rest of the template, whose
 *         epilogue block ("kf:epilogue begin" .. "end") is emitted once per
 *         member inside a switch on the tile's member, under `using namespace
 *         kf_s<j>` and with `tc` the member's output map.
 *
 * The tensor maps (kernel arguments before the params): A, member 0's B
 * (and output map with the TMA-store epilogue), then kf_tb1 (kf_tc1), ...
 *
 * In 2-CTA clusters (internal KF_CUDA_RECIPE_GEMM_CLUSTER2, when every member
 * alone takes them) the raster walks pairs of tile rows of one set column:
 * one member's B, each member's map boxed in halves as its own step made it.
 */
#include "codegen/cuda/cg.h"

#include "codegen/cuda/cg_gemm_set.h"

#include "codegen/cuda/templates.h"

/* Why member j (generator c, shape b) cannot share the set's kernel with
 * member 0's shape a (cg_set_why_fn). */
static const char *member_why(cg *c, const kf_cuda_gemm_shape *a, const kf_cuda_gemm_shape *b) {
    if (b->batch != 1 || b->dual || b->a_norm || b->sk_grid || b->x_scratch)
        return "a member is batched, a SwiGLU pair, normalized in the ring, stream-K or split";
    if (a->cluster != b->cluster)
        return "the members' clusters differ";
    if (a->m != b->m || a->k != b->k || a->a_kmajor != b->a_kmajor)
        return "the members read A differently";
    if (a->b_kmajor != b->b_kmajor)
        return "the members' B operands are laid out differently";
    if (a->bn != b->bn || a->pingpong != b->pingpong || a->stages != b->stages)
        return "the members' tiles differ (each alone would take another)";
    if (a->a_fold != b->a_fold || a->a_scratch != b->a_scratch || a->a_gscale != b->a_gscale)
        return "the members take the norm in different forms";
    if (a->epi_tma != b->epi_tma || a->epi_staged != b->epi_staged)
        return "the members' epilogues store differently";
    const char *why = cg_gemm_sm90_why(c, b);
    if (!why && c->g->gemm.row_split)
        why = "the split row form";
    return why;
}

kf_status kf_cuda_codegen_gemm_sm90_set(const kf_plan *plan, const uint32_t *groups, uint32_t n,
                                        const char *arch, const kf_cuda_gemm_shape *shapes,
                                        const kf_mem *mem, kf_cuda_kernel *out) {
    cg_set set; /* (no shapes: as no groups, a NULL argument) */
    kf_status st = cg_set_begin(&set, plan, shapes ? groups : NULL, n, arch, mem, out,
                                "kf_cuda_codegen_gemm_sm90_set");
    if (st != KF_OK)
        return st;
    cg *c0 = &set.mb[0].c;
#define SET_NO(...) return cg_set_end(&set, cg_fail(c0, KF_ERR_UNSUPPORTED, __VA_ARGS__))
    if (strcmp(arch, "sm_90a") != 0)
        SET_NO("GEMM sibling set: the one kernel needs sm_90a, not %s", arch);
    const kf_cuda_gemm_shape *sh = &shapes[0];
    if (sh->bn != 128 && sh->bn != 256)
        return cg_set_end(
            &set, cg_fail(c0, KF_ERR_INVALID_ARGUMENT, "GEMM sibling set: tile width %u", sh->bn));
    const kf_tensor *mm0 = cg_tensor(c0, c0->g->gemm.anchor[0]);
    for (uint32_t j = 0; j < n; j++)
        set.mb[j].c.tanh_formula = true; /* as the single kernel's: no table for gelu_tanh */
    if ((st = cg_set_members_check(&set, shapes, member_why)) != KF_OK)
        return cg_set_end(&set, st);
    for (uint32_t j = 0; j < n; j++) {
        const kf_group *g = set.mb[j].c.g;
        const kf_cuda_gemm_shape *sj = &shapes[j];
        const kf_gemm_info *gj = &g->gemm;
        const cg_gemm_epi *ep = &set.mb[j].epi;
        if (sj->epi_tma && (ep->n_outs != 1 || ep->outs[0].dtype != mm0->dtype || sj->n % 8 != 0 ||
                            (gj->head_dim && gj->heads_first && gj->m % 64 != 0)))
            SET_NO("member %u (group %u): a TMA-store epilogue needs one output of the "
                   "product's dtype, N a multiple of 8 and a head view's rows a multiple of 64",
                   j + 1, g->id);
    }
    int64_t tiles_n = set.tiles_n, n_all = set.n_all;
    /* 2-CTA clusters (CLUSTER2, as each member alone would take them): pairs
     * of tile rows of one set tile column, so of one member, share its B tile
     * by multicast; one block per tile of the pairs, an odd row count's
     * missing half included, whole clusters */
    uint32_t cl = sh->cluster == 2 ? 2u : 1u;
    int64_t rows = (sh->m + 128 * cl - 1) / (128 * cl) * cl;
    if (tiles_n * rows > INT32_MAX)
        SET_NO("GEMM sibling set: more than 2^31 tiles");

    kf_cuda_kernel *k = out;
    k->tmpl = KF_CUDA_TEMPLATE_GEMM_SM90;
    char prefix[16];
    snprintf(prefix, sizeof prefix, "sib%u_", n);
    cg_set_name(c0, prefix);
    k->vec = 1;
    k->launch.block = 384;
    k->launch.work_items = (uint64_t)(tiles_n * rows);
    k->launch.items_per_block = 1;
    k->launch.blocks_per_sm = 1;
    k->launch.grid_multiple = cl;
    k->launch.shared_bytes = kf_cuda_gemm_smem(sh->bn, sh->stages) +
                             (sh->a_gscale ? sh->stages * 128u : 0u); /* (KF_G_AT) */

    char what[160];
    snprintf(
        what, sizeof what,
        "GEMM sibling set of %u members as one GEMM over their concatenated columns (N %" PRId64
        ")",
        n, n_all);
    cg_set_emit_head(&set, what);
    const kf_gemm_info *g0 = &c0->g->gemm;
    cg_printf(&c0->s,
              "#define KF_M %" PRId64 "LL\n#define KF_N %" PRId64 "LL\n#define KF_K %" PRId64
              "LL\n#define KF_BATCH 1LL\n#define KF_BN %u\n#define KF_STAGES %u\n"
              "#define KF_PINGPONG %d\n"
              "#define KF_A_KMAJOR %d\n#define KF_B_KMAJOR %d\n#define KF_A_BATCHED 0\n"
              "#define KF_B_BATCHED 0\n#define KF_DUAL 0\n#define KF_A_NORM 0\n"
              "#define KF_EPI_DIRECT %d\n#define KF_HEAD_D %" PRId64 "\n#define KF_EPI_TMA %d\n"
              "#define KF_CLUSTER %u\n#define KF_EPI_AHEAD 0\n",
              sh->m, shapes[0].n, sh->k, sh->bn, sh->stages, sh->pingpong ? 1 : 0,
              sh->a_kmajor ? 1 : 0, sh->b_kmajor ? 1 : 0, sh->epi_staged ? 0 : 1, g0->head_dim,
              sh->epi_tma ? 1 : 0, cl);
    /* (KF_EPI_AHEAD 0: the TMA-store epilogue's values chunk by chunk; ahead,
     * a member's 64 packed values left a 3-member set a stack frame) */
    /* the members' tile columns, one N range; member 0's namespace holds the
     * helpers every member's would do alike (the norm's row statistics) */
    cg_printf(&c0->s,
              "#define KF_SIB %u\n#define KF_SIB_NS0 kf_s0::\n#define KF_TILES_N %" PRId64 "\n", n,
              tiles_n);
    /* The set rebuilds its wgmma descriptors from their addresses every K
     * step (no KF_DESC_STEP): stepped as the single kernel's, GPT-2's Q/K/V
     * set took 57 SASS instructions a K step against 97 and ran 1.3% and
     * 2.2% faster in A B B A, but 1.3% slower at rest, in two runs (H100,
     * 7f5077c: 0.1860 / 0.1853 ms against 0.1835 / 0.1830). The tile
     * counter as the single kernel's. */
    if (sh->pingpong && sh->pp_varying)
        cg_puts(&c0->s, "#define KF_PP_VARYING 1\n");
    if (sh->raster) /* the raster's tile rows at a time (else the template's 8) */
        cg_printf(&c0->s, "#define KF_RASTER %u\n", sh->raster);
    if (sh->epi_tma && g0->head_dim && g0->heads_first)
        cg_printf(&c0->s, "#define KF_TMA_HEADS 1\n#define KF_TMA_S %" PRId64 "LL\n", g0->m);
    if (sh->a_fold) /* before the template's head, which reads them */
        cg_printf(&c0->s, "#define KF_A_FOLD 1\n#define KF_FOLD_LN %d\n%s",
                  set.mb[0].fold.f.ln ? 1 : 0,
                  set.mb[0].fold.gamma >= 0 ? "#define KF_A_GSCALE 1\n" : "");
    cg_puts(&c0->s, "\n");
    cg_gemm_emit_fast_ops(c0);
    cg_gemm_sm90_emit_wgmma(c0, sh, mm0->dtype);
    cg_puts(&c0->s, kf_cuda_tpl_hopper);

    /* the template split at its markers: [0] up to "kf:member begin", [1]
     * the member part, [2] up to "kf:epilogue begin", [3] the epilogue
     * block, [4] the rest */
    static const char *const marks[4] = {"/* ---- kf:member begin", "/* ---- kf:member end",
                                         "/* ---- kf:epilogue begin", "/* ---- kf:epilogue end"};
    const char *part[5];
    size_t plen[5];
    if (!cg_set_split_template(kf_cuda_tpl_gemm_sm90, 4, marks, part, plen))
        return cg_set_end(&set, cg_fail(c0, KF_ERR_INTERNAL,
                                        "GEMM sibling set: gemm_sm90.cuh lacks its kf:member / "
                                        "kf:epilogue markers"));
    cg_set_put(&c0->s, part[0], plen[0]);
    cg_set_emit_members(&set, shapes, part[1], plen[1]);
    /* the dispatch: a set tile column to its member */
    cg_set_emit_split(&set);
    cg_puts(&c0->s, "#define KF_SIB_TMAPS");
    for (uint32_t j = 1; j < n; j++) {
        cg_printf(&c0->s, " , const __grid_constant__ kf_tmap kf_tb%u", j);
        if (sh->epi_tma)
            cg_printf(&c0->s, ", const __grid_constant__ kf_tmap kf_tc%u", j);
    }
    cg_puts(&c0->s, "\n#define KF_SIB_BMAP(j) (");
    for (uint32_t j = 1; j < n; j++)
        cg_printf(&c0->s, "(j) == %u ? &kf_tb%u : ", j, j);
    cg_puts(&c0->s, "&tb)\n#define KF_SIB_PREFETCH() do {");
    for (uint32_t j = 1; j < n; j++) {
        cg_printf(&c0->s,
                  " asm volatile(\"prefetch.tensormap [%%0];\" ::\"l\"((unsigned long "
                  "long)&kf_tb%u) : \"memory\");",
                  j);
        if (sh->epi_tma)
            cg_printf(&c0->s,
                      " asm volatile(\"prefetch.tensormap [%%0];\" ::\"l\"((unsigned long "
                      "long)&kf_tc%u) : \"memory\");",
                      j);
    }
    cg_puts(&c0->s, " } while (0)\n");
    cg_set_emit_dispatch(&set);

    cg_set_put(&c0->s, part[2], plen[2]);
    /* the epilogue block once per member, in a switch on the tile's member */
    cg_puts(&c0->s, "            switch (sj) {\n");
    for (uint32_t j = n; j-- > 0;) {
        if (j == 0)
            cg_puts(&c0->s, "            default: {\n                using namespace kf_s0;\n");
        else
            cg_printf(&c0->s, "            case %u: {\n                using namespace kf_s%u;\n",
                      j, j);
        if (j > 0 && sh->epi_tma)
            cg_printf(&c0->s, "                const kf_tmap &tc = kf_tc%u;\n", j);
        cg_set_put(&c0->s, part[3], plen[3]);
        cg_puts(&c0->s, "            } break;\n");
    }
    cg_puts(&c0->s, "            }\n");
    cg_set_put(&c0->s, part[4], plen[4]);
    return cg_set_end(&set, c0->st);
#undef SET_NO
}
