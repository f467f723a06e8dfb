"""The child of ``advise probe``: a few real training steps of one plan on one device, measured.

``launcher.probe`` starts it (``python -m launcher.recipes.probe --plan plan.json --out
result.json``) through ``launcher.runner.Launch``: own session, dies with its parent, reaped.
It builds the model the plan names, from any source:

- catalog (``--model``): cardwise's implementation (``advisor.zoo``), as the synthetic recipe;
- ``--hf-config``: transformers' class for that config when transformers is installed (what a
  user's script runs), else cardwise's transformer of the same shape, and the result says which;
- ``--module FILE.py:FACTORY``: the factory's module on random inputs of ``--input-shape``; its
  loss is ``--loss`` (default cross-entropy over the last dimension), applied by the tracer's own
  ``apply_loss``, so that measured and estimated are the same training step.

Training goes through ``launcher.runtime.Runtime`` like every launch (pure-bf16 cast,
channels_last, checkpointing, Accelerate's autocast, compile, the plan's optimizer), with data
already on the device. ``--warmup`` optimizer steps first (compile and allocator growth happen
there), then the peak-memory counters are reset (DESIGN.md: ``peak_gib`` is the steady-state
peak after the first optimizer step) and ``--steps`` steps are timed between two device
synchronisations. CPU runs report the process's peak RSS over its RSS before the model was built
(the interpreter and libraries are no more training memory than the CUDA context is).

The result (JSON, ``--out``) has ``status`` ok|oom; a device OOM is caught, written and exits 3,
so that the parent can try a smaller micro-batch.
"""

from __future__ import annotations

import argparse
import itertools
import json
import resource
import sys
import time
from pathlib import Path

import torch

OOM_EXIT = 3
GIB = 2**30


def _rss_gib() -> float:
    """Current resident set of this process, GiB (/proc: the max counter cannot be read before a peak)."""
    import psutil

    return psutil.Process().memory_info().rss / GIB


def _say(text: str) -> None:
    print(f"probe: {text}", flush=True)


# ---------------------------------------------------------------- model and data per source
def _catalog(plan, spec, device):
    from advisor.zoo import build_trainable, init_weights
    from launcher.recipes.synthetic import make_pool

    model = build_trainable(spec, image_size=plan.config.image_size)
    if spec.arch is not None:
        init_weights(model)
    return model, make_pool(spec, plan, device, 0, 2), None, "cardwise " + spec.name


_HF_AUTO = {"lm": "AutoModelForCausalLM", "mlm": "AutoModelForMaskedLM", "cls": "AutoModelForSequenceClassification",
            "qa": "AutoModelForQuestionAnswering", "image-cls": "AutoModelForImageClassification", "none": "AutoModel"}


def _hf(plan, spec, device):
    from launcher.recipes.synthetic import make_pool

    pool = make_pool(spec, plan, device, 0, 2)
    head = spec.arch.head
    try:
        import transformers
    except ImportError:
        model, _, _, _ = _catalog(plan, spec, device)
        return model, pool, None, "cardwise transformer of the config's shape (transformers is not installed)"
    path = Path(plan.model.hf_config).expanduser()
    config = transformers.AutoConfig.from_pretrained(str(path.parent if path.is_file() else path))
    model = getattr(transformers, _HF_AUTO[head]).from_config(config)
    if head == "image-cls":  # the pool's labels are ImageNet's; this head may have fewer classes
        pool = [(x, y % config.num_labels) for x, y in pool]
    key = "pixel_values" if head == "image-cls" else "input_ids"

    def loss_fn(m, batch):
        x, y = batch
        if head == "none":
            return m(**{key: x}).last_hidden_state.float().mean()
        if head == "qa":  # the pool's labels are each sequence's span: start and end positions
            return m(**{key: x}, start_positions=y[:, 0], end_positions=y[:, 1]).loss
        return m(**{key: x}, labels=y).loss

    return model, pool, loss_fn, f"transformers {type(model).__name__}"


def _seq2seq(plan, spec, device):
    """An encoder-decoder (catalog T5, or --hf-config t5/mt5/bart): its transformers class from the config, trained
    as the estimate traced it (``advisor.tracer.seq2seq_step``: source ids, labels as long, its own loss)."""
    import transformers

    from advisor.catalog import hf_equivalent
    from advisor.tracer import seq2seq_step

    if plan.model.hf_config:
        path = Path(plan.model.hf_config).expanduser()
        config = transformers.AutoConfig.from_pretrained(str(path.parent if path.is_file() else path))
    else:
        data = hf_equivalent(spec.name)
        config = transformers.AutoConfig.for_model(data.pop("model_type"), **data)
    model = transformers.AutoModelForSeq2SeqLM.from_config(config)
    c = plan.config
    seq = c.seq_len or spec.default_seq_len or 512
    pool = [(torch.zeros(c.micro_batch, seq, dtype=torch.long, device=device),) for _ in range(2)]
    return model, pool, lambda m, batch: seq2seq_step(m, batch[0])[0], f"transformers {type(model).__name__}"


def _module(plan, spec, device):
    from advisor.tracer import apply_loss, is_encoder_decoder, load_factory, seq2seq_step

    ref, c = plan.model, plan.config
    model = load_factory(ref.module)()
    if not isinstance(model, torch.nn.Module):
        raise SystemExit(f"{ref.module} returned {type(model).__name__}, not a torch.nn.Module")
    dtype = getattr(torch, ref.input_dtype)
    if dtype.is_floating_point and c.precision.casts_model:
        dtype = torch.bfloat16
    gen = torch.Generator(device=device).manual_seed(1234)
    pool = []
    for _ in range(2):
        shape = (c.micro_batch, *ref.input_shape)
        x = (torch.randn(shape, device=device, dtype=dtype, generator=gen) if dtype.is_floating_point
             else torch.zeros(shape, device=device, dtype=dtype))  # zeros: a valid index for any embedding
        if c.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        pool.append((x,))

    loss = ref.loss or "ce"  # the loss the estimate traced (advisor.tracer.apply_loss), so both measure one step

    def loss_fn(m, batch):
        if is_encoder_decoder(m) and len(ref.input_shape) == 1 and not dtype.is_floating_point:
            return seq2seq_step(m, batch[0])[0]  # as the estimate traced it
        return apply_loss(m(*batch), loss)

    return model, pool, loss_fn, f"{type(model).__name__} from {ref.module}"


# ---------------------------------------------------------------- the measured run
def measure(plan, warmup: int, steps: int) -> dict:
    from advisor.sources import resolve_model
    from launcher.runtime import Runtime

    rt = Runtime(plan, log_every=10**9)  # no logging syncs inside the timed steps
    device = rt.device
    cuda = device.type == "cuda"
    ref = plan.model
    # --module: the child loads the factory itself; the parent already traced it for the estimate.
    spec = None if ref.module else resolve_model(ref)
    build = _module if ref.module else (_seq2seq if spec.family == "encoder-decoder" else
                                        _hf if ref.hf_config else _catalog)
    dispatch = None
    if cuda:  # this host's dispatch speed, before the model takes the GPU (advisor.host_speed)
        from launcher import host_dispatch

        dispatch = host_dispatch.measure(device)
        _say(f"host dispatch: {dispatch['us_per_step']:.0f} us per reference step ({dispatch['us_per_op']:.1f} us/op)")
    baseline_rss = _rss_gib()
    torch.manual_seed(0)
    model, pool, loss_fn, implementation = build(plan, spec, device)
    _say(f"{implementation}, micro-batch {plan.config.micro_batch} x {plan.config.grad_accum}, "
         f"{plan.config.precision.value}{' + compile' if plan.config.compile else ''} on {device}")
    model = rt.setup_model(model.to(device))
    model, optimizer = rt.prepare(model, rt.optimizer(model))
    batches = itertools.cycle(pool)

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    t = time.perf_counter()
    first_step_s = None
    for i in range(warmup):
        rt.train_step(model, optimizer, batches, loss_fn)
        sync()
        now = time.perf_counter()
        first_step_s = first_step_s if first_step_s is not None else now - t
        _say(f"warm-up step {i + 1}/{warmup}: {now - t:.2f} s")
        t = now
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    _say(f"timing {steps} steps")
    t_start, t0 = time.time(), time.perf_counter()
    loss = None
    for _ in range(steps):
        loss = rt.train_step(model, optimizer, batches, loss_fn)
    sync()
    dt = time.perf_counter() - t0
    t_end = time.time()
    samples = steps * plan.config.micro_batch * plan.config.grad_accum
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB  # Linux: KiB
    out = {
        "status": "ok", "implementation": implementation, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "samples_per_s": samples / dt, "step_s": dt / steps, "steps": steps, "warmup_steps": warmup,
        "first_step_s": first_step_s, "t_start": t_start, "t_end": t_end,
        "loss": float(loss) if loss is not None else None,
        "peak_gib": torch.cuda.max_memory_allocated(device) / GIB if cuda else max(0.0, peak_rss - baseline_rss),
        "reserved_gib": torch.cuda.max_memory_reserved(device) / GIB if cuda else None,
        "peak_rss_gib": peak_rss, "baseline_rss_gib": baseline_rss,
        "torch": torch.__version__, "host_dispatch": dispatch,
    }
    _say(f"{out['samples_per_s']:.2f} samples/s, peak {out['peak_gib']:.3f} GiB")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher.recipes.probe", description=__doc__.splitlines()[0],
                                allow_abbrev=False)
    p.add_argument("--plan", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--warmup", type=int, default=3, help="untimed optimizer steps first (at least 1)")
    p.add_argument("--steps", type=int, default=10, help="timed optimizer steps")
    args = p.parse_args(argv)

    from advisor.plan import Plan

    plan = Plan.load(args.plan)
    try:
        result = measure(plan, max(1, args.warmup), max(1, args.steps))
        code = 0
    except torch.OutOfMemoryError as exc:
        result, code = {"status": "oom", "error": str(exc).splitlines()[0]}, OOM_EXIT
        _say(f"out of memory at micro-batch {plan.config.micro_batch}")
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
