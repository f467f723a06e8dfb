"""fsdp-keep: FSDP with the gathered weights kept across gradient accumulation (issue 27's planner).

Estimated (memory: a full unsharded copy of the weights and gradients; communication: one all-gather
and one reduce-scatter per unit and optimizer step), searched by the planner where it fits and beats
plain FSDP, pinned with --strategy fsdp-keep, launched as FSDP2 with reshard_after_forward off plus the
runtime's per-micro-batch switch (launcher.keep_gathered), which one 2-rank gloo run checks for real.
The recommendations it changes are cases in tests/cases/rules.toml and errors.toml.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.calibration import default_calibration
from advisor.catalog import catalog_model
from advisor.comm import Topology, comm_constants, fsdp_comm, fsdp_keep_comm
from advisor.config import Strategy, TrainConfig
from advisor.errors import UserError
from advisor.estimate import estimate
from advisor.hardware import HardwareSpec, Machine, resolve_hardware
from advisor.plan import ModelRef, Plan
from launcher.accelerate_config import accelerate_config
from ports import free_port

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).with_name("scripts") / "keep_gathered_gloo.py"


def _hw(gpu: str, n: int) -> HardwareSpec:
    return resolve_hardware(Machine(cpu_cores=64), gpu=gpu, gpus=n)


def _est(strategy: str, gpu: str = "A100-PCIE-80GB", n: int = 8, micro: int = 1, accum: int = 16):
    cfg = TrainConfig(micro_batch=micro, grad_accum=accum, seq_len=2048, precision="bf16", strategy=strategy)
    return estimate(catalog_model("llama3-8b"), cfg, _hw(gpu, n), calibration=default_calibration())


def test_keep_gathers_once_per_step_and_holds_an_unsharded_copy():
    plain, keep = _est("fsdp"), _est("fsdp-keep")
    params, units = keep.model.params, 32  # llama3-8b: one FSDP unit per decoder layer
    # memory: plain FSDP's shards, plus the bf16 weights and gradients of the whole model, unsharded
    assert keep.memory.detail["fsdp_kept_weights_gib"] == pytest.approx(params * 2 / 2**30)
    assert keep.memory.detail["unsharded_gradients_gib"] == pytest.approx(params * 2 / 2**30)
    assert keep.memory.optimizer_gib == pytest.approx(plain.memory.optimizer_gib)
    assert keep.memory.weights_gib == pytest.approx(plain.memory.weights_gib)
    assert {p.name for p in keep.memory.peak_parts} >= {"FSDP kept weights", "gradients"}
    # at the peak (a later micro-batch's backward) they replace plain FSDP's two gathered units and its
    # sharded accumulated gradients
    m, q = keep.memory, plain.memory
    assert m.peak_at == q.peak_at == "backward"
    assert m.peak_gib == pytest.approx(q.peak_gib - q.detail["fsdp_gathered_gib"] - q.gradients_gib
                                       + m.detail["fsdp_kept_weights_gib"] + m.detail["unsharded_gradients_gib"])
    # communication: one gather and one reduce-scatter per unit a step, against 2 x 16 gathers per unit
    ag = {c.op: c.count for c in keep.throughput.comm.collectives}
    assert ag == {"all-gather": units, "reduce-scatter": units}
    assert {c.op: c.count for c in plain.throughput.comm.collectives}["all-gather"] == 2 * units * 16
    assert keep.throughput.comm_s < plain.throughput.comm_s / 10
    assert keep.throughput.exposed_comm_s < plain.throughput.exposed_comm_s
    assert keep.throughput.samples_per_s > 2 * plain.throughput.samples_per_s  # 1 x 16 over PCIe: comm-bound
    # the compute is the same step's
    assert keep.throughput.compute_s == pytest.approx(plain.throughput.compute_s)


def test_keep_without_accumulation_is_plain_fsdp():
    topo = Topology(per_node=8, nodes=1, intra="pcie", intra_gbps=32)
    k = comm_constants()
    a = fsdp_comm(16e9, 16e9, 32, topo, 1.0, 1, k)
    b = fsdp_keep_comm(16e9, 16e9, 32, topo, 1.0, 1, k)
    assert (a.total_s, a.exposed_s) == (b.total_s, b.exposed_s)
    # with accumulation the gathers stop repeating: the total no longer grows with it
    c4, c8 = fsdp_keep_comm(16e9, 16e9, 32, topo, 1.0, 4, k), fsdp_keep_comm(16e9, 16e9, 32, topo, 1.0, 8, k)
    assert c4.total_s == pytest.approx(c8.total_s) and c4.exposed_s == pytest.approx(c8.exposed_s)


def test_keep_one_accumulation_step_is_refused():
    from advisor.setup.constraints import Combo, check

    # the table of what combines (advisor.setup.constraints), as every caller with a configuration checks it
    with pytest.raises(UserError, match="fsdp-keep with accumulation 1"):
        check(Combo.of_config(TrainConfig(micro_batch=4, grad_accum=1, strategy="fsdp-keep"), ranks=8))


def _recommend(argv: list[str]):
    from cli.flags import request_from_namespace
    from cli.main import build_parser
    from rules.api import recommend

    return recommend(request_from_namespace(build_parser("recommend").parse_args(argv)),
                     machine=Machine(cpu_cores=64), calibration=default_calibration())


def test_planner_takes_keep_where_communication_dominates_and_lists_it():
    rec = _recommend(["--model", "llama3-8b", "--gpu", "A100-PCIE-80GB", "--gpus", "8", "--seq-len", "2048",
                      "--dataset-size", "100000", "--epochs", "1"])
    r = rec.recommendation
    assert (r.strategy, r.gpus) == ("fsdp-keep", 8) and r.grad_accum > 1 and r.global_batch == 128
    keep = [c for c in rec.candidates if c.strategy is Strategy.fsdp_keep and c.gpus == 8]
    plain = [c for c in rec.candidates if c.strategy is Strategy.fsdp and c.gpus == 8 and c.fits]
    assert keep and all(c.config.grad_accum > 1 for c in keep)
    best_plain = max(c.samples_per_s for c in plain)
    assert rec.estimate.throughput.samples_per_s >= 1.02 * best_plain
    # the same list feeds the scaling table, and the report says what it is
    assert next(row for row in rec.scaling if row.gpus == 8).strategy == "fsdp-keep"
    text = json.dumps(rec.model_dump(mode="json"))
    assert f"weights kept gathered across the {r.grad_accum} accumulation steps" in text
    assert f"instead of {2 * r.grad_accum} times" in text


def test_planner_skips_keep_when_memory_is_tight():
    rec = _recommend(["--model", "llama3-8b", "--gpu", "L40S", "--gpus", "8", "--seq-len", "2048",
                      "--dataset-size", "100000", "--epochs", "1"])
    assert rec.recommendation.strategy == "fsdp"
    keep = [c for c in rec.candidates if c.strategy is Strategy.fsdp_keep and c.gpus == 8]
    assert keep and not any(c.fits for c in keep)  # scored, and none fits the 48 GB cards
    assert all("does not fit" in c.rejected or "pruned" in c.rejected for c in keep)


# ------------------------------------------------------------------ launcher
def _plan(**kw) -> Plan:
    cfg = TrainConfig(micro_batch=2, grad_accum=4, seq_len=32, strategy="fsdp-keep")
    base = dict(model=ModelRef(name="mini-transformer"), config=cfg, processes_per_node=2, nodes=1, cpu=False,
                global_batch=16, lr=6e-4, base_lr=3e-4, base_batch=8, warmup_steps=10)
    base.update(kw)
    return Plan(**base)


def test_keep_launches_as_fsdp2_without_reshard_after_forward():
    cfg = accelerate_config(_plan())
    assert cfg["distributed_type"] == "FSDP" and cfg["fsdp_config"]["fsdp_version"] == 2
    assert cfg["fsdp_config"]["fsdp_reshard_after_forward"] is False
    assert accelerate_config(_plan(config=TrainConfig(micro_batch=2, grad_accum=4, seq_len=32, strategy="fsdp"))
                             )["fsdp_config"]["fsdp_reshard_after_forward"] is True
    # Accelerate 1.16 runs no FSDP on CPU processes (it would silently be DDP): refused as plain FSDP is
    with pytest.raises(UserError, match="cannot launch FSDP on CPU"):
        accelerate_config(_plan(cpu=True))


@pytest.mark.slow
def test_keep_gathered_on_two_gloo_ranks(tmp_path):
    """The runtime's switch (launcher.keep_gathered.before_micro_batch) on real FSDP2 over gloo: one
    all-gather per unit and step instead of two per micro-batch, the units unsharded between the
    micro-batches of a step, and the same losses and weights as plain FSDP."""
    port = free_port()
    raf = accelerate_config(_plan())["fsdp_config"]["fsdp_reshard_after_forward"]  # what the launch would pass
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "GLOO_SOCKET_IFNAME": "lo"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_addr", "127.0.0.1", "--master_port", str(port), str(SCRIPT), str(tmp_path),
                           str(raf).lower()], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):
        d = json.loads((tmp_path / f"rank{rank}.json").read_text())
        accum, plain, keep = d["accum"], d["plain"], d["keep"]
        units = keep["units"]
        assert d["world_size"] == 2 and units == keep["blocks"] + 1  # a unit per Block, and the root
        for p, k in zip(plain["steps"], keep["steps"]):
            assert p["all_gathers"] == 2 * units * accum and k["all_gathers"] == units
            assert p["reduce_scatters"] == k["reduce_scatters"] == units  # both reduce once a step
            assert p["unsharded_after_backward"] == [False] * accum
            assert k["unsharded_after_backward"] == [True] * (accum - 1) + [False]  # resharded for the step
            assert k["losses"] == pytest.approx(p["losses"], rel=1e-6, abs=1e-7)
        assert keep["param_sum"] == pytest.approx(plain["param_sum"], rel=1e-9)


def test_an_oom_under_keep_retries_as_plain_fsdp_first():
    from launcher.oom import retry_decision, retry_note

    plan = _plan()
    nxt, why = retry_decision(True, plan, attempt=1, max_retries=3)
    assert why is None and nxt.config.strategy is Strategy.fsdp
    assert (nxt.config.micro_batch, nxt.config.grad_accum, nxt.global_batch) == (2, 4, 16)
    assert "retrying as plain FSDP" in retry_note(plan, nxt)
    again, _ = retry_decision(True, nxt, attempt=2, max_retries=3)
    assert (again.config.strategy, again.config.micro_batch, again.config.grad_accum) == (Strategy.fsdp, 1, 8)


def test_runtime_train_step_keeps_the_weights_between_micro_batches(tmp_path):
    """Runtime.train_step on a real FSDP2 module (one gloo rank in this process): at the start of every
    micro-batch but a step's first, the units' weights are still gathered (plain tensors, not DTensor
    shards); the optimizer steps on the shards."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    from launcher.runtime import Runtime

    from accelerate.state import AcceleratorState

    plan = _plan(cpu=True, processes_per_node=1, global_batch=8,  # micro-batch 2 x accumulation 4
                 config=TrainConfig(micro_batch=2, grad_accum=4, seq_len=32, precision="fp32", strategy="fsdp-keep"))
    AcceleratorState._reset_state(reset_partial_state=True)  # a singleton: another test's Accelerator may differ
    rt = Runtime(plan, metrics_path=tmp_path / "metrics.jsonl")
    port = free_port()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
        mesh = init_device_mesh("cpu", (1,))
        for unit in model:
            fully_shard(unit, mesh=mesh, reshard_after_forward=False)  # the plan's Accelerate config
        fully_shard(model, mesh=mesh, reshard_after_forward=False)
        opt = rt.accelerator.prepare_optimizer(torch.optim.AdamW(model.parameters(), lr=1e-2))
        seen: list[bool] = []

        def loss_fn(m, batch):
            seen.append(any(isinstance(p, DTensor) for p in m.parameters()))  # sharded at this micro-batch's start?
            return torch.nn.functional.mse_loss(m(batch[0]), batch[1])

        before = [p.detach().full_tensor().clone() for p in model.parameters()]
        batches = iter(lambda: (torch.randn(2, 4), torch.randn(2, 1)), None)
        for _ in range(2):
            rt.train_step(model, opt, batches, loss_fn=loss_fn)
        assert seen == [True, False, False, False] * 2  # gathered once a step, kept for the 3 micro-batches after
        assert all(isinstance(p, DTensor) for p in model.parameters())  # resharded for the optimizer step
        after = [p.detach().full_tensor() for p in model.parameters()]
        assert all(not torch.equal(a, b) for a, b in zip(before, after)) and rt.step == 2
    finally:
        dist.destroy_process_group()
        AcceleratorState._reset_state(reset_partial_state=True)


@pytest.mark.parametrize("strategy, sync_each", [("fsdp", True), ("hsdp", True), ("fsdp-keep", False), ("ddp", False)])
def test_plain_fsdp_reduce_scatters_every_micro_batch_as_estimated(strategy, sync_each):
    """Plain FSDP/HSDP keep gradients sharded (the estimate's memory and reduce-scatter per micro-batch):
    Accelerate's accumulate() must not enter no_sync for them, which would hold the whole model's
    gradients unsharded; fsdp-keep holds them unsharded by plan, DDP's no_sync costs nothing extra."""
    from accelerate.state import AcceleratorState

    from launcher.runtime import Runtime

    plan = _plan(cpu=True, processes_per_node=1, global_batch=8,
                 config=TrainConfig(micro_batch=2, grad_accum=4, seq_len=32, precision="fp32", strategy=strategy))
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        rt = Runtime(plan)
        assert rt.accelerator.gradient_state.plugin_kwargs.get("sync_each_batch", False) is sync_each
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
