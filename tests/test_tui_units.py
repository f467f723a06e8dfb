"""The wizard's plain parts: field parsers, monitor readers, view helpers.

No app runs here (what the first screen imports is checked in test_import_hygiene.py).
"""

from __future__ import annotations

import json

import pytest

from advisor.plan import ModelRef
from advisor.units import format_hours
from tui import compute, demo
from tui.fields import ParserValidator, count_up_to, duration_hours, positive_int
from tui.monitor import LineSink, MetricsTail, split_rank
from tui.state import HardwareChoice, WizardState, Workload
from tui.widgets.memory_bar import bar_cells


# ---------------------------------------------------------------- fields
@pytest.mark.parametrize("text, ok", [("8", True), (" 16 ", True), ("0", False), ("-3", False), ("abc", False),
                                      ("1.5", False), ("", True)])
def test_positive_int_validator_matches_the_cli(text, ok):
    assert ParserValidator(positive_int).validate(text).is_valid is ok


def test_validator_messages_are_the_clis():
    result = ParserValidator(positive_int).validate("abc")
    assert result.failure_descriptions == ["expected a whole number, got 'abc'"]
    assert "deadline" in ParserValidator(duration_hours).validate("6 parsecs").failure_descriptions[0]
    assert duration_hours("1h30m") == pytest.approx(1.5)
    assert not ParserValidator(positive_int, required=True).validate("").is_valid
    with pytest.raises(ValueError, match="at most 4"):
        count_up_to(4)("5")


def test_workload_cross_field_problems_name_the_field():
    assert Workload(deadline_h=6).problems() == {"deadline_h": "a deadline needs dataset size and epochs"}
    assert set(Workload(dataset_size=100).problems()) == {"epochs"}
    assert set(Workload(epochs=2).problems()) == {"dataset_size"}
    assert Workload(dataset_size=100, epochs=1, deadline_h=2).problems() == {}
    kw = Workload(batch_size=32, dataset_size=100, epochs=1, deadline_h=2).request_fields()
    assert kw == {"batch_size": 32, "dataset_size": 100, "epochs": 1.0, "deadline_h": 2.0}


def test_wizard_state_is_the_request_advise_builds_from_the_same_flags():
    from advisor.errors import UserError
    from advisor.request import Request

    machine = demo.gpu_machine(4)
    state = WizardState(hardware=HardwareChoice.initial(machine, gpu="h100", gpus=2), model=ModelRef(name="gpt2"),
                        workload=Workload(batch_size=32, dataset_size=100, epochs=1, deadline_h=2))
    assert state.to_request() == Request(model=ModelRef(name="gpt2"), gpu="H100-SXM", gpus=2, batch_size=32,
                                         dataset_size=100, epochs=1, deadline_h=2)
    assert state.to_request().to_argv() == ["--model", "gpt2", "--gpu", "H100-SXM", "--gpus", "2", "--batch-size", "32",
                                            "--dataset-size", "100", "--epochs", "1", "--deadline", "2h"]
    with pytest.raises(UserError, match="no model chosen"):
        WizardState().to_request()


def test_hardware_choice_detected_planned_and_named():
    gpus, cpu = demo.gpu_machine(4), demo.cpu_machine()
    assert HardwareChoice.initial(gpus).mode == "detected"
    planned = HardwareChoice.initial(cpu)
    assert (planned.mode, planned.gpus) == ("planned", 8)
    named = HardwareChoice.initial(gpus, gpu="h100", gpus=2)
    assert (named.mode, named.gpu, named.gpus) == ("planned", "H100-SXM", 2)
    assert HardwareChoice.initial(gpus).resolve(gpus).total_gpus == 4
    assert HardwareChoice.initial(gpus).request_fields() == {"gpu": None, "gpus": None, "nodes": 1}
    assert "(detected)" in HardwareChoice.initial(gpus).label(gpus)


# ---------------------------------------------------------------- monitor
def test_line_sink_keeps_whole_lines_across_writes():
    sink = LineSink()
    sink.write("[default0]:step 1: loss 0.5\n[default1]:st")
    assert sink.drain() == ["[default0]:step 1: loss 0.5"]
    sink.write("ep 1\r\nlast")
    assert sink.drain() == ["[default1]:step 1"]
    assert sink.drain(final=True) == ["last"]
    assert split_rank("[default1]:step 1") == (1, "step 1")
    assert split_rank("cardwise: out of GPU memory") == (None, "cardwise: out of GPU memory")


def test_metrics_tail_reads_only_new_complete_rows(tmp_path):
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    assert tail.read() == []  # not written yet
    with open(path, "w") as f:
        f.write(json.dumps({"step": 1, "loss": 0.7, "rank": 0}) + "\n" + '{"step": 2, "lo')
    assert [r["step"] for r in tail.read()] == [1]
    with open(path, "a") as f:
        f.write('ss": 0.6, "rank": 0}\nnot json\n{"final": true}\n')
    assert [r["step"] for r in tail.read()] == [2]
    assert tail.read() == []


# ---------------------------------------------------------------- views
def test_memory_bar_marks_capacity_and_overflow():
    fits = bar_cells([10, 0, 10, 0, 0], 80, 40)  # weights, gradients, optimizer, activations, other
    assert len(fits) == 40 and all(style != "red" for _, style in fits)
    over = bar_cells([100, 0, 60, 0, 0], 80, 40)
    assert len(over) == 40
    assert ("┃", "bold white") in over and any(style == "red" for _, style in over)


def test_helpers_format_counts_and_hours():
    assert compute.human_count(8_030_261_248) == "8.03B"
    assert compute.human_count(124_439_808) == "124M"
    assert format_hours(None) == "-" and format_hours(0.5) == "30 min" and format_hours(72) == "3.0 days"


def test_catalog_rows_have_sizes():
    rows = compute.catalog_rows()
    assert {"llama3-8b", "mini-transformer", "resnet50"} <= {r.name for r in rows}
    assert all(r.params > 0 for r in rows)


def test_recommend_is_the_rules_typed_recommendation_for_the_wizards_state():
    from rules.api import recommend
    from rules.recommend import Recommendation

    machine = demo.gpu_machine(4)
    state = WizardState(hardware=HardwareChoice.initial(machine), model=ModelRef(name="llama3-8b"),
                        workload=Workload(dataset_size=100_000, epochs=1))
    view = compute.recommend(state, machine)
    assert isinstance(view.rec, Recommendation)
    assert view.rec == recommend(state.to_request(), machine=machine)  # the same answer as `advise`
    assert view.rec.recommendation.gpus >= 1 and view.command.startswith("advise launch")
    assert view.plan is view.rec.plan and view.plan.model.name == "llama3-8b"
    assert view.rec.decision_path[0].node == "A"
    assert any(row.chosen for row in view.rec.scaling)
    assert {n.id for n in view.tree} == set("ABCDEFGHIJ")


def test_demo_recommendation_is_a_valid_typed_recommendation():
    from rules.recommend import Recommendation

    view = demo.demo_recommendation()
    assert Recommendation.model_validate(view.rec.model_dump(mode="json")) == view.rec
    assert view.plan.world_size == view.rec.recommendation.gpus == 4


def test_gpu_launch_takes_the_recommendations_plan_when_it_fits():
    """The launch form's GPU branch reads the typed Recommendation (no GPU needed: the machine is data)."""
    from dataclasses import replace

    from advisor.errors import UserError
    from tui.launching import LaunchChoice, build_plan

    machine = demo.gpu_machine(4)
    state = WizardState(hardware=HardwareChoice.initial(machine), model=ModelRef(name="llama3-8b"))
    view = demo.demo_recommendation()
    plan, notes = build_plan(LaunchChoice(cpu=False), state, view, machine)
    assert plan is view.rec.plan and notes == []
    core = view.rec.recommendation.model_copy(update={"fits": False})
    unfit = replace(view, rec=view.rec.model_copy(update={"recommendation": core}))
    with pytest.raises(UserError, match="does not fit"):
        build_plan(LaunchChoice(cpu=False), state, unfit, machine)
    with pytest.raises(UserError, match="no GPU plan yet"):
        build_plan(LaunchChoice(cpu=False), state, None, machine)




def test_launch_form_refuses_a_script_line_it_cannot_split(tmp_path, monkeypatch):
    """An unclosed quote in the script field is the user's typo: a UserError the screen shows, not a ValueError."""
    from advisor.errors import UserError
    from tui.launching import LaunchChoice, build_plan, build_target

    (tmp_path / "train.py").write_text("print('never run')\n")
    monkeypatch.chdir(tmp_path)
    state = WizardState(model=ModelRef(name="mini-transformer"))
    plan, _ = build_plan(LaunchChoice(), state)
    assert build_target(LaunchChoice(target="script", script="train.py --name 'a b'"), plan).args == ["--name", "a b"]
    with pytest.raises(UserError, match="close the quote"):
        build_target(LaunchChoice(target="script", script="train.py --name 'a b"), plan)
