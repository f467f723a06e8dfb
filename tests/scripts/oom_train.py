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

rt = Runtime.from_env()
assert rt.plan.config.micro_batch == args.micro_batch, (rt.plan.config.micro_batch, args.micro_batch)


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 2)

    def forward(self, x, y):
        return torch.nn.functional.cross_entropy(self.lin(x), y)


torch.manual_seed(0)
xs = torch.randn(64, 8)
data = torch.utils.data.TensorDataset(xs, (xs[:, 0] > 0).long())
model = rt.setup_model(Tiny())
model, opt, loader = rt.prepare(model, rt.optimizer(model), rt.dataloader(data))
batches = rt.batches(loader)
for _ in range(rt.total_steps or 5):
    rt.train_step(model, opt, batches)
rt.finish(model)
