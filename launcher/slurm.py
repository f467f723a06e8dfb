"""``advise launch --emit slurm``: an sbatch script that runs the plan on a Slurm allocation.

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

from advisor.errors import UserError
from advisor.plan import Plan
from launcher.accelerate_config import CPU_ENV, accelerate_config, to_yaml
from launcher.command import ENV_MAX_STEPS, ENV_METRICS, ENV_PLAN, ENV_RUN_DIR, Target, fill_placeholders
from launcher.recipes import RECIPES

MAIN_ADDR_VAR = "MAIN_ADDR"
MAIN_PORT_VAR = "MAIN_PORT"
_ADDR_TOKEN = "__CARDWISE_MAIN_ADDR__"
_PORT_TOKEN = 29399  # replaced by ${MAIN_PORT} in the heredoc
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SBATCH_VALUE = re.compile(r"[A-Za-z0-9._:,+=@/-]+")


class Var(str):
    """An argument the per-node shell must expand: it names only variables this script sets."""


def _refuse_control(what: str, value: str) -> str:
    if _CONTROL.search(value):
        raise UserError(f"{what} contains a control character ({value!r}): it would change the sbatch script",
                        fix="rename the file or drop the character; newlines and tabs cannot be passed through Slurm here")
    return value


def sbatch_script(plan: Plan, target: Target, *, job_name: str | None = None, max_steps: int | None = None,
                  main_port: int = 29500, python: str = "python", time_limit: str | None = None,
                  partition: str | None = None, extra_env: dict[str, str] | None = None) -> str:
    """The sbatch script text for ``plan`` running ``target``; ``extra_env`` is exported for the ranks
    as a local launch adds it (``launcher.command.checkpoint_env``: checkpoints, final weights)."""
    label = _refuse_control("the model", plan.model.label())
    name = job_name or f"cardwise-{label.split('/')[-1].split(':')[0]}"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name)  # an #SBATCH line is not shell-quoted: keep it plain
    for what, value in (("--time", time_limit), ("--partition", partition)):
        if value is not None and not _SBATCH_VALUE.fullmatch(value):
            raise UserError(f"{what} {value!r} is not a Slurm value", fix=f"e.g. {what} {'2:00:00' if what == '--time' else 'gpu'}")
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
          "#SBATCH --output=%x-%j.out"]
    if not plan.cpu:
        sb.append(f"#SBATCH --gpus-per-node={plan.processes_per_node}")
    if time_limit:
        sb.append(f"#SBATCH --time={time_limit}")
    if partition:
        sb.append(f"#SBATCH --partition={partition}")
    env_lines = [f"export {ENV_PLAN}=\"$RUN_DIR/plan.json\"", f"export {ENV_RUN_DIR}=\"$RUN_DIR\"",
                 f"export {ENV_METRICS}=\"$RUN_DIR/metrics.jsonl\"", "export PYTHONUNBUFFERED=1"]
    if max_steps:
        env_lines.append(f"export {ENV_MAX_STEPS}={int(max_steps)}")
    if plan.cpu:
        env_lines += [f"export {k}={shlex.quote(v)}" for k, v in CPU_ENV.items()]
    env_lines += [f"export {k}={shlex.quote(v)}" for k, v in (extra_env or {}).items()]
    plan_json = plan.model_dump_json(indent=2)
    lines = [
        "#!/bin/bash",
        f"# Written by `advise launch --emit slurm` for {label}: {plan.nodes} node(s) x "
        f"{plan.processes_per_node} rank(s), micro-batch {plan.config.micro_batch} x accumulation "
        f"{plan.config.grad_accum}, global batch {plan.global_batch}, lr {plan.lr:g}.",
        *sb,
        "set -euo pipefail",
        "",
        "RUN_DIR=${CARDWISE_RUN_DIR:-$PWD/cardwise-$SLURM_JOB_ID}",
        "mkdir -p \"$RUN_DIR\"",
        f"{MAIN_ADDR_VAR}=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)",
        f"{MAIN_PORT_VAR}=${{{MAIN_PORT_VAR}:-{int(main_port)}}}",
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
        f"srun --kill-on-bad-exit=1 --ntasks-per-node=1 bash -c {shlex.quote('exec ' + inner)}",
    ]
    return "\n".join(lines) + "\n"


def _dq(arg: str) -> str:
    """Double-quote an argument that holds $VARIABLES (expanded by the per-node shell), escaping the rest."""
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`") + '"'
