"""Keep the host out of the tests: no user home, no real run store, no GPU assumptions. And run the
suite on two pytest-xdist workers (pyproject's addopts) without tests that share something overlapping.

Parallel runs (docs/testing.md):
- A module-scoped fixture runs once per worker that runs a test using it, so every test using one is
  kept on one worker (an ``xdist_group`` named after the module): the CPU bench, the calibration rows,
  the Slurm cluster's jobs (which also must not share the cluster's 2 CPUs with each other) run once.
- Workers start the longest files first (``tests/file_costs.json``, written by
  ``python -m benchmarks.speed.suite_cost --costs``), so no long file starts last.
- Ports a test chooses come from ``tests/ports.py`` (a slice per worker, outside the kernel's range).
- ``-p no:xdist`` (or xdist not installed) runs the suite serially, in file order: the two options of
  pyproject's addopts are then accepted and ignored.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Two ranks with torch's default intra-op threads each oversubscribe a 2-core CI machine (seen here:
# a 2-rank CPU bench ~5x slower under load); one thread per process keeps the runs' pace steady.
os.environ.setdefault("OMP_NUM_THREADS", "1")
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

COSTS = Path(__file__).with_name("file_costs.json")
# A file the table does not know yet (new since it was written) is placed as a mid-sized one.
UNKNOWN_FILE_S = 20.0
SHARED_SCOPES = ("module", "class", "package")


def pytest_addoption(parser, pluginmanager):
    if not pluginmanager.has_plugin("xdist"):  # -p no:xdist, or the dev extra not installed
        group = parser.getgroup("xdist (off)", "pytest-xdist is off: its options from addopts are ignored")
        group.addoption("--numprocesses", dest="numprocesses", default=None, help="ignored (xdist is off)")
        group.addoption("--dist", dest="dist", default="no", help="ignored (xdist is off)")


def _shared_fixture_module(item: pytest.Item) -> str | None:
    """The test's module if the test uses a fixture of module (or class) scope defined in that module."""
    module = item.nodeid.split("::", 1)[0]
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        if any(d.scope in SHARED_SCOPES and d.baseid == module for d in defs):
            return module
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group") is None and (module := _shared_fixture_module(item)):
            item.add_marker(pytest.mark.xdist_group(module))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts alike: their collections must match
        costs = json.loads(COSTS.read_text()) if COSTS.exists() else {}
        items.sort(key=lambda it: -costs.get(it.nodeid.split("::", 1)[0], UNKNOWN_FILE_S))


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("cardwise-home")
    monkeypatch.setenv("CARDWISE_HOME", str(home))
    # A piped report is $COLUMNS wide, else 100 (cli/console.py): no test sees the host's terminal size.
    # pytest-xdist's workers have COLUMNS=80 and LINES=24 in their environment (seen with xdist 3.8).
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    yield home
