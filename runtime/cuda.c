/*
 * cuda.c -- the Driver API through dlopen (the contract is in cuda.h).
 *
 *   kf_ctx_cuda_driver: ctx mutex -> first call: dlopen libcuda.so.1 -> dlsym
 *     every entry point -> cuInit (stub? no device?) -> table kept on the ctx;
 *     a failure is kept instead, with its message
 *   wrappers: make the device's primary context current -> call -> on failure
 *     "call (kernel 'name'): CUDA_ERROR_X: string"
 */
#include <dlfcn.h>
#include <pthread.h>
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
    const char *missing = NULL;
    /* dlsym returns void *; POSIX guarantees it converts to a function pointer. */
#define KF_CUDA_RESOLVE(field, sym, alt, params)                                                   \
    do {                                                                                           \
        void *p = dlsym(h, sym);                                                                   \
        if (!p && alt)                                                                             \
            p = dlsym(h, alt ? alt : sym);                                                         \
        if (!p && !missing)                                                                        \
            missing = sym;                                                                         \
        memcpy(&d->field, &p, sizeof p);                                                           \
    } while (0);
    KF_CUDA_DRIVER_FUNCS(KF_CUDA_RESOLVE)
#undef KF_CUDA_RESOLVE
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

kf_status kf_cuda_device_open(const kf_cuda_driver *drv, int ordinal, kf_cuda_device *out,
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
    if (st == KF_OK)
        st = kf_cuda_check(drv, drv->cuDevicePrimaryCtxRetain(&out->ctx, out->dev),
                           "cuDevicePrimaryCtxRetain", NULL, err);
    if (st == KF_OK)
        st = bind(out, err);
    if (st != KF_OK) {
        kf_cuda_device_close(out);
        return st;
    }
    out->name[sizeof out->name - 1] = 0;
    kf_cuda_arch_for(out->cc_major, out->cc_minor, out->arch);
    out->stream_evict_first = kf_cuda_stream_evict_first(out->name);
    return KF_OK;
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

kf_status kf_cuda_launch(const kf_cuda_device *dev, kf_cu_function fn,
                         const kf_cuda_launch_cfg *cfg, void **params, char *err) {
    if (!fn || !cfg)
        return kf_msg_set(err, KF_ERR_INVALID_ARGUMENT, "kf_cuda_launch: NULL argument");
    kf_status st = bind(dev, err);
    if (st != KF_OK)
        return st;
    kf_cu_result r = dev->drv->cuLaunchKernel(fn, cfg->grid[0], cfg->grid[1], cfg->grid[2],
                                              cfg->block[0], cfg->block[1], cfg->block[2],
                                              cfg->shared_bytes, cfg->stream, params, NULL);
    return kf_cuda_check(dev->drv, r, "cuLaunchKernel", cfg->kernel, err);
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
