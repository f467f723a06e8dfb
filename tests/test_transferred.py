"""A gain measured only on one GPU kind is marked transferred, and a conservative rate without it is exposed."""

from advisor.catalog import catalog_model
from advisor.config import TrainConfig
from advisor.estimate import estimate
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec

CFG = TrainConfig(micro_batch=128, precision="bf16", image_size=224, compile=True)


def test_compile_gain_off_the_reference_gpu_is_transferred():
    e = estimate(catalog_model("resnet50"), CFG, HardwareSpec(gpu=get_gpu("A100-80GB")))
    t = e.throughput
    assert t.transferred and "H200" in t.transferred[0] and "A100" in t.transferred[0]
    eager = estimate(catalog_model("resnet50"), CFG.model_copy(update={"compile": False}),
                     HardwareSpec(gpu=get_gpu("A100-80GB"))).throughput.samples_per_s
    assert t.conservative_samples_per_s == eager < t.samples_per_s
    assert any("transferred" in n for n in e.notes)


def test_on_the_reference_gpu_or_eager_nothing_is_transferred():
    h200 = estimate(catalog_model("resnet50"), CFG, HardwareSpec(gpu=get_gpu("H200"))).throughput
    assert not h200.transferred and h200.conservative_samples_per_s == h200.samples_per_s
    eager = estimate(catalog_model("resnet50"), CFG.model_copy(update={"compile": False}),
                     HardwareSpec(gpu=get_gpu("A100-80GB"))).throughput
    assert not eager.transferred and eager.conservative_samples_per_s == eager.samples_per_s
