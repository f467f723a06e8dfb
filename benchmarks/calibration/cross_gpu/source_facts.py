"""Write into ``published.jsonl`` each row's split, by source, and what each source states it ran.

    python -m benchmarks.calibration.cross_gpu.source_facts

The split is by source, not by row (issue 39): rows of one source share its harness, container and batch choices,
so a row held out beside fit rows of its own source tests little. *fit*: Lambda's deeplearning-benchmark, one GPU
(every GPU kind it publishes); *holdout*: NVIDIA's DeepLearningExamples tables (ResNet-50 and BERT, 1 and 8 GPUs), and
Lambda's 2-GPU rows (the communication model's, not the fractions'; reported apart). The issue-14 split (one GPU kind
per architecture fit) is kept in each row as ``split_issue14``. What a GPU kind never measured should expect is
measured apart, leaving each kind of the fit source out in turn (``fit.py``, ``leave_kind_out``).

The facts, the same, from the same source files, as the multi-GPU rows carry (benchmarks/calibration/multi_gpu/SPLIT.md,
NOTES.md): nothing here is fit.
- SQuAD fine-tuning (Lambda's ``bert_large_squad`` column and NVIDIA's "Fine-tuning SQuAD" tables): DeepLearningExamples'
  run_squad.py trains ``BertForQuestionAnswering`` (a Linear(hidden, 2) span head, no MLM head), in that harness
  (``dle-squad``, whose efficiency ``fit.py`` fits on the fit source's Hopper rows).
- NVIDIA's BERT pre-training: the vocabulary padded to 30,528 (run_pretraining.py), the MLM head on the masked 15% of
  positions only (modeling.py's dense sequence output; LDDL's masked_lm_ratio 0.15) and, at seq 512, LDDL's sequence
  binning at bin size 64, measured by NVIDIA/LDDL's README at 1.73x (``bin_speedup``).
"""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).with_name("published.jsonl")


def facts(r: dict) -> dict:
    """The source-stated facts of one row (empty for a row the catalog name describes as it ran)."""
    text = r["row"]
    if "bert_large_squad" in text or "Fine-tuning SQuAD" in text:
        return {"architecture": "BertForQuestionAnswering", "harness": "dle-squad"}
    if "BERT" in text and "Pre-training" in text:
        return {"vocab": 30528, "masked_ratio": 0.15, **({"bin_speedup": 1.73} if r.get("seq_len") == 512 else {})}
    return {}


FIT_SOURCE = "github.com/lambdal/deeplearning-benchmark"


def split_of(r: dict) -> str:
    return "fit" if FIT_SOURCE in r["source"] and r["gpus"] == 1 else "holdout"


def main() -> None:
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    for r in rows:
        r.setdefault("split_issue14", r["split"])
        r["split"] = split_of(r)
    DATA.write_text("".join(json.dumps({**r, **facts(r)}) + "\n" for r in rows))
    print(f"wrote {DATA}: {sum(bool(facts(r)) for r in rows)} of {len(rows)} rows carry source facts")


if __name__ == "__main__":
    main()
