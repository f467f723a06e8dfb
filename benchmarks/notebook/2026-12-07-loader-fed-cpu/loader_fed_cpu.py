"""Does the per-core rate `advise probe --data` measures carry to the image recipe's real DataLoader on the same host?

On the 2-core CPU development machine (no GPU call came: three tries, "no device machine could be started"):

    PYTHONPATH=. python benchmarks/notebook/2026-12-07-loader-fed-cpu/loader_fed_cpu.py OUT.json [--workers 1,2]

1. 512 ImageNet-like JPEGs (benchmarks.calibration.loader_rate.make_jpegs: 500x375 q90), 2 classes;
2. `advise probe --data DIR` (launcher.loader_probe: one core's CPU time);
3. the image recipe's own loader (launcher.recipes.image_classification: ImageFolderDataset, its transform, its
   collate; a torch DataLoader with W workers, batch 32, persistent workers, prefetch 2) drained for ~20 s by a
   consumer that does nothing else (a GPU faster than the loader), in wall time, and the CPU seconds its
   workers spent (psutil, the DataLoader's child processes);
4. the plan's loader cap on a host that gives each worker a core: W x the probe's rate.
The machine is shared (load average ~9 on 2 cores), so the wall rate is what this host's share gives, and
images per worker CPU-second is what carries to a host with dedicated cores: it compares the recipe's
loader (IPC, collation, file reads) with the probe's chain, core for core.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

import psutil  # noqa: E402
import torch  # noqa: E402

from benchmarks.gpu_checks.loader_fed import write_folder  # noqa: E402
from launcher.recipes import image_folder  # noqa: E402
from launcher.recipes.image_classification import ImageFolderDataset, collate, training_transform  # noqa: E402


def drain(data: Path, workers: int, seconds: float, batch: int = 32) -> dict:
    _, samples = image_folder.list_images(data)
    transform, how = training_transform(224)
    ds = ImageFolderDataset(samples, transform)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=workers, collate_fn=collate,
                                         persistent_workers=True, prefetch_factor=2, drop_last=True)
    it = iter(loader)
    next(it)  # workers started and warm
    me = psutil.Process()
    kids = me.children(recursive=True)
    cpu0 = sum(sum(k.cpu_times()[:2]) for k in kids)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        try:
            x, _, _ = next(it)
        except StopIteration:
            it = iter(loader)
            continue
        n += x.shape[0]
    wall = time.perf_counter() - t0
    cpu = sum(sum(k.cpu_times()[:2]) for k in kids) - cpu0
    del it, loader
    return {"workers": workers, "images": n, "wall_s": round(wall, 2), "images_per_s": round(n / wall, 1),
            "worker_cpu_s": round(cpu, 2), "images_per_worker_cpu_s": round(n / cpu, 1) if cpu else None,
            "transform": how}


def main() -> int:
    out = Path(sys.argv[1])
    workers = [int(w) for w in (sys.argv[sys.argv.index("--workers") + 1] if "--workers" in sys.argv else "1,2").split(",")]
    tmp = Path(tempfile.mkdtemp())
    data = write_folder(tmp / "train", 512)
    p = subprocess.run([sys.executable, "-m", "cli.main", "probe", "--data", str(data), "--home", str(tmp / "home"),
                        "--json"], cwd=ROOT, capture_output=True, text=True)
    probe = json.loads(p.stdout)
    rows = []
    for w in workers:
        r = drain(data, w, 20.0)
        r["plan_cap_images_per_s"] = round(w * probe["per_core"], 1)
        r["per_core_vs_probe"] = round(r["images_per_worker_cpu_s"] / probe["per_core"] - 1, 3)
        r["wall_vs_cap"] = round(r["images_per_s"] / r["plan_cap_images_per_s"] - 1, 3)
        r["load_average"] = [round(x, 2) for x in psutil.getloadavg()]
        rows.append(r)
        print(json.dumps(r))
    res = {"probe": probe, "rows": rows, "cpu": probe["cpu"], "cores": psutil.cpu_count(), "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d")}
    out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
