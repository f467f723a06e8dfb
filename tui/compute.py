"""The wizard's calls into the layers below, as plain functions over plain data.

Workers call these from threads; nothing here touches a widget or imports textual. What the
screens show is what ``advisor`` and ``rules`` compute: the typed ``rules.recommend.Recommendation``
for the wizard's ``advisor.request.Request``, which ``RecView`` pairs with what the Recommendation
screen shows around it (the model, the hardware label, the decision tree's nodes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from advisor.hardware import Machine
from advisor.plan import ModelRef, Plan
from tui.state import WizardState

if TYPE_CHECKING:  # the rules load in the workers, not with the first screen
    from rules.recommend import Recommendation
    from rules.tree import TreeNode


# ---------------------------------------------------------------- model
@dataclass(frozen=True)
class ModelInfo:
    ref: ModelRef
    name: str
    params: int
    family: str
    task: str
    description: str = ""
    default_seq_len: int | None = None
    default_image_size: int | None = None

    @property
    def is_vision(self) -> bool:
        return self.family in ("cnn", "vit")

    @property
    def is_catalog(self) -> bool:
        return self.ref.name is not None


def human_count(n: int) -> str:
    """1_234_567_890 -> '1.23B', 124_439_808 -> '124M'."""
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            v = n / div
            return f"{v:.3g}{unit}" if v < 100 else f"{v:.0f}{unit}"
    return str(n)


def catalog_rows() -> list[ModelInfo]:
    """Every catalog model, with its size (no torch: the catalog is data)."""
    from advisor.catalog import catalog_model, catalog_names

    return [_info(ModelRef(name=n), catalog_model(n)) for n in catalog_names()]


def resolve_model(ref: ModelRef) -> ModelInfo:
    """The model ``ref`` names; ``--module`` traces it (imports torch: call from a worker)."""
    from advisor.sources import resolve_model as resolve

    return _info(ref, resolve(ref))


def _info(ref: ModelRef, spec) -> ModelInfo:
    return ModelInfo(ref=ref, name=spec.name, params=spec.params, family=spec.family, task=spec.task or "",
                     description=spec.description or "", default_seq_len=spec.default_seq_len,
                     default_image_size=spec.default_image_size)


# ---------------------------------------------------------------- recommendation
def recommendation(state: WizardState, machine: Machine, home: Path | None = None) -> Recommendation:
    """``rules.api.recommend`` for the wizard's request, on the Machine the app was given (tests give
    fixed data; nothing reads NVML again), with the calibration ``advise bench`` stored in ``home``."""
    from advisor.calibration import load_calibration
    from rules.api import recommend

    return recommend(state.to_request(), machine=machine, calibration=load_calibration(home))


@dataclass(frozen=True)
class RecView:
    """Everything the Recommendation screen renders: the rules' answer and what surrounds it."""

    rec: Recommendation
    model: ModelInfo
    hardware_label: str
    tree: list[TreeNode]  # rules/data/tree.toml's nodes A-J

    @property
    def plan(self) -> Plan:
        return self.rec.plan

    @property
    def command(self) -> str:
        return self.rec.recommendation.command


def recommend(state: WizardState, machine: Machine, home: Path | None = None) -> RecView:
    """The full recommendation, with the model's description and the tree it walked."""
    rec = recommendation(state, machine, home)
    return RecView(rec=rec, model=resolve_model(rec.plan.model), hardware_label=state.hardware.label(machine),
                   tree=tree_nodes())


def tree_nodes() -> list[TreeNode]:
    from rules.api import load_tree

    return list(load_tree().values())
