/*
 * lg_elementwise.c -- ELEMENTWISE and LAYOUT groups: a 2-D loop nest over the
 * group's space. The outer loop walks the leading dims (split into their
 * indices once per row, so broadcasts cost no modulo in the inner loop); the
 * inner loop walks the last dim, where every load has a constant stride (0
 * or 1 for broadcast and contiguous operands), so it vectorizes. When the
 * leading dims are too few to share across threads, the last dim is cut into
 * chunks that become outer iterations too.
 *
 * A LAYOUT copy of a reshape reads its source in the source's own space (ROW)
 * and writes the same row-major position of the result: the loop nest then
 * walks the ROW space and stores at the flat index.
 */
#include "codegen/llvm/lg.h"

void lg_emit_elementwise(lg_fn *f) {
    lg_mod *m = f->m;
    const kf_group *g = f->g;
    bool flat = g->kind == KF_GROUP_LAYOUT && g->n_writes == 1 && g->roots[0] != KF_NONE &&
                g->expr[g->roots[0]].space == KF_SPACE_ROW;
    int r = flat ? g->row_rank : g->rank;
    int64_t dims[KF_MAX_RANK];
    if (r == 0) {
        r = 1;
        dims[0] = 1;
    } else {
        memcpy(dims, flat ? g->row_dims : g->dims, sizeof dims);
    }
    int64_t outer = 1;
    for (int d = 0; d < r - 1; d++)
        outer *= dims[d];
    int64_t inner = dims[r - 1];
    int64_t chunk = inner, nchunks = 1;
    if (outer < 64 && inner >= 8192) {
        chunk = ((inner + 63) / 64 + 63) / 64 * 64;
        if (chunk < 4096)
            chunk = 4096;
        nchunks = (inner + chunk - 1) / chunk;
    }
    f->k->outer = outer * nchunks;
    f->k->cost = (double)chunk * (1.0 + g->n_expr);

    lg_point pt;
    if (!lg_point_init(f, &pt, (flat ? g->row_rank : g->rank) == 0 ? 0 : r))
        return;
    LLVMBuilderRef B = m->B;
    lg_loop lo;
    LLVMValueRef t = lg_loop_begin(f, &lo, f->begin, f->end, "outer");
    LLVMValueRef o = t, jlo = lg_i64(m, 0), jhi = lg_i64(m, inner);
    if (nchunks > 1) {
        o = LLVMBuildSDiv(B, t, lg_i64(m, nchunks), "");
        LLVMValueRef c = LLVMBuildSRem(B, t, lg_i64(m, nchunks), "");
        jlo = LLVMBuildNSWMul(B, c, lg_i64(m, chunk), "");
        jhi = lg_min_i64(m, LLVMBuildNSWAdd(B, jlo, lg_i64(m, chunk), ""), lg_i64(m, inner));
    }
    LLVMValueRef idx[KF_MAX_RANK];
    if (r > 1)
        lg_unflatten(m, o, r - 1, dims, idx);
    lg_loop li;
    LLVMValueRef j = lg_loop_begin(f, &li, jlo, jhi, "inner");
    for (int d = 0; d < r - 1; d++)
        pt.idx[d] = idx[d];
    pt.idx[r - 1] = j;
    lg_point_reset(f, &pt);
    if (flat) {
        int64_t cs[KF_MAX_RANK] = {0}, a = 1;
        for (int d = r - 1; d >= 0; d--) {
            cs[d] = a;
            a *= dims[d];
        }
        const kf_tensor *t = m->graph->nodes[g->writes[0]];
        LLVMValueRef v =
            lg_convert(m, lg_expr(f, &pt, g->roots[0]), g->expr[g->roots[0]].dtype, t->dtype);
        lg_store_elem(f, t->dtype, lg_buf(f, t->id), lg_offset(m, r, pt.idx, cs), v);
    } else {
        lg_store_writes(f, &pt);
    }
    lg_loop_end(f, &li);
    lg_loop_end(f, &lo);
    lg_point_done(f, &pt);
}
