#!/usr/bin/env python3
"""peers.py -- the same cases as bench/gpu_bench.c, run by PyTorch in the same
process run, so kfuse's numbers sit beside its peers':

  ew_chain    gelu(x*s + b)*g over 65536x4096 bf16   eager, torch.compile
  rmsnorm     RMSNorm over 65536x4096 bf16            eager (F.rms_norm), torch.compile
  layernorm   LayerNorm over 65536x4096 bf16          eager (F.layer_norm), torch.compile
  gemm_bias_gelu  8192x4096x16384 bf16                torch._addmm_activation(use_gelu=True)
                                                       (cuBLASLt's GELU_BIAS epilogue), eager
                                                       F.gelu(x@w + b, approximate='tanh')
  gemm_bias_gelu_m32  32x4096x16384 bf16 (decode)     the same three, and torch.compile of
                                                       the eager form
  swiglu      silu(x@wg) * (x@wu), 8192x4096 -> 2x11008 bf16   eager, torch.compile, and the
                                                       two GEMMs alone (mm_ms)
  gemm_res_ln layer_norm(x@w + b + r), 8192x4096x4096 bf16   eager, torch.compile, and the
                                                       GEMM alone (mm_ms)
  rotary      q*cos + rotate_half(q)*sin on q's head view, B8 H32 S2048 D128 bf16
                                                       eager, torch.compile
  rotary_bpos the same, cos and sin per batch [B, 1, S, D]   eager, torch.compile
  rotary_hd   the same with q already [B, H, S, D] (contiguous)   eager, torch.compile
  gemm_bias_gelu_after_sleep, gemm_bias_gelu_m32_after_sleep, swiglu_after_sleep,
  gemm_res_ln_after_sleep, gpt2_qkv_after_sleep (gpu_bench's ln_qkv_after_sleep)
              the same peers, each run after one thread asleep for about 1 ms:
              the device time alone (the plain rows count the host's work
              before the first launch: eager's dispatch, a compiled call's guards)
  rotary_after_sleep, rotary_bpos_after_sleep, rotary_hd_after_sleep
              the same, each run after one thread asleep for about 1 ms
              (torch.cuda._sleep, as gpu_bench's kf_bench_spin): the kernels'
              device time alone, as a block's profile counts them (the plain
              rows count torch.compile's host work before the launch too:
              Inductor's rotary kernel took 90 us in the LLaMA block on an
              H100, its plain row 0.165 ms); compile_out_stride: the strides
              of Inductor's result (its layout: eager's, q's [B, S, H, D])

--cases a,b runs only those cases (the harness passes its own --cases on).

With --attention, the attention cases instead (bf16, B4 H32 S4096 D128):

  attn_causal       causal                 SDPA with the cuDNN backend
  attn_noncausal    no mask                SDPA with the cuDNN backend
  attn_gqa          GQA 32:8 causal        SDPA (cuDNN) with enable_gqa
  attn_softcap      30 tanh(s/30), causal  FlexAttention (torch.compile'd) with a score_mod
  attn_alibi        ALiBi, causal          FlexAttention with a score_mod (the paper's
                                           slopes 2^(-8 h / H); kfuse's attn_alibi_geo
                                           row has the same slopes, attn_alibi random ones)
  attn_window       sliding window 1024    FlexAttention with a block mask
  attn_block_sparse 52% of 128x128 tiles kept (random, diagonal kept), non-causal
                                           FlexAttention with that block mask
  attn_causal_b16h16s1024d64, attn_causal_b8h32s2048d128
                    the blocks' causal attention shapes: cuDNN and flash SDPA
  attn_block_llama, attn_block_gpt2 (and attn_block_llama_v, _o)
                    the same with the blocks' layouts (V, or Q, K and V, read
                    transposed from [B, S, H, D]): cuDNN and flash SDPA
  attn_causal_after_gemm, attn_block_llama_after_gemm, attn_block_gpt2_after_gemm
                    cuDNN SDPA timed after an untimed bf16 8192^3 matmul: the
                    kernel's device time alone (no launch gap), L2 and clocks
                    as a block's GEMMs leave them (gpu_bench's after_gemm cases)
  attn_causal_after_sleep, attn_block_llama_after_sleep, attn_block_gpt2_after_sleep
                    the same after 1 ms of one thread asleep (torch.cuda._sleep):
                    the device time alone on an idle GPU's clocks
  attn_noncausal_after_sleep, attn_gqa_after_sleep, attn_softcap_after_sleep,
  attn_alibi_after_sleep, attn_alibi_geo_after_sleep, attn_window_after_sleep,
  attn_block_sparse_after_sleep
                    the target rows' peers (cuDNN, FlexAttention) timed the same
                    way: the plain rows count each peer's host work before its
                    launch (SDPA's dispatch, the compiled Flex call's guards),
                    which kfuse's few microseconds barely do
  attn_simt_f32_causal  f32 B4 H16 S1024 D64, causal  SDPA's math and memory-efficient
                    backends (f32, no TF32)
  attn_simt_bf16_d32_causal  bf16 B4 H32 S2048 D32, causal  cuDNN and flash SDPA
  attn_decode       B16 H32, 1 query, Skv 8192, no mask   SDPA (its own choice), and
                                           with the cuDNN and the flash backend
  attn_decode_gqa   the same, GQA 32:8     SDPA with enable_gqa (the same three)
  attn_decode_b64   B64 H32 decode         the same three

With --block, whole transformer blocks instead (bf16, random weights; the
same math as gpu_bench --block's graphs, written the way a PyTorch user
writes them, attention through F.scaled_dot_product_attention(is_causal=True)):

  gpt2_medium_b16_s1024  pre-LN, biased projections, causal attention
                         (16 heads of 64), gelu_tanh MLP of 4096; d 1024
  llama7b_b8_s2048       RMSNorm, causal attention (32 heads of 128), SwiGLU
                         MLP of 11008, no rotary embedding; d 4096

each eager and torch.compile'd (default mode).

Timing as the harness does it: CUDA events, warm-up, the median of many runs.
Writes one JSON object (milliseconds per case and variant) to --out, or stdout.
The harness (gpu_bench.c) calls this when `import torch` works and embeds the
object under "peers".
"""
import argparse
import json
import statistics
import sys


def median_ms(fn, warmup=5, reps=30, pre=None):
    """Median milliseconds of fn() between two events; with `pre`, pre() runs
    untimed before each run (and each warm-up run), so the events queue
    behind its work and time fn's kernels alone on the device."""
    import torch

    for _ in range(warmup):
        if pre:
            pre()
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if pre:
            pre()
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="-")
    ap.add_argument("--rows", type=int, default=65536)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--attention", action="store_true")
    ap.add_argument("--cases", default="")
    ap.add_argument("--block", action="store_true")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    want = set(c for c in args.cases.split(",") if c)

    def on(name):
        return not want or name in want

    import torch
    import torch.nn.functional as F

    if args.attention:
        return attention(args)
    if args.block:
        return block(args)

    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "cases": {}}

    def sleep():  # about 1 ms at an H100's or H200's top clock
        torch.cuda._sleep(2_000_000)

    def measure(name, fns, compile_fn=None, compile_key="compile_ms", also=()):
        """res["cases"][name][key] = median_ms(fn) for each key, fn of fns, and
        with compile_fn torch.compile(compile_fn) as compile_key (unless
        --no-compile; a failing compile is reported in compile_error, never
        fails the run); then, when asked for, the row name_after_sleep: the
        same, each run after 1 ms of one thread asleep, so the time is the
        device's alone (the plain row counts the host's work before the
        first launch: a compiled call's guards, eager's dispatch). A row is
        measured when it or the same row of a name in `also` is asked for.
        Returns the functions timed, the compiled one under compile_key."""
        fns = dict(fns)
        r = res["cases"].setdefault(name, {})
        if compile_fn is not None and not args.no_compile:
            try:
                fns[compile_key] = torch.compile(compile_fn)
                fns[compile_key]()
            except Exception as e:  # noqa: BLE001 -- report, never fail the run
                fns.pop(compile_key, None)
                r["compile_error"] = str(e)[:200]
        for sfx, pre in (("", None), ("_after_sleep", sleep)):
            row = name + sfx
            if not any(on(n + sfx) for n in (name, *also)):
                continue
            rr = res["cases"].setdefault(row, {})
            for k, fn in fns.items():
                rr[k] = median_ms(fn, pre=pre)
            print(f"peers: {row} {rr}", file=sys.stderr)
        return fns

    def on_any(name):
        return on(name) or on(name + "_after_sleep")

    dev = "cuda"
    bf = torch.bfloat16
    R, C = args.rows, args.cols
    x = torch.rand(R, C, device=dev, dtype=bf) * 2 - 1
    s = torch.rand(C, device=dev, dtype=bf) * 2 - 1
    b = torch.rand(C, device=dev, dtype=bf) * 2 - 1
    g = torch.rand(C, device=dev, dtype=bf) * 2 - 1
    w = torch.rand(C, device=dev, dtype=bf) * 2 - 1

    def ew():
        return F.gelu(x * s + b) * g

    def rms():
        return F.rms_norm(x, (C,), w, 1e-6)

    def ln():
        return F.layer_norm(x, (C,), w, b, 1e-5)

    cases = {"ew_chain": ew, "rmsnorm": rms, "layernorm": ln}
    for name, fn in cases.items():
        if not on(name):
            continue
        measure(name, {"eager_ms": fn}, fn)
    del x

    M, N, K = 8192, 4096, 16384
    if on_any("gemm_bias_gelu"):
        a = torch.rand(M, K, device=dev, dtype=bf) * 2 - 1
        wt = torch.rand(K, N, device=dev, dtype=bf) * 2 - 1
        bias = torch.rand(N, device=dev, dtype=bf) * 2 - 1
        measure("gemm_bias_gelu", {
            "addmm_activation_ms": lambda: torch._addmm_activation(bias, a, wt, use_gelu=True),
            "eager_ms": lambda: F.gelu(a @ wt + bias, approximate="tanh"),
            "mm_ms": lambda: a @ wt})
        del a, wt, bias

    if on_any("gemm_bias_gelu_m32"):
        a = torch.rand(32, K, device=dev, dtype=bf) * 2 - 1
        wt = torch.rand(K, N, device=dev, dtype=bf) * 2 - 1
        bias = torch.rand(N, device=dev, dtype=bf) * 2 - 1

        def m32():
            return F.gelu(a @ wt + bias, approximate="tanh")

        measure("gemm_bias_gelu_m32", {
            "addmm_activation_ms": lambda: torch._addmm_activation(bias, a, wt, use_gelu=True),
            "eager_ms": m32, "mm_ms": lambda: a @ wt}, m32)
        del a, wt, bias

    if any(on(n) for n in ("gemm_res_ln", "gemm_res_ln_split", "gemm_res_ln_after_sleep")):
        M, D = (2048 if args.rows < 65536 else 8192), 4096
        xa = torch.rand(M, D, device=dev, dtype=bf) * 2 - 1
        wt = torch.rand(D, D, device=dev, dtype=bf) * 2 - 1
        bias = torch.rand(D, device=dev, dtype=bf) * 2 - 1
        res_ = torch.rand(M, D, device=dev, dtype=bf) * 2 - 1
        lw = torch.rand(D, device=dev, dtype=bf) * 2 - 1
        lb = torch.rand(D, device=dev, dtype=bf) * 2 - 1

        def res_ln():
            return F.layer_norm(xa @ wt + bias + res_, (D,), lw, lb, 1e-5)

        measure("gemm_res_ln", {"eager_ms": res_ln, "mm_ms": lambda: xa @ wt}, res_ln,
                also=("gemm_res_ln_split",))
        del xa, wt, bias, res_, lw, lb

    if on_any("swiglu"):
        M, D, F_ = 8192, 4096, 11008
        xs = torch.rand(M, D, device=dev, dtype=bf) * 2 - 1
        wg = torch.rand(D, F_, device=dev, dtype=bf) * 2 - 1
        wu = torch.rand(D, F_, device=dev, dtype=bf) * 2 - 1

        def swiglu():
            return F.silu(xs @ wg) * (xs @ wu)

        measure("swiglu", {"eager_ms": swiglu, "mm_ms": lambda: (xs @ wg, xs @ wu)}, swiglu)
        del xs, wg, wu

    # Q, K, V projections of one normalized input: eager with one
    # concatenated weight (the peer) and with three GEMMs; gpu_bench's
    # ln_qkv / gpt2_qkv_* (GPT-2-medium, LayerNorm, biases), llama_qkv_* and
    # gqa_qkv_* (LLaMA-7B, RMSNorm, no bias; GQA 4096 + 1024 + 1024)
    quick = args.rows < 65536
    for name, M, D, ns, norm in (
            ("gpt2_qkv", 4096 if quick else 16384, 1024, (1024, 1024, 1024), "ln"),
            ("llama_qkv", 4096 if quick else 16384, 4096, (4096, 4096, 4096), "rms"),
            ("gqa_qkv", 4096 if quick else 16384, 4096, (4096, 1024, 1024), "rms")):
        also = (name + "_one", name + "_one_generated") + (("ln_qkv",) if name == "gpt2_qkv" else ())
        if not any(on_any(n) for n in (name, *also)):
            continue
        xq = torch.rand(M, D, device=dev, dtype=bf) * 2 - 1
        lw = torch.rand(D, device=dev, dtype=bf) * 2 - 1
        lb = torch.rand(D, device=dev, dtype=bf) * 2 - 1
        ws = [torch.rand(D, n, device=dev, dtype=bf) * 2 - 1 for n in ns]
        bs = [torch.rand(n, device=dev, dtype=bf) * 2 - 1 for n in ns]
        wc, bc = torch.cat(ws, 1), torch.cat(bs)
        biased = norm == "ln"

        def nrm():
            if norm == "ln":
                return F.layer_norm(xq, (D,), lw, lb, 1e-5)
            return F.rms_norm(xq, (D,), lw, 1e-6)

        def concat():
            h = nrm() @ wc
            return h + bc if biased else h

        def apart():
            h = nrm()
            return [h @ w + b if biased else h @ w for w, b in zip(ws, bs)]

        measure(name, {"eager_concat_ms": concat, "eager_apart_ms": apart,
                       "mm_concat_ms": lambda: xq @ wc}, concat, "compile_concat_ms", also)
        del xq, ws, wc, bs, bc

    # LLaMA-7B's rotary embedding of q, as gpu_bench's rotary cases: q as
    # its projection writes it [B, S, H * D], read through the head view
    # [B, H, S, D]; rotate_half = cat(-x2, x1); cos / sin [1, 1, S, D]
    # (rotary) or per batch [B, 1, S, D] (rotary_bpos: position ids per sequence)
    # (rotary_hd: q already [B, H, S, D], contiguous: read and written in one order)
    for name, per_batch in (("rotary", False), ("rotary_bpos", True), ("rotary_hd", False)):
        if not on_any(name):
            continue
        B, S, H, D = (2 if args.rows < 65536 else 8), 2048, 32, 128
        TB = B if per_batch else 1
        q0 = torch.rand(B, S, H * D, device=dev, dtype=bf) * 2 - 1
        cs = (torch.rand(TB, 1, S, D, device=dev, dtype=bf) * 2 - 1)
        sn = (torch.rand(TB, 1, S, D, device=dev, dtype=bf) * 2 - 1)

        if name == "rotary_hd":
            q0 = q0.view(B, S, H, D).transpose(1, 2).contiguous()

        def rotary():  # used in this iteration only
            q = q0 if name == "rotary_hd" else q0.view(B, S, H, D).transpose(1, 2)
            r = torch.cat((-q[..., D // 2:], q[..., :D // 2]), dim=-1)
            return q * cs + r * sn

        compiled = measure(name, {"eager_ms": rotary}, rotary).get("compile_ms")
        for row in (name, name + "_after_sleep"):
            if compiled is not None and on(row):  # Inductor's result layout
                res["cases"][row]["compile_out_stride"] = list(compiled().stride())
    text = json.dumps(res, indent=1)
    if args.out == "-":
        print(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)


def attention(args):
    """The attention cases; each peer in a try, so one missing backend leaves
    the others' numbers."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "cases": {}}
    want = set(c for c in args.cases.split(",") if c)
    B, H, S, D = 4, 32, 4096, 128
    bf = torch.bfloat16

    def rnd(*shape):
        return torch.rand(*shape, device="cuda", dtype=bf) * 2 - 1

    def put(name, key, fn):
        if want and name not in want:
            return
        r = res["cases"].setdefault(name, {})
        try:
            r[key] = median_ms(fn)
        except Exception as e:  # noqa: BLE001 -- report, never fail the run
            r[key + "_error"] = str(e)[:300]
        print(f"peers: {name} {r}", file=sys.stderr)

    pre = {}

    def run_pre(kind):
        """gpu_bench's untimed run before each timed one: "gemm", a bf16
        8192^3 matmul (its pre-GEMM); "sleep", one thread asleep for about
        1 ms (torch.cuda._sleep, as its kf_bench_spin)."""
        if kind == "sleep":
            torch.cuda._sleep(pre["cycles"])
            return
        torch.mm(pre["a"], pre["b"], out=pre["c"])

    def after_ms(fn, kind):
        """median_ms with run_pre(kind) before each run: the kernel's device
        time alone (torch's host work before the launch, in median_ms's
        plain time, is not), after a block's worth of GEMM or an idle
        millisecond."""
        if not pre:
            pre["a"], pre["b"] = rnd(8192, 8192), rnd(8192, 8192)
            pre["c"] = torch.empty(8192, 8192, device="cuda", dtype=bf)
            pre["cycles"] = 2_000_000  # about 1 ms at an H100's or H200's top clock
        return median_ms(fn, pre=lambda: run_pre(kind))

    def put_after(name, key, fn):
        """The _after_gemm and _after_sleep rows of case `name` (gpu_bench's
        cases of those names)."""
        for kind in ("gemm", "sleep"):
            row = f"{name}_after_{kind}"
            if want and row not in want:
                continue
            r = res["cases"].setdefault(row, {})
            try:
                r[key] = after_ms(fn, kind)
            except Exception as e:  # noqa: BLE001 -- report, never fail the run
                r[key + "_error"] = str(e)[:300]
            print(f"peers: {row} {r}", file=sys.stderr)

    def cudnn(fn):
        def run():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return fn()
        return run

    def flash(fn):
        def run():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return fn()
        return run

    # Decode (B16 / B64 x 32 heads of one token, Skv 8192, D 128; GQA 32:8):
    # SDPA as it chooses, and cuDNN and flash forced.
    for name, Bd, hkv in (("attn_decode", 16, 32), ("attn_decode_gqa", 16, 8),
                          ("attn_decode_b64", 64, 32)):
        if want and name not in want:
            continue
        qd, kd, vd = rnd(Bd, H, 1, D), rnd(Bd, hkv, 8192, D), rnd(Bd, hkv, 8192, D)
        gqa = hkv < H

        def sdpa(qd=qd, kd=kd, vd=vd, gqa=gqa):
            return F.scaled_dot_product_attention(qd, kd, vd, enable_gqa=gqa)
        put(name, "sdpa_ms", sdpa)
        put(name, "cudnn_sdpa_ms", cudnn(sdpa))
        put(name, "flash_sdpa_ms", flash(sdpa))
        del qd, kd, vd
        torch.cuda.empty_cache()
    # The transformer blocks' causal attention (GPT-2-medium B16 H16 S1024
    # D64, LLaMA-7B B8 H32 S2048 D128): cuDNN and flash SDPA.
    for name, Bb, Hb, Sb, Db in (("attn_causal_b16h16s1024d64", 16, 16, 1024, 64),
                                 ("attn_causal_b8h32s2048d128", 8, 32, 2048, 128)):
        if want and name not in want:
            continue
        qb, kb, vb = (rnd(Bb, Hb, Sb, Db) for _ in range(3))

        def sdpa_c(qb=qb, kb=kb, vb=vb):
            return F.scaled_dot_product_attention(qb, kb, vb, is_causal=True)
        put(name, "cudnn_sdpa_ms", cudnn(sdpa_c))
        put(name, "flash_sdpa_ms", flash(sdpa_c))
        del qb, kb, vb
        torch.cuda.empty_cache()
    # The SIMT kernel's cases (gpu_bench's attn_simt_*): f32 causal B4 H16
    # S1024 D64 against SDPA's f32 backends, math and memory-efficient (no
    # TF32: torch.backends.cuda.matmul.allow_tf32 stays False, its default);
    # bf16 causal B4 H32 S2048 D32 against cuDNN and flash SDPA.
    for name, dt, Bs, Hs, Ss, Ds, backends in (
            ("attn_simt_f32_causal", torch.float32, 4, 16, 1024, 64,
             (("math_sdpa_ms", SDPBackend.MATH), ("efficient_sdpa_ms", SDPBackend.EFFICIENT_ATTENTION))),
            ("attn_simt_bf16_d32_causal", bf, 4, 32, 2048, 32,
             (("cudnn_sdpa_ms", SDPBackend.CUDNN_ATTENTION), ("flash_sdpa_ms", SDPBackend.FLASH_ATTENTION)))):
        if want and name not in want:
            continue
        qs, ks, vs = ((torch.rand(Bs, Hs, Ss, Ds, device="cuda", dtype=dt) * 2 - 1) for _ in range(3))
        for key, be in backends:
            def sdpa_s(qs=qs, ks=ks, vs=vs, be=be):
                with sdpa_kernel(be):
                    return F.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
            put(name, key, sdpa_s)
        del qs, ks, vs
        torch.cuda.empty_cache()
    # The same attention with the blocks' layouts (gpu_bench's attn_block_*):
    # LLaMA's Q and K [B, H, S, D], V a [B, S, H, D] buffer read transposed
    # (V alone: _v; everything contiguous: _o, kfuse's output permute aside);
    # GPT-2's Q, K and V transposed slices of one [B, S, 3*H*D] projection.
    for name, Bb, Hb, Sb, Db, lay in (("attn_block_llama", 8, 32, 2048, 128, "l"),
                                      ("attn_block_llama_v", 8, 32, 2048, 128, "v"),
                                      ("attn_block_llama_o", 8, 32, 2048, 128, "o"),
                                      ("attn_block_gpt2", 16, 16, 1024, 64, "g")):
        if want and not want & {name, name + "_after_gemm", name + "_after_sleep"}:
            continue
        if lay == "g":
            x = rnd(Bb, Sb, 3 * Hb * Db)
            qb, kb, vb = (t.view(Bb, Sb, Hb, Db).transpose(1, 2)
                          for t in x.split(Hb * Db, dim=2))
        else:
            qb, kb = rnd(Bb, Hb, Sb, Db), rnd(Bb, Hb, Sb, Db)
            vb = rnd(Bb, Hb, Sb, Db) if lay == "o" else rnd(Bb, Sb, Hb, Db).transpose(1, 2)

        def sdpa_b(qb=qb, kb=kb, vb=vb):
            return F.scaled_dot_product_attention(qb, kb, vb, is_causal=True)
        put(name, "cudnn_sdpa_ms", cudnn(sdpa_b))
        put(name, "flash_sdpa_ms", flash(sdpa_b))
        put_after(name, "cudnn_sdpa_ms", cudnn(sdpa_b))
        del qb, kb, vb
        torch.cuda.empty_cache()
    targets = ("attn_causal", "attn_noncausal", "attn_gqa", "attn_softcap", "attn_alibi",
               "attn_alibi_geo", "attn_window", "attn_block_sparse")
    if want and not want & ({*targets, "attn_causal_after_gemm"} |
                            {n + "_after_sleep" for n in targets}):
        return dump(res, args)
    q, k, v = (rnd(B, H, S, D) for _ in range(3))
    kg, vg = (rnd(B, 8, S, D) for _ in range(2))
    put("attn_causal", "cudnn_sdpa_ms", cudnn(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)))
    put_after("attn_causal", "cudnn_sdpa_ms",
              cudnn(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)))
    put("attn_causal", "flash_sdpa_ms", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    put("attn_noncausal", "cudnn_sdpa_ms", cudnn(lambda: F.scaled_dot_product_attention(q, k, v)))
    put_after("attn_noncausal", "cudnn_sdpa_ms", cudnn(lambda: F.scaled_dot_product_attention(q, k, v)))
    gqa = cudnn(lambda: F.scaled_dot_product_attention(q, kg, vg, is_causal=True, enable_gqa=True))
    put("attn_gqa", "cudnn_sdpa_ms", gqa)
    put_after("attn_gqa", "cudnn_sdpa_ms", gqa)
    if args.no_compile:
        return dump(res, args)
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        flex = torch.compile(flex_attention)

        def causal(b, h, qi, ki):
            return qi >= ki

        def window(b, h, qi, ki):
            return (qi >= ki) & (qi - ki < 1024)

        bm_causal = create_block_mask(causal, None, None, S, S)
        bm_window = create_block_mask(window, None, None, S, S)
        slopes = torch.exp2(-8.0 * torch.arange(1, H + 1, device="cuda") / H)

        def softcap(score, b, h, qi, ki):
            return 30.0 * torch.tanh(score / 30.0)

        def alibi(score, b, h, qi, ki):
            return score + slopes[h] * (ki - qi)

        # Flex's ALiBi takes the paper's slopes, as kfuse's attn_alibi_geo row
        # does (attn_alibi's are the harness's random fill): the same peer for both
        flex_runs = {"attn_softcap": lambda: flex(q, k, v, score_mod=softcap, block_mask=bm_causal),
                     "attn_alibi": lambda: flex(q, k, v, score_mod=alibi, block_mask=bm_causal),
                     "attn_alibi_geo": lambda: flex(q, k, v, score_mod=alibi, block_mask=bm_causal),
                     "attn_window": lambda: flex(q, k, v, block_mask=bm_window)}
        for name, fn in flex_runs.items():
            put(name, "flex_ms", fn)
            put_after(name, "flex_ms", fn)
        put("attn_causal", "flex_ms", lambda: flex(q, k, v, block_mask=bm_causal))
        # a random keep map of 128 x 128 tiles with the diagonal kept (kfuse's
        # is drawn by the harness: the same density, 1/2 + 1/64)
        gen = torch.Generator(device="cuda").manual_seed(5)
        nb = S // 128
        keep = torch.rand(nb, nb, device="cuda", generator=gen) < 0.5
        keep |= torch.eye(nb, dtype=torch.bool, device="cuda")

        def sparse(b, h, qi, ki):
            return keep[qi // 128, ki // 128]
        bm_sparse = create_block_mask(sparse, None, None, S, S, BLOCK_SIZE=128)
        put("attn_block_sparse", "flex_ms", lambda: flex(q, k, v, block_mask=bm_sparse))
        put_after("attn_block_sparse", "flex_ms", lambda: flex(q, k, v, block_mask=bm_sparse))
        res["cases"].setdefault("attn_block_sparse", {})["kept_fraction"] = float(keep.float().mean())
    except Exception as e:  # noqa: BLE001
        res["flex_error"] = str(e)[:300]
    return dump(res, args)


def block(args):
    """The transformer blocks; eager and torch.compile (default mode) each."""
    import torch
    import torch.nn.functional as F

    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "cases": {}}
    bf = torch.bfloat16

    def rnd(*shape):
        return torch.rand(*shape, device="cuda", dtype=bf) * 2 - 1

    def gpt2(B, S, D, H, Fh):
        hd = D // H
        x = rnd(B, S, D)
        w = {n: rnd(D) for n in ("ln1_w", "ln1_b", "bq", "bk", "bv", "bo", "ln2_w", "ln2_b", "b2")}
        wq, wk, wv, wo = rnd(D, D), rnd(D, D), rnd(D, D), rnd(D, D)
        w1, b1, w2 = rnd(D, Fh), rnd(Fh), rnd(Fh, D)

        def fn(x):
            h = F.layer_norm(x, (D,), w["ln1_w"], w["ln1_b"], 1e-5)
            q = (h @ wq + w["bq"]).view(B, S, H, hd).transpose(1, 2)
            k = (h @ wk + w["bk"]).view(B, S, H, hd).transpose(1, 2)
            v = (h @ wv + w["bv"]).view(B, S, H, hd).transpose(1, 2)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            o = o.transpose(1, 2).reshape(B, S, D)
            x1 = x + (o @ wo + w["bo"])
            h2 = F.layer_norm(x1, (D,), w["ln2_w"], w["ln2_b"], 1e-5)
            return x1 + (F.gelu(h2 @ w1 + b1, approximate="tanh") @ w2 + w["b2"])

        return fn, x

    def llama(B, S, D, H, Fh):
        hd = D // H
        x = rnd(B, S, D)
        an, fnw = rnd(D), rnd(D)
        wq, wk, wv, wo = rnd(D, D), rnd(D, D), rnd(D, D), rnd(D, D)
        wg, wu, wd = rnd(D, Fh), rnd(D, Fh), rnd(Fh, D)

        def fn(x):
            h = F.rms_norm(x, (D,), an, 1e-5)
            q = (h @ wq).view(B, S, H, hd).transpose(1, 2)
            k = (h @ wk).view(B, S, H, hd).transpose(1, 2)
            v = (h @ wv).view(B, S, H, hd).transpose(1, 2)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x1 = x + o.transpose(1, 2).reshape(B, S, D) @ wo
            h2 = F.rms_norm(x1, (D,), fnw, 1e-5)
            return x1 + (F.silu(h2 @ wg) * (h2 @ wu)) @ wd

        return fn, x

    cases = [
        ("gpt2_medium_b16_s1024", gpt2, (4 if args.quick else 16, 1024, 1024, 16, 4096)),
        ("llama7b_b8_s2048", llama, (1 if args.quick else 8, 2048, 4096, 32, 11008)),
    ]
    for name, make, shape in cases:
        r = res["cases"].setdefault(name, {})
        with torch.no_grad():
            fn, x = make(*shape)
            try:
                r["eager_ms"] = median_ms(lambda: fn(x), warmup=3, reps=20)
            except Exception as e:  # noqa: BLE001 -- report, never fail the run
                r["eager_error"] = str(e)[:300]
            print(f"peers: {name} {r}", file=sys.stderr)
            if not args.no_compile:
                try:
                    cf = torch.compile(fn)
                    r["compile_ms"] = median_ms(lambda: cf(x), warmup=3, reps=20)
                except Exception as e:  # noqa: BLE001
                    r["compile_error"] = str(e)[:300]
                print(f"peers: {name} {r}", file=sys.stderr)
            del fn, x
        torch.cuda.empty_cache()
    return dump(res, args)


def dump(res, args):
    text = json.dumps(res, indent=1)
    if args.out == "-":
        print(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
