#!/usr/bin/env bash
# The measurements behind benchmarks/gpu_checks/results/h200-1gpu.md, in one command on one H200 (~8 min):
#
#     bash benchmarks/gpu_checks/h200_bench.sh OUT_DIR
#
# resnet50, vit-b-16, gpt2, llama3.2-1b and mini-transformer, each at fp32, bf16 and bf16+compile,
# plus bf16+channels_last for resnet50: samples/s, peak memory, speedup over fp32,
# and the estimate's error before calibration (packaged constants) and after (this run's factors
# per GPU kind, model family, precision and mode). Every configuration is one launch of the bench
# worker through the launcher (`advise bench`), data already on the GPU, 3 warm-up + 10 timed steps.
# channels_last rows of the transformers are listed as skipped (it applies to CNNs only). The 5
# compiled rows run last and take most of the time (~40-60 s of compilation each); the report and
# CSV are rewritten after every row, so a run stopped early still leaves what it measured.
#
# Writes into OUT_DIR:
#   h200-1gpu.md    the report: copy it to benchmarks/gpu_checks/results/h200-1gpu.md
#   h200-1gpu.json  every row (advise bench --json), h200-1gpu.csv the same as CSV
#   h200-1gpu.png   the plot, when matplotlib is installed
#   h200-1gpu-calibration.json  the factors measured (HOME/calibration.json), h200-1gpu.log the progress
# The run store and run directories (rank logs) go to $BENCH_HOME (default: a fresh temporary
# directory, printed at the end), so that OUT_DIR holds six files only.
# Micro-batches follow the estimator's H200 reference set (benchmarks/calibration/results/h200-estimator.md)
# where it has a row: resnet50 and vit-b-16 128, gpt2 16 x 1024 tokens, llama3.2-1b 4 x 2048,
# mini-transformer 128 x 256.
# Needs cardwise's dependencies (pyproject.toml: torch, accelerate, pydantic, rich, nvidia-ml-py,
# psutil, pyyaml); nothing is downloaded. PYTHON=... picks the interpreter (default python3).
# Short of time? MODELS=gpt2,resnet50 PRECISIONS=fp32,bf16 STEPS=5 bash benchmarks/gpu_checks/h200_bench.sh OUT
# runs a subset (the compiled rows are ~60% of the time).
set -euo pipefail

out=${1:?usage: bash benchmarks/gpu_checks/h200_bench.sh OUT_DIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
py=${PYTHON:-python3}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

"$py" -c "import torch, accelerate, pydantic, rich, psutil, yaml, pynvml" 2>/dev/null || {
  echo "h200_bench: $py lacks cardwise's dependencies; install them first: pip install -e '$root'" \
       "(offline: pip install --no-index wheels of pydantic, pydantic-core, annotated-types, typing-inspection)" >&2; exit 2; }
"$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
  echo "h200_bench: no CUDA GPU visible to $py" >&2; exit 2; }

models=${MODELS:-resnet50,vit-b-16,gpt2,llama3.2-1b,mini-transformer}
pick() {  # the MODEL=N pairs of the models benched, comma-separated
  local kv picked=()
  for kv in "$@"; do [[ ",$models," == *",${kv%%=*},"* ]] && picked+=("$kv"); done
  (IFS=,; echo "${picked[*]}")
}

# A fresh home: "before calibration" is then the packaged estimator alone.
home=${BENCH_HOME:-$(mktemp -d)/home}
rm -rf "$home"
start=$(date +%s)
set +e
"$py" -m cli.main bench --gpus 1 --modes single \
  --model "$models" --precision "${PRECISIONS:-fp32,bf16,bf16+compile,bf16+channels-last}" \
  --micro-batch "$(pick resnet50=128 vit-b-16=128 gpt2=16 llama3.2-1b=4 mini-transformer=128)" \
  --seq-len "$(pick gpt2=1024 llama3.2-1b=2048 mini-transformer=256)" \
  --steps "${STEPS:-10}" --warmup 3 --home "$home" \
  --report "$out/h200-1gpu.md" --csv "$out/h200-1gpu.csv" --plot "$out/h200-1gpu.png" \
  --json > "$out/h200-1gpu.json" 2> >(tee "$out/h200-1gpu.log" >&2)
rc=$?
set -e
cp "$home/calibration.json" "$out/h200-1gpu-calibration.json" 2>/dev/null || true
echo "h200_bench: exit $rc after $(( $(date +%s) - start )) s; report: $out/h200-1gpu.md; run store: $home" >&2
"$py" -m cli.main calibrate --home "$home" >&2 || true
exit $rc
