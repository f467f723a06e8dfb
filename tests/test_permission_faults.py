"""Permission faults of the home and its store: each is one line and exit 2, never a traceback, and
nothing is left half made.

The suite runs as root here, and root's CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH ignore permission
bits, so a 0400 store would not stop it. Each command therefore runs in a child whose capability
bounding set lacks those two (``prctl(PR_CAPBSET_DROP)`` before exec): still uid 0, the home still
its own, but the bits apply to it as to any user. Run by another user the child is started as is.
Where the capabilities cannot be dropped (no CAP_SETPCAP), the tests skip with that reason. An
unprivileged uid (setuid to nobody) is not used: this machine's Python lives under /root (0700),
which nobody cannot execute.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.store import RunStore
from tests.refusals import assert_refused, home_with_a_run

ROOT = Path(__file__).resolve().parents[1]
_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2
SUBMIT = ["submit", "--cpu", "--processes", "1", "--model", "mini-transformer", "--recipe", "synthetic"]
LAUNCH = ["launch", "--cpu", "--processes", "1", "--model", "mini-transformer", "--recipe", "synthetic",
          "--seq-len", "16", "--micro-batch", "2", "--max-steps", "1"]


def _bits_apply() -> None:
    """preexec_fn: as root, give up the capabilities that bypass permission bits (this child only)."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.fixture(scope="module", autouse=True)
def _bits_can_apply(tmp_path_factory):
    probe = tmp_path_factory.mktemp("probe") / "f"
    probe.write_text("")
    probe.chmod(0o400)
    try:
        res = subprocess.run(["sh", "-c", f"echo x >> {probe}"], preexec_fn=_bits_apply, capture_output=True)
    except subprocess.SubprocessError as exc:
        pytest.skip(f"cannot start a child whose permission bits apply (root without CAP_SETPCAP?): {exc}")
    if res.returncode == 0:
        pytest.skip("a 0400 file is writable to the child here: permission bits do not apply")


def advise(*argv: str, timeout: float = 120) -> tuple[int, str, str]:
    res = subprocess.run([sys.executable, "-m", "cli.main", *argv], preexec_fn=_bits_apply, capture_output=True,
                         text=True, timeout=timeout, cwd=ROOT)  # timeout: a hang guard (serve must exit)
    return res.returncode, res.stdout, res.stderr


def refused(argv: list[str], *words: str) -> str:
    return assert_refused(advise, argv, *words, fix_line=True)  # what, then the fix


@pytest.fixture
def home(tmp_path) -> Path:
    return home_with_a_run(tmp_path)


def test_a_read_only_store_is_refused_by_every_writer_and_read_by_readers(home):
    (home / "runs.sqlite").chmod(0o400)
    for argv in (SUBMIT, LAUNCH, ["serve", "--cpu", "--poll", "0.2"]):
        refused([*argv, "--home", str(home)], "the run store is read-only (mode 400)", "chmod u+w")
    assert os.listdir(home / "runs") == []  # submit made no run folder for a run it could not queue
    rc, out, err = advise("runs", "--home", str(home))
    assert rc == 0 and "a run" in out, err


def test_a_home_that_takes_no_new_file_is_refused(home):
    home.chmod(0o555)
    for argv in (SUBMIT, ["serve", "--cpu"]):
        refused([*argv, "--home", str(home)], "the cardwise home is not writable (mode 555)")
    home.chmod(0o700)
    (home / "runs").chmod(0o500)
    refused([*SUBMIT, "--home", str(home)], "runs/ folder is not writable (mode 500)")


def test_a_submission_the_store_does_not_take_leaves_no_run_folder(home, monkeypatch):
    """The store refuses the record after the folder was made (it turned read-only, the disk filled)."""
    from advisor.errors import UserError
    from cli.launch_plan import options_from_flags, plan_from_flags, target_from_flags
    from cli.main import build_parser
    from launcher.service import submit

    def create(self, **kw):
        raise UserError("the run store became read-only: attempt to write a readonly database")

    monkeypatch.setattr(RunStore, "create", create)
    args = build_parser("submit").parse_args(SUBMIT[1:])
    plan, _ = plan_from_flags(args)
    with pytest.raises(UserError, match="read-only"):
        submit(home, plan, target_from_flags(args, plan), options_from_flags(args, plan))
    assert os.listdir(home / "runs") == []
