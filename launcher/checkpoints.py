"""Checkpoints of a launched run, and resuming one (``advise launch --checkpoint-every N``, ``--resume RUN``).

Layout, inside the run directory::

    checkpoints/step-00000040/   accelerator.save_state(): model, optimizer, RNG states per rank
    checkpoints/step-00000040/cardwise.json   written last, by rank 0, after every rank saved:
                                 a checkpoint without it is incomplete and never resumed from
    model.safetensors            final weights (cardwise's models), or
    model/                       a Hugging Face model's save_pretrained (safetensors), or
    adapters/                    LoRA adapters only (peft's save_pretrained), at the end of the run

The runtime (``launcher.runtime.Runtime``) drives it: ``batches()`` (``batch_stream`` here) restores the checkpoint named
by ``$CARDWISE_RESUME`` before the first batch and saves every ``$CARDWISE_CHECKPOINT_EVERY``
optimizer steps at the step boundary; ``finish()`` saves the last state and the final weights.
At every step boundary it also asks ``launcher.graceful_stop`` whether the ranks agreed to stop:
then every rank saves that step (a stop checkpoint, ``"stop": true`` in ``cardwise.json``) and exits.
The LR schedule is not an object Accelerate saves: its position is the optimizer step, restored
from ``cardwise.json``; the learning rates themselves come back with the optimizer's state.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

from launcher.command import ENV_CHECKPOINT_EVERY, ENV_FINAL_WEIGHTS, ENV_RESUME

# A peft model's final weights: its LoRA adapters, under the run directory. Here, not in
# launcher.compromises.lora (which imports torch): the launcher's own process reads this module.
ADAPTER_DIR = "adapters"

CHECKPOINTS_DIR = "checkpoints"
META_NAME = "cardwise.json"
KEEP = 2  # cardwise's choice: the newest complete checkpoint and one before it (in case the newest is bad)
# The files of a checkpoint are hashed into cardwise.json when they total at most this much (cardwise's
# choice): sha256 ran at 2.0 GB/s on the project's 2-core CI-class VM (launcher/runtime.py's
# DIGEST_MAX_PARAMS note), so at most ~2 s per save. Larger checkpoints record sizes only, which still
# catch the usual damage (a write cut short by a full disk or a kill).
HASH_MAX_BYTES = 4 << 30
# cardwise.json is a few fields and one size (and hash) per state file; a file larger than this was not
# written by cardwise (cardwise's choice: ~100k files' entries). Nor is a step above MAX_STEP: 10**12
# optimizer steps are 1,000 a second for 31 years (a "step 10**30" resumed as a run already past its end).
META_MAX_BYTES = 16 << 20
MAX_STEP = 10**12


def checkpoints_of(rt) -> "Checkpoints":
    """The runtime's checkpointing, made on first use from the environment the launcher set."""
    if getattr(rt, "_checkpoints", None) is None:
        rt._checkpoints = Checkpoints.from_env(rt)
    return rt._checkpoints


def batch_stream(rt, loader) -> Iterator:
    """``Runtime.batches``: restore a checkpoint (eagerly, so ``rt.step`` is right before the first
    step), skip the micro-batches this rank consumed before it, then batches forever with
    ``set_epoch`` per epoch, saving at step boundaries and timing the loader."""
    from launcher.data_wait import DataWaitClock

    from launcher.graceful_stop import StopWatch

    ckpt = checkpoints_of(rt)
    ckpt.restore()
    if getattr(rt, "_data_clock", None) is None:
        rt._data_clock = DataWaitClock()  # Runtime._log reads it into each metrics row
    if getattr(rt, "_stop_watch", None) is None:
        rt._stop_watch = StopWatch.from_env(rt)
        rt._stop_watch.listen()
    return _stream(rt, loader, ckpt, rt._data_clock, rt.step * rt.plan.config.grad_accum, rt._stop_watch)


def _length(loader) -> int | None:
    """Micro-batches per epoch of a sized loader, None for a stream (IterableDataset, generator)."""
    try:
        return len(loader) or None
    except TypeError:
        return None


def _stream(rt, loader, ckpt: "Checkpoints", clock, skip: int, stop=None) -> Iterator:
    """Epoch after epoch; a resumed run's ``skip`` micro-batches are whole epochs (re-numbered, not read:
    the order is a function of the epoch, ``launcher.data_order``) and the first ones of its epoch
    (skipped as indices, unread, for a map-style DataLoader; read and dropped for a stream).
    A step boundary is the first micro-batch asked for after ``rt.step`` moved (or the very first)."""
    from launcher.data_order import can_skip_by_sampler, set_epoch

    boundary = None  # the step whose boundary was passed last
    epoch, per_epoch = 0, _length(loader)
    if skip and per_epoch:
        epoch, skip = divmod(skip, per_epoch)
    while True:
        set_epoch(loader, epoch)
        source = loader
        if skip and can_skip_by_sampler(loader):
            source, skip = rt.accelerator.skip_first_batches(loader, skip), 0
            set_epoch(source, epoch)
        fetched = 0
        for batch in clock.wrap(source):
            fetched += 1
            if skip:
                skip -= 1
                continue
            if rt.step != boundary:
                boundary = rt.step
                if stop is not None and stop.agreed():
                    ckpt.stop_here(stop)  # exits
                if ckpt.due():
                    ckpt.save()
                    clock.take()  # saving is not waiting for data
            yield batch
        if not fetched:
            raise SystemExit(f"cardwise: rank {rt.rank}'s data loader gave no batch in a whole epoch "
                             "(fewer rows than one micro-batch per rank and worker)")
        epoch += 1


def step_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR / f"step-{step:08d}"


def latest(run_dir: str | Path | None) -> Path | None:
    """The complete checkpoint with the most steps in a run directory, or None."""
    if not run_dir:
        return None
    best: tuple[int, Path] | None = None
    for p in (Path(run_dir) / CHECKPOINTS_DIR).glob("step-*"):
        meta = read_meta(p)
        if meta is not None and (best is None or meta["step"] > best[0]):
            best = (meta["step"], p)
    return None if best is None else best[1]


def _state_files(path: Path) -> list[Path]:
    return sorted(p for p in Path(path).rglob("*") if p.is_file() and not p.is_symlink()
                  and p.name not in (META_NAME, META_NAME + ".tmp"))


def manifest(path: Path) -> dict:
    """Every state file of a checkpoint: its size, and its sha256 when the whole is small enough to hash."""
    import hashlib

    files = _state_files(path)
    sizes = {str(f.relative_to(path)): f.stat().st_size for f in files}
    out: dict = {"sizes": sizes}
    if sum(sizes.values()) <= HASH_MAX_BYTES:
        digests = {}
        for f in files:
            h = hashlib.sha256()
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            digests[str(f.relative_to(path))] = h.hexdigest()
        out["sha256"] = digests
    return out


def damage(path: Path) -> str | None:
    """Why the checkpoint at ``path`` cannot be resumed from, or None when it checks out: complete
    (``cardwise.json``), and every file it recorded present with its size (and hash, when recorded).
    A checkpoint saved before cardwise recorded files is judged by ``cardwise.json`` alone."""
    meta, why = _load_meta(path)
    if meta is None:
        return why
    files = meta.get("files")
    if not isinstance(files, dict) or not isinstance(files.get("sizes"), dict):
        return None
    now = manifest(path) if isinstance(files.get("sha256"), dict) else {
        "sizes": {str(f.relative_to(path)): f.stat().st_size for f in _state_files(path)}}
    for name, size in files["sizes"].items():
        if name not in now["sizes"]:
            return f"{name} is missing"
        if now["sizes"][name] != size:
            return f"{name} has {now['sizes'][name]} bytes, saved with {size}"
    for name, digest in (files.get("sha256") or {}).items():
        if now.get("sha256", {}).get(name) != digest:
            return f"{name} changed since it was saved (sha256 differs)"
    return None


def newest_usable(run_dir: str | Path | None) -> tuple[Path | None, list[str]]:
    """The newest checkpoint of a run directory that checks out (``damage``), and one line for each
    newer one passed over: a damaged newest checkpoint falls back to the one kept before it."""
    if not run_dir:
        return None, []
    found, skipped = [], []
    for p in sorted((Path(run_dir) / CHECKPOINTS_DIR).glob("step-*"), reverse=True):
        if p.is_symlink():
            continue
        meta, why = _load_meta(p)
        if meta is not None:
            found.append((meta["step"], p))
        elif (p / META_NAME).exists():  # saved, then damaged or edited: said, not silently passed over
            skipped.append(f"{p.name} is damaged ({why})")
    found.sort(reverse=True)
    for _, p in found:
        why = damage(p)
        if why is None:
            return p, skipped
        skipped.append(f"{p.name} is damaged ({why})")
    return None, skipped


def for_retry(run_dir: Path, attempt_dir: Path, *, same_batch: bool) -> Path | None:
    """Where an OOM retry (``launcher.oom``) of a run starts: the run's newest complete checkpoint
    when the retry keeps the global batch (a step is the same samples; only the micro-batch and the
    accumulation differ), else from step 0 with the failed attempts' checkpoints moved into
    ``attempt_dir``: steps of another global batch are not these steps, and the retry's own
    checkpoints, saved under the same ``step-N`` names, would overwrite them half-way or be pruned
    as older than them (``prune``)."""
    if same_batch:
        return newest_usable(run_dir)[0]
    here = Path(run_dir) / CHECKPOINTS_DIR
    if here.is_dir() and not here.is_symlink():
        try:
            here.rename(Path(attempt_dir) / CHECKPOINTS_DIR)
        except OSError:
            pass  # left in place: the retry still runs, as before this existed
    return None


def prune(run_dir: Path, keep: int) -> list[Path]:
    """Delete all but the ``keep`` newest complete checkpoints (and incomplete ones older than them)."""
    import shutil

    done = sorted(((m["step"], p) for p in (Path(run_dir) / CHECKPOINTS_DIR).glob("step-*")
                   if (m := read_meta(p)) is not None), reverse=True)
    if len(done) <= keep:
        return []
    oldest_kept = done[keep - 1][0]
    gone = [p for p in (Path(run_dir) / CHECKPOINTS_DIR).glob("step-*")
            if p.name < step_dir(run_dir, oldest_kept).name and not p.is_symlink()]
    for p in gone:
        shutil.rmtree(p, ignore_errors=True)
    return gone


def read_meta(path: Path) -> dict | None:
    """A checkpoint's ``cardwise.json`` if it is complete and well formed (we wrote it, but the
    directory is the user's to edit: a bad one reads as no checkpoint; ``meta_problem`` says why)."""
    meta, _ = _load_meta(path)
    return meta


def meta_problem(path: Path) -> str | None:
    """Why the checkpoint's ``cardwise.json`` cannot be trusted (missing, not JSON, a field out of range),
    or None when it can."""
    return _load_meta(path)[1]


def _load_meta(path: Path) -> tuple[dict | None, str | None]:
    file = Path(path) / META_NAME
    try:
        if file.stat().st_size > META_MAX_BYTES:
            return None, f"{META_NAME} has {file.stat().st_size} bytes, more than a checkpoint's ever takes"
        meta = json.loads(file.read_text())
    except FileNotFoundError:
        return None, f"no {META_NAME}"
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested thousands deep
        return None, f"{META_NAME} is not readable JSON ({type(exc).__name__})"
    if not isinstance(meta, dict):
        return None, f"{META_NAME} is not an object"
    step = meta.get("step")
    if type(step) is not int or not 1 <= step <= MAX_STEP:
        return None, f"{META_NAME} says step {str(step)[:24]}, not a step from 1 to {MAX_STEP:,}"
    for key in ("world_size", "micro_batch", "grad_accum"):
        if key in meta and (type(meta[key]) is not int or not 1 <= meta[key] <= MAX_STEP):
            return None, f"{META_NAME} says {key} {str(meta[key])[:24]}, not a count from 1"
    if not isinstance(meta.get("stop", False), bool) or not isinstance(meta.get("files", {}), dict):
        return None, f"{META_NAME}'s stop or files field has the wrong type"
    return meta, None


class Checkpoints:
    """One rank's checkpointing: the run directory, the period, and where to resume from."""

    def __init__(self, rt, run_dir: Path | None, every: int | None, resume_from: Path | None):
        self.rt = rt
        self.run_dir = run_dir
        self.every = every if every and every > 0 else None
        self.resume_from = resume_from
        self.last_saved: int | None = None
        self.restored_step = 0

    @classmethod
    def from_env(cls, rt) -> "Checkpoints":
        import os

        every = os.environ.get(ENV_CHECKPOINT_EVERY)
        resume = os.environ.get(ENV_RESUME)
        return cls(rt, rt.run_dir, int(every) if every and every.isdigit() else None, Path(resume) if resume else None)

    def restore(self) -> int:
        """Load the resume checkpoint (all ranks) and put the step counter and LR schedule at its step."""
        if self.resume_from is None or self.restored_step:
            return self.restored_step
        meta, why = _load_meta(self.resume_from)
        if meta is None:
            raise SystemExit(f"cardwise: {self.resume_from} is not a checkpoint to resume from ({why})")
        rt = self.rt
        rt.accelerator.load_state(str(self.resume_from))
        rt.step = meta["step"]
        # load_state brings back Accelerate's micro-batch counter, which decides the last micro-batch of
        # each step (counter % grad_accum == 0). Counted in the saving plan's micro-batches, it is off when an
        # OOM retry resumes with more accumulation (3 steps x 1 = 3, odd for 2): count it in this plan's.
        rt.accelerator.step = meta["step"] * rt.plan.config.grad_accum
        if rt.scheduler is not None:
            rt.scheduler.last_epoch = meta["step"]
            rt.scheduler._last_lr = [g["lr"] for g in rt.scheduler.optimizer.param_groups]
        self.restored_step = self.last_saved = meta["step"]
        if rt.is_main:
            print(f"cardwise: resumed from {self.resume_from} at step {rt.step}", flush=True)
        return rt.step

    def due(self) -> bool:
        step = self.rt.step
        return bool(self.every and step and step % self.every == 0 and step != self.last_saved)

    def save(self, *, stop: bool = False) -> Path | None:
        """``accelerator.save_state`` of this step on every rank; rank 0 marks it complete.
        ``stop``: saved for a graceful stop (``stop_here``), in a run that may save no others."""
        rt = self.rt
        if self.run_dir is None or rt.step == self.last_saved or rt.step == 0:
            return None
        path = step_dir(self.run_dir, rt.step)
        rt.accelerator.save_state(str(path))
        rt.accelerator.wait_for_everyone()
        if rt.is_main:
            meta = {"step": rt.step, "world_size": rt.world_size, "micro_batch": rt.plan.config.micro_batch,
                    "grad_accum": rt.plan.config.grad_accum, "time": time.time(), "stop": stop and not self.every,
                    "files": manifest(path)}  # what resuming checks before it starts (damage)
            tmp = path / (META_NAME + ".tmp")
            tmp.write_text(json.dumps(meta) + "\n")
            tmp.replace(path / META_NAME)
            prune(self.run_dir, KEEP)
        rt.accelerator.wait_for_everyone()
        self.last_saved = rt.step
        return path

    def stop_here(self, watch) -> None:
        """The ranks agreed to stop (``launcher.graceful_stop``): save this step, say so, exit."""
        import torch.distributed as dist

        rt = self.rt
        step = rt.step
        path = self.save(stop=True)
        if path is None and step and step == self.last_saved:  # saved at this step already (periodic, or resumed)
            here = step_dir(self.run_dir, step) if self.run_dir is not None else None
            path = here if here is not None and read_meta(here) is not None else self.resume_from
        watch.record(step, path)
        if rt.is_main:
            print(f"cardwise: stopped on request after step {step}" + (f"; checkpoint {path}" if path else ""),
                  flush=True)
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        from launcher.graceful_stop import STOPPED_EXIT

        raise SystemExit(STOPPED_EXIT)

    def finish(self, model, tokenizer=None) -> dict:
        """At the end of a run: the last state (when checkpointing) and the final weights. Without
        checkpointing, the checkpoints saved only for graceful stops go: the run no longer needs them."""
        if self.run_dir is None:
            return {}
        out = {}
        if self.every:
            saved = self.save()
            if saved is not None:
                out["checkpoint"] = str(saved)
        elif self.rt.is_main:
            import shutil

            for p in (Path(self.run_dir) / CHECKPOINTS_DIR).glob("step-*"):
                meta = read_meta(p)
                if meta is not None and meta.get("stop") and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
        import os

        if os.environ.get(ENV_FINAL_WEIGHTS) == "0":  # advise launch --no-final-weights
            out["weights"] = None
        else:
            out["weights"] = str(save_weights(self.rt.accelerator, model, self.run_dir, tokenizer))
        return out


def save_weights(acc, model, run_dir: Path, tokenizer=None) -> Path:
    """The final weights as safetensors: LoRA adapters only for a peft model, ``save_pretrained``
    for a Hugging Face model, else the state dict (shared tensors handled by ``save_model``)."""
    state = acc.get_state_dict(model)  # every rank: FSDP gathers the shards here
    inner = acc.unwrap_model(model)
    inner = getattr(inner, "_orig_mod", inner)  # torch.compile's wrapper
    run_dir = Path(run_dir)
    if hasattr(inner, "peft_config"):
        path = run_dir / ADAPTER_DIR
    elif hasattr(inner, "save_pretrained"):
        path = run_dir / "model"
    else:
        path = run_dir / "model.safetensors"
    if acc.is_main_process:
        if hasattr(inner, "save_pretrained"):
            inner.save_pretrained(str(path), state_dict=state, safe_serialization=True)
            if tokenizer is not None:
                tokenizer.save_pretrained(str(path))
        else:
            from safetensors.torch import save_model

            save_model(inner, str(path))
    acc.wait_for_everyone()
    return path
