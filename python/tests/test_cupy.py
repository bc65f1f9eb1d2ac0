"""CuPy arrays in and out through DLPack (issue 17 item 1): device-resident runs
on the CUDA target with CuPy's memory and stream. Skipped where CuPy is not
installed (and where it has no CUDA device to run on)."""
import numpy as np
import pytest

import kfuse
from conftest import random_inputs

cp = pytest.importorskip("cupy")


@pytest.fixture(autouse=True)
def _need_a_device():
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as e:  # CuPy without a driver
        pytest.skip(f"cupy: no CUDA device ({e})")
    if n == 0:
        pytest.skip("cupy: no CUDA device")


SIBLINGS = """kfg 1
x = input(f32[37, 1031])
b = input(f32[1031])
c2 = const(f32[], 2)
a = mul(x, c2)
y = add(x, a)
xb = add(x, b)
z = tanh(xb)
w = relu(x)
output a
output y
output z
output w
"""


def poisoned_like(graph):
    """CuPy output arrays full of NaN (bf16: the bits of a NaN), so an output
    kfuse never wrote fails the check."""
    out = {}
    for n, t in graph.outputs.items():
        if t.dtype == "bf16":
            out[n] = cp.full(t.shape, 0x7FC0, dtype=cp.uint16)
        else:
            out[n] = cp.full(t.shape, np.nan, dtype={"f32": cp.float32, "f16": cp.float16,
                                                     "f64": cp.float64}[t.dtype])
    return out


def check_on_host(graph, out, ins):
    cp.cuda.get_current_stream().synchronize()
    verdict = graph.check({n: cp.asnumpy(v) for n, v in out.items()}, **ins)
    for n, v in verdict.items():
        assert v["passed"], (n, v)


@pytest.mark.parametrize("text", [SIBLINGS, "gpt2_block.kfg", "llama_block.kfg"])
def test_cupy_arrays_in_and_out_through_dlpack(text, examples, rng, cache):
    if text.endswith(".kfg"):
        text = (examples / text).read_text()
    g = kfuse.parse(text)
    prog = kfuse.compile(g, target="cuda", cache_dir=cache)
    ins = random_inputs(g, rng)
    dins = {n: cp.asarray(v) for n, v in ins.items()}
    out = poisoned_like(g)
    res = prog.run_with(dins, out=out)
    for n in out:
        assert res[n] is out[n]  # written in place, on the device
    check_on_host(g, res, ins)
    # allocated by kfuse's run from CuPy's allocator: CuPy arrays on the device
    res = prog.run(**dins)
    for n, v in res.items():
        assert isinstance(v, cp.ndarray) and v.device.id == 0, n
    check_on_host(g, res, ins)


def test_cupy_strided_host_and_foreign_dlpack_inputs_are_copied(rng, cache):
    g = kfuse.parse(SIBLINGS)
    prog = kfuse.compile(g, target="cuda", cache_dir=cache)
    ins = random_inputs(g, rng)
    xt = cp.asarray(np.ascontiguousarray(ins["x"].T)).T  # a transposed view: not contiguous
    assert not xt.flags.c_contiguous
    res = prog.run(x=xt, b=ins["b"])  # b from the host
    check_on_host(g, res, ins)


def test_cupy_wrong_dtype_or_shape_is_refused(rng, cache):
    g = kfuse.parse(SIBLINGS)
    prog = kfuse.compile(g, target="cuda", cache_dir=cache)
    ins = random_inputs(g, rng)
    with pytest.raises(TypeError):
        prog.run(x=cp.asarray(ins["x"].astype(np.float64)), b=cp.asarray(ins["b"]))
    with pytest.raises(ValueError):
        prog.run(x=cp.asarray(ins["x"][:5]), b=cp.asarray(ins["b"]))
    with pytest.raises(TypeError):
        prog.run_with({n: cp.asarray(v) for n, v in ins.items()},
                      out={"a": cp.empty((37, 1031), dtype=cp.float64)})
