"""The table of what combines (advisor.setup.constraints): a refused and an allowed case per row, as
data (tests/cases/constraints/constraints.toml), and the one-line refusal each row makes."""

from __future__ import annotations

import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from advisor.config import Optimizer, Precision, PureBf16Update, Strategy
from advisor.errors import UserError
from advisor.setup.constraints import BY_ID, CONSTRAINTS, Combo, check, refusal

CASES = tomllib.loads((Path(__file__).with_name("cases") / "constraints" / "constraints.toml").read_text())["case"]
ENUMS = {"strategy": Strategy, "precision": Precision, "optimizer": Optimizer, "pure_bf16_update": PureBf16Update}


def combo(d: dict) -> Combo:
    return Combo(**{k: ENUMS[k](v) if k in ENUMS else v for k, v in d.items()})


def test_every_row_has_its_cases_and_every_case_a_row():
    assert sorted(c["id"] for c in CASES) == sorted(BY_ID)
    assert len(BY_ID) == len(CONSTRAINTS)  # ids are unique


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_the_row_refuses_its_fail_case_and_allows_its_pass_case(case):
    launch = case.get("launch", False)
    row = refusal(combo(case["refused"]), launch=launch)
    assert row is not None and row.id == case["id"]
    assert not BY_ID[case["id"]].when(combo(case["allowed"]))
    assert refusal(combo(case["allowed"]), launch=launch) is None
    with pytest.raises(UserError) as err:
        check(combo(case["refused"]), launch=launch)
    assert "\n" not in err.value.what and err.value.fix  # one line, with the fix


def test_unknown_fields_never_refuse():
    assert refusal(Combo(), launch=True) is None
    assert {f.name for f in fields(Combo)} >= {"strategy", "precision", "optimizer", "ranks", "cpu"}


def test_launch_only_rows_wait_for_the_launch():
    c = Combo(lora_rank=16, precision=Precision.fp32)
    assert refusal(c) is None and refusal(c, launch=True).id == "lora.autocast"


def test_advise_rules_lists_and_explains_the_rows(capsys):
    import json

    from cli.main import main

    assert main(["rules", "--json"]) == 0
    listed = [c["id"] for c in json.loads(capsys.readouterr().out)["constraints"]]
    assert listed == [c.id for c in CONSTRAINTS]
    assert main(["rules", "offload.not-cpu"]) == 0
    out = capsys.readouterr().out
    assert BY_ID["offload.not-cpu"].fix.split(",")[0] in " ".join(out.split())
