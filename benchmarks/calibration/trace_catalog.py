"""Regenerate advisor/data/traced.json: trace profiles of catalog models without closed forms.

Transformers have closed-form activation formulas (advisor/activations.py); CNNs are traced here
on the meta device (advisor/tracer.py) at their reference input, once, so that looking them up
never imports torch. The catalog transformers that have a Hugging Face class (GPT-2, BERT, Llama,
Mistral, Qwen2) are also traced as transformers builds them (keys "hf:NAME"), for
``advisor.catalog.transformers_model``; the encoder-decoders (T5) only so, since their transformers class is
their one implementation (``advisor.catalog.ENCODER_DECODERS``). Needs transformers installed.

    python -m benchmarks.calibration.trace_catalog
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

import torch

from advisor.catalog import CNN_NAMES, TRACED_JSON
from advisor.tracer import profile_module
from advisor.zoo import ResNet, Trainable


class _Spec:  # the minimum Trainable needs
    family = "cnn"
    arch = None


def traces(names: set[str] | None = None) -> dict:
    """The file's entries, in its order: every CNN of the catalog and every catalog transformer with a
    Hugging Face class ("hf:NAME"); ``names`` picks some of them (the suite's subset:
    tests/test_calibration_reproduces.py), None all."""
    out = {}
    for name in CNN_NAMES:
        if names is not None and name not in names:
            continue
        start = time.perf_counter()

        def make_inputs(b: int):
            return (torch.randn(b, 3, 224, 224, device="meta"), torch.zeros(b, dtype=torch.long, device="meta"))

        profile, params = profile_module(lambda: Trainable(ResNet(name), _Spec()), make_inputs, (3, 224, 224),
                                         scales_with="pixels")
        profile = profile.model_copy(update={"output_numel": 1000.0})
        out[name] = {"params": params, "trace": profile.model_dump(mode="json")}
        print(f"{name}: {params:,} params, {profile.fwd_flops / 1e9:.2f} GFLOP fwd, "
              f"{profile.saved_bytes['bf16'] / 2**20:.0f} MiB saved/sample (bf16), {time.perf_counter() - start:.1f}s")
    # The catalog's transformers as transformers runs them (advisor.hf_trace), for
    # catalog.transformers_model: what a user's own script most likely trains.
    from advisor.catalog import catalog_names
    from advisor.hf_trace import catalog_hf_spec

    for name in catalog_names():
        if names is not None and f"hf:{name}" not in names:
            continue
        start = time.perf_counter()
        spec = catalog_hf_spec(name)
        if spec is not None:
            out[f"hf:{name}"] = spec.model_copy(update={"description": spec.description.split(";")[0]}).model_dump(mode="json")
            print(f"hf:{name}: {spec.implementation}, {time.perf_counter() - start:.1f}s")
    return out


def meta() -> dict:
    """The file's header keys: who wrote it, with which torch and transformers."""
    import transformers

    return {"_generated_by": "benchmarks/calibration/trace_catalog.py", "_torch": torch.__version__,
            "_transformers": transformers.__version__}


def text(entries: dict) -> str:
    """The file as written: the header keys, then the entries, one JSON object indented by 1."""
    return json.dumps({**meta(), **entries}, indent=1) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=TRACED_JSON, help="the file written (default: the packaged one)")
    args = ap.parse_args()
    args.out.write_text(text(traces()))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
