"""benchmarks/calibration/measure/compiled_overlap.py on CPU (its smoke rows): the host time it reports is the step's, split
into phases that add up to it; the collector's pauses are timed only while their callback is installed."""

from __future__ import annotations

import gc

import pytest

pytest.importorskip("transformers")  # measure_users_models imports the HF rows' configs lazily, not at import

import benchmarks.calibration.measure.compiled_overlap as co
import benchmarks.calibration.measure.users_models as mum


def test_phases_add_up_to_the_host_time_of_a_step():
    row = dict(zip(mum.KEYS, mum.SMOKE[0]))  # smoke-enc: the encoder classifier, tiny, fp32, eager
    res = co.measure(row, "cpu", smoke=True)
    phases = res["phases_ms"]
    assert set(phases) == {"forward", "backward", "opt_step", "zero_grad"}
    assert all(v > 0 for v in phases.values())
    # medians of the same 7 steps (a loaded CI host moves each): their sum is the step's host time, give or take
    assert 0.5 * res["host_ms"] <= sum(phases.values()) <= 1.5 * res["host_ms"]
    assert res["step_ms"] > 0 and res["syncs"] == [] and res["profile"] == {}
    assert res["dynamo"]["graph_breaks"] == 0


def test_gc_pauses_are_timed_by_generation_and_the_callback_removed():
    before = list(gc.callbacks)

    def churn():
        for _ in range(3):
            junk = [[i] for i in range(50_000)]
            del junk
            gc.collect(2)
        return "done"

    result, pauses = co.gc_pauses(churn)
    assert result == "done"
    assert pauses["gen2"]["collections"] >= 3 and pauses["gen2"]["ms"] > 0
    assert gc.callbacks == before


def test_measure_leaves_the_measurement_scripts_step_alone():
    from benchmarks.calibration.measure.steploop import make_step

    co.measure(dict(zip(mum.KEYS, mum.SMOKE[0])), "cpu", smoke=True)
    assert mum.make_step is make_step
