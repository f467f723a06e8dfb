"""The names of decision node H's memory compromises and the training setting each one is.

One list for the two layers that name compromises and may not import each other: the rules'
ladder (``rules.compromise.LEVELS``, which adds risk, sources and what each gives up) and the
runtime's record of what ran (``launcher.compromises.names``, ``compromise.json``).
"""

from __future__ import annotations

from advisor.config import Optimizer, Precision, TrainConfig

# Not a setting: the plan holds gradient accumulation at 1 (``Plan.no_accumulation``).
NO_ACCUMULATION = "no-accumulation"
PURE_BF16 = "pure-bf16"
ADAMW_8BIT = "adamw-8bit"
OPTIMIZER_IN_BACKWARD = "optimizer-in-backward"
CPU_OFFLOAD = "cpu-offload"
PAGED_ADAMW_8BIT = "paged-adamw-8bit"
LORA = "lora"
QLORA = "qlora"  # LoRA on a 4-bit NF4 base: lora_rank and quantize_base together

# bitsandbytes' 8-bit optimizers under FSDP: never measured here, and upstream reports illegal memory
# accesses (bitsandbytes-foundation/bitsandbytes#1633 "illegal memory access with FSDP2", open;
# #89 "8-bit optimizers dont work with FSDP", open).
EIGHT_BIT_FSDP = ("bitsandbytes' 8-bit optimizers are not combined with FSDP: untested here, and upstream reports "
                  "illegal memory accesses (bitsandbytes-foundation/bitsandbytes#1633, #89)")

# The compromises that are a TrainConfig setting, in the ladder's (risk) order: name -> (field, the
# value the compromise sets). LoRA's value is its rank, chosen by the ladder (rules.compromise.LORA_RANK)
# or the user; None here: any rank.
SETTINGS: dict[str, tuple[str, object]] = {
    PURE_BF16: ("precision", Precision.pure_bf16),
    ADAMW_8BIT: ("optimizer", Optimizer.adamw_8bit),
    OPTIMIZER_IN_BACKWARD: ("optimizer_in_backward", True),
    CPU_OFFLOAD: ("cpu_offload", True),
    PAGED_ADAMW_8BIT: ("optimizer", Optimizer.paged_adamw_8bit),
    LORA: ("lora_rank", None),
    QLORA: ("quantize_base", "4bit"),
}

# The TrainConfig fields a compromise changes, in ladder order.
FIELDS: tuple[str, ...] = tuple(dict.fromkeys(field for field, _ in SETTINGS.values()))


def setting(name: str, value: object = None) -> dict[str, object]:
    """The config update that applies compromise ``name`` (``value``: LoRA's or QLoRA's rank)."""
    field, fixed = SETTINGS[name]
    if name == QLORA:
        return {"lora_rank": value, field: fixed}
    return {field: fixed if value is None else value}


def has(config: TrainConfig, name: str) -> bool:
    """Whether ``config`` runs compromise ``name`` (LoRA: at any rank)."""
    field, value = SETTINGS[name]
    if name == LORA and config.quantize_base:  # adapters on a quantized base are QLoRA's
        return False
    current = getattr(config, field)
    return bool(current) if value is None else current == value


def in_config(config: TrainConfig) -> list[str]:
    """The compromises ``config`` runs, in the ladder's order (empty: the standard setup)."""
    return [name for name in SETTINGS if has(config, name)]
