#!/usr/bin/env bash
# cli_test.sh -- the `kfuse` CLI's behaviour, as ctest runs it.
#
#   cli_test.sh example KFUSE FILE.kfg   print round-trips byte for byte (file and
#                                        stdin), eval is deterministic and finite
#   cli_test.sh errors  KFUSE FILE.kfg   exit codes and messages of every error path;
#                                        malformed and truncated inputs never crash
#
# Exit codes the CLI promises: 0 success, 1 runtime failure, 2 usage error or bad
# input. A sanitizer report, a signal or any other code fails the check.
set -u

mode=${1:?mode}
kfuse=${2:?path to kfuse}
file=${3:?a .kfg file}

# Sanitizer failures get their own exit codes so they cannot pass for exit 1.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}exitcode=86"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}exitcode=87"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kfuse-cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

fail() {
    failed=$((failed + 1))
    printf 'FAIL: %s\n' "$1"
    if [ -s "$tmp/err" ]; then
        printf '  stderr: %s\n' "$(head -c 2000 "$tmp/err")"
    fi
}
pass() { passed=$((passed + 1)); }

# run CMD...: runs it with stdout in $tmp/out, stderr in $tmp/err; sets $rc.
run() {
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}
# run_in FILE CMD...: the same, with FILE on standard input.
run_in() {
    local input=$1
    shift
    "$@" <"$input" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}

# sane DESC: the last run ended by itself, with a documented code and no
# sanitizer report.
sane() {
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ] && [ "$rc" -ne 2 ]; then
        fail "$1: exit code $rc"
        return 1
    fi
    if grep -q -E 'Sanitizer|runtime error:' "$tmp/err"; then
        fail "$1: sanitizer report"
        return 1
    fi
    return 0
}

# expect CODE DESC [STDERR-REGEX]: the last run exited CODE and its stderr
# matches the extended regex.
expect() {
    local want=$1 desc=$2 pattern=${3:-}
    sane "$desc" || return 0
    if [ "$rc" -ne "$want" ]; then
        fail "$desc: exit code $rc, expected $want"
    elif [ -n "$pattern" ] && ! grep -q -E -- "$pattern" "$tmp/err"; then
        fail "$desc: stderr does not match /$pattern/"
    else
        pass
    fi
}

# expect_out REGEX DESC: the last run's stdout matches.
expect_out() {
    if grep -q -E -- "$1" "$tmp/out"; then pass; else fail "$2: stdout does not match /$1/"; fi
}

example_checks() {
    local name
    name=$(basename "$file")

    run "$kfuse" print "$file"
    expect 0 "print $name"
    cp "$tmp/out" "$tmp/p1.kfg"
    if [ "$(head -n 1 "$tmp/p1.kfg")" = "kfg 1" ]; then pass; else fail "print $name: first line is not 'kfg 1'"; fi

    run "$kfuse" print "$tmp/p1.kfg"
    expect 0 "print (print $name)"
    if cmp -s "$tmp/p1.kfg" "$tmp/out"; then pass; else
        fail "print is not a fixed point for $name"
        diff "$tmp/p1.kfg" "$tmp/out" | head -n 20
    fi

    run_in "$file" "$kfuse" print -
    expect 0 "print - < $name"
    if cmp -s "$tmp/p1.kfg" "$tmp/out"; then pass; else fail "print from stdin differs for $name"; fi

    local n_outputs
    n_outputs=$(grep -c '^output ' "$tmp/p1.kfg")
    run "$kfuse" eval "$file" --seed 1
    expect 0 "eval $name --seed 1"
    cp "$tmp/out" "$tmp/e1"
    if [ "$(wc -l <"$tmp/e1")" -eq "$n_outputs" ]; then pass; else
        fail "eval $name: $(wc -l <"$tmp/e1") summary lines for $n_outputs outputs"
    fi
    if grep -q -v -E ' nan=0 inf=0$' "$tmp/e1"; then fail "eval $name: non-finite outputs: $(cat "$tmp/e1")"; else pass; fi
    if grep -q -E 'min=-?[0-9]' "$tmp/e1"; then pass; else fail "eval $name: no min= in $(cat "$tmp/e1")"; fi

    run "$kfuse" eval --seed=1 "$file"
    expect 0 "eval --seed=1 $name"
    if cmp -s "$tmp/e1" "$tmp/out"; then pass; else fail "eval $name is not deterministic for one seed"; fi

    run "$kfuse" eval "$file" --seed 2
    expect 0 "eval $name --seed 2"
    if grep -q '= input(' "$tmp/p1.kfg"; then
        if cmp -s "$tmp/e1" "$tmp/out"; then fail "eval $name: seeds 1 and 2 give the same summary"; else pass; fi
    fi

    run_in "$file" "$kfuse" eval - --seed 1
    expect 0 "eval - < $name"
    if cmp -s "$tmp/e1" "$tmp/out"; then pass; else fail "eval from stdin differs for $name"; fi

    # The report carries the CUDA recipes of the target, the same bytes every time.
    run "$kfuse" report "$file" --json --arch sm_80 --sm-count 7
    expect 0 "report --json --arch sm_80 $name"
    expect_out '"schema": "kfuse.report/2"' "report --json $name"
    expect_out '^  "cuda": \{"arch": "sm_80", "sm_count": 7, ' "report --json --arch sm_80 $name"
    cp "$tmp/out" "$tmp/r1"
    run "$kfuse" report "$file" --json --arch sm_80 --sm-count 7
    if cmp -s "$tmp/r1" "$tmp/out"; then pass; else fail "report --json of $name is not deterministic"; fi
    run "$kfuse" report "$file" --json --device cpu
    expect 0 "report --json --device cpu $name"
    expect_out '^  "cuda": null$' "report --device cpu $name"
    run "$kfuse" report "$file"
    expect 0 "report without --device $name" '^kfuse report: no --device'
    # ... it takes the GPU here, else says it assumes an h100 (issue 15 item 3)
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU 0'; then
        expect 0 "report without --device on a GPU machine $name" '^kfuse report: no --device: the GPU here, '
        if head -n 1 "$tmp/out" | grep -q -E '; device (h100|h200|a100)$'; then pass; else
            fail "report without --device $name: the first line names no GPU device"
        fi
    else
        expect 0 "report without --device and no GPU $name" '^kfuse report: no --device and no GPU here: assuming h100'
        if head -n 1 "$tmp/out" | grep -q '; device h100$'; then pass; else
            fail "report without --device $name: not costed for the h100 it assumed"
        fi
    fi
    run "$kfuse" report "$file" --device h200
    expect 0 "report --device h200 $name"
    expect_out '^cuda recipes: arch sm_90a, 132 SMs' "report --device h200 $name"
}

error_checks() {
    # help and version
    run "$kfuse" --help
    expect 0 "--help"
    expect_out '^usage: kfuse' "--help"
    expect_out '^  print ' "--help lists print"
    expect_out '^  eval ' "--help lists eval"
    # it says what this build does (issue 15 item 3): the old text said the
    # build "parses, prints and evaluates" while it also compiled and ran
    if grep -q -E 'parses, prints|prints and evaluates' "$tmp/out"; then
        fail "--help still says the build only parses, prints and evaluates"
    else
        pass
    fi
    expect_out 'compiles them for the CPU \(LLVM: (built in|not in this build)\)' "--help names the CPU backend"
    expect_out 'or a CUDA GPU' "--help names the CUDA backend"
    for cmd in run report cache aot; do
        expect_out "^  $cmd " "--help lists $cmd"
    done
    expect_out '^  KF_CACHE_DIR=DIR ' "--help lists the environment it maps"
    run "$kfuse" -h
    expect 0 "-h"
    run "$kfuse" --version
    expect 0 "--version"
    expect_out '^kfuse [0-9]+\.[0-9]+\.[0-9]+$' "--version"
    local cmd
    for cmd in print eval help; do
        run "$kfuse" help "$cmd"
        expect 0 "help $cmd"
        expect_out "^usage: kfuse $cmd" "help $cmd"
        run "$kfuse" "$cmd" --help
        expect 0 "$cmd --help"
        expect_out "^usage: kfuse $cmd" "$cmd --help"
    done
    run "$kfuse" help
    expect 0 "help"
    expect_out '^usage: kfuse' "help"

    # usage errors
    run "$kfuse"
    expect 2 "no arguments" '^usage: kfuse'
    run "$kfuse" frobnicate
    expect 2 "unknown command" "unknown command 'frobnicate'"
    run "$kfuse" --frobnicate
    expect 2 "unknown option" "unknown option '--frobnicate'"
    run "$kfuse" help frobnicate
    expect 2 "help for an unknown command" "unknown command"
    run "$kfuse" print
    expect 2 "print without FILE" "missing FILE"
    run "$kfuse" print "$file" "$file"
    expect 2 "print with two files" "unexpected argument"
    run "$kfuse" print --seed 1 "$file"
    expect 2 "print --seed" "unknown option '--seed'"
    run "$kfuse" eval "$file" --seed
    expect 2 "eval --seed without a value" "needs a value"
    run "$kfuse" eval "$file" --seed abc
    expect 2 "eval --seed abc" "unsigned integer"
    run "$kfuse" eval "$file" --seed -1
    expect 2 "eval --seed -1" "unsigned integer"
    run "$kfuse" eval "$file" --seed 99999999999999999999999
    expect 2 "eval --seed overflow" "unsigned integer"
    run "$kfuse" eval "$file" --seed 18446744073709551615
    expect 0 "eval --seed UINT64_MAX"

    # unreadable input
    run "$kfuse" print "$tmp/does-not-exist.kfg"
    expect 2 "missing file" "^kfuse: cannot read $tmp/does-not-exist.kfg: No such file or directory$"
    run "$kfuse" eval "$tmp/does-not-exist.kfg"
    expect 2 "eval of a missing file" "^kfuse: cannot read .*: No such file or directory$"
    run "$kfuse" print "$tmp"
    expect 2 "a directory" "^kfuse: cannot read $tmp: Is a directory$"
    cp "$file" "$tmp/locked.kfg"
    chmod 000 "$tmp/locked.kfg"
    if [ ! -r "$tmp/locked.kfg" ]; then # root reads anything
        run "$kfuse" print "$tmp/locked.kfg"
        expect 2 "an unreadable file" "^kfuse: cannot read .*: Permission denied$"
    fi
    chmod 644 "$tmp/locked.kfg"

    # files that do not parse: FILE:LINE:COL: message, exit 2
    printf 'kfg 1\nx = input(f32[8, 64]\noutput x\n' >"$tmp/syntax.kfg"
    run "$kfuse" print "$tmp/syntax.kfg"
    expect 2 "syntax error" "^$tmp/syntax.kfg:2:[0-9]+: "
    run "$kfuse" eval "$tmp/syntax.kfg"
    expect 2 "eval of a syntax error" "^$tmp/syntax.kfg:2:[0-9]+: "
    run_in "$tmp/syntax.kfg" "$kfuse" print -
    expect 2 "syntax error on stdin" "^<stdin>:2:[0-9]+: "
    printf 'kfg 1\na = input(f32[8, 64])\nb = input(f32[3])\nc = add(a, b)\noutput c\n' >"$tmp/shape.kfg"
    run "$kfuse" print "$tmp/shape.kfg"
    expect 2 "shape error" "^$tmp/shape.kfg:4:[0-9]+: .*add"
    printf 'kfg 1\nx = input(f32[4])\ny = frobnicate(x)\noutput y\n' >"$tmp/op.kfg"
    run "$kfuse" print "$tmp/op.kfg"
    expect 2 "unknown op" "^$tmp/op.kfg:3:[0-9]+: "
    : >"$tmp/empty.kfg"
    run "$kfuse" print "$tmp/empty.kfg"
    expect 2 "empty file" "^$tmp/empty.kfg:[0-9]+:[0-9]+: "
    printf 'kfg 2\n' >"$tmp/version.kfg"
    run "$kfuse" print "$tmp/version.kfg"
    expect 2 "wrong format version" "^$tmp/version.kfg:1:[0-9]+: "

    # runtime failures: exit 1
    printf 'kfg 1\nx = input(f32[4])\n' >"$tmp/no-outputs.kfg"
    run "$kfuse" eval "$tmp/no-outputs.kfg"
    expect 1 "eval of a graph without outputs" "^kfuse: "
    printf 'kfg 1\nx = input(f32[8192, 8192])\ny = relu(x)\nz = exp(y)\noutput z\n' >"$tmp/huge.kfg"
    run "$kfuse" eval "$tmp/huge.kfg"
    expect 1 "eval of a graph with too many elements" "too large for the reference evaluator"
    # a declaration allocates nothing: a 4 GiB decode KV cache parses, prints
    # and plans; only evaluating it is refused
    printf 'kfg 1\nk = input(bf16[64, 32, 8192, 128])\nq = input(bf16[64, 32, 1, 128])\ns = matmul(q, k, transpose_b=true)\noutput s\n' >"$tmp/kv.kfg"
    run "$kfuse" print "$tmp/kv.kfg"
    expect 0 "print of a 4 GiB input"
    if cmp -s "$tmp/kv.kfg" "$tmp/out"; then pass; else fail "print of a 4 GiB input is not a fixed point"; fi
    run "$kfuse" report "$tmp/kv.kfg"
    expect 0 "report of a 4 GiB input"
    expect_out 'k bf16\[64, 32, 8192, 128\]' "report of a 4 GiB input"
    run "$kfuse" eval "$tmp/kv.kfg"
    expect 1 "eval of a 4 GiB input" "too large for the reference evaluator"
    printf 'kfg 1\nc = const(bf16[1024, 1024, 1024], 0)\noutput c\n' >"$tmp/bigconst.kfg"
    run "$kfuse" print "$tmp/bigconst.kfg"
    expect 2 "print of a 2 GiB const" "expected a const of at most 1024 MiB \(make larger data a graph input\)"
    printf 'kfg 1\nx = input(f32[4294967296, 4294967296])\noutput x\n' >"$tmp/overflow.kfg"
    run "$kfuse" print "$tmp/overflow.kfg"
    expect 2 "print of an input whose element count overflows int64" "element count fits in 64 bits"
    printf 'kfg 1\na = input(f32[4096, 4096])\nb = matmul(a, a)\noutput b\n' >"$tmp/slow.kfg"
    run "$kfuse" eval "$tmp/slow.kfg"
    expect 1 "eval of a graph with too many multiply-adds" "too large for the reference evaluator"
    if [ -w /dev/full ]; then
        "$kfuse" print "$file" >/dev/full 2>"$tmp/err"
        rc=$?
        expect 1 "print to a full disk" "cannot write"
    fi

    # graphs without inputs and with every dtype evaluate
    printf 'kfg 1\na = iota(f32[2, 3], axis=1)\nb = const(f32[], 2)\nc = mul(a, b)\noutput c\n' >"$tmp/const.kfg"
    run "$kfuse" eval "$tmp/const.kfg"
    expect 0 "eval of a graph without inputs"
    expect_out '^c  f32\[2, 3\]  min=0 max=4 mean=2 l2=6.32456 nan=0 inf=0$' "eval summary of iota*2"
    printf 'kfg 1\na = input(f16[8])\nb = input(bf16[8])\nc = input(f64[8])\nd = input(i32[8])\ne = input(bool[8])\nf = cast(a, f64)\ng = cast(b, f64)\nh = add(f, g)\ni = add(h, c)\nj = cast(d, f64)\nk = where(e, i, j)\noutput k\noutput d\noutput e\n' >"$tmp/dtypes.kfg"
    run "$kfuse" eval "$tmp/dtypes.kfg" --seed 7
    expect 0 "eval with every dtype"
    if [ "$(wc -l <"$tmp/out")" -eq 3 ]; then pass; else fail "eval with every dtype: $(wc -l <"$tmp/out") lines"; fi
    expect_out '^d  i32\[8\]  min=-?[0-9]+ max=-?[0-9]+ ' "eval summary of an i32 input"
    expect_out '^e  bool\[8\]  min=[01] max=[01] ' "eval summary of a bool input"

    # malformed and truncated input never crashes or hangs
    local size cut
    size=$(wc -c <"$file")
    for ((cut = 0; cut < size; cut += 5)); do
        head -c "$cut" "$file" >"$tmp/cut.kfg"
        run timeout 10 "$kfuse" print "$tmp/cut.kfg"
        sane "print of $file cut at byte $cut" && pass
    done
    local i
    for i in 1 2 3 4 5 6 7 8; do
        # deterministic garbage: the example with bytes replaced
        LC_ALL=C awk -v seed="$i" 'BEGIN { srand(seed) } { s = $0; out = ""
            for (j = 1; j <= length(s); j++) { c = substr(s, j, 1)
                if (rand() < 0.08) c = substr("()[],=%#-.e\t x0:;\"", int(rand() * 19) + 1, 1)
                out = out c }
            print out }' "$file" >"$tmp/mangled.kfg"
        run timeout 10 "$kfuse" print "$tmp/mangled.kfg"
        sane "print of mangled input $i" && pass
        run timeout 10 "$kfuse" eval "$tmp/mangled.kfg"
        sane "eval of mangled input $i" && pass
    done
    # aot on a full disk: files may not grow past 4 KiB (SIGXFSZ ignored, so
    # writes fail with EFBIG); the CUBINs do not fit, and aot must say so.
    run bash -c "trap '' XFSZ; ulimit -f 4; exec \"\$0\" aot --arch sm_80 \"\$1\" -o \"\$2\"" \
        "$kfuse" "$file" "$tmp/fullcache"
    expect 1 "aot on a full disk" 'kernels were not stored in .*: the cache is incomplete'
    # aot counts generated kernels, which are not the report's kernel groups
    # (a group may be a prologue kernel and a cuBLASLt GEMM, or cuBLASLt
    # alone): its line names both, and its groups are the report's
    local block groups
    block="$(dirname "$file")/block.kfg"
    groups=$("$kfuse" report "$block" --arch sm_80 --sm-count 7 2>/dev/null | sed -n 's/^\([0-9]*\) kernels for .*/\1/p')
    run "$kfuse" aot --arch sm_80 "$block" -o "$tmp/aotcache"
    expect 0 "aot of block.kfg"
    expect_out "^.*block.kfg +sm_80 +[0-9]+ kernels? .*\(${groups:-?} groups?; [0-9]+ cuBLASLt steps? needs? no kernel\)$" \
        "aot's line names the report's ${groups:-?} groups and the cuBLASLt steps"
    expect_out '^[0-9]+ generated kernels? for 1 graph and 1 arch in ' "aot's total says it counts generated kernels"
    # run: the cache a run uses is the user's choice (--cache-dir DIR), or none
    run "$kfuse" run "$file" --no-cache --cache-dir "$tmp/x"
    expect 2 "run --no-cache --cache-dir" 'exclude each other'
    run "$kfuse" run "$file" --cache-dir
    expect 2 "run --cache-dir without DIR" 'needs a directory'
    # --choice-margin: a fraction in [0, 1), anything else a usage error
    for bad in 1 -0.1 nan abc ""; do
        run "$kfuse" run "$file" --target cpu --no-cache --choice-margin "$bad"
        expect 2 "run --choice-margin '$bad'" 'choice-margin takes a number from 0 to below 1'
    done
    # --choice-load-bias: the same range
    for bad in 1 -0.1 nan abc ""; do
        run "$kfuse" run "$file" --target cpu --no-cache --choice-load-bias "$bad"
        expect 2 "run --choice-load-bias '$bad'" 'choice-load-bias takes a number from 0 to below 1'
    done
    # (the runs themselves need the CPU backend: a build without LLVM, as on
    # the GPU machine, has none)
    if "$kfuse" --help | grep -q 'LLVM: built in'; then
        run "$kfuse" run "$file" --target cpu --no-cache --choice-margin 0.1
        expect 0 "run --choice-margin 0.1"
        KF_CHOICE_MARGIN=2 run "$kfuse" run "$file" --target cpu --no-cache
        expect 0 "run with KF_CHOICE_MARGIN=2" 'ignoring KF_CHOICE_MARGIN=2'
        run "$kfuse" run "$file" --target cpu --no-cache --choice-load-bias 0.025
        expect 0 "run --choice-load-bias 0.025"
        KF_CHOICE_LOAD_BIAS=2 run "$kfuse" run "$file" --target cpu --no-cache
        expect 0 "run with KF_CHOICE_LOAD_BIAS=2" 'ignoring KF_CHOICE_LOAD_BIAS=2'
    fi
    # a cache this user must not use: the message says what the CLI can
    # change (--cache-dir, --no-cache), not the library's KF_FLAG_NO_CACHE,
    # on either target, whether the directory came from --cache-dir or
    # KF_CACHE_DIR
    mkdir -p "$tmp/open-cache"
    chmod 0777 "$tmp/open-cache"
    local how target
    for how in option env; do
        for target in cpu cuda; do
            if [ "$how" = option ]; then
                run "$kfuse" run "$file" --target "$target" --cache-dir "$tmp/open-cache"
            else
                KF_CACHE_DIR="$tmp/open-cache" run "$kfuse" run "$file" --target "$target"
            fi
            expect 1 "run ($how, $target) with a cache writable by others" \
                "cache cannot be used: cache directory '$tmp/open-cache' is writable by group or others"
            if grep -q -- '--cache-dir DIR' "$tmp/err" && grep -q -- '--no-cache' "$tmp/err"; then
                pass
            else
                fail "run ($how, $target) with an unusable cache: the hint lacks --cache-dir DIR or --no-cache"
            fi
            if grep -q 'KF_FLAG_NO_CACHE' "$tmp/err"; then
                fail "run ($how, $target) with an unusable cache: the hint names KF_FLAG_NO_CACHE"
            else
                pass
            fi
        done
    done
    if [ "$(id -u)" -eq 0 ]; then # root can give a directory to another user
        mkdir -p "$tmp/their-cache"
        chmod 0700 "$tmp/their-cache"
        chown 4242 "$tmp/their-cache"
        run "$kfuse" run "$file" --target cpu --cache-dir "$tmp/their-cache"
        expect 1 "run with a cache owned by another user" 'is owned by uid 4242, not by you'
        if grep -q -- '--cache-dir DIR' "$tmp/err" && ! grep -q -E 'KF_FLAG_NO_CACHE|--dir or' "$tmp/err"; then
            pass
        else
            fail "run with another user's cache: the hint does not name --cache-dir DIR alone"
        fi
        run "$kfuse" aot --arch sm_80 "$file" -o "$tmp/their-cache"
        expect 1 "aot into a cache owned by another user" 'name a directory of your own with -o DIR'
    fi
    if "$kfuse" --help | grep -q 'LLVM: built in'; then
        KF_CACHE_DIR="$tmp/open-cache" run "$kfuse" run "$file" --target cpu --no-cache
        expect 0 "run --no-cache beside an unusable KF_CACHE_DIR"
        run "$kfuse" run "$file" --target cpu --cache-dir "$tmp/cdir"
        expect 0 "run --cache-dir"
        if [ -n "$(ls -A "$tmp/cdir" 2>/dev/null)" ]; then pass; else fail "run --cache-dir left it empty"; fi
        KF_CACHE_DIR="$tmp/cenv" run "$kfuse" run "$file" --target cpu --no-cache
        expect 0 "run --no-cache"
        if [ ! -e "$tmp/cenv" ]; then pass; else fail "run --no-cache wrote a cache"; fi
        KF_CACHE_DIR="$tmp/cenv2" run "$kfuse" run "$file" --target cpu
        expect 0 "run with KF_CACHE_DIR"
        if [ -d "$tmp/cenv2" ]; then pass; else fail "KF_CACHE_DIR did not reach the run"; fi
    fi
    printf 'kfg 1\nx = input(f32[4])\x00\ny = relu(x)\noutput y\n' >"$tmp/nul.kfg"
    run "$kfuse" print "$tmp/nul.kfg"
    expect 2 "a NUL byte" "^$tmp/nul.kfg:2:[0-9]+: "
    LC_ALL=C awk 'BEGIN { srand(42); for (i = 0; i < 4096; i++) printf "%c", int(rand() * 255) + 1 }' \
        </dev/null >"$tmp/random.kfg"
    run timeout 10 "$kfuse" print "$tmp/random.kfg"
    expect 2 "random bytes"
}

case "$mode" in
example) example_checks ;;
errors) error_checks ;;
*)
    echo "cli_test.sh: unknown mode '$mode'" >&2
    exit 2
    ;;
esac

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
