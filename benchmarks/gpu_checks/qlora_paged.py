"""QLoRA and paged 8-bit AdamW on llama3-8b, launched as `advise launch` runs them, beside the estimate.

Each configuration is a Plan launched with `advise launch --plan PLAN --recipe synthetic` in a child
process (the machinery of benchmarks/gpu_checks/h200_compromises.py: ``run_one``), so the runtime builds what
launcher.compromises builds: bitsandbytes Linear4bit (NF4, double quantization) under peft for
QLoRA, PagedAdamW8bit for the paged optimizer. Measured: the peak of torch.cuda.max_memory_allocated
after the first optimizer step (paged states live in CUDA unified memory, outside it: the estimate's
peak_gib leaves them out too) and the median samples/s of the timed steps; estimated: advisor.estimate
for the same ModelSpec, TrainConfig and GPU.

    OUT=/tmp/out python -m benchmarks.gpu_checks.qlora_paged            # on the GPU (about 5 min on an H200)
    OUT=/tmp/out python -m benchmarks.gpu_checks.qlora_paged --tiny     # CPU dry run: mini-transformer, QLoRA only

Writes $OUT/qlora_paged.json: the GPU, torch, bitsandbytes and peft versions, the date and every row
(plan, estimate, measured, the run record, what compromise.json says ran), and prints the table.
Copy it into benchmarks/gpu_checks/results/ with the date in its name.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from advisor.config import Optimizer, Precision
from benchmarks.gpu_checks.h200_compromises import device_name, fmt, make_plan, run_one

# name, config overrides (llama3-8b, seq 2048, checkpointing on, no accumulation). lora-r16 and adamw-8bit
# are benchmarks/gpu_checks/h200_compromises.py's rows again, the references the new ones are read against.
CONFIGS = [
    ("lora-r16", dict(micro_batch=4, precision=Precision.bf16, lora_rank=16, grad_ckpt=True)),
    ("qlora-r16", dict(micro_batch=4, precision=Precision.bf16, lora_rank=16, quantize_base="4bit", grad_ckpt=True)),
    ("qlora-r16-mb1", dict(micro_batch=1, precision=Precision.bf16, lora_rank=16, quantize_base="4bit", grad_ckpt=True)),
    ("adamw-8bit", dict(micro_batch=1, precision=Precision.bf16, optimizer=Optimizer.adamw_8bit, grad_ckpt=True)),
    ("paged-adamw-8bit", dict(micro_batch=1, precision=Precision.bf16, optimizer=Optimizer.paged_adamw_8bit,
                              grad_ckpt=True)),
    ("pure-bf16+paged-adamw-8bit", dict(micro_batch=2, precision=Precision.pure_bf16,
                                        optimizer=Optimizer.paged_adamw_8bit, grad_ckpt=True)),
]


def versions() -> dict:
    import importlib.metadata as md

    out = {}
    for pkg in ("torch", "bitsandbytes", "peft", "accelerate"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="CPU dry run with mini-transformer (QLoRA rows only)")
    ap.add_argument("--only", nargs="*", help="configuration names, in this order")
    ap.add_argument("--budget-s", type=float, default=420.0, help="start no configuration after this many seconds")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT") or "bench-out")
    out.mkdir(parents=True, exist_ok=True)
    device = device_name(args.tiny, "qlora_paged")
    if device is None:
        return 2
    by_name = dict(CONFIGS)
    names = args.only or [n for n, _ in CONFIGS]
    home = Path(tempfile.mkdtemp(prefix="qlora-paged-"))
    began, rows = time.perf_counter(), []
    for name in names:
        overrides = by_name[name]
        model, seq = "llama3-8b", 2048
        if args.tiny:
            if overrides.get("optimizer") is Optimizer.paged_adamw_8bit:
                continue  # paging needs a GPU (launcher.compromises.checks refuses it on CPU)
            model, seq, overrides = "mini-transformer", 16, dict(overrides, micro_batch=2)
        plan = make_plan(model, overrides, seq_len=seq, cpu=args.tiny)  # estimated on one H200 (estimate_of)
        spent = time.perf_counter() - began
        if spent > args.budget_s:
            rows.append({"name": name, "status": f"skipped: the {args.budget_s:.0f} s budget was spent"})
            continue
        print(f"== {name}: {model}, {plan.config.model_dump(mode='json', exclude_defaults=True)}", flush=True)
        row = run_one(name, plan, home, out, timeout_s=max(30.0, args.budget_s + 60 - spent))
        rows.append(row)
        m, e = row.get("measured") or {}, row.get("estimate") or {}
        print(f"   {row.get('status')}: peak {fmt(m.get('peak_gib'), 2)} GiB (est {fmt(e.get('peak_gib'), 2)}), "
              f"{fmt(m.get('samples_per_s'), 2)} samples/s (est {fmt(e.get('samples_per_s'), 2)})", flush=True)
    result = {"script": "benchmarks/gpu_checks/qlora_paged.py", "device": device, "versions": versions(),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "rows": rows}
    (out / "qlora_paged.json").write_text(json.dumps(result, indent=2) + "\n")
    print("| config | status | peak GiB meas. | est. | samples/s meas. | est. | ran |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        m, e = r.get("measured") or {}, r.get("estimate") or {}
        ran = m.get("ran") or {}
        what = ran.get("optimizer", "—") + (f", {ran['linear4bit_layers']} Linear4bit" if ran.get("linear4bit_layers") else "")
        print(f"| {r['name']} | {r.get('status')} | {fmt(m.get('peak_gib'))} | {fmt(e.get('peak_gib'))} | "
              f"{fmt(m.get('samples_per_s'), 2)} | {fmt(e.get('samples_per_s'), 2)} | {what} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
