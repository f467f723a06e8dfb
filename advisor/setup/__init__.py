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

# The registry, in the ladder's order. The optimizers and offload interleave: paged 8-bit AdamW (states
# in unified memory, paging costs PCIe time) ranks after CPU offload and the step in backward.
_OPT = {s.name: s for s in OPTIMIZERS}
SETUPS: tuple[Setup, ...] = (*STRATEGIES, *PRECISIONS, *CHECKPOINTING, _OPT["adamw-8bit"], _OPT["optimizer-in-backward"], *OFFLOAD,
                             _OPT["paged-adamw-8bit"], *ADAPTERS)
BY_NAME: dict[str, Setup] = {s.name: s for s in SETUPS}
COMPROMISES: tuple[Setup, ...] = tuple(s for s in SETUPS if s.kind == "compromise")

# Not a setting: the plan holds gradient accumulation at 1 (``Plan.no_accumulation``).
NO_ACCUMULATION = "no-accumulation"
# The compromises' names (recommendation.compromise, compromise.json).
PURE_BF16, ADAMW_8BIT, OPTIMIZER_IN_BACKWARD, CPU_OFFLOAD, PAGED_ADAMW_8BIT, LORA, QLORA = (s.name for s in COMPROMISES)
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


def in_config(config: TrainConfig) -> list[str]:
    """The compromises ``config`` runs, in the ladder's order (empty: the standard setup)."""
    return [s.name for s in COMPROMISES if s.on(config)]
