"""Test script: the tiny classifier, slowed to ``--step-s`` seconds a step, that says where each execution
started: it appends ``<pid> <step>`` to ``starts.txt`` in the run directory once a checkpoint named by
$CARDWISE_RESUME is restored (``rt.step`` is then the checkpoint's step, else 0), and ``<step>`` to
``steps.txt`` after every optimizer step, so a test sees which steps ran and how often. Rank R > 0 writes
``starts-rankR.txt`` and ``steps-rankR.txt``."""

import argparse
import os
import time

from tiny_run import prepared

from launcher.runtime import Runtime

p = argparse.ArgumentParser()
p.add_argument("--step-s", type=float, default=0.3)
p.add_argument("--die-after", type=int, help="exit 1 after this step (a run that fails after checkpoints)")
args = p.parse_args()

rt = Runtime.from_env()
model, opt, batches = prepared(rt)
run_dir = os.environ["CARDWISE_RUN_DIR"]
suffix = f"-rank{rt.rank}" if rt.rank else ""
with open(os.path.join(run_dir, f"starts{suffix}.txt"), "a") as f:
    f.write(f"{os.getpid()} {rt.step}\n")
while rt.step < rt.total_steps:
    rt.train_step(model, opt, batches)
    with open(os.path.join(run_dir, f"steps{suffix}.txt"), "a") as f:
        f.write(f"{rt.step}\n")
    if args.die_after is not None and rt.step == args.die_after and not os.environ.get("CARDWISE_RESUME"):
        next(batches)  # the step boundary: this step's checkpoint is saved here
        raise SystemExit(1)
    time.sleep(args.step_s)
rt.finish(model)
