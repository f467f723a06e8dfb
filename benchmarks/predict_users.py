"""Predicted vs measured peak memory for the users' reference rows (issue 16).

Reads the measured rows (``h200-users.jsonl``, written by ``measure_users_models.py``), resolves
each row's ``cardwise_flags`` the way ``advise estimate`` does (``--module`` traced with its
``--loss``, ``--hf-config`` through transformers), and prints the error per row and the median /
worst absolute error by split (fit / holdout) and eager / compiled.

    python benchmarks/predict_users.py [ROOT]    # ROOT holds benchmarks/results/h200-users.jsonl
"""

from __future__ import annotations

import json
import shlex
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor.config import TrainConfig  # noqa: E402
from advisor.estimate import estimate  # noqa: E402
from advisor.gpus import get_gpu  # noqa: E402
from advisor.hardware import HardwareSpec  # noqa: E402
from advisor.hf_trace import resolve_hf_config  # noqa: E402
from advisor.tracer import trace_module_spec  # noqa: E402


def flags(line: str) -> dict:
    args, out, i = shlex.split(line), {}, 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[args[i][2:]] = args[i + 1]
            i += 2
        else:
            out[args[i][2:]] = True
            i += 1
    return out


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    hw = HardwareSpec(gpu=get_gpu("H200"), gpus_per_node=1)
    specs, rows = {}, []
    for line in (root / "benchmarks/results/h200-users.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d.get("kind") == "header" or d.get("peak_gib") is None:
            continue
        f = flags(d["cardwise_flags"])
        key = f.get("module") or f.get("hf-config")
        if key not in specs:
            if "module" in f:
                shape = tuple(int(x) for x in f["input-shape"].split(","))
                specs[key] = trace_module_spec(str(root / f["module"]), shape, f["input-dtype"], loss=f.get("loss", "ce"))
            else:
                specs[key] = resolve_hf_config(root / f["hf-config"])
        cfg = TrainConfig(micro_batch=int(f["micro-batch"]), precision=f["precision"], compile="compile" in f,
                          seq_len=int(f["seq-len"]) if "seq-len" in f else None,
                          image_size=int(f["image-size"]) if "image-size" in f else None)
        pred = estimate(specs[key], cfg, hw).memory.peak_gib
        err = pred / d["peak_gib"] - 1
        rows.append((d["id"], d["split"], "compile" in f, err))
        print(f"| {d['id']} | {d['split']} | {d['peak_gib']:.2f} | {pred:.2f} | {err * 100:+.1f}% |")
    for split in ("fit", "holdout"):
        for compiled in (False, True):
            errs = [abs(r[3]) for r in rows if r[1] == split and r[2] == compiled]
            if errs:
                print(f"{split} {'compiled' if compiled else 'eager'}: n={len(errs)} median {statistics.median(errs) * 100:.1f}% "
                      f"worst {max(errs) * 100:.1f}%")


if __name__ == "__main__":
    main()
