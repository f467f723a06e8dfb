"""launcher.runtime.Runtime in this process, on CPU (one rank, no launcher)."""

from __future__ import annotations

import torch

from advisor.plan import ModelRef
from advisor.request import Request
from plans import cpu_plan_for
from launcher.runtime import Runtime


def _runtime(tmp_path, **kw) -> Runtime:
    plan, _ = cpu_plan_for(Request(model=ModelRef(name="mini-transformer"), micro_batch=2, seq_len=8), processes=1, max_steps=8)
    return Runtime(plan, metrics_path=tmp_path / "metrics.jsonl", **kw)


def _step(rt: Runtime, model, opt) -> None:
    batches = iter(lambda: (torch.randn(2, 4), torch.randn(2, 1)), None)
    rt.train_step(model, opt, batches, loss_fn=lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1]))


def test_the_first_step_of_a_resumed_run_is_its_first_here(tmp_path):
    """Launch overhead and the peak-memory reset belong to the process's first optimizer step, also
    when a checkpoint put the step counter at 4 (launcher.checkpoints.Checkpoints.restore)."""
    rt = _runtime(tmp_path)
    lin = torch.nn.Linear(4, 1)
    model, opt = rt.prepare(lin, torch.optim.SGD(lin.parameters(), lr=0.1))
    rt.step = 4
    _step(rt, model, opt)
    assert rt.step == 5 and rt.first_step_time is not None
    first = rt.first_step_time
    _step(rt, model, opt)
    assert rt.first_step_time == first  # set once


def test_a_rank_whose_launcher_is_pid_1_lives(monkeypatch):
    """In a container the launcher can be the init process: a parent pid of 1 is then no dead parent."""
    import os
    import types

    from launcher import runtime

    killed: list = []
    monkeypatch.setattr(runtime.ctypes, "CDLL", lambda name: types.SimpleNamespace(prctl=lambda *args: 0))  # not pytest's
    monkeypatch.setattr(os, "getppid", lambda: 1)
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append((pid, sig)))
    runtime._die_with_parent()
    assert killed == []
    parents = iter([4242, 1])  # re-parented between the two reads: the launcher died meanwhile
    monkeypatch.setattr(os, "getppid", lambda: next(parents))
    runtime._die_with_parent()
    assert len(killed) == 1
