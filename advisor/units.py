"""Parsing of human units shared by the CLI, the Python API and the wizard (no argparse here)."""

from __future__ import annotations

import re

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


def format_hours(h: float) -> str:
    """A duration for people: '40 s', '12 min', '5.1 h', '4.3 days'."""
    if h < 1 / 60:
        return f"{h * 3600:.0f} s"
    if h < 1:
        return f"{h * 60:.0f} min"
    if h < 48:
        return f"{h:.1f} h"
    return f"{h / 24:.1f} days"
