/*
 * cli.h -- what every `kfuse` command shares: reading a file (or stdin) with
 * the CLI's size limit and error message, parsing it into a graph with
 * FILE:LINE:COL errors, the deterministic random inputs `eval` and `run` bind
 * (so the same seed gives the same numbers on every machine), and the summary
 * line printed per output.
 */
#ifndef KF_FRONTEND_CLI_H
#define KF_FRONTEND_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/ir.h"

/* Exit statuses every command uses. */
enum { KF_EXIT_OK = 0, KF_EXIT_RUNTIME = 1, KF_EXIT_USAGE = 2 };

/* Inputs larger than this are refused (a .kfg is small; this keeps a mistaken
 * path such as a device or a huge log from being slurped). */
#define KF_CLI_MAX_INPUT ((size_t)64 << 20)

/* "<stdin>" for "-", else the path. */
const char *kf_cli_display_name(const char *path);

/* Reads all of `path` ("-": stdin) into a malloc'd buffer. On failure prints
 * `kfuse: cannot read FILE: REASON` to stderr and returns false. */
bool kf_cli_read_file(const char *path, char **text, size_t *len);

/* The GEMM mode named `s` ("auto", "generated", "cublaslt", "measured");
 * false for another name. */
bool kf_cli_gemm_mode(const char *s, kf_gemm_mode *out);
/* s as kf_options.choice_margin (or choice_load_bias): a number in [0, 1) (a fraction: 0.05 is
 * 5%); false for anything else. */
bool kf_cli_choice_margin(const char *s, double *out);
/* --attention's value: "auto", "sm90", "fa2", "unfused" or "decode"; false for another. */
bool kf_cli_attention_mode(const char *s, kf_attention_mode *out);

/* Reads and parses `path` in `ctx`. Returns -1 with *out set, else the exit
 * status after printing why (parse errors as FILE:LINE:COL: message). */
int kf_cli_load_graph(kf_ctx *ctx, const char *path, kf_graph **out);

/* Host buffers for every input (random, from `seed`: floats uniform in
 * [-1, 1), i32 in [-8, 8], bool 0/1, through splitmix64) and every output
 * (poisoned with 0xff bytes: NaN in every float dtype). */
typedef struct kf_cli_bindings {
    kf_binding *in, *out;
    size_t n_in, n_out;
    int name_width; /* the longest output name, for aligned summaries */
} kf_cli_bindings;

/* Returns false (after printing "kfuse: FILE: out of memory") on failure;
 * kf_cli_bindings_free is safe either way. */
bool kf_cli_bindings_make(const kf_graph *g, uint64_t seed, const char *file, kf_cli_bindings *b);
void kf_cli_bindings_free(kf_cli_bindings *b);

/* Prints `NAME TYPE min=.. max=.. mean=.. l2=.. nan=N inf=N` (no newline). */
void kf_cli_print_summary(const char *name, int name_width, const kf_tensor *t, const void *data);

/* The environment's switches. The library reads no environment variable of
 * its own; the CLI maps these onto kf_options (README: "Switches"):
 *   KF_CACHE_DIR -> cache_dir        KF_DUMP_DIR -> dump_dir
 *   KF_CUBLASLT_LIB -> cublaslt_lib  KF_NUM_THREADS -> num_threads
 *   KF_CPU_OPT=0..3 -> cpu_opt_level KF_DEBUG=1 -> KF_FLAG_DEBUG_PASSES
 *   KF_CUDA_GRAPH=0 -> KF_FLAG_NO_CUDA_GRAPH
 *   KF_CPU_NO_REUSE=1 -> KF_FLAG_CPU_KEEP_BUFFERS
 *   KF_DUMP_IR=1 -> KF_FLAG_DUMP_LLVM_IR   KF_CPU_TIMING=1 -> KF_FLAG_CPU_TIMING
 * The strings stay the environment's (valid for the process's life). A value
 * that does not parse is ignored with a note on stderr. */
void kf_cli_options(kf_options *o);
/* $name when set and non-empty, else NULL. */
const char *kf_cli_env(const char *name);
/* True when $name is set, non-empty and not "0". */
bool kf_cli_env_on(const char *name);

#endif /* KF_FRONTEND_CLI_H */
