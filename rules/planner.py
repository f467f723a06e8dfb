"""The search behind the decision tree: which configuration fits, for one GPU count and strategy.

``Planner.search`` asks the estimator for one GPU count and strategy: "standard" means the
precision the setup rules chose (bf16 autocast on compute capability >= 8.0, else fp16 +
GradScaler; both with fp32 master weights), the family's optimizer, micro-batch down to 1 with
gradient accumulation filling the per-GPU batch, and activation checkpointing only when nothing
fits without it. It takes the largest micro-batch that fits (preferring one that leaves
``search.roomy`` of the memory free), so accumulation is used only as far as memory needs it.
When the global batch is not pinned, the efficient micro-batch (the smallest within
``search.saturation`` of the best samples/s) decides whether splitting the base batch over the
GPUs would starve them, and then the global batch grows.

Every ``Choice`` carries its learning-rate plan (``rules.lr``), computed once when it is made.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

from advisor.calibration import Calibration
from advisor.config import Strategy, TrainConfig
from advisor.estimate import Estimate, estimate, one_gpu_throughput
from advisor.hardware import HardwareSpec
from advisor.models import ModelSpec
from advisor.request import Request
from advisor.throughput import ThroughputEstimate
from rules.defaults import Defaults
from advisor.schedule import LrRecipe
from rules.lr import LrPlan, lr_plan, recipe


@dataclass
class Choice:
    """A configuration that fits, for one GPU count and strategy."""

    gpus: int
    strategy: Strategy
    config: TrainConfig
    estimate: Estimate
    global_batch: int
    lr: LrPlan  # for global_batch: node J's answer, the plan and the launch command
    grown: bool = False
    rounded: bool = False
    ckpt_needed: bool = False

    @property
    def fits(self) -> bool:
        return True

    @property
    def time_h(self) -> float | None:
        return self.estimate.time_to_train_h

    def with_config(self, config: TrainConfig, estimate: Estimate) -> "Choice":
        """The same choice (GPUs, batch, learning rate) with a config change such as compile."""
        return dataclasses.replace(self, config=config, estimate=estimate)


@dataclass
class Infeasible:
    """Nothing fits (kind 'memory') or the batch cannot be split (kind 'batch')."""

    gpus: int
    strategy: Strategy
    kind: Literal["memory", "batch"]
    reason: str
    closest: Estimate | None = None

    @property
    def fits(self) -> bool:
        return False

    @property
    def time_h(self) -> float | None:
        return None


def model_layers(m: ModelSpec) -> int:
    """Repeated blocks, for compile time: transformer layers, or ~30 forward ops per ResNet block."""
    if m.arch is not None:
        return m.arch.n_layers
    if m.trace is not None and m.trace.kernels:
        return max(1, round(m.trace.kernels / 30))
    return 1


def _config_key(cfg: TrainConfig) -> tuple:
    """Everything of a config the estimate depends on, except the strategy."""
    return (cfg.micro_batch, cfg.grad_accum, cfg.seq_len, cfg.image_size, cfg.precision, cfg.optimizer, cfg.compile,
            cfg.channels_last, cfg.grad_ckpt, cfg.lora_rank, cfg.optimizer_in_backward, cfg.cpu_offload,
            cfg.quantize_base, cfg.pure_bf16_update)


def _ladder(n: int, dense: int = 8) -> list[int]:
    """1..min(n, dense), then the powers of two up to n, then n."""
    out = set(range(1, min(n, dense) + 1)) | {1 << k for k in range(n.bit_length()) if 1 << k <= n} | {n}
    return sorted(out)


def bounded_counts(per_node: int, nodes: int) -> list[int]:
    """The GPU counts compared for ``nodes`` nodes of ``per_node`` GPUs: within a node, whole nodes beyond."""
    return _ladder(per_node) + [per_node * k for k in _ladder(nodes, dense=4) if k >= 2]


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


class Planner:
    """Asks the estimator the questions the tree needs, with memoisation."""

    def __init__(self, request: Request, model: ModelSpec, hardware: HardwareSpec, calibration: Calibration,
                 defaults: Defaults, base_config: TrainConfig, base_lr: float, base_batch: int):
        self.req = request
        self.model = model
        self.hw = hardware
        self.cal = calibration
        self.defaults = defaults
        self.base = base_config
        self.base_lr = base_lr
        self.base_batch = base_batch
        self._memo: dict[tuple, Estimate] = {}
        self.host_ram_gib: float | None = None  # this machine's RAM when planning for it (CPU offload's check)
        self._hw_memo: dict[tuple[int, bool], HardwareSpec] = {}
        self._one_memo: dict[tuple, ThroughputEstimate] = {}
        self._recipes: dict[tuple, LrRecipe] = {}
        self.start_recipe: LrRecipe | None = None  # the recipe of the request's pins (rules.flow.start)

    def recipe(self, config: TrainConfig | None = None) -> LrRecipe:
        """The learning-rate recipe for ``config`` (adapters and the optimizer pick the row: rules.lr)."""
        cfg = config or self.base
        key = (bool(cfg.lora_rank), cfg.optimizer.value, cfg.seq_len)
        hit = self._recipes.get(key)
        if hit is None:
            hit = self._recipes[key] = recipe(self.req, self.model, self.defaults, seq_len=cfg.seq_len,
                                              adapter=bool(cfg.lora_rank), optimizer=cfg.optimizer.value)
        return hit

    def lr_for(self, global_batch: int, config: TrainConfig | None = None) -> LrPlan:
        return lr_plan(self.req, self.recipe(config), global_batch)

    # -- hardware
    @property
    def available(self) -> int:
        return self.hw.total_gpus

    def hw_for(self, n: int, hypothetical: bool = False) -> HardwareSpec:
        per_node = self.hw.gpus_per_node
        if hypothetical:
            per_node = max(per_node, 8)
        if n <= per_node:
            return self.hw.model_copy(update={"gpus_per_node": n, "nodes": 1})
        if n % per_node:
            raise ValueError(f"{n} GPUs is not a whole number of {per_node}-GPU nodes")
        return self.hw.model_copy(update={"gpus_per_node": per_node, "nodes": n // per_node})

    def counts(self, hypothetical_max: int | None = None) -> list[int]:
        """GPU counts the tree compares: a bounded set whatever the size (every count up to 8 in a
        node, then powers of two and the node's size; whole nodes likewise: 1, 2, 4, ... and all of
        them), so that a recommendation at 100,000 GPUs asks the estimator a few hundred times, not
        millions (tests/test_bounded_search.py counts the calls)."""
        if hypothetical_max:
            per_node = max(self.hw.gpus_per_node, 8)
            return bounded_counts(per_node, max(1, hypothetical_max // per_node))
        return bounded_counts(self.hw.gpus_per_node, self.hw.nodes)

    # -- estimates
    def est(self, cfg: TrainConfig, n: int, hypothetical: bool = False, model: ModelSpec | None = None) -> Estimate:
        m = model or self.model
        key = (m.name, n, hypothetical, cfg.strategy) + _config_key(cfg)
        hit = self._memo.get(key)
        if hit is None:
            hw = self._hw_memo.get((n, hypothetical))
            if hw is None:
                hw = self._hw_memo[(n, hypothetical)] = self.hw_for(n, hypothetical)
            one = None
            if hw.total_gpus > 1 and cfg.strategy is not Strategy.single:
                # The single-GPU baseline of scaling efficiency is the same for every GPU count:
                # computed once per configuration (a search over 1,024 counts asks for it thousands of times).
                one_key = (m.name,) + _config_key(cfg)
                one = self._one_memo.get(one_key)
                if one is None:
                    one = self._one_memo[one_key] = one_gpu_throughput(m, cfg, hw, self.cal)
            hit = estimate(m, cfg, hw, dataset_size=self.req.dataset_size, epochs=self.req.epochs,
                           calibration=self.cal, one_gpu=one)
            self._memo[key] = hit
        return hit

    def efficient_micro(self, cfg0: TrainConfig, n: int, hypothetical: bool, model: ModelSpec | None) -> int | None:
        """Smallest power-of-two micro-batch within `saturation` of the best samples/s that fits (accum 1)."""
        s = self.defaults.search
        fitting: list[tuple[int, float]] = []
        m = 1
        while m <= s.max_micro_batch:
            e = self.est(cfg0.model_copy(update={"micro_batch": m, "grad_accum": 1}), n, hypothetical, model)
            if not e.memory.fits:
                break
            fitting.append((m, e.throughput.samples_per_s))
            m *= 2
        if not fitting:
            return None
        best = max(sps for _, sps in fitting)
        return next(m for m, sps in fitting if sps >= s.saturation * best)

    def search(self, n: int, strategy: Strategy, *, base: TrainConfig | None = None, relax_accum: bool = False,
               hypothetical: bool = False, model: ModelSpec | None = None, ckpt: bool | None = None) -> Choice | Infeasible:
        """The standard configuration for ``n`` GPUs with ``strategy``, or why there is none.
        ``ckpt`` forces checkpointing on or off (default: off, then on if nothing fits)."""
        req = self.req
        base = base or self.base
        if base.cpu_offload and strategy is Strategy.single:
            strategy = Strategy.fsdp  # CPU offload is FSDP's (CPUOffload), on one GPU too
        if base.optimizer_in_backward and (strategy is not Strategy.single or n > 1):
            return Infeasible(n, strategy, "memory", "--optimizer-in-backward runs on one process (strategy single)")
        exact = req.batch_size is not None or req.keep_global_batch
        target = req.batch_size or self.base_batch
        pin_micro = req.micro_batch
        pin_accum = None if relax_accum else req.grad_accum
        ckpts = [base.grad_ckpt] if req.grad_ckpt is not None else [ckpt] if ckpt is not None else [False, True]
        if base.optimizer_in_backward:  # no gradient to accumulate: the global batch is what fits at once
            r: Choice | Infeasible | None = None
            for ck in ckpts:
                r = self.search_accum1(n, strategy, base, ck)
                if isinstance(r, Choice):
                    return r
            return r
        closest: Estimate | None = None
        batch_reason = None
        for ckpt in ckpts:
            cfg0 = base.model_copy(update={"grad_ckpt": ckpt, "strategy": strategy, "micro_batch": 1, "grad_accum": 1})
            grown = rounded = False
            if pin_micro and pin_accum:
                share = pin_micro * pin_accum
                if exact and share * n != target:
                    return Infeasible(n, strategy, "batch", f"--micro-batch {pin_micro} x --grad-accum {pin_accum} x {n} GPUs "
                                      f"= {share * n}, not the global batch {target}")
            elif exact:
                if target % n:
                    return Infeasible(n, strategy, "batch", f"the global batch {target} does not split evenly over {n} GPUs")
                share = target // n
            else:
                share0 = -(-target // n)
                m_eff = pin_micro or self.efficient_micro(cfg0, n, hypothetical, model)
                if m_eff is None:
                    # what the smallest micro-batch costs with the accumulation the batch needs
                    c1 = cfg0.model_copy(update={"grad_accum": pin_accum or share0})
                    closest = self.est(c1, n, hypothetical, model)
                    continue
                if pin_accum:
                    share = max(share0, m_eff * pin_accum)
                    share = -(-share // pin_accum) * pin_accum
                elif share0 < m_eff:
                    share, grown = m_eff, True
                else:
                    share = self._round_share(share0, m_eff)
                rounded = not grown and share * n != target
            if pin_micro:
                micros = [pin_micro] if share % pin_micro == 0 else []
            elif pin_accum:
                micros = [share // pin_accum] if share % pin_accum == 0 else []
            else:
                micros = [d for d in _divisors(share) if d <= self.defaults.search.max_micro_batch]
            if not micros:
                batch_reason = f"the per-GPU batch {share} is not a multiple of the pinned micro-batch/accumulation"
                continue
            fitting = []
            for m in micros:
                cfg = cfg0.model_copy(update={"micro_batch": m, "grad_accum": share // m})
                e = self.est(cfg, n, hypothetical, model)
                if e.memory.fits:
                    fitting.append((m, cfg, e))
                elif closest is None or e.memory.device_gib < closest.memory.device_gib:
                    closest = e
            if not fitting:
                continue
            # The largest micro-batch that fits (accumulation only as memory needs it), preferring
            # one that leaves the headroom of the "memory.tight" rule.
            roomy = [f for f in fitting if f[2].memory.device_gib <= self.defaults.search.roomy * f[2].memory.gpu_memory_gib]
            m, cfg, e = (roomy or fitting)[-1]
            if req.compile is None and not cfg.compile:
                gain = self.compile_gain(cfg, n, hypothetical, model)
                if gain["repays"]:
                    cfg, e = gain["config"], gain["estimate"]
            return Choice(n, strategy, cfg, e, global_batch=share * n, lr=self.lr_for(share * n, cfg), grown=grown,
                          rounded=rounded, ckpt_needed=ckpt and req.grad_ckpt is None)
        if batch_reason:
            return Infeasible(n, strategy, "batch", batch_reason, closest)
        dev = f"{closest.memory.device_gib:.1f} GiB" if closest else "more than the GPU has"
        usable = self.hw.gpu.memory_gib * self.cal.fit_fraction
        return Infeasible(n, strategy, "memory", f"the smallest configuration needs ~{dev} per GPU; "
                          f"{usable:.1f} of {self.hw.gpu.memory_gib:.0f} GiB are usable", closest)

    def search_accum1(self, n: int, strategy: Strategy, base: TrainConfig, ckpt: bool) -> Choice | Infeasible:
        """No accumulation: the largest micro-batch (a power of two up to the per-GPU share of the
        batch) that fits with ``grad_accum`` 1; the global batch is micro-batch x GPUs."""
        req = self.req
        target = req.batch_size or self.base_batch
        if base.optimizer_in_backward and (strategy is not Strategy.single or n > 1):
            return Infeasible(n, strategy, "memory", "--optimizer-in-backward runs on one process (strategy single)")
        cfg0 = base.model_copy(update={"grad_ckpt": ckpt, "strategy": strategy, "grad_accum": 1})
        if req.batch_size is not None or req.keep_global_batch:
            if target % n:
                return Infeasible(n, strategy, "batch", f"the global batch {target} does not split evenly over {n} GPUs")
            micros = [target // n]
        elif req.micro_batch:
            micros = [req.micro_batch]
        else:
            top = max(1, min(self.defaults.search.max_micro_batch, target // n))
            micros = [1 << k for k in range(top.bit_length()) if 1 << k <= top]
        fitting, closest = [], None
        for m in micros:
            e = self.est(cfg0.model_copy(update={"micro_batch": m}), n)
            if not e.memory.fits:
                closest = e
                break
            fitting.append(e)
        # the largest that fits, preferring one that leaves the "memory.tight" headroom (as search does)
        roomy = [e for e in fitting if e.memory.device_gib <= self.defaults.search.roomy * e.memory.gpu_memory_gib]
        best = (roomy or fitting)[-1] if fitting else None
        if best is None:
            reason = f"~{closest.memory.device_gib:.1f} GiB per GPU at micro-batch {micros[0]}" if closest else "nothing fits"
            return Infeasible(n, strategy, "memory", reason, closest)
        gb = best.config.micro_batch * n
        return Choice(n, strategy, best.config, best, global_batch=gb, lr=self.lr_for(gb, best.config), ckpt_needed=ckpt)

    def compile_minutes(self, model: ModelSpec | None = None) -> float:
        """Rough one-off torch.compile time (rules/data/defaults.toml [compile])."""
        c = self.defaults.compile
        return c.base_min + c.per_layer_s * model_layers(model or self.model) / 60.0

    def compile_gain(self, cfg: TrainConfig, n: int, hypothetical: bool = False, model: ModelSpec | None = None) -> dict:
        """Does torch.compile pay for itself over this run? Eager vs compiled estimate of the same config.

        Repays when the time it saves over the whole run is at least ``repay_factor`` x its compile
        time (and the compiled config still fits); unknown run length = does not repay."""
        eager = self.est(cfg.model_copy(update={"compile": False}), n, hypothetical, model)
        c2 = cfg.model_copy(update={"compile": True})
        comp = self.est(c2, n, hypothetical, model)
        saving = max(0.0, 1.0 - comp.throughput.step_s / eager.throughput.step_s)
        minutes = self.compile_minutes(model)
        run_h = eager.time_to_train_h
        saving_min = run_h * 60 * saving if run_h is not None else None
        repays = bool(saving_min is not None and comp.memory.fits
                      and saving_min >= self.defaults.compile.repay_factor * minutes)
        return {"config": c2, "estimate": comp, "saving": saving, "minutes": minutes, "run_h": run_h,
                "saving_min": saving_min, "breakeven_min": minutes / saving if saving > 0 else None, "repays": repays}

    def _round_share(self, share0: int, m_eff: int) -> int:
        """Round the per-GPU batch up to a multiple of the largest power of two <= m_eff that stays
        within max_round_up (so that a good micro-batch divides it)."""
        p = 1 << (m_eff.bit_length() - 1)
        while p > 1:
            s = -(-share0 // p) * p
            if s <= share0 * (1 + self.defaults.search.max_round_up):
                return s
            p //= 2
        return share0

    def best_multi(self, n: int, hypothetical: bool = False, model: ModelSpec | None = None) -> Choice | Infeasible:
        """DDP if a replica fits at this count, else FSDP (node I's rule), for tables and alternatives."""
        ch = self.search(n, Strategy.ddp, hypothetical=hypothetical, model=model)
        if isinstance(ch, Choice):
            return ch
        fs = self.search(n, Strategy.fsdp, hypothetical=hypothetical, model=model)
        return fs if isinstance(fs, Choice) or ch.kind == "memory" else ch

    def min_gpus(self, strategy: Strategy, limit: int = 64) -> Choice | None:
        """The fewest GPUs of this kind (hypothetically up to ``limit``) on which ``strategy`` fits."""
        for n in self.counts(hypothetical_max=limit):
            if n < 2:
                continue
            ch = self.search(n, strategy, hypothetical=True)
            if isinstance(ch, Choice):
                return ch
        return None

