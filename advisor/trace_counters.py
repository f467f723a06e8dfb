"""Dispatch-level counters for ``advisor.tracer``: kernels launched, and the largest pair of
gradients produced in a row during backward (a transient on top of the saved tensors)."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class KernelCounter(TorchDispatchMode):
    """Counts aten ops that would launch a kernel (views and metadata ops do not)."""

    _FREE = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "reshape", "squeeze", "unsqueeze",
             "slice", "select", "alias", "as_strided", "detach", "split", "chunk", "unbind", "empty_like",
             "empty", "new_empty", "lift_fresh", "_to_copy_meta"}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.split(".")[0] not in self._FREE:
            self.count += 1
        return func(*args, **(kwargs or {}))


class BackwardPeak(TorchDispatchMode):
    """During backward, once the model's output has its gradient: the largest pair of consecutive
    ops' new outputs (a gradient being produced while the one it is made from is alive), the
    transient on top of the saved tensors inside a layer's backward (an MLP's widest gradients)."""

    def __init__(self, armed: bool, param_shapes: set):
        super().__init__()
        self.armed = armed
        self.param_shapes = param_shapes  # weight gradients are model state, counted elsewhere
        self.peak = 0
        self._last = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.armed:
            inputs = {a.untyped_storage()._cdata for a in args if isinstance(a, torch.Tensor)}
            outs = out if isinstance(out, (tuple, list)) else (out,)
            new = sum(o.untyped_storage().nbytes() for o in outs
                      if isinstance(o, torch.Tensor) and o.untyped_storage()._cdata not in inputs
                      and tuple(o.shape) not in self.param_shapes)
            if new:  # views and weight gradients do not break a pair
                self.peak = max(self.peak, self._last + new)
                self._last = new
        return out
