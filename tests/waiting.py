"""Polling helper shared by the multi-process tests: a hang guard, not a time limit."""

from __future__ import annotations

import time
from contextlib import contextmanager


def wait_for(pred, timeout: float, what: str, every: float = 0.1):
    """``pred()``'s first truthy value, polled every ``every`` seconds; AssertionError after ``timeout``
    seconds. A ``pred`` that costs CPU (a subprocess, a CLI command) polls less often: on a loaded 2-core
    machine a tight poll takes the CPU from the very processes it waits for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@contextmanager
def reaped(proc):
    """Kill and reap ``proc`` on the way out if it is still running (a failed wait, an assertion):
    a test never leaves its launcher behind."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def stop_and_collect(proc, sig, timeout: float = 300) -> tuple[str, str]:
    """Send ``sig`` and return ``proc``'s (stdout, stderr) once it exits; ``timeout`` is a hang guard."""
    proc.send_signal(sig)
    return proc.communicate(timeout=timeout)
