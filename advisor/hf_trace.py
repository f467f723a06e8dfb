"""``--hf-config`` through transformers: trace the model class a user's script would build.

``advisor.hf_config`` reads a ``config.json`` into a closed-form ModelSpec (no torch). When
transformers is importable this module builds the class named in ``architectures`` from that
config on the meta device, with the attention implementation transformers picks for training
(its default: ``sdpa`` where the class supports it), feeds labels so the model's own loss runs
(``outputs.loss``; the loop holds ``outputs.logits`` through backward), and traces one training
step as ``--module`` does (``advisor.tracer``): Conv1D layers, composed activations (GPT-2's
tanh-GELU), dropout masks, tied embeddings and heads count as they run.

Speed: the model is traced with 1 and 2 layers (everything per layer is the difference, the
rest is the 1-layer trace less one layer), at ``REF_TOKENS`` tokens; estimates scale it with the
tokens of the configuration: with fused attention nothing saved grows faster than the sequence
(``advisor.sdpa``). Parameter
counts follow the same way, exactly, for models of identical repeated layers. No attention mask
is passed (no padding): an all-ones mask cannot be inspected on meta, and transformers drops it
for SDPA anyway (``is_causal`` instead).

Without transformers, ``resolve_hf_config`` returns the closed form and says so in
``ModelSpec.implementation``.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

from advisor.errors import UserError
from advisor.hf_config import spec_from_hf_config
from advisor.models import ModelSpec, TraceProfile

REF_TOKENS = 256  # trace length; any length gives the same per-token bytes with fused attention


def transformers_available() -> bool:
    """True when transformers can be imported (checked without importing it)."""
    return importlib.util.find_spec("transformers") is not None


def resolve_hf_config(path: str | Path, trace: bool | None = None) -> ModelSpec:
    """The spec for ``--hf-config``: traced through transformers when available (``trace=None``),
    or the closed form (``trace=False``, or transformers missing: the spec says which)."""
    closed = spec_from_hf_config(path)
    if trace is False:
        return closed
    if not transformers_available():
        if trace or closed.family == "encoder-decoder":
            why = (f"{closed.description.split(' from ', 1)[0]} (an encoder-decoder) is estimated by tracing its "
                   "transformers class, and transformers is not installed" if closed.family == "encoder-decoder"
                   else "transformers is not installed")
            raise UserError(why, fix="pip install 'cardwise[hf]'")
        return closed.model_copy(update={"implementation": "closed form (transformers not installed)"})
    p = Path(path).expanduser()
    data = json.loads((p / "config.json" if p.is_dir() else p).read_text(encoding="utf-8"))
    return trace_hf(data, closed)


def catalog_hf_spec(name: str) -> ModelSpec | None:
    """The catalog model ``name`` as its transformers class would run it (``catalog.hf_equivalent``),
    traced; None when it has no such class or transformers is not installed. Imports torch."""
    from advisor.catalog import ENCODER_DECODERS, catalog_model, hf_equivalent
    from advisor.hf_config import spec_from_config_dict

    data = hf_equivalent(name)
    if data is None or not transformers_available():
        return None
    closed = spec_from_config_dict(data, f"catalog {name}")
    spec = trace_hf(data, closed)
    key = name.lower().strip()
    if key in ENCODER_DECODERS:  # no catalog spec but this one: the table's words, the config's default length
        _, desc, task = ENCODER_DECODERS[key]
        return spec.model_copy(update={"name": key, "source": "catalog", "task": task,
                                       "description": f"{desc}; {spec.implementation}"})
    cat = catalog_model(name)
    return spec.model_copy(update={"name": cat.name, "source": "catalog", "task": cat.task,
                                   "default_seq_len": cat.default_seq_len})


def _class_name(closed: ModelSpec) -> str:
    return closed.description.split(" from ", 1)[0]


def trace_hf(data: dict, closed: ModelSpec) -> ModelSpec:
    """Trace the transformers class for ``data`` (a config dict) on meta; ``closed`` is its closed form."""
    import torch
    import transformers
    from transformers import AutoConfig

    # transformers' notes about config fields (e.g. "loss_type=None ... Using the default loss") are
    # not the user's business here: the config is only read to build the model on meta.
    transformers.logging.set_verbosity_error()

    from advisor.tracer import profile_module

    if closed.family == "encoder-decoder":
        from advisor.hf_seq2seq_trace import trace_seq2seq

        return trace_seq2seq(data, closed)
    start = time.perf_counter()
    cls_name = _class_name(closed)
    cls = getattr(transformers, cls_name)
    cfg = {k: v for k, v in data.items() if k not in ("model_type", "layer_types", "_name_or_path", "transformers_version")}
    model_type = data["model_type"]
    base = AutoConfig.for_model(model_type, **cfg)
    layers_key = base.attribute_map.get("num_hidden_layers", "num_hidden_layers")
    n_layers = getattr(base, layers_key)
    arch = closed.arch
    attn: list[str] = []

    def build(n: int):
        def make():
            model = cls._from_config(AutoConfig.for_model(model_type, **{**cfg, layers_key: n}))
            attn[:] = [model.config._attn_implementation]
            return model.train()
        return make

    vision = arch is not None and bool(arch.patch_size)
    side = arch.image_size if vision else 0
    tokens = arch.tokens(REF_TOKENS) if arch is not None else REF_TOKENS

    def inputs_at(seq: int):
        def make_inputs(b: int):
            if vision:
                x = torch.randn(b, arch.channels, side, side, device="meta")
            else:
                x = torch.zeros(b, seq, dtype=torch.long, device="meta")
            if arch is None or arch.head == "none":
                return (x, None)
            shape = (b,) if arch.head in ("cls", "image-cls", "qa") else (b, seq)  # qa: one span position each
            return (x, torch.zeros(shape, dtype=torch.long, device="meta"))
        return make_inputs

    def step(model, inputs):
        x, labels = inputs
        key = "pixel_values" if vision else "input_ids"
        qa = arch is not None and arch.head == "qa"  # BertForQuestionAnswering takes the span's two ends
        targets = {} if labels is None else {"start_positions": labels, "end_positions": labels} if qa else {"labels": labels}
        out = model(**{key: x}, **targets)
        if labels is None:
            return out.last_hidden_state  # a bare backbone: loss "none" (the mean of its output)
        return out.loss, (out.start_logits if qa else out.logits)

    try:
        p1, n1 = profile_module(build(1), inputs_at(REF_TOKENS), (tokens,), "tokens", loss_fn=step)
        p2, n2 = profile_module(build(2), inputs_at(REF_TOKENS), (tokens,), "tokens", loss_fn=step)
        profile = _extrapolate(p1, p2, n_layers, tokens)
        if "math" in profile.attention and not vision:
            # The math fallback keeps s x s probabilities: bytes are quadratic in the sequence;
            # a second length gives the s^2 coefficient (saved = a*s + c*s^2 per sample).
            q1, _ = profile_module(build(1), inputs_at(2 * REF_TOKENS), (2 * tokens,), "tokens", loss_fn=step)
            q2, _ = profile_module(build(2), inputs_at(2 * REF_TOKENS), (2 * tokens,), "tokens", loss_fn=step)
            double = _extrapolate(q1, q2, n_layers, 2 * tokens)
            quad = {k: (double.saved_bytes[k] - 2 * profile.saved_bytes[k]) / (2 * tokens**2) for k in profile.saved_bytes}
            profile = profile.model_copy(update={"saved_bytes_quadratic": quad})
    except Exception as exc:
        raise UserError(f"tracing {cls_name} from transformers on the meta device failed: {type(exc).__name__}: {exc}",
                        where=closed.source.split(" ", 1)[-1],
                        fix="use --module FILE.py:FACTORY with your own factory, or report this config") from None
    params = n1 + (n_layers - 1) * (n2 - n1)
    impl = f"transformers {cls_name} ({attn[0] if attn else '?'})"
    return closed.model_copy(update={
        "params": params, "trace": profile, "implementation": impl, "loss": "model" if arch.head != "none" else "none",
        "description": f"{closed.description}; {impl}, traced in {time.perf_counter() - start:.1f}s on the meta device",
    })


def _extrapolate(p1: TraceProfile, p2: TraceProfile, n: int, tokens: int) -> TraceProfile:
    """The ``n``-layer model's profile (per sample of ``tokens`` tokens) from its 1- and 2-layer traces."""

    def lin(a: float, b: float) -> float:
        return a + (n - 1) * (b - a)

    def each(d1: dict, d2: dict) -> dict[str, float]:
        return {k: lin(d1[k], d2[k]) for k in d1}

    return p1.model_copy(update={
        "ref_input": (tokens,), "scales_with": "tokens",
        "fwd_flops": lin(p1.fwd_flops, p2.fwd_flops),
        "saved_bytes": each(p1.saved_bytes, p2.saved_bytes),
        "fixed_saved_bytes": each(p1.fixed_saved_bytes, p2.fixed_saved_bytes),
        "saved_bytes_compiled": each(p1.saved_bytes_compiled, p2.saved_bytes_compiled),
        "matmul_weight_params": int(lin(p1.matmul_weight_params, p2.matmul_weight_params)),
        "kernels": int(lin(p1.kernels, p2.kernels)),
        "work": {k: each(p1.work[k], p2.work[k]) for k in p1.work},
        "work_fixed": {k: each(p1.work_fixed[k], p2.work_fixed[k]) for k in p1.work_fixed},
        "layers": n,
        "layer_saved_bytes": {k: p2.saved_bytes[k] - p1.saved_bytes[k] for k in p1.saved_bytes},
    })
