"""Users' models measured on the H200 (issue 16): rows for benchmarks/fit_calibration.py.

Read-only from the checkout where they are measured (``CARDWISE_USERS_ROWS`` overrides the path):
each row names its model as cardwise would be told (``module`` FILE.py:FACTORY with
``input_shape``/``input_dtype``, or ``hf_config`` PATH) and is predicted from a spec traced
exactly as ``advise estimate --module/--hf-config`` traces it. Absent file: no rows.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

USERS = Path(os.environ.get("CARDWISE_USERS_ROWS", "/work/main/benchmarks/results/h200-users.jsonl"))


@lru_cache(maxsize=None)
def _spec(module: str | None, hf_config: str | None, shape: tuple[int, ...] | None, dtype: str):
    if hf_config:
        from advisor.hf_config import spec_from_hf_config

        return spec_from_hf_config(hf_config)
    from advisor.tracer import trace_module_spec

    return trace_module_spec(module, shape, dtype)


def _resolve(path: str, base: Path) -> str:
    """A path in a row, relative to the checkout that measured it."""
    p = Path(path.split(":", 1)[0])
    if p.is_absolute() or not p.suffix:
        return path
    return str(base / path)


def user_rows(path: Path = USERS) -> list[dict]:
    if not path.exists():
        return []
    base = path.resolve().parents[2]  # <checkout>/benchmarks/results/FILE
    rows = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "header" or "error" in r or r.get("split") not in ("fit", "holdout"):
            continue
        module = _resolve(r["module"], base) if r.get("module") else None
        hf = _resolve(r["hf_config"], base) if r.get("hf_config") else None
        shape = tuple(r["input_shape"]) if r.get("input_shape") else None
        spec = _spec(module, hf, shape, r.get("input_dtype", "float32"))
        rows.append({"seq_len": None, "image_size": None, "grad_ckpt": False, "channels_last": False,
                     "compile": False, **r, "spec": spec, "model": r.get("model", spec.name),
                     "source": path.name, "cudnn_tf32": True})
    return rows
