"""Why a loader-fed run delivers less than the probe's rate times its workers (issue 39, point 5).

The first loader-fed check (results/loader-fed/, an H100 machine, 2026-12-07) planned 399 images/s for 2 DataLoader
workers from `advise probe --data` (200 images/s per core, per CPU second, one process) and measured 260 in the
image recipe's run. This script separates the suspects on the same kind of machine, without training:

1. the probe's rate per CPU second (``launcher.loader_probe``, what the product stores) and per wall second, one
   process: a VM whose host is shared loses wall time to other guests (steal) that CPU time does not see;
2. the recipe's own dataset and transform (``launcher.recipes.image_classification``: file read, torchvision's
   transform when it imports, the per-sample RNG) in one process, per wall second;
3. the same dataset through ``torch.utils.data.DataLoader`` as ``launcher.runtime`` builds it (batch 128,
   persistent workers, pinned memory, the recipe's collate) with 1, 2 and 4 workers, images/s per wall second,
   and the machine's steal share (/proc/stat) over each;
4. what the product now plans with: ``advise probe --data``'s measurement (``loader_probe.probe_directory``: one
   DataLoader worker, the chain and the batch hand-off, per worker CPU second) on the same folder, and each
   worker count's planned rate (workers x that) against 3.

Found with it (2026-12-08, the 2-core development VM): the chain alone 196-209 images/s, one worker 145-176:
a worker's ``default_collate`` builds the batch in shared memory, a fresh page-faulted copy of each float
sample, ~0.9 ms of ~6 per 224 px image (notebook 2026-12-08-loader-handoff).

    python -m benchmarks.gpu_checks.loader_workers OUT [--files 512] [--batches 6]

Writes OUT/loader-workers.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path


def cpu_times() -> tuple[float, float]:
    """(all jiffies, steal jiffies) of the machine, from /proc/stat's first line."""
    with open("/proc/stat") as f:
        parts = [float(x) for x in f.readline().split()[1:]]
    return sum(parts), parts[7] if len(parts) > 7 else 0.0


def steal_share(before: tuple[float, float], after: tuple[float, float]) -> float:
    total = after[0] - before[0]
    return (after[1] - before[1]) / total if total > 0 else 0.0


def runtime_loader(ds, workers: int, batch: int, pin: bool = False):
    """The image recipe's DataLoader as ``launcher.runtime`` builds it (persistent workers, prefetch 2, shuffled,
    the recipe's collate), started: (loader, iterator) after each worker's first batch (start-up, prefetch fill)."""
    import torch

    from launcher.recipes.image_classification import collate

    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, drop_last=True, num_workers=workers,
                                         pin_memory=pin and torch.cuda.is_available(), persistent_workers=True,
                                         prefetch_factor=2, collate_fn=collate)
    it = iter(loader)
    for _ in range(workers):
        next(it)
    return loader, it


def draw(loader, it, batches: int):
    """(iterator, images) after ``batches`` more batches, across epochs."""
    got = 0
    for _ in range(batches):
        try:
            x = next(it)[0]
        except StopIteration:
            it = iter(loader)
            x = next(it)[0]
        got += x.shape[0]
    return it, got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--files", type=int, default=512)
    ap.add_argument("--batches", type=int, default=6, help="timed batches per worker count")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--batch", type=int, default=128)
    a = ap.parse_args()
    import torch

    from benchmarks.gpu_checks.loader_fed import write_folder
    from launcher import loader_probe
    from launcher.recipes.image_classification import ImageFolderDataset, training_transform

    a.out.mkdir(parents=True, exist_ok=True)
    root = write_folder(Path(tempfile.mkdtemp(prefix="loader-workers-")), a.files)
    files = sorted(root.rglob("*.jpg"))
    blobs = [p.read_bytes() for p in files[:64]]  # the in-memory chain's sample
    result: dict = {"cpu": loader_probe.cpu_model(), "cores": os.cpu_count(), "files": a.files,
                    "torch": torch.__version__}

    # 1. the probe's chain, one process: per CPU second (the product's) and per wall second
    apply = loader_probe.imagenet_train_transform(224, random.Random(0))
    torch.set_num_threads(1)
    apply(blobs[0])
    n, w0, c0, s0 = 0, time.perf_counter(), time.process_time(), cpu_times()
    while time.perf_counter() - w0 < 3.0:
        apply(blobs[n % len(blobs)])
        n += 1
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    result["probe"] = {"per_cpu_s": n / cpu, "per_wall_s": n / wall, "steal": steal_share(s0, cpu_times())}

    # 2. the recipe's dataset, one process (file read, its transform, its per-sample RNG)
    transform, which = training_transform(224)
    ds = ImageFolderDataset([(str(p), 0) for p in files], transform)  # labels do not change the time
    ds[0]
    n, w0, c0 = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - w0 < 3.0:
        ds[n % len(ds)]
        n += 1
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    result["dataset"] = {"transform": which, "per_cpu_s": n / cpu, "per_wall_s": n / wall}

    # 3. DataLoader as launcher.runtime builds it (no model, no GPU work): images/s per wall second
    rows = []
    for workers in [int(w) for w in a.workers.split(",")]:
        for pin in (True, False):
            loader, it = runtime_loader(ds, workers, a.batch, pin)
            s0, w0 = cpu_times(), time.perf_counter()
            it, got = draw(loader, it, a.batches)
            wall = time.perf_counter() - w0
            rows.append({"workers": workers, "pin_memory": pin, "images_per_s": got / wall,
                         "per_worker": got / wall / workers, "steal": steal_share(s0, cpu_times())})
            del it, loader
            print(json.dumps(rows[-1]), flush=True)
    result["dataloader"] = rows

    # 4. the product's probe on the same folder, and what it plans for each worker count
    probe = loader_probe.probe_directory(root, 224, seconds=3.0)
    result["product_probe"] = {"per_core": probe.per_core, "transform_ms": probe.transform_ms,
                               "handoff_ms": probe.handoff_ms, "batch": probe.batch}
    for r in rows:
        r["planned"] = probe.per_core * r["workers"]
        r["planned_error"] = r["planned"] / r["images_per_s"] - 1
    (a.out / "loader-workers.json").write_text(json.dumps(result, indent=1) + "\n")
    p, d = result["probe"], result["dataset"]
    print(f"probe chain: {p['per_cpu_s']:.0f}/CPU-s, {p['per_wall_s']:.0f}/wall-s (steal {p['steal']:.0%}); "
          f"recipe dataset ({d['transform']}): {d['per_cpu_s']:.0f}/CPU-s, {d['per_wall_s']:.0f}/wall-s")
    q = result["product_probe"]
    print(f"advise probe --data: {q['per_core']:.0f} images/s per worker (chain {q['transform_ms']:.2f} ms + hand-off "
          f"{q['handoff_ms']:.2f} ms an image, batches of {q['batch']})")
    for r in rows:
        print(f"workers {r['workers']} pin {r['pin_memory']}: {r['images_per_s']:.0f} images/s, "
              f"{r['per_worker']:.0f} per worker, steal {r['steal']:.0%}; planned {r['planned']:.0f} "
              f"({r['planned_error']:+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
