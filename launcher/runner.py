"""Run a ``LaunchSpec`` as a process tree that always ends, and a whole run as attempts.

Process model. ``accelerate launch`` starts in a new session (``start_new_session``), so a
terminal's Ctrl-C reaches only cardwise, which then stops the run in order: first a graceful
stop when the ranks listen for one (``launcher.graceful_stop``: they stop at the next step
boundary with a checkpoint of it, within the grace period), else or after it SIGTERM to the
launcher's process group (torchrun's agent stops its workers; the single-process launcher
stops its child), SIGKILL after a grace period. torchrun puts every worker in a session of
its own, so signalling one group is not enough when the agent itself dies: the runner
snapshots the launcher's descendants while it runs (and registers itself as Linux "child
subreaper", so workers orphaned by a dying agent are re-parented to it rather than to init)
and, whatever the exit path, ends and reaps every descendant it saw. A rank that crashes is
torchrun's to handle (it stops the others); the runner records which rank and its exit code.

Output goes to files, never pipes: the launcher's stdout+stderr to ``launcher.log`` (it carries
every rank's lines, prefixed ``[defaultN]:``) and torchrun's per-rank files under ``ranks/``, so
a run whose supervisor dies keeps writing instead of dying of SIGPIPE.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import psutil
from pydantic import BaseModel

from launcher import graceful_stop, procs
from launcher.command import LaunchSpec
from launcher.data_wait import UTIL_NAME, UtilisationSampler, plan_gpus
from launcher.oom import DEFAULT_MAX_RETRIES
from launcher.pdeathsig import ENV_LAUNCH_ID  # marks every process of one launch (see Launch._sweep)
from launcher.records import EXIT_NAME, Outcome, launch_outcome, read_json
from launcher.run_logs import rank_logs

_PR_SET_CHILD_SUBREAPER = 36
# The error of a run whose start met a full disk before any process of it ran (launcher.service requeues it).
START_NO_SPACE = "no space on the disk to start it"
_SHIM_MARGIN_S = 8.0  # the shim's own sweep after its grace: wait this much longer before SIGKILL


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux >= 3.4) so none outlives a run unseen; False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class Launch:
    """One ``accelerate launch`` process tree.

    ``start()``, then ``wait()`` (optionally with a ``cancel`` event another thread sets, or
    ``cancel()`` from another thread). ``wait`` returns only once every process is gone.
    """

    def __init__(self, spec: LaunchSpec, log_path: Path, *, echo: IO[str] | None = None, grace_s: float = 10.0,
                 die_with_parent: bool = True):
        self.spec = spec
        self.log_path = Path(log_path)
        self.echo = echo
        self.grace_s = grace_s
        self.die_with_parent = die_with_parent
        self.proc: subprocess.Popen | None = None
        self._seen: dict[int, psutil.Process] = {}  # pid -> process (psutil checks create time: no pid reuse)
        self._cancel = threading.Event()
        self._force = threading.Event()
        self._cancelled = False
        self._t0 = 0.0
        self._echo_thread: threading.Thread | None = None
        self._external: threading.Event | None = None
        self._muted = False
        self.token = secrets.token_hex(8)
        self.exit_path = self.log_path.with_name(EXIT_NAME)

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def pgid(self) -> int | None:
        return self.pid  # new session: session id == process group id == pid

    def start(self) -> None:
        become_subreaper()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab", buffering=0)
        try:
            env = {**self.spec.full_env(), ENV_LAUNCH_ID: self.token,
                   graceful_stop.ENV_STOP_REQUEST: str(graceful_stop.request_path(self.log_path.parent))}
            # Through the shim (launcher.pdeathsig): it stops the whole tree when told to or when this
            # process dies (SIGKILL included), and writes exit.json whoever is left to read it.
            cmd = [sys.executable, "-m", "launcher.pdeathsig", "--grace", f"{self.grace_s:g}",
                   "--exit-file", str(self.exit_path),
                   *(["--pdeathsig", "--parent", str(os.getpid())] if self.die_with_parent else []),
                   "--", *self.spec.cmd]
            self.proc = subprocess.Popen(cmd, env=env, cwd=self.spec.cwd,
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, close_fds=True)
        except OSError as exc:
            from advisor.errors import UserError

            raise UserError(f"cannot start the launcher: {exc.strerror}", where=self.spec.cmd[0],
                            fix="check that Python and accelerate are installed in this environment") from None
        finally:
            log.close()  # the child holds its own descriptor
        self._t0 = time.monotonic()
        if self.echo is not None:
            self._echo_thread = threading.Thread(target=self._tail, daemon=True, name="cardwise-log-echo")
            self._echo_thread.start()

    def cancel(self) -> None:
        """Ask the run to stop (thread-safe); ``wait`` does the stopping."""
        self._cancel.set()

    def kill_now(self) -> None:
        """Cancel without the grace period (a second Ctrl-C)."""
        self._force.set()
        self._cancel.set()

    def wait(self, cancel: threading.Event | None = None, poll_s: float = 0.2) -> Outcome:
        assert self.proc is not None, "start() first"
        self._external = cancel
        try:
            while self.proc.poll() is None:
                self._snapshot()
                self._reap_adopted()
                if self._cancel.is_set() or (cancel is not None and cancel.is_set()):
                    self._cancelled = True
                    self._stop()
                    break
                time.sleep(poll_s)
        finally:
            # Any exit path, exceptions included: nothing the run started survives it.
            self._snapshot()
            if self.proc.poll() is None:
                self._stop()
            self._sweep()
            self.proc.wait()
            if self._echo_thread is not None:
                self._echo_thread.join(timeout=2)
        rc = self.proc.returncode
        done = read_json(self.exit_path)  # the launcher's own status, as the shim saw it
        if done is not None and isinstance(done.get("returncode"), int):
            rc = done["returncode"]
        return launch_outcome(rc, self.log_path, cancelled=self._cancelled, wall=time.monotonic() - self._t0)

    # ---------------------------------------------------------------- internals
    def _snapshot(self) -> None:
        try:
            root = psutil.Process(self.proc.pid)
            for child in root.children(recursive=True):
                self._seen.setdefault(child.pid, child)
        except psutil.Error:
            pass
        # Orphans adopted by us (subreaper) are our children now; those we saw before are ours.
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process().children(recursive=True):
                if child.pid in self._seen:
                    for grand in child.children(recursive=True):
                        self._seen.setdefault(grand.pid, grand)

    def _reap_adopted(self) -> None:
        """waitpid() the zombies of this launch that were re-parented to us (we are their subreaper).
        Only processes seen as this launch's: another launch's Popen child must keep its status."""
        me = os.getpid()
        for p in list(self._seen.values()):
            try:
                if p.is_running() and p.ppid() == me and p.status() == psutil.STATUS_ZOMBIE:
                    os.waitpid(p.pid, os.WNOHANG)
            except (psutil.Error, OSError):
                continue

    def _wait_exit(self, seconds: float) -> None:
        """Wait until the launcher exits, ``seconds`` pass or kill_now, minding the tree meanwhile."""
        deadline = time.monotonic() + seconds
        while self.proc.poll() is None and time.monotonic() < deadline and not self._force.is_set():
            self._snapshot()
            # The launcher may be waiting for a rank's child that died re-parented to us: reap it,
            # or the launcher waits out its own timeout (accelerate's is 5 s) for nothing.
            self._reap_adopted()
            time.sleep(0.05)

    def _stop(self) -> None:
        """Ask the ranks to stop at their next step boundary with a checkpoint (launcher.graceful_stop) and
        give them the grace period; then, or when they do not listen, SIGTERM the shim (never the group:
        one SIGTERM must reach the launcher, see launcher.pdeathsig), wait for it to stop the tree (not
        after a graceful stop's grace, nor after kill_now), then SIGKILL the group."""
        if not self._force.is_set() and graceful_stop.ask(self.log_path.parent):
            self._wait_exit(self.grace_s)
            if self.proc.poll() is not None:
                return
            self._force.set()  # the grace is spent: as a second Ctrl-C (the older checkpoint is used)
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)  # our unreaped child: its pid cannot be reused
        self._wait_exit(self.grace_s + _SHIM_MARGIN_S)
        if self.proc.poll() is None:
            self._snapshot()
            procs.signal_group(self.pgid, signal.SIGKILL)
            self.proc.wait()

    def _sweep(self) -> None:
        """End every process of this launch still alive, and reap those that died re-parented to
        us (subreaper): no process or zombie outlives the run.

        "Of this launch": seen as a descendant while it ran, or carrying its ``CARDWISE_LAUNCH_ID``
        in the environment (which every rank and rank child inherits) -- the second catches
        workers that started between two snapshots and were orphaned by a dying agent.
        """
        for _ in range(3):  # a dying rank may still fork (data workers): look again until quiet
            for p in procs.tagged_processes(**{ENV_LAUNCH_ID: self.token}):
                self._seen.setdefault(p.pid, p)
            mine = [p for p in self._seen.values() if procs.exists(p)]
            if not mine:
                return
            procs.stop_processes(mine, min(self.grace_s, procs.KILL_WAIT_S))

    def _stopping(self) -> bool:
        return self._cancel.is_set() or (self._external is not None and self._external.is_set())

    def _echo(self, text: str) -> None:
        """Echo the launcher log, except torch-elastic's chatter once a stop was asked for
        (``launcher.log`` and the rank logs keep every line)."""
        if self._stopping():
            if self._muted:
                return
            self._muted = True
            text = f"advise: stopping the run; the rest of its output is in {self.log_path}\n"
        with contextlib.suppress(ValueError, OSError):
            self.echo.write(text)
            self.echo.flush()

    def _tail(self) -> None:
        with open(self.log_path, "r", errors="replace") as f:
            while True:
                line = f.readline()
                if line:
                    self._echo(line)
                    continue
                if self.proc.poll() is not None:
                    for rest in f.readlines():
                        self._echo(rest)
                    return
                time.sleep(0.1)


@contextlib.contextmanager
def forward_signals(cancel: threading.Event, force: Callable[[], None] | None = None) -> Iterator[None]:
    """In the main thread: SIGINT/SIGTERM/SIGHUP set ``cancel`` (a second one calls ``force``)
    instead of raising in the middle of bookkeeping; restored on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    count = [0]

    def handler(signum, frame):
        count[0] += 1
        cancel.set()
        if count[0] > 1 and force is not None:
            force()

    sigs = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    previous = {s: signal.signal(s, handler) for s in sigs}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


# ==================================================================== a run: attempts + store
class RunOptions(BaseModel):
    """How to execute a run, beyond its plan and target."""

    max_oom_retries: int = DEFAULT_MAX_RETRIES
    max_steps: int | None = None
    machine_rank: int = 0
    main_address: str | None = None
    main_port: int | None = None  # one node: None = a free port per attempt; several: default 29500
    gpus: list[int] | None = None  # pinned GPU indices (queue service)
    grace_s: float = 10.0
    extra_env: dict[str, str] = {}
    cwd: str | None = None  # the ranks' working directory (a queued run: the submitter's); None = ours
    # The launch gets SIGTERM if this process dies without cleaning up (SIGKILL). The queue service
    # turns it off: its policy is to find and stop leftovers when it restarts (docs/service.md).
    die_with_parent: bool = True


def write_attempt_files(plan, target, run_dir: Path, attempt: int, options: RunOptions) -> tuple[LaunchSpec, Path]:
    """Write an attempt's plan.json, accelerate_config.yaml and command.json (in ``attempt-N/``
    and, as "what ran last", at the top of the run dir); return its LaunchSpec and folder."""
    import json
    import shutil

    from launcher.accelerate_config import write_accelerate_config
    from launcher.command import build_launch_spec

    adir = Path(run_dir) / f"attempt-{attempt}"
    adir.mkdir(parents=True, exist_ok=True)
    plan_path = adir / "plan.json"
    plan.save(plan_path)
    cfg_path = write_accelerate_config(plan, adir / "accelerate_config.yaml", machine_rank=options.machine_rank,
                                       main_address=options.main_address, main_port=options.main_port,
                                       gpu_ids=options.gpus)
    spec = build_launch_spec(plan, target, config_path=cfg_path, plan_path=plan_path, run_dir=Path(run_dir),
                             log_dir=adir / "ranks", main_port=options.main_port if plan.nodes == 1 else None,
                             attempt=attempt, max_steps=options.max_steps, extra_env=options.extra_env)
    if options.cwd:
        spec = spec.model_copy(update={"cwd": options.cwd})
    (adir / "command.json").write_text(json.dumps({**spec.model_dump(), "shell": spec.shell_line()}, indent=2) + "\n")
    for name in ("plan.json", "accelerate_config.yaml", "command.json"):
        shutil.copyfile(adir / name, Path(run_dir) / name)
    return spec, adir


def execute(store, run_id: str, plan, target, run_dir: Path, options: RunOptions | None = None, *,
            cancel: threading.Event | None = None, echo: IO[str] | None = None,
            on_launch: Callable[[Launch], None] | None = None, claimed: bool = False):
    """Run ``run_id`` to a terminal status and return its final ``RunRecord``.

    The record must be ``queued`` (moved to running here) or, with ``claimed`` (the queue service,
    which claimed it), ``running``: a claimed record found ``queued`` again was handed back by a
    graceful stop of the service before its launcher started, and stays queued. Each attempt is recorded with its micro-batch and accumulation; a CUDA OOM
    retries smaller (``launcher.oom``) up to ``options.max_oom_retries`` times, from the last
    checkpoint when the global batch stays (``launcher.checkpoints.for_retry``). ``cancel`` (an
    event set from a signal handler or another thread) stops the run and records ``cancelled``.
    ``on_launch`` sees each started ``Launch`` (e.g. to keep a handle for ``kill_now``).
    If the store says the run was cancelled meanwhile (``advise cancel``), that status stands.
    """
    from launcher import checkpoints, oom
    from launcher.command import ENV_RESUME
    from launcher.settle import record_end
    from launcher.store import Attempt

    options = options or RunOptions()
    run_dir = Path(run_dir)
    rec = store.get(run_id)
    if rec.status == "queued" and not claimed:
        rec = store.transition(run_id, "running", expect=["queued"], run_dir=str(run_dir))
    if rec is None or rec.status != "running":
        return store.get(run_id)  # cancelled (or finished) before it started
    store.update(run_id, owner=procs.owner_identity())  # a read that finds us gone settles the record
    cancel = cancel or threading.Event()
    current, attempt_no, launch, adir, note = plan, 0, None, None, None
    final: dict = {"status": "failed", "exit_code": None, "error": "internal error in the launcher"}
    try:
        while True:
            attempt_no += 1
            spec, adir = write_attempt_files(current, target, run_dir, attempt_no, options)
            att = Attempt(n=attempt_no, micro_batch=current.config.micro_batch, grad_accum=current.config.grad_accum,
                          global_batch=current.global_batch, note=note, started=time.time(), log_dir=str(adir))
            store.record_attempt(run_id, att)
            store.update(run_id, command=spec.model_dump(), plan=current.model_dump(mode="json"))
            if cancel.is_set():
                store.record_attempt(run_id, att.model_copy(update={"status": "cancelled", "ended": time.time()}))
                final = {"status": "cancelled", "exit_code": None, "error": "cancelled before launch"}
                break
            launch = Launch(spec, adir / "launcher.log", echo=echo, grace_s=options.grace_s,
                            die_with_parent=options.die_with_parent)
            launch.start()
            store.update(run_id, pid=launch.pid, pgid=launch.pgid)
            if on_launch is not None:
                on_launch(launch)
            with UtilisationSampler(plan_gpus(current, options.gpus), adir / UTIL_NAME):  # the data-bound check's
                out = launch.wait(cancel=cancel)
            logs = [p for ps in rank_logs(adir, options.machine_rank, current.processes_per_node).values() for p in ps]
            is_oom = out.status == "failed" and oom.logs_have_oom([adir / "launcher.log", *logs])
            nxt, why = oom.retry_decision(is_oom, current, attempt_no, options.max_oom_retries)
            status = "oom" if is_oom else out.status
            final = {"status": out.status, "exit_code": out.exit_code, "error": why or out.error}
            try:  # the launch ended: a store that cannot take this now (disk full) must not change its verdict
                store.record_attempt(run_id, att.model_copy(update={
                    "status": status, "exit_code": out.exit_code, "ended": time.time(),
                    "error": (oom.OOM_ERROR if is_oom else out.error)}))
            except Exception:
                if nxt is not None and not cancel.is_set():
                    raise  # a retry needs the store; recorded failed below with the reason
            
            if nxt is not None and not cancel.is_set():
                note = oom.retry_note(current, nxt)
                resume = checkpoints.for_retry(run_dir, adir, same_batch=nxt.global_batch == current.global_batch)
                if resume is not None:  # the retry goes on from the failed attempt's last checkpoint
                    options = options.model_copy(update={"extra_env": {**options.extra_env, ENV_RESUME: str(resume)}})
                if echo is not None:
                    echo.write(f"{oom.OOM_RETRY_MARK} at micro-batch {current.config.micro_batch}; {note}\n")
                current = nxt
                continue
            break
    except BaseException as exc:  # recorded as failed (or cancelled on Ctrl-C), then re-raised
        from launcher.store import out_of_space

        interrupted = isinstance(exc, KeyboardInterrupt)
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        final = {"status": "cancelled" if interrupted else "failed", "exit_code": None,
                 "error": None if interrupted else first}
        space = None if interrupted else out_of_space(exc, run_dir)
        if space is not None and (launch is None or launch.proc is None):
            # Nothing ran: a full disk is transient, so the run is not over. The service's run goes back
            # to the queue (the service holds its starts until space is freed); a foreground run ends
            # failed and says how to start it again.
            final = ({"status": "queued", "exit_code": None, "error": f"{START_NO_SPACE}: {space}"} if claimed else
                     {**final, "error": f"{START_NO_SPACE}: {space}; nothing ran (free space, then launch it again)"})
        raise
    finally:
        if launch is not None and launch.proc is not None and launch.proc.poll() is None:
            launch.kill_now()
            launch.wait()
        done = record_end(store, run_id, run_dir, adir, attempt_no, final)
    return done
