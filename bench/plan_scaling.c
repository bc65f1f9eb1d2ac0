/*
 * plan_scaling.c -- plan and compile time against graph size (issue 15, item
 * 12). Measured, never asserted: the claim is that both grow linearly, so the
 * time per op stays flat from 1k to 20k ops.
 *
 *   dup      N outputs, each relu(x) built anew: common-subexpression
 *            elimination folds them into one tensor, one kernel
 *   chains   N ops in N/8 independent chains of 8 elementwise ops over
 *            f32[16, 16] inputs of their own: N/8 kernels
 *   siblings N outputs y_i = x * s_i, each with a scalar of its own (CSE
 *            keeps them apart): fuse_siblings gathers them into N/16
 *            multi-output kernels (KF_SIBLING_MAX_OUTPUTS)
 *
 * For each family and size: the build time (public builder API), kf_plan_create
 * (CSE + planning), and -- with the CPU backend -- kf_compile for the CPU at
 * LLVM -O level --opt (default 0: the compile's own work, not LLVM's
 * optimizer), with no disk cache. One JSON object per line on stdout.
 *
 *   plan_scaling [--opt 0..3] [--max N] [--no-compile]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fusion/fusion.h"
#include "ir/ir.h"
#include "kfuse.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Builds family `fam` with about n ops into a new graph of ctx. */
static kf_graph *build(kf_ctx *ctx, const char *fam, int n) {
    kf_graph *g = NULL;
    if (kf_graph_create(ctx, &g) != KF_OK)
        return NULL;
    char name[32];
    if (strcmp(fam, "dup") == 0) {
        int64_t d[2] = {16, 16};
        kf_tensor *x = kf_input(g, "x", KF_DTYPE_F32, 2, d);
        for (int i = 0; i < n; i++) {
            snprintf(name, sizeof name, "y%d", i);
            kf_output(g, name, kf_relu(g, x));
        }
    } else if (strcmp(fam, "siblings") == 0) {
        int64_t d[2] = {16, 16};
        kf_tensor *x = kf_input(g, "x", KF_DTYPE_F32, 2, d);
        for (int i = 0; i < n; i++) {
            snprintf(name, sizeof name, "y%d", i);
            kf_output(g, name, kf_mul(g, x, kf_scalar(g, KF_DTYPE_F32, 1.0 + i)));
        }
    } else {
        int64_t d[2] = {16, 16};
        for (int c = 0; c < n / 8; c++) {
            snprintf(name, sizeof name, "x%d", c);
            kf_tensor *x = kf_input(g, name, KF_DTYPE_F32, 2, d);
            kf_tensor *s = kf_scalar(g, KF_DTYPE_F32, 0.5 + c % 7);
            kf_tensor *v = kf_mul(g, x, s); /* 1 */
            v = kf_add(g, v, x);            /* 2 */
            v = kf_tanh(g, v);              /* 3 */
            v = kf_mul(g, v, v);            /* 4 */
            v = kf_sub(g, v, x);            /* 5 */
            v = kf_relu(g, v);              /* 6 */
            v = kf_add(g, v, s);            /* 7 */
            v = kf_neg(g, v);               /* 8 (the scalar is op 0) */
            snprintf(name, sizeof name, "y%d", c);
            kf_output(g, name, v);
        }
    }
    if (kf_graph_status(g) != KF_OK) {
        fprintf(stderr, "plan_scaling: build: %s\n", kf_graph_error(g));
        kf_graph_destroy(g);
        return NULL;
    }
    return g;
}

int main(int argc, char **argv) {
    int opt = 0, max = 20000;
    bool compile = true;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--opt") == 0 && i + 1 < argc)
            opt = atoi(argv[++i]);
        else if (strcmp(argv[i], "--max") == 0 && i + 1 < argc)
            max = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-compile") == 0)
            compile = false;
        else {
            fprintf(stderr, "usage: plan_scaling [--opt 0..3] [--max N] [--no-compile]\n");
            return strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CPU;
    o.flags = KF_FLAG_NO_CACHE;
    o.cpu_opt_level = opt < 0 || opt > 3 ? 0 : opt;
    kf_ctx *ctx = NULL;
    if (kf_ctx_create(&o, &ctx) != KF_OK)
        return 1;
    static const int sizes[] = {1000, 2000, 5000, 10000, 20000};
    static const char *const fams[] = {"dup", "chains", "siblings"};
    for (int fi = 0; fi < 3; fi++) {
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes && sizes[si] <= max; si++) {
            int n = sizes[si];
            double t0 = now_ms();
            kf_graph *g = build(ctx, fams[fi], n);
            double t1 = now_ms();
            if (!g)
                return 1;
            kf_plan *plan = NULL;
            kf_status st = kf_plan_create(g, NULL, &plan);
            double t2 = now_ms();
            if (st != KF_OK) {
                fprintf(stderr, "plan_scaling: plan: %s\n", kf_graph_error(g));
                return 1;
            }
            size_t kernels = kf_plan_kernel_count(plan);
            kf_plan_destroy(plan);
            kf_graph_destroy(g);
            double compile_ms = -1;
            if (compile) {
                g = build(ctx, fams[fi], n);
                kf_program *p = NULL;
                double t3 = now_ms();
                st = kf_compile(ctx, g, &p);
                compile_ms = now_ms() - t3;
                if (st == KF_ERR_UNSUPPORTED) {
                    compile = false;
                    compile_ms = -1;
                } else if (st != KF_OK) {
                    fprintf(stderr, "plan_scaling: compile: %s\n", kf_graph_error(g));
                    return 1;
                }
                kf_program_destroy(p);
                kf_graph_destroy(g);
            }
            printf("{\"family\": \"%s\", \"ops\": %d, \"kernels\": %zu, \"build_ms\": %.2f, "
                   "\"plan_ms\": %.2f, \"plan_us_per_op\": %.3f, \"compile_ms\": %.1f, "
                   "\"compile_us_per_op\": %.2f, \"cpu_opt\": %d}\n",
                   fams[fi], n, kernels, t1 - t0, t2 - t1, 1e3 * (t2 - t1) / n, compile_ms,
                   compile_ms < 0 ? -1.0 : 1e3 * compile_ms / n, o.cpu_opt_level);
            fflush(stdout);
        }
    }
    kf_ctx_destroy(ctx);
    return 0;
}
