"""Time the CPU input pipeline on image files: ``advise probe --data DIR`` on the user's own files, and
``python -m benchmarks.calibration.loader_rate`` on generated ones (the packaged rates), through one chain.

The chain is torchvision's ImageNet training transform: decode (Pillow) -> RandomResizedCrop(size)
(scale 0.08-1, ratio 3/4-4/3, bilinear) -> RandomHorizontalFlip -> ToTensor -> Normalize. torchvision
does not install beside the CPU torch build cardwise tests on, so it is written with the calls
torchvision.transforms makes on a PIL image (``Image.resize(box=...)``, ``transpose``) and torch ops.
One process, one thread (``torch.set_num_threads(1)``), timed in this process's CPU time: what one
DataLoader worker does per second, whatever else the machine runs.
"""

from __future__ import annotations

import io
import math
import os
import random
import time
from pathlib import Path
from typing import Callable

from advisor.errors import UserError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # ImageNet normalisation (torchvision's references)
MAX_FILES = 256


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


def imagenet_train_transform(size: int, rng: random.Random) -> Callable[[bytes], object]:
    """bytes of an image file -> normalised float CHW tensor, as torchvision's training transform."""
    import torch
    from PIL import Image

    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)

    def apply(data: bytes):
        img = Image.open(io.BytesIO(data)).convert("RGB")
        img = img.resize((size, size), Image.BILINEAR, box=random_resized_crop_box(img.width, img.height, rng))
        if rng.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        t = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).view(size, size, 3)
        return (t.permute(2, 0, 1).float().div_(255) - mean) / std

    return apply


def calls_per_cpu_second(fn: Callable[[], object], seconds: float) -> float:
    """Calls per second of this process's CPU time (the machine may be shared: wall time would count others)."""
    import torch

    torch.set_num_threads(1)
    fn()  # warm
    n, t0 = 0, time.process_time()
    while time.process_time() - t0 < seconds:
        fn()
        n += 1
    return n / max(time.process_time() - t0, 1e-9)


def image_files(directory: Path, limit: int = MAX_FILES) -> list[Path]:
    """Up to ``limit`` image files under ``directory`` (an ImageFolder tree), in a stable order."""
    out: list[Path] = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for f in sorted(files):
            if f.lower().endswith(IMAGE_SUFFIXES):
                out.append(Path(root) / f)
                if len(out) >= limit:
                    return out
    return out


def probe_directory(directory: Path, size: int, seconds: float = 3.0, progress: Callable[[str], None] | None = None,
                    source: str = "advise probe --data"):
    """advisor.loader.LoaderProbe of this machine on the files under ``directory`` (read into memory first,
    so the disk's speed is not timed: a warm page cache, as an epoch after the first)."""
    from advisor.loader import LoaderProbe

    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise UserError("--data: not a directory", where=str(directory),
                        fix="give the folder of training images (an ImageFolder tree), e.g. --data ~/imagenet/train")
    files = image_files(directory)
    if not files:
        raise UserError(f"--data: no image files ({', '.join(IMAGE_SUFFIXES)}) in it or below",
                        where=str(directory), fix="give the folder that holds the training images")
    blobs = [p.read_bytes() for p in files]
    if progress:
        progress(f"timing decode + RandomResizedCrop({size}) + flip + normalise on {len(files)} files, one core")
    apply = imagenet_train_transform(size, random.Random(0))
    bad = []
    for p, b in zip(files, blobs):
        try:
            apply(b)
        except Exception as exc:  # Pillow raises several kinds for a file it cannot read
            bad.append(f"{p.name}: {exc}")
    if len(bad) == len(files):
        raise UserError(f"--data: Pillow could not decode any of {len(files)} files ({bad[0]})",
                        where=str(directory), fix="give a folder of JPEG/PNG images")
    good = [b for b, p in zip(blobs, files) if not any(x.startswith(p.name + ":") for x in bad)]
    i = [0]

    def one():
        apply(good[i[0] % len(good)])
        i[0] += 1

    rate = calls_per_cpu_second(one, seconds)
    from advisor.loader import this_host

    return LoaderProbe(per_core=rate, image_size=size, files=len(good), directory=str(directory), cpu=cpu_model(),
                       host=this_host(), when=time.time(), source=source)


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), recorded beside every rate."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"


def cached_or_measured(home: Path, directory: Path, size: int, progress: Callable[[str], None] | None = None):
    """(probe, measured now): this host's stored JPEG rate if there is one (cached per host and data kind:
    advisor.loader.probe_path), else a measurement on the files under ``directory``, stored. What ``advise launch
    --recipe image-classification --data DIR`` does before it plans, so that its loader cap is this host's."""
    from advisor.loader import read_loader_probe, save_loader_probe

    stored = read_loader_probe(home)
    if stored is not None:
        return stored, False
    probe = probe_directory(directory, size, progress=progress, source="advise launch --data")
    save_loader_probe(home, probe)
    return probe, True
