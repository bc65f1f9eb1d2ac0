/*
 * cmd_run.c -- `kfuse run FILE.kfg --target cpu|cuda|auto [--check] [--seed N] [--report]`: parses
 * a graph, compiles it (plan, fuse, JIT), runs it once on random inputs drawn
 * exactly as `kfuse eval` draws them, and prints one summary line per output.
 * With --check it also judges each output by kf_graph_check's rule and prints
 * err (its normwise error against the graph evaluated in f64 with no
 * intermediate rounding), ref_err (the reference evaluator's own error at the
 * graph's dtypes), fused_err (the same with matmul products unrounded into
 * their elementwise epilogues, or with attention scores stored rounded, as
 * the unfused attention does, whichever is further) and bound (2 max(ref_err,
 * fused_err, the output dtype's one rounding)
 * plus a floor of 1e-5, 1e-12 for f64 graphs); an output beyond its bound, or
 * a NaN the reference does not have, fails the run. i32 and bool outputs
 * must equal the reference.
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
#include "runtime/ctx.h"

const char kf_cmd_run_summary[] =
    "compile a .kfg graph, run it on random inputs, optionally --check it";

const char kf_cmd_run_help[] =
    "usage: kfuse run FILE [--target cpu|cuda|auto] [--check] [--seed N] [--report]\n"
    "                      [--gemm auto|generated|cublaslt|measured|sm80]\n"
    "                      [--attention auto|sm90|fa2|unfused|decode] [--unfused-attention]\n"
    "                      [--split-row-norms] [--gemm-head-epilogue] [--choice-margin F]\n"
    "                      [--choice-load-bias F] [--no-cache | --cache-dir DIR]\n"
    "\n"
    "Compiles FILE (a .kfg graph; `-` reads standard input) for the target, runs it\n"
    "once on random inputs (the same inputs `kfuse eval --seed N` uses) and prints\n"
    "one line per output: NAME TYPE min=.. max=.. mean=.. l2=.. nan=N inf=N.\n"
    "\n"
    "options:\n"
    "  --target T   cpu, cuda, or auto (the default: cuda when a GPU is present,\n"
    "               else cpu)\n"
    "  --report     print what runs where (per kernel group) to stderr\n"
    "  --check      also judge each output against the graph evaluated in f64\n"
    "               with no intermediate rounding: print err, the reference\n"
    "               evaluator's own ref_err, fused_err (the same with matmul\n"
    "               products unrounded into their epilogues, or attention scores\n"
    "               stored rounded, the further) and the bound\n"
    "               (2 x the larger + floor);\n"
    "               exit 1 when an output exceeds its bound or has a stray NaN\n"
    "  --seed N     seed of the input generator (default 0)\n"
    "  --gemm MODE  how GEMM groups run on CUDA (kf_options.gemm): auto (the\n"
    "               default, as measured), generated (kfuse's GEMM kernel wherever\n"
    "               it takes the group: wgmma on sm_90a, mma.sync on sm_80 to\n"
    "               sm_89), cublaslt, measured (both timed once, the faster runs;\n"
    "               --report shows both times), or sm80 (the mma.sync kernel on any\n"
    "               GPU from sm_80, also an H100: to test it there)\n"
    "  --attention MODE  how attention groups run on CUDA (kf_options.attention):\n"
    "               auto (the default) or sm90: the decode kernels for 16 query\n"
    "               rows or fewer, else on sm_90a the TMA/wgmma kernel where it\n"
    "               takes the group, else fa2 (the report says why);\n"
    "               fa2: the mma.sync kernel on every arch; unfused: as\n"
    "               --unfused-attention; decode: the split-KV decode kernels\n"
    "               (partials over key chunks on every SM, then a combine) at any\n"
    "               query length\n"
    "  --unfused-attention  a context with KF_FLAG_UNFUSED_ATTENTION: attention\n"
    "               groups run as two cuBLASLt GEMMs around a softmax kernel even\n"
    "               where the fused kernel takes them (bf16/f16, head dim 64/128)\n"
    "  --split-row-norms  a context with KF_FLAG_SPLIT_ROW_NORMS: a norm after a\n"
    "               GEMM whose row is longer than one tile row joins the GEMM's\n"
    "               group (the split row form)\n"
    "  --gemm-head-epilogue  a context with KF_FLAG_GEMM_HEAD_EPILOGUE: the\n"
    "               rotary embedding of a GEMM's head view joins the GEMM's group\n"
    "  --choice-margin F  a measured choice runs its cuBLASLt side only when it is\n"
    "               faster than the generated side by more than F (a fraction:\n"
    "               0.05 is 5%; kf_options.choice_margin; 0, the default: the\n"
    "               faster side however close); --report shows both times and\n"
    "               says where the margin decided\n"
    "  --choice-load-bias F  a measured choice counts its generated side's time\n"
    "               (1 + F) times (kf_options.choice_load_bias; default 0.025;\n"
    "               0: as timed): the sides are timed at compile time on a GPU\n"
    "               mostly at rest, where the generated kernels fare 1-7%\n"
    "               better against cuBLASLt than under a model's sustained,\n"
    "               power-capped load (H100)\n"
    "  --no-cache   compile everything, read and write no kernel cache\n"
    "  --cache-dir DIR\n"
    "               the kernel cache to use (default $KF_CACHE_DIR, else\n"
    "               $XDG_CACHE_HOME/kfuse, else ~/.cache/kfuse)\n"
    "  -h, --help   show this help\n";

static int run_graph(kf_ctx *ctx, kf_graph *g, const char *file, uint64_t seed, bool check,
                     bool report) {
    kf_cli_bindings b;
    kf_check_result *res = NULL;
    kf_program *p = NULL;
    int rc = KF_EXIT_OK;
    if (!kf_cli_bindings_make(g, seed, file, &b)) {
        rc = KF_EXIT_RUNTIME;
        goto done;
    }
    if (check && !(res = calloc(b.n_out ? b.n_out : 1, sizeof *res))) {
        fprintf(stderr, "kfuse: %s: out of memory\n", file);
        rc = KF_EXIT_RUNTIME;
        goto done;
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
    int clamped = 0;
    if (kf_program_index_clamps(p, NULL, &clamped) == KF_OK && clamped)
        fprintf(stderr,
                "kfuse: %s: warning: a gather index was outside its axis; the GPU clamped it "
                "into range (the nearest row was read)\n",
                file);
    if (check) {
        st = kf_graph_check(g, b.in, b.n_in, b.out, b.n_out, res);
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
            printf("  err=%.3g ref_err=%.3g fused_err=%.3g bound=%.3g %s", res[i].err,
                   res[i].ref_err, res[i].fused_err, res[i].bound, res[i].pass ? "ok" : "MISMATCH");
            if (!res[i].pass)
                rc = KF_EXIT_RUNTIME;
        }
        printf("\n");
    }
    if (rc != KF_EXIT_OK)
        fprintf(stderr,
                "kfuse: %s: an output is further from the exact value than twice the reference "
                "evaluator's own error (ref_err, fused_err) (seed %" PRIu64 ")\n",
                file, seed);
done:
    kf_program_destroy(p);
    free(res);
    kf_cli_bindings_free(&b);
    return rc;
}

/* Opens the context's kernel cache before the compile does, so that a
 * cache this user must not use is reported with what the CLI can change
 * (the library's message names kf_options.cache_dir and KF_FLAG_NO_CACHE,
 * which a CLI user cannot set), on either target. */
static bool cache_usable(kf_ctx *ctx) {
    struct kf_cache *cache = NULL;
    char err[KF_MSG_MAX] = "";
    kf_status st = kf_ctx_cache(ctx, &cache, err);
    if (st == KF_OK)
        return true;
    fprintf(stderr,
            "kfuse run: the kernel cache cannot be used: %s\n"
            "  (pass --cache-dir DIR to use a directory of your own, or --no-cache to compile "
            "without a cache)\n",
            *err ? err : kf_status_str(st));
    return false;
}

int kf_cmd_run(int argc, char **argv) {
    const char *file = NULL;
    uint64_t seed = 0;
    bool check = false, report = false, unfused_attn = false, no_cache = false;
    bool split_rows = false, head_epi = false;
    const char *cache_dir = NULL;
    kf_target target = KF_TARGET_AUTO;
    kf_gemm_mode gemm = KF_GEMM_AUTO;
    kf_attention_mode attention = KF_ATTENTION_AUTO;
    double margin = -1.0;    /* < 0: the environment's or the default */
    double load_bias = -1.0; /* the same */
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
                fprintf(stderr,
                        "kfuse run: --gemm takes auto, generated, cublaslt, measured or sm80\n%s",
                        kf_cmd_run_help);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--attention") == 0) {
            if (i + 1 >= argc || !kf_cli_attention_mode(argv[i + 1], &attention)) {
                fprintf(stderr,
                        "kfuse run: --attention takes auto, sm90, fa2, unfused or decode\n%s",
                        kf_cmd_run_help);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--choice-margin") == 0) {
            if (i + 1 >= argc || !kf_cli_choice_margin(argv[i + 1], &margin)) {
                fprintf(stderr, "kfuse run: --choice-margin takes a number from 0 to below 1\n%s",
                        kf_cmd_run_help);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--choice-load-bias") == 0) {
            if (i + 1 >= argc || !kf_cli_choice_margin(argv[i + 1], &load_bias)) {
                fprintf(stderr,
                        "kfuse run: --choice-load-bias takes a number from 0 to below 1\n%s",
                        kf_cmd_run_help);
                return 2;
            }
            i++;
        } else if (strcmp(a, "--unfused-attention") == 0) {
            unfused_attn = true;
        } else if (strcmp(a, "--split-row-norms") == 0) {
            split_rows = true;
        } else if (strcmp(a, "--gemm-head-epilogue") == 0) {
            head_epi = true;
        } else if (strcmp(a, "--no-cache") == 0) {
            no_cache = true;
        } else if (strcmp(a, "--cache-dir") == 0) {
            if (i + 1 >= argc || !*argv[i + 1]) {
                fprintf(stderr, "kfuse run: --cache-dir needs a directory\n%s", kf_cmd_run_help);
                return 2;
            }
            cache_dir = argv[++i];
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
    if (no_cache && cache_dir) {
        fprintf(stderr, "kfuse run: --no-cache and --cache-dir exclude each other\n%s",
                kf_cmd_run_help);
        return 2;
    }
    kf_options o;
    kf_cli_options(&o); /* the environment's switches */
    o.target = target;
    o.gemm = gemm;
    o.attention = attention;
    if (margin >= 0.0)
        o.choice_margin = margin;
    if (load_bias >= 0.0)
        o.choice_load_bias = load_bias;
    if (unfused_attn)
        o.flags |= KF_FLAG_UNFUSED_ATTENTION;
    if (split_rows)
        o.flags |= KF_FLAG_SPLIT_ROW_NORMS;
    if (head_epi)
        o.flags |= KF_FLAG_GEMM_HEAD_EPILOGUE;
    if (cache_dir)
        o.cache_dir = cache_dir;
    if (no_cache)
        o.flags |= KF_FLAG_NO_CACHE;
    kf_ctx *ctx = NULL;
    kf_graph *g = NULL;
    if (kf_ctx_create(&o, &ctx) != KF_OK) {
        fprintf(stderr, "kfuse: out of memory\n");
        return KF_EXIT_RUNTIME;
    }
    int rc = kf_cli_load_graph(ctx, file, &g); /* -1: loaded; else why not is printed */
    if (rc < 0 && !no_cache && !cache_usable(ctx))
        rc = KF_EXIT_RUNTIME;
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
