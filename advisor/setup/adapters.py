"""Adapters: LoRA (rank-r adapters on attention and MLP projections, the base frozen in bf16; Hu et
al. 2021) and QLoRA (the same on a base whose projections are 4-bit NF4; Dettmers et al. 2023).

* LoRA: peft on every linear projection of attention and MLP, rank r: A is r x in, B is out x r.
* QLoRA (``--quantize-base 4bit``): those projections' frozen weights in 4-bit NF4 (bitsandbytes
  ``Linear4bit``, blocksize 64) with double quantization: 0.5 byte a weight plus one 8-bit absmax
  per 64 weights and one fp32 constant per 256 of those (Dettmers et al. 2023, sec. 3: 0.127 bits a
  weight instead of 0.5); embeddings, the LM head and norms stay bf16.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from advisor.config import Precision
from advisor.errors import UserError
from advisor.models import ModelSpec
from advisor.setup.base import Option, Setup

if TYPE_CHECKING:
    from advisor.setup.ledger import MemoryLedger

# NF4 with double quantization, bytes per quantized weight (bitsandbytes Linear4bit defaults:
# blocksize 64, compress_statistics=True -> nested absmax blocks of 256): 4/8 + 1/64 + 4/(64 x 256).
NF4_BLOCK = 64
NF4_NESTED_BLOCK = 256
NF4_BYTES = 0.5 + 1.0 / NF4_BLOCK + 4.0 / (NF4_BLOCK * NF4_NESTED_BLOCK)
# Rank of LoRA adapters the ladder offers (Hu et al. 2021 report r = 4-64 matching full fine-tuning
# on GPT-3 adaptation; 16 is peft's documented common choice).
OFFERED_RANK = 16


class Lora(Setup):
    name, flag, kind, family, tier = "lora", "--lora-rank R", "compromise", "adapters", "different"
    field, value = "lora_rank", None
    summary = "rank-r adapters on every attention and MLP projection; the bf16 base frozen"
    order, ladder_rank = 60, 70
    bf16_params = True  # the runtime casts the frozen base to bf16 before peft wraps it
    # on CPU too: the frozen bf16 base runs under bf16 autocast (launcher.compromises.lora)
    cpu_precision, cpu_precision_note = Precision.bf16, "precision bf16 for --lora-rank (frozen bf16 base, fp32 adapters, bf16 autocast)"
    phrase = "LoRA"
    options = (Option("--lora-rank", "lora_rank", "number", "LoRA rank (train adapters only)", metavar="R", rank=1),)
    gives_up = (f"the full fine-tune: rank-{OFFERED_RANK} adapters on every attention and MLP projection are trained, "
                "the base (bf16) stays frozen")
    risk = "a different training: adapters only; quality can trail a full fine-tune on hard tasks"
    source = "Hu et al. 2021 (LoRA); Biderman et al. 2024 (LoRA Learns Less and Forgets Less)"

    def ladder_setting(self, req=None) -> dict[str, object]:
        return self.setting(OFFERED_RANK)

    def ladder_blocked(self, req, base, model, gpu, refused) -> str | None:
        if req.lora_rank is not None or model.arch is None:
            return "--lora-rank is pinned" if req.lora_rank is not None else "LoRA needs a transformer"
        return None

    label_rank = 2

    def label(self, config, compromise=None, style="short") -> str:
        if style == "sentence":
            return f"LoRA rank {config.lora_rank}"
        # the TUI names QLoRA when the ladder chose it (a pinned --quantize-base shows as LoRA)
        return f"{'QLoRA' if (compromise or '').endswith(Qlora.name) else 'LoRA'} r{config.lora_rank}"

    def on(self, config) -> bool:
        # adapters on a 4-bit base are QLoRA's (a recommendation has no quantize_base: its label is LoRA's)
        return config.lora_rank is not None and not getattr(config, "quantize_base", None)  # adapters on a 4-bit base are QLoRA's

    def quantized(self, model: ModelSpec) -> int:
        return 0

    def packages(self, config) -> list[tuple[str, str]]:
        return [("peft", f"--lora-rank {config.lora_rank}")]

    def trainable_params(self, model: ModelSpec, config) -> int:
        return lora_params(model, config.lora_rank)

    def largest_trainable(self, model: ModelSpec, config) -> int | None:
        if model.arch is None:
            return None
        return config.lora_rank * max(max(i, o) for i, o in lora_shapes(model))  # the largest adapter matrix

    def bytes_terms(self, led: MemoryLedger) -> None:
        # peft users load the frozen base in bf16; adapters (and their gradients, states) stay fp32.
        p = led.config.precision
        base_b = 2 if p is not Precision.fp32 and p is not Precision.tf32 else 4
        q = self.quantized(led.model)
        led.weights = ((led.n - led.nt - q) * base_b + q * NF4_BYTES + led.nt * 4) / led.shard
        led.gb = 4
        if q:
            # bitsandbytes' 4-bit matmul for training dequantizes the projection's weight to bf16, then
            # runs the GEMM (MatMul4Bit): one projection's bf16 copy at a time.
            led.dequantized = max(i * o for i, o in lora_shapes(led.model)) * 2.0

    def activation_terms(self, led: MemoryLedger) -> None:
        if led.config.precision.autocast and led.model.arch is not None:
            # autocast copies only fp32 weights: the bf16 base passes through, the fp32 adapters are cast
            led.copies = 2.0 * led.nt

    def ends_grad_moment(self, led: MemoryLedger) -> bool:
        return True

    def record_name(self, config) -> str:
        return f"{self.name}-r{config.lora_rank}"  # the record names the rank

    def describe(self, led: MemoryLedger) -> None:
        led.notes.append(f"LoRA rank {led.config.lora_rank}: {led.nt:,} trainable of {led.n:,} parameters; frozen base "
                         "in bf16, adapters fp32")


class Qlora(Lora):
    name, flag = "qlora", "--lora-rank R --quantize-base 4bit"
    field, value = "quantize_base", "4bit"
    summary = "LoRA on a frozen base whose projections are 4-bit NF4 (double quantization), dequantized per GEMM"
    order, ladder_rank, numerical_risk, phrase = 70, 80, "quantized-states", ""
    options = (Option("--quantize-base", "quantize_base", "choice",
                      "QLoRA: LoRA's frozen base in 4-bit NF4 (bitsandbytes; needs --lora-rank)", rank=2),)
    gives_up = (f"the full fine-tune and the bf16 base: rank-{OFFERED_RANK} adapters are trained on a frozen base whose "
                "projections are quantized to 4-bit NF4 (bitsandbytes Linear4bit, double quantization) and dequantized "
                "for every GEMM")
    risk = "a different training: adapters only, on a 4-bit base (Dettmers et al. 2023 report 16-bit LoRA quality)"
    source = "Dettmers et al. 2023 (QLoRA: Efficient Finetuning of Quantized LLMs)"

    def ladder_setting(self, req=None) -> dict[str, object]:
        # the base of the rank the user pinned, if any
        return self.setting(req.lora_rank if req is not None and req.lora_rank is not None else OFFERED_RANK)

    def ladder_blocked(self, req, base, model, gpu, refused) -> str | None:
        if req.quantize_base is not None or model.arch is None:
            return "--quantize-base is pinned" if req.quantize_base is not None else "QLoRA needs a transformer"
        if not gpu.supports_bf16:
            return f"{gpu.name} has no bf16 (QLoRA computes in bf16)"
        return ""  # no other check

    def on(self, config) -> bool:
        return getattr(config, self.field, None) == self.value

    def setting(self, value: object = None) -> dict[str, object]:
        return {"lora_rank": value, self.field: self.value}

    def quantized(self, model: ModelSpec) -> int:
        return quantized_base_params(model)

    def packages(self, config) -> list[tuple[str, str]]:
        # bitsandbytes >= 0.45 runs NF4 on CPU too (its torch fallback): CPU runs test the path
        return [("bitsandbytes", "--quantize-base 4bit"), *super().packages(config)]

    def record_name(self, config) -> str:
        return self.name

    def describe(self, led: MemoryLedger) -> None:
        if led.dequantized:
            led.notes.append(f"QLoRA: {quantized_base_params(led.model):,} base weights in 4-bit NF4 with double "
                             f"quantization ({NF4_BYTES:.3f} bytes each); each projection is dequantized to bf16 for "
                             "its GEMMs")
        super().describe(led)


ADAPTERS: tuple[Setup, ...] = (Lora(), Qlora())


def quantized_base_params(model: ModelSpec) -> int:
    """Frozen weights QLoRA quantizes: the adapted projections' (every layer's attention and MLP)."""
    return model.arch.n_layers * sum(i * o for i, o in lora_shapes(model))


def lora_shapes(model: ModelSpec) -> list[tuple[int, int]]:
    """(in, out) of the linear projections of one layer that LoRA adapts: q, k, v, o and the MLP's."""
    return model.arch.linear_shapes()


def lora_params(model: ModelSpec, rank: int) -> int:
    if model.arch is None:
        raise UserError("LoRA estimates need a transformer (catalog LLM/encoder/ViT or --hf-config)",
                        fix="drop --lora-rank for this model")
    return model.arch.n_layers * rank * sum(i + o for i, o in lora_shapes(model))
