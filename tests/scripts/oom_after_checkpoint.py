"""Test script: saves checkpoints, then dies of a (simulated) CUDA OOM after step 2 above a micro-batch.

`oom_after_checkpoint.py --limit 2` under `advise launch --checkpoint-every 1`: an attempt whose
micro-batch is above the limit trains 2 steps (``--oom-at``), saves that step's checkpoint and raises
the OOM; an attempt within it trains to the end. Each attempt writes the step it started at
(``start-attempt{N}.json``: not 0 when it resumed a checkpoint) and, at the end, whether each step
ended on a gradient sync (``synced-attempt{N}.json``). Like oom_train.py it records the argv it received
(``argv-attempt{N}-rank{R}.json``), so that one run also shows the placeholders each attempt filled in
(``--micro-batch {micro_batch} --grad-accum {grad_accum} --lr {lr}``: checked against the plan when given).
"""

import argparse
import json
import os
import sys

import torch

from tiny_run import prepared

from launcher.runtime import Runtime

p = argparse.ArgumentParser()
p.add_argument("--limit", type=int, default=2)
p.add_argument("--oom-at", type=int, default=2, help="the step after which the OOM comes")
p.add_argument("--micro-batch", type=int)
p.add_argument("--grad-accum", type=int)
p.add_argument("--lr", type=float)
args = p.parse_args()

rt = Runtime.from_env()
with open(os.path.join(os.environ["CARDWISE_RUN_DIR"], f"argv-attempt{rt.attempt}-rank{rt.rank}.json"), "w") as f:
    json.dump(sys.argv[1:], f)
c = rt.plan.config
assert args.micro_batch in (None, c.micro_batch) and args.grad_accum in (None, c.grad_accum), (args, c)
model, opt, batches = prepared(rt)  # restores a checkpoint named by $CARDWISE_RESUME: rt.step is where it starts
with open(os.path.join(os.environ["CARDWISE_RUN_DIR"], f"start-attempt{rt.attempt}.json"), "w") as f:
    json.dump(rt.step, f)
synced = []  # whether each optimizer step ended on its last micro-batch (Accelerate's sync_gradients)
while rt.step < rt.total_steps:
    if rt.step == args.oom_at and rt.plan.config.micro_batch > args.limit:
        next(batches)  # the step boundary: this step's checkpoint is saved here
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (simulated by the test)")
    rt.train_step(model, opt, batches)
    synced.append(rt.accelerator.sync_gradients)
with open(os.path.join(os.environ["CARDWISE_RUN_DIR"], f"synced-attempt{rt.attempt}.json"), "w") as f:
    json.dump(synced, f)
rt.finish(model)
