"""What combines with what: the one table of the combinations cardwise refuses, and ``check()``.

Every caller that refuses a combination calls ``check`` (or ``refusal`` to get the reason without
raising): the request's pins (rules.flow.check_request), the starting configuration of an exact
estimate (advisor.exact), the planner's candidate filter (rules.planner), the compromise ladder
(rules.compromise), the launcher's checks (launcher.compromises.checks), the CPU plan
(launcher.cpu_plan) and the Accelerate config (launcher.accelerate_config). A caller describes what
it knows as a ``Combo``; a field it does not know (a strategy the planner has not chosen yet) is None
and no row fires on it. ``advise rules`` lists the rows; tests/cases/constraints.toml holds a pass
and a fail case per id.

Not called from the config's or the request's validators (advisor.config, advisor.request): this
module imports them, and a validator sees one value at a time, not what the caller knows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from advisor.config import Optimizer, Precision, PureBf16Update, Strategy, TrainConfig
from advisor.errors import UserError


@dataclass(frozen=True)
class Combo:
    """What a caller knows of a run's way of training; None: not known (not pinned, not chosen yet)."""

    strategy: Strategy | None = None
    precision: Precision | None = None
    optimizer: Optimizer | None = None
    pure_bf16_update: PureBf16Update | None = None  # only when given (a config's default says nothing)
    optimizer_in_backward: bool = False
    cpu_offload: bool = False
    lora_rank: int | None = None
    quantize_base: str | None = None
    grad_accum: int | None = None
    accum_pinned: bool = False  # grad_accum is the user's --grad-accum (not a default)
    ranks: int | None = None  # processes of the run (GPUs, or --cpu ranks)
    nodes: int | None = None
    cpu: bool = False  # --cpu ranks
    model: str | None = None
    transformer: bool | None = None  # the model has attention and MLP projections (LoRA's targets)
    linear_blocks: bool | None = None  # its blocks' projections are nn.Linear (advisor.models.ModelSpec.linear_blocks)
    grad_ckpt: bool | None = None
    grad_ckpt_every: int | None = None
    compute_capability: tuple[int, int] | None = None  # the GPU's, where the caller knows the GPU

    @classmethod
    def of_config(cls, c: TrainConfig, **known) -> Combo:
        """A configuration's setting. CPU offload with --strategy single runs FSDP over one process."""
        strategy = Strategy.fsdp if c.cpu_offload and c.strategy is Strategy.single else c.strategy
        return cls(strategy=strategy, precision=c.precision, optimizer=c.optimizer,
                   optimizer_in_backward=c.optimizer_in_backward, cpu_offload=c.cpu_offload, lora_rank=c.lora_rank,
                   quantize_base=c.quantize_base, grad_accum=c.grad_accum, grad_ckpt=c.grad_ckpt,
                   grad_ckpt_every=c.grad_ckpt_every, **known)

    @classmethod
    def of_request(cls, req, **known) -> Combo:
        """A request's pins (advisor.request.Request)."""
        pins = {k: getattr(req, k) for k in _PINS if k not in known}
        for k in ("optimizer_in_backward", "cpu_offload"):
            if k in pins:
                pins[k] = bool(pins[k])
        return cls(**pins, accum_pinned=req.grad_accum is not None, **known)

    def but(self, **change) -> Combo:
        return replace(self, **change)


_PINS = ("strategy", "precision", "optimizer", "pure_bf16_update", "optimizer_in_backward", "cpu_offload", "lora_rank",
         "quantize_base", "grad_accum", "nodes", "grad_ckpt", "grad_ckpt_every")


@dataclass(frozen=True)
class Constraint:
    id: str
    when: Callable[[Combo], bool]  # true: the combination is refused
    what: Callable[[Combo], str]  # the combination, in the user's flags
    why: str
    fix: str

    def error(self, c: Combo) -> UserError:
        return UserError(f"{self.what(c)}: {self.why}", fix=self.fix)


def _sharded_how(c: Combo) -> str:
    return "--cpu-offload" if c.cpu_offload else f"--strategy {c.strategy.value}"


def _full_shard(c: Combo) -> bool:
    return c.cpu_offload or (c.strategy is not None and c.strategy.full_shard)


def _in_backward_what(c: Combo) -> str:
    if c.strategy not in (None, Strategy.single):
        return f"--optimizer-in-backward with --strategy {c.strategy.value}"
    if c.cpu_offload:
        return "--optimizer-in-backward with --cpu-offload"
    return f"--optimizer-in-backward with {c.ranks} {'GPUs' if not c.cpu else 'ranks'}" + (
        " and no --strategy single" if c.strategy is None else "")


def _single_what(c: Combo) -> str:
    if (c.ranks or 1) > 1:
        return f"--strategy single but has {c.ranks} {'ranks' if c.cpu else 'GPUs'}"
    return "--strategy single with --nodes > 1"


# bitsandbytes' 8-bit optimizers under FSDP: never measured here, and upstream reports illegal memory
# accesses (bitsandbytes-foundation/bitsandbytes#1633 "illegal memory access with FSDP2", open;
# #89 "8-bit optimizers dont work with FSDP", open).
EIGHT_BIT_FSDP = ("bitsandbytes' 8-bit optimizers are not combined with FSDP: untested here, and upstream reports "
                  "illegal memory accesses (bitsandbytes-foundation/bitsandbytes#1633, #89)")

# The table, in the order the checks run (the first row that fires is the refusal).
CONSTRAINTS: tuple[Constraint, ...] = (
    Constraint("dp.bench-only", lambda c: c.strategy is Strategy.dp,
               lambda c: "--strategy dp (DataParallel) is never recommended",
               "DataParallel plans are for `advise bench` only: Accelerate launches one process per device",
               "use --strategy ddp; `advise rules dataparallel.never` says why (the bench still measures dp)"),
    Constraint("pure-bf16-update.needs-pure-bf16",
               lambda c: c.pure_bf16_update is not None and c.precision is not Precision.pure_bf16,
               lambda c: f"--pure-bf16-update {c.pure_bf16_update.value} with "
                         + (f"--precision {c.precision.value}" if c.precision else "no --precision"),
               "it says how pure-bf16 steps its bf16 weights", "add --precision pure-bf16, or drop --pure-bf16-update"),
    Constraint("fp16.needs-gpu", lambda c: c.cpu and c.precision is Precision.fp16,
               lambda c: "--precision fp16 with --cpu", "fp16 autocast needs a GPU",
               "use --precision bf16 (CPUs run bf16 autocast) or fp32"),
    # FSDP (fsdp, fsdp-keep, hsdp) on --cpu ranks: torch's fully_shard itself trains over gloo (the
    # fsdp-keep test runs it), but Accelerate (1.16) only sets up FSDP for GPU-like distributed types
    # (AcceleratorState: MULTI_GPU, MULTI_XPU, ...; not MULTI_CPU), so it silently runs DDP with use_cpu,
    # and a plain single process with FSDP and no GPU: refuse rather than report a run as FSDP that was not.
    Constraint("fsdp.not-on-cpu", lambda c: c.cpu and c.strategy is not None and c.strategy.sharded and not c.cpu_offload,
               lambda c: "Accelerate cannot launch FSDP on CPU processes",
               "it would silently run DDP instead",
               "use --strategy ddp with --cpu, or drop --cpu and run on GPUs"),
    Constraint("hsdp.whole-nodes", lambda c: c.strategy is Strategy.hsdp and c.nodes is not None and c.nodes < 2,
               lambda c: "--strategy hsdp with one node", "HSDP shards inside each node and replicates across nodes",
               "add --nodes N (N >= 2), or use --strategy fsdp"),
    Constraint("single.one-rank",
               lambda c: c.strategy is Strategy.single and ((c.nodes or 1) > 1 or (c.ranks or 1) > 1),
               _single_what, "one process runs on one device",
               "use --strategy ddp (or fsdp) for several processes, or --gpus 1 / --processes 1; drop --nodes"),
    Constraint("qlora.needs-lora", lambda c: bool(c.quantize_base) and c.lora_rank is None,
               lambda c: f"--quantize-base {c.quantize_base} without --lora-rank",
               "it quantizes LoRA's frozen base (QLoRA); there is no frozen base without adapters",
               "add --lora-rank R (e.g. 16), or drop --quantize-base"),
    Constraint("lora.needs-transformer", lambda c: c.lora_rank is not None and c.transformer is False,
               lambda c: f"--lora-rank needs a transformer; {c.model} has none",
               "LoRA puts adapters on attention and MLP projections", "drop --lora-rank, or pick a transformer "
               "(see `advise models`)"),
    Constraint("fsdp-keep.needs-accumulation", lambda c: c.strategy is Strategy.fsdp_keep and c.grad_accum == 1,
               lambda c: "--strategy fsdp-keep with " + ("--grad-accum 1" if c.accum_pinned else
                                                          "accumulation 1 (--grad-accum 1, or none given)"),
               "it keeps the gathered weights across the micro-batches of one optimizer step, and there is only one",
               "add --grad-accum N (N >= 2), or use --strategy fsdp"),
    Constraint("fsdp-keep.several-gpus",
               lambda c: c.strategy is Strategy.fsdp_keep and c.ranks is not None and c.ranks < 2 and not c.cpu,
               lambda c: "--strategy fsdp-keep with one GPU",
               "it shards the model over several GPUs and keeps the gathered weights across accumulation; one GPU "
               "holds the whole model anyway", "add --gpus N (N >= 2), or use --strategy single"),
    Constraint("offload.not-cpu", lambda c: c.cpu_offload and c.cpu, lambda c: "--cpu-offload with --cpu",
               "it moves GPU state to host memory; a --cpu run has it there already",
               "drop --cpu-offload with --cpu, or drop --cpu and run on a GPU"),
    Constraint("offload.not-fsdp-keep", lambda c: c.cpu_offload and c.strategy is Strategy.fsdp_keep,
               lambda c: "--cpu-offload with --strategy fsdp-keep",
               "fsdp-keep keeps the gathered weights on the GPUs across accumulation, CPU offload keeps them in "
               "host memory", "use --strategy fsdp with --cpu-offload, or drop --cpu-offload"),
    Constraint("offload.fsdp-only", lambda c: c.cpu_offload and c.strategy in (Strategy.ddp, Strategy.single),
               lambda c: f"--cpu-offload with --strategy {c.strategy.value}",
               "CPU offload is FSDP's (parameters, gradients and optimizer states sharded to host memory)",
               "use --strategy fsdp (one GPU or several), or drop --cpu-offload"),
    Constraint("in-backward.no-accumulation",
               lambda c: c.optimizer_in_backward and c.grad_accum is not None and c.grad_accum > 1,
               lambda c: f"--optimizer-in-backward with --grad-accum {c.grad_accum}",
               "each parameter steps in its gradient hook, so there is no gradient to accumulate or all-reduce",
               "use it on one process: drop --grad-accum and add --strategy single (or --gpus 1), or drop "
               "--optimizer-in-backward"),
    Constraint("in-backward.one-process",
               lambda c: c.optimizer_in_backward and (c.strategy not in (None, Strategy.single) or c.cpu_offload
                                                      or (c.ranks or 1) > 1),
               _in_backward_what,
               "each parameter steps in its gradient hook, so there is no gradient to accumulate or all-reduce "
               "(one process only)",
               "use it on one process: drop --grad-accum and add --strategy single (or --gpus 1), or drop "
               "--optimizer-in-backward"),
    Constraint("8bit.not-fsdp", lambda c: c.optimizer is not None and c.optimizer.eight_bit and _full_shard(c),
               lambda c: f"--optimizer {c.optimizer.value} with {_sharded_how(c)}", EIGHT_BIT_FSDP,
               "use --strategy ddp or single, or drop --optimizer (--optimizer adamw under FSDP)"),
    Constraint("paged.needs-gpu", lambda c: c.optimizer is Optimizer.paged_adamw_8bit and c.cpu,
               lambda c: "--optimizer paged-adamw-8bit with --cpu",
               "it pages its states between GPU and host memory (CUDA unified memory); a --cpu run has no GPU to "
               "page from", "use --optimizer adamw-8bit (or adamw) with --cpu, or run on a GPU"),
    Constraint("qlora.not-fsdp", lambda c: bool(c.quantize_base) and _full_shard(c),
               lambda c: f"--quantize-base {c.quantize_base} with {_sharded_how(c)}",
               "QLoRA's 4-bit base is not sharded by FSDP here (sharding 4-bit weights needs a quantized storage "
               "dtype FSDP can flatten)", "use --strategy single or ddp with QLoRA"),
    # float8 tensor cores: Ada (8.9) and Hopper (9.0) on; torch._scaled_mm refuses older GPUs ("FP8 is only
    # supported on H100+, SM 8.9 and MI300+ devices", pytorch test/test_scaled_matmul_cuda.py).
    Constraint("fp8.needs-cc89", lambda c: c.precision is Precision.fp8 and c.compute_capability is not None
               and tuple(c.compute_capability) < (8, 9),
               lambda c: f"--precision fp8 on a GPU of compute capability {c.compute_capability[0]}."
                         f"{c.compute_capability[1]}",
               "float8 matmuls need float8 tensor cores: compute capability 8.9 (Ada: L4, L40S, RTX 4090) or 9.0 "
               "(H100, H200) and later", "use --precision bf16, or a GPU with float8 tensor cores (--gpu h100)"),
    Constraint("fp8.needs-gpu", lambda c: c.precision is Precision.fp8 and c.cpu,
               lambda c: "--precision fp8 with --cpu", "torchao's float8 Linears run torch._scaled_mm on CUDA GPUs",
               "use --precision bf16 (or fp32) with --cpu"),
    Constraint("fp8.not-lora", lambda c: c.precision is Precision.fp8 and c.lora_rank is not None,
               lambda c: "--precision fp8 with --lora-rank",
               "LoRA's frozen base is cast to bf16 and peft wraps its Linears; float8 conversion of those is not "
               "built here", "drop --precision fp8 (LoRA runs bf16 autocast), or drop --lora-rank"),
    Constraint("fp8.needs-transformer", lambda c: c.precision is Precision.fp8 and c.transformer is False,
               lambda c: f"--precision fp8 needs a transformer; {c.model} has none",
               "fp8 converts the Linear layers of a transformer's blocks (torchao); the estimate counts them from the "
               "architecture", "use --precision bf16, or pick a transformer (see `advise models`)"),
    # torchao's convert_to_float8_training swaps nn.Linear modules only (torchao/float8/float8_linear_utils.py);
    # the launch would stop in every rank (launcher.model_setups.float8_linears, kept as the safety net)
    Constraint("fp8.needs-linear", lambda c: c.precision is Precision.fp8 and c.linear_blocks is False,
               lambda c: f"--precision fp8 with {c.model or 'this model'}, whose blocks hold no nn.Linear",
               "torchao converts nn.Linear layers to float8, and this implementation builds its projections as "
               "transformers' Conv1D (GPT-2's family): nothing would run in float8",
               "use --precision bf16, or an implementation built of nn.Linear (--implementation cardwise for a "
               "catalog model)"),
    Constraint("selective-ckpt.not-with-grad-ckpt", lambda c: bool(c.grad_ckpt_every) and bool(c.grad_ckpt),
               lambda c: f"--grad-ckpt-every {c.grad_ckpt_every} with --grad-ckpt",
               "--grad-ckpt checkpoints every block, --grad-ckpt-every K every K-th one",
               "keep one: --grad-ckpt (every block) or --grad-ckpt-every K (e.g. 2)"),
    Constraint("lora.autocast", lambda c: c.lora_rank is not None and c.precision in (Precision.fp32, Precision.tf32),
               lambda c: f"--lora-rank with --precision {c.precision.value}",
               "LoRA trains fp32 adapters on a frozen bf16 base under bf16 autocast; fp32 does not apply",
               "drop --precision (or use --precision bf16) with --lora-rank"),
)
BY_ID: dict[str, Constraint] = {c.id: c for c in CONSTRAINTS}
# The rows a request's pins decide alone, whatever the planner chooses next (advisor.starting_config) ...
REQUEST_ROWS = ("dp.bench-only", "pure-bf16-update.needs-pure-bf16", "fp16.needs-gpu", "hsdp.whole-nodes",
                "single.one-rank", "qlora.needs-lora", "fsdp-keep.needs-accumulation", "fp8.needs-cc89", "fp8.needs-gpu",
                "fp8.not-lora", "selective-ckpt.not-with-grad-ckpt")
# ... and with the step in backward, what one exact configuration must hold (advisor.exact: `advise estimate`
# answers what-ifs the planner would not choose, an 8-bit optimizer under FSDP among them).
ESTIMATE_ROWS = REQUEST_ROWS + ("in-backward.no-accumulation", "in-backward.one-process", "fp8.needs-transformer",
                                 "fp8.needs-linear")
# The planner's candidate filter: a strategy and a GPU count the base configuration cannot run with.
PLANNER_ROWS = ("in-backward.one-process", "fsdp-keep.several-gpus", "offload.not-fsdp-keep",
                "fsdp-keep.needs-accumulation")
# What Accelerate cannot launch (launcher.accelerate_config.distributed_type).
ACCELERATE_ROWS = ("dp.bench-only", "fsdp.not-on-cpu", "single.one-rank")
# What FSDP cannot shard: the planner's FSDP candidates and the ladder's strategies leave these out.
SHARDING_ROWS = ("8bit.not-fsdp", "qlora.not-fsdp")
# Rows the launcher alone checks: what the runtime cannot run, where the estimate can still answer
# (an fp32 LoRA's estimate is a fair question; its launch is not built).
LAUNCH_ONLY = frozenset({"lora.autocast"})


def refusal(c: Combo, *, only: tuple[str, ...] | None = None, launch: bool = False) -> Constraint | None:
    """The first row that refuses ``c`` (of ``only``, when given; the launch-only rows when ``launch``)."""
    for row in CONSTRAINTS:
        if only is not None and row.id not in only:
            continue
        if row.id in LAUNCH_ONLY and not launch:
            continue
        if row.when(c):
            return row
    return None


def check(c: Combo, *, only: tuple[str, ...] | None = None, launch: bool = False) -> None:
    """Refuse (UserError: what, why, fix) the first combination of ``c`` the table does not allow."""
    row = refusal(c, only=only, launch=launch)
    if row is not None:
        raise row.error(c)
