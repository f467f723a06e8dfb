"""From the launch form to a recorded, running run, through the launcher's own functions.

The same steps as ``advise launch`` (cli/launch_cmd.py): a plan (the recommendation's,
or ``launcher.cpu_plan`` for CPU processes), a ``Target`` (recipe or script), a store record and
its run directory, then ``launcher.runner.execute`` (blocking: the launch screen calls it from a
worker thread and stops it with the ``cancel`` event). No textual here.
"""

from __future__ import annotations

import shlex
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from advisor.errors import UserError
from advisor.plan import Plan
from tui.state import WizardState

if TYPE_CHECKING:
    from advisor.hardware import Machine
    from tui.compute import RecView

@dataclass(frozen=True)
class LaunchChoice:
    """What the launch form says."""

    target: str = "synthetic"  # a recipe name, or "script"
    script: str = ""  # "train.py --lr {lr}" (shell words) when target == "script"
    cpu: bool = True
    processes: int = 2
    micro_batch: int | None = None
    max_steps: int | None = 20


def build_plan(choice: LaunchChoice, state: WizardState, view: RecView | None = None,
               machine: Machine | None = None) -> tuple[Plan, list[str]]:
    """(plan, notes on defaults applied): CPU processes from the wizard's choices, or the
    recommendation's GPU plan (``view``) when it is for this machine's GPUs."""
    if not choice.cpu:
        return _gpu_plan(state, view, machine), []
    if state.model is None:
        raise UserError("no model chosen", fix="pick one on the Model screen (F3)")
    from advisor.request import Request
    from launcher.cpu_plan import cpu_plan
    from rules.lr import recipe_for_request

    # The workload's request without the GPU fields: CPU processes are counted by the form.
    req = Request(model=state.model, micro_batch=choice.micro_batch, **state.workload.request_fields())
    return cpu_plan(req, recipe_for_request(req), processes=choice.processes, max_steps=choice.max_steps)


def check_fits(plan: Plan) -> None:
    """Refuse a plan this machine cannot run, as ``advise launch`` does (``launcher.preflight``;
    never forced here).

    The form's default (two processes) is no promise for every model: llama3-8b on CPU needs
    ~150 GiB per process. Called from the launch worker, before any record or process: sizing a
    ``--module`` model traces it, which must not freeze the screen."""
    from launcher.preflight import check_here

    check_here(plan)


def _gpu_plan(state: WizardState, view: RecView | None, machine: Machine | None) -> Plan:
    if machine is None or not machine.has_gpu:
        raise UserError("no GPU on this machine", fix="launch on CPU processes (gloo) instead")
    if view is None:
        raise UserError("no GPU plan yet", fix="open the Recommendation (F5) first, or launch on CPU processes")
    if state.hardware.mode == "planned":
        raise UserError(f"the plan is for {state.hardware.label(machine)}, not for this machine's GPUs",
                        fix="switch Hardware (F2) back to the detected GPUs, or save the plan (F5, s) for that machine")
    if not view.rec.recommendation.fits:
        raise UserError("the recommended configuration does not fit in GPU memory",
                        fix="pick a fitting alternative (F5, tab 5) and plan with it, or launch on CPU processes")
    plan = view.plan
    if plan.nodes > 1 or plan.world_size > len(machine.gpus):
        raise UserError(f"the plan needs {plan.world_size} GPUs on {plan.nodes} node(s); this machine has "
                        f"{len(machine.gpus)}", fix="launch multi-node plans with `advise launch --plan` on each node")
    return plan


def build_target(choice: LaunchChoice, plan: Plan):
    """The launcher Target, checked as ``advise launch`` checks it."""
    from launcher.command import Target, check_target

    if choice.target == "script":
        try:
            words = shlex.split(choice.script)
        except ValueError as exc:  # "No closing quotation": a typo in the field, not a crash of the screen
            raise UserError(f"cannot read the script line: {exc}", fix="close the quote, or escape it with \\") from None
        if not words:
            raise UserError("no script given", fix="type the script and its arguments, e.g. train.py --lr {lr}")
        return Target.from_cli(None, words)
    target = Target.from_cli(choice.target, [])
    check_target(target, plan)
    return target


def create_run(store, plan: Plan, target) -> tuple[object, Path]:
    """A store record (queued) and its run directory, as ``advise launch`` makes them."""
    from launcher.home import new_run

    return new_run(store, Path(store.path).parent, plan, target)


def execute_run(store, run_id: str, plan: Plan, target, run_dir: Path, *, max_steps: int | None,
                cancel: threading.Event, echo: IO[str] | None, grace_s: float = 5.0):
    """Run to a terminal status (blocking) and return the final RunRecord."""
    from launcher.runner import RunOptions, execute

    options = RunOptions(max_steps=max_steps, grace_s=grace_s)
    return execute(store, run_id, plan, target, run_dir, options, cancel=cancel, echo=echo)


# Short on purpose: the wizard's probe is a check before a launch, not a benchmark.
PROBE_WARMUP, PROBE_STEPS = 2, 5


def probe_first(plan: Plan, home: Path, *, cancel: threading.Event, progress=None):
    """``advise launch --probe`` for the wizard: the plan's per-GPU configuration measured in a child
    process (``launcher.probe``), its factors stored in ``home``; returns the ProbeResult (blocking)."""
    from launcher.probe import probe_plan

    return probe_plan(plan, home=home, warmup=PROBE_WARMUP, steps=PROBE_STEPS, cancel=cancel, progress=progress)


def probe_summary(result) -> tuple[bool, list[str]]:
    """(launch may go on, lines for the run log): measured beside estimated, or why not."""
    tried = ", ".join(f"micro-batch {a.micro_batch}: {a.status}" for a in result.attempts)
    if result.status != "ok":
        why = result.error or result.status
        if result.status == "oom":
            from advisor.setup import shrinking

            why += (f" — lower memory per GPU (checkpointing, {', '.join(s.phrase for s in shrinking())}, a shorter "
                    "sequence) and plan again")
        return False, [f"probe {result.status}: {why}", f"attempts: {tried}"]
    m, e = result.measured, result.estimate
    util = f", GPU {m.gpu_util_pct:.0f}% busy" if m.gpu_util_pct is not None else ""
    lines = [f"probe on {result.device} ({m.implementation}), micro-batch {result.config.micro_batch}:",
             f"  peak memory {m.peak_gib:.3f} GiB measured, {e.memory.peak_gib:.3f} estimated "
             f"(x{result.memory_ratio or 0:.2f})" + (f", {m.reserved_gib:.3f} reserved" if m.reserved_gib else ""),
             f"  {m.samples_per_s:,.2f} samples/s measured, {e.throughput.samples_per_s:,.2f} estimated "
             f"(x{result.throughput_ratio or 0:.2f}){util}"]
    if len(result.attempts) > 1:
        lines.append(f"  attempts: {tried}")
    if result.stored:
        lines.append(f"  factors stored for later estimates ({result.factor_key})")
    if result.host_stored:  # advisor.host_speed: this machine's dispatch speed, for every later estimate here
        lines.append(f"  host dispatch x{result.host_factor:.2f} of the reference host, stored for every model")
    return True, lines


def submit_slurm(store, plan: Plan, target, *, max_steps: int | None = None):
    """Hand the plan to Slurm: ``advise submit --slurm``'s one call (``launcher.slurm_jobs.submit_run``),
    with the partition's defaults; refusals are the command's (one line, nothing recorded)."""
    from launcher.slurm import SlurmRequest
    from launcher.slurm_jobs import submit_run

    return submit_run(Path(store.path).parent, plan, target, SlurmRequest(max_steps=max_steps))
