"""Where a DataLoader worker's time goes, and the loader probe against the image recipe's own loader (issue 39,
point 5; findings in benchmarks/notebook/2026-12-08-loader-handoff/NOTE.md). No GPU needed.

    python -m benchmarks.gpu_checks.loader_handoff split [--batch 64]
    python -m benchmarks.gpu_checks.loader_handoff compare OUT.json [--rounds 5]

split: one worker's time per 224 px image, the chain, the collate into shared memory and the rest, and the
minor page faults per image (the collate's copy lands in fresh shared-memory pages).

compare: interleaved rounds on one host of the old probe (the chain in a loop), ``advise probe --data``'s
(``loader_probe.probe_directory``: the recipe's dataset on the files in one worker) and the image recipe's
DataLoader as ``launcher.runtime`` builds it (``loader_workers.runtime_loader``: batch 128, persistent workers,
shuffle), one worker, rated per wall second and per the worker's CPU second (/proc/PID/stat, so another tenant's
load on a shared VM shows as the gap).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _split_collate(items):
    import torch

    t0 = time.process_time()
    x = torch.utils.data.default_collate([x for x, _ in items])
    t1 = time.process_time()
    return x, t1, sum(s for _, s in items), t1 - t0, resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def split(batch: int) -> None:
    import torch

    from benchmarks.calibration.loader_rate import make_jpegs
    from launcher.loader_probe import ImageBlobs, _Timed

    loader = torch.utils.data.DataLoader(_Timed(ImageBlobs(make_jpegs(64), 224)), batch_size=batch, num_workers=1,
                                         collate_fn=_split_collate)
    it = iter(loader)
    _, c0, _, _, f0 = next(it)
    n, chain, coll = 0, 0.0, 0.0
    while True:
        _, c, s, cc, f = next(it)
        n, chain, coll = n + batch, chain + s, coll + cc
        if c - c0 > 4:
            break
    per = lambda v: 1e3 * v / n  # noqa: E731
    print(f"batch {batch}: {n / (c - c0):.0f} images per worker CPU-s; chain {per(chain):.2f} ms, collate "
          f"{per(coll):.2f} ms, rest {per((c - c0) - chain - coll):.2f} ms an image; {(f - f0) / n:.0f} minor "
          f"faults an image ({3 * 224 * 224 * 4 / 4096:.0f} pages of float32 sample)")


def worker_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def compare(out: Path, rounds: int) -> None:
    import torch

    from benchmarks.gpu_checks.loader_fed import write_folder
    from benchmarks.gpu_checks.loader_workers import draw, runtime_loader
    from launcher import loader_probe
    from launcher.recipes.image_classification import ImageFolderDataset, training_transform

    torch.set_num_threads(1)
    root = write_folder(Path(tempfile.mkdtemp(prefix="handoff-")), 512)
    files = sorted(root.rglob("*.jpg"))
    data = [p.read_bytes() for p in files[:256]]
    transform, which = training_transform(224)
    ds = ImageFolderDataset([(str(p), 0) for p in files], transform)
    chain = loader_probe.imagenet_train_transform(224, random.Random(0))
    rows = []
    for r in range(rounds):
        i = [0]

        def one():
            chain(data[i[0] % len(data)])
            i[0] += 1

        loop = loader_probe.calls_per_cpu_second(one, 3.0)
        probe = loader_probe.probe_directory(root, 224, seconds=3.0)
        loader, it = runtime_loader(ds, 1, 128)
        pid = it._workers[0].pid
        c0, w0 = worker_cpu(pid), time.perf_counter()
        it, got = draw(loader, it, 5)
        wall, cpu = time.perf_counter() - w0, worker_cpu(pid) - c0
        del it, loader
        rows.append({"round": r, "loop": loop, "probe": probe.per_core, "probe_handoff_ms": probe.handoff_ms,
                     "probe_transform_ms": probe.transform_ms, "recipe_wall": got / wall, "recipe_worker_cpu": got / cpu})
        print(json.dumps({k: round(v, 2) for k, v in rows[-1].items()}), flush=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "round"}
    summary = {"cpu": loader_probe.cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__,
               "transform": which, "rounds": rows, "median": med,
               "loop_vs_recipe_wall": med["loop"] / med["recipe_wall"] - 1,
               "probe_vs_recipe_wall": med["probe"] / med["recipe_wall"] - 1,
               "probe_vs_recipe_worker_cpu": med["probe"] / med["recipe_worker_cpu"] - 1,
               "load_average": os.getloadavg()}
    out.write_text(json.dumps(summary, indent=1) + "\n")
    print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in summary.items() if k != "rounds"})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("split", help="where one worker's time goes per image")
    s.add_argument("--batch", type=int, default=64)
    c = sub.add_parser("compare", help="the probes against the recipe's loader, interleaved rounds")
    c.add_argument("out", type=Path)
    c.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    split(a.batch) if a.what == "split" else compare(a.out, a.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
