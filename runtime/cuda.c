/*
 * cuda.c -- the Driver API through dlopen (the contract is in cuda.h).
 *
 *   kf_ctx_cuda_driver: ctx mutex -> first call: dlopen libcuda.so.1 -> dlsym
 *     every entry point (an optional one may stay NULL) -> cuInit (stub? no device?) -> table kept
 * on the ctx; a failure is kept instead, with its message wrappers: make the device's primary
 * context current -> call -> on failure "call (kernel 'name'): CUDA_ERROR_X: string" launches:
 * kf_cuda_launch_check (shape, whole clusters) -> cuLaunchKernel, or cuLaunchKernelEx with the
 * cluster attribute tensor maps: kf_cuda_tmap_check (the documented rules, no driver) ->
 *     cuTensorMapEncodeTiled
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/ctx.h"
#include "runtime/cuda.h"

/* Driver result codes this file tells apart (values from cuda.h). */
enum {
    CU_SUCCESS = 0,
    CU_INVALID_VALUE = 1,
    CU_OUT_OF_MEMORY = 2,
    CU_STUB_LIBRARY = 34,
    CU_INSUFFICIENT_DRIVER = 35,
    CU_NO_DEVICE = 100,
    CU_INVALID_DEVICE = 101,
    CU_NO_BINARY_FOR_GPU = 209,
    CU_INVALID_IMAGE = 200,
    CU_NOT_FOUND = 500,
};

/* Device attributes (cuda.h's CUdevice_attribute). */
enum {
    CU_ATTR_MULTIPROCESSOR_COUNT = 16,
    CU_ATTR_CC_MAJOR = 75,
    CU_ATTR_CC_MINOR = 76,
};

/* ------------------------------------------------------------------------ */
/* Loading                                                                    */
/* ------------------------------------------------------------------------ */

/* dlsym returns void *; POSIX guarantees it converts to a function pointer. */
static void *lookup(void *lib, const char *sym, const char *alt) {
    void *p = dlsym(lib, sym);
    if (!p && alt)
        p = dlsym(lib, alt);
    return p;
}

const char *kf_cuda_driver_resolve(void *lib, kf_cuda_driver *d) {
    const char *missing = NULL;
#define KF_CUDA_RESOLVE(field, sym, alt, params)                                                   \
    do {                                                                                           \
        void *p = lookup(lib, sym, alt);                                                           \
        if (!p && !missing)                                                                        \
            missing = sym;                                                                         \
        memcpy(&d->field, &p, sizeof p);                                                           \
    } while (0);
    KF_CUDA_DRIVER_FUNCS(KF_CUDA_RESOLVE)
#undef KF_CUDA_RESOLVE
#define KF_CUDA_RESOLVE_OPTIONAL(field, sym, alt, params)                                          \
    do {                                                                                           \
        void *p = lookup(lib, sym, alt);                                                           \
        memcpy(&d->field, &p, sizeof p);                                                           \
    } while (0);
    KF_CUDA_DRIVER_OPTIONAL_FUNCS(KF_CUDA_RESOLVE_OPTIONAL)
#undef KF_CUDA_RESOLVE_OPTIONAL
    return missing;
}

kf_status kf_cuda_driver_load(const kf_mem *mem, const char *lib, kf_cuda_driver **out, char *err) {
    if (!mem || !out)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_driver_load: NULL argument");
    *out = NULL;
    if (!lib)
        lib = KF_CUDA_DRIVER_LIB;
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        /* dlerror() reads "LIB: cannot open ...": drop the repeated name. */
        const char *why = dlerror();
        size_t n = strlen(lib);
        if (why && strncmp(why, lib, n) == 0 && strncmp(why + n, ": ", 2) == 0)
            why += n + 2;
        return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                          "no CUDA driver (%s not found: %s); use the CPU target, or install the "
                          "NVIDIA driver on a machine with a GPU",
                          lib, why ? why : "dlopen failed");
    }
    kf_cuda_driver *d = kf_mem_calloc(mem, 1, sizeof *d);
    if (!d) {
        dlclose(h);
        return kf_msg_set(err, KF_ERR_OUT_OF_MEMORY, "out of memory loading the CUDA driver");
    }
    d->lib = h;
    const char *missing = kf_cuda_driver_resolve(h, d);
    kf_status st = KF_OK;
    if (missing) {
        st = kf_msg_set(err, KF_ERR_UNSUPPORTED,
                        "the CUDA driver %s has no %s: it is too old for kfuse (or not a driver); "
                        "update the NVIDIA driver",
                        lib, missing);
        goto fail;
    }
    kf_cu_result r = d->cuInit(0);
    if (r == CU_STUB_LIBRARY) {
        st = kf_msg_set(err, KF_ERR_UNSUPPORTED,
                        "no CUDA driver: %s is the CUDA toolkit's stub library, which only "
                        "satisfies the linker; take the toolkit's lib64/stubs out of "
                        "LD_LIBRARY_PATH, or install the NVIDIA driver",
                        lib);
        goto fail;
    }
    if (r == CU_NO_DEVICE) {
        st = kf_msg_set(err, KF_ERR_UNSUPPORTED,
                        "no CUDA device: the driver %s loaded but sees no GPU (check "
                        "CUDA_VISIBLE_DEVICES and nvidia-smi); use the CPU target",
                        lib);
        goto fail;
    }
    if (r != CU_SUCCESS) {
        char msg[KF_MSG_MAX];
        st = kf_cuda_check(d, r, "cuInit", NULL, msg);
        if (r == CU_INSUFFICIENT_DRIVER)
            st = KF_ERR_UNSUPPORTED;
        kf_msg_set(err, st, "the CUDA driver %s failed to initialize: %s", lib, msg);
        goto fail;
    }
    if (d->cuDriverGetVersion(&d->driver_version) != CU_SUCCESS)
        d->driver_version = 0;
    if (d->cuDeviceGetCount(&d->device_count) != CU_SUCCESS)
        d->device_count = 0;
    *out = d;
    return KF_OK;
fail:
    /* Nothing of the driver is in use yet: unloading is safe here. */
    dlclose(h);
    kf_mem_free(mem, d, sizeof *d);
    return st;
}

void kf_cuda_driver_release(const kf_mem *mem, kf_cuda_driver *drv) {
    if (!drv)
        return;
    /* No dlclose: see cuda.h. */
    kf_mem_free(mem, drv, sizeof *drv);
}

kf_status kf_ctx_cuda_driver(kf_ctx *ctx, const kf_cuda_driver **out, char *err) {
    if (!ctx || !out)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_ctx_cuda_driver: NULL argument");
    *out = NULL;
    pthread_mutex_lock(&ctx->lock);
    if (!ctx->cuda && ctx->cuda_status == KF_OK) {
        kf_status st = kf_cuda_driver_load(&ctx->mem, NULL, &ctx->cuda, ctx->cuda_error);
        /* Out of memory is worth retrying; a missing driver is not. */
        if (st != KF_OK && st != KF_ERR_OUT_OF_MEMORY)
            ctx->cuda_status = st;
        if (st == KF_ERR_OUT_OF_MEMORY) {
            pthread_mutex_unlock(&ctx->lock);
            return kf_msg_set(err, st, "%s", ctx->cuda_error);
        }
    }
    kf_status st = ctx->cuda_status;
    if (st == KF_OK)
        *out = ctx->cuda;
    else
        kf_msg_set(err, st, "%s", ctx->cuda_error);
    pthread_mutex_unlock(&ctx->lock);
    return st;
}

kf_status kf_cuda_check(const kf_cuda_driver *drv, kf_cu_result r, const char *call,
                        const char *kernel, char *err) {
    if (r == CU_SUCCESS)
        return KF_OK;
    const char *name = NULL, *str = NULL;
    if (drv && drv->cuGetErrorName)
        drv->cuGetErrorName(r, &name);
    if (drv && drv->cuGetErrorString)
        drv->cuGetErrorString(r, &str);
    char kbuf[96] = "";
    if (kernel)
        snprintf(kbuf, sizeof kbuf, " (kernel '%s')", kernel);
    kf_status st;
    switch (r) {
    case CU_OUT_OF_MEMORY:
        st = KF_ERR_OUT_OF_MEMORY;
        break;
    case CU_INVALID_VALUE:
        st = KF_ERR_INVALID_ARGUMENT;
        break;
    case CU_NOT_FOUND:
        st = KF_ERR_NOT_FOUND;
        break;
    case CU_NO_DEVICE:
    case CU_INVALID_DEVICE:
    case CU_STUB_LIBRARY:
    case CU_INSUFFICIENT_DRIVER:
    case CU_NO_BINARY_FOR_GPU:
    case CU_INVALID_IMAGE:
        st = KF_ERR_UNSUPPORTED;
        break;
    default:
        st = KF_ERR_INTERNAL;
        break;
    }
    if (name)
        return kf_msg_set(err, st, "%s%s: %s: %s", call, kbuf, name, str ? str : "");
    return kf_msg_set(err, st, "%s%s: CUDA driver error %d", call, kbuf, r);
}

const char *kf_cuda_arch_for(int cc_major, int cc_minor, char *buf) {
    if (cc_major == 9)
        snprintf(buf, KF_ARCH_MAX, "sm_90a");
    else if (cc_major == 8)
        snprintf(buf, KF_ARCH_MAX, "sm_80");
    else
        snprintf(buf, KF_ARCH_MAX, "sm_%d%d", cc_major, cc_minor);
    return buf;
}

/* ------------------------------------------------------------------------ */
/* Devices and the rest                                                       */
/* ------------------------------------------------------------------------ */

/* Makes the device's primary context current on this thread. */
static kf_status bind(const kf_cuda_device *dev, char *err) {
    if (!dev || !dev->drv || !dev->ctx)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "CUDA device not open");
    kf_cu_context cur = NULL;
    if (dev->drv->cuCtxGetCurrent(&cur) == CU_SUCCESS && cur == dev->ctx)
        return KF_OK;
    return kf_cuda_check(dev->drv, dev->drv->cuCtxSetCurrent(dev->ctx), "cuCtxSetCurrent", NULL,
                         err);
}

kf_status kf_cuda_device_query(const kf_cuda_driver *drv, int ordinal, kf_cuda_device *out,
                               char *err) {
    if (!out)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_device_open: NULL argument");
    memset(out, 0, sizeof *out);
    if (!drv)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_device_open: NULL driver");
    if (ordinal < 0 || ordinal >= drv->device_count)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "CUDA device %d does not exist: this machine has %d (devices 0..%d)",
                          ordinal, drv->device_count, drv->device_count - 1);
    out->drv = drv;
    out->ordinal = ordinal;
    kf_status st =
        kf_cuda_check(drv, drv->cuDeviceGet(&out->dev, ordinal), "cuDeviceGet", NULL, err);
    if (st == KF_OK)
        st = kf_cuda_check(drv,
                           drv->cuDeviceGetAttribute(&out->cc_major, CU_ATTR_CC_MAJOR, out->dev),
                           "cuDeviceGetAttribute(compute capability)", NULL, err);
    if (st == KF_OK)
        st = kf_cuda_check(drv,
                           drv->cuDeviceGetAttribute(&out->cc_minor, CU_ATTR_CC_MINOR, out->dev),
                           "cuDeviceGetAttribute(compute capability)", NULL, err);
    if (st == KF_OK)
        st = kf_cuda_check(
            drv, drv->cuDeviceGetAttribute(&out->sm_count, CU_ATTR_MULTIPROCESSOR_COUNT, out->dev),
            "cuDeviceGetAttribute(multiprocessor count)", NULL, err);
    if (st == KF_OK)
        st = kf_cuda_check(drv, drv->cuDeviceGetName(out->name, (int)sizeof out->name, out->dev),
                           "cuDeviceGetName", NULL, err);
    if (st != KF_OK)
        return st;
    out->name[sizeof out->name - 1] = 0;
    kf_cuda_arch_for(out->cc_major, out->cc_minor, out->arch);
    out->stream_evict_first = kf_cuda_stream_evict_first(out->name);
    return KF_OK;
}

kf_status kf_cuda_device_attach(kf_cuda_device *dev, char *err) {
    if (!dev || !dev->drv)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_device_attach: no device");
    if (dev->ctx)
        return KF_OK;
    const kf_cuda_driver *drv = dev->drv;
    kf_status st = kf_cuda_check(drv, drv->cuDevicePrimaryCtxRetain(&dev->ctx, dev->dev),
                                 "cuDevicePrimaryCtxRetain", NULL, err);
    if (st == KF_OK)
        st = bind(dev, err);
    if (st != KF_OK)
        kf_cuda_device_close(dev);
    return st;
}

kf_status kf_cuda_device_open(const kf_cuda_driver *drv, int ordinal, kf_cuda_device *out,
                              char *err) {
    kf_status st = kf_cuda_device_query(drv, ordinal, out, err);
    if (st == KF_OK)
        st = kf_cuda_device_attach(out, err);
    return st;
}

bool kf_cuda_stream_evict_first(const char *name) {
    return name && strncmp(name, "NVIDIA H100", 11) == 0;
}

void kf_cuda_device_close(kf_cuda_device *dev) {
    if (!dev)
        return;
    if (dev->drv && dev->ctx)
        dev->drv->cuDevicePrimaryCtxRelease(dev->dev);
    dev->ctx = NULL;
}

kf_status kf_cuda_module_load(const kf_cuda_device *dev, const void *cubin, const char *kernel,
                              kf_cu_module *out, char *err) {
    if (!out || !cubin)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_module_load: NULL argument");
    *out = NULL;
    kf_status st = bind(dev, err);
    if (st != KF_OK)
        return st;
    return kf_cuda_check(dev->drv, dev->drv->cuModuleLoadData(out, cubin), "cuModuleLoadData",
                         kernel, err);
}

void kf_cuda_module_unload(const kf_cuda_device *dev, kf_cu_module mod) {
    if (mod && bind(dev, NULL) == KF_OK)
        dev->drv->cuModuleUnload(mod);
}

kf_status kf_cuda_module_set_u32(const kf_cuda_device *dev, kf_cu_module mod, const char *symbol,
                                 unsigned value, const char *kernel, char *err) {
    if (!mod || !symbol)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_module_set_u32: NULL argument");
    kf_status st = bind(dev, err);
    if (st != KF_OK)
        return st;
    kf_cu_deviceptr ptr = 0;
    size_t bytes = 0;
    kf_cu_result r = dev->drv->cuModuleGetGlobal(&ptr, &bytes, mod, symbol);
    if (r == CU_NOT_FOUND)
        return KF_OK;
    char call[96];
    snprintf(call, sizeof call, "cuModuleGetGlobal(%s)", symbol);
    st = kf_cuda_check(dev->drv, r, call, kernel, err);
    if (st != KF_OK)
        return st;
    if (bytes != sizeof value)
        return kf_msg_set(err, KF_ERR_INTERNAL,
                          "kernel '%s': the module's %s is %zu bytes, not %zu",
                          kernel ? kernel : "?", symbol, bytes, sizeof value);
    snprintf(call, sizeof call, "cuMemcpyHtoD(%s)", symbol);
    return kf_cuda_check(dev->drv, dev->drv->cuMemcpyHtoD(ptr, &value, sizeof value), call, kernel,
                         err);
}

kf_status kf_cuda_function(const kf_cuda_device *dev, kf_cu_module mod, const char *name,
                           kf_cu_function *out, char *err) {
    if (!out || !mod || !name)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_function: NULL argument");
    *out = NULL;
    kf_status st = bind(dev, err);
    if (st != KF_OK)
        return st;
    return kf_cuda_check(dev->drv, dev->drv->cuModuleGetFunction(out, mod, name),
                         "cuModuleGetFunction", name, err);
}

kf_status kf_cuda_function_set_shared(const kf_cuda_device *dev, kf_cu_function fn, unsigned bytes,
                                      const char *kernel, char *err) {
    if (!fn)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "kf_cuda_function_set_shared: NULL function");
    if (bytes > 0x7fffffffu)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "kernel '%s': %u bytes of dynamic shared memory", kernel ? kernel : "?",
                          bytes);
    kf_status st = bind(dev, err);
    if (st != KF_OK)
        return st;
    char call[80];
    snprintf(call, sizeof call, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, %u)", bytes);
    return kf_cuda_check(dev->drv,
                         dev->drv->cuFuncSetAttribute(
                             fn, KF_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)bytes),
                         call, kernel, err);
}

/* The cluster's blocks in x, y, z, each 0 read as 1. */
static void cluster_of(const kf_cuda_launch_cfg *cfg, unsigned c[3]) {
    for (int i = 0; i < 3; i++)
        c[i] = cfg->cluster[i] ? cfg->cluster[i] : 1;
}

bool kf_cuda_launch_has_cluster(const kf_cuda_launch_cfg *cfg) {
    unsigned c[3];
    if (!cfg)
        return false;
    cluster_of(cfg, c);
    return c[0] != 1 || c[1] != 1 || c[2] != 1;
}

kf_status kf_cuda_launch_check(const kf_cuda_launch_cfg *cfg, char *err) {
    if (!cfg)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_launch_check: NULL argument");
    static const char axis[3] = {'x', 'y', 'z'};
    const char *k = cfg->kernel ? cfg->kernel : "?";
    const unsigned *g = cfg->grid, *b = cfg->block;
    unsigned c[3];
    cluster_of(cfg, c);
    for (int i = 0; i < 3; i++) {
        if (g[i] == 0)
            return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                              "kernel '%s': grid %c is 0 (grid %ux%ux%u); every grid dimension "
                              "must be at least 1",
                              k, axis[i], g[0], g[1], g[2]);
        if (b[i] == 0)
            return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                              "kernel '%s': block %c is 0 (block %ux%ux%u); every block "
                              "dimension must be at least 1",
                              k, axis[i], b[0], b[1], b[2]);
    }
    for (int i = 0; i < 3; i++)
        if (g[i] % c[i] != 0)
            return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                              "kernel '%s': grid %c = %u is not a multiple of the cluster's %c = "
                              "%u (grid %ux%ux%u, cluster %ux%ux%u); round the grid up to whole "
                              "clusters",
                              k, axis[i], g[i], axis[i], c[i], g[0], g[1], g[2], c[0], c[1], c[2]);
    return KF_OK;
}

/* Thread-block clusters and tensor maps are Hopper's (compute capability
 * 9.0). `who` opens the message: "kernel 'k'", "tensor map 'A'". */
static kf_status need_sm90(const kf_cuda_device *dev, const char *who, const char *name,
                           const char *what, char *err) {
    if (dev->cc_major >= 9)
        return KF_OK;
    return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                      "%s '%s': %s need compute capability 9.0 or newer; device %d (%s) is %d.%d",
                      who, name ? name : "?", what, dev->ordinal, dev->name, dev->cc_major,
                      dev->cc_minor);
}

/* cfg as the driver's launch config, with the cluster attribute in *attr. */
static kf_cu_launch_config launch_config(const kf_cuda_launch_cfg *cfg,
                                         kf_cu_launch_attribute *attr) {
    unsigned c[3];
    cluster_of(cfg, c);
    memset(attr, 0, sizeof *attr);
    attr->id = KF_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr->value.cluster_dim.x = c[0];
    attr->value.cluster_dim.y = c[1];
    attr->value.cluster_dim.z = c[2];
    kf_cu_launch_config lc = {
        .grid_x = cfg->grid[0],
        .grid_y = cfg->grid[1],
        .grid_z = cfg->grid[2],
        .block_x = cfg->block[0],
        .block_y = cfg->block[1],
        .block_z = cfg->block[2],
        .shared_bytes = cfg->shared_bytes,
        .stream = cfg->stream,
        .attrs = attr,
        .num_attrs = 1,
    };
    return lc;
}

kf_status kf_cuda_launch(const kf_cuda_device *dev, kf_cu_function fn,
                         const kf_cuda_launch_cfg *cfg, void **params, char *err) {
    if (!fn || !cfg)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_launch: NULL argument");
    kf_status st = kf_cuda_launch_check(cfg, err);
    if (st == KF_OK)
        st = bind(dev, err);
    if (st != KF_OK)
        return st;
    if (!kf_cuda_launch_has_cluster(cfg)) {
        kf_cu_result r = dev->drv->cuLaunchKernel(fn, cfg->grid[0], cfg->grid[1], cfg->grid[2],
                                                  cfg->block[0], cfg->block[1], cfg->block[2],
                                                  cfg->shared_bytes, cfg->stream, params, NULL);
        return kf_cuda_check(dev->drv, r, "cuLaunchKernel", cfg->kernel, err);
    }
    st = need_sm90(dev, "kernel", cfg->kernel, "thread-block clusters", err);
    if (st != KF_OK)
        return st;
    unsigned c[3];
    cluster_of(cfg, c);
    if (!dev->drv->cuLaunchKernelEx)
        return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                          "kernel '%s': a %ux%ux%u cluster launch needs cuLaunchKernelEx, which "
                          "this CUDA driver (version %d) lacks; update the NVIDIA driver (CUDA "
                          "11.8 or newer)",
                          cfg->kernel ? cfg->kernel : "?", c[0], c[1], c[2],
                          dev->drv->driver_version);
    kf_cu_launch_attribute attr;
    kf_cu_launch_config lc = launch_config(cfg, &attr);
    char call[192]; /* the longest text: three 10-digit extents and the hint */
    unsigned long long blocks = (unsigned long long)c[0] * c[1] * c[2];
    snprintf(call, sizeof call, "cuLaunchKernelEx(cluster %ux%ux%u%s)", c[0], c[1], c[2],
             blocks > 8 ? ", above the portable 8 blocks: see "
                          "kf_cuda_function_set_cluster_non_portable"
                        : "");
    return kf_cuda_check(dev->drv, dev->drv->cuLaunchKernelEx(&lc, fn, params, NULL), call,
                         cfg->kernel, err);
}

kf_status kf_cuda_max_active_clusters(const kf_cuda_device *dev, kf_cu_function fn,
                                      const kf_cuda_launch_cfg *cfg, int *out, char *err) {
    if (!fn || !cfg || !out)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "kf_cuda_max_active_clusters: NULL argument");
    *out = 0;
    kf_status st = kf_cuda_launch_check(cfg, err);
    if (st == KF_OK)
        st = bind(dev, err);
    if (st != KF_OK)
        return st;
    if (!kf_cuda_launch_has_cluster(cfg))
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "kernel '%s': kf_cuda_max_active_clusters needs a cluster of 2 or "
                          "more blocks in the launch config",
                          cfg->kernel ? cfg->kernel : "?");
    st = need_sm90(dev, "kernel", cfg->kernel, "thread-block clusters", err);
    if (st != KF_OK)
        return st;
    if (!dev->drv->cuOccupancyMaxActiveClusters)
        return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                          "kernel '%s': this CUDA driver (version %d) has no "
                          "cuOccupancyMaxActiveClusters; update the NVIDIA driver",
                          cfg->kernel ? cfg->kernel : "?", dev->drv->driver_version);
    kf_cu_launch_attribute attr;
    kf_cu_launch_config lc = launch_config(cfg, &attr);
    return kf_cuda_check(dev->drv, dev->drv->cuOccupancyMaxActiveClusters(out, fn, &lc),
                         "cuOccupancyMaxActiveClusters", cfg->kernel, err);
}

kf_status kf_cuda_function_set_cluster_non_portable(const kf_cuda_device *dev, kf_cu_function fn,
                                                    bool allow, const char *kernel, char *err) {
    if (!fn)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "kf_cuda_function_set_cluster_non_portable: NULL function");
    kf_status st = bind(dev, err);
    if (st == KF_OK)
        st = need_sm90(dev, "kernel", kernel, "clusters above 8 blocks", err);
    if (st != KF_OK)
        return st;
    return kf_cuda_check(dev->drv,
                         dev->drv->cuFuncSetAttribute(
                             fn, KF_CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, allow),
                         "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)", kernel, err);
}

/* ------------------------------------------------------------------------ */
/* Tensor maps                                                                */
/* ------------------------------------------------------------------------ */

unsigned kf_cuda_tmap_dtype_size(kf_cu_tensor_map_data_type dtype) {
    switch (dtype) {
    case KF_CU_TENSOR_MAP_DATA_TYPE_UINT8:
        return 1;
    case KF_CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case KF_CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case KF_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
        return 2;
    case KF_CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case KF_CU_TENSOR_MAP_DATA_TYPE_INT32:
    case KF_CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case KF_CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case KF_CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case KF_CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ:
        return 4;
    case KF_CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case KF_CU_TENSOR_MAP_DATA_TYPE_INT64:
    case KF_CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

static bool tmap_dtype_is_float(kf_cu_tensor_map_data_type dtype) {
    return dtype >= KF_CU_TENSOR_MAP_DATA_TYPE_FLOAT16 &&
           dtype <= KF_CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ;
}

kf_status kf_cuda_tmap_check(const kf_cuda_tmap_desc *desc, kf_cu_deviceptr base, char *err) {
    if (!desc)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_tmap_check: NULL desc");
    /* Every message opens with "tensor map 'NAME': " (or "tensor map: "). */
    char who[80];
    if (desc->name)
        snprintf(who, sizeof who, "tensor map '%s'", desc->name);
    else
        snprintf(who, sizeof who, "tensor map");
#define BAD(...) return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, __VA_ARGS__)
    const kf_cuda_tmap_desc *d = desc;
    if ((unsigned)d->dtype >= KF_CU_TENSOR_MAP_DATA_TYPE_COUNT)
        BAD("%s: dtype = %d is not a CUtensorMapDataType (0..%d)", who, (int)d->dtype,
            KF_CU_TENSOR_MAP_DATA_TYPE_COUNT - 1);
    unsigned esize = kf_cuda_tmap_dtype_size(d->dtype);
    if (esize == 0)
        return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                          "%s: dtype = %d is a packed 16U4/16U6 type, which kfuse does not "
                          "describe; use UINT8..TFLOAT32_FTZ",
                          who, (int)d->dtype);
    if ((unsigned)d->interleave >= KF_CU_TENSOR_MAP_INTERLEAVE_COUNT)
        BAD("%s: interleave = %d is not a CUtensorMapInterleave (0..%d)", who, (int)d->interleave,
            KF_CU_TENSOR_MAP_INTERLEAVE_COUNT - 1);
    if ((unsigned)d->swizzle >= KF_CU_TENSOR_MAP_SWIZZLE_COUNT)
        BAD("%s: swizzle = %d is not a CUtensorMapSwizzle (0..%d)", who, (int)d->swizzle,
            KF_CU_TENSOR_MAP_SWIZZLE_COUNT - 1);
    if ((unsigned)d->l2_promotion >= KF_CU_TENSOR_MAP_L2_PROMOTION_COUNT)
        BAD("%s: l2_promotion = %d is not a CUtensorMapL2promotion (0..%d)", who,
            (int)d->l2_promotion, KF_CU_TENSOR_MAP_L2_PROMOTION_COUNT - 1);
    if ((unsigned)d->oob_fill >= KF_CU_TENSOR_MAP_FLOAT_OOB_FILL_COUNT)
        BAD("%s: oob_fill = %d is not a CUtensorMapFloatOOBfill (0..%d)", who, (int)d->oob_fill,
            KF_CU_TENSOR_MAP_FLOAT_OOB_FILL_COUNT - 1);
    if (d->oob_fill != KF_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE && !tmap_dtype_is_float(d->dtype))
        BAD("%s: oob_fill = NAN_REQUEST_ZERO_FMA needs a floating-point dtype (dtype = %d)", who,
            (int)d->dtype);
    bool interleaved = d->interleave != KF_CU_TENSOR_MAP_INTERLEAVE_NONE;
    bool i32 = d->interleave == KF_CU_TENSOR_MAP_INTERLEAVE_32B;
    if (d->rank < 1 || d->rank > KF_CUDA_TMAP_RANK_MAX)
        BAD("%s: rank = %u; a tensor map has 1..%d dimensions", who, d->rank,
            KF_CUDA_TMAP_RANK_MAX);
    if (interleaved && d->rank < 3)
        BAD("%s: rank = %u; an interleaved map needs rank 3 or more", who, d->rank);
    if (i32 && d->swizzle != KF_CU_TENSOR_MAP_SWIZZLE_32B)
        BAD("%s: swizzle = %d; interleave = 32B needs swizzle = 32B", who, (int)d->swizzle);

    unsigned align = i32 ? 32 : 16;
    if (base == 0)
        BAD("%s: base is NULL", who);
    if (base % align != 0)
        BAD("%s: base 0x%llx is not %u-byte aligned", who, base, align);
    for (unsigned i = 0; i < d->rank; i++)
        if (d->dims[i] == 0 || d->dims[i] > (1ull << 32))
            BAD("%s: dims[%u] = %llu; a dimension has 1..2^32 elements", who, i, d->dims[i]);
    for (unsigned i = 0; i + 1 < d->rank; i++) {
        unsigned long long s = d->strides[i];
        if (s == 0 || s % align != 0)
            BAD("%s: strides[%u] = %llu bytes; a stride is a non-zero multiple of %u bytes", who, i,
                s, align);
        if (s >= (1ull << 40))
            BAD("%s: strides[%u] = %llu bytes; a stride is below 2^40 bytes", who, i, s);
    }
    if (!interleaved && d->rank > 1 && d->strides[0] < d->dims[0] * esize)
        BAD("%s: strides[0] = %llu bytes is less than a row of dims[0] = %llu elements of %u "
            "bytes (%llu)",
            who, d->strides[0], d->dims[0], esize, d->dims[0] * esize);
    for (unsigned i = 0; i < d->rank; i++) {
        if (d->box[i] == 0 || d->box[i] > 256)
            BAD("%s: box[%u] = %u; a box side is 1..256 elements", who, i, d->box[i]);
        unsigned es = d->elem_strides[i] ? d->elem_strides[i] : 1;
        if (es > 8)
            BAD("%s: elem_strides[%u] = %u; an element stride is 1..8", who, i, es);
    }
    unsigned inner = d->box[0] * esize;
    if (!interleaved && inner % 16 != 0)
        BAD("%s: box[0] = %u elements of %u bytes is %u bytes, not a multiple of 16", who,
            d->box[0], esize, inner);
    static const unsigned span[KF_CU_TENSOR_MAP_SWIZZLE_COUNT] = {0, 32, 64, 128, 128, 128, 128};
    if (!interleaved && d->swizzle != KF_CU_TENSOR_MAP_SWIZZLE_NONE && inner > span[d->swizzle])
        BAD("%s: box[0] = %u elements of %u bytes is %u bytes, wider than the swizzle's %u-byte "
            "span; use a narrower box or a wider swizzle",
            who, d->box[0], esize, inner, span[d->swizzle]);
#undef BAD
    return KF_OK;
}

kf_status kf_cuda_tensor_map_encode(const kf_cuda_device *dev, const kf_cuda_tmap_desc *desc,
                                    kf_cu_deviceptr base, kf_cu_tensor_map *out, char *err) {
    if (!desc || !out)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_tensor_map_encode: NULL argument");
    if ((uintptr_t)out % 64 != 0)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "kf_cuda_tensor_map_encode: out %p is not 64-byte aligned", (void *)out);
    memset(out, 0, sizeof *out);
    kf_status st = kf_cuda_tmap_check(desc, base, err);
    if (st == KF_OK)
        st = bind(dev, err);
    if (st == KF_OK)
        st = need_sm90(dev, "tensor map", desc->name, "tensor maps (TMA)", err);
    if (st != KF_OK)
        return st;
    if (!dev->drv->cuTensorMapEncodeTiled)
        return kf_msg_set(err, KF_ERR_UNSUPPORTED,
                          "tensor map '%s': this CUDA driver (version %d) has no "
                          "cuTensorMapEncodeTiled; update the NVIDIA driver (CUDA 12.0 or newer)",
                          desc->name ? desc->name : "?", dev->drv->driver_version);
    unsigned es[KF_CUDA_TMAP_RANK_MAX];
    for (unsigned i = 0; i < KF_CUDA_TMAP_RANK_MAX; i++)
        es[i] = desc->elem_strides[i] ? desc->elem_strides[i] : 1;
    void *addr = (void *)(uintptr_t)base; /* a device address, never dereferenced here */
    kf_cu_result r = dev->drv->cuTensorMapEncodeTiled(
        out, desc->dtype, desc->rank, addr, desc->dims, desc->strides, desc->box, es,
        desc->interleave, desc->swizzle, desc->l2_promotion, desc->oob_fill);
    char call[96];
    snprintf(call, sizeof call, "cuTensorMapEncodeTiled(tensor map '%s')",
             desc->name ? desc->name : "?");
    return kf_cuda_check(dev->drv, r, call, NULL, err);
}

kf_status kf_cuda_mem_alloc(const kf_cuda_device *dev, size_t bytes, kf_cu_deviceptr *out,
                            char *err) {
    if (!out)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_mem_alloc: NULL argument");
    *out = 0;
    kf_status st = bind(dev, err);
    if (st != KF_OK)
        return st;
    return kf_cuda_check(dev->drv, dev->drv->cuMemAlloc(out, bytes ? bytes : 1), "cuMemAlloc", NULL,
                         err);
}

void kf_cuda_mem_free(const kf_cuda_device *dev, kf_cu_deviceptr ptr) {
    if (ptr && bind(dev, NULL) == KF_OK)
        dev->drv->cuMemFree(ptr);
}

kf_status kf_cuda_copy_to_device(const kf_cuda_device *dev, kf_cu_deviceptr dst, const void *src,
                                 size_t bytes, char *err) {
    kf_status st = bind(dev, err);
    if (st != KF_OK)
        return st;
    return kf_cuda_check(dev->drv, dev->drv->cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD", NULL,
                         err);
}

kf_status kf_cuda_copy_to_host(const kf_cuda_device *dev, void *dst, kf_cu_deviceptr src,
                               size_t bytes, char *err) {
    kf_status st = bind(dev, err);
    if (st != KF_OK)
        return st;
    return kf_cuda_check(dev->drv, dev->drv->cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH", NULL,
                         err);
}

kf_status kf_cuda_stream_create(const kf_cuda_device *dev, kf_cu_stream *out, char *err) {
    if (!out)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_stream_create: NULL argument");
    *out = NULL;
    kf_status st = bind(dev, err);
    if (st != KF_OK)
        return st;
    return kf_cuda_check(dev->drv, dev->drv->cuStreamCreate(out, 0), "cuStreamCreate", NULL, err);
}

kf_status kf_cuda_stream_sync(const kf_cuda_device *dev, kf_cu_stream stream, const char *kernel,
                              char *err) {
    kf_status st = bind(dev, err);
    if (st != KF_OK)
        return st;
    return kf_cuda_check(dev->drv, dev->drv->cuStreamSynchronize(stream), "cuStreamSynchronize",
                         kernel, err);
}

void kf_cuda_stream_destroy(const kf_cuda_device *dev, kf_cu_stream stream) {
    if (stream && bind(dev, NULL) == KF_OK)
        dev->drv->cuStreamDestroy(stream);
}

kf_status kf_cuda_event_create(const kf_cuda_device *dev, kf_cu_event *out, char *err) {
    if (!out)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_event_create: NULL argument");
    *out = NULL;
    kf_status st = bind(dev, err);
    if (st != KF_OK)
        return st;
    return kf_cuda_check(dev->drv, dev->drv->cuEventCreate(out, 0), "cuEventCreate", NULL, err);
}

kf_status kf_cuda_event_record(const kf_cuda_device *dev, kf_cu_event ev, kf_cu_stream stream,
                               char *err) {
    kf_status st = bind(dev, err);
    if (st != KF_OK)
        return st;
    return kf_cuda_check(dev->drv, dev->drv->cuEventRecord(ev, stream), "cuEventRecord", NULL, err);
}

kf_status kf_cuda_event_elapsed(const kf_cuda_device *dev, kf_cu_event start, kf_cu_event end,
                                float *ms, char *err) {
    if (!ms)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_event_elapsed: NULL argument");
    *ms = 0;
    kf_status st = bind(dev, err);
    if (st == KF_OK)
        st = kf_cuda_check(dev->drv, dev->drv->cuEventSynchronize(end), "cuEventSynchronize", NULL,
                           err);
    if (st == KF_OK)
        st = kf_cuda_check(dev->drv, dev->drv->cuEventElapsedTime(ms, start, end),
                           "cuEventElapsedTime", NULL, err);
    return st;
}

void kf_cuda_event_destroy(const kf_cuda_device *dev, kf_cu_event ev) {
    if (ev && bind(dev, NULL) == KF_OK)
        dev->drv->cuEventDestroy(ev);
}

kf_status kf_cuda_check_pointer(const kf_cuda_device *dev, const void *ptr, size_t bytes,
                                bool device, size_t align, char *err) {
    const kf_cuda_driver *drv = dev->drv;
    uintptr_t p = (uintptr_t)ptr;
    if (device && align > 1 && (p & (align - 1)) != 0)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "0x%" PRIxPTR " is not %zu-byte aligned (it is %u-byte aligned); the "
                          "kernels' vector loads and tensor maps need %zu",
                          p, align, (unsigned)(p & (~p + 1)), align);
    if (!drv->cuPointerGetAttributes)
        return KF_OK; /* a driver that cannot tell: unchecked (documented) */
    kf_status st = bind(dev, err);
    if (st != KF_OK)
        return st;
    unsigned type = 0, managed = 0;
    kf_cu_context c = NULL;
    int ordinal = -1;
    kf_cu_deviceptr start = 0;
    size_t size = 0;
    static const int attrs[6] = {
        KF_CU_POINTER_ATTRIBUTE_MEMORY_TYPE,      KF_CU_POINTER_ATTRIBUTE_IS_MANAGED,
        KF_CU_POINTER_ATTRIBUTE_CONTEXT,          KF_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        KF_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, KF_CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *data[6] = {&type, &managed, &c, &ordinal, &start, &size};
    /* A host binding needs only to be no device memory: two attributes. */
    kf_cu_result r = drv->cuPointerGetAttributes(device ? 6u : 2u, attrs, data, (kf_cu_deviceptr)p);
    if (!device) {
        if (r == 0 && type == KF_CU_MEMORYTYPE_DEVICE && !managed)
            return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                              "0x%" PRIxPTR " is device memory, but kf_program_run takes host "
                              "pointers (pass device pointers to kf_program_run_device)",
                              p);
        return KF_OK;
    }
    if (r != 0 || type == 0)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "0x%" PRIxPTR " is not CUDA memory (a host pointer? pass host pointers "
                          "to kf_program_run)",
                          p);
    if (type == KF_CU_MEMORYTYPE_HOST && !managed)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "0x%" PRIxPTR " is page-locked host memory, not device memory (pass it "
                          "to kf_program_run, or copy it to the device first)",
                          p);
    if (c && c != dev->ctx)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "0x%" PRIxPTR " belongs to another CUDA context than the program's (the "
                          "primary context of device %d); allocate it there",
                          p, dev->ordinal);
    if (ordinal >= 0 && ordinal != dev->ordinal && !managed)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT,
                          "0x%" PRIxPTR
                          " is memory of device %d, but the program runs on device %d",
                          p, ordinal, dev->ordinal);
    if (size && (start > p || (size_t)(p - start) > size || size - (size_t)(p - start) < bytes))
        return kf_msg_set(
            err, KF_ERR_INVALID_ARGUMENT,
            "0x%" PRIxPTR " lies in an allocation that holds %zu bytes from it, "
            "shorter than the tensor's %zu",
            p, start <= p && (size_t)(p - start) <= size ? size - (size_t)(p - start) : (size_t)0,
            bytes);
    return KF_OK;
}
