"""Recording how a run ended: at once when possible, later from its run directory otherwise.

A record can say ``running`` after its run ended, three ways: the store could not be written
when it ended (disk full, locked past the busy timeout: ``$CARDWISE_STORE_WAIT``, 30 s); the process that ran it died
(``kill -9`` of a foreground ``advise launch``: nobody is left to write); or the queue service was
down while the run finished. The run directory still knows (``launcher.records``): the runner's
verdict ``attempt-N/outcome.json``, written before the store, and the launch shim's
``attempt-N/exit.json``. So every read (``advise runs``, ``show``, ``logs``, the TUI) and every
service pass *settles* the records still ``running``:

1. the runner's verdict, when present, is recorded (whoever owns the run);
2. otherwise, only if the record's owner (pid + creation time, ``launcher.procs``) is gone:
   - a shim's exit file says how the last launch ended: recorded as the runner would have
     (``launch_outcome``; a launch its shim had to stop because its owner died is ``cancelled``);
   - a foreground run with neither file and no live process is ``failed`` ("its launcher died");
   - a service run with neither is left to the service, which requeues it when it restarts.

Identity, not guesses: a live owner is never overruled except by its own verdict, and a transition
only applies to a record still ``running`` (compare-and-set), so a settle cannot race the runner.
A read-only store (``advise runs`` on a store it may not write) settles in memory only.

A foreground record still ``queued`` whose owner is gone (``abandoned``: its ``advise launch`` was
killed before it started the run) is ``cancelled`` the same way; the owner is in the insert itself.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

from launcher import procs
from launcher.command import ENV_RUN_DIR
from launcher.records import (EXIT_NAME, OUTCOME_NAME, MetricsSummary, RunRecord, last_attempt_dir, launch_outcome,
                              read_json, write_json_atomic)


def record_end(store, run_id: str, run_dir: Path, adir: Path | None, attempt_no: int, final: dict) -> RunRecord:
    """The runner's last step: the verdict to ``attempt-N/outcome.json``, then to the store. If the
    store cannot be written now, say so and return the record as it will be once settled."""
    try:  # bookkeeping must not turn a finished run into a failed one: a bad metrics file reads as none
        metrics = MetricsSummary.from_jsonl(Path(run_dir) / "metrics.jsonl", attempt=attempt_no)
    except Exception:
        metrics = None
    if adir is not None:
        with contextlib.suppress(OSError):
            write_json_atomic(Path(adir) / OUTCOME_NAME, {**final, "ended": time.time()})
    try:
        _end_open_attempts(store, run_id, final)
        done = store.transition(run_id, final["status"], expect=["running"], metrics=metrics,
                                exit_code=final["exit_code"], error=final["error"])
        if done is None:  # moved by someone else (advise cancel): keep their status, add what we know
            done = store.update(run_id, metrics=metrics, exit_code=final["exit_code"], pid=None, pgid=None)
        return done
    except Exception as exc:
        print(f"advise: run {run_id} ended {final['status']} but the run store cannot be written now "
              f"({(str(exc).splitlines() or [type(exc).__name__])[0]}); the next read of the store records it",
              file=sys.stderr)
        return RunRecord(id=run_id, status=final["status"], created=time.time(), run_dir=str(run_dir),
                         exit_code=final["exit_code"], error=final["error"], metrics=metrics)


def _end_open_attempts(store, run_id: str, final: dict) -> None:
    """An attempt still ``running`` when its run ends (a fault between recording the attempt and its
    launch: nothing of it ran) ends with the run, so the record never shows a running attempt of a run
    that is not running. A requeued run's attempt failed: the run starts again as a new attempt."""
    rec = store.get(run_id)
    status = final["status"] if final["status"] in ("succeeded", "failed", "cancelled") else "failed"
    for att in rec.attempts:
        if att.status == "running":
            store.record_attempt(run_id, att.model_copy(update={"status": status, "ended": time.time(),
                                                                "exit_code": final["exit_code"],
                                                                "error": final["error"]}))


def _is_service_run(rec: RunRecord) -> bool:
    return bool(rec.run_dir) and (Path(rec.run_dir) / "submission.json").is_file()


def _is_slurm_run(rec: RunRecord) -> bool:
    """Handed to Slurm (``advise submit --slurm``): its submitter exits once sbatch answers, and its
    state is Slurm's (launcher.slurm_jobs), never settled from a missing owner."""
    return rec.slurm is not None


def pending_end(rec: RunRecord, *, owner_gone: bool) -> dict | None:
    """The fields that end ``rec`` (a ``running`` record), from its run directory; None if it cannot
    be settled (yet)."""
    adir = last_attempt_dir(rec.run_dir, rec.attempts[-1].log_dir if rec.attempts else None)
    if adir is None:
        verdict = exit_ = None
    else:
        verdict, exit_ = read_json(adir / OUTCOME_NAME), read_json(adir / EXIT_NAME)
    if verdict is not None and verdict.get("status") in ("succeeded", "failed", "cancelled"):
        fields = {k: verdict.get(k) for k in ("status", "exit_code", "error")}
    elif not owner_gone:
        return None
    elif exit_ is not None and isinstance(exit_.get("returncode"), int):
        out = launch_outcome(exit_["returncode"], adir / "launcher.log", cancelled=bool(exit_.get("stopped")))
        fields = {"status": out.status, "exit_code": out.exit_code, "error": out.error}
        if exit_.get("stopped") and not _is_service_run(rec):
            fields["error"] = f"its `advise launch` (pid {(rec.owner or {}).get('pid', '?')}) was killed; the run's processes were stopped"
        elif _is_service_run(rec) and exit_.get("stopped"):
            return None  # stopped by the service or reconcile: the service requeues it
    elif _is_service_run(rec):
        return None  # the service's reconcile requeues it when it starts
    elif rec.run_dir and procs.tagged_processes(**{ENV_RUN_DIR: str(rec.run_dir)}):
        return None  # its processes are still stopping
    else:
        fields = {"status": "failed", "exit_code": None,
                  "error": f"its `advise launch` (pid {(rec.owner or {}).get('pid', '?')}) died before recording how the run ended"}
    if rec.run_dir:
        n = int(adir.name.split("-", 1)[1]) if adir is not None and adir.name.split("-", 1)[-1].isdigit() else None
        with contextlib.suppress(Exception):
            fields["metrics"] = MetricsSummary.from_jsonl(Path(rec.run_dir) / "metrics.jsonl", attempt=n)
    return fields


def abandoned(rec: RunRecord) -> bool:
    """A foreground run's record still ``queued`` whose ``advise launch`` is gone: killed between
    recording the run and starting it (``kill -9`` in its first seconds). Nobody will ever start it:
    a service only starts records with a ``submission.json``, and the owner is recorded in the insert."""
    return (rec.status == "queued" and not _is_service_run(rec) and not _is_slurm_run(rec)
            and procs.owner_alive(rec.owner) is False)


def settle_one(store, rec: RunRecord, *, owner_gone: bool | None = None) -> RunRecord:
    """``rec`` settled if its run directory says it ended (written when the store allows).
    ``owner_gone``: known by the caller (a service holding the home's lock); else by identity."""
    if abandoned(rec):
        fields = {"error": f"its `advise launch` (pid {rec.owner.get('pid', '?')}) was killed before the run started"}
        with contextlib.suppress(Exception):
            done = store.transition(rec.id, "cancelled", expect=["queued"], **fields)
            return done if done is not None else store.get(rec.id)
        return rec.model_copy(update={**fields, "status": "cancelled", "ended": time.time()})
    if rec.status != "running" or _is_slurm_run(rec):
        return rec
    if owner_gone is None:  # a record without an owner predates owners: only the runner's verdict counts
        owner_gone = procs.owner_alive(rec.owner) is False
    fields = pending_end(rec, owner_gone=owner_gone)
    if fields is None:
        return rec
    attempts = [a.model_copy(update={"status": fields["status"], "exit_code": fields["exit_code"],
                                     "ended": a.ended or time.time()}) if a.status == "running" else a
                for a in rec.attempts]
    with contextlib.suppress(Exception):  # a read-only or busy store: show the truth, write it next time
        rest = {k: v for k, v in fields.items() if k != "status"}
        done = store.transition(rec.id, fields["status"], expect=["running"], attempts=attempts, **rest)
        return done if done is not None else store.get(rec.id)
    return rec.model_copy(update={**fields, "attempts": attempts, "ended": time.time(), "pid": None, "pgid": None})


def settle(store, records: list[RunRecord]) -> list[RunRecord]:
    """Every ``running`` record of ``records`` settled where its run directory says it ended."""
    return [settle_one(store, r) if r.status in ("running", "queued") else r for r in records]
