"""Issue 12 leftovers: the optimizer steps of the memory compromises as their code runs them
(bitsandbytes' synchronised per-tensor 8-bit step, KahanAdamW's unfused kernels, the per-parameter
optimizer calls of the step in backward). Estimator outputs only, no timing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor import compromise_cost as cc
from advisor.calibration import default_calibration
from advisor.catalog import catalog_model
from advisor.config import Optimizer, Precision, TrainConfig
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.memory import trainable_params
from advisor.plan import Plan
from advisor.sources import resolve_model
from advisor.throughput import _OPT_BYTES, estimate_throughput

ROW = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "h200-compromises" / "adamw-8bit.json"
N8B = 8_030_261_248


def _thr(gpu="H200", **cfg):
    cfg.setdefault("micro_batch", 1)
    cfg.setdefault("seq_len", 2048)
    cfg.setdefault("grad_ckpt", True)
    return estimate_throughput(catalog_model("llama3-8b"), TrainConfig(**cfg), HardwareSpec(gpu=get_gpu(gpu)),
                               default_calibration())


def _streaming_pass_s(optimizer: Optimizer, gpu="H200", scale=1.0) -> float:
    """What the old model charged: one bandwidth-bound pass over the optimizer's bytes."""
    g, cal = get_gpu(gpu), default_calibration()
    return N8B * _OPT_BYTES[optimizer] * scale / (g.mem_bw * cal.rate_efficiency["bytes"] * g.fraction_vs_h200("bandwidth"))


def test_llama3_8b_has_291_parameter_tensors():
    assert cc.param_tensors(catalog_model("llama3-8b")) == 291


def test_the_8bit_step_is_synchronised_per_tensor_and_far_slower_than_a_streaming_pass():
    t = _thr(optimizer=Optimizer.adamw_8bit)
    cal, gpu = default_calibration(), get_gpu("H200")
    host = 291 * cc.BNB_HOST_OPS_PER_TENSOR * cal.launch_us * 1e-6
    kernel = cc.adamw_8bit_kernel_s(N8B, gpu)
    assert t.optimizer_s == pytest.approx(host + kernel)  # serial: a torch.cuda.synchronize() per tensor
    assert t.optimizer_s > 4 * _streaming_pass_s(Optimizer.adamw_8bit)
    # and slower than fused fp32 AdamW, which streams more bytes in one pass
    assert t.optimizer_s > 2 * _thr(optimizer=Optimizer.adamw).optimizer_s
    assert any("8-bit AdamW (bitsandbytes)" in n for n in t.notes)


def test_the_8bit_kernel_rate_comes_from_the_fit_file_and_moves_the_estimate():
    rates = cc.compromise_rates()
    assert 0 < rates["bnb_8bit_bandwidth_fraction"] < 0.5 and "ONE measured configuration" in rates["source"]
    g = get_gpu("H200")
    assert cc.adamw_8bit_kernel_s(N8B, g, fraction=rates["bnb_8bit_bandwidth_fraction"] / 2) == \
        pytest.approx(2 * cc.adamw_8bit_kernel_s(N8B, g))


def test_the_fit_reproduces_the_measured_8bit_row():
    """benchmarks/fit_compromises.py's fraction puts the estimate on the measured samples/s of the row
    it was fit on (re-run the script after refitting the calibration)."""
    row = json.loads(ROW.read_text())
    plan = Plan.model_validate(row["plan"])
    t = estimate_throughput(resolve_model(plan.model), plan.config, HardwareSpec(gpu=get_gpu("h200")), default_calibration())
    assert t.samples_per_s == pytest.approx(row["measured"]["samples_per_s"], rel=0.02)
    import benchmarks.fit_compromises as fit  # the script's own result matches the packaged file
    assert fit.fit(row)["bnb_8bit_bandwidth_fraction"] == pytest.approx(cc.compromise_rates()["bnb_8bit_bandwidth_fraction"], rel=1e-3)


def test_kahan_adamw_runs_13_unfused_kernels_per_tensor():
    t = _thr(precision=Precision.pure_bf16, micro_batch=2)
    cal = default_calibration()
    launches = 291 * cc.KAHAN_KERNELS_PER_TENSOR * cal.launch_us * 1e-6
    gpu_bytes = _streaming_pass_s(Optimizer.adamw, scale=cc.KAHAN_BYTES_PER_PARAM / _OPT_BYTES[Optimizer.adamw])
    assert t.optimizer_s >= launches and t.optimizer_s >= gpu_bytes
    # the old model: half of fused AdamW's bytes plus 4 bytes of compensation, one pass
    assert t.optimizer_s > 3 * _streaming_pass_s(Optimizer.adamw, scale=(14 + 4) / 28)
    assert any("KahanAdamW" in n for n in t.notes)


def test_the_step_in_backward_pays_one_optimizer_call_per_tensor():
    cal = default_calibration()
    plain, oib = _thr(), _thr(optimizer_in_backward=True)
    per_call = (cc.IN_BACKWARD_CALL_OPS + cc.FUSED_KERNELS_PER_CALL) * cal.launch_us * 1e-6
    assert oib.step_s - plain.step_s == pytest.approx(291 * per_call)
    # with 8-bit AdamW inside the hooks the per-tensor launches are bitsandbytes' own, counted once
    b, boib = _thr(optimizer=Optimizer.adamw_8bit), _thr(optimizer=Optimizer.adamw_8bit, optimizer_in_backward=True)
    assert boib.step_s - b.step_s == pytest.approx(291 * cc.IN_BACKWARD_CALL_OPS * cal.launch_us * 1e-6)


def test_cpu_offload_replaces_the_gpu_step_with_the_cpu_one():
    t = _thr(cpu_offload=True)
    assert t.optimizer_s == 0.0
    m = catalog_model("llama3-8b")
    cpu = trainable_params(m, TrainConfig()) / 1e9 * cc.CPU_ADAM_S_PER_BPARAM
    assert t.step_s > t.compute_s + cpu
