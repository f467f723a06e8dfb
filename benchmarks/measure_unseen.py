"""Unseen configurations of the users' models (issue 16's throughput bar), measured like the rest.

Every row here is declared *holdout* before it is measured: no calibration constant is ever fit
on it (benchmarks/fit_calibration.py fits "fit" rows only). They are new batch sizes, precisions and
compile choices of the models in ``benchmarks/users_models/``, so they check the roofline on
configurations it was not fitted on. Measurement is ``measure_users_models.py``'s, unchanged (same
loop, timing, header); only the table of configurations differs.

On one H200 (about 4 minutes: 12 eager rows of ~12 s and one compiled row of ~70 s):

    PYTHONPATH=. PYTHONUNBUFFERED=1 python3 benchmarks/measure_unseen.py --out $OUT/h200-users-unseen.jsonl --budget-s 230

Copy the JSONL to ``benchmarks/results/h200-users-unseen.jsonl``; ``benchmarks/fit_calibration.py``
reads it next to ``h200-users.jsonl`` (holdout: judged, never fit) and ``python benchmarks/predict_users.py``
reports it. ``--predict FILE`` (CPU, no measurement) writes what ``advise estimate`` predicts for every
row now, before any measurement: ``results/h200-users-unseen-predicted.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import measure_users_models as mum  # noqa: E402

# (id, model, micro_batch, seq_len, image_size, precision, compile, split): all holdout, none measured yet.
UNSEEN = [
    ("u-enc-bf16-32", "encoder_classifier", 32, 512, None, "bf16", False, "holdout"),
    ("u-enc-fp32-128", "encoder_classifier", 128, 512, None, "fp32", False, "holdout"),
    ("u-nanogpt-bf16-8", "nanogpt", 8, 1024, None, "bf16", False, "holdout"),
    ("u-nanogpt-pure-8", "nanogpt", 8, 1024, None, "pure-bf16", False, "holdout"),
    ("u-unet-bf16-64", "unet", 64, None, 256, "bf16", False, "holdout"),
    ("u-unet-fp32-8", "unet", 8, None, 256, "fp32", False, "holdout"),
    ("u-convnext-bf16-32", "convnext", 32, None, 224, "bf16", False, "holdout"),
    ("u-convnext-fp32-64", "convnext", 64, None, 224, "fp32", False, "holdout"),
    ("u-hfgpt2-bf16-16", "hf-gpt2", 16, 1024, None, "bf16", False, "holdout"),
    ("u-hfbertcls-bf16-64", "hf-bert-cls", 64, 512, None, "bf16", False, "holdout"),
    ("u-hfbertmlm-bf16-8", "hf-bert-mlm", 8, 512, None, "bf16", False, "holdout"),
    ("u-hfqwen2-bf16-4", "hf-qwen2-0.5b", 4, 2048, None, "bf16", False, "holdout"),
    ("u-convnext-bf16-compile-64", "convnext", 64, None, 224, "bf16", True, "holdout"),
]



def predict(path: Path) -> None:
    """``advise estimate FLAGS --gpu H200`` for every row, written before the rows are measured."""
    import json

    from users import predict_request, request_of

    out = {}
    for c in UNSEEN:
        row = dict(zip(mum.KEYS, c))
        est = predict_request(request_of(mum.cardwise_flags(row)))
        out[row["id"]] = {"samples_per_s": round(est.throughput.samples_per_s, 3),
                          "peak_gib": round(est.memory.peak_gib, 4)}
    path.write_text(json.dumps(out, indent=0, sort_keys=True) + "\n")


if __name__ == "__main__":
    if "--predict" in sys.argv:
        predict(Path(sys.argv[sys.argv.index("--predict") + 1]))
    else:
        mum.CONFIGS = UNSEEN
        mum.main()
