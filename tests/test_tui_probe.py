"""The wizard's "probe first": the probe runs in the launch worker, its summary lands in the run log,
and the launch follows only when the probe measured something (real CPU processes, tiny models)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from textual.widgets import Checkbox, Input, Static

from advisor.plan import ModelRef
from launcher.store import RunStore
from tui import demo
from tui.app import make_app
from tui.monitor import FixedSampler
from tui.state import HardwareChoice, WizardState, Workload
from tui.widgets.rank_log import RankLog

pytestmark = pytest.mark.slow

SIZE = (80, 24)
DATA = Path(__file__).with_name("data")
SCRIPTS = Path(__file__).with_name("scripts")


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the shared 2-core machine
    monkeypatch.setattr(Input, "_toggle_cursor", lambda self: None)


def _app(store, model: ModelRef, seq_len: int | None = None):
    machine = demo.cpu_machine(2)
    state = WizardState(hardware=HardwareChoice.initial(machine), model=model, workload=Workload(seq_len=seq_len))
    return make_app(machine, store, state=state, sampler_factory=lambda m: FixedSampler(demo.cpu_samples()))


async def _wait(pilot, cond, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        await pilot.pause(0.1)


async def _launch_with_probe(pilot, app, *, micro: str, script: str | None = None) -> list[str]:
    await pilot.press("f6")
    screen = app.screen
    for wid, value in (("#procs", "1"), ("#micro", micro), ("#steps", "2")):
        screen.query_one(wid, Input).value = value
    if script is not None:
        screen.query_one("#target").value = "script"
        await pilot.pause()
        screen.query_one("#script", Input).value = script
    screen.query_one("#probe", Checkbox).value = True
    await pilot.pause()
    await pilot.press("ctrl+r")
    await _wait(pilot, lambda: screen.running, 10)
    await _wait(pilot, lambda: not screen.running, 280)
    await pilot.pause(0.5)
    return [t for _, t in screen.query_one(RankLog).entries]


def test_probe_first_then_launch(tmp_path):
    store = RunStore.open(tmp_path / "home")
    app = _app(store, ModelRef(name="mini-transformer"), seq_len=16)
    seen = {}

    async def flow():
        async with app.run_test(size=SIZE) as pilot:
            seen["log"] = await _launch_with_probe(pilot, app, micro="2")
            seen["status"] = str(app.screen.query_one("#run-status", Static).render())

    asyncio.run(flow())
    log = "\n".join(seen["log"])
    assert "probe: attempt 1: mini-transformer at micro-batch 2" in log
    assert "probe on cpu (cardwise mini-transformer), micro-batch 2:" in log and "samples/s measured" in log
    assert "factors stored for later estimates (model:mini-transformer|cpu|fp32)" in log
    assert "succeeded" in seen["status"]
    assert [r.status for r in store.list()] == ["succeeded"]
    assert (tmp_path / "home" / "probe-factors.json").exists()


def test_probe_out_of_memory_everywhere_launches_nothing(tmp_path):
    store = RunStore.open(tmp_path / "home")
    app = _app(store, ModelRef(module=str(DATA / "oom_net.py") + ":never_fits", input_shape=(16,)))
    seen = {}

    async def flow():
        async with app.run_test(size=SIZE) as pilot:
            # From micro-batch 1: one probe child shows the refusal (the halving to it is test_probe's)
            seen["log"] = await _launch_with_probe(pilot, app, micro="1", script=f"{SCRIPTS / 'oom_train.py'}")
            seen["status"] = str(app.screen.query_one("#run-status", Static).render())

    asyncio.run(flow())
    assert any(t.startswith("probe oom: out of GPU memory at every micro-batch down to 1") for t in seen["log"])
    assert "launch failed" in seen["status"] and "probe oom" in seen["status"]
    assert store.list() == []
