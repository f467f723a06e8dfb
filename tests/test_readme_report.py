"""README.md's example report is what the current code prints (benchmarks/calibration/readme_report.py writes
it between markers): it cannot drift. Fails with the fix when it has."""

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
    readme = (ROOT / "README.md").read_text()
    assert mod.BEGIN in readme and mod.END in readme
    assert mod.ACC_BEGIN in readme and mod.ACC_END in readme
    expected = mod.regenerated(readme)
    assert readme == expected, "README.md's report is out of date: run `python -m benchmarks.calibration.readme_report`"


def test_the_block_is_replaced_not_appended():
    mod = _script()
    readme = f"intro\n{mod.BEGIN}\nold\n{mod.END}\noutro\n"
    out = mod.with_block(readme, "line 1\nline 2")
    assert out.startswith("intro\n") and out.endswith("\noutro\n") and "old" not in out and "(2 lines)" in out
