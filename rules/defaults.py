"""The defaults table the rules start from (``rules/data/defaults.toml``): published learning-rate
recipes by family, task and size (with sources; chosen by ``rules.lr``), search limits, warmup,
compile and dataloader constants."""

import tomllib
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from advisor.schedule import LrScaling, WarmupPolicy
from rules.engine import DATA_DIR


class LrRecipeRow(BaseModel):
    """One published learning-rate recipe ([[lr]] in defaults.toml)."""

    model_config = ConfigDict(extra="forbid")

    family: str = Field(description="decoder, encoder, cnn, vit, or 'any' (by optimizer)")
    task: Literal["pretrain", "finetune", "any"]
    adapter: bool = Field(False, description="for LoRA/QLoRA adapters (TrainConfig.adapters)")
    params: float | None = Field(None, gt=0, description="the model size it was tuned at (nearest size wins)")
    optimizer: str
    base_lr: float = Field(gt=0)
    base_batch: int | None = Field(None, ge=1, description="samples")
    batch_tokens: int | None = Field(None, ge=1, description="tokens (the paper's unit): / the run's sequence length")
    scaling: LrScaling | None = Field(None, description="the recipe's own batch-scaling rule; None = by optimizer")
    source: str

    @model_validator(mode="after")
    def _one_batch(self) -> "LrRecipeRow":
        if (self.base_batch is None) == (self.batch_tokens is None):
            raise ValueError(f"recipe '{self.source}': give exactly one of base_batch and batch_tokens")
        return self


class ModelDefaults(BaseModel):
    """A catalog model whose family's recipe does not apply."""

    model_config = ConfigDict(extra="forbid")

    task: Literal["pretrain", "finetune"] | None = None
    optimizer: str | None = None
    base_lr: float
    base_batch: int
    source: str


class TaskInference(BaseModel):
    """When --task is not given but the workload is: rules.lr.infer_task's thresholds ([task_inference])."""

    model_config = ConfigDict(extra="forbid")
    text_tokens_per_param: float = Field(gt=0)
    vision_min_epochs: float = Field(gt=0)
    vision_min_samples_seen: int = Field(ge=1)


class BatchRange(BaseModel):
    """How far a pretraining run's global batch may grow ([batch_range.FAMILY]; rules.planner)."""

    model_config = ConfigDict(extra="forbid")
    optimizer: str | None = Field(None, description="the range holds for this optimizer's kind only (None: any)")
    start_batch: int | None = Field(None, ge=1, description="the batch to start from; None = the recipe's")
    max_batch: int | None = Field(None, ge=1, description="samples; None = the recipe's own batch (no growth)")
    source: str


class SearchDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid")
    roomy: float
    max_micro_batch: int
    one_gpu_enough_h: float
    min_scaling_efficiency: float
    lr_batch_ratio_warn: float


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

    task: dict[str, Literal["pretrain", "finetune"]]
    task_inference: TaskInference
    batch_range: dict[str, BatchRange] = {}
    lr: list[LrRecipeRow]
    model: dict[str, ModelDefaults] = {}
    search: SearchDefaults
    warmup: WarmupPolicy
    compile: CompileDefaults
    data: DataDefaults


@lru_cache(maxsize=1)
def load_defaults() -> Defaults:
    return Defaults(**tomllib.loads((DATA_DIR / "defaults.toml").read_text()))
