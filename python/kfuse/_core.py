"""Contexts, graphs, tensors and programs over the C API (see __init__.py)."""
import atexit
import contextlib
import ctypes
import functools
import json as _json
import math
import threading
import weakref

from . import _capi
from ._arrays import (_TORCH_NAMES, Bound, CupyBound, CupyOut, GivenOut, cuda_device_of,
                      cupy_device_of, output_like)

DTYPES = tuple(_capi.DTYPES)
# the torch backend's graph cache, a folder in kfuse's cache directory beside
# the kernels (torch_backend.py writes it, kfuse.cache("clear") empties it)
GRAPH_CACHE_FOLDER = "torch-graphs"

_lib_lock = threading.Lock()
_lib = None


def load_library(path=None):
    """Opens libkfuse now (`path`: that file; default: the one installed with
    the package, else the system's). Called on first use otherwise."""
    global _lib
    with _lib_lock:
        if _lib is None or path is not None:
            _lib = _capi.load(path)
        return _lib


def _L():
    return _lib if _lib is not None else load_library()


def version():
    """libkfuse's version, "MAJOR.MINOR.PATCH"."""
    return _L().kf_version().decode()


class KfuseError(Exception):
    """A failed libkfuse call: `status` (e.g. "SHAPE"), `code` (the C kf_status
    value) and `message` (the C message, naming the op, operand or binding)."""

    def __init__(self, code, message):
        self.code = int(code)
        self.status = (_capi.STATUS_NAMES[self.code] if 0 <= self.code < len(_capi.STATUS_NAMES)
                       else str(self.code))
        self.message = message
        super().__init__(f"{self.status.lower().replace('_', ' ')}: {message}" if message
                         else self.status.lower().replace('_', ' '))


def _dtype_code(dtype):
    name = dtype if isinstance(dtype, str) else getattr(dtype, "name", None)
    if name not in _capi.DTYPES:
        raise ValueError(f"kfuse: unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return _capi.DTYPES.index(name)


def _dims(shape):
    shape = tuple(int(d) for d in shape)
    return len(shape), (ctypes.c_int64 * max(len(shape), 1))(*shape)


class Context:
    """A libkfuse context: the target and options of every compile in it.

    target: "auto" (CUDA when a device is present, else the CPU), "cuda", "cpu".
    cache_dir: the kernel cache (default $XDG_CACHE_HOME/kfuse or ~/.cache/kfuse).
    gemm: "auto", "generated", "cublaslt", "measured", "sm80" (CUDA GEMM groups;
    "sm80" forces the mma.sync kernel, also on sm_90a).
    attention: "auto" (the split-KV decode kernels for 16 query rows or fewer, else on
    sm_90a the TMA/wgmma kernel where it takes the group), "sm90" (the same), "fa2"
    (the mma.sync kernel), "unfused", "decode" (the decode kernels at any query
    length) (CUDA attention).
    flags: names from kfuse's KF_FLAG_* without the prefix, lower case
    (e.g. {"no_cache", "unfused_attention"}). arch: e.g. "sm_90a".
    tiered_compile: kf_options.tiered_compile (CUDA): a GEMM group whose
    measured choice is not in the cache yet runs cuBLASLt from the first run
    while its generated kernel compiles in the background; a later run times
    both, keeps the faster (stored in the cache) and runs it from then on.
    choice_margin, choice_load_bias: kf_options' (None: kf_options_init's
    defaults); from 0 to below 1.
    """

    def __init__(self, target="auto", *, device=0, arch=None, cache_dir=None, flags=(),
                 gemm="auto", attention="auto", dump_dir=None, num_threads=0,
                 cpu_opt_level=3, tiered_compile=False, choice_margin=None,
                 choice_load_bias=None):
        lib = _L()
        if target not in _capi.TARGETS:
            raise ValueError(f"kfuse: unknown target {target!r}; expected auto, cuda or cpu")
        if gemm not in _capi.GEMM_MODES:
            raise ValueError(f"kfuse: unknown gemm mode {gemm!r}; expected "
                             f"{', '.join(_capi.GEMM_MODES)}")
        if attention not in _capi.ATTENTION_MODES:
            raise ValueError(f"kfuse: unknown attention mode {attention!r}; expected "
                             f"{', '.join(_capi.ATTENTION_MODES)}")
        bits = 0
        for f in ([flags] if isinstance(flags, str) else flags):
            if f not in _capi.FLAGS:
                raise ValueError(f"kfuse: unknown flag {f!r}; expected one of "
                                 f"{', '.join(_capi.FLAGS)}")
            bits |= _capi.FLAGS[f]
        o = _capi.kf_options()
        lib.kf_options_init(ctypes.byref(o))
        o.target = _capi.TARGETS[target]
        o.device = device
        o.arch = arch.encode() if arch else None
        o.cache_dir = str(cache_dir).encode() if cache_dir else None
        o.dump_dir = str(dump_dir).encode() if dump_dir else None
        o.flags = bits
        o.gemm = _capi.GEMM_MODES[gemm]
        o.attention = _capi.ATTENTION_MODES[attention]
        o.num_threads = num_threads
        o.cpu_opt_level = cpu_opt_level
        o.tiered_compile = 1 if tiered_compile else 0
        if choice_margin is not None:
            o.choice_margin = float(choice_margin)
        if choice_load_bias is not None:
            o.choice_load_bias = float(choice_load_bias)
        h = _capi.c_ctx_p()
        st = lib.kf_ctx_create(ctypes.byref(o), ctypes.byref(h))
        if st:
            raise KfuseError(st, "kf_ctx_create refused the options (device and num_threads "
                                 ">= 0, cpu_opt_level 0-3, arch like sm_90a, choice_margin "
                                 "and choice_load_bias from 0 to below 1)")
        self._h = h
        self.target = target
        self._lib = lib

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._lib.kf_ctx_destroy(h)

    def graph(self):
        """A new empty graph in this context."""
        return Graph(self)

    def parse(self, text):
        """Parses .kfg text into a Graph (KfuseError "PARSE" with LINE:COL: ...)."""
        return Graph(self, text=text)

    def compile(self, graph):
        """Plans, fuses and compiles `graph` for this context's target."""
        return Program(self, graph)


class Tensor:
    """A node of a Graph. Arithmetic operators build ops in the same graph."""

    __slots__ = ("graph", "_h")

    def __init__(self, graph, h):
        self.graph = graph
        self._h = h

    @property
    def dtype(self):
        return _capi.DTYPES[self.graph._lib.kf_tensor_dtype(self._h)]

    @property
    def shape(self):
        lib = self.graph._lib
        return tuple(lib.kf_tensor_dim(self._h, i) for i in range(lib.kf_tensor_rank(self._h)))

    @property
    def name(self):
        n = self.graph._lib.kf_tensor_name(self._h)
        return n.decode() if n else None

    @name.setter
    def name(self, value):
        self.graph._check(self.graph._lib.kf_tensor_set_name(self._h, value.encode()))

    def __repr__(self):
        return f"Tensor({self.name or '?'}: {self.dtype}{list(self.shape)})"

    def _other(self, v):
        return v if isinstance(v, Tensor) else self.graph.scalar(v, self.dtype)

    def __add__(self, o): return self.graph.add(self, self._other(o))
    def __radd__(self, o): return self.graph.add(self._other(o), self)
    def __sub__(self, o): return self.graph.sub(self, self._other(o))
    def __rsub__(self, o): return self.graph.sub(self._other(o), self)
    def __mul__(self, o): return self.graph.mul(self, self._other(o))
    def __rmul__(self, o): return self.graph.mul(self._other(o), self)
    def __truediv__(self, o): return self.graph.div(self, self._other(o))
    def __rtruediv__(self, o): return self.graph.div(self._other(o), self)
    def __matmul__(self, o): return self.graph.matmul(self, o)
    def __neg__(self): return self.graph.neg(self)


def _builder(cname, doc):
    def op(self, *tensors):
        return self._wrap(getattr(self._lib, cname)(self._h, *(self._t(t) for t in tensors)))
    op.__name__ = cname[3:]
    op.__doc__ = doc
    return op


class Graph:
    """A graph of tensor operations (kf_graph). Build it with the methods named
    after the C builder (`input`, `matmul`, `gelu`, ...), or with kfuse.parse.
    A builder error raises KfuseError and, as in C, stays on the graph: later
    builder calls fail with the first error."""

    def __init__(self, ctx=None, *, text=None):
        self.ctx = ctx if ctx is not None else Context("cpu")
        self._lib = self.ctx._lib
        h = _capi.c_graph_p()
        if text is None:
            st = self._lib.kf_graph_create(self.ctx._h, ctypes.byref(h))
            self._h = h
            if st:
                raise KfuseError(st, "kf_graph_create failed")
            return
        data = text.encode() if isinstance(text, str) else bytes(text)
        st = self._lib.kf_graph_parse(self.ctx._h, data, len(data), ctypes.byref(h))
        self._h = h
        if st:
            msg = self._lib.kf_graph_error(h).decode() if h else ""
            raise KfuseError(st, msg)

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._lib.kf_graph_destroy(h)

    # -- plumbing ------------------------------------------------------------
    def _error(self):
        return self._lib.kf_graph_error(self._h).decode()

    def _check(self, st):
        if st:
            raise KfuseError(st, self._error())

    def _wrap(self, h):
        if not h:
            raise KfuseError(self._lib.kf_graph_status(self._h) or 1, self._error())
        return Tensor(self, h)

    def _t(self, t):
        if not isinstance(t, Tensor) or t.graph is not self:
            raise TypeError(f"kfuse: expected a Tensor of this graph, got {t!r}")
        return t._h

    # -- sources -------------------------------------------------------------
    def input(self, name, dtype, shape):
        """A graph input named `name` (an identifier) of `dtype` and `shape`."""
        rank, dims = _dims(shape)
        return self._wrap(self._lib.kf_input(self._h, name.encode(), _dtype_code(dtype), rank,
                                             dims))

    def constant(self, array, dtype=None):
        """A constant holding `array` (copied), converted to `dtype` (default:
        the array's own dtype, if kfuse has it)."""
        from ._arrays import to_storage
        data, code, shape = to_storage(array, dtype)
        rank, dims = _dims(shape)
        return self._wrap(self._lib.kf_constant(self._h, code, rank, dims,
                                                data.ctypes.data_as(ctypes.c_void_p)))

    def scalar(self, value, dtype="f32"):
        """A rank-0 constant `value` converted to `dtype`."""
        return self._wrap(self._lib.kf_scalar(self._h, _dtype_code(dtype), float(value)))

    def iota(self, dtype, shape, axis):
        """Elements hold their index along `axis`."""
        rank, dims = _dims(shape)
        return self._wrap(self._lib.kf_iota(self._h, _dtype_code(dtype), rank, dims, axis))

    # -- ops with arguments ----------------------------------------------------
    def cast(self, x, dtype):
        return self._wrap(self._lib.kf_cast(self._h, self._t(x), _dtype_code(dtype)))

    def expand(self, x, shape):
        rank, dims = _dims(shape)
        return self._wrap(self._lib.kf_expand(self._h, self._t(x), rank, dims))

    def clamp(self, x, min=None, max=None):
        lo = float("-inf") if min is None else float(min)
        hi = float("inf") if max is None else float(max)
        return self._wrap(self._lib.kf_clamp(self._h, self._t(x), lo, hi))

    def softmax(self, x, axis=-1):
        return self._wrap(self._lib.kf_softmax(self._h, self._t(x), axis))

    def log_softmax(self, x, axis=-1):
        return self._wrap(self._lib.kf_log_softmax(self._h, self._t(x), axis))

    def layer_norm(self, x, weight, bias, axis=-1, eps=1e-5):
        return self._wrap(self._lib.kf_layer_norm(self._h, self._t(x), self._t(weight),
                                                  self._t(bias), axis, eps))

    def rms_norm(self, x, weight, axis=-1, eps=1e-6):
        return self._wrap(self._lib.kf_rms_norm(self._h, self._t(x), self._t(weight), axis, eps))

    def matmul(self, a, b, transpose_a=False, transpose_b=False):
        return self._wrap(self._lib.kf_matmul(self._h, self._t(a), self._t(b), int(transpose_a),
                                              int(transpose_b)))

    def reshape(self, x, shape):
        rank, dims = _dims(shape)
        return self._wrap(self._lib.kf_reshape(self._h, self._t(x), rank, dims))

    def permute(self, x, perm):
        self._t(x)
        rank = len(x.shape)
        if len(perm) != rank:
            raise ValueError(f"kfuse: permute of a rank-{rank} tensor takes {rank} axes, "
                             f"got {list(perm)}")
        return self._wrap(self._lib.kf_permute(self._h, self._t(x),
                                               (ctypes.c_int * max(rank, 1))(*perm)))

    def slice(self, x, axis, start=0, stop=None, step=1):
        """x[..., start:stop:step, ...] along `axis` (Python's rules)."""
        stop = (1 << 63) - 1 if stop is None else stop
        return self._wrap(self._lib.kf_slice(self._h, self._t(x), axis, start, stop, step))

    def concat(self, xs, axis=0):
        """The tensors `xs` joined along `axis`."""
        xs = list(xs)
        arr = (_capi.c_tensor_p * max(len(xs), 1))(*[self._t(x) for x in xs])
        return self._wrap(self._lib.kf_concat(self._h, len(xs), arr, axis))

    def gather(self, table, idx, axis=0):
        """Rows of `table` picked by the i32/i64 `idx` along `axis`."""
        return self._wrap(self._lib.kf_gather(self._h, self._t(table), self._t(idx), axis))

    def repeat(self, x, axis, times):
        """Every element of x `times` times along `axis` (numpy.repeat)."""
        return self._wrap(self._lib.kf_repeat(self._h, self._t(x), axis, times))

    def transpose(self, x, axis0, axis1):
        return self._wrap(self._lib.kf_transpose(self._h, self._t(x), axis0, axis1))

    def output(self, name, t):
        """Marks `t` as the graph output `name`."""
        self._check(self._lib.kf_output(self._h, name.encode(), self._t(t)))
        return t

    # -- whole-graph calls -------------------------------------------------------
    @property
    def inputs(self):
        lib = self._lib
        return [Tensor(self, lib.kf_graph_input(self._h, i))
                for i in range(lib.kf_graph_input_count(self._h))]

    @property
    def outputs(self):
        """{output name: Tensor} in creation order."""
        lib = self._lib
        return {lib.kf_graph_output_name(self._h, i).decode(): Tensor(self,
                                                                      lib.kf_graph_output(self._h, i))
                for i in range(lib.kf_graph_output_count(self._h))}

    def verify(self):
        self._check(self._lib.kf_graph_verify(self._h))

    def text(self):
        """The canonical .kfg text of the graph."""
        st, text = _capi.capture(lambda f: self._lib.kf_graph_print(self._h, f))
        self._check(st)
        return text

    __str__ = text

    def _bindings(self, inputs, device=None):
        ins = self._input_names(inputs)
        return [Bound(n, inputs[n], ins[n].dtype, ins[n].shape, device) for n in ins]

    def _input_names(self, inputs):
        """{name: input tensor}, after refusing unknown and missing names."""
        ins = {t.name: t for t in self.inputs}
        unknown = sorted(set(inputs) - set(ins))
        if unknown:
            raise KfuseError(8, f"no graph input named {unknown[0]!r} (inputs: "
                                f"{', '.join(ins)})")
        missing = [n for n in ins if n not in inputs]
        if missing:
            raise KfuseError(8, f"input {missing[0]!r} is not bound")
        return ins

    def _outputs_like(self, bound, given=None, device=None):
        outs = self.outputs
        for n in given or {}:
            if n not in outs:
                _raise_unknown_output(n, outs)
        return {n: (GivenOut(n, given[n], t.dtype, t.shape, device) if given and n in given
                    else output_like(n, t.dtype, t.shape, bound, device))
                for n, t in outs.items()}

    def eval(self, **inputs):
        """The reference evaluator (every op in double, each result rounded to
        its dtype): {output name: array}."""
        bound = self._bindings(inputs)
        outs = self._outputs_like(bound)
        bi = _binding_array(bound)
        bo = _binding_array(list(outs.values()))
        st = self._lib.kf_graph_eval(self._h, bi, len(bound), bo, len(outs))
        self._check(st)
        return {n: o.result() for n, o in outs.items()}

    def check(self, outputs, **inputs):
        """Judges `outputs` ({name: array}, e.g. a Program's results) against
        the exact value, relative to the reference's own error:
        {name: dict(err, ref_err, fused_err, round_err, bound, passed)}."""
        bound = self._bindings(inputs)
        outs = self.outputs
        given = [Bound(n, a, outs[n].dtype, outs[n].shape) for n, a in outputs.items()
                 if n in outs or _raise_unknown_output(n, outs)]
        res = (_capi.kf_check_result * max(len(given), 1))()
        st = self._lib.kf_graph_check(self._h, _binding_array(bound), len(bound),
                                      _binding_array(given), len(given), res)
        self._check(st)
        return {b.name: dict(err=r.err, ref_err=r.ref_err, fused_err=r.fused_err,
                             round_err=r.round_err, bound=r.bound, passed=bool(r.pass_))
                for b, r in zip(given, res)}


def _raise_unknown_output(name, outs):
    raise KfuseError(8, f"no graph output named {name!r} (outputs: {', '.join(outs)})")


for _n in _capi._UNARY:
    setattr(Graph, _n, _builder("kf_" + _n, f"{_n}(x) elementwise."))
for _n in _capi._BINARY:
    setattr(Graph, _n, _builder("kf_" + _n, f"{_n}(a, b) elementwise, numpy broadcasting."))
Graph.where = _builder("kf_where", "cond ? a : b elementwise (cond bool).")


def _reduction(cname):
    def op(self, x, axis=-1, keepdim=False):
        return self._wrap(getattr(self._lib, cname)(self._h, self._t(x), axis, int(keepdim)))
    op.__name__ = cname[3:]
    op.__doc__ = f"{cname[3:]}(x, axis, keepdim) over one axis."
    return op


for _n in _capi._REDUCE:
    setattr(Graph, _n, _reduction("kf_" + _n))


def _binding_array(bound):
    arr = (_capi.kf_binding * max(len(bound), 1))()
    for i, b in enumerate(bound):
        arr[i].name = b.name.encode()
        arr[i].data = b.ptr
        arr[i].size = b.nbytes
    return arr


# Every live program, destroyed at interpreter exit (below).
_programs = weakref.WeakSet()


@atexit.register
def _destroy_programs():
    """A program compiled with tiered_compile may have NVRTC compiling on a
    thread of its own: destroying it waits for that compile, where a process
    that exits under it could fail in NVRTC's teardown. So every program
    still alive is destroyed before the interpreter exits."""
    for p in list(_programs):
        p._destroy()


class Program:
    """A compiled graph (kf_program)."""

    def __init__(self, ctx, graph):
        if not isinstance(graph, Graph):
            raise TypeError(f"kfuse: compile takes a Graph, got {type(graph).__name__}")
        self.ctx = ctx
        self._lib = ctx._lib
        self.graph = graph
        h = _capi.c_program_p()
        st = self._lib.kf_compile(ctx._h, graph._h, ctypes.byref(h))
        if st:
            raise KfuseError(st, graph._error())
        self._h = h
        self._lock = threading.Lock()
        size = ctypes.c_size_t()
        # device-resident runs: the CUDA target of a library that has them
        self._device_runs = (hasattr(self._lib, "kf_program_run_device") and
                             self._lib.kf_program_workspace_size(h, ctypes.byref(size)) == 0)
        self._workspace = None
        # The program's interface, fixed at compile (the graph may grow later):
        # the fast positional device path binds against it with no C calls.
        self._in_sig = [(t.name, t.dtype, t.shape) for t in graph.inputs]
        self._out_sig = [(n, t.dtype, t.shape) for n, t in graph.outputs.items()]
        self._fast = None  # the _FastRun of the last run_device_list call that took it
        self._fast_by_device = {}  # device index (-1: the CPU) -> _FastRun
        _programs.add(self)

    def __del__(self):
        self._destroy()

    def _destroy(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._lib.kf_program_destroy(h)  # waits for its runs before its workspace goes

    @property
    def kernel_count(self):
        """Kernels launched per run."""
        return self._lib.kf_program_kernel_count(self._h)

    def run(self, **inputs):
        """Runs once: {output name: array}, arrays of the inputs' kind (torch
        tensors in, torch tensors out, on the first torch input's device;
        NumPy otherwise). Non-contiguous inputs are copied; host-pointer runs
        copy device tensors to the host and the outputs back."""
        return self.run_with(inputs)

    def run_with(self, inputs, out=None):
        """run() with the inputs as a dict, and `out`: {output name: array}
        to write into (C-contiguous, the output's dtype and shape; outputs
        not named there are allocated). Returns every output.

        On the CUDA target, when an input is a torch CUDA tensor, the run is
        device-resident (kf_program_run_device): every input on that device
        (others copied there), outputs allocated by PyTorch's allocator,
        enqueued on PyTorch's current stream without a synchronization."""
        dev = cuda_device_of(inputs) if self._device_runs else None
        if dev is not None:
            return self._run_device(inputs, out, dev)
        cdev = cupy_device_of(inputs) if self._device_runs else None
        if cdev is not None:
            return self._run_cupy(inputs, out, cdev)
        bound = self.graph._bindings(inputs)
        outs = self.graph._outputs_like(bound, out or {})
        bi = _binding_array(bound)
        bo = _binding_array(list(outs.values()))
        with self._lock:  # one run at a time per program (kfuse.h)
            st = self._lib.kf_program_run(self._h, bi, len(bound), bo, len(outs), None)
            if st:
                raise KfuseError(st, self._lib.kf_program_error(self._h).decode())
        return {n: o.result() for n, o in outs.items()}

    def _run_device(self, inputs, out, dev):
        bound = self.graph._bindings(inputs, device=dev)
        outs = self.graph._outputs_like(bound, out or {}, device=dev)
        self._enqueue(_binding_array(bound), len(bound), _binding_array(list(outs.values())),
                      len(outs), dev)
        return {n: o.result() for n, o in outs.items()}

    def _run_cupy(self, inputs, out, dev):
        """A device-resident run with CuPy arrays (or another CUDA DLPack
        producer): inputs imported through DLPack (others copied to device
        `dev`), outputs CuPy arrays from CuPy's allocator (bf16 as uint16
        bits), enqueued on CuPy's current stream without a synchronization."""
        import cupy as cp

        ins = self.graph._input_names(inputs)  # unknown and missing inputs refused
        bound = [CupyBound(n, inputs[n], ins[n].dtype, ins[n].shape, dev) for n in ins]
        given = out or {}
        outs = self.graph.outputs
        for n in given:
            if n not in outs:
                _raise_unknown_output(n, outs)
        res = {n: CupyOut(n, t.dtype, t.shape, dev, given.get(n)) for n, t in outs.items()}
        bi, bo = _binding_array(bound), _binding_array(list(res.values()))
        with self._lock, cp.cuda.Device(dev):
            if self._workspace is None:
                size = ctypes.c_size_t()
                self._check_st(self._lib.kf_program_workspace_size(self._h, ctypes.byref(size)))
                ws = cp.empty(max(size.value, 256), dtype=cp.uint8)
                self._check_st(self._lib.kf_program_set_workspace(
                    self._h, ctypes.c_void_p(ws.data.ptr), ws.nbytes))
                self._workspace = ws
            stream = cp.cuda.get_current_stream().ptr
            self._check_st(self._lib.kf_program_run_device(self._h, bi, len(bound), bo, len(res),
                                                           ctypes.c_void_p(stream)))
        return {n: o.result() for n, o in res.items()}

    def run_device_list(self, args):
        """The hot path of a framework: the inputs as torch tensors in the
        graph's input order, the outputs a list in its output order. Inputs
        that already are contiguous tensors of the inputs' dtypes and shapes,
        all on one CUDA device for a CUDA program (enqueued on PyTorch's
        current stream) or all on the CPU for a CPU program (a synchronous
        run), bind their pointers into binding arrays the program keeps,
        with no per-call query of the graph; anything else goes through
        run_with, which copies or refuses as documented there.

        Per call, once a set of inputs passed the per-input checks, the next
        calls' inputs are checked by one C++ call (torch's TensorGuards, what
        Dynamo's own guards are made of: every input's dtype, device, sizes
        and strides equal to those inputs'); a call it refuses takes the
        per-input checks again, and, passing them, becomes the new
        reference. Then each input's pointer is written straight into the
        kept binding array, the outputs are allocated (PyTorch's allocator,
        fresh tensors every call) and the run is enqueued."""
        fp = self._fast
        if fp is not None and fp.guard is not None and len(args) == fp.n_in:
            if fp.guard.check(*args):
                return self._run_fast(fp, args)
        fp = self._checked_fast(args)
        if fp is not None:
            return self._run_fast(fp, args)
        res = self.run_with({n: a for (n, _, _), a in zip(self._in_sig, args)})
        return [res[n] for n, _, _ in self._out_sig]

    def caller(self):
        """A function f(args) -> list that does what run_device_list(args)
        does, in fewer steps per call (a framework's hot path: the torch
        backend calls it). Until a call passed the per-input checks it is
        run_device_list itself; from then on, a call whose inputs the guard
        of those checks accepts (on the same device, the same one current,
        the workspace set) binds and enqueues with everything it needs held
        in the closure: one guard call, the outputs' allocation (fresh
        tensors every call: never aliased between calls), the pointers
        written into the kept binding arrays, one C call. Any other call
        takes run_device_list, and the closure follows the guard it leaves."""
        slow = self.run_device_list
        held = [None, None]  # the _FastRun the closure was made for, the closure

        def call(args):
            fp = self._fast
            if fp is not held[0] or fp is None:
                if fp is None or fp.guard is None or (fp.idx >= 0 and self._workspace is None):
                    return slow(args)
                held[0], held[1] = fp, self._bound_call(fp, slow)
            return held[1](args)
        return call

    def _bound_call(self, fp, slow):
        """caller()'s closure for the kept arrays `fp` (checked inputs, a
        guard, the workspace set on a CUDA program)."""
        check, empty, dev, tout = fp.guard.check, fp.empty, fp.dev, fp.tout
        words_in, words_out = fp.words_in, fp.words_out
        slots_in = tuple(range(1, fp.slot * fp.n_in, fp.slot))
        slots_out = tuple(range(1, fp.slot * fp.n_out, fp.slot))
        bi, bo, n_in, n_out, idx = fp.bi, fp.bo, fp.n_in, fp.n_out, fp.idx
        lock, lib = self._lock, self._lib
        if idx >= 0:
            run, get_device, raw = lib.kf_program_run_device, fp.get_device, fp.raw_stream
        else:
            run = lib.kf_program_run

        def call(args):
            if len(args) != n_in or not check(*args):
                return slow(args)
            if idx >= 0 and get_device() != idx:
                return slow(args)  # another device current: made current there
            outs = [empty(shape, dtype=dt, device=dev) for dt, shape in tout]
            with lock:  # one run at a time per program (kfuse.h); the arrays are shared
                for k, a in zip(slots_in, args):
                    words_in[k] = a.data_ptr()  # kf_binding.data of each input
                for k, o in zip(slots_out, outs):
                    words_out[k] = o.data_ptr()
                h = self._h
                if h is None:
                    raise KfuseError(1, "the program was destroyed")
                st = run(h, bi, n_in, bo, n_out, raw(idx) if idx >= 0 else None)
                if st:
                    raise KfuseError(st, lib.kf_program_error(h).decode())
            return outs
        return call

    def _checked_fast(self, args):
        """The kept arrays for `args` when each input passes the checks of
        the fast path (a torch tensor of the input's dtype, contiguous with
        its shape, on the program's kind of device: one CUDA device for a
        CUDA program, the CPU for a CPU one), with a guard made from them for
        the next calls; else None."""
        import torch

        if len(args) != len(self._in_sig) or not args or not isinstance(args[0], torch.Tensor):
            return None
        idx = args[0].get_device()  # -1: the CPU
        if (idx >= 0) != self._device_runs:
            return None
        fp = self._fast_run(idx)
        same = _size_stride_check()
        # dtypes are singletons (`is`); get_device() is an int, cheaper than
        # comparing torch.device objects; sizes and strides in one C++ call
        for a, (dt, shape, stride) in zip(args, fp.tin):
            if (not isinstance(a, torch.Tensor) or a.dtype is not dt or a.get_device() != idx
                    or not same(a, shape, stride)):
                return None
        fp.guard = _tensor_guard(args)
        self._fast = fp
        return fp

    def _fast_run(self, idx):
        fp = self._fast_by_device.get(idx)
        if fp is None:
            fp = self._fast_by_device[idx] = _FastRun(self, idx)
        return fp

    def _run_fast(self, fp, args):
        """Binds `args` (checked) and fresh outputs into fp's arrays and runs:
        enqueued on PyTorch's current stream for a CUDA program, on the
        calling thread for a CPU one."""
        empty, dev, slot = fp.empty, fp.dev, fp.slot
        outs = [empty(shape, dtype=dt, device=dev) for dt, shape in fp.tout]
        with self._lock:  # one run at a time per program (kfuse.h); the arrays are shared
            words = fp.words_in
            for i, a in enumerate(args):
                words[slot * i + 1] = a.data_ptr()  # kf_binding.data of input i
            words = fp.words_out
            for i, o in enumerate(outs):
                words[slot * i + 1] = o.data_ptr()
            if fp.idx < 0:
                self._check_st(self._lib.kf_program_run(self._h, fp.bi, fp.n_in, fp.bo,
                                                        fp.n_out, None))
            elif fp.get_device() == fp.idx and self._workspace is not None:
                self._check_st(self._lib.kf_program_run_device(
                    self._h, fp.bi, fp.n_in, fp.bo, fp.n_out, fp.raw_stream(fp.idx)))
            else:  # the first run (the workspace), or another device current
                self._enqueue_held(fp.bi, fp.n_in, fp.bo, fp.n_out, dev)
        return outs

    def _enqueue(self, bi, n_in, bo, n_out, dev):
        """kf_program_run_device on PyTorch's current stream of `dev`, one run
        at a time (kfuse.h), the workspace from PyTorch's allocator on the
        first; `dev` made current only when it is not."""
        with self._lock:
            self._enqueue_held(bi, n_in, bo, n_out, dev)

    def _enqueue_held(self, bi, n_in, bo, n_out, dev):
        """_enqueue, the caller holding the program's lock."""
        import torch

        with (torch.cuda.device(dev) if torch.cuda.current_device() != dev.index
              else contextlib.nullcontext()):
            if self._workspace is None:
                self._use_torch_workspace(dev)
            stream = _raw_stream(dev)
            self._check_st(self._lib.kf_program_run_device(self._h, bi, n_in, bo, n_out,
                                                           ctypes.c_void_p(stream)))

    def _use_torch_workspace(self, dev):
        """The program's workspace from PyTorch's allocator (kept by the
        program), so a framework's caching allocator serves kfuse."""
        import torch

        size = ctypes.c_size_t()
        self._check_st(self._lib.kf_program_workspace_size(self._h, ctypes.byref(size)))
        ws = torch.empty(max(size.value, 256), dtype=torch.uint8, device=dev)
        self._check_st(self._lib.kf_program_set_workspace(self._h, ctypes.c_void_p(ws.data_ptr()),
                                                          ws.numel()))
        self._workspace = ws

    def warm_device(self, args):
        """Does, without running anything, the once-per-process work of this
        CUDA program's first device-resident run: its steps are launched once
        into a CUDA graph captured on a private stream in relaxed mode, then
        thrown away unexecuted. That pays cuBLASLt's lazy start-up at its first
        real call, the kernels' loads at their first launch, the workspace
        from PyTorch's allocator (on the current stream, as the first run's)
        and the checks of run_device_list's fast path here -- e.g. on a
        thread while a framework finishes its own work -- and not in the first
        call. `args` as run_device_list takes them (torch tensors on one CUDA
        device, on the current device): only their addresses, shapes and
        dtypes are read, nothing reads or writes their data. The outputs it
        binds are allocated and freed here; the program's run history is not
        touched (a captured run neither counts as a run nor is replayed).

        Returns True when the capture was made; False when it was not tried
        (not a CUDA program, inputs the fast path does not take, the current
        stream capturing) or failed, and then the first run pays it all as
        before. Results never change: no launch of it executes."""
        import torch

        if not self._device_runs or not args or self._h is None:
            return False
        fp = self._checked_fast(args)
        if fp is None or fp.idx < 0 or fp.get_device() != fp.idx:
            return False
        with self._lock:
            if torch.cuda.is_current_stream_capturing():
                return False  # a caller's capture: not ours to add to
            if self._workspace is None:
                self._use_torch_workspace(fp.dev)
            outs = [fp.empty(shape, dtype=dt, device=fp.dev) for dt, shape in fp.tout]
            for i, a in enumerate(args):
                fp.words_in[fp.slot * i + 1] = a.data_ptr()
            for i, o in enumerate(outs):
                fp.words_out[fp.slot * i + 1] = o.data_ptr()
            side, graph = torch.cuda.Stream(fp.dev), torch.cuda.CUDAGraph()
            st = 1
            try:
                with torch.cuda.stream(side):
                    # relaxed: other threads' CUDA calls (the framework's own)
                    # stay legal while this capture is open
                    graph.capture_begin(capture_error_mode="relaxed")
                    try:
                        st = self._lib.kf_program_run_device(
                            self._h, fp.bi, fp.n_in, fp.bo, fp.n_out,
                            ctypes.c_void_p(side.cuda_stream))
                    finally:
                        graph.capture_end()  # instantiated, never launched
            except Exception:  # noqa: BLE001 - the first run does it all instead
                return False
            finally:
                graph.reset()
            return st == 0

    def _check_st(self, st):
        if st:
            raise KfuseError(st, self._lib.kf_program_error(self._h).decode())

    def report(self, format="text"):
        """The fusion report: text (str) or, with format="json", a dict
        (schema kfuse.report/2, docs/report-schema.md)."""
        if format not in _capi.REPORT_FORMATS:
            raise ValueError(f"kfuse: unknown report format {format!r}; expected text or json")
        st, text = _capi.capture(
            lambda f: self._lib.kf_program_report(self._h, _capi.REPORT_FORMATS[format], f))
        if st:
            raise KfuseError(st, self._lib.kf_program_error(self._h).decode())
        return _json.loads(text) if format == "json" else text


def _contiguous(shape):
    """The strides of a contiguous tensor of `shape` (PyTorch's convention:
    a dim of size 1 keeps the stride it would have)."""
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


class _FastRun:
    """What Program.run_device_list keeps for one device between calls: the
    binding arrays (names and sizes set once), 64-bit views of them through
    which a call writes only the data pointers, the inputs' and outputs'
    torch dtypes, shapes and strides, and the guard of the last inputs that
    passed the per-input checks (None until then, or where torch lacks
    TensorGuards)."""

    def __init__(self, prog, idx):
        import torch

        lib = prog._lib

        def arrays(sig):
            arr = (_capi.kf_binding * max(len(sig), 1))()
            keep = []
            for i, (n, dt, shape) in enumerate(sig):
                keep.append(n.encode())
                arr[i].name = keep[-1]
                arr[i].size = lib.kf_dtype_size(_capi.DTYPES.index(dt)) * math.prod(shape)
            arr._names = keep  # the name buffers live as long as the array
            return arr

        def torch_sig(sig):
            return [(getattr(torch, _TORCH_NAMES[dt]), tuple(shape), _contiguous(shape))
                    for _, dt, shape in sig]

        self.idx = idx  # the device index, -1 for the CPU
        self.dev = torch.device("cpu") if idx < 0 else torch.device("cuda", idx)
        self.bi, self.bo = arrays(prog._in_sig), arrays(prog._out_sig)
        self.n_in, self.n_out = len(prog._in_sig), len(prog._out_sig)
        # a binding is `slot` 64-bit words; its data pointer is word 1 (after the name)
        assert ctypes.sizeof(_capi.kf_binding) == 24 and _capi.kf_binding.data.offset == 8
        self.slot = 3
        self.words_in = memoryview(self.bi).cast("B").cast("Q")
        self.words_out = memoryview(self.bo).cast("B").cast("Q")
        self.tin = torch_sig(prog._in_sig)
        self.tout = [(dt, shape) for dt, shape, _ in torch_sig(prog._out_sig)]
        self.empty = torch.empty
        self.guard = None
        if idx >= 0:
            get = getattr(torch._C, "_cuda_getDevice", None)  # what current_device calls
            self.get_device = get if get is not None else torch.cuda.current_device
            raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            self.raw_stream = raw if raw is not None else (
                lambda i: torch.cuda.current_stream(i).cuda_stream)


def _tensor_guard(args):
    """torch's TensorGuards over `args` (one C++ call checks later tensors'
    dtype, device, sizes, strides, requires_grad and dispatch keys against
    these), or None where torch lacks it or refuses the arguments."""
    try:
        from torch._C._dynamo.guards import TensorGuards

        return TensorGuards(*args, dynamic_dims_sizes=[list(a.shape) for a in args],
                            dynamic_dims_strides=[list(a.stride()) for a in args])
    except Exception:  # noqa: BLE001 - no guard: every call takes the per-input checks
        return None


@functools.cache
def _size_stride_check():
    """f(tensor, shape, stride) -> whether the tensor has exactly that shape
    and those strides: torch._C._dynamo.guards.assert_size_stride where it
    exists (one C++ call), else the same test in Python. A dim of size 1
    may have any stride (PyTorch calls such a tensor contiguous too)."""
    try:
        from torch._C._dynamo.guards import assert_size_stride
    except ImportError:
        return lambda a, shape, stride: a.shape == shape and a.is_contiguous()

    def same(a, shape, stride):
        try:
            assert_size_stride(a, shape, stride)
            return True
        except AssertionError:
            return a.shape == shape and a.is_contiguous()
    return same


def _raw_stream(dev):
    """PyTorch's current stream of `dev` as a CUstream handle (an int).
    torch._C._cuda_getCurrentRawStream is what Inductor's own generated code
    calls (a tenth of torch.cuda.current_stream's cost); the public call where
    it is absent."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(dev.index if dev.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(dev).cuda_stream


def parse(text, ctx=None):
    """Parses .kfg text into a Graph."""
    return Graph(ctx if ctx is not None else Context("cpu"), text=text)


def compile(graph, target="auto", **options):
    """Compiles `graph` for `target` ("cpu", "cuda" or "auto"); `options` are
    Context's (cache_dir, flags, gemm, arch, device, num_threads, ...)."""
    return Context(target, **options).compile(graph)
