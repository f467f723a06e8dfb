"""The decision tree A–J of DESIGN.md, walked over the estimator.

The nodes (ids, questions, why, sources, and which answer leads where) are data in
``rules/data/tree.toml``; this module holds, per node id, the function that computes the answer.
Every node visited is recorded as a ``Step`` (node, question, answer, why), so the result is
never a bare answer.

The search behind the nodes (``Planner.search``) asks the estimator for one GPU count and
strategy: "standard" means the precision the setup rules chose (bf16 autocast on compute
capability >= 8.0, else fp16 + GradScaler; both with fp32 master weights), the family's
optimizer, micro-batch down to 1 with gradient accumulation filling the per-GPU batch, and
activation checkpointing only when nothing fits without it. It takes the largest micro-batch that
fits (preferring one that leaves ``search.roomy`` of the memory free), so accumulation is used
only as far as memory needs it. When the global batch is not pinned, the efficient micro-batch
(the smallest within ``search.saturation`` of the best samples/s) decides whether splitting the
base batch over the GPUs would starve them, and then the global batch grows.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.calibration import Calibration
from advisor.config import Precision, Strategy, TrainConfig
from advisor.estimate import Estimate, estimate
from advisor.hardware import HardwareSpec
from advisor.models import ModelSpec
from advisor.plan import scaled_lr
from rules.engine import DATA_DIR, _hours
from advisor.request import Request
from rules.defaults import Defaults

# ---------------------------------------------------------------- the tree as data


class TreeNode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    question: str
    summary: str
    why: str
    source: str
    next: dict[str, str] = Field(default_factory=dict, description="answer key -> next node id")


class Step(BaseModel):
    """One node visited: the contract's decision_path entry (plus the answer key and numbers)."""

    model_config = ConfigDict(extra="forbid")

    node: str
    question: str
    answer: str
    why: str
    key: str = Field(description="the answer's key in the tree data (fits, too-big, yes, no, ddp, ...)")
    data: dict = Field(default_factory=dict)


@lru_cache(maxsize=1)
def load_tree() -> dict[str, TreeNode]:
    raw = tomllib.loads((DATA_DIR / "tree.toml").read_text())
    nodes = {n["id"]: TreeNode(**n) for n in raw["node"]}
    missing = set("ABCDEFGHIJ") - set(nodes)
    if missing or set(nodes) - set("ABCDEFGHIJ"):
        raise RuntimeError(f"tree.toml must define exactly nodes A-J (missing {sorted(missing)})")
    for n in nodes.values():
        for target in n.next.values():
            if target not in nodes:
                raise RuntimeError(f"tree.toml: node {n.id} leads to unknown node {target}")
        if n.id not in NODE_FUNCS:
            raise RuntimeError(f"tree.toml: node {n.id} has no function in rules/tree.py")
    return nodes


# ---------------------------------------------------------------- search over the estimator


@dataclass
class Choice:
    """A configuration that fits, for one GPU count and strategy."""

    gpus: int
    strategy: Strategy
    config: TrainConfig
    estimate: Estimate
    global_batch: int
    grown: bool = False
    rounded: bool = False
    ckpt_needed: bool = False

    @property
    def fits(self) -> bool:
        return True

    @property
    def time_h(self) -> float | None:
        return self.estimate.time_to_train_h


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
        """GPU counts that can be used exactly: 1..per node, then whole nodes."""
        if hypothetical_max:
            per_node = max(self.hw.gpus_per_node, 8)
            return list(range(1, per_node + 1)) + [per_node * k for k in range(2, hypothetical_max // per_node + 1)]
        per_node = self.hw.gpus_per_node
        return list(range(1, per_node + 1)) + [per_node * k for k in range(2, self.hw.nodes + 1)]

    # -- estimates
    def est(self, cfg: TrainConfig, n: int, hypothetical: bool = False, model: ModelSpec | None = None) -> Estimate:
        m = model or self.model
        key = (m.name, n, hypothetical, cfg.micro_batch, cfg.grad_accum, cfg.seq_len, cfg.image_size, cfg.precision,
               cfg.optimizer, cfg.compile, cfg.channels_last, cfg.grad_ckpt, cfg.strategy, cfg.lora_rank)
        hit = self._memo.get(key)
        if hit is None:
            hit = estimate(m, cfg, self.hw_for(n, hypothetical), dataset_size=self.req.dataset_size,
                           epochs=self.req.epochs, calibration=self.cal)
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
               hypothetical: bool = False, model: ModelSpec | None = None) -> Choice | Infeasible:
        """The standard configuration for ``n`` GPUs with ``strategy``, or why there is none."""
        req = self.req
        base = base or self.base
        exact = req.batch_size is not None or req.keep_global_batch
        target = req.batch_size or self.base_batch
        pin_micro = req.micro_batch
        pin_accum = None if relax_accum else req.grad_accum
        ckpts = [base.grad_ckpt] if req.grad_ckpt is not None else [False, True]
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
            return Choice(n, strategy, cfg, e, global_batch=share * n, grown=grown, rounded=rounded,
                          ckpt_needed=ckpt and req.grad_ckpt is None)
        if batch_reason:
            return Infeasible(n, strategy, "batch", batch_reason, closest)
        dev = f"{closest.memory.device_gib:.1f} GiB" if closest else "more than the GPU has"
        usable = self.hw.gpu.memory_gib * self.cal.fit_fraction
        return Infeasible(n, strategy, "memory", f"the smallest configuration needs ~{dev} per GPU; "
                          f"{usable:.1f} of {self.hw.gpu.memory_gib:.0f} GiB are usable", closest)

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


# ---------------------------------------------------------------- the walk


@dataclass
class Measure:
    """One way node H (or a missed deadline) could be closed, with its estimate."""

    name: str
    summary: str
    flags: list[str]
    time_h: float | None
    meets: bool | None
    fits: bool = True
    gpus: int = 1
    strategy: str = "single"
    samples_per_s: float | None = None
    peak_gib: float | None = None
    device_gib: float | None = None
    model: str | None = None
    source: str = ""
    choice: "Choice | None" = None
    epochs: float | None = None
    hypothetical: bool = False


@dataclass
class TreeContext:
    planner: Planner
    one: Choice | Infeasible | None = None  # node B's single-GPU search
    choice: Choice | Infeasible | None = None  # what the walk ends with
    end: str = "A"
    tree_strategy: str = "single"
    min_fit: Choice | None = None  # fewest GPUs that fit sharded (node C)
    rows: list[Choice | Infeasible] = field(default_factory=list)  # G/I candidates
    measures: list[Measure] = field(default_factory=list)  # H / missed deadline
    deadline_missed: bool = False
    lr: dict = field(default_factory=dict)

    @property
    def req(self) -> Request:
        return self.planner.req

    @property
    def deadline(self) -> float | None:
        return self.planner.req.deadline_h


@dataclass
class Answer:
    key: str
    answer: str
    why: str
    data: dict = field(default_factory=dict)


def _gib(x: float) -> str:
    return f"{x:.1f} GiB"


def _precision_text(cfg: TrainConfig) -> str:
    return {
        Precision.bf16: "bf16 autocast with fp32 master weights",
        Precision.fp16: "fp16 autocast + GradScaler with fp32 master weights",
        Precision.pure_bf16: "pure bf16 (weights and states in bf16)",
        Precision.fp32: "fp32",
        Precision.tf32: "tf32 matmuls, fp32 storage",
    }[cfg.precision]


def describe(ch: Choice) -> str:
    c = ch.config
    parts = [f"micro-batch {c.micro_batch} x accumulation {c.grad_accum}" + (f" x {ch.gpus} GPUs" if ch.gpus > 1 else "")
             + f" = global batch {ch.global_batch}", _precision_text(c), c.optimizer.value]
    if c.lora_rank:
        parts.append(f"LoRA rank {c.lora_rank}")
    if c.grad_ckpt:
        parts.append("activation checkpointing")
    return ", ".join(parts)


def _mem_text(e: Estimate) -> str:
    m = e.memory
    return f"peak {_gib(m.peak_gib)} allocated, ~{_gib(m.device_gib)} in nvidia-smi, of {m.gpu_memory_gib:.0f} GiB"


def _time_text(e: Estimate) -> str:
    t = e.time_to_train_h
    return f"{_hours(t)} to train" if t is not None else f"{e.throughput.samples_per_s:,.1f} samples/s"


def node_A(ctx: TreeContext) -> Answer:
    p = ctx.planner
    hw = p.hw
    where = "detected" if hw.detected else "assumed: no GPU detected" if hw.assumed else "as named"
    work = []
    if ctx.req.dataset_size:
        work.append(f"{ctx.req.dataset_size:,} samples x {ctx.req.epochs:g} epochs")
    if ctx.deadline:
        work.append(f"deadline {_hours(ctx.deadline)}")
    return Answer("start", f"{p.model.name} ({p.model.params / 1e6:,.0f}M parameters, {p.model.family}) on "
                  f"{hw.total_gpus}x {hw.gpu.name} ({hw.gpu.memory_gib:.0f} GiB, {where})"
                  + (f"; {', '.join(work)}" if work else "; no dataset size or deadline given"),
                  load_tree()["A"].why, {"gpus_at_hand": hw.total_gpus})


def node_B(ctx: TreeContext) -> Answer:
    p = ctx.planner
    ch = p.search(1, Strategy.single, relax_accum=True)
    ctx.one = ch
    if isinstance(ch, Choice):
        ckpt = ("checkpointing needed: without it no micro-batch fits" if ch.ckpt_needed
                else "no checkpointing needed" if not ch.config.grad_ckpt else "checkpointing pinned")
        return Answer("fits", f"yes: {describe(ch)}; {_mem_text(ch.estimate)}",
                      f"Standard setup ({ckpt}); micro-batch chosen as the smallest within "
                      f"{p.defaults.search.saturation:.0%} of the best samples/s that fits.",
                      {"peak_gib": ch.estimate.memory.peak_gib, "device_gib": ch.estimate.memory.device_gib})
    e = ch.closest
    why = "Compromises (pure-bf16, 8-bit optimizer, LoRA, CPU offload) are not assumed; see alternatives."
    if e is not None:
        m = e.memory
        why = (f"At micro-batch {e.config.micro_batch}{' with checkpointing' if e.config.grad_ckpt else ''}: weights "
               f"{_gib(m.weights_gib)} + gradients {_gib(m.gradients_gib)} + optimizer {_gib(m.optimizer_gib)} + "
               f"activations {_gib(m.activations_gib)} + other {_gib(m.other_gib)}. " + why)
    return Answer("too-big", f"no: {ch.reason}", why,
                  {"device_gib": e.memory.device_gib if e else None})


def node_C(ctx: TreeContext) -> Answer:
    p = ctx.planner
    ctx.min_fit = p.min_gpus(Strategy.fsdp)
    need = ctx.min_fit.gpus if ctx.min_fit else None
    need_text = f"at least {need}x {p.hw.gpu.name} sharded with FSDP" if need else "more than 64 GPUs of this kind"
    pinned_single = ctx.req.strategy is Strategy.single
    if p.available < 2 or pinned_single or need is None or need > p.available:
        ctx.choice = ctx.one
        ctx.end = "C"
        have = "--strategy single is pinned" if pinned_single else f"{p.available} at hand"
        return Answer("unavailable", f"it needs {need_text}; {have}: does not fit with the GPUs given",
                      "No standard configuration runs here; the alternatives say what would (a memory compromise "
                      "on one GPU, or more GPUs).", {"min_gpus": need})
    return Answer("several", f"yes: {need_text}; {p.available} at hand", load_tree()["C"].why, {"min_gpus": need})


def _pick_by_deadline(ctx: TreeContext, rows: list[Choice]) -> tuple[Choice, str]:
    """The fewest GPUs meeting the deadline; all of them when there is none; the fastest when none meets it."""
    if ctx.deadline is None:
        return rows[-1], "no deadline: all GPUs at hand (the fastest; sharding over more GPUs also leaves more headroom)"
    for ch in rows:
        if ch.time_h is not None and ch.time_h <= ctx.deadline:
            return ch, f"the fewest GPUs that meet the {_hours(ctx.deadline)} deadline"
    ctx.deadline_missed = True
    best = max(rows, key=lambda c: c.estimate.throughput.samples_per_s)
    return best, f"no count at hand meets the {_hours(ctx.deadline)} deadline; the fastest is taken"


def _rows_text(rows: list[Choice | Infeasible]) -> str:
    out = []
    for r in rows:
        if isinstance(r, Choice):
            t = r.time_h
            out.append(f"{r.gpus}: {_hours(t) if t is not None else f'{r.estimate.throughput.samples_per_s:,.0f}/s'}"
                       f" ({r.estimate.throughput.scaling_efficiency:.0%} eff.)")
        else:
            out.append(f"{r.gpus}: {'no fit' if r.kind == 'memory' else 'batch does not split'}")
    return "; ".join(out)


def node_I(ctx: TreeContext) -> Answer:
    p = ctx.planner
    counts = [n for n in p.counts() if n >= 2]
    ddp = [p.search(n, Strategy.ddp) for n in counts]
    if any(isinstance(r, Choice) for r in ddp):
        strategy, rows = Strategy.ddp, ddp
        lead = "yes: a full replica fits per GPU: DDP"
    else:
        strategy, rows = Strategy.fsdp, [p.search(n, Strategy.fsdp) for n in counts]
        lead = "no: a replica does not fit per GPU: FSDP (full sharding)"
    ctx.rows = rows
    feasible = [r for r in rows if isinstance(r, Choice)]
    if not feasible:
        ctx.choice = rows[-1] if rows else ctx.one
        ctx.end = "I"
        reason = rows[-1].reason if rows else "no GPU counts to try"
        return Answer("none", f"no configuration fits on the {p.available} GPUs at hand: {reason}",
                      "See the alternatives for compromises or more GPUs.")
    ch, rule = _pick_by_deadline(ctx, feasible)
    ctx.choice, ctx.tree_strategy = ch, strategy.value
    return Answer(strategy.value, f"{lead} on {ch.gpus} GPUs ({rule}); {describe(ch)}; {_mem_text(ch.estimate)}; {_time_text(ch.estimate)}",
                  f"By GPU count: {_rows_text(rows)}. " + load_tree()["I"].why,
                  {"gpus": ch.gpus, "strategy": strategy.value})


def node_D(ctx: TreeContext) -> Answer:
    ch = ctx.one
    t = ch.time_h
    if ctx.deadline is None:
        return Answer("yes", "yes: no deadline given" + (f" (one GPU: {_hours(t)})" if t is not None else ""),
                      "Without a deadline one GPU is enough when the model fits on it.")
    if t <= ctx.deadline:
        return Answer("yes", f"yes: {_hours(t)} on one GPU <= deadline {_hours(ctx.deadline)}",
                      f"{ch.estimate.throughput.samples_per_s:,.1f} samples/s x {ctx.req.dataset_size:,} samples x {ctx.req.epochs:g} epochs"
                      + (" (with torch.compile, which repays its compile time over this run)." if ch.config.compile else "."),
                      {"time_to_train_h": t})
    return Answer("no", f"no: {_hours(t)} on one GPU > deadline {_hours(ctx.deadline)} (over by {_hours(t - ctx.deadline)}, "
                  f"{(t - ctx.deadline) / ctx.deadline:.0%})",
                  f"{ch.estimate.throughput.samples_per_s:,.1f} samples/s with the standard setup"
                  + (" (with torch.compile, which repays its compile time over this run)." if ch.config.compile else "."),
                  {"time_to_train_h": t})


def node_E(ctx: TreeContext) -> Answer:
    ctx.choice, ctx.end, ctx.tree_strategy = ctx.one, "E", "single"
    return Answer("single", f"single GPU: {describe(ctx.one)}", load_tree()["E"].why)


def node_F(ctx: TreeContext) -> Answer:
    p = ctx.planner
    if ctx.req.strategy is Strategy.single:
        return Answer("no", "no: --strategy single is pinned", "A pinned flag is never overridden.")
    if p.available > 1:
        src = "detected" if p.hw.detected else "given"
        return Answer("yes", f"yes: {p.available} GPUs ({src})", load_tree()["F"].why, {"gpus": p.available})
    return Answer("no", f"no: 1 GPU {'detected' if p.hw.detected else 'given'}",
                  "Give --gpus N (and --nodes) to plan for more.")


def node_G(ctx: TreeContext) -> Answer:
    p = ctx.planner
    counts = [n for n in p.counts() if n >= 2]
    rows = [p.best_multi(n) for n in counts]
    ctx.rows = rows
    feasible = [r for r in rows if isinstance(r, Choice)]
    if not feasible:
        ctx.choice, ctx.end = ctx.one, "G"
        return Answer("none", "no multi-GPU configuration is possible: " + "; ".join({r.reason for r in rows}),
                      "The single-GPU plan is kept.")
    ch, rule = _pick_by_deadline(ctx, feasible)
    ctx.choice, ctx.tree_strategy = ch, ch.strategy.value
    if ctx.deadline_missed:
        deadline_measures(ctx, ch)
    return Answer(ch.strategy.value, f"{ch.strategy.value.upper()} on {ch.gpus} GPUs: {_time_text(ch.estimate)} "
                  f"({rule}; scaling efficiency {ch.estimate.throughput.scaling_efficiency:.0%})",
                  f"By GPU count: {_rows_text(rows)}. " + load_tree()["G"].why, {"gpus": ch.gpus})


def node_H(ctx: TreeContext) -> Answer:
    ch = ctx.one
    ctx.choice, ctx.end, ctx.tree_strategy = ch, "H", "single"
    deadline_measures(ctx, ch)
    miss = ch.time_h - ctx.deadline
    closing = [m for m in ctx.measures if m.meets]
    close = ("; would close it: " + ", ".join(f"{m.name} ({_hours(m.time_h)})" for m in closing)) if closing else \
        "; no single measure closes it"
    return Answer("faster", f"missed by {_hours(miss)} ({miss / ctx.deadline:.0%}): {_hours(ch.time_h)} vs {_hours(ctx.deadline)}{close}",
                  "Estimated: " + "; ".join(f"{m.name}: {m.summary}" for m in ctx.measures), {"missed_h": miss})


def deadline_measures(ctx: TreeContext, ch: Choice) -> None:
    """Ways to close a missed deadline, each with an estimate (node H; G when even all GPUs miss)."""
    from advisor.catalog import catalog_model, catalog_names

    p, req, dl = ctx.planner, ctx.req, ctx.deadline
    out: list[Measure] = []
    cfg = ch.config
    t0 = ch.time_h

    def meas(name: str, summary: str, flags: list[str], alt: Choice, source: str = "", model: str | None = None,
             hypothetical: bool = False) -> None:
        e = alt.estimate
        t = e.time_to_train_h
        out.append(Measure(name, summary, flags, t, t is not None and t <= dl, gpus=alt.gpus, strategy=alt.strategy.value,
                           samples_per_s=e.throughput.samples_per_s, peak_gib=e.memory.peak_gib,
                           device_gib=e.memory.device_gib, model=model, source=source, choice=alt,
                           hypothetical=hypothetical))

    def variant(update: dict) -> Choice:
        c2 = cfg.model_copy(update=update)
        return Choice(ch.gpus, ch.strategy, c2, p.est(c2, ch.gpus), ch.global_batch, ch.grown, ch.rounded, ch.ckpt_needed)

    if cfg.precision in (Precision.fp32, Precision.tf32):
        amp = Precision.bf16 if p.hw.gpu.supports_bf16 else Precision.fp16
        alt = p.search(ch.gpus, ch.strategy, base=p.base.model_copy(update={"precision": amp}))
        if isinstance(alt, Choice):
            meas(f"AMP ({amp.value})", f"{amp.value} autocast: {_hours(alt.time_h)} ({t0 / alt.time_h:.1f}x faster)",
                 ["--precision", amp.value], alt, "Micikevicius et al. 2018")
    if not cfg.compile:
        alt = variant({"compile": True})
        meas("torch.compile", f"{_hours(alt.time_h)} ({(1 - alt.time_h / t0):.0%} less, plus a few minutes of compiling)",
             ["--compile"], alt, "PyTorch 2 torch.compile (inductor)")
    if p.model.family == "cnn" and not cfg.channels_last:
        alt = variant({"channels_last": True})
        meas("channels_last", f"{_hours(alt.time_h)}", ["--channels-last"], alt,
             "PyTorch channels_last tutorial (22% on ResNet-50 with AMP on V100)")
    # smaller models of the same family from the catalog
    if p.model.source == "catalog":
        smaller = []
        for name in catalog_names():
            try:
                m = catalog_model(name)
            except Exception:
                continue
            if m.family == p.model.family and m.params < p.model.params and m.name != p.model.name:
                smaller.append(m)
        for m in sorted(smaller, key=lambda m: -m.params)[:2]:
            alt = p.search(ch.gpus, ch.strategy, base=cfg.model_copy(update={"micro_batch": 1, "grad_accum": 1}), model=m)
            if isinstance(alt, Choice):
                meas(f"smaller model: {m.name}", f"{m.params / 1e6:,.0f}M parameters: {_hours(alt.time_h)}",
                     ["--model", m.name], alt, model=m.name)
    # more GPUs of this kind (hypothetical beyond what is at hand)
    for n in p.counts(hypothetical_max=64):
        if n <= ch.gpus:
            continue
        alt = p.best_multi(n, hypothetical=True)
        if isinstance(alt, Choice) and alt.time_h is not None and alt.time_h <= dl:
            meas(f"{n} GPUs", f"{alt.strategy.value.upper()} on {n}x {p.hw.gpu.name}: {_hours(alt.time_h)}",
                 ["--gpus", str(n)], alt, hypothetical=n > p.available)
            break
    # less work
    if req.epochs and t0:
        fit_epochs = math.floor(req.epochs * dl / t0 * 10) / 10
        if fit_epochs > 0:
            e = ch.estimate
            out.append(Measure("fewer epochs", f"{fit_epochs:g} of {req.epochs:g} epochs fit in the deadline",
                               ["--epochs", f"{fit_epochs:g}"], t0 * fit_epochs / req.epochs, True, gpus=ch.gpus,
                               strategy=ch.strategy.value, samples_per_s=e.throughput.samples_per_s,
                               peak_gib=e.memory.peak_gib, device_gib=e.memory.device_gib, choice=ch, epochs=fit_epochs))
    ctx.measures = out


def node_J(ctx: TreeContext) -> Answer:
    ctx.end = "J"
    lr = lr_plan(ctx.planner, ctx.choice)
    ctx.lr = lr
    return Answer(lr["lr_scaling"], f"lr {lr['lr']:.3g}: {lr['text']}; warmup {lr['warmup_steps']} steps ({lr['warmup_rule']})",
                  load_tree()["J"].why + f" Base: {lr['base_lr']:g} at batch {lr['base_batch']}.", lr)


NODE_FUNCS: dict[str, Callable[[TreeContext], Answer]] = {
    "A": node_A, "B": node_B, "C": node_C, "D": node_D, "E": node_E,
    "F": node_F, "G": node_G, "H": node_H, "I": node_I, "J": node_J,
}


def walk(ctx: TreeContext) -> list[Step]:
    tree = load_tree()
    steps: list[Step] = []
    node_id: str | None = "A"
    while node_id is not None:
        node = tree[node_id]
        ans = NODE_FUNCS[node_id](ctx)
        steps.append(Step(node=node_id, question=node.question, answer=ans.answer, why=ans.why, key=ans.key, data=ans.data))
        ctx.end = node_id
        node_id = node.next.get(ans.key)
    if not ctx.lr and isinstance(ctx.choice, Choice):
        ctx.lr = lr_plan(ctx.planner, ctx.choice)
    return steps


# ---------------------------------------------------------------- node J's arithmetic


def lr_plan(p: Planner, ch: Choice | Infeasible | None) -> dict:
    """Learning rate for the global batch (advisor.plan.scaled_lr) and warmup steps."""
    req, w = p.req, p.defaults.warmup
    gb = ch.global_batch if isinstance(ch, Choice) else (req.batch_size or p.base_batch)
    rule = req.lr_scaling
    lr = scaled_lr(p.base_lr, p.base_batch, gb, rule)
    ratio = gb / p.base_batch
    if rule == "none" or ratio == 1:
        text = f"base lr kept (global batch {gb}" + (f" = base batch)" if ratio == 1 else f", --lr-scaling none)")
    else:
        text = f"{rule} scaling: {p.base_lr:g} x {'sqrt(' if rule == 'sqrt' else ''}{gb}/{p.base_batch}{')' if rule == 'sqrt' else ''}"
    steps_epoch = total = None
    if req.dataset_size and req.epochs:
        steps_epoch = max(1, math.ceil(req.dataset_size / gb))
        total = max(1, math.ceil(steps_epoch * req.epochs))
        by_frac = math.ceil(w.warmup_fraction * total)
        by_epochs = math.ceil(w.warmup_epochs * steps_epoch)
        warm = max(min(by_frac, by_epochs), min(w.min_steps, total))
        warm_rule = (f"{w.warmup_fraction:.0%} of {total:,} steps" if by_frac <= by_epochs
                     else f"{w.warmup_epochs:g} epochs of {steps_epoch:,} steps (Goyal et al. 2017)")
        if warm == min(w.min_steps, total) and warm > min(by_frac, by_epochs):
            warm_rule = f"at least {w.min_steps} steps"
    else:
        warm = w.unknown_steps
        warm_rule = f"{w.unknown_steps} steps by default: give --dataset-size and --epochs to size it as {w.warmup_fraction:.0%} of the run"
    return {"lr": lr, "base_lr": p.base_lr, "base_batch": p.base_batch, "global_batch": gb, "lr_scaling": rule,
            "ratio": ratio, "text": text, "warmup_steps": warm, "warmup_rule": warm_rule,
            "total_steps": total, "steps_per_epoch": steps_epoch}
