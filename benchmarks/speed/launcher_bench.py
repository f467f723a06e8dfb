"""Issue 4's measurement: cardwise's launched run vs the same run by hand vs a naive loop.

For one catalog model on one GPU, three runs of the same training step on synthetic data
already on the device:
  cardwise  `advise launch --plan plan.json --recipe synthetic` (bf16 autocast, compile, fused
            AdamW, channels_last for CNNs: the plan below)
  hand      `accelerate launch --config_file <that run's accelerate_config.yaml>
            benchmarks/speed/launcher_baselines.py --mode hand` (the same, written by hand)
  naive     `python -m benchmarks.speed.launcher_baselines --mode naive` (fp32, eager, default AdamW)
Reports steady-state samples/s (median of logged intervals after the first), launch overhead
(process start to the end of the first optimizer step, compile included) and peak memory.

    python -m benchmarks.speed.launcher_bench --model gpt2 --micro-batch 16 --seq-len 1024 --out results/
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def make_plan(a) -> "Plan":
    from advisor.catalog import catalog_model
    from advisor.config import TrainConfig
    from advisor.plan import ModelRef, Plan

    cnn = catalog_model(a.model).family == "cnn"
    cfg = TrainConfig(micro_batch=a.micro_batch, grad_accum=1, seq_len=a.seq_len, image_size=a.image_size,
                      precision="bf16", compile=not a.no_compile, channels_last=cnn, strategy="single")
    return Plan(model=ModelRef(name=a.model), config=cfg, gpu="H200", processes_per_node=1, global_batch=a.micro_batch,
                lr=1e-4, base_lr=1e-4, base_batch=a.micro_batch, warmup_steps=0)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--micro-batch", type=int, required=True)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--image-size", type=int)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--no-compile", action="store_true", help="for a quick check without a GPU")
    p.add_argument("--home", type=Path, default=Path("/tmp/cardwise-bench"))
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    plan = make_plan(a)
    plan_path = a.out / f"plan-{a.model}.json"
    plan.save(plan_path)
    py = sys.executable
    shape = ["--micro-batch", str(a.micro_batch)] + (["--seq-len", str(a.seq_len)] if a.seq_len else []) \
        + (["--image-size", str(a.image_size)] if a.image_size else [])
    rows = []

    t0 = time.time()
    out = subprocess.run([py, "-m", "cli.main", "launch", "--plan", str(plan_path), "--recipe", "synthetic",
                          "--max-steps", str(a.steps), "--home", str(a.home), "--json", "--", "--log-every", str(a.log_every)],
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        print(out.stdout[-3000:], out.stderr[-3000:])
        raise SystemExit("cardwise run failed")
    rec = json.loads(out.stdout)
    final = json.loads((Path(rec["run_dir"]) / "final-rank0.json").read_text())
    rows.append({"mode": "cardwise", "samples_per_s": rec["metrics"]["samples_per_s"], "overhead_s": final["first_step_time"] - t0,
                 "peak_gib": rec["metrics"]["peak_gib"], "run_id": rec["id"]})
    cfg = Path(rec["run_dir"]) / "accelerate_config.yaml"

    tmp = a.out / f"baselines-{a.model}.jsonl"
    tmp.unlink(missing_ok=True)
    for mode, cmd in (("hand", [py, "-m", "accelerate.commands.launch", "--config_file", str(cfg)]), ("naive", [py])):
        t0 = time.time()
        extra = ["--compile"] if mode == "hand" and not a.no_compile else []
        r = subprocess.run([*cmd, str(ROOT / "benchmarks" / "speed" / "launcher_baselines.py"), "--mode", mode, "--model", a.model,
                            *shape, "--steps", str(a.steps), "--log-every", str(a.log_every), "--out", str(tmp), *extra],
                           capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
        if r.returncode != 0:
            print(r.stdout[-3000:], r.stderr[-3000:])
            raise SystemExit(f"{mode} run failed")
        row = json.loads(tmp.read_text().splitlines()[-1])
        rows.append({"mode": mode, "samples_per_s": row["samples_per_s"], "overhead_s": row["t_first_step"] - t0,
                     "peak_gib": row["peak_gib"]})

    hand = rows[1]["samples_per_s"]
    naive = rows[2]["samples_per_s"]
    for r in rows:
        r.update(model=a.model, micro_batch=a.micro_batch, seq_len=a.seq_len, image_size=a.image_size,
                 vs_hand=r["samples_per_s"] / hand, vs_naive=r["samples_per_s"] / naive)
    with open(a.out / "launcher.jsonl", "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    for r in rows:
        print(f"{a.model:10s} {r['mode']:9s} {r['samples_per_s']:9.1f} samples/s  x{r['vs_hand']:.3f} vs hand  "
              f"x{r['vs_naive']:.2f} vs naive  first step {r['overhead_s']:.1f}s  peak {r['peak_gib'] or 0:.1f} GiB", flush=True)


if __name__ == "__main__":
    main()
