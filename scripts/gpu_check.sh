#!/usr/bin/env bash
# gpu_check.sh -- what is run on a machine with an NVIDIA GPU before a CUDA
# change is called done: builds kfuse (Release, tests and bench, in build-gpu/),
# runs every ctest suite (the GPU suites run there instead of skipping, and
# this script fails if one skipped), every example with --target cuda --check,
# compute-sanitizer (memcheck, racecheck, synccheck) on small graphs that take
# the vector loops' tails and the staged rows, memcheck on device-resident
# runs (test_device_run's test_in_place_* cases), then the bench and the
# run-overhead bench.
#
#   scripts/gpu_check.sh [--commit SHA] [--no-bench] [--no-sanitizer] [--quick]
#                        [--no-ctest] [--no-examples]
#
# --no-ctest and --no-examples leave those parts out, for a caller that runs
# the suites its own way (e.g. test_cuda_exec's tests as parallel processes)
# and wants the sanitizer runs from here.
#
# Logs and the bench JSON go to $OUT (default build-gpu/out); the bench also
# writes bench/results/<gpu>-<commit>.json. cmocka comes from the system, or
# from a git-ignored .cmocka/ (include/cmocka.h, lib/libcmocka.so*) carried
# to a machine that has none. The last lines are a summary; exit 1 on any
# failure.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

commit=""
bench=1
sanitize=1
quick=""
ctest_on=1
examples_on=1
while [ $# -gt 0 ]; do
    case "$1" in
    --commit) commit="$2"; shift 2 ;;
    --no-bench) bench=0; shift ;;
    --no-sanitizer) sanitize=0; shift ;;
    --quick) quick="--quick"; shift ;;
    --no-ctest) ctest_on=0; shift ;;
    --no-examples) examples_on=0; shift ;;
    *) echo "gpu_check.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
if [ -z "$commit" ]; then
    commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
fi
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
    cmake --build build-gpu --parallel "$jobs"; } >"$out/build.log" 2>&1; then
    tail -40 "$out/build.log"
    note "build: FAILED (build.log)"
    printf '%s\n' "${summary[@]}"
    exit 1
fi
note "build: ok ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null))"

# Every suite; the GPU ones must run, not skip.
if [ $ctest_on -eq 1 ]; then
    ctest --test-dir build-gpu --output-on-failure --parallel "$jobs" >"$out/ctest.log" 2>&1
    rc=$?
    tail -25 "$out/ctest.log"
    skipped=$(grep -E "test_cuda_exec|test_cuda_gpu|test_device_run|test_cuda_lifetime|test_cuda_attnsimt|test_gemm_rowepi|test_cuda_exec_decode" "$out/ctest.log" | grep -c "Skipped")
    if [ $rc -ne 0 ] || [ "$skipped" -ne 0 ]; then
        fail=1
        note "ctest: FAILED (rc $rc, GPU suites skipped: $skipped)"
    else
        note "ctest: $(grep -E '^[0-9]+% tests passed' "$out/ctest.log")"
    fi
fi

# Every example and pattern on the GPU against the reference evaluator, with
# the extra `kfuse run` options after the first three arguments: the log, a
# prime that spreads the seeds, and the label the summary and failures carry.
run_examples() {
    local log="$1" prime="$2" label="$3" f n_ok=0 n_all=0
    shift 3
    for f in examples/*.kfg examples/patterns/*.kfg; do
        n_all=$((n_all + 1))
        if build-gpu/kfuse run "$f" --target cuda "$@" --check \
            --seed $((n_all * prime + RANDOM)) >>"$out/$log" 2>&1; then
            n_ok=$((n_ok + 1))
        else
            echo "FAILED${label:+ ($label)}: $f" | tee -a "$out/$log"
            fail=1
        fi
    done
    note "examples --target cuda${label:+ $label} --check: $n_ok/$n_all passed"
}
if [ $examples_on -eq 1 ]; then
    run_examples examples.log 7919 ""
    # The same, every GEMM group forced to kfuse's generated kernel (sm_90a; on
    # other archs the recipes keep cuBLASLt and say why).
    run_examples examples_generated.log 104729 "--gemm generated" --gemm generated
    # And forced to the sm_80 form (mma.sync, cp.async), which runs on any GPU
    # from sm_80: the only way to run it where no A100 is at hand.
    run_examples examples_sm80.log 15485863 "--gemm sm80" --gemm sm80
fi

# compute-sanitizer on graphs whose sizes leave tails: an elementwise chain
# (on sm_90+ the bulk path's 259 whole chunks, then the vector loops for the
# rest), staged layer_norm and softmax rows, register-path rms_norm with a
# residual, over 517 rows.
if [ $sanitize -eq 1 ] && command -v compute-sanitizer >/dev/null; then
    g="$out/sanitize.kfg"
    cat >"$g" <<'EOF'
kfg 1
x = input(bf16[517, 4104])
s = input(bf16[4104])
r = input(bf16[517, 4104])
b = input(bf16[4104])
xs = mul(x, s)
h = add(xs, r)
e = gelu(h)
y = mul(e, s)
output y
l = input(bf16[517, 4096])
w = input(bf16[4096])
c = input(bf16[4096])
q = input(bf16[517, 4096])
ln = layer_norm(l, w, c)
output ln
hq = add(l, q)
rn = rms_norm(hq, w)
output rn
sm = softmax(q)
output sm
o = exp(b)
output o
EOF
    # The generated GEMM on a ragged shape (M, N, K no tile multiples; the
    # TMA boxes hang over every edge), its epilogue loading a bias and a
    # residual; 153 ping-pong tiles, so some blocks run both consumers.
    gg="$out/sanitize_gemm.kfg"
    printf '%s\n' 'kfg 1' 'x = input(bf16[1100, 200])' 'w = input(bf16[200, 2056])' \
        'b = input(bf16[2056])' 'r = input(bf16[1100, 2056])' 'h = matmul(x, w)' 'hb = add(h, b)' \
        'g = gelu(hb)' 'y = add(g, r)' 'output y' >"$gg"
    # The dual SwiGLU kernel (ping-pong 128 x (2 x 64), ragged M and K) and
    # the norm prologue on A's tiles (a statistics pre-pass, ragged M, N, K).
    gd="$out/sanitize_dual.kfg"
    printf '%s\n' 'kfg 1' 'x = input(bf16[1000, 264])' 'wg = input(bf16[264, 1096])' \
        'wu = input(bf16[264, 1096])' 'g = matmul(x, wg)' 'u = matmul(x, wu)' 'a = silu(g)' \
        'y = mul(a, u)' 'output y' >"$gd"
    gn="$out/sanitize_norm.kfg"
    printf '%s\n' 'kfg 1' 'x = input(bf16[1000, 264])' 'g = input(bf16[264])' \
        'w = input(bf16[264, 1096])' 'n = rms_norm(x, g)' 'y = matmul(n, w)' 'output y' >"$gn"
    # The SIMT kernel (f32): ragged M, N, K on 128 x 128 tiles (153 of
    # them), a bias and a residual in its epilogue.
    gf="$out/sanitize_gemm_f32.kfg"
    printf '%s\n' 'kfg 1' 'x = input(f32[1100, 200])' 'w = input(f32[200, 2056])' \
        'b = input(f32[2056])' 'r = input(f32[1100, 2056])' 'h = matmul(x, w)' 'hb = add(h, b)' \
        'g = gelu(hb)' 'y = add(g, r)' 'output y' >"$gf"
    for f in "$gg" "$gd" "$gn" "$gf"; do
        b=$(basename "$f" .kfg)
        for tool in memcheck racecheck; do
            if compute-sanitizer --tool "$tool" --error-exitcode 9 build-gpu/kfuse run "$f" \
                --target cuda --gemm generated --check >"$out/${b}_$tool.log" 2>&1; then
                note "compute-sanitizer $tool (generated GEMM, $b): clean"
            else
                fail=1
                tail -20 "$out/${b}_$tool.log"
                note "compute-sanitizer $tool (generated GEMM, $b): FAILED (${b}_$tool.log)"
            fi
        done
    done
    # The sm_80 form on the ragged GEMM (its cp.async copies zero-fill past
    # every edge; 128 x 128 tiles, 153 of them).
    for tool in memcheck racecheck; do
        if compute-sanitizer --tool "$tool" --error-exitcode 9 build-gpu/kfuse run "$gg" \
            --target cuda --gemm sm80 --check >"$out/sanitize_gemm_sm80_$tool.log" 2>&1; then
            note "compute-sanitizer $tool (sm_80 GEMM, sanitize_gemm): clean"
        else
            fail=1
            tail -20 "$out/sanitize_gemm_sm80_$tool.log"
            note "compute-sanitizer $tool (sm_80 GEMM, sanitize_gemm): FAILED (sanitize_gemm_sm80_$tool.log)"
        fi
    done
    # The decode GEMM kernel (M <= 64): ragged N and K, split over blocks
    # whose partials the last one adds (workspace and counters), both majors
    # of B, each program run twice.
    for tool in memcheck racecheck; do
        if KF_TEST_FILTER='test_a_ragged_decode_*' KF_SOURCE_DIR="$PWD" compute-sanitizer \
            --tool "$tool" --error-exitcode 9 build-gpu/tests/test_cuda_exec_decode \
            >"$out/sanitize_decode_$tool.log" 2>&1; then
            note "compute-sanitizer $tool (decode GEMM, ragged): clean"
        else
            fail=1
            tail -20 "$out/sanitize_decode_$tool.log"
            note "compute-sanitizer $tool (decode GEMM, ragged): FAILED (sanitize_decode_$tool.log)"
        fi
    done
    # Device-resident runs: the caller's exact-size buffers bound in place
    # (ragged shapes, both GEMM paths) and a run captured into a CUDA graph.
    if KF_TEST_FILTER='test_in_place_*' KF_SOURCE_DIR="$PWD" compute-sanitizer --tool memcheck \
        --error-exitcode 9 build-gpu/tests/test_device_run >"$out/sanitize_device_run.log" 2>&1; then
        note "compute-sanitizer memcheck (device-resident runs): clean"
    else
        fail=1
        tail -20 "$out/sanitize_device_run.log"
        note "compute-sanitizer memcheck (device-resident runs): FAILED (sanitize_device_run.log)"
    fi
    for tool in memcheck racecheck synccheck; do
        if compute-sanitizer --tool "$tool" --error-exitcode 9 build-gpu/kfuse run "$g" \
            --target cuda --check >"$out/sanitize_$tool.log" 2>&1; then
            note "compute-sanitizer $tool: clean"
        else
            fail=1
            tail -20 "$out/sanitize_$tool.log"
            note "compute-sanitizer $tool: FAILED (sanitize_$tool.log)"
        fi
    done
fi

if [ $bench -eq 1 ]; then
    if KF_SOURCE_DIR="$PWD" build-gpu/gpu_bench --commit "$commit" --out "$out/bench.json" $quick \
        >"$out/bench.log" 2>&1; then
        note "bench: $out/bench.json"
    else
        fail=1
        tail -20 "$out/bench.log"
        note "bench: FAILED (bench.log)"
    fi
    grep -vE "^peers: " "$out/bench.log" | tail -30
    # Host time per run: host pointers against device pointers.
    if KF_SOURCE_DIR="$PWD" build-gpu/run_overhead --commit "$commit" \
        --out "$out/run_overhead.json" >"$out/run_overhead.log" 2>&1; then
        note "run overhead: $out/run_overhead.json"
    else
        fail=1
        note "run overhead: FAILED (run_overhead.log)"
    fi
    cat "$out/run_overhead.log"
fi
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $fail
