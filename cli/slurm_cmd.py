"""Slurm flags of ``advise launch --emit slurm`` and ``advise submit --slurm``, and the submit itself.

    advise launch --cpu --processes 2 --model mini-transformer --recipe synthetic --emit slurm
    advise submit --slurm --cpu --processes 2 --model mini-transformer --recipe synthetic --max-steps 50
    advise submit --slurm --gpu H100 --gpus 8 --nodes 2 --model llama3-8b --recipe causal-lm ... --partition gpu --qos high
    advise submit --slurm --resume 3fa9c2d1

Both commands build the job with ``request_from_flags`` and ``launcher.slurm.script_for``: what
``--emit slurm`` prints is what ``submit --slurm`` hands to ``sbatch`` (launcher/slurm_jobs.py
checks the partition, records the run and submits). The time limit is ``--time``, else the
estimated time to train with its margin (``time_limit``), else the partition's default.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

# The estimate's time to train, times this, plus startup, is the job's time limit: the README's
# accuracy table has samples/s off by up to 59.5% on holdout rows (time x1.6); x2 leaves room.
TIME_MARGIN = 2.0
STARTUP_MIN = 10  # import, rendezvous, data loading and the final checkpoint; minutes


def add_flags(parser: argparse.ArgumentParser, *, submit: bool) -> None:
    g = parser.add_argument_group("slurm (with --slurm)" if submit else "slurm (with --emit slurm)")
    if submit:
        g.add_argument("--slurm", action="store_true",
                       help="hand the run to Slurm (sbatch) instead of this machine's queue service")
    g.add_argument("--time", metavar="LIMIT", help="the job's time limit (sbatch --time, e.g. 2:00:00; default: the "
                   "estimated time to train x2 + 10 min when dataset size and epochs are known, else the partition's)")
    g.add_argument("--partition", metavar="NAME", help="sbatch --partition (default: the cluster's default)")
    g.add_argument("--account", metavar="NAME", help="sbatch --account")
    g.add_argument("--qos", metavar="NAME", help="sbatch --qos")
    g.add_argument("--gres", metavar="SPEC", help="sbatch --gres instead of --gpus-per-node (e.g. gpu:a100:4)")


def _sbatch_time(hours: float) -> str:
    total = math.ceil(hours * TIME_MARGIN * 60) + STARTUP_MIN
    days, rest = divmod(total, 24 * 60)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00" if days else f"{rest // 60}:{rest % 60:02d}:00"


def time_limit(args: argparse.Namespace, plan) -> tuple[str | None, str | None]:
    """(sbatch --time, a note saying where it came from)."""
    if args.time:
        return args.time, None
    if plan.cpu or args.plan or not (args.dataset_size and args.epochs):
        return None, ("no time estimate for this plan (--cpu, --plan, or no --dataset-size/--epochs): the "
                      "partition's default time limit applies; --time sets one")
    from advisor.calibration import load_calibration
    from cli import flags
    from rules.api import recommend

    est = recommend(flags.request_from_namespace(args), calibration=load_calibration(flags.home_dir(args))).estimate
    if est.time_to_train_h is None:
        return None, "no time estimate for this plan: the partition's default time limit applies; --time sets one"
    limit = _sbatch_time(est.time_to_train_h)
    return limit, f"time limit {limit}: the estimated {est.time_to_train_h:.2f} h to train x{TIME_MARGIN:g} + {STARTUP_MIN} min"


def request_from_flags(args: argparse.Namespace, plan):
    """The ``SlurmRequest`` of these flags (and a note on its time limit, or None)."""
    from launcher.command import checkpoint_env
    from launcher.slurm import SlurmRequest

    limit, note = time_limit(args, plan)
    env = checkpoint_env(getattr(args, "checkpoint_every", None), not getattr(args, "no_final_weights", False))
    return SlurmRequest(time_limit=limit, partition=args.partition, account=args.account, qos=args.qos, gres=args.gres,
                        main_port=args.main_port, max_steps=args.max_steps, extra_env=env), note


def refuse_without_slurm(args: argparse.Namespace, needs: str) -> None:
    """The Slurm flags without ``needs`` (``--slurm``, ``--emit slurm``) would be ignored: refused."""
    from advisor.errors import UserError

    given = [f for f in ("time", "partition", "account", "qos", "gres") if getattr(args, f, None)]
    if given:
        raise UserError(f"{', '.join('--' + f for f in given)} {'is an sbatch flag' if len(given) == 1 else 'are sbatch flags'}"
                        f" (for {needs})", fix=f"add {needs}, or drop them")


def submit(args: argparse.Namespace) -> int:
    """``advise submit --slurm``: plan, check, record, sbatch; print the run and its job id."""
    from advisor.errors import UserError
    from cli import flags
    from cli.launch_plan import plan_from_flags, target_from_flags
    from launcher.home import resolve_home
    from launcher.slurm_jobs import submit_run

    for flag, given in (("--dry-run", args.dry_run), ("--emit", args.emit), ("--probe", args.probe),
                        ("--node-rank", args.node_rank is not None), ("--main-address", args.main_address)):
        if given:
            raise UserError(f"{flag} is not for `advise submit --slurm` (Slurm places the ranks)",
                            fix="`advise launch --emit slurm` prints the job without submitting it" if flag in
                            ("--dry-run", "--emit") else f"drop {flag}")
    if args.resume:
        return _resume(args)
    flags.check_output_file(args.save_plan, "--save-plan", "plan.json")
    plan, notes = plan_from_flags(args)
    target = target_from_flags(args, plan)
    request, note = request_from_flags(args, plan)
    rec = submit_run(resolve_home(args.home), plan, target, request)
    if args.save_plan:
        plan.save(args.save_plan)
    return _report(args, rec, [*notes, *([note] if note else [])])


def _report(args, rec, notes) -> int:
    from launcher.slurm_jobs import SlurmJob

    job = SlurmJob.model_validate(rec.slurm)
    for note in notes:
        print(f"advise: note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps({"id": rec.id, "status": rec.status, "run_dir": rec.run_dir, "slurm_job": job.job_id,
                          "output": job.output, "script": job.script}))
    else:
        print(f"submitted run {rec.id} as Slurm job {job.job_id} (partition {job.partition}): {rec.label}\n"
              f"  script {job.script}\n  `advise runs` shows Slurm's state, `advise logs {rec.id} -f` follows its output")
    return 0


def _resume(args: argparse.Namespace) -> int:
    """``--slurm --resume RUN``: the old run's plan and target again, its last checkpoint loaded."""
    from advisor.errors import UserError
    from cli.launch_resume import _CHOSEN, _count, _old_target, _started_from
    from launcher.checkpoints import latest
    from launcher.command import ENV_CHECKPOINT_EVERY, ENV_FINAL_WEIGHTS, ENV_MAX_STEPS, check_target, checkpoint_env
    from launcher.home import resolve_home
    from launcher.slurm import SlurmRequest
    from launcher.slurm_jobs import submit_run
    from launcher.store import RunStore

    given = ["--" + n.replace("_", "-") for n in _CHOSEN if getattr(args, n, None) not in (None, False, [])]
    if given:
        raise UserError(f"{', '.join(given)} cannot be combined with --resume (the resumed run keeps its plan)",
                        fix=f"advise submit --slurm --resume {args.resume} [--time LIMIT] [--partition NAME]")
    home = resolve_home(args.home)
    old = RunStore.open(home).get(args.resume)
    if not old.terminal:
        raise UserError(f"run {old.id} is {old.status}", fix=f"wait for it to end, or `advise cancel {old.id}` first")
    env = (old.command or {}).get("env") or {}
    ckpt = latest(old.run_dir) or _started_from(env)
    if ckpt is None:
        raise UserError(f"run {old.id} has no checkpoint to resume from",
                        fix="submit with --checkpoint-every N to save one every N steps")
    plan = old.plan_model()
    if plan is None:
        raise UserError(f"run {old.id} has no recorded plan", fix="submit it again with the same flags")
    target = _old_target(old)
    check_target(target, plan)
    old_job = (old.slurm or {})
    request = SlurmRequest(time_limit=args.time or old_job.get("time_limit"), partition=args.partition or
                           old_job.get("partition"), account=args.account, qos=args.qos, gres=args.gres,
                           main_port=args.main_port, max_steps=_count(env, ENV_MAX_STEPS),
                           extra_env=checkpoint_env(_count(env, ENV_CHECKPOINT_EVERY),
                                                    env.get(ENV_FINAL_WEIGHTS) != "0", resume=ckpt))
    print(f"advise: resuming run {old.id} from {ckpt.name}", file=sys.stderr)
    rec = submit_run(home, plan, target, request, resumed_from=old.id)
    return _report(args, rec, [])
