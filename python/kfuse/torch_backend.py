"""torch.compile(model, backend="kfuse").

Dynamo captures the model; AOTAutograd lowers it to ATen ops; the ops kfuse
has are grouped into partitions (torch.fx's capability-based partitioner: the
largest connected groups that keep the graph acyclic), each translated op by op
into one kfuse graph and compiled into one kfuse Program; every other op stays
in PyTorch and is listed, by name, in the report (`kfuse.last_report()`, or
printed to stderr when KFUSE_REPORT=1). Shapes are static: Dynamo recompiles
on a new shape (its guards), and kfuse's disk cache serves the kernels of a
shape seen before, also in a new process.

Options (torch.compile(..., options={...})): "target" ("auto": the inputs'
device), "cache_dir", "gemm", "flags", "choice_margin", "choice_load_bias" (as
kfuse.Context takes them), and
"background_compile" (default True): each partition's program is compiled on
a thread from the moment its graph is translated, so kf_compile (NVRTC or the
disk cache, cuBLASLt, the GEMM choices) overlaps what Dynamo still does before
the first call (guards, bytecode); the first call waits for it. False compiles
at the first call, in the caller's thread. "tiered_compile" (default False,
as kfuse.Context; opt-in: on an H100 at ba31334 its swap, timed while the
LLaMA layer ran back to back at the power-capped clock, kept other winners
than the untiered compile's and left the block 1.8% slower): on a cold cache a GEMM group whose measured
choice (kfuse's generated kernel or cuBLASLt) is not known yet runs cuBLASLt
from the first call while the generated kernel compiles in the background; the
first call after it is ready times both, keeps the faster (stored in the disk
cache, so the next process starts with it) and runs it from then on: the
outputs' bits may change once then, within the same tolerance. A model runs
many calls, and its first one should not wait seconds for a kernel that
cuBLASLt may beat anyway. False: the first call waits for every kernel.

"graph_cache" (default True; off also with the flag "no_cache"): a graph
that is one kfuse partition and nothing else, on plain tensors, that
AOTAutograd hands over with Dynamo's inputs as they are (inference, no input
mutated, no output an alias), is stored in kfuse's cache directory
(torch-graphs/, beside the kernels) as its translated kfuse graph and how the
program's inputs and outputs map to Dynamo's, keyed by Dynamo's graph (its
code, which names only torch's functions, and no parameters or constants held
by the module), the inputs' shapes, strides, dtypes, devices and
requires_grad, grad mode, autocast and determinism, kfuse's options (less
those that only say how caches are used), libkfuse (version and file), this
package's sources and torch's version. A new process (or a new compile) of
the same graph skips AOTAutograd and the translation: the program is
compiled from the stored graph at once (on the background thread) and called
directly. Anything else, or a damaged entry, takes the path above.
"warm_first_run" (default True; needs background_compile): on CUDA inputs,
cuBLASLt's one-time start-up is begun at the backend's entry by a tiny torch
GEMM on a thread (PyTorch and kfuse share the library; once a process), and
where the partition's example inputs are the program's (a graph-cache hit,
or a graph stored to it) the background thread, once the program is
compiled, also does the rest of its first run's once-per-process work
(Program.warm_device: the steps captured into a graph on a private stream
and discarded unexecuted -- each cuBLASLt kernel's first load, the kernels',
the workspace), so the first call does not. Not while the caller's stream
captures; results never change.
kfuse.cache("clear") removes the entries with the kernels (the CLI's `kfuse
cache clear` only the kernels); so does deleting the folder.

Per call: a graph that is one kfuse partition (the common case: nothing left
to PyTorch) is called directly, without the partitioned GraphModule and
nn.Module's call around the partition; the program's per-call path
(Program.caller, the closure form of Program.run_device_list) checks the
inputs with one guard, allocates fresh outputs, writes their pointers into
kept binding arrays and enqueues the run on PyTorch's current stream (the
program replays the CUDA graph it captured from its own launches).
"""
import ctypes
import functools
import hashlib
import json
import math
import os
import sys
import tempfile
import threading
import time

import torch
from torch._dynamo.backends.common import aot_autograd
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from . import _core

aten = torch.ops.aten

_DT = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
       torch.float64: "f64", torch.int32: "i32", torch.bool: "bool", torch.int64: "i64"}

_report_lock = threading.Lock()
_last_report = [""]


def last_report():
    """The report of the last graph the backend compiled: its kfuse partitions
    (with kfuse's fusion report of each) and the ops left to PyTorch."""
    with _report_lock:
        return _last_report[0]


class Unsupported(Exception):
    """An op (or argument) kfuse cannot take: the node stays in PyTorch."""


def _val(node):
    v = node.meta.get("val") if hasattr(node, "meta") else None
    if v is None:
        v = node.meta.get("example_value") if hasattr(node, "meta") else None
    return v


def _static_shape(v):
    try:
        return tuple(int(d) for d in v.shape)
    except (TypeError, ValueError):
        raise Unsupported("a symbolic shape") from None


def _kdt(dtype):
    if dtype not in _DT:
        raise Unsupported(f"dtype {dtype}")
    return _DT[dtype]


# ---------------------------------------------------------------------------
# Translation of ATen ops into the kfuse builder
# ---------------------------------------------------------------------------

def _key(t):
    return ctypes.cast(t._h, ctypes.c_void_p).value


class _Builder:
    """The graph being built, and for each reshape result its source, so
    that view chains fold: ATen writes a linear layer on [B, S, K] as
    view(mm(view(x, [B*S, K]), W), [B, S, N]), which kfuse fuses best as one
    batched matmul of x whose epilogue sees [B, S, N] directly."""

    def __init__(self, graph):
        self.g = graph
        self.source = {}

    def _views(self, x):
        """x's chain of view sources, nearest first (each a reshape's input)."""
        src = self.source.get(_key(x))
        while src is not None:
            yield src
            src = self.source.get(_key(src))

    def reshape(self, x, shape):
        shape = tuple(shape)
        if tuple(x.shape) == shape:
            return x
        for src in self._views(x):  # a round trip back to a shape the chain had
            if tuple(src.shape) == shape:
                return src
        y = self.g.reshape(x, shape)
        self.source[_key(y)] = x
        return y

    def matmul(self, a, b):
        """a [M, K] @ b: when a is a view of [..., M', K] (the nearest such
        in its chain of views), the batched matmul of that, viewed as [M, N]."""
        if len(a.shape) == 2 and len(b.shape) == 2:
            for src in self._views(a):
                if len(src.shape) > 2 and src.shape[-1] == a.shape[-1]:
                    full = self.g.matmul(src, b)
                    return self.reshape(full, (a.shape[0], b.shape[1]))
        return self.g.matmul(a, b)

    def operand(self, x, dtype):
        if isinstance(x, _core.Tensor):
            return x
        if isinstance(x, (int, float, bool)):
            return self.g.scalar(float(x), dtype)
        raise Unsupported(f"operand {type(x).__name__}")


def _binary(name):
    def f(b, node, a, c, *rest, **kw):
        alpha = kw.get("alpha", 1)
        if rest or (alpha != 1 and name not in ("add", "sub")):
            raise Unsupported("extra arguments")
        # a Python scalar operand takes the tensor operand's dtype
        t = a if isinstance(a, _core.Tensor) else c
        odt = t.dtype if isinstance(t, _core.Tensor) else _kdt(_val(node).dtype)
        x, y = b.operand(a, odt), b.operand(c, odt)
        if alpha != 1:
            y = b.g.mul(y, b.g.scalar(alpha, odt))
        return getattr(b.g, name)(x, y)
    return f


def _unary(name):
    def f(b, node, x, *rest, **kw):
        if rest or kw:
            raise Unsupported("extra arguments")
        return getattr(b.g, name)(x)
    return f


def _gelu(b, node, x, approximate="none"):
    return b.g.gelu_tanh(x) if approximate == "tanh" else b.g.gelu(x)


def _reshape(b, node, x, *shape_args, **kw):
    return b.reshape(x, _static_shape(_val(node)))


def _identity(b, node, x, *a, **kw):
    if kw.get("memory_format") not in (None, torch.contiguous_format):
        raise Unsupported("a memory format")
    return x


def _expand(b, node, x, size, implicit=False):
    return b.g.expand(x, _static_shape(_val(node)))


def _transpose(b, node, x, d0, d1):
    return b.g.transpose(x, d0, d1)


def _t(b, node, x):
    return x if len(x.shape) < 2 else b.g.transpose(x, -2, -1)


def _permute(b, node, x, dims):
    return b.g.permute(x, list(dims))


def _matmul(b, node, x, y):
    return b.matmul(x, y)


def _addmm(b, node, bias, x, y, beta=1, alpha=1):
    if beta != 1 or alpha != 1:
        raise Unsupported("addmm with beta or alpha")
    prod = b.matmul(x, y)
    src = next(b._views(prod), None)
    if src is not None and len(bias.shape) <= 1:
        # the bias is added on the batched product, so the view stays foldable
        return b.reshape(b.g.add(src, bias), tuple(prod.shape))
    return b.g.add(prod, bias)


def _softmax(fn):
    def f(b, node, x, dim, half_to_float=False):
        if half_to_float:
            raise Unsupported("half_to_float")
        return getattr(b.g, fn)(x, dim)
    return f


def _reduce(fn, dims_required=True):
    def f(b, node, x, dim=None, keepdim=False, dtype=None):
        if dtype is not None:
            raise Unsupported("a reduction dtype")
        if dim is None:
            raise Unsupported("a full reduction")
        dims = [dim] if isinstance(dim, int) else list(dim)
        if len(dims) != 1:
            raise Unsupported("a reduction over several dims")
        return getattr(b.g, fn)(x, dims[0], bool(keepdim))
    return f


def _pow_scalar(b, node, x, e):
    if isinstance(e, (int, float)) and e == 2:
        return b.g.mul(x, x)
    return b.g.pow(x, b.g.scalar(float(e), x.dtype))


def _rsub(b, node, x, other, alpha=1):
    if alpha != 1:
        raise Unsupported("rsub with alpha")
    return b.g.sub(b.operand(other, x.dtype), x)


def _where(b, node, cond, x, y):
    dt = (x if isinstance(x, _core.Tensor) else y).dtype
    return b.g.where(cond, b.operand(x, dt), b.operand(y, dt))


def _masked_fill(b, node, x, mask, value):
    if isinstance(value, _core.Tensor):
        return b.g.where(mask, value, x)
    return b.g.where(mask, b.g.scalar(float(value), x.dtype), x)


def _to_copy(b, node, x, dtype=None, layout=None, device=None, pin_memory=None,
             non_blocking=False, memory_format=None):
    if layout not in (None, torch.strided) or memory_format not in (None,
                                                                     torch.contiguous_format,
                                                                     torch.preserve_format):
        raise Unsupported("a layout change")
    src = _val(node.args[0])
    if device is not None and torch.device(device) != src.device:
        raise Unsupported("a device copy")
    if dtype is None or _kdt(dtype) == x.dtype:
        return x
    return b.g.cast(x, _kdt(dtype))


def _clamp(b, node, x, min=None, max=None):
    if isinstance(min, _core.Tensor) or isinstance(max, _core.Tensor):
        raise Unsupported("tensor bounds")
    return b.g.clamp(x, min=min, max=max)


def _layer_norm(b, node, x, normalized_shape, w, bias, eps):
    if len(normalized_shape) != 1:
        raise Unsupported("a layer norm over several dims")
    n = normalized_shape[0]
    dt = x.dtype
    if w is None:
        w = b.g.expand(b.g.scalar(1.0, dt), (n,))
    if bias is None:
        bias = b.g.expand(b.g.scalar(0.0, dt), (n,))
    return (b.g.layer_norm(x, w, bias, -1, float(eps)),)


def _scalar_tensor(b, node, value, **kw):
    return _full(b, node, (), value)


def _full(b, node, size, value, **kw):
    v = _val(node)
    t = b.g.scalar(float(value), _kdt(v.dtype))
    shape = _static_shape(v)
    return t if not shape else b.g.expand(t, shape)


def _arange(b, node, *args, **kw):
    v = _val(node)
    start, end, step = (0, args[0], 1) if len(args) == 1 else (
        args[0], args[1], args[2] if len(args) > 2 else 1)
    if start != 0 or step != 1:
        raise Unsupported("arange with a start or step")
    return b.g.iota(_kdt(v.dtype), (int(end),), 0)


def _slice(b, node, x, dim=0, start=None, end=None, step=1):
    start = 0 if start is None else start
    end = (1 << 63) - 1 if end is None else end
    if tuple(_static_shape(_val(node))) == tuple(x.shape):
        return x
    return b.g.slice(x, dim, start, end, step)


def _cat(b, node, xs, dim=0):
    return b.g.concat(xs, dim)


def _split(b, node, x, split_size, dim=0):
    n = x.shape[dim]
    sizes = ([split_size] * (n // split_size) + ([n % split_size] if n % split_size else [])
             if isinstance(split_size, int) else list(split_size))
    out, at = [], 0
    for size in sizes:
        out.append(b.g.slice(x, dim, at, at + size, 1) if size != n else x)
        at += size
    return tuple(out)


def _embedding(b, node, weight, idx, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return b.g.gather(weight, idx, 0)


def _index_select(b, node, x, dim, idx):
    return b.g.gather(x, idx, dim)


def _sdpa(b, node, q, k, v, *args, **kw):
    """scaled_dot_product_attention in any of ATen's spellings, written as the
    primitives kfuse's planner fuses into one attention group."""
    t = node.target
    attn_mask, dropout, causal, scale, gqa = None, 0.0, False, None, False
    a = list(args)
    if t is aten.scaled_dot_product_attention.default:
        names = ["attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]
    elif t is aten._scaled_dot_product_flash_attention_for_cpu.default:
        names = ["dropout_p", "is_causal", "attn_mask", "scale"]
    elif t is aten._scaled_dot_product_flash_attention.default:
        names = ["dropout_p", "is_causal", "return_debug_mask", "scale"]
    elif t is aten._scaled_dot_product_efficient_attention.default:
        names = ["attn_mask", "compute_log_sumexp", "dropout_p", "is_causal", "scale"]
    elif t is aten._scaled_dot_product_cudnn_attention.default:
        names = ["attn_mask", "compute_log_sumexp", "dropout_p", "is_causal",
                 "return_debug_mask", "scale"]
    else:
        raise Unsupported("an attention variant")
    p = dict(zip(names, a))
    p.update(kw)
    attn_mask, dropout = p.get("attn_mask"), p.get("dropout_p", 0.0)
    causal, scale = bool(p.get("is_causal", False)), p.get("scale")
    if dropout:
        raise Unsupported("attention dropout")
    if attn_mask is not None and causal:
        raise Unsupported("attention with both a mask and is_causal")
    qs, ks = q.shape, k.shape
    if len(qs) != 4 or len(ks) != 4:
        raise Unsupported("attention of rank other than 4")
    B, H, L, D = qs
    Hk, S = ks[1], ks[2]
    dt = q.dtype
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    if H != Hk:
        if H % Hk:
            raise Unsupported("query heads not a multiple of key heads")
        q5 = b.g.reshape(q, (B, Hk, H // Hk, L, D))
        k5 = b.g.reshape(k, (B, Hk, 1, S, D))
        v5 = b.g.reshape(v, (B, Hk, 1, S, v.shape[-1]))
    else:
        q5, k5, v5 = q, k, v
    s = b.g.mul(b.g.matmul(q5, k5, transpose_b=True), b.g.scalar(scale, dt))
    if causal:
        row = b.g.iota("i32", (L, S), 0)
        col = b.g.iota("i32", (L, S), 1)
        s = b.g.where(b.g.ge(row, col), s, b.g.scalar(float("-inf"), dt))
    elif attn_mask is not None:
        if H != Hk:
            raise Unsupported("a mask with grouped-query attention")
        if attn_mask.dtype == "bool":
            s = b.g.where(attn_mask, s, b.g.scalar(float("-inf"), dt))
        else:
            s = b.g.add(s, attn_mask if attn_mask.dtype == dt else b.g.cast(attn_mask, dt))
    o = b.g.matmul(b.g.softmax(s, -1), v5)
    if H != Hk:
        o = b.g.reshape(o, (B, H, L, v.shape[-1]))
    return (o,)


_OPS = {
    aten.add.Tensor: _binary("add"), aten.add.Scalar: _binary("add"),
    aten.sub.Tensor: _binary("sub"), aten.sub.Scalar: _binary("sub"),
    aten.mul.Tensor: _binary("mul"), aten.mul.Scalar: _binary("mul"),
    aten.div.Tensor: _binary("div"), aten.div.Scalar: _binary("div"),
    aten.maximum.default: _binary("max"), aten.minimum.default: _binary("min"),
    aten.pow.Tensor_Tensor: _binary("pow"), aten.pow.Tensor_Scalar: _pow_scalar,
    aten.eq.Tensor: _binary("eq"), aten.eq.Scalar: _binary("eq"),
    aten.ne.Tensor: _binary("ne"), aten.ne.Scalar: _binary("ne"),
    aten.lt.Tensor: _binary("lt"), aten.lt.Scalar: _binary("lt"),
    aten.le.Tensor: _binary("le"), aten.le.Scalar: _binary("le"),
    aten.gt.Tensor: _binary("gt"), aten.gt.Scalar: _binary("gt"),
    aten.ge.Tensor: _binary("ge"), aten.ge.Scalar: _binary("ge"),
    aten.rsub.Scalar: _rsub,
    aten.neg.default: _unary("neg"), aten.abs.default: _unary("abs"),
    aten.exp.default: _unary("exp"), aten.log.default: _unary("log"),
    aten.sqrt.default: _unary("sqrt"), aten.rsqrt.default: _unary("rsqrt"),
    aten.tanh.default: _unary("tanh"), aten.sigmoid.default: _unary("sigmoid"),
    aten.relu.default: _unary("relu"), aten.silu.default: _unary("silu"),
    aten.erf.default: _unary("erf"), aten.sin.default: _unary("sin"),
    aten.cos.default: _unary("cos"), aten.gelu.default: _gelu,
    aten.where.self: _where, aten.masked_fill.Scalar: _masked_fill,
    aten.masked_fill.Tensor: _masked_fill,
    aten.clamp.default: _clamp,
    aten.view.default: _reshape, aten._unsafe_view.default: _reshape,
    aten.reshape.default: _reshape, aten.unsqueeze.default: _reshape,
    aten.squeeze.dim: _reshape, aten.squeeze.default: _reshape,
    aten.clone.default: _identity, aten.alias.default: _identity,
    aten.expand.default: _expand, aten.transpose.int: _transpose, aten.t.default: _t,
    aten.permute.default: _permute,
    aten.mm.default: _matmul, aten.bmm.default: _matmul, aten.addmm.default: _addmm,
    aten._softmax.default: _softmax("softmax"), aten._log_softmax.default: _softmax("log_softmax"),
    aten.mean.dim: _reduce("reduce_mean"), aten.sum.dim_IntList: _reduce("reduce_sum"),
    aten.amax.default: _reduce("reduce_max"), aten.amin.default: _reduce("reduce_min"),
    aten._to_copy.default: _to_copy,
    aten.native_layer_norm.default: _layer_norm,
    aten.full.default: _full, aten.scalar_tensor.default: _scalar_tensor,
    aten.arange.default: _arange, aten.arange.start: _arange,
    aten.arange.start_step: _arange,
    aten.slice.Tensor: _slice, aten.cat.default: _cat,
    aten.split.Tensor: _split, aten.split_with_sizes.default: _split,
    aten.embedding.default: _embedding, aten.index_select.default: _index_select,
    aten.scaled_dot_product_attention.default: _sdpa,
    aten._scaled_dot_product_flash_attention_for_cpu.default: _sdpa,
    aten._scaled_dot_product_flash_attention.default: _sdpa,
    aten._scaled_dot_product_efficient_attention.default: _sdpa,
    aten._scaled_dot_product_cudnn_attention.default: _sdpa,
}
# Ops returning tuples: which results kfuse computes (others stay unsupported).
_TUPLE_OPS = {aten.native_layer_norm.default, aten._scaled_dot_product_flash_attention_for_cpu.default,
              aten._scaled_dot_product_flash_attention.default,
              aten._scaled_dot_product_efficient_attention.default,
              aten._scaled_dot_product_cudnn_attention.default}
# Ops returning tuples whose every result kfuse computes.
_ALL_RESULTS = {aten.split.Tensor, aten.split_with_sizes.default}


def _tensor_meta_ok(v):
    if isinstance(v, (tuple, list)):
        return all(_tensor_meta_ok(x) for x in v)
    if not isinstance(v, torch.Tensor):
        return False
    _kdt(v.dtype)
    _static_shape(v)
    return True


class _Support(OperatorSupportBase):
    """Which nodes kfuse takes: a known op whose tensors have kfuse dtypes and
    static shapes, and which the builder accepts on a trial translation."""

    def __init__(self, ctx):
        self.ctx = ctx  # the context every trial graph is built in
        self.reasons = {}

    def is_node_supported(self, submodules, node):
        if node.op != "call_function":
            return False
        try:
            if node.target.__name__ == "getitem" and node.args[0].target in _ALL_RESULTS:
                return True
            if node.target.__name__ == "getitem" and node.args[0].target in _TUPLE_OPS:
                if node.args[1] != 0:
                    raise Unsupported(f"result {node.args[1]} of {node.args[0].target}")
                return True
            if node.target not in _OPS:
                raise Unsupported("no kfuse translation")
            v = _val(node)
            if node.target in _TUPLE_OPS and isinstance(v, (tuple, list)):
                v = v[0]  # only the first result is computed (the others may be ints, None)
            if not _tensor_meta_ok(v):
                raise Unsupported("a non-tensor result")
            if node.target in _TUPLE_OPS:
                for u in node.users:
                    if u.target.__name__ != "getitem" or u.args[1] != 0:
                        raise Unsupported("a result other than the first is used")
            for a in node.all_input_nodes:
                if not _tensor_meta_ok(_val(a)):
                    raise Unsupported("an operand kfuse cannot hold")
            _trial(node, self.ctx)
            return True
        except Unsupported as e:
            self.reasons[node] = str(e)
            return False


def _trial(node, ctx):
    """Translates `node` alone, its operands as inputs, to catch what the
    builder refuses (shapes, dtypes, arguments) before partitioning."""
    g = _core.Graph(ctx)
    env = {}
    try:
        for i, a in enumerate(node.all_input_nodes):
            v = _val(a)
            env[a] = g.input(f"i{i}", _kdt(v.dtype), _static_shape(v))
        _translate(_Builder(g), node, env)
    except _core.KfuseError as e:
        raise Unsupported(f"kfuse refused it: {e}") from None
    except AttributeError as e:
        # an op this libkfuse lacks (an older library than the package)
        raise Unsupported(f"not in this libkfuse ({e})") from None
    except (TypeError, ValueError, KeyError, IndexError) as e:
        # an argument form the translation does not know: the op stays in PyTorch
        raise Unsupported(f"arguments kfuse does not translate ({e})") from None


def _map_arg(a, env):
    if isinstance(a, torch.fx.Node):
        return env[a]
    if isinstance(a, (list, tuple)):
        return type(a)(_map_arg(x, env) for x in a)
    return a


def _translate(b, node, env):
    if node.target.__name__ == "getitem" and not isinstance(node.target, torch._ops.OpOverload):
        return env[node.args[0]][node.args[1]]
    args = [_map_arg(a, env) for a in node.args]
    kwargs = {k: _map_arg(v, env) for k, v in node.kwargs.items()}
    return _OPS[node.target](b, node, *args, **kwargs)


# ---------------------------------------------------------------------------
# A partition: one kfuse graph and program
# ---------------------------------------------------------------------------

class _Contexts:
    """The target contexts (target -> kfuse.Context) of one graph's partitions,
    made once each, from whichever thread compiles first."""

    def __init__(self, options):
        self.options = {k: v for k, v in options.items()
                        if k not in ("target", "background_compile", "graph_cache",
                                     "warm_first_run")}
        self.options.setdefault("tiered_compile", False)
        self.lock = threading.Lock()
        self.by_target = {}

    def get(self, target):
        with self.lock:
            c = self.by_target.get(target)
            if c is None:
                c = self.by_target[target] = _core.Context(target, **self.options)
            return c


class _KfusePartition(torch.nn.Module):
    def __init__(self, graph, input_names, output_names, single, options, contexts, device_hint):
        super().__init__()
        self.options = options
        self.contexts = contexts  # a _Contexts shared by the graph's partitions
        self.graph = graph
        self.input_names, self.output_names, self.single = input_names, output_names, single
        self.programs = {}
        self._by_index = {}  # device index (-1: the CPU) -> its program's caller(), for call()
        self.compile_s = 0.0  # kf_compile's time (codegen, NVRTC or the cache, choices measured)
        self.wait_s = 0.0  # how long calls waited for a compile on the background thread
        self._compile_lock = threading.Lock()  # one compile of a device at a time
        self.device_hint = device_hint  # the device the example inputs are on (background compile)
        self.warm_s, self.warmed = 0.0, None  # warm(): its time, whether it captured (None: not tried)
        self.warm_done = threading.Event()  # cleared while a warm-up is scheduled and not done
        self.warm_done.set()

    @classmethod
    def translate(cls, gm, options, ctx, contexts):
        """The partition of the ATen graph `gm`: each op translated into one kfuse graph."""
        graph = _core.Graph(ctx)
        b = _Builder(graph)
        env, input_names, output_names, single = {}, [], [], False
        for n in gm.graph.nodes:
            if n.op == "placeholder":
                v = _val(n)
                name = f"in{len(input_names)}"
                env[n] = graph.input(name, _kdt(v.dtype), _static_shape(v))
                input_names.append(name)
            elif n.op == "call_function":
                env[n] = _translate(b, n, env)
            elif n.op == "output":
                outs = n.args[0]
                single = not isinstance(outs, (tuple, list))
                for i, o in enumerate([outs] if single else outs):
                    name = f"out{i}"
                    graph.output(name, env[o])
                    output_names.append(name)
        hint = next((_val(n).device for n in gm.graph.nodes
                     if n.op == "placeholder" and isinstance(_val(n), torch.Tensor)), None)
        return cls(graph, input_names, output_names, single, options, contexts, hint)

    def program(self, device):
        key = str(device)
        p = self.programs.get(key)
        if p is None:
            t0 = time.perf_counter()
            with self._compile_lock:  # taken by a background compile of this partition
                self.wait_s += time.perf_counter() - t0
                p = self.programs.get(key)
                if p is None:
                    p = self._compile(device)
                    self.programs[key] = p
        return p

    def _compile(self, device):
        target = self.options.get("target", "auto")
        if target == "auto":
            target = "cuda" if device.type == "cuda" else "cpu"
        t0 = time.perf_counter()
        p = self.contexts.get(target).compile(self.graph)
        self.compile_s += time.perf_counter() - t0
        return p

    def compile_ahead(self):
        """The background thread's work: the program for the example inputs'
        device. A failure is left for the first call, which compiles again in
        its own thread and raises there."""
        if self.device_hint is None:
            return
        try:
            self.program(self.device_hint)
        except Exception:  # noqa: BLE001 - raised again by the first call's own compile
            pass

    def warm(self, args):
        """The background thread's second job: the first run's once-per-process
        work for `args` (the example inputs, in this partition's input order),
        on the CUDA program compiled for them (Program.warm_device). Its time
        goes to warm_s; a failure leaves it to the first call."""
        p = self.programs.get(str(self.device_hint))
        if p is None or not hasattr(p, "warm_device"):
            return
        t0 = time.perf_counter()
        try:
            self.warmed = p.warm_device(args)
        except Exception:  # noqa: BLE001 - the first call does it instead
            self.warmed = False
        self.warm_s += time.perf_counter() - t0

    def forward(self, *args):
        outs = self.call(args)
        return outs[0] if self.single else tuple(outs)

    def call(self, args):
        """The partition's outputs (a list) for `args`: the per-call path,
        without nn.Module's call. The program's caller (Program.caller) is
        found by the first input's device index (an int), not a torch.device
        made and printed per call."""
        idx = args[0].get_device() if args and isinstance(args[0], torch.Tensor) else -1
        c = self._by_index.get(idx)
        if c is None:
            t0 = time.perf_counter()
            self.warm_done.wait()  # the thread's warm-up, if one is scheduled, then this run
            _join_blas(idx)  # and the early cuBLASLt start-up's thread
            self.wait_s += time.perf_counter() - t0
            c = self._by_index[idx] = self.program(
                args[0].device if args else torch.device("cpu")).caller()
        return c(args)

    def report(self):
        if not self.programs:
            return "(not run yet)"
        return next(iter(self.programs.values())).report()


def _symbolic(gm):
    for n in gm.graph.nodes:
        v = _val(n)
        if isinstance(v, torch.Tensor) and any(not isinstance(d, int) for d in v.shape):
            return True
    return False


def _compile_fx(gm, example_inputs, options, record=None):
    """A callable for an ATen graph: static shapes are compiled now; a graph
    with symbolic shapes (Dynamo's automatic dynamic shapes) is specialized on
    each new set of input shapes and dtypes at call time, and kept by them.
    `record` (a dict): where a static graph that is one kfuse partition leaves
    what the graph cache stores of it."""
    if not _symbolic(gm):
        return _compile_static(gm, options, record)
    from torch.fx.experimental.proxy_tensor import make_fx

    compiled = {}

    def run(*args):
        key = tuple((tuple(a.shape), a.dtype, a.device) if isinstance(a, torch.Tensor) else a
                    for a in args)
        fn = compiled.get(key)
        if fn is None:
            concrete = make_fx(gm, tracing_mode="fake")(*args)
            fn = compiled[key] = _compile_static(concrete, options)
        return fn(*args)

    return run


def _compile_static(gm, options, record=None):
    t0 = time.perf_counter()
    ctx = _core.Context("cpu")  # builds the graphs; each program compiles in its target's
    support = _Support(ctx)
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    fused = partitioner.fuse_partitions(partitions)
    parts, fallback, contexts = [], {}, _Contexts(options)
    for n in fused.graph.nodes:
        if n.op == "call_module" and n.target.startswith("fused_"):
            sub = getattr(fused, n.target)
            # the fused submodule's nodes carry the original meta
            for p in sub.graph.nodes:
                if p.op == "placeholder" and "val" not in p.meta:
                    src = next((a for a in n.args if isinstance(a, torch.fx.Node)
                                and a.name == p.name), None)
                    if src is not None:
                        p.meta["val"] = _val(src)
            part = _KfusePartition.translate(sub, options, ctx, contexts)
            setattr(fused, n.target, part)
            parts.append((n.target, part))
    for n, why in support.reasons.items():
        if n.op == "call_function" and n.target.__name__ != "getitem":
            fallback.setdefault(str(n.target), why)
    fused.recompile()
    state = {"parts": parts, "fallback": fallback, "reported": False,
             "translate_s": time.perf_counter() - t0, "thread": None}
    _start_background(state, options)
    direct = _direct(fused, dict(parts))
    if record is None or direct is None:
        state["warm_ready"].set()  # no warm-up: only a stored graph knows Dynamo's inputs
    if direct is None:
        def run(*args):
            out = fused(*args)
            if not state["reported"]:
                state["reported"] = True
                _publish(state)
            return out

        return run
    call, order, picks, container = direct
    if record is not None:
        record.update(part=parts[0][1], order=order, picks=picks, container=container,
                      n_inputs=sum(1 for n in gm.graph.nodes if n.op == "placeholder"),
                      state=state)
    return _run_direct(state, call, order, picks, container)


def _warm_stream(options, example_inputs):
    """The CUDA stream a first-run warm-up allocates on (PyTorch's current
    stream of the example inputs' device, where the first call's run goes),
    or None: no warm-up (option off, no background thread, not CUDA
    tensors, fake tensors, or that stream capturing now)."""
    if not (options.get("warm_first_run", True) and options.get("background_compile", True)):
        return None
    if not example_inputs or not all(isinstance(t, torch.Tensor) and t.is_cuda and
                                     type(t) in (torch.Tensor, torch.nn.Parameter)
                                     for t in example_inputs):
        return None  # FakeTensors and other subclasses are not bound
    dev = example_inputs[0].device
    if any(t.device != dev for t in example_inputs):
        return None
    with torch.cuda.device(dev):
        if torch.cuda.is_current_stream_capturing():
            return None
        return torch.cuda.current_stream(dev)


def _start_background(state, options):
    """The partitions' kf_compile on a thread (background_compile), then the
    warm-ups _schedule_warm lists, once state["warm_ready"] is set (the graph
    store decides them after the compile began). It adds the warm-ups' state:
    their list, the event that closes it, its lock, and whether it is open."""
    state["warm"], state["warm_ready"] = [], threading.Event()
    state["warm_lock"], state["warm_open"] = threading.Lock(), True
    if state["parts"] and options.get("background_compile", True):
        # kf_compile (in C, without the GIL) overlaps the rest of Dynamo's work
        # until the first call; not a daemon, so an exit waits for it rather
        # than unloading libraries under a compile
        parts = state["parts"]

        def work():
            for _, part in parts:
                part.compile_ahead()
            state["warm_ready"].wait(timeout=10.0)
            with state["warm_lock"]:
                state["warm_open"] = False  # none scheduled from now on
                pending = list(state["warm"])
            for part, args, stream in pending:
                try:
                    with torch.cuda.device(stream.device), torch.cuda.stream(stream):
                        part.warm(args)
                finally:
                    part.warm_done.set()

        state["thread"] = threading.Thread(target=work, name="kfuse-compile")
        state["thread"].start()


_blas_started = {}  # device index -> the thread _start_blas began there (once a process)
_blas_lock = threading.Lock()


def _start_blas(stream):
    """cuBLASLt's one-time start-up in this process (its first real call: 85-110
    ms on an H200, where a warm first call's first run spent nearly all its
    host time), begun on a thread at the backend's entry so that it overlaps
    kf_compile and Dynamo's remaining work. PyTorch and kfuse share one
    libcublasLt in a process (kfuse opens it by soname, and glibc hands back
    PyTorch's copy when the versions match), so one tiny torch GEMM on
    `stream` (where the first call runs; nothing the caller holds is touched)
    starts it for both; where they differ it costs that thread a start-up of
    PyTorch's copy and saves kfuse nothing. Once per device and process; a
    partition's first call joins it (_join_blas), so nothing of it is left
    running when the caller gets the first result (and may begin a capture)."""
    with _blas_lock:
        if stream.device.index in _blas_started:
            return None
        _blas_started[stream.device.index] = None  # taken: the thread follows

    def work():
        try:
            with torch.cuda.device(stream.device), torch.cuda.stream(stream), torch.no_grad():
                w = torch.zeros(64, 64, device=stream.device, dtype=torch.bfloat16)
                torch.nn.functional.linear(w, w, w[0])
        except Exception:  # noqa: BLE001 - nothing started: the first run starts it
            pass

    t = threading.Thread(target=work, name="kfuse-blas-start")
    with _blas_lock:
        _blas_started[stream.device.index] = t
    t.start()
    return t


def _join_blas(idx):
    """Waits for _start_blas's thread on device `idx`, if one was started."""
    with _blas_lock:
        t = _blas_started.get(idx)
    if t is not None and t is not threading.current_thread():
        t.join()


def _schedule_warm(state, part, example_inputs, order, options):
    """Lists `part`'s first-run warm-up on the background thread (on Dynamo's
    example inputs in the program's order), unless _warm_stream says no or
    the thread no longer takes any; its first call then waits for it."""
    stream = _warm_stream(options, example_inputs) if state.get("thread") else None
    if stream is None:
        return
    args = [example_inputs[i] for i in order] if order is not None else list(example_inputs)
    with state["warm_lock"]:
        if state["warm_open"]:
            part.warm_done.clear()
            state["warm"].append((part, args, stream))


def _run_direct(state, call, order, picks, container):
    whole = picks == list(range(len(picks)))  # the partition's results, in order

    def run_direct(*args):
        # the graph is one kfuse partition: its call, without the fused
        # GraphModule's forward and nn.Module's call around it
        outs = call(args if order is None else [args[i] for i in order])
        if not state["reported"]:
            state["reported"] = True
            _publish(state)
        if whole and len(outs) == len(picks):
            return container(outs)
        return container(outs[k] if k >= 0 else args[-1 - k] for k in picks)

    return run_direct


def _direct(fused, parts):
    """When the fused graph is one kfuse partition and nothing else (its
    inputs placeholders, its outputs the partition's results or inputs):
    (the partition's call, the placeholder index of each of its inputs or
    None when they are all of them in order, for each graph output the
    partition's result k >= 0 or the input -1 - i, the output container's
    type). Else None: the graph runs through the fused GraphModule."""
    placeholders, part, getitems, out = [], None, {}, None
    for n in fused.graph.nodes:
        if n.op == "placeholder":
            placeholders.append(n)
        elif n.op == "call_module" and n.target in parts and part is None:
            part = n
        elif (n.op == "call_function" and getattr(n.target, "__name__", "") == "getitem"
              and part is not None
              and len(n.args) == 2 and n.args[0] is part and isinstance(n.args[1], int)):
            getitems[n] = n.args[1]
        elif n.op == "output":
            out = n.args[0]
        else:
            return None
    if part is None or part.kwargs or not isinstance(out, (tuple, list)):
        return None
    where = {p: i for i, p in enumerate(placeholders)}
    if not all(isinstance(a, torch.fx.Node) and a in where for a in part.args):
        return None
    order = [where[a] for a in part.args]
    module = parts[part.target]
    picks = []
    for o in out:
        if o is part and module.single:
            picks.append(0)
        elif o in getitems and not module.single:
            picks.append(getitems[o])
        elif o in where:
            picks.append(-1 - where[o])
        else:
            return None
    if order == list(range(len(placeholders))):
        order = None
    return module.call, order, picks, tuple if isinstance(out, tuple) else list


def _publish(state):
    lines = [f"kfuse: {len(state['parts'])} partition(s) compiled by kfuse, "
             f"{len(state['fallback'])} op kind(s) left to PyTorch; translated in "
             f"{state['translate_s']:.3f} s, compiled in "
             f"{sum(p.compile_s for _, p in state['parts']):.3f} s"
             + (f" on a thread from translation on (the first call waited "
                f"{sum(p.wait_s for _, p in state['parts']):.3f} s for it)"
                if state["thread"] is not None else "")]
    if state.get("graph_cache"):
        lines.append(f"  graph cache: {state['graph_cache']}")
    warmed = [p for _, p in state["parts"] if p.warmed is not None]
    if warmed:
        lines.append(f"  first run warmed on the thread: "
                     f"{'yes' if all(p.warmed for p in warmed) else 'failed'} in "
                     f"{sum(p.warm_s for p in warmed):.3f} s")
    for op, why in sorted(state["fallback"].items()):
        lines.append(f"  in PyTorch: {op}: {why}")
    for name, part in state["parts"]:
        lines.append(f"-- {name}")
        lines.append(part.report())
    text = "\n".join(lines)
    with _report_lock:
        _last_report[0] = text
    if os.environ.get("KFUSE_REPORT") == "1":
        print(text, file=sys.stderr)


# ---------------------------------------------------------------------------
# The graph cache: Dynamo's graph -> the translated kfuse graph, on disk
# ---------------------------------------------------------------------------

_GRAPH_CACHE_FORMAT = 1
GRAPH_CACHE_FOLDER = _core.GRAPH_CACHE_FOLDER  # in kfuse's cache directory
# where a Dynamo graph's call_function targets may come from for its code to
# name everything it runs (a user's own function could change under the same name)
_PURE_MODULES = ("torch", "_operator", "operator", "builtins", "math")
# options and flags that change neither the translation nor the program: not in the key
_KEYLESS_OPTIONS = ("background_compile", "graph_cache", "cache_dir", "dump_dir", "num_threads",
                    "warm_first_run")
_KEYLESS_FLAGS = {"cache_read_only", "cache_fail_on_miss"}


@functools.lru_cache(maxsize=None)
def _package_identity():
    """What the translation is made of: libkfuse's version and file, this
    package's translating sources, torch's version."""
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for f in ("torch_backend.py", "_core.py", "_capi.py"):
        with open(os.path.join(here, f), "rb") as fh:
            h.update(fh.read())
    lib = _core._L()
    path = getattr(lib, "_name", None) or ""
    try:
        st = os.stat(path)
        libid = [path, st.st_size, st.st_mtime_ns]
    except OSError:
        libid = [path]
    return [_GRAPH_CACHE_FORMAT, h.hexdigest(), _core.version(), libid, torch.__version__]


def _flags(options):
    flags = options.get("flags", ())
    return {flags} if isinstance(flags, str) else set(flags)


def _graph_cache_dir(options):
    """The graph cache's folder (beside the kernels, in kfuse's cache
    directory), or None where the options keep it off."""
    if not options.get("graph_cache", True) or "no_cache" in _flags(options):
        return None
    base = options.get("cache_dir")
    if not base:  # the library's default (kf_cache_default_dir)
        if os.environ.get("XDG_CACHE_HOME"):
            base = os.path.join(os.environ["XDG_CACHE_HOME"], "kfuse")
        elif os.environ.get("HOME"):
            base = os.path.join(os.environ["HOME"], ".cache", "kfuse")
        else:
            return None
    return os.path.join(str(base), GRAPH_CACHE_FOLDER)


def _op_namespace(op):
    ns = getattr(op, "namespace", None)
    if ns is None:
        ns = str(getattr(op, "_qualified_op_name", "")).split("::")[0] or None
    return ns


def _graph_key(gm, example_inputs, options):
    """The key of Dynamo's graph `gm` on these inputs (hex), or None when the
    graph cannot be keyed by what Dynamo hands the backend: a symbolic shape
    or an input other than a plain strided tensor, parameters or constants
    held by the module (their values are not in its code), a submodule call,
    or a function from outside torch (its body is not in the code)."""
    if next(gm.parameters(), None) is not None or next(gm.buffers(), None) is not None:
        return None
    n_in = 0
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            n_in += 1
        elif n.op == "call_function":
            mod = getattr(n.target, "__module__", None) or ""
            if mod.split(".")[0] not in _PURE_MODULES:
                return None
            # an operator of a library's own namespace (torch.library): its body is not torch's
            if isinstance(n.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)) and (
                    _op_namespace(n.target) not in ("aten", "prims")):
                return None
        elif n.op not in ("call_method", "output"):
            return None
    if n_in != len(example_inputs):
        return None
    ins = []
    for t in example_inputs:
        if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.layout != torch.strided:
            return None
        try:
            ins.append([[int(d) for d in t.shape], [int(d) for d in t.stride()], str(t.dtype),
                        str(t.device), bool(t.requires_grad)])
        except (TypeError, ValueError):
            return None
    modes = {"grad": torch.is_grad_enabled(),
             "deterministic": torch.are_deterministic_algorithms_enabled()}
    for dev in ("cpu", "cuda"):
        try:
            modes["autocast_" + dev] = [torch.is_autocast_enabled(dev),
                                        str(torch.get_autocast_dtype(dev))]
        except (AttributeError, TypeError, RuntimeError):
            modes["autocast_" + dev] = None
    # the options, less those that only say where and how the caches are used
    opts = {k: v for k, v in options.items() if k not in _KEYLESS_OPTIONS}
    flags = sorted(_flags(options) - _KEYLESS_FLAGS)
    opts.pop("flags", None)
    if flags:
        opts["flags"] = flags
    material = [_package_identity(), gm.code, ins, modes, sorted(opts.items(), key=str)]
    return hashlib.sha256(json.dumps(material, default=str).encode()).hexdigest()


def _aot_plain(example_inputs, aten_inputs, record):
    """Whether the ATen graph AOTAutograd just handed the backend takes
    Dynamo's inputs as they are, in order, and returns fresh outputs, so that
    calling the kfuse program on Dynamo's inputs does all that AOTAutograd's
    wrappers would: an inference graph, no input mutated, no output an alias
    (its fw_metadata, set for the compiler), one placeholder per input."""
    try:
        from torch._guards import TracingContext
        from torch._functorch._aot_autograd.schemas import OutputType
    except ImportError:
        return "AOTAutograd's metadata is not where this torch keeps it"
    tc = TracingContext.try_get()
    meta = getattr(tc, "fw_metadata", None) if tc is not None else None
    if meta is None:
        return "no AOTAutograd metadata"
    if getattr(meta, "is_train", False) or getattr(meta, "traced_tangents", None):
        return "a training graph"
    if any(i.mutates_data or i.mutates_metadata for i in meta.input_info):
        return "an input is mutated"
    if getattr(meta, "num_intermediate_bases", 0) or getattr(meta, "tokens", None):
        return "aliased outputs or effect tokens"
    if any(o.output_type != OutputType.non_alias for o in meta.output_info):
        return "an output aliases an input or another output"
    if (record["n_inputs"] != len(example_inputs) or len(meta.input_info) != len(example_inputs)
            or len(aten_inputs) != len(example_inputs)):
        return "AOTAutograd changed the inputs"
    for a, d in zip(aten_inputs, example_inputs):
        if (not isinstance(a, torch.Tensor) or a.dtype != d.dtype or a.shape != d.shape
                or a.stride() != d.stride()):
            return "AOTAutograd changed the inputs"
    if len(meta.output_info) != len(record["picks"]):
        return "AOTAutograd changed the outputs"
    return None


def _graph_store(folder, key, record):
    """Writes the entry (atomically: a reader sees the whole file or none)."""
    part = record["part"]
    text = part.graph.text()
    # the entry must parse back into the same inputs and outputs
    back = _core.Graph(part.graph.ctx, text=text)
    if ([t.name for t in back.inputs] != part.input_names
            or list(back.outputs) != part.output_names):
        return "its kfuse graph does not read back as written"
    entry = {"format": _GRAPH_CACHE_FORMAT, "key": key, "graph": text,
             "inputs": part.input_names, "outputs": part.output_names, "single": part.single,
             "order": record["order"], "picks": record["picks"],
             "container": "tuple" if record["container"] is tuple else "list"}
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            json.dump(entry, f)
        os.replace(tmp, os.path.join(folder, key + ".json"))
    except OSError as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        return f"not written ({e})"
    return None


def _graph_load(folder, key, example_inputs, options):
    """The compiled callable of a stored entry, or None (no entry, or one
    that does not hold together: a miss)."""
    try:
        with open(os.path.join(folder, key + ".json")) as f:
            entry = json.load(f)
    except (OSError, ValueError):
        return None
    t0 = time.perf_counter()
    try:
        if entry.get("format") != _GRAPH_CACHE_FORMAT or entry.get("key") != key:
            return None
        ctx = _core.Context("cpu")
        graph = _core.Graph(ctx, text=entry["graph"])
        names = [t.name for t in graph.inputs]
        if names != entry["inputs"] or list(graph.outputs) != entry["outputs"]:
            return None
        order, picks = entry["order"], entry["picks"]
        n = len(example_inputs)
        if (order is not None and (len(order) != len(names) or
                                   any(not 0 <= i < n for i in order))) or (
                order is None and len(names) != n) or any(
                    not -n <= k < len(entry["outputs"]) for k in picks):
            return None
        hint = next((t.device for t in example_inputs), None)
        part = _KfusePartition(graph, names, entry["outputs"], entry["single"], options,
                               _Contexts(options), hint)
    except (_core.KfuseError, KeyError, TypeError, ValueError):
        return None
    state = {"parts": [("fused_0", part)], "fallback": {}, "reported": False,
             "translate_s": time.perf_counter() - t0, "thread": None,
             "graph_cache": "hit (Dynamo's graph: AOTAutograd and the translation skipped)"}
    _start_background(state, options)
    _schedule_warm(state, part, example_inputs, order, options)
    state["warm_ready"].set()
    container = tuple if entry["container"] == "tuple" else list
    return _run_direct(state, part.call, order, picks, container)


def make_backend(**options):
    """A backend with kfuse options: torch.compile(m, backend=make_backend(target="cpu",
    cache_dir=..., gemm=..., flags=...))."""
    return lambda gm, example_inputs: kfuse_backend(gm, example_inputs, options)


def kfuse_backend(gm, example_inputs, options=None, mode=None):
    """The torch.compile backend (registered as "kfuse"): torch.compile(m,
    backend="kfuse", options={"target": "cpu", "cache_dir": ...})."""
    if mode not in (None, "default"):
        raise ValueError(f"kfuse backend: mode {mode!r} is not supported (only the default)")
    options = dict(options or {})
    unknown = set(options) - {"target", "device", "arch", "cache_dir", "flags", "gemm", "attention",
                              "dump_dir", "num_threads", "cpu_opt_level", "background_compile",
                              "tiered_compile", "choice_margin", "choice_load_bias",
                              "graph_cache", "warm_first_run"}
    if unknown:
        raise ValueError(f"kfuse backend: unknown option {sorted(unknown)[0]!r}")
    stream = _warm_stream(options, example_inputs)
    if stream is not None:
        _start_blas(stream)
    folder = _graph_cache_dir(options)
    key = _graph_key(gm, example_inputs, options) if folder else None
    if key is not None:
        hit = _graph_load(folder, key, example_inputs, options)
        if hit is not None:
            return hit
    from functorch.compile import make_boxed_func

    def fw(g, ex):
        record = {} if key is not None else None
        fn = _compile_fx(g, ex, options, record)
        if record:  # one kfuse partition: stored where AOTAutograd left the inputs as they are
            state = record["state"]
            try:
                plain = _aot_plain(example_inputs, ex, record)
                why = plain
                if why is None:
                    why = ("the cache is read-only" if "cache_read_only" in _flags(options)
                           else _graph_store(folder, key, record))
                state["graph_cache"] = "stored" if why is None else f"not stored: {why}"
                # Dynamo's inputs are the program's (in `order`) where AOTAutograd
                # left them as they are: the first run's warm-up can bind them
                if plain is None:
                    _schedule_warm(state, record["part"], example_inputs, record["order"],
                                   options)
            finally:
                state["warm_ready"].set()
        return make_boxed_func(fn)

    return aot_autograd(fw_compiler=fw, bw_compiler=lambda g, ex: make_boxed_func(g.forward))(
        gm, example_inputs)
