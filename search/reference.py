"""`python -m search.reference [--check]`: the reference pages written from the code.

docs/CONFIGURATION.md is every key of a search config (and of a trial's config, the `train`
section), its default, its rule and what it means: the comments next to each field in the
settings classes, which are the one place they are written. docs/ARCHITECTURE.md's metric
schema and statuses come from `trainables.metrics`. `--check` writes nothing and exits 1
when a page is not what the code would write (the suite checks it, so they never drift).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import io
import re
import sys
import textwrap
import tokenize
from collections.abc import Iterator
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from search.config import (
    AblationSection,
    EarlyStoppingSection,
    ResourcesSection,
    RunSection,
    SearchSection,
    TrackingSection,
)
from search.space import SYNTAX
from trainables.data.settings import DataSettings
from trainables.metrics import (
    DEFAULT_OBJECTIVES,
    DEVICE_RECORD,
    MACHINE_METRICS,
    METRICS,
    PRUNED_STATUSES,
    STATUS_ORDER,
    TEXT_METRICS,
)
from trainables.settings import RENAMED_KEYS, TrainSettings

REPO = Path(__file__).resolve().parents[1]
CONFIGURATION = REPO / "docs" / "CONFIGURATION.md"
ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"
SCHEMA_BEGIN = "<!-- metric schema: written by `python -m search.reference` -->"
SCHEMA_END = "<!-- end of the metric schema -->"

# The sections of a search config, in a file's order: (key, settings class, what it is).
SECTIONS: tuple[tuple[str, type[BaseModel], str], ...] = (
    ("data", DataSettings, "which images the trials train on"),
    ("train", TrainSettings, "the settings every trial trains with (`space` samples any of "
     "them instead); also the keys of a trial's config in your own search"),
    ("search", SearchSection, "how the search samples, repeats and judges"),
    ("search.early_stopping", EarlyStoppingSection, "trials trailing their peers at a rung "
     "are stopped (null: every trial trains all its epochs)"),
    ("search.ablation", AblationSection, "after the search, trials around its front re-run "
     "with one sampled setting changed at a time: the report's effects (null: none; "
     "docs/GUIDE.md, 'What each setting does')"),
    ("resources", ResourcesSection, "what each trial gets"),
    ("run", RunSection, "where Ray Tune keeps the search, and retries"),
    ("tracking", TrackingSection, "the MLflow store and experiment"),
)  # fmt: skip
# Fields a section holds that are written in a section of their own, or not by users.
NOT_LISTED = {"train": {"data"}, "search": {"early_stopping", "ablation"}}


def field_notes(model: type[BaseModel]) -> dict[str, str]:
    """Each field's comments in the class's source: the lines just above it and those at
    the end of its lines, in order."""
    source = textwrap.dedent(inspect.getsource(model))
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    lines = source.splitlines()
    notes = {}
    for node in ast.parse(source).body[0].body:  # the class's statements
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above = []
        line = node.lineno - 1
        while line >= 1 and lines[line - 1].strip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        at_end = [comments[n] for n in range(node.lineno, node.end_lineno + 1) if n in comments]
        notes[node.target.id] = " ".join(
            note for note in (*above, *at_end) if note and not _not_a_note(note)
        )
    return notes


def _not_a_note(comment: str) -> bool:
    """Formatter pragmas and a group's heading (`--- ... ---`) say nothing of one field."""
    return comment.startswith(("fmt:", "noqa", "type:", "---"))


def default_of(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "its section"
    return f"`{_yaml(value)}`"


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_yaml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_yaml(item)}" for key, item in value.items()) + "}"
    return str(value)


def rule_of(field: FieldInfo) -> str:
    """The kind of value and its bounds, as a user would write them."""
    return _kind(field.annotation, field.metadata)


def _bounds(metadata: Any) -> list[str]:
    bounds = []
    for item in metadata:
        for name, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            if getattr(item, name, None) is not None:
                bounds.append(f"{sign} {getattr(item, name)}")
        bounds += _bounds(getattr(item, "metadata", ()))  # a Field inside Annotated
    return bounds


def _kind(annotation: Any, metadata: Any = ()) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        listed = ", ".join(f"`{value}`" for value in args)
        return listed if len(args) == 1 else f"one of {listed}"
    if origin is Annotated:
        return _kind(args[0], [*metadata, *args[1:]])
    if origin in (Union, UnionType):
        kinds = [_kind(arg, metadata) for arg in args if arg is not type(None)]
        return ", or ".join(kinds) + (", or null" if type(None) in args else "")
    names = {int: "whole number", float: "number", str: "text", bool: "true or false"}
    kind = names.get(annotation)
    if kind is None:
        kind = {tuple: "list", list: "list", dict: "mapping"}.get(origin, "a section")
    return " ".join([kind, *_bounds(metadata)])


def section_table(key: str, model: type[BaseModel]) -> Iterator[str]:
    notes = field_notes(model)
    yield "| key | default | value | what it is |"
    yield "|---|---|---|---|"
    for name, field in model.model_fields.items():
        if name in NOT_LISTED.get(key, ()):
            continue
        note = _cell(re.sub(r"\bNone\b", "null", notes.get(name, "")))
        yield f"| `{key}.{name}` | {default_of(field)} | {rule_of(field)} | {note} |"


def configuration_reference() -> str:
    lines = [
        "# Configuration reference",
        "",
        "<!-- written by `python -m search.reference` from the settings classes' comments; "
        "a test fails when it differs from what the code would write -->",
        "",
        "A search config is one YAML file (`python -m search.run --config FILE`); any key can",
        "be set on the command line as `key.path=value`. An unknown key, a wrong type or a",
        "value out of range is one message naming the file and the key, and nothing starts.",
        "The shipped configs in `configs/` show every section in use.",
        "",
        "`name` (required): names the search's results folder and MLflow experiment.",
        "",
    ]
    for key, model, what in SECTIONS:
        lines += [f"## `{key}`: {what}", "", *section_table(key, model), ""]
        if key == "train":
            lines += [
                "## `space`: the train settings each trial samples",
                "",
                "Any key of `train` (and its value's rule) can be sampled instead, written as",
                f"{SYNTAX}. `grid` values are all tried first, the rest sampled around them.",
                "",
            ]
    lines += [
        "## Renamed keys",
        "",
        "These still work (in configs, overrides and searches saved before), with a note to "
        "use the new name:",
        "",
        "| old | new |",
        "|---|---|",
        *(f"| `{old}` | `{new}` |" for old, new in RENAMED_KEYS.items()),
        "",
    ]
    return "\n".join(lines)


def metric_schema() -> str:
    """The block of docs/ARCHITECTURE.md that shows `trainables.metrics`."""
    lines = [
        SCHEMA_BEGIN,
        "",
        "| metric | better | what it is |",
        "|---|---|---|",
        *(
            f"| `{name}` | {spec.direction or ''} | {_cell(spec.description)} |"
            for name, spec in METRICS.items()
        ),
        "",
        f"Text, not numbers: {_names(sorted(TEXT_METRICS))}.",
        "Measured on the machine (they vary between runs of one seed; the rest repeat",
        f"exactly): {_names(sorted(MACHINE_METRICS))}.",
        f"The device record, in every report and as MLflow tags: {_names(DEVICE_RECORD)}.",
        f"Default objectives: {', '.join(f'`{m}` ({d})' for m, d in DEFAULT_OBJECTIVES.items())}.",
        "",
        f"Statuses, worst first: {_names(STATUS_ORDER)}; pruned (kept off the front, told to",
        f"the searcher as PRUNED): {_names(sorted(PRUNED_STATUSES))}.",
        "",
        SCHEMA_END,
    ]  # fmt: skip
    return "\n".join(lines)


def _cell(text: str) -> str:
    """Text for a Markdown table's cell: its own bars escaped."""
    return text.replace("|", "\\|")


def _names(names: Any) -> str:
    return ", ".join(f"`{name}`" for name in names)


def with_schema(architecture: str) -> str:
    """docs/ARCHITECTURE.md with its schema block written anew."""
    before, begin, rest = architecture.partition(SCHEMA_BEGIN)
    _, end, after = rest.partition(SCHEMA_END)
    if not begin or not end:
        raise ValueError(f"{ARCHITECTURE} has no block between {SCHEMA_BEGIN} and {SCHEMA_END}")
    return before + metric_schema() + after


def pages() -> dict[Path, str]:
    """Each page as the code would write it."""
    return {
        CONFIGURATION: configuration_reference(),
        ARCHITECTURE: with_schema(ARCHITECTURE.read_text()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m search.reference",
                                     description=__doc__.splitlines()[0])  # fmt: skip
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    stale = []
    for path, text in pages().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text)
    for path in stale:
        verb = "is not what the code would write" if args.check else "written"
        print(f"{path.relative_to(REPO)}: {verb}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
