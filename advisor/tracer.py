"""Trace a module on the meta device: FLOPs, bytes saved for backward, kernels — no memory, no GPU.

One training step (forward + loss + backward) runs on meta tensors under three precisions:

* ``fp32``: as built.
* ``pure-bf16``: module and floating inputs cast to bf16.
* ``bf16``: CUDA autocast, *emulated* with a ``TorchFunctionMode`` because autocast never applies
  to meta tensors (and a CPU-only torch cannot fake CUDA). The mode casts the inputs of matmul-
  class functions to bf16 and of norm/softmax/loss functions to fp32, as CUDA autocast's op
  lists do (torch.amp docs, "CUDA Ops that can autocast to float16/float32"); casts happen above
  autograd, so the bf16 weight copies autocast keeps for backward are counted like the real ones.

Attention: ``F.scaled_dot_product_attention`` is replaced by a stand-in that saves what the
flash / memory-efficient kernels save on GPU (q, k, v, out and the fp32 log-sum-exp) instead of
the math path's s x s matrix, and whose FLOPs are added by formula (Dao 2022: backward
recomputes the scores, 2.5x the forward's matmul work).

Saved tensors are deduplicated by storage; parameters (and views of them) are excluded since
the memory model counts weights separately. Tracing at batch 1 and 2 splits per-sample bytes
from fixed ones (weight copies).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from advisor.errors import UserError
from advisor.models import ModelSpec, TraceProfile

_LOWER = {F.linear, F.conv1d, F.conv2d, F.conv3d, F.conv_transpose2d, torch.matmul, torch.mm, torch.bmm,
          torch.addmm, torch.baddbmm, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.mm,
          torch.Tensor.bmm}
_FP32 = {F.layer_norm, F.group_norm, F.rms_norm, F.softmax, F.log_softmax, F.cross_entropy, F.nll_loss,
         F.mse_loss, F.l1_loss, F.smooth_l1_loss, F.binary_cross_entropy_with_logits, F.kl_div,
         F.normalize, F.softplus, torch.softmax, torch.log_softmax, torch.Tensor.softmax,
         torch.Tensor.log_softmax, torch.exp, torch.log, torch.rsqrt, torch.pow, torch.Tensor.pow,
         torch.cumsum, torch.prod, torch.norm}


class _FlashAttention(torch.autograd.Function):
    """Meta stand-in for SDPA's flash / efficient kernels: saves q, k, v, out, lse (fp32)."""

    @staticmethod
    def forward(ctx, q, k, v):
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, _, _ = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


class _TraceMode(TorchFunctionMode):
    """Swaps SDPA for the flash stand-in and, when ``autocast`` is set, emulates CUDA autocast."""

    def __init__(self, autocast: torch.dtype | None):
        super().__init__()
        self.autocast = autocast
        self.attn_flops = 0.0  # forward FLOPs of attention scores and weighted sums
        self._cast_cache: dict[int, torch.Tensor] = {}

    def _cast(self, x, dtype):
        if not (isinstance(x, torch.Tensor) and x.is_floating_point()) or x.dtype == dtype:
            return x
        if isinstance(x, nn.Parameter):  # autocast caches weight casts for the whole region
            key = id(x)
            if key not in self._cast_cache:
                self._cast_cache[key] = x.to(dtype)
            return self._cast_cache[key]
        return x.to(dtype)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            q, k, v = args[:3]
            if self.autocast is not None:
                q, k, v = (self._cast(t, self.autocast) for t in (q, k, v))
            causal = kwargs.get("is_causal", False)
            pairs = q.shape[-2] * k.shape[-2] * (0.5 if causal else 1.0)
            self.attn_flops += 4.0 * q.shape[:-2].numel() * pairs * q.shape[-1]
            with torch._C.DisableTorchFunctionSubclass():
                return _FlashAttention.apply(q, k, v)
        if self.autocast is not None:
            if func in _LOWER:
                args = tuple(self._cast(a, self.autocast) for a in args)
                kwargs = {k: self._cast(v, self.autocast) for k, v in kwargs.items()}
            elif func in _FP32:
                args = tuple(self._cast(a, torch.float32) for a in args)
        return func(*args, **kwargs)


class _KernelCounter(TorchDispatchMode):
    """Counts aten ops that would launch a kernel (views and metadata ops do not)."""

    _FREE = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "reshape", "squeeze", "unsqueeze",
             "slice", "select", "alias", "as_strided", "detach", "split", "chunk", "unbind", "empty_like",
             "empty", "lift_fresh", "_to_copy_meta"}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.split(".")[0] not in self._FREE:
            self.count += 1
        return func(*args, **(kwargs or {}))


class StepTrace:
    """The numbers from one traced training step at one batch size and precision."""

    def __init__(self, saved_bytes: float, fwd_flops: float, flops: float, attn_fwd_flops: float, kernels: int,
                 output_numel: int):
        self.saved_bytes = saved_bytes
        self.fwd_flops = fwd_flops  # forward FLOPs counted by torch.utils.flop_counter
        self.flops = flops  # forward + backward
        self.attn_fwd_flops = attn_fwd_flops
        self.kernels = kernels
        self.output_numel = output_numel


def trace_step(model: nn.Module, make_inputs: Callable[[int], tuple], batch: int, precision: str,
               loss_fn: Callable | None = None) -> StepTrace:
    """Run one forward+backward of ``model`` (on meta) and measure what autograd saves."""
    autocast = torch.bfloat16 if precision in ("bf16", "fp16") else None
    if precision == "pure-bf16":
        model = model.to(torch.bfloat16)
    inputs = make_inputs(batch)
    if precision == "pure-bf16":
        inputs = tuple(t.to(torch.bfloat16) if t.is_floating_point() else t for t in inputs)
    param_storages = {p.untyped_storage()._cdata for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor):
        st = t.untyped_storage()
        if st._cdata not in param_storages:
            saved[st._cdata] = st.nbytes()
        return t

    mode = _TraceMode(autocast)
    fwd = FlopCounterMode(display=False)
    bwd = FlopCounterMode(display=False)
    kernels = _KernelCounter()
    with kernels, mode, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with fwd:
            out = model(*inputs) if loss_fn is None else loss_fn(model, inputs)
            loss = out if out.dim() == 0 else out.float().mean()
        numel = 0 if out.dim() == 0 else out.numel()
        with bwd:
            loss.backward()
    f = float(fwd.get_total_flops())
    return StepTrace(float(sum(saved.values())), f, f + float(bwd.get_total_flops()), mode.attn_flops,
                     kernels.count, numel)


def _per_sample(model_factory, make_inputs, precision, loss_fn=None) -> tuple[float, float, StepTrace, StepTrace]:
    with torch.device("meta"):
        m1 = model_factory()
        m2 = model_factory()
    t1 = trace_step(m1, make_inputs, 1, precision, loss_fn)
    t2 = trace_step(m2, make_inputs, 2, precision, loss_fn)
    per = t2.saved_bytes - t1.saved_bytes
    return per, t1.saved_bytes - per, t1, t2


PRECISIONS = ("fp32", "bf16", "pure-bf16")


def profile_module(model_factory: Callable[[], nn.Module], make_inputs: Callable[[int], tuple],
                   ref_input: tuple[int, ...], scales_with: str = "fixed", loss_fn=None) -> tuple[TraceProfile, int]:
    """A TraceProfile per sample for any module; returns it and the parameter count."""
    saved, fixed = {}, {}
    t1 = t2 = None
    for p in PRECISIONS:
        per, fix, t1, t2 = _per_sample(model_factory, make_inputs, p, loss_fn)
        saved[p], fixed[p] = per, max(0.0, fix)
    with torch.device("meta"):
        m = model_factory()
    n_params = sum(p.numel() for p in m.parameters())
    mm_weights = sum(mod.weight.numel() for mod in m.modules()
                     if isinstance(mod, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)) and mod.weight is not None)
    units = [sum(p.numel() for p in c.parameters()) for c in _units(m)]
    has_bn = any(isinstance(mod, nn.modules.batchnorm._BatchNorm) for mod in m.modules())
    return TraceProfile(
        ref_input=ref_input, scales_with=scales_with,
        fwd_flops=(t2.fwd_flops - t1.fwd_flops) + (t2.attn_fwd_flops - t1.attn_fwd_flops),
        saved_bytes=saved, fixed_saved_bytes=fixed,
        output_numel=float(t2.output_numel - t1.output_numel),
        matmul_weight_params=mm_weights, largest_unit_params=max(units) if units else n_params,
        kernels=t1.kernels, has_batchnorm=has_bn,
    ), n_params


def _units(m: nn.Module) -> list[nn.Module]:
    """The blocks FSDP would wrap: children of the first ModuleList/Sequential of repeated blocks."""
    for mod in m.modules():
        if isinstance(mod, (nn.ModuleList, nn.Sequential)) and len(mod) > 1:
            return list(mod)
    return [m]


# ------------------------------------------------------------------ --module FILE.py:FACTORY
def load_factory(spec: str) -> Callable[[], nn.Module]:
    """Import ``FILE.py:FACTORY`` or ``pkg.mod:FACTORY`` and return the callable."""
    if ":" not in spec:
        raise UserError(f"--module '{spec}' has no factory", fix="write FILE.py:FACTORY or pkg.mod:FACTORY, e.g. --module net.py:build")
    target, name = spec.rsplit(":", 1)
    try:
        if target.endswith(".py"):
            path = Path(target).expanduser()
            if not path.exists():
                raise UserError("file not found", where=target, fix="give the path of the Python file that defines the factory")
            modname = f"cardwise_user_{path.stem}"
            s = importlib.util.spec_from_file_location(modname, path)
            module = importlib.util.module_from_spec(s)
            sys.modules[modname] = module
            s.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"importing it failed: {type(exc).__name__}: {exc}", where=target,
                        fix="check that the file imports on its own (python -c 'import ...')") from None
    factory = getattr(module, name, None)
    if factory is None or not callable(factory):
        raise UserError(f"no callable '{name}' in it", where=target, fix=f"define def {name}(): return MyModule()")
    return factory


def trace_module_spec(spec: str, input_shape: tuple[int, ...] | None, input_dtype: str = "float32") -> ModelSpec:
    """A ModelSpec for a user's module, traced on meta (no real memory, no GPU)."""
    if not input_shape:
        raise UserError("--module needs --input-shape", fix="give the per-sample input shape, e.g. --input-shape 3,224,224")
    dtype = getattr(torch, input_dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise UserError(f"unknown --input-dtype '{input_dtype}'", fix="use float32, bfloat16, int64, ...")
    factory = load_factory(spec)

    def make_inputs(b: int):
        if dtype.is_floating_point:
            return (torch.randn(b, *input_shape, device="meta", dtype=dtype),)
        return (torch.zeros(b, *input_shape, device="meta", dtype=dtype),)

    def build():
        m = factory()
        if not isinstance(m, nn.Module):
            raise UserError(f"factory returned {type(m).__name__}, not a torch.nn.Module", where=spec)
        return m

    start = time.perf_counter()
    try:
        profile, n_params = profile_module(build, make_inputs, tuple(input_shape))
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"tracing on the meta device failed: {type(exc).__name__}: {exc}", where=spec,
                        fix="check --input-shape matches what forward() expects (per sample, no batch dim)") from None
    family = "cnn" if profile.has_batchnorm and len(input_shape) == 3 else "custom"
    return ModelSpec(name=spec.rsplit(":", 1)[-1], family=family, params=n_params, source=f"module {spec}",
                     description=f"traced in {time.perf_counter() - start:.1f}s on the meta device",
                     trace=profile, input_shape=tuple(input_shape), input_dtype=input_dtype,
                     default_image_size=input_shape[-1] if len(input_shape) == 3 else None)
