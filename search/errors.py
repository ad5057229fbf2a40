"""User mistakes in a config, collected into one message that names the file and each key."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError


@dataclass(frozen=True)
class Problem:
    path: str  # dotted key path, e.g. "space.batch_size"; "" for the file as a whole
    message: str  # the rule and the value that broke it


class ConfigError(Exception):
    """Every problem found in one config; printed as one message, exit code 2."""

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        lines = [f"error: {count} {noun} in {self.source} (nothing was started):"]
        for problem in self.problems:
            where = f"{problem.path}: " if problem.path else ""
            lines.append(f"  {where}{problem.message}")
        return "\n".join(lines)


def join_path(parts: Iterable[Any]) -> str:
    """('space', 'batch_size', 'choice', 1) -> 'space.batch_size.choice[1]'."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def unknown_key_message(key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(sorted(known))}"
    return f"unknown key{hint}"


def problems_from_validation(
    error: ValidationError,
    prefix: Sequence[Any] = (),
    known_keys: Any = None,
) -> list[Problem]:
    """Translate pydantic's errors into `Problem`s with dotted paths and plain rules.

    `known_keys(path_tuple)` lists the keys valid at a path, for "did you mean" hints.
    """
    problems = []
    for item in error.errors():
        location = (*prefix, *item["loc"])
        if item["type"] == "extra_forbidden":
            known = known_keys(location[:-1]) if known_keys else []
            problems.append(
                Problem(join_path(location), unknown_key_message(str(location[-1]), known))
            )
        else:
            problems.append(Problem(join_path(location), describe(item)))
    return problems


def describe(item: dict[str, Any]) -> str:
    """A pydantic error item as 'must be ..., got ...'."""
    kind, ctx, value = item["type"], item.get("ctx") or {}, item.get("input")
    got = f", got {value!r}"
    rules = {
        "greater_than": lambda: f"must be > {ctx.get('gt')}{got}",
        "greater_than_equal": lambda: f"must be >= {ctx.get('ge')}{got}",
        "less_than": lambda: f"must be < {ctx.get('lt')}{got}",
        "less_than_equal": lambda: f"must be <= {ctx.get('le')}{got}",
        "int_type": lambda: f"must be a whole number{got}",
        "int_parsing": lambda: f"must be a whole number{got}",
        "int_from_float": lambda: f"must be a whole number{got}",
        "float_type": lambda: f"must be a number{got}",
        "float_parsing": lambda: f"must be a number{got}",
        "bool_type": lambda: f"must be true or false{got}",
        "bool_parsing": lambda: f"must be true or false{got}",
        "string_type": lambda: f"must be a string{got}",
        "literal_error": lambda: f"must be one of {ctx.get('expected')}{got}",
        "missing": lambda: "is required but missing",
        "dict_type": lambda: f"must be a mapping of keys to values{got}",
        "model_type": lambda: f"must be a mapping of keys to values{got}",
        "model_attributes_type": lambda: f"must be a mapping of keys to values{got}",
        "list_type": lambda: f"must be a list{got}",
        "string_pattern_mismatch": lambda: f"must match {ctx.get('pattern')}{got}",
        "too_short": lambda: f"must have at least {ctx.get('min_length')} item(s){got}",
        "value_error": lambda: str(ctx.get("error", item["msg"])),
    }
    rule = rules.get(kind)
    return rule() if rule else f"{item['msg'][0].lower()}{item['msg'][1:]}{got}"
