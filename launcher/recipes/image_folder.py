"""The class-per-folder images of ``--recipe image-classification``: listed and checked without torch.

    DATA/cat/0001.jpg  DATA/cat/0002.png  DATA/dog/0001.jpg ...

Classes are the sub-folders, in sorted order (torchvision's ``ImageFolder`` convention), images
the files with an image suffix inside each (recursively; hidden files and folders skipped).
``launcher.recipes.checks`` lists the folder before any process starts and reads the first bytes
of each image (up to ``MAGIC_CHECKS`` of them) to see that it is a regular file of the format its suffix
says, and decodes ``DECODE_CHECKS`` of them in full (``decode_problem``: truncated files, decompression
bombs); the ranks list it again with the same function, and a file that still fails to decode names
itself, or is skipped and counted (``--bad-samples skip``).
"""

from __future__ import annotations

import os
from pathlib import Path

SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".ppm", ".tif", ".tiff")
MAGIC_CHECKS = 20_000  # files whose first bytes are read up front (a few seconds for a big folder)
BAD_SAMPLES = ("stop", "skip")  # the recipe's --bad-samples: stop at an unreadable image (naming it), or skip and count it
DECODE_CHECKS = 64  # images decoded in full up front, spread over the folder (truncated files, bombs)
# Pillow's own decompression-bomb limit (Image.MAX_IMAGE_PIXELS, 89.5 M pixels: a 0.5 GB RGB image) is
# kept, and reaching it is refused rather than warned about: no training image is that large.
FIX = "give a folder with one sub-folder per class, each holding that class's images (JPEG, PNG, ...)"


def _magic_ok(path: Path) -> bool:
    from advisor.files import open_regular

    try:
        with open_regular(path, text=False) as f:  # a FIFO named x.jpg would block a plain open()
            head = f.read(12)
    except (OSError, ValueError):
        return False
    return (head.startswith(b"\xff\xd8\xff") or head.startswith(b"\x89PNG\r\n\x1a\n") or head.startswith(b"GIF8")
            or head.startswith(b"BM") or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")
            or head[:2] in (b"P3", b"P6") or head[:4] in (b"II*\x00", b"MM\x00*"))


class BadImage(ValueError):
    """One file of the folder is no image Pillow can decode (``check_folder`` names it)."""


def load_rgb(path: str):
    """The image at ``path``, decoded in full as RGB; ``ValueError`` saying why not (not a regular file,
    a truncated file, a decompression bomb, not an image), so a rank can name the file or skip it."""
    import warnings

    from PIL import Image

    from advisor.files import open_regular

    try:
        with open_regular(path, text=False) as f, warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(f) as img:
                return img.convert("RGB")
    except (Image.DecompressionBombWarning, Image.DecompressionBombError):
        raise ValueError(f"more than {Image.MAX_IMAGE_PIXELS:,} pixels, a decompression bomb (Pillow's limit)") from None
    except ValueError as exc:  # open_regular: not a regular file
        raise ValueError(str(exc).removeprefix(f"{path}: ")) from None
    except Exception as exc:  # noqa: BLE001 - Pillow raises OSError, SyntaxError, struct.error, ... on bad files
        raise ValueError(f"cannot decode this image ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from None


def decode_problem(path: str) -> str | None:
    """Why ``load_rgb`` cannot decode ``path``, or None."""
    try:
        load_rgb(path)
    except ValueError as exc:
        return str(exc)
    return None


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


def check_folder(root: Path, max_classes: int, *, micro_batch: int = 1, world: int = 1,
                 files: bool = True) -> tuple[list[str], int]:
    """(class names, images) of a usable folder; ValueError saying what is wrong otherwise. ``files``
    False (``--bad-samples skip``): the images themselves are not checked, the ranks skip bad ones."""
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
    from advisor.files import is_regular, kind_of

    for path, _ in (samples[:MAGIC_CHECKS] if files else []):
        if not is_regular(path):
            try:
                kind = kind_of(os.stat(path).st_mode)
            except OSError:
                kind = "a broken link or unreadable"
            raise BadImage(f"{path}: {kind}, not an image file")
        if not _magic_ok(Path(path)):
            raise BadImage(f"{path}: not an image file (its first bytes are no image format's)")
    step = max(1, len(samples) // DECODE_CHECKS)
    for path, _ in (samples[::step][:DECODE_CHECKS] if files else []):
        problem = decode_problem(path)
        if problem:
            raise BadImage(f"{path}: {problem}")
    if len(samples) < micro_batch * world:
        raise ValueError(f"{root}: {len(samples)} images, fewer than one micro-batch ({micro_batch}) per rank ({world})")
    return classes, len(samples)
