#!/usr/bin/env bash
# One H200 call for issues 12 and 15 (~8.5 min): the recipes on generated data, then llama3-8b with each
# memory compromise, new ones first, inside a fixed time budget; everything comes back as one archive,
# OUT/$ARCHIVE.tgz (recipes/ and compromises/).
#
#     bash benchmarks/h200_round3.sh "$OUT"
#
# Env: RECIPES_ONLY (lm|vit|vit-planned), COMPROMISES (names, in order), ORDER ("recipes compromises",
# the default, or the other way round), RECIPE_TIMEOUT, COMPROMISE_BUDGET (start none after, s),
# COMPROMISE_TOTAL (stop one still running, s), ARCHIVE (default round3). benchmarks/h200_round4.sh is the
# second call's settings.
set -uo pipefail
out=${1:?usage: bash benchmarks/h200_round3.sh OUT_DIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
mkdir -p "$out/recipes" "$out/compromises"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/nvidia-smi.csv" 2>&1
python3 -c "import torch, accelerate, transformers; print(torch.__version__, accelerate.__version__, transformers.__version__)" \
  > "$out/versions.txt" 2>&1
start=$(date +%s)
recipes() {
  timeout "${RECIPE_TIMEOUT:-270}" bash benchmarks/h200_recipes.sh "$out/recipes" --work /tmp/recipes-work \
    ${RECIPES_ONLY:+--only "$RECIPES_ONLY"}
  echo "recipes: exit $? after $(( $(date +%s) - start )) s" >> "$out/versions.txt"
}
compromises() {
  OUT="$out/compromises" timeout $(( ${COMPROMISE_TOTAL:-235} + 15 )) python3 benchmarks/h200_compromises.py \
    --budget-s "${COMPROMISE_BUDGET:-170}" --total-s "${COMPROMISE_TOTAL:-235}" \
    --only ${COMPROMISES:-adamw-8bit in-backward lora-r16 pure-bf16 cpu-offload standard}
  echo "compromises: exit $? after $(( $(date +%s) - start )) s" >> "$out/versions.txt"
}
for part in ${ORDER:-recipes compromises}; do "$part"; done
tar -czf "$out/${ARCHIVE:-round3}.tgz" -C "$out" recipes compromises nvidia-smi.csv versions.txt
rm -rf "$out/recipes" "$out/compromises"
