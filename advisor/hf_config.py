"""``--hf-config PATH``: a ModelSpec from a Hugging Face ``config.json``, offline, without transformers.

Supported families (``model_type``): llama, mistral, qwen2, gpt2, bert, vit; and the encoder-decoders t5, mt5,
bart (``advisor.hf_seq2seq``: checked and counted here, estimated from a trace of the transformers class only,
since no closed form describes two stacks and cross-attention). The head follows
``architectures`` exactly as transformers would build it, and the parameter count is the one
``AutoModel...from_config`` instantiates:

=============================  ======================================================
``*ForCausalLM``/GPT2LMHead    LM head, tied to the embeddings per ``tie_word_embeddings``
                               (default: False for llama/mistral/qwen2, True for gpt2/bert)
``LlamaModel``/``GPT2Model``…  bare decoder: final norm, no LM head
``BertForMaskedLM``            no pooler; dense + LayerNorm transform, (tied) decoder + bias
``BertForSequenceClassification``  pooler + classifier (``id2label``/``num_labels``, default 2)
``BertForQuestionAnswering``   no pooler; span projection (start/end logits) on every token
``BertModel``                  post-LN encoder + pooler
``ViTForImageClassification``  final LayerNorm + classifier on the class token, NO pooler
                               (transformers builds ``ViTModel(add_pooling_layer=False)``)
``ViTModel``                   final LayerNorm + pooler
=============================  ======================================================

Without ``architectures`` the catalog's semantics apply (decoders with their LM head, BERT with
its masked-LM head, ViT with its classification head) and the description says so. Missing
optional fields take transformers' per-family defaults; missing sizes are errors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from advisor import units
from advisor.errors import UserError, close_names
from advisor.hf_seq2seq import ARCHITECTURES as _SEQ2SEQ
from advisor.hf_seq2seq import seq2seq_shape
from advisor.models import ModelSpec, TransformerArch

# model_type -> {architecture class (lowercase key) -> (canonical class name, head)}
_ARCHITECTURES: dict[str, dict[str, tuple[str, str]]] = {
    mt: {c.lower(): (c, h) for c, h in table}
    for mt, table in {
        "llama": (("LlamaForCausalLM", "lm"), ("LlamaModel", "none")),
        "mistral": (("MistralForCausalLM", "lm"), ("MistralModel", "none")),
        "qwen2": (("Qwen2ForCausalLM", "lm"), ("Qwen2Model", "none")),
        "gpt2": (("GPT2LMHeadModel", "lm"), ("GPT2Model", "none")),
        "bert": (("BertForMaskedLM", "mlm"), ("BertForSequenceClassification", "cls"),
                 ("BertForQuestionAnswering", "qa"), ("BertModel", "none")),
        "vit": (("ViTForImageClassification", "image-cls"), ("ViTModel", "none")),
    }.items()
} | _SEQ2SEQ
SUPPORTED_MODEL_TYPES = tuple(_ARCHITECTURES)

# transformers' defaults where the field is absent (configuration_<family>.py)
_KV_HEADS_DEFAULT = {"llama": None, "mistral": 8, "qwen2": 32}  # None = num_attention_heads
_MAX_POS_DEFAULT = {"llama": 2048, "mistral": 4096 * 32, "qwen2": 32768}

_REQUIRED = object()


class _Config:
    """Typed access to a config dict; every problem names the file and the field."""

    def __init__(self, data: dict[str, Any], where: str):
        self.data = data
        self.where = where

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def int(self, key: str, default: Any = _REQUIRED, *, minimum: int = 1) -> int:
        value = self.data.get(key)
        if value is None:
            if default is _REQUIRED:
                raise UserError(
                    f"missing field '{key}'", where=self.where,
                    fix=f"add \"{key}\": <integer> as in the checkpoint's original config.json",
                )
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise UserError(f"field '{key}' must be an integer, got {json.dumps(value)}", where=self.where,
                            fix=f"write \"{key}\": <integer> (no quotes)")
        if value < minimum:
            raise UserError(f"field '{key}' must be at least {minimum}, got {json.dumps(value)}", where=self.where,
                            fix=f"give the model's real \"{key}\"")
        return int(value)

    def bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise UserError(f"field '{key}' must be true or false, got {json.dumps(value)}", where=self.where,
                            fix=f"write \"{key}\": true or \"{key}\": false")
        return value

    def side(self, key: str, default: int) -> int:
        """An image or patch side: an integer, or a square [h, w] pair."""
        value = self.data.get(key)
        if isinstance(value, (list, tuple)):
            if len(value) != 2 or value[0] != value[1]:
                raise UserError(f"field '{key}' must be square, got {json.dumps(value)}", where=self.where,
                                fix="only square images and patches are supported; give one integer")
            self.data = {**self.data, key: value[0]}
        return self.int(key, default)

    def num_labels(self) -> int:
        """transformers' rule: the length of ``id2label`` if given, else ``num_labels``, else 2."""
        id2label = self.data.get("id2label")
        if id2label is not None:
            if not isinstance(id2label, dict) or not id2label:
                raise UserError("field 'id2label' must be a non-empty object like {\"0\": \"NEG\", \"1\": \"POS\"}",
                                where=self.where, fix="fix id2label, or remove it and give \"num_labels\": N")
            return len(id2label)
        return self.int("num_labels", 2)


def _read(path: str | Path) -> tuple[dict[str, Any], Path, str]:
    where = str(path)
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "config.json"
        where = str(p)
    fix_path = "give the path of a Hugging Face config.json (the file beside the weights), or its folder"
    from advisor.files import read_small_text

    try:
        text = read_small_text(p)  # a regular file of at most 16 MiB (not /dev/zero, not a FIFO)
    except FileNotFoundError:
        raise UserError("file not found", where=where, fix=fix_path) from None
    except UnicodeDecodeError:
        raise UserError("not a text file (not UTF-8)", where=where, fix=fix_path) from None
    except ValueError as exc:
        detail = str(exc).removeprefix(f"{p}: ")
        raise UserError("not a text file (not UTF-8)" if "UTF-8" in detail else detail, where=where, fix=fix_path) from None
    except OSError as exc:
        raise UserError(f"cannot read it: {exc.strerror or exc}", where=where,
                        fix="check the path and its permissions") from None
    try:
        data = units.strict_json_loads(text)  # NaN, Infinity, 1e308 and deep nesting are refused here
    except json.JSONDecodeError as exc:
        raise UserError(f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", where=where,
                        fix="repair the file (python -m json.tool FILE shows the spot) or download it again") from None
    except units.JSONLimitError as exc:
        raise UserError(str(exc), where=where, fix="use the checkpoint's original config.json") from None
    if not isinstance(data, dict):
        raise UserError(f"expected a JSON object with \"model_type\", got a JSON {type(data).__name__}", where=where,
                        fix="give a model's config.json, not another JSON file")
    return data, p, where


def _architecture(cfg: _Config, model_type: str, default: str) -> tuple[str, str, str]:
    """(class name, head, note) chosen from ``architectures``."""
    table = _ARCHITECTURES[model_type]
    archs = cfg.data.get("architectures")
    if archs is None or archs == []:
        cls, head = table[default.lower()]
        return cls, head, f"no 'architectures' field: assumed {cls}"
    if isinstance(archs, str):
        archs = [archs]
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise UserError(f"field 'architectures' must be a list of class names, got {json.dumps(archs)}",
                        where=cfg.where, fix=f"write e.g. \"architectures\": [\"{default}\"]")
    for a in archs:
        if a.lower() in table:
            cls, head = table[a.lower()]
            return cls, head, ""
    supported = [c for c, _ in table.values()]
    near = close_names(archs[0], supported, n=2)
    hint = f"did you mean {', '.join(near)}? " if near else ""
    raise UserError(
        f"unsupported architecture {', '.join(archs)} for model_type '{model_type}' (field 'architectures')",
        where=cfg.where,
        fix=f"{hint}supported: {', '.join(supported)}; set \"architectures\": [\"{supported[0]}\"] "
            "or use --module FILE.py:FACTORY for other heads",
    )


def _heads(cfg: _Config, layers_key: str, hidden_key: str, heads_key: str) -> tuple[int, int, int]:
    n_layers = cfg.int(layers_key)
    d_model = cfg.int(hidden_key)
    n_heads = cfg.int(heads_key)
    if d_model % n_heads:
        raise UserError(f"'{hidden_key}' ({d_model}) is not a multiple of '{heads_key}' ({n_heads})",
                        where=cfg.where, fix="check both fields against the checkpoint's config.json")
    return n_layers, d_model, n_heads


def _llama_like(cfg: _Config, model_type: str) -> tuple[dict, str, str]:
    n_layers, d_model, n_heads = _heads(cfg, "num_hidden_layers", "hidden_size", "num_attention_heads")
    kv_default = _KV_HEADS_DEFAULT[model_type]
    n_kv = cfg.int("num_key_value_heads", n_heads if kv_default is None else kv_default)
    if n_heads % n_kv:
        raise UserError(f"'num_attention_heads' ({n_heads}) is not a multiple of 'num_key_value_heads' ({n_kv})",
                        where=cfg.where, fix="check both fields against the checkpoint's config.json")
    if cfg.has("head_dim") and cfg.int("head_dim") != d_model // n_heads:
        raise UserError(
            f"field 'head_dim' ({cfg.int('head_dim')}) differs from hidden_size / num_attention_heads "
            f"({d_model // n_heads}); such models are not supported from a config yet",
            where=cfg.where, fix="use --module FILE.py:FACTORY to trace the model instead",
        )
    cls, head, note = _architecture(cfg, model_type, {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                                                      "qwen2": "Qwen2ForCausalLM"}[model_type])
    if model_type == "qwen2":  # Qwen2Attention: q/k/v with bias, o_proj and the MLP without
        bias, qkv_bias = False, True
    elif model_type == "llama":  # attention_bias: q, k, v and o; mlp_bias: gate, up, down
        attn_bias, mlp_bias = cfg.bool("attention_bias", False), cfg.bool("mlp_bias", False)
        if attn_bias != mlp_bias:
            raise UserError(
                f"attention_bias={str(attn_bias).lower()} with mlp_bias={str(mlp_bias).lower()} is not supported yet "
                "(fields 'attention_bias', 'mlp_bias')",
                where=cfg.where, fix="use --module FILE.py:FACTORY to trace the model instead",
            )
        bias, qkv_bias = attn_bias, None
    else:  # Mistral: no biases at all
        bias, qkv_bias = False, None
    kw = dict(
        n_layers=n_layers, d_model=d_model, n_heads=n_heads, n_kv_heads=n_kv if n_kv != n_heads else None,
        d_ff=cfg.int("intermediate_size"), vocab=cfg.int("vocab_size"),
        max_seq=cfg.int("max_position_embeddings", _MAX_POS_DEFAULT[model_type]),
        mlp="swiglu", norm="rmsnorm", bias=bias, qkv_bias=qkv_bias, positions="rope", causal=True,
        tie_embeddings=cfg.bool("tie_word_embeddings", False), head=head,
    )
    return kw, cls, note


def _dropout(cfg: _Config, key: str, default: float) -> float:
    v = cfg.data.get(key, default)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v < 1.0 else default


def _gpt2(cfg: _Config) -> tuple[dict, str, str]:
    n_layers, d_model, n_heads = _heads(cfg, "n_layer", "n_embd", "n_head")
    cls, head, note = _architecture(cfg, "gpt2", "GPT2LMHeadModel")
    kw = dict(
        n_layers=n_layers, d_model=d_model, n_heads=n_heads, d_ff=cfg.int("n_inner", 4 * d_model),
        vocab=cfg.int("vocab_size"), max_seq=cfg.int("n_positions", 1024),
        mlp="gelu", norm="layernorm", bias=True, positions="learned", causal=True,
        tie_embeddings=cfg.bool("tie_word_embeddings", True), head=head,
        attn_dropout=_dropout(cfg, "attn_pdrop", 0.1),  # GPT2Config default
    )
    return kw, cls, note


def _bert(cfg: _Config) -> tuple[dict, str, str]:
    n_layers, d_model, n_heads = _heads(cfg, "num_hidden_layers", "hidden_size", "num_attention_heads")
    pos_type = cfg.data.get("position_embedding_type", "absolute")
    if pos_type != "absolute":
        raise UserError(f"position_embedding_type '{pos_type}' is not supported (field 'position_embedding_type')",
                        where=cfg.where, fix="only \"absolute\" positions are modelled; use --module for others")
    cls, head, note = _architecture(cfg, "bert", "BertForMaskedLM")
    kw = dict(
        n_layers=n_layers, d_model=d_model, n_heads=n_heads, d_ff=cfg.int("intermediate_size"),
        vocab=cfg.int("vocab_size"), max_seq=cfg.int("max_position_embeddings", 512),
        type_vocab=cfg.int("type_vocab_size", 2),
        mlp="gelu", norm="layernorm", bias=True, positions="learned", causal=False,
        tie_embeddings=cfg.bool("tie_word_embeddings", True), head=head,
        attn_dropout=_dropout(cfg, "attention_probs_dropout_prob", 0.1),  # BertConfig default
    )
    if head in ("cls", "qa"):  # qa: BertForQuestionAnswering's qa_outputs = Linear(hidden, num_labels), 2
        kw["num_labels"] = cfg.num_labels()
    if head == "none":  # BertModel: post-LN layers, pooler, no final norm
        kw.update(pooler=True, post_norm=True)
    return kw, cls, note


def _vit(cfg: _Config) -> tuple[dict, str, str]:
    n_layers, d_model, n_heads = _heads(cfg, "num_hidden_layers", "hidden_size", "num_attention_heads")
    cls, head, note = _architecture(cfg, "vit", "ViTForImageClassification")
    patch, image = cfg.side("patch_size", 16), cfg.side("image_size", 224)
    if image % patch:
        raise UserError(f"'image_size' ({image}) is not a multiple of 'patch_size' ({patch})", where=cfg.where,
                        fix="check both fields against the checkpoint's config.json")
    qkv_bias = cfg.bool("qkv_bias", True)
    kw = dict(
        n_layers=n_layers, d_model=d_model, n_heads=n_heads, d_ff=cfg.int("intermediate_size"),
        patch_size=patch, image_size=image, channels=cfg.int("num_channels", 3), max_seq=0,
        mlp="gelu", norm="layernorm", bias=True, qkv_bias=None if qkv_bias else False,
        positions="learned", causal=False, head=head,
    )
    if head == "image-cls":  # ViTModel(add_pooling_layer=False) + classifier on the class token
        kw["num_labels"] = cfg.num_labels()
    else:  # ViTModel: final LayerNorm + pooler
        kw["pooler"] = True
    return kw, cls, note


def _task(head: str, arch: TransformerArch) -> str:
    return {
        "lm": "causal LM",
        "mlm": "masked LM",
        "cls": f"{arch.num_labels}-class sequence classification",
        "qa": "extractive question answering (span start/end)",
        "image-cls": f"{arch.num_labels}-class image classification",
    }.get(head, "backbone (no head)")


def _name(data: dict, path: Path) -> str:
    nop = data.get("_name_or_path")
    if isinstance(nop, str) and nop.strip():
        nop = nop.strip()
        return Path(nop).name if nop.startswith(("/", ".", "~")) else nop
    if path.name == "config.json" and path.parent.name not in ("", "."):
        return path.parent.name
    return path.stem


def spec_from_hf_config(path: str | Path) -> ModelSpec:
    """Read a Hugging Face ``config.json`` (or a folder holding one) into a ModelSpec.

    Raises ``UserError`` naming the file and the field for an unreadable file, invalid JSON,
    a missing or mistyped field, or an unsupported ``model_type`` / ``architectures``.
    """
    data, p, where = _read(path)
    return spec_from_config_dict(data, where, p)


def spec_from_config_dict(data: dict[str, Any], where: str, path: Path | None = None) -> ModelSpec:
    """The closed-form ModelSpec of a config dict (``where`` names it in errors and the source)."""
    p = path or Path(where)
    cfg = _Config(data, where)
    model_type = data.get("model_type")
    if model_type is None:
        raise UserError("missing field 'model_type'", where=where,
                        fix=f"add \"model_type\": one of {', '.join(SUPPORTED_MODEL_TYPES)}")
    if not isinstance(model_type, str) or model_type.lower() not in _ARCHITECTURES:
        near = close_names(str(model_type), SUPPORTED_MODEL_TYPES, n=2)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise UserError(
            f"unsupported model_type {json.dumps(model_type)} (field 'model_type')", where=where,
            fix=f"{hint}supported: {', '.join(SUPPORTED_MODEL_TYPES)}; for any other model use "
                "--module FILE.py:FACTORY (traced on the meta device)",
        )
    model_type = model_type.lower()
    if model_type in _SEQ2SEQ:
        return _seq2seq_spec(cfg, model_type, data, p)
    if model_type in ("llama", "mistral", "qwen2"):
        kw, cls, note = _llama_like(cfg, model_type)
        family = "decoder"
    elif model_type == "gpt2":
        kw, cls, note = _gpt2(cfg)
        family = "decoder"
    elif model_type == "bert":
        kw, cls, note = _bert(cfg)
        family = "encoder"
    else:
        kw, cls, note = _vit(cfg)
        family = "vit"
    arch = TransformerArch(**kw)
    description = f"{cls} from {where}" + (f" ({note})" if note else "")
    return ModelSpec(
        name=_name(data, p), family=family, params=arch.params(), source=f"hf-config {where}",
        description=description, task=_task(arch.head, arch), arch=arch, implementation="closed form",
        loss="none" if arch.head == "none" else "model",
        default_seq_len=None if arch.patch_size else min(arch.max_seq, 2048),
        default_image_size=arch.image_size or None,
    )


def _seq2seq_spec(cfg: _Config, model_type: str, data: dict[str, Any], path: Path) -> ModelSpec:
    """An encoder-decoder's spec without its trace: the fields checked, the parameters counted; the
    estimate needs ``advisor.hf_trace`` to trace it (the spec says so in ``implementation``)."""
    cls, head, note = _architecture(cfg, model_type, next(iter(_SEQ2SEQ[model_type].values()))[0])
    shape = seq2seq_shape(cfg, model_type, head)
    description = f"{cls} from {cfg.where}" + (f" ({note})" if note else "")
    return ModelSpec(
        name=_name(data, path), family="encoder-decoder", params=shape.params, source=f"hf-config {cfg.where}",
        description=description, task="sequence-to-sequence LM" if head == "lm" else "backbone (no head)",
        implementation="closed form (parameters only: an encoder-decoder is estimated from its transformers trace)",
        loss="model" if head == "lm" else "none", default_seq_len=min(shape.max_seq, 2048),
    )
