"""``advise launch``: turn a plan into a running, recorded Accelerate job.

    advise launch --model gpt2 --batch-size 32 -- train.py --lr {lr} --bs {micro_batch}
    advise launch --plan plan.json --recipe synthetic --max-steps 100
    advise launch --cpu --processes 2 --model mini-transformer --recipe synthetic --dry-run

The plan comes from ``--plan``, from the flags with ``--cpu`` (launcher.cpu_plan: arithmetic
only), or from the rules layer for GPUs (``rules.api.plan``). Then: ``--dry-run``
prints the Accelerate config and command, ``--emit slurm`` prints an sbatch script, and
otherwise the run is recorded in the store and executed in the foreground (launcher.runner);
Ctrl-C stops every rank and records ``cancelled`` (a second Ctrl-C skips the grace period).
Exit status: 0 succeeded, 1 failed, 130 cancelled, 2 a mistake in the flags.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cli import flags
from cli.launch_plan import check_here, options_from_flags, plan_from_flags, require_gpus, target_from_flags
from launcher.oom import DEFAULT_MAX_RETRIES  # advisor.plan only: cheap at parse time
from launcher.recipes import RECIPES  # a dict in an otherwise empty package: cheap at parse time


def add_parser(parser: argparse.ArgumentParser, name: str) -> None:
    flags.add_model_flags(parser)
    flags.add_config_flags(parser)
    flags.add_hardware_flags(parser)
    flags.add_workload_flags(parser)
    g = parser.add_argument_group("launch")
    # `advise submit` shares this parser but always refuses --dry-run, --emit, --probe and the
    # rendezvous flags (the service runs one-machine plans; Slurm places the ranks): they stay parsed there, so the
    # refusal can say what to do instead, and out of its --help.
    submit = name == "submit"

    def shown(text: str) -> str:
        return argparse.SUPPRESS if submit else text

    g.add_argument("--plan", type=Path, metavar="plan.json", help="launch a saved plan instead of planning from flags")
    g.add_argument("--recipe", metavar="NAME", help=f"built-in training loop: {', '.join(RECIPES)}")
    g.add_argument("--data", type=Path, metavar="PATH", help="the recipe's data: (text, label) JSONL/CSV for "
                   "text-classification, examples JSONL for causal-lm, a class-per-folder directory for image-classification")
    g.add_argument("--hf-model", metavar="DIR", help="--recipe causal-lm: the model and tokenizer folder (or a Hub id); "
                   "plans for DIR/config.json unless a model flag is given")
    g.add_argument("--checkpoint-every", type=flags.positive_int, metavar="N",
                   help="save the training state every N optimizer steps and at the end (resume with --resume)")
    g.add_argument("--no-final-weights", action="store_true",
                   help="save no final weights at the end (benchmarks, throwaway runs: an 8B model is 32 GB)")
    g.add_argument("--resume", metavar="RUN", help="with --slurm: submit run RUN again from its last checkpoint, same "
                   "plan and steps" if submit else "continue run RUN from its last checkpoint, same plan and steps")
    g.add_argument("--max-steps", type=flags.positive_int, metavar="N", help="stop after N optimizer steps")
    g.add_argument("--warmup-steps", type=flags.nonneg_int, metavar="N", help="LR warmup steps (--cpu plans)")
    g.add_argument("--num-workers", type=flags.worker_count, metavar="N", help="DataLoader workers per rank (--cpu plans)")
    g.add_argument("--cpu", action="store_true", help="run the ranks on CPU over gloo (no GPU needed)")
    g.add_argument("--processes", type=flags.positive_int, metavar="N", help="CPU processes per node (with --cpu)")
    g.add_argument("--node-rank", type=flags.nonneg_int, metavar="R", help=shown("this machine's rank (multi-node)"))
    g.add_argument("--main-address", metavar="HOST", help=shown("address of node 0, reachable from every node"))
    g.add_argument("--main-port", type=flags.port, metavar="P", help="rendezvous port (default: free port; 29500 multi-node)")
    g.add_argument("--max-oom-retries", type=flags.nonneg_int, default=DEFAULT_MAX_RETRIES, metavar="N",
                   help=f"retries with half the micro-batch after a CUDA OOM (default {DEFAULT_MAX_RETRIES})")
    g.add_argument("--force", action="store_true",
                   help="launch the pinned plan even if the estimate says it will not fit (the OOM retry still "
                        "halves the micro-batch when it runs out of memory)")
    g.add_argument("--dry-run", action="store_true", help=shown("print the Accelerate config and command; run nothing"))
    g.add_argument("--emit", choices=("slurm",), help=shown("print an sbatch script for the plan instead of running it"))
    g.add_argument("--save-plan", type=Path, metavar="plan.json", help="also write the plan to this file")
    g.add_argument("--probe", action="store_true",
                   help=shown("first run a few steps of the per-GPU configuration (advise probe), print them beside "
                              "the estimate, store the factors, then launch"))
    from cli.slurm_cmd import add_flags as add_slurm_flags

    add_slurm_flags(parser, submit=submit)
    if not submit:
        from cli.probe_cmd import add_probe_flags

        add_probe_flags(parser)
    flags.add_home_flag(parser)
    flags.add_json_flag(parser)
    parser.add_argument("script", nargs="*", metavar="-- SCRIPT ARGS",
                        help="your training script and its arguments; {lr} {micro_batch} {grad_accum} "
                             "{global_batch} {precision} {warmup_steps} are filled from the plan")


def _dry_run(args, plan, target, options, notes) -> int:
    from launcher.accelerate_config import accelerate_config, to_yaml
    from launcher.command import build_launch_spec
    from launcher.home import resolve_home, run_dir
    from launcher.store import new_run_id

    rdir = run_dir(resolve_home(args.home), new_run_id())
    adir = rdir / "attempt-1"
    cfg = accelerate_config(plan, machine_rank=options.machine_rank, main_address=options.main_address,
                            main_port=options.main_port)
    spec = build_launch_spec(plan, target, config_path=adir / "accelerate_config.yaml", plan_path=adir / "plan.json",
                             run_dir=rdir, log_dir=adir / "ranks", main_port=options.main_port if plan.nodes == 1 else None,
                             max_steps=options.max_steps, extra_env=options.extra_env)
    if args.json:
        print(json.dumps({"plan": plan.model_dump(mode="json"), "accelerate_config": cfg,
                          "accelerate_config_yaml": to_yaml(cfg, plan), "command": spec.model_dump(),
                          "run_dir": str(rdir), "notes": notes}, indent=2))
        return 0
    print(f"# accelerate_config.yaml (would be written to {adir})")
    print(to_yaml(cfg, plan).rstrip())
    print("\n# command (argv; the environment variables are added to yours)")
    print(spec.shell_line())
    return 0


def _summary(rec) -> str:
    m = rec.metrics
    line = f"run {rec.id} {rec.status}"
    if rec.started and rec.ended:
        line += f" in {rec.ended - rec.started:.1f} s"
    if m is not None:
        line += f": {m.steps} steps on {m.ranks} rank(s)"
        if m.first_loss is not None and m.last_loss is not None:
            line += f", loss {m.first_loss:.4g} -> {m.last_loss:.4g}"
        if m.samples_per_s:
            line += f", {m.samples_per_s:.1f} samples/s"
    if len(rec.attempts) > 1:
        line += "; attempts " + ", ".join(f"{a.micro_batch}x{a.grad_accum} {a.status}" for a in rec.attempts)
        for a in rec.attempts:
            if a.note and a.global_batch and a.global_batch != rec.attempts[0].global_batch:
                line += f"\n  attempt {a.n}: {a.note}"  # the OOM retry changed the global batch
    if m is not None and m.bad_samples:
        line += f"\n  data: skipped {m.bad_samples} unreadable sample(s) (--bad-samples skip; the ranks' logs name them)"
    bound = m.data_bound if m is not None else None
    if bound is not None:  # launcher.data_wait's check
        line += f"\n  data: {bound.message}" + (f"\n  fix: {bound.fix}" if bound.fix else "")
    if rec.status != "succeeded" and rec.error:
        line += f"\n  error: {rec.error}"
    return line + f"\n  run dir: {rec.run_dir}"


def _probe_first(args: argparse.Namespace, plan) -> int | None:
    """``--probe``: measure the plan's per-GPU configuration before launching it; an exit status to stop with, or None."""
    from rich.console import Console

    from advisor.errors import UserError
    from advisor.setup import shrinking
    from cli.probe_cmd import render, run_probe

    result = run_probe(args, plan, None)
    render(result, Console(stderr=True) if args.json else None)  # stdout stays the run's JSON
    if result.status == "oom":
        raise UserError(f"the probe ran out of GPU memory at every micro-batch down to {result.config.micro_batch}",
                        fix=f"make it smaller per GPU: --grad-ckpt, {', '.join(s.flag for s in shrinking())}, a "
                            "shorter --seq-len/--image-size, or --strategy fsdp over more GPUs (then drop --probe)")
    if result.status == "cancelled":
        return 130
    if result.status != "ok":
        print(f"advise: the probe failed, nothing launched: {result.error}", file=sys.stderr)
        return 1
    if len(result.attempts) > 1:
        print(f"advise: note: micro-batch {plan.config.micro_batch} ran out of memory in the probe; the launch retries "
              f"with half the micro-batch on OOM (or pin --micro-batch {result.config.micro_batch})", file=sys.stderr)
    return None


def run(args: argparse.Namespace) -> int:
    if args.probe and (args.dry_run or args.emit):
        from advisor.errors import UserError

        raise UserError("--probe runs the model, --dry-run/--emit run nothing", fix="drop --probe, or drop --dry-run/--emit")
    if not args.emit:
        from cli.slurm_cmd import refuse_without_slurm

        refuse_without_slurm(args, "--emit slurm")
    if args.resume:
        from cli.launch_resume import resume_run

        return resume_run(args, _run_recorded)
    flags.check_output_file(args.save_plan, "--save-plan", "plan.json")
    plan, notes = plan_from_flags(args)
    target = target_from_flags(args, plan)
    if not args.emit and (plan.cpu or not args.dry_run or _gpus_here(plan)):
        # Before anything is recorded or started. A dry run checks what the launch would check when it
        # would run here (CPU processes, or the GPUs it needs are here); else it shows a plan for elsewhere.
        plan = check_here(plan, force=args.force, runs_here=not args.dry_run)
    # Slurm assigns node ranks and the main address: no --node-rank needed. Refused flags write no plan file.
    options = None if args.emit else options_from_flags(args, plan)
    for note in notes:
        print(f"advise: note: {note}", file=sys.stderr)
    if args.save_plan:
        plan.save(args.save_plan)
    if args.emit == "slurm":
        from cli.slurm_cmd import request_from_flags
        from launcher.slurm import script_for

        request, note = request_from_flags(args, plan)
        if note:
            print(f"advise: note: {note}", file=sys.stderr)
        print(script_for(plan, target, request), end="")  # what `advise submit --slurm` submits
        return 0
    if args.dry_run:
        return _dry_run(args, plan, target, options, notes)
    if not plan.cpu:
        require_gpus(plan)
    if args.probe:
        stop = _probe_first(args, plan)
        if stop is not None:
            return stop
    return _run_recorded(args, plan, target, options)


def _gpus_here(plan) -> bool:
    from advisor.hardware import detect_machine

    return len(detect_machine().gpus) >= plan.processes_per_node


def _run_recorded(args: argparse.Namespace, plan, target, options, resumed_from: str | None = None) -> int:
    """Record the run, execute it in the foreground, print its summary; the exit status."""
    import threading

    from launcher.home import new_run, resolve_home
    from launcher.runner import execute, forward_signals
    from launcher.store import RunStore

    home = resolve_home(args.home)
    store = RunStore.open(home)
    cancel, launches = threading.Event(), []
    # Signals are caught before the record exists: a Ctrl-C between recording the run and starting it
    # cancels the record (execute sees the event) instead of leaving a queued run a service would claim.
    with forward_signals(cancel, force=lambda: launches and launches[-1].kill_now()):
        rec, rdir = new_run(store, home, plan, target, resumed_from=resumed_from)
        print(f"advise: run {rec.id}: {plan.world_size} rank(s), logs in {rdir}", file=sys.stderr)
        final = execute(store, rec.id, plan, target, rdir, options, cancel=cancel,
                        echo=None if args.json else sys.stdout, on_launch=launches.append)
    if final.status == "cancelled" and launches:
        from launcher.graceful_stop import describe, stopped

        info = stopped(launches[-1].log_path.parent)
        if info is not None and info.get("checkpoint"):  # the ranks saved the step they stopped at
            print(f"advise: run {final.id} {describe(info)}; go on with: advise launch --resume {final.id}",
                  file=sys.stderr)
    if args.json:
        print(final.model_dump_json(indent=2))
    else:
        print(_summary(final))
    return {"succeeded": 0, "cancelled": 130}.get(final.status, 1)
