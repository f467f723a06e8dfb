"""Communication and synchronisation of a data-parallel step: per-collective alpha-beta cost by link,
DDP's gradient buckets, FSDP's per-unit gathers with prefetch, HSDP, and the straggler wait.

A collective over a ring of n ranks costs, per step of the ring, a latency alpha and its share of the
bytes over the link's achieved bus bandwidth (Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009):
  all-reduce       2(n-1) alpha + 2(n-1)/n x bytes / busbw
  all-gather, reduce-scatter   (n-1) alpha + (n-1)/n x bytes / busbw
busbw = the link's per-direction bandwidth x an efficiency by link kind (nccl-tests report "busbw" in
exactly this sense: NCCL's PERFORMANCE.md). Across nodes NCCL's rings cross the network once per node:
the inter-node share runs over the node's network at its own efficiency.

DDP (torch.nn.parallel.DistributedDataParallel): gradients go in buckets of ``bucket_cap_mb`` = 25 MB,
the first one 1 MB (``dist._DEFAULT_FIRST_BUCKET_BYTES``), in reverse parameter order; a bucket's
all-reduce starts when the backward has produced it and runs after the previous one on NCCL's stream
(Li et al. 2020, "PyTorch Distributed", sec. 3.2.3 and Fig. 9). The last bucket is ready only when the
backward ends, so its all-reduce is always exposed, and so is any backlog the earlier ones left.
With accumulation (``no_sync`` on the other micro-batches) only the last backward overlaps.

FSDP: per wrapped unit (a transformer layer), an all-gather of its parameters before its forward and
again before its backward, and a reduce-scatter of its gradients after it; the next unit's gather is
prefetched under the current unit's compute (``forward_prefetch``/``BackwardPrefetch.BACKWARD_PRE``), so
a unit's communication is exposed only where it is longer than its compute, plus the first gather and
the last reduce-scatter. Under accumulation the gathers repeat every micro-batch (FSDP frees the
gathered weights after each use unless ``reshard_after_forward=False``).
HSDP (``ShardingStrategy.HYBRID_SHARD``): FSDP within a node, and an all-reduce of each rank's shard
across nodes (the gradients of one shard: bytes / GPUs per node) once per optimizer step.

Synchronisation: every rank waits for the slowest at each step's collective. With a step time whose
rank-to-rank spread has coefficient of variation cv, the expected maximum of n ranks is about
mean x (1 + cv x sqrt(2 ln n)) (the expected maximum of n normal variables, Gumbel's first-order
term), so the wait grows with the number of ranks; the spread of an optimizer step of A micro-batches
is cv / sqrt(A) (independent micro-steps). Decoded input (JPEG) adds its own spread (image sizes vary).

The constants (bus efficiencies, latencies, cv) are in ``advisor/data/multi_gpu.json``, written by
``python -m benchmarks.calibration.multi_gpu.fit`` from published multi-GPU rows.
"""

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

LinkKind = Literal["nvlink", "pcie", "pcie-nop2p", "infiniband", "ethernet"]
INTRA_LINKS: tuple[str, ...] = ("nvlink", "pcie", "pcie-nop2p")
FITTED = Path(__file__).with_name("data") / "multi_gpu.json"

# torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25); the first bucket is
# torch.distributed._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB (torch/nn/parallel/distributed.py).
DDP_BUCKET_MB = 25.0
DDP_FIRST_BUCKET_MB = 1.0
MB = 1024 * 1024


class CommConstants(BaseModel):
    """Fitted and sourced constants of the communication model (advisor/data/multi_gpu.json)."""

    model_config = ConfigDict(extra="forbid")

    # Achieved bus bandwidth over the link's per-direction bandwidth. nvlink: nccl-tests all-reduce
    # busbw on DGX A100 ~230 of 300 GB/s (NCCL PERFORMANCE.md's busbw; NVIDIA DGX A100 user guide);
    # pcie: P2P through a PCIe switch ~70%; pcie-nop2p: GeForce cards go through host memory (NCCL's
    # SHM transport), each byte crossing PCIe twice; network: NCCL over IB reaches ~90% of line rate,
    # over TCP sockets less. The intra-node ones are refit on published rows where they move the result.
    bus_efficiency: dict[str, float] = Field(default_factory=lambda: {
        "nvlink": 0.78, "pcie": 0.7, "pcie-nop2p": 0.35, "infiniband": 0.9, "ethernet": 0.6})
    # Latency per ring step, microseconds: NCCL small-message all-reduce latencies of tens of us over
    # 8 GPUs (nccl-tests all_reduce_perf at 8 B) over 2(n-1) steps; the network's are longer.
    alpha_us: dict[str, float] = Field(default_factory=lambda: {
        "nvlink": 2.0, "pcie": 4.0, "pcie-nop2p": 8.0, "infiniband": 6.0, "ethernet": 25.0})
    # Rank-to-rank spread of a step (coefficient of variation) and the extra spread of decoded input.
    straggler_cv: float = 0.01
    data_jitter_cv: float = 0.03
    # DALI on the CPU (decoders.ImageDecoder device="cpu" + crop, resize, flip, normalise): images/s
    # per physical core at 224 px (fit on NVIDIA's DALI-CPU rows); advisor.loader reads it.
    dali_cpu_per_core: float = 200.0
    # The multi-GPU model's worst error on the held-out published rows, per link kind: |own 1-GPU samples/s x
    # predicted speedup / published - 1|, the scaling model alone (the single-GPU model's error left out).
    # Written by the fit with the constants above; the planner takes a sharded plan over a DDP plan that
    # fits only when the estimate's edge is larger than this (rules/planner.py, issue 38). Empty: no fit.
    speedup_worst_holdout: dict[str, float] = Field(default_factory=dict)
    source: str = "built-in defaults"


@lru_cache(maxsize=1)
def comm_constants() -> CommConstants:
    if FITTED.exists():
        return CommConstants(**json.loads(FITTED.read_text()))
    return CommConstants()


class Collective(BaseModel):
    model_config = ConfigDict(extra="forbid")

    op: Literal["all-reduce", "all-gather", "reduce-scatter"]
    what: str = Field(description="e.g. 'DDP bucket 3 of 5', 'FSDP unit gather'")
    bytes: float
    ranks: int
    count: int = Field(1, description="how many times per optimizer step")
    latency_s: float = Field(description="alpha part, one call")
    bandwidth_s: float = Field(description="beta part, one call")

    @property
    def seconds(self) -> float:
        return self.latency_s + self.bandwidth_s


class CommBreakdown(BaseModel):
    """Communication of one optimizer step, what of it the compute hides, and the wait for stragglers."""

    model_config = ConfigDict(extra="forbid")

    strategy: str
    link: str = Field(description="within a node: nvlink, pcie, pcie-nop2p; '+ network' across nodes")
    bus_gbps: float = Field(description="achieved bus bandwidth within a node, GB/s per direction")
    network_bus_gbps: float | None = None
    buckets: int = 0
    collectives: list[Collective] = Field(default_factory=list)
    total_s: float = Field(0.0, description="all collectives of the step, before overlap")
    exposed_s: float = Field(0.0, description="what the compute does not hide")
    sync_s: float = Field(0.0, description="waiting for the slowest rank at the step's collectives")
    notes: list[str] = Field(default_factory=list)


def scaling_error_bound(links: list[str], k: CommConstants | None = None) -> tuple[float, str]:
    """How wrong the multi-GPU model may be on a plan whose collectives cross ``links`` (intra-node kind,
    then the network's kind across nodes): the worst held-out error of the kinds the fit has rows for; a
    link it has none for (the network: no published multi-node rows) takes the worst of any kind, and
    says so. No fit: infinite (an unmeasured model's edge is never taken on its word)."""
    table = (k or comm_constants()).speedup_worst_holdout
    if not table:
        return math.inf, "no held-out rows (the multi-GPU model is not fit)"
    known = [table[link] for link in links if link in table]
    missing = [link for link in links if link not in table]
    if not missing:
        return max(known), f"its worst held-out error over {' + '.join(links)}"
    return max(table.values()), f"its worst held-out error on any link ({', '.join(missing)}: no published rows)"


def _ring(op: str, nbytes: float, n: int, busbw: float, alpha_s: float) -> tuple[float, float]:
    """(latency, bandwidth) seconds of one ring collective over n ranks."""
    if n <= 1 or nbytes <= 0:
        return 0.0, 0.0
    steps = 2 * (n - 1) if op == "all-reduce" else n - 1
    share = steps / n
    return steps * alpha_s, share * nbytes / busbw


class Topology(BaseModel):
    """The links a collective crosses: GPUs per node over ``intra`` and nodes over the network."""

    model_config = ConfigDict(extra="forbid")

    per_node: int
    nodes: int
    intra: str
    intra_gbps: float = Field(description="per GPU, per direction, GB/s (datasheet)")
    network: str = "infiniband"
    network_gbps: float = Field(25.0, description="per node, per direction, GB/s")


def collective(op: str, what: str, nbytes: float, topo: Topology, k: CommConstants, count: int = 1,
               *, within_node_only: bool = False, across_nodes_only: bool = False) -> Collective:
    """One collective over the topology, hierarchical as NCCL runs it: the intra-node ring over the node's
    link, and (several nodes) the inter-node share over the network at its own bandwidth."""
    lat = bw = 0.0
    ranks = 1
    if not across_nodes_only and topo.per_node > 1:
        busbw = topo.intra_gbps * 1e9 * k.bus_efficiency[topo.intra]
        a, b = _ring(op, nbytes, topo.per_node, busbw, k.alpha_us[topo.intra] * 1e-6)
        lat, bw, ranks = lat + a, bw + b, topo.per_node
    if not within_node_only and topo.nodes > 1:
        netbw = topo.network_gbps * 1e9 * k.bus_efficiency[topo.network]
        a, b = _ring(op, nbytes, topo.nodes, netbw, k.alpha_us[topo.network] * 1e-6)
        lat, bw, ranks = lat + a, bw + b, ranks * topo.nodes
    return Collective(op=op, what=what, bytes=nbytes, ranks=ranks, count=count, latency_s=lat, bandwidth_s=bw)


def ddp_bucket_runs(grad_bytes: float, cap_mb: float = DDP_BUCKET_MB,
                    first_mb: float = DDP_FIRST_BUCKET_MB) -> list[tuple[float, int]]:
    """Bucket sizes in the order the backward fills them, as (size, count) runs: 1 MiB first, then 25 MiB
    ones, the last partial (an 8B model's fp32 gradients fill 1,220 buckets: three runs, not 1,220 items)."""
    runs: list[tuple[float, int]] = []
    first = min(grad_bytes, first_mb * MB)
    if first <= 0:
        return runs
    runs.append((first, 1))
    left, cap = grad_bytes - first, cap_mb * MB
    full = int(left // cap) if left > 1e-9 else 0
    if full:
        runs.append((cap, full))
    rest = left - full * cap
    if rest > 1e-9:
        runs.append((rest, 1))
    return runs


def straggler_s(step_compute_s: float, ranks: int, grad_accum: int, k: CommConstants, *, decoded_input: bool) -> float:
    """Expected wait for the slowest of ``ranks`` at the step's synchronisation (see the module docstring)."""
    if ranks <= 1 or step_compute_s <= 0:
        return 0.0
    cv = math.hypot(k.straggler_cv, k.data_jitter_cv if decoded_input else 0.0) / math.sqrt(max(1, grad_accum))
    return step_compute_s * cv * math.sqrt(2.0 * math.log(ranks))


def ddp_comm(grad_bytes: float, topo: Topology, micro_s: float, grad_accum: int, k: CommConstants, *,
             decoded_input: bool = False) -> CommBreakdown:
    """DDP: bucketed all-reduce of the gradients overlapping the last micro-batch's backward (2/3 of it:
    backward = 2x forward, Kaplan et al. 2020)."""
    runs = ddp_bucket_runs(grad_bytes)
    n = sum(count for _, count in runs)
    backward_s = micro_s * 2.0 / 3.0
    # Buckets of one size cost the same: one collective per run of equal buckets. Each is ready when the
    # backward has produced it; on one stream bucket j of a run ends at max(end_{j-1}, ready_j) + c, which
    # over a run of m buckets evenly spaced by d = ready_j - ready_{j-1} unrolls (max-plus) to
    # max(end_0 + m c, ready_1 + m c, ready_m + c): the same as queuing each of the 1,220 buckets of an
    # 8B model, in three terms (tests/test_comm.py queues them bucket by bucket and compares).
    cost: dict[float, Collective] = {}
    end, done, total = 0.0, 0.0, 0.0
    for b, m in runs:
        c = cost.get(b)
        if c is None:
            c = cost[b] = collective("all-reduce", "DDP bucket", b, topo, k)
        first_ready = backward_s * (done + b) / grad_bytes
        last_ready = backward_s * (done + m * b) / grad_bytes
        end = max(end + m * c.seconds, first_ready + m * c.seconds, last_ready + c.seconds)
        done += m * b
        total += m * c.seconds
    exposed = max(0.0, end - backward_s)

    def row(size: float, i: int, **update) -> Collective:
        return cost[size].model_copy(update={"what": f"DDP bucket {i + 1} of {n}", **update})

    # The first bucket, the middle ones merged, and the last, for a readable breakdown (the first run is
    # always the one 1 MiB bucket, so the second run's size is bucket 2's).
    if n <= 3:
        colls = [row(size, i) for i, size in enumerate(b for b, m in runs for _ in range(m))]
    else:
        colls = [row(runs[0][0], 0), row(runs[1][0], 1, what=f"DDP buckets 2-{n - 1}", count=n - 2),
                 row(runs[-1][0], n - 1)]
    out = _breakdown("ddp", topo, k, colls, total, exposed)
    out.buckets = n
    out.sync_s = straggler_s(micro_s * grad_accum, topo.per_node * topo.nodes, grad_accum, k, decoded_input=decoded_input)
    exposed_last = colls[-1].seconds
    out.notes.append(f"{n} DDP buckets (1 MiB first, 25 MiB each); the last one's all-reduce "
                     f"({exposed_last * 1e3:.2f} ms) starts only when the backward ends")
    return out


def fsdp_comm(param_bytes: float, grad_bytes: float, units: int, topo: Topology, micro_s: float, grad_accum: int,
              k: CommConstants, *, hybrid: bool = False, decoded_input: bool = False) -> CommBreakdown:
    """FSDP (or HSDP with ``hybrid``): per unit, gather before forward and backward, reduce-scatter after;
    the next unit's gather prefetched under this unit's compute."""
    units = max(1, units)
    shard_topo = topo.model_copy(update={"nodes": 1}) if hybrid else topo
    ag = collective("all-gather", "FSDP unit gather", param_bytes / units, shard_topo, k)
    rs = collective("reduce-scatter", "FSDP unit reduce-scatter", grad_bytes / units, shard_topo, k)
    fwd_u, bwd_u = micro_s / 3.0 / units, micro_s * 2.0 / 3.0 / units
    # Per micro-batch: the first gather, then each unit's excess over its compute (prefetch), and the last
    # reduce-scatter after the backward.
    per_micro = ag.seconds + (units - 1) * max(0.0, ag.seconds - fwd_u) \
        + (units - 1) * max(0.0, ag.seconds + rs.seconds - bwd_u) + rs.seconds
    colls = [ag.model_copy(update={"count": 2 * units * grad_accum}), rs.model_copy(update={"count": units * grad_accum})]
    total = (2 * ag.seconds + rs.seconds) * units * grad_accum
    exposed = per_micro * grad_accum
    name = "hsdp" if hybrid else "fsdp"
    if hybrid and topo.nodes > 1:
        rep = collective("all-reduce", "HSDP shard all-reduce across nodes", grad_bytes / topo.per_node, topo, k,
                         across_nodes_only=True)
        colls.append(rep)
        total += rep.seconds
        exposed += rep.seconds  # after the last reduce-scatter: nothing left to hide it under
    out = _breakdown(name, topo, k, colls, total, exposed)
    out.sync_s = straggler_s(micro_s * grad_accum, topo.per_node * topo.nodes, grad_accum, k, decoded_input=decoded_input)
    if grad_accum > 1:
        out.notes.append(f"{name.upper()} gathers every unit's weights again in each of the {grad_accum} micro-batches "
                         "(reshard_after_forward frees them)")
    return out


def fsdp_keep_comm(param_bytes: float, grad_bytes: float, units: int, topo: Topology, micro_s: float, grad_accum: int,
                   k: CommConstants, *, decoded_input: bool = False) -> CommBreakdown:
    """FSDP with the gathered weights kept across accumulation (``Strategy.fsdp_keep``): per unit, one
    all-gather in the first micro-batch's forward and one reduce-scatter of the accumulated gradients in
    the last micro-batch's backward; the micro-batches between run no collective.

    ``param_bytes``: the weights in FSDP2's ``param_dtype``; ``grad_bytes``: the gradients in its
    ``reduce_dtype`` (Accelerate's policy: the same dtype, bf16 under autocast). The overlap is plain
    FSDP's (``fsdp_comm``): the next unit's gather prefetched under this unit's forward, each unit's
    reduce-scatter under the next unit's backward; exposed are the first gather, each unit's excess
    over its compute, and the last reduce-scatter. With ``grad_accum`` 1 it is plain FSDP's step."""
    if grad_accum < 2:
        return fsdp_comm(param_bytes, grad_bytes, units, topo, micro_s, grad_accum, k, decoded_input=decoded_input)
    units = max(1, units)
    ag = collective("all-gather", "FSDP unit gather, once per step", param_bytes / units, topo, k)
    rs = collective("reduce-scatter", "FSDP unit reduce-scatter, once per step", grad_bytes / units, topo, k)
    fwd_u, bwd_u = micro_s / 3.0 / units, micro_s * 2.0 / 3.0 / units
    first_forward = ag.seconds + (units - 1) * max(0.0, ag.seconds - fwd_u)
    last_backward = (units - 1) * max(0.0, rs.seconds - bwd_u) + rs.seconds
    colls = [ag.model_copy(update={"count": units}), rs.model_copy(update={"count": units})]
    out = _breakdown("fsdp-keep", topo, k, colls, (ag.seconds + rs.seconds) * units, first_forward + last_backward)
    out.sync_s = straggler_s(micro_s * grad_accum, topo.per_node * topo.nodes, grad_accum, k, decoded_input=decoded_input)
    out.notes.append(f"FSDP-KEEP gathers every unit's weights once per optimizer step and keeps them across the "
                     f"{grad_accum} micro-batches: {units} all-gathers a step instead of plain FSDP's "
                     f"{2 * units * grad_accum}; the gradients are reduce-scattered once, after the last backward")
    return out


def _breakdown(strategy: str, topo: Topology, k: CommConstants, colls: list[Collective], total: float,
               exposed: float) -> CommBreakdown:
    multi = topo.nodes > 1
    return CommBreakdown(
        strategy=strategy, link=topo.intra + (f" + {topo.network} network" if multi else ""),
        bus_gbps=topo.intra_gbps * k.bus_efficiency[topo.intra],
        network_bus_gbps=topo.network_gbps * k.bus_efficiency[topo.network] if multi else None,
        collectives=colls, total_s=total, exposed_s=min(exposed, total) if total else 0.0)


class NetworkLink(BaseModel):
    """The network between nodes, as the user stated it (``--network``) or as assumed."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["infiniband", "ethernet"]
    gbit_s: float = Field(gt=0, description="line rate per node, Gbit/s")
    text: str = Field(description="what was typed, or the default's name")
    source: str = Field(description="where the number came from: the flag, or the default and why")

    @property
    def gbytes_s(self) -> float:
        return self.gbit_s / 8.0

    def summary(self) -> str:
        return f"{self.text} ({self.kind}, {self.gbit_s:g} Gb/s = {self.gbytes_s:g} GB/s per node; {self.source})"


# Several nodes named and no --network: one 200 Gb/s InfiniBand HDR port per node (NVIDIA DGX A100
# user guide: 8x 200 Gb/s HDR compute ports per node; one port's worth is the conservative default).
DEFAULT_NETWORK = NetworkLink(kind="infiniband", gbit_s=200.0, text="200G-IB",
                              source="assumed (no --network given): one 200 Gb/s InfiniBand HDR port per node")
