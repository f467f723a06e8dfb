import sys, pathlib
import advisor.gpu_perf as G
G.FITTED = pathlib.Path('benchmarks/notebook/2026-12-05-squad-qa-head/gpu_perf_refit.json')
import benchmarks.calibration.cross_gpu.predict as P
which = sys.argv[1]
if which == "cross":
    res = P.errors(P.load_rows())
    import json
    text = P.report(res, json.loads(P.BEFORE.read_text()), json.loads(P.LAST.read_text()))
    open('/tmp/cross-gpu-refit.md','w').write(text)
    print(text.split("\n| id |")[0])
elif which == "h200":
    P.h200_rows()
