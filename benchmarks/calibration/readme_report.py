"""Regenerate the example report in docs/usage.md (`advise --model llama3-8b` on a machine without a GPU)
from the current code, between the markers ``<!-- report:begin -->`` and ``<!-- report:end -->``;
and README.md's accuracy lines (five at most), between ``<!-- accuracy:begin -->`` and
``<!-- accuracy:end -->``, from the summary tables of ``benchmarks/calibration/results/h200-estimator.md``
(which ``python -m benchmarks.calibration.fit`` writes; every set's lines are there).

The report is rendered as `advise` renders it (``cli.recommend_cmd.render_report``) for a fixed
machine (no GPU: NVML missing, 16 CPU cores), the default calibration (not a home directory's) and a
100-column plain console, so that it is the same everywhere. tests/test_readme_report.py fails when
README.md or docs/usage.md differs from what this script writes: neither can drift from the code.

    python -m benchmarks.calibration.readme_report            # rewrite both blocks
    python -m benchmarks.calibration.readme_report --check    # exit 1 if either is out of date
"""

from __future__ import annotations

import argparse
import io
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

README = ROOT / "README.md"
USAGE = ROOT / "docs" / "usage.md"  # the report's home
BEGIN, END = "<!-- report:begin -->", "<!-- report:end -->"
ARGV = ["--model", "llama3-8b"]
WIDTH = 100


def report_text() -> str:
    """The report `advise --model llama3-8b` prints on a GPU-less machine, as plain text."""
    from rich.console import Console

    from advisor.calibration import default_calibration
    from advisor.hardware import Machine
    from cli.flags import request_from_namespace
    from cli.main import build_parser
    from cli.recommend_cmd import render_report
    from rules.api import recommend

    machine = Machine(cpu_cores=16, nvml_error="NVML unavailable: NVML Shared Library Not Found")
    req = request_from_namespace(build_parser("recommend").parse_args(ARGV))
    rec = recommend(req, machine=machine, calibration=default_calibration(), assume_if_none=True)
    buf = io.StringIO()
    render_report(rec, console=Console(file=buf, width=WIDTH, color_system=None, force_terminal=False,
                                       soft_wrap=False, legacy_windows=False))
    return "\n".join(line.rstrip() for line in buf.getvalue().rstrip("\n").splitlines())


ACC_BEGIN, ACC_END = "<!-- accuracy:begin -->", "<!-- accuracy:end -->"
ESTIMATOR_MD = ROOT / "benchmarks" / "calibration" / "results" / "h200-estimator.md"


def _cells(md: str, first: str) -> list[str]:
    """The cells of the table row of ``md`` whose first cell is ``first``."""
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first:
            return cells
    raise SystemExit(f"{ESTIMATOR_MD.name} has no row '{first}': run python -m benchmarks.calibration.fit")


def _unseen_rows(md: str) -> list[tuple[str, str, list[str]]]:
    """(set name, when, cells) of the unseen sets' rows: "first set (u-*), predicted before measuring
    (`FILE`)" and "first set (u-*), now" (benchmarks/calibration/fit.py, _unseen)."""
    out = []
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        m = re.match(r"(\w+) set \([\w-]+\*\), (predicted before measuring|now)", cells[0]) if line.startswith("|") else None
        if m:
            when = "as predicted before they ran" if m.group(2) != "now" else "now, each for its measured host"
            out.append((m.group(1), when, cells))
    if not out:
        raise SystemExit(f"{ESTIMATOR_MD.name} has no unseen sets' rows: run python -m benchmarks.calibration.fit")
    return out


def accuracy_text() -> str:
    """The estimator's accuracy on one H200, as benchmarks/calibration/fit.py last measured it."""
    md = ESTIMATOR_MD.read_text()
    hold, fit = _cells(md, "holdout"), _cells(md, "fit")
    unseen = _unseen_rows(md)
    latest = [u for u in unseen if u[0] == unseen[-1][0]]  # the newest set, before it ran and now (all: ESTIMATOR_MD)
    slowed = _cells(md, "median / worst")
    rows = [
        ("| on one H200, abs error (from `benchmarks/calibration/results/h200-estimator.md`) | rows | "
         "peak memory median / worst | samples/s median / worst |"),
        "|---|---:|---|---|",
        f"| holdout rows (never fit on): catalog CNN, ViT, encoder, decoder; users' `--module` and `--hf-config` "
        f"models; fp32/bf16/pure-bf16, compile, checkpointing | {hold[1]} | {hold[2]} / {hold[3]} | {hold[4]} / {hold[5]} |",
        f"| fit rows | {fit[1]} | {fit[2]} / {fit[3]} | {fit[4]} / {fit[5]} |",
        *(f"| the newest unseen set of users' configurations ({name}), {when} | {c[1]} | {c[2]} / {c[3]} | "
          f"{c[4]} / {c[5]} |" for name, when, c in latest),
        f"| host-bound rows on a deliberately slowed host, with its measured host factor (without) | | | "
        f"{slowed[3]} / {slowed[4]} ({slowed[6]} / {slowed[7]}) |",
    ]
    return "\n".join(rows)


def with_accuracy(readme: str, text: str) -> str:
    i, j = readme.index(ACC_BEGIN), readme.index(ACC_END) + len(ACC_END)
    return readme[:i] + f"{ACC_BEGIN}\n{text}\n{ACC_END}" + readme[j:]


def regenerated(readme: str) -> str:
    """README.md as the current measurements write it."""
    return with_accuracy(readme, accuracy_text())


def regenerated_usage(usage: str) -> str:
    """docs/usage.md as the current code writes it."""
    return with_block(usage, report_text())


def block(text: str) -> str:
    n = text.count("\n") + 1
    return (f"{BEGIN}\n<details><summary>the report ({n} lines; --full adds the whole tree, each alternative and "
            f"rule in full), regenerated by "
            f"<code>python -m benchmarks.calibration.readme_report</code></summary>\n\n```text\n{text}\n```\n</details>\n{END}")


def with_block(readme: str, text: str) -> str:
    i, j = readme.index(BEGIN), readme.index(END) + len(END)
    return readme[:i] + block(text) + readme[j:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if README.md or docs/usage.md is not what the code prints")
    args = ap.parse_args()
    stale = 0
    for path, regen in ((README, regenerated), (USAGE, regenerated_usage)):
        old = path.read_text()
        new = regen(old)
        if new == old:
            continue
        if args.check:
            print(f"{path.relative_to(ROOT)} is out of date: run python -m benchmarks.calibration.readme_report",
                  file=sys.stderr)
            stale = 1
        else:
            path.write_text(new)
            print(f"{path.relative_to(ROOT)}: regenerated")
    return stale


if __name__ == "__main__":
    raise SystemExit(main())
