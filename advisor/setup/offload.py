"""FSDP CPU offload: sharded parameters, gradients and optimizer states in host memory, the optimizer
stepping on the CPU (FSDP2 ``CPUOffloadPolicy``; Ren et al. 2021, ZeRO-Offload).

The GPU holds the gathered units and one unit's gradient before it is copied out. Its step cost
(PCIe copies, the host AdamW) is ``cpu_offload_step_s`` below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advisor.compromise_cost import PCIE_EFFICIENCY, CompromiseCost, compromise_rates
from advisor.config import TrainConfig
from advisor.errors import UserError
from advisor.models import ModelSpec
from advisor.setup.adapters import Lora
from advisor.setup.base import Option, Setup
from advisor.setup.precision import PureBf16
from advisor.setup.strategies import largest_unit, layer_unit, root_unit

if TYPE_CHECKING:
    from advisor.setup.ledger import MemoryLedger, StepLedger

GIB = float(2**30)
Hardware = Any  # advisor.hardware.HardwareSpec, built by the caller: setups never import hardware detection

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


class CpuOffload(Setup):
    name, flag, kind, family, tier = "cpu-offload", "--cpu-offload", "compromise", "offload", "exact"
    field, value = "cpu_offload", True
    summary = "FSDP CPU offload: parameters, gradients and optimizer states in host RAM, the step on the CPU"
    # with pure-bf16 the offloaded weights, gradients and Kahan states are 10 bytes a parameter, not 16: the
    # variant that fits a node whose RAM the plain offload exceeds (close arithmetic then: rules.compromise.tier)
    order, ladder_rank, takes_partners, host_offload = 40, 10, True, True
    bf16_params = True  # FSDP's, with its mixed-precision policy
    phrase = "CPU offload"
    options = (Option("--cpu-offload", "cpu_offload", "toggle",
                      "FSDP CPU offload of parameters, gradients and optimizer states", rank=4),)
    gives_up = ("speed: parameters, gradients and AdamW states live in host RAM, the optimizer steps on the CPU "
                "and every step copies the weights over PCIe")
    risk = "none (same arithmetic), but slower; needs the host RAM"
    source = "Ren et al. 2021 (ZeRO-Offload); PyTorch FSDP CPUOffload"

    label_rank = 4

    def label(self, config, compromise=None, style="short") -> str:
        return "CPU offload" if style in ("short", "tui") else "FSDP CPU offload"

    def activation_terms(self, led: MemoryLedger) -> None:
        # At the peak, the start of the loss's backward: the root unit (embeddings, head, final norm:
        # everything outside the wrapped layers) is gathered for the head's backward and
        # FSDPParamGroup.pre_backward has prefetched the last layer's unit (torch 2.13 _fully_shard).
        p = led.config.precision
        led.gathered = (root_unit(led.model) + layer_unit(led.model)) * (2 if p.autocast else p.weight_bytes)
        led.params_gathered = True

    def ends_grad_moment(self, led: MemoryLedger) -> bool:
        return True

    def gradient_terms(self, led: MemoryLedger) -> None:
        # FSDP CPUOffload(offload_params=True): sharded parameters, gradients and optimizer states
        # live in host memory and the optimizer steps on the CPU; the GPU holds the gathered units
        # (counted above) and one unit's gradient before it is copied out.
        # No gradient is on the GPU at the start of backward, and later only the unit's being reduced:
        # each unit's sharded fp32 gradient is copied to pinned host memory right after its reduce-scatter
        # (torch _fsdp_collectives.foreach_reduce), and with accumulation it is added to the host's.
        led.host = led.weights + led.grads + led.states
        led.live_grads = largest_unit(led.model) * 4
        led.accum_grads = 0.0
        led.weights = led.grads = led.states = 0.0
        led.notes.append(f"CPU offload: ~{led.host / GIB:.0f} GiB of host RAM per GPU for weights, gradients and "
                         "optimizer states")

    def extra_cost(self, step: StepLedger, cost: CompromiseCost) -> None:
        copies, cpu_step = cpu_offload_step_s(step.model, step.config, step.hw, step.compute_s, step.nt, step.shard,
                                              step.host_threads)
        cost.extra_s += copies + cpu_step
        cost.replaces_optimizer_s = True
        cost.notes.append(f"CPU offload: +{copies:.1f} s of PCIe copies not hidden by compute and +{cpu_step:.1f} s of "
                          f"gradient clipping and AdamW on {step.host_threads} host thread(s) per step")


OFFLOAD: tuple[Setup, ...] = (CpuOffload(),)

# Host bytes per parameter that FSDP CPU offload keeps in RAM: fp32 weights 4 + fp32 gradients 4 + AdamW's
# two fp32 moments 8 = 16 (the accounting of Rajbhandari et al. 2020, ZeRO, section 3.1, with the
# gradients in fp32 as FSDP's mixed precision keeps them). A bf16 model (pure-bf16): 2 + 2 + 2 x 2 + the
# Kahan buffer 2 (launcher.compromises.kahan); with --pure-bf16-update plain, no buffer.
HOST_BYTES_FP32_MASTER, HOST_BYTES_BF16_KAHAN, HOST_BYTES_BF16_PLAIN = 16, 10, 8


def host_bytes_per_param(config: TrainConfig) -> int:
    """Host bytes per parameter the offloaded state of ``config`` takes (the launch's host-RAM check)."""
    if not config.precision.casts_model:
        return HOST_BYTES_FP32_MASTER
    return HOST_BYTES_BF16_KAHAN if config.kahan else HOST_BYTES_BF16_PLAIN


def host_ram_short(need_gib: float, available_gib: float, model: str) -> UserError:
    """The refusal of a launch whose node cannot hold ``need_gib`` of offloaded state (``available_gib``: what
    the caller measured)."""
    flag = CpuOffload.flag
    return UserError(f"{flag} keeps ~{need_gib:.1f} GiB of {model}'s weights, gradients and optimizer states in "
                     f"each node's host memory; this machine has {available_gib:.1f} GiB available",
                     fix=f"free host memory, use {PureBf16.flag} ({HOST_BYTES_BF16_KAHAN} instead of "
                         f"{HOST_BYTES_FP32_MASTER} bytes per parameter), more nodes (each holds its share), or "
                         f"{Lora.flag} instead of {flag}")


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


def cpu_offload_step_s(model: ModelSpec, config: TrainConfig, hw: Hardware, compute_s: float, trainable: int,
                       shard: int, threads: int = 1, rate: float | None = None) -> tuple[float, float]:
    """(copy time not hidden by GPU compute, host optimizer time) of one FSDP2 CPU-offload step (see above) on
    ``threads`` host threads per rank."""
    link = hw.gpu.pcie_gbps / 2 * 1e9 * PCIE_EFFICIENCY
    weight_b = config.precision.weight_bytes  # the host shards' dtype (fp32 master weights)
    copy_in = weight_b * model.params / shard / link  # one pass of unit-by-unit copies over all parameters
    copy_out = weight_b * trainable / shard / link  # gradients, in the weights' dtype
    accum = max(1, config.grad_accum)
    micro = compute_s / accum
    fwd = micro * (FWD_SHARE_CKPT if config.grad_ckpt else FWD_SHARE)
    one = max(fwd, copy_in) + max(micro - fwd, copy_in, copy_out) - micro
    exposed = one * accum + (accum - 1) * copy_out
    return exposed, cpu_step_s(trainable / shard, threads, rate)
