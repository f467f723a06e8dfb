#!/usr/bin/env bash
# One H200 call (~9 min) for what the 2026-12-03 call left unmeasured (issues 12 and 15): llama3-8b with
# each remaining memory compromise, a second 8-bit row that checks the rate fit on the first, then the
# ViT recipe with its planned DataLoader workers. Everything comes back as OUT/round4.tgz.
#
#     bash benchmarks/h200_round4.sh "$OUT"
#
# Budgets (seconds, env): COMPROMISE_BUDGET (start none after), COMPROMISE_TOTAL (stop one still running),
# RECIPE_TIMEOUT. The defaults fit one 600 s call with the wheels' install.
set -uo pipefail
out=${1:?usage: bash benchmarks/h200_round4.sh OUT_DIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
mkdir -p "$out/recipes" "$out/compromises"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/nvidia-smi.csv" 2>&1
python3 -c "import torch, accelerate, transformers; print(torch.__version__, accelerate.__version__, transformers.__version__)" \
  > "$out/versions.txt" 2>&1
start=$(date +%s)
OUT="$out/compromises" timeout $(( ${COMPROMISE_TOTAL:-390} + 15 )) python3 benchmarks/h200_compromises.py \
  --budget-s "${COMPROMISE_BUDGET:-320}" --total-s "${COMPROMISE_TOTAL:-390}" \
  --only ${COMPROMISES:-pure-bf16 in-backward lora-r16 standard adamw-8bit-mb4 cpu-offload}
echo "compromises: exit $? after $(( $(date +%s) - start )) s" >> "$out/versions.txt"
timeout "${RECIPE_TIMEOUT:-150}" bash benchmarks/h200_recipes.sh "$out/recipes" --work /tmp/recipes-work --only vit-planned
echo "recipes: exit $? after $(( $(date +%s) - start )) s" >> "$out/versions.txt"
tar -czf "$out/round4.tgz" -C "$out" recipes compromises nvidia-smi.csv versions.txt
rm -rf "$out/recipes" "$out/compromises"
