"""What the Pilot-driven wizard tests share: the fixed-data app, the store, waiting and typing.

Every app is built with ``make_app`` from fixed data (``tui.demo`` machines, a store in tmp), so
nothing here reads NVML. Imported by tests/test_tui_screens.py and tests/test_tui_runs.py (the
fixtures are picked up from the importing module's namespace)."""

from __future__ import annotations

import asyncio
import time

import pytest
from textual.widgets import Input, Static

from launcher.store import RunStore
from tui import demo
from tui.app import CardwiseApp, make_app
from tui.monitor import FixedSampler

SIZE = (80, 24)

@pytest.fixture(autouse=True)
def _steady_cursor(monkeypatch):
    monkeypatch.setattr(Input, "_toggle_cursor", lambda self: None)


@pytest.fixture
def store(tmp_path) -> RunStore:
    return RunStore.open(tmp_path / "home")


def cpu_app(store, **kw) -> CardwiseApp:
    return make_app(demo.cpu_machine(2), store, sampler_factory=lambda m: FixedSampler(demo.cpu_samples()), **kw)


def text_of(app, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


async def wait_for(pilot, cond, timeout: float = 300.0, step: float = 0.1) -> None:
    # The timeout is a hang guard, not a time limit: a loaded 2-core machine took over 30 s here.
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {cond.__name__ if hasattr(cond, '__name__') else cond}")
        await pilot.pause(step)


async def type_into(pilot, app, selector: str, text: str) -> None:
    """Focus the field and type ``text`` (short values key by key; long paths are pasted)."""
    field = app.screen.query_one(selector, Input)
    field.focus()
    field.value = ""
    if len(text) <= 12:
        await pilot.press(*text)
    else:
        field.value = text
        await pilot.pause()


def run(coro) -> None:
    asyncio.run(coro)
