"""Where a users' row spends its GPU time: CUDA kernels of a few steps, by kind, beside the estimator's terms.

For rows the estimator misses (benchmarks/calibration/results/h200-estimator.md), the step of
``measure/users_models.py`` (same build, data and loop) runs its warm-up, then ``torch.profiler``
records ``--steps`` steps. Kernels are grouped by what their names say they are (GEMM, attention,
convolution, elementwise/reduction, copies) so that each group can be set beside the roofline's term
for it (``advisor.throughput.gpu_seconds``: matmul, attention, convolution, bytes, kernels).

    python3 -m benchmarks.notebook.2026-12-04-kernel-profiles.profile_users_rows --only enc-bf16-128,u2-effnet-bf16-256 --out prof.json
    python -m benchmarks.notebook.2026-12-04-kernel-profiles.profile_users_rows --smoke      # CPU: checks the script runs (no CUDA kernels)
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path


import benchmarks.calibration.measure.unseen as measure_unseen
import benchmarks.calibration.measure.users_models as mum
import torch
from benchmarks.calibration.measure.steploop import free_device, warm_up

# Kernel groups, first match wins (names as CUDA 12-13 / cuDNN 9 / PyTorch 2.11 print them).
GROUPS = [
    ("attention", r"flash|fmha|attention|efficient_attention|pytorch_flash"),
    ("conv_depthwise", r"depthwise|conv_depthwise"),
    ("conv", r"conv|cudnn|implicit_gemm|wgrad|dgrad|fprop|xmma|nhwc|nchw"),
    ("gemm", r"gemm|cutlass|nvjet|sm90_|sm100_|cublas|ampere_|splitk"),
    ("triton", r"^triton_"),
    ("copy", r"copy|transpose|cat|memcpy|memset|fill"),
    ("elementwise", r"elementwise|vectorized|reduce|norm|softmax|dropout|gelu|silu|sigmoid|mul|add|sum|mean|index"),
]


def group_of(name: str) -> str:
    low = name.lower()
    for group, pattern in GROUPS:
        if re.search(pattern, low):
            return group
    return "other"


def profile_row(row: dict, device: str, steps: int, smoke: bool) -> dict:
    from torch.profiler import ProfilerActivity, profile

    step, net, info = mum.build_step(row, device, smoke)
    warm_up(step, 3, device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    t0 = time.perf_counter()
    with profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / steps
    kernels, groups = {}, {}
    for ev in prof.events():
        if device == "cuda" and ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if device == "cpu" and ev.cpu_parent is not None:
            continue
        us = (ev.device_time if device == "cuda" else ev.cpu_time) or 0.0
        k = kernels.setdefault(ev.name, [0, 0.0])
        k[0] += 1
        k[1] += us
    for name, (n, us) in kernels.items():
        g = groups.setdefault(group_of(name), [0, 0.0])
        g[0] += n
        g[1] += us
    top = sorted(kernels.items(), key=lambda kv: -kv[1][1])[:40]
    return dict(id=row["id"], flags=mum.cardwise_flags(row), wall_ms_per_step=wall * 1e3,
                kernels_per_step=sum(n for n, _ in kernels.values()) / steps,
                busy_ms_per_step=sum(us for _, us in kernels.values()) / steps / 1e3,
                groups={g: dict(kernels=n / steps, ms=us / steps / 1e3) for g, (n, us) in sorted(groups.items())},
                top=[dict(name=name[:160], group=group_of(name), calls=n / steps, ms=us / steps / 1e3)
                     for name, (n, us) in top], **info)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated row ids (measure_users_models' or measure_unseen's)")
    ap.add_argument("--out", type=Path, default=Path("profile.json"))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny models")
    args = ap.parse_args()
    wanted = [s for s in args.only.split(",") if s] or list(measure_unseen.rows_by_id(args.smoke))[:1]
    device = "cpu" if args.smoke else "cuda"
    out = []
    for row in measure_unseen.pick(wanted, args.smoke):
        try:
            res = profile_row(row, device, args.steps, args.smoke)
        except Exception as exc:  # one broken row must not cost the call
            res = dict(id=row["id"], error=f"{type(exc).__name__}: {str(exc)[:300]}")
        free_device(device)
        out.append(res)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print(json.dumps({k: v for k, v in res.items() if k in ("id", "wall_ms_per_step", "busy_ms_per_step",
                                                                  "kernels_per_step", "groups", "error")}), flush=True)


if __name__ == "__main__":
    main()
