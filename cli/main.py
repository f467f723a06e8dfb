"""The ``advise`` console script: finds the subcommand, imports only its module, runs it.

Each command lives in ``cli/<name>_cmd.py`` with ``add_parser(subparsers)`` and
``run(args) -> int`` (Accelerate's commands layout). Importing a command must stay cheap: heavy
imports (torch, accelerate, textual) happen inside ``run``. ``advise --model X`` with no
subcommand is the recommendation; plain ``advise`` in a terminal opens the wizard.
"""

from __future__ import annotations

import _signal  # the C module: importing it runs no Python code, so the handler is set a few bytecodes in
import os
import sys


def _interrupted_while_starting(signum, frame) -> None:
    """Ctrl-C before the command runs (imports, parsing: the first ~0.3 s): nothing was started or written
    yet, so say so in one line and exit 130 as ``run_guarded`` does, instead of a KeyboardInterrupt
    traceback from whatever import it landed in."""
    os.write(2, b"advise: interrupted\n")
    os._exit(130)


# Set before the imports below when this process is the command (`python -m cli.main`, the `advise`
# script), never when a program imports this module (tests, the wizard): a Ctrl-C even during them ends it.
if __name__ == "__main__" or os.path.basename(getattr(sys, "argv", None) and sys.argv[0] or "") == "advise":
    _signal.signal(_signal.SIGINT, _interrupted_while_starting)  # `signal` itself imports enum: ~10 ms

import argparse  # noqa: E402 - after the handler above, on purpose
import gc  # noqa: E402
import importlib  # noqa: E402
import signal  # noqa: E402
import types  # noqa: E402

# name -> (module, one-line help). Order is the order of `advise --help`.
COMMANDS: dict[str, tuple[str, str]] = {
    "recommend": ("cli.recommend_cmd", "recommend how to train (the default: `advise --model NAME`)"),
    "estimate": ("cli.estimate_cmd", "memory and throughput of one exact configuration"),
    "launch": ("cli.launch_cmd", "run a recommendation or plan through Accelerate"),
    "probe": ("cli.probe_cmd", "run a few real steps of the plan, beside the estimate; store the factors"),
    "wizard": ("cli.wizard_cmd", "terminal UI: plan, explain, launch and watch"),
    "bench": ("cli.bench_cmd", "measure single- vs multi-GPU throughput and calibrate"),
    "calibrate": ("cli.bench_cmd", "show or reset measured calibration"),
    "gpus": ("cli.gpus_cmd", "detected GPUs, or the GPU table with --list"),
    "models": ("cli.models_cmd", "the model catalog"),
    "rules": ("cli.rules_cmd", "list the rules, or explain one"),
    "runs": ("cli.runs_cmd", "list recorded runs"),
    "show": ("cli.runs_cmd", "show one run record"),
    "serve": ("cli.service_cmd", "run the queue service in the foreground"),
    "submit": ("cli.service_cmd", "queue a run for the service"),
    "cancel": ("cli.service_cmd", "cancel a queued or running run"),
    "logs": ("cli.service_cmd", "print (or follow) a run's logs"),
}


# Commands that print an answer and exit: they start no processes and run for well under a second
# on catalog models, so the console script lets them skip what only a long-lived process needs
# (see ``console``). benchmarks/speed/startup.py measures the effect.
ONE_SHOT = frozenset({"recommend", "estimate", "gpus", "models", "rules"})


def _top_help() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: advise [COMMAND] [options]", "", "cardwise: one GPU or several, and how.", "", "commands:"]
    lines += [f"  {n:<{width}}  {h}" for n, (_, h) in COMMANDS.items()]
    lines += ["", "`advise --model llama3-8b` is `advise recommend --model llama3-8b`.",
              "`advise COMMAND --help` shows a command's flags."]
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """argparse, but a mistake is one message and the pointer to --help, not the whole usage; and no
    abbreviations (``allow_abbrev=False``): a prefix such as ``--cpu`` silently meant ``--cpu-offload``."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D401 - argparse's hook
        self.exit(2, f"{self.prog}: error: {message}\n  see `{self.prog} --help`\n")


def build_parser(name: str) -> argparse.ArgumentParser:
    module = importlib.import_module(COMMANDS[name][0])
    parser = _Parser(prog="advise" if name == "recommend" else f"advise {name}", description=COMMANDS[name][1])
    module.add_parser(parser, name)
    _state_ranges(parser)
    return parser


def _state_ranges(parser: argparse.ArgumentParser) -> None:
    """Every number flag's range in its --help (the type carries it: ``advisor.units``; issue 31)."""
    for action in parser._actions:
        shown = getattr(action.type, "range", None)
        if shown and action.help != argparse.SUPPRESS:
            action.help = f"{action.help or ''} [{shown}]".strip()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        if sys.stdin.isatty() and sys.stdout.isatty():
            argv = ["wizard"]
        else:
            print(_top_help())
            return 0
    if argv[0] in ("-h", "--help"):
        print(_top_help())
        return 0
    name = _command_name(argv)
    rest = argv[1:] if argv[0] in COMMANDS else argv
    if name == "recommend" and rest and not rest[0].startswith("-"):
        from advisor.errors import close_names

        near = close_names(rest[0], COMMANDS)
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        print(f"advise: unknown command '{rest[0]}'{hint}; `advise --help` lists them", file=sys.stderr)
        return 2
    parser = build_parser(name)
    args = parser.parse_args(rest)
    args.command = name
    module = importlib.import_module(COMMANDS[name][0])
    from cli.errors import run_guarded

    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:  # the command handles Ctrl-C itself
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return run_guarded(module.run, args)


def _interrupt_ends_the_start() -> None:
    """The console script owns the process: until ``main`` hands over to the command, Ctrl-C exits at once."""
    signal.signal(signal.SIGINT, _interrupted_while_starting)


def _command_name(argv: list[str]) -> str | None:
    """The subcommand ``argv`` runs: the default ``recommend`` unless it names another; None for bare help."""
    if not argv or argv[0] in ("-h", "--help"):
        return None
    return argv[0] if argv[0] in COMMANDS else "recommend"


class _PluginsOff(types.ModuleType):
    """``pydantic.plugin._loader`` for a process whose pydantic plugins are off.

    The real module imports ``importlib.metadata`` (and through it ``email``, ``socket``, ...: ~20 ms
    of the catalog recommendation's ~0.3 s CPU) only to look the plugins up, and its
    ``get_plugins()`` answers ``()`` without looking when ``PYDANTIC_DISABLE_PLUGINS`` is one of
    ``OFF`` (pydantic 2.x, ``pydantic/plugin/_loader.py``). This stand-in gives the same answer. Any
    other name pydantic asks for loads the real module, so a pydantic that needs more still works.
    """

    NAME = "pydantic.plugin._loader"
    OFF = ("__all__", "1", "true")

    @staticmethod
    def get_plugins() -> tuple:
        return ()

    def __getattr__(self, name: str):
        if name.startswith("__"):  # the import system asks for __path__ and the like: a plain module has none
            raise AttributeError(name)
        del sys.modules[self.NAME]
        real = importlib.import_module(self.NAME)
        sys.modules[self.NAME] = real
        return getattr(real, name)


def console() -> None:
    """The ``advise`` console script: ``main`` on ``sys.argv``, owning the process.

    For a one-shot command (``ONE_SHOT``) the process is this one call, so it skips (measured on a
    2-core machine, CPU time of ``advise --model llama3-8b --json``):
    - cyclic garbage collection (~35 ms): importing builds ~100k long-lived objects that every
      collection would scan again; refcounting frees the short-lived ones;
    - pydantic's plugin discovery (~40 ms): it reads the entry points of every installed
      distribution (torch included) at the first model build; cardwise's models use no plugin.
      The variable is left alone when the user set it, and no one-shot command starts processes.
      With plugins off, the loader module itself is not imported either (``_PluginsOff``, ~20 ms);
    - interpreter teardown (~90 ms): freeing every module and object at exit. Output is flushed
      first, and nothing in these commands needs an atexit hook; under a profiler or a tracer
      (cProfile, coverage), which write their results at exit, the exit is the normal one.
    ``main(argv)`` itself (tests, the wizard) changes none of this.
    """
    _interrupt_ends_the_start()
    argv = sys.argv[1:]
    one_shot = _command_name(argv) in ONE_SHOT
    if one_shot:
        gc.disable()
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
        if os.environ["PYDANTIC_DISABLE_PLUGINS"] in _PluginsOff.OFF and _PluginsOff.NAME not in sys.modules:
            sys.modules[_PluginsOff.NAME] = _PluginsOff(_PluginsOff.NAME)
    rc = main(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command is done: a late Ctrl-C changes nothing now
    if one_shot and sys.getprofile() is None and sys.gettrace() is None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    sys.exit(rc)


if __name__ == "__main__":
    console()
