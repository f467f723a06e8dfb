"""Form fields: the CLI's own value parsers behind Textual validators, so a value the wizard
accepts is one ``advise`` accepts, with the same message when it is not."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from textual.validation import ValidationResult, Validator

from launcher.cli import flags


def _cli(fn: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type function that raises ValueError(message) instead of ArgumentTypeError."""

    def parse(text: str) -> Any:
        try:
            return fn(text.strip())
        except argparse.ArgumentTypeError as exc:
            raise ValueError(str(exc)) from None

    parse.__name__ = fn.__name__
    return parse


positive_int = _cli(flags.positive_int)
positive_float = _cli(flags.positive_float)
duration_hours = _cli(flags.duration_hours)


def text(value: str) -> str:
    return value.strip()


def count_up_to(limit: int) -> Callable[[str], int]:
    """A positive whole number no larger than ``limit`` (e.g. GPUs detected)."""

    def parse(value: str) -> int:
        n = positive_int(value)
        if n > limit:
            raise ValueError(f"at most {limit} here, got {n}")
        return n

    return parse


def parse_optional(parse: Callable[[str], Any], value: str) -> Any:
    """None for an empty field, else ``parse(value)`` (which may raise ValueError)."""
    return None if not value.strip() else parse(value)


class ParserValidator(Validator):
    """Valid when empty (the field is optional) or when ``parse`` accepts the text."""

    def __init__(self, parse: Callable[[str], Any], required: bool = False):
        super().__init__()
        self.parse = parse
        self.required = required

    def validate(self, value: str) -> ValidationResult:
        if not value.strip():
            return self.failure("required") if self.required else self.success()
        try:
            self.parse(value)
        except ValueError as exc:
            return self.failure(str(exc))
        return self.success()


@dataclass(frozen=True)
class FieldSpec:
    """One form row: the attribute it sets, its label, parser and the hint shown while valid."""

    name: str
    label: str
    parse: Callable[[str], Any]
    hint: str
    placeholder: str = ""
