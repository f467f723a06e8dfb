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

from launcher.cli.flags import (add_config_flags, add_hardware_flags, add_home_flag, add_json_flag, add_model_flags,
                                positive_float, positive_int)


def add_parser(parser: argparse.ArgumentParser, name: str) -> None:
    add_model_flags(parser, required=True)
    add_config_flags(parser)
    add_hardware_flags(parser)
    g = parser.add_argument_group("workload (for time-to-train)")
    g.add_argument("--dataset-size", type=positive_int, metavar="N", help="training samples per epoch")
    g.add_argument("--epochs", type=positive_float, metavar="N", help="passes over the dataset")
    add_home_flag(parser)
    add_json_flag(parser)


def build(args: argparse.Namespace):
    """(Estimate, defaults applied) for the flags; pure apart from resolving model, GPU and calibration."""
    import os

    from advisor.calibration import load_calibration
    from advisor.config import Optimizer, Precision, Strategy, TrainConfig
    from advisor.errors import UserError
    from advisor.estimate import estimate
    from advisor import hardware
    from advisor.hardware import Machine, resolve_hardware
    from launcher.cli.flags import home_dir, model_ref
    from rules.api import resolve_model

    if bool(args.dataset_size) != bool(args.epochs):
        raise UserError("time-to-train needs both --dataset-size and --epochs", fix="give both, or neither")
    spec = resolve_model(model_ref(args))
    machine = Machine(cpu_cores=os.cpu_count() or 1) if args.gpu else hardware.detect_machine()
    hw = resolve_hardware(machine, args.gpu, args.gpus, args.nodes, args.interconnect, args.network_gbps)
    applied: list[str] = []
    llm = spec.family == "decoder" and spec.params > 1e9
    micro = args.micro_batch
    if micro is None:
        micro = 1 if llm else 8
        applied.append(f"micro-batch {micro}" + (" (decoder LLM over 1B parameters)" if llm else ""))
    precision = args.precision
    if precision is None:
        precision = "bf16" if hw.gpu.supports_bf16 else "fp16"
        applied.append(f"precision {precision} ({hw.gpu.name} {'supports' if hw.gpu.supports_bf16 else 'lacks'} bf16)")
    strategy = args.strategy
    if strategy is None:
        strategy = "single" if hw.total_gpus == 1 else "ddp"
        applied.append(f"strategy {strategy} ({hw.total_gpus} GPU{'s' if hw.total_gpus > 1 else ''})")
    elif strategy == "single" and hw.total_gpus > 1:
        raise UserError(f"--strategy single with {hw.total_gpus} GPUs", fix="use --gpus 1, or --strategy ddp|fsdp")
    seq_len = args.seq_len or (spec.default_seq_len if spec.is_text else None)
    if args.seq_len is None and seq_len:
        applied.append(f"seq len {seq_len} (the model's)")
    image = args.image_size or (spec.default_image_size if spec.is_vision else None)
    if args.image_size is None and image:
        applied.append(f"image size {image} (the model's)")
    if args.optimizer is None:
        applied.append("optimizer adamw")
    cfg = TrainConfig(micro_batch=micro, grad_accum=args.grad_accum or 1, seq_len=seq_len, image_size=image,
                      precision=Precision(precision), optimizer=Optimizer(args.optimizer or "adamw"),
                      compile=bool(args.compile), channels_last=bool(args.channels_last), grad_ckpt=bool(args.grad_ckpt),
                      strategy=Strategy(strategy), lora_rank=args.lora_rank)
    est = estimate(spec, cfg, hw, dataset_size=args.dataset_size, epochs=args.epochs,
                   calibration=load_calibration(home_dir(args)))
    return est, applied


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
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    from launcher.cli.recommend_cmd import hours, memory_bar

    console = console or Console(width=max(100, Console().width))
    m, t, c, hw = est.memory, est.throughput, est.config, est.hardware
    title = (f"{est.model.name} ({est.model.params:,} params) on {hw.count}x {hw.gpu}: {c.strategy.value}, micro-batch "
             f"{c.micro_batch} x accum {c.grad_accum}, {c.precision.value}, {c.optimizer.value}"
             + (", compile" if c.compile else "") + (", checkpointing" if c.grad_ckpt else "")
             + (f", LoRA r{c.lora_rank}" if c.lora_rank else ""))
    console.print(Text(title, style="bold"))
    if applied:
        console.print(Text("defaults: " + "; ".join(applied), style="dim"))
    tab = Table(title="memory per GPU (GiB)", title_justify="left", show_edge=False)
    tab.add_column("part")
    tab.add_column("GiB", justify="right")
    for key, label in (("weights_gib", "weights"), ("gradients_gib", "gradients"), ("optimizer_gib", "optimizer states"),
                       ("activations_gib", "activations"), ("other_gib", "other (loss temps, buckets, workspaces)")):
        tab.add_row(label, f"{getattr(m, key):.2f}")
    tab.add_row("[bold]peak allocated[/bold]", f"[bold]{m.peak_gib:.2f}[/bold]")
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
        thr.add_row("scaling efficiency", f"{t.scaling_efficiency:.0%}")
    if t.host_bound:
        thr.add_row("bound by", "kernel launches (host)")
    if est.time_to_train_h is not None:
        thr.add_row("time to train", hours(est.time_to_train_h))
    console.print(thr)
    for n in est.notes:
        console.print(Text(f"note: {n}", style="dim"))
