"""The sbatch script that runs a plan on a Slurm allocation: ``advise launch --emit slurm`` prints
it, ``advise submit --slurm`` submits it (``launcher.slurm_jobs``), the same text from one function.

One Slurm task per node (``srun --ntasks-per-node=1``) runs ``accelerate launch``, which starts
that node's ranks; node 0 of the allocation is the rendezvous host (``c10d`` rendezvous on
``MAIN_PORT``), and each task passes its ``SLURM_NODEID`` as ``--machine_rank``. The plan and
the Accelerate config travel inside the script (heredocs), so the script is all one needs on the
cluster besides a Python environment with cardwise installed; ``--kill-on-bad-exit`` ends every
node when one fails.

This is a text generator, and what it writes is run by a shell, so: every argument that comes
from the user (script path, script arguments, python) is quoted with ``shlex`` (a ``$HOME`` or
``$(cmd)`` in an argument reaches the script literally); the only expansions are the variables
the script itself defines (``Var``); and any control character (a newline in a path would start a
new command line) is refused before anything is written.
"""

from __future__ import annotations

import re
import shlex
import sys

from pydantic import BaseModel, ConfigDict, Field

from advisor.errors import UserError
from advisor.plan import Plan
from launcher.accelerate_config import CPU_ENV, accelerate_config, to_yaml
from launcher.command import ENV_ATTEMPT, ENV_MAX_STEPS, ENV_METRICS, ENV_PLAN, ENV_RUN_DIR, Target, fill_placeholders
from launcher.recipes import RECIPES

MAIN_ADDR_VAR = "MAIN_ADDR"
MAIN_PORT_VAR = "MAIN_PORT"
_ADDR_TOKEN = "__CARDWISE_MAIN_ADDR__"
_PORT_TOKEN = 29399  # replaced by ${MAIN_PORT} in the heredoc
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SBATCH_VALUE = re.compile(r"[A-Za-z0-9._:,+=@/-]+")


class SlurmRequest(BaseModel):
    """What a Slurm job adds to the plan: sbatch's flags passed through, and the launch's own options.
    ``advise launch --emit slurm``, ``advise submit --slurm`` and the wizard build one and hand it to
    ``sbatch_script`` (via ``script_for``), so the three write the same script."""

    model_config = ConfigDict(extra="forbid")

    time_limit: str | None = Field(None, description="sbatch --time; None: the partition's default")
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    gres: str | None = Field(None, description="replaces --gpus-per-node (e.g. gpu:a100:4)")
    main_port: int | None = Field(None, description="None: derived from the job id")
    max_steps: int | None = None
    extra_env: dict[str, str] = Field(default_factory=dict, description="launcher.command.checkpoint_env")
    python: str = Field(default_factory=lambda: sys.executable,
                        description="the interpreter with cardwise installed (the job runs it on every node)")


def script_for(plan: Plan, target: Target, request: SlurmRequest) -> str:
    return sbatch_script(plan, target, max_steps=request.max_steps, main_port=request.main_port, python=request.python,
                         time_limit=request.time_limit, partition=request.partition, account=request.account,
                         qos=request.qos, gres=request.gres, extra_env=request.extra_env)


class Var(str):
    """An argument the per-node shell must expand: it names only variables this script sets."""


def _refuse_control(what: str, value: str) -> str:
    if _CONTROL.search(value):
        raise UserError(f"{what} contains a control character ({value!r}): it would change the sbatch script",
                        fix="rename the file or drop the character; newlines and tabs cannot be passed through Slurm here")
    return value


def cpus_per_task(plan: Plan) -> int:
    """CPUs the one task of a node needs: each rank and each of its DataLoader workers gets a core."""
    return plan.processes_per_node * (1 + plan.num_workers)


def sbatch_script(plan: Plan, target: Target, *, job_name: str | None = None, max_steps: int | None = None,
                  main_port: int | None = None, python: str = "python", time_limit: str | None = None,
                  partition: str | None = None, account: str | None = None, qos: str | None = None,
                  gres: str | None = None, extra_env: dict[str, str] | None = None) -> str:
    """The sbatch script text for ``plan`` running ``target``: what ``advise launch --emit slurm``
    prints and ``advise submit --slurm`` submits (launcher.slurm_jobs), one text for both.

    ``extra_env`` is exported for the ranks as a local launch adds it (``launcher.command.checkpoint_env``:
    checkpoints, final weights). ``main_port`` None: derived from the job id, so two jobs sharing a
    node do not collide on the rendezvous port. ``gres`` replaces ``--gpus-per-node`` (clusters that
    count GPUs as ``gpu:a100:4``)."""
    label = _refuse_control("the model", plan.model.label())
    name = job_name or f"cardwise-{label.split('/')[-1].split(':')[0]}"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name)  # an #SBATCH line is not shell-quoted: keep it plain
    examples = {"--time": "2:00:00", "--partition": "gpu", "--account": "myproject", "--qos": "normal", "--gres": "gpu:4"}
    for what, value in (("--time", time_limit), ("--partition", partition), ("--account", account), ("--qos", qos),
                        ("--gres", gres)):
        if value is not None and not _SBATCH_VALUE.fullmatch(value):
            raise UserError(f"{what} {value!r} is not a Slurm value", fix=f"e.g. {what} {examples[what]}")
    cfg = accelerate_config(plan, main_address=_ADDR_TOKEN, main_port=_PORT_TOKEN)
    cfg["rdzv_backend"] = "c10d"  # a rendezvous store on node 0 rather than fixed ranks
    cfg["same_network"] = False
    cfg_text = to_yaml(cfg, plan).replace("\\", "\\\\").replace("$", "\\$").replace("`", "\\`")
    cfg_text = cfg_text.replace(_ADDR_TOKEN, "${%s}" % MAIN_ADDR_VAR).replace(str(_PORT_TOKEN), "${%s}" % MAIN_PORT_VAR)

    launch = [python, "-m", "accelerate.commands.launch", "--config_file", Var("$RUN_DIR/accelerate_config.yaml"),
              "--machine_rank", Var("$SLURM_NODEID"), "--main_process_ip", Var("$" + MAIN_ADDR_VAR),
              "--main_process_port", Var("$" + MAIN_PORT_VAR), "--rdzv_backend", "c10d",
              "--tee", "3", "--log_dir", Var("$RUN_DIR/ranks/node$SLURM_NODEID")]
    if target.kind == "recipe":
        launch += ["-m", RECIPES[target.name]]
    elif target.kind == "module":
        launch += ["-m", target.name]
    else:
        launch.append(target.name)
    launch += fill_placeholders(target.args, plan, max_steps)
    for arg in launch:
        _refuse_control("a launch argument", arg)
    inner = " ".join(_dq(a) if isinstance(a, Var) else shlex.quote(a) for a in launch)

    sb = [f"#SBATCH --job-name={name}", f"#SBATCH --nodes={plan.nodes}", "#SBATCH --ntasks-per-node=1",
          f"#SBATCH --cpus-per-task={cpus_per_task(plan)}", "#SBATCH --output=%x-%j.out"]
    if gres:
        sb.append(f"#SBATCH --gres={gres}")
    elif not plan.cpu:
        sb.append(f"#SBATCH --gpus-per-node={plan.processes_per_node}")
    for flag, value in (("time", time_limit), ("partition", partition), ("account", account), ("qos", qos)):
        if value:
            sb.append(f"#SBATCH --{flag}={value}")
    env_lines = [f"export {ENV_PLAN}=\"$RUN_DIR/plan.json\"", f"export {ENV_RUN_DIR}=\"$RUN_DIR\"",
                 f"export {ENV_METRICS}=\"$RUN_DIR/metrics.jsonl\"", "export PYTHONUNBUFFERED=1",
                 # a job Slurm requeued runs again: its metrics rows count as the next attempt
                 f"export {ENV_ATTEMPT}=$((${{SLURM_RESTART_COUNT:-0}} + 1))"]
    if max_steps:
        env_lines.append(f"export {ENV_MAX_STEPS}={int(max_steps)}")
    if plan.cpu:
        env_lines += [f"export {k}={shlex.quote(v)}" for k, v in CPU_ENV.items()]
    env_lines += [f"export {k}={shlex.quote(v)}" for k, v in (extra_env or {}).items()]
    plan_json = plan.model_dump_json(indent=2)
    lines = [
        "#!/bin/bash",
        f"# Written by cardwise (`advise launch --emit slurm`, `advise submit --slurm`) for {label}: {plan.nodes} node(s) x "
        f"{plan.processes_per_node} rank(s), micro-batch {plan.config.micro_batch} x accumulation "
        f"{plan.config.grad_accum}, global batch {plan.global_batch}, lr {plan.lr:g}.",
        *sb,
        "set -euo pipefail",
        "",
        "RUN_DIR=${CARDWISE_RUN_DIR:-$PWD/cardwise-$SLURM_JOB_ID}",
        "mkdir -p \"$RUN_DIR\"",
        f"{MAIN_ADDR_VAR}=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)",
        # a port per job (20000-29999, below Linux's ephemeral range): jobs sharing node 0 do not collide
        f"{MAIN_PORT_VAR}=${{{MAIN_PORT_VAR}:-{int(main_port)}}}" if main_port else
        f"{MAIN_PORT_VAR}=${{{MAIN_PORT_VAR}:-$((20000 + SLURM_JOB_ID % 10000))}}",
        f"export RUN_DIR {MAIN_ADDR_VAR} {MAIN_PORT_VAR}",
        "",
        "cat > \"$RUN_DIR/plan.json\" <<'CARDWISE_PLAN_EOF'",
        plan_json,
        "CARDWISE_PLAN_EOF",
        "# unquoted heredoc: ${MAIN_ADDR} and ${MAIN_PORT} are filled in here",
        "cat > \"$RUN_DIR/accelerate_config.yaml\" <<CARDWISE_CONFIG_EOF",
        cfg_text.rstrip("\n"),
        "CARDWISE_CONFIG_EOF",
        "",
        *env_lines,
        "",
        "# one task per node; each starts its node's ranks and joins the rendezvous on node 0",
        # --cpus-per-task again: srun does not inherit it from sbatch (Slurm 22.05 release notes)
        f"srun --kill-on-bad-exit=1 --ntasks-per-node=1 --cpus-per-task={cpus_per_task(plan)} "
        f"bash -c {shlex.quote('exec ' + inner)}",
    ]
    return "\n".join(lines) + "\n"


def _dq(arg: str) -> str:
    """Double-quote an argument that holds $VARIABLES (expanded by the per-node shell), escaping the rest."""
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`") + '"'
