"""What the user has chosen so far, as plain data: hardware, model and workload.

No textual here: screens edit a ``WizardState``, workers receive a frozen copy of it (pydantic
``model_copy``), and ``WizardState.to_request()`` turns it into the typed ``advisor.request.Request``
that ``advise`` itself builds from its flags. Every field means what the CLI flag of the same name
means (DESIGN.md contracts), so the wizard and ``advise`` agree on every number.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.errors import UserError
from advisor.hardware import ASSUMED_GPU, ASSUMED_GPU_COUNT, HardwareSpec, Machine, resolve_hardware
from advisor.plan import ModelRef
from advisor.request import Request

# Planned for when nothing is detected and nothing is named: the one stated default (advisor.hardware).
DEFAULT_PLANNED_GPU = ASSUMED_GPU
DEFAULT_PLANNED_COUNT = ASSUMED_GPU_COUNT


class HardwareChoice(BaseModel):
    """Detected GPUs, or a machine the user plans for (``--gpu NAME --gpus N --nodes N``)."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["detected", "planned"] = "detected"
    gpu: str = Field(DEFAULT_PLANNED_GPU, description="GPU table name, used in planned mode")
    gpus: int | None = Field(None, ge=1, description="GPUs per node; None = all detected (planned: 8)")
    nodes: int = Field(1, ge=1)

    @classmethod
    def initial(cls, machine: Machine, gpu: str | None = None, gpus: int | None = None,
                nodes: int = 1) -> "HardwareChoice":
        """Detected GPUs when there are some and none is named; planned otherwise."""
        if gpu is not None:
            from advisor.gpus import get_gpu

            return cls(mode="planned", gpu=get_gpu(gpu).name, gpus=gpus, nodes=nodes)
        if machine.has_gpu:
            kind = machine.gpus[0].spec or DEFAULT_PLANNED_GPU  # the planned-mode default: the same kind
            return cls(mode="detected", gpu=kind, gpus=gpus, nodes=nodes)
        return cls(mode="planned", gpus=gpus or DEFAULT_PLANNED_COUNT, nodes=nodes)

    def resolve(self, machine: Machine) -> HardwareSpec:
        """The HardwareSpec an estimate uses (UserError when the detected GPU is not in the table)."""
        if self.mode == "planned":
            return resolve_hardware(machine, gpu=self.gpu, gpus=self.gpus or DEFAULT_PLANNED_COUNT, nodes=self.nodes)
        return resolve_hardware(machine, gpus=self.gpus, nodes=self.nodes)

    def request_fields(self) -> dict:
        """The ``Request`` hardware fields ``--gpu --gpus --nodes`` (None = what is detected)."""
        if self.mode == "planned":
            return {"gpu": self.gpu, "gpus": self.gpus or DEFAULT_PLANNED_COUNT, "nodes": self.nodes}
        return {"gpu": None, "gpus": self.gpus, "nodes": self.nodes}

    def label(self, machine: Machine) -> str:
        if self.mode == "detected" and machine.has_gpu:
            n = self.gpus or len(machine.gpus)
            return f"{n}x {machine.gpus[0].name} (detected)"
        count = self.gpus or DEFAULT_PLANNED_COUNT
        nodes = f" x {self.nodes} nodes" if self.nodes > 1 else ""
        return f"{count}x {self.gpu}{nodes} (planned)"


class Workload(BaseModel):
    """The workload flags; None = not given (the rules or the model's defaults decide)."""

    model_config = ConfigDict(extra="forbid")

    task: Literal["pretrain", "finetune"] | None = None
    batch_size: int | None = Field(None, description="global batch")
    seq_len: int | None = None
    image_size: int | None = None
    dataset_size: int | None = None
    epochs: float | None = None
    deadline_h: float | None = None
    base_lr: float | None = None
    base_batch: int | None = None
    lr_scaling: Literal["auto", "linear", "sqrt", "none"] = "auto"  # auto: the recipe's rule (Request's None)

    def problems(self) -> dict[str, str]:
        """Field -> message for combinations the rules would refuse (flagged on the field)."""
        out: dict[str, str] = {}
        if self.deadline_h is not None and not (self.dataset_size and self.epochs):
            out["deadline_h"] = "a deadline needs dataset size and epochs"
        if self.dataset_size and not self.epochs:
            out["epochs"] = "time-to-train needs epochs too"
        if self.epochs and not self.dataset_size:
            out["dataset_size"] = "time-to-train needs the dataset size too"
        return out

    def request_fields(self) -> dict:
        """The ``Request`` workload fields that are set."""
        return {k: v for k, v in self.model_dump().items() if v is not None and not (k == "lr_scaling" and v == "auto")}


class WizardState(BaseModel):
    """Everything the wizard has been told. Copied (never shared) into workers."""

    model_config = ConfigDict(extra="forbid")

    hardware: HardwareChoice = Field(default_factory=HardwareChoice)
    model: ModelRef | None = None
    workload: Workload = Field(default_factory=Workload)

    def snapshot(self) -> "WizardState":
        return self.model_copy(deep=True)

    def to_request(self) -> Request:
        """The typed request ``advise`` would build from the same flags (UserError without a model)."""
        if self.model is None:
            raise UserError("no model chosen", fix="pick one on the Model screen (F3)")
        return Request(model=self.model, **self.hardware.request_fields(), **self.workload.request_fields())
