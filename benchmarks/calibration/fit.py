"""Fit the estimator's calibration on the reference rows marked "fit"; judge it on "holdout".

    python -m benchmarks.calibration.fit [--out CALIBRATION_JSON] [--report REPORT_MD]

Rows: ``benchmarks.calibration.rows`` (every measured row, its split and host factor).

Writes ``advisor/data/calibration.json`` (the packaged calibration) and
``benchmarks/calibration/results/h200-estimator.md`` (``benchmarks.calibration.report``: predicted vs measured for every row, the quality bars
of DESIGN.md on the holdout rows, per family, before and after issue 16's host model: "before"
is ``h200-estimator-before-roofline.json``, the estimator at commit fc248ce on the same rows).
Rows marked "holdout" never influence a constant.

What is fit, and how: the throughput constants of advisor.throughput's roofline (the achievable
fraction of each datasheet rate per kind of work, ``rate_efficiency``; ``gpu_kernel_us``;
``launch_us``; ``compile_step_us`` and ``compile_call_us`` per CNN/transformer, ``compile_kernel_us``; ``compile_traffic_factor``;
``host_combine_p``; ``host_forward_share`` per mode and ``ckpt_block_us``; ``traffic_per_saved_byte`` for
closed-form transformers) by coordinate descent in log space, each within physical bounds (fractions in (0, 1]),
minimising the mean squared log error of samples/s over the fit rows: the H200's, and every row of issue 39's
H100 set (``h100_i39.py --set i39``, each predicted for the H100 and the host that ran it); issue 39's second H100
set (i39b) is held out whole. Then the memory constants:
``compile_gelu_kept`` (compiled GELU MLPs), ``compile_activation_factor`` (compiled CNNs) and
``ckpt_fraction`` (CNN checkpointing) from the fit
rows' measured peaks.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from advisor.calibration import PACKAGED, Calibration
from advisor.estimate import estimate
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.step_work import step_work
from advisor.compromise_cost import overlap
from advisor.setup.checkpointing import recomputed_share
from advisor.throughput import crossing_seconds, gpu_seconds, host_seconds
from benchmarks.calibration import h100_i39
from benchmarks.calibration.report import REPORT, report
from benchmarks.calibration.rows import HOSTBOUND, all_rows, config_of, dispatch_us, predict, spec_of

class _Row:
    """What the throughput fit needs of a row, computed once: its work by kind (advisor.step_work,
    bytes of closed-form rows per unit of traffic_per_saved_byte) and the optimizer's bytes."""

    def __init__(self, r: dict, hw: HardwareSpec):
        self.r, self.spec, self.cfg, self.hw = r, spec_of(r), config_of(r), hw
        unit = Calibration(traffic_per_saved_byte=1.0)
        self.work = step_work(self.spec, self.cfg, unit)
        e = estimate(self.spec, self.cfg, hw, calibration=unit).throughput
        self.opt_bytes = e.optimizer_s * hw.gpu.bandwidth_gbps * 1e9 * unit.rate_efficiency["bytes"]
        self.samples = self.cfg.micro_batch * self.cfg.grad_accum
        self.host_factor = r.get("host_factor", 1.0)
        self.recomputed = recomputed_share(self.spec, self.cfg)

    def samples_per_s(self, cal: Calibration) -> float:
        hw, work = self.hw, self.work
        if not work.traced:
            work = work.model_copy(update={"bytes": work.bytes * cal.traffic_per_saved_byte})
        _, gpu = gpu_seconds(work, self.cfg, hw.gpu, cal)
        host = host_seconds(self.spec, self.cfg, cal, work) * self.host_factor
        crossing = crossing_seconds(gpu, host, self.cfg, self.recomputed, cal)
        step = overlap(gpu, host, cal.host_combine_p, crossing) * self.cfg.grad_accum
        step += self.opt_bytes / (hw.gpu.bandwidth_gbps * 1e9 * cal.rate_efficiency["bytes"])
        return self.samples / step


# What the throughput fit moves, each within physical bounds: fractions of a datasheet rate in
# (0, 1], microseconds per kernel, compile factors, the host/device combination's p.
# gpu_kernel_us from 1.2: the shortest elementwise kernel per call in the H200 kernel profiles
# (benchmarks/notebook/2026-12-04-kernel-profiles/h200-profiles-2026-12-04*.json: 1.22 us, an fp32 elementwise_kernel of HF BERT);
# no launch takes less, whatever the fit would trade it for.
_BOUNDS = {"gpu_kernel_us": (1.2, 5.0),
           "compile_traffic.cnn": (0.05, 1.0), "compile_traffic.transformer": (0.05, 1.0),
           "traffic_per_saved_byte": (1.0, 30.0), "host_combine_p": (1.0, 40.0),
           "compile_step_us.cnn": (0.0, 20000.0), "compile_step_us.transformer": (0.0, 20000.0),
           "compile_call_us.cnn": (10.0, 500.0), "compile_call_us.transformer": (10.0, 500.0),
           "compile_kernel_us": (0.0, 300.0),
           "launch_us_by_kind.cnn": (5.0, 100.0), "launch_us_by_kind.transformer": (5.0, 100.0),
           "light_launch_us": (2.0, 100.0),
           # the host's forward share of a step's dispatch: its forward is a third of the kernels (Python, slower
           # per op) and its backward two thirds (autograd's C++ engine); neither phase is free
           "host_forward_share.eager": (0.2, 0.9), "host_forward_share.compiled": (0.1, 0.9),
           # a checkpointed block's own host cost (hooks, the frame), reference host: up to ~40 heavy dispatches
           "ckpt_block_us": (0.0, 4000.0),
           # a wave's tail: up to one 256x128 fp32 tile of depth 4096 at 1/132 of 67 TFLOP/s is ~530 us
           "gemm_call_us.fp32": (0.01, 100.0), "gemm_call_us.tensor": (0.01, 30.0), "conv_call_us": (0.01, 30.0)}


def _get(cal: Calibration, name: str) -> float:
    if name.startswith("rate."):  # (Calibration fills a kind a file predates with its default)
        return cal.rate_efficiency[name[5:]]
    if "." in name:  # a kind of a per-kind group: compile_step_us.cnn, launch_us_by_kind.cnn, ...
        group, kind = name.split(".", 1)
        return getattr(cal, group).get(kind, 1.0)
    return getattr(cal, name)


def _set(cal: Calibration, name: str, value: float) -> Calibration:
    if name.startswith("rate."):
        return cal.model_copy(update={"rate_efficiency": {**cal.rate_efficiency, name[5:]: value}})
    if "." in name:
        group, kind = name.split(".", 1)
        return cal.model_copy(update={group: {**getattr(cal, group), kind: value}})
    return cal.model_copy(update={name: value})


def _loss(rows: list[_Row], cal: Calibration) -> float:
    """Mean squared log error of samples/s over the fit rows. Until the sixth unseen set the loss added
    a quarter of the worst row's, so that no configuration was given up for the others; with 100 fit
    rows that term held the whole fit hostage to one row and made the holdout's worst rows worse
    (refit at 4efbbe1 without it: holdout halves of the second to sixth sets 26.3% -> 24.8% worst, the
    seventh set 38.2% -> 30.0%, the other holdout rows 38.0% -> 31.4%, medians within 0.5 points)."""
    import math

    errs = [math.log(r.samples_per_s(cal) / r.r["samples_per_s"]) ** 2 for r in rows]
    return sum(errs) / len(errs)


# The host/GPU overlap's constants (advisor.throughput.crossing_seconds, host_seconds): the second stage fits these
# alone, on the H200 fit rows and issue 39's H100 set, every stage-one constant held. Stage one never moves them,
# so a refit warm-started from the packaged file writes it again (tests/test_calibration_reproduces.py's premise).
# Tried: stage two moving the host's launch and compile constants too fit better (the H200 holdout 6.1% / 54.7%
# against 6.2% / 59.5% with these three alone), but a refit from its own output then moved the GPU's rates
# (attn|tensor 0.262 -> 0.254): the packaged file was no longer what the fit writes.
OVERLAP_NAMES = ("host_forward_share.eager", "host_forward_share.compiled", "ckpt_block_us")


def fit(rows: list[dict], hw: HardwareSpec) -> Calibration:
    """Two stages of coordinate descent in log space, on fit rows only: every throughput constant on the H200's
    rows with the step's two totals combined (the fit as it was before issue 39's overlap, so the GPU's rates are
    the H200's alone); then the overlap's third path and the checkpointed block's host cost (``OVERLAP_NAMES``) on the H200's
    rows and issue 39's H100 set together, every other constant held: that set is where host and GPU
    time cross (small batches, checkpointing, compiled steps). Then the memory constants (compiled GELU, CNN
    checkpointing) as before."""
    fit_rows = [r for r in rows if r["split"] == "fit"]
    prepared = [_Row(r, hw) for r in fit_rows]
    fit_rows = [r for r in fit_rows if not r.get("throughput_only")]  # the memory constants' rows
    names = [f"rate.{k}" for k in Calibration().rate_efficiency] + [n for n in _BOUNDS if n not in OVERLAP_NAMES]
    # Ceilings measured on the same H200 (the JSONL headers): a large bf16 GEMM reaches 755-788 of
    # 989 TFLOP/s (0.8), a device copy 4.16-4.19 of 4.8 TB/s (0.87); nothing in a step does better.
    # Fused attention (FlashAttention-2/3, cuDNN's) reaches less of the peak than a large GEMM, never more.
    bounds = {**_BOUNDS, "rate.matmul|tensor": (0.05, 0.8), "rate.attn|tensor": (0.05, 0.8), "rate.bytes": (0.05, 0.87),
              # LayerNorm's and the strided kernel's rates within what the profiles measured
              # (benchmarks/notebook/2026-12-04-kernel-profiles/census_vs_profile.py, every eager profiled row: LayerNorm 0.10-0.34, strided
              # 0.06-0.27). Unbounded, the fit set them at 0.58 and 0.36 (0.87 and 0.87 with half of the
              # ninth to eleventh sets in the fit), buying other rows' fit with the encoder's (+20..36%).
              "rate.norm": (0.10, 0.35), "rate.permuted": (0.06, 0.30),
              "rate.conv_bytes|nchw": (0.005, 0.87), "rate.conv_bytes|nhwc": (0.005, 0.87),
              # element passes per SM cycle of a batch-norm block: one thread's worth to four per lane group
              "rate.bn_nchw|native": (0.05, 4.0), "rate.bn_nchw|cudnn": (0.05, 4.0)}

    def descend(cal: Calibration, prepared: list[_Row], names: list[str]) -> tuple[Calibration, float]:
        best = _loss(prepared, cal)
        step = 1.6
        while step > 1.01:
            improved = False
            for name in names:
                lo, hi = bounds.get(name, (0.005, 1.0))
                for f in (step, 1 / step):
                    v = _get(cal, name)
                    new = min(hi, max(lo, v * f if v > 0 else lo + 0.1 * (hi - lo)))
                    c = _set(cal, name, new)
                    loss = _loss(prepared, c)
                    if loss < best - 1e-9:
                        cal, best, improved = c, loss, True
                        break
            if not improved:
                step = step ** 0.5
        return cal, best

    def search(cal: Calibration, best: float, prepared: list[_Row], names: list[str], tries: int) -> Calibration:
        """Coordinate moves stall on ridges (a lighter light op and a heavier other op explain the same
        host-bound rows): then random directions in log space, all constants at once, seeded so that
        the fit is reproducible, each kept when it lowers the loss."""
        import math
        import random

        rng = random.Random(16)
        step = 0.2
        while step > 0.01:
            for _ in range(tries):
                c = cal
                for name in names:
                    lo, hi = bounds.get(name, (0.005, 1.0))
                    c = _set(c, name, min(hi, max(lo, _get(c, name) * math.exp(rng.gauss(0.0, step)))))
                loss = _loss(prepared, c)
                if loss < best - 1e-9:
                    cal, best = c, loss
            cal, best = descend(cal, prepared, names)
            step /= 2
        return cal

    # The host/device combination makes the loss non-convex: descend from a few starting p's, keep the best.
    starts = [Calibration(source="fit by benchmarks/calibration/fit.py", host_combine_p=p0,
                          host_dispatch_ref_us=dispatch_us(HOSTBOUND) if HOSTBOUND.exists() else None,
                          traffic_per_saved_byte=8.0,
                          compile_traffic={"cnn": 0.5, "transformer": 0.5},
                          launch_us_by_kind={"cnn": 40.0, "transformer": 40.0}, light_launch_us=20.0)
              for p0 in (2.0, 4.0, 8.0)]
    # And from the packaged calibration (the previous fit, with any kind of work it lacks at its
    # default): the loss is rough enough that cold starts stop in worse minima than a warm one (with
    # batch norm's blocks added at fa57920, the fit's loss 0.019 from the cold starts alone, 0.009 with this
    # one), and the best of all starts is kept. Its overlap terms are the second stage's: off here.
    if PACKAGED.exists():
        warm = Calibration.model_validate_json(PACKAGED.read_text())
        # per-launch tails start small, not at 0, which multiplicative moves never leave
        starts.append(warm.model_copy(update={"source": "fit by benchmarks/calibration/fit.py", "host": None,
                                              "light_launch_us": warm.light_launch_us or 0.5 * warm.launch_us,
                                              "compile_kernel_us": warm.compile_kernel_us or 20.0,
                                              "gemm_call_us": {k: v or 1.0 for k, v in warm.gemm_call_us.items()},
                                              "conv_call_us": warm.conv_call_us or 1.0,
                                              "host_forward_share": {}, "ckpt_block_us": 0.0}))
    def clamp(c: Calibration) -> Calibration:  # a start outside today's bounds begins at the nearest bound
        for name in names:
            lo, hi = bounds.get(name, (0.005, 1.0))
            c = _set(c, name, min(hi, max(lo, _get(c, name))))
        return c

    cal, best = min((descend(clamp(c), prepared, names) for c in starts), key=lambda cb: cb[1])
    cal = search(cal, best, prepared, names, 150)
    # Stage two: the overlap's constants on both GPUs' rows (issue 39's H100 set, each row predicted for the H100
    # and its host), from stage one's values and the overlap's starting guesses.
    h100 = h100_i39.hardware()  # the set's file header names the GPU: read once, not per row
    both = prepared + [_Row(r, h100) for r in h100_i39.measured_rows()]
    host_names = list(OVERLAP_NAMES)
    cal = cal.model_copy(update={"host_forward_share": {"eager": 0.5, "compiled": 0.5}, "ckpt_block_us": 200.0})
    cal, best = descend(cal, both, host_names)
    cal = search(cal, best, both, host_names, 60)
    # A kind with no fit row (none today) takes the mean of the fitted kinds.
    cal = cal.model_copy(update={"launch_us": statistics.mean(cal.launch_us_by_kind.values())})
    cal = cal.model_copy(update={
        "rate_efficiency": {k: round(v, 4) for k, v in cal.rate_efficiency.items()},
        "compile_step_us": {k: round(v, 1) for k, v in cal.compile_step_us.items()},
        "compile_call_us": {k: round(v, 2) for k, v in cal.compile_call_us.items()},
        "compile_traffic": {k: round(v, 3) for k, v in cal.compile_traffic.items()},
        "launch_us_by_kind": {k: round(v, 3) for k, v in cal.launch_us_by_kind.items()},
        "gemm_call_us": {k: round(v, 3) for k, v in cal.gemm_call_us.items()},
        "host_forward_share": {k: round(v, 3) for k, v in cal.host_forward_share.items()},
        **{k: round(getattr(cal, k), 3) for k in ("launch_us", "gpu_kernel_us", "light_launch_us", "conv_call_us", "compile_kernel_us",
                                                  "traffic_per_saved_byte", "host_combine_p", "ckpt_block_us")}})
    cal.compile_traffic_factor = round(statistics.median(cal.compile_traffic.values()), 3)
    return fit_memory(cal, fit_rows, hw)


def fit_memory(cal: Calibration, fit_rows: list[dict], hw: HardwareSpec) -> Calibration:
    """The memory constants on the fitted throughput constants: each a choice on a small grid that
    best predicts the fit rows' measured peaks (``fit_rows``: those marked fit, throughput-only
    ones left out). Apart from ``fit``'s descent so that the suite can check this stage on its own
    (tests/test_calibration_reproduces.py)."""
    cal = cal.model_copy()
    # Compiled transformers: the GELU MLP's kept tensors and cardwise's fused loss backward (advisor.compiled),
    # together, that best predict the fit compile rows' memory, with issue 39's H100 fit rows (memory only:
    # the peak does not depend on the GPU kind; benchmarks/calibration/h100_i39.py).
    compiled = [r for r in fit_rows + [r for r in h100_i39.measured_rows() if r["split"] == "fit"]
                if r["compile"] and spec_of(r).arch is not None]
    if compiled:
        def worst(pair):
            c = cal.model_copy(update={"compile_gelu_kept": pair[0], "compile_loss_bytes": pair[1]})
            return max(abs(predict(r, c, hw).memory.peak_gib / r["peak_gib"] - 1) for r in compiled)
        cal.compile_gelu_kept, cal.compile_loss_bytes = min(
            [(k, b / 2) for k in (1.0, 1.25, 1.5, 1.75, 2.0) for b in range(13)], key=worst)
    # Compiled traced models without token scaling (CNNs, U-Nets): the fraction of the eager step's
    # saved activations inductor keeps (it recomputes pointwise ops), from the compiled fit rows.
    compiled = [r for r in fit_rows if r["compile"] and spec_of(r).trace is not None
                and spec_of(r).trace.scales_with != "tokens"]
    if compiled:
        def worst_cnn(k):
            c = cal.model_copy(update={"compile_activation_factor": k})
            return max(abs(predict(r, c, hw).memory.peak_gib / r["peak_gib"] - 1) for r in compiled)
        # a factor on what GEMMs and convolutions touch (TraceProfile.saved_bytes_compiled): inductor may
        # keep more (a recomputation it judges too costly), or less (buffers it reuses)
        cal.compile_activation_factor = min([round(0.7 + 0.05 * i, 2) for i in range(15)], key=worst_cnn)
    # CNN checkpointing keeps this fraction of activations.
    for r in fit_rows:
        if r["grad_ckpt"] and spec_of(r).family == "cnn":
            e = predict(dict(r, grad_ckpt=False), cal, hw).memory
            saved = e.detail["saved_activations_gib"]  # autocast copies included, as the fit has always read it
            kept = r["peak_gib"] - (e.peak_gib - saved)
            cal.ckpt_fraction = round(max(0.05, min(1.0, kept / saved)), 4)
    return cal

def fitted() -> tuple[Calibration, str]:
    """The calibration fit on every measured row, as ``calibration.json`` writes it, and its report."""
    header, rows = all_rows()
    hw = HardwareSpec(gpu=get_gpu(header.get("device", "H200")))
    cal = fit(rows, hw)
    return json.dumps(cal.model_dump(), indent=1) + "\n", report(header, rows, cal, hw)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.calibration.fit", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=PACKAGED, help="the calibration written (default: the packaged one)")
    ap.add_argument("--report", type=Path, default=REPORT, help="the estimator table written (default: %(default)s)")
    args = ap.parse_args()
    calibration, table = fitted()
    args.out.write_text(calibration)
    args.report.write_text(table)
    print(table)


if __name__ == "__main__":
    main()
