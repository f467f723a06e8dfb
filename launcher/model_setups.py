"""What a way of training changes in the model itself, keyed by its setup's name (advisor.setup).

``launcher.runtime.Runtime.setup_model`` calls ``apply`` after the plan's dtype and layout choices and
before LoRA, ``prepare`` (DDP/FSDP) and compile: the order torchtitan uses (model converters such as
float8, then activation checkpointing, then compile, then FSDP: torchtitan/models/llama3/parallelize.py).

- ``fp8``: torchao's ``convert_to_float8_training`` on the Linear layers of the model's repeated blocks
  whose both dimensions are multiples of 16 (``torch._scaled_mm``'s requirement; torchao's own
  ``_auto_filter_for_recipe`` skips the rest too), tensorwise dynamic scaling (torchao's default
  ``Float8LinearConfig``). The output head and anything outside the blocks stay bf16 under autocast, as
  torchtitan leaves its ``output`` projection (float8 ``filter_fqns`` default ["output"]).
- ``selective-ckpt``: every k-th block wrapped in ``checkpoint_wrapper`` (non-reentrant
  ``torch.utils.checkpoint``), torchtitan's selective layer AC: block i (from 0) when (i + 1) % k == 0
  (torchtitan/distributed/activation_checkpoint.py, ``_apply_layer_sac``: a counter from 1, ``count % freq == 0``).

The blocks are the model's longest ``nn.ModuleList`` of modules of one class: cardwise's zoo ``blocks``
(ResNet: its ``stages``), transformers' ``layers`` / ``h`` / ``encoder.layer``. ``CheckpointWrapper``
strips its own prefix from state-dict keys, so checkpoints and final weights keep their names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from advisor.plan import Plan

if TYPE_CHECKING:
    import torch

# float8 GEMMs need both dimensions of the weight to be multiples of 16 (torch._scaled_mm; torchao
# float8_linear_utils._auto_filter_for_tensorwise: "All dims must be divisible by 16").
FP8_DIM_MULTIPLE = 16
TORCHAO_FIX = "pip install torchao (or pip install 'cardwise[fp8]')"


def repeated_blocks(model: torch.nn.Module) -> torch.nn.ModuleList | None:
    """The longest ModuleList whose children are all of one class (two at least; a checkpoint-wrapped block counts
    as the class it wraps), or None."""
    import torch

    best = None
    for m in model.modules():
        kinds = {type(getattr(c, "_checkpoint_wrapped_module", c)) for c in m} if isinstance(m, torch.nn.ModuleList) else ()
        if isinstance(m, torch.nn.ModuleList) and len(m) >= 2 and len(kinds) == 1:
            if best is None or len(m) > len(best):
                best = m
    return best


def checkpointed_indices(n_blocks: int, every: int) -> list[int]:
    """The blocks selective checkpointing wraps: torchtitan's (i + 1) % every == 0 (floor(n / every) of them)."""
    return [i for i in range(n_blocks) if (i + 1) % every == 0]


def checkpoint_every(model: torch.nn.Module, every: int) -> list[int]:
    """Wrap every ``every``-th repeated block in a non-reentrant checkpoint; returns the wrapped indices."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

    blocks = repeated_blocks(model)
    if blocks is None:
        raise ValueError("selective checkpointing needs a model with repeated blocks (an nn.ModuleList of one class)")
    wrapped = checkpointed_indices(len(blocks), every)
    for i in wrapped:
        # preserve_rng_state (the default): the recomputed forward draws the same dropout masks.
        blocks[i] = checkpoint_wrapper(blocks[i], checkpoint_impl=CheckpointImpl.NO_REENTRANT)
    return wrapped


def fp8_convertible(module: torch.nn.Module) -> bool:
    import torch

    return (isinstance(module, torch.nn.Linear) and module.in_features % FP8_DIM_MULTIPLE == 0
            and module.out_features % FP8_DIM_MULTIPLE == 0)


def float8_linears(model: torch.nn.Module) -> int:
    """Convert the blocks' Linear layers to torchao's Float8Linear in place; returns how many."""
    blocks = repeated_blocks(model)
    if blocks is None:
        raise ValueError("--precision fp8 converts the Linear layers of a model's repeated blocks; this model has none")
    chosen = {id(m) for m in blocks.modules() if fp8_convertible(m)}
    if not chosen:  # e.g. transformers' GPT-2, whose projections are Conv1D: torchao converts nn.Linear only
        kinds = sorted({type(m).__name__ for m in blocks.modules() if m is not blocks and not list(m.children())})
        raise ValueError("--precision fp8 found no nn.Linear with dims a multiple of "
                         f"{FP8_DIM_MULTIPLE} in the model's blocks (they hold {', '.join(kinds)}): nothing would run "
                         "in float8; drop --precision fp8, or use an implementation built of nn.Linear")
    try:
        from torchao.float8 import convert_to_float8_training
    except ImportError:  # checked at plan time (launcher.compromises.checks); a script run by hand lands here
        raise SystemExit(f"cardwise: --precision fp8 needs torchao: {TORCHAO_FIX}") from None
    convert_to_float8_training(model, module_filter_fn=lambda m, fqn: id(m) in chosen)
    return len(chosen)


def _fp8(plan: Plan, model: torch.nn.Module) -> None:
    float8_linears(model)


def _selective(plan: Plan, model: torch.nn.Module) -> None:
    checkpoint_every(model, plan.config.grad_ckpt_every)


# setup name -> what it does to the model, in the order applied (float8 before the checkpoint wrappers,
# whose inner modules it would otherwise have to find through them)
MODEL: dict[str, Callable[[Plan, torch.nn.Module], None]] = {"fp8": _fp8, "selective-ckpt": _selective}


def describe(model: torch.nn.Module) -> dict:
    """What runs (compromise.json): the float8 Linears and the checkpoint-wrapped blocks, by index."""
    blocks = repeated_blocks(model)
    wrapped = [i for i, b in enumerate(blocks or []) if type(b).__name__ == "CheckpointWrapper"]
    return {"float8_linears": sum(type(m).__name__ == "Float8Linear" for m in model.modules()),
            "checkpointed_blocks": wrapped}


def apply(plan: Plan, model: torch.nn.Module) -> torch.nn.Module:
    """Let each active setup of ``plan`` with an entry in ``MODEL`` change ``model`` (in place), in the
    registry's order (fp8 before selective checkpointing: the checkpoint wrapper hides the Linears)."""
    from launcher.setup_launch import apply as apply_table

    apply_table(MODEL, plan, model)
    return model
