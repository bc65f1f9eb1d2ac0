/*
 * fuzz_parse.c -- libFuzzer target for the .kfg parser and printer.
 *
 * For every input: parse it (the bytes are passed with their length, never
 * NUL-terminated). A failure must carry a status and a "LINE:COL: ..." message
 * (or be out of memory). A success must print, and the printed text must parse
 * again and print to the same bytes (the round-trip contract of kfuse.h), and a
 * graph the parser built must pass the verifier whenever it has outputs (the
 * builder and the verifier share their shape rules). Any breach aborts, so
 * libFuzzer records the input.
 *
 * Build: tests/fuzz/build.sh (standalone clang), or configure with
 * -DCMAKE_C_COMPILER=clang -DKF_FUZZ=ON. Run: see tests/fuzz/README.md.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "kfuse.h"

static kf_ctx *ctx;

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_parse: %s\n", what);
        abort();
    }
}

/* The canonical text of g, malloc'ed (size in *len). */
static char *print_mem(const kf_graph *g, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    check(f != NULL, "open_memstream failed");
    check(kf_graph_print(g, f) == KF_OK, "kf_graph_print failed");
    check(fclose(f) == 0, "fclose failed");
    return buf;
}

static void check_message(const kf_graph *g, kf_status st) {
    check(kf_graph_status(g) == st, "parse status differs from kf_graph_status");
    const char *msg = kf_graph_error(g);
    if (st == KF_ERR_OUT_OF_MEMORY)
        return;
    unsigned line, col;
    check(sscanf(msg, "%u:%u:", &line, &col) == 2 && line >= 1 && col >= 1,
          "error message does not start with LINE:COL:");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!ctx)
        check(kf_ctx_create(NULL, &ctx) == KF_OK, "kf_ctx_create failed");
    kf_graph *g = NULL;
    kf_status st = kf_graph_parse(ctx, (const char *)data, size, &g);
    check(g != NULL, "no graph");
    check(st >= KF_OK && st < KF_STATUS_COUNT, "status out of range");
    if (st != KF_OK) {
        check_message(g, st);
        kf_graph_destroy(g);
        return 0;
    }

    size_t n1, n2;
    char *p1 = print_mem(g, &n1);
    kf_graph *g2 = NULL;
    kf_status st2 = kf_graph_parse(ctx, p1, n1, &g2);
    if (st2 != KF_OK)
        fprintf(stderr, "printed text does not parse: %s\n%s", kf_graph_error(g2), p1);
    check(st2 == KF_OK, "printed text does not parse");
    char *p2 = print_mem(g2, &n2);
    if (n1 != n2 || memcmp(p1, p2, n1) != 0)
        fprintf(stderr, "first print:\n%s\nsecond print:\n%s", p1, p2);
    check(n1 == n2 && memcmp(p1, p2, n1) == 0, "print -> parse -> print differs");

    if (g->n_outputs > 0) {
        kf_status v = kf_graph_verify(g);
        if (v != KF_OK)
            fprintf(stderr, "verify: %s\n%s", kf_graph_error(g), p1);
        check(v == KF_OK, "a parsed graph fails the verifier");
        check(kf_graph_verify(g2) == KF_OK, "a re-parsed graph fails the verifier");
    }
    free(p1);
    free(p2);
    kf_graph_destroy(g2);
    kf_graph_destroy(g);
    return 0;
}
