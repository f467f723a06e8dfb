"""The catalog: exact public parameter counts, closed form == the zoo's modules, no torch on lookup."""

from __future__ import annotations


import pytest

from advisor.catalog import CNN_NAMES, TRACED_JSON, _TRANSFORMERS, catalog_model, catalog_names
from advisor.errors import UserError

ISSUE_NAMES = ["resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "vit-b-16", "vit-l-16", "vit-h-14",
               "bert-base", "bert-large", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "llama3.2-1b", "llama3.2-3b",
               "llama3-8b", "llama3-70b", "llama2-7b", "llama2-13b", "mistral-7b", "qwen2.5-7b", "mini-transformer"]

# Published counts: HF transformers (model.num_parameters()) and torchvision's model docs.
PUBLIC = {
    "gpt2": 124_439_808, "gpt2-medium": 354_823_168, "gpt2-large": 774_030_080, "gpt2-xl": 1_557_611_200,
    "llama3.2-1b": 1_235_814_400, "llama3.2-3b": 3_212_749_824, "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496, "llama2-7b": 6_738_415_616, "llama2-13b": 13_015_864_320,
    "mistral-7b": 7_241_732_096, "qwen2.5-7b": 7_615_616_512,
    "bert-base": 109_514_298, "bert-large": 335_174_458,  # BertForMaskedLM
    "vit-b-16": 86_567_656, "vit-l-16": 304_326_632, "vit-h-14": 632_045_800,  # torchvision
}
CNN_PUBLIC = {"resnet18": 11_689_512, "resnet34": 21_797_672, "resnet50": 25_557_032, "resnet101": 44_549_160,
              "resnet152": 60_192_808}

needs_traced = pytest.mark.skipif(not TRACED_JSON.exists(), reason="advisor/data/traced.json not generated")


def test_issue_names_all_there():
    assert set(ISSUE_NAMES) <= set(catalog_names())
    assert len(catalog_names()) == len(set(catalog_names()))


def test_llama3_8b_exact():
    assert catalog_model("llama3-8b").params == 8_030_261_248
    assert catalog_model(" Llama3-8B ").name == "llama3-8b"  # case and spaces forgiven


@pytest.mark.parametrize("name", PUBLIC)
def test_public_counts(name):
    spec = catalog_model(name)
    assert spec.params == PUBLIC[name] == spec.arch.params()


@needs_traced
@pytest.mark.parametrize("name", CNN_NAMES)
def test_cnn_counts_from_trace(name):
    spec = catalog_model(name)
    assert spec.params == CNN_PUBLIC[name]
    assert spec.trace is not None and spec.family == "cnn"


def test_mini_transformer_is_small_classifier():
    spec = catalog_model("mini-transformer")
    assert spec.params < 100_000_000 and spec.arch.head == "cls" and spec.arch.num_labels == 2


def test_semantics():
    for name in catalog_names():
        if name in CNN_NAMES and not TRACED_JSON.exists():
            continue
        spec = catalog_model(name)
        assert spec.source == "catalog" and spec.task
        if spec.family == "decoder":
            assert spec.arch.head == "lm"
        elif name.startswith("bert"):
            assert spec.arch.head == "mlm"
        elif spec.is_vision:
            assert spec.task == "1000-class" and spec.default_image_size == 224
            if spec.arch is not None:
                assert spec.arch.num_labels == 1000


def test_unknown_model_suggests():
    with pytest.raises(UserError) as info:
        catalog_model("llama3-8")
    assert "llama3-8b" in info.value.fix and "advise models" in info.value.fix


@pytest.mark.parametrize("name", list(_TRANSFORMERS))
def test_closed_form_equals_zoo(name):
    """Every catalog transformer: TransformerArch.params() == the zoo module built on the meta device."""
    torch = pytest.importorskip("torch")
    from advisor.zoo import build_network, param_count

    spec = catalog_model(name)
    with torch.device("meta"):
        net = build_network(spec)
    assert param_count(net) == spec.params
    for size in (384,) if spec.arch.patch_size else ():  # ViT positions follow the image size
        with torch.device("meta"):
            net = build_network(spec, image_size=size)
        assert param_count(net) == spec.arch.embedding_params(size) + spec.params - spec.arch.embedding_params()
