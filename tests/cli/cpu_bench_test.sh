#!/usr/bin/env bash
# cpu_bench_test.sh -- bench/cpu_bench's arguments and where it writes (issue
# 15 item 3), as ctest runs it:
#
#   cpu_bench_test.sh CPU_BENCH
#
# --help and -h print the usage, start nothing and write no file (it once ran
# the bench and wrote a file named `--help`); a bad argument or a missing
# value exits 2 and writes nothing; a --quick run (the bench at small sizes)
# writes one JSON file into $TMPDIR, or to --out FILE, and nothing into the
# directory it runs in, which looks like a checkout (bench/results/ exists:
# the bench once wrote there by default).
set -u
bench=${1:?path to cpu_bench}
bench="$(cd "$(dirname "$bench")" && pwd)/$(basename "$bench")" # the test runs elsewhere
[ -x "$bench" ] || { echo "cpu_bench_test.sh: $bench is not an executable" >&2; exit 2; }
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}exitcode=86"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}exitcode=87"

root=$(mktemp -d "${TMPDIR:-/tmp}/kfuse-cpu-bench.XXXXXX")
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/checkout/bench/results" "$root/tmp"
export TMPDIR="$root/tmp"
cd "$root/checkout" || exit 1
passed=0
failed=0
fail() {
    failed=$((failed + 1))
    printf 'FAIL: %s\n' "$1"
    [ -s "$root/err" ] && printf '  stderr: %s\n' "$(head -c 2000 "$root/err")"
}
pass() { passed=$((passed + 1)); }
run() {
    "$@" >"$root/out" 2>"$root/err"
    rc=$?
}
# files DIR: the regular files under DIR, one per line
files() { find "$1" -type f | sort; }
nothing_written() {
    local f
    f="$(files "$root/checkout")$(files "$root/tmp")"
    if [ -z "$f" ]; then pass; else fail "$1 wrote: $f"; fi
}

for h in --help -h; do
    run timeout 20 "$bench" "$h"
    if [ "$rc" -eq 0 ]; then pass; else fail "$h: exit $rc"; fi
    if head -n 1 "$root/out" | grep -q '^usage: cpu_bench'; then pass; else fail "$h: no usage line"; fi
    if grep -q -- '--out FILE' "$root/out" && grep -q -- '--quick' "$root/out"; then pass; else
        fail "$h: the usage lacks --out FILE or --quick"
    fi
    if grep -q 'GB/s\|GFLOP' "$root/out"; then fail "$h: the bench ran"; else pass; fi
    nothing_written "$h"
done
for bad in "--frobnicate" "--out" "--threads" "--threads 0" "--threads x" "--out="; do
    # shellcheck disable=SC2086 # the words of $bad are the arguments
    run timeout 20 "$bench" $bad
    if [ "$rc" -eq 2 ]; then pass; else fail "'$bad': exit $rc, expected 2"; fi
    if grep -q '^cpu_bench: ' "$root/err"; then pass; else fail "'$bad': no message"; fi
    nothing_written "'$bad'"
done

# a quick run with no --out: the JSON in $TMPDIR, nothing in the checkout
run timeout 240 "$bench" --quick --threads 2
if [ "$rc" -eq 0 ]; then pass; else fail "--quick: exit $rc"; fi
if [ -z "$(files "$root/checkout")" ]; then pass; else fail "--quick wrote into the checkout: $(files "$root/checkout")"; fi
json=$(files "$root/tmp")
if [ "$(printf '%s\n' "$json" | grep -c .)" -eq 1 ] && [[ "$json" == "$root/tmp/cpu_bench-"*.json ]]; then pass; else
    fail "--quick: expected one \$TMPDIR/cpu_bench-*.json, found: $json"
fi
if [ -n "$json" ] && grep -q '"quick": true' "$json" && grep -q '"end": true' "$json" &&
    python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$json" 2>/dev/null; then
    pass
else
    fail "--quick: the JSON is incomplete or does not parse"
fi
if grep -q "^wrote $json\$" "$root/out"; then pass; else fail "--quick: does not say where it wrote"; fi
rm -f "$json"

# --out FILE: there and nowhere else
run timeout 240 "$bench" --quick --threads 2 --gemm-only --out "$root/o.json"
if [ "$rc" -eq 0 ]; then pass; else fail "--out: exit $rc"; fi
if [ -s "$root/o.json" ] && grep -q '"end": true' "$root/o.json"; then pass; else fail "--out: no complete JSON at FILE"; fi
nothing_written "--out FILE"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
