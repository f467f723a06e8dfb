"""The wizard's plain parts: field parsers, monitor readers, view helpers.

No app runs here (what the first screen imports is checked in test_import_hygiene.py).
"""

from __future__ import annotations

import json

import pytest

from advisor.plan import ModelRef
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
    kw = Workload(batch_size=32, dataset_size=100, epochs=1, deadline_h=2).rules_kwargs()
    assert kw == {"batch_size": 32, "dataset_size": 100, "epochs": 1.0, "deadline_h": 2.0, "lr_scaling": "linear"}


def test_hardware_choice_detected_planned_and_named():
    gpus, cpu = demo.gpu_machine(4), demo.cpu_machine()
    assert HardwareChoice.initial(gpus).mode == "detected"
    planned = HardwareChoice.initial(cpu)
    assert (planned.mode, planned.gpus) == ("planned", 8)
    named = HardwareChoice.initial(gpus, gpu="h100", gpus=2)
    assert (named.mode, named.gpu, named.gpus) == ("planned", "H100-SXM", 2)
    assert HardwareChoice.initial(gpus).resolve(gpus).total_gpus == 4
    assert HardwareChoice.initial(gpus).rules_kwargs() == {"gpu": None, "gpus": None, "nodes": 1}
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
    fits = bar_cells({"weights_gib": 10, "optimizer_gib": 10}, 80, 40)
    assert len(fits) == 40 and all(style != "red" for _, style in fits)
    over = bar_cells({"weights_gib": 100, "optimizer_gib": 60}, 80, 40)
    assert len(over) == 40
    assert ("┃", "bold white") in over and any(style == "red" for _, style in over)


def test_helpers_format_counts_hours_and_gpu_counts():
    assert compute.human_count(8_030_261_248) == "8.03B"
    assert compute.human_count(124_439_808) == "124M"
    assert compute.hours_text(None) == "-" and compute.hours_text(0.5) == "30 min" and compute.hours_text(72) == "3.0 days"
    assert compute.gpu_counts(8) == [1, 2, 4, 8] and compute.gpu_counts(6) == [1, 2, 4, 6]


def test_catalog_rows_have_sizes():
    rows = compute.catalog_rows()
    assert {"llama3-8b", "mini-transformer", "resnet50"} <= {r.name for r in rows}
    assert all(r.params > 0 for r in rows)


def test_recommend_wraps_the_rules_for_the_wizards_state():
    state = WizardState(hardware=HardwareChoice.initial(demo.gpu_machine(4)), model=ModelRef(name="llama3-8b"),
                        workload=Workload(dataset_size=100_000, epochs=1))
    view = compute.recommend(state, demo.gpu_machine(4))
    assert view.rec["gpus"] >= 1 and view.command.startswith("advise launch")
    assert view.plan is not None and view.plan.model.name == "llama3-8b"
    if view.source == "rules":
        assert [s["node"] for s in view.data["decision_path"]][0] == "A"
        assert view.scaling and any(r.get("chosen") for r in view.scaling)
    assert {n.id for n in view.tree} == set("ABCDEFGHIJ")


def test_without_the_rules_layer_the_wizard_still_estimates(monkeypatch):
    """An install without rules/ shows one default configuration's estimate, and says it is not advice."""
    monkeypatch.setattr(compute, "rules_available", lambda: False)
    machine = demo.gpu_machine(2)
    state = WizardState(hardware=HardwareChoice.initial(machine), model=ModelRef(name="gpt2"),
                        workload=Workload(batch_size=16, dataset_size=10_000, epochs=1))
    p = compute.preview(state, machine)
    assert p.source == "estimate" and p.global_batch == 16 and p.time_to_train_h is not None
    view = compute.recommend(state, machine)
    assert view.source == "estimate" and "not advice" in view.data["warnings"][0]
    assert [r["gpus"] for r in view.scaling] == [1, 2] and view.scaling[0]["chosen"]
    assert view.plan.global_batch == 16
