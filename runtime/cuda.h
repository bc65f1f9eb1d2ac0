/*
 * cuda.h -- the CUDA Driver API, opened with dlopen("libcuda.so.1") at first
 * use and never linked, so libkfuse loads and the CPU target runs on a machine
 * with no driver (DESIGN.md, "Runtime rules").
 *
 * Ownership: a kf_cuda_driver is a table of driver entry points, immutable once
 * loaded. A context loads it lazily, once, under its mutex (kf_ctx_cuda_driver)
 * and frees it with the context; a failed load is remembered with its message,
 * so every later call gets the same clear answer without retrying dlopen.
 * There is no process-wide table. The library handle itself is never
 * dlclose'd after a successful cuInit: the driver keeps threads and atexit
 * handlers that outlive an unload, and dlopen handles are reference-counted,
 * so each context simply holds one more reference.
 *
 * The driver's types are declared here (ABI-compatible with cuda.h), so this
 * layer builds without the toolkit's headers. Every failure is a kf_status
 * with a message holding the driver's error name and string, the call, and the
 * kernel's name where one applies.
 */
#ifndef KF_RUNTIME_CUDA_H
#define KF_RUNTIME_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "ir/ir.h"
#include "runtime/nvrtc.h" /* KF_ARCH_MAX */

typedef int kf_cu_result; /* CUresult: 0 is CUDA_SUCCESS */
typedef int kf_cu_device;
typedef struct kf_cu_ctx_st *kf_cu_context;
typedef struct kf_cu_mod_st *kf_cu_module;
typedef struct kf_cu_func_st *kf_cu_function;
typedef struct kf_cu_stream_st *kf_cu_stream;
typedef struct kf_cu_event_st *kf_cu_event;
typedef unsigned long long kf_cu_deviceptr;

/* The library a context opens. */
#define KF_CUDA_DRIVER_LIB "libcuda.so.1"

/* X(field, symbol, fallback symbol or NULL, return, parameters). The symbols
 * are the versioned ABI names cuda.h maps its macros to (cuMemAlloc is
 * cuMemAlloc_v2, ...). */
#define KF_CUDA_DRIVER_FUNCS(X)                                                                    \
    X(cuInit, "cuInit", NULL, (unsigned flags))                                                    \
    X(cuDriverGetVersion, "cuDriverGetVersion", NULL, (int *version))                              \
    X(cuGetErrorName, "cuGetErrorName", NULL, (kf_cu_result r, const char **name))                 \
    X(cuGetErrorString, "cuGetErrorString", NULL, (kf_cu_result r, const char **str))              \
    X(cuDeviceGetCount, "cuDeviceGetCount", NULL, (int *count))                                    \
    X(cuDeviceGet, "cuDeviceGet", NULL, (kf_cu_device * dev, int ordinal))                         \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute", NULL,                                          \
      (int *value, int attribute, kf_cu_device dev))                                               \
    X(cuDeviceGetName, "cuDeviceGetName", NULL, (char *name, int len, kf_cu_device dev))           \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL,                                  \
      (kf_cu_context * ctx, kf_cu_device dev))                                                     \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", NULL, (kf_cu_device dev))         \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", NULL, (kf_cu_context ctx))                               \
    X(cuCtxGetCurrent, "cuCtxGetCurrent", NULL, (kf_cu_context * ctx))                             \
    X(cuCtxSynchronize, "cuCtxSynchronize", NULL, (void))                                          \
    X(cuModuleLoadData, "cuModuleLoadData", NULL, (kf_cu_module * mod, const void *image))         \
    X(cuModuleUnload, "cuModuleUnload", NULL, (kf_cu_module mod))                                  \
    X(cuModuleGetFunction, "cuModuleGetFunction", NULL,                                            \
      (kf_cu_function * fn, kf_cu_module mod, const char *name))                                   \
    X(cuModuleGetGlobal, "cuModuleGetGlobal_v2", NULL,                                             \
      (kf_cu_deviceptr * ptr, size_t * bytes, kf_cu_module mod, const char *name))                 \
    X(cuFuncSetAttribute, "cuFuncSetAttribute", NULL,                                              \
      (kf_cu_function fn, int attribute, int value))                                               \
    X(cuLaunchKernel, "cuLaunchKernel", NULL,                                                      \
      (kf_cu_function fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,         \
       unsigned bz, unsigned shared_bytes, kf_cu_stream stream, void **params, void **extra))      \
    X(cuMemAlloc, "cuMemAlloc_v2", NULL, (kf_cu_deviceptr * ptr, size_t bytes))                    \
    X(cuMemFree, "cuMemFree_v2", NULL, (kf_cu_deviceptr ptr))                                      \
    X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", NULL, (kf_cu_deviceptr dst, const void *src, size_t bytes)) \
    X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", NULL, (void *dst, kf_cu_deviceptr src, size_t bytes))       \
    X(cuStreamCreate, "cuStreamCreate", NULL, (kf_cu_stream * stream, unsigned flags))             \
    X(cuStreamSynchronize, "cuStreamSynchronize", NULL, (kf_cu_stream stream))                     \
    X(cuStreamDestroy, "cuStreamDestroy_v2", NULL, (kf_cu_stream stream))                          \
    X(cuEventCreate, "cuEventCreate", NULL, (kf_cu_event * event, unsigned flags))                 \
    X(cuEventRecord, "cuEventRecord", NULL, (kf_cu_event event, kf_cu_stream stream))              \
    X(cuEventSynchronize, "cuEventSynchronize", NULL, (kf_cu_event event))                         \
    X(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime",                           \
      (float *ms, kf_cu_event start, kf_cu_event end))                                             \
    X(cuEventDestroy, "cuEventDestroy_v2", NULL, (kf_cu_event event))

typedef struct kf_cuda_driver {
    void *lib;          /* the dlopen handle */
    int driver_version; /* cuDriverGetVersion: 13000 for 13.0 */
    int device_count;
#define KF_CUDA_FIELD(field, sym, alt, params) kf_cu_result(*field) params;
    KF_CUDA_DRIVER_FUNCS(KF_CUDA_FIELD)
#undef KF_CUDA_FIELD
} kf_cuda_driver;

/* Opens `lib` (NULL: KF_CUDA_DRIVER_LIB), resolves every entry point and runs
 * cuInit. Errors (message in err, KF_MSG_MAX): KF_ERR_UNSUPPORTED when there is
 * no driver ("no CUDA driver (libcuda.so.1 not found) ..."), when the library
 * is the toolkit's stub, lacks an entry point, or finds no device;
 * KF_ERR_OUT_OF_MEMORY; KF_ERR_INTERNAL for other cuInit failures. Free with
 * kf_cuda_driver_release. Tests call this directly; the library goes through
 * kf_ctx_cuda_driver. */
kf_status kf_cuda_driver_load(const kf_mem *mem, const char *lib, kf_cuda_driver **out, char *err);
void kf_cuda_driver_release(const kf_mem *mem, kf_cuda_driver *drv);

/* The context's driver table, loaded at the first call (thread-safe). A
 * failure is remembered: every call returns the same status and message. */
kf_status kf_ctx_cuda_driver(kf_ctx *ctx, const kf_cuda_driver **out, char *err);

/* Turns a driver result into a kf_status and, on failure, a message:
 * "CALL (kernel 'NAME'): CUDA_ERROR_X: the driver's string". `kernel` may be NULL. */
kf_status kf_cuda_check(const kf_cuda_driver *drv, kf_cu_result r, const char *call,
                        const char *kernel, char *err);

/* Architecture dispatch (DESIGN.md): sm_90a on 9.x (the arch-specific features
 * the Hopper templates use), sm_80 on 8.x (one binary for A100, A10, L4, ...),
 * sm_XY elsewhere. Writes into buf (KF_ARCH_MAX) and returns it. */
const char *kf_cuda_arch_for(int cc_major, int cc_minor, char *buf);

/* ------------------------------------------------------------------------ */
/* Devices, modules, launches, memory, streams, events                        */
/* ------------------------------------------------------------------------ */

/* A device and its primary context. The wrappers below make that context
 * current on the calling thread first, so a device may be used from any thread. */
typedef struct kf_cuda_device {
    const kf_cuda_driver *drv;
    int ordinal;
    kf_cu_device dev;
    kf_cu_context ctx; /* the retained primary context */
    int cc_major, cc_minor;
    int sm_count;
    char name[128];
    char arch[KF_ARCH_MAX];  /* kf_cuda_arch_for(cc) */
    bool stream_evict_first; /* kf_cuda_stream_evict_first(name) */
} kf_cuda_device;

/* Whether kernels on the device named `name` read their streamed operands
 * (read once: elementwise inputs, staged rows) with an evict-first L2 policy
 * (the module constant kf_stream_ef, templates/common.cuh). Measured per
 * device, 65536 x 4096 bf16 over the same cubins: on an H100 it made
 * layer_norm 2% and the elementwise chain 3% faster, on an H200 1-2% slower.
 * True for H100s; false elsewhere (the hint's absence is the neutral choice
 * for devices not measured). */
bool kf_cuda_stream_evict_first(const char *name);

/* Writes `value` to the module's 4-byte global `symbol`. A module without
 * the symbol (the compiler drops an unused one) is left alone: KF_OK.
 * `kernel` names the kernel in messages. */
kf_status kf_cuda_module_set_u32(const kf_cuda_device *dev, kf_cu_module mod, const char *symbol,
                                 unsigned value, const char *kernel, char *err);

kf_status kf_cuda_device_open(const kf_cuda_driver *drv, int ordinal, kf_cuda_device *out,
                              char *err);
/* Releases the primary context. Accepts a device that failed to open. */
void kf_cuda_device_close(kf_cuda_device *dev);

/* Loads a CUBIN; `kernel` names it in messages (NULL allowed). */
kf_status kf_cuda_module_load(const kf_cuda_device *dev, const void *cubin, const char *kernel,
                              kf_cu_module *out, char *err);
void kf_cuda_module_unload(const kf_cuda_device *dev, kf_cu_module mod);
kf_status kf_cuda_function(const kf_cuda_device *dev, kf_cu_module mod, const char *name,
                           kf_cu_function *out, char *err);

/* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
#define KF_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8

/* Lets `fn` (named `kernel` in messages) launch with `bytes` of dynamic
 * shared memory: above 48 KiB a launch fails unless the function opted in. */
kf_status kf_cuda_function_set_shared(const kf_cuda_device *dev, kf_cu_function fn, unsigned bytes,
                                      const char *kernel, char *err);

typedef struct kf_cuda_launch_cfg {
    unsigned grid[3], block[3];
    unsigned shared_bytes;
    kf_cu_stream stream; /* NULL: the default stream */
    const char *kernel;  /* for messages */
} kf_cuda_launch_cfg;

/* Launches `fn` with `params` (an array of pointers to each argument). */
kf_status kf_cuda_launch(const kf_cuda_device *dev, kf_cu_function fn,
                         const kf_cuda_launch_cfg *cfg, void **params, char *err);

kf_status kf_cuda_mem_alloc(const kf_cuda_device *dev, size_t bytes, kf_cu_deviceptr *out,
                            char *err);
void kf_cuda_mem_free(const kf_cuda_device *dev, kf_cu_deviceptr ptr);
kf_status kf_cuda_copy_to_device(const kf_cuda_device *dev, kf_cu_deviceptr dst, const void *src,
                                 size_t bytes, char *err);
kf_status kf_cuda_copy_to_host(const kf_cuda_device *dev, void *dst, kf_cu_deviceptr src,
                               size_t bytes, char *err);

kf_status kf_cuda_stream_create(const kf_cuda_device *dev, kf_cu_stream *out, char *err);
/* Waits for the stream; `kernel` names the last launch in a failure message. */
kf_status kf_cuda_stream_sync(const kf_cuda_device *dev, kf_cu_stream stream, const char *kernel,
                              char *err);
void kf_cuda_stream_destroy(const kf_cuda_device *dev, kf_cu_stream stream);

kf_status kf_cuda_event_create(const kf_cuda_device *dev, kf_cu_event *out, char *err);
kf_status kf_cuda_event_record(const kf_cuda_device *dev, kf_cu_event ev, kf_cu_stream stream,
                               char *err);
/* Milliseconds between two recorded events (waits for `end`). */
kf_status kf_cuda_event_elapsed(const kf_cuda_device *dev, kf_cu_event start, kf_cu_event end,
                                float *ms, char *err);
void kf_cuda_event_destroy(const kf_cuda_device *dev, kf_cu_event ev);

#endif /* KF_RUNTIME_CUDA_H */
