"""Map the SQuAD rows to BertForQuestionAnswering (what DLE's run_squad.py trains): adds
"architecture": "BertForQuestionAnswering" after "model" on every row of both published sets whose
text names SQuAD (Lambda's bert_*_squad columns, NVIDIA's SQuAD tables). Run from the checkout root,
after `git apply` of qa-head.patch and remap.patch (this folder); then
`PYTHONPATH=. python benchmarks/notebook/2026-12-05-squad-qa-head/eval_cross.py cross|h200` and
`... eval_multi.py new` print the refit's reports without touching the packaged files."""
import json

for f in ("benchmarks/calibration/cross_gpu/published.jsonl", "benchmarks/calibration/multi_gpu/published.jsonl"):
    out = []
    for line in open(f).read().splitlines():
        if line.strip() and "squad" in line.lower():
            r = json.loads(line)
            line = json.dumps({k2: v2 for k, v in r.items()
                               for k2, v2 in ([(k, v), ("architecture", "BertForQuestionAnswering")] if k == "model" else [(k, v)])})
        out.append(line)
    open(f, "w").write("\n".join(out) + "\n")
