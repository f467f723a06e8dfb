"""Test script: the tiny classifier fed by a dataset that sleeps ``--item-s`` per sample, so the rank
waits for data most of each step (read back by the data-bound check)."""

import argparse
import time

import torch

from tiny_run import Tiny

from launcher.runtime import Runtime

p = argparse.ArgumentParser()
p.add_argument("--item-s", type=float, default=0.02)
args = p.parse_args()


class Slow(torch.utils.data.Dataset):
    def __init__(self):
        torch.manual_seed(0)
        self.xs = torch.randn(256, 8)

    def __len__(self):
        return len(self.xs)

    def __getitem__(self, i):
        time.sleep(args.item_s)
        return self.xs[i], (self.xs[i, 0] > 0).long()


rt = Runtime.from_env()
model = rt.setup_model(Tiny())
model, opt, loader = rt.prepare(model, rt.optimizer(model), rt.dataloader(Slow()))
batches = rt.batches(loader)
while rt.step < rt.total_steps:
    rt.train_step(model, opt, batches)
rt.finish(model)
