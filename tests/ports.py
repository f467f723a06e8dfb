"""Ports the tests choose themselves (a rendezvous for ``--main-port``, torchrun's ``--master_port``),
safe while two pytest-xdist workers, the product and a Slurm job pick ports at the same time.

A port from the kernel (bind to 0, then close) is free only until someone else binds it: another
worker's launch asking the kernel too (``launcher.command.free_port``), or any outgoing connection
(gloo opens many) taking it as its ephemeral port. So a test's port comes from a range the kernel
never hands out (below ``ip_local_port_range``), above the Slurm jobs' ports (20000 + job id % 10000,
``launcher.slurm``), in a slice of that range of its own per xdist worker; a bind checks it is free now.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

SLURM_PORTS_END = 30000  # launcher/slurm.py: MAIN_PORT defaults to 20000 + SLURM_JOB_ID % 10000


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default range is 32768-60999


def _kernel_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now, that no other xdist worker of this run and no
    kernel-chosen port can take before the test's processes bind it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    span = (_ephemeral_low() - SLURM_PORTS_END) // count
    if span < 16:  # an unusual ephemeral range leaves no room: the kernel's choice is the best left
        return _kernel_port()
    start = SLURM_PORTS_END + index * span
    for offset in random.sample(range(span), min(span, 256)):
        if _bindable(start + offset):
            return start + offset
    return _kernel_port()
