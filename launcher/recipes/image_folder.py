"""The class-per-folder images of ``--recipe image-classification``: listed and checked without torch.

    DATA/cat/0001.jpg  DATA/cat/0002.png  DATA/dog/0001.jpg ...

Classes are the sub-folders, in sorted order (torchvision's ``ImageFolder`` convention), images
the files with an image suffix inside each (recursively; hidden files and folders skipped).
``launcher.recipes.checks`` lists the folder before any process starts and reads the first bytes
of each image (up to ``MAGIC_CHECKS`` of them) to see that it is the format its suffix says; the
ranks list it again with the same function, and a file that still fails to decode names itself.
"""

from __future__ import annotations

import os
from pathlib import Path

SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".ppm", ".tif", ".tiff")
MAGIC_CHECKS = 20_000  # files whose first bytes are read up front (a few seconds for a big folder)
FIX = "give a folder with one sub-folder per class, each holding that class's images (JPEG, PNG, ...)"


def _magic_ok(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return False
    return (head.startswith(b"\xff\xd8\xff") or head.startswith(b"\x89PNG\r\n\x1a\n") or head.startswith(b"GIF8")
            or head.startswith(b"BM") or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")
            or head[:2] in (b"P3", b"P6") or head[:4] in (b"II*\x00", b"MM\x00*"))


def list_images(root: Path) -> tuple[list[str], list[tuple[str, int]]]:
    """(class names, [(image path, class index)]) in a stable order."""
    root = Path(root)
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
    samples: list[tuple[str, int]] = []
    for idx, name in enumerate(classes):
        for dirpath, dirnames, filenames in os.walk(root / name, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for fn in sorted(filenames):
                if not fn.startswith(".") and fn.lower().endswith(SUFFIXES):
                    samples.append((os.path.join(dirpath, fn), idx))
    return classes, samples


def check_folder(root: Path, max_classes: int, *, micro_batch: int = 1, world: int = 1) -> tuple[list[str], int]:
    """(class names, images) of a usable folder; ValueError saying what is wrong otherwise."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"{root}: not a directory")
    try:
        classes, samples = list_images(root)
    except OSError as exc:
        raise ValueError(f"{root}: cannot list it: {exc.strerror or exc}") from None
    if not classes:
        raise ValueError(f"{root}: no class sub-folders")
    if len(classes) < 2:
        raise ValueError(f"{root}: one class ({classes[0]}); a classifier needs at least 2")
    if len(classes) > max_classes:
        raise ValueError(f"{root}: {len(classes)} classes, more than the model's {max_classes} outputs")
    counts = [0] * len(classes)
    for _, idx in samples:
        counts[idx] += 1
    empty = [c for c, n in zip(classes, counts) if n == 0]
    if empty:
        raise ValueError(f"{root}/{empty[0]}: no images ({', '.join(SUFFIXES[:4])}, ...)"
                         + (f" (and {len(empty) - 1} more empty class folder(s))" if len(empty) > 1 else ""))
    for path, _ in samples[:MAGIC_CHECKS]:
        if not _magic_ok(Path(path)):
            raise ValueError(f"{path}: not an image file (its first bytes are no image format's)")
    if len(samples) < micro_batch * world:
        raise ValueError(f"{root}: {len(samples)} images, fewer than one micro-batch ({micro_batch}) per rank ({world})")
    return classes, len(samples)
