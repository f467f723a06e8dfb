"""The packaged data files are what the benchmarks' fits write from the committed measurements, byte for
byte: ``python -m benchmarks.calibration.fit`` (calibration.json and the estimator table),
``benchmarks.calibration.trace_catalog`` (traced.json), ``benchmarks.calibration.cross_gpu.fit``
(gpu_perf.json) and ``benchmarks.calibration.fit_compromises`` (compromise_rates.json), each into a
temporary file. A changed row, a changed fit or a hand edit of a packaged file fails here, with the
command that regenerates it. The calibration fit is the slow one (~95 s of CPU: hundreds of
coordinate-descent passes over ~300 rows)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "advisor" / "data"


def _same(written: str, packaged: Path, command: str) -> None:
    assert written == packaged.read_text(), f"{packaged.relative_to(ROOT)} is not what `{command}` writes: run it"


def _module(tmp_path: Path, module: str) -> str:
    out = tmp_path / "out.json"
    subprocess.run([sys.executable, "-m", module, "--out", str(out)], cwd=ROOT, check=True, capture_output=True,
                   timeout=600)
    return out.read_text()


def test_the_calibration_fit_writes_the_packaged_calibration_and_table():
    from benchmarks.calibration.fit import fitted
    from benchmarks.calibration.report import REPORT

    calibration, table = fitted()
    _same(calibration, DATA / "calibration.json", "python -m benchmarks.calibration.fit")
    _same(table, REPORT, "python -m benchmarks.calibration.fit")


def test_the_trace_catalog_writes_the_packaged_traces(tmp_path):
    pytest.importorskip("transformers")
    _same(_module(tmp_path, "benchmarks.calibration.trace_catalog"), DATA / "traced.json",
          "python -m benchmarks.calibration.trace_catalog")


def test_the_cross_gpu_fit_writes_the_packaged_fractions(tmp_path):
    _same(_module(tmp_path, "benchmarks.calibration.cross_gpu.fit"), DATA / "gpu_perf.json",
          "python -m benchmarks.calibration.cross_gpu.fit")


def test_the_compromises_fit_writes_the_packaged_rates(tmp_path, monkeypatch):
    # fit_compromises fits in stages, each reading the rates the previous stage wrote back (compromise_rates()):
    # it writes a copy of the packaged file here, never the packaged file.
    from advisor import compromise_cost as cc
    import benchmarks.calibration.fit_compromises as fit

    copy = tmp_path / "compromise_rates.json"
    copy.write_text(cc.RATES.read_text())
    monkeypatch.setattr(cc, "RATES", copy)
    monkeypatch.setattr(sys, "argv", ["fit_compromises"])
    fit.main()
    _same(copy.read_text(), DATA / "compromise_rates.json", "python -m benchmarks.calibration.fit_compromises")
    assert json.loads(copy.read_text())["source"].startswith("fit by benchmarks/calibration/fit_compromises.py")
