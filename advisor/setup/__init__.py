"""The ways of training, one module per family, and the registry that lists them.

    strategies  single, ddp, fsdp, fsdp-keep, hsdp (and dp, the bench's)      kind "strategy"
    precision   autocast (bf16/fp16 copies), pure-bf16 (kahan | plain), fp8   kind "precision" | "compromise"
    checkpointing  selective-ckpt (every k-th block)                          kind "checkpointing"
    optimizers  adamw-8bit, optimizer-in-backward, paged-adamw-8bit           kind "compromise"
    offload     cpu-offload                                                    kind "compromise"
    adapters    lora, qlora                                                    kind "compromise"

``SETUPS`` is in the ladder's risk order (strategies first, then node H's compromises from the
closest arithmetic to a different training): the estimates call the active setups' hooks in this
order (advisor.setup.base), and a run's record lists its compromises in it. What combines with what
is one table, ``advisor.setup.constraints``. docs/design.md "How to add a strategy or a memory
compromise".
"""

from __future__ import annotations

from advisor.config import Strategy, TrainConfig
from advisor.setup.adapters import ADAPTERS
from advisor.setup.base import Setup
from advisor.setup.checkpointing import CHECKPOINTING
from advisor.setup.offload import OFFLOAD
from advisor.setup.optimizers import OPTIMIZERS
from advisor.setup.precision import PRECISIONS
from advisor.setup.strategies import STRATEGIES, Single

# The registry, in the ladder's order: the strategies, then the other setups by their ``order`` (the
# optimizers and offload interleave: paged 8-bit AdamW, states in unified memory whose paging costs PCIe
# time, ranks after CPU offload and the step in backward).
SETUPS: tuple[Setup, ...] = (*STRATEGIES, *sorted((*PRECISIONS, *CHECKPOINTING, *OPTIMIZERS, *OFFLOAD, *ADAPTERS), key=lambda s: s.order))
BY_NAME: dict[str, Setup] = {s.name: s for s in SETUPS}
COMPROMISES: tuple[Setup, ...] = tuple(s for s in SETUPS if s.kind == "compromise")

# Not a setting: the plan holds gradient accumulation at 1 (``Plan.no_accumulation``).
NO_ACCUMULATION = "no-accumulation"
# The TrainConfig fields a compromise changes, in ladder order.
FIELDS: tuple[str, ...] = tuple(dict.fromkeys(s.field for s in COMPROMISES))


def get(name: str) -> Setup:
    return BY_NAME[name]


def active(config: TrainConfig) -> list[Setup]:
    """The setups ``config`` runs, in the registry's order (its strategy first)."""
    return [s for s in SETUPS if s.on(config)]


def strategy_of(config: TrainConfig) -> Single:
    return BY_NAME[config.strategy.value]  # type: ignore[return-value]


def strategy(s: Strategy) -> Single:
    return BY_NAME[s.value]  # type: ignore[return-value]


def setting(name: str, value: object = None) -> dict[str, object]:
    """The config update that applies compromise ``name`` (``value``: LoRA's or QLoRA's rank)."""
    return BY_NAME[name].setting(value)


def has(config: TrainConfig, name: str) -> bool:
    """Whether ``config`` runs compromise ``name`` (LoRA: at any rank, not on a quantized base)."""
    return BY_NAME[name].on(config)


def offloads(config) -> bool:
    """Whether ``config`` (a TrainConfig or a request's pins) keeps the training state in host RAM: FSDP
    runs it, on one process too, and the node's RAM must hold it."""
    return any(s.host_offload and s.on(config) for s in COMPROMISES)


def one_process(config) -> Setup | None:
    """The compromise of ``config`` (a TrainConfig or a request's pins) that runs on one process only
    (the step in backward), or None."""
    return next((s for s in COMPROMISES if s.single_only and s.on(config)), None)


def no_accumulation(config) -> Setup | None:
    """The compromise of ``config`` (a TrainConfig or a request's pins) that runs with accumulation 1 (the
    step in backward: no gradient is kept to accumulate into), or None."""
    return next((s for s in COMPROMISES if s.accum1 and s.on(config)), None)


def bf16_params(config: TrainConfig) -> bool:
    """Whether the weights the matmuls see are bf16 under autocast (FSDP's mixed-precision policy, a
    frozen bf16 base): the activations are then bf16 too (advisor.activations.activation_precision)."""
    return any(s.bf16_params and s.on(config) for s in SETUPS)


def request_settings(req) -> dict[str, object]:
    """The TrainConfig fields the ways of training's own flags set in ``req`` (advisor.setup.base.Option):
    a toggle not given is off, a value not given keeps the config's default."""
    out: dict[str, object] = {}
    for s in SETUPS:
        for o in s.options:
            v = getattr(req, o.field)
            if o.kind == "toggle":
                out[o.field] = bool(v)
            elif v is not None:
                out[o.field] = v
    return out


def shrinking() -> list[Setup]:
    """The compromises that shrink a run per GPU and keep its arithmetic close and its batch (tier "close",
    accumulation allowed; a variant listed under its parent, with no phrase of its own, left out): what a
    probe that ran out of memory suggests, after checkpointing."""
    return [s for s in COMPROMISES if s.tier == "close" and not s.accum1 and s.phrase]


def compromise_words() -> str:
    """The memory compromises in words, in the registry's order, for the help and the decision tree's
    answers ("no accumulation, pure-bf16, 8-bit AdamW, ...")."""
    return ", ".join(["no accumulation"] + [s.phrase for s in COMPROMISES if s.phrase])


def labels(config, compromise: str | None = None, style: str = "short") -> list[str]:
    """The words of a report's training line for the setups ``config`` runs (a TrainConfig or a
    recommendation, whose fields have the same names), in their ``label_rank`` order (0: no label)."""
    shown = sorted((s for s in SETUPS if s.label_rank and s.on(config)), key=lambda s: s.label_rank)
    return [t for t in (s.label(config, compromise, style) for s in shown) if t]


def in_config(config: TrainConfig) -> list[str]:
    """The compromises ``config`` runs, in the ladder's order (empty: the standard setup)."""
    return [s.name for s in COMPROMISES if s.on(config)]
