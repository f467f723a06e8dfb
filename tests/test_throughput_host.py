"""Host-bound regime and precision meaning of the throughput model (issue 16): shapes, not timings."""

from __future__ import annotations

import pytest

from advisor.calibration import default_calibration
from advisor.catalog import catalog_model
from advisor.config import TrainConfig
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.step_work import step_work
from advisor.throughput import OPTIMIZER_OPS, estimate_throughput, host_seconds, peak_flops

H200 = HardwareSpec(gpu=get_gpu("H200"))
CAL = default_calibration()
FAMILIES = [("resnet50", dict(image_size=224)), ("vit-b-16", dict(image_size=224)), ("gpt2", dict(seq_len=1024))]


def _thr(name, mb, **kw):
    extra = dict(FAMILIES)[name] if name in dict(FAMILIES) else {}
    return estimate_throughput(catalog_model(name), TrainConfig(micro_batch=mb, **{**extra, **kw}), H200, CAL)


@pytest.mark.parametrize("name", [n for n, _ in FAMILIES])
def test_host_dominates_at_batch_1_device_at_large_batch(name):
    small, large = _thr(name, 1, precision="bf16"), _thr(name, 512, precision="bf16")
    assert small.host_bound and small.host_s > small.gpu_s
    assert not large.host_bound and large.gpu_s > large.host_s
    # the host term does not grow with the batch; samples/s rises monotonically towards the device's rate
    assert small.host_s == pytest.approx(large.host_s)
    rates = [_thr(name, mb, precision="bf16").samples_per_s for mb in (1, 4, 16, 64, 256, 512)]
    assert rates == sorted(rates)
    steps = [_thr(name, mb, precision="bf16").step_s for mb in (1, 4, 16, 64, 256, 512)]
    assert steps == sorted(steps) and steps[0] >= small.host_s


def test_fp32_convolutions_use_the_tf32_rate_and_matmuls_the_fp32_rate():
    gpu = H200.gpu
    cnn, gpt = catalog_model("resnet50"), catalog_model("gpt2")
    fp32, tf32 = TrainConfig(precision="fp32"), TrainConfig(precision="tf32")
    assert gpu.tf32_tflops > gpu.fp32_tflops
    assert peak_flops(cnn, fp32, H200) == gpu.tf32_tflops * 1e12  # cuDNN TF32 is PyTorch's default
    assert peak_flops(gpt, fp32, H200) == gpu.fp32_tflops * 1e12  # matmuls stay fp32 by default
    assert peak_flops(gpt, tf32, H200) == gpu.tf32_tflops * 1e12
    assert peak_flops(cnn, tf32, H200) == gpu.tf32_tflops * 1e12
    # fp32 and tf32 CNNs run the same TF32 convolutions: one speed but for the classifier's GEMM
    a = estimate_throughput(cnn, fp32.model_copy(update={"micro_batch": 256}), H200, CAL)
    b = estimate_throughput(cnn, tf32.model_copy(update={"micro_batch": 256}), H200, CAL)
    # (the classifier's three GEMMs at the fp32 rate and with fp32's per-launch tail: ~0.1% of the step)
    assert a.samples_per_s == pytest.approx(b.samples_per_s, rel=3e-3) and a.samples_per_s <= b.samples_per_s
    g32 = estimate_throughput(gpt, fp32.model_copy(update={"micro_batch": 8}), H200, CAL)
    g_tf = estimate_throughput(gpt, tf32.model_copy(update={"micro_batch": 8}), H200, CAL)
    assert g_tf.matmul_s < g32.matmul_s


@pytest.mark.parametrize("name", ["vit-b-16", "gpt2", "mini-transformer", "llama3.2-1b"])
def test_compile_reduces_the_host_term_of_transformers(name):
    spec = catalog_model(name)
    eager, compiled = TrainConfig(micro_batch=1), TrainConfig(micro_batch=1, compile=True)
    assert host_seconds(spec, compiled, CAL) < host_seconds(spec, eager, CAL)


def test_compiled_host_time_follows_gemm_launches_not_eager_ops():
    """Compiled: a fixed part plus a time per GEMM/convolution launch, for the model's kind, and per
    kernel inductor writes between them; the eager op count (Llama's op-by-op RMSNorm and rotary, which
    inductor fuses) does not enter."""
    spec = catalog_model("resnet50")
    cal = CAL.model_copy(update={"compile_step_us": {"cnn": 1000.0}, "compile_call_us": {"cnn": 100.0},
                                 "compile_kernel_us": 30.0, "host": None})
    cfg = TrainConfig(compile=True)
    work = step_work(spec, cfg, cal)
    assert work.fused_kernels > 0  # the packaged trace counts them
    optimizer_us = OPTIMIZER_OPS * cal.launch_us_by_kind["cnn"]
    want = (1000.0 + 100.0 * (work.matmul_calls + work.conv_calls + work.dwconv_calls) + 30.0 * work.fused_kernels
            + optimizer_us) * 1e-6 * cal.host_factor
    assert host_seconds(spec, cfg, cal) == pytest.approx(want)
    more_ops = work.model_copy(update={"kernels": 10 * work.kernels, "light_kernels": 10 * work.light_kernels})
    assert host_seconds(spec, cfg, cal, more_ops) == pytest.approx(want)
    assert host_seconds(spec, TrainConfig(), cal, more_ops) > host_seconds(spec, TrainConfig(), cal)


def test_more_layers_more_host_time_and_slower_launches_slower_steps():
    small, big = catalog_model("llama3.2-1b"), catalog_model("llama3.2-3b")
    cfg = TrainConfig(micro_batch=1, seq_len=128)
    assert host_seconds(big, cfg, CAL) > host_seconds(small, cfg, CAL)
    slow = CAL.model_copy(update={"launch_us": CAL.launch_us * 2, "light_launch_us": 2 * CAL.light_launch_us,
                                  "launch_us_by_kind": {k: 2 * v for k, v in CAL.launch_us_by_kind.items()}})
    a = estimate_throughput(small, cfg, H200, CAL)
    b = estimate_throughput(small, cfg, H200, slow)
    assert b.step_s > a.step_s and b.host_s == pytest.approx(2 * a.host_s)


def test_a_step_paced_by_the_host_forward_then_the_gpu_backward_says_so():
    """When the third path (the CPU's forward, then the GPU's backward) is the longest, neither the host-bound
    nor a silent GPU-bound reading explains the step: the notes name the crossing instead."""
    from advisor.catalog import catalog_model
    from advisor.calibration import default_calibration
    from advisor.config import Precision, TrainConfig
    from advisor.estimate import estimate
    from advisor.gpus import get_gpu
    from advisor.hardware import HardwareSpec

    hw, cfg = HardwareSpec(gpu=get_gpu("H100"), gpus_per_node=1), \
        TrainConfig(micro_batch=10, seq_len=1024, precision=Precision.bf16, grad_ckpt=True)
    base = default_calibration()
    crossed = estimate(catalog_model("gpt2"), cfg, hw,
                       calibration=base.model_copy(update={"host_forward_share": {"eager": 0.9}})).throughput
    assert crossed.crossing_s > max(crossed.gpu_s, crossed.host_s)
    assert any(n.startswith("host and GPU cross") for n in crossed.notes)
    assert not any(n.startswith("host-bound") for n in crossed.notes)
    two_paths = estimate(catalog_model("gpt2"), cfg, hw,
                         calibration=base.model_copy(update={"host_forward_share": {}})).throughput
    assert two_paths.crossing_s == 0 and not any(n.startswith("host and GPU cross") for n in two_paths.notes)
    assert crossed.step_s > two_paths.step_s  # the longer path lengthens the step
