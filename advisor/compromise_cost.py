"""Step time the memory compromises add or change: CPU offload's host transfers and CPU optimizer
step, the optimizer step in backward's per-parameter calls, KahanAdamW's unfused per-tensor kernels,
bitsandbytes' 8-bit AdamW step.

``throughput.estimate_throughput`` calls ``compromise_cost`` once, after the standard step time
(compute + optimizer + exposed communication) is known: ``optimizer_s`` (when set) replaces the
standard optimizer's one streaming pass, ``extra_s`` is added. Each optimizer is modelled from how
its step runs: launches per parameter tensor (llama3-8b has 291), synchronisations, bytes and the
kernel's achieved rate. Rough where it says so; the 8-bit kernel's rate is fit on one measured
configuration (``benchmarks/fit_compromises.py`` -> ``advisor/data/compromise_rates.json``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from advisor.config import Optimizer, Precision, PureBf16Update, TrainConfig
from advisor.gpus import GpuSpec
from advisor.hardware import HardwareSpec
from advisor.models import ModelSpec

RATES = Path(__file__).with_name("data") / "compromise_rates.json"

# PyTorch's CPU Adam: ~1.4 s per billion parameters per step on a two-socket Xeon (Ren et al. 2021,
# ZeRO-Offload, Table 3, "PT-CPU" column; DeepSpeed's CPU-Adam is ~6x faster). Rough. Its per-tensor
# loop (torch.optim.AdamW on CPU tensors runs _single_tensor_adamw, ~10 ops a tensor) is inside that
# figure; FSDP's copies are one per wrapped unit, not per tensor: no launch term is missing here.
CPU_ADAM_S_PER_BPARAM = 1.4
# Achieved share of the PCIe link's one-way peak for pinned host<->device copies (the same 0.7 the
# offload alternative used; NVIDIA "How to Optimize Data Transfers in CUDA C/C++": pinned copies
# reach ~70-80% of the link). Rough.
PCIE_EFFICIENCY = 0.7

# --optimizer-in-backward (launcher/compromises/in_backward.py): every parameter has its own optimizer,
# stepped from its post-accumulate-grad hook. Per tensor that adds torch.optim.Optimizer.step's Python
# (profiling hook, _init_group, grouping tensors by device and dtype) and zero_grad, counted as op
# dispatches (rough) ...
IN_BACKWARD_CALL_OPS = 8
# ... plus, for fused AdamW/SGD, the kernels it launched once for all tensors and now launches per
# tensor: the step-count _foreach_add_ and _fused_adamw_ (torch/optim/adamw.py, _fused_adamw).
# KahanAdamW and bitsandbytes already loop per tensor: their own terms below count those launches.
FUSED_KERNELS_PER_CALL = 2

# KahanAdamW (launcher/compromises/kahan.py, pure-bf16) steps each tensor with 13 unfused elementwise
# kernels: m.mul_, m.add_; v.mul_, v.addcmul_; sqrt, div, add_(eps); comp.add_ (decay), comp.addcdiv_;
# clone, p.add_, sub_, comp.add_. No synchronisation: the host runs ahead of the GPU.
KAHAN_KERNELS_PER_TENSOR = 13
# Bytes those kernels read and write per bf16 parameter, in the same order: 4+6, 4+6, 4+4+4, 6+8,
# 4+6+6+6 (each kernel streams its operands: 2 bytes each).
KAHAN_BYTES_PER_PARAM = 68.0

# bitsandbytes AdamW8bit (github.com/bitsandbytes-foundation/bitsandbytes @95f9af30):
# - Optimizer8bit.step (bitsandbytes/optim/optimizer.py) loops over the parameter tensors in Python
#   and calls sync_gpu(p) = torch.cuda.synchronize() after each one: host and GPU never overlap;
# - per tensor the host runs Optimizer2State.update_step: p.data.contiguous(), p.grad.contiguous(),
#   get_config, then torch.ops.bitsandbytes.optimizer_update_8bit_blockwise (a ctypes launch),
#   counted as BNB_HOST_OPS_PER_TENSOR op dispatches with the synchronisation (rough);
# - the kernel (csrc/kernels.cu, kOptimizerStatic8bit2StateBlockwise; csrc/ops.cu: BLOCKSIZE_2STATE
#   256, NUM_2STATE 1) runs one 256-thread block per 256 parameters, one parameter a thread: each
#   block copies both 256-entry quantile maps into shared memory, loads gradient, states and absmax,
#   dequantises by table lookup, updates both moments in fp32, max-reduces each block's new absmax
#   (two BlockReduce), writes the weight and requantises each moment by a 7-step binary search
#   (quantize_2D), ~10 __syncthreads in all. Short latency-bound blocks: it moves 16 bytes per
#   parameter (fp32 gradient and weight read, weight written, two uint8 states read and written)
#   at a small fraction of the memory bandwidth, fit in compromise_rates.json.
BNB_HOST_OPS_PER_TENSOR = 4
BNB_BYTES_PER_PARAM = 16.0


@lru_cache(maxsize=1)
def compromise_rates() -> dict:
    """The fitted kernel rates (benchmarks/fit_compromises.py writes the file)."""
    return json.loads(RATES.read_text())


@dataclass
class CompromiseCost:
    extra_s: float = 0.0  # added to one optimizer step
    optimizer_s: float | None = None  # replaces the standard optimizer's streaming pass when set
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


def adamw_8bit_kernel_s(params: float, gpu: GpuSpec, fraction: float | None = None) -> float:
    """GPU time of bitsandbytes' blockwise 8-bit AdamW kernel over ``params`` parameters: 16 bytes each
    at ``fraction`` of the datasheet bandwidth (scaled per architecture like any bandwidth-bound work;
    the blocks are latency-bound, so this transfer is an assumption). Per parameter, whatever the
    weights' dtype: a bf16 weight takes the same one-thread path through the same block."""
    f = compromise_rates()["bnb_8bit_bandwidth_fraction"] if fraction is None else fraction
    return params * BNB_BYTES_PER_PARAM / (gpu.mem_bw * gpu.fraction_vs_h200("bandwidth") * f)


def adamw_8bit_step_s(params: float, tensors: int, gpu: GpuSpec, launch_us: float) -> tuple[float, float]:
    """(host s, kernel s) of one AdamW8bit step; they add up (a synchronisation after every tensor)."""
    return tensors * BNB_HOST_OPS_PER_TENSOR * launch_us * 1e-6, adamw_8bit_kernel_s(params, gpu)


def kahan_step_s(params: float, tensors: int, bw: float, launch_us: float, gpu_kernel_us: float) -> tuple[float, float]:
    """(host s, GPU s) of one KahanAdamW step; the slower sets the pace (no synchronisation)."""
    kernels = tensors * KAHAN_KERNELS_PER_TENSOR
    return kernels * launch_us * 1e-6, params * KAHAN_BYTES_PER_PARAM / bw + kernels * gpu_kernel_us * 1e-6


def compromise_cost(model: ModelSpec, config: TrainConfig, hw: HardwareSpec, compute_s: float, bw: float, launch_us: float,
                    trainable: int, shard: int, gpu_kernel_us: float = 0.0) -> CompromiseCost:
    out = CompromiseCost()
    tensors = param_tensors(model)
    if config.optimizer is Optimizer.adamw_8bit and not config.cpu_offload:
        host, kernel = adamw_8bit_step_s(trainable / shard, tensors, hw.gpu, launch_us)
        out.optimizer_s = host + kernel
        out.notes.append(f"8-bit AdamW (bitsandbytes): {tensors} per-tensor steps, each synchronised; "
                         f"~{kernel * 1e3:.0f} ms of blockwise (de)quantising kernels + ~{host * 1e3:.0f} ms on the host")
    elif config.kahan and config.lora_rank is None and not config.cpu_offload:
        host, gpu = kahan_step_s(trainable / shard, tensors, bw, launch_us, gpu_kernel_us)
        out.optimizer_s = max(host, gpu)
        out.notes.append(f"KahanAdamW: {KAHAN_KERNELS_PER_TENSOR} unfused kernels per tensor x {tensors} "
                         f"(~{gpu * 1e3:.0f} ms on the GPU, ~{host * 1e3:.0f} ms of launches)")
    elif (config.precision is Precision.pure_bf16 and config.optimizer is Optimizer.adamw
          and config.pure_bf16_update is PureBf16Update.plain and not config.cpu_offload):
        # --pure-bf16-update plain: torch's fused AdamW over bf16 weights, grads and moments, the one
        # streaming pass throughput.py already charges (half the fp32 bytes).
        out.notes.append("pure-bf16 with plain torch AdamW (--pure-bf16-update plain): one fused pass over bf16, "
                         "no Kahan compensation")
    if config.optimizer_in_backward:
        per_call = IN_BACKWARD_CALL_OPS + (FUSED_KERNELS_PER_CALL if out.optimizer_s is None else 0)
        launches = tensors * per_call * launch_us * 1e-6
        out.extra_s += launches
        out.notes.append(f"optimizer step in backward: {tensors} per-parameter optimizer calls "
                         f"(~{launches * 1e3:.0f} ms on the host per step)")
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
