"""Train a catalog vision model on a class-per-folder image directory.

    advise launch --model vit-b-16 --image-size 224 --recipe image-classification --data images/

Classes are the sub-folders (``launcher.recipes.image_folder``); labels are their sorted indices,
read by the model's 1000-way head (a folder may have up to 1000 classes). Each image is decoded
with Pillow and given the standard ImageNet training transforms (Szegedy et al. 2015's random
resized crop, scale 0.08-1, aspect 3/4-4/3, as torchvision's; a horizontal flip with
probability 1/2; ImageNet mean/std normalisation) at the plan's image size. torchvision's
transforms are used when it imports; otherwise the same transforms are done here with Pillow and
torch (``PilTransform``), so the recipe runs where torchvision cannot load (CPU-only machines
with a CUDA build of it). The DataLoader has the plan's workers, pin_memory and prefetch
(``Runtime.dataloader``); channels_last and pure-bf16 are applied to the inputs on the device.
Each sample's crop and flip come from its key (sample, epoch, seed: ``launcher.data_order``), so a
resumed run augments exactly as the uninterrupted one. An image that cannot be read (not a regular
file, truncated, a decompression bomb) stops the run naming it, or with ``-- --bad-samples skip`` is
replaced by the next readable image and counted (``bad_samples`` in ``metrics.jsonl``).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

import torch

from launcher.recipes import image_folder, startup

DEFAULT_STEPS = 100
# ImageNet channel statistics used by torchvision's pretrained models (torchvision.models docs).
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SCALE = (0.08, 1.0)  # random resized crop: area fraction (Szegedy et al. 2015, "Going deeper")
RATIO = (3 / 4, 4 / 3)  # and aspect ratio range (the same; torchvision's defaults)


class PilTransform:
    """Random resized crop + horizontal flip + normalise with Pillow and torch (torchvision's algorithm)."""

    def __init__(self, size: int):
        self.size = size
        self.mean = torch.tensor(MEAN).view(3, 1, 1)
        self.std = torch.tensor(STD).view(3, 1, 1)

    def crop_box(self, width: int, height: int, rng=random) -> tuple[int, int, int, int]:
        area = width * height
        for _ in range(10):
            target = area * rng.uniform(*SCALE)
            aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
            w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
            if 0 < w <= width and 0 < h <= height:
                top, left = rng.randint(0, height - h), rng.randint(0, width - w)
                return left, top, left + w, top + h
        side = min(width, height)  # fallback: the central square (torchvision's falls back to a centre crop too)
        left, top = (width - side) // 2, (height - side) // 2
        return left, top, left + side, top + side

    def __call__(self, img, rng: random.Random | None = None):
        from PIL import Image

        rng = rng or random.Random()
        img = img.resize((self.size, self.size), Image.BILINEAR, box=self.crop_box(*img.size, rng))
        if rng.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        x = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).view(self.size, self.size, 3)
        x = x.permute(2, 0, 1).float().div_(255)
        return (x - self.mean) / self.std


def training_transform(size: int):
    """torchvision's transforms when it imports, else ``PilTransform`` (the same operations)."""
    try:
        from torchvision import transforms as T
    except Exception:  # not installed, or a CUDA build that cannot load here
        return PilTransform(size), "Pillow + torch"
    return T.Compose([T.RandomResizedCrop(size, scale=SCALE, ratio=RATIO), T.RandomHorizontalFlip(),
                      T.ToTensor(), T.Normalize(MEAN, STD)]), "torchvision"


class ImageFolderDataset(torch.utils.data.Dataset):
    """Images indexed by ``launcher.data_order.SampleKey``: each sample's crop and flip are drawn from its
    key (sample, epoch, seed), not from the process's RNG, so a resumed run augments exactly as the
    uninterrupted one did, whichever worker decodes it and however many batches were skipped."""

    def __init__(self, samples: list[tuple[str, int]], transform, *, skip_bad: bool = False):
        self.samples, self.transform, self.skip_bad = samples, transform, skip_bad

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key):
        """(image tensor, label, skipped): with ``skip_bad``, an unreadable image is replaced by the next
        readable one in the folder's order (the micro-batch keeps its shape) and counted in ``skipped``."""
        from launcher.data_order import SampleKey

        key = key if isinstance(key, SampleKey) else SampleKey(int(key), 0)
        for skipped in range(len(self.samples)):
            index = (key.index + skipped) % len(self.samples)
            path, label = self.samples[index]
            try:
                img = image_folder.load_rgb(path)  # a regular file, decoded in full, no decompression bomb
                break
            except ValueError as exc:
                if not self.skip_bad:
                    raise RuntimeError(f"{path}: {exc} (remove it, or skip unreadable images with "
                                       "`-- --bad-samples skip`)") from None
                print(f"image-classification: skipped {path}: {exc}", file=sys.stderr, flush=True)
        else:
            raise RuntimeError(f"no image of {len(self.samples)} could be read (see the skipped files above)")
        key = key._replace(index=index)
        if isinstance(self.transform, PilTransform):
            return self.transform(img, key.rng()), label, skipped
        with torch.random.fork_rng(devices=[]):  # torchvision draws from torch's RNG: seed it per sample, then put it back
            torch.manual_seed(key.derived_seed())
            return self.transform(img), label, skipped


def collate(items):
    """(images, labels, skipped): a micro-batch, and how many unreadable images ``--bad-samples skip``
    replaced in it (for the run's metrics)."""
    x, y = torch.utils.data.default_collate([(img, label) for img, label, _ in items])
    return x, y, sum(skipped for _, _, skipped in items)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher.recipes.image_classification", description=__doc__.splitlines()[0],
                                allow_abbrev=False)
    p.add_argument("--data", type=Path, required=True, help="folder with one sub-folder of images per class")
    p.add_argument("--bad-samples", choices=image_folder.BAD_SAMPLES, default="stop",
                   help="an image that cannot be read: stop the run naming it (default), or skip it and count it "
                        "(bad_samples in metrics.jsonl)")
    startup.add_step_args(p, DEFAULT_STEPS)
    args = p.parse_args(argv)

    from advisor.catalog import catalog_model
    from advisor.zoo import build_trainable, init_weights

    rt = startup.runtime(args)
    plan = rt.plan
    spec = catalog_model(plan.model.name or "")
    if not spec.is_vision:
        raise SystemExit(f"the image-classification recipe trains vision models, not {spec.name}")
    size = plan.config.image_size or spec.default_image_size or 224
    try:
        classes, _ = image_folder.check_folder(args.data, 1000, micro_batch=plan.config.micro_batch, world=rt.world_size,
                                               files=args.bad_samples == "stop")
        _, samples = image_folder.list_images(args.data)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    transform, how = training_transform(size)
    if rt.is_main:
        print(f"image-classification: {len(samples)} images in {len(classes)} classes at {size}px, "
              f"transforms by {how}, {plan.num_workers} worker(s) per rank", flush=True)

    def build():
        model = build_trainable(spec, image_size=size)
        if spec.arch is not None:
            init_weights(model)
        return model

    model = startup.seeded(build)
    skip_bad = args.bad_samples == "skip"
    loader = rt.dataloader(ImageFolderDataset(samples, transform, skip_bad=skip_bad), shuffle=True, keyed=True,
                           collate_fn=collate)
    model, optimizer, loader = startup.setup_and_prepare(rt, model, loader)
    batches = rt.batches(loader)
    dtype = torch.bfloat16 if plan.config.precision.casts_model else None
    layout = torch.channels_last if plan.config.channels_last else torch.contiguous_format

    if skip_bad:
        rt.counters["bad_samples"] = 0  # in every metrics row from now on: images skipped so far (this rank)

    def loss_fn(m, batch):
        x, y, skipped = batch
        if skipped:
            rt.counters["bad_samples"] += skipped
        x = x.to(dtype=dtype or x.dtype).contiguous(memory_format=layout)
        return m(x, y)

    startup.train_until(rt, startup.step_count(rt, args, DEFAULT_STEPS), model, optimizer, batches, loss_fn=loss_fn)
    rt.finish(model, recipe="image-classification", classes=classes, image_size=size, transforms=how)
    return 0


if __name__ == "__main__":
    sys.exit(main())
