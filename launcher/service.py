"""The queue service: ``advise submit`` queues runs in the run store, ``advise serve`` runs them.

There is no server socket and no message channel: the SQLite run store (WAL) *is* the queue.
``submit`` writes a record (status ``queued``) plus ``submission.json`` in its run directory
(what to run and how: target, run options, devices and memory needed), ``cancel`` changes a
record's status, and the service polls the store, places queued runs on free devices
(``launcher.placement``) and executes each in a thread through ``launcher.runner.execute`` (OOM
retry, signals, process-group cleanup all come from there).

Ownership. A run belongs to the service when its run directory holds ``submission.json``;
records of foreground ``advise launch`` runs never do, and the service leaves them alone.

One service per home: ``home/service.lock`` is held with ``flock`` for the service's life (the
kernel drops it when the process dies, even by SIGKILL; the descriptor is close-on-exec, so
runs never inherit it). A second ``advise serve`` exits 2 naming the holder's pid.

Process identity. Every process of a service run carries ``CARDWISE_SERVICE_HOME=<home>``
and ``CARDWISE_RUN_DIR=<run dir>`` in its environment (ranks and their children inherit them),
so the service finds a run's processes whatever session torchrun put them in, and a reused pid
is never mistaken for a run (its environment differs). A recorded ``pgid`` is signalled only
when its leader is verified the same way, or, if its environment cannot be read, was created
within seconds of the run's last attempt (the process start time).

Crash policy (SIGKILL of the service, reboot, OOM killer). Runs are not stopped at the moment
the service dies: its children live on (re-parented) until the service starts again. The first
thing a starting service does, holding the lock and before it places anything, is *reconcile*:

- every process of this home's service runs still alive is stopped (SIGTERM, then SIGKILL after
  ``grace_s``) and waited for: a run is never executed by two process trees at once;
- a record still ``running`` is requeued at the front of the queue (it keeps its submission
  time), or marked ``failed`` with the reason once the service has started it ``max_starts``
  times (a run that keeps coming back while the service dies is not retried forever);
- ``queued`` records stay queued; terminal records only lose stale pids.

Adopting live runs instead was rejected: the new service is not their parent, so it could not
learn their exit status, and "succeeded" must mean what the launcher saw. Under systemd
(``docs/cardwise.service``) the unit's cgroup is killed when the service dies, so orphans end at
once; reconcile covers the other ways of running it.

Graceful stop (SIGTERM, Ctrl-C): the service takes no new work, moves each running run back to
``queued`` (so a restart runs it again: cardwise runs have no resume), stops its processes
through the launcher (SIGTERM, grace, SIGKILL) and exits 0. A second signal skips the grace.
``service_attempts`` counts every start, graceful stops included; the ``max_starts`` limit is
applied only when reconcile finds a run interrupted by a crash. When a requeued run starts again its previous files
(``attempt-*/``, ``metrics.jsonl``) move to ``interrupted-<n>/`` in its run directory.

Safety: local use only (no listener); the home, run directories and lock are owner-only (the
service runs with umask 077); commands are argv lists rebuilt from the validated plan and
submission, never shell strings.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import psutil
from pydantic import BaseModel, ConfigDict, Field

from advisor.errors import UserError
from launcher import placement
from launcher.command import ENV_RUN_DIR, Target
from launcher.runner import RunOptions
from launcher.store import RunRecord, RunStore

log = logging.getLogger("cardwise.service")

SUBMISSION_NAME = "submission.json"
LOCK_NAME = "service.lock"
ENV_SERVICE_HOME = "CARDWISE_SERVICE_HOME"  # on every process of a service run: whose it is
DEFAULT_MAX_STARTS = 3
DEFAULT_POLL_S = 1.0
DEFAULT_GRACE_S = 10.0
_LOCK_RETRY_S = 1.0  # `advise cancel` probes the lock for microseconds; a starting service waits that out
_ATTEMPT_START_WINDOW_S = (-2.0, 60.0)  # launcher process created this close to its attempt's start


# ====================================================================== submissions
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


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (0600) atomically: readers see the old file or the whole new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


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

        ref = plan.model
        if ref.name:
            from advisor.catalog import catalog_model

            spec = catalog_model(ref.name)
        elif ref.hf_config:
            from advisor.hf_config import spec_from_hf_config

            spec = spec_from_hf_config(ref.hf_config)
        else:
            from advisor.tracer import trace_module_spec

            spec = trace_module_spec(ref.module, ref.input_shape, ref.input_dtype)
        hw = HardwareSpec(gpu=get_gpu(plan.gpu), gpus_per_node=plan.processes_per_node, nodes=plan.nodes)
        need = estimate(spec, plan.config, hw).memory.device_gib
    except Exception as exc:  # the run can still be placed: on idle GPUs
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        return None, [f"no memory estimate for this plan ({first}): the service waits for idle GPUs (--need-gib to say)"]
    return need, []


def submit(home: Path, plan, target: Target, options: RunOptions, *, label: str | None = None,
           need_gib: float | None = None) -> tuple[RunRecord, list[str]]:
    """Validate and queue a run; return its record and notes. The plan is final from here on."""
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
    _write_private(rdir / "plan.json", plan.model_dump_json(indent=2) + "\n")
    # The record appears last: a service never sees a queued record without its submission.
    _write_private(submission_path(rdir), sub.model_dump_json(indent=2) + "\n")
    rec = store.create(run_id=rid, label=label or f"{plan.model.label()} · {target.label()}",
                       plan=plan.model_dump(mode="json"), run_dir=rdir)
    return rec, notes


# ====================================================================== the lock
class ServiceLock:
    """``flock`` on ``home/service.lock`` (0600) holding the service's pid; one service per home."""

    def __init__(self, home: Path):
        self.path = Path(home) / LOCK_NAME
        self.fd: int | None = None

    def acquire(self) -> "ServiceLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + _LOCK_RETRY_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    pid = _lock_pid(self.path)
                    who = f" (pid {pid})" if pid else ""
                    raise UserError(f"another `advise serve`{who} is already running for this home",
                                    where=str(self.path.parent),
                                    fix="use that service (`advise submit`), stop it first, or serve another --home") from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
            os.close(self.fd)  # closing drops the flock
            self.fd = None

    def __enter__(self) -> "ServiceLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _lock_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None


def service_pid(home: Path) -> int | None:
    """The pid of the service holding ``home``'s lock (0 if unknown), or None when none runs."""
    path = Path(home) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _lock_pid(path) or 0
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


# ====================================================================== processes of a run
def _environ(p: psutil.Process) -> dict[str, str] | None:
    try:
        return p.environ()
    except psutil.Error:
        return None


def tagged_processes(**tags: str) -> list[psutil.Process]:
    """Live processes (ours to read) whose environment has every ``NAME=value`` in ``tags``."""
    me, found = os.getpid(), []
    for p in psutil.process_iter():
        if p.pid == me:
            continue
        env = _environ(p)
        if env and all(env.get(k) == v for k, v in tags.items()):
            found.append(p)
    return found


def _verified_leader(rec: RunRecord) -> psutil.Process | None:
    """The recorded process-group leader, if it is still this run's launcher (not a reused pid)."""
    if not rec.pgid:
        return None
    try:
        p = psutil.Process(rec.pgid)
    except psutil.Error:
        return None
    env = _environ(p)
    if env is not None:
        return p if rec.run_dir and env.get(ENV_RUN_DIR) == str(rec.run_dir) else None
    started = rec.attempts[-1].started if rec.attempts else rec.started
    try:
        created = p.create_time()
    except psutil.Error:
        return None
    lo, hi = _ATTEMPT_START_WINDOW_S
    return p if started is not None and started + lo <= created <= started + hi else None


def run_processes(rec: RunRecord) -> list[psutil.Process]:
    """Every live process of ``rec``: by its run-dir tag, plus its verified process group."""
    procs = {p.pid: p for p in tagged_processes(**{ENV_RUN_DIR: str(rec.run_dir)})} if rec.run_dir else {}
    leader = _verified_leader(rec)
    if leader is not None:
        procs.setdefault(leader.pid, leader)
        for p in psutil.process_iter():
            with contextlib.suppress(OSError, psutil.Error):
                if p.pid not in procs and os.getpgid(p.pid) == rec.pgid:
                    procs[p.pid] = p
    return list(procs.values())


def _gone(p: psutil.Process) -> bool:
    """Exited (a zombie counts: it holds no files, locks or memory), or its pid now belongs to another."""
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until every process is gone (reaping our own children); return those still alive."""
    deadline = time.monotonic() + timeout
    alive = list(procs)
    while alive:
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.wait(timeout=0)  # reaps it if it is our child; a quick check otherwise
        alive = [p for p in alive if not _gone(p)]
        if not alive or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    return alive


def stop_processes(procs: Iterable[psutil.Process], grace_s: float = DEFAULT_GRACE_S) -> list[psutil.Process]:
    """SIGTERM ``procs``, SIGKILL those left after ``grace_s``; return any that still live."""
    procs = [p for p in procs if not _gone(p)]
    if not procs:
        return []
    for p in procs:  # psutil checks the create time before signalling: no pid-reuse accidents
        with contextlib.suppress(psutil.Error):
            p.terminate()
    alive = _wait_gone(procs, grace_s)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    return _wait_gone(alive, 5.0)


# ====================================================================== cancel
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
                left = stop_processes(run_processes(rec), grace_s)
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
    requeued: list[str] = Field(default_factory=list)
    failed: list[str] = Field(default_factory=list)
    stopped: int = Field(0, description="processes of earlier service runs stopped")
    survivors: list[int] = Field(default_factory=list, description="pids that did not die even of SIGKILL")


def reconcile(store: RunStore, home: Path, *, max_starts: int = DEFAULT_MAX_STARTS,
              grace_s: float = DEFAULT_GRACE_S) -> ReconcileReport:
    """Make the store true again after a service died (call holding the lock, before placing)."""
    report = ReconcileReport()
    records = [r for r in store.list() if is_service_run(r)]
    procs = {p.pid: p for p in tagged_processes(**{ENV_SERVICE_HOME: os.path.realpath(home)})}
    for rec in records:
        if rec.status == "running" or rec.pgid:
            for p in run_processes(rec):
                procs.setdefault(p.pid, p)
    if procs:
        log.warning("reconcile: stopping %d leftover process(es) of earlier service runs: %s",
                    len(procs), ", ".join(map(str, sorted(procs))))
    left = stop_processes(procs.values(), grace_s)
    report.stopped = len(procs) - len(left)
    report.survivors = sorted(p.pid for p in left)
    stuck_dirs = {(_environ(p) or {}).get(ENV_RUN_DIR) for p in left}
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


# ====================================================================== the service
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
        self._lock = ServiceLock(self.home)

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
            try:
                while not stop.is_set():
                    try:
                        self.step()
                    except Exception:  # a busy store or a bad record must not end the service
                        log.exception("scheduling pass failed; trying again")
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
            run.requeued = self.store.transition(run.id, "queued", expect=["running"],
                                                 error="requeued: the service was stopped while it ran") is not None
            run.cancel.set()
        while any(r.thread is not None and r.thread.is_alive() for r in runs):
            if self.force.is_set():
                for r in runs:
                    for launch in r.launches:
                        launch.kill_now()
            time.sleep(0.1)
        for run in runs:
            if run.requeued:
                self.store.update(run.id, exit_code=None, metrics=None, pid=None, pgid=None)
                log.info("run %s requeued", run.id)
        self.active.clear()

    # ------------------------------------------------------------ one pass
    def step(self) -> None:
        self._reap()
        self._watch_cancels()
        queue = self._queue()
        if not queue:
            return
        if self.max_runs is not None and len(self.active) >= self.max_runs:
            return
        devices = self.inventory()
        if not devices:
            log.warning("no device visible right now (NVML?); not placing anything this pass")
            return
        held = [d for r in self.active.values() for d in r.devices]
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

    def _work(self, run: ActiveRun, plan, sub: Submission, options: RunOptions, run_dir: Path, n: int) -> None:
        from launcher.runner import execute

        try:
            moved = _archive_previous(run_dir, n - 1)
            if moved is not None:
                log.info("run %s: files of the interrupted execution kept in %s", run.id, moved)
            final = execute(self.store, run.id, plan, sub.target, run_dir, options, cancel=run.cancel,
                            on_launch=lambda launch: self._on_launch(run, launch))
            if not run.requeued:
                extra = f" ({final.error})" if final.error and final.status != "succeeded" else ""
                log.info("run %s %s%s", run.id, final.status, extra)
        except BaseException as exc:  # execute records its own failures; make sure nothing stays "running"
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            log.exception("run %s: %s", run.id, first)
            with contextlib.suppress(Exception):
                self.store.transition(run.id, "failed", expect=["running"], error=first)
