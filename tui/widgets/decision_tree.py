"""The decision tree A-J with the path taken highlighted; the cursor's node explains itself.

Nodes and edges come from the rules' tree data (``rules/data/tree.toml``), the path from the
recommendation's ``decision_path`` (each step's node and answer key). A node reached from two
parents (J) appears under both, as in DESIGN.md's drawing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import Tree

from tui.css import tcss

if TYPE_CHECKING:
    from rules.recommend import PathStep
    from rules.tree import TreeNode


@dataclass(frozen=True)
class NodeInfo:
    id: str
    question: str
    why: str
    taken: bool
    step: PathStep | None  # the decision_path entry when this node was visited


class DecisionTree(Tree[NodeInfo]):
    DEFAULT_CSS = tcss(__file__)

    def __init__(self, **kwargs):
        super().__init__("decision tree", **kwargs)
        self.show_root = False
        self.guide_depth = 3

    def show(self, nodes: list[TreeNode], steps: list[PathStep]) -> None:
        """``nodes``: the tree's nodes (``rules.api.load_tree``); ``steps``: the decision_path."""
        by_id = {n.id: n for n in nodes}
        visited = {s.node: s for s in steps}
        self.clear()
        if "A" not in by_id:
            return

        def add(parent, node_id: str, edge: str | None, on_path: bool, depth: int) -> None:
            n = by_id[node_id]
            step = visited.get(node_id) if on_path else None
            taken = step is not None
            label = Text(no_wrap=True, overflow="ellipsis")
            label.append("● " if taken else "○ ", style="bold green" if taken else "dim")
            if edge:
                label.append(f"{edge} → ", style="green" if taken else "dim")
            label.append(f"{n.id} ", style="bold" if taken else "dim bold")
            label.append(n.question, style="" if taken else "dim")
            info = NodeInfo(id=n.id, question=n.question, why=n.why, taken=taken, step=step)
            if not n.next or depth > 12:
                parent.add_leaf(label, data=info)
                return
            branch = parent.add(label, data=info, expand=True)
            chosen = step.key if step else ""
            for key, child in n.next.items():
                add(branch, child, key, taken and (key == chosen or len(n.next) == 1 or child in visited and not chosen),
                    depth + 1)

        add(self.root, "A", None, True, 0)
        self.root.expand()
        self.move_cursor(self.root.children[0] if self.root.children else None)

    @staticmethod
    def explain(info: NodeInfo | None) -> Text:
        if info is None:
            return Text("")
        t = Text()
        t.append(f"{info.id}: {info.question}\n", style="bold")
        if info.step:
            t.append("answer: ", style="green")
            t.append(info.step.answer + "\n")
            why = info.step.why or info.why
        else:
            t.append("not on the path taken\n", style="dim")
            why = info.why
        if why:
            t.append(why, style="dim" if not info.step else "")
        return t
