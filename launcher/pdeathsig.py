"""``python -m launcher.pdeathsig [--pdeathsig] [--grace S] [--exit-file F] -- CMD...``: the launch shim.

Every launch runs as ``runner -> shim -> accelerate launch -> torchrun agent -> ranks``. The shim
is the session leader the runner signals, and it owns the whole tree's end:

- **Exactly one SIGTERM reaches the launcher.** The runner signals only the shim (not the process
  group). The shim catches the first SIGTERM/SIGINT/SIGHUP, sends the launcher one SIGTERM and
  *ignores every later signal* while it cleans up: two SIGTERMs a few ms apart abort torchrun's
  own shutdown half way and leave ranks running (seen: 8 kill -9 trials of 20).
- **Parent death.** With ``--pdeathsig`` (foreground launches) Linux's PR_SET_PDEATHSIG turns the
  runner's death, SIGKILL included, into that first SIGTERM. The queue service leaves it off: its
  runs outlive a service crash and are settled when it restarts (``docs/service.md``).
- **Nothing survives.** After ``--grace`` seconds the launcher is SIGKILLed; then every process
  carrying this launch's ``CARDWISE_LAUNCH_ID`` (ranks in their own sessions, ranks still
  importing torch before they could ask for PR_SET_PDEATHSIG themselves, their children) is
  stopped too, SIGTERM then SIGKILL (``launcher.procs``). The shim is a child subreaper, so those
  orphans are re-parented to it and reaped here.
- **The end is written down.** ``--exit-file`` receives ``{"returncode", "stopped", "ended"}``
  once the launcher exited (stopped: by a signal, or by the ranks on a graceful stop request,
  ``launcher.graceful_stop``): a run that ends while nobody waits for it (the queue service was
  down) is recorded from this file later instead of being run again (``launcher.records``).

The shim exits with the launcher's status (128+N for a signal N). Elsewhere than Linux the
prctl calls are skipped. No torch import: it starts in ~0.1 s.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
ENV_LAUNCH_ID = "CARDWISE_LAUNCH_ID"  # launcher.runner sets it on the shim; every descendant inherits it
_SWEEP_GRACE_S = 3.0  # leftovers after the launcher is gone: they get this long between SIGTERM and SIGKILL


def _prctl(option: int, arg: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class Shim:
    def __init__(self, cmd: list[str], grace_s: float, exit_file: str | None):
        self.cmd, self.grace_s, self.exit_file = cmd, grace_s, exit_file
        self.stop_at: float | None = None  # when the first stop signal came
        self.child: subprocess.Popen | None = None
        self.termed = False

    def on_signal(self, signum, frame) -> None:
        if self.stop_at is None:  # the first one only: later ones must not reach the launcher
            self.stop_at = time.monotonic()

    def run(self) -> int:
        self.child = subprocess.Popen(self.cmd)  # same group: `kill -KILL -PGID` still ends everything
        while True:
            try:
                rc = self.child.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                pass
            if self.stop_at is not None:
                if not self.termed:
                    self.termed = True
                    with contextlib.suppress(ProcessLookupError):
                        self.child.send_signal(signal.SIGTERM)
                elif time.monotonic() - self.stop_at > self.grace_s:
                    with contextlib.suppress(ProcessLookupError):
                        self.child.kill()
        self.sweep()
        self.write_exit(rc)
        return rc if rc >= 0 else 128 - rc

    def sweep(self) -> None:
        token = os.environ.get(ENV_LAUNCH_ID)
        if not token:
            return
        from launcher import procs  # psutil only; imported late so that the launcher starts first

        for _ in range(3):  # a dying rank may still fork: look again until quiet
            left = procs.tagged_processes(**{ENV_LAUNCH_ID: token})
            if not left:
                break
            procs.stop_processes(left, _SWEEP_GRACE_S)
        with contextlib.suppress(ChildProcessError):  # adopted orphans (subreaper): reap them
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass

    def write_exit(self, rc: int) -> None:
        if not self.exit_file:
            return
        from launcher.records import write_json_atomic

        from launcher.graceful_stop import STOPPED_NAME

        # Stopped: told to by a signal, or the ranks stopped on the runner's request (launcher.graceful_stop).
        stopped = self.stop_at is not None or os.path.exists(os.path.join(os.path.dirname(self.exit_file), STOPPED_NAME))
        with contextlib.suppress(Exception):  # never let bookkeeping change the launcher's status
            write_json_atomic(self.exit_file, {"returncode": rc, "stopped": stopped,
                                               "ended": time.time(), "pid": self.child.pid})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m launcher.pdeathsig", allow_abbrev=False)
    parser.add_argument("--pdeathsig", action="store_true", help="SIGTERM ourselves when the parent dies")
    parser.add_argument("--parent", type=int, help="the parent's pid: if it died before we armed PR_SET_PDEATHSIG, "
                                                   "start nothing (our ppid is then already someone else)")
    parser.add_argument("--grace", type=float, default=10.0)
    parser.add_argument("--exit-file")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command")
    shim = Shim(cmd, args.grace, args.exit_file)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, shim.on_signal)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    parent = args.parent or os.getppid()  # read here, after Python started, it may already be the reaper's
    if args.pdeathsig and _prctl(PR_SET_PDEATHSIG, signal.SIGTERM) and os.getppid() != parent:
        return 128 + signal.SIGTERM  # the parent died before prctl took effect: start nothing
    return shim.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
