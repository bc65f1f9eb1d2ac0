"""The Python package on the CPU target: parse/print, the builder, compile,
run, report, the reference evaluator and check, and errors as KfuseError."""
import json
import re

import numpy as np
import pytest

import kfuse
from conftest import ROOT, random_inputs


def run_poisoned(prog, graph, ins):
    """Runs into NaN-filled output arrays, so an output kfuse never wrote fails."""
    out = {}
    for n, t in graph.outputs.items():
        a = np.empty(t.shape, dtype=np.float32 if t.dtype == "f32" else np.uint16
                     if t.dtype == "bf16" else {"f16": np.float16, "f64": np.float64,
                                                "i32": np.int32, "bool": np.bool_}[t.dtype])
        if t.dtype == "bf16":
            a.fill(0x7FC0)
        elif a.dtype.kind == "f":
            a.fill(np.nan)
        else:
            a.fill(-1 if a.dtype.kind == "i" else 1)
        out[n] = a
    res = prog.run_with(ins, out=out)
    for n in out:
        assert res[n] is out[n]
    return res


def test_version_matches_header():
    header = (ROOT / "include" / "kfuse.h").read_text()
    parts = [re.search(rf"#define KF_VERSION_{k} (\d+)", header).group(1)
             for k in ("MAJOR", "MINOR", "PATCH")]
    assert kfuse.version() == ".".join(parts)


@pytest.mark.parametrize("name", ["mlp.kfg", "block.kfg", "gpt2_block.kfg", "llama_block.kfg"])
def test_examples_run_and_pass_the_check_on_the_cpu(name, examples, rng, cache):
    g = kfuse.parse((examples / name).read_text())
    prog = kfuse.compile(g, target="cpu", cache_dir=cache)
    ins = random_inputs(g, rng)
    out = run_poisoned(prog, g, ins)
    assert set(out) == set(g.outputs)
    for n, t in g.outputs.items():
        assert out[n].shape == t.shape
    verdict = g.check(out, **ins)
    for n, v in verdict.items():
        assert v["passed"], (name, n, v)
        assert v["err"] <= v["bound"]


def test_a_wrong_output_fails_the_check(examples, rng, cache):
    g = kfuse.parse((examples / "mlp.kfg").read_text())
    ins = random_inputs(g, rng)
    out = kfuse.compile(g, target="cpu", cache_dir=cache).run(**ins)
    out["y"] = out["y"] * np.float32(1.01)
    assert not g.check(out, **ins)["y"]["passed"]
    out["y"][0, 0] = np.nan
    assert not g.check(out, **ins)["y"]["passed"]


def test_print_parse_round_trip(examples):
    text = (examples / "llama_block.kfg").read_text()
    once = kfuse.parse(text).text()
    assert kfuse.parse(once).text() == once


def test_builder_mirrors_the_c_names(rng, cache):
    g = kfuse.Graph()
    x = g.input("x", "f32", (16, 32))
    w = g.input("w", "f32", (32, 48))
    b = g.input("b", "f32", (48,))
    y = g.gelu_tanh(g.add(g.matmul(x, w), b))
    z = g.reduce_max(g.softmax(y * 0.5 + 1.0, axis=-1), axis=-1, keepdim=True)
    g.output("y", y)
    g.output("z", z)
    assert y.shape == (16, 48) and z.shape == (16, 1) and y.dtype == "f32"
    g.verify()
    assert "gelu_tanh" in g.text()
    ins = {"x": rng.standard_normal((16, 32), dtype=np.float32),
           "w": rng.standard_normal((32, 48), dtype=np.float32),
           "b": rng.standard_normal(48, dtype=np.float32)}
    prog = kfuse.compile(g, target="cpu", cache_dir=cache)
    out = run_poisoned(prog, g, ins)
    ref = g.eval(**ins)
    # an independent NumPy model of the same math
    h = ins["x"].astype(np.float64) @ ins["w"] + ins["b"]
    gt = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    np.testing.assert_allclose(out["y"], gt, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ref["y"], gt, rtol=1e-4, atol=1e-4)
    assert all(v["passed"] for v in g.check(out, **ins).values())


def test_constants_iota_and_bf16_bits(rng, cache):
    g = kfuse.Graph()
    x = g.input("x", "bf16", (4, 8))
    c = g.constant(np.arange(8, dtype=np.float32), dtype="bf16")
    i = g.cast(g.iota("i32", (4, 8), axis=0), "bf16")
    g.output("y", x + c + i)
    ins = random_inputs(g, rng)
    out = run_poisoned(kfuse.compile(g, target="cpu", cache_dir=cache), g, ins)
    assert g.check(out, **ins)["y"]["passed"]


def test_report_text_and_json(examples, cache):
    g = kfuse.parse((examples / "block.kfg").read_text())
    prog = kfuse.compile(g, target="cpu", cache_dir=cache)
    text = prog.report()
    assert "kernels for" in text and "unfused edges" in text
    rep = prog.report(format="json")
    assert rep["schema"] == "kfuse.report/2"
    assert len(rep["groups"]) == prog.kernel_count
    json.dumps(rep)
    with pytest.raises(ValueError, match="report format"):
        prog.report(format="xml")


def test_builder_errors_carry_status_and_message():
    g = kfuse.Graph()
    a = g.input("a", "f32", (4, 5))
    b = g.input("b", "f32", (6, 7))
    with pytest.raises(kfuse.KfuseError) as e:
        g.matmul(a, b)
    assert e.value.status == "SHAPE"
    assert "matmul" in e.value.message
    # sticky, as in C: the next call reports the first error
    with pytest.raises(kfuse.KfuseError) as e2:
        g.relu(a)
    assert e2.value.message == e.value.message


def test_parse_errors_name_line_and_column():
    with pytest.raises(kfuse.KfuseError) as e:
        kfuse.parse("x = input f32[4]\ny = frobnicate(x)\n")
    assert e.value.status == "PARSE"
    assert re.match(r"\d+:\d+: ", e.value.message)


def test_bad_bindings_are_refused_with_the_name(examples, rng, cache):
    g = kfuse.parse((examples / "mlp.kfg").read_text())
    prog = kfuse.compile(g, target="cpu", cache_dir=cache)
    ins = random_inputs(g, rng)
    with pytest.raises(kfuse.KfuseError, match="'nope'"):
        prog.run(nope=ins["x"], **ins)
    missing = dict(ins)
    del missing["w"]
    with pytest.raises(kfuse.KfuseError, match="'w' is not bound"):
        prog.run(**missing)
    with pytest.raises(ValueError, match="'x' has shape"):
        prog.run(**{**ins, "x": ins["x"][:, :3]})
    with pytest.raises(TypeError, match="'x' is f32"):
        prog.run(**{**ins, "x": ins["x"].astype(np.float64)})


def test_non_contiguous_inputs_are_copied(examples, rng, cache):
    g = kfuse.parse((examples / "mlp.kfg").read_text())
    prog = kfuse.compile(g, target="cpu", cache_dir=cache)
    ins = random_inputs(g, rng)
    wt = np.asfortranarray(ins["w"])
    assert not wt.flags.c_contiguous
    a = prog.run(**ins)["y"]
    b = prog.run(**{**ins, "w": wt})["y"]
    np.testing.assert_array_equal(a, b)


def test_options_are_checked():
    with pytest.raises(ValueError, match="target"):
        kfuse.Context("tpu")
    with pytest.raises(ValueError, match="flag"):
        kfuse.Context("cpu", flags={"fast"})
    with pytest.raises(ValueError, match="gemm"):
        kfuse.Context("cpu", gemm="magic")
    with pytest.raises(ValueError, match="attention"):
        kfuse.Context("cpu", attention="magic")
    with pytest.raises(kfuse.KfuseError) as e:
        kfuse.Context("cpu", arch="sm_9000x")
    assert e.value.status == "INVALID_ARGUMENT"
    # the measured choice's margin and load bias: from 0 to below 1
    for bad in (-0.01, 1.0, float("nan")):
        for key in ("choice_margin", "choice_load_bias"):
            with pytest.raises(kfuse.KfuseError, match="choice_margin") as e:
                kfuse.Context("cpu", **{key: bad})
            assert e.value.status == "INVALID_ARGUMENT"
    kfuse.Context("cpu", choice_margin=0.05, choice_load_bias=0.025)


def test_the_cache_is_filled_and_reused(examples, rng, cache):
    g = kfuse.parse((examples / "mlp.kfg").read_text())
    kfuse.compile(g, target="cpu", cache_dir=cache)
    entries = [p for p in cache.rglob("*") if p.is_file()]
    assert entries, "compiling with a cache_dir stores the compiled module"
    # read-only + fail-on-miss: served from the cache, no compile
    prog = kfuse.compile(g, target="cpu", cache_dir=cache,
                         flags={"cache_read_only", "cache_fail_on_miss"})
    ins = random_inputs(g, rng)
    assert g.check(prog.run(**ins), **ins)["y"]["passed"]
    other = kfuse.parse((examples / "block.kfg").read_text())
    with pytest.raises(kfuse.KfuseError) as e:
        kfuse.compile(other, target="cpu", cache_dir=cache,
                      flags={"cache_read_only", "cache_fail_on_miss"})
    assert e.value.status == "NOT_FOUND"


def test_capi_mirror_matches_the_header():
    """python/kfuse/_capi.py declares kf_options, kf_binding and
    kf_check_result by hand: their fields must follow kfuse.h's order."""
    from kfuse import _capi
    header = (ROOT / "include" / "kfuse.h").read_text()
    for struct, cls in (("kf_options", _capi.kf_options), ("kf_binding", _capi.kf_binding),
                        ("kf_check_result", _capi.kf_check_result),
                        ("kf_allocator", _capi.kf_allocator)):
        body = re.search(rf"typedef struct {struct} \{{(.*?)\}} {struct};", header, re.S).group(1)
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        decl = []
        for line in body.split(";"):
            m = re.search(r"\(\*(\w+)\)", line) or re.search(r"(\w+)\s*$", line.strip())
            if m:
                decl.append(m.group(1))
        mirrored = [f[0].rstrip("_") for f in cls._fields_]
        assert decl == mirrored, (struct, decl, mirrored)
    enum = re.search(r"typedef enum kf_status \{(.*?)\} kf_status;", header, re.S).group(1)
    statuses = re.findall(r"^\s*KF_(?:ERR_)?(\w+)", enum, re.M)
    assert statuses[-1] == "STATUS_COUNT"
    assert statuses[:-1] == _capi.STATUS_NAMES
    denum = re.search(r"typedef enum kf_dtype \{(.*?)\} kf_dtype;", header, re.S).group(1)
    dtypes = [d.lower() for d in re.findall(r"^\s*KF_DTYPE_(\w+)", denum, re.M)]
    assert dtypes[-1] == "count" and dtypes[:-1] == _capi.DTYPES
    for name in ("kf_program_run_device", "kf_program_workspace_size",
                 "kf_program_set_workspace"):
        assert (name in header) == hasattr(kfuse._core._L(), name), name
    flags = dict(re.findall(r"KF_FLAG_(\w+) = 1u << (\d+)", header))
    assert {k.upper(): str(v.bit_length() - 1) for k, v in _capi.FLAGS.items()} == flags


def test_run_with_refuses_bad_output_arrays(examples, rng, cache):
    g = kfuse.parse((examples / "mlp.kfg").read_text())
    prog = kfuse.compile(g, target="cpu", cache_dir=cache)
    ins = random_inputs(g, rng)
    with pytest.raises(ValueError, match="output 'y' has shape"):
        prog.run_with(ins, out={"y": np.empty((8, 255), np.float32)})
    with pytest.raises(TypeError, match="output 'y' is f32"):
        prog.run_with(ins, out={"y": np.empty((8, 256), np.float64)})
    with pytest.raises(ValueError, match="contiguous"):
        prog.run_with(ins, out={"y": np.empty((256, 8), np.float32).T})
    with pytest.raises(kfuse.KfuseError, match="no graph output named 'z'"):
        prog.run_with(ins, out={"z": np.empty((8, 256), np.float32)})


def test_aot_fills_a_cache_that_cache_ls_lists(examples, tmp_path):
    """kfuse.aot compiles the CUDA kernels of a graph for an arch with no GPU
    (NVRTC only) into the cache; kfuse.cache lists and verifies it."""
    cache_dir = tmp_path / "aot"
    g = kfuse.parse((examples / "mlp.kfg").read_text())
    text = kfuse.aot([g, examples / "block.kfg"], cache_dir, arch="sm_90a")
    assert "sm_90a" in text
    listing = kfuse.cache("ls", cache_dir)
    entries = [line for line in listing.splitlines() if re.match(r"^[0-9a-f]{16,}", line)]
    assert entries, listing
    kfuse.cache("verify", cache_dir)
    kfuse.cache("clear", cache_dir)
    assert not [line for line in kfuse.cache("ls", cache_dir).splitlines()
                if re.match(r"^[0-9a-f]{16,}", line)]
    with pytest.raises(kfuse.KfuseError, match="aot"):
        kfuse.aot(tmp_path / "missing.kfg", cache_dir, arch="sm_90a")
    with pytest.raises(kfuse.KfuseError, match="arch"):
        kfuse.aot(g, cache_dir, arch="sm80")
    with pytest.raises(ValueError, match="cache action"):
        kfuse.cache("shred", cache_dir)


def test_aot_and_cache_go_through_the_c_api(examples, tmp_path, monkeypatch):
    """No CLI: kf_aot fills, a second fill compiles nothing, verify reports and
    removes a garbled entry, a refill compiles only it."""
    monkeypatch.setenv("KFUSE_CLI", "/nonexistent/kfuse")  # would break a CLI path
    monkeypatch.setenv("PATH", "/nonexistent")
    cache_dir = tmp_path / "aot"
    g = kfuse.parse((examples / "mlp.kfg").read_text())
    counts = re.compile(r"(\d+) kernels\s+(\d+) cached\s+(\d+) compiled")
    first = counts.search(kfuse.aot(g, cache_dir, arch=["sm_80", "sm_90a"])).groups()
    n = int(first[0])
    assert n > 0 and first[1:] == ("0", str(n)), first
    again = counts.search(kfuse.aot(g, cache_dir, arch=["sm_80", "sm_90a"])).groups()
    assert again == (str(n), str(n), "0"), again
    files = [p for p in cache_dir.rglob("*") if p.is_file() and p.stat().st_size > 64
             and ".lock" not in p.name]
    assert files
    data = bytearray(files[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    files[0].write_bytes(bytes(data))
    with pytest.raises(kfuse.KfuseError, match="corrupt"):
        kfuse.cache("verify", cache_dir)
    kfuse.cache("verify", cache_dir)  # removed: clean now
    refill = counts.search(kfuse.aot(g, cache_dir, arch=["sm_80", "sm_90a"])).groups()
    assert refill == (str(n), str(n - 1), "1"), refill
