"""Issue 12 leftovers: the optimizer steps of the memory compromises as their code runs them
(bitsandbytes' synchronised per-tensor 8-bit step, KahanAdamW's unfused kernels, the per-parameter
optimizer calls of the step in backward, CPU offload's host step, peft's adapter traffic). Estimator
outputs only, no timing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor import compromise_cost as cc
from advisor.setup import optimizers as opt
from advisor.setup import offload as off
from advisor.setup import precision as prec
from advisor.throughput import offload_threads
from advisor.calibration import default_calibration
from advisor.catalog import catalog_model
from advisor.config import Optimizer, Precision, TrainConfig
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.memory import trainable_params
from advisor.plan import Plan
from advisor.sources import resolve_model
from advisor.setup.optimizers import STREAM_BYTES as _OPT_BYTES
from advisor.throughput import estimate_throughput

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "calibration" / "results" / "h200-compromises"
ROW = RESULTS / "adamw-8bit.json"
CPU_ROW = RESULTS / "cpu-offload.json"
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
    host = 291 * opt.BNB_HOST_OPS_PER_TENSOR * cal.launch_us * 1e-6
    kernel = opt.adamw_8bit_kernel_s(N8B, gpu)
    assert t.optimizer_s == pytest.approx(host + kernel)  # serial: a torch.cuda.synchronize() per tensor
    assert t.optimizer_s > 4 * _streaming_pass_s(Optimizer.adamw_8bit)
    # and slower than fused fp32 AdamW, which streams more bytes in one pass
    assert t.optimizer_s > 2 * _thr(optimizer=Optimizer.adamw).optimizer_s
    assert any("8-bit AdamW (bitsandbytes)" in n for n in t.notes)


def test_the_8bit_kernel_rate_comes_from_the_fit_file_and_moves_the_estimate():
    rates = cc.compromise_rates()
    assert 0 < rates["bnb_8bit_bandwidth_fraction"] < 0.5 and "ONE measured configuration" in rates["source"]
    g = get_gpu("H200")
    assert opt.adamw_8bit_kernel_s(N8B, g, fraction=rates["bnb_8bit_bandwidth_fraction"] / 2) == \
        pytest.approx(2 * opt.adamw_8bit_kernel_s(N8B, g))


def test_the_fit_reproduces_the_measured_8bit_row():
    """benchmarks/calibration/fit_compromises.py's fraction puts the estimate on the measured samples/s of the row
    it was fit on (re-run the script after refitting the calibration)."""
    row = json.loads(ROW.read_text())
    plan = Plan.model_validate(row["plan"])
    t = estimate_throughput(resolve_model(plan.model), plan.config, HardwareSpec(gpu=get_gpu("h200")), default_calibration())
    assert t.samples_per_s == pytest.approx(row["measured"]["samples_per_s"], rel=0.02)
    import benchmarks.calibration.fit_compromises as fit  # the script's own result matches the packaged file
    assert fit.fit(row)["bnb_8bit_bandwidth_fraction"] == pytest.approx(cc.compromise_rates()["bnb_8bit_bandwidth_fraction"], rel=1e-3)


def test_kahan_adamw_runs_13_unfused_kernels_per_tensor():
    t = _thr(precision=Precision.pure_bf16, micro_batch=2)
    cal = default_calibration()
    launches = 291 * prec.KAHAN_KERNELS_PER_TENSOR * cal.launch_us * 1e-6
    gpu_bytes = _streaming_pass_s(Optimizer.adamw, scale=prec.KAHAN_BYTES_PER_PARAM / _OPT_BYTES[Optimizer.adamw])
    assert t.optimizer_s >= gpu_bytes
    # nothing synchronises before the step: its launches run while the GPU finishes backward (GPU-bound
    # here), so the step costs its GPU time and little of the host's
    assert t.optimizer_s < gpu_bytes + 0.5 * launches
    # the old model: half of fused AdamW's bytes plus 4 bytes of compensation, one pass
    assert t.optimizer_s > 3 * _streaming_pass_s(Optimizer.adamw, scale=(14 + 4) / 28)
    assert any("KahanAdamW" in n for n in t.notes)


def test_the_step_in_backward_pays_one_optimizer_call_per_tensor():
    cal = default_calibration()
    plain, oib = _thr(), _thr(optimizer_in_backward=True)
    per_call = (opt.IN_BACKWARD_CALL_OPS + opt.FUSED_KERNELS_PER_CALL) * cal.launch_us * 1e-6
    # the hooks' host time joins the host pipeline that runs ahead of the GPU during backward: the step is
    # the two pipelines combined, not the calls added after backward
    want = cc.overlap(oib.gpu_s + plain.optimizer_s, oib.host_s + 291 * per_call, cal.host_combine_p,
                      oib.crossing_s and oib.crossing_s + plain.optimizer_s)
    assert oib.step_s == pytest.approx(want)
    assert plain.step_s < oib.step_s < plain.step_s + 291 * per_call
    # with 8-bit AdamW inside the hooks the per-tensor launches are bitsandbytes' own, counted once
    b, boib = _thr(optimizer=Optimizer.adamw_8bit), _thr(optimizer=Optimizer.adamw_8bit, optimizer_in_backward=True)
    assert boib.step_s - b.step_s == pytest.approx(291 * opt.IN_BACKWARD_CALL_OPS * cal.launch_us * 1e-6)


def test_cpu_offload_replaces_the_gpu_step_with_the_cpu_one():
    t = _thr(cpu_offload=True)
    assert t.optimizer_s == 0.0
    m = catalog_model("llama3-8b")
    threads = offload_threads(HardwareSpec(gpu=get_gpu("H200")), TrainConfig(cpu_offload=True))
    cpu = off.cpu_step_s(trainable_params(m, TrainConfig()), threads)
    assert t.step_s > t.compute_s + cpu
    assert any(f"on {threads} host thread(s)" in n for n in t.notes)


def _offload(model: str, **cfg):
    c = TrainConfig(micro_batch=cfg.pop("micro_batch", 2), seq_len=2048, grad_ckpt=True, cpu_offload=True, **cfg)
    return estimate_throughput(catalog_model(model), c, HardwareSpec(gpu=get_gpu("H200")), default_calibration())


def test_cpu_offload_step_grows_with_parameters_and_the_host_step_dominates_a_3b_model():
    small, large = _offload("llama3.2-3b"), _offload("llama3-8b")
    assert large.step_s > 2 * small.step_s  # the host AdamW is linear in the parameters
    n3 = catalog_model("llama3.2-3b").params
    host = off.cpu_step_s(n3, offload_threads(HardwareSpec(gpu=get_gpu("H200")), TrainConfig(cpu_offload=True)))
    assert host > 0.5 * small.step_s  # the host AdamW over 3.2 B fp32 parameters: the GPU waits
    assert off.cpu_step_s(2 * n3) == pytest.approx(2 * off.cpu_step_s(n3))


def test_host_threads_split_the_cpu_step_down_to_the_hosts_bandwidth():
    n = 1e9
    one = off.cpu_step_s(n, 1, rate=1e-8, host_gbps=None)
    assert off.cpu_step_s(n, 4, rate=1e-8, host_gbps=None) == pytest.approx(one / 4)
    floor = n * off.CPU_ADAMW_BYTES_PER_PARAM / 20e9  # 84 B a parameter at 20 GB/s: 4.2 s
    assert off.cpu_step_s(n, 64, rate=1e-8, host_gbps=20.0) == pytest.approx(floor)
    assert off.cpu_step_s(n, 2, rate=1e-8, host_gbps=20.0) == pytest.approx(one / 2)  # 5 s: threads bind
    # ranks share a node's cores: 8 GPUs of one 64-core node give each rank 8 threads
    hw = HardwareSpec(gpu=get_gpu("H200"), gpus_per_node=8, cpu_cores=64)
    assert offload_threads(hw, TrainConfig(cpu_offload=True, strategy="fsdp")) == 8
    assert offload_threads(hw, TrainConfig(cpu_offload=True)) == 64


def test_cpu_offload_copies_overlap_compute_in_both_directions():
    m, hw = catalog_model("llama3.2-3b"), HardwareSpec(gpu=get_gpu("H200"))
    c = TrainConfig(micro_batch=2, seq_len=2048, grad_ckpt=True, cpu_offload=True)
    link = hw.gpu.pcie_gbps / 2 * 1e9 * cc.PCIE_EFFICIENCY
    one_way = 4 * m.params / link
    # compute far longer than the copies: nothing exposed
    assert off.cpu_offload_step_s(m, c, hw, 100.0, m.params, 1)[0] == pytest.approx(0.0)
    # no compute: forward waits for the copies in, backward for the larger of in and out (separate engines)
    assert off.cpu_offload_step_s(m, c, hw, 0.0, m.params, 1)[0] == pytest.approx(2 * one_way)
    # accumulation: the later micro-batches' gradient copies block (they add into the host gradient)
    acc = c.model_copy(update={"grad_accum": 3})
    assert off.cpu_offload_step_s(m, acc, hw, 0.0, m.params, 1)[0] == pytest.approx(3 * 2 * one_way + 2 * one_way)


def test_the_cpu_step_rate_is_fit_on_the_offload_row_and_reproduces_it():
    rates = cc.compromise_rates()
    assert rates["cpu_step_s_per_param"] > 0 and "ONE measured configuration" in rates["cpu_step_source"]
    row = json.loads(CPU_ROW.read_text())
    plan = Plan.model_validate(row["plan"])
    # The row ran on one host thread (before launcher.command shared the cores out): a one-core host.
    hw = HardwareSpec(gpu=get_gpu("h200"), cpu_cores=1)
    t = estimate_throughput(resolve_model(plan.model), plan.config, hw, default_calibration())
    assert t.samples_per_s == pytest.approx(row["measured"]["samples_per_s"], rel=0.02)
    import benchmarks.calibration.fit_compromises as fit
    assert fit.fit_cpu_step(row)["cpu_step_s_per_param"] == pytest.approx(rates["cpu_step_s_per_param"], rel=1e-3)


def test_the_8bit_check_row_is_reported_not_fit():
    import benchmarks.calibration.fit_compromises as fit
    c = fit.check(json.loads(fit.CHECK_8BIT.read_text()))
    assert c["row"] == "adamw-8bit-mb4" and c["micro_batch"] == 4
    assert c["error"] == pytest.approx(c["predicted_samples_per_s"] / c["measured_samples_per_s"] - 1, abs=2e-3)
    assert fit.CHECK_8BIT != fit.ROW


def test_lora_pays_peft_adapter_traffic_and_its_recompute():
    from advisor.step_work import step_work
    cal = default_calibration()
    m = catalog_model("llama3-8b")
    base = TrainConfig(micro_batch=4, seq_len=2048, grad_ckpt=True)
    lora = base.model_copy(update={"lora_rank": 16})
    w, wl = step_work(m, base, cal), step_work(m, lora, cal)
    # frozen weights: forward + recompute + input gradient = 3 forwards of the 4 a full step runs
    assert wl.matmul_flops == pytest.approx(0.75 * w.matmul_flops)
    assert wl.bytes > w.bytes and wl.kernels > w.kernels  # peft's casts, the adapters' GEMMs, scaling and add
    nockpt = step_work(m, lora.model_copy(update={"grad_ckpt": False}), cal)
    assert nockpt.matmul_flops == pytest.approx(2 / 3 * step_work(m, base.model_copy(update={"grad_ckpt": False}), cal).matmul_flops)
