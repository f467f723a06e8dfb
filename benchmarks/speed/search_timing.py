"""How long one recommendation's search takes at any --gpus/--nodes, and how many estimator calls
it makes (DESIGN.md quality bar: any --gpus/--nodes within 1 s). Issue 12: --gpus 100000 hung
(~12,800 estimator calls at 2,048 GPUs, growing faster than linearly).

In-process, imports excluded (benchmarks/speed/startup.py measures process startup): each case runs
``rules.api.recommend`` N times and reports the median wall and CPU time (``time.process_time``,
steadier on a shared machine) and the estimator calls. Tests count the calls
(tests/test_bounded_search.py); the times live here, never in tests.

    python -m benchmarks.speed.search_timing --runs 5 --note "shared 2-core VM, loaded"
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RESULTS = ROOT / "benchmarks" / "speed" / "results" / "search-timing.json"

CASES = [
    ("llama3-8b, 1x H200", dict(model="llama3-8b", gpu="H200", gpus=1)),
    ("llama3-8b, 8x A100-80GB", dict(model="llama3-8b", gpu="A100-80GB", gpus=8, seq_len=2048)),
    ("gpt2, --gpus 2048", dict(model="gpt2", gpu="H100", gpus=2048)),
    ("gpt2, --gpus 100000", dict(model="gpt2", gpu="H100", gpus=100_000)),
    ("llama3-8b, 8 x --nodes 100000", dict(model="llama3-8b", gpu="H100", gpus=8, nodes=100_000, seq_len=2048)),
    ("vit-h-14 512px, 8 x 100000 nodes, 1 h deadline",
     dict(model="vit-h-14", gpu="A100-80GB", gpus=8, nodes=100_000, image_size=512, batch_size=4096,
          dataset_size=1_281_167, epochs=10, deadline_h=1.0)),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--note", default="")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()

    import rules.planner as planner
    from advisor.hardware import Machine
    from advisor.plan import ModelRef
    from advisor.request import Request
    from rules.api import recommend

    calls = [0]
    real = planner.estimate

    def counting(*a, **k):
        calls[0] += 1
        return real(*a, **k)

    planner.estimate = counting
    rows = []
    for name, kw in CASES:
        kw = dict(kw)
        req = Request(model=ModelRef(name=kw.pop("model")), **kw)
        walls, cpus = [], []
        for _ in range(args.runs):
            calls[0] = 0
            w, c = time.perf_counter(), time.process_time()
            rec = recommend(req, machine=Machine(cpu_cores=64))
            walls.append(time.perf_counter() - w)
            cpus.append(time.process_time() - c)
        r = rec.recommendation
        row = {"case": name, "estimator_calls": calls[0], "wall_s": round(statistics.median(walls), 3),
               "cpu_s": round(statistics.median(cpus), 3), "answer": f"{r.strategy} on {r.gpus} GPUs"
               + (f", compromise {r.compromise}" if r.compromise else "")}
        rows.append(row)
        print(f"{name:48s} {row['estimator_calls']:5d} calls  {row['wall_s']:6.3f} s wall  {row['cpu_s']:6.3f} s CPU  {row['answer']}")
    if not args.no_write:
        RESULTS.write_text(json.dumps({"date": dt.date.today().isoformat(), "python": platform.python_version(),
                                       "machine": platform.node(), "note": args.note, "runs": args.runs,
                                       "rows": rows}, indent=2) + "\n")
        print(f"written: {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
