"""``advise estimate``: one exact configuration from a ``Request``, nothing chosen by rules.

Unpinned fields get fixed, stated defaults (micro-batch 8, or 1 for decoder LLMs over 1B
parameters; bf16 where the GPU has it, else fp16; single on one GPU, else DDP; the model's own
sequence length or image size; AdamW), each reported once in the returned list. The edges (the
model source, NVML, the calibration file) are resolved here; the arithmetic is ``estimate()``.
"""

from __future__ import annotations

import os

from advisor.calibration import Calibration
from advisor.config import Optimizer, Precision, PureBf16Update, Strategy, TrainConfig
from advisor.errors import UserError
from advisor.estimate import Estimate, estimate
from advisor.hardware import Machine, detect_machine, resolve_hardware
from advisor.request import Request
from advisor.sources import as_script_runs_it, resolve_model


def estimate_request(req: Request, *, machine: Machine | None = None,
                     calibration: Calibration | None = None) -> tuple[Estimate, list[str]]:
    """(Estimate, defaults applied) for ``req``. UserError for a request that names no configuration."""
    ref, note = as_script_runs_it(req.model)
    applied: list[str] = [note] if note else []
    spec = resolve_model(ref)
    if machine is None:
        # A named GPU needs no NVML (only the CPU core count).
        machine = Machine(cpu_cores=os.cpu_count() or 1) if req.gpu else detect_machine()
    hw = resolve_hardware(machine, req.gpu, req.gpus, req.nodes, req.interconnect, req.network_gbps)
    llm = spec.family == "decoder" and spec.params > 1e9
    micro = req.micro_batch
    if micro is None:
        micro = 1 if llm else 8
        applied.append(f"micro-batch {micro}" + (" (decoder LLM over 1B parameters)" if llm else ""))
    precision = req.precision
    if precision is None:
        precision = Precision.bf16 if hw.gpu.supports_bf16 else Precision.fp16
        applied.append(f"precision {precision.value} ({hw.gpu.name} {'supports' if hw.gpu.supports_bf16 else 'lacks'} bf16)")
    strategy = req.strategy
    if strategy is None:
        strategy = Strategy.fsdp if req.cpu_offload else Strategy.single if hw.total_gpus == 1 else Strategy.ddp
        applied.append(f"strategy {strategy.value} ({hw.total_gpus} GPU{'s' if hw.total_gpus > 1 else ''})")
    elif strategy is Strategy.single and hw.total_gpus > 1:
        raise UserError(f"--strategy single with {hw.total_gpus} GPUs", fix="use --gpus 1, or --strategy ddp|fsdp")
    seq_len = req.seq_len or (spec.default_seq_len if spec.is_text else None)
    if req.seq_len is None and seq_len:
        applied.append(f"seq len {seq_len} (the model's)")
    image = req.image_size or (spec.default_image_size if spec.is_vision else None)
    if req.image_size is None and image:
        applied.append(f"image size {image} (the model's)")
    if req.optimizer is None:
        applied.append("optimizer adamw")
    if precision is Precision.pure_bf16 and req.pure_bf16_update is None and (req.optimizer or Optimizer.adamw) is Optimizer.adamw:
        applied.append("pure-bf16 update kahan (cardwise's KahanAdamW; --pure-bf16-update plain for torch AdamW on bf16 weights)")
    cfg = TrainConfig(micro_batch=micro, grad_accum=req.grad_accum or 1, seq_len=seq_len, image_size=image,
                      precision=precision, optimizer=req.optimizer or Optimizer.adamw, compile=bool(req.compile),
                      channels_last=bool(req.channels_last), grad_ckpt=bool(req.grad_ckpt), strategy=strategy,
                      lora_rank=req.lora_rank, quantize_base=req.quantize_base,
                      optimizer_in_backward=bool(req.optimizer_in_backward),
                      cpu_offload=bool(req.cpu_offload), pure_bf16_update=req.pure_bf16_update or PureBf16Update.kahan)
    est = estimate(spec, cfg, hw, dataset_size=req.dataset_size, epochs=req.epochs, calibration=calibration)
    return est, applied
