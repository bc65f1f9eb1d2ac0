/*
 * kf_judged.h -- one graph compiled, run on fresh random inputs with its
 * outputs poisoned, and judged against the exact value: the case runner of
 * the GPU suites that take a graph as .kfg text (test_gemm_rowepi,
 * test_cuda_exec_simt, test_cuda_attnsimt), once or several times with the
 * runs' bits compared. Failures end the running cmocka test.
 */
#ifndef KF_TESTS_JUDGED_H
#define KF_TESTS_JUDGED_H

#include <stdbool.h>
#include <stdint.h>

#include "kfuse.h"

/* Parses `text` and compiles it in `ctx`; checks that the text report holds
 * each '|'-separated token of `want` (NULL: nothing asked); runs it `runs`
 * times (at least once) on the same inputs, uniform in [lo, hi) from random
 * stream `stream`, every output poisoned before each run; judges each run's
 * outputs against the exact value (kf_graph_check), printing the last run's
 * errors when `verbose`; and, from the second run on, fails unless each
 * output's bits are those of the first run (a kernel whose result depends
 * on timing: a race, a split reduction in no fixed order). `what` names the
 * case in every failure. */
void kf_test_judged_runs(kf_ctx *ctx, const char *text, const char *want, uint64_t stream,
                         double lo, double hi, unsigned runs, bool verbose, const char *what);

/* kf_test_judged_runs with one run. */
void kf_test_judged_run(kf_ctx *ctx, const char *text, const char *want, uint64_t stream, double lo,
                        double hi, bool verbose, const char *what);

#endif
