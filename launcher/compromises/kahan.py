"""``KahanAdamW``: AdamW for bf16 weights, with a Kahan-compensated update (``--precision pure-bf16``).

In pure bf16 the weights, gradients and both Adam moments are bf16 (8 bits of mantissa). An
update smaller than half a unit in the last place of its weight (|w| * 2**-9) is rounded away, so
late in training, at small learning rates, plain bf16 AdamW stops moving the weights. Zamirai et
al. 2020 ("Revisiting BFloat16 Training", arXiv:2010.06192) show that Kahan summation or
stochastic rounding of the weight update recovers fp32 accuracy; torchdistx's
``AnyPrecisionAdamW`` (use_kahan_summation=True) is the reference implementation this follows:
one bf16 compensation buffer per parameter keeps what each update lost to rounding and adds it to
the next one.

Memory per parameter: weight 2 + gradient 2 + m 2 + v 2 + compensation 2 = 10 bytes (the estimator,
``advisor.memory``, counts the same). The moments are updated in place in their own dtype, as
AnyPrecisionAdamW does, so no fp32 copy of a parameter lives longer than one elementwise op.
"""

from __future__ import annotations

import math

import torch


class KahanAdamW(torch.optim.Optimizer):
    """AdamW (decoupled weight decay, Loshchilov & Hutter 2019) with Kahan-compensated updates.

    States per parameter, all in the parameter's dtype: ``exp_avg``, ``exp_avg_sq``,
    ``compensation``. For fp32 parameters the compensation is harmless (it stays ~0).
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01):
        if lr < 0 or eps < 0 or weight_decay < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"invalid KahanAdamW hyper-parameters: lr={lr}, betas={betas}, eps={eps}, "
                             f"weight_decay={weight_decay}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.is_sparse:
                    raise RuntimeError("KahanAdamW does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["compensation"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                step = state["step"]
                m, v, comp = state["exp_avg"], state["exp_avg_sq"], state["compensation"]
                m.mul_(beta1).add_(grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step_size = lr / (1 - beta1 ** step)
                denom = (v.sqrt() / math.sqrt(1 - beta2 ** step)).add_(eps)
                # The whole update (decay + Adam step) goes into the compensation buffer, which
                # still holds what earlier updates lost to rounding ...
                if wd:
                    comp.add_(p, alpha=-lr * wd)
                comp.addcdiv_(m, denom, value=-step_size)
                # ... then the weight takes what it can represent, and the buffer keeps the rest.
                before = p.detach().clone()
                p.add_(comp)
                comp.add_(before.sub_(p))
        return loss
