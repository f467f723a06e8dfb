"""``advise runs`` (list recorded runs) and ``advise show ID`` (one run in full).

Both read the run store under ``--home`` (or ``$CARDWISE_HOME``, or the XDG data directory);
``--json`` prints the records exactly as the store, the TUI and the queue service see them.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from cli import flags

STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")


def add_parser(parser: argparse.ArgumentParser, name: str) -> None:
    if name == "show":
        parser.add_argument("id", metavar="ID", help="run id (a unique prefix is enough)")
    else:
        parser.add_argument("--status", choices=STATUSES, action="append", help="only runs in this status (repeatable)")
        parser.add_argument("--limit", type=flags.positive_int, metavar="N", help="only the newest N runs")
    flags.add_home_flag(parser)
    flags.add_json_flag(parser)


def status_text(rec) -> str:
    """The status, with Slurm's state for a Slurm run (launcher.slurm_jobs.status_text)."""
    if not rec.slurm:
        return rec.status
    from launcher.slurm_jobs import status_text as slurm_status

    return slurm_status(rec)


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _span(s: float) -> str:
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.1f}h"


def _duration(rec) -> str:
    """The time the run ran: its attempts' times summed over every start (a requeued service run's
    ``started`` is its last start's), else its own start to end."""
    timed = [a for a in rec.attempts if a.started]
    if timed:
        return _span(sum((a.ended or time.time()) - a.started for a in timed))
    if rec.started is None:
        return "-"
    return _span((rec.ended or time.time()) - rec.started)


def _table(records) -> str:
    if not records:
        return "no runs recorded yet (`advise launch ...` records one)"
    head = ("ID", "STATUS", "CREATED", "TIME", "EXIT", "STEPS", "LOSS", "WHAT")
    rows = []
    for r in records:
        m = r.metrics
        loss = "-" if m is None or m.last_loss is None else f"{m.last_loss:.4g}"
        rows.append((r.id, status_text(r), _when(r.created), _duration(r), "-" if r.exit_code is None else str(r.exit_code),
                     "-" if m is None else str(m.steps), loss, r.label))
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head) - 1)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    return "\n".join(fmt.format(*row) for row in [head, *rows])


def _detail(rec) -> str:
    lines = [f"run {rec.id}: {status_text(rec)}" + (f" (exit code {rec.exit_code})" if rec.exit_code is not None else ""),
             f"  what:     {rec.label}",
             f"  created:  {_when(rec.created)}   started: {_when(rec.started)}   ended: {_when(rec.ended)}",
             f"  run dir:  {rec.run_dir or '-'}"]
    if rec.error:
        lines.append(f"  error:    {rec.error}")
    if rec.metrics is not None and rec.metrics.bad_rows:
        lines.append(f"  metrics:  {rec.metrics.bad_rows} malformed row(s) of metrics.jsonl skipped")
    if rec.gpus is not None:
        lines.append(f"  gpus:     {','.join(map(str, rec.gpus))}")
    if rec.slurm:
        job = rec.slurm
        lines.append(f"  slurm:    job {job.get('job_id')} on partition {job.get('partition') or '-'}, state {job.get('state')}"
                     + (f" ({job['reason']})" if job.get("reason") else "") + f", time limit {job.get('time_limit') or '-'}"
                     + (f", requeued {job['restarts']}x" if job.get("restarts") else ""))
        lines.append(f"  output:   {job.get('output') or '-'}")
    if rec.command:
        from launcher.command import LaunchSpec

        lines.append(f"  command:  {LaunchSpec.model_validate(rec.command).shell_line()}")
    starts = len({a.start for a in rec.attempts}) > 1  # a requeued service run: every start's attempts
    for a in rec.attempts:
        took = f", {a.ended - a.started:.1f}s" if a.started and a.ended else ""
        steps = f", to step {a.last_step}" if a.last_step else ""
        name = f"start {a.start}, attempt {a.n}" if starts else f"attempt {a.n}"
        lines.append(f"  {name}: micro-batch {a.micro_batch} x accumulation {a.grad_accum}: {a.status}"
                     + (f" (exit {a.exit_code})" if a.exit_code not in (None, 0) else "") + steps + took
                     + (f" ({_when(a.started)})" if starts and a.started else ""))
        if a.note:
            lines.append(f"    {a.note}")
        if starts and a.error and a.status != "succeeded":
            lines.append(f"    {a.error}")
    m = rec.metrics
    if m is not None:
        parts = [f"{m.steps} steps", f"{m.ranks} rank(s)"]
        if m.first_loss is not None:
            parts.append(f"loss {m.first_loss:.4g} -> {m.last_loss:.4g}")
        if m.samples_per_s:
            parts.append(f"{m.samples_per_s:.1f} samples/s")
        if m.tokens_per_s:
            parts.append(f"{m.tokens_per_s:.0f} tokens/s")
        if m.peak_gib is not None:
            parts.append(f"peak {m.peak_gib:.2f} GiB")
        lines.append("  metrics:  " + ", ".join(parts))
        bound = m.data_bound
        if bound is not None:  # launcher.data_wait's check
            lines.append(f"  data:     {bound.message}" + (f"\n  fix:      {bound.fix}" if bound.fix else ""))
    if rec.resumed_from:
        lines.append(f"  resumes:  run {rec.resumed_from} (from its last checkpoint)")
    return "\n".join(lines)


def refreshed(store, records):
    """``records`` with Slurm's state for the Slurm runs that have not ended (launcher.slurm_jobs)."""
    if not any(r.slurm and not r.terminal for r in records):
        return records
    from launcher.slurm_jobs import refresh

    return refresh(store.settler(), records)


def open_for_reading(home):
    """The home's store read-only (None when there is none yet), after the home's checks. Reading
    never needs write access: a corrupt, busy or read-only store is still listed or refused in one line."""
    from launcher.home import check_home, store_path
    from launcher.store import RunStore

    flags.check_home_readable(home)  # a file or an unreadable folder is not "no runs recorded yet"
    if not home.exists():
        return None
    check_home(home)
    if not os.path.lexists(store_path(home)):
        return None
    return RunStore.open(home, readonly=True)


def run(args: argparse.Namespace) -> int:
    from advisor.errors import UserError
    from launcher.home import resolve_home
    from launcher.settle import settle, settle_one

    home = resolve_home(args.home)
    store = open_for_reading(home)
    if args.command == "show":
        if store is None:
            raise UserError(f"no runs recorded in {home}", fix="`advise runs --home DIR` to look elsewhere")
        rec = settle_one(store.settler(), refreshed(store, [store.get(args.id)])[0])
        print(rec.model_dump_json(indent=2) if args.json else _detail(rec))
        return 0
    records = [] if store is None else settle(store.settler(), refreshed(store, store.list(status=args.status, limit=args.limit)))
    if args.status:  # settling may have moved a run out of the statuses asked for
        records = [r for r in records if r.status in args.status]
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in records], indent=2))
    else:
        print(_table(records))
    return 0
