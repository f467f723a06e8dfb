"""Two gloo ranks (torchrun): plain FSDP2 against fsdp-keep (launcher.keep_gathered) on mini-transformer's
architecture made small (3 blocks of width 64: what is counted is per FSDP unit, not per parameter).

Both train the same weights on the same micro-batches, with the loop the runtime runs (loss / accumulation,
one optimizer step per ``ACCUM`` micro-batches). Plain FSDP skips the gradient sync on all but the last
micro-batch, as Accelerate's ``accumulate`` does for FSDP2; fsdp-keep calls ``before_micro_batch`` (what
``Runtime.train_step`` calls) with ``reshard_after_forward`` as the plan's Accelerate config says.

Writes OUT/rank{r}.json: per optimizer step, the all-gather and reduce-scatter calls, whether every
unit's parameters were unsharded after each micro-batch's backward, the losses, and the final weights'
sum. Usage: torchrun --nproc_per_node 2 keep_gathered_gloo.py OUT RESHARD_AFTER_FORWARD(true|false)
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor

from advisor.catalog import catalog_model
from advisor.zoo import Block, build_trainable, synthetic_batch
from launcher.keep_gathered import before_micro_batch, require_root

ACCUM, STEPS, MICRO, SEQ = 3, 2, 2, 16
SMALL = {"n_layers": 3, "d_model": 64, "n_heads": 4, "d_ff": 256}  # the zoo's Block, as mini-transformer builds it

calls = {"all-gather": 0, "reduce-scatter": 0}


def _counting(name: str, fn):
    def wrapped(*args, **kwargs):
        calls[name] += 1
        return fn(*args, **kwargs)
    return wrapped


# FSDP2 calls these through the module (torch 2.13: all_gather_single / reduce_scatter_single; older
# torch: all_gather_into_tensor / reduce_scatter_tensor): count whichever exist.
for attr, name in (("all_gather_single", "all-gather"), ("all_gather_into_tensor", "all-gather"),
                   ("reduce_scatter_single", "reduce-scatter"), ("reduce_scatter_tensor", "reduce-scatter")):
    if hasattr(dist, attr):
        setattr(dist, attr, _counting(name, getattr(dist, attr)))


def train(spec, mesh, keep: bool, reshard_after_forward: bool) -> dict:
    torch.manual_seed(0)
    model = build_trainable(spec)
    # Accelerate's TRANSFORMER_BASED_WRAP: one unit per Block, then the root (launcher.accelerate_config)
    for m in model.modules():
        if isinstance(m, Block):
            fully_shard(m, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    units = sum(isinstance(m, FSDPModule) for m in model.modules())  # one parameter group each: one gather
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    root = require_root(model) if keep else None
    gen = torch.Generator().manual_seed(1000 + dist.get_rank())
    steps = []
    for _ in range(STEPS):
        before = dict(calls)
        gathered, losses = [], []
        for i in range(ACCUM):
            if root is not None:
                before_micro_batch(root, i, ACCUM)
            else:
                model.set_requires_gradient_sync(i == ACCUM - 1)  # Accelerate's no_sync for FSDP2
            x, y = synthetic_batch(spec, MICRO, seq_len=SEQ, generator=gen)
            loss = model(x, y)
            (loss / ACCUM).backward()
            losses.append(loss.item())
            blocks = [m for m in model.modules() if isinstance(m, Block)]
            gathered.append(all(not isinstance(p, DTensor) for b in blocks for p in b.parameters()))
        opt.step()
        opt.zero_grad(set_to_none=True)
        steps.append({"all_gathers": calls["all-gather"] - before["all-gather"],
                      "reduce_scatters": calls["reduce-scatter"] - before["reduce-scatter"],
                      "unsharded_after_backward": gathered, "losses": losses})
    total = sum(float(p.detach().full_tensor().double().sum()) for p in model.parameters())
    return {"steps": steps, "param_sum": total, "blocks": sum(isinstance(m, Block) for m in model.modules()),
            "units": units}


def main() -> None:
    out, raf_keep = Path(sys.argv[1]), sys.argv[2].lower() == "true"
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    mini = catalog_model("mini-transformer")
    spec = mini.model_copy(update={"arch": mini.arch.model_copy(update=SMALL)})
    result = {"plain": train(spec, mesh, keep=False, reshard_after_forward=True),
              "keep": train(spec, mesh, keep=True, reshard_after_forward=raf_keep),
              "world_size": dist.get_world_size(), "accum": ACCUM}
    (out / f"rank{dist.get_rank()}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
