"""Bandwidth that LayerNorm's kernels and PyTorch's legacy strided kernels reach in H200 kernel profiles.

    python -m benchmarks.notebook.2026-12-04-kernel-profiles.census_vs_profile            # the rows profiled with these kernels
    python -m benchmarks.notebook.2026-12-04-kernel-profiles.census_vs_profile --only enc-bf16-128

For each profiled row (``benchmarks/notebook/2026-12-04-kernel-profiles/h200-profiles-2026-12-04*.json``, written by
``profile_users_rows.py``) that is also a row of ``benchmarks.calibration.rows.all_rows()``, the census's bytes of
that micro-step (``advisor.step_work``: ``norm_bytes``, ``permuted_bytes``) set beside the profile's
time in the matching kernels (the profile keeps each step's 30 dearest kernels, so the times are lower
bounds and the rates upper bounds):
* LayerNorm: ``vectorized_layer_norm_kernel``, ``layer_norm_grad_input``, ``GammaBetaBackward``;
* mixed memory orders: ``at::native::elementwise_kernel<...>`` (``launch_legacy_kernel``: the
  OffsetCalculator path TensorIterator takes when it cannot iterate contiguously; the vectorized and
  unrolled kernels are the contiguous paths). It also runs ops that are non-contiguous only by a
  broadcast operand, which the census leaves in ``bytes``: where those are many (ConvNeXt's layer
  scale, Llama's rotary tables) the time is too high and the rate too low.
Eager rows only. Rates are printed in TB/s and as a fraction of the H200's datasheet bandwidth (``advisor.gpus``), the
unit of ``Calibration.rate_efficiency``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path


import benchmarks.calibration.rows as fc
from advisor.calibration import default_calibration
from advisor.gpus import get_gpu
from advisor.step_work import step_work

RESULTS = Path(__file__).resolve().parent  # the profiles sit beside this script
KINDS = {"norm_bytes": re.compile(r"layer_norm|GammaBetaBackward"),
         "permuted_bytes": re.compile(r"^void at::native::elementwise_kernel<")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated row ids")
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))
    profiles = {p["id"]: (f.name, p) for f in sorted(RESULTS.glob("h200-profiles-2026-12-04*.json"))
                for p in json.loads(f.read_text())}
    _, rows = fc.all_rows()
    cal = default_calibration()
    bw = get_gpu("H200").mem_bw
    print("| row | profile | kind | census GB | kernels ms | TB/s | of bandwidth |")
    print("|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        if r["id"] not in profiles or r.get("compile") or (only and r["id"] not in only):
            continue  # compiled steps run inductor's kernels: the census's kinds are not theirs
        name, prof = profiles[r["id"]]
        work = step_work(fc.spec_of(r), fc.config_of(r), cal)
        for kind, pattern in KINDS.items():
            nbytes = getattr(work, kind)
            ms = sum(k["ms"] for k in prof["top"] if pattern.search(k["name"]))
            if nbytes and ms:
                rate = nbytes / (ms * 1e-3)
                print(f"| {r['id']} | {name} | {kind} | {nbytes / 1e9:.2f} | {ms:.2f} | {rate / 1e12:.2f} | "
                      f"{rate / bw:.2f} |")


if __name__ == "__main__":
    main()
