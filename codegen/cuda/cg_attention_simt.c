/*
 * cg_attention_simt.c -- the fused SIMT attention kernel of an ATTENTION
 * group (templates/attention_simt.cuh: FlashAttention-2 structure on FFMA)
 * for what the tensor-core kernels (cg_attention.c) refuse: f32 Q/K/V, with
 * f32 arithmetic throughout (no TF32: f32's tolerance is the exact value's),
 * and bf16/f16 groups whose head dims are not 64 or 128 -- any of 1..256,
 * Q.K^T's head dim and V's apart, each operand in its own dtype.
 *
 *   group ──► supported? (kf_cuda_attention_simt_supported: dtypes, head
 *             dims, the output's layout, the tiles in shared memory)
 *        ──► tiles: KF_BR query rows (16 a warp) x KF_BC keys, K and V in
 *             one or two stages: the largest of simt_shapes[] whose shared
 *             memory leaves 12 warps an SM, else the one that leaves most
 *        ──► params: Q, K, V (their bases: views through their strides, a
 *             broadcast head axis -- GQA / MQA -- stride 0), O, the
 *             log-sum-exp, then the score expression's loads
 *        ──► source: the head (common.cuh), the sizes, each operand's
 *             storage type, strides and cp.async chunk, and the pieces the
 *             mma.sync kernel has: kf_bh_offsets, kf_o_offset, the score
 *             functions (kf_score_full / _inner / _fill), the block-sparse
 *             functions, attention_common.cuh (kf_attn_tile_edge); then
 *             templates/attention_simt.cuh
 *
 * Numerics: the SCORE leaf is the f32 Q.K^T, unrounded; the other score nodes
 * round as the reference stores them (cg_emit_nodes), as in the mma.sync
 * kernel. For f32 groups tanh is tanhf (the tensor-core kernels' tanh.approx
 * has a relative error of 2^-11, past f32's tolerance); a division by a
 * constant is a multiply (within an ulp). P stays f32 (not rounded to an
 * operand type), O is rounded once as it is stored.
 */
#include "codegen/cuda/cg.h"

#include "codegen/cuda/templates.h"

/* Tile shapes, largest first: query rows, keys, K/V stages. */
static const struct {
    int br, bc, stages;
} simt_shapes[] = {{64, 64, 2}, {64, 32, 2}, {64, 32, 1}, {32, 32, 1}, {16, 32, 1}, {16, 16, 1}};

#define SIMT_MAX_D 256

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static bool simt_dtype(kf_dtype d) {
    return d == KF_DTYPE_F32 || d == KF_DTYPE_BF16 || d == KF_DTYPE_F16;
}

/* Everything the generator and the support test know of group g. */
typedef struct simt_info {
    cg_attn_op ops[3];
    kf_dtype dt[4]; /* Q, K, V, O */
    int64_t dk, dv, dkp, ndv, qs, ks, vs;
    int br, bc, stages, minb;
    int cp[3]; /* cp.async chunk bytes of Q, K, V (0: plain loads) */
    uint32_t smem;
} simt_info;

/* The shared memory of a shape (templates/attention_simt.cuh's layout). */
static uint32_t simt_smem(const simt_info *si, int br, int bc, int stages) {
    int64_t q = round_up(br * si->qs * (int64_t)kf_dtype_size(si->dt[0]), 16);
    int64_t k = round_up(bc * si->ks * (int64_t)kf_dtype_size(si->dt[1]), 16);
    int64_t v = round_up(bc * si->vs * (int64_t)kf_dtype_size(si->dt[2]), 16);
    return (uint32_t)(q + stages * (k + v) + br * (bc + 4) * 4);
}

/* The largest cp.async chunk (16, 8, 4 bytes; 0: none) operand o's rows of
 * `len` elements of `esize` bytes allow into shared-memory rows of `ss`
 * elements: a unit column stride, and the row length, the smem row, every
 * stride and the offset whole chunks. */
static int cp_chunk(const kf_group *g, const cg_attn_op *o, int64_t len, int64_t ss,
                    int64_t esize) {
    if (o->s_col != 1)
        return 0;
    for (int cb = 16; cb >= 4; cb /= 2) {
        bool ok = (len * esize) % cb == 0 && (ss * esize) % cb == 0 &&
                  (o->s_row * esize) % cb == 0 && (o->off * esize) % cb == 0;
        for (int d = 0; d < g->rank - 2 && ok; d++)
            ok = (o->bstride[d] * esize) % cb == 0;
        if (ok)
            return cb;
    }
    return 0;
}

static const char *analyze(const kf_plan *plan, uint32_t group, const char *arch, simt_info *si,
                           char *why, size_t size) {
    memset(si, 0, sizeof *si);
    if (!plan || group >= plan->n_groups || !arch || strncmp(arch, "sm_", 3) != 0)
        return snprintf(why, size, "bad arguments"), why;
    const kf_group *g = &plan->groups[group];
    const kf_attn_info *at = &g->attn;
    const kf_graph *gr = plan->graph;
    if (g->kind != KF_GROUP_ATTENTION || at->score == KF_NONE)
        return snprintf(why, size, "not an attention group"), why;
    uint32_t per_block = 0, per_sm = 0;
    if (!cg_stage_smem_limits(arch, &per_block, &per_sm))
        return snprintf(why, size, "%s has no cp.async (sm_80 and later)", arch), why;
    const uint32_t ts[4] = {at->q, at->k, at->v, at->out};
    static const char *const names[4] = {"Q", "K", "V", "O"};
    for (int i = 0; i < 4; i++) {
        si->dt[i] = gr->nodes[ts[i]]->dtype;
        if (!simt_dtype(si->dt[i]))
            return snprintf(why, size, "%s is %s (the SIMT kernel takes f32, bf16 and f16)",
                            names[i], kf_dtype_name(si->dt[i])),
                   why;
    }
    const uint32_t inner[] = {at->qk, at->softmax, at->pv};
    for (size_t i = 0; i < sizeof inner / sizeof inner[0]; i++)
        if (gr->nodes[inner[i]]->dtype == KF_DTYPE_F64)
            return snprintf(why, size, "the scores, P or O are f64 (the SIMT kernel computes f32)"),
                   why;
    if (at->d < 1 || at->d > SIMT_MAX_D || at->dv < 1 || at->dv > SIMT_MAX_D)
        return snprintf(why, size, "head dim %lld / %lld (the SIMT kernel takes 1 to %d)",
                        (long long)at->d, (long long)at->dv, SIMT_MAX_D),
               why;
    int R = g->rank;
    const kf_tensor *pv = gr->nodes[at->pv];
    if (R < 2 || pv->rank != R || memcmp(pv->dims, g->dims, sizeof(int64_t) * (size_t)(R - 2)))
        return snprintf(why, size, "the output's batch dims differ from the scores'"), why;
    for (uint32_t w = 0; w < g->n_writes; w++)
        if (g->writes[w] != at->out && g->writes[w] != at->lse)
            return snprintf(why, size, "the group writes a tensor besides its output"), why;
    if (at->lse != KF_NONE && gr->nodes[at->lse]->dtype == KF_DTYPE_F64)
        return snprintf(why, size, "the log-sum-exp is f64 (the kernels write f32, bf16, f16)"),
               why;
    if (at->o_strides[R - 1] != 1)
        return snprintf(why, size, "O's head dim is not contiguous"), why;
    int64_t bh = 1;
    for (int d = 0; d < R - 2; d++)
        bh *= g->dims[d];
    if (at->sq > INT32_MAX - 64 || at->skv > INT32_MAX - 64 || bh > INT64_MAX / (at->sq + 64))
        return snprintf(why, size, "too large for 32-bit row indices"), why;
    cg_attn_op_layout(plan, at->q, true, at->q_transposed, R, &si->ops[0]);
    cg_attn_op_layout(plan, at->k, false, at->k_transposed, R, &si->ops[1]);
    cg_attn_op_layout(plan, at->v, true, at->v_transposed, R, &si->ops[2]);
    si->dk = at->d;
    si->dv = at->dv;
    si->dkp = round_up(at->d, 4);
    si->ndv = round_up(at->dv, 8) / 8;
    /* (a multiple of 8) + 4: the 8 keys a quarter warp reads at once fall in
     * 8 different bank groups (templates/attention_simt.cuh) */
    si->qs = round_up(at->d, 8) + 4;
    si->ks = si->qs;
    si->vs = round_up(at->dv, 8);
    const int64_t lens[3] = {si->dk, si->dk, si->dv}, ss[3] = {si->qs, si->ks, si->vs};
    for (int i = 0; i < 3; i++) {
        int64_t es = (int64_t)kf_dtype_size(si->dt[i]);
        si->cp[i] = cp_chunk(g, &si->ops[i], lens[i], ss[i], es);
        /* 2-byte rows of (a multiple of 8) + 4 elements are 8-byte aligned */
        if (es == 2 && si->cp[i] > 8)
            si->cp[i] = 8;
    }
    /* the first shape whose blocks leave 12 warps an SM (shared memory's
     * limit, the runtime's 1 KiB a block reserved), else the one that leaves
     * the most: an FFMA kernel hides its shared-memory latency with warps */
    int pick = -1, best = -1;
    uint32_t best_warps = 0;
    const int n_shapes = (int)(sizeof simt_shapes / sizeof simt_shapes[0]);
    for (int s = 0; s < n_shapes && pick < 0; s++) {
        uint32_t b = simt_smem(si, simt_shapes[s].br, simt_shapes[s].bc, simt_shapes[s].stages);
        if (b > per_block)
            continue;
        uint32_t warps = per_sm / (b + 1024u) * (uint32_t)(simt_shapes[s].br / 16);
        if (warps >= 12)
            pick = s;
        else if (warps > best_warps) {
            best_warps = warps;
            best = s;
        }
    }
    if (pick < 0)
        pick = best;
    if (pick < 0)
        return snprintf(why, size,
                        "the SIMT kernel's smallest tiles need %u bytes of shared memory (%s "
                        "gives a block %u)",
                        simt_smem(si, 16, 16, 1), arch, per_block),
               why;
    si->br = simt_shapes[pick].br;
    si->bc = simt_shapes[pick].bc;
    si->stages = simt_shapes[pick].stages;
    si->smem = simt_smem(si, si->br, si->bc, si->stages);
    /* registers a thread: O (4 x ndv), S (4 x bc / 8), the Q and K
     * fragments of two unrolled steps and the addresses (~110: ptxas took
     * 124-128 for head dims 16-32 and spilled one f32 variant under a cap
     * of 128); the blocks an SM (at most 3) that leaves __launch_bounds__ */
    int64_t threads = si->br * 2, regs = 4 * si->ndv + 4 * (si->bc / 8) + 110;
    int64_t minb = 65536 / (threads * regs);
    si->minb = (int)(minb < 1 ? 1 : minb > 3 ? 3 : minb);
    return NULL;
}

bool kf_cuda_attention_simt_supported(const kf_plan *plan, uint32_t group, const char *arch,
                                      char *why, size_t size) {
    simt_info si;
    return analyze(plan, group, arch, &si, why, size) == NULL;
}

kf_status kf_cuda_codegen_attention_simt(const kf_plan *plan, uint32_t group, const char *arch,
                                         const kf_mem *mem, kf_cuda_kernel *out) {
    cg c;
    kf_status st = cg_begin(&c, plan, group, arch, mem, out);
    if (st != KF_OK)
        return cg_end(&c, st);
    const kf_group *g = c.g;
    simt_info si;
    char why[192];
    if (analyze(plan, group, arch, &si, why, sizeof why))
        return cg_end(&c, cg_fail(&c, KF_ERR_UNSUPPORTED, "group %u (%s): SIMT attention: %s",
                                  g->id, g->name, why));
    const kf_attn_info *at = &g->attn;
    const kf_graph *gr = plan->graph;
    int R = g->rank;
    int64_t bh = 1;
    for (int d = 0; d < R - 2; d++)
        bh *= g->dims[d];
    int skip = cg_attn_mask_skip(g);
    const bool f32 =
        si.dt[0] == KF_DTYPE_F32 && si.dt[1] == KF_DTYPE_F32 && si.dt[2] == KF_DTYPE_F32;

    cg_set_name(&c, "fas_");
    c.div_by_mul = true;
    out->tmpl = KF_CUDA_TEMPLATE_ATTENTION_SIMT;
    out->vec = 1;
    int p[3];
    for (int i = 0; i < 3; i++)
        p[i] = cg_param_add(&c, KF_CUDA_PARAM_IN, si.ops[i].base, si.dt[i],
                            cg_tensor_bytes(&c, si.ops[i].base));
    int po = cg_param_add(&c, KF_CUDA_PARAM_OUT, at->out, si.dt[3], cg_tensor_bytes(&c, at->out));
    int pl = at->lse == KF_NONE
                 ? -1
                 : cg_param_add(&c, KF_CUDA_PARAM_OUT, at->lse, gr->nodes[at->lse]->dtype,
                                cg_tensor_bytes(&c, at->lse));
    for (uint32_t i = 0; i < c.n; i++)
        if (g->expr[i].kind == KF_EXPR_SCORE)
            snprintf(c.ov[i], OV_MAX, "s");
    cg_mark(&c, at->score);
    cg_load_params(&c);
    if (c.st != KF_OK)
        return cg_end(&c, c.st);
    int64_t nqt = (at->sq + si.br - 1) / si.br;
    out->launch.block = (uint32_t)(si.br * 2);
    out->launch.items_per_block = 1;
    out->launch.work_items = (uint64_t)(bh * nqt);
    out->launch.blocks_per_sm = 65535;
    out->launch.shared_bytes = si.smem;

    cg_emit_head(&c, "fused attention (SIMT FFMA kernel, f32 arithmetic)");
    cg_printf(&c.s,
              "#define KF_DK %lld\n#define KF_DKP %lld\n#define KF_DV %lld\n#define KF_NDV %lld\n"
              "#define KF_QS %lld\n#define KF_KS %lld\n#define KF_VS %lld\n"
              "#define KF_BR %d\n#define KF_BC %d\n#define KF_STAGES %d\n#define KF_MINB %d\n"
              "#define KF_SQ %lld\n#define KF_SKV %lld\n#define KF_BH %lldLL\n"
              "#define KF_QT %s\n#define KF_KT %s\n#define KF_VT %s\n#define KF_OT %s\n"
              "#define KF_MASK_SKIP %d\n#define KF_WINDOW %lld\n",
              (long long)si.dk, (long long)si.dkp, (long long)si.dv, (long long)si.ndv,
              (long long)si.qs, (long long)si.ks, (long long)si.vs, si.br, si.bc, si.stages,
              si.minb, (long long)at->sq, (long long)at->skv, (long long)bh,
              cg_storage_type(si.dt[0]), cg_storage_type(si.dt[1]), cg_storage_type(si.dt[2]),
              cg_storage_type(si.dt[3]), skip, (long long)(skip == 2 ? at->window : 0));
    static const char opn[3] = {'Q', 'K', 'V'};
    for (int i = 0; i < 3; i++)
        cg_printf(&c.s,
                  "#define KF_%c (p%d + %lldLL)\n#define KF_%c_RS %lldLL\n#define KF_%c_CS %lldLL\n"
                  "#define KF_CP%c %d\n",
                  opn[i], p[i], (long long)si.ops[i].off, opn[i], (long long)si.ops[i].s_row,
                  opn[i], (long long)si.ops[i].s_col, opn[i], si.cp[i]);
    cg_printf(&c.s, "#define KF_O p%d\n/* mask %s; dynamic shared memory %u bytes */\n\n", po,
              kf_mask_kind_name(at->mask), si.smem);
    cg_attn_emit_bh_offsets(&c, g, si.ops);
    cg_attn_emit_o_offset(&c, g, "KF_DV");
    if (pl >= 0)
        cg_printf(&c.s, "#define KF_LSE p%d /* the scores' log-sum-exp, [.., sq] */\n\n", pl);
    st = f32 ? cg_attn_emit_score_fns_exact(&c, skip != 0) : cg_attn_emit_score_fns(&c, skip != 0);
    if (st != KF_OK)
        return cg_end(&c, st);
    cg_attn_emit_block_sparse(&c, g, skip, si.br, si.bc);
    cg_puts(&c.s, kf_cuda_tpl_attention_common);
    cg_puts(&c.s, kf_cuda_tpl_attention_simt);
    return cg_end(&c, c.st);
}

void kf_cuda_attention_simt_tiles(const kf_plan *plan, uint32_t group, const char *arch, int *br,
                                  int *bc) {
    simt_info si;
    char why[192];
    *br = *bc = 0;
    if (!analyze(plan, group, arch, &si, why, sizeof why)) {
        *br = si.br;
        *bc = si.bc;
    }
}
