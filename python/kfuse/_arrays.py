"""Arrays in and out of kfuse: NumPy arrays, torch tensors, CuPy arrays (and any
CUDA array that speaks DLPack) and anything with __dlpack__ or the array
interface, without a copy where the memory already has kfuse's layout
(row-major, contiguous, the tensor's dtype)."""
import numpy as np

from . import _capi

_NP = {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i32": np.int32, "bool": np.bool_,
       "i64": np.int64}
# NumPy has no bfloat16: bf16 arrays are ml_dtypes.bfloat16 when that package is
# installed, else uint16 holding the bits.
try:
    import ml_dtypes as _ml

    _NP["bf16"] = _ml.bfloat16
except ImportError:  # pragma: no cover - depends on the environment
    _ml = None


def _np_dtype(kf):
    return np.dtype(_NP.get(kf, np.uint16))


def _is_torch(x):
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


_TORCH_NAMES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "f64": "float64",
                "i32": "int32", "bool": "bool", "i64": "int64"}


def _dtype_mismatch(name, kf, got):
    return TypeError(f"kfuse: input {name!r} is {kf}, got an array of dtype {got}")


class Bound:
    """One binding: a name and memory of the exact size, kept alive."""

    def __init__(self, name, obj, kf_dtype, shape, device=None):
        """device: None for host memory, else the torch CUDA device the
        binding must live on (a device-resident run)."""
        self.name, self.kf_dtype, self.shape = name, kf_dtype, tuple(shape)
        self.torch_device = None
        self.is_torch = _is_torch(obj)
        if device is not None:
            import torch

            want = getattr(torch, _TORCH_NAMES[kf_dtype])
            t = obj if self.is_torch else torch.as_tensor(obj)
            if t.dtype != want:
                if self.is_torch or t.dtype.is_floating_point != want.is_floating_point:
                    raise _dtype_mismatch(name, kf_dtype, t.dtype)
                t = t.to(want)
            # host or other-device memory is copied over, strided memory made contiguous
            t = t.detach().to(device).contiguous()
            self.torch_device = device
            self.keep, self.ptr = t, t.data_ptr()
            self.nbytes = t.numel() * t.element_size()
            if tuple(t.shape) != self.shape:
                raise ValueError(f"kfuse: input {name!r} has shape {list(self.shape)}, got "
                                 f"{list(t.shape)}")
            return
        if self.is_torch:
            import torch

            want = getattr(torch, _TORCH_NAMES[kf_dtype])
            if obj.dtype != want:
                raise _dtype_mismatch(name, kf_dtype, obj.dtype)
            self.torch_device = obj.device
            t = obj.detach()
            if t.device.type != "cpu":
                t = t.cpu()  # host-pointer run: a copy (documented)
            t = t.contiguous()
            self.keep, self.ptr = t, t.data_ptr()
            self.nbytes = t.numel() * t.element_size()
            got_shape = tuple(t.shape)
        else:
            a = obj if isinstance(obj, np.ndarray) else (
                np.from_dlpack(obj) if hasattr(obj, "__dlpack__") else np.asarray(obj))
            want = _np_dtype(kf_dtype)
            if a.dtype != want and not (kf_dtype == "bf16" and a.dtype == np.uint16):
                if isinstance(obj, np.ndarray) or hasattr(obj, "__dlpack__"):
                    raise _dtype_mismatch(name, kf_dtype, a.dtype)
                a = np.asarray(obj, dtype=want)  # Python scalars and lists convert
            a = np.ascontiguousarray(a)
            self.keep, self.ptr, self.nbytes = a, a.ctypes.data, a.nbytes
            got_shape = a.shape
        if got_shape != self.shape:
            raise ValueError(f"kfuse: input {name!r} has shape {list(self.shape)}, got "
                             f"{list(got_shape)}")


class _Out:
    def __init__(self, name, kf_dtype, shape, torch_device, allocate_on=None):
        self.name, self.shape = name, tuple(shape)
        if torch_device is not None:
            import torch

            t = torch.empty(self.shape, dtype=getattr(torch, _TORCH_NAMES[kf_dtype]),
                            device=allocate_on or "cpu")
            self.keep, self.ptr = t, t.data_ptr()
            self.nbytes = t.numel() * t.element_size()
            self.device = torch_device
        else:
            a = np.empty(self.shape, dtype=_np_dtype(kf_dtype))
            self.keep, self.ptr, self.nbytes, self.device = a, a.ctypes.data, a.nbytes, None

    def result(self):
        if self.device is not None and self.keep.device != self.device:
            return self.keep.to(self.device)
        return self.keep


class GivenOut:
    """An output array the caller passed: written in place, never copied."""

    def __init__(self, name, obj, kf_dtype, shape, device=None):
        self.name, self.shape = name, tuple(shape)
        if _is_torch(obj):
            import torch

            if obj.dtype != getattr(torch, _TORCH_NAMES[kf_dtype]):
                raise TypeError(f"kfuse: output {name!r} is {kf_dtype}, got dtype {obj.dtype}")
            if obj.device != (device if device is not None else torch.device("cpu")):
                raise ValueError(f"kfuse: output {name!r} must be on "
                                 f"{device if device is not None else 'the host'} for this run, "
                                 f"got a tensor on {obj.device}")
            ok, got_shape = obj.is_contiguous(), tuple(obj.shape)
            self.ptr, self.nbytes = obj.data_ptr(), obj.numel() * obj.element_size()
        else:
            if device is not None:
                raise ValueError(f"kfuse: output {name!r} must be a torch tensor on {device} "
                                 f"for a device-resident run")
            if not isinstance(obj, np.ndarray):
                raise TypeError(f"kfuse: output {name!r} must be a NumPy array or a torch "
                                f"tensor, got {type(obj).__name__}")
            want = _np_dtype(kf_dtype)
            if obj.dtype != want and not (kf_dtype == "bf16" and obj.dtype == np.uint16):
                raise TypeError(f"kfuse: output {name!r} is {kf_dtype}, got dtype {obj.dtype}")
            ok, got_shape = obj.flags.c_contiguous and obj.flags.writeable, obj.shape
            self.ptr, self.nbytes = obj.ctypes.data, obj.nbytes
        if got_shape != self.shape:
            raise ValueError(f"kfuse: output {name!r} has shape {list(self.shape)}, got "
                             f"{list(got_shape)}")
        if not ok:
            raise ValueError(f"kfuse: output {name!r} must be C-contiguous and writable")
        self.keep = obj

    def result(self):
        return self.keep


def output_like(name, kf_dtype, shape, bound, device=None):
    """An empty output of the inputs' kind: torch on the first torch input's
    device when an input is a torch tensor (allocated on `device` for a
    device-resident run, by PyTorch's allocator), else NumPy."""
    if device is not None:
        return _Out(name, kf_dtype, shape, device, allocate_on=device)
    dev = next((b.torch_device for b in bound if b.is_torch), None)
    return _Out(name, kf_dtype, shape, dev)


def cuda_device_of(inputs):
    """The torch CUDA device of the first CUDA tensor among `inputs`, or None."""
    for v in inputs.values():
        if _is_torch(v) and v.device.type == "cuda":
            return v.device
    return None


def to_storage(array, dtype):
    """(contiguous ndarray in the dtype's storage format, kf dtype code, shape)."""
    if _is_torch(array):
        t = array.detach().cpu().contiguous()
        kf = dtype or next((k for k, v in _TORCH_NAMES.items() if str(t.dtype) == "torch." + v),
                           None)
        if kf is None:
            raise TypeError(f"kfuse: a constant of dtype {t.dtype} (kfuse has "
                            f"{', '.join(_capi.DTYPES)})")
        if str(t.dtype) == "torch.bfloat16":
            import torch
            a = t.view(torch.int16).numpy().view(np.uint16)
        else:
            a = t.numpy()
    else:
        a = np.asarray(array)
        kf = dtype
        if kf is None:
            kf = next((k for k, v in _NP.items() if np.dtype(v) == a.dtype), None)
            if kf is None:
                raise TypeError(f"kfuse: a constant of dtype {a.dtype} needs dtype= (kfuse has "
                                f"{', '.join(_capi.DTYPES)})")
    if kf not in _capi.DTYPES:
        raise ValueError(f"kfuse: unknown dtype {kf!r}")
    want = _np_dtype(kf)
    if a.dtype != want and not (kf == "bf16" and a.dtype == np.uint16):
        if kf == "bf16" and _ml is None:
            a = _f32_to_bf16_bits(np.asarray(a, dtype=np.float32))
        else:
            a = a.astype(want)
    return np.ascontiguousarray(a), _capi.DTYPES.index(kf), a.shape


def _f32_to_bf16_bits(a):
    """Round to nearest even, as kfuse stores bf16 (NaN stays NaN)."""
    u = a.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    r[nan] = 0x7FC0
    return r


# ---- CuPy (and other CUDA DLPack producers) --------------------------------

_KDL_CUDA = 2  # DLDeviceType kDLCUDA
# CuPy has no bfloat16: bf16 arrays are uint16 holding the bits.
_CUPY_NAMES = {"f32": "float32", "f16": "float16", "bf16": "uint16", "f64": "float64",
               "i32": "int32", "bool": "bool", "i64": "int64"}


def _is_cupy(x):
    return type(x).__module__.split(".")[0] == "cupy"


def _dlpack_cuda_device(x):
    """The CUDA device ordinal of a DLPack producer in CUDA memory (a CuPy
    array, or any object whose __dlpack_device__ says kDLCUDA), else None.
    torch tensors take their own path."""
    if _is_torch(x) or isinstance(x, np.ndarray) or not hasattr(x, "__dlpack_device__"):
        return None
    try:
        kind, ordinal = x.__dlpack_device__()
    except Exception:  # pragma: no cover - a producer that cannot say
        return None
    return int(ordinal) if int(kind) == _KDL_CUDA else None


def cupy_device_of(inputs):
    """The CUDA ordinal of the first input in CUDA memory that is not a torch
    tensor (CuPy, or another DLPack producer), or None."""
    for v in inputs.values():
        d = _dlpack_cuda_device(v)
        if d is not None:
            return d
    return None


class CupyBound:
    """An input for a device-resident run with CuPy: imported through DLPack
    (cupy.from_dlpack, no copy) when it is CUDA memory on `device`, copied there
    otherwise (host arrays, another device), made contiguous when strided."""

    def __init__(self, name, obj, kf_dtype, shape, device):
        import cupy as cp

        self.name, self.kf_dtype, self.shape = name, kf_dtype, tuple(shape)
        self.is_torch = False
        want = np.dtype(_CUPY_NAMES[kf_dtype])
        with cp.cuda.Device(device):
            if _dlpack_cuda_device(obj) is not None:
                a = obj if _is_cupy(obj) else cp.from_dlpack(obj)
                if a.device.id != device:
                    a = cp.asarray(a)  # a peer copy onto this run's device
            else:
                h = np.asarray(obj)
                if h.dtype != want and not (isinstance(obj, np.ndarray) or
                                            hasattr(obj, "__dlpack__")):
                    h = np.asarray(obj, dtype=want)  # Python scalars and lists convert
                a = cp.asarray(h)
            if a.dtype != want:
                raise _dtype_mismatch(name, kf_dtype, a.dtype)
            a = cp.ascontiguousarray(a)
        if tuple(a.shape) != self.shape:
            raise ValueError(f"kfuse: input {name!r} has shape {list(self.shape)}, got "
                             f"{list(a.shape)}")
        self.keep, self.ptr, self.nbytes = a, a.data.ptr, a.nbytes


class CupyOut:
    """An output of a CuPy run: allocated by CuPy's allocator on the run's
    device, or the caller's CuPy array (C-contiguous, dtype and shape exact),
    written in place."""

    def __init__(self, name, kf_dtype, shape, device, given=None):
        import cupy as cp

        self.name, self.shape = name, tuple(shape)
        want = np.dtype(_CUPY_NAMES[kf_dtype])
        if given is None:
            with cp.cuda.Device(device):
                a = cp.empty(self.shape, dtype=want)
        else:
            a = given
            if not _is_cupy(a) or a.device.id != device:
                raise ValueError(f"kfuse: output {name!r} must be a CuPy array on device "
                                 f"{device} for this run")
            if a.dtype != want:
                raise TypeError(f"kfuse: output {name!r} is {kf_dtype}, got dtype {a.dtype}")
            if tuple(a.shape) != self.shape:
                raise ValueError(f"kfuse: output {name!r} has shape {list(self.shape)}, got "
                                 f"{list(a.shape)}")
            if not a.flags.c_contiguous:
                raise ValueError(f"kfuse: output {name!r} must be C-contiguous")
        self.keep, self.ptr, self.nbytes = a, a.data.ptr, a.nbytes

    def result(self):
        return self.keep
