"""The start-up and the loop every built-in recipe shares around its own data and model.

A recipe parses its own flags and then ``add_step_args``; gets its rank's runtime (``runtime``);
builds its model under the common seed (``seeded``; ``zoo_model_on`` for a catalog model built on
the device, as the synthetic and bench recipes do); applies the plan's model choices and prepares
model, optimizer and loaders (``setup_and_prepare``); and trains until the step count
(``train_until``). Checkpoint resume is ``Runtime.batches``'s (a resumed run starts at the step it
had reached, which is why the loop tests ``rt.step``). accelerate and torch are imported in the
functions: a recipe's ``--help`` needs neither.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from launcher.runtime import Runtime

T = TypeVar("T")
SEED = 0  # the same initial weights on every rank (DDP also broadcasts rank 0's)


def add_step_args(parser: argparse.ArgumentParser, default_steps: int) -> None:
    """``--steps`` (when the plan has no step count) and ``--log-every``."""
    parser.add_argument("--steps", type=int, default=None,
                        help=f"optimizer steps if the plan has none (default {default_steps})")
    parser.add_argument("--log-every", type=int, default=None)


def runtime(args: argparse.Namespace) -> Runtime:
    """This rank's runtime, from the plan ``advise launch`` gave it; gradients clipped at norm 1."""
    from launcher.runtime import Runtime

    return Runtime.from_env(log_every=args.log_every, clip_grad_norm=1.0)


def seeded(build: Callable[[], T]) -> T:
    """``build()`` (the model, and whatever is built with it) after seeding every RNG alike."""
    from accelerate.utils import set_seed

    set_seed(SEED)
    return build()


def zoo_model_on(device, spec, image_size: int | None = None):
    """A catalog spec's zoo model, built and initialised directly on ``device`` under the common seed
    (no host copy of a billion parameters: an 8B model's init on the CPU takes minutes)."""
    import torch

    from advisor.zoo import build_trainable, init_weights

    def build():
        with torch.device(device):
            model = build_trainable(spec, image_size=image_size)
            if spec.arch is not None:
                init_weights(model)
        return model

    return seeded(build)


def setup_and_prepare(rt: Runtime, model, *loaders):
    """The plan's model choices (``Runtime.setup_model``), then ``Runtime.prepare`` with the plan's
    optimizer over the result; returns (model, optimizer, *loaders)."""
    model = rt.setup_model(model)  # LoRA adapters when the plan has --lora-rank
    # A runtime that did not apply them would train the whole model under a LoRA plan: refuse (any recipe).
    if rt.plan.config.adapters and not hasattr(model, "peft_config"):
        raise SystemExit("the plan trains LoRA adapters but this cardwise's runtime did not apply them "
                         "(launcher.compromises.lora is missing)")
    return rt.prepare(model, rt.optimizer(model), *loaders)


def step_count(rt: Runtime, args: argparse.Namespace, default_steps: int) -> int:
    """The plan's step count (capped by ``--max-steps``), else ``--steps``, else the recipe's default."""
    return rt.total_steps or args.steps or default_steps


def train_until(rt: Runtime, steps: int, model, optimizer, batches: Iterator, loss_fn: Callable | None = None) -> None:
    """Optimizer steps until ``rt.step`` reaches ``steps`` (a resumed run starts mid-way)."""
    while rt.step < steps:
        rt.train_step(model, optimizer, batches, loss_fn=loss_fn)
