"""The fp16 sign on NVIDIA's BERT rows (issue 39, point 3): each candidate cause, sized with the estimator.

    PYTHONPATH=. python benchmarks/notebook/2026-12-08-cross-gpu-sign/candidates.py

Nothing here is fit and nothing is written: it prints, for the published BERT rows of benchmarks/calibration/
cross_gpu/published.jsonl, what NOTE.md reads. Sections:
1. fp16 over full precision (TF32, or fp32 on the V100), published and estimated, for every source, GPU and task
   with both: a cause that slows fp16 only shows as a published ratio below the estimated one.
2. The same configuration in both sources (DLE's run_squad.py, same GPU chip, same batch): the estimate cannot
   tell them apart, so its error there is the sources' own gap.
3. Per NVIDIA BERT row, the size of the step's costs the candidates would act on: the row's own batch against
   Lambda's (SQuAD), the optimizer pass per accumulation window (LAMB over 340M parameters, with its fp32 master
   weights), and the host: its dispatch time over the GPU's per micro-step, and the path a synchronisation between
   forward and backward would add (run_squad.py calls .item() every step; run_pretraining.py had a loss.item() only
   between 4cb857b9 and 97539685, after the 21.11 tables): the host dispatches the backward once the forward is
   done, then the next forward, so the device's next forward ends no earlier than host backward + device forward.
"""

from __future__ import annotations

import statistics

import benchmarks.calibration.cross_gpu.predict as P
from advisor.calibration import default_calibration
from advisor.estimate import estimate
from advisor.hardware import Machine, resolve_hardware
from advisor.starting_config import starting_config
from advisor.step_work import shared_step_work
from advisor.throughput import gpu_seconds, host_seconds

CHIP = {"V100-SXM2-16GB": "V100-SXM2", "V100-SXM2-32GB": "V100-SXM2"}  # one die, clocks and bandwidth (datasheets)


def parts(r: dict, **override) -> dict:
    """The row's estimate and its per-micro-step parts (GPU, matmul, host), as predict.predict builds it."""
    r = {**r, **override}
    cal = default_calibration()
    eff = P.harness_efficiency(r)
    if eff != 1.0:
        cal = cal.model_copy(update={"rate_efficiency": {n: v * eff for n, v in cal.rate_efficiency.items()}})
    req = P.request_of(r)
    hw = resolve_hardware(Machine(cpu_cores=16), **req.hardware_args())
    spec = P.source_spec(r)
    cfg, _ = starting_config(req, spec, device="gpu", gpu=hw.gpu, ranks=hw.total_gpus)
    t = estimate(spec, cfg, hw, calibration=cal).throughput
    work = shared_step_work(spec, cfg, cal)
    _, g = gpu_seconds(work, cfg, hw.gpu, cal)
    h = host_seconds(spec, cfg, cal, work)
    return {"sps": t.samples_per_s, "step_s": t.step_s, "opt_s": t.optimizer_s, "gpu": g, "host": h,
            "ga": cfg.grad_accum, "host_fwd": cal.host_forward_share.get("eager", 0.0)}


def task(r: dict) -> str:
    if r["model"] == "resnet50":
        return "r50"
    return f"pre{r['seq_len']}" if r.get("masked_ratio") else "squad"


def main() -> None:
    every = [r for r in P.load_rows() if r["gpus"] == 1]
    rows = [r for r in every if r["model"] == "bert-large"]
    print("1. fp16 / full precision, published vs estimated (ResNet-50: NVIDIA's fp16 runs channels_last, Lambda's NCHW)")
    print(f"{'source':8s} {'GPU':16s} {'task':7s} {'batch h/f':>10s} {'published':>9s} {'estimated':>9s} {'pub/est':>8s}")
    groups: dict = {}
    for r in every:
        groups.setdefault((P.source_of(r).split()[0], r["gpu"], task(r)), {})[P.precision_class(r)] = r
    for (src, gpu, tk), g in sorted(groups.items(), key=lambda kv: (kv[0][2] == "r50", kv[0])):
        if {"half", "full"} <= g.keys():
            h, f = g["half"], g["full"]
            pub = h["published"] / f["published"]
            est = P.predict(h) / P.predict(f)
            print(f"{src:8s} {gpu:16s} {tk:7s} {h['micro_batch']:>4d}/{f['micro_batch']:<5d} {pub:9.2f} {est:9.2f} {pub / est:8.3f}")
    print("\n2. the same configuration in both sources (DLE run_squad.py, same chip, same batch)")
    squad = [r for r in rows if task(r) == "squad"]
    for a in squad:
        for b in squad:
            if (P.source_of(a).startswith("Lambda") and P.source_of(b).startswith("NVIDIA")
                    and CHIP.get(a["gpu"], a["gpu"]) == CHIP.get(b["gpu"], b["gpu"])
                    and a["precision"] == b["precision"] and a["micro_batch"] == b["micro_batch"]):
                print(f"  {a['precision']} batch {a['micro_batch']}: Lambda {a['gpu']} {a['published']:.1f} (est {P.predict(a):.1f}), "
                      f"NVIDIA {b['gpu']} {b['published']:.1f} (est {P.predict(b):.1f}): NVIDIA/Lambda published "
                      f"{b['published'] / a['published']:.3f}")
    print("\n3. NVIDIA's rows: what each candidate acts on (ms per micro-step unless said)")
    print(f"{'id':44s} {'err':>6s} {'GPU':>6s} {'host':>6s} {'h/g':>5s} {'sync path/g':>11s} {'opt/step':>8s} {'at Lambda batch':>15s}")
    for r in rows:
        if not P.source_of(r).startswith("NVIDIA"):
            continue
        p = parts(r)
        err = p["sps"] / r["published"] - 1
        g_f = p["gpu"] / 3.0  # the forward: a third of forward + backward (throughput.crossing_seconds)
        sync_path = (1 - p["host_fwd"]) * p["host"] + g_f  # the host's backward dispatch, then the device's forward
        lam = [x for x in squad if P.source_of(x).startswith("Lambda") and x["gpu"] == "A100-SXM-80GB"
               and x["precision"] == r["precision"]] if task(r) == "squad" and r["gpu"] == "A100-SXM-80GB" else []
        at_lambda = f"{parts(r, micro_batch=lam[0]['micro_batch'])['sps'] / p['sps']:.3f}x" if lam else ""
        print(f"{r['id']:44s} {err * 100:+5.1f}% {p['gpu'] * 1e3:6.1f} {p['host'] * 1e3:6.1f} {p['host'] / p['gpu']:5.2f} "
              f"{sync_path / p['gpu']:11.2f} {p['opt_s'] / p['step_s'] * 100:7.2f}% {at_lambda:>15s}")
    errs = {c: [P.predict(r) / r["published"] - 1 for r in rows if P.source_of(r).startswith("NVIDIA")
                and P.precision_class(r) == c] for c in ("half", "full")}
    for c, e in errs.items():
        print(f"NVIDIA BERT {c}: signed median {statistics.median(e) * 100:+.1f}% over {len(e)} one-GPU rows")


if __name__ == "__main__":
    main()
