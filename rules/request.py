"""What the user asked for: a ``Request`` (flags or API keywords; ``None`` = not pinned) and the
defaults table (``rules/data/defaults.toml``) the rules start from."""

from __future__ import annotations

import tomllib
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from advisor.config import Optimizer, Precision, Strategy
from advisor.errors import UserError
from advisor.plan import ModelRef
from rules.engine import DATA_DIR

# Request fields that are configuration flags: given = pinned (DESIGN.md).
CONFIG_PINS = ("micro_batch", "grad_accum", "seq_len", "image_size", "precision", "optimizer", "compile",
               "channels_last", "grad_ckpt", "strategy", "lora_rank")


class Request(BaseModel):
    """Everything a recommendation is asked with. Config fields left ``None`` are for the rules to choose."""

    model_config = ConfigDict(extra="forbid")

    model: ModelRef
    # hardware
    gpu: str | None = Field(None, description="GPU kind; None = what is detected")
    gpus: int | None = Field(None, ge=1, description="GPUs per node; None = all detected (or 1 with --gpu)")
    nodes: int = Field(1, ge=1)
    interconnect: Literal["nvlink", "pcie"] | None = None
    network_gbps: float | None = Field(None, gt=0)
    # configuration (pinned when given)
    micro_batch: int | None = Field(None, ge=1)
    grad_accum: int | None = Field(None, ge=1)
    seq_len: int | None = Field(None, ge=1)
    image_size: int | None = Field(None, ge=1)
    precision: Precision | None = None
    optimizer: Optimizer | None = None
    compile: bool | None = None
    channels_last: bool | None = None
    grad_ckpt: bool | None = None
    strategy: Strategy | None = None
    lora_rank: int | None = Field(None, ge=1)
    # workload
    batch_size: int | None = Field(None, ge=1, description="global batch, pinned")
    dataset_size: int | None = Field(None, ge=1)
    epochs: float | None = Field(None, gt=0)
    deadline_h: float | None = Field(None, gt=0)
    base_lr: float | None = Field(None, gt=0)
    base_batch: int | None = Field(None, ge=1)
    lr_scaling: Literal["linear", "sqrt", "none"] = "linear"
    keep_global_batch: bool = False
    task: str | None = None
    # output
    alternatives: bool = Field(False, description="list the memory compromises even when the standard setup fits")

    @model_validator(mode="after")
    def _consistent(self) -> "Request":
        if self.strategy is Strategy.dp:
            raise UserError("--strategy dp (DataParallel) is never recommended",
                            fix="use --strategy ddp; `advise rules dataparallel.never` says why (the bench still measures dp)")
        if self.deadline_h is not None and not (self.dataset_size and self.epochs):
            raise UserError("a deadline needs the amount of work to compare against",
                            fix="add --dataset-size N --epochs E (samples per epoch and passes), or drop --deadline")
        if bool(self.dataset_size) != bool(self.epochs):
            given, missing = ("--dataset-size", "--epochs") if self.dataset_size else ("--epochs", "--dataset-size")
            raise UserError(f"{given} without {missing}: time-to-train needs both", fix=f"add {missing}")
        b = self.batch_size
        if b is not None and self.micro_batch and b % self.micro_batch:
            raise UserError(f"--batch-size {b} is not a multiple of --micro-batch {self.micro_batch}",
                            fix="micro-batch x accumulation x GPUs must equal the global batch: pick a micro-batch that divides it")
        if b is not None and self.micro_batch and self.grad_accum and b % (self.micro_batch * self.grad_accum):
            raise UserError(f"--batch-size {b} is not a multiple of --micro-batch {self.micro_batch} x --grad-accum {self.grad_accum}",
                            fix="drop --grad-accum and let cardwise derive it, or change the numbers")
        if self.strategy is Strategy.single and self.nodes > 1:
            raise UserError("--strategy single with --nodes > 1", fix="drop --nodes, or use --strategy ddp|fsdp")
        return self

    def pinned(self) -> frozenset[str]:
        return frozenset(k for k in CONFIG_PINS if getattr(self, k) is not None)


class FamilyDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    optimizer: str = "adamw"
    base_lr: float
    base_batch: int
    source: str


class ModelDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    optimizer: str | None = None
    base_lr: float | None = None
    base_batch: int | None = None
    source: str


class SearchDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    saturation: float
    roomy: float
    max_micro_batch: int
    max_round_up: float


class WarmupDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    warmup_fraction: float
    warmup_epochs: float
    min_steps: int
    unknown_steps: int


class CompileDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    base_min: float
    per_layer_s: float
    repay_factor: float


class DataDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    decode_rate: float
    max_workers: int
    text_max_workers: int


class Defaults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    family: dict[str, FamilyDefaults]
    model: dict[str, ModelDefaults] = {}
    search: SearchDefaults
    warmup: WarmupDefaults
    compile: CompileDefaults
    data: DataDefaults

    def for_model(self, name: str, family: str) -> FamilyDefaults:
        fam = self.family.get(family, self.family["custom"])
        over = self.model.get(name)
        if over is None:
            return fam
        return FamilyDefaults(optimizer=over.optimizer or fam.optimizer, base_lr=over.base_lr or fam.base_lr,
                              base_batch=over.base_batch or fam.base_batch, source=over.source)


@lru_cache(maxsize=1)
def load_defaults() -> Defaults:
    return Defaults(**tomllib.loads((DATA_DIR / "defaults.toml").read_text()))
