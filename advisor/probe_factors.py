"""Per-model factors measured by ``advise probe``, and how an estimate applies them.

``advise probe`` runs a few real steps of one configuration and divides what it measured by what
the estimator said: peak memory and samples/s. Those two ratios are kept per

    key = model identity | device kind | variant
          "model:gpt2" | "H200" | "bf16+compile"

- model identity: ``model:NAME`` (catalog), ``hf-config:/abs/path/config.json``, or
  ``module:/abs/file.py:FACTORY`` (``module:pkg.mod:FACTORY``): the implementation that ran, so a
  catalog gpt2 and a user's GPT-2 config never share a factor;
- device kind: the estimate's ``GpuSpec.name`` (``H200``; ``cpu`` for CPU probes, a name no GPU
  estimate uses, so a CPU probe never changes a GPU estimate);
- variant: precision, ``+compile``, ``+channels-last``, as ``advisor.calibration.calibration_key``
  writes it (both change memory and speed on their own).

They live in ``HOME/probe-factors.json`` (its own file: ``advise bench``'s ``calibration.json``
keeps its format) and reach estimates through ``Calibration.model_factors``
(``advisor.calibration.load_calibration``). A ratio is always taken against the *uncalibrated*
estimate (packaged constants only), so probing again replaces a factor instead of compounding it,
and a probe factor replaces ``advise bench``'s family factor for that model (it is more specific).

Applied to single-device and DDP estimates (each GPU runs one whole replica, as probed) at any
micro-batch or sequence length of that model; not to FSDP, whose sharded memory was not probed.
"""

from __future__ import annotations

import datetime as _dt
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

FILE_NAME = "probe-factors.json"
FILE_VERSION = 1


class ModelFactor(BaseModel):
    """One probe's evidence: measured over estimated, with the numbers behind it."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="model identity|device|variant")
    model: str = Field(description="model identity (model:NAME, hf-config:PATH, module:SPEC)")
    device: str = Field(description="GPU kind (GpuSpec.name) or 'cpu'")
    variant: str = Field(description="precision[+compile][+channels-last]")
    memory: float | None = Field(None, description="measured / estimated peak memory")
    throughput: float | None = Field(None, description="measured / estimated samples/s")
    measured_peak_gib: float | None = None
    estimated_peak_gib: float | None = Field(None, description="uncalibrated estimate")
    measured_samples_per_s: float | None = None
    estimated_samples_per_s: float | None = Field(None, description="uncalibrated estimate")
    micro_batch: int
    seq_len: int | None = None
    image_size: int | None = None
    when: float = Field(default_factory=time.time)

    @property
    def date(self) -> str:
        return _dt.date.fromtimestamp(self.when).isoformat()


class ProbeFactorsFile(BaseModel):
    """The contents of ``HOME/probe-factors.json``."""

    model_config = ConfigDict(extra="forbid")

    version: int = FILE_VERSION
    factors: dict[str, ModelFactor] = Field(default_factory=dict)


# ---------------------------------------------------------------- keys
def model_identity(spec) -> str:
    """Identity of the implementation a ModelSpec describes (from its ``source``)."""
    src = spec.source or ""
    if src.startswith("hf-config "):
        return "hf-config:" + str(Path(src.split(" ", 1)[1]).expanduser().resolve())
    if src.startswith("module "):
        target, _, factory = src.split(" ", 1)[1].rpartition(":")
        if target.endswith(".py"):  # a file: the same file whatever the working directory
            target = str(Path(target).expanduser().resolve())
        return f"module:{target}:{factory}"
    # A catalog name runs as cardwise's zoo (its recipes) or as the transformers class (a user's script):
    # different code, different factors (the H200 probe of 2026-12-03 applied the zoo's to the HF class).
    impl = spec.implementation or ""
    if impl.startswith("transformers"):
        return f"model:{spec.name}@transformers"
    return "model:" + spec.name


def variant_of(config) -> str:
    return (config.precision.value + ("+compile" if config.compile else "")
            + ("+channels-last" if config.channels_last else ""))


def factor_key(identity: str, device: str, config) -> str:
    return f"{identity}|{device}|{variant_of(config)}"


# ---------------------------------------------------------------- the file
def factors_path(home: Path) -> Path:
    return Path(home) / FILE_NAME


def read_model_factors(home: Path | None) -> dict[str, ModelFactor]:
    """The stored factors; none when there is no file or it cannot be read (estimates stay usable)."""
    if home is None:
        return {}
    path = factors_path(home)
    try:
        return ProbeFactorsFile.model_validate_json(path.read_text()).factors
    except (OSError, ValueError):
        return {}


def save_model_factor(home: Path, factor: ModelFactor) -> Path:
    """Add (or replace) one factor; written atomically, mode 0600 like the run store."""
    home = Path(home)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    data = ProbeFactorsFile(factors={**read_model_factors(home), factor.key: factor})
    from advisor.paths import write_private_atomic

    return write_private_atomic(factors_path(home), data.model_dump_json(indent=2) + "\n")


def with_model_factors(cal, home: Path | None):
    """``cal`` with the home's probe factors in ``model_factors`` (``load_calibration`` calls this)."""
    found = read_model_factors(home)
    if not found:
        return cal
    return cal.model_copy(update={"model_factors": {**cal.model_factors, **found},
                                  "source": f"{cal.source} + advise probe factors ({factors_path(home)})"})


# ---------------------------------------------------------------- applying
def apply_model_factors(est, model, hardware, cal):
    """``est`` (an ``advisor.estimate.Estimate``) with this model's probe factors applied, named in its notes."""
    from advisor.calibration import calibration_key
    from advisor.config import Strategy

    config = est.config
    f = cal.model_factors.get(factor_key(model_identity(model), hardware.gpu.name, config))
    if f is None:
        return est
    if config.strategy is Strategy.fsdp:
        return est.model_copy(update={"notes": est.notes + [
            f"advise probe factors for this model ({f.date}) not applied: the probe ran it unsharded, FSDP shards it"]})
    mem, thr, notes = est.memory, est.throughput, list(est.notes)
    when = f"from advise probe on {f.date}"
    if f.memory:
        peak = mem.peak_gib * f.memory
        device = peak * cal.allocator_reserve + cal.cuda_context_gib
        mem = mem.model_copy(update={
            "peak_gib": peak, "device_gib": device, "fits": device <= mem.gpu_memory_gib * cal.fit_fraction,
            "detail": {**mem.detail, "probe_memory_factor": f.memory}})
        notes.append(f"memory x{f.memory:.2f} {when}")
    ttt = est.time_to_train_h
    if f.throughput:
        bench = cal.measured.get(calibration_key(hardware.gpu.name, model.family, config.precision.value,
                                                 config.strategy.value, compile=config.compile,
                                                 channels_last=config.channels_last)) if thr.calibrated else None
        scale = f.throughput / (bench or 1.0)  # the probe's ratio replaces the family's bench factor
        sps = thr.samples_per_s * scale
        thr = thr.model_copy(update={
            "samples_per_s": sps, "step_s": thr.step_s / scale, "mfu": thr.mfu * scale,
            "tflops_per_gpu": thr.tflops_per_gpu * scale,
            "tokens_per_s": thr.tokens_per_s * scale if thr.tokens_per_s else thr.tokens_per_s, "calibrated": True})
        ttt = ttt / scale if ttt is not None else None
        notes.append(f"throughput x{f.throughput:.2f} {when}" + (" (replaces the advise bench factor)" if bench else ""))
    return est.model_copy(update={"memory": mem, "throughput": thr, "time_to_train_h": ttt, "notes": notes})
