"""Why a compiled users' row runs slower than max(host, GPU): the host's time for one step, the GPU's,
the step's, and what the host waits on (issue 16: compiled HF BERT at 256 tokens, +42..54%).

For each row (``measure/users_models.py``'s build, data and loop), after the warm-up:

- ``step_ms``: steady state, 20 steps back to back (CUDA events), what ``measure/unseen.py`` measures;
- ``host_ms``: the host's time to issue one step that starts on an idle GPU (synchronise, then time
  ``step()`` without synchronising; median of 7). The step's kernels fit the launch queue, so the
  host never waits on the GPU here unless the step itself synchronises;
- ``host_sync_ms``: the same step timed to the end of its GPU work (the host's issue and the GPU's
  tail, one step alone);
- ``phases_ms``: that host time split into forward (with the loss), backward, ``opt.step()`` and
  ``zero_grad`` (medians of the same 7 steps);
- ``gc``: Python's garbage-collector pauses during the 20 steady steps (ms per step, by generation):
  a collection pauses the host, and a host-bound step waits for it;
- ``syncs``: host-device synchronisations in one step (``torch.cuda.set_sync_debug_mode``), each with
  the innermost frames of the Python stack that caused it;
- ``dynamo``: graphs compiled and graph breaks with their reasons (``torch._dynamo.utils.counters``);
- ``profile``: three profiled steps: GPU busy per step, GPU idle gaps (total, the five longest with the
  kernels on either side) and the CUDA runtime calls that took the host longest (a synchronising call
  shows up here). The first of them starts on an idle GPU and the profiler slows the host, so the gaps
  are an upper bound on a steady step's, not a measure of it (``step_ms`` against ``busy`` is);
  ``kernel_groups``: the kernels of a step by what their names say (profile_users_rows.group_of:
  triton, gemm, conv, copy incl. memsets, ...), what inductor launched in place of the eager ops;
- ``host_dispatch_us``: the host probe (launcher.host_dispatch, 3 windows) before the steady steps and
  after the host times, median of the two: the row's host speed against the reference host.

    python3 -m benchmarks.calibration.measure.compiled_overlap --only u10-hfbertcls-bf16-compile-64-s256 --out o.json
    python -m benchmarks.calibration.measure.compiled_overlap --smoke       # CPU: checks the script runs
``--nodrop ID`` adds the row again with every dropout probability of its HF config set to 0.
``--fresh`` measures each row in a process of its own (a user's script trains one model per process;
the measurement scripts run every row of a set in one).
"""

from __future__ import annotations

import argparse
import json
import gc
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import torch

import benchmarks.calibration.measure.unseen as measure_unseen
import benchmarks.calibration.measure.users_models as mum
from benchmarks.calibration.measure.steploop import free_device, in_child, sync, timed, warm_up


PHASES: dict[str, list[float]] = {}  # host seconds of each phase of the steps run while it is not None
_RECORD = [False]


def timed_make_step(loss_fn, opt, autocast):
    """steploop.make_step's step, phase by phase on the host clock when ``_RECORD[0]``."""

    def step() -> torch.Tensor:
        t0 = time.perf_counter()
        with autocast:
            loss = loss_fn()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        t4 = time.perf_counter()
        if _RECORD[0]:
            for name, dt in zip(("forward", "backward", "opt_step", "zero_grad"), (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                PHASES.setdefault(name, []).append(dt)
        return loss.detach()

    return step



def gc_pauses(run) -> dict:
    """``run()`` with the collector's pauses timed (gc.callbacks): total ms, and collections, by generation."""
    pauses: dict[int, list[float]] = {}
    started = [0.0]

    def on_gc(phase, info):
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.setdefault(info["generation"], []).append(time.perf_counter() - started[0])

    gc.callbacks.append(on_gc)
    try:
        result = run()
    finally:
        gc.callbacks.remove(on_gc)
    return result, {f"gen{g}": {"collections": len(v), "ms": sum(v) * 1e3} for g, v in sorted(pauses.items())}


def host_times(step, device: str, n: int = 7) -> dict:
    issue, whole = [], []
    PHASES.clear()
    _RECORD[0] = True
    for _ in range(n):
        sync(device)
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        sync(device)
        t2 = time.perf_counter()
        issue.append(t1 - t0)
        whole.append(t2 - t0)
    _RECORD[0] = False
    return {"host_ms": statistics.median(issue) * 1e3, "host_sync_ms": statistics.median(whole) * 1e3,
            "phases_ms": {k: statistics.median(v) * 1e3 for k, v in PHASES.items()}}


def syncs_of(step, device: str) -> list[dict]:
    if device != "cuda":
        return []
    seen = []

    def record(message, category, filename, lineno, file=None, line=None):
        frames = [f for f in traceback.extract_stack()[:-1] if "warnings.py" not in f.filename]
        seen.append({"message": str(message)[:120],
                     "stack": [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames[-8:]]})

    sync(device)
    with warnings.catch_warnings():  # restores showwarning and the filters on the way out
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    sync(device)
    return seen


def dynamo_counters() -> dict:
    from torch._dynamo.utils import counters

    breaks = {str(k)[:200]: v for k, v in counters["graph_break"].items()}
    return {"unique_graphs": counters["stats"].get("unique_graphs", 0),
            "calls_captured": counters["stats"].get("calls_captured", 0),
            "graph_breaks": sum(breaks.values()), "break_reasons": breaks}


def profile_gaps(step, device: str, steps: int = 3) -> dict:
    from torch.profiler import ProfilerActivity, profile

    if device != "cuda":
        return {}
    sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        sync(device)
    from profile_users_rows import group_of

    kernels, runtime, groups = [], {}, {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            start = ev.time_range.start
            kernels.append((start, start + ev.device_time, ev.name))
            groups[group_of(ev.name)] = groups.get(group_of(ev.name), 0) + 1
        elif ev.name.startswith("cuda") or ev.name.startswith("cu"):
            r = runtime.setdefault(ev.name, [0, 0.0, 0.0])
            r[0] += 1
            r[1] += ev.cpu_time_total
            r[2] = max(r[2], ev.cpu_time_total)
    kernels.sort()
    gaps, busy, end_prev, name_prev = [], 0.0, None, ""
    for start, end, name in kernels:
        busy += end - start
        if end_prev is not None and start > end_prev:
            gaps.append((start - end_prev, name_prev[:80], name[:80]))
        if end_prev is None or end > end_prev:
            end_prev, name_prev = end, name
    span = (kernels[-1][1] - kernels[0][0]) if kernels else 0.0
    gaps.sort(reverse=True)
    return {"span_ms_per_step": span / steps / 1e3, "busy_ms_per_step": busy / steps / 1e3,
            "idle_ms_per_step": sum(g for g, _, _ in gaps) / steps / 1e3,
            "idle_over_50us_ms_per_step": sum(g for g, _, _ in gaps if g > 50) / steps / 1e3,
            "longest_gaps": [{"us": round(g, 1), "after": a, "before": b} for g, a, b in gaps[:6]],
            "kernel_groups": {g: n / steps for g, n in sorted(groups.items())},
            "runtime_calls": {k: {"calls_per_step": n / steps, "ms_per_step": t / steps / 1e3, "max_ms": m / 1e3}
                              for k, (n, t, m) in sorted(runtime.items(), key=lambda kv: -kv[1][1])[:10]}}


def nodrop_row(row: dict, tmp: Path) -> dict:
    """The row again, with its HF config's dropout probabilities set to 0 (a model of its own)."""
    src = dict(mum.MODEL_SOURCES[row["model"]])
    cfg = json.loads((mum.MODELS / src["config"]).read_text())
    for k in list(cfg):
        if "dropout" in k and isinstance(cfg[k], (int, float)):
            cfg[k] = 0.0
    d = tmp / f"{row['model']}-nodrop"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    name = row["model"] + "-nodrop"
    mum.MODEL_SOURCES[name] = dict(src, config=str(d / "config.json"))
    return dict(row, id=row["id"] + "-nodrop", model=name)


def measure(row: dict, device: str, smoke: bool) -> dict:
    from torch._dynamo.utils import counters

    counters.clear()
    plain, mum.make_step = mum.make_step, timed_make_step  # build_step makes its step with it (same calls)
    try:
        step, net, info = mum.build_step(row, device, smoke)
    finally:
        mum.make_step = plain
    warm_up(step, 3, device)
    out = {"id": row["id"], **info, "dynamo": dynamo_counters()}
    probes = [mum.host_dispatch_of(device, windows=3)]
    run, pauses = gc_pauses(lambda: timed(step, 20, device))
    out["step_ms"] = run["elapsed_s"] / 20 * 1e3
    out["gc"] = {k: {"collections": v["collections"] / 20, "ms_per_step": v["ms"] / 20} for k, v in pauses.items()}
    out.update(host_times(step, device))
    probes.append(mum.host_dispatch_of(device, windows=3))
    out["host_dispatch_us"], out["host_probes_us"] = statistics.median(probes), probes
    out["syncs"] = syncs_of(step, device)
    out["profile"] = profile_gaps(step, device)
    del step, net
    return out


def fresh(row: dict) -> dict:
    """The row measured by this script's command line in a new process (its own torch, dynamo and heap)."""
    base = row["id"].removesuffix("-nodrop")
    only = ["--only", "", "--nodrop", base] if row["id"].endswith("-nodrop") else ["--only", base]
    res = json.loads(in_child(only + ["--budget-s", "1e9"], drop=("--only", "--nodrop", "--out", "--budget-s"),
                              flags=("--fresh",)))[-1]
    res["fresh_process"] = True
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated row ids (measure_users_models' or measure_unseen's)")
    ap.add_argument("--nodrop", default="", help="comma-separated row ids to add again without dropout (HF rows)")
    ap.add_argument("--out", type=Path, default=Path("overlap.json"))
    ap.add_argument("--budget-s", type=float, default=400.0, help="start no row after this many seconds")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny models")
    ap.add_argument("--fresh", action="store_true", help="each row in a process of its own")
    args = ap.parse_args()
    nodrop = [s for s in args.nodrop.split(",") if s]
    wanted = [s for s in args.only.split(",") if s] or ([] if nodrop else list(measure_unseen.rows_by_id(args.smoke))[:1])
    device = "cpu" if args.smoke else "cuda"
    tmp = Path(tempfile.mkdtemp(prefix="cardwise-overlap-"))  # the no-dropout configs, read as rows are built
    todo = measure_unseen.pick(wanted, args.smoke) + [nodrop_row(r, tmp) for r in measure_unseen.pick(nodrop, args.smoke)]
    t0, out = time.perf_counter(), []
    for row in todo:
        if time.perf_counter() - t0 > args.budget_s:
            out.append({"id": row["id"], "skipped": "budget"})
            continue
        try:
            res = fresh(row) if args.fresh else measure(row, device, args.smoke)
        except Exception as exc:  # one broken row must not cost the call
            res = {"id": row["id"], "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        res["elapsed_s"] = round(time.perf_counter() - t0, 1)
        free_device(device)
        out.append(res)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print(json.dumps({k: res.get(k) for k in ("id", "step_ms", "host_ms", "host_sync_ms", "error")}
                         | {"syncs": len(res.get("syncs", [])), "breaks": res.get("dynamo", {}).get("graph_breaks"),
                            "busy": res.get("profile", {}).get("busy_ms_per_step"),
                            "idle": res.get("profile", {}).get("idle_ms_per_step")}), flush=True)


if __name__ == "__main__":
    main()
