#!/usr/bin/env bash
# Installs the Debian packages glm4 builds and tests with. Idempotent: packages already
# present are skipped, so a second run costs one dpkg query.
# Usage: scripts/install_deps.sh [--dev] [--fuzz]
#   --dev   adds PyTorch and oneDNN for the reference script and benchmarks
#   --fuzz  adds clang and libFuzzer for scripts/fuzz.sh (Debian 12: libclang_rt.fuzzer-x86_64.a
#           is in libclang-rt-14-dev, which Debian's clang already pulls in; named here anyway)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libeigen3-dev nlohmann-json3-dev libsentencepiece-dev libhdf5-dev libtbb-dev
  libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev
  libcpp-httplib-dev
  clang-format  # scripts/check_format.sh, which CI runs after the tests
  libopenmpi-dev openmpi-bin  # mpirun -np N glm4 train (data-parallel); optional at build time
)
dev=0 fuzz=0
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1 ;;
    --fuzz) fuzz=1 ;;
    *) echo "install_deps: unknown option $arg (expected --dev or --fuzz)" >&2; exit 2 ;;
  esac
done
if ((fuzz)); then
  packages+=(clang libclang-rt-14-dev)
fi
if ((dev)); then
  # libopenblas0-pthread matters: without it Debian's torch runs the reference BLAS.
  # libdnnl-dev: oneDNN, the bf16 matmul bench_bf16_gemm compares against (nothing else links it).
  # ocl-icd-opencl-dev: Debian's dnnl-config.cmake finds OpenCL as required; without it configure fails.
  packages+=(python3-torch python3-numpy libopenblas0-pthread python3-sentencepiece python3-jinja2 libdnnl-dev ocl-icd-opencl-dev)
fi

source "$(dirname "$0")/lib/apt_install.sh"
apt_install_missing install_deps "${packages[@]}"

# The official OpenAI client that drives `glm4 serve` in the tests: pinned by tests/package.json
# and package-lock.json, installed with npm ci into tests/node_modules (nothing global). Node.js
# and npm come from Debian when the machine has none. Skipped when the lock file is unchanged.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  apt_install_missing install_deps nodejs npm
fi
tests_dir="$(cd "$(dirname "$0")/../tests" && pwd)"
lock_sum=$(sha256sum "$tests_dir/package-lock.json" | cut -d' ' -f1)
if [[ "$(cat "$tests_dir/node_modules/.glm4-lock-sha256" 2>/dev/null)" != "$lock_sum" ]]; then
  echo "install_deps: npm ci in tests/ (the pinned openai client)"
  (cd "$tests_dir" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock_sum" > "$tests_dir/node_modules/.glm4-lock-sha256"
else
  echo "install_deps: tests/node_modules matches package-lock.json"
fi
