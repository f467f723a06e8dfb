"""What ``F.scaled_dot_product_attention`` keeps for backward on a CUDA GPU, for the meta tracer.

On the meta device (and on CPU) SDPA runs its math decomposition, which stores the s x s
probabilities (and a float dropout noise the size of them). A GPU training step instead runs
one of the fused kernels, chosen at run time by ``select_sdp_backend`` in PyTorch's
``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`` (torch 2.13, read for sm90 = H100/H200):

* priority cuDNN, flash, memory-efficient, math (cuDNN first on sm90 with cuDNN > 9.15,
  ``check_prefer_cudnn_attention``);
* cuDNN: fp16/bf16, head dim <= 128 (256 with a recent cuDNN frontend) and a multiple of 8,
  dropout a multiple of 1/16 (``check_cudnn_dropout``), masks allowed;
* flash: fp16/bf16, no ``attn_mask`` (``check_for_attn_mask``), equal head dims <= 256,
  ``is_causal`` only with square q/k lengths; dropout allowed (Philox, no mask kept);
* memory-efficient: fp16/bf16/fp32 on sm80+, head dim a multiple of 8 (half) or 4 (fp32)
  (``minimum_gemm_alignment``), masks allowed (kept for backward as ``attn_bias``), dropout
  allowed (Philox); grouped-query heads only in PyTorch after 2.11 (``sdpa_backend``);
* math otherwise (fp64, odd head dims).

A mask that requires grad (T5's relative position bias, added to the scores as ``attn_mask``) takes
the cuDNN kernel out: its backward returns dq, dk, dv only (``_scaled_dot_product_cudnn_attention_backward``,
torch 2.13 ``_meta_registrations.py``), while the memory-efficient kernel's returns the bias gradient too
(``_efficient_attention_backward(..., bias_requires_grad)``, allocated at the expanded mask's shape with its
last dim padded to 16, then summed back to the mask's own shape by the expand's backward).

The three fused kernels keep the same tensors for backward: q, k, v, the output and a fp32
log-sum-exp per query row and head (Dao 2022 "FlashAttention-2" sec. 3.1; the efficient kernel
pads it to 32 rows, ``kAlignLSE``), plus the mask when one is given; they differ in speed, not
in memory, so the stand-in below models all three. The math fallback is composed op by op as
``_scaled_dot_product_attention_math`` does (q and k each scaled by sqrt(scale), softmax,
dropout, matmul), with CUDA's fused dropout (a bool mask, ``native_dropout``).
"""

from __future__ import annotations

import math

import torch

_HALF = (torch.float16, torch.bfloat16)
_LSE_ALIGN = 32  # mem-efficient kernel's log-sum-exp row padding (kAlignLSE, kernel_forward.h)


def sdpa_backend(dtype: torch.dtype, head_dim: int, head_dim_v: int, has_mask: bool, dropout_p: float,
                 is_causal: bool, q_len: int, k_len: int, gqa: bool = False, mask_grad: bool = False) -> str:
    """The backend PyTorch's CUDA dispatcher picks on an sm90 GPU (see the module docstring).

    ``gqa``: k/v have fewer heads than q (``enable_gqa=True``). The memory-efficient kernel takes
    that only in recent PyTorch (main's sdp_utils.cpp); with torch 2.11 an fp32 Qwen2 (GQA, HF
    passes enable_gqa) falls back to math: measured on the H200, +10.5 GiB of probabilities
    (hfqwen2-fp32-2, a users' row: benchmarks/calibration/users.py). Modelled as 2.11 behaves.
    ``mask_grad``: the mask requires grad, which only the memory-efficient kernel's backward returns."""
    half = dtype in _HALF
    if half and not mask_grad and head_dim == head_dim_v and head_dim <= 128 and head_dim % 8 == 0 and (dropout_p * 16).is_integer():
        return "cudnn"
    if half and not has_mask and head_dim == head_dim_v <= 256 and (not is_causal or q_len == k_len):
        return "flash"
    if dtype in (*_HALF, torch.float32) and not gqa and head_dim % (8 if half else 4) == 0 \
            and head_dim_v % (8 if half else 4) == 0:
        return "efficient"
    return "math"


class FusedAttention(torch.autograd.Function):
    """Stand-in for the fused kernels: keeps q, k, v, out, fp32 lse (and the mask), as they do.

    Runs on any device: the forward computes real values (math, without keeping the
    probabilities), the backward recomputes them, so CPU tests can check it numerically.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, is_causal, lse_align=1):
        out = _output_like(q, v)
        if q.device.type != "meta":
            with torch.no_grad():
                out.copy_(_reference(q, k, v, mask, scale, is_causal))
        lse_rows = math.ceil(q.shape[-2] / lse_align) * lse_align
        lse = torch.empty(*q.shape[:-2], lse_rows, dtype=torch.float32, device=q.device)
        ctx.scale, ctx.is_causal, ctx.has_mask = scale, is_causal, mask is not None
        ctx.mask_shape = None if mask is None else mask.shape
        ctx.save_for_backward(q, k, v, out, lse, *(() if mask is None else (mask,)))
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, _, _, *mask = ctx.saved_tensors
        wants_bias = bool(mask) and ctx.needs_input_grad[3]
        if q.device.type == "meta":
            dbias = _bias_grad(torch.empty(*q.shape[:-1], k.shape[-2], dtype=mask[0].dtype, device=q.device),
                               ctx.mask_shape) if wants_bias else None
            return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dbias, None, None, None
        # Recompute the probabilities and apply the softmax backward by hand (no autograd here,
        # so that the recomputation is not mistaken for saved tensors by a saved-tensors hook).
        kx, vx = _expand_kv(q, k, v)
        p = _probs(q, kx, mask[0] if mask else None, ctx.scale, ctx.is_causal)
        g = g.float()
        dv = p.transpose(-2, -1) @ g
        dp = g @ vx.float().transpose(-2, -1)
        dscores = p * (dp - (dp * p).sum(-1, keepdim=True))  # the gradient of the (additive) mask
        ds = dscores * ctx.scale
        dq = ds @ kx.float()
        dk = ds.transpose(-2, -1) @ q.float()
        if kx.shape != k.shape:  # grouped-query: sum the repeated heads back
            rep = q.shape[-3] // k.shape[-3]
            dk = dk.unflatten(-3, (k.shape[-3], rep)).sum(-3)
            dv = dv.unflatten(-3, (k.shape[-3], rep)).sum(-3)
        dbias = _bias_grad(dscores.to(mask[0].dtype), ctx.mask_shape) if wants_bias else None
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dbias, None, None, None


def _bias_grad(full: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The memory-efficient kernel's bias gradient, computed at the scores' full [batch, heads, q, k] shape,
    summed over the dimensions the mask broadcast along (T5's bias is [1, heads, q, k])."""
    lead = full.dim() - len(shape)
    dims = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and full.shape[lead + i] != 1)
    return (full.sum(dims, keepdim=True) if dims else full).reshape(shape)


def _output_like(q, v):
    """The kernels write [batch, seq, heads, dim] and return it transposed to [batch, heads, seq,
    dim] (``_flash_attention_forward``, ``_efficient_attention_forward``; cuDNN matches q's
    layout, which is this one for q projected from [batch, seq, d]): a following
    ``transpose(1, 2).contiguous()`` copies nothing."""
    if q.dim() != 4:
        return q.new_empty(*q.shape[:-1], v.shape[-1])
    b, h, s, _ = q.shape
    return q.new_empty(b, s, h, v.shape[-1]).transpose(1, 2)


def _expand_kv(q, k, v):
    """Grouped-query attention: repeat k/v heads up to q's (what ``enable_gqa`` means)."""
    if k.dim() >= 3 and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(rep, dim=-3), v.repeat_interleave(rep, dim=-3)
    return k, v


def _probs(q, k, mask, scale, is_causal):
    s = (q.float() @ k.float().transpose(-2, -1)) * scale
    if is_causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.float()
    return torch.softmax(s, dim=-1)


def _reference(q, k, v, mask, scale, is_causal):
    k, v = _expand_kv(q, k, v)
    return (_probs(q, k, mask, scale, is_causal) @ v.float()).to(q.dtype)


def math_attention(q, k, v, mask, dropout_p, is_causal, scale):
    """The math fallback as CUDA runs it, op by op (autograd keeps what these ops keep)."""
    k, v = _expand_kv(q, k, v)
    root = math.sqrt(scale)
    s = (q * root) @ (k * root).transpose(-2, -1)
    if is_causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    p = torch.softmax(s, dim=-1)
    if dropout_p > 0:
        p = torch.native_dropout(p, dropout_p, True)[0]
    return p @ v


def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False) -> tuple[torch.Tensor, str]:
    """SDPA as a CUDA GPU would run it in training: (output, backend name)."""
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    gqa = k.dim() >= 3 and k.shape[-3] != q.shape[-3]
    mask_grad = attn_mask is not None and attn_mask.requires_grad
    backend = sdpa_backend(q.dtype, q.shape[-1], v.shape[-1], attn_mask is not None, dropout_p, is_causal,
                           q.shape[-2], k.shape[-2], gqa, mask_grad)
    if backend == "math":
        return math_attention(q, k, v, attn_mask, dropout_p, is_causal, scale), backend
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        # convert_boolean_attn_mask: a float additive mask of the same shape, in q's dtype
        attn_mask = torch.zeros(attn_mask.shape, dtype=q.dtype, device=q.device).masked_fill(~attn_mask, float("-inf"))
    align = _LSE_ALIGN if backend == "efficient" else 1  # flash: [b, h, s]; cuDNN: [b, h, s, 1]
    return FusedAttention.apply(q, k, v, attn_mask, scale, is_causal, align), backend
