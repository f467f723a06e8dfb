"""``estimate(model, config, hardware)``: memory and throughput of one exact configuration.

Pure function of data: no torch, no NVML, no files (calibration is passed in). The result is a
pydantic model whose JSON is DESIGN.md's ``advise estimate`` contract.
"""

from pydantic import BaseModel, ConfigDict, Field

from advisor.calibration import Calibration, CalibrationUsed, calibration_key, default_calibration
from advisor.config import TrainConfig
from advisor.gpu_perf import unmeasured_gpu_note
from advisor.hardware import HardwareSpec
from advisor.memory import MemoryEstimate, estimate_memory
from advisor.models import ModelSpec
from advisor.throughput import REFERENCE_GPU, ThroughputEstimate, estimate_throughput


class ModelSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    params: int
    trainable_params: int
    family: str
    source: str
    implementation: str = Field("", description="the code estimated: 'cardwise zoo', 'transformers GPT2LMHeadModel (sdpa)', ...")
    loss: str | None = Field(None, description="the loss assumed on the output: ce, mse, none, model (its own)")


class HardwareSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu: str
    count: int = Field(description="GPUs in total (per node x nodes)")
    per_node: int
    nodes: int
    memory_gib: float
    interconnect: str
    detected: bool
    assumed: bool = False
    nodes_at_hand: int = Field(1, description="nodes named (or detected); `nodes` is what this configuration uses")
    gpus_at_hand: int = Field(1, description="GPUs named (or detected) in all; `count` is what this configuration uses")
    network: str | None = Field(None, description="the network between nodes assumed and where its number came from "
                                                  "(whenever nodes at hand > 1)")
    cpus_per_gpu: float | None = Field(None, description="CPU cores each GPU's loader gets")
    cpus_source: str | None = None


class Estimate(BaseModel):
    """What one configuration costs per GPU and how fast it runs over all GPUs."""

    model_config = ConfigDict(extra="forbid")

    model: ModelSummary
    hardware: HardwareSummary
    config: TrainConfig
    memory: MemoryEstimate
    throughput: ThroughputEstimate
    time_to_train_h: float | None = Field(None, description="hours for dataset_size x epochs, if given")
    notes: list[str] = Field(default_factory=list, description="assumptions the numbers rest on")
    calibration: list[CalibrationUsed] = Field(
        default_factory=list, description="measured calibration applied (advise bench / advise probe): none = packaged constants only")


def estimate(
    model: ModelSpec,
    config: TrainConfig,
    hardware: HardwareSpec,
    *,
    dataset_size: int | None = None,
    epochs: float | None = None,
    calibration: Calibration | None = None,
    one_gpu: ThroughputEstimate | None = None,
) -> Estimate:
    """``one_gpu``: ``one_gpu_throughput`` of the same arguments, when the caller has it already
    (the planner asks for many GPU counts of one configuration)."""
    cal = calibration or default_calibration()
    mem = estimate_memory(model, config, hardware, cal)
    thr = estimate_throughput(model, config, hardware, cal)
    if mem.detail.get("paged_out_gib"):
        thr = _with_paging(thr, mem.detail["paged_out_gib"] * 2**30, hardware)
    if hardware.total_gpus > 1 and not config.strategy.one_gpu:
        one = one_gpu or one_gpu_throughput(model, config, hardware, cal)
        # Against the same configuration on one GPU, never above 100%: FSDP's sharded optimizer
        # step can make a row look superlinear, which is not scaling (DESIGN.md).
        thr.scaling_efficiency = min(1.0, thr.samples_per_s / (one.samples_per_s * hardware.total_gpus))
    at_hand = max(hardware.nodes, hardware.nodes_at_hand or 1)
    ttt = None
    if dataset_size and epochs:
        ttt = dataset_size * epochs / thr.samples_per_s / 3600.0
    est = Estimate(
        model=ModelSummary(name=model.name, params=model.params, trainable_params=mem.trainable_params,
                           family=model.family, source=model.source, implementation=model.implementation,
                           loss=model.loss),
        hardware=HardwareSummary(gpu=hardware.gpu.name, count=hardware.total_gpus, per_node=hardware.gpus_per_node,
                                 nodes=hardware.nodes, memory_gib=hardware.gpu.memory_gib,
                                 interconnect=hardware.interconnect, detected=hardware.detected,
                                 assumed=hardware.assumed, nodes_at_hand=at_hand,
                                 gpus_at_hand=max(hardware.total_gpus, hardware.gpus_at_hand or 1),
                                 network=hardware.network_link.summary() if at_hand > 1 else None,
                                 cpus_per_gpu=hardware.input.cpus_per_gpu if hardware.input else None,
                                 cpus_source=hardware.input.cpus_source if hardware.input else None),
        config=config,
        memory=mem,
        throughput=thr,
        time_to_train_h=ttt,
        notes=mem.notes + thr.notes + _precision_notes(config, hardware),
        calibration=_bench_used(model, config, hardware, cal) if thr.calibrated else [],
    )
    if cal.model_factors:  # measured by `advise probe` for this very model (advisor.probe_factors)
        from advisor.probe_factors import apply_model_factors

        est = apply_model_factors(est, model, hardware, cal)
    unmeasured = unmeasured_gpu_note(hardware.gpu.name) if hardware.gpu.name != "cpu" else None
    if unmeasured:
        est.throughput.unmeasured_gpu = unmeasured
        est.notes.append(unmeasured)
    return _mark_transferred_compile(est, model, config, hardware, cal)


def _mark_transferred_compile(est: Estimate, model: ModelSpec, config: TrainConfig, hardware: HardwareSpec,
                              cal: Calibration) -> Estimate:
    """torch.compile's speed-up is fit on the reference GPU's rows only (benchmarks/calibration/fit.py: the H200):
    on another GPU kind it is transferred, not measured. The estimate says so (``throughput.transferred``) and
    exposes ``throughput.conservative_samples_per_s`` without it (the eager rate, when slower), which is what a
    deadline check should count on, unless `advise bench`/`advise probe` measured this compiled configuration here."""
    thr = est.throughput
    thr.conservative_samples_per_s = thr.samples_per_s
    if not config.compile or hardware.gpu.name in (REFERENCE_GPU.name, "cpu"):
        return est
    measured_here = any(c.how == "direct" and "+compile" in c.variant and c.measured_on == hardware.gpu.name
                        for c in est.calibration)
    if measured_here:
        return est
    eager = estimate_throughput(model, config.model_copy(update={"compile": False}), hardware, cal)
    if eager.samples_per_s >= thr.samples_per_s:
        return est
    gain = thr.samples_per_s / eager.samples_per_s
    thr.conservative_samples_per_s = eager.samples_per_s
    what = (f"torch.compile speed-up x{gain:.2f}: fit on {REFERENCE_GPU.name} rows only, transferred to "
            f"{hardware.gpu.name} (no measurement there); without it {eager.samples_per_s:,.0f} samples/s")
    thr.transferred.append(what)
    est.notes.append(what + "; a deadline check counts on that rate (`advise bench`/`advise probe` here measure it)")
    return est


def _with_paging(thr: ThroughputEstimate, paged_out_bytes: float, hw: HardwareSpec) -> ThroughputEstimate:
    """The step time of paged optimizer states that do not fit on the GPU (advisor.compromise_cost.paging_s)."""
    from advisor.compromise_cost import paging_s

    extra = paging_s(paged_out_bytes, hw)
    f = thr.step_s / (thr.step_s + extra)
    return thr.model_copy(update={
        "step_s": thr.step_s + extra, "samples_per_s": thr.samples_per_s * f,
        "tokens_per_s": thr.tokens_per_s * f if thr.tokens_per_s else None, "mfu": thr.mfu * f,
        "tflops_per_gpu": thr.tflops_per_gpu * f,
        "notes": thr.notes + [f"paged optimizer states: +{extra:.2f} s a step moving {paged_out_bytes / 2**30:.1f} GiB "
                              "to host RAM and back over PCIe"]})


def _precision_notes(config: TrainConfig, hardware: HardwareSpec) -> list[str]:
    gpu = hardware.gpu
    if config.precision.bf16_matmuls and not gpu.supports_bf16:
        return [f"{gpu.name} has no bf16 tensor cores (compute capability {gpu.compute_capability[0]}."
                f"{gpu.compute_capability[1]} < 8.0): bf16 is estimated at the fp32 rate; "
                "--precision fp16 (with a GradScaler) uses its tensor cores"]
    return []


def _bench_used(model: ModelSpec, config: TrainConfig, hardware: HardwareSpec, cal: Calibration) -> list[CalibrationUsed]:
    """The ``advise bench`` family factor advisor.throughput applied (measured on this GPU kind)."""
    gpu = hardware.gpu.name
    key = calibration_key(gpu, model.family, config.precision.value, config.strategy.value,
                          compile=config.compile, channels_last=config.channels_last)
    factor = cal.measured.get(key)
    if not factor:
        return []
    return [CalibrationUsed(source="advise bench", scope="family", model=model.family, variant=key.split("|")[2],
                            measured_on=gpu, applied_to=gpu, how="direct", throughput_factor=factor)]


def one_gpu_throughput(model: ModelSpec, config: TrainConfig, hardware: HardwareSpec, cal: Calibration) -> ThroughputEstimate:
    """What scaling efficiency compares against: the same configuration as plain single-GPU
    training on one of these GPUs (not FSDP on one GPU, whose unsharded step is slower)."""
    return estimate_throughput(model, config.on_one_gpu(), hardware.with_count(1), cal)
