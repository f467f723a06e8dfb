"""The input pipeline as a throughput limit (advisor.loader): a JPEG-folder ImageNet run on few cores is
loader-bound and says so; DALI on the GPU lifts it; cores detected from affinity and the cgroup quota."""

import pytest

from advisor.catalog import catalog_model
from advisor.config import TrainConfig
from advisor.errors import UserError
from advisor.estimate import estimate
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.loader import InputPipeline, _at_resolution, _cgroup_quota, loader_estimate, loader_rates

R50 = TrainConfig(micro_batch=256, precision="bf16", image_size=224, channels_last=True, strategy="ddp")


def est(cores, loader="pytorch", data="auto", gpus=8):
    pipe = InputPipeline(data=data, loader=loader, cpus_per_gpu=cores, cpus_source=f"--cpus-per-gpu {cores}")
    hw = HardwareSpec(gpu=get_gpu("H100"), gpus_per_node=gpus, input=pipe)
    return estimate(catalog_model("resnet50"), R50, hw, dataset_size=1_281_167, epochs=90)


def test_jpeg_imagenet_on_few_cores_is_loader_bound_and_says_so():
    e = est(4)
    t = e.throughput
    rates = loader_rates()
    assert t.loader_bound and t.loader.bound
    per_gpu = t.samples_per_s / 8
    # never promised faster than the stated cores decode: 3 workers x the measured per-core rate
    assert per_gpu <= 3 * rates.jpeg_per_core["224"] * 1.0001
    assert t.gpu_samples_per_s > t.samples_per_s
    assert any("input-bound" in n for n in t.notes)
    assert any("--cpus-per-gpu" in f for f in t.loader.fixes) and any("DALI" in f for f in t.loader.fixes)
    # time-to-train follows the loader's rate
    assert e.time_to_train_h == pytest.approx(1_281_167 * 90 / t.samples_per_s / 3600)


def test_more_cores_or_gpu_decoding_lift_the_limit():
    few, many, dali = est(4), est(64), est(4, loader="dali")
    assert many.throughput.samples_per_s > few.throughput.samples_per_s
    assert not dali.throughput.loader_bound and dali.throughput.samples_per_s > few.throughput.samples_per_s
    assert not est(4, data="synthetic").throughput.loader_bound


def test_text_is_not_decode_bound():
    hw = HardwareSpec(gpu=get_gpu("H100"), gpus_per_node=8, input=InputPipeline(cpus_per_gpu=2))
    e = estimate(catalog_model("gpt2"), TrainConfig(micro_batch=8, seq_len=1024, strategy="ddp"), hw)
    assert e.throughput.loader.data == "tokenized" and not e.throughput.loader_bound


def test_no_pipeline_means_data_on_device():
    hw = HardwareSpec(gpu=get_gpu("H100"), gpus_per_node=8)
    t = estimate(catalog_model("resnet50"), R50, hw).throughput
    assert t.loader is None and not t.loader_bound and t.gpu_samples_per_s is None


def test_resolution_costs_time():
    table = {"128": 500.0, "224": 300.0}
    assert _at_resolution(table, 128) == 500.0 and _at_resolution(table, 224) == 300.0
    assert 300.0 < _at_resolution(table, 160) < 500.0 and _at_resolution(table, 448) == pytest.approx(75.0)
    le = loader_estimate(InputPipeline(cpus_per_gpu=9), is_vision=True, image_size=224, gpu_rate_per_gpu=1e9,
                         dali_cpu_per_core=200.0)
    assert le.workers == 8 and le.bound


def test_cgroup_quota(tmp_path):
    f = tmp_path / "cpu.max"
    f.write_text("200000 100000\n")
    assert _cgroup_quota(str(f)) == 2.0
    f.write_text("max 100000\n")
    assert _cgroup_quota(str(f)) is None
    assert _cgroup_quota(str(tmp_path / "missing")) is None


def test_request_path_states_cores():
    from advisor.exact import estimate_request
    from advisor.hardware import Machine
    from advisor.plan import ModelRef
    from advisor.request import Request

    req = Request(model=ModelRef(name="resnet50"), gpu="H100", gpus=8, micro_batch=256, cpus_per_gpu=4)
    e, _ = estimate_request(req, machine=Machine(cpu_cores=2))
    assert e.hardware.cpus_per_gpu == 4 and "--cpus-per-gpu 4" in e.hardware.cpus_source
    assert e.throughput.loader_bound
    named, _ = estimate_request(req.model_copy(update={"cpus_per_gpu": None}), machine=Machine(cpu_cores=2))
    assert "default" in named.hardware.cpus_source


def test_probe_data_measures_and_later_estimates_use_it(tmp_path):
    pytest.importorskip("PIL")
    pytest.importorskip("torch")
    from advisor.calibration import load_calibration
    from advisor.loader import read_loader_probe, save_loader_probe
    from benchmarks.calibration.loader_rate import make_jpegs
    from launcher.loader_probe import probe_directory

    images = tmp_path / "train" / "cls"
    images.mkdir(parents=True)
    for i, blob in enumerate(make_jpegs(3)):
        (images / f"{i}.jpg").write_bytes(blob)
    (images / "notes.txt").write_text("not an image")
    probe = probe_directory(tmp_path / "train", 64, seconds=0.2, batch=4)
    assert probe.files == 3 and probe.per_core > 0 and probe.image_size == 64
    # timed in one DataLoader worker: the chain and the batch hand-off, which together are the worker's time
    assert probe.method == "dataloader worker" and probe.batch == 4 and probe.transform_ms > 0 and probe.handoff_ms > 0
    assert probe.transform in ("torchvision", "Pillow + torch")  # the image recipe's own transform
    assert probe.per_core == pytest.approx(1e3 / (probe.transform_ms + probe.handoff_ms))
    home = tmp_path / "home"
    save_loader_probe(home, probe.model_copy(update={"per_core": 10.0, "image_size": 160}))
    assert read_loader_probe(home).per_core == 10.0
    cal = load_calibration(home)
    hw = HardwareSpec(gpu=get_gpu("H100"), gpus_per_node=8, input=InputPipeline(cpus_per_gpu=8))
    t = estimate(catalog_model("resnet50"), R50.model_copy(update={"image_size": 160}), hw, calibration=cal).throughput
    assert t.loader_bound and "advise probe --data" in t.loader.rate_source
    assert t.samples_per_s / 8 == pytest.approx(7 * 10.0, rel=0.05)


def _bus_error(self, i):  # what a worker gets when /dev/shm is full
    import os
    import signal

    os.kill(os.getpid(), signal.SIGBUS)


def test_a_worker_killed_while_probing_is_one_line_with_the_shm_fix(monkeypatch):
    pytest.importorskip("PIL")
    pytest.importorskip("torch")
    import multiprocessing

    from benchmarks.calibration.loader_rate import make_jpegs
    from launcher import loader_probe

    if multiprocessing.get_start_method(allow_none=True) not in (None, "fork"):
        pytest.skip("the patched item is inherited only by forked workers")
    monkeypatch.setattr(loader_probe.ImageBlobs, "__getitem__", _bus_error)
    with pytest.raises(UserError) as e:
        loader_probe.worker_rate(loader_probe.ImageBlobs(make_jpegs(2), 32), batch=2, seconds=0.1)
    assert "DataLoader worker failed" in e.value.what and "--shm-size" in e.value.fix


def test_small_images_default_to_decoded_arrays():
    pipe = InputPipeline(cpus_per_gpu=4)
    from advisor.loader import data_kind

    assert data_kind(pipe, True, 32) == "decoded" and data_kind(pipe, True, 224) == "jpeg"
    assert data_kind(pipe, False, None) == "tokenized"
    assert data_kind(pipe.model_copy(update={"data": "jpeg"}), True, 32) == "jpeg"


def test_an_unreadable_file_does_not_drop_a_good_one_of_the_same_name(tmp_path):
    pytest.importorskip("PIL")
    pytest.importorskip("torch")
    from benchmarks.calibration.loader_rate import make_jpegs
    from launcher.loader_probe import probe_directory

    for cls, blob in (("a", make_jpegs(1)[0]), ("b", b"not a jpeg")):
        (tmp_path / "train" / cls).mkdir(parents=True)
        (tmp_path / "train" / cls / "0.jpg").write_bytes(blob)  # the same file name in two class folders
    probe = probe_directory(tmp_path / "train", 32, seconds=0.1, batch=2)
    assert probe.files == 1
