"""``advise probe``: a few real steps of a plan's per-GPU configuration, beside its estimate.

    from launcher.probe import probe_plan
    result = probe_plan(plan, home=home, progress=print)   # plan: rules.api.plan or cpu_plan
    result.measured.peak_gib, result.memory_ratio, result.throughput_ratio, result.stored

Three parts, as ``advise bench``: *checks* (``probe_target``: one device, the detected GPU or
the CPU, and the hardware its estimate uses; mistakes raise UserError before anything starts),
*running* (one child per micro-batch, ``launcher.recipes.probe`` through
``launcher.runner.Launch``, with the bench's utilisation sampler beside it; a device OOM tries
half the micro-batch, down to 1), and *arithmetic* (``compare``: measured over the estimate of the
configuration that ran with the packaged constants and this host's dispatch speed, which the
child times first on a GPU (``launcher.host_dispatch``); stored as ``advisor.probe_factors``
factors and ``advisor.host_speed``'s ``host-speed.json``).

One device, whatever the plan's GPU count: a DDP rank runs exactly this configuration (one whole
replica per GPU), which is what the probe measures. FSDP shards the model, which one device
cannot show, so FSDP plans are refused.

Files: ``HOME/probes/<id>/`` keeps each attempt's plan, log and result.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.config import TrainConfig
from advisor.errors import UserError
from advisor.estimate import Estimate
from advisor.plan import Plan

CHILD = "launcher.recipes.probe"
OOM_EXIT = 3  # launcher.recipes.probe.OOM_EXIT (that module imports torch)

Progress = Callable[[str], None]


class ProbeAttempt(BaseModel):
    model_config = ConfigDict(extra="forbid")

    micro_batch: int
    status: Literal["ok", "oom", "failed", "cancelled"]
    error: str | None = None
    wall_s: float = 0.0
    log: str | None = None


class ProbeMeasured(BaseModel):
    """What the child measured over its timed steps (DESIGN.md's definitions)."""

    model_config = ConfigDict(extra="forbid")

    peak_gib: float = Field(description="CUDA: max_memory_allocated after the first optimizer step; CPU: peak RSS "
                                        "over the RSS before the model was built")
    reserved_gib: float | None = Field(None, description="CUDA: max_memory_reserved (the allocator's peak)")
    peak_rss_gib: float | None = None
    baseline_rss_gib: float | None = None
    samples_per_s: float = Field(description="steady state: warm-up and compile excluded, data on the device")
    step_s: float
    tokens_per_s: float | None = None
    gpu_util_pct: float | None = Field(None, description="NVML, mean over the timed steps (None on CPU)")
    cpu_util_pct: float | None = Field(None, description="the child's CPU use over the timed steps (CPU probes)")
    first_step_s: float | None = Field(None, description="first optimizer step, compile included")
    steps: int
    warmup_steps: int
    implementation: str
    device_name: str
    torch: str | None = None
    host_dispatch_us: float | None = Field(None, description="GPU probes: launcher.host_dispatch's reference step, "
                                                             "microseconds (this host's dispatch speed)")


class ProbeResult(BaseModel):
    """``advise probe --json``."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["ok", "oom", "failed", "cancelled"]
    model: str
    identity: str = Field(description="model identity the factors are stored under")
    device: str = Field(description="GPU kind (GPU table name) or 'cpu'")
    config: TrainConfig = Field(description="the configuration measured (the last attempt's)")
    attempts: list[ProbeAttempt] = Field(default_factory=list)
    measured: ProbeMeasured | None = None
    estimate: Estimate | None = Field(None, description="estimate of the measured configuration: packaged constants "
                                                         "and this host's measured dispatch speed only")
    memory_ratio: float | None = Field(None, description="measured / estimated peak_gib")
    throughput_ratio: float | None = Field(None, description="measured / estimated samples_per_s")
    factor_key: str | None = None
    stored: str | None = Field(None, description="file the factors were written to")
    host_factor: float | None = Field(None, description="this host's dispatch time over the benchmark host's "
                                                        "(advisor.host_speed); later estimates' host terms use it")
    host_stored: str | None = Field(None, description="file the host's dispatch speed was written to")
    probe_dir: str | None = None
    error: str | None = None
    notes: list[str] = Field(default_factory=list)


class ProbeTarget(BaseModel):
    """Where the probe runs and what its estimate assumes."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    hardware: object  # advisor.hardware.HardwareSpec of one device
    gpu_index: int | None = None  # NVML index (None: CPU)
    env: dict[str, str] = Field(default_factory=dict)


# ==================================================================== checks
def probe_target(plan: Plan, machine=None) -> ProbeTarget:
    """The device for ``plan`` on this machine; UserError when the probe cannot run it here."""
    from advisor.hardware import HardwareSpec, detect_machine, resolve_hardware
    from launcher.accelerate_config import CPU_ENV
    from launcher.bench import cpu_device_spec, visible_gpus

    if plan.config.strategy.full_shard and plan.world_size > 1:
        raise UserError(f"the plan shards the model over {plan.world_size} GPUs with FSDP; a probe runs one device",
                        fix="probe a configuration one GPU holds (--strategy ddp or single), or measure FSDP with "
                            "`advise bench --modes fsdp`")
    machine = machine or detect_machine()
    if plan.cpu:
        hw = HardwareSpec(gpu=cpu_device_spec(machine.cpu_cores, machine.ram_gib), gpus_per_node=1,
                          interconnect="pcie", cpu_cores=machine.cpu_cores, detected=True)
        return ProbeTarget(hardware=hw, env={**CPU_ENV, "OMP_NUM_THREADS": os.environ.get(
            "OMP_NUM_THREADS", str(os.cpu_count() or 1))})
    visible = visible_gpus(machine)
    if not visible:
        raise UserError(f"no GPU visible to probe on ({machine.nvml_error or 'NVML reports 0 GPUs'})",
                        fix="probe on CPU with --cpu, or run it on the GPU machine")
    gpu = next(g for g in machine.gpus if g.index == visible[0])
    hw = resolve_hardware(machine.model_copy(update={"gpus": [gpu], "links": []}), gpus=1)
    if plan.gpu and plan.gpu != hw.gpu.name:
        raise UserError(f"the plan is for {plan.gpu}, this machine's GPU is {hw.gpu.name}",
                        fix="probe on a machine with that GPU, or plan for this one (drop --gpu / plan again)")
    return ProbeTarget(hardware=hw, gpu_index=gpu.index, env={"CUDA_VISIBLE_DEVICES": gpu.uuid or str(gpu.index)})


def _one_device(plan: Plan, micro_batch: int) -> Plan:
    """The per-GPU configuration as a single-process plan (same micro-batch, accumulation, numerics)."""
    config = plan.config.on_one_gpu(micro_batch=micro_batch)
    return plan.model_copy(update={"config": config, "processes_per_node": 1, "nodes": 1, "sync_batchnorm": False,
                                   "global_batch": micro_batch * config.grad_accum, "num_workers": 0,
                                   "total_steps": None, "warmup_steps": 0})


# ==================================================================== running
def _attempt(plan: Plan, target: ProbeTarget, adir: Path, n: int, *, warmup: int, steps: int,
             cancel: threading.Event, echo: IO[str] | None) -> tuple[ProbeAttempt, dict | None, object]:
    from launcher import oom
    from launcher.bench import UtilSampler
    from launcher.command import LaunchSpec, _pythonpath
    from launcher.runner import Launch

    plan_path, out_path, log_path = adir / f"plan-{n}.json", adir / f"result-{n}.json", adir / f"attempt-{n}.log"
    plan.save(plan_path)
    cmd = [sys.executable, "-m", CHILD, "--plan", str(plan_path), "--out", str(out_path),
           "--warmup", str(warmup), "--steps", str(steps)]
    env = {"PYTHONPATH": _pythonpath(), "PYTHONUNBUFFERED": "1", **target.env}
    launch = Launch(LaunchSpec(cmd=cmd, env=env), log_path, echo=echo, grace_s=5.0)
    sampler = UtilSampler([target.gpu_index] if target.gpu_index is not None else None)
    launch.start()
    sampler.watch(launch)
    sampler.start()
    try:
        out = launch.wait(cancel=cancel)
    finally:
        sampler.stop()
    mb = plan.config.micro_batch
    result = None
    if out_path.exists():
        try:
            result = json.loads(out_path.read_text())
        except (OSError, ValueError):
            result = None
    att = dict(micro_batch=mb, wall_s=round(out.wall_s, 3), log=str(log_path))
    if out.status == "cancelled":
        return ProbeAttempt(status="cancelled", error="cancelled", **att), None, sampler
    if (result or {}).get("status") == "oom" or (out.status == "failed" and oom.logs_have_oom([log_path])):
        return ProbeAttempt(status="oom", error=f"out of GPU memory at micro-batch {mb}", **att), None, sampler
    if out.status != "succeeded" or not result or result.get("status") != "ok":
        return ProbeAttempt(status="failed", error=_log_reason(log_path, out.error), **att), None, sampler
    return ProbeAttempt(status="ok", **att), result, sampler


def _log_reason(log: Path, fallback: str | None) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    errs = [ln for ln in lines if "Error" in ln or "error:" in ln or ln.startswith("SystemExit")]
    tail = (errs or lines or [""])[-1][:300]
    return f"{fallback or 'the probe failed'}" + (f": {tail}" if tail else "") + f" (log: {log})"


def probe_plan(plan: Plan, *, home: Path, machine=None, spec=None, warmup: int = 3, steps: int = 10,
               save: bool = True, cancel: threading.Event | None = None, echo: IO[str] | None = None,
               progress: Progress | None = None) -> ProbeResult:
    """Probe ``plan``'s per-GPU configuration; store the factors in ``home`` when it ran (``save``)."""
    from advisor.probe_factors import factor_key, model_identity
    from advisor.sources import resolve_model
    from launcher.home import _mkdir_private, ensure_home
    from launcher.store import new_run_id

    say = progress or (lambda _text: None)
    target = probe_target(plan, machine)
    spec = spec or resolve_model(plan.model)
    cancel = cancel or threading.Event()
    adir = ensure_home(Path(home)) / "probes" / new_run_id()
    _mkdir_private(adir)
    device = target.hardware.gpu.name
    identity = model_identity(spec)
    base = dict(model=plan.model.label(), identity=identity, device=device, probe_dir=str(adir))
    attempts: list[ProbeAttempt] = []
    mb = plan.config.micro_batch
    while True:
        one = _one_device(plan, mb)
        say(f"attempt {len(attempts) + 1}: {spec.name} at micro-batch {mb} x {one.config.grad_accum} on "
            f"{'CPU' if plan.cpu else device}, {warmup} warm-up + {steps} timed steps (a child process)")
        att, result, sampler = _attempt(one, target, adir, len(attempts) + 1, warmup=warmup, steps=steps,
                                        cancel=cancel, echo=echo)
        attempts.append(att)
        if att.status == "oom" and mb > 1 and not cancel.is_set():
            say(f"out of GPU memory at micro-batch {mb}; trying {mb // 2}")
            mb //= 2
            continue
        break
    if att.status != "ok":
        why = att.error if att.status != "oom" else f"out of GPU memory at every micro-batch down to {mb}"
        return ProbeResult(status=att.status, config=one.config, attempts=attempts, error=why, **base)
    return compare(result, sampler, spec, one.config, target, attempts, base, home=Path(home), save=save,
                   key=factor_key(identity, device, one.config))


# ==================================================================== arithmetic
def compare(result: dict, sampler, spec, config: TrainConfig, target: ProbeTarget, attempts, base: dict, *,
            home: Path, save: bool, key: str) -> ProbeResult:
    """Measured beside the uncalibrated estimate of the same configuration; the factors saved."""
    from advisor.calibration import default_calibration
    from advisor.estimate import estimate
    from advisor.host_speed import HostSpeed, save_host_speed, with_host_speed
    from advisor.probe_factors import ModelFactor, save_model_factor

    # The estimate is for this host: its measured dispatch speed first (advisor.host_speed), so that the
    # model's factor is what remains beyond the host, and one probe's host serves every later estimate.
    dispatch = result.get("host_dispatch") if target.gpu_index is not None else None
    speed = HostSpeed(us_per_step=dispatch["us_per_step"], ops_per_step=dispatch.get("ops_per_step"),
                      device=base["device"]) if dispatch else None
    cal = with_host_speed(default_calibration(), speed)
    est = estimate(spec, config, target.hardware, calibration=cal)
    sps = result["samples_per_s"]
    tokens = est.throughput.tokens_per_s / est.throughput.samples_per_s if est.throughput.tokens_per_s else None
    util = sampler.mean(result.get("t_start"), result.get("t_end"))
    measured = ProbeMeasured(
        peak_gib=result["peak_gib"], reserved_gib=result.get("reserved_gib"), peak_rss_gib=result.get("peak_rss_gib"),
        baseline_rss_gib=result.get("baseline_rss_gib"), samples_per_s=sps, step_s=result["step_s"],
        tokens_per_s=sps * tokens if tokens else None, gpu_util_pct=util if target.gpu_index is not None else None,
        cpu_util_pct=util if target.gpu_index is None else None, first_step_s=result.get("first_step_s"),
        steps=result["steps"], warmup_steps=result["warmup_steps"], implementation=result["implementation"],
        device_name=result.get("device_name", base["device"]), torch=result.get("torch"),
        host_dispatch_us=speed.us_per_step if speed else None)
    mem_ratio = measured.peak_gib / est.memory.peak_gib if est.memory.peak_gib > 0 and measured.peak_gib > 0 else None
    thr_ratio = sps / est.throughput.samples_per_s if est.throughput.samples_per_s > 0 else None
    notes = []
    if len(attempts) > 1:
        notes.append(f"the planned micro-batch {attempts[0].micro_batch} ran out of memory; measured at "
                     f"{config.micro_batch}")
    if target.gpu_index is None:
        notes.append("CPU probe: memory is peak RSS over the process's RSS before the model was built; "
                     "its factors apply to CPU estimates only")
    host_stored = None
    if speed is not None:
        notes.append(f"host dispatch: {speed.us_per_step:,.0f} us per reference step, x{cal.host_factor:.2f} the time of "
                     "the H200 host that fit launch_us" + ("" if cal.host_dispatch_ref_us else " (no reference: not applied)"))
        if save:
            host_stored = str(save_host_speed(home, speed))
    stored = None
    if save and (mem_ratio or thr_ratio):
        factor = ModelFactor(key=key, model=base["identity"], device=base["device"], variant=key.rsplit("|", 1)[1],
                             memory=mem_ratio, throughput=thr_ratio, measured_peak_gib=measured.peak_gib,
                             estimated_peak_gib=est.memory.peak_gib, measured_samples_per_s=sps,
                             estimated_samples_per_s=est.throughput.samples_per_s, micro_batch=config.micro_batch,
                             seq_len=config.seq_len, image_size=config.image_size, when=time.time())
        stored = str(save_model_factor(home, factor))
    return ProbeResult(status="ok", config=config, attempts=attempts, measured=measured, estimate=est,
                       memory_ratio=mem_ratio, throughput_ratio=thr_ratio, factor_key=key, stored=stored,
                       host_factor=cal.host_factor if speed else None, host_stored=host_stored, notes=notes, **base)
