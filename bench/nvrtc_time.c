/*
 * nvrtc_time.c -- how long NVRTC takes for each kernel a graph's cold
 * compile builds (issue 17: the cold first call), under several sets of
 * NVRTC flags. No GPU is needed: the recipes are made for an arch, as
 * `kfuse aot` makes them (every variant of a measured GEMM included, since a
 * cold compile builds both sides to time them), and each distinct kernel
 * (one cache key) is compiled alone, on one thread, once per flag set, in
 * turns (kernel by kernel, each set in a row), so the sets see the same
 * machine. A cold compile runs the kernels concurrently
 * (kf_cuda_kernels_cubins), so its wall time is about its slowest kernel's:
 * the "slowest" line of each set is the number that moves a first call.
 *
 *   nvrtc_time [--arch ARCH] [--reps N] [--flags "F1 F2"]... [--dump DIR]
 *              [--log] [--batch] [--no-each] [--only SUBSTR] [--source FILE.cu]...
 *              [--out FILE] FILE.kfg...
 *
 * Each --flags is one set of extra NVRTC flags after kfuse's own
 * (kf_nvrtc_options_string), space separated; the empty set (kfuse's
 * flags alone) always comes first. --reps: compiles per kernel and set, the
 * median kept (default 1). --dump: each kernel's source written to DIR.
 * --log: NVRTC's log of each compile to stderr (with --time=- in a set,
 * NVRTC's own phase times). --batch: also every distinct kernel compiled at
 * once with kfuse's own flags, as a cold compile does (kf_cuda_kernels_cubins,
 * a thread a CPU, no cache): its wall time, against the slowest kernel alone
 * (--no-each: the batch only). --only: per kernel, only the kernels whose
 * name holds SUBSTR (the batch still takes them all). --source FILE: also the
 * CUDA source FILE, named NAME.ARCH.cu as --dump and KF_DUMP_DIR write them
 * (a kernel of another commit, say, timed beside today's in the same run),
 * compiled for ARCH with kfuse's flags. Times are wall-clock (CLOCK_MONOTONIC). NVRTC
 * 12.9 and later keep what they compiled in the driver's compute cache: run
 * this with CUDA_CACHE_DISABLE=1 for real compiles (it warns otherwise).
 * JSON (one object) to stdout or --out.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "codegen/cuda/cuda_recipe.h"
#include "frontend/compile.h"
#include "fusion/fusion.h"
#include "ir/ir.h"
#include "kfuse.h"
#include "runtime/cuda_kernel.h"
#include "runtime/nvrtc.h"

enum { MAX_SETS = 8, MAX_SET_FLAGS = 8, MAX_KERNELS = 256, MAX_REPS = 15 };

typedef struct flag_set {
    char *text;                       /* the --flags argument (owned copy) */
    const char *flags[MAX_SET_FLAGS]; /* into text */
    int n;
    double total_ms, slowest_ms;
} flag_set;

typedef struct kernel_row {
    const kf_cuda_kernel *k;
    const char *graph;
    kf_cache_key key;
    double ms[MAX_SETS];
    size_t cubin[MAX_SETS];
    bool skipped; /* not timed alone (--only) */
} kernel_row;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 65536 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    *len = n;
    return buf;
}

static void split_flags(flag_set *s) {
    s->n = 0;
    for (char *tok = strtok(s->text, " "); tok && s->n < MAX_SET_FLAGS; tok = strtok(NULL, " "))
        s->flags[s->n++] = tok;
}

static void json_str(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', out);
        if ((unsigned char)*s >= 0x20)
            fputc(*s, out);
    }
    fputc('"', out);
}

int main(int argc, char **argv) {
    const char *arch = "sm_90a", *dump = NULL, *out_path = NULL, *only = NULL;
    int reps = 1;
    bool show_log = false, batch = false, each = true;
    flag_set sets[MAX_SETS] = {{0}};
    int n_sets = 1;
    sets[0].text = strdup("");
    const char *files[64], *sources[64];
    int n_files = 0, n_sources = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--arch") && i + 1 < argc) {
            arch = argv[++i];
        } else if (!strcmp(a, "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(a, "--flags") && i + 1 < argc && n_sets < MAX_SETS) {
            sets[n_sets++].text = strdup(argv[++i]);
        } else if (!strcmp(a, "--dump") && i + 1 < argc) {
            dump = argv[++i];
        } else if (!strcmp(a, "--only") && i + 1 < argc) {
            only = argv[++i];
        } else if (!strcmp(a, "--source") && i + 1 < argc && n_sources < 64) {
            sources[n_sources++] = argv[++i];
        } else if (!strcmp(a, "--out") && i + 1 < argc) {
            out_path = argv[++i];
        } else if (!strcmp(a, "--log")) {
            show_log = true;
        } else if (!strcmp(a, "--batch")) {
            batch = true;
        } else if (!strcmp(a, "--no-each")) {
            each = false;
        } else if (a[0] != '-' && n_files < 64) {
            files[n_files++] = a;
        } else {
            fprintf(stderr,
                    "usage: nvrtc_time [--arch ARCH] [--reps N] [--flags \"F...\"]... "
                    "[--dump DIR] [--log] [--source FILE.cu]... [--out FILE] FILE.kfg...\n");
            return 2;
        }
    }
    if ((!n_files && !n_sources) || reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "nvrtc_time: give at least one .kfg or --source file (and --reps 1..%d)\n",
                MAX_REPS);
        return 2;
    }
    const char *cc = getenv("CUDA_CACHE_DISABLE");
    if (!cc || strcmp(cc, "1") != 0)
        fprintf(stderr, "nvrtc_time: CUDA_CACHE_DISABLE is not 1: NVRTC may serve kernels from "
                        "the driver's compute cache, and the times are not real compiles\n");
    for (int s = 0; s < n_sets; s++)
        split_flags(&sets[s]);

    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CPU;
    kf_ctx *ctx = NULL;
    if (kf_ctx_create(&o, &ctx) != KF_OK) {
        fprintf(stderr, "nvrtc_time: kf_ctx_create failed\n");
        return 1;
    }
    kf_mem mem;
    kf_mem_resolve(&mem, NULL);
    kf_cuda_target target;
    kf_cuda_target_for_arch(arch, &target);
    target.flags = kf_cuda_recipe_flags(0, KF_GEMM_AUTO, KF_ATTENTION_AUTO);

    kernel_row *rows = calloc(MAX_KERNELS, sizeof *rows);
    kf_graph *graphs[64] = {0};
    kf_plan *plans[64] = {0};
    kf_cuda_recipes *recipes[64] = {0};
    uint32_t n_rows = 0;
    char err[KF_MSG_MAX], comp[64];
    if (!rows || kf_nvrtc_compiler_id(comp, sizeof comp) != KF_OK) {
        fprintf(stderr, "nvrtc_time: no NVRTC (or out of memory)\n");
        return 1;
    }
    for (int f = 0; f < n_files; f++) {
        size_t len = 0;
        char *text = read_file(files[f], &len);
        if (!text || kf_graph_parse(ctx, text, len, &graphs[f]) != KF_OK) {
            fprintf(stderr, "nvrtc_time: %s: %s\n", files[f],
                    graphs[f] ? kf_graph_error(graphs[f]) : "cannot read");
            return 1;
        }
        free(text);
        kf_plan_options popt;
        kf_plan_options_for_flags(0, &popt);
        if (kf_plan_create(graphs[f], &popt, &plans[f]) != KF_OK ||
            kf_cuda_recipes_create(plans[f], &target, &mem, &recipes[f], err) != KF_OK) {
            fprintf(stderr, "nvrtc_time: %s: no plan or recipes: %s\n", files[f],
                    plans[f] ? err : kf_graph_error(graphs[f]));
            return 1;
        }
        const kf_cuda_recipes *r = recipes[f];
        for (uint32_t gi = 0; gi < r->n; gi++)
            for (uint32_t s = 0; s < r->recipes[gi].n_steps; s++) {
                const kf_cuda_step *st = &r->recipes[gi].steps[s];
                if (st->kind != KF_CUDA_STEP_KERNEL || n_rows >= MAX_KERNELS)
                    continue;
                kernel_row *row = &rows[n_rows];
                row->k = &st->kernel->kernel;
                row->graph = files[f];
                if (kf_cuda_kernel_cache_key(row->k, comp, &row->key, err) != KF_OK)
                    continue;
                bool dup = false;
                for (uint32_t j = 0; j < n_rows && !dup; j++)
                    dup = !memcmp(rows[j].key.bytes, row->key.bytes, sizeof row->key.bytes);
                if (!dup)
                    n_rows++;
            }
    }
    /* Sources from files: the kernel a row names lives in src_kernels. */
    kf_cuda_kernel *src_kernels = calloc((size_t)n_sources + 1, sizeof *src_kernels);
    if (!src_kernels)
        return 1;
    for (int f = 0; f < n_sources && n_rows < MAX_KERNELS; f++) {
        const char *base = strrchr(sources[f], '/');
        char name[KF_CUDA_NAME_MAX];
        snprintf(name, sizeof name, "%s", base ? base + 1 : sources[f]);
        char *dot = strchr(name, '.'), *dot2 = dot ? strchr(dot + 1, '.') : NULL;
        size_t len = 0;
        char *text = dot && dot2 && !strcmp(dot2, ".cu") ? read_file(sources[f], &len) : NULL;
        if (!text) {
            fprintf(stderr, "nvrtc_time: %s: cannot read, or not named NAME.ARCH.cu\n", sources[f]);
            return 1;
        }
        *dot = *dot2 = 0;
        kf_cuda_kernel *k = &src_kernels[f];
        k->source = text; /* freed at the end */
        k->source_len = len;
        snprintf(k->name, sizeof k->name, "%s", name);
        snprintf(k->arch, sizeof k->arch, "%s", dot + 1);
        rows[n_rows].k = k;
        rows[n_rows++].graph = sources[f];
    }
    double batch_ms = -1;
    if (batch && n_rows) {
        kf_cuda_cubin *jobs = calloc(n_rows, sizeof *jobs);
        if (!jobs)
            return 1;
        for (uint32_t i = 0; i < n_rows; i++)
            jobs[i].kernel = rows[i].k;
        double t0 = now_ms();
        kf_status st = kf_cuda_kernels_cubins(NULL, &mem, jobs, n_rows, 0, err);
        batch_ms = now_ms() - t0;
        if (st != KF_OK)
            fprintf(stderr, "nvrtc_time: the batch: %s\n", err);
        for (uint32_t i = 0; i < n_rows; i++)
            kf_cuda_cubin_release(NULL, &mem, &jobs[i]);
        free(jobs);
        fprintf(stderr, "batch of %u kernels at once: %.0f ms\n", n_rows, batch_ms);
    }
    for (uint32_t i = 0; i < n_rows && each; i++) {
        const kf_cuda_kernel *k = rows[i].k;
        rows[i].skipped = only && !strstr(k->name, only);
        if (rows[i].skipped)
            continue;
        if (dump && kf_nvrtc_dump_source(dump, k->name, k->arch, k->source, k->source_len, err))
            fprintf(stderr, "nvrtc_time: %s\n", err);
        for (int s = 0; s < n_sets; s++) {
            double t[MAX_REPS];
            for (int r = 0; r < reps; r++) {
                kf_nvrtc_options no;
                kf_cuda_kernel_compile_options(k, &no);
                no.extra = sets[s].flags;
                no.n_extra = sets[s].n;
                kf_nvrtc_result res;
                double t0 = now_ms();
                kf_status st = kf_nvrtc_compile(&mem, k->source, k->source_len, &no, &res, err);
                t[r] = now_ms() - t0;
                if (st != KF_OK) {
                    fprintf(stderr, "nvrtc_time: %s with [%s]: %s\n", k->name,
                            sets[s].n ? sets[s].flags[0] : "", err);
                    t[r] = -1;
                }
                rows[i].cubin[s] = res.cubin_size;
                if (show_log && res.log && res.log[0])
                    fprintf(stderr, "---- %s set %d\n%s\n", k->name, s, res.log);
                kf_nvrtc_result_release(&mem, &res);
            }
            qsort(t, (size_t)reps, sizeof *t, cmp_double);
            rows[i].ms[s] = t[reps / 2];
            sets[s].total_ms += t[reps / 2];
            if (t[reps / 2] > sets[s].slowest_ms)
                sets[s].slowest_ms = t[reps / 2];
        }
        fprintf(stderr, "%-64s %7zu B", k->name, k->source_len);
        for (int s = 0; s < n_sets; s++)
            fprintf(stderr, " %8.0f", rows[i].ms[s]);
        fputc('\n', stderr);
    }

    FILE *out = out_path ? fopen(out_path, "w") : stdout;
    if (!out)
        return 1;
    fprintf(out, "{\"schema\": \"kfuse.nvrtc_time/1\", \"compiler\": ");
    json_str(out, comp);
    fprintf(out, ", \"arch\": ");
    json_str(out, arch);
    fprintf(out, ", \"reps\": %d, \"kernels_distinct\": %u, \"batch_ms\": %.1f,\n \"sets\": [",
            reps, n_rows, batch_ms);
    for (int s = 0; s < n_sets; s++) {
        fprintf(out, "%s{\"flags\": [", s ? ", " : "");
        for (int j = 0; j < sets[s].n; j++) {
            fputs(j ? ", " : "", out);
            json_str(out, sets[s].flags[j]);
        }
        fprintf(out, "], \"total_ms\": %.1f, \"slowest_ms\": %.1f}", sets[s].total_ms,
                sets[s].slowest_ms);
    }
    fprintf(out, "],\n \"kernels\": [");
    for (uint32_t i = 0; i < n_rows; i++) {
        fprintf(out, "%s\n  {\"graph\": ", i ? "," : "");
        json_str(out, rows[i].graph);
        fprintf(out, ", \"kernel\": ");
        json_str(out, rows[i].k->name);
        fprintf(out, ", \"source_bytes\": %zu, \"ms\": [", rows[i].k->source_len);
        int shown = each && !rows[i].skipped ? n_sets : 0;
        for (int s = 0; s < shown; s++)
            fprintf(out, "%s%.1f", s ? ", " : "", rows[i].ms[s]);
        fprintf(out, "], \"cubin_bytes\": [");
        for (int s = 0; s < shown; s++)
            fprintf(out, "%s%zu", s ? ", " : "", rows[i].cubin[s]);
        fputs("]}", out);
    }
    fprintf(out, "\n]}\n");
    if (out != stdout)
        fclose(out);
    for (int f = 0; f < n_files; f++) {
        kf_cuda_recipes_destroy(recipes[f]);
        kf_plan_destroy(plans[f]);
        kf_graph_destroy(graphs[f]);
    }
    for (int s = 0; s < n_sets; s++)
        free(sets[s].text);
    for (int f = 0; f < n_sources; f++)
        free((char *)src_kernels[f].source);
    free(src_kernels);
    free(rows);
    kf_ctx_destroy(ctx);
    return 0;
}
