"""A run's record (``RunRecord``: one row of the run store, as every layer sees it) and what a
launch leaves in its run directory, read back without the process that ran it.

Three files let anyone, later, say how a run ended:

- ``metrics.jsonl``: rows the ranks write (``launcher.runtime``), summarised by ``MetricsSummary``.
  A user script writes them too, so any row may be malformed: it is skipped and counted
  (``bad_rows``), never allowed to change a run's status.
- ``attempt-N/exit.json``: written by the launch shim (``launcher.pdeathsig``) when the
  ``accelerate launch`` process it supervised exits, whoever waits for it: the exit code, and
  whether the shim was told to stop it (``stopped``). A run that finished while the queue service
  was down is recorded from this file instead of being run again.
- ``attempt-N/outcome.json``: the runner's verdict over all attempts (status, exit code, error),
  written before the store is; a store that cannot be written at that moment (disk full, locked
  past the busy timeout) is brought up to date from it later (``launcher.settle``).

``launch_outcome`` turns an exit code plus the launcher log into an ``Outcome``; the runner and
the later readers share it, so a run recorded late reads the same as one recorded at once.
"""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from launcher.data_wait import UTIL_NAME, DataBound, summarise
from launcher.run_logs import exit_text, failing_rank, read_tail

EXIT_NAME = "exit.json"
OUTCOME_NAME = "outcome.json"
_NUMERIC = ("loss", "samples_per_s", "tokens_per_s", "peak_gib", "time", "interval_s", "data_wait_s")


class MetricsSummary(BaseModel):
    """What the final attempt's ``metrics.jsonl`` says, over rank 0's rows (all ranks for peak)."""

    model_config = ConfigDict(extra="allow")

    steps: int = 0
    first_loss: float | None = None
    last_loss: float | None = None
    samples_per_s: float | None = Field(None, description="steady-state mean over all ranks")
    tokens_per_s: float | None = None
    peak_gib: float | None = Field(None, description="max over ranks of torch.cuda.max_memory_allocated")
    ranks: int = 0
    wall_s: float | None = None
    bad_rows: int = Field(0, description="rows skipped: not JSON objects, or fields of the wrong type")
    bad_samples: int | None = Field(None, description="training samples skipped as unreadable, summed over ranks "
                                    "(image-classification's --bad-samples skip); None when not counted")
    data_bound: DataBound | None = Field(None, description="the data-bound check (launcher.data_wait): GPU "
                                         "utilisation, data-wait share, whether the run was data-bound, the fix")

    @classmethod
    def from_jsonl(cls, path: Path, attempt: int | None = None) -> "MetricsSummary | None":
        """Summarise ``metrics.jsonl`` rows (launcher.runtime writes them) of one attempt.

        Throughput is steady state: each rank's first logged interval (warm-up, compile,
        allocator growth) is dropped when it has more, the median of the rest is taken, and the
        ranks' medians are summed (rows are per rank, in local samples).
        """
        rows, bad = [], 0
        try:
            with open(path, errors="replace") as f:
                for line in f:
                    if not line.strip():
                        continue
                    row = _valid_row(line)
                    if row is None:
                        bad += 1  # a line cut short by a kill, or a script writing its own rows
                    elif attempt is None or row.get("attempt", attempt) == attempt:
                        rows.append(row)
        except OSError:
            return None
        rows = [r for r in rows if "step" in r]
        if not rows:
            return cls(bad_rows=bad) if bad else None
        by_rank: dict[int, list[dict]] = {}
        for r in rows:
            by_rank.setdefault(int(r.get("rank", 0)), []).append(r)
        lead = sorted(by_rank[min(by_rank)], key=lambda r: r["step"])

        def steady(key: str) -> float | None:
            total, seen = 0.0, False
            for rank_rows in by_rank.values():
                vals = [r[key] for r in sorted(rank_rows, key=lambda r: r["step"]) if r.get(key) is not None]
                if len(vals) > 1:
                    vals = vals[1:]
                if vals:
                    vals.sort()
                    total += vals[len(vals) // 2]
                    seen = True
            return total if seen else None

        peaks = [r["peak_gib"] for r in rows if r.get("peak_gib") is not None]
        times = [r["time"] for r in rows if r.get("time") is not None]
        util = Path(path).parent / f"attempt-{attempt}" / UTIL_NAME if attempt is not None else None
        bound = summarise(rows, util)
        return cls(steps=int(lead[-1]["step"]), first_loss=lead[0].get("loss"), last_loss=lead[-1].get("loss"),
                   samples_per_s=steady("samples_per_s"), tokens_per_s=steady("tokens_per_s"),
                   peak_gib=max(peaks) if peaks else None, ranks=len(by_rank),
                   wall_s=(max(times) - min(times)) if len(times) > 1 else None, bad_rows=bad,
                   data_bound=bound, bad_samples=_last_count(by_rank, "bad_samples"))


def _last_count(by_rank: dict[int, list[dict]], key: str) -> int | None:
    """A running count the ranks log (``Runtime.counters``): each rank's last value, summed; None if none logs it."""
    last = [max(rows, key=lambda r: r["step"]).get(key) for rows in by_rank.values()]
    counts = [v for v in last if type(v) is int and v >= 0]
    return sum(counts) if counts else None


def _valid_row(line: str) -> dict | None:
    """The row if it is a JSON object whose step/rank/attempt are integers and measures finite numbers."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: a row nested thousands deep (a script's own rows)
        return None
    if not isinstance(row, dict):
        return None
    for key in ("step", "rank", "attempt"):
        if key in row and (type(row[key]) is not int):
            return None
    for key in _NUMERIC:
        value = row.get(key)
        if value is not None and (type(value) not in (int, float) or not math.isfinite(value)):
            return None
    return row


Status = Literal["queued", "running", "succeeded", "failed", "cancelled"]
STATUSES: tuple[str, ...] = ("queued", "running", "succeeded", "failed", "cancelled")
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})

# Which status may follow which. running -> queued lets the service requeue a run whose
# service died under it (counted in service_attempts); terminal states are final.
ALLOWED: dict[str, frozenset[str]] = {
    "queued": frozenset({"running", "cancelled", "failed"}),
    "running": frozenset({"succeeded", "failed", "cancelled", "queued"}),
}


class Attempt(BaseModel):
    """One launch of the run's command; OOM recovery adds one per retry."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(description="1-based attempt number")
    micro_batch: int
    grad_accum: int
    global_batch: int | None = Field(None, description="samples per optimizer step in this attempt")
    note: str | None = Field(None, description="what an OOM retry changed from the attempt before")
    status: Literal["running", "succeeded", "failed", "oom", "cancelled"] = "running"
    exit_code: int | None = None
    started: float | None = None
    ended: float | None = None
    log_dir: str | None = Field(None, description="this attempt's logs (launcher.log, ranks/)")
    error: str | None = None


class RunRecord(BaseModel):
    """One row of the store, as the CLI (--json), the TUI and the service see it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    status: Status
    label: str = Field("", description="what runs: model and recipe or script, for listings")
    created: float
    started: float | None = None
    ended: float | None = None
    plan: dict[str, Any] | None = Field(None, description="the Plan as JSON (advisor.plan.Plan)")
    command: dict[str, Any] | None = Field(None, description="{'cmd': [...], 'env': {...}} of the last attempt")
    run_dir: str | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    exit_code: int | None = None
    metrics: MetricsSummary | None = None
    gpus: list[int] | None = Field(None, description="GPU indices assigned (queue service)")
    pid: int | None = Field(None, description="pid of the launcher process while running")
    pgid: int | None = Field(None, description="its process group (== session), to signal all ranks")
    service_attempts: int = Field(0, description="times the queue service started this run")
    error: str | None = Field(None, description="one line saying why it failed or was cancelled")
    owner: dict[str, Any] | None = Field(None, description="{'pid', 'created'} of the process running it "
                                         "(advise launch or the service): reads settle runs whose owner died")
    target: dict[str, Any] | None = Field(None, description="what every rank runs (launcher.command.Target as "
                                          "JSON): with the plan, what `advise launch --resume` starts again")
    resumed_from: str | None = Field(None, description="the run whose last checkpoint this run continued")
    slurm: dict[str, Any] | None = Field(None, description="the Slurm job running it (advise submit --slurm): "
                                         "launcher.slurm_jobs.SlurmJob as JSON, its state as Slurm last reported it")

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def plan_model(self):
        from advisor.plan import Plan

        return None if self.plan is None else Plan.model_validate(self.plan)


class Outcome(BaseModel):
    """How one launch ended."""

    status: Literal["succeeded", "failed", "cancelled"]
    exit_code: int | None = None  # the failing rank's exit code when known, else the launcher's
    launcher_exit: int | None = None  # returncode of `accelerate launch` (negative: signal)
    failed_rank: int | None = None
    error: str | None = None
    wall_s: float = 0.0


def launch_outcome(rc: int, log_path: Path, *, cancelled: bool, wall: float = 0.0) -> Outcome:
    """The outcome of a launch whose launcher exited with ``rc``; ``cancelled``: we asked it to stop.

    A user's cancel is reported plainly (status ``cancelled``, no error text): it is not a failure.
    """
    if rc == 0 and not cancelled:
        return Outcome(status="succeeded", exit_code=0, launcher_exit=0, wall_s=wall)
    text = read_tail(log_path)
    signalled = rc in (-signal.SIGINT, -signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGTERM)
    if cancelled:
        return Outcome(status="cancelled", exit_code=rc, launcher_exit=rc, wall_s=wall)
    if signalled and "Root Cause" not in text:
        # Someone signalled the run's group (`kill -TERM -PGID`): stopped, not failed.
        return Outcome(status="cancelled", exit_code=rc, launcher_exit=rc,
                       error=f"stopped by signal ({exit_text(rc)})", wall_s=wall)
    rank, code = failing_rank(text)
    exit_code = code if code is not None else rc
    where = f"rank {rank}" if rank is not None else "the launcher"
    return Outcome(status="failed", exit_code=exit_code, launcher_exit=rc, failed_rank=rank,
                   error=f"{where} exited with {exit_text(exit_code)}", wall_s=wall)


def write_json_atomic(path: Path, data: dict) -> None:
    """Readers see no file or the whole file (rename), never half of it; 0600 like the rest."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def read_json(path: Path) -> dict | None:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def last_attempt_dir(run_dir: str | os.PathLike | None, log_dir: str | None = None) -> Path | None:
    """The current execution's last attempt folder: the record's, else the highest ``attempt-N``."""
    if log_dir:
        return Path(log_dir)
    if not run_dir:
        return None
    found = []
    for p in Path(run_dir).glob("attempt-*"):
        suffix = p.name.split("-", 1)[1]
        if suffix.isdigit():
            found.append((int(suffix), p))
    return max(found)[1] if found else None
