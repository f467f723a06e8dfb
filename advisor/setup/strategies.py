"""How a run spreads over GPUs: one process, DDP, FSDP, FSDP with the weights kept gathered across
accumulation, HSDP (and DataParallel, for the bench's comparison only).

Each strategy says over how many ranks it runs (``world``) and splits the model (``shard``), what
it adds to the memory ledger (DDP's buckets, FSDP's gathered units, fsdp-keep's unsharded copy) and
its collectives per optimizer step (advisor.comm).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from advisor.comm import Topology, comm_constants, ddp_comm, fsdp_comm, fsdp_keep_comm
from advisor.config import Strategy, TrainConfig
from advisor.models import ModelSpec
from advisor.setup.base import Setup

if TYPE_CHECKING:
    from advisor.setup.ledger import MemoryLedger, StepLedger

GIB = float(2**30)
Hardware = Any  # advisor.hardware.HardwareSpec, built by the caller: setups never import hardware detection


class Single(Setup):
    name, flag, kind, family = "single", "--strategy single", "strategy", "strategies"
    field, value = "strategy", Strategy.single
    summary = "one process on one GPU"
    distributed = False  # one rank, whatever the GPUs at hand
    # sharded inside each node, replicated across nodes: only the replicas' all-reduce crosses the network
    # (advisor.comm.fsdp_comm; the planner weighs its edge over DDP across nodes, rules/planner.py)
    hybrid = False
    # what an out-of-memory retry falls back to before shrinking the micro-batch (launcher.oom), and
    # what the retry's note says then; None: shrink at once
    oom_fallback: Strategy | None = None
    oom_fallback_note = ""

    def world(self, hw: Hardware) -> int:
        return hw.total_gpus if self.distributed else 1

    def shard(self, world: int, hw: Hardware) -> int:
        return 1


class DataParallel(Single):
    name, flag, value = "dp", "--strategy dp", Strategy.dp
    summary = "torch.nn.DataParallel: one process, a thread per GPU (the bench's comparison only, never recommended)"
    distributed = True

    def dispatch_terms(self, step: StepLedger) -> None:
        if step.world > 1:
            step.host_s *= step.world  # one Python thread per replica under the GIL (DataParallel)

    def step_terms(self, step: StepLedger) -> None:
        hw, cal, config = step.hw, step.cal, step.config
        if step.world > 1:
            # DataParallel: each forward broadcasts weights from GPU 0 and each backward reduces grads
            # to GPU 0, serially, with no overlap (PyTorch docs, "Use DistributedDataParallel instead").
            link = hw.intra_node_gbps / 2 * 1e9 * cal.link_efficiency.get(hw.interconnect, 0.7)
            step.comm = ((step.model.params * config.precision.weight_bytes + step.grad_bytes) * (step.world - 1)
                         / link * config.grad_accum)
            step.exposed = step.comm


class Replicated(Single):
    """A strategy of several processes that run collectives (advisor.comm) when there are several ranks."""

    distributed = True

    def step_terms(self, step: StepLedger) -> None:
        if step.world > 1:
            step.breakdown = self.collectives(step, self.topology(step.hw, step.world), step.cal.comm or comm_constants())
            step.comm, step.exposed, step.sync = step.breakdown.total_s, step.breakdown.exposed_s, step.breakdown.sync_s

    @staticmethod
    def topology(hw: Hardware, world: int) -> Topology:
        per_node = min(world, hw.gpus_per_node)
        net = hw.network_link
        return Topology(per_node=per_node, nodes=max(1, world // max(1, per_node)), intra=hw.link,
                        intra_gbps=hw.intra_node_gbps / 2, network=net.kind, network_gbps=net.gbytes_s)

    def collectives(self, step: StepLedger, topo: Topology, k):
        raise NotImplementedError


class DDP(Replicated):
    name, flag, value = "ddp", "--strategy ddp", Strategy.ddp
    summary = "a full replica per GPU; gradients all-reduced in buckets under backward"

    def gradient_terms(self, led: MemoryLedger) -> None:
        # DDP copies gradients into flat buckets (Accelerate's default gradient_as_bucket_view=False).
        if led.world > 1:
            led.buckets = led.nt * led.gb

    def collectives(self, step: StepLedger, topo: Topology, k):
        return ddp_comm(step.grad_bytes, topo, step.micro_s, step.config.grad_accum, k, decoded_input=step.decoded)


class FSDP(Replicated):
    name, flag, value = "fsdp", "--strategy fsdp", Strategy.fsdp
    summary = "weights, gradients and optimizer states sharded over every GPU; units gathered per micro-batch"

    bf16_params = True  # FSDP2's MixedPrecisionPolicy gathers bf16 parameters

    def shard(self, world: int, hw: Hardware) -> int:
        return world

    def activation_terms(self, led: MemoryLedger) -> None:
        # FSDP with mixed precision gathers bf16 parameters (no autocast weight copies; the activations
        # are bf16 too: activations.activation_precision) and keeps the current and the prefetched unit
        # unsharded (Zhao et al. 2023, PyTorch FSDP, sec. 4).
        p = led.config.precision
        led.gathered = 2 * largest_unit(led.model) * (2 if p.autocast else p.weight_bytes)
        led.params_gathered = True

    def ends_grad_moment(self, led: MemoryLedger) -> bool:
        return led.shard > 1

    def collectives(self, step: StepLedger, topo: Topology, k):
        p = step.config.precision
        pbytes = step.model.params * p.compute_bytes  # FSDP2's param_dtype: bf16 under any mixed precision
        return fsdp_comm(pbytes, step.grad_bytes, shard_units(step.model), topo, step.micro_s, step.config.grad_accum,
                         k, hybrid=self.hybrid, decoded_input=step.decoded)


class FSDPKeep(FSDP):
    name, flag, value = "fsdp-keep", "--strategy fsdp-keep", Strategy.fsdp_keep
    # FSDP that keeps the gathered weights across gradient accumulation (advisor.config.Strategy.fsdp_keep)
    summary = "FSDP whose units stay gathered across the micro-batches of one step: one all-gather a step"
    oom_fallback = Strategy.fsdp  # the same accumulation, the kept unsharded copy given up
    oom_fallback_note = "the weights are no longer kept gathered across accumulation"

    def activation_terms(self, led: MemoryLedger) -> None:
        super().activation_terms(led)
        kept = keep_gathered_bytes(led.model, led.config, led.nt)
        if kept is not None:
            led.gathered = kept["weights"]  # every unit, the current and the prefetched ones included
            led.gathered_key = "detail.fsdp_kept_weights_gib"

    def gradient_terms(self, led: MemoryLedger) -> None:
        kept = keep_gathered_bytes(led.model, led.config, led.nt)
        if kept is not None:
            led.accum_grads = kept["gradients"]
            led.notes.append(f"fsdp-keep: the {led.config.grad_accum} micro-batches keep the weights gathered "
                             f"({kept['weights'] / GIB:.1f} GiB unsharded) and accumulate unsharded gradients "
                             f"({kept['gradients'] / GIB:.1f} GiB) until the last one's reduce-scatter")
            led.detail.update(fsdp_kept_weights_gib=kept["weights"] / GIB, unsharded_gradients_gib=kept["gradients"] / GIB)

    def collectives(self, step: StepLedger, topo: Topology, k):
        # gathered weights and reduced gradients both in FSDP2's param_dtype (keep_gathered_bytes)
        p = step.config.precision
        per = p.compute_bytes
        return fsdp_keep_comm(step.model.params * per, step.nt * per, shard_units(step.model), topo, step.micro_s,
                              step.config.grad_accum, k, decoded_input=step.decoded)


class HSDP(FSDP):
    name, flag, value = "hsdp", "--strategy hsdp", Strategy.hsdp
    # HSDP (hybrid sharding): FSDP inside each node, DDP across nodes (Zhao et al. 2023, sec. 3.2.2)
    summary = "FSDP inside each node, replicas across nodes: only a gradient shard's all-reduce crosses the network"
    hybrid = True

    def shard(self, world: int, hw: Hardware) -> int:
        return min(world, hw.gpus_per_node)


STRATEGIES: tuple[Single, ...] = (Single(), DDP(), FSDP(), FSDPKeep(), HSDP(), DataParallel())


def starting_strategy(ranks: int, host_offload: bool) -> Strategy:
    """The strategy a run starts with when none is pinned (advisor.starting_config): FSDP where the training
    state lives in host RAM (FSDP's CPUOffload, on one GPU too), one process on one GPU, DDP on several."""
    return Strategy.fsdp if host_offload else Strategy.single if ranks == 1 else Strategy.ddp


def keep_gathered_bytes(model: ModelSpec, config: TrainConfig, trainable: int) -> dict[str, float] | None:
    """What FSDP with the weights kept gathered across accumulation (``Strategy.fsdp_keep``) holds on
    every GPU besides plain FSDP's shards, in bytes: the whole model's unsharded weights in FSDP2's
    ``param_dtype`` (bf16 under autocast: Accelerate's MixedPrecisionPolicy, see
    ``advisor.activations.activation_precision``) from the first micro-batch's forward to the last
    one's backward, and the unsharded gradients of every trainable parameter in ``reduce_dtype`` (the
    same dtype in Accelerate 1.16's policy), accumulated across the micro-batches that skip the
    reduce-scatter (Accelerate's ``accumulate`` calls ``set_requires_gradient_sync(False)``; torch 2.13
    ``FSDPParamGroup.post_backward`` keeps ``unsharded_param.grad``). None without accumulation: there
    is nothing to keep across, and the step is plain FSDP's."""
    if config.grad_accum < 2:
        return None
    per = config.precision.compute_bytes  # param_dtype = reduce_dtype: bf16 under any mixed precision
    return {"weights": model.params * per, "gradients": trainable * per}


def layer_unit(model: ModelSpec) -> float:
    """Parameters of one wrapped layer (FSDP's per-layer unit); the largest unit without an architecture."""
    return model.arch.layer_params() if model.arch is not None else largest_unit(model)


def root_unit(model: ModelSpec) -> float:
    """Parameters FSDP's root unit holds: all outside the wrapped layers (embeddings, head, final norm)."""
    if model.arch is not None:
        return max(0.0, model.params - model.arch.n_layers * model.arch.layer_params())
    return largest_unit(model)


def largest_unit(model: ModelSpec) -> float:
    if model.arch is not None:
        a = model.arch
        return max(a.layer_params(), a.embedding_params(), a.head_params())
    if model.trace is not None and model.trace.largest_unit_params:
        return model.trace.largest_unit_params
    return model.params


def shard_units(model: ModelSpec) -> int:
    """FSDP's wrapped units: one per transformer layer (Accelerate's transformer auto-wrap policy), else
    ~30 forward ops per block of a traced model."""
    if model.arch is not None:
        return max(1, model.arch.n_layers)
    if model.trace is not None and model.trace.kernels:
        return max(1, round(model.trace.kernels / 30))
    return 1
