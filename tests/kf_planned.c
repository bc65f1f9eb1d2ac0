/*
 * kf_planned.c -- see kf_planned.h.
 */
#define _GNU_SOURCE /* open_memstream */
#include "kf_planned.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kf_test.h"

void plan_text(const char *text, planned *p) { plan_text_with(text, NULL, p); }

void plan_text_with(const char *text, const kf_plan_options *o, planned *p) {
    memset(p, 0, sizeof *p);
    assert_int_equal(kf_ctx_create(NULL, &p->ctx), KF_OK);
    kf_status st = kf_graph_parse(p->ctx, text, strlen(text), &p->g);
    if (st != KF_OK)
        fail_msg("parse: %s", p->g ? kf_graph_error(p->g) : kf_status_str(st));
    st = kf_plan_create(p->g, o, &p->plan);
    if (st != KF_OK)
        fail_msg("plan: %s", kf_graph_error(p->g));
}

void plan_release(planned *p) {
    kf_plan_destroy(p->plan);
    kf_graph_destroy(p->g);
    kf_ctx_destroy(p->ctx);
}

int planned_setup(void **state) {
    planned *p = calloc(1, sizeof *p);
    if (!p || kf_ctx_create(NULL, &p->ctx) != KF_OK || kf_graph_create(p->ctx, &p->g) != KF_OK) {
        if (p)
            plan_release(p);
        free(p);
        return -1;
    }
    *state = p;
    return 0;
}

int planned_teardown(void **state) {
    planned *p = *state;
    plan_release(p);
    free(p);
    return 0;
}

kf_plan *planned_plan(planned *p, const kf_plan_options *o) {
    assert_int_equal(kf_graph_status(p->g), KF_OK);
    kf_plan_destroy(p->plan);
    p->plan = NULL;
    kf_status st = kf_plan_create(p->g, o, &p->plan);
    if (st != KF_OK)
        fail_msg("kf_plan_create: %s: %s", kf_status_str(st), kf_graph_error(p->g));
    st = kf_plan_check(p->plan, kf_test_seed(), NULL);
    if (st != KF_OK) {
        kf_plan_dump(p->plan, stderr);
        fail_msg("kf_plan_check: %s", kf_graph_error(p->g));
    }
    return p->plan;
}

/* noinline: gcc -O2 otherwise takes the memstream buffer for a dangling local
 * (test_cuda_exec's copy of this met it). */
__attribute__((noinline)) char *kf_test_report(kf_program *p, kf_report_format fmt) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    assert_int_equal(kf_program_report(p, fmt, f), KF_OK);
    fclose(f);
    return buf;
}
