"""Plan + what to run -> the exact argv and environment of one launch (no process is started).

Split as Accelerate splits ``prepare_simple_launcher_cmd_env`` (plan) from ``Popen`` (run): the
result, a ``LaunchSpec``, is plain data that ``--dry-run`` prints, the run store records and
``launcher.runner`` executes. It is always an argv list, never a shell string, so paths and
arguments with spaces or quotes reach the script unchanged.

User scripts are driven through placeholders in their arguments: ``{lr} {micro_batch}
{grad_accum} {global_batch} {precision} {warmup_steps}`` are replaced by the plan's values
(``{{lr}}`` stays a literal ``{lr}``), so e.g. a Hugging Face example script gets
``--learning_rate {lr} --per_device_train_batch_size {micro_batch}``. Other braces are left
alone (JSON arguments survive).
"""

from __future__ import annotations

import os
import re
import socket
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

import launcher
from advisor.errors import UserError
from advisor.hardware import threads_per_rank
from advisor.plan import Plan
from advisor.setup import offloads
from launcher.accelerate_config import CPU_ENV
from launcher.recipes import RECIPES


PLACEHOLDERS = ("lr", "micro_batch", "grad_accum", "global_batch", "precision", "warmup_steps")
_PLACEHOLDER_RE = re.compile(r"\{\{(" + "|".join(PLACEHOLDERS) + r")\}\}|\{(" + "|".join(PLACEHOLDERS) + r")\}")

# Environment variables the ranks read (launcher.runtime).
ENV_PLAN = "CARDWISE_PLAN"  # path of this attempt's plan.json
ENV_RUN_DIR = "CARDWISE_RUN_DIR"
ENV_METRICS = "CARDWISE_METRICS"  # path of metrics.jsonl
ENV_ATTEMPT = "CARDWISE_ATTEMPT"
ENV_MAX_STEPS = "CARDWISE_MAX_STEPS"
ENV_CHECKPOINT_EVERY = "CARDWISE_CHECKPOINT_EVERY"  # launcher.checkpoints: save_state every N steps
ENV_RESUME = "CARDWISE_RESUME"  # launcher.checkpoints: the checkpoint folder a resumed run starts from
ENV_FINAL_WEIGHTS = "CARDWISE_FINAL_WEIGHTS"  # "0": launcher.checkpoints saves no final weights (--no-final-weights)
LOOPBACK = "127.0.0.1"


def checkpoint_env(every: int | None, final_weights: bool = True, resume: Path | None = None) -> dict[str, str]:
    """The variables ``launcher.checkpoints`` reads in the ranks (``--checkpoint-every``, ``--no-final-weights``, resume)."""
    env = {ENV_RESUME: str(resume)} if resume is not None else {}
    if every:
        env[ENV_CHECKPOINT_EVERY] = str(every)
    if not final_weights:
        env[ENV_FINAL_WEIGHTS] = "0"
    return env


class Target(BaseModel):
    """What every rank runs: a built-in recipe, a script file, or a ``python -m`` module."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["recipe", "script", "module"]
    name: str = Field(description="recipe name, script path, or module name")
    args: list[str] = Field(default_factory=list, description="arguments, placeholders unfilled")

    @classmethod
    def from_cli(cls, recipe: str | None, script_args: list[str], recipe_args: list[str] | None = None) -> "Target":
        """From ``--recipe NAME [-- RECIPE ARGS]`` or ``-- SCRIPT ARGS...`` (``-- -m pkg.mod ARGS`` for a module)."""
        if recipe:
            if recipe not in RECIPES:
                from advisor.errors import unknown_name

                raise unknown_name("recipe", recipe, RECIPES, "advise launch --help")
            # with --recipe, anything after `--` goes to the recipe (e.g. `-- --pool 8 --log-every 1`).
            # Recipes take options only, so a first word that is not one is a script (or a typo)
            # that would otherwise reach the recipe's parser in every rank.
            if script_args and not script_args[0].startswith("-"):
                raise UserError(f"--recipe {recipe} runs a built-in loop, and `{script_args[0]}` after -- "
                                "is not a recipe option",
                                fix=f"drop --recipe to run {script_args[0]}, or give only recipe options after -- "
                                    "(e.g. -- --log-every 1)")
            return cls(kind="recipe", name=recipe, args=[*(recipe_args or []), *script_args])
        if not script_args:
            raise UserError("nothing to launch", fix="add --recipe synthetic, or `-- train.py ARGS...` after the flags")
        if script_args[0] == "-m":
            if len(script_args) < 2:
                raise UserError("`-m` needs a module name", fix="-- -m mypkg.train --lr {lr}")
            return cls(kind="module", name=script_args[1], args=script_args[2:])
        path = Path(script_args[0]).expanduser()
        if not path.is_file():
            raise UserError("training script not found", where=str(path),
                            fix="give the path of a Python file after --, e.g. `-- train.py --lr {lr}`")
        return cls(kind="script", name=str(path.absolute()), args=script_args[1:])

    def label(self) -> str:
        return f"recipe {self.name}" if self.kind == "recipe" else Path(self.name).name


def check_target(target: "Target", plan) -> None:
    """What a recipe can train and the data it reads, checked before any rank starts (UserError
    with the fix; ``launcher.recipes.checks`` has one check per recipe)."""
    if target.kind != "recipe":
        return
    from launcher.recipes.checks import check_recipe

    check_recipe(target.name, target.args, plan)


class LaunchSpec(BaseModel):
    """One launch: argv and the environment variables cardwise adds to the caller's."""

    model_config = ConfigDict(extra="forbid")

    cmd: list[str]
    env: dict[str, str] = Field(description="added to (and overriding) os.environ at launch")
    cwd: str | None = None

    def full_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.env)
        return env

    def shell_line(self) -> str:
        """For people to read and copy (never executed by cardwise)."""
        import shlex

        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (prefix + " " if prefix else "") + shlex.join(self.cmd)


def placeholder_values(plan: Plan, max_steps: int | None = None) -> dict[str, str]:
    c = plan.config
    return {"lr": f"{plan.lr:.8g}", "micro_batch": str(c.micro_batch), "grad_accum": str(c.grad_accum),
            "global_batch": str(plan.global_batch), "precision": c.precision.value,
            # the warmup of the steps that run (advisor.schedule), as the runtime's own schedule
            "warmup_steps": str(plan.schedule(max_steps).warmup_steps)}


def fill_placeholders(args: list[str], plan: Plan, max_steps: int | None = None) -> list[str]:
    """Replace ``{lr}`` etc. in each argument with the plan's value; ``{{lr}}`` -> ``{lr}``."""
    values = placeholder_values(plan, max_steps)

    def sub(m: re.Match) -> str:
        return "{" + m.group(1) + "}" if m.group(1) else values[m.group(2)]

    return [_PLACEHOLDER_RE.sub(sub, a) for a in args]


def free_port() -> int:
    """A TCP port nobody listens on now (the kernel picks it), for a run's rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _package_root() -> str:
    return str(Path(launcher.__file__).resolve().parent.parent)


def _pythonpath() -> str:
    parts = [_package_root()] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(parts))


def build_launch_spec(plan: Plan, target: Target, *, config_path: Path, plan_path: Path, run_dir: Path,
                      log_dir: Path | None = None, main_port: int | None = None, attempt: int = 1,
                      max_steps: int | None = None, python: str | None = None,
                      extra_env: dict[str, str] | None = None) -> LaunchSpec:
    """The ``accelerate launch`` argv and env for ``plan`` running ``target``.

    ``config_path`` is the file from ``launcher.accelerate_config``; on one node ``main_port``
    (default: a free port) keeps concurrent runs apart; multi-node ports live in the config.
    ``log_dir`` receives torchrun's per-rank stdout/stderr (``--tee 3 --log_dir``), which only
    exists when there are several ranks; one rank's output is the launcher's own.
    """
    cmd = [python or sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config_path)]
    multi = plan.world_size > 1 or plan.config.strategy.sharded or offloads(plan.config)  # offload runs FSDP
    if multi and plan.nodes == 1:
        # One machine: the ranks meet on the loopback (MASTER_ADDR), not on a public address.
        cmd += ["--main_process_ip", LOOPBACK, "--main_process_port", str(main_port or free_port())]
    if multi and log_dir is not None:
        # torchrun writes LOG_DIR/<run>/attempt_0/<local_rank>/{stdout,stderr}.log and still
        # prints every line prefixed with its rank ("[default1]:"), which the launcher log keeps.
        cmd += ["--tee", "3", "--log_dir", str(log_dir), "--monitor_interval", "0.2"]
    if target.kind == "recipe":
        cmd += ["-m", RECIPES[target.name]]
    elif target.kind == "module":
        cmd += ["-m", target.name]
    else:
        cmd.append(target.name)
    cmd += fill_placeholders(target.args, plan, max_steps)

    env = {
        ENV_PLAN: str(plan_path),
        ENV_RUN_DIR: str(run_dir),
        ENV_METRICS: str(Path(run_dir) / "metrics.jsonl"),
        ENV_ATTEMPT: str(attempt),
        "PYTHONUNBUFFERED": "1",  # rank logs appear as they are written, and survive a kill
        # recipes are modules of this package: make them importable however cardwise was installed
        "PYTHONPATH": _pythonpath(),
    }
    if max_steps is not None:
        env[ENV_MAX_STEPS] = str(max_steps)
    if plan.cpu:
        env.update(CPU_ENV)
        # torchrun would force 1 thread per rank; share the cores out instead.
        if "OMP_NUM_THREADS" not in os.environ:
            env["OMP_NUM_THREADS"] = str(threads_per_rank(plan.processes_per_node))
    elif offloads(plan.config) and "OMP_NUM_THREADS" not in os.environ:
        # The offloaded optimizer step runs on the host: `accelerate launch` would give each GPU rank one
        # thread (OMP_NUM_THREADS=1 when unset), which made llama3.2-3b's step 31.7 s on the H200 host
        # (docs/design.md, "Memory compromises at launch"). Share the cores out among the node's ranks, as for --cpu.
        env["OMP_NUM_THREADS"] = str(threads_per_rank(plan.processes_per_node))
    if multi and plan.nodes == 1:
        # gloo's and NCCL's bootstrap sockets bind the interface named here: keep them on the loopback
        # unless the user chose one. (torch's TCPStore server has no bind option: see docs/service.md.)
        for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            if name not in os.environ:
                env[name] = "lo"
    env.update(extra_env or {})
    return LaunchSpec(cmd=cmd, env=env, cwd=None)
