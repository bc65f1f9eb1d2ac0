/*
 * cse.c -- common-subexpression elimination: the same op on the same operands
 * is computed once (issue 15, item 12).
 *
 * One sweep in creation (= topological) order numbers values: a tensor is
 * looked up in a hash table keyed on everything that decides its value (op,
 * dtype, shape, its operands' value numbers, the attributes its op reads, a
 * constant's bytes); a hit gives it the earlier tensor's number. Inputs are
 * never equal to anything but themselves (each is its own binding).
 *
 * Which equal tensors are FOLDED (their uses and output names moved to the
 * first one) is a cost decision: every one, except an elementwise tensor that
 * is not a graph output and whose first equal is not one either. Such a value
 * is fused into each consumer's kernel and recomputed there for free (a
 * prologue x * 2 + 1 in front of six row-wise kernels); folding it would give
 * it several consumers, which the planner materializes -- a kernel, a write
 * and six reads more. It still shares its value number, so its consumers fold
 * when they are equal (softmax(exp(x)) built twice: one softmax). A folded
 * tensor stays in the graph with no uses; the planner, which plans only what
 * the outputs need, never sees it. The sweep is linear in the graph's size.
 */
#include <string.h>

#include "ir/ir.h"

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0xBF58476D1CE4E5B9ull;
}

static size_t const_bytes(const kf_tensor *t) {
    return (size_t)kf_ir_numel(t) * kf_dtype_size(t->dtype);
}

/* The hash of everything that decides t's value; vn: value numbers (the first
 * equal tensor) of the tensors before t. */
static uint64_t node_hash(const kf_tensor *t, kf_tensor *const *vn) {
    uint64_t h = mix(mix(mix(0, (uint64_t)t->op), (uint64_t)t->dtype), (uint64_t)t->rank);
    for (int i = 0; i < t->rank; i++)
        h = mix(h, (uint64_t)t->dims[i]);
    for (int k = 0; k < t->nsrc; k++)
        h = mix(h, vn[t->src[k]->id]->id);
    h = mix(h, (uint64_t)(int64_t)t->attr.axis);
    h = mix(h, (uint64_t)t->attr.start ^ ((uint64_t)t->attr.step << 32));
    h = mix(h, ((uint64_t)t->attr.keepdim << 2) | ((uint64_t)t->attr.transpose_a << 1) |
                   (uint64_t)t->attr.transpose_b);
    if (t->op == KF_OP_CONST && t->data) {
        const unsigned char *d = t->data;
        size_t n = const_bytes(t);
        for (size_t i = 0; i < n; i++)
            h = mix(h, d[i]);
    }
    return h;
}

/* Whether a and b have the same value (vn as for node_hash). */
static bool same_node(const kf_tensor *a, const kf_tensor *b, kf_tensor *const *vn) {
    if (a->op != b->op || a->dtype != b->dtype || a->rank != b->rank || a->nsrc != b->nsrc)
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i])
            return false;
    for (int k = 0; k < a->nsrc; k++)
        if (vn[a->src[k]->id] != vn[b->src[k]->id])
            return false;
    const kf_attrs *x = &a->attr, *y = &b->attr;
    if (x->axis != y->axis || x->keepdim != y->keepdim || x->transpose_a != y->transpose_a ||
        x->transpose_b != y->transpose_b || x->to != y->to ||
        memcmp(&x->eps, &y->eps, sizeof x->eps) != 0 ||
        memcmp(&x->lo, &y->lo, sizeof x->lo) != 0 || memcmp(&x->hi, &y->hi, sizeof x->hi) != 0 ||
        x->start != y->start || x->step != y->step)
        return false;
    for (int i = 0; i < KF_MAX_RANK; i++)
        if (x->perm[i] != y->perm[i])
            return false;
    if (a->op == KF_OP_CONST) {
        if (!a->data || !b->data)
            return a->data == b->data;
        return memcmp(a->data, b->data, const_bytes(a)) == 0;
    }
    return true;
}

static bool is_elementwise(const kf_tensor *t) {
    kf_form f = kf_op_get(t->op)->form;
    return f == KF_FORM_UNARY || f == KF_FORM_CAST || f == KF_FORM_BINARY || f == KF_FORM_WHERE;
}

kf_status kf_ir_cse(kf_graph *g, uint32_t *folded) {
    if (folded)
        *folded = 0;
    uint32_t n = g->n_nodes;
    if (n == 0)
        return KF_OK;
    size_t cap = 16;
    while (cap < 2 * (size_t)n)
        cap <<= 1;
    /* canon: what a use of the tensor names after folding; vn: its value number */
    kf_tensor **canon = kf_mem_calloc(&g->mem, n, sizeof *canon);
    kf_tensor **vn = kf_mem_calloc(&g->mem, n, sizeof *vn);
    kf_tensor **table = kf_mem_calloc(&g->mem, cap, sizeof *table);
    bool *is_out = kf_mem_calloc(&g->mem, n, sizeof *is_out);
    if (!canon || !vn || !table || !is_out) {
        kf_mem_free(&g->mem, canon, n * sizeof *canon);
        kf_mem_free(&g->mem, vn, n * sizeof *vn);
        kf_mem_free(&g->mem, table, cap * sizeof *table);
        kf_mem_free(&g->mem, is_out, n * sizeof *is_out);
        return kf_ir_note(g, KF_ERR_OUT_OF_MEMORY, "cse: out of memory for %u tensors", n);
    }
    for (uint32_t k = 0; k < g->n_outputs; k++)
        is_out[g->outputs[k].tensor->id] = true;
    uint32_t count = 0;
    for (uint32_t i = 0; i < n; i++) {
        kf_tensor *t = g->nodes[i];
        for (int k = 0; k < t->nsrc; k++) {
            kf_tensor *c = canon[t->src[k]->id];
            if (c != t->src[k]) {
                t->src[k]->n_uses--;
                c->n_uses++;
                t->src[k] = c;
            }
        }
        canon[i] = vn[i] = t;
        if (t->op == KF_OP_INPUT)
            continue;
        size_t slot = (size_t)node_hash(t, vn) & (cap - 1);
        while (table[slot] && !same_node(table[slot], t, vn))
            slot = (slot + 1) & (cap - 1);
        if (!table[slot]) {
            table[slot] = t;
            continue;
        }
        kf_tensor *first = table[slot];
        vn[i] = first;
        if (!is_elementwise(t) || is_out[i] || is_out[first->id]) {
            canon[i] = first;
            count++;
        }
    }
    for (uint32_t k = 0; k < g->n_outputs; k++)
        g->outputs[k].tensor = canon[g->outputs[k].tensor->id];
    kf_mem_free(&g->mem, canon, n * sizeof *canon);
    kf_mem_free(&g->mem, vn, n * sizeof *vn);
    kf_mem_free(&g->mem, table, cap * sizeof *table);
    kf_mem_free(&g->mem, is_out, n * sizeof *is_out);
    if (folded)
        *folded = count;
    return KF_OK;
}
