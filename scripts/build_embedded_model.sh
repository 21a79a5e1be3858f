#!/usr/bin/env bash
# Rebuilds the embedded model in models/glm4-tiny from scratch with the project's own tools:
# a sentencepiece tokenizer trained on data/corpus/tokenizer_train.txt, a random GLM-4 from
# configs/embedded.json, pretrained fully (`glm4 train --full`) on data/corpus/pretrain.jsonl,
# stored as bf16, then trained on in a second phase on tools/corpus/copy_documents.py's corpus
# (repeated word sequences beside corpus documents), which teaches it to copy from its context,
# stored as bf16, then a third phase on the corpus of `tools/corpus/copy_documents.py --phase 3`
# (copies that start a line from the middle of one, some reversed), stored as bf16, then a fourth
# phase on `tools/corpus/copy_documents.py --phase 4` (mostly reversed copies, and sums of numbers
# below 100 written out, none of the held-out add questions), stored as bf16, then a fifth phase on
# `tools/corpus/fact_documents.py` (the corpus's quiz facts in several wordings, beside fourth-phase
# documents), stored as bf16 again. About 40 + 85 + 20 + 35 + 22 minutes on 2 cores. Not
# bit-for-bit across machines (thread scheduling and -march=native change float rounding), but
# the same recipe.
# Usage: scripts/build_embedded_model.sh [OUT_DIR]   (default models/glm4-tiny)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-models/glm4-tiny}
WORK=${WORK:-out/embedded-build}
ITERS=${ITERS:-2400}
COPY_ITERS=${COPY_ITERS:-5000}
LINECOPY_ITERS=${LINECOPY_ITERS:-1000}
REVERSE_ITERS=${REVERSE_ITERS:-2000}
FACT_ITERS=${FACT_ITERS:-1500}

scripts/install_deps.sh
scripts/install_corpus_packages.sh   # the quiz tables tools/corpus/fact_documents.py reads
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j2 --target glm4
GLM4=build/glm4

# Continues training the bf16 model in $WORK/$2 on the documents $3 for $4 steps of 8 x 512 packed
# tokens into $WORK/$1; the other arguments set the learning rate. The command is kept beside it
# for the model directory.
continue_training() {
  local name=$1 from=$2 documents=$3 iters=$4
  shift 4
  local command=(train --full --pack --model "$WORK/$from" --data "$documents" --out "$WORK/$name"
    --iters "$iters" --batch-size 8 --max-seq-length 512 "$@" --warmup 30 --weight-decay 0.01
    --steps-per-report 20 --save-every 250 --seed 0)
  $GLM4 "${command[@]}"
  echo "build/glm4 ${command[*]}" > "$WORK/$name.command.txt"
}

rm -rf "$WORK"
mkdir -p "$WORK"
echo "== tokenizer: sentencepiece BPE, 4000 pieces, GLM special tokens"
$GLM4 tokenizer train --input data/corpus/tokenizer_train.txt --vocab-size 4000 --out "$WORK/tokenizer"

echo "== random GLM-4 from configs/embedded.json"
$GLM4 init --config configs/embedded.json --out "$WORK/init" --seed 0
cp "$WORK"/tokenizer/* "$WORK/init/"

echo "== pretraining ($ITERS steps of 8 x 512 packed tokens)"
pretrain=(train --full --pack --model "$WORK/init" --data data/corpus/pretrain.jsonl --out "$WORK/pretrained"
  --iters "$ITERS" --batch-size 8 --max-seq-length 512 --learning-rate 3e-3 --lr-schedule cosine
  --warmup 50 --min-lr 3e-4 --weight-decay 0.01 --steps-per-report 10 --save-every 200 --seed 0)
$GLM4 "${pretrain[@]}"
echo "build/glm4 ${pretrain[*]}" > "$WORK/pretrained.command.txt"

echo "== phase 1 stored as bf16"
$GLM4 fuse --model "$WORK/pretrained" --out "$WORK/phase1" --dtype bf16

echo "== phase 2: copying ($COPY_ITERS steps, 70% repeated word sequences)"
/usr/bin/python3 tools/corpus/copy_documents.py "$WORK/copy_documents.jsonl"
continue_training copying phase1 "$WORK/copy_documents.jsonl" "$COPY_ITERS" \
  --learning-rate 2e-3 --lr-schedule constant

echo "== phase 2 stored as bf16"
$GLM4 fuse --model "$WORK/copying" --out "$WORK/phase2" --dtype bf16

echo "== phase 3: copies across a line start ($LINECOPY_ITERS steps)"
/usr/bin/python3 tools/corpus/copy_documents.py --phase 3 "$WORK/linecopy_documents.jsonl"
continue_training linecopy phase2 "$WORK/linecopy_documents.jsonl" "$LINECOPY_ITERS" \
  --learning-rate 1e-3 --lr-schedule constant

echo "== phase 3 stored as bf16"
$GLM4 fuse --model "$WORK/linecopy" --out "$WORK/phase3" --dtype bf16

echo "== phase 4: reversed copies and sums ($REVERSE_ITERS steps)"
/usr/bin/python3 tools/corpus/copy_documents.py --phase 4 "$WORK/reverse_documents.jsonl"
continue_training reverse phase3 "$WORK/reverse_documents.jsonl" "$REVERSE_ITERS" \
  --learning-rate 1e-3 --lr-schedule constant

echo "== phase 4 stored as bf16"
$GLM4 fuse --model "$WORK/reverse" --out "$WORK/phase4" --dtype bf16

echo "== phase 5: quiz facts in several wordings ($FACT_ITERS steps)"
/usr/bin/python3 tools/corpus/fact_documents.py "$WORK/fact_documents.jsonl"
continue_training facts phase4 "$WORK/fact_documents.jsonl" "$FACT_ITERS" \
  --learning-rate 1e-3 --lr-schedule cosine --min-lr 1e-4

echo "== store as bf16 in $OUT"
rm -rf "$OUT.tmp"
$GLM4 fuse --model "$WORK/facts" --out "$OUT.tmp" --dtype bf16
for phase in pretrain:pretrained copy:copying linecopy:linecopy reverse:reverse facts:facts; do
  cp "$WORK/${phase#*:}/metrics.jsonl" "$OUT.tmp/${phase%:*}_metrics.jsonl"
  cp "$WORK/${phase#*:}.command.txt" "$OUT.tmp/${phase%:*}_command.txt"
  $GLM4 plot "$OUT.tmp/${phase%:*}_metrics.jsonl" --out "$OUT.tmp/${phase%:*}_loss.svg"
done
# The model card is written by hand, not by this script: it moves to the new directory.
if [[ -f "$OUT/README.md" ]]; then cp "$OUT/README.md" "$OUT.tmp/README.md"; fi
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
echo "== sample"
$GLM4 generate --model "$OUT" --prompt "And God said" --max-tokens 40 --seed 0
echo "wrote $OUT"
