/*
 * kf_planned.c -- see kf_planned.h.
 */
#include "kf_planned.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

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
