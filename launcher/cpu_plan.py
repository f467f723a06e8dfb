"""A Plan for ``advise launch --cpu --processes N``: CPU ranks over gloo, no GPU estimate.

CPU runs are for trying a pipeline end to end (and for cardwise's own tests), so nothing here
is estimated: the flags give the shape, and only arithmetic fills the rest, the same arithmetic
the rules use on GPUs:

    global batch = micro-batch x accumulation x processes x nodes
    lr           = scaled_lr(base_lr, base_batch, global batch, --lr-scaling)

Every default applied is reported once (returned as notes), never silently.
"""

from __future__ import annotations

import argparse
import math

from advisor.config import Optimizer, Precision, Strategy, TrainConfig
from advisor.errors import UserError
from advisor.plan import Plan, scaled_lr

DEFAULT_MICRO_BATCH = 4
DEFAULT_SEQ_LEN = 128  # CPU-friendly; catalog defaults (1024-2048) take minutes per step on a laptop
BASE_LR = {Optimizer.sgd: 0.1, Optimizer.adamw: 3e-4, Optimizer.adamw_8bit: 3e-4}
WARMUP_FRACTION = 0.05


def _get(args: argparse.Namespace, name: str, default=None):
    value = getattr(args, name, None)
    return default if value is None else value


def plan_from_args(args: argparse.Namespace) -> tuple[Plan, list[str]]:
    """(plan, notes on defaults applied) from launch flags with ``--cpu``."""
    from launcher.cli.flags import model_ref

    notes: list[str] = []
    if _get(args, "gpus") is not None or _get(args, "gpu") is not None:
        raise UserError("--gpu/--gpus do not apply to --cpu runs", fix="use --processes N for N CPU ranks, or drop --cpu")
    model = model_ref(args)
    procs = _get(args, "processes", 1)
    nodes = _get(args, "nodes", 1)
    ranks = procs * nodes

    precision = Precision(_get(args, "precision", "fp32"))
    if precision is Precision.fp16:
        raise UserError("fp16 autocast needs a GPU", fix="use --precision bf16 (CPUs run bf16 autocast) or fp32")
    strategy = Strategy(_get(args, "strategy", "ddp" if ranks > 1 else "single"))

    micro = _get(args, "micro_batch")
    if micro is None:
        micro = DEFAULT_MICRO_BATCH
        notes.append(f"micro-batch {micro} per process (--micro-batch to change)")
    accum = _get(args, "grad_accum")
    batch = _get(args, "batch_size")
    if batch is not None:
        per_step = micro * ranks
        if accum is None:
            if batch % per_step:
                raise UserError(f"--batch-size {batch} is not a multiple of micro-batch {micro} x {ranks} ranks = {per_step}",
                                fix=f"use --batch-size {max(per_step, batch // per_step * per_step)} or another --micro-batch")
            accum = batch // per_step
        elif micro * accum * ranks != batch:
            raise UserError(f"micro-batch {micro} x accumulation {accum} x {ranks} ranks = {micro * accum * ranks}, "
                            f"not --batch-size {batch}", fix="drop --grad-accum and cardwise derives it, or fix the numbers")
    accum = accum or 1
    global_batch = micro * accum * ranks

    seq_len, image_size = _get(args, "seq_len"), _get(args, "image_size")
    if model.name and seq_len is None:
        try:
            from advisor.catalog import catalog_model

            spec = catalog_model(model.name)
        except Exception:
            spec = None  # the launch reports unknown names; scripts may not use the catalog
        if spec is not None and spec.arch is not None and not spec.is_vision:
            seq_len = min(DEFAULT_SEQ_LEN, spec.default_seq_len or DEFAULT_SEQ_LEN)
            notes.append(f"sequence length {seq_len} for CPU (--seq-len to change)")

    optimizer = Optimizer(_get(args, "optimizer", "adamw"))
    base_lr = _get(args, "base_lr")
    if base_lr is None:
        base_lr = BASE_LR[optimizer]
        notes.append(f"base LR {base_lr:g} for {optimizer.value} (--base-lr to change)")
    base_batch = _get(args, "base_batch", global_batch)
    rule = _get(args, "lr_scaling", "linear")
    lr = scaled_lr(base_lr, base_batch, global_batch, rule)
    if base_batch != global_batch:
        notes.append(f"LR {lr:g}: {base_lr:g} scaled {rule} from batch {base_batch} to {global_batch}")

    total = None
    dataset, epochs = _get(args, "dataset_size"), _get(args, "epochs")
    if dataset:
        total = max(1, math.ceil(dataset * (epochs or 1) / global_batch))
    steps_known = total or _get(args, "max_steps")
    warmup = _get(args, "warmup_steps")
    if warmup is None:
        warmup = max(1, round(WARMUP_FRACTION * steps_known)) if steps_known else 0
        if warmup:
            notes.append(f"{warmup} warmup step(s), {WARMUP_FRACTION:.0%} of the run (--warmup-steps to change)")

    config = TrainConfig(micro_batch=micro, grad_accum=accum, seq_len=seq_len, image_size=image_size,
                         precision=precision, optimizer=optimizer, compile=bool(_get(args, "compile", False)),
                         channels_last=bool(_get(args, "channels_last", False)),
                         grad_ckpt=bool(_get(args, "grad_ckpt", False)), strategy=strategy,
                         lora_rank=_get(args, "lora_rank"))
    plan = Plan(model=model, config=config, gpu=None, processes_per_node=procs, nodes=nodes, cpu=True,
                global_batch=global_batch, lr=lr, base_lr=base_lr, base_batch=base_batch, lr_scaling=rule,
                warmup_steps=warmup, total_steps=total, epochs=epochs, dataset_size=dataset,
                num_workers=_get(args, "num_workers", 0), pin_memory=False, task=_get(args, "task"))
    return plan, notes
