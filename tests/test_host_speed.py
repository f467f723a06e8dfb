"""This host's dispatch speed: measured by the reference step, stored by the probe, applied to host terms."""

from __future__ import annotations

import json

import pytest

from advisor.calibration import default_calibration, load_calibration
from advisor.catalog import catalog_model
from advisor.config import TrainConfig
from advisor.estimate import estimate
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.host_speed import FILE_NAME, HostSpeed, read_host_speed, save_host_speed, with_host_speed

H200 = HardwareSpec(gpu=get_gpu("H200"))
SMALL = TrainConfig(micro_batch=1, image_size=224)  # resnet50 at batch 1: host-bound on any GPU


def _cal(ref_us=1000.0):
    return default_calibration().model_copy(update={"host_dispatch_ref_us": ref_us})


def test_reference_step_is_timed_and_counted():
    pytest.importorskip("torch")
    from launcher import host_dispatch

    got = host_dispatch.measure("cpu", windows=3, steps_per_window=2, warmup=1)
    assert got["us_per_step"] > 0 and len(got["windows"]) == 3
    assert got["ops_per_step"] > 50  # 8 x (linear, layer norm, GELU) forward and backward
    assert got["us_per_op"] == pytest.approx(got["us_per_step"] / got["ops_per_step"], rel=1e-2)


def test_a_slower_host_slows_host_bound_estimates_only():
    slow = with_host_speed(_cal(), HostSpeed(us_per_step=2000.0, device="H200"))
    assert slow.host_factor == pytest.approx(2.0)
    base = estimate(catalog_model("resnet50"), SMALL, H200, calibration=_cal()).throughput
    slowed = estimate(catalog_model("resnet50"), SMALL, H200, calibration=slow).throughput
    assert base.host_bound and slowed.host_s == pytest.approx(2 * base.host_s)
    assert slowed.samples_per_s < 0.7 * base.samples_per_s
    big = TrainConfig(micro_batch=8, seq_len=2048, grad_ckpt=True)
    gpu_bound = [estimate(catalog_model("llama3-8b"), big, H200, calibration=c).throughput.samples_per_s
                 for c in (_cal(), slow)]
    assert gpu_bound[1] == pytest.approx(gpu_bound[0], rel=0.05)


def test_without_a_reference_or_a_measurement_nothing_changes():
    speed = HostSpeed(us_per_step=2000.0, device="H200")
    assert with_host_speed(_cal(ref_us=None), speed).host_factor == 1.0
    assert with_host_speed(_cal(), None).host_factor == 1.0


def test_the_report_says_whose_host_speed_it_used():
    assumed = estimate(catalog_model("resnet50"), SMALL, H200, calibration=_cal()).throughput.notes
    assert any("host-bound" in n and "advise probe" in n for n in assumed)
    measured = with_host_speed(_cal(), HostSpeed(us_per_step=1500.0, device="H200"))
    notes = estimate(catalog_model("resnet50"), SMALL, H200, calibration=measured).throughput.notes
    assert any("measured by advise probe on this machine" in n and "x1.50" in n for n in notes)


def test_cpu_estimates_keep_their_own_host(tmp_path):
    from launcher.bench import cpu_device_spec

    cpu = HardwareSpec(gpu=cpu_device_spec(4, 16.0))
    slow = with_host_speed(_cal(), HostSpeed(us_per_step=3000.0, device="H200"))
    cfg = TrainConfig(micro_batch=2, seq_len=64)
    a = estimate(catalog_model("mini-transformer"), cfg, cpu, calibration=_cal()).throughput
    b = estimate(catalog_model("mini-transformer"), cfg, cpu, calibration=slow).throughput
    assert b.samples_per_s == pytest.approx(a.samples_per_s)


def test_a_plan_for_another_gpu_kind_keeps_the_reference_host():
    """The stored host is the machine with the probed GPU kind; planning an A100 run is planning for another machine."""
    slow = with_host_speed(_cal(), HostSpeed(us_per_step=2000.0, device="H200"))
    a100 = HardwareSpec(gpu=get_gpu("A100-80GB"))
    here = estimate(catalog_model("resnet50"), SMALL, a100, calibration=slow).throughput
    assert here.host_s == pytest.approx(estimate(catalog_model("resnet50"), SMALL, a100, calibration=_cal()).throughput.host_s)
    assert here.host_speed.startswith("assumed")


def test_home_file_round_trip_and_bad_files_are_ignored(tmp_path):
    assert read_host_speed(tmp_path) is None
    save_host_speed(tmp_path, HostSpeed(us_per_step=1234.5, ops_per_step=150, device="H200"))
    assert (tmp_path / FILE_NAME).stat().st_mode & 0o077 == 0
    assert read_host_speed(tmp_path).us_per_step == 1234.5
    cal = load_calibration(tmp_path)
    if default_calibration().host_dispatch_ref_us:
        assert cal.host_factor == pytest.approx(1234.5 / default_calibration().host_dispatch_ref_us)
    (tmp_path / FILE_NAME).write_text(json.dumps({"us_per_step": -1, "device": "H200"}))
    assert read_host_speed(tmp_path) is None and load_calibration(tmp_path).host_factor == 1.0
    (tmp_path / FILE_NAME).write_text("{not json")
    assert load_calibration(tmp_path).host_factor == 1.0


def test_packaged_calibration_names_its_reference_host():
    cal = default_calibration()
    assert cal.host_factor == 1.0 and cal.host_dispatch_ref_us and cal.host_dispatch_ref_us > 0


def test_probe_stores_the_host_and_estimates_for_it(tmp_path):
    """launcher.probe.compare on a GPU child's result: the host speed is stored and used at once."""
    from advisor.probe_factors import factor_key, model_identity
    from launcher.probe import ProbeAttempt, ProbeTarget, compare

    class NoSampler:
        def mean(self, *_):
            return None

    spec = catalog_model("resnet50")
    ref = default_calibration().host_dispatch_ref_us
    result = {"samples_per_s": 30.0, "step_s": 1 / 30, "peak_gib": 0.5, "steps": 10, "warmup_steps": 3,
              "implementation": "cardwise resnet50", "device_name": "NVIDIA H200",
              "host_dispatch": {"us_per_step": 2 * ref, "ops_per_step": 150}}
    base = dict(model="resnet50", identity=model_identity(spec), device="H200", probe_dir=str(tmp_path))
    out = compare(result, NoSampler(), spec, SMALL, ProbeTarget(hardware=H200, gpu_index=0),
                  [ProbeAttempt(micro_batch=1, status="ok")], base, home=tmp_path, save=True,
                  key=factor_key(base["identity"], "H200", SMALL))
    assert out.host_factor == pytest.approx(2.0) and out.measured.host_dispatch_us == 2 * ref
    assert read_host_speed(tmp_path).us_per_step == 2 * ref
    plain = estimate(spec, SMALL, H200, calibration=default_calibration()).throughput
    assert out.estimate.throughput.host_s == pytest.approx(2 * plain.host_s)
    assert load_calibration(tmp_path).host_factor == pytest.approx(2.0)
    from tui.launching import probe_summary  # the wizard's "probe first" says it too

    assert any("host dispatch x2.00" in line for line in probe_summary(out)[1])
    # A CPU probe's dispatch is not a GPU host's: nothing stored.
    cpu_home = tmp_path / "cpu"
    compare(result, NoSampler(), spec, SMALL, ProbeTarget(hardware=H200, gpu_index=None),
            [ProbeAttempt(micro_batch=1, status="ok")], base, home=cpu_home, save=True,
            key=factor_key(base["identity"], "H200", SMALL))
    assert read_host_speed(cpu_home) is None
