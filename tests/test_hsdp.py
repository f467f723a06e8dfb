"""HSDP (FSDP inside each node, DDP across nodes): estimated and launchable (issue 27's planner
searches it on whole nodes beyond one)."""

from __future__ import annotations

import pytest

from advisor.calibration import default_calibration
from advisor.catalog import catalog_model
from advisor.config import Strategy, TrainConfig
from advisor.errors import UserError
from advisor.estimate import estimate
from advisor.gpus import find_gpu
from advisor.hardware import HardwareSpec
from advisor.plan import ModelRef, Plan
from advisor.request import Request
from launcher.accelerate_config import accelerate_config


def _est(strategy: str, nodes: int = 2, network_gbps: float = 50.0):
    hw = HardwareSpec(gpu=find_gpu("H100"), gpus_per_node=8, nodes=nodes, interconnect="nvlink", network_gbps=network_gbps)
    cfg = TrainConfig(micro_batch=2, grad_accum=4, seq_len=2048, strategy=strategy)
    return estimate(catalog_model("llama3-8b"), cfg, hw, calibration=default_calibration())


def test_hsdp_shards_over_a_node_and_keeps_the_all_gathers_off_the_network():
    fsdp, hsdp, one_node = _est("fsdp"), _est("hsdp"), _est("fsdp", nodes=1)
    # weights, gradients and states sharded over the node's 8 GPUs, not all 16
    assert hsdp.memory.optimizer_gib == pytest.approx(one_node.memory.optimizer_gib)
    assert hsdp.memory.optimizer_gib == pytest.approx(2 * fsdp.memory.optimizer_gib)
    # per micro-batch all-gathers stay on NVLink; only a gradient shard crosses nodes once a step
    assert hsdp.throughput.comm_s < fsdp.throughput.comm_s
    assert hsdp.throughput.samples_per_s > fsdp.throughput.samples_per_s


def test_hsdp_launches_as_fsdp2_with_accelerates_parallelism_config():
    plan = Plan(model=ModelRef(name="gpt2"), config=TrainConfig(micro_batch=2, grad_accum=1, seq_len=128, strategy="hsdp"),
                processes_per_node=8, nodes=2, cpu=False, global_batch=32, lr=1e-4, base_lr=1e-4, base_batch=32,
                warmup_steps=1)
    cfg = accelerate_config(plan, main_address="10.0.0.1")
    assert cfg["distributed_type"] == "FSDP" and cfg["fsdp_config"]["fsdp_version"] == 2
    assert cfg["parallelism_config"] == {"parallelism_config_dp_replicate_size": 2, "parallelism_config_dp_shard_size": 8}


def test_hsdp_on_one_node_is_refused():
    from advisor.setup.constraints import Combo, check

    with pytest.raises(UserError, match="--strategy hsdp with one node"):  # the request's pins, as the callers check them
        check(Combo.of_request(Request(model=ModelRef(name="gpt2"), strategy=Strategy.hsdp)))


def test_the_planner_offers_hsdp_only_on_whole_nodes():
    from advisor.hardware import Machine
    from rules.api import recommend

    rec = recommend(Request(model=ModelRef(name="llama3-8b"), gpu="H100", gpus=8, nodes=2, dataset_size=100_000, epochs=1),
                    machine=Machine(cpu_cores=64))
    hsdp = {c.gpus for c in rec.candidates if c.strategy is Strategy.hsdp}
    assert hsdp == {16}
