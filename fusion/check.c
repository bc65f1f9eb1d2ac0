/*
 * check.c -- the plan checker (issue 3, item 5): a plan is right by
 * construction when executing it group by group with the reference evaluator
 * gives the unfused graph's result, and when its structure keeps the contract
 * written at the top of fusion/fusion.h.
 *
 *   plan ──► structure ──► random inputs (seed) ──► groups in order,
 *            (contract)         │                    each from what earlier
 *                               │                    groups WROTE only
 *                               └──► kf_ir_eval of the unfused graph ──► compare outputs
 *
 * Structure (kf_plan_check_structure) -- each violation is a planner bug:
 *   S1  groups[i].id == i; every index names a graph tensor.
 *   S2  `computed` is in creation order; it never holds a graph input or a
 *       multi-element constant (those are read); every other tensor is in the
 *       `computed` list of at most one group, except inline sources (iota,
 *       constants of at most one element), which any group may recompute, and
 *       a norm that GEMM groups recompute as their operand-A prologue.
 *   S3  every operand of a computed tensor is computed before it in the same
 *       group or is in the group's `reads`.
 *   S4  every tensor a group reads is a graph input, a constant, or a tensor
 *       that an EARLIER group wrote (a VIEW group's view counts as written):
 *       groups are in dependency order and nothing is read that no one
 *       materialized.
 *   S5  `writes` is a subset of `computed`; each tensor is written by one
 *       group; every graph output that is not an input or constant is
 *       written; every write is a graph output or is read by a later group.
 *   S6  every non-source tensor the outputs need is computed by some group,
 *       and group_of[] names the group that computes each tensor.
 *   S7  every graph edge producer -> consumer whose ends lie in different
 *       groups (producer not a source) has an edge record with a reason other
 *       than NONE and the right groups; every edge record names a real edge
 *       (consumer->src[slot] == producer) whose ends lie in different groups.
 *
 * Values (kf_plan_check): the inputs are filled from `seed` (floats uniform in
 * [-2, 2], i32 in [-8, 8], bool 0/1), the unfused graph is evaluated by
 * kf_ir_eval, and the plan is executed: for each group, in order,
 * kf_ir_eval_node on each computed tensor, after which every value the group
 * computed but did not write is dropped, so a later group that needs it finds
 * nothing (S3/S4 catch that first, with a clearer message).
 *
 * Tolerance: ZERO. The plan's execution runs the same op semantics on the
 * same values in the same order, so every output must match bit for bit,
 * except that a NaN matches any NaN (payloads are not semantics). A NaN where
 * the reference is a number, or a number where it is NaN, is a mismatch.
 * (Numerical differences of fused backends are the backends' tests' business,
 * with per-dtype tolerances; here any difference is a structural bug.)
 */
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "fusion/fusion.h"

static kf_status check_fail(const kf_plan *plan, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static kf_status check_fail(const kf_plan *plan, const char *fmt, ...) {
    char msg[KF_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kf_ir_note(plan->graph, KF_ERR_INTERNAL, "plan check: %s", msg);
}

/* Sources a group may compute inline (and several groups may recompute). */
static bool is_inline_source(const kf_tensor *t) {
    return t->op == KF_OP_IOTA || (t->op == KF_OP_CONST && kf_ir_numel(t) <= 1);
}

/* May group `grp` compute `t` although another group computes it too? Inline
 * sources, and a norm that a GEMM recomputes as its operand-A prologue. */
static bool may_recompute(const kf_group *grp, const kf_tensor *t) {
    if (is_inline_source(t))
        return true;
    return kf_op_has(t->op, KF_TRAIT_NORM) && grp->kind == KF_GROUP_GEMM &&
           grp->gemm.a_prologue &&
           (grp->gemm.a[0] == t->id || (grp->gemm.n_anchors > 1 && grp->gemm.a[1] == t->id));
}

/* Sources that are read from memory and never computed. */
static bool is_memory_source(const kf_tensor *t) {
    return t->op == KF_OP_INPUT || (t->op == KF_OP_CONST && kf_ir_numel(t) > 1);
}

/* ------------------------------------------------------------------------ */
/* Structure                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct scratch {
    const kf_mem *mem;
    uint32_t n;
    uint32_t *computed_by; /* first group computing each tensor */
    uint32_t *written_by;  /* group writing each tensor */
    uint32_t *stamp;       /* per-group marks: gi*2+1 computed so far, gi*2+2 read */
    uint32_t *last_read;   /* the last group reading each tensor */
    uint32_t *edge_at;     /* (consumer * 3 + slot) -> edge index */
    bool *need;
} scratch;

static void scratch_free(scratch *s) {
    const kf_mem *m = s->mem;
    kf_mem_free(m, s->computed_by, sizeof(uint32_t) * s->n);
    kf_mem_free(m, s->written_by, sizeof(uint32_t) * s->n);
    kf_mem_free(m, s->stamp, sizeof(uint32_t) * s->n);
    kf_mem_free(m, s->last_read, sizeof(uint32_t) * s->n);
    kf_mem_free(m, s->edge_at, sizeof(uint32_t) * 3 * (size_t)s->n);
    kf_mem_free(m, s->need, sizeof(bool) * s->n);
}

static bool scratch_init(scratch *s, const kf_plan *plan) {
    const kf_graph *g = plan->graph;
    memset(s, 0, sizeof *s);
    s->mem = &plan->graph->mem;
    s->n = g->n_nodes;
    uint32_t n = s->n ? s->n : 1;
    s->computed_by = kf_mem_alloc(s->mem, sizeof(uint32_t) * n);
    s->written_by = kf_mem_alloc(s->mem, sizeof(uint32_t) * n);
    s->stamp = kf_mem_calloc(s->mem, n, sizeof(uint32_t));
    s->last_read = kf_mem_alloc(s->mem, sizeof(uint32_t) * n);
    s->edge_at = kf_mem_alloc(s->mem, sizeof(uint32_t) * 3 * (size_t)n);
    s->need = kf_mem_calloc(s->mem, n, sizeof(bool));
    s->n = n;
    if (!s->computed_by || !s->written_by || !s->stamp || !s->last_read || !s->edge_at ||
        !s->need) {
        scratch_free(s);
        return false;
    }
    for (uint32_t i = 0; i < n; i++)
        s->computed_by[i] = s->written_by[i] = s->last_read[i] = KF_NONE;
    for (size_t i = 0; i < 3 * (size_t)n; i++)
        s->edge_at[i] = KF_NONE;
    return true;
}

static kf_status check_group(const kf_plan *plan, scratch *s, uint32_t gi) {
    const kf_graph *g = plan->graph;
    const kf_group *grp = &plan->groups[gi];
    const uint32_t st_comp = 2 * gi + 1, st_read = 2 * gi + 2;
    if (grp->id != gi)
        return check_fail(plan, "S1: group %u has id %u", gi, grp->id);
    if ((unsigned)grp->kind >= KF_GROUP_COUNT)
        return check_fail(plan, "S1: group %u has kind %d", gi, (int)grp->kind);
    if ((grp->n_computed && !grp->computed) || (grp->n_reads && !grp->reads) ||
        (grp->n_writes && !grp->writes))
        return check_fail(plan, "S1: group %u has a NULL list with a nonzero count", gi);

    for (uint32_t i = 0; i < grp->n_reads; i++) {
        uint32_t r = grp->reads[i];
        if (r >= g->n_nodes)
            return check_fail(plan, "S1: group %u reads tensor %u; the graph has %u", gi, r,
                              g->n_nodes);
        const kf_tensor *t = g->nodes[r];
        if (!(t->op == KF_OP_INPUT || t->op == KF_OP_CONST) &&
            (s->written_by[r] == KF_NONE || s->written_by[r] >= gi))
            return check_fail(plan,
                              "S4: group %u (%s %s) reads %%%u (%s), which no earlier group "
                              "materialized%s",
                              gi, kf_group_kind_name(grp->kind), grp->name, r,
                              kf_op_get(t->op)->name,
                              s->computed_by[r] == KF_NONE ? ""
                              : s->computed_by[r] >= gi   ? " (it is computed by a later group)"
                                                          : " (an earlier group computes it but "
                                                            "does not write it)");
        s->stamp[r] = st_read;
        s->last_read[r] = gi;
    }

    uint32_t prev = 0;
    for (uint32_t i = 0; i < grp->n_computed; i++) {
        uint32_t c = grp->computed[i];
        if (c >= g->n_nodes)
            return check_fail(plan, "S1: group %u computes tensor %u; the graph has %u", gi, c,
                              g->n_nodes);
        if (i && c <= prev)
            return check_fail(plan, "S2: group %u's computed list is not in creation order "
                              "(%%%u after %%%u)", gi, c, prev);
        prev = c;
        const kf_tensor *t = g->nodes[c];
        if (is_memory_source(t))
            return check_fail(plan, "S2: group %u computes %%%u, a %s; inputs and multi-element "
                              "constants are read, not computed", gi, c, kf_op_get(t->op)->name);
        if (s->computed_by[c] != KF_NONE &&
            !(may_recompute(grp, t) && may_recompute(&plan->groups[s->computed_by[c]], t)))
            return check_fail(plan, "S2: %%%u (%s) is computed by group %u and again by group %u",
                              c, kf_op_get(t->op)->name, s->computed_by[c], gi);
        if (s->computed_by[c] == KF_NONE)
            s->computed_by[c] = gi;
        for (int k = 0; k < t->nsrc; k++) {
            uint32_t o = t->src[k]->id;
            if (s->stamp[o] != st_comp && s->stamp[o] != st_read)
                return check_fail(plan,
                                  "S3: group %u (%s %s) computes %%%u (%s) from operand %d %%%u "
                                  "(%s), which it neither computes before it nor reads",
                                  gi, kf_group_kind_name(grp->kind), grp->name, c,
                                  kf_op_get(t->op)->name, k, o, kf_op_get(t->src[k]->op)->name);
        }
        if (s->stamp[c] == st_read)
            return check_fail(plan, "S3: group %u both reads and computes %%%u", gi, c);
        s->stamp[c] = st_comp;
    }

    for (uint32_t i = 0; i < grp->n_writes; i++) {
        uint32_t w = grp->writes[i];
        if (w >= g->n_nodes)
            return check_fail(plan, "S1: group %u writes tensor %u; the graph has %u", gi, w,
                              g->n_nodes);
        if (s->stamp[w] != st_comp)
            return check_fail(plan, "S5: group %u writes %%%u, which it does not compute", gi, w);
        if (s->written_by[w] != KF_NONE)
            return check_fail(plan, "S5: %%%u is written by group %u and again by group %u", w,
                              s->written_by[w], gi);
        s->written_by[w] = gi;
    }
    /* A VIEW group's views are readable by later groups (they alias a buffer). */
    if (grp->kind == KF_GROUP_VIEW)
        for (uint32_t i = 0; i < grp->n_computed; i++)
            if (s->written_by[grp->computed[i]] == KF_NONE)
                s->written_by[grp->computed[i]] = gi;
    return KF_OK;
}

static kf_status check_edges(const kf_plan *plan, scratch *s) {
    const kf_graph *g = plan->graph;
    if (plan->n_edges && !plan->edges)
        return check_fail(plan, "S1: the plan has %u edges and a NULL edge list", plan->n_edges);
    for (uint32_t e = 0; e < plan->n_edges; e++) {
        const kf_plan_edge *pe = &plan->edges[e];
        if (pe->producer >= g->n_nodes || pe->consumer >= g->n_nodes || pe->slot < 0 ||
            pe->slot >= g->nodes[pe->consumer]->nsrc ||
            g->nodes[pe->consumer]->src[pe->slot]->id != pe->producer)
            return check_fail(plan, "S7: edge %u (%%%u -> %%%u slot %d) is not an edge of the graph",
                              e, pe->producer, pe->consumer, pe->slot);
        if ((unsigned)pe->reason >= KF_REASON_COUNT || pe->reason == KF_REASON_NONE)
            return check_fail(plan, "S7: edge %u (%%%u -> %%%u) has no reason code", e,
                              pe->producer, pe->consumer);
        const kf_tensor *p = g->nodes[pe->producer];
        uint32_t gp = s->computed_by[pe->producer], gc = s->computed_by[pe->consumer];
        if (p->op == KF_OP_INPUT || p->op == KF_OP_CONST || is_inline_source(p))
            continue; /* edges from sources (reason SOURCE) are informative only */
        if (gp != KF_NONE && gp == gc)
            return check_fail(plan, "S7: edge %u (%%%u -> %%%u) says %s, but group %u computes "
                              "both", e, pe->producer, pe->consumer, kf_reason_code(pe->reason),
                              gp);
        if (pe->from_group != gp || pe->to_group != gc)
            return check_fail(plan, "S7: edge %u (%%%u -> %%%u) names groups %u -> %u; they are "
                              "computed by groups %u -> %u",
                              e, pe->producer, pe->consumer, pe->from_group, pe->to_group, gp, gc);
        s->edge_at[(size_t)pe->consumer * 3 + (size_t)pe->slot] = e;
    }
    for (uint32_t c = 0; c < g->n_nodes; c++) {
        uint32_t gc = s->computed_by[c];
        if (!s->need[c] || gc == KF_NONE)
            continue;
        const kf_tensor *t = g->nodes[c];
        if (is_inline_source(t))
            continue;
        for (int k = 0; k < t->nsrc; k++) {
            const kf_tensor *p = t->src[k];
            if (is_memory_source(p) || is_inline_source(p))
                continue;
            if (s->computed_by[p->id] == gc)
                continue;
            if (s->edge_at[(size_t)c * 3 + (size_t)k] == KF_NONE)
                return check_fail(plan,
                                  "S7: the edge %%%u (%s, group %u) -> %%%u (%s, group %u) "
                                  "operand %d is not fused and has no reason",
                                  p->id, kf_op_get(p->op)->name, s->computed_by[p->id], c,
                                  kf_op_get(t->op)->name, gc, k);
        }
    }
    return KF_OK;
}

static kf_status check_structure(const kf_plan *plan, scratch *s) {
    const kf_graph *g = plan->graph;
    if (plan->n_groups && !plan->groups)
        return check_fail(plan, "S1: the plan has %u groups and a NULL group list",
                          plan->n_groups);
    for (uint32_t gi = 0; gi < plan->n_groups; gi++) {
        kf_status st = check_group(plan, s, gi);
        if (st != KF_OK)
            return st;
    }

    /* S6: what the outputs need, and group_of[]. */
    for (uint32_t i = 0; i < g->n_outputs; i++)
        s->need[g->outputs[i].tensor->id] = true;
    for (uint32_t i = g->n_nodes; i-- > 0;) {
        if (!s->need[i])
            continue;
        const kf_tensor *t = g->nodes[i];
        for (int k = 0; k < t->nsrc; k++)
            s->need[t->src[k]->id] = true;
        if (t->op != KF_OP_INPUT && t->op != KF_OP_CONST && s->computed_by[i] == KF_NONE)
            return check_fail(plan, "S6: %%%u (%s) is needed by the outputs but no group computes "
                              "it", i, kf_op_get(t->op)->name);
    }
    if (!plan->group_of)
        return check_fail(plan, "S6: the plan has no group_of table");
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        if (s->computed_by[i] != KF_NONE && plan->group_of[i] != s->computed_by[i])
            return check_fail(plan, "S6: group_of[%%%u] is %u but group %u computes it", i,
                              plan->group_of[i], s->computed_by[i]);
        if (s->computed_by[i] == KF_NONE && s->need[i] && plan->group_of[i] != KF_NONE)
            return check_fail(plan, "S6: group_of[%%%u] is %u but no group computes it", i,
                              plan->group_of[i]);
    }

    /* S5: outputs are written; every write is an output or read later. */
    for (uint32_t i = 0; i < g->n_outputs; i++) {
        const kf_tensor *t = g->outputs[i].tensor;
        if (t->op != KF_OP_INPUT && t->op != KF_OP_CONST && s->written_by[t->id] == KF_NONE)
            return check_fail(plan, "S5: graph output '%s' (%%%u, %s) is not materialized by any "
                              "group", g->outputs[i].name, t->id, kf_op_get(t->op)->name);
    }
    for (uint32_t gi = 0; gi < plan->n_groups; gi++) {
        const kf_group *grp = &plan->groups[gi];
        for (uint32_t i = 0; i < grp->n_writes; i++) {
            uint32_t w = grp->writes[i];
            bool is_out = false;
            for (uint32_t o = 0; o < g->n_outputs && !is_out; o++)
                is_out = g->outputs[o].tensor->id == w;
            if (!is_out && (s->last_read[w] == KF_NONE || s->last_read[w] <= gi))
                return check_fail(plan, "S5: group %u writes %%%u (%s), which is no graph output "
                                  "and which no later group reads", gi, w,
                                  kf_op_get(g->nodes[w]->op)->name);
        }
    }
    return check_edges(plan, s);
}

kf_status kf_plan_check_structure(const kf_plan *plan) {
    if (!plan || !plan->graph)
        return KF_ERR_INVALID_ARGUMENT;
    scratch s;
    if (!scratch_init(&s, plan))
        return kf_ir_note(plan->graph, KF_ERR_OUT_OF_MEMORY, "plan check: out of memory");
    kf_status st = check_structure(plan, &s);
    scratch_free(&s);
    return st;
}

/* ------------------------------------------------------------------------ */
/* Values                                                                     */
/* ------------------------------------------------------------------------ */

static uint64_t splitmix(uint64_t *state) {
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static size_t storage_bytes(const kf_tensor *t) {
    return (size_t)kf_ir_numel(t) * kf_dtype_size(t->dtype);
}

static void fill_random(const kf_tensor *t, void *data, uint64_t *rng) {
    int64_t n = kf_ir_numel(t);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix(rng);
        double v;
        if (t->dtype == KF_DTYPE_BOOL)
            v = (double)(r & 1);
        else if (t->dtype == KF_DTYPE_I32)
            v = (double)(int)(r % 17) - 8.0;
        else
            v = -2.0 + 4.0 * (double)(r >> 11) * 0x1.0p-53;
        kf_ir_store(data, t->dtype, i, v);
    }
}

static void free_value(kf_eval_state *st, uint32_t id) {
    kf_graph *g = st->graph;
    if (!st->values[id])
        return;
    kf_mem_free(&g->mem, st->values[id], sizeof(double) * (size_t)kf_ir_numel(g->nodes[id]));
    st->values[id] = NULL;
}

/* Executes the plan's groups into *st (whose inputs are loaded). */
static kf_status run_groups(const kf_plan *plan, kf_eval_state *st) {
    kf_graph *g = plan->graph;
    for (uint32_t gi = 0; gi < plan->n_groups; gi++) {
        const kf_group *grp = &plan->groups[gi];
        for (uint32_t i = 0; i < grp->n_reads; i++) {
            const kf_tensor *t = g->nodes[grp->reads[i]];
            if (!st->values[t->id] && t->op == KF_OP_CONST) {
                kf_status s = kf_ir_eval_node(st, t);
                if (s != KF_OK)
                    return s;
            }
        }
        for (uint32_t i = 0; i < grp->n_computed; i++) {
            kf_status s = kf_ir_eval_node(st, g->nodes[grp->computed[i]]);
            if (s != KF_OK)
                return s == KF_ERR_OUT_OF_MEMORY
                           ? s
                           : check_fail(plan, "group %u: %s", gi, kf_graph_error(g));
        }
        if (grp->kind == KF_GROUP_VIEW)
            continue; /* views stay readable */
        for (uint32_t i = 0; i < grp->n_computed; i++) {
            uint32_t c = grp->computed[i];
            bool written = false;
            for (uint32_t w = 0; w < grp->n_writes && !written; w++)
                written = grp->writes[w] == c;
            if (!written)
                free_value(st, c);
        }
    }
    return KF_OK;
}

/* Bit-exact comparison (NaN matches NaN) of every graph output. */
static kf_status compare_outputs(const kf_plan *plan, const kf_eval_state *got,
                                 const kf_eval_state *ref, double *max_rel_err) {
    const kf_graph *g = plan->graph;
    double worst = 0.0;
    for (uint32_t o = 0; o < g->n_outputs; o++) {
        const kf_tensor *t = g->outputs[o].tensor;
        const double *a = got->values[t->id], *b = ref->values[t->id];
        char ts[160];
        if (!a)
            return check_fail(plan, "output '%s' (%%%u %s) has no value after the plan ran",
                              g->outputs[o].name, t->id, kf_ir_type_str(t, ts, sizeof ts));
        int64_t n = kf_ir_numel(t);
        double num = 0.0, den = 0.0;
        int64_t first_bad = -1;
        for (int64_t i = 0; i < n; i++) {
            bool same = isnan(b[i]) ? isnan(a[i])
                                    : a[i] == b[i] && signbit(a[i]) == signbit(b[i]);
            if (!same && first_bad < 0)
                first_bad = i;
            if (isfinite(a[i]) && isfinite(b[i])) {
                num += (a[i] - b[i]) * (a[i] - b[i]);
                den += b[i] * b[i];
            }
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        if (rel > worst)
            worst = rel;
        if (first_bad >= 0) {
            if (max_rel_err)
                *max_rel_err = worst;
            return check_fail(plan,
                              "output '%s' (%%%u %s) element %lld: the plan gives %.17g, the "
                              "unfused graph %.17g (relative error of the output %.3g)",
                              g->outputs[o].name, t->id, kf_ir_type_str(t, ts, sizeof ts),
                              (long long)first_bad, a[first_bad], b[first_bad], rel);
        }
    }
    if (max_rel_err)
        *max_rel_err = worst;
    return KF_OK;
}

kf_status kf_plan_check(const kf_plan *plan, uint64_t seed, double *max_rel_err) {
    if (max_rel_err)
        *max_rel_err = 0.0;
    if (!plan || !plan->graph)
        return KF_ERR_INVALID_ARGUMENT;
    kf_graph *g = plan->graph;
    const kf_mem *m = &g->mem;
    kf_status st = kf_plan_check_structure(plan);
    if (st != KF_OK)
        return st;

    uint32_t ni = g->n_inputs;
    void **data = kf_mem_calloc(m, ni ? ni : 1, sizeof(void *));
    kf_eval_state ref = {.graph = g}, got = {.graph = g};
    if (!data)
        return kf_ir_note(g, KF_ERR_OUT_OF_MEMORY, "plan check: out of memory");
    uint64_t rng = seed;
    for (uint32_t i = 0; i < ni && st == KF_OK; i++) {
        size_t bytes = storage_bytes(g->inputs[i]);
        data[i] = kf_mem_alloc(m, bytes ? bytes : 1);
        if (!data[i])
            st = kf_ir_note(g, KF_ERR_OUT_OF_MEMORY, "plan check: out of memory");
        else
            fill_random(g->inputs[i], data[i], &rng);
    }
    if (st == KF_OK)
        st = kf_ir_eval(g, (const void *const *)data, &ref);
    if (st == KF_OK) {
        got.values = kf_mem_calloc(m, g->n_nodes, sizeof(double *));
        if (!got.values)
            st = kf_ir_note(g, KF_ERR_OUT_OF_MEMORY, "plan check: out of memory");
    }
    for (uint32_t i = 0; i < ni && st == KF_OK; i++) {
        const kf_tensor *t = g->inputs[i];
        int64_t n = kf_ir_numel(t);
        double *v = kf_mem_alloc(m, sizeof(double) * (size_t)(n ? n : 1));
        if (!v) {
            st = kf_ir_note(g, KF_ERR_OUT_OF_MEMORY, "plan check: out of memory");
            break;
        }
        for (int64_t k = 0; k < n; k++)
            v[k] = kf_ir_load(data[i], t->dtype, k);
        got.values[t->id] = v;
    }
    if (st == KF_OK)
        st = run_groups(plan, &got);
    if (st == KF_OK)
        st = compare_outputs(plan, &got, &ref, max_rel_err);

    kf_ir_eval_release(&got);
    kf_ir_eval_release(&ref);
    for (uint32_t i = 0; i < ni; i++)
        if (data[i])
            kf_mem_free(m, data[i], storage_bytes(g->inputs[i]) ? storage_bytes(g->inputs[i]) : 1);
    kf_mem_free(m, data, sizeof(void *) * (ni ? ni : 1));
    return st;
}
