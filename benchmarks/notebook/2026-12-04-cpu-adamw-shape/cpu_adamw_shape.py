"""How CPU offload's host step costs per parameter, on THIS machine (no GPU needed): torch.optim.AdamW as
the offloaded run builds it (fused=None over CPU tensors: the single-tensor loop), gradient clipping's
per-tensor norm and scale, and each of AdamW's elementwise ops alone, with a given thread count.

    OMP_NUM_THREADS=1 python -m benchmarks.notebook.2026-12-04-cpu-adamw-shape.cpu_adamw_shape --threads 1 [--params 200e6]

For understanding the shape of ``advisor.compromise_cost.cpu_step_s`` only: nothing here is written into the
estimator. The rate the estimator uses is the H200 host's, fit on the measured offload row by
benchmarks/calibration/fit_compromises.py. What it shows: the in-place passes stream at memory speed; the two ops that
allocate a parameter-sized temporary (sqrt, the division) cost several times more, their fresh pages being
faulted in and zeroed by the kernel (tensors above glibc's 32 MiB mmap threshold are mapped anew every
time); one thread (what `accelerate launch` gives a GPU rank) pays all of it serially.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

# llama3.2-3b's projection shapes (d_model 3072, d_ff 8192, 8 KV heads of 128): MLP, q/o, k/v
SHAPES = [3072 * 8192, 3072 * 3072, 3072 * 1024]


def _best(fn, n: int, k: int = 3) -> float:
    best = float("inf")
    for _ in range(k):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e9  # ns per parameter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--params", type=float, default=200e6)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sizes, total = [], 0
    while total < args.params:
        for s in SHAPES:
            sizes.append(s)
            total += s
    params = [torch.nn.Parameter(torch.randn(n)) for n in sizes]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-5, weight_decay=0.01)  # as launcher/compromises builds it with offload
    opt.step()
    grads = [p.grad for p in params]
    coef = torch.tensor(0.999)
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "params": total,
           "adamw_ns_per_param": _best(opt.step, total),
           "clip_norm_ns_per_param": _best(lambda: [torch.linalg.vector_norm(g) for g in grads], total),
           "clip_scale_ns_per_param": _best(lambda: [g.mul_(coef) for g in grads], total)}
    n = SHAPES[0]
    p, g, m, v = (torch.randn(n) for _ in range(4))
    v.abs_()
    ops = {"param.mul_": lambda: p.mul_(0.999), "exp_avg.lerp_": lambda: m.lerp_(g, 0.1),
           "exp_avg_sq.mul_": lambda: v.mul_(0.999), "addcmul_": lambda: v.addcmul_(g, g, value=1e-3),
           "sqrt (new tensor)": lambda: v.sqrt(), "div (new tensor)": lambda: v / 0.9, "add_(eps)": lambda: m.add_(1e-8),
           "addcdiv_": lambda: p.addcdiv_(m, v, value=-1e-5), "sqrt into an existing tensor": lambda: torch.sqrt(v, out=m)}
    out["ops_ns_per_param"] = {k: round(_best(f, n, 5), 3) for k, f in ops.items()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
