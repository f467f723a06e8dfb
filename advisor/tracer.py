"""Trace a module on the meta device: FLOPs, bytes saved for backward, kernels — no memory, no GPU.

One training step (forward + loss + backward) runs on meta tensors under three precisions:

* ``fp32``: as built.
* ``pure-bf16``: module and floating inputs cast to bf16.
* ``bf16``: CUDA autocast, *emulated* with a ``TorchFunctionMode`` because autocast never applies
  to meta tensors (and a CPU-only torch cannot fake CUDA). The mode casts the inputs of matmul-
  class functions to bf16 and of norm/softmax/loss/pow functions to fp32, as CUDA autocast's op
  lists do (torch.amp docs, "CUDA Ops that can autocast to float16/float32"); casts happen above
  autograd, so the bf16 weight copies autocast keeps for backward are counted like the real ones.

What a GPU runs differs from what meta runs in two places, and the mode makes meta do the GPU's:

* attention: ``F.scaled_dot_product_attention`` goes through ``advisor.sdpa``, which picks the
  backend CUDA's dispatcher would (flash / cuDNN / memory-efficient keep q, k, v, out and a fp32
  log-sum-exp; the math fallback keeps the probabilities). ``nn.MultiheadAttention`` (and so
  ``nn.TransformerEncoderLayer``) reaches SDPA from inside ``F.multi_head_attention_forward``,
  which the mode would not see (a mode is popped while it handles a call); the mode runs that
  function's body with itself pushed again, so its projections, SDPA and dropout are traced.
  With ``need_weights=True`` (plain ``nn.MultiheadAttention``'s default) that body computes the
  probabilities explicitly, and they are counted: that is what PyTorch runs.
* dropout: CUDA keeps a bool mask (``native_dropout``), meta a float noise tensor; the mode
  calls ``native_dropout``.

Python-composed activations (tanh-GELU as pow/mul/add/tanh), in-place ops and views are traced as
they are. The loss (``ce``, ``mse`` or ``none``) runs on the module's output; its backward
temporaries (and the output the training loop still holds) are recorded separately, since they
exist only at the start of backward.

Saved tensors are deduplicated by storage; parameters (and views of them) are excluded since
the memory model counts weights separately. Tracing at batch 2 and 3 splits per-sample bytes
from fixed ones (weight copies).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils.flop_counter import FlopCounterMode

from advisor import sdpa
from advisor.config import Precision
from advisor.errors import UserError
from advisor.models import ModelSpec, TraceProfile
from advisor.step_work import FLASH_PASSES
from advisor.trace_counters import BackwardPeak, KernelCounter, OpCensus, SavedTensors

_LOWER = {F.linear, F.conv1d, F.conv2d, F.conv3d, F.conv_transpose2d, torch.matmul, torch.mm, torch.bmm,
          torch.addmm, torch.baddbmm, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.mm,
          torch.Tensor.bmm, torch.Tensor.addmm, F.scaled_dot_product_attention}
# CUDA autocast's float32 list (torch.amp docs, "CUDA Ops that can autocast to float32"), the
# entries a model's Python code reaches: pow in tanh-GELU, sum, norms, softmax, losses.
_FP32 = {F.layer_norm, F.group_norm, F.rms_norm, F.softmax, F.log_softmax, F.cross_entropy, F.nll_loss,
         F.mse_loss, F.l1_loss, F.smooth_l1_loss, F.binary_cross_entropy_with_logits, F.kl_div,
         F.normalize, F.softplus, torch.softmax, torch.log_softmax, torch.Tensor.softmax,
         torch.Tensor.log_softmax, torch.exp, torch.log, torch.rsqrt, torch.pow, torch.Tensor.pow,
         torch.Tensor.__pow__, torch.Tensor.__rpow__, torch.cumsum, torch.prod, torch.norm, torch.sum,
         torch.Tensor.sum, torch.Tensor.exp, torch.Tensor.log, torch.Tensor.rsqrt, torch.reciprocal}
_LOSSES = {F.cross_entropy: 2, F.mse_loss: 1, F.log_softmax: 2, torch.log_softmax: 2, torch.Tensor.log_softmax: 2}
_DROPOUT = {F.dropout, torch.dropout}


def _unguarded(fn):
    """A copy of a torch.nn.functional function that skips its own ``has_torch_function`` check.

    A TorchFunctionMode is popped while it handles a call, so the ops *inside* a Python-level
    function it intercepts (``multi_head_attention_forward``: its in-projection, SDPA, dropout)
    would run unseen. Running this copy with the mode pushed again lets the mode see them.
    """
    g = dict(fn.__globals__, has_torch_function=lambda *_: False)
    copy = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


_DESCEND = {F.multi_head_attention_forward: _unguarded(F.multi_head_attention_forward)}


class _TraceMode(TorchFunctionMode):
    """Runs a step as a CUDA GPU would: SDPA's fused kernels, fused dropout, and (with ``autocast``)
    CUDA autocast's casts; records the loss's backward temporaries."""

    def __init__(self, autocast: torch.dtype | None):
        super().__init__()
        self.autocast = autocast
        self.attn_flops = 0.0  # forward FLOPs of attention scores and weighted sums
        self.attn_calls = 0  # fused SDPA calls (the math path's kernels are counted as aten ops)
        self.backends: set[str] = set()
        self.loss_temp_bytes = 0.0  # loss-backward temporaries at the start of backward
        self.weight_casts: dict[int, torch.Tensor] = {}  # id(parameter) -> its autocast copy, one per step

    def _cast(self, x, dtype):
        if not (isinstance(x, torch.Tensor) and x.is_floating_point()) or x.dtype == dtype:
            return x
        if isinstance(x, nn.Parameter):  # autocast caches weight casts for the whole region
            key = id(x)
            if key not in self.weight_casts:
                self.weight_casts[key] = x.to(dtype)
            return self.weight_casts[key]
        return x.to(dtype)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        first = args[0] if args else None  # before autocast's cast
        if func in _DESCEND:
            with self:
                return _DESCEND[func](*args, **kwargs)
        if self.autocast is not None:
            if func in _LOWER:
                args = tuple(self._cast(a, self.autocast) for a in args)
                kwargs = {k: self._cast(v, self.autocast) for k, v in kwargs.items()}
            elif func in _FP32:
                args = tuple(self._cast(a, torch.float32) for a in args)
        if func is F.scaled_dot_product_attention:
            return self._attention(*args, **kwargs)
        if func in _DROPOUT:
            x, p, train = args[0], kwargs.get("p", args[1] if len(args) > 1 else 0.5), \
                kwargs.get("training", kwargs.get("train", args[2] if len(args) > 2 else True))
            if train and 0.0 < p < 1.0 and x.requires_grad:
                # CUDA's fused dropout keeps a bool mask (native_dropout); the meta/CPU path of
                # at::dropout would keep a float noise tensor instead (is_fused_kernel_acceptable).
                return torch.native_dropout(x, p, True)[0]
        if func in _LOSSES and isinstance(args[0], torch.Tensor) and args[0].requires_grad:
            # Loss backward: eager cross-entropy allocates the gradient of its log-softmax and of
            # the logits (2 tensors of the logits' size), MSE the gradient of its input, alive at
            # once at the start of backward. Autocast runs log-softmax on bf16 logits in fp32
            # without an fp32 copy (its fp32_set_opt_dtype policy: half_to_float), so the logits'
            # gradient comes back in bf16; measured on the H200: 2 bytes per logit less than an
            # explicit .float() (nanoGPT and BertForMaskedLM, bf16).
            x = args[0]
            if _LOSSES[func] == 2:
                self.loss_temp_bytes += x.numel() * (x.element_size() + first.element_size())
            else:
                self.loss_temp_bytes += x.numel() * x.element_size()
        return func(*args, **kwargs)

    def _attention(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        out, backend = sdpa.attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        self.backends.add(backend)
        if backend != "math":
            self.attn_calls += 1  # the math path's matmuls are counted by FlopCounterMode itself
            pairs = q.shape[-2] * k.shape[-2] * (0.5 if is_causal else 1.0)
            self.attn_flops += 2.0 * q.shape[:-2].numel() * pairs * (q.shape[-1] + v.shape[-1])
        return out


LOSSES = ("ce", "mse", "none")


class StepTrace:
    """The numbers from one traced training step at one batch size and precision."""

    def __init__(self, saved_bytes: float, fwd_flops: float, flops: float, attn_fwd_flops: float, kernels: int,
                 output_numel: int, loss_temp_bytes: float = 0.0, backends: frozenset = frozenset(),
                 backward_peak_bytes: float = 0.0, held_bytes: float = 0.0, work: dict | None = None,
                 grad_moment_bytes: float = 0.0, compiled_saved_bytes: float = 0.0):
        self.saved_bytes = saved_bytes
        self.fwd_flops = fwd_flops  # forward FLOPs counted by torch.utils.flop_counter
        self.flops = flops  # forward + backward
        self.attn_fwd_flops = attn_fwd_flops
        self.kernels = kernels
        self.output_numel = output_numel
        self.loss_temp_bytes = loss_temp_bytes  # loss-backward temporaries, at the start of backward
        self.backends = backends  # SDPA backends the GPU would run
        self.backward_peak_bytes = backward_peak_bytes  # largest gradient pair in the model's backward
        self.held_bytes = held_bytes  # the output the training loop holds through backward
        self.work = work or {}  # OpCensus of forward + loss + backward, plus fused attention's FLOPs
        # During backward, the most that the weight gradients accumulated so far put above the saved
        # tensors still alive (gradients so far less saved bytes freed so far; negative when freeing
        # always wins): a model whose big weights come last (a classifier's wide Linear, an untied LM
        # head) holds their gradients while nearly all its activations are still saved.
        self.grad_moment_bytes = grad_moment_bytes
        self.compiled_saved_bytes = compiled_saved_bytes  # of saved_bytes, what GEMMs/convolutions touch

    def transient_bytes(self, base: "StepTrace | None" = None, holds_output: bool = False) -> float:
        """Bytes on top of the saved tensors during backward (per sample when ``base`` is the same
        step at a smaller batch): the loss's temporaries at the start of backward or the largest
        gradient pair later, whichever is larger; plus, with ``holds_output``, the output the loop
        keeps referenced through backward (``out = model(x); loss = f(out)``; measured loops
        that return only the loss free it: the users' rows, benchmarks/calibration/users.py)."""
        b = base or StepTrace(0, 0, 0, 0, 0, 0)
        held = (self.held_bytes - b.held_bytes) if holds_output else 0.0
        return held + max(self.loss_temp_bytes - b.loss_temp_bytes, self.backward_peak_bytes - b.backward_peak_bytes)


def apply_loss(out: torch.Tensor, loss: str) -> torch.Tensor:
    """The training loss on a module's output: ``ce`` over the last dim (int64 targets), ``mse``
    against a target shaped like the output, ``none``: a scalar output is the loss, else its mean."""
    if out.dim() == 0:
        return out
    if loss == "ce":
        if out.dim() < 2:
            raise UserError(f"--loss ce needs an output [batch, ..., classes]; the module returns shape {tuple(out.shape)}",
                            fix="use --loss mse or --loss none, or return logits with a class dimension")
        target = torch.zeros(out.shape[:-1].numel(), dtype=torch.long, device=out.device)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), target)
    if loss == "mse":
        target = torch.zeros(out.shape, dtype=torch.float32 if out.dtype != torch.bfloat16 else out.dtype, device=out.device)
        return F.mse_loss(out, target)
    return out.float().mean()


def trace_step(model: nn.Module, make_inputs: Callable[[int], tuple], batch: int, precision: str,
               loss_fn: Callable | None = None, loss: str = "none", count: bool = True) -> StepTrace:
    """Run one forward+backward of ``model`` (on meta) and measure what autograd saves.

    ``loss_fn(model, inputs)`` replaces the plain call; it returns the loss, or ``(loss, held)``
    with ``held`` a tensor the training loop keeps through backward (HF's ``outputs.logits``).
    Otherwise ``loss`` (``ce|mse|none``) is applied to the module's output, which the loop holds.
    """
    pure = Precision(precision).casts_model
    autocast = torch.bfloat16 if Precision(precision).autocast else None
    if pure:
        model = model.to(torch.bfloat16)
    inputs = make_inputs(batch)
    if pure:
        inputs = tuple(t.to(torch.bfloat16) if t.is_floating_point() else t for t in inputs)
    saved = SavedTensors({p.untyped_storage()._cdata for p in model.parameters()})
    mode = _TraceMode(autocast)
    # FLOPs and kernels are counted only when asked: the dispatch-level counters cost more than
    # the trace itself, and one precision's count is all the estimator reads.
    fwd = FlopCounterMode(display=False) if count else contextlib.nullcontext()
    # The backward counter is kept for the kernel count's sake: under it some backward ops
    # decompose (silu_backward into 6), which the throughput constants were fitted with.
    bwd = FlopCounterMode(display=False) if count else contextlib.nullcontext()
    kernels = KernelCounter() if count else contextlib.nullcontext()
    # the trace's own batch size is no model size (a classifier's input [batch, features])
    census = OpCensus({d for prm in model.parameters() for d in prm.shape} - {batch})
    # The census is the innermost dispatch mode: it sees the ops the GPU runs, before FlopCounterMode
    # decomposes the ones it has no formula for (silu_backward into 6).
    with kernels, mode, torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
        with fwd, census:
            out = model(*inputs) if loss_fn is None else loss_fn(model, inputs)
            held = None
            if isinstance(out, tuple):
                out, held = out
            elif out.dim() > 0 and loss in ("ce", "mse"):
                held = out
            value = apply_loss(out, loss)
        # What a compiled step would still save: the saved tensors that GEMMs, convolutions and gathers
        # read or write, and indices and masks (max-pool's, dropout's: not recomputable from what is
        # kept); inductor recomputes the rest (norm outputs, activation inputs) in backward.
        compiled_saved = sum(b for k, b in saved.bytes.items() if k in census.heavy_io or k in saved.integral)
        numel = 0 if out.dim() == 0 else out.numel()
        if held is not None:
            numel = held.numel() if held.dim() > 0 else 0
        shapes = {tuple(p.shape) for p in model.parameters()} | {tuple(p.shape)[::-1] for p in model.parameters()}
        peak = BackwardPeak(held is None or not held.requires_grad, shapes, saved.released)
        if not peak.armed:
            held.register_hook(lambda g: setattr(peak, "armed", True))
        # Each parameter's gradient, once accumulated, stays to the optimizer step: the moment when
        # the gradients so far most exceed the saved bytes freed so far.
        moment = {"grads": 0, "peak": -float("inf")}

        def accumulated(prm):
            if prm.grad is None:  # an undefined gradient reached it (a kernel that returns none): nothing held
                return
            moment["grads"] += prm.grad.numel() * prm.grad.element_size()
            # a weight autocast cast (the trace's cast cache has it) gets its gradient in the cast's
            # dtype from the GEMM and cast back (ToCopyBackward): that one is alive as this one accumulates
            copy = mode.weight_casts.get(id(prm))
            cast = copy.numel() * copy.element_size() if copy is not None else 0
            moment["peak"] = max(moment["peak"], moment["grads"] + cast - saved.released())

        hooks = [prm.register_post_accumulate_grad_hook(accumulated) for prm in model.parameters() if prm.requires_grad]
        try:
            with bwd, peak, census:
                value.backward()
        finally:
            for h in hooks:
                h.remove()
    for prm in model.parameters():
        prm.grad = None
    f = float(fwd.get_total_flops()) if count else 0.0
    held_bytes = held.numel() * held.element_size() if held is not None else 0
    # Fused attention: forward FLOPs as traced; its backward recomputes the scores, 2.5x the forward
    # (FlashAttention, Dao 2022): FLASH_PASSES (3.5) in all. One kernel forward, three backward (preprocess, main,
    # dq convert: flash_bwd_launch_template.h).
    work = dict(census.work, attn_flops=FLASH_PASSES * mode.attn_flops, kernels=census.work["kernels"] + 4 * mode.attn_calls)
    return StepTrace(float(saved.total()), f, f, mode.attn_flops, kernels.count if count else 0, numel,
                     mode.loss_temp_bytes, frozenset(mode.backends), peak.peak, held_bytes, work,
                     moment["peak"] if hooks else 0.0, compiled_saved)


def _per_sample(model: nn.Module, make_inputs, precision, loss_fn=None, loss="none",
                count: bool = False) -> tuple[float, float, StepTrace, StepTrace]:
    # Batches 2 and 3, not 1: at batch 1 some reshapes of permuted tensors are views (a size-1
    # dim has no stride constraint) that copy at any real batch (MultiheadAttention's output).
    t1 = trace_step(model, make_inputs, 2, precision, loss_fn, loss, False)
    t2 = trace_step(model, make_inputs, 3, precision, loss_fn, loss, count)  # FLOPs: linear in the batch, counted once
    per = t2.saved_bytes - t1.saved_bytes
    return per, t1.saved_bytes - 2 * per, t1, t2


# One trace per traced precision (Precision.trace_key); the one that casts the module last
PRECISIONS = tuple(sorted(dict.fromkeys(p.trace_key for p in Precision), key=lambda k: Precision(k).casts_model))


def profile_module(model_factory: Callable[[], nn.Module], make_inputs: Callable[[int], tuple],
                   ref_input: tuple[int, ...], scales_with: str = "fixed", loss_fn=None,
                   loss: str = "none") -> tuple[TraceProfile, int]:
    """A TraceProfile per sample for any module; returns it and the parameter count."""
    saved, fixed, temps, held, backends, work, work_fixed = {}, {}, {}, {}, set(), {}, {}
    grad_fixed, grad_per, compiled = {}, {}, {}
    with torch.device("meta"):
        m = model_factory()  # one build serves all traces (building can cost more than tracing)
    n_params = sum(p.numel() for p in m.parameters())
    counted = None
    for p in PRECISIONS:  # FLOPs and kernels counted once, on the last step (as before: pure-bf16)
        per, fix, t1, t2 = _per_sample(m, make_inputs, p, loss_fn, loss, count=p == PRECISIONS[-1])
        saved[p], fixed[p] = per, max(0.0, fix)
        temps[p] = t2.transient_bytes(t1)
        held[p] = t2.held_bytes - t1.held_bytes
        compiled[p] = t2.compiled_saved_bytes - t1.compiled_saved_bytes
        # gradients so far less saved bytes freed so far: a fixed part less a per-sample part
        grad_per[p] = t2.grad_moment_bytes - t1.grad_moment_bytes
        grad_fixed[p] = t1.grad_moment_bytes - 2 * grad_per[p]
        backends |= t1.backends | t2.backends
        # The step's work per sample (batch 3 less batch 2) and what does not grow with the batch
        # (weight gradients' accumulation, autocast's weight casts): batch 2 less twice that.
        work[p] = {k: t2.work[k] - t1.work[k] for k in t2.work}
        work_fixed[p] = {k: max(0.0, t1.work[k] - 2 * work[p][k]) for k in t1.work}
        counted = (t1, t2) if p == PRECISIONS[-1] else counted
    t1, t2 = counted
    mm_weights = sum(mod.weight.numel() for mod in m.modules()
                     if isinstance(mod, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)) and mod.weight is not None)
    units = [sum(p.numel() for p in c.parameters()) for c in _units(m)]
    has_bn = any(isinstance(mod, nn.modules.batchnorm._BatchNorm) for mod in m.modules())
    return TraceProfile(
        ref_input=ref_input, scales_with=scales_with,
        fwd_flops=(t2.fwd_flops + t2.attn_fwd_flops) / 3,
        saved_bytes=saved, fixed_saved_bytes=fixed,
        output_numel=float(t2.output_numel - t1.output_numel),
        matmul_weight_params=mm_weights, largest_unit_params=max(units) if units else n_params,
        kernels=t2.kernels, has_batchnorm=has_bn, loss="model" if loss_fn is not None else loss,
        loss_temp_bytes=temps, output_bytes=held, attention=sorted(backends), work=work, work_fixed=work_fixed,
        grad_moment_fixed=grad_fixed, grad_moment_per_sample=grad_per, saved_bytes_compiled=compiled,
    ), n_params


def _units(m: nn.Module) -> list[nn.Module]:
    """The blocks FSDP would wrap: children of the first ModuleList/Sequential of repeated blocks."""
    for mod in m.modules():
        if isinstance(mod, (nn.ModuleList, nn.Sequential)) and len(mod) > 1:
            return list(mod)
    return [m]


def is_encoder_decoder(model: nn.Module) -> bool:
    """A transformers encoder-decoder (T5, BART, mT5: ``config.is_encoder_decoder``): its forward needs
    decoder inputs (or labels, from which it makes them), so a plain ``model(input_ids)`` cannot train it."""
    return bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))


def seq2seq_step(model: nn.Module, ids: torch.Tensor, labels: torch.Tensor | None = None):
    """One training forward of a transformers encoder-decoder as a seq2seq script runs it: the source ids, the
    decoder's inputs (the labels shifted right, which the model makes itself from ``decoder_start_token_id``;
    given here, as a config written by hand may lack that id) and the labels, for its own cross-entropy; the
    loop holds the logits through backward. ``labels`` default: as long as the source."""
    labels = ids if labels is None else labels
    with _all_ones_masks_on_meta():
        out = model(input_ids=ids, decoder_input_ids=labels, labels=labels)
    return out.loss, out.logits


@contextlib.contextmanager
def _all_ones_masks_on_meta() -> Iterator[None]:
    """BART's decoder makes an all-ones padding mask when none is given, and transformers' mask code asks
    whether it is all ones (``masking_utils.fast_all``: a ``.item()``) to run SDPA with ``is_causal``
    instead of a mask, as it does on a GPU. A meta tensor has no values: the trace passes no padding, so
    every mask the model made itself is all ones, and the answer is yes."""
    try:
        from transformers import masking_utils
    except ImportError:  # not a transformers model, or an older transformers without the helper
        yield
        return
    original = getattr(masking_utils, "fast_all", None)
    if original is None:
        yield
        return
    masking_utils.fast_all = lambda t: True if t.device.type == "meta" else original(t)
    try:
        yield
    finally:
        masking_utils.fast_all = original


# ------------------------------------------------------------------ --module FILE.py:FACTORY
def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@contextlib.contextmanager
def user_code(where: str, doing: str, fix: str) -> Iterator[None]:
    """The one guard around the user's code (importing a --module file, calling its factory, its forward
    on the meta device): whatever it does, even ``sys.exit(0)``, ``KeyboardInterrupt`` or a bare
    ``BaseException`` (issue 31: wrong exit codes and tracebacks), becomes a UserError saying what it
    did, so the CLI exits 2 with one line. ``doing`` names the step ("importing it", "tracing ...")."""
    real_exit = os._exit
    os._exit = _refuse_os_exit  # os._exit ends the process at once, past every guard: exit 0, nothing said
    try:
        yield
    except UserError:
        raise
    except _OsExitCalled as exc:
        raise UserError(f"{doing} called os._exit({exc.code!r})", where=where,
                        fix="a factory returns a torch.nn.Module; keep the script's exits under `if __name__ == '__main__':`") from None
    except SystemExit as exc:
        raise UserError(f"{doing} called sys.exit({exc.code!r})", where=where,
                        fix="a factory returns a torch.nn.Module; keep the script's exits under `if __name__ == '__main__':`") from None
    except KeyboardInterrupt:
        raise UserError(f"{doing} was interrupted (KeyboardInterrupt)", where=where, fix=fix) from None
    except RecursionError:
        raise UserError(f"{doing} recursed too deeply (RecursionError)", where=where, fix=fix) from None
    except MemoryError:
        raise UserError(f"{doing} ran out of host memory (MemoryError)", where=where, fix=fix) from None
    except BaseException as exc:  # noqa: BLE001 - the user's code may raise anything; we report it
        detail = f": {_one_line(exc)}" if str(exc).strip() else ""
        raise UserError(f"{doing} failed: {type(exc).__name__}{detail}", where=where, fix=fix) from None
    finally:
        os._exit = real_exit


class _OsExitCalled(BaseException):
    """What ``os._exit`` raises while the user's code runs (``user_code``)."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


def _refuse_os_exit(code=0):
    raise _OsExitCalled(code)


def load_factory(spec: str) -> Callable[[], nn.Module]:
    """Import ``FILE.py:FACTORY`` or ``pkg.mod:FACTORY`` and return the callable."""
    if ":" not in spec:
        raise UserError(f"--module '{spec}' has no factory", fix="write FILE.py:FACTORY or pkg.mod:FACTORY, e.g. --module net.py:build")
    target, name = spec.rsplit(":", 1)
    with user_code(target, "importing it", "check that the file imports on its own (python -c 'import ...')"):
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
    factory = getattr(module, name, None)
    if factory is None or not callable(factory):
        raise UserError(f"no callable '{name}' in it", where=target, fix=f"define def {name}(): return MyModule()")
    return factory


def trace_module_spec(spec: str, input_shape: tuple[int, ...] | None, input_dtype: str = "float32",
                      loss: str = "ce") -> ModelSpec:
    """A ModelSpec for a user's module, traced on meta (no real memory, no GPU).

    ``loss``: what the training loop does with the module's output (``apply_loss``): ``ce``
    (default; cross-entropy over the last dim, int64 targets), ``mse`` or ``none``.
    """
    if loss not in LOSSES:
        raise UserError(f"unknown loss '{loss}'", fix=f"use one of {', '.join(LOSSES)}")
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
        name = spec.rsplit(":", 1)[-1]
        with user_code(spec, f"calling {name}()", f"{name}() takes no arguments and returns the torch.nn.Module"):
            m = factory()
        if not isinstance(m, nn.Module):
            raise UserError(f"factory returned {type(m).__name__}, not a torch.nn.Module", where=spec)
        return m

    # Token ids [batch, seq]: with fused attention everything saved is linear in seq (sdpa.py).
    scales = "tokens" if len(input_shape) == 1 and not dtype.is_floating_point else "fixed"
    seq2seq = []  # set by the step when the factory built a transformers encoder-decoder

    def step(model, inputs):
        if scales == "tokens" and is_encoder_decoder(model):
            seq2seq[:] = [True]
            return seq2seq_step(model, inputs[0])
        out = model(*inputs)
        return (out, out if out.dim() > 0 and loss in ("ce", "mse") else None) if isinstance(out, torch.Tensor) else out

    start = time.perf_counter()
    with user_code(spec, "building and tracing it on the meta device",
                   "check --input-shape matches what forward() expects (per sample, no batch dim)"):
        profile, n_params = profile_module(build, make_inputs, tuple(input_shape), scales_with=scales, loss=loss,
                                           loss_fn=step)
    loss_used = "model" if seq2seq else loss
    profile = profile.model_copy(update={"loss": loss_used})
    family = "encoder-decoder" if seq2seq else "cnn" if profile.has_batchnorm and len(input_shape) == 3 else "custom"
    how = ("; a transformers encoder-decoder: trained as model(input_ids=x, labels=x), its own loss, the target "
           "as long as the source" if seq2seq else "")
    return ModelSpec(name=spec.rsplit(":", 1)[-1], family=family, params=n_params, source=f"module {spec}",
                     description=f"traced in {time.perf_counter() - start:.1f}s on the meta device{how}",
                     implementation=f"traced module {spec}", loss=loss_used,
                     trace=profile, input_shape=tuple(input_shape), input_dtype=input_dtype,
                     default_image_size=input_shape[-1] if len(input_shape) == 3 else None,
                     default_seq_len=input_shape[0] if scales == "tokens" else None)
