"""The wizard on a real GPU machine: NVML device samples, and a GPU run planned, launched and
watched from the wizard. Skipped where NVML sees no GPU (CI, laptops)."""

from __future__ import annotations

import asyncio
import time

import pytest
from textual.widgets import Input, Static

from advisor.hardware import detect_machine
from advisor.plan import ModelRef
from launcher.store import RunStore
from tui.app import make_app
from tui.monitor import DeviceSampler
from tui.state import HardwareChoice, WizardState, Workload
from tui.widgets.device_bars import DeviceBars

MACHINE = detect_machine()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not MACHINE.has_gpu, reason="no GPU seen by NVML")]


def test_device_sampler_reads_every_gpu():
    sampler = DeviceSampler(MACHINE)
    try:
        samples = sampler.sample()
    finally:
        sampler.close()
    assert [s.label for s in samples] == [f"GPU{g.index}" for g in MACHINE.gpus]
    assert all(s.mem_total_gib and s.mem_total_gib > 1 and s.util_pct is not None for s in samples)


@pytest.mark.slow
def test_plan_launch_and_watch_a_gpu_run(tmp_path):
    store = RunStore.open(tmp_path / "home")
    state = WizardState(hardware=HardwareChoice.initial(MACHINE, gpus=1), model=ModelRef(name="mini-transformer"),
                        workload=Workload(seq_len=64, batch_size=16))
    app = make_app(MACHINE, store, state=state)
    seen: dict = {}

    async def flow():
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("f5")
            end = time.monotonic() + 60
            while app.recommendation is None:
                assert time.monotonic() < end, str(app.screen.query_one("#rec-title", Static).render())
                await pilot.pause(0.1)
            await pilot.press("l")
            assert app.screen.query_one("#device").value == "gpu"
            steps = app.screen.query_one("#steps", Input)
            steps.value = "5"
            await pilot.press("ctrl+r")
            end = time.monotonic() + 240
            while app.screen.run_id is None or app.screen.running:
                assert time.monotonic() < end, "the GPU run did not finish"
                await pilot.pause(0.2)
            await pilot.pause(1.0)
            seen["run_id"] = app.screen.run_id
            seen["status"] = str(app.screen.query_one("#run-status", Static).render())
            seen["devices"] = [s.label for s in app.screen.query_one(DeviceBars).samples]

    asyncio.run(flow())
    rec = store.get(seen["run_id"])
    assert rec.status == "succeeded", (seen["status"], rec.error)
    assert rec.plan["cpu"] is False and rec.plan["gpu"] and rec.metrics.steps == 5
    assert rec.metrics.peak_gib is not None and rec.metrics.peak_gib > 0
    assert "GPU0" in seen["devices"]
