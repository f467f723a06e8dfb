"""The one search behind the recommendation: every configuration scored, for each GPU count.

``Planner.search(n, strategy)`` scores, for ``n`` GPUs and one strategy, every micro-batch (powers
of two that divide the per-GPU batch, and the per-GPU batch itself: accumulation 1), with and
without activation checkpointing, and compile where it repays its compile time; it returns the
fastest that fits (preferring one that leaves ``search.roomy`` of the memory free when it is
within 2% of the fastest). The global batch is the user's ``--batch-size`` or the recipe's base
batch, EXACTLY (a count that does not divide it is not a candidate: never rounded), except for a
pretraining run without ``--batch-size`` (``batch_span``, from ``rules.lr.batch_range``): there the
global batch is a dimension of the same search, from the recipe's batch up to the family's published
limit in doublings; at each count it doubles while doubling speeds the plan up by more than
``BATCH_GAIN`` (``_grow``), so each count runs at its own planned batch (weak scaling) and the
learning rate follows it by the recipe's rule.
Pinned flags (``--micro-batch``, ``--grad-accum``, ``--grad-ckpt``, ``--strategy``, ``--compile``,
``--precision``) restrict what is scored. ``Planner.best(n)`` is the fastest strategy at ``n``
(DDP, FSDP, FSDP keeping the gathered weights across accumulation, HSDP across whole nodes),
``Planner.candidates`` every row scored (config, estimate,
time-to-train, fits, why rejected): the policy (``rules.policy``) picks from them, and the
scaling table and the alternatives read the same rows.

The search is bounded (counts: divisors of the node size, then whole nodes in powers of two;
micro-batches: powers of two; memory is monotone in the micro-batch, so the first that does not
fit ends the ladder) and memoised per configuration (``tests/test_bounded_search.py`` counts the
estimator's calls; ``python -m benchmarks.speed.search_timing`` times them).

Every ``Choice`` carries its learning-rate plan (``rules.lr``), computed once when it is made.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

from advisor.calibration import Calibration
from advisor.comm import scaling_error_bound
from advisor.config import Strategy, TrainConfig
from advisor.estimate import Estimate, estimate, one_gpu_throughput
from advisor.hardware import HardwareSpec
from advisor.memo import config_key
from advisor.models import ModelSpec
from advisor.request import Request
from advisor.setup import no_accumulation, offloads
from advisor.setup import strategy as strategy_setup
from advisor.setup.checkpointing import checkpointing_pinned
from advisor.setup.constraints import PLANNER_ROWS, Combo, refusal
from advisor.throughput import ThroughputEstimate
from rules.defaults import Defaults
from advisor.schedule import LrRecipe
from rules.lr import LrPlan, lr_plan, recipe

# DDP whenever a replica fits (DESIGN.md node H, issue 38): a sharded strategy is taken over a DDP plan
# that fits only when both are measured on this machine (`advise bench` factors for their modes:
# throughput.calibrated) and the sharded one is more than this much faster. The multi-GPU model is fit on
# published DDP rows only (benchmarks/calibration/multi_gpu/published.jsonl), so FSDP's estimated edge
# over DDP (its gathers hidden under compute, the optimizer step sharded) is unmeasured; DDP is one
# all-reduce a step, the simplest to debug, and what practitioners run when a replica fits.
DDP_PREFERENCE = 0.045
# ... except across nodes, where DDP's all-reduce crosses the network every step (a cost of DDP's own model)
# and a hybrid strategy's (the setup's ``hybrid``: HSDP's replica all-reduce) moves 1/GPUs-per-node of it:
# there the hybrid plan is taken when its estimated edge is larger than anything the multi-GPU model has got
# wrong on held-out published rows over those links (advisor.comm.scaling_error_bound; no published
# multi-node rows exist, so the worst of any link kind; the fit writes the table). Example, cardwise's own
# estimate: GPT-2-XL on 2 nodes of 8 H100 with a 2 h deadline (tests/test_strategy_preference.py's request)
# plans HSDP, 82% faster than DDP. A flat sharded plan (FSDP over all nodes) moves as much over the network
# as DDP; its edge, like any within a node, is the unmeasured part: DDP stays.
# FSDP with the weights kept gathered across accumulation (fsdp-keep) is taken over plain FSDP only when
# it is at least this much faster: it holds a full unsharded copy of the weights and the gradients
# (less headroom for the allocator's fragmentation), and no run has measured it yet (docs/design.md
# "Decision policy"); below the policy's 5% self-regret, which tests/test_policy_regret.py checks.
FSDP_KEEP_MIN_GAIN = 0.02
# A pretraining run's global batch (when free: Planner.batch_span) doubles at a GPU count only while
# doubling it speeds that count's plan up by more than this: a larger batch is taken for throughput
# that scaling would otherwise lose (a small per-GPU batch), not for a last percent (Goyal et al.
# 2017 grew the batch with the GPU count, 32 images per GPU; docs/design.md "Decision policy").
BATCH_GAIN = 0.05
# A roomier micro-batch (nvidia-smi memory below ``search.roomy`` of the GPU) is preferred over the
# fastest only when it is at most this much slower: the pick stays within the policy's 5% self-regret.
ROOMY_SLACK = 0.02
# A configuration that fits but leaves less room than the caching allocator's measured reserve
# (``memory.tight``, advisor.allocator) is replaced by the fastest one that is not tight when that one is
# at most this much slower: a tight plan may run out of memory and lose its start to the OOM retry
# (llama3-8b QLoRA r16 on an H100 80GB: micro-batch 4 ran out, 2 ran at the estimated rate; issue 39);
# below the policy's 5% self-regret, which tests/test_policy_regret.py checks.
TIGHT_SLACK = 0.045


@dataclass
class Choice:
    """A configuration that fits, for one GPU count and strategy."""

    gpus: int
    strategy: Strategy
    config: TrainConfig
    estimate: Estimate
    global_batch: int
    lr: LrPlan  # for global_batch: node J's answer, the plan and the launch command
    ckpt_needed: bool = False  # checkpointing on because nothing fits without it (not pinned)
    fastest_sps: float | None = None  # the fastest configuration scored in this search (the pick may be roomier)
    strategy_rule: str = ""  # Planner.best: why this strategy at this count (DDP whenever a replica fits)
    sharded_gain: float | None = None  # DDP kept: how much faster the fastest sharded estimate was (unmeasured)

    @property
    def fits(self) -> bool:
        return True

    @property
    def time_h(self) -> float | None:
        return self.estimate.time_to_train_h

    @property
    def samples_per_s(self) -> float:
        return self.estimate.throughput.samples_per_s

    def with_config(self, config: TrainConfig, estimate: Estimate) -> "Choice":
        """The same choice (GPUs, batch, learning rate) with a config change such as compile."""
        return dataclasses.replace(self, config=config, estimate=estimate)


@dataclass
class Infeasible:
    """Nothing fits (kind 'memory'), the batch cannot be split (kind 'batch') or the strategy does
    not apply to this count (kind 'strategy')."""

    gpus: int
    strategy: Strategy
    kind: Literal["memory", "batch", "strategy"]
    reason: str
    closest: Estimate | None = None

    @property
    def fits(self) -> bool:
        return False

    @property
    def time_h(self) -> float | None:
        return None


@dataclass
class Candidate:
    """One row the planner scored: a configuration on ``gpus`` GPUs, its estimate, and why it was
    rejected ('' when it fits). ``standard``: the request's own setup (no memory compromise)."""

    gpus: int
    strategy: Strategy
    config: TrainConfig | None
    estimate: Estimate | None
    global_batch: int
    rejected: str = ""
    standard: bool = True

    @property
    def fits(self) -> bool:
        return not self.rejected

    @property
    def time_h(self) -> float | None:
        return self.estimate.time_to_train_h if self.estimate is not None else None

    @property
    def samples_per_s(self) -> float | None:
        return self.estimate.throughput.samples_per_s if self.estimate is not None else None

    def as_dict(self) -> dict:
        c = self.config
        return {"gpus": self.gpus, "strategy": self.strategy.value, "fits": self.fits, "rejected": self.rejected,
                "micro_batch": c.micro_batch if c else None, "grad_accum": c.grad_accum if c else None,
                "grad_ckpt": c.grad_ckpt if c else None, "compile": c.compile if c else None,
                "global_batch": self.global_batch, "samples_per_s": self.samples_per_s, "time_to_train_h": self.time_h,
                "device_gib": self.estimate.memory.device_gib if self.estimate else None}


def model_layers(m: ModelSpec) -> int:
    """Repeated blocks, for compile time: transformer layers, or ~30 forward ops per ResNet block."""
    if m.arch is not None:
        return m.arch.n_layers
    if m.trace is not None and m.trace.kernels:
        return max(1, round(m.trace.kernels / 30))
    return 1


def _config_key(cfg: TrainConfig) -> tuple:
    """Everything of a config the estimate depends on, except the strategy (a field added later is part of it)."""
    return config_key(cfg, ("strategy",))


def _pow2_upto(n: int) -> list[int]:
    return [1 << k for k in range(n.bit_length()) if 1 << k <= n]


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def node_counts(per_node: int) -> list[int]:
    """GPU counts inside one node: the divisors of the node size (no 3, 5 or 7 of 8: they leave GPUs
    idle and split batches unevenly), bounded for huge nodes to the divisors that are at most 8,
    powers of two, or the node itself."""
    if per_node <= 64:
        return _divisors(per_node)
    return [d for d in _divisors(per_node) if d <= 8 or d & (d - 1) == 0 or d == per_node]


def bounded_counts(per_node: int, nodes: int) -> list[int]:
    """The GPU counts compared for ``nodes`` nodes of ``per_node`` GPUs: the divisors of the node
    size, then whole nodes (powers of two, and all of them)."""
    return node_counts(per_node) + [per_node * k for k in sorted(set(_pow2_upto(nodes)) | {nodes}) if k >= 2]


def micro_batches(share: int, cap: int) -> list[int]:
    """Micro-batches scored for a per-GPU batch ``share``: powers of two that divide it and the
    per-GPU batch over powers of two (accumulation 1, 2, 4, ...), up to ``cap``; ascending."""
    out = set()
    p = 1
    while p <= share and share % p == 0:
        if p <= cap:
            out.add(p)
        if share // p <= cap:
            out.add(share // p)
        p *= 2
    return sorted(out)


class Planner:
    """Scores configurations with the estimator (memoised) and keeps every row it scored."""

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
        self.host_ram_gib: float | None = None  # RAM per node: --host-ram, or this machine's (CPU offload's check)
        self.host_ram_source: str | None = None  # where host_ram_gib came from, in words
        self._hw_memo: dict[tuple[int, bool], HardwareSpec] = {}
        self._one_memo: dict[tuple, ThroughputEstimate] = {}
        self._search_memo: dict[tuple, Choice | Infeasible] = {}
        self._scored: dict[tuple, Candidate] = {}
        self._recipes: dict[tuple, LrRecipe] = {}
        self.start_recipe: LrRecipe | None = None  # the recipe of the request's pins (rules.flow.start)
        # (start, max) of the global batch a pretraining run may grow over (rules.lr.batch_range); None: held
        self.batch_span: tuple[int, int] | None = None

    @property
    def target_batch(self) -> int:
        """The global batch held: --batch-size, else where a free batch starts, else the recipe's base batch."""
        return self.req.batch_size or (self.batch_span[0] if self.batch_span else self.base_batch)

    @property
    def batch_free(self) -> bool:
        return self.batch_span is not None

    def batch_ladder(self, n: int = 1) -> list[int]:
        """The global batches a free batch may take on ``n`` GPUs: the start, doubled up to the family's
        limit (and the limit); a rung ``n`` does not divide becomes ``n`` x the next power of two per GPU
        (a node of 6 GPUs runs 384 = 6 x 64, not 256), never past the limit."""
        if self.batch_span is None:
            return [self.target_batch]
        start, top = self.batch_span
        rungs = [start]
        while rungs[-1] * 2 <= top:
            rungs.append(rungs[-1] * 2)
        if rungs[-1] != top:
            rungs.append(top)
        out: list[int] = []
        for b in rungs:
            if b % n:
                b = n * (1 << max(0, math.ceil(math.log2(b / n))))
                if b > top and top >= n:
                    b = n * (1 << int(math.log2(top / n)))
            if b <= top and b not in out:
                out.append(b)
        return out or rungs

    def recipe(self, config: TrainConfig | None = None) -> LrRecipe:
        """The learning-rate recipe for ``config`` (adapters and the optimizer pick the row: rules.lr)."""
        cfg = config or self.base
        key = (cfg.adapters, cfg.optimizer.value, cfg.seq_len)
        hit = self._recipes.get(key)
        if hit is None:
            hit = self._recipes[key] = recipe(self.req, self.model, self.defaults, seq_len=cfg.seq_len,
                                              adapter=cfg.adapters, optimizer=cfg.optimizer.value)
        return hit

    def lr_for(self, global_batch: int, config: TrainConfig | None = None) -> LrPlan:
        return lr_plan(self.req, self.recipe(config), global_batch)

    @property
    def candidates(self) -> list[Candidate]:
        """Every row scored so far (at the GPUs at hand), in the order scored."""
        return list(self._scored.values())

    # -- hardware
    @property
    def available(self) -> int:
        return self.hw.total_gpus

    def hw_for(self, n: int, hypothetical: bool = False) -> HardwareSpec:
        per_node = self.hw.gpus_per_node
        if hypothetical:
            per_node = max(per_node, 8)
        at_hand = self.hw.at_hand()  # the report's header counts the GPUs and nodes named (issue 28)
        if n <= per_node:
            return self.hw.model_copy(update={"gpus_per_node": n, "nodes": 1, **at_hand})
        if n % per_node:
            raise ValueError(f"{n} GPUs is not a whole number of {per_node}-GPU nodes")
        return self.hw.model_copy(update={"gpus_per_node": per_node, "nodes": n // per_node, **at_hand})

    def counts(self, hypothetical_max: int | None = None) -> list[int]:
        """GPU counts the policy compares: the divisors of the node size, then whole nodes (powers of
        two and all of them), so that a recommendation at 100,000 GPUs asks the estimator a few
        hundred times (tests/test_bounded_search.py counts the calls)."""
        if hypothetical_max:
            per_node = max(self.hw.gpus_per_node, 8)
            return bounded_counts(per_node, max(1, hypothetical_max // per_node))
        return bounded_counts(self.hw.gpus_per_node, self.hw.nodes)

    def strategies(self, n: int, hypothetical: bool = False) -> list[Strategy]:
        """What runs on ``n`` GPUs: single on one; DDP, FSDP and fsdp-keep (where there is accumulation:
        ``_keep_blocked``) on several; HSDP (FSDP inside a node, DDP across nodes) on whole nodes beyond
        one. A pinned --strategy is the only one."""
        if n == 1:
            # FSDP over one GPU is CPU offload's (FSDP's CPUOffload), or what a pinned --strategy fsdp asks
            out = [Strategy.single] + ([Strategy.fsdp] if offloads(self.req) or self.req.strategy is Strategy.fsdp else [])
        else:
            out = [Strategy.ddp, Strategy.fsdp] + ([Strategy.fsdp_keep] if not offloads(self.req) else [])
            per_node = max(self.hw.gpus_per_node, 8) if hypothetical else self.hw.gpus_per_node
            if n > per_node and per_node > 1:
                out.append(Strategy.hsdp)
        pin = self.req.strategy
        return [s for s in out if pin is None or s is pin]

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
                # The single-GPU baseline of the estimate's own scaling efficiency is the same for
                # every GPU count: computed once per configuration.
                one_key = (m.name,) + _config_key(cfg)
                one = self._one_memo.get(one_key)
                if one is None:
                    one = self._one_memo[one_key] = one_gpu_throughput(m, cfg, hw, self.cal)
            hit = estimate(m, cfg, hw, dataset_size=self.req.dataset_size, epochs=self.req.epochs,
                           calibration=self.cal, one_gpu=one)
            self._memo[key] = hit
        return hit

    def _micros(self, share: int) -> list[int] | str:
        """Micro-batches for a per-GPU batch ``share`` under the pins, or why none splits it."""
        req = self.req
        pm, pa = req.micro_batch, req.grad_accum
        if pm and pa:
            return [pm] if pm * pa == share else f"--micro-batch {pm} x --grad-accum {pa} = {pm * pa}, not the per-GPU batch {share}"
        if pm:
            return [pm] if share % pm == 0 else f"--micro-batch {pm} does not divide the per-GPU batch {share}"
        if pa:
            return [share // pa] if share % pa == 0 else f"--grad-accum {pa} does not divide the per-GPU batch {share}"
        return micro_batches(share, self.defaults.search.max_micro_batch)

    def _pick(self, fitting: list[tuple[TrainConfig, Estimate]]) -> tuple[TrainConfig, Estimate]:
        """The fastest that fits; one that is not tight (the allocator's measured reserve) when within TIGHT_SLACK
        of it; a roomier one (memory.tight's headroom) when within ROOMY_SLACK of that."""
        best = max(fitting, key=lambda f: f[1].throughput.samples_per_s)
        if best[1].memory.tight:
            loose = [f for f in fitting if not f[1].memory.tight and f[1].throughput.samples_per_s
                     >= (1 - TIGHT_SLACK) * best[1].throughput.samples_per_s]
            best = max(loose, key=lambda f: f[1].throughput.samples_per_s) if loose else best
        top = best[1].throughput.samples_per_s
        roomy = [f for f in fitting if f[1].memory.device_gib <= self.defaults.search.roomy * f[1].memory.gpu_memory_gib
                 and f[1].throughput.samples_per_s >= (1 - ROOMY_SLACK) * top]
        return max(roomy, key=lambda f: f[1].throughput.samples_per_s) if roomy else best

    def _record(self, n: int, cfg: TrainConfig, e: Estimate | None, rejected: str, standard: bool,
                global_batch: int | None = None) -> None:
        key = (n, cfg.strategy) + _config_key(cfg)
        if key not in self._scored:
            gb = global_batch or self.target_batch
            held = gb == self.target_batch or (self.batch_free and self.batch_span[0] <= gb <= self.batch_span[1])
            self._scored[key] = Candidate(n, cfg.strategy, cfg, e, gb, rejected, standard and held)

    def search(self, n: int, strategy: Strategy, *, base: TrainConfig | None = None, hypothetical: bool = False,
               model: ModelSpec | None = None, ckpt: bool | None = None, batch: int | None = None) -> Choice | Infeasible:
        """The fastest configuration of ``strategy`` on ``n`` GPUs at the global batch ``batch`` (None: the
        batch held, or for a free batch the planned one: ``_grow``), or why there is none. ``ckpt`` forces
        checkpointing on or off (default: both scored)."""
        base = base or self.base
        if batch is None and self.batch_free and model is None and base == self.base:
            return self._grow(n, strategy, hypothetical, ckpt)
        batch = batch or self.target_batch
        key = (n, strategy, hypothetical, model.name if model else None, ckpt, batch) + _config_key(base)
        hit = self._search_memo.get(key)
        if hit is None:
            hit = self._search_memo[key] = self._search(n, strategy, base, hypothetical, model, ckpt, batch)
        return hit

    def _grow(self, n: int, strategy: Strategy, hypothetical: bool, ckpt: bool | None) -> Choice | Infeasible:
        """A free global batch at ``n`` GPUs: from the start of the ladder, doubled while the doubled
        batch's plan is more than ``BATCH_GAIN`` faster (a batch that does not split over ``n`` is
        skipped). The first batch whose plan fits is kept when none is faster, else why none fits."""
        got: Choice | Infeasible | None = None
        for b in self.batch_ladder(n):
            prev = got if isinstance(got, Choice) else None
            key = (n, strategy, hypothetical, None, ckpt, b, "grown") + _config_key(self.base)
            r = self._search_memo.get(key)
            if r is None:
                r = self._search_memo[key] = self._search(n, strategy, self.base, hypothetical, None, ckpt, b, prev)
            if isinstance(r, Infeasible):
                if got is None or (isinstance(got, Infeasible) and r.kind == "memory"):
                    got = r
                if r.kind == "batch":
                    continue
                break  # memory does not shrink with a larger batch (the micro-batches are the same)
            if isinstance(got, Choice) and r.samples_per_s <= (1 + BATCH_GAIN) * got.samples_per_s:
                break
            got = r
        if isinstance(got, Choice) and got.global_batch != self.batch_ladder(n)[0]:
            # the batch decided, its plan is the full search at it: what `--batch-size` that batch scores
            # (the printed command reproduces the plan)
            got = self.search(n, strategy, hypothetical=hypothetical, ckpt=ckpt, batch=got.global_batch)
        return got

    def _search(self, n: int, strategy: Strategy, base: TrainConfig, hypothetical: bool, model: ModelSpec | None,
                ckpt: bool | None, target: int, prev: Choice | None = None) -> Choice | Infeasible:
        """``prev``: the plan at half this batch (``_grow``): only its checkpointing and its micro-batch,
        doubled, or the whole per-GPU batch at once are scored (memory does not change with accumulation;
        this bounds the batch dimension: tests/test_bounded_search.py)."""
        req = self.req
        if offloads(base) and strategy is Strategy.single:
            strategy = Strategy.fsdp  # CPU offload is FSDP's (CPUOffload), on one GPU too
        blocked = self._blocked(n, strategy, base, req.grad_accum)
        if blocked is not None:
            return blocked
        if strategy is Strategy.hsdp and strategy not in self.strategies(n, hypothetical):
            return Infeasible(n, strategy, "strategy", "HSDP shards inside a node and replicates across whole nodes")
        ckpts = ([base.grad_ckpt] if checkpointing_pinned(req) else [ckpt] if ckpt is not None else [False, True])
        if prev is not None:
            ckpts = [prev.config.grad_ckpt]
        if no_accumulation(base):  # no gradient to accumulate: the global batch is what fits at once
            r: Choice | Infeasible | None = None
            for ck in ckpts:
                r = self.search_accum1(n, strategy, base, ck)
                if isinstance(r, Choice):
                    return r
            return r
        if target % n:
            return Infeasible(n, strategy, "batch", f"the global batch {target} does not split evenly over {n} GPUs")
        share = target // n
        micros = self._micros(share)
        if isinstance(micros, str):
            return Infeasible(n, strategy, "batch", micros)
        if prev is not None:
            keep = {prev.config.micro_batch, 2 * prev.config.micro_batch, share}
            micros = [m for m in micros if m in keep] or micros
        if strategy is Strategy.fsdp_keep:
            micros = [m for m in micros if share // m > 1]  # the weights are kept across accumulation only
            if not micros:
                return Infeasible(n, strategy, "strategy", f"fsdp-keep needs accumulation, and the per-GPU batch "
                                  f"{share} is one micro-batch here")
        record = not hypothetical and model is None
        standard = base == self.base
        fitting: list[tuple[TrainConfig, Estimate]] = []
        closest: Estimate | None = None
        fits_without_ckpt = False
        for ck in ckpts:
            for i, m in enumerate(micros):
                cfg = base.model_copy(update={"grad_ckpt": ck, "strategy": strategy, "micro_batch": m,
                                              "grad_accum": share // m})
                e = self.est(cfg, n, hypothetical, model)
                if e.memory.fits:
                    fitting.append((cfg, e))
                    fits_without_ckpt |= not ck
                    if record:
                        self._record(n, cfg, e, "", standard, target)
                    continue
                if record:
                    self._record(n, cfg, e, f"does not fit: ~{e.memory.device_gib:.1f} GiB per GPU", standard, target)
                if closest is None or e.memory.device_gib < closest.memory.device_gib:
                    closest = e
                # Memory grows with the micro-batch: the larger ones do not fit either, except
                # accumulation 1, which drops the accumulated gradients (scored once).
                last = micros[-1]
                if m != last:
                    c1 = cfg.model_copy(update={"micro_batch": last, "grad_accum": share // last})
                    e1 = self.est(c1, n, hypothetical, model)
                    if e1.memory.fits:
                        fitting.append((c1, e1))
                        fits_without_ckpt |= not ck
                    if record:
                        self._record(n, c1, e1, "" if e1.memory.fits else
                                     f"does not fit: ~{e1.memory.device_gib:.1f} GiB per GPU", standard, target)
                    if record:
                        for m2 in micros[i + 1:-1]:
                            c2 = cfg.model_copy(update={"micro_batch": m2, "grad_accum": share // m2})
                            self._record(n, c2, None, f"pruned: micro-batch {m} already does not fit", standard, target)
                break
        if not fitting:
            dev = f"{closest.memory.device_gib:.1f} GiB" if closest else "more than the GPU has"
            usable = self.hw.gpu.memory_gib * self.cal.fit_fraction
            return Infeasible(n, strategy, "memory", f"the smallest configuration needs ~{dev} per GPU; "
                              f"{usable:.1f} of {self.hw.gpu.memory_gib:.0f} GiB are usable", closest)
        cfg, e = self._pick(fitting)
        if req.compile is None and not cfg.compile:
            gain = self.compile_gain(cfg, n, hypothetical, model)
            if record:
                self._record(n, gain["config"], gain["estimate"], "" if gain["repays"] else
                             "compile does not repay its compile time over this run", standard, target)
            if gain["repays"]:
                cfg, e = gain["config"], gain["estimate"]
        top = max(max(f[1].throughput.samples_per_s for f in fitting), e.throughput.samples_per_s)
        return Choice(n, strategy, cfg, e, global_batch=target, lr=self.lr_for(target, cfg),
                      ckpt_needed=cfg.grad_ckpt and not fits_without_ckpt and req.grad_ckpt is None, fastest_sps=top)

    @staticmethod
    def _blocked(n: int, strategy: Strategy, base: TrainConfig, grad_accum: int | None) -> Infeasible | None:
        """Why ``strategy`` on ``n`` GPUs cannot run ``base`` (advisor.setup.constraints), as an Infeasible."""
        row = refusal(Combo.of_config(base, ranks=n).but(strategy=strategy, grad_accum=grad_accum), only=PLANNER_ROWS)
        if row is None:
            return None
        return Infeasible(n, strategy, "memory" if row.id.startswith("in-backward") else "strategy", row.why)

    def search_accum1(self, n: int, strategy: Strategy, base: TrainConfig, ckpt: bool) -> Choice | Infeasible:
        """No accumulation: the largest micro-batch (a power of two up to the per-GPU share of the
        batch) that fits with ``grad_accum`` 1; the global batch is micro-batch x GPUs."""
        req = self.req
        target = self.target_batch
        blocked = self._blocked(n, strategy, base, 1)  # no accumulation here
        if blocked is not None:
            return blocked
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
            cfg = cfg0.model_copy(update={"micro_batch": m})
            e = self.est(cfg, n)
            # node H's rows too (no accumulation, the optimizer step in backward), with the batch they train
            self._record(n, cfg, e, "" if e.memory.fits else f"does not fit: ~{e.memory.device_gib:.1f} GiB per GPU",
                         base == self.base, global_batch=m * n)
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
        # fit judged on the compiled estimate, with the allocator's reserve: a compiled plan that is tight where
        # the eager one is not is not taken (compiled peaks moved 15% between two Hopper machines: issue 39's
        # H100 set against the H200's, benchmarks/calibration/results/h100-i39.md)
        repays = bool(saving_min is not None and comp.memory.fits and (eager.memory.tight or not comp.memory.tight)
                      and saving_min >= self.defaults.compile.repay_factor * minutes)
        return {"config": c2, "estimate": comp, "saving": saving, "minutes": minutes, "run_h": run_h,
                "saving_min": saving_min, "breakeven_min": minutes / saving if saving > 0 else None, "repays": repays}

    def best(self, n: int, hypothetical: bool = False, model: ModelSpec | None = None,
             batch: int | None = None) -> Choice | Infeasible:
        """The fastest strategy on ``n`` GPUs (DDP, FSDP, HSDP on whole nodes; the pinned one only) at
        the global batch ``batch`` (None: held, or planned when free), or the most telling reason none
        fits (memory before batch before strategy)."""
        results = [self.search(n, s, hypothetical=hypothetical, model=model, batch=batch)
                   for s in self.strategies(n, hypothetical)]
        fitting = [r for r in results if isinstance(r, Choice)]
        if fitting:
            return self._prefer(fitting, results)
        if not results:
            return Infeasible(n, self.req.strategy or Strategy.ddp, "strategy",
                              f"--strategy {self.req.strategy.value if self.req.strategy else '?'} does not run on {n} GPUs")
        order = {"memory": 0, "batch": 1, "strategy": 2}
        return min(results, key=lambda r: order[r.kind])

    def _prefer(self, fitting: list[Choice], results: list[Choice | Infeasible]) -> Choice:
        """The strategy at one count, with the rule that chose it (``Choice.strategy_rule``): DDP whenever a
        replica fits, unless a sharded plan measured here (``advise bench``) is more than DDP_PREFERENCE
        faster than DDP measured here, or, across nodes, a hybrid plan's estimate (HSDP) is faster by more
        than the multi-GPU model's worst held-out error over the links crossed; else the fastest sharded
        plan (fsdp-keep only when FSDP_KEEP_MIN_GAIN faster than plain FSDP)."""
        fastest = max(fitting, key=lambda c: c.samples_per_s)
        if self.req.strategy is not None:  # the only one scored
            return dataclasses.replace(fastest, strategy_rule=f"--strategy {self.req.strategy.value} is pinned")
        ddp = next((c for c in fitting if c.strategy is Strategy.ddp), None)
        if ddp is not None:
            top = max(max(c.fastest_sps or 0.0, c.samples_per_s) for c in fitting)
            gain = fastest.samples_per_s / ddp.samples_per_s - 1
            if fastest is ddp or ddp.samples_per_s >= (1 - DDP_PREFERENCE) * top:
                return dataclasses.replace(ddp, strategy_rule="a full replica fits per GPU: DDP (one all-reduce a step)")
            measured = [c for c in fitting if c is not ddp and c.estimate.throughput.calibrated]
            if measured and ddp.estimate.throughput.calibrated:
                won = max(measured, key=lambda c: c.samples_per_s)
                won_gain = won.samples_per_s / ddp.samples_per_s - 1
                if won_gain > DDP_PREFERENCE:
                    return dataclasses.replace(won, strategy_rule=(
                        f"a replica fits, but {won.strategy.value.upper()} measured on this machine (advise bench) is "
                        f"{won_gain:.0%} faster than DDP measured here, more than {DDP_PREFERENCE:.1%}"))
            name = fastest.strategy.value.upper()
            hybrid = max((c for c in fitting if strategy_setup(c.strategy).hybrid), key=lambda c: c.samples_per_s,
                         default=None)
            if hybrid is not None and ddp.estimate.hardware.nodes > 1:
                bound, basis = scaling_error_bound([self.hw.link, self.hw.network_link.kind])  # node's, network's
                hybrid_gain = hybrid.samples_per_s / ddp.samples_per_s - 1
                if hybrid_gain > bound:
                    return dataclasses.replace(hybrid, strategy_rule=(
                        f"a replica fits, but {hybrid.strategy.value.upper()}'s estimate is {hybrid_gain:.0%} faster "
                        f"than DDP across nodes: more than the multi-GPU model's {bound:.0%}, {basis}"))
            return dataclasses.replace(ddp, sharded_gain=gain, strategy_rule=(
                f"a full replica fits per GPU: DDP; {name}'s estimate is {gain:.0%} faster, but sharding's "
                f"communication model is not measured (fit on published DDP rows only)"
                + ("; `advise bench --modes ddp,fsdp` on these GPUs measures both" if fastest.strategy is Strategy.fsdp
                   else "")))
        no_ddp = next((r for r in results if r.strategy is Strategy.ddp), None)
        why = f"{fastest.strategy.value.upper()} is what runs here"
        if isinstance(no_ddp, Infeasible) and no_ddp.kind == "memory":
            why = "a replica does not fit per GPU" + (
                f" (DDP needs ~{no_ddp.closest.memory.device_gib:.0f} GiB of {self.hw.gpu.memory_gib:.0f})"
                if no_ddp.closest is not None else "")
        plain = next((c for c in fitting if c.strategy is Strategy.fsdp), None)
        if (fastest.strategy is Strategy.fsdp_keep and plain is not None
                and plain.samples_per_s >= (1 - FSDP_KEEP_MIN_GAIN) * fastest.samples_per_s):
            return dataclasses.replace(plain, strategy_rule=f"{why}: FSDP")
        return dataclasses.replace(fastest, strategy_rule=f"{why}: {fastest.strategy.value.upper()}")

    def min_gpus(self, strategy: Strategy | None = None, limit: int = 256) -> Choice | None:
        """The fewest GPUs of this kind (hypothetically up to ``limit``) on which the standard setup
        fits with several GPUs (``strategy``, or the fastest)."""
        for n in self.counts(hypothetical_max=limit):
            if n < 2:
                continue
            # what it would take, whatever --strategy is pinned to
            kinds = [strategy] if strategy else [Strategy.ddp, Strategy.fsdp] + ([Strategy.hsdp] if n > 8 else [])
            fits = [c for c in (self.search(n, s, hypothetical=True) for s in kinds) if isinstance(c, Choice)]
            if fits:
                return max(fits, key=lambda c: c.samples_per_s)
        return None
