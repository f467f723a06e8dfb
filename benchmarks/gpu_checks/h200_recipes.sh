#!/usr/bin/env bash
# The recipes on generated data on one H200 (issue 15), in one command (~4-5 min, under 8):
#
#     bash benchmarks/gpu_checks/h200_recipes.sh "$OUT"
#
# 1. causal-lm, LoRA rank 16: a Llama-3.2-1B-shaped model built from its config (random weights,
#    nothing downloaded; a byte-level BPE tokenizer with a chat template trained offline on the data)
#    fine-tuned on 8,000 generated chat/prompt/text examples, 1024-token packed rows, 30 steps;
# 2. causal-lm, full fine-tuning: the same model and data, every weight;
# 3. image-classification: vit-l-16 at 224 px on 2,400 generated 320 px JPEGs (4 classes) with
#    0 DataLoader workers (the data-bound check must flag it), 60 steps;
# 4. the same plan with its planned workers (CPU cores per GPU; must not be flagged).
# Figures per run (samples/s, tokens/s, peak GiB, GPU utilisation, data-wait share, flagged or
# not, loss first -> last) go to OUT/h200-recipes.json and the table to OUT/h200-recipes.md
# (copy both to benchmarks/gpu_checks/results/); OUT/h200-recipes.log has every command and its output;
# the data and run store go to OUT/work (delete it afterwards: the full fine-tune's weights are ~5 GB).
# LoRA needs the runtime's LoRA (launcher/compromises/lora.py, peft); without it row 1 is refused
# (exit 2) and the others still run. Needs transformers, tokenizers and Pillow; torchvision is
# used for the image transforms when it imports. PYTHON=... picks the interpreter (default python3).
# CPU dry run of the script at tiny size (no GPU, measures nothing):
#     bash benchmarks/gpu_checks/h200_recipes.sh OUT --tiny
set -euo pipefail

out=${1:?usage: bash benchmarks/gpu_checks/h200_recipes.sh OUT_DIR [--tiny]}
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

"$py" -c "import torch, accelerate, pydantic, transformers, tokenizers" 2>/dev/null || {
  echo "h200_recipes: $py lacks torch, accelerate, pydantic, transformers or tokenizers" >&2; exit 2; }
"$py" -c "import PIL, numpy" 2>/dev/null || echo "h200_recipes: no Pillow/numpy: the ViT runs will be skipped" >&2
if [[ " $* " != *" --tiny "* ]]; then
  "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
    echo "h200_recipes: no CUDA GPU visible to $py (for a CPU dry run add --tiny)" >&2; exit 2; }
fi
start=$(date +%s)
set +e
"$py" -m benchmarks.gpu_checks.h200_recipes "$out" "$@"
rc=$?
set -e
echo "h200_recipes: exit $rc after $(( $(date +%s) - start )) s; table: $out/h200-recipes.md" >&2
exit $rc
