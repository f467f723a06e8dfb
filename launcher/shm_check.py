"""The shared memory DataLoader workers need, checked before a launch (``launcher.preflight``).

A DataLoader worker hands each batch to its rank through shared memory: torch's multiprocessing moves the
batch's tensors into ``/dev/shm`` (``torch.multiprocessing.reductions``, file-descriptor sharing), and a
batch stays there until the rank has consumed it. Per rank, ``num_workers x prefetch_factor`` batches are
in flight (the DataLoader's outstanding-task limit, ``_MultiProcessingDataLoaderIter``), plus the one the
rank is reading. Docker gives a container 64 MB of ``/dev/shm`` unless told otherwise (``docker run
--shm-size``, default "64m"), and a worker that cannot grow its segment dies with SIGBUS ("DataLoader
worker ... is killed by signal: Bus error"), which reads like a crash of the user's code.

What a batch holds is the model's input as the loader returns it: images float32 C x H x W after the
normalisation (plus an int64 label), token ids int64 for ids and labels. The check is a pure function
of the plan and the space (``ShmSpace``: given as data, read from ``/dev/shm`` by ``shm_space``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from advisor.errors import UserError
from advisor.plan import Plan

SHM = "/dev/shm"
GiB = 2**30
# Warn, without refusing, when the workers would take more than this share of what is free: other processes
# (NCCL's own shared-memory transport between ranks on one node, the page cache of tmpfs files) use it too.
WARN_SHARE = 0.5


@dataclass(frozen=True)
class ShmSpace:
    """The shared-memory file system the workers will write to."""

    path: str
    total_bytes: int
    free_bytes: int


@dataclass(frozen=True)
class ShmNeed:
    ranks: int
    batches_per_rank: int
    batch_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.ranks * self.batches_per_rank * self.batch_bytes


def shm_space(path: str = SHM) -> ShmSpace | None:
    """What ``path`` holds (statvfs); None where it is not there (not Linux): nothing to check."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return ShmSpace(path, st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize)


def sample_bytes(plan: Plan) -> int:
    """Bytes of one sample as the loader returns it (see the module docstring)."""
    c, m = plan.config, plan.model
    if m.input_shape:  # --module: its per-sample input, in its dtype, and a label
        width = 8 if m.input_dtype in ("int64", "float64") else 2 if "16" in m.input_dtype else 4
        return math.prod(m.input_shape) * width + 8
    if c.image_size:
        return 3 * c.image_size * c.image_size * 4 + 8
    if c.seq_len:
        return 2 * c.seq_len * 8
    return 3 * 224 * 224 * 4 + 8  # an image at the usual size: the larger of the two kinds


def shm_need(plan: Plan) -> ShmNeed | None:
    """What the plan's workers keep in shared memory on one node; None without workers."""
    if plan.num_workers <= 0:
        return None
    batches = plan.num_workers * (plan.prefetch_factor or 2) + 1
    return ShmNeed(plan.processes_per_node, batches, plan.config.micro_batch * sample_bytes(plan))


def check_shm(plan: Plan, space: ShmSpace | None) -> str | None:
    """Refuse (``UserError``) a plan whose workers cannot fit their batches in ``space``; a warning (str) when
    they take more than ``WARN_SHARE`` of what is free; None when it fits or nothing is to check."""
    need = shm_need(plan)
    if need is None or space is None:
        return None
    have = space.free_bytes
    if need.total_bytes <= WARN_SHARE * have:
        return None
    what = (f"{plan.num_workers} DataLoader worker(s) x prefetch {plan.prefetch_factor or 2} on each of {need.ranks} "
            f"rank(s) keep ~{need.total_bytes / GiB:.2f} GiB of batches in shared memory ({need.batches_per_rank} "
            f"batches of {need.batch_bytes / 2**20:.1f} MiB per rank); {space.path} has {have / GiB:.2f} GiB free "
            f"of {space.total_bytes / GiB:.2f}")
    want = max(1, math.ceil(need.total_bytes * 1.25 / GiB))
    fix = (f"give the container more shared memory (docker run --shm-size={want}g, or --ipc=host; Kubernetes: an "
           f"emptyDir with medium: Memory mounted at {SHM}), or fewer workers or prefetch (--cpus-per-gpu N plans "
           "N - 1 workers per GPU; a smaller --micro-batch holds less)")
    if need.total_bytes > have:
        raise UserError(f"{what}: workers would die with a bus error (SIGBUS)", where=space.path, fix=fix)
    return f"{what}: close to full; {fix}"
