/*
 * cg_gemm_fold.c -- a GEMM group's norm prologue folded into B
 * (templates/gemm_fold.cuh has the algebra).
 *
 *   plan group --kf_cuda_gemm_fold_of--> the prologue as n = (x - mean) *
 *     rstd * gamma + beta (or x * rstd * gamma): which nodes are gamma, beta
 *     and the statistics
 *   --kf_cuda_codegen_gemm_fold--> the pre-pass: W = diag(gamma) B (and a
 *     LayerNorm's column sums c, d)
 *   --cg_gemm_fold_prepare / _emit--> in the GEMM kernel's source, kf_fold:
 *     acc = rstd[r] * (acc - mean[r] * c[col]) + d[col] for 8 columns of a
 *     row, before the group's epilogue reads the accumulators.
 *
 * A LayerNorm's product whose one reader is a bias add (h + b,
 * kf_cuda_gemm_fold_bias) takes the bias in d as well (shape.fold_bias, the
 * fold shape's bias): the pre-pass writes d[col] + b[col], and the
 * epilogue's load of b reads -0, so its add drops out.
 *
 * Numerics: the main loop multiplies x, exact, by W rounded once to B's
 * dtype, and the statistics scale the f32 sum; the reference rounds the
 * norm's steps of A instead (x * rstd, times gamma). Neither error is larger
 * than the other's by construction; the judge compares both with the exact
 * value (issue 15's rule), not with each other.
 */
#include "codegen/cuda/cg.h"

#include "codegen/cuda/cg_gemm.h"

#include "codegen/cuda/templates.h"

/* The node under casts (a cast changes no value the fold keeps in f32). */
static uint32_t under_casts(const kf_group *g, uint32_t i) {
    while (i != KF_NONE && i < g->n_expr && g->expr[i].kind == KF_EXPR_OP &&
           g->expr[i].op == KF_OP_CAST)
        i = g->expr[i].src[0];
    return i;
}

bool cg_gemm_column_load(const kf_plan *plan, const kf_group *g, uint32_t i) {
    if (i == KF_NONE || i >= g->n_expr || g->expr[i].kind != KF_EXPR_LOAD || g->row_rank < 1)
        return false;
    const kf_expr *e = &g->expr[i];
    kf_dtype dt = plan->graph->nodes[e->base]->dtype;
    if (dt != KF_DTYPE_F32 && dt != KF_DTYPE_BF16 && dt != KF_DTYPE_F16)
        return false;
    for (int d = 0; d + 1 < g->row_rank; d++)
        if (e->strides[d] != 0 && g->row_dims[d] != 1)
            return false;
    return true;
}

int64_t cg_gemm_column_stride(const kf_group *g, uint32_t i) {
    return g->row_dims[g->row_rank - 1] == 1 ? 0 : g->expr[i].strides[g->row_rank - 1];
}

static bool is_stat(const kf_group *g, uint32_t i, kf_stat s) {
    return i != KF_NONE && i < g->n_expr && g->expr[i].kind == KF_EXPR_STAT && g->expr[i].stat == s;
}

/* Node i is op `op` of two operands: *a, *b (under casts). */
static bool binary(const kf_group *g, uint32_t i, kf_op op, uint32_t *a, uint32_t *b) {
    if (i == KF_NONE || i >= g->n_expr || g->expr[i].kind != KF_EXPR_OP || g->expr[i].op != op)
        return false;
    *a = under_casts(g, g->expr[i].src[0]);
    *b = under_casts(g, g->expr[i].src[1]);
    return true;
}

/* x * rstd (RMSNorm) or (x - mean) * rstd (LayerNorm), either order. */
static bool scaled_row(const kf_group *g, uint32_t i, kf_cuda_gemm_fold *f) {
    uint32_t a, b;
    if (!binary(g, i, KF_OP_MUL, &a, &b))
        return false;
    uint32_t x = g->row.input;
    for (int t = 0; t < 2; t++, a ^= b, b ^= a, a ^= b) {
        if (a == x && is_stat(g, b, KF_STAT_RMS_RSTD)) {
            f->ln = false;
            f->rstd = b;
            f->mean = KF_NONE;
            return true;
        }
        uint32_t s0, s1;
        if (is_stat(g, b, KF_STAT_RSTD) && binary(g, a, KF_OP_SUB, &s0, &s1) && s0 == x &&
            is_stat(g, s1, KF_STAT_MEAN)) {
            f->ln = true;
            f->rstd = b;
            f->mean = s1;
            return true;
        }
    }
    return false;
}

bool kf_cuda_gemm_fold_of(const kf_plan *plan, uint32_t group, kf_cuda_gemm_fold *f) {
    if (!plan || !f || group >= plan->n_groups)
        return false;
    const kf_group *g = &plan->groups[group];
    const kf_gemm_info *gm = &g->gemm;
    if (g->kind != KF_GROUP_GEMM || !gm->a_prologue || gm->a_root == KF_NONE || !g->row.present ||
        g->expr[g->row.input].kind != KF_EXPR_LOAD)
        return false;
    memset(f, 0, sizeof *f);
    f->gamma = f->beta = KF_NONE;
    uint32_t t = under_casts(g, gm->a_root), a, b;
    /* + beta */
    if (binary(g, t, KF_OP_ADD, &a, &b)) {
        if (cg_gemm_column_load(plan, g, b))
            f->beta = b;
        else if (cg_gemm_column_load(plan, g, a)) {
            f->beta = a;
            a = b;
        } else
            return false;
        t = a;
    }
    /* * gamma */
    if (!scaled_row(g, t, f)) {
        if (!binary(g, t, KF_OP_MUL, &a, &b))
            return false;
        if (cg_gemm_column_load(plan, g, b) && scaled_row(g, a, f))
            f->gamma = b;
        else if (cg_gemm_column_load(plan, g, a) && scaled_row(g, b, f))
            f->gamma = a;
        else
            return false;
    }
    return f->ln || f->beta == KF_NONE; /* an RMSNorm plus a column: not a norm of ours */
}

/* Whether node i reads node j (any operand). */
static bool reads(const kf_group *g, uint32_t i, uint32_t j) {
    const kf_expr *e = &g->expr[i];
    return (e->kind == KF_EXPR_OP || e->kind == KF_EXPR_LOAD || e->kind == KF_EXPR_ACC) &&
           (e->src[0] == j || e->src[1] == j || e->src[2] == j);
}

/* Whether node j is read by node `by` alone, and is no write's root. */
static bool only_reader(const kf_group *g, uint32_t j, uint32_t by) {
    for (uint32_t i = 0; i < g->n_expr; i++)
        if (i != by && reads(g, i, j))
            return false;
    for (uint32_t w = 0; w < g->n_writes; w++)
        if (g->roots && g->roots[w] == j)
            return false;
    return true;
}

uint32_t kf_cuda_gemm_fold_bias(const kf_plan *plan, uint32_t group) {
    kf_cuda_gemm_fold f;
    if (!kf_cuda_gemm_fold_of(plan, group, &f) || !f.ln)
        return KF_NONE;
    const kf_group *g = &plan->groups[group];
    if (g->gemm.n_anchors != 1 || g->rank < 1)
        return KF_NONE;
    uint32_t acc = KF_NONE;
    for (uint32_t i = 0; i < g->n_expr; i++) {
        const kf_expr *e = &g->expr[i];
        if (e->kind != KF_EXPR_ACC)
            continue;
        if (acc != KF_NONE || e->anchor != 0 || e->src[0] != KF_NONE)
            return KF_NONE; /* one ACC node, the product at its own column */
        for (uint32_t w = 0; w < g->n_writes; w++)
            if (g->writes[w] == e->tensor)
                return KF_NONE; /* the product itself is written */
        acc = i;
    }
    for (uint32_t i = 0; acc != KF_NONE && i < g->n_expr; i++) {
        const kf_expr *e = &g->expr[i];
        if (e->kind != KF_EXPR_OP || e->op != KF_OP_ADD || e->space != KF_SPACE_OUT ||
            (e->src[0] != acc && e->src[1] != acc))
            continue;
        uint32_t l = e->src[0] == acc ? e->src[1] : e->src[0];
        if (l == KF_NONE || l == acc || !only_reader(g, acc, i) || !only_reader(g, l, i))
            return KF_NONE;
        const kf_expr *ld = &g->expr[l];
        if (ld->kind != KF_EXPR_LOAD || ld->space != KF_SPACE_OUT || ld->remapped ||
            ld->src[0] != KF_NONE || ld->src[1] != KF_NONE || ld->src[2] != KF_NONE)
            return KF_NONE;
        kf_dtype dt = plan->graph->nodes[ld->base]->dtype;
        if (dt != KF_DTYPE_F32 && dt != KF_DTYPE_BF16 && dt != KF_DTYPE_F16)
            return KF_NONE;
        for (int d = 0; d + 1 < g->rank; d++) /* a function of the column alone */
            if (ld->strides[d] != 0 && g->dims[d] != 1)
                return KF_NONE;
        return l;
    }
    return KF_NONE;
}

bool kf_cuda_gemm_gscale_takes(const kf_plan *plan, uint32_t group) {
    kf_cuda_gemm_fold f;
    if (!kf_cuda_gemm_fold_of(plan, group, &f) || f.ln)
        return false;
    const kf_group *g = &plan->groups[group];
    return f.gamma == KF_NONE ||
           (plan->graph->nodes[g->expr[f.gamma].base]->dtype == KF_DTYPE_BF16 &&
            cg_gemm_column_stride(g, f.gamma) == 1 && g->expr[f.gamma].offset % 8 == 0);
}

/* Element n of the group's fold bias `node` (kf_cuda_gemm_fold_bias, a load
 * of the output space) as C text. */
static void load_n(cg *c, const kf_group *g, uint32_t node, int param, const char *n) {
    int64_t st = g->dims[g->rank - 1] == 1 ? 0 : g->expr[node].strides[g->rank - 1];
    cg_printf(&c->s, "(float)kf_ld(p%d + (%" PRId64 "LL + (%s) * %" PRId64 "LL))", param,
              g->expr[node].offset, n, st);
}

/* The fold's bias param (IN, its base tensor) where fs asks for it, else -1;
 * *node the bias load. */
static int bias_param(cg *c, const kf_group *g, const kf_cuda_fold_shape *fs, uint32_t *node) {
    *node = fs->bias ? kf_cuda_gemm_fold_bias(c->plan, g->id) : KF_NONE;
    if (!fs->bias)
        return -1;
    if (*node == KF_NONE) {
        cg_fail(c, KF_ERR_INVALID_ARGUMENT,
                "group %u (%s): a fold shape with a bias the group does not add", g->id, g->name);
        return -1;
    }
    uint32_t base = g->expr[*node].base;
    return cg_param_add(c, KF_CUDA_PARAM_IN, base, cg_tensor(c, base)->dtype, 0);
}

/* Element k of column load `node` as C text: p<param>[k * stride]. */
static void load_k(cg *c, uint32_t node, int param, const char *k) {
    cg_printf(&c->s, "(float)kf_ld(p%d + (%" PRId64 "LL + (%s) * %" PRId64 "LL))", param,
              c->g->expr[node].offset, k, cg_gemm_column_stride(c->g, node));
}

kf_status kf_cuda_codegen_gemm_fold(const kf_plan *plan, uint32_t group, const char *arch,
                                    const kf_mem *mem, const kf_cuda_fold_shape *fs,
                                    kf_cuda_kernel *out) {
    cg c;
    kf_status st = cg_begin(&c, plan, group, arch, mem, out);
    if (st != KF_OK)
        return cg_end(&c, st);
    const kf_group *g = c.g;
    kf_cuda_gemm_fold f;
    if (!kf_cuda_gemm_fold_of(plan, group, &f))
        return cg_end(&c, cg_fail(&c, KF_ERR_NOT_FOUND,
                                  "group %u (%s): no norm prologue the fold takes", g->id,
                                  g->name));
    const kf_gemm_info *gm = &g->gemm;
    if (!fs || fs->anchor < 0 || fs->anchor >= (int)gm->n_anchors || fs->k < 1 || fs->n < 1 ||
        (fs->sk != 1 && fs->sn != 1))
        return cg_end(&c, cg_fail(&c, KF_ERR_INVALID_ARGUMENT,
                                  "group %u (%s): bad fold shape", g->id, g->name));
    uint32_t bt = gm->b[fs->anchor], at = gm->anchor[fs->anchor];
    kf_dtype dt = cg_tensor(&c, bt)->dtype;
    c.k->tmpl = KF_CUDA_TEMPLATE_GEMM_FOLD;
    cg_set_name(&c, fs->anchor ? "fold2_" : "fold_");
    bool kmajor = fs->sk == 1 && fs->sn != 1;
    int pb = cg_param_add(&c, KF_CUDA_PARAM_IN, bt, dt, 0);
    int pg = f.gamma != KF_NONE ? cg_param_add(&c, KF_CUDA_PARAM_IN, g->expr[f.gamma].base,
                                               cg_tensor(&c, g->expr[f.gamma].base)->dtype, 0)
                                : -1;
    int pbe = f.beta != KF_NONE ? cg_param_add(&c, KF_CUDA_PARAM_IN, g->expr[f.beta].base,
                                               cg_tensor(&c, g->expr[f.beta].base)->dtype, 0)
                                : -1;
    uint32_t bias;
    int pbi = bias_param(&c, g, fs, &bias);
    int pw = cg_param_add(&c, KF_CUDA_PARAM_SCRATCH, bt, dt,
                          (uint64_t)fs->k * (uint64_t)fs->n * kf_dtype_size(dt));
    int pcd = f.ln ? cg_param_add(&c, KF_CUDA_PARAM_SCRATCH, at, KF_DTYPE_F32,
                                  (uint64_t)fs->n * 2u * 4u)
                   : -1;
    /* Slices of K where no column sums are taken: 256 k a slice (K-major:
     * 8 a lane; N-major: 32 a warp), else all of K. 8 warps a block; 32 for
     * a LayerNorm's N-major pass, whose blocks each take all of K: on
     * GPT-2-medium's Q/K/V (1024 x 3072) 8 warps a block left 96 blocks of
     * 128 sequential rows each. */
    int64_t ks = f.ln ? fs->k : 256;
    uint32_t warps = f.ln && !kmajor ? 32u : 8u;
    int64_t cols = kmajor ? (int64_t)warps : 32;
    int64_t chunks = (fs->n + cols - 1) / cols;
    int64_t slices = (fs->k + ks - 1) / ks;
    kf_cuda_kernel *k = c.k;
    k->vec = 1;
    k->launch.block = 32u * warps;
    k->launch.work_items = (uint64_t)(chunks * slices);
    k->launch.items_per_block = 1;
    k->launch.blocks_per_sm = 2048u / (32u * warps);
    cg_emit_head(&c, "GEMM norm prologue folded into B (diag(gamma) B, column sums)");
    cg_printf(&c.s,
              "#define KF_FK %" PRId64 "LL\n#define KF_FN %" PRId64 "LL\n#define KF_FKS %" PRId64
              "LL\n#define KF_FKMAJOR %d\n#define KF_FLN %d\n#define KF_FW p%d\n",
              fs->k, fs->n, ks, kmajor ? 1 : 0, f.ln ? 1 : 0, pw);
    if (pcd >= 0)
        cg_printf(&c.s, "#define KF_FCD p%d\n", pcd);
    cg_printf(&c.s, "#define kf_fround %s\n", cg_round_fn(dt) ? cg_round_fn(dt) : "");
    cg_printf(&c.s,
              "__device__ __forceinline__ float kf_fb(long long k, long long n, KF_PARAMS) {\n"
              "    return (float)kf_ld(p%d + k * %" PRId64 "LL + n * %" PRId64 "LL);\n}\n",
              pb, fs->sk, fs->sn);
    cg_puts(&c.s, "__device__ __forceinline__ float kf_fg(long long k, KF_PARAMS) {\n    (void)k;\n"
                  "    return ");
    if (pg >= 0)
        load_k(&c, f.gamma, pg, "k");
    else
        cg_puts(&c.s, "1.0f");
    cg_puts(&c.s, ";\n}\n__device__ __forceinline__ float kf_fbeta(long long k, KF_PARAMS) {\n"
                  "    (void)k;\n    return ");
    if (pbe >= 0)
        load_k(&c, f.beta, pbe, "k");
    else
        cg_puts(&c.s, "0.0f");
    cg_puts(&c.s, ";\n}\n");
    cg_printf(&c.s, "#define KF_FBIAS %d\n", pbi >= 0 ? 1 : 0);
    if (pbi >= 0) { /* the epilogue's bias, carried in d */
        cg_puts(&c.s, "__device__ __forceinline__ float kf_fbias(long long n, KF_PARAMS) {\n"
                      "    return ");
        load_n(&c, g, bias, pbi, "n");
        cg_puts(&c.s, ";\n}\n");
    }
    cg_puts(&c.s, "\n");
    cg_puts(&c.s, kf_cuda_tpl_gemm_fold);
    return cg_end(&c, c.st);
}

/* Element k of column load `node` of group g as C text (load_k for a job's
 * group). */
static void load_k_of(cg *c, const kf_group *g, uint32_t node, int param, const char *k) {
    cg_printf(&c->s, "(float)kf_ld(p%d + (%" PRId64 "LL + (%s) * %" PRId64 "LL))", param,
              g->expr[node].offset, k, cg_gemm_column_stride(g, node));
}

/* The merged pre-pass's block: 32 warps (a LayerNorm's N-major fold takes
 * all of K in a block; the statistics take a row a warp). */
#define PRE_WARPS 32
/* A flat fold item's elements: 4 loads of 8 a thread (gemm_prepass.cuh's
 * KF_PFLAT_U, on PRE_WARPS warps). */
#define PRE_FLAT (PRE_WARPS * 32 * 8 * 4)

/* Job j of the pre-pass: its params and kf_pj<j>, the constants and loads
 * templates/gemm_prepass.cuh reads; *items its work items. */
static kf_status prepass_job(cg *c, const kf_cuda_fold_job *jb, int j, int64_t *items) {
    const kf_plan *plan = c->plan;
    const kf_group *g = &plan->groups[jb->group];
    const kf_gemm_info *gm = &g->gemm;
    const kf_cuda_fold_shape *fs = &jb->fs;
    kf_cuda_gemm_fold f;
    if (!kf_cuda_gemm_fold_of(plan, jb->group, &f))
        return cg_fail(c, KF_ERR_NOT_FOUND, "group %u (%s): no norm prologue the fold takes", g->id,
                       g->name);
    if (fs->anchor < 0 || fs->anchor >= (int)gm->n_anchors || fs->k < 1 || fs->n < 1 ||
        (fs->sk != 1 && fs->sn != 1))
        return cg_fail(c, KF_ERR_INVALID_ARGUMENT, "group %u (%s): bad fold shape", g->id, g->name);
    if (fs->k * fs->n >= INT32_MAX)
        return cg_fail(c, KF_ERR_UNSUPPORTED, "group %u (%s): a B of 2^31 elements or more", g->id,
                       g->name);
    uint32_t bt = gm->b[fs->anchor], at = gm->anchor[fs->anchor];
    kf_dtype dt = cg_tensor(c, bt)->dtype;
    bool kmajor = fs->sk == 1 && fs->sn != 1;
    int pb = cg_param_add(c, KF_CUDA_PARAM_IN, bt, dt, 0);
    int pg = f.gamma != KF_NONE ? cg_param_add(c, KF_CUDA_PARAM_IN, g->expr[f.gamma].base,
                                               cg_tensor(c, g->expr[f.gamma].base)->dtype, 0)
                                : -1;
    int pbe = f.beta != KF_NONE ? cg_param_add(c, KF_CUDA_PARAM_IN, g->expr[f.beta].base,
                                               cg_tensor(c, g->expr[f.beta].base)->dtype, 0)
                                : -1;
    uint32_t bias;
    int pbi = bias_param(c, g, fs, &bias);
    int pw = cg_param_add(c, KF_CUDA_PARAM_SCRATCH, bt, dt,
                          (uint64_t)fs->k * (uint64_t)fs->n * kf_dtype_size(dt));
    int pcd =
        f.ln ? cg_param_add(c, KF_CUDA_PARAM_SCRATCH, at, KF_DTYPE_F32, (uint64_t)fs->n * 2u * 4u)
             : -1;
    /* the items as gemm_fold.cuh cuts them, on PRE_WARPS warps; or, for an
     * RMSNorm's fold (no column sums: W = diag(g) B element by element) of a
     * contiguous 2-byte B whose major dimension is a multiple of 8, flat
     * runs of B in memory order, 8 elements (16 bytes) a load
     * (gemm_prepass.cuh kf_pfold_flat) */
    int64_t ks = f.ln ? fs->k : 256;
    int64_t cols = kmajor ? PRE_WARPS : 32;
    bool contiguous = kmajor ? fs->sn == fs->k : fs->sk == fs->n;
    bool flat = !f.ln && contiguous && kf_dtype_size(dt) == 2 &&
                (kmajor ? fs->k : fs->n) % 8 == 0;
    /* a K-major flat run's 8 gammas in one 16-byte load: gamma of B's dtype,
     * contiguous, its offset a multiple of 8 (the base is tested at run time) */
    bool gvec = flat && kmajor && pg >= 0 && cg_gemm_column_stride(g, f.gamma) == 1 &&
                cg_tensor(c, g->expr[f.gamma].base)->dtype == dt &&
                g->expr[f.gamma].offset % 8 == 0;
    if (flat)
        *items = (fs->k * fs->n + PRE_FLAT - 1) / PRE_FLAT;
    else
        *items = ((fs->n + cols - 1) / cols) * ((fs->k + ks - 1) / ks);
    const char *rnd = cg_round_fn(dt);
    cg_printf(
        &c->s,
        "template <> struct kf_pj<%d> {\n"
        "    static constexpr long long K = %" PRId64 "LL, N = %" PRId64 "LL, KS = %" PRId64
        "LL, ITEMS = %" PRId64 "LL;\n"
        "    static constexpr bool KMAJOR = %s, LN = %s, BIAS = %s;\n"
        "    static constexpr bool FLAT = %s, BF16 = %s, GVEC = %s;\n"
        "    static __device__ __forceinline__ auto bp(KF_PARAMS) { return p%d; }\n"
        "    static __device__ __forceinline__ auto gp(KF_PARAMS) { return p%d + %" PRId64
        "LL; }\n"
        "    static __device__ __forceinline__ float b(long long k, long long n, KF_PARAMS) {\n"
        "        return (float)kf_ld(p%d + k * %" PRId64 "LL + n * %" PRId64 "LL);\n    }\n"
        "    static __device__ __forceinline__ float g(long long k, KF_PARAMS) {\n"
        "        (void)k;\n        return ",
        j, fs->k, fs->n, ks, *items, kmajor ? "true" : "false", f.ln ? "true" : "false",
        pbi >= 0 ? "true" : "false", flat ? "true" : "false",
        dt == KF_DTYPE_BF16 ? "true" : "false", gvec ? "true" : "false", pb,
        gvec ? pg : pb, gvec ? g->expr[f.gamma].offset : (int64_t)0, pb, fs->sk, fs->sn);
    if (pg >= 0)
        load_k_of(c, g, f.gamma, pg, "k");
    else
        cg_puts(&c->s, "1.0f");
    cg_puts(&c->s, ";\n    }\n    static __device__ __forceinline__ float beta(long long k, "
                   "KF_PARAMS) {\n        (void)k;\n        return ");
    if (pbe >= 0)
        load_k_of(c, g, f.beta, pbe, "k");
    else
        cg_puts(&c->s, "0.0f");
    /* the epilogue's bias, carried in d (BIAS) */
    cg_puts(&c->s, ";\n    }\n    static __device__ __forceinline__ float bias(long long n, "
                   "KF_PARAMS) {\n        (void)n;\n        return ");
    if (pbi >= 0)
        load_n(c, g, bias, pbi, "n");
    else
        cg_puts(&c->s, "0.0f");
    char cd[24] = "(float *)0";
    if (pcd >= 0)
        snprintf(cd, sizeof cd, "p%d", pcd);
    cg_printf(&c->s,
              ";\n    }\n"
              "    static __device__ __forceinline__ float rnd(float v) { return %s(v); }\n"
              "    static __device__ __forceinline__ auto w(KF_PARAMS) { return p%d; }\n"
              "    static __device__ __forceinline__ float *cd(KF_PARAMS) { return %s; }\n"
              "};\n",
              rnd ? rnd : "", pw, cd);
    return c->st;
}

/* The statistics' part of the pre-pass: params (the norm's input, the
 * packed statistics) and the KF_S* defines. */
static kf_status prepass_stats(cg *c, int64_t *rows) {
    const kf_plan *plan = c->plan;
    const kf_group *g = c->g;
    unsigned stats = kf_cuda_gemm_norm_stats(plan, g->id);
    const unsigned ours = 1u << KF_STAT_MEAN | 1u << KF_STAT_RSTD | 1u << KF_STAT_RMS_RSTD;
    if (!g->row.present || g->expr[g->row.input].kind != KF_EXPR_LOAD || stats == 0 ||
        (stats & ~ours) != 0 || g->row_rank < 1)
        return cg_fail(c, KF_ERR_UNSUPPORTED,
                       "group %u (%s): no statistics of a loaded A the pre-pass computes", g->id,
                       g->name);
    const kf_expr *in = &g->expr[g->row.input];
    kf_dtype dt = cg_tensor(c, in->base)->dtype;
    int64_t L = g->row_dims[g->row_rank - 1], acc = 1;
    bool contiguous = L == g->row.length && L >= 1;
    for (int d = g->row_rank - 1; d >= 0 && contiguous; d--) {
        if (g->row_dims[d] != 1 && in->strides[d] != acc)
            contiguous = false;
        acc *= g->row_dims[d];
    }
    if (!contiguous || (dt != KF_DTYPE_F32 && dt != KF_DTYPE_BF16 && dt != KF_DTYPE_F16))
        return cg_fail(c, KF_ERR_UNSUPPORTED,
                       "group %u (%s): the norm's input is not a contiguous f32 / f16 / bf16 "
                       "matrix",
                       g->id, g->name);
    *rows = acc / L;
    unsigned ns = (unsigned)__builtin_popcount(stats);
    int px = cg_param_add(c, KF_CUDA_PARAM_IN, in->base, dt, 0);
    int po =
        cg_param_add(c, KF_CUDA_PARAM_SCRATCH, in->base, KF_DTYPE_F32, (uint64_t)*rows * ns * 4u);
    /* 16-byte loads where every row starts on 16 bytes (its offset and
     * length; the base is checked when the kernel runs) */
    int64_t vec = 16 / (int64_t)kf_dtype_size(dt);
    if (L % vec != 0 || in->offset % vec != 0)
        vec = 1;
    int i_mean =
        (stats >> KF_STAT_MEAN) & 1u ? __builtin_popcount(stats & ((1u << KF_STAT_MEAN) - 1u)) : -1;
    int i_rstd =
        (stats >> KF_STAT_RSTD) & 1u ? __builtin_popcount(stats & ((1u << KF_STAT_RSTD) - 1u)) : -1;
    int i_rms = (stats >> KF_STAT_RMS_RSTD) & 1u
                    ? __builtin_popcount(stats & ((1u << KF_STAT_RMS_RSTD) - 1u))
                    : -1;
    cg_printf(&c->s,
              "#define KF_SL %" PRId64 "LL\n#define KF_SROWS %" PRId64
              "LL\n#define KF_SNS %u\n#define KF_SVEC %" PRId64
              "\n#define KF_SI_MEAN %d\n#define KF_SI_RSTD %d\n#define KF_SI_RMS %d\n"
              "#define KF_SEPS ",
              L, *rows, ns, vec, i_mean, i_rstd, i_rms);
    cg_emit_const(c, KF_DTYPE_F32, g->row.eps);
    cg_printf(&c->s,
              "\n__device__ __forceinline__ auto kf_srow(long long r, KF_PARAMS) {\n"
              "    return p%d + (%" PRId64 "LL + r * %" PRId64 "LL);\n}\n"
              "__device__ __forceinline__ float *kf_sout(KF_PARAMS) { return p%d; }\n",
              px, in->offset, L, po);
    return c->st;
}

kf_status kf_cuda_codegen_gemm_prepass(const kf_plan *plan, const kf_cuda_fold_job *jobs,
                                       uint32_t n, bool stats, const char *arch, const kf_mem *mem,
                                       kf_cuda_kernel *out) {
    cg c;
    if (!jobs || n == 0) {
        memset(out, 0, sizeof *out);
        snprintf(out->error, sizeof out->error, "a pre-pass of no folds");
        return KF_ERR_INVALID_ARGUMENT;
    }
    kf_status st = cg_begin(&c, plan, jobs[0].group, arch, mem, out);
    if (st != KF_OK)
        return cg_end(&c, st);
    if (n > KF_CUDA_PREPASS_JOBS)
        return cg_end(&c, cg_fail(&c, KF_ERR_UNSUPPORTED,
                                  "group %u (%s): a pre-pass of %u folds (at most %d)", c.g->id,
                                  c.g->name, n, KF_CUDA_PREPASS_JOBS));
    for (uint32_t j = 0; j < n; j++)
        if (jobs[j].group >= plan->n_groups)
            return cg_end(&c, cg_fail(&c, KF_ERR_INVALID_ARGUMENT, "a fold of group %u of %u",
                                      jobs[j].group, plan->n_groups));
    c.k->tmpl = KF_CUDA_TEMPLATE_GEMM_FOLD;
    cg_set_name(&c, stats ? "pre_" : "folds_");
    /* The params first (the head lists them, and KF_PARAMS is their
     * order): the jobs' text goes to a buffer of its own, after the head. */
    sbuf head = c.s;
    memset(&c.s, 0, sizeof c.s);
    c.s.mem = mem;
    int64_t items[KF_CUDA_PREPASS_JOBS], rows = 0;
    cg_puts(&c.s, "template <int J> struct kf_pj;\n");
    for (uint32_t j = 0; j < n && c.st == KF_OK; j++)
        prepass_job(&c, &jobs[j], (int)j, &items[j]);
    if (stats && c.st == KF_OK)
        prepass_stats(&c, &rows);
    sbuf defs = c.s;
    c.s = head;
    if (c.st != KF_OK || defs.oom) {
        if (defs.p)
            kf_mem_free(mem, defs.p, defs.cap);
        return cg_end(&c, c.st != KF_OK ? c.st
                                        : cg_fail(&c, KF_ERR_OUT_OF_MEMORY,
                                                  "kf_cuda_codegen: out of memory"));
    }
    int64_t all = 0;
    for (uint32_t j = 0; j < n; j++)
        all += items[j];
    int64_t fold_items = all;
    if (stats)
        all += (rows + PRE_WARPS - 1) / PRE_WARPS;
    kf_cuda_kernel *k = c.k;
    k->vec = 1;
    k->launch.block = 32u * PRE_WARPS;
    k->launch.work_items = (uint64_t)all;
    k->launch.items_per_block = 1;
    /* one block an SM: the fold loops take up to 64 registers a thread */
    k->launch.blocks_per_sm = 1;
    cg_emit_head(&c, stats ? "GEMM norm prologue's pre-passes in one (row statistics of A, "
                             "diag(gamma) B and column sums of each B)"
                           : "GEMM norm prologue folded into B, every B in one");
    cg_printf(&c.s,
              "#define KF_PJOBS %u\n#define KF_PSTATS %d\n#define KF_PITEMS %" PRId64
              "LL\n#define KF_PFOLD_ITEMS %" PRId64 "LL\n%.*s",
              n, stats ? 1 : 0, all, fold_items, (int)defs.len, defs.p ? defs.p : "");
    kf_mem_free(mem, defs.p, defs.cap);
    /* the item dispatch: job 0's fold items, job 1's, ..., the statistics' */
    cg_puts(&c.s, "#define KF_PRE_ITEM(it, sm)");
    int64_t at = 0;
    for (uint32_t j = 0; j < n; j++) {
        cg_printf(&c.s,
                  " \\\n    if ((it) < %" PRId64 "LL) kf_pfold<%u>((it) - %" PRId64
                  "LL, sm, KF_ARGS); else",
                  at + items[j], j, at);
        at += items[j];
    }
    cg_printf(&c.s, " \\\n    %s\n\n",
              stats ? "kf_pstats((it) - KF_PFOLD_ITEMS, KF_ARGS);" : "(void)0;");
    cg_puts(&c.s, kf_cuda_tpl_gemm_prepass);
    return cg_end(&c, c.st);
}

const char *cg_gemm_norm_input_why(const cg *c, const kf_cuda_gemm_shape *sh) {
    const kf_group *g = c->g;
    const kf_tensor *mm = cg_tensor(c, g->gemm.anchor[0]);
    const kf_expr *in = &g->expr[g->row.input];
    if (in->kind != KF_EXPR_LOAD || cg_tensor(c, in->base)->dtype != mm->dtype)
        return "the norm's input is not a loaded tensor of the product's dtype";
    int64_t cs[KF_MAX_RANK], acc = 1;
    for (int d = g->row_rank - 1; d >= 0; d--) {
        cs[d] = acc;
        acc *= g->row_dims[d];
    }
    for (int d = 0; d < g->row_rank; d++)
        if (g->row_dims[d] != 1 && in->strides[d] != cs[d])
            return "the norm's input is not contiguous (TMA reads A as it is)";
    if (g->row_rank < 2 || g->row_dims[g->row_rank - 1] != sh->k || acc != sh->m * sh->k ||
        sh->batch != 1 || !sh->a_kmajor)
        return "a norm prologue on a batched or transposed A";
    return NULL;
}

kf_status cg_gemm_fold_prepare(cg *c, const kf_cuda_gemm_shape *sh, cg_gemm_fold *fp) {
    const kf_group *g = c->g;
    const kf_gemm_info *gm = &g->gemm;
    memset(fp, 0, sizeof *fp);
    fp->cd[0] = fp->cd[1] = -1;
    if (!kf_cuda_gemm_fold_of(c->plan, g->id, &fp->f))
        return cg_fail(c, KF_ERR_UNSUPPORTED, "group %u (%s): no norm prologue the fold takes",
                       g->id, g->name);
    const kf_expr *in = &g->expr[g->row.input];
    const char *why = cg_gemm_norm_input_why(c, sh);
    if (!why && sh->epi_staged)
        why = "the fold's row scale runs in the register epilogue (not staged)";
    if (why)
        return cg_fail(c, KF_ERR_UNSUPPORTED, "group %u (%s): %s", g->id, g->name, why);
    unsigned stats = (1u << KF_STAT_RMS_RSTD);
    if (fp->f.ln)
        stats = (1u << KF_STAT_MEAN) | (1u << KF_STAT_RSTD);
    /* the pre-pass packs its statistics in enum order (kf_cuda_codegen_gemm_stats) */
    unsigned all = kf_cuda_gemm_norm_stats(c->plan, g->id);
    if ((all & stats) != stats)
        return cg_fail(c, KF_ERR_UNSUPPORTED,
                       "group %u (%s): the statistics pre-pass does not write the fold's", g->id,
                       g->name);
    fp->n_stats = (unsigned)__builtin_popcount(all);
    unsigned below = (1u << g->expr[fp->f.rstd].stat) - 1u;
    fp->i_rstd = (unsigned)__builtin_popcount(all & below);
    if (fp->f.ln)
        fp->i_mean = (unsigned)__builtin_popcount(all & ((1u << KF_STAT_MEAN) - 1u));
    fp->stats = cg_param_add(c, KF_CUDA_PARAM_SCRATCH, in->base, KF_DTYPE_F32,
                             (uint64_t)sh->m * fp->n_stats * 4u);
    fp->gamma = -1;
    if (sh->a_gscale) { /* gamma on A's fragments: the recipe's kf_cuda_gemm_gscale_takes */
        if (!kf_cuda_gemm_gscale_takes(c->plan, g->id) || !sh->a_kmajor ||
            cg_tensor(c, in->base)->dtype != KF_DTYPE_BF16)
            return cg_fail(c, KF_ERR_INVALID_ARGUMENT,
                           "group %u (%s): shape.a_gscale on a norm that is not an RMSNorm of a "
                           "K-major bf16 A with a contiguous bf16 gamma (or none)",
                           g->id, g->name);
        if (fp->f.gamma != KF_NONE)
            fp->gamma = cg_param_add(c, KF_CUDA_PARAM_IN, g->expr[fp->f.gamma].base,
                                     KF_DTYPE_BF16, 0);
    }
    for (uint32_t i = 0; fp->f.ln && i < (uint32_t)gm->n_anchors && i < 2u; i++)
        fp->cd[i] = cg_param_add(c, KF_CUDA_PARAM_SCRATCH, gm->anchor[i], KF_DTYPE_F32,
                                 (uint64_t)sh->n * 2u * 4u);
    if (sh->fold_bias) {
        /* The pre-pass adds the bias into d (kf_cuda_fold_shape.bias), so
         * the epilogue's load of it reads -0: h + -0 is h for every h, -0
         * included, and the compiler drops the add; the load goes, its
         * param too. */
        uint32_t bl = kf_cuda_gemm_fold_bias(c->plan, g->id);
        if (bl == KF_NONE)
            return cg_fail(c, KF_ERR_INVALID_ARGUMENT,
                           "group %u (%s): shape.fold_bias on a group whose fold takes no bias",
                           g->id, g->name);
        snprintf(c->ov[bl], OV_MAX, "-0.0f");
    }
    return c->st;
}

void cg_gemm_fold_emit(cg *c, const cg_gemm_fold *fp) {
    const kf_group *g = c->g;
    const char *rr = cg_round_fn(g->expr[fp->f.rstd].dtype);
    const char *rm = fp->f.ln ? cg_round_fn(g->expr[fp->f.mean].dtype) : NULL;
    /* Three pieces, so the template loads a row's statistics once for its
     * column groups and a column group's terms once for its rows: in the
     * register epilogue of a K = 1024 GEMM, loading them for every 8 columns
     * of every row left the LayerNorm fold at 53% SM throughput (H200, ncu,
     * GPT-2's Q/K/V) where the RMSNorm fold's GEMM ran at 87%. */
    /* The TMA-store epilogue prefetches a tile's column terms into shared
     * memory at the tile's start (gemm_sm90.cuh, KF_FOLD_PRE): c[0, N) then
     * d[0, N) of anchor 0. */
    cg_printf(&c->s, "#define KF_FOLD_LN %d\n", fp->f.ln ? 1 : 0);
    if (fp->gamma >= 0)
        cg_printf(&c->s,
                  "#define KF_A_GSCALE 1\n"
                  "/* gamma, contiguous bf16, 16-byte aligned: the producer copies each K step's\n"
                  " * 64 with the stage (KF_A_GSCALE) */\n"
                  "__device__ __forceinline__ const kf_bf16 *kf_gm_gamma_src(KF_PARAMS) {\n"
                  "    return p%d + %" PRId64 "LL;\n}\n",
                  fp->gamma, c->g->expr[fp->f.gamma].offset);
    if (fp->f.ln)
        cg_printf(&c->s, "#define KF_FOLD_CD p%d\n", fp->cd[0]);
    cg_printf(&c->s,
              "#define KF_A_FOLD 1\n"
              "/* The norm folded into B: row r's statistics. */\n"
              "__device__ __forceinline__ void kf_fold_rows(long long r, float &rs, float &mu, "
              "KF_PARAMS) {\n"
              "    rs = %s(p%d[r * %uLL + %u]);\n",
              rr ? rr : "", fp->stats, fp->n_stats, fp->i_rstd);
    if (fp->f.ln)
        cg_printf(&c->s, "    mu = %s(p%d[r * %uLL + %u]);\n}\n", rm ? rm : "", fp->stats,
                  fp->n_stats, fp->i_mean);
    else
        cg_puts(&c->s, "    mu = 0.0f;\n}\n");
    /* The register epilogues read 8 columns a call; the TMA-store epilogue
     * reads the terms it staged when its tile started (gemm_sm90.cuh,
     * kf_gm_fold_cols2), so no other width has a vector path. */
    cg_puts(&c->s, "/* The column terms of VV columns c0.. of anchor `which` (a LayerNorm's\n"
                   " * B column sums and beta's product; zero for an RMSNorm). */\n"
                   "template <int VV>\n"
                   "__device__ __forceinline__ void kf_fold_cols(int which, long long c0, float "
                   "*cc, float *dd, KF_PARAMS) {\n    (void)which;\n    (void)c0;\n");
    if (!fp->f.ln) {
        cg_puts(&c->s, "#pragma unroll\n    for (int k = 0; k < VV; k++)\n"
                       "        cc[k] = dd[k] = 0.0f;\n}\n");
    } else {
        cg_printf(&c->s,
                  "    const float *cd = which ? p%d : p%d;\n"
                  "    if (VV == 8 && KF_N %% 8 == 0 && c0 + 8 <= KF_N) {\n"
                  "        const float4 *c4 = reinterpret_cast<const float4 *>(cd + c0);\n"
                  "        const float4 *d4 = reinterpret_cast<const float4 *>(cd + KF_N + c0);\n"
                  "        const float4 x0 = c4[0], x1 = c4[1], y0 = d4[0], y1 = d4[1];\n"
                  "        cc[0] = x0.x; cc[1] = x0.y; cc[2] = x0.z; cc[3] = x0.w;\n"
                  "        cc[4] = x1.x; cc[5] = x1.y; cc[6] = x1.z; cc[7] = x1.w;\n"
                  "        dd[0] = y0.x; dd[1] = y0.y; dd[2] = y0.z; dd[3] = y0.w;\n"
                  "        dd[4] = y1.x; dd[5] = y1.y; dd[6] = y1.z; dd[7] = y1.w;\n"
                  "    } else {\n"
                  "#pragma unroll\n"
                  "        for (int k = 0; k < VV; k++) {\n"
                  "            cc[k] = c0 + k < KF_N ? cd[c0 + k] : 0.0f;\n"
                  "            dd[k] = c0 + k < KF_N ? cd[KF_N + c0 + k] : 0.0f;\n"
                  "        }\n"
                  "    }\n}\n",
                  fp->cd[1] >= 0 ? fp->cd[1] : fp->cd[0], fp->cd[0]);
    }
    cg_printf(&c->s,
              "/* The accumulators of VV columns of a row become the product of the\n"
              " * normalized A. */\n"
              "template <int VV>\n"
              "__device__ __forceinline__ void kf_fold(float *a, float rs, float mu, const float "
              "*cc, const float *dd) {\n"
              "#pragma unroll\n"
              "    for (int k = 0; k < VV; k++)\n"
              "        a[k] = %s;\n}\n\n",
              fp->f.ln ? "rs * (a[k] - mu * cc[k]) + dd[k]" : "a[k] * rs");
}
