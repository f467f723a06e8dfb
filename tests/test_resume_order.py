"""A resumed run reads the data the uninterrupted run would have read, augmentations included (issue 31).

The unit tests run no process: a resumed stream at every position of three epochs against the
uninterrupted one, and a sample's augmentation as a function of its key. The launches (marked slow)
are real CPU runs, 1 process and 2 gloo processes, of the image-classification recipe (shuffled,
randomly cropped and flipped): an uninterrupted run, then the same run killed (SIGTERM) each time it
saves a new checkpoint and resumed with ``advise launch --resume``, a chain that resumes inside the
first epoch, inside later ones and at an epoch boundary. Every logged loss of the chain equals the
uninterrupted run's exactly.
"""

from __future__ import annotations

import itertools
import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]


def _runtime(tmp_path):
    from advisor.plan import ModelRef
    from advisor.request import Request
    from launcher.runtime import Runtime
    from plans import cpu_plan_for

    plan, _ = cpu_plan_for(Request(model=ModelRef(name="mini-transformer"), micro_batch=2, seq_len=8), processes=1, max_steps=8)
    return Runtime(plan, metrics_path=tmp_path / "metrics.jsonl")


class _NoCheckpoints:
    def due(self) -> bool:
        return False


class _Clock:
    def wrap(self, it):
        return it

    def take(self) -> float:
        return 0.0


class _Indices(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 10

    def __getitem__(self, i):
        return torch.tensor(i)


def _read(rt, loader, skip: int, n: int) -> list[list[int]]:
    from launcher.checkpoints import _stream

    return [b.tolist() for b in itertools.islice(_stream(rt, loader, _NoCheckpoints(), _Clock(), skip), n)]


def test_a_resumed_stream_reads_what_the_uninterrupted_one_read_at_every_position(tmp_path):
    rt = _runtime(tmp_path)
    lin = torch.nn.Linear(1, 1)
    _, _, loader = rt.prepare(lin, torch.optim.SGD(lin.parameters(), lr=0.1), rt.dataloader(_Indices()))
    per_epoch = len(loader)  # 10 samples, micro-batch 2
    before = torch.get_rng_state()
    full = _read(rt, loader, 0, 3 * per_epoch + 2)
    assert torch.equal(torch.get_rng_state(), before)  # loading never moves the model's RNG (dropout)
    epochs = [sorted(sum(full[e * per_epoch:(e + 1) * per_epoch], [])) for e in range(3)]
    assert epochs == [list(range(10))] * 3 and full[:per_epoch] != full[per_epoch:2 * per_epoch]  # reshuffled, each once
    for skip in range(3 * per_epoch + 1):  # inside the first epoch, at each boundary, inside the later ones
        assert _read(rt, loader, skip, len(full) - skip) == full[skip:], f"resumed after {skip} micro-batches"
    again = _read(_runtime(tmp_path), rt.dataloader(_Indices()), 0, len(full))  # a fresh process: the same order
    assert again == full


def test_an_augmentation_is_a_function_of_its_sample_and_epoch(tmp_path):
    pytest.importorskip("PIL")
    from benchmarks.gpu_checks import recipe_data
    from launcher.data_order import SampleKey
    from launcher.recipes import image_folder
    from launcher.recipes.image_classification import ImageFolderDataset, PilTransform, training_transform

    data = recipe_data.write_images(tmp_path / "images", classes=2, per_class=2, size=40)
    _, samples = image_folder.list_images(data)
    for transform in (PilTransform(16), training_transform(16)[0]):
        ds = ImageFolderDataset(samples, transform)
        first = ds[SampleKey(1, 3)][0]
        torch.manual_seed(123)  # whatever the process drew before
        random.seed(7)
        before = torch.get_rng_state()
        assert torch.equal(ds[SampleKey(1, 3)][0], first)
        assert torch.equal(torch.get_rng_state(), before)
        assert not all(torch.equal(ds[SampleKey(1, e)][0], first) for e in (4, 5, 6))  # another epoch, another crop


# ---------------------------------------------------------------- launches
def _launch(home: Path, *argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cli.main", "launch", "--home", str(home), *argv],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _losses(home: Path) -> dict[tuple[int, int], set[float]]:
    """Every logged loss of every run under ``home``, by (rank, step)."""
    out: dict[tuple[int, int], set[float]] = {}
    for metrics in home.glob("runs/*/metrics.jsonl"):
        for line in metrics.read_text().splitlines():
            row = json.loads(line)
            out.setdefault((row["rank"], row["step"]), set()).add(row["loss"])
    return out


def _checkpoints(home: Path) -> set[tuple[str, int]]:
    """(run id, step) of the complete checkpoints under ``home`` (one may be pruned while we look)."""
    found = set()
    for p in home.glob("runs/*/checkpoints/step-*/cardwise.json"):
        try:
            found.add((p.parts[-4], json.loads(p.read_text())["step"]))
        except (OSError, ValueError):
            pass
    return found


def _check_the_image_classification_recipe(home: Path, steps: int, out: str) -> None:
    """The image-classification recipe on 2 gloo ranks, read off the 2-process reference run (its own launch
    in test_recipes_data before): the loss falls, the classes and size reach the final record, the weights
    are saved, the data-bound share is measured."""
    from launcher.store import RunStore

    (rec,) = RunStore.open(home).list()
    m = rec.metrics
    assert rec.status == "succeeded" and m.ranks == 2 and m.steps == steps and m.last_loss < m.first_loss, out
    final = json.loads((Path(rec.run_dir) / "final-rank0.json").read_text())
    assert final["classes"] == ["class_0", "class_1"] and final["image_size"] == 16
    assert (Path(rec.run_dir) / "model.safetensors").is_file()
    assert 0.0 <= m.data_bound.data_wait_share <= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
def test_kill_and_resume_across_epochs_reproduces_every_loss(processes, tmp_path):
    pytest.importorskip("PIL")
    from benchmarks.gpu_checks import recipe_data
    from launcher.store import RunStore

    per_epoch, every, steps = 3, 2, 8  # checkpoints at 2 (epoch 1), 4 (epoch 2), 6 (the end of epoch 2), 8 (the end)
    data = recipe_data.write_images(tmp_path / "images", classes=2, per_class=per_epoch * processes, size=24)
    argv = ["--cpu", "--processes", str(processes), "--model", "resnet18", "--image-size", "16",
            "--recipe", "image-classification", "--data", str(data), "--micro-batch", "2", "--base-lr", "1e-3",
            "--max-steps", str(steps), "--no-final-weights", "--num-workers", "1", "--", "--log-every", "1"]
    # The reference saves no checkpoint (saving one must not change the run either) and its final weights
    # (written after the last logged loss); the chain saves a checkpoint every `every` steps
    ref = _launch(tmp_path / "ref", *[a for a in argv if a != "--no-final-weights"])
    out = ref.communicate()[0]
    assert ref.returncode == 0, out
    expected = _losses(tmp_path / "ref")
    assert sorted(expected) == [(r, s) for r in range(processes) for s in range(1, steps + 1)]
    if processes == 2:
        _check_the_image_classification_recipe(tmp_path / "ref", steps, out)

    home, resumed_at = tmp_path / "chain", []
    cut = argv.index("--")
    argv = [*argv[:cut], "--checkpoint-every", str(every), *argv[cut:]]
    run = _launch(home, *argv)
    for _ in range(steps):  # each link of the chain saves at least one new checkpoint
        seen = _checkpoints(home)
        # Stopped as soon as it saved one (before its last): the next is `every` steps away.
        wait_for(lambda: run.poll() is not None or any(s < steps for _, s in _checkpoints(home) - seen),
                 600, "a new checkpoint")
        if run.poll() is None:
            run.send_signal(signal.SIGTERM)
        out = run.communicate()[0]
        last = sorted(RunStore.open(home).list(), key=lambda r: r.created)[-1]
        if last.status == "succeeded":
            break
        assert last.status == "cancelled", out
        run = _launch(home, "--resume", last.id)
        resumed_at.append(max(s for r, s in _checkpoints(home) if r == last.id))
    assert last.status == "succeeded", out
    got = _losses(home)
    assert sorted(got) == sorted(expected)
    differ = {k: (v, expected[k]) for k, v in got.items() if v != expected[k]}
    assert not differ, f"resumed at steps {resumed_at}: losses differ {differ}"
    assert any(s > per_epoch for s in resumed_at), resumed_at  # the case that diverged: after the first epoch
