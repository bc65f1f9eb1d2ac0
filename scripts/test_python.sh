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
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q './python[test,torch]' transformers
# From the checkout's root, so `import kfuse` is the installed package, not python/kfuse.
"$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests
