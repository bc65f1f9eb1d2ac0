/*
 * test_parse.c -- the .kfg printer and parser (ir/print.c, frontend/parse.c):
 * the canonical form byte for byte, print -> parse -> print identity for every
 * op, dtype and attribute, the spellings the parser accepts beyond the
 * canonical form, one exact message per malformed input, every truncation of a
 * valid file, every allocation failing in turn, and the shortest-decimal
 * number formatting.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_test.h"

#include "ir/ir.h"
#include "kfuse.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                    */
/* ------------------------------------------------------------------------ */

/* The canonical text of g, malloc'ed and NUL-terminated. */
static char *print_str(const kf_graph *g) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(kf_graph_print(g, f), KF_OK);
    assert_int_equal(fclose(f), 0);
    return buf;
}

/* Parses `len` bytes of `text` from an exact-size heap copy, so ASan sees any
 * read past the end. */
static kf_status parse_n(kf_ctx *ctx, const char *text, size_t len, kf_graph **g) {
    char *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, text, len);
    kf_status st = kf_graph_parse(ctx, copy, len, g);
    free(copy);
    return st;
}

static kf_graph *parse_ok(kf_ctx *ctx, const char *text) {
    kf_graph *g = NULL;
    kf_status st = parse_n(ctx, text, strlen(text), &g);
    if (st != KF_OK)
        print_error("unexpected parse failure: %s: %s\n", kf_status_str(st), kf_graph_error(g));
    assert_int_equal(st, KF_OK);
    assert_non_null(g);
    return g;
}

/* print(parse(in)) == want, and print(parse(want)) == want. */
static void assert_prints_as(const char *in, const char *want) {
    kf_ctx *ctx;
    assert_int_equal(kf_ctx_create(NULL, &ctx), KF_OK);
    kf_graph *g = parse_ok(ctx, in);
    char *out = print_str(g);
    assert_string_equal(out, want);
    kf_graph_destroy(g);
    g = parse_ok(ctx, out);
    char *again = print_str(g);
    assert_string_equal(again, want);
    free(again);
    free(out);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
}

/* print(g) -> parse -> print gives the same bytes; returns the parsed graph. */
static kf_graph *assert_round_trip(kf_ctx *ctx, const kf_graph *g) {
    char *a = print_str(g);
    kf_graph *g2 = parse_ok(ctx, a);
    char *b = print_str(g2);
    assert_string_equal(a, b);
    free(a);
    free(b);
    return g2;
}

static char *read_example(const char *name, size_t *len) {
    const char *root = getenv("KF_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/%s", root ? root : ".", name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* ------------------------------------------------------------------------ */
/* The canonical form                                                         */
/* ------------------------------------------------------------------------ */

/* Every op, every dtype, every attribute at its default and not, constants in
 * both forms with the awkward values, unnamed tensors and renamed outputs. */
/* clang-format off */
static const char golden[] =
    "kfg 1\n"
    "x = input(f32[2, 3])\n"
    "w = input(f32[3])\n"
    "b = input(f32[3])\n"
    "w0 = input(f32[2])\n"
    "h = input(f16[2, 3])\n"
    "hb = input(bf16[4])\n"
    "d = input(f64[3, 2])\n"
    "i = input(i32[2, 3])\n"
    "m = input(bool[2, 3])\n"
    "c0 = const(f32[], 1.5)\n"
    "c1 = const(f32[2, 3], [1, -0, inf, -inf, nan, 0.1])\n"
    "c2 = const(f16[4], [0.1, 6.55e+04, 6e-08, -2.5])\n"
    "c3 = const(bf16[3], [3.14, -1e+38, 0.007])\n"
    "c4 = const(f64[3], [0.1, 1e-300, 0.30000000000000004])\n"
    "c5 = const(i32[3], [-2147483648, 0, 2147483647])\n"
    "c6 = const(bool[2, 3], [1, 0, 1, 1, 0, 0])\n"
    "c7 = const(bool[], 1)\n"
    "c8 = const(i32[2, 3], 7)\n"
    "c9 = const(f16[2], -0)\n"
    "io = iota(i32[2, 3], axis=1)\n"
    "iof = iota(f32[4, 2], axis=0)\n"
    "%21 = neg(x)\n"
    "%22 = abs(i)\n"
    "e = exp(%21)\n"
    "l = log(h)\n"
    "sq = sqrt(hb)\n"
    "rs = rsqrt(d)\n"
    "th = tanh(x)\n"
    "sg = sigmoid(x)\n"
    "re = relu(x)\n"
    "ge1 = gelu(x)\n"
    "gt1 = gelu_tanh(x)\n"
    "si = silu(x)\n"
    "ef = erf(x)\n"
    "sn = sin(h)\n"
    "cs = cos(d)\n"
    "ca = cast(h, f32)\n"
    "cb = cast(i, bool)\n"
    "a1 = add(x, w)\n"
    "a2 = sub(i, c8)\n"
    "a3 = mul(x, c0)\n"
    "a4 = div(x, c1)\n"
    "a5 = max(i, io)\n"
    "a6 = min(x, w)\n"
    "a7 = pow(x, c0)\n"
    "k1 = eq(m, cb)\n"
    "k2 = ne(x, w)\n"
    "k3 = lt(i, c8)\n"
    "k4 = le(x, w)\n"
    "k5 = gt(x, w)\n"
    "k6 = ge(i, io)\n"
    "wh = where(m, x, c1)\n"
    "r1 = reduce_sum(x, axis=1, keepdim=true)\n"
    "r2 = reduce_max(i, axis=0)\n"
    "r3 = reduce_mean(d, axis=1)\n"
    "s1 = softmax(x)\n"
    "s2 = softmax(x, axis=0)\n"
    "n1 = layer_norm(x, w, b)\n"
    "n2 = layer_norm(x, w0, w0, axis=0, eps=0.001)\n"
    "n3 = rms_norm(x, w)\n"
    "n4 = rms_norm(x, w0, axis=0, eps=1e-05)\n"
    "p1 = permute(x, [1, 0])\n"
    "mm1 = matmul(x, p1)\n"
    "mm2 = matmul(x, x, transpose_a=true)\n"
    "mm3 = matmul(x, x, transpose_b=true)\n"
    "mm4 = matmul(p1, x, transpose_a=true, transpose_b=true)\n"
    "rsh = reshape(x, [3, 2])\n"
    "rs0 = reshape(c0, [1, 1])\n"
    "%68 = reshape(rs0, [])\n"
    "pm0 = permute(%68, [])\n"
    "cl1 = clamp(x, min=-1, max=0.5)\n"
    "cl2 = clamp(i, max=3)\n"
    "cl3 = clamp(hb, min=0.1)\n"
    "rmn = reduce_min(i, axis=0, keepdim=true)\n"
    "lsm = log_softmax(x)\n"
    "lsm0 = log_softmax(d, axis=0)\n"
    "am = argmax(x, axis=1)\n"
    "am2 = argmax(i, axis=0, keepdim=true)\n"
    "ex = expand(w, [2, 3])\n"
    "ex2 = expand(m, [4, 2, 3])\n"
    "sl1 = slice(x, axis=1, start=1, stop=3)\n"
    "sl2 = slice(d, axis=0, stop=3, step=2)\n"
    "cc1 = concat(x, c1, axis=0)\n"
    "%83 = concat(i, c8, axis=1)\n"
    "cc2 = concat(%83, io, axis=1)\n"
    "ix = input(i64[2, 2])\n"
    "c10 = const(i64[3], [-9007199254740992, 0, 9007199254740992])\n"
    "ga1 = gather(x, ix, axis=1)\n"
    "ga2 = gather(hb, c5, axis=0)\n"
    "ga3 = gather(d, c10, axis=0)\n"
    "rp1 = repeat(x, axis=0, times=3)\n"
    "rp2 = repeat(hb, axis=0, times=1)\n"
    "lse = logsumexp(x, axis=1)\n"
    "lse2 = logsumexp(d, axis=0, keepdim=true)\n"
    "output y = mm1\n"
    "output ab = %22\n"
    "output e\n"
    "output e2 = e\n";
/* clang-format on */

static void test_print_of_parsed_golden_text_is_byte_identical(void **state) {
    (void)state;
    assert_prints_as(golden, golden);
}

/* concat of three or more nests (the inner one unnamed); slice bounds print
 * normalized: negative ones resolved, start 0 and step 1 left out, the
 * smallest stop that selects the same elements. */
static void test_concat_of_three_nests_and_slices_print_normalized(void **state) {
    (void)state;
    assert_prints_as("kfg 1\nx = input(f32[4, 10])\na = slice(x, axis=-1, start=-8, stop=100, "
                     "step=3)\nb = slice(x, axis=0, start=0, stop=-1, step=1)\n"
                     "c = concat(a, x, a, axis=-1)\noutput c\noutput b\n",
                     "kfg 1\nx = input(f32[4, 10])\na = slice(x, axis=1, start=2, stop=9, "
                     "step=3)\nb = slice(x, axis=0, stop=3)\n%3 = concat(a, x, axis=1)\n"
                     "c = concat(%3, a, axis=1)\noutput c\noutput b\n");
}

static void test_golden_text_uses_every_op_and_dtype(void **state) {
    (void)state;
    kf_ctx *ctx;
    assert_int_equal(kf_ctx_create(NULL, &ctx), KF_OK);
    kf_graph *g = parse_ok(ctx, golden);
    bool op_seen[KF_OP_COUNT] = {false};
    bool dt_seen[KF_DTYPE_COUNT] = {false};
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        op_seen[g->nodes[i]->op] = true;
        dt_seen[g->nodes[i]->dtype] = true;
    }
    for (int op = 0; op < KF_OP_COUNT; op++) {
        if (!op_seen[op])
            print_error("golden text lacks op %s\n", kf_op_get((kf_op)op)->name);
        assert_true(op_seen[op]);
    }
    for (int d = 0; d < KF_DTYPE_COUNT; d++)
        assert_true(dt_seen[d]);
    assert_int_equal(kf_graph_verify(g), KF_OK);
    assert_int_equal(kf_graph_output_count(g), 4);
    assert_string_equal(kf_graph_output_name(g, 1), "ab");
    assert_null(kf_tensor_name(kf_graph_output(g, 1))); /* %22 stays unnamed */
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
}

static void test_parse_keeps_constant_values_exactly(void **state) {
    (void)state;
    kf_ctx *ctx;
    assert_int_equal(kf_ctx_create(NULL, &ctx), KF_OK);
    kf_graph *g = parse_ok(ctx, "kfg 1\n"
                                "a = const(f32[6], [1, -0, inf, -inf, nan, 0.1])\n"
                                "b = const(i32[2], [-2147483648, 2147483647])\n"
                                "c = const(bool[3], [true, 0, 1])\n"
                                "d = const(f32[300, 7], 2.5)\n"
                                "e = const(f16[2], [6.55e+04, 6e-08])\n"
                                "f = const(bf16[3], [-1e+38, 1, 3.14])\n");
    const float *a = g->nodes[0]->data;
    assert_true(a[0] == 1.0f);
    assert_true(a[1] == 0.0f && signbit(a[1]));
    assert_true(isinf(a[2]) && a[2] > 0);
    assert_true(isinf(a[3]) && a[3] < 0);
    assert_true(isnan(a[4]));
    assert_true(a[5] == 0.1f);
    const int32_t *b = g->nodes[1]->data;
    assert_true(b[0] == INT32_MIN && b[1] == INT32_MAX);
    const uint8_t *c = g->nodes[2]->data;
    assert_true(c[0] == 1 && c[1] == 0 && c[2] == 1);
    const float *d = g->nodes[3]->data;
    for (int i = 0; i < 2100; i++)
        assert_true(d[i] == 2.5f);
    const uint16_t *e = g->nodes[4]->data;
    assert_int_equal(e[0], 0x7bff); /* 65504, the largest f16 */
    assert_int_equal(e[1], 0x0001); /* the smallest subnormal */
    const uint16_t *f = g->nodes[5]->data;
    assert_true(kf_bf16_to_f32(f[1]) == 1.0f);
    assert_true(kf_bf16_to_f32(f[2]) == 3.140625f);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
}

/* A graph built through the API, with what the parser never produces itself:
 * NaNs with different payloads and signs, random bit patterns in every float
 * dtype, names set after the fact. */
static void test_print_parse_print_is_identical_for_api_built_graph(void **state) {
    (void)state;
    kf_ctx *ctx;
    assert_int_equal(kf_ctx_create(NULL, &ctx), KF_OK);
    kf_graph *g;
    assert_int_equal(kf_graph_create(ctx, &g), KF_OK);
    kf_test_rng rng = kf_test_rng_make(11);

    int64_t dims[2] = {4, 8};
    float nans[4];
    uint32_t bits[4] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fc12345u};
    memcpy(nans, bits, sizeof nans);
    int64_t four = 4;
    const kf_dtype floats[] = {KF_DTYPE_F32, KF_DTYPE_F16, KF_DTYPE_BF16, KF_DTYPE_F64};
    kf_tensor *consts[4];
    kf_tensor *x = kf_input(g, "x", KF_DTYPE_F32, 2, dims);
    kf_tensor *cn = kf_constant(g, KF_DTYPE_F32, 1, &four, nans);
    for (int k = 0; k < 4; k++) {
        kf_dtype dt = floats[k];
        size_t es = kf_dtype_size(dt);
        unsigned char buf[32 * 8];
        for (size_t i = 0; i < 32 * es; i++)
            buf[i] = (unsigned char)kf_test_next(&rng);
        consts[k] = kf_constant(g, dt, 2, dims, buf);
        assert_non_null(consts[k]);
    }
    kf_tensor *s = kf_scalar(g, KF_DTYPE_F32, -0.0);
    kf_tensor *y = kf_mul(g, x, s);
    kf_tensor *z = kf_add(g, y, kf_cast(g, consts[1], KF_DTYPE_F32));
    kf_tensor *r = kf_reduce_sum(g, z, -1, 1);
    kf_tensor *sm = kf_softmax(g, z, -1);
    kf_tensor *t = kf_transpose(g, sm, 0, 1);
    assert_int_equal(kf_tensor_set_name(z, "zed"), KF_OK);
    assert_int_equal(kf_output(g, "out", r), KF_OK);
    assert_int_equal(kf_output(g, "zed", z), KF_OK);
    assert_int_equal(kf_output(g, "t", t), KF_OK);
    assert_int_equal(kf_output(g, "nans", cn), KF_OK);
    assert_int_equal(kf_graph_status(g), KF_OK);

    kf_graph *g2 = assert_round_trip(ctx, g);
    /* Every non-NaN element reads back to the same bits. */
    for (int k = 0; k < 4; k++) {
        const kf_tensor *a = consts[k], *b = g2->nodes[a->id];
        for (int64_t i = 0; i < 32; i++) {
            double va = kf_ir_load(a->data, a->dtype, i), vb = kf_ir_load(b->data, b->dtype, i);
            if (isnan(va)) {
                assert_true(isnan(vb));
                continue;
            }
            assert_memory_equal((const char *)a->data + i * kf_dtype_size(a->dtype),
                                (const char *)b->data + i * kf_dtype_size(b->dtype),
                                kf_dtype_size(a->dtype));
        }
    }
    char *text = print_str(g2);
    assert_non_null(strstr(text, "%1 = const(f32[4], nan)\n"));
    assert_non_null(strstr(text, "output zed\n"));
    assert_non_null(strstr(text, "output nans = %1\n"));
    free(text);
    kf_graph_destroy(g2);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------ */
/* What the parser accepts beyond the canonical form                          */
/* ------------------------------------------------------------------------ */

static void test_parse_accepts_comments_blank_lines_crlf_and_odd_spacing(void **state) {
    (void)state;
    assert_prints_as("\r\n"
                     "# a comment before the header\r\n"
                     "   \t\r\n"
                     "  kfg   1   # version\r\n"
                     "\n"
                     "x=input( f32 [ 2 ,3 ] )\r\n"
                     "w = input(f32[2])   \n"
                     "\t%7 = relu(x)# unnamed, renumbered\n"
                     "s = softmax(%7, axis=-1)\n"
                     "r = reduce_sum(s, keepdim=false, axis=-2)\n"
                     "k = layer_norm(x, w, w, eps=1e-5, axis=-2)\n"
                     "q = rms_norm(x, w, eps=0.000001, axis=0)\n"
                     "mm = matmul(x, x, transpose_b=true, transpose_a=false)\n"
                     "c = const(f32[2, 3], [2.0, 2, 2e0, +2, 20e-1, 0.2e1])\n"
                     "c1 = const(f32[3], [.5])\n"
                     "c2 = const(f64[2], [1.50, -.25])\n"
                     "c3 = const(bool[2], [true, false])\n"
                     "rs = reshape(x, [-1, 2])\n"
                     "io = iota(f32[2], axis=-1)\n"
                     "output   out   =   %7\r\n"
                     "output k",
                     "kfg 1\n"
                     "x = input(f32[2, 3])\n"
                     "w = input(f32[2])\n"
                     "%2 = relu(x)\n"
                     "s = softmax(%2)\n"
                     "r = reduce_sum(s, axis=0)\n"
                     "k = layer_norm(x, w, w, axis=0)\n"
                     "q = rms_norm(x, w, axis=0)\n"
                     "mm = matmul(x, x, transpose_b=true)\n"
                     "c = const(f32[2, 3], 2)\n"
                     "c1 = const(f32[3], 0.5)\n"
                     "c2 = const(f64[2], [1.5, -0.25])\n"
                     "c3 = const(bool[2], [1, 0])\n"
                     "rs = reshape(x, [3, 2])\n"
                     "io = iota(f32[2], axis=0)\n"
                     "output out = %2\n"
                     "output k\n");
}

static void test_parse_accepts_keywords_as_names(void **state) {
    (void)state;
    const char *text = "kfg 1\n"
                       "input = input(f32[2])\n"
                       "output = relu(input)\n"
                       "inf = neg(output)\n"
                       "nan = add(inf, output)\n"
                       "kfg = const(f32[], nan)\n"
                       "f32 = mul(nan, kfg)\n"
                       "true = cast(f32, bool)\n"
                       "output output\n"
                       "output kfg = f32\n"
                       "output nan = true\n";
    assert_prints_as(text, text);
}

/* A declaration allocates nothing: a 4 GiB decode KV cache is an input like
 * any other (only constant data is capped). */
static void test_parse_accepts_an_input_larger_than_1_gib(void **state) {
    (void)state;
    const char *text = "kfg 1\n"
                       "k = input(bf16[64, 32, 8192, 128])\n"
                       "q = input(bf16[64, 32, 1, 128])\n"
                       "s = matmul(q, k, transpose_b=true)\n"
                       "output s\n";
    assert_prints_as(text, text);
    kf_ctx *ctx;
    assert_int_equal(kf_ctx_create(NULL, &ctx), KF_OK);
    kf_graph *g = parse_ok(ctx, text);
    assert_int_equal(kf_tensor_numel(kf_graph_input(g, 0)), INT64_C(1) << 31);
    assert_int_equal(kf_graph_verify(g), KF_OK);
    kf_graph *g2 = assert_round_trip(ctx, g);
    kf_graph_destroy(g2);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
}

static void test_parse_of_header_only_text_gives_an_empty_graph(void **state) {
    (void)state;
    assert_prints_as("kfg 1", "kfg 1\n");
    assert_prints_as("# nothing\nkfg 1\n\n# more nothing\n", "kfg 1\n");
}

/* ------------------------------------------------------------------------ */
/* Malformed input: one exact message each                                    */
/* ------------------------------------------------------------------------ */

static void check_rejects(const char *text, size_t len, kf_status want, const char *msg) {
    kf_ctx *ctx;
    assert_int_equal(kf_ctx_create(NULL, &ctx), KF_OK);
    kf_graph *g = NULL;
    kf_status st = parse_n(ctx, text, len, &g);
    assert_non_null(g);
    const char *err = kf_graph_error(g);
    size_t n = strlen(msg);
    bool prefix = n && msg[n - 1] == '*'; /* builder messages: the prefix only */
    if (st != want || (prefix ? strncmp(err, msg, n - 1) != 0 : strcmp(err, msg) != 0))
        print_error("status %s (want %s)\n  got:  %s\n  want: %s\n", kf_status_str(st),
                    kf_status_str(want), err, msg);
    assert_int_equal(st, want);
    assert_int_equal(kf_graph_status(g), want);
    if (prefix)
        assert_memory_equal(err, msg, n - 1);
    else
        assert_string_equal(err, msg);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
}

#define H "kfg 1\n"
#define X "kfg 1\nx = input(f32[2, 3])\n"

/* clang-format off */
/* NAME, TEXT, STATUS, MESSAGE ('*' at the end: a prefix of the message). */
#define REJECT_CASES(R)                                                                        \
    R(empty_input, "", KF_ERR_PARSE, "1:1: expected the header 'kfg 1', found end of input")    \
    R(missing_header, "x = input(f32[2])\n", KF_ERR_PARSE,                                     \
      "1:1: expected the header 'kfg 1', found 'x'")                                           \
    R(other_version, "kfg 2\n", KF_ERR_PARSE, "1:5: expected format version 1, found '2'")     \
    R(version_not_integer, "kfg 1.0\n", KF_ERR_PARSE,                                          \
      "1:5: expected format version 1, found '1.0'")                                           \
    R(garbage_after_header, "kfg 1 x\n", KF_ERR_PARSE,                                         \
      "1:7: expected end of line after 'kfg 1', found 'x'")                                    \
    R(unknown_op_with_line_number, X "y = foo(x)\n", KF_ERR_PARSE,                            \
      "3:5: expected an op name, found 'foo'")                                                 \
    R(unknown_dtype, H "x = input(f8[2])\n", KF_ERR_PARSE,                                     \
      "2:11: expected a dtype (f32, f16, bf16, f64, i32, bool or i64), found 'f8'")                 \
    R(unknown_cast_dtype, X "y = cast(x, int)\n", KF_ERR_PARSE,                               \
      "3:13: expected a dtype (f32, f16, bf16, f64, i32, bool or i64), found 'int'")                \
    R(undefined_name, X "y = neg(z)\n", KF_ERR_PARSE,                                         \
      "3:9: expected a name defined above, found 'z'")                                         \
    R(use_before_definition, H "y = neg(x)\nx = input(f32[2])\n", KF_ERR_PARSE,               \
      "2:9: expected a name defined above, found 'x'")                                         \
    R(redefinition, X "x = neg(x)\n", KF_ERR_PARSE,                                           \
      "3:1: expected a new name, found 'x' (defined at 2:1)")                                  \
    R(percent_redefinition, X "%1 = neg(x)\n%1 = abs(x)\n", KF_ERR_PARSE,                     \
      "4:1: expected a new name, found '%1' (defined at 3:1)")                                 \
    R(unknown_attribute, X "y = softmax(x, axes=0)\n", KF_ERR_PARSE,                          \
      "3:16: expected an attribute of softmax (axis), found 'axes'")                           \
    R(attribute_the_op_does_not_take, X "y = reduce_sum(x, axis=0, eps=1)\n", KF_ERR_PARSE,   \
      "3:27: expected an attribute of reduce_sum (axis, keepdim), found 'eps'")                \
    R(attribute_on_op_without_attributes, X "y = neg(x, axis=0)\n", KF_ERR_PARSE,             \
      "3:10: expected ')' after the arguments of neg, found ','")                              \
    R(duplicate_attribute, X "y = reduce_sum(x, axis=0, axis=1)\n", KF_ERR_PARSE,             \
      "3:27: expected each attribute of reduce_sum at most once, found 'axis'")                \
    R(missing_required_axis, X "y = reduce_max(x)\n", KF_ERR_PARSE,                           \
      "3:17: expected ',' and attribute axis=... of reduce_max, found ')'")                    \
    R(missing_iota_axis, H "y = iota(i32[2])\n", KF_ERR_PARSE,                                 \
      "2:16: expected ',' and attribute axis=... of iota, found ')'")                          \
    R(too_few_operands, X "y = add(x)\n", KF_ERR_PARSE,                                       \
      "3:10: expected ',' and operand 2 of add, found ')'")                                    \
    R(too_many_operands, X "y = add(x, x, x)\n", KF_ERR_PARSE,                                \
      "3:13: expected ')' after the arguments of add, found ','")                              \
    R(missing_comma_between_operands, X "y = matmul(x x)\n", KF_ERR_PARSE,                    \
      "3:14: expected ',' and operand 2 of matmul, found 'x'")                                 \
    R(attribute_value_not_bool, X "y = matmul(x, x, transpose_a=1)\n", KF_ERR_PARSE,          \
      "3:30: expected true or false, found '1'")                                               \
    R(axis_not_integer, X "y = softmax(x, axis=1.0)\n", KF_ERR_PARSE,                         \
      "3:21: expected an axis (an integer), found '1.0'")                                      \
    R(axis_out_of_int_range, X "y = softmax(x, axis=4294967296)\n", KF_ERR_PARSE,             \
      "3:21: expected an axis (an integer), found '4294967296'")                               \
    R(eps_not_a_number, X "y = layer_norm(x, x, x, eps=small)\n", KF_ERR_PARSE,               \
      "3:29: expected a number for eps, found 'small'")                                        \
    R(missing_equals_after_attribute, X "y = softmax(x, axis 0)\n", KF_ERR_PARSE,             \
      "3:21: expected '=' after the attribute name, found '0'")                                \
    R(zero_dim, H "x = input(f32[0])\n", KF_ERR_PARSE,                                         \
      "2:15: expected a dim (a positive integer), found '0'")                                  \
    R(negative_dim, H "x = input(f32[-2])\n", KF_ERR_PARSE,                                    \
      "2:15: expected a dim (a positive integer), found '-2'")                                 \
    R(dim_too_large_for_int64, H "x = input(f32[99999999999999999999])\n", KF_ERR_PARSE,       \
      "2:15: expected a dim (a positive integer), found '99999999999999999999'")               \
    R(element_count_overflows_int64, H "x = iota(f32[4294967296, 4294967296], axis=0)\n",      \
      KF_ERR_PARSE,                                                                            \
      "2:10: expected a type whose element count fits in 64 bits, found "                      \
      "'f32[4294967296, 4294967296]'")                                                         \
    R(input_element_count_overflows_int64, H "x = input(bf16[4294967296, 4294967296])\n",      \
      KF_ERR_PARSE,                                                                            \
      "2:11: expected a type whose element count fits in 64 bits, found "                      \
      "'bf16[4294967296, 4294967296]'")                                                        \
    R(input_over_the_element_limit, H "x = input(f32[65536, 65536, 65536, 2])\n", KF_ERR_SHAPE, \
      "2:5: input: the shape has more than 2^48 elements")                                     \
    R(const_larger_than_cap, H "x = const(bf16[1024, 1024, 1024], 0)\n", KF_ERR_PARSE,         \
      "2:11: expected a const of at most 1024 MiB (make larger data a graph input), found "    \
      "'bf16[1024, 1024, 1024]'")                                                              \
    R(keepdim_not_bool, X "y = reduce_sum(x, axis=0, keepdim=7)\n", KF_ERR_PARSE,              \
      "3:35: expected true or false, found '7'")                                               \
    R(transpose_b_not_bool, X "y = matmul(x, x, transpose_b=-1)\n", KF_ERR_PARSE,              \
      "3:30: expected true or false, found '-1'")                                              \
    R(more_than_eight_dims, H "x = input(f32[1, 1, 1, 1, 1, 1, 1, 1, 1])\n", KF_ERR_PARSE,     \
      "2:39: expected ']' after at most 8 entries, found '1'")                                 \
    R(dims_missing_bracket, H "x = input(f32)\n", KF_ERR_PARSE, "2:14: expected '[', found ')'") \
    R(dims_missing_comma, H "x = input(f32[2 3])\n", KF_ERR_PARSE,                             \
      "2:17: expected ',' or ']', found '3'")                                                  \
    R(trailing_comma_in_dims, H "x = input(f32[2,])\n", KF_ERR_PARSE,                          \
      "2:17: expected a dim (a positive integer), found ']'")                                  \
    R(const_too_few_values, H "c = const(f32[3], [1, 2])\n", KF_ERR_PARSE,                     \
      "2:24: expected 3 values (or one, to fill the shape), found 2")                          \
    R(const_too_many_values, H "c = const(f32[2], [1, 2, 3])\n", KF_ERR_PARSE,                 \
      "2:26: expected ']' after 2 values, found '3'")                                          \
    R(const_empty_list, H "c = const(f32[2], [])\n", KF_ERR_PARSE,                             \
      "2:20: expected a value of f32 (a number, inf, -inf or nan), found ']'")                 \
    R(const_missing_value, H "c = const(f32[2])\n", KF_ERR_PARSE,                              \
      "2:17: expected ',' and the constant's value, found ')'")                                \
    R(i32_value_not_integer, H "c = const(i32[], 1.5)\n", KF_ERR_PARSE,                        \
      "2:18: expected an i32 value (an integer from -2147483648 to 2147483647), found '1.5'")  \
    R(i32_value_out_of_range, H "c = const(i32[], 2147483648)\n", KF_ERR_PARSE,                \
      "2:18: expected an i32 value (an integer from -2147483648 to 2147483647), found "        \
      "'2147483648'")                                                                          \
    R(bool_value_not_zero_or_one, H "c = const(bool[], 2)\n", KF_ERR_PARSE,                    \
      "2:19: expected a bool value (0, 1, true or false), found '2'")                          \
    R(f16_value_out_of_range, H "c = const(f16[], 70000)\n", KF_ERR_PARSE,                     \
      "2:18: expected a value within the range of f16, found '70000'")                         \
    R(f64_value_out_of_range, H "c = const(f64[], 1e999)\n", KF_ERR_PARSE,                     \
      "2:18: expected a value of f64 (a number, inf, -inf or nan), found '1e999'")             \
    R(hex_number, H "c = const(f32[], 0x10)\n", KF_ERR_PARSE,                                  \
      "2:18: expected a value of f32 (a number, inf, -inf or nan), found '0x10'")              \
    R(malformed_exponent, H "c = const(f32[], 1e+)\n", KF_ERR_PARSE,                           \
      "2:18: expected a value of f32 (a number, inf, -inf or nan), found '1e+'")               \
    R(number_too_long, H "c = const(f32[], 1.000000000000000000000000000000000000000000000000" \
                       "00000000000000000000000000000000000000000000000000000000000000000000000" \
                       "0000000000)\n",                                                        \
      KF_ERR_PARSE,                                                                            \
      "2:18: expected a value of f32 (a number, inf, -inf or nan), found "                     \
      "'1.000000000000000000000000000000...'")                                                 \
    R(infinity_spelled_out, H "c = const(f32[], infinity)\n", KF_ERR_PARSE,                    \
      "2:18: expected a value of f32 (a number, inf, -inf or nan), found 'infinity'")          \
    R(trailing_garbage, X "y = neg(x) z\n", KF_ERR_PARSE,                                     \
      "3:12: expected end of line after ')', found 'z'")                                       \
    R(two_statements_on_a_line, X "y = neg(x) z = neg(x)\n", KF_ERR_PARSE,                    \
      "3:12: expected end of line after ')', found 'z'")                                       \
    R(missing_close_paren, X "y = neg(x\n", KF_ERR_PARSE,                                     \
      "3:10: expected ')' after the arguments of neg, found end of line")                      \
    R(missing_equals, X "y neg(x)\n", KF_ERR_PARSE, "3:3: expected '=', found 'neg'")         \
    R(missing_open_paren, X "y = neg x\n", KF_ERR_PARSE, "3:9: expected '(', found 'x'")       \
    R(statement_starts_with_number, X "1 = neg(x)\n", KF_ERR_PARSE,                           \
      "3:1: expected a name or 'output', found '1'")                                           \
    R(name_longer_than_64, H "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
                           " = input(f32[1])\n",                                               \
      KF_ERR_PARSE,                                                                            \
      "2:1: expected a name of at most 64 characters, found "                                  \
      "'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...'")                                                 \
    R(percent_name_for_input, H "%0 = input(f32[2])\n", KF_ERR_PARSE,                          \
      "2:1: expected an identifier naming the input, found '%0'")                              \
    R(bad_percent_name, X "y = neg(%x)\n", KF_ERR_PARSE,                                      \
      "3:9: expected operand 1 of neg (a name), found '%x'")                                   \
    R(embedded_nul_byte, X "y = neg(x)\0\n", KF_ERR_PARSE,                                    \
      "3:11: expected end of line after ')', found '\\x00'")                                   \
    R(nul_byte_in_comment, X "# a \0 comment\n", KF_ERR_PARSE,                                \
      "3:5: expected a name or 'output', found '\\x00'")                                       \
    R(lone_carriage_return, X "y = neg(x)\r", KF_ERR_PARSE,                                   \
      "3:11: expected end of line after ')', found '\\x0d'")                                   \
    R(non_ascii_byte, X "y = neg(x) \xc3\xa9\n", KF_ERR_PARSE,                                \
      "3:12: expected end of line after ')', found '\\xc3'")                                   \
    R(quote_in_token_is_escaped, X "y = neg(x) 'q\n", KF_ERR_PARSE,                           \
      "3:12: expected end of line after ')', found '\\''")                                     \
    R(output_of_undefined_name, X "output z\n", KF_ERR_PARSE,                                 \
      "3:8: expected a name defined above, found 'z'")                                         \
    R(output_without_name, X "output\n", KF_ERR_PARSE,                                        \
      "3:7: expected an output name, found end of line")                                       \
    R(output_named_by_percent, X "%1 = neg(x)\noutput %1\n", KF_ERR_PARSE,                    \
      "4:8: expected an identifier of at most 64 characters for the output, found '%1' "       \
      "(write 'output NAME = %1')")                                                            \
    R(output_renamed_to_percent, X "%1 = neg(x)\noutput %2 = %1\n", KF_ERR_PARSE,             \
      "4:8: expected an identifier of at most 64 characters for the output, found '%2'")       \
    R(garbage_after_output, X "output x y\n", KF_ERR_PARSE,                                   \
      "3:10: expected end of line after the output, found 'y'")                                \
    R(permutation_of_wrong_length, X "y = permute(x, [0])\n", KF_ERR_PARSE,                   \
      "3:16: expected a permutation of the 2 axes of operand x f32[2, 3], found 1 entries")    \
    R(reshape_zero_dim, X "y = reshape(x, [0, 6])\n", KF_ERR_PARSE,                           \
      "3:17: expected a dim (a positive integer or -1), found '0'")                            \
    R(reshape_dims_overflow, X "y = reshape(x, [4294967296, 4294967296, -1])\n", KF_ERR_PARSE, \
      "3:16: expected dims whose product fits in 64 bits, found '['")                          \
    R(builder_shape_error_at_statement,                                                        \
      H "a = input(f32[8, 256])\nb = input(f32[3])\nhb = add(a, b)\n", KF_ERR_SHAPE,           \
      "4:6: add: *")                                                                           \
    R(builder_axis_error_at_statement, X "y = softmax(x, axis=2)\n", KF_ERR_AXIS,             \
      "3:5: softmax: *")                                                                       \
    R(builder_dtype_error_at_statement, X "y = exp(%0)\n%0 = cast(x, i32)\n", KF_ERR_PARSE,   \
      "3:9: expected a name defined above, found '%0'")                                        \
    R(builder_dtype_error, X "i = cast(x, i32)\ny = exp(i)\n", KF_ERR_DTYPE, "4:5: exp: *")  \
    R(builder_reshape_size_error, X "y = reshape(x, [4, 2])\n", KF_ERR_SHAPE,                 \
      "3:5: reshape: *")                                                                       \
    R(builder_bad_permutation, X "y = permute(x, [0, 0])\n", KF_ERR_AXIS, "3:5: permute: *") \
    R(builder_negative_eps, X "w = input(f32[3])\ny = rms_norm(x, w, eps=-1)\n",              \
      KF_ERR_INVALID_ARGUMENT, "4:5: rms_norm: *")                                             \
    R(clamp_without_bounds, X "y = clamp(x)\n", KF_ERR_PARSE,                                 \
      "3:12: expected ',' and attribute min=... or max=... of clamp, found ')'")               \
    R(clamp_bound_not_a_number, X "y = clamp(x, min=low)\n", KF_ERR_PARSE,                    \
      "3:18: expected a number (or inf, -inf) for a bound of clamp, found 'low'")              \
    R(builder_expand_of_a_wide_dim, X "y = expand(x, [3, 3])\n", KF_ERR_SHAPE,                \
      "3:5: expand: dim 0 of operand x f32[2, 3] is 2, which cannot become 3 *")               \
    R(expand_zero_dim, X "y = expand(x, [0, 3])\n", KF_ERR_PARSE,                             \
      "3:16: expected a dim (a positive integer), found '0'")                                  \
    R(slice_without_axis, X "y = slice(x, start=1)\n", KF_ERR_PARSE,                          \
      "3:21: expected ',' and attribute axis=... of slice, found ')'")                          \
    R(slice_step_not_an_integer, X "y = slice(x, axis=1, step=1.5)\n", KF_ERR_PARSE,          \
      "3:27: expected an integer, found '1.5'")                                                \
    R(builder_empty_slice, X "y = slice(x, axis=1, start=2, stop=1)\n", KF_ERR_SHAPE,         \
      "3:5: slice: start 2, stop 1 select nothing along axis 1 of operand x f32[2, 3] *")       \
    R(builder_concat_of_mismatched_dims, X "z = input(f32[3, 3])\ny = concat(x, z, axis=1)\n", \
      KF_ERR_SHAPE, "4:5: concat: dim 0 of operand b f32[3, 3] is 3, of operand a f32[2, 3] 2; every "   \
      "dim but axis 1 must agree") \
    R(concat_of_one_operand, X "y = concat(x, axis=0)\n", KF_ERR_PARSE,                       \
      "3:15: expected a name defined above, found 'axis'")                  \
    R(builder_gather_float_index, X "y = gather(x, x, axis=0)\n", KF_ERR_DTYPE,               \
      "3:5: gather: operand idx f32[2, 3] has dtype f32; gather takes i32, i64")               \
    R(i64_const_beyond_2_53, X "c = const(i64[], 9007199254740993)\n", KF_ERR_PARSE,         \
      "3:18: expected an i64 value (an integer of magnitude at most 2^53), found "           \
      "'9007199254740993'")           \
    R(builder_inverted_clamp, X "y = clamp(x, min=2, max=1)\n", KF_ERR_INVALID_ARGUMENT,      \
      "3:5: clamp: min 2 is greater than max 1")                                               \
    R(duplicate_output_name, X "output x\noutput x\n", KF_ERR_INVALID_ARGUMENT, "4:8: output: *")
/* clang-format on */

#define R_FUNC(NAME, TEXT, STATUS, MSG)                                                            \
    static void test_parse_rejects_##NAME(void **state) {                                          \
        (void)state;                                                                               \
        static const char text[] = TEXT;                                                           \
        check_rejects(text, sizeof text - 1, STATUS, MSG);                                         \
    }
REJECT_CASES(R_FUNC)
#undef R_FUNC

/* ------------------------------------------------------------------------ */
/* Robustness                                                                 */
/* ------------------------------------------------------------------------ */

static void check_every_truncation(const char *text, size_t len) {
    kf_ctx *ctx;
    assert_int_equal(kf_ctx_create(NULL, &ctx), KF_OK);
    for (size_t n = 0; n <= len; n++) {
        kf_graph *g = NULL;
        kf_status st = parse_n(ctx, text, n, &g);
        assert_non_null(g);
        assert_true(st >= KF_OK && st < KF_STATUS_COUNT);
        assert_int_equal(kf_graph_status(g), st);
        if (st != KF_OK) {
            /* A message that starts with a position. */
            unsigned line, col;
            assert_int_equal(sscanf(kf_graph_error(g), "%u:%u:", &line, &col), 2);
            assert_true(line >= 1 && col >= 1);
        } else {
            char *s = print_str(g);
            kf_graph *g2 = parse_ok(ctx, s);
            char *s2 = print_str(g2);
            assert_string_equal(s, s2);
            free(s);
            free(s2);
            kf_graph_destroy(g2);
        }
        kf_graph_destroy(g);
    }
    kf_ctx_destroy(ctx);
}

static void test_parse_survives_every_truncation_of_a_valid_file(void **state) {
    (void)state;
    check_every_truncation(golden, sizeof golden - 1);
    size_t len;
    char *block = read_example("block.kfg", &len);
    if (block) {
        check_every_truncation(block, len);
        free(block);
    }
}

/* A small graph for when examples/block.kfg is not there. */
static const char fallback_block[] = "kfg 1\n"
                                     "x = input(f32[4, 8])\n"
                                     "w = input(f32[8])\n"
                                     "h = layer_norm(x, w, w)\n"
                                     "c = const(f32[4, 4], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, "
                                     "13, 14, 15, 16])\n"
                                     "s = softmax(c)\n"
                                     "y = matmul(s, h)\n"
                                     "output y\n";

static void test_parse_fails_cleanly_at_every_allocation(void **state) {
    (void)state;
    size_t len;
    char *text = read_example("block.kfg", &len);
    if (!text) {
        len = sizeof fallback_block - 1;
        text = malloc(len);
        assert_non_null(text);
        memcpy(text, fallback_block, len);
    }
    kf_test_alloc a;
    size_t fails = 0;
    for (size_t n = 1;; n++) {
        kf_test_alloc_reset(&a, n);
        kf_options o;
        kf_options_init(&o);
        o.allocator = kf_test_allocator(&a);
        kf_ctx *ctx = NULL;
        kf_status st = kf_ctx_create(&o, &ctx);
        if (st != KF_OK) {
            assert_int_equal(st, KF_ERR_OUT_OF_MEMORY);
            assert_int_equal(a.live_blocks, 0);
            fails++;
            continue;
        }
        kf_graph *g = NULL;
        st = kf_graph_parse(ctx, text, len, &g);
        bool failed = a.failures > 0;
        if (failed) {
            assert_int_equal(st, KF_ERR_OUT_OF_MEMORY);
            if (g)
                assert_int_equal(kf_graph_status(g), KF_ERR_OUT_OF_MEMORY);
            fails++;
        } else {
            assert_int_equal(st, KF_OK);
        }
        kf_graph_destroy(g);
        kf_ctx_destroy(ctx);
        assert_int_equal(a.live_blocks, 0);
        assert_int_equal(a.live_bytes, 0);
        assert_int_equal(a.bad_frees, 0);
        if (!failed)
            break;
        assert_true(n < 100000);
    }
    assert_true(fails > 5);
    free(text);
}

/* Every file of the fuzz corpus (seeds and past findings) parses to a graph
 * that round-trips, or fails with a positioned message. */
static void test_parse_handles_every_fuzz_corpus_file(void **state) {
    (void)state;
    const char *root = getenv("KF_SOURCE_DIR");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus", root ? root : ".");
    DIR *d = opendir(dir);
    if (!d) {
        print_message("no corpus at %s; skipped\n", dir);
        skip();
    }
    kf_ctx *ctx;
    assert_int_equal(kf_ctx_create(NULL, &ctx), KF_OK);
    size_t files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        kf_graph *g = NULL;
        kf_status st = parse_n(ctx, buf, n, &g);
        assert_non_null(g);
        if (st == KF_OK) {
            kf_graph_destroy(assert_round_trip(ctx, g));
        } else {
            unsigned line, col;
            if (sscanf(kf_graph_error(g), "%u:%u:", &line, &col) != 2)
                print_error("%s: %s\n", e->d_name, kf_graph_error(g));
            assert_int_equal(sscanf(kf_graph_error(g), "%u:%u:", &line, &col), 2);
        }
        kf_graph_destroy(g);
        files++;
    }
    closedir(d);
    kf_ctx_destroy(ctx);
    assert_true(files > 0);
}

static void test_parse_and_print_reject_null_arguments(void **state) {
    (void)state;
    kf_ctx *ctx;
    assert_int_equal(kf_ctx_create(NULL, &ctx), KF_OK);
    kf_graph *g = (kf_graph *)1;
    assert_int_equal(kf_graph_parse(NULL, "kfg 1\n", 6, &g), KF_ERR_INVALID_ARGUMENT);
    assert_null(g);
    g = (kf_graph *)1;
    assert_int_equal(kf_graph_parse(ctx, NULL, 6, &g), KF_ERR_INVALID_ARGUMENT);
    assert_null(g);
    assert_int_equal(kf_graph_parse(ctx, "kfg 1\n", 6, NULL), KF_ERR_INVALID_ARGUMENT);
    g = parse_ok(ctx, "kfg 1\n");
    assert_int_equal(kf_graph_print(NULL, stdout), KF_ERR_INVALID_ARGUMENT);
    assert_int_equal(kf_graph_print(g, NULL), KF_ERR_INVALID_ARGUMENT);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
}

static void test_print_reports_a_stream_error(void **state) {
    (void)state;
    kf_ctx *ctx;
    assert_int_equal(kf_ctx_create(NULL, &ctx), KF_OK);
    kf_graph *g = parse_ok(ctx, golden);
    FILE *f = fopen("/dev/null", "r"); /* read-only: every write fails */
    assert_non_null(f);
    assert_int_equal(kf_graph_print(g, f), KF_ERR_IO);
    fclose(f);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
}

/* ------------------------------------------------------------------------ */
/* Numbers                                                                    */
/* ------------------------------------------------------------------------ */

static const char *fmt(double v, kf_dtype d) {
    static char buf[64];
    int n = kf_ir_format_number(buf, sizeof buf, v, d);
    assert_true(n > 0 && (size_t)n < sizeof buf);
    return buf;
}

static void test_format_number_writes_the_shortest_spelling(void **state) {
    (void)state;
    assert_string_equal(fmt(0.1f, KF_DTYPE_F32), "0.1");
    assert_string_equal(fmt(0.1, KF_DTYPE_F64), "0.1");
    assert_string_equal(fmt((double)0.1f, KF_DTYPE_F64), "0.10000000149011612");
    assert_string_equal(fmt(1e-05, KF_DTYPE_F64), "1e-05");
    assert_string_equal(fmt(16777216.0, KF_DTYPE_F32), "16777216");
    assert_string_equal(fmt(65504.0, KF_DTYPE_F16), "6.55e+04");
    assert_string_equal(fmt(3.140625, KF_DTYPE_BF16), "3.14");
    assert_string_equal(fmt(-0.0, KF_DTYPE_F32), "-0");
    assert_string_equal(fmt(0.0, KF_DTYPE_F16), "0");
    assert_string_equal(fmt(INFINITY, KF_DTYPE_BF16), "inf");
    assert_string_equal(fmt(-INFINITY, KF_DTYPE_F64), "-inf");
    assert_string_equal(fmt(NAN, KF_DTYPE_F32), "nan");
    assert_string_equal(fmt(-NAN, KF_DTYPE_F64), "nan");
    assert_string_equal(fmt(-2147483648.0, KF_DTYPE_I32), "-2147483648");
    assert_string_equal(fmt(1.0, KF_DTYPE_BOOL), "1");
    assert_string_equal(fmt(0.0, KF_DTYPE_BOOL), "0");
    assert_string_equal(fmt(0x1p-1074, KF_DTYPE_F64), "5e-324");
    assert_string_equal(fmt(1.7976931348623157e308, KF_DTYPE_F64), "1.7976931348623157e+308");
    char small[4];
    assert_int_equal(kf_ir_format_number(small, sizeof small, 123456.0, KF_DTYPE_I32), 6);
    assert_string_equal(small, "123");
}

static void assert_reads_back(double v, kf_dtype d) {
    const char *s = fmt(v, d);
    double r = kf_ir_round(d, strtod(s, NULL));
    if (!(r == v && signbit(r) == signbit(v)))
        print_error("%s %.17g printed as %s reads back as %.17g\n", kf_dtype_name(d), v, s, r);
    assert_true(r == v && signbit(r) == signbit(v));
    /* and no shorter %g spelling would do */
    int digits = 0; /* significant digits */
    bool leading = true;
    for (const char *c = s; *c && *c != 'e'; c++) {
        if (*c == '0' && leading)
            continue;
        if (*c >= '1' && *c <= '9')
            leading = false;
        digits += !leading && *c >= '0' && *c <= '9';
    }
    if (digits > 1) {
        char shorter[400];
        snprintf(shorter, sizeof shorter, "%.*g", digits - 1, v);
        double rs = kf_ir_round(d, strtod(shorter, NULL));
        assert_false(rs == v && signbit(rs) == signbit(v));
    }
}

static void test_format_number_reads_back_for_every_f16_and_bf16_value(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 65536; b++) {
        double h = kf_f16_to_f32((uint16_t)b), bf = kf_bf16_to_f32((uint16_t)b);
        if (!isnan(h) && !isinf(h))
            assert_reads_back(h, KF_DTYPE_F16);
        if (!isnan(bf) && !isinf(bf))
            assert_reads_back(bf, KF_DTYPE_BF16);
    }
}

static void test_format_number_reads_back_for_random_f32_and_f64_values(void **state) {
    (void)state;
    kf_test_rng rng = kf_test_rng_make(7);
    for (int i = 0; i < 200000; i++) {
        uint64_t bits = kf_test_next(&rng);
        uint32_t b32 = (uint32_t)bits;
        float f;
        double d;
        memcpy(&f, &b32, sizeof f);
        memcpy(&d, &bits, sizeof d);
        if (isfinite(f))
            assert_reads_back(f, KF_DTYPE_F32);
        if (isfinite(d))
            assert_reads_back(d, KF_DTYPE_F64);
    }
}

int main(void) {
#define R_ENTRY(NAME, TEXT, STATUS, MSG) cmocka_unit_test(test_parse_rejects_##NAME),
    /* clang-format off */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_print_of_parsed_golden_text_is_byte_identical),
        cmocka_unit_test(test_concat_of_three_nests_and_slices_print_normalized),
        cmocka_unit_test(test_golden_text_uses_every_op_and_dtype),
        cmocka_unit_test(test_parse_accepts_an_input_larger_than_1_gib),
        cmocka_unit_test(test_parse_keeps_constant_values_exactly),
        cmocka_unit_test(test_print_parse_print_is_identical_for_api_built_graph),
        cmocka_unit_test(test_parse_accepts_comments_blank_lines_crlf_and_odd_spacing),
        cmocka_unit_test(test_parse_accepts_keywords_as_names),
        cmocka_unit_test(test_parse_of_header_only_text_gives_an_empty_graph),
        REJECT_CASES(R_ENTRY)
        cmocka_unit_test(test_parse_survives_every_truncation_of_a_valid_file),
        cmocka_unit_test(test_parse_fails_cleanly_at_every_allocation),
        cmocka_unit_test(test_parse_handles_every_fuzz_corpus_file),
        cmocka_unit_test(test_parse_and_print_reject_null_arguments),
        cmocka_unit_test(test_print_reports_a_stream_error),
        cmocka_unit_test(test_format_number_writes_the_shortest_spelling),
        cmocka_unit_test(test_format_number_reads_back_for_every_f16_and_bf16_value),
        cmocka_unit_test(test_format_number_reads_back_for_random_f32_and_f64_values),
    };
    /* clang-format on */
#undef R_ENTRY
    return kf_test_run(tests);
}
