"""What a compiled training step saves for backward, per tensor, on the GPU: AOTAutograd's min-cut
partition (inductor's default) of a users' model and of the zoo's same-size model, side by side.

    python3 -m benchmarks.notebook.2026-12-04-compiled-saved.probe_compiled_saved --out saved.json [--batch 32]

Prompted by the sixth unseen set: compiled HF ViTForImageClassification (bf16, batch 32) peaked at
3.91 GiB where the zoo's ViT-B/16 compiled peaks at 3.23 and both eager at 3.54. The partition is traced
on real CUDA tensors (aot_module_simplified with identity compilers and inductor's default partitioner:
the graphs inductor would compile, before codegen), so the SDPA op chosen on this GPU and every saved
tensor are visible.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import torch
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import min_cut_rematerialization_partition

import benchmarks.calibration.measure.users_models as mum


def capture(step, *args) -> dict:
    """Runs ``step`` compiled through AOTAutograd's partition; returns the saved tensors and SDPA ops."""
    saved, ops = [], collections.Counter()

    def fw(gm, _):
        for n in gm.graph.nodes:
            if n.op == "call_function" and ("attention" in str(n.target) or "softmax" in str(n.target)):
                ops[str(n.target)] += 1
        return gm

    def bw(gm, _):
        for n in gm.graph.nodes:
            v = n.meta.get("val")
            if n.op == "placeholder" and not n.name.startswith("tangents") and isinstance(v, torch.Tensor):
                saved.append((tuple(v.shape), str(v.dtype), v.numel() * v.element_size()))
        return gm

    def backend(gm, example):
        return aot_module_simplified(gm, example, fw_compiler=fw, bw_compiler=bw,
                                     partition_fn=min_cut_rematerialization_partition)

    torch._dynamo.reset()
    loss = torch.compile(step, backend=backend)(*args)
    loss.backward()
    kinds = collections.Counter()
    for shape, dtype, nbytes in saved:
        kinds[f"{list(shape)} {dtype}"] += nbytes
    return {"saved_gib": sum(s[2] for s in saved) / 2**30, "tensors": len(saved), "sdpa_ops": dict(ops),
            "largest": kinds.most_common(12)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}

    b = args.batch
    net, info = mum.build_model("hf-vit", "cuda", False)
    net.train()
    x, y = mum.synthetic("hf-vit", net, b, None, 224, "cuda", torch.float32)

    def hf_step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return net(pixel_values=x, labels=y).loss

    out["hf_vit"] = dict(capture(hf_step, x, y), **info)

    def hf_logits_step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return torch.nn.functional.cross_entropy(net(pixel_values=x).logits, y)

    out["hf_vit_loss_outside"] = capture(hf_logits_step, x, y)
    del net
    try:  # the zoo needs pydantic (advisor.models), which the GPU machine may lack
        from advisor.catalog import catalog_model
        from advisor.zoo import build_trainable, synthetic_batch
    except ImportError as e:
        out["zoo_vit"] = f"not run: {e}"
        Path(args.out).write_text(json.dumps(out, indent=1))
        print(json.dumps(out, indent=1))
        return
    spec = catalog_model("vit-b-16")
    with torch.device("cuda"):
        zoo = build_trainable(spec)
    zoo.train()
    batch = synthetic_batch(spec, b, None, device="cuda")

    def zoo_step(*bt):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return zoo(*bt)

    out["zoo_vit"] = capture(zoo_step, *batch)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
