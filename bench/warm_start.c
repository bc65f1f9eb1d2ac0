/*
 * warm_start.c -- what a new process pays to start a program whose kernels
 * are all in the disk cache (issue 15, item 5). Measured, never asserted.
 *
 *   warm_start FILE --cache-dir DIR [--target cuda|cpu] [--preinit] [--preload-cublaslt]
 *              [--gemm MODE] [--choice-margin F]
 *       one JSON line: the wall time (CLOCK_MONOTONIC, ms) of kf_ctx_create,
 *       kf_graph_parse, kf_compile (plan, recipes, the cache reads, the
 *       driver, the device's context and cuBLASLt when a step that runs
 *       calls it), the first kf_program_run and a second one; on CUDA also
 *       where compile's open and prepare went ("prepare_ms", from the
 *       report's JSON: driver = loading libcuda + cuInit, device = the
 *       primary context + a stream, kernels = cache reads + module loads,
 *       measure = timing runs of measured choices not found in the cache),
 *       whether cuBLASLt was used ("cublaslt") and loaded at all
 *       ("cublaslt_loaded": its dlopen thread started, which happens only
 *       when a recipe in use calls it), and "ours_ms": compile_ms less the
 *       driver's two first-use costs; "cublaslt_ms", where cuBLASLt's
 *       start-up went (the report's: dlopen and dlsym on the loader thread,
 *       wait = compile blocked on that thread, create = cublasLtCreate,
 *       plans = descriptors, algo_load = algorithm records read from the
 *       cache and checked, heuristic = heuristic queries), and the
 *       program's "arena_bytes". Run it once to fill the cache, then again
 *       in new processes: those are warm starts.
 *       --preinit: before the clock starts, load the driver and retain
 *       device 0's primary context the way a framework that embeds kfuse
 *       already has (kf_compile then finds them paid).
 *       --preload-cublaslt: before the clock starts, also open cuBLASLt
 *       (the same file, by the same lookup) the way a framework process
 *       that links it (PyTorch) already has: kfuse's dlopen then finds it
 *       loaded ("preload_cublaslt_ms" says what that open cost).
 *       --gemm auto|generated|cublaslt: kf_options.gemm (generated: every
 *       GEMM the generated kernel takes runs it, so no cached winner calls
 *       cuBLASLt). --choice-margin F: kf_options.choice_margin (the
 *       winners are picked again from the cached times under it: one cache
 *       gives the warm start of several margins); "measured" lists each
 *       measured choice (both times, the winner, "by_margin").
 *   warm_start --dlopen now|lazy [LIB]
 *       one JSON line: the time of a bare dlopen of cuBLASLt (LIB, else
 *       libcublasLt.so.13 on the loader's path, else the toolkit's) with
 *       RTLD_NOW or RTLD_LAZY, in a process that has loaded nothing else of
 *       CUDA: what the binding mode changes (run each in a new process).
 *   warm_start --phases
 *       the first-use costs compile pays on CUDA, each timed once in this
 *       process in order: loading libcuda and cuInit, opening device 0 (its
 *       primary context), cuBLASLt's dlopen, the context's first and second
 *       cuMemAlloc, cublasLtCreate, then a first f32 GEMM (the heuristic's
 *       first call and the first cublasLtMatmul), one of another shape (a
 *       heuristic call) and the same again (neither).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/ir.h"
#include "kfuse.h"
#include "runtime/cublaslt.h"
#include "runtime/cuda.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* One f32 GEMM of n x n x n on `lt` (operands as they are: only the time
 * counts), its time in ms:
 * the first for a shape asks cuBLASLt's heuristic, then runs and waits. */
static double one_gemm(kf_blt *lt, const kf_cuda_device *dev, kf_cu_deviceptr buf, int64_t n,
                       char *err, kf_status *st) {
    kf_blt_gemm g;
    memset(&g, 0, sizeof g);
    g.dtype = KF_DTYPE_F32;
    g.m = g.n = g.k = n;
    g.batch = 1;
    g.a = (kf_blt_operand){buf, n, 1, 0};
    g.b = (kf_blt_operand){buf + (kf_cu_deviceptr)(n * n * 4), n, 1, 0};
    g.d = (kf_blt_operand){buf + (kf_cu_deviceptr)(2 * n * n * 4), n, 1, 0};
    g.epilogue = KF_BLT_EPI_NONE;
    g.what = "phases";
    double t0 = now_ms();
    *st = kf_blt_matmul(lt, &g, NULL, err);
    if (*st == KF_OK)
        *st = kf_cuda_stream_sync(dev, NULL, "phases", err);
    return now_ms() - t0;
}

static int phases(void) {
    char err[KF_MSG_MAX] = "";
    kf_mem mem;
    kf_mem_resolve(&mem, NULL);
    kf_cuda_driver *drv = NULL;
    kf_cuda_device dev;
    memset(&dev, 0, sizeof dev);
    kf_blt *lt = NULL;
    kf_cu_deviceptr a1 = 0, a2 = 0;
    double t[12] = {0};
    kf_status st;
    int i = 0;
    t[i++] = now_ms();
    st = kf_cuda_driver_load(&mem, NULL, &drv, err);
    t[i++] = now_ms(); /* 1: libcuda + cuInit */
    if (st == KF_OK)
        st = kf_cuda_device_open(drv, 0, &dev, err);
    t[i++] = now_ms(); /* 2: the primary context */
    if (st == KF_OK)
        st = kf_blt_library_check(NULL, NULL, 0, err);
    t[i++] = now_ms(); /* 3: cuBLASLt's dlopen + dlsym */
    if (st == KF_OK)
        st = kf_cuda_mem_alloc(&dev, (size_t)64 << 20, &a1, err);
    t[i++] = now_ms(); /* 4: the context's first cuMemAlloc (64 MiB) */
    if (st == KF_OK)
        st = kf_cuda_mem_alloc(&dev, (size_t)64 << 20, &a2, err);
    t[i++] = now_ms(); /* 5: a second one */
    if (st == KF_OK)
        st = kf_blt_create(&mem, &dev, NULL, &lt, err);
    t[i++] = now_ms(); /* 6: cublasLtCreate (the library open already) */
    if (st == KF_OK)
        st = kf_blt_set_workspace(lt, a2, (size_t)64 << 20, err);
    double g1 = 0, g2 = 0, g3 = 0;
    if (st == KF_OK)
        g1 = one_gemm(lt, &dev, a1, 64, err, &st);
    if (st == KF_OK)
        g2 = one_gemm(lt, &dev, a1, 96, err, &st);
    if (st == KF_OK)
        g3 = one_gemm(lt, &dev, a1, 96, err, &st);
    if (st != KF_OK) {
        fprintf(stderr, "warm_start: %s\n", err);
        return 1;
    }
    printf("{\"phases\": {\"driver_ms\": %.2f, \"device_ms\": %.2f, \"cublaslt_dlopen_ms\": %.2f, "
           "\"first_alloc_ms\": %.2f, \"second_alloc_ms\": %.2f, \"cublaslt_create_ms\": %.2f, "
           "\"first_gemm_ms\": %.2f, \"second_shape_gemm_ms\": %.2f, \"same_shape_again_ms\": "
           "%.2f}, \"device\": \"%s\"}\n",
           t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t[3], t[5] - t[4], t[6] - t[5], g1, g2, g3,
           dev.name);
    kf_blt_destroy(lt);
    kf_cuda_mem_free(&dev, a1);
    kf_cuda_mem_free(&dev, a2);
    kf_cuda_device_close(&dev);
    kf_cuda_driver_release(&mem, drv);
    return 0;
}

static int dlopen_only(const char *mode, const char *lib) {
    bool lazy = strcmp(mode, "lazy") == 0;
    const char *tries[3] = {lib, "libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.13"};
    for (int i = lib ? 0 : 1; i < 3; i++) {
        double t0 = now_ms();
        void *h = dlopen(tries[i], (lazy ? RTLD_LAZY : RTLD_NOW) | RTLD_LOCAL);
        double t1 = now_ms();
        if (h) {
            printf("{\"dlopen\": \"%s\", \"lib\": \"%s\", \"ms\": %.2f}\n", lazy ? "lazy" : "now",
                   tries[i], t1 - t0);
            return 0;
        }
    }
    fprintf(stderr, "warm_start: --dlopen: %s\n", dlerror());
    return 1;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        rewind(f);
        buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
        if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        *len = (size_t)(n >= 0 ? n : 0);
    }
    fclose(f);
    return buf;
}

/* The object or value after `"name": ` in a report's JSON (up to its
 * matching brace, or the next comma), into out; "null" when absent. */
static void json_member(const char *json, const char *name, char *out, size_t cap) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", name);
    const char *s = json ? strstr(json, pat) : NULL;
    snprintf(out, cap, "null");
    if (!s)
        return;
    s += strlen(pat);
    size_t n = 0;
    if (*s == '{' || *s == '[') {
        int depth = 0;
        do {
            depth += (s[n] == '{' || s[n] == '[') - (s[n] == '}' || s[n] == ']');
            n++;
        } while (s[n] && depth > 0);
    } else {
        while (s[n] && s[n] != ',' && s[n] != '}')
            n++;
    }
    snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), s);
}

static double member_ms(const char *obj, const char *name) {
    char v[64];
    json_member(obj, name, v, sizeof v);
    return strcmp(v, "null") == 0 ? 0.0 : atof(v);
}

int main(int argc, char **argv) {
    const char *file = NULL, *cache = NULL;
    kf_target target = KF_TARGET_CUDA;
    bool preinit = false, preload_lt = false;
    kf_gemm_mode gemm = KF_GEMM_AUTO;
    double margin = -1.0; /* < 0: kf_options_init's */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--phases") == 0)
            return phases();
        if (strcmp(argv[i], "--dlopen") == 0 && i + 1 < argc)
            return dlopen_only(argv[i + 1], i + 2 < argc ? argv[i + 2] : NULL);
        if (strcmp(argv[i], "--preinit") == 0) {
            preinit = true;
            continue;
        }
        if (strcmp(argv[i], "--preload-cublaslt") == 0) {
            preload_lt = true;
            continue;
        }
        if (strcmp(argv[i], "--cache-dir") == 0 && i + 1 < argc)
            cache = argv[++i];
        else if (strcmp(argv[i], "--gemm") == 0 && i + 1 < argc) {
            const char *m = argv[++i];
            gemm = strcmp(m, "generated") == 0  ? KF_GEMM_GENERATED
                   : strcmp(m, "cublaslt") == 0 ? KF_GEMM_CUBLASLT
                                                : KF_GEMM_AUTO;
        } else if (strcmp(argv[i], "--choice-margin") == 0 && i + 1 < argc)
            margin = atof(argv[++i]);
        else if (strcmp(argv[i], "--target") == 0 && i + 1 < argc)
            target = strcmp(argv[++i], "cpu") == 0 ? KF_TARGET_CPU : KF_TARGET_CUDA;
        else if (argv[i][0] != '-' && !file)
            file = argv[i];
        else {
            fprintf(stderr, "usage: warm_start FILE --cache-dir DIR [--target cuda|cpu] "
                            "[--preinit] [--preload-cublaslt] [--gemm auto|generated|cublaslt]\n"
                            "       [--choice-margin F]\n"
                            "       warm_start --dlopen now|lazy [LIB]\n"
                            "       warm_start --phases\n");
            return 2;
        }
    }
    size_t len = 0;
    char *text = file ? read_file(file, &len) : NULL;
    if (!text || !cache) {
        fprintf(stderr, "warm_start: need a readable FILE and --cache-dir DIR\n");
        free(text);
        return 2;
    }
    /* A framework's process: the driver loaded, the primary context retained. */
    kf_mem pmem;
    kf_mem_resolve(&pmem, NULL);
    kf_cuda_driver *pdrv = NULL;
    kf_cuda_device pdev;
    memset(&pdev, 0, sizeof pdev);
    char perr[KF_MSG_MAX] = "";
    double tp = now_ms();
    if (preinit && (kf_cuda_driver_load(&pmem, NULL, &pdrv, perr) != KF_OK ||
                    kf_cuda_device_open(pdrv, 0, &pdev, perr) != KF_OK)) {
        fprintf(stderr, "warm_start: --preinit: %s\n", perr);
        kf_cuda_driver_release(&pmem, pdrv);
        free(text);
        return 1;
    }
    double preinit_ms = now_ms() - tp;
    /* A framework that links cuBLASLt: the library loaded (the handle stays
     * open for the process). */
    double tl = now_ms();
    if (preload_lt && kf_blt_library_check(NULL, NULL, 0, perr) != KF_OK) {
        fprintf(stderr, "warm_start: --preload-cublaslt: %s\n", perr);
        if (preinit) {
            kf_cuda_device_close(&pdev);
            kf_cuda_driver_release(&pmem, pdrv);
        }
        free(text);
        return 1;
    }
    double preload_lt_ms = now_ms() - tl;
    kf_options o;
    kf_options_init(&o);
    o.target = target;
    o.cache_dir = cache;
    o.gemm = gemm;
    if (margin >= 0)
        o.choice_margin = margin;
    kf_ctx *ctx = NULL;
    kf_graph *g = NULL;
    kf_program *p = NULL;
    double t0 = now_ms();
    kf_status st = kf_ctx_create(&o, &ctx);
    double t1 = now_ms();
    if (st == KF_OK)
        st = kf_graph_parse(ctx, text, len, &g);
    double t2 = now_ms();
    if (st == KF_OK)
        st = kf_compile(ctx, g, &p);
    double t3 = now_ms();
    if (st != KF_OK) {
        fprintf(stderr, "warm_start: %s: %s\n", kf_status_str(st), g ? kf_graph_error(g) : "");
        kf_graph_destroy(g);
        kf_ctx_destroy(ctx);
        free(text);
        return 1;
    }
    /* Inputs and outputs: zeros, bound by name. */
    size_t n_in = kf_graph_input_count(g), n_out = kf_graph_output_count(g);
    kf_binding *in = calloc(n_in + 1, sizeof *in), *out = calloc(n_out + 1, sizeof *out);
    for (size_t i = 0; i < n_in; i++) {
        kf_tensor *t = kf_graph_input(g, i);
        in[i].name = kf_tensor_name(t);
        in[i].size = (size_t)kf_tensor_numel(t) * kf_dtype_size(kf_tensor_dtype(t));
        in[i].data = calloc(1, in[i].size + 1);
    }
    for (size_t i = 0; i < n_out; i++) {
        kf_tensor *t = kf_graph_output(g, i);
        out[i].name = kf_graph_output_name(g, i);
        out[i].size = (size_t)kf_tensor_numel(t) * kf_dtype_size(kf_tensor_dtype(t));
        out[i].data = calloc(1, out[i].size + 1);
    }
    double t4 = now_ms();
    st = kf_program_run(p, in, n_in, out, n_out, NULL);
    double t5 = now_ms();
    if (st == KF_OK)
        st = kf_program_run(p, in, n_in, out, n_out, NULL);
    double t6 = now_ms();
    /* Where compile went, from the report (CUDA only). */
    char *rep = NULL;
    size_t rlen = 0;
    FILE *mf = open_memstream(&rep, &rlen);
    if (mf) {
        (void)kf_program_report(p, KF_REPORT_JSON, mf);
        fclose(mf);
    }
    char phase[512], lt[16], loaded[16], cached[16] = "0", lt_ms[512], arena[32];
    char measured[4096];
    json_member(rep, "measured", measured, sizeof measured);
    json_member(rep, "prepare_ms", phase, sizeof phase);
    json_member(rep, "cublaslt_ms", lt_ms, sizeof lt_ms);
    json_member(rep, "arena_bytes", arena, sizeof arena);
    json_member(rep, "cublaslt", lt, sizeof lt);
    json_member(rep, "cublaslt_loaded", loaded, sizeof loaded);
    unsigned n_cached = 0, n_measured = 0;
    for (const char *c = rep; c && (c = strstr(c, "\"cached\": ")) != NULL; c++) {
        n_measured++;
        n_cached += strncmp(c + 10, "true", 4) == 0;
    }
    snprintf(cached, sizeof cached, "%u/%u", n_cached, n_measured);
    double driver = member_ms(phase, "driver") + member_ms(phase, "device");
    printf("{\"file\": \"%s\", \"preinit\": %s, \"preinit_ms\": %.2f, "
           "\"preload_cublaslt\": %s, \"preload_cublaslt_ms\": %.2f, \"ctx_ms\": %.2f, "
           "\"parse_ms\": %.2f, \"compile_ms\": %.2f, \"ours_ms\": %.2f, \"run1_ms\": %.2f, "
           "\"run2_ms\": %.2f, \"kernels\": %zu, \"gemm\": %d, \"cublaslt\": %s, "
           "\"cublaslt_loaded\": %s, \"choices_cached\": \"%s\", \"prepare_ms\": %s, "
           "\"cublaslt_ms\": %s, \"arena_bytes\": %s, \"choice_margin\": %g, \"measured\": %s, "
           "\"ok\": %s}\n",
           file, preinit ? "true" : "false", preinit_ms, preload_lt ? "true" : "false",
           preload_lt_ms, t1 - t0, t2 - t1, t3 - t2, t3 - t2 - driver, t5 - t4, t6 - t5,
           kf_program_kernel_count(p), (int)gemm, lt, loaded, cached, phase, lt_ms, arena,
           o.choice_margin, measured, st == KF_OK ? "true" : "false");
    free(rep);
    for (size_t i = 0; i < n_in; i++)
        free(in[i].data);
    for (size_t i = 0; i < n_out; i++)
        free(out[i].data);
    free(in);
    free(out);
    kf_program_destroy(p);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    if (preinit) {
        kf_cuda_device_close(&pdev);
        kf_cuda_driver_release(&pmem, pdrv);
    }
    free(text);
    return st == KF_OK ? 0 : 1;
}
