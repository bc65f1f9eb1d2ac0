"""kfuse: a JIT kernel compiler and fusion engine (Python bindings over libkfuse).

    import kfuse, numpy as np
    g = kfuse.parse(open("examples/mlp.kfg").read())
    prog = kfuse.compile(g, target="cpu")
    out = prog.run(x=np.random.randn(64, 256).astype(np.float32), ...)
    print(prog.report())

The builder mirrors the C names without `kf_`: `g.input(...)`, `g.matmul(a, b)`,
`g.gelu_tanh(x)`, `g.output("y", t)`. Every C error becomes a KfuseError that
carries the C status and message.
"""
from ._core import (DTYPES, Context, Graph, KfuseError, Program, Tensor, compile, load_library,
                    parse, version)

from ._aot import aot, cache
from ._cli import cli_path

__all__ = ["Context", "Graph", "KfuseError", "Program", "Tensor", "compile", "load_library",
           "parse", "version", "DTYPES", "aot", "cache", "cli_path"]
