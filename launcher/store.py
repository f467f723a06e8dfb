"""The run store: one SQLite file (stdlib ``sqlite3``) holding a record per run.

Used by ``advise launch`` (foreground runs), ``advise runs/show`` and the queue service, possibly
from several processes at once, so:

- WAL journal: readers never block the writer (``advise runs`` while a launch is writing).
- Every write is one ``BEGIN IMMEDIATE`` transaction on a fresh connection, so a status change
  is atomic across processes: ``transition(id, "running", expect=["queued"])`` succeeds for
  exactly one caller, which is how the service claims a queued run and how ``cancel`` races
  with a run that is just finishing.
- The file is created 0600 (SQLite gives its ``-wal``/``-shm`` files the same mode): records
  hold command lines and environments.
- The schema is versioned with ``PRAGMA user_version``; a new column is one more entry in
  ``_MIGRATIONS``.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.errors import UserError

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
    status: Literal["running", "succeeded", "failed", "oom", "cancelled"] = "running"
    exit_code: int | None = None
    started: float | None = None
    ended: float | None = None
    log_dir: str | None = Field(None, description="this attempt's logs (launcher.log, ranks/)")
    error: str | None = None


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

    @classmethod
    def from_jsonl(cls, path: Path, attempt: int | None = None) -> "MetricsSummary | None":
        """Summarise ``metrics.jsonl`` rows (launcher.runtime writes them) of one attempt.

        Throughput is steady state: each rank's first logged interval (warm-up, compile,
        allocator growth) is dropped when it has more, the median of the rest is taken, and the
        ranks' medians are summed (rows are per rank, in local samples).
        """
        rows = []
        try:
            with open(path) as f:
                for line in f:
                    try:
                        row = json.loads(line)
                    except ValueError:
                        continue  # a line cut short by a kill
                    if attempt is None or row.get("attempt", attempt) == attempt:
                        rows.append(row)
        except OSError:
            return None
        rows = [r for r in rows if "step" in r]
        if not rows:
            return None
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
        return cls(steps=int(lead[-1]["step"]), first_loss=lead[0].get("loss"), last_loss=lead[-1].get("loss"),
                   samples_per_s=steady("samples_per_s"), tokens_per_s=steady("tokens_per_s"),
                   peak_gib=max(peaks) if peaks else None, ranks=len(by_rank),
                   wall_s=(max(times) - min(times)) if len(times) > 1 else None)


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

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def plan_model(self):
        from advisor.plan import Plan

        return None if self.plan is None else Plan.model_validate(self.plan)


_JSON_COLUMNS = ("plan", "command", "attempts", "metrics", "gpus")
_COLUMNS = ("id", "status", "label", "created", "started", "ended", "plan", "command", "run_dir",
            "attempts", "exit_code", "metrics", "gpus", "pid", "pgid", "service_attempts", "error")

_MIGRATIONS: list[str] = [
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        status TEXT NOT NULL CHECK (status IN ('queued','running','succeeded','failed','cancelled')),
        label TEXT NOT NULL DEFAULT '',
        created REAL NOT NULL,
        started REAL,
        ended REAL,
        plan TEXT,
        command TEXT,
        run_dir TEXT,
        attempts TEXT NOT NULL DEFAULT '[]',
        exit_code INTEGER,
        metrics TEXT,
        gpus TEXT,
        pid INTEGER,
        pgid INTEGER,
        service_attempts INTEGER NOT NULL DEFAULT 0,
        error TEXT
    );
    CREATE INDEX runs_status_created ON runs (status, created);
    """,
]


def new_run_id() -> str:
    """8 hex digits: short enough to type (`advise show 3fa9c2d1`, prefixes work), random enough."""
    return secrets.token_hex(4)


class RunStore:
    """Run records in ``path``. Cheap to construct; every call opens its own connection."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._init()

    @classmethod
    def open(cls, home: Path) -> "RunStore":
        from launcher.home import ensure_home, store_path

        return cls(store_path(ensure_home(home)))

    # ------------------------------------------------------------------ plumbing
    def _init(self) -> None:
        if not self.path.exists():
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # Create the file 0600 ourselves: sqlite3 would create it with the umask's mode.
            os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
        with self._conn() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("BEGIN IMMEDIATE")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for i, sql in enumerate(_MIGRATIONS[version:], start=version + 1):
                _run_script(db, sql)
                db.execute(f"PRAGMA user_version = {i}")
            db.execute("COMMIT")

    @contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        try:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except sqlite3.Error as exc:
            raise UserError(f"cannot open the run store: {exc}", where=str(self.path),
                            fix="check the --home directory is writable") from None
        try:
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA busy_timeout = 30000")
            db.execute("PRAGMA synchronous = NORMAL")  # safe with WAL; a power cut loses the last commit at worst
            yield db
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._conn() as db:
            db.execute("BEGIN IMMEDIATE")  # take the write lock now: read-check-write is atomic
            yield db
            db.execute("COMMIT")

    @staticmethod
    def _record(row: sqlite3.Row) -> RunRecord:
        data = dict(row)
        for col in _JSON_COLUMNS:
            if data.get(col) is not None:
                data[col] = json.loads(data[col])
        if data.get("attempts") is None:
            data["attempts"] = []
        return RunRecord.model_validate(data)

    @staticmethod
    def _encode(fields: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key, value in fields.items():
            if key not in _COLUMNS or key == "id":
                raise ValueError(f"not a run store column: {key}")
            if isinstance(value, BaseModel):
                value = value.model_dump(mode="json")
            elif key == "attempts" and value is not None:
                value = [a.model_dump(mode="json") if isinstance(a, BaseModel) else a for a in value]
            if key in _JSON_COLUMNS and value is not None:
                value = json.dumps(value)
            out[key] = value
        return out

    def _get(self, db: sqlite3.Connection, run_id: str) -> RunRecord | None:
        row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return None if row is None else self._record(row)

    # ------------------------------------------------------------------ API
    def create(self, *, label: str = "", plan: dict | BaseModel | None = None, status: Status = "queued",
               run_dir: str | os.PathLike | None = None, command: dict | None = None,
               gpus: list[int] | None = None, run_id: str | None = None) -> RunRecord:
        """Insert a new run (``queued`` unless told otherwise) and return it."""
        if status not in ("queued", "running"):
            raise ValueError(f"a run starts queued or running, not {status}")
        now = time.time()
        for _ in range(8):
            rid = run_id or new_run_id()
            fields = self._encode({"status": status, "label": label, "created": now,
                                   "started": now if status == "running" else None, "plan": plan,
                                   "command": command, "run_dir": None if run_dir is None else str(run_dir),
                                   "gpus": gpus, "attempts": []})
            cols = ", ".join(["id", *fields])
            marks = ", ".join("?" * (len(fields) + 1))
            try:
                with self._write() as db:
                    db.execute(f"INSERT INTO runs ({cols}) VALUES ({marks})", (rid, *fields.values()))
                    return self._get(db, rid)
            except sqlite3.IntegrityError:
                if run_id:
                    raise ValueError(f"run id {run_id} exists") from None
        raise RuntimeError("could not pick a unique run id")

    def get(self, run_id: str) -> RunRecord:
        """The run with this id or unique id prefix; a UserError naming close ids otherwise."""
        with self._conn() as db:
            rec = self._get(db, run_id)
            if rec is not None:
                return rec
            rows = db.execute("SELECT * FROM runs WHERE id LIKE ? ESCAPE '\\' ORDER BY created", (_like_prefix(run_id),)).fetchall()
        if len(rows) == 1:
            return self._record(rows[0])
        if len(rows) > 1:
            raise UserError(f"run id prefix '{run_id}' matches {len(rows)} runs",
                            fix="give more characters: " + ", ".join(r["id"] for r in rows[:5]))
        raise UserError(f"no run '{run_id}' in {self.path.parent}", fix="`advise runs` lists the runs (and --home picks the store)")

    def list(self, status: str | Iterable[str] | None = None, limit: int | None = None) -> list[RunRecord]:
        """Runs oldest first, optionally only those in ``status``."""
        sql, params = "SELECT * FROM runs", []
        if status is not None:
            wanted = [status] if isinstance(status, str) else list(status)
            sql += f" WHERE status IN ({', '.join('?' * len(wanted))})"
            params += wanted
        if limit is None:
            sql += " ORDER BY created, rowid"
        else:  # the newest `limit` runs, still listed oldest first
            sql += " ORDER BY created DESC, rowid DESC LIMIT ?"
            params.append(int(limit))
        with self._conn() as db:
            records = [self._record(r) for r in db.execute(sql, params).fetchall()]
        return records if limit is None else records[::-1]

    def update(self, run_id: str, **fields: Any) -> RunRecord:
        """Set non-status fields (pid, command, metrics, ...). Status changes go through transition()."""
        if "status" in fields:
            raise ValueError("change status with transition(), which checks the current status atomically")
        enc = self._encode(fields)
        with self._write() as db:
            if enc:
                sets = ", ".join(f"{k} = ?" for k in enc)
                db.execute(f"UPDATE runs SET {sets} WHERE id = ?", (*enc.values(), run_id))
            rec = self._get(db, run_id)
        if rec is None:
            raise KeyError(run_id)
        return rec

    def transition(self, run_id: str, to: Status, *, expect: Iterable[str] | None = None,
                   **fields: Any) -> RunRecord | None:
        """Atomically move ``run_id`` to ``to`` if its status is in ``expect`` (default: every status
        ``to`` may follow), setting ``fields`` in the same transaction. Returns the updated record,
        or None when the run was not in an expected status (someone else moved it first).

        Sets ``started`` on entering running and ``ended`` on entering a terminal status, unless
        given; entering running or queued clears ``ended``.
        """
        if to not in STATUSES:
            raise ValueError(f"unknown status {to}")
        allowed_from = {s for s, nxt in ALLOWED.items() if to in nxt}
        frm = allowed_from if expect is None else set(expect) & allowed_from
        if not frm:
            return None
        now = time.time()
        if to == "running":
            fields.setdefault("started", now)
            fields.setdefault("ended", None)
        elif to in TERMINAL:
            fields.setdefault("ended", now)
            fields.setdefault("pid", None)
            fields.setdefault("pgid", None)
        elif to == "queued":
            fields.setdefault("ended", None)
            fields.setdefault("pid", None)
            fields.setdefault("pgid", None)
        enc = self._encode(fields)
        sets = ", ".join(["status = ?", *(f"{k} = ?" for k in enc)])
        marks = ", ".join("?" * len(frm))
        with self._write() as db:
            cur = db.execute(f"UPDATE runs SET {sets} WHERE id = ? AND status IN ({marks})",
                             (to, *enc.values(), run_id, *sorted(frm)))
            return self._get(db, run_id) if cur.rowcount == 1 else None

    def claim_next(self, **fields: Any) -> RunRecord | None:
        """Move the oldest queued run to running (for the queue service); None if none is queued."""
        while True:
            with self._conn() as db:
                row = db.execute("SELECT id FROM runs WHERE status = 'queued' ORDER BY created, rowid LIMIT 1").fetchone()
            if row is None:
                return None
            rec = self.transition(row["id"], "running", expect=["queued"], **fields)
            if rec is not None:
                return rec  # else another claimer won this one: look again

    def record_attempt(self, run_id: str, attempt: Attempt) -> RunRecord:
        """Add ``attempt``, or replace the attempt with the same ``n`` (read-modify-write, atomic)."""
        with self._write() as db:
            rec = self._get(db, run_id)
            if rec is None:
                raise KeyError(run_id)
            attempts = [a for a in rec.attempts if a.n != attempt.n] + [attempt]
            attempts.sort(key=lambda a: a.n)
            db.execute("UPDATE runs SET attempts = ? WHERE id = ?",
                       (json.dumps([a.model_dump(mode="json") for a in attempts]), run_id))
            return self._get(db, run_id)

    def delete(self, run_id: str) -> bool:
        with self._write() as db:
            return db.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount == 1


def _run_script(db: sqlite3.Connection, sql: str) -> None:
    """Run several statements inside the caller's transaction (executescript would COMMIT first)."""
    for stmt in sql.split(";"):
        if stmt.strip():
            db.execute(stmt)


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
