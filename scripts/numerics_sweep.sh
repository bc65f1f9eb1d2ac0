#!/usr/bin/env bash
# numerics_sweep.sh -- on a machine with an NVIDIA GPU: is test_numerics' GPU
# sweep of the GPT-2 block reproducible, and what decides its errors?
#
#   scripts/numerics_sweep.sh [SEED_A [SEED_B [SEEDS]]]
#
# Builds test_numerics and the CLI (Release, build-gpu/), then runs each GPU
# sweep (default recipes, unfused attention; GEMMs auto, cuBLASLt, generated)
# as its own process, all at once: with KF_TEST_SEED=SEED_A twice (the same
# inputs in two fresh processes: every seed's errors must repeat, and each
# process runs every seed twice and compares the bits) and once with SEED_B
# (other inputs), KF_NUMERICS_VERBOSE=1 (each sweep's program report names
# what ran each GEMM group, a measured choice's winner included). Then `kfuse
# run examples/gpt2_block.kfg --unfused-attention --seed 111 --check` per
# --gemm mode with a fresh cache directory, then again with it warm. Logs go
# to $OUT (default build-gpu/out) as logs.tgz and summary.txt, the summary
# also printed last. BUILD names the build directory (default build-gpu).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seed_a=${1:-111}
seed_b=${2:-222}
seeds=${3:-200}
build=${BUILD:-build-gpu}
out=${OUT:-$build/out}
logs=$(mktemp -d)
mkdir -p "$out"
cmocka=()
if [ ! -f /usr/include/cmocka.h ] && [ -f .cmocka/include/cmocka.h ]; then
    cmocka=(-DCMOCKA_ROOT="$PWD/.cmocka")
    export LD_LIBRARY_PATH="$PWD/.cmocka/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
t0=$(date +%s)
if ! { cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKF_BUILD_TESTS=ON "${cmocka[@]}" &&
    cmake --build "$build" --parallel "$(nproc)" --target test_numerics kfuse_cli; } \
    >"$logs/build.log" 2>&1; then
    tail -30 "$logs/build.log"
    echo "== build: FAILED"
    exit 1
fi
echo "== build: $(($(date +%s) - t0)) s ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader))"

tests=(gpu gpu_unfused_attention gpu_cublaslt gpu_unfused_cublaslt gpu_generated
    gpu_unfused_generated)
pids=()
for t in "${tests[@]}"; do
    for run in a1 a2 b; do
        case $run in a*) s=$seed_a ;; *) s=$seed_b ;; esac
        KF_SOURCE_DIR=$PWD KF_TEST_SEED=$s KF_NUMERICS_SEEDS=$seeds KF_NUMERICS_VERBOSE=1 \
            KF_TEST_FILTER="test_gpt2_block_passes_200_seeds_on_the_$t" \
            "$build"/tests/test_numerics >"$logs/sweep_${t}_$run.log" 2>&1 &
        pids+=($!)
    done
done
for m in auto cublaslt generated; do
    c=$(mktemp -d)
    for w in fresh warm; do
        echo "-- --gemm $m, $w cache: $("$build"/kfuse run examples/gpt2_block.kfg --target cuda \
            --unfused-attention --gemm $m --seed 111 --check --cache-dir "$c" 2>&1 |
            grep -o 'err=.*')"
    done
    rm -rf "$c"
done | tee "$logs/cli.log"
for p in "${pids[@]}"; do wait "$p"; done
echo "== sweeps: $(($(date +%s) - t0)) s"

{
# The summary: per sweep, the verdicts, whether SEED_A's two processes agree
# seed by seed, and what ran each GEMM group.
for t in "${tests[@]}"; do
    a1="$logs/sweep_${t}_a1.log" a2="$logs/sweep_${t}_a2.log" b="$logs/sweep_${t}_b.log"
    same=$(cmp -s <(grep ': seed ' "$a1") <(grep ': seed ' "$a2") && echo same || echo DIFFER)
    echo "== $t: KF_TEST_SEED=$seed_a in two processes: $(grep -c ': seed ' "$a1") and" \
        "$(grep -c ': seed ' "$a2") seed lines, $same"
    grep -h -E 'KF_TEST_SEED=.*seeds|FAIL|differ|SKIPPED|ERROR' "$a1" "$a2" "$b" | cut -c1-420
    for f in "$a1" "$a2" "$b"; do # a measured choice's times, the winner marked
        grep -E '^  group [0-9]+ .*\[measured:' "$f" |
            sed -E "s/^  group ([0-9]+) .*\[measured: (.*)\]\$/  ${f##*_}: group \1: \2/"
    done
done
} | tee "$out/summary.txt"
tar czf "$out/logs.tgz" -C "$logs" .
rm -rf "$logs"
