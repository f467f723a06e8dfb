"""The estimator's formulas against hand-computed values and against the meta-device tracer."""

from __future__ import annotations

import math

import pytest

from advisor.activations import activation_profile, transformer_base_bytes, transformer_layer_bytes
from advisor.calibration import Calibration
from advisor.catalog import catalog_model
from advisor.config import Precision, TrainConfig
from advisor.errors import UserError
from advisor.estimate import estimate
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.memory import trainable_params

GIB = 2**30
N8B = 8_030_261_248


def hw(gpu="A100-80GB", n=1, **kw):
    return HardwareSpec(gpu=get_gpu(gpu), gpus_per_node=n, **kw)


def test_llama3_8b_model_states_by_hand():
    e = estimate(catalog_model("llama3-8b"), TrainConfig(micro_batch=1, seq_len=2048, precision="bf16"), hw())
    assert e.model.params == N8B
    assert e.memory.weights_gib == pytest.approx(4 * N8B / GIB)  # fp32 master weights
    assert e.memory.detail["gradient_buffer_gib"] == pytest.approx(4 * N8B / GIB)  # (none alive at a backward peak)
    assert e.memory.optimizer_gib == pytest.approx(8 * N8B / GIB)  # two fp32 AdamW moments
    assert not e.memory.fits  # 16 bytes/param = 120 GiB before activations: not on one A100-80GB


def test_pure_bf16_halves_model_states_and_fsdp_shards_them():
    spec = catalog_model("llama3-8b")
    pure = estimate(spec, TrainConfig(micro_batch=1, seq_len=2048, precision="pure-bf16"), hw()).memory
    assert pure.weights_gib == pytest.approx(2 * N8B / GIB)
    # bf16 moments (4) + the bf16 Kahan compensation buffer of KahanAdamW (2)
    assert pure.optimizer_gib == pytest.approx(6 * N8B / GIB)
    fsdp = estimate(spec, TrainConfig(micro_batch=1, seq_len=2048, strategy="fsdp"), hw(n=8)).memory
    assert fsdp.weights_gib == pytest.approx(4 * N8B / 8 / GIB)
    assert fsdp.optimizer_gib == pytest.approx(8 * N8B / 8 / GIB)
    assert fsdp.detail["fsdp_gathered_gib"] > 0


def test_ddp_adds_gradient_buckets():
    spec = catalog_model("gpt2")
    one = estimate(spec, TrainConfig(micro_batch=8, seq_len=1024), hw()).memory
    ddp = estimate(spec, TrainConfig(micro_batch=8, seq_len=1024, strategy="ddp"), hw(n=8)).memory
    assert ddp.detail["ddp_buckets_gib"] == pytest.approx(4 * 124_439_808 / GIB)
    assert ddp.peak_gib == pytest.approx(one.peak_gib + ddp.detail["ddp_buckets_gib"], rel=1e-6)


def test_lora_trainable_params_by_hand():
    # rank 16 on q, k, v, o, gate, up, down of Llama 3 8B: 16 * (8192 + 2*5120 + 8192 + 3*18432) * 32
    assert trainable_params(catalog_model("llama3-8b"), TrainConfig(lora_rank=16)) == 41_943_040


def test_lora_needs_a_transformer():
    with pytest.raises(UserError):
        trainable_params(catalog_model("resnet50"), TrainConfig(lora_rank=8))


def test_layer_formula_by_hand_gpt2_autocast():
    a = catalog_model("gpt2").arch
    h = 768
    # 2 LayerNorm inputs fp32 (4h each) + 3 bf16 copies for q/k/v + flash q,k,v,out (8h) + MLP input
    # copy (2h) + GELU in/out (2 * 2 * 4h) = 40h, plus mean/rstd (16 B) and lse (4 B x 12 heads).
    assert transformer_layer_bytes(a, Precision.bf16) == 40 * h + 16 + 48


def test_checkpointing_keeps_layer_inputs_only():
    spec = catalog_model("llama3-8b")
    cfg = TrainConfig(micro_batch=1, seq_len=2048, precision="bf16")
    full = estimate(spec, cfg, hw("H200")).memory
    ckpt = estimate(spec, cfg.model_copy(update={"grad_ckpt": True}), hw("H200")).memory
    copies = full.detail["autocast_weight_copies_gib"]  # autocast's cache lives to the end of forward either way
    assert copies == pytest.approx(2 * catalog_model("llama3-8b").arch.matmul_params() / GIB)
    assert ckpt.activations_gib < full.activations_gib / 4  # activations_gib: without the copies (issue 40)


@pytest.mark.parametrize("name", ["gpt2", "llama3.2-1b", "bert-base", "mini-transformer", "vit-b-16", "qwen2.5-7b"])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "pure-bf16"])
def test_closed_form_matches_tracer(name, precision):
    """The formulas count exactly what autograd saves in advisor.zoo (traced on meta, 1 vs 2 layers)."""
    torch = pytest.importorskip("torch")
    from advisor.tracer import profile_module
    from advisor.zoo import build_trainable, synthetic_batch

    base = catalog_model(name)
    seq = 64
    saved = {}
    for layers in (1, 2):
        arch = base.arch.model_copy(update={"n_layers": layers, **({"vocab": 512} if base.arch.vocab else {})})
        spec = base.model_copy(update={"arch": arch})
        prof, _ = profile_module(lambda: build_trainable(spec), lambda b: synthetic_batch(spec, b, seq, device="meta"), (seq,))
        saved[layers] = prof.saved_bytes[precision]
    p = Precision(precision)
    tokens = arch.tokens(seq)
    layer = transformer_layer_bytes(arch, p) * tokens
    # rel 2e-4: fp32 runs the memory-efficient kernel, which pads its log-sum-exp to 32 rows
    # (advisor.sdpa), a few bytes per token the per-token formula leaves out (ViT: 197 -> 224 rows)
    assert saved[2] - saved[1] == pytest.approx(layer, rel=1e-6 if precision != "fp32" else 2e-4)
    base_bytes, _ = transformer_base_bytes(arch, p)
    # outside the layers, per-sample heads (a pooler on one token) add a few KiB the per-token formula omits
    assert saved[1] - layer == pytest.approx(base_bytes * tokens, rel=0.05, abs=4096)


def test_tracer_module_file_counts(tmp_path):
    pytest.importorskip("torch")
    from advisor.tracer import trace_module_spec

    spec = trace_module_spec("tests/data/tiny_net.py:build_mlp", (64,))
    assert spec.params == 64 * 256 + 256 + 256 * 8 + 8
    # forward FLOPs per sample: 2 * (64*256 + 256*8)
    assert spec.trace.fwd_flops == pytest.approx(2 * (64 * 256 + 256 * 8))
    cnn = trace_module_spec("tests/data/tiny_net.py:build_cnn", (3, 32, 32))
    assert cnn.family == "cnn" and cnn.trace.has_batchnorm
    e = estimate(cnn, TrainConfig(micro_batch=32, image_size=32), hw())
    assert e.memory.activations_gib > 0 and e.throughput.samples_per_s > 0


@pytest.mark.parametrize("spec,shape,msg", [
    ("tests/data/tiny_net.py", (64,), "no factory"),
    ("tests/data/missing.py:build", (64,), "file not found"),
    ("tests/data/tiny_net.py:nope", (64,), "no callable"),
    ("tests/data/tiny_net.py:NOT_A_FACTORY", (64,), "no callable"),
    ("tests/data/tiny_net.py:build_mlp", (3, 5), "tracing"),
    ("tests/data/tiny_net.py:build_mlp", None, "--input-shape"),
])
def test_tracer_errors_are_user_errors(spec, shape, msg):
    pytest.importorskip("torch")
    from advisor.tracer import trace_module_spec

    with pytest.raises(UserError) as err:
        trace_module_spec(spec, shape)
    assert msg in err.value.message()


def test_more_gpus_more_throughput_less_than_linear():
    spec = catalog_model("resnet50")
    cfg = TrainConfig(micro_batch=128, image_size=224, strategy="ddp", channels_last=True)
    one = estimate(spec, cfg, hw("A100-80GB", 1)).throughput.samples_per_s
    eight = estimate(spec, cfg, hw("A100-80GB", 8))
    assert one * 4 < eight.throughput.samples_per_s <= one * 8
    assert 0.5 < eight.throughput.scaling_efficiency <= 1.0
    two_nodes = estimate(spec, cfg, HardwareSpec(gpu=get_gpu("A100-80GB"), gpus_per_node=8, nodes=2, network_gbps=3))
    assert two_nodes.throughput.scaling_efficiency < eight.throughput.scaling_efficiency


def test_mfu_definition():
    spec = catalog_model("llama3-8b")
    e = estimate(spec, TrainConfig(micro_batch=1, seq_len=2048, strategy="fsdp"), hw("H100", 8))
    tokens_flops = 6 * spec.arch.matmul_params() * 2048 + 3 * 4 * 32 * 4096 * 2048**2 * 0.5
    assert e.throughput.mfu == pytest.approx(tokens_flops * e.throughput.samples_per_s / (989.4e12 * 8), rel=1e-6)


def test_time_to_train():
    e = estimate(catalog_model("mini-transformer"), TrainConfig(micro_batch=32, seq_len=256), hw(),
                 dataset_size=25_000, epochs=10)
    assert e.time_to_train_h == pytest.approx(250_000 / e.throughput.samples_per_s / 3600)


def test_bf16_on_v100_is_not_a_tensor_core_rate():
    v100 = get_gpu("V100")
    assert not v100.supports_bf16 and v100.peak_tflops("bf16") == v100.fp32_tflops  # no bf16 tensor cores before 8.0


def test_image_size_scales_cnn_activations():
    spec = catalog_model("resnet50")
    a224 = activation_profile(spec, TrainConfig(image_size=224)).per_sample_bytes
    a448 = activation_profile(spec, TrainConfig(image_size=448)).per_sample_bytes
    assert a448 == pytest.approx(4 * a224)


@pytest.mark.parametrize("field", ["micro_batch", "seq_len", "grad_accum"])
def test_non_positive_sizes_are_user_errors(field):
    with pytest.raises(UserError):
        TrainConfig(**{field: 0})


def _zoo_traces(name: str, precision: str, layers=(1, 2)) -> dict:
    """The tracer's StepTrace of the zoo's model with 1 and 2 layers (meta device, batch 1, 64 tokens):
    what the closed form's per-layer constants are checked against."""
    torch = pytest.importorskip("torch")
    from advisor.tracer import trace_step
    from advisor.zoo import build_trainable, synthetic_batch

    base = catalog_model(name)
    traces = {}
    for n in layers:
        spec = base.model_copy(update={"arch": base.arch.model_copy(update={"n_layers": n})})
        with torch.device("meta"):
            model = build_trainable(spec)
        traces[n] = trace_step(model, lambda b, spec=spec: synthetic_batch(spec, b, 64, device="meta"), 1, precision)
    return traces


@pytest.mark.parametrize("precision", ["bf16", "fp32", "pure-bf16"])
@pytest.mark.parametrize("name", ["gpt2", "llama3.2-1b"])
def test_kernel_counts_match_the_tracer(name, precision):
    """The launch-overhead constants are what the tracer counts on the zoo's layers."""
    from advisor.step_work import KERNELS_PER_LAYER

    base = catalog_model(name)
    counts = {n: t.kernels for n, t in _zoo_traces(name, precision).items()}
    assert counts[2] - counts[1] == KERNELS_PER_LAYER[(base.arch.mlp, base.arch.norm)][precision]


@pytest.mark.parametrize("name", ["gpt2", "llama3.2-1b", "bert-base", "vit-b-16"])
def test_gemm_counts_match_the_tracer(name):
    """The closed form's GEMM and convolution launches (each pays a wave's tail on the GPU) are what
    the census counts on the zoo's model: per layer and for the embeddings and head."""
    from advisor.config import TrainConfig
    from advisor.step_work import step_work

    base = catalog_model(name)
    spec = base.model_copy(update={"arch": base.arch.model_copy(update={"n_layers": 2})})
    traced = _zoo_traces(name, "bf16", layers=(2,))[2].work
    closed = step_work(spec, TrainConfig(micro_batch=1, seq_len=64, precision="bf16"), Calibration())
    assert not closed.traced
    assert (closed.matmul_calls, closed.conv_calls) == (traced["matmul_calls"], traced["conv_calls"])


@pytest.mark.parametrize("precision", ["bf16", "fp32", "pure-bf16"])
@pytest.mark.parametrize("name", ["gpt2", "llama3.2-1b"])
def test_fused_kernel_counts_match_the_tracer(name, precision):
    """The closed form's kernels inductor would write between GEMMs, per layer and for the rest, are what
    the census counts on the zoo's layers."""
    from advisor.config import TrainConfig
    from advisor.step_work import FUSED_KERNELS_BASE, FUSED_KERNELS_PER_LAYER, step_work

    base = catalog_model(name)
    fused = {n: t.work["fused_kernels"] for n, t in _zoo_traces(name, precision).items()}
    per_layer = FUSED_KERNELS_PER_LAYER[(base.arch.mlp, base.arch.norm)][precision]
    assert fused[2] - fused[1] == per_layer
    assert abs(fused[1] - per_layer - FUSED_KERNELS_BASE) <= 3  # 9-13 counted across the zoo's heads
    closed = step_work(base, TrainConfig(micro_batch=1, seq_len=64, precision=precision), Calibration())
    assert closed.fused_kernels == per_layer * base.arch.n_layers + FUSED_KERNELS_BASE


@pytest.mark.parametrize("precision", ["bf16", "fp32", "pure-bf16"])
@pytest.mark.parametrize("name", ["gpt2", "llama3.2-1b"])
def test_light_kernel_counts_match_the_tracer(name, precision):
    """The light ops per layer (pointwise, casts, reductions: cheaper dispatches) are what the census
    counts on the zoo's layers; a Llama layer has more of them than a GPT-2 one, not more GEMMs."""
    from advisor.step_work import LIGHT_KERNELS_PER_LAYER

    base = catalog_model(name)
    light, heavy = {}, {}
    for n, trace in _zoo_traces(name, precision).items():
        work = trace.work
        light[n], heavy[n] = work["light_kernels"], work["kernels"] - work["light_kernels"]
    assert light[2] - light[1] == LIGHT_KERNELS_PER_LAYER[(base.arch.mlp, base.arch.norm)][precision]
    assert 20 <= heavy[2] - heavy[1] <= 30  # GEMMs (3 per linear), attention's 4, norms and dropouts
