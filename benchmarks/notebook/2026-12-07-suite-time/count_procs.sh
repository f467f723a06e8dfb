#!/bin/bash
# Python processes a test file starts, per test (accelerate launches, `advise` processes, ranks): a
# sitecustomize on PYTHONPATH logs every interpreter's argv at start (CPU at a clean exit) to a JSONL.
# Tests that pass their children a PYTHONPATH of their own (test_probe's advise(), the Ctrl-C tests)
# are not seen.      usage: count_procs.sh CHECKOUT tests/test_x.py [pytest args]
here=$(cd "$(dirname "$0")" && pwd)
cd "$1" && shift
log=${TMPDIR:-/tmp}/count-procs-$(basename "$1" .py)-$$.jsonl
SUITE_PROC_LOG=$log PYTHONPATH=.:$here/count_procs /usr/bin/time -f "%U user %S sys %e wall" \
  "${PYTHON:-python3}" -m pytest -q -p no:xdist "$@" 2>&1 | tail -3
"${PYTHON:-python3}" "$here/count_procs/summarize.py" "$log"
