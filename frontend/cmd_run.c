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

#include "frontend/cmd_run.h"
#include "ir/ir.h"
#include "kfuse.h"

const char kf_cmd_run_summary[] =
    "compile a .kfg graph, run it on random inputs, optionally --check it";

const char kf_cmd_run_help[] =
    "usage: kfuse run FILE [--target cpu|cuda|auto] [--check] [--seed N] [--report]\n"
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
    "  -h, --help   show this help\n";

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* As kfuse eval: floats in [-1, 1), i32 in [-8, 8], bool 0/1. */
static double random_value(kf_dtype d, uint64_t *state) {
    switch (d) {
    case KF_DTYPE_F64:
        return (double)(splitmix64(state) >> 11) * 0x1.0p-52 - 1.0;
    case KF_DTYPE_I32:
        return (double)(splitmix64(state) % 17) - 8.0;
    case KF_DTYPE_BOOL:
        return (double)(splitmix64(state) >> 63);
    default:
        return (double)(splitmix64(state) >> 40) * 0x1.0p-23 - 1.0;
    }
}

static double tolerance(kf_dtype d) {
    switch (d) {
    case KF_DTYPE_F64:
        return 1e-12;
    case KF_DTYPE_F32:
        return 1e-5;
    case KF_DTYPE_F16:
        return 2e-3;
    case KF_DTYPE_BF16:
        return 1.6e-2;
    default:
        return 0.0;
    }
}

/* The tolerance of output t: that of the least precise float dtype stored on
 * the way to it (an f32 output computed through bf16 intermediates carries
 * their rounding), never tighter than its own. */
static double path_tolerance(const kf_graph *g, const kf_tensor *out) {
    double tol = tolerance(out->dtype);
    bool *seen = calloc(g->n_nodes ? g->n_nodes : 1, sizeof *seen);
    uint32_t *stack = malloc(sizeof *stack * (g->n_nodes ? g->n_nodes : 1));
    if (!seen || !stack) {
        free(seen);
        free(stack);
        return tol;
    }
    uint32_t sp = 0;
    stack[sp++] = out->id;
    seen[out->id] = true;
    while (sp) {
        const kf_tensor *t = g->nodes[stack[--sp]];
        if (kf_dtype_is_float(t->dtype) && t->op != KF_OP_INPUT && t->op != KF_OP_CONST &&
            tolerance(t->dtype) > tol)
            tol = tolerance(t->dtype);
        for (int k = 0; k < t->nsrc; k++) {
            if (!seen[t->src[k]->id]) {
                seen[t->src[k]->id] = true;
                stack[sp++] = t->src[k]->id;
            }
        }
    }
    free(seen);
    free(stack);
    return tol;
}

static double rel_err(const void *out, const void *ref, kf_dtype d, int64_t n) {
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double o = kf_ir_load(out, d, i), r = kf_ir_load(ref, d, i);
        if (isnan(o) || isnan(r))
            return INFINITY;
        if (o == r) {
            if (isfinite(r))
                den += r * r;
            continue;
        }
        if (!isfinite(o) || !isfinite(r))
            return INFINITY;
        num += (o - r) * (o - r);
        den += r * r;
    }
    return den == 0.0 ? sqrt(num) : sqrt(num) / sqrt(den);
}

static void summary(const char *name, int w, const kf_tensor *t, const void *data) {
    kf_dtype d = kf_tensor_dtype(t);
    int64_t n = kf_tensor_numel(t), nans = 0, infs = 0, fin = 0;
    double lo = INFINITY, hi = -INFINITY, sum = 0, sq = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = kf_ir_load(data, d, i);
        if (isnan(v)) {
            nans++;
        } else if (isinf(v)) {
            infs++;
        } else {
            fin++;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
            sum += v;
            sq += v * v;
        }
    }
    char type[256];
    kf_ir_type_str(t, type, sizeof type);
    printf("%-*s  %s  ", w, name, type);
    if (fin)
        printf("min=%.6g max=%.6g mean=%.6g l2=%.6g", lo, hi, sum / (double)fin, sqrt(sq));
    else
        printf("min=- max=- mean=- l2=-");
    printf(" nan=%" PRId64 " inf=%" PRId64, nans, infs);
}

static char *read_all(const char *file, size_t *len) {
    FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap)
            break;
        if (cap >= ((size_t)64 << 20)) {
            free(buf);
            buf = NULL;
            break;
        }
        char *nb = realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    bool bad = ferror(f);
    if (f != stdin)
        fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static int run_graph(kf_ctx *ctx, kf_graph *g, const char *file, uint64_t seed, bool check,
                     bool report) {
    size_t n_in = kf_graph_input_count(g), n_out = kf_graph_output_count(g);
    kf_binding *in = calloc(n_in ? n_in : 1, sizeof *in);
    kf_binding *out = calloc(n_out ? n_out : 1, sizeof *out);
    kf_binding *ref = calloc(n_out ? n_out : 1, sizeof *ref);
    kf_program *p = NULL;
    int rc = 0;
    uint64_t state = seed;
    if (!in || !out || !ref) {
        fprintf(stderr, "kfuse: %s: out of memory\n", file);
        rc = 1;
        goto done;
    }
    for (size_t i = 0; i < n_in; i++) {
        const kf_tensor *t = kf_graph_input(g, i);
        kf_dtype d = kf_tensor_dtype(t);
        int64_t n = kf_tensor_numel(t);
        in[i].name = kf_tensor_name(t);
        in[i].size = (size_t)n * kf_dtype_size(d);
        in[i].data = malloc(in[i].size ? in[i].size : 1);
        if (!in[i].data) {
            rc = 1;
            goto done;
        }
        for (int64_t e = 0; e < n; e++)
            kf_ir_store(in[i].data, d, e, random_value(d, &state));
    }
    int w = 0;
    for (size_t i = 0; i < n_out; i++) {
        const kf_tensor *t = kf_graph_output(g, i);
        out[i].name = ref[i].name = kf_graph_output_name(g, i);
        out[i].size = ref[i].size = (size_t)kf_tensor_numel(t) * kf_dtype_size(kf_tensor_dtype(t));
        out[i].data = malloc(out[i].size ? out[i].size : 1);
        ref[i].data = check ? malloc(ref[i].size ? ref[i].size : 1) : NULL;
        if (!out[i].data || (check && !ref[i].data)) {
            rc = 1;
            goto done;
        }
        memset(out[i].data, 0xff, out[i].size); /* poison: NaN in every float dtype */
        int l = (int)strlen(out[i].name);
        w = l > w ? l : w;
    }
    kf_status st = kf_compile(ctx, g, &p);
    if (st != KF_OK) {
        fprintf(stderr, "kfuse: %s: compile failed: %s\n", file,
                *kf_graph_error(g) ? kf_graph_error(g) : kf_status_str(st));
        rc = 1;
        goto done;
    }
    if (report)
        kf_program_report(p, KF_REPORT_TEXT, stderr);
    st = kf_program_run(p, in, n_in, out, n_out, NULL);
    if (st != KF_OK) {
        fprintf(stderr, "kfuse: %s: run failed: %s\n", file, kf_program_error(p));
        rc = 1;
        goto done;
    }
    if (check) {
        st = kf_graph_eval(g, in, n_in, ref, n_out);
        if (st != KF_OK) {
            fprintf(stderr, "kfuse: %s: reference evaluation failed: %s\n", file,
                    kf_graph_error(g));
            rc = 1;
            goto done;
        }
    }
    for (size_t i = 0; i < n_out; i++) {
        const kf_tensor *t = kf_graph_output(g, i);
        summary(out[i].name, w, t, out[i].data);
        if (check) {
            kf_dtype d = kf_tensor_dtype(t);
            double e = rel_err(out[i].data, ref[i].data, d, kf_tensor_numel(t));
            double tol = path_tolerance(g, t);
            bool ok = e <= tol;
            printf("  rel_err=%.3g (tol %.3g) %s", e, tol, ok ? "ok" : "MISMATCH");
            if (!ok)
                rc = 1;
        }
        printf("\n");
    }
    if (rc != 0)
        fprintf(stderr,
                "kfuse: %s: output differs from the reference evaluator (seed %" PRIu64 ")\n", file,
                seed);
done:
    kf_program_destroy(p);
    for (size_t i = 0; in && i < n_in; i++)
        free(in[i].data);
    for (size_t i = 0; out && i < n_out; i++) {
        free(out[i].data);
        free(ref[i].data);
    }
    free(in);
    free(out);
    free(ref);
    return rc;
}

int kf_cmd_run(int argc, char **argv) {
    const char *file = NULL;
    uint64_t seed = 0;
    bool check = false, report = false;
    kf_target target = KF_TARGET_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(kf_cmd_run_help, stdout);
            return 0;
        } else if (strcmp(a, "--check") == 0) {
            check = true;
        } else if (strcmp(a, "--report") == 0) {
            report = true;
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
    size_t len = 0;
    char *text = read_all(file, &len);
    if (!text) {
        fprintf(stderr, "kfuse: %s: cannot read: %s\n", file, strerror(errno));
        return 2;
    }
    kf_options o;
    kf_options_init(&o);
    o.target = target;
    kf_ctx *ctx = NULL;
    kf_graph *g = NULL;
    int rc = 0;
    if (kf_ctx_create(&o, &ctx) != KF_OK) {
        fprintf(stderr, "kfuse: out of memory\n");
        free(text);
        return 1;
    }
    kf_status st = kf_graph_parse(ctx, text, len, &g);
    free(text);
    if (st != KF_OK) {
        fprintf(stderr, "%s:%s\n", file, g ? kf_graph_error(g) : " out of memory");
        rc = 2;
    } else if (kf_graph_verify(g) != KF_OK) {
        fprintf(stderr, "kfuse: %s: %s\n", file, kf_graph_error(g));
        rc = 1;
    } else {
        rc = run_graph(ctx, g, file, seed, check, report);
    }
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    return rc;
}
