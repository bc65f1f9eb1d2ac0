#!/usr/bin/env bash
# install-deps.sh -- installs what building and testing kfuse needs on a Debian
# machine, with apt-get, and nothing when it is all there (it then takes well
# under a second). Safe to run again and again; CI runs it as root.
#
#   cmake, build-essential, pkg-config   the build, and the installed-package test
#   libcmocka-dev                        the unit-test framework
#   llvm-19-dev                          LLVM-C, for the CPU backend (later issues)
#   clang, libclang-rt-dev               libFuzzer and its sanitizer runtimes (tests/fuzz)
#   cuobjdump, nvdisasm (pip, when missing)  the SASS checks of the generated kernels (test_gemmgen)
#   python3-venv, python3-pip (when python3 lacks venv)  scripts/test_python.sh
#
# The CUDA toolkit is not installed here: the machines come with it in
# /usr/local/cuda, where CMake finds NVRTC (cmake/kf_cuda.cmake). The driver
# (libcuda) is never needed to build or to run the CPU-only tests.
set -euo pipefail

# cuobjdump: test_gemmgen reads the SASS of the generated GEMM kernels with
# it. The toolkit's when it ships one, else NVIDIA's PyPI wheels
# (nvidia-cuda-cuobjdump, through pip; CMake finds it in the package). Since
# CUDA 13, `cuobjdump -sass` runs nvdisasm, which it looks for beside itself
# (or on PATH): the pip cuobjdump needs nvidia-cuda-nvdisasm's next to it
# (the wheels share nvidia/cu13/bin), or every SASS check fails with "Could
# not find executable file 'nvdisasm'".
have_cuobjdump() {
    command -v cuobjdump >/dev/null 2>&1 && command -v nvdisasm >/dev/null 2>&1 && return 0
    [ -x /usr/local/cuda/bin/cuobjdump ] && [ -x /usr/local/cuda/bin/nvdisasm ] && return 0
    python3 -c "import glob, os, sys, nvidia; sys.exit(0 if any(os.access(os.path.join(os.path.dirname(c), 'nvdisasm'), os.X_OK) for c in glob.glob(os.path.join(list(nvidia.__path__)[0], '*', 'bin', 'cuobjdump'))) else 1)" 2>/dev/null
}
if ! have_cuobjdump; then
    echo "install-deps.sh: installing cuobjdump and nvdisasm (pip: nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm)"
    python3 -m pip install -q --retries 10 nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm || {
        echo "install-deps.sh: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm failed; test_gemmgen needs them" >&2
        exit 1
    }
fi

packages=(cmake build-essential pkg-config libcmocka-dev llvm-19-dev clang libclang-rt-dev)
# The Python package's tests run in a venv; Debian's python3 needs python3-venv for it.
if ! python3 -c "import venv, ensurepip" >/dev/null 2>&1; then
    packages+=(python3-venv python3-pip)
fi

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps.sh: not a Debian-like system; install by hand: ${packages[*]}" >&2
    exit 0
fi

missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
    [ "${status:0:2}" = "ii" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps.sh: installing ${missing[*]}"
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || {
        echo "install-deps.sh: need root (or sudo) to install ${missing[*]}" >&2
        exit 1
    }
    sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get -o Acquire::Retries=5 update -q
"${sudo[@]}" apt-get -o Acquire::Retries=5 install -y -q --no-install-recommends "${missing[@]}"
