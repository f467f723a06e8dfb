"""``advise launch --resume RUN``: start a finished or stopped run again from its last checkpoint.

The new run has the old run's plan, what its ranks ran (the record's ``target``, or a queued
run's ``submission.json``), its ``--max-steps`` and ``--checkpoint-every``: the ranks load the
checkpoint (``$CARDWISE_RESUME``, read by ``launcher.checkpoints``) and train until the same total
step count. Refused, exit 2, before anything starts: a run still running, a run without a
complete checkpoint, a run that succeeded with all its steps done, a run recorded before cardwise
kept targets, and flags that would change the plan (the plan is the old run's). What a launch of
the plan checks is checked again (``cli.launch_plan``: this machine's RAM, cores, packages and
GPUs, with ``--force`` as for a launch; a multi-node run resumes once per node, with
``--node-rank`` and ``--main-address``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from advisor.errors import UserError

# Flags that choose what to run; with --resume the old run decides them.
_CHOSEN = ("plan", "recipe", "data", "hf_model", "model", "hf_config", "module", "micro_batch", "grad_accum",
           "seq_len", "image_size", "precision", "optimizer", "compile", "channels_last", "grad_ckpt", "strategy",
           "lora_rank", "gpu", "gpus", "batch_size", "dataset_size", "epochs", "deadline", "base_lr", "base_batch",
           "processes", "warmup_steps", "num_workers", "max_steps", "checkpoint_every", "cpu", "dry_run", "emit",
           "probe", "save_plan", "script", "no_final_weights")


def _old_target(rec):
    from launcher.command import Target
    from launcher.service.submission import load_submission

    if rec.target:
        try:
            return Target.model_validate(rec.target)
        except ValueError:  # pydantic's ValidationError: the store is the user's file too
            raise UserError(f"run {rec.id}'s recorded target is not valid", fix="launch it again with the same flags") from None
    sub = load_submission(rec.run_dir)
    if sub is not None:
        return sub.target
    raise UserError(f"run {rec.id} does not record what its ranks ran (it predates --resume)",
                    fix="launch it again with the same flags and --checkpoint-every N")


def _count(env, name: str) -> int | None:
    """A positive step count the old run's command carried in its environment (None if absent or not one)."""
    value = env.get(name) if isinstance(env, dict) else None
    return int(value) if isinstance(value, str) and value.isdigit() and int(value) > 0 else None


def _started_from(env):
    """The checkpoint a resumed run was started from, if it is still a complete one (the store is the user's file)."""
    from launcher.checkpoints import damage
    from launcher.command import ENV_RESUME

    value = env.get(ENV_RESUME) if isinstance(env, dict) else None
    return Path(value) if isinstance(value, str) and value and damage(Path(value)) is None else None


def resume_run(args: argparse.Namespace, run_recorded) -> int:
    """Check the old run, then record and execute its continuation with ``run_recorded``."""
    given = ["--" + n.replace("_", "-") for n in _CHOSEN if getattr(args, n, None) not in (None, False, [])]
    if given:
        raise UserError(f"{', '.join(given)} cannot be combined with --resume (the resumed run keeps its plan)",
                        fix=f"advise launch --resume {args.resume} [--home DIR] [--json]")
    from cli.launch_plan import check_here, options_from_flags, require_gpus
    from launcher.checkpoints import newest_usable, read_meta
    from launcher.command import ENV_CHECKPOINT_EVERY, ENV_FINAL_WEIGHTS, ENV_MAX_STEPS, check_target, checkpoint_env
    from launcher.home import resolve_home
    from launcher.store import RunStore

    store = RunStore.open(resolve_home(args.home))
    old = store.get(args.resume)
    if not old.terminal:
        raise UserError(f"run {old.id} is {old.status}", fix=f"wait for it to end, or `advise cancel {old.id}` first")
    env = (old.command or {}).get("env") or {}
    # Its own newest checkpoint that checks out (files, sizes, hashes: before anything starts), else the
    # one it started from (a resumed run that ended before saving one).
    ckpt, damaged = newest_usable(old.run_dir)
    ckpt = ckpt or _started_from(env)
    if ckpt is None and damaged:
        raise UserError(f"run {old.id}'s checkpoints are all damaged: {'; '.join(damaged)}",
                        fix="launch it again with the same flags and --checkpoint-every N")
    if ckpt is None:
        raise UserError(f"run {old.id} has no checkpoint to resume from",
                        fix="launch with --checkpoint-every N to save one every N steps")
    for line in damaged:
        print(f"advise: note: {line}; resuming from {ckpt.name}, the one kept before it", file=sys.stderr)
    plan = old.plan_model()
    if plan is None:
        raise UserError(f"run {old.id} has no recorded plan", fix="launch it again with the same flags")
    max_steps, every = _count(env, ENV_MAX_STEPS), _count(env, ENV_CHECKPOINT_EVERY)
    steps = plan.schedule(max_steps).total_steps  # the steps the run was to train (advisor.schedule)
    if old.status == "succeeded" and steps and read_meta(ckpt)["step"] >= steps:
        # The ranks would load it, train nothing and save the same weights again. (A run that failed
        # after its last checkpoint may still resume: that saves the final weights it did not.)
        raise UserError(f"run {old.id} already trained all its {steps} steps (its last checkpoint is {ckpt.name})",
                        fix=f"nothing to resume ({ckpt} holds its final state); to train longer, launch a new run "
                            "with a larger --max-steps")
    target = _old_target(old)
    if target.kind == "script" and not Path(target.name).is_file():
        raise UserError(f"run {old.id}'s training script is gone", where=target.name,
                        fix="put it back where it was, or launch it again from its new place")
    check_target(target, plan)  # the data may have changed since: check it again
    # What a launch of this plan checks: the rendezvous flags (a multi-node run resumes once per node),
    # this machine's RAM, cores and packages (--force as for a launch), its GPUs.
    options = options_from_flags(args, plan)
    plan = check_here(plan, force=args.force)
    if not plan.cpu:
        require_gpus(plan)
    options = options.model_copy(update={
        "max_steps": max_steps, "extra_env": checkpoint_env(every, env.get(ENV_FINAL_WEIGHTS) != "0", resume=ckpt)})
    print(f"advise: resuming run {old.id} from {ckpt.name}", file=sys.stderr)
    return run_recorded(args, plan, target, options, resumed_from=old.id)
