"""Time the CPU input pipeline on image files: ``advise probe --data DIR`` on the user's own files, and
``python -m benchmarks.calibration.loader_rate`` on generated ones (the packaged rates).

The chain is torchvision's ImageNet training transform: decode (Pillow) -> RandomResizedCrop(size)
(scale 0.08-1, ratio 3/4-4/3, bilinear) -> RandomHorizontalFlip -> ToTensor -> Normalize, as the image recipe
runs it (``launcher.recipes.image_classification``: torchvision's transforms when it imports, else
``PilTransform``, the same calls with Pillow and torch; the packaged rates time ``PilTransform``).

What a training run gets is not the chain alone: a DataLoader worker also collates each batch into shared
memory (``default_collate`` allocates the batch there in a worker) for the training process to map. That
hand-off is a fresh page-faulted copy of every sample, 0.7-1.0 ms per 224 px float image against the chain's
4.5-6.1 ms on the development VM (``python -m benchmarks.gpu_checks.loader_handoff split --batch N``, batches of
8-256; benchmarks/notebook/2026-12-08-loader-handoff): a probe that timed
the chain in a loop planned 399 images/s for two workers where the image recipe's run got 260 (issue 39,
benchmarks/gpu_checks/results/loader-fed/). So ``probe_directory`` runs the image recipe's own dataset on the
user's files inside one real DataLoader worker (``worker_rate``), batches collated as the recipe collates them,
timed in that worker's CPU seconds: what one worker delivers per second of its core, whatever else the machine
runs.
"""

from __future__ import annotations

import io
import os
import random
import time
from pathlib import Path
from typing import Callable, NamedTuple

from advisor.errors import UserError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # ImageNet normalisation (torchvision's references)
MAX_FILES = 256
# a typical per-GPU image micro-batch; a worker's rate moves little with it from 32 to 256
# (python -m benchmarks.gpu_checks.loader_handoff split --batch N; notebook 2026-12-08-loader-handoff)
PROBE_BATCH = 64


def imagenet_train_transform(size: int, rng: random.Random) -> Callable[[bytes], object]:
    """bytes of an image file -> normalised float CHW tensor: the image recipe's Pillow + torch transform
    (``PilTransform``: torchvision's algorithm) on the decoded file."""
    from PIL import Image

    from launcher.recipes.image_classification import PilTransform

    transform = PilTransform(size)

    def apply(data: bytes):
        return transform(Image.open(io.BytesIO(data)).convert("RGB"), rng)

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


class WorkerTiming(NamedTuple):
    """One DataLoader worker's rate, and where its time went (per image, in the worker's CPU time)."""

    per_core: float  # images delivered per CPU second of the worker
    transform_ms: float  # decode + crop + flip + normalise
    handoff_ms: float  # the rest: collating the batch into shared memory, queueing it
    batch: int
    images: int  # images timed


class ImageBlobs:
    """Image files held in memory, each item the chain's tensor (``imagenet_train_transform``): the packaged
    rates' generated JPEGs (benchmarks/calibration/loader_rate.py)."""

    def __init__(self, blobs: list[bytes], size: int):
        self.blobs, self.size, self.apply = blobs, size, None

    def __len__(self) -> int:
        return len(self.blobs)

    def __getitem__(self, i: int):
        if self.apply is None:  # built in the worker
            self.apply = imagenet_train_transform(self.size, random.Random(i))
        return (self.apply(self.blobs[i % len(self.blobs)]),)


class _Timed:
    """A stream over a map-style dataset whose items start with the sample tensor: each item is that tensor and
    the worker CPU seconds the dataset took for it (module-level: DataLoader pickles it to workers under spawn)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return 1 << 30  # the probe stops on time, not at an epoch's end

    def __getitem__(self, i: int):
        t0 = time.process_time()
        x = self.dataset[i % len(self.dataset)][0]
        return x, time.process_time() - t0


def _timed_collate(items):
    """The recipe's collation (``default_collate``: in a worker it builds the batch in shared memory), and the
    worker's CPU clock after it: (batch, dataset seconds in it, worker CPU seconds now)."""
    import torch

    batch = torch.utils.data.default_collate([x for x, _ in items])
    return batch, sum(s for _, s in items), time.process_time()


def worker_rate(dataset, *, batch: int = PROBE_BATCH, seconds: float = 3.0) -> WorkerTiming:
    """Images one DataLoader worker delivers per CPU second from ``dataset`` (items starting with the sample
    tensor): its items and the batch hand-off, timed in the worker from the end of its first batch (start-up and
    imports excluded) for ``seconds`` of its CPU time. Wall time is capped too (a starved worker on a busy host
    still ends the probe, on the batches it made)."""
    import torch

    loader = torch.utils.data.DataLoader(_Timed(dataset), batch_size=batch, num_workers=1,
                                         collate_fn=_timed_collate, prefetch_factor=2, timeout=120)
    it = iter(loader)
    try:
        _, _, cpu0 = next(it)
        images, chain, cpu, wall0 = 0, 0.0, cpu0, time.perf_counter()
        while cpu - cpu0 < seconds or images < 2 * batch:
            x, chain_s, cpu = next(it)
            images, chain = images + x.shape[0], chain + chain_s
            if time.perf_counter() - wall0 > 4 * seconds + 10 and images >= batch:
                break
    except RuntimeError as exc:
        if "DataLoader worker" not in str(exc):  # the dataset's own error, raised again in this process
            raise
        # a worker killed (a bus error when /dev/shm is too small) or silent past the timeout
        raise UserError(f"--data: a DataLoader worker failed while timing the loader ({exc})",
                        where="DataLoader worker",
                        fix="give the container more shared memory (docker run --shm-size=8g) and probe again") from exc
    finally:
        del it
    spent = max(cpu - cpu0, 1e-9)
    return WorkerTiming(per_core=images / spent, transform_ms=1e3 * chain / images,
                        handoff_ms=1e3 * max(spent - chain, 0.0) / images, batch=batch, images=images)


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
                    source: str = "advise probe --data", batch: int = PROBE_BATCH):
    """advisor.loader.LoaderProbe of this machine on the files under ``directory``: the image recipe's dataset in
    one DataLoader worker, batches of ``batch`` (``worker_rate``). Every file is read and decoded once first (an
    unreadable one is named, not timed), so the page cache is warm, as in an epoch after the first: the disk's
    speed is not timed."""
    from advisor.loader import LoaderProbe, this_host

    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise UserError("--data: not a directory", where=str(directory),
                        fix="give the folder of training images (an ImageFolder tree), e.g. --data ~/imagenet/train")
    files = image_files(directory)
    if not files:
        raise UserError(f"--data: no image files ({', '.join(IMAGE_SUFFIXES)}) in it or below",
                        where=str(directory), fix="give the folder that holds the training images")
    if progress:
        progress(f"timing one DataLoader worker on {len(files)} files: the image recipe's decode + "
                 f"RandomResizedCrop({size}) + flip + normalise, batches of {batch} into shared memory")
    # each file read and decoded once here: an unreadable one is named, and the page cache is warm for the worker
    apply = imagenet_train_transform(size, random.Random(0))
    good, bad = [], []
    for path in files:
        try:
            apply(path.read_bytes())
            good.append(path)
        except Exception as exc:  # Pillow raises several kinds for a file it cannot read
            bad.append(f"{path.name}: {exc}")
    if not good:
        raise UserError(f"--data: Pillow could not decode any of {len(files)} files ({bad[0]})",
                        where=str(directory), fix="give a folder of JPEG/PNG images")
    # the image recipe's own dataset and transform (torchvision's when it imports) on the files themselves
    from launcher.recipes.image_classification import ImageFolderDataset, training_transform

    transform, which = training_transform(size)
    timing = worker_rate(ImageFolderDataset([(str(p), 0) for p in good], transform, skip_bad=True), batch=batch,
                         seconds=seconds)
    return LoaderProbe(per_core=timing.per_core, image_size=size, files=len(good), directory=str(directory),
                       cpu=cpu_model(), host=this_host(), when=time.time(), source=source, method="dataloader worker",
                       batch=batch, transform=which, transform_ms=timing.transform_ms, handoff_ms=timing.handoff_ms)


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
    --recipe image-classification --data DIR`` does before it plans, so that its loader cap is this host's. A
    stored probe an older cardwise wrote (the transform chain alone, no hand-off) is measured again."""
    from advisor.loader import read_loader_probe, save_loader_probe

    stored = read_loader_probe(home)
    if stored is not None and stored.method == "dataloader worker":
        return stored, False
    probe = probe_directory(directory, size, progress=progress, source="advise launch --data")
    save_loader_probe(home, probe)
    return probe, True
