"""Issue 39, point 2: does a forward/backward phase split of the host-GPU overlap explain the two-signed errors of
the H100 set (results/h100-i39.md)? Post-hoc: the packaged estimate's host_s and gpu_s per row, recombined as
max(host_fwd, gpu_fwd) + max(host_bwd, gpu_bwd) with the two shares fit on the fit rows only (grid), judged on the
holdout rows. Nothing in advisor/ reads this.

    PYTHONPATH=. python benchmarks/notebook/2026-12-07-i39-host-gpu-phases/phases.py
"""
import statistics
from benchmarks.calibration import h100_i39 as H
from benchmarks.calibration import rows as fc
from advisor.calibration import default_calibration
cal = default_calibration(); hw = H.hardware()
data = []
for r in H.measured_rows():
    t = fc.predict(r, cal, hw).throughput
    acc = 1  # rows are single micro-step
    data.append((r, t))
def model(t, r, a, g):
    # a: host share spent in forward; g: GPU share in forward
    gf = t.gpu_s * g; gb = t.gpu_s - gf
    hf = t.host_s * a; hb = t.host_s - hf
    return max(hf, gf) + max(hb, gb) + t.optimizer_s + t.exposed_comm_s
def errs(a, g, split):
    out = []
    for r, t in data:
        if r["split"] != split: continue
        step = model(t, r, a, g)
        out.append(r["step_s"] / step - 1)  # samples/s err = meas_step/pred_step - 1
    return out
def show(tag, es):
    a=[abs(e) for e in es]; print(f"{tag}: n={len(a)} median {statistics.median(a)*100:.1f} worst {max(a)*100:.1f} signed {statistics.median(es)*100:+.1f}")
# baseline (packaged)
for sp in ("fit","holdout"):
    show(f"packaged {sp}", [t.samples_per_s/r["samples_per_s"]-1 for r,t in data if r["split"]==sp])
best=None
for a in [i/20 for i in range(6,19)]:
    for g in [i/20 for i in range(4,12)]:
        es = errs(a, g, "fit"); l = sum(e*e for e in es)
        if best is None or l < best[0]: best=(l,a,g)
print("best on fit rows: a=%.2f g=%.2f" % best[1:])
for sp in ("fit","holdout"):
    show(f"phase {sp}", errs(best[1], best[2], sp))
for a,g in ((0.6,1/3),(0.5,1/3)):
  for sp in ("fit","holdout"): show(f"phase a={a} g={g:.2f} {sp}", errs(a,g,sp))
a,g=best[1:]
for r,t in data:
    print(f"{r['id']:28s} {r['split']:7s} packaged {t.samples_per_s/r['samples_per_s']-1:+6.1%} phase {r['step_s']/model(t,r,a,g)-1:+6.1%}")
