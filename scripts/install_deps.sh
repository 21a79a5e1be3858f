#!/usr/bin/env bash
# Installs the Debian packages glm4 builds and tests with. Idempotent: packages already
# present are skipped, so a second run costs one dpkg query.
# Usage: scripts/install_deps.sh [--dev]   (--dev adds PyTorch for the reference script and benchmarks)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libeigen3-dev nlohmann-json3-dev libsentencepiece-dev libhdf5-dev libtbb-dev
  libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev libopenblas-dev
)
if [[ "${1:-}" == "--dev" ]]; then
  # libopenblas0-pthread matters: without it Debian's torch runs the reference BLAS.
  packages+=(python3-torch python3-numpy libopenblas0-pthread python3-sentencepiece)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
