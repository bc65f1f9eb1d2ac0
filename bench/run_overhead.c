/*
 * run_overhead.c -- the host cost of one run (issue 16): a small program
 * run through the public API with host pointers (copies in, run, sync,
 * copies out) and with device pointers (kf_program_run_device: in place,
 * enqueued, nothing waited for), the latter with the same buffers every run
 * and with two buffer sets alternating (every run re-points every kernel
 * argument); the floor under both, the executor's launches alone (one
 * CUDA graph launch, no binding); and the cost of checking one device
 * binding's pointer
 * (cuPointerGetAttributes, alignment, range). Then a program with two
 * cuBLASLt GEMMs (no hand-built CUDA graph): device runs replayed from the
 * graph it captures from its own launches, against each step launched
 * (KF_FLAG_NO_CUDA_GRAPH). Speed is measured here, never asserted by a test.
 *
 * Host time is wall-clock around the calls (CLOCK_MONOTONIC), the median of
 * 9 rounds of 200 runs each; device runs are enqueued on a stream the GPU
 * drains faster than the host fills it (tiny kernels), and synchronized
 * outside the timed loop. The budget for a device-resident run of N
 * kernels is 3 us + 1 us * N.
 *
 *   run_overhead [--commit SHA] [--out FILE]
 *
 * JSON goes to bench/results/<gpu>-<commit>-run-overhead.json (and --out).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "frontend/compile.h"
#include "fusion/fusion.h"
#include "ir/ir.h"
#include "kfuse.h"
#include "runtime/cuda.h"
#include "runtime/cuda_exec.h"

#ifndef KF_BENCH_COMMIT
#define KF_BENCH_COMMIT "unknown"
#endif

static char err[KF_MSG_MAX];

#define CHECK(call)                                                                                \
    do {                                                                                           \
        kf_status st_ = (call);                                                                    \
        if (st_ != KF_OK) {                                                                        \
            fprintf(stderr, "run_overhead: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, err);      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define CHECKP(p, call)                                                                            \
    do {                                                                                           \
        kf_status st_ = (call);                                                                    \
        if (st_ != KF_OK) {                                                                        \
            fprintf(stderr, "run_overhead: %s: %s\n", #call, kf_program_error(p));                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define ROUNDS 9
#define ITERS 200

typedef struct bench {
    kf_program *p;
    kf_binding *hin, *hout, *din[2], *dout[2];
    size_t n_in, n_out;
    kf_cu_stream s;
    const kf_cuda_device *dev;
} bench;

/* Median microseconds per run: mode 0 host pointers, 1 device pointers (the
 * same set), 2 device pointers alternating between two sets. */
static double per_run_us(bench *b, int mode) {
    double v[ROUNDS];
    for (int r = -1; r < ROUNDS; r++) { /* round -1: warm-up */
        double t0 = now_us();
        for (int i = 0; i < ITERS; i++) {
            if (mode == 0) {
                CHECKP(b->p, kf_program_run(b->p, b->hin, b->n_in, b->hout, b->n_out, b->s));
            } else {
                int set = mode == 2 ? i & 1 : 0;
                CHECKP(b->p, kf_program_run_device(b->p, b->din[set], b->n_in, b->dout[set],
                                                   b->n_out, b->s));
            }
        }
        double dt = now_us() - t0;
        CHECK(kf_cuda_stream_sync(b->dev, b->s, NULL, err));
        if (r >= 0)
            v[r] = dt / ITERS;
    }
    qsort(v, ROUNDS, sizeof v[0], cmp_double);
    return v[ROUNDS / 2];
}

/* A compiled program of g and two sets of device buffers for its bindings
 * (plus host ones), on `dev` and `stream`. */
static void open_bench(kf_ctx *ctx, kf_graph *g, const kf_cuda_device *dev, kf_cu_stream stream,
                       bench *b) {
    memset(b, 0, sizeof *b);
    if (kf_compile(ctx, g, &b->p) != KF_OK) {
        fprintf(stderr, "run_overhead: %s\n", kf_graph_error(g));
        exit(1);
    }
    b->dev = dev;
    b->s = stream;
    b->n_in = kf_graph_input_count(g);
    b->n_out = kf_graph_output_count(g);
    b->hin = calloc(b->n_in, sizeof *b->hin);
    b->hout = calloc(b->n_out, sizeof *b->hout);
    for (int s = 0; s < 2; s++) {
        b->din[s] = calloc(b->n_in, sizeof *b->din[s]);
        b->dout[s] = calloc(b->n_out, sizeof *b->dout[s]);
    }
    for (size_t i = 0; i < b->n_in + b->n_out; i++) {
        bool in = i < b->n_in;
        const kf_tensor *t = in ? kf_graph_input(g, i) : kf_graph_output(g, i - b->n_in);
        const char *name = in ? kf_tensor_name(t) : kf_graph_output_name(g, i - b->n_in);
        size_t bytes = (size_t)kf_tensor_numel(t) * kf_dtype_size(kf_tensor_dtype(t));
        kf_binding *h = in ? &b->hin[i] : &b->hout[i - b->n_in];
        *h = (kf_binding){name, calloc(1, bytes), bytes};
        for (int s = 0; s < 2; s++) {
            kf_cu_deviceptr d = 0;
            CHECK(kf_cuda_mem_alloc(dev, bytes, &d, err));
            CHECK(kf_cuda_copy_to_device(dev, d, h->data, bytes, err));
            kf_binding *db = in ? &b->din[s][i] : &b->dout[s][i - b->n_in];
            *db = (kf_binding){name, (void *)(uintptr_t)d, bytes};
        }
    }
}

static void close_bench(bench *b) {
    for (size_t i = 0; i < b->n_in + b->n_out; i++) {
        bool in = i < b->n_in;
        free(in ? b->hin[i].data : b->hout[i - b->n_in].data);
        for (int s = 0; s < 2; s++)
            kf_cuda_mem_free(b->dev,
                             (kf_cu_deviceptr)(uintptr_t)(in ? b->din[s][i].data
                                                             : b->dout[s][i - b->n_in].data));
    }
    for (int s = 0; s < 2; s++) {
        free(b->din[s]);
        free(b->dout[s]);
    }
    free(b->hin);
    free(b->hout);
    kf_program_destroy(b->p);
}

/* A program with cuBLASLt calls (prepare builds no CUDA graph of its own):
 * device runs with the graph it captures from its launches, and with
 * KF_FLAG_NO_CUDA_GRAPH (each step launched), same buffers and alternating. */
typedef struct lt_row {
    size_t steps;
    double same_us, alt_us, direct_same_us, direct_alt_us;
} lt_row;

static const char *const lt_text =
    "kfg 1\nx = input(bf16[64, 256])\nw1 = input(bf16[256, 512])\nb1 = input(bf16[512])\n"
    "w2 = input(bf16[512, 256])\nh = matmul(x, w1)\nhb = add(h, b1)\ng = gelu(hb)\n"
    "o = matmul(g, w2)\ny = add(o, x)\noutput y\ns = softmax(y)\noutput s\n";

static lt_row measure_cublaslt(const kf_cuda_device *dev, kf_cu_stream stream) {
    lt_row row = {0};
    for (int direct = 0; direct < 2; direct++) {
        kf_options o;
        kf_options_init(&o);
        o.target = KF_TARGET_CUDA;
        o.gemm = KF_GEMM_CUBLASLT;
        o.flags = KF_FLAG_NO_CACHE | (direct ? KF_FLAG_NO_CUDA_GRAPH : 0);
        kf_ctx *ctx = NULL;
        CHECK(kf_ctx_create(&o, &ctx));
        kf_graph *g = NULL;
        CHECK(kf_graph_parse(ctx, lt_text, strlen(lt_text), &g));
        bench b;
        open_bench(ctx, g, dev, stream, &b);
        row.steps = kf_program_kernel_count(b.p);
        *(direct ? &row.direct_same_us : &row.same_us) = per_run_us(&b, 1);
        *(direct ? &row.direct_alt_us : &row.alt_us) = per_run_us(&b, 2);
        close_bench(&b);
        kf_graph_destroy(g);
        kf_ctx_destroy(ctx);
    }
    return row;
}

int main(int argc, char **argv) {
    const char *commit = KF_BENCH_COMMIT, *out_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--commit") && i + 1 < argc)
            commit = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out_path = argv[++i];
        else {
            fprintf(stderr, "usage: run_overhead [--commit SHA] [--out FILE]\n");
            return 2;
        }
    }
    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CUDA;
    o.flags = KF_FLAG_NO_CACHE;
    kf_ctx *ctx = NULL;
    CHECK(kf_ctx_create(&o, &ctx));
    if (!kf_cuda_exec_available(ctx)) {
        fprintf(stderr, "run_overhead: no GPU\n");
        kf_ctx_destroy(ctx);
        return 77;
    }
    /* The small program of gpu_bench's launch row: three kernels. */
    const char *text = "kfg 1\nx = input(f32[64, 256])\na = exp(x)\ns = softmax(a)\n"
                       "m = reduce_max(s, axis=1)\noutput m\noutput s\n";
    kf_graph *g = NULL;
    CHECK(kf_graph_parse(ctx, text, strlen(text), &g));
    const kf_cuda_driver *drv = NULL;
    CHECK(kf_ctx_cuda_driver(ctx, &drv, err));
    kf_cuda_device dev;
    CHECK(kf_cuda_device_open(drv, 0, &dev, err));
    kf_cu_stream stream = NULL;
    CHECK(kf_cuda_stream_create(&dev, &stream, err));
    bench b;
    open_bench(ctx, g, &dev, stream, &b);
    size_t kernels = kf_program_kernel_count(b.p);
    double host_us = per_run_us(&b, 0);
    double dev_same_us = per_run_us(&b, 1);
    double dev_alt_us = per_run_us(&b, 2);
    size_t bindings = b.n_in + b.n_out;

    /* One pointer check, alone: the exec of a plan of the same graph. */
    double check_us = 0, launch_us = 0;
    {
        kf_plan *plan = NULL;
        CHECK(kf_plan_create(g, NULL, &plan));
        kf_cuda_exec *ex = NULL;
        CHECK(kf_cuda_exec_build(ctx, plan, &ex, err));
        /* The floor: the exec's launches alone (its CUDA graph), no binding. */
        double w[ROUNDS];
        for (int r = -1; r < ROUNDS; r++) {
            double t0 = now_us();
            for (int i = 0; i < ITERS; i++)
                CHECK(kf_cuda_exec_launch(ex, b.s, err));
            double dt = now_us() - t0;
            CHECK(kf_cuda_stream_sync(&dev, b.s, NULL, err));
            if (r >= 0)
                w[r] = dt / ITERS;
        }
        qsort(w, ROUNDS, sizeof w[0], cmp_double);
        launch_us = w[ROUNDS / 2];
        const void *ptr = b.din[0][0].data;
        size_t bytes = b.din[0][0].size;
        double v[ROUNDS];
        for (int r = -1; r < ROUNDS; r++) {
            double t0 = now_us();
            for (int i = 0; i < 10000; i++)
                CHECK(kf_cuda_exec_check_pointer(ex, ptr, bytes, true, 16, err));
            if (r >= 0)
                v[r] = (now_us() - t0) / 10000;
        }
        qsort(v, ROUNDS, sizeof v[0], cmp_double);
        check_us = v[ROUNDS / 2];
        kf_cuda_exec_destroy(ex);
        kf_plan_destroy(plan);
    }
    lt_row lt = measure_cublaslt(&dev, stream);
    double budget = 3.0 + 1.0 * (double)kernels;
    fprintf(stderr, "run_overhead: %s, %zu kernels, %zu bindings, commit %s\n", dev.name, kernels,
            bindings, commit);
    fprintf(stderr, "  host-pointer run (copies in, run, sync, copies out): %8.2f us per run\n",
            host_us);
    fprintf(stderr, "  device-pointer run, same buffers:                     %8.2f us per run\n",
            dev_same_us);
    fprintf(stderr, "  device-pointer run, buffers alternating (re-point):   %8.2f us per run\n",
            dev_alt_us);
    fprintf(stderr, "  the launches alone (kf_cuda_exec_launch, no binding):  %8.2f us per run\n",
            launch_us);
    fprintf(stderr, "  pointer check per binding:                            %8.3f us\n", check_us);
    fprintf(stderr,
            "  cuBLASLt program (%zu kernel steps + 2 cuBLASLt calls), device-pointer runs:\n"
            "    replayed from the graph it captured:  same buffers %8.2f us, alternating %8.2f us\n"
            "    each step launched (NO_CUDA_GRAPH):   same buffers %8.2f us, alternating %8.2f us\n",
            lt.steps, lt.same_us, lt.alt_us, lt.direct_same_us, lt.direct_alt_us);
    fprintf(stderr, "  budget for a device run of %zu kernels: %.1f us (same buffers: %s)\n",
            kernels, budget, dev_same_us <= budget ? "met" : "NOT met");

    char name[160];
    snprintf(name, sizeof name, "%s", dev.name);
    for (char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')))
            *c = '-';
    char path[512];
    const char *src = getenv("KF_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/bench/results", src ? src : ".");
    mkdir(path, 0755);
    snprintf(path + strlen(path), sizeof path - strlen(path), "/%s-%s-run-overhead.json", name,
             commit);
    FILE *outs[2] = {fopen(path, "w"), out_path ? fopen(out_path, "w") : NULL};
    for (int i = 0; i < 2; i++) {
        if (!outs[i])
            continue;
        fprintf(outs[i],
                "{\n  \"schema\": \"kfuse.run_overhead/1\",\n  \"gpu\": \"%s\",\n"
                "  \"commit\": \"%s\",\n  \"driver\": %d,\n  \"graph\": \"exp -> softmax -> "
                "reduce_max, f32[64, 256]\",\n  \"kernels\": %zu,\n  \"bindings\": %zu,\n"
                "  \"host_pointer_run_us\": %.3f,\n  \"device_pointer_run_us\": %.3f,\n"
                "  \"device_pointer_run_repointed_us\": %.3f,\n  \"launch_only_us\": %.3f,\n"
                "  \"pointer_check_us_per_binding\": %.4f,\n  \"budget_us\": %.1f,\n"
                "  \"cublaslt_graph\": \"matmul+bias+gelu -> matmul+residual -> softmax, bf16, "
                "x[64, 256], cuBLASLt GEMMs\",\n  \"cublaslt_kernel_steps\": %zu,\n"
                "  \"cublaslt_device_run_captured_us\": %.3f,\n"
                "  \"cublaslt_device_run_captured_alternating_us\": %.3f,\n"
                "  \"cublaslt_device_run_direct_us\": %.3f,\n"
                "  \"cublaslt_device_run_direct_alternating_us\": %.3f\n}\n",
                name, commit, drv->driver_version, kernels, bindings, host_us, dev_same_us,
                dev_alt_us, launch_us, check_us, budget, lt.steps, lt.same_us, lt.alt_us,
                lt.direct_same_us, lt.direct_alt_us);
        fclose(outs[i]);
    }
    fprintf(stderr, "run_overhead: wrote %s\n", path);

    close_bench(&b);
    kf_cuda_stream_destroy(&dev, stream);
    kf_cuda_device_close(&dev);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    return 0;
}
