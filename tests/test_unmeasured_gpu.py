"""A GPU kind no row has measured says what error to expect (issue 39): the fit source's rows of each GPU kind
predicted with that kind left out of the fit, from advisor/data/gpu_perf.json (benchmarks/calibration/cross_gpu/fit.py
writes it)."""

from __future__ import annotations

import json

from advisor.calibration import default_calibration
from advisor.catalog import catalog_model
from advisor.config import TrainConfig
from advisor.estimate import estimate
from advisor.gpu_perf import FITTED, unmeasured_gpu_note
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec


def _est(gpu: str):
    return estimate(catalog_model("gpt2"), TrainConfig(micro_batch=8, seq_len=1024, precision="bf16"),
                    HardwareSpec(gpu=get_gpu(gpu), gpus_per_node=1), calibration=default_calibration())


def test_an_unmeasured_kind_states_the_expected_error():
    u = json.loads(FITTED.read_text())["unmeasured"]
    assert "L40S" not in u["measured_kinds"] and u["rows"] >= 20
    est = _est("L40S")
    assert est.throughput.unmeasured_gpu == unmeasured_gpu_note("L40S")
    assert f"median {u['median'] * 100:.0f}%" in est.throughput.unmeasured_gpu
    assert est.throughput.unmeasured_gpu in est.notes


def test_a_measured_kind_says_nothing():
    for gpu in ("H200", "H100-SXM", "A100-SXM-80GB", "RTX-3090"):
        assert _est(gpu).throughput.unmeasured_gpu == ""
