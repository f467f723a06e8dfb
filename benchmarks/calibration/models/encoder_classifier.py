"""Text classifier on a stack of nn.TransformerEncoderLayer (batch_first, pre-norm), as users write it.

Token embedding + learned positions, 6 pre-norm encoder layers (d=512, 8 heads, FFN 2048, GELU,
dropout 0.1: PyTorch's default), a final LayerNorm, mean pooling over the sequence, a linear head
for 4 classes. Input: int64 token ids [batch, seq] (seq <= 512); output: logits [batch, 4].

cardwise flags:
    --module benchmarks/calibration/models/encoder_classifier.py:build --input-shape 512 --input-dtype int64
    --loss ce        (cross-entropy over the last dim of the output; targets int64 [batch])
    --seq-len 512
"""

import torch
from torch import nn

VOCAB = 30522
MAX_LEN = 512


class EncoderClassifier(nn.Module):
    def __init__(self, vocab_size=VOCAB, d_model=512, n_heads=8, n_layers=6, d_ff=2048,
                 max_len=MAX_LEN, num_classes=4, dropout=0.1):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=d_ff, dropout=dropout,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.drop(self.tok_emb(ids) + self.pos_emb(pos))
        x = self.encoder(x)
        x = self.norm(x).mean(dim=1)
        return self.head(x)


def build():
    return EncoderClassifier()
