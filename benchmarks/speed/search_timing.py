"""How fast the one planner answers (issue 27: `advise --model llama3-8b --json` at most 2x the time of
`python -c "import pydantic, rich"`; DESIGN.md: under 0.3 s, any --gpus/--nodes within 1 s).

Three measurements, never asserted in tests (tests/test_bounded_search.py counts estimator calls):

1. end to end: fresh processes of the baseline (`import pydantic, rich`) and of `advise ... --json`,
   alternated so both see the same load; median wall and CPU time (user + sys of the child, from
   getrusage: the steadier figure on a shared machine). One unmeasured warm-up run each; bytecode
   cached in a private PYTHONPYCACHEPREFIX, as an installed `advise` would have it.
2. in process (imports excluded): `rules.api.recommend` per case, median wall time, estimator
   calls and candidates scored.
3. `python -X importtime` of the main command: the slowest imports (cumulative), to see what the
   one-shot loads.

    python -m benchmarks.speed.search_timing --runs 15 --note "quiet machine"
    python -m benchmarks.speed.search_timing --runs 5 --no-write
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "speed" / "results" / "search-timing.json"
ADVISE = str(Path(sys.executable).with_name("advise"))

END_TO_END = {
    "baseline: import pydantic, rich": [sys.executable, "-c", "import pydantic, rich"],
    "advise --model llama3-8b --json": [ADVISE, "--model", "llama3-8b", "--json"],
    "advise --model llama3-8b --gpu H100 --gpus 8 --nodes 2 --json":
        [ADVISE, "--model", "llama3-8b", "--gpu", "H100", "--gpus", "8", "--nodes", "2", "--json"],
    "advise --model gpt2 --gpu H100 --gpus 100000 --json": [ADVISE, "--model", "gpt2", "--gpu", "H100", "--gpus", "100000",
                                                          "--json"],
}

IN_PROCESS = [
    ("llama3-8b, 8x A100-80GB (assumed default)", dict(model="llama3-8b", gpu="A100-80GB", gpus=8)),
    ("llama3-8b, 1x H200", dict(model="llama3-8b", gpu="H200", gpus=1)),
    ("llama3-8b, 8x A100-PCIE-80GB, 4.3 h deadline", dict(model="llama3-8b", gpu="A100-PCIE-80GB", gpus=8,
                                                          dataset_size=52_000, epochs=3, deadline_h=4.3)),
    ("llama3-8b, 2 x 8 H100", dict(model="llama3-8b", gpu="H100", gpus=8, nodes=2, dataset_size=1_000_000, epochs=1)),
    ("gpt2, --gpus 100000", dict(model="gpt2", gpu="H100", gpus=100_000)),
    ("llama3-8b, 8 x --nodes 100000", dict(model="llama3-8b", gpu="H100", gpus=8, nodes=100_000)),
    # a pretraining run's planned global batch (issue 37): the batch is one more search dimension
    ("resnet50, 4 x 8 A100, 90 epochs, 2 h deadline (planned batch)",
     dict(model="resnet50", gpu="A100-80GB", gpus=8, nodes=4, dataset_size=1_281_167, epochs=90, deadline_h=2.0)),
]


def _child(cmd: list[str], env: dict) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def end_to_end(runs: int) -> dict:
    env = dict(os.environ, PYTHONPYCACHEPREFIX=tempfile.mkdtemp(prefix="cardwise-pyc-"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in END_TO_END}
    for cmd in END_TO_END.values():
        _child(cmd, env)  # warm-up: bytecode cache, page cache
    for _ in range(runs):
        for name, cmd in END_TO_END.items():
            samples[name].append(_child(cmd, env))
    out = {name: {"wall_s": statistics.median(w for w, _ in s), "cpu_s": statistics.median(c for _, c in s)}
           for name, s in samples.items()}
    base = out["baseline: import pydantic, rich"]
    for v in out.values():
        v["x_baseline_wall"] = v["wall_s"] / base["wall_s"]
        v["x_baseline_cpu"] = v["cpu_s"] / base["cpu_s"]
    return out


def in_process(runs: int) -> dict:
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
    out = {}
    try:
        for name, kw in IN_PROCESS:
            kw = dict(kw)
            req = Request(model=ModelRef(name=kw.pop("model")), **kw)
            times = []
            for _ in range(runs):
                calls[0] = 0
                t = time.perf_counter()
                rec = recommend(req, machine=Machine(cpu_cores=64))
                times.append(time.perf_counter() - t)
            r = rec.recommendation
            out[name] = {"wall_s": statistics.median(times), "estimator_calls": calls[0],
                         "candidates": len(rec.candidates),
                         "answer": f"{r.strategy} x{r.gpus}, mb {r.micro_batch} x acc {r.grad_accum}"}
    finally:
        planner.estimate = real
    return out


def import_time(top: int = 15) -> list[dict]:
    env = dict(os.environ, PYTHONPYCACHEPREFIX=tempfile.mkdtemp(prefix="cardwise-pyc-"))
    cmd = [sys.executable, "-X", "importtime", "-c", "import sys; from cli.main import main; "
           "sys.argv=['advise','--model','llama3-8b','--json']; main(sys.argv[1:])"]
    subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True)  # warm the bytecode cache
    err = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True).stderr
    rows = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, cum_us, name = line.split(":", 1)[1].split("|")
        rows.append({"module": name[1:], "self_ms": int(self_us) / 1e3, "cumulative_ms": int(cum_us) / 1e3})
    tops = [dict(r, module=r["module"].strip()) for r in rows if not r["module"].startswith(" ")]
    return sorted(tops, key=lambda r: -r["cumulative_ms"])[:top] + [
        {"module": "(all imports, self time summed)", "self_ms": sum(r["self_ms"] for r in rows), "cumulative_ms": None}]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--note", default="")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    result = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "note": args.note,
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load": os.getloadavg()},
              "end_to_end": end_to_end(args.runs), "in_process": in_process(max(3, args.runs // 3)),
              "imports": import_time()}
    for name, v in result["end_to_end"].items():
        print(f"{name:62s} wall {v['wall_s'] * 1e3:6.0f} ms ({v['x_baseline_wall']:.2f}x)  "
              f"cpu {v['cpu_s'] * 1e3:6.0f} ms ({v['x_baseline_cpu']:.2f}x)")
    for name, v in result["in_process"].items():
        print(f"  in process: {name:48s} {v['wall_s'] * 1e3:7.1f} ms, {v['estimator_calls']:4d} estimates, "
              f"{v['candidates']:4d} candidates -> {v['answer']}")
    print("slowest imports (cumulative ms):")
    for r in result["imports"]:
        print(f"  {r['module']:45s} {r['cumulative_ms'] if r['cumulative_ms'] is not None else r['self_ms']:8.1f}")
    if not args.no_write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
