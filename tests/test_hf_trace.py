"""--hf-config through transformers (traced on meta) and its closed-form fallback; catalog models
name the implementation they estimate."""

from __future__ import annotations

import json

import pytest

from advisor.catalog import catalog_model, hf_equivalent, transformers_model
from advisor.config import TrainConfig
from advisor.estimate import estimate
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.hf_config import spec_from_hf_config

GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_embd": 64, "n_head": 4,
        "vocab_size": 500, "n_positions": 512}


def write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_catalog_names_its_implementation_and_loss():
    for name in ("gpt2", "resnet50", "llama3-8b"):
        spec = catalog_model(name)
        assert spec.implementation == "cardwise zoo" and spec.loss == "ce"
    assert hf_equivalent("gpt2")["architectures"] == ["GPT2LMHeadModel"]
    assert hf_equivalent("vit-b-16") is None and hf_equivalent("resnet50") is None
    e = estimate(catalog_model("gpt2"), TrainConfig(micro_batch=2, seq_len=128), HardwareSpec(gpu=get_gpu("H200")))
    assert e.model.implementation == "cardwise zoo" and e.model.loss == "ce"


def test_closed_form_without_transformers(tmp_path, monkeypatch):
    import advisor.hf_trace as hf_trace

    monkeypatch.setattr(hf_trace, "transformers_available", lambda: False)
    spec = hf_trace.resolve_hf_config(write(tmp_path, GPT2))
    assert spec.implementation == "closed form (transformers not installed)"
    assert spec.trace is None and spec.params == spec_from_hf_config(write(tmp_path, GPT2)).params


def test_traces_the_transformers_class(tmp_path):
    pytest.importorskip("transformers")
    from advisor.hf_trace import resolve_hf_config

    spec = resolve_hf_config(write(tmp_path, GPT2))
    assert spec.implementation == "transformers GPT2LMHeadModel (sdpa)" and spec.loss == "model"
    assert spec.params == spec_from_hf_config(write(tmp_path, GPT2)).params  # tied head counted once
    assert spec.trace.layers == 2 and spec.trace.scales_with == "tokens"
    assert set(spec.trace.attention) == {"flash", "efficient"}  # attn_pdrop 0.1: not cuDNN
    # the loss: HF upcasts the logits (.float()), so the gradients of the log-softmax and of the
    # logits are fp32 (2 x 4 bytes per logit); the bf16 logits themselves are recorded apart
    tokens = spec.trace.ref_input[0]
    assert spec.trace.loss_temp_bytes["bf16"] == pytest.approx(tokens * 500 * 8)
    assert spec.trace.output_bytes["bf16"] == pytest.approx(tokens * 500 * 2)
    e = estimate(spec, TrainConfig(micro_batch=4, seq_len=512), HardwareSpec(gpu=get_gpu("H200")))
    assert e.model.implementation.startswith("transformers") and e.memory.detail["loss_temporaries_gib"] > 0


def test_dropout_masks_are_counted(tmp_path):
    """GPT-2 keeps a bool mask per residual dropout (2 per layer) and for the embeddings; the
    attention dropout runs inside the fused kernel (Philox), which keeps none."""
    pytest.importorskip("transformers")
    from advisor.hf_trace import resolve_hf_config

    drop = resolve_hf_config(write(tmp_path, GPT2, "a.json")).trace
    none = resolve_hf_config(write(tmp_path, dict(GPT2, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0), "b.json")).trace
    tokens = drop.ref_input[0]
    assert drop.saved_bytes["fp32"] - none.saved_bytes["fp32"] == tokens * (2 * 2 + 1) * 64


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_hf_meta_trace_equals_a_real_cpu_run(precision):
    """Conv1D, tanh-GELU, HF's SDPA path and dropout: meta keeps what real CPU autograd keeps."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from advisor.tracer import trace_step

    config = transformers.AutoConfig.for_model(**GPT2)

    def step(model, inputs):
        out = model(input_ids=inputs[0], labels=inputs[0])
        return out.loss, out.logits

    result = {}
    for device in ("meta", "cpu"):
        with torch.device(device):
            model = transformers.GPT2LMHeadModel(config).train()
        make = lambda b: (torch.randint(0, 500, (b, 64), device=device),)  # noqa: E731
        t2, t3 = (trace_step(model, make, b, precision, loss_fn=step) for b in (2, 3))
        result[device] = (t3.saved_bytes - t2.saved_bytes, t3.loss_temp_bytes - t2.loss_temp_bytes)
    assert result["meta"] == result["cpu"]


def test_catalog_model_as_transformers_runs_it():
    pytest.importorskip("transformers")
    from advisor.hf_trace import catalog_hf_spec

    spec = catalog_hf_spec("gpt2")
    assert spec.implementation == "transformers GPT2LMHeadModel (sdpa)" and spec.name == "gpt2"
    assert spec.params == catalog_model("gpt2").params
    assert catalog_hf_spec("resnet50") is None


def test_catalog_transformers_model_comes_from_data_without_torch():
    """The HF-traced catalog specs are precomputed (benchmarks/calibration/trace_catalog.py): no torch to look up."""
    import subprocess
    import sys

    code = ("import sys; from advisor.catalog import transformers_model; s = transformers_model('gpt2'); "
            "print(s.implementation, s.trace.layers, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["transformers", "GPT2LMHeadModel", "(sdpa)", "12", "False"]
    assert transformers_model("vit-b-16") is None



def test_question_answering_closed_form_matches_its_trace(tmp_path):
    """BertForQuestionAnswering traced (start and end positions as its labels) against the closed form of
    head "qa": the same parameters, and the same saved bytes up to the layers' own closed-form-vs-trace
    difference, which BertForMaskedLM shows as well (the head's share agrees to within a byte per token)."""
    pytest.importorskip("transformers")
    from advisor.activations import activation_profile
    from advisor.hf_trace import resolve_hf_config

    bert = {"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "intermediate_size": 256, "vocab_size": 512, "max_position_embeddings": 512, "type_vocab_size": 2}
    specs = {}
    for cls in ("BertForQuestionAnswering", "BertForMaskedLM"):
        path = write(tmp_path, dict(bert, architectures=[cls]), f"{cls}.json")
        specs[cls] = (spec_from_hf_config(path), resolve_hf_config(path))
    closed, traced = specs["BertForQuestionAnswering"]
    assert traced.implementation.startswith("transformers BertForQuestionAnswering")
    assert traced.params == closed.params and closed.arch.head == "qa"
    for precision in ("fp32", "bf16"):
        cfg = TrainConfig(micro_batch=4, seq_len=64, precision=precision)
        gap = {cls: (activation_profile(t, cfg).per_sample_bytes - activation_profile(c, cfg).per_sample_bytes) / 64
               for cls, (c, t) in specs.items()}
        assert gap["BertForQuestionAnswering"] == pytest.approx(gap["BertForMaskedLM"], abs=1.0)
