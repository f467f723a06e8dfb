"""What the user asked for: one typed ``Request``, the only input below the CLI.

The CLI parses flags into it (``cli.flags.request_from_namespace``), the wizard fills it from its
forms, notebooks build it from keywords; ``rules.api.recommend(req)``, ``rules.api.plan(req)``
and ``launcher.cpu_plan.cpu_plan(req)`` take it. Config fields left ``None`` are for the rules to
choose; a field given pins that choice (DESIGN.md: "a flag given pins that choice").

``FLAGS`` is the one table from fields to ``advise`` flags: the CLI's parser is checked against it
(tests), and ``Request.to_argv()`` writes a request back as flags, e.g. the ``advise launch``
command of a recommendation.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from advisor import units
from advisor.comm import NetworkLink
from advisor.config import Optimizer, Precision, PureBf16Update, Strategy
from advisor.errors import UserError
from advisor.plan import ModelRef
from advisor.units import MAX_COUNT, MAX_DEADLINE_H

# Ranges of the numbers (issue 31: 10**40 as --seq-len overflowed in the estimate, as --batch-size it
# hung). Wide on purpose, cardwise's choices: each is far beyond any published training run, and keeps
# the estimate's arithmetic finite. The CLI's flags take their ranges from these fields (cli.flags).
MAX_GPUS = 1_000_000  # GPUs per node, nodes (the planner's search is bounded whatever the count)
MAX_BATCH = 1_000_000_000  # samples in a global batch, a micro-batch, accumulation steps
MAX_SEQ_LEN = 100_000_000  # tokens per sample (the longest published contexts are ~10M)
MAX_IMAGE_SIZE = 65_536  # pixels per side; also the largest LoRA rank

# The deadline policy plans to finish this fraction early (docs/design.md "Decision policy"): the
# estimates' stated worst errors are 15-25% (DESIGN.md quality bars), so a plan at 98% of the
# deadline is a coin toss.
DEFAULT_MARGIN = 0.15

# Request fields that are configuration flags: given = pinned (DESIGN.md).
CONFIG_PINS = ("micro_batch", "grad_accum", "seq_len", "image_size", "precision", "optimizer", "pure_bf16_update", "compile",
               "channels_last", "grad_ckpt", "grad_ckpt_every", "strategy", "lora_rank", "quantize_base", "optimizer_in_backward", "cpu_offload")

# field -> (flag, how it is written). "value": --flag VALUE; "toggle": --flag / --no-flag
# (BooleanOptionalAction); "switch": --flag when true; "hours": --flag <hours>h.
FLAGS: dict[str, tuple[str, str]] = {
    "gpu": ("--gpu", "value"), "gpus": ("--gpus", "value"), "nodes": ("--nodes", "value"),
    "interconnect": ("--interconnect", "value"), "network": ("--network", "value"),
    "host_ram_gib": ("--host-ram", "gib"),
    "cpus_per_gpu": ("--cpus-per-gpu", "value"), "data_format": ("--data-format", "value"), "loader": ("--loader", "value"),
    "strategy": ("--strategy", "value"), "micro_batch": ("--micro-batch", "value"),
    "batch_size": ("--batch-size", "value"), "grad_accum": ("--grad-accum", "value"),
    "seq_len": ("--seq-len", "value"), "image_size": ("--image-size", "value"),
    "precision": ("--precision", "value"), "optimizer": ("--optimizer", "value"),
    "pure_bf16_update": ("--pure-bf16-update", "value"),
    "compile": ("--compile", "toggle"), "channels_last": ("--channels-last", "toggle"),
    "grad_ckpt": ("--grad-ckpt", "toggle"), "grad_ckpt_every": ("--grad-ckpt-every", "value"),
    "lora_rank": ("--lora-rank", "value"),
    "quantize_base": ("--quantize-base", "value"),
    "optimizer_in_backward": ("--optimizer-in-backward", "toggle"), "cpu_offload": ("--cpu-offload", "toggle"),
    "dataset_size": ("--dataset-size", "value"), "epochs": ("--epochs", "value"),
    "deadline_h": ("--deadline", "hours"), "margin": ("--margin", "value"), "base_lr": ("--base-lr", "value"),
    "base_batch": ("--base-batch", "value"), "lr_scaling": ("--lr-scaling", "value"), "task": ("--task", "value"),
    "keep_global_batch": ("--keep-global-batch", "switch"), "alternatives": ("--alternatives", "switch"),
}
# Fields whose default is not None: written only when they differ from it.
_DEFAULTS = {"nodes": 1, "margin": DEFAULT_MARGIN, "keep_global_batch": False, "alternatives": False}


class Request(BaseModel):
    """Everything a recommendation is asked with. Config fields left ``None`` are for the rules to choose."""

    model_config = ConfigDict(extra="forbid")

    @property
    def adapters(self) -> bool:
        """Asks for adapters only, the base frozen (--lora-rank): the learning-rate row follows."""
        return self.lora_rank is not None

    model: ModelRef
    # hardware
    gpu: str | None = Field(None, description="GPU kind; None = what is detected")
    gpus: int | None = Field(None, ge=1, le=MAX_GPUS, description="GPUs per node; None = all detected (or 1 with --gpu)")
    nodes: int = Field(1, ge=1, le=MAX_GPUS)
    interconnect: Literal["nvlink", "pcie", "pcie-nop2p"] | None = None
    network: NetworkLink | None = Field(None, description="between nodes, with its unit: '100GbE', '400G-IB', '25GB/s'")
    host_ram_gib: float | None = Field(None, gt=0, le=units.MAX_HOST_RAM_GIB,
                                       description="RAM of each node, GiB (--host-ram with a unit: '512GiB', '1TiB'); "
                                       "None: detected when planning for this machine, else unknown (not checked)")
    cpus_per_gpu: float | None = Field(None, gt=0, le=4096, description="CPU cores each GPU's data loader gets; None: detected, "
                                       "or the default for named GPUs (advisor.loader.DEFAULT_CPUS_PER_GPU)")
    data_format: Literal["auto", "jpeg", "decoded", "tokenized", "synthetic"] | None = Field(
        None, description="what the loader reads; None/auto: JPEG files for vision models, tokenized text otherwise")
    loader: Literal["pytorch", "dali-cpu", "dali"] | None = Field(
        None, description="pytorch DataLoader (default), DALI decoding on the CPU, or DALI decoding on the GPU")
    # configuration (pinned when given)
    micro_batch: int | None = Field(None, ge=1, le=MAX_BATCH)
    grad_accum: int | None = Field(None, ge=1, le=MAX_BATCH)
    seq_len: int | None = Field(None, ge=1, le=MAX_SEQ_LEN)
    image_size: int | None = Field(None, ge=1, le=MAX_IMAGE_SIZE)
    precision: Precision | None = None
    optimizer: Optimizer | None = None
    pure_bf16_update: PureBf16Update | None = Field(
        None, description="pure-bf16's AdamW step: kahan (KahanAdamW, the default) or plain (torch AdamW on bf16)")
    compile: bool | None = None
    channels_last: bool | None = None
    grad_ckpt: bool | None = None
    grad_ckpt_every: int | None = Field(None, ge=2, le=MAX_BATCH, description="selective checkpointing: every K-th "
                                        "block (advisor.setup.checkpointing)")
    strategy: Strategy | None = None
    lora_rank: int | None = Field(None, ge=1, le=MAX_IMAGE_SIZE)
    quantize_base: Literal["4bit"] | None = Field(None, description="QLoRA: LoRA's frozen base in 4-bit NF4")
    optimizer_in_backward: bool | None = None
    cpu_offload: bool | None = None
    # workload
    batch_size: int | None = Field(None, ge=1, le=MAX_BATCH, description="global batch, pinned")
    dataset_size: int | None = Field(None, ge=1, le=MAX_COUNT)
    epochs: float | None = Field(None, gt=0, le=1e6)
    deadline_h: float | None = Field(None, gt=0, le=MAX_DEADLINE_H)
    margin: float = Field(DEFAULT_MARGIN, ge=0, lt=1, description="plan to finish this fraction of the deadline early")
    base_lr: float | None = Field(None, gt=0, le=100.0)
    base_batch: int | None = Field(None, ge=1, le=MAX_BATCH)
    lr_scaling: Literal["linear", "sqrt", "none"] | None = Field(
        None, description="how the LR follows the global batch; None = the recipe's rule, else linear for SGD and "
                          "square root for Adam-family optimizers (rules.lr)")
    keep_global_batch: bool = False
    task: Literal["pretrain", "finetune"] | None = Field(
        None, description="picks the learning-rate recipe (rules/data/defaults.toml); None = the family's default")
    # output
    alternatives: bool = Field(False, description="list the memory compromises even when the standard setup fits")

    @field_validator("host_ram_gib", mode="before")
    @classmethod
    def _host_ram_text(cls, v):
        """'512GiB', '1TiB', '768GB' (advisor.units.host_ram_gib); a number without a unit is refused."""
        if isinstance(v, str):
            try:
                return units.host_ram_gib(v)
            except ValueError as exc:
                raise UserError(str(exc).split("; ")[0], fix=_HOST_RAM_FIX) from None
        return v

    @field_validator("network", mode="before")
    @classmethod
    def _network_text(cls, v):
        """'100GbE', '400G-IB', '12.5GB/s' (advisor.units.network); a number without a unit is refused."""
        if isinstance(v, (str, int, float)) and not isinstance(v, bool):
            try:
                return units.network(str(v))
            except ValueError as exc:
                raise UserError(str(exc).split("; ")[0], fix=_NETWORK_FIX) from None
        return v

    def hardware_args(self) -> dict:
        """The keyword arguments of advisor.hardware.resolve_hardware this request gives."""
        return dict(gpu=self.gpu, gpus=self.gpus, nodes=self.nodes, interconnect=self.interconnect, network=self.network,
                    cpus_per_gpu=self.cpus_per_gpu, data=self.data_format, loader=self.loader)

    @model_validator(mode="after")
    def _consistent(self) -> "Request":
        # What combines with what (strategy, precision, compromises) is advisor.setup.constraints' table,
        # checked by the request's callers (rules.flow.check_request, advisor.starting_config); not here.
        if self.deadline_h is not None and not (self.dataset_size and self.epochs):
            raise UserError("a deadline needs the amount of work to compare against",
                            fix="add --dataset-size N --epochs E (samples per epoch and passes), or drop --deadline")
        if bool(self.dataset_size) != bool(self.epochs):
            given, missing = ("--dataset-size", "--epochs") if self.dataset_size else ("--epochs", "--dataset-size")
            raise UserError(f"{given} without {missing}: time-to-train needs both", fix=f"add {missing}")
        b = self.batch_size
        if b is not None and self.micro_batch and b % self.micro_batch:
            raise UserError(f"--batch-size {b} is not a multiple of --micro-batch {self.micro_batch}",
                            fix="micro-batch x accumulation x GPUs must equal the global batch: pick a micro-batch that divides it")
        if b is not None and self.grad_accum and not self.micro_batch and b % self.grad_accum:
            raise UserError(f"--batch-size {b} is not a multiple of --grad-accum {self.grad_accum}",
                            fix="micro-batch x accumulation x GPUs must equal the global batch: pick a --grad-accum "
                                "that divides it, or drop --grad-accum and let cardwise derive it")
        if b is not None and self.micro_batch and self.grad_accum and b % (self.micro_batch * self.grad_accum):
            raise UserError(f"--batch-size {b} is not a multiple of --micro-batch {self.micro_batch} x --grad-accum {self.grad_accum}",
                            fix="drop --grad-accum and let cardwise derive it, or change the numbers")
        return self

    def pinned(self) -> frozenset[str]:
        return frozenset(k for k in CONFIG_PINS if getattr(self, k) is not None)

    def to_argv(self, *, skip: frozenset[str] | set[str] = frozenset()) -> list[str]:
        """The ``advise`` flags that give this request back (model first), fields in ``skip`` left out."""
        argv = self.model.to_argv()
        for field, (flag, kind) in FLAGS.items():
            value = getattr(self, field)
            if field in skip or value is None or value == _DEFAULTS.get(field):
                continue
            if kind == "toggle":
                argv.append(flag if value else "--no-" + flag[2:])
            elif kind == "switch":
                argv.append(flag)
            elif kind == "hours":
                argv += [flag, f"{value:g}h"]
            elif kind == "gib":
                argv += [flag, f"{value:g}GiB"]
            else:
                argv += [flag, _text(value)]
        return argv


_HOST_RAM_FIX = "give a unit: --host-ram 512GiB, --host-ram 1TiB or --host-ram 768GB"
_NETWORK_FIX = "give a unit: --network 100GbE, --network 400G-IB (InfiniBand), --network 25Gb/s or --network 12.5GB/s"


def _text(value) -> str:
    if isinstance(value, NetworkLink):
        return value.text
    if hasattr(value, "value"):  # str enums
        return str(value.value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
