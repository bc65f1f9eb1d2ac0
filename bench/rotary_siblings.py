#!/usr/bin/env python3
"""rotary_siblings.py -- LLaMA-7B's rotary embedding of q and k (B8 S2048,
32 heads of 128, bf16) as the torch backend's translation writes it: q and k
are [8, 2048, 4096] products viewed as heads and permuted to [8, 32, 2048,
128], cos and sin [1, 2048, 128] viewed as [1, 1, 2048, 128],
rotate_half as two slices and a concat. kfuse runs it device-resident on
PyTorch's stream; the time per call is the median over rounds of CUDA events
around calls back to back (after warm-up), next to eager PyTorch's. The
kernel count says whether the two rotations are one kernel or two (two by
default: fuse_siblings leaves groups that read through slices and concats
apart; 6598e65 made them one kernel, which an H100 ran in 0.2774 ms against
the pair's 0.2652, so it was reverted).

  python3 bench/rotary_siblings.py [--kfuse-lib build/libkfuse.so] [--label NAME]

Prints one JSON line: label, kernels, kfuse_ms, eager_ms, rel_err (each
output's normwise error against eager's, the larger)."""
import argparse
import json
import os
import sys
import tempfile

GRAPH = """kfg 1
q0 = input(bf16[8, 2048, 4096])
k0 = input(bf16[8, 2048, 4096])
cos0 = input(bf16[1, 2048, 128])
sin0 = input(bf16[1, 2048, 128])
cos = reshape(cos0, [1, 1, 2048, 128])
sin = reshape(sin0, [1, 1, 2048, 128])
q1 = reshape(q0, [8, 2048, 32, 128])
k1 = reshape(k0, [8, 2048, 32, 128])
q = permute(q1, [0, 2, 1, 3])
k = permute(k1, [0, 2, 1, 3])
qa = slice(q, axis=3, stop=64)
qb = slice(q, axis=3, start=64)
nqb = neg(qb)
qr = concat(nqb, qa, axis=3)
qc = mul(q, cos)
qs = mul(qr, sin)
qe = add(qc, qs)
ka = slice(k, axis=3, stop=64)
kb = slice(k, axis=3, start=64)
nkb = neg(kb)
kr = concat(nkb, ka, axis=3)
kc = mul(k, cos)
ks = mul(kr, sin)
ke = add(kc, ks)
output qe
output ke
"""


def events_ms(fn, reps=20, rounds=7):
    import torch

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    res = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        res.append(a.elapsed_time(b) / reps)
    return sorted(res)[len(res) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kfuse-lib", default=None)
    ap.add_argument("--label", default="kfuse")
    args = ap.parse_args()
    try:
        import kfuse
    except ImportError:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "python"))
        import kfuse
    if args.kfuse_lib:
        kfuse.load_library(os.path.abspath(args.kfuse_lib))
    import torch

    torch.manual_seed(0)
    dev = torch.device("cuda")
    q0 = torch.randn(8, 2048, 4096, device=dev, dtype=torch.bfloat16)
    k0 = torch.randn(8, 2048, 4096, device=dev, dtype=torch.bfloat16)
    ang = torch.rand(1, 2048, 128, device=dev) * 6.28
    cos0, sin0 = ang.cos().bfloat16(), ang.sin().bfloat16()

    def eager():
        c, s = cos0.unsqueeze(1), sin0.unsqueeze(1)
        q = q0.view(8, 2048, 32, 128).transpose(1, 2)
        k = k0.view(8, 2048, 32, 128).transpose(1, 2)

        def rot(x):
            return torch.cat((-x[..., 64:], x[..., :64]), dim=-1)

        return q * c + rot(q) * s, k * c + rot(k) * s

    prog = kfuse.compile(kfuse.parse(GRAPH), target="cuda",
                         cache_dir=tempfile.mkdtemp(prefix="kfuse-rot-"))
    ins = {"q0": q0, "k0": k0, "cos0": cos0, "sin0": sin0}
    out = prog.run(**ins)
    ref = eager()
    err = max(((out[n].float() - r.float()).norm() / r.float().norm()).item()
              for n, r in zip(("qe", "ke"), ref))
    assert not any(torch.isnan(out[n]).any().item() for n in ("qe", "ke"))
    row = {"label": args.label, "device": torch.cuda.get_device_name(),
           "kernels": prog.kernel_count, "kfuse_ms": events_ms(lambda: prog.run(**ins)),
           "eager_ms": events_ms(eager), "rel_err": err}
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
