"""cardwise's rules layer: the rule engine, the decision tree A–J, and ``advise()``.

    from rules import advise
    rec = advise("llama3-8b", gpu="A100-80GB", gpus=8, seq_len=2048)
    rec            # readable report in a notebook; rec.to_json() is `advise --json`

Never imports torch (for catalog models), textual or accelerate.
"""

from __future__ import annotations

__all__ = ["advise", "Recommendation"]


def __getattr__(name: str):
    if name == "advise":
        from rules.api import advise

        return advise
    if name == "Recommendation":
        from rules.recommend import Recommendation

        return Recommendation
    raise AttributeError(f"module 'rules' has no attribute {name!r}")
