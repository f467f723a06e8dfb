#!/bin/bash
# ab.sh LABEL DIR FILES...: one pytest per call, -p no:xdist, user/sys/wall
label=$1; dir=$2; shift 2
cd $dir
for f in "$@"; do
  s=$( { PYTHONPATH=. /usr/bin/time -f "%U %S %e" /work/venv/bin/python -m pytest -q -p no:xdist -p no:cacheprovider $f > /tmp/suite2/ab-$label-$(basename $f).log 2>&1; } 2>&1 | tail -1)
  echo "$label $f $s load=$(cut -d' ' -f1 /proc/loadavg) $(tail -1 /tmp/suite2/ab-$label-$(basename $f).log)"
done
