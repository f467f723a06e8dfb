"""A plain training script for `advise launch` to fill in (the README's example):

    advise launch --model gpt2 --batch-size 32 -- examples/train.py --lr {lr} --bs {micro_batch} --grad-accum {grad_accum}

Nothing of cardwise is imported: `advise launch` runs it under `accelerate launch` with the Accelerate
config it planned (processes, DDP/FSDP, mixed precision), and replaces the placeholders ``{lr}``,
``{micro_batch}``, ``{grad_accum}``, ``{global_batch}``, ``{warmup_steps}`` with the plan's values
(launcher/command.py). It trains transformers' GPT2LMHeadModel, built from its config (no download), on
random tokens: swap in your data loader. ``--tiny`` builds a 2-layer GPT-2 for a quick check on CPU.
"""

from __future__ import annotations

import argparse
import math

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lr", type=float, required=True, help="peak learning rate ({lr}: scaled for the global batch)")
    p.add_argument("--bs", type=int, required=True, help="micro-batch per GPU ({micro_batch})")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step ({grad_accum})")
    p.add_argument("--warmup-steps", type=int, default=100, help="linear warmup ({warmup_steps})")
    p.add_argument("--steps", type=int, default=100, help="optimizer steps")
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--tiny", action="store_true", help="a 2-layer, 128-wide GPT-2 (CPU check)")
    args = p.parse_args()

    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=2, n_positions=args.seq_len) if args.tiny else GPT2Config()
    acc = Accelerator(gradient_accumulation_steps=args.grad_accum)  # mixed precision etc.: from the launch config
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, args.warmup_steps)) * 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps)))
    samples = args.bs * args.grad_accum * args.steps * acc.num_processes
    tokens = torch.randint(0, cfg.vocab_size, (samples, args.seq_len))  # your dataset here
    loader = DataLoader(TensorDataset(tokens), batch_size=args.bs, shuffle=True, drop_last=True)
    model, opt, loader, sched = acc.prepare(model, opt, loader, sched)  # DistributedSampler, DDP/FSDP wrapping

    model.train()
    step = 0
    for (batch,) in loader:
        with acc.accumulate(model):
            loss = model(input_ids=batch, labels=batch).loss
            acc.backward(loss)
            if acc.sync_gradients:
                acc.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
        if acc.sync_gradients:
            step += 1
            if step % 10 == 0 or step == args.steps:
                acc.print(f"step {step}/{args.steps} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.3g}")
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
