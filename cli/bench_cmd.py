"""``advise bench`` (measure single- vs multi-device training, calibrate) and ``advise calibrate``.

    advise bench --model resnet50 --gpus 1,2,4,8 --modes single,dp,ddp,fsdp --precision bf16
    advise bench --model gpt2,llama3.2-1b --gpus 1 --modes single --precision fp32,bf16,bf16+compile --report r.md
    advise bench --cpu --processes 1,2 --model mini-transformer --seq-len 32 --micro-batch 4 --json
    advise calibrate [--json]          # the factors measured on this machine
    advise calibrate --reset           # forget them

Every configuration is one recorded launch (``advise runs`` lists them) of the bench worker
through the launcher. Output: a progress bar on stderr, then the table, a terminal plot and what
was skipped and why, or ``--json`` (a list of rows); ``--csv``, ``--report`` (Markdown) and
``--plot`` (PNG, needs matplotlib) write files. Unless ``--no-calibrate``, measured/estimated
factors go to ``HOME/calibration.json``, which ``advise estimate`` and ``advise`` then apply
("calibrated on this machine"). Exit status: 0 all ran (or were skipped with a reason), 1 a run
failed, 130 cancelled, 2 a mistake in the flags.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from cli import flags


def add_parser(parser: argparse.ArgumentParser, name: str) -> None:
    if name == "calibrate":
        parser.add_argument("--reset", action="store_true", help="remove the factors measured on this machine")
        flags.add_home_flag(parser)
        flags.add_json_flag(parser)
        return
    parser.add_argument("--model", metavar="NAME[,NAME...]", help="catalog model(s) to bench (see `advise models`)")
    g = parser.add_argument_group("devices (one of)")
    g.add_argument("--gpus", metavar="1,2,4,8", help="GPU counts to compare (default: 1, 2, 4, ... up to those visible)")
    g.add_argument("--cpu", action="store_true", help="bench CPU processes over gloo instead (works anywhere)")
    g.add_argument("--processes", metavar="1,2", help="CPU process counts, with --cpu (default 1,2)")
    c = parser.add_argument_group("what to compare")
    c.add_argument("--modes", metavar="single,dp,ddp,fsdp",
                   help="single GPU, DataParallel (one process), DDP, FSDP (default: all four on GPUs, single,ddp on CPU)")
    c.add_argument("--precision", metavar="P[,P2...]",
                   help="variants: fp32, tf32, bf16, fp16, pure-bf16, each optionally +compile, +channels-last "
                        "(e.g. fp32,bf16,bf16+compile); default bf16 on GPUs (fp16 before Ampere), fp32 on CPU")
    c.add_argument("--compile", action="store_true", help="torch.compile every variant")
    c.add_argument("--channels-last", action="store_true", help="NHWC memory format for every variant (CNNs)")
    s = parser.add_argument_group("sizes (default: per model, reported)")
    s.add_argument("--micro-batch", metavar="N | MODEL=N,...",
                   help="samples per GPU (or process) per step, for all models or per model (gpt2=16,llama3.2-1b=4)")
    s.add_argument("--seq-len", metavar="N | MODEL=N,...", help="tokens per sample (text models), for all or per model")
    s.add_argument("--image-size", type=flags.positive_int, metavar="N", help="image side in pixels (vision models)")
    s.add_argument("--steps", type=flags.positive_int, default=10, metavar="N", help="timed optimizer steps per run (default 10)")
    s.add_argument("--warmup", type=flags.positive_int, default=3, metavar="N", help="untimed steps first; compile happens here (default 3)")
    s.add_argument("--comm-steps", type=flags.nonneg_int, default=3, metavar="N", help="DDP: no_sync/synchronised pairs timed (default 3)")
    s.add_argument("--dataloader-workers", type=flags.nonneg_int, metavar="N",
                   help="also measure a DataLoader with N workers (the input pipeline's ceiling)")
    o = parser.add_argument_group("output")
    flags.add_home_flag(parser)
    o.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    o.add_argument("--csv", type=Path, metavar="FILE", help="write every row as CSV")
    o.add_argument("--report", type=Path, metavar="FILE.md", help="write a Markdown report")
    o.add_argument("--plot", type=Path, metavar="FILE.png", help="write a PNG plot (needs matplotlib)")
    o.add_argument("--no-calibrate", action="store_true", help="do not save the measured factors")


# ==================================================================== advise bench
def _default_counts(n: int) -> list[int]:
    counts, c = [], 1
    while c <= n:
        counts.append(c)
        c *= 2
    if n not in counts:
        counts.append(n)
    return counts


def request_from_args(args: argparse.Namespace, machine):
    """The BenchRequest the flags describe, or one UserError saying what to change."""
    from advisor.catalog import catalog_model
    from advisor.errors import UserError
    from launcher.bench.plan import visible_gpus
    from launcher.bench.request import BenchRequest, parse_counts, parse_modes, parse_variants

    if not args.model:
        raise UserError("no model given", fix="add --model NAME (see `advise models`), e.g. --model resnet50 or --model gpt2,vit-b-16")
    models = list(dict.fromkeys(m.strip().lower() for m in args.model.split(",") if m.strip()))
    for m in models:
        catalog_model(m)  # unknown names fail here, with suggestions
    if args.cpu and args.gpus:
        raise UserError("--gpus and --cpu exclude each other", fix="--gpus 1,2 to bench GPUs, or --cpu --processes 1,2 for CPU processes")
    if args.processes and not args.cpu:
        raise UserError("--processes is for --cpu runs", fix="add --cpu, or give GPU counts with --gpus 1,2")
    modes = parse_modes(args.modes or ("single,ddp" if args.cpu else "single,dp,ddp,fsdp"))
    if args.cpu:
        from launcher.host_fit import max_processes

        counts = parse_counts(args.processes or "1,2", "--processes")
        if max(counts) > max_processes(machine.cpu_cores):
            raise UserError(f"--processes {max(counts)}: that many CPU processes on {machine.cpu_cores} core(s) "
                            f"only wait on each other (at most {max_processes(machine.cpu_cores)} here)",
                            fix=f"e.g. --processes 1,{min(2, max_processes(machine.cpu_cores))}")
        default_precision = "fp32"
    else:
        visible = visible_gpus(machine)
        if not visible:
            what = f"--gpus {args.gpus} given" if args.gpus else "no --cpu given"
            raise UserError(f"{what} but no GPU is visible ({machine.nvml_error or 'NVML reports 0 GPUs'})",
                            fix="bench CPU processes over gloo: advise bench --cpu --processes 1,2 --model ...")
        counts = parse_counts(args.gpus, "--gpus") if args.gpus else _default_counts(len(visible))
        from advisor.gpus import find_gpu

        first = next(g for g in machine.gpus if g.index == visible[0])
        spec = find_gpu(first.name)
        default_precision = "bf16" if spec is None or spec.supports_bf16 else "fp16"
    micro, per_model = _per_model(args.micro_batch, models, "--micro-batch", "gpt2=16,llama3.2-1b=4")
    seq_len, seq_lens = _per_model(args.seq_len, models, "--seq-len", "gpt2=1024,mini-transformer=256")
    variants = parse_variants(args.precision, default=default_precision, compile=args.compile,
                              channels_last=args.channels_last)
    return BenchRequest(models=models, cpu=args.cpu, counts=counts, modes=modes, variants=variants,
                        micro_batch=micro, micro_batches=per_model, seq_len=seq_len, seq_lens=seq_lens, image_size=args.image_size,
                        steps=max(2, args.steps), warmup=args.warmup, comm_steps=args.comm_steps,
                        dataloader_workers=args.dataloader_workers, calibrate=not args.no_calibrate)


def _per_model(text: str | None, models: list[str], flag: str, example: str) -> tuple[int | None, dict[str, int]]:
    """``--micro-batch 16`` (every model) or ``--micro-batch gpt2=16,llama3.2-1b=4`` (the others: default)."""
    from advisor.errors import UserError

    if not text:
        return None, {}
    fix = f"e.g. {flag} 16, or per model: {flag} {example}"
    if "=" not in text:
        try:
            return flags.positive_int(text), {}
        except argparse.ArgumentTypeError as exc:
            raise UserError(f"{flag}: {exc}", fix=fix) from None
    out: dict[str, int] = {}
    for item in (t.strip() for t in text.split(",") if t.strip()):
        name, _, value = item.partition("=")
        name = name.strip().lower()
        if name not in models:
            raise UserError(f"{flag} names '{name}', which is not among --model {','.join(models)}", fix=fix)
        try:
            out[name] = flags.positive_int(value.strip())
        except argparse.ArgumentTypeError as exc:
            raise UserError(f"{flag} {name}: {exc}", fix=fix) from None
    return None, out


def command_line(request) -> str:
    """The bench as a command a reader can run again (for reports)."""
    parts = ["advise", "bench", "--model", ",".join(request.models)]
    parts += ["--cpu", "--processes", ",".join(map(str, request.counts))] if request.cpu else ["--gpus", ",".join(map(str, request.counts))]
    parts += ["--modes", ",".join(request.modes), "--precision", ",".join(v.label for v in request.variants)]
    micro = ",".join(f"{m}={n}" for m, n in request.micro_batches.items()) or request.micro_batch
    seq = ",".join(f"{m}={n}" for m, n in request.seq_lens.items()) or request.seq_len
    for flag, value in (("--micro-batch", micro), ("--seq-len", seq),
                        ("--image-size", request.image_size), ("--dataloader-workers", request.dataloader_workers)):
        if value is not None:
            parts += [flag, str(value)]
    parts += ["--steps", str(request.steps), "--warmup", str(request.warmup)]
    return shlex.join(parts)


def _done_line(i: int, total: int, row) -> str:
    head = f"[{i + 1}/{total}] {row.model} {row.variant} {row.mode} x{row.devices}"
    if row.status != "ok":
        return f"{head}: {row.status}: {row.reason}"
    return f"{head}: {row.samples_per_s:,.1f} samples/s, step {row.step_s * 1000:.1f} ms" + (
        f", peak {row.peak_gib:.2f} GiB" if row.peak_gib is not None else "")


class _Progress:
    """A rich progress bar on a terminal (stderr), one line per finished run otherwise."""

    def __init__(self, quiet_lines: bool = False):
        from rich.console import Console

        self.console = Console(stderr=True)
        self.live = self.console.is_terminal
        self.quiet_lines = quiet_lines
        self._progress = None
        self._task = None

    def __enter__(self):
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), console=self.console, transient=True)
            self._progress.__enter__()
        return self

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def __call__(self, event: str, i: int, total: int, job, row) -> None:
        if self._progress is not None:
            if self._task is None:
                self._task = self._progress.add_task("bench", total=total)
            if event == "start":
                self._progress.update(self._task, description=f"bench {job.label}")
            else:
                self._progress.advance(self._task)
                self._progress.console.print(_done_line(i, total, row), highlight=False, markup=False)
        elif event == "done" and not self.quiet_lines:
            print(f"advise: bench {_done_line(i, total, row)}", file=sys.stderr, flush=True)


def _bench(args: argparse.Namespace) -> int:
    import threading

    from advisor.hardware import detect_machine
    from launcher.bench import report
    from launcher.bench.run import run_bench
    from launcher.home import resolve_home
    from launcher.runner import forward_signals

    machine = detect_machine()
    request = request_from_args(args, machine)
    # Files are written after the whole bench has run: a bad path must fail now, not then.
    for path, flag, example in ((args.csv, "--csv", "bench.csv"), (args.report, "--report", "report.md"),
                                (args.plot, "--plot", "plot.png")):
        flags.check_output_file(path, flag, example)
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("advise: note: --plot needs matplotlib, which is not installed (pip install 'cardwise[plot]'); "
                  "the terminal plot is printed instead", file=sys.stderr)
            args.plot = None
    home = resolve_home(args.home)
    cancel = threading.Event()
    cmd = command_line(request)

    def partial(result) -> None:  # files that survive a bench killed half-way
        if args.csv:
            report.write_csv(result, args.csv)
        if args.report:
            report.write_markdown(result, args.report, cmd)

    with forward_signals(cancel), _Progress() as progress:
        result = run_bench(request, home, machine=machine, progress=progress, cancel=cancel, on_partial=partial)

    if args.csv:
        print(f"advise: wrote {report.write_csv(result, args.csv)}", file=sys.stderr)
    if args.report:
        print(f"advise: wrote {report.write_markdown(result, args.report, cmd)}", file=sys.stderr)
    if args.plot:
        print(f"advise: wrote {report.write_png(result, args.plot)}", file=sys.stderr)
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in result.rows], indent=2))
    else:
        _print_text(result, report)
    if result.cancelled:
        return 130
    return 1 if any(r.status == "failed" for r in result.rows) else 0


def _print_text(result, report) -> None:
    from rich.console import Console

    out = Console()
    if not out.is_terminal:
        out = Console(width=max(out.width, 180))  # a file or pipe: room for every column
    if report.measured(result):
        out.print(report.rich_table(result, width=out.width))
        out.print()
        print(report.terminal_plot(result))
    else:
        print("nothing was measured")
    lines = report.not_run_lines(result)
    if lines:
        print()
        print("\n".join(lines))
    for note in result.notes:
        print(f"note: {note}")
    if result.factors:
        where = f"saved to {result.calibration_path}" if result.calibration_path else "not saved (--no-calibrate)"
        print(f"calibration: {len(result.factors)} factor(s) {where}; `advise estimate` now says \"calibrated on this machine\""
              if result.calibration_path else f"calibration: {len(result.factors)} factor(s) {where}")


# ==================================================================== advise calibrate
def _calibrate(args: argparse.Namespace) -> int:
    from launcher import calibrate
    from launcher.home import resolve_home

    home = resolve_home(args.home)
    flags.check_home_readable(home)  # a file given as the home (/etc/passwd) is not "no calibration yet"
    path = calibrate.calibration_path(home)
    if args.reset:
        removed = calibrate.reset_calibration(home)
        if args.json:
            print(json.dumps({"reset": True, "removed": removed, "path": str(path)}))
        else:
            print(f"removed {removed} calibration factor(s) from {path}; estimates use the packaged constants again"
                  if removed else f"no calibration to reset ({path} does not exist)")
        return 0
    cal = calibrate.read_calibration(home)
    views = calibrate.factor_views(cal)
    if args.json:
        print(json.dumps({"path": str(path), "measured": cal.measured, "factors": [v.model_dump() for v in views]}, indent=2))
        return 0
    if not views:
        print(f"no calibration measured on this machine yet ({path}); `advise bench --model NAME` measures one")
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"calibration measured on this machine ({path})", title_justify="left")
    for col in ("gpu", "family", "precision", "mode", "factor", "samples", "from"):
        t.add_column(col, justify="right" if col in ("factor", "samples") else "left")
    for v in views:
        t.add_row(v.gpu, v.family, v.precision, v.mode, f"{v.factor:.3f}", str(v.samples), ", ".join(v.models[:4])
                  + (f" (+{len(v.models) - 4})" if len(v.models) > 4 else ""))
    Console().print(t)
    print("factor = measured / estimated samples/s; `advise calibrate --reset` forgets them")
    return 0


def run(args: argparse.Namespace) -> int:
    if getattr(args, "command", "bench") == "calibrate":
        return _calibrate(args)
    return _bench(args)
