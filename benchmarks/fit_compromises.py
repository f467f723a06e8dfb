"""Fit the compromises' kernel rates that their code does not give: bitsandbytes' 8-bit AdamW kernel.

    python benchmarks/fit_compromises.py

Reads the measured row ``benchmarks/results/h200-compromises/adamw-8bit.json`` (llama3-8b, seq 2048,
micro-batch 1, bf16 autocast, checkpointing, bitsandbytes AdamW8bit, one H200; written by
benchmarks/h200_compromises.py) and writes ``advisor/data/compromise_rates.json``.

What is fit: ``bnb_8bit_bandwidth_fraction``, the fraction of the datasheet memory bandwidth at which
bitsandbytes' blockwise 8-bit AdamW kernel moves its 16 bytes per parameter (advisor.compromise_cost
says why it is far from a streaming pass). Everything else in the estimate (forward, backward, the
per-tensor host calls and synchronisations of the 8-bit step) is the estimator's own; the
measured step time minus that is the kernel's time. It rests on ONE measured configuration, and it
charges the kernel with all of the estimate's error on that row: if the forward/backward estimate
is off there, the fraction absorbs it. Re-run after the calibration is refit
(benchmarks/fit_calibration.py) or when more 8-bit rows are measured.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from advisor import compromise_cost as cc  # noqa: E402
from advisor.calibration import default_calibration  # noqa: E402
from advisor.gpus import get_gpu  # noqa: E402
from advisor.hardware import HardwareSpec  # noqa: E402
from advisor.memory import trainable_params  # noqa: E402
from advisor.plan import Plan  # noqa: E402
from advisor.sources import resolve_model  # noqa: E402
from advisor.throughput import estimate_throughput  # noqa: E402

ROW = ROOT / "benchmarks" / "results" / "h200-compromises" / "adamw-8bit.json"


def fit(row: dict) -> dict:
    """The fraction that makes the estimator's step time equal the measured one on ``row``."""
    plan = Plan.model_validate(row["plan"])
    assert plan.config.optimizer.value == "adamw-8bit" and row["measured"]["ran"]["optimizer"] == "AdamW8bit", row["name"]
    model, gpu = resolve_model(plan.model), get_gpu("h200")
    hw = HardwareSpec(gpu=gpu, gpus_per_node=1, nodes=1)
    est = estimate_throughput(model, plan.config, hw, default_calibration())
    nt = trainable_params(model, plan.config)
    samples = plan.config.micro_batch * plan.config.grad_accum
    measured_step = samples / row["measured"]["samples_per_s"]
    kernel_now = cc.adamw_8bit_kernel_s(nt, gpu)
    rest = est.step_s - kernel_now  # everything but the kernel, as the estimator has it
    kernel = measured_step - rest
    if kernel <= 0:
        raise SystemExit(f"the estimate without the 8-bit kernel ({rest:.3f} s) already exceeds the measured step "
                         f"({measured_step:.3f} s): nothing to fit")
    fraction = nt * cc.BNB_BYTES_PER_PARAM / (gpu.mem_bw * gpu.fraction_vs_h200("bandwidth") * kernel)
    return {
        "bnb_8bit_bandwidth_fraction": round(fraction, 4),
        "source": (f"fit by benchmarks/fit_compromises.py on ONE measured configuration, "
                   f"benchmarks/results/h200-compromises/adamw-8bit.json ({row['model']}, micro-batch "
                   f"{plan.config.micro_batch}, seq {plan.config.seq_len}, {plan.config.precision.value} autocast, "
                   f"checkpointing, bitsandbytes AdamW8bit, {row['device']}): measured step "
                   f"{measured_step:.3f} s, estimate without the kernel {rest:.3f} s, so the kernel "
                   f"{kernel:.3f} s for {nt / 1e9:.2f} B parameters"),
    }


def main() -> None:
    out = fit(json.loads(ROW.read_text()))
    cc.RATES.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
