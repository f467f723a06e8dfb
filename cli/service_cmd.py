"""``advise serve`` / ``submit`` / ``cancel`` / ``logs``: the queue service and its clients.

    advise serve --cpu --slots 2                       # foreground; logs to stderr; SIGTERM stops it
    advise submit --cpu --processes 1 --model mini-transformer --recipe synthetic --max-steps 20 --json
    advise runs                                        # the queue and what ran (cli.runs_cmd)
    advise cancel 3fa9c2d1
    advise logs 3fa9c2d1 -f

``submit`` takes ``advise launch``'s flags (the same parser and plan-building code) and queues
the validated plan (``--slurm``: hands it to Slurm instead, cli/slurm_cmd.py); the other commands only read or change the run store, so they work whether
the service runs or not. See launcher/service/ for the service's rules and docs/service.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from cli import flags


def _gpu_list(text: str) -> list[int]:
    try:
        ids = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected GPU indices like 0,1,3, got '{text}'") from None
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"expected GPU indices like 0,1,3, got '{text}'")
    return ids


def add_parser(parser: argparse.ArgumentParser, name: str) -> None:
    from launcher import service

    if name == "serve":
        parser.add_argument("--cpu", action="store_true", help="run --cpu plans on CPU slots instead of placing GPUs")
        parser.add_argument("--slots", type=flags.positive_int, metavar="N",
                            help="with --cpu: CPU slots, one per rank (default 1); on GPUs: most runs at once (default: no cap)")
        parser.add_argument("--gpu-ids", type=_gpu_list, metavar="0,1,...",
                            help="GPUs the service may use (default: $CUDA_VISIBLE_DEVICES, else all detected)")
        parser.add_argument("--poll", type=flags.poll_seconds, default=service.DEFAULT_POLL_S, metavar="S",
                            help=f"seconds between looks at the queue (default {service.DEFAULT_POLL_S:g})")
        parser.add_argument("--max-starts", type=flags.positive_int, default=service.DEFAULT_MAX_STARTS, metavar="N",
                            help="a run interrupted by a service crash is failed once started N times "
                                 f"(default {service.DEFAULT_MAX_STARTS})")
        parser.add_argument("--max-bypass", type=flags.nonneg_int, default=None, metavar="N",
                            help="later runs that may start ahead of the oldest waiting run before it reserves "
                                 "devices (default 3; 0 = strict FIFO)")
        parser.add_argument("--grace", type=flags.grace_seconds, default=service.DEFAULT_GRACE_S, metavar="S",
                            help=f"seconds a stopped run gets between SIGTERM and SIGKILL (default {service.DEFAULT_GRACE_S:g})")
        flags.add_home_flag(parser)
        return
    if name == "submit":
        from cli.launch_cmd import add_parser as add_launch_parser

        add_launch_parser(parser, "submit")
        parser.add_argument("--need-gib", type=flags.positive_float, metavar="GIB",
                            help="GPU memory per rank the run needs (default: cardwise's estimate for the plan)")
        parser.add_argument("--env", action="append", default=[], metavar="NAME",
                            help="pass this shell's value of NAME to the run (repeatable); the run starts in this "
                                 "directory with the service's environment otherwise")
        return
    parser.add_argument("id", metavar="ID", help="run id (a unique prefix is enough)")
    if name == "cancel":
        parser.add_argument("--wait", action="store_true", help="return only once the run's processes are gone")
        flags.add_json_flag(parser)
    elif name == "logs":
        parser.add_argument("-f", "--follow", action="store_true", help="keep printing as the run writes, until it ends")
        parser.add_argument("--attempt", type=flags.positive_int, metavar="N", help="only this attempt's log")
    flags.add_home_flag(parser)


def run(args: argparse.Namespace) -> int:
    return {"serve": _serve, "submit": _submit, "cancel": _cancel, "logs": _logs}[args.command](args)


# ------------------------------------------------------------------ serve
def _serve(args: argparse.Namespace) -> int:
    import logging
    import os
    import signal
    import threading

    from advisor.errors import UserError
    from launcher import placement, service
    from launcher.home import ensure_home, resolve_home

    os.umask(0o077)  # everything the service and its runs create is the owner's only
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s advise serve: %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    service.log.addHandler(handler)
    service.log.setLevel(logging.INFO)
    service.log.propagate = False

    gpu_ids = args.gpu_ids
    if not args.cpu:
        from advisor.hardware import detect_machine

        machine = detect_machine()
        if not machine.gpus:
            raise UserError(f"no GPU detected ({machine.nvml_error or 'NVML reports 0 GPUs'})",
                            fix="serve CPU runs with `advise serve --cpu --slots N` (and submit with --cpu)")
        if gpu_ids is None:
            gpu_ids = service.gpu_ids_from_env(machine, os.environ.get("CUDA_VISIBLE_DEVICES"))
        known = {g.index for g in machine.gpus}
        if gpu_ids is not None and (not gpu_ids or set(gpu_ids) - known):
            raise UserError(f"GPU(s) {','.join(map(str, sorted(set(gpu_ids) - known))) or '(none)'} not detected",
                            fix=f"use indices from `advise gpus`: {','.join(map(str, sorted(known)))}")
    elif args.gpu_ids is not None:
        raise UserError("--gpu-ids is for GPU services", fix="drop --gpu-ids, or drop --cpu")

    home = ensure_home(resolve_home(args.home))
    svc = service.Service(home, cpu=args.cpu, slots=args.slots, gpu_ids=gpu_ids, poll_s=args.poll,
                          max_starts=args.max_starts,
                          max_bypass=placement.DEFAULT_MAX_BYPASS if args.max_bypass is None else args.max_bypass,
                          grace_s=args.grace)
    stop = threading.Event()

    def on_signal(signum, frame):
        if stop.is_set():
            service.log.warning("second %s: stopping runs without the grace period", signal.Signals(signum).name)
            svc.force.set()
        else:
            service.log.info("%s: taking no new work; requeueing running runs", signal.Signals(signum).name)
            stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    return svc.serve(stop)


# ------------------------------------------------------------------ submit
def _submit(args: argparse.Namespace) -> int:
    from advisor.errors import UserError
    from launcher import service
    from cli.launch_plan import check_here, options_from_flags, plan_from_flags, target_from_flags
    from launcher.home import resolve_home

    if args.slurm:  # handed to Slurm instead of this machine's service (cli.slurm_cmd)
        from cli.slurm_cmd import submit as submit_slurm

        return submit_slurm(args)
    from cli.slurm_cmd import refuse_without_slurm

    refuse_without_slurm(args, "--slurm")
    for flag, given in (("--dry-run", args.dry_run), ("--emit", args.emit), ("--probe", args.probe)):
        if given:
            raise UserError(f"{flag} is for `advise launch`; `advise submit` queues the run",
                            fix=f"advise launch {flag} ... to see it without running it" if flag != "--probe" else
                            "probe first with `advise probe` (same flags), then submit")
    flags.check_output_file(args.save_plan, "--save-plan", "plan.json")
    plan, notes = plan_from_flags(args)
    target = target_from_flags(args, plan)
    options = options_from_flags(args, plan)
    plan = check_here(plan, force=args.force)  # the service runs it on this machine
    if args.save_plan:
        plan.save(args.save_plan)
    rec, more = service.submit(resolve_home(args.home), plan, target, options, need_gib=args.need_gib,
                               env_names=args.env)
    for note in [*notes, *more]:
        print(f"advise: note: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps({"id": rec.id, "status": rec.status, "run_dir": rec.run_dir}))
    else:
        print(f"queued run {rec.id}: {rec.label}, {plan.world_size} rank(s)\n"
              f"  `advise runs` shows the queue, `advise logs {rec.id} -f` follows it once it starts")
    return 0


# ------------------------------------------------------------------ cancel
def _cancel(args: argparse.Namespace) -> int:
    from advisor.errors import UserError
    from launcher import service
    from launcher.home import resolve_home, store_path
    from launcher.store import RunStore

    home = resolve_home(args.home)
    flags.check_home_readable(home)
    if not store_path(home).exists():
        raise UserError(f"no runs recorded in {home}", fix="`advise runs --home DIR` to look elsewhere")
    store = RunStore.open(home)
    rec = store.get(args.id)
    if rec.slurm:  # Slurm's job: scancel, and the record follows Slurm's state (launcher.slurm_jobs)
        from launcher.slurm_jobs import cancel as slurm_cancel

        rec, what = slurm_cancel(store, rec)
    else:
        rec, what = service.cancel(store, home, args.id)
    if args.wait and rec.slurm:
        from launcher.slurm_jobs import wait_gone

        rec = wait_gone(store, rec, 120)
    elif args.wait:
        deadline = time.monotonic() + 120

        def stopping(r) -> bool:
            return not r.terminal or r.pid is not None or bool(service.run_processes(r))

        while stopping(rec) and time.monotonic() < deadline:
            time.sleep(0.2)
            rec = store.get(rec.id)
        if stopping(rec):
            raise UserError(f"run {rec.id} is still stopping after 120 s", fix=f"`advise show {rec.id}` for its pid")
        what += "; stopped"
    if args.json:
        print(rec.model_dump_json(indent=2))
    else:
        print(f"run {rec.id}: {what}")
    return 0


# ------------------------------------------------------------------ logs
def _log_paths(rec, attempt: int | None) -> list[tuple[object, Path]]:
    out = []
    for a in rec.attempts:
        if a.log_dir and (attempt is None or a.n == attempt):
            out.append((a, Path(a.log_dir) / "launcher.log"))
    return out


def _logs(args: argparse.Namespace) -> int:
    from advisor.errors import UserError
    from cli.runs_cmd import open_for_reading
    from launcher.home import resolve_home
    from launcher.settle import settle_one

    home = resolve_home(args.home)
    store = open_for_reading(home)
    if store is None:
        raise UserError(f"no runs recorded in {home}", fix="`advise runs --home DIR` to look elsewhere")
    rec = settle_one(store.settler(), store.get(args.id))
    if rec.slurm:  # the job's output file (launcher.slurm_jobs)
        return _slurm_logs(store, rec, args.follow)
    if not args.follow:
        paths = _log_paths(rec, args.attempt)
        if not paths:
            if args.attempt is not None:
                raise UserError(f"run {rec.id} has no attempt {args.attempt}", fix=f"`advise show {rec.id}` lists its attempts")
            print(f"advise: run {rec.id} is {rec.status}; no logs yet", file=sys.stderr)
            return 0
        for a, path in paths:
            if len(paths) > 1:
                print(f"==> attempt {a.n}: micro-batch {a.micro_batch} x accumulation {a.grad_accum}, {a.status} <==")
            _copy(path)
        return 0
    return _follow(store, rec.id, args.attempt)


def _slurm_logs(store, rec, follow: bool, poll_s: float = 0.5) -> int:
    """A Slurm run's log is its batch script's output file (every node's ranks write to it through srun)."""
    from launcher.slurm_jobs import refresh_one

    path = Path(rec.slurm.get("output") or "")
    if not follow:
        if not path.is_file():
            print(f"advise: run {rec.id} is {rec.status}; Slurm has written no output yet ({path})", file=sys.stderr)
            return 0
        _copy(path)
        return 0
    f = None
    try:
        while True:
            rec = refresh_one(store.settler(), store.get(rec.id))
            if f is None and path.is_file():
                f = open(path, "r", errors="replace")
            if f is not None:
                _drain(f)
            if rec.terminal:
                return 0
            time.sleep(poll_s)
    finally:
        if f is not None:
            f.close()


def _copy(path: Path) -> None:
    try:
        with open(path, "r", errors="replace") as f:
            for line in f:
                sys.stdout.write(line)
    except FileNotFoundError:
        pass
    sys.stdout.flush()


def _follow(store, run_id: str, only: int | None, poll_s: float = 0.25) -> int:
    """Print the run's logs as they grow; move on to each new attempt; stop when the run ended."""
    import os

    from launcher.settle import settle_one

    current, f, key = None, None, None
    try:
        while True:
            rec = settle_one(store.settler(), store.get(run_id))  # a run whose launcher died ends the follow
            paths = _log_paths(rec, only)
            if paths:
                a, path = paths[-1]
                want = (rec.service_attempts, a.n, str(path))
                if key != want:  # a new attempt (OOM retry) or a new execution (requeued)
                    if f is not None:
                        _drain(f)
                        f.close()
                        f = None
                    with_header = current is not None or len(paths) > 1
                    try:
                        f = open(path, "r", errors="replace")
                        key, current = want, a.n
                        if with_header:
                            print(f"==> attempt {a.n}: micro-batch {a.micro_batch} x accumulation {a.grad_accum} <==")
                    except FileNotFoundError:
                        pass
                elif f is not None:
                    try:  # same name, new file: the execution was moved aside and started again
                        if os.stat(path).st_ino != os.fstat(f.fileno()).st_ino:
                            _drain(f)
                            f.close()
                            f, key = None, None
                            continue
                    except FileNotFoundError:
                        pass
            if f is not None:
                _drain(f)
            if rec.terminal:
                if f is not None:
                    _drain(f)
                return 0
            time.sleep(poll_s)
    finally:
        if f is not None:
            f.close()


def _drain(f) -> None:
    chunk = f.read()
    if chunk:
        sys.stdout.write(chunk)
        sys.stdout.flush()
