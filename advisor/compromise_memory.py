"""Bytes the memory compromises change: optimizer states per trainable parameter, LoRA's adapters,
the largest single tensor (what the optimizer step in backward keeps alive).

The semantics are the ones the runtime runs (launcher/compromises/):

* ``adamw``: two fp32 moments, 8 bytes (torch.optim.AdamW, fused); in pure-bf16 the moments are
  bf16 (4 bytes) plus, with the default ``--pure-bf16-update kahan``, one bf16 Kahan compensation
  buffer per parameter (``KahanAdamW``, 2 bytes: Zamirai et al. 2020, "Revisiting BFloat16
  Training", sec. 4); ``--pure-bf16-update plain`` (torch AdamW on bf16 weights) has no buffer.
* ``adamw-8bit``: bitsandbytes ``AdamW8bit``: two uint8 moments plus one fp32 absmax per
  256-element block and moment; tensors under ``min_8bit_size`` = 4096 elements keep fp32 moments
  (bitsandbytes/optim/optimizer.py, ``Optimizer2State.init_state``; Dettmers et al. 2022).
* ``sgd``: one momentum buffer in the weight dtype.
* ``paged-adamw-8bit``: bitsandbytes ``PagedAdamW8bit``: the same states as ``adamw-8bit``,
  allocated in CUDA unified memory (bitsandbytes/functional.py ``get_paged``, cudaMallocManaged),
  so torch's allocator never counts them and the driver pages them to host RAM when the GPU runs
  short (Dettmers et al. 2023, QLoRA, sec. 3 "Paged Optimizers").
* LoRA: peft on every linear projection of attention and MLP (Hu et al. 2021), rank r: A is
  r x in, B is out x r.
* QLoRA (``--quantize-base 4bit``): those projections' frozen weights in 4-bit NF4 (bitsandbytes
  ``Linear4bit``, blocksize 64) with double quantization: 0.5 byte a weight plus one 8-bit absmax
  per 64 weights and one fp32 constant per 256 of those (Dettmers et al. 2023, sec. 3: 0.127 bits a
  weight instead of 0.5); embeddings, the LM head and norms stay bf16.
"""

from __future__ import annotations

from advisor.config import Optimizer, Precision, TrainConfig
from advisor.errors import UserError
from advisor.models import ModelSpec

# bitsandbytes Optimizer8bit defaults: block size of the blockwise quantisation and the smallest
# tensor that gets 8-bit states (bitsandbytes/optim/optimizer.py: blocks = n // 256 + bool(n % 256),
# min_8bit_size=4096).
BNB_BLOCK = 256
BNB_MIN_8BIT = 4096
# Kahan-compensated AdamW for pure-bf16: one bf16 compensation buffer per parameter
# (launcher/compromises/kahan.py; Zamirai et al. 2020).
KAHAN_BYTES = 2
# NF4 with double quantization, bytes per quantized weight (bitsandbytes Linear4bit defaults:
# blocksize 64, compress_statistics=True -> nested absmax blocks of 256): 4/8 + 1/64 + 4/(64 x 256).
NF4_BLOCK = 64
NF4_NESTED_BLOCK = 256
NF4_BYTES = 0.5 + 1.0 / NF4_BLOCK + 4.0 / (NF4_BLOCK * NF4_NESTED_BLOCK)


def quantized_base_params(model: ModelSpec) -> int:
    """Frozen weights QLoRA quantizes: the adapted projections' (every layer's attention and MLP)."""
    return model.arch.n_layers * sum(i * o for i, o in lora_shapes(model))


def lora_shapes(model: ModelSpec) -> list[tuple[int, int]]:
    """(in, out) of the linear projections of one layer that LoRA adapts: q, k, v, o and the MLP's."""
    a = model.arch
    kv = a.kv_heads * a.head_dim
    h, f = a.d_model, a.d_ff
    mlp = [(h, f), (h, f), (f, h)] if a.mlp == "swiglu" else [(h, f), (f, h)]
    return [(h, h), (h, kv), (h, kv), (h, h)] + mlp


def lora_params(model: ModelSpec, rank: int) -> int:
    if model.arch is None:
        raise UserError("LoRA estimates need a transformer (catalog LLM/encoder/ViT or --hf-config)",
                        fix="drop --lora-rank for this model")
    return model.arch.n_layers * rank * sum(i + o for i, o in lora_shapes(model))


def small_tensor_params(model: ModelSpec, config: TrainConfig) -> int:
    """Trainable parameters in tensors under bitsandbytes' ``min_8bit_size`` (norms, biases)."""
    a = model.arch
    if a is None or config.lora_rank is not None:
        # LoRA's A and B are r x in and out x r: r x 4096 or more for any model worth adapting.
        return 0
    h, f = a.d_model, a.d_ff
    kv = a.kv_heads * a.head_dim
    per_layer = [h] * (2 * (2 if a.norm == "layernorm" else 1))
    qkv_b = a.bias if a.qkv_bias is None else a.qkv_bias
    if qkv_b:
        per_layer += [h, kv, kv]
    if a.bias:
        per_layer += [h, h] + ([f, f] if a.mlp == "swiglu" else [f])
    small = sum(x for x in per_layer if x < BNB_MIN_8BIT) * a.n_layers
    final = h * (2 if a.norm == "layernorm" else 1)
    return small + (final if h < BNB_MIN_8BIT else 0)


def state_bytes(model: ModelSpec, config: TrainConfig, trainable: int) -> float:
    """Optimizer state bytes over all ``trainable`` parameters (unsharded)."""
    p, opt = config.precision, config.optimizer
    lora = config.lora_rank is not None
    if opt.eight_bit:
        small = min(trainable, small_tensor_params(model, config))
        big = trainable - small
        return big * (2 + 2 * 4 / BNB_BLOCK) + small * 8
    pure = p is Precision.pure_bf16 and not lora  # LoRA adapters stay fp32
    if opt is Optimizer.sgd:
        return trainable * (2 if pure else 4)
    return trainable * ((4 + (KAHAN_BYTES if config.kahan else 0)) if pure else 8)


def largest_tensor_params(model: ModelSpec, lora_rank: int | None = None) -> int:
    """Elements of the largest trainable tensor: the one gradient alive when each parameter steps in
    its own hook (the embedding or the LM head of an LLM, an MLP projection otherwise; with LoRA,
    the largest adapter matrix)."""
    a = model.arch
    if lora_rank is not None and a is not None:
        return lora_rank * max(max(i, o) for i, o in lora_shapes(model))
    if a is not None:
        biggest = max(a.d_model * a.d_ff, a.d_model * a.d_model)
        if a.vocab:
            biggest = max(biggest, a.vocab * a.d_model)
        return biggest
    if model.trace is not None and model.trace.largest_unit_params:
        return model.trace.largest_unit_params
    return model.params
