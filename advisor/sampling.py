"""Reading devices while something runs: GPU utilisation and memory (NVML), or the host's CPU.

The one sampler under detection (``advisor.hardware.detect_machine`` reads each GPU with
``read_gpu``), the TUI's live monitor (``DeviceSampler.sample``) and ``advise bench``'s
utilisation column (``DeviceSampler.gpu_samples`` for GPU runs, ``ProcessTreeCpu`` for CPU runs).
NVML, never CUDA: reading never initialises a CUDA context or allocates on a GPU.

Which GPUs to read comes from a ``Machine`` (the hardware description tests build as data), and
``pynvml`` is imported at call time, so a test can stand in a fake module; nothing here patches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # advisor.hardware imports this module
    from advisor.hardware import Machine

GIB = 2**30


class NvmlUnavailable(Exception):
    """NVML cannot be used here (no nvidia-ml-py, no driver); the message says which."""


def open_nvml():
    """Initialise NVML and return the ``pynvml`` module; raises ``NvmlUnavailable`` with the reason."""
    try:
        import pynvml
    except ImportError as exc:  # nvidia-ml-py is a dependency, but be kind to partial installs
        raise NvmlUnavailable(f"nvidia-ml-py not installed ({exc})") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise NvmlUnavailable(f"NVML unavailable: {exc}") from None
    return pynvml


def close_nvml(nv) -> None:
    with contextlib.suppress(Exception):  # shutting down never matters more than the reading
        nv.nvmlShutdown()


@contextlib.contextmanager
def nvml_session() -> Iterator:
    """``with nvml_session() as nv:`` NVML initialised for the block, shut down after it."""
    nv = open_nvml()
    try:
        yield nv
    finally:
        close_nvml(nv)


@dataclass(frozen=True)
class GpuReading:
    """One GPU's memory and utilisation at one moment (utilisation None when NVML will not say)."""

    util_pct: float | None
    used_gib: float
    free_gib: float
    total_gib: float


def read_gpu(nv, handle) -> GpuReading:
    """Memory (raises if NVML cannot read it) and utilisation (None if it cannot) of one GPU handle."""
    mem = nv.nvmlDeviceGetMemoryInfo(handle)
    util = None
    with contextlib.suppress(Exception):  # some GPUs (vGPU, MIG) report no utilisation
        util = float(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
    return GpuReading(util_pct=util, used_gib=mem.used / GIB, free_gib=mem.free / GIB, total_gib=mem.total / GIB)


@dataclass(frozen=True)
class DeviceSample:
    """One device's utilisation and memory at one moment (a GPU, or the CPU when there is none)."""

    label: str
    util_pct: float | None
    mem_used_gib: float | None
    mem_total_gib: float | None


def host_sample() -> DeviceSample:
    """The CPU's utilisation since the last call and the RAM in use (psutil)."""
    try:
        import psutil
    except ImportError:
        return DeviceSample("CPU", None, None, None)
    vm = psutil.virtual_memory()
    return DeviceSample("CPU", psutil.cpu_percent(interval=None), (vm.total - vm.available) / GIB, vm.total / GIB)


class DeviceSampler:
    """Per-GPU utilisation and memory from NVML; CPU and RAM (psutil) when there is no GPU.

    ``machine``: the GPUs to read are its GPUs (``gpus`` narrows them to some NVML indices). NVML
    stays initialised between samples (a monitor samples every second) until ``close()``.
    """

    def __init__(self, machine: Machine | None = None, *, gpus: list[int] | None = None):
        indices = [g.index for g in machine.gpus] if machine is not None else []
        self.gpus = list(gpus) if gpus is not None else indices
        self.gpu = bool(self.gpus)
        self._nvml = None
        self._handles: list = []

    def sample(self) -> list[DeviceSample]:
        """The GPUs, or the host when there are none or NVML stopped answering (driver gone mid-run)."""
        if self.gpu:
            try:
                return self.gpu_samples()
            except Exception:
                self.gpu = False
        return [host_sample()]

    def gpu_samples(self) -> list[DeviceSample]:
        """The GPUs only; raises when NVML cannot read them (callers that must not mix in the host)."""
        if self._nvml is None:
            nv = open_nvml()
            try:
                self._handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in self.gpus]
            except Exception:
                close_nvml(nv)
                raise
            self._nvml = nv
        out = []
        for i, h in zip(self.gpus, self._handles):
            r = read_gpu(self._nvml, h)
            out.append(DeviceSample(f"GPU{i}", r.util_pct, r.used_gib, r.total_gib))
        return out

    def close(self) -> None:
        if self._nvml is not None:
            close_nvml(self._nvml)
            self._nvml = None
            self._handles = []


class ProcessTreeCpu:
    """CPU use of one process and its descendants, as % of all cores, between two ``sample()`` calls.

    The first call for each process only starts its interval (psutil's ``cpu_percent(None)``), so
    ``sample()`` returns None until at least one process has two readings.
    """

    def __init__(self, root_pid: int):
        import psutil

        self.root_pid = root_pid
        self._ncpu = psutil.cpu_count() or 1
        self._known: dict[int, psutil.Process] = {}

    def sample(self) -> float | None:
        import psutil

        try:
            root = psutil.Process(self.root_pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            tree = []
        total, primed = 0.0, False
        for p in tree:
            known = self._known.get(p.pid)
            if known is None:
                self._known[p.pid] = p
                with contextlib.suppress(psutil.Error):
                    p.cpu_percent(None)  # the first call only starts the interval
                continue
            with contextlib.suppress(psutil.Error):
                total += known.cpu_percent(None)
                primed = True
        return total / self._ncpu if primed else None


class FixedSampler:
    """Always the same samples: for tests and screenshots."""

    def __init__(self, samples: list[DeviceSample]):
        self.samples = list(samples)

    def sample(self) -> list[DeviceSample]:
        return list(self.samples)

    def close(self) -> None:
        pass
