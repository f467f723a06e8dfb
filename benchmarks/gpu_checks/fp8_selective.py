"""FP8 training (torchao float8 Linears) and selective activation checkpointing, measured on one GPU (issue 38).

One process, in a fixed wall budget that includes its own imports (default 90 s): cardwise's zoo model built on the
GPU, the runtime's own model changes (launcher.model_setups: ``float8_linears``, ``checkpoint_every``; full
checkpointing through the zoo's switch, as launcher.runtime does), bf16 autocast with fused torch AdamW (what the
runtime builds for the standard optimizer) and a plain loop, for each configuration

    micro-batch in MICRO_BATCHES  x  precision in (bf16, fp8)  x  checkpointing in (none, every 2nd block, full)

with, after the largest micro-batch's eager rows and if the budget still holds COMPILE_RESERVE_S, its bf16 and fp8
rows compiled block by block (torchtitan's practice; `--compile` compiles the whole model, whose 16 blocks take
minutes to compile: the compiled rows measure the fused float8 casts, the head and loss run eager there). Each row: WARMUP steps (the CUDA peak reset after the first optimizer step, as
``memory.peak_gib`` is defined), then TIMED steps each synchronised:

  measured peak_gib      max_memory_allocated over the timed steps
  measured samples_per_s micro-batch / the median timed step
  estimate               advisor.estimate.estimate for the same model, TrainConfig and GPU, in-process

A row is not started when the budget left is under the longest row so far (recorded as skipped), so the script
always ends inside its budget and writes what it has. ``host_dispatch`` (launcher.host_dispatch) is measured first,
for the estimate's host factor (docs/design.md "Host speed").

    OUT=/tmp/out python3 -m benchmarks.gpu_checks.fp8_selective                # on an H100/H200: 90 s at most
    OUT=/tmp/out python3 -m benchmarks.gpu_checks.fp8_selective --tiny         # CPU dry run (fp32 rows; no fp8)

Writes ``$OUT/fp8_selective.json`` (header + rows). The table and the fit: benchmarks/calibration/fit_fp8_selective.py.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()  # the budget counts the imports too

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

MODEL, SEQ_LEN = "llama3.2-1b", 1024
MICRO_BATCHES = (2, 4)
WARMUP, TIMED = 3, 10
CKPTS = (("none", {}), ("every2", {"grad_ckpt_every": 2}), ("full", {"grad_ckpt": True}))
# A compiled row compiles each block (torchtitan's way: the blocks are alike, so one compile serves them all; the
# embedding, head and loss stay eager) before its first step: start one only with this much of the budget left
# (a guess; the row records its own first step).
COMPILE_RESERVE_S = 20.0
# Seconds kept at the end for writing the results: a row still running then is stopped (SIGALRM).
WRITE_RESERVE_S = 2.0


class BudgetSpent(BaseException):
    """Raised by the alarm at the budget's end inside whatever row is running (a compile that ran long)."""


def _alarm(signum, frame):
    raise BudgetSpent()


def configs(micro_batches, tiny: bool):
    """The rows in the order they run: the largest micro-batch's eager rows, its two compiled rows, then the
    other micro-batches' eager rows (what the budget may cut comes last)."""
    from advisor.config import Precision

    # The CPU dry run trains fp32: bf16 autocast on a CPU without bf16 matmul units runs ~60x slower
    precisions = (Precision.fp32,) if tiny else (Precision.bf16, Precision.fp8)
    big, *rest = sorted(micro_batches, reverse=True)
    for ck_name, ck in CKPTS:
        for p in precisions:
            yield f"{p.value}-{ck_name}-mb{big}", dict(micro_batch=big, precision=p, **ck), False
    for p in precisions:
        yield f"{p.value}-none-mb{big}-compile", dict(micro_batch=big, precision=p, compile=True), True
    for mb in rest:
        for ck_name, ck in CKPTS:
            for p in precisions:
                yield f"{p.value}-{ck_name}-mb{mb}", dict(micro_batch=mb, precision=p, **ck), False


def estimate_of(model: str, config, gpu_name: str, host_us: float | None) -> dict:
    """advise estimate's figures for ``config`` on one ``gpu_name``, with this host's dispatch speed (``host_us``:
    launcher.host_dispatch's reference step, as `advise probe` stores it) when measured."""
    from advisor.calibration import default_calibration
    from advisor.catalog import catalog_model
    from advisor.estimate import estimate
    from advisor.gpus import get_gpu
    from advisor.hardware import HardwareSpec
    from advisor.host_speed import HostSpeed

    gpu = get_gpu(gpu_name)
    cal = default_calibration()
    if host_us:
        cal = cal.model_copy(update={"host": HostSpeed(us_per_step=host_us, device=gpu.name,
                                                       source="benchmarks/gpu_checks/fp8_selective.py")})
    est = estimate(catalog_model(model), config, HardwareSpec(gpu=gpu, gpus_per_node=1, nodes=1), calibration=cal)
    m, t = est.memory, est.throughput
    return {"peak_gib": m.peak_gib, "activations_gib": m.activations_gib, "autocast_copies_gib": m.autocast_copies_gib,
            "samples_per_s": t.samples_per_s, "gpu_s": t.gpu_s, "host_s": t.host_s, "notes": m.notes + t.notes}


def run_row(name: str, model_name: str, overrides: dict, seq_len: int, device, steps: tuple[int, int]) -> dict:
    import torch

    from advisor.catalog import catalog_model
    from advisor.config import Precision, TrainConfig
    from advisor.plan import ModelRef, Plan
    from advisor.zoo import synthetic_batch
    from launcher import model_setups

    config = TrainConfig(seq_len=seq_len, **overrides)
    spec = catalog_model(model_name)
    plan = Plan(model=ModelRef(name=model_name, implementation="cardwise"), config=config, gpu=None,
                processes_per_node=1, cpu=device.type == "cpu", global_batch=config.micro_batch, lr=1e-5, base_lr=1e-5,
                base_batch=config.micro_batch, warmup_steps=0)
    row = {"name": name, "model": model_name, "config": config.model_dump(mode="json")}
    cuda = device.type == "cuda"
    t0 = time.perf_counter()
    model = opt = None
    try:
        from launcher.recipes.startup import zoo_model_on

        model = zoo_model_on(device, spec)  # built and initialised on the device, as the synthetic recipe does
        if config.grad_ckpt:
            model.set_grad_checkpointing(True)  # what launcher.runtime.setup_model does for --grad-ckpt
        model_setups.apply(plan, model)  # fp8 conversion, then the selective checkpoint wrappers
        row["fp8_linears"] = sum(type(m).__name__ == "Float8Linear" for m in model.modules())
        row["checkpoint_wrappers"] = sum(type(m).__name__ == "CheckpointWrapper" for m in model.modules())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, fused=True if cuda else None)
        if config.compile:  # per block, as torchtitan compiles (whole-model compile of 16 blocks takes minutes)
            blocks = model_setups.repeated_blocks(model)
            for i in range(len(blocks)):
                blocks[i] = torch.compile(blocks[i])
            row["compiled"] = "each block"
        step_model = model
        x, y = synthetic_batch(spec, config.micro_batch, seq_len, device=device)
        autocast = config.precision.autocast and config.precision is not Precision.fp32
        times, losses = [], []
        warmup, timed = steps
        for i in range(warmup + timed):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            t = time.perf_counter()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                loss = step_model(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if cuda:
                end.record()
                torch.cuda.synchronize()
            dt = start.elapsed_time(end) / 1e3 if cuda else time.perf_counter() - t
            losses.append(loss.item())
            if i == 0:
                row["first_step_s"] = dt  # compile included for a compiled row
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
            if i >= warmup:
                times.append(dt)
        med = statistics.median(times)
        row["measured"] = {"samples_per_s": config.micro_batch / med, "step_s": med, "step_s_all": times,
                           "losses": losses}
        if cuda:
            row["measured"].update(peak_gib=torch.cuda.max_memory_allocated() / 2**30,
                                   reserved_gib=torch.cuda.max_memory_reserved() / 2**30)
        row["status"] = "ok"
    except BudgetSpent:
        row.update(status="stopped: the budget ended during this row")
    except torch.cuda.OutOfMemoryError as exc:
        row.update(status="oom", error=str(exc).splitlines()[0])
    except Exception as exc:  # the other rows are still worth having
        row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:500])
    finally:
        del model, opt
        if cuda:
            torch.cuda.empty_cache()
    row["wall_s"] = time.perf_counter() - t0
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT") else None,
                    help="folder for fp8_selective.json (default $OUT)")
    ap.add_argument("--budget-s", type=float, default=90.0, help="wall seconds in all, imports included (default 90)")
    ap.add_argument("--tiny", action="store_true", help="CPU dry run: mini-transformer, seq 32, 1 + 2 steps, fp32 rows")
    ap.add_argument("--no-compile", action="store_true", help="leave the compiled rows out")
    args = ap.parse_args()
    if args.out is None:
        ap.error("--out or $OUT is required")
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    from launcher import host_dispatch

    tiny = args.tiny or not torch.cuda.is_available()
    device = torch.device("cpu" if tiny else "cuda")
    model, seq, mbs, steps = ("mini-transformer", 32, (2,), (1, 2)) if tiny else (MODEL, SEQ_LEN, MICRO_BATCHES,
                                                                                 (WARMUP, TIMED))
    header = {"script": "benchmarks/gpu_checks/fp8_selective.py", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "torch": torch.__version__, "model": model, "seq_len": seq, "warmup": steps[0], "timed": steps[1],
              "budget_s": args.budget_s, "device": "cpu" if tiny else torch.cuda.get_device_name(0)}
    try:
        import torchao

        header["torchao"] = torchao.__version__
    except ImportError:
        header["torchao"] = None
    gpu_name = None
    if not tiny:
        header["compute_capability"] = list(torch.cuda.get_device_capability(0))
        from advisor.gpus import find_gpu

        found = find_gpu(header["device"])
        gpu_name = found.name if found is not None else "h100"
        header["gpu"] = gpu_name
        header["host_dispatch"] = host_dispatch.measure("cuda", windows=5, steps_per_window=10)
    host_us = (header.get("host_dispatch") or {}).get("us_per_step")
    signal.signal(signal.SIGALRM, _alarm)  # the budget holds even if a row runs past what was expected
    signal.setitimer(signal.ITIMER_REAL, max(1.0, args.budget_s - WRITE_RESERVE_S - (time.perf_counter() - T0)))
    rows, longest = [], 5.0
    path = args.out / "fp8_selective.json"
    try:
        for name, overrides, compiled in configs(mbs, tiny):
            spent = time.perf_counter() - T0
            need = COMPILE_RESERVE_S if compiled else longest
            if compiled and (args.no_compile or tiny):
                continue
            if spent + need > args.budget_s:
                rows.append({"name": name, "status": f"skipped: {spent:.0f} s spent, {need:.0f} s needed, "
                                                      f"budget {args.budget_s:.0f} s"})
                continue
            if overrides["precision"].value == "fp8" and header["torchao"] is None:
                rows.append({"name": name, "status": "skipped: torchao is not installed"})
                continue
            row = run_row(name, model, overrides, seq, device, steps)
            if not compiled:
                longest = max(longest, row["wall_s"])
            if gpu_name:
                try:
                    from advisor.config import TrainConfig

                    row["estimate"] = estimate_of(model, TrainConfig(seq_len=seq, **overrides), gpu_name, host_us)
                except Exception as exc:
                    row["estimate"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            rows.append(row)
            if str(row.get("status", "")).startswith("stopped"):
                break
            header["elapsed_s"] = time.perf_counter() - T0
            path.write_text(json.dumps({"header": header, "rows": rows}, indent=1, default=str))  # what it has so far
            print(f"{name}: {row.get('status')} {row.get('measured', {}).get('samples_per_s', 0):.2f} samples/s "
                  f"peak {row.get('measured', {}).get('peak_gib', 0):.2f} GiB ({row['wall_s']:.1f} s)", flush=True)
    except BudgetSpent:  # between rows (an estimate, a write): what ran is kept
        rows.append({"name": "-", "status": "stopped: the budget ended between rows"})
    signal.setitimer(signal.ITIMER_REAL, 0)
    header["elapsed_s"] = time.perf_counter() - T0
    path.write_text(json.dumps({"header": header, "rows": rows}, indent=1, default=str))
    print(f"wrote {path} after {header['elapsed_s']:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
