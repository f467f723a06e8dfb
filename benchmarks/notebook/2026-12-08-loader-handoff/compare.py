"""Interleaved rounds on one host: the old probe (the chain in a loop), the new probe (one DataLoader worker,
``loader_probe.worker_rate``), and the image recipe's DataLoader as ``launcher.runtime`` builds it (its dataset
reading the files, its collate, batch 128, persistent workers, shuffle), one worker, rated per wall second and
per the worker's CPU second (/proc/PID/stat, so another tenant's load on a shared VM shows as the gap). The
new probe is ``advise probe --data``'s own (``probe_directory``: since 2026-12-08 02:45 UTC the recipe's dataset
on the files; the first two runs below timed the chain on in-memory files in the worker).

    python benchmarks/notebook/2026-12-08-loader-handoff/compare.py OUT.json [--rounds 5]
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))


def worker_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    out = Path(sys.argv[1])
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 5
    import torch

    from benchmarks.calibration.loader_rate import make_jpegs
    from launcher import loader_probe
    from benchmarks.gpu_checks.loader_workers import draw, runtime_loader
    from launcher.recipes.image_classification import ImageFolderDataset, training_transform

    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="handoff-"))
    blobs = make_jpegs(64)
    for i in range(512):
        d = root / f"c{i % 2}"
        d.mkdir(exist_ok=True)
        (d / f"{i:05d}.jpg").write_bytes(blobs[i % len(blobs)])
    files = sorted(root.glob("c*/*.jpg"))
    data = [p.read_bytes() for p in files[:256]]
    transform, which = training_transform(224)
    ds = ImageFolderDataset([(str(p), int(p.parent.name[1:])) for p in files], transform)
    chain = loader_probe.imagenet_train_transform(224, random.Random(0))
    rows = []
    for r in range(rounds):
        i = [0]

        def one():
            chain(data[i[0] % len(data)])
            i[0] += 1

        loop = loader_probe.calls_per_cpu_second(one, 3.0)
        probe = loader_probe.probe_directory(root, 224, seconds=3.0)  # the product's: the recipe's dataset, one worker
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
    print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in summary.items() if k not in ("rounds",)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
