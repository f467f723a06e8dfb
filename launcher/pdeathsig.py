"""``python -m launcher.pdeathsig CMD...``: exec CMD so that it gets SIGTERM when its parent dies.

The runner starts ``accelerate launch`` in a session of its own (so that a Ctrl-C in the terminal
reaches the runner, which then stops every rank in order). If the runner itself is SIGKILLed, no
signal handler runs; Linux's PR_SET_PDEATHSIG, which survives execve, then SIGTERMs the launcher,
whose torchrun agent stops the ranks (each rank also asks for SIGTERM on its launcher's death:
``launcher.runtime``). A shim instead of ``preexec_fn``: that hook is unsafe in the threaded
callers (the TUI's workers, the queue service). Elsewhere than Linux it just execs.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m launcher.pdeathsig CMD [ARGS...]")
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:  # the parent died before prctl took effect
            sys.exit(128 + signal.SIGTERM)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
