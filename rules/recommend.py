"""``Recommendation``: the answer of ``advise``, as DESIGN.md's JSON contract, plus the ``Plan``.

The JSON (``Recommendation.to_json()``) has the contract's keys — ``recommendation``,
``estimate``, ``decision_path``, ``rules_fired``, ``alternatives``, ``warnings`` — and more:
``plan`` (what ``advise launch`` runs), ``scaling`` (throughput and time-to-train for 1..N
GPUs), ``rules_evaluated`` (every rule and whether it fired) and ``defaults_applied``.
``str(rec)`` and the notebook repr are a plain-text report; the CLI draws the rich one.
"""

import shlex
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from advisor.setup import SETUPS
from advisor.estimate import Estimate
from advisor.plan import Plan
from advisor.setup.checkpointing import checkpointing_words
from advisor.units import format_hours
from rules.engine import RuleTrace


class RecommendationCore(BaseModel):
    """The contract's ``recommendation`` object (and a few more choices)."""

    model_config = ConfigDict(extra="forbid")

    strategy: str
    gpus: int = Field(description="GPUs used in total")
    nodes: int
    micro_batch: int
    grad_accum: int
    global_batch: int
    precision: str
    compile: bool
    grad_ckpt: bool
    grad_ckpt_every: int | None = Field(None, exclude_if=lambda v: v is None,
                                        description="selective checkpointing: every K-th block (--grad-ckpt-every)")
    lr: float
    lr_scaling: str
    warmup_steps: int
    num_workers: int
    fits: bool
    command: str = Field(description="the `advise launch ...` command line that reproduces this plan")
    # more than the contract
    gpu: str
    optimizer: str
    channels_last: bool
    lora_rank: int | None = None
    seq_len: int | None = None
    image_size: int | None = None
    sync_batchnorm: bool = False
    pin_memory: bool = True
    prefetch_factor: int = 2
    base_lr: float
    base_batch: int
    task: str = Field("", description="the task whose learning-rate recipe applies (--task, inferred from the "
                      "workload, or the family's default)")
    task_rule: str = Field("", description="why that task was taken")
    task_flag: str = Field("", description="the flag that overrides the task taken")
    batch_rule: str = Field("", description="how the global batch was decided: pinned, the recipe's, or planned "
                            "per GPU count for pretraining inside the family's published range")
    batch_planned: bool = Field(False, description="the planner chose the global batch (pretraining, no --batch-size)")
    batch_held: int | None = Field(None, description="the batch a held plan keeps (--batch-size, the recipe's, or "
                                   "where a planned batch starts)")
    batch_limit: int | None = Field(None, description="the family's published limit a planned batch stays within")
    total_steps: int | None = None
    time_to_train_h: float | None = None
    deadline_h: float | None = None
    compromise: str | None = Field(None, description="node H's memory compromise: no-accumulation or names of "
                                   "advisor.setup.COMPROMISES, '+'-joined where it combines them; None for the standard setup")
    gives_up: str | None = Field(None, description="what the compromise gives up")
    compromise_rule: str | None = Field(None, description="which part of node H's policy chose the compromise "
                                                          "(exact before lossy unless > 2x slower; batch changes last)")
    risk_rule: str | None = Field(None, description="which part of node H's risk rule chose the compromise within its "
                                  "tier (less numerical risk unless > 10% slower or the deadline needs the faster one)")
    numerical_risk: str | None = Field(None, description="the compromise's numerical-risk class (rules.compromise."
                                       "RISK_CLASSES: none, quantized-states, compensated-bf16, no-global-clip, "
                                       "uncompensated-bf16); None for the standard setup")
    standard_verdict: str | None = Field(None, description="why the standard setup does not fit, when it does not")
    optimizer_in_backward: bool = False
    cpu_offload: bool = False


class PathStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node: str
    question: str
    answer: str
    why: str
    key: str = Field("", description="the answer's key in rules/data/tree.toml")


class FiredRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    why: str
    name: str = ""
    level: Literal["info", "warning"] = "info"
    phase: str = ""


class Cost(BaseModel):
    model_config = ConfigDict(extra="forbid")

    memory: str = ""
    speed: str = ""
    accuracy_risk: str = ""


class Alternative(BaseModel):
    """Another way to run it, with its estimate and its cost."""

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: Literal["compromise", "scale-out", "speed", "smaller-model", "workload", "offload", "batch"]
    summary: str
    fits: bool | None = None
    gpus: int = 1
    strategy: str = "single"
    peak_gib: float | None = None
    device_gib: float | None = None
    samples_per_s: float | None = None
    time_to_train_h: float | None = None
    meets_deadline: bool | None = None
    cost: Cost = Field(default_factory=Cost)
    source: str = ""
    command: str | None = Field(None, description="`advise launch` command for it (None where cardwise cannot launch it)")


class ScalingRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpus: int
    strategy: str
    fits: bool
    micro_batch: int | None = None
    grad_accum: int | None = None
    global_batch: int | None = None
    lr: float | None = Field(None, description="the learning rate at this row's global batch (a planned batch "
                             "differs by count: issue 37)")
    peak_gib: float | None = None
    device_gib: float | None = None
    samples_per_s: float | None = None
    step_s: float | None = None
    time_to_train_h: float | None = None
    scaling_efficiency: float | None = Field(None, description="samples/s per GPU over the baseline row's (the best "
                                             "plan on the smallest count that fits; one GPU when it fits), at most the "
                                             "row's own throughput.scaling_efficiency unless measured "
                                             "(rules.policy.row_efficiency)")
    speedup: float | None = Field(None, description="samples/s over the baseline row's")
    measured: bool = Field(False, description="samples/s calibrated by a measurement on this machine (advise bench); "
                           "an estimate's efficiency never reads a bare 100% (advisor.units.format_efficiency)")
    baseline: bool = Field(False, description="the row efficiency and speedup compare against")
    chosen: bool = False
    note: str = ""
    changed: list[str] = Field(default_factory=list, description="what this row changed besides the GPU count, "
                               "against the baseline row (checkpointing, micro-batch, accumulation, compile)")


class PolicySummary(BaseModel):
    """How the GPU count and plan were chosen (docs/design.md "Decision policy"), and from how many candidates."""

    model_config = ConfigDict(extra="forbid")

    rule: str = Field(description="the policy line: which rule chose the plan, with its numbers")
    kind: Literal["single", "deadline", "deadline-missed", "efficiency", "compromise", "pinned", "none"]
    deadline_h: float | None = None
    margin: float = Field(description="--margin: the deadline is planned less this fraction")
    effective_deadline_h: float | None = Field(None, description="deadline x (1 - margin)")
    min_scaling_efficiency: float
    baseline_gpus: int | None = Field(None, description="the smallest count that fits: efficiency's reference")
    needed_gpus: int | None = Field(None, description="GPUs of this kind that would meet a missed deadline (hypothetical)")
    counts_compared: list[int] = Field(default_factory=list, description="GPU counts scored at hand")
    candidates_scored: int = Field(0, description="configurations the planner scored at hand (Recommendation.candidates)")
    deadline_rate: str | None = Field(None, description="with a deadline: the samples/s the deadline test counts on "
                                      "(rules.policy.DEADLINE_RATE: without gains measured only on another GPU kind)")
    scaling: Literal["weak", "fixed"] = Field("fixed", description="how counts were compared: weak (each at its own "
                                               "planned global batch: pretraining) or fixed (one global batch)")
    batch_note: str | None = Field(None, description="when a small per-GPU batch caps scaling: the batch that lifts the "
                                   "cap, with its lr; or a missed deadline at the family's batch limit")
    strategy_rule: str | None = Field(None, description="why this strategy at the count picked (rules.planner."
                                      "Planner.best: DDP whenever a replica fits; sharding when memory needs it or a "
                                      "measurement on this machine says it wins)")


class RuleSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    phase: str
    fired: bool
    blocked_by_pin: list[str] = Field(default_factory=list)


class Recommendation(BaseModel):
    """What to run and why. ``plan`` is what ``advise launch`` runs."""

    model_config = ConfigDict(extra="forbid")

    recommendation: RecommendationCore
    estimate: Estimate
    decision_path: list[PathStep]
    rules_fired: list[FiredRule]
    alternatives: list[Alternative] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    plan: Plan
    scaling: list[ScalingRow] = Field(default_factory=list)
    rules_evaluated: list[RuleSummary] = Field(default_factory=list)
    defaults_applied: list[str] = Field(default_factory=list)
    policy: PolicySummary | None = None

    _trace: list[RuleTrace] = PrivateAttr(default_factory=list)
    _candidates: list = PrivateAttr(default_factory=list)

    @property
    def candidates(self) -> list:
        """Every configuration the planner scored at hand (``rules.planner.Candidate``): config,
        estimate, time-to-train, fits, why rejected. The recommendation is the policy's pick among them."""
        return self._candidates

    @property
    def trace(self) -> list[RuleTrace]:
        """Every rule evaluated, with each condition's actual value."""
        return self._trace

    @property
    def path(self) -> list[str]:
        return [s.node for s in self.decision_path]

    @property
    def fired(self) -> list[str]:
        return [r.id for r in self.rules_fired]

    def to_json(self, indent: int | None = 2) -> str:
        return self.model_dump_json(indent=indent)

    # ---- readable forms (notebooks, print)
    def __repr__(self) -> str:
        r = self.recommendation
        t = f", {format_hours(r.time_to_train_h)}" if r.time_to_train_h is not None else ""
        fit = "fits" if r.fits else "DOES NOT FIT"
        return (f"Recommendation({r.strategy} on {r.gpus}x {r.gpu}, micro-batch {r.micro_batch} x accum {r.grad_accum} "
                f"= {r.global_batch}, {r.precision}, {fit}{t}; path {'>'.join(self.path)})")

    def __str__(self) -> str:
        return render_text(self)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython / Jupyter
        p.text(repr(self) if cycle else str(self))


def render_text(rec: Recommendation) -> str:
    r, e = rec.recommendation, rec.estimate
    m, t = e.memory, e.throughput
    lines = [f"cardwise: {e.model.name} ({e.model.params / 1e6:,.0f}M params) on {e.hardware.count}x {e.hardware.gpu}"]
    lines.append("")
    lines.append("decision path:")
    for s in rec.decision_path:
        lines.append(f"  {s.node}  {s.question}")
        lines.append(f"       -> {s.answer}")
    lines.append("")
    fit = "fits" if r.fits else "DOES NOT FIT"
    if r.standard_verdict:
        lines.append(f"standard setup: {r.standard_verdict}")
    lines.append(f"recommendation: {r.strategy} on {r.gpus}x {r.gpu} ({fit})"
                 + (f", COMPROMISE {r.compromise}: gives up {r.gives_up}" if r.compromise else ""))
    if rec.policy is not None:
        lines.append(f"  policy: {rec.policy.rule}")
    if r.compromise_rule:
        lines.append(f"  compromise policy: {r.compromise_rule}")
    if r.risk_rule:
        lines.append(f"  numerical risk: {r.numerical_risk}; {r.risk_rule}")
    if rec.policy is not None and rec.policy.batch_note:
        lines.append(f"  batch: {rec.policy.batch_note}")
    lines.append(f"  micro-batch {r.micro_batch} x accumulation {r.grad_accum} x {r.gpus} GPUs = global batch {r.global_batch}"
                 + (f" (planned for pretraining, within the family's limit {r.batch_limit:,})" if r.batch_planned
                    and r.batch_limit else ""))
    if r.task_rule:
        lines.append(f"  task {r.task}: {r.task_rule}" + (f" ({r.task_flag} overrides)" if r.task_flag != r.task_rule else ""))
    lines.append(f"  precision {r.precision}, optimizer {r.optimizer}, compile {'on' if r.compile else 'off'}, "
                 f"checkpointing {checkpointing_words(r)}"
                 + (", channels_last" if r.channels_last else "")
                 + (", SyncBatchNorm" if r.sync_batchnorm else "") + (f", LoRA r{r.lora_rank}" if r.lora_rank else ""))
    lines.append(f"  lr {r.lr:.3g} ({r.task + ' recipe, ' if r.task else ''}{r.lr_scaling} from {r.base_lr:g} at {r.base_batch}), "
                 f"warmup {r.warmup_steps} steps, "
                 f"{r.num_workers} dataloader workers per GPU")
    lines.append(f"  memory: peak {m.peak_gib:.1f} GiB allocated, ~{m.device_gib:.1f} GiB in nvidia-smi, of {m.gpu_memory_gib:.0f} GiB per GPU")
    speed = f"  speed: {t.samples_per_s:,.1f} samples/s, {t.step_s:.3g} s/step, MFU {t.mfu:.0%}"
    if r.time_to_train_h is not None:
        speed += f", time to train {format_hours(r.time_to_train_h)}"
    lines.append(speed)
    if rec.warnings:
        lines.append("")
        lines.append("warnings:")
        lines += [f"  ! {w}" for w in rec.warnings]
    if rec.alternatives:
        lines.append("")
        lines.append("alternatives:")
        for a in rec.alternatives:
            tail = f" [{'fits' if a.fits else 'does not fit'}]" if a.fits is not None else ""
            lines.append(f"  - {a.name}: {a.summary}{tail}")
    lines.append("")
    lines.append("rules fired:")
    lines += [f"  {f.id}: {f.why}" for f in rec.rules_fired]
    lines.append("")
    lines.append(f"launch: {r.command}")
    return "\n".join(lines)


def launch_command(req, *, config, strategy: str, gpu_arg: str | None, gpus_per_node: int, nodes: int,
                   global_batch: int, base_lr: float, base_batch: int, no_accumulation: bool = False,
                   reads_tokens: bool = True, reads_images: bool = True) -> str:
    """The `advise launch` argv (a shell-quoted string) that pins every choice of a plan: the
    request with the chosen configuration written over it (``Request.to_argv``). A plan that must
    keep accumulation at 1 (``no_accumulation``) pins --grad-accum 1, so its plan says so too.
    ``reads_tokens``/``reads_images``: whether the model's input is sized by --seq-len/--image-size;
    a flag that does not apply is left out (the rules flag.seq-len-not-text/flag.image-size-not-vision say so)."""
    pins = dict(gpu=gpu_arg, gpus=gpus_per_node, nodes=nodes, strategy=strategy, micro_batch=config.micro_batch,
                batch_size=global_batch, seq_len=config.seq_len, image_size=config.image_size,
                precision=config.precision, optimizer=config.optimizer, compile=config.compile or None,
                channels_last=config.channels_last or None, grad_ckpt=config.grad_ckpt or None,
                base_lr=base_lr, base_batch=base_batch,
                **{k: v for s in SETUPS for k, v in s.pins(config).items()},  # the flags of its ways of training
                # accumulation follows from batch / (micro-batch x GPUs) unless the user pinned it
                grad_accum=config.grad_accum if req.grad_accum is not None or no_accumulation else None)
    if nodes == 1:
        pins["network"] = None  # between nodes only (the rule flag.network-one-node says so when it was given)
    if not reads_tokens:
        pins["seq_len"] = None
    if not reads_images:
        pins["image_size"] = None
    pinned = req.model_copy(update=pins)
    return shlex.join(["advise", "launch", *pinned.to_argv(skip={"alternatives", "keep_global_batch"})])
