"""User-style models for ``benchmarks/gpu_checks/probe_h200.sh``'s ``--module`` probe, written as users write them.

``encoder_classifier``: a text classifier from ``nn.TransformerEncoderLayer`` (batch_first,
norm_first, GELU), the model issue 16 found furthest off (+136% to +237% memory): PyTorch's
MultiheadAttention takes the fused attention path in training, which the trace does not see.
Input: token ids, ``--input-shape 512 --input-dtype int64``; output: [batch, 2] logits (the probe's
loss is their fp32 mean, the tracer's assumption).
"""

import torch.nn as nn

VOCAB, D_MODEL, HEADS, LAYERS, LABELS = 32000, 768, 12, 12, 2


class EncoderClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D_MODEL)
        layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, 4 * D_MODEL, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(D_MODEL, LABELS)

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids)).mean(dim=1))


def encoder_classifier():
    return EncoderClassifier()
