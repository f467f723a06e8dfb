"""The arithmetic behind the practice rules, turned into facts the TOML rules test and quote.

The rules themselves (conditions, messages, sources) are data in ``rules/data/practice.toml``;
what is computed here is what a condition cannot compute: compile's break-even time, dataloader
workers from CPU cores per GPU, how many cores image decoding needs.
"""

from __future__ import annotations

import math

from advisor.config import Precision, Strategy, TrainConfig
from advisor.estimate import Estimate
from advisor.setup import COMPROMISES, offloads
from rules.facts import (CompileFacts, ConfigFacts, DataFacts, EstimateFacts, Facts, GpuFacts, HardwareFacts,
                         ModelFacts, PinnedFacts, PlanFacts, WorkloadFacts)
from rules.planner import Choice, Planner, model_layers
from rules.policy import own_scaling
from rules.tree import TreeContext


def base_facts(p: Planner, cfg: TrainConfig, *, lr_defaulted: bool, defaults_source: str) -> Facts:
    req, hw, m = p.req, p.hw, p.model
    g = hw.gpu
    tokens = None
    if m.arch is not None:
        tokens = m.arch.tokens(cfg.seq_len or m.default_seq_len, cfg.image_size)
    has_bn = bool(m.trace and m.trace.has_batchnorm)
    return Facts(
        gpu=GpuFacts(name=g.name, cc=g.compute_capability[0] + g.compute_capability[1] / 10, supports_bf16=g.supports_bf16,
                     memory_gib=g.memory_gib, usable_gib=g.memory_gib * p.cal.fit_fraction, nvlink=g.nvlink_gbps > 0),
        hw=HardwareFacts(gpus=hw.total_gpus, gpus_per_node=hw.gpus_per_node, nodes=hw.nodes, multi_gpu=hw.total_gpus > 1,
                         interconnect=hw.interconnect, network_gbps=hw.network_gbps, cpu_cores=hw.cpu_cores,
                         network=hw.network_link.summary() if hw.nodes > 1 else "",
                         detected=hw.detected),
        model=ModelFacts(name=m.name, family=m.family, params=m.params, params_b=m.params / 1e9, is_cnn=m.family == "cnn",
                         is_vision=m.is_vision, is_text=m.is_text, is_llm=m.family == "decoder" and m.params >= 1e9,
                         has_batchnorm=has_bn, layers=model_layers(m), tokens=tokens,
                         max_positions=m.arch.max_seq if m.is_text and m.arch is not None and m.arch.max_seq else None),
        workload=WorkloadFacts(dataset_size=req.dataset_size, epochs=req.epochs, run_known=bool(req.dataset_size and req.epochs),
                               deadline_h=req.deadline_h, has_deadline=req.deadline_h is not None, batch_size=req.batch_size,
                               keep_global_batch=req.keep_global_batch, lr_scaling=p.recipe(cfg).scaling, base_lr=p.base_lr,
                               base_batch=p.base_batch, lr_defaulted=lr_defaulted, defaults_source=defaults_source,
                               want_alternatives=req.alternatives),
        pinned=PinnedFacts(**{k: getattr(req, k) is not None for k in PinnedFacts.model_fields if k != "compromise"},
                           compromise=any(s.on(req) for s in COMPROMISES)),  # the request's pins name one
        config=_config_facts(cfg, p.start_recipe.optimizer if p.start_recipe else cfg.optimizer.value, patch=m.arch.patch_size if m.arch and m.arch.patch_size else None,
                             context=m.arch.max_seq if m.is_text and m.arch is not None else None),
    )


def _config_facts(cfg: TrainConfig, default_optimizer: str, micro: bool = False, patch: int | None = None,
                  context: int | None = None) -> ConfigFacts:
    rem = cfg.image_size % patch if patch and cfg.image_size else None
    return ConfigFacts(**{k: getattr(cfg, k) for k in _AS_IS}, patch_size=patch, patch_remainder=rem,
                       precision=cfg.precision.value, optimizer=cfg.optimizer.value,
                       seq_beyond_context=bool(context and cfg.seq_len and cfg.seq_len > context),
                       strategy=cfg.strategy.value, micro_batch=cfg.micro_batch if micro else None,
                       grad_accum=cfg.grad_accum if micro else None, default_optimizer=default_optimizer)


# The configuration facts that are the config's own fields as they are (booleans and numbers: compile,
# the compromises' toggles and rank, the sizes); the enums are given as their values, and micro_batch and
# grad_accum only once planned.
_AS_IS = tuple(k for k in ConfigFacts.model_fields if k in TrainConfig.model_fields
               and k not in ("precision", "optimizer", "strategy", "micro_batch", "grad_accum"))


def compile_facts(p: Planner, ch: Choice) -> CompileFacts:
    """Does compiling pay for itself over this run? (Planner.compile_gain: estimated eager vs compiled)"""
    g = p.compile_gain(ch.config, ch.gpus)
    return CompileFacts(compile_min=g["minutes"], speedup_pct=g["saving"] * 100, breakeven_min=g["breakeven_min"],
                        saving_min=g["saving_min"], run_h=g["run_h"], repays=g["repays"])


def data_facts(p: Planner, ch: Choice, est: Estimate) -> DataFacts:
    d = p.defaults.data
    t = est.throughput
    ld = t.loader
    # Cores per GPU of the node (all its GPUs share the CPU, used by this run or not), so that the
    # same node gives the same workers whatever count the tree picks; the loader's own when it states them.
    cores_per_gpu = ld.cpus_per_gpu if ld is not None else p.hw.cpu_cores / p.hw.gpus_per_node
    sps_gpu = t.samples_per_s / ch.gpus
    gpu_rate = (t.gpu_samples_per_s or t.samples_per_s) / ch.gpus
    per_core = ld.per_core_samples_per_s if ld is not None and ld.per_core_samples_per_s else d.decode_rate
    need = gpu_rate / per_core + 1 if p.model.is_vision else 0.0
    # The usual cap, unless the GPU needs more CPU-decoding workers than it to be fed: then up to every core but
    # the training process's, which is what advisor.loader's rate assumes (cores - 1 workers), so a loader-bound
    # plan launches the workers its estimate counted. Not for loaders the CPU does not limit (DALI on the GPU,
    # synthetic data): no per-core rate, the usual cap.
    to_feed = math.ceil(gpu_rate / per_core) if ld is not None and ld.per_core_samples_per_s else 0
    cap = d.text_max_workers if p.model.is_text else max(d.max_workers, to_feed)
    workers = int(max(1, min(cap, math.floor(cores_per_gpu) - 1)))
    return DataFacts(workers=workers, cores_per_gpu=cores_per_gpu, prefetch_factor=2,
                     samples_per_s_per_worker=sps_gpu / workers, cores_needed_per_gpu=need, decode_rate=per_core,
                     cpu_bound=t.loader_bound, loader_rate_per_gpu=(ld.samples_per_s_per_gpu or 0.0) if ld else 0.0,
                     gpu_rate_per_gpu=gpu_rate, gpu_rate=gpu_rate * ch.gpus,
                     loader_workers=ld.workers if ld is not None else 0.0, cores_source=ld.cpus_source if ld else "",
                     data_kind=ld.data if ld else "", loader=ld.loader if ld else "",
                     fixes="; ".join(ld.fixes) if ld else "")


def plan_facts(ctx: TreeContext, ch: Choice, strategy: Strategy, fits: bool, path: str) -> PlanFacts:
    p, lr = ctx.planner, ch.lr
    n = ch.gpus
    return PlanFacts(
        path=path, end=ctx.end, tree_strategy=ctx.tree_strategy, strategy=strategy.value, gpus=n,
        nodes=ch.estimate.hardware.nodes, multi_gpu=n > 1, micro_batch=ch.config.micro_batch,
        grad_accum=ch.config.grad_accum, global_batch=ch.global_batch, per_gpu_batch=ch.global_batch // n,
        grad_ckpt_needed=ch.ckpt_needed, fits=fits,
        lr=lr.lr, lr_ratio=lr.ratio, warmup_steps=lr.warmup_steps, warmup_rule=lr.warmup_rule,
        total_steps=lr.total_steps, steps_per_epoch=lr.steps_per_epoch, gpus_at_hand=p.available,
        batches_per_epoch=p.req.dataset_size / ch.global_batch if p.req.dataset_size else None,
        min_gpus_to_fit=ctx.min_fit.gpus if ctx.min_fit else (1 if isinstance(ctx.one, Choice) else None),
        strategy_overridden=strategy is not Strategy(ctx.tree_strategy),
        compromise=ctx.compromise_name, gives_up=ctx.gives_up, strategy_rule=ch.strategy_rule,
        sharded_gain_pct=100 * ch.sharded_gain if ch.sharded_gain is not None and strategy is ch.strategy else None,
        **_host_ram(p, ch),
    )


def _host_ram(p: Planner, ch: Choice) -> dict:
    """What the plan keeps in each node's RAM (CPU offload, paged states) against the node's RAM, if known."""
    from rules.host_ram import host_short, host_text

    m = ch.estimate.memory
    return dict(host_node_gib=m.host_node_gib, host_ram_gib=p.host_ram_gib,
                host_ram_source=p.host_ram_source or "", host_ram_need=host_text(ch.estimate) if m.host_node_gib else "",
                host_ram_short=bool(offloads(ch.config) and host_short(ch.estimate, p)))


def _table_efficiency(ctx: TreeContext, ch: Choice) -> float | None:
    """The scaling table's and the policy's efficiency of ``ch``'s count (rules.policy.efficiencies): one number
    in the report; None where the policy compared no counts."""
    pick = getattr(ctx, "pick", None)
    return pick.efficiency.get(ch.gpus) if pick is not None else None


def estimate_facts(p: Planner, est: Estimate, ch: Choice, efficiency: float | None = None) -> EstimateFacts:
    m, t = est.memory, est.throughput
    dl = p.req.deadline_h
    ttt = est.time_to_train_h
    missed = (ttt - dl) if (dl is not None and ttt is not None and ttt > dl) else None
    amp_speedup = None
    if est.config.precision in (Precision.fp32, Precision.tf32):
        amp = Precision.bf16 if p.hw.gpu.supports_bf16 else Precision.fp16
        alt = p.est(est.config.model_copy(update={"precision": amp}), ch.gpus)
        amp_speedup = alt.throughput.samples_per_s / t.samples_per_s
    return EstimateFacts(
        fits=m.fits, peak_gib=m.peak_gib, device_gib=m.device_gib, headroom_gib=m.gpu_memory_gib - m.device_gib,
        samples_per_s=t.samples_per_s, samples_per_s_per_gpu=t.samples_per_s / ch.gpus, step_s=t.step_s, mfu=t.mfu,
        time_to_train_h=ttt, deadline_missed_h=missed, deadline_missed_pct=(missed / dl if missed else None),
        scaling_efficiency=efficiency if efficiency is not None else own_scaling(t),
        host_bound=t.host_bound and not t.loader_bound, comm_s=t.comm_s,
        exposed_comm_s=t.exposed_comm_s, comm_fraction=t.exposed_comm_s / t.step_s if t.step_s else 0.0,
        memory_fraction=m.device_gib / m.gpu_memory_gib, tight=m.tight, reserve_gib=m.reserve_gib,
        fit_margin_gib=m.fit_margin_gib,
        fp16_alt_speedup=amp_speedup,
    )


def with_plan(facts: Facts, ctx: TreeContext, ch: Choice, est: Estimate, strategy: Strategy, path: str,
              data: bool = True) -> Facts:
    p = ctx.planner
    return facts.model_copy(update={
        "config": _config_facts(est.config, facts.config.default_optimizer, micro=True, patch=facts.config.patch_size,
                                context=facts.model.max_positions),
        "plan": plan_facts(ctx, ch, strategy, est.memory.fits, path),
        "estimate": estimate_facts(p, est, ch, _table_efficiency(ctx, ch)),
        "compile": compile_facts(p, ch),
        "data": data_facts(p, ch, est) if data else None,
    })
