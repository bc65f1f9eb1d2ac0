/*
 * cg_access.c -- how a kernel reads its operands: the params of the loads,
 * the strides of each load in its space, how it is read in a chunk of VV
 * elements along the last axis (a vector, a broadcast or a gather), the
 * vector width, the coordinates and offsets of a chunk, the loads themselves
 * and the alignment conditions of the vector path (kf_vec_ok).
 *
 * Offsets: the problem size is compiled in, so the coordinates of an element
 * come from its linear index by division and remainder by constants (multiply
 * and shift, no hardware divide; in 32 bits where the space allows); an
 * operand laid out contiguously over the space uses the linear index itself
 * and needs no coordinates at all.
 *
 * Remapped loads (a slice, concat or gather read through) in the elementwise
 * kernel: where the index of a chunk's elements can only step by 0 or 1 from
 * one to the next (cg_kvary_fill), a run-time test of its first and last
 * element picks one vector load (consecutive, aligned), one load (all the
 * same element) or the loads element by element (cg_emit_remap_vector).
 * rotate_half's concat on q's head view read its two halves element by
 * element before: 16 scalar loads and their 64-bit index arithmetic per 8
 * elements, 0.108 ms against a 56 us floor for LLaMA's B8 H32 S2048 D128
 * (H200, 1fb612a).
 */
#include "codegen/cuda/cg.h"

/* ------------------------------------------------------------------------ */
/* Accesses                                                                   */
/* ------------------------------------------------------------------------ */

void cg_space_dims(const kf_group *g, kf_space sp, int *rank, const int64_t **dims) {
    *rank = sp == KF_SPACE_ROW ? g->row_rank : g->rank;
    *dims = sp == KF_SPACE_ROW ? g->row_dims : g->dims;
}

static void contig_strides(int rank, const int64_t *dims, int64_t *s) {
    int64_t acc = 1;
    for (int i = rank - 1; i >= 0; i--) {
        s[i] = acc;
        acc *= dims[i];
    }
}

bool cg_strides_contig(int rank, const int64_t *dims, const int64_t *s) {
    int64_t cs[KF_MAX_RANK];
    contig_strides(rank, dims, cs);
    for (int d = 0; d < rank; d++) {
        if (dims[d] != 1 && s[d] != cs[d])
            return false;
    }
    return true;
}

int64_t cg_numel_of(int rank, const int64_t *dims) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= dims[d];
    return n;
}

acc_class cg_classify(int rank, const int64_t *dims, const int64_t *s, uint32_t vec) {
    if (rank == 0 || dims[rank - 1] == 1)
        return ACC_BCAST;
    int64_t last = s[rank - 1];
    if (last == 0)
        return ACC_BCAST;
    if (last != 1)
        return ACC_GATHER;
    for (int d = 0; d < rank - 1; d++) {
        if (dims[d] != 1 && s[d] % (int64_t)vec != 0)
            return ACC_GATHER;
    }
    return ACC_VECTOR;
}

/* The strides of a LOAD / ACC / SCORE node in its space. */
void cg_node_strides(const cg *c, uint32_t i, int64_t *s) {
    const kf_expr *e = &c->g->expr[i];
    int rank;
    const int64_t *dims;
    cg_space_dims(c->g, e->space, &rank, &dims);
    if (e->kind == KF_EXPR_LOAD)
        memcpy(s, e->strides, sizeof(int64_t) * KF_MAX_RANK);
    else if (e->kind == KF_EXPR_ACC && c->g->gemm.head_dim)
        cg_head_acc_strides(c->g, s);
    else
        contig_strides(rank, dims, s);
}

void cg_head_acc_strides(const kf_group *g, int64_t *s) {
    /* the product [batch..., M, N] row-major, read over its head view
     * [batch..., M, H, D] ([batch..., H, M, D] when heads_first) */
    const kf_gemm_info *gm = &g->gemm;
    int r = g->rank;
    memset(s, 0, sizeof(int64_t) * KF_MAX_RANK);
    s[r - 1] = 1;
    s[gm->heads_first ? r - 3 : r - 2] = gm->head_dim;
    s[gm->heads_first ? r - 2 : r - 3] = gm->n;
    int64_t inner = gm->m * gm->n;
    for (int d = r - 4; d >= 0; d--) {
        s[d] = g->dims[d] == 1 ? 0 : inner;
        inner *= g->dims[d];
    }
}

/* Registers the params of every load among the needed nodes. */
void cg_load_params(cg *c) {
    const kf_group *g = c->g;
    for (uint32_t i = 0; i < c->n; i++) {
        const kf_expr *e = &g->expr[i];
        if (!c->need[i] || c->ov[i][0])
            continue;
        if (e->kind == KF_EXPR_LOAD) {
            c->param[i] = cg_param_add(c, KF_CUDA_PARAM_IN, e->base, cg_tensor(c, e->base)->dtype,
                                       cg_tensor_bytes(c, e->base));
        } else if (e->kind == KF_EXPR_ACC) {
            uint32_t t = g->gemm.anchor[e->anchor == 1 ? 1 : 0];
            c->param[i] = cg_param_add(c, KF_CUDA_PARAM_ACC, t, cg_tensor(c, t)->dtype,
                                       cg_tensor_bytes(c, t));
        } else if (e->kind == KF_EXPR_SCORE) {
            uint32_t t = g->attn.qk;
            c->param[i] = cg_param_add(c, KF_CUDA_PARAM_SCORES, t, cg_tensor(c, t)->dtype,
                                       cg_tensor_bytes(c, t));
        } else if (e->kind == KF_EXPR_OP && e->clamp_report) {
            c->param[i] = cg_param_add(c, KF_CUDA_PARAM_FLAGS, KF_NONE, KF_DTYPE_I32, 4);
        }
    }
}

bool cg_is_load(const kf_expr *e) {
    return (e->kind == KF_EXPR_LOAD && !cg_is_remapped_load(e)) ||
           (e->kind == KF_EXPR_ACC && e->src[0] == KF_NONE) ||
           e->kind == KF_EXPR_SCORE;
}

bool cg_is_remapped_load(const kf_expr *e) {
    return e->kind == KF_EXPR_LOAD && (e->offset != 0 || e->src[0] != KF_NONE);
}

/* Smallest element size among the contiguous-along-last loads of space sp. */
size_t cg_min_vec_size(const cg *c, kf_space sp, size_t start) {
    size_t m = start;
    for (uint32_t i = 0; i < c->n; i++) {
        const kf_expr *e = &c->g->expr[i];
        if (!c->need[i] || c->ov[i][0] || !cg_is_load(e) || e->space != sp)
            continue;
        int rank;
        const int64_t *dims;
        cg_space_dims(c->g, sp, &rank, &dims);
        int64_t s[KF_MAX_RANK];
        cg_node_strides(c, i, s);
        if (cg_classify(rank, dims, s, 1) == ACC_VECTOR) {
            size_t z = kf_dtype_size(c->k->params[c->param[i]].dtype);
            if (z < m)
                m = z;
        }
    }
    return m;
}

uint32_t cg_vec_for(size_t min_size, int64_t last_dim, bool tail_ok) {
    uint32_t v = (uint32_t)(16 / (min_size ? min_size : 16));
    if (v > 8)
        v = 8;
    if (v < 1)
        v = 1;
    while (v > 1 && !tail_ok && last_dim % v != 0)
        v /= 2;
    return v;
}

/* ------------------------------------------------------------------------ */
/* Chunks: coordinates, offsets, loads                                        */
/* ------------------------------------------------------------------------ */

const char *cg_coord_of(void *user, kf_space sp, int axis) {
    chunk_ctx *x = user;
    int rank = x->vrank[sp];
    if (rank > 0 && axis == rank - 1) {
        snprintf(x->kcoord, sizeof x->kcoord, "%s + k", x->coord[sp][axis]);
        return x->kcoord;
    }
    return x->coord[sp][axis];
}

/* The offset of a node's first chunk element, into buf. */
void cg_offset_str(const cg *c, const chunk_ctx *x, uint32_t i, char *buf, size_t size) {
    const kf_expr *e = &c->g->expr[i];
    int rank;
    const int64_t *dims;
    cg_space_dims(c->g, e->space, &rank, &dims);
    int64_t s[KF_MAX_RANK];
    cg_node_strides(c, i, s);
    if (cg_strides_contig(rank, dims, s)) {
        snprintf(buf, size, "%s", x->lin[e->space]);
        return;
    }
    size_t n = 0;
    buf[0] = 0;
    for (int d = 0; d < rank && n < size; d++) {
        if (s[d] == 0 || dims[d] == 1)
            continue;
        int w = snprintf(buf + n, size - n, "%s%s * %" PRId64 "LL", n ? " + " : "",
                         x->coord[e->space][d], s[d]);
        n += w > 0 ? (size_t)w : 0;
    }
    if (!buf[0])
        snprintf(buf, size, "0");
}

/* Emits the loads of the needed nodes in space-filter `sp` (all spaces if
 * sp == KF_SPACE_COUNT) before the k loop (vectors, broadcasts) and fills the
 * overrides (arrays, scalars, per-element gathers). Returns the alignment
 * conditions through `ok` (param index -> bytes). */
void cg_emit_loads(cg *c, chunk_ctx *x, uint32_t vec, const char *ind, const bool *hoist,
                   const bool *pre) {
    const kf_group *g = c->g;
    for (uint32_t i = 0; i < c->n; i++) {
        const kf_expr *e = &g->expr[i];
        if (!c->need[i] || c->ov[i][0] || !cg_is_load(e))
            continue;
        int rank;
        const int64_t *dims;
        cg_space_dims(g, e->space, &rank, &dims);
        int64_t s[KF_MAX_RANK];
        cg_node_strides(c, i, s);
        char off[OV_MAX - 64];
        cg_offset_str(c, x, i, off, sizeof off);
        int p = c->param[i];
        acc_class cl = x->vrank[e->space] > 0 ? cg_classify(rank, dims, s, vec) : ACC_BCAST;
        const char *rt = cg_reg_type(c->k->params[p].dtype);
        bool h = hoist && hoist[i];
        if (cl == ACC_VECTOR && c->staged && c->soff[i] >= 0) {
            /* Staged: the stage holds the row from element 0, so element j0 is
             * j0 * size bytes in. */
            size_t z = kf_dtype_size(c->k->params[p].dtype);
            cg_printf(&c->s,
                      "%s%s l%u[VV];\n%sif (STG)\n%s    kf_lds<VV, %s>(sb + %" PRId64
                      "u + (unsigned)j0 * %zuu, l%u);\n"
                      "%selse\n%s    kf_ldv<VV>(p%d + (%s), l%u);\n",
                      ind, rt, i, ind, ind, cg_storage_type(c->k->params[p].dtype), c->soff[i], z,
                      i, ind, ind, p, off, i);
            snprintf(c->ov[i], OV_MAX, "l%u[k]", i);
        } else if (cl == ACC_VECTOR) {
            cg_printf(&c->s, "%s%s l%u[VV];\n", ind, rt, i);
            /* a hoisted (H: hv) or streamed (P: pv) operand's raw vector when
             * the caller has it, else the load */
            if (h || (pre && pre[i]))
                cg_printf(&c->s,
                          "%sif (%s) {\n#pragma unroll\n%s    for (int k = 0; k < VV; k++)\n"
                          "%s        l%u[k] = kf_cvt(reinterpret_cast<const %s *>(%s.l%u.b)[k]);\n"
                          "%s} else\n    ",
                          ind, h ? "H" : "P", ind, ind, i, cg_storage_type(c->k->params[p].dtype),
                          h ? "hv" : "pv", i, ind);
            cg_printf(&c->s, "%skf_ldv<VV>(p%d + (%s), l%u);\n", ind, p, off, i);
            snprintf(c->ov[i], OV_MAX, "l%u[k]", i);
        } else if (cl == ACC_BCAST) {
            if (h)
                cg_printf(&c->s, "%sconst %s l%u = H ? hv.l%u : kf_ld(p%d + (%s));\n", ind, rt, i,
                          i, p, off);
            else
                cg_printf(&c->s, "%sconst %s l%u = kf_ld(p%d + (%s));\n", ind, rt, i, p, off);
            snprintf(c->ov[i], OV_MAX, "l%u", i);
        } else {
            snprintf(c->ov[i], OV_MAX, "kf_ld(p%d + (%s) + k * %" PRId64 "LL)", p, off,
                     s[rank - 1]);
        }
    }
}

/* kf_vec_ok's conditions for the vector loads among the needed nodes (and the
 * `extra` params, written contiguously), appended to *cond. */
void cg_vec_conditions(cg *c, const chunk_ctx *x, uint32_t vec, sbuf *cond) {
    for (uint32_t i = 0; i < c->n; i++) {
        const kf_expr *e = &c->g->expr[i];
        if (!c->need[i] || c->ov[i][0] || !cg_is_load(e) || x->vrank[e->space] <= 0)
            continue;
        int rank;
        const int64_t *dims;
        cg_space_dims(c->g, e->space, &rank, &dims);
        int64_t s[KF_MAX_RANK];
        cg_node_strides(c, i, s);
        if (cg_classify(rank, dims, s, vec) != ACC_VECTOR)
            continue;
        int p = c->param[i];
        size_t bytes = vec * kf_dtype_size(c->k->params[p].dtype);
        if (c->soff[i] >= 0)
            bytes = 16; /* staged: cp.async copies 16-byte pieces */
        cg_printf(cond, " && kf_aligned(p%d, %zu)", p, bytes > 16 ? (size_t)16 : bytes);
    }
}

void cg_coords_linear(chunk_ctx *x, kf_space sp, int rank, const int64_t *dims,
                      const char *linear) {
    int64_t inner = 1;
    for (int d = rank - 1; d >= 0; d--) {
        if (d == 0)
            snprintf(x->coord[sp][d], sizeof x->coord[sp][d], "(%s) / %" PRId64 "LL", linear,
                     inner);
        else if (inner == 1)
            snprintf(x->coord[sp][d], sizeof x->coord[sp][d], "(%s) %% %" PRId64 "LL", linear,
                     dims[d]);
        else
            snprintf(x->coord[sp][d], sizeof x->coord[sp][d],
                     "(%s) / %" PRId64 "LL %% %" PRId64 "LL", linear, inner, dims[d]);
        inner *= dims[d];
    }
    snprintf(x->lin[sp], sizeof x->lin[sp], "%s", linear);
}

void cg_coords_linear_u32(chunk_ctx *x, kf_space sp, int rank, const int64_t *dims,
                          const char *linear) {
    int64_t inner = 1;
    for (int d = rank - 1; d >= 0; d--) {
        if (d == 0)
            snprintf(x->coord[sp][d], sizeof x->coord[sp][d], "(unsigned)(%s) / %" PRId64 "u",
                     linear, inner);
        else if (inner == 1)
            snprintf(x->coord[sp][d], sizeof x->coord[sp][d], "(unsigned)(%s) %% %" PRId64 "u",
                     linear, dims[d]);
        else
            snprintf(x->coord[sp][d], sizeof x->coord[sp][d],
                     "(unsigned)(%s) / %" PRId64 "u %% %" PRId64 "u", linear, inner, dims[d]);
        inner *= dims[d];
    }
    snprintf(x->lin[sp], sizeof x->lin[sp], "%s", linear);
}

/* ------------------------------------------------------------------------ */
/* Remapped loads as vectors                                                  */
/* ------------------------------------------------------------------------ */

/* Why KV_STEP is closed under what it admits: f and g non-decreasing by 0 or
 * 1 per element, and c fixed: f + c, f - c, min(f, g), max(f, g), min(f, c),
 * max(f, c) and a where on a fixed condition are again; so is a saturating
 * i32 add (a clamp of a KV_STEP value is one). Then over a chunk of VV
 * elements, f(VV - 1) - f(0) == VV - 1 holds exactly when every step is 1
 * (consecutive elements), and f(VV - 1) == f(0) exactly when every step is 0
 * (one element): what cg_emit_remap_vector tests at run time. A concat's
 * halves (where(j < n, a[min(j, n - 1)], b[max(j - n, 0)])) are such: on the
 * side a chunk takes, its index runs consecutively, on the other it is held
 * at the clamp. */
void cg_kvary_fill(const cg *c, kf_space sp, uint8_t *kv) {
    const kf_group *g = c->g;
    int rank;
    const int64_t *dims;
    cg_space_dims(g, sp, &rank, &dims);
    for (uint32_t i = 0; i < c->n; i++) {
        const kf_expr *e = &g->expr[i];
        kv[i] = KV_ANY;
        if (e->kind == KF_EXPR_CONST) {
            kv[i] = KV_FIXED;
            continue;
        }
        if (e->space != sp || rank < 1)
            continue;
        bool last_moves = dims[rank - 1] != 1;
        if (e->kind == KF_EXPR_INDEX) {
            kv[i] = e->axis == rank - 1 && last_moves
                        ? (e->dtype == KF_DTYPE_I32 ? KV_STEP : KV_ANY)
                        : KV_FIXED;
        } else if (e->kind == KF_EXPR_LOAD) {
            bool fixed = !last_moves || e->strides[rank - 1] == 0;
            for (int j = 0; j < 3 && fixed && e->src[j] != KF_NONE; j++)
                fixed = kv[e->src[j]] == KV_FIXED;
            kv[i] = fixed ? KV_FIXED : KV_ANY;
        } else if (e->kind == KF_EXPR_OP) {
            int n = 0, step = 0, any = 0;
            for (int j = 0; j < 3 && e->src[j] != KF_NONE; j++, n++) {
                step += kv[e->src[j]] == KV_STEP;
                any += kv[e->src[j]] == KV_ANY;
            }
            if (any == 0 && step == 0) {
                kv[i] = KV_FIXED;
                continue;
            }
            if (any > 0 || e->dtype != KF_DTYPE_I32)
                continue;
            switch (e->op) {
            case KF_OP_ADD:
                kv[i] = step == 1 ? KV_STEP : KV_ANY;
                break;
            case KF_OP_SUB:
                kv[i] = kv[e->src[1]] == KV_FIXED ? KV_STEP : KV_ANY;
                break;
            case KF_OP_MIN:
            case KF_OP_MAX:
                kv[i] = KV_STEP;
                break;
            case KF_OP_WHERE:
                kv[i] = kv[e->src[0]] == KV_FIXED ? KV_STEP : KV_ANY;
                break;
            case KF_OP_CAST:
                kv[i] = g->expr[e->src[0]].dtype == KF_DTYPE_I32 ? KV_STEP : KV_ANY;
                break;
            default:
                break;
            }
        }
    }
}

/* The one term of the offset that moves along the chunk: the last axis's
 * own coordinate at stride 1 (a slice), or a KV_STEP coordinate node at
 * stride 1 (a concat's half, a gather along the last axis); none: every
 * element reads the same one. */
bool cg_remap_step(const kf_expr *e, const uint8_t *kv, int rank, const int64_t *dims, bool *stat,
                   int *dyn) {
    const int last = rank - 1;
    *stat = dims[last] != 1 && e->strides[last] != 0;
    *dyn = -1;
    if (*stat && e->strides[last] != 1)
        return false;
    for (int j = 0; j < 3 && e->src[j] != KF_NONE; j++) {
        if (kv[e->src[j]] == KV_FIXED)
            continue;
        if (kv[e->src[j]] != KV_STEP || *stat || *dyn >= 0 || e->dyn_strides[j] != 1)
            return false;
        *dyn = j;
    }
    return true;
}

bool cg_emit_remap_vector(cg *c, void *user, uint32_t i, const char *ind) {
    const kf_group *g = c->g;
    const kf_expr *e = &g->expr[i];
    const chunk_ctx *x = user;
    if (!c->kvary || e->kind != KF_EXPR_LOAD || !cg_is_remapped_load(e) || c->ov[i][0] ||
        c->param[i] < 0)
        return false;
    int rank;
    const int64_t *dims;
    cg_space_dims(g, e->space, &rank, &dims);
    if (rank < 1 || x->vrank[e->space] != rank)
        return false;
    bool stat;
    int dyn;
    if (!cg_remap_step(e, c->kvary, rank, dims, &stat, &dyn))
        return false;
    int p = c->param[i];
    kf_dtype pd = c->k->params[p].dtype;
    const char *rt = cg_reg_type(e->dtype), *st = cg_storage_type(pd);
    size_t z = kf_dtype_size(pd);
    /* q: the address of element 0 (coordinates at k = 0, nodes' element 0) */
    cg_printf(&c->s, "%s%s v%u[VV];\n%s{\n%s    const %s *q%u = p%d + (%" PRId64 "LL", ind, rt, i,
              ind, ind, st, i, p, e->offset);
    for (int d = 0; d < rank; d++)
        if (e->strides[d] != 0 && dims[d] != 1)
            cg_printf(&c->s, " + (long long)(%s) * %" PRId64 "LL", x->coord[e->space][d],
                      e->strides[d]);
    for (int j = 0; j < 3 && e->src[j] != KF_NONE; j++)
        cg_printf(&c->s, " + (long long)v%u[0] * %" PRId64 "LL", e->src[j], e->dyn_strides[j]);
    cg_puts(&c->s, ");\n");
    if (stat || dyn >= 0) {
        /* consecutive and aligned: one vector; one element (dyn only): one
         * load; else element by element */
        char consec[64] = "", step[48] = "k";
        if (dyn >= 0) {
            snprintf(consec, sizeof consec, "v%u[VV - 1] - v%u[0] == VV - 1 && ", e->src[dyn],
                     e->src[dyn]);
            snprintf(step, sizeof step, "(v%u[k] - v%u[0])", e->src[dyn], e->src[dyn]);
        }
        cg_printf(&c->s,
                  "%s    if (%skf_aligned(q%u, VV * %zu < 16 ? VV * %zu : 16)) {\n"
                  "%s        kf_ldv<VV>(q%u, v%u);\n",
                  ind, consec, i, z, z, ind, i, i);
        if (dyn >= 0)
            cg_printf(&c->s,
                      "%s    } else if (v%u[VV - 1] == v%u[0]) {\n"
                      "%s        const %s t = kf_ld(q%u);\n"
                      "#pragma unroll\n%s        for (int k = 0; k < VV; k++)\n"
                      "%s            v%u[k] = t;\n",
                      ind, e->src[dyn], e->src[dyn], ind, rt, i, ind, ind, i);
        cg_printf(&c->s,
                  "%s    } else {\n#pragma unroll\n%s        for (int k = 0; k < VV; k++)\n"
                  "%s            v%u[k] = kf_ld(q%u + %s);\n%s    }\n",
                  ind, ind, ind, i, i, step, ind);
    } else {
        cg_printf(&c->s,
                  "%s    const %s t = kf_ld(q%u);\n#pragma unroll\n%s    for (int k = 0; k < VV; "
                  "k++)\n%s        v%u[k] = t;\n",
                  ind, rt, i, ind, ind, i);
    }
    cg_printf(&c->s, "%s}\n", ind);
    return true;
}
