"""Issue 38: CPU offload's host RAM per node (every rank's shard), checked against the node's RAM:
detected on this machine, or --host-ram with a unit (refused without one, as --network is)."""

from __future__ import annotations

import pytest

from advisor import hardware, units
from advisor.errors import UserError
from advisor.plan import ModelRef
from advisor.request import Request
from rules.api import recommend


def _h200s(n: int, ram_gib: float) -> hardware.Machine:
    gpus = [hardware.DetectedGpu(index=i, name="NVIDIA H200", memory_total_gib=140.4, memory_free_gib=140.0,
                                 compute_capability=(9, 0), uuid=f"GPU-{i}", spec="H200") for i in range(n)]
    return hardware.Machine(gpus=gpus, cpu_cores=64, ram_gib=ram_gib)


@pytest.mark.parametrize("text,gib", [("512GiB", 512), ("1TiB", 1024), ("1 TiB", 1024), ("768GB", 768e9 / 2**30),
                                      ("2048MiB", 2)])
def test_host_ram_reads_binary_and_decimal_units(text, gib):
    assert units.host_ram_gib(text) == pytest.approx(gib)


@pytest.mark.parametrize("text,says", [("512", "has no unit"), ("512GX", "unknown unit"), ("0GiB", "more than 0"),
                                       ("lots", "cannot read")])
def test_host_ram_without_a_unit_is_refused(text, says):
    with pytest.raises(ValueError, match=says):
        units.host_ram_gib(text)
    with pytest.raises(UserError):
        Request(model=ModelRef(name="llama3-70b"), host_ram_gib=text)


def test_the_flag_travels_into_the_launch_command():
    req = Request(model=ModelRef(name="llama3-70b"), host_ram_gib="1TiB")
    assert req.to_argv()[-2:] == ["--host-ram", "1024GiB"]


def test_the_detected_ram_of_this_machine_is_the_nodes():
    """Planning for the GPUs detected here: the machine's RAM is the node's, and offload is checked per node
    (llama3-70b over 8 H200s offloads ~1 TiB per node: 512 GiB here cannot hold it, 2 TiB can)."""
    req = Request(model=ModelRef(name="llama3-70b"), seq_len=2048, cpu_offload=True)
    short = recommend(req, machine=_h200s(8, 512.0))
    assert "offload.host-ram-short" in short.fired
    m = short.estimate.memory
    assert m.host_node_gib == pytest.approx(m.host_gib * short.recommendation.gpus) and m.host_node_gib > 1000
    assert "detected on this machine" in " ".join(short.warnings)
    roomy = recommend(req, machine=_h200s(8, 2048.0))
    assert "offload.host-ram-short" not in roomy.fired
    given = recommend(req.model_copy(update={"host_ram_gib": 2048.0}), machine=_h200s(8, 512.0))
    assert "offload.host-ram-short" not in given.fired  # --host-ram names the node's RAM, over what is detected
