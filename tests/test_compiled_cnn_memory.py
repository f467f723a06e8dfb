"""Compiled CNNs keep what GEMMs and convolutions touch (and indices, masks); inductor recomputes the
pointwise ops and norms between them. A conv-BN-SiLU block loses the BN output SiLU's eager backward
saved; a conv-BN-ReLU-conv chain loses little (ReLU's output is the next convolution's input)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from advisor.activations import activation_profile  # noqa: E402
from advisor.config import TrainConfig  # noqa: E402
from advisor.models import ModelSpec  # noqa: E402
from advisor.tracer import profile_module  # noqa: E402


def _chain(act):
    return lambda: nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), act(),
                                 nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), act(),
                                 nn.Conv2d(32, 32, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                 nn.Linear(32, 10))


def _profile(factory):
    prof, params = profile_module(factory, lambda b: (torch.randn(b, 3, 16, 16, device="meta"),), (3, 16, 16),
                                  scales_with="pixels", loss="ce")
    return ModelSpec(name="chain", family="cnn", params=params, trace=prof, source="test")


def test_silu_blocks_keep_less_when_compiled_than_relu_blocks():
    silu, relu = _profile(_chain(nn.SiLU)), _profile(_chain(nn.ReLU))
    for p in ("fp32", "bf16"):
        share = {n: s.trace.saved_bytes_compiled[p] / s.trace.saved_bytes[p] for n, s in (("silu", silu), ("relu", relu))}
        assert 0 < share["silu"] < share["relu"] <= 1, (p, share)


def test_a_compiled_estimate_uses_what_the_convolutions_touch():
    spec = _profile(_chain(nn.SiLU))
    eager = activation_profile(spec, TrainConfig(micro_batch=8, image_size=16, precision="bf16"), 1.0)
    compiled = activation_profile(spec, TrainConfig(micro_batch=8, image_size=16, precision="bf16", compile=True), 1.0)
    t = spec.trace
    assert compiled.per_sample_bytes == pytest.approx(t.saved_bytes_compiled["bf16"])
    assert compiled.per_sample_bytes < eager.per_sample_bytes


def test_what_a_compiled_step_keeps_does_not_depend_on_the_allocator():
    """The storages GEMMs and convolutions touch are held while the trace runs: a freed temporary's id
    coming back as another storage's would count it as kept (it did, before they were held)."""
    factory = _chain(nn.SiLU)
    first, again = _profile(factory).trace, _profile(factory).trace
    assert first.saved_bytes_compiled == again.saved_bytes_compiled
