"""Planning a bench: every requested (model, variant, mode, count) becomes a ``Job``, or a skipped
row that says why; the machine's visible GPUs and the hardware each estimate is for.

Defaults are chosen here (sequence length, image size, micro-batch) and each is noted once.
"""

from __future__ import annotations

import math
import os

from advisor.config import Precision, Strategy, TrainConfig
from advisor.errors import UserError
from launcher.bench.request import BenchRequest, Job, Variant

CPU_DEFAULT_MICRO_BATCH = 4
CPU_DEFAULT_SEQ_LEN = 128  # launcher.cpu_plan's choice: catalog lengths take minutes per CPU step
GPU_TOKENS_PER_MICRO_BATCH = 16384  # default text micro-batch: ~16k tokens per GPU (saturates an H100/H200)
GPU_IMAGES_PER_MICRO_BATCH = 128
FIT_FRACTION = 0.8  # default micro-batches leave 20% of the GPU for estimate error


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


def train_config(job: Job, mode: str | None = None) -> TrainConfig:
    v = job.variant
    return TrainConfig(micro_batch=job.micro_batch, seq_len=job.seq_len, image_size=job.image_size,
                       precision=v.precision, compile=v.compile, channels_last=v.channels_last,
                       strategy=Strategy(mode or job.mode))


def device_name(machine) -> str:
    from advisor.gpus import find_gpu

    idx = visible_gpus(machine)
    gpu = next((g for g in machine.gpus if g.index == idx[0]), None) if idx else None
    if gpu is None:
        return "?"
    spec = find_gpu(gpu.name)
    return spec.name if spec else gpu.name


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
    if not request.cpu and hardware is not None and v.precision.bf16_matmuls and not hardware.gpu.supports_bf16:
        return f"{hardware.gpu.name} has no bf16 tensor cores (compute capability < 8.0): use fp16"
    from advisor.setup.constraints import Combo, refusal  # what a precision needs of the device and the model

    cc = hardware.gpu.compute_capability if hardware is not None and not request.cpu else None
    combo = Combo(precision=v.precision, cpu=request.cpu, model=spec.name, transformer=spec.arch is not None,
                  linear_blocks=spec.linear_blocks, compute_capability=cc)
    row = refusal(combo)
    return f"{row.what(combo)}: {row.why}" if row else None


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
    if mode == "dp" and v.precision.runs_as is not v.precision:
        return (f"the dp recipe runs its own loop without {v.precision.value}'s model changes (launcher.model_setups): "
                "bench it as single, ddp or fsdp")
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
