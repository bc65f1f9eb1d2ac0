"""torch.compile(backend="kfuse") on the CPU target in f32, against eager
PyTorch: small modules, scaled_dot_product_attention in its forms, the
transformers GPT-2 block and LLaMA decoder layer (random weights, config only),
fallback of ops kfuse lacks (reported), shape changes, bad inputs, and the disk
cache across processes. scripts/test_python.sh installs torch and transformers."""
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


def rel(a, b):
    a, b = a.double(), b.double()
    assert not torch.isnan(a).any()
    return ((a - b).norm() / b.norm()).item()


def compiled(m, cache, **opts):
    torch._dynamo.reset()
    return torch.compile(m, backend=make_backend(target="cpu", cache_dir=str(cache), **opts))


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
    assert "kfuse" in torch._dynamo.list_backends(exclude_tags=())
    m = MLP().eval()
    x = torch.randn(4, 16, 64)
    with torch.no_grad():
        y = torch.compile(m, backend="kfuse", options={"target": "cpu",
                                                       "cache_dir": str(cache)})(x)
        assert rel(y, m(x)) < 1e-5


def test_mlp_runs_in_one_kfuse_partition(cache):
    m = MLP().eval()
    x = torch.randn(4, 16, 64)
    with torch.no_grad():
        y = compiled(m, cache)(x)
        assert rel(y, m(x)) < 1e-5
    rep = last_report()
    assert rep.startswith("kfuse: 1 partition(s) compiled by kfuse, 0 op kind(s) left to PyTorch")
    # ATen's view(mm(view(x)), ...) around each Linear folds into batched GEMMs whose
    # epilogues take the bias, the activation and the residual: two kernels in all
    assert "\n2 kernels" in rep, rep
    assert "gemm_layer_norm_bias_gelu_tanh" in rep, rep


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

    with torch.no_grad():
        ref = f(q, k, v, mask)
        y = compiled(f, cache)(q, k, v, mask)
    assert rel(y, ref) < 1e-5
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
    blk = _gpt2_block()
    x = torch.randn(2, 16, 64)
    with torch.no_grad():
        ref = _first(blk(x))
        y = _first(compiled(blk, cache)(x))
    assert rel(y, ref) < 1e-5
    assert "partition(s) compiled by kfuse" in last_report()


def test_transformers_llama_layer_with_fallbacks_reported(cache):
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                   num_key_value_heads=2, num_hidden_layers=1,
                                   max_position_embeddings=128)
    cfg._attn_implementation = "sdpa"
    layer = transformers.models.llama.modeling_llama.LlamaDecoderLayer(cfg, layer_idx=0).eval()
    rot = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding(cfg)
    x = torch.randn(2, 16, 64)
    pe = rot(x, torch.arange(16)[None])
    with torch.no_grad():
        ref = _first(layer(x, position_embeddings=pe, attention_mask=None))
        y = _first(compiled(layer, cache)(x, position_embeddings=pe, attention_mask=None))
    assert rel(y, ref) < 1e-5
    rep = last_report()
    assert "partition(s) compiled by kfuse" in rep


def test_an_unsupported_op_falls_back_and_is_reported(cache):
    def f(x, y):
        a = torch.relu(x) * 2.0
        b = torch.cumsum(a, dim=-1)  # kfuse has no scan
        return torch.tanh(b) + y

    x, y = torch.randn(8, 32), torch.randn(8, 32)
    with torch.no_grad():
        out = compiled(f, cache)(x, y)
    assert rel(out, f(x, y)) < 1e-6
    rep = last_report()
    assert "in PyTorch: aten.cumsum.default: no kfuse translation" in rep, rep
    assert "2 partition(s) compiled by kfuse" in rep, rep


def test_dtypes_kfuse_lacks_stay_in_pytorch(cache):
    def f(x):
        i = (x * 10).to(torch.int64)  # i64: not a kfuse dtype
        return (i * 3).to(torch.float32) + x

    x = torch.randn(16, 16)
    with torch.no_grad():
        out = compiled(f, cache)(x)
    assert torch.equal(out, f(x))
    rep = last_report()
    assert "in PyTorch: aten.mul.Tensor: kfuse refused it" in rep, rep


def test_a_new_shape_recompiles(cache):
    m = MLP().eval()
    c = compiled(m, cache)
    with torch.no_grad():
        for shape in [(4, 16, 64), (3, 5, 64), (7, 64)]:
            x = torch.randn(*shape)
            assert rel(c(x), m(x)) < 1e-5, shape


def test_non_contiguous_inputs(cache):
    m = MLP().eval()
    x = torch.randn(64, 16, 4).permute(2, 1, 0)
    assert not x.is_contiguous()
    with torch.no_grad():
        assert rel(compiled(m, cache)(x), m(x)) < 1e-5


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
        m = MLP().eval()
        x = torch.randn(4, 16, 64)
        flags = sys.argv[1:]
        with torch.no_grad():
            y = torch.compile(m, backend=make_backend(target="cpu", cache_dir={str(cache)!r},
                                                      flags=flags))(x)
            err = ((y - m(x)).norm() / m(x).norm()).item()
        print(err)
        assert err < 1e-5
    """))
    env = dict(os.environ)
    first = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr
    # the same graph in a new process, with misses made errors: every kernel from the cache
    again = subprocess.run([sys.executable, str(script), "cache_read_only", "cache_fail_on_miss"],
                           capture_output=True, text=True, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    # and a cache that lacks them fails (the check above can fail)
    other = tmp_path / "empty"
    script.write_text(script.read_text().replace(repr(str(cache)), repr(str(other))))
    miss = subprocess.run([sys.executable, str(script), "cache_read_only", "cache_fail_on_miss"],
                          capture_output=True, text=True, env=env)
    assert miss.returncode != 0
