"""Unseen configurations of the users' models (issue 16's throughput bar), measured like the rest.

Every row here is declared *holdout* before it is measured: no calibration constant is ever fit
on it (benchmarks/calibration/fit.py fits "fit" rows only). They are new batch sizes, precisions and
compile choices of the models in ``benchmarks/calibration/models/``, so they check the roofline on
configurations it was not fitted on. Measurement is ``measure/users_models.py``'s, unchanged (same
loop, timing, header); only the table of configurations differs.

On one H200 (about 4 minutes: 12 eager rows of ~12 s and one compiled row of ~70 s):

    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 -m benchmarks.calibration.measure.unseen --out $OUT/h200-users-unseen.jsonl --budget-s 230
    ... measure/unseen.py --set u9 --out $OUT/h200-users-unseen9.jsonl     # any set of unseen_sets.json

Copy the JSONL to ``benchmarks/calibration/results/h200-users-unseen.jsonl``; ``benchmarks/calibration/fit.py``
reads it next to ``h200-users.jsonl`` (holdout: judged, never fit) and ``python -m benchmarks.calibration.predict_users``
reports it. ``--set uN`` picks the set (u1 default; the sets and what each was for: ``unseen_sets.json``). ``--predict FILE`` (CPU, no measurement) writes what ``advise estimate`` predicts for every
row now, before any measurement: ``results/h200-users-unseen-predicted.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import benchmarks.calibration.measure.users_models as mum

# The sets, each with what it was for and when: ``unseen_sets.json`` (data, not code). A row is
# (id, model, micro_batch, seq_len, image_size, precision, compile, split), every split "holdout" when
# declared; benchmarks/calibration/draw_unseen.py --write adds a drawn set.
SETS_FILE = Path(__file__).resolve().parents[1] / "unseen_sets.json"


def load_sets(path: Path = SETS_FILE) -> dict[str, list[tuple]]:
    """Every declared set's rows, by set name (u1, u2, ...)."""
    return {name: [tuple(r) for r in s["rows"]] for name, s in json.loads(path.read_text()).items()}


SETS = load_sets()


def rows_by_id(smoke: bool = False) -> dict[str, dict]:
    """Every row a measurement script can name, by id: measure_users_models' table (its tiny SMOKE rows
    with ``smoke``) and every unseen set's."""
    table = mum.SMOKE if smoke else mum.CONFIGS + [r for t in SETS.values() for r in t]
    return {c[0]: dict(zip(mum.KEYS, c)) for c in table}


def pick(ids: list[str], smoke: bool = False) -> list[dict]:
    """The rows of these ids (rows_by_id), in this order; an unknown id stops the script, naming it."""
    rows = rows_by_id(smoke)
    unknown = [i for i in ids if i not in rows]
    if unknown:
        raise SystemExit(f"unknown row ids: {', '.join(unknown)}")
    return [rows[i] for i in ids]



def predict(path: Path, table: list[tuple]) -> None:
    """``advise estimate FLAGS --gpu H200`` for every row, written before the rows are measured."""
    from benchmarks.calibration.users import predict_request, request_of

    out = {}
    for c in table:
        row = dict(zip(mum.KEYS, c))
        est = predict_request(request_of(mum.cardwise_flags(row)))
        out[row["id"]] = {"samples_per_s": round(est.throughput.samples_per_s, 3),
                          "peak_gib": round(est.memory.peak_gib, 4)}
    path.write_text(json.dumps(out, indent=0, sort_keys=True) + "\n")


def _take(flag: str) -> str | None:
    """Removes ``flag VALUE`` from sys.argv (the rest goes to measure_users_models' parser)."""
    if flag not in sys.argv:
        return None
    i = sys.argv.index(flag)
    value = sys.argv[i + 1]
    del sys.argv[i:i + 2]
    return value


if __name__ == "__main__":
    name = _take("--set") or "u1"
    if name not in SETS:
        raise SystemExit(f"--set: unknown set {name!r}; choose one of {', '.join(SETS)}")
    target = _take("--predict")
    if target:
        predict(Path(target), SETS[name])
    else:
        mum.CONFIGS = SETS[name]
        mum.main()
