"""FSDP CPU offload: sharded parameters, gradients and optimizer states in host memory, the optimizer
stepping on the CPU (FSDP2 ``CPUOffloadPolicy``; Ren et al. 2021, ZeRO-Offload).

The GPU holds the gathered units and one unit's gradient before it is copied out. Its step cost
(PCIe copies, the host AdamW) is ``advisor.compromise_cost.cpu_offload_step_s``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from advisor.setup.base import Option, Setup
from advisor.setup.strategies import largest_unit, layer_unit, root_unit

if TYPE_CHECKING:
    from advisor.setup.ledger import MemoryLedger

GIB = float(2**30)


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


OFFLOAD: tuple[Setup, ...] = (CpuOffload(),)
