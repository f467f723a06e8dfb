"""The rule engine: rules are data (``rules/data/*.toml``), conditions are data, nothing is eval'd.

A rule is an id, a name, a summary, a why, a source and an example, plus:

* ``phase``: when it is evaluated. ``setup`` rules run before the decision tree and may choose
  configuration (precision, optimizer, channels_last); ``plan`` rules run on the tree's result and
  may choose the rest (compile, workers, SyncBatchNorm); ``final`` rules only explain or warn
  about the final configuration and its estimate.
* ``when``: a condition over typed facts (``rules.facts.Facts``) in a small declarative language::

      when = {all = [{fact = "gpu.supports_bf16", op = "==", value = true},
                     {any = [{fact = "plan.gpus", op = ">", value = 1}, {not = {fact = "model.is_cnn"}}]}]}

  A leaf names a fact by its dotted path (checked against the Facts schema when the rules load,
  so a typo fails at once), an operator (``== != < <= > >= in not_in is_true is_false exists
  missing``) and a value. A fact that is unknown at evaluation time (``None``) makes every
  comparison false; ``missing`` tests for it.
* ``set``: configuration the rule chooses, literal values or ``{fact = "..."}``. A rule whose
  ``set`` touches a field the user pinned with a flag does not fire (flags win) and its trace
  says so.
* ``say``: the message, with ``{fact.path}`` / ``{fact.path:.1f}`` placeholders filled from facts.
* ``level``: ``info`` or ``warning`` (warnings are also listed in the recommendation's warnings).

``Engine.run(phase, facts, pinned)`` returns a ``RuleTrace`` for *every* rule of the phase,
fired or not, with each leaf's actual value, so the explanation is never a bare answer.
"""

import string
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from advisor.units import format_efficiency, format_hours

DATA_DIR = Path(__file__).with_name("data")

Op = Literal["==", "!=", "<", "<=", ">", ">=", "in", "not_in", "is_true", "is_false", "exists", "missing"]
Phase = Literal["setup", "plan", "final"]
Scalar = Union[bool, int, float, str]

# Configuration fields a rule may set, with the type of value it must give.
SETTABLE: dict[str, type | tuple[type, ...]] = {
    "precision": str,
    "optimizer": str,
    "channels_last": bool,
    "compile": bool,
    "sync_batchnorm": bool,
    "num_workers": int,
    "pin_memory": bool,
    "prefetch_factor": int,
    "warmup_steps": int,
}


class Leaf(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fact: str
    op: Op = "is_true"
    value: Scalar | list[Scalar] | None = None

    @model_validator(mode="after")
    def _value_matches_op(self) -> "Leaf":
        unary = self.op in ("is_true", "is_false", "exists", "missing")
        if unary and self.value is not None:
            raise ValueError(f"op '{self.op}' takes no value (fact {self.fact})")
        if not unary and self.value is None:
            raise ValueError(f"op '{self.op}' needs a value (fact {self.fact})")
        if self.op in ("in", "not_in") and not isinstance(self.value, list):
            raise ValueError(f"op '{self.op}' needs a list value (fact {self.fact})")
        return self


class All(BaseModel):
    model_config = ConfigDict(extra="forbid")
    all: list["Condition"]


class Any_(BaseModel):
    model_config = ConfigDict(extra="forbid")
    any: list["Condition"]


class Not(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    not_: "Condition" = Field(alias="not")


Condition = Union[All, Any_, Not, Leaf]
All.model_rebuild()
Any_.model_rebuild()
Not.model_rebuild()


class FactRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    fact: str


class Rule(BaseModel):
    """One rule, as written in a TOML file."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9]+(?:[.-][a-z0-9]+)*$")
    name: str
    phase: Phase
    level: Literal["info", "warning"] = "info"
    summary: str = Field(description="what the rule does, one sentence")
    why: str = Field(description="the reason behind it")
    source: str = Field(description="paper, documentation, or 'practice: ...'")
    example: str = Field(description="an `advise` command where it fires")
    when: Condition
    set: dict[str, Scalar | FactRef] = Field(default_factory=dict)
    say: str = Field(description="message with {fact.path} placeholders")
    file: str = Field("", description="the TOML file it came from")

    @model_validator(mode="after")
    def _settable(self) -> "Rule":
        for k, v in self.set.items():
            if k not in SETTABLE:
                raise ValueError(f"rule {self.id}: cannot set '{k}' (settable: {', '.join(SETTABLE)})")
            if not isinstance(v, FactRef) and not isinstance(v, SETTABLE[k]):
                raise ValueError(f"rule {self.id}: '{k}' needs a {SETTABLE[k]}, got {v!r}")
        return self


class LeafTrace(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fact: str
    op: str
    value: Any = None
    actual: Any = None
    result: bool


class RuleTrace(BaseModel):
    """What happened to one rule in one evaluation."""

    model_config = ConfigDict(extra="forbid")

    id: str
    phase: Phase
    level: Literal["info", "warning"]
    fired: bool
    why: str = Field("", description="the rule's message, rendered, when it fired")
    blocked_by_pin: list[str] = Field(default_factory=list, description="pinned fields that kept it from firing")
    set: dict[str, Any] = Field(default_factory=dict, description="what it chose, when it fired")
    leaves: list[LeafTrace] = Field(default_factory=list)


class RuleError(Exception):
    """A rules file is malformed (a bug in the package data, not a user mistake)."""


# ---------------------------------------------------------------- evaluation


def _compare(op: str, actual: Any, value: Any) -> bool:
    if op == "exists":
        return actual is not None
    if op == "missing":
        return actual is None
    if actual is None:
        return False
    if op == "is_true":
        return actual is True
    if op == "is_false":
        return actual is False
    if op == "==":
        return actual == value
    if op == "!=":
        return actual != value
    if op == "in":
        return actual in value
    if op == "not_in":
        return actual not in value
    try:
        if op == "<":
            return actual < value
        if op == "<=":
            return actual <= value
        if op == ">":
            return actual > value
        if op == ">=":
            return actual >= value
    except TypeError:
        return False
    raise RuleError(f"unknown op {op}")


def evaluate(cond: Condition, facts, trace: list[LeafTrace]) -> bool:
    """Evaluate a condition; every leaf reached is appended to ``trace``. Short-circuits like Python."""
    if isinstance(cond, All):
        return all(evaluate(c, facts, trace) for c in cond.all)
    if isinstance(cond, Any_):
        return any(evaluate(c, facts, trace) for c in cond.any)
    if isinstance(cond, Not):
        return not evaluate(cond.not_, facts, trace)
    actual = facts.get(cond.fact)
    result = _compare(cond.op, actual, cond.value)
    trace.append(LeafTrace(fact=cond.fact, op=cond.op, value=cond.value, actual=actual, result=result))
    return result


class _FactFormatter(string.Formatter):
    """``str.format`` over dotted fact paths only: no attribute access, no indexing, no calls."""

    def __init__(self, facts):
        self.facts = facts

    def get_field(self, field_name, args, kwargs):
        return self.facts.get(field_name), field_name

    def format_field(self, value, format_spec):
        if value is None:
            return "?"
        if isinstance(value, bool):
            return "yes" if value else "no"
        if format_spec == "gib":
            return f"{value:.1f} GiB"
        if format_spec == "pct":
            return f"{value * 100:.0f}%"
        if format_spec == "eff":  # a scaling efficiency: never a bare 100% from an estimate (DESIGN.md)
            return format_efficiency(value)
        if format_spec == "h":
            return format_hours(value)
        try:
            return format(value, format_spec)
        except (TypeError, ValueError):
            return str(value)


def render(template: str, facts) -> str:
    return _FactFormatter(facts).format(template)


def template_fields(template: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(template) if f]


# ---------------------------------------------------------------- loading


def _leaves(cond: Condition):
    if isinstance(cond, All):
        for c in cond.all:
            yield from _leaves(c)
    elif isinstance(cond, Any_):
        for c in cond.any:
            yield from _leaves(c)
    elif isinstance(cond, Not):
        yield from _leaves(cond.not_)
    else:
        yield cond


# Fact sections that only exist once the tree has run.
_PLAN_ONLY = ("plan.", "estimate.", "compile.", "data.")


def _check_rule(rule: Rule) -> None:
    from rules.facts import Facts

    paths = Facts.paths()
    refs = [leaf.fact for leaf in _leaves(rule.when)]
    refs += [v.fact for v in rule.set.values() if isinstance(v, FactRef)]
    refs += template_fields(rule.say)
    for ref in refs:
        if ref not in paths:
            near = [p for p in paths if p.split(".")[-1] == ref.split(".")[-1]]
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
            raise RuleError(f"{rule.file}: rule {rule.id}: unknown fact '{ref}'{hint}")
        if rule.phase == "setup" and ref.startswith(_PLAN_ONLY):
            raise RuleError(f"{rule.file}: rule {rule.id}: setup rules run before the tree; '{ref}' is not known yet")


def load_rules_from(paths: list[Path]) -> list[Rule]:
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for path in paths:
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise RuleError(f"{path}: {exc}") from None
        for raw in data.get("rule", []):
            try:
                rule = Rule(**raw, file=path.name)
            except Exception as exc:
                raise RuleError(f"{path}: rule {raw.get('id', '?')}: {exc}") from None
            if rule.id in seen:
                raise RuleError(f"{path}: rule id {rule.id} already defined in {seen[rule.id]}")
            seen[rule.id] = path.name
            _check_rule(rule)
            rules.append(rule)
    return rules


@lru_cache(maxsize=1)
def load_rules() -> tuple[Rule, ...]:
    """Every rule in ``rules/data/*.toml`` except the tree and the defaults tables."""
    files = sorted(p for p in DATA_DIR.glob("*.toml") if p.stem not in ("tree", "defaults"))
    return tuple(load_rules_from(files))


def get_rule(rule_id: str) -> Rule | None:
    for r in load_rules():
        if r.id == rule_id:
            return r
    return None


class Engine:
    """Evaluates the rules of a phase against facts; returns the trace of every rule."""

    def __init__(self, rules: tuple[Rule, ...] | list[Rule] | None = None):
        self.rules = tuple(load_rules() if rules is None else rules)

    def run(self, phase: Phase, facts, pinned: set[str] | frozenset[str] = frozenset()) -> list[RuleTrace]:
        out = []
        for rule in self.rules:
            if rule.phase != phase:
                continue
            leaves: list[LeafTrace] = []
            ok = evaluate(rule.when, facts, leaves)
            blocked = [k for k in rule.set if k in pinned] if ok else []
            fired = ok and not blocked
            chosen: dict[str, Any] = {}
            if fired:
                for k, v in rule.set.items():
                    chosen[k] = facts.get(v.fact) if isinstance(v, FactRef) else v
            out.append(RuleTrace(
                id=rule.id, phase=phase, level=rule.level, fired=fired,
                why=render(rule.say, facts) if fired else "", blocked_by_pin=blocked, set=chosen, leaves=leaves,
            ))
        return out
