"""Polling helper shared by the multi-process tests: a hang guard, not a time limit."""

from __future__ import annotations

import time


def wait_for(pred, timeout: float, what: str):
    """``pred()``'s first truthy value, polled every 0.1 s; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
