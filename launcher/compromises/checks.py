"""What a plan's memory compromises need, checked when ``advise launch`` plans, before any process starts.

Each refusal is an ``advisor.errors.UserError`` (one line with the fix, exit 2): a missing optional
package is found with ``importlib.util.find_spec`` here, not as an ImportError in every rank
minutes later; a combination the runtime cannot honour is refused rather than silently changed.
"""

from __future__ import annotations

import importlib.util

from advisor.setup.constraints import EIGHT_BIT_FSDP
from advisor.config import Optimizer, Precision, Strategy
from advisor.errors import UserError
from advisor.plan import Plan

# Host bytes per parameter that FSDP CPU offload keeps in RAM: fp32 weights 4 + fp32 gradients 4 + AdamW's
# two fp32 moments 8 = 16 (the accounting of Rajbhandari et al. 2020, ZeRO, section 3.1, with the
# gradients in fp32 as FSDP's mixed precision keeps them). pure-bf16: 2 + 2 + 2 x 2 + the Kahan buffer 2
# (launcher.compromises.kahan); with --pure-bf16-update plain, no buffer.
OFFLOAD_BYTES_PER_PARAM = {"fp32-master": 16, "pure-bf16": 10, "pure-bf16-plain": 8}
# Of the RAM the kernel reports available, leave a tenth to the page cache and the processes
# themselves (the same margin launcher.host_fit uses for CPU ranks).
RAM_FRACTION = 0.9

EXTRAS = {"bitsandbytes": "8bit", "peft": "lora"}


def _require(package: str, what: str) -> None:
    if importlib.util.find_spec(package) is None:
        raise UserError(f"{what} needs {package}, which is not installed in this Python",
                        fix=f"pip install 'cardwise[{EXTRAS[package]}]' (or pip install {package})")


def offload_host_gib(plan: Plan, params: int) -> float:
    """Host RAM (GiB) FSDP CPU offload holds for ``params`` parameters of ``plan`` (all ranks of a node together)."""
    c = plan.config
    per = OFFLOAD_BYTES_PER_PARAM["fp32-master" if c.precision is not Precision.pure_bf16 else
                                  "pure-bf16" if c.kahan else "pure-bf16-plain"]
    return params * per / 2**30


def _model_spec(plan: Plan):
    from advisor.sources import resolve_model

    return resolve_model(plan.model)


def check_compromises(plan: Plan, *, available_gib: float | None = None, spec=None) -> None:
    """Refuse (UserError) a plan whose compromises cannot run here; ``available_gib``: host RAM, measured when None."""
    c = plan.config
    if c.optimizer.eight_bit:
        _require("bitsandbytes", f"--optimizer {c.optimizer.value}")
        if c.strategy.full_shard or c.cpu_offload:
            raise UserError(f"--optimizer {c.optimizer.value} under FSDP: " + EIGHT_BIT_FSDP,
                            fix="use --strategy single or ddp with it, or --optimizer adamw under FSDP")
        if c.optimizer is Optimizer.paged_adamw_8bit and plan.cpu:
            # bitsandbytes would warn and run the non-paged AdamW8bit: not what the plan says
            raise UserError("--optimizer paged-adamw-8bit pages its states between GPU and host memory (CUDA unified "
                            "memory); a --cpu run has no GPU to page from",
                            fix="use --optimizer adamw-8bit (or adamw) with --cpu, or run on a GPU")
    if c.quantize_base:  # bitsandbytes >= 0.45 runs NF4 on CPU too (its torch fallback): CPU runs test the path
        _require("bitsandbytes", "--quantize-base 4bit")
        if c.strategy.full_shard or c.cpu_offload:
            raise UserError("--quantize-base 4bit under FSDP: sharding 4-bit weights needs a quantized storage dtype "
                            "FSDP can flatten (not built here)", fix="use --strategy single or ddp with QLoRA")
    if c.lora_rank:
        _require("peft", f"--lora-rank {c.lora_rank}")
        if c.precision in (Precision.fp32, Precision.tf32):
            raise UserError(f"--lora-rank trains fp32 adapters on a frozen bf16 base under bf16 autocast; "
                            f"--precision {c.precision.value} does not apply",
                            fix="drop --precision (or use --precision bf16) with --lora-rank")
        if plan.model.name:
            spec = spec or _model_spec(plan)
            if spec.arch is None:
                raise UserError(f"--lora-rank puts adapters on attention and MLP projections; {plan.model.name} has none",
                                fix="drop --lora-rank, or pick a transformer (see `advise models`)")
    if c.optimizer_in_backward:
        if c.grad_accum != 1:
            raise UserError(f"--optimizer-in-backward steps each parameter during backward, so it cannot accumulate "
                            f"{c.grad_accum} micro-batches", fix="use --grad-accum 1 (a smaller --batch-size), or drop "
                                                                "--optimizer-in-backward")
        if plan.world_size != 1 or c.strategy is not Strategy.single or c.cpu_offload:
            raise UserError("--optimizer-in-backward runs on one process only (its hooks step before DDP/FSDP would "
                            "reduce the gradient)", fix="use --strategy single on one GPU (--gpus 1 / --processes 1), "
                                                       "or drop --optimizer-in-backward")
    if c.cpu_offload:
        if plan.cpu:
            raise UserError("--cpu-offload moves GPU state to host memory; a --cpu run has it there already",
                            fix="drop --cpu-offload with --cpu, or drop --cpu and run on a GPU")
        if c.strategy is Strategy.ddp:
            raise UserError("--cpu-offload is FSDP's (parameters, gradients and optimizer states sharded to host "
                            "memory), not DDP's", fix="use --strategy fsdp (or single, one process) with --cpu-offload")
        spec = spec or _model_spec(plan)
        need = offload_host_gib(plan, spec.params)
        if available_gib is None:
            import psutil

            available_gib = psutil.virtual_memory().available / 2**30
        if need > available_gib * RAM_FRACTION:
            raise UserError(f"--cpu-offload keeps ~{need:.1f} GiB of {plan.model.label()}'s weights, gradients and "
                            f"optimizer states in host memory; this machine has {available_gib:.1f} GiB available",
                            fix="free host memory, use --precision pure-bf16 (10 instead of 16 bytes per parameter), "
                                "or --lora-rank R / more GPUs instead of --cpu-offload")
