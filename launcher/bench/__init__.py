"""``advise bench``: measured single- vs multi-GPU (or CPU-process) training, beside the estimate.

    from launcher.bench import BenchRequest, Variant, run_bench
    result = run_bench(BenchRequest(models=["resnet50"], counts=[1, 2, 4, 8],
                                    modes=["single", "dp", "ddp", "fsdp"], variants=[Variant.parse("bf16")]))
    result.rows[0].samples_per_s, result.rows[0].speedup, result.rows[0].est_error_pct

One module per part, as Accelerate splits its commands:
- ``request``: what was asked (variants like ``bf16+compile``, device counts, modes) and ``Job``;
- ``plan``: *planning* (``plan_jobs``: every requested (model, variant, mode, device count)
  becomes a job, or a skipped row that says why);
- ``run``: *running* (``run_job``: one ``launcher.runner.execute`` of the
  ``launcher.recipes.bench_dp`` worker per job, recorded in the run store like any launch, with a
  utilisation sampler beside it; ``run_bench``: every job, then the arithmetic);
- ``analyse``: *arithmetic* (``finish``: speedups, scaling efficiencies, the estimate beside each
  measurement, its error, and the calibration factors);
- ``result``: the rows and the result, kept as JSON; ``report``: formatting (table, CSV, Markdown, PNG).

Definitions (each row):
- ``samples_per_s``: steady-state training samples/s summed over all ranks, data already on the
  device, warm-up (and compile) excluded: the quantity ``advise estimate`` predicts.
- ``speedup``: samples/s over the single-device row of the same model and variant;
  ``efficiency`` = speedup / devices (1.0 = perfect scaling).
- ``variant_speedup``: samples/s over the first variant's row of the same model, mode and count
  (with ``--precision fp32,bf16,...``: the speedup over fp32).
- ``peak_gib``: max over devices of ``torch.cuda.max_memory_allocated()`` after warm-up (GPU 0
  for DataParallel, which gathers outputs and holds the optimizer there).
- ``exposed_comm_s`` (DDP): median forward+backward with the gradient all-reduce minus the same
  under ``no_sync()``: the communication backward does not hide.
- ``est_*``: the uncalibrated estimate (packaged constants, no per-machine factor), and
  ``calibrated_*`` the estimate once this bench's factors apply ("before" and "after").

Importing this package never imports torch; the workers do.
"""

# The public names, as ``launcher.bench`` had them when it was one module.

from launcher.bench.analyse import finish, summary_errors
from launcher.bench.plan import cpu_device_spec, hardware_for, make_plan, plan_jobs, visible_gpus
from launcher.bench.request import MODES, BenchRequest, Job, Variant, parse_counts, parse_modes, parse_variants
from launcher.bench.result import BenchResult, BenchRow, load_result, row_for
from launcher.bench.run import ProgressFn, UtilSampler, run_bench, run_job

__all__ = ["finish", "summary_errors", "cpu_device_spec", "hardware_for", "make_plan", "plan_jobs", "visible_gpus",
           "MODES", "BenchRequest", "Job", "Variant", "parse_counts", "parse_modes", "parse_variants", "BenchResult",
           "BenchRow", "load_result", "row_for", "ProgressFn", "UtilSampler", "run_bench", "run_job"]
