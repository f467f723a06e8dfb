"""llama3-8b on one H200 with each launchable memory compromise, measured beside `advise estimate` (issue #12, point 6).

Every configuration runs through the product's own path: a Plan (advisor.plan) saved to a file and
`advise launch --plan PLAN --recipe synthetic` (Accelerate, launcher.runtime, launcher.compromises,
the synthetic recipe building cardwise's llama3-8b on the GPU), one child process each, so one
configuration's allocator state or OOM cannot touch the next. The runtime resets the CUDA peaks
after the first optimizer step and logs every step (``-- --log-every 1``), so:

  measured peak_gib / reserved_gib : max over the timed steps of torch.cuda.max_memory_{allocated,reserved}
  measured samples_per_s           : median over the timed steps (the first WARMUP steps left out)
  estimate                         : advisor.estimate.estimate for the same ModelSpec, TrainConfig and
                                     H200, called in-process (what `advise estimate` prints)

Configurations (seq 2048, no accumulation, checkpointing on for the full fine-tunes):
  standard    bf16 autocast, fp32 master weights and AdamW states, micro-batch 1
  pure-bf16   bf16 weights/grads/states, KahanAdamW, micro-batch 2
  adamw-8bit  bf16 autocast, bitsandbytes AdamW8bit, micro-batch 1
  adamw-8bit-mb4  the same at micro-batch 4 (checks the 8-bit step rate fit on the row above)
  in-backward bf16 autocast, AdamW stepped per parameter in backward, micro-batch 1
  lora-r16    frozen bf16 base, fp32 adapters (peft), bf16 autocast, micro-batch 4
  cpu-offload FSDP2 CPUOffloadPolicy on one GPU, bf16 autocast: llama3.2-3b, not llama3-8b: 8B
              parameters x 16 bytes (fp32 weights, gradients, AdamW moments) = 120 GiB of host RAM,
              and the H200 host has 128 GiB; the 3B model needs ~48 GiB.

    OUT=/tmp/out python3 -m benchmarks.gpu_checks.h200_compromises            # on the H200, at most 7.5 min
    OUT=/tmp/out python3 -m benchmarks.gpu_checks.h200_compromises --tiny     # CPU dry run, mini-transformer

Writes into $OUT: ``NAME.json`` per configuration (plan, estimate, measured, the run record, the
child's stderr tail), ``h200_compromises.md`` (the table) and ``h200_compromises.jsonl`` (all rows).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from advisor.config import Optimizer, Precision, Strategy, TrainConfig
from advisor.plan import ModelRef, Plan

WARMUP, TIMED = 3, 5
# name, model, config overrides; the order is decision node H's risk order (the standard setup first).
CONFIGS = [
    ("standard", "llama3-8b", dict(micro_batch=1, precision=Precision.bf16, grad_ckpt=True)),
    ("pure-bf16", "llama3-8b", dict(micro_batch=2, precision=Precision.pure_bf16, grad_ckpt=True)),
    ("adamw-8bit", "llama3-8b", dict(micro_batch=1, precision=Precision.bf16, optimizer=Optimizer.adamw_8bit,
                                     grad_ckpt=True)),
    # The check of the 8-bit step rate fit on "adamw-8bit" (benchmarks/calibration/fit_compromises.py): same optimizer, more compute.
    ("adamw-8bit-mb4", "llama3-8b", dict(micro_batch=4, precision=Precision.bf16, optimizer=Optimizer.adamw_8bit,
                                         grad_ckpt=True)),
    ("in-backward", "llama3-8b", dict(micro_batch=1, precision=Precision.bf16, optimizer_in_backward=True,
                                      grad_ckpt=True)),
    ("lora-r16", "llama3-8b", dict(micro_batch=4, precision=Precision.bf16, lora_rank=16, grad_ckpt=True)),
    ("cpu-offload", "llama3.2-3b", dict(micro_batch=2, precision=Precision.bf16, cpu_offload=True,
                                        strategy=Strategy.fsdp, grad_ckpt=True)),
    # The same plan once launcher.command gives the rank the host's cores (2026-12-04; the row above ran on
    # the one thread `accelerate launch` gives a GPU rank): benchmarks/calibration/fit_compromises.py's bandwidth row.
    ("cpu-offload-threads", "llama3.2-3b", dict(micro_batch=2, precision=Precision.bf16, cpu_offload=True,
                                                strategy=Strategy.fsdp, grad_ckpt=True)),
]


def make_plan(model: str, overrides: dict, *, seq_len: int, cpu: bool) -> Plan:
    config = TrainConfig(seq_len=seq_len, grad_accum=1, **overrides)
    # A full fine-tune's LR for Llama-style models; adapters train at 2e-4 (QLoRA, Dettmers et al. 2023, 7B-13B).
    # The loss only has to move: the measurement is memory and speed.
    lr = 2e-4 if overrides.get("lora_rank") else 1e-5
    return Plan(model=ModelRef(name=model, implementation="cardwise"), config=config, gpu=None if cpu else "H200",
                processes_per_node=1, cpu=cpu, global_batch=config.micro_batch, lr=lr, base_lr=lr,
                base_batch=config.micro_batch, warmup_steps=0)


def estimate_of(plan: Plan) -> dict:
    """advise estimate's figures for the plan's configuration on one H200, in-process."""
    from advisor.calibration import default_calibration
    from advisor.estimate import estimate
    from advisor.gpus import get_gpu
    from advisor.hardware import HardwareSpec
    from advisor.sources import resolve_model

    est = estimate(resolve_model(plan.model), plan.config, HardwareSpec(gpu=get_gpu("h200"), gpus_per_node=1, nodes=1),
                   calibration=default_calibration())
    m, t = est.memory, est.throughput
    return {"peak_gib": m.peak_gib, "device_gib": m.device_gib, "fits": m.fits, "samples_per_s": t.samples_per_s,
            "weights_gib": m.weights_gib, "gradients_gib": m.gradients_gib, "optimizer_gib": m.optimizer_gib,
            "activations_gib": m.activations_gib, "other_gib": m.other_gib}


def steps_of(plan: Plan) -> tuple[int, int]:
    """(warm-up, timed) steps: CPU offload steps AdamW on the host (seconds per step), so fewer of them."""
    return (2, 3) if plan.config.cpu_offload else (WARMUP, TIMED)


def measured_of(run_dir: Path, warmup: int = WARMUP) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    timed = [r for r in rows if r["step"] > warmup] or rows
    peaks = [r["peak_gib"] for r in timed if r.get("peak_gib") is not None]
    reserved = [r["reserved_gib"] for r in timed if r.get("reserved_gib") is not None]
    what = run_dir / "compromise.json"
    return {"samples_per_s": statistics.median(r["samples_per_s"] for r in timed),
            "peak_gib": max(peaks) if peaks else None, "reserved_gib": max(reserved) if reserved else None,
            "first_loss": rows[0]["loss"], "last_loss": rows[-1]["loss"], "steps": rows[-1]["step"],
            "timed_steps": len(timed), "ran": json.loads(what.read_text()) if what.is_file() else None}


def run_one(name: str, plan: Plan, home: Path, out: Path, timeout_s: float) -> dict:
    row = {"name": name, "model": plan.model.name, "config": plan.config.model_dump(mode="json"),
           "plan": plan.model_dump(mode="json")}
    try:
        row["estimate"] = estimate_of(plan)
    except Exception as exc:  # the measurement is still worth having
        row["estimate"] = {"error": f"{type(exc).__name__}: {exc}"}
    plan_path = home / f"{name}.plan.json"
    plan.save(plan_path)
    cmd = [sys.executable, "-m", "cli.main", "launch", "--plan", str(plan_path), "--recipe", "synthetic",
           "--max-steps", str(sum(steps_of(plan))), "--max-oom-retries", "0", "--home", str(home / name), "--json", "--no-final-weights",
           "--", "--pool", "1", "--log-every", "1"]
    row["command"] = cmd
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    # Its own session, so that a timeout stops the whole tree (advise launch, accelerate, the rank):
    # SIGINT first (advise launch stops every rank and records the run cancelled), SIGKILL after 20 s.
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
                         start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGINT)
        try:
            stdout, stderr = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            stdout, stderr = p.communicate()
        row.update(status=f"timeout after {timeout_s:.0f} s", wall_s=time.perf_counter() - t0, stderr_tail=stderr[-3000:])
        return row
    row["wall_s"] = time.perf_counter() - t0
    row["exit"] = p.returncode
    row["stderr_tail"] = stderr[-3000:]
    try:
        rec = json.loads(stdout)
    except json.JSONDecodeError:
        row["status"] = "refused" if p.returncode == 2 else "error"
        return row
    row["record"] = {k: rec.get(k) for k in ("id", "status", "error", "attempts", "metrics", "run_dir")}
    row["status"] = "oom" if any(a.get("status") == "oom" for a in rec.get("attempts", [])) else rec.get("status")
    run_dir = Path(rec["run_dir"])
    if (run_dir / "metrics.jsonl").is_file():
        row["measured"] = measured_of(run_dir, steps_of(plan)[0])
    return row


def fmt(v, digits=1) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def table(rows: list[dict], device: str, seq_len: int) -> str:
    lines = [f"# Memory compromises on one {device} (benchmarks/gpu_checks/h200_compromises.py)", "",
             f"seq {seq_len}, {WARMUP} warm-up + {TIMED} timed steps (cpu-offload 2 + 3), `advise launch --plan ... --recipe synthetic`; "
             "measured peak = max_memory_allocated after the first optimizer step; estimate = advisor.estimate.", "",
             "| config | model | micro-batch | status | peak GiB meas. | est. | reserved GiB | samples/s meas. | est. "
             "| optimizer ran | loss first→last |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        m, e = r.get("measured") or {}, r.get("estimate") or {}
        ran = (m.get("ran") or {})
        opt = ran.get("optimizer", "—") + (f"({ran['inner_optimizer']})" if ran.get("inner_optimizer") else "")
        loss = f"{m['first_loss']:.3f}→{m['last_loss']:.3f}" if m.get("first_loss") is not None else "—"
        lines.append(f"| {r['name']} | {r['model']} | {r['config']['micro_batch']} | {r.get('status')} | "
                     f"{fmt(m.get('peak_gib'))} | {fmt(e.get('peak_gib'))} | {fmt(m.get('reserved_gib'))} | "
                     f"{fmt(m.get('samples_per_s'), 2)} | {fmt(e.get('samples_per_s'), 2)} | {opt} | {loss} |")
    return "\n".join(lines) + "\n"


def device_name(tiny: bool, script: str) -> str | None:
    """What the rows ran on: the GPU's name, or the CPU dry run; None (said on stderr) without a GPU."""
    if tiny:
        return "CPU (--tiny dry run)"
    import torch

    if not torch.cuda.is_available():
        print(f"{script}: no CUDA GPU; use --tiny for a CPU dry run", file=sys.stderr)
        return None
    return torch.cuda.get_device_name(0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="dry run on CPU with mini-transformer (seq 16)")
    ap.add_argument("--only", nargs="*", help="configuration names to run, in this order")
    ap.add_argument("--budget-s", type=float, help="start no configuration after this many seconds (default 360; "
                                                   "--tiny 1500)")
    ap.add_argument("--total-s", type=float, help="stop a configuration still running at this many seconds "
                                                  "(default 450, inside the 8 minutes one H200 call has; --tiny 1800)")
    args = ap.parse_args()
    args.budget_s = args.budget_s or (1500.0 if args.tiny else 360.0)
    args.total_s = args.total_s or (1800.0 if args.tiny else 450.0)
    out = Path(os.environ.get("OUT") or "bench-out")
    out.mkdir(parents=True, exist_ok=True)
    device = device_name(args.tiny, "h200_compromises")
    if device is None:
        return 2
    home = Path(tempfile.mkdtemp(prefix="h200-compromises-"))
    began, rows = time.perf_counter(), []
    by_name = {c[0]: c for c in CONFIGS}
    unknown = [n for n in args.only or [] if n not in by_name]
    if unknown:
        print(f"h200_compromises: unknown configuration {unknown}; known: {list(by_name)}", file=sys.stderr)
        return 2
    for name, model, overrides in [by_name[n] for n in args.only] if args.only else CONFIGS:  # --only's order
        if args.tiny:
            model = "mini-transformer"
            overrides = dict(overrides, micro_batch=2)
        plan = make_plan(model, overrides, seq_len=16 if args.tiny else 2048, cpu=args.tiny)  # --tiny: CPU-sized
        spent = time.perf_counter() - began
        if spent > args.budget_s:
            row = {"name": name, "model": model, "config": plan.config.model_dump(mode="json"),
                   "status": f"skipped: the {args.budget_s:.0f} s budget was spent"}
        elif args.tiny and plan.config.cpu_offload:
            from launcher.accelerate_config import accelerate_config

            gpu_plan = plan.model_copy(update={"cpu": False, "gpu": "H200"})
            row = {"name": name, "model": model, "config": plan.config.model_dump(mode="json"),
                   "status": "skipped on CPU: Accelerate runs FSDP only on GPUs; the plan's Accelerate config is kept",
                   "accelerate_config": accelerate_config(gpu_plan), "estimate": estimate_of(gpu_plan)}
        else:
            print(f"== {name}: {model}, {plan.config.model_dump(mode='json', exclude_defaults=True)}", flush=True)
            row = run_one(name, plan, home, out, timeout_s=max(30.0, args.total_s - spent))
        row["device"] = device
        rows.append(row)
        (out / f"{name}.json").write_text(json.dumps(row, indent=2) + "\n")
        m = row.get("measured") or {}
        print(f"   {row.get('status')} in {row.get('wall_s', 0):.0f} s: peak {fmt(m.get('peak_gib'), 2)} GiB "
              f"(est {fmt((row.get('estimate') or {}).get('peak_gib'), 2)}), {fmt(m.get('samples_per_s'), 2)} samples/s "
              f"(est {fmt((row.get('estimate') or {}).get('samples_per_s'), 2)})", flush=True)
    with (out / "h200_compromises.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    seq = 16 if args.tiny else 2048
    (out / "h200_compromises.md").write_text(table(rows, device, seq))
    print(table(rows, device, seq))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
