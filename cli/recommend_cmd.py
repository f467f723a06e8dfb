"""``advise [--model NAME ...]``: the recommendation, as a rich report or DESIGN.md's JSON.

Thin: parse flags into a Request, call ``rules.api.recommend``, render. Rich is imported only for the
readable report, so ``--json`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cli.flags import (add_config_flags, add_hardware_flags, add_home_flag, add_json_flag, add_model_flags,
                       add_workload_flags, check_output_file)


def add_parser(parser: argparse.ArgumentParser, name: str) -> None:
    from advisor.setup import compromise_words

    add_model_flags(parser, required=True)
    add_config_flags(parser)
    add_hardware_flags(parser)
    add_workload_flags(parser)
    add_home_flag(parser)
    add_json_flag(parser)
    parser.add_argument("--save-plan", type=Path, metavar="FILE", help="write the plan `advise launch --plan FILE` runs")
    parser.add_argument("--alternatives", action="store_true",
                        help=f"also list node H's memory compromises ({compromise_words()}) when the standard setup fits")
    parser.add_argument("--full", action="store_true",
                        help="the whole report: every section in its long form (--show all)")
    parser.add_argument("--show", type=_show_list, metavar="SECTIONS", default=frozenset(),
                        help="sections printed in their long form, comma-separated: " + ", ".join(
                            f"{name} ({what})" for name, what in _showable().items()) + "; all for every one")
    parser.epilog = ("Given flags pin a choice; the rules fill in the rest. Examples:\n"
                     "  advise --model llama3-8b --gpu A100-80GB --gpus 8 --seq-len 2048\n"
                     "  advise --model resnet50 --gpu A100-80GB --gpus 8 --dataset-size 1281167 --epochs 90 --deadline 6h")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def _showable() -> dict[str, str]:
    from cli.report import SHOWABLE

    return SHOWABLE


def _show_list(text: str) -> frozenset[str]:
    """--show's value: known section names (or all), comma-separated."""
    names = {n.strip() for n in text.split(",") if n.strip()}
    unknown = names - set(_showable()) - {"all"}
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown section {', '.join(sorted(unknown)) or repr(text)}: "
                                         f"choose from {', '.join([*_showable(), 'all'])}")
    return frozenset(names)


def _shown(args: argparse.Namespace) -> frozenset[str]:
    return frozenset({"all"}) if args.full else args.show


def run(args: argparse.Namespace) -> int:
    from advisor.calibration import load_calibration
    from advisor.errors import UserError
    from cli.flags import home_dir, request_from_namespace
    from rules.api import recommend

    check_output_file(args.save_plan, "--save-plan", "plan.json")
    # No GPU detected and none named: plan for advisor.hardware.ASSUMED_GPU, and say so.
    rec = recommend(request_from_namespace(args), calibration=load_calibration(home_dir(args)),
                    assume_if_none=True)
    if args.json:
        sys.stdout.write(rec.to_json() + "\n")
    else:
        render_report(rec, show=_shown(args))
    if args.save_plan:
        if not rec.recommendation.fits:
            raise UserError("nothing fits, so no plan was written", where=str(args.save_plan),
                            fix="pin one of the alternatives above (their commands are listed) and save that")
        rec.plan.save(args.save_plan)
        if not args.json:
            print(f"plan written to {args.save_plan}; run it with: advise launch --plan {args.save_plan}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- rendering: cli/report.py

def render_report(rec, console=None, *, show=frozenset()) -> None:
    """``cli.report.render_report`` (the sections of the text report)."""
    from cli.report import render_report as render

    render(rec, console, show=show)


def memory_bar(memory, width: int = 56):
    """``cli.report.memory_bar`` (shared with ``advise estimate``)."""
    from cli.report import memory_bar as bar

    return bar(memory, width)
