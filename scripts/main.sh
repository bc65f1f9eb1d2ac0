#!/usr/bin/env bash
# main.sh -- installs what kfuse needs, builds it (Release, in build/) and runs
# the main job on the example transformer block: parse and print it, evaluate
# it with the reference evaluator on random inputs, then fuse, JIT-compile and
# run it on the CPU and check every output against the reference.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKF_BUILD_TESTS=OFF
cmake --build build --parallel "$(nproc 2>/dev/null || echo 2)"

echo "== kfuse print examples/block.kfg"
build/kfuse print examples/block.kfg
echo "== kfuse eval examples/block.kfg --seed 1"
build/kfuse eval examples/block.kfg --seed 1
echo "== kfuse run examples/block.kfg --target cpu --check --seed 1"
build/kfuse run examples/block.kfg --target cpu --check --seed 1
