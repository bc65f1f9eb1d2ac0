/*
 * cg_gemm_epi.c -- what the generated GEMM kernels (cg_gemm_sm90.c: wgmma and
 * TMA; cg_gemm_sm80.c: mma.sync and cp.async) share: the group's epilogue on
 * the f32 accumulators, emitted once for both templates.
 *
 *   cg_gemm_epi_prepare: the ACC overrides (the accumulator, unrounded into
 *     the epilogue, as cuBLASLt's epilogues and the judge's fused reference
 *     take it; rounded to the matmul's dtype only where the product itself is
 *     written), the writes (every one the whole [batch, M, N] output), the
 *     params, and the loads of the epilogue at their output coordinates;
 *   cg_gemm_emit_fast_ops: the branch-free sigmoid family and kf_gelu_bf16_v;
 *   cg_gemm_epi_emit: kf_epi<VV, AL>(acc[, acc1], b, r, c0, ok, ...), the
 *     epilogue of VV adjacent columns c0.. of row r of batch b,
 *     kf_epi_al(...), whether the bases are 16-byte aligned, and
 *     templates/gemm_common.cuh (kf_gm_quad_t).
 *
 * A template calls kf_epi with 8 adjacent columns of one row per thread (the
 * tensor-core templates get there by a transpose of accumulator pairs within
 * each quad of lanes: the mma.sync m16n8 and wgmma m64nN fragments place
 * columns alike; the SIMT template, cg_gemm_simt.c, holds them so). The
 * accumulators are f32, or f64 for an f64 product (the SIMT kernel's DFMA).
 *
 * The row epilogue in the tile (gemm.row_epilogue, not the split form: a norm
 * or softmax over rows of N <= 256, one column tile a row): the template
 * runs the tile twice. First kf_pre<VV, AL>(acc, b, r, c0, ..., xo) gives the
 * norm's input x (row.input: the group's own expression up to it, rounded
 * where the reference rounds it, so the statistics see the reference's
 * values) for 8 columns, which the template folds into per-row partial
 * statistics (gemm_common.cuh's kf_gm_rs: Chan's mean and M2, a sum of
 * squares, or a running max and sum of exponentials; f32) and reduces across
 * the lanes and warps that share a row (the reduction is the template's).
 * Then kf_epi<VV, AL>(..., sink, rst) computes the writes with the STAT nodes
 * read from the row's statistics (kf_gm_rst). kf_pre and kf_epi are one
 * expression DAG emitted twice, over the nodes each needs.
 */
#include "codegen/cuda/cg.h"

#include "codegen/cuda/cg_gemm.h"
#include "codegen/cuda/templates.h"

kf_status cg_gemm_begin(cg *c, const kf_plan *plan, uint32_t group, const char *arch,
                        const kf_cuda_gemm_shape *sh, const kf_mem *mem, kf_cuda_kernel *out,
                        const char *fn) {
    kf_status st = cg_begin(c, plan, group, arch, mem, out);
    if (st != KF_OK)
        return st;
    if (!sh || c->g->kind != KF_GROUP_GEMM)
        return cg_fail(c, KF_ERR_INVALID_ARGUMENT,
                       "group %u (%s): %s takes a GEMM group and its shape", c->g->id, c->g->name,
                       fn);
    return KF_OK;
}

void cg_gemm_coords(chunk_ctx *x, kf_space sp, int rank, const int64_t *dims, const char *row,
                    const char *col, bool narrow) {
    const char *sfx = narrow ? "u" : "LL";
    snprintf(x->coord[sp][rank - 1], COORD_MAX, "%s", col);
    int64_t inner = 1;
    for (int d = rank - 2; d >= 0; d--) {
        if (inner == 1)
            snprintf(x->coord[sp][d], COORD_MAX, "(%s %% %" PRId64 "%s)", row, dims[d], sfx);
        else
            snprintf(x->coord[sp][d], COORD_MAX, "(%s / %" PRId64 "%s %% %" PRId64 "%s)", row,
                     inner, sfx, dims[d], sfx);
        inner *= dims[d];
    }
    x->vrank[sp] = rank;
}

/* The output-space coordinates of element (q, c0 + k) where q = b * M + r is
 * the row of the contiguous [batch * M, N] output (narrow: from the 32-bit
 * copies qn and cn). A head-split group (gemm.head_dim D) runs over the head
 * view [batch.., M, H, D] (heads_first: [batch.., H, M, D]): the batch
 * coordinates from q as the product's, then m = r, h = c0 / D, d = c0 % D
 * (the 8 columns of a call lie in one head). */
void cg_gemm_epi_coords(chunk_ctx *x, const kf_group *g, bool narrow) {
    const kf_gemm_info *gm = &g->gemm;
    const char *qv = narrow ? "qn" : "q", *cv = narrow ? "cn" : "c0", *sfx = narrow ? "u" : "LL";
    if (!gm->head_dim) {
        cg_gemm_coords(x, KF_SPACE_OUT, g->rank, g->dims, qv, cv, narrow);
    } else {
        int r = g->rank;
        int64_t pd[KF_MAX_RANK];
        memcpy(pd, g->dims, sizeof pd);
        pd[r - 3] = gm->m;
        pd[r - 2] = gm->n;
        cg_gemm_coords(x, KF_SPACE_OUT, r - 1, pd, qv, cv, narrow);
        /* m: the product's row coordinate from q (q % M: a kernel may fold
         * the batch into its rows, so r alone is not the row) */
        char *mc = x->coord[KF_SPACE_OUT][gm->heads_first ? r - 2 : r - 3];
        if (narrow)
            snprintf(mc, COORD_MAX, "(qn %% %" PRId64 "u)", gm->m);
        else
            snprintf(mc, COORD_MAX, "(long long)((unsigned long long)q %% %" PRId64 "ull)", gm->m);
        snprintf(x->coord[KF_SPACE_OUT][gm->heads_first ? r - 3 : r - 2], COORD_MAX,
                 "(%s / %" PRId64 "%s)", cv, gm->head_dim, sfx);
        snprintf(x->coord[KF_SPACE_OUT][r - 1], COORD_MAX, "(%s %% %" PRId64 "%s)", cv,
                 gm->head_dim, sfx);
        x->vrank[KF_SPACE_OUT] = r;
    }
    x->vrank[KF_SPACE_ROW] = 0;
}

/* The column a head-split group's in-head ACC node k reads, proven for every
 * d in [0, D) where its value can reach a write: 1 when it is d ^ (D / 2)
 * (the rotate-half partner: the template passes those accumulators as accp,
 * at the same k), 0 when it is d itself, -1 when neither holds or the column
 * is not a function of d alone (the generated kernel then refuses the group;
 * the cuBLASLt side's epilogue kernel reads any in-head column). Values are
 * those of the i32 / bool nodes whose leaves are constants and the index
 * along the head axis; a where() whose condition is known at d passes
 * liveness to the branch it selects only (the clamps of a concat's two sides
 * are dead on the other side). */
static int head_partner(cg *c, uint32_t k) {
    const kf_group *g = c->g;
    int64_t D = g->gemm.head_dim;
    uint32_t n = g->n_expr;
    int64_t *val = kf_mem_calloc(c->mem, n, sizeof *val);
    bool *known = kf_mem_calloc(c->mem, n, sizeof *known);
    bool *live = kf_mem_calloc(c->mem, n, sizeof *live);
    int kind = -2; /* -2: dead everywhere so far */
    for (int64_t d = 0; val && known && live && d < D && kind != -1; d++) {
        for (uint32_t i = 0; i < n; i++) {
            const kf_expr *e = &g->expr[i];
            bool ib = e->dtype == KF_DTYPE_I32 || e->dtype == KF_DTYPE_BOOL;
            known[i] = false;
            live[i] = false;
            if (!ib || e->space != KF_SPACE_OUT)
                continue;
            if (e->kind == KF_EXPR_CONST) {
                val[i] = (int64_t)e->value;
                known[i] = true;
            } else if (e->kind == KF_EXPR_INDEX && e->axis == g->rank - 1) {
                val[i] = d;
                known[i] = true;
            } else if (e->kind == KF_EXPR_OP) {
                int ar = kf_form_arity(kf_op_get(e->op)->form);
                bool all = true;
                for (int j = 0; j < ar; j++)
                    all = all && known[e->src[j]];
                if (!all)
                    continue;
                int64_t a = val[e->src[0]], b = ar > 1 ? val[e->src[1]] : 0,
                        w = ar > 2 ? val[e->src[2]] : 0;
                known[i] = true;
                switch (e->op) {
                case KF_OP_ADD: val[i] = a + b; break;
                case KF_OP_SUB: val[i] = a - b; break;
                case KF_OP_MUL: val[i] = a * b; break;
                case KF_OP_MIN: val[i] = a < b ? a : b; break;
                case KF_OP_MAX: val[i] = a > b ? a : b; break;
                case KF_OP_NEG: val[i] = -a; break;
                case KF_OP_LT: val[i] = a < b; break;
                case KF_OP_LE: val[i] = a <= b; break;
                case KF_OP_GT: val[i] = a > b; break;
                case KF_OP_GE: val[i] = a >= b; break;
                case KF_OP_EQ: val[i] = a == b; break;
                case KF_OP_NE: val[i] = a != b; break;
                case KF_OP_WHERE: val[i] = a ? b : w; break;
                default: known[i] = false; break;
                }
            }
        }
        for (uint32_t w = 0; w < g->n_writes; w++)
            if (g->roots && g->roots[w] < n)
                live[g->roots[w]] = true;
        for (uint32_t i = n; i-- > 0;) {
            const kf_expr *e = &g->expr[i];
            if (!live[i])
                continue;
            if (e->kind == KF_EXPR_OP && e->op == KF_OP_WHERE && known[e->src[0]]) {
                live[e->src[0]] = true;
                live[val[e->src[0]] ? e->src[1] : e->src[2]] = true;
                continue;
            }
            for (int j = 0; j < 3; j++)
                if (e->src[j] != KF_NONE && (e->kind == KF_EXPR_OP || e->kind == KF_EXPR_LOAD ||
                                             e->kind == KF_EXPR_ACC))
                    live[e->src[j]] = true;
        }
        if (!live[k])
            continue;
        uint32_t s = g->expr[k].src[0];
        int here = !known[s] ? -1 : val[s] == (d ^ (D / 2)) ? 1 : val[s] == d ? 0 : -1;
        kind = kind == -2 || kind == here ? here : -1;
    }
    if (!val || !known || !live)
        kind = -1;
    kf_mem_free(c->mem, val, n * sizeof *val);
    kf_mem_free(c->mem, known, n * sizeof *known);
    kf_mem_free(c->mem, live, n * sizeof *live);
    return kind == -2 ? 0 : kind;
}

/* The epilogue's ops without a branch. In the register epilogue the
 * compiler can overlap the elements of a tile (8 adjacent columns a call,
 * 8 to 16 calls a thread) only where no element has a branch of its own:
 * a branch region (BSSY/BSYNC in SASS) is a wall it schedules nothing
 * across. common.cuh's kf_sigmoid branches on the sign of x (the lanes of a
 * warp hold both: the warp ran both paths) and divides with IEEE division
 * (a slow-path call after FCHK, one region per element); the SwiGLU dual
 * kernel's epilogue took ~17 us a tile on an H100 (b112146) of a ~62 us
 * tile. Here e = exp(-|x|) (expf, no branch), 1 / (1 + e) by rcp.approx
 * and one Newton step (1 + e is in [1, 2]: no denormal, no overflow; within
 * an ulp of the quotient), times 1 or e by a select: kf_sigmoid's value to
 * an ulp or two of f32, NaN in, NaN out, 0 and 1 at -inf and +inf.
 * kf_silu and kf_gelu_tanh are re-pointed too (common.cuh's call its
 * kf_sigmoid). Doubles keep common.cuh's. */
static const char gemm_fast_ops[] =
    "/* The sigmoid family without a branch (cg_gemm_epi.c says why). */\n"
    "__device__ __forceinline__ float kf_gm_sigmoid(float x) {\n"
    "    const float e = expf(-fabsf(x)), y = 1.0f + e;\n"
    "    float r;\n"
    "    asm(\"rcp.approx.ftz.f32 %0, %1;\" : \"=f\"(r) : \"f\"(y));\n"
    "    r = fmaf(fmaf(-y, r, 1.0f), r, r);\n"
    "    return (x >= 0.0f ? 1.0f : e) * r;\n"
    "}\n"
    "__device__ __forceinline__ double kf_gm_sigmoid(double x) { return kf_sigmoid(x); }\n"
    "__device__ __forceinline__ float kf_gm_silu(float x) { return x * kf_gm_sigmoid(x); }\n"
    "__device__ __forceinline__ double kf_gm_silu(double x) { return kf_silu(x); }\n"
    "/* x sigmoid(x) = x / (1 + 2^t), t = -log2(e) x: two MUFU ops (ex2, rcp;\n"
    " * each within an ulp or two of f32) and three others, where x times\n"
    " * kf_gm_sigmoid (expf's range reduction, the Newton step, the select)\n"
    " * takes ~12; NaN in, NaN out, -inf NaN as the reference gives, a large\n"
    " * negative x -0 (a SwiGLU pair in 2-CTA clusters, with KF_EPI_PK). */\n"
    "__device__ __forceinline__ float kf_gm_silu_ex2(float x) {\n"
    "    float e, r;\n"
    "    asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(e) : \"f\"(x * -1.44269504f));\n"
    "    asm(\"rcp.approx.ftz.f32 %0, %1;\" : \"=f\"(r) : \"f\"(1.0f + e));\n"
    "    return x * r;\n"
    "}\n"
    "__device__ __forceinline__ double kf_gm_silu_ex2(double x) { return kf_silu(x); }\n"
    "/* x sigmoid(2u) = x / (1 + 2^t), t = -2 log2(e) u, u = sqrt(2 / pi) (x +\n"
    " * 0.044715 x^3): two MUFU ops (ex2, rcp; each within an ulp or two of\n"
    " * f32), no branch, no table; -inf gives NaN as the reference does, a\n"
    " * large negative x -0. */\n"
    "__device__ __forceinline__ float kf_gm_gelu_tanh(float x) {\n"
    "    const float t = x * fmaf(-0.10294324f, x * x, -2.3022082f);\n"
    "    float e, r;\n"
    "    asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(e) : \"f\"(t));\n"
    "    asm(\"rcp.approx.ftz.f32 %0, %1;\" : \"=f\"(r) : \"f\"(1.0f + e));\n"
    "    return x * r;\n"
    "}\n"
    "__device__ __forceinline__ double kf_gm_gelu_tanh(double x) { return kf_gelu_tanh(x); }\n"
    "#define kf_sigmoid kf_gm_sigmoid\n#define kf_silu kf_gm_silu\n"
    "#define kf_gelu_tanh kf_gm_gelu_tanh\n\n"
    "/* The alignment kf_ldv / kf_stv need for VV elements at p: min(16, VV * size). */\n"
    "template <int VV, typename T> __device__ __forceinline__ unsigned kf_gm_vbytes(const T *) {\n"
    "    return VV * sizeof(T) < 16 ? (unsigned)(VV * sizeof(T)) : 16u;\n}\n\n";

/* With a gelu table (cg_emit_gelu_table): kf_gelu_bf16_v with kf_gelu_bf16's
 * cases for a value outside the table as selects instead of a call behind a
 * branch per element; the same values in the same order of cases. */
static void emit_gelu_tab_v(cg *c) {
    if (!c->s.p || !strstr(c->s.p, "kf_gelu_tab_src"))
        return;
    cg_printf(&c->s,
              "/* kf_gelu_bf16_v without a branch per element (cg_gemm_epi.c). */\n"
              "template <int VV> __device__ __forceinline__ void kf_gm_gelu_bf16_v(float *d, "
              "const float *a) {\n"
              "#pragma unroll\n"
              "    for (int k = 0; k < VV; k++) {\n"
              "        const float x = a[k];\n"
              "        const unsigned u = __float_as_uint(x) >> 16, i = kf_gelu_idx(u), "
              "m = u & 0x7fffu;\n"
              "        const float t = __uint_as_float((unsigned)kf_gelu_tab[min(i, %uu)] << 16);\n"
              "        const float big = (u < 0x8000u || m > 0x7f80u) ? x\n"
              "                          : (m == 0x7f80u ? __int_as_float(0x7fc00000) : -0.0f);\n"
              "        const float out = m < 0x%xu ? kf_round_bf16(0.5f * x) : big;\n"
              "        d[k] = i < %uu ? t : out;\n"
              "    }\n}\n#define kf_gelu_bf16_v kf_gm_gelu_bf16_v\n\n",
              GELU_TAB_N - 1, GELU_TAB_LO, GELU_TAB_N);
}

bool cg_gemm_dtype_ok(kf_dtype d) { return d == KF_DTYPE_BF16 || d == KF_DTYPE_F16; }

uint32_t kf_cuda_gemm_rs_node(const kf_plan *plan, uint32_t group) {
    if (!plan || group >= plan->n_groups)
        return KF_NONE;
    const kf_group *g = &plan->groups[group];
    const kf_gemm_info *gm = &g->gemm;
    if (g->kind != KF_GROUP_GEMM || gm->head_dim || g->rank < 2 || g->n_expr == 0 || !g->roots ||
        gm->n < 1 || g->dims[g->rank - 1] != gm->n ||
        cg_numel_of(g->rank, g->dims) % (gm->m * gm->n) != 0)
        return KF_NONE;
    uint32_t n = g->n_expr;
    bool live[n];
    memset(live, 0, sizeof live);
    for (uint32_t w = 0; w < g->n_writes; w++)
        if (g->roots[w] < n)
            live[g->roots[w]] = true;
    /* nodes read only lower ones: one sweep down from the roots */
    for (uint32_t k = n; k-- > 0;) {
        const kf_expr *e = &g->expr[k];
        if (!live[k] || e->kind != KF_EXPR_OP)
            continue;
        for (int j = 0; j < 3; j++)
            if (e->src[j] != KF_NONE && e->src[j] < k)
                live[e->src[j]] = true;
    }
    int64_t cs[KF_MAX_RANK], in = 1;
    for (int d = g->rank - 1; d >= 0; d--) {
        cs[d] = in;
        in *= g->dims[d];
    }
    for (uint32_t i = 0; i < n; i++) {
        const kf_expr *e = &g->expr[i];
        if (!live[i] || e->kind != KF_EXPR_LOAD || e->space != KF_SPACE_OUT ||
            cg_is_remapped_load(e) || e->offset != 0 || e->base >= plan->graph->n_nodes ||
            (e->dtype != KF_DTYPE_BF16 && e->dtype != KF_DTYPE_F16) ||
            plan->graph->nodes[e->base]->dtype != e->dtype ||
            kf_ir_numel(plan->graph->nodes[e->base]) < in)
            continue;
        bool laid = e->strides[g->rank - 1] == 1;
        for (int d = 0; d < g->rank - 1 && laid; d++)
            laid = g->dims[d] == 1 || e->strides[d] == cs[d];
        if (laid)
            return i;
    }
    return KF_NONE;
}

bool cg_gemm_space_is_product(const kf_group *g, const kf_cuda_gemm_shape *sh) {
    return g->rank >= 2 && g->dims[g->rank - 1] == sh->n &&
           cg_numel_of(g->rank, g->dims) == sh->batch * sh->m * sh->n;
}

/* kf_bf16x2 with operand a (RA) or b (RB) given unrounded (cg_raw_feed): its
 * pairs rounded and packed by one cvt.rn.bf16x2.f32, the bits kf_pk_bf16
 * makes of the two values kf_round_bf16 rounds. */
static const char gemm_bf16x2r[] =
    "/* kf_bf16x2 with a (RA) or b (RB) unrounded: rounded and packed in one cvt. */\n"
    "template <bool R> __device__ __forceinline__ unsigned kf_gm_pk2(float lo, float hi) {\n"
    "    unsigned v;\n"
    "    if (!R)\n"
    "        return kf_pk_bf16(lo, hi);\n"
    "    asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(v) : \"f\"(hi), \"f\"(lo));\n"
    "    return v;\n}\n"
    "template <int OP, int VV, bool RA, bool RB>\n"
    "__device__ __forceinline__ void kf_gm_bf16x2r(float *d, const float *a, const float *b) {\n"
    "#pragma unroll\n"
    "    for (int k = 0; k + 1 < VV; k += 2) {\n"
    "        const unsigned r =\n"
    "            kf_bop2<OP>(kf_gm_pk2<RA>(a[k], a[k + 1]), kf_gm_pk2<RB>(b[k], b[k + 1]));\n"
    "        d[k] = kf_lo_bf16(r);\n"
    "        d[k + 1] = kf_hi_bf16(r);\n"
    "    }\n"
    "    if (VV & 1)\n"
    "        d[VV - 1] = kf_bop1<OP>(RA ? kf_round_bf16(a[VV - 1]) : a[VV - 1],\n"
    "                                RB ? kf_round_bf16(b[VV - 1]) : b[VV - 1]);\n"
    "}\n\n";

/* kf_ldv for the epilogue's vector loads (c->pk_raw): a bf16 pair's two
 * values from its 32-bit word as kf_lo_bf16 and kf_hi_bf16 do (a shift, a
 * mask), where kf_cvt of the second element was a byte permute and a shift
 * (sm_90a, GPT-2's out projection: the bias words, ~3 instructions each);
 * a pair kf_bf16x2 packs again (a residual) folds back into the word. */
static const char gemm_ldv[] =
    "/* kf_ldv; bf16 pairs unpacked by a shift and a mask (cg_gemm_epi.c). */\n"
    "template <int N, typename T, typename R>\n"
    "__device__ __forceinline__ void kf_gm_ldv(const T *p, R *out) {\n"
    "    kf_ldv<N>(p, out);\n}\n"
    "template <int N> __device__ __forceinline__ void kf_gm_ldv(const kf_bf16 *p, float *out) {\n"
    "    if (N % 2 != 0) {\n"
    "        kf_ldv<N>(p, out);\n"
    "        return;\n"
    "    }\n"
    "    kf_raw<N * 2> r;\n"
    "    kf_raw_ld(p, r);\n"
    "    const unsigned *w = reinterpret_cast<const unsigned *>(r.b);\n"
    "#pragma unroll\n"
    "    for (int k = 0; k < N / 2; k++) {\n"
    "        out[2 * k] = kf_lo_bf16(w[k]);\n"
    "        out[2 * k + 1] = kf_hi_bf16(w[k]);\n"
    "    }\n}\n\n";

void cg_gemm_emit_fast_ops(cg *c) {
    cg_puts(&c->s, gemm_fast_ops);
    emit_gelu_tab_v(c);
}

/* The row epilogue's checks and the STAT nodes' overrides (the row's
 * statistics, rst->field, rounded as cg_emit_nodes rounds a STAT node);
 * allocates the two need sets. Returns why the kernel cannot take it, or
 * NULL. */
static const char *row_prepare(cg *c, const kf_cuda_gemm_shape *sh, cg_gemm_epi *ep) {
    const kf_group *g = c->g;
    const kf_gemm_info *gm = &g->gemm;
    if (!g->row.present || g->row.space != KF_SPACE_OUT || g->row.input >= g->n_expr ||
        g->expr[g->row.input].space != KF_SPACE_OUT)
        return "the row stage's input is not a value of the output space";
    if (sh->dual || gm->head_dim || gm->a_prologue || sh->a_fold || sh->a_scratch || sh->a_norm)
        return "a row epilogue on a SwiGLU pair, a head-split view or after a norm prologue";
    if (g->row.length != sh->n)
        return "the row stage's rows are not the product's rows";
    unsigned s = g->row.stats;
    for (uint32_t i = 0; i < g->n_expr; i++)
        if (g->expr[i].kind == KF_EXPR_STAT)
            s |= 1u << g->expr[i].stat;
    if (s & (1u << KF_STAT_ARGMAX))
        return "an argmax over the rows";
    ep->stats = s;
    for (uint32_t i = 0; i < g->n_expr; i++) {
        const kf_expr *e = &g->expr[i];
        if (e->kind != KF_EXPR_STAT)
            continue;
        const char *rnd = e->tensor != KF_NONE ? cg_round_fn(e->dtype) : NULL;
        if (rnd)
            snprintf(c->ov[i], OV_MAX, "%s(rst->%s)", rnd, cg_stat_field(e->stat));
        else
            snprintf(c->ov[i], OV_MAX, "rst->%s", cg_stat_field(e->stat));
    }
    ep->need_pre = kf_mem_calloc(c->mem, c->n + 1, sizeof *ep->need_pre);
    ep->need_epi = kf_mem_calloc(c->mem, c->n + 1, sizeof *ep->need_epi);
    ep->vl_pre.mem = c->mem;
    return NULL;
}

static void row_free(cg *c, cg_gemm_epi *ep) {
    kf_mem_free(c->mem, ep->need_pre, (c->n + 1) * sizeof *ep->need_pre);
    kf_mem_free(c->mem, ep->need_epi, (c->n + 1) * sizeof *ep->need_epi);
    kf_mem_free(c->mem, ep->vl_pre.p, ep->vl_pre.cap);
    ep->need_pre = ep->need_epi = NULL;
    memset(&ep->vl_pre, 0, sizeof ep->vl_pre);
}

void cg_gemm_epi_release(cg *c, cg_gemm_epi *ep) {
    kf_mem_free(c->mem, ep->vl.p, ep->vl.cap);
    memset(&ep->vl, 0, sizeof ep->vl);
    kf_mem_free(c->mem, ep->pf.p, ep->pf.cap);
    memset(&ep->pf, 0, sizeof ep->pf);
    kf_mem_free(c->mem, ep->cs.p, ep->cs.cap);
    memset(&ep->cs, 0, sizeof ep->cs);
    kf_mem_free(c->mem, ep->rsrc.p, ep->rsrc.cap);
    memset(&ep->rsrc, 0, sizeof ep->rsrc);
    row_free(c, ep);
}

/* A row epilogue's load of node i, its text at vl_at.. of ep->vl: copied
 * to kf_pre's loads where kf_pre reads it, and kept in kf_epi's only where
 * kf_epi reads it. */
static void row_route_load(cg_gemm_epi *ep, uint32_t i, size_t vl_at) {
    if (!ep->row || !ep->vl.p || ep->vl.oom)
        return;
    if (ep->need_pre[i])
        cg_printf(&ep->vl_pre, "%s", ep->vl.p + vl_at);
    if (!ep->need_epi[i]) {
        ep->vl.len = vl_at;
        ep->vl.p[vl_at] = 0;
    }
}

kf_status cg_gemm_epi_prepare(cg *c, const kf_cuda_gemm_shape *sh, chunk_ctx *x, cg_gemm_epi *ep) {
    const kf_group *g = c->g;
    const kf_gemm_info *gm = &g->gemm;
    memset(ep, 0, sizeof *ep);
    /* Each ACC node: its accumulator (acc: anchor 0, acc1: anchor 1), rounded
     * to the product's dtype only where the product itself is written; into
     * the epilogue it goes unrounded (f32), as the judge's fused reference
     * computes it. */
    for (uint32_t k = 0; k < g->n_expr; k++) {
        const kf_expr *e = &g->expr[k];
        if (e->kind != KF_EXPR_ACC)
            continue;
        const char *arr = e->anchor == 1 ? "acc1" : "acc";
        const char *rnd = cg_round_fn(e->dtype);
        bool written = false;
        for (uint32_t w = 0; w < g->n_writes; w++)
            written = written || g->writes[w] == e->tensor;
        if (e->src[0] != KF_NONE) { /* a head-split group's in-head column */
            int pk = g->gemm.head_dim ? head_partner(c, k) : -1;
            if (pk < 0)
                return cg_fail(c, KF_ERR_UNSUPPORTED,
                               "group %u (%s): an accumulator read at an in-head column that is "
                               "not proven the rotate-half partner (d ^ %lld) or d itself",
                               g->id, g->name, (long long)(g->gemm.head_dim / 2));
            arr = pk ? "accp" : "acc";
        }
        if (rnd && e->tensor != KF_NONE && written)
            snprintf(c->ov[k], OV_MAX, "%s(%s[k])", rnd, arr);
        else
            snprintf(c->ov[k], OV_MAX, "%s[k]", arr);
    }

    /* The writes: every one the whole output, in the output space (a
     * head-split group's: its head view, row-major). */
    int64_t total = sh->batch * sh->m * sh->n;
    for (uint32_t w = 0; w < g->n_writes && ep->n_outs < MAX_OUTS; w++) {
        uint32_t root = g->roots ? g->roots[w] : KF_NONE;
        uint32_t t = g->writes[w];
        if (root == KF_NONE && t != gm->anchor[0] && (!sh->dual || t != gm->anchor[1]))
            continue;
        const kf_tensor *tt = cg_tensor(c, t);
        if (kf_ir_numel(tt) != total || (root != KF_NONE && g->expr[root].space != KF_SPACE_OUT))
            return cg_fail(c, KF_ERR_UNSUPPORTED,
                           "group %u (%s): write %%%u is not the whole GEMM output", g->id, g->name,
                           t);
        ep->outs[ep->n_outs].node = root;
        ep->outs[ep->n_outs].bare1 = root == KF_NONE && sh->dual && t == gm->anchor[1];
        ep->outs[ep->n_outs].tensor = t;
        ep->outs[ep->n_outs].dtype = tt->dtype;
        ep->n_outs++;
    }
    if (ep->n_outs == 0)
        return cg_fail(c, KF_ERR_UNSUPPORTED, "group %u (%s): no writes", g->id, g->name);
    ep->row = gm->row_epilogue && !gm->row_split;
    if (ep->row) {
        const char *why = row_prepare(c, sh, ep);
        if (why)
            return cg_fail(c, KF_ERR_UNSUPPORTED, "group %u (%s): %s", g->id, g->name, why);
        if (!ep->need_pre || !ep->need_epi) {
            row_free(c, ep);
            return cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
        }
    }
    /* In place: the writes read the accumulators only through the norm's
     * input x, so kf_pre's x replaces them in the template's registers and
     * kf_epi reads x there (its ACC is x): the statistics' second step and
     * the writes reload none of x's operands, and no register holds both.
     * A group whose writes read the product otherwise (the bare product, a
     * value before x) stays on the cuBLASLt side. */
    uint32_t xn = ep->row ? g->row.input : KF_NONE;
    if (ep->row) {
        memcpy(ep->ov_x, c->ov[xn], sizeof ep->ov_x);
        snprintf(c->ov[xn], OV_MAX, "acc[k]");
    }
    for (uint32_t o = 0; o < ep->n_outs; o++)
        if (ep->outs[o].node != KF_NONE)
            cg_mark(c, ep->outs[o].node);
    if (ep->row) {
        ep->row_inplace = true;
        for (uint32_t o = 0; o < ep->n_outs; o++)
            ep->row_inplace = ep->row_inplace && ep->outs[o].node != KF_NONE;
        for (uint32_t i = 0; i < c->n; i++)
            if (c->need[i] && i != xn && g->expr[i].kind == KF_EXPR_ACC)
                ep->row_inplace = false;
        memcpy(c->ov[xn], ep->ov_x, sizeof ep->ov_x);
        if (!ep->row_inplace) {
            row_free(c, ep);
            return cg_fail(c, KF_ERR_UNSUPPORTED,
                           "group %u (%s): a write reads the product other than through the "
                           "row stage's input (the row epilogue keeps only that in registers)",
                           g->id, g->name);
        }
        /* kf_epi's nodes, kf_pre's (up to the norm's input); c->need: both */
        memcpy(ep->need_epi, c->need, c->n * sizeof *c->need);
        memset(c->need, 0, c->n * sizeof *c->need);
        cg_mark(c, xn);
        memcpy(ep->need_pre, c->need, c->n * sizeof *c->need);
        for (uint32_t i = 0; i < c->n; i++)
            c->need[i] = ep->need_epi[i] || ep->need_pre[i];
    }
    for (uint32_t i = 0; i < c->n; i++) {
        const kf_expr *e = &g->expr[i];
        if (!c->need[i])
            continue;
        bool ok = e->space == KF_SPACE_OUT &&
                  (e->kind == KF_EXPR_OP || e->kind == KF_EXPR_CONST || e->kind == KF_EXPR_LOAD ||
                   e->kind == KF_EXPR_ACC || e->kind == KF_EXPR_INDEX || e->kind == KF_EXPR_ROW ||
                   e->kind == KF_EXPR_COL || e->kind == KF_EXPR_BATCH ||
                   (ep->row && e->kind == KF_EXPR_STAT));
        if (e->kind == KF_EXPR_ACC && e->anchor != 0 && !(sh->dual && e->anchor == 1))
            ok = false;
        if (!ok) {
            row_free(c, ep);
            return cg_fail(c, KF_ERR_UNSUPPORTED,
                           "group %u (%s): a %s node in the %s space is not an accumulator "
                           "expression",
                           g->id, g->name, kf_expr_kind_name(e->kind),
                           e->space == KF_SPACE_OUT ? "output" : "row");
        }
    }
    cg_load_params(c);
    for (uint32_t o = 0; o < ep->n_outs; o++)
        ep->outs[o].param = cg_param_add(
            c,
            sh->x_scratch && ep->outs[o].tensor == sh->x_tensor ? KF_CUDA_PARAM_SCRATCH
                                                                : KF_CUDA_PARAM_OUT,
            ep->outs[o].tensor, ep->outs[o].dtype, cg_tensor_bytes(c, ep->outs[o].tensor));
    out_spec os[MAX_OUTS];
    uint32_t n_os = 0;
    for (uint32_t o = 0; o < ep->n_outs; o++) {
        if (ep->outs[o].node == KF_NONE)
            continue;
        os[n_os].node = ep->outs[o].node;
        os[n_os].param = ep->outs[o].param;
        os[n_os].dtype = ep->outs[o].dtype;
        os[n_os].tensor = ep->outs[o].tensor;
        os[n_os].synth_softmax = false;
        os[n_os].stat_pack = 0;
        n_os++;
    }
    cg_mark_stored(c, os, n_os);

    /* the row and column in 32 bits where they fit (a division by a
     * constant is then a multiply-high, where the 64-bit one is a dozen
     * instructions: a rotary epilogue's cos/sin addresses) */
    cg_gemm_epi_coords(x, g, (uint64_t)sh->batch * (uint64_t)sh->m <= UINT32_MAX);
    /* The loads, at their coordinates (column c0 + k). One contiguous along
     * the row (a bias, a residual) is one vector load of the VV columns
     * before the expressions (kf_ldv, when they are all inside and the
     * address is aligned for it), so a chunk's loads are all in flight at
     * once; the others one element each. A column past N is never read: a
     * ragged N (K-major B allows any) left the last vector's tail reading
     * past the operand. */
    ep->vl.mem = c->mem;
    ep->pf.mem = c->mem;
    ep->cs.mem = c->mem;
    ep->rsrc.mem = c->mem;
    ep->rs_node = KF_NONE;
    if (sh->row_rs) {
        /* the row epilogue's residual, staged in shared memory when the tile
         * starts (gemm_sm90.cuh KF_ROW_RS): kf_pre reads its pairs there */
        ep->rs_node = kf_cuda_gemm_rs_node(c->plan, (uint32_t)(g - c->plan->groups));
        if (ep->rs_node == KF_NONE || !c->need[ep->rs_node] || c->ov[ep->rs_node][0] ||
            !ep->row || sh->epi_tma || sh->epi_rs || sh->n % 8 != 0 ||
            !ep->need_pre[ep->rs_node] || ep->need_epi[ep->rs_node]) {
            row_free(c, ep);
            return cg_fail(c, KF_ERR_UNSUPPORTED,
                           "group %u (%s): the residual staged for the row epilogue "
                           "(shape.row_rs) needs a row epilogue whose norm input alone loads a "
                           "residual laid out as the output, N a multiple of 8",
                           g->id, g->name);
        }
    } else if (sh->epi_rs) {
        /* the residual, where there is one (else the 4 buffers alone) */
        ep->rs_node = kf_cuda_gemm_rs_node(c->plan, (uint32_t)(g - c->plan->groups));
        if ((ep->rs_node != KF_NONE && (!c->need[ep->rs_node] || c->ov[ep->rs_node][0])) ||
            !sh->epi_tma || ep->row) {
            row_free(c, ep);
            return cg_fail(c, KF_ERR_UNSUPPORTED,
                           "group %u (%s): the in-place chunks (shape.epi_rs) need the "
                           "TMA-store epilogue, and a residual that kf_epi loads",
                           g->id, g->name);
        }
    }
    /* kf_epi_al: the bases the register epilogue's unchecked vector
     * accesses need 16-byte aligned (checked once per kernel). */
    ep->al_conds[0] = 0;
    for (uint32_t i = 0; i < c->n; i++) {
        const kf_expr *e = &g->expr[i];
        if (!c->need[i] || c->ov[i][0] || e->kind != KF_EXPR_LOAD)
            continue;
        int64_t s[KF_MAX_RANK];
        cg_node_strides(c, i, s);
        char off[OV_MAX - 64];
        size_t n = 0;
        off[0] = 0;
        int last = g->rank - 1;
        bool along = s[last] != 0 && g->dims[last] != 1; /* varies with k */
        bool vector = along && s[last] == 1;
        for (int d = 0; d < g->rank; d++) {
            if (s[d] == 0 || g->dims[d] == 1)
                continue;
            /* The TMA-store epilogue's column: c0 itself where the narrow
             * coordinate is its 32-bit copy cn (the same value): c0 + 8 j
             * of the template's unrolled calls then folds into the loads'
             * immediate offsets, where (unsigned)(c0 + 8 j), widened, was
             * a 64-bit add per load (GPT-2's out projection: 377 -> 266
             * instructions a 64 x 64 chunk) */
            const char *cd = x->coord[KF_SPACE_OUT][d];
            if (d == last && sh->epi_tma && !strcmp(cd, "cn"))
                cd = "c0";
            int w = snprintf(off + n, sizeof off - n, "%s(%s%s) * %" PRId64 "LL", n ? " + " : "",
                             cd, d == last && !vector ? " + k" : "", s[d]);
            n += w > 0 ? (size_t)w : 0;
            if (n >= sizeof off)
                break;
        }
        if (!off[0])
            snprintf(off, sizeof off, "0");
        size_t vl_at = ep->vl.len; /* where this load's text starts (row: which functions) */
        /* epi_rs: the residual's pair from the store buffer, at the address
         * the output pair goes to (the template's rsm: the TMA-store
         * epilogue's calls are of 2 columns), landed there by TMA; row_rs:
         * from the consumer's copy of its rows (kf_pre's rsm, kf_pre<2>) */
        if ((sh->epi_rs || sh->row_rs) && i == ep->rs_node) {
            cg_printf(&ep->vl,
                      "    %s l%u[VV];\n    {\n"
                      "        static_assert(VV == 2, \"the residual by TMA: column pairs\");\n"
                      "        unsigned w_;\n"
                      "        asm volatile(\"ld.shared.b32 %%0, [%%1];\" : \"=r\"(w_) : "
                      "\"r\"(rsm));\n",
                      cg_reg_type(e->dtype), i);
            if (e->dtype == KF_DTYPE_BF16)
                cg_printf(&ep->vl,
                          "        l%u[0] = kf_lo_bf16(w_);\n"
                          "        l%u[1] = kf_hi_bf16(w_);\n    }\n",
                          i, i);
            else
                cg_printf(&ep->vl,
                          "        l%u[0] = kf_f16_to_f32((unsigned short)(w_ & 0xffffu));\n"
                          "        l%u[1] = kf_f16_to_f32((unsigned short)(w_ >> 16));\n    }\n",
                          i, i);
            snprintf(c->ov[i], OV_MAX, "l%u[k]", i);
            row_route_load(ep, i, vl_at); /* row_rs: kf_pre's alone (checked above) */
            if (sh->row_rs) /* where the template's copies read it: row r, column c0 */
                cg_printf(&ep->rsrc,
                          "/* The residual at row r of batch b, column c0 (KF_ROW_RS's copies). */\n"
                          "__device__ __forceinline__ auto kf_row_rs_src(long long b, long long r, "
                          "long long c0, KF_PARAMS) {\n"
                          "    const long long q = b * KF_M + r;\n    (void)q;\n"
                          "    const unsigned qn = (unsigned)q, cn = (unsigned)c0;\n"
                          "    (void)qn;\n    (void)cn;\n    return p%d + (%s);\n}\n\n",
                          c->param[i], off);
            continue;
        }
        /* kf_gm_ldv (c->pk_raw): bf16 pairs unpacked by a shift and a mask */
        const char *ldv = c->pk_raw ? "kf_gm_ldv" : "kf_ldv";
        if (vector) {
            /* Aligned by construction when the base is (AL) and every other
             * stride and N are multiples of 8 elements (c0 is): then one
             * predicated vector load, with no branch. */
            bool stat = sh->n % 8 == 0;
            for (int d = 0; d < last; d++)
                if (s[d] != 0 && g->dims[d] != 1 && s[d] % 8 != 0)
                    stat = false;
            if (stat) {
                char cond[32];
                snprintf(cond, sizeof cond, " && kf_aligned(p%d, 16)", c->param[i]);
                if (!strstr(ep->al_conds, cond) &&
                    strlen(ep->al_conds) + strlen(cond) < sizeof ep->al_conds)
                    strcat(ep->al_conds, cond);
            }
            bool by_row = false;
            for (int d = 0; d < last; d++)
                by_row = by_row || (s[d] != 0 && g->dims[d] != 1);
            /* epi_cs: a column operand (a bias: the same columns for every
             * row), aligned by construction, of 2-byte elements, from the
             * consumer's staging area, where kf_epi_cs_fetch copied the
             * tile's columns of it (zeros past N) when the tile started;
             * slot j at csm + 2 j KF_ON bytes */
            uint32_t on = sh->dual ? sh->bn / 2 : sh->bn;
            if (sh->epi_cs && stat && !by_row && !ep->row && kf_dtype_size(e->dtype) == 2 &&
                (ep->n_cs + 1) * on * 2u <= 2048u) {
                uint32_t j = ep->n_cs++;
                cg_printf(&ep->vl,
                          "    %s l%u[VV];\n    {\n"
                          "        static_assert(VV == 2 || VV == 8, \"column pairs or 8\");\n"
                          "        unsigned w_[4];\n"
                          "        if (VV == 2)\n"
                          "            asm volatile(\"ld.shared.b32 %%0, [%%1];\" : \"=r\"(w_[0]) : "
                          "\"r\"(csm + %uu));\n"
                          "        else\n"
                          "            asm volatile(\"ld.shared.v4.b32 {%%0, %%1, %%2, %%3}, [%%4];\"\n"
                          "                         : \"=r\"(w_[0]), \"=r\"(w_[1]), \"=r\"(w_[2]), "
                          "\"=r\"(w_[3])\n"
                          "                         : \"r\"(csm + %uu));\n"
                          "#pragma unroll\n"
                          "        for (int k = 0; k < VV; k++)\n",
                          cg_reg_type(e->dtype), i, j * on * 2u, j * on * 2u);
                if (e->dtype == KF_DTYPE_BF16)
                    cg_printf(&ep->vl,
                              "            l%u[k] = k %% 2 ? kf_hi_bf16(w_[k / 2]) : "
                              "kf_lo_bf16(w_[k / 2]);\n    }\n",
                              i);
                else
                    cg_printf(&ep->vl,
                              "            l%u[k] = kf_f16_to_f32((unsigned short)(w_[k / 2] >> "
                              "(16 * (k %% 2))));\n    }\n",
                              i);
                cg_printf(&ep->cs, "    kf_gm_cs_copy(dst + %uu, p%d, col0, tid);\n", j * on * 2u,
                          c->param[i]);
                snprintf(c->ov[i], OV_MAX, "l%u[k]", i);
                continue;
            }
            cg_printf(
                &ep->vl,
                "    %s l%u[VV];\n    {\n        const auto *lp = p%d + (%s);\n"
                "        if (%s) {\n"
                "#pragma unroll\n"
                "            for (int k = 0; k < VV; k++)\n"
                "                l%u[k] = 0;\n"
                "            if (KF_EPI_NIN || c0 < KF_N)\n"
                "                %s<VV>(lp, l%u);\n"
                "        } else if (c0 + VV <= KF_N && kf_aligned(lp, kf_gm_vbytes<VV>(lp))) {\n"
                "            %s<VV>(lp, l%u);\n        } else {\n"
                "            for (int k = 0; k < VV; k++)\n"
                "                l%u[k] = c0 + k < KF_N ? kf_ld(lp + k) : decltype(kf_ld(lp))(0);\n"
                "        }\n    }\n",
                cg_reg_type(e->dtype), i, c->param[i], off,
                stat ? "AL && (VV == 8 || VV == 2)" : "false", i, ldv, i, ldv, i, i);
            snprintf(c->ov[i], OV_MAX, "l%u[k]", i);
            /* epi_pf: a row operand (its address varies with the row: a
             * residual, not a bias) aligned by construction, elements of 2
             * bytes or more (then a tile row's columns, from a multiple of
             * 64, a multiple of 8 of them, are a 16-byte aligned run of a
             * multiple of 16 bytes, as the bulk prefetch needs); not a head
             * view's (a run past one head) */
            if (sh->epi_pf && stat && by_row && !gm->head_dim && kf_dtype_size(e->dtype) >= 2)
                cg_printf(&ep->pf, "    kf_gm_pf(p%d + (%s), n);\n", c->param[i], off);
            row_route_load(ep, i, vl_at);
        } else if (along) {
            snprintf(c->ov[i], OV_MAX,
                     "(c0 + k < KF_N ? kf_ld(p%d + (%s)) : decltype(kf_ld(p%d))(0))", c->param[i],
                     off, c->param[i]);
        } else {
            snprintf(c->ov[i], OV_MAX, "kf_ld(p%d + (%s))", c->param[i], off);
        }
    }
    if (ep->row) /* kf_epi's nodes until kf_pre is emitted */
        memcpy(c->need, ep->need_epi, c->n * sizeof *c->need);
    return KF_OK;
}

/* x's override while kf_pre is emitted (its own), or kf_epi (in place: the
 * accumulator array holds x). */
static void row_ov_x(cg *c, const cg_gemm_epi *ep, bool pre) {
    uint32_t xn = c->g->row.input;
    if (pre || !ep->row_inplace)
        memcpy(c->ov[xn], ep->ov_x, sizeof ep->ov_x);
    else
        snprintf(c->ov[xn], OV_MAX, "acc[k]");
}

/* With a row epilogue: the statistics' defines (gemm_common.cuh's kf_gm_rs),
 * kf_gm_rst and kf_pre<VV, AL>, the norm's input x for VV columns (c->need
 * is kf_pre's while it is emitted, kf_epi's after). */
static void row_emit(cg *c, chunk_ctx *x, cg_gemm_epi *ep) {
    const kf_group *g = c->g;
    unsigned s = ep->stats;
    cg_printf(&c->s,
              "/* The row epilogue in the tile (cg_gemm_epi.c): the statistics gemm_common.cuh's\n"
              " * kf_gm_rs keeps, f32. */\n#define KF_ROW_EPI 1\n#define KF_RS_MAX %d\n"
              "#define KF_RS_EXP %d\n#define KF_RS_SUM %d\n#define KF_RS_M2 %d\n"
              "#define KF_RS_SQ %d\n#define KF_RS_EPS ",
              (s & (1u << KF_STAT_MAX | 1u << KF_STAT_SUMEXP)) != 0,
              (s & (1u << KF_STAT_SUMEXP)) != 0,
              (s & (1u << KF_STAT_SUM | 1u << KF_STAT_MEAN | 1u << KF_STAT_RSTD)) != 0,
              (s & (1u << KF_STAT_RSTD)) != 0, (s & (1u << KF_STAT_RMS_RSTD)) != 0);
    cg_emit_const(c, KF_DTYPE_F32, g->row.eps);
    /* x rounded to a 16-bit dtype by its own node: two to a register */
    const kf_expr *xe = &g->expr[g->row.input];
    int pack = xe->kind != KF_EXPR_OP || xe->tensor == KF_NONE ? 0
               : xe->dtype == KF_DTYPE_BF16                    ? 1
               : xe->dtype == KF_DTYPE_F16                     ? 2
                                                               : 0;
    cg_printf(&c->s, "\n#define KF_ROW_PACK %d", pack);
    cg_puts(&c->s,
            "\n/* A row's statistics, the STAT nodes' values (kf_epi's rst). */\n"
            "struct kf_gm_rst {\n    float max, sum, mean, rstd, rms_rstd, sumexp;\n};\n\n"
            "/* The row stage's input x (the norm's or softmax's operand) for VV adjacent\n"
            " * columns c0.. of row r of batch b, as the reference rounds it; columns past N\n"
            " * are the caller's to leave out. */\n"
            "template <int VV, bool AL>\n"
            "__device__ __forceinline__ void kf_pre(const float *acc, long long b, long long r, "
            "long long c0, KF_PARAMS, float *xo, unsigned rsm = 0u) {\n"
            "    (void)rsm;\n"
            "    const long long q = b * KF_M + r;\n    (void)q;\n"
            "    const unsigned qn = (unsigned)q, cn = (unsigned)c0;\n"
            "    (void)qn;\n    (void)cn;\n");
    if (ep->vl_pre.p)
        cg_puts(&c->s, ep->vl_pre.p);
    if (ep->vl_pre.oom)
        c->st = cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    memcpy(c->need, ep->need_pre, c->n * sizeof *c->need);
    row_ov_x(c, ep, true);
    cg_emit_nodes(c, cg_coord_of, x, "    ", true);
    cg_printf(&c->s,
              "#pragma unroll\n    for (int k = 0; k < VV; k++)\n        xo[k] = (float)v%u[k];\n"
              "}\n\n",
              g->row.input);
    memcpy(c->need, ep->need_epi, c->n * sizeof *c->need);
    row_ov_x(c, ep, false);
}

void cg_gemm_epi_emit(cg *c, const kf_cuda_gemm_shape *sh, chunk_ctx *x, cg_gemm_epi *ep) {
    /* KF_EPI_NIN 1 (a generator that knows it): every column c0 the
     * template passes is inside N (its tiles cover N exactly), so the
     * vector loads and the register epilogue's store skip their c0 < KF_N
     * test: a 64-bit compare, a predicate and the zeros of a predicated
     * load, per load (sm_90a, GPT-2's out projection: 668 instructions a
     * 64 x 64 chunk of the TMA-store epilogue with the test, 377 without) */
    cg_puts(&c->s, "#ifndef KF_EPI_NIN\n#define KF_EPI_NIN 0\n#endif\n");
    bool feeds = false; /* kf_gm_bf16x2r where a bf16x2 op reads an unrounded operand */
    for (uint32_t i = 0; i < c->n && !feeds; i++)
        feeds = c->need[i] && cg_raw_feed(c, i);
    if (feeds)
        cg_puts(&c->s, gemm_bf16x2r);
    if ((ep->vl.p && strstr(ep->vl.p, "kf_gm_ldv<")) ||
        (ep->vl_pre.p && strstr(ep->vl_pre.p, "kf_gm_ldv<")))
        cg_puts(&c->s, gemm_ldv);
    if (ep->row)
        row_emit(c, x, ep);
    /* the accumulators: f32, or f64 for an f64 product (the SIMT kernel) */
    bool f64 = cg_tensor(c, c->g->gemm.anchor[0])->dtype == KF_DTYPE_F64;
    cg_printf(
        &c->s,
        "/* The group's epilogue for VV adjacent columns c0.. of row r of batch b%s;\n"
        " * stores only when `ok` (r is then inside; the loads read at r either way).\n"
        " * AL: every base kf_epi_al names is 16-byte aligned (then a vector access whose\n"
        " * strides and N are multiples of 8 needs no alignment test). SINK: the one\n"
        " * output's values go to sink[0, VV) instead (the TMA-store epilogue). */\n"
        "template <int VV, bool AL, bool SINK = false>\n"
        "__device__ __forceinline__ void kf_epi(const %s *acc, %s"
        "long long b, long long r, long long c0, bool ok, KF_PARAMS, float *sink = nullptr%s%s) "
        "{\n    (void)sink;\n%s"
        "    const long long q = b * KF_M + r;\n    (void)q;\n"
        "    const unsigned qn = (unsigned)q, cn = (unsigned)c0; /* where they fit */\n"
        "    (void)qn;\n    (void)cn;\n",
        sh->dual          ? " (acc: the gate's accumulators, acc1: the up projection's)"
        : ep->row_inplace ? " (acc: the norm's input x, kf_pre's, in place of the accumulators)"
        : c->g->gemm.head_dim
            ? " (accp: the accumulators of columns c0 ^ KF_HEAD_D / 2 .., the rotate-half "
              "partners)"
            : "",
        f64 ? "double" : "float",
        sh->dual              ? (f64 ? "const double *acc1, " : "const float *acc1, ")
        : c->g->gemm.head_dim ? "const float *accp, "
                              : "",
        ep->row ? ", const kf_gm_rst *rst = nullptr" : "",
        sh->epi_rs   ? ", unsigned rsm = 0u"
        : ep->n_cs ? ", unsigned csm = 0u"
                     : "",
        ep->row ? "    (void)rst;\n" : "");
    if (c->g->gemm.head_dim)
        cg_puts(&c->s, "    (void)accp;\n");
    if (ep->vl.p) {
        cg_puts(&c->s, ep->vl.p);
        kf_mem_free(c->mem, ep->vl.p, ep->vl.cap);
    }
    if (ep->vl.oom)
        c->st = cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    cg_emit_nodes(c, cg_coord_of, x, "    ", true);
    /* Each output: one vector store when the VV columns are all inside and
     * the address is aligned for it (min(16, VV * size) bytes), else element
     * by element; two ifs rather than if/else, so both are predicated stores
     * and no branch region stands between one call's code and the next's. */
    /* A head-split group writes its head view row-major: with heads first,
     * row m of head h of batch b at ((b * H + h) * M + m) * D + d, where
     * b = q / M and m = q % M with the product's M (KF_M may hold the batch
     * folded into the rows). */
    char dst_off[200] = "q * KF_N + c0";
    const kf_gemm_info *hg = &c->g->gemm;
    if (hg->head_dim && hg->heads_first)
        snprintf(dst_off, sizeof dst_off,
                 "(long long)(((unsigned long long)q / %" PRId64 "ull * %" PRId64
                 "ull + (unsigned long long)c0 / %" PRId64 "ull) * %" PRId64
                 "ull + (unsigned long long)q %% %" PRId64 "ull) * %" PRId64 "LL + c0 %% %" PRId64
                 "LL",
                 hg->m, hg->n / hg->head_dim, hg->head_dim, hg->m, hg->m, hg->head_dim,
                 hg->head_dim);
    for (uint32_t o = 0; o < ep->n_outs; o++) {
        const char *rt = cg_reg_type(ep->outs[o].dtype);
        char val[48];
        if (ep->outs[o].node == KF_NONE)
            snprintf(val, sizeof val, "%s", ep->outs[o].bare1 ? "acc1" : "acc");
        else
            snprintf(val, sizeof val, "v%u%s", ep->outs[o].node,
                     cg_raw_of(c, ep->outs[o].node, true) ? "u" : "");
        cg_printf(&c->s,
                  "    {\n        %s o[VV];\n#pragma unroll\n        for (int k = 0; k < VV; k++)\n"
                  "            o[k] = (%s)%s[k];\n"
                  "        auto *dst = p%d + (%s);\n"
                  "        if (SINK) {\n"
                  "#pragma unroll\n"
                  "            for (int k = 0; k < VV; k++)\n"
                  "                sink[k] = (float)o[k];\n"
                  "        } else if (AL && VV == 8 && KF_N %% 8 == 0) {\n"
                  "            if (ok && (KF_EPI_NIN || c0 < KF_N))\n"
                  "                kf_stv<VV>(dst, o);\n"
                  "        } else {\n"
                  "            const bool vec =\n"
                  "                c0 + VV <= KF_N && kf_aligned(dst, kf_gm_vbytes<VV>(dst));\n"
                  "            if (ok && vec)\n"
                  "                kf_stv<VV>(dst, o);\n"
                  "#pragma unroll\n"
                  "            for (int k = 0; k < VV; k++)\n"
                  "                if (ok && !vec && c0 + k < KF_N)\n"
                  "                    kf_st(dst + k, o[k]);\n"
                  "        }\n    }\n",
                  rt, rt, val, ep->outs[o].param, dst_off);
        char cond[32];
        snprintf(cond, sizeof cond, " && kf_aligned(p%d, 16)", ep->outs[o].param);
        if (sh->n % 8 == 0 && !strstr(ep->al_conds, cond) &&
            strlen(ep->al_conds) + strlen(cond) < sizeof ep->al_conds)
            strcat(ep->al_conds, cond);
    }
    cg_puts(&c->s, "}\n\n");
    cg_printf(&c->s,
              "/* Whether kf_epi may run with AL: the bases it reads and writes unchecked. */\n"
              "__device__ __forceinline__ bool kf_epi_al(KF_PARAMS) {\n    return true%s;\n}\n\n",
              ep->al_conds);
    if (sh->epi_pk) /* the packed register epilogue's stores (KF_EPI_PK) */
        cg_printf(&c->s,
                  "/* The address of the one output's element at row r of batch b, column c0\n"
                  " * (a SwiGLU pair's packed register epilogue stores there). */\n"
                  "__device__ __forceinline__ auto kf_epi_out(long long b, long long r, "
                  "long long c0, KF_PARAMS) {\n"
                  "    const long long q = b * KF_M + r;\n    return p%d + (%s);\n}\n\n",
                  ep->outs[0].param, dst_off);
    if (ep->rsrc.p) { /* the row epilogue's residual copies (KF_ROW_RS) */
        cg_puts(&c->s, "#define KF_ROW_RS 1\n");
        cg_puts(&c->s, ep->rsrc.p);
    }
    if (ep->rsrc.oom)
        c->st = cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    kf_mem_free(c->mem, ep->rsrc.p, ep->rsrc.cap);
    memset(&ep->rsrc, 0, sizeof ep->rsrc);
    if (sh->epi_pf) { /* the row operands' L2 prefetch (KF_EPI_PF) */
        cg_puts(&c->s,
                "/* n elements from p into L2 (16-byte aligned, n * size a multiple of 16). */\n"
                "template <typename T>\n"
                "__device__ __forceinline__ void kf_gm_pf(const T *p, int n) {\n"
                "    asm volatile(\"cp.async.bulk.prefetch.L2.global [%0], %1;\" ::\"l\"(p),\n"
                "                 \"r\"((unsigned)(n * (int)sizeof(T)))\n"
                "                 : \"memory\");\n}\n"
                "/* The epilogue's row operands at row r of batch b, columns c0 .. c0 + n\n"
                " * (c0 a multiple of 64, n a multiple of 8), into L2. */\n"
                "__device__ __forceinline__ void kf_epi_pf(long long b, long long r, "
                "long long c0, int n, KF_PARAMS) {\n"
                "    const long long q = b * KF_M + r;\n    (void)q;\n"
                "    const unsigned qn = (unsigned)q, cn = (unsigned)c0;\n"
                "    (void)qn;\n    (void)cn;\n    (void)n;\n");
        if (ep->pf.p)
            cg_puts(&c->s, ep->pf.p);
        if (ep->pf.oom)
            c->st = cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
        cg_puts(&c->s, "}\n\n");
    }
    kf_mem_free(c->mem, ep->pf.p, ep->pf.cap);
    memset(&ep->pf, 0, sizeof ep->pf);
    if (ep->n_cs) { /* the column operands' copies (KF_EPI_CS) */
        cg_printf(&c->s,
                  "#define KF_EPI_CS %u\n"
                  "/* Columns col0 .. col0 + %u of the column operand p into dst (16-byte\n"
                  " * pieces, a thread a piece, zeros past N: N is a multiple of 8), by\n"
                  " * cp.async. */\n"
                  "template <typename T>\n"
                  "__device__ __forceinline__ void kf_gm_cs_copy(unsigned dst, const T *p, "
                  "long long col0, int tid) {\n"
                  "    for (int i = tid; i < %u; i += 128) {\n"
                  "        const long long c = col0 + 8 * i;\n"
                  "        const unsigned n = c < KF_N ? 16u : 0u;\n"
                  "        asm volatile(\"cp.async.cg.shared.global [%%0], [%%1], 16, %%2;\" ::\"r\"(\n"
                  "                         dst + 16u * (unsigned)i),\n"
                  "                     \"l\"(__cvta_generic_to_global(p + (c < KF_N ? c : 0))), "
                  "\"r\"(n)\n"
                  "                     : \"memory\");\n"
                  "    }\n}\n"
                  "/* The tile's columns col0.. of every column operand kf_epi reads at csm,\n"
                  " * into the staging area at dst (thread tid of the consumer's 128). */\n"
                  "__device__ __forceinline__ void kf_epi_cs_fetch(unsigned dst, long long col0, "
                  "int tid, KF_PARAMS) {\n",
                  ep->n_cs, (sh->dual ? sh->bn / 2 : sh->bn) - 1,
                  (sh->dual ? sh->bn / 2 : sh->bn) / 8);
        if (ep->cs.p)
            cg_puts(&c->s, ep->cs.p);
        if (ep->cs.oom)
            c->st = cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
        cg_puts(&c->s, "    asm volatile(\"cp.async.commit_group;\" ::: \"memory\");\n}\n\n");
    }
    kf_mem_free(c->mem, ep->cs.p, ep->cs.cap);
    memset(&ep->cs, 0, sizeof ep->cs);
    /* The TMA-store epilogue's pair of output values, packed. Values exact in
     * bf16 (a bf16x2 op's, kf_bf16x2: the residual add) are packed by
     * kf_pk_bf16's bit operations, which fold with the unpacking of the
     * bf16x2 result into nothing; a cvt (opaque asm) was an unpack and a
     * repack, three instructions a pair (GPT-2's out projection: 48 of a
     * 64 x 64 chunk's 266). The same bits: a bf16 value converts to itself. */
    const uint32_t on0 = ep->outs[0].node;
    if (c->pk_raw && sh->epi_tma && ep->outs[0].dtype == KF_DTYPE_BF16 && on0 != KF_NONE &&
        cg_exact_bf16(c, on0) && !cg_raw_of(c, on0, true))
        cg_puts(&c->s, "__device__ __forceinline__ unsigned kf_gm_pack2(float lo, float hi) {\n"
                       "    return kf_pk_bf16(lo, hi); /* exact bf16 values */\n}\n\n");
    else if (sh->epi_tma || sh->epi_pk)
        cg_printf(&c->s,
                  "__device__ __forceinline__ unsigned kf_gm_pack2(float lo, float hi) {\n"
                  "    unsigned v;\n"
                  "    asm(\"cvt.rn.%sx2.f32 %%0, %%1, %%2;\" : \"=r\"(v) : \"f\"(hi), \"f\"(lo));\n"
                  "    return v;\n}\n\n",
                  ep->outs[0].dtype == KF_DTYPE_BF16 ? "bf16" : "f16");
    cg_puts(&c->s, kf_cuda_tpl_gemm_common);
    if (ep->row)
        row_free(c, ep);
}
