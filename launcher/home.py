"""Where cardwise keeps its state: the run store, run directories and calibration.

Resolution order (DESIGN.md): ``--home DIR``, else ``$CARDWISE_HOME``, else the user's XDG data
directory (``platformdirs.user_data_dir("cardwise")``, e.g. ``~/.local/share/cardwise``).

Directories we create are mode 0700 and the store file 0600: run records hold command lines and
environment variables, which can carry paths and tokens other users of a shared box should not
read. A directory the user already owns keeps the mode they gave it, as long as it is theirs and
nobody else can write it (``launcher.store_safety``): otherwise every command refuses the home.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from advisor.errors import ResourceShortage, UserError
from advisor.paths import ENV_HOME, resolve_home  # noqa: F401 - re-exported for the launcher

STORE_NAME = "runs.sqlite"
RUNS_DIR = "runs"

# Where a home never goes (cardwise's choice, from the Filesystem Hierarchy Standard 3.0): nowhere inside
# the trees of the system's programs, libraries, boot files and configuration, nor of the kernel's
# pseudo-filesystems (proc, sys, dev), which are not storage; as root nothing stops a write there, and a
# `--home /etc` put the store and run folders among the system's configuration.
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sbin",
                "/sys", "/usr")
# ...nor any of these itself, though a folder of cardwise's own inside them is its place (FHS: a service's
# state in /var/lib/cardwise, an add-on package in /opt/cardwise, a user's in /home/NAME/...).
SYSTEM_DIRS = ("/", "/home", "/media", "/mnt", "/opt", "/root", "/run", "/srv", "/tmp", "/var", "/var/cache",
               "/var/lib", "/var/log", "/var/spool", "/var/tmp")


def refuse_system_home(home: Path) -> None:
    """A UserError for a home that is, or (for ``SYSTEM_TREES``) is inside, a system directory; the
    path as given and as resolved (``/lib`` links to ``/usr/lib`` on a merged-/usr system) are both checked."""
    for path in {Path(os.path.abspath(home)), Path(os.path.realpath(home))}:
        text = str(path)
        tree = next((t for t in SYSTEM_TREES if text == t or text.startswith(t + "/")), None)
        if tree is not None or text in SYSTEM_DIRS:
            where = f"inside {tree}" if tree is not None and text != tree else "a system directory"
            raise UserError(f"the cardwise home would be {where}: it holds a run store and run folders, "
                            "not the system's files", where=str(home),
                            fix="pass a folder of its own, e.g. --home /var/lib/cardwise (a service) or leave "
                                "--home out (~/.local/share/cardwise)")


def _mkdir_private(path: Path) -> None:
    """Create ``path`` (and parents) with mode 0700; leave an existing directory's mode alone."""
    if path.is_dir():
        return
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path, 0o700)  # mkdir's mode is masked by the umask
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise ResourceShortage(f"cannot create {path.name}: no space left on the device; this is transient",
                                   where=str(path), fix=f"free space on that disk (df -h {path.parent}) and run it again") from None
        raise UserError(f"cannot create the cardwise home: {exc.strerror}", where=str(path),
                        fix="pass a writable directory with --home DIR or set CARDWISE_HOME") from None


def check_home(home: Path) -> Path:
    """An existing home (and its ``runs/``) that is the caller's and writable by nobody else;
    UserError otherwise (a missing home included: readers have nothing to read)."""
    from launcher.store_safety import check_ancestors, check_dir

    check_ancestors(home)
    if not home.exists():
        raise UserError("no cardwise home here", where=str(home), fix="`advise runs --home DIR` to look elsewhere")
    if not home.is_dir():
        raise UserError("the cardwise home is not a directory", where=str(home),
                        fix="pass a directory with --home DIR or set CARDWISE_HOME")
    check_dir(home)
    if (home / RUNS_DIR).exists():
        check_dir(home / RUNS_DIR, "the home's runs/ folder")
    return home


def ensure_home(home: Path) -> Path:
    """Create the home and its ``runs/`` folder if needed, check them (``check_home``); return the home."""
    from launcher.store_safety import check_ancestors

    refuse_system_home(home)
    if home.exists() and not home.is_dir():
        raise UserError("the cardwise home is not a directory", where=str(home),
                        fix="pass a directory with --home DIR or set CARDWISE_HOME")
    check_ancestors(home)  # before creating anything under them
    _mkdir_private(home)
    _mkdir_private(home / RUNS_DIR)
    check_home(home)
    for path, what in ((home, "the cardwise home"), (home / RUNS_DIR, "the home's runs/ folder")):
        _check_writable(path, what)
    return home


def _check_writable(path: Path, what: str) -> None:
    """A writer's home and runs/ must take new files (the store's, the lock's, run folders): a 0555 one
    failed with a traceback at the first file. ``os.access`` asks the kernel, so root passes as it writes."""
    if not os.access(path, os.W_OK | os.X_OK):
        mode = oct(os.stat(path).st_mode & 0o777)[2:]
        raise UserError(f"{what} is not writable (mode {mode})", where=str(path),
                        fix=f"chmod u+w {path}, or pass another home with --home DIR")


def store_path(home: Path) -> Path:
    return home / STORE_NAME


def run_dir(home: Path, run_id: str) -> Path:
    """The directory of one run: plan, Accelerate config, command, logs, metrics."""
    return home / RUNS_DIR / run_id


def make_run_dir(home: Path, run_id: str) -> Path:
    path = run_dir(home, run_id)
    ensure_home(home)
    _mkdir_private(path)
    return path


def new_run(store, home: Path, plan, target, *, resumed_from: str | None = None):
    """A queued record for ``plan`` and its private run directory: (record, run_dir)."""
    label = f"{plan.model.label()} · {target.label()}" + (f" · resumes {resumed_from}" if resumed_from else "")
    from launcher.procs import owner_identity

    rec = store.create(label=label, plan=plan.model_dump(mode="json"), owner=owner_identity())
    rdir = make_run_dir(home, rec.id)
    return store.update(rec.id, run_dir=str(rdir), target=target.model_dump(), resumed_from=resumed_from), rdir
