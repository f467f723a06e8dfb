#!/usr/bin/env bash
# One H200 call for issues 12 and 15 (~8.5 min): the recipes on generated data first, then llama3-8b
# with each memory compromise, new ones first, inside a fixed time budget; everything comes back as
# one archive, OUT/round3.tgz (recipes/ and compromises/).
#
#     bash benchmarks/h200_round3.sh "$OUT"
#
# What the first call (2026-12-03) left unmeasured, in a later call:
#     RECIPES_ONLY=vit-planned COMPROMISES="in-backward lora-r16 pure-bf16 cpu-offload standard" \
#       bash benchmarks/h200_round3.sh "$OUT"
set -uo pipefail
out=${1:?usage: bash benchmarks/h200_round3.sh OUT_DIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
mkdir -p "$out/recipes" "$out/compromises"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/nvidia-smi.csv" 2>&1
python3 -c "import torch, accelerate, transformers; print(torch.__version__, accelerate.__version__, transformers.__version__)" \
  > "$out/versions.txt" 2>&1
timeout 270 bash benchmarks/h200_recipes.sh "$out/recipes" --work /tmp/recipes-work ${RECIPES_ONLY:+--only "$RECIPES_ONLY"}
echo "recipes: exit $?" >> "$out/versions.txt"
OUT="$out/compromises" timeout 250 python3 benchmarks/h200_compromises.py --budget-s 170 --total-s 235 \
  --only ${COMPROMISES:-adamw-8bit in-backward lora-r16 pure-bf16 cpu-offload standard}
echo "compromises: exit $?" >> "$out/versions.txt"
tar -czf "$out/round3.tgz" -C "$out" recipes compromises nvidia-smi.csv versions.txt
rm -rf "$out/recipes" "$out/compromises"
