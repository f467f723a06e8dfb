"""Users' models measured on the H200 (issue 16): rows for benchmarks/calibration/rows.py.

Rows come from ``benchmarks/calibration/results/h200-users.jsonl`` (``measure/users_models.py``; override the
path with ``CARDWISE_USERS_ROWS``). Each row's ``cardwise_flags`` is the exact ``advise estimate``
line for that configuration; it is parsed by the CLI's own parser (``cli.main.build_parser``) and
turned into a ``Request`` by ``cli.flags.request_from_namespace``, with ``--gpu H200`` added, so a
row is predicted by ``advisor.exact.estimate_request`` exactly as ``advise estimate ... --gpu H200``
predicts it (``predict_request``). Paths in the flags are relative to the checkout root.

For the fit's grid (hundreds of calibrations), ``user_rows`` also carries the resolved spec and the
``TrainConfig`` that ``estimate_request`` chose, so ``advisor.estimate.estimate`` on them gives the
same numbers without re-tracing; ``benchmarks.calibration.report`` checks they agree.
"""

from __future__ import annotations

import json
import os
import shlex
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

USERS = Path(os.environ.get("CARDWISE_USERS_ROWS", ROOT / "benchmarks" / "calibration" / "results" / "h200-users.jsonl"))
# Where the users' models lived when the rows were measured (their flags say so), and where they are now.
MOVED_MODELS = ("benchmarks/" "users_models/", "benchmarks/calibration/models/")
GPU = "H200"  # every row was measured on one H200 (the file's header lines)


def _absolute(argv: list[str], base: Path) -> list[str]:
    """``--module FILE.py:F`` / ``--hf-config PATH`` relative to the checkout, made absolute."""
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a in ("--module", "--hf-config"):
            p = out[i + 1]
            if p.startswith(MOVED_MODELS[0]):
                p = MOVED_MODELS[1] + p[len(MOVED_MODELS[0]):]
            path = p.split(":", 1)[0]
            if (path.endswith(".py") or path.endswith(".json")) and not Path(path).is_absolute():
                out[i + 1] = str(base / p)
    return out


def request_of(flags: str, base: Path = ROOT):
    """The ``Request`` that ``advise estimate FLAGS --gpu H200`` builds."""
    from cli.flags import request_from_namespace
    from cli.main import build_parser

    argv = _absolute(shlex.split(flags), base) + ["--gpu", GPU]
    if "pure-bf16" in argv and "--pure-bf16-update" not in argv:
        # The pure-bf16 rows ran plain fused torch.optim.AdamW on bf16 weights (measure/users_models.py,
        # run_config: torch.optim.AdamW(..., fused=True)), not cardwise's KahanAdamW: estimate what ran.
        argv += ["--pure-bf16-update", "plain"]
    args = build_parser("estimate").parse_args(argv)
    return request_from_namespace(args)


@lru_cache(maxsize=None)
def _spec(ref_json: str):
    from advisor.plan import ModelRef
    from advisor.sources import resolve_model

    return resolve_model(ModelRef.model_validate_json(ref_json))


def predict_request(req, calibration=None):
    """``advise estimate``'s Estimate for ``req`` (the real CLI path), with the model resolved once."""
    from unittest import mock

    import advisor.exact as exact
    from advisor.sources import as_script_runs_it

    # a catalog row as `advise estimate` estimated it when these rows were predicted: the transformers class
    # where there is one (the default is cardwise's own since issue 40)
    req = req.model_copy(update={"model": as_script_runs_it(req.model)[0]})
    with mock.patch.object(exact, "resolve_model", lambda ref: _spec(ref.model_dump_json())):
        est, _ = exact.estimate_request(req, calibration=calibration)
    return est


def source_of(flags: str) -> str:
    return "hf-config" if "--hf-config" in flags else "module" if "--module" in flags else "catalog"


def user_rows(path: Path = USERS) -> list[dict]:
    """Measured rows with a fit/holdout split, each with ``request``, ``spec`` and ``config``."""
    if not path.exists():
        return []
    base = path.resolve().parents[3]  # <checkout>/benchmarks/calibration/results/FILE
    rows = []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "header" or "error" in r or r.get("oom") or r.get("split") not in ("fit", "holdout"):
            continue
        req = request_of(r["cardwise_flags"], base)
        est = predict_request(req)
        rows.append({**r, "grad_ckpt": bool(req.grad_ckpt), "channels_last": bool(req.channels_last),
                     "request": req, "spec": _spec(req.model.model_dump_json()), "config": est.config,
                     "source": path.name, "model_source": source_of(r["cardwise_flags"]), "cudnn_tf32": True})
    return rows
