"""Node J's arithmetic: which published recipe a run starts from, the learning rate for its
global batch, and the warmup that goes with it.

``recipe(...)`` picks the row of ``rules/data/defaults.toml [[lr]]`` for the model's family, the
task (``--task pretrain|finetune``, else ``infer_task``: adapters are a fine-tune, the workload's tokens
per parameter or epochs decide where given, else the family's default in ``[task]``), adapters or not
(``--lora-rank``), the optimizer and the model size (nearest in log scale; GPT-3's table for
decoders). ``lr_plan`` scales it to a global batch (the recipe's own rule where it states one, else
linear for SGD and square root for Adam-family optimizers: ``advisor.schedule.scaling_for``) and
sizes the warmup (``advisor.schedule``); ``batch_range`` is how far a pretraining run's global batch may
grow (``[batch_range]``, used by ``rules.planner``). One ``LrPlan`` per ``Choice``, so the recommendation,
node J's answer, the plan rules' facts and the launch command all read the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

from advisor.config import TrainConfig
from advisor.models import ModelSpec
from advisor.request import Request
from advisor.schedule import LrRecipe, Schedule, schedule, scaling_for
from rules.defaults import Defaults, LrRecipeRow, load_defaults


@dataclass(frozen=True)
class LrPlan:
    lr: float
    base_lr: float
    base_batch: int
    global_batch: int
    lr_scaling: str
    ratio: float = 1.0
    text: str = ""  # how lr follows from the base (node J's answer)
    warmup_steps: int = 0
    warmup_rule: str = ""  # why that many warmup steps
    total_steps: int | None = None  # known when --dataset-size and --epochs are
    steps_per_epoch: int | None = None
    task: str = ""
    source: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _kind(optimizer: str) -> str:
    return "sgd" if optimizer == "sgd" else "adam"


def _row(defaults: Defaults, family: str, task: str, adapter: bool, optimizer: str | None, params: float) -> LrRecipeRow:
    """The recipe row: this family and task (adapter rows for adapters, when the family has them),
    of the optimizer's kind when one is pinned, the nearest size; else the 'any' row of that kind."""
    rows = [r for r in defaults.lr if r.family == family and r.task == task]
    if adapter and any(r.adapter for r in rows):
        rows = [r for r in rows if r.adapter]
    else:
        rows = [r for r in rows if not r.adapter]
    if optimizer is not None:
        rows = [r for r in rows if _kind(r.optimizer) == _kind(optimizer)]
    if not rows:
        kind = _kind(optimizer or "adamw")
        rows = [r for r in defaults.lr if r.family == "any" and _kind(r.optimizer) == kind]
    return min(rows, key=lambda r: abs(math.log(params / r.params)) if r.params and params > 0 else 0.0)


def infer_task(req: Request, spec: ModelSpec | None, defaults: Defaults, *, family: str, seq_len: int | None,
               adapter: bool, over=None) -> tuple[str, str, str]:
    """(task, why, the flag that overrides it): ``--task`` when given; else adapters are a fine-tune;
    else the workload decides where it is known (text: training tokens per parameter; vision: epochs and
    samples seen, ``[task_inference]`` with its sources); else the catalog model's or the family's default."""
    if req.task:
        return req.task, f"--task {req.task}", f"--task {req.task}"
    if over is not None and over.task:
        other = "finetune" if over.task == "pretrain" else "pretrain"
        return over.task, f"{over.source}", f"--task {other}"
    ti = defaults.task_inference
    if adapter:
        return "finetune", "LoRA/QLoRA trains adapters on pretrained weights", "--task pretrain"
    samples = req.dataset_size * req.epochs if req.dataset_size and req.epochs else None
    params = spec.params if spec is not None else 0.0
    if samples is not None and params > 0 and spec is not None and spec.is_text and seq_len:
        per_param = samples * seq_len / params
        if per_param >= ti.text_tokens_per_param:
            return ("pretrain", f"{per_param:,.3g} training tokens per parameter (>= {ti.text_tokens_per_param:g}: "
                    "pretraining from random init sees this many; a fine-tune far fewer)", "--task finetune")
        return ("finetune", f"{per_param:,.2g} training tokens per parameter (< {ti.text_tokens_per_param:g}: a "
                "fine-tune of pretrained weights; pretraining sees ~20)", "--task pretrain")
    if samples is not None and spec is not None and spec.is_vision:
        many = req.epochs >= ti.vision_min_epochs and samples >= ti.vision_min_samples_seen
        seen = f"{req.epochs:g} epochs of {req.dataset_size:,} samples"
        if many:
            return ("pretrain", f"{seen}: from scratch (pretraining runs >= {ti.vision_min_epochs:g} epochs and "
                    f">= {ti.vision_min_samples_seen:,} samples seen)", "--task finetune")
        return ("finetune", f"{seen}: a transfer fine-tune (pretraining runs >= {ti.vision_min_epochs:g} epochs "
                f"and >= {ti.vision_min_samples_seen:,} samples seen)", "--task pretrain")
    task = defaults.task[family]
    return task, (f"the default for {family} models without --dataset-size/--epochs: "
                  + ("pretrained weights exist" if task == "finetune" else "the published recipes train from scratch")), \
        f"--task {'pretrain' if task == 'finetune' else 'finetune'}"


def batch_range(defaults: Defaults, spec: ModelSpec | None, rec: LrRecipe) -> tuple[int, int] | None:
    """(start, max) of the global batch a pretraining run may grow over (``[batch_range]``), or None
    where the batch is held: a fine-tune, a family without a range, an optimizer the range does not
    hold for, or the user's --base-batch."""
    if rec.task != "pretrain" or spec is None or not rec.defaulted or spec.name in defaults.model:
        return None
    rng = defaults.batch_range.get(spec.family)
    if rng is None or (rng.optimizer is not None and _kind(rng.optimizer) != _kind(rec.optimizer)):
        return None
    start = rng.start_batch or rec.base_batch
    top = rng.max_batch or rec.base_batch
    return (start, top) if top > start else None


def recipe(req: Request, spec: ModelSpec | None, defaults: Defaults, *, seq_len: int | None, adapter: bool,
           optimizer: str | None = None) -> LrRecipe:
    """The recipe a run of ``spec`` starts from (``optimizer``: the one pinned or chosen, None = the
    recipe's own; ``spec`` None: a model not resolved, as a custom one). ``--base-lr``/``--base-batch``
    replace its numbers; ``--lr-scaling`` its rule."""
    over = defaults.model.get(spec.name) if spec is not None and spec.source == "catalog" else None
    family = spec.family if spec is not None and spec.family in defaults.task else "custom"
    params = spec.params if spec is not None else 0.0
    default_seq = spec.default_seq_len if spec is not None else None
    task, task_rule, task_flag = infer_task(req, spec, defaults, family=family, seq_len=seq_len or default_seq,
                                            adapter=adapter, over=over)
    if over is not None:
        opt = over.optimizer or optimizer or "adamw"
        base_lr, base_batch, source, scaling = over.base_lr, over.base_batch, over.source, None
    else:
        row = _row(defaults, family, task, adapter, optimizer, params)
        opt = row.optimizer
        base_lr, source, scaling = row.base_lr, row.source, row.scaling
        if row.batch_tokens:
            seq = seq_len or default_seq or 1
            base_batch = max(1, row.batch_tokens // seq)
            source += f" = {base_batch} sequences of {seq} tokens"
        else:
            base_batch = row.base_batch
    used = optimizer or opt
    if req.lr_scaling is not None:
        rule, why = req.lr_scaling, f"--lr-scaling {req.lr_scaling}"
    elif scaling is not None and _kind(used) == _kind(opt):
        rule, why = scaling, f"{scaling}, as the recipe scales it"
    else:
        rule = scaling_for(used)
        why = (f"{rule} for {used} " + ("(Goyal et al. 2017)" if rule == "linear" else "(Adam-family: Malladi et al. 2022)"))
    defaulted = req.base_lr is None
    if not defaulted:
        base_batch = req.base_batch or req.batch_size or base_batch
        base_lr, source = req.base_lr, "--base-lr" + (" --base-batch" if req.base_batch else "")
    elif req.base_batch:
        base_batch = req.base_batch
    return LrRecipe(task=task, task_rule=task_rule, task_flag=task_flag, optimizer=opt, base_lr=base_lr, base_batch=base_batch, scaling=rule,
                    scaling_rule=why, source=source, defaulted=defaulted, warmup=defaults.warmup)


def recipe_for_request(req: Request) -> Callable[[TrainConfig], LrRecipe]:
    """The recipe for each configuration of a request whose model is not estimated (``advise launch
    --cpu``): a catalog model's family and size, else a custom model's."""
    from advisor.catalog import catalog_model

    spec = None
    if req.model.name:
        try:
            spec = catalog_model(req.model.name)
        except Exception:  # an unknown name is reported by the launch itself
            spec = None
    defaults = load_defaults()
    return lambda cfg: recipe(req, spec, defaults, seq_len=cfg.seq_len, adapter=cfg.adapters,
                              optimizer=cfg.optimizer.value)


def lr_plan(req: Request, rec: LrRecipe, global_batch: int) -> LrPlan:
    """Learning rate for ``global_batch`` (the recipe scaled by its rule) and the schedule's steps and warmup."""
    gb, rule = global_batch, rec.scaling
    lr = rec.lr_for(gb)
    ratio = gb / rec.base_batch
    if rule == "none" or ratio == 1:
        text = f"base lr kept (global batch {gb}" + (" = base batch)" if ratio == 1 else ", --lr-scaling none)")
    else:
        text = (f"{rule} scaling: {rec.base_lr:g} x {'sqrt(' if rule == 'sqrt' else ''}{gb}/{rec.base_batch}"
                f"{')' if rule == 'sqrt' else ''} ({rec.scaling_rule})")
    s: Schedule = schedule(req.dataset_size, req.epochs, gb, rec.warmup)
    return LrPlan(lr=lr, base_lr=rec.base_lr, base_batch=rec.base_batch, global_batch=gb, lr_scaling=rule, ratio=ratio,
                  text=text, warmup_steps=s.warmup_steps, warmup_rule=s.warmup_rule, total_steps=s.total_steps,
                  steps_per_epoch=s.steps_per_epoch, task=rec.task, source=rec.source)
