"""aot and the kernel cache through the C API (kf_aot, kf_cache_list_entries,
kf_cache_verify_entries, kf_cache_clear_entries): no CLI, no subprocess."""
import ctypes
import os

from . import _capi
from ._core import GRAPH_CACHE_FOLDER, Context, Graph, KfuseError


def _need(lib, name):
    if not hasattr(lib, name):
        raise KfuseError(9, f"this libkfuse has no {name} (a version older than the package)")
    return getattr(lib, name)


def aot(graphs, cache_dir, arch=("sm_80", "sm_90a"), gemm=None, attention=None,
        no_cublaslt=False, flags=()):
    """Fills the kernel cache at `cache_dir` ahead of time for `arch` (no GPU
    needed), as `kfuse aot` does, through kf_aot: every generated kernel the
    CUDA recipes of `graphs` (Graphs, .kfg paths, or one of either) name for a
    context with these options, compiled by NVRTC. Returns the coverage text,
    one line per graph; raises KfuseError (the C status and message) when a
    graph does not read or plan, or a kernel was not stored."""
    if isinstance(graphs, (Graph, str, os.PathLike)):
        graphs = [graphs]
    arch = [arch] if isinstance(arch, str) else list(arch)
    flags = [flags] if isinstance(flags, str) else list(flags)
    if no_cublaslt:
        flags.append("no_cublaslt")
    ctx = Context("cpu", cache_dir=cache_dir, flags=flags, gemm=gemm or "auto",
                  attention=attention or "auto")
    fn = _need(ctx._lib, "kf_aot")
    archs = (ctypes.c_char_p * max(len(arch), 1))(*[a.encode() for a in arch])
    lines = []
    for g in graphs:
        name = "graph"
        if not isinstance(g, Graph):
            name = os.fspath(g)
            try:
                with open(name) as f:
                    g = ctx.parse(f.read())
            except OSError as e:
                raise KfuseError(10, f"kfuse.aot: {name}: {e.strerror}") from e
        s = _capi.kf_aot_summary()
        st = fn(ctx._h, g._h, archs, len(arch), ctypes.byref(s))
        if st:
            raise KfuseError(st, f"kfuse.aot: {name}: {g._error()} ({s.failed} of {s.kernels} "
                                 f"kernels not in the cache)")
        lines.append(f"{name:<40} {','.join(arch):<14} {s.kernels:4d} kernels  {s.cached:4d} "
                     f"cached  {s.compiled:4d} compiled  ({s.groups} groups; {s.library_steps} "
                     f"cuBLASLt steps need no kernel)")
    return "\n".join(lines) + "\n"


def cache(action="ls", cache_dir=None):
    """Lists ("ls"), verifies ("verify") or clears ("clear") the kernel cache at
    `cache_dir` (default: $KF_CACHE_DIR, else the library's: $XDG_CACHE_HOME/kfuse,
    ~/.cache/kfuse) through the C API; returns the text `kfuse cache` prints.
    verify raises KfuseError when it found (and removed) corrupt entries."""
    if action not in ("ls", "verify", "clear"):
        raise ValueError(f"kfuse: unknown cache action {action!r}; expected ls, verify or clear")
    ctx = Context("cpu", cache_dir=cache_dir or os.environ.get("KF_CACHE_DIR") or None)
    lib = ctx._lib
    s = _capi.kf_cache_summary()
    if action == "clear":
        st = _need(lib, "kf_cache_clear_entries")(ctx._h, ctypes.byref(s))
        text = f"removed {s.removed} entries from {s.dir.decode()}\n" if not st else ""
        if not st:  # and the torch backend's graph cache beside the kernels
            graphs = os.path.join(s.dir.decode(), GRAPH_CACHE_FOLDER)
            n = 0
            for name in (os.listdir(graphs) if os.path.isdir(graphs) else []):
                if name.endswith(".json"):
                    try:
                        os.unlink(os.path.join(graphs, name))
                        n += 1
                    except OSError:
                        pass
            if n:
                text += f"removed {n} torch.compile graph entries from {graphs}\n"
    else:
        fn = _need(lib, "kf_cache_list_entries" if action == "ls" else "kf_cache_verify_entries")
        st, text = _capi.capture(lambda f: fn(ctx._h, f, ctypes.byref(s)))
    if st:
        raise KfuseError(st, f"kfuse.cache {action}: {s.error.decode()}")
    if action == "verify" and s.corrupt:
        raise KfuseError(10, f"kfuse.cache verify: {s.corrupt} corrupt entries (removed):\n{text}")
    return text
