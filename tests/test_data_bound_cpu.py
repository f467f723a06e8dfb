"""The data-bound check on CPU runs: no NVML, and none needed (``launcher.data_wait.check(cpu=True)``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.data_wait import check

SCRIPTS = Path(__file__).with_name("scripts")


@pytest.mark.parametrize("share, flagged, words", [
    (0.74, True, "data-bound (CPU run): the ranks waited for data 74% of step time, so the CPU computed 26%"),
    (0.25, False, "not data-bound (CPU run)"),  # busy 75%: over the 70% line
    (0.05, False, "not data-bound (CPU run)"),
])
def test_a_cpu_run_is_judged_by_its_wait_share(share, flagged, words):
    bound = check(share, [], workers=0, cpu=True)
    assert bound.flagged is flagged and words in bound.message, bound.message
    assert (bound.fix is not None) is flagged and bound.gpu_util_pct is None


@pytest.mark.slow
def test_a_cpu_run_waiting_for_its_data_gets_the_verdict(tmp_path):
    res = subprocess.run([sys.executable, "-m", "cli.main", "launch", "--cpu", "--processes", "1", "--model",
                          "mini-transformer", "--seq-len", "16", "--micro-batch", "4", "--max-steps", "12",
                          "--no-final-weights", "--home", str(tmp_path), "--json", "--",
                          str(SCRIPTS / "slow_data.py"), "--item-s", "0.02"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    rec = json.loads(res.stdout)
    bound = rec["metrics"]["data_bound"]
    assert bound["flagged"] and "data-bound (CPU run)" in bound["message"] and bound["data_wait_share"] > 0.5, bound
    text = subprocess.run([sys.executable, "-m", "cli.main", "show", rec["id"], "--home", str(tmp_path)],
                          capture_output=True, text=True).stdout
    assert "data-bound (CPU run)" in text, text
