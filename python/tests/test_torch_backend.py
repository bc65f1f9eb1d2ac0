"""torch.compile(backend="kfuse") against eager PyTorch: small modules,
scaled_dot_product_attention in its forms, the transformers GPT-2 block and
LLaMA decoder layer (random weights, config only), fallback of ops kfuse lacks
(reported), shape changes, bad inputs, and the disk cache across processes.

By default on the CPU target in f32 (CI; scripts/test_python.sh installs torch
and transformers); with --kfuse-device cuda on the GPU in bf16, device-resident.
Each result is judged as kfuse.h's check judges outputs: its error against an
evaluation in f64 is at most twice eager PyTorch's own error at the test's
dtype, plus a small floor."""
import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
import transformers

import kfuse
from kfuse.torch_backend import kfuse_backend, last_report, make_backend


DEV = torch.device(os.environ.get("KFUSE_TEST_DEVICE", "cpu"))
DT = torch.float32 if DEV.type == "cpu" else torch.bfloat16
FLOOR = 1e-5 if DT == torch.float32 else 1e-3


def rel(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    assert not torch.isnan(a).any()
    return ((a - b).norm() / b.norm()).item()


def compiled(m, cache, **opts):
    torch._dynamo.reset()
    return torch.compile(m, backend=make_backend(cache_dir=str(cache), **opts))


def lowp(x):
    return x.to(DEV, DT) if isinstance(x, torch.Tensor) and x.is_floating_point() else (
        x.to(DEV) if isinstance(x, torch.Tensor) else x)


def high(x):
    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def agrees(model, args, cache, kwargs=None, check_report=None):
    """Runs `model` (a module or function) eagerly in f64 on the CPU (the
    reference), eagerly at DT on DEV, and compiled by kfuse at DT on DEV; the
    kfuse result's error is at most 2x eager's plus FLOOR. Returns it."""
    kwargs = kwargs or {}
    is_mod = isinstance(model, torch.nn.Module)
    m64 = copy.deepcopy(model).double() if is_mod else model
    mlp = copy.deepcopy(model).to(DEV, DT) if is_mod else model
    a64 = [high(a) for a in args]
    k64 = {k: (tuple(high(t) for t in v) if isinstance(v, tuple) else high(v))
           for k, v in kwargs.items()}
    alp = [lowp(a) for a in args]
    klp = {k: (tuple(lowp(t) for t in v) if isinstance(v, tuple) else lowp(v))
           for k, v in kwargs.items()}
    with torch.no_grad():
        ref = _first(m64(*a64, **k64))
        eager = _first(mlp(*alp, **klp))
        out = _first(compiled(mlp, cache)(*alp, **klp))
    assert out.dtype == eager.dtype and out.shape == eager.shape
    assert out.device == eager.device
    e_k, e_e = rel(out, ref), rel(eager, ref)
    assert e_k <= 2 * e_e + FLOOR, (e_k, e_e)
    return out


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    yield
    torch._dynamo.reset()


class MLP(torch.nn.Module):
    def __init__(self, d=64, h=128):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.l1 = torch.nn.Linear(d, h)
        self.l2 = torch.nn.Linear(h, d)

    def forward(self, x):
        return self.l2(F.gelu(self.l1(self.ln(x)), approximate="tanh")) + x


def test_backend_is_registered_by_name(cache):
    """The name comes from the installed package's entry point
    (pyproject.toml); a checkout's python/ on the path, as on the GPU
    machine, has none, and that is the only case skipped."""
    from importlib.metadata import entry_points

    if not any(e.name == "kfuse" for e in entry_points(group="torch_dynamo_backends")):
        pytest.skip("kfuse is not installed (pip install ./python): no entry point names it")
    assert "kfuse" in torch._dynamo.list_backends(exclude_tags=())
    m = MLP().eval().to(DEV, DT)
    x = torch.randn(4, 16, 64, device=DEV, dtype=DT)
    with torch.no_grad():
        y = torch.compile(m, backend="kfuse", options={"cache_dir": str(cache)})(x)
        assert rel(y, m(x)) < (1e-5 if DT == torch.float32 else 2e-2)


def test_mlp_runs_in_one_kfuse_partition(cache):
    agrees(MLP().eval(), [torch.randn(4, 16, 64)], cache)
    rep = last_report()
    assert rep.startswith("kfuse: 1 partition(s) compiled by kfuse, 0 op kind(s) left to PyTorch")
    # ATen's view(mm(view(x)), ...) around each Linear folds into batched GEMMs whose
    # epilogues take the bias, the activation and the residual: two kernels in all
    assert "\n2 kernels" in rep, rep
    assert "gemm_layer_norm_bias_gelu_tanh" in rep, rep


def test_calls_return_fresh_outputs_that_later_calls_leave_alone(cache):
    """Each call of a compiled graph returns new tensors: results kept from
    earlier calls are neither the same memory nor overwritten by later calls
    (each still equals eager's result for its own input), across the calls
    the per-call closure takes."""
    m = MLP().eval().to(DEV, DT)
    tol = 1e-5 if DT == torch.float32 else 2e-2
    with torch.no_grad():
        f = compiled(m, cache)
        xs = [torch.randn(4, 16, 64, device=DEV, dtype=DT) for _ in range(4)]
        ys = [f(x) for x in xs]
        assert len({y.data_ptr() for y in ys}) == len(ys)
        for x, y in zip(xs, ys):
            assert rel(y, m(x)) < tol


def test_background_compile_overlaps_dynamo_and_a_failure_reaches_the_first_call(cache):
    """By default each partition compiles on a thread from its translation on
    (the report says so); background_compile=False compiles at the first call.
    Both agree with eager; a compile that fails on the thread is compiled again
    by the first call, which raises the error in the caller."""
    m = MLP().eval().to(DEV, DT)
    x = torch.randn(4, 16, 64, device=DEV, dtype=DT)
    tol = 1e-5 if DT == torch.float32 else 2e-2
    with torch.no_grad():
        want = m(x)
        for background in (True, False):
            y = compiled(m, cache, background_compile=background)(x)
            assert rel(y, want) < tol
            rep = last_report()
            assert rep.startswith("kfuse: 1 partition(s) compiled by kfuse"), rep
            assert ("on a thread from translation on" in rep.splitlines()[0]) == background, rep
        # num_threads < 0: kf_ctx_create refuses it, on the thread and then in the call
        with pytest.raises(kfuse.KfuseError, match="refused the options"):
            compiled(m, cache, num_threads=-1)(x)


@pytest.mark.parametrize("form", ["causal", "bool_mask", "float_mask", "gqa", "plain"])
def test_sdpa_becomes_one_attention_group(form, cache):
    B, H, L, D = 2, 4, 24, 16
    Hk = 2 if form == "gqa" else H
    q = torch.randn(B, H, L, D)
    k = torch.randn(B, Hk, L, D)
    v = torch.randn(B, Hk, L, D)
    mask = None
    if form == "bool_mask":
        mask = torch.rand(L, L) < 0.7
        mask[:, 0] = True
    elif form == "float_mask":
        mask = torch.randn(B, 1, L, L)

    def f(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=form == "causal",
                                              enable_gqa=form == "gqa") * 2.0

    agrees(f, [q, k, v, mask], cache)
    rep = last_report()
    assert "0 op kind(s) left to PyTorch" in rep, rep
    assert "attention" in rep, rep


def _gpt2_block():
    cfg = transformers.GPT2Config(n_embd=64, n_head=4, n_layer=1, n_positions=128)
    cfg._attn_implementation = "sdpa"
    return transformers.models.gpt2.modeling_gpt2.GPT2Block(cfg, layer_idx=0).eval()


def _first(x):
    return x[0] if isinstance(x, tuple) else x


def test_transformers_gpt2_block(cache):
    agrees(_gpt2_block(), [torch.randn(2, 16, 64)], cache)
    assert "partition(s) compiled by kfuse" in last_report()


def test_transformers_llama_layer_with_fallbacks_reported(cache):
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                   num_key_value_heads=2, num_hidden_layers=1,
                                   max_position_embeddings=128)
    cfg._attn_implementation = "sdpa"
    layer = transformers.models.llama.modeling_llama.LlamaDecoderLayer(cfg, layer_idx=0).eval()
    rot = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding(cfg)
    x = torch.randn(2, 16, 64)
    with torch.no_grad():
        pe = rot(x, torch.arange(16)[None])
    agrees(layer, [x], cache, {"position_embeddings": pe, "attention_mask": None})
    rep = last_report()
    assert "partition(s) compiled by kfuse" in rep


class _Logits(torch.nn.Module):
    """A causal LM as input_ids -> logits (the output agrees() compares)."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, ids):
        return self.lm(ids, use_cache=False).logits


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_whole_small_models_with_embedding_and_lm_head(family, cache):
    """A whole 2-layer GPT-2 / LLaMA (token embedding, every layer, final norm,
    LM head) through the backend; the position arithmetic on i64 ids stays in
    PyTorch and is reported."""
    if family == "gpt2":
        cfg = transformers.GPT2Config(n_embd=64, n_head=4, n_layer=2, n_positions=64,
                                      vocab_size=256, bos_token_id=0, eos_token_id=0)
        lm = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128,
                                       num_attention_heads=4, num_key_value_heads=2,
                                       num_hidden_layers=2, max_position_embeddings=64,
                                       vocab_size=256, bos_token_id=0, eos_token_id=0)
        lm = transformers.LlamaForCausalLM(cfg)
    cfg._attn_implementation = "sdpa"
    lm.config._attn_implementation = "sdpa"
    ids = torch.randint(0, 256, (2, 16))
    out = agrees(_Logits(lm.eval()), [ids], cache)
    assert out.shape == (2, 16, 256)
    rep = last_report()
    assert "partition(s) compiled by kfuse" in rep, rep
    assert "gather" in rep, rep  # the embedding lookup is kfuse's


def test_an_unsupported_op_falls_back_and_is_reported(cache):
    def f(x, y):
        a = torch.relu(x) * 2.0
        b = torch.cumsum(a, dim=-1)  # kfuse has no scan
        return torch.tanh(b) + y

    agrees(f, [torch.randn(8, 32), torch.randn(8, 32)], cache)
    rep = last_report()
    assert "in PyTorch: aten.cumsum.default: no kfuse translation" in rep, rep
    assert "2 partition(s) compiled by kfuse" in rep, rep


def test_dtypes_kfuse_lacks_stay_in_pytorch(cache):
    def f(x):
        i = (x * 10).to(torch.int64)  # i64: not a kfuse dtype
        return (i * 3).to(torch.float32) + x

    x = torch.randn(16, 16, device=DEV, dtype=DT)
    with torch.no_grad():
        out = compiled(f, cache)(x)
    assert torch.equal(out, f(x))
    rep = last_report()
    assert "in PyTorch: aten.mul.Tensor: kfuse refused it" in rep, rep


def test_a_new_shape_recompiles(cache):
    m = MLP().eval()
    m64, mlp = copy.deepcopy(m).double(), m.to(DEV, DT)
    c = compiled(mlp, cache)
    with torch.no_grad():
        for shape in [(4, 16, 64), (3, 5, 64), (7, 64)]:
            x = torch.randn(*shape)
            ref = m64(x.double())
            assert rel(c(lowp(x)), ref) <= 2 * rel(mlp(lowp(x)), ref) + FLOOR, shape


def test_non_contiguous_inputs(cache):
    x = torch.randn(64, 16, 4).permute(2, 1, 0)
    assert not x.is_contiguous()
    agrees(MLP().eval(), [x], cache)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="unknown option 'speed'"):
        kfuse_backend(None, [], options={"speed": 1})
    with pytest.raises(ValueError, match="mode"):
        kfuse_backend(None, [], mode="max-autotune")


def test_a_new_process_is_served_from_the_disk_cache(cache, tmp_path):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_torch_backend import MLP
        from kfuse.torch_backend import make_backend
        torch.manual_seed(0)
        dev = torch.device({str(DEV)!r})
        m = MLP().eval().to(dev)
        x = torch.randn(4, 16, 64, device=dev)
        flags = sys.argv[1:]
        with torch.no_grad():
            y = torch.compile(m, backend=make_backend(cache_dir={str(cache)!r},
                                                      flags=flags))(x)
            err = ((y - m(x)).norm() / m(x).norm()).item()
        print(err)
        assert err < 1e-5
        from kfuse.torch_backend import last_report
        print([ln for ln in last_report().splitlines() if "graph cache" in ln])
    """))
    env = dict(os.environ)
    first = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr
    # the same graph in a new process, with misses made errors: every kernel from the cache
    again = subprocess.run([sys.executable, str(script), "cache_read_only", "cache_fail_on_miss"],
                           capture_output=True, text=True, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "graph cache: stored" in first.stdout, first.stdout
    # Dynamo's graph found in the graph cache: AOTAutograd and the translation skipped
    assert "graph cache: hit" in again.stdout, again.stdout
    # and a cache that lacks them fails (the check above can fail)
    other = tmp_path / "empty"
    script.write_text(script.read_text().replace(repr(str(cache)), repr(str(other))))
    miss = subprocess.run([sys.executable, str(script), "cache_read_only", "cache_fail_on_miss"],
                          capture_output=True, text=True, env=env)
    assert miss.returncode != 0


def test_cuda_attention_forms_are_taken_whatever_their_other_results():
    """On CUDA, SDPA reaches the backend as _scaled_dot_product_cudnn_attention
    or _efficient_attention, whose results after the first are ints, None or
    RNG state: only the first is computed, so the node is kfuse's (the H100
    run found these left to PyTorch as 'a non-tensor result')."""
    from kfuse.torch_backend import _Support
    aten = torch.ops.aten
    q = torch.randn(2, 4, 24, 16)
    for target, args, val in [
        (aten._scaled_dot_product_cudnn_attention.default, (None, False, 0.0, True, False),
         (q, torch.empty(0), None, None, 24, 24, torch.empty(0), torch.empty(0), None)),
        (aten._scaled_dot_product_efficient_attention.default, (None, False, 0.0, True),
         (q, torch.empty(0), torch.empty(0), torch.empty(0))),
    ]:
        g = torch.fx.Graph()
        ph = []
        for name in "qkv":
            p = g.placeholder(name)
            p.meta["val"] = q
            ph.append(p)
        n = g.call_function(target, (*ph, *args))
        n.meta["val"] = val
        first = g.call_function(__import__("operator").getitem, (n, 0))
        first.meta["val"] = q
        g.output(first)
        sup = _Support(kfuse.Context("cpu"))
        assert sup.is_node_supported({}, n), sup.reasons.get(n)
        assert sup.is_node_supported({}, first)


def test_run_device_list_binds_positionally_and_falls_back_on_odd_inputs():
    """Program.run_device_list, the backend's per-call path: inputs in graph
    order, outputs as a list. Contiguous tensors of the right dtype and shape
    on the program's kind of device bind straight into the program's kept
    binding arrays (CUDA: enqueued on PyTorch's stream; CPU: a host run); a
    non-contiguous input goes through run_with (copied), a wrong shape or
    dtype is refused by name. Every result judged against the reference
    evaluator."""
    g = kfuse.parse("kfg 1\nx = input(f32[8, 64])\nb = input(f32[64])\n"
                    "s = add(x, b)\ny = gelu(s)\nz = mul(y, x)\noutput z\noutput y\n")
    prog = kfuse.compile(g, target="cuda" if DEV.type == "cuda" else "cpu")

    def judged(x, b):
        z, y = prog.run_device_list([x, b])
        assert z.device.type == DEV.type and y.device.type == DEV.type and z.shape == (8, 64)
        res = g.check({"z": z.cpu(), "y": y.cpu()}, x=x.cpu().contiguous(), b=b.cpu())
        assert all(r["passed"] for r in res.values()), res
        return z, y

    kept = []
    for _ in range(3):  # the kept arrays are rebound on every call
        kept.append(judged(torch.randn(8, 64, device=DEV), torch.randn(64, device=DEV)))
    assert prog._fast is not None  # the fast path ran
    # fresh outputs every call, not one buffer handed out again
    assert len({z.data_ptr() for z, _ in kept}) == 3
    judged(torch.randn(64, 8, device=DEV).t(), torch.randn(64, device=DEV))
    with pytest.raises(ValueError, match="'x' has shape"):
        prog.run_device_list([torch.randn(4, 64, device=DEV), torch.randn(64, device=DEV)])
    with pytest.raises(TypeError, match="'b' is f32"):
        prog.run_device_list([torch.randn(8, 64, device=DEV),
                              torch.randn(64, device=DEV, dtype=torch.float64)])
    judged(torch.randn(8, 64, device=DEV), torch.randn(64, device=DEV))  # fast again


def test_the_per_call_guard_refuses_what_the_checks_refuse(monkeypatch):
    """Once inputs passed the per-input checks, the next calls' inputs are
    checked by one guard over them all: a call whose input differs in dtype,
    shape, strides or device from those is not taken by the guard but by the
    per-input checks again (and bound, copied or refused as they say). With
    no guard (a torch without TensorGuards), every call takes those checks.
    Every result judged against the reference evaluator."""
    import kfuse._core as core

    g = kfuse.parse("kfg 1\nx = input(f32[4, 1, 32])\nw = input(f32[32])\n"
                    "t = tanh(x)\ny = mul(t, w)\noutput y\n")
    prog = kfuse.compile(g, target="cuda" if DEV.type == "cuda" else "cpu")

    def judged(x, w):
        (y,) = prog.run_device_list([x, w])
        res = g.check({"y": y.cpu()}, x=x.cpu().contiguous(), w=w.cpu())
        assert all(r["passed"] for r in res.values()), res

    x, w = torch.randn(4, 1, 32, device=DEV), torch.randn(32, device=DEV)
    judged(x, w)
    guard = prog._fast.guard
    if guard is None:
        pytest.skip("this torch has no TensorGuards")
    assert guard.check(x, w)
    # another stride on the size-1 dim: the guard refuses it, the checks take it
    odd = torch.randn(4, 32, 1, device=DEV).transpose(1, 2)
    assert odd.shape == x.shape and odd.stride() != x.stride()
    assert not guard.check(odd, w)
    judged(odd, w)
    strided = torch.randn(4, 1, 64, device=DEV)[:, :, ::2]  # copied by run_with
    assert not prog._fast.guard.check(strided, w)
    judged(strided, w)
    assert not prog._fast.guard.check(x.double(), w) and not prog._fast.guard.check(x[:2], w)
    assert not prog._fast.guard.check(x, 3.0)
    with pytest.raises(TypeError):
        prog.run_device_list([x.double(), w])
    if DEV.type == "cuda":  # host tensors for a CUDA program: copied over by run_with
        assert not prog._fast.guard.check(x.cpu(), w.cpu())
        judged(x.cpu(), w.cpu())
    monkeypatch.setattr(core, "_tensor_guard", lambda args: None)
    prog2 = kfuse.compile(g, target="cuda" if DEV.type == "cuda" else "cpu")
    for _ in range(2):
        (y,) = prog2.run_device_list([x, w])
        assert prog2._fast is not None and prog2._fast.guard is None
        res = g.check({"y": y.cpu()}, x=x.cpu(), w=w.cpu())
        assert all(r["passed"] for r in res.values()), res


def test_the_caller_closure_binds_after_the_first_checked_call(monkeypatch):
    """Program.caller(), the backend's per-call function: the first call
    (and any call the guard refuses) takes run_device_list; once a call
    passed its checks, the next calls with inputs the guard accepts bind and
    run in the closure without it. Outputs are fresh tensors every call
    (never aliased between calls), and every result is judged against the
    reference evaluator, on both paths."""
    g = kfuse.parse("kfg 1\nx = input(f32[8, 64])\nb = input(f32[64])\n"
                    "s = add(x, b)\ny = gelu(s)\nz = mul(y, x)\noutput z\noutput y\n")
    prog = kfuse.compile(g, target="cuda" if DEV.type == "cuda" else "cpu")
    slow_calls = []
    orig = prog.run_device_list

    def counted(args):
        slow_calls.append(1)
        return orig(args)
    monkeypatch.setattr(prog, "run_device_list", counted)
    call = prog.caller()

    def judged(x, b):
        z, y = call([x, b])
        assert z.device.type == DEV.type and z.shape == (8, 64) and y.shape == (8, 64)
        res = g.check({"z": z.cpu(), "y": y.cpu()}, x=x.cpu().contiguous(), b=b.cpu())
        assert all(r["passed"] for r in res.values()), res
        return z, y

    kept = [judged(torch.randn(8, 64, device=DEV), torch.randn(64, device=DEV))]
    assert len(slow_calls) == 1  # the first call: the checks
    if prog._fast.guard is None:
        pytest.skip("this torch has no TensorGuards: every call takes the checks")
    for _ in range(3):
        kept.append(judged(torch.randn(8, 64, device=DEV), torch.randn(64, device=DEV)))
    assert len(slow_calls) == 1, "the closure took the calls the guard accepts"
    assert len({t.data_ptr() for pair in kept for t in pair}) == 2 * len(kept)
    # a non-contiguous input: refused by the guard, copied by run_with
    judged(torch.randn(64, 8, device=DEV).t(), torch.randn(64, device=DEV))
    assert len(slow_calls) == 2
    with pytest.raises(ValueError, match="'x' has shape"):
        call([torch.randn(4, 64, device=DEV), torch.randn(64, device=DEV)])
    with pytest.raises(TypeError, match="'b' is f32"):
        call([torch.randn(8, 64, device=DEV), torch.randn(64, device=DEV, dtype=torch.float64)])
    n = len(slow_calls)
    judged(torch.randn(8, 64, device=DEV), torch.randn(64, device=DEV))
    assert len(slow_calls) == n, "good inputs again: the closure"


class _TwoInputs(torch.nn.Module):
    """Outputs in another order than computed, an input among them, and
    inputs used in another order than given."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 32)

    def forward(self, a, b):
        h = torch.tanh(b) * 2.0
        return self.lin(a) + h, a, torch.sigmoid(h)


def test_a_graph_of_one_partition_is_called_directly(monkeypatch, cache):
    """A graph that is one kfuse partition and nothing else is called without
    the fused GraphModule around the partition: its inputs picked in the
    partition's order, its outputs (results or inputs) in the graph's. The
    results agree with eager's; a graph with an op left to PyTorch still
    runs through the GraphModule."""
    import kfuse.torch_backend as tb

    seen = []
    orig = tb._direct

    def spy(fused, parts):
        d = orig(fused, parts)
        seen.append(d)
        return d
    monkeypatch.setattr(tb, "_direct", spy)
    m = _TwoInputs().eval()
    a, b = torch.randn(4, 32), torch.randn(4, 32)
    m64 = copy.deepcopy(m).double()
    mlp = m.to(DEV, DT)
    with torch.no_grad():
        ref = m64(a.double(), b.double())
        eager = mlp(lowp(a), lowp(b))
        out = compiled(mlp, cache)(lowp(a), lowp(b))
    assert seen and seen[-1] is not None, "one partition: called directly"
    assert len(out) == 3
    for o, e, r in zip(out, eager, ref):
        assert o.shape == e.shape and o.dtype == e.dtype
        assert rel(o, r) <= 2 * rel(e, r) + FLOOR
    assert torch.equal(out[1], lowp(a))
    seen.clear()
    agrees(lambda x: torch.tanh(torch.cumsum(torch.relu(x), dim=-1)), [torch.randn(8, 16)], cache)
    assert seen and all(d is None for d in seen), "an op left to PyTorch: the GraphModule"


def test_tiered_compile_is_an_option_of_the_context_and_the_backend(cache):
    """kf_options.tiered_compile through kfuse.Context (off unless asked) and
    the backend (on unless turned off); a CPU program has no GEMM choice to
    tier and runs as ever, and its report says the option is on but no
    group was tiered."""
    g = kfuse.parse("kfg 1\nx = input(f32[8, 64])\nw = input(f32[64, 32])\n"
                    "h = matmul(x, w)\ny = gelu(h)\noutput y\n")
    target = "cuda" if DEV.type == "cuda" else "cpu"
    for tiered in (False, True):
        prog = kfuse.Context(target, cache_dir=str(cache), tiered_compile=tiered).compile(g)
        x, w = torch.randn(8, 64, device=DEV), torch.randn(64, 32, device=DEV)
        y = prog.run(x=x, w=w)["y"]
        res = g.check({"y": y.cpu()}, x=x.cpu(), w=w.cpu())
        assert all(r["passed"] for r in res.values()), res
        if target == "cuda":
            t = prog.report(format="json")["cuda_run"]["tiered_compile"]
            assert t["on"] is tiered and (tiered or not t["groups"]), t
    m = MLP().eval().to(DEV, DT)
    x = torch.randn(4, 16, 64, device=DEV, dtype=DT)
    with torch.no_grad():
        for opt in (True, False):
            y = compiled(m, cache, tiered_compile=opt)(x)
            assert rel(y, m(x)) < (1e-5 if DT == torch.float32 else 2e-2)


def test_a_tiered_compile_runs_cublaslt_first_then_the_measured_winner(tmp_path):
    """On CUDA, kfuse.Context(tiered_compile=True) on an empty cache: the
    bf16 GEMM group's measured choice is unknown, so the program runs its
    cuBLASLt side from the first run while the generated kernel compiles on
    a thread; a later run times both, keeps the faster and stores it. Every
    run's output is judged (before, at and after the swap); a new context on
    the same cache reads the winner and tiers nothing."""
    if DEV.type != "cuda":
        pytest.skip("the tiered compile concerns the CUDA target's GEMM choices "
                    "(--kfuse-device cuda)")
    import time

    text = ("kfg 1\nx = input(bf16[512, 256])\nw = input(bf16[256, 512])\n"
            "b = input(bf16[512])\nh = matmul(x, w)\na = add(h, b)\ny = gelu_tanh(a)\n"
            "output y\n")
    cdir = str(tmp_path / "tiered")
    ctx = kfuse.Context("cuda", cache_dir=cdir, tiered_compile=True)
    g = ctx.parse(text)
    prog = ctx.compile(g)

    def state(p):
        run = p.report(format="json")["cuda_run"]
        return run["tiered_compile"], run["measured"]

    def judged():
        x = torch.randn(512, 256, device=DEV, dtype=torch.bfloat16)
        w = torch.randn(256, 512, device=DEV, dtype=torch.bfloat16) / 16
        b = torch.randn(512, device=DEV, dtype=torch.bfloat16)
        y = prog.run(x=x, w=w, b=b)["y"]
        torch.cuda.synchronize()
        res = g.check({"y": y.cpu()}, x=x.cpu(), w=w.cpu(), b=b.cpu())
        assert all(r["passed"] for r in res.values()), res

    tier, measured = state(prog)
    if not measured:
        pytest.skip("no measured GEMM choice on this device (the generated GEMM is sm_90a's)")
    assert tier["on"] and tier["groups"] and tier["pending"], tier
    assert all(m["tiered"] and m["chosen"] == "cublaslt" for m in measured), measured
    t0, runs = time.time(), 0
    while state(prog)[0]["pending"]:
        judged()
        runs += 1
        assert time.time() - t0 < 300, "the background compile never finished"
        time.sleep(0.02)
    tier, measured = state(prog)
    assert not tier["failed"], tier["error"]
    assert tier["swapped_at_run"] == runs, (tier, runs)
    assert all(m["ms"][0] > 0 and m["ms"][1] > 0 for m in measured), measured
    judged()
    judged()
    ctx2 = kfuse.Context("cuda", cache_dir=cdir, tiered_compile=True)
    prog2 = ctx2.compile(ctx2.parse(text))
    tier2, measured2 = state(prog2)
    assert not tier2["groups"] and not tier2["pending"], tier2
    assert [(m["chosen"], m["cached"], m["tiered"]) for m in measured2] == \
        [(m["chosen"], True, False) for m in measured], (measured, measured2)


OTHER_DT = torch.float64 if DEV.type == "cpu" else torch.float16


def _graph_cache_line():
    return next((ln.strip() for ln in last_report().splitlines() if "graph cache:" in ln), None)


def _cached_run(m, x, cache, **opts):
    """m(x) through a new torch.compile (Dynamo reset: as a new process
    would) on `cache`; judged as agrees() judges (against f64, at most twice
    eager's error plus FLOOR; NaN fails) and returns the report's graph cache
    line."""
    with torch.no_grad():
        y = compiled(m, cache, **opts)(x)
        eager = m(x)
        ref = copy.deepcopy(m).double()(x.double())
    assert y.shape == eager.shape and y.dtype == eager.dtype and y.device == eager.device
    assert rel(y, ref) <= 2 * rel(eager, ref) + FLOOR
    return _graph_cache_line()


def _entries(cache):
    d = cache / "torch-graphs"
    return sorted(p.name for p in d.glob("*.json")) if d.exists() else []


def test_the_graph_cache_serves_the_same_graph_and_misses_every_change(cache):
    m = MLP().eval().to(DEV, DT)
    x = torch.randn(4, 16, 64, device=DEV, dtype=DT)
    assert _cached_run(m, x, cache) == "graph cache: stored"
    assert len(_entries(cache)) == 1
    # the same graph again (a new Dynamo trace, as in a new process): served,
    # on fresh inputs and fresh weights of the same shapes
    m2 = MLP().eval().to(DEV, DT)
    x2 = torch.randn(4, 16, 64, device=DEV, dtype=DT)
    assert _cached_run(m2, x2, cache).startswith("graph cache: hit"), last_report()
    assert len(_entries(cache)) == 1
    # every change misses, compiles through AOTAutograd and stores its own entry
    changes = [
        (m, torch.randn(2, 8, 64, device=DEV, dtype=DT), {}),  # a shape
        (copy.deepcopy(m).to(OTHER_DT), x.to(OTHER_DT), {}),  # a dtype
        (m, x, {"choice_margin": 0.25}),  # an option
        (m, x, {"flags": {"unfused_attention"}}),  # a flag
        (MLP(64, 96).eval().to(DEV, DT), x, {}),  # a weight's shape
    ]
    for i, (mm, xx, opts) in enumerate(changes):
        assert _cached_run(mm, xx, cache, **opts) == "graph cache: stored", i
        assert len(_entries(cache)) == 2 + i, i

    class Relu(MLP):  # another graph: relu for gelu
        def forward(self, x):
            return self.l2(F.relu(self.l1(self.ln(x)))) + x

    r = Relu().eval().to(DEV, DT)
    assert _cached_run(r, x, cache) == "graph cache: stored"
    assert _cached_run(r, x, cache).startswith("graph cache: hit")
    # the flags that only say how the cache is used share the entry
    assert _cached_run(m, x, cache, flags={"cache_read_only"}).startswith("graph cache: hit")
    n = len(_entries(cache))
    # off: neither read nor written
    assert _cached_run(m, x, cache, graph_cache=False) is None
    assert _cached_run(m, torch.randn(3, 64, device=DEV, dtype=DT), cache,
                       flags={"no_cache"}) is None
    assert len(_entries(cache)) == n


def test_a_damaged_graph_cache_entry_is_a_miss(cache):
    m = MLP().eval().to(DEV, DT)
    x = torch.randn(4, 16, 64, device=DEV, dtype=DT)
    assert _cached_run(m, x, cache) == "graph cache: stored"
    (entry,) = _entries(cache)
    path = cache / "torch-graphs" / entry
    text = path.read_text()
    for bad in ["{not json", text.replace('"out0"', '"out9"'),
                text.replace("in0", "inZ", 1), text.replace('"picks": [0]', '"picks": [5]')]:
        assert bad != text
        path.write_text(bad)
        line = _cached_run(m, x, cache, flags={"cache_read_only"})
        assert line == "graph cache: not stored: the cache is read-only", (line, bad[:200])
    path.unlink()
    assert _cached_run(m, x, cache) == "graph cache: stored"
    assert _cached_run(m, x, cache).startswith("graph cache: hit")
    # kfuse.cache("clear") clears the graph entries with the kernels
    assert "torch.compile graph entries" in kfuse.cache("clear", str(cache))
    assert _entries(cache) == []
    assert _cached_run(m, x, cache) == "graph cache: stored"


def test_a_graph_not_whole_in_kfuse_is_not_stored(cache):
    def f(x, y):
        return torch.tanh(torch.cumsum(torch.relu(x) * 2.0, dim=-1)) + y  # no scan in kfuse

    args = [torch.randn(8, 32, device=DEV, dtype=DT) for _ in range(2)]
    for _ in range(2):
        with torch.no_grad():
            out = compiled(f, cache)(*args)
        assert rel(out, f(*args)) <= (1e-5 if DT == torch.float32 else 2e-2)
        assert _graph_cache_line() is None
    assert _entries(cache) == []


def test_a_graph_that_mutates_an_input_is_not_stored(cache):
    def f(x, y):
        y.add_(1.0)  # AOTAutograd's wrapper writes it back: not a plain kfuse call
        return torch.relu(x) * 2.0 + y

    x = torch.randn(8, 32, device=DEV, dtype=DT)
    y = torch.randn(8, 32, device=DEV, dtype=DT)
    y0 = y.clone()
    with torch.no_grad():
        out = compiled(f, cache)(x, y)
    assert torch.equal(y, y0 + 1.0)
    assert rel(out, torch.relu(x) * 2.0 + y) <= (1e-5 if DT == torch.float32 else 2e-2)
    line = _graph_cache_line()
    assert line is None or line.startswith("graph cache: not stored"), line
    assert _entries(cache) == []


def test_the_graph_key_refuses_graphs_whose_code_does_not_pin_them():
    """The key is Dynamo's code and the inputs: a graph that runs something
    the code does not spell out (a library's own operator, a parameter held
    by the module, a non-tensor input) gets no key, so it is never cached."""
    from kfuse.torch_backend import _graph_key

    x = torch.randn(4, 8, device=DEV, dtype=DT)

    def f(x):
        return torch.relu(x) * 2.0

    key = _graph_key(torch.fx.symbolic_trace(f), [x], {})
    assert key is not None
    assert key == _graph_key(torch.fx.symbolic_trace(f), [torch.randn_like(x)], {})
    assert key != _graph_key(torch.fx.symbolic_trace(f), [x.t().contiguous().t()], {})  # strides
    assert key != _graph_key(torch.fx.symbolic_trace(f), [x], {"gemm": "cublaslt"})
    assert key == _graph_key(torch.fx.symbolic_trace(f), [x], {"num_threads": 3,
                                                              "flags": {"cache_read_only"}})
    lib = torch.library.Library(f"kfusetest{os.getpid()}", "FRAGMENT")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda t: t * 2, "CompositeExplicitAutograd")
    ns = getattr(torch.ops, f"kfusetest{os.getpid()}")

    def g(x):
        return ns.twice(x) + 1.0

    assert _graph_key(torch.fx.symbolic_trace(g), [x], {}) is None
    assert _graph_key(torch.fx.symbolic_trace(torch.nn.Linear(8, 8)), [x], {}) is None
    assert _graph_key(torch.fx.symbolic_trace(f), [3], {}) is None


def test_a_graph_whose_outputs_alias_its_inputs_is_not_stored(cache):
    """AOTAutograd gives such outputs back as views of the inputs (its
    wrapper, skipped on a hit): stored, they would come back as copies."""
    def f(x):
        return torch.relu(x) * 2.0, x.view(-1), x

    x = torch.randn(4, 8, device=DEV, dtype=DT)
    for _ in range(2):
        with torch.no_grad():
            a, b, c = compiled(f, cache)(x)
        assert rel(a, torch.relu(x) * 2.0) <= (1e-5 if DT == torch.float32 else 2e-2)
        assert b.data_ptr() == x.data_ptr() and c is x
        line = _graph_cache_line()
        assert line is None or line.startswith("graph cache: not stored"), line
    assert _entries(cache) == []


def _first_run(prog):
    """The C report's record of the program's first run (cuda_run.first_run_ms)."""
    return (prog.report(format="json").get("cuda_run") or {}).get("first_run_ms")


@pytest.mark.skipif(DEV.type != "cuda", reason="Program.warm_device captures on a CUDA device")
def test_warm_device_captures_the_first_run_without_running_it():
    """Program.warm_device, the backend's first-run warm-up: the program's
    steps (a cuBLASLt GEMM, f32, and its fused epilogue) are captured on a
    private stream and discarded, so the C report's first run is that capture
    and no run of the program's own captured graphs counts it; the runs after
    it give the reference evaluator's results on fresh inputs. Inside a
    caller's capture it does nothing (False), and the capture then holds no
    launch of its."""
    g = kfuse.parse("kfg 1\nx = input(f32[64, 128])\nw = input(f32[128, 96])\n"
                    "b = input(f32[96])\nm = matmul(x, w)\ns = add(m, b)\ny = gelu(s)\n"
                    "output y\n")
    prog = kfuse.compile(g, target="cuda")
    args = [torch.randn(64, 128, device=DEV), torch.randn(128, 96, device=DEV),
            torch.randn(96, device=DEV)]
    assert _first_run(prog) is None
    assert prog.warm_device(args) is True
    first = _first_run(prog)
    assert first is not None and first["captured"] is True, first
    assert prog._workspace is not None  # the first run's workspace, taken here

    def judged(x, w, b):
        (y,) = prog.run_device_list([x, w, b])
        res = g.check({"y": y.cpu()}, x=x.cpu(), w=w.cpu(), b=b.cpu())
        assert all(r["passed"] for r in res.values()), res

    judged(*args)  # the warm-up's own inputs
    for _ in range(3):  # fresh ones: the fast path and the program's own capture
        judged(torch.randn(64, 128, device=DEV), torch.randn(128, 96, device=DEV),
               torch.randn(96, device=DEV))
    assert _first_run(prog)["captured"] is True  # recorded once: the warm-up's
    # a caller's capture: refused, nothing added to the caller's graph
    prog2 = kfuse.compile(g, target="cuda")
    side, graph = torch.cuda.Stream(), torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        graph.capture_begin()
        try:
            assert prog2.warm_device(args) is False
        finally:
            graph.capture_end()
    assert _first_run(prog2) is None


@pytest.mark.skipif(DEV.type != "cpu", reason="the CPU target (a GPU machine's build may lack it)")
def test_warm_device_is_refused_by_a_cpu_program():
    """A CPU program has no device-resident runs: nothing to warm (False)."""
    g = kfuse.parse("kfg 1\nx = input(f32[8, 64])\ny = gelu(x)\noutput y\n")
    assert kfuse.compile(g, target="cpu").warm_device([torch.randn(8, 64)]) is False


def test_the_backend_warms_the_first_run_of_a_stored_or_cached_graph(cache, monkeypatch):
    """warm_first_run (default on): a graph stored to the graph cache or served
    from it has Dynamo's inputs as the program's, and on CUDA its first run's
    once-per-process work is done on the background thread (the report says
    so, the program's first C run is that capture); results judged against
    f64 as agrees() judges. Off, or on the CPU target, nothing is warmed and
    the first C run is the call's own."""
    from kfuse import _core

    progs = []
    compile_ = _core.Context.compile
    monkeypatch.setattr(_core.Context, "compile",
                        lambda self, graph: progs.append(compile_(self, graph)) or progs[-1])

    def warmed_line():
        return next((ln.strip() for ln in last_report().splitlines()
                     if "first run warmed" in ln), None)

    m = MLP().eval().to(DEV, DT)
    x = torch.randn(4, 16, 64, device=DEV, dtype=DT)
    for want in ("graph cache: stored", "graph cache: hit"):
        assert _cached_run(m, x, cache).startswith(want)
        if DEV.type == "cuda":
            assert (warmed_line() or "").startswith(
                "first run warmed on the thread: yes"), last_report()
            assert _first_run(progs[-1])["captured"] is True
        else:
            assert warmed_line() is None
    assert _cached_run(m, x, cache, warm_first_run=False).startswith("graph cache: hit")
    assert warmed_line() is None
    if DEV.type == "cuda":
        assert _first_run(progs[-1])["captured"] is False  # the call's own run
    # no background thread: nothing warms
    assert _cached_run(m, x, cache, background_compile=False).startswith("graph cache: hit")
    assert warmed_line() is None
