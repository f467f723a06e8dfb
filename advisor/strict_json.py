"""JSON for numbers that feed arithmetic: finite, bounded, shallow.

Python's ``json`` accepts ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON at all), numbers of
any size (``1e308`` as a hidden size makes every estimate ``inf`` or an ``OverflowError``) and
nesting until the interpreter's recursion limit (a ``RecursionError`` traceback). A file a user
hands to cardwise, such as a Hugging Face ``config.json``, is read with ``loads`` instead: each
of those is a ``JSONLimitError`` (a ``ValueError``) whose message says what and where.
"""

from __future__ import annotations

import json
from typing import Any

# Larger than any size, count or constant a real model config holds (vocabularies ~1e6, context
# lengths ~1e7, rope_theta ~1e8), small enough that products of a few of them stay finite.
MAX_MAGNITUDE = 1e12
# Hugging Face configs nest 3-4 levels (task_specific_params, rope_scaling, text_config); 32 is
# generous and far below the recursion limit.
MAX_DEPTH = 32
_MAX_DIGITS = 64  # digits of a literal; int() of a long one is itself slow (CPython caps it at 4300)


class JSONLimitError(ValueError):
    """Valid-looking JSON outside the limits above."""


def _constant(name: str):
    raise JSONLimitError(f"{name} is not a number JSON allows (nor one a model size can be)")


def _number(text: str, kind):
    if len(text) > _MAX_DIGITS:
        raise JSONLimitError(f"the number {text[:20]}... has {len(text)} digits")
    value = kind(text)
    if abs(value) > MAX_MAGNITUDE:
        raise JSONLimitError(f"the number {text} is out of range (|x| <= {MAX_MAGNITUDE:g})")
    return value


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def loads(text: str) -> Any:
    """``json.loads`` with the limits above: ``json.JSONDecodeError`` for bad syntax,
    ``JSONLimitError`` for NaN/Infinity, out-of-range numbers and deep nesting."""
    try:
        data = json.loads(text, parse_constant=_constant, parse_int=lambda t: _number(t, int),
                          parse_float=lambda t: _number(t, float))
    except RecursionError:
        raise JSONLimitError(f"nested more than {MAX_DEPTH} levels deep") from None
    if _depth(data) > MAX_DEPTH:
        raise JSONLimitError(f"nested more than {MAX_DEPTH} levels deep")
    return data
