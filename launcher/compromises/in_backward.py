"""The optimizer step fused into the backward pass (``--optimizer-in-backward``).

Normally every gradient of the model lives at once between ``backward()`` and ``optimizer.step()``:
one full gradient buffer. Here each parameter has its own optimizer, stepped by a
``Tensor.register_post_accumulate_grad_hook`` as soon as that parameter's gradient is complete,
and the gradient is freed right after (PyTorch tutorial "How to save memory by fusing the
optimizer step into the backward pass", pytorch.org/tutorials/intermediate/optimizer_step_in_backward_tutorial).
At most the gradients that autograd is still accumulating are alive.

What it costs, and why ``advise launch`` refuses it in some plans (``launcher.compromises.checks``):
- no gradient accumulation: the hook fires on every backward, so each micro-batch would step;
- one process only: DDP all-reduces buckets after their hooks fire, so a rank would step on its
  local gradient (torch.distributed's ``_apply_optimizer_in_backward`` is the DDP-aware variant);
- no gradient clipping: the global norm is known only after the last gradient, when every
  parameter has already stepped.

``InBackwardOptimizer`` presents the per-parameter optimizers as one ``torch.optim.Optimizer``:
its ``param_groups`` are theirs (the same dicts), so an LR scheduler built on it sets every
parameter's LR; ``step()`` and ``zero_grad()`` are no-ops (the hooks did both).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch


class InBackwardOptimizer(torch.optim.Optimizer):
    """One optimizer per parameter, stepped in that parameter's post-accumulate-grad hook."""

    def __init__(self, params: Iterable[torch.nn.Parameter], make: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer]):
        params = [p for p in params if p.requires_grad]
        if not params:
            raise ValueError("no trainable parameters")
        super().__init__([{"params": [p]} for p in params], {})
        self.optimizers = [make([p]) for p in params]
        # The groups the scheduler sees are the inner optimizers' own dicts: one LR for all.
        self.param_groups = [g for opt in self.optimizers for g in opt.param_groups]
        self._by_param = {p: opt for p, opt in zip(params, self.optimizers)}
        self.hook_steps = 0  # parameter steps done by the hooks (the tests read it)
        self._handles = [p.register_post_accumulate_grad_hook(self._hook) for p in params]

    def _hook(self, p: torch.Tensor) -> None:
        opt = self._by_param[p]
        opt.step()
        opt.zero_grad(set_to_none=True)  # the gradient is freed here, not after the whole backward
        self.hook_steps += 1

    def step(self, closure=None):  # noqa: D401 - the hooks stepped already
        """No-op: every parameter stepped during backward."""
        return closure() if closure is not None else None

    def zero_grad(self, set_to_none: bool = True) -> None:
        """No-op: the hooks freed every gradient after its step."""

    @property
    def inner_class(self) -> str:
        return type(self.optimizers[0]).__name__

    def state_dict(self) -> dict:
        return {"per_parameter": [opt.state_dict() for opt in self.optimizers]}

    def load_state_dict(self, state_dict: dict) -> None:
        states = state_dict["per_parameter"]
        if len(states) != len(self.optimizers):
            raise ValueError(f"{len(states)} saved optimizer states for {len(self.optimizers)} parameters")
        for opt, s in zip(self.optimizers, states):
            opt.load_state_dict(s)
        self.param_groups = [g for opt in self.optimizers for g in opt.param_groups]

    def remove_hooks(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
