"""Typed facts the rules' conditions and messages refer to, by dotted path (``gpu.cc``).

Facts are built from the model spec, the hardware, the workload, the user's pinned flags and,
after the decision tree, the plan and its estimate. Every field is typed; ``Facts.paths()`` is
the schema the rule loader checks each rule against. Sections that are unknown yet (``plan``
before the tree) are ``None``, and so is every fact inside them.
"""

from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GpuFacts(_Section):
    name: str
    cc: float = Field(description="compute capability as a number, 8.0 for (8, 0)")
    supports_bf16: bool
    memory_gib: float
    usable_gib: float = Field(description="memory the estimator lets a run use (fit_fraction)")
    nvlink: bool


class HardwareFacts(_Section):
    gpus: int = Field(description="GPUs at hand in total (detected or --gpus x --nodes)")
    gpus_per_node: int
    nodes: int
    multi_gpu: bool
    interconnect: str
    network_gbps: float
    network: str = Field("", description="the network between nodes and where its number came from (nodes > 1)")
    cpu_cores: int = Field(description="CPU cores per node")
    detected: bool


class ModelFacts(_Section):
    name: str
    family: str
    params: int
    params_b: float = Field(description="parameters in billions")
    is_cnn: bool
    is_vision: bool
    is_text: bool
    is_llm: bool = Field(description="decoder LLM of at least 1B parameters")
    has_batchnorm: bool
    layers: int
    tokens: int | None = Field(None, description="tokens per sample (text and ViT)")
    max_positions: int | None = Field(None, description="the model's context: positions it was built for (text models)")


class WorkloadFacts(_Section):
    dataset_size: int | None
    epochs: float | None
    run_known: bool = Field(description="dataset size and epochs are both given")
    deadline_h: float | None
    has_deadline: bool
    batch_size: int | None = Field(description="--batch-size (global), if given")
    keep_global_batch: bool
    lr_scaling: str
    base_lr: float
    base_batch: int
    lr_defaulted: bool = Field(description="base lr/batch came from the family defaults table")
    defaults_source: str
    want_alternatives: bool


class PinnedFacts(_Section):
    """True where the user gave the flag (the rules never override it)."""

    precision: bool
    optimizer: bool
    compile: bool
    channels_last: bool
    grad_ckpt: bool
    strategy: bool
    micro_batch: bool
    grad_accum: bool
    lora_rank: bool
    optimizer_in_backward: bool
    cpu_offload: bool
    seq_len: bool = False
    image_size: bool = False
    network: bool = False
    compromise: bool = Field(description="a memory compromise of the registry (advisor.setup.COMPROMISES) is pinned")


class ConfigFacts(_Section):
    """The configuration as chosen so far (pinned flags, then rules, then the tree)."""

    precision: str
    optimizer: str
    compile: bool
    channels_last: bool
    grad_ckpt: bool
    strategy: str
    lora_rank: int | None
    micro_batch: int | None
    grad_accum: int | None
    seq_len: int | None
    image_size: int | None
    default_optimizer: str = Field(description="the family's usual optimizer (defaults table)")
    patch_size: int | None = Field(None, description="ViT patch side")
    patch_remainder: int | None = Field(None, description="image_size % patch_size (ViT), pixels the patch conv drops")
    optimizer_in_backward: bool = False
    cpu_offload: bool = False
    seq_beyond_context: bool = Field(False, description="seq_len exceeds the model's max_positions")


class PlanFacts(_Section):
    path: str = Field(description="nodes visited, e.g. 'A>B>D>E'")
    end: str = Field(description="last node of the path")
    tree_strategy: str = Field(description="what the tree chose before pinned flags applied")
    strategy: str
    gpus: int
    nodes: int
    multi_gpu: bool
    micro_batch: int
    grad_accum: int
    global_batch: int
    per_gpu_batch: int
    grad_ckpt_needed: bool = Field(description="checkpointing was needed to fit (not pinned)")
    fits: bool
    lr: float
    lr_ratio: float = Field(description="global batch / base batch")
    warmup_steps: int
    warmup_rule: str
    total_steps: int | None
    steps_per_epoch: int | None
    batches_per_epoch: float | None = Field(None, description="--dataset-size / the global batch (under 1: one "
                                            "step needs more samples than the dataset has)")
    gpus_at_hand: int
    min_gpus_to_fit: int | None
    strategy_overridden: bool = Field(description="a pinned --strategy replaced the tree's choice")
    strategy_rule: str = Field("", description="why this strategy at this count (rules.planner.Planner.best: DDP "
                               "whenever a replica fits, sharding when memory needs it or a measurement says so)")
    sharded_gain_pct: float | None = Field(None, description="DDP kept although a sharded plan's unmeasured estimate "
                                           "was this many percent faster (None: no such plan)")
    host_node_gib: float = Field(0.0, description="host RAM the plan keeps per node (CPU offload: every rank's shard)")
    host_ram_need: str = Field("", description="that need in words: per node, and per rank x ranks")
    host_ram_gib: float | None = Field(None, description="RAM of each node: --host-ram, or detected on this machine")
    host_ram_source: str = Field("", description="where host_ram_gib came from")
    host_ram_short: bool = Field(False, description="CPU offload needs more than the usable share of the node's RAM")
    compromise: str | None = Field(None, description="node H's memory compromise, when the standard setup does not fit")
    gives_up: str | None = Field(None, description="what that compromise gives up")


class EstimateFacts(_Section):
    fits: bool
    peak_gib: float
    device_gib: float
    headroom_gib: float
    samples_per_s: float
    samples_per_s_per_gpu: float
    step_s: float
    mfu: float
    time_to_train_h: float | None
    deadline_missed_h: float | None = Field(description="hours over the deadline (None if met or none)")
    deadline_missed_pct: float | None
    scaling_efficiency: float = Field(description="the scaling table's and the policy's efficiency of the plan's count "
                                      "(rules.policy.row_efficiency), else the estimate's own")
    host_bound: bool = Field(description="kernel launches set the pace (not when the input pipeline does)")
    comm_s: float
    exposed_comm_s: float
    comm_fraction: float = Field(description="exposed communication / step time")
    memory_fraction: float = Field(description="nvidia-smi memory / GPU memory")
    tight: bool = Field(False, description="fits, but leaves less room than the allocator's measured reserve (advisor.allocator)")
    reserve_gib: float = Field(0.0, description="the allocator's measured reserve over the allocated peak, GiB")
    fit_margin_gib: float = Field(0.0, description="room left after the allocated peak, the context and that reserve, GiB")
    fp16_alt_speedup: float | None = Field(None, description="x faster with bf16/fp16 autocast (pinned fp32/tf32 only)")


class CompileFacts(_Section):
    compile_min: float = Field(description="estimated one-off compile time, minutes")
    speedup_pct: float = Field(description="estimated step-time saving with torch.compile, percent")
    breakeven_min: float | None = Field(description="minutes of training after which compile has paid off")
    saving_min: float | None = Field(description="minutes saved over the whole run")
    run_h: float | None
    repays: bool


class DataFacts(_Section):
    workers: int
    cores_per_gpu: float
    prefetch_factor: int
    samples_per_s_per_worker: float
    cores_needed_per_gpu: float
    decode_rate: float = Field(description="samples per second one core prepares (measured: advisor.loader)")
    cpu_bound: bool = Field(description="the input pipeline, not the GPUs, sets samples/s (the estimate counts on the loader's rate)")
    loader_rate_per_gpu: float = Field(0.0, description="samples/s per GPU the loader delivers (0: not limited)")
    gpu_rate_per_gpu: float = Field(0.0, description="samples/s per GPU the GPUs would take with data on the device")
    gpu_rate: float = Field(0.0, description="samples/s all the plan's GPUs would take with data on the device")
    loader_workers: float = Field(0.0, description="loader workers per GPU the input-pipeline estimate counts")
    cores_source: str = ""
    data_kind: str = ""
    loader: str = ""
    fixes: str = Field("", description="what would lift the limit, with its effect")


class Facts(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu: GpuFacts
    hw: HardwareFacts
    model: ModelFacts
    workload: WorkloadFacts
    pinned: PinnedFacts
    config: ConfigFacts
    plan: PlanFacts | None = None
    estimate: EstimateFacts | None = None
    compile: CompileFacts | None = None
    data: DataFacts | None = None

    def get(self, path: str) -> Any:
        section, _, name = path.partition(".")
        obj = getattr(self, section, None) if section in type(self).model_fields else None
        if obj is None or name not in type(obj).model_fields:
            return None
        return getattr(obj, name)

    @classmethod
    @lru_cache(maxsize=1)
    def paths(cls) -> frozenset[str]:
        out = set()
        for section, field in cls.model_fields.items():
            ann = field.annotation
            model = next((a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)), None)
            for name in model.model_fields:
                out.add(f"{section}.{name}")
        return frozenset(out)

    def flat(self) -> dict[str, Any]:
        return {p: self.get(p) for p in sorted(self.paths())}
