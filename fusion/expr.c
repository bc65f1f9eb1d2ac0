/*
 * expr.c -- the scalar-expression form's names, its scalar evaluator (used by
 * the mask classifier and by tests that check an expression against the
 * reference evaluator), and the text dump of expressions and plans.
 *
 * The evaluator follows ir/eval.c's definitions (double arithmetic, results
 * rounded to their dtype where a node stands for a tensor) so that an
 * expression evaluated here matches the unfused graph.
 */
#include <math.h>
#include <string.h>

#include "fusion/expr.h"

static const char *const kind_names[KF_GROUP_COUNT] = {
    "elementwise", "rowwise", "colreduce", "gemm", "attention", "view", "layout"};
static const char *const expr_names[KF_EXPR_COUNT] = {"op",    "LOAD",   "CONST", "INDEX", "ACC",
                                                      "ROW",   "COL",    "SCORE", "BATCH", "HEAD",
                                                      "Q_IDX", "KV_IDX", "STAT"};
static const char *const stat_names[KF_STAT_COUNT] = {"MAX",      "SUM",    "MEAN",  "RSTD",
                                                      "RMS_RSTD", "SUMEXP", "ARGMAX"};
static const char *const mask_names[KF_MASK_COUNT] = {"none", "causal", "sliding_window",
                                                      "general", "block_sparse"};

const char *kf_group_kind_name(kf_group_kind k) {
    return (unsigned)k < KF_GROUP_COUNT ? kind_names[k] : "?";
}
const char *kf_expr_kind_name(kf_expr_kind k) {
    return (unsigned)k < KF_EXPR_COUNT ? expr_names[k] : "?";
}
const char *kf_stat_name(kf_stat s) { return (unsigned)s < KF_STAT_COUNT ? stat_names[s] : "?"; }
const char *kf_mask_kind_name(kf_mask_kind k) {
    return (unsigned)k < KF_MASK_COUNT ? mask_names[k] : "?";
}

/* ------------------------------------------------------------------------ */
/* Scalar evaluation                                                          */
/* ------------------------------------------------------------------------ */

void kf_expr_eval(const kf_group *g, uint32_t upto, double *vals,
                  double (*leaf)(void *user, const kf_expr *e), void *user) {
    for (uint32_t i = 0; i <= upto && i < g->n_expr; i++) {
        const kf_expr *e = &g->expr[i];
        double v;
        if (e->kind == KF_EXPR_OP) {
            double a = e->src[0] != KF_NONE ? vals[e->src[0]] : 0;
            double b = e->src[1] != KF_NONE ? vals[e->src[1]] : 0;
            double c = e->src[2] != KF_NONE ? vals[e->src[2]] : 0;
            v = kf_ir_scalar(e->op, e->dtype, a, b, c);
        } else if (e->kind == KF_EXPR_CONST) {
            v = e->value;
        } else {
            v = leaf(user, e);
        }
        if (e->tensor != KF_NONE && e->kind != KF_EXPR_LOAD)
            v = kf_ir_round(e->dtype, v);
        vals[i] = v;
    }
}

/* ------------------------------------------------------------------------ */
/* Printing                                                                   */
/* ------------------------------------------------------------------------ */

static void put_tensor(const kf_graph *gr, uint32_t id, FILE *out) {
    const kf_tensor *t = gr->nodes[id];
    if (t->name)
        fputs(t->name, out);
    else
        fprintf(out, "%%%u", id);
}

static void print_node(const kf_plan *plan, const kf_group *g, uint32_t i, FILE *out, int depth) {
    if (i == KF_NONE || i >= g->n_expr) {
        fputs("?", out);
        return;
    }
    const kf_expr *e = &g->expr[i];
    switch (e->kind) {
    case KF_EXPR_OP:
        if (depth > 24) {
            fprintf(out, "#%u", i);
            return;
        }
        if (e->op == KF_OP_CAST)
            fprintf(out, "cast<%s>(", kf_dtype_name(e->dtype));
        else
            fprintf(out, "%s(", kf_op_get(e->op)->name);
        for (int k = 0; k < 3 && e->src[k] != KF_NONE; k++) {
            if (k)
                fputs(", ", out);
            print_node(plan, g, e->src[k], out, depth + 1);
        }
        fputs(")", out);
        return;
    case KF_EXPR_LOAD:
        fputs("LOAD ", out);
        put_tensor(plan->graph, e->tensor, out);
        fputs("[", out);
        {
            int rank = e->space == KF_SPACE_ROW ? g->row_rank : g->rank;
            for (int d = 0; d < rank; d++)
                fprintf(out, "%s%s", d ? "," : "", e->strides[d] ? "i" : ".");
        }
        if (e->offset)
            fprintf(out, "+%lld", (long long)e->offset);
        for (int k = 0; k < 3 && e->src[k] != KF_NONE; k++) {
            fputs(k ? ", " : "; at ", out);
            print_node(plan, g, e->src[k], out, depth + 1);
        }
        fputs("]", out);
        return;
    case KF_EXPR_CONST:
        fprintf(out, "%.9g", e->value);
        return;
    case KF_EXPR_INDEX:
        fprintf(out, "INDEX%d", e->axis);
        return;
    case KF_EXPR_ACC:
        fprintf(out, e->anchor ? "ACC%d" : "ACC", e->anchor);
        if (e->src[0] != KF_NONE) { /* a head-split group's in-head column */
            fputs("[at ", out);
            print_node(plan, g, e->src[0], out, depth + 1);
            fputs("]", out);
        }
        return;
    case KF_EXPR_STAT:
        fprintf(out, "%s", kf_stat_name(e->stat));
        return;
    default:
        fputs(kf_expr_kind_name(e->kind), out);
        return;
    }
}

void kf_expr_print(const kf_plan *plan, const kf_group *g, uint32_t root, FILE *out) {
    print_node(plan, g, root, out, 0);
}

void kf_plan_dump(const kf_plan *plan, FILE *out) {
    const kf_graph *gr = plan->graph;
    for (uint32_t i = 0; i < plan->n_groups; i++) {
        const kf_group *g = &plan->groups[i];
        fprintf(out, "  group %u %s %s\n", i, kf_group_kind_name(g->kind), g->name);
        fputs("    computes:", out);
        for (uint32_t k = 0; k < g->n_computed; k++) {
            fputc(' ', out);
            put_tensor(gr, g->computed[k], out);
        }
        fputs("\n    reads:", out);
        for (uint32_t k = 0; k < g->n_reads; k++) {
            fputc(' ', out);
            put_tensor(gr, g->reads[k], out);
        }
        fputs("\n    writes:", out);
        for (uint32_t k = 0; k < g->n_writes; k++) {
            fputc(' ', out);
            put_tensor(gr, g->writes[k], out);
            if (g->roots[k] != KF_NONE) {
                fputs(" = ", out);
                kf_expr_print(plan, g, g->roots[k], out);
            }
        }
        fputc('\n', out);
        if (g->kind == KF_GROUP_ATTENTION) {
            fputs("    score = ", out);
            kf_expr_print(plan, g, g->attn.score, out);
            fprintf(out, "\n    mask = %s", kf_mask_kind_name(g->attn.mask));
            if (g->attn.mask == KF_MASK_BLOCK_SPARSE)
                fprintf(out, " %lldx%lld", (long long)g->attn.keep_bq, (long long)g->attn.keep_bk);
            if (g->attn.mask == KF_MASK_SLIDING_WINDOW)
                fprintf(out, " (window %lld)", (long long)g->attn.window);
            fputc('\n', out);
        }
        if (g->row.present) {
            fprintf(out, "    row stage: %s over axis %d, length %lld, input = ",
                    kf_op_get(g->row.op)->name, g->row.axis, (long long)g->row.length);
            kf_expr_print(plan, g, g->row.input, out);
            fputc('\n', out);
        }
    }
    for (uint32_t i = 0; i < plan->n_edges; i++) {
        const kf_plan_edge *e = &plan->edges[i];
        fputs("  edge ", out);
        put_tensor(gr, e->producer, out);
        fputs(" -> ", out);
        put_tensor(gr, e->consumer, out);
        fprintf(out, ": %s%s%s\n", kf_reason_code(e->reason), e->detail[0] ? " " : "", e->detail);
    }
}
