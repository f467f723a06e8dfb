"""What a compiled step launched on the H200 beside what the estimator counts for it.

    python -m benchmarks.notebook.2026-12-04-compiled-host.compiled_kernels_vs_census [results/h200-compiled-kernels-2026-12-04/compiled-kernels.json]

For each row that ``compiled_overlap.py --fresh`` measured (each model in a process of its own): the
Triton kernels inductor launched per step (the profile's "triton" group) against the census's
``fused_kernels`` (advisor.trace_counters: runs of ops between GEMMs/convolutions and their reductions,
advisor.step_work for the compiled math-path attention), and the GEMM/convolution launches against
``matmul_calls + conv_calls + dwconv_calls``; then the host's time for one step on an idle GPU, scaled to
the reference host by the row's own probe (``host_dispatch_us`` over the calibration's
``host_dispatch_ref_us``), against ``advisor.throughput.host_seconds`` at the reference host. Prints a
markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]  # benchmarks/

import benchmarks.calibration.rows as fc
from advisor.calibration import default_calibration
from advisor.step_work import step_work
from advisor.throughput import host_seconds

DEFAULT = HERE / "calibration" / "results" / "h200-compiled-kernels-2026-12-04" / "compiled-kernels.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="?", type=Path, default=DEFAULT, help="compiled_overlap --fresh's JSON (default: %(default)s)")
    path = ap.parse_args().path
    measured = [r for r in json.loads(path.read_text()) if "host_ms" in r]
    cal = default_calibration().model_copy(update={"host": None})  # the reference host
    _, rows = fc.all_rows()
    rows = {r["id"]: r for r in rows}  # the configurations as the fit has them (fc.fresh_compiled_rows)
    print("| row | Triton kernels | census fused | ratio | GEMM/conv launches | census calls | host ms (ref host) "
          "| estimate ms | error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    ratios, errors = [], []
    for m in measured:
        spec, cfg = fc.spec_of(rows[m["id"]]), fc.config_of(rows[m["id"]])
        work = step_work(spec, cfg, cal)
        groups = m["profile"]["kernel_groups"]
        triton = groups.get("triton", 0.0)
        externs = sum(groups.get(g, 0.0) for g in ("gemm", "conv", "conv_depthwise", "attention"))
        calls = work.matmul_calls + work.conv_calls + work.dwconv_calls
        host = m["host_ms"] / (m["host_dispatch_us"] / cal.host_dispatch_ref_us)
        predicted = host_seconds(spec, cfg, cal, work) * 1e3
        ratios.append(triton / work.fused_kernels)
        errors.append(predicted / host - 1)
        print(f"| {m['id']} | {triton:.0f} | {work.fused_kernels:.0f} | {ratios[-1]:.2f} | {externs:.0f} | {calls:.0f} "
              f"| {host:.1f} | {predicted:.1f} | {errors[-1]:+.0%} |")
    print(f"\nTriton kernels per census kernel: {min(ratios):.2f}-{max(ratios):.2f} (median {statistics.median(ratios):.2f}); "
          f"host estimate: median abs error {statistics.median(abs(e) for e in errors):.0%}, "
          f"worst {max(errors, key=abs):+.0%}")


if __name__ == "__main__":
    main()
