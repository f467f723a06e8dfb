"""Step time the memory compromises add or change: CPU offload's host transfers and CPU optimizer
step (clipping and AdamW on one host thread), the optimizer step in backward's per-parameter calls, KahanAdamW's unfused per-tensor kernels,
bitsandbytes' 8-bit AdamW step.

``throughput.estimate_throughput`` calls ``compromise_cost`` once, after the standard step time
(compute + optimizer + exposed communication) is known: ``optimizer_s`` (when set) replaces the
standard optimizer's one streaming pass, ``extra_s`` is added. Each optimizer is modelled from how
its step runs: launches per parameter tensor (llama3-8b has 291), synchronisations, bytes and the
kernel's achieved rate. Rough where it says so; the 8-bit kernel's rate is fit on one measured
configuration (``benchmarks/calibration/fit_compromises.py`` -> ``advisor/data/compromise_rates.json``), and so is CPU
offload's host step (clipping and torch AdamW on one host thread).
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

# FSDP2 CPU offload (--cpu-offload: Accelerate's fsdp_offload_params -> torch's CPUOffloadPolicy, pinned
# host memory; accelerate 1.16 utils/fsdp_utils.fsdp2_prepare_model, torch 2.13 distributed/fsdp/_fully_shard),
# one step as it runs:
# - GPU side: each unit's fp32 shard is copied host-to-device (FSDPParam.all_gather_inputs:
#   .to(device, non_blocking=True) on the all-gather copy-in stream, one unit prefetched ahead) in forward
#   and again in backward (reshard_after_forward); each unit's gradient, reduce-scattered and cast back to
#   fp32, is copied device-to-host on the post-reduce stream (_fsdp_collectives.foreach_reduce) while
#   backward goes on. The two directions use separate copy engines: forward takes max(compute, copies in),
#   backward max(compute, copies in, copies out). With accumulation, later micro-batches' gradient copies
#   are blocking (they accumulate into the host gradient), so they are charged in full.
# - Host side, after backward (the CPU waits on the gradient copies' events): accelerate's clip_grad_norm_
#   (FSDP2: _clip_grad_norm_dtensor_aware, a vector_norm then a mul_ per CPU DTensor gradient), then
#   torch.optim.AdamW as launcher/compromises builds it with offload (fused=None): _single_tensor_adamw, since
#   DTensor is not in optimizer._foreach_supported_types: per tensor 8 elementwise ops over the fp32 weight,
#   gradient and moments (~80 bytes a parameter), two of them (sqrt, the division) allocating a fresh
#   parameter-sized temporary whose pages the kernel must fault in and zero. `accelerate launch` gives a GPU rank
#   ONE thread (OMP_NUM_THREADS=1 when the environment has none: accelerate/commands/launch.py
#   _validate_launch_command, utils/launch.py); launcher.command now shares the node's cores out among the
#   ranks of an offload plan (advisor.hardware.threads_per_rank). One thread's per-parameter time is the host's
#   own (one core's memory bandwidth and page faults, not a datasheet figure): fit in compromise_rates.json
#   ("cpu_step_s_per_param") on the one-thread row; with T threads the elementwise ops split T ways
#   (at::parallel_for) until the host's memory bandwidth binds: CPU_ADAMW_BYTES_PER_PARAM over
#   "cpu_step_host_gbps", fit on the threaded row (benchmarks/calibration/fit_compromises.py; one row each). (ZeRO-Offload, Ren et al. 2021,
#   Table 3, gives ~1.4 s per billion parameters for PyTorch's CPU Adam on a two-socket Xeon with all its
#   cores: a multi-threaded figure, well below the one-thread rate fit on the H200 host.)
# Bytes the host step streams per fp32 parameter: clipping reads the gradient (4); AdamW's 8 ops read and
# write weight, gradient and both moments plus two parameter-sized temporaries (~80 bytes, counted above).
CPU_ADAMW_BYTES_PER_PARAM = 84.0
# Share of a micro-batch's GPU compute that is forward: 1 of 3 (backward is twice the forward), 1 of 4
# with checkpointing (the forward is run again in backward).
FWD_SHARE = 1.0 / 3.0
FWD_SHARE_CKPT = 1.0 / 4.0
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
    """The fitted kernel rates (benchmarks/calibration/fit_compromises.py writes the file)."""
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
    return params * BNB_BYTES_PER_PARAM / (gpu.bandwidth_vs_h200 * f)


def adamw_8bit_step_s(params: float, tensors: int, gpu: GpuSpec, launch_us: float) -> tuple[float, float]:
    """(host s, kernel s) of one AdamW8bit step; they add up (a synchronisation after every tensor)."""
    return tensors * BNB_HOST_OPS_PER_TENSOR * launch_us * 1e-6, adamw_8bit_kernel_s(params, gpu)


def kahan_step_s(params: float, tensors: int, bw: float, launch_us: float, gpu_kernel_us: float) -> tuple[float, float]:
    """(host s, GPU s) of one KahanAdamW step; the slower sets the pace (no synchronisation)."""
    kernels = tensors * KAHAN_KERNELS_PER_TENSOR
    return kernels * launch_us * 1e-6, params * KAHAN_BYTES_PER_PARAM / bw + kernels * gpu_kernel_us * 1e-6


def _combine(gpu_s: float, host_s: float, p: float) -> float:
    """throughput.combine (not imported: throughput imports this module)."""
    if p <= 0:
        return max(gpu_s, host_s)
    try:
        return (gpu_s**p + host_s**p) ** (1.0 / p)
    except OverflowError:  # a huge step (--seq-len 1e8): the same norm, scaled by the larger term
        big = max(gpu_s, host_s)
        return big * ((gpu_s / big) ** p + (host_s / big) ** p) ** (1.0 / p)


def compromise_cost(model: ModelSpec, config: TrainConfig, hw: HardwareSpec, compute_s: float, bw: float, launch_us: float,
                    trainable: int, shard: int, gpu_kernel_us: float = 0.0, *, gpu_s: float | None = None,
                    host_s: float | None = None, opt_s: float = 0.0, combine_p: float = 0.0) -> CompromiseCost:
    """``gpu_s``/``host_s``: the step's GPU and host pipelines (compute_s combines them), ``opt_s`` the
    standard optimizer's GPU pass, ``combine_p`` the calibration's host_combine_p; with them, a step in
    backward that never synchronises is overlapped with backward instead of added after it."""
    out = CompromiseCost()
    opt_host = opt_gpu = None  # an unsynchronised optimizer's host and GPU parts, when modelled here
    tensors = param_tensors(model)
    if config.optimizer.eight_bit and not config.cpu_offload:
        host, kernel = adamw_8bit_step_s(trainable / shard, tensors, hw.gpu, launch_us)
        out.optimizer_s = host + kernel
        out.notes.append(f"{'paged ' if config.optimizer is Optimizer.paged_adamw_8bit else ''}8-bit AdamW (bitsandbytes): {tensors} per-tensor steps, each synchronised; "
                         f"~{kernel * 1e3:.0f} ms of blockwise (de)quantising kernels + ~{host * 1e3:.0f} ms on the host")
    elif config.kahan and not config.adapters and not config.cpu_offload:
        host, gpu = kahan_step_s(trainable / shard, tensors, bw, launch_us, gpu_kernel_us)
        out.optimizer_s = max(host, gpu)
        opt_host, opt_gpu = host, gpu
        if gpu_s is not None and host_s is not None and not config.optimizer_in_backward:
            # Nothing synchronises between backward and the step (clip_grad_norm_ keeps the norm on the
            # device): the host launches the step's kernels while the GPU still works through backward.
            out.optimizer_s = _combine(gpu_s + gpu, host_s + host, combine_p) - compute_s
        out.notes.append(f"KahanAdamW: {KAHAN_KERNELS_PER_TENSOR} unfused kernels per tensor x {tensors} "
                         f"(~{gpu * 1e3:.0f} ms on the GPU, ~{host * 1e3:.0f} ms of launches)")
    elif (config.precision is Precision.pure_bf16 and config.optimizer is Optimizer.adamw
          and config.pure_bf16_update is PureBf16Update.plain and not config.cpu_offload):
        # --pure-bf16-update plain: torch's fused AdamW over bf16 weights, grads and moments, the one
        # streaming pass throughput.py already charges (half the fp32 bytes).
        out.notes.append("pure-bf16 with plain torch AdamW (--pure-bf16-update plain): one fused pass over bf16, "
                         "no Kahan compensation")
    if config.optimizer_in_backward:
        fused = out.optimizer_s is None
        per_call = IN_BACKWARD_CALL_OPS + (FUSED_KERNELS_PER_CALL if fused else 0)
        launches = tensors * per_call * launch_us * 1e-6
        if fused:
            opt_host, opt_gpu = 0.0, opt_s
        if opt_host is not None and gpu_s is not None and host_s is not None and config.grad_accum == 1:
            # The hooks run on autograd's thread while backward's kernels are still queued on the GPU, and
            # neither fused AdamW/SGD nor KahanAdamW synchronises (launcher/compromises/in_backward.py): their
            # host time joins the host pipeline that runs ahead of the GPU and their kernels the GPU's, the
            # two combined as throughput.combine does for any step. (bitsandbytes synchronises after every
            # tensor: its calls stay added after backward.)
            step = _combine(gpu_s + opt_gpu, host_s + opt_host + launches, combine_p)
            out.extra_s += step - compute_s - (opt_s if fused else out.optimizer_s)
        else:
            out.extra_s += launches
        out.notes.append(f"optimizer step in backward: {tensors} per-parameter optimizer calls "
                         f"(~{launches * 1e3:.0f} ms on the host per step, run while the GPU works through backward)"
                         if opt_host is not None and gpu_s is not None else
                         f"optimizer step in backward: {tensors} per-parameter optimizer calls "
                         f"(~{launches * 1e3:.0f} ms on the host per step)")
    if config.cpu_offload:
        copies, cpu_step = cpu_offload_step_s(model, config, hw, compute_s, trainable, shard)
        out.extra_s += copies + cpu_step
        out.replaces_optimizer_s = True
        out.notes.append(f"CPU offload: +{copies:.1f} s of PCIe copies not hidden by compute and +{cpu_step:.1f} s of "
                         f"gradient clipping and AdamW on {offload_threads(hw, config)} host thread(s) per step")
    return out


def paging_s(paged_out_bytes: float, hw: HardwareSpec) -> float:
    """Time one step spends moving paged optimizer states (bitsandbytes PagedAdamW8bit) that did not fit
    on the GPU: in before their update and out again when backward needs the room, at the pinned-copy
    rate of the PCIe link (the driver migrates unified-memory pages in bulk when bitsandbytes prefetches
    them with cudaMemPrefetchAsync; rough, not measured)."""
    link = hw.gpu.pcie_gbps / 2 * 1e9 * PCIE_EFFICIENCY
    return 2.0 * paged_out_bytes / link


def cpu_step_s(params: float, threads: int = 1, rate: float | None = None, host_gbps: float | None = None) -> float:
    """Host time of one offloaded step's clipping and torch AdamW over ``params`` fp32 parameters on
    ``threads`` threads: one thread's rate split ``threads`` ways, down to the host's memory bandwidth
    (both fit in compromise_rates.json)."""
    rates = compromise_rates()
    r = rates["cpu_step_s_per_param"] if rate is None else rate
    bw = rates.get("cpu_step_host_gbps") if host_gbps is None else host_gbps
    per_param = r / max(1, threads)
    if bw:
        per_param = max(per_param, CPU_ADAMW_BYTES_PER_PARAM / (bw * 1e9))
    return params * per_param


def offload_threads(hw: HardwareSpec, config: TrainConfig) -> int:
    """Host threads per rank as launcher.command gives an offload plan's ranks (advisor.hardware.threads_per_rank)."""
    from advisor.config import Strategy
    from advisor.hardware import threads_per_rank

    ranks = 1 if config.strategy is Strategy.single else min(hw.total_gpus, hw.gpus_per_node)
    return threads_per_rank(ranks, hw.cpu_cores)


def cpu_offload_step_s(model: ModelSpec, config: TrainConfig, hw: HardwareSpec, compute_s: float, trainable: int,
                       shard: int, rate: float | None = None, threads: int | None = None) -> tuple[float, float]:
    """(copy time not hidden by GPU compute, host optimizer time) of one FSDP2 CPU-offload step (see above)."""
    link = hw.gpu.pcie_gbps / 2 * 1e9 * PCIE_EFFICIENCY
    weight_b = config.precision.weight_bytes  # the host shards' dtype (fp32 master weights)
    copy_in = weight_b * model.params / shard / link  # one pass of unit-by-unit copies over all parameters
    copy_out = weight_b * trainable / shard / link  # gradients, in the weights' dtype
    accum = max(1, config.grad_accum)
    micro = compute_s / accum
    fwd = micro * (FWD_SHARE_CKPT if config.grad_ckpt else FWD_SHARE)
    one = max(fwd, copy_in) + max(micro - fwd, copy_in, copy_out) - micro
    exposed = one * accum + (accum - 1) * copy_out
    return exposed, cpu_step_s(trainable / shard, offload_threads(hw, config) if threads is None else threads, rate)
