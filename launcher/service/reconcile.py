"""A service run's processes, found by identity, and the two things that stop them.

``cancel`` (``advise cancel``) and ``reconcile`` (a starting service making the store true after
a crash). Both find a run's processes the same way: the run-directory tag every process of the
run inherits, plus its recorded process group when the leader is verified to be the run's
(``launcher.procs.same_process``: tag, or creation time near the attempt's start). Stopping is
``launcher.procs.stop_processes``: SIGTERM, grace, SIGKILL.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import psutil
from pydantic import BaseModel, Field

from advisor.errors import UserError
from launcher import procs
from launcher.command import ENV_RUN_DIR
from launcher.service.lock import service_pid
from launcher.service.submission import is_service_run
from launcher.store import RunRecord, RunStore

log = logging.getLogger("cardwise.service")

ENV_SERVICE_HOME = "CARDWISE_SERVICE_HOME"  # on every process of a service run: whose it is
DEFAULT_MAX_STARTS = 3
DEFAULT_GRACE_S = 10.0
_ATTEMPT_START_WINDOW_S = (-2.0, 60.0)  # launcher process created this close to its attempt's start


def run_processes(rec: RunRecord) -> list[psutil.Process]:
    """Every live process of ``rec``: by its run-dir tag, plus its verified process group."""
    found = {p.pid: p for p in procs.tagged_processes(**{ENV_RUN_DIR: str(rec.run_dir)})} if rec.run_dir else {}
    started = rec.current_attempt.started if rec.current_attempt else rec.started
    # No run dir, no tag to match: "\0" is a value no environment holds, so only the start time can tell.
    leader = procs.same_process(rec.pgid, tag=(ENV_RUN_DIR, str(rec.run_dir) if rec.run_dir else "\0"),
                                started=started, window=_ATTEMPT_START_WINDOW_S)
    if leader is not None:
        found.setdefault(leader.pid, leader)
        for p in procs.group_members(rec.pgid, exclude=found):
            found[p.pid] = p
    return list(found.values())


def cancel(store: RunStore, home: Path, run_id: str, *, grace_s: float = DEFAULT_GRACE_S) -> tuple[RunRecord, str]:
    """Cancel a queued or running run; return its record and what was done.

    Queued: cancelled at once. Running under a live service: the record says cancelled and the
    service, polling the store, stops the processes. With no service (it died, or a foreground
    ``advise launch`` run): this call stops the run's processes itself.
    """
    rec = store.get(run_id)
    for _ in range(5):  # the status may move under us (started, requeued, ended): look again
        if rec.status == "queued":
            done = store.transition(rec.id, "cancelled", expect=["queued"],
                                    error="cancelled before it started (advise cancel)")
            if done is not None:
                return done, "cancelled (it was queued)"
        elif rec.status == "running":
            # pid/pgid stay until the processes are gone: whoever stops them clears them.
            done = store.transition(rec.id, "cancelled", expect=["running"], error="cancelled (advise cancel)",
                                    pid=rec.pid, pgid=rec.pgid)
            if done is not None:
                if is_service_run(rec) and service_pid(home) is not None:
                    return done, "cancelled; the service is stopping its processes"
                left = procs.stop_processes(run_processes(rec), grace_s)
                if left:
                    raise UserError(f"run {rec.id} is recorded cancelled but {len(left)} process(es) did not stop: "
                                    + ", ".join(str(p.pid) for p in left), fix="kill them by hand (kill -9 PID)")
                return store.update(rec.id, pid=None, pgid=None), "cancelled; its processes are stopped"
        else:
            break
        rec = store.get(rec.id)
    if rec.status == "cancelled":
        return rec, "already cancelled"
    raise UserError(f"run {rec.id} already ended ({rec.status}); there is nothing to cancel",
                    fix="`advise runs --status queued --status running` lists the runs that can be cancelled")


# ====================================================================== reconcile
class ReconcileReport(BaseModel):
    finished: list[str] = Field(default_factory=list, description="ended while the service was down: recorded")
    requeued: list[str] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)
    stopped: int = Field(0, description="processes of earlier service runs stopped")
    survivors: list[int] = Field(default_factory=list, description="pids that did not die even of SIGKILL")


def _finished_while_down(store: RunStore, records: list[RunRecord], report: ReconcileReport) -> list[RunRecord]:
    """Record the runs whose run directory says they ended on their own (the shim's exit file, not
    stopped; or the runner's verdict): those are never run again. Returns the records left."""
    from launcher.settle import pending_end, settle_one

    left = []
    for rec in records:
        if rec.status == "running" and pending_end(rec, owner_gone=True) is not None:
            done = settle_one(store, rec, owner_gone=True)  # we hold the lock: its service is gone
            if done.status != "running":
                report.finished.append(rec.id)
                log.info("reconcile: run %s finished while the service was down: %s", rec.id, done.status)
                continue
        left.append(rec)
    return left


def _ran_already(store: RunStore, records: list[RunRecord], report: ReconcileReport) -> list[RunRecord]:
    """Record the ``queued`` runs whose run directory says they already ran to an end of their own
    (the runner's verdict succeeded/failed, or the shim's exit file, not stopped): a store restored
    from ``runs.sqlite.bak`` holds runs queued at the backup that finished since, and those must not
    run again. A verdict of ``cancelled`` is a requeue's (graceful stop), so those stay queued."""
    from launcher.settle import pending_end, settle_one

    left = []
    for rec in records:
        if rec.status == "queued":
            fields = pending_end(rec.model_copy(update={"status": "running"}), owner_gone=True)
            if fields is not None and fields["status"] in ("succeeded", "failed"):
                claimed = store.transition(rec.id, "running", expect=["queued"])
                done = settle_one(store, claimed, owner_gone=True) if claimed is not None else rec
                if done.status in ("succeeded", "failed"):
                    report.finished.append(rec.id)
                    log.info("reconcile: run %s already ran (its run directory says %s): recorded, not run again",
                             rec.id, done.status)
                    continue
                if claimed is not None:  # could not settle after all: back where it was
                    store.transition(rec.id, "queued", expect=["running"])
        left.append(rec)
    return left


def reconcile(store: RunStore, home: Path, *, max_starts: int = DEFAULT_MAX_STARTS,
              grace_s: float = DEFAULT_GRACE_S) -> ReconcileReport:
    """Make the store true again after a service died (call holding the lock, before placing).

    Runs that finished while the service was down are recorded from their run directory first,
    before anything is stopped, and once more after: one that ended between the two looks (its
    exit file says it was not stopped) is recorded, not requeued. Only the rest are requeued."""
    report = ReconcileReport()
    records = _ran_already(store, [r for r in store.list() if is_service_run(r)], report)
    records = _finished_while_down(store, records, report)
    leftovers = {p.pid: p for p in procs.tagged_processes(**{ENV_SERVICE_HOME: os.path.realpath(home)})}
    for rec in records:
        if rec.status == "running" or rec.pgid:
            for p in run_processes(rec):
                leftovers.setdefault(p.pid, p)
    if leftovers:
        log.warning("reconcile: stopping %d leftover process(es) of earlier service runs: %s",
                    len(leftovers), ", ".join(map(str, sorted(leftovers))))
    left = procs.stop_processes(leftovers.values(), grace_s)
    report.stopped = len(leftovers) - len(left)
    report.survivors = sorted(p.pid for p in left)
    stuck_dirs = {(procs.environ(p) or {}).get(ENV_RUN_DIR) for p in left}
    records = _finished_while_down(store, [store.get(r.id) for r in records], report)
    now = time.time()
    for rec in records:
        if rec.status != "running":
            if rec.pid or rec.pgid:
                store.update(rec.id, pid=None, pgid=None)
            continue
        for att in rec.attempts:
            if att.status == "running":
                store.record_attempt(rec.id, att.model_copy(update={
                    "status": "failed", "ended": now, "error": "interrupted: the service stopped while it ran"}))
        if str(rec.run_dir) in stuck_dirs:
            reason = "processes of this run survived SIGKILL; not requeued, so it cannot run twice"
            store.transition(rec.id, "failed", expect=["running"], error=reason)
            report.failed.append(rec.id)
        elif rec.service_attempts >= max_starts:
            reason = (f"the service stopped {rec.service_attempts} time(s) while running it (limit --max-starts "
                      f"{max_starts}); not retried: resubmit with `advise submit --plan {rec.run_dir}/plan.json ...`")
            store.transition(rec.id, "failed", expect=["running"], error=reason)
            report.failed.append(rec.id)
        else:
            store.transition(rec.id, "queued", expect=["running"],
                             error=f"requeued: the service stopped while it ran (start {rec.service_attempts} of {max_starts})")
            report.requeued.append(rec.id)
    return report

