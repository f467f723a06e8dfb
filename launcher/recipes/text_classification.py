"""Fine-tune mini-transformer on (text, label) rows from a JSONL or CSV file, byte-level.

Tokens are the UTF-8 bytes of the text (ids 0..255) after a leading CLS token (257), padded
with PAD (256): mini-transformer's vocabulary of 258 needs no tokenizer, so any language and
any file works with nothing to download. The classifier reads the CLS position.

Files: JSONL with ``{"text": ..., "label": ...}`` per line, or CSV with a ``text,label`` header.
Labels may be strings or numbers; there must be as many distinct labels as the model has
classes (2). A fraction is held out and accuracy on it is reported at the end (in
``final-rank0.json`` and the log). Ships with ``data/sentiment_sample.jsonl`` (made-up reviews).

    advise launch --cpu --model mini-transformer --seq-len 40 --micro-batch 16 --base-lr 2e-4 \\
        --warmup-steps 20 --recipe text-classification --max-steps 200      # the shipped sample
    advise launch ... --recipe text-classification --data reviews.jsonl     # your own rows

On the sample (600 rows, from scratch, one CPU process) the first command reaches about 0.8
held-out accuracy in 200 steps (3 minutes on 2 cores); at 1e-3 this post-norm model does not train.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import torch

from launcher.recipes import text_rows
from launcher.recipes.text_rows import SAMPLE

PAD, CLS = 256, 257
DEFAULT_SEQ = 128
DEFAULT_STEPS = 100


def encode(text: str, seq_len: int) -> torch.Tensor:
    ids = [CLS] + list(text.encode("utf-8")[: seq_len - 1])
    return torch.tensor(ids + [PAD] * (seq_len - len(ids)), dtype=torch.long)


class TextDataset(torch.utils.data.Dataset):
    def __init__(self, rows: list[tuple[str, str]], labels: dict[str, int], seq_len: int):
        self.x = torch.stack([encode(t, seq_len) for t, _ in rows])
        self.y = torch.tensor([labels[lab] for _, lab in rows], dtype=torch.long)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


@torch.no_grad()
def accuracy(model, dataset: TextDataset, device, batch: int = 64) -> float:
    net = model.net  # advisor.zoo.Trainable: the logits live one level down
    was_training = net.training
    net.eval()
    correct = 0
    for i in range(0, len(dataset), batch):
        x, y = dataset.x[i:i + batch].to(device), dataset.y[i:i + batch].to(device)
        correct += int((net(x).argmax(-1) == y).sum())
    net.train(was_training)
    return correct / max(1, len(dataset))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher.recipes.text_classification", description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=SAMPLE, help="JSONL or CSV of (text, label); default: the shipped sample")
    p.add_argument("--eval-fraction", type=float, default=text_rows.EVAL_FRACTION)
    p.add_argument("--steps", type=int, default=None, help=f"optimizer steps if the plan has none (default {DEFAULT_STEPS})")
    p.add_argument("--log-every", type=int, default=None)
    args = p.parse_args(argv)

    from accelerate.utils import set_seed

    from advisor.catalog import catalog_model
    from advisor.zoo import build_trainable, init_weights
    from launcher.runtime import Runtime

    rt = Runtime.from_env(log_every=args.log_every, clip_grad_norm=1.0)
    plan = rt.plan
    if plan.model.name != "mini-transformer":
        raise SystemExit(f"the text-classification recipe trains mini-transformer, not {plan.model.label()}: "
                         "use --model mini-transformer")
    spec = catalog_model("mini-transformer")
    seq = min(plan.config.seq_len or DEFAULT_SEQ, spec.arch.max_seq)
    # The launch checked the file already (launcher.command.check_target); read it again here
    # for a plan.json launched by another route, failing with the same message.
    try:
        rows = text_rows.read_rows(args.data)
        names = text_rows.label_names(rows, args.data, spec.arch.num_labels)
        text_rows.check_enough(rows, args.data, plan.config.micro_batch, rt.world_size, args.eval_fraction)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    labels = {n: i for i, n in enumerate(names)}
    random.Random(0).shuffle(rows)  # the same split on every rank
    n_eval = text_rows.held_out(len(rows), args.eval_fraction)
    train, held_out = TextDataset(rows[n_eval:], labels, seq), TextDataset(rows[:n_eval], labels, seq)

    set_seed(0)
    model = build_trainable(spec)
    init_weights(model)
    model = rt.setup_model(model)
    model, optimizer, loader = rt.prepare(model, rt.optimizer(model), rt.dataloader(train, shuffle=True))
    rt.tokens_per_sample = seq
    batches = rt.batches(loader)
    steps = rt.total_steps or args.steps or DEFAULT_STEPS
    for _ in range(steps):
        rt.train_step(model, optimizer, batches)
    acc = accuracy(rt.accelerator.unwrap_model(model), held_out, rt.device)
    if rt.is_main:
        print(f"held-out accuracy: {acc:.3f} on {len(held_out)} rows ({', '.join(names)})", flush=True)
    rt.finish(model, recipe="text-classification", eval_accuracy=acc, labels=names)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
