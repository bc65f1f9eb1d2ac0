/*
 * cli.c -- the pieces every `kfuse` command shares (see cli.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "frontend/cli.h"

const char *kf_cli_display_name(const char *path) {
    return strcmp(path, "-") == 0 ? "<stdin>" : path;
}

bool kf_cli_read_file(const char *path, char **text, size_t *len) {
    bool is_stdin = strcmp(path, "-") == 0;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    const char *why = NULL;
    int err = 0;
    char *buf = NULL;
    size_t n = 0, cap = 0;

    if (!f) {
        err = errno;
        goto fail;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        err = EISDIR;
        goto fail;
    }
    for (;;) {
        if (n == cap) {
            if (cap >= KF_CLI_MAX_INPUT) {
                why = "larger than 64 MiB";
                goto fail;
            }
            size_t ncap = cap ? cap * 2 : 64 * 1024;
            char *nbuf = realloc(buf, ncap);
            if (!nbuf) {
                err = ENOMEM;
                goto fail;
            }
            buf = nbuf;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                err = errno ? errno : EIO;
                goto fail;
            }
            break;
        }
    }
    if (!is_stdin)
        fclose(f);
    *text = buf;
    *len = n;
    return true;

fail:
    fprintf(stderr, "kfuse: cannot read %s: %s\n", kf_cli_display_name(path),
            why ? why : strerror(err));
    if (f && !is_stdin)
        fclose(f);
    free(buf);
    return false;
}

bool kf_cli_gemm_mode(const char *s, kf_gemm_mode *out) {
    static const char *const names[KF_GEMM_COUNT] = {"auto", "generated", "cublaslt",
                                                         "measured", "sm80"};
    for (int i = 0; i < KF_GEMM_COUNT; i++) {
        if (s && strcmp(s, names[i]) == 0) {
            *out = (kf_gemm_mode)i;
            return true;
        }
    }
    return false;
}

bool kf_cli_attention_mode(const char *s, kf_attention_mode *out) {
    static const char *const names[KF_ATTENTION_COUNT] = {"auto", "sm90", "fa2", "unfused",
                                                                 "decode"};
    for (int i = 0; i < KF_ATTENTION_COUNT; i++) {
        if (s && strcmp(s, names[i]) == 0) {
            *out = (kf_attention_mode)i;
            return true;
        }
    }
    return false;
}

int kf_cli_load_graph(kf_ctx *ctx, const char *path, kf_graph **out) {
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    if (!kf_cli_read_file(path, &text, &len))
        return KF_EXIT_USAGE;
    kf_graph *g = NULL;
    kf_status st = kf_graph_parse(ctx, text, len, &g);
    free(text);
    if (st == KF_OK) {
        *out = g;
        return -1;
    }
    if (!g) {
        fprintf(stderr, "kfuse: %s: %s\n", kf_cli_display_name(path), kf_status_str(st));
        return KF_EXIT_RUNTIME;
    }
    const char *msg = kf_graph_error(g);
    fprintf(stderr, "%s:%s\n", kf_cli_display_name(path), msg && *msg ? msg : kf_status_str(st));
    kf_graph_destroy(g);
    return st == KF_ERR_OUT_OF_MEMORY ? KF_EXIT_RUNTIME : KF_EXIT_USAGE;
}

/* splitmix64 (Steele, Lea, Flood 2014): a tiny generator whose stream depends
 * only on the seed, the same on every platform and C library. */
static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* One random element of dtype `d`, as a double that kf_ir_store then rounds:
 * floats uniform in [-1, 1) from 24 bits (exact in f32; f16 and bf16 round to
 * nearest even as they are stored), f64 from 53 bits, i32 in [-8, 8], bool 0/1. */
static double random_value(kf_dtype d, uint64_t *state) {
    switch (d) {
    case KF_DTYPE_F64:
        return (double)(splitmix64(state) >> 11) * 0x1.0p-52 - 1.0;
    case KF_DTYPE_I32:
        return (double)(splitmix64(state) % 17) - 8.0;
    case KF_DTYPE_BOOL:
        return (double)(splitmix64(state) >> 63);
    case KF_DTYPE_I64:
        return (double)(splitmix64(state) % 17) - 8.0;
    default:
        return (double)(splitmix64(state) >> 40) * 0x1.0p-23 - 1.0;
    }
}

bool kf_cli_bindings_make(const kf_graph *g, uint64_t seed, const char *file, kf_cli_bindings *b) {
    memset(b, 0, sizeof *b);
    b->n_in = kf_graph_input_count(g);
    b->n_out = kf_graph_output_count(g);
    b->in = calloc(b->n_in ? b->n_in : 1, sizeof *b->in);
    b->out = calloc(b->n_out ? b->n_out : 1, sizeof *b->out);
    if (!b->in || !b->out)
        goto oom;
    uint64_t state = seed;
    for (size_t i = 0; i < b->n_in; i++) {
        const kf_tensor *t = kf_graph_input(g, i);
        kf_dtype d = kf_tensor_dtype(t);
        int64_t numel = kf_tensor_numel(t);
        b->in[i].name = kf_tensor_name(t);
        b->in[i].size = (size_t)numel * kf_dtype_size(d);
        b->in[i].data = malloc(b->in[i].size ? b->in[i].size : 1);
        if (!b->in[i].data)
            goto oom;
        /* indices of a gather: uniform in its axis's range */
        int64_t bound = kf_ir_index_bound(g, t);
        for (int64_t e = 0; e < numel; e++)
            kf_ir_store(b->in[i].data, d, e,
                        bound ? (double)(splitmix64(&state) % (uint64_t)bound)
                              : random_value(d, &state));
    }
    for (size_t i = 0; i < b->n_out; i++) {
        const kf_tensor *t = kf_graph_output(g, i);
        b->out[i].name = kf_graph_output_name(g, i);
        b->out[i].size = (size_t)kf_tensor_numel(t) * kf_dtype_size(kf_tensor_dtype(t));
        b->out[i].data = malloc(b->out[i].size ? b->out[i].size : 1);
        if (!b->out[i].data)
            goto oom;
        memset(b->out[i].data, 0xff, b->out[i].size);
        int w = (int)strlen(b->out[i].name);
        b->name_width = w > b->name_width ? w : b->name_width;
    }
    return true;
oom:
    fprintf(stderr, "kfuse: %s: out of memory for the inputs and outputs\n", file);
    return false;
}

void kf_cli_bindings_free(kf_cli_bindings *b) {
    for (size_t i = 0; b->in && i < b->n_in; i++)
        free(b->in[i].data);
    for (size_t i = 0; b->out && i < b->n_out; i++)
        free(b->out[i].data);
    free(b->in);
    free(b->out);
    memset(b, 0, sizeof *b);
}

void kf_cli_print_summary(const char *name, int name_width, const kf_tensor *t, const void *data) {
    kf_dtype d = kf_tensor_dtype(t);
    int64_t numel = kf_tensor_numel(t);
    int64_t nan_count = 0, inf_count = 0, finite = 0;
    double lo = INFINITY, hi = -INFINITY, sum = 0, sumsq = 0;
    for (int64_t i = 0; i < numel; i++) {
        double v = kf_ir_load(data, d, i);
        if (isnan(v)) {
            nan_count++;
        } else if (isinf(v)) {
            inf_count++;
        } else {
            finite++;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
            sum += v;
            sumsq += v * v;
        }
    }
    char type[256];
    kf_ir_type_str(t, type, sizeof type);
    printf("%-*s  %s  ", name_width, name, type);
    if (finite > 0)
        printf("min=%.6g max=%.6g mean=%.6g l2=%.6g", lo, hi, sum / (double)finite, sqrt(sumsq));
    else
        printf("min=- max=- mean=- l2=-");
    printf(" nan=%" PRId64 " inf=%" PRId64, nan_count, inf_count);
}

const char *kf_cli_env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

bool kf_cli_env_on(const char *name) {
    const char *v = kf_cli_env(name);
    return v && strcmp(v, "0") != 0;
}

/* $name as an integer in [lo, hi] into *out; a bad value is noted, not used. */
static void env_int(const char *name, int lo, int hi, int *out) {
    const char *v = kf_cli_env(name);
    if (!v)
        return;
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || *end || n < lo || n > hi) {
        fprintf(stderr, "kfuse: ignoring %s=%s (want an integer from %d to %d)\n", name, v, lo, hi);
        return;
    }
    *out = (int)n;
}

bool kf_cli_choice_margin(const char *s, double *out) {
    char *end = NULL;
    errno = 0;
    double m = s && *s ? strtod(s, &end) : -1.0;
    if (errno || !end || *end || !(m >= 0.0 && m < 1.0))
        return false;
    *out = m;
    return true;
}

void kf_cli_options(kf_options *o) {
    kf_options_init(o);
    o->cache_dir = kf_cli_env("KF_CACHE_DIR");
    o->dump_dir = kf_cli_env("KF_DUMP_DIR");
    o->cublaslt_lib = kf_cli_env("KF_CUBLASLT_LIB");
    env_int("KF_NUM_THREADS", 1, 64, &o->num_threads);
    env_int("KF_CPU_OPT", 0, 3, &o->cpu_opt_level);
    env_int("KF_TIERED_COMPILE", 0, 1, &o->tiered_compile);
    const char *margin = kf_cli_env("KF_CHOICE_MARGIN");
    if (margin && !kf_cli_choice_margin(margin, &o->choice_margin))
        fprintf(stderr, "kfuse: ignoring KF_CHOICE_MARGIN=%s (want a number from 0 to below 1)\n",
                margin);
    const char *bias = kf_cli_env("KF_CHOICE_LOAD_BIAS");
    if (bias && !kf_cli_choice_margin(bias, &o->choice_load_bias))
        fprintf(stderr,
                "kfuse: ignoring KF_CHOICE_LOAD_BIAS=%s (want a number from 0 to below 1)\n", bias);
    if (kf_cli_env_on("KF_DEBUG"))
        o->flags |= KF_FLAG_DEBUG_PASSES;
    const char *graph = kf_cli_env("KF_CUDA_GRAPH");
    if (graph && strcmp(graph, "0") == 0)
        o->flags |= KF_FLAG_NO_CUDA_GRAPH;
    if (kf_cli_env_on("KF_CPU_NO_REUSE"))
        o->flags |= KF_FLAG_CPU_KEEP_BUFFERS;
    if (kf_cli_env_on("KF_DUMP_IR"))
        o->flags |= KF_FLAG_DUMP_LLVM_IR;
    if (kf_cli_env_on("KF_CPU_TIMING"))
        o->flags |= KF_FLAG_CPU_TIMING;
}
