"""Finding and stopping process trees: one mechanism for the runner and the queue service.

Identity. A pid alone names a process only until it exits: the kernel hands the number out
again. Every function here works on ``psutil.Process`` objects, which remember the creation
time and refuse to signal a pid that now belongs to someone else. Processes of a run are found
by an environment tag their whole tree inherits (``CARDWISE_LAUNCH_ID``, ``CARDWISE_RUN_DIR``,
``CARDWISE_SERVICE_HOME``): it survives re-parenting and new sessions, which parent links and
process groups do not. When the environment cannot be read (another user's process, a kernel
that hides it), ``same_process`` falls back to the creation time against when the run started.

Stopping. ``stop_processes`` is the one policy: SIGTERM (a training script may save or flush),
``grace_s`` to exit, then SIGKILL, and waiting until each is gone. Zombies count as gone, but
those that are our children (or were re-parented to us as subreaper) are reaped on the way, so
no zombie outlives a run.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable

import psutil

KILL_WAIT_S = 5.0  # after SIGKILL only an uninterruptible sleep (D state) keeps a process alive


def environ(p: psutil.Process) -> dict[str, str] | None:
    """The process's environment, None when it cannot be read (gone, or not ours)."""
    try:
        return p.environ()
    except psutil.Error:
        return None


def tagged_processes(**tags: str) -> list[psutil.Process]:
    """Live processes (ours to read) whose environment has every ``NAME=value`` in ``tags``."""
    me, found = os.getpid(), []
    for p in psutil.process_iter():
        if p.pid == me:
            continue
        env = environ(p)
        if env and all(env.get(k) == v for k, v in tags.items()):
            found.append(p)
    return found


def group_members(pgid: int, exclude: Iterable[int] = ()) -> list[psutil.Process]:
    """Live processes in process group ``pgid`` (other than the pids in ``exclude``)."""
    skip, found = set(exclude), []
    for p in psutil.process_iter():
        with contextlib.suppress(OSError, psutil.Error):
            if p.pid not in skip and os.getpgid(p.pid) == pgid:
                found.append(p)
    return found


def same_process(pid: int | None, *, tag: tuple[str, str], started: float | None,
                 window: tuple[float, float]) -> psutil.Process | None:
    """The process at ``pid`` if it is still the one a record means, else None (a reused pid).

    It is when its environment carries ``tag`` (name, value); when the environment cannot be read,
    when it was created within ``window`` seconds (before, after) of ``started``.
    """
    if not pid:
        return None
    try:
        p = psutil.Process(pid)
    except psutil.Error:
        return None
    env = environ(p)
    if env is not None:
        return p if env.get(tag[0]) == tag[1] else None
    try:
        created = p.create_time()
    except psutil.Error:
        return None
    lo, hi = window
    return p if started is not None and started + lo <= created <= started + hi else None


def exists(p: psutil.Process) -> bool:
    """Still there, possibly as a zombie (``is_running`` also checks the pid was not reused)."""
    try:
        return p.is_running()
    except psutil.Error:
        return False


def alive(p: psutil.Process) -> bool:
    """Running and not a zombie: something a signal can still stop."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def gone(p: psutil.Process) -> bool:
    """Exited (a zombie counts: it holds no files, locks or memory), or its pid now belongs to another.
    A process we may not inspect is not assumed gone."""
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def wait_gone(procs: Iterable[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until every process is gone (reaping our own children); return those still alive."""
    deadline = time.monotonic() + timeout
    left = list(procs)
    while left:
        for p in left:
            with contextlib.suppress(psutil.Error):
                p.wait(timeout=0)  # reaps it if it is our child; a quick check otherwise
        left = [p for p in left if not gone(p)]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    return left


def stop_processes(procs: Iterable[psutil.Process], grace_s: float,
                   kill_wait_s: float = KILL_WAIT_S) -> list[psutil.Process]:
    """SIGTERM ``procs``, SIGKILL those left after ``grace_s``; return any that still live.

    Zombies are kept in the wait (not signalled) so that those that are our children get reaped.
    """
    procs = [p for p in procs if exists(p)]
    if not procs:
        return []
    for p in procs:  # psutil checks the create time before signalling: no pid-reuse accidents
        if alive(p):
            with contextlib.suppress(psutil.Error):
                p.terminate()
    left = wait_gone(procs, grace_s)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    return wait_gone(left, kill_wait_s)


def signal_group(pgid: int | None, sig: int) -> None:
    """Signal a whole process group; one that is already gone (or not ours) is left alone."""
    if pgid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


def owner_identity() -> dict[str, float]:
    """This process as a run record's owner: pid plus creation time (a reused pid has another)."""
    return {"pid": os.getpid(), "created": psutil.Process().create_time()}


def owner_alive(owner: dict | None) -> bool | None:
    """Whether the process a record names as its owner still runs; None when the record names none."""
    if not owner or not owner.get("pid"):
        return None
    try:
        p = psutil.Process(int(owner["pid"]))
        return abs(p.create_time() - float(owner.get("created") or 0)) < 1.0 and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, TypeError, ValueError):
        return False
