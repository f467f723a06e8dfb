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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from advisor.config import TrainConfig

# How a setup's note starts when a number of its estimate rests on a prior no run has measured yet: the
# report's header lists such notes beside the calibration (cli/report.py), the JSON has them in `notes`.
UNMEASURED = "assumed, not measured"

if TYPE_CHECKING:
    from advisor.compromise_cost import CompromiseCost
    from advisor.setup.ledger import MemoryLedger, StepLedger


@dataclass(frozen=True)
class Option:
    """A command-line flag a setup brings (cli.flags adds them to the configuration group).

    ``kind``: "number" (a positive integer, checked as the request checks it), "choice" (the values the
    request's field allows) or "toggle" (--flag / --no-flag). ``after``: the flag of the group it follows;
    ``rank`` orders the options that follow the same flag."""

    flag: str
    field: str
    kind: str
    help: str
    metavar: str | None = None
    after: str = "--strategy"
    rank: int = 0


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
    order: ClassVar[int] = 0  # its place in the registry after the strategies (advisor.setup.SETUPS)
    options: ClassVar[tuple[Option, ...]] = ()  # the flags it brings (cli.flags)

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

    # --- its own step cost (advisor.compromise_cost calls these once the standard step is known) ---
    steps_in_backward: ClassVar[bool] = False  # the optimizer steps inside backward (no step after it to overlap)

    def optimizer_cost(self, step: StepLedger, cost: CompromiseCost) -> None:
        """Model an optimizer step that is not one streaming pass: set ``cost.optimizer_s`` (not called
        where a setup keeps the training state in host RAM: the optimizer steps on the CPU)."""

    def extra_cost(self, step: StepLedger, cost: CompromiseCost) -> None:
        """Add what else the step runs to ``cost.extra_s`` (per-parameter calls, host copies, a CPU step)."""

    # --- node H's compromise ladder (rules.compromise builds its Levels from these) ---
    ladder_rank: ClassVar[int] = 0  # its place on the ladder, lowest first (rules.compromise.LEVELS)
    gives_up: ClassVar[str] = ""  # what the user's training gives up
    risk: ClassVar[str] = ""  # its accuracy risk, in words
    source: ClassVar[str] = ""  # the paper or documentation behind it
    accum1: ClassVar[bool] = False  # runs with gradient accumulation 1 only
    accum1_why: ClassVar[str] = ""  # why, in a few words (launcher.oom's retries)
    single_only: ClassVar[bool] = False  # one process only
    numerical_risk: ClassVar[str] = "none"  # its rules.risk.RISK_CLASSES id
    lower_partner: ClassVar[bool] = False  # combined, as a lower level, with the levels that take partners
    takes_partners: ClassVar[bool] = False  # the ladder also tries it with each lower partner
    host_offload: ClassVar[bool] = False  # keeps the training state in host RAM (the node's RAM is checked)
    bf16_params: ClassVar[bool] = False  # under autocast the matmuls see bf16 weights (activations follow)

    def ladder_setting(self, req: Any = None) -> dict[str, object]:
        """The config update the ladder tries (``req``: the request, whose pins it may keep)."""
        return self.setting()

    def ladder_blocked(self, req: Any, base: TrainConfig, model: Any, gpu: Any, refused: Any) -> str | None:
        """Why the ladder cannot offer it, checked before the pins and the table: a reason, "" (offer it,
        no other check) or None (no reason of its own). ``refused(rows)``: the row of the table that
        refuses it among ``rows``, or None."""
        return None

    def risk_class(self, config: TrainConfig) -> str:
        """Its numerical-risk class in ``config`` (rules.risk)."""
        return self.numerical_risk

    def gives_up_in(self, config: TrainConfig) -> str:
        """What it gives up in ``config`` (the update ``config`` steps with)."""
        return self.gives_up

    def pins(self, config: Any) -> dict[str, object]:
        """The request fields its flags pin for ``config`` (rules.recommend.launch_command); a toggle
        that is off is not written."""
        return {o.field: (getattr(config, o.field) or None) if o.kind == "toggle" else getattr(config, o.field)
                for o in self.options}

    # --- how reports show it in the configuration's line (cli, tui) ---
    label_rank: ClassVar[int] = 0  # its place among the labels
    phrase: ClassVar[str] = ""  # its words where the compromises are listed (advisor.setup.compromise_words)

    def label(self, config: Any, compromise: str | None = None, style: str = "short") -> str:
        """Its words in a report's training line ("" for none); ``config``: a TrainConfig or a
        recommendation; ``compromise``: the recommendation's compromise name; ``style``: "short" (the
        estimate's title), "tui" (the TUI's configuration line), "report" (the report's training row) or
        "sentence" (the decision tree's answer)."""
        return ""

    def packages(self, config: Any) -> list[tuple[str, str]]:
        """The optional packages its runtime imports, each with the flag that asks for it (launcher.compromises.checks
        finds them when a launch plans, before any process starts)."""
        return []

    def trainable_params(self, model: Any, config: TrainConfig) -> int | None:
        """The parameters it trains instead of all the model's (None: it does not change them)."""
        return None

    # the precision its runtime needs on CPU when none is pinned, and the note that says so (advisor.starting_config)
    cpu_precision: ClassVar[Any] = None
    cpu_precision_note: ClassVar[str] = ""

    def starting_notes(self, req: Any, config: TrainConfig) -> list[str]:
        """The defaults it applied to ``req``'s starting configuration, to say (advisor.starting_config)."""
        return []

    def largest_trainable(self, model: Any, config: TrainConfig) -> int | None:
        """Elements of the largest tensor it trains, when it changes what trains (None: the model's)."""
        return None

    def record_name(self, config: TrainConfig) -> str:
        """Its name in a run's record (compromise.json)."""
        return self.name

    def __repr__(self) -> str:
        return f"<setup {self.name}>"
