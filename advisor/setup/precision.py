"""Number formats of the step: autocast (fp32 master weights, bf16/fp16 copies of the matmul weights
for the step) and pure bf16 (weights, gradients and optimizer states in bf16), whose AdamW step is
Kahan-compensated (``--pure-bf16-update kahan``, cardwise's KahanAdamW) or plain torch AdamW.

fp32 and tf32 are the standard terms (advisor.config.Precision's weight and compute bytes); autocast's
weight copies are counted with the saved activations (advisor.activations: ``fixed_bytes``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from advisor.config import Optimizer, Precision, PureBf16Update
from advisor.setup.base import Setup

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
