/*
 * fuse_swiglu.c -- rule: a gated GEMM pair, act(A.Wg) * (A.Wu), becomes one
 * GEMM group with two anchors sharing operand A (SwiGLU with silu, GeGLU with
 * gelu): one pass over A feeds both accumulators, and the product is the
 * epilogue, so neither GEMM output reaches memory.
 *
 * Legal when [I1..I5]:
 *   - a binary elementwise product (commutative mul, asked through traits [I1])
 *     of act(G) and U, where act is an ACTIVATION op and G, U are matmuls;
 *   - G and U read the same A tensor with the same transpose_a, have the same
 *     shape and dtype (f32/f16/bf16), and G, act(G) and U are used once and are
 *     not graph outputs [I2, I4];
 *   - the merge keeps the groups acyclic [I3].
 * The GEMM epilogue pass then grows the epilogue from the product.
 */
#include "fusion/pass.h"

static bool is_gemm_once(const kf_planner *p, const kf_tensor *t) {
    return kf_op_has(t->op, KF_TRAIT_GEMM) && kf_pl_single_use(p, t) &&
           kf_pl_gemm_dtype_ok(t->dtype) && p->groups[p->gid[t->id]].kind == KF_GROUP_GEMM;
}

kf_status kf_fuse_swiglu(kf_planner *p) {
    kf_graph *g = p->g;
    for (uint32_t i = 0; i < p->n; i++) {
        kf_tensor *m = g->nodes[i];
        if (!p->need[i] || !kf_pl_is_elementwise(m) || !kf_op_has(m->op, KF_TRAIT_BINARY) ||
            !kf_op_has(m->op, KF_TRAIT_COMMUTATIVE) || kf_op_has(m->op, KF_TRAIT_COMPARE))
            continue;
        /* A gated unit multiplies: this rule is about mul's math, which I1 allows. */
        if (m->op != KF_OP_MUL)
            continue;
        for (int side = 0; side < 2; side++) {
            kf_tensor *act = m->src[side], *up = m->src[1 - side];
            if (!kf_op_has(act->op, KF_TRAIT_ACTIVATION) || !kf_pl_single_use(p, act))
                continue;
            kf_tensor *gate = act->src[0];
            if (!is_gemm_once(p, gate) || !is_gemm_once(p, up) || gate == up)
                continue;
            if (gate->src[0] != up->src[0] || gate->attr.transpose_a != up->attr.transpose_a ||
                !kf_pl_same_shape(gate, up) || gate->dtype != up->dtype ||
                !kf_pl_same_shape(gate, m))
                continue;
            uint32_t gi = p->gid[gate->id];
            uint32_t ids[3] = {up->id, act->id, m->id};
            if (!kf_pl_try_merge_list(p, gi, ids, 3))
                continue;
            p->groups[gi].anchor = gate->id;
            p->groups[gi].anchor2 = up->id;
            break;
        }
    }
    return KF_OK;
}
