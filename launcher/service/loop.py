"""The scheduling loop: ``Service.serve`` locks the home, reconciles, then places and runs.

Each pass (``step``) asks the store whether anything was committed since the last pass (``PRAGMA
data_version``, one integer); only then does it re-read the queue (records, submissions, plans:
the expensive part with thousands queued), otherwise it reuses the last one. Placement runs again
only when the queue or the devices changed. Then it asks ``launcher.placement`` which queued runs start on which free devices, and executes each started run in a thread through
``launcher.runner.execute``. A record moved away from ``running`` by someone else (``advise
cancel``) stops its run. Graceful stop requeues what runs (see ``launcher.service``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from advisor.errors import UserError
from launcher import placement, store_safety
from launcher.runner import RunOptions
from launcher.service.lock import ServiceLock
from launcher.service.reconcile import DEFAULT_GRACE_S, DEFAULT_MAX_STARTS, ENV_SERVICE_HOME, reconcile
from launcher.service.submission import Submission, load_submission
from launcher.store import RunRecord, RunStore
from launcher.store_safety import StoreCorrupt

log = logging.getLogger("cardwise.service")

DEFAULT_POLL_S = 1.0
BACKUP_EVERY_S = 3600.0
# cardwise's choice: after a start met a full disk, the longest wait before trying again when the
# disk's free space did not grow (a quota's does not show in statvfs); one failed start a minute.
SPACE_RECHECK_S = 60.0


@dataclass
class ActiveRun:
    id: str
    devices: list[int]
    kind: str
    port: int | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    launches: list = field(default_factory=list)
    thread: threading.Thread | None = None
    stopping: bool = False
    requeued: bool = False
    final: RunRecord | None = None  # how it ended, as execute() saw it, for a store that could not take it then


def _how_it_stopped(run: ActiveRun) -> str:
    """", stopped after step N with a checkpoint (step-N)" when its ranks stopped gracefully
    (``launcher.graceful_stop``), else where it will go on from."""
    from launcher.graceful_stop import describe, stopped

    for launch in reversed(run.launches):
        info = stopped(launch.log_path.parent)
        if info is not None:
            return f", {describe(info)}"
    return " (not stopped at a step boundary: it goes on from its last checkpoint, if any)" if run.launches else ""


def _archive_previous(run_dir: Path, n: int) -> Path | None:
    """Move an interrupted execution's files aside (``interrupted-<n>/``) so the new one starts clean."""
    items = [p for p in run_dir.iterdir() if p.name.startswith("attempt-") or p.name == "metrics.jsonl"]
    if not items:
        return None
    dest = run_dir / f"interrupted-{n}"
    k = 1
    while dest.exists():
        k += 1
        dest = run_dir / f"interrupted-{n}.{k}"
    dest.mkdir(mode=0o700)
    for p in items:
        p.rename(dest / p.name)
    return dest


def gpu_ids_from_env(machine, value: str | None) -> list[int] | None:
    """GPU indices named by a ``CUDA_VISIBLE_DEVICES`` value (indices or UUIDs), None if unset."""
    if value is None or not value.strip():
        return None
    ids = []
    for part in value.split(","):
        part = part.strip()
        if part.isdigit():
            ids.append(int(part))
            continue
        for g in machine.gpus:
            if g.uuid and (g.uuid == part or g.uuid.startswith(part)):
                ids.append(g.index)
    return ids


class Service:
    """The scheduling loop. ``serve()`` is the whole life; ``step()`` is one pass (tests call it)."""

    def __init__(self, home: Path, *, cpu: bool = False, slots: int | None = None, gpu_ids: list[int] | None = None,
                 poll_s: float = DEFAULT_POLL_S, max_starts: int = DEFAULT_MAX_STARTS,
                 max_bypass: int = placement.DEFAULT_MAX_BYPASS, grace_s: float = DEFAULT_GRACE_S,
                 inventory: Callable[[], list[placement.Device]] | None = None):
        from launcher.home import ensure_home

        self.home = ensure_home(Path(os.path.realpath(home)))  # one spelling: it tags the processes
        self.store = RunStore.open(self.home)
        self.cpu = cpu
        self.slots = slots
        self.gpu_ids = gpu_ids
        self.poll_s = poll_s
        self.max_starts = max_starts
        self.max_bypass = max_bypass
        self.grace_s = grace_s
        self._inventory = inventory
        self.active: dict[str, ActiveRun] = {}
        self.bypassed: dict[str, int] = {}
        self.force = threading.Event()
        self._waiting: dict[str, str] = {}
        self._unrecorded: dict[str, RunRecord | None] = {}  # ended runs whose end the store has not taken yet
        self._told_unrecorded: set[str] = set()
        self._lock = ServiceLock(self.home)
        self._watch = self.store.data_version()
        self._queue_cache: list[tuple[RunRecord, Submission]] | None = None
        self._last_pass: tuple | None = None  # (devices, held, running) placement last saw
        self._backup_due = 0.0
        self._space_hold: tuple[int, float] | None = None  # (free bytes, when): a start met a full disk

    # ------------------------------------------------------------ inventory
    @property
    def max_runs(self) -> int | None:
        return None if self.cpu else self.slots

    def inventory(self) -> list[placement.Device]:
        if self._inventory is not None:
            return self._inventory()
        if self.cpu:
            return placement.cpu_slots(self.slots or 1)
        from advisor.hardware import detect_machine

        return placement.gpu_devices(detect_machine(), only=self.gpu_ids)

    def describe(self) -> str:
        if self.cpu:
            return f"{self.slots or 1} CPU slot(s)"
        devs = self.inventory()
        text = ", ".join(f"{d.index}:{d.name} ({d.free_gib:.1f}/{d.total_gib:.1f} GiB free)" for d in devs) or "no GPU"
        cap = f", at most {self.slots} run(s) at once" if self.slots else ""
        return f"GPUs {text}{cap}"

    # ------------------------------------------------------------ life
    def serve(self, stop: threading.Event) -> int:
        """Lock, reconcile, place runs until ``stop`` is set, then stop and requeue what runs."""
        with self._lock:
            report = reconcile(self.store, self.home, max_starts=self.max_starts, grace_s=self.grace_s)
            if report.requeued or report.failed or report.stopped:
                log.warning("reconcile: requeued %s; failed %s; stopped %d process(es)",
                            ", ".join(report.requeued) or "none", ", ".join(report.failed) or "none", report.stopped)
            log.info("serving %s from %s (poll %.1fs)", self.describe(), self.home, self.poll_s)
            last_said = None
            try:
                while not stop.is_set():
                    self._backup()
                    try:
                        self.step()
                    except StoreCorrupt:
                        raise  # exit 2: the systemd unit must not restart into the same corrupt store
                    except UserError as exc:  # busy, read-only, full: said once (one line) until it changes
                        said = exc.message().splitlines()[0]
                        if said != last_said:
                            log.error("scheduling pass failed: %s; trying again every pass", said)
                        last_said = said
                    except Exception:  # a bad record must not end the service
                        log.exception("scheduling pass failed; trying again")
                    else:
                        last_said = None
                    stop.wait(self.poll_s)
            finally:
                self.shutdown()
        log.info("stopped")
        return 0

    def shutdown(self) -> None:
        """Graceful stop: requeue every running run, stop its processes, wait for the threads."""
        self._reap()
        runs = list(self.active.values())
        if runs:
            log.info("stopping %d running run(s); they go back to the queue", len(runs))
        for run in runs:
            run.stopping = True
            try:
                run.requeued = self.store.transition(run.id, "queued", expect=["running"],
                                                     error="requeued: the service was stopped while it ran") is not None
            except Exception as exc:  # the runs still stop; the next start's reconcile requeues them
                log.error("run %s: cannot requeue it now (%s)", run.id, exc)
            run.cancel.set()
        while any(r.thread is not None and r.thread.is_alive() for r in runs):
            if self.force.is_set():
                for r in runs:
                    for launch in r.launches:
                        launch.kill_now()
            time.sleep(0.1)
        for run in runs:
            if run.requeued:
                with contextlib.suppress(Exception):
                    self.store.update(run.id, exit_code=None, metrics=None, pid=None, pgid=None)
                log.info("run %s requeued%s", run.id, _how_it_stopped(run))
        self.active.clear()
        self._watch.close()

    def _backup(self) -> None:
        """Refresh ``runs.sqlite.bak`` at start and hourly: what the fix of a lost store restores."""
        if time.monotonic() < self._backup_due:
            return
        self._backup_due = time.monotonic() + BACKUP_EVERY_S
        try:
            store_safety.backup(self.store.path)
        except Exception as exc:
            log.warning("could not back up the run store: %s", exc)

    # ------------------------------------------------------------ one pass
    def step(self) -> None:
        self._reap()
        changed = self._watch.changed()
        if changed:
            self._watch_cancels()
            self._queue_cache = self._queue()
        queue = self._queue_cache or []
        if not queue or self._space_held():
            return
        if self.max_runs is not None and len(self.active) >= self.max_runs:
            return
        devices = self.inventory()
        if not devices:
            log.warning("no device visible right now (NVML?); not placing anything this pass")
            return
        held = [d for r in self.active.values() for d in r.devices]
        seen = (tuple(d.model_dump_json() for d in devices), tuple(held), len(self.active))
        if not changed and seen == self._last_pass:
            return  # same queue, same devices: placement would decide the same
        self._last_pass = seen
        reqs = [placement.Request(id=rec.id, devices=sub.devices, kind=sub.kind, need_gib=sub.need_gib)
                for rec, sub in queue]
        dec = placement.schedule(reqs, devices, held, bypassed=self.bypassed, max_bypass=self.max_bypass,
                                 max_runs=self.max_runs, running=len(self.active))
        self.bypassed = dec.bypassed
        by_id = {rec.id: (rec, sub) for rec, sub in queue}
        for r in dec.refuse:
            if self.store.transition(r.id, "failed", expect=["queued"], error=f"cannot be placed: {r.reason}"):
                log.error("run %s refused: %s", r.id, r.reason)
        for p in dec.start:
            self._start(*by_id[p.id], p)
        for rid, why in dec.waiting.items():
            if self._waiting.get(rid) != why:
                log.info("run %s waits: %s", rid, why)
        self._waiting = dict(dec.waiting)

    def _queue(self) -> list[tuple[RunRecord, Submission]]:
        out = []
        for rec in self.store.list(status="queued"):
            try:
                sub = load_submission(rec.run_dir)
                if sub is not None:
                    rec.plan_model()  # validated here, so a bad record is refused, not retried every pass
            except Exception as exc:
                reason = getattr(exc, "what", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
                if self.store.transition(rec.id, "failed", expect=["queued"], error=f"invalid submission: {reason}"):
                    log.error("run %s refused: invalid submission: %s", rec.id, reason)
                continue
            if sub is not None:  # None: a foreground `advise launch` record, not ours
                out.append((rec, sub))
        return out

    def _reap(self) -> None:
        for rid, run in list(self.active.items()):
            if run.thread is not None and not run.thread.is_alive():
                del self.active[rid]
                if not run.requeued:
                    self._unrecorded[rid] = run.final
        for rid, final in list(self._unrecorded.items()):
            if self._record_end(rid, final):
                del self._unrecorded[rid]

    def _record_end(self, rid: str, final: RunRecord | None) -> bool:
        """Make sure a run whose thread ended is not left ``running``: its end could not be written then
        (store busy, disk full; the runner's outcome.json perhaps neither), so write the verdict the
        service still holds to outcome.json and settle the record from it. False: try again next pass."""
        from launcher.records import OUTCOME_NAME, last_attempt_dir, write_json_atomic
        from launcher.settle import settle_one

        try:
            rec = self.store.get(rid)
            if rec.status != "running":
                return True
            adir = last_attempt_dir(rec.run_dir, rec.attempts[-1].log_dir if rec.attempts else None)
            if final is not None and final.terminal and adir is not None and not (adir / OUTCOME_NAME).exists():
                write_json_atomic(adir / OUTCOME_NAME, {"status": final.status, "exit_code": final.exit_code,
                                                        "error": final.error, "ended": time.time()})
            done = settle_one(self.store, rec, owner_gone=True)  # its thread, the owner, is gone
            if done.status == "running" and final is None:  # nothing to record it with: as a crash would
                done = self.store.transition(rid, "failed", expect=["running"],
                                             error="its launcher thread ended without a verdict") or done
            status = self.store.get(rid).status
            if status != "running":
                log.info("run %s recorded late: %s", rid, status)
            return status != "running"
        except Exception as exc:  # busy, disk full: next pass (said once)
            if rid not in self._told_unrecorded:
                self._told_unrecorded.add(rid)
                log.warning("run %s ended but its end cannot be recorded yet (%s); trying every pass",
                            rid, (str(exc).splitlines() or [type(exc).__name__])[0])
            return False

    def _requeued_for_space(self, run: ActiveRun, n: int) -> bool:
        """True when ``execute`` gave the run back to the queue because the disk was full before any of
        it ran (``runner.START_NO_SPACE``): this start is not counted against ``--max-starts``, and no run
        starts until space is freed (``_space_held``), so a full disk neither fails runs for good nor
        makes the service start and give back the same run every pass."""
        from launcher.runner import START_NO_SPACE
        from launcher.store import free_bytes

        try:
            rec = self.store.get(run.id)
        except Exception:  # cannot tell: handled as any other failure of the run's thread
            return False
        if rec.status != "queued" or not (rec.error or "").startswith(START_NO_SPACE):
            return False
        run.requeued = True
        with contextlib.suppress(Exception):  # not counted; if the store cannot take that now, it is counted
            self.store.update(run.id, service_attempts=n - 1)
        self._space_hold = (free_bytes(self.home) or 0, time.monotonic())
        log.warning("run %s goes back to the queue: %s; no run starts until space is freed", run.id,
                    (rec.error or "")[len(START_NO_SPACE) + 2:] or "disk full")
        return True

    def _space_held(self) -> bool:
        """Whether starts wait for space: until the home's disk has more free than at the fault, or
        ``SPACE_RECHECK_S`` passed (a quota, EDQUOT, is not in statvfs: try again then)."""
        from launcher.store import free_bytes

        if self._space_hold is None:
            return False
        free_then, since = self._space_hold
        if (free_bytes(self.home) or 0) > free_then or time.monotonic() - since > SPACE_RECHECK_S:
            self._space_hold, self._last_pass = None, None  # place again, though nothing else changed
            log.info("space on the disk again: starting runs")
            return False
        return True

    def _watch_cancels(self) -> None:
        for run in self.active.values():
            if run.stopping:
                continue
            try:
                rec = self.store.get(run.id)
            except UserError:  # the record was deleted: nobody wants this run any more
                rec = None
            if rec is None or rec.status != "running":
                run.stopping = True
                run.cancel.set()
                if rec is None or rec.status == "cancelled":
                    log.info("run %s cancelled; stopping its processes", run.id)

    def _free_port(self) -> int:
        from launcher.command import free_port

        used = {r.port for r in self.active.values()}
        for _ in range(32):
            port = free_port()
            if port not in used:
                return port
        return port

    def _start(self, rec: RunRecord, sub: Submission, p: placement.Placement) -> None:
        plan = rec.plan_model()
        n = rec.service_attempts + 1
        gpus = p.devices if sub.kind == "gpu" else None
        claimed = self.store.transition(rec.id, "running", expect=["queued"], gpus=gpus, service_attempts=n,
                                        attempts=[], metrics=None, exit_code=None, error=None)
        if claimed is None:
            return  # cancelled between the listing and now
        try:
            self._launch(claimed, plan, sub, p, n, gpus)
        except Exception as exc:  # never leave a claimed run "running" with nothing behind it
            self.active.pop(rec.id, None)
            self.store.transition(rec.id, "failed", expect=["running"], error=f"could not start: {exc}")
            raise

    def _launch(self, rec: RunRecord, plan, sub: Submission, p: placement.Placement, n: int, gpus) -> None:
        run = ActiveRun(id=rec.id, devices=p.devices, kind=sub.kind)
        env = {ENV_SERVICE_HOME: str(self.home)}
        if sub.kind == "gpu":
            env.update({"CUDA_VISIBLE_DEVICES": ",".join(map(str, p.devices)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
        elif "OMP_NUM_THREADS" not in os.environ:  # share the cores between the slots, not per run
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // (self.slots or 1)))
        options = sub.options.model_copy(update={"gpus": gpus, "extra_env": {**sub.options.extra_env, **env},
                                                 "die_with_parent": False})  # reconcile stops leftovers
        if plan.world_size > 1 and options.main_port is None:
            run.port = options.main_port = self._free_port()  # distinct rendezvous ports for concurrent runs
        run.thread = threading.Thread(target=self._work, args=(run, plan, sub, options, Path(rec.run_dir), n),
                                      name=f"run-{rec.id}", daemon=True)
        self.active[rec.id] = run
        self.bypassed.pop(rec.id, None)
        where = f"GPU(s) {','.join(map(str, p.devices))}" if sub.kind == "gpu" else f"CPU slot(s) {','.join(map(str, p.devices))}"
        log.info("run %s starts on %s%s (start %d): %s", rec.id, where, " (backfill)" if p.backfill else "", n, rec.label)
        run.thread.start()

    def _on_launch(self, run: ActiveRun, launch) -> None:
        run.launches.append(launch)
        if self.force.is_set():
            launch.kill_now()

    def _resume_point(self, run_id: str, run_dir: Path, options: RunOptions) -> RunOptions:
        """A run started again (requeued by a stop or a crash) goes on from its newest checkpoint that
        checks out (``launcher.checkpoints.newest_usable``), never from step 0 over its own checkpoints.
        Its steps are the same samples: the plan is the submitted one, and an OOM retry that changed the
        global batch moved its checkpoints aside (``checkpoints.for_retry``)."""
        from launcher.checkpoints import newest_usable
        from launcher.command import ENV_RESUME

        ckpt, damaged = newest_usable(run_dir)
        for line in damaged:
            log.warning("run %s: %s; passed over", run_id, line)
        if ckpt is None:
            return options
        log.info("run %s resumes from %s", run_id, ckpt)
        return options.model_copy(update={"extra_env": {**options.extra_env, ENV_RESUME: str(ckpt)}})

    def _work(self, run: ActiveRun, plan, sub: Submission, options: RunOptions, run_dir: Path, n: int) -> None:
        from launcher.runner import execute

        try:
            moved = _archive_previous(run_dir, n - 1)
            if moved is not None:
                log.info("run %s: files of the interrupted execution kept in %s", run.id, moved)
            options = self._resume_point(run.id, run_dir, options)
            final = execute(self.store, run.id, plan, sub.target, run_dir, options, cancel=run.cancel,
                            on_launch=lambda launch: self._on_launch(run, launch), claimed=True)
            run.final = final
            if not run.requeued:
                extra = f" ({final.error})" if final.error and final.status != "succeeded" else ""
                log.info("run %s %s%s", run.id, final.status, extra)
        except BaseException as exc:  # execute records its own failures; make sure nothing stays "running"
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            if self._requeued_for_space(run, n):
                return
            log.exception("run %s: %s", run.id, first)
            with contextlib.suppress(Exception):
                self.store.transition(run.id, "failed", expect=["running"], error=first)
