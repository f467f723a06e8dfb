"""Flag groups shared by `advise`, `estimate`, `launch`, `submit` and `bench` (DESIGN.md contracts).

Config flags default to None so that commands can tell "pinned by the user" from "let the rules
choose" (`advise launch --micro-batch 16` pins the micro-batch, the rules fill in the rest).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from advisor import units
from advisor.config import Optimizer, Precision, Strategy
from advisor.request import Request


def _choices(field: str) -> list[str]:
    """The values a Literal or Enum field of Request allows (one home for them)."""
    import enum
    import typing

    ann = Request.model_fields[field].annotation
    kind = next((a for a in typing.get_args(ann) if isinstance(a, type) and issubclass(a, enum.Enum)), None)
    if kind is not None:
        return [e.value for e in kind]
    return [a for a in typing.get_args(ann) if isinstance(a, str)] or [
        a for arg in typing.get_args(ann) for a in typing.get_args(arg)]



def _argparse_type(parse):
    """An advisor.units parser as an argparse type (ArgumentTypeError carries the same message)."""

    def typed(text: str):
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    typed.__name__ = parse.__name__  # argparse names the type in its messages
    typed.range = getattr(parse, "range", None)  # cli.main states the range in --help
    return typed


def request_number(field: str):
    """The argparse type of a Request field's flag, with the field's own range (its ge/gt/le)."""
    import typing

    import annotated_types as at

    info = Request.model_fields[field]
    low, high, low_open = None, None, False
    for m in info.metadata:
        if isinstance(m, at.Ge):
            low = m.ge
        elif isinstance(m, at.Gt):
            low, low_open = m.gt, True
        elif isinstance(m, at.Le):
            high = m.le
    if int in typing.get_args(info.annotation) or info.annotation is int:
        return _argparse_type(units.int_range(low, high))
    return _argparse_type(units.float_range(low, high, low_open=low_open))


positive_int = _argparse_type(units.positive_int)
nonneg_int = _argparse_type(units.nonneg_int)
positive_float = _argparse_type(units.positive_float)
port = _argparse_type(units.port)
shape = _argparse_type(units.shape)
duration_hours = _argparse_type(units.duration_hours)
margin = _argparse_type(units.margin)
network = _argparse_type(units.network)


def _network_gbps_refused(text: str):
    raise argparse.ArgumentTypeError(
        "--network-gbps is gone: it took gigabytes per second, so 100 meant 800 Gb/s; "
        "say the unit instead: --network 100GbE, --network 400G-IB or --network 12.5GB/s")
poll_seconds = _argparse_type(units.poll_seconds)
grace_seconds = _argparse_type(units.grace_seconds)
worker_count = _argparse_type(units.worker_count)


def add_model_flags(p: argparse.ArgumentParser, required: bool = False) -> None:
    g = p.add_argument_group("model (one of)")
    g.add_argument("--model", metavar="NAME", help="catalog model (see `advise models`)")
    g.add_argument("--hf-config", metavar="PATH", help="a Hugging Face config.json (no network needed)")
    g.add_argument("--module", metavar="FILE.py:FACTORY", help="a torch.nn.Module factory, traced on the meta device")
    g.add_argument("--input-shape", type=shape, metavar="3,224,224", help="per-sample input shape for --module")
    g.add_argument("--input-dtype", default="float32", help="input dtype for --module (float32, int64, ...)")
    g.add_argument("--loss", choices=("ce", "mse", "none"),
                   help="--module: loss on the output (default ce: cross-entropy over the last dim; none: the output is the loss)")
    g.add_argument("--implementation", choices=("cardwise", "transformers"),
                   help="--model: estimate cardwise's own implementation (what its recipes run; the default) or "
                        "the transformers class a script loads (the default of `advise launch -- script.py`)")
    p.set_defaults(_model_required=required)


def add_config_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("configuration (given = pinned)")
    g.add_argument("--micro-batch", type=request_number("micro_batch"), metavar="N", help="samples per GPU per forward")
    g.add_argument("--grad-accum", type=request_number("grad_accum"), metavar="N", help="micro-batches per optimizer step")
    g.add_argument("--seq-len", type=request_number("seq_len"), metavar="N", help="tokens per sample")
    g.add_argument("--image-size", type=request_number("image_size"), metavar="N", help="image side in pixels")
    g.add_argument("--precision", choices=[p.value for p in Precision], help="bf16/fp16 = autocast with fp32 master weights")
    g.add_argument("--optimizer", choices=[o.value for o in Optimizer])
    _add_setup_options(g, "--optimizer")
    g.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="torch.compile the model")
    g.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=None, help="NHWC memory format (CNNs)")
    g.add_argument("--grad-ckpt", action=argparse.BooleanOptionalAction, default=None, help="activation checkpointing per layer")
    g.add_argument("--strategy", choices=[s.value for s in Strategy if s is not Strategy.dp])
    _add_setup_options(g, "--strategy")


def _add_setup_options(g, after: str) -> None:
    """The flags the ways of training bring (advisor.setup.base.Option) that follow flag ``after``."""
    from advisor.setup import SETUPS

    for o in sorted((o for s in SETUPS for o in s.options if o.after == after), key=lambda o: o.rank):
        if o.kind == "toggle":
            g.add_argument(o.flag, action=argparse.BooleanOptionalAction, default=None, help=o.help)
        elif o.kind == "number":
            g.add_argument(o.flag, type=request_number(o.field), metavar=o.metavar, help=o.help)
        else:
            g.add_argument(o.flag, choices=_choices(o.field), metavar=o.metavar, help=o.help)


def add_hardware_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("hardware (default: what is detected)")
    g.add_argument("--gpu", metavar="NAME", help="GPU kind: h100, A100-80GB, 'NVIDIA H200', ... (`advise gpus --list`)")
    g.add_argument("--gpus", type=request_number("gpus"), metavar="N", help="GPUs per node")
    g.add_argument("--nodes", type=request_number("nodes"), default=1, metavar="N", help="machines")
    g.add_argument("--interconnect", choices=_choices("interconnect"), help="GPU links within a node")
    g.add_argument("--network", type=network, metavar="LINK",
                   help="network between nodes, with its unit: 100GbE, 400G-IB, NDR, 25Gb/s, 12.5GB/s "
                        "(default with --nodes > 1: one 200 Gb/s InfiniBand port per node, stated in the report)")
    g.add_argument("--host-ram", type=_argparse_type(units.host_ram_gib), metavar="SIZE",
                   help="RAM of each node, with its unit: 512GiB, 1TiB, 768GB (CPU offload's check; default: "
                        "detected when planning for this machine, else not checked)")
    g.add_argument("--network-gbps", type=_network_gbps_refused, help=argparse.SUPPRESS)
    g.add_argument("--cpus-per-gpu", type=request_number("cpus_per_gpu"), metavar="N",
                   help="CPU cores each GPU's data loader gets (default: detected; 8 for named GPUs)")
    g.add_argument("--data-format", choices=_choices("data_format"),
                   help="what the loader reads: jpeg files (default for vision), decoded tensors, tokenized text, synthetic")
    g.add_argument("--loader", choices=_choices("loader"),
                   help="pytorch DataLoader (default), dali-cpu (DALI decoding on the CPU), dali (decoding on the GPU)")


def add_workload_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("workload")
    g.add_argument("--batch-size", type=request_number("batch_size"), metavar="N", help="global batch (samples per optimizer step)")
    g.add_argument("--dataset-size", type=request_number("dataset_size"), metavar="N", help="training samples per epoch")
    g.add_argument("--epochs", type=request_number("epochs"), metavar="N", help="passes over the dataset")
    g.add_argument("--deadline", type=duration_hours, metavar="6h", help="time the training must finish in")
    g.add_argument("--margin", type=margin, metavar="0.15",
                   help="plan to finish this fraction before --deadline (default 0.15: the estimates' stated error)")
    g.add_argument("--base-lr", type=request_number("base_lr"), metavar="X", help="learning rate tuned at --base-batch")
    g.add_argument("--base-batch", type=request_number("base_batch"), metavar="N", help="global batch --base-lr was tuned at")
    g.add_argument("--lr-scaling", choices=_choices("lr_scaling"),
                   help="how the LR follows the global batch (default: the recipe's rule, else linear for SGD, sqrt for AdamW)")
    g.add_argument("--keep-global-batch", action="store_true", help="keep --batch-size fixed; use accumulation")
    g.add_argument("--task", choices=_choices("task"),
                   help="picks the learning-rate recipe (default: finetune for transformers, pretrain for CNNs/ViTs; "
                        "`advise rules defaults.lr`)")


def add_home_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--home", type=Path, metavar="DIR", help="run store and calibration (default: $CARDWISE_HOME or XDG data dir)")


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def model_ref(args: argparse.Namespace):
    """The ModelRef the flags name, or a UserError that says how to name one."""
    from advisor.plan import ModelRef

    return ModelRef.from_flags(name=args.model, hf_config=args.hf_config, module=args.module,
                               input_shape=args.input_shape, input_dtype=args.input_dtype,
                               loss=getattr(args, "loss", None), implementation=getattr(args, "implementation", None))


def request_from_namespace(args: argparse.Namespace, **override) -> Request:
    """The one translation from parsed flags to a ``Request`` (fields named as in ``advisor.request.FLAGS``).

    Commands add different flag groups, so an absent flag is the field's default. ``override``
    sets fields directly (e.g. ``alternatives=True``)."""
    from advisor.request import FLAGS

    values = {}
    for field, (flag, _) in FLAGS.items():
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is not None:
            values[field] = value
    values.update(override)
    return Request(model=model_ref(args), **values)


def home_dir(args: argparse.Namespace) -> Path:
    """--home, else $CARDWISE_HOME, else the XDG data directory."""
    from advisor.paths import resolve_home

    return resolve_home(getattr(args, "home", None))


def check_output_file(path: Path | None, flag: str, example: str = "out") -> None:
    """A file flag (``--save-plan``, ``--csv``, ...) that can be written, checked before any work:
    a bench that has run for an hour must not end in a traceback because its folder is missing."""
    if path is None:
        return
    from advisor.errors import UserError

    p = path.expanduser()
    if p.is_dir():
        raise UserError(f"{flag} names a directory, not a file", where=str(path), fix=f"give a file name, e.g. {flag} {p / example}")
    parent = p.parent
    if not parent.is_dir():
        raise UserError(f"{flag}: the folder {parent} does not exist", where=str(path),
                        fix=f"create it first (mkdir -p {parent}) or write into an existing folder")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UserError(f"{flag}: cannot write here (permission denied)", where=str(path),
                        fix="write into a folder you own, e.g. the current one")


def check_home_readable(home: Path) -> None:
    """A home given to a reading command (``runs``, ``show``, ``logs``, ``cancel``) that is a file or
    unreadable would otherwise read as "no runs recorded yet"; say what is wrong instead."""
    from advisor.errors import UserError

    if home.exists() and not home.is_dir():
        raise UserError("the cardwise home is a file, not a directory", where=str(home),
                        fix="pass the directory runs were recorded in with --home DIR (or set CARDWISE_HOME)")
    if home.is_dir() and not os.access(home, os.R_OK | os.X_OK):
        raise UserError("cannot read the cardwise home (permission denied)", where=str(home),
                        fix="run as the user who owns it, or pass another home with --home DIR")
