"""fsdp-keep against plain FSDP, as estimated and as the runtime runs plain FSDP (no GPU needed).

    python -m benchmarks.notebook.2026-12-05-fsdp-keep.plain_vs_keep

For each request: the best plan the planner finds with --strategy fsdp (plain FSDP as estimated: a
reduce-scatter of fp32 gradients every micro-batch), with --strategy fsdp-keep, and plain FSDP again
with its communication as Accelerate runs it (``no_sync`` -> ``set_requires_gradient_sync(False)``:
two all-gathers per unit and micro-batch, one reduce-scatter of bf16 gradients per step). The last
column changes only the communication, not the memory (the unsharded gradients plain FSDP really holds
are not added), so it is an upper bound on plain FSDP's speed. Nothing here is written into the
estimator: it measures how much of fsdp-keep's gain is the kept weights and how much is plain FSDP's
estimate charging more than the runtime does (docs/design.md, "Strategies").
"""

from __future__ import annotations

from unittest import mock

import advisor.throughput as throughput
from advisor.calibration import default_calibration
from advisor.comm import _breakdown, collective, straggler_s
from advisor.errors import UserError
from advisor.hardware import Machine
from cli.flags import request_from_namespace
from cli.main import build_parser
from rules.api import recommend

CASES = [
    "--model llama3-8b --gpu A100-PCIE-80GB --gpus 8 --seq-len 2048",
    "--model llama3-8b --gpu A100-80GB --gpus 8 --interconnect pcie --seq-len 2048",
    "--model llama3-8b --gpu L40S --gpus 8 --seq-len 2048",
    "--model llama3-8b --gpu A100-80GB --gpus 8 --seq-len 2048",
    "--model llama3.2-3b --gpu L40S --gpus 8 --seq-len 2048",
    "--model llama3.2-3b --gpu RTX-4090 --gpus 8 --seq-len 2048",
]
WORK = "--dataset-size 100000 --epochs 1"


def fsdp_as_run(param_bytes, grad_bytes, units, topo, micro_s, grad_accum, k, *, hybrid=False, decoded_input=False):
    """Plain FSDP under Accelerate's accumulate: gathers every micro-batch, one bf16 reduce-scatter a step."""
    units = max(1, units)
    ag = collective("all-gather", "FSDP unit gather", param_bytes / units, topo, k)
    rs = collective("reduce-scatter", "FSDP unit reduce-scatter", grad_bytes / 2 / units, topo, k)  # fp32 -> bf16
    fwd_u, bwd_u = micro_s / 3.0 / units, micro_s * 2.0 / 3.0 / units
    fwd = ag.seconds + (units - 1) * max(0.0, ag.seconds - fwd_u)
    bwd_no_sync = (units - 1) * max(0.0, ag.seconds - bwd_u)
    bwd_last = (units - 1) * max(0.0, ag.seconds + rs.seconds - bwd_u) + rs.seconds
    exposed = fwd * grad_accum + bwd_no_sync * (grad_accum - 1) + bwd_last
    colls = [ag.model_copy(update={"count": 2 * units * grad_accum}), rs.model_copy(update={"count": units})]
    out = _breakdown("fsdp", topo, k, colls, (2 * ag.seconds * grad_accum + rs.seconds) * units, exposed)
    out.sync_s = straggler_s(micro_s * grad_accum, topo.per_node * topo.nodes, grad_accum, k, decoded_input=decoded_input)
    return out


def best(argv: str):
    req = request_from_namespace(build_parser("recommend").parse_args(argv.split()))
    try:
        rec = recommend(req, machine=Machine(cpu_cores=64), calibration=default_calibration())
    except UserError as err:
        return f"refused: {err.what[:90]}"
    r, e = rec.recommendation, rec.estimate
    if not r.fits:
        return "does not fit"
    return (f"{r.gpus}x {r.micro_batch}x{r.grad_accum}{' ckpt' if r.grad_ckpt else ''}{' compile' if r.compile else ''}"
            f" {e.throughput.samples_per_s:.2f}/s {e.memory.device_gib:.1f} GiB"
            + (f" (COMPROMISE {r.compromise}: the standard setup does not fit)" if r.compromise else ""))


def main() -> None:
    for case in CASES:
        print(case)
        for label, pin in (("fsdp (as estimated)", "fsdp"), ("fsdp-keep", "fsdp-keep")):
            print(f"  {label:28s} {best(f'{case} {WORK} --strategy {pin}')}")
        with mock.patch.object(throughput, "fsdp_comm", fsdp_as_run):
            print(f"  {'fsdp (comm as run, bound)':28s} {best(f'{case} {WORK} --strategy fsdp')}")


if __name__ == "__main__":
    main()
