"""Every measured row the calibration fit reads, loaded with its split and its host factor.

Rows (all on one H200; splits declared before measuring, in benchmarks/calibration/measure/reference.py):
* ``h200-reference.jsonl``: catalog models at large batches. Its first run turned cuDNN TF32 off,
  so its fp32 CNN row is "true fp32", a precision cardwise no longer names (DESIGN.md: fp32 =
  PyTorch's defaults, cuDNN TF32 on): that row is listed as excluded, neither fit nor judged.
* ``h200-hostbound-2026-12-04.jsonl``: small batches (host-bound regime), compiled small batches and
  fp32 CNNs with cuDNN TF32 (issue 16), measured with the host's dispatch speed in the header
  (``launcher.host_dispatch``). That header is the reference host: ``host_dispatch_ref_us``.
  Every row is predicted for the host that ran it: ``host_factor`` = its file's dispatch time over
  the reference's, 1.0 for files measured before the header had it (assumed the reference host).
  The first measurement of the set (``h200-hostbound.jsonl``, 2026-12-03) is a run-to-run repeat.
* ``h200-hostbound-contended-2026-12-04.jsonl``: host-bound rows on a host slowed on purpose (one
  core shared with a busy loop): judged on their own, with and without their host factor.
* ``h200-1gpu.csv`` (``advise bench``): its compiled rows and its fp32 CNN row (cuDNN TF32 on, as
  DESIGN.md's fp32) join the fit when their configuration is none of the holdout rows'.
* ``h200-users.jsonl`` when present (users' models, see users.py), the
  unseen sets' files (holdout, ``unseen_sets.json``) and seven compiled rows timed again each in a
  process of its own (``h200-compiled-kernels-2026-12-04/compiled-kernels.json``: throughput fit rows,
  ``fresh_compiled_rows``). All of them in ``benchmarks/calibration/results/``.

Used by ``benchmarks.calibration.fit`` and ``report`` and by the notebook's diagnostics.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from advisor.calibration import Calibration
from advisor.catalog import catalog_model
from advisor.config import TrainConfig
from advisor.estimate import estimate
from advisor.host_speed import HostSpeed
from advisor.hardware import HardwareSpec

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "calibration" / "results"
DEFAULT = RESULTS / "h200-reference.jsonl"
HOSTBOUND = RESULTS / "h200-hostbound-2026-12-04.jsonl"
CONTENDED = RESULTS / "h200-hostbound-contended-2026-12-04.jsonl"


def _unseen_sets() -> tuple[tuple[str, str, str, tuple[str, ...], bool], ...]:
    """Each unseen set of ``benchmarks/calibration/unseen_sets.json`` (measure/unseen.py --set uN): its rows' id prefix,
    its name, what the estimator of the day before predicted for it (--predict FILE, committed before the
    call that measured it), the files that measured it, newest first (a row comes from the first file that
    has it), and whether half its rows joined the fit (``half_in_fit``, below)."""
    sets = json.loads((ROOT / "benchmarks" / "calibration" / "unseen_sets.json").read_text())
    return tuple((s["rows"][0][0].split("-", 1)[0] + "-", s["name"], s["predicted"], tuple(s["measured"]),
                  s["half_in_fit"]) for s in sets.values())


UNSEEN_SETS = _unseen_sets()
UNSEEN = tuple(RESULTS / f for *_, files, _ in UNSEEN_SETS for f in files)
# Sets whose before-measuring judgement is recorded (their predictions files and the closing notes of
# issue 16) and marked ``half_in_fit``: half of their rows join the fit, chosen by a hash of the row's id
# (fit_half), the other half stays holdout. With the fit rows alone (catalog models at few sizes) the fit
# never saw an fp32 GEMM of 2,048 rows or a VGG, and every later set is judged before measuring all the same.
REFIT_SETS = tuple(prefix for prefix, *_, half in UNSEEN_SETS if half)


def fit_half(row_id: str) -> bool:
    """A fixed half of the rows, independent of their errors: the id's CRC-32 is even."""
    import zlib

    return zlib.crc32(row_id.encode()) % 2 == 0


# The users' eager rows measured again (the round-6 call: measure/users_models.py) with the host's dispatch speed after each row:
# they replace the first measurement of the same configuration, which had no host speed.
USERS_RERUN = RESULTS / "h200-users-rerun-2026-12-04.jsonl"
# Compiled users' rows, each in a process of its own (measure/compiled_overlap.py --fresh): fresh_compiled_rows.
COMPILED_FRESH = RESULTS / "h200-compiled-kernels-2026-12-04" / "compiled-kernels.json"
BENCH_CSV = RESULTS / "h200-1gpu.csv"
_CONFIG_KEYS = ("model", "micro_batch", "seq_len", "image_size", "precision", "compile", "grad_ckpt", "channels_last")


@functools.lru_cache(maxsize=None)
def dispatch_us(path: Path) -> float | None:
    """The reference step's time in a measurement file's header (launcher.host_dispatch), if recorded."""
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "header":
            return (r.get("host_dispatch") or {}).get("us_per_step")
    return None


def host_factor_of(path: Path, row: dict | None = None) -> float:
    """The host that measured the row over the reference host (HOSTBOUND's header), by the first of:
    the probes taken inside the row, between its timed rounds (``host_dispatch_in_row_us``,
    measure/users_models.py --rounds; from the thirteenth set); the dispatch speed in the file's
    header (launcher.host_dispatch at the call's start, as `advise probe` measures a user's machine
    once); the row's reading after its teardown. 1.0 when none or the reference was not measured.
    The header comes before the after-teardown reading because those ran right after a row's
    teardown and read 1.06-1.37x the header in the third unseen set (header 0.96x the reference):
    with them its rows are predicted worse (13.0% median, 31.9% worst) than with the header (11.7%,
    27.7%). The in-row probes run with the model alive and the device idle, in the seconds the row
    is timed: the host drifts within a call (1.6x across the twelfth call's after-row readings)."""
    row = row or {}
    here = row.get("host_dispatch_in_row_us") or (dispatch_us(path) if path.exists() else None) \
        or row.get("host_dispatch_us")
    ref = dispatch_us(HOSTBOUND) if HOSTBOUND.exists() else None
    return here / ref if here and ref else 1.0


def load(path: Path) -> tuple[dict, list[dict]]:
    header, rows = {}, []
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "header":
            header = r
        elif "error" not in r:  # each row for its own host reading where it has one (host_factor_of)
            rows.append(dict(r, source=path.name, cudnn_tf32=r.get("cudnn_tf32", "tf32" in header),
                             host_factor=host_factor_of(path, r)))
    return header, rows


def bench_fit_rows(path: Path, holdout: list[dict]) -> list[dict]:
    """`advise bench` rows marked fit: compiled ones, and fp32 CNNs (cuDNN TF32 on, DESIGN.md's fp32),
    unless a holdout row has their configuration."""
    import csv

    if not path.exists():
        return []
    held = {tuple(r[k] for k in _CONFIG_KEYS) for r in holdout}
    out = []
    for b in csv.DictReader(path.open()):
        if b["status"] != "ok" or not (b["compile"] == "True" or (b["family"] == "cnn" and b["precision"] == "fp32")):
            continue
        r = {"id": f"bench-{b['model']}-{b['variant']}-{b['micro_batch']}", "model": b["model"],
             "micro_batch": int(b["micro_batch"]), "seq_len": int(b["seq_len"]) if b["seq_len"] else None,
             "image_size": int(b["image_size"]) if b["image_size"] else None, "precision": b["precision"],
             "compile": b["compile"] == "True", "grad_ckpt": False, "channels_last": b["channels_last"] == "True",
             "split": "fit", "step_s": float(b["step_s"]), "samples_per_s": float(b["samples_per_s"]),
             "peak_gib": float(b["peak_gib"]), "source": path.name, "cudnn_tf32": True}
        if tuple(r[k] for k in _CONFIG_KEYS) not in held:
            out.append(r)
    return out


def all_rows() -> tuple[dict, list[dict]]:
    """Every measured row, with its split; "excluded" rows are shown but neither fit nor judged."""
    header, rows = load(DEFAULT)
    if HOSTBOUND.exists():
        rows += load(HOSTBOUND)[1]
    for r in rows:
        if r["precision"] == "fp32" and spec_of(r).family == "cnn" and not r["cudnn_tf32"]:
            r["split"] = "excluded"  # true fp32: not what cardwise's fp32 means (DESIGN.md)
    rows += bench_fit_rows(BENCH_CSV, [r for r in rows if r["split"] == "holdout"])
    from benchmarks.calibration.users import USERS, user_rows

    again = {r["id"]: dict(r, host_factor=host_factor_of(USERS_RERUN, r)) for r in user_rows(USERS_RERUN)} \
        if USERS_RERUN.exists() else {}
    rows += [again.get(r["id"]) or dict(r, host_factor=host_factor_of(USERS, r)) for r in user_rows()]
    seen = set()
    for path in UNSEEN:  # benchmarks/calibration/measure/unseen.py: holdout rows only
        if path.exists():
            got = [dict(r, host_factor=host_factor_of(path, r),
                        split="fit" if r["id"].startswith(REFIT_SETS) and fit_half(r["id"]) else "holdout")
                   for r in user_rows(path) if r["split"] == "holdout" and r["id"] not in seen]
            seen |= {r["id"] for r in got}
            rows += got
    rows += fresh_compiled_rows(COMPILED_FRESH, rows)
    return header, rows


def fresh_compiled_rows(path: Path, rows: list[dict]) -> list[dict]:
    """Compiled configurations timed again, each in a process of its own with the host probed beside it
    (measure/compiled_overlap.py --fresh, ``step_ms`` and ``host_dispatch_us``), as fit rows of throughput only:
    samples/s from that step time, predicted for that probe's host; their memory is their set's
    measurement, judged but fit on nothing (``throughput_only``). The compiled fit rows before them were
    catalog models and few host-bound users' models: the fit kept a fixed host part of ~5 ms per CNN
    step that VGG-BN's whole step (6.8 ms at the reference host) contradicts, and had nanoGPT's host
    28% short (benchmarks/notebook/2026-12-04-compiled-host/compiled_kernels_vs_census.py). Their configurations were holdout rows of the
    fifth to twelfth sets, judged before this; the ids here end in "-fresh"."""
    if not path.exists():
        return []
    by_id = {r["id"]: r for r in rows}
    ref = dispatch_us(HOSTBOUND)
    out = []
    for m in json.loads(path.read_text()):
        base = by_id.get(m["id"])
        if "step_ms" not in m or base is None:
            continue
        out.append(dict(base, id=m["id"] + "-fresh", split="fit", source=path.name, throughput_only=True,
                        samples_per_s=base["micro_batch"] / (m["step_ms"] * 1e-3), step_s=m["step_ms"] * 1e-3,
                        host_factor=m["host_dispatch_us"] / ref, host_dispatch_us=m["host_dispatch_us"]))
    return out


def row_calibration(r: dict, cal: Calibration, device: str = "H200") -> Calibration:
    """``cal`` for the host that measured the row, on the machine of GPU kind ``device`` (the estimate applies a
    host's speed only on its own machine's GPU kind: advisor.throughput)."""
    f = r.get("host_factor", 1.0)
    if f == 1.0:
        return cal
    host = HostSpeed(us_per_step=f * cal.host_dispatch_ref_us, device=device, source="the row's file header")
    return cal.model_copy(update={"host": host})


def model_source(r: dict) -> str:
    """How a user names the row's model: catalog, hf-config or module."""
    return r.get("model_source", "catalog")


def spec_of(r: dict):
    return r["spec"] if "spec" in r else catalog_model(r["model"])


def config_of(r: dict) -> TrainConfig:
    if "config" in r:  # users' rows: the configuration advise estimate chose from the row's flags
        return r["config"]
    # pure-bf16 rows ran plain fused torch.optim.AdamW on bf16 weights (measure/reference.py,
    # run_config: torch.optim.AdamW(..., fused=True)), not KahanAdamW: estimate what ran.
    return TrainConfig(micro_batch=r["micro_batch"], seq_len=r["seq_len"], image_size=r["image_size"],
                       precision=r["precision"], compile=r["compile"], grad_ckpt=r["grad_ckpt"],
                       channels_last=r["channels_last"], pure_bf16_update="plain")


def predict(r: dict, cal: Calibration, hw: HardwareSpec):
    return estimate(spec_of(r), config_of(r), hw, calibration=row_calibration(r, cal, hw.gpu.name))

def family_of(r: dict) -> str:
    spec = spec_of(r)
    return spec.family + (" (user)" if "spec" in r else "")

