#!/usr/bin/env python3
"""first_call.py -- where torch.compile(backend="kfuse")'s first call spends its
seconds, each first call in a fresh process (torch_blocks.py's child), per block:

  cold          an empty kfuse cache, CUDA_CACHE_DISABLE=1 (it fills the cache,
                the backend's graph cache included)
  warm_nograph  a new process on that cache, graph_cache off (the path before
                the graph cache: Dynamo, AOTAutograd, translation, kf_compile)
  warm          a new process on that cache, the graph cache on (Dynamo, then
                the stored kfuse graph: AOTAutograd and translation skipped)
  eager         Dynamo alone (backend="eager"): the floor under every backend
  aot_eager     Dynamo and AOTAutograd (backend="aot_eager")
  warm_eager_loading  warm, with CUDA_MODULE_LOADING=EAGER (no kernel loaded at its
                first launch: how much of the first run is lazy loading)
  warm_noearly  warm without the warm-up's early cuBLASLt start-up (the
                capture after kf_compile alone)
  warm_nowarm   warm with warm_first_run off (the first run's once-per-process
                work in the first call, as before fc20)
  warm_nowarm_prelinear  warm_nowarm after a tiny torch F.linear (bf16, CUDA)
                outside the timed call: whether torch's own first cuBLASLt call
                pays what kfuse's first run pays (the library is one in a
                PyTorch process)

A variant named twice runs twice (the second's key gets "#2"): e.g.
cold,warm,warm_nograph,warm_nograph,warm for A B B A pairs.

The warm processes run with cache_read_only and cache_fail_on_miss (kernels
from the cache or an error). Each row: the first call's wall seconds, its
stages (ms from the call's start: Dynamo's capture ends at dynamo_captured,
AOTAutograd's graph at aten_graph, the translation at translated, kf_compile
on the background thread from kf_compile_start to kf_compile_end, the run),
kf_compile's prepare phases, and the process's whole wall time.

  python3 bench/first_call.py --commit ID [--blocks llama7b,gpt2_medium]
                              [--kfuse-lib build/libkfuse.so] [--out FILE]
                              [--variants cold,warm_nograph,warm,eager] [--smoke]
                              [--cache DIR]
"""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_blocks as tb  # noqa: E402

WARM = ["cache_read_only", "cache_fail_on_miss"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--commit", required=True)
    ap.add_argument("--blocks", default="llama7b,gpt2_medium")
    ap.add_argument("--variants", default="cold,warm_nograph,warm,eager")
    ap.add_argument("--kfuse-lib", default=None)
    ap.add_argument("--out", default="-")
    ap.add_argument("--cache", default=None, metavar="DIR",
                    help="the kfuse cache (default: a new empty folder per block): a later "
                         "run's warm variants on an earlier run's cache")
    ap.add_argument("--smoke", action="store_true", help="tiny blocks on the CPU (f32)")
    args = ap.parse_args()
    lib = os.path.abspath(args.kfuse_lib) if args.kfuse_lib else None
    variants = args.variants.split(",")
    res = {"commit": args.commit, "blocks": {}}
    if not args.smoke:  # without CUDA in this process (the children are the measured ones)
        import subprocess

        res["device"] = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                       capture_output=True, text=True).stdout.strip()
    for name in args.blocks.split(","):
        cache = (os.path.join(args.cache, name) if args.cache
                 else tempfile.mkdtemp(prefix="kfuse-first-"))
        base = {"block": name, "kfuse_lib": lib, "smoke": args.smoke, "cache": cache}
        specs = {
            "cold": (dict(base, backend="kfuse"), tb.COLD),
            "warm_nograph": (dict(base, backend="kfuse",
                                  options={"flags": WARM, "graph_cache": False}), {}),
            "warm": (dict(base, backend="kfuse", options={"flags": WARM}), {}),
            "warm_noearly": (dict(base, backend="kfuse", no_blas_start=True,
                                  options={"flags": WARM}), {}),
            "warm_nowarm": (dict(base, backend="kfuse",
                                 options={"flags": WARM, "warm_first_run": False}), {}),
            "warm_nowarm_prelinear": (dict(base, backend="kfuse", prelinear=True,
                                           options={"flags": WARM, "warm_first_run": False}),
                                      {}),
            "eager": (dict(base, backend="eager"), {}),
            "aot_eager": (dict(base, backend="aot_eager"), {}),
            # the warm call with every CUDA module loaded when it is loaded (not at a
            # kernel's first launch): what of the first run is lazy loading
            "warm_eager_loading": (dict(base, backend="kfuse", options={"flags": WARM}),
                                   {"CUDA_MODULE_LOADING": "EAGER"}),
        }
        row = res["blocks"][name] = {}
        for v in variants:
            spec, env = specs[v]
            n = sum(1 for k in row if k.split("#")[0] == v)
            key = v if n == 0 else f"{v}#{n + 1}"  # a variant repeated: A B B A
            row[key] = tb.run_child(spec, env, timeout=240)
            c = row[key]
            print(f"{name:12s} {key:13s} first {c.get('first_call_s')} s  second "
                  f"{c.get('second_call_s')} s  process {c.get('process_s')} s  "
                  f"graph cache: {c.get('graph_cache')}  {c.get('error', '')[-300:]}", flush=True)
            if "stages_ms" in c:
                print("    stages_ms", json.dumps(c["stages_ms"]), flush=True)
            if c.get("prepare_ms"):
                print("    prepare_ms", json.dumps(c["prepare_ms"]), flush=True)
            if c.get("report_head"):
                print("    report", c["report_head"], flush=True)
            if args.out != "-":  # after each child: a run cut short keeps what it measured
                with open(args.out, "w") as f:
                    f.write(json.dumps(res, indent=1) + "\n")
    if args.out == "-":
        print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
