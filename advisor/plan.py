"""A launchable plan: one recommendation (or a user's pinned choices) frozen as data.

The rules layer produces it, ``plan.json`` stores it, the launcher turns it into an Accelerate
config and argv, and the runtime helper inside each rank reads it back from ``CARDWISE_PLAN``.
It lives in ``advisor`` (not ``launcher``) because it is pure data every layer shares.
"""

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from advisor.config import Precision, TrainConfig
from advisor.errors import UserError
from advisor.schedule import Schedule, WarmupPolicy, steps_per_epoch, steps_to_run, warmup_for

PLAN_VERSION = 1


class ModelRef(BaseModel):
    """Where the model comes from: exactly one of catalog name, HF config file, or module factory."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, description="catalog name, e.g. 'gpt2'")
    hf_config: str | None = Field(None, description="path to a Hugging Face config.json")
    module: str | None = Field(None, description="FILE.py:FACTORY or pkg.mod:FACTORY")
    input_shape: tuple[int, ...] | None = None
    input_dtype: str = "float32"
    loss: Literal["ce", "mse", "none"] | None = Field(
        None, description="--module: the loss on the output (ce over the last dim, mse, or none: the output is the loss); None = ce")
    implementation: Literal["cardwise", "transformers"] | None = Field(
        None, description="--model: which code runs it: cardwise's own (its recipes) or the transformers class a "
                          "user's script loads; None = the command's default")

    @model_validator(mode="after")
    def _one_source(self) -> "ModelRef":
        given = [n for n in ("name", "hf_config", "module") if getattr(self, n)]
        if len(given) != 1:
            # the flags as users type them: field `name` is the flag --model
            flag = {"name": "--model", "hf_config": "--hf-config", "module": "--module"}
            raise UserError(
                "give exactly one model source" + (f" (got {', '.join(flag[g] for g in given)})" if given else ""),
                fix="--model NAME | --hf-config PATH/config.json | --module FILE.py:FACTORY --input-shape 3,224,224",
            )
        return self

    def label(self) -> str:
        return self.name or self.hf_config or self.module or "?"

    def to_argv(self) -> list[str]:
        """The model flags that name this source again (``--model`` | ``--hf-config`` | ``--module ...``)."""
        if self.name:
            return ["--model", self.name] + (["--implementation", self.implementation] if self.implementation else [])
        if self.hf_config:
            return ["--hf-config", self.hf_config]
        out = ["--module", self.module]
        if self.input_shape:
            out += ["--input-shape", ",".join(map(str, self.input_shape))]
        if self.input_dtype != "float32":
            out += ["--input-dtype", self.input_dtype]
        if self.loss:
            out += ["--loss", self.loss]
        return out

    @classmethod
    def from_flags(cls, *, name=None, hf_config=None, module=None, input_shape=None, input_dtype="float32", loss=None,
                   implementation=None) -> "ModelRef":
        """From the CLI's (or the wizard's) model fields, with the errors a user can act on."""
        if not (name or hf_config or module):
            raise UserError("no model given",
                            fix="add --model NAME (see `advise models`), --hf-config PATH or --module FILE.py:FACTORY")
        if input_shape and not module:
            raise UserError("--input-shape only applies to --module", fix="drop --input-shape, or use --module FILE.py:FACTORY")
        if loss and not module:
            raise UserError("--loss only applies to --module (catalog and Hugging Face models bring their own loss)",
                            fix="drop --loss, or use --module FILE.py:FACTORY")
        if implementation and not name:
            raise UserError("--implementation only applies to catalog models (--model NAME)",
                            fix="drop --implementation: --hf-config and --module already name the code that runs")
        return cls(name=name, hf_config=hf_config, module=module, input_shape=input_shape,
                   input_dtype=input_dtype or "float32", loss=loss, implementation=implementation)


class Plan(BaseModel):
    """Everything a launch needs; nothing here is re-decided at launch time."""

    model_config = ConfigDict(extra="forbid")

    version: int = PLAN_VERSION
    model: ModelRef
    config: TrainConfig
    gpu: str | None = Field(None, description="GPU kind planned for (None for CPU runs)")
    processes_per_node: int = Field(1, ge=1, description="GPUs (or CPU processes) per node")
    nodes: int = Field(1, ge=1)
    cpu: bool = Field(False, description="run ranks on CPU with gloo instead of GPUs")
    global_batch: int = Field(ge=1, description="samples per optimizer step over all ranks")
    lr: float = Field(gt=0, description="learning rate after scaling")
    base_lr: float = Field(gt=0)
    base_batch: int = Field(ge=1)
    lr_scaling: Literal["linear", "sqrt", "none"] = "linear"
    warmup_steps: int = Field(0, ge=0, description="warmup for total_steps (a shorter run resizes it: schedule())")
    warmup: WarmupPolicy | None = Field(None, description="how the warmup was sized, so a run cut short by --max-steps "
                                                          "warms up over a share of the steps it runs; None = "
                                                          "warmup_steps as given")
    total_steps: int | None = Field(None, ge=1, description="optimizer steps of the whole run, if known")
    epochs: float | None = None
    dataset_size: int | None = None
    num_workers: int = Field(0, ge=0)
    pin_memory: bool = True
    prefetch_factor: int | None = Field(None, ge=1, description="DataLoader batches prefetched per worker")
    sync_batchnorm: bool = Field(False, description="convert BatchNorm to SyncBatchNorm across ranks")
    task: str | None = None
    forced: str | None = Field(None, description="launched with --force although the estimate says it will not fit: "
                                                 "why it says so")
    no_accumulation: bool = Field(False, description="accumulation stays 1 (node H's no-accumulation compromise, or "
                                  "--grad-accum 1 pinned): an OOM retry lowers the global batch instead of accumulating")

    @property
    def world_size(self) -> int:
        return self.processes_per_node * self.nodes

    @property
    def mixed_precision(self) -> Literal["no", "bf16", "fp16"]:
        """Accelerate's ``mixed_precision``: autocast only; pure-bf16 casts the model instead. A precision that
        runs as another outside its own layers (``Precision.runs_as``) asks for that one's autocast."""
        p = self.config.precision
        if self.config.adapters:  # a frozen bf16 base under bf16 autocast (launcher.compromises.lora)
            return "fp16" if p is Precision.fp16 else "bf16"
        return p.runs_as.value if p.autocast else "no"

    @model_validator(mode="after")
    def _batch_adds_up(self) -> "Plan":
        c = self.config
        got = c.micro_batch * c.grad_accum * self.world_size
        if got != self.global_batch:
            raise UserError(
                f"micro-batch {c.micro_batch} x accumulation {c.grad_accum} x {self.world_size} ranks = {got}, "
                f"not the global batch {self.global_batch}",
                fix="pick a global batch divisible by micro-batch x ranks, or let cardwise choose the micro-batch",
            )
        return self

    def steps_per_epoch(self) -> int | None:
        if not self.dataset_size:
            return None
        return steps_per_epoch(self.dataset_size, self.global_batch)

    def schedule(self, max_steps: int | None = None) -> Schedule:
        """The steps and warmup that run when ``--max-steps`` (if any) caps the plan (advisor.schedule)."""
        total = steps_to_run(self.total_steps, max_steps)
        if self.warmup is None or (total is not None and total == self.total_steps):
            warm = min(self.warmup_steps, total) if total else self.warmup_steps
            return Schedule(total_steps=total, steps_per_epoch=self.steps_per_epoch(), warmup_steps=warm,
                            warmup_rule=f"{warm} steps (the plan's" + (f", of {total:,})" if total else ")"))
        warm, rule = warmup_for(total, self.warmup, self.steps_per_epoch())
        return Schedule(total_steps=total, steps_per_epoch=self.steps_per_epoch(), warmup_steps=warm, warmup_rule=rule)

    def save(self, path: Path) -> None:
        try:
            Path(path).write_text(self.model_dump_json(indent=2) + "\n")
        except OSError as exc:  # the CLI checks the path first; this is the race after the check
            raise UserError(f"cannot write the plan: {exc.strerror or exc}", where=str(path),
                            fix="give a file in an existing folder you can write") from None

    @classmethod
    def load(cls, path: Path) -> "Plan":
        """A plan.json, or a directory holding one (a run directory: ``advise launch --plan RUN_DIR``)."""
        if Path(path).is_dir():
            if not (Path(path) / "plan.json").is_file():
                raise UserError("a directory without a plan.json", where=str(path),
                                fix="give a plan.json written by `advise --save-plan`, or a run directory "
                                    "(`advise show ID` prints it)")
            path = Path(path) / "plan.json"
        from advisor.files import read_small_text

        fix = "give the path of a plan.json written by `advise --save-plan` or a run directory"
        try:
            text = read_small_text(path)  # a regular file of at most 16 MiB, UTF-8 (not /dev/zero, not a FIFO)
        except OSError as exc:
            raise UserError(f"cannot read plan file: {exc.strerror}", where=str(path), fix=fix) from None
        except ValueError as exc:
            raise UserError(f"cannot read plan file: {str(exc).removeprefix(f'{path}: ')}", where=str(path), fix=fix) from None
        try:
            return cls.model_validate_json(text)
        except Exception as exc:  # pydantic ValidationError or JSON error: name the file and field
            raise UserError(f"not a valid cardwise plan: {_first_error(exc)}", where=str(path),
                            fix="write it with `advise ... --save-plan plan.json`") from None


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        e = errors()[0]
        loc = ".".join(str(p) for p in e.get("loc", ()))
        return f"field '{loc}': {e.get('msg')}"
    return str(exc).splitlines()[0]
