"""Flags -> (plan, target, run options): the one path ``advise launch`` and ``advise submit`` share.

Both commands take the same flags (``submit`` adds its own to ``launch``'s parser); what they do
with the result differs: ``launch`` runs it in the foreground, ``submit`` queues it for the
service. Functions of an ``argparse.Namespace``, so they live in the CLI: nothing below it sees one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from advisor.request import CONFIG_PINS
from cli import flags

# Flags that shape a plan; with --plan they would be ignored, so giving them is an error.
_PLAN_FLAGS = ("model", "hf_config", "module", "input_shape", *CONFIG_PINS, "gpu",
               "gpus", "interconnect", "network", "cpus_per_gpu", "data_format", "loader", "batch_size", "dataset_size", "epochs", "deadline",
               "base_lr", "base_batch", "processes", "warmup_steps", "num_workers", "task")


def _given(args: argparse.Namespace, names) -> list[str]:
    return ["--" + n.replace("_", "-") for n in names if getattr(args, n, None) not in (None, False)]


def _model_from_hf_model(args: argparse.Namespace) -> None:
    """``--hf-model DIR`` without a model flag plans for ``DIR/config.json`` (the model it loads)."""
    hf_model = getattr(args, "hf_model", None)
    if hf_model is None or args.plan or args.model or args.hf_config or args.module:
        return
    from advisor.errors import UserError
    from launcher.recipes.chat_rows import check_model_dir

    local = Path(hf_model).expanduser()
    if not local.exists():
        raise UserError(f"--hf-model {hf_model} is not a local folder, so there is no config.json to plan for",
                        fix="add --hf-config PATH/config.json (or --model NAME) of the same model, or download it first")
    try:
        check_model_dir(local, needs_chat_template=False)
    except ValueError as exc:
        raise UserError(str(exc), fix="give a folder written by save_pretrained (config.json and a tokenizer)") from None
    args.hf_config = str(local / "config.json")


def plan_from_flags(args: argparse.Namespace):
    """(plan, notes): from --plan, from --cpu flags, or from the rules layer."""
    from advisor.errors import UserError
    from advisor.plan import Plan

    if getattr(args, "resume", None):  # `advise launch` resumes before planning; `advise submit` cannot
        raise UserError("--resume is for `advise launch` (or `advise submit --slurm`)",
                        fix=f"advise launch --resume {args.resume}, or advise submit --slurm --resume {args.resume}")
    _model_from_hf_model(args)
    if args.plan:
        extra = _given(args, _PLAN_FLAGS) + (["--nodes"] if args.nodes != 1 else [])
        if extra:
            raise UserError(f"{', '.join(extra)} would be ignored with --plan (the plan already decides them)",
                            fix="drop them, or plan again from flags without --plan")
        plan = Plan.load(args.plan)
        if args.cpu and not plan.cpu:
            raise UserError("--cpu given but the plan is for GPUs", where=str(args.plan), fix="drop --cpu, or plan again with --cpu")
        return plan, []
    if args.cpu:
        from launcher.cpu_plan import cpu_plan
        from rules.lr import recipe_for_request

        req = flags.request_from_namespace(args)
        return cpu_plan(req, recipe_for_request(req), processes=args.processes or 1,
                        max_steps=args.max_steps, warmup_steps=args.warmup_steps, num_workers=args.num_workers)
    if args.processes is not None:
        raise UserError("--processes is for --cpu runs", fix="add --cpu, or use --gpus N for GPU processes")
    if not args.gpu and not (args.dry_run or args.emit):
        require_gpus(None)  # nothing named and nothing detected: say how to launch instead
    from advisor.calibration import load_calibration
    from rules.api import plan

    from advisor.sources import as_script_runs_it

    req = flags.request_from_namespace(args)
    notes = []
    if args.script and not args.recipe:  # a user's script: plan for the code it most likely loads
        ref, note = as_script_runs_it(req.model)
        req, notes = req.model_copy(update={"model": ref}), [note] if note else []
    _measure_loader(args)
    calibration = load_calibration(flags.home_dir(args))
    if not getattr(args, "force", False):
        return plan(req, calibration=calibration), notes  # refuses what the estimate says will not fit
    from rules.api import recommend

    rec = recommend(req, calibration=calibration)  # the plan `advise` shows for the same flags
    if rec.recommendation.fits:
        return rec.plan, [*notes, "--force: the estimate says this plan fits; nothing to force"]
    m, hw = rec.estimate.memory, rec.estimate.hardware
    why = (f"the estimate says {rec.estimate.model.name} needs ~{m.device_gib:.1f} GiB per GPU (peak allocated "
           f"{m.peak_gib:.1f}: weights {m.weights_gib:.1f}, gradients {m.gradients_gib:.1f}, optimizer "
           f"{m.optimizer_gib:.1f}, activations {m.activations_gib:.1f}), more than the {hw.memory_gib:.1f} GiB of "
           f"one {hw.gpu}")
    return forced(rec.plan, why, runs_here=not (args.dry_run or args.emit)), notes


def _measure_loader(args: argparse.Namespace) -> None:
    """The image recipe's loader rate on this host, before it plans: its images under ``--data``, one core, a few
    seconds, once per host (cached in the home; ``advise probe --data DIR`` measures again)."""
    if args.recipe != "image-classification" or args.data is None or not Path(args.data).expanduser().is_dir():
        return
    import sys

    from launcher.loader_probe import cached_or_measured

    probe, now = cached_or_measured(flags.home_dir(args), Path(args.data).expanduser(), args.image_size or 224,
                                    progress=lambda text: print(f"advise: loader: {text}", file=sys.stderr, flush=True))
    if now:
        print(f"advise: note: loader rate on this host {probe.per_core:,.0f} images/s per DataLoader worker at "
              f"{probe.image_size} px (one worker on {probe.files} files under {probe.directory}, its batch hand-off "
              "included); stored for later plans here", file=sys.stderr)


def forced(plan, why: str, *, runs_here: bool = True):
    """``plan`` marked as launched against the estimate (recorded in the run's plan), and said so once
    (``runs_here`` False: --dry-run/--emit, which only show or write it)."""
    import sys

    then = "launching anyway" if runs_here else "planned anyway (--dry-run/--emit run nothing here)"
    print(f"advise: forced (--force): {why}; {then}, the OOM retry still halves the micro-batch if it "
          "runs out of memory (--max-oom-retries)", file=sys.stderr)
    return plan.model_copy(update={"forced": why})


def check_here(plan, *, force: bool = False, runs_here: bool = True):
    """``launcher.preflight.check_here`` for the commands: ``plan``, or the plan marked forced (``--force``;
    ``runs_here`` False for --dry-run, which checks the same but starts nothing)."""
    import sys

    from launcher.preflight import check_here as check
    from launcher.shm_check import check_shm, shm_space

    why = check(plan, force=force)
    note = check_shm(plan, shm_space())  # refused above when it cannot fit; said here when it is close
    if note:
        print(f"advise: warning: {note}", file=sys.stderr)
    return forced(plan, why, runs_here=runs_here) if why else plan


# What --data names for each recipe that reads data (a file, or a folder of class folders).
_DATA_KIND = {"text-classification": ("file", "a JSONL or CSV file of (text, label) rows"),
              "causal-lm": ("file", "a JSONL file of messages / prompt+response / text examples"),
              "image-classification": ("dir", "a folder with one sub-folder of images per class")}


def target_from_flags(args: argparse.Namespace, plan):
    """What every rank runs (``--recipe`` or ``-- SCRIPT``), checked against the plan."""
    from advisor.errors import UserError
    from launcher.command import Target, check_target

    recipe_args: list[str] = []
    if args.data is not None:
        if args.recipe not in _DATA_KIND:
            raise UserError(f"--data is for --recipe {', '.join(_DATA_KIND)}", fix="drop --data, or add one of those recipes")
        kind, what = _DATA_KIND[args.recipe]
        found = args.data.is_dir() if kind == "dir" else args.data.is_file()
        if not found:
            raise UserError(f"data {'folder' if kind == 'dir' else 'file'} not found", where=str(args.data),
                            fix=f"give {what}")
        recipe_args = ["--data", str(args.data.expanduser().absolute())]
    hf_model = getattr(args, "hf_model", None)
    if hf_model is not None:
        if args.recipe != "causal-lm":
            raise UserError("--hf-model is for --recipe causal-lm", fix="drop --hf-model, or add --recipe causal-lm")
        local = Path(hf_model).expanduser()
        recipe_args += ["--hf-model", str(local.absolute()) if local.exists() else hf_model]
    target = Target.from_cli(args.recipe, list(args.script), recipe_args)
    check_target(target, plan)
    return target


def options_from_flags(args: argparse.Namespace, plan):
    """How to execute the plan (retries, steps, multi-node rendezvous); refuses rendezvous flags that do not fit."""
    from advisor.errors import UserError
    from launcher.command import checkpoint_env
    from launcher.runner import RunOptions

    if plan.nodes > 1:
        if args.node_rank is None or not args.main_address:
            raise UserError(f"a {plan.nodes}-node launch needs this machine's rank and node 0's address",
                            fix="add --node-rank R --main-address HOST [--main-port P] (run once per node)")
        if args.node_rank >= plan.nodes:  # else the attempt's Accelerate config refuses it, after the run is recorded
            raise UserError(f"--node-rank {args.node_rank} is outside 0..{plan.nodes - 1}",
                            fix=f"use 0 to {plan.nodes - 1}, one per node (0 on the node at --main-address)")
    elif args.node_rank not in (None, 0) or args.main_address:
        raise UserError("--node-rank/--main-address are for multi-node launches", fix="add --nodes N, or drop them")
    env = checkpoint_env(getattr(args, "checkpoint_every", None), not getattr(args, "no_final_weights", False))
    return RunOptions(max_oom_retries=args.max_oom_retries, max_steps=args.max_steps, machine_rank=args.node_rank or 0,
                      main_address=args.main_address, main_port=args.main_port, extra_env=env)


def require_gpus(plan) -> None:
    """A GPU plan needs GPUs here (``plan`` None: at least one): say so before Accelerate fails in every rank."""
    from advisor.errors import UserError
    from advisor.hardware import detect_machine

    machine = detect_machine()
    need = plan.processes_per_node if plan is not None else 1
    if len(machine.gpus) < need:
        if plan is None:
            raise UserError(f"no GPU detected on this machine ({machine.nvml_error or 'NVML reports 0 GPUs'})",
                            fix="train on CPU processes with --cpu --processes N, or plan for a GPU with --gpu NAME "
                                "and --dry-run / --emit slurm to see or submit the job")
        have = f"{len(machine.gpus)} GPU(s)" if machine.gpus else f"no GPU ({machine.nvml_error or 'NVML reports 0'})"
        raise UserError(f"the plan needs {plan.processes_per_node} GPU(s) per node, this machine has {have}",
                        fix="run it on the GPU machine, see it with --dry-run, write a cluster job with --emit slurm, "
                            "or train on CPU processes with --cpu --processes N")
