"""Form fields: the value parsers the CLI uses too (``advisor.units``) behind Textual validators, so
a value the wizard accepts is one ``advise`` accepts, with the same message when it is not."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from textual.validation import ValidationResult, Validator

from advisor import units


positive_int = units.positive_int
positive_float = units.positive_float
duration_hours = units.duration_hours


def text(value: str) -> str:
    return value.strip()


def task(value: str) -> str:
    """--task's choices (advisor.request.Request.task)."""
    v = value.strip().lower()
    if v not in ("pretrain", "finetune"):
        raise ValueError("pretrain or finetune")
    return v


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
