"""Log (worker, nodeid, start, end) of every test to $TIMELINE_OUT (one file per worker)."""
import os, time, json
import pytest

_f = None
def _out():
    global _f
    if _f is None:
        w = os.environ.get("PYTEST_XDIST_WORKER", "main")
        _f = open(os.environ["TIMELINE_OUT"] + f".{w}", "a")
    return _f

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    t0 = time.time()
    yield
    t1 = time.time()
    f = _out()
    f.write(json.dumps([os.environ.get("PYTEST_XDIST_WORKER", "main"), item.nodeid, t0, t1]) + "\n")
    f.flush()
