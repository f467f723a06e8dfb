"""The communication model (advisor.comm): ring arithmetic by hand, monotonic in ranks, link ordering,
DDP's buckets, FSDP under accumulation, HSDP, and the fit's stored constants reproduced."""

import json
import math

import pytest

from advisor.comm import (FITTED, MB, CommConstants, Topology, collective, comm_constants, ddp_bucket_runs, ddp_comm,
                          fsdp_comm, straggler_s)

K = CommConstants()


def ddp_bucket_bytes(grad_bytes):
    """Every bucket's size, in order (ddp_bucket_runs expanded)."""
    return [size for size, count in ddp_bucket_runs(grad_bytes) for _ in range(count)]


def exposed_after_backward(ready_and_cost, backward_s):
    """Collectives queued on one stream, each ready at its time (s into the backward) and lasting its cost:
    the time the last ends after the backward does (what ddp_comm computes in closed form over runs)."""
    end = 0.0
    for ready, cost in ready_and_cost:
        end = max(end, ready) + cost
    return max(0.0, end - backward_s)


def topo(n=8, intra="nvlink", gbps=300.0, nodes=1, net_gbps=25.0):
    return Topology(per_node=n, nodes=nodes, intra=intra, intra_gbps=gbps, network="infiniband", network_gbps=net_gbps)


def test_all_reduce_by_hand():
    c = collective("all-reduce", "x", 4e9, topo(8), K)
    assert c.bandwidth_s == pytest.approx(2 * 7 / 8 * 4e9 / (300e9 * K.bus_efficiency["nvlink"]))
    assert c.latency_s == pytest.approx(2 * 7 * K.alpha_us["nvlink"] * 1e-6)
    g = collective("all-gather", "x", 4e9, topo(8), K)
    assert g.bandwidth_s == pytest.approx(c.bandwidth_s / 2)


def test_monotonic_in_ranks():
    times = [collective("all-reduce", "x", 1e8, topo(n), K).seconds for n in (2, 4, 8)]
    assert times == sorted(times) and times[0] > 0
    waits = [straggler_s(0.1, n, 1, K, decoded_input=False) for n in (1, 2, 4, 8, 64)]
    assert waits[0] == 0 and waits == sorted(waits) and waits[-1] > waits[1]


def test_link_ordering():
    k = CommConstants()
    rate = {link: collective("all-reduce", "x", 1e9, topo(4, link, 64.0 if link != "nvlink" else 300.0), k).seconds
            for link in ("nvlink", "pcie", "pcie-nop2p")}
    assert rate["nvlink"] < rate["pcie"] < rate["pcie-nop2p"]
    one_node = collective("all-reduce", "x", 1e9, topo(8), k).seconds
    two = collective("all-reduce", "x", 1e9, topo(8, nodes=2, net_gbps=12.5), k).seconds
    assert two > one_node


def test_ddp_buckets():
    sizes = ddp_bucket_bytes(102 * MB)
    assert sizes[0] == MB and all(s == 25 * MB for s in sizes[1:-1]) and sum(sizes) == pytest.approx(102 * MB)
    assert len(sizes) == 1 + math.ceil(101 / 25)
    assert ddp_bucket_bytes(0.5 * MB) == [0.5 * MB]


def test_last_bucket_always_exposed():
    # ample backward: only the last bucket's time shows
    assert exposed_after_backward([(0.5, 0.1), (1.0, 0.2)], 1.0) == pytest.approx(0.2)
    # backlog: the earlier buckets run past the backward's end
    assert exposed_after_backward([(0.1, 1.0), (1.0, 0.2)], 1.0) == pytest.approx(0.3)
    b = ddp_comm(102 * MB * 4, topo(8), micro_s=0.1, grad_accum=1, k=K)
    assert 0 < b.exposed_s < b.total_s and b.buckets == len(ddp_bucket_bytes(102 * MB * 4))


def test_fsdp_gathers_repeat_per_micro_batch():
    one = fsdp_comm(2e9, 4e9, 24, topo(8), 0.05, 1, K)
    four = fsdp_comm(2e9, 4e9, 24, topo(8), 0.05, 4, K)
    assert four.total_s == pytest.approx(4 * one.total_s)
    assert four.collectives[0].count == 2 * 24 * 4


def test_hsdp_shards_in_node_replicates_across():
    t = topo(8, nodes=4, net_gbps=25.0)
    fsdp = fsdp_comm(2e9, 4e9, 24, t, 0.05, 1, K)
    hsdp = fsdp_comm(2e9, 4e9, 24, t, 0.05, 1, K, hybrid=True)
    assert hsdp.strategy == "hsdp" and any("across nodes" in c.what for c in hsdp.collectives)
    assert hsdp.total_s < fsdp.total_s  # gathers stay on NVLink; only a shard crosses the network


def test_stored_constants_are_the_fit_output():
    """advisor/data/multi_gpu.json and the source harnesses' efficiencies (benchmarks/calibration/multi_gpu/harness.json)
    are what the fit script writes (regenerate, then compare)."""
    from benchmarks.calibration.multi_gpu import fit

    stored = json.loads(FITTED.read_text())
    rows = fit.load_rows()
    held = [r for r in rows if r["split"] == "holdout"]
    assert len(held) >= 40 and {r["gpus"] for r in held} >= {1, 8}
    assert fit.harness_json(fit.fit_harness(rows, comm_constants())) == fit.HARNESS.read_text()
    assert fit.constants_json(fit.fitted_constants(fit.pairs(rows), fit.stored_harness())) == FITTED.read_text()
    assert set(stored["speedup_worst_holdout"]) == {r["link"] for r in held}  # a bound per link kind held out
    assert stored["source"].startswith(fit.SCRIPT)
    assert comm_constants() == CommConstants(**stored)


@pytest.mark.parametrize("grad_bytes, micro_s", [(102 * MB * 4, 0.1), (32e9, 0.05), (32e9, 5.0), (0.5 * MB, 0.01),
                                                 (26 * MB, 1e-4), (25 * MB * 40 + MB, 0.3)])
@pytest.mark.parametrize("intra, gbps", [("nvlink", 300.0), ("pcie-nop2p", 25.0)])
def test_ddp_exposure_in_runs_equals_the_bucket_by_bucket_queue(grad_bytes, micro_s, intra, gbps):
    """ddp_comm queues runs of equal buckets in closed form; it must equal queuing every bucket."""
    t = topo(8, intra=intra, gbps=gbps)
    backward_s, done, queue = micro_s * 2.0 / 3.0, 0.0, []
    for b in ddp_bucket_bytes(grad_bytes):
        done += b
        queue.append((backward_s * done / grad_bytes, collective("all-reduce", "bucket", b, t, K).seconds))
    got = ddp_comm(grad_bytes, t, micro_s=micro_s, grad_accum=1, k=K)
    assert got.exposed_s == pytest.approx(exposed_after_backward(queue, backward_s), rel=1e-9, abs=1e-15)
    assert got.total_s == pytest.approx(sum(c for _, c in queue), rel=1e-9)
    assert got.buckets == len(queue)
