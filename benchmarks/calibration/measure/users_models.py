"""Measure a reference set of users' models on one GPU: peak memory and steady-state samples/s.

The models are written the way users write them (``benchmarks/calibration/models/*.py``, each with a
zero-argument ``build()``) or built by transformers from a hand-written config
(``benchmarks/calibration/models/hf/<name>/config.json``, random init, no downloads). This script imports
no cardwise module (``measure/steploop.py`` beside it imports only torch): the GPU machine it runs on has
only torch and transformers.

For each configuration (CONFIGS below, declared with its fit/holdout split before any measurement):
build the model on the GPU, train with ``torch.optim.AdamW(fused=True)`` on synthetic data already
on the device, ``zero_grad(set_to_none=True)``, run warm-up steps (compile happens there), call
``torch.cuda.reset_peak_memory_stats()``, then time N steps with CUDA events (N chosen from the last
warm-up step so the timed region lasts about ``--target-s``). The step and its timing are
``measure/steploop.py``'s, shared with ``measure/reference.py``: forward and loss under autocast (bf16 rows),
backward, optimizer step, zero_grad.

Losses: ``--module`` models are trained as cardwise assumes for ``--loss ce`` (cross-entropy over the
output's last dimension with int64 targets: [B] for classifiers, [B, S] for language models) or
``--loss mse`` (against a target shaped like the output), computed outside the (possibly compiled)
model, inside autocast. Hugging Face models use their own loss, ``model(input_ids=..., labels=...).loss``
(sequence classification: labels [B]; causal and masked LM: labels [B, S]).

Precision (DESIGN.md): ``fp32`` = plain PyTorch defaults, untouched (fp32 matmuls, cuDNN convolutions
allowed TF32); ``bf16`` = ``torch.autocast("cuda", torch.bfloat16)`` with fp32 weights;
``pure-bf16`` = model and floating-point inputs ``.to(torch.bfloat16)``.

    python -m benchmarks.calibration.measure.users_models --out users.jsonl [--only ID,ID] [--budget-s 450]
    python -m benchmarks.calibration.measure.users_models --smoke   # CPU, tiny, checks the script runs

Rows go to the JSONL as they finish (a run killed at its time limit keeps what it measured); a CUDA
out-of-memory row is recorded with ``"oom": true`` and the run goes on.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from benchmarks.calibration.measure.steploop import ceilings, free_device, in_child, is_oom, make_step, memory, timed, warm_up
from launcher.loader_probe import cpu_model

MODELS = Path(__file__).resolve().parents[1] / "models"
REL = "benchmarks/calibration/models"

# Model sources. kind "module": FILE.py:build with cardwise's --input-shape/--input-dtype/--loss;
# input "tokens" = int64 ids [B, seq] in [0, vocab); "image" = float [B, 3, size, size].
# target "class" = int64 [B] in [0, classes); "tokens" = int64 [B, seq]; "like-output" = float.
# kind "hf": config.json built with transformers (architectures[0], random init); labels as named.
# tiny: the class and keyword arguments --smoke builds instead of build() (CPU time; same code paths).
MODEL_SOURCES = {
    "encoder_classifier": dict(kind="module", file="encoder_classifier.py", input="tokens", vocab=30522,
                               loss="ce", target="class", classes=4,
                               tiny=("EncoderClassifier", dict(vocab_size=30522, d_model=64, n_heads=4, n_layers=2,
                                                               d_ff=128))),
    "nanogpt": dict(kind="module", file="nanogpt.py", input="tokens", vocab=50304, loss="ce", target="tokens",
                    tiny=("GPT", dict(n_layer=2, n_head=4, n_embd=64))),
    "unet": dict(kind="module", file="unet.py", input="image", loss="mse", target="like-output",
                 tiny=("UNet", dict(base=8))),
    "convnext": dict(kind="module", file="convnext.py", input="image", loss="ce", target="class", classes=1000,
                     tiny=("ConvNeXt", dict(depths=(1, 1, 2, 1), dims=(16, 32, 64, 128)))),
    "efficientnet": dict(kind="module", file="efficientnet.py", input="image", loss="ce", target="class",
                         classes=1000, tiny=("EfficientNet", dict(stages=[(1, 3, 1, 8, 1), (6, 5, 2, 16, 2)],
                                                                  stem=8, head=64))),
    "hf-gpt2": dict(kind="hf", config="hf/gpt2/config.json", labels="tokens"),
    "hf-bert-cls": dict(kind="hf", config="hf/bert-cls/config.json", labels="class"),
    "hf-bert-mlm": dict(kind="hf", config="hf/bert-mlm/config.json", labels="tokens"),
    "hf-qwen2-0.5b": dict(kind="hf", config="hf/qwen2-0.5b/config.json", labels="tokens"),
    "hf-mistral-small": dict(kind="hf", config="hf/mistral-small/config.json", labels="tokens"),
    # the third unseen set's new models (unseen_sets.json, u3)
    "vgg_bn": dict(kind="module", file="vgg_bn.py", input="image", loss="ce", target="class", classes=1000,
                   tiny=("VGG", dict(cfg=[8, "M", 16, "M"], width=32))),
    "hf-vit": dict(kind="hf", config="hf/vit-base/config.json", labels="class", input="image"),
    "hf-tinyllama": dict(kind="hf", config="hf/tinyllama/config.json", labels="tokens"),
}

# (id, model, micro_batch, seq_len, image_size, precision, compile, split)
# split, declared before any measurement: "fit" rows may be used to fit calibration constants;
# "holdout" rows never are, and the quality bars (DESIGN.md) are judged on them.
CONFIGS = [
    # nn.TransformerEncoderLayer classifier, seq 512
    ("enc-fp32-8", "encoder_classifier", 8, 512, None, "fp32", False, "holdout"),
    ("enc-bf16-8", "encoder_classifier", 8, 512, None, "bf16", False, "fit"),
    ("enc-fp32-64", "encoder_classifier", 64, 512, None, "fp32", False, "fit"),
    ("enc-bf16-128", "encoder_classifier", 128, 512, None, "bf16", False, "holdout"),
    ("enc-pure-256", "encoder_classifier", 256, 512, None, "pure-bf16", False, "holdout"),
    ("enc-bf16-compile-128", "encoder_classifier", 128, 512, None, "bf16", True, "holdout"),
    # nanoGPT, seq 1024
    ("nanogpt-bf16-2", "nanogpt", 2, 1024, None, "bf16", False, "holdout"),
    ("nanogpt-fp32-8", "nanogpt", 8, 1024, None, "fp32", False, "fit"),
    ("nanogpt-bf16-16", "nanogpt", 16, 1024, None, "bf16", False, "fit"),
    ("nanogpt-bf16-48", "nanogpt", 48, 1024, None, "bf16", False, "holdout"),
    ("nanogpt-pure-32", "nanogpt", 32, 1024, None, "pure-bf16", False, "holdout"),
    ("nanogpt-bf16-compile-16", "nanogpt", 16, 1024, None, "bf16", True, "fit"),
    ("nanogpt-bf16-compile-48", "nanogpt", 48, 1024, None, "bf16", True, "holdout"),
    # U-Net, 256x256
    ("unet-fp32-32", "unet", 32, None, 256, "fp32", False, "fit"),
    ("unet-bf16-32", "unet", 32, None, 256, "bf16", False, "holdout"),
    ("unet-bf16-128", "unet", 128, None, 256, "bf16", False, "fit"),
    ("unet-pure-128", "unet", 128, None, 256, "pure-bf16", False, "holdout"),
    ("unet-fp32-128", "unet", 128, None, 256, "fp32", False, "holdout"),
    ("unet-bf16-compile-64", "unet", 64, None, 256, "bf16", True, "holdout"),
    # ConvNeXt-Tiny, 224x224
    ("convnext-fp32-32", "convnext", 32, None, 224, "fp32", False, "holdout"),
    ("convnext-bf16-64", "convnext", 64, None, 224, "bf16", False, "fit"),
    ("convnext-bf16-256", "convnext", 256, None, 224, "bf16", False, "holdout"),
    ("convnext-pure-128", "convnext", 128, None, 224, "pure-bf16", False, "fit"),
    ("convnext-fp32-128", "convnext", 128, None, 224, "fp32", False, "holdout"),
    ("convnext-bf16-compile-128", "convnext", 128, None, 224, "bf16", True, "fit"),
    # HF GPT2LMHeadModel (default config: dropout 0.1, gelu_new, Conv1D), seq 1024
    ("hfgpt2-fp32-8", "hf-gpt2", 8, 1024, None, "fp32", False, "holdout"),
    ("hfgpt2-bf16-8", "hf-gpt2", 8, 1024, None, "bf16", False, "fit"),
    ("hfgpt2-bf16-32", "hf-gpt2", 32, 1024, None, "bf16", False, "holdout"),
    ("hfgpt2-pure-16", "hf-gpt2", 16, 1024, None, "pure-bf16", False, "holdout"),
    ("hfgpt2-bf16-compile-16", "hf-gpt2", 16, 1024, None, "bf16", True, "fit"),
    # HF BertForSequenceClassification (bert-base, 2 labels), seq 512
    ("hfbertcls-bf16-16", "hf-bert-cls", 16, 512, None, "bf16", False, "holdout"),
    ("hfbertcls-fp32-32", "hf-bert-cls", 32, 512, None, "fp32", False, "fit"),
    ("hfbertcls-bf16-128", "hf-bert-cls", 128, 512, None, "bf16", False, "holdout"),
    ("hfbertcls-bf16-compile-64", "hf-bert-cls", 64, 512, None, "bf16", True, "holdout"),
    # HF BertForMaskedLM (bert-base), seq 512
    ("hfbertmlm-bf16-32", "hf-bert-mlm", 32, 512, None, "bf16", False, "fit"),
    ("hfbertmlm-pure-64", "hf-bert-mlm", 64, 512, None, "pure-bf16", False, "holdout"),
    ("hfbertmlm-bf16-compile-32", "hf-bert-mlm", 32, 512, None, "bf16", True, "holdout"),
    # HF Qwen2ForCausalLM, Qwen2-0.5B shape, seq 2048
    ("hfqwen2-bf16-2", "hf-qwen2-0.5b", 2, 2048, None, "bf16", False, "fit"),
    ("hfqwen2-bf16-8", "hf-qwen2-0.5b", 8, 2048, None, "bf16", False, "holdout"),
    ("hfqwen2-pure-8", "hf-qwen2-0.5b", 8, 2048, None, "pure-bf16", False, "fit"),
    ("hfqwen2-fp32-2", "hf-qwen2-0.5b", 2, 2048, None, "fp32", False, "holdout"),
    ("hfqwen2-bf16-compile-4", "hf-qwen2-0.5b", 4, 2048, None, "bf16", True, "holdout"),
]
KEYS = ("id", "model", "micro_batch", "seq_len", "image_size", "precision", "compile", "split")

# Smoke rows (CPU): every model once, tiny batch and sequence / image, each precision path.
SMOKE = [
    ("smoke-enc", "encoder_classifier", 2, 32, None, "fp32", False, "fit"),
    ("smoke-nanogpt", "nanogpt", 1, 64, None, "bf16", False, "fit"),
    ("smoke-unet", "unet", 1, None, 64, "pure-bf16", False, "fit"),
    ("smoke-convnext", "convnext", 2, None, 64, "bf16", False, "fit"),
    ("smoke-hfgpt2", "hf-gpt2", 1, 64, None, "fp32", False, "fit"),
    ("smoke-hfbertcls", "hf-bert-cls", 2, 64, None, "bf16", False, "fit"),
    ("smoke-hfbertmlm", "hf-bert-mlm", 1, 64, None, "pure-bf16", False, "fit"),
    ("smoke-hfqwen2", "hf-qwen2-0.5b", 1, 64, None, "bf16", False, "fit"),
    ("smoke-effnet", "efficientnet", 2, None, 64, "bf16", False, "fit"),
    ("smoke-hfmistral", "hf-mistral-small", 1, 64, None, "pure-bf16", False, "fit"),
    ("smoke-vgg", "vgg_bn", 2, None, 64, "bf16", False, "fit"),
    ("smoke-hfvit", "hf-vit", 2, None, 64, "fp32", False, "fit"),
    ("smoke-hftinyllama", "hf-tinyllama", 1, 64, None, "bf16", False, "fit"),
]
# smoke builds HF models with these sizes (CPU memory and time); the vocabulary stays
SMOKE_HF = {"n_layer": 2, "num_hidden_layers": 2, "n_embd": 64, "hidden_size": 64, "n_head": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
            "image_size": 64}  # HF ViT: the smoke rows' images

EXPECTED_S = {False: 12.0, True: 70.0}  # rough cost of one row, used by --budget-s


def source_of(model: str) -> str:
    src = MODEL_SOURCES[model]
    if src["kind"] == "module":
        return f"module {REL}/{src['file']}:build"
    return f"hf-config {REL}/{src['config']}"


def cardwise_flags(row: dict) -> str:
    """The cardwise command-line flags that describe this row."""
    src = MODEL_SOURCES[row["model"]]
    if src["kind"] == "module":
        if src["input"] == "tokens":
            shape, dtype = str(row["seq_len"]), "int64"
        else:
            shape, dtype = f"3,{row['image_size']},{row['image_size']}", "float32"
        flags = [f"--module {REL}/{src['file']}:build", f"--input-shape {shape}", f"--input-dtype {dtype}",
                 f"--loss {src['loss']}"]
    else:
        flags = [f"--hf-config {REL}/{src['config']}"]
    flags.append(f"--micro-batch {row['micro_batch']}")
    flags.append(f"--seq-len {row['seq_len']}" if row["seq_len"] else f"--image-size {row['image_size']}")
    flags.append(f"--precision {row['precision']}")
    if row["compile"]:
        flags.append("--compile")
    return " ".join(flags)


def load_module(path: Path):
    spec = importlib.util.spec_from_file_location(f"users_model_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build_model(model: str, device: str, smoke: bool):
    """Returns (model, extra info). Built directly on the device, random init."""
    src = MODEL_SOURCES[model]
    info = {}
    with torch.device(device):
        if src["kind"] == "module":
            mod = load_module(MODELS / src["file"])
            if smoke:
                cls_name, kwargs = src["tiny"]
                net = getattr(mod, cls_name)(**kwargs)
            else:
                net = mod.build()  # the zero-argument factory cardwise takes with --module
        else:
            import transformers

            cfg = transformers.AutoConfig.from_pretrained(str(MODELS / src["config"]))
            if smoke:
                for key, value in SMOKE_HF.items():
                    if key in cfg.to_dict():
                        setattr(cfg, key, value)
                if getattr(cfg, "layer_types", None):
                    cfg.layer_types = cfg.layer_types[:cfg.num_hidden_layers]
            cls = getattr(transformers, cfg.architectures[0])
            net = cls._from_config(cfg)  # what AutoModelFor*.from_config does: random init
            info["hf_class"] = type(net).__name__
            info["attn_implementation"] = getattr(net.config, "_attn_implementation", None)
    return net, info


def synthetic(model: str, net, batch: int, seq_len, image_size, device: str, float_dtype):
    """(inputs, targets) already on the device, drawn at random (never zeros)."""
    src = MODEL_SOURCES[model]
    g = torch.Generator(device=device).manual_seed(1234)
    if src["kind"] == "hf" and src.get("input") == "image":  # pixel_values and class labels (HF ViT)
        x = torch.randn(batch, 3, image_size, image_size, device=device, generator=g).to(float_dtype)
        return x, torch.randint(0, net.config.num_labels, (batch,), device=device, generator=g)
    if src["kind"] == "hf":
        vocab = net.config.vocab_size
        ids = torch.randint(0, vocab, (batch, seq_len), device=device, generator=g)
        if src["labels"] == "class":
            labels = torch.randint(0, net.config.num_labels, (batch,), device=device, generator=g)
        elif net.config.architectures[0].endswith("CausalLM") or "LMHead" in net.config.architectures[0]:
            labels = ids.clone()  # causal LM: the model shifts the labels itself
        else:
            labels = torch.randint(0, vocab, (batch, seq_len), device=device, generator=g)
        return ids, labels
    if src["input"] == "tokens":
        x = torch.randint(0, src["vocab"], (batch, seq_len), device=device, generator=g)
    else:
        x = torch.randn(batch, 3, image_size, image_size, device=device, generator=g).to(float_dtype)
    if src["target"] == "class":
        y = torch.randint(0, src["classes"], (batch,), device=device, generator=g)
    elif src["target"] == "tokens":
        y = torch.randint(0, src["vocab"], (batch, seq_len), device=device, generator=g)
    else:  # like-output: float target shaped like the output (image-to-image here)
        y = torch.randn(batch, 3, image_size, image_size, device=device, generator=g).to(float_dtype)
    return x, y


def build_step(row: dict, device: str, smoke: bool):
    """(one training step of the row, the model, extra info): built on the device, data on it too."""
    model, prec = row["model"], row["precision"]
    src = MODEL_SOURCES[model]
    torch.manual_seed(0)
    net, info = build_model(model, device, smoke)
    if prec == "pure-bf16":
        net.to(torch.bfloat16)
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=True)
    fwd = torch.compile(net) if row["compile"] else net
    float_dtype = torch.bfloat16 if prec == "pure-bf16" else torch.float32
    x, y = synthetic(model, net, row["micro_batch"], row["seq_len"], row["image_size"], device, float_dtype)
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=prec == "bf16")

    if src["kind"] == "hf" and src.get("input") == "image":
        def loss_fn():
            return fwd(pixel_values=x, labels=y).loss
    elif src["kind"] == "hf":
        def loss_fn():
            return fwd(input_ids=x, labels=y).loss
    elif src["loss"] == "ce":
        def loss_fn():
            out = fwd(x)
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    else:
        def loss_fn():
            return F.mse_loss(fwd(x), y)

    return make_step(loss_fn, opt, autocast), net, info


def run_config(row: dict, device: str, warmup: int, target_s: float, min_steps: int, max_steps: int,
               smoke: bool, rounds: int = 1) -> dict:
    """Build, warm up and time one row. With ``rounds`` > 1 the timed steps run that many times, each
    round after a host probe of its own (launcher.host_dispatch, the model alive and the device idle):
    ``step_s`` is the median round's and ``host_dispatch_in_row_us`` the median probe, so that a row is
    judged against the host speed of the seconds it ran in (a host-bound row and the probe moved
    7-17% within 45 s on one machine: "The host probe and the host-bound rows in one call" in
    benchmarks/calibration/results/h200-users.md)."""
    model = row["model"]
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    step, net, info = build_step(row, device, smoke)
    cuda = device == "cuda"
    warm = warm_up(step, warmup, device)  # the last warm-up step's host time sets the timed steps
    steps = max(min_steps, min(max_steps, math.ceil(target_s / max(warm["last_warm_s"], 1e-6))))
    out = dict(row)
    if cuda:
        out["warmup_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    timings = []
    for _ in range(max(1, rounds)):
        probe = host_dispatch_of(device, windows=3) if rounds > 1 else None
        run = timed(step, steps, device)  # resets the peak counter: peak_gib is the timed steps'
        timings.append({"step_s": run["elapsed_s"] / steps, "host_step_s": run["host_s"] / steps,
                        "host_dispatch_us": probe, "last_loss": run["last_loss"]})
    middle = sorted(timings, key=lambda t: t["step_s"])[len(timings) // 2]
    out.update(source=source_of(model), cardwise_flags=cardwise_flags(row), oom=False, steps=steps,
               step_s=middle["step_s"], samples_per_s=row["micro_batch"] / middle["step_s"],
               host_step_s=middle["host_step_s"], warmup_s=warm["warmup_s"], first_loss=warm["first_loss"],
               last_loss=timings[-1]["last_loss"], params=sum(p.numel() for p in net.parameters()),
               param_dtype=str(next(net.parameters()).dtype).replace("torch.", ""), **info)
    if rounds > 1:
        out["rounds"] = timings
        out["host_dispatch_in_row_us"] = statistics.median(t["host_dispatch_us"] for t in timings)
    # This host's dispatch speed right after the row (launcher.host_dispatch; the header has it at the
    # call's start): a host-bound row is predicted for the host it ran on, which can drift within a call.
    out["host_dispatch_us"] = host_dispatch_of(device)
    if smoke:
        out["smoke_tiny"] = True  # a tiny variant (MODEL_SOURCES' "tiny" / SMOKE_HF), not build()
    out.update(memory(device))
    return out


def host_dispatch_of(device: str, windows: int = 5) -> float:
    """The reference step's time on this host now, µs (about 0.3 s on a GPU host)."""
    from launcher import host_dispatch

    return host_dispatch.measure(device, windows=2 if device == "cpu" else windows)["us_per_step"]


def header(device: str) -> dict:
    try:
        import transformers

        tf_version = transformers.__version__
    except ImportError:
        tf_version = None
    h = {"kind": "header", "date": time.strftime("%Y-%m-%d"), "time": time.strftime("%H:%M:%S"),
         "torch": torch.__version__, "transformers": tf_version, "cuda": torch.version.cuda,
         "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
         "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
         "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
         "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
         "float32_matmul_precision": torch.get_float32_matmul_precision(),
         # the host CPU's model (launcher.loader_probe.cpu_model, what `advise probe --data` records): host-bound
         # rows moved differently between calls' machines (results/h200-users.md, "The host probe and the
         # host-bound rows in one call")
         "cudnn_benchmark": torch.backends.cudnn.benchmark, "cpu": cpu_model()}
    if device == "cuda":
        h.update(ceilings(device))
        free, total = torch.cuda.mem_get_info()
        h["context_gib"] = (total - free) / 2**30
        h["device_total_gib"] = total / 2**30
    # This host's dispatch speed (launcher.host_dispatch): host-bound rows are predicted with it.
    from launcher import host_dispatch

    h["host_dispatch"] = host_dispatch.measure(device, windows=2 if device == "cpu" else 7)
    return h


def in_own_process(row_id: str) -> dict:
    """The row measured by this very command line in a new Python process (``--only ROW``, the rest of
    the arguments as given, ``--set`` included when measure/unseen.py runs it): a compiled row gets a
    process of its own, its own dynamo, inductor and heap, as a user's training script has. Returns
    the child's row, its header's host probe as ``process_host_dispatch_us``."""
    text = in_child(["--only", row_id, "--budget-s", "1e9"], drop=("--only", "--out", "--budget-s"),
                    flags=("--fresh-compiled",))
    lines = [json.loads(line) for line in text.splitlines()]
    head = next(r for r in lines if r.get("kind") == "header")
    res = next(r for r in lines if r.get("id") == row_id)
    res.pop("elapsed_s", None)
    return dict(res, fresh_process=True, process_host_dispatch_us=head["host_dispatch"]["us_per_step"])


def fmt(v, nd=3):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return str(v)


def print_table(results: list[dict]) -> None:
    cols = ("id", "split", "peak_gib", "reserved_gib", "device_gib", "step_s", "samples_per_s", "last_loss")
    print("\n" + " | ".join(cols))
    for r in results:
        if r.get("oom"):
            print(f"{r['id']} | {r['split']} | OOM")
        elif r.get("error"):
            print(f"{r['id']} | {r['split']} | ERROR {r['error'][:80]}")
        else:
            print(" | ".join(fmt(r.get(c)) for c in cols))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("users.jsonl"))
    ap.add_argument("--only", default="", help="comma-separated config ids to run, in this order")
    ap.add_argument("--warmup", type=int, default=3, help="warm-up steps (compile happens in the first)")
    ap.add_argument("--target-s", type=float, default=1.5, help="timed region length that sets the step count")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time each row this many times, a host probe before each; report the median round")
    ap.add_argument("--min-steps", type=int, default=5)
    ap.add_argument("--max-steps", type=int, default=40)
    ap.add_argument("--budget-s", type=float, default=540,
                    help="start no row whose expected cost would end past this many seconds")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny versions of every model")
    ap.add_argument("--fresh-compiled", action="store_true",
                    help="measure each compiled row in a process of its own (as a user's script runs it)")
    ap.add_argument("--list", action="store_true", help="print the configurations and their flags, run nothing")
    args = ap.parse_args()
    began = time.perf_counter()
    device = "cpu" if args.smoke else "cuda"
    table = SMOKE if args.smoke else CONFIGS
    rows = [dict(zip(KEYS, c)) for c in table]
    if args.list:
        for r in rows:
            print(f"{r['id']:28s} {r['split']:8s} {cardwise_flags(r)}")
        return
    if args.only:
        wanted = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = sorted(set(wanted) - {r["id"] for r in rows})
        if unknown:
            raise SystemExit(f"unknown config ids: {', '.join(unknown)}")
        by_id = {r["id"]: r for r in rows}
        rows = [by_id[i] for i in dict.fromkeys(wanted)]  # in the order given
    if args.smoke:
        args.warmup, args.min_steps, args.max_steps, args.target_s = 2, 2, 2, 0.0
    rows.sort(key=lambda r: r["compile"])  # eager rows first (stable): compiled rows cost most, come last
    head = header(device)
    print(json.dumps(head), flush=True)
    results = []
    with args.out.open("a") as f:
        f.write(json.dumps(head) + "\n")
        for row in rows:
            spent = time.perf_counter() - began
            expected = EXPECTED_S[row["compile"]] + (args.rounds - 1) * (args.target_s + 0.3)  # + rounds, probes
            if spent + expected > args.budget_s:
                print(f"budget: skipping {row['id']} ({spent:.0f} s spent of {args.budget_s:.0f})", flush=True)
                continue
            res, failure = None, None
            try:
                if args.fresh_compiled and row["compile"]:
                    res = in_own_process(row["id"])
                else:
                    res = run_config(row, device, args.warmup, args.target_s, args.min_steps, args.max_steps,
                                     args.smoke, args.rounds)
            except Exception as exc:  # one broken row must not cost the whole call
                failure = (is_oom(exc), f"{type(exc).__name__}: {str(exc)[:300]}")
                del exc
            free_device(device)  # outside the except block: the traceback no longer pins tensors
            if failure is not None:
                oom, msg = failure
                res = dict(row, source=source_of(row["model"]), cardwise_flags=cardwise_flags(row), oom=oom)
                res["error"] = msg
            res["elapsed_s"] = time.perf_counter() - began
            results.append(res)
            f.write(json.dumps(res) + "\n")
            f.flush()
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in res.items()
                              if k in ("id", "peak_gib", "reserved_gib", "samples_per_s", "step_s", "steps",
                                       "warmup_s", "last_loss", "oom", "error", "elapsed_s")}), flush=True)
    print_table(results)


if __name__ == "__main__":
    main()
