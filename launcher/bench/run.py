"""Running a bench: each job one recorded launch of the bench worker through
``launcher.runner.execute``, with a utilisation sampler beside it; the worker's result files
become a row, and ``run_bench`` does every job in turn, then the arithmetic (``analyse``).
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

from advisor.errors import UserError
from advisor.sampling import DeviceSampler, ProcessTreeCpu
from launcher.bench.analyse import finish
from launcher.bench.plan import device_name, make_plan, plan_jobs, visible_gpus
from launcher.bench.request import BenchRequest, Job
from launcher.bench.result import BenchResult, BenchRow, row_for, save_result
from launcher.oom import OOM_ERROR

WORKER = "launcher.recipes.bench_dp"


class UtilSampler:
    """Mean utilisation over a time window while a run is timed, sampled in a thread every ``interval`` s:
    of the given GPUs (``advisor.sampling.DeviceSampler``, NVML), or, with no GPUs, the CPU use of
    the launch's process tree (``advisor.sampling.ProcessTreeCpu``). ``mean(t0, t1)`` averages a window."""

    def __init__(self, gpus: list[int] | None, *, interval: float = 0.1):
        self.gpus = gpus
        self.interval = interval
        self.samples: list[tuple[float, float, float]] = []  # (from, to, value)
        self._stop = threading.Event()
        self._root: int | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True, name="cardwise-bench-sampler")

    def watch(self, launch) -> None:
        """``execute``'s on_launch hook: sample this launch's processes (CPU runs)."""
        self._root = launch.pid

    def start(self) -> "UtilSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def mean(self, t0: float | None, t1: float | None) -> float | None:
        if t0 is None or t1 is None or t1 <= t0:
            return None
        num = den = 0.0
        for a, b, v in self.samples:
            w = min(b, t1) - max(a, t0)
            if w > 0:
                num += w * v
                den += w
        return num / den if den > 0 else None

    def _loop(self) -> None:
        with contextlib.suppress(Exception):  # sampling is best effort: a row never fails for it
            if self.gpus:
                self._loop_gpus()
            else:
                self._loop_cpu()

    def _loop_gpus(self) -> None:
        sampler = DeviceSampler(gpus=self.gpus)
        try:
            last = time.time()
            while not self._stop.wait(self.interval):
                vals = [s.util_pct for s in sampler.gpu_samples() if s.util_pct is not None]
                now = time.time()
                if vals:
                    self.samples.append((last, now, sum(vals) / len(vals)))
                last = now
        finally:
            sampler.close()

    def _loop_cpu(self) -> None:
        tree: ProcessTreeCpu | None = None
        last = time.time()
        while not self._stop.wait(self.interval):
            if self._root is None:
                last = time.time()
                continue
            if tree is None or tree.root_pid != self._root:
                tree = ProcessTreeCpu(self._root)
            value = tree.sample()
            now = time.time()
            if value is not None:
                self.samples.append((last, now, value))
            last = now

def _versions() -> tuple[str | None, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in ("torch", "accelerate"):
        try:
            out.append(version(name))
        except PackageNotFoundError:
            out.append(None)
    return out[0], out[1]


def _read_results(run_dir: Path, ranks: int) -> list[dict]:
    import json

    from launcher.recipes.bench_dp import RESULT_NAME

    out = []
    for r in range(ranks):
        path = Path(run_dir) / RESULT_NAME.format(rank=r)
        if path.exists():
            with contextlib.suppress(OSError, ValueError):
                out.append(json.loads(path.read_text()))
    return out


def _failure_reason(rec) -> str:
    att = rec.attempts[-1] if rec.attempts else None
    if att is not None and att.status == "oom":
        return f"{OOM_ERROR} at micro-batch {att.micro_batch} (--micro-batch to lower it)"
    why = rec.error or "failed"
    log = Path(att.log_dir) / "launcher.log" if att is not None and att.log_dir else None
    tail = ""
    if log is not None and log.exists():
        with contextlib.suppress(OSError):
            lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
            errs = [ln for ln in lines if "Error" in ln or "error:" in ln]
            tail = (errs or lines or [""])[-1].strip()[:300]
    return f"{why}" + (f": {tail}" if tail else "") + (f" (log: {log})" if log else "")


def run_job(job: Job, request: BenchRequest, home: Path, store, machine, *,
            cancel: threading.Event | None = None) -> BenchRow:
    """Launch one job through ``launcher.runner.execute`` and turn the worker's files into a row."""
    from launcher.command import Target
    from launcher.home import make_run_dir
    from launcher.runner import RunOptions, execute

    hardware_name = None
    gpus: list[int] | None = None
    env: dict[str, str] = {}
    if not request.cpu:
        visible = visible_gpus(machine)[: job.devices]
        gpus = visible
        by_index = {g.index: g for g in machine.gpus}
        ids = [by_index[i].uuid or str(i) for i in visible]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(ids)  # UUIDs: no doubt about CUDA's vs NVML's order
        spec = by_index[visible[0]].spec
        hardware_name = spec
    plan = make_plan(job, request, hardware_name)
    args = ["--mode", job.mode, "--steps", str(request.steps), "--warmup", str(request.warmup),
            "--comm-steps", str(request.comm_steps),
            "--dataloader-workers", str(-1 if request.dataloader_workers is None else request.dataloader_workers)]
    target = Target(kind="module", name=WORKER, args=args)
    options = RunOptions(max_oom_retries=0, extra_env=env, grace_s=request.grace_s)
    rec = store.create(label=f"bench · {job.label}", plan=plan.model_dump(mode="json"))
    rdir = make_run_dir(home, rec.id)
    store.update(rec.id, run_dir=str(rdir))
    sampler = UtilSampler(gpus).start()
    t0 = time.time()
    try:
        final = execute(store, rec.id, plan, target, rdir, options, cancel=cancel, on_launch=sampler.watch)
    except UserError as exc:
        return row_for(job, status="failed", reason=exc.what, run_id=rec.id)
    finally:
        sampler.stop()
    wall = time.time() - t0
    if final.status == "cancelled":
        return row_for(job, status="cancelled", reason="cancelled", run_id=rec.id, wall_s=wall)
    results = _read_results(rdir, plan.world_size)
    if final.status != "succeeded" or len(results) < plan.world_size:
        reason = _failure_reason(final) if final.status != "succeeded" else f"the worker wrote {len(results)} of {plan.world_size} results"
        return row_for(job, status="failed", reason=reason, run_id=rec.id, wall_s=wall)
    return _measured(job, results, sampler, run_id=rec.id, wall_s=wall, cpu=request.cpu)


def _measured(job: Job, results: list[dict], sampler: UtilSampler, *, run_id: str, wall_s: float, cpu: bool) -> BenchRow:
    def total(key):
        vals = [r[key] for r in results if r.get(key) is not None]
        return sum(vals) if vals else None

    def mean(key):
        vals = [r[key] for r in results if r.get(key) is not None]
        return statistics.fmean(vals) if vals else None

    if job.mode == "fsdp" and "FSDP" not in str(results[0].get("distributed_type")):
        return row_for(job, status="skipped", run_id=run_id, wall_s=wall_s,
                    reason=f"Accelerate ran this as {results[0].get('distributed_type')}, not FSDP (FSDP through Accelerate needs GPUs)")
    sps = total("samples_per_s")
    tps = results[0].get("tokens_per_sample")
    peaks = [p for r in results for p in (r.get("peak_gib_devices") or [])]
    t0 = min(r["t_start"] for r in results)
    t1 = max(r["t_end"] for r in results)
    util = sampler.mean(t0, t1)
    sync, nosync = mean("sync_step_s"), mean("nosync_step_s")
    # Exposed communication of the mean step (the column's definition), not a mean of per-rank
    # differences clipped at zero, which noise on one rank would bias upwards.
    exposed = max(0.0, sync - nosync) if sync is not None and nosync is not None else None
    return row_for(job, status="ok", run_id=run_id, wall_s=wall_s, samples_per_s=sps,
                tokens_per_s=sps * tps if (sps and tps) else None, step_s=max(r["step_s"] for r in results),
                peak_gib=max(peaks) if peaks else None, peak_gib_devices=peaks or None,
                gpu_util_pct=None if cpu else util, cpu_util_pct=util if cpu else None,
                sync_step_s=sync, nosync_step_s=nosync, exposed_comm_s=exposed,
                dataloader_workers=results[0].get("dataloader_workers"), loader_samples_per_s=total("loader_samples_per_s"),
                loader_train_samples_per_s=total("loader_train_samples_per_s"))


ProgressFn = Callable[[str, int, int, Job, "BenchRow | None"], None]


def run_bench(request: BenchRequest, home: Path | None = None, *, machine=None, progress: ProgressFn | None = None,
              cancel: threading.Event | None = None,
              on_partial: Callable[[BenchResult], None] | None = None) -> BenchResult:
    """Plan, run every job in turn (each a recorded launch), then compute and calibrate.

    ``progress(event, index, total, job, row)`` is called with "start" before and "done" after
    each job (skipped ones too). ``cancel`` stops the run in progress and skips the rest.
    ``on_partial(result)`` sees the result so far after each job (calibration not saved), so
    that reports survive a bench that is killed; the result is also kept in ``HOME/bench/``.
    """
    from advisor.hardware import detect_machine
    from launcher.home import ensure_home, resolve_home
    from launcher.store import RunStore

    home = resolve_home(home)
    machine = machine or detect_machine()
    jobs, notes = plan_jobs(request, machine)
    cancel = cancel or threading.Event()
    started = time.time()
    store = None
    rows: list[BenchRow] = []
    for i, job in enumerate(jobs):
        if progress is not None:
            progress("start", i, len(jobs), job, None)
        if cancel.is_set():
            row = row_for(job, status="cancelled", reason="cancelled before it started")
        elif job.skip is not None:
            row = row_for(job, status="skipped", reason=job.skip)
        else:
            if store is None:
                ensure_home(home)
                store = RunStore.open(home)
            row = run_job(job, request, home, store, machine, cancel=cancel)
        rows.append(row)
        if progress is not None:
            progress("done", i, len(jobs), job, row)
        if i + 1 < len(jobs):
            partial = _assemble([r.model_copy(deep=True) for r in rows], jobs[: i + 1], request, machine, home,
                                notes + [f"partial: {i + 1} of {len(jobs)} configurations done"], started,
                                cancel.is_set(), save=False)
            save_result(home, partial)
            if on_partial is not None:
                on_partial(partial)
    result = _assemble(rows, jobs, request, machine, home, notes, started, cancel.is_set(), save=request.calibrate)
    save_result(home, result)
    return result


def _assemble(rows: list[BenchRow], jobs: list[Job], request: BenchRequest, machine, home: Path, notes: list[str],
              started: float, cancelled: bool, *, save: bool) -> BenchResult:
    notes = list(notes)
    factors, path = finish(rows, jobs, request.model_copy(update={"calibrate": save}), machine, home, notes)
    if factors and not request.calibrate:
        notes.append("--no-calibrate: factors computed (the 'calibrated' columns) but not saved")
    torch_v, acc_v = _versions()
    device = "cpu" if request.cpu else device_name(machine)
    return BenchResult(machine=machine.summary(), device=device, cpu=request.cpu, torch=torch_v, accelerate=acc_v,
                       started=started, wall_s=time.time() - started, request=request, rows=rows, notes=notes,
                       factors=factors, calibration_path=path, cancelled=cancelled)
