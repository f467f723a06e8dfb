"""The step's work by kind of kernel (advisor.trace_counters.OpCensus, advisor.step_work) and the
roofline that costs it (advisor.throughput.gpu_seconds): counts and shapes, never timings."""

from __future__ import annotations

import pytest

from advisor.calibration import default_calibration
from advisor.catalog import catalog_model
from advisor.config import TrainConfig
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.step_work import StepWork, math_attention_bytes, step_work
from advisor.throughput import estimate_throughput, gpu_seconds

torch = pytest.importorskip("torch")
nn = torch.nn

from advisor.tracer import profile_module, trace_step  # noqa: E402
from advisor.trace_counters import OpCensus  # noqa: E402

H200 = HardwareSpec(gpu=get_gpu("H200"))
CAL = default_calibration()


def _census(model, x, param_dims=frozenset()):
    census = OpCensus(param_dims)
    with census:
        model(x).float().sum().backward()
    return census.work


def test_linear_flops_are_the_gemms_of_forward_and_backward():
    lin = nn.Linear(64, 32)
    w = _census(lin, torch.randn(16, 64, requires_grad=True))
    # forward x@W^T, backward dX = g@W and dW = g^T@x: 3 GEMMs of 2*16*64*32
    assert w["matmul_flops"] == 3 * 2 * 16 * 64 * 32
    assert w["conv_flops"] == 0 and w["bytes"] > 0 and w["kernels"] >= 3


def test_a_size_that_is_not_a_multiple_of_8_makes_the_gemm_misaligned():
    head = nn.Linear(64, 50257 % 64 + 1)  # 50 outputs: even, not a multiple of 8
    dims = {d for p in head.parameters() for d in p.shape}
    w = _census(head, torch.randn(16, 64), dims)
    assert w["matmul_unaligned_flops"] > 0 and w["matmul_flops"] == w["matmul_odd_flops"] == 0
    odd = nn.Linear(64, 51)
    w = _census(odd, torch.randn(16, 64), {d for p in odd.parameters() for d in p.shape})
    assert w["matmul_odd_flops"] > 0 and w["matmul_flops"] == w["matmul_unaligned_flops"] == 0
    ok = nn.Linear(64, 56)
    w = _census(ok, torch.randn(16, 64), {d for p in ok.parameters() for d in p.shape})
    assert w["matmul_flops"] > 0 and w["matmul_unaligned_flops"] == 0


def test_depthwise_convolutions_are_bytes_and_stems_are_misaligned():
    dw = nn.Conv2d(32, 32, 7, padding=3, groups=32)
    w = _census(dw, torch.randn(2, 32, 16, 16, requires_grad=True))
    assert w["dwconv_flops"] == 3 * 2 * 2 * 32 * 49 * 16 * 16 and w["conv_flops"] == 0 and w["conv_unaligned_flops"] == 0
    stem = nn.Conv2d(3, 64, 7, stride=2)
    w = _census(stem, torch.randn(2, 3, 32, 32))
    assert w["conv_unaligned_flops"] > 0 and w["conv_flops"] == 0
    body = nn.Conv2d(64, 64, 3)
    w = _census(body, torch.randn(2, 64, 16, 16, requires_grad=True))
    assert w["conv_flops"] > 0 and w["conv_bytes"] > 0 and w["dwconv_flops"] == 0


def test_layer_norm_and_mixed_memory_orders_are_kinds_of_their_own():
    """LayerNorm's bytes go to norm_bytes; a copy from a transposed tensor to a contiguous one, or an
    add of the two, to permuted_bytes; an op whose operands share one permuted order (its output follows
    its input's layout) and a broadcast operand stay in bytes."""
    x = torch.randn(4, 8, 16, requires_grad=True)
    w = _census(nn.LayerNorm(16), x)
    assert w["norm_bytes"] > 0 and w["permuted_bytes"] == 0
    t = torch.randn(4, 8, 16)

    def forward(fn):
        census = OpCensus()
        with census:
            fn(t)
        return census.work

    w = forward(lambda a: a.transpose(1, 2).contiguous())
    assert w["permuted_bytes"] == 2 * t.numel() * 4  # read and written once
    w = forward(lambda a: a.transpose(1, 2) * 2.0 + torch.ones(8))
    assert w["permuted_bytes"] == 0 and w["bytes"] > 0 and w["norm_bytes"] == 0
    w = forward(lambda a: a.transpose(1, 2) + a.transpose(1, 2).contiguous())
    assert w["permuted_bytes"] == 2 * (2 * t.numel() * 4) + t.numel() * 4  # the copy, the add's 3 tensors


def test_depthwise_convolutions_count_their_launches():
    dw = nn.Conv2d(32, 32, 7, padding=3, groups=32)
    w = _census(dw, torch.randn(2, 32, 16, 16, requires_grad=True))
    assert w["dwconv_calls"] == 3 and w["conv_calls"] == 0  # forward, input and weight gradients
    w = _census(dw, torch.randn(2, 32, 16, 16))  # no input gradient
    assert w["dwconv_calls"] == 2


def _mlp():
    return nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))


def test_traced_work_per_precision():
    prof, _ = profile_module(_mlp, lambda b: (torch.randn(b, 256, device="meta"),), (256,))
    fp32, bf16, pure = prof.work["fp32"], prof.work["bf16"], prof.work["pure-bf16"]
    # 6 GEMMs of 2*256*1024 per sample less the first layer's input gradient (the input needs none)
    assert fp32["matmul_flops"] == bf16["matmul_flops"] == pure["matmul_flops"] == 5 * 2 * 256 * 1024
    # the same ops on half the bytes (but the loss's fp32 upcast of the output)
    assert 1.25 * pure["bytes"] < fp32["bytes"] <= 2 * pure["bytes"]
    # autocast's casts are kernels of their own, and its weight copies are per step, not per sample
    assert prof.work_fixed["bf16"]["kernels"] > prof.work_fixed["fp32"]["kernels"]
    assert prof.work_fixed["bf16"]["bytes"] > prof.work_fixed["fp32"]["bytes"]
    assert fp32["kernels"] == 0  # launches do not grow with the batch


def test_the_census_does_not_see_flop_counter_decompositions():
    """Counting FLOPs (pure-bf16 steps) must not change the kernels the census sees."""
    m = nn.Sequential(nn.Linear(64, 64), nn.SiLU())
    with torch.device("meta"):
        model = m.to("meta")
    counted = trace_step(model, lambda b: (torch.randn(b, 64, device="meta"),), 3, "fp32", count=True)
    plain = trace_step(model, lambda b: (torch.randn(b, 64, device="meta"),), 3, "fp32", count=False)
    assert counted.work["kernels"] == plain.work["kernels"]


def test_work_scales_with_the_batch_and_checkpointing_adds_a_forward():
    spec = catalog_model("resnet50")
    one = step_work(spec, TrainConfig(micro_batch=32), CAL)
    two = step_work(spec, TrainConfig(micro_batch=64), CAL)
    assert one.traced and two.conv_flops == pytest.approx(2 * one.conv_flops, rel=1e-6)
    assert two.kernels == one.kernels
    ckpt = step_work(spec, TrainConfig(micro_batch=32, grad_ckpt=True), CAL)
    assert ckpt.conv_flops == pytest.approx(one.conv_flops * 4 / 3)


def test_closed_form_gpt2_head_is_misaligned_and_llama_head_is_not():
    gpt2 = step_work(catalog_model("gpt2"), TrainConfig(micro_batch=1, seq_len=1024), CAL)
    a = catalog_model("gpt2").arch
    assert a.vocab % 2 and gpt2.matmul_odd_flops == pytest.approx(6 * a.vocab * a.d_model * 1024)
    bert = step_work(catalog_model("bert-base"), TrainConfig(micro_batch=1, seq_len=512), CAL)
    assert catalog_model("bert-base").arch.vocab % 8 and bert.matmul_unaligned_flops > 0 and bert.matmul_odd_flops == 0
    llama = step_work(catalog_model("llama3.2-1b"), TrainConfig(micro_batch=1, seq_len=1024), CAL)
    assert llama.matmul_unaligned_flops == 0 and llama.matmul_flops > 0


def test_attention_flops_grow_with_the_square_of_the_sequence():
    spec = catalog_model("llama3.2-1b")
    short = step_work(spec, TrainConfig(micro_batch=1, seq_len=1024), CAL)
    long = step_work(spec, TrainConfig(micro_batch=1, seq_len=2048), CAL)
    assert long.attn_flops == pytest.approx(4 * short.attn_flops)
    assert long.matmul_flops == pytest.approx(2 * short.matmul_flops)


def test_each_kind_of_work_is_costed_at_its_own_rate():
    from advisor.throughput import NCHW_HALF_TRANSPOSES

    cfg = TrainConfig(micro_batch=8, precision="bf16")
    conv = StepWork(conv_flops=1e13)
    base = gpu_seconds(conv, cfg, H200.gpu, CAL)[1]
    faster = CAL.model_copy(update={"rate_efficiency": {**CAL.rate_efficiency, "conv": CAL.rate_efficiency["conv"] * 2}})
    assert gpu_seconds(conv, cfg, H200.gpu, faster)[1] == pytest.approx(base / 2)
    # fp32 convolutions run at the TF32 peak, fp32 GEMMs at the fp32 (CUDA-core) peak
    fp32 = TrainConfig(micro_batch=8, precision="fp32")
    e = CAL.rate_efficiency
    assert gpu_seconds(conv, fp32, H200.gpu, CAL)[1] == pytest.approx(1e13 / (H200.gpu.tf32_tflops * 1e12 * e["conv"]))
    mm = StepWork(matmul_flops=1e13)
    assert gpu_seconds(mm, fp32, H200.gpu, CAL)[1] == pytest.approx(1e13 / (H200.gpu.fp32_tflops * 1e12 * e["matmul|fp32"]))
    # misaligned GEMMs: their own rate on tensor cores, none on CUDA cores
    bad = StepWork(matmul_unaligned_flops=1e13)
    assert gpu_seconds(bad, fp32, H200.gpu, CAL)[1] == pytest.approx(gpu_seconds(mm, fp32, H200.gpu, CAL)[1])
    assert gpu_seconds(bad, cfg, H200.gpu, CAL)[1] != pytest.approx(gpu_seconds(mm, cfg, H200.gpu, CAL)[1])
    compiled = cfg.model_copy(update={"compile": True})  # inductor pads GEMM sizes (shape_padding)
    assert gpu_seconds(bad, compiled, H200.gpu, CAL)[1] == pytest.approx(gpu_seconds(mm, compiled, H200.gpu, CAL)[1])
    # convolution bytes: NCHW and channels_last have rates of their own
    cb = StepWork(conv_bytes=1e11)
    nchw, nhwc = (gpu_seconds(cb, cfg.model_copy(update={"channels_last": cl}), H200.gpu, CAL)[1] for cl in (False, True))
    copies = NCHW_HALF_TRANSPOSES * 1e11 / (H200.gpu.mem_bw * e["bytes"])  # bf16 NCHW: NHWC kernels + copies
    assert nchw == pytest.approx(nhwc + copies)
    fp32_nchw = gpu_seconds(cb, fp32, H200.gpu, CAL)[1]
    assert fp32_nchw / gpu_seconds(cb, fp32.model_copy(update={"channels_last": True}), H200.gpu, CAL)[1] == \
        pytest.approx(e["conv_bytes|nhwc"] / e["conv_bytes|nchw"])
    # bf16 convolutions run on tensor cores in either layout: faster than TF32 ones at equal layout
    half = StepWork(conv_flops=1e13, conv_bytes=1e11)
    full = StepWork(conv_flops=1e13, conv_bytes=2e11)
    for cl in (False, True):
        assert gpu_seconds(half, cfg.model_copy(update={"channels_last": cl}), H200.gpu, CAL)[1] < \
            gpu_seconds(full, fp32.model_copy(update={"channels_last": cl}), H200.gpu, CAL)[1]
    # compiling fuses elementwise bytes away, not GEMMs
    assert gpu_seconds(mm, cfg.model_copy(update={"compile": True}), H200.gpu, CAL)[0] == gpu_seconds(mm, cfg, H200.gpu, CAL)[0]
    el = StepWork(bytes=1e11)
    assert gpu_seconds(el, cfg.model_copy(update={"compile": True}), H200.gpu, CAL)[1] < gpu_seconds(el, cfg, H200.gpu, CAL)[1]



def test_fp16_nchw_convolutions_run_channels_last_kernels_plus_layout_copies():
    """cuDNN's half-precision tensor-core convolutions are NHWC kernels: in NCHW they cost the
    channels_last kernel plus NCHW<->NHWC copies (2 bytes moved per convolution byte) at the elementwise
    rate, fp16 and bf16 alike (the H200 profiles: bf16 nchwToNhwc kernels around bf16 NHWC ones)."""
    from advisor.throughput import NCHW_HALF_TRANSPOSES

    e = CAL.rate_efficiency
    fp16 = TrainConfig(micro_batch=8, precision="fp16")
    work = StepWork(conv_flops=1e13, conv_bytes=1e11)
    for gpu in (H200.gpu, get_gpu("A100"), get_gpu("V100")):
        nchw = gpu_seconds(work, fp16, gpu, CAL)[1]
        nhwc = gpu_seconds(work, fp16.model_copy(update={"channels_last": True}), gpu, CAL)[1]
        copies = NCHW_HALF_TRANSPOSES * 1e11 / (gpu.mem_bw * gpu.fraction_vs_h200("bandwidth") * e["bytes"])
        assert nchw == pytest.approx(nhwc + copies), gpu.name
    bf16 = TrainConfig(micro_batch=8, precision="bf16")
    assert gpu_seconds(work, bf16, H200.gpu, CAL)[1] == pytest.approx(gpu_seconds(work, fp16, H200.gpu, CAL)[1])
    assert gpu_seconds(work, bf16, get_gpu("V100"), CAL)[1] > gpu_seconds(work, fp16, get_gpu("V100"), CAL)[1]
    compiled = fp16.model_copy(update={"compile": True})  # inductor runs convolutions channels_last
    assert gpu_seconds(work, compiled, H200.gpu, CAL)[0] == pytest.approx(
        gpu_seconds(work, fp16.model_copy(update={"channels_last": True}), H200.gpu, CAL)[0])

def test_compiled_bidirectional_attention_with_dropout_moves_its_probabilities():
    bert = catalog_model("bert-base")  # the catalog's has no dropout: with it, compiled, the math path
    assert step_work(bert, TrainConfig(micro_batch=4, seq_len=512, compile=True), CAL).attn_bytes == 0
    bert = bert.model_copy(update={"arch": bert.arch.model_copy(update={"attn_dropout": 0.1})})
    cfg = TrainConfig(micro_batch=4, seq_len=512, precision="bf16")
    eager, compiled = step_work(bert, cfg, CAL), step_work(bert, cfg.model_copy(update={"compile": True}), CAL)
    a = bert.arch
    assert compiled.attn_bytes == pytest.approx(a.n_layers * a.n_heads * 512**2 * 4 * math_attention_bytes(cfg.precision))
    assert compiled.attn_flops == 0 and compiled.matmul_flops > eager.matmul_flops
    gpt2 = catalog_model("gpt2")  # causal: fused attention compiled too
    assert step_work(gpt2, TrainConfig(micro_batch=4, seq_len=512, compile=True), CAL).attn_bytes == 0


def test_the_closed_forms_per_layer_tables_count_the_same_layer_kinds():
    from advisor.step_work import FUSED_KERNELS_PER_LAYER, GEMMS_PER_LAYER, KERNELS_PER_LAYER, LIGHT_KERNELS_PER_LAYER

    assert set(GEMMS_PER_LAYER) == set(KERNELS_PER_LAYER) == set(LIGHT_KERNELS_PER_LAYER) == set(FUSED_KERNELS_PER_LAYER)


def test_inductor_kernels_are_runs_between_externs_and_their_reductions():
    """fused_kernels: a run of ops between two GEMMs/convolutions is one kernel, or one per reduction
    in it (LayerNorm's backward two); the GEMMs themselves are not counted."""
    mlp = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 64))
    plain = _census(mlp, torch.randn(8, 64, requires_grad=True))
    normed = _census(nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 64)),
                     torch.randn(8, 64, requires_grad=True))
    assert plain["matmul_calls"] == normed["matmul_calls"] == 6
    # forward: GELU between the GEMMs, the loss's sum after; backward: its runs (bias sums, GELU's gradient)
    assert 3 <= plain["fused_kernels"] <= plain["kernels"] - plain["matmul_calls"]
    # LayerNorm's forward joins GELU's run as its one reduction (+0); its backward's two reductions join
    # the run of the second bias's gradient sum and GELU's gradient (one reduction, one kernel): three (+2)
    assert normed["fused_kernels"] == plain["fused_kernels"] + 2
    assert _census(nn.Linear(64, 64), torch.randn(8, 64, requires_grad=True))["fused_kernels"] >= 1


def test_compiled_math_attention_runs_six_gemms_per_layer_and_its_autocast_gradients_in_fp32():
    """The math path's GEMMs: forward QK^T and PV, backward dV, dP, dQ, dK (six launches per layer).
    Under autocast dS is fp32, so dQ and dK (a third of the FLOPs) run on CUDA cores; in pure bf16 none."""
    bert = catalog_model("bert-base")
    bert = bert.model_copy(update={"arch": bert.arch.model_copy(update={"attn_dropout": 0.1})})
    a = bert.arch
    for precision, fp32_share in (("bf16", 1 / 3), ("fp16", 1 / 3), ("pure-bf16", 0.0)):
        cfg = TrainConfig(micro_batch=4, seq_len=512, precision=precision)
        eager, compiled = step_work(bert, cfg, CAL), step_work(bert, cfg.model_copy(update={"compile": True}), CAL)
        math_flops = eager.attn_flops * 3.0 / 3.5  # no recompute: forward 4 s^2 d, backward 8 s^2 d
        assert compiled.matmul_fp32_flops == pytest.approx(math_flops * fp32_share), precision
        assert compiled.matmul_flops - eager.matmul_flops == pytest.approx(math_flops * (1 - fp32_share)), precision
        assert compiled.matmul_calls - eager.matmul_calls == 6 * a.n_layers, precision
        assert compiled.fused_kernels - eager.fused_kernels == 2 * a.n_layers, precision  # softmax, its backward
    # LoRA's cut is for weight GEMMs, not attention's; checkpointing runs the forward's QK^T and PV again
    bf16 = TrainConfig(micro_batch=4, seq_len=512, precision="bf16")
    for update, forwards in (({"lora_rank": 16}, 1), ({"grad_ckpt": True}, 2), ({"lora_rank": 16, "grad_ckpt": True}, 2)):
        cfg = bf16.model_copy(update=update)
        eager, compiled = step_work(bert, cfg, CAL), step_work(bert, cfg.model_copy(update={"compile": True}), CAL)
        forward = step_work(bert, bf16, CAL).attn_flops / 3.5
        assert compiled.matmul_fp32_flops == pytest.approx(forward), update
        assert compiled.matmul_flops - eager.matmul_flops == pytest.approx(forward * (forwards + 1)), update
        assert compiled.matmul_calls - eager.matmul_calls == pytest.approx((6 + 2 * (forwards - 1)) * a.n_layers), update
        assert compiled.attn_bytes == pytest.approx(
            a.n_layers * a.n_heads * 512**2 * 4 * math_attention_bytes(cfg.precision, forwards)), update
    assert math_attention_bytes(bf16.precision, 2) - math_attention_bytes(bf16.precision) == 5 * 4 + 1
    # On CUDA cores the fp32 third costs more than the tensor-core rest of the attention
    bf16 = TrainConfig(micro_batch=4, seq_len=512, precision="bf16", compile=True)
    fp32_part = StepWork(matmul_fp32_flops=1e12)
    tensor_part = StepWork(matmul_flops=1e12)
    assert gpu_seconds(fp32_part, bf16, H200.gpu, CAL)[0] > 5 * gpu_seconds(tensor_part, bf16, H200.gpu, CAL)[0]


def test_small_batches_are_host_bound_for_a_traced_cnn_too():
    spec = catalog_model("resnet18")
    small = estimate_throughput(spec, TrainConfig(micro_batch=1, image_size=224, precision="bf16"), H200, CAL)
    large = estimate_throughput(spec, TrainConfig(micro_batch=512, image_size=224, precision="bf16"), H200, CAL)
    assert small.host_bound and not large.host_bound


def test_packaged_rates_are_fractions_of_the_datasheet():
    """Every fitted rate is an achievable fraction of a datasheet peak or bandwidth: in (0, 1]; batch
    norm's blocks are element passes per SM cycle, a few at most."""
    e = CAL.rate_efficiency
    assert all(0 < v <= 1 for k, v in e.items() if not k.startswith("bn_nchw|")), e
    assert all(0 < v <= 4 for k, v in e.items() if k.startswith("bn_nchw|")), e
    assert CAL.rate_efficiency["matmul_odd"] <= CAL.rate_efficiency["matmul_unaligned"] <= CAL.rate_efficiency["matmul|tensor"]


def test_a_calibration_naming_some_rates_keeps_the_others():
    from advisor.calibration import Calibration

    c = Calibration(rate_efficiency={"conv": 0.1})
    assert c.rate_efficiency["conv"] == 0.1 and set(c.rate_efficiency) == set(Calibration().rate_efficiency)


def _bn_cnn():
    from torch import nn

    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 256, 1), nn.BatchNorm2d(256), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(256, 10))


def test_nchw_batch_norm_is_costed_per_channel_block():
    """NCHW batch norm runs one thread block per channel (PyTorch's kernels for bf16, cuDNN's for fp32
    and fp16): the census keeps each layer's element passes per block by channel count, eager NCHW
    steps pay max(1, C / SMs) rounds of a block's time at their path's rate, channels_last and
    compiled steps do not."""
    from advisor.models import ModelSpec
    from advisor.throughput import batch_norm_blocks_seconds

    prof, params = profile_module(_bn_cnn, lambda b: (torch.randn(b, 3, 32, 32, device="meta"),), (3, 32, 32),
                                  scales_with="pixels")
    for p in ("bf16", "fp32", "pure-bf16"):
        assert {k for k, v in prof.work[p].items() if k.startswith("bn_nchw|")} == {"bn_nchw|16", "bn_nchw|256"}
        # per sample of 32 x 32 pixels: statistics read x once, backward reads x and dy and writes dx
        assert prof.work[p]["bn_nchw|16"] == pytest.approx(4 * 32 * 32)
    spec = ModelSpec(name="bn-cnn", family="cnn", params=params, trace=prof, source="test")
    bf16, fp32 = (TrainConfig(micro_batch=64, image_size=64, precision=p) for p in ("bf16", "fp32"))
    work = step_work(spec, bf16, CAL)
    assert work.bn_block_elems[16] == pytest.approx(64 * 4 * 64 * 64)  # 4x the pixels of the trace
    without = work.model_copy(update={"bn_block_elems": {}})
    gpu = H200.gpu
    assert gpu_seconds(work, bf16, gpu, CAL)[1] > gpu_seconds(without, bf16, gpu, CAL)[1]
    for other in (bf16.model_copy(update={"channels_last": True}), bf16.model_copy(update={"compile": True})):
        assert gpu_seconds(work, other, gpu, CAL)[1] == pytest.approx(gpu_seconds(without, other, gpu, CAL)[1])
    # each path at its own rate
    e = CAL.rate_efficiency
    native = gpu_seconds(work, bf16, gpu, CAL)[1] - gpu_seconds(without, bf16, gpu, CAL)[1]
    cudnn = gpu_seconds(work, fp32, gpu, CAL)[1] - gpu_seconds(without, fp32, gpu, CAL)[1]
    assert native / cudnn == pytest.approx(e["bn_nchw|cudnn"] / e["bn_nchw|native"])
    # fewer channels than SMs: one round whatever the count; twice the SMs: two rounds
    sms = gpu.sm_count
    one = batch_norm_blocks_seconds({16: 1e6}, gpu, 1.0)
    assert one == pytest.approx(1e6 / gpu.sm_clock)
    assert batch_norm_blocks_seconds({sms: 1e6}, gpu, 1.0) == pytest.approx(one)
    assert batch_norm_blocks_seconds({2 * sms: 1e6}, gpu, 1.0) == pytest.approx(2 * one)
    # a block is latency-bound: a GPU with the same SMs at a lower clock is slower by the clock ratio
    h100_pcie = get_gpu("H100-PCIE")
    assert batch_norm_blocks_seconds({16: 1e6}, h100_pcie, 1.0) == pytest.approx(one * gpu.sm_clock / h100_pcie.sm_clock)


def test_light_ops_dispatch_at_their_own_cost():
    """A step of light ops (pointwise, casts) costs the host light_launch_us each, the others launch_us."""
    from advisor.throughput import OPTIMIZER_OPS, host_seconds

    spec = catalog_model("resnet50")
    cfg = TrainConfig(micro_batch=8, precision="bf16")
    cal = CAL.model_copy(update={"launch_us_by_kind": {"cnn": 40.0}, "light_launch_us": 10.0})
    work = StepWork(kernels=100.0, light_kernels=60.0, conv_flops=1e12)
    assert host_seconds(spec, cfg, cal, work) == pytest.approx(((40 + OPTIMIZER_OPS) * 40.0 + 60 * 10.0) * 1e-6)


def test_gemm_and_convolution_launches_are_counted_and_each_pays_a_tail():
    """The census counts one launch per GEMM and per convolution gradient it computes; the roofline
    adds the class's per-launch tail, slower on a GPU whose SMs run tiles slower."""
    lin = nn.Linear(64, 32)
    assert _census(lin, torch.randn(16, 64, requires_grad=True))["matmul_calls"] == 3  # forward, dX, dW
    conv = nn.Conv2d(8, 16, 3)
    assert _census(conv, torch.randn(2, 8, 12, 12, requires_grad=True))["conv_calls"] == 3
    assert _census(conv, torch.randn(2, 8, 12, 12))["conv_calls"] == 2  # an input needs no gradient

    cfg = TrainConfig(micro_batch=1, precision="fp32")
    work = StepWork(matmul_flops=1e9, matmul_calls=100, conv_flops=1e9, conv_calls=50)
    bare = CAL.model_copy(update={"gemm_call_us": {"fp32": 0.0, "tensor": 0.0}, "conv_call_us": 0.0})
    tails = CAL.model_copy(update={"gemm_call_us": {"fp32": 10.0, "tensor": 2.0}, "conv_call_us": 4.0})
    h200 = get_gpu("H200")
    extra = gpu_seconds(work, cfg, h200, tails)[1] - gpu_seconds(work, cfg, h200, bare)[1]
    assert extra == pytest.approx(100 * 10e-6 + 50 * 4e-6)
    bf16 = TrainConfig(micro_batch=1, precision="bf16")
    assert gpu_seconds(work, bf16, h200, tails)[1] - gpu_seconds(work, bf16, h200, bare)[1] == \
        pytest.approx(100 * 2e-6 + 50 * 4e-6)
    a100 = get_gpu("A100-80GB")
    slower = gpu_seconds(work, cfg, a100, tails)[1] - gpu_seconds(work, cfg, a100, bare)[1]
    assert slower > extra  # fewer, slower SMs per FLOP of the same dtype


def test_an_mlm_head_on_the_masked_positions_only_costs_them_alone():
    """NVIDIA's BERT pre-training runs its MLM head on the masked positions (TransformerArch.head_positions):
    the head's GEMM FLOPs, its saved bytes and the loss's logits count those tokens, the layers all of them."""
    from advisor.activations import activation_profile
    from advisor.throughput import forward_flops

    full = catalog_model("bert-large")
    arch = full.arch.model_copy(update={"vocab": 30528})
    every, masked = (full.model_copy(update={"arch": arch.model_copy(update={"head_positions": p})}) for p in (None, 20))
    cfg = TrainConfig(micro_batch=4, seq_len=128, precision="bf16")
    w_all, w_masked = step_work(every, cfg, CAL), step_work(masked, cfg, CAL)
    head = arch.head_matmul_params()
    assert head == 30528 * 1024 + 1024 * 1024
    assert w_all.matmul_flops - w_masked.matmul_flops == pytest.approx(6.0 * head * (128 - 20) * 4)
    assert forward_flops(every, cfg)[0] - forward_flops(masked, cfg)[0] == pytest.approx(2.0 * head * (128 - 20))
    a_all, a_masked = activation_profile(every, cfg), activation_profile(masked, cfg)
    assert a_masked.loss_temp_bytes == pytest.approx(a_all.loss_temp_bytes * 20 / 128)
    assert a_masked.per_sample_bytes < a_all.per_sample_bytes
    # None is every token: the catalog model's estimate is the same object's
    assert step_work(full, cfg, CAL).matmul_unaligned_flops == pytest.approx(6.0 * 30522 * 1024 * 128 * 4)
