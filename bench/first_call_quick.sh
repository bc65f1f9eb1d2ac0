#!/usr/bin/env bash
# first_call_quick.sh DIR LIB -- a short device check from a carried checkout DIR
# (the repo root's .xfer-NAME) with a libkfuse.so built beforehand (LIB, relative
# to DIR; built on the device when it does not load there): the backend's CUDA
# tests of the graph cache and the first-run warm-up, then, while the device
# time lasts (BUDGET seconds, default 55), GPT-2's cold first call and a warm
# one with and without the warm-up, each in a new process. One tar of logs and
# JSON in $OUT.
set -uo pipefail
src=$1; budget=${BUDGET:-55}
export OUT=${OUT:-/tmp/out}
SECONDS=0
cd "$src"
lib=$PWD/$2
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
if ! python3 -c "import ctypes,sys; ctypes.CDLL(sys.argv[1])" "$lib"; then
    b=/tmp/build-quick
    { cmake -S . -B $b -DCMAKE_BUILD_TYPE=Release -DKF_BUILD_TESTS=OFF &&
      cmake --build $b -j16 --target kfuse; } > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
    lib=$b/libkfuse.so
    echo "built on the device (${SECONDS} s)"
fi
mkdir -p /tmp/q
timeout 100 python3 -m pytest -q -p no:cacheprovider python/tests/test_torch_backend.py \
    --kfuse-lib "$lib" --kfuse-device cuda -k "graph_cache or warm" > /tmp/q/pytest_cuda.log 2>&1
echo "pytest cuda rc $?: $(tail -1 /tmp/q/pytest_cuda.log) (${SECONDS} s)"
grep -E "passed|failed|PASS|FAIL|Error" /tmp/q/pytest_cuda.log | tail -8
if [ "$SECONDS" -lt $((budget - 45)) ]; then
    python3 bench/first_call.py --commit "$(cat .commit 2>/dev/null || echo -)" --kfuse-lib "$lib" \
        --blocks gpt2_medium --variants cold,warm,warm_nowarm --cache /tmp/q-cache \
        --out /tmp/q/first_call_gpt2.json 2>&1 | grep -v "^ *\"\|^{\|^}" | grep -v prepare_ms
fi
tar -C /tmp/q -czf "$OUT/quick.tgz" .
echo "total ${SECONDS} s"
