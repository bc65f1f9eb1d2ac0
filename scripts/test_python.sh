#!/usr/bin/env bash
# test_python.sh -- installs the Python package (pip install ./python, which
# builds libkfuse with CMake through scikit-build-core) into a virtual
# environment in build-python/venv and runs its tests (python/tests, pytest) on
# the CPU target, with torch and transformers (PyPI; about 4 GiB, 3 minutes) for
# the torch.compile backend's tests. scripts/test.sh runs it after ctest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

python=${PYTHON:-python3}
venv=build-python/venv
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
# A failed download fails the whole CI run (pip then says "network
# connectivity"; the one time it happened here the disk was full): pip retries
# its connections and resumes a cut download where it supports that, and the
# install is tried three times, the later tries without pip's cache, so a try
# does not depend on what an earlier one left there.
"$venv/bin/python" -m pip install -q --retries 10 --upgrade pip
resume=()
if "$venv/bin/python" -m pip install --help 2>/dev/null | grep -q -- --resume-retries; then
    resume=(--resume-retries 20)
fi
for attempt in 1 2 3; do
    cache=()
    [ "$attempt" = 1 ] || cache=(--no-cache-dir)
    if "$venv/bin/python" -m pip install -q --retries 10 "${resume[@]}" "${cache[@]}" \
        './python[test,torch]' transformers; then
        break
    fi
    if [ "$attempt" = 3 ]; then
        echo "test_python.sh: pip install failed 3 times" >&2
        exit 1
    fi
    echo "test_python.sh: pip install failed (attempt $attempt of 3); trying again" >&2
    sleep 15
done
# From the checkout's root, so `import kfuse` is the installed package, not python/kfuse.
"$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests
