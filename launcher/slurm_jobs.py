"""Runs handed to Slurm (``advise submit --slurm``): checked against the partition, submitted with
``sbatch --parsable``, and their state read back from Slurm, never guessed.

Before anything is recorded or submitted (``check_partition``): ``sbatch`` must be on PATH, the
partition must exist (``sinfo``), its nodes must have the GPUs and CPUs one node of the plan asks
for, and the time limit must fit the partition's. Each refusal is one line with the fix.

State (``refresh``): ``scontrol show job`` first (pending with its reason, running, the final
state of a job that ended within the cluster's ``MinJobAge``, the restart count of a requeued
job), then ``sacct`` (a cluster with accounting storage remembers older jobs). A cluster without
slurmdbd answers ``sacct`` with "accounting storage is disabled"; there a job ended longer ago than
MinJobAge is known to nobody, and the record says so instead of inventing an outcome. Slurm's
state maps onto the run's status (``STATE_STATUS``) and stays in the record (``SlurmJob.state``,
``reason``), so ``advise runs`` shows ``failed (TIMEOUT)`` rather than a bare ``failed``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from pydantic import BaseModel, Field

from advisor.errors import UserError
from launcher.records import TERMINAL, MetricsSummary, RunRecord
from launcher.run_logs import exit_text, failing_rank, read_tail

SCRIPT_NAME = "job.sbatch"
OUTPUT_PATTERN = "slurm-%j.out"  # in the run directory: `advise logs` prints it
_TIMEOUT_S = 30  # one Slurm client call; slurmctld answers in milliseconds unless it is down

# Slurm's job states (squeue(1) "JOB STATE CODES") -> the run's status.
STATE_STATUS = {
    "PENDING": "queued", "REQUEUED": "queued", "REQUEUE_HOLD": "queued", "REQUEUE_FED": "queued",
    "RESV_DEL_HOLD": "queued", "CONFIGURING": "running", "RUNNING": "running", "COMPLETING": "running",
    "SUSPENDED": "running", "RESIZING": "running", "SIGNALING": "running", "STAGE_OUT": "running",
    "STOPPED": "running", "COMPLETED": "succeeded", "CANCELLED": "cancelled", "FAILED": "failed",
    "TIMEOUT": "failed", "NODE_FAIL": "failed", "OUT_OF_MEMORY": "failed", "BOOT_FAIL": "failed",
    "DEADLINE": "failed", "PREEMPTED": "failed", "REVOKED": "cancelled", "SPECIAL_EXIT": "failed",
}
_WHY = {
    "TIMEOUT": "killed by Slurm at its time limit ({limit}); give a longer --time, or checkpoint and --resume",
    "NODE_FAIL": "a node of the job failed; --resume continues from the last checkpoint",
    "OUT_OF_MEMORY": "killed by Slurm's memory limit; ask for more with the partition's --mem default raised",
    "PREEMPTED": "preempted by a higher-priority job; --resume continues from the last checkpoint",
    "BOOT_FAIL": "a node failed to boot", "DEADLINE": "reached its deadline",
    "FAILED": "the job exited with {exit}", "CANCELLED": "cancelled in Slurm (scancel)",
}


class SlurmJob(BaseModel):
    """The record's ``slurm`` field: the job and its state as Slurm last reported it."""

    job_id: str
    state: str = Field("PENDING", description="Slurm's job state (squeue's %T)")
    reason: str | None = Field(None, description="why it is pending, or why it ended (Slurm's Reason)")
    restarts: int = Field(0, description="times Slurm requeued it (preemption, node failure, scontrol requeue)")
    exit: str | None = Field(None, description="Slurm's ExitCode, 'code:signal'")
    time_limit: str | None = None
    partition: str | None = None
    output: str | None = Field(None, description="the batch script's output file (advise logs)")
    script: str | None = Field(None, description="the submitted sbatch script")
    start: float | None = Field(None, description="when it started running (Slurm's StartTime), epoch seconds")
    end: float | None = Field(None, description="when it ended (Slurm's EndTime), epoch seconds")
    seen: float | None = Field(None, description="when Slurm last reported on the job")
    lost: bool = Field(False, description="Slurm no longer knows the job and keeps no accounting")


class Partition(BaseModel):
    name: str
    default: bool = False
    max_time_min: int | None = Field(None, description="None: unlimited")
    cpus_per_node: int
    gpus_per_node: int = 0
    nodes: int


# ------------------------------------------------------------------ checks before submitting
def require_sbatch() -> str:
    path = shutil.which("sbatch")
    if path is None:
        raise UserError("no `sbatch` on PATH: this machine is not a Slurm login node",
                        fix="run `advise submit --slurm` where sbatch works, or print the job with `advise launch --emit slurm`")
    return path


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT_S, stdin=subprocess.DEVNULL, **kw)


def minutes(limit: str) -> int | None:
    """Slurm's time format (``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``) in minutes, rounded
    up; None for ``UNLIMITED``/``INFINITE``."""
    if limit.upper() in ("UNLIMITED", "INFINITE", "NONE"):
        return None
    days, _, rest = limit.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        h, m, s = (parts + [0, 0, 0])[:3]
    elif len(parts) == 3:
        h, m, s = parts
    else:
        h, (m, s) = 0, (parts + [0])[:2]
    total_s = int(days or 0) * 86400 + h * 3600 + m * 60 + s
    return -(-total_s // 60)


def _gpus(gres: str) -> int:
    """GPUs per node in sinfo's %G (``gpu:4``, ``gpu:a100:8(S:0-1)``, ``(null)``)."""
    total = 0
    for item in gres.split(","):
        m = re.match(r"gpu(?::[^:(]+)?:(\d+)", item.strip())
        if m:
            total += int(m.group(1))
    return total


def partitions() -> list[Partition]:
    res = _run(["sinfo", "-h", "-o", "%P|%l|%c|%G|%D"])
    if res.returncode != 0:
        raise UserError(f"sinfo failed: {(res.stderr.strip().splitlines() or ['no output'])[-1]}",
                        fix="check that slurmctld answers (`sinfo`), then submit again")
    by_name: dict[str, Partition] = {}
    for line in res.stdout.splitlines():
        name, limit, cpus, gres, nodes = (line.split("|") + [""] * 5)[:5]
        default = name.endswith("*")
        name = name.rstrip("*")
        with contextlib.suppress(ValueError):
            part = Partition(name=name, default=default, max_time_min=minutes(limit),
                             cpus_per_node=int(cpus.rstrip("+")), gpus_per_node=_gpus(gres), nodes=int(nodes))
            old = by_name.get(name)  # one line per node configuration: keep the biggest nodes
            if old is None or (part.gpus_per_node, part.cpus_per_node) > (old.gpus_per_node, old.cpus_per_node):
                by_name[name] = part.model_copy(update={"nodes": part.nodes + (old.nodes if old else 0)})
    return list(by_name.values())


def check_partition(plan, *, partition: str | None, time_limit: str | None, gpus_per_node: int, cpus_per_task: int,
                    gres: str | None = None) -> Partition:
    """The partition the job goes to, after refusing what Slurm would refuse or never start."""
    parts = partitions()
    if partition is None:
        chosen = next((p for p in parts if p.default), None)
        if chosen is None:
            raise UserError("the cluster has no default partition",
                            fix="name one with --partition: " + ", ".join(p.name for p in parts))
    else:
        chosen = next((p for p in parts if p.name == partition), None)
        if chosen is None:
            raise UserError(f"partition {partition!r} does not exist (sinfo)",
                            fix="use one of: " + ", ".join(p.name + ("*" if p.default else "") for p in parts))
    want_gpus = _gpus(gres) if gres else gpus_per_node
    if want_gpus > chosen.gpus_per_node:
        raise UserError(f"the plan needs {want_gpus} GPU(s) per node; partition {chosen.name}'s nodes have "
                        f"{chosen.gpus_per_node}", fix="pick a GPU partition with --partition, or plan for fewer "
                        "GPUs per node (--gpus)" if chosen.gpus_per_node == 0 else
                        f"plan with --gpus {chosen.gpus_per_node} per node (and --nodes), or pick another --partition")
    if cpus_per_task > chosen.cpus_per_node:
        raise UserError(f"one node of the plan needs {cpus_per_task} CPUs (ranks x (1 + DataLoader workers)); "
                        f"partition {chosen.name}'s nodes have {chosen.cpus_per_node}",
                        fix="fewer --processes or --num-workers per node, or another --partition")
    if plan.nodes > chosen.nodes:
        raise UserError(f"the plan needs {plan.nodes} nodes; partition {chosen.name} has {chosen.nodes}",
                        fix=f"--nodes {chosen.nodes} or fewer, or another --partition")
    if time_limit is not None and chosen.max_time_min is not None:
        want = minutes(time_limit)
        if want is None or want > chosen.max_time_min:
            raise UserError(f"time limit {time_limit} is beyond partition {chosen.name}'s {chosen.max_time_min} min",
                            fix=f"--time {chosen.max_time_min} or less (checkpoint with --checkpoint-every and "
                                "--resume to train longer), or another --partition")
    return chosen


# ------------------------------------------------------------------ submitting
def submit(script_text: str, run_dir: Path) -> SlurmJob:
    """Write the script into the run directory and ``sbatch --parsable`` it; the job's output goes there too.

    The job's ``RUN_DIR`` is the run directory (``CARDWISE_RUN_DIR`` in sbatch's environment, which
    ``--export=ALL`` passes on); the working directory stays the submitter's, as for a local launch."""
    run_dir = Path(run_dir)
    script = run_dir / SCRIPT_NAME
    script.write_text(script_text)
    output = run_dir / OUTPUT_PATTERN
    env = {**os.environ, "CARDWISE_RUN_DIR": str(run_dir)}
    res = _run(["sbatch", "--parsable", "--export=ALL", f"--output={output}", str(script)], env=env)
    job_id = res.stdout.strip().split(";")[0]
    if res.returncode != 0 or not job_id.isdigit():
        why = (res.stderr.strip().splitlines() or [res.stdout.strip() or f"exit code {res.returncode}"])[-1]
        raise UserError(f"sbatch refused the job: {why}", where=str(script), fix="fix what sbatch says, then submit again")
    return SlurmJob(job_id=job_id, output=str(run_dir / OUTPUT_PATTERN.replace("%j", job_id)), script=str(script),
                    seen=time.time())


# ------------------------------------------------------------------ state
def _scontrol(job_id: str) -> dict[str, str] | None:
    res = _run(["scontrol", "show", "job", "-o", job_id])
    if res.returncode != 0 or "JobId=" not in res.stdout:
        return None  # "Invalid job id specified": older than MinJobAge, or never known
    fields = {}
    for tok in res.stdout.split():  # key=value pairs; values without spaces except Command/WorkDir at worst
        key, sep, value = tok.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def _sacct(job_id: str) -> dict[str, str] | None:
    if shutil.which("sacct") is None:
        return None
    res = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o",
                "JobID,State,Reason,ExitCode,Timelimit,Partition,Start,End"])
    if res.returncode != 0:
        return None  # "Slurm accounting storage is disabled": no slurmdbd
    for line in res.stdout.splitlines():
        jid, state, reason, exit_, limit, part, start, end = (line.split("|") + [""] * 8)[:8]
        if jid == job_id:
            return {"JobState": state.split()[0], "Reason": reason, "ExitCode": exit_, "TimeLimit": limit,
                    "Partition": part, "Restarts": "0", "StartTime": start, "EndTime": end}
    return None


def _epoch(value: str | None) -> float | None:
    """Slurm's local ``2026-12-05T04:15:50`` as epoch seconds; None for Unknown/None/N/A."""
    try:
        return time.mktime(time.strptime(value or "", "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def query(job: SlurmJob) -> SlurmJob:
    """``job`` with its state as Slurm reports it now (``lost`` when no Slurm command knows it)."""
    fields = _scontrol(job.job_id) or _sacct(job.job_id)
    if fields is None:
        return job.model_copy(update={"lost": True})
    reason = fields.get("Reason")
    return job.model_copy(update={
        "state": fields.get("JobState", job.state).split()[0].upper(), "reason": None if reason in (None, "None", "") else reason,
        "restarts": int(fields["Restarts"]) if fields.get("Restarts", "").isdigit() else job.restarts,
        "exit": fields.get("ExitCode") or job.exit, "time_limit": fields.get("TimeLimit") or job.time_limit,
        "partition": fields.get("Partition") or job.partition, "seen": time.time(), "lost": False,
        "start": _epoch(fields.get("StartTime")), "end": _epoch(fields.get("EndTime"))})


def exit_code(exit_: str | None) -> int | None:
    """Slurm's ``code:signal`` as one number: the code, or minus the signal that ended it."""
    if not exit_ or ":" not in exit_:
        return None
    code, _, sig = exit_.partition(":")
    if sig.isdigit() and int(sig):
        return -int(sig)
    return int(code) if code.isdigit() else None


def status_text(rec: RunRecord) -> str:
    """``failed (TIMEOUT)``, ``queued (PENDING: Resources)``, ``queued (requeued 1x)``: status with Slurm's words."""
    if not rec.slurm:
        return rec.status
    job = SlurmJob.model_validate(rec.slurm)
    detail = job.state + (f": {job.reason}" if job.reason and job.state in ("PENDING", "REQUEUED") else "")
    if job.restarts:
        detail += f", requeued {job.restarts}x"
    if job.lost:
        detail = "unknown to Slurm now"
    return f"{rec.status} ({detail})"


def _fields_for(rec: RunRecord, job: SlurmJob) -> tuple[str, dict]:
    status = STATE_STATUS.get(job.state, rec.status)
    fields: dict = {"slurm": job.model_dump(mode="json")}
    if rec.run_dir:
        with contextlib.suppress(Exception):  # a bad metrics file reads as none; never a failed read
            metrics = MetricsSummary.from_jsonl(Path(rec.run_dir) / "metrics.jsonl", attempt=job.restarts + 1)
            if metrics is not None:
                fields["metrics"] = metrics
    # Slurm's clock, not the moment someone looked: a job seen only after it ended still shows its run time
    if status in ("running", *TERMINAL) and job.start is not None:
        fields["started"] = job.start
    if status in TERMINAL and job.end is not None:
        fields["ended"] = job.end
    if status in TERMINAL:
        fields["exit_code"] = exit_code(job.exit)
        why = _WHY.get(job.state)
        if status != "succeeded" and why:
            fields["error"] = f"Slurm {job.state}: " + why.format(limit=job.time_limit or "?", exit=f"ExitCode {job.exit}")
        if job.state == "FAILED" and job.output:
            # Slurm's exit code is srun's, i.e. `accelerate launch`'s (1 for any failed rank): the
            # output file is the launcher's log, which names the failing rank and its own code.
            rank, code = failing_rank(read_tail(Path(job.output)))
            if code is not None:
                fields["exit_code"] = code
                fields["error"] = f"Slurm FAILED: rank {rank} exited with {exit_text(code)} (ExitCode {job.exit})"
    return status, fields


def refresh_one(store, rec: RunRecord) -> RunRecord:
    """``rec`` (a Slurm run) with Slurm's current state recorded; written when the store allows."""
    if not rec.slurm or rec.terminal:
        return rec
    job = query(SlurmJob.model_validate(rec.slurm))
    if job.lost:
        status, fields = rec.status, {"slurm": job.model_dump(mode="json"),
                                      "error": f"Slurm no longer knows job {job.job_id} (it ended before the cluster's "
                                               "MinJobAge and sacct keeps no accounting): its output file says how"}
    else:
        status, fields = _fields_for(rec, job)
    with contextlib.suppress(Exception):  # a read-only or busy store: show the truth, write it next time
        if status == rec.status:
            return store.update(rec.id, **fields)
        if status == "succeeded" and rec.status == "queued":  # it ran between two looks
            store.transition(rec.id, "running", expect=["queued"])
        done = store.transition(rec.id, status, **fields)
        return done if done is not None else store.get(rec.id)
    return rec.model_copy(update={"status": status, **fields})


def refresh(store, records: list[RunRecord]) -> list[RunRecord]:
    """Every Slurm run of ``records`` that has not ended, with Slurm's state."""
    return [refresh_one(store, r) if r.slurm and not r.terminal else r for r in records]


def cancel(store, rec: RunRecord) -> tuple[RunRecord, str]:
    """``scancel`` the run's job; the record follows Slurm (CANCELLED) once Slurm says so."""
    job = SlurmJob.model_validate(rec.slurm)
    if rec.terminal:
        if rec.status == "cancelled":
            return rec, "already cancelled"
        raise UserError(f"run {rec.id} already ended ({status_text(rec)}); there is nothing to cancel",
                        fix="`advise runs --status queued --status running` lists the runs that can be cancelled")
    if shutil.which("scancel") is None:
        raise UserError(f"no `scancel` on PATH for Slurm job {job.job_id}", fix="run `advise cancel` on the Slurm login node")
    res = _run(["scancel", job.job_id])
    if res.returncode != 0:
        raise UserError(f"scancel {job.job_id} failed: {(res.stderr.strip().splitlines() or ['no output'])[-1]}",
                        fix=f"`squeue -j {job.job_id}` shows whether the job still exists")
    deadline = time.monotonic() + 10  # slurmctld marks it CANCELLED at once; wait a little for the record
    while True:
        rec = refresh_one(store, rec)
        if rec.terminal or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return rec, f"scancel {job.job_id}: {status_text(rec)}"


# ------------------------------------------------------------------ the one submit call
def submit_run(home: Path, plan, target, request, *, label_note: str = "", resumed_from: str | None = None):
    """Check, record and submit ``plan`` as a Slurm job; the record (``queued``, job id in ``slurm``).

    Every refusal (no sbatch, the partition, the script's arguments, sbatch itself) comes before a
    record is left behind: a job sbatch refuses removes the record and run directory it was given."""
    import shutil as _shutil

    from launcher.command import ENV_MAX_STEPS, ENV_RUN_DIR
    from launcher.home import new_run
    from launcher.slurm import cpus_per_task, script_for
    from launcher.store import RunStore

    require_sbatch()
    part = check_partition(plan, partition=request.partition, time_limit=request.time_limit,
                           gpus_per_node=0 if plan.cpu else plan.processes_per_node, cpus_per_task=cpus_per_task(plan),
                           gres=request.gres)
    text = script_for(plan, target, request)  # refuses control characters before anything is recorded
    store = RunStore.open(home)
    rec, rdir = new_run(store, home, plan, target, resumed_from=resumed_from)
    try:
        job = submit(text, rdir)
    except BaseException:
        with contextlib.suppress(Exception):
            store.delete(rec.id)
            _shutil.rmtree(rdir, ignore_errors=True)
        raise
    env = {ENV_RUN_DIR: str(rdir), **request.extra_env}
    if request.max_steps:
        env[ENV_MAX_STEPS] = str(int(request.max_steps))  # what `--resume` reads back, as for a local run
    job = job.model_copy(update={"partition": part.name, "time_limit": request.time_limit})
    command = {"cmd": ["sbatch", "--parsable", "--export=ALL", f"--output={rdir / OUTPUT_PATTERN}", job.script],
               "env": env, "cwd": os.getcwd()}
    return store.update(rec.id, slurm=job.model_dump(mode="json"), command=command,
                        label=rec.label + f" · slurm {job.job_id}" + label_note)


def wait_gone(store, rec: RunRecord, timeout_s: float) -> RunRecord:
    """``advise cancel --wait``: until Slurm says the job ended and no longer completes (its processes are gone)."""
    job_id = SlurmJob.model_validate(rec.slurm).job_id
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rec = refresh_one(store, store.get(rec.id))
        res = _run(["squeue", "-h", "-j", job_id, "-t", "CG,R,CF,S,SE", "-o", "%T"])
        if rec.terminal and res.returncode == 0 and not res.stdout.strip():
            return rec
        time.sleep(0.5)
    raise UserError(f"Slurm job {job_id} is still completing after {timeout_s:.0f} s",
                    fix=f"`squeue -j {job_id}` shows it; an unkillable process drains the node (sinfo -R)")
