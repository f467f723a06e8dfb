"""Selective checkpointing's memory on CPU: the peak of live tensor bytes over one training step (torch.profiler's
memory timeline), no / every 2nd / every 3rd block / full checkpointing, beside the estimate's peak.

No GPU was lent for issue 38's measurement (benchmarks/gpu_checks/fp8_selective.py stays unrun); this checks the
part of the estimate a CPU can: which blocks selective checkpointing wraps, what they keep and what backward's
recompute adds. fp32 (CPU bf16 autocast is ~60x slower here), the zoo model as launcher.model_setups wraps it, the
step after a first optimizer step. The estimate's peak less its fixed cuBLAS workspace term (a GPU's) is compared;
CPU attention is not CUDA's flash kernel, so what attention saves can differ from the GPU's.

    PYTHONPATH=. python benchmarks/notebook/2026-12-07-selective-ckpt-cpu/selective_memory_cpu.py [--model M]
"""

from __future__ import annotations

import argparse
import json

import torch
from torch.profiler import ProfilerActivity, profile

from advisor.catalog import catalog_model
from advisor.config import Precision, TrainConfig
from advisor.zoo import build_trainable, synthetic_batch
from launcher import model_setups

MODES = {"none": {}, "every2": {"grad_ckpt_every": 2}, "every3": {"grad_ckpt_every": 3}, "full": {"grad_ckpt": True}}


def peak_step_bytes(model_name: str, mode: dict, micro_batch: int, seq: int) -> dict:
    """Peak and start-of-backward live CPU bytes of the second training step (the first made the AdamW states)."""
    spec = catalog_model(model_name)
    torch.manual_seed(0)
    m = build_trainable(spec)
    if mode.get("grad_ckpt"):
        m.set_grad_checkpointing(True)
    if mode.get("grad_ckpt_every"):
        model_setups.checkpoint_every(m, mode["grad_ckpt_every"])
    x, y = synthetic_batch(spec, micro_batch, seq)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    m(x, y).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        with torch.profiler.record_function("forward"):
            loss = m(x, y)
        with torch.profiler.record_function("backward"):
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    live = peak = 0
    for _, action, (key, _version), size in prof._memory_profile().timeline:
        if key.device.type != "cpu":
            continue
        if action.name in ("CREATE", "PREEXISTING"):
            live += size
        elif action.name == "DESTROY":
            live -= size
        peak = max(peak, live)
    return {"peak_bytes": peak}


def estimate_peak(model_name: str, mode: dict, micro_batch: int, seq: int) -> float:
    from advisor.calibration import default_calibration
    from advisor.estimate import estimate
    from advisor.gpus import get_gpu
    from advisor.hardware import HardwareSpec

    cfg = TrainConfig(micro_batch=micro_batch, seq_len=seq, precision=Precision.fp32, **mode)
    e = estimate(catalog_model(model_name), cfg, HardwareSpec(gpu=get_gpu("h100"), gpus_per_node=1, nodes=1),
                 calibration=default_calibration())
    return (e.memory.peak_gib - e.memory.detail["workspace_gib"]) * 2**30


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mini-transformer")
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = {}
    for name, mode in MODES.items():
        rows[name] = {**peak_step_bytes(args.model, mode, args.micro_batch, args.seq_len),
                      "estimate_peak_bytes": estimate_peak(args.model, mode, args.micro_batch, args.seq_len)}
    out = {"model": args.model, "micro_batch": args.micro_batch, "seq_len": args.seq_len, "torch": torch.__version__,
           "rows": rows}
    for name, r in rows.items():
        r["error"] = r["estimate_peak_bytes"] / r["peak_bytes"] - 1
        print(f"{name:7s} measured {r['peak_bytes'] / 2**20:7.1f} MiB  estimated {r['estimate_peak_bytes'] / 2**20:7.1f} MiB"
              f"  {r['error']:+.1%}")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
