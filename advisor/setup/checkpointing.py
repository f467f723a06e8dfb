"""Selective activation checkpointing: every k-th block checkpointed, the rest keep their activations.

torchtitan's selective layer AC (``--activation_checkpoint.mode selective --activation_checkpoint.selective_ac_option
k``; torchtitan/distributed/activation_checkpoint.py ``_apply_layer_sac``): block i (from 0) is wrapped in a
non-reentrant checkpoint when (i + 1) % k == 0, so floor(L / k) of L blocks keep only their input and recompute
their forward in backward. Between no checkpointing and full (``--grad-ckpt``, k = 1): memory and the recomputed
forward both scale with the checkpointed share. The runtime's side is launcher.model_setups.

Full checkpointing stays a planner knob (``TrainConfig.grad_ckpt``, advisor.activations.backward_bytes); this setup
changes what the ledger's saved activations are once backward_bytes has counted the unchecked step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from advisor.setup.base import Option, Setup

if TYPE_CHECKING:
    from advisor.setup.ledger import MemoryLedger


def checkpointed_blocks(layers: int, every: int) -> int:
    """Blocks torchtitan's selective layer AC wraps: those with (i + 1) % every == 0, floor(layers / every)."""
    return layers // every


def recomputed_share(model, config) -> float:
    """Of the blocks' forward, the share backward runs again: 1 with --grad-ckpt, the checkpointed blocks' share
    with --grad-ckpt-every k (1/k of the stages for a model without a layer count: a traced CNN), else 0."""
    if config.grad_ckpt:
        return 1.0
    k = config.grad_ckpt_every
    if not k:
        return 0.0
    layers = layer_count(model)
    return checkpointed_blocks(layers, k) / layers if layers else 1.0 / k


def checkpointing_words(c) -> str:
    """How reports say a configuration's (or a recommendation's) checkpointing: on (every block), off, or
    "every 2nd block"."""
    every = getattr(c, "grad_ckpt_every", None)
    if every and not c.grad_ckpt:
        return f"every {every}{'nd' if every == 2 else 'rd' if every == 3 else 'th'} block"
    return "on" if c.grad_ckpt else "off"


def checkpointing_pinned(req) -> bool:
    """The user chose the checkpointing (--grad-ckpt, --no-grad-ckpt or --grad-ckpt-every): the planner tries no other."""
    return req.grad_ckpt is not None or bool(req.grad_ckpt_every)


def layer_count(model) -> int:
    if model.arch is not None:
        return model.arch.n_layers
    return model.trace.layers if model.trace is not None else 0


class SelectiveCkpt(Setup):
    name, flag, kind, family = "selective-ckpt", "--grad-ckpt-every K", "checkpointing", "checkpointing"
    field = "grad_ckpt_every"
    order = 9  # not a compromise: after the precisions, before node H's ladder
    options = (Option("--grad-ckpt-every", "grad_ckpt_every", "number",
                      "selective checkpointing: every K-th block (K >= 2; torchtitan's selective layer AC)", metavar="K"),)
    label_rank = 1  # right after the line's compile and checkpointing words

    def label(self, config, compromise=None, style="short") -> str:
        if style in ("tui", "report"):  # those lines say it in their checkpointing word (checkpointing_words)
            return ""
        return f"activation checkpointing of {checkpointing_words(config)}" if style == "sentence" else \
            f"checkpointing {checkpointing_words(config)}"

    def on(self, config) -> bool:
        return bool(config.grad_ckpt_every) and not config.grad_ckpt  # --grad-ckpt (every block) wins
    summary = ("every k-th block checkpointed (torchtitan's selective layer AC): the other blocks keep their "
               "activations, backward recomputes the forward of 1/k of them")

    def saved_terms(self, led: MemoryLedger) -> None:
        prof, mb, k = led.prof, led.config.micro_batch, led.config.grad_ckpt_every
        if prof.layers:
            # The checkpointed blocks keep their input (the residual stream), the others all they save. In
            # backward a checkpointed block's forward is recomputed after the loss's saved tensors and the
            # unchecked blocks above the topmost checkpointed one are freed.
            c = checkpointed_blocks(prof.layers, k)
            above = prof.layers - c * k
            kept = (c * prof.boundary_bytes + (prof.layers - c) * prof.layer_bytes) * mb
            outside = (prof.per_sample_bytes - prof.layers * prof.layer_bytes) * mb
            led.acts = kept + outside + prof.fixed_bytes
            recompute = (prof.layer_bytes - prof.loss_saved_bytes - above * prof.layer_bytes) * mb if c else 0.0
            led.temps = max(led.temps, recompute)
        else:
            # No per-layer profile (a traced CNN): full checkpointing keeps ``ckpt_fraction`` of the saved bytes
            # (calibrated on whole-stage checkpointing); 1/k of the stages checkpointed are assumed to give up
            # 1/k of what full checkpointing gives up (stages of equal size: an assumption, unmeasured).
            saved = prof.per_sample_bytes * mb
            led.acts = saved * (1 - (1 - led.cal.ckpt_fraction) / k) + prof.fixed_bytes

    def ends_grad_moment(self, led: MemoryLedger) -> bool:
        return True  # as with --grad-ckpt: the recomputed blocks' bytes come back while gradients accumulate

    def describe(self, led: MemoryLedger) -> None:
        k, layers = led.config.grad_ckpt_every, led.prof.layers
        led.notes.append(f"selective checkpointing: every {k}th block" + (
            f" ({checkpointed_blocks(layers, k)} of {layers}) keeps only its input and is recomputed in backward"
            if layers else " (stage) is recomputed in backward"))


CHECKPOINTING: tuple[Setup, ...] = (SelectiveCkpt(),)
