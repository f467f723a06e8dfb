"""--hf-config: Hugging Face config.json -> ModelSpec, exact against what transformers instantiates.

Fixtures in tests/data/hf/ are the public checkpoints' config.json files (the ViT's 1000 ImageNet
label names are placeholders: only their count matters). Expected counts are hand-computed, e.g.
Llama-3-8B: 32 x (2*4096^2 + 2*4096*1024 + 3*4096*14336 + 2*4096) + 2*128256*4096 + 4096.
Every count here (variants too) was also checked against transformers 5.17 building the same config
on the meta device (H200 machine, 2026-12): all equal but the untied-BERT case noted below.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from advisor.catalog import catalog_model
from advisor.errors import UserError
from advisor.hf_config import spec_from_hf_config
from advisor.plan import ModelRef
from advisor.sources import resolve_model

HF = Path(__file__).parent / "data" / "hf"

# checkpoint dir -> (exact parameters of the architecture in its config, head, family, catalog twin)
KNOWN = {
    "Meta-Llama-3-8B": (8_030_261_248, "lm", "decoder", "llama3-8b"),
    "Mistral-7B-v0.1": (7_241_732_096, "lm", "decoder", "mistral-7b"),
    "Qwen2.5-7B": (7_615_616_512, "lm", "decoder", "qwen2.5-7b"),
    "gpt2": (124_439_808, "lm", "decoder", "gpt2"),
    "bert-base-uncased": (109_514_298, "mlm", "encoder", "bert-base"),  # BertForMaskedLM
    "bert-base-uncased-sst2": (109_483_778, "cls", "encoder", None),  # BertForSequenceClassification, 2 labels
    "vit-base-patch16-224": (86_567_656, "image-cls", "vit", "vit-b-16"),  # ViTForImageClassification
}


def cfg(name: str) -> dict:
    return json.loads((HF / name / "config.json").read_text())


def write(tmp_path: Path, data, name: str = "config.json") -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data))
    return p


@pytest.mark.parametrize("name", KNOWN)
def test_public_checkpoints_exact(name):
    params, head, family, _ = KNOWN[name]
    spec = spec_from_hf_config(HF / name / "config.json")
    assert spec.params == params
    assert spec.arch.params() == params
    assert spec.arch.head == head
    assert spec.family == family
    assert spec.source.startswith("hf-config ")


@pytest.mark.parametrize("name", [n for n, v in KNOWN.items() if v[3]])
def test_same_arch_as_catalog_twin(name):
    spec = spec_from_hf_config(HF / name / "config.json")
    twin = catalog_model(KNOWN[name][3])
    # The same shapes; attention dropout is the HF config's (cardwise's own implementation has none).
    assert spec.arch.model_dump(exclude={"attn_dropout"}) == twin.arch.model_dump(exclude={"attn_dropout"})
    assert twin.arch.attn_dropout == 0
    assert spec.default_seq_len == twin.default_seq_len
    assert spec.default_image_size == twin.default_image_size


def test_folder_and_names(tmp_path):
    spec = spec_from_hf_config(HF / "gpt2")  # a folder holding config.json
    assert spec.name == "gpt2" and spec.params == 124_439_808
    assert spec_from_hf_config(HF / "vit-base-patch16-224").name == "google/vit-base-patch16-224"  # _name_or_path
    assert spec_from_hf_config(write(tmp_path, cfg("gpt2"), "my-gpt.json")).name == "my-gpt"


def test_bert_heads(tmp_path):
    base = cfg("bert-base-uncased")
    enc = 109_482_240  # BertModel: embeddings + 12 layers + pooler
    bare = spec_from_hf_config(write(tmp_path, dict(base, architectures=["BertModel"])))
    assert bare.params == enc and bare.arch.pooler and bare.arch.is_post_norm
    assert bare.task == "backbone (no head)"
    # default: 2 labels; num_labels; id2label wins
    cls2 = spec_from_hf_config(write(tmp_path, dict(base, architectures=["BertForSequenceClassification"])))
    assert cls2.params == enc + 768 * 2 + 2 == 109_483_778
    cls3 = spec_from_hf_config(write(tmp_path, dict(base, architectures=["BertForSequenceClassification"], num_labels=3)))
    assert cls3.params == enc + 768 * 3 + 3 and cls3.arch.num_labels == 3
    cls5 = spec_from_hf_config(write(tmp_path, dict(base, architectures=["BertForSequenceClassification"],
                                                    id2label={str(i): f"L{i}" for i in range(5)})))
    assert cls5.arch.num_labels == 5 and cls5.task == "5-class sequence classification"
    # untied masked-LM decoder adds vocab x hidden (transformers 4.x shares the decoder bias; 5.x, untied,
    # keeps a second copy of it: +vocab)
    untied = spec_from_hf_config(write(tmp_path, dict(base, tie_word_embeddings=False)))
    assert untied.params == 109_514_298 + 30522 * 768
    # no architectures: the catalog's semantics (masked LM), said in the description
    noarch = {k: v for k, v in base.items() if k != "architectures"}
    spec = spec_from_hf_config(write(tmp_path, noarch))
    assert spec.arch.head == "mlm" and "assumed BertForMaskedLM" in spec.description


def test_bert_large_matches_catalog(tmp_path):
    large = dict(cfg("bert-base-uncased"), hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                 intermediate_size=4096)
    assert spec_from_hf_config(write(tmp_path, large)).params == catalog_model("bert-large").params == 335_174_458


def test_gpt2_variants(tmp_path):
    base = cfg("gpt2")
    assert spec_from_hf_config(write(tmp_path, dict(base, architectures=["GPT2Model"]))).params == 124_439_808
    assert spec_from_hf_config(write(tmp_path, dict(base, tie_word_embeddings=False))).params == 124_439_808 + 50257 * 768
    assert spec_from_hf_config(write(tmp_path, dict(base, n_inner=1024))).params == 124_439_808 - 12 * 2 * 768 * 2048 - 12 * 2048
    xl = dict(base, n_embd=1600, n_layer=48, n_head=25)
    assert spec_from_hf_config(write(tmp_path, xl)).params == catalog_model("gpt2-xl").params == 1_557_611_200


def test_llama_variants(tmp_path):
    base = cfg("Meta-Llama-3-8B")
    bare = spec_from_hf_config(write(tmp_path, dict(base, architectures=["LlamaModel"])))
    assert bare.params == 8_030_261_248 - 128256 * 4096 and bare.task == "backbone (no head)"
    # Llama 3.2 1B: tied embeddings, explicit head_dim
    small = dict(base, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, head_dim=64,
                 tie_word_embeddings=True, max_position_embeddings=131072)
    assert spec_from_hf_config(write(tmp_path, small)).params == catalog_model("llama3.2-1b").params == 1_235_814_400
    # Llama 2 7B: no num_key_value_heads -> multi-head attention (LlamaConfig's default)
    l2 = {k: v for k, v in base.items() if k != "num_key_value_heads"}
    l2.update(intermediate_size=11008, vocab_size=32000, max_position_embeddings=4096)
    spec = spec_from_hf_config(write(tmp_path, l2))
    assert spec.arch.kv_heads == 32 and spec.params == catalog_model("llama2-7b").params == 6_738_415_616
    # attention_bias + mlp_bias: every linear layer gets a bias
    biased = spec_from_hf_config(write(tmp_path, dict(base, attention_bias=True, mlp_bias=True)))
    assert biased.params == 8_030_261_248 + 32 * (4096 + 2 * 1024 + 4096 + 2 * 14336 + 4096)
    # no architectures: causal LM assumed
    noarch = {k: v for k, v in base.items() if k != "architectures"}
    assert spec_from_hf_config(write(tmp_path, noarch)).arch.head == "lm"


def test_mistral_and_qwen_defaults(tmp_path):
    m = {k: v for k, v in cfg("Mistral-7B-v0.1").items() if k != "num_key_value_heads"}
    assert spec_from_hf_config(write(tmp_path, m)).arch.kv_heads == 8  # MistralConfig default
    q = cfg("Qwen2.5-7B")
    spec = spec_from_hf_config(write(tmp_path, q))
    assert spec.arch.qkv_bias is True and spec.arch.bias is False
    tied = spec_from_hf_config(write(tmp_path, dict(q, tie_word_embeddings=True)))
    assert tied.params == 7_615_616_512 - 152064 * 3584


def test_vit_variants(tmp_path):
    base = cfg("vit-base-patch16-224")
    in21k = {k: v for k, v in base.items() if k not in ("id2label", "label2id")}
    bare = spec_from_hf_config(write(tmp_path, dict(in21k, architectures=["ViTModel"])))
    # google/vit-base-patch16-224-in21k: ViTModel with its pooler
    assert bare.params == 86_389_248 and bare.arch.pooler
    # google/vit-base-patch16-384: 577 position embeddings
    big = spec_from_hf_config(write(tmp_path, dict(base, image_size=384)))
    assert big.params == 86_859_496 and big.default_image_size == 384
    noqkv = spec_from_hf_config(write(tmp_path, dict(base, qkv_bias=False)))
    assert noqkv.params == 86_567_656 - 12 * 3 * 768
    ten = spec_from_hf_config(write(tmp_path, dict(in21k, architectures=["ViTForImageClassification"], num_labels=10)))
    assert ten.params == 86_567_656 - 990 * 768 - 990 and ten.task == "10-class image classification"


# ------------------------------------------------------------------ errors name the file, the field, the fix
def _err(path) -> UserError:
    with pytest.raises(UserError) as info:
        spec_from_hf_config(path)
    return info.value


def test_missing_file(tmp_path):
    e = _err(tmp_path / "nope" / "config.json")
    assert "not found" in e.what and "nope" in e.where and e.fix
    e = _err(tmp_path)  # a folder without config.json
    assert e.where.endswith("config.json")


def test_invalid_json(tmp_path):
    e = _err(write(tmp_path, '{"model_type": "gpt2",\n  "n_layer": 12,,\n}'))
    assert "invalid JSON" in e.what and "line 2" in e.what and str(tmp_path) in e.where and e.fix
    e = _err(write(tmp_path, "[1, 2]"))
    assert "JSON object" in e.what


def test_missing_and_bad_fields(tmp_path):
    e = _err(write(tmp_path, {k: v for k, v in cfg("gpt2").items() if k != "model_type"}))
    assert "model_type" in e.what and "gpt2" in e.fix
    e = _err(write(tmp_path, {k: v for k, v in cfg("Meta-Llama-3-8B").items() if k != "hidden_size"}))
    assert "missing field 'hidden_size'" in e.what and e.where == str(tmp_path / "config.json") and "hidden_size" in e.fix
    e = _err(write(tmp_path, dict(cfg("bert-base-uncased"), num_hidden_layers="12")))
    assert "num_hidden_layers" in e.what and "integer" in e.what
    e = _err(write(tmp_path, dict(cfg("gpt2"), n_embd=0)))
    assert "n_embd" in e.what
    e = _err(write(tmp_path, dict(cfg("gpt2"), n_head=7)))
    assert "n_head" in e.what
    e = _err(write(tmp_path, dict(cfg("gpt2"), tie_word_embeddings="yes")))
    assert "tie_word_embeddings" in e.what


def test_unsupported(tmp_path):
    e = _err(write(tmp_path, dict(cfg("Mistral-7B-v0.1"), model_type="mixtral")))
    assert "model_type" in e.what and "mixtral" in e.what and "--module" in e.fix and "llama" in e.fix
    e = _err(write(tmp_path, dict(cfg("bert-base-uncased"), architectures=["BertForPreTraining"])))
    assert "architectures" in e.what and "BertForMaskedLM" in e.fix
    e = _err(write(tmp_path, dict(cfg("Meta-Llama-3-8B"), head_dim=256)))
    assert "head_dim" in e.what
    e = _err(write(tmp_path, dict(cfg("bert-base-uncased"), position_embedding_type="relative_key")))
    assert "position_embedding_type" in e.what


def test_cli_bad_config_exits_2(tmp_path, capsys):
    from cli.main import main

    bad = write(tmp_path, "{not json")
    assert main(["models", "--hf-config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "advise: error:" in err and str(bad) in err and "fix:" in err and "Traceback" not in err


# ------------------------------------------------------------------ sources.resolve_model
def test_resolve_model_dispatch(monkeypatch):
    assert resolve_model(ModelRef(name="gpt2")).params == 124_439_808
    assert resolve_model(ModelRef(hf_config=str(HF / "Qwen2.5-7B" / "config.json"))).params == 7_615_616_512
    calls = []
    fake = types.ModuleType("advisor.tracer")
    fake.trace_module_spec = lambda spec, shape, dtype, loss: calls.append((spec, shape, dtype, loss)) or "traced"
    monkeypatch.setitem(sys.modules, "advisor.tracer", fake)
    ref = ModelRef(module="net.py:build", input_shape=(3, 32, 32), input_dtype="bfloat16")
    assert resolve_model(ref) == "traced"
    assert resolve_model(ref.model_copy(update={"loss": "mse"})) == "traced"
    assert calls == [("net.py:build", (3, 32, 32), "bfloat16", "ce"), ("net.py:build", (3, 32, 32), "bfloat16", "mse")]
    with pytest.raises(UserError):
        resolve_model(ModelRef(name="llama3-8"))


def test_zoo_matches_hf_specs(tmp_path):
    """The zoo builds what the HF config describes, parameter for parameter (meta device)."""
    torch = pytest.importorskip("torch")
    from advisor.zoo import build_network, param_count

    biased = write(tmp_path, dict(cfg("Meta-Llama-3-8B"), attention_bias=True, mlp_bias=True, num_hidden_layers=2))
    paths = [HF / n / "config.json" for n in ("Qwen2.5-7B", "bert-base-uncased-sst2", "vit-base-patch16-224")]
    for path in paths + [biased]:
        spec = spec_from_hf_config(path)
        name = str(path)
        with torch.device("meta"):
            assert param_count(build_network(spec)) == spec.params, name


def test_bert_question_answering_head(tmp_path):
    """BertForQuestionAnswering: no pooler, qa_outputs = Linear(hidden, 2) on every token (transformers
    modeling_bert.py), post-LN like BERT's other heads; its matmul runs on every token."""
    base = cfg("bert-base-uncased")
    qa = spec_from_hf_config(write(tmp_path, dict(base, architectures=["BertForQuestionAnswering"])))
    enc = 109_482_240 - (768 * 768 + 768)  # BertModel(add_pooling_layer=False)
    assert qa.params == enc + 768 * 2 + 2
    assert qa.arch.head == "qa" and qa.arch.is_post_norm and not qa.arch.pooler
    assert qa.task == "extractive question answering (span start/end)"
    mlm = spec_from_hf_config(write(tmp_path, base))
    assert mlm.arch.matmul_params() - qa.arch.matmul_params() == 30522 * 768 + 768 * 768 - 768 * 2


def test_zoo_trains_the_question_answering_head(tmp_path):
    """The zoo's BertForQuestionAnswering (what `advise probe` runs without transformers): the spec's parameters,
    start/end logits on every token, and the mean of the two span cross-entropies over the positions (at random
    init near ln(seq), which an MLM or classification loss is not)."""
    torch = pytest.importorskip("torch")
    import math

    from advisor.zoo import build_trainable, param_count, synthetic_batch

    small = dict(cfg("bert-base-uncased"), architectures=["BertForQuestionAnswering"], num_hidden_layers=2)
    spec = spec_from_hf_config(write(tmp_path, small))
    torch.manual_seed(0)
    model = build_trainable(spec)
    assert param_count(model) == spec.params
    x, y = synthetic_batch(spec, 4, seq_len=64)
    assert y.shape == (4, 2) and int(y.max()) < 64
    assert model.net(x).shape == (4, 64, 2)
    loss = model(x, y)
    loss.backward()
    assert abs(loss.item() - math.log(64)) < 1.0
