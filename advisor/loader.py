"""The input pipeline as a throughput limit: what the data loader delivers per GPU.

samples/s = min(what the GPUs do, what the loader delivers) (DESIGN.md). The loader's rate is the CPU
cores each GPU's workers get (one left for the training process) x the per-core rate of the data kind:
  jpeg       decode + RandomResizedCrop + flip + normalise at the model's resolution, then the hand-off of each
             batch to the training process (``delivered``: a worker collates the batch into shared memory, a
             page-faulted copy of every float sample: 0.7-1.0 ms of 5.3-7.4 ms a 224 px image on the 2-core VM,
             `python -m benchmarks.gpu_checks.loader_handoff split`): measured on several
             hosts by ``python -m benchmarks.calibration.loader_rate`` (Pillow; torchvision's transforms are the
             same Pillow calls); advisor/data/loader_rates.json holds the lowest host's rate (CPUs differ by 2x
             on this chain), the conservative default for named GPUs, with every host's table for the range
             the report states. This host's own rate on the user's files (``advise probe --data DIR``, and
             ``advise launch --recipe image-classification --data DIR`` before it plans) replaces it: cached
             in the home per host and data kind (``LoaderProbe``, ``probe_path``).
  decoded    pre-decoded uint8 tensors: crop, flip, normalise only (same script)
  tokenized  pre-tokenized text: indexing and collation (same script); never the limit in practice
  synthetic  data made on the device: no limit
("auto": JPEG files for vision models from 128 px, decoded arrays below, as CIFAR's loaders hold them).
DALI on the CPU (``--loader dali-cpu``) decodes with libjpeg-turbo and ROI decoding at the rate fit on
NVIDIA's DALI-CPU rows (advisor/data/multi_gpu.json, ``dali_cpu_per_core``); DALI on the GPU
(``--loader dali``: nvJPEG / the A100's and H100's hardware JPEG decoder) takes the CPU out of it.

Cores per GPU: detected (os.sched_getaffinity and the cgroup's cpu.max quota) when the GPUs are this
machine's, else ``--cpus-per-gpu`` or DEFAULT_CPUS_PER_GPU, and the report says which.
"""

import json
import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DataKind = Literal["auto", "jpeg", "decoded", "tokenized", "synthetic"]
LoaderKind = Literal["pytorch", "dali-cpu", "dali"]
RATES = Path(__file__).with_name("data") / "loader_rates.json"
# A named (not detected) server: 8 cores per GPU, as cloud 8-GPU nodes give (AWS p4d.24xlarge: 96 vCPUs
# = 48 cores for 8 A100s is 6; p5.48xlarge 192 vCPUs = 96 cores for 8 H100s is 12; DGX A100 128 cores = 16).
DEFAULT_CPUS_PER_GPU = 8.0


class InputPipeline(BaseModel):
    """What feeds the GPUs: the data's form, the loader, and the cores each GPU's loader gets."""

    model_config = ConfigDict(extra="forbid")

    data: DataKind = Field("auto", description="auto: JPEG files for vision models, tokenized text otherwise")
    loader: LoaderKind = "pytorch"
    cpus_per_gpu: float = Field(DEFAULT_CPUS_PER_GPU, gt=0)
    cpus_source: str = f"default for named GPUs ({DEFAULT_CPUS_PER_GPU:g} per GPU; --cpus-per-gpu N to state yours)"
    measured_per_core: float | None = Field(None, description="samples/s per core `advise probe --data` measured here")
    measured_source: str | None = None


class HostRate(BaseModel):
    """One host's JPEG rates, as ``benchmarks/calibration/loader_rate.py --record`` measured them."""

    model_config = ConfigDict(extra="forbid")

    cpu: str
    jpeg_per_core: dict[str, float]
    handoff_ms_per_mb: float | None = Field(None, description="a worker's batch hand-off per MB of samples (None: "
                                                              "measured before the hand-off was)")
    note: str = ""


class LoaderRates(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cpu: str = Field(description="the CPU the rates were measured on (the lowest of several hosts)")
    jpeg_per_core: dict[str, float] = Field(description="output resolution (px) -> images/s per core")
    decoded_per_core: dict[str, float]
    tokenized_per_core: float
    source_image: str = ""
    source: str = "python -m benchmarks.calibration.loader_rate"
    hosts: list[HostRate] = Field(default_factory=list, description="every host measured, for the stated range")
    handoff_ms_per_mb: float = Field(0.0, description="a DataLoader worker's batch hand-off (collate into shared "
                                                      "memory) per MB of samples: the slowest host measured")

    def handoff_ms(self, px: int) -> float:
        """The hand-off of one float32 sample at ``px``."""
        return self.handoff_ms_per_mb * sample_mb(px)

    def jpeg_range(self, px: int) -> tuple[float, float] | None:
        """(lowest, highest) JPEG images/s per core at ``px`` over the hosts measured, hand-off included."""
        if not self.hosts:
            return None
        rates = [delivered(_at_resolution(h.jpeg_per_core, px), self.handoff_ms(px)) for h in self.hosts]
        return min(rates), max(rates)


def sample_mb(px: int) -> float:
    """MB of one sample as the chain leaves it: float32, 3 x px x px (ToTensor + Normalize)."""
    return 3 * px * px * 4 / 1e6


def delivered(chain_per_core: float, handoff_ms: float) -> float:
    """Samples/s one worker delivers: the chain's time per sample plus its hand-off's."""
    return 1.0 / (1.0 / chain_per_core + handoff_ms / 1e3)


class LoaderEstimate(BaseModel):
    """What the input pipeline delivers per GPU, and whether it sets the pace."""

    model_config = ConfigDict(extra="forbid")

    data: str
    loader: str
    cpus_per_gpu: float
    cpus_source: str
    workers: float = Field(description="cores decoding per GPU (one left for the training process)")
    per_core_samples_per_s: float | None = Field(None, description="None: not limited by the CPU")
    rate_source: str
    rate_basis: Literal["measured here", "stated", "default", "none"] = Field(
        "none", description="measured here: this host's rate on the user's files (advise probe --data, advise launch "
                            "--data); stated: --loader/measured_per_core given; default: the lowest host measured "
                            "(per_core_range says how far hosts differ); none: not limited by the CPU")
    per_core_range: tuple[float, float] | None = Field(
        None, description="JPEG images/s per core at this resolution over the hosts measured (lowest, highest): how "
                          "far the default may be from this host; `advise probe --data DIR` measures it")
    samples_per_s_per_gpu: float | None = Field(None, description="None: not limited")
    bound: bool = Field(False, description="the loader, not the GPUs, sets samples/s")
    fixes: list[str] = Field(default_factory=list, description="what would lift the limit, with its effect")


def per_core_words(le: LoaderEstimate) -> str | None:
    """One line for a report: the per-core rate assumed, whose it is, and how far hosts differ."""
    if le.per_core_samples_per_s is None:
        return None
    rate = f"{le.per_core_samples_per_s:,.0f} samples/s per core"
    if le.rate_basis == "measured here":
        return f"{rate}, measured on this host"
    if le.rate_basis == "default" and le.per_core_range:
        lo, hi = le.per_core_range
        return (f"{rate}, the slowest host measured (hosts: {lo:,.0f}-{hi:,.0f}); "
                "`advise probe --data DIR` measures this one")
    return f"{rate} ({le.rate_basis})"


@lru_cache(maxsize=1)
def loader_rates() -> LoaderRates | None:
    return LoaderRates(**json.loads(RATES.read_text())) if RATES.exists() else None


def _at_resolution(table: dict[str, float], px: int) -> float:
    """Per-core rate at ``px``: interpolated in pixels (the resize and normalise scale with them)."""
    pts = sorted((int(k), v) for k, v in table.items())
    if px <= pts[0][0]:
        return pts[0][1]
    for (p0, v0), (p1, v1) in zip(pts, pts[1:]):
        if px <= p1:
            w = (px * px - p0 * p0) / (p1 * p1 - p0 * p0)
            return 1.0 / ((1 - w) / v0 + w / v1)  # times interpolate, not rates
    p, v = pts[-1]
    return v * (p * p) / (px * px)


# Below this side, images usually sit in memory as decoded arrays (CIFAR, MNIST: torchvision's datasets
# load them whole): "auto" assumes decoded tensors there, JPEG files from it up (ImageNet-style folders).
JPEG_FROM_PX = 128


def data_kind(pipe: InputPipeline, is_vision: bool, image_size: int | None = None) -> str:
    if pipe.data != "auto":
        return pipe.data
    if not is_vision:
        return "tokenized"
    return "decoded" if image_size is not None and image_size < JPEG_FROM_PX else "jpeg"


def loader_estimate(pipe: InputPipeline, *, is_vision: bool, image_size: int | None, gpu_rate_per_gpu: float,
                    dali_cpu_per_core: float, probe: "LoaderProbe | None" = None) -> LoaderEstimate:
    """The loader's samples/s per GPU for this pipeline, against what one GPU would consume. ``probe``: this
    machine's rate on the user's files (``advise probe --data``), used for JPEG through the PyTorch loader."""
    kind = data_kind(pipe, is_vision, image_size)
    workers = max(1.0, math.floor(pipe.cpus_per_gpu) - 1.0)
    base = dict(data=kind, loader=pipe.loader, cpus_per_gpu=pipe.cpus_per_gpu, cpus_source=pipe.cpus_source, workers=workers)
    rates = loader_rates()
    px = image_size or 224
    if kind == "synthetic" or (pipe.loader == "dali" and kind == "jpeg"):
        why = "data made on the device" if kind == "synthetic" else "decoded on the GPU (DALI, nvJPEG): no CPU limit"
        return LoaderEstimate(**base, rate_source=why)
    basis, spread = "stated", None
    if pipe.measured_per_core:
        per_core, src = pipe.measured_per_core, pipe.measured_source or "advise probe --data"
    elif probe is not None and kind == probe.data and pipe.loader == "pytorch":
        per_core, src, basis = probe.rate_at(px), probe.summary(), "measured here"
    elif kind == "jpeg" and pipe.loader == "dali-cpu":
        per_core = dali_cpu_per_core
        src = "DALI on the CPU, fit on NVIDIA's DALI-CPU rows (advisor/data/multi_gpu.json)"
    elif rates is None:
        return LoaderEstimate(**base, rate_source="no loader rates packaged")
    elif kind == "jpeg":
        per_core = delivered(_at_resolution(rates.jpeg_per_core, px), rates.handoff_ms(px))
        basis, spread = "default", rates.jpeg_range(px)
        measured = (f"; {len(rates.hosts)} hosts measured {spread[0]:,.0f}-{spread[1]:,.0f} images/s per core "
                    f"({', '.join(h.cpu for h in rates.hosts)}): the lowest assumed, `advise probe --data DIR` "
                    "measures this host's" if spread else "")
        src = (f"Pillow decode + RandomResizedCrop + flip + normalise at {px} px{_handoff_words(rates, px)}, measured "
               f"on {rates.cpu} ({rates.source}){measured}")
    elif kind == "decoded":
        per_core, basis = delivered(_at_resolution(rates.decoded_per_core, px), rates.handoff_ms(px)), "default"
        src = (f"pre-decoded uint8 tensors: crop + flip + normalise at {px} px{_handoff_words(rates, px)}, measured on "
               f"{rates.cpu} ({rates.source})")
    else:
        per_core, basis = rates.tokenized_per_core, "default"
        src = f"pre-tokenized text: indexing + collation, measured on {rates.cpu} ({rates.source})"
    rate = per_core * workers
    bound = rate < gpu_rate_per_gpu
    fixes: list[str] = []
    if bound and kind in ("jpeg", "decoded"):
        need = math.ceil(gpu_rate_per_gpu / per_core) + 1
        fixes.append(f"{need} CPU cores per GPU would keep up (--cpus-per-gpu {need}): x{gpu_rate_per_gpu / rate:.2f}")
        if kind == "jpeg":
            if rates is not None:
                dec = delivered(_at_resolution(rates.decoded_per_core, px), rates.handoff_ms(px)) * workers
                # each fix as its effect on samples/s only: the report states the rate once (issue 40)
                fixes.append(f"pre-decoded, pre-resized images (FFCV, or uint8 tensors: --data decoded): "
                             f"x{min(dec, gpu_rate_per_gpu) / rate:.2f}")
            fixes.append(f"decoding on the GPU (NVIDIA DALI, --loader dali): x{gpu_rate_per_gpu / rate:.2f}, no CPU decode")
    if bound and basis == "default":
        fixes.append("the rate assumed is the slowest host measured: `advise probe --data DIR` measures this host's "
                     "on your files")
    return LoaderEstimate(**base, per_core_samples_per_s=per_core, rate_source=src, rate_basis=basis,
                          per_core_range=spread, samples_per_s_per_gpu=rate, bound=bound, fixes=fixes)


def _handoff_words(rates: LoaderRates, px: int) -> str:
    if not rates.handoff_ms_per_mb:
        return ""
    return f" + the batch hand-off to the training process ({rates.handoff_ms(px):.2f} ms a sample, the slowest host's)"


def detected_cpus(gpus_on_node: int) -> tuple[float, str]:
    """Cores per GPU this process may use: the CPU affinity set, capped by the cgroup v2 cpu.max quota."""
    try:
        cores = float(len(os.sched_getaffinity(0)))
        how = "CPU affinity"
    except (AttributeError, OSError):
        cores, how = float(os.cpu_count() or 1), "os.cpu_count"
    quota = _cgroup_quota()
    if quota is not None and quota < cores:
        cores, how = quota, "cgroup cpu.max quota"
    per_gpu = cores / max(1, gpus_on_node)
    return per_gpu, f"detected: {cores:g} cores ({how}) / {gpus_on_node} GPU(s)"


def _cgroup_quota(path: str = "/sys/fs/cgroup/cpu.max") -> float | None:
    try:
        quota, period = Path(path).read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return float(quota) / float(period)
    except ValueError:
        return None


# ---------------------------------------------------------------- a measured rate (`advise probe --data DIR`)
# One file per host and data kind: a home on a shared file system serves several machines, and their CPUs differ
# (loader-rate-HOST-jpeg.json). LEGACY_FILE: what an older cardwise stored, without its host (read as this host's).
LEGACY_FILE = "loader-rate.json"


class LoaderProbe(BaseModel):
    """This machine's loader rate on the user's own files, measured by ``advise probe --data DIR`` or by
    ``advise launch --data DIR`` before it plans (launcher.loader_probe): what one DataLoader worker running the
    image recipe's dataset delivers per second of its core, the batch hand-off included. A file an older cardwise
    wrote timed the transform chain alone (``method`` "transform loop"): the packaged hand-off is added to it."""

    model_config = ConfigDict(extra="forbid")

    per_core: float = Field(gt=0, description="images/s one core delivers (method says whether hand-off included)")
    method: Literal["transform loop", "dataloader worker"] = Field(
        "transform loop", description="dataloader worker: one worker, batches collated as the recipe does, in its CPU "
                                      "time; transform loop: the chain alone (files an older cardwise wrote)")
    batch: int | None = Field(None, description="images per batch the worker collated")
    transform: str | None = Field(None, description="the image recipe's transform it timed: torchvision, or "
                                                    "Pillow + torch where torchvision does not import")
    transform_ms: float | None = Field(None, description="the chain's time per image in the worker")
    handoff_ms: float | None = Field(None, description="the rest of the worker's time per image: the batch hand-off")
    data: Literal["jpeg"] = "jpeg"
    image_size: int = Field(description="output resolution the chain produced, px")
    files: int = Field(description="files timed")
    directory: str
    cpu: str
    host: str = Field("", description="the host name it was measured on ('' in files an older cardwise wrote)")
    when: float
    source: str = "advise probe --data"

    def rate_at(self, px: int) -> float:
        """What one worker delivers at ``px``: the chain's time scales as the packaged table's between the two
        resolutions (the decode is the same file's, the resize and normalise scale with pixels), the hand-off
        with the sample's bytes. A chain-only probe gets the packaged hand-off added."""
        rates = loader_rates()
        chain_scale = 1.0 if rates is None else (
            _at_resolution(rates.jpeg_per_core, self.image_size) / _at_resolution(rates.jpeg_per_core, px))
        if self.method == "transform loop":
            return delivered(self.per_core / chain_scale, rates.handoff_ms(px) if rates else 0.0)
        if px == self.image_size or self.transform_ms is None or self.handoff_ms is None:
            return self.per_core
        hand_share = self.handoff_ms / (self.transform_ms + self.handoff_ms)
        scale = (1 - hand_share) * chain_scale + hand_share * sample_mb(px) / sample_mb(self.image_size)
        return self.per_core / scale

    def summary(self) -> str:
        import datetime as _dt

        how = (f"one DataLoader worker, {self.transform or 'the chain'}, batches of {self.batch}, hand-off "
               f"{self.handoff_ms:.2f} ms an image"
               if self.method == "dataloader worker" and self.handoff_ms is not None
               else "the chain alone, an older probe: the packaged hand-off added")
        return (f"measured here by {self.source} {self.directory} on {self.cpu} "
                f"({_dt.date.fromtimestamp(self.when).isoformat()}, {self.files} files; {how})")


def this_host() -> str:
    import socket

    return socket.gethostname() or "localhost"


def probe_path(home: Path, host: str, data: str = "jpeg") -> Path:
    """Where the measurement of ``host`` for ``data`` lives under ``home``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in host)[:120] or "localhost"
    return Path(home) / f"loader-rate-{safe}-{data}.json"


def read_loader_probe(home: Path | None, host: str | None = None, data: str = "jpeg") -> LoaderProbe | None:
    """This host's (or ``host``'s) stored measurement for ``data``; an older home's unkeyed file as a fallback."""
    if home is None:
        return None
    for path in (probe_path(home, host or this_host(), data), Path(home) / LEGACY_FILE):
        try:
            probe = LoaderProbe.model_validate_json(path.read_text())
        except (OSError, ValueError):
            continue
        if probe.data == data:
            return probe
    return None


def save_loader_probe(home: Path, probe: LoaderProbe) -> Path:
    """Replace the stored measurement of its host and data kind; atomic, mode 0600 like the other probe files."""
    from advisor.paths import write_private_atomic

    home = Path(home)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    return write_private_atomic(probe_path(home, probe.host or this_host(), probe.data),
                                probe.model_dump_json(indent=2) + "\n")
