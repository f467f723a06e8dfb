"""The one-shot commands' output, byte for byte, against a recorded set (issue 27: speed work must not
change an answer).

Runs ~35 varied `advise` commands (catalog models, --gpu/--gpus/--nodes/--network, deadlines, --task,
pins, compromises, estimate, refusals; --json and text) as fresh processes with a fixed terminal
width and an empty CARDWISE_HOME, and records stdout, stderr and the exit status of each. `--record`
writes the set (do it on the commit before a change); without it, the same commands run again and
every difference is printed; exit 1 when any.

    python -m benchmarks.speed.output_identity --record     # on the starting commit
    python -m benchmarks.speed.output_identity              # after the change: diff against it
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "benchmarks" / "speed" / "results" / "output-identity.json"
ADVISE = str(Path(sys.executable).with_name("advise"))

L8 = ["--model", "llama3-8b"]
COMMANDS: list[list[str]] = [
    L8 + ["--json"],
    L8,
    L8 + ["--gpu", "H100", "--gpus", "8", "--nodes", "2", "--json"],
    L8 + ["--gpu", "H100", "--gpus", "8", "--nodes", "2", "--network", "100GbE"],
    L8 + ["--gpu", "H200", "--gpus", "1", "--json"],
    L8 + ["--gpu", "H200", "--gpus", "1", "--alternatives"],
    L8 + ["--gpu", "A100-PCIE-80GB", "--gpus", "8", "--dataset-size", "52000", "--epochs", "3", "--deadline", "4.3h",
          "--json"],
    L8 + ["--gpu", "L40S", "--gpus", "8", "--dataset-size", "52000", "--epochs", "3", "--deadline", "2h"],
    L8 + ["--gpu", "RTX-4090", "--gpus", "1", "--json"],
    L8 + ["--gpu", "RTX-4090", "--gpus", "1", "--lora-rank", "16", "--quantize-base", "4bit"],
    L8 + ["--gpu", "A100-80GB", "--gpus", "8", "--strategy", "fsdp", "--micro-batch", "4", "--json"],
    L8 + ["--gpu", "A100-80GB", "--gpus", "4", "--grad-ckpt", "--seq-len", "4096", "--margin", "0.3"],
    L8 + ["--gpu", "H100", "--gpus", "8", "--nodes", "100000", "--json"],
    L8 + ["--gpu", "A100-40GB", "--gpus", "2", "--precision", "pure-bf16", "--optimizer", "adamw-8bit", "--json"],
    L8 + ["--gpu", "A100-80GB", "--gpus", "2", "--cpu-offload", "--json"],
    L8 + ["--gpu", "H100", "--gpus", "1", "--precision", "pure-bf16", "--optimizer", "adamw-8bit"],
    ["--model", "llama3-70b", "--gpu", "H100", "--gpus", "8", "--nodes", "4", "--network", "400G-IB", "--json"],
    ["--model", "llama3-70b", "--gpu", "A100-80GB", "--gpus", "8"],
    ["--model", "gpt2", "--gpu", "H100", "--gpus", "100000", "--json"],
    ["--model", "gpt2", "--gpu", "A100-80GB", "--gpus", "8", "--task", "pretrain", "--dataset-size", "9000000",
     "--epochs", "1", "--deadline", "12h"],
    ["--model", "gpt2-xl", "--gpu", "L4", "--gpus", "4", "--interconnect", "pcie", "--json"],
    ["--model", "bert-large", "--gpu", "A100-80GB", "--gpus", "8", "--task", "pretrain", "--batch-size", "4096",
     "--json"],
    ["--model", "resnet50", "--gpu", "A100-80GB", "--gpus", "8", "--dataset-size", "1281167", "--epochs", "90",
     "--deadline", "6h"],
    ["--model", "resnet50", "--gpu", "V100-SXM2-16GB", "--gpus", "4", "--loader", "dali", "--json"],
    ["--model", "vit-b-16", "--gpu", "H100", "--gpus", "8", "--task", "pretrain", "--json"],
    ["--model", "mistral-7b", "--gpu", "A10G", "--gpus", "4", "--keep-global-batch", "--batch-size", "64"],
    ["--model", "llama3.2-1b", "--gpu", "T4", "--gpus", "2", "--base-lr", "1e-4", "--base-batch", "32",
     "--lr-scaling", "sqrt", "--json"],
    ["--model", "mini-transformer", "--gpu", "RTX-4090", "--gpus", "1", "--json"],
    ["--model", "qwen2.5-7b", "--gpu", "H100", "--gpus", "8", "--nodes", "2", "--strategy", "hsdp", "--grad-accum", "2"],
    ["estimate", "--model", "llama3-8b", "--gpu", "H100", "--gpus", "8", "--strategy", "fsdp", "--micro-batch", "2",
     "--json"],
    ["estimate", "--model", "resnet50", "--gpu", "A100-80GB", "--gpus", "1", "--micro-batch", "256"],
    ["estimate", "--model", "llama3-8b", "--gpu", "RTX-4090", "--lora-rank", "16", "--quantize-base", "4bit",
     "--micro-batch", "1", "--json"],
    ["recommend", "--model", "llama3-8b", "--gpu", "nosuchgpu"],
    ["--model", "llama3-8b", "--gpus", "0"],
    ["--model", "llama-8b", "--json"],
    ["--model", "llama3-8b", "--gpu", "A100-80GB", "--gpus", "8", "--deadline", "1h", "--dataset-size", "52000",
     "--epochs", "3", "--json"],
]


def run_all() -> list[dict]:
    home = tempfile.mkdtemp(prefix="cardwise-identity-home-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARDWISE_")}
    env.update(CARDWISE_HOME=home, COLUMNS="120", LINES="50", NO_COLOR="1", TERM="dumb", CUDA_VISIBLE_DEVICES="")
    out = []
    for cmd in COMMANDS:
        p = subprocess.run([ADVISE, *cmd], cwd=ROOT, env=env, capture_output=True, text=True)
        out.append({"cmd": cmd, "rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", action="store_true", help="write the recorded set instead of diffing against it")
    args = ap.parse_args()
    now = run_all()
    if args.record:
        RECORD.parent.mkdir(parents=True, exist_ok=True)
        RECORD.write_text(json.dumps(now, indent=1) + "\n")
        print(f"recorded {len(now)} commands in {RECORD.relative_to(ROOT)}")
        return 0
    before = {json.dumps(r["cmd"]): r for r in json.loads(RECORD.read_text())}
    bad = 0
    for r in now:
        key = json.dumps(r["cmd"])
        old = before.get(key)
        if old is None:
            print(f"NEW (not recorded): advise {' '.join(r['cmd'])}")
            bad += 1
            continue
        for part in ("rc", "stdout", "stderr"):
            if old[part] != r[part]:
                bad += 1
                print(f"DIFF {part}: advise {' '.join(r['cmd'])}")
                if part != "rc":
                    sys.stdout.writelines(difflib.unified_diff(old[part].splitlines(True), r[part].splitlines(True),
                                                               "recorded", "now", n=1))
                else:
                    print(f"  {old['rc']} -> {r['rc']}")
    print(f"{len(now)} commands, {bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
