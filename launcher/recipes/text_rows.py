"""The (text, label) rows of ``--recipe text-classification``: read and checked without torch.

One reader for both sides of a launch: ``launcher.command.check_target`` reads the ``--data`` file
before any process starts (a bad file is one line and exit 2, not a traceback in every rank after
the ranks have started), and the recipe reads it again inside each rank. Each failure is a
``ValueError`` whose message names the file (and line) and what is wrong; the caller wraps it.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

SAMPLE = Path(__file__).with_name("data") / "sentiment_sample.jsonl"
MIN_ROWS = 4  # the recipe holds out at least one row and needs rows of every label to train on
EVAL_FRACTION = 0.1  # the recipe's default --eval-fraction


def read_rows(path: Path) -> list[tuple[str, str]]:
    """(text, label) rows of a JSONL or CSV file (CSV by suffix, with a ``text,label`` header)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    if not text.strip():
        raise ValueError(f"{path}: the file is empty")
    rows: list[tuple[str, str]] = []
    if Path(path).suffix.lower() == ".csv":
        reader = csv.DictReader(text.splitlines())
        if not reader.fieldnames or not {"text", "label"} <= set(reader.fieldnames):
            raise ValueError(f"{path}: a CSV file needs a header with 'text' and 'label' columns")
        for i, r in enumerate(reader, 2):  # line 1 is the header
            if r.get("text") is None or not (r.get("label") or "").strip():
                raise ValueError(f"{path}:{i}: a row without a label")
            rows.append((r["text"], str(r["label"])))
    else:
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                obj = None
            if not isinstance(obj, dict) or "text" not in obj:
                raise ValueError(f"{path}:{i}: expected a JSON object with 'text' and 'label'")
            text_, label = obj["text"], obj.get("label")
            if label is None or not str(label).strip():
                raise ValueError(f"{path}:{i}: a row without a label")
            rows.append((str(text_), str(label)))
    if len(rows) < MIN_ROWS:
        raise ValueError(f"{path}: {len(rows)} row(s); need at least {MIN_ROWS} (text, label) rows")
    return rows


def label_names(rows: list[tuple[str, str]], path: Path, num_labels: int) -> list[str]:
    """The sorted distinct labels, which must number exactly the model's classes."""
    names = sorted({lab for _, lab in rows})
    if len(names) != num_labels:
        raise ValueError(f"{path}: {len(names)} distinct label(s) ({', '.join(names[:5])}); "
                         f"mini-transformer classifies {num_labels}")
    return names


def held_out(n_rows: int, eval_fraction: float = EVAL_FRACTION) -> int:
    """Rows the recipe keeps for the accuracy at the end (at least one)."""
    return max(1, int(n_rows * eval_fraction))


def check_enough(rows: list[tuple[str, str]], path: Path, micro_batch: int, world: int,
                 eval_fraction: float = EVAL_FRACTION) -> None:
    """At least one micro-batch per rank of training rows once the held-out rows are set aside."""
    train = len(rows) - held_out(len(rows), eval_fraction)
    if train < micro_batch * world:
        raise ValueError(f"{path}: {train} training rows, fewer than one micro-batch ({micro_batch}) per rank ({world})")
