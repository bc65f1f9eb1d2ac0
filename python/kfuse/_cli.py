"""The kfuse CLI installed with the package, for scripts that want to run it
(aot and the cache go through the C API: kfuse._aot)."""
import os
import shutil

from . import _capi
from ._core import KfuseError


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
