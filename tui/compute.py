"""The wizard's calls into the layers below, as plain functions over plain data.

Workers call these from threads; nothing here touches a widget or imports textual. What the
screens show is what ``advisor`` and ``rules`` compute: this module only gathers it into view
objects (``ModelInfo``, ``Preview``, ``RecView``) and adds the 1..N GPU table, which is the
estimator run once per GPU count with the recommended configuration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.errors import UserError
from advisor.hardware import HardwareSpec, Machine
from advisor.plan import ModelRef, Plan
from tui.state import WizardState


# ---------------------------------------------------------------- model
@dataclass(frozen=True)
class ModelInfo:
    ref: ModelRef
    name: str
    params: int
    family: str
    task: str
    description: str = ""
    default_seq_len: int | None = None
    default_image_size: int | None = None

    @property
    def is_vision(self) -> bool:
        return self.family in ("cnn", "vit")

    @property
    def is_catalog(self) -> bool:
        return self.ref.name is not None


def human_count(n: int) -> str:
    """1_234_567_890 -> '1.23B', 124_439_808 -> '124M'."""
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            v = n / div
            return f"{v:.3g}{unit}" if v < 100 else f"{v:.0f}{unit}"
    return str(n)


def catalog_rows() -> list[ModelInfo]:
    """Every catalog model, with its size (no torch: the catalog is data)."""
    from advisor.catalog import catalog_model, catalog_names

    return [_info(ModelRef(name=n), catalog_model(n)) for n in catalog_names()]


def resolve_model(ref: ModelRef) -> ModelInfo:
    """The model ``ref`` names; ``--module`` traces it (imports torch: call from a worker)."""
    from advisor.sources import resolve_model as resolve

    return _info(ref, resolve(ref))


def _info(ref: ModelRef, spec) -> ModelInfo:
    return ModelInfo(ref=ref, name=spec.name, params=spec.params, family=spec.family, task=spec.task or "",
                     description=spec.description or "", default_seq_len=spec.default_seq_len,
                     default_image_size=spec.default_image_size)


def model_spec(ref: ModelRef):
    from advisor.sources import resolve_model as resolve

    return resolve(ref)


# ---------------------------------------------------------------- rules adapter
def rules_available() -> bool:
    try:
        import rules.api  # noqa: F401
    except ImportError:
        return False
    return True


def advise(state: WizardState, machine: Machine, home: Path | None = None):
    """``rules.api.recommend`` for the wizard's request, on the Machine the app was given (tests give
    fixed data; nothing reads NVML again). Raises ImportError when the rules layer is absent."""
    from advisor.calibration import load_calibration
    from rules import api

    return api.recommend(state.to_request(), machine=machine, calibration=load_calibration(home))


def as_dict(result: Any) -> dict:
    if hasattr(result, "model_dump"):
        return result.model_dump(mode="json")
    return dict(result)


# ---------------------------------------------------------------- workload preview
@dataclass(frozen=True)
class Preview:
    """The live numbers under the workload form."""

    model: str
    params: int
    hardware: str
    strategy: str
    gpus: int
    micro_batch: int
    grad_accum: int
    global_batch: int
    precision: str
    peak_gib: float
    gpu_memory_gib: float
    fits: bool
    samples_per_s: float
    time_to_train_h: float | None
    source: str  # "rules" or "estimate"
    note: str = ""


def preview(state: WizardState, machine: Machine, home: Path | None = None) -> Preview:
    """The recommendation's headline numbers when the rules are there, else one default config."""
    if state.model is None:
        raise UserError("no model chosen", fix="pick one on the Model screen (F3)")
    if rules_available():
        d = as_dict(advise(state, machine, home))
        r, e = d["recommendation"], d["estimate"]
        return Preview(model=e["model"]["name"], params=int(e["model"]["params"]),
                       hardware=f"{e['hardware']['count']}x {e['hardware']['gpu']}",
                       strategy=str(r["strategy"]), gpus=int(r["gpus"]), micro_batch=int(r["micro_batch"]),
                       grad_accum=int(r["grad_accum"]), global_batch=int(r["global_batch"]),
                       precision=str(r["precision"]), peak_gib=float(e["memory"]["peak_gib"]),
                       gpu_memory_gib=float(e["hardware"]["memory_gib"]), fits=bool(r.get("fits", e["memory"]["fits"])),
                       samples_per_s=float(e["throughput"]["samples_per_s"]),
                       time_to_train_h=e.get("time_to_train_h"), source="rules",
                       note=(d.get("warnings") or [""])[0])
    est, hw, cfg = _default_estimate(state, machine, home)
    return Preview(model=est.model.name, params=est.model.params, hardware=f"1x {hw.gpu.name}", strategy="single",
                   gpus=1, micro_batch=cfg.micro_batch, grad_accum=cfg.grad_accum,
                   global_batch=cfg.micro_batch * cfg.grad_accum, precision=cfg.precision.value,
                   peak_gib=est.memory.peak_gib, gpu_memory_gib=est.memory.gpu_memory_gib, fits=est.memory.fits,
                   samples_per_s=est.throughput.samples_per_s, time_to_train_h=est.time_to_train_h,
                   source="estimate", note="rules layer not installed: one GPU, default configuration")


def _default_estimate(state: WizardState, machine: Machine, home: Path | None):
    from advisor.calibration import load_calibration
    from advisor.config import TrainConfig
    from advisor.estimate import estimate

    spec = model_spec(state.model)
    hw = state.hardware.resolve(machine).with_count(1)
    w = state.workload
    batch = w.batch_size or 8
    micro = math.gcd(batch, 8)
    cfg = TrainConfig(micro_batch=micro, grad_accum=batch // micro, seq_len=w.seq_len or spec.default_seq_len,
                      image_size=w.image_size or spec.default_image_size,
                      precision="bf16" if hw.gpu.supports_bf16 else "fp16")
    est = estimate(spec, cfg, hw, dataset_size=w.dataset_size, epochs=w.epochs, calibration=load_calibration(home))
    return est, hw, cfg


# ---------------------------------------------------------------- recommendation
@dataclass(frozen=True)
class TreeNodeView:
    id: str
    question: str
    why: str
    next: dict[str, str]


@dataclass
class RecView:
    """Everything the Recommendation screen renders."""

    data: dict  # DESIGN.md's `advise --json` shape
    plan: Plan | None
    model: ModelInfo
    hardware_label: str
    gpu_memory_gib: float
    scaling: list[dict] = field(default_factory=list)  # rows of the rules' 1..N GPU table
    tree: list[TreeNodeView] = field(default_factory=list)
    source: str = "rules"

    @property
    def rec(self) -> dict:
        return self.data.get("recommendation", {})

    @property
    def estimate(self) -> dict:
        return self.data.get("estimate", {})

    @property
    def command(self) -> str:
        return str(self.rec.get("command") or "")

    def taken(self) -> dict[str, str]:
        """node id -> answer key on the path taken (answer text when the key is not given)."""
        return {s["node"]: str(s.get("key") or s.get("answer", "")) for s in self.data.get("decision_path", [])}


def recommend(state: WizardState, machine: Machine, home: Path | None = None) -> RecView:
    """The full recommendation and its 1..N GPU table."""
    if state.model is None:
        raise UserError("no model chosen", fix="pick one on the Model screen (F3)")
    info = resolve_model(state.model)
    if rules_available():
        result = advise(state, machine, home)
        data = as_dict(result)
        plan = getattr(result, "plan", None)
        if plan is None and data.get("plan"):
            plan = Plan.model_validate(data["plan"])
        source = "rules"
    else:
        data, plan = _estimate_only(state, machine, home)
        source = "estimate"
    hw = state.hardware.resolve(machine)
    e = data.get("estimate", {})
    view = RecView(data=data, plan=plan, model=info, hardware_label=state.hardware.label(machine),
                   gpu_memory_gib=float(e.get("hardware", {}).get("memory_gib") or hw.gpu.memory_gib),
                   tree=tree_nodes(), source=source, scaling=list(data.get("scaling") or []))
    if not view.scaling and plan is not None and source != "rules":
        view.scaling = scaling_table(plan, hw, home, recommended=int(view.rec.get("gpus") or plan.world_size))
    return view


def _estimate_only(state: WizardState, machine: Machine, home: Path | None) -> tuple[dict, Plan]:
    """Without the rules layer: the default configuration's estimate, shaped like `advise --json`."""
    est, hw, cfg = _default_estimate(state, machine, home)
    w = state.workload
    base_lr = w.base_lr or 3e-4
    gb = cfg.micro_batch * cfg.grad_accum
    plan = Plan(model=state.model, config=cfg, gpu=hw.gpu.name, global_batch=gb, lr=base_lr, base_lr=base_lr,
                base_batch=w.base_batch or gb, lr_scaling=w.lr_scaling, dataset_size=w.dataset_size, epochs=w.epochs,
                task=w.task)
    e = est.model_dump(mode="json")
    data = {"recommendation": {"strategy": "single", "gpus": 1, "nodes": 1, "micro_batch": cfg.micro_batch,
                               "grad_accum": cfg.grad_accum, "global_batch": gb, "precision": cfg.precision.value,
                               "compile": False, "grad_ckpt": False, "lr": base_lr, "lr_scaling": w.lr_scaling,
                               "warmup_steps": 0, "num_workers": 0, "fits": est.memory.fits,
                               "command": f"advise launch --model {state.model.label()}"},
            "estimate": e, "decision_path": [], "rules_fired": [], "alternatives": [],
            "warnings": ["the rules layer is not installed: this is one GPU with a default configuration, not advice"]}
    return data, plan


def gpu_counts(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    counts, c = [], 1
    while c < n:
        counts.append(c)
        c *= 2
    counts.append(n)
    return counts


def scaling_table(plan: Plan, hw: HardwareSpec, home: Path | None = None,
                  recommended: int | None = None) -> list[dict]:
    """Without the rules layer: the configuration's estimate on 1..N GPUs at the same global batch,
    in the rows' shape of the rules' table."""
    from advisor.calibration import load_calibration
    from advisor.config import Strategy
    from advisor.estimate import estimate

    spec = model_spec(plan.model)
    cal = load_calibration(home)
    total = max(hw.total_gpus, plan.world_size)
    multi = plan.config.strategy if plan.config.strategy in (Strategy.ddp, Strategy.fsdp) else Strategy.ddp
    rows: list[dict] = []
    base = None
    for n in gpu_counts(total):
        per_gpu = math.ceil(plan.global_batch / n)  # the same global batch (rounded up when n does not divide it)
        micro = math.gcd(per_gpu, plan.config.micro_batch)
        accum = per_gpu // micro
        cfg = plan.config.model_copy(update={"grad_accum": accum, "strategy": Strategy.single if n == 1 else multi})
        try:
            est = estimate(spec, cfg, hw.with_count(n), dataset_size=plan.dataset_size, epochs=plan.epochs,
                           calibration=cal)
        except UserError:
            continue
        sps = est.throughput.samples_per_s
        if base is None:
            base = sps / n
        rows.append(dict(gpus=n, strategy=cfg.strategy.value, micro_batch=micro, grad_accum=accum,
                         samples_per_s=sps, speedup=sps / base if base else 1.0,
                         scaling_efficiency=(sps / (base * n)) if base else 1.0, time_to_train_h=est.time_to_train_h,
                         peak_gib=est.memory.peak_gib, fits=est.memory.fits, chosen=(n == recommended)))
    return rows


# ---------------------------------------------------------------- the decision tree
# DESIGN.md's tree, used when the rules layer (which owns rules/data/tree.toml) is absent.
_STATIC_TREE = [
    ("A", "Start: what is to be trained, on what?", {"start": "B"}),
    ("B", "Does training fit on ONE GPU of this kind?", {"fits": "D", "too-big": "C"}),
    ("C", "It does not fit: how many GPUs does it take?", {"several": "I"}),
    ("D", "Is one GPU fast enough?", {"yes": "E", "no": "F"}),
    ("E", "Single GPU.", {}),
    ("F", "Are more GPUs available?", {"yes": "G", "no": "H"}),
    ("G", "How many GPUs does the deadline need (DDP)?", {"ddp": "J", "fsdp": "J"}),
    ("H", "One GPU only: how to make it faster or smaller?", {}),
    ("I", "Does a full replica fit per GPU (DDP), or must states be sharded (FSDP)?", {"ddp": "J", "fsdp": "J"}),
    ("J", "Learning rate and warmup for the global batch?", {}),
]


def tree_nodes() -> list[TreeNodeView]:
    try:
        from rules.api import load_tree

        return [TreeNodeView(id=n.id, question=n.question, why=n.why, next=dict(n.next)) for n in load_tree().values()]
    except Exception:  # rules absent or mid-change: the design's tree still explains the path
        return [TreeNodeView(id=i, question=q, why="", next=nx) for i, q, nx in _STATIC_TREE]


# ---------------------------------------------------------------- formatting
def hours_text(h: float | None) -> str:
    from advisor.units import format_hours

    return "-" if h is None else format_hours(h)
