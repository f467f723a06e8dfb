#!/bin/bash
# Before/after of test files, back to back: BASE's version (copied to tests/before_<name>.py, removed
# after) then the checkout's, each `/usr/bin/time -f "%U %S %e" pytest -q -p no:xdist FILE`.
# usage: BASE=49dd8a0 ab.sh CHECKOUT tests/test_x.py ...        (lines: time, file, which, load, user sys wall, outcome)
cd "$1" && shift
t=$(mktemp) o=$(mktemp)
for f in "$@"; do
  n=$(basename "$f" .py)
  git show "${BASE:?}:tests/$n.py" > "tests/before_$n.py"
  for which in before after; do
    path=tests/$n.py; [ $which = before ] && path=tests/before_$n.py
    /usr/bin/time -o "$t" -f "%U %S %e" env PYTHONPATH=. "${PYTHON:-python3}" -m pytest -q -p no:xdist -p no:cacheprovider "$path" > "$o" 2>&1
    echo "$(date -u +%H:%M) $n $which load=$(cut -d' ' -f1 /proc/loadavg) $(cat "$t") $(tail -1 "$o" | cut -c1-60)"
  done
  rm -f "tests/before_$n.py"
done
rm -f "$t" "$o"
