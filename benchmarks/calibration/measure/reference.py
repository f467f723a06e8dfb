"""Measure the estimator's reference set on one GPU: peak memory and steady-state samples/s.

For each configuration: build the zoo model on the GPU, train with fused AdamW on synthetic data
already on the device (zero_grad(set_to_none=True), as Accelerate does), run warm-up steps
(compile happens there), reset the peak counter after the warm-up, then time
``--steps`` steps with CUDA events (the step loop is ``measure/steploop.py``'s, shared with
``measure/users_models.py``). Records ``torch.cuda.max_memory_allocated()`` over the timed
steps (DESIGN.md's ``peak_gib``), the device memory in use (``device_gib``), samples/s and step time.
Also measures the two ceilings (bf16 matmul rate, copy bandwidth) once (device/METHOD.md).

    python -m benchmarks.calibration.measure.reference --out results.jsonl [--only NAME] [--budget-s 540]
    python -m benchmarks.calibration.measure.reference --smoke   # CPU, tiny, checks the script runs

Rows go to the JSONL as they finish, so a run stopped at its time limit keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from advisor.catalog import catalog_model
from advisor.zoo import build_trainable, init_weights, synthetic_batch
from benchmarks.calibration.measure.gpu_clocks import GpuClocks
from benchmarks.calibration.measure.steploop import ceilings, free_device, make_step, memory, timed, warm_up
from launcher import host_dispatch

# (id, model, micro_batch, seq_len, image_size, precision, compile, grad_ckpt, channels_last, split)
# split: "fit" rows may be used to fit calibration constants; "holdout" rows never are, and the
# quality bars (DESIGN.md) are judged on them.
CONFIGS = [
    ("r50-fp32-64", "resnet50", 64, None, 224, "fp32", False, False, False, "fit"),
    ("r50-bf16-128", "resnet50", 128, None, 224, "bf16", False, False, False, "fit"),
    ("r50-bf16-256", "resnet50", 256, None, 224, "bf16", False, False, False, "holdout"),
    ("r50-bf16-cl-128", "resnet50", 128, None, 224, "bf16", False, False, True, "fit"),
    ("r50-pure-128", "resnet50", 128, None, 224, "pure-bf16", False, False, False, "holdout"),
    ("r50-bf16-ckpt-128", "resnet50", 128, None, 224, "bf16", False, True, False, "fit"),
    ("r18-bf16-256", "resnet18", 256, None, 224, "bf16", False, False, False, "holdout"),
    ("r101-bf16-128", "resnet101", 128, None, 224, "bf16", False, False, True, "holdout"),
    ("vitb-fp32-64", "vit-b-16", 64, None, 224, "fp32", False, False, False, "fit"),
    ("vitb-bf16-128", "vit-b-16", 128, None, 224, "bf16", False, False, False, "fit"),
    ("vitb-bf16-256", "vit-b-16", 256, None, 224, "bf16", False, False, False, "holdout"),
    ("vitb-pure-128", "vit-b-16", 128, None, 224, "pure-bf16", False, False, False, "fit"),
    ("vitb-bf16-ckpt-128", "vit-b-16", 128, None, 224, "bf16", False, True, False, "holdout"),
    ("vitl-bf16-64", "vit-l-16", 64, None, 224, "bf16", False, False, False, "holdout"),
    ("bert-fp32-32", "bert-base", 32, 512, None, "fp32", False, False, False, "holdout"),
    ("bert-bf16-32", "bert-base", 32, 512, None, "bf16", False, False, False, "fit"),
    ("bert-bf16-64", "bert-base", 64, 512, None, "bf16", False, False, False, "holdout"),
    ("bert-pure-32", "bert-base", 32, 512, None, "pure-bf16", False, False, False, "holdout"),
    ("mini-fp32-64", "mini-transformer", 64, 256, None, "fp32", False, False, False, "fit"),
    ("mini-bf16-128", "mini-transformer", 128, 256, None, "bf16", False, False, False, "holdout"),
    ("gpt2-fp32-8", "gpt2", 8, 1024, None, "fp32", False, False, False, "fit"),
    ("gpt2-bf16-16", "gpt2", 16, 1024, None, "bf16", False, False, False, "fit"),
    ("gpt2-bf16-32", "gpt2", 32, 1024, None, "bf16", False, False, False, "holdout"),
    ("gpt2-bf16-ckpt-16", "gpt2", 16, 1024, None, "bf16", False, True, False, "fit"),
    ("gpt2-pure-16", "gpt2", 16, 1024, None, "pure-bf16", False, False, False, "holdout"),
    ("gpt2m-bf16-8", "gpt2-medium", 8, 1024, None, "bf16", False, False, False, "holdout"),
    ("l1b-bf16-4", "llama3.2-1b", 4, 2048, None, "bf16", False, False, False, "fit"),
    ("l1b-bf16-ckpt-8", "llama3.2-1b", 8, 2048, None, "bf16", False, True, False, "holdout"),
    ("l1b-pure-4", "llama3.2-1b", 4, 2048, None, "pure-bf16", False, False, False, "fit"),
    ("l1b-fp32-2", "llama3.2-1b", 2, 2048, None, "fp32", False, False, False, "holdout"),
    ("l3b-bf16-ckpt-2", "llama3.2-3b", 2, 2048, None, "bf16", False, True, False, "holdout"),
    ("l8b-pure-ckpt-1", "llama3-8b", 1, 2048, None, "pure-bf16", False, True, False, "holdout"),
    # compile rows last: each costs ~30-60 s of compilation
    ("mini-bf16-compile-128", "mini-transformer", 128, 256, None, "bf16", True, False, False, "fit"),
    ("gpt2-bf16-compile-16", "gpt2", 16, 1024, None, "bf16", True, False, False, "fit"),
    ("r50-bf16-cl-compile-128", "resnet50", 128, None, 224, "bf16", True, False, True, "holdout"),
    ("vitb-bf16-compile-128", "vit-b-16", 128, None, 224, "bf16", True, False, False, "holdout"),
    ("l1b-bf16-compile-4", "llama3.2-1b", 4, 2048, None, "bf16", True, False, False, "holdout"),
    # added after the first run (2026-12-03) because no CNN or ViT compile row was in the fit set;
    # the holdout rows above stay as they were declared.
    ("r18-bf16-cl-compile-256", "resnet18", 256, None, 224, "bf16", True, False, True, "fit"),
    ("r34-bf16-cl-compile-128", "resnet34", 128, None, 224, "bf16", True, False, True, "fit"),
    ("vitl-bf16-compile-64", "vit-l-16", 64, None, 224, "bf16", True, False, False, "fit"),
]
# Small batches, DESIGN.md's fp32 (cuDNN TF32 on) and compiled small rows: the host-bound regime
# (issue 16). Splits declared here before the run, as above; `--set hostbound` runs them.
HOSTBOUND = [
    ("h-r50-bf16-1", "resnet50", 1, None, 224, "bf16", False, False, False, "fit"),
    ("h-r50-bf16-8", "resnet50", 8, None, 224, "bf16", False, False, False, "fit"),
    ("h-r50-bf16-32", "resnet50", 32, None, 224, "bf16", False, False, False, "holdout"),
    ("h-r50-bf16-cl-16", "resnet50", 16, None, 224, "bf16", False, False, True, "holdout"),
    ("h-r50-bf16-cl-64", "resnet50", 64, None, 224, "bf16", False, False, True, "fit"),
    ("h-r18-bf16-32", "resnet18", 32, None, 224, "bf16", False, False, False, "fit"),
    ("h-r18-bf16-64", "resnet18", 64, None, 224, "bf16", False, False, False, "holdout"),
    ("h-r101-bf16-16", "resnet101", 16, None, 224, "bf16", False, False, False, "holdout"),
    ("h-r50-fp32-64", "resnet50", 64, None, 224, "fp32", False, False, False, "fit"),
    ("h-r50-fp32-32", "resnet50", 32, None, 224, "fp32", False, False, False, "holdout"),
    ("h-r34-fp32-64", "resnet34", 64, None, 224, "fp32", False, False, False, "fit"),
    ("h-r18-fp32-128", "resnet18", 128, None, 224, "fp32", False, False, False, "holdout"),
    ("h-r50-tf32-64", "resnet50", 64, None, 224, "tf32", False, False, False, "holdout"),
    ("h-vitb-bf16-1", "vit-b-16", 1, None, 224, "bf16", False, False, False, "fit"),
    ("h-vitb-bf16-8", "vit-b-16", 8, None, 224, "bf16", False, False, False, "fit"),
    ("h-vitb-bf16-32", "vit-b-16", 32, None, 224, "bf16", False, False, False, "holdout"),
    ("h-vitb-bf16-64", "vit-b-16", 64, None, 224, "bf16", False, False, False, "holdout"),
    ("h-vitb-fp32-16", "vit-b-16", 16, None, 224, "fp32", False, False, False, "holdout"),
    ("h-vitl-bf16-8", "vit-l-16", 8, None, 224, "bf16", False, False, False, "holdout"),
    ("h-mini-bf16-8", "mini-transformer", 8, 256, None, "bf16", False, False, False, "fit"),
    ("h-mini-bf16-32", "mini-transformer", 32, 256, None, "bf16", False, False, False, "holdout"),
    ("h-mini-fp32-16", "mini-transformer", 16, 256, None, "fp32", False, False, False, "holdout"),
    ("h-bert-bf16-4", "bert-base", 4, 128, None, "bf16", False, False, False, "fit"),
    ("h-bert-bf16-16", "bert-base", 16, 128, None, "bf16", False, False, False, "holdout"),
    ("h-gpt2-bf16-1", "gpt2", 1, 1024, None, "bf16", False, False, False, "fit"),
    ("h-gpt2-bf16-4", "gpt2", 4, 256, None, "bf16", False, False, False, "holdout"),
    ("h-l1b-bf16-1", "llama3.2-1b", 1, 256, None, "bf16", False, False, False, "holdout"),
    ("h-r50-bf16-cl-compile-16", "resnet50", 16, None, 224, "bf16", True, False, True, "fit"),
    ("h-vitb-bf16-compile-8", "vit-b-16", 8, None, 224, "bf16", True, False, False, "fit"),
    ("h-mini-bf16-compile-16", "mini-transformer", 16, 256, None, "bf16", True, False, False, "holdout"),
    ("h-gpt2-bf16-compile-1", "gpt2", 1, 512, None, "bf16", True, False, False, "holdout"),
    ("h-r18-bf16-cl-compile-32", "resnet18", 32, None, 224, "bf16", True, False, True, "holdout"),
    ("h-vitb-bf16-compile-32", "vit-b-16", 32, None, 224, "bf16", True, False, False, "holdout"),
]
# Issue 39's set, measured on an H100 80GB (the classes the estimator missed on rows it had never seen:
# compiled runs across kinds and batch sizes, small micro-batches, activation checkpointing). Splits
# declared here before the call, alternating within each class so that each kind has fit and holdout
# rows; `--set i39` runs them, eager rows first (seconds each), compiled last (20-50 s of compilation).
I39 = [
    ("g-r50-bf16-16", "resnet50", 16, None, 224, "bf16", False, False, False, "fit"),
    ("g-r50-bf16-48", "resnet50", 48, None, 224, "bf16", False, False, False, "holdout"),
    ("g-r50-bf16-cl-32", "resnet50", 32, None, 224, "bf16", False, False, True, "holdout"),
    ("g-vitb-bf16-16", "vit-b-16", 16, None, 224, "bf16", False, False, False, "fit"),
    ("g-vitb-bf16-48", "vit-b-16", 48, None, 224, "bf16", False, False, False, "holdout"),
    ("g-bert-bf16-8", "bert-base", 8, 512, None, "bf16", False, False, False, "holdout"),
    ("g-gpt2-bf16-4", "gpt2", 4, 1024, None, "bf16", False, False, False, "fit"),
    ("g-mini-bf16-64", "mini-transformer", 64, 256, None, "bf16", False, False, False, "holdout"),
    ("g-r50-bf16-ckpt-64", "resnet50", 64, None, 224, "bf16", False, True, False, "holdout"),
    ("g-vitb-bf16-ckpt-64", "vit-b-16", 64, None, 224, "bf16", False, True, False, "fit"),
    ("g-bert-bf16-ckpt-32", "bert-base", 32, 512, None, "bf16", False, True, False, "holdout"),
    ("g-gpt2-bf16-ckpt-8", "gpt2", 8, 1024, None, "bf16", False, True, False, "holdout"),
    ("g-gpt2m-bf16-ckpt-16", "gpt2-medium", 16, 1024, None, "bf16", False, True, False, "fit"),
    ("g-l1b-bf16-ckpt-4", "llama3.2-1b", 4, 2048, None, "bf16", False, True, False, "holdout"),
    ("g-mini-bf16-compile-64", "mini-transformer", 64, 256, None, "bf16", True, False, False, "fit"),
    ("g-gpt2-bf16-compile-8", "gpt2", 8, 1024, None, "bf16", True, False, False, "holdout"),
    ("g-vitb-bf16-compile-64", "vit-b-16", 64, None, 224, "bf16", True, False, False, "fit"),
    ("g-r50-bf16-cl-compile-64", "resnet50", 64, None, 224, "bf16", True, False, True, "holdout"),
    ("g-bert-bf16-compile-16", "bert-base", 16, 512, None, "bf16", True, False, False, "fit"),
    ("g-gpt2-bf16-compile-32", "gpt2", 32, 1024, None, "bf16", True, False, False, "fit"),
    ("g-mini-bf16-compile-256", "mini-transformer", 256, 256, None, "bf16", True, False, False, "holdout"),
    ("g-r18-bf16-cl-compile-128", "resnet18", 128, None, 224, "bf16", True, False, True, "fit"),
    ("g-vitb-bf16-compile-192", "vit-b-16", 192, None, 224, "bf16", True, False, False, "holdout"),
    ("g-gpt2m-bf16-compile-8", "gpt2-medium", 8, 1024, None, "bf16", True, False, False, "holdout"),
    ("g-r50-bf16-cl-compile-256", "resnet50", 256, None, 224, "bf16", True, False, True, "fit"),
    ("g-bert-bf16-compile-48", "bert-base", 48, 512, None, "bf16", True, False, False, "holdout"),
    ("g-l1b-bf16-compile-2", "llama3.2-1b", 2, 2048, None, "bf16", True, False, False, "fit"),
    ("g-gpt2-bf16-compile-4", "gpt2", 4, 1024, None, "bf16", True, False, False, "holdout"),
    ("g-l1b-bf16-compile-4-s1024", "llama3.2-1b", 4, 1024, None, "bf16", True, False, False, "holdout"),
]
# Issue 39's second H100 set (declared 2026-12-07 22:55 UTC, before the call and before any refit of the
# terms it judges): every row is held out. The first set's rows (I39, fit and holdout alike) were looked at while
# the small-batch, checkpointing and compiled throughput terms were worked on, so those terms are judged here, on
# models and batch sizes the first set did not run (ResNet-34/101/152, ViT-L, BERT-large, GPT-2-large,
# Llama-3.2-3B among them); `--set i39b` runs them, eager rows first, compiled last.
I39B = [
    ("b-r34-bf16-32", "resnet34", 32, None, 224, "bf16", False, False, False, "holdout"),
    ("b-r101-bf16-24", "resnet101", 24, None, 224, "bf16", False, False, False, "holdout"),
    ("b-r152-bf16-cl-16", "resnet152", 16, None, 224, "bf16", False, False, True, "holdout"),
    ("b-vitl-bf16-16", "vit-l-16", 16, None, 224, "bf16", False, False, False, "holdout"),
    ("b-vitb-bf16-24", "vit-b-16", 24, None, 224, "bf16", False, False, False, "holdout"),
    ("b-bertl-bf16-8", "bert-large", 8, 512, None, "bf16", False, False, False, "holdout"),
    ("b-gpt2m-bf16-4", "gpt2-medium", 4, 1024, None, "bf16", False, False, False, "holdout"),
    ("b-mini-bf16-32", "mini-transformer", 32, 256, None, "bf16", False, False, False, "holdout"),
    ("b-l1b-bf16-2-s1024", "llama3.2-1b", 2, 1024, None, "bf16", False, False, False, "holdout"),
    ("b-r101-bf16-ckpt-32", "resnet101", 32, None, 224, "bf16", False, True, False, "holdout"),
    ("b-vitl-bf16-ckpt-32", "vit-l-16", 32, None, 224, "bf16", False, True, False, "holdout"),
    ("b-bertl-bf16-ckpt-16", "bert-large", 16, 512, None, "bf16", False, True, False, "holdout"),
    ("b-gpt2-bf16-ckpt-4", "gpt2", 4, 1024, None, "bf16", False, True, False, "holdout"),
    ("b-gpt2l-bf16-ckpt-4", "gpt2-large", 4, 1024, None, "bf16", False, True, False, "holdout"),
    ("b-l3b-bf16-ckpt-4-s1024", "llama3.2-3b", 4, 1024, None, "bf16", False, True, False, "holdout"),
    ("b-mini-bf16-compile-32", "mini-transformer", 32, 256, None, "bf16", True, False, False, "holdout"),
    ("b-r34-bf16-cl-compile-64", "resnet34", 64, None, 224, "bf16", True, False, True, "holdout"),
    ("b-gpt2-bf16-compile-2", "gpt2", 2, 1024, None, "bf16", True, False, False, "holdout"),
    ("b-vitl-bf16-compile-32", "vit-l-16", 32, None, 224, "bf16", True, False, False, "holdout"),
    ("b-bert-bf16-compile-32", "bert-base", 32, 512, None, "bf16", True, False, False, "holdout"),
    ("b-gpt2m-bf16-compile-4", "gpt2-medium", 4, 1024, None, "bf16", True, False, False, "holdout"),
    ("b-r101-bf16-cl-compile-32", "resnet101", 32, None, 224, "bf16", True, False, True, "holdout"),
]
# Issue 39's third H100 set (declared 2026-12-08 02:35 UTC, before any call and before any refit): all held out.
# i39b's call drifted in host speed within the call (notebook 2026-12-07-i39b-host-drift), so it cannot judge the
# host/GPU overlap cleanly; these rows are measured with the host probed inside each row
# (``host_dispatch_in_row_us``). Models and batch sizes neither i39 nor i39b ran (ResNet-18 eager, ViT-H, GPT-2-XL,
# fp32/TF32, compiled at small batches, checkpointing at small and large ones). Eager rows first, compiled last.
I39C = [
    ("c-r18-bf16-64", "resnet18", 64, None, 224, "bf16", False, False, False, "holdout"),
    ("c-r50-tf32-32", "resnet50", 32, None, 224, "tf32", False, False, False, "holdout"),
    ("c-r152-bf16-8", "resnet152", 8, None, 224, "bf16", False, False, False, "holdout"),
    ("c-vith-bf16-4", "vit-h-14", 4, None, 224, "bf16", False, False, False, "holdout"),
    ("c-bert-bf16-32-s128", "bert-base", 32, 128, None, "bf16", False, False, False, "holdout"),
    ("c-gpt2-bf16-8-s512", "gpt2", 8, 512, None, "bf16", False, False, False, "holdout"),
    ("c-gpt2xl-bf16-1", "gpt2-xl", 1, 1024, None, "bf16", False, False, False, "holdout"),
    ("c-l3b-bf16-1-s1024", "llama3.2-3b", 1, 1024, None, "bf16", False, False, False, "holdout"),
    ("c-mini-bf16-128", "mini-transformer", 128, 256, None, "bf16", False, False, False, "holdout"),
    ("c-r50-bf16-ckpt-128", "resnet50", 128, None, 224, "bf16", False, True, False, "holdout"),
    ("c-vitb-bf16-ckpt-16", "vit-b-16", 16, None, 224, "bf16", False, True, False, "holdout"),
    ("c-gpt2m-bf16-ckpt-8", "gpt2-medium", 8, 1024, None, "bf16", False, True, False, "holdout"),
    ("c-l1b-bf16-ckpt-8-s1024", "llama3.2-1b", 8, 1024, None, "bf16", False, True, False, "holdout"),
    ("c-bertl-bf16-ckpt-4", "bert-large", 4, 512, None, "bf16", False, True, False, "holdout"),
    ("c-mini-bf16-compile-8", "mini-transformer", 8, 256, None, "bf16", True, False, False, "holdout"),
    ("c-r50-bf16-cl-compile-32", "resnet50", 32, None, 224, "bf16", True, False, True, "holdout"),
    ("c-vitb-bf16-compile-16", "vit-b-16", 16, None, 224, "bf16", True, False, False, "holdout"),
    ("c-bertl-bf16-compile-8", "bert-large", 8, 512, None, "bf16", True, False, False, "holdout"),
    ("c-gpt2l-bf16-compile-2", "gpt2-large", 2, 1024, None, "bf16", True, False, False, "holdout"),
    ("c-l1b-bf16-compile-1-s2048", "llama3.2-1b", 1, 2048, None, "bf16", True, False, False, "holdout"),
]
KEYS = ("id", "model", "micro_batch", "seq_len", "image_size", "precision", "compile", "grad_ckpt",
        "channels_last", "split")


def precision_flags(prec: str) -> tuple[bool, bool]:
    """(matmul TF32, cuDNN TF32) for a precision name, DESIGN.md's meaning, as the runtime applies it:
    fp32 = PyTorch's defaults (cuDNN convolutions TF32, matmuls fp32), tf32 = TF32 for both. (The
    first reference run, 2026-12-03, had cuDNN TF32 off: its rows carry no "cudnn_tf32" key.)"""
    return prec == "tf32", True


def count_kernels(step, device: str) -> int:
    """CUDA kernels one training step launches (torch.profiler), 0 off CUDA."""
    if device != "cuda":
        return 0
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                   and not e.name.startswith(("Memcpy", "Memset")))
    except Exception:  # the profiler is a nicety: a row without a count still counts
        return -1


def run_config(row: dict, device: str, steps: int, warmup: int) -> dict:
    spec = catalog_model(row["model"])
    mm_tf32, cudnn_tf32 = precision_flags(row["precision"])
    torch.backends.cuda.matmul.allow_tf32 = mm_tf32
    torch.backends.cudnn.allow_tf32 = cudnn_tf32
    torch.manual_seed(0)
    with torch.device(device):  # build on the GPU: an 8B model's CPU init alone takes minutes
        model = build_trainable(spec, row["image_size"])
        if spec.arch is not None:
            init_weights(model)
    prec = row["precision"]
    if prec == "pure-bf16":
        model.to(torch.bfloat16)
    if row["channels_last"]:
        model.to(memory_format=torch.channels_last)
    if row["grad_ckpt"]:
        model.set_grad_checkpointing(True)
    model.train()
    fused = device == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)
    step_fn = torch.compile(model) if row["compile"] else model
    dtype = torch.bfloat16 if prec == "pure-bf16" else torch.float32
    x, y = synthetic_batch(spec, row["micro_batch"], row["seq_len"], row["image_size"], device=device, dtype=dtype)
    if row["channels_last"]:
        x = x.contiguous(memory_format=torch.channels_last)
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=prec in ("bf16", "fp16"))
    step = make_step(lambda: step_fn(x, y), opt, autocast)
    warm = warm_up(step, warmup, device)
    # The host's dispatch speed in the row's own seconds (model alive, device idle): a call's host drifts
    # (issue 39's i39b call: the same kernel sequences 1.5-2.2x slower than in the i39 call, its start-of-call
    # probe 1.08x), and rows.host_factor_of takes this reading first.
    in_row = host_dispatch.measure(device, windows=3)["us_per_step"] if device == "cuda" else None
    with GpuClocks(torch.cuda.current_device() if device == "cuda" else 0) as clocks:  # what the GPU ran at
        run = timed(step, steps, device)  # resets the peak counter: peak_gib is the timed steps'
    elapsed = run["elapsed_s"]
    out = dict(row)
    out.update(step_s=elapsed / steps, samples_per_s=row["micro_batch"] * steps / elapsed,
               warmup_s=warm["warmup_s"], first_loss=warm["first_loss"], last_loss=run["last_loss"],
               params=sum(p.numel() for p in model.parameters()), matmul_tf32=mm_tf32, cudnn_tf32=cudnn_tf32)
    if in_row:
        out["host_dispatch_in_row_us"] = in_row
    out.update(clocks.summary())
    out.update(memory(device))  # before count_kernels: its step is not part of the timed region
    out["cuda_kernels"] = count_kernels(step, device)  # what one step launches (host-bound regime)
    del model, opt, step_fn, x, y, step
    free_device(device)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("reference.jsonl"))
    ap.add_argument("--only", nargs="*", help="config ids to run")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=540, help="stop starting new configs after this")
    ap.add_argument("--smoke", action="store_true", help="CPU, two tiny configs")
    ap.add_argument("--set", choices=("reference", "hostbound", "i39", "i39b", "i39c"), default="reference",
                    help="hostbound: small batches, compiled small rows, fp32 with cuDNN TF32 (issue 16); "
                         "i39, i39b, i39c: compiled, small-batch and checkpointed rows for an H100 (issue 39)")
    ap.add_argument("--eager-only", action="store_true", help="skip the compiled rows")
    args = ap.parse_args()
    device = "cpu" if args.smoke else "cuda"
    rows = [dict(zip(KEYS, c)) for c in {"hostbound": HOSTBOUND, "i39": I39, "i39b": I39B, "i39c": I39C}.get(args.set, CONFIGS)]
    if args.eager_only:
        rows = [r for r in rows if not r["compile"]]
    if args.smoke:
        rows = [dict(rows[18], micro_batch=2, seq_len=32), dict(rows[20], micro_batch=1, seq_len=64)]
        args.steps, args.warmup = 2, 1
    elif args.only:
        rows = [r for r in rows if r["id"] in args.only]
    header = {"kind": "header", "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
              "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu"}
    if device == "cuda":
        header["tf32"] = "DESIGN.md (fp32: cuDNN TF32 on)"
        header.update(ceilings(device))
        free, total = torch.cuda.mem_get_info()
        header["context_gib"] = (total - free) / 2**30
    # This host's dispatch speed (launcher.host_dispatch): host-bound rows are predicted with it.
    header["host_dispatch"] = host_dispatch.measure(device, windows=2 if args.smoke else 7)
    print(json.dumps(header), flush=True)
    began = time.perf_counter()
    with args.out.open("a") as f:
        f.write(json.dumps(header) + "\n")
        for row in rows:
            if time.perf_counter() - began > args.budget_s:
                print(f"budget spent: skipping {row['id']}", flush=True)
                continue
            try:
                res = run_config(row, device, args.steps, args.warmup)
            except torch.cuda.OutOfMemoryError as exc:
                res = dict(row, error=f"OOM: {str(exc)[:200]}")
                free_device(device)
            except Exception as exc:  # keep going: one broken row must not cost the whole call
                res = dict(row, error=f"{type(exc).__name__}: {str(exc)[:300]}")
            f.write(json.dumps(res) + "\n")
            f.flush()
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()
                              if k in ("id", "peak_gib", "device_gib", "samples_per_s", "step_s", "warmup_s", "cuda_kernels", "error")}),
                  flush=True)


if __name__ == "__main__":
    main()
