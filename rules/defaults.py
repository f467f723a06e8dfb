"""The defaults table the rules start from (``rules/data/defaults.toml``): per-family learning
rates and optimizers (with sources), search limits, warmup, compile and dataloader constants."""

from __future__ import annotations

import tomllib
from functools import lru_cache

from pydantic import BaseModel, ConfigDict

from rules.engine import DATA_DIR


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
    roomy: float
    max_micro_batch: int
    one_gpu_enough_h: float
    min_scaling_efficiency: float
    lr_batch_ratio_warn: float


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
