"""The kinds of speed reference a CPU trial times beside its blocks, one per arithmetic
(`trainables.speed_reference`), and the scale a search keeps for them: pure, imported by the
settings.

A trial trains in float32 or under bfloat16 autocast (AMP on a CPU), with its model and
batches contiguous or channels-last; its reference does the same, since a reference of
another arithmetic moves less as the config does (docs/RESULTS.md, sections 44 and 46).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from trainables.eval_choice import LAYOUTS

PRECISIONS = ("fp32", "bfloat16")  # without AMP, with it (bf16 autocast on a CPU)
# a reference per arithmetic a CPU trial can train in: its precision and layout, as the run
# record names them (`precision`, `memory_format`)
REFERENCE_KINDS = tuple(f"{p}_{layout}" for p, layout in itertools.product(PRECISIONS, LAYOUTS))
# a scale written as one number (before the references had kinds): the float32 one's
PLAIN_KIND = REFERENCE_KINDS[0]


def reference_kind(amp: bool, channels_last: bool) -> str:
    """The reference a CPU trial of these settings times beside its blocks."""
    return f"{PRECISIONS[amp]}_{LAYOUTS[channels_last]}"


def kind_settings(kind: str) -> tuple[bool, bool]:
    """(amp, channels_last) of a reference kind, as `reference_kind` names them. Raises
    ValueError for a name that is not a kind."""
    if kind not in REFERENCE_KINDS:
        raise ValueError(f"reference kind {kind!r} is not one of {REFERENCE_KINDS}")
    precision, _, layout = kind.partition("_")
    return PRECISIONS.index(precision) == 1, LAYOUTS.index(layout) == 1


def scales_from(value: float | Mapping[str, float] | None) -> dict[str, float] | None:
    """A speed scale as `TrainSettings.speed_scale` keeps it, images per second by
    reference kind, from one written as a mapping or as one number (the float32, contiguous
    reference's, as searches before the kinds saved it). Raises ValueError naming a kind
    that is not one, or a value that is not positive."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        scales = dict(value)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        scales = {PLAIN_KIND: value}
    else:
        raise ValueError(f"a number or a mapping of {', '.join(REFERENCE_KINDS)} to numbers")
    unknown = sorted(set(scales) - set(REFERENCE_KINDS))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not a reference kind (kinds: "
                         f"{', '.join(REFERENCE_KINDS)})")  # fmt: skip
    for kind, images_per_s in scales.items():
        if (
            isinstance(images_per_s, bool)
            or not isinstance(images_per_s, int | float)
            or not (images_per_s > 0)
        ):
            raise ValueError(f"{kind}: images per second must be a number above 0, "
                             f"not {images_per_s!r}")  # fmt: skip
    return {kind: float(images_per_s) for kind, images_per_s in scales.items()}
