"""The helper a training script uses to do what its plan says, single- or multi-process alike.

    from launcher.runtime import Runtime

    rt = Runtime.from_env()                      # plan from $CARDWISE_PLAN (set by `advise launch`)
    model = rt.setup_model(MyModel())            # pure-bf16 cast, channels_last, checkpointing
    model, opt, loader = rt.prepare(model, rt.optimizer(model), rt.dataloader(train_set))
    batches = rt.batches(loader)                 # endless, reshuffled per epoch; resumes a checkpoint
    while rt.step < (rt.total_steps or 1000):    # rt.step: a resumed run starts where it stopped
        rt.train_step(model, opt, batches)       # grad_accum micro-batches, one optimizer step, LR schedule, metrics
    rt.finish(model)                             # final weights as safetensors, last checkpoint

What it applies, and why here rather than in each script:
- ``Accelerator`` with the plan's mixed precision (autocast, fp32 master weights) and gradient
  accumulation; gradients are all-reduced only on the last micro-batch (``no_sync``).
- LR: the plan's (already scaled) LR with linear warmup, then cosine to 10% when the number of
  steps is known (nanoGPT's min_lr = lr/10), else constant; warmup and cosine follow the steps
  that run (``advisor.schedule``). One scheduler step per optimizer step.
- pure-bf16 = ``model.to(bfloat16)``: weights, gradients and AdamW states in bf16, stepped by
  ``KahanAdamW`` (a compensated update). The other memory compromises (8-bit AdamW, the step in
  backward, LoRA; FSDP CPU offload is the Accelerate config's) live in ``launcher.compromises``.
- fsdp-keep: the FSDP2 units keep their gathered weights across the micro-batches of a step
  (``launcher.keep_gathered``): one all-gather per step instead of two per micro-batch.
- ``torch.compile`` when planned, unless Accelerate's dynamo config already compiles in
  ``prepare`` (the config cardwise writes does that, so plain Accelerate scripts get it too).
- Fused AdamW on CUDA (one kernel over all parameters instead of a loop of small ones).
- Data sharding per rank: ``accelerator.prepare`` of the DataLoader (Accelerate's equivalent of
  DistributedSampler), ``set_epoch`` every epoch; the order is a function of the seed and the epoch
  (``launcher.data_order``), so a resumed run reads exactly what the uninterrupted one would have.
- Checkpoints (``launcher.checkpoints``): ``accelerator.save_state`` every ``--checkpoint-every``
  steps and at the end, final weights (LoRA adapters only, under ``adapters/``) as safetensors,
  ``advise launch --resume RUN``. A stop the runner asks for (the queue service's graceful stop,
  ``advise cancel``, Ctrl-C of ``advise launch``) ends the run at the next step boundary with a
  checkpoint of that step, all ranks agreeing on the step (``launcher.graceful_stop``).
- ``metrics.jsonl`` rows {step, loss, samples_per_s, tokens_per_s, peak_gib, reserved_gib, rank, time,
  attempt, interval_s, data_wait_s, data_wait_share} (the last two feed ``launcher.data_wait``'s check);
  the peaks are reset after the first optimizer step (steady state, as ``advise estimate``'s
  ``peak_gib``: model building and the optimizer's first allocation are not training); timing
  synchronises the device only at logging steps, so measuring does not slow training.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from advisor.config import Precision, Strategy
from advisor.plan import Plan
from advisor.schedule import lr_factor
from launcher.command import ENV_ATTEMPT, ENV_MAX_STEPS, ENV_METRICS, ENV_PLAN, ENV_RUN_DIR

# final-rank*.json's param_sha256 (replicas bit-identical) is kept for models up to this size (cardwise's
# choice): hashing copies every weight to the host first, and sha256 itself ran at 2.0 GB/s on this
# project's 2-core CI-class VM (hashlib over 1 GiB of random bytes, 2026-12-04), so llama3-8b's 32 GB of
# fp32 weights would add about 16 s of hashing alone to every run's end. The float64 sum is always kept.
DIGEST_MAX_PARAMS = 200_000_000


def _die_with_parent() -> None:
    """Ask Linux to SIGTERM this rank when its launcher dies, so no rank outlives a killed run."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    # The parent died before prctl took effect: we were re-parented. (Not "ppid is 1": a launcher that
    # is a container's init process is pid 1 and alive.)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


class Runtime:
    """One rank's view of the plan, wrapping an ``accelerate.Accelerator``."""

    def __init__(self, plan: Plan, *, max_steps: int | None = None, metrics_path: str | Path | None = None,
                 run_dir: str | Path | None = None, attempt: int = 1, log_every: int | None = None,
                 clip_grad_norm: float | None = None):
        from accelerate import Accelerator
        from accelerate.utils import DataLoaderConfiguration, GradientAccumulationPlugin

        from launcher.data_order import DATA_SEED

        self.plan = plan
        self.max_steps = max_steps
        self.schedule = plan.schedule(max_steps)  # steps and warmup that run (advisor.schedule)
        self.attempt = attempt
        self.run_dir = Path(run_dir) if run_dir else None
        self.metrics_path = Path(metrics_path) if metrics_path else None
        self.clip_grad_norm = clip_grad_norm
        precision = plan.config.precision
        # DESIGN.md's precision names: fp32 = PyTorch's defaults (fp32 matmuls, cuDNN convolutions
        # allowed TF32: torch.backends.cudnn.allow_tf32 defaults to True), tf32 = TF32 for matmuls
        # too; the estimate (advisor.throughput.peak_flops) assumes the same. Autocast precisions keep
        # TF32 for the matmuls left in fp32.
        true_fp32 = precision is Precision.fp32
        torch.set_float32_matmul_precision("highest" if true_fp32 else "high")
        torch.backends.cudnn.allow_tf32 = True
        self.accelerator = Accelerator(
            cpu=plan.cpu,
            mixed_precision=plan.mixed_precision,
            # sync_with_dataloader=False: an epoch boundary must not force an early optimizer step,
            # or steps would stop holding exactly grad_accum micro-batches.
            # sync_each_batch for FSDP/HSDP: reduce-scatter every micro-batch and keep the gradients
            # sharded, as the estimate counts them (advisor.memory, advisor.comm.fsdp_comm). Without it
            # Accelerate's accumulate() enters no_sync, and FSDP then holds the whole model's gradients
            # unsharded across the micro-batches: what fsdp-keep plans for and plain FSDP does not.
            gradient_accumulation_plugin=GradientAccumulationPlugin(
                num_steps=plan.config.grad_accum, sync_with_dataloader=False,
                sync_each_batch=plan.config.strategy in (Strategy.fsdp, Strategy.hsdp)),
            step_scheduler_with_optimizer=False,  # we step once per optimizer step, not per process
            # A script's own DataLoader(shuffle=True), once prepared, shuffles by seed and epoch too
            # (Accelerate's SeedableRandomSampler): resuming it after the first epoch reads the same order.
            dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=DATA_SEED),
        )
        self.step = 0  # optimizer steps done (a resumed run starts at its checkpoint's)
        self._steps_here = 0  # optimizer steps this process did: a resumed run's first is not step 1
        self.scheduler: torch.optim.lr_scheduler.LambdaLR | None = None
        self.tokens_per_sample: int | None = plan.config.seq_len
        steps = self.total_steps or 0
        self.log_every = log_every or max(1, min(10, steps // 10 if steps else 10))
        self._loss_sum: torch.Tensor | None = None
        self._since_log = 0
        self._t_log: float | None = None
        self.first_step_time: float | None = None
        self._lr_used = plan.lr  # the LR of the last optimizer step (metrics.jsonl's "lr")
        self.counters: dict[str, int] = {}  # a recipe's running counts (e.g. bad_samples), in every metrics row
        self._keep_root: Any = None  # fsdp-keep: the FSDP2 root whose gathered weights stay across micro-batches

    @classmethod
    def from_env(cls, **kwargs: Any) -> "Runtime":
        """The runtime for a rank started by ``advise launch`` (reads ``$CARDWISE_PLAN``)."""
        path = os.environ.get(ENV_PLAN)
        if not path:
            raise SystemExit(f"{ENV_PLAN} is not set: start this script with `advise launch ... -- {sys.argv[0]}` "
                             f"or set {ENV_PLAN}=path/to/plan.json")
        _die_with_parent()
        max_steps = os.environ.get(ENV_MAX_STEPS)
        kwargs.setdefault("max_steps", int(max_steps) if max_steps else None)
        kwargs.setdefault("metrics_path", os.environ.get(ENV_METRICS))
        kwargs.setdefault("run_dir", os.environ.get(ENV_RUN_DIR))
        kwargs.setdefault("attempt", int(os.environ.get(ENV_ATTEMPT, "1")))
        return cls(Plan.load(Path(path)), **kwargs)

    # ---------------------------------------------------------------- facts
    @property
    def device(self) -> torch.device:
        return self.accelerator.device

    @property
    def rank(self) -> int:
        return self.accelerator.process_index

    @property
    def world_size(self) -> int:
        return self.accelerator.num_processes

    @property
    def is_main(self) -> bool:
        return self.accelerator.is_main_process

    @property
    def total_steps(self) -> int | None:
        """Optimizer steps to run: ``--max-steps`` caps the plan's total (advisor.schedule)."""
        return self.schedule.total_steps

    def _fsdp_checkpoints(self) -> bool:
        plugin = getattr(self.accelerator.state, "fsdp_plugin", None)
        return bool(plugin is not None and getattr(plugin, "activation_checkpointing", False))

    def _accelerate_compiles(self) -> bool:
        from accelerate.utils import DynamoBackend

        return self.accelerator.state.dynamo_plugin.backend != DynamoBackend.NO

    # ---------------------------------------------------------------- building
    def setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Apply the plan's model-level choices before ``prepare`` (and before the optimizer)."""
        c = self.plan.config
        if c.precision.casts_model:
            model = model.to(torch.bfloat16)
        if c.channels_last:
            model = model.to(memory_format=torch.channels_last)
        if self.plan.sync_batchnorm and self.world_size > 1:  # rule batchnorm.sync: small per-GPU batches
            model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        from launcher import model_setups

        model_setups.apply(self.plan, model)  # what the active setups change in the model itself
        if c.grad_ckpt and not self._fsdp_checkpoints():
            if hasattr(model, "set_grad_checkpointing"):  # advisor.zoo models
                model.set_grad_checkpointing(True)
            elif hasattr(model, "gradient_checkpointing_enable"):  # Hugging Face models
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            elif self.is_main:
                print("cardwise: the plan asks for --grad-ckpt but this model has no checkpointing switch", file=sys.stderr)
        from launcher import compromises

        return compromises.apply_to_model(self.plan, model, self.device)  # LoRA adapters (peft), last

    def optimizer(self, model_or_params: torch.nn.Module | Iterable, weight_decay: float = 0.01) -> torch.optim.Optimizer:
        """The plan's optimizer at the plan's LR (the schedule multiplies it from step 0)."""
        from launcher import compromises

        params = model_or_params.parameters() if isinstance(model_or_params, torch.nn.Module) else model_or_params
        return compromises.make_optimizer(self.plan, params, self.device, weight_decay)

    def dataloader(self, dataset, *, shuffle: bool = True, collate_fn: Callable | None = None,
                   keyed: bool = False) -> torch.utils.data.DataLoader:
        """A DataLoader of micro-batches with the plan's workers/pinning; pass it to ``prepare``.

        Its order is a function of the seed and the epoch (``launcher.data_order.EpochSampler``), so a
        resumed run reads what the uninterrupted one would have. ``keyed=True`` indexes the dataset with
        ``SampleKey`` s, for a dataset whose augmentations must be reproduced too (draw them from the key).
        The loader has its own generator: loading never moves torch's global RNG (the model's dropout)."""
        from launcher.data_order import DATA_SEED, EpochSampler

        workers = self.plan.num_workers
        stream = isinstance(dataset, torch.utils.data.IterableDataset)  # orders itself (text_classification.RowStream)
        return torch.utils.data.DataLoader(
            dataset, batch_size=self.plan.config.micro_batch, drop_last=True,
            sampler=None if stream else EpochSampler(len(dataset), seed=DATA_SEED, shuffle=shuffle, keyed=keyed),
            generator=torch.Generator().manual_seed(DATA_SEED),
            num_workers=workers, pin_memory=self.plan.pin_memory and self.device.type == "cuda",
            persistent_workers=workers > 0, prefetch_factor=(self.plan.prefetch_factor or 2) if workers > 0 else None,
            collate_fn=collate_fn)

    def prepare(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *loaders):
        """``accelerator.prepare`` plus the LR schedule and compile; returns (model, optimizer, *loaders)."""
        # The schedule follows the steps that run: --max-steps shorter than the plan resizes the warmup
        # and the cosine (Plan.schedule), so a short run still reaches its peak LR.
        sched = self.schedule
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: lr_factor(s, sched.warmup_steps, sched.total_steps))
        model, optimizer, *loaders = self.accelerator.prepare(model, optimizer, *loaders)
        if self.plan.config.compile and not self._accelerate_compiles():
            model = torch.compile(model)
        self._compromise_hooks(model, optimizer)
        return (model, optimizer, *loaders)

    def _compromise_hooks(self, model, optimizer) -> None:
        """Record what the compromises run as (compromise.json); no clipping with the step in backward."""
        from launcher import compromises

        if self.clip_grad_norm and not compromises.can_clip(optimizer):
            if self.is_main:
                print("cardwise: --optimizer-in-backward steps each parameter as its gradient arrives, so gradient "
                      "clipping (the global norm) is not possible; training without it", file=sys.stderr)
            self.clip_grad_norm = None
        if self.is_main:
            compromises.write_description(self.run_dir, compromises.describe(self.plan, model, optimizer, self.accelerator))

    def batches(self, loader) -> Iterator:
        """Batches forever, calling ``set_epoch`` so every epoch is shuffled differently (same on all ranks).

        Also the step boundary checkpoints hook into (``launcher.checkpoints.batch_stream``): a
        resumed run loads its checkpoint here and continues at the data position it had reached;
        every ``--checkpoint-every`` steps the state is saved before the next step's first batch;
        the time inside the loader's ``next()`` is measured for ``launcher.data_wait``'s check.
        Loop ``while rt.step < total``: a resumed run starts mid-way.
        """
        from launcher.checkpoints import batch_stream

        return batch_stream(self, loader)

    # ---------------------------------------------------------------- training
    def train_step(self, model, optimizer, batches: Iterator, loss_fn: Callable | None = None) -> torch.Tensor:
        """One optimizer step over ``grad_accum`` micro-batches from ``batches``; returns the mean
        loss (a detached tensor: reading it would sync the device). ``loss_fn(model, batch)``
        defaults to ``model(*batch)``, the advisor.zoo convention."""
        acc = self.accelerator
        loss_fn = loss_fn or (lambda m, b: m(*b))
        if self._t_log is None:
            self._t_log = time.perf_counter()
        total = None
        accum = self.plan.config.grad_accum
        keep = None
        if self.plan.config.strategy.keeps_gathered:
            from launcher.keep_gathered import before_micro_batch, require_root

            keep = self._keep_root = self._keep_root or require_root(model)
        for i in range(accum):
            if keep is not None:
                before_micro_batch(keep, i, accum)
            batch = next(batches)
            with acc.accumulate(model):  # no_sync on all but the last micro-batch
                loss = loss_fn(model, batch)
                acc.backward(loss)  # divides by grad_accum
                if acc.sync_gradients and self.clip_grad_norm:
                    acc.clip_grad_norm_(model.parameters(), self.clip_grad_norm)
                optimizer.step()  # a no-op until the last micro-batch
                optimizer.zero_grad(set_to_none=True)
            d = loss.detach().float()
            total = d if total is None else total + d
        if self.scheduler is not None:
            self._lr_used = self.scheduler.get_last_lr()[0]  # this step's LR, for metrics.jsonl
            self.scheduler.step()
        self.step += 1
        self._steps_here += 1
        if self._steps_here == 1:  # when the first optimizer step is done: launch overhead (incl. compile)
            self._sync()
            self.first_step_time = time.time()
            if self.device.type == "cuda":  # peak_gib is the steady state's, as the estimate's (not the build's)
                torch.cuda.reset_peak_memory_stats(self.device)
        mean = total / self.plan.config.grad_accum
        self._loss_sum = mean if self._loss_sum is None else self._loss_sum + mean
        self._since_log += 1
        if self.step % self.log_every == 0 or self.step == self.total_steps:
            self._log()
        return mean

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _log(self) -> None:
        self._sync()
        now = time.perf_counter()
        dt = max(now - self._t_log, 1e-9)
        samples = self._since_log * self.plan.config.micro_batch * self.plan.config.grad_accum
        row = {
            "step": self.step,
            "loss": float(self._loss_sum.item() / self._since_log),
            "lr": self._lr_used,  # the LR the last optimizer step used
            "samples_per_s": samples / dt,
            "tokens_per_s": samples * self.tokens_per_sample / dt if self.tokens_per_sample else None,
            "peak_gib": torch.cuda.max_memory_allocated(self.device) / 2**30 if self.device.type == "cuda" else None,
            "reserved_gib": torch.cuda.max_memory_reserved(self.device) / 2**30 if self.device.type == "cuda" else None,
            "rank": self.rank,
            "device": self.device.type,  # launcher.data_wait: a CPU run's verdict needs no NVML
            "time": time.time(),
            "attempt": self.attempt,
            "interval_s": dt,
        }
        row.update(self.counters)
        if getattr(self, "_data_clock", None) is not None:  # launcher.data_wait: batches() measured the waits
            waited = self._data_clock.take()
            row.update(data_wait_s=waited, data_wait_share=min(1.0, waited / dt))
        self.write_row(row)
        if self.is_main:
            print(f"step {row['step']}: loss {row['loss']:.4f}, {row['samples_per_s']:.1f} samples/s (rank 0)", flush=True)
        self._loss_sum, self._since_log, self._t_log = None, 0, time.perf_counter()

    def write_row(self, row: dict) -> None:
        """Append one JSON line to metrics.jsonl (one write on an O_APPEND descriptor: ranks never interleave)."""
        if self.metrics_path is None:
            return
        fd = os.open(self.metrics_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (json.dumps(row) + "\n").encode())
        finally:
            os.close(fd)

    def finish(self, model, /, tokenizer=None, **extra: Any) -> dict:
        """Save the final weights (and the last checkpoint when checkpointing; ``launcher.checkpoints``),
        write ``final-rank{R}.json`` (steps, parameter checksum, ``extra``) and shut down cleanly.

        The checksum (sha256 of every parameter's bytes) is identical on all ranks when data
        parallelism kept the replicas in sync, which the tests check.
        """
        if self._since_log:
            self._log()
        acc = self.accelerator
        acc.wait_for_everyone()
        from launcher.checkpoints import checkpoints_of

        extra = {**checkpoints_of(self).finish(model, tokenizer), **extra}
        digest, total = weights_fingerprint(acc.unwrap_model(model).named_parameters())
        info = {"rank": self.rank, "world_size": self.world_size, "steps": self.step, "attempt": self.attempt,
                "micro_batch": self.plan.config.micro_batch, "grad_accum": self.plan.config.grad_accum,
                "param_sha256": digest, "param_sum": total,
                "first_step_time": self.first_step_time, **extra}
        if self.run_dir is not None:
            (self.run_dir / f"final-rank{self.rank}.json").write_text(json.dumps(info, indent=2) + "\n")
        acc.end_training()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
        return info


def weights_fingerprint(named_parameters, max_params: int = DIGEST_MAX_PARAMS) -> tuple[str | None, float]:
    """(sha256 of the names and bytes, or None beyond ``max_params``; float64 sum of every weight).

    The sum is taken where the weights are, in chunks of 16 M elements, so a nearly full GPU needs no
    full-size float64 copy at the end of a run."""
    params = sorted(named_parameters, key=lambda kv: kv[0])
    digest = hashlib.sha256() if sum(p.numel() for _, p in params) <= max_params else None
    total = 0.0
    for name, p in params:
        flat = p.detach().reshape(-1)
        total += sum(float(c.sum(dtype=torch.float64)) for c in flat.split(1 << 24))
        if digest is not None:
            digest.update(name.encode())
            digest.update(flat.cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return (digest.hexdigest() if digest is not None else None), total
