/*
 * kfuse_main.c -- the `kfuse` command-line tool.
 *
 * This file owns the CLI: argument handling, reading .kfg text from a file or
 * standard input, and the commands. Each command is one row of `commands[]`
 * (name, one-line summary, help text, handler), so a later command (report,
 * run, aot, cache) is one function and one row. The handlers go through the
 * public API in kfuse.h, and borrow from ir.h what the IR already does for
 * them: storage conversions, type strings, and a walk over the nodes for the
 * evaluator's size guard.
 *
 * Exit status, for every command:
 *   0  success
 *   1  a runtime failure (evaluation failed, output could not be written, out of memory)
 *   2  a usage error, or input that cannot be read or does not parse
 * Messages go to stderr as `kfuse: ...`; parse errors as `FILE:LINE:COL: ...`.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "frontend/cli.h"
#include "frontend/cmd_aot.h"
#include "frontend/cmd_cache.h"
#include "frontend/cmd_report.h"
#include "frontend/cmd_run.h"
#include "ir/ir.h"
#include "kfuse.h"

/* What `kfuse eval` lets the reference evaluator take on: every value is held
 * in double, and matmul is a plain triple loop, so a graph past these would
 * run out of memory or take minutes. The evaluator is an oracle for small
 * shapes; large graphs are the backends' job. */
#define KF_CLI_EVAL_MAX_ELEMENTS (1.0 * (1 << 27))      /* 1 GiB of doubles */
#define KF_CLI_EVAL_MAX_MACS (1.0 * 4096 * 1024 * 1024) /* multiply-adds in matmuls */

typedef struct cli_command {
    const char *name;
    const char *summary;
    const char *help; /* the full text for `kfuse help NAME`; starts with the usage line */
    int (*run)(const struct cli_command *cmd, int argc, char **argv);
} cli_command;

static const cli_command *find_command(const char *name);

/* ------------------------------------------------------------------------ */
/* Help                                                                       */
/* ------------------------------------------------------------------------ */

static int cmd_print(const cli_command *cmd, int argc, char **argv);
static int cmd_eval(const cli_command *cmd, int argc, char **argv);
static int cmd_help(const cli_command *cmd, int argc, char **argv);
/* `kfuse report` lives in frontend/cmd_report.c. */
static int cmd_report(const cli_command *cmd, int argc, char **argv) {
    (void)cmd;
    return kf_cmd_report(argc, argv);
}
/* `kfuse aot` lives in frontend/cmd_aot.c. */
static int cmd_aot(const cli_command *cmd, int argc, char **argv) {
    (void)cmd;
    return kf_cmd_aot(argc, argv);
}
/* `kfuse run` lives in frontend/cmd_run.c. */
static int cmd_run(const cli_command *cmd, int argc, char **argv) {
    (void)cmd;
    return kf_cmd_run(argc, argv);
}
/* `kfuse cache` lives in frontend/cmd_cache.c. */
static int cmd_cache(const cli_command *cmd, int argc, char **argv) {
    (void)cmd;
    return kf_cmd_cache(argc, argv);
}

static const cli_command commands[] = {
    {"print", "parse a .kfg graph and print its canonical form",
     "usage: kfuse print FILE\n"
     "\n"
     "Parses FILE (a .kfg graph; `-` reads standard input) and writes its canonical\n"
     "text to standard output. Printing that output again gives the same bytes.\n"
     "\n"
     "options:\n"
     "  -h, --help   show this help\n",
     cmd_print},
    {"eval", "evaluate a .kfg graph on random inputs and summarize each output",
     "usage: kfuse eval FILE [--seed N]\n"
     "\n"
     "Parses FILE (`-` reads standard input), fills every input with random values,\n"
     "evaluates the graph with the reference evaluator (every op in double, each\n"
     "result rounded to its dtype) and prints one line per output:\n"
     "\n"
     "  NAME  TYPE  min=.. max=.. mean=.. l2=.. nan=N inf=N\n"
     "\n"
     "min, max, mean and the L2 norm are over the finite elements; nan and inf\n"
     "count the others. Inputs: floats uniform in [-1, 1) (then rounded to the\n"
     "dtype), i32 integers in [-8, 8], bool 0 or 1, all drawn from one splitmix64\n"
     "stream in input order, so a seed always gives the same inputs.\n"
     "\n"
     "options:\n"
     "  --seed N     seed of the input generator (an unsigned integer; default 0)\n"
     "  -h, --help   show this help\n",
     cmd_eval},
    {"run", kf_cmd_run_summary, kf_cmd_run_help, cmd_run},
    {"report", "plan a .kfg graph into fused kernels and report why each edge fused or not",
     kf_cmd_report_help, cmd_report},
    {"cache", kf_cmd_cache_summary, kf_cmd_cache_help, cmd_cache},
    {"aot", kf_cmd_aot_summary, kf_cmd_aot_help, cmd_aot},
    {"help", "show help for a command",
     "usage: kfuse help [COMMAND]\n"
     "\n"
     "Shows the help of COMMAND, or the list of commands.\n",
     cmd_help},
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void print_main_help(FILE *out) {
    fprintf(out, "usage: kfuse COMMAND [OPTIONS] FILE\n"
                 "       kfuse --help | --version\n"
                 "\n"
                 "kfuse is a JIT kernel compiler and fusion engine: it plans a .kfg graph into\n"
                 "fused kernels, compiles them for the CPU (LLVM: %s) or a CUDA GPU (NVRTC and\n"
                 "the driver, opened when a command needs them), runs them and checks them\n"
                 "against the graph's exact value, reports what fused and why, and fills\n"
                 "kernel caches ahead of time without a GPU.\n"
                 "\n"
                 "commands:\n",
#ifdef KF_HAVE_LLVM
            "built in"
#else
            "not in this build"
#endif
    );
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n"
                 "options:\n"
                 "  -h, --help      show this help\n"
                 "  -V, --version   show the version\n"
                 "\n"
                 "FILE may be `-` for standard input. Run `kfuse help COMMAND` or\n"
                 "`kfuse COMMAND --help` for a command's options.\n"
                 "\n"
                 "environment (mapped onto the library's kf_options):\n"
                 "  KF_CACHE_DIR=DIR      the kernel cache (default $XDG_CACHE_HOME/kfuse,\n"
                 "                        else ~/.cache/kfuse)\n"
                 "  KF_DUMP_DIR=DIR       write every generated CUDA source there\n"
                 "  KF_CUBLASLT_LIB=FILE  the cuBLASLt library to open\n"
                 "  KF_NUM_THREADS=N      CPU threads (default: one per CPU)\n"
                 "  KF_CPU_OPT=0..3       LLVM -O level of the CPU target (default 3)\n"
                 "  KF_DEBUG=1            the plan after each fusion pass, to stderr\n"
                 "  KF_CUDA_GRAPH=0       launch each kernel instead of one CUDA graph\n"
                 "  KF_CPU_NO_REUSE=1     keep every CPU intermediate in its own buffer\n"
                 "  KF_DUMP_IR=1          the CPU module's LLVM IR, to stderr\n"
                 "  KF_CPU_TIMING=1       the CPU compile's phase times, to stderr\n"
                 "\n"
                 "exit status: 0 success, 1 runtime failure, 2 usage error or bad input.\n");
}

/* Prints `kfuse CMD: MESSAGE` and the command's usage line to stderr; returns 2. */
static int usage_error(const cli_command *cmd, const char *fmt, const char *arg) {
    fprintf(stderr, "kfuse%s%s: ", cmd ? " " : "", cmd ? cmd->name : "");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    if (cmd) {
        const char *nl = strchr(cmd->help, '\n');
        fprintf(stderr, "%.*s\n", (int)(nl ? nl - cmd->help : (ptrdiff_t)strlen(cmd->help)),
                cmd->help);
        fprintf(stderr, "Run 'kfuse help %s' for details.\n", cmd->name);
    } else {
        fprintf(stderr, "Run 'kfuse --help' for the list of commands.\n");
    }
    return KF_EXIT_USAGE;
}

/* ------------------------------------------------------------------------ */
/* Arguments                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct cli_args {
    const char *file;
    uint64_t seed;
} cli_args;

static bool parse_u64(const char *s, uint64_t *out) {
    if (*s < '0' || *s > '9')
        return false; /* strtoull would take "-1" and " 1" */
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = (uint64_t)v;
    return true;
}

/* Reads `FILE` and the options `cmd` takes. Returns -1 to go on, else the exit
 * status (0 after --help). */
static int parse_args(const cli_command *cmd, int argc, char **argv, bool takes_seed, cli_args *a) {
    bool options_done = false;
    memset(a, 0, sizeof *a);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!options_done && arg[0] == '-' && arg[1] != '\0') {
            if (strcmp(arg, "--") == 0) {
                options_done = true;
            } else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
                fputs(cmd->help, stdout);
                return KF_EXIT_OK;
            } else if (takes_seed && strcmp(arg, "--seed") == 0) {
                if (i + 1 >= argc)
                    return usage_error(cmd, "option '%s' needs a value", arg);
                if (!parse_u64(argv[++i], &a->seed))
                    return usage_error(cmd, "--seed takes an unsigned integer, not '%s'", argv[i]);
            } else if (takes_seed && strncmp(arg, "--seed=", 7) == 0) {
                if (!parse_u64(arg + 7, &a->seed))
                    return usage_error(cmd, "--seed takes an unsigned integer, not '%s'", arg + 7);
            } else {
                return usage_error(cmd, "unknown option '%s'", arg);
            }
        } else if (a->file) {
            return usage_error(cmd, "unexpected argument '%s' (one FILE only)", arg);
        } else {
            a->file = arg;
        }
    }
    if (!a->file)
        return usage_error(cmd, "%s", "missing FILE (use `-` for standard input)");
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Input                                                                      */
/* ------------------------------------------------------------------------ */

/* The name a file goes by in messages. */
/* Creates the context every command runs in. */
static bool open_ctx(kf_ctx **ctx) {
    kf_options o;
    kf_cli_options(&o); /* the environment's switches */
    kf_status st = kf_ctx_create(&o, ctx);
    if (st != KF_OK) {
        fprintf(stderr, "kfuse: cannot create a context: %s\n", kf_status_str(st));
        return false;
    }
    return true;
}

/* Flushes stdout; a failed write (disk full, closed pipe) is a runtime error. */
static int finish_stdout(int status) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "kfuse: cannot write to standard output: %s\n", strerror(errno));
        return status == KF_EXIT_OK ? KF_EXIT_RUNTIME : status;
    }
    return status;
}

/* What a command that reads one graph does with it; returns the exit status.
 * `file` is the name for messages. */
typedef int (*graph_action)(kf_graph *g, const char *file, const cli_args *a);

/* Every command that reads one graph: its arguments, a context, the parsed
 * graph, `action`, a checked flush of stdout, and the cleanup. */
static int with_graph(const cli_command *cmd, int argc, char **argv, bool takes_seed,
                      graph_action action) {
    cli_args a;
    int rc = parse_args(cmd, argc, argv, takes_seed, &a);
    if (rc >= 0)
        return rc;

    kf_ctx *ctx = NULL;
    if (!open_ctx(&ctx))
        return KF_EXIT_RUNTIME;
    kf_graph *g = NULL;
    rc = kf_cli_load_graph(ctx, a.file, &g);
    if (rc < 0)
        rc = finish_stdout(action(g, kf_cli_display_name(a.file), &a));
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* kfuse print                                                                */
/* ------------------------------------------------------------------------ */

static int print_graph(kf_graph *g, const char *file, const cli_args *a) {
    (void)a;
    kf_status st = kf_graph_print(g, stdout);
    if (st != KF_OK) {
        const char *msg = kf_graph_error(g);
        fprintf(stderr, "kfuse: cannot print %s: %s\n", file,
                msg && *msg ? msg : kf_status_str(st));
        return KF_EXIT_RUNTIME;
    }
    return KF_EXIT_OK;
}

static int cmd_print(const cli_command *cmd, int argc, char **argv) {
    return with_graph(cmd, argc, argv, false, print_graph);
}

/* ------------------------------------------------------------------------ */
/* kfuse eval                                                                 */
/* ------------------------------------------------------------------------ */

/* Refuses graphs the reference evaluator would take too long or too much
 * memory on; returns false after printing why. */
static bool eval_size_ok(const kf_graph *g, const char *file) {
    double elements = 0, macs = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const kf_tensor *t = g->nodes[i];
        double numel = (double)kf_ir_numel(t); /* each below 2^48: the builder checks */
        elements += numel;
        if (t->op == KF_OP_MATMUL && t->nsrc >= 1 && t->src[0]->rank >= 2) {
            const kf_tensor *a = t->src[0];
            double k = (double)a->dims[a->rank - (t->attr.transpose_a ? 2 : 1)];
            macs += numel * k;
        }
    }
    if (elements > KF_CLI_EVAL_MAX_ELEMENTS || macs > KF_CLI_EVAL_MAX_MACS) {
        fprintf(stderr,
                "kfuse: %s: too large for the reference evaluator (%.3g elements, %.3g "
                "multiply-adds; the limits are %.3g and %.3g): use smaller shapes\n",
                file, elements, macs, KF_CLI_EVAL_MAX_ELEMENTS, KF_CLI_EVAL_MAX_MACS);
        return false;
    }
    return true;
}

/* Binds random inputs and an output buffer for every output, evaluates, and
 * prints the summaries. Returns the exit status. */
static int eval_graph(kf_graph *g, const char *file, uint64_t seed) {
    kf_cli_bindings b;
    int rc = KF_EXIT_OK;
    if (!kf_cli_bindings_make(g, seed, file, &b)) {
        rc = KF_EXIT_RUNTIME;
    } else {
        kf_status st = kf_graph_eval(g, b.in, b.n_in, b.out, b.n_out);
        if (st != KF_OK) {
            const char *msg = kf_graph_error(g);
            fprintf(stderr, "kfuse: %s: evaluation failed: %s\n", file,
                    msg && *msg ? msg : kf_status_str(st));
            rc = KF_EXIT_RUNTIME;
        }
        for (size_t i = 0; rc == KF_EXIT_OK && i < b.n_out; i++) {
            kf_cli_print_summary(b.out[i].name, b.name_width, kf_graph_output(g, i), b.out[i].data);
            putchar('\n');
        }
    }
    kf_cli_bindings_free(&b);
    return rc;
}

static int eval_checked(kf_graph *g, const char *file, const cli_args *a) {
    if (kf_graph_verify(g) != KF_OK) {
        fprintf(stderr, "kfuse: %s: %s\n", file, kf_graph_error(g));
        return KF_EXIT_RUNTIME;
    }
    if (!eval_size_ok(g, file))
        return KF_EXIT_RUNTIME;
    return eval_graph(g, file, a->seed);
}

static int cmd_eval(const cli_command *cmd, int argc, char **argv) {
    return with_graph(cmd, argc, argv, true, eval_checked);
}

/* ------------------------------------------------------------------------ */
/* kfuse help                                                                 */
/* ------------------------------------------------------------------------ */

static int cmd_help(const cli_command *cmd, int argc, char **argv) {
    if (argc > 2)
        return usage_error(cmd, "unexpected argument '%s'", argv[2]);
    if (argc < 2) {
        print_main_help(stdout);
        return finish_stdout(KF_EXIT_OK);
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        fputs(cmd->help, stdout);
        return finish_stdout(KF_EXIT_OK);
    }
    const cli_command *target = find_command(argv[1]);
    if (!target)
        return usage_error(NULL, "unknown command '%s'", argv[1]);
    fputs(target->help, stdout);
    return finish_stdout(KF_EXIT_OK);
}

/* ------------------------------------------------------------------------ */
/* main                                                                       */
/* ------------------------------------------------------------------------ */

static const cli_command *find_command(const char *name) {
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        print_main_help(stderr);
        return KF_EXIT_USAGE;
    }
    const char *arg = argv[1];
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
        print_main_help(stdout);
        return finish_stdout(KF_EXIT_OK);
    }
    if (strcmp(arg, "-V") == 0 || strcmp(arg, "--version") == 0) {
        printf("kfuse %s\n", kf_version());
        return finish_stdout(KF_EXIT_OK);
    }
    if (arg[0] == '-')
        return usage_error(NULL, "unknown option '%s'", arg);
    const cli_command *cmd = find_command(arg);
    if (!cmd)
        return usage_error(NULL, "unknown command '%s'", arg);
    return cmd->run(cmd, argc - 1, argv + 1);
}
