"""Scaling efficiency that means something (issue 28, DESIGN.md): against the best plan on the smallest count
that fits; an estimate never reads a bare 100% at N GPUs; a row above 100% says why (its "changed" cell)."""

from __future__ import annotations

import pytest

from advisor.hardware import Machine
from advisor.plan import ModelRef
from advisor.request import Request
from advisor.units import format_efficiency


def test_an_estimate_near_100_percent_keeps_a_decimal():
    assert format_efficiency(0.996) == "99.6%" and format_efficiency(1.004) == "100.4%"
    assert format_efficiency(0.994) == "99%" and format_efficiency(1.32) == "132%" and format_efficiency(0.5) == "50%"
    assert format_efficiency(0.998, measured=True) == "100%"  # advise bench measured it: shown as measured
    assert format_efficiency(None) == "-"


@pytest.mark.parametrize("model,gpu", [("llama3-8b", "A100-80GB"), ("gpt2", "L40S"), ("vit-b-16", "H100")])
def test_rows_compare_with_the_smallest_count_that_fits_and_say_why_they_pass_100_percent(model, gpu):
    from rules.api import recommend

    rec = recommend(Request(model=ModelRef(name=model), gpu=gpu, gpus=8, dataset_size=1_000_000, epochs=1),
                    machine=Machine(cpu_cores=64))
    rows = [r for r in rec.scaling if r.fits]
    base = min(rows, key=lambda r: r.gpus)
    assert base.baseline and sum(r.baseline for r in rows) == 1
    for r in rows:
        assert r.scaling_efficiency == pytest.approx((r.samples_per_s / r.gpus) / (base.samples_per_s / base.gpus))
        if not r.baseline and not r.measured:
            assert format_efficiency(r.scaling_efficiency) != "100%"
            if r.scaling_efficiency > 1.0:
                assert r.changed, f"{r.gpus} GPUs at {r.scaling_efficiency:.1%} with nothing changed"


def test_the_report_explains_an_efficiency_over_100_percent(capsys):
    from cli.main import main

    rc = main(["--model", "llama3-8b", "--gpu", "A100-80GB", "--gpus", "8", "--dataset-size", "1000000",
               "--epochs", "1"])
    assert rc == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "efficiency over 100%" in out and "not scaling headroom" in out
