"""The arithmetic after a bench: speedups and efficiencies, the estimate beside each measurement,
its error, and the calibration factors (measured / estimated samples/s) saved for later estimates.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from advisor.config import TrainConfig
from advisor.errors import UserError
from launcher.bench.plan import hardware_for, train_config
from launcher.bench.request import BenchRequest, Job
from launcher.bench.result import BenchRow


def _pct(est: float | None, meas: float | None) -> float | None:
    if est is None or not meas:
        return None
    return (est - meas) / meas * 100.0


def finish(rows: list[BenchRow], jobs: list[Job], request: BenchRequest, machine, home: Path | None,
           notes: list[str]) -> tuple[dict[str, float], str | None]:
    """Fill speedups, estimates, errors and calibrated estimates in ``rows`` (in place); save the
    calibration unless ``--no-calibrate``. Returns (factors measured now, path written)."""
    from advisor.calibration import default_calibration
    from advisor.catalog import catalog_model
    from advisor.estimate import estimate
    from launcher import calibrate

    ok = {(r.model, r.variant, r.mode, r.devices): r for r in rows if r.status == "ok"}
    first_variant = request.variants[0].label if request.variants else None
    for r in rows:
        if r.status != "ok":
            continue
        base = ok.get((r.model, r.variant, "single", 1))
        if base is not None and base.samples_per_s:
            r.speedup = r.samples_per_s / base.samples_per_s
            r.efficiency = r.speedup / r.devices
        ref = ok.get((r.model, first_variant, r.mode, r.devices))
        if ref is not None and ref.samples_per_s:
            r.variant_speedup = r.samples_per_s / ref.samples_per_s

    raw = default_calibration()
    samples: list[calibrate.CalibrationSample] = []
    estimable: list[tuple[BenchRow, Job, object, object, TrainConfig]] = []
    for r, job in zip(rows, jobs):
        if r.status not in ("ok", "failed"):
            continue
        try:
            hw = hardware_for(request, machine, job.devices)
        except UserError:
            continue
        spec = catalog_model(job.model)
        config = train_config(job)
        est = estimate(spec, config, hw, calibration=raw)
        r.est_samples_per_s = est.throughput.samples_per_s
        r.est_step_s = est.throughput.step_s
        r.est_exposed_comm_s = est.throughput.exposed_comm_s if job.mode != "single" else None
        r.est_efficiency = est.throughput.scaling_efficiency if job.devices > 1 else 1.0
        r.est_peak_gib = None if request.cpu else est.memory.peak_gib
        r.calibration_key = calibrate.calibration_key(hw.gpu.name, spec.family, config.precision.value, job.mode,
                                                        compile=config.compile, channels_last=config.channels_last)
        if r.status == "ok":
            r.est_error_pct = _pct(r.est_samples_per_s, r.samples_per_s)
            r.peak_error_pct = _pct(r.est_peak_gib, r.peak_gib)
            if r.samples_per_s and r.est_samples_per_s:
                samples.append(calibrate.CalibrationSample(
                    key=r.calibration_key, sample_id=f"{r.model}|{r.variant}|{r.devices}", model=r.model,
                    variant=r.variant, devices=r.devices, measured_samples_per_s=r.samples_per_s,
                    estimated_samples_per_s=r.est_samples_per_s, ratio=r.samples_per_s / r.est_samples_per_s))
        estimable.append((r, job, spec, hw, config))

    factors: dict[str, float] = {}
    path = None
    if samples:
        current = calibrate.read_calibration(home) if home is not None else calibrate.CalibrationFile()
        merged = calibrate.merge(current, samples)
        factors = {s.key: merged.measured[s.key] for s in samples}
        if request.calibrate and home is not None:
            path = str(calibrate.write_calibration(home, merged))
        cal = raw.model_copy(update={"measured": {**raw.measured, **merged.measured}})
        for r, job, spec, hw, config in estimable:
            if r.calibration_key in cal.measured:
                r.calibrated_samples_per_s = estimate(spec, config, hw, calibration=cal).throughput.samples_per_s
                if r.status == "ok":
                    r.calibrated_error_pct = _pct(r.calibrated_samples_per_s, r.samples_per_s)
    return factors, path


def summary_errors(rows: list[BenchRow], key: str) -> tuple[float | None, float | None, int]:
    """(median |error|, worst |error|, n) of ``key`` over measured rows."""
    vals = [abs(getattr(r, key)) for r in rows if r.status == "ok" and getattr(r, key) is not None]
    if not vals:
        return None, None, 0
    return statistics.median(vals), max(vals), len(vals)
