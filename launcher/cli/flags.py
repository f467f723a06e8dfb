"""Flag groups shared by `advise`, `estimate`, `launch`, `submit` and `bench` (DESIGN.md contracts).

Config flags default to None so that commands can tell "pinned by the user" from "let the rules
choose" (`advise launch --micro-batch 16` pins the micro-batch, the rules fill in the rest).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from advisor.errors import UserError

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "pure-bf16")


def _int_at_least(text: str, low: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got '{text}'") from None
    if v < low:
        raise argparse.ArgumentTypeError(f"must be at least {low}, got {v}")
    return v


def positive_int(text: str) -> int:
    return _int_at_least(text, 1)


def nonneg_int(text: str) -> int:
    return _int_at_least(text, 0)


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return v


def shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(p) for p in text.replace("x", ",").split(",") if p.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated sizes like 3,224,224, got '{text}'") from None
    if not dims or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"sizes must be positive, got '{text}'")
    return dims


def duration_hours(text: str) -> float:
    """'6h', '90m', '2d', '45min', '3600s' or a bare number of hours (argparse type)."""
    from advisor.units import parse_duration_hours

    try:
        return parse_duration_hours(text)
    except UserError as exc:
        raise argparse.ArgumentTypeError(exc.message().replace("\n  fix:", ";")) from None


def add_model_flags(p: argparse.ArgumentParser, required: bool = False) -> None:
    g = p.add_argument_group("model (one of)")
    g.add_argument("--model", metavar="NAME", help="catalog model (see `advise models`)")
    g.add_argument("--hf-config", metavar="PATH", help="a Hugging Face config.json (no network needed)")
    g.add_argument("--module", metavar="FILE.py:FACTORY", help="a torch.nn.Module factory, traced on the meta device")
    g.add_argument("--input-shape", type=shape, metavar="3,224,224", help="per-sample input shape for --module")
    g.add_argument("--input-dtype", default="float32", help="input dtype for --module (float32, int64, ...)")
    p.set_defaults(_model_required=required)


def add_config_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("configuration (given = pinned)")
    g.add_argument("--micro-batch", type=positive_int, metavar="N", help="samples per GPU per forward")
    g.add_argument("--grad-accum", type=positive_int, metavar="N", help="micro-batches per optimizer step")
    g.add_argument("--seq-len", type=positive_int, metavar="N", help="tokens per sample")
    g.add_argument("--image-size", type=positive_int, metavar="N", help="image side in pixels")
    g.add_argument("--precision", choices=PRECISIONS, help="bf16/fp16 = autocast with fp32 master weights")
    g.add_argument("--optimizer", choices=("adamw", "sgd", "adamw-8bit"))
    g.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="torch.compile the model")
    g.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None, help="NHWC memory format (CNNs)")
    g.add_argument("--grad-ckpt", action=argparse.BooleanOptionalAction, default=None, help="activation checkpointing per layer")
    g.add_argument("--strategy", choices=("single", "ddp", "fsdp"))
    g.add_argument("--lora-rank", type=positive_int, metavar="R", help="LoRA rank (train adapters only)")


def add_hardware_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("hardware (default: what is detected)")
    g.add_argument("--gpu", metavar="NAME", help="GPU kind: h100, A100-80GB, 'NVIDIA H200', ... (`advise gpus --list`)")
    g.add_argument("--gpus", type=positive_int, metavar="N", help="GPUs per node")
    g.add_argument("--nodes", type=positive_int, default=1, metavar="N", help="machines")
    g.add_argument("--interconnect", choices=("nvlink", "pcie"), help="GPU links within a node")
    g.add_argument("--network-gbps", type=positive_float, metavar="GB/s", help="per-node network bandwidth between nodes (GB/s)")


def add_workload_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workload")
    g.add_argument("--batch-size", type=positive_int, metavar="N", help="global batch (samples per optimizer step)")
    g.add_argument("--dataset-size", type=positive_int, metavar="N", help="training samples per epoch")
    g.add_argument("--epochs", type=positive_float, metavar="N", help="passes over the dataset")
    g.add_argument("--deadline", type=duration_hours, metavar="6h", help="time the training must finish in")
    g.add_argument("--base-lr", type=positive_float, metavar="X", help="learning rate tuned at --base-batch")
    g.add_argument("--base-batch", type=positive_int, metavar="N", help="global batch --base-lr was tuned at")
    g.add_argument("--lr-scaling", choices=("linear", "sqrt", "none"), default="linear")
    g.add_argument("--keep-global-batch", action="store_true", help="keep --batch-size fixed; use accumulation")
    g.add_argument("--task", help="what is trained (free text; recipes use it)")


def add_home_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--home", type=Path, metavar="DIR", help="run store and calibration (default: $CARDWISE_HOME or XDG data dir)")


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def model_ref(args: argparse.Namespace):
    """The ModelRef the flags name, or a UserError that says how to name one."""
    from advisor.plan import ModelRef

    return ModelRef.from_flags(name=args.model, hf_config=args.hf_config, module=args.module,
                               input_shape=args.input_shape, input_dtype=args.input_dtype)


def home_dir(args: argparse.Namespace) -> Path:
    """--home, else $CARDWISE_HOME, else the XDG data directory."""
    from advisor.paths import resolve_home

    return resolve_home(getattr(args, "home", None))
