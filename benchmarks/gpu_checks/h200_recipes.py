"""The recipes on generated data, on one GPU (``benchmarks/gpu_checks/h200_recipes.sh`` runs this; issue 15).

Four launches through ``advise launch`` (the CLI a user types), each recorded in a fresh run store:

1. causal-lm, LoRA: a Llama-3.2-1B-shaped model from its config (random weights, nothing
   downloaded; tokenizer trained offline on the chat file) fine-tuned on a generated chat JSONL;
2. causal-lm, full fine-tuning: the same model and data, every weight trained;
3. image-classification, ViT (catalog) on a generated JPEG folder with 0 DataLoader workers:
   the check must flag it as data-bound;
4. the same with the plan's workers (from the CPU cores per GPU): it must not be flagged.

Runs 3 and 4 share one plan (``--save-plan``), the first with its ``num_workers`` set to 0, so the
workers are the only difference. Writes ``h200-recipes.json`` (every run's record and figures)
and ``h200-recipes.md`` (the table) into the output folder; the table is rewritten after every
run, so a run stopped early leaves what it measured. ``--tiny`` is the CPU dry run: a 2-layer
Llama, resnet18 at 32 px, CPU processes, a few steps (checks the script, measures nothing).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from benchmarks.gpu_checks import recipe_data


def advise(args: list[str], log) -> tuple[int, dict | None, float]:
    """``advise ARGS --json``: (exit status, the final run record, wall seconds)."""
    t0 = time.time()
    cmd = [sys.executable, "-m", "cli.main", *args, "--json"]
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log.write(p.stderr)
    try:
        rec = json.loads(p.stdout)
    except ValueError:  # refused before a run existed: keep the message as the row's error
        log.write(p.stdout)
        rec = {"status": "refused", "error": " ".join(p.stderr.strip().splitlines()[-2:])}
    return p.returncode, rec, time.time() - t0


def figures(name: str, rc: int, rec: dict | None, wall: float, expect_flag: bool | None) -> dict:
    m = (rec or {}).get("metrics") or {}
    bound = m.get("data_bound") or {}
    plan = (rec or {}).get("plan") or {}
    row = {"run": name, "exit": rc, "status": (rec or {}).get("status"), "id": (rec or {}).get("id"),
           "steps": m.get("steps"), "samples_per_s": m.get("samples_per_s"), "tokens_per_s": m.get("tokens_per_s"),
           "peak_gib": m.get("peak_gib"), "gpu_util_pct": bound.get("gpu_util_pct"),
           "data_wait_share": bound.get("data_wait_share"), "flagged": bound.get("flagged"),
           "check": bound.get("message"), "workers": plan.get("num_workers"),
           "micro_batch": (plan.get("config") or {}).get("micro_batch"), "first_loss": m.get("first_loss"),
           "last_loss": m.get("last_loss"), "wall_s": round(wall, 1), "error": (rec or {}).get("error")}
    if expect_flag is not None:
        row["flag_as_expected"] = bound.get("flagged") is expect_flag
    return row


def table(rows: list[dict]) -> str:
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    out = ["| run | status | workers | samples/s | tokens/s | peak GiB | GPU util % | data wait | flagged | loss |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        loss = "-" if r["first_loss"] is None else f"{r['first_loss']:.3g} -> {r['last_loss']:.3g}"
        out.append(f"| {r['run']} | {r['status']} | {f(r['workers'], 'd')} | {f(r['samples_per_s'], ',.1f')} | "
                   f"{f(r['tokens_per_s'], ',.0f')} | {f(r['peak_gib'], '.1f')} | {f(r['gpu_util_pct'], '.0f')} | "
                   f"{f(r['data_wait_share'], '.0%')} | {r['flagged']} | {loss} |")
    return "\n".join(out) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--tiny", action="store_true", help="CPU dry run at tiny size")
    p.add_argument("--work", type=Path, help="where the data and run store go (default OUT/work)")
    p.add_argument("--only", choices=["lm", "vit", "vit-planned"],
                   help="run only the causal-lm rows, only the two ViT rows, or only the ViT row with its planned workers")
    a = p.parse_args()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = (a.work or out / "work").resolve()
    work.mkdir(parents=True, exist_ok=True)
    home = work / "home"
    log = open(out / "h200-recipes.log", "a")
    tiny = a.tiny
    t0 = time.time()

    want_lm = a.only in (None, "lm")
    if want_lm:
        chat = recipe_data.write_chat(work / "chat.jsonl", 400 if tiny else 8000)
        llama = recipe_data.write_llama(work / "llama", chat, "tiny" if tiny else "1b", weights=tiny)
    else:
        chat = llama = None
    try:
        images = recipe_data.write_images(work / "images", classes=4, per_class=16 if tiny else 600,
                                          size=48 if tiny else 320)
    except ImportError as exc:  # Pillow (or numpy) missing: the image runs are left out, the LM runs still go
        images = None
        log.write(f"no image folder ({exc}): the ViT runs are skipped; pip install pillow\n")
    log.write(f"data ready in {time.time() - t0:.1f} s\n")
    where = ["--cpu", "--processes", "1"] if tiny else ["--gpus", "1"]
    lm = [*where, "--recipe", "causal-lm", "--hf-model", str(llama), "--data", str(chat),
          "--seq-len", "64" if tiny else "1024", "--micro-batch", "2" if tiny else "8", "--base-lr", "2e-4",
          "--max-steps", "6" if tiny else "30", "--home", str(home)]
    if not tiny:
        lm += ["--precision", "bf16", "--batch-size", "8"]
    vit = ["--model", "resnet18" if tiny else "vit-l-16", "--image-size", "32" if tiny else "224",
           "--micro-batch", "4" if tiny else "128"]
    if not tiny:
        vit += ["--precision", "bf16", "--batch-size", "128"]
    runs = [("causal-lm LoRA r16", ["launch", *lm, "--lora-rank", "16"], None),
            ("causal-lm full", ["launch", *lm], None)]
    rows: list[dict] = []

    def record(name, rc, rec, wall, expect):
        rows.append(figures(name, rc, rec, wall, expect))
        (out / "h200-recipes.json").write_text(json.dumps({"rows": rows, "tiny": tiny}, indent=2) + "\n")
        (out / "h200-recipes.md").write_text(
            "# Recipes on generated data" + (" (CPU dry run, tiny: measures nothing)" if tiny else "") + "\n\n"
            "`bash benchmarks/gpu_checks/h200_recipes.sh` (benchmarks/gpu_checks/h200_recipes.py); data from benchmarks/gpu_checks/recipe_data.py.\n\n"
            + table(rows))

    for name, args, expect in runs if want_lm else []:
        record(name, *advise(args, log), expect)

    plan = work / "vit-plan.json"
    if images is None or a.only == "lm":
        print((out / "h200-recipes.md").read_text() if rows else "no rows")
        return 1 if images is None else 0
    rc = subprocess.run([sys.executable, "-m", "cli.main", "launch", *where, *vit, "--recipe", "image-classification",
                         "--data", str(images), "--dry-run", "--save-plan", str(plan), "--home", str(home)],
                        cwd=ROOT, stdout=log, stderr=log).returncode
    if rc == 0:
        planned = json.loads(plan.read_text())
        if tiny:
            planned["num_workers"] = 2  # the CPU plan has none unless asked: stand in for the cores-per-GPU rule
            plan.write_text(json.dumps(planned))
        zero = work / "vit-plan-0-workers.json"
        zero.write_text(json.dumps({**planned, "num_workers": 0}))
        steps = "6" if tiny else "60"
        vit_rows = (("ViT 0 workers", zero, True), (f"ViT {planned['num_workers']} workers (planned)", plan, False))
        for name, pfile, expect in vit_rows[1:] if a.only == "vit-planned" else vit_rows:
            args = ["launch", "--plan", str(pfile), "--recipe", "image-classification", "--data", str(images),
                    "--max-steps", steps, "--home", str(home)]
            record(name, *advise(args, log), None if tiny else expect)
    else:
        log.write(f"planning the ViT runs failed (exit {rc})\n")
    log.write(f"done in {time.time() - t0:.1f} s\n")
    print((out / "h200-recipes.md").read_text())
    bad = [r for r in rows if r["exit"] != 0 or r.get("flag_as_expected") is False]
    return 1 if bad or rc != 0 else 0


if __name__ == "__main__":
    raise SystemExit(main())
