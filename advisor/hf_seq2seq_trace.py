"""Trace a transformers encoder-decoder (T5, mT5, BART) from its ``config.json`` on the meta device.

As ``advisor.hf_trace`` does for one stack, the model is traced small and the profile extrapolated, here
along two axes: with (1, 1), (2, 1) and (1, 2) encoder and decoder layers, an encoder layer is the
second less the first, a decoder layer (self-attention, cross-attention, feed-forward) the third less
the first, and the model of E and D layers is the first plus E - 1 and D - 1 of each. The step is a
seq2seq training step (``advisor.tracer.seq2seq_step``): source ids and labels of the same length, the
model's own cross-entropy, the logits held through backward. T5's relative position bias is added to
the scores as SDPA's ``attn_mask`` and gets a gradient (``advisor.sdpa``: the memory-efficient kernel).

What is not linear in the sequence is caught by a second length, ``REF_TOKENS`` and twice that: per
sample, saved = a*s + c*s^2 (probabilities, where attention falls back to math), and per batch the
[1, heads, q, k] position bias every layer's attention keeps (a copy of its own under autocast), fixed =
w + c*s^2 (``TraceProfile.fixed_saved_bytes_quadratic``).
"""

from __future__ import annotations

import time

from advisor.errors import UserError
from advisor.models import ModelSpec, TraceProfile

REF_TOKENS = 128  # the trace's source (and target) length; a second trace at twice it gives the s^2 part


def trace_seq2seq(data: dict, closed: ModelSpec) -> ModelSpec:
    """``closed`` (``advisor.hf_config``'s parameters-only spec of ``data``) with its trace."""
    import torch
    import transformers
    from transformers import AutoConfig

    from advisor.hf_config import _architecture, _Config
    from advisor.hf_seq2seq import ARCHITECTURES, seq2seq_shape
    from advisor.tracer import profile_module, seq2seq_step

    start = time.perf_counter()
    model_type = data["model_type"].lower()
    cfg = _Config(data, closed.source.split(" ", 1)[-1])
    cls_name, head, _ = _architecture(cfg, model_type, next(iter(ARCHITECTURES[model_type].values()))[0])
    shape = seq2seq_shape(cfg, model_type, head)
    cls = getattr(transformers, cls_name)
    fields = {k: v for k, v in data.items() if k not in ("model_type", "_name_or_path", "transformers_version")}
    enc_key, dec_key = shape.layers_keys
    attn: list[str] = []

    def build(ne: int, nd: int):
        def make():
            model = cls._from_config(AutoConfig.for_model(model_type, **{**fields, enc_key: ne, dec_key: nd}))
            attn[:] = [model.config._attn_implementation]
            return model.train()
        return make

    def inputs_at(seq: int):
        return lambda b: (torch.zeros(b, seq, dtype=torch.long, device="meta"),)

    def step(model, inputs):
        if head == "none":  # a bare backbone: the loss is the mean of the decoder's output
            return model(input_ids=inputs[0], decoder_input_ids=inputs[0]).last_hidden_state
        return seq2seq_step(model, inputs[0])

    def at(seq: int) -> tuple[TraceProfile, list[int]]:
        traced = [profile_module(build(ne, nd), inputs_at(seq), (seq,), "tokens", loss_fn=step)
                  for ne, nd in ((1, 1), (2, 1), (1, 2))]
        return combine(*(p for p, _ in traced), shape.encoder_layers, shape.decoder_layers, seq), [n for _, n in traced]

    try:
        profile, (n11, n21, n12) = at(REF_TOKENS)
        double, _ = at(2 * REF_TOKENS)
    except Exception as exc:
        raise UserError(f"tracing {cls_name} from transformers on the meta device failed: {type(exc).__name__}: {exc}",
                        where=cfg.where, fix="use --module FILE.py:FACTORY with your own factory, or report this config") from None
    s = REF_TOKENS
    quad = {k: (double.saved_bytes[k] - 2 * profile.saved_bytes[k]) / (2 * s**2) for k in profile.saved_bytes}
    # fixed(s) = w + c*s^2: fixed(2s) - fixed(s) = 3*c*s^2
    fixed_quad = {k: (double.fixed_saved_bytes[k] - profile.fixed_saved_bytes[k]) / (3 * s**2)
                  for k in profile.fixed_saved_bytes}
    profile = profile.model_copy(update={
        "saved_bytes_quadratic": {k: v for k, v in quad.items() if v > 0},
        "fixed_saved_bytes_quadratic": {k: v for k, v in fixed_quad.items() if v > 0},
        # the biggest block FSDP gathers: a decoder layer (it has cross-attention too)
        "largest_unit_params": max(n21 - n11, n12 - n11),
    })
    params = n11 + (shape.encoder_layers - 1) * (n21 - n11) + (shape.decoder_layers - 1) * (n12 - n11)
    impl = f"transformers {cls_name} ({attn[0] if attn else '?'})"
    return closed.model_copy(update={
        "params": params, "trace": profile, "implementation": impl,
        "description": f"{closed.description}; {impl}, {shape.encoder_layers} encoder + {shape.decoder_layers} "
                       f"decoder layers, target as long as the source, traced in {time.perf_counter() - start:.1f}s "
                       "on the meta device",
    })


def combine(p11: TraceProfile, p21: TraceProfile, p12: TraceProfile, ne: int, nd: int, tokens: int) -> TraceProfile:
    """The (``ne``, ``nd``)-layer model's profile per sample of ``tokens`` source tokens."""

    def lin(a: float, enc: float, dec: float) -> float:
        return a + (ne - 1) * (enc - a) + (nd - 1) * (dec - a)

    def each(d1: dict, de: dict, dd: dict) -> dict[str, float]:
        return {k: lin(d1[k], de[k], dd[k]) for k in d1}

    return p11.model_copy(update={
        "ref_input": (tokens,), "scales_with": "tokens",
        "fwd_flops": lin(p11.fwd_flops, p21.fwd_flops, p12.fwd_flops),
        "saved_bytes": each(p11.saved_bytes, p21.saved_bytes, p12.saved_bytes),
        "fixed_saved_bytes": each(p11.fixed_saved_bytes, p21.fixed_saved_bytes, p12.fixed_saved_bytes),
        "saved_bytes_compiled": each(p11.saved_bytes_compiled, p21.saved_bytes_compiled, p12.saved_bytes_compiled),
        "matmul_weight_params": int(lin(p11.matmul_weight_params, p21.matmul_weight_params, p12.matmul_weight_params)),
        "kernels": int(lin(p11.kernels, p21.kernels, p12.kernels)),
        "work": {k: each(p11.work[k], p21.work[k], p12.work[k]) for k in p11.work},
        "work_fixed": {k: each(p11.work_fixed[k], p21.work_fixed[k], p12.work_fixed[k]) for k in p11.work_fixed},
        "grad_moment_fixed": each(p11.grad_moment_fixed, p21.grad_moment_fixed, p12.grad_moment_fixed),
        "grad_moment_per_sample": each(p11.grad_moment_per_sample, p21.grad_moment_per_sample, p12.grad_moment_per_sample),
    })
