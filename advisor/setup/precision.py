"""Number formats of the step: autocast (fp32 master weights, bf16/fp16 copies of the matmul weights
for the step) and pure bf16 (weights, gradients and optimizer states in bf16), whose AdamW step is
Kahan-compensated (``--pure-bf16-update kahan``, cardwise's KahanAdamW) or plain torch AdamW.

fp32 and tf32 are the standard terms (advisor.config.Precision's weight and compute bytes); autocast's
weight copies are counted with the saved activations (advisor.activations: ``fixed_bytes``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from advisor.config import Optimizer, Precision, PureBf16Update
from advisor.setup.base import Option, Setup

if TYPE_CHECKING:
    from advisor.setup.ledger import MemoryLedger, StepLedger


class Autocast(Setup):
    name, flag, kind, family = "autocast", "--precision bf16|fp16", "precision", "precision"
    field = "precision"
    summary = "fp32 master weights; matmuls in bf16/fp16 on per-step copies of the weights"

    def on(self, config) -> bool:
        return config.precision.autocast


class PureBf16(Setup):
    name, flag, kind, family, tier = "pure-bf16", "--precision pure-bf16", "compromise", "precision", "close"
    field, value = "precision", Precision.pure_bf16
    summary = ("weights, gradients and optimizer states in bf16; the AdamW update Kahan-compensated "
               "(--pure-bf16-update kahan) or plain")
    variants = tuple(u.value for u in PureBf16Update)
    phrase = "pure-bf16"
    options = (Option("--pure-bf16-update", "pure_bf16_update", "choice",
                      "with --precision pure-bf16: kahan = cardwise's KahanAdamW (default), "
                      "plain = torch AdamW on bf16 weights (what model.to(torch.bfloat16) scripts run)", after="--optimizer"),)
    order, ladder_rank, lower_partner, numerical_risk = 10, 30, True, "compensated-bf16"
    gives_up = ("fp32 master weights: weights, gradients and AdamW states in bf16, the update compensated "
                "(Kahan summation, cardwise's KahanAdamW)")
    risk = "low-medium: Kahan-compensated bf16 updates track fp32 closely; plain bf16 would round small updates away"
    source = "Zamirai et al. 2020 (Revisiting BFloat16 Training)"

    def starting_notes(self, req, config) -> list[str]:
        if req.pure_bf16_update is None and config.optimizer is Optimizer.adamw:
            return ["pure-bf16 update kahan (cardwise's KahanAdamW; --pure-bf16-update plain for torch AdamW on bf16 weights)"]
        return []

    def pins(self, config) -> dict[str, object]:
        # only plain is written: kahan is the default, and the flag needs --precision pure-bf16
        plain = self.on(config) and config.pure_bf16_update is PureBf16Update.plain
        return {"pure_bf16_update": config.pure_bf16_update if plain else None}

    def ladder_blocked(self, req, base, model, gpu, refused) -> str | None:
        if req.precision is not None or not gpu.supports_bf16:
            return "the precision is pinned" if req.precision is not None else f"{gpu.name} has no bf16"
        return None

    def risk_class(self, config) -> str:
        # stepped by bitsandbytes' 8-bit AdamW or by --pure-bf16-update plain: uncompensated (what
        # launcher.compromises builds)
        if config.optimizer.eight_bit or config.pure_bf16_update is PureBf16Update.plain:
            return "uncompensated-bf16"
        return self.numerical_risk

    def gives_up_in(self, config) -> str:
        # Kahan-compensated only with cardwise's KahanAdamW; with bitsandbytes' 8-bit AdamW (what
        # launcher.compromises builds) or with --pure-bf16-update plain the bf16 weights take the update
        # uncompensated
        if config.optimizer.eight_bit:
            return ("fp32 master weights: weights and gradients in bf16, stepped by bitsandbytes' "
                    f"{'Paged' if config.optimizer is Optimizer.paged_adamw_8bit else ''}AdamW8bit without "
                    "compensation: updates below bf16's resolution round away")
        if config.pure_bf16_update is PureBf16Update.plain:
            return ("fp32 master weights: weights, gradients and AdamW states in bf16, plain torch AdamW "
                    "(--pure-bf16-update plain): updates below bf16's resolution round away")
        return self.gives_up

    def bytes_terms(self, led: MemoryLedger) -> None:
        led.gb = 2  # gradients in the weight dtype

    def describe(self, led: MemoryLedger) -> None:
        config = led.config
        led.notes.append(
            "pure-bf16: weights, gradients and optimizer states in bf16, updates compensated (Kahan summation)"
            if config.kahan else
            f"pure-bf16 with bitsandbytes' {config.optimizer.value}: bf16 weights and gradients, 8-bit states, "
            "no compensation (updates below bf16's resolution round away)" if config.optimizer.eight_bit else
            "pure-bf16 with SGD: weights, gradients and momentum in bf16, no compensation"
            if config.optimizer is Optimizer.sgd else
            "pure-bf16 with plain torch AdamW (--pure-bf16-update plain): weights, gradients and optimizer "
            "states in bf16, no compensation buffer (updates below bf16's resolution round away)")

    def optimizer_terms(self, step: StepLedger) -> None:
        step.opt_s *= 0.5  # the optimizer's streaming pass moves bf16, half the fp32 bytes
        step.grad_bytes = step.nt * 2


PRECISIONS: tuple[Setup, ...] = (Autocast(), PureBf16())


def precision_text(config) -> str:
    """The configuration's number formats in words (the decision tree's answers)."""
    return {
        Precision.bf16: "bf16 autocast with fp32 master weights",
        Precision.fp16: "fp16 autocast + GradScaler with fp32 master weights",
        Precision.pure_bf16: ("pure bf16 (weights and states in bf16, "
                              + ("plain AdamW update)" if config.pure_bf16_update is PureBf16Update.plain
                                 # bitsandbytes steps the bf16 weights itself: no compensation (PureBf16.risk_class)
                                 else "uncompensated 8-bit update)" if config.optimizer.eight_bit
                                 else "Kahan-compensated update)")),
        Precision.fp32: "fp32",
        Precision.tf32: "tf32 matmuls, fp32 storage",
    }[config.precision]
