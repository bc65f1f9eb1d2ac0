"""The C API of libkfuse, declared for ctypes.

Everything here mirrors include/kfuse.h; the structs (kf_options, kf_binding,
kf_check_result) must keep the header's field order, which
tests/test_capi_mirror.py checks against the header text.
"""
import ctypes
import ctypes.util
import glob
import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def _candidates(explicit):
    explicit = explicit or os.environ.get("KFUSE_LIBRARY")
    if explicit:
        yield explicit
        return
    # The wheel built by `pip install ./python` installs the library under the
    # package (CMake's install tree below kfuse/).
    for pattern in ("lib/libkfuse.so*", "lib64/libkfuse.so*", "lib/*/libkfuse.so*"):
        yield from sorted(glob.glob(os.path.join(_HERE, pattern)))
    found = ctypes.util.find_library("kfuse")
    if found:
        yield found


class _Opaque(ctypes.Structure):
    pass


c_ctx_p = ctypes.POINTER(type("kf_ctx", (_Opaque,), {}))
c_graph_p = ctypes.POINTER(type("kf_graph", (_Opaque,), {}))
c_tensor_p = ctypes.POINTER(type("kf_tensor", (_Opaque,), {}))
c_program_p = ctypes.POINTER(type("kf_program", (_Opaque,), {}))


class kf_allocator(ctypes.Structure):
    _fields_ = [("alloc", ctypes.c_void_p), ("realloc", ctypes.c_void_p),
                ("free", ctypes.c_void_p), ("user", ctypes.c_void_p)]


class kf_options(ctypes.Structure):
    _fields_ = [("target", ctypes.c_int), ("device", ctypes.c_int),
                ("arch", ctypes.c_char_p), ("cache_dir", ctypes.c_char_p),
                ("flags", ctypes.c_uint), ("allocator", kf_allocator),
                ("gemm", ctypes.c_int), ("attention", ctypes.c_int),
                ("dump_dir", ctypes.c_char_p),
                ("cublaslt_lib", ctypes.c_char_p), ("num_threads", ctypes.c_int),
                ("cpu_opt_level", ctypes.c_int), ("tiered_compile", ctypes.c_int),
                ("choice_margin", ctypes.c_double), ("choice_load_bias", ctypes.c_double)]


class kf_binding(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class kf_check_result(ctypes.Structure):
    _fields_ = [("err", ctypes.c_double), ("ref_err", ctypes.c_double),
                ("round_err", ctypes.c_double), ("bound", ctypes.c_double),
                ("pass_", ctypes.c_int), ("fused_err", ctypes.c_double)]


class kf_aot_summary(ctypes.Structure):
    _fields_ = [("kernels", ctypes.c_size_t), ("cached", ctypes.c_size_t),
                ("compiled", ctypes.c_size_t), ("failed", ctypes.c_size_t),
                ("groups", ctypes.c_size_t), ("library_steps", ctypes.c_size_t)]


class kf_cache_summary(ctypes.Structure):
    _fields_ = [("entries", ctypes.c_size_t), ("bytes", ctypes.c_uint64),
                ("corrupt", ctypes.c_size_t), ("removed", ctypes.c_size_t),
                ("dir", ctypes.c_char * 512), ("error", ctypes.c_char * 512)]


# Enums (include/kfuse.h).
STATUS_NAMES = ["OK", "INVALID_ARGUMENT", "SHAPE", "DTYPE", "AXIS", "OUT_OF_MEMORY", "PARSE",
                "VERIFY", "NOT_FOUND", "UNSUPPORTED", "IO", "INTERNAL", "BUSY"]
DTYPES = ["f32", "f16", "bf16", "f64", "i32", "bool", "i64"]
TARGETS = {"auto": 0, "cuda": 1, "cpu": 2}
GEMM_MODES = {"auto": 0, "generated": 1, "cublaslt": 2, "measured": 3, "sm80": 4}
ATTENTION_MODES = {"auto": 0, "sm90": 1, "fa2": 2, "unfused": 3, "decode": 4}
REPORT_FORMATS = {"text": 0, "json": 1}
FLAGS = {
    "no_cache": 1 << 0, "cache_read_only": 1 << 1, "cache_fail_on_miss": 1 << 2,
    "no_cublaslt": 1 << 3, "check_numerics": 1 << 4, "debug_passes": 1 << 5,
    "no_cuda_graph": 1 << 6, "cpu_keep_buffers": 1 << 7, "dump_llvm_ir": 1 << 8,
    "cpu_timing": 1 << 9, "unfused_attention": 1 << 10,
    "split_row_norms": 1 << 11, "gemm_head_epilogue": 1 << 12,
}

_UNARY = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu",
          "gelu_tanh", "silu", "erf", "sin", "cos"]
_BINARY = ["add", "sub", "mul", "div", "max", "min", "pow", "eq", "ne", "lt", "le", "gt", "ge"]
_REDUCE = ["reduce_sum", "reduce_max", "reduce_mean", "reduce_min", "argmax", "logsumexp"]

_I64P = ctypes.POINTER(ctypes.c_int64)
# Symbols of newer libkfuse versions (device-resident runs).
_OPTIONAL = {"kf_program_run_device", "kf_program_workspace_size", "kf_program_set_workspace",
             "kf_slice", "kf_concat", "kf_gather", "kf_logsumexp", "kf_repeat", "kf_aot",
             "kf_cache_list_entries", "kf_cache_verify_entries", "kf_cache_clear_entries"}


def _declare(lib):
    T, G, C, P = c_tensor_p, c_graph_p, c_ctx_p, c_program_p
    i, u, s, d, vp, cp = (ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_double,
                          ctypes.c_void_p, ctypes.c_char_p)
    sigs = {
        "kf_status_str": (cp, [i]),
        "kf_version": (cp, []),
        "kf_dtype_name": (cp, [i]),
        "kf_dtype_size": (s, [i]),
        "kf_options_init": (None, [ctypes.POINTER(kf_options)]),
        "kf_ctx_create": (i, [ctypes.POINTER(kf_options), ctypes.POINTER(C)]),
        "kf_ctx_destroy": (None, [C]),
        "kf_graph_create": (i, [C, ctypes.POINTER(G)]),
        "kf_graph_destroy": (None, [G]),
        "kf_graph_status": (i, [G]),
        "kf_graph_error": (cp, [G]),
        "kf_graph_verify": (i, [G]),
        "kf_graph_print": (i, [G, vp]),
        "kf_graph_parse": (i, [C, cp, s, ctypes.POINTER(G)]),
        "kf_graph_input_count": (s, [G]),
        "kf_graph_input": (T, [G, s]),
        "kf_graph_output_count": (s, [G]),
        "kf_graph_output": (T, [G, s]),
        "kf_graph_output_name": (cp, [G, s]),
        "kf_tensor_dtype": (i, [T]),
        "kf_tensor_rank": (i, [T]),
        "kf_tensor_dim": (ctypes.c_int64, [T, i]),
        "kf_tensor_numel": (ctypes.c_int64, [T]),
        "kf_tensor_name": (cp, [T]),
        "kf_tensor_set_name": (i, [T, cp]),
        "kf_input": (T, [G, cp, i, i, _I64P]),
        "kf_constant": (T, [G, i, i, _I64P, vp]),
        "kf_scalar": (T, [G, i, d]),
        "kf_iota": (T, [G, i, i, _I64P, i]),
        "kf_cast": (T, [G, T, i]),
        "kf_where": (T, [G, T, T, T]),
        "kf_expand": (T, [G, T, i, _I64P]),
        "kf_clamp": (T, [G, T, d, d]),
        "kf_softmax": (T, [G, T, i]),
        "kf_log_softmax": (T, [G, T, i]),
        "kf_layer_norm": (T, [G, T, T, T, i, d]),
        "kf_rms_norm": (T, [G, T, T, i, d]),
        "kf_matmul": (T, [G, T, T, i, i]),
        "kf_reshape": (T, [G, T, i, _I64P]),
        "kf_permute": (T, [G, T, ctypes.POINTER(ctypes.c_int)]),
        "kf_transpose": (T, [G, T, i, i]),
        "kf_output": (i, [G, cp, T]),
        "kf_graph_eval": (i, [G, ctypes.POINTER(kf_binding), s, ctypes.POINTER(kf_binding), s]),
        "kf_graph_check": (i, [G, ctypes.POINTER(kf_binding), s, ctypes.POINTER(kf_binding), s,
                               ctypes.POINTER(kf_check_result)]),
        "kf_compile": (i, [C, G, ctypes.POINTER(P)]),
        "kf_program_run": (i, [P, ctypes.POINTER(kf_binding), s, ctypes.POINTER(kf_binding), s,
                               vp]),
        "kf_program_error": (cp, [P]),
        "kf_program_kernel_count": (s, [P]),
        "kf_program_destroy": (None, [P]),
        "kf_program_report": (i, [P, i, vp]),
    }
    BP = ctypes.POINTER(kf_binding)
    sigs.update({
        "kf_program_run_device": (i, [P, BP, s, BP, s, vp]),
        "kf_program_workspace_size": (i, [P, ctypes.POINTER(s)]),
        "kf_program_set_workspace": (i, [P, vp, s]),
        "kf_slice": (T, [G, T, i, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]),
        "kf_concat": (T, [G, i, ctypes.POINTER(T), i]),
        "kf_gather": (T, [G, T, T, i]),
        "kf_repeat": (T, [G, T, i, ctypes.c_int64]),
        "kf_aot": (i, [C, G, ctypes.POINTER(cp), s, ctypes.POINTER(kf_aot_summary)]),
        "kf_cache_list_entries": (i, [C, vp, ctypes.POINTER(kf_cache_summary)]),
        "kf_cache_verify_entries": (i, [C, vp, ctypes.POINTER(kf_cache_summary)]),
        "kf_cache_clear_entries": (i, [C, ctypes.POINTER(kf_cache_summary)]),
    })
    for name in _UNARY:
        sigs["kf_" + name] = (T, [G, T])
    for name in _BINARY:
        sigs["kf_" + name] = (T, [G, T, T])
    for name in _REDUCE:
        sigs["kf_" + name] = (T, [G, T, i, i])
    for name, (res, args) in sigs.items():
        if name in _OPTIONAL and not hasattr(lib, name):
            continue  # an older libkfuse: the feature is off (callers check hasattr)
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


def load(path=None):
    """Opens libkfuse and declares its functions: `path`, else the file named
    by $KFUSE_LIBRARY, else the one installed in the package, else the
    system's."""
    errors = []
    for cand in _candidates(path):
        try:
            return _declare(ctypes.CDLL(cand))
        except OSError as e:
            errors.append(f"{cand}: {e}")
    where = "; ".join(errors) if errors else "no libkfuse.so beside the package or on the system"
    raise OSError(f"kfuse: cannot open libkfuse ({where}); install the package with "
                  f"`pip install ./python` from a kfuse checkout, or pass kfuse.load_library(path)")


# libc's open_memstream lets kf_graph_print and kf_program_report write into memory.
_libc = ctypes.CDLL(None)
_libc.open_memstream.restype = ctypes.c_void_p
_libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
_libc.fclose.argtypes = [ctypes.c_void_p]
_libc.fclose.restype = ctypes.c_int
_libc.free.argtypes = [ctypes.c_void_p]


def capture(write):
    """Runs write(FILE*) into a memory stream; returns (status, text)."""
    buf = ctypes.c_void_p()
    size = ctypes.c_size_t()
    f = _libc.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not f:
        raise MemoryError("kfuse: open_memstream failed")
    try:
        status = write(f)
    finally:
        _libc.fclose(f)
    try:
        text = ctypes.string_at(buf.value, size.value).decode() if buf.value else ""
    finally:
        _libc.free(buf)
    return status, text
