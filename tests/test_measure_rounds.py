"""measure/users_models.py --rounds on CPU (its smoke rows): a row timed in rounds reports its median
round and the median of the host probes taken between them; benchmarks/calibration/fit.py predicts such a row
for that in-row host speed before the call's header's."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")  # measure_users_models imports the HF rows' configs lazily, not at import

import benchmarks.calibration.rows as fc
import benchmarks.calibration.measure.users_models as mum

SMOKE_ENC = dict(zip(mum.KEYS, mum.SMOKE[0]))  # the encoder classifier, tiny, fp32, eager


def test_rounds_report_the_median_round_and_the_median_in_row_probe():
    res = mum.run_config(SMOKE_ENC, "cpu", warmup=2, target_s=0.0, min_steps=2, max_steps=2, smoke=True, rounds=3)
    rounds = res["rounds"]
    assert len(rounds) == 3 and all(r["step_s"] > 0 and r["host_dispatch_us"] > 0 for r in rounds)
    assert res["step_s"] == statistics.median(r["step_s"] for r in rounds)
    assert res["samples_per_s"] == pytest.approx(SMOKE_ENC["micro_batch"] / res["step_s"])
    assert res["host_dispatch_in_row_us"] == statistics.median(r["host_dispatch_us"] for r in rounds)
    assert res["host_dispatch_us"] > 0  # the after-teardown reading is still taken


def test_one_round_has_no_in_row_probe():
    res = mum.run_config(SMOKE_ENC, "cpu", warmup=2, target_s=0.0, min_steps=2, max_steps=2, smoke=True)
    assert "rounds" not in res and "host_dispatch_in_row_us" not in res
    assert res["samples_per_s"] == pytest.approx(SMOKE_ENC["micro_batch"] / res["step_s"])


def test_host_factor_prefers_the_in_row_probe_then_the_header(tmp_path):
    ref = fc.dispatch_us(fc.HOSTBOUND)
    measured = tmp_path / "set.jsonl"
    measured.write_text(json.dumps({"kind": "header", "host_dispatch": {"us_per_step": 1.5 * ref}}) + "\n")
    assert fc.host_factor_of(measured, {"host_dispatch_in_row_us": 2 * ref, "host_dispatch_us": 3 * ref}) \
        == pytest.approx(2.0)
    assert fc.host_factor_of(measured, {"host_dispatch_us": 3 * ref}) == pytest.approx(1.5)
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({"kind": "header"}) + "\n")
    assert fc.host_factor_of(bare, {"host_dispatch_us": 3 * ref}) == pytest.approx(3.0)


def test_a_row_in_its_own_process_comes_back_with_that_process_host_probe(monkeypatch, tmp_path):
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # python -m runs from the checkout root
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-m", mum.__name__, "--smoke", "--rounds", "2", "--fresh-compiled",
                                           f"--out={tmp_path / 'parent.jsonl'}", "--only", "smoke-vgg"])
    res = mum.in_own_process("smoke-enc")
    assert res["id"] == "smoke-enc" and res["fresh_process"] is True
    assert len(res["rounds"]) == 2  # the parent's other arguments reach the child
    assert res["process_host_dispatch_us"] > 0 and res["samples_per_s"] > 0
    assert not (tmp_path / "parent.jsonl").exists()  # the child wrote its own file, not the parent's
