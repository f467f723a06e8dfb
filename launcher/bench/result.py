"""What ``advise bench`` produces: one ``BenchRow`` per configuration, in a ``BenchResult`` that is
also kept as JSON in ``HOME/bench/`` (so reports can be rebuilt from it).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.errors import UserError
from launcher.bench.request import BenchRequest, Job


class BenchRow(BaseModel):
    """One measured (or skipped, or failed) configuration beside its estimate."""

    model_config = ConfigDict(extra="forbid")

    model: str
    family: str
    variant: str
    precision: str
    compile: bool
    channels_last: bool
    mode: str
    processes: int = Field(description="OS processes (ranks): 1 for single and dp")
    devices: int = Field(description="GPUs (or CPU processes) the row uses")
    micro_batch: int = Field(description="per device")
    seq_len: int | None = None
    image_size: int | None = None
    status: Literal["ok", "failed", "skipped", "cancelled"] = "ok"
    reason: str | None = Field(None, description="why skipped or failed")
    run_id: str | None = None
    # measured
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    step_s: float | None = None
    speedup: float | None = Field(None, description="over the single-device row of this model and variant")
    efficiency: float | None = Field(None, description="speedup / devices")
    variant_speedup: float | None = Field(None, description="over the first variant at this mode and count")
    peak_gib: float | None = Field(None, description="max over devices (None on CPU)")
    peak_gib_devices: list[float] | None = None
    gpu_util_pct: float | None = Field(None, description="mean NVML utilisation of the row's GPUs while timed")
    cpu_util_pct: float | None = Field(None, description="CPU use of the run's processes, % of all cores (CPU runs)")
    sync_step_s: float | None = Field(None, description="DDP: forward+backward with the gradient all-reduce")
    nosync_step_s: float | None = Field(None, description="DDP: the same under no_sync()")
    exposed_comm_s: float | None = Field(None, description="DDP: sync_step_s - nosync_step_s")
    dataloader_workers: int | None = None
    loader_samples_per_s: float | None = Field(None, description="the DataLoader alone: the input pipeline's ceiling")
    loader_train_samples_per_s: float | None = Field(None, description="training fed by that DataLoader")
    # estimated (uncalibrated) and after calibration
    est_samples_per_s: float | None = None
    est_step_s: float | None = None
    est_error_pct: float | None = Field(None, description="(estimate - measured) / measured, %")
    est_peak_gib: float | None = None
    peak_error_pct: float | None = None
    est_exposed_comm_s: float | None = None
    est_efficiency: float | None = None
    calibration_key: str | None = None
    calibrated_samples_per_s: float | None = None
    calibrated_error_pct: float | None = None
    wall_s: float | None = Field(None, description="the launch, start to end (process start, build, compile, run)")


class BenchResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    machine: str
    device: str = Field(description="GPU kind (table name) or 'cpu'")
    cpu: bool
    torch: str | None = None
    accelerate: str | None = None
    started: float
    wall_s: float = 0.0
    request: BenchRequest
    rows: list[BenchRow]
    notes: list[str] = Field(default_factory=list)
    factors: dict[str, float] = Field(default_factory=dict, description="calibration factors this bench measured")
    calibration_path: str | None = Field(None, description="where they were saved (None: --no-calibrate)")
    cancelled: bool = False


def row_for(job: Job, **fields) -> BenchRow:
    """The row of ``job`` (its identity columns filled), with ``fields`` (status, measurements)."""
    v = job.variant
    return BenchRow(model=job.model, family=job.family, variant=v.label, precision=v.precision.value,
                    compile=v.compile, channels_last=v.channels_last, mode=job.mode,
                    processes=job.devices if job.mode in ("ddp", "fsdp") else 1, devices=job.devices,
                    micro_batch=job.micro_batch, seq_len=job.seq_len, image_size=job.image_size, **fields)


def save_result(home: Path, result: BenchResult) -> Path | None:
    """Keep every bench's result as JSON in ``HOME/bench/`` (reports can be rebuilt from it)."""
    with contextlib.suppress(OSError, UserError):
        folder = Path(home) / "bench"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(result.started))
        path = folder / f"{stamp}-{'-'.join(result.request.models)[:60]}.json"
        path.write_text(result.model_dump_json(indent=2) + "\n")
        return path
    return None


def load_result(path: Path) -> BenchResult:
    try:
        return BenchResult.model_validate_json(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"not a bench result ({str(exc).splitlines()[0]})", where=str(path),
                        fix="give a file from HOME/bench/ written by `advise bench`") from None
