#!/usr/bin/env bash
# The second H200 call (2026-12-04, ~9 min) for what the first left unmeasured (issues 12 and 15): llama3-8b with
# each remaining memory compromise and a second 8-bit row that checks the rate fit on the first, then the ViT
# recipe with its planned DataLoader workers; OUT/round4.tgz. The budgets fit one 600 s call with the wheels'
# install. Everything else is benchmarks/h200_round3.sh.
#
#     bash benchmarks/h200_round4.sh "$OUT"
ORDER="compromises recipes" ARCHIVE=round4 RECIPES_ONLY=vit-planned RECIPE_TIMEOUT=${RECIPE_TIMEOUT:-150} \
  COMPROMISE_BUDGET=${COMPROMISE_BUDGET:-320} COMPROMISE_TOTAL=${COMPROMISE_TOTAL:-390} \
  COMPROMISES=${COMPROMISES:-"pure-bf16 in-backward lora-r16 standard adamw-8bit-mb4 cpu-offload"} \
  exec bash "$(dirname "${BASH_SOURCE[0]}")/h200_round3.sh" "$@"
