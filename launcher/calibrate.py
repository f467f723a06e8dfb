"""Per-machine calibration: what ``advise bench`` measured against what the estimator said.

``HOME/calibration.json`` holds, per key ``"gpu|family|precision|mode"`` (the GPU kind's table
name, or ``cpu`` for CPU runs; the model family; the precision; the bench mode), the factor
measured samples/s / estimated samples/s. ``advisor.calibration.load_calibration(home)`` reads
its ``measured`` dict and ``advisor.throughput`` multiplies matching estimates by it, noting
"calibrated on this machine". The file also keeps the samples behind each factor, so that a
factor is the geometric mean over every model and variant benched under its key, and benching
a model again replaces that model's sample instead of piling up:

    {"version": 1,
     "measured": {"H200|decoder|bf16|single": 1.08, ...},
     "samples": {"H200|decoder|bf16|single": {"gpt2|bf16+compile|1": {"ratio": 1.17, ...}, ...}},
     "updated": 1767225600.0}

The estimate a ratio is taken against is always the uncalibrated one (packaged constants only),
so factors never compound over repeated benches.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from advisor.errors import UserError

FILE_NAME = "calibration.json"  # advisor.calibration.load_calibration reads this name
FILE_VERSION = 1


class CalibrationSample(BaseModel):
    """One bench row's evidence for a factor."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="gpu|family|precision|mode")
    sample_id: str = Field(description="model|variant|devices: what replaces this sample when benched again")
    model: str
    variant: str
    devices: int
    measured_samples_per_s: float
    estimated_samples_per_s: float = Field(description="uncalibrated estimate (packaged constants only)")
    ratio: float = Field(description="measured / estimated")
    when: float = Field(default_factory=time.time)


class CalibrationFile(BaseModel):
    """The contents of ``HOME/calibration.json``."""

    model_config = ConfigDict(extra="forbid")

    version: int = FILE_VERSION
    measured: dict[str, float] = Field(default_factory=dict, description="key -> factor (what the estimator reads)")
    samples: dict[str, dict[str, CalibrationSample]] = Field(default_factory=dict)
    updated: float | None = None


from advisor.calibration import calibration_key  # noqa: E402,F401 - one definition, re-exported here


def calibration_path(home: Path) -> Path:
    return Path(home) / FILE_NAME


def read_calibration(home: Path) -> CalibrationFile:
    """The file's contents; an empty calibration when there is none."""
    path = calibration_path(home)
    if not path.exists():
        return CalibrationFile()
    from advisor.files import read_small_text
    from advisor.units import strict_json_loads

    try:
        # A regular file of at most 16 MiB, strict JSON, an object of calibration's shape: nothing else
        # (a device, a FIFO, /etc/passwd linked here) is trusted as measured factors.
        data = strict_json_loads(read_small_text(path))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        if "samples" not in data:  # a file with factors only (hand-written): keep them
            data = {"measured": data.get("measured", {})}
        return CalibrationFile(**data)
    except (OSError, ValueError, TypeError) as exc:
        raise UserError(f"cannot read the calibration file ({str(exc).splitlines()[0].removeprefix(f'{path}: ')})", where=str(path),
                        fix="`advise calibrate --reset` removes it; `advise bench` writes a new one") from None


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def merge(cal: CalibrationFile, samples: list[CalibrationSample]) -> CalibrationFile:
    """``cal`` with ``samples`` added (replacing same-id samples) and the touched factors recomputed."""
    by_key = {k: dict(v) for k, v in cal.samples.items()}
    for s in samples:
        if s.ratio > 0 and math.isfinite(s.ratio):
            by_key.setdefault(s.key, {})[s.sample_id] = s
    measured = dict(cal.measured)
    for key in {s.key for s in samples}:
        if by_key.get(key):
            measured[key] = round(geometric_mean([s.ratio for s in by_key[key].values()]), 6)
    return CalibrationFile(measured=measured, samples=by_key, updated=time.time())


def write_calibration(home: Path, cal: CalibrationFile) -> Path:
    """Write atomically (a reader never sees half a file), mode 0600 like the run store."""
    from launcher.home import ensure_home

    from advisor.paths import write_private_atomic

    ensure_home(Path(home))
    return write_private_atomic(calibration_path(home), cal.model_dump_json(indent=2) + "\n")


def update_calibration(home: Path, samples: list[CalibrationSample]) -> CalibrationFile:
    """Merge ``samples`` into ``HOME/calibration.json`` and save it."""
    cal = merge(read_calibration(home), samples)
    write_calibration(home, cal)
    return cal


def reset_calibration(home: Path) -> int:
    """Remove the file; returns how many factors it held (0 when there was none)."""
    path = calibration_path(home)
    if not path.exists():
        return 0
    from advisor.files import read_small_text
    from advisor.units import strict_json_loads

    try:
        count = len(strict_json_loads(read_small_text(path)).get("measured", {}))
    except (OSError, ValueError, AttributeError, TypeError):
        count = 0
    path.unlink()
    return count


class FactorView(BaseModel):
    """One factor as ``advise calibrate`` shows it."""

    key: str
    gpu: str
    family: str
    precision: str
    mode: str
    factor: float
    samples: int
    models: list[str]
    updated: float | None = None


def factor_views(cal: CalibrationFile) -> list[FactorView]:
    out = []
    for key, factor in sorted(cal.measured.items()):
        parts = (key.split("|") + ["?"] * 4)[:4]
        smp = list(cal.samples.get(key, {}).values())
        out.append(FactorView(key=key, gpu=parts[0], family=parts[1], precision=parts[2], mode=parts[3], factor=factor,
                              samples=len(smp), models=sorted({f"{s.model} {s.variant} x{s.devices}" for s in smp}),
                              updated=max((s.when for s in smp), default=None)))
    return out
