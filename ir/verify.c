/*
 * verify.c -- kf_ir_verify: re-derives every tensor's shape and dtype with the
 * same rules the builder used (kf_ir_infer) and checks the structural
 * invariants every later pass relies on:
 *   1. nodes[i]->id == i and every operand comes earlier (topological order);
 *   2. operands belong to this graph, and n_uses counts them exactly;
 *   3. dtype, shape and normalized attributes equal what inference gives;
 *   4. inputs are exactly the input tensors, in order, each named; names are
 *      unique identifiers; constants carry data;
 *   5. there is at least one output; output names are unique identifiers.
 * A violation is a note (not sticky) naming the tensor, its op and what broke.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static kf_node_args args_of(const kf_tensor *t) {
    kf_node_args a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < t->nsrc && i < 3; i++)
        a.src[i] = t->src[i];
    a.dtype = t->op == KF_OP_CAST ? t->attr.to : t->dtype;
    a.rank = t->rank;
    memcpy(a.dims, t->dims, sizeof a.dims);
    a.axis = t->attr.axis;
    a.keepdim = t->attr.keepdim;
    a.transpose_a = t->attr.transpose_a;
    a.transpose_b = t->attr.transpose_b;
    a.eps = t->attr.eps;
    a.lo = t->attr.lo;
    a.hi = t->attr.hi;
    memcpy(a.perm, t->attr.perm, sizeof a.perm);
    if (t->op == KF_OP_SLICE) {
        a.start = t->attr.start;
        a.step = t->attr.step;
        a.stop = t->attr.start + t->attr.step * (t->dims[t->attr.axis] - 1) + 1;
    }
    a.times = t->attr.times;
    a.name = t->name;
    a.data = t->data;
    return a;
}

static bool same_attrs(const kf_tensor *t, const kf_attrs *want) {
    const kf_attrs *h = &t->attr;
    switch (kf_op_get(t->op)->form) {
    case KF_FORM_IOTA:
    case KF_FORM_SOFTMAX:
    case KF_FORM_CONCAT:
    case KF_FORM_GATHER:
        return h->axis == want->axis;
    case KF_FORM_SLICE:
        return h->axis == want->axis && h->start == want->start && h->step == want->step;
    case KF_FORM_REPEAT:
        return h->axis == want->axis && h->times == want->times;
    case KF_FORM_REDUCE:
        return h->axis == want->axis && h->keepdim == want->keepdim;
    case KF_FORM_LAYER_NORM:
    case KF_FORM_RMS_NORM:
        return h->axis == want->axis && h->eps == want->eps;
    case KF_FORM_MATMUL:
        return h->transpose_a == want->transpose_a && h->transpose_b == want->transpose_b;
    case KF_FORM_CAST:
        return h->to == want->to;
    case KF_FORM_CLAMP: /* bits, so that a NaN bound never compares equal */
        return memcmp(&h->lo, &want->lo, sizeof h->lo) == 0 &&
               memcmp(&h->hi, &want->hi, sizeof h->hi) == 0;
    case KF_FORM_PERMUTE:
        return memcmp(h->perm, want->perm, sizeof(int) * (size_t)t->rank) == 0;
    default:
        return true;
    }
}

static kf_status check_node(kf_graph *g, uint32_t i, uint32_t *uses, uint32_t *n_inputs) {
    kf_tensor *t = g->nodes[i];
    char tb[160], wb[160], err[KF_MSG_MAX];
    if (!t || t->graph != g || t->id != i)
        return kf_ir_note(g, KF_ERR_VERIFY, "verify: node %u is missing or misnumbered", i);
    if ((unsigned)t->op >= KF_OP_COUNT)
        return kf_ir_note(g, KF_ERR_VERIFY, "verify: tensor %%%u has op %d, not a kf_op", i,
                          (int)t->op);
    const kf_op_info *info = kf_op_get(t->op);
    if (t->nsrc != kf_form_arity(info->form))
        return kf_ir_note(g, KF_ERR_VERIFY, "verify: tensor %%%u (%s) has %d operands, %s takes %d",
                          i, info->name, t->nsrc, info->name, kf_form_arity(info->form));
    for (int s = 0; s < t->nsrc; s++) {
        const kf_tensor *src = t->src[s];
        if (!src || src->graph != g || src->id >= i || g->nodes[src->id] != src)
            return kf_ir_note(g, KF_ERR_VERIFY,
                              "verify: tensor %%%u (%s) operand %d is not an earlier tensor of "
                              "this graph",
                              i, info->name, s);
        uses[src->id]++;
    }
    kf_node_args a = args_of(t);
    kf_inferred want;
    kf_status st = kf_ir_infer(t->op, &a, &want, err);
    if (st != KF_OK)
        return kf_ir_note(g, KF_ERR_VERIFY, "verify: tensor %%%u: %s", i, err);
    kf_tensor w = {.dtype = want.dtype, .rank = want.rank};
    memcpy(w.dims, want.dims, sizeof w.dims);
    if (t->dtype != want.dtype || t->rank != want.rank ||
        memcmp(t->dims, want.dims, sizeof(int64_t) * (size_t)t->rank) != 0)
        return kf_ir_note(g, KF_ERR_VERIFY, "verify: tensor %%%u (%s) is %s but its operands give %s",
                          i, info->name, kf_ir_type_str(t, tb, sizeof tb),
                          kf_ir_type_str(&w, wb, sizeof wb));
    if (!same_attrs(t, &want.attr))
        return kf_ir_note(g, KF_ERR_VERIFY,
                          "verify: tensor %%%u (%s) has attributes that are not normalized", i,
                          info->name);
    if (t->op == KF_OP_CONST && !t->data)
        return kf_ir_note(g, KF_ERR_VERIFY, "verify: constant %%%u has no data", i);
    if (t->op == KF_OP_INPUT) {
        if (*n_inputs >= g->n_inputs || g->inputs[*n_inputs] != t)
            return kf_ir_note(g, KF_ERR_VERIFY,
                              "verify: input '%s' is missing from the graph's input list",
                              t->name ? t->name : "?");
        (*n_inputs)++;
    }
    if (t->name) {
        if (!kf_ir_is_identifier(t->name, strlen(t->name)))
            return kf_ir_note(g, KF_ERR_VERIFY, "verify: tensor %%%u has the bad name '%.64s'", i,
                              t->name);
    }
    return KF_OK;
}

/* The first of n names (NULLs skipped) equal to an earlier one, or NULL; in
 * linear time through a hash set of indices (a graph of 20,000 named tensors
 * or outputs verifies in milliseconds). *oom is set when the set could not be
 * allocated. */
static const char *first_duplicate(const kf_mem *m, const char *const *names, uint32_t n,
                                   bool *oom) {
    *oom = false;
    size_t cap = 16;
    while (cap < 2 * (size_t)n)
        cap <<= 1;
    uint32_t *set = kf_mem_alloc(m, cap * sizeof *set);
    if (!set) {
        *oom = true;
        return NULL;
    }
    memset(set, 0xff, cap * sizeof *set);
    const char *dup = NULL;
    for (uint32_t i = 0; i < n && !dup; i++) {
        if (!names[i])
            continue;
        uint64_t h = 1469598103934665603ull; /* FNV-1a */
        for (const char *c = names[i]; *c; c++)
            h = (h ^ (unsigned char)*c) * 1099511628211ull;
        size_t slot = (size_t)h & (cap - 1);
        while (set[slot] != UINT32_MAX && strcmp(names[set[slot]], names[i]) != 0)
            slot = (slot + 1) & (cap - 1);
        if (set[slot] != UINT32_MAX)
            dup = names[i];
        else
            set[slot] = i;
    }
    kf_mem_free(m, set, cap * sizeof *set);
    return dup;
}

/* Rules 4 and 5's uniqueness: no name names two tensors, no output name
 * appears twice. */
static kf_status check_names(kf_graph *g) {
    uint32_t n = g->n_nodes > g->n_outputs ? g->n_nodes : g->n_outputs;
    const char **names = kf_mem_alloc(&g->mem, (n ? n : 1) * sizeof *names);
    if (!names)
        return kf_ir_note(g, KF_ERR_OUT_OF_MEMORY, "verify: out of memory");
    bool oom = false;
    for (uint32_t i = 0; i < g->n_nodes; i++)
        names[i] = g->nodes[i]->name;
    const char *dup = first_duplicate(&g->mem, names, g->n_nodes, &oom);
    kf_status st = KF_OK;
    if (dup)
        st = kf_ir_note(g, KF_ERR_VERIFY, "verify: the name '%s' names two tensors", dup);
    if (st == KF_OK && !oom) {
        for (uint32_t i = 0; i < g->n_outputs; i++)
            names[i] = g->outputs[i].name;
        dup = first_duplicate(&g->mem, names, g->n_outputs, &oom);
        if (dup)
            st = kf_ir_note(g, KF_ERR_VERIFY, "verify: output name '%s' appears twice", dup);
    }
    kf_mem_free(&g->mem, names, (n ? n : 1) * sizeof *names);
    if (st == KF_OK && oom)
        st = kf_ir_note(g, KF_ERR_OUT_OF_MEMORY, "verify: out of memory");
    return st;
}

kf_status kf_ir_verify(kf_graph *g) {
    if (g->status != KF_OK)
        return g->status;
    uint32_t *uses = kf_mem_calloc(&g->mem, g->n_nodes ? g->n_nodes : 1, sizeof *uses);
    if (!uses)
        return kf_ir_note(g, KF_ERR_OUT_OF_MEMORY, "verify: out of memory");
    uint32_t n_inputs = 0;
    kf_status st = KF_OK;
    for (uint32_t i = 0; i < g->n_nodes && st == KF_OK; i++)
        st = check_node(g, i, uses, &n_inputs);
    for (uint32_t i = 0; i < g->n_nodes && st == KF_OK; i++)
        if (uses[i] != g->nodes[i]->n_uses)
            st = kf_ir_note(g, KF_ERR_VERIFY, "verify: tensor %%%u has %u uses but records %u", i,
                            uses[i], g->nodes[i]->n_uses);
    kf_mem_free(&g->mem, uses, (g->n_nodes ? g->n_nodes : 1) * sizeof *uses);
    if (st != KF_OK)
        return st;
    if (n_inputs != g->n_inputs)
        return kf_ir_note(g, KF_ERR_VERIFY, "verify: the input list has %u entries for %u inputs",
                          g->n_inputs, n_inputs);
    if (g->n_outputs == 0)
        return kf_ir_note(g, KF_ERR_VERIFY,
                          "verify: the graph has no outputs; mark at least one with kf_output");
    for (uint32_t i = 0; i < g->n_outputs; i++) {
        const kf_graph_output_slot *o = &g->outputs[i];
        if (!o->tensor || o->tensor->graph != g || !o->name)
            return kf_ir_note(g, KF_ERR_VERIFY, "verify: output %u is not a tensor of this graph",
                              i);
    }
    return check_names(g);
}
