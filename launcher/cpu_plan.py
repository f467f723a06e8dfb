"""A Plan for ``advise launch --cpu --processes N``: CPU ranks over gloo, no GPU estimate.

CPU runs are for trying a pipeline end to end (and for cardwise's own tests), so nothing here
is estimated: the flags give the shape, and only arithmetic fills the rest, the same arithmetic
the rules use on GPUs:

    global batch = micro-batch x accumulation x processes x nodes
    lr           = scaled_lr(base_lr, base_batch, global batch, --lr-scaling)

Every default applied is reported once (returned as notes), never silently.
"""

from __future__ import annotations

import math

from advisor.config import Optimizer
from advisor.errors import UserError
from advisor.plan import Plan, scaled_lr
from advisor.request import Request
from advisor.starting_config import starting_config

BASE_LR = {Optimizer.sgd: 0.1, Optimizer.adamw: 3e-4, Optimizer.adamw_8bit: 3e-4}
WARMUP_FRACTION = 0.05


def cpu_plan(req: Request, *, processes: int = 1, max_steps: int | None = None, warmup_steps: int | None = None,
             num_workers: int | None = None) -> tuple[Plan, list[str]]:
    """(plan, notes on defaults applied) for ``req`` on ``processes`` CPU ranks per node."""
    notes: list[str] = []
    if req.gpus is not None or req.gpu is not None:
        raise UserError("--gpu/--gpus do not apply to --cpu runs", fix="use --processes N for N CPU ranks, or drop --cpu")
    model = req.model
    procs = processes
    nodes = req.nodes
    ranks = procs * nodes

    spec = None
    if model.name:
        try:
            from advisor.catalog import catalog_model

            spec = catalog_model(model.name)
        except Exception:
            spec = None  # the launch reports unknown names; scripts may not use the catalog
    # The one Request -> TrainConfig step (advisor.starting_config): pins, else its CPU defaults.
    start, start_notes = starting_config(req, spec, device="cpu", ranks=ranks)
    notes += start_notes
    strategy, micro, precision = start.strategy, start.micro_batch, start.precision
    accum = req.grad_accum
    batch = req.batch_size
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

    optimizer = start.optimizer
    base_lr = req.base_lr
    if base_lr is None:
        base_lr = BASE_LR[optimizer]
        notes.append(f"base LR {base_lr:g} for {optimizer.value} (--base-lr to change)")
    base_batch = req.base_batch or global_batch
    rule = req.lr_scaling
    lr = scaled_lr(base_lr, base_batch, global_batch, rule)
    if base_batch != global_batch:
        notes.append(f"LR {lr:g}: {base_lr:g} scaled {rule} from batch {base_batch} to {global_batch}")

    total = None
    dataset, epochs = req.dataset_size, req.epochs
    if dataset:
        total = max(1, math.ceil(dataset * (epochs or 1) / global_batch))
    steps_known = total or max_steps
    warmup = warmup_steps
    if warmup is None:
        warmup = max(1, round(WARMUP_FRACTION * steps_known)) if steps_known else 0
        if warmup:
            notes.append(f"{warmup} warmup step(s), {WARMUP_FRACTION:.0%} of the run (--warmup-steps to change)")

    config = start.model_copy(update={"grad_accum": accum})
    plan = Plan(model=model, config=config, gpu=None, processes_per_node=procs, nodes=nodes, cpu=True,
                global_batch=global_batch, lr=lr, base_lr=base_lr, base_batch=base_batch, lr_scaling=rule,
                warmup_steps=warmup, total_steps=total, epochs=epochs, dataset_size=dataset,
                num_workers=num_workers or 0, pin_memory=False, task=req.task)
    return plan, notes
