#!/usr/bin/env python3
"""torch_blocks.py -- transformers blocks through torch.compile(backend="kfuse"),
beside eager PyTorch and torch.compile's default (Inductor):

  gpt2_medium   GPT2Block, n_embd 1024, 16 heads, B16 S1024, bf16
  llama7b       LlamaDecoderLayer, hidden 4096, 32 heads, MLP 11008, B8 S2048, bf16
                (rotary embedding from the model's own LlamaRotaryEmbedding)

Random weights from the configs (nothing downloaded); inference (torch.no_grad).

Steady state, in one process: per block and variant the median of CUDA-event
times after warm-up (each call alone, so the host's time up to the first kernel
counts), the mean over 20 calls back to back (_loop_ms: the host's work
overlapped with the GPU's), and the relative error against eager (normwise, in
f32 arithmetic). kfuse's report (partitions, ops left to PyTorch, translation
and compile times) is stored with the numbers.

First calls (capture + compile + run, wall time), each in its OWN FRESH PROCESS
(a child of this one, run one at a time, before anything else uses the GPU), as
a user's first call is:
  kfuse_first_call_s                 cold: an empty kfuse cache directory, and
                                     CUDA_CACHE_DISABLE=1 (see below)
  kfuse_first_call_warm_cache_s      a new process on the kfuse cache the first one filled
  inductor_first_call_s              cold: an empty Inductor cache (TORCHINDUCTOR_CACHE_DIR),
                                     CUDA_CACHE_DISABLE=1
  inductor_first_call_warm_cache_s   a new process on that Inductor cache
and for each kfuse child its stages (_detail: ms from the call's start to
Dynamo's capture, AOTAutograd's ATen graph, kfuse's translation, the first call
of the compiled graph, kf_compile's start and end, the run), kf_compile's
prepare phases, the CPU seconds it and other processes used, and the child's
whole wall time (imports and CUDA's start: tens of seconds on the H200 machine,
so --fresh names the blocks to measure so). Dynamo's and AOTAutograd's share is
the floor under every backend's first call (aot_eager_first_call_s, measured in
this process, is the same floor with no compiler).
Why CUDA_CACHE_DISABLE=1 for the cold calls: NVRTC (CUDA 12.9 and later) keeps
what it compiled in the driver's compute cache (~/.nv/ComputeCache), so without
it a kfuse compile of kernels compiled before on the machine, in any process
and whatever kfuse's own cache directory, takes a tenth of a real one. On an
H200 at 5465548 the GPT-2 block's kernels took 3.78 s (14 CPU seconds) the first
time on the machine and 0.43 s later with an empty kfuse cache: that, most
likely, and not Inductor, made kfuse's first call after Inductor slow in this
bench before (the block's kernels were new to the machine there, and served
from NVRTC's cache in the fresh process measured next). kfuse_first_call_after_inductor_s
keeps the in-process number (with kfuse_after_inductor_other_cpu_s, the CPU
seconds other processes used during it), and --diagnose-after-inductor BLOCK
measures kfuse's cold first call after Inductor's in fresh processes with
Inductor's compile workers left as they are, shut down first, or never started
(TORCHINDUCTOR_COMPILE_THREADS=1).

Per-call host time (each block and variant, _host_us: the median host time
of a call, each after a synchronize). With --compare NAME=DIR,..., kfuse's
backend from each Python package DIR (e.g. a checkout's python/ from before
a change) in a child process of its own, one after another, on one kfuse
cache: per block kfuse's per-call and back-to-back times, its host time and
where it goes (kfuse_breakdown_us: Dynamo and AOTAutograd up to the kfuse
partition, kfuse's Python up to kf_program_run_device, that call, the rest),
the CUDA graph replays of its programs, and the no-op backend's host time
(Dynamo and AOTAutograd around a graph that does nothing: the floor of every
backend's call).

  python3 bench/torch_blocks.py --commit ID [--out FILE] [--blocks gpt2_medium,llama7b]
                                [--no-inductor] [--fresh BLOCKS|none] [--fresh-kfuse-only]
                                [--steady BLOCKS|none] [--kfuse-cache DIR]
                                [--compare NAME=DIR,...] [--host-reps N]
                                [--diagnose-after-inductor BLOCK]
                                [--headline BLOCKS [--rounds N] [--table FILE]
                                 [--headline-variants kfuse,kfuse_gen,kfuse_lt,kfuse_biasF,...]
                                 [--abba A:B,... [--abba-block SEC] [--abba-rounds N]]]

--headline-variants and --abba time each measured GEMM choice's sides under
the block's own sustained load: e.g. --headline-variants
kfuse,kfuse_bias0,kfuse_gen,kfuse_lt --abba kfuse_bias0:kfuse,kfuse_gen:kfuse_lt
(every group forced to one side, A B B A blocks, each side's kernels in order).

Needs the Python package installed (pip install ./python), or --kfuse-lib
build/libkfuse.so from a checkout, and a GPU.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import median_ms  # noqa: E402  (the same timing as every other peer row)


SMOKE = False  # --smoke: tiny blocks on the CPU in f32, to try the harness without a GPU
TIER_COMPARE = False  # --tier-compare: also a cold first call with tiered_compile off


def sync():
    import torch

    if not SMOKE:
        torch.cuda.synchronize()


def blocks(names):
    import torch
    import transformers
    from transformers.models.gpt2 import modeling_gpt2
    from transformers.models.llama import modeling_llama

    dev = torch.device("cpu" if SMOKE else "cuda")
    dt = torch.float32 if SMOKE else torch.bfloat16
    # (B, S, width) and the configs' sizes, or a tiny stand-in with --smoke
    gb, gs, gw, gh = (2, 16, 64, 4) if SMOKE else (16, 1024, 1024, 16)
    lb, ls, lw, lh, li = (2, 16, 64, 4, 128) if SMOKE else (8, 2048, 4096, 32, 11008)
    if "gpt2_medium" in names:
        cfg = transformers.GPT2Config(n_embd=gw, n_head=gh, n_layer=1, n_positions=gs)
        cfg._attn_implementation = "sdpa"
        with dev:  # initialized on the GPU: a fresh process is ready sooner
            blk = modeling_gpt2.GPT2Block(cfg, layer_idx=0)
        blk = blk.to(dt).eval()
        x = torch.randn(gb, gs, gw, device=dev, dtype=dt)
        yield "gpt2_medium", blk, (x,), {}
    if "llama7b" in names:
        cfg = transformers.LlamaConfig(hidden_size=lw, intermediate_size=li,
                                       num_attention_heads=lh, num_key_value_heads=lh,
                                       num_hidden_layers=1, max_position_embeddings=2 * ls)
        cfg._attn_implementation = "sdpa"
        with dev:
            layer = modeling_llama.LlamaDecoderLayer(cfg, layer_idx=0)
            rot = modeling_llama.LlamaRotaryEmbedding(cfg)
        layer = layer.to(dt).eval()
        x = torch.randn(lb, ls, lw, device=dev, dtype=dt)
        pe = rot(x, torch.arange(ls, device=dev)[None])
        yield "llama7b", layer, (x,), {"position_embeddings": pe, "attention_mask": None}


def first(y):
    return y[0] if isinstance(y, tuple) else y


def loop_ms(fn, reps=20):
    """Per call, `reps` calls back to back between two events: the host's
    per-call work overlaps the GPU's (as in a model's forward), where
    median_ms's single calls count the host's time up to the first kernel."""
    import torch

    if SMOKE:
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        return (time.perf_counter() - t) * 1e3 / reps
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


# ---------------------------------------------------------------------------
# CPU accounting: what other processes did while a first call ran
# ---------------------------------------------------------------------------

def cpu_now():
    """(busy CPU seconds of the whole machine, this process's CPU seconds, all
    its threads), from /proc/stat and os.times."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    busy = sum(v[:8]) - v[3] - v[4]  # user nice system irq softirq steal; not idle, iowait
    t = os.times()
    return busy / os.sysconf("SC_CLK_TCK"), t.user + t.system


def descendants():
    """How many processes descend from this one (Inductor's compile workers)."""
    parent = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    parent[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    mine, n, grew = {os.getpid()}, 0, True
    while grew:
        grew = False
        for pid, pp in parent.items():
            if pp in mine and pid not in mine:
                mine.add(pid)
                n += 1
                grew = True
    return n


def timed_first_call(call):
    """call() under the wall clock and the CPU counters: (seconds, CPU seconds
    of other processes during it, of this process)."""
    sync()
    b0, s0 = cpu_now()
    t = time.perf_counter()
    call()
    sync()
    dt = time.perf_counter() - t
    b1, s1 = cpu_now()
    return dt, max(0.0, (b1 - b0) - (s1 - s0)), s1 - s0


# ---------------------------------------------------------------------------
# A first call in a fresh process (run as a child: --child JSON)
# ---------------------------------------------------------------------------

def _stamps():
    """Marks the first time each stage of kfuse's first call is reached
    (perf_counter), through wrappers around the backend's functions."""
    from kfuse import _core
    from kfuse import torch_backend as tb

    marks = {}

    def mark(name):
        marks.setdefault(name, time.perf_counter())

    def around(owner, attr, before, after):
        f = getattr(owner, attr)

        def w(*a, **k):
            mark(before)
            r = f(*a, **k)
            mark(after)
            return r
        setattr(owner, attr, w)

    around(tb, "kfuse_backend", "dynamo_captured", "backend_returned")
    around(tb, "_compile_fx", "aten_graph", "translated")
    if hasattr(tb, "_graph_load"):  # the graph cache's lookup (a hit skips AOTAutograd)
        around(tb, "_graph_key", "graph_key_start", "graph_key_end")
        around(tb, "_graph_load", "graph_load_start", "graph_load_end")
        around(tb, "_graph_store", "graph_store_start", "graph_store_end")
    around(tb._KfusePartition, "forward", "first_forward", "forward_returned")
    around(_core.Context, "compile", "kf_compile_start", "kf_compile_end")
    around(_core.Program, "run_device_list", "run_start", "run_end")
    if hasattr(_core.Program, "_use_torch_workspace"):  # the first run's workspace
        around(_core.Program, "_use_torch_workspace", "workspace_start", "workspace_end")
    if hasattr(tb, "_start_blas"):  # cuBLASLt's start-up begun on a thread
        around(tb, "_start_blas", "blas_start", "blas_thread_started")
    if hasattr(_core.Program, "warm_device"):  # the first run's warm-up on the compile thread
        around(_core.Program, "warm_device", "warm_start", "warm_end")
    lib = _core._L()
    c_run = lib.kf_program_run_device

    def c_marked(*a):  # the first run's C call (binding, launches); the warm-up's apart
        pre = "warm_c" if threading.current_thread().name == "kfuse-compile" else "c_run"
        mark(pre + "_start")
        r = c_run(*a)
        mark(pre + "_end")
        return r
    lib.kf_program_run_device = c_marked
    compile_ = _core.Context.compile

    def keep(self, graph):  # the programs, for their prepare phases
        p = compile_(self, graph)
        marks.setdefault("programs", []).append(p)
        return p
    _core.Context.compile = keep
    return marks


def child(spec):
    if spec.get("steady"):
        return steady_child(spec)
    import torch

    import kfuse
    from kfuse.torch_backend import last_report, make_backend

    global SMOKE
    SMOKE = spec.get("smoke", False)
    if spec.get("kfuse_lib"):
        kfuse.load_library(spec["kfuse_lib"])
    name, mod, xs, kw = next(blocks([spec["block"]]))
    out = {}
    with torch.no_grad():
        sync()
        if spec.get("before") == "inductor":  # the bench process's order: Inductor first
            fn = torch.compile(mod)
            out["inductor_first_call_s"], _, _ = timed_first_call(lambda: fn(*xs, **kw))
            from torch._inductor import async_compile, config

            out["inductor_compile_threads"] = config.compile_threads
            out["compile_worker_processes"] = descendants()
            if spec.get("then") == "shutdown_workers":
                async_compile.shutdown_compile_workers()
                out["compile_worker_processes_after_shutdown"] = descendants()
            del fn
            torch._dynamo.reset()
        if spec.get("prelinear"):  # diagnostic: torch's own cuBLASLt call before the first call
            w = torch.randn(64, 64, device=xs[0].device, dtype=xs[0].dtype)
            t = time.perf_counter()
            torch.nn.functional.linear(w, w, w[0])
            sync()
            out["prelinear_ms"] = round((time.perf_counter() - t) * 1e3, 1)
        marks = _stamps() if spec["backend"] == "kfuse" else {}
        if spec.get("no_blas_start"):  # the warm-up without its early cuBLASLt start-up
            import kfuse.torch_backend as ktb

            ktb._start_blas = lambda stream: None
        if spec["backend"] == "kfuse":
            opts = dict(spec.get("options", {}))
            if "flags" in opts:
                opts["flags"] = set(opts["flags"])
            fn = torch.compile(mod, backend=make_backend(cache_dir=spec["cache"], **opts))
        elif spec["backend"] in ("eager", "aot_eager"):  # Dynamo alone; Dynamo and AOTAutograd
            fn = torch.compile(mod, backend=spec["backend"])
        else:
            fn = torch.compile(mod)
        t0 = time.perf_counter()
        out["first_call_s"], out["other_cpu_s"], out["own_cpu_s"] = timed_first_call(
            lambda: fn(*xs, **kw))
        out["second_call_s"], _, _ = timed_first_call(lambda: fn(*xs, **kw))
        if marks:
            out["tier"] = _until_swap(marks.get("programs", []), lambda: fn(*xs, **kw))
        if marks:
            programs = marks.pop("programs", [])
            out["stages_ms"] = {k: round((v - t0) * 1e3, 1)
                                for k, v in sorted(marks.items(), key=lambda kv: kv[1])}
            rep = last_report()
            out["report_head"] = rep.splitlines()[0] if rep else ""
            out["graph_cache"] = next((ln.split(": ", 1)[1] for ln in rep.splitlines()
                                       if ln.startswith("  graph cache: ")), None)
            out["prepare_ms"] = _prepare_ms(programs)
    print("CHILD " + json.dumps(out), flush=True)


def _tiered(programs):
    """The tiered-compile state of each CUDA program (its report's JSON)."""
    return [(p.report(format="json").get("cuda_run") or {}).get("tiered_compile") or {}
            for p in programs]


def _until_swap(programs, call, limit_s=60.0):
    """With a tiered compile pending (kf_options.tiered_compile): calls, each
    synchronized, until every program swapped in its measured winners (or
    limit_s): how many calls and seconds that took from here, the median
    wall ms of those calls (cuBLASLt's side, plus the host), and the per-call
    ms (median_ms) after the swap; else just the programs' tier state."""
    import statistics

    state = _tiered(programs)
    out = {"pending_after_second_call": any(t.get("pending") for t in state)}
    if not out["pending_after_second_call"]:
        out["state"] = state
        return out
    t0 = time.perf_counter()
    walls = []
    while time.perf_counter() - t0 < limit_s:
        t = time.perf_counter()
        call()
        sync()
        walls.append((time.perf_counter() - t) * 1e3)
        state = _tiered(programs)
        if not any(t.get("pending") for t in state):
            break
    out.update(calls_until_swap=len(walls), s_until_swap=round(time.perf_counter() - t0, 3),
               ms_per_call_before_swap=round(statistics.median(walls[:-1] or walls), 3),
               swap_call_ms=round(walls[-1], 3), state=state)
    if not SMOKE:
        out["ms_after_swap"] = median_ms(call)
    return out


def _prepare_ms(programs):
    """kf_compile's prepare phases of each kfuse program compiled (a CPU
    program has none)."""
    res = []
    for p in programs:
        j = p.report(format="json").get("cuda_run") or {}
        res.append({k: j.get(k) for k in ("prepare_ms", "kernels_compiled", "kernels_cached",
                                          "cublaslt_loaded", "cublaslt_ms", "first_run_ms",
                                          "captured_graphs")})
    return res


# ---------------------------------------------------------------------------
# Per-call host time: where a call spends it before the GPU starts
# ---------------------------------------------------------------------------

def _noop_backend():
    """A torch.compile backend through AOTAutograd whose compiled graph does
    no work after its first call (it returns that call's outputs again): its
    per-call host time is Dynamo's guards and frame handling plus
    AOTAutograd's runtime wrappers, the floor under every backend's call."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def fw(gm, example_inputs):
        kept = []

        def f(*args):
            if not kept:
                kept.append(gm(*args))
            return kept[0]
        return make_boxed_func(f)
    return aot_autograd(fw_compiler=fw)


def host_breakdown(fn, reps):
    """Median host microseconds of a call of `fn` (compiled by kfuse, with
    the marks of _marks installed before it was compiled), each call after a
    synchronize, as median_ms times it: dynamo_aot_us (the call's start to
    the kfuse partition's entry: Dynamo, AOTAutograd's wrappers, the fused
    graph module where there is one), kfuse_py_us (the partition's entry to
    kf_program_run_device: finding the program, checking and binding the
    inputs, allocating the outputs), c_run_us (kf_program_run_device itself:
    the bindings' checks, the launch or graph replay), after_us (its return
    to the call's end), total_us. Each mark costs the host a fraction of a
    microsecond, so the parts add up to a little more than an unmarked call."""
    import statistics

    from kfuse import torch_backend as tb

    m = tb._bench_marks
    rows = {k: [] for k in ("dynamo_aot_us", "kfuse_py_us", "c_run_us", "after_us", "total_us")}
    for _ in range(reps):
        sync()
        m.clear()
        t0 = time.perf_counter_ns()
        fn()
        t1 = time.perf_counter_ns()
        if len(m) != 3:
            return {"error": f"{len(m)} marks in a call (a call with one partition makes 3)"}
        rows["dynamo_aot_us"].append(m[0] - t0)
        rows["kfuse_py_us"].append(m[1] - m[0])
        rows["c_run_us"].append(m[2] - m[1])
        rows["after_us"].append(t1 - m[2])
        rows["total_us"].append(t1 - t0)
    sync()
    return {k: round(statistics.median(v) / 1e3, 2) for k, v in rows.items()}


def _marks():
    """Wraps the partition's entry and kf_program_run_device with
    perf_counter_ns marks (into torch_backend._bench_marks); install before
    torch.compile, since a compiled graph keeps the partition's call."""
    from kfuse import _core
    from kfuse import torch_backend as tb

    m = tb._bench_marks = []
    clock = time.perf_counter_ns
    part = tb._KfusePartition
    name = "call" if hasattr(part, "call") else "forward"  # a package from before call()
    orig = getattr(part, name)

    def entry(self, *a, **k):
        m.append(clock())
        tb._bench_last = (self, a)  # the partition and its arguments (latency_parts)
        return orig(self, *a, **k)
    setattr(part, name, entry)
    lib = _core._L()
    runs = {n: getattr(lib, n) for n in ("kf_program_run_device", "kf_program_run")}

    def marked(run):
        def c_run(*a):
            m.append(clock())
            r = run(*a)
            m.append(clock())
            return r
        return c_run
    for n, run in runs.items():
        setattr(lib, n, marked(run))

    def undo():
        setattr(part, name, orig)
        for n, run in runs.items():
            setattr(lib, n, run)
    return undo


def latency_parts(part, args, reps):
    """The host microseconds of the parts of a kfuse partition's call, each
    timed alone after a synchronize (host_us): the partition's call (the
    guard, the outputs, the binding, the C run), the guard over the inputs,
    the outputs' allocation, kf_program_run_device alone (bound to outputs
    held here), and the ctypes call of it refused at once (a NULL program:
    the price of crossing into C with these arguments)."""
    prog = next(iter(part.programs.values()))
    fp = prog._fast
    res = {"partition_call_us": host_us(lambda: part.call(args), reps)}
    if fp is None or fp.idx < 0:
        return res
    if fp.guard is not None:
        res["guard_us"] = host_us(lambda: fp.guard.check(*args), reps)
    res["outputs_us"] = host_us(
        lambda: [fp.empty(s, dtype=d, device=fp.dev) for d, s in fp.tout], reps)
    outs = [fp.empty(s, dtype=d, device=fp.dev) for d, s in fp.tout]
    with prog._lock:
        for i, a in enumerate(args):
            fp.words_in[fp.slot * i + 1] = a.data_ptr()
        for i, o in enumerate(outs):
            fp.words_out[fp.slot * i + 1] = o.data_ptr()
        run, h, stream = prog._lib.kf_program_run_device, prog._h, fp.raw_stream(fp.idx)
        res["c_run_us"] = host_us(lambda: run(h, fp.bi, fp.n_in, fp.bo, fp.n_out, stream), reps)
        res["ctypes_floor_us"] = host_us(
            lambda: run(None, fp.bi, fp.n_in, fp.bo, fp.n_out, stream), reps)
    res["bindings"] = fp.n_in + fp.n_out
    return res


def steady_child(spec):
    """Per-call numbers of kfuse's backend in this process's package (a
    child run with another PYTHONPATH measures another package): per block,
    eager's and kfuse's per-call and back-to-back times, kfuse's host-time
    breakdown, and the no-op backend's host time (Dynamo and AOTAutograd
    alone). kfuse's programs come from `cache`, filled by the parent."""
    import kfuse
    import torch
    from kfuse.torch_backend import make_backend

    global SMOKE
    SMOKE = spec.get("smoke", False)
    if spec.get("kfuse_lib"):
        kfuse.load_library(spec["kfuse_lib"])
    out = {"package": os.path.dirname(os.path.abspath(kfuse.__file__))}
    from kfuse import _core

    programs = []
    compile_ = _core.Context.compile

    def keep(self, graph):  # the programs, for their CUDA graph replays
        p = compile_(self, graph)
        programs.append(p)
        return p
    _core.Context.compile = keep
    for name, mod, xs, kw in blocks(spec["blocks"]):
        row = out.setdefault(name, {})
        with torch.no_grad():
            ref = first(mod(*xs, **kw)).float()
            if spec.get("eager"):
                row["eager_ms"] = per_call_ms(lambda: mod(*xs, **kw))
            torch._dynamo.reset()
            programs.clear()
            fn = torch.compile(mod, backend=make_backend(cache_dir=spec["cache"]))
            y = first(fn(*xs, **kw))
            row["kfuse_rel_err"] = ((y.float() - ref).norm() / ref.norm()).item()
            row["kfuse_ms"] = per_call_ms(lambda: fn(*xs, **kw))
            row["kfuse_loop_ms"] = loop_ms(lambda: fn(*xs, **kw))
            row["kfuse_host_us"] = host_us(lambda: fn(*xs, **kw), spec["reps"])
            row["kfuse_runs"] = [{k: (p.report(format="json").get("cuda_run") or {}).get(k)
                                  for k in ("launches_per_run", "captured_graphs",
                                            "captured_replays")} for p in programs]
            if not SMOKE:  # a single call's start to its first kernel (the profiler)
                row["kfuse_profile"] = {
                    k: v for k, v in profile_calls(lambda: fn(*xs, **kw), 20,
                                                   tempfile.mkdtemp(prefix="kfuse-steady-"),
                                                   name).items()
                    if k in ("single_calls", "busy_ms_per_call", "span_ms_per_call")}
            # the same calls with the marks: a graph compiled after they are in
            torch._dynamo.reset()
            undo = _marks()
            try:
                fn = torch.compile(mod, backend=make_backend(cache_dir=spec["cache"]))
                fn(*xs, **kw)
                row["kfuse_breakdown_us"] = host_breakdown(lambda: fn(*xs, **kw), spec["reps"])
            finally:
                undo()
            from kfuse import torch_backend as tb

            last = getattr(tb, "_bench_last", None)
            if last is not None and not SMOKE:
                row["kfuse_latency_parts_us"] = latency_parts(last[0], last[1][0], spec["reps"])
            torch._dynamo.reset()
            noop = torch.compile(mod, backend=_noop_backend())
            noop(*xs, **kw)
            row["noop_backend_host_us"] = host_us(lambda: noop(*xs, **kw), spec["reps"])
            if not SMOKE and hasattr(torch.cuda, "_sleep"):
                # the same after waiting for ~0.5 ms of GPU work, as kfuse's calls
                # (and Inductor's) wait for the last call's kernels: a thread
                # that waited starts its next call slower than one that did not
                wait = lambda: torch.cuda._sleep(1000000)  # noqa: E731
                row["noop_backend_host_us_after_gpu_wait"] = host_us(
                    lambda: noop(*xs, **kw), spec["reps"], pre=wait)
            del fn, noop
            torch._dynamo.reset()
    print("CHILD " + json.dumps(out), flush=True)


# ---------------------------------------------------------------------------
# Where a block's call time goes on the GPU (--gap): idle gaps and clocks
# ---------------------------------------------------------------------------

SMI_FIELDS = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"


def smi_start():
    """nvidia-smi sampling the SM and memory clocks, power, temperature (and
    the clock event reasons, where this nvidia-smi has them) every 50 ms into
    a temporary file: (process, path, field names), or None. It only reads:
    no clock is set."""
    tries = (SMI_FIELDS, SMI_FIELDS.replace("clocks_event_reasons", "clocks_throttle_reasons"),
             SMI_FIELDS.rsplit(",", 1)[0])
    for fields in tries:
        cmd = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"]
        try:
            if subprocess.run(cmd, capture_output=True, timeout=30).returncode != 0:
                continue
        except (OSError, subprocess.TimeoutExpired):
            return None
        f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
        return subprocess.Popen(cmd + ["-lms", "50"], stdout=f, stderr=subprocess.DEVNULL), \
            f.name, fields.split(",")
    return None


def smi_window(smi, t_from, t_to):
    """The samples between two datetime.now() marks: medians of each field,
    min/max SM clock, the clock event reasons seen (bit masks, hex)."""
    import datetime
    import statistics

    if smi is None:
        return None
    _, path, names = smi
    rows = []
    with open(path) as f:
        for line in f:
            v = [x.strip() for x in line.split(",")]
            if len(v) != len(names):
                continue
            try:
                t = datetime.datetime.strptime(v[0], "%Y/%m/%d %H:%M:%S.%f")
            except ValueError:
                continue
            if t_from <= t <= t_to:
                rows.append(v)
    if not rows:
        return {"samples": 0}
    out = {"samples": len(rows)}
    for i, n in enumerate(names[1:], 1):
        if "reasons" in n:
            out[n] = sorted({r[i] for r in rows})
            continue
        try:
            vals = [float(r[i]) for r in rows]
        except ValueError:
            continue
        out[n] = round(statistics.median(vals), 1)
        if n == "clocks.sm":
            out["clocks.sm_min"], out["clocks.sm_max"] = min(vals), max(vals)
    return out


def analyse_trace(path, reps):
    """From a torch.profiler Chrome trace of `reps` calls back to back: per
    call, the GPU span (first activity's start to last's end), the time some
    kernel, copy or memset ran (the union), the kernels' summed time, the
    idle time, the largest idle gaps by the activities around them, and the
    host API calls by name (a synchronize in the loop shows here)."""
    with open(path) as f:
        ev = json.load(f).get("traceEvents", [])
    gpu = sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                  and "dur" in e), key=lambda e: e["ts"])
    if not gpu:
        return {"error": "no GPU activity in the trace"}
    start, end, busy, cur_s, cur_e = gpu[0]["ts"], 0.0, 0.0, None, None
    gaps, prev = {}, None
    for e in gpu:
        s0, e0 = e["ts"], e["ts"] + e["dur"]
        if cur_e is not None and s0 > cur_e:
            key = f"{prev[:70]} -> {e['name'][:70]}"
            g = gaps.setdefault(key, [0.0, 0])
            g[0] += s0 - cur_e
            g[1] += 1
        if cur_e is None or s0 > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s0, e0
        else:
            cur_e = max(cur_e, e0)
        end = max(end, e0)
        prev = e["name"]
    busy += cur_e - cur_s
    span = end - start
    kinds = {}
    for e in gpu:
        k = kinds.setdefault(e["cat"], [0, 0.0])
        k[0] += 1
        k[1] += e["dur"]
    api = {}
    for e in ev:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "dur" in e:
            a = api.setdefault(e["name"], [0, 0.0])
            a[0] += 1
            a[1] += e["dur"]
    top = sorted(gaps.items(), key=lambda kv: -kv[1][0])[:10]
    r = lambda x: round(x / reps / 1e3, 4)  # noqa: E731 - us over the loop -> ms a call
    return {
        "span_ms_per_call": r(span), "busy_ms_per_call": r(busy),
        "idle_ms_per_call": r(span - busy),
        "by_kind_per_call": {k: {"count": round(v[0] / reps, 2), "ms": r(v[1])}
                             for k, v in kinds.items()},
        "largest_gaps_per_call": [{"between": k, "ms": r(v[0]), "count": round(v[1] / reps, 2)}
                                  for k, v in top],
        "host_api_per_call": {k: {"count": round(v[0] / reps, 2), "ms": r(v[1])}
                              for k, v in sorted(api.items(), key=lambda kv: -kv[1][1])[:12]},
    }


def gap(name, mod, xs, kw, variants, reps, trace_dir):
    """For each (label, fn) of `variants`, in order, the block's calls back
    to back: CUDA-event time per call with nvidia-smi's clocks over the loop,
    then the same loop under torch.profiler (analyse_trace) with its clocks.
    The profiler's kernel table of earlier runs came from a separate,
    shorter run; here the kernels are timed in the very loop whose wall time
    is compared with them."""
    import datetime

    import torch
    from torch.profiler import ProfilerActivity, profile

    smi = smi_start()
    res = {"reps": reps, "smi": smi is not None}
    try:
        for label, fn in variants:
            call = lambda: fn(*xs, **kw)  # noqa: E731
            for _ in range(3):
                call()
            sync()
            row = res.setdefault(label, {})
            a = datetime.datetime.now()
            row["loop_ms"] = loop_ms(call, reps)
            row["smi_loop"] = smi_window(smi, a, datetime.datetime.now())
            row["single_call_ms"] = median_ms(call)
            a = datetime.datetime.now()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(reps):
                    call()
                torch.cuda.synchronize()
            row["smi_profiled"] = smi_window(smi, a, datetime.datetime.now())
            path = os.path.join(trace_dir, f"gap-{name}-{label}.json")
            prof.export_chrome_trace(path)
            row.update(analyse_trace(path, reps))
            print("gap", name, label, json.dumps(row), flush=True)
    finally:
        if smi is not None:
            smi[0].terminate()
    return res



# ---------------------------------------------------------------------------
# The headline (--headline): Inductor and kfuse interleaved in one process
# ---------------------------------------------------------------------------

def kernel_table(path, reps):
    """{kernel name: [calls a call, ms a call]} of a profiler trace of `reps`
    calls, GPU activity (kernels, copies, memsets) by name."""
    with open(path) as f:
        ev = json.load(f).get("traceEvents", [])
    tab = {}
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e:
            t = tab.setdefault(e["name"], [0, 0.0])
            t[0] += 1
            t[1] += e["dur"]
    return {k: [round(v[0] / reps, 2), round(v[1] / reps / 1e3, 4)]
            for k, v in sorted(tab.items(), key=lambda kv: -kv[1][1])}


def call_sequence(path, reps):
    """One call's GPU activities in launch order, [name, median us over the
    calls] each, from a profiler trace of `reps` calls back to back whose
    activities split evenly into calls (else None): which kernel of a call
    took how long, position by position (e.g. a GEMM group's own kernels,
    where two groups launch kernels of one name)."""
    import statistics

    with open(path) as f:
        ev = json.load(f).get("traceEvents", [])
    gpu = sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                  and "dur" in e), key=lambda e: e["ts"])
    if not gpu or reps <= 0 or len(gpu) % reps:
        return None
    n = len(gpu) // reps
    seq = []
    for i in range(n):
        names = {gpu[c * n + i]["name"] for c in range(reps)}
        if len(names) != 1:
            return None
        seq.append([gpu[i]["name"], round(statistics.median(gpu[c * n + i]["dur"]
                                                            for c in range(reps)), 2)])
    return seq


CALL_MARK = "torch_blocks_call"


def first_kernel(path):
    """From a profiler trace of single calls (each after a synchronize,
    each inside record_function(CALL_MARK)): medians over the calls of the
    microseconds from the call's start to its first GPU activity (kernel,
    copy or memset: the GPU waited that long for the host), to its first
    launch API call (runtime or driver, where CUPTI records it), the host's
    time in the call, and the GPU span of the call's activity."""
    import statistics

    with open(path) as f:
        ev = json.load(f).get("traceEvents", [])
    anns = sorted((e for e in ev if e.get("cat") == "user_annotation"
                   and e.get("name") == CALL_MARK), key=lambda e: e["ts"])
    gpu = sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                  and "dur" in e), key=lambda e: e["ts"])
    api = sorted((e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")
                  and "Launch" in e.get("name", "")), key=lambda e: e["ts"])
    rows = {"first_gpu_us": [], "first_launch_us": [], "host_us": [], "gpu_span_us": []}
    names = {}
    for i, a in enumerate(anns):
        t0 = a["ts"]
        t1 = anns[i + 1]["ts"] if i + 1 < len(anns) else float("inf")
        mine = [g for g in gpu if t0 <= g["ts"] < t1]
        if not mine:
            continue
        rows["first_gpu_us"].append(mine[0]["ts"] - t0)
        names[mine[0]["name"][:60]] = names.get(mine[0]["name"][:60], 0) + 1
        rows["gpu_span_us"].append(max(g["ts"] + g["dur"] for g in mine) - mine[0]["ts"])
        rows["host_us"].append(a.get("dur", 0.0))
        la = next((x for x in api if t0 <= x["ts"] <= t0 + a.get("dur", 0.0)), None)
        if la is not None:
            rows["first_launch_us"].append(la["ts"] - t0)
    out = {k: round(statistics.median(v), 2) for k, v in rows.items() if v}
    out["calls"] = len(rows["first_gpu_us"])
    out["first_activity"] = names
    return out


def profile_calls(call, reps, trace_dir, tag):
    """The profiler over `reps` calls back to back (analyse_trace: GPU span,
    busy, idle, gaps; kernel_table) and over `reps` single calls
    (first_kernel: the call's start to its first GPU activity)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    for _ in range(3):
        call()
    sync()
    with profile(activities=acts) as prof:
        for _ in range(reps):
            call()
        torch.cuda.synchronize()
    p1 = os.path.join(trace_dir, f"loop-{tag}.json")
    prof.export_chrome_trace(p1)
    out = analyse_trace(p1, reps)
    out["kernels"] = kernel_table(p1, reps)
    out["sequence"] = call_sequence(p1, reps)
    with profile(activities=acts) as prof:
        for _ in range(reps):
            torch.cuda.synchronize()
            with record_function(CALL_MARK):
                call()
        torch.cuda.synchronize()
    p2 = os.path.join(trace_dir, f"single-{tag}.json")
    prof.export_chrome_trace(p2)
    out["single_calls"] = first_kernel(p2)
    return out


def _measured(programs):
    """Each CUDA program's measured GEMM choices (group, chosen side, ms of
    each side) and whether its tiered compile is still pending."""
    res = []
    for p in programs:
        run = p.report(format="json").get("cuda_run") or {}
        res.append({"measured": [{k: m.get(k) for k in ("group", "chosen", "ms", "tiered")}
                                 for m in run.get("measured", [])],
                    "tiered_compile": run.get("tiered_compile"),
                    "captured_graphs": run.get("captured_graphs"),
                    "captured_replays": run.get("captured_replays")})
    return res


# --headline-variants: kfuse's variants beside Inductor in the headline (make_backend's
# options; shared_cache: on the plain kfuse variant's cache, so its measured times)
HEADLINE_VARIANTS = {
    "kfuse": {"tiered_compile": False},
    "kfuse_tiered": {"tiered_compile": True},
    "kfuse_gen": {"tiered_compile": False, "gemm": "generated", "shared_cache": True},
    "kfuse_lt": {"tiered_compile": False, "gemm": "cublaslt", "shared_cache": True},
}


def headline_variant(label):
    """HEADLINE_VARIANTS[label], or for kfuse_bias<F> (e.g. kfuse_bias0.025)
    kfuse with choice_load_bias F on kfuse's cache (the same measured times,
    picked again) and kfuse_margin<F> likewise with choice_margin F."""
    for prefix, key in (("kfuse_bias", "choice_load_bias"), ("kfuse_margin", "choice_margin")):
        if label.startswith(prefix):
            return {"tiered_compile": False, key: float(label[len(prefix):]),
                    "shared_cache": True}
    return HEADLINE_VARIANTS[label]


def abba_block(call, n, tail, trace_dir, tag):
    """One block of `n` calls back to back: the first half untimed (the GPU
    settles at the clocks this variant's own power draw leaves), the second
    half timed by CUDA events (ms a call), then `tail` more calls under the
    profiler (CUDA activity only) for call_sequence: each kernel's time at
    that sustained state."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    half = n // 2
    for _ in range(half):
        call()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n - half):
        call()
    e1.record()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(tail):
            call()
        torch.cuda.synchronize()
    path = os.path.join(trace_dir, f"abba-{tag}.json")
    prof.export_chrome_trace(path)
    return {"ms": round(e0.elapsed_time(e1) / (n - half), 4), "calls": n,
            "sequence": call_sequence(path, tail)}


def abba(fns, pairs, block_s, n_rounds, loop_ms, trace_dir, name, smi):
    """--abba: each pair A:B of the headline's variants in blocks A B B A
    (n_rounds times) of about block_s seconds each, back to back (abba_block):
    each variant at the clocks its own power draw leaves under sustained
    load, the temperature's drift cancelled. Per pair the blocks, each
    side's median ms a call, B over A, and each side's kernels position by
    position (the median over its blocks)."""
    import datetime
    import statistics

    out = {}
    for pair in pairs:
        a, _, b = pair.partition(":")
        if a not in fns or b not in fns:
            out[pair] = {"error": "a side did not compile"}
            continue
        blocks, seqs = [], {a: [], b: []}
        for r in range(n_rounds):
            for i, lb in enumerate((a, b, b, a)):
                call = (lambda f: lambda: f())(fns[lb])
                n = max(20, int(block_s * 1e3 / max(loop_ms.get(lb) or 1.0, 0.01)))
                t_a = datetime.datetime.now()
                blk = abba_block(call, n, max(5, min(30, n // 8)), trace_dir,
                                 f"{name}-{lb}-{r}-{i}")
                w = smi_window(smi, t_a, datetime.datetime.now()) or {}
                blk.update({"label": lb, "sm_mhz": w.get("clocks.sm"),
                            "power_w": w.get("power.draw")})
                if blk.get("sequence"):
                    seqs[lb].append(blk.pop("sequence"))
                blocks.append(blk)
        row = {"A": a, "B": b, "blocks": blocks}
        for side, lb in (("A", a), ("B", b)):
            row[side + "_ms"] = round(statistics.median(
                x["ms"] for x in blocks if x["label"] == lb), 4)
            ok = [q for q in seqs[lb] if len(q) == len(seqs[lb][0])
                  and [k for k, _ in q] == [k for k, _ in seqs[lb][0]]]
            row[side + "_sequence"] = ([[seqs[lb][0][i][0], round(statistics.median(
                q[i][1] for q in ok), 2)] for i in range(len(seqs[lb][0]))]
                if seqs[lb] else None)
        row["B_over_A"] = round(row["B_ms"] / row["A_ms"], 4)
        print(name, "abba", a, row["A_ms"], b, row["B_ms"], "B/A", row["B_over_A"],
              [(x["label"], x["ms"], x["sm_mhz"]) for x in blocks], flush=True)
        out[pair] = row
    return out


def headline(names, rounds, trace_dir, res, save, variants=("kfuse", "kfuse_tiered"),
             abba_pairs=(), abba_s=1.0, abba_rounds=1):
    """The headline in one process: per block, Inductor, kfuse (tiered
    compile off, on an empty cache) and kfuse with the tiered compile (on
    another empty cache; called until its programs report the measured
    winners swapped in), or the kfuse `variants` named (HEADLINE_VARIANTS:
    also each GEMM group forced to one side of its measured choice, and
    other choice load biases on kfuse's cache, so the same measured times);
    then `rounds` rounds, each variant in turn (the
    order reversed every other round), of single calls (median_ms) and calls
    back to back (loop_ms), each with nvidia-smi's clocks and power over it;
    the medians over the rounds; then for each variant the profiler's kernel
    table and per-call GPU time (calls back to back) and the time from a
    single call's start to its first GPU activity; the host time of a call."""
    import datetime
    import statistics

    import torch

    from kfuse import _core
    from kfuse.torch_backend import last_report, make_backend

    holder = {"list": None}
    compile_ = _core.Context.compile

    def keep(self, graph):  # each variant's programs, for their reports
        p = compile_(self, graph)
        if holder["list"] is not None:
            holder["list"].append(p)
        return p
    _core.Context.compile = keep
    smi = smi_start()
    out = res.setdefault("headline", {"rounds": rounds, "smi": smi is not None})
    try:
        for name, mod, xs, kw in blocks(names):
            row = out.setdefault(name, {})
            reps = 15 if name == "llama7b" else 100
            row["reps"] = reps
            with torch.no_grad():
                ref = first(mod(*xs, **kw)).float()
                fns, progs = {}, {}

                def err(fn):
                    y = first(fn(*xs, **kw)).float()
                    return ((y - ref).norm() / ref.norm()).item()

                def make(label, maker):
                    holder["list"] = progs.setdefault(label, [])
                    try:
                        fn = maker()
                        row[label + "_first_call_in_process_s"] = round(
                            timed_first_call(lambda: fn(*xs, **kw))[0], 3)
                        row[label + "_rel_err"] = err(fn)
                        fns[label] = fn
                    except Exception as e:  # noqa: BLE001 - recorded, the rest goes on
                        row[label + "_error"] = str(e)[:1500]
                    finally:
                        holder["list"] = None

                torch._dynamo.reset()
                make("inductor", lambda: torch.compile(mod))
                head_cache = tempfile.mkdtemp(prefix="kfuse-head-")
                make("kfuse", lambda: torch.compile(mod, backend=make_backend(
                    cache_dir=head_cache, tiered_compile=False)))
                row["kfuse_report"] = last_report()
                for lb in variants:
                    if lb == "kfuse":
                        continue
                    opts = dict(headline_variant(lb))
                    opts["cache_dir"] = (head_cache if opts.pop("shared_cache", False)
                                         else tempfile.mkdtemp(prefix="kfuse-" + lb + "-"))
                    make(lb, (lambda o: lambda: torch.compile(mod, backend=make_backend(**o)))(
                        opts))
                    if lb != "kfuse_tiered":
                        row[lb + "_report"] = last_report()
                if "kfuse_tiered" in fns:
                    ft = fns["kfuse_tiered"]
                    row["tiered_swap"] = _until_swap(progs["kfuse_tiered"],
                                                     lambda: ft(*xs, **kw))
                    row["kfuse_tiered_rel_err_after_swap"] = err(ft)
                for label in progs:
                    if label != "inductor":
                        row[label + "_programs"] = _measured(progs.get(label, []))
                if "kfuse_tiered" in progs:
                    a = [m["chosen"] for p in row["kfuse_programs"] for m in p["measured"]]
                    b = [m["chosen"] for p in row["kfuse_tiered_programs"]
                         for m in p["measured"]]
                    row["tiered_same_choices"] = a == b
                save()
                order = list(fns)
                per = {lb: {"single_ms": [], "loop_ms": [], "sm_mhz": [], "power_w": []}
                       for lb in order}
                for r in range(rounds):
                    for lb in (order if r % 2 == 0 else order[::-1]):
                        call = (lambda f: lambda: f(*xs, **kw))(fns[lb])
                        for _ in range(3):
                            call()
                        sync()
                        t_a = datetime.datetime.now()
                        per[lb]["single_ms"].append(
                            loop_ms(call, 5) if SMOKE else median_ms(call, warmup=2, reps=reps))
                        per[lb]["loop_ms"].append(loop_ms(call, reps))
                        w = smi_window(smi, t_a, datetime.datetime.now()) or {}
                        per[lb]["sm_mhz"].append(w.get("clocks.sm"))
                        per[lb]["power_w"].append(w.get("power.draw"))
                row["rounds"] = per
                for lb in order:
                    for k in ("single_ms", "loop_ms"):
                        row[f"{lb}_{k}"] = round(statistics.median(per[lb][k]), 4)
                if "inductor" in fns:
                    for lb in order:
                        if lb != "inductor":
                            row[f"{lb}_over_inductor_single"] = round(
                                row[f"{lb}_single_ms"] / row["inductor_single_ms"], 4)
                            row[f"{lb}_over_inductor_loop"] = round(
                                row[f"{lb}_loop_ms"] / row["inductor_loop_ms"], 4)
                print(name, {k: v for k, v in row.items()
                             if k.endswith(("_ms", "_single", "_loop", "_s", "err"))}, flush=True)
                save()
                if abba_pairs and not SMOKE:
                    row["abba"] = abba({lb: (lambda f: lambda: f(*xs, **kw))(fns[lb])
                                        for lb in fns}, abba_pairs, abba_s, abba_rounds,
                                       {lb: row.get(lb + "_loop_ms") for lb in fns}, trace_dir,
                                       name, smi)
                    row["abba_block_s"] = abba_s
                    save()
                for lb in order:
                    call = (lambda f: lambda: f(*xs, **kw))(fns[lb])
                    row[lb + "_host_us"] = host_us(call, 50)
                    if SMOKE:
                        continue
                    t_a = datetime.datetime.now()
                    prof = profile_calls(call, 10 if name == "llama7b" else 30, trace_dir,
                                         f"{name}-{lb}")
                    prof["smi"] = smi_window(smi, t_a, datetime.datetime.now())
                    row[lb + "_profile"] = prof
                    print(name, lb, "profile:", {k: v for k, v in prof.items()
                                                 if k not in ("kernels", "largest_gaps_per_call",
                                                              "host_api_per_call")}, flush=True)
                save()
                fns.clear()  # the compiled graphs and programs go before the next block
                progs.clear()
                torch._dynamo.reset()
    finally:
        _core.Context.compile = compile_
        if smi is not None:
            smi[0].terminate()
    return out


def kernel_text(head):
    """The headline's kernel tables as text, one section a block and variant."""
    lines = []
    for name, row in head.items():
        if not isinstance(row, dict):
            continue
        for key, prof in row.items():
            if not key.endswith("_profile"):
                continue
            label = key[:-len("_profile")]
            sc = prof.get("single_calls", {})
            smi = prof.get("smi") or {}
            lines.append(f"==== {name} {label}: GPU busy {prof.get('busy_ms_per_call')} ms/call, "
                         f"span {prof.get('span_ms_per_call')} (back to back); single call: "
                         f"first GPU activity {sc.get('first_gpu_us')} us after the call's "
                         f"start, host {sc.get('host_us')} us; SM clock {smi.get('clocks.sm')} "
                         f"MHz ({smi.get('clocks.sm_min')}-{smi.get('clocks.sm_max')}), "
                         f"{smi.get('power.draw')} W")
            for k, (n, ms) in prof.get("kernels", {}).items():
                lines.append(f"  {ms:8.4f} ms x{n:<5} {k[:110]}")
    return "\n".join(lines) + "\n"


def per_call_ms(fn):
    """median_ms (CUDA events, each call alone), or with --smoke wall time."""
    return loop_ms(fn, 5) if SMOKE else median_ms(fn)


def host_us(fn, reps, pre=None):
    """Median host microseconds of a call, each after a synchronize (and
    after pre(), untimed, before the synchronize: e.g. GPU work to wait for,
    so that a call with nothing on the GPU starts from the same wait as one
    after a block's kernels)."""
    import statistics

    t = []
    for _ in range(reps):
        if pre is not None:
            pre()
        sync()
        t0 = time.perf_counter_ns()
        fn()
        t.append(time.perf_counter_ns() - t0)
    sync()
    return round(statistics.median(t) / 1e3, 2)


COLD = {"CUDA_CACHE_DISABLE": "1"}  # NVRTC's and the driver's compute cache off: a real compile


def run_child(spec, env=None, timeout=180):
    """One fresh process running `spec`; its JSON line (with process_s, the
    child's whole wall time), or {"error": ...}."""
    e = dict(os.environ)
    e.update(env or {})
    t = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--commit", "-",
                            "--child", json.dumps(spec)], env=e, capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    for line in r.stdout.splitlines():
        if line.startswith("CHILD "):
            return dict(json.loads(line[6:]), process_s=round(time.perf_counter() - t, 1))
    return {"error": (r.stderr or r.stdout)[-1500:]}


def fresh_first_calls(name, lib, inductor, row, no_background):
    """kfuse's (and Inductor's) first calls of block `name`, each in a new
    process; with `no_background`, also kfuse's warm one compiled at the call."""
    kcache = tempfile.mkdtemp(prefix="kfuse-bench-")
    base = {"block": name, "kfuse_lib": lib, "smoke": SMOKE}
    c = run_child(dict(base, backend="kfuse", cache=kcache), COLD)
    row["kfuse_first_call_s"] = c.get("first_call_s")
    row["kfuse_first_call_detail"] = c
    if TIER_COMPARE:  # the same cold call without the tiered compile, on its own cache
        c = run_child(dict(base, backend="kfuse", cache=tempfile.mkdtemp(prefix="kfuse-bench-"),
                           options={"tiered_compile": False}), COLD)
        row["kfuse_first_call_untiered_s"] = c.get("first_call_s")
        row["kfuse_first_call_untiered_detail"] = c
    c = run_child(dict(base, backend="kfuse", cache=kcache,
                       options={"flags": ["cache_read_only", "cache_fail_on_miss"]}))
    row["kfuse_first_call_warm_cache_s"] = c.get("first_call_s")
    row["kfuse_first_call_warm_cache_detail"] = c
    if no_background:
        c = run_child(dict(base, backend="kfuse", cache=kcache,
                           options={"flags": ["cache_read_only", "cache_fail_on_miss"],
                                    "background_compile": False}))
        row["kfuse_first_call_warm_cache_no_background_compile_s"] = c.get("first_call_s")
        row["kfuse_first_call_warm_cache_no_background_compile_detail"] = c
    if inductor:
        icache = tempfile.mkdtemp(prefix="inductor-bench-")
        env = {"TORCHINDUCTOR_CACHE_DIR": icache}
        for key, cold in (("inductor_first_call", COLD), ("inductor_first_call_warm_cache", {})):
            c = run_child(dict(base, backend="inductor"), dict(env, **cold))
            row[key + "_s"] = c.get("first_call_s")
            if "error" in c:
                row[key + "_error"] = c["error"]


def diagnose_after_inductor(name, lib, res, save):
    """kfuse's cold first call after Inductor's first call in a fresh process
    (as in the bench process), with Inductor's compile workers left running,
    shut down first, or never started; each with an empty Inductor cache and
    CUDA_CACHE_DISABLE=1 (a real NVRTC compile). Into `res`, save() after each."""
    for label, then, env in (("workers_left", None, {}),
                             ("workers_shut_down", "shutdown_workers", {}),
                             ("compile_threads_1", None, {"TORCHINDUCTOR_COMPILE_THREADS": "1"})):
        env = dict(env, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="inductor-diag-"), **COLD)
        res[label] = run_child({"block": name, "kfuse_lib": lib, "smoke": SMOKE,
                                "backend": "kfuse",
                                "cache": tempfile.mkdtemp(prefix="kfuse-diag-"),
                                "before": "inductor", "then": then}, env)
        print("after inductor", label, res[label], flush=True)
        save()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--commit", required=True)
    ap.add_argument("--out", default="-")
    ap.add_argument("--blocks", default="gpt2_medium,llama7b")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--fresh", default="all", metavar="BLOCKS",
                    help="the blocks whose first calls are measured in fresh processes "
                         "(all, none, or names)")
    ap.add_argument("--diagnose-after-inductor", default=None, metavar="BLOCK",
                    help="only the after-Inductor diagnosis of BLOCK (fresh processes)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny blocks on the CPU in f32 (wall-clock timing): tries the harness")
    ap.add_argument("--compare", default=None, metavar="NAME=DIR,...",
                    help="per-call numbers of kfuse's backend from each Python package DIR "
                         "(the folder holding its kfuse/), each in a child process, after "
                         "the rest: e.g. before=/tmp/main/python,after=python")
    ap.add_argument("--steady", default="all", metavar="BLOCKS",
                    help="the blocks measured in this process after the fresh ones (all, "
                         "none, or names)")
    ap.add_argument("--fresh-kfuse-only", action="store_true",
                    help="fresh processes for kfuse's cold and warm first calls only (no "
                         "Inductor, no call compiled without the background thread)")
    ap.add_argument("--kfuse-cache", default=None, metavar="DIR",
                    help="the kfuse cache of this process's calls and --compare's (default: "
                         "a new empty one each); the fresh processes always start empty")
    ap.add_argument("--compare-blocks", default=None, metavar="BLOCKS",
                    help="the blocks --compare measures (default: --blocks)")
    ap.add_argument("--host-reps", type=int, default=200,
                    help="calls per host-time median (--compare)")
    ap.add_argument("--tier-compare", action="store_true",
                    help="the fresh processes also measure kfuse's cold first call without "
                         "the tiered compile (tiered_compile=False)")
    ap.add_argument("--gap", default=None, metavar="BLOCKS",
                    help="only where each block's call time goes on the GPU: kfuse's and "
                         "Inductor's calls back to back, timed, profiled (idle gaps, host API "
                         "calls) and with nvidia-smi's clocks (kfuse, Inductor, kfuse again)")
    ap.add_argument("--gap-reps", type=int, default=60, help="calls per --gap loop")
    ap.add_argument("--headline", default=None, metavar="BLOCKS",
                    help="the headline first: Inductor, kfuse (tiered compile off) and kfuse "
                         "with the tiered compile (after its swap) in this process, interleaved "
                         "over --rounds rounds, with clocks, the profiler's kernel tables and "
                         "each single call's start to its first kernel; then whatever else the "
                         "other options ask")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of --headline")
    ap.add_argument("--headline-variants", default="kfuse,kfuse_tiered", metavar="LIST",
                    help="kfuse's variants in --headline: kfuse (tiered compile off), "
                         "kfuse_tiered, kfuse_gen / kfuse_lt (every GEMM group forced to the "
                         "generated kernel / cuBLASLt: each measured choice's sides under the "
                         "block's load), kfuse_biasF / kfuse_marginF (choice_load_bias / "
                         "choice_margin F on kfuse's cache: its measured times picked again)")
    ap.add_argument("--abba", default=None, metavar="A:B,...",
                    help="after --headline's rounds, each pair of its variants (e.g. "
                         "kfuse_gen:kfuse_lt) in blocks A B B A of --abba-block seconds of "
                         "calls back to back, the second half of each timed and the kernels "
                         "after it profiled: the sides at their own sustained clocks")
    ap.add_argument("--abba-block", type=float, default=1.0, metavar="SEC")
    ap.add_argument("--abba-rounds", type=int, default=1, help="A B B A sequences a pair")
    ap.add_argument("--table", default=None, metavar="FILE",
                    help="where --headline writes its kernel tables as text")
    ap.add_argument("--trace-dir", default=None,
                    help="where --gap writes its profiler traces (default: a temporary folder)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--kfuse-lib", default=None,
                    help="libkfuse.so to load (with python/ on the path when the package "
                         "is not installed)")
    args = ap.parse_args()

    try:
        import kfuse
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "python"))
        import kfuse
    if args.child:
        return child(json.loads(args.child))
    global SMOKE, TIER_COMPARE
    SMOKE = args.smoke
    TIER_COMPARE = args.tier_compare
    lib = os.path.abspath(args.kfuse_lib) if args.kfuse_lib else None
    if lib:
        kfuse.load_library(lib)
        os.environ["KFUSE_LIBRARY"] = lib
    import torch

    res = {"device": "cpu (--smoke)" if SMOKE else torch.cuda.get_device_name(), "commit": args.commit,
           "torch": torch.__version__, "kfuse": kfuse.version(), "blocks": {}}
    if args.diagnose_after_inductor:
        res["after_inductor"] = {args.diagnose_after_inductor: {}}
        diagnose_after_inductor(args.diagnose_after_inductor, lib,
                                res["after_inductor"][args.diagnose_after_inductor],
                                lambda: args.out != "-" and write(res, args.out))
        return write(res, args.out)
    if args.gap:
        from kfuse.torch_backend import make_backend

        trace_dir = args.trace_dir or tempfile.mkdtemp(prefix="kfuse-gap-")
        os.makedirs(trace_dir, exist_ok=True)
        cache = args.kfuse_cache or tempfile.mkdtemp(prefix="kfuse-gap-")
        res["gap"] = {}
        for name, mod, xs, kw in blocks(args.gap.split(",")):
            with torch.no_grad():
                torch._dynamo.reset()
                kf = torch.compile(mod, backend=make_backend(cache_dir=cache,
                                                             tiered_compile=False))
                ind = torch.compile(mod)
                res["gap"][name] = gap(name, mod, xs, kw,
                                       [("kfuse", kf), ("inductor", ind), ("kfuse_again", kf)],
                                       args.gap_reps, trace_dir)
            if args.out != "-":
                write(res, args.out)
            del kf, ind
            torch._dynamo.reset()
        return write(res, args.out)
    if args.headline:
        trace_dir = args.trace_dir or tempfile.mkdtemp(prefix="kfuse-head-")
        os.makedirs(trace_dir, exist_ok=True)
        head = headline(args.headline.split(","), args.rounds, trace_dir, res,
                        lambda: args.out != "-" and write(res, args.out),
                        tuple(args.headline_variants.split(",")),
                        tuple(args.abba.split(",")) if args.abba else (), args.abba_block,
                        args.abba_rounds)
        if args.table:
            with open(args.table, "w") as f:
                f.write(kernel_text(head))
        write(res, args.out)
    names = args.blocks.split(",")
    fresh = names if args.fresh == "all" else [n for n in args.fresh.split(",") if n in names]
    steady = names if args.steady == "all" else [n for n in args.steady.split(",") if n in names]
    if fresh:  # first, while nothing else runs
        for name in fresh:
            row = res["blocks"].setdefault(name, {})
            fresh_first_calls(name, lib, not (args.no_inductor or args.fresh_kfuse_only), row,
                              no_background=name == fresh[-1] and not args.fresh_kfuse_only)
            print(name, "fresh processes:", {k: v for k, v in row.items()
                                             if k.endswith("_s")}, flush=True)
            if args.out != "-":  # what is measured so far, should a later step not finish
                write(res, args.out)
    from kfuse.torch_backend import last_report, make_backend

    for name, mod, xs, kw in blocks(steady):
        row = res["blocks"].setdefault(name, {})
        with torch.no_grad():
            ref = first(mod(*xs, **kw)).float()

            def timed(label, fn_maker):
                torch._dynamo.reset()
                fn = fn_maker()
                (row[label + "_first_call_in_process_s"], row[label + "_in_process_other_cpu_s"],
                 _) = timed_first_call(lambda: fn(*xs, **kw))
                y = first(fn(*xs, **kw))
                row[label + "_ms"] = per_call_ms(lambda: fn(*xs, **kw))
                row[label + "_loop_ms"] = loop_ms(lambda: fn(*xs, **kw))
                row[label + "_host_us"] = host_us(lambda: fn(*xs, **kw), 50)
                row[label + "_rel_err"] = ((y.float() - ref).norm() / ref.norm()).item()
                return fn

            timed("eager", lambda: mod)
            # Dynamo's capture and AOTAutograd alone: the floor under every backend's first call
            torch._dynamo.reset()
            row["aot_eager_first_call_s"], _, _ = timed_first_call(
                lambda: torch.compile(mod, backend="aot_eager")(*xs, **kw))
            if not args.no_inductor:
                try:
                    timed("inductor", lambda: torch.compile(mod))
                except Exception as e:  # noqa: BLE001 - a peer's failure is recorded
                    row["inductor_error"] = str(e)[:300]
            cache = args.kfuse_cache or tempfile.mkdtemp(prefix="kfuse-bench-")
            try:
                timed("kfuse", lambda: torch.compile(mod, backend=make_backend(cache_dir=cache)))
                row["kfuse_report"] = last_report()
                if not args.no_inductor:  # after Inductor, in this process: see the docstring
                    row["kfuse_first_call_after_inductor_s"] = row.pop(
                        "kfuse_first_call_in_process_s")
                    row["kfuse_after_inductor_other_cpu_s"] = row.pop(
                        "kfuse_in_process_other_cpu_s")
                # the same cache warm in this process, Dynamo and kfuse's programs rebuilt
                torch._dynamo.reset()
                row["kfuse_first_call_warm_cache_same_process_s"], _, _ = timed_first_call(
                    lambda: first(torch.compile(mod, backend=make_backend(
                        cache_dir=cache, flags={"cache_read_only", "cache_fail_on_miss"}))(
                            *xs, **kw)))
            except Exception as e:  # noqa: BLE001
                row["kfuse_error"] = str(e)[:2000]
        print(name, {k: v for k, v in row.items() if not k.endswith(("report", "detail"))},
              flush=True)
        if args.out != "-":
            write(res, args.out)
    if args.compare:
        compare(args, names, lib, res)
    write(res, args.out)


def compare(args, names, lib, res):
    """kfuse's per-call numbers from each package of --compare, in child
    processes one after another on one kfuse cache (the first child fills
    it), each package's rows under res["compare"][NAME]."""
    cache = args.kfuse_cache or tempfile.mkdtemp(prefix="kfuse-compare-")
    for item in args.compare.split(","):
        label, _, path = item.partition("=")
        env = {"PYTHONPATH": os.path.abspath(path)}
        blocks_ = args.compare_blocks.split(",") if args.compare_blocks else names
        c = run_child({"steady": True, "blocks": blocks_, "cache": cache, "kfuse_lib": lib,
                       "reps": args.host_reps, "smoke": SMOKE}, env, timeout=300)
        res.setdefault("compare", {})[label] = c
        print("compare", label, c, flush=True)
        if args.out != "-":
            write(res, args.out)


def write(res, out):
    text = json.dumps(res, indent=1)
    if out == "-":
        print(text)
    else:
        with open(out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
