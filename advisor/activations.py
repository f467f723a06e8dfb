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

from pydantic import BaseModel, ConfigDict, Field

from advisor.compiled import TRANSFORMERS_LOSS_BYTES, compiled_loss_temp_bytes
from advisor.config import Precision, TrainConfig
from advisor.setup import bf16_params
from advisor.memo import Memo, config_key
from advisor.models import ModelSpec, TransformerArch


class ActivationProfile(BaseModel):
    """What one micro-batch keeps alive between forward and backward."""

    model_config = ConfigDict(extra="forbid")

    per_sample_bytes: float = Field(description="saved for backward per sample (no checkpointing)")
    fixed_bytes: float = Field(description="saved once per step whatever the batch (autocast weight copies)")
    layer_bytes: float = Field(0.0, description="per sample, one layer (recomputed at a time when checkpointing)")
    boundary_bytes: float = Field(0.0, description="per sample, per layer, kept when checkpointing (layer input)")
    layers: int = 0
    loss_saved_bytes: float = Field(0.0, description="per sample, part of per_sample_bytes kept for the loss")
    loss_temp_bytes: float = Field(0.0, description="per sample, loss-backward temporaries at the start of backward")
    grad_moment_fixed: float = Field(0.0, description="weight gradients accumulated above the saved bytes freed, "
                                                      "at their most during backward: fixed part")
    grad_moment_per_sample: float = Field(0.0, description="the same moment's change per sample (freed saved bytes)")
    tokens: int = 1


def _norm_bytes(a: TransformerArch, r: int, compiled: bool) -> float:
    if compiled or a.norm == "layernorm":
        return r * a.d_model + 8  # input, fp32 mean/rstd (inductor fuses RMSNorm to this too)
    return 4 * a.d_model + r * a.d_model + 4  # HF RMSNorm eager: fp32 upcast (pow, mul), y (weight mul), rstd


def compiled_math_attention_bytes(compute_bytes: int) -> int:
    """Bytes kept per attention-probability element (per head, per query-key pair) by a compiled
    training step whose SDPA runs the math path with dropout.

    What AOTAutograd's min-cut partitioner saves for ``_scaled_dot_product_attention_math`` with
    ``dropout_p > 0``: the softmax output and the dropped probabilities (both in the compute dtype)
    and the bool dropout mask: 2c + 1 (without dropout: the softmax output alone). Checked against
    the partitioner itself in tests/test_compiled_memory.py.
    """
    return 2 * compute_bytes + 1


# Bytes per element the math path keeps when it runs on half-precision inputs: PyTorch's math SDPA
# upcasts fp16/bf16 query, key and value to fp32 (at::native::_scaled_dot_product_attention_math, unless
# torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)), so its softmax output is fp32 and
# backward keeps fp32 copies of q, k and v. Seen on the H200 in the partition of a compiled HF
# ViTForImageClassification step (benchmarks/notebook/2026-12-04-compiled-saved):
# [32, 12, 197, 197] fp32 probabilities and three [384, 64|197, 197|64] fp32 q/k/v tensors per layer.
MATH_PROBS_BYTES = 4
MATH_QKV_BYTES = 4


def compiled_attention_keeps_probs(a: TransformerArch, transformers: bool = False) -> bool:
    """Whether a compiled step keeps the s x s attention probabilities: bidirectional attention with
    dropout. Under torch.compile (torch < 2.14), transformers never skips the attention mask
    (masking_utils._ignore_bidirectional_mask_sdpa: dynamo reports is_exporting()), and the
    compiled step of HF BERT (dropout 0.1) measured on the H200 keeps 5.2 bytes per probability
    element per layer: the math path's 2c + 1 (benchmarks/calibration/predict_users.py's
    users' report, "compiled memory"). Causal GPT-2 with the same dropout, compiled, keeps none (measured), nor does
    nn.MultiheadAttention (traced --module models)."""
    if transformers and not a.causal:
        # transformers' bidirectional attention, compiled, takes the math path even without mask or
        # dropout: compiled HF ViT (no dropout) on the H200 runs aten._safe_softmax, never flash
        # (benchmarks/notebook/2026-12-04-compiled-saved/probe_compiled_saved.py); the zoo's ViT, compiled, keeps no probabilities.
        return True
    return not a.causal and a.attn_dropout > 0 and not a.patch_size


def transformer_layer_bytes(a: TransformerArch, p: Precision, compiled: bool = False, gelu_kept: float = 1.0,
                            seq: int = 0, transformers: bool = False) -> float:
    """Saved bytes per token of one layer.

    Compiled (inductor's min-cut partitioner recomputes cheap pointwise ops in backward): norms keep
    their input only, one fused bf16 copy feeds q/k/v and one the MLP, GELU keeps its input only
    and SwiGLU its gate and up projections. With ``seq`` given and bidirectional attention with
    dropout, the math path's probabilities, dropped probabilities and mask (per token: heads x seq
    elements, ``compiled_math_attention_bytes`` each).
    """
    h, f = a.d_model, a.d_ff
    c = p.compute_bytes
    r = p.weight_bytes  # the residual stream: the weights' dtype
    swiglu = a.mlp == "swiglu"
    norm = _norm_bytes(a, r, compiled)
    flash = 4 * c * h + 4 * a.n_heads  # q, k, v (after GQA repeat), out; fp32 log-sum-exp per head
    if compiled:
        probs = 0.0
        if seq and compiled_attention_keeps_probs(a, transformers):
            if a.attn_dropout > 0:
                probs = a.n_heads * seq * compiled_math_attention_bytes(c)
            else:  # the fp32 softmax output and fp32 q, k, v in place of the bf16 ones flash keeps
                probs = a.n_heads * seq * MATH_PROBS_BYTES + 3 * (MATH_QKV_BYTES - c) * h
        return 2 * norm + 2 * c * h + flash + (2 if swiglu else gelu_kept) * c * f + probs
    # Autocast casts an activation once per op: separate q/k/v projections make three bf16 copies
    # of the same normalised input, gate and up two (torch.amp keeps a cache for weights only).
    attn_in = (3 if p.autocast else 1) * c * h
    mlp_in = (2 if p.autocast and swiglu else 1) * c * h
    mlp = (4 if swiglu else 2) * c * f  # gelu: fc out + gelu out; swiglu: gate, silu, up, product
    return 2 * norm + attn_in + flash + mlp_in + mlp


def transformer_base_bytes(a: TransformerArch, p: Precision, compiled: bool = False,
                           head_share: float = 1.0) -> tuple[float, float]:
    """(saved bytes per token outside the layers, of which the loss keeps) — embeddings, head, loss.
    ``head_share``: the share of the tokens an LM/MLM head runs on (``TransformerArch.head_positions``)."""
    h = a.d_model
    c = p.compute_bytes
    r = p.weight_bytes  # the residual stream: the weights' dtype
    n = 0.0
    if a.patch_size:  # the patch conv keeps its (cast) input: 3*p*p pixels per token
        n += a.channels * a.patch_size**2 * (4 if p in (Precision.fp32, Precision.tf32) else 2)
    else:
        n += 8  # token ids for the embedding backward
        if a.type_vocab:
            n += 8 + r * h + 8  # token-type ids, embedding LayerNorm
    norm = _norm_bytes(a, r, compiled)
    loss = 0.0
    if a.head in ("lm", "mlm"):
        # Eager: fp32 log-softmax output of the upcast logits; compiled: the logits themselves.
        loss = ((c if compiled else 4) * a.vocab + 8) * head_share
        n += ((norm + c * h) if a.head == "lm" else (2 * c * h + r * h + 8 + c * h)) * head_share
    elif a.head == "image-cls":
        # The classifier reads the class token, a view that keeps the whole normalised output
        # alive, except under autocast, whose bf16 cast copies the slice alone.
        n += norm + (0 if p.autocast else c * h)
    elif a.head == "cls":
        n += 0 if p.autocast else c * h  # the pooler's class-token view, likewise
    elif a.head == "qa":
        # The span projection keeps its input, every token's hidden state (autocast: its cast copy); its two
        # cross-entropies over the positions keep their fp32 log-softmax (eager; compiled, the logits), one
        # value per token each (BertForQuestionAnswering: logits.split(1, dim=-1), one CrossEntropyLoss per end).
        loss = (c if compiled else 4) * a.num_labels
        n += c * h
    return n + loss, loss


def activation_precision(config: TrainConfig) -> Precision:
    """The precision the activations are computed in. FSDP with mixed precision (CPU offload included)
    is FSDP2 with ``MixedPrecisionPolicy(param_dtype=reduce_dtype=bf16)`` (accelerate 1.16,
    utils/dataclasses.FullyShardedDataParallelPlugin.set_mixed_precision): the gathered weights are bf16,
    so the embedding's output, the norms' weight products and the residual adds are bf16 too, and autocast
    finds every matmul input already bf16 and makes no cast copies: what pure-bf16 keeps (r = 2 bytes).
    LoRA likewise: the runtime casts the frozen base to bf16 before peft wraps it
    (launcher/compromises/lora.py; peft's own casts for the fp32 adapters are step_work's and memory's)."""
    p = config.precision
    if p.autocast and bf16_params(config):
        return Precision.pure_bf16
    return p


def activation_profile(model: ModelSpec, config: TrainConfig, compile_factor: float = 1.0,
                       gelu_kept: float = 1.0, compile_loss_bytes: float = TRANSFORMERS_LOSS_BYTES) -> ActivationProfile:
    """Per-sample saved bytes for ``config``; ``compile_factor`` scales traced (non-transformer) models
    when compiled, ``gelu_kept`` is the compiled GELU MLP's kept tensors (calibrated)."""
    p = activation_precision(config)
    if model.arch is not None and not (model.trace is not None and model.trace.layers and not config.compile):
        a = model.arch
        tokens = a.tokens(config.seq_len or model.default_seq_len, config.image_size)
        layer = transformer_layer_bytes(a, p, config.compile, gelu_kept, seq=tokens,
                                        transformers=model.is_transformers) * tokens
        base, loss = transformer_base_bytes(a, p, config.compile, head_share=a.head_tokens(tokens) / max(1, tokens))
        fixed = 2.0 * a.matmul_params() if p.autocast else 0.0
        r = p.weight_bytes  # the residual stream: the weights' dtype
        logits = (a.vocab * a.head_tokens(tokens) if a.head in ("lm", "mlm") else
                  a.num_labels * tokens if a.head == "qa" else 0)  # qa: the start and end logits of every token
        # Loss backward: fp32 grad of the log-softmax and of the upcast logits, 8 bytes per logit
        # eager (measured: the LM rows of benchmarks/calibration/fit.py's table); fused when compiled
        # (advisor.compiled: what the fused loss holds depends on the code that computes it).
        temp = (compiled_loss_temp_bytes(a.head, p.compute_bytes, model.is_transformers, compile_loss_bytes)
                if config.compile else 8.0) * logits
        return ActivationProfile(
            per_sample_bytes=a.n_layers * layer + base * tokens, fixed_bytes=fixed, layer_bytes=layer,
            boundary_bytes=r * a.d_model * tokens, layers=a.n_layers, loss_saved_bytes=loss * tokens,
            loss_temp_bytes=temp, tokens=tokens,
        )
    t = model.trace
    if t is None:
        raise ValueError(f"model {model.name} has neither an architecture nor a trace profile")
    return traced_profile(model, config, compile_factor)


_PROFILES = Memo()
_PER_SAMPLE_FREE = ("micro_batch", "grad_accum", "grad_ckpt", "strategy")


def shared_activation_profile(model: ModelSpec, config: TrainConfig, compile_factor: float = 1.0,
                              gelu_kept: float = 1.0, compile_loss_bytes: float = TRANSFORMERS_LOSS_BYTES) -> ActivationProfile:
    """``activation_profile``, memoised for the estimator (``advisor.memo``): one object per model and
    configuration, shared, so read-only (``model_copy`` it to change a term). The profile is per sample
    (no micro-batch, accumulation or checkpointing in it) and reads the strategy only through
    ``activation_precision``, so configurations that differ only there share it."""
    key = (activation_precision(config), compile_factor, gelu_kept, compile_loss_bytes) + config_key(config, _PER_SAMPLE_FREE)
    return _PROFILES.get((model,), key, lambda: activation_profile(model, config, compile_factor, gelu_kept,
                                                                   compile_loss_bytes))


def traced_profile(model: ModelSpec, config: TrainConfig, compile_factor: float = 1.0) -> ActivationProfile:
    """From a trace: per-token coefficients times tokens (the trace counts what fused attention keeps,
    which is linear in tokens), per-sample figures scaled by pixels, or as traced."""
    t = model.trace
    p = activation_precision(config)
    key = p.trace_key
    scale = 1.0
    if t.scales_with == "pixels" and config.image_size and t.ref_input:
        scale = (config.image_size / t.ref_input[-1]) ** 2
    tokens = 1
    if t.scales_with == "tokens" and t.ref_input:
        seq = config.seq_len or model.default_seq_len
        tokens = model.arch.tokens(seq, config.image_size) if model.arch is not None else seq or t.ref_input[0]
        scale = tokens / t.ref_input[0]
    # The compile factor (inductor recomputing pointwise ops: BN/activation outputs of CNNs) does not
    # apply to token-scaled traces (attention models): what they save is mostly matmul inputs and
    # fused-attention tensors, which the min-cut partitioner never recomputes (compute-intensive ops
    # are banned from recomputation, torch/_functorch/partitioners.py). Measured on the H200:
    # compiled nanoGPT and the nn.TransformerEncoder classifier keep what eager keeps (within 2%).
    recomputes = config.compile and t.scales_with != "tokens"
    compiled = compile_factor if recomputes else 1.0
    # Compiled, inductor keeps what GEMMs and convolutions touch and recomputes the pointwise ops and
    # norms between them: a conv-BN-SiLU block keeps the convolution's output and the SiLU's, not the
    # BN's (SiLU's backward wants its input); the factor is what is left to fit.
    kept = (t.saved_bytes_compiled.get(key) if recomputes else None) or t.saved_bytes[key]
    per = kept * scale * compiled
    if t.saved_bytes_quadratic and t.scales_with == "tokens":  # math attention: s^2 probabilities
        ref = t.ref_input[0]
        per += t.saved_bytes_quadratic.get(key, 0.0) * (tokens * tokens - tokens * ref)
    temp = t.loss_temp_bytes.get(key, 0.0) * scale
    layers, layer, boundary = 0, 0.0, 0.0
    if t.layers and t.layer_saved_bytes and model.arch is not None:
        layers, layer = t.layers, t.layer_saved_bytes[key] * scale * compiled
        # checkpointing keeps each layer's input: the residual stream, fp32 under autocast
        boundary = p.weight_bytes * model.arch.d_model * tokens
    fixed = t.fixed_saved_bytes.get(key, 0.0)
    if t.fixed_saved_bytes_quadratic and t.scales_with == "tokens":  # [heads, q, k] position biases (hf_seq2seq_trace)
        fixed += t.fixed_saved_bytes_quadratic.get(key, 0.0) * (tokens * tokens - t.ref_input[0] ** 2)
    return ActivationProfile(per_sample_bytes=per, fixed_bytes=fixed, layer_bytes=layer,
                             boundary_bytes=boundary, layers=layers, loss_temp_bytes=temp, tokens=tokens,
                             grad_moment_fixed=t.grad_moment_fixed.get(key, 0.0),
                             grad_moment_per_sample=t.grad_moment_per_sample.get(key, 0.0) * scale)


def backward_bytes(profile: ActivationProfile, micro_batch: int, grad_ckpt: bool, ckpt_fraction: float) -> tuple[float, float]:
    """(activations kept at the start of backward, extra transient bytes on top during backward).

    Checkpointing per layer keeps each layer's input; during backward one layer is recomputed at
    a time, after the loss's saved tensors and temporaries are gone. Models without layers (CNNs)
    keep ``ckpt_fraction`` of their activations (calibrated).
    """
    mb = micro_batch
    if not grad_ckpt:
        return profile.per_sample_bytes * mb + profile.fixed_bytes, profile.loss_temp_bytes * mb
    if profile.layers:
        outside = profile.per_sample_bytes - profile.layers * profile.layer_bytes
        kept = (profile.layers * profile.boundary_bytes + outside) * mb + profile.fixed_bytes
        extra = max(profile.loss_temp_bytes, profile.layer_bytes - profile.loss_saved_bytes) * mb
        return kept, extra
    return profile.per_sample_bytes * mb * ckpt_fraction + profile.fixed_bytes, profile.loss_temp_bytes * mb
