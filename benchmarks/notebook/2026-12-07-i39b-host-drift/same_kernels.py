"""Issue 39's two H100 calls (i39, i39b): host-bound rows that launch the same kernel sequence (same model, same
precision, same kernel count per step, the GPU's share small) compared across the calls, and each call's
start-of-call host probe. Host-bound steps take the host's time, so their ratio is the host's speed ratio.

    PYTHONPATH=. python benchmarks/notebook/2026-12-07-i39b-host-drift/same_kernels.py
"""
from advisor.calibration import default_calibration
from benchmarks.calibration import h100_i39 as H
from benchmarks.calibration import rows as fc

cal = default_calibration()
heads = {s: fc.load(H.measured_path(s))[0]["host_dispatch"]["us_per_step"] for s in ("i39", "i39b")}
print(f"start-of-call host probe: i39 {heads['i39']:,.0f} us, i39b {heads['i39b']:,.0f} us "
      f"({heads['i39b'] / heads['i39']:.2f}x)")
rows = {s: H.judged(cal, set_name=s) for s in ("i39", "i39b")}
for a in rows["i39"]:
    for b in rows["i39b"]:
        same = (a["model"], a["precision"], a["compile"], a["grad_ckpt"], a["channels_last"], a.get("cuda_kernels")) == \
               (b["model"], b["precision"], b["compile"], b["grad_ckpt"], b["channels_last"], b.get("cuda_kernels"))
        if same and a.get("cuda_kernels", 0) > 0:
            ta = fc.predict(a, cal, H.hardware(set_name="i39")).throughput
            tb = fc.predict(b, cal, H.hardware(set_name="i39b")).throughput
            print(f"{a['id']:22s} {a['step_s'] * 1e3:6.1f} ms (GPU est {ta.gpu_s * 1e3:5.1f})  vs  {b['id']:22s} "
                  f"{b['step_s'] * 1e3:6.1f} ms (GPU est {tb.gpu_s * 1e3:5.1f}), {a['cuda_kernels']} kernels: "
                  f"{b['step_s'] / a['step_s']:.2f}x")

# Post hoc, nothing packaged reads it: the i39b rows predicted with their host 1.0x .. 2.0x slower than the
# start-of-call probe said (one factor for the whole call), to see how much of the error a host drift explains.
import statistics  # noqa: E402

for slow in (1.0, 1.25, 1.5, 1.75, 2.0):
    errs = [r["err_sps"] for r in H.judged(cal, [dict(r, host_factor=r["host_factor"] * slow)
                                                 for r in H.measured_rows("i39b")], set_name="i39b")]
    a = [abs(e) for e in errs]
    print(f"i39b, host {slow:.2f}x the probe: samples/s median {statistics.median(a):.1%}, worst {max(a):.1%}, "
          f"signed median {statistics.median(errs):+.1%}")
