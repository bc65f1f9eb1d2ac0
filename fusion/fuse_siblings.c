/*
 * fuse_siblings.c -- rule: elementwise groups that read one tensor from memory
 * and iterate the same space fuse into one multi-output kernel, which reads
 * that tensor once (issue 15 item 12). `x*2` and `x+1`, both outputs, are one
 * kernel writing two tensors; 5,000 different elementwise functions of one
 * input are 5,000 / KF_SIBLING_MAX_OUTPUTS kernels, not 5,000.
 *
 * Runs after fuse_elementwise, so each candidate is a finished chain: a group
 * of elementwise members (no source, no slice, concat or gather: a lone slice
 * may still become a view) whose one write is its last member. For every
 * tensor s the outputs need, in creation order, that is in memory (an input, a
 * multi-element constant, or a tensor some group computes), the candidate
 * groups that read s are taken in the order of their consumers, and each joins
 * the open kernel of its space (the shape of its last member) when [I1..I7]
 *   - the union keeps the groups acyclic [I3] (else it stays apart: a group
 *     that reads another's output through a third group);
 *   - the kernel then writes at most sibling_max_outputs tensors and takes at
 *     most sibling_max_args arguments (reads + writes) -- else a new kernel of
 *     that space opens with it, and each part records the bound that split the
 *     siblings (the report names it) [I2];
 *   - every write has the group's space (the shapes are equal) [I4].
 * A group that gathered siblings of one tensor takes no part in another's
 * (it keeps the one account the report gives). No edge is fused or declined
 * here: siblings share an operand, not an edge, so [I7]'s reasons stand.
 * Cost: every group's eligibility once, then each consumer edge once; a merge
 * costs the two groups' members and kf_pl_can_merge's neighbourhood.
 */
#include <string.h>

#include "fusion/pass.h"

/* Kernels of different spaces open at once for the consumers of one tensor. */
#define OPEN_MAX 8

typedef struct open_kernel {
    uint32_t group;  /* the group others join */
    uint32_t shape;  /* a tensor of its space (its first group's last member) */
    uint32_t writes; /* an upper bound: the sum of its groups' writes */
    uint32_t n_reads;
    uint32_t *reads; /* distinct, at most max_args */
    uint32_t parts;  /* kernels of this space opened for this tensor */
    const char *bound;
} open_kernel;

typedef struct sib_state {
    kf_planner *p;
    uint32_t max_out, max_args;
    uint32_t *sink;    /* per group: its last member, or KF_NONE when not a candidate */
    uint32_t *nwrites; /* per group: tensors it writes (outputs, or read by another group) */
    uint32_t *seen;    /* per group: stamp of the tensor whose consumers listed it */
    uint32_t *part;    /* per group: its part number in its open kernel's space */
    uint32_t *gread;   /* scratch: one group's reads (max_args + 1) */
    open_kernel open[OPEN_MAX];
    uint32_t n_open;
} sib_state;

static bool is_inline(const kf_planner *p, const kf_tensor *t) {
    if (t->op == KF_OP_IOTA)
        return p->gid[t->id] == KF_NONE;
    return t->op == KF_OP_CONST && kf_ir_numel(t) == 1;
}

/* Fills S->sink and S->nwrites for group gi: a candidate is an alive
 * ELEMENTWISE group of elementwise members only. */
static void classify(sib_state *S, uint32_t gi) {
    kf_planner *p = S->p;
    const kf_pgroup *pg = &p->groups[gi];
    S->sink[gi] = KF_NONE;
    if (!pg->alive || pg->kind != KF_GROUP_ELEMENTWISE || pg->size == 0)
        return;
    uint32_t last = 0, w = 0;
    for (uint32_t t = pg->head; t != KF_NONE; t = p->mnext[t]) {
        const kf_tensor *x = p->g->nodes[t];
        if (!kf_pl_is_elementwise(x))
            return;
        last = t > last ? t : last;
        bool out = p->is_output[t];
        for (uint32_t u = 0; u < kf_pl_uses(p, x) && !out; u++)
            out = p->gid[kf_pl_consumer(p, x, u)->id] != gi;
        w += out;
    }
    S->sink[gi] = last;
    S->nwrites[gi] = w;
}

/* Group gi's distinct reads into S->gread; returns how many, or max_args + 1
 * when there are more than max_args. */
static uint32_t group_reads(sib_state *S, uint32_t gi) {
    kf_planner *p = S->p;
    uint32_t n = 0, epoch = ++p->epoch;
    for (uint32_t t = p->groups[gi].head; t != KF_NONE; t = p->mnext[t]) {
        const kf_tensor *x = p->g->nodes[t];
        for (int k = 0; k < x->nsrc; k++) {
            const kf_tensor *s = x->src[k];
            if (p->gid[s->id] == gi || is_inline(p, s) || p->mark[s->id] == epoch)
                continue;
            p->mark[s->id] = epoch;
            if (n == S->max_args)
                return S->max_args + 1;
            S->gread[n++] = s->id;
        }
    }
    return n;
}

/* Opens a kernel of gi's space for the consumers of tensor s. */
static void open_with(sib_state *S, open_kernel *o, uint32_t gi) {
    o->group = gi;
    o->shape = S->sink[gi];
    o->writes = S->nwrites[gi];
    o->parts++;
    S->part[gi] = o->parts;
    uint32_t n = group_reads(S, gi);
    o->n_reads = n > S->max_args ? S->max_args : n;
    memcpy(o->reads, S->gread, o->n_reads * sizeof *o->reads);
}

/* Group gi joins open kernel o when the bounds and [I3] allow; a bound opens
 * a new kernel of the space with gi instead. */
static void try_join(sib_state *S, open_kernel *o, uint32_t s, uint32_t gi) {
    kf_planner *p = S->p;
    uint32_t n = group_reads(S, gi);
    uint32_t reads = o->n_reads;
    if (n <= S->max_args) {
        uint32_t epoch = ++p->epoch;
        for (uint32_t i = 0; i < o->n_reads; i++)
            p->mark[o->reads[i]] = epoch;
        for (uint32_t i = 0; i < n; i++)
            reads += p->mark[S->gread[i]] != epoch;
    }
    uint32_t writes = o->writes + S->nwrites[gi];
    const char *bound = writes > S->max_out                              ? "outputs"
                        : n > S->max_args || writes + reads > S->max_args ? "arguments"
                                                                         : NULL;
    if (bound) {
        o->bound = bound;
        open_with(S, o, gi);
        return;
    }
    if (!kf_pl_can_merge(p, o->group, gi))
        return;
    /* group_reads left gi's reads in gread: add the new ones. */
    uint32_t epoch = ++p->epoch;
    for (uint32_t i = 0; i < o->n_reads; i++)
        p->mark[o->reads[i]] = epoch;
    for (uint32_t i = 0; i < n; i++)
        if (p->mark[S->gread[i]] != epoch)
            o->reads[o->n_reads++] = S->gread[i];
    o->writes = writes;
    kf_pgroup *to = &p->groups[o->group];
    uint32_t had = to->sib_of == KF_NONE ? 1 : to->sib_count;
    kf_pl_merge(p, o->group, gi);
    to->sib_of = s;
    to->sib_count = had + 1;
    to->sib_part = S->part[o->group];
}

/* After the consumers of s: every part of a space split by a bound says so. */
static void close_all(sib_state *S, uint32_t s) {
    kf_planner *p = S->p;
    for (uint32_t i = 0; i < S->n_open; i++) {
        open_kernel *o = &S->open[i];
        if (o->parts < 2)
            continue;
        /* The parts are the groups of this space whose part number was set
         * for s: the consumers of s, visited again (their groups now). */
        for (uint32_t u = 0; u < kf_pl_uses(p, p->g->nodes[s]); u++) {
            uint32_t gi = p->gid[kf_pl_consumer(p, p->g->nodes[s], u)->id];
            kf_pgroup *pg = &p->groups[gi];
            if (S->sink[gi] == KF_NONE || S->part[gi] == 0 ||
                !kf_pl_same_shape(p->g->nodes[S->sink[gi]], p->g->nodes[o->shape]))
                continue;
            pg->sib_of = s;
            if (pg->sib_count == 0)
                pg->sib_count = 1;
            pg->sib_part = S->part[gi];
            pg->sib_parts = o->parts;
            pg->sib_bound = o->bound;
        }
    }
}

kf_status kf_fuse_siblings(kf_planner *p) {
    sib_state S;
    memset(&S, 0, sizeof S);
    S.p = p;
    S.max_out = p->opt->sibling_max_outputs ? p->opt->sibling_max_outputs : KF_SIBLING_MAX_OUTPUTS;
    S.max_args = p->opt->sibling_max_args ? p->opt->sibling_max_args : KF_SIBLING_MAX_ARGS;
    if (S.max_out < 2)
        return KF_OK; /* one output per kernel: nothing to gather */
    uint32_t ng = p->n_groups ? p->n_groups : 1;
    S.sink = kf_mem_alloc(p->mem, ng * sizeof *S.sink);
    S.nwrites = kf_mem_calloc(p->mem, ng, sizeof *S.nwrites);
    S.seen = kf_mem_calloc(p->mem, ng, sizeof *S.seen);
    S.part = kf_mem_calloc(p->mem, ng, sizeof *S.part);
    S.gread = kf_mem_alloc(p->mem, (S.max_args + 1) * sizeof *S.gread);
    bool ok = S.sink && S.nwrites && S.seen && S.part && S.gread;
    for (uint32_t i = 0; i < OPEN_MAX && ok; i++)
        ok = (S.open[i].reads = kf_mem_alloc(p->mem, S.max_args * sizeof(uint32_t))) != NULL;
    kf_status st = ok ? KF_OK : KF_ERR_OUT_OF_MEMORY;
    for (uint32_t gi = 0; gi < p->n_groups && ok; gi++)
        classify(&S, gi);

    for (uint32_t s = 0; s < p->n && ok; s++) {
        const kf_tensor *t = p->g->nodes[s];
        uint32_t uses = kf_pl_uses(p, t);
        if (!p->need[s] || uses < 2 || is_inline(p, t) ||
            (p->gid[s] == KF_NONE && t->op != KF_OP_INPUT && t->op != KF_OP_CONST))
            continue;
        S.n_open = 0;
        for (uint32_t u = 0; u < uses; u++) {
            uint32_t gi = p->gid[kf_pl_consumer(p, t, u)->id];
            if (gi == KF_NONE || gi == p->gid[s] || S.sink[gi] == KF_NONE ||
                S.seen[gi] == s + 1 || !p->groups[gi].alive)
                continue;
            S.seen[gi] = s + 1;
            if (p->groups[gi].sib_of != KF_NONE && p->groups[gi].sib_of != s)
                continue; /* it gathered the siblings of another tensor */
            const kf_tensor *shape = p->g->nodes[S.sink[gi]];
            open_kernel *o = NULL;
            for (uint32_t i = 0; i < S.n_open && !o; i++)
                if (kf_pl_same_shape(p->g->nodes[S.open[i].shape], shape))
                    o = &S.open[i];
            if (!o) {
                if (S.n_open == OPEN_MAX)
                    continue;
                o = &S.open[S.n_open++];
                o->parts = 0;
                o->bound = NULL;
                open_with(&S, o, gi);
                continue;
            }
            try_join(&S, o, s, gi);
        }
        close_all(&S, s);
        for (uint32_t u = 0; u < uses; u++) {
            uint32_t gi = p->gid[kf_pl_consumer(p, t, u)->id];
            if (gi != KF_NONE)
                S.part[gi] = 0;
        }
    }

    for (uint32_t i = 0; i < OPEN_MAX; i++)
        if (S.open[i].reads)
            kf_mem_free(p->mem, S.open[i].reads, S.max_args * sizeof(uint32_t));
    if (S.gread)
        kf_mem_free(p->mem, S.gread, (S.max_args + 1) * sizeof *S.gread);
    if (S.part)
        kf_mem_free(p->mem, S.part, ng * sizeof *S.part);
    if (S.seen)
        kf_mem_free(p->mem, S.seen, ng * sizeof *S.seen);
    if (S.nwrites)
        kf_mem_free(p->mem, S.nwrites, ng * sizeof *S.nwrites);
    if (S.sink)
        kf_mem_free(p->mem, S.sink, ng * sizeof *S.sink);
    return st;
}
