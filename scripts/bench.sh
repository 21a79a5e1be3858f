#!/usr/bin/env bash
# The benchmark command: installs the dependencies (with PyTorch, for the peer scripts), builds
# every benchmarks/bench_*.cpp and runs them all, then the PyTorch peers. Run it on a quiet
# machine: each benchmark uses both cores. Tables go to stdout and to build/bench/NAME.txt.
# Usage: scripts/bench.sh [--quick] [--big] [--no-torch] [--no-deps]
#   --quick     small GEMM shapes, 1 timed step/run: a smoke run of a few minutes
#   --big       adds the 512x4096.4096x27392 GEMM (GLM-4-9B's gate_up_proj, about 1.4 GB)
#   --no-torch  skips torch_lora_step.py and torch_generate.py
#   --no-deps   skips scripts/install_deps.sh --dev
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0 big=0 torch=1 deps=1
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --big) big=1 ;;
    --no-torch) torch=0 ;;
    --no-deps) deps=0 ;;
    *) echo "bench.sh: unknown flag $arg (see the header of scripts/bench.sh)" >&2; exit 2 ;;
  esac
done

if ((deps)); then scripts/install_deps.sh --dev; fi
[[ -f build/build.ninja ]] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
targets=()
for src in benchmarks/bench_*.cpp; do targets+=("$(basename "$src" .cpp)"); done
ninja -C build -j2 "${targets[@]}"

gemm_flags=() step_flags=() gen_flags=()
if ((quick)); then
  gemm_flags+=(--shapes small --reps 1 --min-time 0)
  step_flags+=(--steps 1)
  gen_flags+=(--reps 1)
fi
if ((big)); then gemm_flags+=(--big); fi

out=build/bench
mkdir -p "$out"
run() {  # run NAME COMMAND...: prints the table and keeps a copy in build/bench/NAME.txt
  local name=$1
  shift
  echo "== $name"
  "$@" | tee "$out/$name.txt"
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"
run bench_gemm build/benchmarks/bench_gemm "${gemm_flags[@]}"
run bench_lora_step build/benchmarks/bench_lora_step "${step_flags[@]}"
run bench_generate build/benchmarks/bench_generate "${gen_flags[@]}"
for t in "${targets[@]}"; do  # any other benchmark, with its defaults
  case "$t" in bench_gemm | bench_lora_step | bench_generate) ;; *) run "$t" "build/benchmarks/$t" ;; esac
done

if ((torch)); then
  if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    run torch_lora_step /usr/bin/python3 benchmarks/torch_lora_step.py "${step_flags[@]}"
    run torch_generate /usr/bin/python3 benchmarks/torch_generate.py "${gen_flags[@]}"
  else
    echo "bench.sh: PyTorch missing (scripts/install_deps.sh --dev installs it); skipped the torch peers" >&2
  fi
fi
