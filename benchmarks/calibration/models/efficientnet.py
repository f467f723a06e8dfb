"""EfficientNet-B0 written out in plain PyTorch, the way users (and timm's readers) write it.

Stem 3x3/2 conv + BatchNorm + SiLU; seven stages of MBConv blocks (expansion 1 or 6, depthwise 3x3
or 5x5, squeeze-and-excitation with a quarter of the input channels, SiLU, BatchNorm after every
convolution, residual when shape allows); head 1x1 conv to 1280, BatchNorm, SiLU, global average
pool, dropout 0.2, Linear to 1000 classes. No stochastic depth. Input: float32 images
[batch, 3, 224, 224]; output: logits [batch, 1000].

cardwise flags:
    --module benchmarks/calibration/models/efficientnet.py:build --input-shape 3,224,224 --input-dtype float32
    --loss ce        (cross-entropy over the last dim of the output; targets int64 [batch])
    --image-size 224
"""

import torch
from torch import nn

# (expansion, kernel, stride, out channels, repeats): EfficientNet-B0 (Tan & Le 2019, table 1)
B0 = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
      (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]


def conv_bn_act(cin, cout, kernel, stride=1, groups=1, act=True):
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act:
        layers.append(nn.SiLU(inplace=True))
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    def __init__(self, channels, squeezed):
        super().__init__()
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.expand = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x):
        s = x.mean((2, 3), keepdim=True)
        s = self.expand(torch.nn.functional.silu(self.reduce(s)))
        return x * torch.sigmoid(s)


class MBConv(nn.Module):
    def __init__(self, cin, cout, expansion, kernel, stride):
        super().__init__()
        mid = cin * expansion
        self.residual = stride == 1 and cin == cout
        layers = [conv_bn_act(cin, mid, 1)] if expansion != 1 else []
        layers += [conv_bn_act(mid, mid, kernel, stride, groups=mid), SqueezeExcite(mid, max(1, cin // 4)),
                   conv_bn_act(mid, cout, 1, act=False)]
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        out = self.block(x)
        return x + out if self.residual else out


class EfficientNet(nn.Module):
    def __init__(self, stages=B0, stem=32, head=1280, num_classes=1000, dropout=0.2):
        super().__init__()
        blocks = [conv_bn_act(3, stem, 3, stride=2)]
        cin = stem
        for expansion, kernel, stride, cout, repeats in stages:
            for i in range(repeats):
                blocks.append(MBConv(cin, cout, expansion, kernel, stride if i == 0 else 1))
                cin = cout
        blocks.append(conv_bn_act(cin, head, 1))
        self.features = nn.Sequential(*blocks)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(head, num_classes)

    def forward(self, x):
        x = self.features(x).mean((2, 3))
        return self.classifier(self.dropout(x))


def build():
    return EfficientNet()
