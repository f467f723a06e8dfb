"""Keep the host out of the tests: no user home, no real run store, no GPU assumptions."""

from __future__ import annotations

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


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("cardwise-home")
    monkeypatch.setenv("CARDWISE_HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    yield home
