"""The rules layer's entry points: ``advise()`` for notebooks, ``recommend(req)`` for the CLI and the
wizard, ``plan(req)`` for ``advise launch`` (the same request as ``advise``).

Flow of one recommendation:
  1. resolve the model (catalog / HF config / module) and the hardware (detected or named);
  2. setup rules (``rules/data/precision.toml``) choose precision, optimizer, channels_last;
  3. the decision tree A–J (``rules.tree``) chooses GPUs, strategy, micro-batch, accumulation,
     checkpointing and the learning rate;
  4. plan rules choose compile, dataloader workers, SyncBatchNorm, warmup; the final estimate is
     made; final rules explain and warn;
  5. alternatives, the 1..N GPU table, the ``advise launch`` command and the ``Plan``.
Flags given pin a choice (a rule that would change it does not fire); the rules fill in the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from advisor.calibration import Calibration, default_calibration
from advisor.config import Optimizer, Precision, Strategy, TrainConfig
from advisor.errors import UserError
from advisor.estimate import Estimate
from advisor.gpus import GpuSpec
from advisor import hardware as _hardware
from advisor.hardware import HardwareSpec, Machine, resolve_hardware
from advisor.models import ModelSpec
from advisor.plan import ModelRef, Plan
from rules import alternatives as alts
from rules.engine import Engine, RuleTrace, get_rule
from rules.practice import base_facts, with_plan
from rules.recommend import (FiredRule, PathStep, Recommendation, RecommendationCore, RuleSummary, ScalingRow,
                             launch_command)
from advisor.request import CONFIG_PINS, Request
from rules.defaults import load_defaults
from rules.tree import Choice, Infeasible, Planner, TreeContext, deadline_measures, lr_plan, walk


# ---------------------------------------------------------------- model and hardware


def resolve_model(ref: ModelRef) -> ModelSpec:
    """``advisor.sources.resolve_model`` when it is there; the catalog otherwise."""
    try:
        from advisor.sources import resolve_model as _resolve
    except ImportError:
        _resolve = None
    if _resolve is not None:
        return _resolve(ref)
    if ref.name:
        from advisor.catalog import catalog_model

        return catalog_model(ref.name)
    raise UserError("--hf-config and --module need advisor.sources, which this installation lacks",
                    fix="use a catalog model with --model NAME (see `advise models`)")


def _ref_for_spec(spec: ModelSpec) -> ModelRef:
    src = spec.source
    if src.startswith("hf-config "):
        return ModelRef(hf_config=src.split(" ", 1)[1])
    if src.startswith("module "):
        return ModelRef(module=src.split(" ", 1)[1], input_shape=spec.input_shape, input_dtype=spec.input_dtype)
    return ModelRef(name=spec.name)


# ---------------------------------------------------------------- the recommendation


def recommend(req: Request, *, model: ModelSpec | None = None, hardware: HardwareSpec | None = None,
              machine: Machine | None = None, calibration: Calibration | None = None,
              assume_if_none: bool = False) -> Recommendation:
    """Walk the rules and the tree for one request. Raises UserError for impossible inputs.

    ``assume_if_none``: with no GPU detected and none named, plan for
    ``advisor.hardware.ASSUMED_GPU`` and say so in the warnings (the one-shot `advise`); False
    raises the "name a GPU" error instead.
    """
    spec = model or resolve_model(req.model)
    if hardware is None:
        if machine is None:
            # A named GPU needs no NVML (only the CPU core count, for dataloader workers).
            machine = Machine(cpu_cores=_cpu_cores()) if req.gpu else _hardware.detect_machine()
        hardware = resolve_hardware(machine, req.gpu, req.gpus, req.nodes, req.interconnect, req.network_gbps,
                                    assume_if_none=assume_if_none)
    cal = calibration or default_calibration()
    defaults = load_defaults()
    fam = defaults.for_model(spec.name, spec.family)
    base_lr = req.base_lr or fam.base_lr
    base_batch = req.base_batch or (req.batch_size if req.base_lr else None) or fam.base_batch
    lr_defaulted = req.base_lr is None
    defaults_applied = []
    if lr_defaulted:
        defaults_applied.append(f"base lr {base_lr:g} at batch {base_batch} ({fam.source})")

    if req.lora_rank is not None and spec.arch is None:
        raise UserError(f"--lora-rank needs a transformer; {spec.name} is a {spec.family} model",
                        fix="drop --lora-rank for this model")
    if req.strategy in (Strategy.ddp, Strategy.fsdp) and req.batch_size and req.micro_batch and req.grad_accum:
        n = hardware.total_gpus
        if req.micro_batch * req.grad_accum * n != req.batch_size:
            raise UserError(f"--micro-batch {req.micro_batch} x --grad-accum {req.grad_accum} x {n} GPUs = "
                            f"{req.micro_batch * req.grad_accum * n}, not --batch-size {req.batch_size}",
                            fix="drop --grad-accum (cardwise derives it) or make the product match")

    seq_len = req.seq_len or (spec.default_seq_len if spec.is_text else None)
    image_size = req.image_size or (spec.default_image_size if spec.is_vision else None)
    cfg = TrainConfig(micro_batch=req.micro_batch or 1, grad_accum=req.grad_accum or 1, seq_len=seq_len,
                      image_size=image_size, precision=req.precision or Precision.bf16,
                      optimizer=req.optimizer or Optimizer.adamw, compile=bool(req.compile),
                      channels_last=bool(req.channels_last), grad_ckpt=bool(req.grad_ckpt), strategy=Strategy.single,
                      lora_rank=req.lora_rank)
    pinned = req.pinned()
    planner = Planner(req, spec, hardware, cal, defaults, cfg, base_lr, base_batch)
    engine = Engine()
    traces: list[RuleTrace] = []

    # 1. setup rules: precision, optimizer, channels_last
    facts = base_facts(planner, cfg, lr_defaulted=lr_defaulted, defaults_source=fam.source)
    setup = engine.run("setup", facts, pinned)
    traces += setup
    chosen = _applied(setup)
    cfg = cfg.model_copy(update={k: _coerce(k, v) for k, v in chosen.items() if k in TrainConfig.model_fields})
    planner.base = cfg
    facts = base_facts(planner, cfg, lr_defaulted=lr_defaulted, defaults_source=fam.source)

    # 2. the decision tree
    ctx = TreeContext(planner)
    steps = walk(ctx)
    choice = ctx.choice
    if req.strategy is not None and (not isinstance(choice, Choice) or choice.strategy is not req.strategy):
        choice = _pinned_strategy(ctx, req.strategy)
        ctx.lr = lr_plan(planner, choice)
    fits = isinstance(choice, Choice)
    ch = choice if fits else _closest_as_choice(ctx, choice)
    path = ">".join(s.node for s in steps)
    if not ctx.lr:
        ctx.lr = lr_plan(planner, ch)

    # 3. plan rules (compile, workers, SyncBatchNorm, warmup), then the final estimate and final rules
    pf = with_plan(facts, ctx, ch, ch.estimate, ch.strategy, path)
    plan_tr = engine.run("plan", pf, pinned)
    traces += plan_tr
    extra = _applied(plan_tr)
    final_cfg = ch.config
    if extra.get("compile") and not final_cfg.compile:
        c2 = final_cfg.model_copy(update={"compile": True})
        e2 = planner.est(c2, ch.gpus)
        if e2.memory.fits or not fits:
            final_cfg = c2
    final_est = planner.est(final_cfg, ch.gpus, hypothetical=False)
    ch_final = Choice(ch.gpus, ch.strategy, final_cfg, final_est, ch.global_batch, ch.grown, ch.rounded, ch.ckpt_needed)
    ff = with_plan(facts, ctx, ch_final, final_est, ch.strategy, path)
    final_tr = engine.run("final", ff, pinned)
    traces += final_tr

    # 4. outputs
    lr = ctx.lr or lr_plan(planner, ch)

    def cmd(c: Choice, *, model: str | None = None, epochs: float | None = None, hypothetical: bool = False) -> str:
        r2 = req.model_copy(update={"epochs": epochs}) if epochs else req
        ref = ModelRef(name=model) if model else req.model
        gb = c.global_batch
        lr2 = lr_plan(planner, c)
        hw = c.estimate.hardware
        return launch_command(r2.model_copy(update={"model": ref}), config=c.config, strategy=c.strategy.value,
                              gpu_arg=hardware.gpu.name if (hypothetical or req.gpu or hardware.assumed) else None,
                              gpus_per_node=hw.per_node, nodes=hw.nodes, global_batch=gb,
                              base_lr=lr2["base_lr"], base_batch=lr2["base_batch"])

    command = cmd(ch_final)
    alt_list = []
    # Compromises when the standard setup does not fit on one GPU (node B said so) or on the GPUs
    # at hand, or when asked for; never chosen for the user.
    if not fits or req.alternatives or not isinstance(ctx.one, Choice):
        if ctx.min_fit is None and not isinstance(ctx.one, Choice):
            ctx.min_fit = planner.min_gpus(Strategy.fsdp)
        alt_list += alts.compromises(ctx, cmd)
        so = alts.scale_out(ctx, cmd)
        if so and (not fits or so.gpus != ch.gpus):
            alt_list.append(so)
    if not ctx.measures and ff.estimate.deadline_missed_h:
        deadline_measures(ctx, ch_final)
    alt_list += alts.from_measures(ctx, cmd)

    fired = [t for t in traces if t.fired]
    warnings = [t.why for t in fired if t.level == "warning"]
    if hardware.assumed:
        warnings.insert(0, f"no GPU detected on this machine ({(machine.nvml_error if machine else None) or 'NVML reports 0 GPUs'}): "
                           f"planned for {hardware.total_gpus}x {hardware.gpu.name}, a stated default, not your "
                           "hardware; name yours with --gpu NAME --gpus N")
    num_workers = extra.get("num_workers", 0)
    nodes = final_est.hardware.nodes
    core = RecommendationCore(
        strategy=ch.strategy.value, gpus=ch.gpus, nodes=nodes, micro_batch=final_cfg.micro_batch,
        grad_accum=final_cfg.grad_accum, global_batch=ch.global_batch, precision=final_cfg.precision.value,
        compile=final_cfg.compile, grad_ckpt=final_cfg.grad_ckpt, lr=lr["lr"], lr_scaling=req.lr_scaling,
        warmup_steps=extra.get("warmup_steps", lr["warmup_steps"]), num_workers=num_workers, fits=fits,
        command=command, gpu=hardware.gpu.name, optimizer=final_cfg.optimizer.value,
        channels_last=final_cfg.channels_last, lora_rank=final_cfg.lora_rank, seq_len=final_cfg.seq_len,
        image_size=final_cfg.image_size, sync_batchnorm=bool(extra.get("sync_batchnorm", False)),
        pin_memory=bool(extra.get("pin_memory", True)), prefetch_factor=int(extra.get("prefetch_factor", 2)),
        base_lr=lr["base_lr"], base_batch=lr["base_batch"], total_steps=lr["total_steps"],
        time_to_train_h=final_est.time_to_train_h, deadline_h=req.deadline_h,
    )
    plan = Plan(
        model=req.model, config=final_cfg, gpu=hardware.gpu.name, processes_per_node=final_est.hardware.per_node,
        nodes=nodes, global_batch=ch.global_batch, lr=lr["lr"], base_lr=lr["base_lr"], base_batch=lr["base_batch"],
        lr_scaling=req.lr_scaling, warmup_steps=core.warmup_steps, total_steps=lr["total_steps"], epochs=req.epochs,
        dataset_size=req.dataset_size, num_workers=num_workers, pin_memory=core.pin_memory, task=req.task,
        prefetch_factor=core.prefetch_factor if num_workers else None, sync_batchnorm=core.sync_batchnorm,
    )
    rec = Recommendation(
        recommendation=core, estimate=final_est,
        decision_path=[PathStep(node=s.node, question=s.question, answer=s.answer, why=s.why, key=s.key) for s in steps],
        rules_fired=[FiredRule(id=t.id, why=t.why, name=get_rule(t.id).name, level=t.level, phase=t.phase) for t in fired],
        alternatives=alt_list, warnings=warnings, plan=plan, scaling=_scaling(ctx, ch_final),
        rules_evaluated=[RuleSummary(id=t.id, phase=t.phase, fired=t.fired, blocked_by_pin=t.blocked_by_pin) for t in traces],
        defaults_applied=defaults_applied,
    )
    rec._trace = traces
    return rec


def _applied(traces: list[RuleTrace]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t in traces:
        if t.fired:
            out.update(t.set)
    return out


def _coerce(field: str, value: Any) -> Any:
    if field == "precision":
        return Precision(value)
    if field == "optimizer":
        return Optimizer(value)
    return value


def _pinned_strategy(ctx: TreeContext, strategy: Strategy) -> Choice | Infeasible:
    p = ctx.planner
    if strategy is Strategy.single:
        return ctx.one
    cur = ctx.choice
    n = cur.gpus if isinstance(cur, Choice) and cur.gpus > 1 else p.available
    ch = p.search(n, strategy)
    if isinstance(ch, Infeasible) and ch.kind == "batch":
        raise UserError(f"--strategy {strategy.value} on {n} GPUs: {ch.reason}",
                        fix="pick a --batch-size divisible by the GPU count (and the micro-batch), or another --gpus")
    return ch


def _closest_as_choice(ctx: TreeContext, inf: Infeasible | None) -> Choice:
    """A not-fitting result still needs numbers to show: the closest attempt."""
    p = ctx.planner
    e = inf.closest if inf is not None and inf.closest is not None else None
    n = inf.gpus if inf is not None else 1
    strategy = inf.strategy if inf is not None else Strategy.single
    if e is None:
        cfg = p.base.model_copy(update={"strategy": strategy, "micro_batch": 1, "grad_accum": 1, "grad_ckpt": True})
        e = p.est(cfg, n)
    target = p.req.batch_size or p.base_batch
    cfg = e.config
    share = max(1, target // n)
    if share % cfg.micro_batch == 0:
        cfg = cfg.model_copy(update={"grad_accum": share // cfg.micro_batch})
        e = p.est(cfg, n)
    return Choice(n, strategy, cfg, e, cfg.micro_batch * cfg.grad_accum * n)


def _scaling(ctx: TreeContext, chosen: Choice) -> list[ScalingRow]:
    p = ctx.planner
    counts = p.counts()
    if len(counts) > 16:
        counts = [c for c in counts if c in (1, 2, 4) or c % p.hw.gpus_per_node == 0]
    rows: list[ScalingRow] = []
    one_sps = None
    for n in counts:
        ch = (ctx.one if ctx.one is not None else p.search(1, Strategy.single)) if n == 1 else p.best_multi(n)
        if isinstance(ch, Choice):
            e = ch.estimate
            if n == 1:
                one_sps = e.throughput.samples_per_s
            rows.append(ScalingRow(
                gpus=n, strategy=ch.strategy.value, fits=True, micro_batch=ch.config.micro_batch,
                grad_accum=ch.config.grad_accum, global_batch=ch.global_batch, peak_gib=e.memory.peak_gib,
                device_gib=e.memory.device_gib, samples_per_s=e.throughput.samples_per_s, step_s=e.throughput.step_s,
                time_to_train_h=e.time_to_train_h, scaling_efficiency=e.throughput.scaling_efficiency,
                speedup=e.throughput.samples_per_s / one_sps if one_sps else None,
                chosen=(n == chosen.gpus and ch.strategy is chosen.strategy)))
        else:
            rows.append(ScalingRow(gpus=n, strategy=ch.strategy.value, fits=False,
                                   device_gib=ch.closest.memory.device_gib if ch.closest else None, note=ch.reason,
                                   chosen=(n == chosen.gpus)))
    if not any(r.chosen for r in rows):
        for r in rows:
            r.chosen = r.gpus == chosen.gpus
    return rows


# ---------------------------------------------------------------- plans


def plan(req: Request, *, machine: Machine | None = None, calibration: Calibration | None = None) -> Plan:
    """The GPU Plan ``advise launch`` runs for the same request as ``advise``; UserError when nothing fits.

    (CPU plans, ``advise launch --cpu``, are the launcher's: ``launcher.cpu_plan.cpu_plan``.)
    """
    rec = recommend(req, machine=machine, calibration=calibration)
    if not rec.recommendation.fits:
        fitting = [a for a in rec.alternatives if a.fits and a.command]
        hint = f"e.g. `{fitting[0].command}` ({fitting[0].name})" if fitting else "see `advise` with the same flags"
        raise UserError(f"{rec.estimate.model.name} does not fit on {rec.recommendation.gpus}x {rec.recommendation.gpu} "
                        f"(~{rec.estimate.memory.device_gib:.1f} GiB per GPU needed)", fix=f"pick an alternative: {hint}")
    return rec.plan


# ---------------------------------------------------------------- Python API


def advise(model: str | ModelSpec | ModelRef, gpu: str | GpuSpec | HardwareSpec | None = None, gpus: int | None = None,
           *, machine: Machine | None = None, calibration: Calibration | None = None, home: Path | str | None = None,
           **workload: Any) -> Recommendation:
    """Recommend how to train ``model`` on ``gpus`` x ``gpu`` (or the detected GPUs).

    ``model``: a catalog name, a ``ModelSpec`` or a ``ModelRef``. ``gpu``: a name ("A100-80GB"),
    a ``GpuSpec`` or a full ``HardwareSpec``. Keywords are the CLI's flags with underscores:
    config pins (``micro_batch``, ``precision``, ``strategy``, ``lora_rank`` ...), workload
    (``batch_size``, ``dataset_size``, ``epochs``, ``deadline`` as "6h" or hours,
    ``base_lr``, ``base_batch``, ``lr_scaling``, ``keep_global_batch``, ``task``), hardware
    (``nodes``, ``interconnect``, ``network_gbps``) and ``alternatives=True``. ``machine``: a
    ``Machine`` to plan for instead of reading NVML (tests, the wizard); ``home``: where
    ``advise bench`` stored measured calibration (default: the packaged constants only).

    >>> rec = advise("llama3-8b", gpu="A100-80GB", gpus=8, seq_len=2048)   # doctest: +SKIP
    >>> rec.recommendation.strategy                                         # doctest: +SKIP
    'fsdp'
    """
    spec = None
    if isinstance(model, ModelSpec):
        spec, ref = model, _ref_for_spec(model)
    elif isinstance(model, ModelRef):
        ref = model
    elif isinstance(model, str):
        ref = ModelRef(name=model)
    else:
        raise UserError(f"model must be a catalog name, a ModelSpec or a ModelRef, got {type(model).__name__}",
                        fix='e.g. advise("llama3-8b", gpu="A100-80GB", gpus=8)')
    hardware = None
    gpu_name = None
    if isinstance(gpu, HardwareSpec):
        hardware = gpu
        gpu_name = gpu.gpu.name
    elif isinstance(gpu, GpuSpec):
        gpu_name = gpu.name
    elif gpu is not None:
        gpu_name = str(gpu)
    deadline = workload.pop("deadline", None)
    if "deadline_h" in workload:
        if deadline is not None:
            raise UserError("give deadline or deadline_h, not both", fix='e.g. deadline="6h"')
        deadline = workload.pop("deadline_h")
    if isinstance(deadline, str):
        from advisor.units import parse_duration_hours

        deadline = parse_duration_hours(deadline)
    for k in ("precision", "optimizer", "strategy"):
        if isinstance(workload.get(k), str):
            workload[k] = {"precision": Precision, "optimizer": Optimizer, "strategy": Strategy}[k](workload[k])
    known = set(Request.model_fields) - {"model", "gpu", "gpus", "deadline_h"}
    unknown = set(workload) - known
    if unknown:
        raise UserError(f"advise() got unknown keyword(s): {', '.join(sorted(unknown))}",
                        fix=f"known: {', '.join(sorted(known | {'deadline'}))}")
    if hardware is not None and gpus is not None and gpus != hardware.gpus_per_node:
        hardware = hardware.model_copy(update={"gpus_per_node": gpus})
    req = Request(model=ref, gpu=gpu_name, gpus=gpus if hardware is None else hardware.gpus_per_node,
                  deadline_h=deadline, **({"nodes": hardware.nodes} if hardware is not None else {}), **workload)
    if calibration is None and home is not None:
        from advisor.calibration import load_calibration

        calibration = load_calibration(Path(home))
    return recommend(req, model=spec, hardware=hardware, machine=machine, calibration=calibration)


def _cpu_cores() -> int:
    import os

    return os.cpu_count() or 1


from rules.tree import load_tree  # noqa: E402 - the tree's structure, for renderers (the wizard)

__all__ = ["advise", "recommend", "plan",
           "Request", "Recommendation", "Estimate", "CONFIG_PINS", "load_tree"]
