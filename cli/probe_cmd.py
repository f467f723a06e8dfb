"""``advise probe``: a few real training steps of the planned configuration, beside the estimate.

    advise probe --model gpt2 --micro-batch 16 --precision bf16
    advise probe --hf-config ./gpt2/config.json --seq-len 1024 --compile
    advise probe --module net.py:build --input-shape 3,224,224 --channels-last
    advise probe --cpu --model mini-transformer --seq-len 32 --micro-batch 4 --json
    advise probe --data ~/imagenet/train [--image-size 224]     # this machine's loader rate on your files

It plans as ``advise launch`` does (the rules on the detected GPU; ``launcher.cpu_plan`` with
``--cpu``), then ``launcher.probe`` runs the per-GPU configuration in a child process on one
device and prints measured peak memory (allocated and reserved), samples/s and GPU utilisation
beside the estimate, with measured/estimated. A CUDA OOM tries half the micro-batch. ``--data DIR`` instead times the
input pipeline (JPEG decode + RandomResizedCrop + flip + normalise, launcher.loader_probe) on the image
files under DIR, one core, and stores the rate for later estimates (advisor.loader.LoaderProbe). The ratios
are stored under ``--home`` for this model, GPU kind and variant, so later estimates of this model
there use them (``advisor.probe_factors``; ``--no-save`` keeps them out). Progress goes to stderr.
Exit status: 0 measured, 1 the child failed, 2 a mistake in the flags or OOM at every
micro-batch, 130 cancelled.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cli import flags


def add_parser(parser: argparse.ArgumentParser, name: str) -> None:
    flags.add_model_flags(parser, required=True)
    flags.add_config_flags(parser)
    flags.add_workload_flags(parser)
    add_probe_flags(parser)
    parser.add_argument("--cpu", action="store_true", help="probe on the CPU (no GPU needed; CPU factors only)")
    parser.add_argument("--no-save", dest="save", action="store_false", help="measure only; store no factors")
    parser.add_argument("--data", type=Path, metavar="DIR",
                        help="time the data loader on the image files under DIR (one core; at --image-size, default 224) "
                             "and store the rate: later estimates' input pipeline uses it")
    flags.add_home_flag(parser)
    flags.add_json_flag(parser)


def add_probe_flags(parser: argparse.ArgumentParser) -> None:
    """--probe-steps/--probe-warmup, shared with ``advise launch --probe``."""
    g = parser.add_argument_group("probe")
    g.add_argument("--probe-steps", type=flags.positive_int, default=10, metavar="N", help="timed steps (default 10)")
    g.add_argument("--probe-warmup", type=flags.positive_int, default=3, metavar="N",
                   help="untimed steps first, compile included (default 3)")


def _machine_with_gpu():
    from advisor.errors import UserError
    from advisor.hardware import detect_machine

    machine = detect_machine()
    if not machine.has_gpu:
        raise UserError(f"no GPU detected to probe on ({machine.nvml_error or 'NVML reports 0 GPUs'})",
                        fix="add --cpu to probe on this machine's CPU, or run the probe on the GPU machine")
    return machine


def make_plan(args: argparse.Namespace):
    """(plan, machine, model spec, notes): the plan ``advise launch`` would run for the same flags.
    The model is resolved first, so that a mistake in it is the one message, before any note."""
    from advisor.sources import resolve_model

    req = flags.request_from_namespace(args)
    machine = None if args.cpu else _machine_with_gpu()
    spec = resolve_model(req.model)
    if args.cpu:
        from launcher.cpu_plan import cpu_plan
        from launcher.host_fit import check_host_fit
        from rules.lr import recipe_for_request

        plan, notes = cpu_plan(req, recipe_for_request(req), processes=1)
        check_host_fit(plan)  # the probe's child holds the whole training state in host RAM
        return plan, None, spec, notes
    from advisor.calibration import load_calibration
    from rules.api import plan as rules_plan

    return rules_plan(req, machine=machine, calibration=load_calibration(flags.home_dir(args))), machine, spec, []


def run_probe(args: argparse.Namespace, plan, machine, *, spec=None, save: bool = True):
    """Run the probe with Ctrl-C forwarded (the child is stopped and reaped); progress on stderr."""
    import threading

    from launcher.probe import probe_plan
    from launcher.runner import forward_signals

    cancel = threading.Event()
    with forward_signals(cancel):
        return probe_plan(plan, home=flags.home_dir(args), machine=machine, spec=spec, warmup=args.probe_warmup,
                          steps=args.probe_steps, save=save, cancel=cancel, echo=sys.stderr,
                          progress=lambda text: print(f"advise: probe: {text}", file=sys.stderr, flush=True))


def run_data(args: argparse.Namespace) -> int:
    """``--data DIR``: this machine's loader rate on the user's files, stored beside the other probe files."""
    from advisor.loader import save_loader_probe
    from launcher.loader_probe import PROBE_BATCH, probe_directory

    size = args.image_size or 224
    # batches of the micro-batch the user plans, when given: a worker hands over whole batches
    batch = getattr(args, "micro_batch", None) or PROBE_BATCH
    probe = probe_directory(args.data, size, batch=batch,
                            progress=lambda text: print(f"advise: probe: {text}", file=sys.stderr, flush=True))
    stored = str(save_loader_probe(flags.home_dir(args), probe)) if args.save else None
    if args.json:
        print(json.dumps({**probe.model_dump(), "stored": stored}, indent=2))
        return 0
    print(f"loader: {probe.per_core:,.0f} images/s per DataLoader worker at {size} px on {probe.cpu} "
          f"({probe.files} files)")
    print(f"  a worker's time per image: {probe.transform_ms:.2f} ms reading + decode + crop + flip + normalise "
          f"({probe.transform}), "
          f"{probe.handoff_ms:.2f} ms handing its batch of {probe.batch} to the training process (shared memory)")
    print("  a GPU whose loader has N cores (one left for the training process) gets (N - 1) workers")
    if stored:
        print(f"  stored in {stored}: later estimates' JPEG input pipeline uses it")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.data is not None:
        return run_data(args)
    plan, machine, spec, notes = make_plan(args)
    for note in notes:
        print(f"advise: note: {note}", file=sys.stderr)
    result = run_probe(args, plan, machine, spec=spec, save=args.save)
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        render(result)
    return exit_status(result)


def exit_status(result) -> int:
    return {"ok": 0, "cancelled": 130, "oom": 2}.get(result.status, 1)


def _gib(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _ratio(v) -> str:
    return "-" if v is None else f"x{v:.2f}"


def render(result, console=None) -> None:
    """Measured beside estimated, then where the factors went (``console``: rich Console, stdout by default)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    c = result.config
    head = (f"probe: {result.model} on {result.device}, micro-batch {c.micro_batch} x {c.grad_accum}, "
            f"{c.precision.value}" + (" + compile" if c.compile else "") + (" + checkpointing" if c.grad_ckpt else "")
            + (" + channels_last" if c.channels_last else "") + f", {c.optimizer.value}")
    console.print(Text(head, style="bold"))
    tried = ", ".join(f"micro-batch {a.micro_batch}: {a.status}" for a in result.attempts)
    if len(result.attempts) > 1 or result.status != "ok":
        console.print(Text(f"attempts: {tried}", style="yellow"))
    if result.status != "ok":
        console.print(Text(f"{result.status}: {result.error}", style="red"))
        return
    m, e = result.measured, result.estimate
    console.print(Text(f"{m.implementation} · {m.device_name} · {m.steps} timed steps after {m.warmup_steps} warm-up "
                       f"(first step {m.first_step_s or 0:.2f} s)", style="dim"))
    tab = Table(show_edge=False)
    for col, just in (("", "left"), ("measured", "right"), ("estimated", "right"), ("measured/estimated", "right")):
        tab.add_column(col, justify=just)
    mem_label = "peak memory, GiB" + (" (RSS growth)" if m.reserved_gib is None else " (allocated)")
    tab.add_row(mem_label, _gib(m.peak_gib), _gib(e.memory.peak_gib), _ratio(result.memory_ratio))
    if m.reserved_gib is not None:
        tab.add_row("reserved by the allocator, GiB", _gib(m.reserved_gib), "-", "-")
    tab.add_row("samples/s", f"{m.samples_per_s:,.2f}", f"{e.throughput.samples_per_s:,.2f}", _ratio(result.throughput_ratio))
    if m.tokens_per_s:
        tab.add_row("tokens/s", f"{m.tokens_per_s:,.0f}", f"{e.throughput.tokens_per_s:,.0f}", "")
    tab.add_row("GPU utilisation", "-" if m.gpu_util_pct is None else f"{m.gpu_util_pct:.0f}%", "", "")
    console.print(tab)
    for n in result.notes:
        console.print(Text(f"note: {n}", style="dim"))
    if result.stored:
        console.print(Text(f"factors stored for {result.factor_key} in {result.stored}: later estimates of this "
                           f"model on {result.device} use them", style="green"))
    if result.host_stored:
        console.print(Text(f"host dispatch speed stored in {result.host_stored}: later estimates of every model on "
                           f"this machine use it (x{result.host_factor:.2f})", style="green"))
