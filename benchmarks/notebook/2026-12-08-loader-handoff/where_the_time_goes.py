"""Where one DataLoader worker's time goes per 224 px image: the chain, the collate into shared memory, the rest;
and the minor page faults per image (the collate's copy lands in fresh shared-memory pages).

    python benchmarks/notebook/2026-12-08-loader-handoff/where_the_time_goes.py [--batch 64]
"""

import random
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.calibration.loader_rate import make_jpegs  # noqa: E402
from launcher.loader_probe import imagenet_train_transform  # noqa: E402

BLOBS = make_jpegs(64)
CHAIN = {"s": 0.0}


class Images(torch.utils.data.Dataset):
    apply = None

    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        if self.apply is None:
            self.apply = imagenet_train_transform(224, random.Random(i))
        t0 = time.process_time()
        x = self.apply(BLOBS[i % len(BLOBS)])
        CHAIN["s"] += time.process_time() - t0
        return x


def collate(items):
    t0 = time.process_time()
    x = torch.utils.data.default_collate(items)
    t1 = time.process_time()
    return x, t1, CHAIN["s"], t1 - t0, resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def main():
    batch = int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 64
    it = iter(torch.utils.data.DataLoader(Images(), batch_size=batch, num_workers=1, collate_fn=collate))
    _, c0, s0, _, f0 = next(it)
    n, coll = 0, 0.0
    while True:
        _, c, s, cc, f = next(it)
        n, coll = n + batch, coll + cc
        if c - c0 > 4:
            break
    per = lambda v: 1e3 * v / n  # noqa: E731
    print(f"batch {batch}: {n / (c - c0):.0f} images per worker CPU-s; chain {per(s - s0):.2f} ms, collate "
          f"{per(coll):.2f} ms, rest {per((c - c0) - (s - s0) - coll):.2f} ms an image; {(f - f0) / n:.0f} minor "
          f"faults an image ({3 * 224 * 224 * 4 / 4096:.0f} pages of float32 sample)")


if __name__ == "__main__":
    main()
