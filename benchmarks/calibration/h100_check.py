"""The H100 measurements (issue 28) against the estimator: what the Hopper fractions, fit on the H200, predict
for an H100 under the same stack, and what DLE's SQuAD harness reaches against this stack.

    python -m benchmarks.calibration.h100_check            # writes benchmarks/calibration/results/h100-check.md
    python -m benchmarks.calibration.h100_check --print

Reads ``results/h100-reference.jsonl`` (measure/reference.py on the H100: the H200 reference set's rows, their
H200 measurements in ``results/h200-reference.jsonl``) and ``results/h100-published-configs.jsonl``
(measure/published_configs.py: the published SQuAD and ResNet-50 rows' configurations under this stack). Each
row is predicted for an H100-SXM through ``advisor.estimate`` (the reference rows as benchmarks/calibration/rows.py
predicts the H200's, with the H100 host's dispatch speed; the published-configuration rows as the cross-GPU
rows are, ``multi_gpu.fit.source_model`` for BertForQuestionAnswering). Nothing here is fit.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from advisor.calibration import default_calibration
from advisor.catalog import catalog_model
from advisor.config import TrainConfig
from advisor.estimate import estimate
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from benchmarks.calibration import rows as fc

RESULTS = Path(__file__).with_name("results")
H100_REF = RESULTS / "h100-reference.jsonl"
H100_PUB = RESULTS / "h100-published-configs.jsonl"
H200_REF = RESULTS / "h200-reference.jsonl"
REPORT = RESULTS / "h100-check.md"
GPU = "H100-SXM"
COMPILE_PAIRS = [("r50-bf16-cl-128", "r50-bf16-cl-compile-128"), ("vitb-bf16-128", "vitb-bf16-compile-128"),
                 ("gpt2-bf16-16", "gpt2-bf16-compile-16")]  # nvidia-smi: "NVIDIA H100 80GB HBM3", the SXM5 part


def _load(path: Path) -> tuple[dict, list[dict]]:
    head, out = {}, []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "header":
            head = r
        else:
            out.append(r)
    return head, out


def published_spec(r: dict):
    """The model a published-configuration row ran, as the estimator names it."""
    if r["kind"] in ("qa", "qa-eager"):
        from benchmarks.calibration.multi_gpu.fit import source_model  # noqa: PLC0415

        return source_model(r["model"], "BertForQuestionAnswering")
    return catalog_model(r["model"])  # bert-*: BertForMaskedLM; resnet50: torchvision's


def published_config(r: dict) -> TrainConfig:
    image = r["kind"] == "r50"
    return TrainConfig(micro_batch=r["micro_batch"], seq_len=None if image else r["size"],
                       image_size=r["size"] if image else None, precision=r["precision"],
                       channels_last=bool(r.get("channels_last")))


def reference_rows(hw: HardwareSpec, cal) -> list[dict]:
    """The reference rows measured on the H100, predicted for it, beside their H200 measurement and prediction."""
    h200 = {r["id"]: r for r in fc.load(H200_REF)[1]}
    factor = fc.host_factor_of(H100_REF)
    hw200 = HardwareSpec(gpu=get_gpu("H200"), gpus_per_node=1)
    out = []
    _, rows = _load(H100_REF)
    for r in rows:
        if "error" in r or not r.get("samples_per_s"):
            out.append(dict(id=r["id"], split=r.get("split"), error=r.get("error", "no rate")))
            continue
        r = dict(r, cudnn_tf32=r.get("cudnn_tf32", True), host_factor=factor)
        pred = fc.predict(r, cal, hw).throughput.samples_per_s
        base = h200.get(r["id"])
        row = dict(id=r["id"], split=r["split"], measured=r["samples_per_s"], predicted=pred,
                   err=pred / r["samples_per_s"] - 1, peak_gib=r.get("peak_gib"))
        true_fp32 = base and base["precision"] == "fp32" and not base["cudnn_tf32"] and fc.spec_of(base).family == "cnn"
        if true_fp32:  # the H200's first reference run had cuDNN TF32 off: not the same configuration
            row.update(h200=base["samples_per_s"], note="H200 row: cuDNN TF32 off")
        elif base:
            p200 = fc.predict(base, cal, hw200).throughput.samples_per_s
            row.update(h200=base["samples_per_s"], ratio=r["samples_per_s"] / base["samples_per_s"],
                       predicted_ratio=pred / p200)
        out.append(row)
    return out


def published_rows(hw: HardwareSpec, cal) -> list[dict]:
    _, rows = _load(H100_PUB)
    out = []
    for r in rows:
        if "error" in r:
            out.append(dict(id=r["id"], error=r["error"][:80]))
            continue
        est = estimate(published_spec(r), published_config(r), hw, calibration=cal)
        out.append(dict(id=r["id"], kind=r["kind"], measured=r["samples_per_s"], predicted=est.throughput.samples_per_s,
                        err=est.throughput.samples_per_s / r["samples_per_s"] - 1, peak_gib=r.get("peak_gib"),
                        attn=r.get("attn_implementation", "")))
    return out


def _stats(errs: list[float]) -> str:
    a = [abs(e) for e in errs]
    return f"n={len(a)} median {statistics.median(a) * 100:.1f}% worst {max(a) * 100:.1f}%" if a else "n=0"


def report() -> str:
    cal = default_calibration()
    hw = HardwareSpec(gpu=get_gpu(GPU), gpus_per_node=1)
    h_ref, _ = _load(H100_REF)
    h_pub, _ = _load(H100_PUB)
    ref = reference_rows(hw, cal)
    pub = published_rows(hw, cal)
    ok = [x for x in ref if "err" in x]
    lines = ["# H100 measurements against the estimator (issue 28)", "",
             f"Measured on {h_pub.get('device')} ({h_pub.get('date')}), torch {h_pub.get('torch')}, transformers "
             f"{h_pub.get('transformers')}, CUDA {h_pub.get('cuda')}; ceilings: bf16 matmul "
             f"{h_pub.get('bf16_matmul_tflops', 0):.0f} TFLOP/s, fp16 {h_pub.get('fp16_matmul_tflops', 0):.0f}, TF32 "
             f"{h_pub.get('tf32_matmul_tflops', 0):.0f}, copy {h_pub.get('copy_gbps', 0):.0f} GB/s (the H200's reference "
             "header: 788 TFLOP/s bf16, 4,190 GB/s). Regenerate: `python -m benchmarks.calibration.h100_check`; the call: "
             "`bash benchmarks/calibration/gpu_call.sh OUT h100-i28 published reference:IDS` (results/calls/h100-i28/).",
             "", f"Predicted for {GPU} by the packaged estimator (Hopper's fractions: the H200 fit's, no H100 row in any fit).",
             "", "## The H200 reference set's rows on the H100", "",
             f"- all: {_stats([x['err'] for x in ok])}; fit rows {_stats([x['err'] for x in ok if x['split'] == 'fit'])}; "
             f"holdout {_stats([x['err'] for x in ok if x['split'] == 'holdout'])}",
             f"- measured H100 / H200 samples/s: median {statistics.median([x['ratio'] for x in ok if 'ratio' in x]):.3f}; "
             f"predicted: median {statistics.median([x['predicted_ratio'] for x in ok if 'predicted_ratio' in x]):.3f}",
             f"- host dispatch (launcher.host_dispatch): {(h_ref.get('host_dispatch') or {}).get('us_per_step', 0):,.0f} µs "
             "a reference step on the H100 machine", "",
             "| id | split | H100 measured | predicted | err | H200 measured | H100/H200 measured | predicted |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for x in ref:
        if "err" not in x:
            lines.append(f"| {x['id']} | {x.get('split')} | {x['error'][:60]} | | | | | |")
            continue
        ratios = (f"{x['ratio']:.3f} | {x['predicted_ratio']:.3f}" if "ratio" in x else f"{x.get('note', '')} | ")
        lines.append(f"| {x['id']} | {x['split']} | {x['measured']:,.1f} | {x['predicted']:,.1f} | {x['err'] * 100:+.1f}% | "
                     f"{x.get('h200', 0):,.1f} | {ratios} |")
    by_id = {x["id"]: x for x in ok}
    lines += ["", "## torch.compile's gain on the H100", "",
              "An estimate for any GPU but the H200 marks the compile gain as transferred (advisor/estimate.py, "
              "`_mark_transferred_compile`); measured here on three configurations:", "",
              "| eager / compiled | H100 measured | estimated | H200 measured |", "|---|---:|---:|---:|"]
    for eager, comp in COMPILE_PAIRS:
        if eager in by_id and comp in by_id:
            e, c = by_id[eager], by_id[comp]
            h200 = f"x{c['h200'] / e['h200']:.2f}" if "h200" in e and "h200" in c else ""
            lines.append(f"| {eager} / {comp} | x{c['measured'] / e['measured']:.2f} | x{c['predicted'] / e['predicted']:.2f} "
                         f"| {h200} |")
    lines += ["", "## Published rows' configurations under this stack", "",
              "qa: transformers BertForQuestionAnswering (SDPA), what DLE's run_squad.py trains; qa-eager: the same with "
              "eager attention; mlm: BertForMaskedLM, labels on every token (the rows' mapping before issue 28's QA "
              "head); r50: torchvision ResNet-50. Predicted: qa and qa-eager as BertForQuestionAnswering (the estimator "
              "assumes SDPA), mlm as the catalog's bert-*, r50 as the catalog's resnet50.", "",
              "| id | kind | attention | measured | predicted | err | peak GiB |", "|---|---|---|---:|---:|---:|---:|"]
    for x in pub:
        if "err" not in x:
            lines.append(f"| {x['id']} | | | {x['error']} | | | |")
            continue
        lines.append(f"| {x['id']} | {x['kind']} | {x['attn']} | {x['measured']:,.1f} | {x['predicted']:,.1f} | "
                     f"{x['err'] * 100:+.1f}% | {x['peak_gib'] or 0:.1f} |")
    return "\n".join(lines) + "\n"


def emit(text: str, path: Path, printing: bool) -> None:
    """A check's report: to stdout with --print, else written to its file under results/."""
    if printing:
        print(text)
    else:
        path.write_text(text)
        print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--print", action="store_true", help="print instead of writing results/h100-check.md")
    args = ap.parse_args()
    emit(report(), REPORT, args.print)


if __name__ == "__main__":
    main()
