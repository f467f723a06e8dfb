"""CPU cost of the queue service's poll with 2,000 queued runs (issue 13: "poll only what changed").

    .venv/bin/python -m benchmarks.speed.service_poll [--runs 2000] [--passes 60]

Builds a home with N queued GPU runs that cannot start (one GPU, 1 GiB free, each run needs
40 GiB), then times ``Service.step()`` -- one poll -- with ``time.process_time`` (CPU, not
wall time): first with nothing changing between polls (the steady state of a waiting queue),
then with one commit to the store before every poll (the worst case: the queue is re-read each
time). Run it on a code version before the change for the "before" row (the script uses only
APIs both versions have). Figures: docs/service.md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_home(home: Path, n: int) -> None:
    from cli.launch_plan import plan_from_flags
    from cli.main import build_parser
    from launcher.command import Target
    from launcher.home import make_run_dir
    from launcher.runner import RunOptions
    from launcher.service import SUBMISSION_NAME, Submission
    from launcher.store import RunStore, new_run_id

    args = build_parser("launch").parse_args(["--cpu", "--processes", "1", "--model", "mini-transformer"])
    plan, _ = plan_from_flags(args)
    plan_json = plan.model_dump(mode="json")
    sub = Submission(target=Target(kind="recipe", name="synthetic"), options=RunOptions(), devices=1, kind="gpu",
                     need_gib=40.0, need_source="flag", submitted=time.time()).model_dump_json()
    store = RunStore.open(home)
    for _ in range(n):
        rid = new_run_id()
        rdir = make_run_dir(home, rid)
        (rdir / SUBMISSION_NAME).write_text(sub)
        store.create(run_id=rid, label="bench", plan=plan_json, run_dir=rdir)


def cpu_per_poll(svc, passes: int, touch=None) -> float:
    svc.step()  # the first poll always reads the queue
    t0 = time.process_time()
    for _ in range(passes):
        if touch is not None:
            touch()
        svc.step()
    return (time.process_time() - t0) / passes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--passes", type=int, default=60)
    ap.add_argument("--poll", type=float, default=1.0, help="the service's poll interval, for the %% of a core")
    args = ap.parse_args()
    import logging

    from launcher import placement
    from launcher.service import Service
    from launcher.store import RunStore

    logging.getLogger("cardwise.service").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        t0 = time.monotonic()
        build_home(home, args.runs)
        print(f"{args.runs} queued runs built in {time.monotonic() - t0:.1f} s")
        svc = Service(home, inventory=lambda: [placement.Device(index=0, name="GPU", total_gib=80, free_gib=1)])
        store = RunStore.open(home)
        other = store.create(label="touched every poll")
        idle = cpu_per_poll(svc, args.passes)
        busy = cpu_per_poll(svc, max(5, args.passes // 6), lambda: store.update(other.id, label=str(time.time())))
        for name, s in (("nothing changed between polls", idle), ("a commit before every poll", busy)):
            print(f"{name:32s}: {s * 1000:8.2f} ms CPU per poll = {100 * s / args.poll:5.1f}% of a core at --poll {args.poll:g}")


if __name__ == "__main__":
    main()
