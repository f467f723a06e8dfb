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

Across GPU kinds (issue 14): with no factor for this GPU kind, the newest factor of the same model
and variant measured on another GPU kind transfers through its model-specific part. A measured
ratio is (model part) x (GPU-kind part); the GPU-kind part of a kind is what ``advise bench``
measured there for *other* model families (the geometric mean of their factors; 1.0 when none),
so the transferred factor is ratio / part(measured on) x part(this kind). ``advise bench``'s own
per-model samples (``HOME/calibration.json``) transfer the same way (``origin="bench"``); on
their own GPU kind its family factor already applies. Memory factors transfer as they are (peak
memory depends on the model and configuration, not the GPU kind). Every estimate names what it
used in ``Estimate.calibration`` (``advisor.calibration.CalibrationUsed``).
"""

import datetime as _dt
import math
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.config import Strategy

FILE_NAME = "probe-factors.json"
FILE_VERSION = 1
# The strategy part of a calibration key (advisor.calibration.calibration_key) for a one-GPU run
ONE_GPU = frozenset(s.value for s in Strategy if s.one_gpu)


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
    micro_batch: int | None = None
    seq_len: int | None = None
    image_size: int | None = None
    when: float = Field(default_factory=time.time)
    origin: Literal["probe", "bench"] = Field("probe", description="advise probe, or an advise bench per-model sample")

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
    if spec.is_transformers:
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


def bench_model_factors(samples) -> dict[str, ModelFactor]:
    """``advise bench``'s single-GPU per-model samples (``calibration.json``'s ``samples``) as
    factors another GPU kind can transfer; unreadable entries are skipped (estimates stay usable)."""
    out: dict[str, ModelFactor] = {}
    if not isinstance(samples, dict):
        return out
    for key, by_id in samples.items():
        parts = str(key).split("|")
        if len(parts) != 4 or parts[0] == "cpu" or parts[3] not in ONE_GPU or not isinstance(by_id, dict):
            continue
        for s in by_id.values():
            try:
                ratio, model, variant = float(s["ratio"]), str(s["model"]), str(s["variant"])
                when = float(s.get("when") or 0.0)
            except (KeyError, TypeError, ValueError):
                continue
            if s.get("devices") != 1 or not (ratio > 0 and math.isfinite(ratio)):
                continue
            identity = "model:" + model
            k = f"{identity}|{parts[0]}|{variant}"
            if k not in out or out[k].when < when:
                out[k] = ModelFactor(key=k, model=identity, device=parts[0], variant=variant, throughput=ratio,
                                     measured_samples_per_s=s.get("measured_samples_per_s"),
                                     estimated_samples_per_s=s.get("estimated_samples_per_s"), when=when, origin="bench")
    return out


def gpu_kind_part(cal, device: str, family: str) -> float:
    """A GPU kind's own share of the estimator's error: the geometric mean of the single-GPU
    ``advise bench`` factors measured on it for model families other than ``family`` (1.0 when there
    are none; multi-GPU factors also carry the links, not only the GPU kind)."""
    vals = []
    for k, v in cal.measured.items():
        parts = k.split("|")
        if len(parts) == 4 and parts[0] == device and parts[1] != family and parts[3] in ONE_GPU and v > 0:
            vals.append(v)
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else 1.0


def find_factor(cal, identity: str, device: str, config) -> tuple[ModelFactor, str] | None:
    """(factor, "direct" | "transferred") for this model on this GPU kind, or None."""
    direct = cal.model_factors.get(factor_key(identity, device, config))
    if direct is not None and direct.origin == "probe":
        return direct, "direct"
    variant = variant_of(config)
    others = [f for f in cal.model_factors.values()
              if f.model == identity and f.variant == variant and f.device not in (device, "cpu")]
    if not others:
        return None
    # a probe's factor before a bench sample, then the newest
    return max(others, key=lambda f: (f.origin == "probe", f.when)), "transferred"


# ---------------------------------------------------------------- applying
def apply_model_factors(est, model, hardware, cal):
    """``est`` (an ``advisor.estimate.Estimate``) with this model's measured factors applied (measured on
    this GPU kind, or transferred from another), named in its notes and ``calibration``."""
    from advisor.calibration import CalibrationUsed, calibration_key
    from advisor.config import Strategy

    config = est.config
    device = hardware.gpu.name
    found = find_factor(cal, model_identity(model), device, config)
    if found is None:
        return est
    f, how = found
    tool = "advise probe" if f.origin == "probe" else "advise bench"
    if config.strategy.full_shard:
        return est.model_copy(update={"notes": est.notes + [
            f"{tool} factors for this model ({f.date}) not applied: the probe ran it unsharded, FSDP shards it"]})
    mem, thr, notes = est.memory, est.throughput, list(est.notes)
    when = f"from {tool} on {f.date}" + (f" on {f.device}, transferred to {device}" if how == "transferred" else "")
    if f.memory:
        peak = mem.peak_gib * f.memory
        dev = peak * cal.allocator_reserve + cal.cuda_context_gib
        mem = mem.model_copy(update={
            "peak_gib": peak, "device_gib": dev, "fits": dev <= mem.gpu_memory_gib * cal.fit_fraction,
            "detail": {**mem.detail, "probe_memory_factor": f.memory}})
        notes.append(f"memory x{f.memory:.2f} {when}")
    ttt = est.time_to_train_h
    removed = applied = 1.0
    factor = None
    if f.throughput:
        bench = cal.measured.get(calibration_key(device, model.family, config.precision.value,
                                                 config.strategy.value, compile=config.compile,
                                                 channels_last=config.channels_last)) if thr.calibrated else None
        factor = f.throughput
        if how == "transferred":  # keep the model-specific part only, then this GPU kind's own part
            removed, applied = gpu_kind_part(cal, f.device, model.family), gpu_kind_part(cal, device, model.family)
            factor = f.throughput / removed * applied
        scale = factor / (bench or 1.0)  # the model's factor replaces the family's bench factor
        sps = thr.samples_per_s * scale
        thr = thr.model_copy(update={
            "samples_per_s": sps, "step_s": thr.step_s / scale, "mfu": thr.mfu * scale,
            "tflops_per_gpu": thr.tflops_per_gpu * scale,
            "tokens_per_s": thr.tokens_per_s * scale if thr.tokens_per_s else thr.tokens_per_s, "calibrated": True})
        ttt = ttt / scale if ttt is not None else None
        parts = f" (measured x{f.throughput:.2f} / {f.device}'s own x{removed:.2f} x {device}'s x{applied:.2f})" \
            if how == "transferred" and (removed != 1.0 or applied != 1.0) else ""
        notes.append(f"throughput x{factor:.2f} {when}{parts}" + (" (replaces the advise bench factor)" if bench else ""))
    used = CalibrationUsed(source=tool, scope="model", model=f.model, variant=f.variant, measured_on=f.device,
                           applied_to=device, how=how, throughput_factor=factor, memory_factor=f.memory,
                           gpu_factor_removed=removed, gpu_factor_applied=applied, date=f.date)
    return est.model_copy(update={"memory": mem, "throughput": thr, "time_to_train_h": ttt, "notes": notes,
                                  "calibration": [c for c in est.calibration if c.scope != "family"] + [used]
                                  if factor else est.calibration + [used]})
