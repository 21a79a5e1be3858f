#!/usr/bin/env bash
# Installs the Debian packages glm4 builds and tests with. Idempotent: packages already
# present are skipped, so a second run costs one dpkg query.
# Usage: scripts/install_deps.sh [--dev]   (--dev adds PyTorch and oneDNN for the reference script and benchmarks)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libeigen3-dev nlohmann-json3-dev libsentencepiece-dev libhdf5-dev libtbb-dev
  libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev
  libopenmpi-dev openmpi-bin  # mpirun -np N glm4 train (data-parallel); optional at build time
)
if [[ "${1:-}" == "--dev" ]]; then
  # libopenblas0-pthread matters: without it Debian's torch runs the reference BLAS.
  # libdnnl-dev: oneDNN, the bf16 matmul bench_bf16_gemm compares against (nothing else links it).
  packages+=(python3-torch python3-numpy libopenblas0-pthread python3-sentencepiece libdnnl-dev)
fi

source "$(dirname "$0")/lib/apt_install.sh"
apt_install_missing install_deps "${packages[@]}"
