"""Encoder-decoders (T5, mT5, BART): planned through --module, --hf-config and the catalog (issue 39, point 6).

Before: T5 through --module crashed in the tracer (SDPA's stand-in gave T5's relative position bias, passed as a
mask that requires grad, no gradient; the gradient hook then read a None .grad), a bare
T5ForConditionalGeneration could not be called with ids alone (no decoder inputs), and --hf-config refused
model_type t5, mt5 and bart. Configs are hand-written (tests/data/hf/*/config.json, tests/data/seq2seq_net.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from advisor import sdpa  # noqa: E402
from advisor.errors import UserError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NET = ROOT / "tests" / "data" / "seq2seq_net.py"
HF = ROOT / "tests" / "data" / "hf"


def test_a_mask_that_requires_grad_gets_the_gradient_sdpa_gives_it():
    import torch.nn.functional as F

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, 16, requires_grad=True) for _ in range(3))
    bias = torch.randn(1, 4, 8, 8, requires_grad=True)  # T5's [1, heads, q, k] position bias
    out, backend = sdpa.attention(q, k, v, attn_mask=bias, scale=1.0)
    assert backend == "efficient"
    out.square().sum().backward()
    ours = [t.grad.clone() for t in (q, k, v, bias)]
    for t in (q, k, v, bias):
        t.grad = None
    F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0).square().sum().backward()
    for mine, ref in zip(ours, (q.grad, k.grad, v.grad, bias.grad)):
        assert torch.allclose(mine, ref, atol=1e-5)


def test_cudnn_does_not_take_a_mask_that_requires_grad():
    # its backward returns dq, dk, dv only; the memory-efficient kernel's returns the bias gradient
    assert sdpa.sdpa_backend(torch.bfloat16, 64, 64, True, 0.0, False, 128, 128) == "cudnn"
    assert sdpa.sdpa_backend(torch.bfloat16, 64, 64, True, 0.0, False, 128, 128, mask_grad=True) == "efficient"


def _module(factory: str, shape=(64,)):
    from advisor.tracer import trace_module_spec

    return trace_module_spec(f"{NET}:{factory}", shape, "int64")


def _transformers_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("factory", ["t5_tiny", "bart_tiny"])
def test_a_bare_encoder_decoder_module_is_traced_as_a_seq2seq_step(factory):
    import importlib.util

    spec = _module(factory)
    assert spec.family == "encoder-decoder" and spec.loss == "model" and spec.trace.loss == "model"
    s = importlib.util.spec_from_file_location("seq2seq_net", NET)
    mod = importlib.util.module_from_spec(s)
    s.loader.exec_module(mod)
    with torch.device("meta"):
        assert spec.params == _transformers_params(getattr(mod, factory)())
    assert spec.trace.attention == ["efficient"] if factory == "t5_tiny" else spec.trace.attention
    assert spec.trace.saved_bytes["bf16"] > 0 and spec.trace.output_bytes["bf16"] > 0  # the logits, held


def test_a_wrapped_t5_with_decoder_inputs_is_traced_with_its_loss():
    spec = _module("t5_tiny_wrapped")
    assert spec.family == "custom" and spec.loss == "ce" and spec.trace.loss == "ce"


def _write(tmp_path: Path, name: str, **change) -> Path:
    data = json.loads((HF / name / "config.json").read_text())
    data.update(change)
    p = tmp_path / name / "config.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data))
    return p


@pytest.mark.parametrize("name, cls", [("t5-large", "T5ForConditionalGeneration"), ("mt5-small", "MT5ForConditionalGeneration"),
                                       ("bart-base", "BartForConditionalGeneration")])
@pytest.mark.parametrize("head", ["lm", "none"])
def test_hf_config_counts_what_transformers_builds(tmp_path, name, cls, head):
    import transformers
    from transformers import AutoConfig

    from advisor.hf_config import spec_from_hf_config

    arch = cls if head == "lm" else cls.replace("ForConditionalGeneration", "Model")
    path = _write(tmp_path, name, architectures=[arch])
    spec = spec_from_hf_config(path)
    assert spec.family == "encoder-decoder" and spec.arch is None and spec.trace is None
    data = json.loads(path.read_text())
    model_type = data.pop("model_type")
    with torch.device("meta"):
        model = getattr(transformers, arch)(AutoConfig.for_model(model_type, **data))
    assert spec.params == _transformers_params(model)


def test_hf_config_checks_an_encoder_decoders_fields(tmp_path):
    from advisor.hf_config import spec_from_hf_config

    with pytest.raises(UserError, match="num_layers"):
        spec_from_hf_config(_write(tmp_path, "t5-large", num_layers=None))
    with pytest.raises(UserError, match="feed_forward_proj"):
        spec_from_hf_config(_write(tmp_path, "t5-large", feed_forward_proj="gelu-gated-x"))
    with pytest.raises(UserError, match="architectures"):
        spec_from_hf_config(_write(tmp_path, "bart-base", architectures=["BartForSequenceClassification"]))


def test_the_traced_config_matches_the_whole_models_trace(tmp_path):
    """The layer-extrapolated trace of --hf-config (1-2 layers per stack, two lengths) against tracing the
    whole model: a small T5 of 3 + 2 layers, at a length the trace did not use."""
    from advisor.config import TrainConfig
    from advisor.estimate import estimate
    from advisor.gpus import get_gpu
    from advisor.hardware import HardwareSpec
    from advisor.hf_trace import resolve_hf_config
    from advisor.tracer import trace_module_spec

    sizes = dict(d_model=64, d_ff=128, num_heads=4, d_kv=16, vocab_size=512, num_layers=3, num_decoder_layers=2)
    path = _write(tmp_path, "t5-large", **sizes)
    traced = resolve_hf_config(path)
    assert traced.implementation.startswith("transformers T5ForConditionalGeneration")
    assert traced.trace.fixed_saved_bytes_quadratic  # each layer keeps its [heads, q, k] position bias
    factory = tmp_path / "whole.py"
    factory.write_text("from transformers import T5Config, T5ForConditionalGeneration\n"
                       f"def build():\n    return T5ForConditionalGeneration(T5Config(**{sizes!r}))\n")
    whole = trace_module_spec(f"{factory}:build", (200,), "int64")
    assert traced.params == whole.params
    hw = HardwareSpec(gpu=get_gpu("H100"))
    for precision in ("fp32", "bf16"):
        cfg = TrainConfig(micro_batch=4, seq_len=200, precision=precision)
        a, b = estimate(traced, cfg, hw).memory, estimate(whole, cfg, hw).memory
        # within 0.1%: the memory-efficient kernel pads its log-sum-exp to 32 rows (200 -> 224), not linear in s
        assert a.activations_gib == pytest.approx(b.activations_gib, rel=1e-3)
        assert a.peak_gib == pytest.approx(b.peak_gib, rel=1e-3)


def test_t5_large_gets_a_plan_from_its_config_and_from_a_module():
    from advisor.plan import ModelRef
    from advisor.request import Request
    from rules.api import plan

    for ref in (ModelRef(hf_config=str(HF / "t5-large" / "config.json")),
                ModelRef(module=f"{NET}:t5_large", input_shape=(512,), input_dtype="int64")):
        p = plan(Request(model=ref, gpu="H100", gpus=1, seq_len=512, batch_size=64))
        assert p.config.micro_batch >= 1 and p.global_batch == 64 and p.gpu.startswith("H100")


def test_the_catalog_t5_is_its_transformers_class_and_no_recipe_runs_it():
    from advisor.catalog import catalog_model, has_transformers_class, transformers_model
    from advisor.plan import ModelRef, Plan
    from advisor.config import TrainConfig
    from launcher.recipes.checks import check_recipe

    for name, params in (("t5-base", 222_903_552), ("t5-large", 737_668_096)):  # the public checkpoints' counts
        spec = catalog_model(name)
        assert spec.params == params and spec.family == "encoder-decoder" and spec.trace is not None
        assert has_transformers_class(name) and transformers_model(name) == spec
    plan = Plan(model=ModelRef(name="t5-large"), config=TrainConfig(micro_batch=2), global_batch=2, lr=1e-4,
                base_lr=1e-4, base_batch=2, gpu="H100")
    with pytest.raises(UserError, match="encoder-decoder") as e:
        check_recipe("synthetic", [], plan)
    assert "-- train.py" in e.value.fix
