"""`--recipe causal-lm --hf-model ORG/NAME` when the model cannot be fetched: one line, exit 2, how to pass a
local folder, before anything is recorded or started (it was a 127-line traceback of the ranks, exit 1).
The Hub is made unreachable for real: a closed local port as HF_ENDPOINT, or HF_HUB_OFFLINE; the cache is
an empty HF_HOME."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("env, why", [({"HF_ENDPOINT": "http://127.0.0.1:9"}, "cannot be reached"),
                                      ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE")], ids=["unreachable", "offline"])
def test_a_hub_id_that_cannot_be_fetched_is_refused_in_one_line(tmp_path, env, why):
    data = tmp_path / "ex.jsonl"
    data.write_text("".join(f'{{"text": "hello world {i}"}}\n' for i in range(6)))
    full = {**{k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_ENDPOINT")},
            "PYTHONPATH": str(ROOT), "HF_HOME": str(tmp_path / "hf"), **env}
    res = subprocess.run([sys.executable, "-m", "cli.main", "launch", "--cpu", "--processes", "1", "--recipe", "causal-lm",
                          "--hf-model", "someorg/somemodel", "--model", "gpt2", "--data", str(data), "--max-steps", "2",
                          "--home", str(tmp_path / "home")], capture_output=True, text=True, env=full, timeout=300)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("advise: error: --hf-model someorg/somemodel") and why in lines[0], lines
    assert "--hf-model DIR" in lines[1] and "--local-dir" in lines[1]
    assert not (tmp_path / "home" / "runs").exists() or not any((tmp_path / "home" / "runs").iterdir())
