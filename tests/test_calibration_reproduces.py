"""The packaged data files are what the benchmarks' fits write from the committed measurements:
``python -m benchmarks.calibration.fit`` (calibration.json and the estimator table),
``benchmarks.calibration.trace_catalog`` (traced.json), ``benchmarks.calibration.cross_gpu.fit``
(gpu_perf.json) and ``benchmarks.calibration.fit_compromises`` (compromise_rates.json). A changed row, a
changed fit or a hand edit of a packaged file fails here, with the command that regenerates it.

The calibration fit's descent (~100 s of CPU: tens of thousands of losses over ~130 rows) and the traces of
the whole catalog (~50 s) are checked whole by ``python -m benchmarks.calibration.check``; the suite checks,
byte for byte: every measured row predicted with the packaged calibration (the whole estimator table: each
row, each users' model traced, each constant the estimator reads), the fit's memory stage on the packaged
constants, and the traces of one catalog model per kind (both ResNet blocks, each transformers class)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "advisor" / "data"
# One of each kind the catalog traces: a ResNet of basic blocks and one of bottlenecks, and every
# transformers class (GPT-2, Llama, Mistral, Qwen2, BERT, T5). The rest differ from these in sizes only.
TRACE_SUBSET = {"resnet18", "resnet50", "hf:gpt2", "hf:llama3.2-1b", "hf:mistral-7b", "hf:qwen2.5-7b", "hf:bert-base",
                "hf:t5-base"}


def _same(written: str, packaged: Path, command: str) -> None:
    assert written == packaged.read_text(), f"{packaged.relative_to(ROOT)} is not what `{command}` writes: run it"


def _module(tmp_path: Path, module: str) -> str:
    out = tmp_path / "out.json"
    subprocess.run([sys.executable, "-m", module, "--out", str(out)], cwd=ROOT, check=True, capture_output=True,
                   timeout=600)
    return out.read_text()


@pytest.fixture(scope="module")
def measured():
    """Every measured row (users' models traced once), its header and the H200 it ran on."""
    from advisor.gpus import get_gpu
    from advisor.hardware import HardwareSpec
    from benchmarks.calibration.rows import all_rows

    header, rows = all_rows()
    return header, rows, HardwareSpec(gpu=get_gpu(header.get("device", "H200")))


def test_the_packaged_calibration_predicts_the_packaged_estimator_table(measured):
    from advisor.calibration import PACKAGED, Calibration
    from benchmarks.calibration.report import REPORT, report

    header, rows, hw = measured
    cal = Calibration.model_validate_json(PACKAGED.read_text())
    _same(json.dumps(cal.model_dump(), indent=1) + "\n", PACKAGED, "python -m benchmarks.calibration.fit")
    _same(report(header, rows, cal, hw), REPORT, "python -m benchmarks.calibration.fit")


def test_the_fits_memory_stage_chooses_the_packaged_memory_constants(measured):
    from advisor.calibration import PACKAGED, Calibration
    from benchmarks.calibration.fit import fit_memory

    _, rows, hw = measured
    cal = Calibration.model_validate_json(PACKAGED.read_text())
    fit_rows = [r for r in rows if r["split"] == "fit" and not r.get("throughput_only")]
    again = fit_memory(cal, fit_rows, hw)
    assert again.model_dump() == cal.model_dump(), \
        "advisor/data/calibration.json's memory constants are not what `python -m benchmarks.calibration.fit` chooses: run it"


def test_the_trace_catalog_writes_the_packaged_traces_of_one_model_per_kind():
    pytest.importorskip("transformers")
    from advisor.catalog import TRACED_JSON
    from benchmarks.calibration.trace_catalog import meta, traces

    packaged_text = TRACED_JSON.read_text()
    packaged = json.loads(packaged_text)
    command = "python -m benchmarks.calibration.trace_catalog"
    # the file in the script's form, with an entry for each model the script traces (the entries outside
    # the subset are traced again by `python -m benchmarks.calibration.check`)
    assert packaged_text == json.dumps(packaged, indent=1) + "\n", f"advisor/data/traced.json is not what `{command}` writes: run it"
    from advisor.catalog import CNN_NAMES, catalog_names, hf_equivalent

    every = [*meta(), *CNN_NAMES, *(f"hf:{n}" for n in catalog_names() if hf_equivalent(n) is not None)]
    assert list(packaged) == every, f"advisor/data/traced.json's entries are not what `{command}` writes: run it"
    written = {**meta(), **traces(TRACE_SUBSET)}
    assert set(written) == TRACE_SUBSET | set(meta())
    for key, value in written.items():
        assert json.dumps(value, indent=1) == json.dumps(packaged.get(key), indent=1), \
            f"advisor/data/traced.json's {key} is not what `{command}` writes: run it"


def test_the_cross_gpu_fit_writes_the_packaged_fractions(tmp_path):
    _same(_module(tmp_path, "benchmarks.calibration.cross_gpu.fit"), DATA / "gpu_perf.json",
          "python -m benchmarks.calibration.cross_gpu.fit")
    # and the source harness it fits first (written beside --out)
    _same((tmp_path / "harness.json").read_text(), ROOT / "benchmarks" / "calibration" / "cross_gpu" / "harness.json",
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
