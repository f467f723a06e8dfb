"""``advise rules [ID] [--json]``: list every rule (and the tree's nodes), or explain one.

Explaining shows what the rule does, why, an example command where it fires, its source, and
its condition and choices as written in ``rules/data/*.toml``.
"""

from __future__ import annotations

import argparse
import json
import sys

from cli.flags import add_json_flag


def add_parser(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("id", nargs="?", metavar="ID", help="a rule id (e.g. precision.bf16) or a tree node (A-J)")
    add_json_flag(parser)


def condition_text(cond) -> str:
    """A condition in words: `gpu.supports_bf16 is true and plan.gpus > 1`."""
    from rules.engine import All, Any_, Not

    if isinstance(cond, All):
        return " and ".join(_paren(c) for c in cond.all)
    if isinstance(cond, Any_):
        return " or ".join(_paren(c) for c in cond.any)
    if isinstance(cond, Not):
        return f"not {_paren(cond.not_)}"
    if cond.op in ("is_true", "is_false"):
        return f"{cond.fact} is {'true' if cond.op == 'is_true' else 'false'}"
    if cond.op in ("exists", "missing"):
        return f"{cond.fact} is {'known' if cond.op == 'exists' else 'unknown'}"
    value = json.dumps(cond.value)
    return f"{cond.fact} {cond.op.replace('_', ' ')} {value}"


def _paren(c) -> str:
    from rules.engine import All, Any_

    text = condition_text(c)
    return f"({text})" if isinstance(c, (All, Any_)) else text


def _constraint_dict(c) -> dict:
    from advisor.setup.constraints import LAUNCH_ONLY

    return {"id": c.id, "why": c.why, "fix": c.fix, "launch_only": c.id in LAUNCH_ONLY,
            "file": "advisor/setup/constraints.py"}


def _rule_dict(rule) -> dict:
    d = rule.model_dump(mode="json", by_alias=True, exclude={"file"})
    d["condition"] = condition_text(rule.when)
    d["file"] = f"rules/data/{rule.file}"
    return d


def run(args: argparse.Namespace) -> int:
    from advisor.errors import close_names
    from advisor.errors import UserError
    from advisor.setup.constraints import BY_ID as CONSTRAINT_IDS, CONSTRAINTS, LAUNCH_ONLY
    from rules.engine import get_rule, load_rules
    from rules.tree import load_tree

    rules = load_rules()
    nodes = load_tree()
    if args.id is None:
        if args.json:
            out = {"rules": [{k: v for k, v in _rule_dict(r).items() if k in ("id", "name", "phase", "level", "summary", "source")}
                             for r in rules],
                   "tree": [{"node": n.id, "question": n.question, "summary": n.summary} for n in nodes.values()],
                   "constraints": [_constraint_dict(c) for c in CONSTRAINTS]}
            sys.stdout.write(json.dumps(out, indent=2) + "\n")
            return 0
        _render_list(rules, nodes)
        return 0
    key = args.id
    if key.upper() in nodes and len(key) == 1:
        n = nodes[key.upper()]
        if args.json:
            sys.stdout.write(json.dumps({"node": n.id, **n.model_dump(mode="json")}, indent=2) + "\n")
            return 0
        _render_node(n)
        return 0
    if key in CONSTRAINT_IDS:
        c = CONSTRAINT_IDS[key]
        if args.json:
            sys.stdout.write(json.dumps(_constraint_dict(c), indent=2) + "\n")
            return 0
        _print_panel(f"[bold]{c.id}[/bold]: a combination refused", [
            ("why", c.why), ("fix", c.fix), ("checked", "before any search or launch, by every caller that plans"
                                                        + (" a launch" if c.id in LAUNCH_ONLY else "")),
            ("defined in", "advisor/setup/constraints.py")])
        return 0
    rule = get_rule(key)
    if rule is None:
        near = close_names(key, [r.id for r in rules] + list(CONSTRAINT_IDS))
        raise UserError(f"unknown rule '{key}'", fix=(f"did you mean {', '.join(near)}? " if near else "")
                        + "`advise rules` lists every rule")
    table, render = _DEFAULT_TABLES.get(rule.id, (None, None))
    if args.json:
        sys.stdout.write(json.dumps({**_rule_dict(rule), **({"defaults": table()} if table else {})}, indent=2) + "\n")
        return 0
    _render_rule(rule)
    if table:
        render(table())
    return 0


def _lr_defaults() -> dict:
    """The recipes ``defaults.lr`` starts from, the default task per family and the warmup policy."""
    from rules.defaults import load_defaults

    d = load_defaults()
    return {"task": dict(d.task), "warmup": d.warmup.model_dump(),
            "recipes": [r.model_dump(exclude_none=True) for r in d.lr],
            "models": {k: v.model_dump(exclude_none=True) for k, v in d.model.items()},
            "task_inference": d.task_inference.model_dump(),
            "batch_range": {k: v.model_dump(exclude_none=True) for k, v in d.batch_range.items()}}


def _risk_classes() -> dict:
    """Node H's numerical-risk classes (rules.risk.RISK_CLASSES), least risk first, and the rule over them."""
    from rules.compromise import LEVELS
    from rules.risk import RISK_CLASSES, RISK_SLACK

    return {"risk_slack": RISK_SLACK,
            "classes": [{"id": c.id, "rank": c.rank, "summary": c.summary, "why": c.why, "source": c.source,
                         "compromises": [lv.name for lv in LEVELS if lv.numerical_risk == c.id]} for c in RISK_CLASSES]}


def _render_risk(d: dict) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console(width=max(100, Console().width))
    console.print(escape(f"numerical risk within a tier (rules.risk.RISK_CLASSES): the least wins unless more than "
                         f"{d['risk_slack']:.0%} slower than the tier's fastest, or the deadline needs the faster one"),
                  style="bold")
    for c in d["classes"]:
        levels = f" [{', '.join(c['compromises'])}]" if c["compromises"] else ""
        console.print(escape(f"  {c['rank']} {c['id']}{levels}: {c['summary']}. {c['why']} -- {c['source']}"))


# Rules whose defaults live in a table: `advise rules ID` shows it (data, how to render it).
_DEFAULT_TABLES = {"defaults.lr": (_lr_defaults, lambda d: _render_defaults(d)),
                   "fit.compromise": (_risk_classes, _render_risk)}


def _render_defaults(d: dict) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console(width=max(100, Console().width))
    console.print(escape("recipes (rules/data/defaults.toml [[lr]]; the row of the nearest size applies):"), style="bold")
    for r in d["recipes"]:
        size = f" {r['params'] / 1e9:g}B" if r.get("params") else ""
        batch = f"{r['batch_tokens']:,} tokens" if r.get("batch_tokens") else f"{r['base_batch']:,}"
        console.print(f"  {r['family']} {r['task']}{' (adapters)' if r.get('adapter') else ''}{size}: {r['optimizer']} "
                      f"lr {r['base_lr']:g} at batch {batch}, scaling {r.get('scaling') or 'by optimizer'} -- "
                      + escape(r["source"]))
    for name, m in d["models"].items():
        console.print(f"  {name} ({m.get('task', '-')}): lr {m['base_lr']:g} at batch {m['base_batch']:,} -- " + escape(m["source"]))
    w = d["warmup"]
    console.print("default task: " + ", ".join(f"{k} {v}" for k, v in d["task"].items())
                  + f"; warmup {w['fraction']:.0%} of the steps that run, at most {w['max_steps']:,} steps"
                  + (f" and {w['max_epochs']:g} epochs" if w.get("max_epochs") else "")
                  + f" ({w['unknown_steps']} when the length is unknown)", style="dim")
    ti = d.get("task_inference")
    if ti:
        console.print(f"task inferred from the workload: pretrain at >= {ti['text_tokens_per_param']:g} tokens per parameter "
                      f"(text), >= {ti['vision_min_epochs']:g} epochs and >= {ti['vision_min_samples_seen']:,} samples "
                      "seen (vision); adapters are fine-tunes", style="dim")
    for fam, b in d.get("batch_range", {}).items():
        top = f"up to {b['max_batch']:,}" if b.get("max_batch") else "the recipe's batch"
        console.print(f"  pretraining batch, {fam}: {top}" + (f" from {b['start_batch']:,}" if b.get("start_batch") else "")
                      + (f", {b['optimizer']} only" if b.get("optimizer") else "") + " -- " + escape(b["source"]))


def _render_list(rules, nodes) -> None:
    from cli.console import report_console
    from rich.table import Table

    console = report_console()
    t = Table(title="decision tree (rules/data/tree.toml)", title_justify="left", show_edge=False)
    t.add_column("node", style="bold")
    t.add_column("question")
    t.add_column("leads to")
    for n in nodes.values():
        t.add_row(n.id, n.question, ", ".join(f"{k} → {v}" for k, v in n.next.items()) or "(end)")
    console.print(t)
    console.print()
    r = Table(title=f"rules ({len(rules)}; rules/data/*.toml)", title_justify="left", show_edge=False)
    r.add_column("id", style="bold", no_wrap=True)
    r.add_column("phase")
    r.add_column("summary")
    for rule in rules:
        r.add_row(rule.id, rule.phase + (" (warns)" if rule.level == "warning" else ""), rule.summary)
    console.print(r)
    console.print()
    from advisor.setup.constraints import CONSTRAINTS

    c = Table(title=f"what combines ({len(CONSTRAINTS)} refused combinations; advisor/setup/constraints.py)",
              title_justify="left", show_edge=False)
    c.add_column("id", style="bold", no_wrap=True)
    c.add_column("why refused")
    c.add_column("fix")
    for row in CONSTRAINTS:
        c.add_row(row.id, row.why, row.fix)
    console.print(c)
    console.print("`advise rules ID` explains one: what, why, example, source.", style="dim")


def _print_panel(title: str, rows: list[tuple[str, str]]) -> None:
    """A titled two-column panel: how `advise rules ID` shows a rule or a tree node."""
    from cli.console import report_console
    from rich.panel import Panel
    from rich.table import Table

    console = report_console()
    g = Table.grid(padding=(0, 2))
    g.add_column(style="bold")
    g.add_column()
    for label, text in rows:
        g.add_row(label, text)
    console.print(Panel(g, title=title, title_align="left"))


_PHASES = {"setup": "before the decision tree", "plan": "on the tree’s plan", "final": "on the final estimate"}


def _render_rule(rule) -> None:
    rows = [("what", rule.summary), ("why", rule.why), ("example", rule.example), ("source", rule.source),
            ("when", condition_text(rule.when))]
    if rule.set:
        rows.append(("chooses", ", ".join(f"{k} = {v.fact if hasattr(v, 'fact') else v}" for k, v in rule.set.items())
                     + "  (never over a pinned flag)"))
    rows += [("says", rule.say),
             ("phase", f"{rule.phase} ({_PHASES[rule.phase]})" + ("; a warning" if rule.level == "warning" else "")),
             ("defined in", f"rules/data/{rule.file}")]
    _print_panel(f"[bold]{rule.id}[/bold]: {rule.name}", rows)


def _render_node(n) -> None:
    _print_panel(f"[bold]node {n.id}[/bold] of the decision tree", [
        ("question", n.question), ("what", n.summary), ("why", n.why), ("source", n.source),
        ("leads to", ", ".join(f"{k} → {v}" for k, v in n.next.items()) or "(end of the walk)")])
