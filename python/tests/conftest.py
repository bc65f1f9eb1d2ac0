import os
import pathlib

import numpy as np
import pytest

import kfuse

ROOT = pathlib.Path(__file__).resolve().parents[2]

# A library other than the installed one (e.g. a build tree's) for development:
# pytest --kfuse-lib build/libkfuse.so
def pytest_addoption(parser):
    parser.addoption("--kfuse-lib", default=None, help="libkfuse.so to load")
    parser.addoption("--kfuse-device", default="cpu", choices=["cpu", "cuda"],
                     help="where test_torch_backend runs: cpu (f32, the CPU target) or cuda "
                          "(bf16, the CUDA target, device-resident runs)")


def pytest_configure(config):
    lib = config.getoption("--kfuse-lib")
    if lib:
        kfuse.load_library(lib)
        os.environ["KFUSE_LIBRARY"] = os.path.abspath(lib)  # for subprocesses
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(kfuse.__file__)))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [pkg_parent] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    os.environ["KFUSE_TEST_DEVICE"] = config.getoption("--kfuse-device")


@pytest.fixture
def rng():
    return np.random.default_rng(int.from_bytes(os.urandom(4), "little"))


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "cache"


@pytest.fixture
def examples():
    return ROOT / "examples"


def random_inputs(graph, rng):
    """Fresh random inputs for every graph input (floats ~ N(0,1), ints small)."""
    out = {}
    for t in graph.inputs:
        if t.dtype == "i32":
            out[t.name] = rng.integers(-8, 8, size=t.shape, dtype=np.int32)
        elif t.dtype == "bool":
            out[t.name] = rng.random(t.shape) < 0.5
        elif t.dtype == "bf16":
            from kfuse._arrays import _f32_to_bf16_bits
            bits = _f32_to_bf16_bits(rng.standard_normal(t.shape).astype(np.float32))
            out[t.name] = bits
        else:
            out[t.name] = rng.standard_normal(t.shape).astype(
                {"f32": np.float32, "f16": np.float16, "f64": np.float64}[t.dtype])
    return out
