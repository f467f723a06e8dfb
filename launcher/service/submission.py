"""Queueing a run: ``advise submit`` writes a record (``queued``) and ``submission.json`` beside it.

The submission says what the plan does not: what to run (the target), how (run options), and
what it needs from the placer (devices, memory per GPU). A run belongs to the service exactly
when its run directory holds this file; foreground ``advise launch`` records never do.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.errors import UserError
from advisor.paths import write_private_atomic
from launcher import placement
from launcher.command import Target
from launcher.runner import RunOptions
from launcher.store import RunRecord, RunStore

SUBMISSION_NAME = "submission.json"


class Submission(BaseModel):
    """What ``advise submit`` decided, next to the plan in the record: how to run it, what it needs."""

    model_config = ConfigDict(extra="forbid")

    version: int = 1
    target: Target
    options: RunOptions = Field(description="max steps, OOM retries, pinned port; the service adds GPUs and env")
    devices: int = Field(ge=1, description="GPUs or CPU slots: one per rank")
    kind: placement.Kind
    need_gib: float | None = Field(None, description="memory per GPU the plan needs; None = unknown (GPU must be idle)")
    need_source: Literal["estimate", "flag", "none"] = "none"
    submitted: float


def submission_path(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / SUBMISSION_NAME


def load_submission(run_dir: str | os.PathLike | None) -> Submission | None:
    """The run's submission, None when it has none (not a service run). Raises UserError if unreadable."""
    if not run_dir:
        return None
    path = submission_path(run_dir)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"cannot read the submission: {exc.strerror}", where=str(path)) from None
    try:
        return Submission.model_validate_json(text)
    except Exception as exc:
        raise UserError(f"not a valid submission: {str(exc).splitlines()[0]}", where=str(path),
                        fix="resubmit the run with `advise submit`") from None


def is_service_run(rec: RunRecord) -> bool:
    return bool(rec.run_dir) and submission_path(rec.run_dir).is_file()


def memory_need_gib(plan) -> tuple[float | None, list[str]]:
    """Memory per GPU the plan needs (``estimate(...).memory.device_gib``), with notes; None if unknown."""
    if plan.cpu:
        return None, []
    if not plan.gpu:
        return None, ["the plan names no GPU kind: no memory estimate, so the service waits for idle GPUs"]
    try:
        from advisor.estimate import estimate
        from advisor.gpus import get_gpu
        from advisor.hardware import HardwareSpec

        from advisor.sources import resolve_model

        spec = resolve_model(plan.model)  # the same code the plan was estimated for (implementation, loss)
        hw = HardwareSpec(gpu=get_gpu(plan.gpu), gpus_per_node=plan.processes_per_node, nodes=plan.nodes)
        need = estimate(spec, plan.config, hw).memory.device_gib
    except Exception as exc:  # the run can still be placed: on idle GPUs
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        return None, [f"no memory estimate for this plan ({first}): the service waits for idle GPUs (--need-gib to say)"]
    return need, []


_RESERVED_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")  # the service's to set: it places the run
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def submitter_env(names: list[str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """``NAME=value`` from the submitter's environment for each name it asked to pass on."""
    environ = os.environ if environ is None else environ
    out = {}
    for name in names:
        if not _ENV_NAME.fullmatch(name):
            raise UserError(f"--env {name!r} is not an environment variable name", fix="--env HF_HOME (a name, no value)")
        if name in _RESERVED_ENV or name.startswith("CARDWISE_"):
            raise UserError(f"--env {name}: the service sets this variable itself", fix=f"drop --env {name}")
        if name not in environ:
            raise UserError(f"--env {name}: not set in this shell", fix=f"export {name}=... first, or drop --env {name}")
        out[name] = environ[name]
    return out


def _recorded(store: RunStore, rid: str) -> bool:
    """Whether the insert of ``rid`` committed: a Ctrl-C can land after the commit, before ``create`` returns."""
    try:
        return store.get(rid).id == rid
    except UserError:
        return False


def submit(home: Path, plan, target: Target, options: RunOptions, *, label: str | None = None,
           need_gib: float | None = None, cwd: str | None = None,
           env_names: list[str] = ()) -> tuple[RunRecord, list[str]]:
    """Validate and queue a run; return its record and notes. The plan is final from here on.

    The run will start in ``cwd`` (default: the submitter's working directory) with the
    submitter's values of ``env_names`` added to the service's environment (docs/service.md)."""
    from launcher.accelerate_config import accelerate_config
    from launcher.home import make_run_dir
    from launcher.home import run_dir as run_dir_of
    from launcher.store import new_run_id

    if plan.nodes > 1:
        raise UserError(f"the queue service runs one-machine plans; this one has {plan.nodes} nodes",
                        fix="launch multi-node plans with `advise launch` on every node, or `--emit slurm`")
    if options.main_address or options.machine_rank:
        raise UserError("--node-rank/--main-address are for multi-node launches", fix="drop them for `advise submit`")
    accelerate_config(plan)  # the same checks the launch would make, now rather than in the queue
    options = options.model_copy(update={"cwd": cwd or os.getcwd(),
                                         "extra_env": {**options.extra_env, **submitter_env(list(env_names))}})
    notes: list[str] = []
    source = "none"
    if plan.cpu:
        need = None
    elif need_gib is not None:
        need, source = need_gib, "flag"
    else:
        need, notes = memory_need_gib(plan)
        source = "estimate" if need is not None else "none"
    sub = Submission(target=target, options=options, devices=plan.processes_per_node,
                     kind="cpu" if plan.cpu else "gpu", need_gib=need, need_source=source, submitted=time.time())
    store = RunStore.open(home)
    for _ in range(16):
        rid = new_run_id()
        if not run_dir_of(home, rid).exists():
            break
    rdir = make_run_dir(home, rid)
    try:
        write_private_atomic(rdir / "plan.json", plan.model_dump_json(indent=2) + "\n")
        # The record appears last: a service never sees a queued record without its submission.
        write_private_atomic(submission_path(rdir), sub.model_dump_json(indent=2) + "\n")
        rec = store.create(run_id=rid, label=label or f"{plan.model.label()} · {target.label()}",
                           plan=plan.model_dump(mode="json"), run_dir=rdir)
    except BaseException as exc:  # not queued (store unwritable, disk full, Ctrl-C): no folder without a record
        if not _recorded(store, rid):
            shutil.rmtree(rdir, ignore_errors=True)
        elif isinstance(exc, KeyboardInterrupt):  # it landed after the insert committed: the run IS queued
            print(f"advise: note: run {rid} was queued before the interrupt; `advise cancel {rid}` withdraws it",
                  file=sys.stderr)
        raise
    return rec, notes

