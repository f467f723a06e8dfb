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
- Nothing is trusted before ``launcher.store_safety`` checked it (owner, mode, links, a 0-byte or
  corrupt file); readers open it read-only. The record model lives in ``launcher.records``.
- A connection waits for another process's write lock at most ``$CARDWISE_STORE_WAIT`` seconds
  (default 30; docs/service.md "Ends recorded late"), then the write fails and the caller copes
  (a run's end is settled later from its run directory).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from advisor.errors import ResourceShortage, UserError
from launcher import store_safety
from launcher.records import (ALLOWED, STATUSES, TERMINAL, Attempt, MetricsSummary, RunRecord,  # noqa: F401
                              Status)  # re-exported: the store's callers import the records from here

_JSON_COLUMNS = ("plan", "command", "attempts", "metrics", "gpus", "owner", "target", "slurm")
_COLUMNS = ("id", "status", "label", "created", "started", "ended", "plan", "command", "run_dir",
            "attempts", "exit_code", "metrics", "gpus", "pid", "pgid", "service_attempts", "error", "owner",
            "target", "resumed_from", "slurm")

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
    "ALTER TABLE runs ADD COLUMN owner TEXT",
    # what the ranks run and the run a resumed one continues (advise launch --resume)
    "ALTER TABLE runs ADD COLUMN target TEXT; ALTER TABLE runs ADD COLUMN resumed_from TEXT",
    # the Slurm job a run was handed to (advise submit --slurm; launcher.slurm_jobs): job id, state, output
    "ALTER TABLE runs ADD COLUMN slurm TEXT",
]


ENV_STORE_WAIT = "CARDWISE_STORE_WAIT"
# SQLite's busy timeout for every write: long enough to outlast any transaction cardwise holds (each is
# one short BEGIN IMMEDIATE ... COMMIT), short enough that a store locked by a stuck process is reported.
DEFAULT_STORE_WAIT_S = 30.0


def store_wait_s() -> float:
    """How long a store connection waits for another process's lock: ``$CARDWISE_STORE_WAIT`` seconds,
    else 30. A script that would rather fail fast than wait (or a store on a slow network disk that
    needs longer) sets it; a value that is not a positive number is refused, naming the variable."""
    text = os.environ.get(ENV_STORE_WAIT, "").strip()
    if not text:
        return DEFAULT_STORE_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise UserError(f"{ENV_STORE_WAIT}={text!r} is not a number of seconds above 0",
                        fix=f"unset {ENV_STORE_WAIT} (30 s) or set it to e.g. 5")
    return value


RUN_ID_CHARS = 8
# cardwise's choice: a prefix names one run only when it says enough to be meant; 4 hex digits are
# 65,536 values, so two runs of a store of a few hundred rarely share one (and then both are named).
MIN_ID_PREFIX = 4
# Ids are RUN_ID_CHARS long; a few times that leaves room for ids other tools give (tui.demo's labels).
MAX_ID_CHARS = 64


def new_run_id() -> str:
    """8 hex digits: short enough to type (`advise show 3fa9c2d1`, prefixes of 4 or more work), random enough."""
    return secrets.token_hex(RUN_ID_CHARS // 2)


class RunStore:
    """Run records in ``path``. Cheap to construct; every call opens its own connection.

    ``readonly``: never write, never create (``advise runs/show/logs``: they work on a store
    another process holds locked, or on a read-only disk). Opening checks the files first
    (``launcher.store_safety``: owner, mode, links, emptiness) and SQLite's ``quick_check``.
    A connection waits ``store_wait_s()`` for another process's lock.
    """

    def __init__(self, path: Path, *, readonly: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        self.busy_s = store_wait_s()
        self._init()

    @classmethod
    def open(cls, home: Path, *, readonly: bool = False) -> "RunStore":
        from launcher.home import check_home, ensure_home, store_path

        return cls(store_path(check_home(home) if readonly else ensure_home(home)), readonly=readonly)

    # ------------------------------------------------------------------ plumbing
    def _init(self) -> None:
        exists = store_safety.check_store_files(self.path)
        if not exists:
            if self.readonly:
                raise UserError("no run store here yet", where=str(self.path), fix="`advise runs --home DIR` to look elsewhere")
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                store_safety.create_store(self.path, _migrate)
            except sqlite3.Error as exc:
                raise self._error(exc) from None
        try:
            with self._conn() as db:
                check = db.execute("PRAGMA quick_check").fetchone()[0]
                if check != "ok":
                    raise store_safety.corrupt(self.path, f"quick_check: {check}")
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version > len(_MIGRATIONS):  # never write (or migrate) a schema we do not know
                    raise UserError(f"the run store was written by a newer cardwise (schema {version}; this one "
                                    f"knows up to {len(_MIGRATIONS)}): refusing to use it, so nothing of it is lost",
                                    where=str(self.path),
                                    fix="upgrade cardwise (pip install -U cardwise) or use another --home")
                if not self.readonly:
                    _refuse_read_only(self.path)
                    _migrate(db)
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def _error(self, exc: sqlite3.Error) -> UserError:
        if store_safety.is_corruption(exc):
            return store_safety.corrupt(self.path, str(exc))
        full = _disk_full(self.path.parent)
        if full or (getattr(exc, "sqlite_errorcode", 0) & 0xFF) == 13:  # SQLITE_FULL
            return ResourceShortage(f"the disk holding the run store is full ({full or exc}); this is transient",
                                    where=str(self.path), fix="free space on that disk (df -h "
                                    f"{self.path.parent}) and run it again; nothing was recorded")
        if "locked" in str(exc) or "busy" in str(exc):
            return UserError(f"the run store is busy: {exc} (held by another process for over {self.busy_s:g} s)",
                             where=str(self.path), fix="try again; `advise serve` holds it only for moments "
                             f"(${ENV_STORE_WAIT} sets how long to wait)")
        return UserError(f"cannot use the run store: {exc}", where=str(self.path),
                         fix="check the --home directory is yours and writable, or use another --home")

    @contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        try:
            if self.readonly:
                db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=self.busy_s, isolation_level=None)
            else:
                db = sqlite3.connect(self.path, timeout=self.busy_s, isolation_level=None)
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        try:
            db.row_factory = sqlite3.Row
            db.execute(f"PRAGMA busy_timeout = {int(self.busy_s * 1000)}")
            if not self.readonly:
                db.execute("PRAGMA synchronous = NORMAL")  # safe with WAL; a power cut loses the last commit at worst
            yield db
        except sqlite3.DatabaseError as exc:
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            if store_safety.is_corruption(exc):
                raise store_safety.corrupt(self.path, str(exc)) from None
            if (getattr(exc, "sqlite_errorcode", 0) & 0xFF) == 8:  # SQLITE_READONLY: made read-only while in use
                raise UserError(f"the run store became read-only: {exc}", where=str(self.path),
                                fix=f"chmod u+w {self.path} (0600) and check its disk is mounted read-write") from None
            raise
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            db.close()

    def settler(self) -> "RunStore":
        """This (checked) store for the small writes of a read that settles records: writable, and
        waiting at most 2 s for a busy writer, so ``advise runs`` never hangs (the next read retries)."""
        other = object.__new__(RunStore)
        other.path, other.readonly, other.busy_s = self.path, False, min(2.0, self.busy_s)
        return other

    def data_version(self) -> "ChangeWatch":
        """A watch that says cheaply whether any process committed to the store since last asked."""
        return ChangeWatch(self.path, self.busy_s)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.readonly:
            raise PermissionError(f"{self.path} is open read-only")
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
               gpus: list[int] | None = None, run_id: str | None = None, owner: dict | None = None) -> RunRecord:
        """Insert a new run (``queued`` unless told otherwise) and return it. ``owner``: the process that
        will run it (``launcher.procs.owner_identity``), recorded in the same insert, so no moment exists
        when a foreground run's record names nobody (``launcher.settle`` ends it if that process dies)."""
        if status not in ("queued", "running"):
            raise ValueError(f"a run starts queued or running, not {status}")
        now = time.time()
        for _ in range(8):
            rid = run_id or new_run_id()
            fields = self._encode({"status": status, "label": label, "created": now,
                                   "started": now if status == "running" else None, "plan": plan,
                                   "command": command, "run_dir": None if run_dir is None else str(run_dir),
                                   "gpus": gpus, "attempts": [], "owner": owner})
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
        """The run with this id, or the one run whose id starts with ``run_id`` when that is at least
        ``MIN_ID_PREFIX`` characters; a one-line UserError otherwise (naming close ids where several match).

        An empty or 1-character prefix would name whichever run happens to be alone in the store (``advise
        cancel ''`` cancelled it); an id longer than ``MAX_ID_CHARS`` is no id (one over 50,000 characters
        crashed SQLite's LIKE, so prefixes are compared with ``substr`` and no pattern at all)."""
        if len(run_id) > MAX_ID_CHARS:
            raise UserError(f"'{run_id[:16]}...' ({len(run_id)} characters) is not a run id: ids are "
                            f"{RUN_ID_CHARS} hex characters", fix="`advise runs` lists the runs' ids")
        with self._conn() as db:
            rec = self._get(db, run_id)
            if rec is not None:
                return rec
            if len(run_id) < MIN_ID_PREFIX:
                raise UserError(f"no run '{run_id}' in {self.path.parent}: give the whole id or at least "
                                f"{MIN_ID_PREFIX} of its characters", fix="`advise runs` lists the runs' ids")
            rows = db.execute("SELECT * FROM runs WHERE substr(id, 1, ?) = ? ORDER BY created",
                              (len(run_id), run_id)).fetchall()
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


class ChangeWatch:
    """``PRAGMA data_version`` on one long-lived connection: it changes when any *other* connection
    commits, and every writer here uses its own connection, so one integer query tells the queue
    service whether re-reading the queue can change anything."""

    def __init__(self, path: Path, busy_s: float = DEFAULT_STORE_WAIT_S):
        # read-write mode although it never writes: a read-only connection cannot create the WAL's
        # -shm file, which disappears whenever the last other connection closes
        self._db = sqlite3.connect(path, timeout=busy_s, isolation_level=None, check_same_thread=False)
        self._seen: int | None = None

    def changed(self) -> bool:
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        changed, self._seen = version != self._seen, version
        return changed

    def close(self) -> None:
        self._db.close()


def _migrate(db: sqlite3.Connection) -> None:
    """WAL, then the schema migrations not applied yet, in one write transaction."""
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("BEGIN IMMEDIATE")
    version = db.execute("PRAGMA user_version").fetchone()[0]
    for i, sql in enumerate(_MIGRATIONS[version:], start=version + 1):
        _run_script(db, sql)
        db.execute(f"PRAGMA user_version = {i}")
    db.execute("COMMIT")


def _run_script(db: sqlite3.Connection, sql: str) -> None:
    """Run several statements inside the caller's transaction (executescript would COMMIT first)."""
    for stmt in sql.split(";"):
        if stmt.strip():
            db.execute(stmt)


# Below this much free space (or with no free inode) an SQLite I/O error is read as a full disk: SQLite
# reports ENOSPC on its -shm/-wal files as "disk I/O error" (SQLITE_IOERR), not SQLITE_FULL (seen on a
# full tmpfs, tests/test_disk_full.py). cardwise's choice: a WAL frame is one 4 KiB page plus its header.
_FULL_BELOW_BYTES = 64 << 10


def _refuse_read_only(path: Path) -> None:
    """A writer of a store it cannot write (mode 0400, a read-only mount) is refused at open, before it
    makes anything else (``advise submit`` made its run folder, then failed with SQLite's "attempt to
    write a readonly database" traceback). ``os.access`` asks the kernel, so root passes as it writes."""
    if not os.access(path, os.W_OK):
        mode = oct(os.stat(path).st_mode & 0o777)[2:]
        raise UserError(f"the run store is read-only (mode {mode}): this command records runs in it", where=str(path),
                        fix=f"chmod u+w {path} (0600), or `advise runs`/`show` to read it as it is")


def out_of_space(exc: BaseException, directory: Path) -> str | None:
    """Why ``exc`` is a full disk (ENOSPC, EDQUOT, SQLite's "disk is full", or any error while the disk
    holding ``directory`` has no room): a fault that passes once space is freed; None for any other."""
    import errno

    if isinstance(exc, ResourceShortage):
        return exc.what
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return exc.strerror or "no space left on the device"
    if isinstance(exc, sqlite3.Error) and (getattr(exc, "sqlite_errorcode", 0) & 0xFF) == 13:  # SQLITE_FULL
        return str(exc)
    if isinstance(exc, (OSError, sqlite3.Error)):
        return _disk_full(directory)
    return None


def free_bytes(directory: Path) -> int | None:
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _disk_full(directory: Path) -> str | None:
    """"0 bytes free" when the filesystem holding ``directory`` has (almost) no space or inodes left."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if free < _FULL_BELOW_BYTES:
        return f"{free} bytes free"
    if st.f_files and st.f_favail == 0:
        return "no free inode"
    return None
