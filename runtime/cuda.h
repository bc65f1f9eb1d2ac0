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
 * The driver's types are declared here (ABI-compatible with cuda.h; test_cuda
 * checks them against the toolkit's header), so this layer builds without the
 * toolkit's headers. Entry points newer than kfuse's baseline (cluster
 * launches, tensor maps, CUDA graphs) are optional: NULL in the table on a
 * driver without them, and the wrapper that needs one says so. Every failure is a kf_status
 * with a message holding the driver's error name and string, the call, and the
 * kernel's name where one applies.
 */
#ifndef KF_RUNTIME_CUDA_H
#define KF_RUNTIME_CUDA_H

#include <stdalign.h>
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
typedef struct kf_cu_graph_st *kf_cu_graph;
typedef struct kf_cu_graph_node_st *kf_cu_graph_node;
typedef struct kf_cu_graph_exec_st *kf_cu_graph_exec;

/* CUlaunchAttributeID: the launch attributes kfuse sets. */
typedef enum kf_cu_launch_attribute_id {
    KF_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
    KF_CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5,
} kf_cu_launch_attribute_id;

/* CUlaunchAttribute: an id, padding to 8 bytes, and a 64-byte value union
 * (8-byte aligned: the driver's union holds pointers). */
typedef struct kf_cu_launch_attribute {
    kf_cu_launch_attribute_id id;
    char pad[8 - sizeof(kf_cu_launch_attribute_id)];
    union {
        unsigned long long raw[8];
        struct {
            unsigned x, y, z;
        } cluster_dim;                 /* KF_CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION */
        int cluster_scheduling_policy; /* CUclusterSchedulingPolicy: 0 default, 1 spread */
    } value;
} kf_cu_launch_attribute;

/* CUlaunchConfig, for cuLaunchKernelEx and cuOccupancyMaxActiveClusters. */
typedef struct kf_cu_launch_config {
    unsigned grid_x, grid_y, grid_z;
    unsigned block_x, block_y, block_z;
    unsigned shared_bytes;
    kf_cu_stream stream;
    kf_cu_launch_attribute *attrs;
    unsigned num_attrs;
} kf_cu_launch_config;

/* CUDA_KERNEL_NODE_PARAMS (_v2, what cuGraphAddKernelNode_v2 takes; its
 * prefix up to `extra` is the v1 struct the unversioned symbol takes). */
typedef struct kf_cu_kernel_node_params {
    kf_cu_function func;
    unsigned grid_x, grid_y, grid_z;
    unsigned block_x, block_y, block_z;
    unsigned shared_bytes;
    void **params;
    void **extra;
    void *kern;        /* CUkernel: read only when func is NULL */
    kf_cu_context ctx; /* ignored when func is set */
} kf_cu_kernel_node_params;

/* CUtensorMap: the 128-byte opaque TMA descriptor a kernel takes by value
 * (const __grid_constant__). The driver wants it 64-byte aligned; CUDA 13's
 * cuda.h aligns it to 128, and so does this, so the two agree. */
typedef struct kf_cu_tensor_map {
    alignas(128) unsigned long long opaque[16];
} kf_cu_tensor_map;

/* CUtensorMapDataType. The packed types (16U4, 16U6) are declared for the
 * ABI but not accepted by kf_cuda_tmap_check. */
typedef enum kf_cu_tensor_map_data_type {
    KF_CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0,
    KF_CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1,
    KF_CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2,
    KF_CU_TENSOR_MAP_DATA_TYPE_INT32 = 3,
    KF_CU_TENSOR_MAP_DATA_TYPE_UINT64 = 4,
    KF_CU_TENSOR_MAP_DATA_TYPE_INT64 = 5,
    KF_CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6,
    KF_CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
    KF_CU_TENSOR_MAP_DATA_TYPE_FLOAT64 = 8,
    KF_CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,
    KF_CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ = 10,
    KF_CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 = 11,
    KF_CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ = 12,
    KF_CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B = 13,
    KF_CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B = 14,
    KF_CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B = 15,
    KF_CU_TENSOR_MAP_DATA_TYPE_COUNT
} kf_cu_tensor_map_data_type;

/* CUtensorMapInterleave */
typedef enum kf_cu_tensor_map_interleave {
    KF_CU_TENSOR_MAP_INTERLEAVE_NONE = 0,
    KF_CU_TENSOR_MAP_INTERLEAVE_16B = 1,
    KF_CU_TENSOR_MAP_INTERLEAVE_32B = 2,
    KF_CU_TENSOR_MAP_INTERLEAVE_COUNT
} kf_cu_tensor_map_interleave;

/* CUtensorMapSwizzle: the shared-memory layout of a box. The 128B_ATOM
 * modes are newer than Hopper; the driver says whether a device has them. */
typedef enum kf_cu_tensor_map_swizzle {
    KF_CU_TENSOR_MAP_SWIZZLE_NONE = 0,
    KF_CU_TENSOR_MAP_SWIZZLE_32B = 1,
    KF_CU_TENSOR_MAP_SWIZZLE_64B = 2,
    KF_CU_TENSOR_MAP_SWIZZLE_128B = 3,
    KF_CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B = 4,
    KF_CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B_FLIP_8B = 5,
    KF_CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B = 6,
    KF_CU_TENSOR_MAP_SWIZZLE_COUNT
} kf_cu_tensor_map_swizzle;

/* CUtensorMapL2promotion */
typedef enum kf_cu_tensor_map_l2_promotion {
    KF_CU_TENSOR_MAP_L2_PROMOTION_NONE = 0,
    KF_CU_TENSOR_MAP_L2_PROMOTION_L2_64B = 1,
    KF_CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2,
    KF_CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,
    KF_CU_TENSOR_MAP_L2_PROMOTION_COUNT
} kf_cu_tensor_map_l2_promotion;

/* CUtensorMapFloatOOBfill: what a load reads outside the tensor (zeros, or
 * for float types a NaN that FMA treats as zero). */
typedef enum kf_cu_tensor_map_oob_fill {
    KF_CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0,
    KF_CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA = 1,
    KF_CU_TENSOR_MAP_FLOAT_OOB_FILL_COUNT
} kf_cu_tensor_map_oob_fill;

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

/* Entry points a driver may lack, same shape: a missing one leaves its field
 * NULL and is never a load failure; the wrapper that needs it says which
 * entry point the driver lacks. Callers test the field before calling. */
#define KF_CUDA_DRIVER_OPTIONAL_FUNCS(X)                                                           \
    X(cuLaunchKernelEx, "cuLaunchKernelEx", NULL,                                                  \
      (const kf_cu_launch_config *config, kf_cu_function fn, void **params, void **extra))         \
    X(cuOccupancyMaxActiveClusters, "cuOccupancyMaxActiveClusters", NULL,                          \
      (int *clusters, kf_cu_function fn, const kf_cu_launch_config *config))                       \
    X(cuFuncGetAttribute, "cuFuncGetAttribute", NULL,                                              \
      (int *value, int attribute, kf_cu_function fn))                                              \
    X(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled", NULL,                                      \
      (kf_cu_tensor_map * map, kf_cu_tensor_map_data_type dtype, unsigned rank, void *base,        \
       const unsigned long long *dims, const unsigned long long *strides, const unsigned *box,     \
       const unsigned *elem_strides, kf_cu_tensor_map_interleave interleave,                       \
       kf_cu_tensor_map_swizzle swizzle, kf_cu_tensor_map_l2_promotion l2,                         \
       kf_cu_tensor_map_oob_fill oob))                                                             \
    X(cuMemsetD8Async, "cuMemsetD8Async", NULL,                                                    \
      (kf_cu_deviceptr dst, unsigned char value, size_t bytes, kf_cu_stream stream))               \
    X(cuGraphCreate, "cuGraphCreate", NULL, (kf_cu_graph * graph, unsigned flags))                 \
    X(cuGraphAddKernelNode, "cuGraphAddKernelNode_v2", "cuGraphAddKernelNode",                     \
      (kf_cu_graph_node * node, kf_cu_graph graph, const kf_cu_graph_node *deps, size_t n_deps,    \
       const kf_cu_kernel_node_params *params))                                                    \
    X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", NULL,                            \
      (kf_cu_graph_exec * exec, kf_cu_graph graph, unsigned long long flags))                      \
    X(cuGraphLaunch, "cuGraphLaunch", NULL, (kf_cu_graph_exec exec, kf_cu_stream stream))          \
    X(cuGraphExecDestroy, "cuGraphExecDestroy", NULL, (kf_cu_graph_exec exec))                     \
    X(cuGraphDestroy, "cuGraphDestroy", NULL, (kf_cu_graph graph))                                 \
    /* Device-resident runs (kf_program_run_device): pointer checks, re-pointed                    \
     * graph nodes, copies on the caller's stream, the capture and busy tests. */                  \
    X(cuPointerGetAttributes, "cuPointerGetAttributes", NULL,                                      \
      (unsigned n, const int *attributes, void **data, kf_cu_deviceptr ptr))                       \
    X(cuGraphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams_v2",                         \
      "cuGraphExecKernelNodeSetParams",                                                            \
      (kf_cu_graph_exec exec, kf_cu_graph_node node, const kf_cu_kernel_node_params *params))      \
    X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", NULL,                                             \
      (kf_cu_deviceptr dst, kf_cu_deviceptr src, size_t bytes, kf_cu_stream stream))               \
    X(cuEventQuery, "cuEventQuery", NULL, (kf_cu_event event))                                     \
    X(cuStreamIsCapturing, "cuStreamIsCapturing", NULL, (kf_cu_stream stream, int *status))        \
    X(cuStreamBeginCapture, "cuStreamBeginCapture_v2", NULL, (kf_cu_stream stream, int mode))      \
    X(cuStreamEndCapture, "cuStreamEndCapture", NULL, (kf_cu_stream stream, kf_cu_graph * graph))  \
    X(cuMemAllocHost, "cuMemAllocHost_v2", NULL, (void **ptr, size_t bytes))                       \
    X(cuMemFreeHost, "cuMemFreeHost", NULL, (void *ptr))                                           \
    X(cuCtxCreate, "cuCtxCreate_v2", NULL,                                                         \
      (kf_cu_context * ctx, unsigned flags, kf_cu_device dev))                                     \
    X(cuCtxDestroy, "cuCtxDestroy_v2", NULL, (kf_cu_context ctx))

/* CUpointer_attribute values kfuse asks cuPointerGetAttributes for, and the
 * CUmemorytype values it reads back (test_cuda checks them against cuda.h). */
enum {
    KF_CU_POINTER_ATTRIBUTE_CONTEXT = 1,
    KF_CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    KF_CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
    KF_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    KF_CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
    KF_CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
    KF_CU_MEMORYTYPE_HOST = 1,
    KF_CU_MEMORYTYPE_DEVICE = 2,
    KF_CU_MEMORYTYPE_UNIFIED = 4,
    KF_CU_STREAM_CAPTURE_STATUS_NONE = 0, /* CUstreamCaptureStatus */
    KF_CU_ERROR_NOT_READY = 600,          /* CUDA_ERROR_NOT_READY (cuEventQuery) */
};

typedef struct kf_cuda_driver {
    void *lib;          /* the dlopen handle */
    int driver_version; /* cuDriverGetVersion: 13000 for 13.0 */
    int device_count;
#define KF_CUDA_FIELD(field, sym, alt, params) kf_cu_result(*field) params;
    KF_CUDA_DRIVER_FUNCS(KF_CUDA_FIELD)
    KF_CUDA_DRIVER_OPTIONAL_FUNCS(KF_CUDA_FIELD) /* NULL where the driver lacks them */
#undef KF_CUDA_FIELD
} kf_cuda_driver;

/* Fills d's entry points from an open library handle: each symbol, else its
 * fallback. Returns the first required symbol found under neither name (the
 * table is then unusable), or NULL; a missing optional one is left NULL.
 * kf_cuda_driver_load calls it; tests call it on any handle (the toolkit's
 * stub, the test binary itself) to see which fields a library fills. */
const char *kf_cuda_driver_resolve(void *lib, kf_cuda_driver *d);

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

/* Opens device `ordinal`: kf_cuda_device_query, then kf_cuda_device_attach. */
kf_status kf_cuda_device_open(const kf_cuda_driver *drv, int ordinal, kf_cuda_device *out,
                              char *err);
/* What a device is (name, compute capability, SMs, arch) without its primary
 * context: attribute queries only, so a caller can decide what to load while
 * the context (a new process's ~110-130 ms) is still to come. */
kf_status kf_cuda_device_query(const kf_cuda_driver *drv, int ordinal, kf_cuda_device *out,
                               char *err);
/* Retains the queried device's primary context and makes it current (KF_OK
 * at once when attached already). */
kf_status kf_cuda_device_attach(kf_cuda_device *dev, char *err);
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

/* CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED */
#define KF_CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED 14

/* Lets `fn` launch with clusters of more than 8 blocks (the portable limit;
 * Hopper allows 16), or takes that back. KF_ERR_UNSUPPORTED on a device
 * before compute capability 9.0. */
kf_status kf_cuda_function_set_cluster_non_portable(const kf_cuda_device *dev, kf_cu_function fn,
                                                    bool allow, const char *kernel, char *err);

/* A launch: 3-D grid and block, dynamic shared memory, and a thread-block
 * cluster shape. A cluster of all 1s (a 0 reads as 1, so a config that never
 * names the cluster has none) is a plain cuLaunchKernel; any other shape goes
 * through cuLaunchKernelEx with the cluster attribute (compute capability
 * 9.0+), and the grid must be whole clusters in every dimension. */
typedef struct kf_cuda_launch_cfg {
    unsigned grid[3], block[3];
    unsigned shared_bytes;
    kf_cu_stream stream; /* NULL: the default stream */
    const char *kernel;  /* for messages */
    unsigned cluster[3]; /* blocks per cluster in x, y, z; 0 reads as 1 */
} kf_cuda_launch_cfg;

/* Checks a launch's shape without a driver: every grid and block dimension
 * is at least 1, and each grid dimension is a multiple of the cluster's.
 * KF_ERR_INVALID_ARGUMENT with a message naming the kernel and the
 * dimension. kf_cuda_launch and kf_cuda_max_active_clusters call it first. */
kf_status kf_cuda_launch_check(const kf_cuda_launch_cfg *cfg, char *err);

/* Whether cfg asks for clusters of more than one block. */
bool kf_cuda_launch_has_cluster(const kf_cuda_launch_cfg *cfg);

/* Launches `fn` with `params` (an array of pointers to each argument),
 * checked by kf_cuda_launch_check. A cluster launch on a device before 9.0,
 * or on a driver without cuLaunchKernelEx, is KF_ERR_UNSUPPORTED. */
kf_status kf_cuda_launch(const kf_cuda_device *dev, kf_cu_function fn,
                         const kf_cuda_launch_cfg *cfg, void **params, char *err);

/* How many clusters of cfg's shape (grid ignored, block, shared memory,
 * cluster) can be resident at once on the device
 * (cuOccupancyMaxActiveClusters): what a persistent kernel sizes its grid
 * by. Needs a cluster in cfg; KF_ERR_UNSUPPORTED where the driver lacks the
 * entry point. */
kf_status kf_cuda_max_active_clusters(const kf_cuda_device *dev, kf_cu_function fn,
                                      const kf_cuda_launch_cfg *cfg, int *out, char *err);

/* ------------------------------------------------------------------------ */
/* Tensor maps (TMA descriptors)                                              */
/* ------------------------------------------------------------------------ */

#define KF_CUDA_TMAP_RANK_MAX 5

/* A tiled tensor map, described on the runtime's side: what
 * cuTensorMapEncodeTiled takes, minus the base address. Dimension 0 is the
 * innermost (contiguous) one. A zero-initialized desc plus dtype, rank, dims,
 * strides and box is a plain map: no interleave, no swizzle, no L2
 * promotion, zero fill, unit element strides. */
typedef struct kf_cuda_tmap_desc {
    kf_cu_tensor_map_data_type dtype;
    unsigned rank;                                         /* 1..5 */
    unsigned long long dims[KF_CUDA_TMAP_RANK_MAX];        /* elements per dimension */
    unsigned long long strides[KF_CUDA_TMAP_RANK_MAX - 1]; /* bytes, of dims 1..rank-1 */
    unsigned box[KF_CUDA_TMAP_RANK_MAX];                   /* the box a copy moves, in elements */
    unsigned elem_strides[KF_CUDA_TMAP_RANK_MAX];          /* 1..8; 0 reads as 1 */
    kf_cu_tensor_map_interleave interleave;
    kf_cu_tensor_map_swizzle swizzle;
    kf_cu_tensor_map_l2_promotion l2_promotion;
    kf_cu_tensor_map_oob_fill oob_fill;
    const char *name; /* the operand, for messages; NULL allowed */
} kf_cuda_tmap_desc;

/* Bytes per element of a tensor-map data type kfuse accepts, 0 otherwise
 * (the packed 16U4 / 16U6 types, values out of range). */
unsigned kf_cuda_tmap_dtype_size(kf_cu_tensor_map_data_type dtype);

/* Checks desc and base against cuTensorMapEncodeTiled's documented rules,
 * without a driver, so a mistake gets a message naming the field ("tensor
 * map 'A': box[0] = 300: ...") instead of CUDA_ERROR_INVALID_VALUE: rank
 * 1..5 (3+ when interleaved); base non-zero and 16-byte aligned (32 when
 * interleaved 32B); dims 1..2^32; strides multiples of 16 (32) below 2^40,
 * strides[0] at least a row; box sides 1..256 with an inner side a multiple
 * of 16 bytes and within the swizzle span; element strides 1..8; enums in
 * range; NaN fill only for float types. KF_ERR_INVALID_ARGUMENT, or
 * KF_ERR_UNSUPPORTED for the packed data types. */
kf_status kf_cuda_tmap_check(const kf_cuda_tmap_desc *desc, kf_cu_deviceptr base, char *err);

/* Encodes a tiled tensor map for the tensor at `base` into *out (64-byte
 * aligned; kf_cu_tensor_map is), checked by kf_cuda_tmap_check first. A
 * kernel takes it by value as a `const __grid_constant__` parameter.
 * KF_ERR_UNSUPPORTED on a device before compute capability 9.0 or a driver
 * without cuTensorMapEncodeTiled. */
kf_status kf_cuda_tensor_map_encode(const kf_cuda_device *dev, const kf_cuda_tmap_desc *desc,
                                    kf_cu_deviceptr base, kf_cu_tensor_map *out, char *err);

kf_status kf_cuda_mem_alloc(const kf_cuda_device *dev, size_t bytes, kf_cu_deviceptr *out,
                            char *err);

/* Checks a caller's pointer for the device with one cuPointerGetAttributes
 * call (the contract is kf_cuda_exec_check_pointer's, runtime/cuda_exec.h). */
kf_status kf_cuda_check_pointer(const kf_cuda_device *dev, const void *ptr, size_t bytes,
                                bool device, size_t align, char *err);
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
