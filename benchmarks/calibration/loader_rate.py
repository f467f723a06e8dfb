"""Per-core rate of the CPU input pipeline by data kind (advisor/data/loader_rates.json).

    python -m benchmarks.calibration.loader_rate            # measure this host, print the row
    python -m benchmarks.calibration.loader_rate --seconds 2

One process, one thread (torch.set_num_threads(1)): what one DataLoader worker does per second.
- jpeg: ImageNet-like JPEGs (500x375, quality 90, ImageNet's median size; natural-looking content made of
  gradients, shapes and blended noise, so the files are ImageNet's average ~110 KB) decoded with Pillow,
  then launcher.loader_probe's chain: RandomResizedCrop(size) + horizontal flip (Pillow, as torchvision's
  transforms call it) + to tensor + normalise (torch ops). torchvision is not installable beside the CPU
  torch here, so the chain is written with Pillow + torch, the calls torchvision.transforms makes on PIL
  images; `advise probe --data DIR` times the same chain on the user's files.
- decoded: uint8 CHW tensors already at 1.14x the size (pre-resized): random crop + flip + float + normalise.
- tokenized: indexing 512-token rows out of a token array and stacking them (collation).
- handoff_ms_per_mb: the chain at 224 px inside one real DataLoader worker (``loader_probe.worker_rate``,
  batches of 64 collated into shared memory as the recipe's are), its time per image beyond the chain's, per
  MB of float32 sample: what a worker spends handing each batch to the training process. The fit keeps the
  largest host's (rows measured before it have none), and advisor.loader adds it to every default rate.
Each host measured is a row of benchmarks/calibration/results/loader-rate-hosts.jsonl (``--record`` appends this
host's, with ``--note`` saying how the machine was loaded). The packaged file is the fit of those rows
(``--fit``; tests/test_loader_hosts.py checks it is): per data kind and resolution the LOWEST host's rate, the
conservative default for GPUs named without data, and every host's JPEG table, so that the report states the
measured range. CPUs differ by 2x on this chain (a Xeon's 420 and an EPYC's ~200 images/s at 224 px).

    python -m benchmarks.calibration.loader_rate --record --note "quiet, 16 cores"   # measure this host, refit
    python -m benchmarks.calibration.loader_rate --fit                              # refit from the rows
"""

from __future__ import annotations

import io
import json
import os
import platform
import random
import sys
from pathlib import Path

from advisor.loader import sample_mb
from launcher.loader_probe import MEAN, STD, ImageBlobs, cpu_model, imagenet_train_transform, worker_rate
from launcher.loader_probe import calls_per_cpu_second as rate

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "advisor" / "data" / "loader_rates.json"
SIZES = (128, 160, 224, 288, 384)


def make_jpegs(n: int = 16, w: int = 500, h: int = 375, quality: int = 90) -> list[bytes]:
    from PIL import Image, ImageDraw, ImageFilter

    rng = random.Random(0)
    out = []
    for _ in range(n):
        img = Image.linear_gradient("L").resize((w, h)).convert("RGB")
        d = ImageDraw.Draw(img)
        for _ in range(40):
            x, y = rng.randrange(w), rng.randrange(h)
            r = rng.randrange(10, 120)
            d.ellipse([x - r, y - r, x + r, y + r], fill=tuple(rng.randrange(256) for _ in range(3)))
        img = img.filter(ImageFilter.GaussianBlur(2))
        # photographs' texture: sensor-like noise blended in, so the files land at ImageNet's ~110 KB
        noise = Image.merge("RGB", [Image.effect_noise((w, h), 64) for _ in range(3)])
        img = Image.blend(img, noise, 0.35)
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=quality)
        out.append(buf.getvalue())
    return out


def measure(seconds: float) -> dict:
    import torch

    rng = random.Random(1)
    jpegs = make_jpegs()
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    jpeg, decoded = {}, {}
    for size in SIZES:
        i = [0]
        chain = imagenet_train_transform(size, rng)  # the recipe's PilTransform on each decoded file

        def one_jpeg(chain=chain):
            i[0] += 1
            return chain(jpegs[i[0] % len(jpegs)])

        jpeg[str(size)] = round(rate(one_jpeg, seconds), 1)
        stored = torch.randint(0, 256, (3, int(size * 1.14), int(size * 1.14)), dtype=torch.uint8)

        def one_decoded(size=size, stored=stored):
            y, x = rng.randint(0, stored.shape[1] - size), rng.randint(0, stored.shape[2] - size)
            t = stored[:, y:y + size, x:x + size]
            if rng.random() < 0.5:
                t = t.flip(2)
            return (t.float().div_(255) - mean) / std

        decoded[str(size)] = round(rate(one_decoded, seconds), 1)
    tokens = torch.randint(0, 50000, (10000, 512), dtype=torch.int64)

    def one_text():
        idx = [rng.randrange(tokens.shape[0]) for _ in range(32)]
        return torch.stack([tokens[j] for j in idx])

    text = round(rate(one_text, seconds) * 32, 1)
    worker = worker_rate(ImageBlobs(jpegs, 224), seconds=seconds)
    from PIL import __version__ as pil_version

    return {"cpu": cpu_model(), "jpeg_per_core": jpeg, "decoded_per_core": decoded, "tokenized_per_core": text,
            "handoff_ms_per_mb": round(worker.handoff_ms / sample_mb(224), 3),
            "worker_224": {"per_core": round(worker.per_core, 1), "transform_ms": round(worker.transform_ms, 3),
                           "handoff_ms": round(worker.handoff_ms, 3), "batch": worker.batch, "images": worker.images},
            "source_image": f"500x375 JPEG q90, Pillow {pil_version}, torch {torch.__version__}, 1 thread",
            "source": "python -m benchmarks.calibration.loader_rate"}


HOSTS = Path(__file__).parent / "results" / "loader-rate-hosts.jsonl"


def fit(rows: list[dict]) -> dict:
    """The packaged rates from every host's row: the lowest per kind and resolution, the largest hand-off of the
    hosts that measured one, and each host's JPEG table."""
    def lowest(key: str) -> dict[str, float]:
        return {px: min(r[key][px] for r in rows) for px in rows[0][key]}

    handoffs = [r["handoff_ms_per_mb"] for r in rows if r.get("handoff_ms_per_mb") is not None]
    return {"cpu": f"the slowest of {len(rows)} hosts measured, per data kind and resolution",
            "jpeg_per_core": lowest("jpeg_per_core"), "decoded_per_core": lowest("decoded_per_core"),
            "tokenized_per_core": min(r["tokenized_per_core"] for r in rows),
            "handoff_ms_per_mb": max(handoffs, default=0.0),
            "source_image": rows[0]["source_image"], "source": "python -m benchmarks.calibration.loader_rate --fit",
            "hosts": [{"cpu": r["cpu"], "jpeg_per_core": r["jpeg_per_core"],
                       "handoff_ms_per_mb": r.get("handoff_ms_per_mb"), "note": r.get("note", "")} for r in rows]}


def read_rows(path: Path = HOSTS) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    args = sys.argv[1:]
    seconds = float(args[args.index("--seconds") + 1]) if "--seconds" in args else 3.0
    if "--fit" not in args:
        row = measure(seconds)
        row.update(python=sys.version.split()[0], platform=platform.platform(), cores=os.cpu_count(),
                   note=args[args.index("--note") + 1] if "--note" in args else "")
        print(json.dumps(row, indent=1))
        if "--record" not in args:
            return
        with HOSTS.open("a") as f:
            f.write(json.dumps(row) + "\n")
    OUT.write_text(json.dumps(fit(read_rows()), indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
