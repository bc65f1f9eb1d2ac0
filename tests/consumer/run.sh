#!/usr/bin/env bash
# run.sh -- installs a kfuse build into a scratch prefix and builds and runs an
# out-of-tree consumer against it: through find_package(kfuse) (shared and
# static) and through pkg-config. Also checks the installed files, the SONAME
# and that the shared library exports exactly the functions kfuse.h declares.
#
#   run.sh BUILD_DIR C_COMPILER "SANITIZER FLAGS" [CONFIG]
set -euo pipefail

build=$(cd "${1:?build dir}" && pwd)
cc=${2:?C compiler}
san=${3:-}
config=${4:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kfuse-consumer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
passed=0

ok() { passed=$((passed + 1)); echo "ok: $1"; }
die() { echo "FAIL: $1" >&2; echo "$passed passed, 1 failed"; exit 1; }

cmake --install "$build" --prefix "$prefix" ${config:+--config "$config"} >"$tmp/install.log" ||
    { cat "$tmp/install.log"; die "cmake --install"; }
ok "cmake --install --prefix"

pc=$(find "$prefix" -name kfuse.pc -path '*/pkgconfig/*' | head -n 1)
[ -n "$pc" ] || die "no kfuse.pc installed"
libdir=$(dirname "$(dirname "$pc")")
for f in "$prefix/include/kfuse.h" "$prefix/bin/kfuse" "$libdir/libkfuse.a" "$libdir/libkfuse.so" \
    "$libdir/libkfuse.so.0" "$libdir/cmake/kfuse/kfuseConfig.cmake" \
    "$libdir/cmake/kfuse/kfuseConfigVersion.cmake" "$libdir/cmake/kfuse/kfuseTargets.cmake"; do
    [ -e "$f" ] || die "missing after install: ${f#"$prefix"/}"
done
real=$(readlink -f "$libdir/libkfuse.so")
case "$real" in */libkfuse.so.[0-9]*.[0-9]*.[0-9]*) ;; *) die "libkfuse.so points at $real" ;; esac
ok "installed files"

if command -v readelf >/dev/null; then
    soname=$(readelf -d "$real" | sed -n 's/.*SONAME.*\[\(.*\)\].*/\1/p')
    [ "$soname" = "libkfuse.so.0" ] || die "SONAME is '$soname', expected libkfuse.so.0"
    ok "SONAME libkfuse.so.0"
fi

if command -v nm >/dev/null; then
    nm -D --defined-only "$real" | awk '$2 ~ /^[TDRBW]$/ { print $3 }' | grep -v '^_' | sort >"$tmp/exported"
    sed -n 's/^KF_API [^(]*[ *]\(kf_[a-z0-9_]*\)(.*/\1/p' "$prefix/include/kfuse.h" | sort >"$tmp/declared"
    [ -s "$tmp/declared" ] || die "no KF_API functions found in kfuse.h"
    if ! diff "$tmp/declared" "$tmp/exported" >"$tmp/symdiff"; then
        cat "$tmp/symdiff" >&2
        die "the shared library's exports differ from kfuse.h's KF_API functions (< declared, > exported)"
    fi
    ok "libkfuse.so exports exactly the $(wc -l <"$tmp/declared") KF_API functions"
fi

"$prefix/bin/kfuse" --version >/dev/null || die "installed kfuse --version"
ok "installed kfuse CLI runs"

cmake -S "$here" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_C_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="$san" >"$tmp/configure.log" 2>&1 ||
    { cat "$tmp/configure.log"; die "configuring the consumer with find_package(kfuse)"; }
cmake --build "$tmp/build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; die "building the consumer"; }
"$tmp/build/consumer_shared" || die "consumer linked with kfuse::kfuse"
ok "find_package(kfuse): kfuse::kfuse"
"$tmp/build/consumer_static" || die "consumer linked with kfuse::kfuse_static"
ok "find_package(kfuse): kfuse::kfuse_static"

export PKG_CONFIG_PATH="$libdir/pkgconfig"
[ "$(pkg-config --modversion kfuse)" = "$("$prefix/bin/kfuse" --version | cut -d' ' -f2)" ] ||
    die "pkg-config --modversion kfuse"
# shellcheck disable=SC2046,SC2086 # the flags are meant to split
"$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror $san "$here/main.c" -o "$tmp/consumer_pc" \
    $(pkg-config --cflags --libs kfuse) -Wl,-rpath,"$libdir" || die "compiling with pkg-config"
"$tmp/consumer_pc" || die "consumer built with pkg-config"
ok "pkg-config --cflags --libs kfuse"

# Without an RPATH, a program linked against this non-system prefix finds
# libkfuse.so through LD_LIBRARY_PATH, as the README says.
# shellcheck disable=SC2046,SC2086 # the flags are meant to split
"$cc" -std=c11 $san "$here/main.c" -o "$tmp/consumer_pc_norpath" $(pkg-config --cflags --libs kfuse) ||
    die "compiling with pkg-config, no RPATH"
LD_LIBRARY_PATH="$(pkg-config --variable=libdir kfuse)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$tmp/consumer_pc_norpath" || die "consumer without RPATH, with LD_LIBRARY_PATH"
ok "pkg-config link without RPATH runs with LD_LIBRARY_PATH=\$(pkg-config --variable=libdir kfuse)"

# A static link through pkg-config: a libdir that holds only libkfuse.a, so
# -lkfuse must take the archive, and `--static` must name everything it needs
# (LLVM, NVRTC, libdl, libm); the program then needs no libkfuse.so at all.
mkdir -p "$tmp/static-only"
cp "$libdir/libkfuse.a" "$tmp/static-only/"
# shellcheck disable=SC2046,SC2086 # the flags are meant to split
"$cc" -std=c11 -Wall -Wextra -Wpedantic -Werror $san "$here/main.c" -o "$tmp/consumer_pc_static" \
    $(pkg-config --define-variable=libdir="$tmp/static-only" --static --cflags --libs kfuse) ||
    die "linking libkfuse.a with pkg-config --static --libs kfuse"
if command -v readelf >/dev/null && readelf -d "$tmp/consumer_pc_static" | grep -q 'libkfuse\.so'; then
    die "the static pkg-config consumer still needs libkfuse.so"
fi
"$tmp/consumer_pc_static" || die "consumer linked statically with pkg-config"
ok "pkg-config --static --libs kfuse (libkfuse.a)"

echo "$passed passed, 0 failed"
