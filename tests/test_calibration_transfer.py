"""A calibration measured on one GPU kind reaches another through its model-specific part (issue 14),
and every estimate names the calibration it used. Calibration data is injected; nothing runs."""

from __future__ import annotations

import json

import pytest

from advisor.calibration import default_calibration, load_calibration
from advisor.catalog import catalog_model
from advisor.config import Precision, TrainConfig
from advisor.estimate import estimate
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.probe_factors import ModelFactor, factor_key, save_model_factor
from launcher import calibrate

GPT2 = catalog_model("gpt2")
CFG = TrainConfig(micro_batch=8, seq_len=1024, precision=Precision.bf16)
H200, A100 = HardwareSpec(gpu=get_gpu("H200")), HardwareSpec(gpu=get_gpu("A100"))


def _probe(home, device: str, throughput: float, memory: float | None = None, when: float = 1_800_000_000.0):
    key = factor_key("model:gpt2", device, CFG)
    save_model_factor(home, ModelFactor(key=key, model="model:gpt2", device=device, variant="bf16",
                                        throughput=throughput, memory=memory, micro_batch=8, when=when))


def _bench(home, gpu: str, family: str, model: str, ratio: float):
    calibrate.update_calibration(home, [calibrate.CalibrationSample(
        key=calibrate.calibration_key(gpu, family, "bf16", "single"), sample_id=f"{model}|bf16|1", model=model,
        variant="bf16", devices=1, measured_samples_per_s=100.0 * ratio, estimated_samples_per_s=100.0, ratio=ratio)])


def _sps(hw, cal=None) -> float:
    return estimate(GPT2, CFG, hw, calibration=cal or default_calibration()).throughput.samples_per_s


def test_a_probe_on_one_gpu_kind_transfers_to_another_and_says_so(tmp_path):
    _probe(tmp_path, "H200", throughput=1.3, memory=1.1)
    cal = load_calibration(tmp_path)
    on_a100 = estimate(GPT2, CFG, A100, calibration=cal)
    assert on_a100.throughput.samples_per_s == pytest.approx(_sps(A100) * 1.3)
    assert on_a100.memory.peak_gib == pytest.approx(estimate(GPT2, CFG, A100).memory.peak_gib * 1.1)
    [used] = on_a100.calibration
    assert (used.source, used.how, used.measured_on, used.applied_to) == ("advise probe", "transferred", "H200", "A100-SXM-80GB")
    assert "transferred to A100-SXM-80GB" in used.summary()
    [direct] = estimate(GPT2, CFG, H200, calibration=cal).calibration
    assert direct.how == "direct" and direct.measured_on == direct.applied_to == "H200"


def test_the_gpu_kind_part_is_divided_out_and_this_kinds_multiplied_in(tmp_path):
    # a world where truth = estimate x model part (1.25 for gpt2) x GPU-kind part (0.8 on H200, 1.1 on A100)
    model_part, part = 1.25, {"H200": 0.8, "A100-SXM-80GB": 1.1}
    for gpu, g in part.items():  # advise bench on other families shows each kind's own part
        _bench(tmp_path, gpu, "cnn", "resnet50", g)
        _bench(tmp_path, gpu, "vit", "vit-b-16", g)
    calibrate.update_calibration(tmp_path, [calibrate.CalibrationSample(  # a DDP factor also carries links: not used
        key=calibrate.calibration_key("H200", "cnn", "bf16", "ddp"), sample_id="resnet50|bf16|8", model="resnet50",
        variant="bf16", devices=8, measured_samples_per_s=30.0, estimated_samples_per_s=100.0, ratio=0.3)])
    _probe(tmp_path, "H200", throughput=model_part * part["H200"])
    cal = load_calibration(tmp_path)
    truth = _sps(A100) * model_part * part["A100-SXM-80GB"]
    got = estimate(GPT2, CFG, A100, calibration=cal)
    assert got.throughput.samples_per_s == pytest.approx(truth)
    naive = _sps(A100) * model_part * part["H200"]  # the raw H200 ratio carried over as it is
    assert abs(got.throughput.samples_per_s / truth - 1) < abs(naive / truth - 1)
    assert abs(got.throughput.samples_per_s / truth - 1) < abs(_sps(A100) / truth - 1)  # better than none
    [used] = got.calibration
    assert used.gpu_factor_removed == pytest.approx(0.8) and used.gpu_factor_applied == pytest.approx(1.1)


def test_a_factor_measured_on_this_kind_wins_over_a_transferred_one(tmp_path):
    _probe(tmp_path, "H200", throughput=1.3, when=1_900_000_000.0)
    _probe(tmp_path, "A100-SXM-80GB", throughput=0.9, when=1_800_000_000.0)
    got = estimate(GPT2, CFG, A100, calibration=load_calibration(tmp_path))
    assert got.throughput.samples_per_s == pytest.approx(_sps(A100) * 0.9)
    assert [c.how for c in got.calibration] == ["direct"]


def test_cpu_probes_never_reach_a_gpu(tmp_path):
    _probe(tmp_path, "cpu", throughput=3.0)
    got = estimate(GPT2, CFG, A100, calibration=load_calibration(tmp_path))
    assert got.calibration == [] and got.throughput.samples_per_s == pytest.approx(_sps(A100))


def test_advise_bench_samples_transfer_per_model_and_stay_family_factors_at_home(tmp_path):
    _bench(tmp_path, "H200", "decoder", "gpt2", 1.2)
    cal = load_calibration(tmp_path)
    home = estimate(GPT2, CFG, H200, calibration=cal)  # on the kind it was benched on: the family factor
    assert home.throughput.samples_per_s == pytest.approx(_sps(H200) * 1.2)
    assert [(c.source, c.scope, c.how) for c in home.calibration] == [("advise bench", "family", "direct")]
    away = estimate(GPT2, CFG, A100, calibration=cal)  # elsewhere: gpt2's own sample, transferred
    assert away.throughput.samples_per_s == pytest.approx(_sps(A100) * 1.2)
    assert [(c.source, c.scope, c.how) for c in away.calibration] == [("advise bench", "model", "transferred")]
    other = catalog_model("gpt2-medium")  # another model of the family has no sample to transfer
    assert estimate(other, CFG, A100, calibration=cal).calibration == []


def test_estimates_without_measurements_say_packaged_constants(tmp_path):
    assert estimate(GPT2, CFG, A100, calibration=load_calibration(tmp_path)).calibration == []


def test_advise_estimate_json_and_text_name_the_calibration(tmp_path, capsys):
    from cli.main import main

    _probe(tmp_path, "H200", throughput=1.3)
    assert main(["estimate", "--model", "gpt2", "--implementation", "cardwise", "--gpu", "A100", "--micro-batch", "8",
                 "--seq-len", "1024", "--precision", "bf16", "--home", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["calibration"][0]["how"] == "transferred" and out["calibration"][0]["measured_on"] == "H200"
    assert main(["estimate", "--model", "gpt2", "--implementation", "cardwise", "--gpu", "A100", "--micro-batch", "8",
                 "--seq-len", "1024", "--precision", "bf16", "--home", str(tmp_path)]) == 0
    assert "measured on H200, transferred to" in " ".join(capsys.readouterr().out.split())
