/*
 * kf_planned.h -- a graph parsed from .kfg text and planned, with the context
 * that owns it: the fixture the codegen suites (test_cudagen, test_gemmgen)
 * build their recipes and kernels from. Failures end the running cmocka test.
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

#endif /* KF_TESTS_PLANNED_H */
