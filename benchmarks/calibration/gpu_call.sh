#!/usr/bin/env bash
# One H200 call for issue 16: one unseen set (measure_unseen.py --set SET; its predictions committed
# before the call, results/h200-users-unseen<N>-predicted.json), every row with the host's dispatch
# speed in the header and measured after it. Everything comes back as OUT/<SET>.tgz.
#     bash benchmarks/h200_unseen_set.sh u3 "$OUT"     (2026-12-04: ~3 min; u4: ~2 min; u5, compiled rows: BUDGET=480; u6: BUDGET=470; u7: 24 eager rows, BUDGET=420; u8, 3 compiled: BUDGET=460)
# torch and transformers only, no wheels. Env: BUDGET (s: start no row after; default 420); ROUNDS (each row
# timed that many times, a host probe before each: measure_users_models.py --rounds; default 3, from u13).
# From u13 each compiled row runs in a process of its own (--fresh-compiled), as a user's script does.
set -uo pipefail
set_name=${1:?usage: bash benchmarks/h200_unseen_set.sh SET OUT_DIR}
out=${2:?usage: bash benchmarks/h200_unseen_set.sh SET OUT_DIR}
n=${set_name#u}
r="$out/$set_name"
source "$(dirname "${BASH_SOURCE[0]}")/h200_call_env.sh" "$r"
start=$(date +%s)
timeout $(( ${BUDGET:-420} + 100 )) python3 benchmarks/measure_unseen.py --set "$set_name" \
  --out "$r/h200-users-unseen$n.jsonl" --budget-s "${BUDGET:-420}" --rounds "${ROUNDS:-3}" --fresh-compiled > "$r/unseen$n.log" 2>&1
echo "unseen$n: exit $? after $(( $(date +%s) - start )) s" >> "$r/versions.txt"
tar -czf "$out/$set_name.tgz" -C "$out" "$set_name"
rm -rf "$r"
