/*
 * graph.c -- the graph as a container: creation and destruction, the sticky
 * error and the non-sticky note, names, and the shape helpers every pass uses;
 * and the status strings (kf_status_str).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ir/ir.h"

/* kf_status_str is public but lives here, in the lowest module, so that the
 * planner and the runtime name statuses without linking the frontend. */
static const char *const status_names[KF_STATUS_COUNT] = {
    [KF_OK] = "ok",
    [KF_ERR_INVALID_ARGUMENT] = "invalid argument",
    [KF_ERR_SHAPE] = "shape mismatch",
    [KF_ERR_DTYPE] = "unsupported dtype",
    [KF_ERR_AXIS] = "axis out of range",
    [KF_ERR_OUT_OF_MEMORY] = "out of memory",
    [KF_ERR_PARSE] = "parse error",
    [KF_ERR_VERIFY] = "invalid graph",
    [KF_ERR_NOT_FOUND] = "not found",
    [KF_ERR_UNSUPPORTED] = "unsupported",
    [KF_ERR_IO] = "i/o error",
    [KF_ERR_INTERNAL] = "internal error",
    [KF_ERR_BUSY] = "busy",
};
_Static_assert(sizeof status_names / sizeof status_names[0] == KF_STATUS_COUNT,
               "every kf_status needs a name");

const char *kf_status_str(kf_status status) {
    if ((unsigned)status >= KF_STATUS_COUNT || !status_names[status])
        return "unknown status";
    return status_names[status];
}

const char *kf_ir_error(const kf_graph *g) { return g->status != KF_OK ? g->error : g->last; }

kf_graph *kf_ir_graph_create(const kf_allocator *alloc, kf_ctx *ctx) {
    kf_mem mem;
    kf_mem_resolve(&mem, alloc);
    kf_graph *g = kf_mem_alloc(&mem, sizeof *g);
    if (!g)
        return NULL;
    memset(g, 0, sizeof *g);
    g->ctx = ctx;
    g->mem = mem;
    kf_arena_init(&g->arena, &g->mem);
    return g;
}

void kf_ir_graph_destroy(kf_graph *g) {
    if (!g)
        return;
    kf_mem mem = g->mem;
    kf_arena_release(&g->arena);
    kf_mem_free(&mem, g->nodes, (size_t)g->cap_nodes * sizeof *g->nodes);
    kf_mem_free(&mem, g->inputs, (size_t)g->cap_inputs * sizeof *g->inputs);
    kf_mem_free(&mem, g->outputs, (size_t)g->cap_outputs * sizeof *g->outputs);
    kf_mem_free(&mem, g->out_set, (size_t)g->cap_out_set * sizeof *g->out_set);
    kf_mem_free(&mem, g->name_set, (size_t)g->cap_name_set * sizeof *g->name_set);
    kf_mem_free(&mem, g, sizeof *g);
}

kf_graph *kf_ir_graph_clone(const kf_graph *src) {
    kf_graph *g = kf_ir_graph_create(&src->mem, src->ctx);
    if (!g)
        return NULL;
    bool ok =
        kf_mem_grow(&g->mem, (void **)&g->nodes, &g->cap_nodes, src->n_nodes, sizeof *g->nodes) &&
        kf_mem_grow(&g->mem, (void **)&g->inputs, &g->cap_inputs, src->n_inputs,
                    sizeof *g->inputs) &&
        kf_mem_grow(&g->mem, (void **)&g->outputs, &g->cap_outputs, src->n_outputs,
                    sizeof *g->outputs);
    /* Nodes are in creation order, so every operand is copied before its users. */
    for (uint32_t i = 0; ok && i < src->n_nodes; i++) {
        const kf_tensor *s = src->nodes[i];
        kf_tensor *t = kf_arena_alloc(&g->arena, sizeof *t);
        if (!t) {
            ok = false;
            break;
        }
        *t = *s;
        t->graph = g;
        for (int k = 0; k < s->nsrc; k++)
            t->src[k] = g->nodes[s->src[k]->id];
        if (s->name && !(t->name = kf_arena_strndup(&g->arena, s->name, strlen(s->name))))
            ok = false;
        if (s->data) {
            size_t bytes = (size_t)kf_ir_numel(s) * kf_dtype_size(s->dtype);
            t->data = kf_arena_alloc(&g->arena, bytes);
            if (t->data)
                memcpy(t->data, s->data, bytes);
            else
                ok = false;
        }
        g->nodes[g->n_nodes++] = t;
    }
    for (uint32_t i = 0; ok && i < src->n_inputs; i++)
        g->inputs[g->n_inputs++] = g->nodes[src->inputs[i]->id];
    for (uint32_t i = 0; ok && i < src->n_outputs; i++) {
        const char *name = src->outputs[i].name;
        g->outputs[i].name = kf_arena_strndup(&g->arena, name, strlen(name));
        g->outputs[i].tensor = g->nodes[src->outputs[i].tensor->id];
        ok = g->outputs[i].name != NULL;
        g->n_outputs += ok;
    }
    if (!ok) {
        kf_ir_graph_destroy(g);
        return NULL;
    }
    g->status = src->status;
    memcpy(g->error, src->error, sizeof g->error);
    return g;
}

kf_status kf_ir_fail(kf_graph *g, kf_status status, const char *fmt, ...) {
    if (g->status != KF_OK)
        return status; /* the first error wins */
    g->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->error, sizeof g->error, fmt, ap);
    va_end(ap);
    return status;
}

kf_status kf_msg_set(char *err, kf_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, KF_MSG_MAX, fmt, ap);
        va_end(ap);
    }
    return status;
}

kf_status kf_ir_note(kf_graph *g, kf_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->last, sizeof g->last, fmt, ap);
    va_end(ap);
    return status;
}

char *kf_ir_type_str(const kf_tensor *t, char *buf, size_t size) {
    size_t n = 0;
    int w = snprintf(buf, size, "%s[", kf_dtype_name(t->dtype));
    n = w > 0 ? (size_t)w : 0;
    for (int i = 0; i < t->rank && n < size; i++) {
        w = snprintf(buf + n, size - n, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
        n += w > 0 ? (size_t)w : 0;
    }
    if (n < size)
        snprintf(buf + n, size - n, "]");
    return buf;
}

int64_t kf_ir_index_bound(const kf_graph *g, const kf_tensor *t) {
    int64_t bound = 0;
    for (uint32_t i = t->id + 1; i < g->n_nodes; i++) {
        const kf_tensor *c = g->nodes[i];
        if (c->op != KF_OP_GATHER || c->src[1] != t)
            continue;
        int64_t len = c->src[0]->dims[c->attr.axis];
        bound = bound == 0 || len < bound ? len : bound;
    }
    return bound;
}

int64_t kf_ir_numel(const kf_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= t->dims[i];
    return n;
}

void kf_ir_strides(const kf_tensor *t, int64_t *strides) {
    int64_t s = 1;
    for (int i = t->rank - 1; i >= 0; i--) {
        strides[i] = s;
        s *= t->dims[i];
    }
}

void kf_ir_broadcast_strides(const kf_tensor *t, int rank, int64_t *strides) {
    int64_t own[KF_MAX_RANK];
    kf_ir_strides(t, own);
    int off = rank - t->rank;
    KF_ASSERT(off >= 0);
    for (int i = 0; i < rank; i++) {
        int j = i - off;
        strides[i] = (j < 0 || t->dims[j] == 1) ? 0 : own[j];
    }
}

bool kf_ir_is_identifier(const char *name, size_t len) {
    if (!name || len == 0 || len > 64)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        bool digit = c >= '0' && c <= '9';
        if (!(alpha || (i > 0 && digit)))
            return false;
    }
    return true;
}

static size_t name_hash_n(const char *name, size_t len) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)name[i]) * 1099511628211ull;
    return (size_t)h;
}

static bool name_is(const kf_tensor *t, const char *name, size_t len) {
    return t->name && strncmp(t->name, name, len) == 0 && t->name[len] == '\0';
}

/* The slot of `name` in the name set: the id of the tensor holding it, or
 * the empty one where it would go. */
static uint32_t *name_slot(const kf_graph *g, const char *name, size_t len) {
    size_t mask = (size_t)g->cap_name_set - 1, i = name_hash_n(name, len) & mask;
    while (g->name_set[i] != UINT32_MAX && !name_is(g->nodes[g->name_set[i]], name, len))
        i = (i + 1) & mask;
    return &g->name_set[i];
}

/* Adds t's current name (a rename leaves the old slot, which no longer
 * matches); rebuilds the set at twice the size past a load of one half.
 * false on OOM. */
static bool name_index(kf_graph *g, const kf_tensor *t) {
    if (2 * ((size_t)g->n_named + 1) > g->cap_name_set) {
        size_t cap = 64;
        while (cap < 4 * ((size_t)g->n_named + 1))
            cap <<= 1;
        if (cap > UINT32_MAX)
            return false;
        uint32_t *set = kf_mem_alloc(&g->mem, cap * sizeof *set);
        if (!set)
            return false;
        uint32_t *old = g->name_set;
        size_t old_cap = g->cap_name_set;
        memset(set, 0xff, cap * sizeof *set);
        g->name_set = set;
        g->cap_name_set = (uint32_t)cap;
        g->n_named = 0;
        for (size_t i = 0; i < old_cap; i++) {
            const kf_tensor *x = old[i] == UINT32_MAX ? NULL : g->nodes[old[i]];
            if (x && x->name) {
                uint32_t *slot = name_slot(g, x->name, strlen(x->name));
                if (*slot == UINT32_MAX) {
                    *slot = x->id;
                    g->n_named++;
                }
            }
        }
        kf_mem_free(&g->mem, old, old_cap * sizeof *old);
    }
    uint32_t *slot = name_slot(g, t->name, strlen(t->name));
    if (*slot == UINT32_MAX) {
        *slot = t->id;
        g->n_named++;
    }
    return true;
}

kf_tensor *kf_ir_find_name(kf_graph *g, const char *name, size_t len) {
    bool ok = true;
    for (; ok && g->n_name_set < g->n_nodes; g->n_name_set++) {
        const kf_tensor *t = g->nodes[g->n_name_set];
        ok = !t->name || name_index(g, t);
    }
    if (!ok) {
        /* Out of memory for the set: the graph fails (sticky), and the
         * linear scan still answers this lookup. */
        kf_ir_fail(g, KF_ERR_OUT_OF_MEMORY, "name: out of memory for the name index");
        for (uint32_t i = 0; i < g->n_nodes; i++)
            if (name_is(g->nodes[i], name, len))
                return g->nodes[i];
        return NULL;
    }
    if (!g->cap_name_set)
        return NULL;
    uint32_t id = *name_slot(g, name, len);
    return id == UINT32_MAX ? NULL : g->nodes[id];
}

kf_status kf_ir_set_name(kf_graph *g, kf_tensor *t, const char *name, size_t len) {
    if (!kf_ir_is_identifier(name, len))
        return kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT,
                          "name: '%.*s' is not an identifier ([A-Za-z_][A-Za-z0-9_]*, at most 64 "
                          "characters)",
                          (int)(len > 64 ? 64 : len), name ? name : "");
    kf_tensor *other = kf_ir_find_name(g, name, len);
    if (g->status != KF_OK)
        return g->status; /* out of memory for the name index */
    if (other == t)
        return KF_OK;
    if (other)
        return kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT,
                          "name: '%.*s' already names tensor %%%u (%s); pick another name",
                          (int)len, name, other->id, kf_op_get(other->op)->name);
    if (t->op == KF_OP_INPUT)
        return kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT,
                          "name: input '%s' keeps the name it was created with", t->name);
    char *copy = kf_arena_strndup(&g->arena, name, len);
    if (!copy)
        return kf_ir_fail(g, KF_ERR_OUT_OF_MEMORY, "name: out of memory");
    t->name = copy;
    if (t->id < g->n_name_set && !name_index(g, t))
        return kf_ir_fail(g, KF_ERR_OUT_OF_MEMORY, "name: out of memory");
    return KF_OK;
}

static size_t name_hash(const char *name) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *c = name; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    return (size_t)h;
}

/* The slot of `name` in the output set: its index's, or the empty one where
 * it would go. */
static uint32_t *out_slot(const kf_graph *g, const char *name) {
    size_t mask = (size_t)g->cap_out_set - 1, i = name_hash(name) & mask;
    while (g->out_set[i] != UINT32_MAX && strcmp(g->outputs[g->out_set[i]].name, name) != 0)
        i = (i + 1) & mask;
    return &g->out_set[i];
}

/* Makes the output set hold every output and room for one more at a load of
 * at most one half (rebuilt at twice the size when it would pass that), so a
 * graph of N outputs checks their names in O(N), not O(N^2) (20,000 outputs
 * took 0.2 s of string comparisons). false on OOM. */
static bool out_set_ready(kf_graph *g) {
    if (2 * ((size_t)g->n_outputs + 1) > g->cap_out_set) {
        size_t cap = 64;
        while (cap < 4 * ((size_t)g->n_outputs + 1))
            cap <<= 1;
        if (cap > UINT32_MAX)
            return false;
        uint32_t *set = kf_mem_alloc(&g->mem, cap * sizeof *set);
        if (!set)
            return false;
        kf_mem_free(&g->mem, g->out_set, (size_t)g->cap_out_set * sizeof *g->out_set);
        memset(set, 0xff, cap * sizeof *set);
        g->out_set = set;
        g->cap_out_set = (uint32_t)cap;
        g->n_out_set = 0;
    }
    for (; g->n_out_set < g->n_outputs; g->n_out_set++) {
        uint32_t *slot = out_slot(g, g->outputs[g->n_out_set].name);
        if (*slot == UINT32_MAX)
            *slot = g->n_out_set;
    }
    return true;
}

kf_status kf_ir_add_output(kf_graph *g, const char *name, kf_tensor *t) {
    if (g->status != KF_OK)
        return g->status;
    if (!t)
        return kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT, "output: tensor for output '%s' is NULL",
                          name ? name : "(null)");
    if (t->graph != g)
        return kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT,
                          "output: tensor for output '%s' belongs to another graph",
                          name ? name : "(null)");
    size_t len = name ? strlen(name) : 0;
    if (!kf_ir_is_identifier(name, len))
        return kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT,
                          "output: '%s' is not an identifier ([A-Za-z_][A-Za-z0-9_]*, at most 64 "
                          "characters)",
                          name ? name : "(null)");
    if (!out_set_ready(g))
        return kf_ir_fail(g, KF_ERR_OUT_OF_MEMORY, "output: out of memory");
    uint32_t *slot = out_slot(g, name);
    if (*slot != UINT32_MAX)
        return kf_ir_fail(g, KF_ERR_INVALID_ARGUMENT,
                          "output: '%s' is already an output; output names are unique", name);
    if (!kf_mem_grow(&g->mem, (void **)&g->outputs, &g->cap_outputs, g->n_outputs + 1,
                     sizeof *g->outputs))
        return kf_ir_fail(g, KF_ERR_OUT_OF_MEMORY, "output: out of memory");
    char *copy = kf_arena_strndup(&g->arena, name, len);
    if (!copy)
        return kf_ir_fail(g, KF_ERR_OUT_OF_MEMORY, "output: out of memory");
    g->outputs[g->n_outputs].name = copy;
    g->outputs[g->n_outputs].tensor = t;
    *slot = g->n_outputs++;
    g->n_out_set = g->n_outputs;
    return KF_OK;
}
