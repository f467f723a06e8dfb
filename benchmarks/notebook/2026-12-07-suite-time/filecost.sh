#!/bin/bash
# per-file: wall, user, sys seconds (children included), serial, one file at a time
cd $1
for f in ${FILES:-$(ls tests/test_*.py)}; do
  r=$( { /usr/bin/time -f "%e %U %S" env CARDWISE_SLURM_TESTS= PYTHONPATH=. timeout 900 "${PYTHON:-python3}" -m pytest -q -p no:xdist -p no:cacheprovider $f 2>&1 | tail -1 | cut -c1-60 ; } 2>&1 | tr '\n' ' ')
  echo "$f $r"
done
