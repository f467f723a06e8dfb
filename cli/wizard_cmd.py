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


def run(args: argparse.Namespace) -> int:
    from advisor.hardware import detect_machine
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
