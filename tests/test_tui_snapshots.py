"""Snapshots (pytest-textual-snapshot) of the wizard's main screens at 80x24, from fixed data.

The machines, the run store and the recommendation come from ``tui.demo``: no NVML, no clock, no
rules run, so a snapshot changes only when a screen's rendering does. The SVGs live in
``tests/snapshots/test_tui_snapshots/``; after a deliberate change of a screen, review and
accept with ``pytest tests/test_tui_snapshots.py --snapshot-update``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import pytest_textual_snapshot
from textual.widgets import Input

from advisor.plan import ModelRef
from launcher.store import RunStore
from tui import demo
from tui.app import make_app
from tui.monitor import FixedSampler
from tui.state import HardwareChoice, WizardState, Workload

SIZE = (80, 24)
SNAPSHOTS = Path(__file__).parent / "snapshots"


class _SvgInTestsSnapshots(pytest_textual_snapshot.SVGImageExtension):
    @classmethod
    def dirname(cls, *, test_location) -> str:
        return str(SNAPSHOTS / test_location.basename)


@pytest.fixture(autouse=True, scope="module")
def _snapshots_dir():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pytest_textual_snapshot, "SVGImageExtension", _SvgInTestsSnapshots)
        yield


@pytest.fixture(autouse=True)
def _steady(monkeypatch):
    """No cursor blink, and UTC, so times and the cursor look the same everywhere."""
    monkeypatch.setattr(Input, "_toggle_cursor", lambda self: None)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def store(tmp_path) -> RunStore:
    return RunStore.open(tmp_path / "home")


def gpu_app(store, state: WizardState | None = None, **kw):
    return make_app(demo.gpu_machine(4), store, state=state, sampler_factory=lambda m: FixedSampler(demo.gpu_samples()),
                    **kw)


def test_hardware_detected_gpus(snap_compare, store):
    assert snap_compare(gpu_app(store), terminal_size=SIZE)


def test_hardware_nothing_detected(snap_compare, store):
    app = make_app(demo.cpu_machine(2), store, sampler_factory=lambda m: FixedSampler(demo.cpu_samples()))
    assert snap_compare(app, terminal_size=SIZE)


def test_model_catalog_search(snap_compare, store):
    assert snap_compare(gpu_app(store), press=["f3", *"llama"], terminal_size=SIZE)


def test_workload_with_a_flagged_field(snap_compare, store):
    state = WizardState(hardware=HardwareChoice.initial(demo.gpu_machine(4)), model=ModelRef(name="llama3-8b"),
                        workload=Workload(batch_size=128, epochs=1, deadline_h=10))

    async def bad_value(pilot):
        await pilot.press("f4")
        field = pilot.app.screen.query_one("#in-dataset_size", Input)
        field.focus()
        await pilot.press(*"1e6")

    assert snap_compare(gpu_app(store, state), run_before=bad_value, terminal_size=SIZE)


def _with_recommendation(*keys):
    async def show(pilot):
        pilot.app.recommendation = demo.demo_recommendation()
        await pilot.press("f5", *keys)

    return show


def test_recommendation_summary(snap_compare, store):
    assert snap_compare(gpu_app(store), run_before=_with_recommendation(), terminal_size=SIZE)


def test_recommendation_decision_tree(snap_compare, store):
    assert snap_compare(gpu_app(store), run_before=_with_recommendation("2", "tab", "down", "down"),
                        terminal_size=SIZE)


def test_recommendation_scaling(snap_compare, store):
    assert snap_compare(gpu_app(store), run_before=_with_recommendation("3"), terminal_size=SIZE)


def test_recommendation_rules(snap_compare, store):
    assert snap_compare(gpu_app(store), run_before=_with_recommendation("4"), terminal_size=SIZE)


def test_launch_form_on_a_cpu_machine(snap_compare, store):
    state = WizardState(hardware=HardwareChoice.initial(demo.cpu_machine()), model=ModelRef(name="mini-transformer"))
    app = make_app(demo.cpu_machine(2), store, state=state, sampler_factory=lambda m: FixedSampler(demo.cpu_samples()))
    assert snap_compare(app, press=["f6"], terminal_size=SIZE)


def test_runs_history_with_the_queue(snap_compare, store):
    demo.fill_store(store)
    app = gpu_app(store, home=Path("/home/you/.local/share/cardwise"))  # a fixed path on screen
    assert snap_compare(app, press=["f7"], terminal_size=SIZE)


def test_help(snap_compare, store):
    assert snap_compare(gpu_app(store), press=["f1"], terminal_size=SIZE)
