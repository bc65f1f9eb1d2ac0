#!/usr/bin/env python3
"""attn_schedule.py -- a model of the sm_90a attention kernel's persistent
schedule (templates/attention_sm90.cuh): which work items (query tiles of 128
rows) each block takes and how many key tiles they visit, so the slowest
block's share of a launch can be read without a GPU (att19, issue 14).

The schedule as the kernel has it: a unit is a batch-head's query tiles
NQT - 1 - p and p (p < NQT / 2), unit u = bh * (NQT / 2) + p, and block b
takes units b, b + G, b + 2G, ... (G blocks, one an SM). With --lpt, the
KF_TAIL_LPT form (recipe flag KF_CUDA_RECIPE_ATTENTION_TAIL_LPT): all but the
last two rounds as above, the rest as single items, longer items by p
ascending then shorter ones by p descending, dealt out in a snake. With
--snake, odd rounds deal the units in reverse block order, so no block keeps
one residue of p (with --lpt too, its rounds: the kernel's KF_TAIL_LPT form
of a window mask since session 19; without --lpt a form the kernel does not
have).

A block's time is modelled as K + sum over its items of (tiles * t + ci);
t, ci and K default to att19's fit (H100 at 628680f's kernels, causal B4 H32
S4096 D128: t 1.516 us a key tile a block, ci 2.1 us an item, K 23 us a
launch; bench/results/NVIDIA-H100-80GB-HBM3-{ff7f34e-attention-fit,
ecacc5e-attention-fit2}.json). Masks: causal (tile qt visits qt + 1 key
tiles), window W (min(qt, W / 128) + 1: W a multiple of 128, the ascending
walk), none (NQT key tiles).

  attn_schedule.py [--mask causal|window|none] [--window W] [--bh N]
                   [--seq S] [--grid G] [--lpt] [--snake] [--t US] [--ci US]
                   [--k US]
"""
import argparse


def tiles_fn(mask, window, nqt):
    if mask == "causal":
        return lambda qt: qt + 1
    if mask == "window":
        if window % 128:
            raise SystemExit("attn_schedule.py: --window must be a multiple of 128")
        return lambda qt: min(qt, window // 128) + 1
    return lambda qt: nqt


def items_of_blocks(nqt, bh, grid, lpt, snake):
    """Each block's items (bh, qt) in the order it takes them."""
    half = nqt // 2
    units = bh * ((nqt + 1) // 2)
    hu = (nqt + 1) // 2  # units a batch-head (the middle tile alone when NQT is odd)

    def unit_items(u):
        p = u % hu
        b = u // hu
        out = [(b, nqt - 1 - p)]
        if 2 * p + 1 != nqt:
            out.append((b, p))
        return out

    blocks = [[] for _ in range(grid)]
    if not lpt:
        r = 0
        while r * grid < units:
            for b in range(grid):
                bb = grid - 1 - b if snake and r % 2 else b
                u = r * grid + bb
                if u < units:
                    blocks[b].extend(unit_items(u))
            r += 1
        return blocks
    q = units // grid
    q = q - 2 if q > 2 else 0
    u0 = q * grid
    for r in range(q):
        for b in range(grid):
            blocks[b].extend(unit_items(r * grid + (grid - 1 - b if snake and r % 2 else b)))
    # the tail's items, as kf_lpt_tail orders them
    tail = []
    for longer in (True, False):
        for i in range(hu):
            p = i if longer else hu - 1 - i
            if not longer and 2 * p + 1 == nqt:
                continue
            for u in range(u0, units):
                if u % hu == p:
                    tail.append((u // hu, nqt - 1 - p if longer else p))
    r = 0
    while r * grid < len(tail):
        for b in range(grid):
            k = r * grid + (grid - 1 - b if r % 2 else b)
            if k < len(tail):
                blocks[b].append(tail[k])
        r += 1
    _ = half
    return blocks


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mask", default="causal", choices=("causal", "window", "none"))
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--bh", type=int, default=128, help="batch x heads (B4 H32: 128)")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--grid", type=int, default=132)
    ap.add_argument("--lpt", action="store_true")
    ap.add_argument("--snake", action="store_true")
    ap.add_argument("--t", type=float, default=1.516)
    ap.add_argument("--ci", type=float, default=2.1)
    ap.add_argument("--k", type=float, default=23.0)
    a = ap.parse_args()
    nqt = (a.seq + 127) // 128
    tiles = tiles_fn(a.mask, a.window, nqt)
    blocks = items_of_blocks(nqt, a.bh, a.grid, a.lpt, a.snake)
    til = [sum(tiles(qt) for _, qt in bl) for bl in blocks]
    work = [a.t * tl + a.ci * len(bl) for tl, bl in zip(til, blocks)]
    mean_tiles = sum(til) / a.grid
    mean_work = sum(work) / a.grid
    print(f"{a.mask}{' ' + str(a.window) if a.mask == 'window' else ''}, {a.bh} batch-heads x "
          f"{nqt} query tiles on {a.grid} blocks{' (tail longest first)' if a.lpt else ''}"
          f"{' (snake)' if a.snake else ''}")
    print(f"  key tiles a block: max {max(til)}, mean {mean_tiles:.1f} (x{max(til) / mean_tiles:.3f});"
          f" items: max {max(len(b) for b in blocks)}, mean {sum(len(b) for b in blocks) / a.grid:.2f}")
    print(f"  model: slowest block {(a.k + max(work)) / 1e3:.4f} ms, every block at the mean "
          f"{(a.k + mean_work) / 1e3:.4f} ms (x{(a.k + max(work)) / (a.k + mean_work):.3f})")


if __name__ == "__main__":
    main()
