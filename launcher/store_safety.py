"""Trusting the files of a cardwise home: owner, mode, links, emptiness, corruption, backups.

A home is trusted only when its owner is the caller and nobody else can write it: a root service
on a home another user can write would run that user's queued scripts as root. Every check here
compares ``st_uid`` with ``os.geteuid()`` and refuses group/other write bits; each refusal is a
``UserError`` (exit 2, one line plus the fix). Files are examined with ``lstat`` and refused when
they are symbolic links: in a directory only the owner can write nobody can swap them after the
check, so checking then opening is safe.

The store (``runs.sqlite``) is created atomically, already initialised, by linking a finished
temporary file into place. So cardwise never leaves a 0-byte store behind, and an existing
0-byte store means records were lost (disk full, truncation, a bad restore): it is refused, never
treated as a fresh store. A store SQLite cannot read, or whose ``PRAGMA quick_check`` fails, is
refused too, after a copy is kept (``runs.sqlite.corrupt-<mtime>``). The service refreshes
``runs.sqlite.bak`` (SQLite's online backup) when it starts and hourly; the fixes name it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sqlite3
import stat
from pathlib import Path

from advisor.errors import UserError

BACKUP_SUFFIX = ".bak"


class StoreCorrupt(UserError):
    """The run store cannot be trusted: empty, unreadable as SQLite, or failing its check."""


def _who() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return str(os.geteuid())


def _check_owner_mode(path: Path, st: os.stat_result, what: str) -> None:
    if st.st_uid != os.geteuid():
        raise UserError(f"{what} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}): refusing to trust it",
                        where=str(path), fix=f"chown {_who()} {path} if it is yours, or use another --home")
    if st.st_mode & 0o022:
        raise UserError(f"{what} is writable by {'group and others' if st.st_mode & 0o022 == 0o022 else 'group' if st.st_mode & 0o020 else 'others'} "
                        f"(mode {stat.S_IMODE(st.st_mode):04o}): refusing to trust it",
                        where=str(path), fix=f"chmod go-w {path}, or use another --home")


def check_dir(path: Path, what: str = "the cardwise home") -> None:
    """``path`` (an existing directory, links resolved: the user named it) is the caller's, not others'."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{what} is not a directory", where=str(path), fix="pass a directory with --home DIR")
    _check_owner_mode(path, st, what)


def check_ancestors(home: Path) -> None:
    """Every directory above the home (as named, and with links resolved) belongs to root or the caller
    and is writable by nobody else unless sticky (like /tmp): otherwise its owner could rename the home
    away and put a directory of theirs in its place between a check and a use, and a root service would
    run what they queued. Checked on every use; only root or the caller can change such parents."""
    me = os.geteuid()
    named = Path(os.path.abspath(home))
    seen: set[Path] = set()
    for chain in (named.parents, Path(os.path.realpath(home)).parents):
        for parent in chain:
            if parent in seen:
                continue
            seen.add(parent)
            try:
                st = os.stat(parent)  # a link among the parents is judged by where it leads (and its own parent)
            except OSError:
                continue  # not there (yet): ensure_home creates it, as the caller's
            if st.st_uid not in (0, me):
                raise UserError(f"the home's parent directory {parent} belongs to uid {st.st_uid} (not you or root): "
                                "its owner could swap the home for a directory of theirs; refusing",
                                where=str(home), fix="use a --home whose parent directories are yours or root's")
            if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
                raise UserError(f"the home's parent directory {parent} is writable by others (mode "
                                f"{stat.S_IMODE(st.st_mode):04o}, not sticky): anyone could swap the home; refusing",
                                where=str(home), fix=f"chmod go-w {parent} (or chmod +t), or use another --home")


def check_file(path: Path, what: str) -> bool:
    """An existing ``path`` is a regular file (not a link) of the caller, not writable by others.
    False when it does not exist."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise UserError(f"{what} is a symbolic link; cardwise does not follow links in its home",
                        where=str(path), fix=f"remove it (rm {path}); cardwise recreates it")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{what} is not a regular file", where=str(path), fix=f"remove it (rm {path})")
    _check_owner_mode(path, st, what)
    return True


def check_store_files(path: Path) -> bool:
    """The store and its WAL/SHM files pass ``check_file``; refuse an existing 0-byte store.
    False when there is no store yet."""
    for extra in ("-wal", "-shm", BACKUP_SUFFIX):
        check_file(path.with_name(path.name + extra), "a run store file")
    if not check_file(path, "the run store"):
        return False
    if os.lstat(path).st_size == 0:
        raise StoreCorrupt("the run store is empty (0 bytes): its records are lost (disk full? truncated?)",
                           where=str(path), fix=_restore_fix(path))
    return True


def _restore_fix(path: Path) -> str:
    bak = path.with_name(path.name + BACKUP_SUFFIX)
    aside = f"mv {path} {path}.bad"
    if bak.is_file() and bak.stat().st_size > 0:
        return f"restore the last backup ({aside} && cp {bak} {path}), or {aside} to start an empty store"
    return f"{aside} to start an empty store (no backup {bak.name} exists)"


def is_corruption(exc: sqlite3.Error) -> bool:
    """A damaged file, as opposed to a busy or unreadable one (those are OperationalError)."""
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError)


def corrupt(path: Path, detail: str) -> StoreCorrupt:
    """Keep a copy of the damaged store (once per version of it) and say what to do."""
    kept = ""
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        copy = path.with_name(f"{path.name}.corrupt-{int(st.st_mtime)}-{st.st_size}")
        if not copy.exists():
            shutil.copyfile(path, copy)
            os.chmod(copy, 0o600)
            wal = path.with_name(path.name + "-wal")
            if wal.is_file():
                shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
        kept = f"; a copy is kept in {copy.name}"
    return StoreCorrupt(f"the run store is corrupt ({detail}){kept}", where=str(path), fix=_restore_fix(path))


def create_store(path: Path, init) -> None:
    """Create ``path`` already initialised by ``init(connection)``: build a temporary file, link it
    into place (``link`` fails if the name exists, so concurrent creators agree on one store)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.new")
    try:
        os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW, 0o600))
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            init(db)
        finally:
            db.close()
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        for name in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)


def backup(path: Path) -> Path:
    """Copy the store consistently (SQLite's online backup, safe while others write) to ``.bak``."""
    dest = path.with_name(path.name + BACKUP_SUFFIX)
    tmp = path.with_name(f".{dest.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW, 0o600))
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    out = sqlite3.connect(tmp)
    try:
        src.backup(out)
        out.execute("PRAGMA journal_mode=DELETE")  # a self-contained file: no -wal to carry along
    finally:
        out.close()
        src.close()
    os.replace(tmp, dest)
    return dest
