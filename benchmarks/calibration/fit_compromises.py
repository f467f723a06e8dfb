"""Fit the compromises' rates that their code does not give: bitsandbytes' 8-bit AdamW kernel and the host
time of CPU offload's step; check the 8-bit fit on a second row.

    python -m benchmarks.calibration.fit_compromises

Reads measured rows in ``benchmarks/calibration/results/h200-compromises/`` (written by benchmarks/gpu_checks/h200_compromises.py,
one H200, seq 2048, checkpointing, `advise launch --plan ... --recipe synthetic`) and writes
``advisor/data/compromise_rates.json``:

- ``bnb_8bit_bandwidth_fraction``, FIT on ``adamw-8bit.json`` (llama3-8b, micro-batch 1): the fraction of
  the datasheet memory bandwidth at which bitsandbytes' blockwise 8-bit AdamW kernel moves its 16 bytes per
  parameter (advisor.setup.optimizers says why it is far from a streaming pass). Everything else in the
  estimate (forward, backward, the per-tensor host calls and synchronisations of the 8-bit step) is the
  estimator's own; the measured step time minus that is the kernel's time.
  CHECKED (not fit) on ``adamw-8bit-mb4.json`` (micro-batch 4): the script prints predicted vs measured.
- ``cpu_step_s_per_param``, FIT on ``cpu-offload.json`` (llama3.2-3b, micro-batch 2, FSDP2 CPUOffloadPolicy):
  seconds per parameter of the offloaded step's host work (accelerate's gradient clipping and torch's
  single-tensor AdamW over fp32 CPU tensors, on the one thread `accelerate launch` gives a GPU rank). The
  measured step minus the estimator's GPU compute and unhidden PCIe copies is that host time. It rests
  on ONE row and no measured row checks it yet.
- ``cpu_step_host_gbps``, FIT on ``cpu-offload-threads.json`` when it exists (the same plan after
  launcher.command gave the rank the host's cores): if its host step is slower than one thread's time
  split over its threads, the host's memory bandwidth binds: CPU_ADAMW_BYTES_PER_PARAM per parameter
  over the measured host time. One row again.

Each rate is charged with all of the estimate's error on its row: if the forward/backward (or the copies)
estimate is off there, the rate absorbs it. Re-run after the calibration is refit
(benchmarks/calibration/fit.py) or when more rows are measured.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from advisor import compromise_cost as cc
from advisor.setup import optimizers as opt
from advisor.setup import offload as off
from advisor.throughput import offload_threads
from advisor.calibration import default_calibration
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.memory import trainable_params
from advisor.plan import Plan
from advisor.sources import resolve_model
from advisor.throughput import estimate_throughput

RESULTS = ROOT / "benchmarks" / "calibration" / "results" / "h200-compromises"
ROW = RESULTS / "adamw-8bit.json"  # the 8-bit fit row
CHECK_8BIT = RESULTS / "adamw-8bit-mb4.json"  # the 8-bit check row: never fit on
CPU_ROW = RESULTS / "cpu-offload.json"  # the CPU-step fit row: one host thread (accelerate's default then)
CPU_ROW_THREADS = RESULTS / "cpu-offload-threads.json"  # the same plan with the host's cores: bandwidth fit


def _threads(row: dict) -> int:
    """Host threads the row's rank ran with: recorded since 2026-12-04; the first row ran before
    launcher.command set them, on the one thread `accelerate launch` gives a GPU rank."""
    return int(row["measured"]["ran"].get("host_threads") or 1)


def _estimate(row: dict):
    plan = Plan.model_validate(row["plan"])
    model, gpu = resolve_model(plan.model), get_gpu("h200")
    hw = HardwareSpec(gpu=gpu, gpus_per_node=1, nodes=1)
    return plan, model, gpu, hw, estimate_throughput(model, plan.config, hw, default_calibration())


def _measured_step(row: dict, plan: Plan) -> float:
    return plan.config.micro_batch * plan.config.grad_accum / row["measured"]["samples_per_s"]


def fit(row: dict) -> dict:
    """The 8-bit fraction that makes the estimator's step time equal the measured one on ``row``."""
    plan, model, gpu, hw, est = _estimate(row)
    assert plan.config.optimizer.value == "adamw-8bit" and row["measured"]["ran"]["optimizer"] == "AdamW8bit", row["name"]
    nt = trainable_params(model, plan.config)
    measured_step = _measured_step(row, plan)
    kernel_now = opt.adamw_8bit_kernel_s(nt, gpu)
    rest = est.step_s - kernel_now  # everything but the kernel, as the estimator has it
    kernel = measured_step - rest
    if kernel <= 0:
        raise SystemExit(f"the estimate without the 8-bit kernel ({rest:.3f} s) already exceeds the measured step "
                         f"({measured_step:.3f} s): nothing to fit")
    fraction = nt * opt.BNB_BYTES_PER_PARAM / (gpu.bandwidth_vs_h200 * kernel)
    return {
        "bnb_8bit_bandwidth_fraction": round(fraction, 4),
        "source": (f"fit by benchmarks/calibration/fit_compromises.py on ONE measured configuration, "
                   f"benchmarks/calibration/results/h200-compromises/{ROW.name} ({row['model']}, micro-batch "
                   f"{plan.config.micro_batch}, seq {plan.config.seq_len}, {plan.config.precision.value} autocast, "
                   f"checkpointing, bitsandbytes AdamW8bit, {row['device']}): measured step "
                   f"{measured_step:.3f} s, estimate without the kernel {rest:.3f} s, so the kernel "
                   f"{kernel:.3f} s for {nt / 1e9:.2f} B parameters"),
    }


def check(row: dict) -> dict:
    """Predicted vs measured samples/s on a row the fit did not see (uses the rates file as written)."""
    plan, *_, est = _estimate(row)
    meas = row["measured"]["samples_per_s"]
    return {"row": row["name"], "micro_batch": plan.config.micro_batch, "predicted_samples_per_s": round(est.samples_per_s, 3),
            "measured_samples_per_s": round(meas, 3), "error": round(est.samples_per_s / meas - 1, 3)}


def fit_cpu_step(row: dict) -> dict:
    """The host seconds per parameter that make the estimator's step equal the measured one on the CPU-offload row."""
    plan, model, gpu, hw, est = _estimate(row)
    ran = row["measured"]["ran"]
    assert plan.config.cpu_offload and ran.get("fsdp_cpu_offload") and ran["optimizer"] == "AdamW", row["name"]
    nt = trainable_params(model, plan.config)
    measured_step = _measured_step(row, plan)
    rest = est.step_s - off.cpu_step_s(nt, offload_threads(hw, plan.config))  # GPU compute + unhidden copies
    host = measured_step - rest
    if host <= 0:
        raise SystemExit(f"the estimate without the host step ({rest:.3f} s) already exceeds the measured step "
                         f"({measured_step:.3f} s): nothing to fit")
    assert _threads(row) == 1, "the one-thread rate is fit on a one-thread row"
    rate = host / nt
    return {
        "cpu_step_s_per_param": float(f"{rate:.4g}"),
        "cpu_step_source": (f"fit by benchmarks/calibration/fit_compromises.py on ONE measured configuration, no row checks it yet: "
                            f"benchmarks/calibration/results/h200-compromises/{CPU_ROW.name} ({row['model']}, micro-batch "
                            f"{plan.config.micro_batch}, seq {plan.config.seq_len}, {plan.config.precision.value}, "
                            f"checkpointing, FSDP2 CPUOffloadPolicy, torch AdamW on the host, {row['device']} host, "
                            f"one thread as accelerate launches a GPU rank): measured step {measured_step:.2f} s, "
                            f"estimate without the host step {rest:.2f} s, so {host:.2f} s of clipping and AdamW for "
                            f"{nt / 1e9:.2f} B fp32 parameters ({rate * 1e9:.2f} ns a parameter)"),
    }


def fit_host_bandwidth(row: dict, rate: float) -> dict:
    """The host memory bandwidth that makes the threaded row's host step what was measured (None when the
    threads alone explain it)."""
    plan, model, gpu, hw, est = _estimate(row)
    threads = _threads(row)
    nt = trainable_params(model, plan.config)
    rest = est.step_s - off.cpu_step_s(nt, offload_threads(hw, plan.config))
    host = _measured_step(row, plan) - rest
    split = nt * rate / threads
    where = (f"benchmarks/calibration/results/h200-compromises/{CPU_ROW_THREADS.name} ({row['model']}, {threads} host threads): "
             f"host step {host:.2f} s measured, one thread's {nt * rate:.2f} s split {threads} ways {split:.2f} s")
    if host <= split:
        return {"cpu_step_host_gbps": None, "cpu_step_host_source": f"not bandwidth-bound on {where}"}
    gbps = off.CPU_ADAMW_BYTES_PER_PARAM * nt / host / 1e9
    return {"cpu_step_host_gbps": round(gbps, 2),
            "cpu_step_host_source": f"fit by benchmarks/calibration/fit_compromises.py on ONE row, {where}: "
                                    f"{off.CPU_ADAMW_BYTES_PER_PARAM:.0f} B a parameter at {gbps:.1f} GB/s"}


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    out = fit(json.loads(ROW.read_text()))
    old = json.loads(cc.RATES.read_text()) if cc.RATES.exists() else {}
    if "cpu_step_s_per_param" not in old:  # first run: a provisional rate, refit just below
        old["cpu_step_s_per_param"] = 1e-9
    cc.RATES.write_text(json.dumps({**old, **out}, indent=1) + "\n")
    cc.compromise_rates.cache_clear()
    out.update(fit_cpu_step(json.loads(CPU_ROW.read_text())))
    out.update({"cpu_step_host_gbps": None, "cpu_step_host_source": "no threaded row measured"})
    cc.RATES.write_text(json.dumps(out, indent=1) + "\n")
    cc.compromise_rates.cache_clear()
    if CPU_ROW_THREADS.exists():
        out.update(fit_host_bandwidth(json.loads(CPU_ROW_THREADS.read_text()), out["cpu_step_s_per_param"]))
        cc.RATES.write_text(json.dumps(out, indent=1) + "\n")
        cc.compromise_rates.cache_clear()
    print(json.dumps(out, indent=1))
    c = check(json.loads(CHECK_8BIT.read_text()))
    print(f"check of the 8-bit fit (not fit on): {c['row']} (micro-batch {c['micro_batch']}): predicted "
          f"{c['predicted_samples_per_s']:.3f} samples/s, measured {c['measured_samples_per_s']:.3f} ({c['error']:+.1%})")


if __name__ == "__main__":
    main()
