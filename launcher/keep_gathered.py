"""fsdp-keep at run time: FSDP2 with the gathered weights kept across gradient accumulation.

Plain FSDP (``fully_shard`` with ``reshard_after_forward=True``) all-gathers each unit's weights
before its forward and again before its backward, in every micro-batch. ``fsdp-keep`` gathers them
once per optimizer step and keeps them until the last micro-batch's backward:

- ``reshard_after_forward=False`` (the Accelerate config's ``fsdp_reshard_after_forward: false``,
  ``launcher.accelerate_config.fsdp_section``): a unit stays gathered from its forward to its backward;
- ``set_reshard_after_backward(False)`` on every micro-batch but the last (``before_micro_batch``): it
  stays gathered into the next micro-batch's forward, so only the first forward of a step all-gathers;
- ``set_requires_gradient_sync(False)`` on every micro-batch but the last: gradients accumulate
  unsharded and are reduce-scattered once, after the last backward. Accelerate's ``accumulate`` does
  the same for FSDP2 (``Accelerator.no_sync``, accelerate 1.16); setting it here too keeps the step
  what ``advisor.comm.fsdp_keep_comm`` estimates whatever the caller's loop does.

The last micro-batch reshards after its backward, so the optimizer steps on the sharded parameters
as plain FSDP does, and the next step's first forward gathers the updated weights. torch 2.13's
``FSDPModule`` API (``torch/distributed/fsdp/_fully_shard/_fully_shard.py``); the methods exist since
torch 2.6, and the runtime refuses to run when the model is not an FSDP2 module (the plan would not be
what runs). ``tests/test_keep_gathered.py`` runs it over gloo on 2 CPU processes and counts the
all-gathers.
"""

from __future__ import annotations

from typing import Any


def fsdp_root(model: Any) -> Any | None:
    """The FSDP2 root module of a prepared model (unwrapping ``torch.compile``), or None."""
    from torch.distributed.fsdp import FSDPModule

    for m in (model, getattr(model, "_orig_mod", None), getattr(model, "module", None)):
        if isinstance(m, FSDPModule):
            return m
    return None


def require_root(model: Any) -> Any:
    """The FSDP2 root, or SystemExit with one line: fsdp-keep's toggles exist only on FSDP2 modules."""
    root = fsdp_root(model)
    if root is None:
        raise SystemExit(f"cardwise: the plan says --strategy fsdp-keep but the prepared model is a "
                         f"{type(model).__name__}, not an FSDP2 module (fully_shard): launch it with the plan's "
                         "Accelerate config (fsdp_version: 2), or use --strategy ddp")
    return root


def before_micro_batch(root: Any, index: int, grad_accum: int) -> None:
    """Set the FSDP2 root (recursively: every unit) for micro-batch ``index`` of ``grad_accum``: keep
    the weights gathered and the gradients unreduced on all but the last."""
    last = index == grad_accum - 1
    root.set_reshard_after_backward(last)
    root.set_requires_gradient_sync(last)
