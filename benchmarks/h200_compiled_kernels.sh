#!/usr/bin/env bash
# One H200 call for issue 16 (2026-12-04, third session): what a compiled step launches and what its host
# takes, model by model, each in a process of its own (compiled_overlap.py --fresh: kernel groups,
# host time of one step on an idle GPU and its phases, the host probe before and after), then the twelfth
# set's worst eager row again with the rounds protocol. Everything comes back as OUT/compiled-kernels.tgz.
#     bash benchmarks/h200_compiled_kernels.sh "$OUT"      (~9 min)
set -uo pipefail
out=${1:?usage: bash benchmarks/h200_compiled_kernels.sh OUT_DIR}
r="$out/compiled-kernels"
source "$(dirname "${BASH_SOURCE[0]}")/h200_call_env.sh" "$r"
grep -m1 "model name" /proc/cpuinfo >> "$r/versions.txt"
start=$(date +%s)
rows=u12-vgg-bf16-compile-16-i192,u9-hfbertcls-bf16-compile-32-s256,u5-effnet-bf16-compile-64-i192,u6-nanogpt-bf16-compile-8-s1024
rows+=,u8-convnext-bf16-compile-64-i192,u8-mistral-bf16-compile-8-s512,u12-hfqwen2-bf16-compile-4-s1024,u6-hfvit-bf16-compile-32
rows+=,u10-unet-bf16-compile-8-i192
timeout 480 python3 benchmarks/compiled_overlap.py --fresh --only "$rows" --out "$r/compiled-kernels.json" \
  --budget-s 400 > "$r/compiled-kernels.log" 2>&1
echo "compiled_overlap: exit $? after $(( $(date +%s) - start )) s" >> "$r/versions.txt"
timeout 60 python3 benchmarks/measure_unseen.py --set u12 --only u12-nanogpt-pure-4-s1024 --rounds 3 \
  --out "$r/u12-rerun.jsonl" --budget-s 50 > "$r/u12-rerun.log" 2>&1
echo "u12 rerun: exit $? after $(( $(date +%s) - start )) s" >> "$r/versions.txt"
tar -czf "$out/compiled-kernels.tgz" -C "$out" compiled-kernels
rm -rf "$r"
