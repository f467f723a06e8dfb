"""Per-process memo of the estimator's inner terms, for the planner's many estimates of one model.

One recommendation asks the estimator for ~150-250 configurations of one model (``rules.planner``), and
most of them share their per-sample terms (the activation profile depends on the precision, the
sequence length and compile, not on the micro-batch, the GPU count or the strategy: 366 calls, 5
distinct, for ``advise --model llama3-8b``) and their per-micro-batch work (the same micro-batch on
2, 4 and 8 GPUs: 208 calls, 78 distinct). ``Memo`` keeps those results for the life of the process.

Safe by construction, not by invalidation: an entry is keyed by the values its function reads from
the configuration (the caller lists them) and by the *identity* of the objects it reads whole (the
model spec, the calibration), and it holds those objects, so an id is never reused for another
object while its entry lives; the catalog, the calibration and the config are never changed in place
(every change is a ``model_copy``). Entries are shared, so callers treat them as read-only (the
estimator copies before it changes one). Nothing is written to disk; a bounded size keeps a
long-lived process (the wizard, the service) from growing.
"""

from __future__ import annotations

from typing import Any, Callable


def config_key(config, without: tuple[str, ...]) -> tuple:
    """Every field of a pydantic config, ``without`` (the ones the memoised function never reads) set to
    None, so a field added later is part of the key unless it is named here."""
    return tuple(dict(config.__dict__, **dict.fromkeys(without)).values())


class Memo:
    """``get(owners, key, compute)``: ``compute()``'s result, computed once per (owners, key)."""

    def __init__(self, size: int = 4096):
        self.size = size
        self._entries: dict[tuple, tuple[tuple, Any]] = {}

    def get(self, owners: tuple, key: tuple, compute: Callable[[], Any]) -> Any:
        k = (*[id(o) for o in owners], *key)
        hit = self._entries.get(k)
        if hit is not None:
            held, value = hit
            for a, b in zip(held, owners):
                if a is not b:
                    break
            else:
                return value
        value = compute()
        if len(self._entries) >= self.size:
            self._entries.clear()
        self._entries[k] = (owners, value)
        return value
