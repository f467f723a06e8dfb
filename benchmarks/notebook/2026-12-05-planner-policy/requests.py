"""The practitioner's panel of issue 27, answered (NOTE.md's table).

The requests and the expert's bounds are tests/cases/practitioner/panel.toml, judged by
tests/test_practitioner_panel.py; this prints the answers as NOTE.md tables them, through the same
code path (`advise --json`'s parser, Request and recommend, 64 host cores, the default calibration).

    .venv/bin/python benchmarks/notebook/2026-12-05-planner-policy/requests.py   (from the checkout root)
"""

from __future__ import annotations

import json
import shlex
import sys
import tomllib
from pathlib import Path

PANEL = Path(__file__).resolve().parents[3] / "tests" / "cases" / "practitioner" / "panel.toml"


def main() -> int:
    from advisor.calibration import default_calibration
    from advisor.hardware import Machine
    from cli.flags import request_from_namespace
    from cli.main import build_parser
    from rules.api import recommend

    print("| # | request | answer | lr (recipe) | policy |")
    print("|---|---|---|---|---|")
    for i, case in enumerate(tomllib.loads(PANEL.read_text())["request"], 1):
        args = case["args"]
        req = request_from_namespace(build_parser("recommend").parse_args(shlex.split(args) + ["--json"]))
        rec = recommend(req, machine=Machine(cpu_cores=64), calibration=default_calibration(), assume_if_none=True)
        data, r = json.loads(rec.to_json()), rec.recommendation
        exp = case.get("expect", {})
        t = f", {r.time_to_train_h:.2f} h" if r.time_to_train_h is not None else ""
        comp = f", **{r.compromise}**" if r.compromise else ""
        ans = (f"{r.strategy} x{r.gpus}, {r.micro_batch} x {r.grad_accum} = {r.global_batch}"
               f"{', ckpt' if r.grad_ckpt else ''}{', compile' if r.compile else ''}{comp}, "
               f"{rec.estimate.throughput.samples_per_s:,.1f}/s{t}" if r.fits else "nothing fits")
        want = exp.get("lr_adapter" if r.lora_rank else "lr")
        lr = f"{r.lr:.3g} ({want:g})" if want else f"{r.lr:.3g}"
        policy = (r.compromise_rule or (data.get("policy") or {}).get("rule", "")).replace("|", "/")
        held = " (held out)" if case.get("held_out") else ""
        print(f"| {i} | {case['name']}{held}: `{args}` | {ans} | {lr} | {policy} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
