/*
 * cuda_codegen.c -- CUDA C for a plan's memory-bound kernels: the entry
 * points (kf_cuda_codegen and one per role), the template report
 * (kf_cuda_group_template, kf_cuda_describe_group) and the roles of a group.
 * The kernel kinds have their own files (cg_elementwise.c, cg_rowwise.c,
 * cg_colreduce.c) over the shared parts (cg.h: cg_core.c, cg_expr.c,
 * cg_access.c). The fused attention kernel is cg_attention.c's; the GEMM
 * kernel generator will go in cg_gemm.c.
 *
 *   group ──► choose the template (elementwise | row_warp | row_block |
 *             row_block_multipass | colreduce) and the vector width
 *        ──► params: one per buffer the expressions load (a view's base), one
 *             per write, ACC / SCORES / SCRATCH for the GEMM and attention helpers
 *        ──► source: header comment, #defines for the template's hooks,
 *             templates/common.cuh, the generated device functions (the
 *             expression DAG of each hook, one C statement per node, in the
 *             plan's node order), templates/<kind>.cuh
 *
 * Determinism: every loop walks the plan's arrays in index order, numbers
 * print with fixed formats, constants print as their bit patterns.
 */
#include "codegen/cuda/cg.h"

/* ------------------------------------------------------------------------ */
/* Names                                                                      */
/* ------------------------------------------------------------------------ */

static const char *const template_names[KF_CUDA_TEMPLATE_COUNT] = {
    [KF_CUDA_TEMPLATE_ELEMENTWISE] = "elementwise",
    [KF_CUDA_TEMPLATE_ROW_WARP] = "row_warp",
    [KF_CUDA_TEMPLATE_ROW_WARP_STAGED] = "row_warp_staged",
    [KF_CUDA_TEMPLATE_ROW_BLOCK] = "row_block",
    [KF_CUDA_TEMPLATE_ROW_BLOCK_MULTIPASS] = "row_block_multipass",
    [KF_CUDA_TEMPLATE_COLREDUCE] = "colreduce",
    [KF_CUDA_TEMPLATE_ELEMENTWISE_BULK] = "elementwise_bulk",
    [KF_CUDA_TEMPLATE_GEMM_SM90] = "gemm_sm90",
    [KF_CUDA_TEMPLATE_ATTENTION_MMA] = "attention_mma",
    [KF_CUDA_TEMPLATE_ATTENTION_SM90] = "attention_sm90",
    [KF_CUDA_TEMPLATE_ROW_ARGMAX] = "row_argmax",
    [KF_CUDA_TEMPLATE_ATTENTION_DECODE] = "attention_decode",
    [KF_CUDA_TEMPLATE_COL_ARGMAX] = "col_argmax",
    [KF_CUDA_TEMPLATE_GEMM_SM80] = "gemm_sm80",
    [KF_CUDA_TEMPLATE_GEMM_FOLD] = "gemm_fold",
    [KF_CUDA_TEMPLATE_GEMM_SIMT] = "gemm_simt",
    [KF_CUDA_TEMPLATE_ATTENTION_SIMT] = "attention_simt",
    [KF_CUDA_TEMPLATE_GEMM_DECODE] = "gemm_decode",
};
_Static_assert(sizeof template_names / sizeof template_names[0] == KF_CUDA_TEMPLATE_COUNT,
               "one name per template");

const char *kf_cuda_template_name(kf_cuda_template t) {
    return (unsigned)t < KF_CUDA_TEMPLATE_COUNT ? template_names[t] : "?";
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                               */
/* ------------------------------------------------------------------------ */

/* The group's writes as outputs (skipping roots that are `skip_kind` leaves:
 * the bare GEMM result, which cuBLASLt writes itself). */
static uint32_t collect_outs(cg *c, out_spec *outs, kf_expr_kind skip_kind) {
    const kf_group *g = c->g;
    uint32_t n = 0;
    for (uint32_t w = 0; w < g->n_writes && n < MAX_OUTS; w++) {
        uint32_t root = g->roots ? g->roots[w] : KF_NONE;
        if (root == KF_NONE)
            continue;
        if (g->expr[root].kind == skip_kind)
            continue;
        uint32_t t = g->writes[w];
        outs[n].node = root;
        outs[n].tensor = t;
        outs[n].dtype = cg_tensor(c, t)->dtype;
        outs[n].synth_softmax = false;
        outs[n].stat_pack = 0;
        n++;
    }
    return n;
}

static void out_params(cg *c, out_spec *outs, uint32_t n) {
    for (uint32_t o = 0; o < n; o++) {
        outs[o].param = cg_param_add(c, KF_CUDA_PARAM_OUT, outs[o].tensor, outs[o].dtype,
                                     cg_tensor_bytes(c, outs[o].tensor));
    }
}

static row_spec row_of_group(const cg *c) {
    const kf_row_stage *r = &c->g->row;
    row_spec rs = {.sp = r->space,
                   .input = r->input,
                   .stats = r->stats,
                   .length = r->length,
                   .eps = r->eps,
                   .in_dtype = c->g->expr[r->input].dtype};
    return rs;
}

kf_status kf_cuda_codegen_group(const kf_plan *plan, uint32_t group, const char *arch,
                                const kf_mem *mem, kf_cuda_kernel *out) {
    return kf_cuda_codegen_group_flags(plan, group, arch, 0, mem, out);
}

kf_status kf_cuda_codegen_group_flags(const kf_plan *plan, uint32_t group, const char *arch,
                                      uint64_t rflags, const kf_mem *mem, kf_cuda_kernel *out) {
    cg c;
    kf_status st = cg_begin(&c, plan, group, arch, mem, out);
    if (st != KF_OK)
        return cg_end(&c, st);
    c.rflags = rflags;
    const kf_group *g = c.g;
    out_spec outs[MAX_OUTS];
    uint32_t n = collect_outs(&c, outs, KF_EXPR_COUNT);
    switch (g->kind) {
    case KF_GROUP_ELEMENTWISE:
    case KF_GROUP_LAYOUT: {
        cg_set_name(&c, "");
        if (n == 0)
            return cg_end(
                &c, cg_fail(&c, KF_ERR_UNSUPPORTED, "group %u (%s): no outputs", g->id, g->name));
        /* Params: inputs first (in node order), then outputs. */
        kf_space sp = g->expr[outs[0].node].space;
        for (uint32_t o = 0; o < n; o++)
            cg_mark(&c, outs[o].node);
        cg_load_params(&c);
        memset(c.need, 0, c.n * sizeof *c.need);
        out_params(&c, outs, n);
        st = cg_gen_elementwise(&c, outs, n, sp,
                                g->kind == KF_GROUP_LAYOUT ? "layout copy" : "elementwise group");
        break;
    }
    case KF_GROUP_ROWWISE: { /* argmax too: cg_gen_rowwise takes templates/argmax.cuh */
        cg_set_name(&c, "");
        row_spec rs = row_of_group(&c);
        for (uint32_t o = 0; o < n; o++)
            cg_mark(&c, outs[o].node);
        cg_mark(&c, rs.input);
        cg_load_params(&c);
        memset(c.need, 0, c.n * sizeof *c.need);
        out_params(&c, outs, n);
        st = cg_gen_rowwise(&c, &rs, outs, n, "row-wise group");
        break;
    }
    case KF_GROUP_COLREDUCE: /* argmax too: cg_gen_colreduce takes templates/argmax.cuh */
        cg_set_name(&c, "");
        for (uint32_t o = 0; o < n; o++)
            cg_mark(&c, outs[o].node);
        cg_mark(&c, g->row.input);
        cg_load_params(&c);
        memset(c.need, 0, c.n * sizeof *c.need);
        out_params(&c, outs, n);
        st = cg_gen_colreduce(&c, outs, n);
        break;
    default:
        st = cg_fail(&c, KF_ERR_INVALID_ARGUMENT,
                     "group %u (%s) is a %s group: kf_cuda_codegen_group generates elementwise, "
                     "rowwise, colreduce and layout groups (GEMM: kf_cuda_codegen_epilogue; "
                     "attention: kf_cuda_codegen_attention_softmax)",
                     g->id, g->name, kf_group_kind_name(g->kind));
        break;
    }
    return cg_end(&c, st);
}

kf_status kf_cuda_codegen_epilogue(const kf_plan *plan, uint32_t group, const char *arch,
                                   const kf_mem *mem, kf_cuda_kernel *out) {
    cg c;
    kf_status st = cg_begin(&c, plan, group, arch, mem, out);
    if (st != KF_OK)
        return cg_end(&c, st);
    const kf_group *g = c.g;
    if (g->kind != KF_GROUP_GEMM)
        return cg_end(&c, cg_fail(&c, KF_ERR_INVALID_ARGUMENT,
                                  "group %u (%s) is a %s group, not a GEMM", g->id, g->name,
                                  kf_group_kind_name(g->kind)));
    cg_set_name(&c, "epi_");
    out_spec outs[MAX_OUTS];
    uint32_t n = 0;
    out_spec all[MAX_OUTS];
    uint32_t na = collect_outs(&c, all, KF_EXPR_ACC);
    for (uint32_t o = 0; o < na; o++) {
        if (g->expr[all[o].node].space == KF_SPACE_OUT)
            outs[n++] = all[o];
    }
    if (n == 0)
        return cg_end(&c, cg_fail(&c, KF_ERR_NOT_FOUND,
                                  "group %u (%s): no epilogue (cuBLASLt writes the result)", g->id,
                                  g->name));
    for (uint32_t o = 0; o < n; o++)
        cg_mark(&c, outs[o].node);
    bool rowep = g->gemm.row_epilogue && g->row.present && g->row.space == KF_SPACE_OUT;
    if (rowep)
        cg_mark(&c, g->row.input);
    cg_load_params(&c);
    memset(c.need, 0, c.n * sizeof *c.need);
    out_params(&c, outs, n);
    if (rowep) {
        row_spec rs = row_of_group(&c);
        st = cg_gen_rowwise(&c, &rs, outs, n, "GEMM row epilogue");
    } else {
        st = cg_gen_elementwise(&c, outs, n, KF_SPACE_OUT, "GEMM epilogue");
    }
    return cg_end(&c, st);
}

kf_status kf_cuda_codegen_gemm_prologue(const kf_plan *plan, uint32_t group, const char *arch,
                                        const kf_mem *mem, kf_cuda_kernel *out) {
    cg c;
    kf_status st = cg_begin(&c, plan, group, arch, mem, out);
    if (st != KF_OK)
        return cg_end(&c, st);
    const kf_group *g = c.g;
    if (g->kind != KF_GROUP_GEMM || !g->gemm.a_prologue || g->gemm.a_root == KF_NONE ||
        !g->row.present)
        return cg_end(&c, cg_fail(&c, KF_ERR_NOT_FOUND, "group %u (%s) has no norm prologue on A",
                                  g->id, g->name));
    cg_set_name(&c, "pro_");
    out_spec outs[MAX_OUTS];
    uint32_t n = 0;
    outs[n].node = g->gemm.a_root;
    outs[n].tensor = g->gemm.a[0];
    outs[n].dtype = g->expr[g->gemm.a_root].dtype;
    outs[n].synth_softmax = false;
    outs[n].stat_pack = 0;
    n++;
    out_spec all[MAX_OUTS];
    uint32_t na = collect_outs(&c, all, KF_EXPR_COUNT);
    for (uint32_t o = 0; o < na && n < MAX_OUTS; o++) {
        if (g->expr[all[o].node].space == KF_SPACE_ROW)
            outs[n++] = all[o];
    }
    for (uint32_t o = 0; o < n; o++)
        cg_mark(&c, outs[o].node);
    cg_mark(&c, g->row.input);
    cg_load_params(&c);
    memset(c.need, 0, c.n * sizeof *c.need);
    outs[0].param = cg_param_add(&c, KF_CUDA_PARAM_SCRATCH, outs[0].tensor, outs[0].dtype,
                                 cg_tensor_bytes(&c, outs[0].tensor));
    out_params(&c, outs + 1, n - 1);
    row_spec rs = row_of_group(&c);
    st = cg_gen_rowwise(&c, &rs, outs, n, "GEMM norm prologue on A");
    return cg_end(&c, st);
}

kf_status kf_cuda_codegen_gemm_stats(const kf_plan *plan, uint32_t group, const char *arch,
                                     const kf_mem *mem, unsigned stats, kf_cuda_kernel *out) {
    cg c;
    kf_status st = cg_begin(&c, plan, group, arch, mem, out);
    if (st != KF_OK)
        return cg_end(&c, st);
    const kf_group *g = c.g;
    if (g->kind != KF_GROUP_GEMM || !g->gemm.a_prologue || !g->row.present ||
        g->expr[g->row.input].kind != KF_EXPR_LOAD || stats == 0 ||
        (stats & ~(1u << KF_STAT_MEAN | 1u << KF_STAT_RSTD | 1u << KF_STAT_RMS_RSTD)) != 0)
        return cg_end(&c, cg_fail(&c, KF_ERR_NOT_FOUND,
                                  "group %u (%s): no norm prologue on a loaded A whose statistics "
                                  "the pre-pass computes",
                                  g->id, g->name));
    cg_set_name(&c, "stats_");
    row_spec rs = row_of_group(&c);
    rs.stats |= stats;
    int64_t rows = cg_numel_of(g->row_rank, g->row_dims) / (rs.length ? rs.length : 1);
    uint32_t key = g->expr[g->row.input].base;
    out_spec o = {.node = KF_NONE, .tensor = key, .dtype = KF_DTYPE_F32, .stat_pack = stats};
    cg_mark(&c, rs.input);
    cg_load_params(&c);
    memset(c.need, 0, c.n * sizeof *c.need);
    o.param = cg_param_add(&c, KF_CUDA_PARAM_SCRATCH, key, KF_DTYPE_F32,
                           (uint64_t)rows * (uint64_t)__builtin_popcount(stats) * 4u);
    st = cg_gen_rowwise(&c, &rs, &o, 1, "GEMM norm prologue: the statistics of A's rows");
    return cg_end(&c, st);
}

kf_status kf_cuda_codegen_attention_softmax(const kf_plan *plan, uint32_t group, const char *arch,
                                            const kf_mem *mem, kf_cuda_kernel *out) {
    cg c;
    kf_status st = cg_begin(&c, plan, group, arch, mem, out);
    if (st != KF_OK)
        return cg_end(&c, st);
    const kf_group *g = c.g;
    if (g->kind != KF_GROUP_ATTENTION || g->attn.score == KF_NONE)
        return cg_end(&c, cg_fail(&c, KF_ERR_INVALID_ARGUMENT,
                                  "group %u (%s) is not an attention group", g->id, g->name));
    cg_set_name(&c, "softmax_");
    uint32_t sm = g->attn.softmax;
    out_spec outs[1] = {{.node = g->attn.score,
                         .tensor = sm,
                         .dtype = cg_tensor(&c, sm)->dtype,
                         .synth_softmax = true}};
    cg_mark(&c, g->attn.score);
    cg_load_params(&c);
    memset(c.need, 0, c.n * sizeof *c.need);
    out_params(&c, outs, 1);
    row_spec rs = {.sp = KF_SPACE_OUT,
                   .input = g->attn.score,
                   .stats = 1u << KF_STAT_MAX | 1u << KF_STAT_SUMEXP,
                   .length = g->rank ? g->dims[g->rank - 1] : 1,
                   .eps = 0,
                   .in_dtype = g->expr[g->attn.score].dtype};
    st = cg_gen_rowwise(&c, &rs, outs, 1, "attention fallback softmax (score expression + mask)");
    return cg_end(&c, st);
}

void kf_cuda_kernel_release(const kf_mem *mem, kf_cuda_kernel *k) {
    if (!k)
        return;
    if (k->source && mem)
        kf_mem_free(mem, k->source, k->source_cap);
    k->source = NULL;
    k->source_len = k->source_cap = k->body = 0;
}

uint32_t kf_cuda_kernel_grid(const kf_cuda_kernel *k, int sm_count) {
    const kf_cuda_launch_rule *r = &k->launch;
    uint64_t per = r->items_per_block ? r->items_per_block : 1;
    uint64_t need = (r->work_items + per - 1) / per;
    uint64_t cap =
        (uint64_t)(sm_count > 0 ? sm_count : 1) * (r->blocks_per_sm ? r->blocks_per_sm : 1);
    uint64_t gsz = need < cap ? need : cap;
    if (r->grid_multiple > 1 && gsz >= r->grid_multiple)
        gsz -= gsz % r->grid_multiple;
    if (gsz < 1)
        gsz = 1;
    if (gsz > 0x7fffffffu)
        gsz = 0x7fffffffu;
    return (uint32_t)gsz;
}

/* ------------------------------------------------------------------------ */
/* Roles                                                                      */
/* ------------------------------------------------------------------------ */

const char *kf_cuda_role_name(kf_cuda_role role) {
    static const char *const names[KF_CUDA_ROLE_COUNT] = {
        "group",     "gemm_prologue", "epilogue",      "attention_softmax",
        "gemm",      "attention",     "attention_sm90", "attention_decode",
        "attention_combine", "attention_simt"};
    return (unsigned)role < KF_CUDA_ROLE_COUNT ? names[role] : "?";
}

kf_status kf_cuda_codegen(const kf_plan *plan, uint32_t group, kf_cuda_role role, const char *arch,
                          const kf_mem *mem, kf_cuda_kernel *out) {
    switch (role) {
    case KF_CUDA_ROLE_GROUP:
        return kf_cuda_codegen_group(plan, group, arch, mem, out);
    case KF_CUDA_ROLE_GEMM_PROLOGUE:
        return kf_cuda_codegen_gemm_prologue(plan, group, arch, mem, out);
    case KF_CUDA_ROLE_EPILOGUE:
        return kf_cuda_codegen_epilogue(plan, group, arch, mem, out);
    case KF_CUDA_ROLE_ATTENTION_SOFTMAX:
        return kf_cuda_codegen_attention_softmax(plan, group, arch, mem, out);
    case KF_CUDA_ROLE_ATTENTION:
        return kf_cuda_codegen_attention(plan, group, arch, mem, out);
    case KF_CUDA_ROLE_ATTENTION_SM90:
        return kf_cuda_codegen_attention_sm90(plan, group, arch, mem, out);
    case KF_CUDA_ROLE_ATTENTION_DECODE:
        return kf_cuda_codegen_attention_decode(plan, group, arch, mem, out);
    case KF_CUDA_ROLE_ATTENTION_COMBINE:
        return kf_cuda_codegen_attention_combine(plan, group, arch, mem, out);
    case KF_CUDA_ROLE_ATTENTION_SIMT:
        return kf_cuda_codegen_attention_simt(plan, group, arch, mem, out);
    default:
        memset(out, 0, sizeof *out);
        snprintf(out->error, sizeof out->error, "kf_cuda_codegen: bad role %d", (int)role);
        return KF_ERR_INVALID_ARGUMENT;
    }
}
