/*
 * test_fusion.c -- the fusion planner (fusion/): each pattern of issue 3 built
 * through the public builder API, planned, checked group by group against the
 * reference evaluator (kf_plan_check), and its groups, expressions and
 * reasons asserted; the negative cases with their reason codes; the report;
 * the pipeline switches; allocation failures; and the examples.
 */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kf_planned.h"
#include "kf_test.h"

#include "frontend/cmd_report.h"
#include "fusion/fusion.h"
#include "ir/ir.h"

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})

/* ------------------------------------------------------------------------ */
/* Fixture and helpers                                                        */
/* ------------------------------------------------------------------------ */

/* The builder suites' fixture (kf_planned.h): a context, the graph the test
 * builds and its plan. */
typedef planned fixture;

static kf_tensor *in2(kf_graph *g, const char *name, int64_t a, int64_t b) {
    return kf_input(g, name, KF_DTYPE_F32, 2, DIMS(a, b));
}
static kf_tensor *in1(kf_graph *g, const char *name, int64_t a) {
    return kf_input(g, name, KF_DTYPE_F32, 1, DIMS(a));
}

/* Plans the fixture's graph with `opt` (NULL: defaults), checks the plan with
 * the reference evaluator, and returns it (owned by the fixture). */
static kf_plan *plan_with(fixture *f, const kf_plan_options *opt) { return planned_plan(f, opt); }
static kf_plan *plan(fixture *f) { return plan_with(f, NULL); }

static const kf_group *group_of(const kf_plan *p, const kf_tensor *t) {
    const kf_group *g = kf_plan_group_of(p, t);
    assert_non_null(g);
    return g;
}

static void assert_same_group(const kf_plan *p, const kf_tensor *a, const kf_tensor *b) {
    assert_ptr_equal(group_of(p, a), group_of(p, b));
}

static void assert_edge_reason(const kf_plan *p, const kf_tensor *from, const kf_tensor *to,
                               kf_reason r) {
    const kf_plan_edge *e = kf_plan_find_edge(p, from, to);
    if (!e)
        fail_msg("no unfused edge %%%u -> %%%u (expected %s)", from->id, to->id, kf_reason_code(r));
    if (e->reason != r)
        fail_msg("edge %%%u -> %%%u: %s, expected %s", from->id, to->id, kf_reason_code(e->reason),
                 kf_reason_code(r));
}

/* True when the expression rooted at `root` uses an OP node `op` (KF_OP_COUNT:
 * any) or a leaf of kind `kind`. */
static bool expr_uses(const kf_group *g, uint32_t root, kf_expr_kind kind, kf_op op) {
    if (root == KF_NONE || root >= g->n_expr)
        return false;
    const kf_expr *e = &g->expr[root];
    if (e->kind == kind && (kind != KF_EXPR_OP || op == KF_OP_COUNT || e->op == op))
        return true;
    for (int k = 0; k < 3; k++) {
        if (e->src[k] != KF_NONE && expr_uses(g, e->src[k], kind, op))
            return true;
    }
    return false;
}

static uint32_t root_of(const kf_group *g, const kf_tensor *t) {
    for (uint32_t i = 0; i < g->n_writes; i++) {
        if (g->writes[i] == t->id)
            return g->roots[i];
    }
    fail_msg("tensor %%%u is not written by group %u", t->id, g->id);
    return KF_NONE;
}

static bool reads(const kf_group *g, const kf_tensor *t) {
    for (uint32_t i = 0; i < g->n_reads; i++) {
        if (g->reads[i] == t->id)
            return true;
    }
    return false;
}

/* ------------------------------------------------------------------------ */
/* a. GEMM + bias + activation                                                */
/* ------------------------------------------------------------------------ */

static void test_gemm_absorbs_bias_and_each_activation(void **state) {
    fixture *f0 = *state;
    kf_tensor *(*acts[])(kf_graph *, kf_tensor *) = {kf_gelu, kf_gelu_tanh, kf_relu, kf_silu};
    const char *names[] = {"gemm_bias_gelu_f32_8x256", "gemm_bias_gelu_tanh_f32_8x256",
                           "gemm_bias_relu_f32_8x256", "gemm_bias_silu_f32_8x256"};
    for (int i = 0; i < 4; i++) {
        fixture f = *f0;
        f.plan = NULL;
        assert_int_equal(kf_graph_create(f.ctx, &f.g), KF_OK);
        kf_tensor *x = in2(f.g, "x", 8, 64), *w = in2(f.g, "w", 64, 256), *b = in1(f.g, "b", 256);
        kf_tensor *h = kf_matmul(f.g, x, w, 0, 0);
        kf_tensor *y = acts[i](f.g, kf_add(f.g, h, b));
        assert_int_equal(kf_output(f.g, "y", y), KF_OK);
        const kf_plan *p = plan(&f);
        assert_int_equal(kf_plan_kernel_count(p), 1);
        const kf_group *g = group_of(p, y);
        assert_int_equal(g->kind, KF_GROUP_GEMM);
        assert_string_equal(g->name, names[i]);
        uint32_t r = root_of(g, y);
        assert_true(expr_uses(g, r, KF_EXPR_ACC, KF_OP_COUNT));
        assert_true(expr_uses(g, r, KF_EXPR_LOAD, KF_OP_COUNT));
        assert_int_equal(p->n_edges, 0);
        kf_plan_destroy(f.plan);
        kf_graph_destroy(f.g);
    }
}

/* ------------------------------------------------------------------------ */
/* b. GEMM + bias + residual, with a scale                                    */
/* ------------------------------------------------------------------------ */

static void test_gemm_absorbs_bias_residual_and_scale(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 8, 32), *w = in2(f->g, "w", 32, 16), *b = in1(f->g, "b", 16);
    kf_tensor *r = in2(f->g, "r", 8, 16);
    kf_tensor *h = kf_add(f->g, kf_matmul(f->g, x, w, 0, 0), b);
    kf_tensor *y1 = kf_add(f->g, h, r);
    kf_tensor *s = kf_scalar(f->g, KF_DTYPE_F32, 0.5);
    /* another weight: an equal GEMM would be computed once (kf_ir_cse) */
    kf_tensor *w2 = in2(f->g, "w2", 32, 16);
    kf_tensor *y2 = kf_add(f->g, kf_mul(f->g, kf_add(f->g, kf_matmul(f->g, x, w2, 0, 0), b), s), r);
    kf_output(f->g, "y1", y1);
    kf_output(f->g, "y2", y2);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 2);
    assert_string_equal(group_of(p, y1)->name, "gemm_bias_residual_f32_8x16");
    assert_string_equal(group_of(p, y2)->name, "gemm_bias_scale_residual_f32_8x16");
    assert_true(
        expr_uses(group_of(p, y2), root_of(group_of(p, y2), y2), KF_EXPR_CONST, KF_OP_COUNT));
}

/* ------------------------------------------------------------------------ */
/* c. GEMM + bias + residual + norm                                           */
/* ------------------------------------------------------------------------ */

static void build_residual_norm(fixture *f, int64_t n, bool rms, kf_tensor **h, kf_tensor **y) {
    kf_tensor *x = in2(f->g, "x", 4, 32), *w = in2(f->g, "w", 32, n), *b = in1(f->g, "b", n);
    kf_tensor *r = in2(f->g, "r", 4, n), *gw = in1(f->g, "gw", n), *gb = in1(f->g, "gb", n);
    *h = kf_add(f->g, kf_add(f->g, kf_matmul(f->g, x, w, 0, 0), b), r);
    *y = rms ? kf_rms_norm(f->g, *h, gw, -1, 1e-6) : kf_layer_norm(f->g, *h, gw, gb, -1, 1e-5);
    kf_output(f->g, "y", *y);
}

static void test_gemm_fuses_layer_norm_when_row_fits_one_tile(void **state) {
    fixture *f = *state;
    kf_tensor *h, *y;
    build_residual_norm(f, 64, false, &h, &y);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 1);
    const kf_group *g = group_of(p, y);
    assert_int_equal(g->kind, KF_GROUP_GEMM);
    assert_true(g->gemm.row_epilogue);
    assert_true(g->row.present);
    assert_int_equal(g->row.length, 64);
    assert_true(g->row.stats & (1u << KF_STAT_RSTD));
    assert_true(expr_uses(g, root_of(g, y), KF_EXPR_STAT, KF_OP_COUNT));
    assert_string_equal(g->name, "gemm_bias_residual_layer_norm_f32_4x64");
}

static void test_gemm_fuses_rms_norm_when_row_fits_one_tile(void **state) {
    fixture *f = *state;
    kf_tensor *h, *y;
    build_residual_norm(f, 128, true, &h, &y);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 1);
    assert_true(group_of(p, y)->gemm.row_epilogue);
    assert_true(group_of(p, y)->row.stats & (1u << KF_STAT_RMS_RSTD));
}

static void test_norm_on_long_gemm_row_is_a_rowwise_kernel_reading_the_output_once(void **state) {
    fixture *f = *state;
    kf_tensor *h, *y;
    build_residual_norm(f, 512, false, &h, &y);
    const kf_plan *p = plan(f); /* the split row form is off by default */
    assert_int_equal(kf_plan_kernel_count(p), 2);
    assert_int_equal(group_of(p, h)->kind, KF_GROUP_GEMM);
    assert_false(group_of(p, h)->gemm.row_split);
    const kf_group *row = group_of(p, y);
    assert_int_equal(row->kind, KF_GROUP_ROWWISE);
    assert_true(reads(row, h));
    assert_int_equal(row->n_reads, 3); /* h, gw, gb: the GEMM output once */
    assert_edge_reason(p, h, y, KF_REASON_ROW_TOO_LONG_FOR_GEMM_EPILOGUE);
    assert_string_equal(kf_plan_find_edge(p, h, y)->detail, "N=512 > 256");
}

/* Options with the split row form on, as KF_FLAG_SPLIT_ROW_NORMS sets them. */
static kf_plan_options split_on(void) {
    kf_plan_options o;
    kf_plan_options_init(&o);
    o.gemm_row_split_max_n = KF_GEMM_ROW_SPLIT_MAX_N;
    return o;
}

static void test_norm_on_long_gemm_row_fuses_in_the_split_row_form(void **state) {
    fixture *f = *state;
    kf_tensor *h, *y;
    build_residual_norm(f, 512, false, &h, &y);
    kf_plan_options o = split_on();
    const kf_plan *p = plan_with(f, &o);
    assert_int_equal(kf_plan_kernel_count(p), 1);
    const kf_group *g = group_of(p, y);
    assert_int_equal(g->kind, KF_GROUP_GEMM);
    assert_ptr_equal(group_of(p, h), g);
    assert_true(g->gemm.row_epilogue);
    assert_true(g->gemm.row_split);
    assert_true(g->row.present);
    assert_int_equal(g->row.space, KF_SPACE_OUT);
    assert_int_equal(g->row.length, 512);
    assert_true(g->row.stats & (1u << KF_STAT_RSTD));
    assert_null(kf_plan_find_edge(p, h, y));
    assert_int_equal(kf_plan_check(p, 11, NULL), KF_OK);
}

static void
test_norm_past_the_split_limit_is_a_rowwise_kernel_reading_the_output_once(void **state) {
    fixture *f = *state;
    kf_tensor *h, *y;
    build_residual_norm(f, 512, false, &h, &y);
    kf_plan_options o;
    kf_plan_options_init(&o);
    o.gemm_row_split_max_n = 256;
    const kf_plan *p = plan_with(f, &o);
    assert_int_equal(kf_plan_kernel_count(p), 2);
    assert_int_equal(group_of(p, h)->kind, KF_GROUP_GEMM);
    assert_false(group_of(p, h)->gemm.row_split);
    const kf_group *row = group_of(p, y);
    assert_int_equal(row->kind, KF_GROUP_ROWWISE);
    assert_true(reads(row, h));
    assert_int_equal(row->n_reads, 3); /* h, gw, gb: the GEMM output once */
    assert_edge_reason(p, h, y, KF_REASON_ROW_TOO_LONG_FOR_GEMM_EPILOGUE);
    assert_string_equal(kf_plan_find_edge(p, h, y)->detail, "N=512 > 256 (split row statistics)");
}

static void test_softmax_on_long_gemm_row_is_never_split(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 4, 32), *w = in2(f->g, "w", 32, 512);
    kf_tensor *h = kf_matmul(f->g, x, w, 0, 0);
    kf_tensor *y = kf_softmax(f->g, h, -1);
    kf_output(f->g, "y", y);
    kf_plan_options o = split_on();
    const kf_plan *p = plan_with(f, &o);
    assert_int_equal(kf_plan_kernel_count(p), 2);
    assert_false(group_of(p, h)->gemm.row_epilogue);
    assert_edge_reason(p, h, y, KF_REASON_ROW_TOO_LONG_FOR_GEMM_EPILOGUE);
    assert_string_equal(kf_plan_find_edge(p, h, y)->detail, "N=512 > 256");
}

static void test_long_norm_feeding_only_gemms_stays_their_prologue_not_split(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 8, 32), *w1 = in2(f->g, "w1", 32, 512);
    kf_tensor *gw = in1(f->g, "gw", 512), *w2 = in2(f->g, "w2", 512, 16);
    kf_tensor *h = kf_matmul(f->g, x, w1, 0, 0);
    kf_tensor *n = kf_rms_norm(f->g, h, gw, -1, 1e-6);
    kf_tensor *y = kf_matmul(f->g, n, w2, 0, 0);
    kf_output(f->g, "y", y);
    kf_plan_options o = split_on();
    const kf_plan *p = plan_with(f, &o);
    assert_int_equal(kf_plan_kernel_count(p), 2);
    assert_false(group_of(p, h)->gemm.row_epilogue);
    assert_true(group_of(p, y)->gemm.a_prologue);
    assert_edge_reason(p, h, n, KF_REASON_ROW_TOO_LONG_FOR_GEMM_EPILOGUE);
}

static void test_row_epilogue_limit_is_an_option(void **state) {
    fixture *f = *state;
    kf_tensor *h, *y;
    build_residual_norm(f, 64, true, &h, &y);
    kf_plan_options o = split_on();
    o.gemm_row_epilogue_max_n = 32;
    const kf_plan *p = plan_with(f, &o);
    assert_int_equal(kf_plan_kernel_count(p), 1); /* past the tile row: split */
    assert_true(group_of(p, y)->gemm.row_split);
    assert_int_equal(kf_plan_check(p, 12, NULL), KF_OK);
}

static void test_split_row_limit_is_an_option(void **state) {
    fixture *f = *state;
    kf_tensor *h, *y;
    build_residual_norm(f, 64, true, &h, &y);
    kf_plan_options o = split_on();
    o.gemm_row_epilogue_max_n = 32;
    o.gemm_row_split_max_n = 48;
    const kf_plan *p = plan_with(f, &o);
    assert_int_equal(kf_plan_kernel_count(p), 2);
    assert_edge_reason(p, h, y, KF_REASON_ROW_TOO_LONG_FOR_GEMM_EPILOGUE);
    assert_string_equal(kf_plan_find_edge(p, h, y)->detail, "N=64 > 48 (split row statistics)");
}

/* ------------------------------------------------------------------------ */
/* d. norm -> matmul                                                          */
/* ------------------------------------------------------------------------ */

static void test_norm_feeding_only_a_gemm_becomes_its_prologue(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 8, 64), *gw = in1(f->g, "gw", 64), *w = in2(f->g, "w", 64, 32);
    kf_tensor *n = kf_rms_norm(f->g, x, gw, -1, 1e-6);
    kf_tensor *y = kf_matmul(f->g, n, w, 0, 0);
    kf_output(f->g, "y", y);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 1);
    const kf_group *g = group_of(p, y);
    assert_true(g->gemm.a_prologue);
    assert_int_equal(g->row_rank, 2);
    assert_true(expr_uses(g, g->gemm.a_root, KF_EXPR_STAT, KF_OP_COUNT));
    assert_true(reads(g, x));
    assert_false(reads(g, n));
    assert_string_equal(g->name, "gemm_rms_norm_f32_8x32");
}

static void test_norm_feeding_three_projections_is_recomputed_in_each(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 8, 32), *gw = in1(f->g, "gw", 32), *gb = in1(f->g, "gb", 32);
    kf_tensor *n = kf_layer_norm(f->g, x, gw, gb, -1, 1e-5);
    kf_tensor *q = kf_matmul(f->g, n, in2(f->g, "wq", 32, 32), 0, 0);
    kf_tensor *k = kf_matmul(f->g, n, in2(f->g, "wk", 32, 32), 0, 0);
    kf_tensor *v = kf_matmul(f->g, n, in2(f->g, "wv", 32, 32), 0, 0);
    kf_output(f->g, "q", q);
    kf_output(f->g, "k", k);
    kf_output(f->g, "v", v);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 3);
    assert_true(group_of(p, q)->gemm.a_prologue);
    assert_true(group_of(p, k)->gemm.a_prologue);
    assert_true(group_of(p, v)->gemm.a_prologue);
    assert_null(kf_plan_find_edge(p, n, k));
}

static char *report_string(const kf_plan *p, kf_report_format fmt);
static const char *report_name(const kf_tensor *t, char *buf, size_t size);
static kf_graph *parse_file(kf_ctx *ctx, const char *path);

/* A fresh graph in the fixture (its plan first: it points into the graph). */
static void fresh_graph(fixture *f) {
    kf_plan_destroy(f->plan);
    f->plan = NULL;
    kf_graph_destroy(f->g);
    f->g = NULL;
    assert_int_equal(kf_graph_create(f->ctx, &f->g), KF_OK);
}

/* GEMM siblings (fusion/fuse_gemm_siblings.c): projections of one normalized
 * input. q takes a bias, k a silu, v nothing: each keeps its own epilogue. */
static void build_qkv(fixture *f, kf_tensor **q, kf_tensor **k, kf_tensor **v, kf_tensor **x) {
    *x = in2(f->g, "x", 16, 32);
    kf_tensor *n = kf_rms_norm(f->g, *x, in1(f->g, "gw", 32), -1, 1e-6);
    *q = kf_add(f->g, kf_matmul(f->g, n, in2(f->g, "wq", 32, 32), 0, 0), in1(f->g, "bq", 32));
    *k = kf_silu(f->g, kf_matmul(f->g, n, in2(f->g, "wk", 32, 16), 0, 0));
    *v = kf_matmul(f->g, n, in2(f->g, "wv", 32, 16), 0, 0);
    kf_output(f->g, "q", *q);
    kf_output(f->g, "k", *k);
    kf_output(f->g, "v", *v);
}

static void test_gemm_siblings_of_one_normalized_input_form_one_set_the_report_names(void **state) {
    fixture *f = *state;
    kf_tensor *q, *k, *v, *x;
    build_qkv(f, &q, &k, &v, &x);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 3);
    const kf_group *gq = group_of(p, q), *gk = group_of(p, k), *gv = group_of(p, v);
    /* adjacent, in the matmuls' order, each with its own epilogue and write */
    assert_int_equal(gk->id, gq->id + 1);
    assert_int_equal(gv->id, gq->id + 2);
    const kf_group *m[3] = {gq, gk, gv};
    for (uint32_t i = 0; i < 3; i++) {
        assert_true(kf_group_in_gemm_sib_set(m[i]));
        assert_int_equal(m[i]->gemm.sib_first, gq->id);
        assert_int_equal(m[i]->gemm.sib_index, i);
        assert_int_equal(m[i]->gemm.sib_count, 3);
        assert_string_equal(m[i]->gemm.sib_apart, "");
        assert_true(m[i]->gemm.a_prologue);
        assert_int_equal(m[i]->n_writes, 1);
    }
    assert_true(expr_uses(gq, root_of(gq, q), KF_EXPR_OP, KF_OP_ADD));
    assert_true(expr_uses(gk, root_of(gk, k), KF_EXPR_OP, KF_OP_SILU));
    assert_false(expr_uses(gv, gv->roots[0] == KF_NONE ? 0 : gv->roots[0], KF_EXPR_OP, KF_OP_SILU));
    char *txt = report_string(p, KF_REPORT_TEXT);
    char want[160], nq[24], nk[24], nv[24];
    snprintf(want, sizeof want, "siblings: %s, %s, %s (member 1 of 3, groups %u..%u)",
             report_name(p->graph->nodes[gq->gemm.anchor[0]], nq, sizeof nq),
             report_name(p->graph->nodes[gk->gemm.anchor[0]], nk, sizeof nk),
             report_name(p->graph->nodes[gv->gemm.anchor[0]], nv, sizeof nv), gq->id, gq->id + 2);
    assert_non_null(strstr(txt, want));
    /* A read once: the two others' 16 x 32 f32 reads of x */
    assert_non_null(strstr(txt, "one A through one norm; computed once, it saves 4.0 KiB of reads of the norm's input"));
    assert_non_null(strstr(txt, "(member 3 of 3"));
    free(txt);
    char *js = report_string(p, KF_REPORT_JSON);
    char jwant[256];
    snprintf(jwant, sizeof jwant,
             "\"gemm_siblings\": {\"first\": %u, \"index\": 0, \"count\": 3, \"bytes_saved\": "
             "4096, \"members\": [\"%s\", \"%s\", \"%s\"]}",
             gq->id, nq, nk, nv);
    assert_non_null(strstr(js, jwant));
    free(js);
    /* the pass switched off: no set */
    kf_plan_options o;
    kf_plan_options_init(&o);
    o.disabled = 1u << KF_PASS_GEMM_SIBLINGS;
    p = plan_with(f, &o);
    assert_false(kf_group_in_gemm_sib_set(group_of(p, q)));
    assert_int_equal(group_of(p, q)->gemm.sib_first, KF_NONE);
    /* a bound of 2: q and k, then v alone, which says why */
    kf_plan_options_init(&o);
    o.gemm_sibling_max = 2;
    p = plan_with(f, &o);
    assert_int_equal(group_of(p, q)->gemm.sib_count, 2);
    assert_int_equal(group_of(p, k)->gemm.sib_index, 1);
    assert_false(kf_group_in_gemm_sib_set(group_of(p, v)));
    assert_non_null(strstr(group_of(p, v)->gemm.sib_apart, "is full (2 GEMMs"));
}

/* One projection reads x through another norm than the others'. */
static void build_qkv_other_norm(fixture *f, int which, kf_tensor **q, kf_tensor **k,
                                 kf_tensor **v) {
    kf_tensor *x = in2(f->g, "x", 16, 32), *gw = in1(f->g, "gw", 32);
    kf_tensor *n = kf_rms_norm(f->g, x, gw, -1, 1e-6);
    kf_tensor *n2 = which == 0   ? kf_rms_norm(f->g, x, in1(f->g, "gw2", 32), -1, 1e-6)
                    : which == 1 ? kf_rms_norm(f->g, x, gw, -1, 1e-5)
                                 : kf_layer_norm(f->g, x, gw, in1(f->g, "gb", 32), -1, 1e-6);
    *q = kf_matmul(f->g, n, in2(f->g, "wq", 32, 32), 0, 0);
    *k = kf_matmul(f->g, n, in2(f->g, "wk", 32, 32), 0, 0);
    *v = kf_matmul(f->g, n2, in2(f->g, "wv", 32, 32), 0, 0);
    kf_output(f->g, "q", *q);
    kf_output(f->g, "k", *k);
    kf_output(f->g, "v", *v);
}

static void test_gemm_siblings_with_another_gamma_eps_or_norm_keep_apart_and_say_why(
    void **state) {
    fixture *f = *state;
    static const char *const why[] = {"its norm's gamma is", "its norm's eps is 1e-05",
                                      "its norm is layer_norm, the set's rms_norm"};
    for (int which = 0; which < 3; which++) {
        fresh_graph(f);
        kf_tensor *q, *k, *v;
        build_qkv_other_norm(f, which, &q, &k, &v);
        const kf_plan *p = plan(f);
        assert_int_equal(group_of(p, q)->gemm.sib_count, 2);
        assert_int_equal(group_of(p, k)->gemm.sib_first, group_of(p, q)->id);
        const kf_group *gv = group_of(p, v);
        assert_false(kf_group_in_gemm_sib_set(gv));
        if (!strstr(gv->gemm.sib_apart, why[which]))
            fail_msg("case %d: apart \"%s\", expected \"%s\"", which, gv->gemm.sib_apart,
                     why[which]);
        char *txt = report_string(p, KF_REPORT_TEXT);
        assert_non_null(strstr(txt, "kept apart from its GEMM siblings: "));
        free(txt);
        char *js = report_string(p, KF_REPORT_JSON);
        assert_non_null(strstr(js, "\"gemm_siblings_apart\": \""));
        free(js);
    }
}

static void test_gemm_siblings_without_a_prologue_or_reading_each_other_keep_apart(void **state) {
    fixture *f = *state;
    /* the same A from memory: no norm to share */
    kf_tensor *x = in2(f->g, "x", 16, 32);
    kf_tensor *a = kf_matmul(f->g, x, in2(f->g, "wa", 32, 32), 0, 0);
    kf_tensor *b = kf_matmul(f->g, x, in2(f->g, "wb", 32, 32), 0, 0);
    kf_output(f->g, "a", a);
    kf_output(f->g, "b", b);
    const kf_plan *p = plan(f);
    assert_false(kf_group_in_gemm_sib_set(group_of(p, a)));
    assert_false(kf_group_in_gemm_sib_set(group_of(p, b)));
    assert_non_null(strstr(group_of(p, b)->gemm.sib_apart, "no norm prologue to share"));
    /* k's epilogue reads q: they cannot run at one point */
    fresh_graph(f);
    x = in2(f->g, "x", 16, 32);
    kf_tensor *n = kf_rms_norm(f->g, x, in1(f->g, "gw", 32), -1, 1e-6);
    kf_tensor *q = kf_matmul(f->g, n, in2(f->g, "wq", 32, 32), 0, 0);
    kf_tensor *k = kf_add(f->g, kf_matmul(f->g, n, in2(f->g, "wk", 32, 32), 0, 0), q);
    kf_output(f->g, "q", q);
    kf_output(f->g, "k", k);
    p = plan(f);
    assert_false(kf_group_in_gemm_sib_set(group_of(p, q)));
    assert_false(kf_group_in_gemm_sib_set(group_of(p, k)));
    assert_non_null(strstr(group_of(p, k)->gemm.sib_apart, "read one another's values"));
}

/* A member's epilogue reads a value another group computes after the first
 * member's matmul: the set waits for that group, and its members stay
 * adjacent. */
static void test_gemm_siblings_stay_adjacent_when_a_member_waits_for_another_group(
    void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 16, 32);
    kf_tensor *n = kf_rms_norm(f->g, x, in1(f->g, "gw", 32), -1, 1e-6);
    kf_tensor *q = kf_matmul(f->g, n, in2(f->g, "wq", 32, 32), 0, 0);
    kf_tensor *t = kf_exp(f->g, kf_reduce_sum(f->g, in2(f->g, "y", 16, 32), -1, 1));
    kf_tensor *k = kf_add(f->g, kf_matmul(f->g, n, in2(f->g, "wk", 32, 32), 0, 0), t);
    kf_tensor *v = kf_matmul(f->g, n, in2(f->g, "wv", 32, 32), 0, 0);
    kf_output(f->g, "q", q);
    kf_output(f->g, "k", k);
    kf_output(f->g, "v", v);
    const kf_plan *p = plan(f);
    const kf_group *gq = group_of(p, q), *gt = group_of(p, t);
    assert_int_equal(gq->gemm.sib_count, 3);
    assert_true(gt->id < gq->id);
    assert_int_equal(group_of(p, k)->id, gq->id + 1);
    assert_int_equal(group_of(p, v)->id, gq->id + 2);
}

static void test_plan_checker_rejects_a_broken_gemm_sibling_set(void **state) {
    fixture *f = *state;
    kf_tensor *q, *k, *v, *x;
    build_qkv(f, &q, &k, &v, &x);
    kf_plan *p = (kf_plan *)plan(f);
    kf_group *gk = (kf_group *)group_of(p, k);
    assert_int_equal(kf_plan_check_structure(p), KF_OK);
    gk->gemm.sib_index = 2; /* names another place */
    assert_int_equal(kf_plan_check_structure(p), KF_ERR_INTERNAL);
    assert_non_null(strstr(kf_graph_error(f->g), "S10"));
    gk->gemm.sib_index = 1;
    int64_t k0 = gk->gemm.k;
    gk->gemm.k = k0 + 1; /* another K */
    assert_int_equal(kf_plan_check_structure(p), KF_ERR_INTERNAL);
    assert_non_null(strstr(kf_graph_error(f->g), "S10"));
    gk->gemm.k = k0;
    gk->gemm.row_epilogue = true; /* a row stage on a member's output */
    assert_int_equal(kf_plan_check_structure(p), KF_ERR_INTERNAL);
    assert_non_null(strstr(kf_graph_error(f->g), "S10"));
    gk->gemm.row_epilogue = false;
    p->options.gemm_sibling_max = 2; /* past the bound */
    assert_int_equal(kf_plan_check_structure(p), KF_ERR_INTERNAL);
    assert_non_null(strstr(kf_graph_error(f->g), "S10"));
    p->options.gemm_sibling_max = 0;
    assert_int_equal(kf_plan_check_structure(p), KF_OK);
}

/* The LLaMA-7B layer torch.compile hands kfuse (B8 S2048; planned only: the
 * reference would take hours): Q, K and V are one set, the SwiGLU pair
 * shares the other norm and stays its own group. */
static void test_llama_layer_qkv_projections_are_one_gemm_sibling_set(void **state) {
    fixture *f = *state;
    kf_graph_destroy(f->g);
    f->g = parse_file(f->ctx, "tests/data/llama7b_layer_b8s2048.kfg");
    kf_plan *p = NULL;
    assert_int_equal(kf_plan_create(f->g, NULL, &p), KF_OK);
    assert_int_equal(kf_plan_check_structure(p), KF_OK);
    int sets = 0, members = 0;
    for (uint32_t i = 0; i < p->n_groups; i++) {
        const kf_group *g = &p->groups[i];
        if (!kf_group_in_gemm_sib_set(g))
            continue;
        members++;
        sets += g->gemm.sib_index == 0;
        assert_int_equal(g->gemm.sib_count, 3);
        assert_int_equal(g->gemm.n, 4096);
        assert_true(g->gemm.a_prologue);
    }
    assert_int_equal(sets, 1);
    assert_int_equal(members, 3);
    char *txt = report_string(p, KF_REPORT_TEXT);
    assert_non_null(strstr(txt, "computed once, it saves 256.0 MiB of reads of the norm's input"));
    free(txt);
    kf_plan_destroy(p);
}

static void test_norm_with_row_longer_than_prologue_limit_is_its_own_kernel(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 4, 64), *gw = in1(f->g, "gw", 64), *w = in2(f->g, "w", 64, 8);
    kf_tensor *n = kf_rms_norm(f->g, x, gw, -1, 1e-6);
    kf_tensor *y = kf_matmul(f->g, n, w, 0, 0);
    kf_output(f->g, "y", y);
    kf_plan_options o;
    kf_plan_options_init(&o);
    o.norm_prologue_max_k = 32;
    const kf_plan *p = plan_with(f, &o);
    assert_int_equal(kf_plan_kernel_count(p), 2);
    assert_int_equal(group_of(p, n)->kind, KF_GROUP_ROWWISE);
    assert_edge_reason(p, n, y, KF_REASON_ROW_TOO_LONG_FOR_PROLOGUE);
}

static void test_norm_feeding_gemm_operand_b_is_not_a_prologue(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 16, 8), *gw = in1(f->g, "gw", 8), *a = in2(f->g, "a", 4, 16);
    kf_tensor *n = kf_rms_norm(f->g, x, gw, -1, 1e-6);
    kf_tensor *y = kf_matmul(f->g, a, n, 0, 0);
    kf_output(f->g, "y", y);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 2);
    assert_edge_reason(p, n, y, KF_REASON_NOT_OPERAND_A);
}

/* ------------------------------------------------------------------------ */
/* e. SwiGLU                                                                  */
/* ------------------------------------------------------------------------ */

static void test_swiglu_is_one_group_over_both_gemms(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 8, 32), *wg = in2(f->g, "wg", 32, 64),
              *wu = in2(f->g, "wu", 32, 64);
    kf_tensor *gate = kf_matmul(f->g, x, wg, 0, 0), *up = kf_matmul(f->g, x, wu, 0, 0);
    kf_tensor *y = kf_mul(f->g, kf_silu(f->g, gate), up);
    kf_tensor *down = kf_matmul(f->g, y, in2(f->g, "wd", 64, 32), 0, 0);
    kf_output(f->g, "down", down);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 2);
    const kf_group *g = group_of(p, y);
    assert_int_equal(g->kind, KF_GROUP_GEMM);
    assert_int_equal(g->gemm.n_anchors, 2);
    assert_int_equal(g->gemm.anchor[0], gate->id);
    assert_int_equal(g->gemm.anchor[1], up->id);
    assert_same_group(p, gate, up);
    uint32_t r = root_of(g, y);
    assert_true(expr_uses(g, r, KF_EXPR_OP, KF_OP_SILU));
    assert_int_equal(g->expr[r].op, KF_OP_MUL);
    assert_string_equal(g->name, "gated_gemm_silu_mul_f32_8x64");
}

/* ------------------------------------------------------------------------ */
/* f. Elementwise chains with broadcasts; casts                               */
/* ------------------------------------------------------------------------ */

/* expand adds no kernel and no node: its consumer reads x with stride 0 along
 * the expanded dims, as an implicit broadcast would. */
static void test_expand_fuses_as_a_stride_0_load(void **state) {
    fixture *f = *state;
    kf_tensor *x = kf_input(f->g, "x", KF_DTYPE_F32, 2, DIMS(4, 1)), *b = in2(f->g, "b", 4, 8);
    kf_tensor *e = kf_expand(f->g, x, 3, DIMS(2, 4, 8));
    kf_tensor *y = kf_mul(f->g, kf_exp(f->g, e), b);
    kf_output(f->g, "y", y);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 1);
    const kf_group *g = group_of(p, y);
    assert_int_equal(g->kind, KF_GROUP_ELEMENTWISE);
    bool seen = false;
    for (uint32_t i = 0; i < g->n_expr; i++) {
        const kf_expr *n = &g->expr[i];
        assert_false(n->kind == KF_EXPR_OP && n->op == KF_OP_EXPAND);
        if (n->kind == KF_EXPR_LOAD && n->tensor == x->id) {
            assert_int_equal(n->strides[0], 0);
            assert_int_equal(n->strides[1], 1);
            assert_int_equal(n->strides[2], 0);
            seen = true;
        }
    }
    assert_true(seen);
}

/* Rotary embedding as models write it: x*cos + concat(-x2, x1)*sin. The
 * slices, the neg and the concat are read through in the one kernel: no node
 * stands for a slice, the concat is a where over two loads of x at clamped
 * coordinate nodes, and x is the only operand besides cos and sin. */
static void test_rotary_embedding_is_one_kernel_reading_x_through_the_remap(void **state) {
    fixture *f = *state;
    kf_graph *g = f->g;
    kf_tensor *x = kf_input(g, "x", KF_DTYPE_F32, 3, DIMS(8, 4, 16));
    kf_tensor *cs = kf_input(g, "cos", KF_DTYPE_F32, 3, DIMS(8, 1, 16));
    kf_tensor *sn = kf_input(g, "sin", KF_DTYPE_F32, 3, DIMS(8, 1, 16));
    kf_tensor *x1 = kf_slice(g, x, -1, 0, 8, 1), *x2 = kf_slice(g, x, -1, 8, INT64_MAX, 1);
    kf_tensor *parts[2] = {kf_neg(g, x2), x1};
    kf_tensor *rh = kf_concat(g, 2, parts, -1);
    kf_tensor *y = kf_add(g, kf_mul(g, x, cs), kf_mul(g, rh, sn));
    kf_output(g, "y", y);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 1);
    assert_int_equal(p->n_edges, 0);
    const kf_group *gr = group_of(p, y);
    assert_int_equal(gr->kind, KF_GROUP_ELEMENTWISE);
    assert_int_equal(gr->n_reads, 3);
    int dyn_loads = 0, wheres = 0;
    for (uint32_t i = 0; i < gr->n_expr; i++) {
        const kf_expr *e = &gr->expr[i];
        assert_false(e->kind == KF_EXPR_OP && kf_op_has(e->op, KF_TRAIT_REMAP));
        if (e->kind == KF_EXPR_LOAD && e->tensor == x->id && e->src[0] != KF_NONE) {
            assert_int_equal(e->dyn_strides[0], 1);
            assert_int_equal(e->strides[2], 0);
            dyn_loads++;
        }
        if (e->kind == KF_EXPR_OP && e->op == KF_OP_WHERE) {
            assert_int_equal(e->tensor, rh->id);
            assert_false(e->remapped);
            wheres++;
        }
    }
    assert_int_equal(dyn_loads, 2);
    assert_int_equal(wheres, 1);
    assert_int_equal(kf_plan_check(p, 7, NULL), KF_OK);
}

/* A fused QKV projection sliced into thirds: one GEMM writes qkv; each
 * consumer reads its third through a load at an offset; no slice is a kernel. */
static void test_qkv_slices_are_offset_loads_in_their_consumers(void **state) {
    fixture *f = *state;
    kf_graph *g = f->g;
    kf_tensor *x = in2(g, "x", 16, 32), *w = in2(g, "w", 32, 96);
    kf_tensor *qkv = kf_matmul(g, x, w, 0, 0);
    kf_tensor *q = kf_slice(g, qkv, 1, 0, 32, 1), *k = kf_slice(g, qkv, 1, 32, 64, 1);
    kf_tensor *v = kf_slice(g, qkv, 1, 64, 96, 1);
    kf_tensor *ys[3] = {kf_relu(g, q), kf_exp(g, k), kf_neg(g, v)};
    for (int i = 0; i < 3; i++)
        kf_output(g, i == 0 ? "q" : i == 1 ? "k" : "v", ys[i]);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 4);
    for (int i = 0; i < 3; i++) {
        const kf_group *gr = group_of(p, ys[i]);
        assert_int_equal(gr->kind, KF_GROUP_ELEMENTWISE);
        assert_ptr_equal(group_of(p, i == 0 ? q : i == 1 ? k : v), gr);
        bool seen = false;
        for (uint32_t n = 0; n < gr->n_expr; n++) {
            const kf_expr *e = &gr->expr[n];
            if (e->kind == KF_EXPR_LOAD && e->tensor == qkv->id) {
                assert_int_equal(e->offset, 32 * i);
                assert_int_equal(e->strides[0], 96);
                assert_int_equal(e->strides[1], 1);
                seen = true;
            }
        }
        assert_true(seen);
        assert_edge_reason(p, qkv, i == 0 ? q : i == 1 ? k : v, KF_REASON_REMAP_INTO_ANCHOR);
    }
    assert_int_equal(kf_plan_check(p, 8, NULL), KF_OK);
}

/* Where a remap cannot fuse it is its own elementwise kernel, and the report
 * says why: a GEMM operand (loaded tile by tile), a GEMM epilogue's side
 * input (REMAP_INTO_ANCHOR), a gather's computed indices (GATHER_INDEX). */
static void test_remaps_that_cannot_fuse_say_why(void **state) {
    fixture *f = *state;
    kf_graph *g = f->g;
    kf_tensor *x = in2(g, "x", 16, 32), *w = in2(g, "w", 64, 32), *b = in1(g, "b", 64);
    kf_tensor *ws = kf_slice(g, w, 0, 0, 32, 1);        /* [32, 32]: a GEMM operand */
    kf_tensor *h = kf_matmul(g, x, ws, 0, 0);           /* [16, 32] */
    kf_tensor *bs = kf_slice(g, b, 0, 32, 64, 1);       /* [32]: a bias of the epilogue */
    kf_tensor *y = kf_add(g, h, bs);
    kf_tensor *idx = kf_cast(g, kf_abs(g, kf_input(g, "t", KF_DTYPE_F32, 1, DIMS(5))), KF_DTYPE_I32);
    kf_tensor *e = kf_gather(g, x, idx, 0);
    kf_output(g, "y", y);
    kf_output(g, "e", e);
    const kf_plan *p = plan(f);
    assert_edge_reason(p, ws, h, KF_REASON_ANCHOR_BOUNDARY);
    assert_edge_reason(p, bs, y, KF_REASON_REMAP_INTO_ANCHOR);
    assert_edge_reason(p, idx, e, KF_REASON_GATHER_INDEX);
    assert_int_equal(group_of(p, ws)->kind, KF_GROUP_ELEMENTWISE);
    assert_int_equal(group_of(p, bs)->kind, KF_GROUP_ELEMENTWISE);
    assert_true(group_of(p, ws) != group_of(p, h));
    /* the text report names the reason */
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    assert_int_equal(kf_plan_report(p, KF_REPORT_TEXT, m), KF_OK);
    fclose(m);
    assert_non_null(strstr(buf, "GATHER_INDEX"));
    assert_non_null(strstr(buf, "REMAP_INTO_ANCHOR"));
    free(buf);
    assert_int_equal(kf_plan_check(p, 9, NULL), KF_OK);
}

static void test_elementwise_chain_fuses_across_broadcasts_and_casts(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 4, 8), *s = in1(f->g, "s", 8);
    kf_tensor *c = kf_input(f->g, "c", KF_DTYPE_F32, 2, DIMS(4, 1));
    kf_tensor *e = kf_exp(f->g, kf_mul(f->g, x, s));
    kf_tensor *y = kf_cast(f->g, kf_add(f->g, e, c), KF_DTYPE_F16);
    kf_output(f->g, "y", y);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 1);
    const kf_group *g = group_of(p, y);
    assert_int_equal(g->kind, KF_GROUP_ELEMENTWISE);
    assert_int_equal(g->n_reads, 3);
    /* The broadcast operands are read with stride 0 along their missing dims. */
    for (uint32_t i = 0; i < g->n_expr; i++) {
        const kf_expr *n = &g->expr[i];
        if (n->kind == KF_EXPR_LOAD && n->tensor == s->id) {
            assert_int_equal(n->strides[0], 0);
            assert_int_equal(n->strides[1], 1);
        }
        if (n->kind == KF_EXPR_LOAD && n->tensor == c->id) {
            assert_int_equal(n->strides[0], 1);
            assert_int_equal(n->strides[1], 0);
        }
    }
    assert_int_equal(g->expr[root_of(g, y)].op, KF_OP_CAST);
    assert_int_equal(g->expr[root_of(g, y)].dtype, KF_DTYPE_F16);
}

static void test_value_used_twice_inside_one_group_is_one_shared_node(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 4, 8);
    kf_tensor *s = kf_sigmoid(f->g, x);
    kf_tensor *y = kf_mul(f->g, s, kf_sub(f->g, kf_scalar(f->g, KF_DTYPE_F32, 1.0), s));
    kf_output(f->g, "y", y);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 1);
    uint32_t n_sigmoid = 0;
    const kf_group *g = group_of(p, y);
    for (uint32_t i = 0; i < g->n_expr; i++)
        n_sigmoid += g->expr[i].kind == KF_EXPR_OP && g->expr[i].op == KF_OP_SIGMOID;
    assert_int_equal(n_sigmoid, 1);
}

/* ------------------------------------------------------------------------ */
/* g. Row-wise kernels with prologue and epilogue                             */
/* ------------------------------------------------------------------------ */

static void test_rowwise_ops_take_elementwise_prologue_and_epilogue(void **state) {
    fixture *f0 = *state;
    for (int op = 0; op < 8; op++) {
        fixture f = *f0;
        f.plan = NULL;
        assert_int_equal(kf_graph_create(f.ctx, &f.g), KF_OK);
        kf_tensor *x = in2(f.g, "x", 6, 16), *gw = in1(f.g, "gw", 16), *gb = in1(f.g, "gb", 16);
        kf_tensor *pro = kf_add(f.g, kf_mul(f.g, x, kf_scalar(f.g, KF_DTYPE_F32, 2.0)),
                                kf_scalar(f.g, KF_DTYPE_F32, 1.0));
        kf_tensor *r = op == 0   ? kf_rms_norm(f.g, pro, gw, -1, 1e-6)
                       : op == 1 ? kf_layer_norm(f.g, pro, gw, gb, -1, 1e-5)
                       : op == 2 ? kf_softmax(f.g, pro, -1)
                       : op == 3 ? kf_reduce_sum(f.g, pro, -1, 1)
                       : op == 4 ? kf_reduce_max(f.g, pro, -1, 0)
                       : op == 5 ? kf_reduce_mean(f.g, pro, -1, 1)
                       : op == 6 ? kf_reduce_min(f.g, pro, -1, 1)
                                 : kf_log_softmax(f.g, pro, -1);
        kf_tensor *y = kf_relu(f.g, kf_mul(f.g, r, kf_scalar(f.g, KF_DTYPE_F32, 3.0)));
        kf_output(f.g, "y", y);
        const kf_plan *p = plan(&f);
        assert_int_equal(kf_plan_kernel_count(p), 1);
        const kf_group *g = group_of(p, y);
        assert_int_equal(g->kind, KF_GROUP_ROWWISE);
        assert_true(g->row.present);
        assert_int_equal(g->row.tensor, r->id);
        assert_int_equal(g->row.length, 16);
        assert_true(expr_uses(g, g->row.input, KF_EXPR_OP, KF_OP_MUL)); /* the prologue */
        assert_true(expr_uses(g, root_of(g, y), KF_EXPR_STAT, KF_OP_COUNT));
        assert_int_equal(g->expr[root_of(g, y)].op, KF_OP_RELU); /* the epilogue */
        kf_plan_destroy(f.plan);
        kf_graph_destroy(f.g);
    }
}

/* ------------------------------------------------------------------------ */
/* h. Attention from primitives                                               */
/* ------------------------------------------------------------------------ */

enum { ATTN_PLAIN, ATTN_CAUSAL, ATTN_SOFTCAP, ATTN_ALIBI, ATTN_WINDOW };

/* q, k, v [H=2, S=8, D=16]; scores [2, 8, 8]. */
static kf_tensor *build_attention(fixture *f, int variant) {
    kf_graph *g = f->g;
    const int64_t hsd[] = {2, 8, 16};
    kf_tensor *q = kf_input(g, "q", KF_DTYPE_F32, 3, hsd),
              *k = kf_input(g, "k", KF_DTYPE_F32, 3, hsd);
    kf_tensor *v = kf_input(g, "v", KF_DTYPE_F32, 3, hsd);
    kf_tensor *s = kf_mul(g, kf_matmul(g, q, k, 0, 1), kf_scalar(g, KF_DTYPE_F32, 0.25));
    kf_tensor *row = kf_iota(g, KF_DTYPE_I32, 2, DIMS(8, 8), 0);
    kf_tensor *col = kf_iota(g, KF_DTYPE_I32, 2, DIMS(8, 8), 1);
    if (variant == ATTN_SOFTCAP) {
        kf_tensor *c = kf_scalar(g, KF_DTYPE_F32, 30.0);
        s = kf_mul(g, c, kf_tanh(g, kf_div(g, s, c)));
    }
    if (variant == ATTN_ALIBI) {
        kf_tensor *slope = kf_input(g, "slope", KF_DTYPE_F32, 3, DIMS(2, 1, 1));
        kf_tensor *dist = kf_cast(g, kf_sub(g, col, row), KF_DTYPE_F32);
        s = kf_add(g, s, kf_mul(g, slope, dist));
    }
    kf_tensor *keep = NULL;
    if (variant == ATTN_CAUSAL || variant == ATTN_SOFTCAP || variant == ATTN_ALIBI)
        keep = kf_ge(g, row, col);
    if (variant == ATTN_WINDOW) {
        /* 0 <= q - kv < 3, as one compare: min(d, 2 - d) >= 0. */
        kf_tensor *d = kf_sub(g, row, col);
        kf_tensor *two = kf_scalar(g, KF_DTYPE_I32, 2.0), *zero = kf_scalar(g, KF_DTYPE_I32, 0.0);
        keep = kf_ge(g, kf_min(g, d, kf_sub(g, two, d)), zero);
    }
    if (keep)
        s = kf_where(g, keep, s, kf_scalar(g, KF_DTYPE_F32, -INFINITY));
    kf_tensor *o = kf_matmul(g, kf_softmax(g, s, -1), v, 0, 0);
    kf_output(g, "o", o);
    return o;
}

static const kf_group *plan_attention(fixture *f, int variant) {
    kf_tensor *o = build_attention(f, variant);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 1);
    const kf_group *g = group_of(p, o);
    assert_int_equal(g->kind, KF_GROUP_ATTENTION);
    assert_true(expr_uses(g, g->attn.score, KF_EXPR_SCORE, KF_OP_COUNT));
    assert_int_equal(g->attn.heads, 2);
    assert_int_equal(g->attn.sq, 8);
    assert_int_equal(g->attn.skv, 8);
    assert_int_equal(g->attn.d, 16);
    assert_true(g->attn.k_transposed);
    return g;
}

/* log_softmax(Q K^T) V is no attention: the kernel's P is a softmax. It plans as
 * GEMMs around a row-wise log_softmax. */
static void test_log_softmax_between_matmuls_is_not_attention(void **state) {
    fixture *f = *state;
    kf_graph *g = f->g;
    const int64_t hsd[] = {2, 8, 16};
    kf_tensor *q = kf_input(g, "q", KF_DTYPE_F32, 3, hsd),
              *k = kf_input(g, "k", KF_DTYPE_F32, 3, hsd);
    kf_tensor *v = kf_input(g, "v", KF_DTYPE_F32, 3, hsd);
    kf_tensor *s = kf_matmul(g, q, k, 0, 1);
    kf_tensor *o = kf_matmul(g, kf_log_softmax(g, s, -1), v, 0, 0);
    kf_output(g, "o", o);
    const kf_plan *p = plan(f);
    for (uint32_t i = 0; i < p->n_groups; i++)
        assert_int_not_equal(p->groups[i].kind, KF_GROUP_ATTENTION);
    assert_int_equal(group_of(p, o)->kind, KF_GROUP_GEMM);
}

/* The scores' log-sum-exp over the keys (of the scores; of their cast to
 * f32, used once) joins the attention group as its second write, and the
 * plan checks; a logsumexp over the query axis, or one whose cast is also an
 * output, is no second output: the scores then have a use the group cannot
 * keep, and the softmax is no attention's P. */
static void test_attention_takes_the_log_sum_exp_of_its_scores_as_a_second_output(void **state) {
    fixture *f = *state;
    for (int var = 0; var < 4; var++) {
        kf_graph *g = NULL;
        assert_int_equal(kf_graph_create(f->ctx, &g), KF_OK);
        const int64_t hsd[] = {2, 8, 16};
        kf_tensor *q = kf_input(g, "q", KF_DTYPE_BF16, 3, hsd),
                  *k = kf_input(g, "k", KF_DTYPE_BF16, 3, hsd),
                  *v = kf_input(g, "v", KF_DTYPE_BF16, 3, hsd);
        kf_tensor *s = kf_mul(g, kf_matmul(g, q, k, 0, 1), kf_scalar(g, KF_DTYPE_BF16, 0.25));
        kf_tensor *o = kf_matmul(g, kf_softmax(g, s, -1), v, 0, 0);
        kf_tensor *x = var == 0 || var == 2 ? s : kf_cast(g, s, KF_DTYPE_F32);
        kf_tensor *lse = kf_logsumexp(g, x, var == 2 ? 1 : 2, 0);
        kf_output(g, "o", o);
        kf_output(g, "lse", lse);
        if (var == 3)
            kf_output(g, "s32", x);
        assert_int_equal(kf_graph_status(g), KF_OK);
        kf_plan *p = NULL;
        assert_int_equal(kf_plan_create(g, NULL, &p), KF_OK);
        assert_int_equal(kf_plan_check(p, kf_test_seed(), NULL), KF_OK);
        const kf_group *ga = NULL;
        for (uint32_t i = 0; i < p->n_groups; i++)
            if (p->groups[i].kind == KF_GROUP_ATTENTION)
                ga = &p->groups[i];
        if (var < 2) {
            assert_non_null(ga);
            assert_int_equal(kf_plan_kernel_count(p), 1);
            assert_int_equal(ga->attn.lse, lse->id);
            assert_int_equal(ga->n_writes, 2);
        } else {
            assert_null(ga);
        }
        kf_plan_destroy(p);
        kf_graph_destroy(g);
    }
}

static void test_attention_without_mask_is_one_kernel_with_no_mask(void **state) {
    const kf_group *g = plan_attention(*state, ATTN_PLAIN);
    assert_int_equal(g->attn.mask, KF_MASK_NONE);
    assert_int_equal(g->expr[g->attn.score].op, KF_OP_MUL);
}

static void test_causal_attention_from_primitives_is_one_kernel_with_causal_mask(void **state) {
    const kf_group *g = plan_attention(*state, ATTN_CAUSAL);
    assert_int_equal(g->attn.mask, KF_MASK_CAUSAL);
    assert_int_equal(g->attn.mask_node, g->attn.score);
    assert_true(expr_uses(g, g->attn.score, KF_EXPR_Q_IDX, KF_OP_COUNT));
    assert_true(expr_uses(g, g->attn.score, KF_EXPR_KV_IDX, KF_OP_COUNT));
    assert_string_equal(g->name, "attention_causal_f32_2x8x8");
}

static void test_softcap_attention_keeps_tanh_in_score_expression(void **state) {
    const kf_group *g = plan_attention(*state, ATTN_SOFTCAP);
    assert_int_equal(g->attn.mask, KF_MASK_CAUSAL);
    assert_true(expr_uses(g, g->attn.score, KF_EXPR_OP, KF_OP_TANH));
}

static void test_alibi_attention_reads_slope_per_head(void **state) {
    const kf_group *g = plan_attention(*state, ATTN_ALIBI);
    assert_int_equal(g->attn.mask, KF_MASK_CAUSAL);
    bool slope = false;
    for (uint32_t i = 0; i < g->n_expr; i++) {
        const kf_expr *e = &g->expr[i];
        if (e->kind == KF_EXPR_LOAD && e->space == KF_SPACE_OUT && e->strides[0] == 1 &&
            e->strides[1] == 0 && e->strides[2] == 0)
            slope = true;
    }
    assert_true(slope);
}

static void test_sliding_window_attention_is_classified_with_its_window(void **state) {
    const kf_group *g = plan_attention(*state, ATTN_WINDOW);
    assert_int_equal(g->attn.mask, KF_MASK_SLIDING_WINDOW);
    assert_int_equal(g->attn.window, 3);
}

static void test_mask_on_a_loaded_tensor_is_general(void **state) {
    fixture *f = *state;
    kf_graph *g = f->g;
    kf_tensor *q = in2(g, "q", 8, 16), *k = in2(g, "k", 8, 16), *v = in2(g, "v", 8, 16);
    kf_tensor *m = kf_input(g, "m", KF_DTYPE_BOOL, 2, DIMS(8, 8));
    kf_tensor *s = kf_where(g, m, kf_matmul(g, q, k, 0, 1), kf_scalar(g, KF_DTYPE_F32, -INFINITY));
    kf_tensor *o = kf_matmul(g, kf_softmax(g, s, -1), v, 0, 0);
    kf_output(g, "o", o);
    const kf_plan *p = plan(f);
    assert_int_equal(group_of(p, o)->attn.mask, KF_MASK_GENERAL);
}

/* A keep map of 4 x 2 tiles repeated to elements (and sliced to a ragged
 * length) is BLOCK_SPARSE with its tile size, the repeats and slices fused
 * into the group, the map loaded and never expanded in memory; the same map
 * with the where() branches swapped drops where it is true; a map repeated
 * only along the keys is GENERAL (rows do not come in tiles). */
static void test_repeated_keep_map_is_block_sparse(void **state) {
    for (int variant = 0; variant < 3; variant++) {
        fixture *f = *state;
        kf_graph *g = f->g;
        kf_tensor *q = in2(g, "q", 30, 16), *k = in2(g, "k", 40, 16), *v = in2(g, "v", 40, 16);
        kf_tensor *keep = kf_input(g, "keep", KF_DTYPE_BOOL, 2, DIMS(variant == 2 ? 30 : 4, 2));
        kf_tensor *m = variant == 2 ? keep : kf_repeat(g, keep, 0, 8);
        m = kf_slice(g, kf_repeat(g, m, 1, 20), 0, 0, 30, 1);
        kf_tensor *s = kf_matmul(g, q, k, 0, 1), *ninf = kf_scalar(g, KF_DTYPE_F32, -INFINITY);
        s = variant == 1 ? kf_where(g, m, ninf, s) : kf_where(g, m, s, ninf);
        kf_tensor *o = kf_matmul(g, kf_softmax(g, s, -1), v, 0, 0);
        kf_output(g, "o", o);
        const kf_plan *p = plan(f);
        const kf_group *grp = group_of(p, o);
        if (variant == 2) {
            assert_int_equal(grp->attn.mask, KF_MASK_GENERAL);
        } else {
            assert_int_equal(grp->attn.mask, KF_MASK_BLOCK_SPARSE);
            assert_int_equal(grp->attn.keep_bq, 8);
            assert_int_equal(grp->attn.keep_bk, 20);
            assert_int_equal(grp->attn.keep_when_true, variant == 0);
            assert_int_equal(p->n_groups, 1);
            assert_int_equal(grp->n_reads, 4); /* q, k, v and the map itself */
        }
        kf_plan_destroy(f->plan);
        f->plan = NULL;
        kf_graph_destroy(f->g);
        assert_int_equal(kf_graph_create(f->ctx, &f->g), KF_OK);
    }
}

/* Masks built from iota comparisons are proved by d = q - kv alone
 * (fusion/mask.c), so grids far above the 2^26 cells the classifier would
 * evaluate get their class: causal and a sliding window on 16384 x 16384;
 * masks that are no function of q - kv stay GENERAL (a bound on q alone), and
 * a causal mask offset for queries at the end of a longer key sequence is
 * GENERAL by the class's definition (kv <= q). */
static void test_iota_masks_are_classified_without_the_grid(void **state) {
    fixture *f = *state;
    static const struct {
        int64_t sq, skv;
        int kind; /* 0 causal, 1 window 1000, 2 q < 100, 3 kv <= q + (skv - sq) */
        kf_mask_kind want;
        int64_t window;
    } cases[] = {
        {16384, 16384, 0, KF_MASK_CAUSAL, 0},  {16384, 16384, 1, KF_MASK_SLIDING_WINDOW, 1000},
        {16384, 16384, 2, KF_MASK_GENERAL, 0}, {300, 700, 0, KF_MASK_CAUSAL, 0},
        {300, 700, 1, KF_MASK_CAUSAL, 0}, /* a window wider than every row: causal */
        {300, 700, 3, KF_MASK_GENERAL, 0},     {700, 300, 0, KF_MASK_CAUSAL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kf_graph *g = NULL;
        assert_int_equal(kf_graph_create(f->ctx, &g), KF_OK);
        int64_t sq = cases[i].sq, skv = cases[i].skv;
        kf_tensor *q = kf_input(g, "q", KF_DTYPE_BF16, 3, DIMS(2, sq, 64));
        kf_tensor *k = kf_input(g, "k", KF_DTYPE_BF16, 3, DIMS(2, skv, 64));
        kf_tensor *v = kf_input(g, "v", KF_DTYPE_BF16, 3, DIMS(2, skv, 64));
        kf_tensor *s = kf_matmul(g, q, k, 0, 1);
        kf_tensor *row = kf_iota(g, KF_DTYPE_I32, 2, DIMS(sq, skv), 0);
        kf_tensor *col = kf_iota(g, KF_DTYPE_I32, 2, DIMS(sq, skv), 1);
        kf_tensor *keep = NULL;
        if (cases[i].kind == 0) {
            keep = kf_le(g, col, row);
        } else if (cases[i].kind == 1) {
            kf_tensor *d = kf_sub(g, row, col);
            keep = kf_ge(g, kf_min(g, d, kf_sub(g, kf_scalar(g, KF_DTYPE_I32, 999), d)),
                         kf_scalar(g, KF_DTYPE_I32, 0));
        } else if (cases[i].kind == 2) {
            keep = kf_lt(g, row, kf_scalar(g, KF_DTYPE_I32, 100));
        } else {
            keep = kf_le(g, col, kf_add(g, row, kf_scalar(g, KF_DTYPE_I32, (double)(skv - sq))));
        }
        s = kf_where(g, keep, s, kf_scalar(g, KF_DTYPE_BF16, -INFINITY));
        kf_tensor *o = kf_matmul(g, kf_softmax(g, s, -1), v, 0, 0);
        assert_int_equal(kf_output(g, "o", o), KF_OK);
        kf_plan *p = NULL;
        assert_int_equal(kf_plan_create(g, NULL, &p), KF_OK);
        const kf_group *att = group_of(p, o);
        assert_int_equal(att->kind, KF_GROUP_ATTENTION);
        if (att->attn.mask != cases[i].want || att->attn.window != cases[i].window)
            fail_msg("case %zu (%lld x %lld, kind %d): mask %s window %lld, expected %s %lld", i,
                     (long long)sq, (long long)skv, cases[i].kind,
                     kf_mask_kind_name(att->attn.mask), (long long)att->attn.window,
                     kf_mask_kind_name(cases[i].want), (long long)cases[i].window);
        kf_plan_destroy(p);
        kf_graph_destroy(g);
    }
}

/* ------------------------------------------------------------------------ */
/* i. Backward patterns                                                       */
/* ------------------------------------------------------------------------ */

/* gelu'(x) in the sigmoid form of gelu, x * sigmoid(1.702 x) (there is no erf
 * op to write the exact derivative with): with s = sigmoid(1.702 x),
 * gelu'(x) ~= s + 1.702 x s (1 - s). */
static kf_tensor *dgelu(kf_graph *g, kf_tensor *x) {
    kf_tensor *c = kf_scalar(g, KF_DTYPE_F32, 1.702);
    kf_tensor *s = kf_sigmoid(g, kf_mul(g, c, x));
    kf_tensor *one_minus = kf_sub(g, kf_scalar(g, KF_DTYPE_F32, 1.0), s);
    return kf_add(g, s, kf_mul(g, kf_mul(g, kf_mul(g, c, x), s), one_minus));
}

static void test_dgelu_epilogue_fuses_into_the_backward_gemm(void **state) {
    fixture *f = *state;
    kf_tensor *dy = in2(f->g, "dy", 8, 16), *w2 = in2(f->g, "w2", 32, 16);
    kf_tensor *h = in2(f->g, "h", 8, 32); /* the saved pre-activation */
    kf_tensor *dact = kf_matmul(f->g, dy, w2, 0, 1);
    kf_tensor *dh = kf_mul(f->g, dact, dgelu(f->g, h));
    kf_output(f->g, "dh", dh);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 1);
    const kf_group *g = group_of(p, dh);
    assert_int_equal(g->kind, KF_GROUP_GEMM);
    assert_true(expr_uses(g, root_of(g, dh), KF_EXPR_OP, KF_OP_SIGMOID));
    assert_true(reads(g, h));
}

static void test_bias_gradient_is_a_column_reduction_with_prologue(void **state) {
    fixture *f = *state;
    kf_tensor *dy = in2(f->g, "dy", 16, 8), *x = in2(f->g, "x", 16, 4);
    kf_tensor *scale = in1(f->g, "scale", 8);
    kf_tensor *g_out = kf_mul(f->g, dy, scale);
    kf_tensor *db = kf_reduce_sum(f->g, g_out, 0, 0); /* over rows: axis 0 */
    kf_tensor *dw = kf_matmul(f->g, x, dy, 1, 0);
    kf_output(f->g, "db", db);
    kf_output(f->g, "dw", dw);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 2);
    const kf_group *g = group_of(p, db);
    assert_int_equal(g->kind, KF_GROUP_COLREDUCE);
    assert_int_equal(g->row.axis, 0);
    assert_int_equal(g->row.length, 16);
    assert_same_group(p, g_out, db);
    assert_string_equal(g->name, "col_mul_reduce_sum_f32_8");
}

/* ------------------------------------------------------------------------ */
/* Negative cases: each with its reason                                       */
/* ------------------------------------------------------------------------ */

static void test_value_with_two_consumers_is_materialized_once(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 4, 8);
    kf_tensor *a = kf_exp(f->g, x);
    kf_tensor *b = kf_add(f->g, a, kf_scalar(f->g, KF_DTYPE_F32, 1.0));
    kf_tensor *c = kf_mul(f->g, a, kf_scalar(f->g, KF_DTYPE_F32, 2.0));
    kf_output(f->g, "b", b);
    kf_output(f->g, "c", c);
    const kf_plan *p = plan(f);
    /* a is written once; b and c, siblings reading it, share one kernel. */
    assert_int_equal(kf_plan_kernel_count(p), 2);
    assert_edge_reason(p, a, b, KF_REASON_MULTIPLE_CONSUMERS);
    assert_edge_reason(p, a, c, KF_REASON_MULTIPLE_CONSUMERS);
    assert_int_equal(group_of(p, a)->n_writes, 1);
    assert_same_group(p, b, c);
}

/* ------------------------------------------------------------------------ */
/* Sibling elementwise groups (fuse_siblings)                                 */
/* ------------------------------------------------------------------------ */

static char *report_string(const kf_plan *p, kf_report_format fmt);

/* A tensor as the report names it: its name, else %id. */
static const char *report_name(const kf_tensor *t, char *buf, size_t size) {
    if (kf_tensor_name(t))
        return kf_tensor_name(t);
    snprintf(buf, size, "%%%u", t->id);
    return buf;
}

static bool group_reads(const kf_group *g, const kf_tensor *t) {
    for (uint32_t i = 0; i < g->n_reads; i++)
        if (g->reads[i] == t->id)
            return true;
    return false;
}

static void test_siblings_of_one_input_fuse_into_one_kernel_that_reads_it_once(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 4, 8), *b = in1(f->g, "b", 8);
    kf_tensor *a = kf_mul(f->g, x, kf_scalar(f->g, KF_DTYPE_F32, 2.0));
    kf_tensor *y = kf_add(f->g, x, kf_scalar(f->g, KF_DTYPE_F32, 1.0));
    kf_tensor *z = kf_tanh(f->g, kf_add(f->g, x, b));
    kf_output(f->g, "a", a);
    kf_output(f->g, "y", y);
    kf_output(f->g, "z", z);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 1);
    const kf_group *g = group_of(p, a);
    assert_int_equal(g->kind, KF_GROUP_ELEMENTWISE);
    assert_same_group(p, a, y);
    assert_same_group(p, a, z);
    assert_int_equal(g->n_writes, 3);
    assert_int_equal(g->n_reads, 2); /* x once, b */
    assert_true(group_reads(g, x) && group_reads(g, b));
    assert_int_equal(g->siblings, 3);
    assert_int_equal(g->sibling_of, x->id);
    assert_int_equal(g->sibling_parts, 0);
    char *txt = report_string(p, KF_REPORT_TEXT);
    char want[128], na[24], ny[24], nz[24];
    snprintf(want, sizeof want, "writes: %s f32[4, 8], %s f32[4, 8], %s f32[4, 8]\n",
             report_name(a, na, sizeof na), report_name(y, ny, sizeof ny),
             report_name(z, nz, sizeof nz));
    assert_non_null(strstr(txt, want));
    assert_non_null(strstr(txt, "siblings: 3 elementwise groups reading x, one kernel writing 3"));
    assert_null(strstr(txt, "split at"));
    free(txt);
    char *js = report_string(p, KF_REPORT_JSON);
    assert_non_null(strstr(js, "\"siblings\": {\"of\": \"x\", \"groups\": 3, \"part\": 1, "
                               "\"parts\": 1, \"bound\": null}"));
    free(js);
}

static void test_siblings_are_split_at_the_output_bound_and_the_report_says_so(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 4, 8);
    kf_tensor *y[40];
    char name[16];
    for (int i = 0; i < 40; i++) { /* not identical: CSE keeps them apart */
        y[i] = kf_mul(f->g, x, kf_scalar(f->g, KF_DTYPE_F32, 1.0 + i));
        snprintf(name, sizeof name, "y%d", i);
        kf_output(f->g, name, y[i]);
    }
    const kf_plan *p = plan(f);
    /* 40 outputs at most 16 a kernel: 16 + 16 + 8. */
    assert_int_equal(kf_plan_kernel_count(p), 3);
    uint32_t total = 0;
    for (uint32_t gi = 0; gi < p->n_groups; gi++) {
        const kf_group *g = &p->groups[gi];
        assert_true(g->n_writes <= KF_SIBLING_MAX_OUTPUTS);
        assert_int_equal(g->sibling_parts, 3);
        assert_string_equal(g->sibling_bound, "outputs");
        total += g->n_writes;
    }
    assert_int_equal(total, 40);
    char *txt = report_string(p, KF_REPORT_TEXT);
    assert_non_null(strstr(txt, "part 1 of 3: the siblings were split at 16 outputs per kernel"));
    assert_non_null(strstr(txt, "part 3 of 3"));
    free(txt);
    char *js = report_string(p, KF_REPORT_JSON);
    assert_non_null(strstr(js, "\"parts\": 3, \"bound\": \"16 outputs\"}"));
    free(js);

    /* A tighter bound from the options. */
    kf_plan_options o;
    kf_plan_options_init(&o);
    o.sibling_max_outputs = 4;
    kf_plan_destroy(f->plan);
    f->plan = NULL;
    p = plan_with(f, &o);
    assert_int_equal(kf_plan_kernel_count(p), 10);
    assert_string_equal(group_of(p, y[39])->sibling_bound, "outputs");
}

static void test_siblings_are_split_at_the_argument_bound(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 4, 8);
    char name[16];
    for (int i = 0; i < 6; i++) { /* each reads x and an input of its own */
        snprintf(name, sizeof name, "w%d", i);
        kf_tensor *w = in2(f->g, name, 4, 8);
        snprintf(name, sizeof name, "y%d", i);
        kf_output(f->g, name, kf_add(f->g, x, w));
    }
    kf_plan_options o;
    kf_plan_options_init(&o);
    o.sibling_max_args = 7; /* x + 2 x (w, y) + (w, y): 3 siblings a kernel */
    const kf_plan *p = plan_with(f, &o);
    assert_int_equal(kf_plan_kernel_count(p), 2);
    for (uint32_t gi = 0; gi < p->n_groups; gi++) {
        const kf_group *g = &p->groups[gi];
        assert_true(g->n_reads + g->n_writes <= 7);
        assert_string_equal(g->sibling_bound, "arguments");
    }
    char *txt = report_string(p, KF_REPORT_TEXT);
    assert_non_null(strstr(txt, "split at 7 arguments per kernel"));
    free(txt);
}

static void test_siblings_of_different_spaces_or_through_a_reduction_stay_apart(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 4, 8);
    kf_tensor *r3 = kf_input(f->g, "r", KF_DTYPE_F32, 3, DIMS(3, 4, 8));
    kf_tensor *e = kf_exp(f->g, x);          /* space [4, 8] */
    kf_tensor *big = kf_add(f->g, x, r3);    /* space [3, 4, 8] */
    kf_tensor *s1 = kf_mul(f->g, x, kf_scalar(f->g, KF_DTYPE_F32, 3.0)); /* [4, 8] */
    kf_tensor *m = kf_reduce_sum(f->g, s1, 1, true);                    /* reads s1 */
    kf_tensor *s2 = kf_sub(f->g, x, m); /* [4, 8], after the reduction of s1 */
    kf_output(f->g, "e", e);
    kf_output(f->g, "big", big);
    kf_output(f->g, "s1", s1);
    kf_output(f->g, "s2", s2);
    const kf_plan *p = plan(f);
    assert_ptr_not_equal(group_of(p, e), group_of(p, big));
    /* s2 needs the reduction of s1: one kernel would depend on itself [I3]. */
    assert_ptr_not_equal(group_of(p, s1), group_of(p, s2));
    assert_true(group_of(p, e) == group_of(p, s1) || group_of(p, e) == group_of(p, s2));
    assert_int_equal(kf_plan_kernel_count(p), 4); /* {e, s1|s2}, big, reduce, s2|s1 */

    /* Switched off, every sibling keeps its own kernel. */
    kf_plan_options o;
    kf_plan_options_init(&o);
    o.disabled = 1u << KF_PASS_SIBLINGS;
    kf_plan_destroy(f->plan);
    f->plan = NULL;
    p = plan_with(f, &o);
    assert_int_equal(kf_plan_kernel_count(p), 5);
    assert_int_equal(group_of(p, e)->siblings, 0);
    assert_string_equal(kf_pass_name(KF_PASS_SIBLINGS), "fuse_siblings");
}

static void test_graph_output_in_the_middle_of_a_chain_stops_the_chain(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 4, 8);
    kf_tensor *a = kf_exp(f->g, x);
    kf_tensor *b = kf_tanh(f->g, a);
    kf_output(f->g, "a", a);
    kf_output(f->g, "b", b);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 2);
    assert_edge_reason(p, a, b, KF_REASON_GRAPH_OUTPUT);
}

static void test_softmax_over_a_non_last_axis_is_not_fused(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 4, 8);
    kf_tensor *a = kf_mul(f->g, x, kf_scalar(f->g, KF_DTYPE_F32, 2.0));
    kf_tensor *s = kf_softmax(f->g, a, 0);
    kf_tensor *y = kf_exp(f->g, s);
    kf_output(f->g, "y", y);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 3);
    assert_int_equal(group_of(p, s)->kind, KF_GROUP_COLREDUCE);
    assert_edge_reason(p, a, s, KF_REASON_AXIS_NOT_INNERMOST);
    assert_edge_reason(p, s, y, KF_REASON_AXIS_NOT_INNERMOST);
}

static void test_norm_over_a_non_last_axis_is_not_fused(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 4, 8), *gw = in1(f->g, "gw", 4), *gb = in1(f->g, "gb", 4);
    kf_tensor *a = kf_relu(f->g, x);
    kf_tensor *n = kf_layer_norm(f->g, a, gw, gb, 0, 1e-5);
    kf_output(f->g, "n", n);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 2);
    assert_edge_reason(p, a, n, KF_REASON_AXIS_NOT_INNERMOST);
}

static void test_operand_that_does_not_broadcast_into_the_gemm_is_not_fused(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 8, 16), *w = in2(f->g, "w", 16, 8);
    kf_tensor *r = kf_input(f->g, "r", KF_DTYPE_F32, 3, DIMS(3, 8, 8));
    kf_tensor *h = kf_matmul(f->g, x, w, 0, 0);
    kf_tensor *y = kf_add(f->g, h, r); /* [3, 8, 8]: larger than the GEMM's [8, 8] */
    kf_output(f->g, "y", y);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 2);
    assert_edge_reason(p, h, y, KF_REASON_NO_BROADCAST_INTO_ANCHOR);
}

static void test_gemm_anchor_does_not_take_f64(void **state) {
    fixture *f = *state;
    kf_tensor *x = kf_input(f->g, "x", KF_DTYPE_F64, 2, DIMS(4, 8));
    kf_tensor *w = kf_input(f->g, "w", KF_DTYPE_F64, 2, DIMS(8, 4));
    kf_tensor *b = kf_input(f->g, "b", KF_DTYPE_F64, 1, DIMS(4));
    kf_tensor *h = kf_matmul(f->g, x, w, 0, 0);
    kf_tensor *hb = kf_add(f->g, h, b);
    kf_output(f->g, "y", kf_relu(f->g, hb));
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 2);
    assert_edge_reason(p, h, hb, KF_REASON_DTYPE_UNSUPPORTED);
}

/* ------------------------------------------------------------------------ */
/* Layout                                                                     */
/* ------------------------------------------------------------------------ */

static void test_permute_of_an_input_is_a_view_read_with_strides(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 4, 8);
    kf_tensor *t = kf_transpose(f->g, x, 0, 1);
    kf_tensor *y = kf_exp(f->g, t);
    kf_output(f->g, "y", y);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 1);
    assert_int_equal(p->n_groups, 2);
    const kf_group *v = group_of(p, t);
    assert_int_equal(v->kind, KF_GROUP_VIEW);
    assert_false(v->is_kernel);
    assert_int_equal(v->view_base, x->id);
    const kf_group *g = group_of(p, y);
    const kf_expr *load = &g->expr[g->expr[root_of(g, y)].src[0]];
    assert_int_equal(load->kind, KF_EXPR_LOAD);
    assert_int_equal(load->base, x->id);
    assert_int_equal(load->strides[0], 1);
    assert_int_equal(load->strides[1], 8);
}

static void test_reshape_of_a_computed_value_materializes_it(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 4, 8);
    kf_tensor *a = kf_exp(f->g, x);
    kf_tensor *r = kf_reshape(f->g, a, 1, DIMS(32));
    kf_tensor *y = kf_neg(f->g, r);
    kf_output(f->g, "y", y);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 2);
    assert_edge_reason(p, a, r, KF_REASON_LAYOUT_CHANGE);
}

static void test_iota_that_must_be_in_memory_gets_its_own_kernel(void **state) {
    fixture *f = *state;
    kf_tensor *i = kf_iota(f->g, KF_DTYPE_F32, 2, DIMS(4, 8), 1);
    kf_tensor *m = kf_matmul(f->g, i, in2(f->g, "w", 8, 4), 0, 0);
    kf_tensor *j = kf_iota(f->g, KF_DTYPE_F32, 1, DIMS(8), 0);
    kf_tensor *n = kf_rms_norm(f->g, in2(f->g, "x", 4, 8), j, -1, 1e-6);
    kf_tensor *inline_iota = kf_iota(f->g, KF_DTYPE_F32, 2, DIMS(4, 8), 0);
    kf_tensor *e = kf_add(f->g, in2(f->g, "y", 4, 8), inline_iota);
    kf_output(f->g, "m", m);
    kf_output(f->g, "n", n);
    kf_output(f->g, "e", e);
    kf_output(f->g, "i", i);
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 5);
    assert_string_equal(group_of(p, i)->name, "ew_iota_f32_4x8");
    assert_true(reads(group_of(p, m), i));
    assert_true(reads(group_of(p, n), j));
    assert_ptr_equal(group_of(p, inline_iota), group_of(p, e));
    assert_true(expr_uses(group_of(p, e), root_of(group_of(p, e), e), KF_EXPR_INDEX, KF_OP_COUNT));
}

/* ------------------------------------------------------------------------ */
/* Pipeline, report, allocation failures, examples                            */
/* ------------------------------------------------------------------------ */

static void test_switching_off_the_gemm_epilogue_pass_keeps_the_epilogue_apart(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 8, 16), *w = in2(f->g, "w", 16, 8), *b = in1(f->g, "b", 8);
    kf_tensor *h = kf_matmul(f->g, x, w, 0, 0);
    kf_tensor *hb = kf_add(f->g, h, b);
    kf_output(f->g, "y", kf_relu(f->g, hb));
    kf_plan_options o;
    kf_plan_options_init(&o);
    o.disabled = 1u << KF_PASS_GEMM_EPILOGUE;
    const kf_plan *p = plan_with(f, &o);
    assert_int_equal(kf_plan_kernel_count(p), 2);
    assert_edge_reason(p, h, hb, KF_REASON_PASS_DISABLED);
    assert_string_equal(kf_plan_find_edge(p, h, hb)->detail, "fuse_gemm_epilogue is off");
    assert_string_equal(kf_pass_name(KF_PASS_GEMM_EPILOGUE), "fuse_gemm_epilogue");
}

static void test_every_reason_and_kind_has_a_name(void **state) {
    (void)state;
    for (int r = 0; r < KF_REASON_COUNT; r++) {
        assert_string_not_equal(kf_reason_code((kf_reason)r), "?");
        assert_true(strlen(kf_reason_text((kf_reason)r)) > 4);
    }
    for (int k = 0; k < KF_GROUP_COUNT; k++)
        assert_string_not_equal(kf_group_kind_name((kf_group_kind)k), "?");
    for (int k = 0; k < KF_MASK_COUNT; k++)
        assert_string_not_equal(kf_mask_kind_name((kf_mask_kind)k), "?");
    assert_string_equal(kf_reason_code(KF_REASON_COUNT), "?");
}

static char *report_string(const kf_plan *p, kf_report_format fmt) {
    FILE *t = tmpfile();
    assert_non_null(t);
    assert_int_equal(kf_plan_report(p, fmt, t), KF_OK);
    long n = ftell(t);
    rewind(t);
    char *buf = calloc(1, (size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, t), (size_t)n);
    fclose(t);
    return buf;
}

static void test_report_lists_groups_types_costs_and_reasons(void **state) {
    fixture *f = *state;
    kf_tensor *h, *y;
    build_residual_norm(f, 512, false, &h, &y);
    kf_plan *p = plan(f);
    assert_int_equal(kf_plan_estimate(p, "h100"), KF_OK);
    char *text = report_string(p, KF_REPORT_TEXT);
    assert_non_null(strstr(text, "2 kernels"));
    assert_non_null(strstr(text, "gemm_bias_residual_f32_4x512"));
    assert_non_null(strstr(text, "x f32[4, 32]"));
    assert_non_null(strstr(text, "ROW_TOO_LONG_FOR_GEMM_EPILOGUE"));
    assert_non_null(strstr(text, "N=512 > 256"));
    assert_non_null(strstr(text, "est."));
    free(text);
    char *json = report_string(p, KF_REPORT_JSON);
    assert_non_null(strstr(json, "\"schema\": \"kfuse.report/2\""));
    assert_non_null(strstr(json, "\"reason\": \"ROW_TOO_LONG_FOR_GEMM_EPILOGUE\""));
    assert_non_null(strstr(json, "\"device\": \"h100\""));
    assert_non_null(strstr(json, "\"kind\": \"rowwise\""));
    assert_non_null(strstr(json, "\"bytes_saved\": "));
    free(json);
    assert_int_equal(kf_plan_report(p, (kf_report_format)7, stdout), KF_ERR_INVALID_ARGUMENT);
}

static void test_report_names_the_split_row_form(void **state) {
    fixture *f = *state;
    kf_tensor *h, *y;
    build_residual_norm(f, 512, true, &h, &y);
    kf_plan_options o = split_on();
    kf_plan *p = plan_with(f, &o);
    char *text = report_string(p, KF_REPORT_TEXT);
    assert_non_null(strstr(text, "1 kernel"));
    assert_non_null(strstr(text, "norm epilogue split from the output tiles"));
    free(text);
    char *json = report_string(p, KF_REPORT_JSON);
    assert_non_null(strstr(json, "\"norm_epilogue\": true, \"norm_epilogue_split\": true"));
    free(json);
}

/* Builds a transformer-block-like graph (norm prologue, attention, residual,
 * MLP) in `g`. */
static void build_block(kf_graph *g) {
    kf_tensor *x = in2(g, "x", 8, 16), *gw = in1(g, "gw", 16), *gb = in1(g, "gb", 16);
    kf_tensor *n = kf_layer_norm(g, x, gw, gb, -1, 1e-5);
    kf_tensor *q = kf_matmul(g, n, in2(g, "wq", 16, 16), 0, 0);
    kf_tensor *k = kf_matmul(g, n, in2(g, "wk", 16, 16), 0, 0);
    kf_tensor *v = kf_matmul(g, n, in2(g, "wv", 16, 16), 0, 0);
    kf_tensor *s = kf_mul(g, kf_matmul(g, q, k, 0, 1), kf_scalar(g, KF_DTYPE_F32, 0.25));
    kf_tensor *keep = kf_ge(g, kf_iota(g, KF_DTYPE_I32, 2, DIMS(8, 8), 0),
                            kf_iota(g, KF_DTYPE_I32, 2, DIMS(8, 8), 1));
    s = kf_where(g, keep, s, kf_scalar(g, KF_DTYPE_F32, -INFINITY));
    kf_tensor *a = kf_matmul(g, kf_softmax(g, s, -1), v, 0, 0);
    kf_tensor *x1 = kf_add(g, x, kf_matmul(g, a, in2(g, "wo", 16, 16), 0, 0));
    kf_tensor *u =
        kf_gelu(g, kf_add(g, kf_matmul(g, x1, in2(g, "w1", 16, 32), 0, 0), in1(g, "b1", 32)));
    kf_tensor *y = kf_add(g, x1, kf_matmul(g, u, in2(g, "w2", 32, 16), 0, 0));
    kf_output(g, "y", y);
}

static void test_planning_survives_every_allocation_failure_without_leaks(void **state) {
    (void)state;
    kf_test_alloc a;
    kf_options o;
    kf_options_init(&o);
    o.allocator = kf_test_allocator(&a);
    bool succeeded = false;
    for (size_t fail_at = 1; !succeeded && fail_at < 5000; fail_at++) {
        kf_test_alloc_reset(&a, 0);
        kf_ctx *ctx = NULL;
        kf_graph *g = NULL;
        assert_int_equal(kf_ctx_create(&o, &ctx), KF_OK);
        assert_int_equal(kf_graph_create(ctx, &g), KF_OK);
        build_block(g);
        assert_int_equal(kf_graph_status(g), KF_OK);
        a.fail_at = a.calls + fail_at; /* fail only inside planning */
        kf_plan *p = NULL;
        kf_status st = kf_plan_create(g, NULL, &p);
        if (st == KF_OK) {
            succeeded = true;
            assert_int_equal(kf_plan_kernel_count(p), 7);
        } else {
            assert_int_equal(st, KF_ERR_OUT_OF_MEMORY);
            assert_null(p);
        }
        kf_plan_destroy(p);
        kf_graph_destroy(g);
        kf_ctx_destroy(ctx);
        assert_int_equal(a.live_blocks, 0);
        assert_int_equal(a.bad_frees, 0);
    }
    assert_true(succeeded);
}

static void test_plan_create_rejects_bad_arguments_and_unverified_graphs(void **state) {
    fixture *f = *state;
    kf_plan *p = (kf_plan *)1;
    assert_int_equal(kf_plan_create(NULL, NULL, &p), KF_ERR_INVALID_ARGUMENT);
    assert_null(p);
    assert_int_equal(kf_plan_create(f->g, NULL, NULL), KF_ERR_INVALID_ARGUMENT);
    in2(f->g, "x", 2, 2); /* no outputs: does not verify */
    assert_int_not_equal(kf_plan_create(f->g, NULL, &p), KF_OK);
    assert_null(p);
    kf_plan_destroy(NULL);
}

static kf_graph *parse_file(kf_ctx *ctx, const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        fail_msg("cannot open %s", path);
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, fp);
    fclose(fp);
    kf_graph *g = NULL;
    kf_status st = kf_graph_parse(ctx, buf, n, &g);
    if (st != KF_OK)
        fail_msg("%s:%s", path, g ? kf_graph_error(g) : "?");
    free(buf);
    return g;
}

static void test_block_example_is_seven_kernels(void **state) {
    fixture *f = *state;
    kf_graph_destroy(f->g);
    f->g = parse_file(f->ctx, "examples/block.kfg");
    const kf_plan *p = plan(f);
    assert_true(kf_plan_kernel_count(p) <= 7);
    assert_int_equal(kf_plan_kernel_count(p), 7);
    int gemms = 0, attention = 0;
    for (uint32_t i = 0; i < p->n_groups; i++) {
        gemms += p->groups[i].kind == KF_GROUP_GEMM;
        attention += p->groups[i].kind == KF_GROUP_ATTENTION;
    }
    assert_int_equal(gemms, 6);
    assert_int_equal(attention, 1);
}

/* Issue 16 item 5: the Llama block plans with no copy kernel. V's slice of the
 * fused QKV output is a view at V's offset that the attention group reads, and
 * the attention group absorbs the permute of its output back to [B, S, H, D],
 * so the reshape merging the heads is a view the output projection reads. */
static void test_llama_block_plans_no_copy_kernels(void **state) {
    fixture *f = *state;
    kf_graph_destroy(f->g);
    f->g = parse_file(f->ctx, "examples/llama_block.kfg");
    const kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 7);
    const kf_group *attn = NULL;
    int slice_views = 0;
    for (uint32_t i = 0; i < p->n_groups; i++) {
        const kf_group *g = &p->groups[i];
        assert_int_not_equal(g->kind, KF_GROUP_LAYOUT);
        /* no kernel is a lone slice (a copy) */
        assert_false(g->kind == KF_GROUP_ELEMENTWISE && g->n_computed == 1 &&
                     p->graph->nodes[g->computed[0]]->op == KF_OP_SLICE);
        if (g->kind == KF_GROUP_ATTENTION)
            attn = g;
        if (g->kind == KF_GROUP_VIEW && p->graph->nodes[g->computed[0]]->op == KF_OP_SLICE) {
            slice_views++;
            /* v = qkv_heads[:, :, 8:, :] of [2, 16, 12, 16]: 8 heads of 16 in */
            assert_int_equal(g->view_offset, 128);
            assert_false(g->view_contiguous);
        }
    }
    assert_int_equal(slice_views, 1);
    assert_non_null(attn);
    const kf_tensor *out = p->graph->nodes[attn->attn.out];
    assert_int_equal(out->op, KF_OP_PERMUTE);
    assert_int_equal(out->src[0]->id, attn->attn.pv);
    /* pv [B=2, H=4, S=16, D=16] stored as [B, S, H, D] */
    assert_int_equal(attn->attn.o_strides[0], 1024);
    assert_int_equal(attn->attn.o_strides[1], 16);
    assert_int_equal(attn->attn.o_strides[2], 64);
    assert_int_equal(attn->attn.o_strides[3], 1);
    assert_int_equal(kf_plan_check(p, 0x1a7u, NULL), KF_OK);
}

/* Every .kfg file in examples/patterns says how many kernels it plans to on a line
 * "# expect: N kernels"; each is planned, checked and counted. */
static void test_pattern_examples_plan_to_their_stated_kernel_counts(void **state) {
    fixture *f = *state;
    DIR *d = opendir("examples/patterns");
    assert_non_null(d);
    struct dirent *ent;
    int files = 0, head_files = 0;
    while ((ent = readdir(d))) {
        size_t len = strlen(ent->d_name);
        if (len < 5 || strcmp(ent->d_name + len - 4, ".kfg") != 0)
            continue;
        char path[512];
        snprintf(path, sizeof path, "examples/patterns/%s", ent->d_name);
        FILE *fp = fopen(path, "rb");
        assert_non_null(fp);
        char line[256];
        int expect = -1, expect_head = -1;
        while (fgets(line, sizeof line, fp)) {
            const char *m = strstr(line, "# expect: ");
            if (m)
                expect = atoi(m + 10);
            m = strstr(line, "# expect head epilogue: ");
            if (m)
                expect_head = atoi(m + 24);
        }
        fclose(fp);
        if (expect < 0)
            fail_msg("%s has no '# expect: N kernels' line", path);
        kf_plan_destroy(f->plan);
        f->plan = NULL;
        kf_graph_destroy(f->g);
        f->g = parse_file(f->ctx, path);
        const kf_plan *p = plan(f);
        if ((int)kf_plan_kernel_count(p) != expect) {
            kf_plan_dump(p, stderr);
            fail_msg("%s: %u kernels, expected %d", path, kf_plan_kernel_count(p), expect);
        }
        if (expect_head >= 0) { /* the same graph with the head-split epilogue asked for */
            kf_plan_options o;
            kf_plan_options_init(&o);
            o.gemm_head_epilogue = true;
            const kf_plan *ph = plan_with(f, &o);
            if ((int)kf_plan_kernel_count(ph) != expect_head) {
                kf_plan_dump(ph, stderr);
                fail_msg("%s with the head-split epilogue: %u kernels, expected %d", path,
                         kf_plan_kernel_count(ph), expect_head);
            }
            head_files++;
        }
        files++;
    }
    closedir(d);
    assert_true(files >= 9);
    assert_true(head_files >= 2);
}

/* ------------------------------------------------------------------------ */
/* The head-split GEMM epilogue (fuse_head_epilogue.c)                        */
/* ------------------------------------------------------------------------ */

/* q = x . w viewed as heads [2, 12, 2, 16] (permuted to [2, 2, 12, 16] when
 * `permute`), then `body` (reading q, writing y), planned and checked. */
static const kf_plan *plan_head_case(fixture *f, bool permute, const char *body, bool on) {
    char text[2048];
    snprintf(text, sizeof text,
             "kfg 1\n"
             "x = input(f32[2, 12, 24])\n"
             "w = input(f32[24, 32])\n"
             "cs = input(f32[%s])\n"
             "p = matmul(x, w)\n"
             "%s"
             "%s"
             "output y\n",
             permute ? "12, 16" : "12, 1, 16",
             permute ? "qh = reshape(p, [2, 12, 2, 16])\nq = permute(qh, [0, 2, 1, 3])\n"
                     : "q = reshape(p, [2, 12, 2, 16])\n",
             body);
    kf_plan_destroy(f->plan);
    f->plan = NULL;
    kf_graph_destroy(f->g);
    f->g = NULL;
    kf_status st = kf_graph_parse(f->ctx, text, strlen(text), &f->g);
    if (st != KF_OK)
        fail_msg("parse: %s", f->g ? kf_graph_error(f->g) : "?");
    kf_plan_options o;
    kf_plan_options_init(&o);
    o.gemm_head_epilogue = on;
    return plan_with(f, &o);
}

static const kf_tensor *node_named(const kf_plan *p, const char *name) {
    for (uint32_t i = 0; i < p->graph->n_nodes; i++) {
        const char *n = kf_tensor_name(p->graph->nodes[i]);
        if (n && strcmp(n, name) == 0)
            return p->graph->nodes[i];
    }
    fail_msg("no tensor named %s", name);
    return NULL;
}

static const char rotate_half_body[] = "q1 = slice(q, axis=-1, stop=8)\n"
                                       "q2 = slice(q, axis=-1, start=8)\n"
                                       "nq2 = neg(q2)\n"
                                       "r = concat(nq2, q1, axis=-1)\n"
                                       "qc = mul(q, cs)\n"
                                       "rs = mul(r, cs)\n"
                                       "y = add(qc, rs)\n";

static void test_head_epilogue_absorbs_a_rotary_embedding_over_the_head_view(void **state) {
    fixture *f = *state;
    for (int perm = 0; perm < 2; perm++) {
        const kf_plan *p = plan_head_case(f, perm, rotate_half_body, true);
        assert_int_equal(kf_plan_kernel_count(p), 1);
        const kf_group *g = group_of(p, node_named(p, "y"));
        assert_int_equal(g->kind, KF_GROUP_GEMM);
        assert_ptr_equal(group_of(p, node_named(p, "p")), g);
        assert_int_equal(g->gemm.head_dim, 16);
        assert_int_equal(g->gemm.heads_first, perm == 1);
        assert_int_equal(g->rank, 4);
        assert_int_equal(g->n_writes, 1); /* only the rotated value: the product is not */
        assert_int_equal(g->writes[0], node_named(p, "y")->id);
        /* the rotate-half partner: an ACC at an in-head column node */
        bool partner = false;
        for (uint32_t k = 0; k < g->n_expr; k++)
            partner = partner || (g->expr[k].kind == KF_EXPR_ACC && g->expr[k].src[0] != KF_NONE);
        assert_true(partner);
        /* off (the default): the product is written, the rotation is its own kernel */
        p = plan_head_case(f, perm, rotate_half_body, false);
        assert_int_equal(kf_plan_kernel_count(p), 2);
        assert_int_equal(group_of(p, node_named(p, "p"))->gemm.head_dim, 0);
    }
}

static void test_head_epilogue_partial_rotary_stays_in_head_and_fuses(void **state) {
    fixture *f = *state;
    /* rotate the first 8 of 16 columns, pass the other 8 through */
    const kf_plan *p = plan_head_case(f, true,
                                      "a = slice(q, axis=-1, stop=4)\n"
                                      "b = slice(q, axis=-1, start=4, stop=8)\n"
                                      "t = slice(q, axis=-1, start=8)\n"
                                      "nb = neg(b)\n"
                                      "r = concat(nb, a, axis=-1)\n"
                                      "rr = concat(r, t, axis=-1)\n"
                                      "qc = mul(q, cs)\n"
                                      "rc = mul(rr, cs)\n"
                                      "y = add(qc, rc)\n",
                                      true);
    assert_int_equal(kf_plan_kernel_count(p), 1);
    assert_int_equal(group_of(p, node_named(p, "y"))->gemm.head_dim, 16);
}

static void test_head_epilogue_refuses_a_product_needed_unrotated(void **state) {
    fixture *f = *state;
    char body[600];
    snprintf(body, sizeof body, "%sz = add(p, p)\noutput z\n", rotate_half_body);
    const kf_plan *p = plan_head_case(f, true, body, true);
    const kf_tensor *pp = node_named(p, "p"), *qh = node_named(p, "qh");
    assert_int_equal(group_of(p, pp)->gemm.head_dim, 0);
    assert_edge_reason(p, pp, qh, KF_REASON_MULTIPLE_CONSUMERS);
    assert_non_null(strstr(kf_plan_find_edge(p, pp, qh)->detail, "unrotated"));
}

static void test_head_epilogue_refuses_reads_across_heads_with_a_reason(void **state) {
    fixture *f = *state;
    /* a slice over the heads axis; interleaved pairs (GPT-J: even and odd
     * columns rotated, stacked and flattened back: a reshape of the halves) */
    static const char *const bodies[] = {
        "h0 = slice(q, axis=1, stop=1)\n"
        "qc = mul(q, cs)\n"
        "y = add(qc, h0)\n",
        "e = slice(q, axis=-1, step=2)\n"
        "o = slice(q, axis=-1, start=1, step=2)\n"
        "no = neg(o)\n"
        "e5 = reshape(e, [2, 2, 12, 8, 1])\n"
        "o5 = reshape(no, [2, 2, 12, 8, 1])\n"
        "st = concat(o5, e5, axis=-1)\n"
        "r = reshape(st, [2, 2, 12, 16])\n"
        "qc = mul(q, cs)\n"
        "rc = mul(r, cs)\n"
        "y = add(qc, rc)\n",
    };
    for (size_t i = 0; i < sizeof bodies / sizeof *bodies; i++) {
        const kf_plan *p = plan_head_case(f, true, bodies[i], true);
        const kf_tensor *pp = node_named(p, "p"), *qh = node_named(p, "qh");
        assert_int_equal(group_of(p, pp)->gemm.head_dim, 0);
        assert_edge_reason(p, pp, qh, KF_REASON_NOT_HEAD_LOCAL);
    }
}


static void test_report_command_exits_2_on_a_parse_error_and_bad_usage(void **state) {
    (void)state;
    char path[] = "/tmp/kf_test_fusion_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *fp = fdopen(fd, "w");
    fputs("kfg 1\nx = input(f32[4])\ny = exp(x, x)\noutput y\n", fp);
    fclose(fp);
    char *bad[] = {"report", path, NULL};
    assert_int_equal(kf_cmd_report(2, bad), 2);
    remove(path);
    char *missing[] = {"report", "/nonexistent/graph.kfg", NULL};
    assert_int_equal(kf_cmd_report(2, missing), 2);
    char *device[] = {"report", "examples/mlp.kfg", "--device", "tpu", NULL};
    assert_int_equal(kf_cmd_report(4, device), 2);
    char *option[] = {"report", "--fast", "examples/mlp.kfg", NULL};
    assert_int_equal(kf_cmd_report(3, option), 2);
    char *none[] = {"report", NULL};
    assert_int_equal(kf_cmd_report(1, none), 2);
    assert_non_null(strstr(kf_cmd_report_help, "--device"));
}

static void test_kf_debug_dumps_the_plan_after_each_pass_to_stderr(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 4, 8), *w = in2(f->g, "w", 8, 4);
    kf_output(f->g, "y", kf_relu(f->g, kf_matmul(f->g, x, w, 0, 0)));
    char path[] = "/tmp/kf_test_debug_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    kf_plan_options opt;
    kf_plan_options_init(&opt);
    opt.debug = true; /* KF_FLAG_DEBUG_PASSES, through kf_compile */
    kf_plan *p = NULL;
    kf_status st = kf_plan_create(f->g, &opt, &p);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    assert_int_equal(st, KF_OK);
    kf_plan_destroy(p);
    char buf[4096] = "";
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    remove(path);
    assert_true(n > 0);
    for (int i = 0; i < KF_PASS_COUNT; i++) {
        char want[64];
        snprintf(want, sizeof want, "after %s", kf_pass_name((kf_pass_id)i));
        assert_non_null(strstr(buf, want));
    }
    assert_non_null(strstr(buf, "gemm_relu_f32_4x4"));
    /* Without the option nothing is printed, KF_DEBUG or not: the library
     * reads no environment variable (the CLI maps KF_DEBUG onto the option). */
    char path2[] = "/tmp/kf_test_debug_XXXXXX";
    fd = mkstemp(path2);
    assert_true(fd >= 0);
    saved = dup(2);
    dup2(fd, 2);
    setenv("KF_DEBUG", "1", 1);
    st = kf_plan_create(f->g, NULL, &p);
    unsetenv("KF_DEBUG");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    assert_int_equal(st, KF_OK);
    kf_plan_destroy(p);
    assert_int_equal(lseek(fd, 0, SEEK_END), 0);
    close(fd);
    remove(path2);
}

/* ------------------------------------------------------------------------ */
/* Common subexpressions (issue 15, item 12)                                  */
/* ------------------------------------------------------------------------ */

/* 5,000 outputs that are all relu(x) -- built 5,000 times -- plan to one
 * kernel, not 5,000; every output still reads the right value. */
static void test_the_same_op_on_the_same_operands_is_planned_once(void **state) {
    fixture *f = *state;
    kf_tensor *x = in2(f->g, "x", 4, 8);
    char name[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "y%d", i);
        assert_int_equal(kf_output(f->g, name, kf_relu(f->g, x)), KF_OK);
    }
    kf_plan *p = plan(f);
    assert_int_equal(kf_plan_kernel_count(p), 1);
    for (int i = 0; i < 5000; i += 999)
        assert_ptr_equal(kf_graph_output(f->g, (size_t)i), kf_graph_output(f->g, 0));
}

/* Equal constants, row ops and outputs fold; different constants, inputs and
 * attributes do not. An elementwise value that is no output is not folded
 * (each consumer's kernel recomputes it for free) but its consumers still
 * are: softmax(exp(x)) built twice is one softmax. */
static void test_cse_folds_what_saves_work_but_not_inputs_or_other_attributes(void **state) {
    fixture *f = *state;
    kf_graph *g = f->g;
    kf_tensor *x = in2(g, "x", 4, 8), *x2 = in2(g, "x2", 4, 8);
    float one = 1.0f, two = 2.0f;
    kf_tensor *c1 = kf_constant(g, KF_DTYPE_F32, 0, NULL, &one);
    kf_tensor *c1b = kf_constant(g, KF_DTYPE_F32, 0, NULL, &one);
    kf_tensor *c2 = kf_constant(g, KF_DTYPE_F32, 0, NULL, &two);
    kf_tensor *a = kf_mul(g, kf_exp(g, x), c1), *b = kf_mul(g, kf_exp(g, x), c1b);
    kf_tensor *c = kf_mul(g, kf_exp(g, x), c2), *d = kf_exp(g, x2);
    kf_tensor *s0 = kf_reduce_sum(g, x, 1, 0), *s1 = kf_reduce_sum(g, x, 1, 1);
    kf_tensor *m0 = kf_softmax(g, kf_exp(g, x2), -1), *m1 = kf_softmax(g, kf_exp(g, x2), -1);
    kf_output(g, "a", a);
    kf_output(g, "b", b);
    kf_output(g, "c", c);
    kf_output(g, "d", d);
    kf_output(g, "s0", s0);
    kf_output(g, "s1", s1);
    kf_output(g, "m0", m0);
    kf_output(g, "m1", m1);
    assert_int_equal(kf_graph_status(g), KF_OK);
    uint32_t folded = 0;
    assert_int_equal(kf_ir_cse(g, &folded), KF_OK);
    /* c1b, b (an output), exp(x2) under m0 and m1 (equal to the output d), m1 */
    assert_int_equal(folded, 5);
    assert_ptr_equal(kf_graph_output(g, 1), a);     /* b is a */
    assert_ptr_not_equal(kf_graph_output(g, 2), a); /* another constant */
    assert_ptr_equal(kf_graph_output(g, 3), d);     /* another input */
    assert_ptr_equal(kf_graph_output(g, 5), s1);    /* keepdim differs */
    assert_ptr_equal(kf_graph_output(g, 7), m0);    /* one softmax */
    assert_ptr_equal(m0->src[0], d);                /* of the output d */
    assert_ptr_not_equal(c->src[0], a->src[0]);     /* exp(x) stays inline in each */
    plan(f);                                        /* and the plan still checks */
}

/* clamp's bounds are attributes too: clamps of one input with other bounds
 * stay apart, with the same bounds they fold (the merge of CSE and clamp
 * first compared no bounds, and folded every clamp of x into the first). */
static void test_cse_keeps_clamps_with_other_bounds_apart(void **state) {
    fixture *f = *state;
    kf_graph *g = f->g;
    kf_tensor *x = in2(g, "x", 4, 8);
    kf_tensor *a = kf_clamp(g, x, -1.0, 1.0), *b = kf_clamp(g, x, -2.0, 1.0);
    kf_tensor *c = kf_clamp(g, x, -1.0, 2.0), *d = kf_clamp(g, x, -1.0, 1.0);
    kf_output(g, "a", a);
    kf_output(g, "b", b);
    kf_output(g, "c", c);
    kf_output(g, "d", d);
    assert_int_equal(kf_graph_status(g), KF_OK);
    uint32_t folded = 0;
    assert_int_equal(kf_ir_cse(g, &folded), KF_OK);
    assert_int_equal(folded, 1);                    /* d is a */
    assert_ptr_equal(kf_graph_output(g, 3), a);
    assert_ptr_not_equal(kf_graph_output(g, 1), a); /* another lo */
    assert_ptr_not_equal(kf_graph_output(g, 2), a); /* another hi */
    plan(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, planned_setup, planned_teardown)
        T(test_the_same_op_on_the_same_operands_is_planned_once),
        T(test_cse_folds_what_saves_work_but_not_inputs_or_other_attributes),
        T(test_cse_keeps_clamps_with_other_bounds_apart),
        T(test_gemm_absorbs_bias_and_each_activation),
        T(test_gemm_absorbs_bias_residual_and_scale),
        T(test_gemm_fuses_layer_norm_when_row_fits_one_tile),
        T(test_gemm_fuses_rms_norm_when_row_fits_one_tile),
        T(test_norm_on_long_gemm_row_fuses_in_the_split_row_form),
        T(test_norm_on_long_gemm_row_is_a_rowwise_kernel_reading_the_output_once),
        T(test_norm_past_the_split_limit_is_a_rowwise_kernel_reading_the_output_once),
        T(test_softmax_on_long_gemm_row_is_never_split),
        T(test_long_norm_feeding_only_gemms_stays_their_prologue_not_split),
        T(test_row_epilogue_limit_is_an_option),
        T(test_split_row_limit_is_an_option),
        T(test_norm_feeding_only_a_gemm_becomes_its_prologue),
        T(test_gemm_siblings_of_one_normalized_input_form_one_set_the_report_names),
        T(test_gemm_siblings_with_another_gamma_eps_or_norm_keep_apart_and_say_why),
        T(test_gemm_siblings_without_a_prologue_or_reading_each_other_keep_apart),
        T(test_gemm_siblings_stay_adjacent_when_a_member_waits_for_another_group),
        T(test_plan_checker_rejects_a_broken_gemm_sibling_set),
        T(test_llama_layer_qkv_projections_are_one_gemm_sibling_set),
        T(test_norm_feeding_three_projections_is_recomputed_in_each),
        T(test_norm_with_row_longer_than_prologue_limit_is_its_own_kernel),
        T(test_norm_feeding_gemm_operand_b_is_not_a_prologue),
        T(test_swiglu_is_one_group_over_both_gemms),
        T(test_elementwise_chain_fuses_across_broadcasts_and_casts),
        T(test_value_used_twice_inside_one_group_is_one_shared_node),
        T(test_rowwise_ops_take_elementwise_prologue_and_epilogue),
        T(test_attention_takes_the_log_sum_exp_of_its_scores_as_a_second_output),
        T(test_attention_without_mask_is_one_kernel_with_no_mask),
        T(test_causal_attention_from_primitives_is_one_kernel_with_causal_mask),
        T(test_softcap_attention_keeps_tanh_in_score_expression),
        T(test_log_softmax_between_matmuls_is_not_attention),
        T(test_expand_fuses_as_a_stride_0_load),
        T(test_rotary_embedding_is_one_kernel_reading_x_through_the_remap),
        T(test_qkv_slices_are_offset_loads_in_their_consumers),
        T(test_remaps_that_cannot_fuse_say_why),
        T(test_alibi_attention_reads_slope_per_head),
        T(test_sliding_window_attention_is_classified_with_its_window),
        T(test_mask_on_a_loaded_tensor_is_general),
        T(test_repeated_keep_map_is_block_sparse),
        T(test_iota_masks_are_classified_without_the_grid),
        T(test_dgelu_epilogue_fuses_into_the_backward_gemm),
        T(test_bias_gradient_is_a_column_reduction_with_prologue),
        T(test_value_with_two_consumers_is_materialized_once),
        T(test_siblings_of_one_input_fuse_into_one_kernel_that_reads_it_once),
        T(test_siblings_are_split_at_the_output_bound_and_the_report_says_so),
        T(test_siblings_are_split_at_the_argument_bound),
        T(test_siblings_of_different_spaces_or_through_a_reduction_stay_apart),
        T(test_graph_output_in_the_middle_of_a_chain_stops_the_chain),
        T(test_softmax_over_a_non_last_axis_is_not_fused),
        T(test_norm_over_a_non_last_axis_is_not_fused),
        T(test_operand_that_does_not_broadcast_into_the_gemm_is_not_fused),
        T(test_gemm_anchor_does_not_take_f64),
        T(test_permute_of_an_input_is_a_view_read_with_strides),
        T(test_reshape_of_a_computed_value_materializes_it),
        T(test_iota_that_must_be_in_memory_gets_its_own_kernel),
        T(test_switching_off_the_gemm_epilogue_pass_keeps_the_epilogue_apart),
        T(test_every_reason_and_kind_has_a_name),
        T(test_report_lists_groups_types_costs_and_reasons),
        T(test_report_names_the_split_row_form),
        T(test_planning_survives_every_allocation_failure_without_leaks),
        T(test_plan_create_rejects_bad_arguments_and_unverified_graphs),
        T(test_llama_block_plans_no_copy_kernels),
        T(test_block_example_is_seven_kernels),
        T(test_pattern_examples_plan_to_their_stated_kernel_counts),
        T(test_head_epilogue_absorbs_a_rotary_embedding_over_the_head_view),
        T(test_head_epilogue_partial_rotary_stays_in_head_and_fuses),
        T(test_head_epilogue_refuses_a_product_needed_unrotated),
        T(test_head_epilogue_refuses_reads_across_heads_with_a_reason),
        T(test_report_command_exits_2_on_a_parse_error_and_bad_usage),
        T(test_kf_debug_dumps_the_plan_after_each_pass_to_stderr),
#undef T
    };
    return kf_test_run(tests);
}
