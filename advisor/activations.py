"""Bytes autograd keeps for backward, per sample: closed form for transformers, traced otherwise.

The transformer formula counts, tensor by tensor, what each layer of ``advisor.zoo`` (which is
HF's layout: separate q/k/v projections, SDPA attention, HF RMSNorm) saves; ``tests/
test_activations.py`` checks it against ``advisor.tracer`` on every catalog transformer. With
flash / memory-efficient attention nothing grows with seq_len squared, so bytes are linear in
tokens (Korthikanti et al. 2022, "Reducing Activation Recomputation", eq. 1 without the 5as/h
term that such kernels remove).

Notation per token: h = d_model, f = d_ff, c = bytes of matmul outputs (2 under bf16/fp16
autocast and pure-bf16, 4 in fp32), r = bytes of the residual stream (4 under autocast, whose
adds promote to fp32; 2 in pure-bf16).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from advisor.config import Precision, TrainConfig
from advisor.models import ModelSpec, TransformerArch


class ActivationProfile(BaseModel):
    """What one micro-batch keeps alive between forward and backward."""

    model_config = ConfigDict(extra="forbid")

    per_sample_bytes: float = Field(description="saved for backward per sample (no checkpointing)")
    fixed_bytes: float = Field(description="saved once per step whatever the batch (autocast weight copies)")
    layer_bytes: float = Field(0.0, description="per sample, one layer (recomputed at a time when checkpointing)")
    boundary_bytes: float = Field(0.0, description="per sample, per layer, kept when checkpointing (layer input)")
    layers: int = 0
    logits_per_sample: float = Field(0.0, description="output elements per sample (loss temporaries)")
    tokens: int = 1


def _trace_key(p: Precision) -> str:
    if p in (Precision.bf16, Precision.fp16):
        return "bf16"
    if p is Precision.pure_bf16:
        return "pure-bf16"
    return "fp32"


def transformer_layer_bytes(a: TransformerArch, p: Precision) -> float:
    """Saved bytes per token of one layer."""
    h, f = a.d_model, a.d_ff
    c = p.compute_bytes
    r = 2 if p is Precision.pure_bf16 else 4
    autocast = p.autocast
    if a.norm == "layernorm":
        norm = r * h + 8  # input, fp32 mean and rstd
    else:
        norm = 4 * h + r * h + 8  # HF RMSNorm: fp32 upcast (pow, mul) and the normalised y (weight mul)
    # Autocast casts an activation once per op: separate q/k/v projections make three bf16 copies
    # of the same normalised input, gate and up two (torch.amp keeps a cache for weights only).
    attn_in = (3 if autocast else 1) * c * h
    swiglu = a.mlp == "swiglu"
    mlp_in = (2 if autocast and swiglu else 1) * c * h
    flash = 4 * c * h + 4 * a.n_heads  # q, k, v (after GQA repeat), out; fp32 log-sum-exp per head
    mlp = (4 if swiglu else 2) * c * f  # gelu: fc out + gelu out; swiglu: gate, silu, up, product
    return 2 * norm + attn_in + flash + mlp_in + mlp


def transformer_base_bytes(a: TransformerArch, p: Precision) -> float:
    """Saved bytes per token outside the layers: embeddings, final norm, head and loss."""
    h = a.d_model
    c = p.compute_bytes
    r = 2 if p is Precision.pure_bf16 else 4
    n = 0.0
    if a.patch_size:  # the patch conv keeps its input: 3*p*p pixels per token
        n += a.channels * a.patch_size**2 * (2 if p.autocast else p.weight_bytes if p is Precision.pure_bf16 else 4)
    else:
        n += 8  # token ids for the embedding backward
        if a.type_vocab:
            n += 8 + r * h + 8  # token-type ids, embedding LayerNorm
    norm = r * h + 8 if a.norm == "layernorm" else 4 * h + r * h + 8
    if a.head == "lm":
        n += norm + c * h + 4 * a.vocab + 8  # final norm, head input, fp32 log-softmax, targets
    elif a.head == "mlm":
        n += 2 * c * h + r * h + 8 + c * h + 4 * a.vocab + 8  # transform + gelu + LN + decoder + loss
    elif a.head == "image-cls":
        n += norm + c * h
    return n


def activation_profile(model: ModelSpec, config: TrainConfig) -> ActivationProfile:
    p = config.precision
    if model.arch is not None:
        a = model.arch
        tokens = a.tokens(config.seq_len or model.default_seq_len, config.image_size)
        layer = transformer_layer_bytes(a, p) * tokens
        base = transformer_base_bytes(a, p) * tokens
        fixed = 2.0 * a.matmul_params() if p.autocast else 0.0
        r = 2 if p is Precision.pure_bf16 else 4
        logits = (a.vocab * tokens) if a.head in ("lm", "mlm") else a.num_labels
        return ActivationProfile(
            per_sample_bytes=a.n_layers * layer + base, fixed_bytes=fixed, layer_bytes=layer,
            boundary_bytes=r * a.d_model * tokens, layers=a.n_layers, logits_per_sample=logits, tokens=tokens,
        )
    t = model.trace
    if t is None:
        raise ValueError(f"model {model.name} has neither an architecture nor a trace profile")
    key = _trace_key(p)
    scale = 1.0
    if t.scales_with == "pixels" and config.image_size and t.ref_input:
        scale = (config.image_size / t.ref_input[-1]) ** 2
    per = t.saved_bytes[key] * scale
    return ActivationProfile(per_sample_bytes=per, fixed_bytes=t.fixed_saved_bytes.get(key, 0.0),
                             layer_bytes=0.0, logits_per_sample=t.output_numel or 1000, tokens=1)


def saved_bytes(profile: ActivationProfile, micro_batch: int, grad_ckpt: bool, ckpt_fraction: float) -> float:
    """Activation bytes at the start of backward for one micro-batch.

    Checkpointing per layer keeps each layer's input and recomputes one layer at a time; for
    models without layers (CNNs) it keeps ``ckpt_fraction`` of the activations (calibrated).
    """
    if not grad_ckpt:
        return profile.per_sample_bytes * micro_batch + profile.fixed_bytes
    if profile.layers:
        outside = profile.per_sample_bytes - profile.layers * profile.layer_bytes
        kept = profile.layers * profile.boundary_bytes + profile.layer_bytes + outside
        return kept * micro_batch + profile.fixed_bytes
    return profile.per_sample_bytes * micro_batch * ckpt_fraction + profile.fixed_bytes
