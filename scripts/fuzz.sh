#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) into build-fuzz with clang and ASan + UBSan, seeds each
# corpus, and runs the targets one after another (never in parallel: the machine is shared).
# Usage: scripts/fuzz.sh [--seconds N] [TARGET...]    (default 120 s each, every target)
# Per target it prints the executions and the findings (crash-*, leak-*, timeout-*, oom-* files
# left in build-fuzz/findings/TARGET); it exits 1 when any target found something.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=120
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    -h|--help) sed -n 2,6p "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=(fuzz_safetensors fuzz_safetensors_index fuzz_config fuzz_tokenizer_json fuzz_tiktoken
     fuzz_sentencepiece fuzz_chat_template fuzz_jsonl fuzz_adapter_peft fuzz_adapter_mlx
     fuzz_training_state fuzz_gguf fuzz_openai_request)
((${#targets[@]})) || targets=("${all[@]}")

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ missing (scripts/install_deps.sh --fuzz)" >&2; exit 1; }
if [[ ! -f build-fuzz/build.ninja ]]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DGLM4_FUZZ=ON -DGLM4_MPI=OFF
fi
nice -n 5 cmake --build build-fuzz -j2 --target fuzz_make_seeds "${targets[@]}"

# Seeds: binary files from glm4's writers, text seeds in fuzz/seeds, and test data.
corpus=build-fuzz/corpus
build-fuzz/fuzz/fuzz_make_seeds build-fuzz/seeds
seed() {  # seed TARGET FILE...
  local dir="$corpus/$1"; shift
  mkdir -p "$dir"
  for f in "$@"; do [[ -f "$f" ]] && cp "$f" "$dir/seed_$(basename "$(dirname "$f")")_$(basename "$f")"; done
  return 0
}
for t in "${all[@]}"; do
  seed "$t" build-fuzz/seeds/"$t"/* fuzz/seeds/"$t"/*
done
seed fuzz_safetensors tests/data/tiny_glm4/generation_config.json  # not safetensors: a rejection to start from
seed fuzz_config tests/data/hf_configs/*.json tests/data/tiny_glm4/config.json \
  tests/data/tiny_glm4_q/config.json tests/data/tiny_chatglm/config.json tests/data/tiny_glm/config.json
seed fuzz_jsonl tests/data/tokenizers/*/expected.jsonl tests/data/tokenizer/pretokenize_cases.jsonl
seed fuzz_chat_template
seed fuzz_openai_request

status=0
printf '\n%-26s %8s %12s %9s\n' target seconds executions findings
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/findings/$t" "build-fuzz/logs"
  log="build-fuzz/logs/$t.log"
  start=$(date +%s)
  # -fork=0: one process. Findings stop the run; their inputs land in findings/TARGET.
  nice -n 5 "build-fuzz/fuzz/$t" "$corpus/$t" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/findings/$t/" >"$log" 2>&1 || true
  took=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  found=$(find "build-fuzz/findings/$t" -type f | wc -l)
  printf '%-26s %8s %12s %9s\n' "$t" "$took" "${execs:-?}" "$found"
  ((found == 0)) || { status=1; grep -m3 -E 'ERROR|runtime error|terminate|deadly' "$log" | sed 's/^/    /' || true; }
done
exit $status
