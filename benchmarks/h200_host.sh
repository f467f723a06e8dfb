#!/usr/bin/env bash
# One H200 call (~7 min) for issue 16's host-bound regime: every measurement file now carries this
# host's dispatch speed (launcher.host_dispatch) in its header, so that host-bound rows are predicted
# for the host that ran them.
#   1. the host-bound set (small batches, compiled small batches, fp32 CNNs): the fit rows of launch_us;
#   2. the 13 unseen users' configurations (holdout, measure_unseen.py), on the same host;
#   3. a slower host, made on purpose: the eager host-bound rows again, pinned to one core that a busy
#      loop shares, so the dispatch speed halves; predicted with that header's speed, they check that
#      the host factor carries (rows of one host cannot).
#     bash benchmarks/h200_host.sh "$OUT"      (needs pydantic on PYTHONPATH: see h200_round4's wheels)
set -uo pipefail
out=${1:?usage: bash benchmarks/h200_host.sh OUT_DIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
day=$(date +%Y-%m-%d)
python3 -m launcher.host_dispatch cuda
timeout 240 python3 benchmarks/measure_reference.py --set hostbound --out "$out/h200-hostbound-$day.jsonl" --budget-s 200 \
  | cut -c1-200
timeout 150 python3 benchmarks/measure_unseen.py --out "$out/h200-users-unseen-$day.jsonl" --budget-s 110 | tail -16
core=$(( $(nproc) - 1 ))
taskset -c "$core" python3 -c "while True: pass" & busy=$!
OMP_NUM_THREADS=1 timeout 120 taskset -c "$core" python3 benchmarks/measure_reference.py --set hostbound --eager-only \
  --out "$out/h200-hostbound-contended-$day.jsonl" --budget-s 80 \
  --only h-r50-bf16-1 h-mini-bf16-8 h-bert-bf16-4 h-gpt2-bf16-1 h-vitb-bf16-1 h-r18-bf16-32 h-mini-bf16-32 h-l1b-bf16-1 \
  | cut -c1-200
kill "$busy"; wait "$busy" 2>/dev/null
python3 -m launcher.host_dispatch cuda
