"""Does the host-dispatch probe track the host-bound rows within one call? Data for a better probe.

The header of every unseen set's file holds one reading of ``launcher.host_dispatch`` (a median of
windows of a tiny 150-op step) and the fit predicts host-bound rows with it. In the eighth and ninth
calls it read 0.84x the reference's time while their host-bound rows ran at the reference's pace; its own
windows spread by +-20%. This runs, in one call, ``--rounds`` rounds of: the probe (as the header does),
then each host-bound row (measure_users_models' run_config, unchanged). Every reading and row is written
with its time since the start, so a probe's drift can be set beside the rows' own.

    python3 -m benchmarks.notebook.2026-12-04-host-probe-stability.host_probe_stability --out $OUT/host-probe.jsonl [--rounds 3]
    python -m benchmarks.notebook.2026-12-04-host-probe-stability.host_probe_stability --smoke --out /tmp/p.jsonl     # CPU, tiny models
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


import benchmarks.calibration.measure.unseen as measure_unseen
import benchmarks.calibration.measure.users_models as mum
from benchmarks.calibration.measure.steploop import free_device

# Host-bound rows of the seventh to ninth sets, of four kinds (text encoder, Llama-style in pure-bf16 and
# bf16, a small CNN in fp32); their measured steps are 6.8-85 ms.
ROWS = ("u7-enc-bf16-16-s128", "u8-mistral-pure-2-s512", "u9-hfqwen2-bf16-1-s512", "u7-vgg-fp32-8-i160")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny models, one round")
    args = ap.parse_args()
    import torch

    from launcher import host_dispatch

    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    rows = measure_unseen.pick(list(ROWS))
    began = time.perf_counter()
    with args.out.open("w") as f:
        f.write(json.dumps(mum.header(device)) + "\n")
        for k in range(1 if args.smoke else args.rounds):
            probe = host_dispatch.measure(device, windows=2 if device == "cpu" else 7)
            f.write(json.dumps({"kind": "probe", "round": k, "t_s": time.perf_counter() - began, **probe}) + "\n")
            for row in rows:
                res = mum.run_config(row, device, 2 if args.smoke else 3, 0.0 if args.smoke else 1.5,
                                     2 if args.smoke else 5, 2 if args.smoke else 40, args.smoke)
                free_device(device)
                f.write(json.dumps({"kind": "row", "round": k, "t_s": time.perf_counter() - began,
                                    **{key: res.get(key) for key in ("id", "step_s", "samples_per_s", "steps")}}) + "\n")
                f.flush()
                print(res["id"], round(res["step_s"] * 1e3, 2), "ms", flush=True)


if __name__ == "__main__":
    main()
