#!/usr/bin/env python3
"""sustain_join.py -- joins gpu_bench --sustain's JSON with nvidia-smi samples.

    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu \
        --format=csv,noheader,nounits -lms 100 > smi.csv &
    gpu_bench --sustain 2 --cases ... --out bench.json
    python3 bench/sustain_join.py bench.json smi.csv

For each case with a sustain_window (the last half of its back-to-back runs,
epoch seconds), the mean SM clock, power and temperature of the samples inside
the window, the short (idle GPU) and sustained milliseconds, TFLOP/s and
TFLOP/s per watt. Run it on the machine that took the samples: nvidia-smi's
timestamps are in its local time.
"""
import json
import sys
import time
from datetime import datetime


def samples(path):
    out = []
    for line in open(path):
        f = [x.strip() for x in line.split(",")]
        if len(f) < 4:
            continue
        try:
            ts = datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f")
            out.append((time.mktime(ts.timetuple()) + ts.microsecond * 1e-6, float(f[1]),
                        float(f[2]), float(f[3])))
        except ValueError:
            continue
    return out


def main():
    bench = json.load(open(sys.argv[1]))
    smi = samples(sys.argv[2])
    rows = []
    print("%-30s %9s %9s %6s %7s %6s %5s %8s %9s" % ("case", "short_ms", "sust_ms", "ratio",
                                                    "SM_MHz", "W", "degC", "TFLOP/s",
                                                    "GFLOP/J"))
    for name, c in bench["cases"].items():
        w = c.get("sustain_window")
        if not w:
            continue
        inside = [s for s in smi if w[0] <= s[0] <= w[1]]
        flops = c["TFLOPs"] * 1e12 * c["ms"] * 1e-3
        tf = flops / (c["sustained_ms"] * 1e-3) / 1e12
        clk = sum(s[1] for s in inside) / len(inside) if inside else float("nan")
        pw = sum(s[2] for s in inside) / len(inside) if inside else float("nan")
        tc = sum(s[3] for s in inside) / len(inside) if inside else float("nan")
        print("%-30s %9.4f %9.4f %6.3f %7.0f %6.1f %5.1f %8.1f %9.1f  (%d samples)" %
              (name, c["short_ms"], c["sustained_ms"], c["sustained_ms"] / c["short_ms"], clk,
               pw, tc, tf, tf * 1e3 / pw if pw == pw and pw > 0 else float("nan"),
               len(inside)))
        rows.append({"case": name, "short_ms": c["short_ms"], "sustained_ms": c["sustained_ms"],
                     "sm_mhz": clk, "power_w": pw, "temp_c": tc, "tflops": tf,
                     "gflop_per_joule": tf * 1e3 / pw if pw == pw and pw > 0 else None,
                     "samples": len(inside)})
    if len(sys.argv) > 3:
        json.dump(rows, open(sys.argv[3], "w"), indent=1)


if __name__ == "__main__":
    main()
