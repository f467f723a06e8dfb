"""Pilot-driven wizard runs: the whole flow with a real 2-process CPU run, the stop key, and
ctrl+q from anywhere (also during a run). The real runs are tiny: mini-transformer, seq 32,
micro-batch 2, 5 steps."""

from __future__ import annotations

import psutil
import pytest
from textual.widgets import DataTable, Log

from advisor.plan import ModelRef
from tui import demo
from tui.app import CardwiseApp, make_app
from tui.monitor import FixedSampler
from tui.screens.run_detail import RunDetailScreen
from tui.state import HardwareChoice, WizardState, Workload
from tui.widgets.metric_plot import MetricPlot
from tui.widgets.rank_log import RankLog

from tui_pilot import SIZE, _steady_cursor, cpu_app, run, store, text_of, type_into, wait_for  # noqa: F401 (fixtures)


# ---------------------------------------------------------------- the whole flow
@pytest.mark.slow
def test_pick_model_recommend_launch_cpu_run_and_find_it_in_runs(store):
    app = cpu_app(store)
    seen: dict = {}

    async def flow():
        async with app.run_test(size=SIZE) as pilot:
            assert app.screen.id is None and type(app.screen).__name__ == "HardwareScreen"
            await pilot.press("f3")
            await pilot.press(*"mini-trans", "enter")  # search the catalog, Enter picks the match
            await wait_for(pilot, lambda: app.current_mode == "workload")
            assert app.state.model == ModelRef(name="mini-transformer")

            await type_into(pilot, app, "#in-seq_len", "32")
            await wait_for(pilot, lambda: "samples/s" in text_of(app, "#preview"))
            assert app.state.workload.seq_len == 32

            await pilot.press("ctrl+n")
            assert app.current_mode == "recommendation"
            await wait_for(pilot, lambda: app.recommendation is not None)
            assert "on 8x A100-SXM-80GB (planned)" in text_of(app, "#rec-title")
            assert "advise launch" in text_of(app, "#rec-command")
            await pilot.press("c")  # copy the command
            assert app.clipboard == app.recommendation.command
            await pilot.press("2")  # the decision tree tab
            assert app.screen.query_one("#rec-tabs").active == "tab-tree"

            await pilot.press("l")
            assert app.current_mode == "launch"
            await type_into(pilot, app, "#micro", "2")
            await type_into(pilot, app, "#steps", "5")
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: app.screen.run_id is not None)
            await wait_for(pilot, lambda: not app.screen.running, timeout=90)
            await wait_for(pilot, lambda: any("step 5" in t for _, t in app.screen.query_one(RankLog).entries), 5)
            seen["run_id"] = app.screen.run_id
            seen["status"] = text_of(app, "#run-status")
            log = app.screen.query_one(RankLog)
            seen["ranks"] = set(log.ranks)
            assert {r for r, t in log.entries if t.startswith("step ")} == {0}  # filed under rank 0, unprefixed
            await pilot.press("r")
            assert log.filter_name == "rank 0"
            seen["loss"] = list(app.screen.query_one("#loss-plot", MetricPlot).values)

            await pilot.press("f7")
            table = app.screen.query_one("#runs-table", DataTable)
            await wait_for(pilot, lambda: table.row_count >= 1)
            assert table.get_row_at(0)[0] == seen["run_id"]
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, RunDetailScreen))
            assert "succeeded" in text_of(app, "#detail-title")
            await wait_for(pilot, lambda: app.screen.query_one("#detail-log", Log).line_count > 1)
            await pilot.press("escape")
            assert type(app.screen).__name__ == "RunsScreen"

    run(flow())
    assert "succeeded" in seen["status"] and "5 steps on 2 rank(s)" in seen["status"]
    assert seen["ranks"] == {0, 1}  # the rank filter offers every rank of the run
    assert len(seen["loss"]) == 5
    rec = store.get(seen["run_id"])
    assert rec.status == "succeeded" and rec.metrics.steps == 5 and rec.metrics.ranks == 2
    assert rec.plan["cpu"] and rec.plan["processes_per_node"] == 2 and rec.plan["config"]["micro_batch"] == 2


def _no_children_left() -> bool:
    return not [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]


def _mini_cpu_app(store):
    """The wizard on the CPU demo machine with mini-transformer at seq 32 already chosen."""
    state = WizardState(hardware=HardwareChoice.initial(demo.cpu_machine()), model=ModelRef(name="mini-transformer"),
                        workload=Workload(seq_len=32))
    return cpu_app(store, state=state)


@pytest.mark.slow
def test_stop_key_cancels_the_run_cleanly(store):
    app = _mini_cpu_app(store)
    seen: dict = {}

    async def flow():
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f6")
            await type_into(pilot, app, "#micro", "2")
            await type_into(pilot, app, "#steps", "100000")
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: app.screen.run_id is not None)
            await wait_for(pilot, lambda: store.get(app.screen.run_id).pid is not None)
            assert app.run_cancel is not None
            await pilot.press("x")
            assert "stopping" in text_of(app, "#run-status")
            await wait_for(pilot, lambda: not app.screen.running, timeout=30)
            seen["run_id"] = app.screen.run_id
            seen["status"] = text_of(app, "#run-status")
            assert app.run_cancel is None
            assert not app.screen.query_one("#target").disabled  # the form is back

    run(flow())
    assert "cancelled" in seen["status"]
    assert store.get(seen["run_id"]).status == "cancelled"
    assert _no_children_left()


# ---------------------------------------------------------------- quitting
@pytest.mark.parametrize("keys", [(), ("f3",), ("f4", "tab"), ("f5",), ("f6",), ("f7",), ("f1",), ("f3", "f1")])
def test_ctrl_q_quits_from_anywhere_with_status_0(store, keys):
    state = WizardState(hardware=HardwareChoice.initial(demo.gpu_machine()), model=ModelRef(name="gpt2"))
    app = make_app(demo.gpu_machine(), store, state=state, sampler_factory=lambda m: FixedSampler(demo.gpu_samples()))

    async def flow():
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press(*keys)
            await pilot.pause()
            await pilot.press("ctrl+q")
            await pilot.pause()

    run(flow())
    assert app.return_code == 0


def test_advise_wizard_command_exits_0_on_ctrl_q(monkeypatch, tmp_path):
    from cli.main import main

    original = CardwiseApp.run

    async def quit_from_workload(pilot):
        await pilot.pause()
        await pilot.press("f4", "ctrl+q")

    monkeypatch.setattr(CardwiseApp, "run", lambda self, **kw: original(self, headless=True, size=SIZE,
                                                                         auto_pilot=quit_from_workload))
    monkeypatch.setattr("cli.wizard_cmd.not_a_terminal", lambda: None)  # headless: pytest's streams are no terminal
    assert main(["wizard", "--home", str(tmp_path / "home"), "--gpu", "h100", "--gpus", "2"]) == 0
    assert (tmp_path / "home" / "runs.sqlite").exists()


@pytest.mark.slow
def test_ctrl_q_during_a_run_cancels_it_and_exits_0(store):
    app = _mini_cpu_app(store)
    seen: dict = {}

    async def flow():
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f6")
            await type_into(pilot, app, "#steps", "100000")
            await pilot.press("ctrl+r")
            await wait_for(pilot, lambda: app.screen.run_id is not None)
            await wait_for(pilot, lambda: store.get(app.screen.run_id).pid is not None)
            seen["run_id"] = app.screen.run_id
            await pilot.press("ctrl+q")

    run(flow())  # returns once the run's worker has stopped every rank
    assert app.return_code == 0
    assert store.get(seen["run_id"]).status == "cancelled"
    assert _no_children_left()


# ---------------------------------------------------------------- bad values
