"""How a ``BenchResult`` is shown: rich table, terminal bars, CSV, Markdown, PNG (matplotlib).

Pure formatting of ``launcher.bench.result`` results; nothing here measures or estimates.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

from launcher.bench.analyse import summary_errors
from launcher.bench.result import BenchResult, BenchRow

BAR_WIDTH = 40
_EIGHTHS = " ▏▎▍▌▋▊▉█"


# ---------------------------------------------------------------- number formats
def _num(v: float | None, digits: int = 1) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}" if abs(v) >= 10 else f"{v:.{digits + 1}f}" if abs(v) >= 1 else f"{v:.3g}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _err(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.1f}"


def _util(r: BenchRow) -> str:
    v = r.gpu_util_pct if r.gpu_util_pct is not None else r.cpu_util_pct
    return "-" if v is None else f"{v:.0f}"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")  # a pipe ends a Markdown table cell, even inside backticks


def measured(result: BenchResult) -> list[BenchRow]:
    return [r for r in result.rows if r.status == "ok"]


def not_run(result: BenchResult) -> list[BenchRow]:
    return [r for r in result.rows if r.status != "ok"]


def _unit(result: BenchResult) -> str:
    return "proc" if result.cpu else "GPUs"


def _first_variant(result: BenchResult) -> str:
    return result.request.variants[0].label if result.request.variants else "first"


# ---------------------------------------------------------------- rich table
def rich_table(result: BenchResult, width: int | None = None):
    """The measured rows; under ~150 columns of terminal only the main columns (--report has all)."""
    from rich.table import Table

    rows = measured(result)
    compact = width is not None and width < 150
    tokens = any(r.tokens_per_s for r in rows) and not compact
    many_variants = len({r.variant for r in rows}) > 1
    many_models = len({r.model for r in rows}) > 1
    what = "" if many_models else f"{rows[0].model} " if rows else ""
    from rich import box

    t = Table(title=f"advise bench: {what}on {result.device}", title_justify="left", box=box.SIMPLE_HEAD,
              pad_edge=False, collapse_padding=True, caption=result.machine, caption_justify="left")
    cols: list[tuple[str, str, object]] = []
    if many_models:
        cols.append(("model", "left", lambda r: r.model))
    cols += [("variant", "left", lambda r: r.variant), ("mode", "left", lambda r: r.mode),
             (_unit(result), "right", lambda r: str(r.devices)), ("samples/s", "right", lambda r: _num(r.samples_per_s))]
    if tokens:
        cols.append(("tokens/s", "right", lambda r: _num(r.tokens_per_s, 0)))
    if not compact:
        cols.append(("step ms", "right", lambda r: _ms(r.step_s)))
    cols += [("speedup", "right", lambda r: _x(r.speedup)), ("eff", "right", lambda r: _pct(r.efficiency))]
    if many_variants:
        cols.append((f"vs {_first_variant(result)}", "right", lambda r: _x(r.variant_speedup)))
    cols.append(("peak GiB", "right", lambda r: _num(r.peak_gib, 2)))
    if not compact:
        cols += [("util %", "right", _util), ("comm ms", "right", lambda r: _ms(r.exposed_comm_s)),
                 ("est/s", "right", lambda r: _num(r.est_samples_per_s))]
    cols += [("err", "right", lambda r: _err(r.est_error_pct)), ("cal err", "right", lambda r: _err(r.calibrated_error_pct))]
    cells = [[cell(r) for _, _, cell in cols] for r in rows]
    keep = [i for i in range(len(cols)) if any(c[i] != "-" for c in cells)]  # e.g. peak GiB on CPU
    for i in keep:
        name, justify, _ = cols[i]
        t.add_column(name, justify=justify, no_wrap=True)
    for c in cells:
        t.add_row(*[c[i] for i in keep])
    if compact:
        t.caption = f"{result.machine}\nnarrow terminal: step time, utilisation, DDP communication and estimates are in --report/--csv/--json"
    return t


def not_run_lines(result: BenchResult) -> list[str]:
    return [f"{r.status}: {r.model} {r.variant} {r.mode} x{r.devices}: {r.reason}" for r in not_run(result)]


# ---------------------------------------------------------------- terminal plot
def _bar(value: float, top: float, width: int = BAR_WIDTH) -> str:
    if top <= 0 or value <= 0:
        return ""
    cells = value / top * width
    full = int(cells)
    rest = int((cells - full) * 8)
    return "█" * full + (_EIGHTHS[rest] if rest and full < width else "")


def terminal_plot(result: BenchResult, width: int = BAR_WIDTH) -> str:
    """Samples/s as text bars per model, with scaling efficiency (multi-device) or the speedup over
    the first variant; always printable (no matplotlib needed)."""
    lines: list[str] = []
    by_model: dict[str, list[BenchRow]] = {}
    for r in measured(result):
        by_model.setdefault(r.model, []).append(r)
    first = _first_variant(result)
    for model, rows in by_model.items():
        top = max(r.samples_per_s or 0 for r in rows)
        labels = [f"{r.variant} {r.mode} x{r.devices}" for r in rows]
        w = max(len(lab) for lab in labels)
        lines.append(f"{model}: samples/s")
        for lab, r in zip(labels, rows):
            extra = []
            if r.devices > 1 and r.efficiency is not None:
                extra.append(f"eff {r.efficiency:.0%}")
            if r.variant != first and r.variant_speedup is not None:
                extra.append(f"{r.variant_speedup:.2f}x vs {first}")
            tail = f" {_num(r.samples_per_s)}" + (f" ({', '.join(extra)})" if extra else "")
            lines.append(f"  {lab:<{w}} │{_bar(r.samples_per_s or 0, top, width):<{width}}│{tail}")
        lines.append("")
    return "\n".join(lines).rstrip()


# ---------------------------------------------------------------- CSV
CSV_FIELDS = list(BenchRow.model_fields)


def write_csv(result: BenchResult, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in result.rows:
            d = r.model_dump()
            d["peak_gib_devices"] = ";".join(f"{p:.4f}" for p in r.peak_gib_devices) if r.peak_gib_devices else ""
            w.writerow({k: ("" if v is None else v) for k, v in d.items()})
    return path


# ---------------------------------------------------------------- Markdown
def markdown(result: BenchResult, command: str | None = None) -> str:
    first = _first_variant(result)
    unit = "processes" if result.cpu else "GPUs"
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(result.started))
    out = [f"# advise bench: {', '.join(result.request.models)} on {result.device}", ""]
    out.append(f"{result.machine}; torch {result.torch or '?'}, accelerate {result.accelerate or '?'}; {when}; "
               f"{result.request.warmup} warm-up + {result.request.steps} timed steps per run, "
               f"{result.wall_s / 60:.1f} min in all.")
    if command:
        out += ["", f"Command: `{command}`"]
    out += ["", "samples/s: steady-state training, summed over all ranks, synthetic data already on the device, "
            "warm-up and compile excluded. speedup: over the single row of the same model and variant; "
            f"efficiency = speedup / {unit}; vs {first}: over the {first} row at the same mode and count. "
            "peak GiB: max over devices of torch.cuda.max_memory_allocated after warm-up. "
            "comm ms (DDP): forward+backward with the gradient all-reduce minus the same under no_sync(). "
            "est: the uncalibrated estimate (packaged constants); err = (estimate - measured) / measured; "
            "cal err: the same once this bench's factors (per GPU kind, family, precision, mode) apply.", ""]
    by_model: dict[str, list[BenchRow]] = {}
    for r in result.rows:
        by_model.setdefault(r.model, []).append(r)
    for model, rows in by_model.items():
        ok = [r for r in rows if r.status == "ok"]
        size = rows[0]
        shape = f"micro-batch {size.micro_batch} per device" + (f", sequence {size.seq_len}" if size.seq_len else "") + (
            f", image {size.image_size}px" if size.image_size else "")
        out += [f"## {model}", "", shape, ""]
        if ok:
            out += _md_table(ok, unit, first, multi=any(r.devices > 1 for r in result.rows if r.status == "ok"))
            if any(r.loader_samples_per_s for r in ok):
                out += ["", f"| variant | mode | {unit} | DataLoader workers | loader alone samples/s | training through it | on-device data |",
                        "|---|---|---:|---:|---:|---:|---:|"]
                for r in ok:
                    out.append(f"| {r.variant} | {r.mode} | {r.devices} | {r.dataloader_workers} | "
                               f"{_num(r.loader_samples_per_s)} | {_num(r.loader_train_samples_per_s)} | {_num(r.samples_per_s)} |")
        rest = [r for r in rows if r.status != "ok"]
        if rest:
            out += [""] + [f"- {r.status}: {r.variant} {r.mode} x{r.devices}: {r.reason}" for r in rest]
        out.append("")
    out += ["## Estimate error", "", "| | rows | median abs | worst abs |", "|---|---:|---:|---:|"]
    for label, key in [("throughput, before calibration", "est_error_pct"),
                       ("throughput, after calibration", "calibrated_error_pct"), ("peak memory", "peak_error_pct")]:
        med, worst, n = summary_errors(result.rows, key)
        out.append(f"| {label} | {n} | {'-' if med is None else f'{med:.1f}%'} | {'-' if worst is None else f'{worst:.1f}%'} |")
    if result.factors:
        out += ["", "## Calibration factors (measured / estimated samples/s)", "", "| key | factor |", "|---|---:|"]
        out += [f"| {_md_cell(k)} | {v:.3f} |" for k, v in sorted(result.factors.items())]
        out += ["", f"Saved to `{result.calibration_path}`." if result.calibration_path else "Not saved (--no-calibrate)."]
    if result.notes:
        out += ["", "## Notes", ""] + [f"- {n}" for n in result.notes]
    return "\n".join(out).rstrip() + "\n"


def _md_table(rows: list[BenchRow], unit: str, first: str, multi: bool) -> list[str]:
    """Columns that say something: speedup/efficiency/communication only with several devices,
    and none that is empty in every row (peak memory on CPU, tokens for CNNs)."""
    cols: list[tuple[str, bool, object]] = [  # (header, right-aligned, cell)
        ("variant", False, lambda r: r.variant), ("mode", False, lambda r: r.mode), (unit, True, lambda r: str(r.devices)),
        ("samples/s", True, lambda r: _num(r.samples_per_s)), ("tokens/s", True, lambda r: _num(r.tokens_per_s, 0)),
        ("step ms", True, lambda r: _ms(r.step_s))]
    if multi:
        cols += [("speedup", True, lambda r: _x(r.speedup)), ("efficiency", True, lambda r: _pct(r.efficiency))]
    if len({r.variant for r in rows}) > 1:
        cols.append((f"vs {first}", True, lambda r: _x(r.variant_speedup)))
    cols += [("peak GiB", True, lambda r: _num(r.peak_gib, 2)), ("est peak GiB", True, lambda r: _num(r.est_peak_gib, 2)),
             ("peak err", True, lambda r: _err(r.peak_error_pct)), ("util %", True, _util)]
    if multi:
        cols += [("comm ms", True, lambda r: _ms(r.exposed_comm_s)), ("est comm ms", True, lambda r: _ms(r.est_exposed_comm_s))]
    cols += [("est samples/s", True, lambda r: _num(r.est_samples_per_s)), ("err", True, lambda r: _err(r.est_error_pct)),
             ("cal err", True, lambda r: _err(r.calibrated_error_pct))]
    cells = [[cell(r) for _, _, cell in cols] for r in rows]
    keep = [i for i in range(len(cols)) if i < 3 or any(c[i] != "-" for c in cells)]
    lines = ["| " + " | ".join(cols[i][0] for i in keep) + " |",
             "|" + "|".join("---:" if cols[i][1] else "---" for i in keep) + "|"]
    lines += ["| " + " | ".join(c[i] for i in keep) + " |" for c in cells]
    return lines


def write_markdown(result: BenchResult, path: Path, command: str | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown(result, command))
    return path


# ---------------------------------------------------------------- PNG
class PlotUnavailable(Exception):
    pass


def write_png(result: BenchResult, path: Path) -> Path:
    """Throughput and efficiency against device count (bars per variant when all rows use one device).

    Raises ``PlotUnavailable`` when matplotlib is missing (an optional extra: ``pip install 'cardwise[plot]'``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("the PNG plot needs matplotlib: pip install 'cardwise[plot]' (or pip install matplotlib)") from None
    rows = measured(result)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    unit = "CPU processes" if result.cpu else "GPUs"
    if any(r.devices > 1 for r in rows):
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
        series: dict[str, list[BenchRow]] = {}
        single = {(r.model, r.variant): r for r in rows if r.mode == "single"}
        for r in rows:
            if r.mode != "single":
                series.setdefault(f"{r.model} {r.variant} {r.mode}", []).append(r)
        for label, pts in series.items():
            base = single.get((pts[0].model, pts[0].variant))
            pts = ([base] if base else []) + sorted(pts, key=lambda r: r.devices)
            xs = [p.devices for p in pts]
            ax1.plot(xs, [p.samples_per_s for p in pts], marker="o", label=label)
            ax2.plot(xs, [p.efficiency if p.efficiency is not None else float("nan") for p in pts], marker="o", label=label)
        ax1.set(xlabel=unit, ylabel="samples/s", title="throughput")
        ax2.set(xlabel=unit, ylabel="speedup / count", title="scaling efficiency", ylim=(0, 1.1))
        ax2.axhline(1.0, color="grey", lw=0.8, ls="--")
        for ax in (ax1, ax2):
            ax.grid(alpha=0.3)
        ax1.legend(fontsize=7)
    else:
        models = list(dict.fromkeys(r.model for r in rows))
        fig, axes = plt.subplots(1, max(1, len(models)), figsize=(3.2 * max(1, len(models)), 3.6), squeeze=False)
        for ax, model in zip(axes[0], models):
            mine = [r for r in rows if r.model == model]
            ax.barh([r.variant for r in mine], [r.samples_per_s for r in mine], color="tab:blue")
            ax.set(title=model, xlabel="samples/s")
            ax.invert_yaxis()
            ax.tick_params(axis="y", labelsize=7)
    fig.suptitle(f"advise bench on {result.device}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
