#!/usr/bin/env bash
# The whole test suite on a fresh machine: install dependencies, configure, build, run ctest.
# Usage: scripts/test.sh              Release build in build/, then ctest (CI runs exactly this)
#        scripts/test.sh --sanitize   GCC with AddressSanitizer + UndefinedBehaviorSanitizer in
#                                     build-asan/ (-O1, any UB report fatal), then the same ctest.
#                                     Not in CI: see README.
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize=0
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    *) echo "test.sh: unknown option $arg (expected --sanitize)" >&2; exit 2 ;;
  esac
done
scripts/install_deps.sh
if ((sanitize)); then
  build=build-asan
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGLM4_SANITIZE=ON
  # Leak checks stay on; the suppressions are third-party leaks only, each with its reason.
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
  export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizer/lsan_suppressions.txt:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
else
  build=build
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
cmake --build "$build" -j2
ctest --test-dir "$build" --output-on-failure -j2
