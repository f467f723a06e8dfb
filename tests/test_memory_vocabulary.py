"""Issue 31: JSON and text name memory parts the same way (advisor.memory.PART_KEYS / part_label).

Every part label a user reads (the `advise estimate` table, the `advise` report's legend, ``peak_parts``,
the wizard's memory bar, the standard setup's cause) is the words of a JSON key of ``memory`` (or of
``memory.detail``), and that key holds the number printed beside the label."""

from __future__ import annotations

import json
import re

import pytest

from advisor.catalog import catalog_model
from advisor.config import Optimizer, Precision, Strategy, TrainConfig
from advisor.estimate import estimate
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.memory import PART_KEYS, part_key, part_label
from cli.main import main

CONFIGS = [dict(), dict(grad_accum=4), dict(precision=Precision.fp32), dict(precision=Precision.pure_bf16),
           dict(optimizer=Optimizer.adamw_8bit), dict(optimizer_in_backward=True),
           dict(cpu_offload=True, strategy=Strategy.fsdp, grad_ckpt=True), dict(lora_rank=8),
           dict(lora_rank=8, quantize_base="4bit"), dict(strategy=Strategy.ddp),
           dict(strategy=Strategy.fsdp)]


def _value(memory: dict, key: str) -> float:
    section, _, name = key.rpartition(".")
    return (memory[section] if section else memory)[name]


@pytest.mark.parametrize("cfg", CONFIGS)
def test_every_peak_part_is_named_after_the_json_key_that_holds_its_value(cfg):
    gpus = 4 if cfg.get("strategy") in (Strategy.ddp, Strategy.fsdp) else 1
    model = "gpt2" if cfg.get("strategy") is Strategy.ddp else "llama3-8b"
    est = estimate(catalog_model(model), TrainConfig(micro_batch=1, seq_len=1024, **cfg),
                   HardwareSpec(gpu=get_gpu("H200"), gpus_per_node=gpus))
    memory = json.loads(est.model_dump_json())["memory"]
    assert memory["peak_parts"]
    for part in memory["peak_parts"]:
        assert part["key"] in PART_KEYS and part["name"] == part_label(part["key"]), part
        assert part_key(part["name"]) == part["key"]
        assert _value(memory, part["key"]) == pytest.approx(part["gib"]), part


def test_small_models_show_the_gradient_moment_under_its_key():
    est = estimate(catalog_model("resnet50"), TrainConfig(micro_batch=1, precision=Precision.fp32),
                   HardwareSpec(gpu=get_gpu("H200")))
    keys = {p.key for p in est.memory.peak_parts}
    assert keys <= set(PART_KEYS)


def test_every_label_is_its_keys_words():
    for key in PART_KEYS:
        label = part_label(key)
        assert part_key(label) == key
        assert label.lower().replace(" ", "_") + "_gib" == key.removeprefix("detail.")
    with pytest.raises(KeyError):
        part_key("optimizer states")


def test_the_wizards_memory_bar_uses_the_same_labels():
    from tui.widgets.memory_bar import PARTS

    for key, label, _ in PARTS:
        assert part_key(label) == key


def _table_rows(text: str) -> list[tuple[str, float]]:
    """The `advise estimate` memory table's (label, GiB) rows, up to the peak's row."""
    rows, inside = [], False
    for line in text.splitlines():
        if "memory per GPU at the peak" in line:
            inside = True
            continue
        if inside and "peak allocated" in line:
            break
        m = re.match(r"^\s*([A-Za-z][A-Za-z ]*?)\s*[│|]\s*([\d.]+)\s*$", line)
        if inside and m:
            rows.append((m.group(1), float(m.group(2))))
    return rows


@pytest.mark.parametrize("argv", [["--model", "llama3-8b", "--gpu", "H200", "--grad-accum", "4"],
                                  ["--model", "gpt2", "--gpu", "H100", "--gpus", "2", "--strategy", "ddp"]])
def test_the_estimate_report_matches_its_json_line_by_line(capsys, monkeypatch, argv):
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["estimate", *argv, "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert main(["estimate", *argv]) == 0
    rows = _table_rows(capsys.readouterr().out)
    assert len(rows) == len(memory["peak_parts"]) and rows
    for label, gib in rows:
        assert _value(memory, part_key(label)) == pytest.approx(gib, abs=0.006), (label, gib)


def test_the_recommendation_report_names_parts_as_its_json(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    argv = ["--model", "llama3-8b", "--gpu", "A100-80GB", "--seq-len", "2048"]
    assert main([*argv, "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)["estimate"]["memory"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for part in memory["peak_parts"]:
        assert f"{part['name']} {part['gib']:.1f}" in out, part


TOP_PARTS = ("weights_gib", "gradients_gib", "optimizer_gib", "autocast_copies_gib", "activations_gib", "other_gib")


@pytest.mark.parametrize("model", ["gpt2", "llama3-8b", "resnet50"])
@pytest.mark.parametrize("cfg", CONFIGS + [dict(grad_ckpt=True), dict(compile=True), dict(strategy=Strategy.fsdp_keep,
                                                                                          grad_accum=4)])
def test_the_json_parts_sum_to_the_peak(model, cfg):
    """Issue 40: activations_gib included the autocast copies autocast_copies_gib counted too, and gradients_gib
    the whole buffer at a peak that held none: the top-level parts are the peak moment's, and sum to it."""
    if model == "resnet50" and (cfg.get("lora_rank") or cfg.get("strategy") in (Strategy.fsdp, Strategy.fsdp_keep)
                                or cfg.get("cpu_offload")):
        pytest.skip("LoRA and FSDP units are for transformers")
    gpus = 4 if cfg.get("strategy") in (Strategy.ddp, Strategy.fsdp, Strategy.fsdp_keep) else 1
    est = estimate(catalog_model(model), TrainConfig(micro_batch=2, seq_len=None if model == "resnet50" else 1024, **cfg),
                   HardwareSpec(gpu=get_gpu("H200"), gpus_per_node=gpus))
    memory = json.loads(est.model_dump_json())["memory"]
    assert all(memory[k] >= 0 for k in TOP_PARTS), memory
    assert sum(memory[k] for k in TOP_PARTS) == pytest.approx(memory["peak_gib"], rel=1e-9, abs=1e-9)
    assert sum(p["gib"] for p in memory["peak_parts"]) == pytest.approx(memory["peak_gib"], rel=1e-9)
