/*
 * cg_gemm_sm90.c -- a whole GEMM group as one sm_90a kernel
 * (templates/gemm_sm90.cuh): the matmul by wgmma from a TMA-fed ring in
 * shared memory, and every write of the group computed from the f32
 * accumulator registers by the group's own scalar expressions (cg_expr.c),
 * so the epilogue costs no pass over memory.
 *
 *   plan group + kf_cuda_gemm_shape (from the recipe: sizes, operand majors,
 *   batching, tile width, ring depth)
 *     --> params: one IN per tensor the epilogue loads, one OUT per write
 *     --> source: the head (common.cuh, KF_PARAMS, the gelu table), the
 *         problem defines, kf_wgmma (the m64nBNk16 instruction with the
 *         accumulators as its register list), kf_epi (the epilogue for VV
 *         adjacent columns of one row: the ACC node is the accumulator rounded
 *         to the matmul's dtype, as the reference stores the product), then
 *         the template.
 *
 * What it does not take (KF_ERR_UNSUPPORTED, and the recipe keeps cuBLASLt):
 * two anchors (SwiGLU), a norm prologue on A, a row epilogue, a write that is
 * not the whole output, an expression outside the output space.
 */
#include "codegen/cuda/cg.h"

#include "codegen/cuda/templates.h"

uint32_t kf_cuda_gemm_smem(uint32_t bn, uint32_t stages) {
    /* the ring, the two consumers' epilogue staging (64 x 40 floats each:
     * gemm_sm90.cuh's KF_EPI_FLOATS), the 1024 that align the ring */
    return stages * (128u * 64u * 2u + bn * 64u * 2u) + 2u * 64u * 40u * 4u + 1024u;
}

static bool gemm_dtype_ok(kf_dtype d) { return d == KF_DTYPE_BF16 || d == KF_DTYPE_F16; }

static uint32_t find_acc_node(const kf_group *g) {
    for (uint32_t k = 0; k < g->n_expr; k++)
        if (g->expr[k].kind == KF_EXPR_ACC)
            return k;
    return KF_NONE;
}

/* The output-space coordinates of element (q, c0 + k) where q = b * M + r is
 * the row of the contiguous [batch * M, N] output. */
static void epi_coords(chunk_ctx *x, const kf_group *g) {
    int rank = g->rank;
    const int64_t *dims = g->dims;
    snprintf(x->coord[KF_SPACE_OUT][rank - 1], COORD_MAX, "c0");
    int64_t inner = 1;
    for (int d = rank - 2; d >= 0; d--) {
        if (inner == 1)
            snprintf(x->coord[KF_SPACE_OUT][d], COORD_MAX, "(q %% %" PRId64 "LL)", dims[d]);
        else
            snprintf(x->coord[KF_SPACE_OUT][d], COORD_MAX, "(q / %" PRId64 "LL %% %" PRId64 "LL)",
                     inner, dims[d]);
        inner *= dims[d];
    }
    x->vrank[KF_SPACE_OUT] = rank;
    x->vrank[KF_SPACE_ROW] = 0;
}

/* The wgmma of one 16-deep K step: d (BN/2 floats) += A(da) . B(db). */
static void emit_wgmma(cg *c, const kf_cuda_gemm_shape *sh, kf_dtype dt) {
    uint32_t nr = sh->bn / 2;
    const char *ty = dt == KF_DTYPE_BF16 ? "bf16" : "f16";
    cg_printf(&c->s,
              "__device__ __forceinline__ void kf_wgmma(float *d, unsigned long long da, "
              "unsigned long long db) {\n"
              "    asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%u, 0;\\n\"\n"
              "        \"wgmma.mma_async.sync.aligned.m64n%uk16.f32.%s.%s {\"\n        \"",
              nr + 2, sh->bn, ty, ty);
    for (uint32_t i = 0; i < nr; i++)
        cg_printf(&c->s, "%%%u%s%s", i, i + 1 < nr ? ", " : "",
                  (i % 16 == 15) ? "\"\n        \"" : "");
    cg_printf(&c->s, "}, %%%u, %%%u, p, 1, 1, %d, %d;\\n}\\n\"\n        : ", nr, nr + 1,
              sh->a_kmajor ? 0 : 1, sh->b_kmajor ? 0 : 1);
    for (uint32_t i = 0; i < nr; i++)
        cg_printf(&c->s, "\"+f\"(d[%u])%s%s", i, i + 1 < nr ? ", " : "",
                  (i % 8 == 7) ? "\n          " : "");
    cg_puts(&c->s, "\n        : \"l\"(da), \"l\"(db), \"r\"(1)\n        : \"memory\");\n}\n\n");
}

typedef struct gout {
    uint32_t node; /* KF_NONE: the bare product */
    int param;
    kf_dtype dtype;
    uint32_t tensor;
} gout;

kf_status kf_cuda_codegen_gemm_sm90(const kf_plan *plan, uint32_t group, const char *arch,
                                    const kf_cuda_gemm_shape *sh, const kf_mem *mem,
                                    kf_cuda_kernel *out) {
    cg c;
    kf_status st = cg_begin(&c, plan, group, arch, mem, out);
    if (st != KF_OK)
        return cg_end(&c, st);
    const kf_group *g = c.g;
    if (!sh || g->kind != KF_GROUP_GEMM)
        return cg_end(&c, cg_fail(&c, KF_ERR_INVALID_ARGUMENT,
                                  "group %u (%s): kf_cuda_codegen_gemm_sm90 takes a GEMM group "
                                  "and its shape",
                                  g->id, g->name));
    if (strcmp(arch, "sm_90a") != 0)
        return cg_end(&c, cg_fail(&c, KF_ERR_UNSUPPORTED,
                                  "group %u (%s): the generated GEMM needs sm_90a (wgmma, "
                                  "setmaxnreg), not %s",
                                  g->id, g->name, arch));
    if (sh->m < 1 || sh->n < 1 || sh->k < 1 || sh->batch < 1 || (sh->bn != 128 && sh->bn != 256) ||
        sh->stages < 2 || sh->m > INT32_MAX || sh->n > INT32_MAX || sh->k > INT32_MAX ||
        sh->batch > INT32_MAX || (sh->pingpong && sh->bn != 128))
        return cg_end(&c,
                      cg_fail(&c, KF_ERR_INVALID_ARGUMENT,
                              "group %u (%s): bad GEMM shape %" PRId64 "x%" PRId64 "x%" PRId64
                              " batch %" PRId64 ", tile %u, %u stages",
                              g->id, g->name, sh->m, sh->n, sh->k, sh->batch, sh->bn, sh->stages));
    const kf_gemm_info *gm = &g->gemm;
    const kf_tensor *mm = cg_tensor(&c, gm->anchor[0]);
    const char *why = NULL;
    if (gm->n_anchors != 1)
        why = "two GEMMs share A (SwiGLU)";
    else if (gm->a_prologue)
        why = "a norm prologue on A";
    else if (gm->row_epilogue || g->row.present)
        why = "a row-wise stage follows the GEMM";
    else if (!gemm_dtype_ok(mm->dtype))
        why = "the operands are not bf16 or f16";
    else if (g->rank < 2 || g->dims[g->rank - 1] != sh->n ||
             cg_numel_of(g->rank, g->dims) != sh->batch * sh->m * sh->n)
        why = "the output space is not the product's [batch, M, N]";
    if (why)
        return cg_end(&c,
                      cg_fail(&c, KF_ERR_UNSUPPORTED, "group %u (%s): %s", g->id, g->name, why));

    c.k->tmpl = KF_CUDA_TEMPLATE_GEMM_SM90;
    cg_set_name(&c, "");
    uint32_t acc = find_acc_node(g);
    if (acc != KF_NONE) {
        const char *rnd = cg_round_fn(g->expr[acc].dtype);
        if (rnd && g->expr[acc].tensor != KF_NONE)
            snprintf(c.ov[acc], OV_MAX, "%s(acc[k])", rnd);
        else
            snprintf(c.ov[acc], OV_MAX, "acc[k]");
    }

    /* The writes: every one the whole output, in the output space. */
    gout outs[MAX_OUTS];
    uint32_t n_outs = 0;
    int64_t total = sh->batch * sh->m * sh->n;
    for (uint32_t w = 0; w < g->n_writes && n_outs < MAX_OUTS; w++) {
        uint32_t root = g->roots ? g->roots[w] : KF_NONE;
        uint32_t t = g->writes[w];
        if (root == KF_NONE && t != gm->anchor[0])
            continue;
        const kf_tensor *tt = cg_tensor(&c, t);
        if (kf_ir_numel(tt) != total || (root != KF_NONE && g->expr[root].space != KF_SPACE_OUT))
            return cg_end(&c, cg_fail(&c, KF_ERR_UNSUPPORTED,
                                      "group %u (%s): write %%%u is not the whole GEMM output",
                                      g->id, g->name, t));
        outs[n_outs].node = root;
        outs[n_outs].tensor = t;
        outs[n_outs].dtype = tt->dtype;
        n_outs++;
    }
    if (n_outs == 0)
        return cg_end(&c,
                      cg_fail(&c, KF_ERR_UNSUPPORTED, "group %u (%s): no writes", g->id, g->name));
    for (uint32_t o = 0; o < n_outs; o++)
        if (outs[o].node != KF_NONE)
            cg_mark(&c, outs[o].node);
    for (uint32_t i = 0; i < c.n; i++) {
        const kf_expr *e = &g->expr[i];
        if (!c.need[i])
            continue;
        bool ok = e->space == KF_SPACE_OUT &&
                  (e->kind == KF_EXPR_OP || e->kind == KF_EXPR_CONST || e->kind == KF_EXPR_LOAD ||
                   e->kind == KF_EXPR_ACC || e->kind == KF_EXPR_INDEX || e->kind == KF_EXPR_ROW ||
                   e->kind == KF_EXPR_COL || e->kind == KF_EXPR_BATCH);
        if (e->kind == KF_EXPR_ACC && e->anchor != 0)
            ok = false;
        if (!ok)
            return cg_end(&c, cg_fail(&c, KF_ERR_UNSUPPORTED,
                                      "group %u (%s): a %s node in the %s space is not an "
                                      "accumulator expression",
                                      g->id, g->name, kf_expr_kind_name(e->kind),
                                      e->space == KF_SPACE_OUT ? "output" : "row"));
    }
    cg_load_params(&c);
    for (uint32_t o = 0; o < n_outs; o++)
        outs[o].param = cg_param_add(&c, KF_CUDA_PARAM_OUT, outs[o].tensor, outs[o].dtype,
                                     cg_tensor_bytes(&c, outs[o].tensor));
    out_spec os[MAX_OUTS];
    uint32_t n_os = 0;
    for (uint32_t o = 0; o < n_outs; o++) {
        if (outs[o].node == KF_NONE)
            continue;
        os[n_os].node = outs[o].node;
        os[n_os].param = outs[o].param;
        os[n_os].dtype = outs[o].dtype;
        os[n_os].tensor = outs[o].tensor;
        os[n_os].synth_softmax = false;
        n_os++;
    }
    cg_mark_stored(&c, os, n_os);

    chunk_ctx *x = kf_mem_calloc(c.mem, 1, sizeof *x);
    if (!x)
        return cg_end(&c, cg_fail(&c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory"));
    epi_coords(x, g);
    /* The loads: one element each, at its coordinates (column c0 + k). */
    for (uint32_t i = 0; i < c.n; i++) {
        const kf_expr *e = &g->expr[i];
        if (!c.need[i] || c.ov[i][0] || e->kind != KF_EXPR_LOAD)
            continue;
        int64_t s[KF_MAX_RANK];
        cg_node_strides(&c, i, s);
        char off[OV_MAX - 64];
        size_t n = 0;
        off[0] = 0;
        for (int d = 0; d < g->rank; d++) {
            if (s[d] == 0 || g->dims[d] == 1)
                continue;
            int w = snprintf(off + n, sizeof off - n, "%s(%s%s) * %" PRId64 "LL", n ? " + " : "",
                             x->coord[KF_SPACE_OUT][d], d == g->rank - 1 ? " + k" : "", s[d]);
            n += w > 0 ? (size_t)w : 0;
            if (n >= sizeof off)
                break;
        }
        if (!off[0])
            snprintf(off, sizeof off, "0");
        snprintf(c.ov[i], OV_MAX, "kf_ld(p%d + (%s))", c.param[i], off);
    }

    kf_cuda_kernel *k = c.k;
    k->vec = 1;
    k->launch.block = 384;
    int64_t tiles = ((sh->m + 127) / 128) * ((sh->n + sh->bn - 1) / sh->bn) * sh->batch;
    k->launch.work_items = (uint64_t)tiles;
    k->launch.items_per_block = 1;
    k->launch.blocks_per_sm = 1;
    k->launch.shared_bytes = kf_cuda_gemm_smem(sh->bn, sh->stages);

    cg_emit_head(&c, "GEMM group (wgmma, TMA, epilogue on the accumulators)");
    cg_printf(&c.s,
              "#define KF_M %" PRId64 "LL\n#define KF_N %" PRId64 "LL\n#define KF_K %" PRId64
              "LL\n#define KF_BATCH %" PRId64 "LL\n#define KF_BN %u\n#define KF_STAGES %u\n"
              "#define KF_PINGPONG %d\n"
              "#define KF_A_KMAJOR %d\n#define KF_B_KMAJOR %d\n#define KF_A_BATCHED %d\n"
              "#define KF_B_BATCHED %d\n\n",
              sh->m, sh->n, sh->k, sh->batch, sh->bn, sh->stages, sh->pingpong ? 1 : 0,
              sh->a_kmajor ? 1 : 0, sh->b_kmajor ? 1 : 0, sh->a_batched ? 1 : 0,
              sh->b_batched ? 1 : 0);
    emit_wgmma(&c, sh, mm->dtype);

    cg_puts(&c.s, "/* The group's epilogue for VV adjacent columns c0.. of row r of batch b. */\n"
                  "template <int VV>\n__device__ __forceinline__ void kf_epi(const float *acc, "
                  "long long b, long long r, long long c0, KF_PARAMS) {\n"
                  "    const long long q = b * KF_M + r;\n    (void)q;\n");
    cg_emit_nodes(&c, cg_coord_of, x, "    ", true);
    /* Each output: one vector store when the VV columns are all inside and
     * the address is 16-byte aligned, else element by element. */
    for (uint32_t o = 0; o < n_outs; o++) {
        const char *rt = cg_reg_type(outs[o].dtype);
        char val[48];
        if (outs[o].node == KF_NONE)
            snprintf(val, sizeof val, "acc");
        else
            snprintf(val, sizeof val, "v%u%s", outs[o].node,
                     cg_raw_of(&c, outs[o].node, true) ? "u" : "");
        cg_printf(&c.s,
                  "    {\n        %s o[VV];\n#pragma unroll\n        for (int k = 0; k < VV; k++)\n"
                  "            o[k] = (%s)%s[k];\n"
                  "        auto *dst = p%d + (q * KF_N + c0);\n"
                  "        if (c0 + VV <= KF_N && kf_aligned(dst, 16))\n"
                  "            kf_stv<VV>(dst, o);\n        else\n"
                  "            for (int k = 0; k < VV && c0 + k < KF_N; k++)\n"
                  "                kf_st(dst + k, o[k]);\n    }\n",
                  rt, rt, val, outs[o].param);
    }
    cg_puts(&c.s, "}\n\n");
    kf_mem_free(c.mem, x, sizeof *x);
    cg_puts(&c.s, kf_cuda_tpl_hopper);
    cg_puts(&c.s, kf_cuda_tpl_gemm_sm90);
    return cg_end(&c, c.st);
}
