/*
 * cmd_run.c -- `kfuse run FILE.kfg --target cpu|cuda|auto [--check] [--seed N] [--report]`: parses
 * a graph, compiles it (plan, fuse, JIT), runs it once on random inputs drawn
 * exactly as `kfuse eval` draws them, and prints one summary line per output.
 * With --check it also evaluates the graph with the reference evaluator and
 * prints each output's relative error ||out - ref|| / ||ref||; any NaN, or an
 * error beyond the dtype's tolerance (f64 1e-12, f32 1e-5, f16 2e-3, bf16
 * 1.6e-2, i32 and bool exact -- the suites' tolerances; the loosest of the
 * float dtypes stored on the way to the output), fails the run.
 *
 * Exit status: 0 success, 1 compile/run failure or a --check mismatch, 2 a
 * usage error or a file that cannot be read or parsed.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/cli.h"
#include "frontend/cmd_run.h"
#include "ir/ir.h"
#include "kfuse.h"

const char kf_cmd_run_summary[] =
    "compile a .kfg graph, run it on random inputs, optionally --check it";

const char kf_cmd_run_help[] =
    "usage: kfuse run FILE [--target cpu|cuda|auto] [--check] [--seed N] [--report]\n"
    "                      [--gemm auto|generated|cublaslt|measured]\n"
    "                      [--unfused-attention]\n"
    "\n"
    "Compiles FILE (a .kfg graph; `-` reads standard input) for the target, runs it\n"
    "once on random inputs (the same inputs `kfuse eval --seed N` uses) and prints\n"
    "one line per output: NAME TYPE min=.. max=.. mean=.. l2=.. nan=N inf=N.\n"
    "\n"
    "options:\n"
    "  --target T   cpu, cuda, or auto (the default: cuda when a GPU is present,\n"
    "               else cpu)\n"
    "  --report     print what runs where (per kernel group) to stderr\n"
    "  --check      also run the reference evaluator and print each output's\n"
    "               relative error; exit 1 when one exceeds its dtype's tolerance\n"
    "  --seed N     seed of the input generator (default 0)\n"
    "  --gemm MODE  how GEMM groups run on CUDA (kf_options.gemm): auto (the\n"
    "               default, as measured), generated (kfuse's sm_90a GEMM kernel\n"
    "               wherever it takes the group), cublaslt, or measured (both timed\n"
    "               once, the faster runs; --report shows both times)\n"
    "  --unfused-attention  a context with KF_FLAG_UNFUSED_ATTENTION: attention\n"
    "               groups run as two cuBLASLt GEMMs around a softmax kernel even\n"
    "               where the fused kernel takes them (bf16/f16, head dim 64/128)\n"
    "  -h, --help   show this help\n";

static int run_graph(kf_ctx *ctx, kf_graph *g, const char *file, uint64_t seed, bool check,
                     bool report) {
    kf_cli_bindings b;
    kf_binding *ref = NULL;
    kf_program *p = NULL;
    int rc = KF_EXIT_OK;
    if (!kf_cli_bindings_make(g, seed, file, &b)) {
        rc = KF_EXIT_RUNTIME;
        goto done;
    }
    if (check) {
        ref = calloc(b.n_out ? b.n_out : 1, sizeof *ref);
        for (size_t i = 0; ref && i < b.n_out; i++) {
            ref[i] = b.out[i];
            ref[i].data = malloc(ref[i].size ? ref[i].size : 1);
            if (!ref[i].data)
                break;
        }
        if (!ref || (b.n_out && !ref[b.n_out - 1].data)) {
            fprintf(stderr, "kfuse: %s: out of memory\n", file);
            rc = KF_EXIT_RUNTIME;
            goto done;
        }
    }
    kf_status st = kf_compile(ctx, g, &p);
    if (st != KF_OK) {
        fprintf(stderr, "kfuse: %s: compile failed: %s\n", file,
                *kf_graph_error(g) ? kf_graph_error(g) : kf_status_str(st));
        rc = KF_EXIT_RUNTIME;
        goto done;
    }
    if (report)
        kf_program_report(p, KF_REPORT_TEXT, stderr);
    st = kf_program_run(p, b.in, b.n_in, b.out, b.n_out, NULL);
    if (st != KF_OK) {
        fprintf(stderr, "kfuse: %s: run failed: %s\n", file, kf_program_error(p));
        rc = KF_EXIT_RUNTIME;
        goto done;
    }
    if (check) {
        st = kf_graph_eval(g, b.in, b.n_in, ref, b.n_out);
        if (st != KF_OK) {
            fprintf(stderr, "kfuse: %s: reference evaluation failed: %s\n", file,
                    kf_graph_error(g));
            rc = KF_EXIT_RUNTIME;
            goto done;
        }
    }
    for (size_t i = 0; i < b.n_out; i++) {
        const kf_tensor *t = kf_graph_output(g, i);
        kf_cli_print_summary(b.out[i].name, b.name_width, t, b.out[i].data);
        if (check) {
            kf_dtype d = kf_tensor_dtype(t);
            double e = kf_ir_rel_err(b.out[i].data, ref[i].data, d, kf_tensor_numel(t));
            double tol = kf_ir_output_tolerance(g, t);
            bool ok = e <= tol;
            printf("  rel_err=%.3g (tol %.3g) %s", e, tol, ok ? "ok" : "MISMATCH");
            if (!ok)
                rc = KF_EXIT_RUNTIME;
        }
        printf("\n");
    }
    if (rc != KF_EXIT_OK)
        fprintf(stderr,
                "kfuse: %s: output differs from the reference evaluator (seed %" PRIu64 ")\n", file,
                seed);
done:
    kf_program_destroy(p);
    for (size_t i = 0; ref && i < b.n_out; i++)
        free(ref[i].data);
    free(ref);
    kf_cli_bindings_free(&b);
    return rc;
}

int kf_cmd_run(int argc, char **argv) {
    const char *file = NULL;
    uint64_t seed = 0;
    bool check = false, report = false, unfused_attn = false;
    kf_target target = KF_TARGET_AUTO;
    kf_gemm_mode gemm = KF_GEMM_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(kf_cmd_run_help, stdout);
            return 0;
        } else if (strcmp(a, "--check") == 0) {
            check = true;
        } else if (strcmp(a, "--report") == 0) {
            report = true;
        } else if (strcmp(a, "--gemm") == 0) {
            if (i + 1 >= argc || !kf_cli_gemm_mode(argv[i + 1], &gemm)) {
                fprintf(stderr, "kfuse run: --gemm takes auto, generated, cublaslt or measured\n%s",
                        kf_cmd_run_help);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--unfused-attention") == 0) {
            unfused_attn = true;
        } else if (strcmp(a, "--seed") == 0 || strcmp(a, "--target") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "kfuse run: %s needs a value\n%s", a, kf_cmd_run_help);
                return 2;
            }
            const char *v = argv[++i];
            if (a[2] == 's') {
                char *end = NULL;
                errno = 0;
                unsigned long long s = strtoull(v, &end, 10);
                if (*v < '0' || *v > '9' || errno || *end) {
                    fprintf(stderr, "kfuse run: --seed takes an unsigned integer, not '%s'\n", v);
                    return 2;
                }
                seed = s;
            } else if (strcmp(v, "cpu") == 0) {
                target = KF_TARGET_CPU;
            } else if (strcmp(v, "cuda") == 0) {
                target = KF_TARGET_CUDA;
            } else if (strcmp(v, "auto") == 0) {
                target = KF_TARGET_AUTO;
            } else {
                fprintf(stderr, "kfuse run: unknown target '%s' (use cpu, cuda or auto)\n", v);
                return 2;
            }
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "kfuse run: unknown option '%s'\n%s", a, kf_cmd_run_help);
            return 2;
        } else if (file) {
            fprintf(stderr, "kfuse run: unexpected argument '%s'\n%s", a, kf_cmd_run_help);
            return 2;
        } else {
            file = a;
        }
    }
    if (!file) {
        fprintf(stderr, "kfuse run: missing FILE\n%s", kf_cmd_run_help);
        return 2;
    }
    kf_options o;
    kf_options_init(&o);
    o.target = target;
    o.gemm = gemm;
    if (unfused_attn)
        o.flags |= KF_FLAG_UNFUSED_ATTENTION;
    kf_ctx *ctx = NULL;
    kf_graph *g = NULL;
    if (kf_ctx_create(&o, &ctx) != KF_OK) {
        fprintf(stderr, "kfuse: out of memory\n");
        return KF_EXIT_RUNTIME;
    }
    int rc = kf_cli_load_graph(ctx, file, &g); /* -1: loaded; else why not is printed */
    if (rc < 0 && kf_graph_verify(g) != KF_OK) {
        fprintf(stderr, "kfuse: %s: %s\n", file, kf_graph_error(g));
        rc = KF_EXIT_RUNTIME;
    } else if (rc < 0) {
        rc = run_graph(ctx, g, file, seed, check, report);
    }
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    return rc;
}
