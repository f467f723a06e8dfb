"""Test script: dies of a (simulated) CUDA OOM above a micro-batch, else trains a tiny model.

Driven by placeholders: `oom_train.py --micro-batch {micro_batch} --grad-accum {grad_accum} --limit 2`.
Records the argv it received, so tests can check placeholder filling per attempt.
"""

import argparse
import json
import os
import sys

import torch

p = argparse.ArgumentParser()
p.add_argument("--micro-batch", type=int, required=True)
p.add_argument("--grad-accum", type=int, required=True)
p.add_argument("--lr", type=float)
p.add_argument("--limit", type=int, default=2)
args = p.parse_args()

run_dir = os.environ["CARDWISE_RUN_DIR"]
attempt = os.environ.get("CARDWISE_ATTEMPT", "1")
with open(os.path.join(run_dir, f"argv-attempt{attempt}-rank{os.environ.get('RANK', '0')}.json"), "w") as f:
    json.dump(sys.argv[1:], f)

if args.micro_batch > args.limit:
    raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated by the test)")

from launcher.runtime import Runtime  # noqa: E402
from tiny_run import prepared  # noqa: E402

rt = Runtime.from_env()
assert rt.plan.config.micro_batch == args.micro_batch, (rt.plan.config.micro_batch, args.micro_batch)
model, opt, batches = prepared(rt)
for _ in range(rt.total_steps or 5):
    rt.train_step(model, opt, batches)
rt.finish(model)
