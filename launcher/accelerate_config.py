"""Plan -> the YAML config ``accelerate launch --config_file`` reads.

The file is the hand-off to users: what cardwise launched, they can launch again by hand
(``accelerate launch --config_file runs/ID/accelerate_config.yaml train.py``) or edit. So it
carries everything that is a property of the plan (process counts, machines, precision, FSDP,
compile), while per-launch details (a free port, log directories) go on the command line,
which Accelerate lets override the file.

CPU runs. ``distributed_type: MULTI_CPU`` makes Accelerate use ``mpirun`` (or one process
without it), so several CPU ranks are launched as ``MULTI_GPU`` through torchrun with
``CUDA_VISIBLE_DEVICES=`` and ``ACCELERATE_USE_CPU=true`` in the environment: each rank then
finds no GPU and Accelerate sets up gloo (``DistributedType.MULTI_CPU``). The file's header
comment says so, since a YAML file cannot carry environment variables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from advisor.config import Strategy
from advisor.errors import UserError
from advisor.plan import Plan
from advisor.setup import offloads
from advisor.setup.constraints import ACCELERATE_ROWS, Combo, check
from launcher.setup_launch import CONFIG, FSDP_SECTION, apply

# Environment a CPU plan needs on top of the config file (see module docstring).
CPU_ENV = {"CUDA_VISIBLE_DEVICES": "", "ACCELERATE_USE_CPU": "true"}

# Layer classes FSDP wraps one unit each, for the models cardwise builds itself (advisor.zoo).
_ZOO_LAYERS = {"cnn": "Bottleneck,BasicBlock"}
_ZOO_TRANSFORMER_LAYER = "Block"


def distributed_type(plan: Plan) -> str:
    """Accelerate's ``distributed_type`` for the plan (see the module docstring for CPU); what Accelerate
    cannot launch is refused by advisor.setup.constraints (DataParallel, FSDP on CPU ranks, one strategy
    single over several ranks)."""
    strategy = plan.config.strategy
    if offloads(plan.config) and strategy is not Strategy.ddp:
        strategy = Strategy.fsdp  # CPU offload is FSDP's, on one process too (FSDP over world size 1)
    check(Combo(strategy=strategy, ranks=plan.world_size, cpu=plan.cpu), only=ACCELERATE_ROWS, launch=True)
    if strategy.sharded:
        return "FSDP"
    if plan.world_size == 1:
        return "NO"  # DDP over one rank is plain single-device training
    return "MULTI_GPU"


def fsdp_section(plan: Plan) -> dict[str, Any]:
    """FSDP2 settings: full sharding, one unit per transformer layer (or CNN block).

    FSDP2 (``fully_shard``) is what Accelerate and torchtitan recommend for new code: DTensor
    parameters, no flat-param, and per-parameter sharding that composes with torch.compile.
    Activation checkpointing is asked of FSDP here so that user scripts get it too; the
    runtime helper then does not checkpoint a second time.
    """
    sec: dict[str, Any] = {
        "fsdp_version": 2,
        # ZeRO-3: free gathered weights after each unit's forward (fsdp-keep keeps them: launcher.setup_launch)
        "fsdp_reshard_after_forward": True,
        "fsdp_offload_params": False,  # CPU offload's: launcher.setup_launch
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",  # each rank saves its shard: no rank-0 gather
        "fsdp_cpu_ram_efficient_loading": False,
        "fsdp_activation_checkpointing": bool(plan.config.grad_ckpt),
    }
    layers = _wrap_layers(plan)
    if layers is None:
        # Unknown model: let Accelerate use HF's `_no_split_modules` if it is a transformers model,
        # else wrap every submodule above 10M parameters.
        if plan.model.hf_config:
            sec["fsdp_auto_wrap_policy"] = "TRANSFORMER_BASED_WRAP"
        else:
            sec["fsdp_auto_wrap_policy"] = "SIZE_BASED_WRAP"
            sec["fsdp_min_num_params"] = 10_000_000
    else:
        sec["fsdp_auto_wrap_policy"] = "TRANSFORMER_BASED_WRAP"
        sec["fsdp_transformer_layer_cls_to_wrap"] = layers
    apply(FSDP_SECTION, plan, sec)  # the active setups' own settings
    return sec


def _wrap_layers(plan: Plan) -> str | None:
    if not plan.model.name:
        return None
    try:
        from advisor.catalog import catalog_model

        spec = catalog_model(plan.model.name)
    except Exception:  # unknown name or missing trace data: fall back to size-based wrapping
        return None
    return _ZOO_LAYERS.get(spec.family, _ZOO_TRANSFORMER_LAYER)


def accelerate_config(plan: Plan, *, machine_rank: int = 0, main_address: str | None = None,
                      main_port: int | None = None, gpu_ids: list[int] | None = None) -> dict[str, Any]:
    """The config dict for this plan, as ``accelerate config`` would write it.

    ``machine_rank``/``main_address``/``main_port`` matter for multi-node plans (one file per
    node, as with ``accelerate config``); ``gpu_ids`` pins the GPUs (the queue service's
    assignment), default all visible.
    """
    dtype = distributed_type(plan)
    if plan.nodes > 1 and not main_address:
        raise UserError(f"a {plan.nodes}-node plan needs the address of node 0",
                        fix="add --main-address HOST (reachable from every node) and --node-rank R")
    if not 0 <= machine_rank < plan.nodes:
        raise UserError(f"--node-rank {machine_rank} is outside 0..{plan.nodes - 1}", fix=f"use 0 to {plan.nodes - 1}")
    if gpu_ids is not None and not plan.cpu and len(gpu_ids) != plan.processes_per_node:
        raise UserError(f"{len(gpu_ids)} GPUs assigned but the plan has {plan.processes_per_node} processes per node",
                        fix="assign as many GPUs as processes per node")
    cfg: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": dtype,
        "downcast_bf16": "no",
        "enable_cpu_affinity": False,
        "gpu_ids": "all" if (gpu_ids is None or plan.cpu) else ",".join(str(g) for g in gpu_ids),
        "machine_rank": machine_rank,
        "main_training_function": "main",
        "mixed_precision": plan.mixed_precision,
        "num_machines": plan.nodes,
        "num_processes": plan.world_size,  # Accelerate's num_processes is the total over machines
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": plan.cpu,
    }
    if plan.nodes > 1:
        cfg["main_process_ip"] = main_address
        cfg["main_process_port"] = int(main_port or 29500)
    if plan.config.compile:
        # Accelerator.prepare compiles the model, so plain Accelerate scripts get compile too;
        # launcher.runtime sees the dynamo plugin and does not compile again.
        cfg["dynamo_config"] = {"dynamo_backend": "INDUCTOR", "dynamo_mode": "default",
                                "dynamo_use_dynamic": False, "dynamo_use_fullgraph": False}
    if dtype == "FSDP":
        cfg["fsdp_config"] = fsdp_section(plan)
    apply(CONFIG, plan, cfg)  # the active setups' own sections (HSDP's ParallelismConfig)
    return cfg


def header(plan: Plan) -> str:
    """Comment lines for the top of the file: how to reuse it by hand."""
    env = " ".join(f"{k}={v}" for k, v in CPU_ENV.items()) + " " if plan.cpu and plan.world_size > 1 else ""
    lines = [f"# Accelerate config written by cardwise for {plan.model.label()}",
             f"# ({plan.world_size} rank(s) on {plan.nodes} node(s), {plan.config.precision.value}, "
             f"micro-batch {plan.config.micro_batch} x accumulation {plan.config.grad_accum}, lr {plan.lr:g}).",
             f"# Reuse: {env}accelerate launch --config_file THIS_FILE your_script.py"]
    if plan.nodes > 1:
        lines.append("# On each node set machine_rank (0 on the node at main_process_ip).")
    return "\n".join(lines) + "\n"


def to_yaml(cfg: dict[str, Any], plan: Plan | None = None) -> str:
    import yaml

    body = yaml.safe_dump(cfg, sort_keys=True, default_flow_style=False)
    return (header(plan) if plan is not None else "") + body


def write_accelerate_config(plan: Plan, path: Path, **kwargs: Any) -> Path:
    """Write the plan's config to ``path`` (see ``accelerate_config`` for kwargs)."""
    path = Path(path)
    path.write_text(to_yaml(accelerate_config(plan, **kwargs), plan))
    return path
