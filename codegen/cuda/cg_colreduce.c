/*
 * cg_colreduce.c -- the column reduction kernel (templates/colreduce.cuh): a
 * group whose row stage reduces an axis other than the last; the prologue
 * gives the reduced value per element, the epilogue and the once-per-column
 * outputs read the statistics. An argmax over such an axis takes the column
 * kernel of templates/argmax.cuh instead, with the same hooks.
 */
#include "codegen/cuda/cg.h"

#include "codegen/cuda/templates.h"

kf_status cg_gen_colreduce(cg *c, out_spec *outs, uint32_t n_outs) {
    const kf_group *g = c->g;
    const kf_row_stage *r = &g->row;
    kf_cuda_kernel *k = c->k;
    kf_space sp = r->space;
    kf_space osp = sp == KF_SPACE_ROW ? KF_SPACE_OUT : KF_SPACE_ROW;
    int rank, orank;
    const int64_t *dims, *odims;
    cg_space_dims(g, sp, &rank, &dims);
    cg_space_dims(g, osp, &orank, &odims);
    int ax = r->axis;
    if (ax < 0 || ax >= rank)
        return cg_fail(c, KF_ERR_UNSUPPORTED, "group %u (%s): column axis %d out of range", g->id,
                       g->name, ax);
    int64_t A = dims[ax], I = 1, O = 1;
    for (int d = ax + 1; d < rank; d++)
        I *= dims[d];
    for (int d = 0; d < ax; d++)
        O *= dims[d];
    bool epi[MAX_OUTS], rowo[MAX_OUTS];
    bool has_epi = false;
    for (uint32_t o = 0; o < n_outs; o++) {
        const kf_expr *e = &g->expr[outs[o].node];
        bool same = e->space == sp;
        if (same && !cg_depends_on_stat(c, outs[o].node))
            return cg_fail(c, KF_ERR_UNSUPPORTED,
                           "group %u (%s): a column prologue output (not generated)", g->id,
                           g->name);
        epi[o] = same;
        rowo[o] = !same;
        has_epi = has_epi || same;
    }
    for (uint32_t o = 0; o < n_outs; o++)
        cg_mark(c, outs[o].node);
    cg_mark(c, r->input);
    cg_load_params(c);
    unsigned stats = cg_stats_used(c, r->stats);
    /* argmax: (value, index) pairs compared, never summed; no other
     * statistic shares its kernel (a group has one row op) */
    bool amax = (stats & (1u << KF_STAT_ARGMAX)) != 0;
    if (amax && (stats & ~(1u << KF_STAT_ARGMAX | 1u << KF_STAT_MAX)))
        return cg_fail(c, KF_ERR_UNSUPPORTED,
                       "group %u (%s): argmax with another column statistic (not generated)", g->id,
                       g->name);
    if (amax && A > INT32_MAX)
        return cg_fail(c, KF_ERR_UNSUPPORTED,
                       "group %u (%s): argmax over an axis of %" PRId64 " elements (an i32 "
                       "index holds at most 2^31 - 1)",
                       g->id, g->name, A);
    k->tmpl = amax ? KF_CUDA_TEMPLATE_COL_ARGMAX : KF_CUDA_TEMPLATE_COLREDUCE;
    k->vec = 1;
    k->launch.block = 256;
    k->launch.work_items = (uint64_t)(O * I);
    k->launch.items_per_block = 32;
    k->launch.blocks_per_sm = 8;
    if (c->st != KF_OK)
        return c->st;
    cg_emit_head(c, amax ? "column argmax" : "column reduction");
    cg_printf(&c->s,
              "#define KF_COLS %" PRId64 "LL\n#define KF_A %" PRId64 "LL\n#define KF_YSPLIT 8\n",
              O * I, A);
    if (amax)
        cg_puts(&c->s, "#define KF_ARGMAX_COLS 1\n");
    cg_emit_stat_defines(c, stats, r->eps, g->expr[r->input].dtype, A);
    cg_printf(&c->s, "#define KF_HAS_EPILOGUE %d\n\n", has_epi);

    chunk_ctx *x = kf_mem_calloc(c->mem, 1, sizeof *x);
    if (!x)
        return cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    {
        int64_t inner = 1;
        for (int d = rank - 1; d > ax; d--) {
            snprintf(x->coord[sp][d], sizeof x->coord[sp][d],
                     "col %% %" PRId64 "LL / %" PRId64 "LL %% %" PRId64 "LL", I, inner, dims[d]);
            inner *= dims[d];
        }
        snprintf(x->coord[sp][ax], sizeof x->coord[sp][ax], "a");
        inner = 1;
        for (int d = ax - 1; d >= 0; d--) {
            snprintf(x->coord[sp][d], sizeof x->coord[sp][d],
                     "col / %" PRId64 "LL / %" PRId64 "LL %% %" PRId64 "LL", I, inner, dims[d]);
            inner *= dims[d];
        }
        snprintf(x->lin[sp], sizeof x->lin[sp],
                 "col / %" PRId64 "LL * %" PRId64 "LL + a * %" PRId64 "LL + col %% %" PRId64 "LL",
                 I, A * I, I, I);
        x->vrank[sp] = 0;
    }
    cg_coords_linear(x, osp, orank, odims, "col");
    x->vrank[osp] = 0;
    cg_emit_vec_ok(c, "");

    memset(c->need, 0, c->n * sizeof *c->need);
    cg_mark(c, r->input);
    cg_puts(&c->s,
            "__device__ __forceinline__ kf_acc_t kf_prologue(long long col, long long a, bool "
            "store, KF_PARAMS) {\n    const int k = 0;\n    (void)k; (void)store;\n");
    cg_emit_loads(c, x, 1, "    ", NULL, NULL);
    cg_emit_nodes(c, cg_coord_of, x, "    ", false);
    cg_printf(&c->s, "    return (kf_acc_t)v%u;\n}\n\n", r->input);

    memset(c->need, 0, c->n * sizeof *c->need);
    for (uint32_t i = 0; i < c->n; i++)
        c->ov[i][0] = 0;
    snprintf(c->ov[r->input], OV_MAX, "x");
    for (uint32_t o = 0; o < n_outs; o++) {
        if (epi[o])
            cg_mark(c, outs[o].node);
    }
    cg_puts(
        &c->s,
        "template <typename S> __device__ __forceinline__ void kf_epilogue(long long col, "
        "long long a, kf_acc_t x, const S &st, KF_PARAMS) {\n    const int k = 0;\n    (void)k;\n");
    cg_emit_loads(c, x, 1, "    ", NULL, NULL);
    cg_emit_nodes(c, cg_coord_of, x, "    ", false);
    for (uint32_t o = 0; o < n_outs; o++) {
        if (epi[o])
            cg_printf(&c->s, "    kf_st(p%d + (%s), (%s)v%u);\n", outs[o].param, x->lin[sp],
                      cg_reg_type(outs[o].dtype), outs[o].node);
    }
    cg_puts(&c->s, "    (void)x; (void)st;\n}\n\n");

    memset(c->need, 0, c->n * sizeof *c->need);
    for (uint32_t i = 0; i < c->n; i++)
        c->ov[i][0] = 0;
    for (uint32_t o = 0; o < n_outs; o++) {
        if (rowo[o])
            cg_mark(c, outs[o].node);
    }
    cg_puts(&c->s,
            "template <typename S> __device__ __forceinline__ void kf_row_out(long long col, "
            "const S &st, KF_PARAMS) {\n    const int k = 0;\n    (void)k;\n");
    cg_emit_loads(c, x, 1, "    ", NULL, NULL);
    cg_emit_nodes(c, cg_coord_of, x, "    ", false);
    for (uint32_t o = 0; o < n_outs; o++) {
        if (rowo[o])
            cg_printf(&c->s, "    kf_st(p%d + col, (%s)v%u);\n", outs[o].param,
                      cg_reg_type(outs[o].dtype), outs[o].node);
    }
    cg_puts(&c->s, "    (void)st;\n}\n\n");
    kf_mem_free(c->mem, x, sizeof *x);
    cg_puts(&c->s, amax ? kf_cuda_tpl_argmax : kf_cuda_tpl_colreduce);
    return c->st;
}
