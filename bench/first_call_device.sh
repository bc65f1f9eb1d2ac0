#!/usr/bin/env bash
# first_call_device.sh DIR COMMIT -- the device run of bench/first_call.py from a
# carried checkout DIR (the repo root's .xfer-NAME): builds libkfuse alone in
# build-NAME beside it, times Dynamo's entry-point scan, runs the backend's
# graph-cache tests on CUDA, then LLaMA's first calls: cold, then warm with and
# without the graph cache A B B A, then warm with CUDA's eager module loading.
# Logs and JSON in $OUT.
set -uo pipefail
src=$1; commit=$2; b=build-${src#.xfer-}
export OUT=${OUT:-/tmp/out}
SECONDS=0
{ cmake -S "$src" -B "$b" -DCMAKE_BUILD_TYPE=Release -DKF_BUILD_TESTS=OFF &&
  cmake --build "$b" -j16 --target kfuse; } > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build ${SECONDS} s"
lib=$PWD/$b/libkfuse.so
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv,noheader
python3 -c "import time; t=time.perf_counter(); from importlib.metadata import entry_points; e=entry_points(group='torch_dynamo_backends'); print('entry_points scan', round(time.perf_counter()-t, 3), 's', list(e.names))"
cd "$src"
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}  # the checkout's package (conftest imports it)
timeout 120 python3 -m pytest -q -p no:cacheprovider python/tests/test_torch_backend.py \
    --kfuse-lib "$lib" --kfuse-device cuda -k "graph or disk_cache or mlp_runs" > "$OUT/pytest_cuda.log" 2>&1
echo "pytest cuda rc $?: $(tail -1 "$OUT/pytest_cuda.log")"
python3 bench/first_call.py --commit "$commit" --kfuse-lib "$lib" --blocks llama7b \
    --variants cold,warm,warm_nograph,warm_nograph,warm --cache /tmp/fc-cache \
    --out "$OUT/first_call_llama_abba.json" 2>&1 |
    tee "$OUT/first_call_llama_abba.log" | grep -v "^ *\"\|^{\|^}"
timeout 60 python3 bench/first_call.py --commit "$commit" --kfuse-lib "$lib" --blocks llama7b \
    --variants warm_eager_loading --cache /tmp/fc-cache --out "$OUT/first_call_llama_eager_loading.json" 2>&1 |
    grep -v "^ *\"\|^{\|^}"
echo "total ${SECONDS} s"
