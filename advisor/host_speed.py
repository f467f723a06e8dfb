"""This machine's host dispatch speed, as ``advise probe`` measured it, and what it does to estimates.

Small batches and small models are host-bound: the CPU dispatching eager kernels sets the pace
(``advisor.throughput.host_seconds``). How fast a CPU dispatches is a property of the host, not of
the GPU kind: the same H200 configurations measured on the machines of different calls moved 17%
median apart (up to 1.78x) at small batches and 0.7% at large ones (docs/design.md,
"Host speed"; the notebook entry benchmarks/notebook/2026-12-04-host-speed). The packaged ``launch_us`` is the host of
the benchmark call that fit it; ``advise probe`` times ``launcher.host_dispatch``'s reference
step on this machine and stores it in ``HOME/host-speed.json``; ``host_factor`` (this host's
time over the benchmark host's, ``Calibration.host_dispatch_ref_us``) then multiplies every host
term of estimates for that machine's GPU kind. CPU estimates (the CPU as the device) and plans for
another GPU kind (another machine) keep the reference host.

Pure data and a small file: the measuring is ``launcher.host_dispatch``'s.
"""

import datetime as _dt
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

FILE_NAME = "host-speed.json"
ASSUMED = "assumed: the dispatch speed of the H200 host that fit launch_us"


class HostSpeed(BaseModel):
    """One measurement of the reference step (``launcher.host_dispatch.measure``) on this host."""

    model_config = ConfigDict(extra="forbid")

    us_per_step: float = Field(gt=0, description="median microseconds per reference step")
    ops_per_step: int | None = Field(None, description="aten ops one reference step dispatches")
    device: str = Field(description="the GPU it dispatched to (GPU kind)")
    when: float = Field(default_factory=time.time)
    source: str = "advise probe on this machine"

    @property
    def date(self) -> str:
        return _dt.date.fromtimestamp(self.when).isoformat()


def speed_path(home: Path) -> Path:
    return Path(home) / FILE_NAME


def read_host_speed(home: Path | None) -> HostSpeed | None:
    """The stored measurement; None when there is none or it cannot be read (estimates stay usable)."""
    if home is None:
        return None
    try:
        return HostSpeed.model_validate_json(speed_path(home).read_text())
    except (OSError, ValueError):
        return None


def save_host_speed(home: Path, speed: HostSpeed) -> Path:
    """Replace the stored measurement; atomic, mode 0600 like the run store."""
    from advisor.paths import write_private_atomic

    home = Path(home)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    return write_private_atomic(speed_path(home), speed.model_dump_json(indent=2) + "\n")


def with_host_speed(cal, speed: HostSpeed | None):
    """``cal`` for this host (``Calibration.host``; its factor needs the benchmark host's reference too)."""
    return cal if speed is None else cal.model_copy(update={"host": speed})
