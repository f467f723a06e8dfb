"""The published rows on other GPUs are split by source and estimated as their source ran them (issue 39):
benchmarks/calibration/cross_gpu/source_facts.py writes both into published.jsonl, predict.py reads them."""

from __future__ import annotations

import benchmarks.calibration.cross_gpu.predict as P
from benchmarks.calibration.cross_gpu.source_facts import facts, split_of


def _row(prefix: str) -> dict:
    return next(r for r in P.load_rows() if r["id"].startswith(prefix))


def test_the_packaged_rows_are_what_source_facts_writes():
    for r in P.load_rows():
        assert r["split"] == split_of(r), r["id"]
        assert {k: r[k] for k in facts(r)} == facts(r), r["id"]


def test_the_split_is_by_source():
    rows = P.load_rows()
    fit_sources = {r["source"].split("/")[4] for r in rows if r["split"] == "fit"}
    assert fit_sources == {"deeplearning-benchmark"}  # Lambda's
    assert all(r["split"] == "holdout" for r in rows if "DeepLearningExamples" in r["source"])
    assert {r["gpu"] for r in rows if r["split"] == "fit"} >= {"A10", "RTX-3090", "A100-PCIE-40GB", "RTX-6000-Ada"}


def test_nvidia_pretraining_runs_its_masked_head_on_a_padded_vocabulary():
    r = _row("nvidia-a100-sxm-80gb-bertl-pre512-fp16-1")
    spec = P.source_spec(r)
    seq = P.padded_seq_len(r)
    assert seq < 512  # LDDL's binning
    assert spec.arch.vocab == 30528 and spec.arch.head_tokens(seq) == round(0.15 * seq)
    # what `--model bert-large --seq-len 512` alone estimates (BertForMaskedLM, full length, head on every token)
    bare = {k: v for k, v in r.items() if k not in ("vocab", "masked_ratio", "bin_speedup")}
    assert P.predict(r) > 1.5 * P.predict(bare)


def test_squad_rows_train_the_question_answering_head_at_their_harness_rate():
    r = _row("lambda-a100-sxm-80gb-bertl-fp16-1")
    assert P.source_spec(r).params < P.resolve_model(P.request_of(r).model).params  # no 30,522-word MLM head
    eff = P.harness_efficiency(r)
    assert 0.5 < eff < 1.0
    assert P.predict(r, harness={}) > P.predict(r)  # the harness slows every GPU rate of the row
    assert P.harness_efficiency(_row("lambda-a100-sxm-80gb-r50-fp16-1")) == 1.0  # ResNet-50 names no harness


def test_the_report_states_each_precision_class_sign_for_a_source_with_both():
    # issue 39's "no systematic sign": a cause that slows fp16 alone shows as one class's sign, so the page says both
    rows = [_row("nvidia-v100-sxm2-32gb-bertl-squad384-fp16-1"), _row("nvidia-v100-sxm2-32gb-bertl-squad384-fp16-8"),
            _row("nvidia-v100-sxm2-32gb-bertl-squad384-fp32-1")]
    res = [(rows[0], 0.0, 0.10), (rows[1], 0.0, 0.20), (rows[2], 0.0, -0.04)]
    assert P.signed_by_class(res) == "; half +15.0% (2 of 2 over), full -4.0% (0 of 1 over)"
    assert P.signed_by_class(res[:2]) == ""  # one class only: the source's own signed median says it
    line = next(x for x in P.report(res).splitlines() if x.startswith("- holdout, NVIDIA DLE BERT"))
    assert "half +15.0%" in line and "full -4.0%" in line
