"""The graceful stop's parts, in one process (launcher.graceful_stop; the real 2-rank stop of the service is
tests/test_service_resume.py): where the step boundary is, what a stop checkpoint is, the request files."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from launcher import graceful_stop
from launcher.checkpoints import Checkpoints, _stream, damage, latest, read_meta


class _Stop:
    """Agrees to stop once ``rt.step`` reaches ``at``; records the steps it was asked at."""

    def __init__(self, rt, at):
        self.rt, self.at, self.asked = rt, at, []

    def agreed(self) -> bool:
        self.asked.append(self.rt.step)
        return self.rt.step == self.at


class _Stopped(Exception):
    pass


class _Ckpt:
    def __init__(self, rt):
        self.rt = rt

    def due(self) -> bool:
        return False

    def stop_here(self, watch) -> None:
        raise _Stopped(self.rt.step)


class _Clock:
    def wrap(self, it):
        return it

    def take(self) -> float:
        return 0.0


def test_the_stop_is_asked_once_per_step_before_its_first_micro_batch():
    rt = SimpleNamespace(step=0, rank=0)
    loader = torch.utils.data.DataLoader(list(range(100)), batch_size=1)
    stop = _Stop(rt, at=3)
    stream = _stream(rt, loader, _Ckpt(rt), _Clock(), 0, stop)
    seen = []
    with pytest.raises(_Stopped) as exc:
        for _ in range(10):  # optimizer steps of 2 micro-batches each
            seen += [int(b) for b in itertools.islice(stream, 2)]
            rt.step += 1
    assert exc.value.args == (3,) and stop.asked == [0, 1, 2, 3]
    assert seen == list(range(6))  # steps 1-3 read; the 4th step's first micro-batch was never handed out


def test_requests_reach_only_ranks_that_listen(tmp_path):
    adir = tmp_path / "attempt-1"
    adir.mkdir()
    assert not graceful_stop.ask(adir) and not (adir / graceful_stop.REQUEST_NAME).exists()
    rt = SimpleNamespace(world_size=1, is_main=True, run_dir=tmp_path)
    watch = graceful_stop.StopWatch(rt, graceful_stop.request_path(adir))
    watch.listen()
    assert not watch.agreed()
    assert graceful_stop.ask(adir) and watch.agreed()
    watch.record(7, tmp_path / "checkpoints" / "step-00000007")
    info = graceful_stop.stopped(adir)
    assert info["step"] == 7 and "step 7 with a checkpoint (step-00000007)" in graceful_stop.describe(info)


@pytest.mark.parametrize("every", [None, 2])
def test_a_stop_checkpoint_checks_out_and_goes_when_a_run_without_checkpoints_ends(tmp_path, monkeypatch, every):
    from advisor.plan import ModelRef
    from advisor.request import Request
    from launcher.command import ENV_FINAL_WEIGHTS
    from launcher.runtime import Runtime
    from plans import cpu_plan_for

    monkeypatch.setenv(ENV_FINAL_WEIGHTS, "0")
    plan, _ = cpu_plan_for(Request(model=ModelRef(name="mini-transformer"), micro_batch=2, seq_len=8), processes=1)
    rt = Runtime(plan, run_dir=tmp_path)
    lin = torch.nn.Linear(2, 2)
    model, _ = rt.prepare(lin, torch.optim.SGD(lin.parameters(), lr=0.1))
    ckpt = Checkpoints(rt, Path(tmp_path), every, None)
    rt.step = 4
    path = ckpt.save(stop=True)
    assert damage(path) is None and read_meta(path)["step"] == 4
    assert read_meta(path)["stop"] is (every is None)  # a run with periodic checkpoints keeps it as one of them
    rt.step = 6
    ckpt.finish(model)
    if every is None:
        assert latest(tmp_path) is None  # it asked for no checkpoints: the stop's was for the stop only
    else:
        assert read_meta(latest(tmp_path))["step"] == 6 and (tmp_path / "checkpoints" / "step-00000004").exists()
