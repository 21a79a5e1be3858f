#!/usr/bin/env bash
# The whole test suite on a fresh machine: install dependencies, configure, build, run ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2
ctest --test-dir build -LE slow --output-on-failure -j2
