/*
 * kf_planned.h -- a graph parsed from .kfg text and planned, with the context
 * that owns it: the fixture the codegen suites (test_cudagen, test_gemmgen)
 * build their recipes and kernels from; and the same fixture for the suites
 * that build a graph through the builder and plan it (test_fusion,
 * test_idiom, test_eval). Failures end the running cmocka test.
 */
#ifndef KF_TESTS_PLANNED_H
#define KF_TESTS_PLANNED_H

#include "fusion/fusion.h"
#include "kfuse.h"

typedef struct planned {
    kf_ctx *ctx;
    kf_graph *g;
    kf_plan *plan;
} planned;

/* Parses `text` in a fresh default context and plans it (default options). */
void plan_text(const char *text, planned *p);
/* The same with planner options `o` (NULL: the defaults). */
void plan_text_with(const char *text, const kf_plan_options *o, planned *p);
void plan_release(planned *p);

/* cmocka setup and teardown: *state a planned with a fresh default context and
 * an empty graph to build into (no plan yet); the teardown releases it all. */
int planned_setup(void **state);
int planned_teardown(void **state);
/* Plans p->g with options `o` (NULL: the defaults), replacing an earlier
 * plan, and checks the plan group by group against the reference evaluator
 * (kf_plan_check, the test seed); the plan stays p's. */
kf_plan *planned_plan(planned *p, const kf_plan_options *o);

/* A compiled program's report in `fmt`, as a string the caller frees (the
 * suites that look for a line or a JSON member in it). */
char *kf_test_report(kf_program *p, kf_report_format fmt);

#endif /* KF_TESTS_PLANNED_H */
