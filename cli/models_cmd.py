"""`advise models [--json]`: the model catalog with exact parameter counts; never imports torch.

`advise models --hf-config PATH` shows how a Hugging Face config.json is read instead (head,
exact parameter count), so a user can check it before estimating.
"""

from __future__ import annotations

import argparse
import json

SEMANTICS = ("Catalog semantics: LLMs (gpt2*, llama*, mistral, qwen) include their LM head; BERT includes its "
             "masked-LM head; vision models (resnet*, vit-*) have a 1000-class ImageNet head; mini-transformer "
             "is a 2-class sentiment classifier. Parameter counts are exact (HF transformers / torchvision).")


def add_parser(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--hf-config", metavar="PATH", help="show how this Hugging Face config.json is read")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def human_params(n: int) -> str:
    """8030261248 -> '8.03B', 124439808 -> '124M', 25557032 -> '25.6M'."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            v = n / scale
            text = f"{v:.3g}" if v < 1000 else f"{v:.0f}"
            return text + unit
    return str(n)


def model_row(spec) -> dict:
    a = spec.arch
    return {
        "name": spec.name,
        "params": spec.params,
        "params_human": human_params(spec.params),
        "family": spec.family,
        "head": a.head if a is not None else ("image-cls" if spec.family == "cnn" else None),
        "task": spec.task,
        "default_seq_len": spec.default_seq_len,
        "default_image_size": spec.default_image_size,
        "description": spec.description,
        "source": spec.source,
    }


def run(args: argparse.Namespace) -> int:
    if args.hf_config:
        from advisor.hf_config import spec_from_hf_config

        spec = spec_from_hf_config(args.hf_config)
        if args.json:
            out = model_row(spec)
            out["arch"] = spec.arch.model_dump(mode="json") if spec.arch else None
            print(json.dumps(out, indent=2))
        else:
            row = model_row(spec)
            print(f"{row['name']}: {row['params_human']} parameters ({row['params']:,}), {row['family']}, {row['task']}")
            print(f"  {row['description']}")
        return 0

    from advisor.catalog import catalog_model, catalog_names

    rows = []
    for name in catalog_names():
        try:
            rows.append(model_row(catalog_model(name)))
        except RuntimeError as exc:  # a CNN whose traced.json entry is missing
            rows.append({"name": name, "params": None, "params_human": "?", "family": "cnn", "head": "image-cls",
                         "task": "1000-class", "default_seq_len": None, "default_image_size": 224,
                         "description": str(exc), "source": "catalog"})
    if args.json:
        print(json.dumps({"semantics": SEMANTICS, "models": rows}, indent=2))
        return 0

    import sys

    from rich.console import Console
    from rich.table import Table

    t = Table(title="model catalog (`--model NAME`)", title_justify="left")
    for col, kw in (("name", {}), ("params", {"justify": "right"}), ("exact", {"justify": "right"}),
                    ("family", {}), ("task", {}), ("default input", {"justify": "right"}), ("description", {})):
        t.add_column(col, no_wrap=col != "description", **kw)
    for r in rows:
        if r["default_image_size"]:
            default = f"{r['default_image_size']}px"
        elif r["default_seq_len"]:
            default = f"{r['default_seq_len']} tok"
        else:
            default = "-"
        t.add_row(r["name"], r["params_human"], f"{r['params']:,}" if r["params"] else "?", r["family"], r["task"],
                  default, r["description"])
    Console(width=None if sys.stdout.isatty() else 160).print(t)
    print(SEMANTICS)
    print("Other models: --hf-config PATH/config.json (llama, mistral, qwen2, gpt2, bert, vit) or --module FILE.py:FACTORY.")
    return 0
