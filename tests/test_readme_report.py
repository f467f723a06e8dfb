"""docs/usage.md's example report is what the current code prints and README.md's accuracy lines are what the
last fit measured (benchmarks/calibration/readme_report.py writes both between markers): they cannot drift.
Fails with the fix when they have."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("readme_report", ROOT / "benchmarks" / "calibration" / "readme_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_report_is_the_current_output():
    mod = _script()
    usage = (ROOT / "docs" / "usage.md").read_text()
    assert mod.BEGIN in usage and mod.END in usage
    assert usage == mod.regenerated_usage(usage), \
        "docs/usage.md's report is out of date: run `python -m benchmarks.calibration.readme_report`"


def test_readme_accuracy_lines_are_the_last_fit_and_at_most_five():
    mod = _script()
    readme = (ROOT / "README.md").read_text()
    assert mod.ACC_BEGIN in readme and mod.ACC_END in readme
    assert readme == mod.regenerated(readme), \
        "README.md's accuracy lines are out of date: run `python -m benchmarks.calibration.readme_report`"
    table = readme[readme.index(mod.ACC_BEGIN):readme.index(mod.ACC_END)].splitlines()[3:]  # marker, head, rule
    assert 1 <= len(table) <= 5, table


def test_the_block_is_replaced_not_appended():
    mod = _script()
    readme = f"intro\n{mod.BEGIN}\nold\n{mod.END}\noutro\n"
    out = mod.with_block(readme, "line 1\nline 2")
    assert out.startswith("intro\n") and out.endswith("\noutro\n") and "old" not in out and "(2 lines;" in out
