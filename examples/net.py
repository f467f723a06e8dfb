"""A model factory for `advise --module` and `advise probe --module` (the README's example):

    advise --module examples/net.py:build --input-shape 3,224,224 --gpu H100 --gpus 8
    advise probe --module examples/net.py:build --input-shape 3,224,224

cardwise traces ``build()`` on the meta device (no weights are allocated) with a per-sample input of
``--input-shape`` and the loss of ``--loss`` (default: cross-entropy over the last dimension of the
output), so this is any ``nn.Module`` you train: a small ResNet-style image classifier here.
"""

from __future__ import annotations

from torch import nn


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = nn.Identity() if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.act(self.body(x) + self.skip(x))


def build(num_classes: int = 1000) -> nn.Module:
    """The factory `--module examples/net.py:build` names."""
    widths = (64, 128, 256, 512)
    layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                               nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for i, w in enumerate(widths):
        layers += [Block(cin, w, 1 if i == 0 else 2), Block(w, w, 1)]
        cin = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers)
