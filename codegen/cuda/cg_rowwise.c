/*
 * cg_rowwise.c -- the row kernels (templates/rowwise.cuh): row-wise groups,
 * a GEMM's row epilogue and norm prologue on A, the attention fallback's
 * softmax. A warp per row (its row-shaped loads staged through shared memory
 * when two dependent statistics need them twice), or a block per row, in
 * registers or re-read per pass; the statistics' defines, which column
 * reductions share.
 */
#include "codegen/cuda/cg.h"

#include "codegen/cuda/templates.h"

unsigned cg_stats_used(const cg *c, unsigned declared) {
    unsigned s = declared;
    for (uint32_t i = 0; i < c->n; i++) {
        if (c->need[i] && c->g->expr[i].kind == KF_EXPR_STAT)
            s |= 1u << c->g->expr[i].stat;
    }
    return s;
}

void cg_emit_stat_defines(cg *c, unsigned s, double eps, kf_dtype in_dtype, int64_t length) {
    bool dbl = in_dtype == KF_DTYPE_F64 || in_dtype == KF_DTYPE_I32;
    cg_printf(&c->s, "typedef %s kf_acc_t;\n", dbl ? "double" : "float");
    cg_printf(&c->s, "#define KF_NEED_MAX %d\n",
              (s & (1u << KF_STAT_MAX | 1u << KF_STAT_SUMEXP)) != 0);
    cg_printf(&c->s, "#define KF_NEED_SUM %d\n",
              (s & (1u << KF_STAT_SUM | 1u << KF_STAT_MEAN | 1u << KF_STAT_RSTD)) != 0);
    cg_printf(&c->s, "#define KF_NEED_SUMSQ %d\n", (s & (1u << KF_STAT_RMS_RSTD)) != 0);
    cg_printf(&c->s, "#define KF_NEED_M2 %d\n", (s & (1u << KF_STAT_RSTD)) != 0);
    cg_printf(&c->s, "#define KF_NEED_SUMEXP %d\n", (s & (1u << KF_STAT_SUMEXP)) != 0);
    /* the norms of f64 rows on the row scaled below 2^500 (rowwise.cuh) */
    cg_printf(&c->s, "#define KF_ROW_SCALE %d\n",
              in_dtype == KF_DTYPE_F64 && (s & (1u << KF_STAT_RSTD | 1u << KF_STAT_RMS_RSTD)) != 0);
    /* f32 and bf16 rows reach 2^128: their statistics are taken again on
     * the scaled row when they overflow f32 (rowwise.cuh) */
    cg_printf(&c->s, "#define KF_ROW_RESCUE %d\n",
              (in_dtype == KF_DTYPE_F32 || in_dtype == KF_DTYPE_BF16) &&
                  (s & (1u << KF_STAT_SUM | 1u << KF_STAT_MEAN | 1u << KF_STAT_RSTD |
                        1u << KF_STAT_RMS_RSTD)) != 0);
    cg_puts(&c->s, "#define KF_EPS ");
    cg_emit_const(c, dbl ? KF_DTYPE_F64 : KF_DTYPE_F32, eps);
    cg_puts(&c->s, "\n");
    (void)length;
}

/* ---- row_warp_staged ------------------------------------------------------
 * The register path of a warp per row keeps up to 128 f32 per lane (a 4096-
 * element row): 211-254 registers, 8 warps per SM, and on an H200 (65536 x
 * 4096 bf16) rms_norm reached 84% and layer_norm 69% of copy bandwidth. With
 * the row-shaped loads staged through a per-warp cp.async ring in shared
 * memory, a standalone version of the same kernels reached 88% / 86% (4 warps
 * x 3 stages, 2 blocks per SM) and 90% / 87% (8 warps x 2 stages, 1 block per
 * SM), bit-identical outputs; a plain SM copy kernel reaches ~92% there. The
 * generated kernels (4 warps x 2 stages, 3 blocks per SM): 88% / 85%.
 *
 * Which groups stage (cg_gen_rowwise): those whose statistics take two dependent
 * steps (layer_norm's M2 with the mean, softmax's sum of exponentials after
 * the max). A single-reduction group (rms_norm, sums) keeps the register
 * path, which once its stores lost their double rounding (cg_raw_of) was the
 * faster of the two: H200, bf16 rms_norm 65536 x 4096, 0.278-0.280 ms against
 * 0.279-0.282 staged (8 x 2); H100, before cg_raw_of, 0.380 against 0.384.
 * layer_norm on the register path: 0.348 ms (H200) against 0.287 staged. */

typedef struct stage_cfg {
    uint32_t warps, stages, bytes; /* bytes: one stage (a row of every staged load) */
    uint32_t shared, blocks_per_sm;
} stage_cfg;

/* Decides whether the prologue's loads can be staged and sets c->soff. A load
 * is row-shaped when it varies along the row and across rows (no stride-0
 * outer axis); every row-shaped load of the prologue must be stageable (last
 * stride 1, row bytes and the outer strides in bytes multiples of 16),
 * otherwise a pass would re-read a row from global memory, and the group keeps
 * the register path. Two loads of one buffer with the same strides share a
 * row. Other loads (weights, biases, broadcasts) stay global. Uses c->need. */
static bool stage_plan(cg *c, const row_spec *rs, const out_spec *outs, uint32_t n_outs,
                       const bool *pro, stage_cfg *cfg) {
    const kf_group *g = c->g;
    int rank;
    const int64_t *dims;
    cg_space_dims(g, rs->sp, &rank, &dims);
    int64_t L = rs->length;
    memset(c->need, 0, c->n * sizeof *c->need);
    cg_mark(c, rs->input);
    for (uint32_t o = 0; o < n_outs; o++) {
        if (pro[o] && !outs[o].stat_pack)
            cg_mark(c, outs[o].node);
    }
    uint64_t bytes = 0;
    bool ok = true;
    for (uint32_t i = 0; i < c->n && ok; i++) {
        const kf_expr *e = &g->expr[i];
        c->soff[i] = -1;
        if (!c->need[i] || c->ov[i][0] || !cg_is_load(e) || e->space != rs->sp)
            continue;
        int64_t st[KF_MAX_RANK];
        cg_node_strides(c, i, st);
        bool row_shaped = rank > 0 && dims[rank - 1] > 1 && st[rank - 1] != 0;
        for (int d = 0; d < rank - 1 && row_shaped; d++)
            row_shaped = dims[d] == 1 || st[d] != 0;
        if (!row_shaped)
            continue;
        int p = c->param[i];
        int64_t z = (int64_t)kf_dtype_size(c->k->params[p].dtype);
        ok = st[rank - 1] == 1 && (L * z) % 16 == 0;
        for (int d = 0; d < rank - 1 && ok; d++)
            ok = dims[d] == 1 || (st[d] * z) % 16 == 0;
        if (!ok)
            break;
        for (uint32_t j = 0; j < i && c->soff[i] < 0; j++) {
            int64_t sj[KF_MAX_RANK];
            if (c->soff[j] < 0 || c->param[j] != p)
                continue;
            cg_node_strides(c, j, sj);
            if (memcmp(sj, st, sizeof(int64_t) * (size_t)rank) == 0)
                c->soff[i] = c->soff[j];
        }
        if (c->soff[i] < 0) {
            c->soff[i] = (int64_t)bytes;
            bytes += (uint64_t)(L * z);
        }
    }
    uint32_t per_block = 0, per_sm = 0;
    bool on = ok && bytes > 0 && cg_stage_smem_limits(c->k->arch, &per_block, &per_sm);
    /* 8 warps x 2 stages where a block holds them, else 4 x 2: a row in
     * flight while one is computed. 65536 x 4096 bf16 layer_norm, 8 x 2 (one
     * block per SM) against 4 x 2 (three blocks, 12 warps per SM): H200
     * 0.287-0.291 ms against 0.297-0.300, H100 0.402 against 0.411; 4 x 3
     * was no better than 8 x 2 on either, 6 x 2 and 12 x 2 not on the H200
     * (not tried on the H100). */
    /* static shared memory: rowwise.cuh's reduction buffers (2 x 96 f32),
     * the gelu table when there is one */
    uint32_t fixed = 2 * 96 * 4 + (cg_has_gelu_table(c) ? GELU_TAB_N * 2 : 0);
    cfg->warps = 8;
    cfg->stages = 0;
    if (on && 8 * 2 * bytes + fixed > per_block)
        cfg->warps = 4;
    if (on && cfg->warps * 2 * bytes + fixed <= per_block)
        cfg->stages = 2;
    if (cfg->stages == 0) {
        for (uint32_t i = 0; i < c->n; i++)
            c->soff[i] = -1;
        return false;
    }
    cfg->bytes = (uint32_t)bytes;
    cfg->shared = cfg->warps * cfg->stages * cfg->bytes;
    /* Blocks that fit an SM's shared memory (1 KiB per block is the
     * system's), at most the 2048 threads an SM runs. */
    uint32_t bps = per_sm / (cfg->shared + fixed + 1024);
    uint32_t tmax = 2048 / (cfg->warps * 32);
    cfg->blocks_per_sm = bps < 1 ? 1 : bps > tmax ? tmax : bps;
    return true;
}

/* kf_stage_row: every staged row (a distinct soff; stage_plan gave them
 * ascending in node order) copied from its first element. */
static void emit_stage_row(cg *c, const chunk_ctx *x, const row_spec *rs, int rank) {
    chunk_ctx *x0 = kf_mem_calloc(c->mem, 1, sizeof *x0);
    if (!x0) {
        cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
        return;
    }
    memcpy(x0, x, sizeof *x0);
    snprintf(x0->coord[rs->sp][rank - 1], sizeof x0->coord[rs->sp][rank - 1], "0");
    snprintf(x0->lin[rs->sp], sizeof x0->lin[rs->sp], "row * %" PRId64 "LL", rs->length);
    cg_puts(&c->s,
            "__device__ __forceinline__ void kf_stage_row(long long row, int lane, unsigned sb, "
            "KF_PARAMS) {\n");
    int64_t next = 0;
    for (uint32_t i = 0; i < c->n; i++) {
        if (c->soff[i] != next)
            continue;
        int p = c->param[i];
        int64_t nb = rs->length * (int64_t)kf_dtype_size(c->k->params[p].dtype);
        char off[OV_MAX - 64];
        cg_offset_str(c, x0, i, off, sizeof off);
        cg_printf(&c->s, "    kf_cp_row<%" PRId64 ">(sb + %" PRId64 "u, p%d + (%s), lane);\n", nb,
                  next, p, off);
        next += nb;
    }
    cg_puts(&c->s, "}\n\n");
    kf_mem_free(c->mem, x0, sizeof *x0);
}

/* The row kernel: outs in the row space (prologue when they need no
 * statistic, epilogue otherwise), and outs in the other space (once per row). */
kf_status cg_gen_rowwise(cg *c, const row_spec *rs, out_spec *outs, uint32_t n_outs,
                         const char *what) {
    const kf_group *g = c->g;
    kf_cuda_kernel *k = c->k;
    int rank, orank;
    const int64_t *dims, *odims;
    cg_space_dims(g, rs->sp, &rank, &dims);
    kf_space osp = rs->sp == KF_SPACE_ROW ? KF_SPACE_OUT : KF_SPACE_ROW;
    cg_space_dims(g, osp, &orank, &odims);
    int64_t L = rs->length;
    if (rank < 1 || dims[rank - 1] != L)
        return cg_fail(c, KF_ERR_UNSUPPORTED, "group %u (%s): the row axis is not the last one",
                       g->id, g->name);
    int64_t rows = cg_numel_of(rank, dims) / (L ? L : 1);

    /* Which outs go where. */
    bool pro[MAX_OUTS], epi[MAX_OUTS], rowo[MAX_OUTS];
    for (uint32_t o = 0; o < n_outs; o++) {
        if (outs[o].stat_pack) { /* statistics alone, once per row */
            pro[o] = epi[o] = false;
            rowo[o] = true;
            continue;
        }
        const kf_expr *e = &g->expr[outs[o].node];
        bool same = e->space == rs->sp;
        bool st = outs[o].synth_softmax || cg_depends_on_stat(c, outs[o].node);
        pro[o] = same && !st;
        epi[o] = same && st;
        rowo[o] = !same;
        if (same && kf_ir_numel(cg_tensor(c, outs[o].tensor)) != cg_numel_of(rank, dims))
            return cg_fail(c, KF_ERR_UNSUPPORTED,
                           "group %u (%s): a row-space output smaller than the row space", g->id,
                           g->name);
    }
    /* Params: cg_mark everything once (prologue view: x not overridden). */
    for (uint32_t o = 0; o < n_outs; o++)
        if (!outs[o].stat_pack)
            cg_mark(c, outs[o].node);
    cg_mark(c, rs->input);
    cg_load_params(c);
    cg_mark_stored(c, outs, n_outs);
    unsigned stats = cg_stats_used(c, rs->stats);
    size_t minsz = 16;
    for (uint32_t o = 0; o < n_outs; o++) {
        if (!rowo[o] && kf_dtype_size(outs[o].dtype) < minsz)
            minsz = kf_dtype_size(outs[o].dtype);
    }
    minsz = cg_min_vec_size(c, rs->sp, minsz);
    uint32_t vec = cg_vec_for(minsz, L, false);
    bool dbl = rs->in_dtype == KF_DTYPE_F64 || rs->in_dtype == KF_DTYPE_I32;
    /* Template: a warp per row up to ROW_WARP_MAX, else a block
     * (row_block_for); registers up to 32 values per thread, else re-read per
     * pass. A warp per row stages its row-shaped loads when it can
     * (stage_plan). */
    uint32_t block;
    bool warp = row_warp_for(L, dbl), multipass = false;
    /* argmax: templates/argmax.cuh, a warp per row of any length, one
     * element at a time (its (value, index) pairs are compared, not summed) */
    bool amax = (rs->stats & (1u << KF_STAT_ARGMAX)) != 0;
    if (amax) {
        warp = true;
        vec = 1;
    }
    if (warp) {
        block = 256;
    } else {
        block = row_block_for(L, dbl);
        multipass = (L + block - 1) / block > (dbl ? 16 : 32);
    }
    if (multipass)
        vec = vec > 4 ? 4 : vec; /* no register arrays: keep the chunk small */
    /* Staged only with two dependent statistics steps (see row_warp_staged). */
    stage_cfg scfg = {0};
    bool two_step = (stats & (1u << KF_STAT_RSTD | 1u << KF_STAT_SUMEXP)) != 0;
    bool staged = !amax && warp && two_step && !dbl && vec > 1 && c->st == KF_OK &&
                  stage_plan(c, rs, outs, n_outs, pro, &scfg);
    if (staged)
        block = scfg.warps * 32;
    /* stage_plan marked the prologue only; the conditions below need all */
    for (uint32_t o = 0; o < n_outs; o++)
        if (!outs[o].stat_pack)
            cg_mark(c, outs[o].node);
    cg_mark(c, rs->input);
    k->tmpl = amax        ? KF_CUDA_TEMPLATE_ROW_ARGMAX
              : staged    ? KF_CUDA_TEMPLATE_ROW_WARP_STAGED
              : warp      ? KF_CUDA_TEMPLATE_ROW_WARP
              : multipass ? KF_CUDA_TEMPLATE_ROW_BLOCK_MULTIPASS
                          : KF_CUDA_TEMPLATE_ROW_BLOCK;
    k->vec = vec;
    k->launch.block = block;
    k->launch.work_items = (uint64_t)rows;
    k->launch.items_per_block = warp ? block / 32 : 1;
    k->launch.blocks_per_sm = staged ? scfg.blocks_per_sm : 2048 / block;
    k->launch.shared_bytes = staged ? scfg.shared : 0;
    if (c->st != KF_OK)
        return c->st;
    uint32_t lanes = warp ? 32 : block;
    uint32_t chunks = (uint32_t)(L / vec);
    cg_emit_head(c, what);
    cg_printf(&c->s,
              "#define KF_ROWS %" PRId64 "LL\n#define KF_L %" PRId64 "\n#define KF_ROW_WARP %d\n"
              "#define KF_MULTIPASS %d\n#define KF_PER_THREAD %u\n",
              rows, L, warp, multipass, (chunks + lanes - 1) / lanes);
    if (staged)
        cg_printf(&c->s,
                  "#define KF_STAGED 1\n#define KF_STAGES %u\n#define KF_STAGE_BYTES %u\n"
                  "/* dynamic shared memory: %u warps x %u stages x %u bytes = %u */\n",
                  scfg.stages, scfg.bytes, scfg.warps, scfg.stages, scfg.bytes, scfg.shared);
    else
        cg_puts(&c->s, "#define KF_STAGED 0\n");
    cg_emit_stat_defines(c, stats, rs->eps, rs->in_dtype, L);
    bool has_epi = false;
    for (uint32_t o = 0; o < n_outs; o++)
        has_epi = has_epi || epi[o];
    cg_printf(&c->s, "#define KF_HAS_EPILOGUE %d\n\n", has_epi);
    cg_puts(&c->s, "struct kf_stats;\n");

    chunk_ctx *x = kf_mem_calloc(c->mem, 1, sizeof *x);
    if (!x)
        return cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    /* Row space: outer coordinates from `row`, the last from j0 = c * VV. */
    {
        int64_t inner = 1;
        for (int d = rank - 2; d >= 0; d--) {
            if (d == 0)
                snprintf(x->coord[rs->sp][d], sizeof x->coord[rs->sp][d], "row / %" PRId64 "LL",
                         inner);
            else
                snprintf(x->coord[rs->sp][d], sizeof x->coord[rs->sp][d],
                         "row / %" PRId64 "LL %% %" PRId64 "LL", inner, dims[d]);
            inner *= dims[d];
        }
        snprintf(x->coord[rs->sp][rank - 1], sizeof x->coord[rs->sp][rank - 1], "j0");
        snprintf(x->lin[rs->sp], sizeof x->lin[rs->sp], "row * %" PRId64 "LL + j0", L);
        x->vrank[rs->sp] = rank;
    }
    cg_coords_linear(x, osp, orank, odims, "row");
    x->vrank[osp] = 0;

    /* kf_vec_ok: the vector loads of prologue and epilogue, the row-space stores. */
    sbuf cond = {.mem = c->mem};
    if (vec > 1) {
        cg_vec_conditions(c, x, vec, &cond);
        for (uint32_t o = 0; o < n_outs; o++) {
            if (rowo[o])
                continue;
            size_t bytes = vec * kf_dtype_size(outs[o].dtype);
            cg_printf(&cond, " && kf_aligned(p%d, %zu)", outs[o].param,
                      bytes > 16 ? (size_t)16 : bytes);
        }
    }
    /* The template's stats struct is defined after the hooks; declare the
     * hooks' bodies as templates on it. */
    cg_emit_vec_ok(c, cond.p ? cond.p : "");
    if (cond.p)
        kf_mem_free(c->mem, cond.p, cond.cap);

    /* Prologue: x, and the outputs that need no statistic. */
    memset(c->need, 0, c->n * sizeof *c->need);
    for (uint32_t i = 0; i < c->n; i++)
        c->ov[i][0] = 0;
    cg_mark(c, rs->input);
    for (uint32_t o = 0; o < n_outs; o++) {
        if (pro[o])
            cg_mark(c, outs[o].node);
    }
    if (staged)
        cg_puts(&c->s, "template <int VV, bool STG> __device__ __forceinline__ void kf_prologue("
                       "long long row, int c, kf_acc_t *x, bool store, unsigned sb, KF_PARAMS) {\n"
                       "    const long long j0 = (long long)c * VV;\n");
    else
        cg_puts(
            &c->s,
            "template <int VV> __device__ __forceinline__ void kf_prologue(long long row, int c, "
            "kf_acc_t *x, bool store, KF_PARAMS) {\n    const long long j0 = (long long)c * VV;\n");
    c->staged = staged;
    cg_emit_loads(c, x, vec, "    ", NULL, NULL);
    c->staged = false;
    for (uint32_t o = 0; o < n_outs; o++) {
        if (pro[o])
            cg_printf(&c->s, "    %s o%u[VV];\n", cg_reg_type(outs[o].dtype), o);
    }
    cg_puts(&c->s, "#pragma unroll\n    for (int k = 0; k < VV; k++) {\n");
    cg_emit_nodes(c, cg_coord_of, x, "        ", false);
    cg_printf(&c->s, "        x[k] = (kf_acc_t)v%u;\n", rs->input);
    for (uint32_t o = 0; o < n_outs; o++) {
        if (pro[o])
            cg_printf(&c->s, "        o%u[k] = (%s)v%u%s;\n", o, cg_reg_type(outs[o].dtype),
                      outs[o].node, cg_raw_of(c, outs[o].node, false) ? "u" : "");
    }
    cg_puts(&c->s, "    }\n");
    for (uint32_t o = 0; o < n_outs; o++) {
        if (pro[o])
            cg_printf(&c->s,
                      "    if (store)\n        kf_stv<VV>(p%d + row * %" PRId64 "LL + j0, o%u);\n",
                      outs[o].param, L, o);
    }
    cg_puts(&c->s, staged ? "    (void)store; (void)sb;\n}\n\n" : "    (void)store;\n}\n\n");
    if (staged)
        emit_stage_row(c, x, rs, rank);

    /* Epilogue: per element, x from the prologue. */
    memset(c->need, 0, c->n * sizeof *c->need);
    for (uint32_t i = 0; i < c->n; i++)
        c->ov[i][0] = 0;
    snprintf(c->ov[rs->input], OV_MAX, "x[k]");
    for (uint32_t o = 0; o < n_outs; o++) {
        if (epi[o] && !outs[o].synth_softmax)
            cg_mark(c, outs[o].node);
    }
    cg_puts(
        &c->s,
        "template <int VV, typename S> __device__ __forceinline__ void kf_epilogue(long long row, "
        "int c, const kf_acc_t *x, const S &st, KF_PARAMS) {\n    const long long j0 = (long "
        "long)c * VV;\n");
    cg_emit_loads(c, x, vec, "    ", NULL, NULL);
    for (uint32_t o = 0; o < n_outs; o++) {
        if (epi[o])
            cg_printf(&c->s, "    %s o%u[VV];\n", cg_reg_type(outs[o].dtype), o);
    }
    cg_puts(&c->s, "#pragma unroll\n    for (int k = 0; k < VV; k++) {\n");
    cg_emit_nodes(c, cg_coord_of, x, "        ", false);
    for (uint32_t o = 0; o < n_outs; o++) {
        if (!epi[o])
            continue;
        if (outs[o].synth_softmax) {
            const char *rnd = cg_round_fn(outs[o].dtype);
            cg_printf(&c->s, "        o%u[k] = (%s)%s%s(kf_exp(x[k] - st.max) / st.sumexp)%s;\n", o,
                      cg_reg_type(outs[o].dtype), rnd ? rnd : "", rnd ? "((float)" : "",
                      rnd ? ")" : "");
        } else {
            cg_printf(&c->s, "        o%u[k] = (%s)v%u%s;\n", o, cg_reg_type(outs[o].dtype),
                      outs[o].node, cg_raw_of(c, outs[o].node, false) ? "u" : "");
        }
    }
    cg_puts(&c->s, "    }\n");
    for (uint32_t o = 0; o < n_outs; o++) {
        if (epi[o])
            cg_printf(&c->s, "    kf_stv<VV>(p%d + row * %" PRId64 "LL + j0, o%u);\n",
                      outs[o].param, L, o);
    }
    cg_puts(&c->s, "    (void)x; (void)st;\n}\n\n");

    /* Once per row: outputs in the other space (the reduced one). */
    memset(c->need, 0, c->n * sizeof *c->need);
    for (uint32_t i = 0; i < c->n; i++)
        c->ov[i][0] = 0;
    for (uint32_t o = 0; o < n_outs; o++) {
        if (rowo[o] && !outs[o].stat_pack)
            cg_mark(c, outs[o].node);
    }
    cg_puts(&c->s,
            "template <typename S> __device__ __forceinline__ void kf_row_out(long long row, "
            "const S &st, KF_PARAMS) {\n");
    cg_emit_loads(c, x, 1, "    ", NULL, NULL);
    cg_puts(&c->s, "    const int k = 0;\n    (void)k;\n");
    cg_emit_nodes(c, cg_coord_of, x, "    ", false);
    for (uint32_t o = 0; o < n_outs; o++) {
        if (!rowo[o])
            continue;
        if (!outs[o].stat_pack) {
            cg_printf(&c->s, "    kf_st(p%d + row, (%s)v%u);\n", outs[o].param,
                      cg_reg_type(outs[o].dtype), outs[o].node);
            continue;
        }
        /* the packed statistics: f32, in KF_STAT_* order */
        unsigned n = (unsigned)__builtin_popcount(outs[o].stat_pack), i = 0;
        for (int s = 0; s < KF_STAT_COUNT; s++)
            if (outs[o].stat_pack & (1u << s))
                cg_printf(&c->s, "    p%d[row * %uLL + %u] = (float)st.%s;\n", outs[o].param, n,
                          i++, cg_stat_field((kf_stat)s));
    }
    cg_puts(&c->s, "    (void)row; (void)st;\n}\n\n");
    kf_mem_free(c->mem, x, sizeof *x);
    cg_puts(&c->s, amax ? kf_cuda_tpl_argmax : kf_cuda_tpl_rowwise);
    return c->st;
}
