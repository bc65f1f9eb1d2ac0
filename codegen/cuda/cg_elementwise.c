/*
 * cg_elementwise.c -- the elementwise kernel (templates/elementwise.cuh):
 * elementwise and layout groups, and a GEMM epilogue without a row stage.
 * Grid-stride loops over vectors of the output space, with the operands that
 * repeat along it hoisted out of the loop, the streamed ones loaded ahead
 * (KF_UNROLL), and on sm_90 the bulk path, which moves whole chunks through a
 * ring of shared memory with cp.async.bulk. Coordinates in 32 bits where the
 * space has at most 2^32 elements; slices, concats and gathers read as
 * vectors where their elements run consecutively (cg_access.c).
 */
#include "codegen/cuda/cg.h"

#include "codegen/cuda/cuda_recipe.h"
#include "codegen/cuda/templates.h"

/* The bulk path of the elementwise template (elementwise.cuh, KF_BULK):
 * blocks of BULK_BLOCK threads, one per SM, move chunks of BULK_BLOCK * vec
 * elements (a vector per thread) through a ring of about BULK_RING_TARGET
 * bytes, at least BULK_MIN_STAGES stages. A stage holds each streamed
 * operand's part of the chunk, then each output's: in the place of a streamed
 * operand of the same element size not already taken, else its own.
 * Measured on the 65536 x 4096 bf16 chain (elementwise.cuh's note), one
 * process per GPU, H100 (evict-first) / H200 (evict-normal), ms:
 *   5 x 16 KiB, 1024 threads   0.390-0.391 / 0.273-0.274  (this rule)
 *   6 x 16 KiB                 0.392-0.393 / 0.277-0.283
 *   4 x 16 KiB                 0.388-0.390 / 0.290-0.292
 *   8 x 16 KiB                 -           / 0.293-0.295
 *   3 x 32 KiB                 0.384-0.386 / 0.287-0.290
 *   3 x 16 KiB, 512 threads, 2 blocks per SM   0.389-0.390 / 0.290
 *   4 x 8 KiB, 256 threads, 2 blocks per SM    0.394-0.395 / 0.313-0.316
 * against 0.398-0.403 / 0.289-0.295 for the grid-stride loops alone. The
 * H200 is that sensitive to the bytes in flight: 5 x 16 KiB also led at a
 * half and a third of the size. */
#define BULK_BLOCK 1024u
#define BULK_RING_TARGET (80u * 1024u)
#define BULK_MIN_STAGES 3u
#define BULK_MAX 4u         /* streamed operands, outputs */
#define BULK_MIN_CHUNKS 128 /* fewer: the grid-stride loops alone */

typedef struct bulk_plan {
    int64_t e; /* elements per chunk; 0: no bulk path */
    uint32_t stages;
    uint32_t stage_bytes; /* bytes of one stage */
    uint32_t tx;          /* bytes the streamed operands of a chunk load */
    uint32_t n_in;
    uint32_t in_node[BULK_MAX];
    uint32_t in_off[BULK_MAX]; /* byte offsets in a stage */
    uint32_t out_off[BULK_MAX];
} bulk_plan;

/* Plans the bulk path for an elementwise kernel with `streams` streamed
 * operands (`pre`; 0: none qualifies) and n_outs full outputs of n elements,
 * or leaves bp->e = 0: below sm_90 (cp.async.bulk), scalar kernels, more than
 * BULK_MAX operands or outputs, too few chunks, or a ring the arch's shared
 * memory does not hold. */
static void plan_bulk(const cg *c, const out_spec *outs, uint32_t n_outs, int64_t n, uint32_t vec,
                      uint32_t streams, const bool *pre, bulk_plan *bp) {
    memset(bp, 0, sizeof *bp);
    uint32_t per_block, per_sm;
    if (atoi(c->k->arch + 3) < 90 || vec < 2 || streams == 0 || streams > BULK_MAX || n_outs == 0 ||
        n_outs > BULK_MAX || !cg_stage_smem_limits(c->k->arch, &per_block, &per_sm))
        return;
    uint32_t in_size[BULK_MAX], bpe = 0; /* bytes per element of a stage */
    for (uint32_t i = 0; i < c->n; i++) {
        if (!pre[i])
            continue;
        bp->in_node[bp->n_in] = i;
        in_size[bp->n_in] = (uint32_t)kf_dtype_size(c->k->params[c->param[i]].dtype);
        bp->in_off[bp->n_in++] = bpe;
        bpe += in_size[bp->n_in - 1];
    }
    bool taken[BULK_MAX] = {false};
    for (uint32_t o = 0; o < n_outs; o++) {
        uint32_t z = (uint32_t)kf_dtype_size(outs[o].dtype), k = 0;
        while (k < bp->n_in && (taken[k] || in_size[k] != z))
            k++;
        if (k < bp->n_in) {
            taken[k] = true;
            bp->out_off[o] = bp->in_off[k];
        } else {
            bp->out_off[o] = bpe;
            bpe += z;
        }
    }
    int64_t e = (int64_t)BULK_BLOCK * vec;
    uint64_t stage = (uint64_t)e * bpe, stages = BULK_RING_TARGET / stage;
    if (stages < BULK_MIN_STAGES)
        stages = BULK_MIN_STAGES;
    uint64_t fixed = (cg_has_gelu_table(c) ? GELU_TAB_N * 2u : 0u) + 1024u;
    if (stages * stage + fixed > per_block || n / e < BULK_MIN_CHUNKS) {
        memset(bp, 0, sizeof *bp);
        return;
    }
    bp->e = e;
    bp->stages = (uint32_t)stages;
    bp->stage_bytes = (uint32_t)stage;
    for (uint32_t k = 0; k < bp->n_in; k++) {
        bp->tx += (uint32_t)e * in_size[k];
        bp->in_off[k] *= (uint32_t)e;
    }
    for (uint32_t o = 0; o < n_outs; o++)
        bp->out_off[o] *= (uint32_t)e;
}

/* The bulk path's hooks (elementwise.cuh), or KF_BULK 0. */
static void emit_bulk(cg *c, const bulk_plan *bp, const out_spec *outs, uint32_t n_outs) {
    if (bp->e == 0) {
        cg_puts(&c->s, "#define KF_BULK 0\n\n");
        return;
    }
    cg_printf(&c->s,
              "#define KF_BULK 1\n#define KF_BULK_E %" PRId64 "LL\n#define KF_BULK_STAGES %u\n"
              "#define KF_BULK_STAGE_BYTES %u\n#define KF_BULK_TX %uu\n",
              bp->e, bp->stages, bp->stage_bytes, bp->tx);
    cg_puts(&c->s,
            "__device__ __forceinline__ void kf_bulk_load(unsigned char *sb, unsigned long long "
            "*bar, long long c, KF_PARAMS) {\n");
    for (uint32_t k = 0; k < bp->n_in; k++) {
        int p = c->param[bp->in_node[k]];
        cg_printf(&c->s, "    kf_bulk_ld(sb + %u, p%d + c * KF_BULK_E, KF_BULK_E * %zu, bar);\n",
                  bp->in_off[k], p, kf_dtype_size(c->k->params[p].dtype));
    }
    cg_puts(&c->s, "}\n__device__ __forceinline__ void kf_bulk_pre(const unsigned char *sb, int e, "
                   "kf_pre &pv) {\n");
    for (uint32_t k = 0; k < bp->n_in; k++) {
        size_t z = kf_dtype_size(c->k->params[c->param[bp->in_node[k]]].dtype);
        cg_printf(
            &c->s,
            "    pv.l%u = *reinterpret_cast<const kf_raw<KF_VEC * %zu> *>(sb + %u + e * %zu);\n",
            bp->in_node[k], z, bp->in_off[k], z);
    }
    cg_puts(
        &c->s,
        "}\n__device__ __forceinline__ void kf_bulk_store(const unsigned char *sb, long long c, "
        "KF_PARAMS) {\n");
    for (uint32_t o = 0; o < n_outs; o++)
        cg_printf(&c->s, "    kf_bulk_st(p%d + c * KF_BULK_E, sb + %u, KF_BULK_E * %zu);\n",
                  outs[o].param, bp->out_off[o], kf_dtype_size(outs[o].dtype));
    cg_puts(&c->s, "}\n\n");
}

/* Whether i32 node i costs no more than float work: an index, a constant, a
 * load, min / max / where, a cast from a 32-bit or smaller type, or + - x
 * and negation that provably stay in i32 (cg_i32_exact: no saturation). */
static bool i32_light(const cg *c, uint32_t i) {
    const kf_expr *e = &c->g->expr[i];
    if (e->kind != KF_EXPR_OP)
        return e->kind == KF_EXPR_INDEX || e->kind == KF_EXPR_CONST || e->kind == KF_EXPR_LOAD;
    switch (e->op) {
    case KF_OP_MIN:
    case KF_OP_MAX:
    case KF_OP_WHERE:
        return true;
    case KF_OP_CAST: {
        kf_dtype from = c->g->expr[e->src[0]].dtype;
        return from != KF_DTYPE_I64 && from != KF_DTYPE_F64;
    }
    case KF_OP_ADD:
    case KF_OP_SUB:
    case KF_OP_MUL:
    case KF_OP_NEG:
        return cg_i32_exact(c->g, i);
    default:
        return false;
    }
}

/* ------------------------------------------------------------------------ */
/* Partner loads: one load for where(C, F(X at a), G(X at b))                 */
/* ------------------------------------------------------------------------ */

/* A concat of two views of one tensor (rotate_half: cat(-x2, x1)) reads X
 * twice per element, where(j < n, -X[.., j + n], X[.., j - n]) with each
 * index clamped into its half (cg_kvary_fill's note), and keeps one of the
 * two. As two remapped loads (cg_emit_remap_vector) that is a vector load and
 * a scalar one per vector, each behind a three-way branch, after the previous
 * vector's store: in the rotary kernel of gpu_bench's rotary row (unroll 4)
 * the SASS showed the kernel's own four vector loads issued up front and each
 * vector's two partner loads and its store one vector at a time, four
 * serialized round trips a loop trip. A pair is read instead as one load at
 * where(C, a, b): element k takes the element its where keeps, and both
 * loads' nodes stand for that value. Legal when each load reaches the
 * outputs only through its own side of the where (what the other elements
 * of F(...) compute is thrown away by the where), and when C and both
 * indices are index arithmetic alone (no load, no clamp report), so
 * kf_pairN(i0, m) can compute them anywhere: in kf_pre_load, with the
 * streamed operands, and in kf_body. The vector path is taken when C is the
 * same over the chunk and the chosen side's elements run consecutively and
 * aligned, else element by element at m[k] (a chunk across the halves, a
 * ragged or unaligned shape): correct for every shape, as both loads were. */
#define EW_MAX_PAIRS 4

typedef struct ew_pair {
    uint32_t w;    /* the where node */
    uint32_t a, b; /* the remapped loads of its true and false side */
} ew_pair;

/* Whether remapped load i is read as cg_emit_remap_vector reads a moving
 * chunk: its offset steps by 0 or 1 from one element to the next (the last
 * axis at stride 1, or one KV_STEP coordinate node at stride 1), so that
 * m[VV - 1] - m[0] == VV - 1 holds exactly when the elements run
 * consecutively. */
static bool pair_side_ok(const cg *c, const uint8_t *kv, uint32_t i, kf_space sp, int rank,
                         const int64_t *dims) {
    const kf_expr *e = &c->g->expr[i];
    if (e->kind != KF_EXPR_LOAD || !cg_is_remapped_load(e) || !c->need[i] || c->ov[i][0] ||
        c->param[i] < 0 || rank < 1 || e->space != sp)
        return false;
    bool stat;
    int dyn;
    return cg_remap_step(e, kv, rank, dims, &stat, &dyn) && (stat || dyn >= 0);
}

/* Whether every needed path from load l to the outputs runs through operand
 * `side` (1: true, 2: false) of where node w: the nodes l reaches, w aside
 * (t, scratch of c->n), hold no output and neither of w's other operands. */
static bool pair_only_through(const cg *c, bool *t, uint32_t l, uint32_t w, int side,
                              const out_spec *outs, uint32_t n_outs) {
    const kf_group *g = c->g;
    memset(t, 0, c->n * sizeof *t);
    t[l] = true;
    for (uint32_t i = l + 1; i < c->n; i++) {
        const kf_expr *e = &g->expr[i];
        if (!c->need[i] || i == w ||
            (e->kind != KF_EXPR_OP && e->kind != KF_EXPR_LOAD && e->kind != KF_EXPR_ACC))
            continue;
        for (int j = 0; j < 3; j++)
            t[i] = t[i] || (e->src[j] != KF_NONE && t[e->src[j]]);
    }
    for (uint32_t o = 0; o < n_outs; o++) {
        if (outs[o].node < c->n && t[outs[o].node])
            return false;
    }
    const kf_expr *we = &g->expr[w];
    return t[we->src[side]] && !t[we->src[0]] && !t[we->src[3 - side]];
}

/* Marks in t what node i needs and returns whether it is index arithmetic
 * alone: constants, indices and ops, no load, no clamp report. */
static bool pair_index_only(const cg *c, bool *t, uint32_t i) {
    if (i == KF_NONE || t[i])
        return true;
    t[i] = true;
    const kf_expr *e = &c->g->expr[i];
    if (e->kind == KF_EXPR_CONST || e->kind == KF_EXPR_INDEX)
        return true;
    if (e->kind != KF_EXPR_OP || e->clamp_report || c->ov[i][0])
        return false;
    for (int j = 0; j < 3; j++) {
        if (!pair_index_only(c, t, e->src[j]))
            return false;
    }
    return true;
}

static bool pair_used(const ew_pair *pairs, uint32_t np, uint32_t l) {
    for (uint32_t p = 0; p < np; p++) {
        if (pairs[p].a == l || pairs[p].b == l)
            return true;
    }
    return false;
}

/* The pairs of the kernel (at most EW_MAX_PAIRS), each load in one at most.
 * t: scratch of c->n. */
static uint32_t find_pairs(const cg *c, const uint8_t *kv, kf_space sp, int rank,
                           const int64_t *dims, const out_spec *outs, uint32_t n_outs, bool *t,
                           ew_pair *pairs) {
    const kf_group *g = c->g;
    uint32_t np = 0;
    for (uint32_t w = 0; w < c->n && np < EW_MAX_PAIRS; w++) {
        const kf_expr *we = &g->expr[w];
        if (!c->need[w] || c->ov[w][0] || we->kind != KF_EXPR_OP || we->op != KF_OP_WHERE)
            continue;
        uint32_t a = KF_NONE, b = KF_NONE;
        for (uint32_t la = 0; la < w && b == KF_NONE; la++) {
            if (pair_used(pairs, np, la) || !pair_side_ok(c, kv, la, sp, rank, dims) ||
                !pair_only_through(c, t, la, w, 1, outs, n_outs))
                continue;
            for (uint32_t lb = 0; lb < w && b == KF_NONE; lb++) {
                if (lb != la && !pair_used(pairs, np, lb) && c->param[lb] == c->param[la] &&
                    g->expr[lb].dtype == g->expr[la].dtype &&
                    pair_side_ok(c, kv, lb, sp, rank, dims) &&
                    pair_only_through(c, t, lb, w, 2, outs, n_outs)) {
                    a = la;
                    b = lb;
                }
            }
        }
        if (b == KF_NONE)
            continue;
        memset(t, 0, c->n * sizeof *t);
        bool idx = pair_index_only(c, t, we->src[0]);
        for (int j = 0; j < 3 && idx; j++) {
            idx = pair_index_only(c, t, g->expr[a].src[j]) &&
                  pair_index_only(c, t, g->expr[b].src[j]);
        }
        if (idx)
            pairs[np++] = (ew_pair){w, a, b};
    }
    return np;
}

/* Appends load l's offset of element k of the chunk: its offset, its
 * coordinates x strides, its coordinate nodes x theirs. */
static void pair_offset(cg *c, chunk_ctx *x, uint32_t l, int rank, const int64_t *dims) {
    const kf_expr *e = &c->g->expr[l];
    cg_printf(&c->s, "%" PRId64 "LL", e->offset);
    for (int d = 0; d < rank; d++) {
        if (e->strides[d] != 0 && dims[d] != 1)
            cg_printf(&c->s, " + (long long)(%s) * %" PRId64 "LL", cg_coord_of(x, e->space, d),
                      e->strides[d]);
    }
    for (int j = 0; j < 3 && e->src[j] != KF_NONE; j++)
        cg_printf(&c->s, " + (long long)v%u[k] * %" PRId64 "LL", e->src[j], e->dyn_strides[j]);
}

/* kf_pairN<VV>(i0, m) for each pair: m[k] the offset element k of the chunk
 * at i0 reads, and whether they run consecutively (C the same over the chunk
 * and the chosen side's offsets one apart). need: scratch of c->n. */
static void emit_pair_fns(cg *c, chunk_ctx *x, const uint8_t *kv, const ew_pair *pairs, uint32_t np,
                          int rank, const int64_t *dims, bool *need) {
    const kf_group *g = c->g;
    bool *saved = c->need;
    for (uint32_t p = 0; p < np && c->st == KF_OK; p++) {
        const kf_expr *we = &g->expr[pairs[p].w], *ea = &g->expr[pairs[p].a],
                      *eb = &g->expr[pairs[p].b];
        memset(need, 0, c->n * sizeof *need);
        c->need = need;
        cg_mark(c, we->src[0]);
        for (int j = 0; j < 3; j++) {
            cg_mark(c, ea->src[j]);
            cg_mark(c, eb->src[j]);
        }
        cg_printf(&c->s,
                  "/* the offsets of nodes %u and %u where node %u takes them (one load) */\n"
                  "template <int VV> __device__ __forceinline__ bool kf_pair%u(long long i0, long "
                  "long *m) {\n",
                  pairs[p].a, pairs[p].b, pairs[p].w, p);
        cg_emit_nodes(c, cg_coord_of, x, "    ", true);
        c->need = saved;
        uint32_t cn = we->src[0];
        cg_printf(&c->s,
                  "#pragma unroll\n    for (int k = 0; k < VV; k++)\n        m[k] = v%u[k] ? (",
                  cn);
        pair_offset(c, x, pairs[p].a, rank, dims);
        cg_puts(&c->s, ") : (");
        pair_offset(c, x, pairs[p].b, rank, dims);
        cg_puts(&c->s, ");\n");
        /* C the same over the chunk: fixed; a comparison of a KV_STEP value
         * (non-decreasing) with a fixed one is monotone, so its ends decide;
         * else every element */
        const kf_expr *ce = &g->expr[cn];
        bool mono = ce->kind == KF_EXPR_OP &&
                    (ce->op == KF_OP_LT || ce->op == KF_OP_LE || ce->op == KF_OP_GT ||
                     ce->op == KF_OP_GE) &&
                    ((kv[ce->src[0]] == KV_STEP && kv[ce->src[1]] == KV_FIXED) ||
                     (kv[ce->src[0]] == KV_FIXED && kv[ce->src[1]] == KV_STEP));
        if (kv[cn] == KV_FIXED)
            cg_puts(&c->s, "    bool same = true;\n");
        else if (mono)
            cg_printf(&c->s, "    bool same = v%u[0] == v%u[VV - 1];\n", cn, cn);
        else
            cg_printf(&c->s,
                      "    bool same = true;\n#pragma unroll\n    for (int k = 1; k < VV; k++)\n"
                      "        same = same && v%u[k] == v%u[0];\n",
                      cn, cn);
        cg_puts(&c->s, "    return same && m[VV - 1] - m[0] == VV - 1;\n}\n\n");
    }
}

kf_status cg_gen_elementwise(cg *c, out_spec *outs, uint32_t n_outs, kf_space sp,
                             const char *what) {
    const kf_group *g = c->g;
    kf_cuda_kernel *k = c->k;
    int rank;
    const int64_t *dims;
    cg_space_dims(g, sp, &rank, &dims);
    int64_t n = cg_numel_of(rank, dims);
    k->tmpl = KF_CUDA_TEMPLATE_ELEMENTWISE;
    for (uint32_t o = 0; o < n_outs; o++)
        cg_mark(c, outs[o].node);
    cg_load_params(c);
    cg_mark_stored(c, outs, n_outs);
    /* Writes: contiguous over the space (a vector store), or broadcast (a
     * guarded scalar store: only the elements at coordinate 0 of the axes the
     * written tensor does not have). */
    bool all_full = true;
    size_t minsz = 16;
    for (uint32_t o = 0; o < n_outs; o++) {
        const kf_tensor *t = cg_tensor(c, outs[o].tensor);
        if (kf_ir_numel(t) != n)
            all_full = false;
        size_t z = kf_dtype_size(outs[o].dtype);
        if (z < minsz)
            minsz = z;
    }
    minsz = cg_min_vec_size(c, sp, minsz);
    uint32_t vec = all_full && rank > 0 ? cg_vec_for(minsz, dims[rank - 1], rank == 1) : 1;
    if (n < (int64_t)vec)
        vec = 1;
    k->vec = vec;
    k->launch.block = 256;
    k->launch.work_items = (uint64_t)((n + vec - 1) / vec);
    k->launch.items_per_block = 256;
    k->launch.blocks_per_sm = 8;
    if (c->st != KF_OK)
        return c->st;

    /* Hoisting: an operand whose offset depends only on the linear index
     * modulo P (it varies along a suffix of the axes only: a bias, a scale,
     * a per-column vector) reads the same values in every grid-stride step
     * when threads * KF_VEC is a multiple of P. The hoisted path loads those
     * once per thread (kf_hoist_load) instead of once per vector; the grid is
     * rounded to make it apply (launch.grid_multiple). The other vector loads
     * are the streamed operands (`pre`, KF_UNROLL below). */
    bool *hoist = kf_mem_calloc(c->mem, c->n ? c->n : 1, sizeof *hoist);
    bool *pre = kf_mem_calloc(c->mem, c->n ? c->n : 1, sizeof *pre);
    if (!hoist || !pre) {
        if (hoist)
            kf_mem_free(c->mem, hoist, (c->n ? c->n : 1) * sizeof *hoist);
        if (pre)
            kf_mem_free(c->mem, pre, (c->n ? c->n : 1) * sizeof *pre);
        return cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    }
    int64_t period = 0;
    uint32_t streams = 0;
    bool streams_dense = true; /* every streamed operand is laid out as the space */
    for (uint32_t i = 0; i < c->n && vec > 1; i++) {
        const kf_expr *e = &g->expr[i];
        if (!c->need[i] || c->ov[i][0] || !cg_is_load(e) || e->space != sp)
            continue;
        int64_t s[KF_MAX_RANK];
        cg_node_strides(c, i, s);
        acc_class cl = cg_classify(rank, dims, s, vec);
        if (cl == ACC_GATHER)
            continue;
        int d0 = rank;
        for (int d = 0; d < rank && d0 == rank; d++) {
            if (s[d] != 0 && dims[d] != 1)
                d0 = d;
        }
        int64_t pi = cg_numel_of(rank - d0, dims + d0);
        if (pi >= n) {
            if (cl == ACC_VECTOR) {
                pre[i] = true;
                streams++;
                streams_dense = streams_dense && cg_strides_contig(rank, dims, s);
            }
            continue;
        }
        hoist[i] = true;
        if (pi > period)
            period = pi; /* >= 1: a hoisted operand has one */
    }
    /* The grid aims at 8 blocks per SM; ptxas must fit them (32 registers):
     * with 33 the chain above ran 0.349 ms instead of 0.294 (H200). Not for
     * f64, pow or i32 arithmetic that saturates in 64 bits, which would
     * spill at 32. i32 index arithmetic (a concat's or a slice's
     * coordinates: i32_light) is light for the unrolled loops below only. */
    bool light = true, ints = false;
    for (uint32_t i = 0; i < c->n; i++) {
        const kf_expr *e = &g->expr[i];
        if (c->need[i] &&
            (e->dtype == KF_DTYPE_F64 || (e->dtype == KF_DTYPE_I32 && !i32_light(c, i)) ||
             (e->kind == KF_EXPR_OP && e->op == KF_OP_POW)))
            light = false;
        ints = ints || (c->need[i] && e->dtype == KF_DTYPE_I32);
    }
    /* how each node varies along a vector (remapped loads read as vectors:
     * cg_emit_remap_vector), and the partner-load pairs (find_pairs) */
    uint8_t *kv = vec > 1 ? kf_mem_calloc(c->mem, c->n ? c->n : 1, 1) : NULL;
    bool *scratch = kf_mem_calloc(c->mem, c->n ? c->n : 1, sizeof *scratch);
    ew_pair pairs[EW_MAX_PAIRS];
    uint32_t np = 0;
    if ((vec > 1 && !kv) || !scratch) {
        if (kv)
            kf_mem_free(c->mem, kv, c->n ? c->n : 1);
        if (scratch)
            kf_mem_free(c->mem, scratch, (c->n ? c->n : 1) * sizeof *scratch);
        kf_mem_free(c->mem, hoist, (c->n ? c->n : 1) * sizeof *hoist);
        kf_mem_free(c->mem, pre, (c->n ? c->n : 1) * sizeof *pre);
        return cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    }
    if (kv) {
        cg_kvary_fill(c, sp, kv);
        if (!(c->rflags & KF_CUDA_RECIPE_EW_PAIRS_APART))
            np = find_pairs(c, kv, sp, rank, dims, outs, n_outs, scratch, pairs);
    }
    /* Streamed operands (16-byte vector loads, not hoisted) are read once:
     * with KF_UNROLL > 1 each thread loads KF_UNROLL steps of them
     * (kf_pre_load, with the device's L2 policy for streamed reads,
     * common.cuh) before computing the first, at 4 blocks of 256 per SM (64
     * registers): 64 bytes in flight per thread instead of 16. At most 4
     * streamed vectors per step in flight, so 4 / streams steps. For the
     * chain above (one stream, 65536 x 4096 bf16), against one vector per
     * step at 8 blocks: H100 0.400 ms against 0.419 (evict-first), H200
     * 0.290-0.292 against 0.296-0.300. */
    uint32_t unroll = light && streams > 0 && streams + np <= 2 ? 4 / (streams + np) : 1;
    if (unroll > 1)
        k->launch.blocks_per_sm = 4;
    /* With i32 index arithmetic, the unrolled loops at 4 blocks (64
     * registers) hold the rotary kernel of gpu_bench's rotary row without a
     * spill (ptxas, sm_90a); at 8 blocks (32 registers) a concat's three
     * load paths spilled, so a kernel that does not unroll keeps the
     * register bound off, and none takes the bulk path (not run on a GPU
     * with index arithmetic). */
    bool heavy = !light; /* f64, pow or heavy i32: not index arithmetic alone */
    if (ints && unroll == 1)
        light = false;
    /* The grid fills every SM with blocks_per_sm blocks of equal work, so as
     * many must be resident at once. Without the register bound ptxas gave a
     * rotary embedding whose cos and sin vary by batch (B8 H32 S2048 D128,
     * not unrolled: three streamed operands) 46 registers, 5 blocks of 256 an
     * SM, and the grid's other 3 blocks an SM ran after them as a second,
     * thin wave. Index arithmetic alone fits 64 registers (the unrolled
     * loops' bound): 4 blocks, one wave. Measured no faster (H100, A B B A,
     * 912446f: 0.1144 / 0.1138 ms against the 8-block grid's 0.1145 /
     * 0.1159): latency-bound, the kernel moves as many bytes a cycle with 4
     * blocks as with 5 then 3; kept because the grid now says what runs.
     * (f64, pow and heavy i32 keep no bound and the 8 blocks: not measured.) */
    if (!light && !heavy)
        k->launch.blocks_per_sm = 4;
    bulk_plan bp;
    /* (a pair's load is not a streamed operand of the stage: none with pairs) */
    plan_bulk(c, outs, n_outs, n, vec, light && !ints && streams_dense && np == 0 ? streams : 0,
              pre, &bp);
    if (bp.e > 0) {
        k->tmpl = KF_CUDA_TEMPLATE_ELEMENTWISE_BULK;
        k->launch.block = BULK_BLOCK;
        k->launch.blocks_per_sm = 1;
        k->launch.shared_bytes = bp.stages * bp.stage_bytes;
        k->launch.work_items = (uint64_t)(n / bp.e);
        k->launch.items_per_block = 1;
    }
    if (period > 0) {
        uint64_t a = (uint64_t)period, b = (uint64_t)k->launch.block * vec;
        while (b) {
            uint64_t t = a % b;
            a = b;
            b = t;
        }
        uint64_t m = (uint64_t)period / a;
        k->launch.grid_multiple = m <= 65536 ? (uint32_t)m : 0;
    }

    cg_emit_head(c, what);
    cg_printf(&c->s, "#define KF_N %" PRId64 "LL\n#define KF_NVEC %" PRId64 "LL\n\n", n,
              n / (int64_t)vec);

    chunk_ctx *x = kf_mem_calloc(c->mem, 1, sizeof *x);
    if (!x) {
        if (kv)
            kf_mem_free(c->mem, kv, c->n ? c->n : 1);
        kf_mem_free(c->mem, scratch, (c->n ? c->n : 1) * sizeof *scratch);
        kf_mem_free(c->mem, hoist, (c->n ? c->n : 1) * sizeof *hoist);
        kf_mem_free(c->mem, pre, (c->n ? c->n : 1) * sizeof *pre);
        return cg_fail(c, KF_ERR_OUT_OF_MEMORY, "kf_cuda_codegen: out of memory");
    }
    /* 32-bit coordinates where the space allows (every offset is then a
     * 32 x 32 -> 64-bit multiply-add of a coordinate and a stride) */
    if ((uint64_t)n <= UINT32_MAX)
        cg_coords_linear_u32(x, sp, rank, dims, "i0");
    else
        cg_coords_linear(x, sp, rank, dims, "i0");
    x->vrank[sp] = rank;
    x->vrank[sp == KF_SPACE_OUT ? KF_SPACE_ROW : KF_SPACE_OUT] = 0;

    sbuf cond = {.mem = c->mem};
    cg_vec_conditions(c, x, vec, &cond);
    for (uint32_t o = 0; o < n_outs && vec > 1; o++) {
        size_t bytes = vec * kf_dtype_size(outs[o].dtype);
        cg_printf(&cond, " && kf_aligned(p%d, %zu)", outs[o].param,
                  bytes > 16 ? (size_t)16 : bytes);
    }
    cg_emit_vec_ok(c, cond.p ? cond.p : "");
    if (cond.p)
        kf_mem_free(c->mem, cond.p, cond.cap);

    cg_printf(&c->s, "#define KF_HOIST_P %" PRId64 "LL\n", period);
    cg_printf(&c->s, "#define KF_MINB %u\n#define KF_UNROLL %u\n",
              bp.e > 0 || heavy ? 1u : k->launch.blocks_per_sm, unroll);
    cg_puts(&c->s, "struct kf_hoist {\n");
    for (uint32_t i = 0; i < c->n; i++) {
        if (!hoist[i])
            continue;
        int64_t s[KF_MAX_RANK];
        cg_node_strides(c, i, s);
        kf_dtype pd = c->k->params[c->param[i]].dtype;
        if (cg_classify(rank, dims, s, vec) == ACC_VECTOR) /* raw: 4 registers for 8 bf16 */
            cg_printf(&c->s, "    kf_raw<KF_VEC * %zu> l%u;\n", kf_dtype_size(pd), i);
        else
            cg_printf(&c->s, "    %s l%u;\n", cg_reg_type(pd), i);
    }
    cg_puts(
        &c->s,
        "    char none_;\n};\n"
        "__device__ __forceinline__ void kf_hoist_load(long long i0, kf_hoist &hv, KF_PARAMS) {\n");
    for (uint32_t i = 0; i < c->n; i++) {
        if (!hoist[i])
            continue;
        int64_t s[KF_MAX_RANK];
        cg_node_strides(c, i, s);
        char off[OV_MAX - 64];
        cg_offset_str(c, x, i, off, sizeof off);
        if (cg_classify(rank, dims, s, vec) == ACC_VECTOR)
            cg_printf(&c->s, "    kf_raw_ld(p%d + (%s), hv.l%u);\n", c->param[i], off, i);
        else
            cg_printf(&c->s, "    hv.l%u = kf_ld(p%d + (%s));\n", i, c->param[i], off);
    }
    cg_puts(&c->s, "    (void)i0; (void)hv;\n}\n\n");
    emit_pair_fns(c, x, kv, pairs, np, rank, dims, scratch);

    /* a pair's load is loaded ahead with the streamed operands (m<p>) */
    cg_puts(&c->s, "struct kf_pre {\n");
    for (uint32_t i = 0; i < c->n; i++) {
        if (pre[i])
            cg_printf(&c->s, "    kf_raw<KF_VEC * %zu> l%u;\n",
                      kf_dtype_size(c->k->params[c->param[i]].dtype), i);
    }
    for (uint32_t p = 0; p < np && unroll > 1; p++)
        cg_printf(&c->s, "    kf_raw<KF_VEC * %zu> m%u;\n",
                  kf_dtype_size(c->k->params[c->param[pairs[p].a]].dtype), p);
    cg_puts(&c->s,
            "    char none_;\n};\n"
            "__device__ __forceinline__ void kf_pre_load(long long i0, kf_pre &pv, KF_PARAMS) {\n");
    for (uint32_t i = 0; i < c->n; i++) {
        if (!pre[i])
            continue;
        char off[OV_MAX - 64];
        cg_offset_str(c, x, i, off, sizeof off);
        cg_printf(&c->s, "    kf_raw_ld_stream(p%d + (%s), pv.l%u);\n", c->param[i], off, i);
    }
    for (uint32_t p = 0; p < np && unroll > 1; p++) {
        int pp = c->param[pairs[p].a];
        kf_dtype pd = c->k->params[pp].dtype;
        size_t z = kf_dtype_size(pd);
        cg_printf(
            &c->s,
            "    {\n        long long m[KF_VEC];\n"
            "        if (kf_pair%u<KF_VEC>(i0, m) && kf_aligned(p%d + m[0], KF_VEC * %zu < 16 ? "
            "KF_VEC * %zu : 16))\n"
            "            kf_raw_ld_stream(p%d + m[0], pv.m%u);\n"
            "        else {\n#pragma unroll\n"
            "            for (int k = 0; k < KF_VEC; k++)\n"
            "                reinterpret_cast<%s *>(pv.m%u.b)[k] = p%d[m[k]];\n        }\n    }\n",
            p, pp, z, z, pp, p, cg_storage_type(pd), p, pp);
    }
    cg_puts(&c->s, "    (void)i0; (void)pv;\n}\n\n");
    emit_bulk(c, &bp, outs, n_outs);

    cg_puts(&c->s, "template <int VV, bool H, bool P, bool B>\n__device__ __forceinline__ void "
                   "kf_body(long long i0, const kf_hoist &hv, const kf_pre &pv, unsigned char *sb, "
                   "KF_PARAMS) {\n");
    cg_emit_loads(c, x, vec, "    ", hoist, pre);
    for (uint32_t o = 0; o < n_outs; o++)
        cg_printf(&c->s, "    %s o%u[VV];\n", cg_reg_type(outs[o].dtype), o);
    /* the pairs' loads (lm<p>: from pv when P, else here), which both of a
     * pair's nodes stand for */
    for (uint32_t p = 0; p < np; p++) {
        int pp = c->param[pairs[p].a];
        kf_dtype pd = c->k->params[pp].dtype;
        size_t z = kf_dtype_size(pd);
        const char *st = cg_storage_type(pd);
        cg_printf(&c->s, "    %s lm%u[VV];\n", cg_reg_type(g->expr[pairs[p].a].dtype), p);
        if (unroll > 1)
            cg_printf(&c->s,
                      "    if (P) {\n#pragma unroll\n        for (int k = 0; k < VV; k++)\n"
                      "            lm%u[k] = kf_cvt(reinterpret_cast<const %s *>(pv.m%u.b)[k]);\n"
                      "    } else ",
                      p, st, p);
        else
            cg_puts(&c->s, "    ");
        cg_printf(&c->s,
                  "{\n        long long m[VV];\n"
                  "        if (kf_pair%u<VV>(i0, m) && kf_aligned(p%d + m[0], VV * %zu < 16 ? VV * "
                  "%zu : 16))\n"
                  "            kf_ldv<VV>(p%d + m[0], lm%u);\n"
                  "        else {\n#pragma unroll\n"
                  "            for (int k = 0; k < VV; k++)\n"
                  "                lm%u[k] = kf_ld(p%d + m[k]);\n        }\n    }\n",
                  p, pp, z, z, pp, p, p, pp);
        snprintf(c->ov[pairs[p].a], OV_MAX, "lm%u[k]", p);
        snprintf(c->ov[pairs[p].b], OV_MAX, "lm%u[k]", p);
    }
    /* the other remapped loads (slices, concats, gathers) as vectors where
     * their elements run consecutively (cg_emit_remap_vector) */
    c->kvary = kv;
    cg_emit_nodes(c, cg_coord_of, x, "    ", true);
    c->kvary = NULL;
    if (kv)
        kf_mem_free(c->mem, kv, c->n ? c->n : 1);
    kf_mem_free(c->mem, scratch, (c->n ? c->n : 1) * sizeof *scratch);
    cg_puts(&c->s, "#pragma unroll\n    for (int k = 0; k < VV; k++) {\n");
    for (uint32_t o = 0; o < n_outs; o++)
        cg_printf(&c->s, "        o%u[k] = (%s)v%u%s[k];\n", o, cg_reg_type(outs[o].dtype),
                  outs[o].node, cg_raw_of(c, outs[o].node, true) ? "u" : "");
    cg_puts(&c->s, "    }\n    (void)hv; (void)pv; (void)sb;\n");
    kf_mem_free(c->mem, hoist, (c->n ? c->n : 1) * sizeof *hoist);
    kf_mem_free(c->mem, pre, (c->n ? c->n : 1) * sizeof *pre);
    for (uint32_t o = 0; o < n_outs; o++) {
        const kf_tensor *t = cg_tensor(c, outs[o].tensor);
        if (kf_ir_numel(t) == n) {
            /* a bf16 result already exact stores without conversions (a
             * rounded op's unrounded value, cg_raw_of, with one cvt per two) */
            bool x16 = outs[o].dtype == KF_DTYPE_BF16 && cg_exact_bf16(c, outs[o].node) &&
                       !cg_raw_of(c, outs[o].node, true);
            if (bp.e > 0) /* B: into the stage, at the element's place in the chunk */
                cg_printf(
                    &c->s,
                    "    kf_stv%s<VV>(B ? reinterpret_cast<%s *>(sb + %u) + (i0 & (KF_BULK_E - 1)) "
                    ": p%d + i0, o%u);\n",
                    x16 ? "_bf16x" : "", cg_storage_type(outs[o].dtype), bp.out_off[o],
                    outs[o].param, o);
            else
                cg_printf(&c->s, "    kf_stv%s<VV>(p%d + i0, o%u);\n", x16 ? "_bf16x" : "",
                          outs[o].param, o);
            continue;
        }
        /* vec == 1 here. */
        int64_t s[KF_MAX_RANK];
        kf_ir_broadcast_strides(t, rank, s);
        cg_puts(&c->s, "    if (true");
        for (int d = 0; d < rank; d++) {
            if (s[d] == 0 && dims[d] != 1)
                cg_printf(&c->s, " && %s == 0", x->coord[sp][d]);
        }
        cg_printf(&c->s, ")\n        kf_st(p%d + (0", outs[o].param);
        for (int d = 0; d < rank; d++) {
            if (s[d] != 0 && dims[d] != 1)
                cg_printf(&c->s, " + %s * %" PRId64 "LL", x->coord[sp][d], s[d]);
        }
        cg_printf(&c->s, "), o%u[0]);\n", o);
    }
    cg_puts(&c->s, "}\n\n");
    kf_mem_free(c->mem, x, sizeof *x);
    cg_puts(&c->s, kf_cuda_tpl_elementwise);
    return c->st;
}
