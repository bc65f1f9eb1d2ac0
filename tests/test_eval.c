/*
 * test_eval.c -- the reference evaluator against hand-computed values.
 *
 * The evaluator is the oracle every backend is tested against, so nothing
 * here recomputes an expected value with the evaluator's own formula: every
 * expected number is written out (integers by hand, transcendental values to
 * 17 digits from a 40-digit mpmath computation). Graphs are built through the
 * public builder API and evaluated through kf_graph_eval, except where a test
 * is about the internal kf_ir_eval / kf_ir_eval_node contract.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kf_planned.h"
#include "kf_test.h"

#include "ir/ir.h"

#define DIMS(...) ((const int64_t[]){__VA_ARGS__})
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------------ */
/* Fixture and helpers                                                        */
/* ------------------------------------------------------------------------ */

/* A context and the graph the test builds (kf_planned.h's fixture; no plan). */
typedef planned fixture;

#define G (((fixture *)*state)->g)

/* Evaluates, failing the test with the graph's message on any error. */
static void eval_ok(kf_graph *g, const kf_binding *in, size_t n_in, const kf_binding *out,
                    size_t n_out) {
    kf_status s = kf_graph_eval(g, in, n_in, out, n_out);
    if (s != KF_OK) {
        print_error("kf_graph_eval: %s: %s\n", kf_status_str(s), kf_graph_error(g));
        fail();
    }
}

/* One output named `name` from a graph with inputs `in`. */
static void eval1(kf_graph *g, const kf_binding *in, size_t n_in, const char *name, void *out,
                  size_t bytes) {
    kf_binding o = {name, out, bytes};
    eval_ok(g, in, n_in, &o, 1);
}

/* Each element within `rel` of the expected value (relative, or absolute
 * below 1); NaN expects NaN, infinities and zeros expect themselves. */
static void expect_near(const double *got, const double *want, size_t n, double rel) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        bool ok;
        if (isnan(w))
            ok = isnan(g);
        else if (isinf(w))
            ok = g == w;
        else
            ok = fabs(g - w) <= rel * fmax(1.0, fabs(w)) && !isnan(g);
        if (!ok) {
            print_error("element %zu: got %.17g, want %.17g\n", i, g, w);
            bad++;
        }
    }
    if (bad)
        fail();
}

static void expect_exact(const double *got, const double *want, size_t n) {
    expect_near(got, want, n, 0.0);
}

static void expect_f32(const float *got, const double *want, size_t n, double rel) {
    double g[64];
    assert_true(n <= COUNT(g));
    for (size_t i = 0; i < n; i++)
        g[i] = got[i];
    expect_near(g, want, n, rel);
}

static void expect_bool(const uint8_t *got, const uint8_t *want, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i])
            print_error("element %zu: got %u, want %u\n", i, got[i], want[i]);
    }
    assert_memory_equal(got, want, n);
}

static kf_tensor *in64(kf_graph *g, const char *name, int rank, const int64_t *dims) {
    kf_tensor *t = kf_input(g, name, KF_DTYPE_F64, rank, dims);
    assert_non_null(t);
    return t;
}

static void out(kf_graph *g, const char *name, kf_tensor *t) {
    if (kf_output(g, name, t) != KF_OK) {
        print_error("%s\n", kf_graph_error(g));
        fail();
    }
}

static void expect_shape(const kf_tensor *t, int rank, const int64_t *dims) {
    assert_int_equal(kf_tensor_rank(t), rank);
    for (int i = 0; i < rank; i++)
        assert_int_equal(kf_tensor_dim(t, i), dims[i]);
}

static double f16v(uint16_t bits) { return kf_f16_to_f32(bits); }

/* ------------------------------------------------------------------------ */
/* Elementwise unary                                                          */
/* ------------------------------------------------------------------------ */

typedef kf_tensor *(*unary_fn)(kf_graph *, kf_tensor *);

typedef struct unary_case {
    const char *name;
    unary_fn fn;
    double want[5];
} unary_case;

static void run_unary_cases(kf_graph *g, const double *x, size_t n, const unary_case *cases,
                            size_t n_cases, double rel) {
    kf_tensor *xt = in64(g, "x", 1, DIMS((int64_t)n));
    for (size_t c = 0; c < n_cases; c++)
        out(g, cases[c].name, cases[c].fn(g, xt));
    kf_binding in = {"x", (void *)x, n * sizeof(double)};
    double got[16][5];
    kf_binding outs[16];
    assert_true(n_cases <= 16 && n <= 5);
    for (size_t c = 0; c < n_cases; c++)
        outs[c] = (kf_binding){cases[c].name, got[c], n * sizeof(double)};
    eval_ok(g, &in, 1, outs, n_cases);
    for (size_t c = 0; c < n_cases; c++) {
        print_message("  %s\n", cases[c].name);
        expect_near(got[c], cases[c].want, n, rel);
    }
}

static void test_unary_ops_match_hand_computed_values(void **state) {
    static const double x[5] = {-2, -0.5, 0, 0.5, 3};
    static const unary_case cases[] = {
        {"neg", kf_neg, {2, 0.5, 0, -0.5, -3}},
        {"abs", kf_abs, {2, 0.5, 0, 0.5, 3}},
        {"exp",
         kf_exp,
         {0.1353352832366127, 0.6065306597126334, 1.0, 1.6487212707001282, 20.085536923187668}},
        {"tanh",
         kf_tanh,
         {-0.9640275800758169, -0.46211715726000974, 0.0, 0.46211715726000974, 0.9950547536867305}},
        {"sigmoid",
         kf_sigmoid,
         {0.11920292202211756, 0.37754066879814546, 0.5, 0.6224593312018546, 0.9525741268224333}},
        {"relu", kf_relu, {0, 0, 0, 0.5, 3}},
        {"gelu",
         kf_gelu,
         {-0.04550026389635842, -0.15426876936299344, 0.0, 0.34573123063700656, 2.99595030590511}},
        {"gelu_tanh",
         kf_gelu_tanh,
         {-0.04540230591222498, -0.15428599017485609, 0.0, 0.34571400982514394, 2.996362607918227}},
        {"silu",
         kf_silu,
         {-0.23840584404423512, -0.18877033439907273, 0.0, 0.3112296656009273, 2.8577223804672998}},
        {"erf",
         kf_erf,
         {-0.9953222650189527, -0.5204998778130465, 0.0, 0.5204998778130465, 0.9999779095030014}},
        {"sin",
         kf_sin,
         {-0.9092974268256817, -0.479425538604203, 0.0, 0.479425538604203, 0.1411200080598672}},
        {"cos",
         kf_cos,
         {-0.4161468365471424, 0.8775825618903728, 1.0, 0.8775825618903728, -0.9899924966004454}},
    };
    run_unary_cases(G, x, 5, cases, COUNT(cases), 1e-14);
}

static void test_log_sqrt_and_rsqrt_match_hand_computed_values(void **state) {
    static const double x[4] = {0.25, 1, 2, 9};
    static const unary_case cases[] = {
        {"log", kf_log, {-1.3862943611198906, 0.0, 0.6931471805599453, 2.1972245773362196}},
        {"sqrt", kf_sqrt, {0.5, 1.0, 1.4142135623730951, 3.0}},
        {"rsqrt", kf_rsqrt, {2.0, 1.0, 0.7071067811865476, 0.3333333333333333}},
    };
    run_unary_cases(G, x, 4, cases, COUNT(cases), 1e-15);
}

static void test_activations_of_large_magnitudes_neither_overflow_nor_cancel(void **state) {
    /* gelu(-10) is 7.6e-23, not 0: 1 + erf(x/sqrt 2) would cancel to 0. */
    static const double x[5] = {-1000, 1000, -30, -10, 0};
    static const unary_case cases[] = {
        {"sigmoid", kf_sigmoid, {0, 1, 9.357622968839299e-14, 4.5397868702434395e-05, 0.5}},
        {"silu", kf_silu, {0, 1000, -2.8072868906517896e-12, -4.5397868702434395e-04, 0}},
        {"gelu", kf_gelu, {0, 1000, -1.472014178144456e-196, -7.619853024160526e-23, 0}},
        {"gelu_tanh", kf_gelu_tanh, {0, 1000, 0, -1.204092348209806e-37, 0}},
        {"tanh", kf_tanh, {-1, 1, -1, -0.9999999958776927, 0}},
        {"exp", kf_exp, {0, INFINITY, 9.357622968840175e-14, 4.5399929762484854e-05, 1}},
    };
    kf_graph *g = G;
    kf_tensor *xt = in64(g, "x", 1, DIMS(5));
    for (size_t c = 0; c < COUNT(cases); c++)
        out(g, cases[c].name, cases[c].fn(g, xt));
    kf_binding in = {"x", (void *)x, sizeof x};
    double got[COUNT(cases)][5];
    kf_binding outs[COUNT(cases)];
    for (size_t c = 0; c < COUNT(cases); c++)
        outs[c] = (kf_binding){cases[c].name, got[c], sizeof got[c]};
    eval_ok(g, &in, 1, outs, COUNT(cases));
    for (size_t c = 0; c < COUNT(cases); c++) {
        print_message("  %s\n", cases[c].name);
        /* Relative to the value itself, however tiny: no absolute floor. */
        for (int i = 0; i < 5; i++) {
            double w = cases[c].want[i], gv = got[c][i];
            if (w == 0.0 || isinf(w))
                assert_true(gv == w);
            else
                assert_true(fabs(gv - w) <= 1e-13 * fabs(w));
        }
    }
}

static void test_relu_abs_and_neg_keep_nan(void **state) {
    static const double x[4] = {-1, 0, 2, NAN};
    static const unary_case cases[] = {
        {"relu", kf_relu, {0, 0, 2, NAN}},
        {"abs", kf_abs, {1, 0, 2, NAN}},
        {"neg", kf_neg, {1, 0, -2, NAN}},
        {"exp", kf_exp, {0.36787944117144233, 1, 7.38905609893065, NAN}},
    };
    run_unary_cases(G, x, 4, cases, COUNT(cases), 1e-15);
}

/* ------------------------------------------------------------------------ */
/* Elementwise binary and broadcasting                                        */
/* ------------------------------------------------------------------------ */

typedef kf_tensor *(*binary_fn)(kf_graph *, kf_tensor *, kf_tensor *);

static void test_binary_ops_match_hand_computed_values(void **state) {
    kf_graph *g = G;
    static const double a[4] = {6, -3, 2.5, 0}, b[4] = {4, 2, -0.5, 5};
    static const struct {
        const char *name;
        binary_fn fn;
        double want[4];
    } cases[] = {
        {"add", kf_add, {10, -1, 2, 5}},     {"sub", kf_sub, {2, -5, 3, -5}},
        {"mul", kf_mul, {24, -6, -1.25, 0}}, {"div", kf_div, {1.5, -1.5, -5, 0}},
        {"max", kf_max, {6, 2, 2.5, 5}},     {"min", kf_min, {4, -3, -0.5, 0}},
    };
    kf_tensor *at = in64(g, "a", 1, DIMS(4)), *bt = in64(g, "b", 1, DIMS(4));
    for (size_t c = 0; c < COUNT(cases); c++)
        out(g, cases[c].name, cases[c].fn(g, at, bt));
    kf_binding in[2] = {{"a", (void *)a, sizeof a}, {"b", (void *)b, sizeof b}};
    double got[COUNT(cases)][4];
    kf_binding outs[COUNT(cases)];
    for (size_t c = 0; c < COUNT(cases); c++)
        outs[c] = (kf_binding){cases[c].name, got[c], sizeof got[c]};
    eval_ok(g, in, 2, outs, COUNT(cases));
    for (size_t c = 0; c < COUNT(cases); c++)
        expect_exact(got[c], cases[c].want, 4);
}

static void test_max_and_min_propagate_nan_from_either_side(void **state) {
    kf_graph *g = G;
    double a[3] = {NAN, 1, -INFINITY}, b[3] = {1, NAN, 2};
    kf_tensor *at = in64(g, "a", 1, DIMS(3)), *bt = in64(g, "b", 1, DIMS(3));
    out(g, "mx", kf_max(g, at, bt));
    out(g, "mn", kf_min(g, at, bt));
    kf_binding in[2] = {{"a", a, sizeof a}, {"b", b, sizeof b}};
    double mx[3], mn[3];
    kf_binding outs[2] = {{"mx", mx, sizeof mx}, {"mn", mn, sizeof mn}};
    eval_ok(g, in, 2, outs, 2);
    expect_exact(mx, (const double[]){NAN, NAN, 2}, 3);
    expect_exact(mn, (const double[]){NAN, NAN, -INFINITY}, 3);
}

static void test_pow_matches_hand_computed_values(void **state) {
    kf_graph *g = G;
    double a[7] = {2, 9, 2, 3, 2.5, 0, -8}, b[7] = {10, 0.5, 0.5, -2, 3, 0, 0.5};
    kf_tensor *at = in64(g, "a", 1, DIMS(7)), *bt = in64(g, "b", 1, DIMS(7));
    out(g, "p", kf_pow(g, at, bt));
    kf_binding in[2] = {{"a", a, sizeof a}, {"b", b, sizeof b}};
    double p[7];
    eval1(g, in, 2, "p", p, sizeof p);
    expect_near(p,
                (const double[]){1024, 3, 1.4142135623730951, 0.1111111111111111, 15.625, 1, NAN},
                7, 1e-15);
}

static void test_add_broadcasts_a_row_across_a_matrix(void **state) {
    kf_graph *g = G;
    double x[6] = {1, 2, 3, 4, 5, 6}, r[3] = {10, 20, 30};
    kf_tensor *y = kf_add(g, in64(g, "x", 2, DIMS(2, 3)), in64(g, "r", 1, DIMS(3)));
    out(g, "y", y);
    expect_shape(y, 2, DIMS(2, 3));
    kf_binding in[2] = {{"x", x, sizeof x}, {"r", r, sizeof r}};
    double got[6];
    eval1(g, in, 2, "y", got, sizeof got);
    expect_exact(got, (const double[]){11, 22, 33, 14, 25, 36}, 6);
}

static void test_sub_broadcasts_a_column_across_a_matrix(void **state) {
    kf_graph *g = G;
    double x[6] = {1, 2, 3, 4, 5, 6}, c[2] = {1, 10};
    kf_tensor *y = kf_sub(g, in64(g, "x", 2, DIMS(2, 3)), in64(g, "c", 2, DIMS(2, 1)));
    out(g, "y", y);
    kf_binding in[2] = {{"x", x, sizeof x}, {"c", c, sizeof c}};
    double got[6];
    eval1(g, in, 2, "y", got, sizeof got);
    expect_exact(got, (const double[]){0, 1, 2, -6, -5, -4}, 6);
}

static void test_mul_broadcasts_a_rank0_scalar(void **state) {
    kf_graph *g = G;
    double x[6] = {1, 2, 3, 4, 5, 6};
    kf_tensor *y = kf_mul(g, kf_scalar(g, KF_DTYPE_F64, -10), in64(g, "x", 2, DIMS(2, 3)));
    out(g, "y", y);
    expect_shape(y, 2, DIMS(2, 3));
    kf_binding in = {"x", x, sizeof x};
    double got[6];
    eval1(g, &in, 1, "y", got, sizeof got);
    expect_exact(got, (const double[]){-10, -20, -30, -40, -50, -60}, 6);
}

static void test_size_one_dims_broadcast_on_both_sides(void **state) {
    kf_graph *g = G;
    double a[3] = {100, 200, 300}, b[4] = {1, 2, 3, 4};
    kf_tensor *y = kf_add(g, in64(g, "a", 2, DIMS(3, 1)), in64(g, "b", 2, DIMS(1, 4)));
    out(g, "y", y);
    expect_shape(y, 2, DIMS(3, 4));
    kf_binding in[2] = {{"a", a, sizeof a}, {"b", b, sizeof b}};
    double got[12];
    eval1(g, in, 2, "y", got, sizeof got);
    expect_exact(got, (const double[]){101, 102, 103, 104, 201, 202, 203, 204, 301, 302, 303, 304},
                 12);
}

static void test_rank1_broadcasts_into_rank3_with_a_size_one_middle_dim(void **state) {
    kf_graph *g = G;
    double x[6] = {1, 2, 3, 4, 5, 6}, v[3] = {1, 0, -1};
    /* [2, 1, 3] - [3] -> [2, 1, 3]; then + [4, 1] -> [2, 4, 3]. */
    kf_tensor *d = kf_sub(g, in64(g, "x", 3, DIMS(2, 1, 3)), in64(g, "v", 1, DIMS(3)));
    double w[4] = {0, 10, 20, 30};
    kf_tensor *y = kf_add(g, d, in64(g, "w", 2, DIMS(4, 1)));
    out(g, "y", y);
    expect_shape(y, 3, DIMS(2, 4, 3));
    kf_binding in[3] = {{"x", x, sizeof x}, {"v", v, sizeof v}, {"w", w, sizeof w}};
    double got[24];
    eval1(g, in, 3, "y", got, sizeof got);
    expect_exact(got, (const double[]){0, 2, 4, 10, 12, 14, 20, 22, 24, 30, 32, 34,
                                       3, 5, 7, 13, 15, 17, 23, 25, 27, 33, 35, 37},
                 24);
}

static void test_rank0_with_rank0_gives_rank0(void **state) {
    kf_graph *g = G;
    double x = 3;
    kf_tensor *y = kf_add(g, in64(g, "x", 0, NULL), kf_scalar(g, KF_DTYPE_F64, 2.5));
    out(g, "y", y);
    expect_shape(y, 0, NULL);
    assert_int_equal(kf_tensor_numel(y), 1);
    kf_binding in = {"x", &x, sizeof x};
    double got;
    eval1(g, &in, 1, "y", &got, sizeof got);
    expect_exact(&got, (const double[]){5.5}, 1);
}

static void test_comparisons_give_bool_and_nan_compares_false_except_ne(void **state) {
    kf_graph *g = G;
    double a[4] = {1, 2, 3, NAN}, b[4] = {2, 2, 2, NAN};
    kf_tensor *at = in64(g, "a", 1, DIMS(4)), *bt = in64(g, "b", 1, DIMS(4));
    static const struct {
        const char *name;
        binary_fn fn;
        uint8_t want[4];
    } cases[] = {
        {"eq", kf_eq, {0, 1, 0, 0}}, {"ne", kf_ne, {1, 0, 1, 1}}, {"lt", kf_lt, {1, 0, 0, 0}},
        {"le", kf_le, {1, 1, 0, 0}}, {"gt", kf_gt, {0, 0, 1, 0}}, {"ge", kf_ge, {0, 1, 1, 0}},
    };
    for (size_t c = 0; c < COUNT(cases); c++) {
        kf_tensor *t = cases[c].fn(g, at, bt);
        assert_int_equal(kf_tensor_dtype(t), KF_DTYPE_BOOL);
        out(g, cases[c].name, t);
    }
    /* Against a rank-0 scalar too. */
    out(g, "lt2", kf_lt(g, at, kf_scalar(g, KF_DTYPE_F64, 2)));
    kf_binding in[2] = {{"a", a, sizeof a}, {"b", b, sizeof b}};
    uint8_t got[COUNT(cases) + 1][4];
    memset(got, 0xA5, sizeof got);
    kf_binding outs[COUNT(cases) + 1];
    for (size_t c = 0; c < COUNT(cases); c++)
        outs[c] = (kf_binding){cases[c].name, got[c], 4};
    outs[COUNT(cases)] = (kf_binding){"lt2", got[COUNT(cases)], 4};
    eval_ok(g, in, 2, outs, COUNT(cases) + 1);
    for (size_t c = 0; c < COUNT(cases); c++) {
        print_message("  %s\n", cases[c].name);
        expect_bool(got[c], cases[c].want, 4);
    }
    expect_bool(got[COUNT(cases)], (const uint8_t[]){1, 0, 0, 0}, 4);
}

static void test_eq_and_ne_compare_bools(void **state) {
    kf_graph *g = G;
    uint8_t a[4] = {0, 0, 1, 1}, b[4] = {0, 1, 0, 7}; /* 7 reads as true */
    kf_tensor *at = kf_input(g, "a", KF_DTYPE_BOOL, 1, DIMS(4));
    kf_tensor *bt = kf_input(g, "b", KF_DTYPE_BOOL, 1, DIMS(4));
    out(g, "eq", kf_eq(g, at, bt));
    out(g, "ne", kf_ne(g, at, bt));
    kf_binding in[2] = {{"a", a, 4}, {"b", b, 4}};
    uint8_t eq[4], ne[4];
    kf_binding outs[2] = {{"eq", eq, 4}, {"ne", ne, 4}};
    eval_ok(g, in, 2, outs, 2);
    expect_bool(eq, (const uint8_t[]){1, 0, 0, 1}, 4);
    expect_bool(ne, (const uint8_t[]){0, 1, 1, 0}, 4);
}

static void test_where_selects_with_all_three_operands_broadcast(void **state) {
    kf_graph *g = G;
    uint8_t c[2] = {1, 0};
    double a[3] = {1, 2, 3};
    kf_tensor *ct = kf_input(g, "c", KF_DTYPE_BOOL, 2, DIMS(2, 1));
    kf_tensor *y = kf_where(g, ct, in64(g, "a", 1, DIMS(3)), kf_scalar(g, KF_DTYPE_F64, -1));
    out(g, "y", y);
    expect_shape(y, 2, DIMS(2, 3));
    kf_binding in[2] = {{"c", c, 2}, {"a", a, sizeof a}};
    double got[6];
    eval1(g, in, 2, "y", got, sizeof got);
    expect_exact(got, (const double[]){1, 2, 3, -1, -1, -1}, 6);
}

static void test_where_of_a_comparison_builds_a_causal_mask(void **state) {
    kf_graph *g = G;
    kf_tensor *row = kf_iota(g, KF_DTYPE_I32, 2, DIMS(3, 3), 0);
    kf_tensor *col = kf_iota(g, KF_DTYPE_I32, 2, DIMS(3, 3), 1);
    kf_tensor *s = in64(g, "s", 2, DIMS(3, 3));
    out(g, "y", kf_where(g, kf_le(g, col, row), s, kf_scalar(g, KF_DTYPE_F64, -INFINITY)));
    double sv[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    kf_binding in = {"s", sv, sizeof sv};
    double got[9];
    eval1(g, &in, 1, "y", got, sizeof got);
    expect_exact(got, (const double[]){1, -INFINITY, -INFINITY, 4, 5, -INFINITY, 7, 8, 9}, 9);
}

/* ------------------------------------------------------------------------ */
/* iota                                                                       */
/* ------------------------------------------------------------------------ */

static void test_iota_holds_the_index_along_its_axis(void **state) {
    kf_graph *g = G;
    out(g, "r", kf_iota(g, KF_DTYPE_I32, 2, DIMS(2, 3), 0));
    out(g, "c", kf_iota(g, KF_DTYPE_I32, 2, DIMS(2, 3), -1));
    out(g, "m", kf_iota(g, KF_DTYPE_F32, 3, DIMS(2, 3, 2), 1));
    out(g, "s", kf_iota(g, KF_DTYPE_F64, 1, DIMS(4), 0));
    int32_t r[6], c[6];
    float m[12];
    double s[4];
    kf_binding outs[4] = {
        {"r", r, sizeof r}, {"c", c, sizeof c}, {"m", m, sizeof m}, {"s", s, sizeof s}};
    eval_ok(g, NULL, 0, outs, 4);
    assert_memory_equal(r, ((const int32_t[]){0, 0, 0, 1, 1, 1}), sizeof r);
    assert_memory_equal(c, ((const int32_t[]){0, 1, 2, 0, 1, 2}), sizeof c);
    expect_f32(m, (const double[]){0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2}, 12, 0);
    expect_exact(s, (const double[]){0, 1, 2, 3}, 4);
}

/* ------------------------------------------------------------------------ */
/* Reductions                                                                 */
/* ------------------------------------------------------------------------ */

typedef kf_tensor *(*reduce_fn)(kf_graph *, kf_tensor *, int, int);

/* x = arange(24) as [2, 3, 4]; each reduction over each axis, with and
 * without keepdim. */
static void test_reductions_over_each_axis_of_a_rank3_tensor(void **state) {
    kf_graph *g = G;
    double x[24];
    for (int i = 0; i < 24; i++)
        x[i] = i;
    static const struct {
        const char *name;
        reduce_fn fn;
        int axis;
        int n;
        double want[12];
    } cases[] = {
        {"sum0", kf_reduce_sum, 0, 12, {12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34}},
        {"max0", kf_reduce_max, 0, 12, {12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}},
        {"mean0", kf_reduce_mean, 0, 12, {6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}},
        {"sum1", kf_reduce_sum, 1, 8, {12, 15, 18, 21, 48, 51, 54, 57}},
        {"max1", kf_reduce_max, 1, 8, {8, 9, 10, 11, 20, 21, 22, 23}},
        {"mean1", kf_reduce_mean, 1, 8, {4, 5, 6, 7, 16, 17, 18, 19}},
        {"sum2", kf_reduce_sum, 2, 6, {6, 22, 38, 54, 70, 86}},
        {"max2", kf_reduce_max, -1, 6, {3, 7, 11, 15, 19, 23}},
        {"mean2", kf_reduce_mean, 2, 6, {1.5, 5.5, 9.5, 13.5, 17.5, 21.5}},
        {"min0", kf_reduce_min, 0, 12, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
        {"min1", kf_reduce_min, 1, 8, {0, 1, 2, 3, 12, 13, 14, 15}},
        {"min2", kf_reduce_min, -1, 6, {0, 4, 8, 12, 16, 20}},
    };
    static const int64_t full[3] = {2, 3, 4};
    kf_tensor *xt = in64(g, "x", 3, full);
    char names[COUNT(cases) * 2][16];
    kf_binding outs[COUNT(cases) * 2];
    double got[COUNT(cases) * 2][12];
    for (size_t c = 0; c < COUNT(cases); c++) {
        for (int keep = 0; keep < 2; keep++) {
            size_t k = c * 2 + (size_t)keep;
            snprintf(names[k], sizeof names[k], "%s%s", cases[c].name, keep ? "k" : "");
            kf_tensor *t = cases[c].fn(g, xt, cases[c].axis, keep);
            out(g, names[k], t);
            int ax = cases[c].axis < 0 ? cases[c].axis + 3 : cases[c].axis;
            int64_t dims[3];
            int r = 0;
            for (int d = 0; d < 3; d++) {
                if (d != ax)
                    dims[r++] = full[d];
                else if (keep)
                    dims[r++] = 1;
            }
            expect_shape(t, r, dims);
            outs[k] = (kf_binding){names[k], got[k], (size_t)cases[c].n * sizeof(double)};
        }
    }
    kf_binding in = {"x", x, sizeof x};
    eval_ok(g, &in, 1, outs, COUNT(outs));
    for (size_t k = 0; k < COUNT(outs); k++) {
        print_message("  %s\n", names[k]);
        expect_exact(got[k], cases[k / 2].want, (size_t)cases[k / 2].n);
    }
}

static void test_reduce_max_propagates_nan_and_handles_all_negative_rows(void **state) {
    kf_graph *g = G;
    double x[6] = {-5, -2, -9, 1, NAN, 3};
    out(g, "m", kf_reduce_max(g, in64(g, "x", 2, DIMS(2, 3)), 1, 0));
    kf_binding in = {"x", x, sizeof x};
    double m[2];
    eval1(g, &in, 1, "m", m, sizeof m);
    expect_exact(m, (const double[]){-2, NAN}, 2);
}

static void test_reduce_sum_of_i32_saturates(void **state) {
    kf_graph *g = G;
    /* The sum is exact in double and saturates once, when it is stored: the
     * third row passes INT32_MAX on the way and comes back. */
    int32_t x[9] = {INT32_MAX, 1, 7, INT32_MIN, -1, -5, INT32_MAX, 1, -7};
    kf_tensor *xt = kf_input(g, "x", KF_DTYPE_I32, 2, DIMS(3, 3));
    out(g, "s", kf_reduce_sum(g, xt, 1, 0));
    out(g, "m", kf_reduce_max(g, xt, 1, 1));
    kf_binding in = {"x", x, sizeof x};
    int32_t s[3], m[3];
    kf_binding outs[2] = {{"s", s, sizeof s}, {"m", m, sizeof m}};
    eval_ok(g, &in, 1, outs, 2);
    assert_memory_equal(s, ((const int32_t[]){INT32_MAX, INT32_MIN, INT32_MAX - 6}), sizeof s);
    assert_memory_equal(m, ((const int32_t[]){INT32_MAX, -1, INT32_MAX}), sizeof m);
}

static void test_reduce_sum_of_f16_accumulates_in_double(void **state) {
    /* 4096 ones: an f16 accumulator would stall at 2048 (2048 + 1 ties back
     * to 2048); the reference accumulates in double and stores 4096 exactly. */
    kf_graph *g = G;
    uint16_t x[4096];
    for (int i = 0; i < 4096; i++)
        x[i] = 0x3C00; /* 1.0 */
    kf_tensor *xt = kf_input(g, "x", KF_DTYPE_F16, 1, DIMS(4096));
    out(g, "s", kf_reduce_sum(g, xt, 0, 0));
    out(g, "m", kf_reduce_mean(g, xt, 0, 0));
    kf_binding in = {"x", x, sizeof x};
    uint16_t s, m;
    kf_binding outs[2] = {{"s", &s, 2}, {"m", &m, 2}};
    eval_ok(g, &in, 1, outs, 2);
    assert_int_equal(s, 0x6C00); /* 4096 */
    assert_int_equal(m, 0x3C00); /* 1.0 */
}

/* ------------------------------------------------------------------------ */
/* Softmax and normalizations                                                 */
/* ------------------------------------------------------------------------ */

static void test_softmax_matches_hand_computed_values(void **state) {
    kf_graph *g = G;
    double x[3] = {1, 2, 3};
    out(g, "y", kf_softmax(g, in64(g, "x", 1, DIMS(3)), -1));
    kf_binding in = {"x", x, sizeof x};
    double y[3];
    eval1(g, &in, 1, "y", y, sizeof y);
    expect_near(y, (const double[]){0.09003057317038046, 0.24472847105479764, 0.6652409557748219},
                3, 1e-15);
}

/* expand copies x along its size-1 and new leading dims. */
static void test_expand_repeats_along_the_broadcast_dims(void **state) {
    kf_graph *g = G;
    double x[3] = {1, 2, 3};
    out(g, "y", kf_expand(g, in64(g, "x", 2, DIMS(3, 1)), 3, DIMS(2, 3, 2)));
    kf_binding in = {"x", x, sizeof x};
    double y[12];
    eval1(g, &in, 1, "y", y, sizeof y);
    assert_memory_equal(y, ((const double[]){1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}), sizeof y);
}

/* slice with a step, concat along a middle axis, gather with i32 and i64
 * indices: hand-computed values. */
static void test_slice_concat_and_gather_pick_the_right_elements(void **state) {
    kf_graph *g = G;
    double x[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}; /* [3, 4] */
    double b[3] = {-1, -2, -3};                            /* [3, 1] */
    int32_t i32[3] = {2, 0, 2};
    int64_t i64[2] = {3, 1};
    kf_tensor *xt = in64(g, "x", 2, DIMS(3, 4)), *bt = in64(g, "b", 2, DIMS(3, 1));
    kf_tensor *it = kf_input(g, "i", KF_DTYPE_I32, 1, DIMS(3));
    kf_tensor *jt = kf_input(g, "j", KF_DTYPE_I64, 2, DIMS(1, 2));
    out(g, "s", kf_slice(g, xt, 1, -3, INT64_MAX, 2)); /* columns 1, 3 */
    kf_tensor *parts[3] = {bt, kf_slice(g, xt, 1, 0, 2, 1), bt};
    out(g, "c", kf_concat(g, 3, parts, 1));
    out(g, "r", kf_gather(g, xt, it, 0));
    out(g, "q", kf_gather(g, xt, jt, 1));
    kf_binding in[4] = {
        {"x", x, sizeof x}, {"b", b, sizeof b}, {"i", i32, sizeof i32}, {"j", i64, sizeof i64}};
    double s[6], c[12], r[12], q[6];
    kf_binding o[4] = {
        {"s", s, sizeof s}, {"c", c, sizeof c}, {"r", r, sizeof r}, {"q", q, sizeof q}};
    eval_ok(g, in, 4, o, 4);
    assert_memory_equal(s, ((const double[]){1, 3, 5, 7, 9, 11}), sizeof s);
    assert_memory_equal(c, ((const double[]){-1, 0, 1, -1, -2, 4, 5, -2, -3, 8, 9, -3}), sizeof c);
    assert_memory_equal(r, ((const double[]){8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11}), sizeof r);
    assert_memory_equal(q, ((const double[]){3, 1, 7, 5, 11, 9}), sizeof q);
}

/* An index outside the axis is an error naming it, never a read out of
 * bounds; negative indices are out of range too (no Python wrap-around). */
static void test_gather_refuses_an_index_outside_the_axis(void **state) {
    kf_graph *g = G;
    double x[6] = {0};
    kf_tensor *xt = in64(g, "x", 2, DIMS(3, 2));
    kf_tensor *it = kf_input(g, "i", KF_DTYPE_I64, 1, DIMS(2));
    out(g, "y", kf_gather(g, xt, it, 0));
    double y[4];
    kf_binding o = {"y", y, sizeof y};
    const int64_t cases[][2] = {{0, 3}, {-1, 0}, {INT64_C(1) << 40, 1}};
    for (size_t k = 0; k < COUNT(cases); k++) {
        kf_binding in[2] = {{"x", x, sizeof x}, {"i", (void *)cases[k], sizeof cases[k]}};
        assert_int_equal(kf_graph_eval(g, in, 2, &o, 1), KF_ERR_INVALID_ARGUMENT);
        if (!strstr(kf_graph_error(g), "gather: index") ||
            !strstr(kf_graph_error(g), "is out of range for axis 0 of table f64[3, 2] (0 to 2)"))
            fail_msg("message: %s", kf_graph_error(g));
    }
}

/* argmax is i32: the first maximum of a row, or its first NaN (torch.argmax). */
static void test_argmax_takes_the_first_maximum_or_the_first_nan(void **state) {
    kf_graph *g = G;
    double x[12] = {1, 5, 5, 2, NAN, 7, NAN, 0, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    kf_tensor *t = kf_argmax(g, in64(g, "x", 2, DIMS(3, 4)), 1, 0);
    assert_int_equal(kf_tensor_dtype(t), KF_DTYPE_I32);
    out(g, "y", t);
    kf_binding in = {"x", x, sizeof x};
    int32_t y[3];
    eval1(g, &in, 1, "y", y, sizeof y);
    assert_memory_equal(y, ((const int32_t[]){1, 0, 0}), sizeof y);
}

static void test_log_softmax_matches_hand_computed_values_and_does_not_overflow(void **state) {
    kf_graph *g = G;
    double x[6] = {1, 2, 3, 0x1p100, 0x1p100 - 0x1p60, -0x1p100};
    out(g, "y", kf_log_softmax(g, in64(g, "x", 2, DIMS(2, 3)), -1));
    kf_binding in = {"x", x, sizeof x};
    double y[6];
    eval1(g, &in, 1, "y", y, sizeof y);
    /* row 2: exp(x - max) is 1, 0, 0, so log(sum) is 0 and the rest is x - max, exactly */
    expect_near(y, (const double[]){-2.4076059644443806, -1.4076059644443804, -0.4076059644443804},
                3, 1e-15);
    assert_true(y[3] == 0 && y[4] == -0x1p60 && y[5] == -0x1p101);
}

/* logsumexp: log(e + e^2 + e^3) = 3 + log(1 + e^-1 + e^-2); a row of 2^100s
 * does not overflow (2^100 + log 2); every element -inf gives -inf, a +inf
 * gives +inf, a NaN gives NaN. */
static void test_logsumexp_matches_hand_computed_values_and_its_edge_rows(void **state) {
    kf_graph *g = G;
    double x[15] = {1, 2, 3,          0x1p100, 0x1p100, -INFINITY, -INFINITY, -INFINITY,
                    -INFINITY, 1,     INFINITY, 5,      NAN,       1,         2};
    out(g, "y", kf_logsumexp(g, in64(g, "x", 2, DIMS(5, 3)), 1, 0));
    kf_binding in = {"x", x, sizeof x};
    double y[5];
    eval1(g, &in, 1, "y", y, sizeof y);
    expect_near(y, (const double[]){3.4076059644443806}, 1, 1e-15);
    assert_true(y[1] == 0x1p100 && y[2] == -INFINITY && y[3] == INFINITY && isnan(y[4]));
}

static void test_softmax_of_large_values_does_not_overflow(void **state) {
    kf_graph *g = G;
    /* Rows: a 1e4 shift of [0, 1, 2]; 1e30 twice; -1e30 against 1e30 and 0. */
    float x[9] = {1e4f, 1e4f + 1, 1e4f + 2, 1e30f, 1e30f, 0, -1e30f, 1e30f, 0};
    out(g, "y", kf_softmax(g, kf_input(g, "x", KF_DTYPE_F32, 2, DIMS(3, 3)), 1));
    kf_binding in = {"x", x, sizeof x};
    float y[9];
    eval1(g, &in, 1, "y", y, sizeof y);
    expect_f32(y,
               (const double[]){0.09003057317038046, 0.24472847105479764, 0.6652409557748219, 0.5,
                                0.5, 0, 0, 1, 0},
               9, 1e-7);
}

static void test_softmax_of_f64_extremes_does_not_overflow(void **state) {
    kf_graph *g = G;
    double x[4] = {1000, 0, 1e300, -1e300};
    out(g, "y", kf_softmax(g, in64(g, "x", 2, DIMS(2, 2)), -1));
    kf_binding in = {"x", x, sizeof x};
    double y[4];
    eval1(g, &in, 1, "y", y, sizeof y);
    expect_exact(y, (const double[]){1, 0, 1, 0}, 4); /* exp(-1000) underflows to 0 */
}

static void test_softmax_along_a_leading_axis(void **state) {
    kf_graph *g = G;
    double x[6] = {1, 5, 0, 2, 5, -1};
    out(g, "y", kf_softmax(g, in64(g, "x", 2, DIMS(2, 3)), 0));
    kf_binding in = {"x", x, sizeof x};
    double y[6];
    eval1(g, &in, 1, "y", y, sizeof y);
    expect_near(y,
                (const double[]){0.2689414213699951, 0.5, 0.7310585786300049, 0.7310585786300049,
                                 0.5, 0.2689414213699951},
                6, 1e-15);
}

static void test_layer_norm_matches_hand_computed_values(void **state) {
    kf_graph *g = G;
    double x[4] = {1, 2, 3, 4}, w[4] = {0.5, 1, 2, -1}, b[4] = {1, 0, -1, 0.25};
    double ones[4] = {1, 1, 1, 1}, zeros[4] = {0, 0, 0, 0};
    kf_tensor *xt = in64(g, "x", 1, DIMS(4));
    kf_tensor *wt = in64(g, "w", 1, DIMS(4)), *bt = in64(g, "b", 1, DIMS(4));
    kf_tensor *o = kf_constant(g, KF_DTYPE_F64, 1, DIMS(4), ones);
    kf_tensor *z = kf_constant(g, KF_DTYPE_F64, 1, DIMS(4), zeros);
    out(g, "plain", kf_layer_norm(g, xt, o, z, -1, 0.0));
    out(g, "affine", kf_layer_norm(g, xt, wt, bt, 0, 1e-5));
    kf_binding in[3] = {{"x", x, sizeof x}, {"w", w, sizeof w}, {"b", b, sizeof b}};
    double p[4], a[4];
    kf_binding outs[2] = {{"plain", p, sizeof p}, {"affine", a, sizeof a}};
    eval_ok(g, in, 3, outs, 2);
    expect_near(p,
                (const double[]){-1.3416407864998738, -0.4472135954999579, 0.4472135954999579,
                                 1.3416407864998738},
                4, 1e-15);
    expect_near(a,
                (const double[]){0.3291822900155365, -0.447211806656309, -0.105576386687382,
                                 -1.0916354199689269},
                4, 1e-15);
}

static void test_layer_norm_of_shifted_and_huge_values_keeps_precision(void **state) {
    kf_graph *g = G;
    /* Row 0: 1e4 + [1..4] (a one-pass E[x^2] - E[x]^2 in f32 loses it all);
     * row 1: [1..4] * 1e30 (squares overflow f32). */
    float x[8] = {10001, 10002, 10003, 10004, 1e30f, 2e30f, 3e30f, 4e30f};
    float ones[4] = {1, 1, 1, 1}, zeros[4] = {0, 0, 0, 0};
    kf_tensor *w = kf_constant(g, KF_DTYPE_F32, 1, DIMS(4), ones);
    kf_tensor *b = kf_constant(g, KF_DTYPE_F32, 1, DIMS(4), zeros);
    out(g, "y", kf_layer_norm(g, kf_input(g, "x", KF_DTYPE_F32, 2, DIMS(2, 4)), w, b, -1, 1e-5));
    kf_binding in = {"x", x, sizeof x};
    float y[8];
    eval1(g, &in, 1, "y", y, sizeof y);
    expect_f32(y,
               (const double[]){-1.3416354199689269, -0.447211806656309, 0.447211806656309,
                                1.3416354199689269, -1.3416407729836701, -0.4472135684675541,
                                0.44721350088654627, 1.341640840564678},
               8, 1e-7);
}

static void test_layer_norm_of_f64_values_near_1e300_does_not_overflow(void **state) {
    kf_graph *g = G;
    double x[4] = {1e300, 2e300, 3e300, 4e300}, ones[4] = {1, 1, 1, 1}, zeros[4] = {0};
    kf_tensor *w = kf_constant(g, KF_DTYPE_F64, 1, DIMS(4), ones);
    kf_tensor *b = kf_constant(g, KF_DTYPE_F64, 1, DIMS(4), zeros);
    out(g, "y", kf_layer_norm(g, in64(g, "x", 1, DIMS(4)), w, b, 0, 1e-5));
    kf_binding in = {"x", x, sizeof x};
    double y[4];
    eval1(g, &in, 1, "y", y, sizeof y);
    expect_near(y,
                (const double[]){-1.3416407864998738, -0.4472135954999579, 0.4472135954999579,
                                 1.3416407864998738},
                4, 1e-14);
}

static void test_layer_norm_along_a_leading_axis(void **state) {
    kf_graph *g = G;
    /* Columns [1, 2, 3, 4] and [10, 20, 30, 40] normalize to the same values. */
    double x[8] = {1, 10, 2, 20, 3, 30, 4, 40}, w[4] = {1, 1, 1, 1}, b[4] = {0, 0, 0, 100};
    kf_tensor *y = kf_layer_norm(g, in64(g, "x", 2, DIMS(4, 2)), in64(g, "w", 1, DIMS(4)),
                                 in64(g, "b", 1, DIMS(4)), 0, 0.0);
    out(g, "y", y);
    expect_shape(y, 2, DIMS(4, 2));
    kf_binding in[3] = {{"x", x, sizeof x}, {"w", w, sizeof w}, {"b", b, sizeof b}};
    double got[8];
    eval1(g, in, 3, "y", got, sizeof got);
    expect_near(got,
                (const double[]){-1.3416407864998738, -1.3416407864998738, -0.4472135954999579,
                                 -0.4472135954999579, 0.4472135954999579, 0.4472135954999579,
                                 101.3416407864998738, 101.3416407864998738},
                8, 1e-15);
}

static void test_rms_norm_matches_hand_computed_values(void **state) {
    kf_graph *g = G;
    double x[4] = {1, 2, 3, 4}, w[4] = {2, 1, 0.5, -1};
    out(g, "y", kf_rms_norm(g, in64(g, "x", 1, DIMS(4)), in64(g, "w", 1, DIMS(4)), -1, 1e-6));
    kf_binding in[2] = {{"x", x, sizeof x}, {"w", w, sizeof w}};
    double y[4];
    eval1(g, in, 2, "y", y, sizeof y);
    expect_near(y,
                (const double[]){0.7302966946537768, 0.7302966946537768, 0.5477225209903326,
                                 -1.4605933893075536},
                4, 1e-15);
}

static void test_rms_norm_of_huge_values_does_not_overflow(void **state) {
    kf_graph *g = G;
    float xf[4] = {1e30f, 2e30f, 3e30f, 4e30f}, wf[4] = {1, 1, 1, 1};
    double xd[4] = {1e200, 2e200, 3e200, 4e200}, wd[4] = {1, 1, 1, 1};
    kf_tensor *wft = kf_constant(g, KF_DTYPE_F32, 1, DIMS(4), wf);
    kf_tensor *wdt = kf_constant(g, KF_DTYPE_F64, 1, DIMS(4), wd);
    out(g, "yf", kf_rms_norm(g, kf_input(g, "xf", KF_DTYPE_F32, 1, DIMS(4)), wft, 0, 1e-6));
    out(g, "yd", kf_rms_norm(g, in64(g, "xd", 1, DIMS(4)), wdt, 0, 1e-6));
    kf_binding in[2] = {{"xf", xf, sizeof xf}, {"xd", xd, sizeof xd}};
    float yf[4];
    double yd[4];
    kf_binding outs[2] = {{"yf", yf, sizeof yf}, {"yd", yd, sizeof yd}};
    eval_ok(g, in, 2, outs, 2);
    expect_f32(yf,
               (const double[]){0.3651483771880768, 0.7302967543761536, 1.0954450763845687,
                                1.4605935087523072},
               4, 1e-7);
    expect_near(yd,
                (const double[]){0.3651483716701107, 0.7302967433402214, 1.0954451150103321,
                                 1.4605934866804429},
                4, 1e-14);
}

/* ------------------------------------------------------------------------ */
/* matmul                                                                     */
/* ------------------------------------------------------------------------ */

static void test_matmul_with_each_transpose_combination(void **state) {
    kf_graph *g = G;
    /* A = [[1, 2, 3], [4, 5, 6]], B = [[7, 8], [9, 10], [11, 12]];
     * A B = [[58, 64], [139, 154]]. Each combination stores the transposed
     * operand transposed, so all four give A B. */
    double a[6] = {1, 2, 3, 4, 5, 6}, at[6] = {1, 4, 2, 5, 3, 6};
    double b[6] = {7, 8, 9, 10, 11, 12}, bt[6] = {7, 9, 11, 8, 10, 12};
    kf_tensor *A = in64(g, "a", 2, DIMS(2, 3)), *AT = in64(g, "at", 2, DIMS(3, 2));
    kf_tensor *B = in64(g, "b", 2, DIMS(3, 2)), *BT = in64(g, "bt", 2, DIMS(2, 3));
    out(g, "nn", kf_matmul(g, A, B, 0, 0));
    out(g, "tn", kf_matmul(g, AT, B, 1, 0));
    out(g, "nt", kf_matmul(g, A, BT, 0, 1));
    out(g, "tt", kf_matmul(g, AT, BT, 1, 1));
    kf_binding in[4] = {
        {"a", a, sizeof a}, {"at", at, sizeof at}, {"b", b, sizeof b}, {"bt", bt, sizeof bt}};
    double got[4][4];
    kf_binding outs[4] = {
        {"nn", got[0], 32}, {"tn", got[1], 32}, {"nt", got[2], 32}, {"tt", got[3], 32}};
    eval_ok(g, in, 4, outs, 4);
    for (int i = 0; i < 4; i++) {
        print_message("  %s\n", outs[i].name);
        expect_exact(got[i], (const double[]){58, 64, 139, 154}, 4);
    }
    /* And B A (3x2 times 2x3) = [[39, 54, 69], [49, 68, 87], [59, 82, 105]]. */
}

static void test_matmul_of_a_non_square_product_in_the_other_order(void **state) {
    kf_graph *g = G;
    double a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {7, 8, 9, 10, 11, 12};
    kf_tensor *y = kf_matmul(g, in64(g, "b", 2, DIMS(3, 2)), in64(g, "a", 2, DIMS(2, 3)), 0, 0);
    out(g, "y", y);
    expect_shape(y, 2, DIMS(3, 3));
    kf_binding in[2] = {{"a", a, sizeof a}, {"b", b, sizeof b}};
    double got[9];
    eval1(g, in, 2, "y", got, sizeof got);
    expect_exact(got, (const double[]){39, 54, 69, 49, 68, 87, 59, 82, 105}, 9);
}

static void test_matmul_broadcasts_batch_dims(void **state) {
    kf_graph *g = G;
    /* a [2, 1, 2, 3] = arange(12); b [3, 3, 2] = arange(18) - 9; -> [2, 3, 2, 2]. */
    double a[12], b[18];
    for (int i = 0; i < 12; i++)
        a[i] = i;
    for (int i = 0; i < 18; i++)
        b[i] = i - 9;
    kf_tensor *y =
        kf_matmul(g, in64(g, "a", 4, DIMS(2, 1, 2, 3)), in64(g, "b", 3, DIMS(3, 3, 2)), 0, 0);
    out(g, "y", y);
    expect_shape(y, 4, DIMS(2, 3, 2, 2));
    kf_binding in[2] = {{"a", a, sizeof a}, {"b", b, sizeof b}};
    double got[24];
    eval1(g, in, 2, "y", got, sizeof got);
    expect_exact(got, (const double[]){-17,  -14,  -80,  -68,  1,   4, -8,  4, 19,  22,  64,  76,
                                       -143, -122, -206, -176, -17, 4, -26, 4, 109, 130, 154, 184},
                 24);
}

static void test_matmul_broadcasts_batch_dims_with_transposes(void **state) {
    kf_graph *g = G;
    /* The same product as above with a stored [2, 1, 3, 2] and b [3, 2, 3]. */
    double a[12], b[18];
    for (int bi = 0; bi < 2; bi++)
        for (int m = 0; m < 2; m++)
            for (int k = 0; k < 3; k++)
                a[bi * 6 + k * 2 + m] = bi * 6 + m * 3 + k;
    for (int bj = 0; bj < 3; bj++)
        for (int k = 0; k < 3; k++)
            for (int n = 0; n < 2; n++)
                b[bj * 6 + n * 3 + k] = bj * 6 + k * 2 + n - 9;
    kf_tensor *y =
        kf_matmul(g, in64(g, "a", 4, DIMS(2, 1, 3, 2)), in64(g, "b", 3, DIMS(3, 2, 3)), 1, 1);
    out(g, "y", y);
    expect_shape(y, 4, DIMS(2, 3, 2, 2));
    kf_binding in[2] = {{"a", a, sizeof a}, {"b", b, sizeof b}};
    double got[24];
    eval1(g, in, 2, "y", got, sizeof got);
    expect_exact(got, (const double[]){-17,  -14,  -80,  -68,  1,   4, -8,  4, 19,  22,  64,  76,
                                       -143, -122, -206, -176, -17, 4, -26, 4, 109, 130, 154, 184},
                 24);
}

static void test_matmul_of_f16_accumulates_in_double(void **state) {
    kf_graph *g = G;
    uint16_t a[4096], b[4096];
    for (int i = 0; i < 4096; i++) {
        a[i] = 0x3C00; /* 1 */
        b[i] = 0x3C00;
    }
    kf_tensor *y = kf_matmul(g, kf_input(g, "a", KF_DTYPE_F16, 2, DIMS(1, 4096)),
                             kf_input(g, "b", KF_DTYPE_F16, 2, DIMS(4096, 1)), 0, 0);
    out(g, "y", y);
    kf_binding in[2] = {{"a", a, sizeof a}, {"b", b, sizeof b}};
    uint16_t got;
    eval1(g, in, 2, "y", &got, 2);
    assert_int_equal(got, 0x6C00); /* 4096 */
}

static void test_matmul_of_random_f32_matches_a_naive_loop(void **state) {
    kf_graph *g = G;
    enum { M = 5, K = 7, N = 3 };
    kf_test_rng rng = kf_test_rng_make(1);
    float a[M * K], b[K * N], y[M * N], ref[M * N];
    kf_test_fill(a, KF_DTYPE_F32, M * K, &rng, -1, 1);
    kf_test_fill(b, KF_DTYPE_F32, K * N, &rng, -1, 1);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double acc = 0;
            for (int k = 0; k < K; k++)
                acc += (double)a[m * K + k] * b[k * N + n];
            ref[m * N + n] = (float)acc;
        }
    out(g, "y",
        kf_matmul(g, kf_input(g, "a", KF_DTYPE_F32, 2, DIMS(M, K)),
                  kf_input(g, "b", KF_DTYPE_F32, 2, DIMS(K, N)), 0, 0));
    kf_test_poison(y, KF_DTYPE_F32, M * N);
    kf_binding in[2] = {{"a", a, sizeof a}, {"b", b, sizeof b}};
    eval1(g, in, 2, "y", y, sizeof y);
    kf_test_assert_close(y, ref, KF_DTYPE_F32, M * N, "matmul");
}

/* ------------------------------------------------------------------------ */
/* Layout                                                                     */
/* ------------------------------------------------------------------------ */

static void test_reshape_keeps_row_major_data(void **state) {
    kf_graph *g = G;
    double x[6] = {1, 2, 3, 4, 5, 6};
    kf_tensor *y = kf_reshape(g, in64(g, "x", 2, DIMS(2, 3)), 3, DIMS(3, -1, 1));
    out(g, "y", y);
    expect_shape(y, 3, DIMS(3, 2, 1));
    kf_binding in = {"x", x, sizeof x};
    double got[6];
    eval1(g, &in, 1, "y", got, sizeof got);
    expect_exact(got, (const double[]){1, 2, 3, 4, 5, 6}, 6);
}

static void test_permute_puts_source_dim_perm_i_at_result_dim_i(void **state) {
    kf_graph *g = G;
    double x[24];
    for (int i = 0; i < 24; i++)
        x[i] = i;
    /* [2, 3, 4] with perm [2, 0, 1] -> [4, 2, 3]; y[a][b][c] = x[b][c][a]. */
    kf_tensor *y = kf_permute(g, in64(g, "x", 3, DIMS(2, 3, 4)), (const int[]){2, 0, 1});
    out(g, "y", y);
    expect_shape(y, 3, DIMS(4, 2, 3));
    kf_binding in = {"x", x, sizeof x};
    double got[24];
    eval1(g, &in, 1, "y", got, sizeof got);
    expect_exact(got, (const double[]){0, 4, 8,  12, 16, 20, 1, 5, 9,  13, 17, 21,
                                       2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23},
                 24);
}

static void test_transpose_of_a_bool_matrix(void **state) {
    kf_graph *g = G;
    uint8_t x[6] = {1, 0, 0, 1, 1, 0};
    kf_tensor *y = kf_transpose(g, kf_input(g, "x", KF_DTYPE_BOOL, 2, DIMS(2, 3)), 0, 1);
    out(g, "y", y);
    kf_binding in = {"x", x, sizeof x};
    uint8_t got[6];
    eval1(g, &in, 1, "y", got, sizeof got);
    expect_bool(got, (const uint8_t[]){1, 1, 0, 1, 0, 0}, 6);
}

/* ------------------------------------------------------------------------ */
/* Casts and storage formats                                                  */
/* ------------------------------------------------------------------------ */

static void test_cast_f32_to_bf16_and_f16_rounds_ties_to_even(void **state) {
    kf_graph *g = G;
    float bx[7] = {1.0f + 0x1p-8f,    1.0f + 0x3p-8f, 1.0f + 0x1p-8f + 0x1p-20f,
                   -(1.0f + 0x1p-8f), 0x1.fep127f,    FLT_MAX,
                   0x1p-133f}; /* the smallest bf16 subnormal, 2^-133 */
    static const uint16_t bwant[7] = {0x3F80, 0x3F82, 0x3F81, 0xBF80, 0x7F7F, 0x7F80, 0x0001};
    float hx[14] = {1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 65504.0f,
                    65519.0f,        65520.0f,        0x1p-24f,
                    0x1p-25f,        0x3p-26f,        0x1p-25f + 0x1p-30f,
                    0x3p-25f,        0x5p-25f,        0x1p-14f - 0x1p-25f,
                    -0.0f,           INFINITY};
    static const uint16_t hwant[14] = {0x3C00, 0x3C02, 0x7BFF, 0x7BFF, 0x7C00, 0x0001, 0x0000,
                                       0x0001, 0x0001, 0x0002, 0x0002, 0x0400, 0x8000, 0x7C00};
    out(g, "b", kf_cast(g, kf_input(g, "bx", KF_DTYPE_F32, 1, DIMS(7)), KF_DTYPE_BF16));
    out(g, "h", kf_cast(g, kf_input(g, "hx", KF_DTYPE_F32, 1, DIMS(14)), KF_DTYPE_F16));
    kf_binding in[2] = {{"bx", bx, sizeof bx}, {"hx", hx, sizeof hx}};
    uint16_t b[7], h[14];
    kf_binding outs[2] = {{"b", b, sizeof b}, {"h", h, sizeof h}};
    eval_ok(g, in, 2, outs, 2);
    for (int i = 0; i < 7; i++) {
        if (b[i] != bwant[i])
            print_error("bf16 %d: %a -> 0x%04x, want 0x%04x\n", i, (double)bx[i], b[i], bwant[i]);
    }
    assert_memory_equal(b, bwant, sizeof b);
    for (int i = 0; i < 14; i++) {
        if (h[i] != hwant[i])
            print_error("f16 %d: %a -> 0x%04x, want 0x%04x\n", i, (double)hx[i], h[i], hwant[i]);
    }
    assert_memory_equal(h, hwant, sizeof h);
}

static void test_cast_from_f64_rounds_once_not_through_f32(void **state) {
    /* Each value lies just above a halfway point by less than float's
     * precision: f64 -> f32 -> f16 would land on the halfway point and tie to
     * even (down); one correct rounding goes up. */
    kf_graph *g = G;
    double x[4] = {1 + 0x1p-11 + 0x1p-40, 0x1p-25 + 0x1p-60, 65520 - 0x1p-30, 1 + 0x1p-8 + 0x1p-40};
    kf_tensor *xt = in64(g, "x", 1, DIMS(4));
    out(g, "h", kf_cast(g, xt, KF_DTYPE_F16));
    out(g, "b", kf_cast(g, xt, KF_DTYPE_BF16));
    kf_binding in = {"x", x, sizeof x};
    uint16_t h[4], b[4];
    kf_binding outs[2] = {{"h", h, sizeof h}, {"b", b, sizeof b}};
    eval_ok(g, &in, 1, outs, 2);
    assert_int_equal(h[0], 0x3C01); /* 1 + 2^-10 */
    assert_int_equal(h[1], 0x0001); /* 2^-24 */
    assert_int_equal(h[2], 0x7BFF); /* 65504, not inf */
    assert_int_equal(b[3], 0x3F81); /* 1 + 2^-7 */
}

static void test_cast_to_i32_truncates_saturates_and_maps_nan_to_zero(void **state) {
    kf_graph *g = G;
    double x[10] = {2.7,      -2.7,      3e9,          -3e9,          NAN,
                    INFINITY, -INFINITY, 2147483647.9, -2147483648.9, -0.5};
    out(g, "y", kf_cast(g, in64(g, "x", 1, DIMS(10)), KF_DTYPE_I32));
    kf_binding in = {"x", x, sizeof x};
    int32_t y[10];
    eval1(g, &in, 1, "y", y, sizeof y);
    static const int32_t want[10] = {2,         -2,        INT32_MAX, INT32_MIN, 0,
                                     INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN, 0};
    assert_memory_equal(y, want, sizeof want);
}

static void test_cast_to_bool_is_not_equal_zero_and_back_is_zero_or_one(void **state) {
    kf_graph *g = G;
    double x[6] = {0, -0.0, 0.5, NAN, -INFINITY, -3};
    int32_t xi[3] = {0, -5, 1};
    kf_tensor *bt = kf_cast(g, in64(g, "x", 1, DIMS(6)), KF_DTYPE_BOOL);
    out(g, "b", bt);
    out(g, "f", kf_cast(g, bt, KF_DTYPE_F32));
    out(g, "bi", kf_cast(g, kf_input(g, "xi", KF_DTYPE_I32, 1, DIMS(3)), KF_DTYPE_BOOL));
    kf_binding in[2] = {{"x", x, sizeof x}, {"xi", xi, sizeof xi}};
    uint8_t b[6], bi[3];
    float f[6];
    kf_binding outs[3] = {{"b", b, sizeof b}, {"f", f, sizeof f}, {"bi", bi, sizeof bi}};
    eval_ok(g, in, 2, outs, 3);
    expect_bool(b, (const uint8_t[]){0, 0, 1, 1, 1, 1}, 6);
    expect_f32(f, (const double[]){0, 0, 1, 1, 1, 1}, 6, 0);
    expect_bool(bi, (const uint8_t[]){0, 1, 1}, 3);
}

static void test_cast_from_i32_to_f16_rounds_ties_to_even_and_overflows(void **state) {
    kf_graph *g = G;
    int32_t x[5] = {2049, 2051, 70000, -65519, -65520};
    out(g, "y", kf_cast(g, kf_input(g, "x", KF_DTYPE_I32, 1, DIMS(5)), KF_DTYPE_F16));
    kf_binding in = {"x", x, sizeof x};
    uint16_t y[5];
    eval1(g, &in, 1, "y", y, sizeof y);
    /* 2048, 2052, inf, -65504, -inf */
    assert_memory_equal(y, ((const uint16_t[]){0x6800, 0x6802, 0x7C00, 0xFBFF, 0xFC00}), 10);
}

static void test_i32_arithmetic_saturates(void **state) {
    kf_graph *g = G;
    int32_t a[4] = {INT32_MAX, INT32_MIN, 65536, 7}, b[4] = {1, 1, 65536, -2};
    kf_tensor *at = kf_input(g, "a", KF_DTYPE_I32, 1, DIMS(4));
    kf_tensor *bt = kf_input(g, "b", KF_DTYPE_I32, 1, DIMS(4));
    out(g, "add", kf_add(g, at, bt));
    out(g, "sub", kf_sub(g, at, bt));
    out(g, "mul", kf_mul(g, at, bt));
    out(g, "neg", kf_neg(g, at));
    out(g, "abs", kf_abs(g, at));
    kf_binding in[2] = {{"a", a, sizeof a}, {"b", b, sizeof b}};
    int32_t r[5][4];
    kf_binding outs[5] = {{"add", r[0], 16},
                          {"sub", r[1], 16},
                          {"mul", r[2], 16},
                          {"neg", r[3], 16},
                          {"abs", r[4], 16}};
    eval_ok(g, in, 2, outs, 5);
    assert_memory_equal(r[0], ((const int32_t[]){INT32_MAX, INT32_MIN + 1, 131072, 5}), 16);
    assert_memory_equal(r[1], ((const int32_t[]){INT32_MAX - 1, INT32_MIN, 0, 9}), 16);
    assert_memory_equal(r[2], ((const int32_t[]){INT32_MAX, INT32_MIN, INT32_MAX, -14}), 16);
    assert_memory_equal(r[3], ((const int32_t[]){INT32_MIN + 1, INT32_MAX, -65536, -7}), 16);
    assert_memory_equal(r[4], ((const int32_t[]){INT32_MAX, INT32_MAX, 65536, 7}), 16);
}

static void test_f16_results_round_as_they_are_stored(void **state) {
    kf_graph *g = G;
    /* 1 + 2^-11 ties down to 1; (1 + 2^-10) + 2^-11 ties up to 1 + 2^-9;
     * 60000 + 10000 overflows to inf. */
    uint16_t a[3] = {0x3C00, 0x3C01, 0x7B53}, b[3] = {0x1000, 0x1000, 0x70E2};
    out(g, "y",
        kf_add(g, kf_input(g, "a", KF_DTYPE_F16, 1, DIMS(3)),
               kf_input(g, "b", KF_DTYPE_F16, 1, DIMS(3))));
    kf_binding in[2] = {{"a", a, sizeof a}, {"b", b, sizeof b}};
    uint16_t y[3];
    eval1(g, in, 2, "y", y, sizeof y);
    assert_true(f16v(0x7B53) == 60000.0 && f16v(0x70E2) == 10000.0);
    assert_memory_equal(y, ((const uint16_t[]){0x3C00, 0x3C02, 0x7C00}), 6);
}

static void test_bf16_results_round_as_they_are_stored(void **state) {
    kf_graph *g = G;
    /* bf16 1 + 2^-8 ties down to 1; 1 + 3 * 2^-8 ties up to 1 + 2^-6. */
    uint16_t a[2] = {0x3F80, 0x3F81}, b[2] = {0x3B80, 0x3B80}; /* b = 2^-8 */
    out(g, "y",
        kf_add(g, kf_input(g, "a", KF_DTYPE_BF16, 1, DIMS(2)),
               kf_input(g, "b", KF_DTYPE_BF16, 1, DIMS(2))));
    kf_binding in[2] = {{"a", a, sizeof a}, {"b", b, sizeof b}};
    uint16_t y[2];
    eval1(g, in, 2, "y", y, sizeof y);
    assert_memory_equal(y, ((const uint16_t[]){0x3F80, 0x3F82}), 4);
}

/* clamp is min(max(x, lo), hi) with bounds rounded to the dtype first: in bf16
 * min=0.1 is 0x3DCD (0.10009765625), so 0x3DCC rises to it and 0x3DCE stays. */
static void test_clamp_rounds_its_bounds_to_the_dtype_and_passes_nan_through(void **state) {
    kf_graph *g = G;
    static const double x[6] = {-3, -0.5, 0.25, 2, NAN, -INFINITY};
    kf_tensor *xt = in64(g, "x", 1, DIMS(6));
    out(g, "both", kf_clamp(g, xt, -1, 1));
    out(g, "lo", kf_clamp(g, xt, -1, INFINITY));
    out(g, "hi", kf_clamp(g, xt, -INFINITY, 0));
    uint16_t b[3] = {0x0000, 0x3DCC, 0x3DCE};
    out(g, "b", kf_clamp(g, kf_input(g, "xb", KF_DTYPE_BF16, 1, DIMS(3)), 0.1, INFINITY));
    int32_t iv[3] = {-5, 0, 7};
    out(g, "i", kf_clamp(g, kf_input(g, "xi", KF_DTYPE_I32, 1, DIMS(3)), -2, 3));
    kf_binding in[3] = {{"x", (void *)x, sizeof x}, {"xb", b, sizeof b}, {"xi", iv, sizeof iv}};
    double both[6], lo[6], hi[6];
    uint16_t yb[3];
    int32_t yi[3];
    kf_binding outs[5] = {{"both", both, sizeof both},
                          {"lo", lo, sizeof lo},
                          {"hi", hi, sizeof hi},
                          {"b", yb, sizeof yb},
                          {"i", yi, sizeof yi}};
    eval_ok(g, in, 3, outs, 5);
    static const double wb[6] = {-1, -0.5, 0.25, 1, NAN, -1}, wl[6] = {-1, -0.5, 0.25, 2, NAN, -1},
                        wh[6] = {-3, -0.5, 0, 0, NAN, -INFINITY};
    for (int i = 0; i < 6; i++) {
        if (i == 4) {
            assert_true(isnan(both[i]) && isnan(lo[i]) && isnan(hi[i]));
            continue;
        }
        assert_true(both[i] == wb[i] && lo[i] == wl[i] && hi[i] == wh[i]);
    }
    assert_memory_equal(yb, ((const uint16_t[]){0x3DCD, 0x3DCD, 0x3DCE}), sizeof yb);
    assert_memory_equal(yi, ((const int32_t[]){-2, 0, 3}), sizeof yi);
}

static void test_constants_load_from_their_storage_format(void **state) {
    kf_graph *g = G;
    uint16_t h[2] = {0x3C00, 0xC000};  /* 1, -2 */
    uint16_t bf[2] = {0x4040, 0x3F00}; /* 3, 0.5 */
    uint8_t bl[2] = {0, 1};
    int32_t i[2] = {-7, 9};
    kf_tensor *ht = kf_constant(g, KF_DTYPE_F16, 1, DIMS(2), h);
    kf_tensor *bft = kf_constant(g, KF_DTYPE_BF16, 1, DIMS(2), bf);
    kf_tensor *blt = kf_constant(g, KF_DTYPE_BOOL, 1, DIMS(2), bl);
    kf_tensor *it = kf_constant(g, KF_DTYPE_I32, 1, DIMS(2), i);
    kf_tensor *sum = kf_add(g, kf_cast(g, ht, KF_DTYPE_F64), kf_cast(g, bft, KF_DTYPE_F64));
    sum = kf_add(g, sum, kf_cast(g, blt, KF_DTYPE_F64));
    sum = kf_add(g, sum, kf_cast(g, it, KF_DTYPE_F64));
    out(g, "y", sum);
    /* A scalar constant is rounded to its dtype: 0.1 in f16 is 0x2E66. */
    out(g, "s", kf_scalar(g, KF_DTYPE_F16, 0.1));
    double y[2];
    uint16_t s;
    kf_binding outs[2] = {{"y", y, sizeof y}, {"s", &s, 2}};
    eval_ok(g, NULL, 0, outs, 2);
    expect_exact(y, (const double[]){-3, 8.5}, 2);
    assert_int_equal(s, 0x2E66);
}

/* ------------------------------------------------------------------------ */
/* The dtype conversion functions                                             */
/* ------------------------------------------------------------------------ */

/* An f16 pattern's value from its fields, written independently of dtype.c. */
static double f16_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static void test_f16_bits_round_trip_through_float_for_all_65536_patterns(void **state) {
    (void)state;
    for (uint32_t u = 0; u < 65536; u++) {
        uint16_t h = (uint16_t)u;
        float f = kf_f16_to_f32(h);
        int e = (h >> 10) & 0x1F, m = h & 0x3FF;
        if (e == 0x1F && m != 0) {
            assert_true(isnan(f));
            uint16_t back = kf_f32_to_f16(f);
            assert_true((back & 0x7C00) == 0x7C00 && (back & 0x3FF) != 0); /* still NaN */
            assert_true(back & 0x200);                                     /* quiet */
            assert_int_equal(back & 0x8000, h & 0x8000);
            continue;
        }
        if (e == 0x1F)
            assert_true(isinf(f) && (f < 0) == (h >> 15));
        else
            assert_true((double)f == f16_value(h));
        assert_true(!!signbit(f) == !!(h & 0x8000)); /* -0 stays -0 */
        assert_int_equal(kf_f32_to_f16(f), h);
    }
}

static void test_bf16_bits_round_trip_through_float_for_all_65536_patterns(void **state) {
    (void)state;
    for (uint32_t u = 0; u < 65536; u++) {
        uint16_t h = (uint16_t)u;
        float f = kf_bf16_to_f32(h);
        uint32_t fb;
        memcpy(&fb, &f, 4);
        assert_int_equal(fb, u << 16);
        uint16_t back = kf_f32_to_bf16(f);
        if ((h & 0x7F80) == 0x7F80 && (h & 0x7F)) {
            assert_true((back & 0x7F80) == 0x7F80 && (back & 0x40)); /* quiet NaN */
            assert_int_equal(back & 0x8000, h & 0x8000);
        } else {
            assert_int_equal(back, h);
        }
    }
}

static void test_f32_to_f16_rounds_every_halfway_point_to_even(void **state) {
    (void)state;
    for (uint32_t s = 0; s < 2; s++) {
        for (uint32_t h = 0; h < 0x7C00; h++) {
            /* The next value up is h + 1; past the largest finite it is 2^16. */
            double lo = fabs(f16_value((uint16_t)h));
            double hi = h + 1 == 0x7C00 ? 65536.0 : fabs(f16_value((uint16_t)(h + 1)));
            float mid = (float)((lo + hi) / 2); /* exact: 12 significant bits */
            assert_true((double)mid == (lo + hi) / 2);
            uint16_t sign = (uint16_t)(s << 15);
            float m = s ? -mid : mid;
            uint16_t even = (uint16_t)((h & 1) ? h + 1 : h);
            assert_int_equal(kf_f32_to_f16(m), sign | even);
            float above = nextafterf(m, s ? -INFINITY : INFINITY);
            float below = nextafterf(m, 0.0f);
            assert_int_equal(kf_f32_to_f16(above), sign | (h + 1));
            assert_int_equal(kf_f32_to_f16(below), sign | h);
        }
    }
    /* Far past the range, and the smallest subnormals' neighbourhood. */
    assert_int_equal(kf_f32_to_f16(1e10f), 0x7C00);
    assert_int_equal(kf_f32_to_f16(-FLT_MAX), 0xFC00);
    assert_int_equal(kf_f32_to_f16(0x1p-30f), 0x0000);
    assert_int_equal(kf_f32_to_f16(-0x1p-149f), 0x8000);
}

static void test_f32_to_bf16_rounds_every_halfway_point_to_even(void **state) {
    (void)state;
    for (uint32_t s = 0; s < 2; s++) {
        for (uint32_t h = 0; h < 0x7F80; h++) {
            uint32_t sign = s << 31;
            /* bf16 is float's top half: the halfway point has low bits 0x8000. */
            uint32_t mid = sign | (h << 16) | 0x8000u;
            float m, up, down;
            uint32_t ub = mid + 1, db = mid - 1;
            memcpy(&m, &mid, 4);
            memcpy(&up, &ub, 4);
            memcpy(&down, &db, 4);
            uint16_t even = (uint16_t)((h & 1) ? h + 1 : h);
            assert_int_equal(kf_f32_to_bf16(m), (sign >> 16) | even);
            assert_int_equal(kf_f32_to_bf16(up), (sign >> 16) | (h + 1));
            assert_int_equal(kf_f32_to_bf16(down), (sign >> 16) | h);
        }
    }
}

static void test_ir_round_agrees_with_the_float_conversions_on_random_floats(void **state) {
    (void)state;
    kf_test_rng rng = kf_test_rng_make(2);
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)kf_test_next(&rng);
        float f;
        memcpy(&f, &u, 4);
        double h = kf_ir_round(KF_DTYPE_F16, f), b = kf_ir_round(KF_DTYPE_BF16, f);
        if (isnan(f)) {
            assert_true(isnan(h) && isnan(b));
            continue;
        }
        double hf = kf_f16_to_f32(kf_f32_to_f16(f)), bf = kf_bf16_to_f32(kf_f32_to_bf16(f));
        if (h != hf || b != bf || signbit(h) != signbit(hf) || signbit(b) != signbit(bf)) {
            print_error("%a: f16 %a vs %a, bf16 %a vs %a (KF_TEST_SEED=%llu)\n", (double)f, h, hf,
                        b, bf, (unsigned long long)kf_test_seed());
            fail();
        }
        assert_true(kf_ir_round(KF_DTYPE_F32, f) == (double)f);
    }
}

static void test_ir_round_of_doubles_is_one_correct_rounding(void **state) {
    (void)state;
    /* Just above halfway points, by less than float's precision. */
    assert_true(kf_ir_round(KF_DTYPE_F16, 1 + 0x1p-11 + 0x1p-40) == 1 + 0x1p-10);
    assert_true(kf_ir_round(KF_DTYPE_F16, 1 + 0x1p-11 - 0x1p-40) == 1);
    assert_true(kf_ir_round(KF_DTYPE_F16, 0x1p-25 + 0x1p-60) == 0x1p-24);
    assert_true(kf_ir_round(KF_DTYPE_F16, 0x1p-25) == 0);
    assert_true(signbit(kf_ir_round(KF_DTYPE_F16, -0x1p-26)));
    assert_true(kf_ir_round(KF_DTYPE_F16, 65520 - 0x1p-30) == 65504);
    assert_true(isinf(kf_ir_round(KF_DTYPE_F16, 65520)));
    assert_true(kf_ir_round(KF_DTYPE_F16, -1e300) == -INFINITY);
    assert_true(kf_ir_round(KF_DTYPE_BF16, 1 + 0x1p-8 + 0x1p-40) == 1 + 0x1p-7);
    assert_true(kf_ir_round(KF_DTYPE_BF16, 0x1p-134 + 0x1p-170) == 0x1p-133);
    assert_true(kf_ir_round(KF_DTYPE_BF16, 0x1p-134) == 0);
    assert_true(kf_ir_round(KF_DTYPE_BF16, 0x1.ffp127) == INFINITY); /* halfway past 0x1.fep127 */
    assert_true(kf_ir_round(KF_DTYPE_BF16, 0x1.fefffffp127) == 0x1.fep127);
    /* f32: C leaves out-of-range conversion undefined; the rounding is IEEE's. */
    assert_true(kf_ir_round(KF_DTYPE_F32, 0x1.ffffffp127) == INFINITY);
    assert_true(kf_ir_round(KF_DTYPE_F32, 0x1.fffffefp127) == FLT_MAX);
    assert_true(kf_ir_round(KF_DTYPE_F32, -1e39) == -INFINITY);
    assert_true(kf_ir_round(KF_DTYPE_F32, 1 + 0x1p-24 + 0x1p-50) == 1 + 0x1p-23);
    assert_true(kf_ir_round(KF_DTYPE_F32, 0x1p-150) == 0);
    assert_true(kf_ir_round(KF_DTYPE_F32, 0x1p-150 + 0x1p-200) == 0x1p-149);
    assert_true(isnan(kf_ir_round(KF_DTYPE_F32, NAN)));
    /* i32 and bool. */
    assert_true(kf_ir_round(KF_DTYPE_I32, -2.9) == -2);
    assert_true(kf_ir_round(KF_DTYPE_I32, 1e20) == 2147483647.0);
    assert_true(kf_ir_round(KF_DTYPE_I32, -1e20) == -2147483648.0);
    assert_true(kf_ir_round(KF_DTYPE_I32, NAN) == 0);
    assert_true(kf_ir_round(KF_DTYPE_BOOL, NAN) == 1);
    assert_true(kf_ir_round(KF_DTYPE_BOOL, -0.0) == 0);
    assert_true(kf_ir_round(KF_DTYPE_F64, 0.1) == 0.1);
}

/* Checks that r = kf_ir_round(d, x) is a value of the 16-bit format nearest
 * to x, ties to even, using only the format's neighbours of r: no second
 * implementation of the rounding. */
static void check_nearest(kf_dtype d, double x, uint16_t (*to)(float), float (*from)(uint16_t),
                          uint16_t inf_bits, double overflow_at, double beyond_max) {
    double r = kf_ir_round(d, x), ax = fabs(x), ar = fabs(r);
    bool ok = !!signbit(r) == !!signbit(x);
    if (isinf(r)) {
        ok = ok && ax >= overflow_at;
    } else {
        uint16_t h = (uint16_t)(to((float)ar) & 0x7FFF);
        double up = h + 1 == inf_bits ? beyond_max : from((uint16_t)(h + 1));
        double down = h ? from((uint16_t)(h - 1)) : 0.0;
        double e = fabs(ax - ar); /* exact: ax and ar are within a factor of 2, or ar = 0 */
        ok = ok && (double)from(h) == ar && e <= up - ax;
        if (h)
            ok = ok && e <= ax - down;
        if (e == up - ax || (h && e == ax - down))
            ok = ok && (h & 1) == 0; /* a tie went to the even neighbour */
    }
    if (!ok) {
        print_error("%s: kf_ir_round(%a) = %a is not the nearest (KF_TEST_SEED=%llu)\n",
                    kf_dtype_name(d), x, r, (unsigned long long)kf_test_seed());
        fail();
    }
}

static void test_ir_round_of_random_doubles_gives_the_nearest_value_ties_to_even(void **state) {
    (void)state;
    kf_test_rng rng = kf_test_rng_make(3);
    for (int i = 0; i < 100000; i++) {
        /* A random 53-bit significand at a random exponent across each
         * format's subnormals, normals and overflow; every 4th one sits
         * exactly on a halfway point or one double ulp off it. */
        double m = 1.0 + (double)(kf_test_next(&rng) >> 11) * 0x1p-53;
        int kind = (int)(kf_test_next(&rng) % 8);
        double sign = (kf_test_next(&rng) & 1) ? -1.0 : 1.0;
        int eh = (int)(kf_test_next(&rng) % 48) - 30;   /* 2^-30 .. 2^17 */
        int eb = (int)(kf_test_next(&rng) % 272) - 142; /* 2^-142 .. 2^129 */
        double xh = ldexp(m, eh), xb = ldexp(m, eb);
        if (kind < 2) {
            /* Halfway: a format value plus half its quantum (11 / 8 bits). */
            double q = ldexp(1.0, (eh < -14 ? -14 : eh) - 10);
            xh = (floor(xh / q) + 0.5) * q;
            q = ldexp(1.0, (eb < -126 ? -126 : eb) - 7);
            xb = (floor(xb / q) + 0.5) * q;
            if (kind == 1) {
                xh = nextafter(xh, (kf_test_next(&rng) & 1) ? INFINITY : 0.0);
                xb = nextafter(xb, (kf_test_next(&rng) & 1) ? INFINITY : 0.0);
            }
        }
        check_nearest(KF_DTYPE_F16, sign * xh, kf_f32_to_f16, kf_f16_to_f32, 0x7C00, 65520.0,
                      65536.0);
        check_nearest(KF_DTYPE_BF16, sign * xb, kf_f32_to_bf16, kf_bf16_to_f32, 0x7F80, 0x1.ffp127,
                      0x1p128);
    }
}

static void test_store_and_load_round_trip_every_dtype(void **state) {
    (void)state;
    unsigned char buf[16];
    kf_ir_store(buf, KF_DTYPE_I32, 1, -3e10);
    assert_true(kf_ir_load(buf, KF_DTYPE_I32, 1) == -2147483648.0);
    kf_ir_store(buf, KF_DTYPE_BOOL, 3, 0.25);
    assert_int_equal(buf[3], 1);
    assert_true(kf_ir_load(buf, KF_DTYPE_BOOL, 3) == 1);
    buf[4] = 0x80; /* a non-canonical true byte still reads as 1 */
    assert_true(kf_ir_load(buf, KF_DTYPE_BOOL, 4) == 1);
    kf_ir_store(buf, KF_DTYPE_F16, 2, 1 + 0x1p-11 + 0x1p-40);
    assert_true(kf_ir_load(buf, KF_DTYPE_F16, 2) == 1 + 0x1p-10);
    kf_ir_store(buf, KF_DTYPE_BF16, 0, -1e39);
    assert_true(kf_ir_load(buf, KF_DTYPE_BF16, 0) == -INFINITY);
    kf_ir_store(buf, KF_DTYPE_F32, 1, 0.1);
    assert_true(kf_ir_load(buf, KF_DTYPE_F32, 1) == (double)0.1f);
    kf_ir_store(buf, KF_DTYPE_F64, 1, 0.1);
    assert_true(kf_ir_load(buf, KF_DTYPE_F64, 1) == 0.1);
    kf_ir_store(buf, KF_DTYPE_F16, 0, NAN);
    assert_true(isnan(kf_ir_load(buf, KF_DTYPE_F16, 0)));
    /* i64: truncated, exact up to 2^53, saturating at +-2^63, NaN -> 0 */
    kf_ir_store(buf, KF_DTYPE_I64, 1, -12345.75);
    assert_true(kf_ir_load(buf, KF_DTYPE_I64, 1) == -12345.0);
    kf_ir_store(buf, KF_DTYPE_I64, 0, 1e30);
    assert_true(kf_ir_load(buf, KF_DTYPE_I64, 0) == 9223372036854774784.0);
    kf_ir_store(buf, KF_DTYPE_I64, 0, -1e30);
    assert_true(kf_ir_load(buf, KF_DTYPE_I64, 0) == -0x1p63);
    kf_ir_store(buf, KF_DTYPE_I64, 0, NAN);
    assert_true(kf_ir_load(buf, KF_DTYPE_I64, 0) == 0);
}

static void test_dtype_names_and_sizes(void **state) {
    (void)state;
    static const char *const names[] = {"f32", "f16", "bf16", "f64", "i32", "bool", "i64"};
    static const size_t sizes[] = {4, 2, 2, 8, 4, 1, 8};
    _Static_assert(sizeof names / sizeof names[0] == KF_DTYPE_COUNT, "every dtype");
    for (int d = 0; d < KF_DTYPE_COUNT; d++) {
        assert_string_equal(kf_dtype_name((kf_dtype)d), names[d]);
        assert_int_equal(kf_dtype_size((kf_dtype)d), sizes[d]);
    }
    assert_string_equal(kf_dtype_name(KF_DTYPE_COUNT), "?");
    assert_string_equal(kf_dtype_name((kf_dtype)-1), "?");
    assert_int_equal(kf_dtype_size(KF_DTYPE_COUNT), 0);
}

/* ------------------------------------------------------------------------ */
/* kf_graph_eval's contract                                                   */
/* ------------------------------------------------------------------------ */

/* y = x + w with x f32[2, 3] and w f32[3]. */
static void build_xw(kf_graph *g) {
    kf_tensor *x = kf_input(g, "x", KF_DTYPE_F32, 2, DIMS(2, 3));
    kf_tensor *w = kf_input(g, "w", KF_DTYPE_F32, 1, DIMS(3));
    out(g, "y", kf_add(g, x, w));
}

static float xw_x[6] = {1, 2, 3, 4, 5, 6}, xw_w[3] = {1, 1, 1};

static void expect_error(kf_graph *g, kf_status got, kf_status want, const char *const *parts) {
    if (got != want)
        print_error("status %s, want %s: %s\n", kf_status_str(got), kf_status_str(want),
                    kf_graph_error(g));
    assert_int_equal(got, want);
    const char *msg = kf_graph_error(g);
    for (; *parts; parts++) {
        if (!strstr(msg, *parts)) {
            print_error("message \"%s\" lacks \"%s\"\n", msg, *parts);
            fail();
        }
    }
    /* Eval failures are not sticky. */
    assert_int_equal(kf_graph_status(g), KF_OK);
}

static void test_eval_reports_a_missing_input_by_name(void **state) {
    kf_graph *g = G;
    build_xw(g);
    float y[6];
    kf_binding in = {"x", xw_x, sizeof xw_x};
    kf_binding o = {"y", y, sizeof y};
    kf_status s = kf_graph_eval(g, &in, 1, &o, 1);
    expect_error(g, s, KF_ERR_NOT_FOUND,
                 (const char *const[]){"'w'", "not bound", "f32[3]", "12 bytes", NULL});
}

static void test_eval_reports_an_unknown_input_name_and_lists_the_inputs(void **state) {
    kf_graph *g = G;
    build_xw(g);
    float y[6];
    kf_binding in[3] = {{"x", xw_x, sizeof xw_x}, {"w", xw_w, sizeof xw_w}, {"z", xw_w, 12}};
    kf_binding o = {"y", y, sizeof y};
    kf_status s = kf_graph_eval(g, in, 3, &o, 1);
    expect_error(g, s, KF_ERR_NOT_FOUND,
                 (const char *const[]){"'z'", "not a graph input", "x, w", NULL});
}

static void test_eval_rejects_a_wrong_input_size_giving_expected_and_got_bytes(void **state) {
    kf_graph *g = G;
    build_xw(g);
    float y[6];
    kf_binding in[2] = {{"x", xw_x, 20}, {"w", xw_w, sizeof xw_w}};
    kf_binding o = {"y", y, sizeof y};
    kf_status s = kf_graph_eval(g, in, 2, &o, 1);
    expect_error(g, s, KF_ERR_INVALID_ARGUMENT,
                 (const char *const[]){"'x'", "f32[2, 3]", "expected 24 bytes, got 20", NULL});
}

static void test_eval_rejects_null_input_data(void **state) {
    kf_graph *g = G;
    build_xw(g);
    float y[6];
    kf_binding in[2] = {{"x", xw_x, sizeof xw_x}, {"w", NULL, 12}};
    kf_binding o = {"y", y, sizeof y};
    kf_status s = kf_graph_eval(g, in, 2, &o, 1);
    expect_error(g, s, KF_ERR_INVALID_ARGUMENT, (const char *const[]){"'w'", "NULL data", NULL});
}

static void test_eval_rejects_an_input_bound_twice(void **state) {
    kf_graph *g = G;
    build_xw(g);
    float y[6];
    kf_binding in[3] = {{"x", xw_x, sizeof xw_x}, {"w", xw_w, 12}, {"x", xw_x, sizeof xw_x}};
    kf_binding o = {"y", y, sizeof y};
    kf_status s = kf_graph_eval(g, in, 3, &o, 1);
    expect_error(g, s, KF_ERR_INVALID_ARGUMENT,
                 (const char *const[]){"'x'", "bound twice", "bindings 0 and 2", NULL});
}

static void test_eval_reports_an_unknown_output_name(void **state) {
    kf_graph *g = G;
    build_xw(g);
    float y[6];
    kf_binding in[2] = {{"x", xw_x, sizeof xw_x}, {"w", xw_w, 12}};
    kf_binding o = {"out", y, sizeof y};
    kf_status s = kf_graph_eval(g, in, 2, &o, 1);
    expect_error(g, s, KF_ERR_NOT_FOUND,
                 (const char *const[]){"'out'", "not a graph output", "outputs: y", NULL});
}

static void test_eval_rejects_a_wrong_output_size_and_null_output_data(void **state) {
    kf_graph *g = G;
    build_xw(g);
    float y[6];
    kf_binding in[2] = {{"x", xw_x, sizeof xw_x}, {"w", xw_w, 12}};
    kf_binding o = {"y", y, 48};
    kf_status s = kf_graph_eval(g, in, 2, &o, 1);
    expect_error(g, s, KF_ERR_INVALID_ARGUMENT,
                 (const char *const[]){"output 'y'", "expected 24 bytes, got 48", NULL});
    o = (kf_binding){"y", NULL, 24};
    s = kf_graph_eval(g, in, 2, &o, 1);
    expect_error(g, s, KF_ERR_INVALID_ARGUMENT,
                 (const char *const[]){"output 'y'", "NULL data", NULL});
}

static void test_eval_succeeds_after_a_failed_eval(void **state) {
    kf_graph *g = G;
    build_xw(g);
    float y[6];
    kf_binding in[2] = {{"x", xw_x, sizeof xw_x}, {"w", xw_w, 12}};
    kf_binding o = {"y", y, sizeof y};
    assert_int_equal(kf_graph_eval(g, in, 1, &o, 1), KF_ERR_NOT_FOUND);
    kf_test_poison(y, KF_DTYPE_F32, 6);
    eval_ok(g, in, 2, &o, 1);
    expect_f32(y, (const double[]){2, 3, 4, 5, 6, 7}, 6, 0);
    /* No output bindings at all is allowed: it only checks and evaluates. */
    eval_ok(g, in, 2, NULL, 0);
}

static void test_eval_returns_the_graphs_sticky_builder_error(void **state) {
    kf_graph *g = G;
    build_xw(g);
    kf_tensor *bad = kf_add(g, kf_graph_input(g, 0), kf_input(g, "v", KF_DTYPE_F32, 1, DIMS(4)));
    assert_null(bad);
    kf_status sticky = kf_graph_status(g);
    assert_int_equal(sticky, KF_ERR_SHAPE);
    char before[KF_MSG_MAX];
    snprintf(before, sizeof before, "%s", kf_graph_error(g));
    float y[6];
    kf_binding in[2] = {{"x", xw_x, sizeof xw_x}, {"w", xw_w, 12}};
    kf_binding o = {"y", y, sizeof y};
    assert_int_equal(kf_graph_eval(g, in, 2, &o, 1), sticky);
    assert_string_equal(kf_graph_error(g), before);
}

static void test_eval_of_a_graph_without_outputs_fails_verification(void **state) {
    kf_graph *g = G;
    kf_input(g, "x", KF_DTYPE_F32, 1, DIMS(3));
    float x[3] = {0};
    kf_binding in = {"x", x, sizeof x};
    assert_int_equal(kf_graph_eval(g, &in, 1, NULL, 0), KF_ERR_VERIFY);
    assert_int_equal(kf_graph_status(g), KF_OK);
}

static void test_eval_rejects_null_graph_and_null_binding_arrays(void **state) {
    kf_graph *g = G;
    build_xw(g);
    assert_int_equal(kf_graph_eval(NULL, NULL, 0, NULL, 0), KF_ERR_INVALID_ARGUMENT);
    kf_status s = kf_graph_eval(g, NULL, 2, NULL, 0);
    expect_error(g, s, KF_ERR_INVALID_ARGUMENT, (const char *const[]){"inputs is NULL", NULL});
    kf_binding in[2] = {{"x", xw_x, sizeof xw_x}, {NULL, xw_w, 12}};
    s = kf_graph_eval(g, in, 2, NULL, 0);
    expect_error(g, s, KF_ERR_INVALID_ARGUMENT,
                 (const char *const[]){"input binding 1 has no name", NULL});
}

static void test_eval_computes_only_what_the_outputs_need(void **state) {
    kf_graph *g = G;
    kf_tensor *x = kf_input(g, "x", KF_DTYPE_F64, 1, DIMS(2));
    kf_tensor *unused_in = kf_input(g, "u", KF_DTYPE_F64, 1, DIMS(2));
    kf_tensor *dead = kf_exp(g, kf_add(g, x, unused_in));
    kf_tensor *y = kf_neg(g, x);
    out(g, "y", y);
    double xv[2] = {1, -2};
    const void *data[2] = {xv, NULL}; /* "u" is not needed, so it needs no data */
    kf_eval_state st;
    assert_int_equal(kf_ir_eval(g, data, &st), KF_OK);
    assert_non_null(st.values[x->id]);
    assert_non_null(st.values[y->id]);
    assert_null(st.values[unused_in->id]);
    assert_null(st.values[dead->id]);
    expect_exact(st.values[y->id], (const double[]){-1, 2}, 2);
    /* The planner's checker computes single nodes from values in the state. */
    assert_int_equal(kf_ir_eval_node(&st, dead), KF_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(kf_graph_error(g), "not computed"));
    assert_null(st.values[dead->id]);
    xv[0] = 5;
    ((double *)st.values[x->id])[0] = 5; /* recomputing overwrites in place */
    assert_int_equal(kf_ir_eval_node(&st, y), KF_OK);
    expect_exact(st.values[y->id], (const double[]){-5, 2}, 2);
    kf_ir_eval_release(&st);
    assert_null(st.values);
    kf_ir_eval_release(&st); /* twice is harmless */
}

static void test_eval_fails_cleanly_at_every_allocation(void **state) {
    (void)state;
    kf_test_alloc counter;
    kf_test_alloc_reset(&counter, 0);
    kf_options opt;
    kf_options_init(&opt);
    opt.allocator = kf_test_allocator(&counter);
    kf_ctx *ctx = NULL;
    kf_graph *g = NULL;
    assert_int_equal(kf_ctx_create(&opt, &ctx), KF_OK);
    assert_int_equal(kf_graph_create(ctx, &g), KF_OK);
    /* softmax(x @ w + b) and a reduction: several values, several ops. */
    kf_tensor *x = kf_input(g, "x", KF_DTYPE_F32, 2, DIMS(2, 3));
    kf_tensor *w = kf_input(g, "w", KF_DTYPE_F32, 2, DIMS(3, 4));
    kf_tensor *b = kf_input(g, "b", KF_DTYPE_F32, 1, DIMS(4));
    kf_tensor *h = kf_softmax(g, kf_add(g, kf_matmul(g, x, w, 0, 0), b), -1);
    assert_int_equal(kf_output(g, "h", h), KF_OK);
    assert_int_equal(kf_output(g, "s", kf_reduce_sum(g, h, 0, 0)), KF_OK);
    float xv[6] = {1, 2, 3, 4, 5, 6}, wv[12] = {0}, bv[4] = {1, 2, 3, 4};
    float hv[8], sv[4];
    kf_binding in[3] = {{"x", xv, sizeof xv}, {"w", wv, sizeof wv}, {"b", bv, sizeof bv}};
    kf_binding outs[2] = {{"h", hv, sizeof hv}, {"s", sv, sizeof sv}};

    /* A clean run counts the allocations one eval makes. */
    size_t live = counter.live_blocks, before = counter.calls;
    assert_int_equal(kf_graph_eval(g, in, 3, outs, 2), KF_OK);
    size_t n = counter.calls - before;
    assert_true(n >= 8); /* the input table, the value table, and values */
    assert_int_equal(counter.live_blocks, live);

    for (size_t i = 1; i <= n; i++) {
        counter.fail_at = counter.calls + i;
        kf_status s = kf_graph_eval(g, in, 3, outs, 2);
        if (s != KF_ERR_OUT_OF_MEMORY)
            print_error("failing allocation %zu of %zu: %s\n", i, n, kf_status_str(s));
        assert_int_equal(s, KF_ERR_OUT_OF_MEMORY);
        assert_int_equal(counter.failures, i);
        assert_int_equal(counter.live_blocks, live); /* nothing leaked */
        assert_int_equal(kf_graph_status(g), KF_OK);
        assert_non_null(strstr(kf_graph_error(g), "out of memory"));
    }
    counter.fail_at = 0;
    kf_test_poison(hv, KF_DTYPE_F32, 8);
    assert_int_equal(kf_graph_eval(g, in, 3, outs, 2), KF_OK);
    /* w = 0, so each row of h is softmax(b) and s sums two of them. */
    expect_f32(hv,
               (const double[]){0.03205860328008499, 0.08714431874203257, 0.23688281808991013,
                                0.6439142598879724, 0.03205860328008499, 0.08714431874203257,
                                0.23688281808991013, 0.6439142598879724},
               8, 1e-7);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    assert_int_equal(counter.live_blocks, 0);
    assert_int_equal(counter.live_bytes, 0);
    assert_int_equal(counter.bad_frees, 0);
}

/* ------------------------------------------------------------------------ */
/* The shared test helpers themselves                                         */
/* ------------------------------------------------------------------------ */

static void test_rel_err_fails_any_nan_and_measures_relative_distance(void **state) {
    (void)state;
    float ref[2] = {3, 4}, same[2] = {3, 4}, off[2] = {3, 4.5f}, nan[2] = {3, NAN};
    assert_true(kf_test_rel_err(same, ref, KF_DTYPE_F32, 2) == 0.0);
    assert_true(fabs(kf_test_rel_err(off, ref, KF_DTYPE_F32, 2) - 0.1) < 1e-12);
    assert_true(isinf(kf_test_rel_err(nan, ref, KF_DTYPE_F32, 2)));
    assert_true(isinf(kf_test_rel_err(ref, nan, KF_DTYPE_F32, 2)));
    uint8_t p[4];
    kf_test_poison(p, KF_DTYPE_BOOL, 4);
    assert_int_equal(p[0], 0xA5);
    uint16_t ph;
    kf_test_poison(&ph, KF_DTYPE_BF16, 1);
    assert_true(isnan(kf_bf16_to_f32(ph)));
}

static void test_failing_allocator_fails_the_nth_call_and_checks_sizes(void **state) {
    (void)state;
    kf_test_alloc a;
    kf_test_alloc_reset(&a, 2);
    kf_allocator al = kf_test_allocator(&a);
    void *p = al.alloc(al.user, 10);
    assert_non_null(p);
    assert_null(al.alloc(al.user, 10)); /* the 2nd call */
    p = al.realloc(al.user, p, 10, 20);
    assert_non_null(p);
    assert_int_equal(a.live_bytes, 20);
    al.free(al.user, p, 10); /* the wrong size */
    assert_int_equal(a.bad_frees, 1);
    assert_int_equal(a.live_blocks, 0);
    assert_int_equal(a.failures, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, planned_setup, planned_teardown)
        T(test_unary_ops_match_hand_computed_values),
        T(test_log_sqrt_and_rsqrt_match_hand_computed_values),
        T(test_clamp_rounds_its_bounds_to_the_dtype_and_passes_nan_through),
        T(test_activations_of_large_magnitudes_neither_overflow_nor_cancel),
        T(test_relu_abs_and_neg_keep_nan),
        T(test_binary_ops_match_hand_computed_values),
        T(test_max_and_min_propagate_nan_from_either_side),
        T(test_pow_matches_hand_computed_values),
        T(test_add_broadcasts_a_row_across_a_matrix),
        T(test_sub_broadcasts_a_column_across_a_matrix),
        T(test_mul_broadcasts_a_rank0_scalar),
        T(test_size_one_dims_broadcast_on_both_sides),
        T(test_rank1_broadcasts_into_rank3_with_a_size_one_middle_dim),
        T(test_rank0_with_rank0_gives_rank0),
        T(test_comparisons_give_bool_and_nan_compares_false_except_ne),
        T(test_eq_and_ne_compare_bools),
        T(test_where_selects_with_all_three_operands_broadcast),
        T(test_where_of_a_comparison_builds_a_causal_mask),
        T(test_iota_holds_the_index_along_its_axis),
        T(test_reductions_over_each_axis_of_a_rank3_tensor),
        T(test_reduce_max_propagates_nan_and_handles_all_negative_rows),
        T(test_log_softmax_matches_hand_computed_values_and_does_not_overflow),
        T(test_logsumexp_matches_hand_computed_values_and_its_edge_rows),
        T(test_argmax_takes_the_first_maximum_or_the_first_nan),
        T(test_expand_repeats_along_the_broadcast_dims),
        T(test_slice_concat_and_gather_pick_the_right_elements),
        T(test_gather_refuses_an_index_outside_the_axis),
        T(test_reduce_sum_of_i32_saturates),
        T(test_reduce_sum_of_f16_accumulates_in_double),
        T(test_softmax_matches_hand_computed_values),
        T(test_softmax_of_large_values_does_not_overflow),
        T(test_softmax_of_f64_extremes_does_not_overflow),
        T(test_softmax_along_a_leading_axis),
        T(test_layer_norm_matches_hand_computed_values),
        T(test_layer_norm_of_shifted_and_huge_values_keeps_precision),
        T(test_layer_norm_of_f64_values_near_1e300_does_not_overflow),
        T(test_layer_norm_along_a_leading_axis),
        T(test_rms_norm_matches_hand_computed_values),
        T(test_rms_norm_of_huge_values_does_not_overflow),
        T(test_matmul_with_each_transpose_combination),
        T(test_matmul_of_a_non_square_product_in_the_other_order),
        T(test_matmul_broadcasts_batch_dims),
        T(test_matmul_broadcasts_batch_dims_with_transposes),
        T(test_matmul_of_f16_accumulates_in_double),
        T(test_matmul_of_random_f32_matches_a_naive_loop),
        T(test_reshape_keeps_row_major_data),
        T(test_permute_puts_source_dim_perm_i_at_result_dim_i),
        T(test_transpose_of_a_bool_matrix),
        T(test_cast_f32_to_bf16_and_f16_rounds_ties_to_even),
        T(test_cast_from_f64_rounds_once_not_through_f32),
        T(test_cast_to_i32_truncates_saturates_and_maps_nan_to_zero),
        T(test_cast_to_bool_is_not_equal_zero_and_back_is_zero_or_one),
        T(test_cast_from_i32_to_f16_rounds_ties_to_even_and_overflows),
        T(test_i32_arithmetic_saturates),
        T(test_f16_results_round_as_they_are_stored),
        T(test_bf16_results_round_as_they_are_stored),
        T(test_constants_load_from_their_storage_format),
        T(test_f16_bits_round_trip_through_float_for_all_65536_patterns),
        T(test_bf16_bits_round_trip_through_float_for_all_65536_patterns),
        T(test_f32_to_f16_rounds_every_halfway_point_to_even),
        T(test_f32_to_bf16_rounds_every_halfway_point_to_even),
        T(test_ir_round_agrees_with_the_float_conversions_on_random_floats),
        T(test_ir_round_of_doubles_is_one_correct_rounding),
        T(test_ir_round_of_random_doubles_gives_the_nearest_value_ties_to_even),
        T(test_store_and_load_round_trip_every_dtype),
        T(test_dtype_names_and_sizes),
        T(test_eval_reports_a_missing_input_by_name),
        T(test_eval_reports_an_unknown_input_name_and_lists_the_inputs),
        T(test_eval_rejects_a_wrong_input_size_giving_expected_and_got_bytes),
        T(test_eval_rejects_null_input_data),
        T(test_eval_rejects_an_input_bound_twice),
        T(test_eval_reports_an_unknown_output_name),
        T(test_eval_rejects_a_wrong_output_size_and_null_output_data),
        T(test_eval_succeeds_after_a_failed_eval),
        T(test_eval_returns_the_graphs_sticky_builder_error),
        T(test_eval_of_a_graph_without_outputs_fails_verification),
        T(test_eval_rejects_null_graph_and_null_binding_arrays),
        T(test_eval_computes_only_what_the_outputs_need),
        T(test_eval_fails_cleanly_at_every_allocation),
        T(test_rel_err_fails_any_nan_and_measures_relative_distance),
        T(test_failing_allocator_fails_the_nth_call_and_checks_sizes),
#undef T
    };
    return kf_test_run(tests);
}
