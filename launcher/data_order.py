"""The order a run reads its data in, and the randomness of its augmentations: pure functions of the
seed, the epoch and the sample, so a run resumed from a checkpoint reads exactly what the
uninterrupted run would have read (issue 31).

Why not the usual ``DataLoader(shuffle=True)``: its ``RandomSampler`` draws each epoch's permutation
from a generator whose state advances epoch after epoch (or, without one, from torch's global RNG).
A resumed run starts that generator afresh, so after the first epoch it shuffles differently:
samples repeated or skipped. And augmentations drawn from a process's RNG (torchvision's random
crop and flip, ``random.random()``) depend on everything the process drew before, including the
batches a resumed run skips.

- ``EpochSampler``: the permutation of epoch ``e`` is ``torch.randperm`` under seed ``seed + e``, as
  ``torch.utils.data.DistributedSampler`` and Accelerate's ``SeedableRandomSampler`` do; ``set_epoch``
  chooses the epoch (``DataLoaderShard.set_epoch`` forwards to it; ``set_epoch`` here finds it in a
  plain ``DataLoader`` too). It keeps no generator attribute, so Accelerate does not replace or
  synchronise it, and it never touches the global RNG: the model's own randomness (dropout),
  restored by ``load_state``, goes on where it was.
- ``SampleKey``: with ``keyed=True`` the sampler yields keys (index, epoch, seed) instead of bare
  indices; a dataset draws its augmentation from ``key.rng()`` / ``key.seed()``, the same for that
  sample in that epoch whichever process or worker reads it, however many batches were skipped.
- ``set_epoch`` and ``can_skip_by_sampler``: what ``launcher.checkpoints`` uses to put a resumed
  run at its position: whole epochs by number, the rest by skipping batch indices
  (``accelerator.skip_first_batches``) without loading them.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from typing import NamedTuple

import torch

DATA_SEED = 0  # cardwise's choice; the same on every rank, so ranks agree on each epoch's permutation


class SampleKey(NamedTuple):
    """Which sample, in which epoch, under which seed: what a keyed dataset's ``__getitem__`` receives."""

    index: int
    epoch: int
    seed: int = DATA_SEED

    def derived_seed(self) -> int:
        """A 63-bit seed for this sample's augmentation (blake2b of the key: independent across keys)."""
        digest = hashlib.blake2b(f"{self.seed}:{self.epoch}:{self.index}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") >> 1

    def rng(self) -> random.Random:
        return random.Random(self.derived_seed())


class EpochSampler(torch.utils.data.Sampler):
    """Indices 0..size-1, shuffled by (seed, epoch) when ``shuffle``; ``SampleKey`` s when ``keyed``."""

    def __init__(self, size: int, *, seed: int = DATA_SEED, shuffle: bool = True, keyed: bool = False):
        self.size, self.seed, self.shuffle, self.keyed = size, seed, shuffle, keyed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size

    def order(self) -> list[int]:
        if not self.shuffle:
            return list(range(self.size))
        gen = torch.Generator()
        gen.manual_seed(self.seed + self.epoch)
        return torch.randperm(self.size, generator=gen).tolist()

    def __iter__(self) -> Iterator:
        if self.keyed:
            return iter([SampleKey(i, self.epoch, self.seed) for i in self.order()])
        return iter(self.order())


def _samplers(loader, depth: int = 4):
    """The objects under a loader's ``sampler`` / ``batch_sampler`` chains (Accelerate wraps them twice)."""
    seen, todo = [], [loader]
    for _ in range(depth):
        nxt = []
        for obj in todo:
            for name in ("sampler", "batch_sampler"):
                child = getattr(obj, name, None)
                if child is not None and all(child is not s for s in seen):
                    seen.append(child)
                    nxt.append(child)
        todo = nxt
    return seen


def epoch_sampler(loader) -> EpochSampler | None:
    return next((s for s in _samplers(loader) if isinstance(s, EpochSampler)), None)


def set_epoch(loader, epoch: int) -> None:
    """Put a loader at ``epoch``: Accelerate's loaders (their sampler, DistributedSampler, a dataset
    with ``set_epoch``) and an ``EpochSampler`` inside a plain DataLoader alike."""
    if hasattr(loader, "set_epoch"):
        loader.set_epoch(epoch)
    sampler = epoch_sampler(loader)
    if sampler is not None:
        sampler.set_epoch(epoch)


def can_skip_by_sampler(loader) -> bool:
    """A map-style DataLoader: its first batches of an epoch can be skipped as indices, unread."""
    return (isinstance(loader, torch.utils.data.DataLoader)
            and not isinstance(loader.dataset, torch.utils.data.IterableDataset)
            and loader.batch_sampler is not None)
