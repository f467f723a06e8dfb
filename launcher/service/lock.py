"""One service per home: ``flock`` on ``home/service.lock``, held for the service's life.

The kernel drops the lock when the process dies, even by SIGKILL, so a stale lock never blocks
a restart; the descriptor is close-on-exec, so runs never inherit it. The file holds the pid,
so a second ``advise serve`` (and ``advise cancel``) can name the holder.

The lock file is opened with ``O_NOFOLLOW`` and checked (owner, mode) before it is truncated: a
``service.lock`` planted as a symbolic link would otherwise have the service empty its target.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from pathlib import Path

from advisor.errors import UserError

LOCK_NAME = "service.lock"
_LOCK_RETRY_S = 1.0  # `advise cancel` probes the lock for microseconds; a starting service waits that out


class ServiceLock:
    """``flock`` on ``home/service.lock`` (0600) holding the service's pid; one service per home."""

    def __init__(self, home: Path):
        self.path = Path(home) / LOCK_NAME
        self.fd: int | None = None

    def acquire(self) -> "ServiceLock":
        fd = _open_lock(self.path, os.O_RDWR | os.O_CREAT)
        deadline = time.monotonic() + _LOCK_RETRY_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    pid = _lock_pid(self.path)
                    who = f" (pid {pid})" if pid else ""
                    raise UserError(f"another `advise serve`{who} is already running for this home",
                                    where=str(self.path.parent),
                                    fix="use that service (`advise submit`), stop it first, or serve another --home") from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
            os.close(self.fd)  # closing drops the flock
            self.fd = None

    def __enter__(self) -> "ServiceLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _open_lock(path: Path, flags: int) -> int:
    """Open the lock file without following a link, and only if it is the caller's alone."""
    from launcher.store_safety import check_file

    check_file(path, "the service lock")
    try:
        fd = os.open(path, flags | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # made a link between the check and the open
            check_file(path, "the service lock")
        raise
    check_file(path, "the service lock")  # created now, or replaced in between: look again
    return fd


def _lock_pid(path: Path) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        with os.fdopen(fd) as f:
            text = f.read().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def service_pid(home: Path) -> int | None:
    """The pid of the service holding ``home``'s lock (0 if unknown), or None when none runs."""
    path = Path(home) / LOCK_NAME
    try:
        fd = _open_lock(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _lock_pid(path) or 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)

