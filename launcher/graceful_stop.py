"""A graceful stop: the ranks stop at the next step boundary with a checkpoint of that step, so a stop
loses no training (issue 31).

Who asks. The runner, whenever it stops a launch it started (``launcher.runner.Launch``): the queue
service's graceful stop (SIGTERM/Ctrl-C of ``advise serve``: the run is handed back to the queue),
``advise cancel`` of a running run, Ctrl-C or SIGTERM of a foreground ``advise launch``. It writes
``attempt-N/stop-request`` (the ranks find it through ``$CARDWISE_STOP_REQUEST``) and waits up to
the grace period (``--grace``) for the launcher to exit; after that it stops the process tree as
before (SIGTERM, then SIGKILL) and the run resumes from its older checkpoint. The request is a
file, not a signal: a signal to the launcher would start ``accelerate launch``'s own 5-second and
torchrun's 30-second kill timers whatever the grace, and a SIGTERM the ranks caught could not
interrupt a rank blocked in a collective whose peer died. Signals sent to the ranks by anyone
else (``kill``, Slurm) stop them at once, as they always did.

When. The runtime's batch stream (``launcher.checkpoints``) looks at every step boundary, before
the next step's first micro-batch. Each rank may see the file at a different boundary, so the ranks
agree: an all_reduce (MAX) of their flags at every boundary, on a gloo group (CPU tensors: no
device synchronisation; the default group when it is gloo already), so every rank stops after the
same step and none is left waiting in a collective. Measured cost: ``benchmarks/speed/stop_check``.

What. Every rank saves the step's state with ``Checkpoints.save`` (the format, manifest and checks of
``--checkpoint-every``'s checkpoints) under ``checkpoints/step-N/``, also when the run saves no
periodic checkpoints (then a finished run deletes it: it was for the stop only). Rank 0 writes
``attempt-N/stopped.json`` ({step, checkpoint}); every rank exits with ``STOPPED_EXIT`` (143, what a
SIGTERM would give), never 0: whatever reads only the exit status sees a stop, not a success.
The runtime announces that it listens (``attempt-N/stop-listening``, once its stream starts): a
script that does not use ``Runtime.batches`` is stopped by signals, without waiting for nothing.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

ENV_STOP_REQUEST = "CARDWISE_STOP_REQUEST"  # launcher.runner sets it on each launch: the file a stop writes
REQUEST_NAME = "stop-request"
LISTENING_NAME = "stop-listening"
STOPPED_NAME = "stopped.json"
STOPPED_EXIT = 143  # 128 + SIGTERM: a stopped rank reads as one a signal stopped, never as a success


# ---------------------------------------------------------------- the runner's side
def request_path(attempt_dir: Path) -> Path:
    return Path(attempt_dir) / REQUEST_NAME


def ask(attempt_dir: Path) -> bool:
    """Ask the ranks of the launch in ``attempt_dir`` to stop at their next step boundary; False when
    they do not listen (no ``stop-listening``: stop them by signal instead)."""
    adir = Path(attempt_dir)
    if not (adir / LISTENING_NAME).exists():
        return False
    try:
        fd = os.open(adir / REQUEST_NAME, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        os.close(fd)
    except OSError:
        return False
    return True


def stopped(attempt_dir: Path | None) -> dict | None:
    """``stopped.json`` of a launch the ranks stopped gracefully ({step, checkpoint}), or None."""
    if attempt_dir is None:
        return None
    try:
        data = json.loads((Path(attempt_dir) / STOPPED_NAME).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("step"), int) else None


def describe(info: dict) -> str:
    """One line for a log: where the stopped run will go on from."""
    where = Path(info["checkpoint"]).name if info.get("checkpoint") else None
    if info["step"] == 0:
        return "stopped before its first step"
    return f"stopped after step {info['step']} with a checkpoint ({where})" if where else \
        f"stopped after step {info['step']}"


# ---------------------------------------------------------------- the ranks' side
class StopWatch:
    """One rank's view of stop requests: ``agreed()`` at every step boundary."""

    def __init__(self, rt, request: Path | None):
        self.rt = rt
        self.request = request
        self._group = None

    @classmethod
    def from_env(cls, rt) -> "StopWatch":
        path = os.environ.get(ENV_STOP_REQUEST)
        return cls(rt, Path(path) if path and rt.run_dir is not None else None)

    @property
    def active(self) -> bool:
        return self.request is not None

    def listen(self) -> None:
        """At the start of the batch stream (every rank: the gloo group is made collectively)."""
        if not self.active:
            return
        import torch.distributed as dist

        if self.rt.world_size > 1 and dist.is_available() and dist.is_initialized():
            # CPU tensors on gloo: agreeing needs no device synchronisation (NCCL would sync every step).
            self._group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        if self.rt.is_main:
            try:
                (self.request.parent / LISTENING_NAME).write_text(json.dumps({"pid": os.getpid(), "time": time.time()}))
            except OSError:  # a full disk: the runner then stops this run by signals, as before
                pass

    def agreed(self) -> bool:
        """Whether the ranks stop at this boundary: any rank saw a request (all ranks call this at the same
        boundaries, so the collective always matches)."""
        if not self.active:
            return False
        local = self.request.exists()
        if self.rt.world_size == 1:
            return local
        import torch
        import torch.distributed as dist

        flag = torch.tensor([1 if local else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group)
        return bool(flag.item())

    def record(self, step: int, checkpoint: Path | None) -> None:
        """Rank 0: ``stopped.json`` beside the request, for the runner and the service's log."""
        if self.rt.is_main and self.request is not None:
            tmp = self.request.with_name(f".{STOPPED_NAME}.tmp")
            try:
                tmp.write_text(json.dumps({"step": step, "checkpoint": str(checkpoint) if checkpoint else None,
                                           "time": time.time()}))
                tmp.replace(self.request.with_name(STOPPED_NAME))
            except OSError:  # the checkpoint is what matters; the note is for the logs
                pass
