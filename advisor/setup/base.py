"""What a way of training declares: its name and flag, its kind and tier, the config setting it is,
and the hooks through which it changes the memory ledger (``advisor.setup.ledger``) and the step.

A setup is a class with class attributes (its declaration) and hook methods that do nothing by
default; one instance of each lives in the registry (``advisor.setup.SETUPS``), in the ladder's
order. The estimate calls every *active* setup's hook at each phase, in that order, after the
standard terms of the phase: a setup overwrites or adds to the ledger's parts, never recomputes
the others'. docs/design.md "How to add a strategy or a memory compromise".

Setups never import hardware detection (advisor.hardware's NVML and /proc readers): they see a
``HardwareSpec`` the caller built (``Any`` in their annotations; pyproject.toml's import contract).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from advisor.config import TrainConfig

if TYPE_CHECKING:
    from advisor.setup.ledger import MemoryLedger, StepLedger


class Setup:
    """One way of training. Subclasses set the declaration and override the hooks they need."""

    name: ClassVar[str]  # as reports, recommendation.compromise and compromise.json say it
    flag: ClassVar[str]  # the flag that asks for it
    kind: ClassVar[str]  # "strategy" | "precision" | "checkpointing" | "compromise"
    family: ClassVar[str]  # the module it lives in: strategies, precision, checkpointing, optimizers, offload, adapters
    tier: ClassVar[str] = ""  # the ladder's tier of a compromise: exact | close | different
    field: ClassVar[str]  # the TrainConfig field it sets
    value: ClassVar[object] = None  # the value it sets; None: any truthy value (LoRA's rank)
    summary: ClassVar[str] = ""

    def on(self, config: TrainConfig) -> bool:
        """Whether ``config`` runs this way of training."""
        current = getattr(config, self.field)
        return bool(current) if self.value is None else current == self.value

    def setting(self, value: object = None) -> dict[str, object]:
        """The config update that turns it on (``value``: a rank, for the adapters)."""
        return {self.field: self.value if value is None else value}

    # --- memory (advisor.memory.estimate_memory calls these in this order) ---
    def bytes_terms(self, led: MemoryLedger) -> None:
        """Weights, the gradients' dtype, the optimizer states (before sharding)."""

    def resident_terms(self, led: MemoryLedger) -> None:
        """What leaves torch's allocator (unified memory)."""

    def activation_terms(self, led: MemoryLedger) -> None:
        """Autocast copies, gathered units: what backward holds besides the saved activations."""

    def saved_terms(self, led: MemoryLedger) -> None:
        """What backward keeps of the saved activations, and its transients (selective checkpointing)."""

    def ends_grad_moment(self, led: MemoryLedger) -> bool:
        """True where the gradients are not all kept to one plain step (advisor.memory's grad moment)."""
        return False

    def gradient_terms(self, led: MemoryLedger) -> None:
        """The gradients alive at each moment, buckets, what moves to host RAM."""

    def after_fit(self, led: MemoryLedger) -> None:
        """Terms that fill the room the peak leaves (paged states)."""

    def describe(self, led: MemoryLedger) -> None:
        """The closing notes (called from the most specific setup to the broadest)."""

    # --- step time (advisor.throughput.estimate_throughput) ---
    def dispatch_terms(self, step: StepLedger) -> None:
        """Change one micro-batch's host dispatch time (before GPU and host are combined)."""

    def optimizer_terms(self, step: StepLedger) -> None:
        """Change the optimizer's streaming pass and the bytes of the gradients the collectives move."""

    def step_terms(self, step: StepLedger) -> None:
        """Add the step's collectives (strategies) and what else the step runs."""

    def __repr__(self) -> str:
        return f"<setup {self.name}>"
