"""The loader rate of the host that runs (issue 39, point 5): the packaged default is the slowest host measured,
with the range stated; a measurement is cached per host and data kind; ``advise launch --data DIR`` measures before
it plans; DataLoader workers' shared memory is checked before a launch (a container's 64 MB /dev/shm)."""

from __future__ import annotations

import json

import pytest

from advisor.catalog import catalog_model
from advisor.config import TrainConfig
from advisor.errors import UserError
from advisor.estimate import estimate
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.loader import (LEGACY_FILE, InputPipeline, LoaderProbe, loader_rates, probe_path, read_loader_probe,
                            save_loader_probe)
from advisor.plan import ModelRef, Plan

R50 = TrainConfig(micro_batch=256, precision="bf16", image_size=224, channels_last=True, strategy="ddp")


def test_the_packaged_rates_are_the_fit_of_every_host_measured():
    from benchmarks.calibration.loader_rate import OUT, fit, read_rows

    rows = read_rows()
    assert len(rows) >= 2
    assert OUT.read_text() == json.dumps(fit(rows), indent=1) + "\n", "run python -m benchmarks.calibration.loader_rate --fit"
    rates = loader_rates()
    assert rates.jpeg_per_core["224"] == min(r["jpeg_per_core"]["224"] for r in rows)  # the conservative default


def test_named_gpus_without_data_assume_the_slowest_host_and_state_the_range():
    rates = loader_rates()
    lo, hi = rates.jpeg_range(224)
    assert lo < hi  # hosts differ
    hw = HardwareSpec(gpu=get_gpu("H100"), gpus_per_node=8, input=InputPipeline(cpus_per_gpu=4))
    t = estimate(catalog_model("resnet50"), R50, hw).throughput
    le = t.loader
    assert le.rate_basis == "default" and le.per_core_range == pytest.approx((lo, hi))
    assert le.per_core_samples_per_s == pytest.approx(lo)
    assert f"{lo:,.0f}-{hi:,.0f} images/s per core" in le.rate_source
    assert any("advise probe --data" in f for f in le.fixes)
    assert t.loader_bound and t.samples_per_s / 8 <= 3 * lo * 1.0001  # 3 workers at the slowest host's rate


def _probe(host: str, per_core: float = 50.0, **worker) -> LoaderProbe:
    return LoaderProbe(per_core=per_core, image_size=224, files=4, directory="/data/train", cpu="Test CPU", host=host,
                       when=1.7e9, **worker)


# a worker's probe: 50 images/s, 20 ms an image of which 5 hand the batch over
WORKER = dict(method="dataloader worker", batch=64, transform="torchvision", transform_ms=15.0, handoff_ms=5.0)


def test_a_measurement_is_kept_per_host_and_another_host_does_not_read_it(tmp_path):
    save_loader_probe(tmp_path, _probe("node-a", 50.0))
    save_loader_probe(tmp_path, _probe("node-b", 120.0))
    assert probe_path(tmp_path, "node-a").exists() and probe_path(tmp_path, "node-b").exists()
    assert read_loader_probe(tmp_path, host="node-a").per_core == 50.0
    assert read_loader_probe(tmp_path, host="node-b").per_core == 120.0
    assert read_loader_probe(tmp_path, host="node-c") is None
    assert read_loader_probe(tmp_path, host="node-a", data="decoded") is None  # per data kind too
    # what an older cardwise stored (one file, no host) still serves
    (tmp_path / LEGACY_FILE).write_text(_probe("", 33.0).model_dump_json())
    assert read_loader_probe(tmp_path, host="node-c").per_core == 33.0


def test_a_probed_host_plans_with_its_own_rate(tmp_path):
    from advisor.calibration import load_calibration
    from advisor.loader import this_host

    save_loader_probe(tmp_path, _probe(this_host(), 50.0, **WORKER))
    cal = load_calibration(tmp_path)
    hw = HardwareSpec(gpu=get_gpu("H100"), gpus_per_node=8, input=InputPipeline(cpus_per_gpu=8))
    le = estimate(catalog_model("resnet50"), R50, hw, calibration=cal).throughput.loader
    assert le.rate_basis == "measured here" and le.per_core_samples_per_s == 50.0 and le.per_core_range is None
    assert "one DataLoader worker, torchvision, batches of 64, hand-off 5.00 ms" in le.rate_source


def test_a_worker_probe_scales_its_chain_and_its_hand_off_apart():
    from advisor.loader import _at_resolution, sample_mb

    rates = loader_rates()
    probe = _probe("h", 50.0, **WORKER)
    chain = 15.0 * _at_resolution(rates.jpeg_per_core, 224) / _at_resolution(rates.jpeg_per_core, 448)
    assert probe.rate_at(224) == 50.0
    assert probe.rate_at(448) == pytest.approx(1e3 / (chain + 5.0 * sample_mb(448) / sample_mb(224)))
    assert probe.rate_at(448) < 50.0 * _at_resolution(rates.jpeg_per_core, 448) / _at_resolution(rates.jpeg_per_core, 224)


def test_an_older_chain_only_probe_gets_the_packaged_hand_off_and_defaults_carry_it():
    from advisor.loader import _at_resolution, delivered

    rates = loader_rates()
    assert rates.handoff_ms_per_mb > 0
    old = _probe("h", 50.0)  # a file an older cardwise wrote: the chain alone
    assert old.method == "transform loop"
    assert old.rate_at(224) == pytest.approx(1e3 / (20.0 + rates.handoff_ms(224))) and old.rate_at(224) < 50.0
    assert "the packaged hand-off added" in old.summary()
    hw = HardwareSpec(gpu=get_gpu("H100"), gpus_per_node=8, input=InputPipeline(cpus_per_gpu=4))
    le = estimate(catalog_model("resnet50"), R50, hw).throughput.loader
    assert le.per_core_samples_per_s == pytest.approx(delivered(_at_resolution(rates.jpeg_per_core, 224),
                                                                rates.handoff_ms(224)))
    assert le.per_core_samples_per_s < _at_resolution(rates.jpeg_per_core, 224)
    assert "batch hand-off to the training process" in le.rate_source


def test_the_packaged_hand_off_is_the_largest_host_measured():
    from benchmarks.calibration.loader_rate import read_rows

    measured = [r["handoff_ms_per_mb"] for r in read_rows() if r.get("handoff_ms_per_mb") is not None]
    assert measured and loader_rates().handoff_ms_per_mb == max(measured)


def _images(root):
    pytest.importorskip("PIL")
    from benchmarks.gpu_checks.recipe_data import write_images

    return write_images(root / "train", classes=2, per_class=4, size=64)


def test_launch_measures_the_loader_once_per_host_before_it_plans(tmp_path, capsys):
    pytest.importorskip("torch")
    from advisor.loader import this_host
    from cli.main import main

    data, home = _images(tmp_path), tmp_path / "home"
    argv = ["launch", "--model", "resnet18", "--gpu", "H100", "--gpus", "1", "--micro-batch", "4", "--batch-size", "4",
            "--recipe", "image-classification", "--data", str(data), "--home", str(home), "--dry-run", "--json"]
    assert main(argv) == 0
    first = capsys.readouterr()
    probe = read_loader_probe(home)
    assert probe is not None and probe.host == this_host() and probe.source == "advise launch --data"
    assert "loader rate on this host" in first.err
    assert json.loads(first.out)
    assert main(argv) == 0  # cached: not measured again
    assert "loader rate on this host" not in capsys.readouterr().err


def test_launch_measures_again_over_an_older_chain_only_probe(tmp_path):
    pytest.importorskip("torch")
    from advisor.loader import this_host
    from launcher.loader_probe import cached_or_measured

    data, home = _images(tmp_path), tmp_path / "home"
    save_loader_probe(home, _probe(this_host(), 50.0))  # what an older cardwise stored: the chain alone
    probe, now = cached_or_measured(home, data, 64)
    assert now and probe.method == "dataloader worker" and read_loader_probe(home).method == "dataloader worker"
    assert cached_or_measured(home, data, 64) == (probe, False)  # and kept from then on


def _plan(workers: int, micro_batch: int = 256, ranks: int = 8, prefetch: int = 2) -> Plan:
    return Plan(model=ModelRef(name="resnet50"), config=TrainConfig(micro_batch=micro_batch, image_size=224),
                gpu="H100", processes_per_node=ranks, global_batch=micro_batch * ranks, lr=0.1, base_lr=0.1,
                base_batch=256, num_workers=workers, prefetch_factor=prefetch if workers else None)


def test_workers_that_do_not_fit_a_containers_shared_memory_are_refused_with_the_fix():
    from launcher.shm_check import ShmSpace, check_shm, shm_need

    docker_default = ShmSpace("/dev/shm", 64 * 2**20, 64 * 2**20)  # docker run without --shm-size
    plan = _plan(workers=7)
    need = shm_need(plan)
    assert need.batches_per_rank == 7 * 2 + 1 and need.batch_bytes == 256 * (3 * 224 * 224 * 4 + 8)
    with pytest.raises(UserError) as e:
        check_shm(plan, docker_default)
    assert "bus error" in e.value.what and "--shm-size=" in e.value.fix and "--cpus-per-gpu" in e.value.fix
    roomy = ShmSpace("/dev/shm", 256 * 2**30, 256 * 2**30)
    assert check_shm(plan, roomy) is None
    close = ShmSpace("/dev/shm", 2**40, int(need.total_bytes * 1.5))
    assert "close to full" in check_shm(plan, close)
    assert check_shm(_plan(workers=0), docker_default) is None  # no workers, nothing in shared memory


def test_preflight_refuses_before_anything_starts(tmp_path):
    from launcher.preflight import check_here
    from launcher.shm_check import ShmSpace

    with pytest.raises(UserError, match="shared memory"):
        check_here(_plan(workers=3, micro_batch=64, ranks=1), shm=ShmSpace("/dev/shm", 64 * 2**20, 64 * 2**20))
    assert check_here(_plan(workers=3, micro_batch=64, ranks=1), shm=ShmSpace("/dev/shm", 2**36, 2**36)) is None
