"""Instructions the one-shot executes, counted by valgrind (cachegrind): a load-independent measure.

Wall and CPU time (``benchmarks.speed.search_timing``) move by 10-20% when other processes share the two
cores; the instruction count of the same command moves by well under 1%, so a change of a few percent
can be seen under load. The phases are counted separately: the interpreter with pydantic and rich (the
issue 27 baseline), one pydantic model built and validated (the floor any pydantic model pays), the one-shot's
imports, and the whole command as the console script runs it (gc off, pydantic plugins off, no teardown).
Wall time on a quiet machine tracks the count (~0.14 ns an instruction for the one-shot, 2026-12-05).

    python -m benchmarks.speed.instructions            # needs valgrind; ~1 minute
    python -m benchmarks.speed.instructions -- --model gpt2 --gpu H100 --gpus 8 --json
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What cli.main.console does for a one-shot command before main(): gc off, pydantic plugins off.
ONE_SHOT = ("import gc, os, sys; gc.disable(); os.environ['PYDANTIC_DISABLE_PLUGINS'] = '__all__'; "
            "from cli import main as m; sys.modules[m._PluginsOff.NAME] = m._PluginsOff(m._PluginsOff.NAME); ")
IMPORTS = ("import cli.recommend_cmd, rules.api, rules.flow, rules.alternatives, rules.compromise, advisor.sources, "
           "advisor.catalog, rules.policy")
# The one-shot ends in os._exit (cli.main.console: no interpreter teardown); so do the partial runs.
EXIT = "os._exit(0)"
# What any pydantic model costs before cardwise's own: pydantic's model machinery, Field's types module.
FLOOR = "from pydantic import BaseModel, Field\nclass A(BaseModel):\n    x: int = Field(1, description='x')\nA(x=2)\n"


def count(code: str, env: dict) -> float:
    """Millions of instructions of ``python -c code`` (bytecode cached by a first, uncounted run)."""
    cmd = [sys.executable, "-c", code]
    subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, check=True)
    out = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null", *cmd],
                         cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    refs = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    return int(refs.group(1).replace(",", "")) / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("argv", nargs="*", help="advise's arguments (after --); default: --model llama3-8b --json")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: apt-get install valgrind", file=sys.stderr)
        return 2
    argv = args.argv or ["--model", "llama3-8b", "--json"]
    env = dict(os.environ, PYTHONPYCACHEPREFIX=tempfile.mkdtemp(prefix="cardwise-pyc-"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    rows = [("baseline: import pydantic, rich", count("import pydantic, rich", env)),
            ("one pydantic model, built and validated (the floor)", count(ONE_SHOT + FLOOR + EXIT, env)),
            ("the one-shot's imports", count(ONE_SHOT + IMPORTS + "; " + EXIT, env)),
            (f"advise {' '.join(argv)}", count(f"import sys; sys.argv = {['advise', *argv]!r}; "
                                               "from cli.main import console; console()", env))]
    base = rows[0][1]
    for name, m in rows:
        print(f"{name:60s} {m:8.1f} M instructions ({m / base:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
