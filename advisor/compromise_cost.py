"""Step time the memory compromises add: CPU offload's host transfers and CPU optimizer step, the
optimizer step in backward's per-parameter launches, the Kahan buffer's traffic.

``throughput.estimate_throughput`` calls ``compromise_cost`` once, after the standard step time
(compute + optimizer + exposed communication) is known, and adds what it returns. Rough where it
says so: these constants are stated, not fit, until ``benchmarks/h200_compromises.py`` measures
each compromise on the H200 (results in benchmarks/results/).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from advisor.config import Optimizer, Precision, TrainConfig
from advisor.hardware import HardwareSpec
from advisor.models import ModelSpec

# PyTorch's CPU Adam: ~1.4 s per billion parameters per step on a two-socket Xeon (Ren et al. 2021,
# ZeRO-Offload, Table 3, "PT-CPU" column; DeepSpeed's CPU-Adam is ~6x faster). Rough.
CPU_ADAM_S_PER_BPARAM = 1.4
# Achieved share of the PCIe link's one-way peak for pinned host<->device copies (the same 0.7 the
# offload alternative used; NVIDIA "How to Optimize Data Transfers in CUDA C/C++": pinned copies
# reach ~70-80% of the link). Rough.
PCIE_EFFICIENCY = 0.7
# Kernels of one parameter's unfused AdamW step (torch/optim/adamw.py, _single_tensor_adamw:
# lerp, mul, addcmul, sqrt, div, add, addcdiv, mul for decay, the step count: ~10).
OPS_PER_PARAM_STEP = 10
# Kahan-compensated AdamW reads and writes the bf16 compensation buffer: 2 + 2 bytes per parameter.
KAHAN_TRAFFIC_BYTES = 4.0


@dataclass
class CompromiseCost:
    extra_s: float = 0.0  # added to one optimizer step
    replaces_optimizer_s: bool = False  # the GPU optimizer pass does not run (CPU offload)
    notes: list[str] = field(default_factory=list)


def param_tensors(model: ModelSpec) -> int:
    """Parameter tensors (each steps in its own hook): per layer the projections, norms and biases."""
    a = model.arch
    if a is None:
        return max(1, model.trace.kernels // 10) if model.trace and model.trace.kernels else 100
    proj = 4 + (3 if a.mlp == "swiglu" else 2)
    norms = 2 * (2 if a.norm == "layernorm" else 1)
    biases = proj if a.bias else 0
    return a.n_layers * (proj + norms + biases) + 3


def compromise_cost(model: ModelSpec, config: TrainConfig, hw: HardwareSpec, compute_s: float, bw: float, launch_us: float,
                    trainable: int, shard: int) -> CompromiseCost:
    out = CompromiseCost()
    if config.precision is Precision.pure_bf16 and config.optimizer is Optimizer.adamw and config.lora_rank is None:
        out.extra_s += trainable / shard * KAHAN_TRAFFIC_BYTES / bw
    if config.optimizer_in_backward:
        launches = param_tensors(model) * OPS_PER_PARAM_STEP * launch_us * 1e-6
        out.extra_s += launches
        out.notes.append(f"optimizer step in backward: {param_tensors(model)} per-parameter steps, unfused "
                         f"(~{launches * 1e3:.0f} ms of launches per step)")
    if config.cpu_offload:
        link = hw.gpu.pcie_gbps / 2 * 1e9 * PCIE_EFFICIENCY
        # parameters copied in (fp32 flat parameters, forward and again for backward) every
        # micro-batch, gradients copied out once per step
        h2d = 2 * 4 * model.params / shard * config.grad_accum / link
        d2h = 4 * trainable / shard / link
        cpu_step = trainable / shard / 1e9 * CPU_ADAM_S_PER_BPARAM
        exposed = max(0.0, h2d - compute_s) + d2h
        out.extra_s += exposed + cpu_step
        out.replaces_optimizer_s = True
        out.notes.append(f"CPU offload (rough): +{exposed:.1f} s of PCIe copies and +{cpu_step:.1f} s of CPU AdamW per step")
    return out
