"""Baselines for ``benchmarks/speed/launcher_bench.py``: the same training step without cardwise.

``--mode hand``: what a user writes by hand and starts with ``accelerate launch --config_file
...``: an ``Accelerator`` with the config's mixed precision, ``torch.compile``, fused AdamW,
channels_last for CNNs, the same synthetic pool on the device. cardwise's launched run must be
within 2% of this (issue 4).

``--mode naive``: a plain fp32 eager loop (``python`` only, default AdamW, no compile, no
autocast, fp32 matmuls): the speed the advice improves on.

Both time like launcher.runtime does: synchronise every ``--log-every`` steps, samples/s per
interval, the median of the intervals after the first. Writes one JSON line to ``--out``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("hand", "naive"), required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--micro-batch", type=int, required=True)
    p.add_argument("--seq-len", type=int)
    p.add_argument("--image-size", type=int)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    t_start = time.time()

    from advisor.catalog import catalog_model
    from advisor.zoo import build_trainable, init_weights, synthetic_batch

    spec = catalog_model(a.model)
    torch.manual_seed(0)
    model = build_trainable(spec, image_size=a.image_size)
    if spec.arch is not None:
        init_weights(model)
    cnn = spec.family == "cnn"
    if a.mode == "hand":
        from accelerate import Accelerator

        torch.set_float32_matmul_precision("high")
        acc = Accelerator()
        device = acc.device
        if cnn:
            model = model.to(memory_format=torch.channels_last)
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01, fused=True)
        model, opt = acc.prepare(model, opt)  # compiles when the config's dynamo_backend says so
        if a.compile and acc.state.dynamo_plugin.backend.value == "NO":
            model = torch.compile(model)
        backward = acc.backward
        precision = acc.mixed_precision
    else:
        if a.compile:
            raise SystemExit("the naive baseline is eager")
        torch.set_float32_matmul_precision("highest")
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = model.to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
        backward = lambda loss: loss.backward()  # noqa: E731
        precision = "fp32"

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    gen = torch.Generator(device=device).manual_seed(1234)
    pool = []
    for _ in range(4):
        x, y = synthetic_batch(spec, a.micro_batch, seq_len=a.seq_len, image_size=a.image_size, device=device, generator=gen)
        if cnn and a.mode == "hand":
            x = x.contiguous(memory_format=torch.channels_last)
        pool.append((x, y))
    batches = itertools.cycle(pool)

    rates, t_first, t_log = [], None, time.perf_counter()
    for step in range(1, a.steps + 1):
        x, y = next(batches)
        loss = model(x, y)
        backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # as the synthetic recipe does
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step == 1:
            sync()
            t_first = time.time()
        if step % a.log_every == 0:
            sync()
            now = time.perf_counter()
            rates.append(a.micro_batch * a.log_every / (now - t_log))
            t_log = now
    steady = sorted(rates[1:] or rates)
    row = {"mode": a.mode, "model": a.model, "precision": precision, "compile": a.compile, "micro_batch": a.micro_batch,
           "samples_per_s": steady[len(steady) // 2], "t_first_step": t_first, "t_script_start": t_start,
           "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None, "loss": float(loss)}
    with open(a.out, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(row, flush=True)


if __name__ == "__main__":
    main()
