"""``advise bench`` and ``advise calibrate``: a real CPU bench (1 and 2 gloo processes), the
calibration it writes changing later estimates, its report and CSV, and the mistakes that exit 2.

One bench (module fixture, ~25 s on 2 cores) feeds most tests; the rest is arithmetic on rows.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor import hardware
from advisor.calibration import default_calibration, load_calibration
from advisor.catalog import catalog_model
from advisor.config import Precision, Strategy, TrainConfig
from advisor.estimate import estimate
from advisor.hardware import DetectedGpu, Machine, resolve_hardware
from launcher import calibrate
from launcher.bench.analyse import finish
from launcher.bench.plan import hardware_for, plan_jobs, visible_gpus
from launcher.bench.report import markdown, terminal_plot
from launcher.bench.request import BenchRequest, Job, Variant, parse_variants
from launcher.bench.result import BenchResult, row_for
from cli.main import main

ROOT = Path(__file__).resolve().parents[1]
# Small and few steps: the subject here is the rows' fields and what they reach (store, report, calibration),
# not the numbers in them.
SEQ = 16
BENCH_ARGS = ["bench", "--cpu", "--processes", "1,2", "--model", "mini-transformer", "--seq-len", str(SEQ),
              "--micro-batch", "2", "--steps", "3", "--warmup", "1", "--comm-steps", "1",
              "--modes", "single,dp,ddp,fsdp", "--dataloader-workers", "1", "--json"]


def _no_gpu() -> Machine:
    return Machine(nvml_error="NVML unavailable: test", cpu_cores=2, ram_gib=8.0)


def _h200s(n: int) -> Machine:
    gpus = [DetectedGpu(index=i, name="NVIDIA H200", memory_total_gib=140.4, memory_free_gib=140.0,
                        compute_capability=(9, 0), uuid=f"GPU-{i}", spec="H200") for i in range(n)]
    return Machine(gpus=gpus, cpu_cores=16, ram_gib=128.0)


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """One CPU bench through the real CLI, in a subprocess as a user runs it."""
    home = tmp_path_factory.mktemp("bench-home")
    out = tmp_path_factory.mktemp("bench-out")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CARDWISE_HOME": str(home)}
    cmd = [sys.executable, "-m", "cli.main", *BENCH_ARGS, "--home", str(home),
           "--csv", str(out / "rows.csv"), "--report", str(out / "report.md"), "--plot", str(out / "plot.png")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)  # a hang guard: a loaded 2-core machine takes minutes
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)
    return {"home": home, "out": out, "rows": rows, "stderr": proc.stderr}


def _row(rows, mode, n):
    return next(r for r in rows if r["mode"] == mode and r["devices"] == n)


# ==================================================================== the CPU bench
def test_cpu_bench_rows_have_every_field(bench):
    rows = bench["rows"]
    single, ddp = _row(rows, "single", 1), _row(rows, "ddp", 2)
    for r in (single, ddp):
        assert r["status"] == "ok", r["reason"]
        for key in ("samples_per_s", "tokens_per_s", "step_s", "speedup", "efficiency", "cpu_util_pct",
                    "est_samples_per_s", "est_step_s", "est_error_pct", "calibrated_samples_per_s",
                    "calibrated_error_pct", "loader_samples_per_s", "loader_train_samples_per_s", "run_id", "wall_s"):
            assert r[key] is not None, (r["mode"], key)
        assert r["samples_per_s"] > 0 and r["tokens_per_s"] == pytest.approx(r["samples_per_s"] * SEQ)
        assert r["gpu_util_pct"] is None and r["peak_gib"] is None  # CPU: no NVML, no CUDA allocator
        assert 0 < r["cpu_util_pct"] <= 100
        assert r["dataloader_workers"] == 1
    assert single["processes"] == 1 and ddp["processes"] == 2
    assert single["speedup"] == pytest.approx(1.0) and single["efficiency"] == pytest.approx(1.0)
    assert ddp["speedup"] == pytest.approx(ddp["samples_per_s"] / single["samples_per_s"])
    assert ddp["efficiency"] == pytest.approx(ddp["speedup"] / 2)
    # DDP's exposed communication: a synchronised forward+backward against one under no_sync()
    assert ddp["sync_step_s"] > 0 and ddp["nosync_step_s"] > 0
    assert ddp["exposed_comm_s"] == pytest.approx(max(0.0, ddp["sync_step_s"] - ddp["nosync_step_s"]))
    assert ddp["est_exposed_comm_s"] is not None and single["exposed_comm_s"] is None
    assert single["est_error_pct"] == pytest.approx((single["est_samples_per_s"] / single["samples_per_s"] - 1) * 100)
    assert single["calibration_key"] == "cpu|encoder|fp32|single" and ddp["calibration_key"] == "cpu|encoder|fp32|ddp"


def test_cpu_skips_say_why(bench):
    rows = bench["rows"]
    dp, fsdp = _row(rows, "dp", 2), _row(rows, "fsdp", 2)
    assert dp["status"] == "skipped" and "DataParallel" in dp["reason"] and "CUDA" in dp["reason"]
    assert fsdp["status"] == "skipped" and "FSDP" in fsdp["reason"]
    assert not [r for r in rows if r["devices"] == 1 and r["mode"] != "single"]  # x1 of dp/ddp/fsdp is the single row


def test_plot_is_written_with_matplotlib_and_noted_without(bench):
    # matplotlib is an optional extra ('cardwise[plot]'); the bench ran in this interpreter's environment.
    if importlib.util.find_spec("matplotlib") is not None:
        assert (bench["out"] / "plot.png").stat().st_size > 0
        assert "--plot needs matplotlib" not in bench["stderr"]
    else:
        assert not (bench["out"] / "plot.png").exists()
        assert "--plot needs matplotlib, which is not installed" in bench["stderr"]


def test_runs_are_recorded_in_the_store(bench):
    from launcher.store import RunStore

    store = RunStore.open(bench["home"])
    ids = {r["run_id"] for r in bench["rows"] if r["status"] == "ok"}
    records = {rec.id: rec for rec in store.list()}
    assert ids <= set(records)
    assert all(records[i].status == "succeeded" and "bench" in records[i].label for i in ids)


def test_report_and_csv_written(bench):
    out = bench["out"]
    with open(out / "rows.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(bench["rows"])
    assert {"mode", "processes", "samples_per_s", "speedup", "efficiency", "step_s", "peak_gib",
            "exposed_comm_s", "est_error_pct"} <= set(table[0])
    ddp = next(r for r in table if r["mode"] == "ddp")
    assert float(ddp["samples_per_s"]) == pytest.approx(_row(bench["rows"], "ddp", 2)["samples_per_s"])
    md = (out / "report.md").read_text()
    assert md.startswith("# advise bench: mini-transformer on cpu")
    assert "## mini-transformer" in md and "## Estimate error" in md and "## Calibration factors" in md
    assert "skipped: fp32 dp x2" in md and "DataLoader workers" in md
    assert "`advise bench --model mini-transformer --cpu --processes 1,2" in md
    assert "cpu\\|encoder\\|fp32\\|ddp" in md  # pipes escaped inside the table


# ==================================================================== calibration
def test_calibration_changes_a_later_estimate(bench):
    home = bench["home"]
    saved = json.loads((home / "calibration.json").read_text())["measured"]
    factor = saved["cpu|encoder|fp32|single"]
    row = _row(bench["rows"], "single", 1)
    assert factor == pytest.approx(row["samples_per_s"] / row["est_samples_per_s"], rel=1e-4)

    spec = catalog_model("mini-transformer")
    config = TrainConfig(micro_batch=4, seq_len=32, precision=Precision.fp32, strategy=Strategy.single)
    hw = hardware_for(BenchRequest(models=["mini-transformer"], cpu=True), Machine(cpu_cores=os.cpu_count() or 1), 1)
    before = estimate(spec, config, hw, calibration=default_calibration())
    after = estimate(spec, config, hw, calibration=load_calibration(home))
    assert after.throughput.samples_per_s == pytest.approx(before.throughput.samples_per_s * factor, rel=1e-6)
    assert after.throughput.calibrated and not before.throughput.calibrated
    assert any("calibrated on this machine" in n for n in after.notes)


def test_gpu_factor_reaches_advise_estimate(tmp_path):
    """A factor saved for H200 changes the H200 estimate exactly as `advise estimate --gpu h200` computes it."""
    spec = catalog_model("gpt2")
    config = TrainConfig(micro_batch=16, seq_len=1024, precision=Precision.bf16)
    hw = resolve_hardware(_no_gpu(), gpu="h200")
    raw = estimate(spec, config, hw, calibration=default_calibration()).throughput.samples_per_s
    sample = calibrate.CalibrationSample(key=calibrate.calibration_key("H200", "decoder", "bf16", "single"),
                                         sample_id="gpt2|bf16|1", model="gpt2", variant="bf16", devices=1,
                                         measured_samples_per_s=raw * 0.8, estimated_samples_per_s=raw, ratio=0.8)
    calibrate.update_calibration(tmp_path, [sample])
    after = estimate(spec, config, hw, calibration=load_calibration(tmp_path))
    assert after.throughput.samples_per_s == pytest.approx(raw * 0.8)
    assert "calibrated on this machine (advise bench)" in after.throughput.notes

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "cli.main", "estimate", "--model", "gpt2", "--implementation", "cardwise", "--gpu", "h200",
                           "--micro-batch", "16", "--seq-len", "1024", "--precision", "bf16", "--home", str(tmp_path),
                           "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["throughput"]["samples_per_s"] == pytest.approx(raw * 0.8, rel=1e-3)


def test_calibrate_show_and_reset(tmp_path, capsys):
    sample = calibrate.CalibrationSample(key="cpu|cnn|fp32|single", sample_id="resnet18|fp32|1", model="resnet18",
                                         variant="fp32", devices=1, measured_samples_per_s=3.0,
                                         estimated_samples_per_s=2.0, ratio=1.5)
    calibrate.update_calibration(tmp_path, [sample])
    assert main(["calibrate", "--home", str(tmp_path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["measured"] == {"cpu|cnn|fp32|single": 1.5} and shown["factors"][0]["models"] == ["resnet18 fp32 x1"]
    assert main(["calibrate", "--home", str(tmp_path)]) == 0
    assert "1.500" in capsys.readouterr().out
    assert main(["calibrate", "--home", str(tmp_path), "--reset"]) == 0
    assert "removed 1 calibration factor" in capsys.readouterr().out
    assert "cpu|cnn|fp32|single" not in load_calibration(tmp_path).measured
    assert main(["calibrate", "--home", str(tmp_path)]) == 0
    assert "no calibration measured" in capsys.readouterr().out


def test_factor_is_geometric_mean_and_rebench_replaces():
    def s(model, ratio):
        return calibrate.CalibrationSample(key="H200|decoder|bf16|single", sample_id=f"{model}|bf16|1", model=model,
                                           variant="bf16", devices=1, measured_samples_per_s=ratio,
                                           estimated_samples_per_s=1.0, ratio=ratio)

    cal = calibrate.merge(calibrate.CalibrationFile(), [s("gpt2", 2.0), s("llama3.2-1b", 0.5)])
    assert cal.measured["H200|decoder|bf16|single"] == pytest.approx(1.0)
    cal = calibrate.merge(cal, [s("gpt2", 0.5)])  # benching gpt2 again replaces its sample
    assert cal.measured["H200|decoder|bf16|single"] == pytest.approx(0.5)
    assert len(cal.samples["H200|decoder|bf16|single"]) == 2


# ==================================================================== mistakes exit 2 with one message
@pytest.mark.parametrize("argv, words", [
    (["bench", "--model", "mini-transformer", "--cpu", "--modes", "single,tp"], "unknown mode 'tp'"),
    (["bench", "--model", "mini-transformer", "--gpus", "1,2"], "--gpus 1,2 given but no GPU is visible"),
    (["bench", "--model", "mini-transformer"], "no GPU is visible"),
    (["bench", "--model", "mini-transfomer", "--cpu"], "unknown model 'mini-transfomer'"),
    (["bench", "--cpu"], "no model given"),
    (["bench", "--model", "gpt2", "--processes", "2"], "--processes is for --cpu runs"),
    (["bench", "--model", "gpt2", "--cpu", "--gpus", "2"], "--gpus and --cpu exclude each other"),
    (["bench", "--model", "gpt2", "--cpu", "--precision", "bf17"], "unknown precision 'bf17'"),
    (["bench", "--model", "gpt2", "--cpu", "--precision", "bf16+turbo"], "unknown option '+turbo'"),
    (["bench", "--model", "gpt2", "--cpu", "--processes", "0,2"], "counts must be at least 1"),
])
def test_bad_inputs_exit_2(monkeypatch, capsys, argv, words):
    monkeypatch.setattr(hardware, "detect_machine", _no_gpu)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("advise: error: ") and words in err and "Traceback" not in err
    assert err.count("advise: error:") == 1


# ==================================================================== planning and arithmetic (no launches)
def test_variants_parse():
    vs = parse_variants("fp32,bf16,bf16+compile,bf16+channels-last", default="bf16")
    assert [v.label for v in vs] == ["fp32", "bf16", "bf16+compile", "bf16+channels-last"]
    assert [v.label for v in parse_variants(None, default="bf16", compile=True)] == ["bf16+compile"]
    assert Variant.parse("pure-bf16+cl+compile").label == "pure-bf16+compile+channels-last"


def test_gpu_plan_skips_what_cannot_run():
    req = BenchRequest(models=["resnet50", "gpt2"], counts=[1, 2, 4], modes=["single", "dp", "ddp", "fsdp"],
                       variants=parse_variants("bf16,bf16+compile,bf16+channels-last", default="bf16"))
    jobs, notes = plan_jobs(req, _h200s(2))
    skip = {(j.model, j.variant.label, j.mode, j.devices): j.skip for j in jobs}
    assert skip[("resnet50", "bf16", "single", 1)] is None and skip[("resnet50", "bf16", "ddp", 2)] is None
    assert skip[("resnet50", "bf16", "dp", 2)] is None and skip[("resnet50", "bf16", "fsdp", 2)] is None
    assert skip[("resnet50", "bf16", "ddp", 4)] == "4 GPUs asked, 2 visible"
    assert "DataParallel" in skip[("resnet50", "bf16+compile", "dp", 2)]
    assert "CNNs" in skip[("gpt2", "bf16+channels-last", "single", 1)]
    assert skip[("resnet50", "bf16+channels-last", "single", 1)] is None
    gpt2 = next(j for j in jobs if j.model == "gpt2")
    assert gpt2.seq_len == 1024 and gpt2.micro_batch == 16  # ~16k tokens, fits an H200 by the estimate
    assert any("micro-batch 16 per GPU" in n for n in notes) and any("sequence length 1024" in n for n in notes)


def test_visible_gpus_respects_cuda_visible_devices(monkeypatch):
    m = _h200s(4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,GPU-3")
    assert visible_gpus(m) == [2, 3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus(m) == []
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_gpus(m) == [0, 1, 2, 3]


def test_speedup_efficiency_and_errors_arithmetic(tmp_path):
    req = BenchRequest(models=["gpt2"], counts=[1, 2], modes=["single", "dp", "ddp"],
                       variants=parse_variants("fp32,bf16", default="bf16"), micro_batch=8, seq_len=256,
                       calibrate=False)
    machine = _h200s(2)
    jobs = [Job(model="gpt2", family="decoder", variant=v, mode=m, devices=n, micro_batch=8, seq_len=256)
            for v in req.variants for m, n in (("single", 1), ("dp", 2), ("ddp", 2))]
    sps = {("fp32", "single"): 100.0, ("fp32", "dp"): 120.0, ("fp32", "ddp"): 190.0,
           ("bf16", "single"): 300.0, ("bf16", "dp"): 330.0, ("bf16", "ddp"): 570.0}
    rows = [row_for(j, samples_per_s=sps[(j.variant.label, j.mode)], step_s=1.0) for j in jobs]
    factors, path = finish(rows, jobs, req, machine, tmp_path, [])
    by = {(r.variant, r.mode): r for r in rows}
    assert by[("bf16", "ddp")].speedup == pytest.approx(1.9) and by[("bf16", "ddp")].efficiency == pytest.approx(0.95)
    assert by[("fp32", "dp")].efficiency == pytest.approx(0.6)
    assert by[("bf16", "single")].variant_speedup == pytest.approx(3.0)
    r = by[("bf16", "single")]
    assert r.est_error_pct == pytest.approx((r.est_samples_per_s - 300.0) / 3.0)
    assert r.calibration_key == "H200|decoder|bf16|single" and r.calibrated_error_pct == pytest.approx(0.0, abs=1e-3)
    assert path is None and not (tmp_path / "calibration.json").exists()  # calibrate=False: nothing saved
    assert set(factors) == {r.calibration_key for r in rows}
    assert r.est_peak_gib is not None and by[("bf16", "ddp")].est_efficiency < 1.0

    result = BenchResult(machine="2x H200", device="H200", cpu=False, started=0.0, request=req, rows=rows)
    plot = terminal_plot(result)
    assert "gpt2: samples/s" in plot and "█" in plot and "eff 95%" in plot and "3.00x vs fp32" in plot
    md = markdown(result)
    assert "| bf16 | ddp | 2 | 570.0 |" in md and "| throughput, after calibration |" in md


@pytest.mark.gpu
@pytest.mark.skipif(not any(visible_gpus(hardware.detect_machine()) or []), reason="needs a CUDA GPU")
def test_gpu_bench_smoke(tmp_path):
    n = len(visible_gpus(hardware.detect_machine()))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "cli.main", "bench", "--model", "mini-transformer",
                           "--gpus", "1,2" if n > 1 else "1", "--modes", "single,dp,ddp,fsdp", "--seq-len", "64",
                           "--micro-batch", "8", "--steps", "4", "--warmup", "2", "--home", str(tmp_path), "--json"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout)
    single = _row(rows, "single", 1)
    assert single["status"] == "ok" and single["peak_gib"] > 0 and single["gpu_util_pct"] is not None
    assert single["est_peak_gib"] is not None and single["peak_error_pct"] is not None
