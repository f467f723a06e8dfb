"""The rule and decision-tree cases of tests/cases/*.toml, run by one parametrized test.

Each case is `advise` flags plus what must come out: the path of node ids, the strategy, the
rules that fire (and must not), values anywhere in the JSON, the alternatives that must fit, or
the error message (exit 2). Every fitting case must also reproduce its own plan from the
`advise launch` command it prints. Cases are data so that adding one needs no code.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path

import pytest

from advisor.calibration import default_calibration
from advisor.catalog import TRACED_JSON
from advisor.errors import UserError
from advisor.hardware import Machine

CASES_DIR = Path(__file__).with_name("cases")


def _load_cases() -> list[dict]:
    out = []
    for path in sorted(CASES_DIR.glob("*.toml")):
        for i, case in enumerate(tomllib.loads(path.read_text())["case"]):
            case["_id"] = f"{path.stem}:{i}:{case['name']}"
            out.append(case)
    return out


CASES = _load_cases()


def _cnn_traces() -> bool:
    try:
        return "resnet50" in json.loads(TRACED_JSON.read_text())
    except (OSError, ValueError):
        return False


def _parse(argv: list[str]):
    from cli.main import build_parser

    return build_parser("recommend").parse_args(argv)


def _recommend(argv: list[str], cpu_cores: int):
    from cli.flags import request_from_namespace
    from rules.api import recommend

    return recommend(request_from_namespace(_parse(argv)), machine=Machine(cpu_cores=cpu_cores),
                     calibration=default_calibration())


def _get(data, path: str):
    for tok in re.findall(r"\[[^\]]*\]|[^.\[\]]+", path):
        if tok.startswith("["):
            key, _, want = tok[1:-1].partition("=")
            data = next(x for x in data if str(x.get(key)) == want)
        elif isinstance(data, list):
            data = data[int(tok)]
        else:
            data = data[tok]
    return data


def _check_value(path: str, actual, want) -> None:
    if isinstance(want, dict):
        op, value = want["op"], want.get("value")
        ok = {"==": lambda: actual == value, "!=": lambda: actual != value,
              "<": lambda: actual is not None and actual < value, "<=": lambda: actual is not None and actual <= value,
              ">": lambda: actual is not None and actual > value, ">=": lambda: actual is not None and actual >= value,
              "missing": lambda: actual is None, "in": lambda: actual in value,
              "contains": lambda: isinstance(actual, str) and all(v in actual for v in
                                                                 ([value] if isinstance(value, str) else value)),
              "between": lambda: actual is not None and value[0] <= actual <= value[1],
              # within a factor of a published value (tests/cases/lr.toml: the recipe's source is named)
              "within": lambda: actual is not None and value / want["factor"] <= actual <= value * want["factor"]}[op]()
        assert ok, (f"{path}: {actual!r} is not {op} {value!r}" + (f" x/ {want['factor']} ({want.get('source')})"
                                                                    if op == "within" else ""))
    elif isinstance(want, float):
        assert actual == pytest.approx(want, rel=1e-6), f"{path}: {actual!r} != {want!r}"
    else:
        assert actual == want, f"{path}: {actual!r} != {want!r}"


@pytest.mark.parametrize("case", CASES, ids=[c["_id"] for c in CASES])
def test_case(case, capsys):
    if case.get("needs") == "cnn-traces" and not _cnn_traces():
        pytest.skip(f"{TRACED_JSON} has no CNN profiles yet (benchmarks/calibration/trace_catalog.py writes them)")
    argv = shlex.split(case["args"])
    cores = case.get("cpu_cores", 32)
    if "error" in case:
        with pytest.raises((UserError, SystemExit)) as info:
            _recommend(argv, cores)
        if info.type is SystemExit:  # argparse: exit 2 with the message on stderr
            assert info.value.code == 2
            message = capsys.readouterr().err
        else:
            message = info.value.message()
        assert case["error"] in message, message
        return

    rec = _recommend(argv, cores)
    data = rec.model_dump(mode="json")
    r = rec.recommendation
    exp = case.get("expect", {})
    why = "\n".join(f"{s.node}: {s.answer}" for s in rec.decision_path)
    if "path" in exp:
        assert rec.path == exp["path"], why
    for key in ("strategy", "gpus", "precision", "fits"):
        if key in exp:
            assert getattr(r, key) == exp[key], f"{key}: {getattr(r, key)!r}\n{why}"
    fired = set(rec.fired)
    missing = set(exp.get("fired", [])) - fired
    assert not missing, f"expected to fire: {sorted(missing)}; fired: {sorted(fired)}"
    wrong = set(exp.get("not_fired", [])) & fired
    assert not wrong, f"must not fire: {sorted(wrong)}"
    for path, want in exp.get("values", {}).items():
        _check_value(path, _get(data, path), want)
    for flag in exp.get("command_lacks", []):  # a flag that does not apply is not copied into the command
        assert flag not in shlex.split(r.command), r.command
    for flag in exp.get("command_has", []):
        assert flag in shlex.split(r.command), r.command
    if exp.get("no_plain_amp_fit"):
        # the standard setup (autocast, AdamW, full fine-tune, no compromise) must not be what fits
        assert not (r.fits and r.precision in ("bf16", "fp16") and r.optimizer == "adamw" and r.lora_rank is None
                    and r.compromise is None)
    alts = rec.alternatives
    for prefix in exp.get("alternatives_fit", []):
        assert any(a.name.startswith(prefix) and a.fits for a in alts), f"no fitting alternative '{prefix}': {[a.name for a in alts]}"
        fitting = [a for a in alts if a.name.startswith(prefix) and a.fits]
        assert all(a.device_gib is None or a.device_gib <= rec.estimate.hardware.memory_gib for a in fitting)
        assert all(a.command for a in fitting if a.kind == "compromise")
    for prefix in exp.get("alternatives_not_fit", []):
        same = [a for a in alts if a.name.startswith(prefix)]
        assert same and not any(a.fits for a in same), f"'{prefix}' should be listed as not fitting: {same}"
    if "alternatives_any" in exp:
        assert any(a.name.startswith(tuple(exp["alternatives_any"])) for a in alts), [a.name for a in alts]

    # invariants of every recommendation
    assert rec.path[0] == "A" and set(rec.path) <= set("ABCDEFGHIJ")
    assert r.micro_batch * r.grad_accum * r.gpus == r.global_batch
    assert rec.plan.world_size == r.gpus and rec.plan.global_batch == r.global_batch
    if r.fits:
        assert rec.estimate.memory.fits
        again = _recommend(shlex.split(r.command)[2:], cores)
        assert again.plan == rec.plan, f"`{r.command}` does not reproduce the plan"
    else:
        assert rec.alternatives, "a plan that does not fit must come with alternatives"
        assert "fit.none" in fired


def test_every_rule_has_a_case():
    from rules.engine import load_rules

    expected = {rid for c in CASES for rid in c.get("expect", {}).get("fired", [])}
    missing = sorted(r.id for r in load_rules() if r.id not in expected)
    assert not missing, f"rules without a case that expects them to fire: {missing}"


def test_every_node_is_on_some_path():
    paths = {n for c in CASES for n in c.get("expect", {}).get("path", [])}
    assert paths == set("ABCDEFGHIJ"), f"nodes no case walks through: {sorted(set('ABCDEFGHIJ') - paths)}"


@pytest.mark.parametrize("rule_id", [r.id for r in __import__("rules.engine", fromlist=["load_rules"]).load_rules()])
def test_rule_example_fires(rule_id):
    """`advise rules ID` shows an example command; it must really fire the rule."""
    from rules.engine import get_rule

    rule = get_rule(rule_id)
    argv = shlex.split(rule.example)
    assert argv[0] == "advise"
    if "resnet" in rule.example and not _cnn_traces():
        pytest.skip("needs CNN trace profiles")
    rec = _recommend(argv[1:], 32)
    assert rule_id in rec.fired, f"`{rule.example}` does not fire {rule_id}: {rec.fired}"
