"""Encoder-decoder factories for ``--module`` tests (transformers classes built from hand-written configs: no hub)."""

import torch.nn as nn
from transformers import BartConfig, BartForConditionalGeneration, T5Config, T5ForConditionalGeneration


def _t5(**sizes) -> T5Config:  # T5 v1.0 as google-t5/t5-large's config.json, sizes overridable
    return T5Config(**{"vocab_size": 32128, "d_model": 1024, "d_kv": 64, "d_ff": 4096, "num_layers": 24,
                       "num_heads": 16, **sizes})


def t5_large() -> nn.Module:
    """T5-large itself, as a user's factory returns it: no decoder_start_token_id in the config."""
    return T5ForConditionalGeneration(_t5())


def t5_tiny() -> nn.Module:
    return T5ForConditionalGeneration(_t5(vocab_size=512, d_model=64, d_ff=128, num_layers=2, num_heads=4, d_kv=16))


class Seq2SeqLogits(nn.Module):
    """A user's wrapper: decoder inputs given, logits out (the loss is --loss ce on them)."""

    def __init__(self):
        super().__init__()
        self.t5 = t5_tiny()

    def forward(self, ids):
        return self.t5(input_ids=ids, decoder_input_ids=ids).logits


def t5_tiny_wrapped() -> nn.Module:
    return Seq2SeqLogits()


def bart_tiny() -> nn.Module:
    return BartForConditionalGeneration(BartConfig(vocab_size=512, d_model=64, encoder_layers=2, decoder_layers=2,
                                                   encoder_attention_heads=4, decoder_attention_heads=4,
                                                   encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=128))
