"""`advise` and `advise estimate` fit the terminal they print to, and print plain text when piped.

The terminal is a real pseudo-terminal of 80 x 24 (``pty`` with ``TIOCSWINSZ``), the size rich
measures; no line may be wider than it (a wider one wraps and garbles every panel)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from rich.cells import cell_len

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--model", "gpt2", "--gpu", "A100-80GB", "--gpus", "4"]


def _at_terminal(argv: list[str], cols: int, rows: int = 24) -> str:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(PYTHONPATH=str(ROOT), TERM="xterm-256color")
    p = subprocess.Popen([sys.executable, "-m", "cli.main", *argv], stdin=slave, stdout=slave, stderr=slave,
                         env=env, close_fds=True)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    p.wait(300)
    os.close(master)
    assert p.returncode == 0, out.decode(errors="replace")[-2000:]
    return out.decode(errors="replace")


def _plain(text: str) -> list[str]:
    import re

    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "", text)  # colour and terminal codes
    return text.replace("\r\n", "\n").split("\n")


@pytest.mark.parametrize("command", [[], ["estimate"]], ids=["advise", "estimate"])
@pytest.mark.parametrize("cols", [80, 120])
def test_the_report_fits_the_terminal(command, cols):
    lines = _plain(_at_terminal([*command, *ARGS], cols))
    widest = max(cell_len(line) for line in lines)
    assert widest <= cols, [line for line in lines if cell_len(line) > cols][:3]
    assert sum(1 for line in lines if line.strip()) > 5


@pytest.mark.parametrize("command", [[], ["estimate"]], ids=["advise", "estimate"])
def test_piped_output_is_plain_text(command):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    res = subprocess.run([sys.executable, "-m", "cli.main", *command, *ARGS], capture_output=True, text=True,
                         env={**env, "PYTHONPATH": str(ROOT)}, stdin=subprocess.DEVNULL)  # no terminal to follow
    assert res.returncode == 0, res.stderr
    assert "\x1b[" not in res.stdout  # no colour codes in a file
    assert max(cell_len(line) for line in res.stdout.splitlines()) <= 100


def _report(*argv: str, columns: int = 200) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": str(columns)}
    res = subprocess.run([sys.executable, "-m", "cli.main", *argv], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    return res.stdout


def test_the_scaling_table_shows_whole_notes():
    out = _report("--model", "gpt2", "--gpu", "A100-80GB", "--gpus", "8", "--batch-size", "12")
    assert "the global batch 12 does not split evenly over 8 GPUs" in out  # was cut after 30 characters


def test_the_header_shows_the_hardware_given_not_the_plan():
    import json

    out = _report("--model", "gpt2", "--gpu", "A100-80GB", "--gpus", "8")
    head = out.split("recommendation", 1)[0]
    assert "8x A100-SXM-80GB" in head and "the plan uses 1" in head, head
    data = json.loads(_report("--model", "gpt2", "--gpu", "A100-80GB", "--gpus", "8", "--json"))
    assert data["estimate"]["hardware"]["gpus_at_hand"] == 8 and data["recommendation"]["gpus"] == 1
