/*
 * main.c -- a tiny program outside the kfuse tree, built against an installed
 * kfuse (find_package and pkg-config): builds z = x + y, evaluates it with the
 * reference evaluator and checks the values; then, where the driver sees a
 * CUDA device, runs it device-resident as a framework would: buffers from
 * cuMemAlloc, bound as device pointers, on a stream of its own.
 */
#include <kfuse.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)

static int fail(const char *what, const kf_graph *g) {
    fprintf(stderr, "consumer: %s: %s\n", what, g ? kf_graph_error(g) : "");
    return 1;
}

/* The few driver entry points the device-resident run needs, opened here as
 * a framework's own CUDA would be (kfuse opens the same library itself). */
typedef int (*cu_dev_get)(int *, int);
typedef int (*cu_retain)(void **, int);
typedef int (*cu_int)(int);
typedef int (*cu_ptr)(void *);
typedef int (*cu_alloc)(unsigned long long *, size_t);
typedef int (*cu_free)(unsigned long long);
typedef int (*cu_htod)(unsigned long long, const void *, size_t);
typedef int (*cu_dtoh)(void *, unsigned long long, size_t);
typedef int (*cu_stream_create)(void **, unsigned);
static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p)
        fprintf(stderr, "consumer: libcuda has no %s\n", name);
    return p;
}
#define CU(lib, var, name, type)                                                                   \
    type var;                                                                                      \
    {                                                                                              \
        void *p_ = sym(lib, name);                                                                 \
        if (!p_)                                                                                   \
            return 1;                                                                              \
        memcpy(&var, &p_, sizeof var);                                                             \
    }

static int device_run(const float *xs, const float *ys, const float *zs) {
    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CUDA;
    o.flags = KF_FLAG_NO_CACHE;
    kf_ctx *ctx = NULL;
    kf_graph *g = NULL;
    kf_program *prog = NULL;
    if (kf_ctx_create(&o, &ctx) != KF_OK || kf_graph_create(ctx, &g) != KF_OK)
        return fail("a CUDA context", NULL);
    const int64_t dims[1] = {4};
    kf_tensor *x = kf_input(g, "x", KF_DTYPE_F32, 1, dims);
    kf_tensor *y = kf_input(g, "y", KF_DTYPE_F32, 1, dims);
    if (kf_output(g, "z", kf_add(g, x, y)) != KF_OK)
        return fail("building add(x, y) for CUDA", g);
    kf_status st = kf_compile(ctx, g, &prog);
    void *cu = st == KF_OK ? dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!cu) {
        if (st != KF_OK && st != KF_ERR_UNSUPPORTED)
            return fail("kf_compile for CUDA", g);
        printf("consumer: no CUDA device: the device-resident run is not tried\n");
        kf_program_destroy(prog);
        kf_graph_destroy(g);
        kf_ctx_destroy(ctx);
        return 0;
    }
    CU(cu, cuDeviceGet, "cuDeviceGet", cu_dev_get)
    CU(cu, cuRetain, "cuDevicePrimaryCtxRetain", cu_retain)
    CU(cu, cuRelease, "cuDevicePrimaryCtxRelease_v2", cu_int)
    CU(cu, cuCtxSetCurrent, "cuCtxSetCurrent", cu_ptr)
    CU(cu, cuMemAlloc, "cuMemAlloc_v2", cu_alloc)
    CU(cu, cuMemFree, "cuMemFree_v2", cu_free)
    CU(cu, cuHtoD, "cuMemcpyHtoD_v2", cu_htod)
    CU(cu, cuDtoH, "cuMemcpyDtoH_v2", cu_dtoh)
    CU(cu, cuStreamCreate, "cuStreamCreate", cu_stream_create)
    CU(cu, cuStreamSync, "cuStreamSynchronize", cu_ptr)
    CU(cu, cuStreamDestroy, "cuStreamDestroy_v2", cu_ptr)
    int dev = 0;
    void *pctx = NULL, *stream = NULL;
    unsigned long long dx = 0, dy = 0, dz = 0;
    float got[4] = {0};
    int bad = cuDeviceGet(&dev, 0) || cuRetain(&pctx, dev) || cuCtxSetCurrent(pctx) ||
              cuStreamCreate(&stream, 1 /* non-blocking */) || cuMemAlloc(&dx, 16) ||
              cuMemAlloc(&dy, 16) || cuMemAlloc(&dz, 16) || cuHtoD(dx, xs, 16) ||
              cuHtoD(dy, ys, 16);
    if (bad) {
        fprintf(stderr, "consumer: the CUDA driver failed to set up buffers\n");
        return 1;
    }
    const kf_binding in[2] = {{"x", (void *)(uintptr_t)dx, 16}, {"y", (void *)(uintptr_t)dy, 16}};
    const kf_binding out[1] = {{"z", (void *)(uintptr_t)dz, 16}};
    if (kf_program_run_device(prog, in, 2, out, 1, stream) != KF_OK) {
        fprintf(stderr, "consumer: kf_program_run_device: %s\n", kf_program_error(prog));
        return 1;
    }
    if (cuStreamSync(stream) || cuDtoH(got, dz, 16)) {
        fprintf(stderr, "consumer: the device-resident run's stream failed\n");
        return 1;
    }
    if (memcmp(got, zs, sizeof got) != 0) {
        fprintf(stderr, "consumer: the device-resident z differs from the evaluator's\n");
        return 1;
    }
    /* A host pointer where a device pointer belongs: refused, not run. */
    const kf_binding wrong[2] = {{"x", (void *)(uintptr_t)xs, 16}, in[1]};
    if (kf_program_run_device(prog, wrong, 2, out, 1, stream) != KF_ERR_INVALID_ARGUMENT) {
        fprintf(stderr, "consumer: a host pointer bound as a device pointer was not refused\n");
        return 1;
    }
    printf("consumer: device-resident run on its own stream: z = [%g, %g, %g, %g]\n", got[0],
           got[1], got[2], got[3]);
    cuMemFree(dx);
    cuMemFree(dy);
    cuMemFree(dz);
    cuStreamDestroy(stream);
    kf_program_destroy(prog);
    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    cuRelease(dev);
    return 0;
}

int main(void) {
    const char *want = STR(KF_VERSION_MAJOR) "." STR(KF_VERSION_MINOR) "." STR(KF_VERSION_PATCH);
    if (strcmp(kf_version(), want) != 0) {
        fprintf(stderr, "consumer: library %s, header %s\n", kf_version(), want);
        return 1;
    }

    kf_ctx *ctx = NULL;
    kf_graph *g = NULL;
    if (kf_ctx_create(NULL, &ctx) != KF_OK)
        return fail("kf_ctx_create", NULL);
    if (kf_graph_create(ctx, &g) != KF_OK)
        return fail("kf_graph_create", NULL);

    const int64_t dims[1] = {4};
    kf_tensor *x = kf_input(g, "x", KF_DTYPE_F32, 1, dims);
    kf_tensor *y = kf_input(g, "y", KF_DTYPE_F32, 1, dims);
    kf_tensor *z = kf_add(g, x, y);
    if (kf_output(g, "z", z) != KF_OK || kf_graph_status(g) != KF_OK)
        return fail("building add(x, y)", g);

    float xs[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    float ys[4] = {0.5f, -2.0f, 10.0f, 0.25f};
    float zs[4] = {0};
    const kf_binding in[2] = {{"x", xs, sizeof xs}, {"y", ys, sizeof ys}};
    const kf_binding out[1] = {{"z", zs, sizeof zs}};
    if (kf_graph_eval(g, in, 2, out, 1) != KF_OK)
        return fail("kf_graph_eval", g);
    for (int i = 0; i < 4; i++) {
        if (zs[i] != xs[i] + ys[i]) {
            fprintf(stderr, "consumer: z[%d] = %g, expected %g\n", i, zs[i], xs[i] + ys[i]);
            return 1;
        }
    }

    /* Compile and run it on the CPU too, as a framework would: this pulls the
     * LLVM backend into a static link (a build without LLVM says so). */
    kf_options o;
    kf_options_init(&o);
    o.target = KF_TARGET_CPU;
    o.flags = KF_FLAG_NO_CACHE;
    kf_ctx *cpu = NULL;
    kf_graph *g2 = NULL;
    kf_program *prog = NULL;
    if (kf_ctx_create(&o, &cpu) != KF_OK || kf_graph_create(cpu, &g2) != KF_OK)
        return fail("a CPU context", NULL);
    kf_tensor *x2 = kf_input(g2, "x", KF_DTYPE_F32, 1, dims);
    kf_tensor *y2 = kf_input(g2, "y", KF_DTYPE_F32, 1, dims);
    if (kf_output(g2, "z", kf_add(g2, x2, y2)) != KF_OK)
        return fail("building add(x, y) for the CPU", g2);
    kf_status st = kf_compile(cpu, g2, &prog);
    if (st == KF_OK) {
        float zc[4] = {0};
        const kf_binding outc[1] = {{"z", zc, sizeof zc}};
        if (kf_program_run(prog, in, 2, outc, 1, NULL) != KF_OK) {
            fprintf(stderr, "consumer: kf_program_run: %s\n", kf_program_error(prog));
            return 1;
        }
        if (memcmp(zc, zs, sizeof zc) != 0) {
            fprintf(stderr, "consumer: the CPU backend's z differs from the evaluator's\n");
            return 1;
        }
    } else if (st != KF_ERR_UNSUPPORTED) {
        return fail("kf_compile for the CPU", g2);
    }
    kf_program_destroy(prog);
    kf_graph_destroy(g2);
    kf_ctx_destroy(cpu);

    if (device_run(xs, ys, zs) != 0)
        return 1;

    kf_graph_destroy(g);
    kf_ctx_destroy(ctx);
    printf("consumer: kfuse %s, z = [%g, %g, %g, %g]\n", kf_version(), zs[0], zs[1], zs[2], zs[3]);
    return 0;
}
