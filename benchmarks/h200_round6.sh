#!/usr/bin/env bash
# One H200 call (~9 min) for issue 16: the second unseen set (measure_unseen.py --set u2, its predictions
# committed before, results/h200-users-unseen2-predicted.json), the users' eager rows again with the
# host's dispatch speed in the header and on every row, and kernel profiles of the rows the estimator
# misses most (profile_users_rows.py). Everything comes back as OUT/round6.tgz.
#     bash benchmarks/h200_round6.sh "$OUT"      (torch and transformers only; no wheels needed)
# Env: U2_BUDGET, USERS_BUDGET (s: start no row after), PROFILE_ROWS (ids, comma-separated).
set -uo pipefail
out=${1:?usage: bash benchmarks/h200_round6.sh OUT_DIR}
r="$out/round6"
source "$(dirname "${BASH_SOURCE[0]}")/h200_call_env.sh" "$r"
start=$(date +%s)
timeout $(( ${U2_BUDGET:-280} + 60 )) python3 benchmarks/measure_unseen.py --set u2 --out "$r/h200-users-unseen2.jsonl" \
  --budget-s "${U2_BUDGET:-280}" > "$r/unseen2.log" 2>&1
echo "unseen2: exit $? after $(( $(date +%s) - start )) s" >> "$r/versions.txt"
timeout $(( ${USERS_BUDGET:-110} + 40 )) python3 benchmarks/measure_users_models.py --out "$r/h200-users-rerun.jsonl" \
  --budget-s "${USERS_BUDGET:-110}" > "$r/users.log" 2>&1
echo "users: exit $? after $(( $(date +%s) - start )) s" >> "$r/versions.txt"
timeout 100 python3 benchmarks/profile_users_rows.py --out "$r/profiles.json" \
  --only "${PROFILE_ROWS:-enc-bf16-128,hfbertcls-bf16-128,enc-fp32-64,u2-effnet-bf16-256,unet-bf16-128,convnext-bf16-256}" \
  > "$r/profile.log" 2>&1
echo "profiles: exit $? after $(( $(date +%s) - start )) s" >> "$r/versions.txt"
tar -czf "$out/round6.tgz" -C "$out" round6
rm -rf "$r"
