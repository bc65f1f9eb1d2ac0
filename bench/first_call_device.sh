#!/usr/bin/env bash
# first_call_device.sh DIR COMMIT -- the device run of bench/first_call.py from a
# carried checkout DIR (the repo root's .xfer-NAME): builds libkfuse alone in
# build-NAME beside it; fills the kfuse cache with LLaMA's and GPT-2's cold first
# calls while the backend's CUDA tests run beside them (graph cache, disk cache,
# the first-run warm-up: correctness, not timed); then the timed warm first
# calls, each in a new process, alone: LLaMA without and with the first-run
# warm-up A B B A, LLaMA after a torch F.linear (is kfuse's first-run cost
# torch's cuBLASLt start-up too?), GPT-2 without and with. Logs and JSON in $OUT.
set -uo pipefail
src=$1; commit=$2; b=build-${src#.xfer-}
export OUT=${OUT:-/tmp/out}
SECONDS=0
{ cmake -S "$src" -B "$b" -DCMAKE_BUILD_TYPE=Release -DKF_BUILD_TESTS=OFF &&
  cmake --build "$b" -j16 --target kfuse; } > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build ${SECONDS} s"
lib=$PWD/$b/libkfuse.so
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
cd "$src"
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}  # the checkout's package (conftest imports it)
fc() {  # first_call.py BLOCK VARIANTS NAME
    python3 bench/first_call.py --commit "$commit" --kfuse-lib "$lib" --blocks "$1" \
        --variants "$2" --cache /tmp/fc-cache --out "$OUT/first_call_$3.json" 2>&1 |
        tee "$OUT/first_call_$3.log" | grep -v "^ *\"\|^{\|^}"
}
timeout 150 python3 -m pytest -q -p no:cacheprovider python/tests/test_torch_backend.py \
    --kfuse-lib "$lib" --kfuse-device cuda -k "graph_cache or disk_cache or warm" \
    > "$OUT/pytest_cuda.log" 2>&1 &
tests=$!
fc llama7b cold llama_cold
fc gpt2_medium cold gpt2_cold
wait $tests
echo "pytest cuda rc $?: $(tail -1 "$OUT/pytest_cuda.log") (${SECONDS} s)"
fc llama7b warm_nowarm,warm,warm,warm_nowarm llama_abba
echo "(${SECONDS} s)"
[ "$SECONDS" -lt 200 ] && fc gpt2_medium warm,warm_nowarm,warm_nowarm,warm gpt2_abba
echo "(${SECONDS} s)"
[ "$SECONDS" -lt 240 ] && fc llama7b warm_noearly,warm_nowarm_prelinear llama_diag
echo "total ${SECONDS} s"
tar -C "$OUT" -czf "$OUT/all.tgz" --exclude=all.tgz . && find "$OUT" \( -name "*.log" -o -name "*.json" \) ! -name build.log -delete
python3 - "$OUT" <<'PY'
import glob, json, sys
import tarfile
t = tarfile.open(sys.argv[1] + "/all.tgz")
for m in sorted(x for x in t.getnames() if x.endswith(".json")):
    d = json.load(t.extractfile(m))
    for b, row in d["blocks"].items():
        for k, c in row.items():
            st = c.get("stages_ms") or {}
            fr = [(p or {}).get("first_run_ms") for p in c.get("prepare_ms") or []]
            fr = fr[0] if fr else None
            cr = (st.get("c_run_end", 0) - st.get("c_run_start", 0)) if "c_run_start" in st else None
            wc = (st.get("warm_c_end", 0) - st.get("warm_c_start", 0)) if "warm_c_start" in st else None
            print(f"{d.get('device','?')[:12]} {b:11s} {k:22s} first {c.get('first_call_s', 0):.3f} s"
                  f" c_run {cr} warm_c {wc} blas {st.get('blas_start')} compile_end {st.get('kf_compile_end')} run_start "
                  f"{st.get('run_start')} warm {st.get('warm_start')}-{st.get('warm_end')} "
                  f"prelinear {c.get('prelinear_ms')}")
            if fr:
                print("    first_run_ms", json.dumps(fr))
PY
