"""LoRA adapters through peft (``--lora-rank R``): a different training, of the adapters only.

How peft users set it up, and what ``advise estimate`` models (issue #12's measured runs): the
frozen base cast to bf16 before wrapping, ``LoraConfig(r=R, lora_alpha=2R, lora_dropout=0)`` on
every linear projection of attention and MLP, adapters kept in fp32 (peft's
``autocast_adapter_dtype``), the forward under bf16 autocast (the plan's ``mixed_precision``).
lora_alpha = 2r is the common choice (Raschka, "Practical Tips for Finetuning LLMs Using LoRA",
2023; the QLoRA paper's configs use alpha/r = 2 for small ranks as well), and dropout 0 keeps the
step deterministic and cheap (Hu et al. 2021 use none for GPT-3).

Target modules, by the names each implementation gives its projections:
- cardwise's own models (advisor.zoo): attention ``q k v o``, MLP ``up gate down``;
- Hugging Face llama / qwen2 / mistral (and most decoders since): ``q_proj k_proj v_proj o_proj
  gate_proj up_proj down_proj``;
- Hugging Face gpt2: ``c_attn c_proj c_fc``, ``Conv1D`` layers whose weight is (in, out): peft
  needs ``fan_in_fan_out=True``;
- Hugging Face bert: ``query key value dense``.
The names found in the model decide; a model with none of them is refused.
"""

from __future__ import annotations

from pathlib import Path

import torch

ZOO_TARGETS = ("q", "k", "v", "o", "up", "gate", "down")
HF_DECODER_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
GPT2_TARGETS = ("c_attn", "c_proj", "c_fc")
BERT_TARGETS = ("query", "key", "value", "dense")
FAMILIES = (ZOO_TARGETS, HF_DECODER_TARGETS, GPT2_TARGETS, BERT_TARGETS)


def _projection_layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """Leaf modules peft can adapt (``nn.Linear`` and transformers' ``Conv1D``), by full name."""
    found = {}
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D":
            found[name] = m
    return found


def target_modules(model: torch.nn.Module) -> tuple[list[str], bool]:
    """(the target names present in ``model``, whether they are gpt2-style ``Conv1D``); ValueError if none."""
    layers = _projection_layers(model)
    suffixes = {name.rsplit(".", 1)[-1] for name in layers}
    for family in FAMILIES:
        names = [t for t in family if t in suffixes]
        if names:
            conv1d = any(type(m).__name__ == "Conv1D" for n, m in layers.items() if n.rsplit(".", 1)[-1] in names)
            return names, conv1d
    raise ValueError("no attention or MLP projection found to put LoRA adapters on (looked for "
                     + ", ".join("/".join(f) for f in FAMILIES) + ")")


def quantize_4bit(model: torch.nn.Module, names: list[str], compute_dtype: torch.dtype,
                  device: torch.device | None = None) -> int:
    """QLoRA's base (Dettmers et al. 2023): every ``nn.Linear`` named in ``names`` replaced by bitsandbytes'
    ``Linear4bit`` (NF4, double quantization, blocksize 64: what ``BitsAndBytesConfig(load_in_4bit=True,
    bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)`` builds), frozen; the weights are quantized
    when they move to ``device``. Returns how many layers were replaced."""
    import bitsandbytes as bnb

    count = 0
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if child_name not in names or type(child) is not torch.nn.Linear:
                continue
            q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                  compute_dtype=compute_dtype, compress_statistics=True, quant_type="nf4")
            q.weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False, compress_statistics=True,
                                         quant_type="nf4")
            if child.bias is not None:
                q.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
            setattr(parent, child_name, q.to(device) if device is not None else q)
            count += 1
    return count


def apply_lora(model: torch.nn.Module, rank: int, base_dtype: torch.dtype = torch.bfloat16, *,
               quantize_base: str | None = None, device: torch.device | None = None) -> torch.nn.Module:
    """The peft model: ``model`` frozen and cast to ``base_dtype`` (its projections in 4-bit NF4 with
    ``quantize_base="4bit"``: QLoRA), fp32 adapters of rank ``rank`` on its projections."""
    from peft import LoraConfig, get_peft_model

    names, conv1d = target_modules(model)
    if quantize_base and conv1d:
        raise ValueError("--quantize-base 4bit replaces nn.Linear projections; this model's are transformers' "
                         "Conv1D (gpt2): load it with BitsAndBytesConfig instead, or drop --quantize-base")
    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules=names,
                        fan_in_fan_out=conv1d, bias="none")
    model = model.to(base_dtype)
    if quantize_base:
        if not quantize_4bit(model, names, base_dtype, device):
            raise ValueError(f"--quantize-base 4bit found no nn.Linear among {', '.join(names)} to quantize")
    model = get_peft_model(model, config, autocast_adapter_dtype=True)
    for p in model.parameters():  # adapters in fp32 whatever peft's version does by default
        if p.requires_grad and p.dtype != torch.float32:
            p.data = p.data.float()
    return model


def trainable_summary(model: torch.nn.Module) -> dict:
    """Counts and dtypes of what trains and what is frozen (for the run's final record)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    frozen = [p for p in model.parameters() if not p.requires_grad]
    return {"trainable_params": sum(p.numel() for p in trainable), "frozen_params": sum(p.numel() for p in frozen),
            "adapter_dtype": str(trainable[0].dtype).replace("torch.", "") if trainable else None,
            "base_dtype": str(frozen[0].dtype).replace("torch.", "") if frozen else None}

