"""``advise estimate``: memory and throughput of one exact configuration; nothing is chosen.

Flags not given take stated defaults (reported once, in ``defaults_applied``): micro-batch 8
(1 for decoder LLMs over 1B parameters), precision bf16 where the GPU supports it else fp16,
strategy single on one GPU else ddp, the model's own sequence length / image size, AdamW.
The JSON is DESIGN.md's contract (``model``, ``hardware``, ``memory``, ``throughput``) plus
``config``, ``time_to_train_h``, ``notes`` and ``defaults_applied``.
"""

from __future__ import annotations

import argparse
import json
import sys

from cli.flags import (add_config_flags, add_hardware_flags, add_home_flag, add_json_flag, add_model_flags,
                       request_number)


def add_parser(parser: argparse.ArgumentParser, name: str) -> None:
    add_model_flags(parser, required=True)
    add_config_flags(parser)
    add_hardware_flags(parser)
    g = parser.add_argument_group("workload (for time-to-train)")
    g.add_argument("--dataset-size", type=request_number("dataset_size"), metavar="N", help="training samples per epoch")
    g.add_argument("--epochs", type=request_number("epochs"), metavar="N", help="passes over the dataset")
    add_home_flag(parser)
    add_json_flag(parser)


def build(args: argparse.Namespace):
    """(Estimate, defaults applied) for the flags (``advisor.exact.estimate_request``)."""
    from advisor.calibration import load_calibration
    from advisor.exact import estimate_request
    from cli.flags import home_dir, request_from_namespace

    return estimate_request(request_from_namespace(args), calibration=load_calibration(home_dir(args)))


def run(args: argparse.Namespace) -> int:
    est, applied = build(args)
    if args.json:
        out = est.model_dump(mode="json")
        out["defaults_applied"] = applied
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        return 0
    render(est, applied)
    return 0


def render(est, applied: list[str], console=None) -> None:
    from advisor.setup import labels
    from cli.console import report_console
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    from advisor.units import format_efficiency, format_hours
    from cli.recommend_cmd import memory_bar

    console = console or report_console()
    m, t, c, hw = est.memory, est.throughput, est.config, est.hardware
    title = (f"{est.model.name} ({est.model.params:,} params) on {hw.count}x {hw.gpu}: {c.strategy.value}, micro-batch "
             f"{c.micro_batch} x accum {c.grad_accum}, {c.precision.value}, {c.optimizer.value}"
             + (", compile" if c.compile else "") + (", checkpointing" if c.grad_ckpt else "")
             + "".join(f", {t}" for t in labels(c)))
    console.print(Text(title, style="bold"))
    console.print(Text(f"estimated code: {est.model.implementation or 'unnamed'}"
                       + (f"; loss assumed: {est.model.loss}" if est.model.loss else ""), style="dim"))
    if applied:
        console.print(Text("defaults: " + "; ".join(applied), style="dim"))
    tab = Table(title=f"memory per GPU at the peak ({m.peak_at}), GiB", title_justify="left", show_edge=False)
    tab.add_column("part")
    tab.add_column("GiB", justify="right")
    for part in m.peak_parts:
        tab.add_row(part.name, f"{part.gib:.2f}")
    tab.add_row("[bold]peak allocated (the sum)[/bold]", f"[bold]{m.peak_gib:.2f}[/bold]")
    if m.other_moment:
        tab.add_row(f"[dim]{m.other_moment}[/dim]", "")
    if m.host_gib:
        tab.add_row("host RAM per rank (CPU offload)", f"{m.host_gib:.2f}")
        tab.add_row("host RAM per node (all its ranks)", f"{m.host_node_gib:.2f}")
    tab.add_row("nvidia-smi (allocator + context)", f"{m.device_gib:.2f}")
    tab.add_row("GPU memory", f"{m.gpu_memory_gib:.2f}")
    console.print(tab)
    console.print(Panel(memory_bar(m), title="memory against the GPU", title_align="left"))
    thr = Table(title="throughput", title_justify="left", show_edge=False)
    thr.add_column("")
    thr.add_column("", justify="right")
    thr.add_row("samples/s (all GPUs)", f"{t.samples_per_s:,.2f}")
    if t.tokens_per_s:
        thr.add_row("tokens/s", f"{t.tokens_per_s:,.0f}")
    thr.add_row("step (s)", f"{t.step_s:.4g}")
    thr.add_row("MFU", f"{t.mfu:.1%}")
    if hw.count > 1:
        thr.add_row("communication per step (s)", f"{t.comm_s:.3g} ({t.exposed_comm_s:.3g} exposed)")
        if t.comm is not None:
            thr.add_row("  link", f"{t.comm.link}, {t.comm.bus_gbps:.0f} GB/s bus" + (
                f"; network {t.comm.network_bus_gbps:.1f} GB/s bus" if t.comm.network_bus_gbps else "")
                + (f"; {t.comm.buckets} DDP buckets" if t.comm.buckets else ""))
        thr.add_row("waiting for the slowest rank (s)", f"{t.sync_s:.3g}")
        # the same configuration on one GPU; capped at 100% (advisor.estimate): a sharded optimizer step can make
        # N GPUs look superlinear, which is not scaling; an estimate never reads a bare 100% (format_efficiency)
        thr.add_row("scaling efficiency", format_efficiency(t.scaling_efficiency, t.calibrated)
                    + (" (capped: the sharded optimizer step makes it look superlinear)"
                       if t.scaling_efficiency >= 1.0 and not t.calibrated else ""))
    if t.loader is not None:
        ld = t.loader
        rate = "not limited" if ld.samples_per_s_per_gpu is None else f"{ld.samples_per_s_per_gpu:,.0f} samples/s per GPU"
        thr.add_row("input pipeline", f"{ld.data} via {ld.loader}: {rate}" + (" (LIMITS samples/s)" if t.loader_bound else ""))
        thr.add_row("  cores per GPU", f"{ld.cpus_per_gpu:g} ({ld.cpus_source})")
        from advisor.loader import per_core_words

        if per_core_words(ld) and ld.data in ("jpeg", "decoded"):
            thr.add_row("  per core", per_core_words(ld))
        if t.loader_bound:
            thr.add_row("  GPUs alone", f"{t.gpu_samples_per_s:,.2f} samples/s")
    if t.transferred:
        thr.add_row("without transferred gains", f"{t.conservative_samples_per_s:,.2f} samples/s")
    if t.host_bound:
        thr.add_row("bound by", "kernel launches (host)")
    if est.time_to_train_h is not None:
        thr.add_row("time to train", format_hours(est.time_to_train_h))
    console.print(thr)
    if hw.network:
        console.print(Text(f"network between nodes: {hw.network}"))
    if t.loader_bound:
        for fix in t.loader.fixes:
            console.print(Text(f"input fix: {fix}", style="yellow"))
    console.print(Text("calibration: " + ("; ".join(c.summary() for c in est.calibration)
                                          or "packaged constants only (advise probe / advise bench measure this machine)")))
    for n in est.notes:
        console.print(Text(f"note: {n}", style="dim"))
