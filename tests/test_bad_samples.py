"""Images that are not what they claim, at run time (issue 31): the image recipe stops naming the file
(the default) or, with ``-- --bad-samples skip``, skips it and counts it in the metrics.

The launch check refuses such folders up front (``tests/test_refusals.py``: a FIFO named x.jpg, a
truncated file, a decompression bomb); these are the files it did not sample, or a user's choice to
skip them.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("PIL")


def _folder(root: Path) -> Path:
    from PIL import Image

    from benchmarks.gpu_checks import recipe_data

    data = recipe_data.write_images(root, classes=2, per_class=3, size=24)
    os.mkfifo(data / "class_1" / "x.jpg")  # a plain open() of it would wait for a writer forever
    bomb = io.BytesIO()
    Image.new("1", (12_000, 12_000)).save(bomb, "PNG")
    (data / "class_0" / "y.png").write_bytes(bomb.getvalue())
    return data


def test_a_bad_image_stops_naming_itself_or_is_replaced_and_counted(tmp_path):
    from launcher.data_order import SampleKey
    from launcher.recipes import image_folder
    from launcher.recipes.image_classification import ImageFolderDataset, PilTransform, collate

    _, samples = image_folder.list_images(_folder(tmp_path / "images"))
    bad = [i for i, (p, _) in enumerate(samples) if p.endswith(("x.jpg", "y.png"))]
    good = next(i for i in range(len(samples)) if i not in bad)
    assert bad[1] != bad[0] + 1  # (the next image after each bad one is a good one)
    stop = ImageFolderDataset(samples, PilTransform(16))
    for i in bad:
        with pytest.raises(RuntimeError, match=rf"{Path(samples[i][0]).name}: .*--bad-samples skip"):
            stop[SampleKey(i, 0)]
    skip = ImageFolderDataset(samples, PilTransform(16), skip_bad=True)
    items = [skip[SampleKey(i, 0)] for i in (*bad, good)]
    assert [n for _, _, n in items] == [1, 1, 0]  # each bad one replaced by the next readable image
    x, y, skipped = collate(items)
    assert x.shape == (3, 3, 16, 16) and skipped == 2  # the micro-batch keeps its size


def test_the_summary_sums_each_rank_s_last_count(tmp_path):
    from launcher.records import MetricsSummary

    rows = [{"step": s, "rank": r, "loss": 1.0, "attempt": 1, "bad_samples": s * (r + 1)} for s in (1, 2) for r in (0, 1)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert MetricsSummary.from_jsonl(tmp_path / "metrics.jsonl", attempt=1).bad_samples == 2 + 4
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "rank": 0, "loss": 1.0, "attempt": 1}) + "\n")
    assert MetricsSummary.from_jsonl(tmp_path / "metrics.jsonl", attempt=1).bad_samples is None


@pytest.mark.slow
def test_a_run_that_skips_bad_images_counts_them(tmp_path):
    data = _folder(tmp_path / "images")
    argv = [sys.executable, "-m", "cli.main", "launch", "--home", str(tmp_path / "home"), "--cpu", "--model", "resnet18",
            "--image-size", "16", "--micro-batch", "2", "--max-steps", "6", "--recipe", "image-classification",
            "--data", str(data), "--json"]
    refused = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    assert refused.returncode == 2 and "not an image file" in refused.stderr  # the default: refused up front
    done = subprocess.run([*argv, "--", "--bad-samples", "skip"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    rec = json.loads(done.stdout)
    assert rec["status"] == "succeeded" and rec["metrics"]["steps"] == 6
    assert rec["metrics"]["bad_samples"] >= 2  # 8 images, 6 steps of 2: both bad ones were read at least once
    log = "".join(p.read_text() for p in Path(rec["run_dir"]).rglob("*.log"))
    assert "skipped" in log and "x.jpg: a FIFO" in log
