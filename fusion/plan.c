/*
 * plan.c -- the planner's pipeline: kf_plan_create builds the working state
 * (fusion/pass.h), runs the rule passes in order, lowers the result into a
 * kf_plan (fusion/lower.c) and frees the state.
 *
 *   verify graph ─► seed: one group per needed non-source tensor
 *        │           (matmul=GEMM, row op=ROWWISE|COLREDUCE, layout=VIEW, rest=ELEMENTWISE)
 *        ▼
 *   fuse_attention ─► fuse_swiglu ─► fuse_norm_prologue ─► fuse_gemm_epilogue
 *        ─► fuse_rowwise ─► fuse_elementwise ─► fuse_siblings ─► view_slices
 *        ─► fuse_gemm_siblings                        (each switchable; KF_DEBUG=1 dumps)
 *        ▼
 *   lower: order groups, build expressions, reads/writes, name kernels, list
 *          every unfused edge with its reason ─► kf_plan
 *
 * Anchors claim first (attention before the GEMMs it contains, SwiGLU before
 * the single-GEMM epilogue, norm prologues before GEMM epilogues so that a norm
 * feeding only GEMMs is recomputed in them rather than written), then row-wise
 * kernels take what the GEMMs left, and elementwise chains fuse; a slice
 * left on its own then becomes a view where its consumers can read one.
 *
 * THE INVARIANTS every rule keeps (rules cite them as [I1]..[I7]):
 *
 *  I1  Legality by traits. A rule decides from kf_op_has(op, KF_TRAIT_*),
 *      shapes, dtypes, axes and use counts -- never from op names -- except
 *      where the rule is about one op's math, and then through the expression.
 *  I2  Single materialization. A tensor that is a graph output or has a
 *      consumer outside its group is written exactly once, by its group.
 *      A producer joins its consumer's elementwise group only when every use
 *      of it is in that group (one shared node) and it is not a graph output.
 *      Anchored groups (GEMM, ROWWISE) may write several tensors of the
 *      anchor's output shape (multi-output epilogues); so may an elementwise
 *      group that gathered sibling groups (fuse_siblings: consumers of one
 *      tensor in memory, each writing a tensor of the same shape), within the
 *      bounds on outputs and kernel arguments of kf_plan_options.
 *  I3  Acyclic groups. Merging two groups never creates a path that leaves a
 *      group and comes back to it (kf_pl_can_merge); groups execute in a
 *      topological order.
 *  I4  Iteration space. Every tensor of an anchored group's epilogue has the
 *      anchor's output shape; everything else the group reads broadcasts into
 *      its space. A value larger than the anchor is never fused into it.
 *  I5  One anchor per kernel: a GEMM (or SwiGLU's pair sharing A), an attention
 *      chain, or one row stage (a row-wise op, a norm epilogue on a GEMM whose
 *      N fits one tile row -- or, split, whose statistics merge across tiles --
 *      or a norm prologue on operand A). Two anchors in a
 *      chain meet at a materialized tensor.
 *  I6  Row-wise ops fuse only when their axis is the last (innermost) one;
 *      reductions over another axis are COLREDUCE groups.
 *  I7  Every graph edge between two different groups carries a reason code.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/pass.h"

/* ------------------------------------------------------------------------ */
/* Names                                                                      */
/* ------------------------------------------------------------------------ */

static const char *const reason_codes[KF_REASON_COUNT] = {
#define KF_X(NAME, TEXT) #NAME,
    KF_REASONS(KF_X)
#undef KF_X
};
static const char *const reason_texts[KF_REASON_COUNT] = {
#define KF_X(NAME, TEXT) TEXT,
    KF_REASONS(KF_X)
#undef KF_X
};
static const char *const pass_names[KF_PASS_COUNT] = {
#define KF_X(NAME, TEXT) TEXT,
    KF_PASSES(KF_X)
#undef KF_X
};
_Static_assert(sizeof reason_codes / sizeof *reason_codes == KF_REASON_COUNT, "reason table");
_Static_assert(sizeof pass_names / sizeof *pass_names == KF_PASS_COUNT, "pass table");

const char *kf_reason_code(kf_reason r) {
    return (unsigned)r < KF_REASON_COUNT ? reason_codes[r] : "?";
}
const char *kf_reason_text(kf_reason r) {
    return (unsigned)r < KF_REASON_COUNT ? reason_texts[r] : "?";
}
const char *kf_pass_name(kf_pass_id pass) {
    return (unsigned)pass < KF_PASS_COUNT ? pass_names[pass] : "?";
}

/* ------------------------------------------------------------------------ */
/* Planner helpers (pass.h)                                                   */
/* ------------------------------------------------------------------------ */

bool kf_pl_is_source(const kf_tensor *t) { return kf_op_has(t->op, KF_TRAIT_SOURCE); }

bool kf_pl_is_elementwise(const kf_tensor *t) {
    return kf_op_has(t->op, KF_TRAIT_ELEMENTWISE) && !kf_op_has(t->op, KF_TRAIT_SOURCE);
}

uint32_t kf_pl_uses(const kf_planner *p, const kf_tensor *t) {
    return p->cons_off[t->id + 1] - p->cons_off[t->id];
}

kf_tensor *kf_pl_consumer(const kf_planner *p, const kf_tensor *t, uint32_t i) {
    return p->g->nodes[p->cons[p->cons_off[t->id] + i]];
}

bool kf_pl_single_use(const kf_planner *p, const kf_tensor *t) {
    return kf_pl_uses(p, t) == 1 && !p->is_output[t->id];
}

bool kf_pl_gemm_dtype_ok(kf_dtype d) {
    return d == KF_DTYPE_F32 || d == KF_DTYPE_F16 || d == KF_DTYPE_BF16;
}

bool kf_pl_axis_is_last(const kf_tensor *rowop) {
    return rowop->attr.axis == rowop->src[0]->rank - 1;
}

bool kf_pl_broadcasts_into(const kf_tensor *a, int rank, const int64_t *dims) {
    if (a->rank > rank)
        return false;
    for (int i = 0; i < a->rank; i++) {
        int64_t d = a->dims[a->rank - 1 - i];
        if (d != 1 && d != dims[rank - 1 - i])
            return false;
    }
    return true;
}

bool kf_pl_same_shape(const kf_tensor *a, const kf_tensor *b) {
    return a->rank == b->rank && memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) == 0;
}

static void member_add(kf_planner *p, uint32_t gi, uint32_t t) {
    kf_pgroup *pg = &p->groups[gi];
    p->mnext[t] = KF_NONE;
    if (pg->head == KF_NONE)
        pg->head = t;
    else
        p->mnext[pg->tail] = t;
    pg->tail = t;
    pg->size++;
    p->gid[t] = gi;
}

/* Takes t out of its group's list (a walk of that group only). */
static void member_remove(kf_planner *p, uint32_t gi, uint32_t t) {
    kf_pgroup *pg = &p->groups[gi];
    uint32_t prev = KF_NONE;
    for (uint32_t x = pg->head; x != KF_NONE; prev = x, x = p->mnext[x]) {
        if (x != t)
            continue;
        if (prev == KF_NONE)
            pg->head = p->mnext[x];
        else
            p->mnext[prev] = p->mnext[x];
        if (pg->tail == x)
            pg->tail = prev;
        pg->size--;
        break;
    }
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

uint32_t kf_pl_members(const kf_planner *p, uint32_t gi, uint32_t *out) {
    uint32_t n = 0;
    for (uint32_t x = p->groups[gi].head; x != KF_NONE; x = p->mnext[x])
        out[n++] = x;
    qsort(out, n, sizeof *out, cmp_u32);
    return n;
}

uint32_t kf_pl_new_group(kf_planner *p, kf_group_kind kind, kf_tensor *anchor) {
    if (!kf_mem_grow(p->mem, (void **)&p->groups, &p->cap_groups, p->n_groups + 1,
                     sizeof *p->groups))
        return KF_NONE;
    uint32_t gi = p->n_groups++;
    kf_pgroup *pg = &p->groups[gi];
    memset(pg, 0, sizeof *pg);
    pg->alive = true;
    pg->kind = kind;
    pg->anchor = anchor ? anchor->id : KF_NONE;
    pg->anchor2 = pg->row_op = pg->prologue = pg->softmax = pg->qk = pg->lse = pg->sib_of =
        pg->head_view = pg->gsib_set = KF_NONE;
    pg->head = pg->tail = KF_NONE;
    if (anchor) {
        uint32_t old = p->gid[anchor->id];
        if (old != KF_NONE) {
            member_remove(p, old, anchor->id);
            if (p->groups[old].size == 0)
                p->groups[old].alive = false;
        }
        member_add(p, gi, anchor->id);
    }
    return gi;
}

/* [I3] Merging the groups is legal when no path leaves their union through a
 * third group and comes back into it. */
bool kf_pl_can_merge_set(kf_planner *p, const uint32_t *groups, uint32_t n) {
    uint32_t epoch = ++p->epoch, gepoch = ++p->gepoch;
    uint32_t top = 0, maxid = 0;
    for (uint32_t i = 0; i < n; i++) {
        kf_pgroup *pg = &p->groups[groups[i]];
        pg->mark = gepoch;
        for (uint32_t t = pg->head; t != KF_NONE; t = p->mnext[t])
            maxid = t > maxid ? t : maxid;
    }
#define IN_SET(t) (p->gid[t] != KF_NONE && p->groups[p->gid[t]].mark == gepoch)
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t t = p->groups[groups[i]].head; t != KF_NONE; t = p->mnext[t]) {
            for (uint32_t k = p->cons_off[t]; k < p->cons_off[t + 1]; k++) {
                uint32_t c = p->cons[k];
                if (c < maxid && !IN_SET(c) && p->mark[c] != epoch) {
                    p->mark[c] = epoch;
                    p->stack[top++] = c;
                }
            }
        }
    }
    while (top) {
        uint32_t t = p->stack[--top];
        for (uint32_t k = p->cons_off[t]; k < p->cons_off[t + 1]; k++) {
            uint32_t c = p->cons[k];
            if (IN_SET(c))
                return false;
            if (c < maxid && p->mark[c] != epoch) {
                p->mark[c] = epoch;
                p->stack[top++] = c;
            }
        }
    }
#undef IN_SET
    return true;
}

bool kf_pl_can_merge(kf_planner *p, uint32_t a, uint32_t b) {
    uint32_t set[2] = {a, b};
    return kf_pl_can_merge_set(p, set, 2);
}

bool kf_pl_try_merge_list(kf_planner *p, uint32_t gi, const uint32_t *ids, uint32_t n) {
    uint32_t k = 0;
    p->gset[k++] = gi;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t o = p->gid[ids[i]];
        if (o != gi && o != KF_NONE)
            p->gset[k++] = o;
    }
    if (!kf_pl_can_merge_set(p, p->gset, k))
        return false;
    for (uint32_t i = 1; i < k; i++)
        kf_pl_merge(p, gi, p->gset[i]);
    return true;
}

void kf_pl_merge(kf_planner *p, uint32_t a, uint32_t b) {
    if (a == b || !p->groups[b].alive)
        return;
    kf_pgroup *ga = &p->groups[a], *gb = &p->groups[b];
    for (uint32_t t = gb->head; t != KF_NONE; t = p->mnext[t])
        p->gid[t] = a;
    if (gb->head != KF_NONE) {
        if (ga->head == KF_NONE)
            ga->head = gb->head;
        else
            p->mnext[ga->tail] = gb->head;
        ga->tail = gb->tail;
        ga->size += gb->size;
    }
    gb->head = gb->tail = KF_NONE;
    gb->size = 0;
    gb->alive = false;
}

static void set_reason(kf_planner *p, uint32_t edge, kf_reason r, const char *detail) {
    if (p->reason[edge] != KF_REASON_NONE)
        return; /* the first (most specific) reason wins */
    p->reason[edge] = r;
    snprintf(p->detail[edge], sizeof p->detail[edge], "%s", detail ? detail : "");
}

void kf_pl_reject(kf_planner *p, const kf_tensor *consumer, int slot, kf_reason r, const char *fmt,
                  ...) {
    char buf[96] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
    }
    set_reason(p, consumer->id * 3u + (uint32_t)slot, r, buf);
}

void kf_pl_reject_edge(kf_planner *p, const kf_tensor *producer, const kf_tensor *consumer,
                       kf_reason r, const char *detail) {
    for (int k = 0; k < consumer->nsrc; k++) {
        if (consumer->src[k] == producer)
            set_reason(p, consumer->id * 3u + (uint32_t)k, r, detail);
    }
}

/* ------------------------------------------------------------------------ */
/* Options, the pipeline                                                      */
/* ------------------------------------------------------------------------ */

void kf_plan_options_init(kf_plan_options *o) {
    memset(o, 0, sizeof *o);
    o->gemm_row_epilogue_max_n = KF_GEMM_ROW_EPILOGUE_MAX_N;
    o->gemm_row_split_max_n = 0; /* the split row form is asked for (KF_FLAG_SPLIT_ROW_NORMS) */
    o->norm_prologue_max_k = KF_NORM_PROLOGUE_MAX_K;
    o->sibling_max_outputs = KF_SIBLING_MAX_OUTPUTS;
    o->sibling_max_args = KF_SIBLING_MAX_ARGS;
    o->gemm_sibling_max = KF_GEMM_SIBLING_MAX;
}

typedef struct pass_entry {
    kf_pass_id id;
    kf_status (*run)(kf_planner *p);
} pass_entry;

static const pass_entry pipeline[] = {
    {KF_PASS_ATTENTION, kf_fuse_attention},
    {KF_PASS_SWIGLU, kf_fuse_swiglu},
    {KF_PASS_NORM_PROLOGUE, kf_fuse_norm_prologue},
    {KF_PASS_GEMM_EPILOGUE, kf_fuse_gemm_epilogue},
    {KF_PASS_ROWWISE, kf_fuse_rowwise},
    {KF_PASS_ELEMENTWISE, kf_fuse_elementwise},
    {KF_PASS_HEAD_EPILOGUE, kf_fuse_head_epilogue},
    {KF_PASS_SIBLINGS, kf_fuse_siblings},
    {KF_PASS_VIEW_SLICES, kf_view_slices},
    {KF_PASS_GEMM_SIBLINGS, kf_fuse_gemm_siblings},
};
_Static_assert(sizeof pipeline / sizeof *pipeline == KF_PASS_COUNT, "every pass in the pipeline");

static kf_group_kind seed_kind(const kf_tensor *t) {
    if (kf_op_has(t->op, KF_TRAIT_GEMM))
        return KF_GROUP_GEMM;
    if (kf_op_has(t->op, KF_TRAIT_ROWWISE))
        return kf_pl_axis_is_last(t) ? KF_GROUP_ROWWISE : KF_GROUP_COLREDUCE;
    if (kf_op_has(t->op, KF_TRAIT_LAYOUT))
        return KF_GROUP_VIEW;
    return KF_GROUP_ELEMENTWISE;
}

/* An iota is computed inline by every expression that uses it, except when
 * it must be in memory: a graph output, a GEMM or layout operand, or a norm's
 * weight or bias. Then it gets its own elementwise group, which writes it. */
static bool iota_in_memory(const kf_planner *p, const kf_tensor *t) {
    if (t->op != KF_OP_IOTA)
        return false;
    if (p->is_output[t->id])
        return true;
    for (uint32_t k = p->cons_off[t->id]; k < p->cons_off[t->id + 1]; k++) {
        const kf_tensor *c = p->g->nodes[p->cons[k]];
        if (kf_op_has(c->op, KF_TRAIT_GEMM) || kf_op_has(c->op, KF_TRAIT_LAYOUT) ||
            (kf_op_has(c->op, KF_TRAIT_NORM) && c->src[0] != t))
            return true;
    }
    return false;
}

static void planner_free(kf_planner *p) {
    const kf_mem *m = p->mem;
    size_t n = p->n;
    kf_mem_free(m, p->need, n * sizeof *p->need);
    kf_mem_free(m, p->is_output, n * sizeof *p->is_output);
    kf_mem_free(m, p->gid, n * sizeof *p->gid);
    kf_mem_free(m, p->groups, (size_t)p->cap_groups * sizeof *p->groups);
    kf_mem_free(m, p->cons_off, (n + 1) * sizeof *p->cons_off);
    kf_mem_free(m, p->cons, 3 * n * sizeof *p->cons);
    kf_mem_free(m, p->shared_prologue, n * sizeof *p->shared_prologue);
    kf_mem_free(m, p->reason, 3 * n * sizeof *p->reason);
    kf_mem_free(m, p->detail, 3 * n * sizeof *p->detail);
    kf_mem_free(m, p->stack, n * sizeof *p->stack);
    kf_mem_free(m, p->mark, n * sizeof *p->mark);
    kf_mem_free(m, p->list, n * sizeof *p->list);
    kf_mem_free(m, p->mnext, n * sizeof *p->mnext);
    kf_mem_free(m, p->gset, (n + 1) * sizeof *p->gset);
}

static kf_status planner_init(kf_planner *p, kf_graph *g, const kf_plan_options *opt) {
    memset(p, 0, sizeof *p);
    p->g = g;
    p->mem = &g->mem;
    p->opt = opt;
    size_t n = g->n_nodes;
    p->n = (uint32_t)n;
    p->need = kf_mem_calloc(p->mem, n, sizeof *p->need);
    p->is_output = kf_mem_calloc(p->mem, n, sizeof *p->is_output);
    p->gid = kf_mem_alloc(p->mem, n * sizeof *p->gid);
    p->cons_off = kf_mem_calloc(p->mem, n + 1, sizeof *p->cons_off);
    p->cons = kf_mem_alloc(p->mem, 3 * n * sizeof *p->cons);
    p->shared_prologue = kf_mem_calloc(p->mem, n, sizeof *p->shared_prologue);
    p->reason = kf_mem_calloc(p->mem, 3 * n, sizeof *p->reason);
    p->detail = kf_mem_calloc(p->mem, 3 * n, sizeof *p->detail);
    p->stack = kf_mem_alloc(p->mem, n * sizeof *p->stack);
    p->mark = kf_mem_calloc(p->mem, n, sizeof *p->mark);
    p->list = kf_mem_alloc(p->mem, n * sizeof *p->list);
    p->mnext = kf_mem_alloc(p->mem, n * sizeof *p->mnext);
    p->gset = kf_mem_alloc(p->mem, (n + 1) * sizeof *p->gset);
    if (!p->list || !p->mnext || !p->gset || !p->need || !p->is_output || !p->gid || !p->cons_off ||
        !p->cons || !p->shared_prologue || !p->reason || !p->detail || !p->stack || !p->mark)
        return KF_ERR_OUT_OF_MEMORY;

    for (uint32_t i = 0; i < g->n_outputs; i++) {
        p->need[g->outputs[i].tensor->id] = true;
        p->is_output[g->outputs[i].tensor->id] = true;
    }
    for (uint32_t i = (uint32_t)n; i-- > 0;) {
        if (!p->need[i])
            continue;
        const kf_tensor *t = g->nodes[i];
        for (int k = 0; k < t->nsrc; k++)
            p->need[t->src[k]->id] = true;
    }
    /* Consumers (of needed tensors only), in CSR form, ordered by consumer id. */
    for (uint32_t i = 0; i < n; i++) {
        const kf_tensor *t = g->nodes[i];
        if (!p->need[i])
            continue;
        for (int k = 0; k < t->nsrc; k++)
            p->cons_off[t->src[k]->id + 1]++;
    }
    for (uint32_t i = 0; i < n; i++)
        p->cons_off[i + 1] += p->cons_off[i];
    uint32_t *fill = p->stack; /* scratch, reset below */
    memcpy(fill, p->cons_off, n * sizeof *fill);
    for (uint32_t i = 0; i < n; i++) {
        const kf_tensor *t = g->nodes[i];
        if (!p->need[i])
            continue;
        for (int k = 0; k < t->nsrc; k++)
            p->cons[fill[t->src[k]->id]++] = i;
    }
    for (uint32_t i = 0; i < n; i++) {
        p->gid[i] = KF_NONE;
        p->shared_prologue[i] = KF_NONE;
    }
    for (uint32_t i = 0; i < n; i++) {
        kf_tensor *t = g->nodes[i];
        if (!p->need[i] || (kf_pl_is_source(t) && !iota_in_memory(p, t)))
            continue;
        if (kf_pl_new_group(p, seed_kind(t), t) == KF_NONE)
            return KF_ERR_OUT_OF_MEMORY;
        if (seed_kind(t) == KF_GROUP_ELEMENTWISE)
            p->groups[p->gid[i]].anchor = KF_NONE;
    }
    return KF_OK;
}

/* Dumps the planning state (KF_DEBUG=1): one line per live group. */
static void debug_dump(const kf_planner *p, const char *after) {
    fprintf(stderr, "kfuse: plan after %s:\n", after);
    for (uint32_t gi = 0; gi < p->n_groups; gi++) {
        if (!p->groups[gi].alive)
            continue;
        fprintf(stderr, "  g%u %-11s {", gi, kf_group_kind_name(p->groups[gi].kind));
        const char *sep = "";
        for (uint32_t t = 0; t < p->n; t++) {
            if (p->gid[t] != gi)
                continue;
            const kf_tensor *x = p->g->nodes[t];
            if (x->name)
                fprintf(stderr, "%s%s", sep, x->name);
            else
                fprintf(stderr, "%s%%%u", sep, t);
            fprintf(stderr, ":%s", kf_op_get(x->op)->name);
            sep = " ";
        }
        fprintf(stderr, "}");
        if (p->groups[gi].gsib_set != KF_NONE)
            fprintf(stderr, " gemm siblings of g%u", p->groups[gi].gsib_set);
        fprintf(stderr, "\n");
    }
}

kf_status kf_plan_create(kf_graph *g, const kf_plan_options *options, kf_plan **out) {
    if (!out)
        return KF_ERR_INVALID_ARGUMENT;
    *out = NULL;
    if (!g)
        return KF_ERR_INVALID_ARGUMENT;
    kf_status st = kf_ir_verify(g);
    if (st != KF_OK)
        return st;
    if ((st = kf_ir_cse(g, NULL)) != KF_OK) /* the same op on the same operands, once */
        return st;
    kf_ir_idiom_counts idioms;
    if ((st = kf_ir_idioms(g, &idioms)) != KF_OK) /* norms and activations in primitives */
        return st;
    kf_plan_options opt;
    if (options)
        opt = *options;
    else
        kf_plan_options_init(&opt);

    kf_planner p;
    st = planner_init(&p, g, &opt);
    for (size_t i = 0; i < KF_PASS_COUNT && st == KF_OK; i++) {
        if (opt.disabled & (1u << pipeline[i].id))
            continue;
        st = pipeline[i].run(&p);
        if (st == KF_OK && opt.debug)
            debug_dump(&p, kf_pass_name(pipeline[i].id));
    }
    kf_plan *plan = NULL;
    if (st == KF_OK) {
        plan = kf_mem_alloc(&g->mem, sizeof *plan);
        if (!plan)
            st = KF_ERR_OUT_OF_MEMORY;
    }
    if (st == KF_OK) {
        memset(plan, 0, sizeof *plan);
        plan->graph = g;
        plan->mem = g->mem;
        plan->options = opt;
        plan->idioms = idioms;
        st = kf_pl_lower(&p, plan);
        if (st == KF_OK && opt.debug) {
            fprintf(stderr, "kfuse: plan after lower:\n");
            kf_plan_dump(plan, stderr);
        }
        if (st != KF_OK) {
            kf_plan_destroy(plan);
            plan = NULL;
        }
    }
    planner_free(&p);
    if (st == KF_ERR_OUT_OF_MEMORY)
        kf_ir_note(g, st, "plan: out of memory while planning %u tensors", g->n_nodes);
    if (st == KF_OK)
        *out = plan;
    return st;
}

void kf_plan_destroy(kf_plan *plan) {
    if (!plan)
        return;
    kf_mem m = plan->mem;
    for (uint32_t i = 0; i < plan->n_groups; i++) {
        kf_group *gr = &plan->groups[i];
        kf_mem_free(&m, gr->computed, (size_t)gr->cap_computed * sizeof *gr->computed);
        kf_mem_free(&m, gr->reads, (size_t)gr->cap_reads * sizeof *gr->reads);
        kf_mem_free(&m, gr->writes, (size_t)gr->cap_writes * sizeof *gr->writes);
        kf_mem_free(&m, gr->roots, (size_t)gr->cap_roots * sizeof *gr->roots);
        kf_mem_free(&m, gr->expr, (size_t)gr->cap_expr * sizeof *gr->expr);
    }
    kf_mem_free(&m, plan->groups, (size_t)plan->cap_groups * sizeof *plan->groups);
    kf_mem_free(&m, plan->edges, (size_t)plan->cap_edges * sizeof *plan->edges);
    if (plan->graph)
        kf_mem_free(&m, plan->group_of, (size_t)plan->graph->n_nodes * sizeof *plan->group_of);
    kf_mem_free(&m, plan, sizeof *plan);
}

uint32_t kf_plan_kernel_count(const kf_plan *plan) {
    uint32_t n = 0;
    for (uint32_t i = 0; plan && i < plan->n_groups; i++)
        n += plan->groups[i].is_kernel;
    return n;
}

const kf_group *kf_plan_group_of(const kf_plan *plan, const kf_tensor *t) {
    if (!plan || !t || t->id >= plan->graph->n_nodes || plan->group_of[t->id] == KF_NONE)
        return NULL;
    return &plan->groups[plan->group_of[t->id]];
}

uint32_t kf_plan_buffer_of(const kf_plan *plan, uint32_t t) {
    for (int hops = 0; hops < 64; hops++) {
        uint32_t g = plan->group_of[t];
        if (g == KF_NONE || plan->groups[g].kind != KF_GROUP_VIEW)
            return t;
        t = plan->groups[g].view_base;
    }
    return t;
}

const kf_plan_edge *kf_plan_find_edge(const kf_plan *plan, const kf_tensor *producer,
                                      const kf_tensor *consumer) {
    for (uint32_t i = 0; plan && i < plan->n_edges; i++) {
        if (plan->edges[i].producer == producer->id && plan->edges[i].consumer == consumer->id)
            return &plan->edges[i];
    }
    return NULL;
}
