"""aot and cache through the kfuse CLI installed with the package (libkfuse
has no C call for them: `kfuse aot` and `kfuse cache` are the tools)."""
import os
import shutil
import subprocess
import tempfile

from . import _capi
from ._core import Graph, KfuseError


def cli_path():
    """The kfuse CLI: $KFUSE_CLI, else the one installed in the package, else
    the one beside the library $KFUSE_LIBRARY names (a build tree), else PATH."""
    cands = [os.environ.get("KFUSE_CLI"), os.path.join(_capi._HERE, "bin", "kfuse")]
    lib = os.environ.get("KFUSE_LIBRARY")
    if lib:
        cands.append(os.path.join(os.path.dirname(os.path.abspath(lib)), "kfuse"))
    cands.append(shutil.which("kfuse"))
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise KfuseError(10, "the kfuse CLI was not found (install the package with pip install "
                         "./python, or set KFUSE_CLI)")


def _run(args):
    r = subprocess.run([cli_path(), *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise KfuseError(10, f"kfuse {' '.join(args[:2])} exited {r.returncode}: "
                             f"{(r.stderr or r.stdout).strip()}")
    return r.stdout


def aot(graphs, cache_dir, arch=("sm_80", "sm_90a"), gemm=None, attention=None,
        no_cublaslt=False):
    """Fills the kernel cache at `cache_dir` ahead of time for `arch` (no GPU
    needed), as `kfuse aot` does: every generated kernel the CUDA recipes of
    `graphs` (Graphs, .kfg paths, or one of either) name, compiled by NVRTC.
    Returns the coverage text; raises KfuseError when a kernel was not stored."""
    if isinstance(graphs, (Graph, str, os.PathLike)):
        graphs = [graphs]
    arch = [arch] if isinstance(arch, str) else list(arch)
    with tempfile.TemporaryDirectory(prefix="kfuse-aot-") as tmp:
        files = []
        for i, g in enumerate(graphs):
            if isinstance(g, Graph):
                path = os.path.join(tmp, f"graph{i}.kfg")
                with open(path, "w") as f:
                    f.write(g.text())
                files.append(path)
            else:
                files.append(os.fspath(g))
        args = ["aot", "--arch", ",".join(arch)]
        if gemm:
            args += ["--gemm", gemm]
        if attention:
            args += ["--attention", attention]
        if no_cublaslt:
            args.append("--no-cublaslt")
        return _run(args + files + ["-o", os.fspath(cache_dir)])


def cache(action="ls", cache_dir=None):
    """`kfuse cache ls|verify|clear` on the cache at `cache_dir` (default: the
    CLI's: $KF_CACHE_DIR, $XDG_CACHE_HOME/kfuse, ~/.cache/kfuse). Returns its
    output; verify raises KfuseError when it found corrupt entries."""
    if action not in ("ls", "verify", "clear"):
        raise ValueError(f"kfuse: unknown cache action {action!r}; expected ls, verify or clear")
    return _run(["cache", action] + (["--dir", os.fspath(cache_dir)] if cache_dir else []))
