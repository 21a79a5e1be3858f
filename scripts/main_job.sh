#!/usr/bin/env bash
# The main job, end to end on a fresh machine: install dependencies, build, LoRA fine-tune the
# embedded GLM-4 (models/glm4-tiny) on the Q/A chat set in data/finetune, then show what
# changed: held-out loss and exact-match before and after, the same prompts answered by the
# base model, with the adapter live and fused, and a loss-curve picture.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/main-job}

scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j2 --target glm4
GLM4=build/glm4
MODEL=models/glm4-tiny
DATA=data/finetune

rm -rf "$OUT"
mkdir -p "$OUT"
extra=()
if [[ -n "${ITERS:-}" ]]; then extra+=(--iters "$ITERS"); fi
echo "== LoRA fine-tune of $MODEL on $DATA (settings: configs/main_job.json)"
$GLM4 train --config configs/main_job.json --model "$MODEL" --data "$DATA" --out "$OUT/adapter" "${extra[@]}"

echo "== fuse the adapter into the weights"
$GLM4 fuse --model "$MODEL" --adapter "$OUT/adapter" --out "$OUT/fused"

echo "== loss curve"
$GLM4 plot "$OUT/adapter/metrics.jsonl" --out "$OUT/loss.svg"

echo "== held-out evaluation (valid split: exact match of the greedy answer, and answer loss)"
$GLM4 evaluate --model "$MODEL" --data "$DATA/valid.jsonl" --label base | tee "$OUT/eval_base.json"
$GLM4 evaluate --model "$MODEL" --adapter "$OUT/adapter" --data "$DATA/valid.jsonl" --label adapted | tee "$OUT/eval_adapted.json"
$GLM4 evaluate --model "$OUT/fused" --data "$DATA/valid.jsonl" --label fused | tee "$OUT/eval_fused.json"

echo "== the same prompts: base, adapter live, fused (greedy, at most 48 tokens)"
answer() { sed '/./,$!d'; }  # GLM-4 answers start with "\n" after <|assistant|>
while IFS= read -r prompt; do
  echo "-- $prompt"
  printf 'base:    '; $GLM4 generate --model "$MODEL" --chat --prompt "$prompt" --max-tokens 48 2>/dev/null | answer
  printf 'adapter: '; $GLM4 generate --model "$MODEL" --adapter "$OUT/adapter" --chat --prompt "$prompt" --max-tokens 48 2>/dev/null | answer
  printf 'fused:   '; $GLM4 generate --model "$OUT/fused" --chat --prompt "$prompt" --max-tokens 48 2>/dev/null | answer
done < "$DATA/demo_prompts.txt"

echo
echo "adapter:    $OUT/adapter (PEFT: adapter_model.safetensors + adapter_config.json; best/ = lowest val loss)"
echo "fused:      $OUT/fused (Hugging Face model directory)"
echo "metrics:    $OUT/adapter/metrics.jsonl, loss curve $OUT/loss.svg"

field() { sed -E "s/.*\"$2\":([^,}]*).*/\1/" "$1"; }
by_task() { grep -o '"exact_match_by_task":{[^}]*}' "$1" | sed -E 's/.*\{//; s/\}//' | tr ',' '\n'; }
echo
echo "held-out split (data/finetune/valid.jsonl, $(field "$OUT/eval_base.json" examples) examples)"
echo "                 answer loss   perplexity   exact match"
for run in base adapted fused; do
  loss=$(field "$OUT/eval_$run.json" answer_loss)
  printf '  %-14s %11.3f %12.1f %13.3f\n' "$run" "$loss" "$(awk "BEGIN{print exp($loss)}")" \
    "$(field "$OUT/eval_$run.json" exact_match)"
done
echo
echo "exact match by task      base   adapted"
paste -d: <(by_task "$OUT/eval_base.json") <(by_task "$OUT/eval_adapted.json") |
  awk -F: '{gsub(/"/, "", $1); printf "  %-20s %7.3f %9.3f\n", $1, $2, $4}'
