/*
 * check.c -- the plan checker (issue 3, item 5): a plan is right by
 * construction when executing it group by group with the reference evaluator
 * gives the unfused graph's result, and when its structure keeps the contract
 * written at the top of fusion/fusion.h.
 *
 *   plan ──► structure ──► random inputs (seed) ──► groups in order,
 *           (S1-S8)             │                    each from what earlier
 *                               │                    groups WROTE only; per group
 *                               │                    its expressions interpreted
 *                               │                    and held to the reference (E1-E9)
 *                               └──► kf_ir_eval of the unfused graph ──► compare outputs
 *
 * Two layers, because they catch different bugs: the node-by-node execution
 * proves the bookkeeping (what is computed where, what is materialized, in
 * which order), and the expression interpreter proves what the backends will
 * actually lower (loads, strides, broadcasts, statistics, anchors, masks).
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
 *       written (inputs and constants are copied from their own data by the
 *       runtime; an iota output must be computed and written by a group);
 *       every write is a graph output or is read by a later group.
 *   S6  every non-source tensor the outputs need is computed by some group,
 *       and group_of[] names the group that computes each tensor.
 *   S7  every graph edge producer -> consumer whose ends lie in different
 *       groups (producer not a source) has an edge record with a reason other
 *       than NONE and the right groups; every edge record names a real edge
 *       (consumer->src[slot] == producer) whose ends lie in different groups.
 *   S8  reasons that state a fact of the graph state a true one: GRAPH_OUTPUT
 *       (the producer is an output), MULTIPLE_CONSUMERS (it has two or more
 *       uses, outputs included), SOURCE, LAYOUT_CHANGE (an end is a reshape
 *       or permute), AXIS_NOT_INNERMOST (an end is row-wise over a non-last
 *       axis).
 *   S9  an ELEMENTWISE group that writes several tensors (siblings gathered
 *       by fuse_siblings) writes each at the group's space -- every write has
 *       exactly the group's shape, as its flat loop stores every element --
 *       and stays within the plan options' bounds: at most
 *       sibling_max_outputs writes and sibling_max_args reads + writes.
 *   S10 GEMM sibling sets (fusion/check_gemm_siblings.c) are runs of adjacent
 *       single GEMM groups, within gemm_sibling_max, reading one norm prologue
 *       A of one dtype, K and batch, none reading what another writes.
 *
 * Values (kf_plan_check): the inputs are filled from `seed` (floats uniform in
 * [-2, 2], i32 in [-8, 8], bool 0/1), the unfused graph is evaluated by
 * kf_ir_eval, and the plan is executed: for each group, in order,
 * kf_ir_eval_node on each computed tensor, after which every value the group
 * computed but did not write is dropped, so a later group that needs it finds
 * nothing (S3/S4 catch that first, with a clearer message).
 *
 * Tolerance: ZERO for the outputs. The plan's execution runs the same op
 * semantics on the same values in the same order, so every output must match
 * bit for bit, except that a NaN matches any NaN (payloads are not
 * semantics). A NaN where the reference is a number, or a number where it is
 * NaN, is a mismatch. (Numerical differences of fused backends are the
 * backends' tests' business, with per-dtype tolerances; here any difference is
 * a structural bug.) Expression nodes are exact too, except downstream of a
 * row statistic, which sums in another order than the evaluator (E5).
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
    return kf_op_has(t->op, KF_TRAIT_NORM) && grp->kind == KF_GROUP_GEMM && grp->gemm.a_prologue &&
           (grp->gemm.a[0] == t->id || (grp->gemm.n_anchors > 1 && grp->gemm.a[1] == t->id));
}

static bool group_computes(const kf_group *grp, uint32_t t);

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
    uint32_t *uses;        /* operand slots of needed tensors, plus outputs, naming each */
    bool *need;
} scratch;

static void scratch_free(scratch *s) {
    const kf_mem *m = s->mem;
    kf_mem_free(m, s->computed_by, sizeof(uint32_t) * s->n);
    kf_mem_free(m, s->written_by, sizeof(uint32_t) * s->n);
    kf_mem_free(m, s->stamp, sizeof(uint32_t) * s->n);
    kf_mem_free(m, s->last_read, sizeof(uint32_t) * s->n);
    kf_mem_free(m, s->edge_at, sizeof(uint32_t) * 3 * (size_t)s->n);
    kf_mem_free(m, s->uses, sizeof(uint32_t) * s->n);
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
    s->uses = kf_mem_calloc(s->mem, n, sizeof(uint32_t));
    s->need = kf_mem_calloc(s->mem, n, sizeof(bool));
    s->n = n;
    if (!s->computed_by || !s->written_by || !s->stamp || !s->last_read || !s->edge_at ||
        !s->uses || !s->need) {
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
                              : s->computed_by[r] >= gi    ? " (it is computed by a later group)"
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
            return check_fail(plan,
                              "S2: group %u's computed list is not in creation order "
                              "(%%%u after %%%u)",
                              gi, c, prev);
        prev = c;
        const kf_tensor *t = g->nodes[c];
        if (is_memory_source(t))
            return check_fail(plan,
                              "S2: group %u computes %%%u, a %s; inputs and multi-element "
                              "constants are read, not computed",
                              gi, c, kf_op_get(t->op)->name);
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
        /* A one-element constant may be both: inlined where an expression uses
         * it and loaded where a norm takes it as its weight or bias. No group
         * writes a constant, so the load can never see a stale value. */
        if (s->stamp[c] == st_read && t->op != KF_OP_CONST)
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
    if (grp->kind == KF_GROUP_ELEMENTWISE && grp->n_writes > 1) {
        uint32_t max_out = plan->options.sibling_max_outputs ? plan->options.sibling_max_outputs
                                                             : KF_SIBLING_MAX_OUTPUTS;
        uint32_t max_args =
            plan->options.sibling_max_args ? plan->options.sibling_max_args : KF_SIBLING_MAX_ARGS;
        if (grp->n_writes > max_out || grp->n_writes + grp->n_reads > max_args)
            return check_fail(plan,
                              "S9: elementwise group %u writes %u tensors and reads %u; the bounds "
                              "are %u outputs and %u arguments",
                              gi, grp->n_writes, grp->n_reads, max_out, max_args);
        for (uint32_t i = 0; i < grp->n_writes; i++) {
            const kf_tensor *t = g->nodes[grp->writes[i]];
            if (t->rank != grp->rank ||
                memcmp(t->dims, grp->dims, sizeof(int64_t) * (size_t)t->rank) != 0)
                return check_fail(plan,
                                  "S9: elementwise group %u writes %%%u, whose shape is not the "
                                  "group's space",
                                  gi, grp->writes[i]);
        }
    }
    /* A VIEW group's views are readable by later groups (they alias a buffer). */
    if (grp->kind == KF_GROUP_VIEW)
        for (uint32_t i = 0; i < grp->n_computed; i++)
            if (s->written_by[grp->computed[i]] == KF_NONE)
                s->written_by[grp->computed[i]] = gi;
    return KF_OK;
}

/* S8: the reasons whose claim is a plain fact of the graph state it truly. */
static kf_status check_reason(const kf_plan *plan, const scratch *s, const kf_plan_edge *pe,
                              uint32_t e) {
    const kf_graph *g = plan->graph;
    const kf_tensor *p = g->nodes[pe->producer], *c = g->nodes[pe->consumer];
    bool ok = true;
    switch (pe->reason) {
    case KF_REASON_GRAPH_OUTPUT:
        ok = false;
        for (uint32_t o = 0; o < g->n_outputs && !ok; o++)
            ok = g->outputs[o].tensor == p;
        break;
    case KF_REASON_MULTIPLE_CONSUMERS:
        ok = s->uses[p->id] >= 2;
        break;
    case KF_REASON_SOURCE:
        ok = kf_op_has(p->op, KF_TRAIT_SOURCE);
        break;
    case KF_REASON_LAYOUT_CHANGE: /* a layout op, or a slice the plan made a view */
        ok = kf_op_has(p->op, KF_TRAIT_LAYOUT) || kf_op_has(c->op, KF_TRAIT_LAYOUT) ||
             p->op == KF_OP_SLICE || c->op == KF_OP_SLICE;
        break;
    case KF_REASON_AXIS_NOT_INNERMOST:
        ok = (kf_op_has(p->op, KF_TRAIT_ROWWISE) && p->attr.axis != p->src[0]->rank - 1) ||
             (kf_op_has(c->op, KF_TRAIT_ROWWISE) && c->attr.axis != c->src[0]->rank - 1);
        break;
    default:
        break;
    }
    if (!ok)
        return check_fail(plan,
                          "S8: edge %u (%%%u %s -> %%%u %s) gives reason %s, which does "
                          "not hold",
                          e, p->id, kf_op_get(p->op)->name, c->id, kf_op_get(c->op)->name,
                          kf_reason_code(pe->reason));
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
            return check_fail(plan,
                              "S7: edge %u (%%%u -> %%%u slot %d) is not an edge of the graph", e,
                              pe->producer, pe->consumer, pe->slot);
        if ((unsigned)pe->reason >= KF_REASON_COUNT || pe->reason == KF_REASON_NONE)
            return check_fail(plan, "S7: edge %u (%%%u -> %%%u) has no reason code", e,
                              pe->producer, pe->consumer);
        const kf_tensor *p = g->nodes[pe->producer];
        uint32_t gp = s->computed_by[pe->producer], gc = s->computed_by[pe->consumer];
        kf_status rs = check_reason(plan, s, pe, e);
        if (rs != KF_OK)
            return rs;
        if (p->op == KF_OP_INPUT || p->op == KF_OP_CONST || is_inline_source(p))
            continue; /* edges from sources (reason SOURCE) are informative only */
        if (gp != KF_NONE && gc != KF_NONE &&
            (gp == gc || group_computes(&plan->groups[gc], pe->producer)))
            return check_fail(plan,
                              "S7: edge %u (%%%u -> %%%u) says %s, but group %u computes "
                              "both",
                              e, pe->producer, pe->consumer, kf_reason_code(pe->reason), gp);
        if (pe->from_group != gp || pe->to_group != gc)
            return check_fail(plan,
                              "S7: edge %u (%%%u -> %%%u) names groups %u -> %u; they are "
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
            if (s->computed_by[p->id] == gc || group_computes(&plan->groups[gc], p->id))
                continue; /* fused (a recomputed prologue is fused where it is recomputed) */
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
        return check_fail(plan, "S1: the plan has %u groups and a NULL group list", plan->n_groups);
    for (uint32_t gi = 0; gi < plan->n_groups; gi++) {
        kf_status st = check_group(plan, s, gi);
        if (st != KF_OK)
            return st;
    }

    /* S6: what the outputs need, and group_of[]. */
    for (uint32_t i = 0; i < g->n_outputs; i++) {
        s->need[g->outputs[i].tensor->id] = true;
        s->uses[g->outputs[i].tensor->id]++;
    }
    for (uint32_t i = g->n_nodes; i-- > 0;) {
        if (!s->need[i])
            continue;
        const kf_tensor *t = g->nodes[i];
        for (int k = 0; k < t->nsrc; k++) {
            s->need[t->src[k]->id] = true;
            s->uses[t->src[k]->id]++;
        }
        if (t->op != KF_OP_INPUT && t->op != KF_OP_CONST && s->computed_by[i] == KF_NONE)
            return check_fail(plan,
                              "S6: %%%u (%s) is needed by the outputs but no group computes "
                              "it",
                              i, kf_op_get(t->op)->name);
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
            return check_fail(plan,
                              "S5: graph output '%s' (%%%u, %s) is not materialized by any "
                              "group",
                              g->outputs[i].name, t->id, kf_op_get(t->op)->name);
    }
    for (uint32_t gi = 0; gi < plan->n_groups; gi++) {
        const kf_group *grp = &plan->groups[gi];
        for (uint32_t i = 0; i < grp->n_writes; i++) {
            uint32_t w = grp->writes[i];
            bool is_out = false;
            for (uint32_t o = 0; o < g->n_outputs && !is_out; o++)
                is_out = g->outputs[o].tensor->id == w;
            if (!is_out && (s->last_read[w] == KF_NONE || s->last_read[w] <= gi))
                return check_fail(plan,
                                  "S5: group %u writes %%%u (%s), which is no graph output "
                                  "and which no later group reads",
                                  gi, w, kf_op_get(g->nodes[w]->op)->name);
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
    if (st == KF_OK)
        st = kf_plan_check_gemm_siblings(plan);
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
    int64_t n = kf_ir_numel(t), bound = kf_ir_index_bound(t->graph, t);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix(rng);
        double v;
        if (t->dtype == KF_DTYPE_BOOL)
            v = (double)(r & 1);
        else if (bound > 0) /* a gather's indices, in range */
            v = (double)(r % (uint64_t)bound);
        else if (t->dtype == KF_DTYPE_I32 || t->dtype == KF_DTYPE_I64)
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

/* ------------------------------------------------------------------------ */
/* Expressions: each group's scalar-expression DAG, interpreted               */
/* ------------------------------------------------------------------------ */

/* The node-by-node execution above proves the plan's bookkeeping; this part
 * proves the expressions the backends lower. Every node is evaluated over its
 * whole index space as an array of doubles (E1-E6 below), and every node that
 * stands for a graph tensor must equal that tensor's reference value (broadcast
 * into the node's space), and every root must equal the tensor it writes:
 *
 *   E1  OP nodes apply a table op that is ELEMENTWISE and not a source; their
 *       operands are earlier nodes whose space broadcasts into theirs. They
 *       are computed by kf_ir_eval_node on stand-in tensors, so the op
 *       semantics are the reference evaluator's own; a node with a tensor
 *       rounds to its dtype, one without computes in double.
 *   E2  LOAD reads base's values at sum(index * strides), in bounds, and base
 *       is in the group's reads, or is the buffer of a view the group reads,
 *       or is computed in the group (a row stage that re-reads its input).
 *   E3  ACC is the anchor matmul's value; SCORE is the Q.K^T matmul's value;
 *       ROW/COL/BATCH/HEAD/Q_IDX/KV_IDX/INDEX are indices of the node's space.
 *   E4  STAT nodes reduce the row stage's input node along its axis; the node's
 *       space is the row space, or it with the axis kept as 1, or removed.
 *   E5  A node downstream of a statistic other than MAX is compared with a
 *       per-dtype tolerance on ||a - b|| / ||b||, twice kf_ir_tolerance's (f64
 *       2e-12, f32 2e-5, f16 4e-3, bf16 3.2e-2), that of the least precise
 *       float dtype computed on the way
 *       to it (kf_ir_path_dtype), or, past it, must apply its tensor's op to
 *       nodes standing for the tensor's operands (an ill-conditioned op, such
 *       as cos of a large value, amplifies the statistic's rounding past any
 *       fixed tolerance); NaN and infinities must sit where the reference has them;
 *       bool and i32 nodes downstream of such statistics are not compared.
 *       Every other node must match bit for bit.
 *   E6  writes[i]'s root node equals writes[i]; a write without a root is a
 *       matmul (GEMM without epilogue), the attention output, or a VIEW.
 *   E7  an attention mask classified causal or sliding-window (which lets a
 *       backend skip whole tiles) gives probability 0 wherever it skips.
 *   E8  the descriptors backends launch from are the group's own: GEMM anchors
 *       are matmuls it computes, with their operands, transposes and M/N/K/
 *       batch (SwiGLU's two share A; an A prologue is a norm it computes, and
 *       its root node equals that norm); attention is matmul -> softmax over
 *       the last axis -> matmul(P, V) with the right q/k/v, transposes and
 *       sizes, its score root equals the softmax's operand, and it writes
 *       P.V (or an absorbed permute of it) at row-major strides; a row stage
 *       names a row-wise op it computes, with that op's axis, length and eps,
 *       and its input node equals the op's operand; a GEMM's row epilogue is
 *       over its output rows (length N), split (gemm.row_split) exactly when
 *       N passes the plan's tile-row limit, and a split one is a norm whose
 *       statistics merge across tiles (mean, rstd, rms_rstd) within
 *       gemm_row_split_max_n.
 *   E9  a VIEW's values are its base's buffer read through view_offset and
 *       view_strides, in bounds, and a view called contiguous has row-major
 *       strides and no offset.
 */

typedef struct xspace {
    int rank;
    int64_t dims[KF_MAX_RANK];
} xspace;

typedef struct xstate {
    const kf_plan *plan;
    const kf_group *grp;
    uint32_t gi;
    const kf_eval_state *vals; /* the graph tensors' values (node-mode execution) */
    kf_graph *scratch;         /* owns nothing; its allocator and notes serve the stand-ins */
    kf_tensor *fake;           /* n_expr stand-in tensors */
    double **v;                /* n_expr value arrays */
    bool *inexact;
    uint32_t n;
} xstate;

static xspace space_of(const kf_group *grp, kf_space sp) {
    xspace s = {0};
    if (sp == KF_SPACE_ROW) {
        s.rank = grp->row_rank;
        memcpy(s.dims, grp->row_dims, sizeof s.dims);
    } else {
        s.rank = grp->rank;
        memcpy(s.dims, grp->dims, sizeof s.dims);
    }
    return s;
}

static int64_t space_numel(const xspace *s) {
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->dims[i];
    return n;
}

/* Index of flat element i along axis `axis` of space s. */
static int64_t index_along(const xspace *s, int64_t i, int axis) {
    int64_t inner = 1;
    for (int d = s->rank - 1; d > axis; d--)
        inner *= s->dims[d];
    return (i / inner) % s->dims[axis];
}

/* Does shape (rank, dims) broadcast into space s (numpy, right-aligned)? */
static bool shape_fits(int rank, const int64_t *dims, const xspace *s) {
    if (rank > s->rank)
        return false;
    for (int i = 1; i <= rank; i++)
        if (dims[rank - i] != 1 && dims[rank - i] != s->dims[s->rank - i])
            return false;
    return true;
}

/* Offset into a value of shape (rank, dims) for flat element i of space s it
 * broadcasts into. */
static int64_t bcast_offset(int rank, const int64_t *dims, const xspace *s, int64_t i) {
    int64_t off = 0, stride = 1;
    for (int d = s->rank - 1, k = rank - 1; d >= 0; d--, k--) {
        int64_t idx = i % s->dims[d];
        i /= s->dims[d];
        if (k >= 0) {
            if (dims[k] != 1)
                off += idx * stride;
            stride *= dims[k];
        }
    }
    return off;
}

/* The plan checker compares two evaluations that both round (a statistic
 * summed in another order flips some roundings of everything downstream of
 * it), so it allows twice what kf_ir_tolerance allows one result; -1 for
 * i32 and bool (not compared when inexact). */
static double dtype_tol(kf_dtype d) {
    return kf_dtype_is_float(d) ? 2.0 * kf_ir_tolerance(d) : -1.0;
}

/* Compares node values a (over space s) with tensor t's values b (broadcast
 * into s). Returns false and fills `why` on a mismatch. */
static bool values_agree(const double *a, const xspace *s, const kf_tensor *t, const double *b,
                         bool inexact, char *why, size_t why_size) {
    int64_t n = space_numel(s);
    double num = 0.0, den = 0.0, tol = dtype_tol(t->dtype);
    if (inexact && tol < 0)
        return true;
    /* A value that went through a less precise dtype on its way here carries
     * that dtype's rounding: a statistic summed in another order flips some
     * of its roundings (a bf16 layer_norm cast to f32 differed by one bf16
     * ulp in one element: plancheck seed 0x0000941e6b0283c4). */
    if (inexact)
        tol = dtype_tol(kf_ir_path_dtype(t->graph, t));
    for (int64_t i = 0; i < n; i++) {
        double x = a[i], y = b[bcast_offset(t->rank, t->dims, s, i)];
        bool ok;
        if (isnan(y) || isnan(x))
            ok = isnan(x) && isnan(y);
        else if (!inexact || isinf(y) || isinf(x))
            ok = x == y && (inexact || signbit(x) == signbit(y));
        else {
            ok = true;
            num += (x - y) * (x - y);
            den += y * y;
        }
        if (!ok) {
            snprintf(why, why_size, "element %lld: expression %.17g, reference %.17g", (long long)i,
                     x, y);
            return false;
        }
    }
    if (inexact && num > 0 && sqrt(num) > tol * sqrt(den)) {
        snprintf(why, why_size, "relative error %.3g exceeds %.3g for %s", sqrt(num / den), tol,
                 kf_dtype_name(t->dtype));
        return false;
    }
    return true;
}

static bool group_reads(const kf_group *grp, uint32_t t) {
    for (uint32_t i = 0; i < grp->n_reads; i++)
        if (grp->reads[i] == t)
            return true;
    return false;
}

static bool group_computes(const kf_group *grp, uint32_t t) {
    for (uint32_t i = 0; i < grp->n_computed; i++)
        if (grp->computed[i] == t)
            return true;
    return false;
}

/* Does the group read a view (computed by a VIEW group) whose buffer is `base`? */
static bool reads_view_of(const kf_plan *plan, const kf_group *grp, uint32_t base) {
    for (uint32_t i = 0; i < grp->n_reads; i++) {
        uint32_t r = grp->reads[i];
        uint32_t gv = plan->group_of ? plan->group_of[r] : KF_NONE;
        if (gv != KF_NONE && gv < plan->n_groups && plan->groups[gv].kind == KF_GROUP_VIEW &&
            plan->groups[gv].view_base == base)
            return true;
    }
    return false;
}

/* The value of graph tensor `id` as the group sees it, or NULL. */
static const double *tensor_value(const xstate *x, uint32_t id) {
    return id < x->plan->graph->n_nodes ? x->vals->values[id] : NULL;
}

/* E4: one statistic for every element of node k's space. */
static kf_status eval_stat(xstate *x, uint32_t k, const xspace *s, double *out) {
    const kf_plan *plan = x->plan;
    const kf_group *grp = x->grp;
    const kf_expr *e = &grp->expr[k];
    const kf_row_stage *row = &grp->row;
    if (!row->present || row->input >= k)
        return check_fail(plan,
                          "E4: group %u node %u is a STAT but the group has no row stage "
                          "input before it",
                          x->gi, k);
    xspace rs = space_of(grp, grp->expr[row->input].space);
    int a = row->axis;
    if (a < 0 || a >= rs.rank || rs.dims[a] != row->length)
        return check_fail(plan,
                          "E4: group %u's row stage axis %d / length %lld does not match "
                          "its input space (rank %d)",
                          x->gi, a, (long long)row->length, rs.rank);
    int64_t L = rs.dims[a], inner = 1;
    for (int d = a + 1; d < rs.rank; d++)
        inner *= rs.dims[d];
    /* How node k's space maps onto rows. */
    int mode = -1; /* 0: full row space, 1: kept axis of 1 or removed axis */
    if (s->rank == rs.rank) {
        bool same = true, kept = true;
        for (int d = 0; d < s->rank; d++) {
            same = same && s->dims[d] == rs.dims[d];
            kept = kept && (d == a ? s->dims[d] == 1 : s->dims[d] == rs.dims[d]);
        }
        mode = same ? 0 : kept ? 1 : -1;
    } else if (s->rank == rs.rank - 1) {
        bool removed = true;
        for (int d = 0; d < s->rank; d++)
            removed = removed && s->dims[d] == rs.dims[d < a ? d : d + 1];
        mode = removed ? 1 : -1;
    }
    if (mode < 0)
        return check_fail(plan,
                          "E4: group %u node %u (STAT %s) lives in a space that is neither "
                          "the row stage's nor it reduced",
                          x->gi, k, kf_stat_name(e->stat));
    const double *in = x->v[row->input];
    int64_t n = space_numel(s);
    for (int64_t i = 0; i < n; i++) {
        int64_t r = mode == 1 ? i : (i / (L * inner)) * inner + i % inner;
        int64_t o = r / inner, c = r % inner;
        const double *base = in + o * L * inner + c;
        double mx = -INFINITY, sum = 0.0, acc = 0.0, v;
        int64_t arg = 0; /* the first NaN, else the first max */
        bool nan = false;
        for (int64_t j = 0; j < L; j++) {
            double xj = base[j * inner];
            if (!nan && (isnan(xj) || xj > mx))
                arg = j;
            nan = nan || isnan(xj);
            if (xj > mx)
                mx = xj;
            sum += xj;
        }
        double mean = sum / (double)L;
        switch (e->stat) {
        case KF_STAT_MAX:
            v = nan ? NAN : mx;
            break;
        case KF_STAT_SUM:
            v = sum;
            break;
        case KF_STAT_ARGMAX:
            v = (double)arg;
            break;
        case KF_STAT_MEAN:
            v = mean;
            break;
        case KF_STAT_RSTD:
        case KF_STAT_RMS_RSTD: {
            /* As the reference defines the norms: a row beyond 2^500 is
             * scaled by 2^-e first, whose squares cannot overflow, and the
             * statistic is scaled back (1 / sqrt of a sum of squares that
             * overflowed would be 0 where the norm is finite: a row of f64
             * values up to 2.8e184, plancheck seed 0x0000043e6b0513cd). */
            kf_ir_norm_row nr = kf_ir_norm_stats(base, L, inner, row->eps, e->stat == KF_STAT_RSTD);
            /* A scaled constant row whose eps underflowed normalizes to 0. */
            v = nr.e != 0 && nr.denom == 0.0 ? 0.0 : ldexp(1.0 / nr.denom, -nr.e);
            break;
        }
        case KF_STAT_SUMEXP:
            for (int64_t j = 0; j < L; j++)
                acc += exp(base[j * inner] - (nan ? NAN : mx));
            v = acc;
            break;
        default:
            return check_fail(plan, "E4: group %u node %u has stat %d", x->gi, k, (int)e->stat);
        }
        out[i] = v;
    }
    return KF_OK;
}

/* E3 for a head-split GEMM group (gemm.head_dim): ACC at (batch.., m, h, d)
 * (heads_first: (batch.., h, m, d)) is the product at (batch.., m, h * D + c),
 * c = d, or the value of its column node, which must lie in [0, D): the
 * partner a backend reads from the accumulators of the same head. */
static kf_status eval_head_acc(xstate *x, uint32_t k, const xspace *s, double *out) {
    const kf_plan *plan = x->plan;
    const kf_group *grp = x->grp;
    const kf_gemm_info *gm = &grp->gemm;
    const kf_expr *e = &grp->expr[k];
    uint32_t t = gm->anchor[0];
    const double *tv = t < plan->graph->n_nodes ? tensor_value(x, t) : NULL;
    int r = s->rank;
    int64_t D = gm->head_dim;
    if (!tv || e->anchor != 0 || e->space != KF_SPACE_OUT || r < 3 || s->dims[r - 1] != D ||
        kf_ir_numel(plan->graph->nodes[t]) != space_numel(s))
        return check_fail(plan,
                          "E3: group %u node %u is a head-split accumulator that does not "
                          "fit the product %%%u",
                          x->gi, k, t);
    const double *cv = NULL;
    if (e->src[0] != KF_NONE) {
        uint32_t src = e->src[0];
        if (src >= k || grp->expr[src].dtype != KF_DTYPE_I32 ||
            !shape_fits(x->fake[src].rank, x->fake[src].dims, s))
            return check_fail(plan,
                              "E3: group %u node %u's column is node %u: not an earlier i32 "
                              "node of its space",
                              x->gi, k, src);
        cv = x->v[src];
    }
    int ma = gm->heads_first ? r - 2 : r - 3, ha = gm->heads_first ? r - 3 : r - 2;
    int64_t n = space_numel(s);
    for (int64_t i = 0; i < n; i++) {
        int64_t c = index_along(s, i, r - 1);
        if (cv) {
            double v = cv[bcast_offset(x->fake[e->src[0]].rank, x->fake[e->src[0]].dims, s, i)];
            if (!(v >= 0 && v < (double)D))
                return check_fail(plan,
                                  "E3: group %u node %u reads column %g of a head of %lld: "
                                  "outside the head",
                                  x->gi, k, v, (long long)D);
            c = (int64_t)v;
        }
        int64_t bflat = 0;
        for (int d = 0; d < r - 3; d++)
            bflat = bflat * s->dims[d] + index_along(s, i, d);
        int64_t row = bflat * gm->m + index_along(s, i, ma);
        out[i] = tv[row * gm->n + index_along(s, i, ha) * D + c];
    }
    return KF_OK;
}

/* Evaluates node k into x->v[k]. */
static kf_status eval_expr_node(xstate *x, uint32_t k) {
    const kf_plan *plan = x->plan;
    const kf_graph *g = plan->graph;
    const kf_group *grp = x->grp;
    const kf_expr *e = &grp->expr[k];
    if ((unsigned)e->space >= KF_SPACE_COUNT || (unsigned)e->kind >= KF_EXPR_COUNT ||
        (unsigned)e->dtype >= KF_DTYPE_COUNT)
        return check_fail(plan, "E1: group %u node %u has kind %d, space %d, dtype %d", x->gi, k,
                          (int)e->kind, (int)e->space, (int)e->dtype);
    xspace s = space_of(grp, e->space);
    if (s.rank < 0 || s.rank > KF_MAX_RANK)
        return check_fail(plan, "E1: group %u node %u's space has rank %d", x->gi, k, s.rank);
    int64_t n = space_numel(&s);
    kf_tensor *f = &x->fake[k];
    memset(f, 0, sizeof *f);
    f->graph = x->scratch;
    f->id = k;
    f->rank = s.rank;
    memcpy(f->dims, s.dims, sizeof f->dims);
    f->dtype = e->dtype;

    if (e->kind == KF_EXPR_OP) {
        if ((unsigned)e->op >= KF_OP_COUNT || !kf_op_has(e->op, KF_TRAIT_ELEMENTWISE) ||
            kf_op_has(e->op, KF_TRAIT_SOURCE))
            return check_fail(plan,
                              "E1: group %u node %u applies op %d, which is not an "
                              "elementwise op",
                              x->gi, k, (int)e->op);
        const kf_op_info *info = kf_op_get(e->op);
        int arity = kf_form_arity(info->form);
        bool inexact = false;
        f->op = e->op;
        f->nsrc = arity;
        f->attr.to = e->dtype;
        /* Without a tensor the node computes in double (casts still convert). */
        if (e->tensor == KF_NONE && kf_dtype_is_float(e->dtype) && e->op != KF_OP_CAST)
            f->dtype = KF_DTYPE_F64;
        for (int i = 0; i < arity; i++) {
            uint32_t src = e->src[i];
            if (src >= k)
                return check_fail(plan,
                                  "E1: group %u node %u's operand %d is node %u, not an "
                                  "earlier node",
                                  x->gi, k, i, src);
            if (!shape_fits(x->fake[src].rank, x->fake[src].dims, &s))
                return check_fail(plan,
                                  "E1: group %u node %u (%s, space %d) reads node %u of "
                                  "space %d, which does not broadcast into it",
                                  x->gi, k, info->name, (int)e->space, src,
                                  (int)grp->expr[src].space);
            f->src[i] = &x->fake[src];
            inexact = inexact || x->inexact[src];
        }
        x->inexact[k] = inexact;
        kf_eval_state st = {.graph = x->scratch, .values = x->v};
        kf_status rc = kf_ir_eval_node(&st, f);
        if (rc != KF_OK)
            return rc == KF_ERR_OUT_OF_MEMORY
                       ? kf_ir_note(plan->graph, rc, "plan check: out of memory")
                       : check_fail(plan, "E1: group %u node %u: %s", x->gi, k,
                                    kf_ir_error(x->scratch));
        return KF_OK;
    }

    double *out = kf_mem_alloc(&x->scratch->mem, sizeof(double) * (size_t)n);
    if (!out)
        return kf_ir_note(plan->graph, KF_ERR_OUT_OF_MEMORY, "plan check: out of memory");
    x->v[k] = out;
    x->inexact[k] = false;
    switch (e->kind) {
    case KF_EXPR_LOAD: {
        if (e->base >= g->n_nodes || e->tensor >= g->n_nodes)
            return check_fail(plan, "E2: group %u node %u loads tensor %u from base %u", x->gi, k,
                              e->tensor, e->base);
        if (!group_reads(grp, e->base) && !group_computes(grp, e->base) &&
            !reads_view_of(plan, grp, e->base))
            return check_fail(plan,
                              "E2: group %u node %u loads from %%%u, which the group does "
                              "not read",
                              x->gi, k, e->base);
        const kf_tensor *b = g->nodes[e->base];
        const double *bv = tensor_value(x, e->base);
        if (!bv)
            return check_fail(plan, "E2: group %u node %u loads from %%%u, which has no value",
                              x->gi, k, e->base);
        int64_t bn = kf_ir_numel(b);
        const double *dv[3] = {NULL, NULL, NULL};
        for (int j = 0; j < 3; j++) {
            uint32_t src = e->src[j];
            if (src == KF_NONE)
                continue;
            if (src >= k || !shape_fits(x->fake[src].rank, x->fake[src].dims, &s) ||
                grp->expr[src].dtype != KF_DTYPE_I32)
                return check_fail(plan,
                                  "E2: group %u node %u's coordinate %d is node %u: not an "
                                  "earlier i32 node of its space",
                                  x->gi, k, j, src);
            dv[j] = x->v[src];
        }
        for (int64_t i = 0; i < n; i++) {
            int64_t off = e->offset, rem = i;
            for (int j = 0; j < 3; j++)
                if (dv[j])
                    off += (int64_t)dv[j][bcast_offset(x->fake[e->src[j]].rank,
                                                       x->fake[e->src[j]].dims, &s, i)] *
                           e->dyn_strides[j];
            for (int d = s.rank - 1; d >= 0; d--) {
                off += (rem % s.dims[d]) * e->strides[d];
                rem /= s.dims[d];
            }
            if (off < 0 || off >= bn)
                return check_fail(plan,
                                  "E2: group %u node %u loads element %lld of %%%u, which "
                                  "has %lld",
                                  x->gi, k, (long long)off, e->base, (long long)bn);
            out[i] = bv[off];
        }
        break;
    }
    case KF_EXPR_CONST:
        for (int64_t i = 0; i < n; i++)
            out[i] = e->value;
        break;
    case KF_EXPR_INDEX:
        if (e->axis < 0 || e->axis >= s.rank)
            return check_fail(plan, "E3: group %u node %u indexes axis %d of a rank-%d space",
                              x->gi, k, e->axis, s.rank);
        for (int64_t i = 0; i < n; i++)
            out[i] = kf_ir_round(e->dtype, (double)index_along(&s, i, e->axis));
        break;
    case KF_EXPR_ROW:
    case KF_EXPR_COL:
    case KF_EXPR_BATCH:
    case KF_EXPR_HEAD:
    case KF_EXPR_Q_IDX:
    case KF_EXPR_KV_IDX: {
        int from_end = e->kind == KF_EXPR_ROW || e->kind == KF_EXPR_Q_IDX    ? 2
                       : e->kind == KF_EXPR_COL || e->kind == KF_EXPR_KV_IDX ? 1
                       : e->kind == KF_EXPR_HEAD                             ? 3
                                                                             : 4;
        int axis = s.rank - from_end;
        for (int64_t i = 0; i < n; i++)
            out[i] = axis < 0 ? 0.0 : kf_ir_round(e->dtype, (double)index_along(&s, i, axis));
        break;
    }
    case KF_EXPR_ACC:
        if (grp->kind == KF_GROUP_GEMM && grp->gemm.head_dim > 0)
            return eval_head_acc(x, k, &s, out);
        if (e->src[0] != KF_NONE)
            return check_fail(plan,
                              "E3: group %u node %u reads the accumulator at a column node "
                              "outside a head-split GEMM group",
                              x->gi, k);
        /* fall through */
    case KF_EXPR_SCORE: {
        uint32_t t = e->kind == KF_EXPR_SCORE          ? grp->attn.qk
                     : e->anchor >= 0 && e->anchor < 2 ? grp->gemm.anchor[e->anchor]
                                                       : KF_NONE;
        const double *tv = t != KF_NONE ? tensor_value(x, t) : NULL;
        if (!tv || !shape_fits(g->nodes[t]->rank, g->nodes[t]->dims, &s))
            return check_fail(plan,
                              "E3: group %u node %u (%s) names anchor %%%u, which has no "
                              "value or does not fit the node's space",
                              x->gi, k, kf_expr_kind_name(e->kind), t);
        for (int64_t i = 0; i < n; i++)
            out[i] = tv[bcast_offset(g->nodes[t]->rank, g->nodes[t]->dims, &s, i)];
        break;
    }
    case KF_EXPR_STAT: {
        kf_status rc = eval_stat(x, k, &s, out);
        if (rc != KF_OK)
            return rc;
        x->inexact[k] = e->stat != KF_STAT_MAX && e->stat != KF_STAT_ARGMAX;
        break;
    }
    default:
        return check_fail(plan, "E1: group %u node %u has kind %d", x->gi, k, (int)e->kind);
    }
    if (e->tensor != KF_NONE && e->kind != KF_EXPR_LOAD)
        for (int64_t i = 0; i < n; i++)
            out[i] = kf_ir_round(e->dtype, out[i]);
    return KF_OK;
}

/* Whether node k applies tensor t's op, at t's dtype, to nodes that stand
 * for t's operands (each computes or loads the operand tensor, or is a
 * constant equal to a one-element operand). Such a node is t by
 * construction, given operands that passed their own comparison: a value
 * that still departs from t's by more than E5's tolerance carries an
 * upstream statistic's rounding, amplified by the op (cos of a value near
 * 1e12: plancheck seed 0x00008a146b07d735, graph 0x324b7d436374613e). */
static bool applies_op_of(xstate *x, uint32_t k, const kf_tensor *tt) {
    const kf_expr *e = &x->grp->expr[k];
    if (e->kind != KF_EXPR_OP || e->op != tt->op || e->dtype != tt->dtype ||
        kf_form_arity(kf_op_get(e->op)->form) != tt->nsrc)
        return false;
    for (int i = 0; i < tt->nsrc; i++) {
        const kf_expr *o = &x->grp->expr[e->src[i]];
        const kf_tensor *ts = tt->src[i];
        if ((o->kind == KF_EXPR_OP || o->kind == KF_EXPR_LOAD) && o->tensor == ts->id &&
            !o->remapped)
            continue;
        const double *cv = o->kind == KF_EXPR_CONST ? tensor_value(x, ts->id) : NULL;
        if (!cv || kf_ir_numel(ts) != 1 ||
            !(cv[0] == o->value || (isnan(cv[0]) && isnan(o->value))))
            return false;
    }
    return true;
}

/* Compares node k with graph tensor t (E5/E6). */
static kf_status compare_node(xstate *x, uint32_t k, uint32_t t, const char *what) {
    const kf_plan *plan = x->plan;
    const kf_graph *g = plan->graph;
    if (t >= g->n_nodes)
        return check_fail(plan, "E6: group %u node %u stands for tensor %u; the graph has %u",
                          x->gi, k, t, g->n_nodes);
    const kf_tensor *tt = g->nodes[t];
    const double *tv = tensor_value(x, t);
    if (!tv)
        return KF_OK; /* a tensor nobody needs (the outputs do not reach it) */
    xspace s = space_of(x->grp, x->grp->expr[k].space);
    kf_tensor flat;
    if (x->grp->kind == KF_GROUP_LAYOUT && kf_ir_numel(tt) == space_numel(&s) &&
        !shape_fits(tt->rank, tt->dims, &s)) {
        /* A reshape copy iterates its source's shape and writes the same
         * row-major elements: compare element i with element i. */
        flat = *tt;
        flat.rank = s.rank;
        memcpy(flat.dims, s.dims, sizeof flat.dims);
        tt = &flat;
    }
    if (!shape_fits(tt->rank, tt->dims, &s))
        return check_fail(plan,
                          "E5: group %u node %u stands for %%%u (%s), whose shape does not "
                          "broadcast into the node's space (rank %d)",
                          x->gi, k, t, kf_op_get(tt->op)->name, s.rank);
    char why[200];
    if (!values_agree(x->v[k], &s, tt, tv, x->inexact[k], why, sizeof why) &&
        !(x->inexact[k] && applies_op_of(x, k, tt)))
        return check_fail(
            plan, "E5: group %u (%s %s) node %u (%s%s%s) %s %%%u (%s): %s", x->gi,
            kf_group_kind_name(x->grp->kind), x->grp->name, k,
            kf_expr_kind_name(x->grp->expr[k].kind), x->grp->expr[k].kind == KF_EXPR_OP ? " " : "",
            x->grp->expr[k].kind == KF_EXPR_OP ? kf_op_get(x->grp->expr[k].op)->name : "", what, t,
            kf_op_get(tt->op)->name, why);
    return KF_OK;
}

/* E7: a mask classified CAUSAL or SLIDING_WINDOW lets a backend skip whole
 * tiles, so every (q, kv) the class skips must carry probability 0 in the
 * reference softmax (or NaN, for a row masked entirely). */
static kf_status check_mask(const kf_plan *plan, uint32_t gi, const kf_eval_state *vals) {
    const kf_group *grp = &plan->groups[gi];
    const kf_attn_info *a = &grp->attn;
    if (a->mask != KF_MASK_CAUSAL && a->mask != KF_MASK_SLIDING_WINDOW)
        return KF_OK;
    if (a->softmax >= plan->graph->n_nodes)
        return check_fail(plan, "E7: attention group %u names softmax %u", gi, a->softmax);
    const kf_tensor *sm = plan->graph->nodes[a->softmax];
    const double *p = vals->values[sm->id];
    if (!p || sm->rank < 2)
        return KF_OK;
    xspace s = {.rank = sm->rank};
    memcpy(s.dims, sm->dims, sizeof s.dims);
    int64_t n = space_numel(&s);
    for (int64_t i = 0; i < n; i++) {
        int64_t q = index_along(&s, i, s.rank - 2), kv = index_along(&s, i, s.rank - 1);
        bool skipped = kv > q || (a->mask == KF_MASK_SLIDING_WINDOW && q - kv >= a->window);
        if (skipped && !(p[i] == 0.0 || isnan(p[i])))
            return check_fail(plan,
                              "E7: attention group %u (%s) classifies its mask as %s "
                              "(window %lld), but the softmax gives probability %.9g at q=%lld, "
                              "kv=%lld, which that mask skips",
                              gi, grp->name, kf_mask_kind_name(a->mask), (long long)a->window, p[i],
                              (long long)q, (long long)kv);
    }
    return KF_OK;
}

/* E8: the anchor descriptors a backend launches from name the group's own
 * matmuls, softmax and row op, with their operands, flags and sizes. */
static kf_status check_descriptors(const kf_plan *plan, uint32_t gi) {
    const kf_group *grp = &plan->groups[gi];
    const kf_graph *g = plan->graph;
    uint32_t n = g->n_nodes;
    if (grp->kind == KF_GROUP_GEMM) {
        const kf_gemm_info *gm = &grp->gemm;
        if (gm->n_anchors < 1 || gm->n_anchors > 2)
            return check_fail(plan, "E8: GEMM group %u has %d anchors", gi, gm->n_anchors);
        for (int i = 0; i < gm->n_anchors; i++) {
            uint32_t a = gm->anchor[i];
            if (a >= n || !kf_op_has(g->nodes[a]->op, KF_TRAIT_GEMM) || !group_computes(grp, a))
                return check_fail(plan,
                                  "E8: GEMM group %u's anchor %d (%u) is not a matmul it "
                                  "computes",
                                  gi, i, a);
            const kf_tensor *mm = g->nodes[a];
            if (gm->a[i] != mm->src[0]->id || gm->b[i] != mm->src[1]->id ||
                gm->transpose_a[i] != mm->attr.transpose_a ||
                gm->transpose_b[i] != mm->attr.transpose_b)
                return check_fail(plan,
                                  "E8: GEMM group %u's anchor %d (%%%u) is described with "
                                  "operands %%%u, %%%u (transposes %d, %d); it is matmul(%%%u, "
                                  "%%%u) (transposes %d, %d)",
                                  gi, i, a, gm->a[i], gm->b[i], gm->transpose_a[i],
                                  gm->transpose_b[i], mm->src[0]->id, mm->src[1]->id,
                                  mm->attr.transpose_a, mm->attr.transpose_b);
            if (gm->a_prologue &&
                (!kf_op_has(mm->src[0]->op, KF_TRAIT_NORM) || !group_computes(grp, gm->a[i])))
                return check_fail(plan,
                                  "E8: GEMM group %u has an A prologue but its anchor %d "
                                  "reads %%%u, which is no norm it computes",
                                  gi, i, gm->a[i]);
        }
        if (gm->n_anchors == 2 && gm->a[0] != gm->a[1])
            return check_fail(plan,
                              "E8: GEMM group %u's two anchors read different A operands "
                              "(%%%u, %%%u)",
                              gi, gm->a[0], gm->a[1]);
        const kf_tensor *mm = g->nodes[gm->anchor[0]], *a = mm->src[0];
        int64_t batch = 1;
        for (int d = 0; d < mm->rank - 2; d++)
            batch *= mm->dims[d];
        int64_t k = mm->attr.transpose_a ? a->dims[a->rank - 2] : a->dims[a->rank - 1];
        if (gm->m != mm->dims[mm->rank - 2] || gm->n != mm->dims[mm->rank - 1] || gm->k != k ||
            gm->batch != batch)
            return check_fail(plan,
                              "E8: GEMM group %u is described as M=%lld N=%lld K=%lld "
                              "batch=%lld; its matmul %%%u has M=%lld N=%lld K=%lld batch=%lld",
                              gi, (long long)gm->m, (long long)gm->n, (long long)gm->k,
                              (long long)gm->batch, mm->id, (long long)mm->dims[mm->rank - 2],
                              (long long)mm->dims[mm->rank - 1], (long long)k, (long long)batch);
        /* A head-split epilogue runs over the product's head view. */
        if (gm->head_dim > 0) {
            int r = grp->rank;
            bool ok = r == mm->rank + 1 && gm->n_anchors == 1 && !gm->row_epilogue &&
                      grp->dims[r - 1] == gm->head_dim && gm->n % gm->head_dim == 0 &&
                      grp->dims[gm->heads_first ? r - 3 : r - 2] == gm->n / gm->head_dim &&
                      grp->dims[gm->heads_first ? r - 2 : r - 3] == gm->m;
            for (int d = 0; ok && d < r - 3; d++)
                ok = grp->dims[d] == mm->dims[d];
            if (!ok)
                return check_fail(plan,
                                  "E8: GEMM group %u's head-split space (head_dim %lld) is not "
                                  "a head view of its matmul %%%u",
                                  gi, (long long)gm->head_dim, mm->id);
        }
        /* A row epilogue normalizes the output's rows: whole tile rows, or
         * split (reduced apart from the tiles) past the tile row,
         * which only a norm's mergeable statistics allow. */
        if (gm->row_epilogue &&
            (!grp->row.present || grp->row.space != KF_SPACE_OUT || grp->row.length != gm->n))
            return check_fail(plan,
                              "E8: GEMM group %u has a row epilogue but no row stage over its "
                              "output rows of N=%lld",
                              gi, (long long)gm->n);
        if (gm->row_split && !gm->row_epilogue)
            return check_fail(plan, "E8: GEMM group %u is split-row without a row epilogue", gi);
        if (gm->row_epilogue && gm->row_split != (gm->n > plan->options.gemm_row_epilogue_max_n))
            return check_fail(plan,
                              "E8: GEMM group %u's row epilogue over N=%lld is %s, but the tile "
                              "row limit is %lld",
                              gi, (long long)gm->n, gm->row_split ? "split" : "whole-row",
                              (long long)plan->options.gemm_row_epilogue_max_n);
        if (gm->row_split) {
            unsigned mergeable = 1u << KF_STAT_MEAN | 1u << KF_STAT_RSTD | 1u << KF_STAT_RMS_RSTD |
                                 1u << KF_STAT_SUM;
            if (grp->row.tensor >= n || !kf_op_has(g->nodes[grp->row.tensor]->op, KF_TRAIT_NORM) ||
                (grp->row.stats & ~mergeable) != 0 || gm->n > plan->options.gemm_row_split_max_n)
                return check_fail(plan,
                                  "E8: GEMM group %u is split-row but its row stage is not a norm "
                                  "with mergeable statistics and N=%lld <= %lld",
                                  gi, (long long)gm->n,
                                  (long long)plan->options.gemm_row_split_max_n);
        }
    }
    if (grp->kind == KF_GROUP_ATTENTION) {
        const kf_attn_info *at = &grp->attn;
        if (at->qk >= n || at->softmax >= n || at->pv >= n || !group_computes(grp, at->qk) ||
            !group_computes(grp, at->softmax) || !group_computes(grp, at->pv))
            return check_fail(plan,
                              "E8: attention group %u names anchors %u, %u, %u that it "
                              "does not compute",
                              gi, at->qk, at->softmax, at->pv);
        const kf_tensor *qk = g->nodes[at->qk], *sm = g->nodes[at->softmax], *pv = g->nodes[at->pv];
        if (!kf_op_has(qk->op, KF_TRAIT_GEMM) || !kf_op_has(sm->op, KF_TRAIT_SOFTMAX) ||
            !kf_op_has(pv->op, KF_TRAIT_GEMM) || pv->src[0] != sm || sm->attr.axis != sm->rank - 1)
            return check_fail(plan,
                              "E8: attention group %u is not matmul -> softmax(last axis) "
                              "-> matmul(P, V)",
                              gi);
        if (at->q != qk->src[0]->id || at->k != qk->src[1]->id || at->v != pv->src[1]->id ||
            at->q_transposed != qk->attr.transpose_a || at->k_transposed != qk->attr.transpose_b ||
            at->v_transposed != pv->attr.transpose_b || pv->attr.transpose_a)
            return check_fail(plan,
                              "E8: attention group %u's q/k/v or transposes do not match "
                              "its matmuls",
                              gi);
        if (at->sq != qk->dims[qk->rank - 2] || at->skv != qk->dims[qk->rank - 1] ||
            at->dv != pv->dims[pv->rank - 1])
            return check_fail(plan,
                              "E8: attention group %u's sizes (sq %lld, skv %lld, dv %lld) "
                              "do not match its matmuls",
                              gi, (long long)at->sq, (long long)at->skv, (long long)at->dv);
        /* The output is pv, or a permute of pv (keeping its last axis) the
         * group computes, whose row-major strides o_strides gives per pv axis. */
        const kf_tensor *o = at->out < n ? g->nodes[at->out] : NULL;
        bool out_ok = o && group_computes(grp, o->id) &&
                      (o == pv || (o->op == KF_OP_PERMUTE && o->src[0] == pv &&
                                   o->attr.perm[o->rank - 1] == o->rank - 1));
        int64_t acc = 1;
        for (int d = o && out_ok ? o->rank - 1 : -1; d >= 0 && out_ok; d--) {
            int a = o == pv ? d : o->attr.perm[d];
            out_ok = o->dims[d] == 1 || at->o_strides[a] == acc;
            acc *= o->dims[d];
        }
        if (!out_ok)
            return check_fail(plan,
                              "E8: attention group %u's output %u is not its P.V (or a permute "
                              "of it keeping the last axis) at that tensor's row-major strides",
                              gi, at->out);
        /* The log-sum-exp: a logsumexp over the last axis of the softmax's
         * operand, or of a cast of it to f32, that the group computes. */
        if (at->lse != KF_NONE) {
            const kf_tensor *l = at->lse < n ? g->nodes[at->lse] : NULL;
            const kf_tensor *ls = l ? l->src[0] : NULL;
            if (ls && ls != sm->src[0] && ls->op == KF_OP_CAST && ls->dtype == KF_DTYPE_F32 &&
                group_computes(grp, ls->id))
                ls = ls->src[0];
            if (!l || !group_computes(grp, l->id) || l->op != KF_OP_LOGSUMEXP ||
                l->attr.axis != l->src[0]->rank - 1 || ls != sm->src[0])
                return check_fail(plan,
                                  "E8: attention group %u's log-sum-exp %u is not a logsumexp "
                                  "over the last axis of its scores (or of their cast to f32) "
                                  "that it computes",
                                  gi, at->lse);
        }
    }
    if (grp->row.present) {
        const kf_row_stage *row = &grp->row;
        if (row->tensor >= n || !group_computes(grp, row->tensor) ||
            !kf_op_has(g->nodes[row->tensor]->op, KF_TRAIT_ROWWISE))
            return check_fail(plan,
                              "E8: group %u's row stage names %u, which is no row-wise op "
                              "it computes",
                              gi, row->tensor);
        const kf_tensor *r = g->nodes[row->tensor];
        if (row->op != r->op || row->axis != r->attr.axis ||
            row->length != r->src[0]->dims[r->attr.axis] ||
            (kf_op_has(r->op, KF_TRAIT_NORM) && row->eps != r->attr.eps))
            return check_fail(plan,
                              "E8: group %u's row stage (op %d, axis %d, length %lld, eps "
                              "%g) does not describe %%%u",
                              gi, (int)row->op, row->axis, (long long)row->length, row->eps, r->id);
        if (row->input >= grp->n_expr)
            return check_fail(plan, "E8: group %u's row stage input is node %u of %u", gi,
                              row->input, grp->n_expr);
    }
    return KF_OK;
}

/* E9: a VIEW group's view is its base's buffer read through view_strides
 * (what consumers and an aliasing output see), and a view called contiguous
 * has row-major strides. */
static kf_status check_view(const kf_plan *plan, uint32_t gi, const kf_eval_state *vals) {
    const kf_group *grp = &plan->groups[gi];
    const kf_graph *g = plan->graph;
    if (grp->n_computed != 1 || grp->view_base >= g->n_nodes)
        return check_fail(plan, "E9: VIEW group %u computes %u tensors from base %u", gi,
                          grp->n_computed, grp->view_base);
    const kf_tensor *v = g->nodes[grp->computed[0]], *b = g->nodes[grp->view_base];
    const double *vv = vals->values[v->id], *bv = vals->values[b->id];
    if ((!kf_op_has(v->op, KF_TRAIT_LAYOUT) && v->op != KF_OP_SLICE) ||
        grp->layout_copy_of != v->src[0]->id)
        return check_fail(plan, "E9: VIEW group %u's view %%%u is no reshape/permute/slice of %%%u",
                          gi, v->id, grp->layout_copy_of);
    if (!bv)
        return check_fail(plan, "E9: VIEW group %u's base %%%u is not in memory", gi, b->id);
    if (!vv || b->dtype != v->dtype)
        return KF_OK;
    xspace s = {.rank = v->rank};
    memcpy(s.dims, v->dims, sizeof s.dims);
    int64_t n = space_numel(&s), bn = kf_ir_numel(b), expect = 1;
    for (int d = v->rank - 1; d >= 0; d--) {
        if (grp->view_contiguous && v->dims[d] != 1 && grp->view_strides[d] != expect)
            return check_fail(plan,
                              "E9: VIEW group %u calls %%%u contiguous, but its stride "
                              "along axis %d is %lld, not %lld",
                              gi, v->id, d, (long long)grp->view_strides[d], (long long)expect);
        expect *= v->dims[d];
    }
    if (grp->view_contiguous && grp->view_offset != 0)
        return check_fail(plan, "E9: VIEW group %u calls %%%u contiguous at offset %lld", gi, v->id,
                          (long long)grp->view_offset);
    for (int64_t i = 0; i < n; i++) {
        int64_t off = grp->view_offset, rem = i;
        for (int d = s.rank - 1; d >= 0; d--) {
            off += (rem % s.dims[d]) * grp->view_strides[d];
            rem /= s.dims[d];
        }
        if (off < 0 || off >= bn)
            return check_fail(plan,
                              "E9: VIEW group %u's strides reach element %lld of base "
                              "%%%u, which has %lld",
                              gi, (long long)off, b->id, (long long)bn);
        bool same = isnan(vv[i]) ? isnan(bv[off]) : vv[i] == bv[off];
        if (!same)
            return check_fail(plan,
                              "E9: VIEW group %u: element %lld of view %%%u is %.17g, but "
                              "its base %%%u holds %.17g there",
                              gi, (long long)i, v->id, vv[i], b->id, bv[off]);
    }
    return KF_OK;
}

static kf_status check_group_exprs(const kf_plan *plan, uint32_t gi, const kf_eval_state *vals) {
    const kf_group *grp = &plan->groups[gi];
    const kf_graph *g = plan->graph;
    kf_status rc = KF_OK;
    xstate x = {.plan = plan, .grp = grp, .gi = gi, .vals = vals, .n = grp->n_expr};
    if (grp->n_expr && !grp->expr)
        return check_fail(plan, "E1: group %u has %u expression nodes and no node array", gi,
                          grp->n_expr);
    for (uint32_t i = 0; i < grp->n_writes; i++) {
        uint32_t r = grp->roots ? grp->roots[i] : KF_NONE, w = grp->writes[i];
        if (r != KF_NONE && r >= grp->n_expr)
            return check_fail(plan, "E6: group %u's root of %%%u is node %u of %u", gi, w, r,
                              grp->n_expr);
        if (r == KF_NONE && !kf_op_has(g->nodes[w]->op, KF_TRAIT_GEMM) &&
            grp->kind != KF_GROUP_VIEW &&
            !(grp->kind == KF_GROUP_ATTENTION && (w == grp->attn.out || w == grp->attn.lse)))
            return check_fail(plan,
                              "E6: group %u (%s %s) writes %%%u (%s) but has no expression "
                              "root for it",
                              gi, kf_group_kind_name(grp->kind), grp->name, w,
                              kf_op_get(g->nodes[w]->op)->name);
    }
    rc = check_descriptors(plan, gi);
    if (rc == KF_OK && grp->kind == KF_GROUP_VIEW)
        rc = check_view(plan, gi, vals);
    if (rc == KF_OK && grp->kind == KF_GROUP_ATTENTION)
        rc = check_mask(plan, gi, vals);
    if (rc != KF_OK)
        return rc;
    if (!grp->n_expr)
        return KF_OK;
    const kf_mem *m = &plan->graph->mem;
    x.scratch = kf_ir_graph_create(m, NULL);
    x.fake = kf_mem_calloc(m, x.n, sizeof *x.fake);
    x.v = kf_mem_calloc(m, x.n, sizeof *x.v);
    x.inexact = kf_mem_calloc(m, x.n, sizeof *x.inexact);
    if (!x.scratch || !x.fake || !x.v || !x.inexact)
        rc = kf_ir_note(plan->graph, KF_ERR_OUT_OF_MEMORY, "plan check: out of memory");
    for (uint32_t k = 0; k < x.n && rc == KF_OK; k++) {
        rc = eval_expr_node(&x, k);
        /* A LOAD's tensor is what it reads (through base and strides), which
         * a layout copy re-indexes: LOADs are judged by the nodes they feed. */
        /* A remapped node computes its tensor at other coordinates (under a
         * slice, concat or gather): it is judged by the nodes it feeds too. */
        if (rc == KF_OK && grp->expr[k].tensor != KF_NONE && grp->expr[k].kind != KF_EXPR_LOAD &&
            !grp->expr[k].remapped)
            rc = compare_node(&x, k, grp->expr[k].tensor, "stands for");
    }
    for (uint32_t i = 0; i < grp->n_writes && rc == KF_OK; i++)
        if (grp->roots && grp->roots[i] != KF_NONE)
            rc = compare_node(&x, grp->roots[i], grp->writes[i], "is the root of");
    /* The nodes the anchors consume: the row stage's input is the row op's
     * operand, a norm prologue's root is operand A, the score is the
     * softmax's operand. */
    if (rc == KF_OK && grp->row.present) {
        /* reduce_min's row input is its operand through the order-reversing
         * map of lower_min (neg, or -1 - x for i32), whose max it takes: the
         * map's own operand must be the row op's operand. */
        uint32_t in = grp->row.input;
        if (g->nodes[grp->row.tensor]->op == KF_OP_REDUCE_MIN) {
            const kf_expr *e = in < x.n ? &grp->expr[in] : NULL;
            bool neg = e && e->kind == KF_EXPR_OP && e->op == KF_OP_NEG;
            bool sub = e && e->kind == KF_EXPR_OP && e->op == KF_OP_SUB && e->src[0] < x.n &&
                       grp->expr[e->src[0]].kind == KF_EXPR_CONST &&
                       grp->expr[e->src[0]].value == -1.0;
            if (!neg && !sub)
                rc = check_fail(plan,
                                "E5: group %u's reduce_min row input (node %u) is not its "
                                "operand reversed (neg, or -1 - x)",
                                gi, in);
            else
                in = neg ? e->src[0] : e->src[1];
        }
        if (rc == KF_OK)
            rc = compare_node(&x, in, g->nodes[grp->row.tensor]->src[0]->id,
                              "is the row input, operand of");
    }
    if (rc == KF_OK && grp->kind == KF_GROUP_GEMM && grp->gemm.a_prologue) {
        if (grp->gemm.a_root >= x.n || grp->expr[grp->gemm.a_root].space != KF_SPACE_ROW)
            rc = check_fail(plan, "E8: GEMM group %u's prologue root is node %u", gi,
                            grp->gemm.a_root);
        else
            rc = compare_node(&x, grp->gemm.a_root, grp->gemm.a[0], "is the A prologue root,");
    }
    if (rc == KF_OK && grp->kind == KF_GROUP_ATTENTION) {
        if (grp->attn.score >= x.n)
            rc = check_fail(plan, "E8: attention group %u's score root is node %u of %u", gi,
                            grp->attn.score, x.n);
        else
            rc = compare_node(&x, grp->attn.score, g->nodes[grp->attn.softmax]->src[0]->id,
                              "is the score root, operand of");
    }
    if (x.v)
        for (uint32_t k = 0; k < x.n; k++)
            if (x.v[k])
                kf_mem_free(m, x.v[k], sizeof(double) * (size_t)kf_ir_numel(&x.fake[k]));
    kf_mem_free(m, x.v, sizeof *x.v * x.n);
    kf_mem_free(m, x.fake, sizeof *x.fake * x.n);
    kf_mem_free(m, x.inexact, sizeof *x.inexact * x.n);
    kf_ir_graph_destroy(x.scratch);
    return rc;
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
                           : check_fail(plan, "group %u: %s", gi, kf_ir_error(g));
        }
        kf_status xs = check_group_exprs(plan, gi, st);
        if (xs != KF_OK)
            return xs;
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
            bool same = isnan(b[i]) ? isnan(a[i]) : a[i] == b[i] && signbit(a[i]) == signbit(b[i]);
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
    /* Constants that are outputs come from the graph's own data (as inputs
     * do): the runtime copies them, no group computes them. */
    for (uint32_t o = 0; o < g->n_outputs && st == KF_OK; o++) {
        const kf_tensor *t = g->outputs[o].tensor;
        if (t->op == KF_OP_CONST && !got.values[t->id])
            st = kf_ir_eval_node(&got, t);
    }
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
