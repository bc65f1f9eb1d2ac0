/*
 * warm_start.c -- what a new process pays to start a program whose kernels
 * are all in the disk cache (issue 15, item 5). Measured, never asserted.
 *
 *   warm_start FILE --cache-dir DIR [--target cuda|cpu]
 *       one JSON line: the wall time (CLOCK_MONOTONIC, ms) of kf_ctx_create,
 *       kf_graph_parse, kf_compile (plan, recipes, the cache reads, the
 *       driver, the device's context and cuBLASLt when a recipe has a GEMM),
 *       the first kf_program_run and a second one. Run it once to fill the
 *       cache, then again in new processes: those are warm starts.
 *   warm_start --phases
 *       the first-use costs compile pays on CUDA, each timed once in this
 *       process in order: loading libcuda and cuInit, opening device 0 (its
 *       primary context), and cuBLASLt (dlopen and cublasLtCreate).
 */
#define _GNU_SOURCE
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

static int phases(void) {
    char err[KF_MSG_MAX] = "";
    kf_mem mem;
    kf_mem_resolve(&mem, NULL);
    kf_cuda_driver *drv = NULL;
    kf_cuda_device dev;
    memset(&dev, 0, sizeof dev);
    kf_blt *lt = NULL;
    double t0 = now_ms();
    kf_status st = kf_cuda_driver_load(&mem, NULL, &drv, err);
    double t1 = now_ms();
    if (st == KF_OK)
        st = kf_cuda_device_open(drv, 0, &dev, err);
    double t2 = now_ms();
    if (st == KF_OK)
        st = kf_blt_create(&mem, &dev, NULL, &lt, err);
    double t3 = now_ms();
    if (st != KF_OK) {
        fprintf(stderr, "warm_start: %s\n", err);
        return 1;
    }
    printf("{\"phases\": {\"driver_ms\": %.2f, \"device_ms\": %.2f, \"cublaslt_ms\": %.2f}, "
           "\"device\": \"%s\"}\n",
           t1 - t0, t2 - t1, t3 - t2, dev.name);
    kf_blt_destroy(lt);
    kf_cuda_device_close(&dev);
    kf_cuda_driver_release(&mem, drv);
    return 0;
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

int main(int argc, char **argv) {
    const char *file = NULL, *cache = NULL;
    kf_target target = KF_TARGET_CUDA;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--phases") == 0)
            return phases();
        if (strcmp(argv[i], "--cache-dir") == 0 && i + 1 < argc)
            cache = argv[++i];
        else if (strcmp(argv[i], "--target") == 0 && i + 1 < argc)
            target = strcmp(argv[++i], "cpu") == 0 ? KF_TARGET_CPU : KF_TARGET_CUDA;
        else if (argv[i][0] != '-' && !file)
            file = argv[i];
        else {
            fprintf(stderr, "usage: warm_start FILE --cache-dir DIR [--target cuda|cpu]\n"
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
    kf_options o;
    kf_options_init(&o);
    o.target = target;
    o.cache_dir = cache;
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
    printf("{\"file\": \"%s\", \"ctx_ms\": %.2f, \"parse_ms\": %.2f, \"compile_ms\": %.2f, "
           "\"run1_ms\": %.2f, \"run2_ms\": %.2f, \"kernels\": %zu, \"ok\": %s}\n",
           file, t1 - t0, t2 - t1, t3 - t2, t5 - t4, t6 - t5, kf_program_kernel_count(p),
           st == KF_OK ? "true" : "false");
    for (size_t i = 0; i < n_in; i++)
        free(in[i].data);
    for (size_t i = 0; i < n_out; i++)
        free(out[i].data);
    free(in);
    free(out);
    kf_program_destroy(p);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    free(text);
    return st == KF_OK ? 0 : 1;
}
