"""Issue 38, part 2: what the three ranking changes do to the practitioner panel's requests and the
issue's examples. Prints one line per request: GPUs, strategy, compromise (numerical-risk class) and
host RAM per node. Run from a checkout (PYTHONPATH=.) before and after the change and diff the two.

    PYTHONPATH=. python benchmarks/notebook/2026-12-07-ladder-ranking/compare.py > after.txt
"""

from __future__ import annotations

import shlex
import sys
import tomllib
from pathlib import Path

from advisor.calibration import default_calibration
from advisor.errors import UserError
from advisor.hardware import Machine
from cli.flags import request_from_namespace
from cli.main import build_parser
from rules.api import recommend

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = [
    "--model llama3-8b --gpu H200 --gpus 1 --seq-len 2048 --no-cpu-offload",
    "--model llama3-8b --gpu H200 --gpus 1 --seq-len 2048 --dataset-size 52000 --epochs 3 --deadline 12h --no-cpu-offload",
    "--model llama3-8b --gpu H200 --gpus 1 --seq-len 2048 --dataset-size 52000 --epochs 3 --deadline 10h --no-cpu-offload",
    "--model gpt2-medium --gpu V100 --gpus 8 --dataset-size 1000000 --epochs 1",
    "--model bert-large --gpu A100-80GB --gpus 8 --dataset-size 1000000 --epochs 3 --deadline 2h",
    "--model resnet50 --gpu RTX-3090 --gpus 8 --dataset-size 1281167 --epochs 90 --deadline 24h",
    "--model llama3-70b --gpu A100-80GB --gpus 8 --seq-len 2048",
]


def line(args: str) -> str:
    try:
        ns = build_parser("recommend").parse_args(shlex.split(args))
        rec = recommend(request_from_namespace(ns), machine=Machine(cpu_cores=64), calibration=default_calibration())
    except SystemExit:
        return f"{args}\n    refused (a flag this checkout does not know)"
    except UserError as exc:
        return f"{args}\n    refused: {exc.message().splitlines()[0]}"
    r, m = rec.recommendation, rec.estimate.memory
    comp = f"{r.compromise} ({getattr(r, 'numerical_risk', None) or '-'})" if r.compromise else "standard"
    host = f", host {getattr(m, 'host_node_gib', 0.0) or m.host_gib:.0f} GiB/node" if m.host_gib else ""
    t = f", {r.time_to_train_h:.2f} h" if r.time_to_train_h else ""
    return f"{args}\n    {r.gpus}x {r.strategy}, {comp}{t}{host}"


def main() -> None:
    panel = tomllib.loads((ROOT / "tests/cases/practitioner/panel.toml").read_text())["request"]
    for args in EXAMPLES + [q["args"] for q in panel]:
        print(line(args))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
