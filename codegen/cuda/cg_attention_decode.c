/*
 * cg_attention_decode.c -- the split-KV decode kernels of an ATTENTION group
 * (templates/attention_decode.cuh): a few query rows against a long K/V.
 *
 *   group ──► kf_cuda_attention_decode_shape: what the FA2 kernel takes
 *             (kf_cuda_attention_supported) split into
 *               kv items   the batch axes along which K or V moves,
 *               G          the query heads sharing each K/V head (the axes
 *                          where K and V both broadcast: GQA / MQA),
 *               rows       G x Sq a kv item, in row blocks of 16, 32 or 64,
 *             the key tiles the mask lets any row see, the workspace a
 *             split needs, the shared memory;
 *        ──► split kernel: params Q, K, V, O, the score expression's loads,
 *             the workspace (SCRATCH, f32, keyed by the output); the
 *             generated helpers kf_dec_bh (kv item, query head -> the score
 *             space's flattened batch x head), kf_bh_offsets, the score
 *             functions; then the template;
 *        ──► combine kernel: params O and the workspace; the template with
 *             KF_COMBINE;
 *        ──► direct kernel (the recipe's one-split form): the split kernel
 *             with KF_DIRECT and no workspace param, writing O itself.
 *
 * All take the split count as a last by-value argument (the recipe's, from
 * the SM count: codegen/cuda/recipe_attention_decode.c; the direct kernel's is
 * 1), so each kernel's source is the same on every device of an arch; which
 * kernels a group runs (direct, or split + combine) follows the SM count.
 *
 * Numerics are the FA2 kernel's (cg_attention.c's head comment): the SCORE
 * leaf is the unrounded f32 Q.K^T, the other score nodes round as the
 * reference stores them, P is rounded to the operand type before P.V; the
 * splits' partials and their merge are f32, rounded once at the end.
 *
 * The operand layout, the mask's skip class and the score functions follow
 * cg_attention.c's rules; they are restated here (small static helpers) so
 * that the two files can change apart, and the support test starts from
 * kf_cuda_attention_supported, so the decode path never takes a group the FA2
 * kernel would refuse.
 */
#include "codegen/cuda/cg.h"

#include "codegen/cuda/templates.h"

/* 64-key tiles; a ring of 3 stages (K and V each), 2 where a block's shared
 * memory does not hold 3 (head dim 128 past sm_80's 99 KiB parts). */
#define DEC_BC 64
#define DEC_STAGES_MAX 3

/* Everything the two kernels and the recipe need to know of group g. */
typedef struct dec_info {
    cg_attn_op ops[3];
    bool group_axis[KF_MAX_RANK]; /* batch axis where K and V both broadcast */
    kf_cuda_decode_shape shape;
    int64_t g, m, mp, rb;
    int skip; /* 1 CAUSAL, 2 SLIDING_WINDOW (tiles skipped), 0 none */
    int stages;
} dec_info;

static const char *analyze(const kf_plan *plan, uint32_t group, const char *arch, dec_info *di,
                           char *why, size_t size) {
    memset(di, 0, sizeof *di);
    if (!plan || group >= plan->n_groups || !arch || strncmp(arch, "sm_", 3) != 0)
        return snprintf(why, size, "bad arguments"), why;
    if (!kf_cuda_attention_supported(plan, group, arch, why, size))
        return why;
    const kf_group *g = &plan->groups[group];
    const kf_attn_info *at = &g->attn;
    int R = g->rank;
    cg_attn_op_layout(plan, at->q, true, at->q_transposed, R, &di->ops[0]);
    cg_attn_op_layout(plan, at->k, false, at->k_transposed, R, &di->ops[1]);
    cg_attn_op_layout(plan, at->v, true, at->v_transposed, R, &di->ops[2]);
    static const char *const names[3] = {"Q", "K", "V"};
    /* The decode kernels read from each operand's buffer start and store O
     * row-major: a sliced operand or an absorbed output permute (the other
     * attention kernels take both) is theirs. */
    for (int i = 0; i < 3; i++)
        if (di->ops[i].off != 0)
            return snprintf(why, size, "%s is a slice (the decode kernels read no view offset)",
                            names[i]),
                   why;
    if (at->lse != KF_NONE)
        return snprintf(why, size,
                        "the group writes the log-sum-exp of its scores too (the decode kernels "
                        "write O alone)"),
               why;
    if (at->out != at->pv)
        return snprintf(why, size,
                        "the group stores its output through a permute (the decode kernels "
                        "store O row-major)"),
               why;
    for (int i = 0; i < 3; i++) {
        bool ok = di->ops[i].s_col == 1 && (di->ops[i].s_row * 2) % 16 == 0;
        for (int d = 0; d < R - 2 && ok; d++)
            ok = (di->ops[i].bstride[d] * 2) % 16 == 0;
        if (!ok)
            return snprintf(why, size, "%s is not read as 16-byte rows", names[i]), why;
    }
    int64_t nkv = 1, gh = 1;
    for (int d = 0; d < R - 2; d++) {
        di->group_axis[d] = g->dims[d] > 1 && !di->ops[1].bstride[d] && !di->ops[2].bstride[d];
        if (di->group_axis[d])
            gh *= g->dims[d];
        else
            nkv *= g->dims[d];
    }
    di->g = gh;
    di->m = gh * at->sq;
    di->mp = di->m <= 16 ? 16 : di->m <= 32 ? 32 : 64;
    di->rb = (di->m + di->mp - 1) / di->mp;
    if (di->m > INT32_MAX / 2 || at->skv > INT32_MAX - 2 * DEC_BC)
        return snprintf(why, size, "too large for 32-bit row indices"), why;
    di->skip = 0;
    if (at->mask_node == at->score) {
        if (at->mask == KF_MASK_CAUSAL)
            di->skip = 1;
        else if (at->mask == KF_MASK_SLIDING_WINDOW && at->window > 0 &&
                 at->sq - at->window < at->skv)
            di->skip = 2;
    }
    /* the template's tile range over rows q = 0 .. sq - 1 */
    int64_t lo = 0, hi = at->skv;
    if (di->skip >= 1)
        hi = at->sq < at->skv ? at->sq : at->skv;
    if (di->skip == 2)
        lo = 1 - at->window > 0 ? 1 - at->window : 0;
    kf_cuda_decode_shape *s = &di->shape;
    s->kv_items = nkv * di->rb;
    s->rows = nkv * di->m;
    s->group_heads = gh;
    s->tiles = (hi + DEC_BC - 1) / DEC_BC - lo / DEC_BC;
    s->ws_bytes_per_split = (uint64_t)s->kv_items * (uint64_t)di->mp * (uint64_t)(at->d + 1) * 4u;
    uint32_t per_block = 0, per_sm = 0;
    if (!cg_stage_smem_limits(arch, &per_block, &per_sm))
        return snprintf(why, size, "%s has no cp.async (sm_80 and later)", arch), why;
    for (di->stages = DEC_STAGES_MAX; di->stages > 2; di->stages--)
        if (di->mp * at->d * 2 + di->stages * 2 * DEC_BC * at->d * 2 <= (int64_t)per_block)
            break;
    s->shared_bytes = (uint32_t)(di->mp * at->d * 2 + di->stages * 2 * DEC_BC * at->d * 2);
    if (s->shared_bytes > per_block)
        return snprintf(why, size, "%u bytes of shared memory", s->shared_bytes), why;
    /* the blocks an SM holds (the runtime's 1 KiB a block reserved), at most 4 */
    s->blocks_per_sm = per_sm / (s->shared_bytes + 1024u);
    if (s->blocks_per_sm > 4)
        s->blocks_per_sm = 4;
    if (s->blocks_per_sm < 1)
        s->blocks_per_sm = 1;
    /* the merge area (4 warps x 16 rows x d f32, m and l) lives in the ring */
    KF_ASSERT(4 * 16 * at->d * 4 + 4 * 32 * 4 <= di->stages * 2 * DEC_BC * at->d * 2);
    if (s->kv_items > INT64_MAX / 4096 / (at->d + 1))
        return snprintf(why, size, "too many rows for the workspace"), why;
    return NULL;
}

bool kf_cuda_attention_decode_supported(const kf_plan *plan, uint32_t group, const char *arch,
                                        char *why, size_t size) {
    dec_info di;
    return analyze(plan, group, arch, &di, why, size) == NULL;
}

kf_status kf_cuda_attention_decode_shape(const kf_plan *plan, uint32_t group, const char *arch,
                                         kf_cuda_decode_shape *out) {
    dec_info di;
    char why[160];
    if (!out || analyze(plan, group, arch, &di, why, sizeof why))
        return KF_ERR_UNSUPPORTED;
    *out = di.shape;
    return KF_OK;
}

/* kf_dec_bh(kvi, gi): the kv item's coordinates on the axes where K or V
 * moves, the query head's on the group axes, as the flattened batch x head
 * index of the score space. */
static void emit_dec_bh(cg *c, const dec_info *di) {
    const kf_group *g = c->g;
    int R = g->rank;
    cg_puts(&c->s, "__device__ __forceinline__ long long kf_dec_bh(long long kvi, int gi) {\n"
                   "    long long bh = 0;\n");
    int64_t full = 1, in_kv = 1, in_g = 1;
    for (int d = R - 3; d >= 0; d--) {
        if (g->dims[d] > 1) {
            bool ga = di->group_axis[d];
            cg_printf(&c->s, "    bh += (%s / %lldLL %% %lldLL) * %lldLL;\n",
                      ga ? "(long long)gi" : "kvi", (long long)(ga ? in_g : in_kv),
                      (long long)g->dims[d], (long long)full);
            *(ga ? &in_g : &in_kv) *= g->dims[d];
        }
        full *= g->dims[d];
    }
    cg_puts(&c->s, "    (void)kvi; (void)gi;\n    return bh;\n}\n\n");
}

/* The defines the kernels share (pw < 0: no workspace, the direct form). */
static void emit_sizes(cg *c, const dec_info *di, kf_dtype dt, int po, int pw) {
    const kf_attn_info *at = &c->g->attn;
    int64_t rt = di->mp / 16;
    cg_printf(&c->s,
              "#define KF_D %lld\n#define KF_BC %d\n#define KF_STAGES %d\n#define KF_SQ %lld\n"
              "#define KF_SKV %lld\n#define KF_NKV %lldLL\n#define KF_G %lld\n#define KF_M %lld\n"
              "#define KF_MP %lld\n#define KF_RB %lld\n#define KF_RT %lld\n#define KF_KS %lld\n"
              "#define KF_AB \"%s\"\n#define KF_ELEM %s\n#define KF_TO_ELEM %s\n"
              "#define KF_MASK_SKIP %d\n#define KF_WINDOW %lld\n#define KF_O p%d\n"
              "/* mask %s */\n",
              (long long)at->d, DEC_BC, di->stages, (long long)at->sq, (long long)at->skv,
              (long long)(di->shape.kv_items / di->rb), (long long)di->g, (long long)di->m,
              (long long)di->mp, (long long)di->rb, (long long)rt, (long long)(4 / rt),
              dt == KF_DTYPE_BF16 ? "bf16" : "f16", cg_storage_type(dt),
              dt == KF_DTYPE_BF16 ? "kf_f32_to_bf16" : "kf_f32_to_f16", di->skip,
              (long long)(di->skip == 2 ? at->window : 0), po, kf_mask_kind_name(at->mask));
    if (pw >= 0)
        cg_printf(&c->s, "#define KF_W p%d\n", pw);
    cg_puts(&c->s, "\n");
    emit_dec_bh(c, di);
}

/* The three kernels gen makes. */
typedef enum dec_kind { DEC_SPLIT, DEC_COMBINE, DEC_DIRECT } dec_kind;

static kf_status gen(const kf_plan *plan, uint32_t group, const char *arch, const kf_mem *mem,
                     kf_cuda_kernel *out, dec_kind kind) {
    const bool combine = kind == DEC_COMBINE, direct = kind == DEC_DIRECT;
    cg c;
    kf_status st = cg_begin(&c, plan, group, arch, mem, out);
    if (st != KF_OK)
        return cg_end(&c, st);
    const kf_group *g = c.g;
    dec_info di;
    char why[160];
    if (analyze(plan, group, arch, &di, why, sizeof why))
        return cg_end(&c, cg_fail(&c, KF_ERR_UNSUPPORTED, "group %u (%s): decode attention: %s",
                                  g->id, g->name, why));
    const kf_attn_info *at = &g->attn;
    kf_dtype dt = plan->graph->nodes[at->q]->dtype;
    int R = g->rank;
    /* the workspace of one split; the recipe grows it to its split count */
    uint64_t ws = di.shape.ws_bytes_per_split;

    cg_set_name(&c, combine ? "fadecc_" : direct ? "fadecd_" : "fadec_");
    c.div_by_mul = true;
    out->tmpl = KF_CUDA_TEMPLATE_ATTENTION_DECODE;
    out->vec = 8;
    out->launch.block = 128;
    if (combine) {
        int po = cg_param_add(&c, KF_CUDA_PARAM_OUT, at->pv, dt, cg_tensor_bytes(&c, at->pv));
        int pw = cg_param_add(&c, KF_CUDA_PARAM_SCRATCH, at->pv, KF_DTYPE_F32, ws);
        if (c.st != KF_OK)
            return cg_end(&c, c.st);
        out->launch.work_items = (uint64_t)di.shape.rows;
        out->launch.items_per_block = 4; /* a warp a row */
        out->launch.blocks_per_sm = 16;
        cg_emit_head(&c, "decode attention: the combine of the KV splits");
        cg_puts(&c.s, "#define KF_COMBINE 1\n");
        emit_sizes(&c, &di, dt, po, pw);
        cg_puts(&c.s, kf_cuda_tpl_attention_decode);
        return cg_end(&c, c.st);
    }

    int pq =
        cg_param_add(&c, KF_CUDA_PARAM_IN, di.ops[0].base, dt, cg_tensor_bytes(&c, di.ops[0].base));
    int pk =
        cg_param_add(&c, KF_CUDA_PARAM_IN, di.ops[1].base, dt, cg_tensor_bytes(&c, di.ops[1].base));
    int pvp =
        cg_param_add(&c, KF_CUDA_PARAM_IN, di.ops[2].base, dt, cg_tensor_bytes(&c, di.ops[2].base));
    int po = cg_param_add(&c, KF_CUDA_PARAM_OUT, at->pv, dt, cg_tensor_bytes(&c, at->pv));
    for (uint32_t i = 0; i < c.n; i++)
        if (g->expr[i].kind == KF_EXPR_SCORE)
            snprintf(c.ov[i], OV_MAX, "s");
    cg_mark(&c, at->score);
    cg_load_params(&c);
    int pw = direct ? -1 : cg_param_add(&c, KF_CUDA_PARAM_SCRATCH, at->pv, KF_DTYPE_F32, ws);
    if (c.st != KF_OK)
        return cg_end(&c, c.st);
    out->launch.work_items = (uint64_t)di.shape.kv_items; /* x the split count: the recipe's */
    out->launch.items_per_block = 1;
    out->launch.blocks_per_sm = 65535;
    out->launch.shared_bytes = di.shape.shared_bytes;

    if (direct) {
        cg_emit_head(&c, "decode attention: one split writing O (sm_80 mma.sync kernel)");
        cg_puts(&c.s, "#define KF_DIRECT 1\n");
    } else {
        cg_emit_head(&c, "decode attention: split-KV partials (sm_80 mma.sync kernel)");
    }
    emit_sizes(&c, &di, dt, po, pw);
    cg_printf(&c.s,
              "#define KF_Q p%d\n#define KF_K p%d\n#define KF_V p%d\n#define KF_Q_RS %lldLL\n"
              "#define KF_K_RS %lldLL\n#define KF_V_RS %lldLL\n\n",
              pq, pk, pvp, (long long)di.ops[0].s_row, (long long)di.ops[1].s_row,
              (long long)di.ops[2].s_row);
    /* kf_bh_offsets: each operand's element offset of batch x head bh */
    cg_puts(&c.s, "__device__ __forceinline__ void kf_bh_offsets(long long bh, long long &oq, "
                  "long long &ok, long long &ov) {\n    oq = 0; ok = 0; ov = 0;\n");
    int64_t inner = 1;
    for (int d = R - 3; d >= 0; d--) {
        if (g->dims[d] != 1) {
            cg_printf(&c.s, "    {\n        const long long i = bh / %lldLL %% %lldLL;\n",
                      (long long)inner, (long long)g->dims[d]);
            static const char *const on[3] = {"oq", "ok", "ov"};
            for (int o = 0; o < 3; o++)
                if (di.ops[o].bstride[d])
                    cg_printf(&c.s, "        %s += i * %lldLL;\n", on[o],
                              (long long)di.ops[o].bstride[d]);
            cg_puts(&c.s, "    }\n");
        }
        inner *= g->dims[d];
    }
    cg_puts(&c.s, "    (void)bh;\n}\n\n");
    cg_printf(
        &c.s,
        "__device__ __forceinline__ bool kf_attn_aligned(KF_PARAMS) {\n"
        "    return kf_aligned(p%d, 16) && kf_aligned(p%d, 16) && kf_aligned(p%d, 16);\n}\n\n",
        pq, pk, pvp);
    st = cg_attn_emit_score_fns(&c, di.skip != 0);
    if (st != KF_OK)
        return cg_end(&c, st);
    cg_puts(&c.s, kf_cuda_tpl_attention_decode);
    return cg_end(&c, c.st);
}

kf_status kf_cuda_codegen_attention_decode(const kf_plan *plan, uint32_t group, const char *arch,
                                           const kf_mem *mem, kf_cuda_kernel *out) {
    return gen(plan, group, arch, mem, out, DEC_SPLIT);
}

kf_status kf_cuda_codegen_attention_decode_direct(const kf_plan *plan, uint32_t group,
                                                  const char *arch, const kf_mem *mem,
                                                  kf_cuda_kernel *out) {
    return gen(plan, group, arch, mem, out, DEC_DIRECT);
}

kf_status kf_cuda_codegen_attention_combine(const kf_plan *plan, uint32_t group, const char *arch,
                                            const kf_mem *mem, kf_cuda_kernel *out) {
    return gen(plan, group, arch, mem, out, DEC_COMBINE);
}
