/*
 * cpu_bench.c -- the CPU backend's benchmark (not a test: nothing here
 * asserts a speed). Measures, in one run on one machine:
 *
 *   copy       memcpy bandwidth of a 256 MiB buffer (read + write bytes / s):
 *              the roofline the memory-bound kernels are compared with
 *   ew_chain   y = relu(x * s + b) * t + x over f32[4096, 4096]
 *   rms_norm   rms_norm over f32[8192, 4096]
 *   gemm       f32 C = A.B at 1024^3 and 2048^3, kfuse vs OpenBLAS sgemm,
 *              with 1 thread and with every thread
 *   compile    cold JIT compile of a one-kernel elementwise graph (no cache),
 *              and the warm load of the same program from the disk cache
 *
 * Every figure is the median of several timed runs after a warm-up. Results
 * go to stdout and, as JSON naming the CPU and the commit, to --out FILE
 * (to record a run: bench/results/cpu-<cpu>-<commit>.json), else to
 * $TMPDIR/cpu_bench-<cpu>-<commit>.json: a run never writes into the checkout
 * unless told to.
 *
 *   cpu_bench [--out FILE] [--threads N] [--gemm-only] [--quick] [-h|--help]
 *
 * --quick runs every part at small sizes with few repetitions: it checks the
 * bench runs and writes where it should (the test suite's cpu_bench_args);
 * its figures mean nothing.
 */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kfuse.h"
#include "runtime/cpu/cpu.h"

#ifndef KF_BENCH_COMMIT
#define KF_BENCH_COMMIT "unknown"
#endif

#ifdef KF_HAVE_OPENBLAS
/* OpenBLAS's CBLAS, declared here so the bench needs only the library. */
enum { CblasRowMajor = 101, CblasNoTrans = 111 };
void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                 int lda, const float *b, int ldb, float beta, float *c, int ldc);
void openblas_set_num_threads(int n);
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static float *rand_f32(size_t n) {
    float *p = malloc(n * sizeof *p);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; p && i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = (float)((double)(s >> 40) * 0x1.0p-24 - 0.5);
    }
    return p;
}

typedef struct copy_part {
    char *dst;
    const char *src;
    size_t n;
} copy_part;

static void *copy_thread(void *arg) {
    copy_part *c = arg;
    memcpy(c->dst, c->src, c->n);
    return NULL;
}

/* memcpy of n bytes split across `nt` threads (the kernels' thread count). */
static void copy_mt(char *dst, const char *src, size_t n, int nt) {
    pthread_t th[64];
    copy_part parts[64];
    size_t chunk = (n / (size_t)nt + 63) & ~(size_t)63;
    for (int i = 0; i < nt; i++) {
        size_t off = (size_t)i * chunk, len = off >= n ? 0 : (n - off < chunk ? n - off : chunk);
        parts[i] = (copy_part){dst + off, src + off, len};
        pthread_create(&th[i], NULL, copy_thread, &parts[i]);
    }
    for (int i = 0; i < nt; i++)
        pthread_join(th[i], NULL);
}

static kf_ctx *make_ctx(const char *cache_dir, unsigned flags, int threads) {
    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CPU;
    o.cache_dir = cache_dir;
    o.flags = flags;
    o.num_threads = threads; /* 0: one per core */
    kf_ctx *ctx = NULL;
    if (kf_ctx_create(&o, &ctx) != KF_OK)
        exit(1);
    return ctx;
}

static kf_program *compile_text(kf_ctx *ctx, const char *text, kf_graph **g, double *secs) {
    if (kf_graph_parse(ctx, text, strlen(text), g) != KF_OK) {
        fprintf(stderr, "parse: %s\n", kf_graph_error(*g));
        exit(1);
    }
    kf_program *p = NULL;
    double t0 = now();
    if (kf_compile(ctx, *g, &p) != KF_OK) {
        fprintf(stderr, "compile: %s\n", kf_graph_error(*g));
        exit(1);
    }
    if (secs)
        *secs = now() - t0;
    return p;
}

/* Median seconds of `reps` runs of p after one warm-up. */
static double time_program(kf_program *p, const kf_binding *in, size_t nin, const kf_binding *out,
                           int reps) {
    double t[64];
    kf_program_run(p, in, nin, out, 1, NULL);
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        if (kf_program_run(p, in, nin, out, 1, NULL) != KF_OK) {
            fprintf(stderr, "run: %s\n", kf_program_error(p));
            exit(1);
        }
        t[r] = now() - t0;
    }
    return median(t, reps);
}

static const char usage_text[] =
    "usage: cpu_bench [--out FILE] [--threads N] [--gemm-only] [--quick]\n"
    "\n"
    "Measures the CPU backend: copy bandwidth, an elementwise chain, rms_norm, f32\n"
    "GEMMs against OpenBLAS (1 thread and all), cold and warm compile. Prints the\n"
    "figures and writes them as JSON.\n"
    "\n"
    "options:\n"
    "  --out FILE    the JSON file (to record a run in the checkout:\n"
    "                bench/results/cpu-<cpu>-<commit>.json); default\n"
    "                $TMPDIR/cpu_bench-<cpu>-<commit>.json\n"
    "  --threads N   threads for every kernel (default: one per CPU)\n"
    "  --gemm-only   only the GEMMs\n"
    "  --quick       every part at small sizes, few repetitions: checks that\n"
    "                the bench runs (its figures mean nothing)\n"
    "  -h, --help    show this help\n";

int main(int argc, char **argv) {
    const char *out = NULL;
    int threads = 0;
    bool gemm_only = false, quick = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(usage_text, stdout);
            return 0;
        } else if ((strcmp(argv[i], "--out") == 0 || strcmp(argv[i], "--threads") == 0) &&
                   (i + 1 >= argc || !argv[i + 1][0])) {
            fprintf(stderr, "cpu_bench: %s needs a value\n%s", argv[i], usage_text);
            return 2;
        } else if (strcmp(argv[i], "--out") == 0) {
            out = argv[++i];
        } else if (strcmp(argv[i], "--threads") == 0) {
            char *end = NULL;
            long n = strtol(argv[++i], &end, 10);
            if (!end || *end || n < 1 || n > 64) {
                fprintf(stderr, "cpu_bench: --threads takes 1..64, not '%s'\n", argv[i]);
                return 2;
            }
            threads = (int)n;
        } else if (strcmp(argv[i], "--gemm-only") == 0) {
            gemm_only = true;
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else {
            fprintf(stderr, "cpu_bench: unknown argument '%s'\n%s", argv[i], usage_text);
            return 2;
        }
    }
    const char *host = kf_cpu_host_name();
    char cpu[128];
    sscanf(host, "%127s", cpu);
    FILE *json = NULL;
    char path[512];
    if (out) {
        snprintf(path, sizeof path, "%s", out);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/cpu_bench-%s-%s.json", tmp && *tmp ? tmp : "/tmp", cpu,
                 KF_BENCH_COMMIT);
    }
    json = fopen(path, "w");
    if (!json) {
        perror(path);
        return 1;
    }
    fprintf(json,
            "{\n  \"bench\": \"cpu_bench\",\n  \"cpu\": \"%s\",\n  \"commit\": \"%s\",\n"
            "  \"quick\": %s,\n",
            cpu, KF_BENCH_COMMIT, quick ? "true" : "false");
    printf("cpu %s, commit %s\n", cpu, KF_BENCH_COMMIT);

    /* copy bandwidth */
    /* --quick: every size divided (rows by 16, GEMMs to 64 and 128), one
     * timed run where there were several. */
    size_t cn = (size_t)64 << (quick ? 12 : 20); /* floats: 256 MiB (quick: 256 KiB) */
    float *src = rand_f32(cn), *dst = malloc(cn * sizeof(float));
    double t[64];
    memcpy(dst, src, cn * sizeof(float));
    int creps = quick ? 1 : 7;
    for (int r = 0; r < creps; r++) {
        double t0 = now();
        memcpy(dst, src, cn * sizeof(float));
        t[r] = now() - t0;
    }
    double copy1_gbs = 2.0 * (double)cn * 4 / median(t, creps) / 1e9;
    int nt_all = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nt_all > 64)
        nt_all = 64;
    for (int r = 0; r < creps; r++) {
        double t0 = now();
        copy_mt((char *)dst, (const char *)src, cn * sizeof(float), nt_all);
        t[r] = now() - t0;
    }
    /* The roofline for the kernels, which run on every thread: the faster of
     * the two copies. */
    double copyn_gbs = 2.0 * (double)cn * 4 / median(t, creps) / 1e9;
    double copy_gbs = copyn_gbs > copy1_gbs ? copyn_gbs : copy1_gbs;
    free(dst);
    free(src);
    printf("copy bandwidth          %8.2f GB/s (1 thread %.2f, %d threads %.2f)\n", copy_gbs,
           copy1_gbs, nt_all, copyn_gbs);
    fprintf(json,
            "  \"copy_gbs\": %.3f,\n  \"copy_1thread_gbs\": %.3f,\n  \"copy_all_gbs\": %.3f,\n",
            copy_gbs, copy1_gbs, copyn_gbs);

    kf_ctx *ctx = make_ctx(NULL, KF_FLAG_NO_CACHE, threads);

    /* --gemm-only skips the memory-bound and compile parts (their JSON fields
     * are then absent): for iterating on the GEMM. */

    /* elementwise chain */
    if (!gemm_only) {
        kf_graph *g = NULL;
        double ct = 0;
        unsigned rows = quick ? 256 : 4096;
        char text[320];
        snprintf(text, sizeof text,
                 "kfg 1\nx = input(f32[%u, 4096])\nb = input(f32[4096])\n"
                 "s = const(f32[], 1.5)\nm = mul(x, s)\na = add(m, b)\nr = relu(a)\n"
                 "u = mul(r, s)\ny = add(u, x)\noutput y\n",
                 rows);
        kf_program *p = compile_text(ctx, text, &g, &ct);
        size_t n = (size_t)rows * 4096u;
        float *x = rand_f32(n), *b = rand_f32(4096), *y = malloc(n * 4);
        kf_binding in[2] = {{"x", x, n * 4}, {"b", b, 4096 * 4}}, out = {"y", y, n * 4};
        double s = time_program(p, in, 2, &out, quick ? 1 : 15);
        double gbs = (2.0 * (double)n * 4 + 4096 * 4) / s / 1e9;
        printf("ew_chain f32[%u,4096] %8.2f GB/s  (%.0f%% of copy)  cold compile %.1f ms\n", rows,
               gbs, 100 * gbs / copy_gbs, 1e3 * ct);
        fprintf(json, "  \"ew_chain_gbs\": %.3f,\n  \"ew_chain_frac_copy\": %.3f,\n", gbs,
                gbs / copy_gbs);
        fprintf(json, "  \"ew_chain_cold_compile_ms\": %.2f,\n", 1e3 * ct);
        kf_program_destroy(p);
        kf_graph_destroy(g);
        free(x), free(b), free(y);
    }
    /* rms_norm */
    if (!gemm_only) {
        kf_graph *g = NULL;
        double ct = 0;
        unsigned rows = quick ? 512 : 8192;
        char text[256];
        snprintf(text, sizeof text,
                 "kfg 1\nx = input(f32[%u, 4096])\nw = input(f32[4096])\n"
                 "y = rms_norm(x, w, eps=1e-5)\noutput y\n",
                 rows);
        kf_program *p = compile_text(ctx, text, &g, &ct);
        size_t n = (size_t)rows * 4096u;
        float *x = rand_f32(n), *w = rand_f32(4096), *y = malloc(n * 4);
        kf_binding in[2] = {{"x", x, n * 4}, {"w", w, 4096 * 4}}, out = {"y", y, n * 4};
        double s = time_program(p, in, 2, &out, quick ? 1 : 11);
        double gbs = (2.0 * (double)n * 4) / s / 1e9;
        printf("rms_norm f32[%u,4096] %8.2f GB/s  (%.0f%% of copy)  cold compile %.1f ms\n", rows,
               gbs, 100 * gbs / copy_gbs, 1e3 * ct);
        fprintf(json, "  \"rms_norm_gbs\": %.3f,\n  \"rms_norm_frac_copy\": %.3f,\n", gbs,
                gbs / copy_gbs);
        fprintf(json, "  \"rms_norm_cold_compile_ms\": %.2f,\n", 1e3 * ct);
        kf_program_destroy(p);
        kf_graph_destroy(g);
        free(x), free(w), free(y);
    }
    /* GEMM vs OpenBLAS, 1 thread and all threads */
    int all_threads = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    fprintf(json, "  \"threads_all\": %d,\n  \"gemm\": [\n", all_threads);
    static const int sizes[] = {1024, 2048}, quick_sizes[] = {64, 128};
    for (int si = 0; si < 2; si++) {
        for (int all = 0; all < 2; all++) {
            int sz = quick ? quick_sizes[si] : sizes[si], nt = all ? all_threads : 1;
            kf_ctx *tctx = make_ctx(NULL, KF_FLAG_NO_CACHE, nt);
            char text[256];
            snprintf(text, sizeof text,
                     "kfg 1\na = input(f32[%d, %d])\nb = input(f32[%d, %d])\nc = matmul(a, b)\n"
                     "output c\n",
                     sz, sz, sz, sz);
            kf_graph *g = NULL;
            kf_program *p = compile_text(tctx, text, &g, NULL);
            size_t n = (size_t)sz * sz;
            float *a = rand_f32(n), *b = rand_f32(n), *c = malloc(n * 4);
            kf_binding in[2] = {{"a", a, n * 4}, {"b", b, n * 4}}, out = {"c", c, n * 4};
            int reps = quick ? 1 : sz >= 2048 ? 3 : 5;
            double sec = time_program(p, in, 2, &out, reps);
            double flop = 2.0 * sz * (double)sz * sz, gf = flop / sec / 1e9, blas = 0;
#ifdef KF_HAVE_OPENBLAS
            openblas_set_num_threads(nt);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, sz, sz, sz, 1.0f, a, sz, b, sz,
                        0.0f, c, sz);
            for (int r = 0; r < reps; r++) {
                double t0 = now();
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, sz, sz, sz, 1.0f, a, sz, b,
                            sz, 0.0f, c, sz);
                t[r] = now() - t0;
            }
            blas = flop / median(t, reps) / 1e9;
#endif
            kf_program_destroy(p);
            kf_graph_destroy(g);
            kf_ctx_destroy(tctx);
            free(a), free(b), free(c);
            printf("gemm f32 %d^3 %2d thread(s)  kfuse %8.2f GFLOP/s  openblas %8.2f GFLOP/s  "
                   "(%.0f%%)\n",
                   sz, nt, gf, blas, blas > 0 ? 100 * gf / blas : 0.0);
            fprintf(json,
                    "    {\"n\": %d, \"threads\": %d, \"kfuse_gflops\": %.3f, \"openblas_gflops\": "
                    "%.3f, \"frac_openblas\": %.3f}%s\n",
                    sz, nt, gf, blas, blas > 0 ? gf / blas : 0.0, si == 1 && all ? "" : ",");
        }
    }
    fprintf(json, "  ],\n");
    /* cold compile (no cache) and warm load (cache hit) of one elementwise kernel */
    if (!gemm_only) {
        char dir[] = "/tmp/kfuse-bench-XXXXXX";
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            return 1;
        }
        static const char *text = "kfg 1\nx = input(f32[1024, 1024])\nb = input(f32[1024])\n"
                                  "y = add(x, b)\nz = tanh(y)\noutput z\n";
        double cold[9], warm[9];
        int creps2 = quick ? 1 : 9;
        for (int r = 0; r < creps2; r++) {
            kf_graph *g = NULL;
            kf_program *p = compile_text(ctx, text, &g, &cold[r]);
            kf_program_destroy(p);
            kf_graph_destroy(g);
        }
        kf_ctx *cctx = make_ctx(dir, 0, threads);
        kf_graph *g = NULL;
        kf_program *p = compile_text(cctx, text, &g, NULL); /* fills the cache */
        kf_program_destroy(p);
        kf_graph_destroy(g);
        for (int r = 0; r < creps2; r++) {
            p = compile_text(cctx, text, &g, &warm[r]);
            kf_program_destroy(p);
            kf_graph_destroy(g);
        }
        kf_ctx_destroy(cctx);
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", dir);
        double c = median(cold, creps2), w = median(warm, creps2);
        printf("compile one elementwise kernel: cold %.1f ms, warm load from cache %.2f ms\n",
               1e3 * c, 1e3 * w);
        fprintf(json, "  \"cold_compile_elementwise_ms\": %.3f,\n  \"warm_load_ms\": %.3f,\n",
                1e3 * c, 1e3 * w);
    }
    kf_ctx_destroy(ctx);
    fprintf(json, "  \"end\": true\n}\n");
    fclose(json);
    printf("wrote %s\n", path);
    return 0;
}
