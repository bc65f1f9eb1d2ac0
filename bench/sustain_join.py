#!/usr/bin/env python3
"""sustain_join.py -- joins gpu_bench --sustain's JSON with nvidia-smi samples.

    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu \
        --format=csv,noheader,nounits -lms 100 > smi.csv &
    gpu_bench --sustain 2 --cases ... --out bench.json
    python3 bench/sustain_join.py bench.json smi.csv

For each case with a sustain_window (--sustain) (the last half of its back-to-back runs,
epoch seconds), the mean SM clock, power and temperature of the samples inside
the window, the short (idle GPU) and sustained milliseconds, TFLOP/s and
TFLOP/s per watt. Run it on the machine that took the samples: nvidia-smi's
timestamps are in its local time. With --abba, each pair's blocks too, with
the SM clock and power of each block's last half.
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
    def mean_in(w, i):
        v = [x[i] for x in smi if w[0] <= x[0] <= w[1]]
        return sum(v) / len(v) if v else float("nan")

    # --abba pairs: each block's time with the SM clock and power of its
    # last half (power.draw is nvidia-smi's average over its own window, so
    # a block's power lags its kernel)
    for pr in bench.get("abba", []):
        ws = pr["windows"]
        clk = [mean_in(w, 1) for w in ws]
        pw = [mean_in(w, 2) for w in ws]
        print("abba %-28s %8.4f ms (%4.0f MHz %5.1f W)  %-28s %8.4f ms (%4.0f MHz %5.1f W)  "
              "B/A %.4f" % (pr["a"], pr["a_ms"], (clk[0] + clk[3]) / 2, (pw[0] + pw[3]) / 2,
                            pr["b"], pr["b_ms"], (clk[1] + clk[2]) / 2, (pw[1] + pw[2]) / 2,
                            pr["b_over_a"]))
        rows.append({"abba": [pr["a"], pr["b"]], "a_ms": pr["a_ms"], "b_ms": pr["b_ms"],
                     "blocks_ms": pr["blocks_ms"], "blocks_sm_mhz": clk, "blocks_power_w": pw})
    if len(sys.argv) > 3:
        json.dump(rows, open(sys.argv[3], "w"), indent=1)


if __name__ == "__main__":
    main()
