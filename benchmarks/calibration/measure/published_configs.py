"""Measure the configurations of published SQuAD and ResNet-50 rows on this GPU, under this stack (issue 28).

Lambda's and NVIDIA's BERT SQuAD rows (cross_gpu/ and multi_gpu/published.jsonl) ran NVIDIA
DeepLearningExamples' run_squad.py: BertForQuestionAnswering at seq 384, in the NGC pytorch 21.11-era
containers (unfused attention, apex optimizers). The estimator's Hopper fractions are the H200 fit's,
made on this stack (torch 2.11, SDPA attention, fused AdamW). Timing the same configurations here
separates "what this GPU does under our stack" from "what DLE's harness reaches" (published / measured),
which the published rows alone cannot: on every architecture but Hopper the fractions were fit on those
rows and absorbed the harness.

Rows (declared before the call; none is a published row, none is fit by the cross-GPU or multi-GPU fits
unless a later change says so and names it):
- ``qa``: transformers' BertForQuestionAnswering (random init from a config: bert-base/bert-large
  uncased dimensions, the vocabulary padded to 30,528 as DLE's run_squad.py does), start/end positions
  drawn at random; the per-GPU batches Lambda's rows state (pytorch-train-bs-*.csv: BERT-large 112 fp16 /
  64 fp32, BERT-base 320 / 172) and NVIDIA's (32 per GPU).
- ``qa-eager``: the same with ``attn_implementation="eager"`` (materialised scores, softmax and dropout,
  as DLE's modeling.py computes attention): how much of the harness gap the attention kernel is.
- ``mlm``: transformers' BertForMaskedLM, labels on every token: what the rows map to today
  (``bert-base``/``bert-large`` in the estimator, a 30,522-word head and its loss on all 384 tokens).
- ``r50``: torchvision's ResNet-50 at Lambda's batches (fp16 1280 / fp32 640, NCHW) and NVIDIA's (256,
  channels_last for AMP).

Precision as the sources state it: ``fp16`` = torch.autocast(float16) + GradScaler, fp32 weights
(PyTorch's defaults otherwise); ``tf32`` = fp32 with TF32 matmuls and convolutions (the NGC container's
default, Lambda's "fp32" on Ampere and later); ``bf16`` = autocast(bfloat16), the H200 fit's kind. Fused
AdamW, zero_grad(set_to_none=True), synthetic data on the device; the step loop and its timing are
measure/steploop.py's (CUDA events, median-free: one timed region of about ``--target-s``).

Imports only torch, transformers and torchvision (the GPU machine's image).

    python -m benchmarks.calibration.measure.published_configs --out rows.jsonl [--only ID,ID] [--budget-s 200]
    python -m benchmarks.calibration.measure.published_configs --smoke   # CPU, tiny, checks the script runs
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from benchmarks.calibration.measure.steploop import (ceilings, free_device, is_oom, matmul_tflops, memory, sync,
                                                     timed)

# DLE BERT configs (PyTorch/LanguageModeling/BERT/bert_configs/{base,large}.json: uncased, gelu, dropout 0.1,
# 512 positions, 2 token types); vocab 30,528: run_squad.py pads the vocabulary to a multiple of 8.
BERT = {"bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
        "bert-large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)}
VOCAB = 30528

# (id, kind, model, micro_batch, seq_len or image size, precision, channels_last)
CONFIGS = [
    ("qa-bl-fp16-112", "qa", "bert-large", 112, 384, "fp16", False),
    ("qa-bl-tf32-64", "qa", "bert-large", 64, 384, "tf32", False),
    ("qa-bb-fp16-320", "qa", "bert-base", 320, 384, "fp16", False),
    ("qa-bb-tf32-172", "qa", "bert-base", 172, 384, "tf32", False),
    ("qa-bl-fp16-32", "qa", "bert-large", 32, 384, "fp16", False),
    ("qa-bl-tf32-32", "qa", "bert-large", 32, 384, "tf32", False),
    ("qa-bl-bf16-112", "qa", "bert-large", 112, 384, "bf16", False),
    ("qa-bb-bf16-320", "qa", "bert-base", 320, 384, "bf16", False),
    # eager attention materialises [B, heads, 384, 384] scores, fp32 softmax and dropout: half batches so they fit
    ("qae-bl-fp16-32", "qa-eager", "bert-large", 32, 384, "fp16", False),
    ("qae-bl-tf32-32", "qa-eager", "bert-large", 32, 384, "tf32", False),
    ("qae-bb-fp16-160", "qa-eager", "bert-base", 160, 384, "fp16", False),
    ("qae-bb-tf32-86", "qa-eager", "bert-base", 86, 384, "tf32", False),
    ("mlm-bl-fp16-112", "mlm", "bert-large", 112, 384, "fp16", False),
    ("mlm-bl-tf32-64", "mlm", "bert-large", 64, 384, "tf32", False),
    # the fp32 logits of a 30,528-word head on 320 x 384 tokens alone are 15 GB: half batches for BERT-base
    ("mlm-bb-fp16-160", "mlm", "bert-base", 160, 384, "fp16", False),
    ("mlm-bb-tf32-86", "mlm", "bert-base", 86, 384, "tf32", False),
    ("r50-fp16-1280", "r50", "resnet50", 1280, 224, "fp16", False),
    ("r50-tf32-640", "r50", "resnet50", 640, 224, "tf32", False),
    ("r50-fp16-cl-256", "r50", "resnet50", 256, 224, "fp16", True),
    ("r50-tf32-256", "r50", "resnet50", 256, 224, "tf32", False),
]
KEYS = ("id", "kind", "model", "micro_batch", "size", "precision", "channels_last")
SMOKE = [("smoke-qa", "qa", "bert-base", 2, 32, "fp16", False), ("smoke-qae", "qa-eager", "bert-base", 2, 32, "tf32", False),
         ("smoke-mlm", "mlm", "bert-base", 2, 32, "bf16", False), ("smoke-r50", "r50", "resnet50", 2, 64, "fp16", True)]
SMOKE_BERT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)


def build(row: dict, device: str, smoke: bool):
    """(model, loss_fn(model) -> loss, extra info), built on the device with random init and data."""
    g = torch.Generator(device=device).manual_seed(1234)
    b, size = row["micro_batch"], row["size"]
    if row["kind"] == "r50":
        import torchvision

        with torch.device(device):
            net = torchvision.models.resnet50()
        x = torch.randn(b, 3, size, size, device=device, generator=g)
        y = torch.randint(0, 1000, (b,), device=device, generator=g)
        if row["channels_last"]:
            net = net.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        return net, (lambda m: F.cross_entropy(m(x), y)), {"class": "torchvision.models.resnet50"}
    import transformers

    dims = SMOKE_BERT if smoke else BERT[row["model"]]
    attn = "eager" if row["kind"] == "qa-eager" else "sdpa"
    cfg = transformers.BertConfig(vocab_size=VOCAB, max_position_embeddings=512, type_vocab_size=2,
                                  hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                                  attn_implementation=attn, **dims)
    cls = transformers.BertForMaskedLM if row["kind"] == "mlm" else transformers.BertForQuestionAnswering
    with torch.device(device):
        net = cls(cfg)
    ids = torch.randint(0, VOCAB, (b, size), device=device, generator=g)
    types = torch.randint(0, 2, (b, size), device=device, generator=g)
    mask = torch.ones(b, size, dtype=torch.long, device=device)
    info = {"class": cls.__name__, "attn_implementation": net.config._attn_implementation}
    if row["kind"] == "mlm":
        labels = torch.randint(0, VOCAB, (b, size), device=device, generator=g)
        return net, (lambda m: m(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=labels).loss), info
    start = torch.randint(0, size, (b,), device=device, generator=g)
    end = torch.randint(0, size, (b,), device=device, generator=g)
    return net, (lambda m: m(input_ids=ids, token_type_ids=types, attention_mask=mask, start_positions=start,
                             end_positions=end).loss), info


def run_config(row: dict, device: str, warmup: int, target_s: float, min_steps: int, max_steps: int,
               smoke: bool) -> dict:
    prec = row["precision"]
    torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default (fp16/bf16 rows); TF32 rows need it too
    torch.manual_seed(0)
    net, loss_of, info = build(row, device, smoke)
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=device == "cuda")
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(prec)
    autocast = torch.autocast(device, dtype=half or torch.float32, enabled=half is not None)
    scaler = torch.amp.GradScaler(device, enabled=prec == "fp16")

    def step() -> torch.Tensor:
        with autocast:
            loss = loss_of(net)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    t0 = time.perf_counter()
    first = float(step())
    for _ in range(max(0, warmup - 2)):
        step()
    sync(device)
    t1 = time.perf_counter()
    step()
    sync(device)
    last_warm = time.perf_counter() - t1
    steps = max(min_steps, min(max_steps, math.ceil(target_s / max(last_warm, 1e-6))))
    run = timed(step, steps, device)
    out = dict(row, steps=steps, step_s=run["elapsed_s"] / steps, samples_per_s=row["micro_batch"] * steps / run["elapsed_s"],
               host_step_s=run["host_s"] / steps, warmup_s=time.perf_counter() - t0 - run["host_s"],
               first_loss=first, last_loss=run["last_loss"], params=sum(p.numel() for p in net.parameters()),
               matmul_tf32=torch.backends.cuda.matmul.allow_tf32, scale=scaler.get_scale() if prec == "fp16" else None,
               **info)
    if smoke:
        out["smoke_tiny"] = True
    out.update(memory(device))
    return out


def header(device: str) -> dict:
    import transformers

    h = {"kind": "header", "date": time.strftime("%Y-%m-%d"), "time": time.strftime("%H:%M:%S"),
         "torch": torch.__version__, "transformers": transformers.__version__, "cuda": torch.version.cuda,
         "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
         "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu"}
    if device == "cuda":
        h.update(ceilings(device))
        p = torch.cuda.get_device_properties(0)
        h.update(sm_count=p.multi_processor_count, device_total_gib=p.total_memory / 2**30)
        # fp16 and TF32 matmul ceilings too (steploop.matmul_tflops): the rates the rows' kinds use
        for name, dtype, tf32 in (("fp16", torch.float16, False), ("tf32", torch.float32, True)):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            h[f"{name}_matmul_tflops"] = matmul_tflops(device, dtype)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.cuda.empty_cache()
    return h


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("published-configs.jsonl"))
    ap.add_argument("--only", default="", help="comma-separated config ids, in this order")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--target-s", type=float, default=1.5, help="timed region length that sets the step count")
    ap.add_argument("--min-steps", type=int, default=4)
    ap.add_argument("--max-steps", type=int, default=40)
    ap.add_argument("--budget-s", type=float, default=200, help="start no row after this many seconds")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny models")
    args = ap.parse_args()
    began = time.perf_counter()
    device = "cpu" if args.smoke else "cuda"
    rows = [dict(zip(KEYS, c)) for c in (SMOKE if args.smoke else CONFIGS)]
    if args.only:
        by_id = {r["id"]: r for r in rows}
        wanted = [s for s in args.only.split(",") if s]
        unknown = [s for s in wanted if s not in by_id]
        if unknown:
            raise SystemExit(f"published_configs: unknown ids {', '.join(unknown)}; see CONFIGS")
        rows = [by_id[s] for s in wanted]
    if args.smoke:
        args.warmup, args.min_steps, args.max_steps, args.target_s = 2, 2, 2, 0.0
    head = header(device)
    print(json.dumps(head), flush=True)
    with args.out.open("a") as f:
        f.write(json.dumps(head) + "\n")
        for row in rows:
            if time.perf_counter() - began > args.budget_s:
                print(f"budget spent: skipping {row['id']}", flush=True)
                continue
            res, failure = None, None
            try:
                res = run_config(row, device, args.warmup, args.target_s, args.min_steps, args.max_steps, args.smoke)
            except Exception as exc:  # one broken row must not cost the whole call
                failure = (is_oom(exc), f"{type(exc).__name__}: {str(exc)[:300]}")
                del exc
            free_device(device)
            if failure is not None:
                res = dict(row, oom=failure[0], error=failure[1])
            res["elapsed_s"] = time.perf_counter() - began
            f.write(json.dumps(res) + "\n")
            f.flush()
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()
                              if k in ("id", "peak_gib", "samples_per_s", "step_s", "steps", "warmup_s", "last_loss",
                                       "attn_implementation", "oom", "error", "elapsed_s")}), flush=True)


if __name__ == "__main__":
    main()
