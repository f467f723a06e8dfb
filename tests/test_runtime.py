"""launcher.runtime.Runtime in this process, on CPU (one rank, no launcher)."""

from __future__ import annotations

import torch

from advisor.plan import ModelRef
from advisor.request import Request
from launcher.cpu_plan import cpu_plan
from launcher.runtime import Runtime


def _runtime(tmp_path, **kw) -> Runtime:
    plan, _ = cpu_plan(Request(model=ModelRef(name="mini-transformer"), micro_batch=2, seq_len=8), processes=1, max_steps=8)
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
