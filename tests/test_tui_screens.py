"""Pilot-driven tests of the wizard's screens: the bad-value paths (flagged on the field, never a
crash), the typed recommendation they render, saving a plan, help and OOM retries as they happen.
The runs themselves are in tests/test_tui_runs.py."""

from __future__ import annotations

import time
from pathlib import Path

from textual.widgets import Input

from advisor.plan import ModelRef
from tui import demo
from tui.app import make_app
from tui.monitor import FixedSampler
from tui.state import HardwareChoice, WizardState, Workload
from tui.widgets.form_row import FormRow
from tui.widgets.metric_plot import MetricPlot

from tui_pilot import SIZE, _steady_cursor, cpu_app, run, store, text_of, type_into, wait_for  # noqa: F401 (fixtures)


def test_bad_workload_values_are_flagged_on_the_field_and_never_estimated(store):
    state = WizardState(hardware=HardwareChoice.initial(demo.gpu_machine()), model=ModelRef(name="gpt2"))
    app = make_app(demo.gpu_machine(), store, state=state)

    async def flow():
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f4")
            await type_into(pilot, app, "#in-batch_size", "12x")
            row = app.screen.query_one("#row-batch_size", FormRow)
            assert not row.valid and "expected a whole number, got '12x'" in row.error
            assert row.has_class("-invalid") and row.input.has_class("-invalid")
            assert "fix the flagged field" in text_of(app, "#preview")
            assert app.state.workload.batch_size != "12x" and "global batch" in app.problems["workload"]
            await pilot.pause(0.5)  # an earlier estimate finishing late must not overwrite the message
            assert "fix the flagged field" in text_of(app, "#preview")
            await pilot.press("f5")  # later steps wait for the fix
            assert "fix it on the Workload screen (F4)" in text_of(app, "#rec-title")
            await pilot.press("f6", "ctrl+r")
            assert "fix it on the Workload screen" in text_of(app, "#run-status")
            await pilot.press("f4")

            await type_into(pilot, app, "#in-batch_size", "0")
            assert "must be at least 1" in row.error
            await type_into(pilot, app, "#in-batch_size", "32")
            assert row.valid and app.state.workload.batch_size == 32 and not app.problems

            await type_into(pilot, app, "#in-deadline_h", "6 parsecs")
            assert "cannot read the deadline" in app.screen.query_one("#row-deadline_h", FormRow).error
            await type_into(pilot, app, "#in-deadline_h", "6h")
            deadline = app.screen.query_one("#row-deadline_h", FormRow)
            assert deadline.valid and deadline.problem == "a deadline needs dataset size and epochs"
            await type_into(pilot, app, "#in-dataset_size", "100000")
            await type_into(pilot, app, "#in-epochs", "1")
            assert deadline.problem is None
            await wait_for(pilot, lambda: "time to train" in text_of(app, "#preview"))

    run(flow())
    assert app.state.workload.deadline_h == 6.0


def test_bad_hardware_and_model_sources_are_flagged_not_raised(store, tmp_path):
    app = make_app(demo.gpu_machine(), store)
    broken = tmp_path / "config.json"
    broken.write_text("{not json")

    async def flow():
        async with app.run_test(size=SIZE) as pilot:
            await type_into(pilot, app, "#gpu-count", "two")
            assert "expected a whole number" in text_of(app, "#hw-error")
            assert app.state.hardware.gpus is None
            await type_into(pilot, app, "#gpu-count", "2")
            assert app.state.hardware.gpus == 2 and "2x H100-SXM" in text_of(app, "#hw-summary")

            await pilot.press("f3")
            await type_into(pilot, app, "#in-hf_config", str(tmp_path / "missing.json"))
            await pilot.press("enter")
            row = app.screen.query_one("#row-hf_config", FormRow)
            await wait_for(pilot, lambda: row.problem is not None)
            await type_into(pilot, app, "#in-hf_config", str(broken))
            await pilot.press("enter")
            await wait_for(pilot, lambda: row.problem is not None and "json" in text_of(app, "#chosen").lower())
            await type_into(pilot, app, "#in-input_shape", "3,a")
            assert not app.screen.query_one("#row-input_shape", FormRow).valid
            assert app.state.model is None
            await type_into(pilot, app, "#search", "zzz-no-such-model")
            await pilot.press("enter")
            assert app.current_mode == "model"

            hf = Path(__file__).parent / "data" / "hf" / "Mistral-7B-v0.1" / "config.json"
            if hf.exists():  # a real config.json is picked up and moves on to the workload
                await type_into(pilot, app, "#in-hf_config", str(hf))
                await pilot.press("enter")
                # a hang guard: the trace takes ~5 s alone, over 30 s on a 2-core machine under load
                await wait_for(pilot, lambda: app.current_mode == "workload", timeout=300)
                assert app.state.model.hf_config == str(hf)
                # let the workload screen finish mounting (its Select fills its label after compose)
                # before the app shuts down, or Textual updates a label that is not there yet
                await wait_for(pilot, lambda: bool(app.screen.query("#lr-scaling SelectCurrent #label")))
                await pilot.pause()

    run(flow())


def test_bad_launch_values_and_unlaunchable_choices_are_reported(store):
    app = cpu_app(store)  # no model chosen yet

    async def flow():
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f6")
            await pilot.press("ctrl+r")
            assert "no model chosen" in text_of(app, "#run-status")
            app.state.model = ModelRef(name="gpt2")
            await type_into(pilot, app, "#procs", "0")
            await pilot.press("ctrl+r")
            assert "must be at least 1" in text_of(app, "#run-status")
            await type_into(pilot, app, "#procs", "2")
            app.screen.query_one("#target").value = "text-classification"
            await pilot.pause()
            await pilot.press("ctrl+r")
            assert "trains mini-transformer" in text_of(app, "#run-status")
            app.screen.query_one("#target").value = "script"
            await pilot.pause()
            await type_into(pilot, app, "#script", "no_such_train.py --lr {lr}")
            await pilot.press("ctrl+r")
            assert "training script not found" in text_of(app, "#run-status")
            assert not app.screen.running

    run(flow())
    assert store.list() == []  # nothing was recorded


def test_recommendation_without_a_model_says_what_to_do(store):
    app = make_app(demo.gpu_machine(), store)

    async def flow():
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f5")
            assert "no model chosen" in text_of(app, "#rec-title")
            await pilot.press("s", "c")  # nothing to save or copy: a notice, not a crash
            await pilot.pause()

    run(flow())


def test_screens_render_the_rules_typed_recommendation(store, monkeypatch):
    """The workload preview and the Recommendation screen receive ``rules.recommend.Recommendation``
    (and its typed parts), the one ``rules.api.recommend`` returns for the wizard's Request."""
    from rules.recommend import PathStep, Recommendation
    from tui.compute import ModelInfo, RecView
    from tui.screens.workload import WorkloadScreen
    from tui.widgets.decision_tree import DecisionTree
    from tui.widgets.memory_bar import MemoryBar

    previews = []
    shown = WorkloadScreen.on_preview_ready

    def spy(self, message):
        previews.append(message)
        shown(self, message)

    monkeypatch.setattr(WorkloadScreen, "on_preview_ready", spy)
    machine = demo.gpu_machine(2)
    state = WizardState(hardware=HardwareChoice.initial(machine), model=ModelRef(name="gpt2"),
                        workload=Workload(batch_size=16, dataset_size=10_000, epochs=1))
    app = make_app(machine, store, state=state, sampler_factory=lambda m: FixedSampler(demo.gpu_samples(2)))

    async def flow():
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f4")
            await wait_for(pilot, lambda: "samples/s" in text_of(app, "#preview"), timeout=60)
            preview = previews[-1]
            assert isinstance(preview.rec, Recommendation) and isinstance(preview.info, ModelInfo)
            assert f"global {preview.rec.recommendation.global_batch}" in text_of(app, "#preview")

            await pilot.press("f5")
            await wait_for(pilot, lambda: app.recommendation is not None, timeout=60)
            view = app.recommendation
            assert isinstance(view, RecView) and isinstance(view.rec, Recommendation)
            assert view.rec.recommendation.strategy.upper() in text_of(app, "#rec-title")
            assert app.screen.query_one(MemoryBar).memory is view.rec.estimate.memory
            tree = app.screen.query_one("#tree", DecisionTree)
            assert isinstance(tree.cursor_node.data.step, PathStep)  # A, the first step of the path

    run(flow())


def test_save_plan_writes_a_launchable_plan(store, tmp_path):
    app = make_app(demo.gpu_machine(), store)
    target = tmp_path / "plans" / "plan.json"

    async def flow():
        async with app.run_test(size=SIZE) as pilot:
            app.recommendation = demo.demo_recommendation()
            await pilot.press("f5")
            await pilot.press("s")
            await pilot.pause()
            field = app.screen.query_one("#plan-path", Input)
            field.value = str(target)
            await pilot.press("enter")
            await pilot.pause()

    run(flow())
    from advisor.plan import Plan

    plan = Plan.load(target)
    assert plan.config.strategy.value == "fsdp" and plan.world_size == 4


def test_help_lists_every_key_of_every_screen(store):
    app = make_app(demo.gpu_machine(), store)
    from tui.screens.help import help_text, key_name

    async def flow():
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f1")
            assert type(app.screen).__name__ == "HelpScreen"
            text = help_text(app.help_sections())
            for _title, bindings in app.help_sections():
                for b in bindings:
                    assert key_name(b.key) in text
            for key in ("F1", "F2", "F7", "ctrl+q", "ctrl+r", "x", "s", "c", "l", "tab / shift+tab"):
                assert key in text
            await pilot.press("escape")
            assert type(app.screen).__name__ == "HardwareScreen"

    run(flow())


def test_oom_retries_show_as_they_happen(store):
    """The runner's OOM-retry line and the record's "oom" attempt reach the status line and a toast."""
    import threading

    from launcher.store import Attempt, RunRecord
    from tui.messages import RunSample

    app = cpu_app(store)

    async def flow():
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f6")
            screen = app.screen
            screen._cancel, screen.run_id, screen.world, screen.started_at = threading.Event(), "r1", 2, time.monotonic()
            rec = RunRecord(id="r1", status="running", created=demo.T0, attempts=[
                Attempt(n=1, micro_batch=8, grad_accum=1, status="oom"),
                Attempt(n=2, micro_batch=4, grad_accum=2, status="running")])
            line = ("cardwise: out of GPU memory at micro-batch 8; retrying with 4 x 2 accumulation "
                    "(same global batch)")
            screen.post_message(RunSample("r1", ["[default0]:step 1: loss 0.7", line], [
                {"step": 1, "loss": 0.7, "samples_per_s": 3.0, "rank": 0},
                {"step": 1, "loss": 0.7, "samples_per_s": 3.5, "rank": 1}], demo.cpu_samples(), rec))
            await pilot.pause()
            status = text_of(app, "#run-status")
            assert "1 OOM retry" in status and "micro-batch 8 ran out of memory" in status
            assert "attempt 2: micro-batch 4 x 2" in status
            assert any(n.title == "OOM retry" for n in app._notifications)
            assert app.screen.query_one("#thr-plot", MetricPlot).values == [6.5]  # summed over both ranks
            screen._cancel = None

    run(flow())


def test_a_config_json_shows_work_at_once_in_a_field_as_wide_as_the_screen_allows(store, tmp_path, monkeypatch):
    """At 160x40 the config.json field was 18 columns (a path's first 18 characters), and a config traced
    for ~5 s showed nothing meanwhile. The trace is held here until the screen has been looked at."""
    import threading

    from tui import compute

    release = threading.Event()
    real = compute.resolve_model

    def slow(ref):
        release.wait(60)
        return real(ref)

    monkeypatch.setattr(compute, "resolve_model", slow)
    app = make_app(demo.gpu_machine(), store)
    hf = Path(__file__).parent / "data" / "hf" / "Mistral-7B-v0.1" / "config.json"

    async def flow():
        async with app.run_test(size=(160, 40)) as pilot:
            await pilot.press("f3")
            field = app.screen.query_one("#in-hf_config", Input)
            assert field.size.width >= 70, field.size  # 160 less the label, the hint and the padding
            await type_into(pilot, app, "#in-hf_config", str(hf))
            await pilot.press("enter")
            await pilot.pause()
            assert "tracing the model on the meta device" in text_of(app, "#chosen")
            release.set()
            await wait_for(pilot, lambda: app.current_mode == "workload", timeout=300)  # a hang guard
            await wait_for(pilot, lambda: bool(app.screen.query("#lr-scaling SelectCurrent #label")))
            await pilot.pause()

    try:
        run(flow())
    finally:
        release.set()
    assert app.state.model.hf_config == str(hf)


def test_down_and_up_move_between_form_fields(store):
    state = WizardState(hardware=HardwareChoice.initial(demo.gpu_machine()), model=ModelRef(name="gpt2"))
    app = make_app(demo.gpu_machine(), store, state=state)

    async def flow():
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f3")
            assert app.focused.id == "search"
            await pilot.press("down")  # the search's next field is the catalog, where the arrows move the row
            assert app.focused.id == "catalog"
            await pilot.press("down")
            assert app.focused.id == "catalog"
            app.screen.query_one("#in-hf_config", Input).focus()
            await pilot.press("down")
            assert app.focused.id == "in-module"
            await pilot.press("down")
            assert app.focused.id == "in-input_shape"
            await pilot.press("up", "up")
            assert app.focused.id == "in-hf_config"
            await pilot.press("f4")
            first = app.screen.query_one("#in-batch_size", Input)
            first.focus()
            await pilot.press("down")
            assert app.focused is not first and isinstance(app.focused, Input)
            await pilot.press("up")
            assert app.focused is first
            await wait_for(pilot, lambda: bool(app.screen.query("#lr-scaling SelectCurrent #label")))
            await pilot.pause()

    run(flow())
