"""Train the plan's catalog model on synthetic data that already lives on the device.

For demos and benchmarks: no data loading, decoding or host-to-device copies, so the measured
samples/s is the model's training speed, the quantity ``advise estimate`` predicts
(``throughput.samples_per_s``: "data already on the device"). Timing synchronises the device at
logging steps (launcher.runtime), and the first logged interval (compile, allocator warm-up) is
left out of the run's summary.

The data is a small pool of fixed micro-batches, cycled, different on every rank (as real data
parallel shards are). Labels are made learnable so that a falling loss shows training works:
a classifier's label is a function of its first input token, an LM's targets are its inputs
(a pool this small is memorised quickly either way).

    advise launch --cpu --processes 2 --model mini-transformer --seq-len 32 --micro-batch 4 \\
        --recipe synthetic --max-steps 20
"""

from __future__ import annotations

import argparse
import itertools

import torch

from launcher.recipes import startup

DEFAULT_STEPS = 50


def make_pool(spec, plan, device, rank: int, size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    from advisor.zoo import synthetic_batch

    c = plan.config
    gen = torch.Generator(device=device).manual_seed(1234 + rank)
    dtype = torch.bfloat16 if c.precision.casts_model else torch.float32
    pool = []
    for _ in range(size):
        x, y = synthetic_batch(spec, c.micro_batch, seq_len=c.seq_len, image_size=c.image_size,
                               device=device, dtype=dtype, generator=gen)
        arch = spec.arch
        if arch is not None and arch.head == "cls":
            y = x[:, 0] % arch.num_labels
        elif arch is not None and arch.head in ("lm", "mlm"):
            y = x.clone()
        if spec.is_vision and c.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        pool.append((x, y))
    return pool


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="launcher.recipes.synthetic", description=__doc__.splitlines()[0],
                                allow_abbrev=False)
    p.add_argument("--pool", type=int, default=4, help="distinct micro-batches per rank, cycled")
    startup.add_step_args(p, DEFAULT_STEPS)
    args = p.parse_args(argv)

    from advisor.catalog import catalog_model

    rt = startup.runtime(args)
    plan = rt.plan
    if not plan.model.name:
        raise SystemExit("the synthetic recipe trains catalog models (--model NAME); for --module or --hf-config "
                         "models launch your own script: advise launch ... -- train.py")
    spec = catalog_model(plan.model.name)
    model = startup.zoo_model_on(rt.device, spec, image_size=plan.config.image_size)
    model, optimizer = startup.setup_and_prepare(rt, model)
    if spec.arch is not None and not spec.is_vision:
        rt.tokens_per_sample = plan.config.seq_len or spec.default_seq_len
    batches = rt.batches(itertools.cycle(make_pool(spec, plan, rt.device, rt.rank, args.pool)))  # resumes a checkpoint

    steps = startup.step_count(rt, args, DEFAULT_STEPS)
    if rt.total_steps is None and rt.is_main:
        print(f"cardwise: no step count in the plan or --max-steps; training {steps} steps", flush=True)
    startup.train_until(rt, steps, model, optimizer, batches)
    rt.finish(model, recipe="synthetic", model_name=spec.name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
