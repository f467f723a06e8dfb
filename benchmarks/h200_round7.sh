#!/usr/bin/env bash
# One H200 call (~8 min) for issue 16: the third unseen set (measure_unseen.py --set u3; its predictions
# committed before, results/h200-users-unseen3-predicted.json), every row with the host's dispatch
# speed measured after it. Everything comes back as OUT/round7.tgz.
#     bash benchmarks/h200_round7.sh "$OUT"      (torch and transformers only; no wheels needed)
# Env: U3_BUDGET (s: start no row after).
set -uo pipefail
out=${1:?usage: bash benchmarks/h200_round7.sh OUT_DIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
r="$out/round7"
mkdir -p "$r"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv > "$r/nvidia-smi.csv" 2>&1
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)" > "$r/versions.txt" 2>&1
start=$(date +%s)
timeout $(( ${U3_BUDGET:-420} + 100 )) python3 benchmarks/measure_unseen.py --set u3 --out "$r/h200-users-unseen3.jsonl" \
  --budget-s "${U3_BUDGET:-420}" > "$r/unseen3.log" 2>&1
echo "unseen3: exit $? after $(( $(date +%s) - start )) s" >> "$r/versions.txt"
tar -czf "$out/round7.tgz" -C "$out" round7
rm -rf "$r"
