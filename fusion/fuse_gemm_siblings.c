/*
 * fuse_gemm_siblings.c -- rule: GEMM groups that read the same operand A
 * through the same norm prologue (the Q, K and V projections of one
 * normalized input) form a sibling set (issue 13 item 4). The plan keeps each
 * member a group of its own, with its own epilogue and writes, and orders the
 * members one after another (fusion/lower.c); a backend may then run the set
 * as one: on CUDA the row statistics (folded side) or the normalized A
 * (cuBLASLt side) are computed once for all members, where each member's
 * recipe computed them again (codegen/cuda/recipe_gemm.c). No edge is fused
 * or declined here: siblings share an operand, not an edge, so [I7]'s
 * reasons stand; the groups and their contents do not change [I2..I6].
 *
 * Only members that share a norm prologue are gathered. Plain siblings (the
 * same A from memory, no prologue) gain nothing from running together unless
 * they run as one GEMM over their concatenated columns, which needs their B
 * concatenated: a copy of every weight on each run when the weights are
 * inputs. That form is not built (no backend runs it), so plain siblings keep
 * apart, and the report says why.
 *
 * For every tensor x in creation order, the candidates are the GEMM groups
 * that read x as A (plain) or read a norm of x through their prologue; in the
 * order of their matmuls each joins the open set of its norm when [I3]
 *   - it is a single GEMM (not a SwiGLU pair) with no row stage on its
 *     output, of the set's dtypes (the product's and B's) and batch dims;
 *   - it reads no tensor another member computes, nor does any member read
 *     one of its tensors (the set runs at one point of the order), and the
 *     union of the set's groups keeps the group graph acyclic
 *     (kf_pl_can_merge_set: no path leaves the set and comes back);
 *   - the set holds fewer than options.gemm_sibling_max members: else the
 *     candidate founds a new set of the same norm, and says so.
 * A candidate with another norm of x (another gamma, eps, op or dtype; kf_ir_cse
 * already made equal norms one tensor) founds its own set, and records how its
 * norm differs from the first set's. A set of one member is no set.
 * Cost: each consumer edge of each tensor once, and each candidate's members
 * and kf_pl_can_merge_set's neighbourhood once.
 */
#include <string.h>

#include "fusion/pass.h"

#define CAND_MAX 64 /* candidates of one tensor; more are left alone */

typedef struct gset {
    uint32_t norm;  /* the shared prologue */
    uint32_t first; /* the founding group: the set's id */
    uint32_t n;
    uint32_t members[KF_GEMM_SIBLING_MAX * 4];
} gset;

/* The matmul of GEMM group gi. */
static const kf_tensor *matmul_of(const kf_planner *p, uint32_t gi) {
    return p->g->nodes[p->groups[gi].anchor];
}

/* True when some tensor of group a reads a tensor of group b (other than a's
 * prologue, which a recomputes). */
static bool reads_group(const kf_planner *p, uint32_t a, uint32_t b) {
    const kf_pgroup *pa = &p->groups[a];
    for (uint32_t t = pa->head; t != KF_NONE; t = p->mnext[t]) {
        const kf_tensor *x = p->g->nodes[t];
        for (int k = 0; k < x->nsrc; k++)
            if (p->gid[x->src[k]->id] == b && x->src[k]->id != pa->prologue)
                return true;
    }
    return false;
}

/* How norm b differs from norm a (both of one input), into buf. */
static void norm_difference(const kf_tensor *a, const kf_tensor *b, char *buf, size_t size) {
    if (a->op != b->op)
        snprintf(buf, size, "its norm is %s, the set's %s", kf_op_get(b->op)->name,
                 kf_op_get(a->op)->name);
    else if (a->dtype != b->dtype)
        snprintf(buf, size, "its norm's dtype is %s, the set's %s", kf_dtype_name(b->dtype),
                 kf_dtype_name(a->dtype));
    else if (a->attr.eps != b->attr.eps)
        snprintf(buf, size, "its norm's eps is %g, the set's %g", b->attr.eps, a->attr.eps);
    else if (a->src[1] != b->src[1])
        snprintf(buf, size, "its norm's gamma is %%%u, the set's %%%u", b->src[1]->id,
                 a->src[1]->id);
    else if (a->nsrc > 2 && b->nsrc > 2 && a->src[2] != b->src[2])
        snprintf(buf, size, "its norm's beta is %%%u, the set's %%%u", b->src[2]->id,
                 a->src[2]->id);
    else
        snprintf(buf, size, "its norm is %%%u, the set's %%%u", b->id, a->id);
}

/* Why candidate gi cannot join set s (NULL: it can), into buf. */
static const char *why_apart(kf_planner *p, const gset *s, uint32_t gi, uint32_t max, char *buf,
                             size_t size) {
    const kf_tensor *mm = matmul_of(p, gi), *m0 = matmul_of(p, s->first);
    if (p->groups[gi].prologue != s->norm) {
        norm_difference(p->g->nodes[s->norm], p->g->nodes[p->groups[gi].prologue], buf, size);
        return buf;
    }
    if (mm->dtype != m0->dtype || mm->src[1]->dtype != m0->src[1]->dtype) {
        snprintf(buf, size, "its product or B is %s/%s, the set's %s/%s", kf_dtype_name(mm->dtype),
                 kf_dtype_name(mm->src[1]->dtype), kf_dtype_name(m0->dtype),
                 kf_dtype_name(m0->src[1]->dtype));
        return buf;
    }
    if (mm->rank != m0->rank ||
        memcmp(mm->dims, m0->dims, sizeof(int64_t) * (size_t)(mm->rank - 1)) != 0) {
        snprintf(buf, size, "its batch dims or M differ from the set's");
        return buf;
    }
    if (s->n >= max) {
        snprintf(buf, size, "the set of group %%%u is full (%u GEMMs, gemm_sibling_max)", m0->id,
                 max);
        return buf;
    }
    for (uint32_t i = 0; i < s->n; i++) {
        if (reads_group(p, gi, s->members[i]) || reads_group(p, s->members[i], gi)) {
            snprintf(buf, size, "it and the set's %%%u read one another's values",
                     matmul_of(p, s->members[i])->id);
            return buf;
        }
    }
    uint32_t set[KF_GEMM_SIBLING_MAX * 4 + 1];
    memcpy(set, s->members, s->n * sizeof *set);
    set[s->n] = gi;
    if (!kf_pl_can_merge_set(p, set, s->n + 1)) {
        snprintf(buf, size, "a path leaves the set and comes back through it [I3]");
        return buf;
    }
    return NULL;
}

/* The candidate GEMM groups that read x as A (directly or through a norm
 * prologue of x), in the order of their matmuls, into out; returns how many. */
static uint32_t candidates(kf_planner *p, const kf_tensor *x, uint32_t *out) {
    uint32_t n = 0, epoch = ++p->epoch;
    for (uint32_t u = 0; u < kf_pl_uses(p, x); u++) {
        const kf_tensor *c = kf_pl_consumer(p, x, u);
        /* x -> matmul (plain), or x -> norm -> matmuls (prologue) */
        bool norm = kf_op_has(c->op, KF_TRAIT_NORM) && c->src[0] == x;
        uint32_t nc = norm ? kf_pl_uses(p, c) : kf_op_has(c->op, KF_TRAIT_GEMM) ? 1 : 0;
        for (uint32_t v = 0; v < nc; v++) {
            const kf_tensor *mm = norm ? kf_pl_consumer(p, c, v) : c;
            if (!kf_op_has(mm->op, KF_TRAIT_GEMM) || p->gid[mm->id] == KF_NONE)
                continue;
            uint32_t gi = p->gid[mm->id];
            const kf_pgroup *pg = &p->groups[gi];
            bool via_norm = mm != c;
            if (!pg->alive || pg->kind != KF_GROUP_GEMM || pg->anchor != mm->id ||
                mm->src[0] != (via_norm ? c : x) || mm->attr.transpose_a ||
                (via_norm && pg->prologue != c->id) || (!via_norm && pg->prologue != KF_NONE) ||
                p->mark[mm->id] == epoch || n == CAND_MAX)
                continue;
            p->mark[mm->id] = epoch;
            out[n++] = gi;
        }
    }
    /* the matmuls' creation order (an insertion sort: a handful) */
    for (uint32_t i = 1; i < n; i++)
        for (uint32_t j = i; j > 0 && p->groups[out[j]].anchor < p->groups[out[j - 1]].anchor;
             j--) {
            uint32_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

kf_status kf_fuse_gemm_siblings(kf_planner *p) {
    uint32_t max = p->opt->gemm_sibling_max ? p->opt->gemm_sibling_max : KF_GEMM_SIBLING_MAX;
    if (max > KF_GEMM_SIBLING_MAX * 4)
        max = KF_GEMM_SIBLING_MAX * 4;
    uint32_t cand[CAND_MAX];
    gset sets[4];
    char why[96];
    for (uint32_t xi = 0; xi < p->n; xi++) {
        const kf_tensor *x = p->g->nodes[xi];
        if (!p->need[xi] || kf_pl_uses(p, x) == 0)
            continue;
        uint32_t nc = candidates(p, x, cand);
        if (nc < 2)
            continue;
        uint32_t n_sets = 0, n_plain = 0;
        for (uint32_t i = 0; i < nc; i++)
            n_plain += p->groups[cand[i]].prologue == KF_NONE;
        for (uint32_t i = 0; i < nc; i++) {
            uint32_t gi = cand[i];
            kf_pgroup *pg = &p->groups[gi];
            if (pg->gsib_set != KF_NONE)
                continue;
            if (pg->prologue == KF_NONE) {
                if (n_plain > 1)
                    snprintf(pg->gsib_apart, sizeof pg->gsib_apart,
                             "no norm prologue to share: one GEMM over the concatenated "
                             "columns would copy B each run");
                continue;
            }
            if (pg->anchor2 != KF_NONE || pg->row_op != KF_NONE) {
                snprintf(pg->gsib_apart, sizeof pg->gsib_apart, "%s",
                         pg->anchor2 != KF_NONE ? "a SwiGLU pair" : "a norm on its output rows");
                continue;
            }
            /* the first set it may join; else the reason the first one gave */
            const char *first_why = NULL;
            gset *to = NULL;
            for (uint32_t s = 0; s < n_sets && !to; s++) {
                const char *w = why_apart(p, &sets[s], gi, max, why, sizeof why);
                if (!w)
                    to = &sets[s];
                else if (!first_why)
                    first_why = w;
            }
            if (first_why)
                snprintf(pg->gsib_apart, sizeof pg->gsib_apart, "%s", first_why);
            if (to) {
                to->members[to->n++] = gi;
                continue;
            }
            if (n_sets == sizeof sets / sizeof *sets)
                continue;
            gset *s = &sets[n_sets++];
            s->norm = pg->prologue;
            s->first = gi;
            s->n = 1;
            s->members[0] = gi;
        }
        for (uint32_t s = 0; s < n_sets; s++) {
            if (sets[s].n < 2)
                continue;
            for (uint32_t i = 0; i < sets[s].n; i++)
                p->groups[sets[s].members[i]].gsib_set = sets[s].first;
        }
    }
    return KF_OK;
}
