"""Host time per GEMM/convolution launch of the compiled H200 rows: the figure behind the compiled host model.

    python -m benchmarks.notebook.2026-12-04-compiled-host.compiled_host_per_launch

For every compiled row of ``benchmarks.calibration.rows.all_rows()`` (fit and holdout) it prints the measured step
time, the step time over the row's host factor (what the reference host would take), the estimate's
host and GPU terms with the packaged calibration, and the launches the model is charged for: GEMMs,
convolutions and depthwise convolutions (``advisor.step_work.StepWork``), the kernels inductor writes
between them as the census counts them (``fused_kernels``, charged ``compile_kernel_us`` each), and
the eager op count it was charged for before (``kernels``). Rows whose GPU term is under 70% of their measured step are
host-bound (marked): their "ms per launch" is the host's time per launch, what
``Calibration.compile_call_us`` (with its fixed part, ``compile_step_us``, and ``compile_kernel_us``) is fit to; on the other rows
the columns are upper bounds. The median and range per kind (``advisor.throughput.compile_family``),
per launch and per eager op, over the marked rows close the table.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path


import benchmarks.calibration.rows as fc
from advisor.calibration import default_calibration
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.step_work import step_work
from advisor.throughput import compile_family, gpu_seconds, host_seconds

HOST_BOUND = 0.7  # GPU term under this share of the measured step: the host sets the pace


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    _, rows = fc.all_rows()
    cal = default_calibration()
    hw = HardwareSpec(gpu=get_gpu("H200"))
    print("| id | split | measured ms | at reference host ms | host term ms | GPU term ms | launches | "
          "fused kernels | eager ops | ms per launch | ms per eager op | |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    per_kind: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if not r.get("compile"):
            continue
        c = fc.row_calibration(r, cal)
        spec, cfg = fc.spec_of(r), fc.config_of(r)
        work = step_work(spec, cfg, c)
        _, gpu = gpu_seconds(work, cfg, hw.gpu, c)
        host = host_seconds(spec, cfg, c, work)
        step_ms = cfg.micro_batch / r["samples_per_s"] * 1e3
        ref_ms = step_ms / r.get("host_factor", 1.0)
        launches = work.matmul_calls + work.conv_calls + work.dwconv_calls
        bound = gpu * 1e3 < HOST_BOUND * step_ms
        if bound:
            per_kind.setdefault(compile_family(work), []).append((ref_ms / launches, ref_ms / work.kernels))
        print(f"| {r['id']} | {r['split']} | {step_ms:.1f} | {ref_ms:.1f} | {host * 1e3:.1f} | {gpu * 1e3:.1f} | "
              f"{launches:.0f} | {work.fused_kernels:.0f} | {work.kernels:.0f} | {ref_ms / launches:.3f} | {ref_ms / work.kernels:.4f} |"
              f"{' host-bound' if bound else ''}")
    print()
    for kind, v in sorted(per_kind.items()):
        launch, op = [x[0] for x in v], [x[1] for x in v]
        print(f"{kind}: {len(v)} host-bound rows; ms per launch median {statistics.median(launch):.3f} "
              f"({min(launch):.3f}-{max(launch):.3f}); ms per eager op median {statistics.median(op):.4f} "
              f"({min(op):.4f}-{max(op):.4f})")


if __name__ == "__main__":
    main()
