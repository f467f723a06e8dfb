"""The decision tree A–J of DESIGN.md: its nodes as data, and the state a walk carries.

The nodes (ids, questions, why, sources, and which answer leads where) are data in
``rules/data/tree.toml``; ``rules.nodes`` holds, per node id, the function that computes the
answer, and the walk. Every node visited is recorded as a ``Step`` (node, question, answer, why),
so the result is never a bare answer. The search the nodes ask is ``rules.planner``.
"""

import tomllib
from dataclasses import dataclass, field
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from advisor.request import Request
from rules.engine import DATA_DIR
from typing import TYPE_CHECKING

from rules.planner import Choice, Infeasible, Planner

if TYPE_CHECKING:
    from rules.compromise import Outcome
    from rules.policy import Pick

NODE_IDS = "ABCDEFGHIJ"

# ---------------------------------------------------------------- the tree as data


class TreeNode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    question: str
    summary: str
    why: str
    source: str
    next: dict[str, str] = Field(default_factory=dict, description="answer key -> next node id")


class Step(BaseModel):
    """One node visited: the contract's decision_path entry (plus the answer key and numbers)."""

    model_config = ConfigDict(extra="forbid")

    node: str
    question: str
    answer: str
    why: str
    key: str = Field(description="the answer's key in the tree data (fits, too-big, yes, no, ddp, ...)")
    data: dict = Field(default_factory=dict)


@lru_cache(maxsize=1)
def load_tree() -> dict[str, TreeNode]:
    raw = tomllib.loads((DATA_DIR / "tree.toml").read_text())
    nodes = {n["id"]: TreeNode(**n) for n in raw["node"]}
    missing = set(NODE_IDS) - set(nodes)
    if missing or set(nodes) - set(NODE_IDS):
        raise RuntimeError(f"tree.toml must define exactly nodes A-J (missing {sorted(missing)})")
    for n in nodes.values():
        for target in n.next.values():
            if target not in nodes:
                raise RuntimeError(f"tree.toml: node {n.id} leads to unknown node {target}")
    return nodes


# ---------------------------------------------------------------- the walk's state


@dataclass
class Measure:
    """One way node H (or a missed deadline) could be closed, with its estimate."""

    name: str
    summary: str
    flags: list[str]
    time_h: float | None
    meets: bool | None
    fits: bool = True
    gpus: int = 1
    strategy: str = "single"
    samples_per_s: float | None = None
    peak_gib: float | None = None
    device_gib: float | None = None
    model: str | None = None
    source: str = ""
    choice: Choice | None = None
    epochs: float | None = None
    hypothetical: bool = False


@dataclass
class TreeContext:
    planner: Planner
    one: Choice | Infeasible | None = None  # node B's single-GPU search
    choice: Choice | Infeasible | None = None  # what the walk ends with
    end: str = "A"
    tree_strategy: str = "single"
    min_fit: Choice | None = None  # fewest GPUs that fit sharded (node C)
    rows: list[Choice | Infeasible] = field(default_factory=list)  # G/I candidates
    measures: list[Measure] = field(default_factory=list)  # H / missed deadline
    deadline_missed: bool = False
    compromise: "Outcome | None" = None  # node H's memory compromises (rules.compromise), when nothing standard fits
    verdict: str = ""  # the standard configuration's verdict and its cause, when it does not fit
    compromise_name: str | None = None  # the compromise node H recommends
    gives_up: str | None = None
    pick: "Pick | None" = None  # the policy's pick among G/I's rows (rules.policy)
    needed_gpus: int | None = None  # the fewest GPUs of this kind that meet a missed deadline (hypothetical)
    needed_batch: int | None = None  # the global batch needed_gpus hold at

    @property
    def req(self) -> Request:
        return self.planner.req

    @property
    def deadline(self) -> float | None:
        return self.planner.req.deadline_h


@dataclass
class Answer:
    """What a node function returns; the walk turns it into a ``Step`` with the node's question."""

    key: str
    answer: str
    why: str
    data: dict = field(default_factory=dict)
