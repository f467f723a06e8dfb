"""Fine-tune mini-transformer on (text, label) rows from a JSONL or CSV file of any size, byte-level.

Tokens are the UTF-8 bytes of the text (ids 0..255) after a leading CLS token (257), padded
with PAD (256): mini-transformer's vocabulary of 258 needs no tokenizer, so any language and
any file works with nothing to download. The classifier reads the CLS position.

Files: JSONL with ``{"text": ..., "label": ...}`` per line, or CSV with a ``text,label`` header.
Labels may be strings or numbers; there must be as many distinct labels as the model has
classes (2). The file is streamed (``RowStream``, an IterableDataset): each rank reads the rows
of its shard and each DataLoader worker a sub-shard of those, through a shuffle buffer, so an
IMDb-sized or larger file never sits in memory. Every ``1/--eval-fraction``-th row is held out;
at the end the ranks evaluate them together and print one line (accuracy and loss), also in
``final-rank0.json``. Ships with ``data/sentiment_sample.jsonl`` (made-up reviews).

    advise launch --cpu --model mini-transformer --seq-len 40 --micro-batch 16 --base-lr 2e-4 \\
        --warmup-steps 20 --recipe text-classification --max-steps 200      # the shipped sample
    advise launch ... --recipe text-classification --data reviews.csv       # your own rows
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import torch

from launcher.recipes import startup, text_rows
from launcher.recipes.text_rows import SAMPLE

PAD, CLS = 256, 257
DEFAULT_SEQ = 128
DEFAULT_STEPS = 100
SHUFFLE_BUFFER = 1024  # rows held by each worker to shuffle a stream (torchdata's shuffle buffer idea)


def encode(text: str, seq_len: int) -> torch.Tensor:
    ids = [CLS] + list(text.encode("utf-8")[: seq_len - 1])
    return torch.tensor(ids + [PAD] * (seq_len - len(ids)), dtype=torch.long)


class RowStream(torch.utils.data.IterableDataset):
    """The rows of one split (train or held out), sharded per rank and per DataLoader worker."""

    def __init__(self, path: Path, labels: dict[str, int], seq_len: int, rank: int, world: int, *,
                 held_out: bool, every: int, limit: int | None = None, shuffle: bool = True):
        self.path, self.labels, self.seq_len = Path(path), labels, seq_len
        self.rank, self.world, self.held_out, self.every = rank, world, held_out, every
        self.limit, self.shuffle = limit, shuffle
        self.epoch = 0

    def _mine(self):
        info = torch.utils.data.get_worker_info()
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        j = 0  # index among this split's rows
        for i, (_, text, label) in enumerate(text_rows.iter_rows(self.path)):
            if text_rows.is_held_out(i, self.every) != self.held_out:
                continue
            if self.limit is not None and j >= self.limit:
                return
            if j % self.world == self.rank and (j // self.world) % workers == worker:
                yield encode(text, self.seq_len), torch.tensor(self.labels[label])
            j += 1

    def __iter__(self):
        self.epoch += 1  # persistent workers keep this copy: each pass shuffles differently
        if not self.shuffle:
            yield from self._mine()
            return
        rng, buf = random.Random(1000 * self.epoch + self.rank), []
        for item in self._mine():
            buf.append(item)
            if len(buf) >= SHUFFLE_BUFFER:
                yield buf.pop(rng.randrange(len(buf)))
        rng.shuffle(buf)
        yield from buf


class OnDevice:
    """A loader's batches moved to the device (re-iterable: one pass per epoch)."""

    def __init__(self, loader, device):
        self.loader, self.device = loader, device

    def __iter__(self):
        for x, y in self.loader:
            yield x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)


@torch.no_grad()
def evaluate(rt, model, stream: RowStream, batch: int = 64) -> dict:
    """Accuracy and mean loss over the held-out rows, summed over every rank's shard."""
    net = rt.accelerator.unwrap_model(model).net  # advisor.zoo.Trainable: the logits live one level down
    was_training = net.training
    net.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=rt.device)  # loss sum, correct, rows
    loader = torch.utils.data.DataLoader(stream, batch_size=batch)
    for x, y in loader:
        x, y = x.to(rt.device), y.to(rt.device)
        with rt.accelerator.autocast():
            logits = net(x).float()
        sums[0] += float(torch.nn.functional.cross_entropy(logits, y, reduction="sum"))
        sums[1] += float((logits.argmax(-1) == y).sum())
        sums[2] += len(y)
    net.train(was_training)
    sums = rt.accelerator.reduce(sums, reduction="sum")
    n = max(1.0, float(sums[2]))
    return {"eval_accuracy": float(sums[1]) / n, "eval_loss": float(sums[0]) / n, "eval_rows": int(sums[2])}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher.recipes.text_classification", description=__doc__.splitlines()[0],
                                allow_abbrev=False)
    p.add_argument("--data", type=Path, default=SAMPLE, help="JSONL or CSV of (text, label); default: the shipped sample")
    p.add_argument("--eval-fraction", type=float, default=text_rows.EVAL_FRACTION)
    p.add_argument("--eval-rows", type=int, default=10_000, help="at most this many held-out rows evaluated at the end")
    startup.add_step_args(p, DEFAULT_STEPS)
    args = p.parse_args(argv)

    from advisor.catalog import catalog_model
    from advisor.zoo import build_trainable, init_weights

    rt = startup.runtime(args)
    plan = rt.plan
    if plan.model.name != "mini-transformer":
        raise SystemExit(f"the text-classification recipe trains mini-transformer, not {plan.model.label()}: "
                         "use --model mini-transformer")
    spec = catalog_model("mini-transformer")
    seq = min(plan.config.seq_len or DEFAULT_SEQ, spec.arch.max_seq)
    # The launch streamed the file once already (launcher.recipes.checks); rank 0 streams it again
    # here (a plan.json launched by another route fails with the same message) and tells the others
    # the labels, so a big file is not read once per rank before training.
    from accelerate.utils import broadcast_object_list

    found = [None]
    if rt.is_main:
        try:
            n_rows, names = text_rows.scan(args.data, spec.arch.num_labels)
            text_rows.check_enough(n_rows, args.data, plan.config.micro_batch, rt.world_size, args.eval_fraction)
            found = [(n_rows, names)]
        except ValueError as exc:
            found = [str(exc)]
    if rt.world_size > 1:
        broadcast_object_list(found)
    if isinstance(found[0], str):
        raise SystemExit(found[0])
    n_rows, names = found[0]
    try:
        every = text_rows.held_out_every(args.eval_fraction)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    labels = {n: i for i, n in enumerate(names)}
    train = RowStream(args.data, labels, seq, rt.rank, rt.world_size, held_out=False, every=every)
    held = RowStream(args.data, labels, seq, rt.rank, rt.world_size, held_out=True, every=every,
                     limit=args.eval_rows, shuffle=False)

    def build():
        model = build_trainable(spec)
        init_weights(model)
        return model

    # The stream shards itself per rank: the loader is not given to Accelerate (which would shard again).
    model, optimizer = startup.setup_and_prepare(rt, startup.seeded(build))
    rt.tokens_per_sample = seq
    batches = rt.batches(OnDevice(rt.dataloader(train, shuffle=False), rt.device))
    startup.train_until(rt, startup.step_count(rt, args, DEFAULT_STEPS), model, optimizer, batches)
    result = evaluate(rt, model, held)
    if rt.is_main:
        print(f"held-out: accuracy {result['eval_accuracy']:.3f}, loss {result['eval_loss']:.4f} on "
              f"{result['eval_rows']} rows ({', '.join(names)})", flush=True)
    rt.finish(model, recipe="text-classification", labels=names, **result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
