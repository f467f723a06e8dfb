"""The (text, label) rows of ``--recipe text-classification``: streamed and checked without torch.

One reader for both sides of a launch: ``launcher.recipes.checks`` streams the whole ``--data``
file once before any process starts (a bad file is one line and exit 2, not a traceback in every
rank after the ranks have started), and each rank streams it again (``iter_rows``), keeping only
its shard. Files of any size: nothing holds more than one row at a time. Each failure is a
``ValueError`` whose message names the file (and line) and what is wrong; the caller wraps it.

The held-out rows are every ``round(1 / eval_fraction)``-th row of the file (``is_held_out``):
a split every rank and worker agrees on without reading the file twice or shuffling it.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

SAMPLE = Path(__file__).with_name("data") / "sentiment_sample.jsonl"
MIN_ROWS = 4  # the recipe holds out at least one row and needs rows of every label to train on
EVAL_FRACTION = 0.1  # the recipe's default --eval-fraction
MAX_LABELS = 1000  # a scan stops collecting labels past this (a text column read as labels)


def iter_rows(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, text, label) of a JSONL or CSV file (CSV by suffix, with a ``text,label`` header).

    A CSV field may be as long as a line may (``advisor.files.MAX_LINE``, 16 MiB): the csv module's own
    limit, 128 KiB, refused a legal long text. Its limit is one per process; it is only ever raised here."""
    from advisor.files import MAX_LINE, lines, open_regular

    path = Path(path)
    if csv.field_size_limit() < MAX_LINE:
        csv.field_size_limit(MAX_LINE)
    try:
        with open_regular(path) as f:  # a regular file (a FIFO would hang), lines of at most 16 MiB
            if path.suffix.lower() == ".csv":
                reader = csv.DictReader(lines(f, path))
                if not reader.fieldnames or not {"text", "label"} <= set(reader.fieldnames):
                    if reader.fieldnames is None:
                        raise ValueError(f"{path}: the file is empty")
                    raise ValueError(f"{path}: a CSV file needs a header with 'text' and 'label' columns")
                for r in reader:
                    if r.get("text") is None or not (r.get("label") or "").strip():
                        raise ValueError(f"{path}:{reader.line_num}: a row without a label")
                    yield reader.line_num, r["text"], str(r["label"])
                return
            for i, line in enumerate(lines(f, path), 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    obj = None
                except RecursionError:  # json's decoder recurses per level: [[[[...]]]] ends here
                    raise ValueError(f"{path}:{i}: JSON nested too deeply") from None
                if not isinstance(obj, dict) or "text" not in obj:
                    raise ValueError(f"{path}:{i}: expected a JSON object with 'text' and 'label'")
                label = obj.get("label")
                if label is None or not str(label).strip():
                    raise ValueError(f"{path}:{i}: a row without a label")
                yield i, str(obj["text"]), str(label)
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a UTF-8 text file") from None
    except csv.Error as exc:
        raise ValueError(f"{path}: not a readable CSV file ({exc})") from None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it: {exc.strerror or exc}") from None


def held_out_every(eval_fraction: float = EVAL_FRACTION) -> int:
    if not 0 < eval_fraction < 1:
        raise ValueError(f"--eval-fraction {eval_fraction} is not between 0 and 1")
    return max(2, round(1 / eval_fraction))


def is_held_out(index: int, every: int) -> bool:
    """Row ``index`` (0-based, in file order) is held out for the evaluation at the end."""
    return index % every == 0


def held_out(n_rows: int, eval_fraction: float = EVAL_FRACTION) -> int:
    """Rows the recipe keeps for the evaluation at the end (at least one: row 0)."""
    every = held_out_every(eval_fraction)
    return (n_rows + every - 1) // every


def scan(path: Path, num_labels: int) -> tuple[int, list[str]]:
    """Stream the whole file once: (rows, sorted distinct labels), which must number ``num_labels``."""
    n, labels = 0, set()
    for _, _, label in iter_rows(path):
        n += 1
        if len(labels) <= MAX_LABELS:
            labels.add(label)
    if n == 0:
        raise ValueError(f"{path}: the file is empty")
    if n < MIN_ROWS:
        raise ValueError(f"{path}: {n} row(s); need at least {MIN_ROWS} (text, label) rows")
    return n, label_names(labels, path, num_labels)


def label_names(labels, path: Path, num_labels: int) -> list[str]:
    """The sorted distinct labels, which must number exactly the model's classes."""
    names = sorted(labels)
    if len(names) != num_labels:
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise ValueError(f"{path}: {len(names)}{'+' if len(names) > MAX_LABELS else ''} distinct label(s) "
                         f"({shown}); mini-transformer classifies {num_labels}")
    return names


def check_enough(n_rows: int, path: Path, micro_batch: int, world: int, eval_fraction: float = EVAL_FRACTION) -> None:
    """At least one micro-batch per rank of training rows once the held-out rows are set aside."""
    train = n_rows - held_out(n_rows, eval_fraction)
    if train < micro_batch * world:
        raise ValueError(f"{path}: {train} training rows, fewer than one micro-batch ({micro_batch}) per rank ({world})")
