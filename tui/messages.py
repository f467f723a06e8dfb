"""Messages workers post back to the UI thread: small dataclasses, data only.

Workers never touch widgets; they post one of these (``post_message`` is thread-safe) and the
screen's handler updates its widgets on the UI thread. ``Message.__init__`` calls
``__post_init__``, so a dataclass subclass is a complete message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:
    from rules.recommend import Recommendation
    from tui.compute import ModelInfo, RecView


@dataclass(eq=False)
class ModelResolved(Message):
    """A model source was resolved (or not): ``where`` is the form field to flag on error."""

    info: ModelInfo | None
    error: str | None = None
    where: str = ""


@dataclass(eq=False)
class PreviewReady(Message):
    """The recommendation for the workload form's values and the model's description, or why there are none."""

    token: int
    rec: Recommendation | None
    info: ModelInfo | None
    error: str | None = None


@dataclass(eq=False)
class RecommendationReady(Message):
    token: int
    view: RecView | None
    error: str | None = None


@dataclass(eq=False)
class RunStarted(Message):
    run_id: str
    run_dir: str
    world_size: int
    notes: list[str] = field(default_factory=list)


@dataclass(eq=False)
class RunSample(Message):
    """What the monitor read since the last sample."""

    run_id: str
    lines: list[str]
    rows: list[dict]
    devices: list  # list[tui.monitor.DeviceSample]
    record: Any | None  # launcher.store.RunRecord
    data_bound: Any | None = None  # launcher.data_wait.DataBound so far (tui.monitor.LiveDataCheck)


@dataclass(eq=False)
class RunFinished(Message):
    run_id: str | None
    record: Any | None  # launcher.store.RunRecord
    error: str | None = None


@dataclass(eq=False)
class RunsLoaded(Message):
    records: list
    error: str | None = None


@dataclass(eq=False)
class RunDetailLoaded(Message):
    run_id: str
    rows: list[dict]
    log: list[str]
    plan_text: str = ""
