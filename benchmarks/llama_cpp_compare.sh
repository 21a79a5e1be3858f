#!/usr/bin/env bash
# Generation on the mid config shape, glm4 and llama.cpp back to back: bench_generate's random
# model as bf16, mlx 4-bit and 8-bit (g64, bf16 scales, --compute auto), then a random bf16 model
# from `glm4 init` exported by `glm4 export gguf` as q4_0 and q8_0 for llama-bench (prompt 512 /
# 128 generated tokens, the issues' pp512 / tg128). llama.cpp is built outside the
# project (see docs/gguf.md); pass its bin directory.
# Usage: benchmarks/llama_cpp_compare.sh LLAMA_BIN_DIR [BUILD_DIR] [THREADS]   (about 5 minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
llama=${1:?usage: benchmarks/llama_cpp_compare.sh LLAMA_BIN_DIR [BUILD_DIR] [THREADS]}
build=${2:-build}
threads=${3:-2}
[[ -x "$llama/llama-bench" ]] || { echo "llama_cpp_compare.sh: no llama-bench in $llama" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$build/glm4" init --config configs/mid.json --dtype bf16 --out "$work/mid" --seed 1 > /dev/null
for type in q4_0 q8_0; do
  "$build/glm4" export gguf --model "$work/mid" --out "$work/mid-$type.gguf" --type "$type" 2> /dev/null
done

echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; $(uptime | sed 's/.*load/load/')"
echo "## glm4 (bench_generate: prefill 512, decode 128, floor from the bandwidth probe of the run)"
"$build/benchmarks/bench_generate" --dtypes bf16,q4,q8 --prompt 512 --tokens 128 --reps 2 \
  --threads "$threads"
echo "## llama.cpp (llama-bench pp512 / tg128)"
"$llama/llama-bench" -m "$work/mid-q4_0.gguf" -m "$work/mid-q8_0.gguf" -p 512 -n 128 -t "$threads" -r 2
