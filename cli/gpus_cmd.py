"""`advise gpus [--json]`: what NVML sees on this machine; `advise gpus --list [--json]`: the GPU table.

No GPU (or no driver / NVML) is not an error: it prints why and how to plan anyway, exit 0.
Never imports torch and never initialises CUDA (NVML only).
"""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--list", action="store_true", help="show the GPU spec table instead of what is detected")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list(args.json)
    return _detected(args.json)


# ------------------------------------------------------------------ advise gpus --list
def _list(as_json: bool) -> int:
    from advisor.gpu_perf import performance_model
    from advisor.gpus import all_gpus

    gpus = all_gpus()
    if as_json:  # with each GPU's performance model (achievable fractions by work kind, sources)
        rows = [dict(g.model_dump(mode="json"), supports_bf16=g.supports_bf16, arch=g.arch,
                     performance=performance_model(g).model_dump(mode="json")) for g in gpus]
        print(json.dumps(rows, indent=2))
        return 0
    from rich.table import Table

    t = Table(title="GPU table (dense tensor-core peaks; `--gpu NAME` accepts any name or alias)", title_justify="left")
    for col, kw in (("name", {}), ("memory", {"justify": "right"}), ("bandwidth", {"justify": "right"}),
                    ("fp32", {"justify": "right"}), ("tf32", {"justify": "right"}),
                    ("bf16", {"justify": "right"}), ("fp16", {"justify": "right"}), ("fp8", {"justify": "right"}),
                    ("arch", {}), ("cc", {}),
                    ("NVLink", {"justify": "right"}), ("PCIe", {"justify": "right"}), ("source", {"overflow": "fold"})):
        t.add_column(col, **kw)
    for g in gpus:
        t.add_row(
            g.name, f"{g.memory_gib:g} GiB", f"{g.bandwidth_gbps:,.0f} GB/s",
            f"{g.fp32_tflops:g}", f"{g.tf32_tflops:g}", f"{g.bf16_tflops:g}" if g.bf16_tflops else "-",
            f"{g.fp16_tflops:g}", f"{g.fp8_tflops:g}" if g.fp8_tflops else "-", g.arch,
            f"{g.compute_capability[0]}.{g.compute_capability[1]}",
            f"{g.nvlink_gbps:g} GB/s" if g.nvlink_gbps else "-", f"{g.pcie_gbps:g} GB/s", g.source,
        )
    _console().print(t)
    print("TFLOPS are dense peaks (no sparsity); link figures are bidirectional per GPU. "
          "`--list --json` adds each GPU's achievable fractions by work kind, with their sources.")
    return 0


# ------------------------------------------------------------------ advise gpus
def _detected(as_json: bool) -> int:
    from advisor import hardware

    machine = hardware.detect_machine()
    if as_json:
        out = machine.model_dump(mode="json")
        out["has_gpu"] = machine.has_gpu
        out["summary"] = machine.summary()
        out["links_matrix"] = _matrix(machine)
        print(json.dumps(out, indent=2))
        return 0
    if not machine.has_gpu:
        print(f"no GPU detected ({machine.nvml_error or 'NVML reports 0 GPUs'}); plan with --gpu NAME "
              "(`advise gpus --list` shows the names)")
        print(f"CPU: {machine.cpu_cores} cores, RAM: {machine.ram_gib:.1f} GiB")
        return 0
    from rich.table import Table

    t = Table(title=f"{len(machine.gpus)} GPU(s) detected by NVML", title_justify="left")
    for col, kw in (("#", {"justify": "right"}), ("name", {}), ("memory total", {"justify": "right"}),
                    ("free", {"justify": "right"}), ("cc", {}), ("util", {"justify": "right"}), ("table row", {})):
        t.add_column(col, **kw)
    for g in machine.gpus:
        cc = f"{g.compute_capability[0]}.{g.compute_capability[1]}" if g.compute_capability else "?"
        util = f"{g.utilization_pct:.0f}%" if g.utilization_pct is not None else "?"
        t.add_row(str(g.index), g.name, f"{g.memory_total_gib:.1f} GiB", f"{g.memory_free_gib:.1f} GiB", cc, util,
                  g.spec or "(not in the table: plan with --gpu NAME)")
    con = _console()
    con.print(t)
    matrix = _matrix(machine)
    if matrix:
        m = Table(title="links (NV# = NVLink count, PCIe = no NVLink)", title_justify="left")
        m.add_column("")
        for i in range(len(matrix)):
            m.add_column(f"GPU{i}", justify="center")
        for i, row in enumerate(matrix):
            m.add_row(f"GPU{i}", *row)
        con.print(m)
    print(f"driver: {machine.driver or '?'}" + (f" (CUDA {machine.cuda_driver})" if machine.cuda_driver else ""))
    print(f"CPU: {machine.cpu_cores} cores, RAM: {machine.ram_gib:.1f} GiB")
    return 0


def _matrix(machine) -> list[list[str]]:
    """nvidia-smi topo style: 'X' on the diagonal, 'NV<n>' or 'PCIe' between pairs; [] for < 2 GPUs."""
    n = len(machine.gpus)
    if n < 2:
        return []
    cells = [["X" if i == j else "?" for j in range(n)] for i in range(n)]
    for link in machine.links:
        if link.a < n and link.b < n:
            text = f"NV{link.nvlinks}" if link.kind == "nvlink" else ("PCIe" if link.kind == "pcie" else "-")
            cells[link.a][link.b] = cells[link.b][link.a] = text
    return cells


def _console():
    from rich.console import Console

    # Wide enough for the table's sources when piped; rich wraps to the terminal otherwise.
    return Console(width=None if sys.stdout.isatty() else 200)
