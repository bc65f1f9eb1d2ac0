#!/bin/sh
# build.sh -- builds the libFuzzer target tests/fuzz/fuzz_parse with clang,
# ASan and UBSan, straight from the library sources (no CMake needed, and it
# works when the main build uses gcc).
#
#   tests/fuzz/build.sh [OUT_DIR]      # default: build-fuzz/
#
# Constants are capped at 16 MiB in all per input here (1 GiB in the library),
# so a splat like const(f32[1 << 28], 0) cannot make each run slow.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-"$root/build-fuzz"}
cc=${CLANG:-clang}
mkdir -p "$out"
srcs=""
for dir in ir fusion codegen runtime frontend; do
    for f in $(find "$root/$dir" -name '*.c' 2>/dev/null | sort); do
        case "$f" in */frontend/kfuse_main.c) continue ;; esac
        srcs="$srcs $f"
    done
done
# shellcheck disable=SC2086
"$cc" -std=c11 -g -O1 -D_DEFAULT_SOURCE -DKF_PARSE_MAX_CONST_BYTES='(INT64_C(1) << 24)' \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -fno-omit-frame-pointer -Wall -Wextra -Wpedantic \
    -I"$root" -I"$root/include" \
    $srcs "$root/tests/fuzz/fuzz_parse.c" -lm -o "$out/fuzz_parse"
echo "$out/fuzz_parse"
