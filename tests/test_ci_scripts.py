"""``.ci/run`` and its Slurm cluster scripts, with stubs for everything they would start: the real-Slurm
tests are asked for (CARDWISE_SLURM_TESTS=1) only there, the cluster is stopped on every exit, a pytest
that collected nothing still fails CI, and slurm-down.sh stops what slurm-up.sh listed and nothing else."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


@pytest.fixture
def ci(tmp_path):
    """A copy of .ci/run in a checkout of stubs: slurm-up/down.sh and python3 (whose venv's `python -m
    pytest` exits $PYTEST_RC) append to ``marks``."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", repo / ".ci" / "run")
    marks = tmp_path / "marks"
    _script(repo / ".ci" / "slurm-up.sh", f"echo up >> {marks}; exit ${{UP_RC:-0}}")
    _script(repo / ".ci" / "slurm-down.sh", f"echo down >> {marks}")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _script(bindir / "python3", f"""mkdir -p .venv/bin
printf '#!/bin/sh\\nexit 0\\n' > .venv/bin/pip
printf '#!/bin/sh\\nexit 0\\n' > .venv/bin/lint-imports
printf '#!/bin/sh\\necho "pytest CARDWISE_SLURM_TESTS=$CARDWISE_SLURM_TESTS" >> {marks}; sleep ${{PYTEST_S:-0}}; exit $PYTEST_RC\\n' > .venv/bin/python
chmod +x .venv/bin/*""")
    return repo, bindir, marks


def _run(ci, **env) -> tuple[int, list[str]]:
    repo, bindir, marks = ci
    full = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", **env}
    full.pop("CARDWISE_SLURM_TESTS", None)
    rc = subprocess.run(["bash", str(repo / ".ci" / "run")], env=full, capture_output=True, timeout=60).returncode
    return rc, marks.read_text().splitlines()


@pytest.mark.parametrize("pytest_rc, ci_rc", [(0, 0), (1, 1), (5, 1)])
def test_ci_asks_for_the_slurm_tests_and_always_stops_the_cluster(ci, pytest_rc, ci_rc):
    rc, marks = _run(ci, PYTEST_RC=str(pytest_rc))
    assert rc == ci_rc
    assert marks == ["up", "pytest CARDWISE_SLURM_TESTS=1", "down"]


def test_ci_goes_on_without_a_cluster_and_stops_it_when_interrupted(ci):
    rc, marks = _run(ci, PYTEST_RC="0", UP_RC="1")
    assert rc == 0 and marks[-1] == "down"
    repo, bindir, marks_path = ci
    marks_path.unlink()
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTEST_RC": "0", "PYTEST_S": "30"}
    proc = subprocess.Popen(["bash", str(repo / ".ci" / "run")], env=env, start_new_session=True)
    deadline = time.monotonic() + 60  # a hang guard, not a time limit
    while "pytest" not in (marks_path.read_text() if marks_path.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)  # CI cancelled: the job's process group is signalled
    assert proc.wait(60) != 0
    assert marks_path.read_text().splitlines()[-1] == "down"


def test_slurm_down_stops_only_what_slurm_up_listed(tmp_path):
    """Two stand-ins named slurmd and slurmctld (copies of `sleep`); slurm-up.sh listed only slurmd."""
    state = tmp_path / "state"
    state.mkdir()
    procs = {}
    for name in ("slurmd", "slurmctld"):
        exe = tmp_path / name
        shutil.copy(shutil.which("sleep"), exe)
        procs[name] = subprocess.Popen([str(exe), "600"])
        (state / f"{name}.pid").write_text(f"{procs[name].pid}\n")
    (state / "started").write_text("slurmd\n")
    try:
        res = subprocess.run(["bash", str(ROOT / ".ci" / "slurm-down.sh")], capture_output=True, text=True,
                             env={**os.environ, "CARDWISE_SLURM_STATE": str(state)}, timeout=120)
        assert res.returncode == 0, res.stderr
        assert procs["slurmd"].wait(30) == -signal.SIGTERM
        assert procs["slurmctld"].poll() is None  # not started by slurm-up.sh: left alone
        assert not state.exists()  # its list too: a second call undoes nothing
        again = subprocess.run(["bash", str(ROOT / ".ci" / "slurm-down.sh")], capture_output=True, text=True,
                               env={**os.environ, "CARDWISE_SLURM_STATE": str(state)}, timeout=120)
        assert again.returncode == 0 and "nothing to undo" in again.stderr
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()
