"""A Plan for ``advise launch --cpu --processes N``: CPU ranks over gloo, no GPU estimate.

CPU runs are for trying a pipeline end to end (and for cardwise's own tests), so nothing here
is estimated: the flags give the shape, and only arithmetic fills the rest, the same arithmetic
the rules use on GPUs:

    global batch = micro-batch x accumulation x processes x nodes
    lr, warmup   = the learning-rate recipe (``lr_recipe``: the CLI passes ``rules.lr``'s, the table
                   the recommendation uses) scaled to the global batch, and ``advisor.schedule``'s
                   steps and warmup for the steps that run

Every default applied is reported once (returned as notes), never silently.
"""

from __future__ import annotations

from collections.abc import Callable

from advisor.config import TrainConfig
from advisor.errors import UserError
from advisor.plan import Plan
from advisor.request import Request
from advisor.schedule import LrRecipe, schedule
from advisor.setup.constraints import Combo, check
from advisor.starting_config import starting_config


def cpu_plan(req: Request, lr_recipe: Callable[[TrainConfig], LrRecipe], *, processes: int = 1,
             max_steps: int | None = None, warmup_steps: int | None = None,
             num_workers: int | None = None) -> tuple[Plan, list[str]]:
    """(plan, notes on defaults applied) for ``req`` on ``processes`` CPU ranks per node;
    ``lr_recipe(config)`` is the learning rate the configuration starts from (``rules.lr``)."""
    notes: list[str] = []
    if req.gpus is not None or req.gpu is not None:
        raise UserError("--gpu/--gpus do not apply to --cpu runs", fix="use --processes N for N CPU ranks, or drop --cpu")
    # The GPU hardware flags only feed the GPU estimate, which a CPU run does not make: refused, not
    # silently copied into the plan (issue 31).
    given = [flag for flag, value in (("--interconnect", req.interconnect), ("--network", req.network),
                                      ("--cpus-per-gpu", req.cpus_per_gpu)) if value is not None]
    if given:
        raise UserError(f"{'/'.join(given)} {'does' if len(given) == 1 else 'do'} not apply to --cpu runs "
                        "(they describe GPUs and the links between GPU nodes)",
                        fix=f"drop {' and '.join(given)}, or drop --cpu")
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
    if req.strategy is not None and req.strategy.keeps_gathered:
        # refused before the plan, whose accumulation would hide the reason (plain fsdp plans are built:
        # the probe refuses them with its own words, the launch with the table's)
        check(Combo(strategy=req.strategy, cpu=True), only=("fsdp.not-on-cpu",))
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

    config = start.model_copy(update={"grad_accum": accum})
    rec = lr_recipe(config)
    if not rec.defaulted and req.base_batch is None and req.batch_size is None:
        rec = rec.model_copy(update={"base_batch": global_batch})  # --base-lr alone: the LR of this run's batch
    lr = rec.lr_for(global_batch)
    if rec.defaulted:
        notes.append(f"LR {lr:.3g}: the {rec.task} recipe's {rec.base_lr:g} at batch {rec.base_batch} ({rec.source}), "
                     f"{rec.scaling} to batch {global_batch} (--base-lr/--base-batch to change)")
    elif rec.base_batch != global_batch:
        notes.append(f"LR {lr:.3g}: {rec.base_lr:g} scaled {rec.scaling} from batch {rec.base_batch} to {global_batch}")
    full = schedule(req.dataset_size, req.epochs, global_batch, rec.warmup, warmup_steps=warmup_steps)
    plan = Plan(model=model, config=config, gpu=None, processes_per_node=procs, nodes=nodes, cpu=True,
                global_batch=global_batch, lr=lr, base_lr=rec.base_lr, base_batch=rec.base_batch, lr_scaling=rec.scaling,
                warmup_steps=full.warmup_steps, warmup=None if warmup_steps is not None else rec.warmup,
                total_steps=full.total_steps, epochs=req.epochs, dataset_size=req.dataset_size,
                num_workers=num_workers or 0, pin_memory=False, task=rec.task)
    if warmup_steps is None:
        run = plan.schedule(max_steps)  # what the runtime will do: the steps that run decide the warmup
        notes.append(f"{run.warmup_steps} warmup step(s): {run.warmup_rule} (--warmup-steps to change)")
    return plan, notes
