"""One way from a ``Request`` to the starting ``TrainConfig``: the pins, else stated defaults.

Used by ``advise estimate`` (``advisor.exact``), the recommendation (``rules.flow.start``, whose
planner then searches micro-batch, accumulation, checkpointing, strategy and compile), the CPU plan
(``launcher.cpu_plan``) and so the launcher. Each default applied is returned as one note
("micro-batch 8"), so the caller can say it once; nothing is changed silently.

Defaults (one table, by where the run goes):
- micro-batch: 8 on a GPU, 1 for a decoder LLM over 1B parameters (a 7-8B model's activations at
  2k tokens take ~20 GiB a sample without checkpointing), 4 on CPU ranks (a step in seconds on a
  laptop core); the recommendation's search replaces it unless pinned;
- precision: bf16 autocast where the GPU has bf16 (compute capability >= 8.0), else fp16 with a
  GradScaler (Micikevicius et al. 2018); fp32 on CPU ranks, bf16 there for LoRA (frozen bf16 base);
- strategy: single on one GPU, DDP on several, FSDP for CPU offload;
- sequence length / image size: the model's own; on CPU ranks at most 128 tokens;
- optimizer: AdamW (the rules' family default replaces it for a recommendation).
"""

from __future__ import annotations

from typing import Literal

from advisor.config import Optimizer, Precision, TrainConfig
from advisor.gpus import GpuSpec
from advisor.models import ModelSpec
from advisor.request import Request
from advisor.setup import SETUPS, active, offloads, request_settings
from advisor.setup.constraints import REQUEST_ROWS, Combo, check
from advisor.setup.strategies import starting_strategy

DEFAULT_MICRO_BATCH = {"gpu": 8, "gpu-llm": 1, "cpu": 4}
LLM_PARAMS = 1e9  # "decoder LLM": a decoder of at least this many parameters
CPU_MAX_SEQ_LEN = 128  # CPU-friendly; catalog defaults (1024-2048) take minutes per step on a laptop


def is_llm(spec: ModelSpec | None) -> bool:
    return spec is not None and spec.family == "decoder" and spec.params > LLM_PARAMS


def default_micro_batch(spec: ModelSpec | None, device: Literal["gpu", "cpu"]) -> int:
    return DEFAULT_MICRO_BATCH["cpu" if device == "cpu" else "gpu-llm" if is_llm(spec) else "gpu"]


def starting_config(req: Request, spec: ModelSpec | None, *, device: Literal["gpu", "cpu"] = "gpu",
                    gpu: GpuSpec | None = None, ranks: int = 1) -> tuple[TrainConfig, list[str]]:
    """(config, notes on the defaults applied) for ``req`` on ``ranks`` GPUs of kind ``gpu`` (or CPU ranks)."""
    notes: list[str] = []
    micro = req.micro_batch
    if micro is None:
        micro = default_micro_batch(spec, device)
        why = (" per process (--micro-batch to change)" if device == "cpu" else
               f" (decoder LLM over {LLM_PARAMS / 1e9:.0f}B parameters)" if is_llm(spec) else "")
        notes.append(f"micro-batch {micro}{why}")
    precision = req.precision
    if precision is None:
        if device == "cpu":
            # a way of training whose runtime needs its own precision on CPU (LoRA: a frozen bf16 base under
            # bf16 autocast, launcher.compromises.lora) says so
            need = next((s for s in SETUPS if s.cpu_precision is not None and s.on(req)), None)
            precision = need.cpu_precision if need is not None else Precision.fp32
            if need is not None:
                notes.append(need.cpu_precision_note)
        else:
            bf16 = gpu is None or gpu.supports_bf16
            precision = Precision.bf16 if bf16 else Precision.fp16
            if gpu is not None:
                notes.append(f"precision {precision.value} ({gpu.name} {'supports' if bf16 else 'lacks'} bf16)")
    # The pins and the device (advisor.setup.constraints); a GPU run's ranks are the planner's to choose.
    check(Combo.of_request(req, precision=precision, cpu=device == "cpu", ranks=ranks if device == "cpu" else None,
                           nodes=req.nodes if device == "cpu" else None), only=REQUEST_ROWS)
    strategy = req.strategy
    if strategy is None:
        strategy = starting_strategy(ranks, offloads(req))
        if device == "gpu":
            notes.append(f"strategy {strategy.value} ({ranks} GPU{'s' if ranks > 1 else ''})")
    seq_len, image_size = req.seq_len, req.image_size
    if spec is not None:
        # A flag that does not size this model's input is dropped (rules flag.seq-len-not-text and
        # flag.image-size-not-vision say so), so it reaches neither the estimate nor the launch command.
        seq_len = None if spec.is_vision else seq_len
        image_size = None if spec.is_text else image_size
    if spec is not None and seq_len is None:
        if device == "cpu":
            if spec.arch is not None and not spec.is_vision:
                seq_len = min(CPU_MAX_SEQ_LEN, spec.default_seq_len or CPU_MAX_SEQ_LEN)
                notes.append(f"sequence length {seq_len} for CPU (--seq-len to change)")
        elif spec.is_text:
            seq_len = spec.default_seq_len
            if seq_len:
                notes.append(f"seq len {seq_len} (the model's)")
    if spec is not None and image_size is None and spec.is_vision and device == "gpu":
        image_size = spec.default_image_size
        if image_size:
            notes.append(f"image size {image_size} (the model's)")
    optimizer = req.optimizer or Optimizer.adamw
    if req.optimizer is None and device == "gpu":
        notes.append("optimizer adamw")
    config = TrainConfig(micro_batch=micro, grad_accum=req.grad_accum or 1, seq_len=seq_len, image_size=image_size,
                         precision=precision, optimizer=optimizer, compile=bool(req.compile),
                         channels_last=bool(req.channels_last), grad_ckpt=bool(req.grad_ckpt), strategy=strategy,
                         **request_settings(req))  # the ways of training's own flags (advisor.setup)
    for s in active(config):
        notes += s.starting_notes(req, config)
    return config, notes
