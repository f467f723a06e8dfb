"""``advise wizard [--home DIR] [--gpu NAME --gpus N --nodes N]``: the terminal UI.

Plain ``advise`` in a terminal opens it too (cli/main.py). Importing this module stays
cheap; textual is imported in ``run``, torch and accelerate only when a run is launched.
Exit status 0 on ctrl+q.
"""

from __future__ import annotations

import argparse

from cli import flags


def add_parser(parser: argparse.ArgumentParser, name: str) -> None:
    g = parser.add_argument_group("hardware to plan for (default: what is detected)")
    g.add_argument("--gpu", metavar="NAME", help="plan for this GPU kind instead of the detected one (`advise gpus --list`)")
    g.add_argument("--gpus", type=flags.positive_int, metavar="N", help="GPUs per node")
    g.add_argument("--nodes", type=flags.positive_int, default=1, metavar="N", help="machines")
    flags.add_home_flag(parser)


def not_a_terminal() -> str | None:
    """'stdin' or 'stdout' when that one is not a terminal, else None (tests replace this)."""
    import sys

    for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout)):
        if stream is None or not stream.isatty():
            return name
    return None


def run(args: argparse.Namespace) -> int:
    from advisor.hardware import detect_machine

    which = not_a_terminal()
    if which is not None:
        # Textual would write escape codes into the file or pipe and wait for keys that never come.
        from advisor.errors import UserError

        raise UserError(f"the wizard needs a terminal, and {which} is not one",
                        fix="run it in a terminal; for the same answer in a file or pipe use "
                            "`advise --model NAME [flags]` (add --json for data) and `advise launch ...`")
    from launcher.home import resolve_home
    from launcher.store import RunStore

    if args.gpu is not None:
        from advisor.gpus import get_gpu

        get_gpu(args.gpu)  # an unknown name fails here with suggestions, before the screen opens
    store = RunStore.open(resolve_home(args.home))
    from tui.app import make_app

    app = make_app(detect_machine(), store, gpu=args.gpu, gpus=args.gpus, nodes=args.nodes)
    app.run()
    return int(app.return_code or 0)
