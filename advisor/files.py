"""Reading the files a user names, with limits: only regular files, at most so many bytes, UTF-8.

Issue 31: a config or plan read from ``/dev/zero`` never ended, a FIFO named ``x.jpg`` hung the launch
(``open`` of a FIFO waits for a writer), a plan with invalid UTF-8 ended in a traceback. Every file
cardwise reads on a user's word goes through ``open_regular``: opened with ``O_NONBLOCK`` (a FIFO
opens at once instead of waiting) and checked with ``fstat`` on the descriptor it reads (no race
with a rename), refused unless it is a regular file. Errors are ``ValueError`` naming the file; the
callers turn them into their ``UserError`` with their own fix.
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path
from typing import IO

# A plan, a config.json or a calibration file is kilobytes; 16 MiB is far beyond any (cardwise's choice).
MAX_SMALL_FILE = 16 * 2**20
# One row of a --data JSONL/CSV file (a long document is a few MB; cardwise's choice).
MAX_LINE = 16 * 2**20

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | Path, *, text: bool = True) -> IO:
    """``path`` opened for reading if it is a regular file (``ValueError`` otherwise; ``OSError`` as ``open``)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"{path}: {kind_of(mode)}, not a regular file")
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    if text:
        return os.fdopen(fd, "r", encoding="utf-8", newline="")
    return os.fdopen(fd, "rb")


def is_regular(path: str | Path) -> bool:
    """A regular file (``lstat``-free: a link to one counts); False for FIFOs, devices, missing files."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def read_small_text(path: str | Path, limit: int = MAX_SMALL_FILE) -> str:
    """The whole of a small UTF-8 text file: ``ValueError`` for a file that is not regular, longer than
    ``limit`` bytes, or not UTF-8; ``OSError`` (FileNotFoundError, ...) as ``open`` raises it."""
    with open_regular(path, text=False) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{path}: larger than {limit // 2**20} MiB, not the small file expected")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a UTF-8 text file (byte {exc.start})") from None


def lines(f: IO[str], path: str | Path, limit: int = MAX_LINE):
    """The lines of an open text file, each at most ``limit`` characters (``ValueError`` naming the line)."""
    for i in range(1, 1 << 62):
        line = f.readline(limit + 1)
        if not line:
            return
        if len(line) > limit and not line.endswith("\n"):
            raise ValueError(f"{path}:{i}: a line longer than {limit // 2**20} MiB")
        yield line
