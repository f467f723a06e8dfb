"""The import-linter contract in pyproject.toml holds the layers, and it would catch a back-import."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cli", "tui", "rules", "launcher", "advisor")


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    # lint-imports imports the root packages' names from sys.path: run it in the tree under test.
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"})


def test_the_repository_keeps_its_layers():
    pytest.importorskip("importlinter")
    out = _lint(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


@pytest.mark.parametrize("module, back_import", [
    ("advisor/units.py", "import rules.engine"),       # the ground reaching up
    ("launcher/store.py", "import rules.api"),         # siblings stay independent
    ("tui/state.py", "import cli.flags"),              # nothing imports the CLI
    ("advisor/calibration.py", "import benchmarks.calibration.rows"),  # the product never reads benchmarks/
    ("cli/main.py", "from benchmarks.speed import startup"),
])
def test_a_back_import_breaks_the_contract(tmp_path, module, back_import):
    pytest.importorskip("importlinter")
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{back_import}  # deliberate back-import\n")
    out = _lint(tmp_path)
    assert out.returncode != 0
    assert "BROKEN" in out.stdout and back_import.split()[1].split(".")[0] in out.stdout
