#!/usr/bin/env python3
"""torch_blocks.py -- transformers blocks through torch.compile(backend="kfuse"),
beside eager PyTorch and torch.compile's default (Inductor), in one process:

  gpt2_medium   GPT2Block, n_embd 1024, 16 heads, B16 S1024, bf16
  llama7b       LlamaDecoderLayer, hidden 4096, 32 heads, MLP 11008, B8 S2048, bf16
                (rotary embedding from the model's own LlamaRotaryEmbedding)

Random weights from the configs (nothing downloaded); inference (torch.no_grad).
Per block and variant: the median of CUDA-event times after warm-up (each call
alone, so the host's time up to the first kernel counts), the mean over 20
calls back to back (_loop_ms: the host's work overlapped with the GPU's), the
first call's wall time (capture + compile + run; kfuse with an empty cache
directory, then again with that cache warm after torch._dynamo.reset()), and
the relative error against eager (normwise, in f32 arithmetic).
aot_eager_first_call_s is Dynamo's capture and AOTAutograd with no compiler:
the floor under every backend's first call. kfuse's report (partitions, ops
left to PyTorch, translation and compile times) is stored with the numbers.

  python3 bench/torch_blocks.py --commit ID [--out FILE] [--blocks gpt2_medium,llama7b]

Needs the Python package installed (pip install ./python), or --kfuse-lib
build/libkfuse.so from a checkout, and a GPU.
"""
import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import median_ms  # noqa: E402  (the same timing as every other peer row)


def blocks(names):
    import torch
    import transformers
    from transformers.models.gpt2 import modeling_gpt2
    from transformers.models.llama import modeling_llama

    dev = torch.device("cuda")
    if "gpt2_medium" in names:
        cfg = transformers.GPT2Config(n_embd=1024, n_head=16, n_layer=1, n_positions=1024)
        cfg._attn_implementation = "sdpa"
        blk = modeling_gpt2.GPT2Block(cfg, layer_idx=0).to(dev, torch.bfloat16).eval()
        x = torch.randn(16, 1024, 1024, device=dev, dtype=torch.bfloat16)
        yield "gpt2_medium", blk, (x,), {}
    if "llama7b" in names:
        cfg = transformers.LlamaConfig(hidden_size=4096, intermediate_size=11008,
                                       num_attention_heads=32, num_key_value_heads=32,
                                       num_hidden_layers=1, max_position_embeddings=4096)
        cfg._attn_implementation = "sdpa"
        layer = modeling_llama.LlamaDecoderLayer(cfg, layer_idx=0).to(dev, torch.bfloat16).eval()
        rot = modeling_llama.LlamaRotaryEmbedding(cfg).to(dev)
        x = torch.randn(8, 2048, 4096, device=dev, dtype=torch.bfloat16)
        pe = rot(x, torch.arange(2048, device=dev)[None])
        yield "llama7b", layer, (x,), {"position_embeddings": pe, "attention_mask": None}


def first(y):
    return y[0] if isinstance(y, tuple) else y


def loop_ms(fn, reps=20):
    """Per call, `reps` calls back to back between two events: the host's
    per-call work overlaps the GPU's (as in a model's forward), where
    median_ms's single calls count the host's time up to the first kernel."""
    import torch

    fn()
    torch.cuda.synchronize()
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--commit", required=True)
    ap.add_argument("--out", default="-")
    ap.add_argument("--blocks", default="gpt2_medium,llama7b")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--kfuse-lib", default=None,
                    help="libkfuse.so to load (with python/ on the path when the package "
                         "is not installed)")
    args = ap.parse_args()
    import torch

    try:
        import kfuse
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "python"))
        import kfuse
    if args.kfuse_lib:
        kfuse.load_library(args.kfuse_lib)
        os.environ["KFUSE_LIBRARY"] = os.path.abspath(args.kfuse_lib)
    from kfuse.torch_backend import last_report, make_backend

    res = {"device": torch.cuda.get_device_name(), "commit": args.commit,
           "torch": torch.__version__, "kfuse": kfuse.version(), "blocks": {}}
    for name, mod, xs, kw in blocks(args.blocks.split(",")):
        row = res["blocks"][name] = {}
        with torch.no_grad():
            ref = first(mod(*xs, **kw)).float()

            def timed(label, fn_maker):
                torch._dynamo.reset()
                torch.cuda.synchronize()
                t = time.perf_counter()
                fn = fn_maker()
                y = first(fn(*xs, **kw))
                torch.cuda.synchronize()
                row[label + "_first_call_s"] = time.perf_counter() - t
                row[label + "_ms"] = median_ms(lambda: fn(*xs, **kw))
                row[label + "_loop_ms"] = loop_ms(lambda: fn(*xs, **kw))
                row[label + "_rel_err"] = ((y.float() - ref).norm() / ref.norm()).item()
                return fn

            timed("eager", lambda: mod)
            # Dynamo's capture and AOTAutograd alone: the floor under every backend's first call
            torch._dynamo.reset()
            torch.cuda.synchronize()
            t = time.perf_counter()
            first(torch.compile(mod, backend="aot_eager")(*xs, **kw))
            torch.cuda.synchronize()
            row["aot_eager_first_call_s"] = time.perf_counter() - t
            if not args.no_inductor:
                try:
                    timed("inductor", lambda: torch.compile(mod))
                except Exception as e:  # noqa: BLE001 - a peer's failure is recorded
                    row["inductor_error"] = str(e)[:300]
            cache = tempfile.mkdtemp(prefix="kfuse-bench-")
            try:
                timed("kfuse", lambda: torch.compile(mod, backend=make_backend(cache_dir=cache)))
                row["kfuse_report"] = last_report()
                # a warm disk cache: Dynamo and kfuse's programs rebuilt, kernels from disk
                torch._dynamo.reset()
                torch.cuda.synchronize()
                t = time.perf_counter()
                first(torch.compile(mod, backend=make_backend(
                    cache_dir=cache, flags={"cache_read_only", "cache_fail_on_miss"}))(*xs, **kw))
                torch.cuda.synchronize()
                row["kfuse_first_call_warm_cache_s"] = time.perf_counter() - t
            except Exception as e:  # noqa: BLE001
                row["kfuse_error"] = str(e)[:2000]
        print(name, {k: v for k, v in row.items() if not k.endswith("report")}, flush=True)
    text = json.dumps(res, indent=1)
    if args.out == "-":
        print(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
