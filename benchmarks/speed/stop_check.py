"""Cost of the graceful-stop check at every step boundary (``launcher.graceful_stop.StopWatch.agreed``).

    .venv/bin/python -m benchmarks.speed.stop_check [--steps 2000]

One rank: a ``stat`` of the request file. Two ranks: that plus an all_reduce (MAX) of one int32 on a gloo
group, the agreement every rank makes before the next step's first micro-batch. Times the median and the
90th percentile per boundary on 1 and 2 CPU processes (gloo over the loopback) with no request pending,
the steady state of every run. Writes ``benchmarks/speed/results/stop-check.json``. Figures:
docs/service.md (graceful stop).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

RESULTS = Path(__file__).with_name("results") / "stop-check.json"


def _time(world: int, rank: int, steps: int, request: str, port: int, out: dict) -> None:
    import torch.distributed as dist

    from launcher.graceful_stop import StopWatch

    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    rt = SimpleNamespace(world_size=world, is_main=rank == 0, run_dir=Path(request).parent)
    watch = StopWatch(rt, Path(request))
    watch.listen()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        assert not watch.agreed()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        times.sort()
        out.update(median_us=statistics.median(times) * 1e6, p90_us=times[int(0.9 * len(times))] * 1e6)
    if world > 1:
        dist.destroy_process_group()


def _worker(rank: int, world: int, steps: int, request: str, port: int, result: str) -> None:
    out: dict = {}
    _time(world, rank, steps, request, port, out)
    if rank == 0:
        Path(result).write_text(json.dumps(out))


def main() -> None:
    import torch.multiprocessing as mp

    from launcher.command import free_port

    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        request = os.path.join(tmp, "stop-request")
        for world in (1, 2):
            result = os.path.join(tmp, f"w{world}.json")
            mp.spawn(_worker, args=(world, args.steps, request, free_port(), result), nprocs=world, join=True)
            rows.append({"processes": world, **json.loads(Path(result).read_text())})
    data = {"steps": args.steps, "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "load_average": os.getloadavg()[0], "time": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "rows": rows}
    RESULTS.write_text(json.dumps(data, indent=2) + "\n")
    for r in rows:
        print(f"{r['processes']} process(es): {r['median_us']:.0f} us median, {r['p90_us']:.0f} us p90 per step boundary")


if __name__ == "__main__":
    main()
