#!/usr/bin/env bash
# test.sh -- installs what kfuse needs, builds everything with ASan + UBSan and
# warnings as errors (in build-test/), and runs every test with ctest. Exits
# non-zero on any failure. Then the Python package's tests (scripts/test_python.sh).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=$(nproc 2>/dev/null || echo 2)
bash scripts/install-deps.sh
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Debug -DKF_SANITIZE=ON -DKF_WERROR=ON -DKF_BUILD_TESTS=ON
cmake --build build-test --parallel "$jobs"
ctest --test-dir build-test --output-on-failure --parallel "$jobs"
bash scripts/test_python.sh
