"""Per-core rate of the CPU input pipeline by data kind (advisor/data/loader_rates.json).

    python -m benchmarks.calibration.loader_rate            # measure, write the JSON and the results file
    python -m benchmarks.calibration.loader_rate --seconds 2

One process, one thread (torch.set_num_threads(1)): what one DataLoader worker does per second.
- jpeg: ImageNet-like JPEGs (500x375, quality 90, ImageNet's median size; natural-looking content made of
  gradients, shapes and blended noise, so the files are ImageNet's average ~110 KB) decoded with Pillow,
  then RandomResizedCrop(size) + horizontal flip (Pillow, as torchvision's transforms call it) + to tensor
  + normalise (torch ops). torchvision is not installable beside the CPU torch here, so the chain is
  written with Pillow + torch, the same calls torchvision.transforms makes on PIL images.
- decoded: uint8 CHW tensors already at 1.14x the size (pre-resized): random crop + flip + float + normalise.
- tokenized: indexing 512-token rows out of a token array and stacking them (collation).
Results with the CPU model in benchmarks/calibration/results/loader-rate.json.
"""

from __future__ import annotations

import io
import json
import math
import platform
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "advisor" / "data" / "loader_rates.json"
RESULTS = Path(__file__).parent / "results" / "loader-rate.json"
SIZES = (128, 160, 224, 288, 384)
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # ImageNet normalisation


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


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


def random_resized_crop_box(w: int, h: int, rng: random.Random) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop.get_params: scale (0.08, 1), ratio (3/4, 4/3), 10 tries then centre."""
    area = w * h
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        cw, ch = int(round(math.sqrt(target * ratio))), int(round(math.sqrt(target / ratio)))
        if 0 < cw <= w and 0 < ch <= h:
            x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
            return x, y, x + cw, y + ch
    s = min(w, h)
    return (w - s) // 2, (h - s) // 2, (w + s) // 2, (h + s) // 2


def rate(fn, seconds: float) -> float:
    """Calls per second of this process's CPU time (the machine may be shared: wall time would count others)."""
    fn()  # warm
    n, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds:
        fn()
        n += 1
    return n / (time.process_time() - t0)


def measure(seconds: float) -> dict:
    import torch
    from PIL import Image

    torch.set_num_threads(1)
    rng = random.Random(1)
    jpegs = make_jpegs()
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)

    def to_normalised(img) -> torch.Tensor:
        t = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).view(img.height, img.width, 3)
        return (t.permute(2, 0, 1).float().div_(255) - mean) / std

    jpeg, decoded = {}, {}
    for size in SIZES:
        i = [0]

        def one_jpeg(size=size):
            data = jpegs[i[0] % len(jpegs)]
            i[0] += 1
            img = Image.open(io.BytesIO(data)).convert("RGB")
            box = random_resized_crop_box(img.width, img.height, rng)
            img = img.resize((size, size), Image.BILINEAR, box=box)
            if rng.random() < 0.5:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
            return to_normalised(img)

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
    from PIL import __version__ as pil_version

    return {"cpu": cpu_model(), "jpeg_per_core": jpeg, "decoded_per_core": decoded, "tokenized_per_core": text,
            "source_image": f"500x375 JPEG q90, Pillow {pil_version}, torch {torch.__version__}, 1 thread",
            "source": "python -m benchmarks.calibration.loader_rate"}


def main() -> None:
    seconds = float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 3.0
    res = measure(seconds)
    OUT.write_text(json.dumps(res, indent=1) + "\n")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({**res, "python": sys.version.split()[0], "platform": platform.platform()}, indent=1) + "\n")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
