"""Encoder-decoder ``config.json`` files (T5, mT5, BART): read, checked, and counted without torch.

An encoder-decoder has two stacks and cross-attention (each decoder layer attends to the encoder's
output), which the closed-form ``TransformerArch`` does not describe. Its estimate therefore always
comes from a trace of the transformers class on the meta device (``advisor.hf_trace.trace_seq2seq``;
the catalog's t5-base and t5-large are traced ahead of time into ``advisor/data/traced.json``). What
this module gives is what needs no torch: the fields a trace needs, checked with the file and the
field named, and the parameter count, exact for the classes below (``tests/test_seq2seq.py`` checks it
against transformers):

====================================  =============================================================
``T5ForConditionalGeneration``        shared embedding, encoder + decoder (relative position bias in
``MT5ForConditionalGeneration``       each stack's first layer), final RMS norms, LM head tied to the
                                      embedding (always, in transformers 5: see ``_FF_DEFAULT``)
``T5Model`` / ``MT5Model``            the same without the LM head
``BartForConditionalGeneration``      shared embedding, learned positions (+2 offset) and an embedding
                                      LayerNorm per stack, post-LN layers, tied LM head
``BartModel``                         the same without the LM head
====================================  =============================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.errors import UserError

# model_type -> (class, head) by the lowercase name in ``architectures``; the first is the default.
ARCHITECTURES: dict[str, dict[str, tuple[str, str]]] = {
    mt: {c.lower(): (c, h) for c, h in table}
    for mt, table in {
        "t5": (("T5ForConditionalGeneration", "lm"), ("T5Model", "none")),
        "mt5": (("MT5ForConditionalGeneration", "lm"), ("MT5Model", "none")),
        "bart": (("BartForConditionalGeneration", "lm"), ("BartModel", "none")),
    }.items()
}
# transformers' defaults where the field is absent (configuration_t5.py, configuration_mt5.py of
# transformers 5.25): the feed-forward. Their LM head is always tied to the shared embedding there: both
# configs pop ``tie_word_embeddings`` and set True ("we tie weights always"; T5 keeps the popped value only
# to decide whether to scale the decoder's output), so an mT5 or T5 v1.1 config saying false builds a
# tied head too (transformers 4 built it untied: vocab x d_model more).
_FF_DEFAULT = {"t5": "relu", "mt5": "gated-gelu"}
_BUCKETS_DEFAULT = 32


@dataclass(frozen=True)
class Seq2SeqShape:
    """What a trace and the report need of an encoder-decoder config."""

    model_type: str
    encoder_layers: int
    decoder_layers: int
    d_model: int
    vocab: int
    max_seq: int  # the default sequence length (T5 has no position limit: its pre-training's 512)
    params: int
    layers_keys: tuple[str, str]  # the config fields that set the encoder's and the decoder's layer counts


def t5_shape(cfg, model_type: str, head: str) -> Seq2SeqShape:
    """T5 / mT5 (``cfg``: ``advisor.hf_config._Config``)."""
    d, d_kv, d_ff = cfg.int("d_model"), cfg.int("d_kv", 64), cfg.int("d_ff")
    heads, ne = cfg.int("num_heads"), cfg.int("num_layers")
    nd = cfg.int("num_decoder_layers", ne)
    vocab, buckets = cfg.int("vocab_size"), cfg.int("relative_attention_num_buckets", _BUCKETS_DEFAULT)
    proj = cfg.data.get("feed_forward_proj", _FF_DEFAULT[model_type])
    if not isinstance(proj, str) or len(proj.split("-")) > 2 or (len(proj.split("-")) == 2 and proj.split("-")[0] != "gated"):
        raise UserError(f"field 'feed_forward_proj' must be ACT or gated-ACT (as \"relu\", \"gated-gelu\"), got {proj!r}",
                        where=cfg.where, fix="copy it from the checkpoint's config.json")
    inner = heads * d_kv
    attn = 4 * d * inner  # q, k, v, o without biases
    ff = (3 if proj.startswith("gated") else 2) * d * d_ff  # wi (wi_0 + wi_1 when gated), wo
    encoder = ne * (attn + ff + 2 * d) + buckets * heads + d  # 2 RMS norms a layer; bias in layer 0; final norm
    decoder = nd * (2 * attn + ff + 3 * d) + buckets * heads + d  # self- and cross-attention
    cfg.bool("tie_word_embeddings", True)  # checked as a field, not used: tied whatever it says (above)
    return Seq2SeqShape(model_type, ne, nd, d, vocab, 512, vocab * d + encoder + decoder,
                        ("num_layers", "num_decoder_layers"))


def bart_shape(cfg, head: str) -> Seq2SeqShape:
    d, vocab = cfg.int("d_model"), cfg.int("vocab_size")
    ne, nd = cfg.int("encoder_layers"), cfg.int("decoder_layers")
    for side in ("encoder", "decoder"):
        heads = cfg.int(f"{side}_attention_heads")
        if d % heads:
            raise UserError(f"'d_model' ({d}) is not a multiple of '{side}_attention_heads' ({heads})",
                            where=cfg.where, fix="check both fields against the checkpoint's config.json")
    ffe, ffd, max_pos = cfg.int("encoder_ffn_dim"), cfg.int("decoder_ffn_dim"), cfg.int("max_position_embeddings", 1024)
    attn = 4 * (d * d + d)  # q, k, v, out with biases
    embed = (max_pos + 2) * d + 2 * d  # BartLearnedPositionalEmbedding's offset of 2; layernorm_embedding
    encoder = embed + ne * (attn + 2 * d * ffe + ffe + d + 4 * d)  # fc1, fc2; two LayerNorms
    decoder = embed + nd * (2 * attn + 2 * d * ffd + ffd + d + 6 * d)  # + cross-attention and its LayerNorm
    tied = cfg.bool("tie_word_embeddings", True)
    lm_head = 0 if head == "none" or tied else vocab * d
    return Seq2SeqShape("bart", ne, nd, d, vocab, max_pos, vocab * d + encoder + decoder + lm_head,
                        ("encoder_layers", "decoder_layers"))


def seq2seq_shape(cfg, model_type: str, head: str) -> Seq2SeqShape:
    return bart_shape(cfg, head) if model_type == "bart" else t5_shape(cfg, model_type, head)
