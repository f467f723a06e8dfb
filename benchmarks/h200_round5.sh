#!/usr/bin/env bash
# One short H200 call (~4 min; OFFLOAD_S and PROBES="flags;flags" shorten it): CPU offload with the host's cores (launcher.command.offload_threads; the
# first offload row ran on one thread), then `advise probe` on a host-bound configuration: the child times
# this host's dispatch speed (launcher.host_dispatch), the probe stores it, and the next `advise estimate`
# on the same home uses it. Everything comes back as OUT/round5.tgz.
#     bash benchmarks/h200_round5.sh "$OUT"      (pydantic, rich, textual, peft on PYTHONPATH: the wheels)
set -uo pipefail
out=${1:?usage: bash benchmarks/h200_round5.sh OUT_DIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$out/round5"
nproc > "$out/round5/nproc.txt"
OUT="$out/round5" timeout $(( ${OFFLOAD_S:-185} + 15 )) python3 benchmarks/h200_compromises.py --budget-s 5 --total-s ${OFFLOAD_S:-185} --only cpu-offload-threads
home=/tmp/round5-home
IFS=";" read -ra probes <<< "${PROBES:---model resnet50 --micro-batch 8;--model gpt2 --micro-batch 4 --seq-len 1024}"
for cfg in "${probes[@]}"; do
  name=$(echo "$cfg" | awk '{print $2}')
  timeout 90 python3 -m cli.main probe $cfg --home "$home" --json > "$out/round5/probe-$name.json" 2> "$out/round5/probe-$name.err"
  timeout 30 python3 -m cli.main estimate $cfg --home "$home" --json > "$out/round5/estimate-after-$name.json" 2>&1
  timeout 30 python3 -m cli.main estimate $cfg --json > "$out/round5/estimate-packaged-$name.json" 2>&1
done
cp "$home/host-speed.json" "$out/round5/" 2>/dev/null
tar -czf "$out/round5.tgz" -C "$out" round5
rm -rf "$out/round5"
