#!/usr/bin/env bash
# The main job, end to end on a fresh machine: install dependencies, build, LoRA fine-tune the
# embedded GLM-4 (models/glm4-tiny) on the Q/A chat set in data/finetune, then show what
# changed with the adapter a user keeps (best/, the lowest validation loss): held-out exact match
# and answer loss per task before and after, the source-of-passage task by `glm4 classify`, the
# same prompts answered by the base model, the adapter live and fused, and a loss-curve picture.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out/main-job}

scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j2 --target glm4
GLM4=build/glm4
MODEL=models/glm4-tiny
DATA=data/finetune
VALID=$DATA/valid.jsonl
SOURCES="Bible,Jargon File,Devil's Dictionary,Tang poem"  # the labels of the "source" task

rm -rf "$OUT"
mkdir -p "$OUT"
extra=()
if [[ -n "${ITERS:-}" ]]; then extra+=(--iters "$ITERS"); fi
echo "== LoRA fine-tune of $MODEL on $DATA (settings: configs/main_job.json)"
$GLM4 train --config configs/main_job.json --model "$MODEL" --data "$DATA" --out "$OUT/adapter" "${extra[@]}"

# The adapter to keep is best/ (lowest validation loss); the last step's is shown beside it only
# when it is a different adapter.
BEST=$OUT/adapter/best
read -r best_step best_val last_step < <(awk -F'[:,}]' '
  /"val_loss"/ { for (i = 1; i < NF; i++) { if ($i ~ /"step"/) s = $(i + 1); if ($i ~ /"val_loss"/) v = $(i + 1) }
                 if (best == "" || v + 0 < best + 0) { best = v; bs = s }; last = s }
  END { print bs, best, last }' "$OUT/adapter/metrics.jsonl")
runs=(base adapted)
adapters=("" "$BEST")
if ! cmp -s "$BEST/adapter_model.safetensors" "$OUT/adapter/adapter_model.safetensors"; then
  runs+=(last)
  adapters+=("$OUT/adapter")
fi
echo "adapted = $BEST: the adapter of step $best_step (lowest validation loss, $best_val)"
if [[ ${#runs[@]} -eq 3 ]]; then echo "last    = $OUT/adapter: step $last_step, shown beside it"; fi

echo "== fuse best/ into the weights"
$GLM4 fuse --model "$MODEL" --adapter "$BEST" --out "$OUT/fused"

echo "== loss curve"
$GLM4 plot "$OUT/adapter/metrics.jsonl" --out "$OUT/loss.svg"

echo "== held-out evaluation ($VALID: exact match of the greedy answer, and answer loss)"
for i in "${!runs[@]}"; do
  with=()
  if [[ -n "${adapters[$i]}" ]]; then with=(--adapter "${adapters[$i]}"); fi
  $GLM4 evaluate --model "$MODEL" "${with[@]}" --data "$VALID" --label "${runs[$i]}" | tee "$OUT/eval_${runs[$i]}.json"
  $GLM4 classify --model "$MODEL" "${with[@]}" --data "$VALID" --task source --labels "$SOURCES" \
    --predictions "$OUT/classify_${runs[$i]}.jsonl" | tee "$OUT/classify_${runs[$i]}.json"
done

echo "== the same prompts: base, adapted (best/) live, fused (greedy, at most 48 tokens)"
answer() { sed '/./,$!d'; }  # GLM-4 answers start with "\n" after <|assistant|>
while IFS= read -r prompt; do
  echo "-- $prompt"
  printf 'base:    '; $GLM4 generate --model "$MODEL" --chat --prompt "$prompt" --max-tokens 48 2>/dev/null | answer
  printf 'adapted: '; $GLM4 generate --model "$MODEL" --adapter "$BEST" --chat --prompt "$prompt" --max-tokens 48 2>/dev/null | answer
  printf 'fused:   '; $GLM4 generate --model "$OUT/fused" --chat --prompt "$prompt" --max-tokens 48 2>/dev/null | answer
  if [[ ${#runs[@]} -eq 3 ]]; then
    printf 'last:    '; $GLM4 generate --model "$MODEL" --adapter "$OUT/adapter" --chat --prompt "$prompt" --max-tokens 48 2>/dev/null | answer
  fi
done < "$DATA/demo_prompts.txt"

echo
echo "adapter:    $BEST (kept: lowest validation loss; $OUT/adapter holds the last step's)"
echo "fused:      $OUT/fused (Hugging Face model directory, best/ merged in)"
echo "metrics:    $OUT/adapter/metrics.jsonl, loss curve $OUT/loss.svg"

field() { sed -E "s/.*\"$2\":([^,}]*).*/\1/" "$1"; }
# task<TAB>value lines of one {"task": number, ...} object of a JSON line
by_task() { grep -o "\"$2\":{[^}]*}" "$1" | sed -E 's/.*\{//; s/\}//; s/"//g' | tr ',' '\n' | tr ':' '\t'; }
count_tasks() { grep -o '"task": "[^"]*"' "$VALID" | sed -E 's/.*"([^"]*)"$/\1/' | sort | uniq -c | awk '{print $2 "\t" $1}'; }
echo
echo "held-out split ($VALID, $(field "$OUT/eval_base.json" examples) examples); adapted = best/ (step $best_step)"
{
  count_tasks
  for run in "${runs[@]}"; do
    by_task "$OUT/eval_$run.json" exact_match_by_task | sed "s/^/em $run\t/"
    by_task "$OUT/eval_$run.json" answer_loss_by_task | sed "s/^/loss $run\t/"
    printf 'em %s\tall\t%s\nloss %s\tall\t%s\n' "$run" "$(field "$OUT/eval_$run.json" exact_match)" \
      "$run" "$(field "$OUT/eval_$run.json" answer_loss)"
    printf 'em %s\tsource (classify)\t%s\nloss %s\tsource (classify)\t%s\n' \
      "$run" "$(field "$OUT/classify_$run.json" accuracy)" "$run" "$(field "$OUT/classify_$run.json" answer_loss)"
  done
} | awk -F'\t' -v runs="${runs[*]}" '
  NF == 2 { n[$1] = $2; total += $2; order[++tasks] = $1; next }
  { split($1, kv, " "); v[kv[1], kv[2], $2] = $3 }
  END {
    nr = split(runs, r, " ")
    n["all"] = total; order[++tasks] = "all"
    n["source (classify)"] = n["source"]; order[++tasks] = "source (classify)"
    printf "%-20s %4s  %-*s  %s\n", "", "", nr * 9, "exact match", "answer loss (nats/token)"
    printf "%-20s %4s ", "task", "n"; for (i = 1; i <= nr; i++) printf " %8s", r[i]
    printf "  "; for (i = 1; i <= nr; i++) printf " %8s", r[i]; printf "\n"
    for (t = 1; t <= tasks; t++) {
      k = order[t]
      printf "%-20s %4d ", k, n[k]
      for (i = 1; i <= nr; i++) printf " %8.3f", v["em", r[i], k]
      printf "  "; for (i = 1; i <= nr; i++) printf " %8.3f", v["loss", r[i], k]
      printf "\n"
    }
  }'
echo "(source (classify): accuracy of glm4 classify, the label with the highest log-probability among"
echo " $SOURCES; its loss is that of the true label's tokens)"
echo
echo "source of a passage, adapted (best/): answer -> how often each label was predicted"
grep -o '"confusion":{.*}},' "$OUT/classify_adapted.json" | sed -E 's/^"confusion":\{//; s/\}\},$/}/' |
  sed 's/}},*/}\n/g; s/},"/}\n"/g' | sed -E '/^$/d; s/^"([^"]*)":\{/  \1 -> /; s/"//g; s/\}$//; s/,/, /g'
