#!/usr/bin/env bash
# `advise probe` on one H200 for three model sources (issue 16, point 5), JSON into OUT_DIR:
#
#     bash benchmarks/gpu_checks/probe_h200.sh OUT_DIR
#
#   gpt2-catalog  --model gpt2: cardwise's own implementation, 16 x 1024 tokens, bf16
#   gpt2-hf       --hf-config tests/data/hf/gpt2/config.json: built by transformers (GPT2LMHeadModel)
#   encoder       --module benchmarks/gpu_checks/probe_models.py:encoder_classifier (nn.TransformerEncoder,
#                 batch_first, norm_first), 64 x 512 tokens, bf16
# each eager and with --compile (QUICK=1: eager only). Every probe plans as `advise launch` does,
# then runs 3 warm-up + 10 timed steps in a child process on the GPU.
#
# Writes into OUT_DIR, per NAME above (NAME-compile for the compiled variant):
#   probe-NAME.json             advise probe --json: measured peak allocated/reserved GiB, samples/s,
#                               GPU utilisation, the estimate, measured/estimated, the stored key
#   probe-NAME.log              progress and the child's output (stderr)
#   estimate-NAME-before.json   advise estimate of the same configuration with an empty home
#   estimate-NAME-after.json    ... with the probe's home: the stored factors applied, named in "notes"
#   probe-factors.json          HOME/probe-factors.json after all probes;  summary.txt  one line each
#
# The H200 image has torch, accelerate, transformers, rich, psutil, pyyaml and nvidia-ml-py but no
# pydantic: carry its wheels in .whl/ (see the report that added this script), installed first.
set -uo pipefail

out=${1:?usage: bash benchmarks/gpu_checks/probe_h200.sh OUT_DIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
py=${PYTHON:-python3}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$root"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

if ! "$py" -c "import pydantic, platformdirs" 2>/dev/null; then
  ls "$root"/.whl/*.whl >/dev/null 2>&1 || {
    echo "probe_h200: $py lacks pydantic and there is no .whl/ folder to install it from" >&2; exit 2; }
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$root"/.whl/*.whl || exit 2
  export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
"$py" -c "import torch, accelerate, pydantic, rich, psutil, yaml, pynvml" || {
  echo "probe_h200: $py lacks cardwise's dependencies" >&2; exit 2; }
"$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
  echo "probe_h200: no CUDA GPU visible to $py" >&2; exit 2; }

home=$(mktemp -d)/home      # the probes' factors; "before" estimates use an empty one
empty=$(mktemp -d)/empty
"$py" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
  > "$out/versions.txt" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/nvidia-smi.csv" 2>&1

probe() {  # NAME MODEL-FLAGS... (config flags included)
  local name=$1; shift
  local variants=("--no-compile") v tag
  [[ "${QUICK:-0}" == 1 ]] || variants+=("--compile")
  for v in "${variants[@]}"; do
    tag=$name; [[ $v == --compile ]] && tag=$name-compile
    echo "== $tag: advise probe $* $v" | tee -a "$out/summary.txt"
    start=$(date +%s)
    "$py" -m cli.main probe "$@" "$v" --no-grad-ckpt --grad-accum 1 --precision bf16 --optimizer adamw \
      --probe-warmup 3 --probe-steps 10 --home "$home" --json > "$out/probe-$tag.json" 2> "$out/probe-$tag.log"
    echo "   exit $? in $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
    for when in before after; do
      local h=$empty; [[ $when == after ]] && h=$home
      # on the detected GPU, as the probe (the same GPU table row keys the factor)
      "$py" -m cli.main estimate "$@" "$v" --no-grad-ckpt --grad-accum 1 --precision bf16 --optimizer adamw \
        --home "$h" --json > "$out/estimate-$tag-$when.json" 2>> "$out/probe-$tag.log"
    done
    "$py" - "$out/probe-$tag.json" >> "$out/summary.txt" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as exc:
    sys.exit(print(f"   no result: {exc}"))
m, e = r.get("measured") or {}, r.get("estimate") or {}
print(f"   {r['status']}: micro-batch {r['config']['micro_batch']}, {m.get('implementation')}; peak "
      f"{m.get('peak_gib', 0):.2f} GiB (reserved {m.get('reserved_gib') or 0:.2f}) vs est "
      f"{(e.get('memory') or {}).get('peak_gib', 0):.2f} = x{r.get('memory_ratio') or 0:.3f}; "
      f"{m.get('samples_per_s', 0):.1f} samples/s vs est {(e.get('throughput') or {}).get('samples_per_s', 0):.1f} "
      f"= x{r.get('throughput_ratio') or 0:.3f}; GPU util {m.get('gpu_util_pct')}"
      + (f"; error: {r.get('error')}" if r.get("error") else ""))
EOF
  done
}

probe gpt2-catalog --model gpt2 --micro-batch 16 --seq-len 1024
probe gpt2-hf --hf-config tests/data/hf/gpt2/config.json --micro-batch 16 --seq-len 1024
probe encoder --module benchmarks/gpu_checks/probe_models.py:encoder_classifier --input-shape 512 --input-dtype int64 \
  --micro-batch 64

cp "$home/probe-factors.json" "$out/" 2>/dev/null
cat "$out/summary.txt"
