/*
 * kf_judged.c -- see kf_judged.h.
 */
#define _GNU_SOURCE /* open_memstream (kf_test_report) */
#include "kf_judged.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_planned.h"
#include "kf_test.h"

void kf_test_judged_runs(kf_ctx *ctx, const char *text, const char *want, uint64_t stream,
                         double lo, double hi, unsigned runs, bool verbose, const char *what) {
    kf_graph *g = NULL;
    if (kf_graph_parse(ctx, text, strlen(text), &g) != KF_OK || kf_graph_verify(g) != KF_OK)
        fail_msg("%s: parse: %s\n%s", what, g ? kf_graph_error(g) : "no graph", text);
    size_t n_in = kf_graph_input_count(g), n_out = kf_graph_output_count(g);
    kf_binding *in = calloc(n_in + 1, sizeof *in);
    kf_binding *out = calloc(n_out + 1, sizeof *out);
    void **first = calloc(n_out + 1, sizeof *first);
    kf_check_result *res = calloc(n_out + 1, sizeof *res);
    assert_true(in && out && first && res);
    if (runs < 1)
        runs = 1;
    kf_test_rng rng = kf_test_rng_make(stream);
    for (size_t i = 0; i < n_in; i++) {
        const kf_tensor *t = kf_graph_input(g, i);
        size_t n = (size_t)kf_tensor_numel(t);
        in[i].name = kf_tensor_name(t);
        in[i].size = n * kf_dtype_size(kf_tensor_dtype(t));
        in[i].data = malloc(in[i].size + 1);
        assert_non_null(in[i].data);
        kf_test_fill_input(in[i].data, t, n, &rng, lo, hi);
    }
    for (size_t i = 0; i < n_out; i++) {
        const kf_tensor *t = kf_graph_output(g, i);
        size_t n = (size_t)kf_tensor_numel(t);
        out[i].name = kf_graph_output_name(g, i);
        out[i].size = n * kf_dtype_size(kf_tensor_dtype(t));
        out[i].data = malloc(out[i].size + 1);
        first[i] = runs > 1 ? malloc(out[i].size + 1) : NULL;
        assert_true(out[i].data && (runs < 2 || first[i]));
    }
    kf_program *p = NULL;
    if (kf_compile(ctx, g, &p) != KF_OK)
        fail_msg("%s: kf_compile: %s", what, kf_graph_error(g));
    char *report = kf_test_report(p, KF_REPORT_TEXT);
    if (want) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s", want);
        for (char *tok = strtok(buf, "|"); tok; tok = strtok(NULL, "|"))
            if (!strstr(report, tok))
                fail_msg("%s: the report lacks '%s':\n%s", what, tok, report);
    }
    for (unsigned run = 0; run < runs; run++) {
        for (size_t i = 0; i < n_out; i++) {
            const kf_tensor *t = kf_graph_output(g, i);
            kf_test_poison(out[i].data, kf_tensor_dtype(t), (size_t)kf_tensor_numel(t));
        }
        if (kf_program_run(p, in, n_in, out, n_out, NULL) != KF_OK)
            fail_msg("%s: run %u: kf_program_run: %s\n%s", what, run + 1, kf_program_error(p),
                     report);
        if (kf_graph_check(g, in, n_in, out, n_out, res) != KF_OK)
            fail_msg("%s: reference: %s", what, kf_graph_error(g));
        for (size_t i = 0; i < n_out; i++) {
            if (!res[i].pass)
                fail_msg("%s, run %u, output %s: error %g against the exact value exceeds the "
                         "bound %g (the reference's own error %g; KF_TEST_SEED=%llu)\n%s",
                         what, run + 1, out[i].name, res[i].err, res[i].bound, res[i].ref_err,
                         (unsigned long long)kf_test_seed(), report);
            if (run == 0 && first[i])
                memcpy(first[i], out[i].data, out[i].size);
            else if (run > 0 && memcmp(first[i], out[i].data, out[i].size) != 0)
                fail_msg("%s, output %s: run %u's bits differ from the first run's\n%s", what,
                         out[i].name, run + 1, report);
            if (verbose && run + 1 == runs)
                fprintf(stderr, "  %s, %s: error %.3g (bound %.3g)\n", what, out[i].name,
                        res[i].err, res[i].bound);
        }
    }
    free(report);
    kf_program_destroy(p);
    for (size_t i = 0; i < n_in; i++)
        free(in[i].data);
    for (size_t i = 0; i < n_out; i++) {
        free(out[i].data);
        free(first[i]);
    }
    free(in);
    free(out);
    free(first);
    free(res);
    kf_graph_destroy(g);
}

void kf_test_judged_run(kf_ctx *ctx, const char *text, const char *want, uint64_t stream, double lo,
                        double hi, bool verbose, const char *what) {
    kf_test_judged_runs(ctx, text, want, stream, lo, hi, 1, verbose, what);
}
