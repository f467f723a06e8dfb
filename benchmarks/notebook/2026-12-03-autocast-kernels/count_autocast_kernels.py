"""Kernels of one eager training step under autocast (bf16) over the pure-bf16 count, per users' module.

    python -m benchmarks.notebook.2026-12-03-autocast-kernels.count_autocast_kernels

advisor.tracer counts a traced module's kernels (aten ops that launch, forward + backward, loss
included) once, on its pure-bf16 step. Under autocast every linear/conv input and weight is cast to
bf16 first (aten._to_copy, a kernel each) and some ops run in fp32 with casts around them, so the
same model launches more. This prints both counts for the users' modules of
benchmarks/calibration/models/ (advisor.tracer.trace_step, the tracer's own counter, on meta tensors) and
their ratio; advisor/throughput.py's AUTOCAST_KERNELS is the median, rounded.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

import torch

from advisor.tracer import load_factory, trace_step

MODULES = {  # FILE:FACTORY -> (per-sample input shape, dtype, loss), as in h200-users.jsonl
    "encoder_classifier.py:build": ((512,), torch.int64, "ce"),
    "nanogpt.py:build": ((1024,), torch.int64, "ce"),
    "unet.py:build": ((3, 256, 256), torch.float32, "mse"),
    "convnext.py:build": ((3, 224, 224), torch.float32, "ce"),
}


def counts(spec: str, shape, dtype, loss) -> tuple[int, int]:
    factory = load_factory(str(ROOT / "benchmarks" / "calibration" / "models" / spec))

    def make_inputs(b: int):
        if dtype.is_floating_point:
            return (torch.randn(b, *shape, device="meta", dtype=dtype),)
        return (torch.zeros(b, *shape, device="meta", dtype=dtype),)

    out = []
    for precision in ("bf16", "pure-bf16"):  # pure-bf16 last: it casts the module
        with torch.device("meta"):
            m = factory()
        out.append(trace_step(m, make_inputs, 2, precision, None, loss, True).kernels)
    return out[0], out[1]


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    ratios = []
    for spec, (shape, dtype, loss) in MODULES.items():
        amp, pure = counts(spec, shape, dtype, loss)
        ratios.append(amp / pure)
        print(f"{spec}: autocast {amp}, pure-bf16 {pure}, ratio {amp / pure:.2f}")
    print(f"median ratio {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
