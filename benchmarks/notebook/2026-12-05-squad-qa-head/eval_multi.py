import sys, pathlib
import advisor.gpu_perf as G
if sys.argv[1] == "new":
    G.FITTED = pathlib.Path('benchmarks/notebook/2026-12-05-squad-qa-head/gpu_perf_refit.json')
import benchmarks.calibration.multi_gpu.fit as M
prs = M.pairs(M.load_rows())
k = M.fit(prs)
res = M.evaluate(prs, k)
text = M.report(res, k)
open(f'/tmp/multi-gpu-{sys.argv[1]}.md','w').write(text)
print(text.split("\n| id |")[0])
for x in res:
    r=x["row"]
    if r["split"]=="holdout" and r["gpus"]==8: print(r["id"], f'{x["sps_err"]*100:+.1f}%', f'{x["points"]:+.1f}pts')
