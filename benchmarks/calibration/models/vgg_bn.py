"""VGG-11 with batch norm written out in plain PyTorch, the way users copy it (Simonyan & Zisserman
2015, configuration A; BatchNorm after every convolution as in torchvision's vgg11_bn).

Eight 3x3 convolutions (64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M; M = 2x2 max pool), each
followed by BatchNorm and ReLU; adaptive average pool to 7x7; classifier 25088 -> 4096 -> 4096 -> 1000
with ReLU and dropout 0.5. Input: float32 images [batch, 3, H, W] (H, W multiples of 32); output:
logits [batch, 1000].

cardwise flags:
    --module benchmarks/calibration/models/vgg_bn.py:build --input-shape 3,224,224 --input-dtype float32
    --loss ce        (cross-entropy over the last dim of the output; targets int64 [batch])
    --image-size 224
"""

import torch
from torch import nn

A = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]


class VGG(nn.Module):
    def __init__(self, cfg=A, classes: int = 1000, width: int = 4096):
        super().__init__()
        layers, cin = [], 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
                cin = v
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(nn.Linear(cin * 49, width), nn.ReLU(inplace=True), nn.Dropout(0.5),
                                        nn.Linear(width, width), nn.ReLU(inplace=True), nn.Dropout(0.5),
                                        nn.Linear(width, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def build():
    return VGG()
