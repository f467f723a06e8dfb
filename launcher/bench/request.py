"""What ``advise bench`` is asked: variants (``bf16+compile``), device counts, modes; and the jobs
they become (``launcher.bench.plan`` makes them). Parsers raise ``UserError`` naming the flag.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.config import Precision
from advisor.errors import UserError

MODES = ("single", "dp", "ddp", "fsdp")


class Variant(BaseModel):
    """One numeric recipe: precision plus compile and memory format. Text form ``bf16+compile+channels-last``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    precision: Precision
    compile: bool = False
    channels_last: bool = False

    @property
    def label(self) -> str:
        return "+".join([self.precision.value] + (["compile"] if self.compile else [])
                        + (["channels-last"] if self.channels_last else []))

    @classmethod
    def parse(cls, text: str, *, compile: bool = False, channels_last: bool = False) -> "Variant":
        parts = [p.strip().lower() for p in text.split("+") if p.strip()]
        if not parts:
            raise UserError("empty precision in --precision", fix="e.g. --precision fp32,bf16,bf16+compile")
        choices = [p.value for p in Precision]
        if parts[0] not in choices:
            raise UserError(f"unknown precision '{parts[0]}' in --precision {text}",
                            fix=f"use {', '.join(choices)}, optionally +compile and +channels-last (e.g. bf16+compile)")
        for extra in parts[1:]:
            if extra == "compile":
                compile = True
            elif extra in ("channels-last", "channels_last", "cl"):
                channels_last = True
            else:
                raise UserError(f"unknown option '+{extra}' in --precision {text}",
                                fix="options are +compile and +channels-last, e.g. --precision bf16+compile+channels-last")
        return cls(precision=Precision(parts[0]), compile=compile, channels_last=channels_last)


def parse_variants(text: str | None, *, default: str, compile: bool = False, channels_last: bool = False) -> list[Variant]:
    """``--precision fp32,bf16,bf16+compile`` (``--compile``/``--channels-last`` apply to all)."""
    items = [t for t in (text or default).split(",") if t.strip()]
    out: list[Variant] = []
    for item in items:
        v = Variant.parse(item, compile=compile, channels_last=channels_last)
        if v not in out:
            out.append(v)
    return out


def parse_counts(text: str, flag: str) -> list[int]:
    try:
        counts = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UserError(f"{flag} takes comma-separated whole numbers, got '{text}'", fix=f"e.g. {flag} 1,2,4,8") from None
    if not counts or any(c < 1 for c in counts):
        raise UserError(f"{flag} counts must be at least 1, got '{text}'", fix=f"e.g. {flag} 1,2,4,8")
    return sorted(set(counts))


def parse_modes(text: str) -> list[str]:
    modes = []
    for m in (t.strip().lower() for t in text.split(",") if t.strip()):
        if m not in MODES:
            from advisor.errors import unknown_name

            raise unknown_name("mode", m, MODES, "advise bench --help")
        if m not in modes:
            modes.append(m)
    if not modes:
        raise UserError("--modes is empty", fix=f"e.g. --modes {','.join(MODES)}")
    return modes


class BenchRequest(BaseModel):
    """Everything ``advise bench`` was asked; ``None`` sizes are filled per model (and noted)."""

    model_config = ConfigDict(extra="forbid")

    models: list[str]
    cpu: bool = Field(False, description="CPU processes over gloo instead of GPUs")
    counts: list[int] = Field(default_factory=lambda: [1], description="GPUs (or CPU processes) per configuration")
    modes: list[Literal["single", "dp", "ddp", "fsdp"]] = Field(default_factory=lambda: ["single", "ddp"])
    variants: list[Variant] = Field(default_factory=lambda: [Variant(precision=Precision.bf16)])
    micro_batch: int | None = Field(None, ge=1, description="per GPU / process; default per model")
    micro_batches: dict[str, int] = Field(default_factory=dict, description="per-model micro-batch, over micro_batch")
    seq_len: int | None = Field(None, ge=1)
    seq_lens: dict[str, int] = Field(default_factory=dict, description="per-model sequence length, over seq_len")
    image_size: int | None = Field(None, ge=1)
    steps: int = Field(10, ge=2, description="timed optimizer steps per run")
    warmup: int = Field(3, ge=1, description="untimed steps before (compile happens here)")
    comm_steps: int = Field(3, ge=0, description="DDP no_sync/synchronised pairs for the exposed communication")
    dataloader_workers: int | None = Field(None, ge=0, description="also measure a DataLoader with N workers")
    calibrate: bool = Field(True, description="save the factors to HOME/calibration.json")
    grace_s: float = 10.0


class Job(BaseModel):
    """One launch to make, or one row to report as skipped."""

    model: str
    family: str
    variant: Variant
    mode: str
    devices: int
    micro_batch: int
    seq_len: int | None = None
    image_size: int | None = None
    skip: str | None = Field(None, description="why this combination is not run")
    baseline_added: bool = Field(False, description="single row added only as the speedup baseline")

    @property
    def label(self) -> str:
        return f"{self.model} {self.variant.label} {self.mode} x{self.devices}"
