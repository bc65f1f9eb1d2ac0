#!/usr/bin/env bash
# gpu_attention.sh -- the fused attention kernels on a GPU machine, in one call
# (device time is scarce): a Release build of kfuse, the GPU suite's
# attention tests (FA2, sm_90a and fallback, against the reference
# evaluator), every example and pattern that holds attention with --target
# cuda --check (default, and --attention fa2), compute-sanitizer memcheck
# and racecheck on ragged fused cases (both kernels), and with --bench the
# attention cases of bench/gpu_bench (and their peers).
#
#   scripts/gpu_attention.sh [--commit SHA] [--bench] [--no-tests]
#       [--filter PAT[,PAT...]] [--modes auto[,fa2]] [--sanitizer memcheck[,racecheck]]
#       [--cases A,B] [--no-torch-compile] [--ab-define NAME=VALUE] [--ncu A,B]
#
# --filter: the test_cuda_exec tests to run (cmocka wildcards, one run each;
# default *attention*); --modes: the --attention modes the examples run in
# (default auto,fa2); --sanitizer: the compute-sanitizer tools (default both);
# --cases, --no-torch-compile: passed to gpu_bench (and its peers);
# --ab-define (repeatable): also builds gpu_bench with -DNAME=VALUE (a
# build-time switch kept for measuring, e.g. KF_SM90_QBUF=1) in build-gpu-abN/
# and benches the same cases without peers, so both kernels are timed on the
# same machine (bench_attn_abN.json).
# --ncu: for each named gpu_bench case, one Nsight Compute profile of its
# first fused kernel (fa3*/fa_*; throughputs, warp states, per-instruction
# stall sampling), kept as ncu_CASE.ncu-rep with its details and its
# SASS-level source page as CSV beside it (read offline).
#
# Logs go to $OUT (default build-gpu/out); the last lines are a summary; exit 1
# on any failure. scripts/gpu_check.sh remains the whole check.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
commit=unknown
bench=0
tests=1
filters="*attention*"
modes="auto,fa2"
tools="memcheck,racecheck"
cases=()
nocompile=()
abdefs=()
ncu_cases=""
while [ $# -gt 0 ]; do
    case "$1" in
    --commit) commit="$2"; shift 2 ;;
    --bench) bench=1; shift ;;
    --no-tests) tests=0; shift ;;
    --filter) filters="$2"; shift 2 ;;
    --modes) modes="$2"; shift 2 ;;
    --sanitizer) tools="$2"; shift 2 ;;
    --cases) cases=(--cases "$2"); shift 2 ;;
    --no-torch-compile) nocompile=(--no-torch-compile); shift ;;
    --ab-define) abdefs+=("$2"); shift 2 ;;
    --ncu) ncu_cases="$2"; shift 2 ;;
    *) echo "gpu_attention.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
out=${OUT:-build-gpu/out}
mkdir -p "$out"
jobs=$(nproc 2>/dev/null || echo 4)
summary=()
fail=0
note() { summary+=("$1"); echo "== $1"; }
cmocka=()
if [ ! -f /usr/include/cmocka.h ] && [ -f .cmocka/include/cmocka.h ]; then
    cmocka=(-DCMOCKA_ROOT="$PWD/.cmocka")
    export LD_LIBRARY_PATH="$PWD/.cmocka/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if ! { cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DKF_BUILD_TESTS=ON \
    -DKF_BUILD_BENCH=ON -DKF_BENCH_COMMIT="$commit" "${cmocka[@]}" &&
    cmake --build build-gpu --parallel "$jobs" --target kfuse_cli test_cuda_exec gpu_bench; } \
    >"$out/build.log" 2>&1; then
    tail -40 "$out/build.log"
    note "build: FAILED"
    printf '%s\n' "${summary[@]}"
    exit 1
fi
note "build: ok ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null))"
export KF_SOURCE_DIR="$PWD"

if [ $tests -eq 1 ]; then
    : >"$out/attn_tests.log"
    IFS=, read -ra pats <<<"$filters"
    for pat in "${pats[@]}"; do
        if KF_TEST_FILTER="$pat" build-gpu/tests/test_cuda_exec >>"$out/attn_tests.log" 2>&1 &&
            ! grep -q SKIPPED "$out/attn_tests.log"; then
            note "GPU tests $pat: ok ($(grep -c '^\[       OK \]' "$out/attn_tests.log") so far)"
        else
            fail=1
            grep -E "FAILED|error|exceeds|SKIPPED" "$out/attn_tests.log" | head -20
            note "GPU tests $pat: FAILED (attn_tests.log)"
        fi
    done
    n_ok=0
    n_all=0
    IFS=, read -ra mlist <<<"$modes"
    for mode in "${mlist[@]}"; do
        for f in examples/*.kfg examples/patterns/attention_*.kfg; do
            n_all=$((n_all + 1))
            if build-gpu/kfuse run "$f" --target cuda --check --report --attention $mode \
                --seed $((n_all * 7919)) >>"$out/examples.log" 2>&1; then
                n_ok=$((n_ok + 1))
            else
                echo "FAILED: $f (--attention $mode)" | tee -a "$out/examples.log"
                fail=1
            fi
        done
    done
    note "attention examples --target cuda --check: $n_ok/$n_all passed"
    if command -v compute-sanitizer >/dev/null; then
        g="$out/attn_ragged.kfg"
        cat >"$g" <<'KFG'
kfg 1
q = input(bf16[1, 2, 130, 128])
k = input(bf16[1, 2, 197, 128])
v = input(bf16[1, 2, 197, 128])
qk = matmul(q, k, transpose_b=true)
sc = const(bf16[], 0.08838834764)
s0 = mul(qk, sc)
row = iota(i32[130, 197], axis=0)
col = iota(i32[130, 197], axis=1)
keep = ge(row, col)
ninf = const(bf16[], -inf)
s1 = where(keep, s0, ninf)
p = softmax(s1)
o = matmul(p, v)
output o
q2 = input(f16[1, 2, 4, 77, 64])
k2 = input(f16[1, 2, 1, 77, 64])
v2 = input(f16[1, 2, 1, 77, 64])
qk2 = matmul(q2, k2, transpose_b=true)
sc2 = const(f16[], 0.125)
t2 = mul(qk2, sc2)
p2 = softmax(t2)
o2 = matmul(p2, v2)
output o2
l32 = cast(s1, f32)
lse = logsumexp(l32, axis=-1)
output lse
KFG
        IFS=, read -ra tlist <<<"$tools"
        for mode in fa2 sm90; do
            want="fused attention (sm_80 mma.sync kernel)"
            [ $mode = sm90 ] && want="fused attention (sm_90a wgmma/TMA kernel)"
            for tool in "${tlist[@]}"; do
                log="$out/sanitize_attn_${mode}_$tool.log"
                if compute-sanitizer --tool "$tool" --error-exitcode 9 build-gpu/kfuse run "$g" \
                    --target cuda --check --report --attention $mode >"$log" 2>&1 &&
                    grep -q "$want" "$log"; then
                    note "compute-sanitizer $tool ($mode attention, ragged): clean"
                else
                    fail=1
                    tail -20 "$log"
                    note "compute-sanitizer $tool ($mode attention): FAILED"
                fi
            done
        done
    else
        note "compute-sanitizer: not found, not run"
    fi
fi
if [ -n "$ncu_cases" ]; then
    IFS=, read -ra nlist <<<"$ncu_cases"
    for c in "${nlist[@]}"; do
        if timeout 240 ncu -k 'regex:^fa' -c 1 --section SpeedOfLight \
            --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
            --section WarpStateStats --section SchedulerStats --section SourceCounters \
            --section InstructionStats --section LaunchStats --section Occupancy \
            -f -o "$out/ncu_$c" build-gpu/gpu_bench --attention --no-peers --reps 1 \
            --cases "$c" >"$out/ncu_$c.log" 2>&1; then
            ncu -i "$out/ncu_$c.ncu-rep" --page details --csv >"$out/ncu_${c}_details.csv" 2>&1
            ncu -i "$out/ncu_$c.ncu-rep" --page source --csv --print-source sass \
                >"$out/ncu_${c}_sass.csv" 2>&1
            note "ncu $c: ncu_$c.ncu-rep"
        else
            tail -5 "$out/ncu_$c.log"
            note "ncu $c: FAILED (ncu_$c.log)"
        fi
    done
fi
if [ $bench -eq 1 ]; then
    if build-gpu/gpu_bench --attention --commit "$commit" --out "$out/bench_attn.json" \
        "${cases[@]}" "${nocompile[@]}" >"$out/bench_attn.log" 2>&1; then
        note "bench: $out/bench_attn.json"
    else
        fail=1
        note "bench: FAILED (bench_attn.log)"
    fi
    grep -vE "^peers: " "$out/bench_attn.log" | tail -30
fi
n_ab=0
for abdef in "${abdefs[@]}"; do
    [ $bench -eq 1 ] || break
    n_ab=$((n_ab + 1))
    if { cmake -S . -B build-gpu-ab$n_ab -DCMAKE_BUILD_TYPE=Release -DKF_BUILD_BENCH=ON \
        -DKF_BUILD_TESTS=OFF -DKF_BENCH_COMMIT="$commit-$abdef" -DCMAKE_C_FLAGS="-D$abdef" &&
        cmake --build build-gpu-ab$n_ab --parallel "$jobs" --target gpu_bench; } \
        >"$out/build_ab$n_ab.log" 2>&1 &&
        build-gpu-ab$n_ab/gpu_bench --attention --no-peers --commit "$commit-$abdef" \
            --out "$out/bench_attn_ab$n_ab.json" "${cases[@]}" >"$out/bench_ab$n_ab.log" 2>&1; then
        note "bench with -D$abdef: $out/bench_attn_ab$n_ab.json"
        grep -E "^attn_" "$out/bench_ab$n_ab.log" | tail -12
    else
        fail=1
        tail -20 "$out/build_ab$n_ab.log" "$out/bench_ab$n_ab.log" 2>/dev/null
        note "bench with -D$abdef: FAILED"
    fi
done
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $fail
