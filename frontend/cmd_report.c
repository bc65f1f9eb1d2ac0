/*
 * cmd_report.c -- `kfuse report FILE.kfg [--json] [--device h100|h200|a100|cpu]`:
 * parses the graph, plans it (fusion/), estimates each group's cost for the
 * device and writes the report (fusion/report.c) to standard output.
 *
 * Exit status as for every kfuse command: 0 success; 1 a runtime failure
 * (planning failed, out of memory, output not writable); 2 a usage error or a
 * file that cannot be read or does not parse (FILE:LINE:COL: message).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/cli.h"
#include "frontend/cmd_report.h"
#include "fusion/fusion.h"
#include "kfuse.h"


const char kf_cmd_report_help[] =
    "usage: kfuse report FILE [--json] [--device h100|h200|a100|cpu]\n"
    "\n"
    "Plans FILE (a .kfg graph; `-` reads standard input) into fused kernels and\n"
    "prints the plan: one row per kernel group (kind, generated kernel name, ops\n"
    "absorbed, bytes saved against the unfused graph, estimated time), each\n"
    "group's inputs and outputs with their types and its scalar expressions, and\n"
    "every edge that was not fused with its reason code.\n"
    "\n"
    "options:\n"
    "  --json          write JSON (schema \"kfuse.report/1\", docs/report-schema.md)\n"
    "  --device NAME   the roofline the cost columns assume: h100 (default), h200,\n"
    "                  a100 or cpu\n"
    "  -h, --help      show this help\n"
    "\n"
    "environment: KF_DEBUG=1 dumps the plan after each fusion pass to stderr.\n"
    "exit status: 0 success, 1 planning failed, 2 usage error or a file that does\n"
    "not parse (printed as FILE:LINE:COL: message).\n";

static int usage(const char *fmt, const char *arg) {
    fputs("kfuse report: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\nusage: kfuse report FILE [--json] [--device h100|h200|a100|cpu]\n"
          "Run 'kfuse help report' for details.\n",
          stderr);
    return 2;
}

int kf_cmd_report(int argc, char **argv) {
    const char *file = NULL, *device = "h100";
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(kf_cmd_report_help, stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--device") == 0) {
            if (i + 1 >= argc)
                return usage("option '%s' needs a value", a);
            device = argv[++i];
        } else if (strncmp(a, "--device=", 9) == 0) {
            device = a + 9;
        } else if (a[0] == '-' && a[1] != '\0') {
            return usage("unknown option '%s'", a);
        } else if (file) {
            return usage("unexpected argument '%s' (one FILE only)", a);
        } else {
            file = a;
        }
    }
    if (!file)
        return usage("%s", "missing FILE (use `-` for standard input)");
    if (strcmp(device, "h100") && strcmp(device, "h200") && strcmp(device, "a100") &&
        strcmp(device, "cpu"))
        return usage("unknown device '%s' (h100, h200, a100 or cpu)", device);
    kf_ctx *ctx = NULL;
    kf_graph *g = NULL;
    kf_plan *plan = NULL;
    int rc = 0;
    kf_status st = kf_ctx_create(NULL, &ctx);
    if (st == KF_OK) {
        int loaded = kf_cli_load_graph(ctx, file, &g); /* -1: loaded; else why not is printed */
        if (loaded >= 0)
            rc = loaded;
    }
    if (rc == 0 && st == KF_OK)
        st = kf_plan_create(g, NULL, &plan);
    if (rc == 0 && st == KF_OK)
        st = kf_plan_estimate(plan, device);
    if (rc == 0 && st == KF_OK) {
        st = kf_plan_report(plan, json ? KF_REPORT_JSON : KF_REPORT_TEXT, stdout);
        if (st == KF_OK && fflush(stdout) != 0)
            st = KF_ERR_IO;
    }
    if (rc == 0 && st != KF_OK) {
        const char *msg = g ? kf_graph_error(g) : "";
        fprintf(stderr, "kfuse: report %s: %s%s%s\n", kf_cli_display_name(file), kf_status_str(st), msg[0] ? ": " : "",
                msg);
        rc = 1;
    }
    kf_plan_destroy(plan);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    return rc;
}
