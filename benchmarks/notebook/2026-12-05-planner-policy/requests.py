"""The practitioner's requests of issue 27, answered by the planner and policy (NOTE.md's table).

    .venv/bin/python benchmarks/notebook/2026-12-05-planner-policy/requests.py   (from the checkout root)
"""

from __future__ import annotations

import shlex
import sys

REQUESTS = [
    "--model llama3-8b",
    "--model llama3-8b --gpu H200 --gpus 1",
    "--model llama3-8b --gpu A100-PCIE-80GB --gpus 8",
    "--model llama3-8b --gpu A100-PCIE-80GB --gpus 8 --dataset-size 52000 --epochs 3 --deadline 8.5h",
    "--model llama3-8b --gpu A100-PCIE-80GB --gpus 8 --dataset-size 52000 --epochs 3 --deadline 4.3h",
    "--model mistral-7b --gpu L40S --gpus 8",
    "--model mistral-7b --gpu L40S --gpus 8 --dataset-size 52000 --epochs 3 --deadline 8.5h",
    "--model mistral-7b --gpu L40S --gpus 8 --dataset-size 52000 --epochs 3 --deadline 4.3h",
    "--model llama3-8b --gpu H100 --gpus 8 --nodes 2 --dataset-size 1000000 --epochs 1",
    "--model llama3-8b --gpu H100 --gpus 8 --nodes 2 --dataset-size 1000000 --epochs 1 --deadline 12h",
    "--model resnet50 --gpu A100-80GB --gpus 8 --dataset-size 1281167 --epochs 90",
    "--model resnet50 --gpu A100-80GB --gpus 8 --dataset-size 1281167 --epochs 90 --deadline 24h",
    "--model resnet50 --gpu A100-80GB --gpus 8 --dataset-size 1281167 --epochs 90 --deadline 6h",
    "--model resnet50 --gpu RTX-4090 --gpus 4 --dataset-size 1281167 --epochs 90 --deadline 2d",
    "--model gpt2 --gpu A100-80GB --gpus 8 --dataset-size 8000000 --epochs 1",
    "--model gpt2 --gpu A100-80GB --gpus 8 --batch-size 512 --dataset-size 8000000 --epochs 1 --deadline 10h",
    "--model bert-large --gpu A100-80GB --gpus 8 --batch-size 256 --dataset-size 10000000 --epochs 1",
    "--model bert-base --gpu H100 --gpus 8 --dataset-size 120000 --epochs 3 --deadline 1h",
    "--model llama3-70b --gpu H100 --gpus 8 --nodes 2 --dataset-size 52000 --epochs 3",
    "--model llama3-8b --gpu RTX-4090 --gpus 1",
]


def main() -> int:
    from advisor.hardware import Machine
    from cli.flags import request_from_namespace
    from cli.main import build_parser
    from rules.api import recommend

    print("| request | answer | policy |")
    print("|---|---|---|")
    for line in REQUESTS:
        req = request_from_namespace(build_parser("recommend").parse_args(shlex.split(line)))
        rec = recommend(req, machine=Machine(cpu_cores=64), assume_if_none=True)
        r = rec.recommendation
        t = f", {r.time_to_train_h:.2f} h" if r.time_to_train_h is not None else ""
        comp = f", compromise {r.compromise}" if r.compromise else ""
        ans = (f"{r.strategy} x{r.gpus}, mb {r.micro_batch} x acc {r.grad_accum} = {r.global_batch}"
               f"{', ckpt' if r.grad_ckpt else ''}{', compile' if r.compile else ''}{comp}, "
               f"{rec.estimate.throughput.samples_per_s:,.1f}/s{t}")
        print(f"| `{line}` | {ans} | {rec.policy.rule if rec.policy else ''} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
