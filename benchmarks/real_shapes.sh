#!/usr/bin/env bash
# Speed at the sizes users run, one command: GLM-4-9B-0414 (and GLM-4-32B-0414 where memory
# allows) from `glm4 init` in bf16, 8-bit and 4-bit. For each model: glm4's load time, first and
# warm prefill of 512 tokens and decode, with the weights read into 2 MB pages and with mmap
# (bench_generate --model --memory), beside llama-bench on the same weights (`glm4 export gguf`:
# q4_0, q8_0, bf16) with and without mmap, and the memory floor from the bandwidth probe of the
# same run. Then a QLoRA step (4-bit base) and a LoRA step (bf16 base) at 1 x 512 with gradient
# checkpointing (bench_lora_step --model). Each model and its GGUF are deleted after use, so the
# disk holds one at a time (the 9B in bf16 is 19 GB, its GGUF as much again).
# llama.cpp is built outside the project (docs/gguf.md); pass its bin directory.
# Usage: benchmarks/real_shapes.sh LLAMA_BIN_DIR [--shapes 9b,32b] [--forms q4,q8,bf16]
#                                   [--work DIR] [--build build] [--threads 2] [--no-train]
set -euo pipefail
cd "$(dirname "$0")/.."
llama=${1:?usage: benchmarks/real_shapes.sh LLAMA_BIN_DIR [--shapes 9b,32b] [--forms q4,q8,bf16] ...}
shift
shapes=9b forms=q4,q8,bf16 work=$(mktemp -d) build=build threads=2 train=1
while (($#)); do
  case "$1" in
    --shapes) shapes=$2; shift 2 ;;
    --forms) forms=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --no-train) train=0; shift ;;
    *) echo "real_shapes.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x "$llama/llama-bench" ]] || { echo "real_shapes.sh: no llama-bench in $llama" >&2; exit 1; }
mkdir -p "$work"
glm4="$build/glm4"

config_of() { case "$1" in 9b) echo configs/glm-4-9b-0414.json ;; 32b) echo configs/glm-4-32b-0414.json ;; esac; }
gguf_type_of() { case "$1" in q4) echo q4_0 ;; q8) echo q8_0 ;; bf16) echo bf16 ;; esac; }
bits_of() { case "$1" in q4) echo "--bits 4" ;; q8) echo "--bits 8" ;; bf16) echo "" ;; esac; }
# Parameters of a config (embeddings, layers, lm_head), for the memory check.
params_of() {
  /usr/bin/python3 - "$1" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
h, i, L, v = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
hd, nh, kv = c.get("head_dim", 128), c["num_attention_heads"], c["num_key_value_heads"]
attn = h * nh * hd * 2 + h * kv * hd * 2
print(2 * v * h + L * (attn + 3 * h * i))
EOF
}
bytes_per_param() { case "$1" in q4) echo 0.5625 ;; q8) echo 1.0625 ;; bf16) echo 2 ;; esac; }
available_gb() { awk '/MemAvailable/ {printf "%.1f", $2 / 1048576}' /proc/meminfo; }

echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, $(grep -o -w -E 'amx_tile|avx512_bf16|avx512_vnni|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "# THP $(cat /sys/kernel/mm/transparent_hugepage/enabled); $(date -u '+%F %H:%M UTC'); $(uptime | sed 's/.*load/load/')"
for shape in ${shapes//,/ }; do
  config=$(config_of "$shape")
  [[ -n "$config" ]] || { echo "real_shapes.sh: unknown shape $shape (9b, 32b)" >&2; exit 2; }
  for form in ${forms//,/ }; do
    need=$(/usr/bin/python3 -c "print(round($(params_of "$config") * $(bytes_per_param "$form") / 2**30 + 2, 1))")
    if /usr/bin/python3 -c "import sys; sys.exit(0 if $need < $(available_gb) else 1)"; then :; else
      echo "## $shape $form: skipped, needs about $need GiB, $(available_gb) GiB available"
      continue
    fi
    model="$work/$shape-$form" gguf="$work/$shape-$form.gguf"
    echo "## $shape $form ($config)"
    # shellcheck disable=SC2046
    /usr/bin/time -f "init: %e s, peak RSS %M KB" "$glm4" init --config "$config" --dtype bf16 \
      $(bits_of "$form") --out "$model" --seed 1 > /dev/null
    du -sh "$model" | sed 's/^/# on disk: /'
    for memory in huge_pages mmap; do
      "$build/benchmarks/bench_generate" --model "$model" --memory "$memory" --prompt 512 \
        --tokens 32 --reps 2 --threads "$threads"
    done
    /usr/bin/time -f "export gguf: %e s" "$glm4" export gguf --model "$model" --out "$gguf" \
      --type "$(gguf_type_of "$form")" 2> >(grep -v '^\[' >&2) > /dev/null
    "$llama/llama-bench" -m "$gguf" -p 512 -n 32 -t "$threads" -r 2 -mmp 1,0
    rm -f "$gguf"
    if ((train)) && [[ "$form" == q4 || "$form" == bf16 ]]; then
      echo "### $([[ $form == q4 ]] && echo QLoRA || echo LoRA) step, 1 x 512, gradient checkpointing"
      "$build/benchmarks/bench_lora_step" --model "$model" --shapes 1x512 --checkpoint 1 \
        --steps 2 --threads "$threads"
    fi
    rm -rf "$model"
  done
done
