"""``advise bench``: measured single- vs multi-GPU (or CPU-process) training, beside the estimate.

    from launcher.bench import BenchRequest, Variant, run_bench
    result = run_bench(BenchRequest(models=["resnet50"], counts=[1, 2, 4, 8],
                                    modes=["single", "dp", "ddp", "fsdp"], variants=[Variant.parse("bf16")]))
    result.rows[0].samples_per_s, result.rows[0].speedup, result.rows[0].est_error_pct

Three parts, as Accelerate splits its commands: *planning* (``plan_jobs``: every requested
(model, variant, mode, device count) becomes a job, or a skipped row that says why), *running*
(``run_job``: one ``launcher.runner.execute`` of the ``launcher.recipes.bench_dp`` worker per
job, recorded in the run store like any launch, with a utilisation sampler beside it), and
*arithmetic* (``finish``: speedups, scaling efficiencies, the estimate beside each measurement,
its error, and the calibration factors). Formatting lives in ``launcher.bench_report``.

Definitions (each row):
- ``samples_per_s``: steady-state training samples/s summed over all ranks, data already on the
  device, warm-up (and compile) excluded: the quantity ``advise estimate`` predicts.
- ``speedup``: samples/s over the single-device row of the same model and variant;
  ``efficiency`` = speedup / devices (1.0 = perfect scaling).
- ``variant_speedup``: samples/s over the first variant's row of the same model, mode and count
  (with ``--precision fp32,bf16,...``: the speedup over fp32).
- ``peak_gib``: max over devices of ``torch.cuda.max_memory_allocated()`` after warm-up (GPU 0
  for DataParallel, which gathers outputs and holds the optimizer there).
- ``exposed_comm_s`` (DDP): median forward+backward with the gradient all-reduce minus the same
  under ``no_sync()``: the communication backward does not hide.
- ``est_*``: the uncalibrated estimate (packaged constants, no per-machine factor), and
  ``calibrated_*`` the estimate once this bench's factors apply ("before" and "after").

Importing this module never imports torch; the workers do.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.config import Precision, Strategy, TrainConfig
from advisor.errors import UserError

MODES = ("single", "dp", "ddp", "fsdp")
WORKER = "launcher.recipes.bench_dp"
CPU_DEFAULT_MICRO_BATCH = 4
CPU_DEFAULT_SEQ_LEN = 128  # launcher.cpu_plan's choice: catalog lengths take minutes per CPU step
GPU_TOKENS_PER_MICRO_BATCH = 16384  # default text micro-batch: ~16k tokens per GPU (saturates an H100/H200)
GPU_IMAGES_PER_MICRO_BATCH = 128
FIT_FRACTION = 0.8  # default micro-batches leave 20% of the GPU for estimate error


# ==================================================================== what to run
class Variant(BaseModel):
    """One numeric recipe: precision plus compile and memory format. Text form ``bf16+compile+channels-last``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    precision: Precision
    compile: bool = False
    channels_last: bool = False

    @property
    def label(self) -> str:
        return "+".join([self.precision.value] + (["compile"] if self.compile else [])
                        + (["channels-last"] if self.channels_last else []))

    @classmethod
    def parse(cls, text: str, *, compile: bool = False, channels_last: bool = False) -> "Variant":
        parts = [p.strip().lower() for p in text.split("+") if p.strip()]
        if not parts:
            raise UserError("empty precision in --precision", fix="e.g. --precision fp32,bf16,bf16+compile")
        choices = [p.value for p in Precision]
        if parts[0] not in choices:
            raise UserError(f"unknown precision '{parts[0]}' in --precision {text}",
                            fix=f"use {', '.join(choices)}, optionally +compile and +channels-last (e.g. bf16+compile)")
        for extra in parts[1:]:
            if extra == "compile":
                compile = True
            elif extra in ("channels-last", "channels_last", "cl"):
                channels_last = True
            else:
                raise UserError(f"unknown option '+{extra}' in --precision {text}",
                                fix="options are +compile and +channels-last, e.g. --precision bf16+compile+channels-last")
        return cls(precision=Precision(parts[0]), compile=compile, channels_last=channels_last)


def parse_variants(text: str | None, *, default: str, compile: bool = False, channels_last: bool = False) -> list[Variant]:
    """``--precision fp32,bf16,bf16+compile`` (``--compile``/``--channels-last`` apply to all)."""
    items = [t for t in (text or default).split(",") if t.strip()]
    out: list[Variant] = []
    for item in items:
        v = Variant.parse(item, compile=compile, channels_last=channels_last)
        if v not in out:
            out.append(v)
    return out


def parse_counts(text: str, flag: str) -> list[int]:
    try:
        counts = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UserError(f"{flag} takes comma-separated whole numbers, got '{text}'", fix=f"e.g. {flag} 1,2,4,8") from None
    if not counts or any(c < 1 for c in counts):
        raise UserError(f"{flag} counts must be at least 1, got '{text}'", fix=f"e.g. {flag} 1,2,4,8")
    return sorted(set(counts))


def parse_modes(text: str) -> list[str]:
    modes = []
    for m in (t.strip().lower() for t in text.split(",") if t.strip()):
        if m not in MODES:
            from advisor.errors import unknown_name

            raise unknown_name("mode", m, MODES, "advise bench --help")
        if m not in modes:
            modes.append(m)
    if not modes:
        raise UserError("--modes is empty", fix=f"e.g. --modes {','.join(MODES)}")
    return modes


class BenchRequest(BaseModel):
    """Everything ``advise bench`` was asked; ``None`` sizes are filled per model (and noted)."""

    model_config = ConfigDict(extra="forbid")

    models: list[str]
    cpu: bool = Field(False, description="CPU processes over gloo instead of GPUs")
    counts: list[int] = Field(default_factory=lambda: [1], description="GPUs (or CPU processes) per configuration")
    modes: list[Literal["single", "dp", "ddp", "fsdp"]] = Field(default_factory=lambda: ["single", "ddp"])
    variants: list[Variant] = Field(default_factory=lambda: [Variant(precision=Precision.bf16)])
    micro_batch: int | None = Field(None, ge=1, description="per GPU / process; default per model")
    micro_batches: dict[str, int] = Field(default_factory=dict, description="per-model micro-batch, over micro_batch")
    seq_len: int | None = Field(None, ge=1)
    seq_lens: dict[str, int] = Field(default_factory=dict, description="per-model sequence length, over seq_len")
    image_size: int | None = Field(None, ge=1)
    steps: int = Field(10, ge=2, description="timed optimizer steps per run")
    warmup: int = Field(3, ge=1, description="untimed steps before (compile happens here)")
    comm_steps: int = Field(3, ge=0, description="DDP no_sync/synchronised pairs for the exposed communication")
    dataloader_workers: int | None = Field(None, ge=0, description="also measure a DataLoader with N workers")
    calibrate: bool = Field(True, description="save the factors to HOME/calibration.json")
    grace_s: float = 10.0


class Job(BaseModel):
    """One launch to make, or one row to report as skipped."""

    model: str
    family: str
    variant: Variant
    mode: str
    devices: int
    micro_batch: int
    seq_len: int | None = None
    image_size: int | None = None
    skip: str | None = Field(None, description="why this combination is not run")
    baseline_added: bool = Field(False, description="single row added only as the speedup baseline")

    @property
    def label(self) -> str:
        return f"{self.model} {self.variant.label} {self.mode} x{self.devices}"


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


# ==================================================================== the machine
def cpu_device_spec(cores: int, ram_gib: float = 0.0):
    """A rough roofline for CPU ranks, so CPU rows carry an estimate (and a calibration key "cpu").

    Per core: 2 FMA units x 8 fp32 lanes (AVX2) x 2 FLOPs x ~2.5 GHz = 80 GFLOP/s peak; about
    25 GB/s of memory bandwidth for the socket; gloo between processes through shared memory at
    a few GB/s. bf16 autocast on CPUs without AMX runs no faster than fp32. Only the calibrated
    factor makes CPU estimates meaningful; that is what ``advise bench --cpu`` measures.
    """
    from advisor.gpus import GpuSpec

    tflops = 0.08 * max(1, cores)
    return GpuSpec(name="cpu", memory_gib=round(ram_gib or 16.0, 2), bandwidth_gbps=25.0, fp32_tflops=tflops,
                   tf32_tflops=tflops, bf16_tflops=0.0, fp16_tflops=tflops, compute_capability=(0, 0),
                   nvlink_gbps=0.0, pcie_gbps=8.0,
                   source="rough CPU roofline (AVX2 FMA at 2.5 GHz per core, 25 GB/s); `advise bench --cpu` calibrates it")


def visible_gpus(machine) -> list[int]:
    """NVML indices of the GPUs this process may use (``CUDA_VISIBLE_DEVICES`` respected)."""
    all_idx = [g.index for g in machine.gpus]
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return all_idx
    out = []
    for item in (t.strip() for t in env.split(",")):
        if not item:
            continue
        if item.isdigit():
            if int(item) in all_idx:
                out.append(int(item))
            continue
        match = [g.index for g in machine.gpus if g.uuid and (g.uuid == item or g.uuid.startswith(item))]
        if not match:
            break  # CUDA stops at the first entry it cannot resolve
        out.append(match[0])
    return out


def hardware_for(request: BenchRequest, machine, devices: int):
    """The HardwareSpec an estimate of ``devices`` GPUs (or CPU processes) of this machine uses."""
    from advisor.hardware import HardwareSpec, resolve_hardware

    if request.cpu:
        return HardwareSpec(gpu=cpu_device_spec(machine.cpu_cores, machine.ram_gib), gpus_per_node=devices,
                            interconnect="pcie", cpu_cores=machine.cpu_cores, detected=True)
    return resolve_hardware(machine, gpus=devices)


def _config(job: Job, mode: str | None = None) -> TrainConfig:
    v = job.variant
    return TrainConfig(micro_batch=job.micro_batch, seq_len=job.seq_len, image_size=job.image_size,
                       precision=v.precision, compile=v.compile, channels_last=v.channels_last,
                       strategy=Strategy(mode or job.mode))


# ==================================================================== planning
def _default_micro_batch(spec, variants: list[Variant], hardware, seq_len, image_size) -> int:
    """Largest power of two up to ~16k tokens (128 images) whose estimated peak fits 80% of one GPU, all variants."""
    from advisor.estimate import estimate

    if spec.is_vision:
        mb = GPU_IMAGES_PER_MICRO_BATCH
    else:
        tokens = spec.arch.tokens(seq_len or spec.default_seq_len, image_size) if spec.arch else 512
        mb = 1 << max(0, int(math.log2(max(1, GPU_TOKENS_PER_MICRO_BATCH // tokens))))
    one = hardware.with_count(1)
    while mb > 1:
        peaks = [estimate(spec, TrainConfig(micro_batch=mb, seq_len=seq_len, image_size=image_size,
                                            precision=v.precision, compile=v.compile, channels_last=v.channels_last),
                          one).memory.peak_gib for v in variants]
        if max(peaks) <= FIT_FRACTION * one.gpu.memory_gib:
            break
        mb //= 2
    return mb


def _variant_skip(spec, v: Variant, request: BenchRequest, hardware) -> str | None:
    if v.channels_last and spec.family != "cnn":
        return "channels_last changes only convolutions' memory format: it applies to CNNs (resnet*)"
    if request.cpu and v.precision is Precision.fp16:
        return "fp16 autocast needs a GPU (CPUs autocast to bf16: use bf16)"
    if not request.cpu and hardware is not None and v.precision.value in ("bf16", "pure-bf16") and not hardware.gpu.supports_bf16:
        return f"{hardware.gpu.name} has no bf16 tensor cores (compute capability < 8.0): use fp16"
    return None


def _mode_skip(mode: str, count: int, v: Variant, request: BenchRequest, available: int, cores: int) -> str | None:
    unit = "process" if request.cpu else "GPU"
    if mode == "single":
        return None if count == 1 else "single is one device (its row is the baseline)"
    if count == 1:
        return f"{mode} over 1 {unit} is the single row"  # plan_jobs does not ask for these
    if mode == "dp" and request.cpu:
        return ("torch.nn.DataParallel splits a batch over CUDA devices inside one process; with no GPU it runs "
                "the plain module, so there is nothing to compare (DDP over gloo is the CPU comparison)")
    if mode == "dp" and v.compile:
        return "torch.compile cannot wrap DataParallel's per-step replicas: bench dp without +compile"
    if not request.cpu and count > available:
        return f"{count} GPUs asked, {available} visible"
    if request.cpu and count > cores:
        return f"{count} processes on {cores} CPU cores would oversubscribe them"
    return None


def make_plan(job: Job, request: BenchRequest, gpu_name: str | None = None):
    """The Plan one job launches: a fixed configuration (nothing chosen by the rules), constant LR."""
    from advisor.plan import ModelRef, Plan

    procs = job.devices if job.mode in ("ddp", "fsdp") else 1
    micro = job.micro_batch * (job.devices if job.mode == "dp" else 1)  # DataParallel scatters one batch
    strategy = Strategy.single if job.mode in ("single", "dp") else Strategy(job.mode)
    v = job.variant
    config = TrainConfig(micro_batch=micro, grad_accum=1, seq_len=job.seq_len, image_size=job.image_size,
                         precision=v.precision, compile=v.compile, channels_last=v.channels_last, strategy=strategy)
    steps = request.warmup + request.steps + (request.steps if request.dataloader_workers is not None else 0)
    batch = micro * procs
    return Plan(model=ModelRef(name=job.model), config=config, gpu=None if request.cpu else gpu_name,
                processes_per_node=procs, nodes=1, cpu=request.cpu, global_batch=batch, lr=3e-4, base_lr=3e-4,
                base_batch=batch, lr_scaling="none", warmup_steps=0, total_steps=steps,
                num_workers=request.dataloader_workers or 0, pin_memory=not request.cpu, task="advise bench")


def _launcher_refusal(job: Job, request: BenchRequest) -> str | None:
    """What the launcher says about this plan before anything starts (e.g. FSDP on CPU), or None."""
    from launcher.accelerate_config import accelerate_config

    try:
        accelerate_config(make_plan(job, request))
    except UserError as exc:
        return f"the launcher refuses it: {exc.what}"
    return None


def plan_jobs(request: BenchRequest, machine) -> tuple[list[Job], list[str]]:
    """Every requested (model, variant, mode, count) as a job or a skipped row, baselines first.

    Also returns notes: every default applied, once (STYLE: never fix a value silently).
    """
    from advisor.catalog import catalog_model

    notes: list[str] = []
    available = len(visible_gpus(machine))
    if not request.cpu and available == 0:
        raise UserError(f"no GPU visible to bench ({machine.nvml_error or 'NVML reports 0 GPUs'})",
                        fix="bench CPU processes over gloo instead: advise bench --cpu --processes 1,2 --model ...")
    cores = machine.cpu_cores
    multi = [m for m in request.modes if m != "single"]
    if "single" not in request.modes:
        notes.append("single added as the baseline that speedup and efficiency are measured against")
    if multi and 1 in request.counts:
        notes.append(f"{'/'.join(multi)} over 1 {'process' if request.cpu else 'GPU'} is the single row: not run twice")
    jobs: list[Job] = []
    for name in request.models:
        spec = catalog_model(name)
        if spec.arch is None and spec.trace is None:
            raise UserError(f"model '{name}' has no built-in implementation to bench", fix="bench a catalog model (`advise models`)")
        seq_len = image_size = None
        if spec.is_vision:
            image_size = request.image_size or spec.default_image_size
            if request.image_size is None:
                notes.append(f"{name}: images of {image_size}px (--image-size to pin)")
        else:
            seq_len = request.seq_lens.get(name, request.seq_len)
            if seq_len is None:
                seq_len = min(CPU_DEFAULT_SEQ_LEN, spec.default_seq_len or CPU_DEFAULT_SEQ_LEN) if request.cpu \
                    else (spec.default_seq_len or 512)
                notes.append(f"{name}: sequence length {seq_len}" + (" for CPU" if request.cpu else "") + " (--seq-len to pin)")
        hardware = None
        try:
            hardware = hardware_for(request, machine, 1)
        except UserError as exc:
            notes.append(f"no estimates: {exc.what}")
        micro = request.micro_batches.get(name, request.micro_batch)
        if micro is None:
            if request.cpu or hardware is None:
                micro = CPU_DEFAULT_MICRO_BATCH
            else:
                micro = _default_micro_batch(spec, request.variants, hardware, seq_len, image_size)
            where = "per process" if request.cpu else f"per GPU (largest up to the default size whose estimated peak fits {FIT_FRACTION:.0%} of the GPU)"
            notes.append(f"{name}: micro-batch {micro} {where} (--micro-batch to pin)")
        for v in request.variants:
            common = dict(model=name, family=spec.family, variant=v, micro_batch=micro, seq_len=seq_len, image_size=image_size)
            vskip = _variant_skip(spec, v, request, hardware)
            wanted = [("single", 1)] + [(m, c) for m in multi for c in request.counts if c > 1]
            for mode, count in wanted:
                reason = vskip or _mode_skip(mode, count, v, request, available, cores)
                job = Job(mode=mode, devices=count, skip=reason, baseline_added=(mode == "single" and "single" not in request.modes),
                          **common)
                if job.skip is None:
                    job.skip = _launcher_refusal(job, request)
                jobs.append(job)
    # Compiled variants last: their compilation is most of a bench's time, and a bench stopped
    # early (Ctrl-C, a time limit) has then measured every eager row already.
    jobs.sort(key=lambda j: j.variant.compile)
    return jobs, notes


# ==================================================================== utilisation while a run is timed
class UtilSampler:
    """Samples GPU utilisation (NVML) of the given GPUs, or the CPU use of a launch's process tree
    (psutil), every ``interval`` seconds in a thread; ``mean(t0, t1)`` averages a time window."""

    def __init__(self, gpus: list[int] | None, *, interval: float = 0.1):
        self.gpus = gpus
        self.interval = interval
        self.samples: list[tuple[float, float, float]] = []  # (from, to, value)
        self._stop = threading.Event()
        self._root: int | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True, name="cardwise-bench-sampler")

    def watch(self, launch) -> None:
        """``execute``'s on_launch hook: sample this launch's processes (CPU runs)."""
        self._root = launch.pid

    def start(self) -> "UtilSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def mean(self, t0: float | None, t1: float | None) -> float | None:
        if t0 is None or t1 is None or t1 <= t0:
            return None
        num = den = 0.0
        for a, b, v in self.samples:
            w = min(b, t1) - max(a, t0)
            if w > 0:
                num += w * v
                den += w
        return num / den if den > 0 else None

    def _loop(self) -> None:
        with contextlib.suppress(Exception):  # sampling is best effort: a row never fails for it
            if self.gpus:
                self._loop_nvml()
            else:
                self._loop_cpu()

    def _loop_nvml(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        try:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in self.gpus]
            last = time.time()
            while not self._stop.wait(self.interval):
                vals = [float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu) for h in handles]
                now = time.time()
                self.samples.append((last, now, sum(vals) / len(vals)))
                last = now
        finally:
            pynvml.nvmlShutdown()

    def _loop_cpu(self) -> None:
        import psutil

        ncpu = psutil.cpu_count() or 1
        procs: dict[int, psutil.Process] = {}
        last = time.time()
        while not self._stop.wait(self.interval):
            if self._root is None:
                last = time.time()
                continue
            try:
                root = psutil.Process(self._root)
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                tree = []
            total, primed = 0.0, False
            for p in tree:
                known = procs.get(p.pid)
                if known is None:
                    procs[p.pid] = p
                    with contextlib.suppress(psutil.Error):
                        p.cpu_percent(None)  # the first call only starts the interval
                    continue
                with contextlib.suppress(psutil.Error):
                    total += known.cpu_percent(None)
                    primed = True
            now = time.time()
            if primed:
                self.samples.append((last, now, total / ncpu))
            last = now


# ==================================================================== running one job
def _versions() -> tuple[str | None, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("torch", "accelerate"):
        try:
            out.append(version(name))
        except PackageNotFoundError:
            out.append(None)
    return out[0], out[1]


def _row(job: Job, **fields) -> BenchRow:
    v = job.variant
    return BenchRow(model=job.model, family=job.family, variant=v.label, precision=v.precision.value,
                    compile=v.compile, channels_last=v.channels_last, mode=job.mode,
                    processes=job.devices if job.mode in ("ddp", "fsdp") else 1, devices=job.devices,
                    micro_batch=job.micro_batch, seq_len=job.seq_len, image_size=job.image_size, **fields)


def _read_results(run_dir: Path, ranks: int) -> list[dict]:
    import json

    from launcher.recipes.bench_dp import RESULT_NAME

    out = []
    for r in range(ranks):
        path = Path(run_dir) / RESULT_NAME.format(rank=r)
        if path.exists():
            with contextlib.suppress(OSError, ValueError):
                out.append(json.loads(path.read_text()))
    return out


def _failure_reason(rec) -> str:
    att = rec.attempts[-1] if rec.attempts else None
    if att is not None and att.status == "oom":
        return f"out of GPU memory at micro-batch {att.micro_batch} (--micro-batch to lower it)"
    why = rec.error or "failed"
    log = Path(att.log_dir) / "launcher.log" if att is not None and att.log_dir else None
    tail = ""
    if log is not None and log.exists():
        with contextlib.suppress(OSError):
            lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
            errs = [ln for ln in lines if "Error" in ln or "error:" in ln]
            tail = (errs or lines or [""])[-1].strip()[:300]
    return f"{why}" + (f": {tail}" if tail else "") + (f" (log: {log})" if log else "")


def run_job(job: Job, request: BenchRequest, home: Path, store, machine, *,
            cancel: threading.Event | None = None) -> BenchRow:
    """Launch one job through ``launcher.runner.execute`` and turn the worker's files into a row."""
    from launcher.command import Target
    from launcher.home import make_run_dir
    from launcher.runner import RunOptions, execute

    hardware_name = None
    gpus: list[int] | None = None
    env: dict[str, str] = {}
    if not request.cpu:
        visible = visible_gpus(machine)[: job.devices]
        gpus = visible
        by_index = {g.index: g for g in machine.gpus}
        ids = [by_index[i].uuid or str(i) for i in visible]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(ids)  # UUIDs: no doubt about CUDA's vs NVML's order
        spec = by_index[visible[0]].spec
        hardware_name = spec
    plan = make_plan(job, request, hardware_name)
    args = ["--mode", job.mode, "--steps", str(request.steps), "--warmup", str(request.warmup),
            "--comm-steps", str(request.comm_steps),
            "--dataloader-workers", str(-1 if request.dataloader_workers is None else request.dataloader_workers)]
    target = Target(kind="module", name=WORKER, args=args)
    options = RunOptions(max_oom_retries=0, extra_env=env, grace_s=request.grace_s)
    rec = store.create(label=f"bench · {job.label}", plan=plan.model_dump(mode="json"))
    rdir = make_run_dir(home, rec.id)
    store.update(rec.id, run_dir=str(rdir))
    sampler = UtilSampler(gpus).start()
    t0 = time.time()
    try:
        final = execute(store, rec.id, plan, target, rdir, options, cancel=cancel, on_launch=sampler.watch)
    except UserError as exc:
        return _row(job, status="failed", reason=exc.what, run_id=rec.id)
    finally:
        sampler.stop()
    wall = time.time() - t0
    if final.status == "cancelled":
        return _row(job, status="cancelled", reason="cancelled", run_id=rec.id, wall_s=wall)
    results = _read_results(rdir, plan.world_size)
    if final.status != "succeeded" or len(results) < plan.world_size:
        reason = _failure_reason(final) if final.status != "succeeded" else f"the worker wrote {len(results)} of {plan.world_size} results"
        return _row(job, status="failed", reason=reason, run_id=rec.id, wall_s=wall)
    return _measured(job, results, sampler, run_id=rec.id, wall_s=wall, cpu=request.cpu)


def _measured(job: Job, results: list[dict], sampler: UtilSampler, *, run_id: str, wall_s: float, cpu: bool) -> BenchRow:
    def total(key):
        vals = [r[key] for r in results if r.get(key) is not None]
        return sum(vals) if vals else None

    def mean(key):
        vals = [r[key] for r in results if r.get(key) is not None]
        return statistics.fmean(vals) if vals else None

    if job.mode == "fsdp" and "FSDP" not in str(results[0].get("distributed_type")):
        return _row(job, status="skipped", run_id=run_id, wall_s=wall_s,
                    reason=f"Accelerate ran this as {results[0].get('distributed_type')}, not FSDP (FSDP through Accelerate needs GPUs)")
    sps = total("samples_per_s")
    tps = results[0].get("tokens_per_sample")
    peaks = [p for r in results for p in (r.get("peak_gib_devices") or [])]
    t0 = min(r["t_start"] for r in results)
    t1 = max(r["t_end"] for r in results)
    util = sampler.mean(t0, t1)
    return _row(job, status="ok", run_id=run_id, wall_s=wall_s, samples_per_s=sps,
                tokens_per_s=sps * tps if (sps and tps) else None, step_s=max(r["step_s"] for r in results),
                peak_gib=max(peaks) if peaks else None, peak_gib_devices=peaks or None,
                gpu_util_pct=None if cpu else util, cpu_util_pct=util if cpu else None,
                sync_step_s=mean("sync_step_s"), nosync_step_s=mean("nosync_step_s"), exposed_comm_s=mean("exposed_comm_s"),
                dataloader_workers=results[0].get("dataloader_workers"), loader_samples_per_s=total("loader_samples_per_s"),
                loader_train_samples_per_s=total("loader_train_samples_per_s"))


# ==================================================================== arithmetic
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
        config = _config(job)
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


# ==================================================================== the whole bench
ProgressFn = Callable[[str, int, int, Job, "BenchRow | None"], None]


def run_bench(request: BenchRequest, home: Path | None = None, *, machine=None, progress: ProgressFn | None = None,
              cancel: threading.Event | None = None,
              on_partial: Callable[[BenchResult], None] | None = None) -> BenchResult:
    """Plan, run every job in turn (each a recorded launch), then compute and calibrate.

    ``progress(event, index, total, job, row)`` is called with "start" before and "done" after
    each job (skipped ones too). ``cancel`` stops the run in progress and skips the rest.
    ``on_partial(result)`` sees the result so far after each job (calibration not saved), so
    that reports survive a bench that is killed; the result is also kept in ``HOME/bench/``.
    """
    from advisor.hardware import detect_machine
    from launcher.home import ensure_home, resolve_home
    from launcher.store import RunStore

    home = resolve_home(home)
    machine = machine or detect_machine()
    jobs, notes = plan_jobs(request, machine)
    cancel = cancel or threading.Event()
    started = time.time()
    store = None
    rows: list[BenchRow] = []
    for i, job in enumerate(jobs):
        if progress is not None:
            progress("start", i, len(jobs), job, None)
        if cancel.is_set():
            row = _row(job, status="cancelled", reason="cancelled before it started")
        elif job.skip is not None:
            row = _row(job, status="skipped", reason=job.skip)
        else:
            if store is None:
                ensure_home(home)
                store = RunStore.open(home)
            row = run_job(job, request, home, store, machine, cancel=cancel)
        rows.append(row)
        if progress is not None:
            progress("done", i, len(jobs), job, row)
        if i + 1 < len(jobs):
            partial = _assemble([r.model_copy(deep=True) for r in rows], jobs[: i + 1], request, machine, home,
                                notes + [f"partial: {i + 1} of {len(jobs)} configurations done"], started,
                                cancel.is_set(), save=False)
            _save_result(home, partial)
            if on_partial is not None:
                on_partial(partial)
    result = _assemble(rows, jobs, request, machine, home, notes, started, cancel.is_set(), save=request.calibrate)
    _save_result(home, result)
    return result


def _assemble(rows: list[BenchRow], jobs: list[Job], request: BenchRequest, machine, home: Path, notes: list[str],
              started: float, cancelled: bool, *, save: bool) -> BenchResult:
    notes = list(notes)
    factors, path = finish(rows, jobs, request.model_copy(update={"calibrate": save}), machine, home, notes)
    if factors and not request.calibrate:
        notes.append("--no-calibrate: factors computed (the 'calibrated' columns) but not saved")
    torch_v, acc_v = _versions()
    device = "cpu" if request.cpu else _device_name(machine)
    return BenchResult(machine=machine.summary(), device=device, cpu=request.cpu, torch=torch_v, accelerate=acc_v,
                       started=started, wall_s=time.time() - started, request=request, rows=rows, notes=notes,
                       factors=factors, calibration_path=path, cancelled=cancelled)


def _device_name(machine) -> str:
    from advisor.gpus import find_gpu

    idx = visible_gpus(machine)
    gpu = next((g for g in machine.gpus if g.index == idx[0]), None) if idx else None
    if gpu is None:
        return "?"
    spec = find_gpu(gpu.name)
    return spec.name if spec else gpu.name


def _save_result(home: Path, result: BenchResult) -> Path | None:
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


def summary_errors(rows: list[BenchRow], key: str) -> tuple[float | None, float | None, int]:
    """(median |error|, worst |error|, n) of ``key`` over measured rows."""
    vals = [abs(getattr(r, key)) for r in rows if r.status == "ok" and getattr(r, key) is not None]
    if not vals:
        return None, None, 0
    return statistics.median(vals), max(vals), len(vals)
