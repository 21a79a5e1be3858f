#!/usr/bin/env bash
# Data-parallel training on this machine: one process with 2 threads against `mpirun -np 2` with
# 1 thread a rank, on a random configs/mid.json model (glm4 init) with 4 x 256-token global
# batches, LoRA (r 16 on every linear layer) and --full. Prints tokens/s (median over the steps
# after the first), peak RSS of each rank, bytes each rank sends a step and time spent waiting in
# the reduction, the clip and the parameter allgather.
# Usage: benchmarks/mpi_train.sh [BUILD_DIR] [STEPS]     (about 10 minutes with the defaults)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-6}
glm4=$build/glm4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$glm4" init --config configs/mid.json --out "$work/mid" --seed 1 > /dev/null
python3 - "$work/train.jsonl" <<'EOF'
import json, random, sys
random.seed(0)
with open(sys.argv[1], "w") as f:
    for _ in range(64):
        f.write(json.dumps({"input_ids": [random.randrange(2, 32000) for _ in range(256)]}) + "\n")
EOF

common=(--model "$work/mid" --data "$work/train.jsonl" --iters "$steps" --batch-size 4 --max-seq-length 256
        --learning-rate 1e-4 --lora-rank 16 --lora-alpha 32 --lora-targets all-linear --save-every 100000
        --steps-per-report 1 --sync-check-every 0)

# run NAME RANKS THREADS [FLAGS...]: one training run, its metrics kept as $work/NAME.jsonl
run() {
  local name=$1 ranks=$2 threads=$3
  shift 3
  local cmd=("$glm4" train "${common[@]}" --out "$work/$name" --threads "$threads" "$@")
  if [[ $ranks -gt 1 ]]; then
    env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      mpirun -np "$ranks" --bind-to core "${cmd[@]}" > "$work/$name.log" 2>&1
  else
    "${cmd[@]}" > "$work/$name.log" 2>&1
  fi
  cp "$work/$name/metrics.jsonl" "$work/$name.jsonl"
  rm -rf "${work:?}/$name"
}

run lora_1x2 1 2
run lora_2x1 2 1
run full_1x2 1 2 --full
run full_2x1 2 1 --full
run full_2x1_one_bucket 2 1 --full --bucket-mb 100000

lscpu | grep -m1 "Model name" | sed 's/^ */# /'
echo "# $(nproc) cores; mid config (glm4 init), 4 x 256 tokens a step, $steps steps, fp32"
python3 - "$work" <<'EOF'
import json, statistics, sys
print("| run | tokens/s | peak RSS per rank (MB) | bytes sent per rank a step | waiting a step, least / most waiting rank (s) |")
print("| --- | --- | --- | --- | --- |")
for name in ["lora_1x2", "lora_2x1", "full_1x2", "full_2x1", "full_2x1_one_bucket"]:
    lines = [json.loads(l) for l in open(f"{sys.argv[1]}/{name}.jsonl")]
    steps = [l for l in lines if "loss" in l]
    tps = statistics.median(l["tokens_per_s"] for l in steps[1:])
    last = steps[-1]
    rss = last.get("rank_peak_rss_mb", [last["peak_rss_mb"]])
    sent = last.get("comm_bytes_per_rank", 0)
    # The rank that arrives last waits only for the data; the others also wait for it.
    least = statistics.median(min(l.get("rank_comm_wait_s", [0])) for l in steps[1:])
    most = statistics.median(max(l.get("rank_comm_wait_s", [0])) for l in steps[1:])
    print(f"| {name} | {tps:.0f} | {', '.join(f'{r:,.0f}' for r in rss)} | {sent:,} | {least:.2f} / {most:.2f} |")
EOF
