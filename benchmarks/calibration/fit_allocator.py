"""Fit ``advisor/data/allocator.json``: the caching allocator's reserve over the allocated peak (issue 39).

    python -m benchmarks.calibration.fit_allocator            # writes advisor/data/allocator.json
    python -m benchmarks.calibration.fit_allocator --out F    # elsewhere (tests/test_calibration_reproduces.py)

Reads every measured row in ``benchmarks/calibration/results/*.jsonl`` (H200 and H100 calls) that has both
``peak_gib`` (``torch.cuda.max_memory_allocated()``) and ``reserved_gib`` (``max_memory_reserved()``, the same
timed steps; ``measure/steploop.memory``), one per (call, row id), and keeps those whose allocated peak is at
least ``MIN_PEAK_GIB`` (smaller runs never decide whether a plan fits). The reserve is the ``QUANTILE`` of
(reserved - allocated) / allocated over them: a plan with less room than that is tight (``advisor.allocator``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from advisor.allocator import PACKAGED, AllocatorReserve

RESULTS = Path(__file__).with_name("results")
MIN_PEAK_GIB = 8.0
# One run in ten reserved more than this over its allocated peak (with room to spare: under pressure the
# allocator frees its cache and retries, so this is the reserve a plan can count on needing at most, most times).
QUANTILE = 0.9


def reserve_rows(results: Path = RESULTS) -> dict[tuple[str, str], float]:
    """(file, row id) -> (reserved - allocated) / allocated, for rows of at least MIN_PEAK_GIB."""
    out = {}
    for path in sorted(results.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            peak, reserved = r.get("peak_gib"), r.get("reserved_gib")
            if "error" in r or not peak or not reserved or peak < MIN_PEAK_GIB:
                continue
            out[(path.name, r["id"])] = (reserved - peak) / peak
    return out


def fit(results: Path = RESULTS) -> AllocatorReserve:
    fractions = sorted(reserve_rows(results).values())
    at = fractions[round(QUANTILE * (len(fractions) - 1))]
    return AllocatorReserve(
        reserve_fraction=round(at, 4), quantile=QUANTILE, min_peak_gib=MIN_PEAK_GIB, rows=len(fractions),
        median_fraction=round(statistics.median(fractions), 4), max_fraction=round(fractions[-1], 4),
        source="benchmarks/calibration/fit_allocator.py: max_memory_reserved over max_memory_allocated of the "
               "measured rows in benchmarks/calibration/results/*.jsonl (H200 and H100)")


def dumps(reserve: AllocatorReserve) -> str:
    return json.dumps(reserve.model_dump(), indent=1) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=PACKAGED)
    args = ap.parse_args()
    reserve = fit()
    args.out.write_text(dumps(reserve))
    print(f"wrote {args.out}: reserve {reserve.reserve_fraction:.1%} of the allocated peak "
          f"(quantile {reserve.quantile} of {reserve.rows} rows; median {reserve.median_fraction:.1%})")


if __name__ == "__main__":
    main()
