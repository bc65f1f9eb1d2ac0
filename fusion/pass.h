/*
 * pass.h -- the planner's working state, shared by the rule files
 * (fusion/fuse_*.c) and the pipeline in fusion/plan.c. Not part of the plan:
 * kf_plan_create builds this state, runs the passes over it, lowers it into a
 * kf_plan (fusion/lower.c) and frees it.
 *
 * While planning, every non-source tensor the outputs need belongs to exactly
 * one planning group (gid[t]); a rule fuses by moving tensors between groups
 * (kf_pl_merge) after asking kf_pl_can_merge, and records a reason on every
 * edge it declines (kf_pl_reject). The invariants the rules keep are numbered
 * at the top of fusion/plan.c.
 */
#ifndef KF_FUSION_PASS_H
#define KF_FUSION_PASS_H

#include "fusion/fusion.h"

typedef struct kf_pgroup {
    bool alive;
    kf_group_kind kind;
    uint32_t anchor;   /* KF_NONE for ELEMENTWISE */
    uint32_t anchor2;  /* SwiGLU's second matmul */
    uint32_t row_op;   /* GEMM: the norm fused on the output (row epilogue), else KF_NONE */
    bool row_split;    /* GEMM: row_op's row is longer than one tile row (gemm.row_split) */
    uint32_t prologue; /* GEMM: the norm fused as operand A's prologue, else KF_NONE */
    uint32_t head_view; /* GEMM: the head view of the product its epilogue runs over
                           (fuse_head_epilogue), else KF_NONE */
    uint32_t softmax;  /* ATTENTION */
    uint32_t qk;       /* ATTENTION */
    uint32_t lse;      /* ATTENTION: the logsumexp of the scores it writes too, else KF_NONE */
    /* Members: a list through kf_planner.mnext (in no particular order; see
     * kf_pl_members), so a merge, a size or a legality check costs the
     * groups involved and never a sweep of the graph. */
    uint32_t head, tail, size;
    uint32_t mark; /* epoch stamp: in the set kf_pl_can_merge_set checks */
    /* fuse_siblings: the tensor whose sibling consumers this group gathered
     * (KF_NONE), how many groups it holds, its part of how many, the bound
     * that split them (NULL: none) */
    uint32_t sib_of, sib_count, sib_part, sib_parts;
    const char *sib_bound;
    /* fuse_gemm_siblings: the GEMM sibling set this group is in (the id of the
     * set's founding group; KF_NONE when in none), and why it was kept out of
     * the set of the GEMMs that share its A ("" when it was not) */
    uint32_t gsib_set;
    char gsib_apart[96];
} kf_pgroup;

typedef struct kf_planner {
    kf_graph *g;
    const kf_mem *mem;
    const kf_plan_options *opt;
    uint32_t n; /* graph->n_nodes */
    bool *need; /* tensors the outputs need */
    bool *is_output;
    uint32_t *gid; /* planning group per tensor, KF_NONE for sources / unneeded */
    kf_pgroup *groups;
    uint32_t n_groups, cap_groups;
    uint32_t *cons_off;        /* consumers of t: cons[cons_off[t] .. cons_off[t+1]) */
    uint32_t *cons;            /* (consumer id) per operand slot that names t */
    uint32_t *shared_prologue; /* norm id -> KF_NONE, or 1 when recomputed by several GEMMs */
    kf_reason *reason;         /* per edge consumer*3+slot: why it was not fused */
    char (*detail)[96];        /* per edge: a detail for the report */
    uint32_t *stack;           /* scratch: n entries */
    uint32_t *mark;            /* scratch: n entries, epoch-stamped */
    uint32_t *list;            /* scratch for rules: n entries */
    uint32_t *mnext;           /* per tensor: the next member of its group, KF_NONE */
    uint32_t *gset;            /* scratch: groups for kf_pl_try_merge_list (n + 1 entries) */
    uint32_t epoch, gepoch;
} kf_planner;

/* Tensors that no kernel computes on its own: inputs, constants, iota. */
bool kf_pl_is_source(const kf_tensor *t);
/* Elementwise compute (not a source). */
bool kf_pl_is_elementwise(const kf_tensor *t);
/* Number of operand slots (of needed tensors) that name t. */
uint32_t kf_pl_uses(const kf_planner *p, const kf_tensor *t);
/* The i-th consumer of t (a consumer appears once per slot that names t). */
kf_tensor *kf_pl_consumer(const kf_planner *p, const kf_tensor *t, uint32_t i);
/* True when t has exactly one consumer slot and is not a graph output. */
bool kf_pl_single_use(const kf_planner *p, const kf_tensor *t);

/* Writes group gi's members into out in id order (a sort of that group's
 * members only); returns how many. */
uint32_t kf_pl_members(const kf_planner *p, uint32_t gi, uint32_t *out);
/* Creates a new planning group holding `t` (moving it out of its old group). */
uint32_t kf_pl_new_group(kf_planner *p, kf_group_kind kind, kf_tensor *anchor);
/* True when merging group b into a keeps the group graph acyclic (invariant 3). */
bool kf_pl_can_merge(kf_planner *p, uint32_t a, uint32_t b);
/* The same for the union of n groups (repeats allowed). The search walks
 * consumers only up to the largest member id (tensors are in topological
 * order, so no path beyond it comes back), so it costs the neighbourhood of
 * the groups, not the graph. */
bool kf_pl_can_merge_set(kf_planner *p, const uint32_t *groups, uint32_t n);
/* Merges the groups of the `n` tensors in `ids` into group `gi` when the
 * result keeps the groups acyclic [I3]; else changes nothing. */
bool kf_pl_try_merge_list(kf_planner *p, uint32_t gi, const uint32_t *ids, uint32_t n);
/* Moves every tensor of group b into group a; b dies. */
void kf_pl_merge(kf_planner *p, uint32_t a, uint32_t b);
/* Records why the edge src -> consumer (slot) was not fused (first reason wins
 * unless `override`). `fmt` may be NULL. */
void kf_pl_reject(kf_planner *p, const kf_tensor *consumer, int slot, kf_reason r, const char *fmt,
                  ...) __attribute__((format(printf, 5, 6)));
/* Same, for every slot of `consumer` that names `producer`. */
void kf_pl_reject_edge(kf_planner *p, const kf_tensor *producer, const kf_tensor *consumer,
                       kf_reason r, const char *detail);
/* True when `a` broadcasts into the shape (rank, dims) (numpy rules). */
bool kf_pl_broadcasts_into(const kf_tensor *a, int rank, const int64_t *dims);
bool kf_pl_same_shape(const kf_tensor *a, const kf_tensor *b);
/* The group kind of a row-wise op given its axis. */
bool kf_pl_axis_is_last(const kf_tensor *rowop);

/* GEMM/attention anchors take these dtypes. */
bool kf_pl_gemm_dtype_ok(kf_dtype d);

/* The rules (one file each). */
kf_status kf_fuse_attention(kf_planner *p);
kf_status kf_fuse_swiglu(kf_planner *p);
kf_status kf_fuse_norm_prologue(kf_planner *p);
kf_status kf_fuse_gemm_epilogue(kf_planner *p);
kf_status kf_fuse_rowwise(kf_planner *p);
kf_status kf_fuse_elementwise(kf_planner *p);
kf_status kf_fuse_siblings(kf_planner *p);
kf_status kf_view_slices(kf_planner *p);
kf_status kf_fuse_head_epilogue(kf_planner *p);
kf_status kf_fuse_gemm_siblings(kf_planner *p);

/* Grows a group's epilogue greedily: absorbs every elementwise consumer of a
 * member that has the anchor's shape `dims` and keeps invariants 1-5 (shared
 * by the GEMM epilogue and the row-wise epilogue). Records reasons. */
void kf_pl_grow_epilogue(kf_planner *p, uint32_t gi, int rank, const int64_t *dims);

/* Lowers the planning state into the plan (fusion/lower.c). */
kf_status kf_pl_lower(kf_planner *p, kf_plan *plan);

#endif /* KF_FUSION_PASS_H */
