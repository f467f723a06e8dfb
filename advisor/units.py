"""Parsing of human units and user-given numbers (flags, form fields, JSON files), shared by the CLI,
the Python API and the wizard (no argparse here)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from advisor.errors import UserError

_UNIT_H = {"": 1.0, "h": 1.0, "hr": 1.0, "hrs": 1.0, "hour": 1.0, "hours": 1.0, "m": 1 / 60, "min": 1 / 60,
           "mins": 1 / 60, "s": 1 / 3600, "sec": 1 / 3600, "d": 24.0, "day": 24.0, "days": 24.0}


def parse_duration_hours(text: str) -> float:
    """'6h', '90m', '2d', '1h30m', '3600s' or a bare number of hours -> hours."""
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)", text)
    if not parts or re.sub(r"[\d.\sa-zA-Z]", "", text):
        raise UserError(f"cannot read the deadline '{text}'", fix="use e.g. 6h, 90m, 2d or 1h30m")
    total = 0.0
    for num, unit in parts:
        if unit.lower() not in _UNIT_H:
            raise UserError(f"cannot read the deadline '{text}': unknown unit '{unit}'", fix="use s, m, h or d")
        total += float(num) * _UNIT_H[unit.lower()]
    if total <= 0:
        raise UserError(f"the deadline must be positive, got '{text}'", fix="e.g. 6h")
    return total


def format_hours(h: float | None) -> str:
    """A duration for people: '40 s', '12 min', '5.1 h', '4.3 days'; '-' for an unknown one (no dataset size)."""
    if h is None:
        return "-"
    if h < 1 / 60:
        return f"{h * 3600:.0f} s"
    if h < 1:
        return f"{h * 60:.0f} min"
    if h < 48:
        return f"{h:.1f} h"
    return f"{h / 24:.1f} days"


def format_efficiency(x: float | None, measured: bool = False) -> str:
    """A scaling efficiency for people (DESIGN.md: no row reads 100% at N GPUs unless a measurement says so).
    An estimate within half a point of 100% gets one decimal (99.6%, 100.4%), so that rounding never turns
    99.6% into a promise of perfect scaling; an estimate above 100% stays what it is (the count fits a faster
    configuration or shards the optimizer step: the table's "changed" column says which, docs/design.md
    "Decision policy"). A measured one (``advise bench``) is shown as measured."""
    if x is None:
        return "-"
    whole = f"{x:.0%}"
    if measured or whole != "100%":
        return whole
    return f"{x:.1%}"


# ---------------------------------------------------------------- value parsers
# One home for reading the numbers people type, shared by the CLI (wrapped as argparse types in
# cli/flags.py) and the wizard's form validators. Each raises ValueError with the message to show.
# Every number has a range (issue 31: 10**40 as --seq-len overflowed in the estimate, --batch-size
# hung, `serve --poll 1e-9` spun): a parser carries it as ``bounds`` (low, high), the CLI states it in
# --help and the error, and a flag of the Request takes its range from the Request's field.

# The widest range of any count (steps, limits, sizes): beyond 10**12 a count is a typo, and below
# 2**53 float arithmetic on it stays exact and SQLite's 64-bit integers hold it (cardwise's choice).
MAX_COUNT = 10**12
MAX_MAGNITUDE = 1e12  # the same bound for other numbers, and for JSON numbers (below)
_SHOWN = 24  # characters of a rejected value echoed back (a 5,000-digit number is not a message)


def _shown(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN - 4]}... ({len(text)} characters)"


def _number(x) -> str:
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e15):
        return f"{int(x):_}" if abs(x) >= 100_000 else str(int(x))  # 1_000_000 reads better than 1000000
    return f"{x:g}"


def range_text(low, high, *, low_open: bool = False) -> str:
    """'1..1_000_000', '> 0 and <= 3_600' (how --help and the errors state a range)."""
    if low_open:
        return f"> {_number(low)} and <= {_number(high)}"
    return f"{_number(low)}..{_number(high)}"


def int_range(low: int, high: int):
    """A parser of whole numbers in ``low..high`` (inclusive); ``parse.range`` says it for --help."""

    def parse(text: str) -> int:
        try:
            v = int(text.strip())  # 4,300+ digits is a ValueError too (CPython's int() limit)
        except ValueError:
            raise ValueError(f"expected a whole number, got '{_shown(text)}'") from None
        if v < low:
            raise ValueError(f"must be at least {low} ({range_text(low, high)}), got {v}")
        if v > high:
            raise ValueError(f"must be at most {_number(high)} ({range_text(low, high)}), got {_shown(str(v))}")
        return v

    parse.bounds, parse.range = (low, high), range_text(low, high)
    return parse


def float_range(low: float, high: float, *, low_open: bool = True):
    """A parser of finite numbers in (low, high] (``low_open``) or [low, high]."""
    shown = range_text(low, high, low_open=low_open)

    def parse(text: str) -> float:
        try:
            v = float(text.strip())
        except ValueError:
            raise ValueError(f"expected a number {shown}, got '{_shown(text)}'") from None
        if not math.isfinite(v):
            what = "a positive finite number" if low_open and low == 0 else "a finite number"
            raise ValueError(f"must be {what} ({shown}), got {_shown(text)}")
        if not (math.isfinite(v) and (v > low if low_open else v >= low) and v <= high):
            raise ValueError(f"must be {shown}, got {_shown(text)}")
        return v

    parse.bounds, parse.range = (low, high), shown
    return parse


def _int_at_least(text: str, low: int) -> int:
    return int_range(low, MAX_COUNT)(text)


positive_int = int_range(1, MAX_COUNT)
nonneg_int = int_range(0, MAX_COUNT)


# A TCP port, 1..65535 (a larger number would reach the rendezvous and fail in every rank).
port = int_range(1, 65535)
positive_float = float_range(0, MAX_MAGNITUDE)
# The service's loop: below 0.05 s between looks it spends its time reading the store (`serve --poll
# 1e-9` spun a core); a stop's grace from 0.1 s (a rank's SIGTERM handler needs a moment) to a day.
poll_seconds = float_range(0.05, 3600.0, low_open=False)
# DataLoader workers per rank: each is a process; more than 256 per rank exceeds any node's cores (cardwise's choice).
worker_count = int_range(0, 256)
grace_seconds = float_range(0.1, 86400.0, low_open=False)
MAX_SHAPE_ELEMENTS = 2**40  # per-sample elements of --input-shape: above it numel overflows the tracer's arithmetic (cardwise's choice)


def margin(text: str) -> float:
    """A safety margin as a fraction below 1: '0.15' or '15%' (the deadline less this much)."""
    t = text.strip()
    pct = t.endswith("%")
    try:
        v = float(t[:-1] if pct else t) / (100.0 if pct else 1.0)
    except ValueError:
        raise ValueError(f"expected a fraction like 0.15 or 15%, got '{text}'") from None
    if not 0.0 <= v < 1.0:  # NaN fails this too
        raise ValueError(f"must be {margin.range}, got {_shown(text)}")
    return v


margin.range = ">= 0 and < 1"  # cli.main states it in --help


def shape(text: str) -> tuple[int, ...]:
    """'3,224,224' or '3x224x224' -> (3, 224, 224)."""
    try:
        dims = tuple(int(p) for p in text.replace("x", ",").split(",") if p.strip())
    except ValueError:
        raise ValueError(f"expected comma-separated sizes like 3,224,224, got '{_shown(text)}'") from None
    if not dims or any(d < 1 for d in dims):
        raise ValueError(f"sizes must be positive, got '{_shown(text)}'")
    if len(dims) > 8 or math.prod(dims) > MAX_SHAPE_ELEMENTS:
        raise ValueError(f"at most 8 sizes and {MAX_SHAPE_ELEMENTS:,} elements per sample, got '{_shown(text)}'")
    return dims


MAX_DEADLINE_H = 876_000.0  # 100 years (cardwise's choice: anything longer is a typo)


def duration_hours(text: str) -> float:
    """parse_duration_hours with a ValueError (the form of the other parsers)."""
    try:
        hours = parse_duration_hours(text.strip())
    except UserError as exc:
        raise ValueError(exc.message().replace("\n  fix:", ";")) from None
    if not math.isfinite(hours) or hours > MAX_DEADLINE_H:
        raise ValueError(f"must be at most {MAX_DEADLINE_H:g} hours (100 years), got '{_shown(text)}'")
    return hours


duration_hours.bounds, duration_hours.range = (0, MAX_DEADLINE_H), f"> 0 and <= {MAX_DEADLINE_H:g} h"


# ---------------------------------------------------------------- JSON numbers
# Python's ``json`` accepts ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON at all), numbers of
# any size (``1e308`` as a hidden size makes every estimate ``inf`` or an ``OverflowError``) and
# nesting until the interpreter's recursion limit (a ``RecursionError`` traceback). A file a user
# hands to cardwise whose numbers feed arithmetic, such as a Hugging Face ``config.json``, is read
# with ``strict_json_loads`` instead: each of those is a ``JSONLimitError`` (a ``ValueError``).

# MAX_MAGNITUDE (above): larger than any size, count or constant a real model config holds (vocabularies
# ~1e6, context lengths ~1e7, rope_theta ~1e8), small enough that products of a few of them stay finite.
# Hugging Face configs nest 3-4 levels (task_specific_params, rope_scaling, text_config); 32 is
# generous and far below the recursion limit.
MAX_DEPTH = 32
_MAX_DIGITS = 64  # digits of a literal; int() of a long one is itself slow (CPython caps it at 4300)


class JSONLimitError(ValueError):
    """Valid-looking JSON outside the limits above."""


def _json_constant(name: str):
    raise JSONLimitError(f"{name} is not a number JSON allows (nor one a model size can be)")


def _json_number(text: str, kind):
    if len(text) > _MAX_DIGITS:
        raise JSONLimitError(f"the number {text[:20]}... has {len(text)} digits")
    value = kind(text)
    if abs(value) > MAX_MAGNITUDE:
        raise JSONLimitError(f"the number {text} is out of range (|x| <= {MAX_MAGNITUDE:g})")
    return value


def _json_depth(value: Any) -> int:
    """Nesting depth of parsed JSON, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def strict_json_loads(text: str) -> Any:
    """``json.loads`` with the limits above: ``json.JSONDecodeError`` for bad syntax,
    ``JSONLimitError`` for NaN/Infinity, out-of-range numbers and deep nesting."""
    try:
        data = json.loads(text, parse_constant=_json_constant, parse_int=lambda t: _json_number(t, int),
                          parse_float=lambda t: _json_number(t, float))
    except RecursionError:
        raise JSONLimitError(f"nested more than {MAX_DEPTH} levels deep") from None
    if _json_depth(data) > MAX_DEPTH:
        raise JSONLimitError(f"nested more than {MAX_DEPTH} levels deep")
    return data


# ---------------------------------------------------------------- network links
# Names people type for the network between nodes, Gbit/s (IBTA link speeds: EDR 100, HDR 200, NDR 400,
# XDR 800 at 4x; Ethernet by its line rate).
_IB_NAMES = {"edr": 100.0, "hdr": 200.0, "ndr": 400.0, "xdr": 800.0}
_NETWORK_HELP = ("give a unit: --network 100GbE, --network 400G-IB (InfiniBand), --network NDR, "
                 "--network 25Gb/s or --network 12.5GB/s")


def network(text: str):
    """'100GbE', '400G-IB', 'HDR', '100Gb/s', '12.5GB/s' -> comm.NetworkLink; a bare number is refused
    (Gb/s and GB/s differ 8x, the old --network-gbps's trap)."""
    from advisor.comm import NetworkLink

    raw = text.strip()
    t = raw.lower().replace(" ", "")
    if t in _IB_NAMES:
        return NetworkLink(kind="infiniband", gbit_s=_IB_NAMES[t], text=raw, source=f"--network {raw}")
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(gbe|g-?ib|gib|gbit/?s|gb/s|gbps|gbyte/?s|gb/?s)?", t.replace("gigabit", "gbit"))
    # Keep the case of "Gb/s" vs "GB/s": they differ by 8.
    if m is None:
        raise ValueError(f"cannot read the network '{text}'; {_NETWORK_HELP}")
    value, unit = float(m.group(1)), m.group(2)
    if not unit:
        raise ValueError(f"the network '{text}' has no unit (Gb/s and GB/s differ 8x); {_NETWORK_HELP}")
    if value <= 0:
        raise ValueError(f"the network must be faster than 0, got '{text}'")
    if unit == "gbe":
        return NetworkLink(kind="ethernet", gbit_s=value, text=raw, source=f"--network {raw}")
    if unit in ("g-ib", "gib"):
        return NetworkLink(kind="infiniband", gbit_s=value, text=raw, source=f"--network {raw}")
    bytes_unit = re.search(r"GB/?s|GByte", raw.replace(" ", "")) is not None
    if unit in ("gbps",):
        bytes_unit = False  # "Gbps" is gigabits by convention
    gbit = value * 8 if bytes_unit else value
    return NetworkLink(kind="infiniband" if gbit >= 100 else "ethernet", gbit_s=gbit, text=raw,
                       source=f"--network {raw} (kind assumed from the rate: InfiniBand at 100 Gb/s and up, else Ethernet)")


_HOST_RAM_HELP = "give a unit: --host-ram 512GiB, --host-ram 1TiB or --host-ram 768GB (GB and GiB differ by 7%)"
# bytes per unit, binary and decimal (IEC 80000-13); one node's RAM up to 1 PiB
_RAM_UNITS = {"mib": 2**20, "gib": 2**30, "tib": 2**40, "mb": 10**6, "gb": 10**9, "tb": 10**12}
MAX_HOST_RAM_GIB = 2.0**20


def host_ram_gib(text: str) -> float:
    """One node's RAM: '512GiB', '1TiB', '768GB', '1.5 TB' -> GiB; a bare number is refused (GB and GiB
    differ by 7%, MiB and GiB by 1024x), as --network refuses one."""
    t = str(text).strip().lower().replace(" ", "")
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([a-z]*)", t)
    if m is None:
        raise ValueError(f"cannot read the host RAM '{text}'; {_HOST_RAM_HELP}")
    value, unit = float(m.group(1)), m.group(2)
    if not unit:
        raise ValueError(f"the host RAM '{text}' has no unit; {_HOST_RAM_HELP}")
    if unit not in _RAM_UNITS:
        raise ValueError(f"the host RAM '{text}' has an unknown unit '{m.group(2)}'; {_HOST_RAM_HELP}")
    gib = value * _RAM_UNITS[unit] / 2**30
    if not 0 < gib <= MAX_HOST_RAM_GIB:
        raise ValueError(f"the host RAM must be more than 0 and at most 1 PiB per node, got '{text}'")
    return gib
