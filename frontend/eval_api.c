/*
 * eval_api.c -- kf_graph_eval and kf_graph_check, the public face of the
 * reference evaluator and of the numerics judge (ir/judge.c).
 *
 * It owns the checks on the caller's bindings (every input bound once, by
 * name, with the exact byte size; every output binding naming a graph output
 * with the exact size) and the copy of results into the caller's buffers in
 * storage format. The arithmetic lives in ir/eval.c. Failures are recorded
 * with kf_ir_note: readable through kf_graph_error(), never sticky.
 */
#include <string.h>

#include "ir/ir.h"

/* Expected bytes of a tensor's host buffer, or 0 when that overflows size_t. */
static size_t buffer_bytes(const kf_tensor *t) {
    int64_t n = kf_ir_numel(t);
    size_t es = kf_dtype_size(t->dtype);
    if (n < 0 || es == 0 || (uint64_t)n > SIZE_MAX / es)
        return 0;
    return (size_t)n * es;
}

static int find_input(const kf_graph *g, const char *name) {
    for (uint32_t k = 0; k < g->n_inputs; k++) {
        if (strcmp(g->inputs[k]->name, name) == 0)
            return (int)k;
    }
    return -1;
}

static int find_output(const kf_graph *g, const char *name) {
    for (uint32_t k = 0; k < g->n_outputs; k++) {
        if (strcmp(g->outputs[k].name, name) == 0)
            return (int)k;
    }
    return -1;
}

/* Lists the graph's input (or output) names into buf, comma separated. */
static const char *list_names(const kf_graph *g, bool outputs, char *buf, size_t size) {
    size_t n = 0;
    uint32_t count = outputs ? g->n_outputs : g->n_inputs;
    buf[0] = '\0';
    for (uint32_t k = 0; k < count && n < size; k++) {
        const char *name = outputs ? g->outputs[k].name : g->inputs[k]->name;
        int w = snprintf(buf + n, size - n, "%s%s", k ? ", " : "", name);
        n += w > 0 ? (size_t)w : 0;
    }
    if (count == 0)
        snprintf(buf, size, "none");
    return buf;
}

/* Checks one binding's data and size against tensor t. */
static kf_status check_binding(kf_graph *g, const char *fn, const char *what, const kf_binding *bnd,
                               const kf_tensor *t) {
    char ts[160];
    if (!bnd->data)
        return kf_ir_note(g, KF_ERR_INVALID_ARGUMENT,
                          "%s: %s '%s' has NULL data; bind a buffer of %zu bytes", fn, what,
                          bnd->name, buffer_bytes(t));
    size_t want = buffer_bytes(t);
    if (bnd->size != want || want == 0)
        return kf_ir_note(g, KF_ERR_INVALID_ARGUMENT,
                          "%s: %s '%s' is %s: expected %zu bytes, got %zu", fn, what, bnd->name,
                          kf_ir_type_str(t, ts, sizeof ts), want, bnd->size);
    return KF_OK;
}

/* Bytes of the input-data table bind() allocates. */
static size_t table_bytes(const kf_graph *g) {
    return sizeof(void *) * (g->n_inputs ? g->n_inputs : 1);
}

/* Checks the bindings of kf_graph_eval / kf_graph_check (`fn` names the
 * call in messages) and returns the input data in the graph's input order in
 * *data (kf_mem_alloc'd, table_bytes(g) bytes; the caller frees it). */
static kf_status bind(kf_graph *g, const char *fn, const kf_binding *inputs, size_t n_inputs,
                      const kf_binding *outputs, size_t n_outputs, const void ***data) {
    *data = NULL;
    if (g->status != KF_OK)
        return g->status;
    if ((n_inputs && !inputs) || (n_outputs && !outputs))
        return kf_ir_note(g, KF_ERR_INVALID_ARGUMENT, "%s: %s is NULL but its count is %zu", fn,
                          (n_inputs && !inputs) ? "inputs" : "outputs",
                          (n_inputs && !inputs) ? n_inputs : n_outputs);
    kf_status s = kf_ir_verify(g);
    if (s != KF_OK)
        return s;
    char names[KF_MSG_MAX / 2];
    /* Input bindings: each names a graph input, once, with a right-sized buffer. */
    for (size_t i = 0; i < n_inputs; i++) {
        const kf_binding *bnd = &inputs[i];
        if (!bnd->name)
            return kf_ir_note(g, KF_ERR_INVALID_ARGUMENT, "%s: input binding %zu has no name", fn,
                              i);
        int k = find_input(g, bnd->name);
        if (k < 0)
            return kf_ir_note(g, KF_ERR_NOT_FOUND,
                              "%s: input binding %zu names '%s', which is not a graph "
                              "input (inputs: %s)",
                              fn, i, bnd->name, list_names(g, false, names, sizeof names));
        for (size_t j = 0; j < i; j++) {
            if (inputs[j].name && strcmp(inputs[j].name, bnd->name) == 0)
                return kf_ir_note(g, KF_ERR_INVALID_ARGUMENT,
                                  "%s: input '%s' is bound twice (bindings %zu and "
                                  "%zu); bind each input once",
                                  fn, bnd->name, j, i);
        }
        s = check_binding(g, fn, "input", bnd, g->inputs[k]);
        if (s != KF_OK)
            return s;
    }
    /* Every graph input bound: with no duplicates and no unknown names above,
     * a missing one is one no binding names. */
    for (uint32_t k = 0; k < g->n_inputs; k++) {
        const char *name = g->inputs[k]->name;
        bool bound = false;
        for (size_t i = 0; i < n_inputs && !bound; i++)
            bound = strcmp(inputs[i].name, name) == 0;
        if (!bound) {
            char ts[160];
            return kf_ir_note(g, KF_ERR_NOT_FOUND,
                              "%s: graph input '%s' %s is not bound; add a binding "
                              "of %zu bytes for it",
                              fn, name, kf_ir_type_str(g->inputs[k], ts, sizeof ts),
                              buffer_bytes(g->inputs[k]));
        }
    }
    /* Output bindings: each names a graph output, once, with a right-sized buffer. */
    for (size_t i = 0; i < n_outputs; i++) {
        const kf_binding *bnd = &outputs[i];
        if (!bnd->name)
            return kf_ir_note(g, KF_ERR_INVALID_ARGUMENT, "%s: output binding %zu has no name", fn,
                              i);
        int k = find_output(g, bnd->name);
        if (k < 0)
            return kf_ir_note(g, KF_ERR_NOT_FOUND,
                              "%s: output binding %zu names '%s', which is not a "
                              "graph output (outputs: %s)",
                              fn, i, bnd->name, list_names(g, true, names, sizeof names));
        for (size_t j = 0; j < i; j++) {
            if (outputs[j].name && strcmp(outputs[j].name, bnd->name) == 0)
                return kf_ir_note(g, KF_ERR_INVALID_ARGUMENT,
                                  "%s: output '%s' is bound twice (bindings %zu and "
                                  "%zu); bind each output at most once",
                                  fn, bnd->name, j, i);
        }
        s = check_binding(g, fn, "output", bnd, g->outputs[k].tensor);
        if (s != KF_OK)
            return s;
    }

    *data = kf_mem_alloc(&g->mem, table_bytes(g));
    if (!*data)
        return kf_ir_note(g, KF_ERR_OUT_OF_MEMORY, "%s: out of memory for the input table", fn);
    for (size_t i = 0; i < n_inputs; i++)
        (*data)[find_input(g, inputs[i].name)] = inputs[i].data;
    return KF_OK;
}

kf_status kf_graph_eval(kf_graph *graph, const kf_binding *inputs, size_t n_inputs,
                        const kf_binding *outputs, size_t n_outputs) {
    if (!graph)
        return KF_ERR_INVALID_ARGUMENT;
    kf_graph *g = graph;
    const void **data;
    kf_status s = bind(g, "kf_graph_eval", inputs, n_inputs, outputs, n_outputs, &data);
    if (s != KF_OK)
        return s;
    kf_eval_state st;
    s = kf_ir_eval(g, data, &st);
    kf_mem_free(&g->mem, (void *)data, table_bytes(g));
    if (s != KF_OK)
        return s; /* kf_ir_eval noted why and released everything */

    for (size_t i = 0; i < n_outputs; i++) {
        const kf_tensor *t = g->outputs[find_output(g, outputs[i].name)].tensor;
        const double *v = st.values[t->id];
        int64_t n = kf_ir_numel(t);
        for (int64_t e = 0; e < n; e++)
            kf_ir_store(outputs[i].data, t->dtype, e, v[e]);
    }
    kf_ir_eval_release(&st);
    return KF_OK;
}

kf_status kf_graph_check(kf_graph *graph, const kf_binding *inputs, size_t n_inputs,
                         const kf_binding *outputs, size_t n_outputs, kf_check_result *results) {
    if (!graph)
        return KF_ERR_INVALID_ARGUMENT;
    kf_graph *g = graph;
    if (n_outputs && !results)
        return kf_ir_note(g, KF_ERR_INVALID_ARGUMENT,
                          "kf_graph_check: results is NULL; pass %zu kf_check_result", n_outputs);
    const void **data;
    kf_status s = bind(g, "kf_graph_check", inputs, n_inputs, outputs, n_outputs, &data);
    if (s != KF_OK)
        return s;
    size_t n = n_outputs ? n_outputs : 1;
    uint32_t *which = kf_mem_alloc(&g->mem, n * sizeof *which);
    const void **got = kf_mem_alloc(&g->mem, n * sizeof *got);
    kf_ir_verdict *v = kf_mem_alloc(&g->mem, n * sizeof *v);
    if (!which || !got || !v) {
        s = kf_ir_note(g, KF_ERR_OUT_OF_MEMORY, "kf_graph_check: out of memory for %zu outputs",
                       n_outputs);
    } else {
        for (size_t i = 0; i < n_outputs; i++) {
            which[i] = (uint32_t)find_output(g, outputs[i].name);
            got[i] = outputs[i].data;
        }
        s = kf_ir_check(g, data, n_outputs, which, got, v);
    }
    for (size_t i = 0; s == KF_OK && i < n_outputs; i++) {
        results[i].err = v[i].err;
        results[i].ref_err = v[i].ref_err;
        results[i].fused_err = v[i].fused_err;
        results[i].round_err = v[i].round_err;
        results[i].bound = v[i].bound;
        results[i].pass = v[i].pass;
    }
    kf_mem_free(&g->mem, v, n * sizeof *v);
    kf_mem_free(&g->mem, (void *)got, n * sizeof *got);
    kf_mem_free(&g->mem, which, n * sizeof *which);
    kf_mem_free(&g->mem, (void *)data, table_bytes(g));
    return s;
}
