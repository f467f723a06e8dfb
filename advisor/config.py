"""One exact training configuration: the knobs that change memory and speed.

Enums subclass ``str`` so they serialise as plain strings in JSON and plans.
"""

from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from advisor.errors import UserError


class Precision(str, Enum):
    """fp32/tf32: fp32 everywhere (tf32 lets matmuls use TF32 tensor cores).
    bf16/fp16: autocast with fp32 master weights (Accelerate's ``mixed_precision``).
    pure-bf16: weights, gradients and optimizer states all in bf16.
    fp8: bf16 autocast with fp32 master weights, and the transformer blocks' Linear layers run their three
    GEMMs in float8 (torchao's ``convert_to_float8_training``, tensorwise dynamic scaling; Hopper/Ada only:
    advisor.setup.precision.Fp8)."""

    fp32 = "fp32"
    tf32 = "tf32"
    bf16 = "bf16"
    fp16 = "fp16"
    pure_bf16 = "pure-bf16"
    fp8 = "fp8"

    @property
    def autocast(self) -> bool:
        return self in (Precision.bf16, Precision.fp16, Precision.fp8)

    @property
    def runs_as(self) -> "Precision":
        """The precision of everything but fp8's converted Linear layers: fp8 is bf16 autocast around them."""
        return Precision.bf16 if self is Precision.fp8 else self

    @property
    def weight_bytes(self) -> int:
        return 2 if self is Precision.pure_bf16 else 4

    @property
    def compute_bytes(self) -> int:
        """Bytes per element of matmul outputs and most activations."""
        return 4 if self in (Precision.fp32, Precision.tf32) else 2

    @property
    def casts_model(self) -> bool:
        """The model itself is bf16 (weights, gradients, optimizer states, the inputs cast on the device),
        not fp32 master weights: what the runtime casts and the tracer traces separately."""
        return self.weight_bytes == 2

    @property
    def trace_key(self) -> str:
        """The traced precision it runs as (advisor.tracer's PRECISIONS; fp16 autocast casts like bf16)."""
        if self.autocast:
            return "bf16"
        return self.value if self.casts_model else "fp32"

    @property
    def bf16_matmuls(self) -> bool:
        """Its matmuls run bf16 (autocast or a bf16 model): a GPU without bf16 tensor cores runs them slowly."""
        return self in (Precision.bf16, Precision.pure_bf16)

    @property
    def matmul_dtype(self) -> str:
        """The datasheet column its matmuls run at: a bf16 model computes in bf16, as bf16 autocast does."""
        return "bf16" if self.casts_model else self.value


class PureBf16Update(str, Enum):
    """Which optimizer step pure-bf16 runs (meaningful only with ``Precision.pure_bf16``).
    kahan: cardwise's KahanAdamW (launcher/compromises/kahan.py): bf16 moments plus a bf16
    compensation buffer, 13 unfused kernels per tensor; what the rules recommend.
    plain: torch.optim.AdamW (fused on CUDA) on bf16 weights, no compensation: what a script that
    calls ``model.to(torch.bfloat16)`` and builds its own AdamW runs."""

    kahan = "kahan"
    plain = "plain"


class Optimizer(str, Enum):
    adamw = "adamw"
    sgd = "sgd"  # with momentum (one state)
    adamw_8bit = "adamw-8bit"  # bitsandbytes AdamW8bit: blockwise 8-bit states
    # bitsandbytes PagedAdamW8bit: the same states in CUDA unified memory, paged to host RAM when the
    # GPU runs short (Dettmers et al. 2023, QLoRA, "paged optimizers")
    paged_adamw_8bit = "paged-adamw-8bit"

    @property
    def eight_bit(self) -> bool:
        return self in (Optimizer.adamw_8bit, Optimizer.paged_adamw_8bit)


class Strategy(str, Enum):
    single = "single"
    dp = "dp"  # torch.nn.DataParallel: for the bench's comparison only, never recommended
    ddp = "ddp"
    fsdp = "fsdp"
    # HSDP (hybrid sharding): FSDP inside each node, DDP across nodes (Zhao et al. 2023, PyTorch FSDP,
    # sec. 3.2.2): the per-micro-batch all-gathers stay on the node's fast links and only a gradient
    # shard's all-reduce crosses the network, once per step. Whole nodes only.
    hsdp = "hsdp"
    # FSDP that keeps the gathered weights across gradient accumulation: each unit's weights are
    # all-gathered once per optimizer step (the first micro-batch's forward) and stay unsharded until
    # the last micro-batch's backward (FSDP2 ``reshard_after_forward=False`` and
    # ``set_reshard_after_backward`` off on all but the last micro-batch); gradients are reduce-scattered
    # once per step, as plain FSDP under Accelerate's ``accumulate`` does. One all-gather a step instead
    # of two per micro-batch, for a full unsharded copy of the weights. Needs accumulation > 1.
    # docs/design.md "Strategies".
    fsdp_keep = "fsdp-keep"

    @property
    def sharded(self) -> bool:
        """Weights, gradients and optimizer states split over GPUs (FSDP over all, HSDP over a node)."""
        return self in (Strategy.fsdp, Strategy.hsdp, Strategy.fsdp_keep)

    @property
    def full_shard(self) -> bool:
        """Sharded over every GPU of the run (FSDP, with or without the weights kept gathered)."""
        return self in (Strategy.fsdp, Strategy.fsdp_keep)

    @property
    def one_gpu(self) -> bool:
        """One process on one GPU, whatever the GPUs at hand (no collectives, nothing to scale)."""
        return self is Strategy.single

    @property
    def keeps_gathered(self) -> bool:
        """FSDP whose gathered weights stay unsharded across the micro-batches of one step (needs
        accumulation; the runtime's per-micro-batch switch is launcher.keep_gathered)."""
        return self is Strategy.fsdp_keep


class TrainConfig(BaseModel):
    """What one training step looks like on each GPU."""

    model_config = ConfigDict(extra="forbid", use_enum_values=False)

    micro_batch: int = Field(8, description="samples per GPU per forward/backward")
    grad_accum: int = Field(1, description="micro-batches per optimizer step")
    seq_len: int | None = Field(None, description="tokens per sample (text models)")
    image_size: int | None = Field(None, description="square input side in pixels (vision models)")
    precision: Precision = Precision.bf16
    optimizer: Optimizer = Optimizer.adamw
    pure_bf16_update: PureBf16Update = Field(
        PureBf16Update.kahan, description="pure-bf16's AdamW step: kahan (KahanAdamW) or plain (torch AdamW on bf16)")
    compile: bool = False
    channels_last: bool = False
    grad_ckpt: bool = False
    # Left out of a dump when None (exclude_if): plans and reports of runs without it stay as they were.
    grad_ckpt_every: int | None = Field(
        None, exclude_if=lambda v: v is None, description="selective activation checkpointing: every k-th block (residual stage) is checkpointed, "
                          "torchtitan's selective layer AC (k >= 2; k = 1 is grad_ckpt); None: grad_ckpt says")
    strategy: Strategy = Strategy.single
    lora_rank: int | None = Field(None, description="LoRA rank on attention/MLP projections; None = full fine-tune")
    optimizer_in_backward: bool = Field(
        False, description="each parameter's optimizer step runs in a hook as soon as its gradient is ready, so no "
        "full gradient buffer lives at once (needs grad_accum 1)")
    cpu_offload: bool = Field(
        False, description="FSDP CPU offload: parameters, gradients and optimizer states live in host memory")
    quantize_base: Literal["4bit"] | None = Field(
        None, description="QLoRA: LoRA's frozen base projections quantized to 4-bit NF4 with double quantization "
                          "(bitsandbytes Linear4bit; Dettmers et al. 2023); needs lora_rank")

    @property
    def adapters(self) -> bool:
        """Trains adapters only, the base frozen (LoRA, QLoRA): the trainable parameters, the step's
        work and the learning-rate row follow."""
        return self.lora_rank is not None

    def on_one_gpu(self, **update) -> "TrainConfig":
        """The same configuration as plain one-GPU training (``update``: other fields to change with it)."""
        return self.model_copy(update={**update, "strategy": Strategy.single})

    @property
    def kahan(self) -> bool:
        """pure-bf16 AdamW stepped by KahanAdamW (the compensated update), not plain torch AdamW."""
        return (self.precision is Precision.pure_bf16 and self.optimizer is Optimizer.adamw
                and self.pure_bf16_update is PureBf16Update.kahan)

    @model_validator(mode="after")
    def _positive(self) -> "TrainConfig":
        """Each number on its own; what combines with what is advisor.setup.constraints' table (which
        imports this module: a validator here never calls it)."""
        for name in ("micro_batch", "grad_accum", "seq_len", "image_size", "lora_rank", "grad_ckpt_every"):
            v = getattr(self, name)
            if v is not None and v < 1:
                flag = "--" + name.replace("_", "-")
                raise UserError(f"{flag} must be a positive integer, got {v}", fix=f"e.g. {flag} 8")
        if self.grad_ckpt_every == 1:
            raise UserError("--grad-ckpt-every 1 checkpoints every block", fix="use --grad-ckpt, or --grad-ckpt-every 2 "
                            "(every second block)")
        return self
